use super::*;
use crate::policy::outcome::Outcome;
use crate::registry::PolicyKey;

fn on_kcp(kind: PolicyKind, name: &str) -> PolicyRef {
    PolicyRef::new(kind, &PolicyKey::new("root:team", name))
}

#[test]
fn deciders_name_themselves_for_metrics_and_for_why() {
    #[rustfmt::skip]
    let fixed = [
        (Decider::None, "none"), (Decider::Strict, "strict"), (Decider::BreakGlass, "break-glass"),
        (Decider::BreakGlassRefused, "break-glass"), (Decider::NotReady, "not-ready"),
        (Decider::BreakGlassAuthorized, "break-glass-authorized"), (Decider::Warn, "warn"),
        (Decider::Unreadable, "unreadable"), (Decider::Deferred, "deferred"),
        (Decider::Eviction, "eviction"), (Decider::Containment, "containment"), (Decider::Audit, "audit"),
    ];
    for (decider, name) in fixed {
        assert!(matches!(
            decider.metric_label(),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(decider.metric_label(), name);
        assert_eq!(decider.metric_decider(), name);
        assert_eq!(decider.to_string(), name);
        assert_eq!(decider.policy(), None);
    }
    // A label: "label" in metrics, its key where `why` names it.
    let l = label("holdfast.dev/protected");
    assert_eq!(l.metric_label(), "label");
    assert_eq!(l.to_string(), "label holdfast.dev/protected");
    // A policy object: its kind and name, and its logical cluster on kcp.
    let p = policy(PolicyKind::DependencyRule, "vm-dependencies");
    assert_eq!(p.metric_label(), "DependencyRule/vm-dependencies");
    // The metrics' decider label stays bounded: the kind, never the name.
    assert_eq!(p.metric_decider(), "DependencyRule");
    assert_eq!(p.to_string(), "DependencyRule/vm-dependencies");
    let kcp = Decider::Policy(on_kcp(PolicyKind::AnchorRule, "composites"));
    assert_eq!(
        kcp.metric_label(),
        "AnchorRule/composites (logical cluster root:team)"
    );
    assert_eq!(kcp.metric_decider(), "AnchorRule");
    assert_eq!(
        kcp.policy().map(|p| (p.kind, &*p.key.name)),
        Some((PolicyKind::AnchorRule, "composites"))
    );
    assert_eq!(
        serde_json::to_value(&l).expect("serializes"),
        json!("label holdfast.dev/protected")
    );
}

#[test]
fn the_first_enforced_finding_decides_and_audits_are_kept() {
    let rp = on_kcp(PolicyKind::ResourceProtection, "audited");
    let dr = on_kcp(PolicyKind::DependencyRule, "refs");
    let cs = on_kcp(PolicyKind::CriticalService, "warned");
    let mut out = Outcome::default();
    out.record(Enforcement::Audit, rp.clone(), "audit".into(), vec![]);
    out.record(Enforcement::Warn, cs.clone(), "warn".into(), vec![]);
    out.lookup_failed(Enforcement::Enforce, dr.clone(), "unverified".into());
    out.record(
        Enforcement::Enforce,
        rp.clone(),
        "later".into(),
        vec!["x".into()],
    );
    let e = out.into_evaluation();
    assert_decided(
        &e,
        Decider::Policy(dr),
        "DependencyRule/refs (logical cluster root:team)",
    );
    let d = denied(&e);
    assert_eq!(
        (d.kind, d.message.as_str(), d.blockers.len()),
        (DenialKind::LookupFailed, "unverified", 0)
    );
    assert_eq!(e.audits, vec!["audit".to_string()]);

    // Without an enforced finding: warnings (a Warn one, or an Audit one that could
    // not be checked) allow with warnings.
    let mut out = Outcome::default();
    out.lookup_failed(Enforcement::Audit, rp.clone(), "audit unverified".into());
    out.record(Enforcement::Warn, cs, "warn".into(), vec![]);
    let e = out.into_evaluation();
    assert_decided(&e, Decider::Warn, "warn");
    assert_eq!(
        e.decision,
        Decision::Warn(vec!["audit unverified".into(), "warn".into()])
    );
    assert!(e.audits.is_empty());

    // Audits alone allow, counted; nothing at all allows.
    let mut out = Outcome::default();
    out.record(Enforcement::Audit, rp, "audit".into(), vec![]);
    let e = out.into_evaluation();
    assert_decided(&e, Decider::Audit, "audit");
    assert_eq!(e.decision, Decision::Allow);
    assert_decided(&Outcome::default().into_evaluation(), Decider::None, "none");
}
