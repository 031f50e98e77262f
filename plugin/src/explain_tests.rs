//! Unit tests of `explain.rs`.

use super::*;
use holdfast_shared::{
    policy::{BreakGlassState, Evaluation, PolicyRef},
    registry::PolicyKey,
};
use serde_json::json;

fn res(group: &str, resource: &str, kind: &str, short: &[&str]) -> ApiResourceInfo {
    ApiResourceInfo {
        group: group.to_string(),
        version: "v1".to_string(),
        resource: resource.to_string(),
        singular: kind.to_ascii_lowercase(),
        kind: kind.to_string(),
        namespaced: true,
        short_names: short.iter().map(|s| s.to_string()).collect(),
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn targets_parse_in_both_forms() {
    assert_eq!(
        parse_target(&args(&["cm", "x"])),
        Ok(("cm".to_string(), "x".to_string()))
    );
    assert_eq!(
        parse_target(&args(&["vpcs.network.example.com/a"])),
        Ok(("vpcs.network.example.com".to_string(), "a".to_string()))
    );
    for bad in [
        &["x"][..],
        &["a/"],
        &["/b"],
        &["a", "b", "c"],
        &["a/b", "c"],
        &[],
    ] {
        assert_eq!(
            parse_target(&args(bad)),
            Err(TargetError::Shape(bad.join(" "))),
            "{bad:?}"
        );
    }
}

#[test]
fn types_resolve_like_kubectl() {
    let all = vec![
        res("", "configmaps", "ConfigMap", &["cm"]),
        res("", "namespaces", "Namespace", &["ns"]),
        res("network.example.com", "vpcs", "VPC", &[]),
        res("other.example.com", "vpcs", "VPC", &[]),
    ];
    for name in ["cm", "configmaps", "configmap", "ConfigMap", "CM"] {
        assert_eq!(
            resolve(&all, name).map(|r| &r.resource),
            Ok(&all[0].resource)
        );
    }
    assert_eq!(
        resolve(&all, "ns").map(|r| r.kind.as_str()),
        Ok("Namespace")
    );
    assert_eq!(
        resolve(&all, "vpcs").map(|r| r.group.as_str()),
        Ok("network.example.com")
    );
    assert_eq!(
        resolve(&all, "vpcs.other.example.com").map(|r| r.group.as_str()),
        Ok("other.example.com")
    );
    assert_eq!(
        resolve(&all, "widgets"),
        Err(TargetError::UnknownType("widgets".to_string()))
    );
}

#[test]
fn settings_parse_from_the_annotation() {
    let (labels, strict) = parse_settings(
        r#"{"strict":true,"protectionLabels":["example.com/keep=yes","holdfast.dev/protected=Always,Cascading,true"]}"#,
    )
    .expect("parses");
    assert!(strict);
    let keys: Vec<String> = labels.iter().map(ToString::to_string).collect();
    assert_eq!(
        keys,
        [
            "holdfast.dev/protected=Always,Cascading,true",
            "example.com/keep=yes"
        ]
    );
    assert!(parse_settings("{").is_err());
    assert_eq!(
        parse_settings(r#"{"protectionLabels":[]}"#)
            .err()
            .as_deref(),
        Some("holdfast.dev/settings has no boolean \"strict\"")
    );
    assert!(parse_settings(r#"{"strict":false,"protectionLabels":["bad key!"]}"#).is_err());
}

fn finding(decider: Decider, enforcement: Enforcement, blockers: usize) -> Finding {
    Finding {
        message: format!("holdfast: {decider}"),
        decider,
        enforcement,
        lookup_failed: false,
        blockers: (0..blockers).map(|i| format!("VM ns/vm-{i}")).collect(),
    }
}

fn policy(kind: PolicyKind, name: &str) -> Decider {
    Decider::Policy(PolicyRef::new(kind, &PolicyKey::new("", name)))
}

fn object() -> ObjectRef {
    ObjectRef {
        api_version: "v1".to_string(),
        kind: "ConfigMap".to_string(),
        resource: "configmaps".to_string(),
        namespace: Some("shop".to_string()),
        name: "cfg".to_string(),
    }
}

#[test]
fn a_refusal_lists_every_blocker_and_the_ways_out() {
    let deny = Evaluation {
        decision: Decision::Deny(holdfast_shared::policy::Denial {
            message: "holdfast: refused".to_string(),
            blockers: Vec::new(),
            kind: holdfast_shared::policy::DenialKind::Protected,
        }),
        decider: Decider::Label {
            key: "holdfast.dev/protected".to_string(),
        },
        audits: Vec::new(),
    };
    let explanation = Explanation {
        evaluation: deny,
        findings: vec![
            finding(
                Decider::Label {
                    key: "holdfast.dev/protected".to_string(),
                },
                Enforcement::Enforce,
                1,
            ),
            finding(
                policy(PolicyKind::DependencyRule, "vms"),
                Enforcement::Enforce,
                7,
            ),
            finding(
                policy(PolicyKind::ResourceProtection, "audit-only"),
                Enforcement::Audit,
                1,
            ),
        ],
        break_glass: BreakGlassState {
            active: None,
            ignored: None,
        },
    };
    let r = why_report(
        object(),
        ("alice".to_string(), vec!["dev".to_string()]),
        explanation.clone(),
        Ok(false),
        false,
        Vec::new(),
    );
    assert!(!r.allowed);
    assert_eq!(r.decision, "deny");
    assert_eq!(r.protections[1].blockers.len(), 7);
    assert_eq!(
        r.ways_out,
        [
            "remove the label: kubectl label configmaps cfg -n shop holdfast.dev/protected-",
            "delete or change its 7 dependent(s) first (DependencyRule/vms)",
            "break glass: ask someone allowed to bypass protection (verb bypass on \
             protections.holdfast.dev) to set holdfast.dev/skip-protection=true; you may not",
        ]
    );
    let text = render_why(&r);
    assert!(text.starts_with(
        "ConfigMap shop/cfg: DELETE would be REFUSED (decided by: label) for user alice\n"
    ));
    assert!(text.contains("    blockers (7):\n"), "{text}");
    assert!(text.contains("      VM ns/vm-6\n"), "{text}");
    assert!(
        text.contains("  - ResourceProtection/audit-only (mode Audit)\n"),
        "{text}"
    );
    let strict = why_report(
        object(),
        ("alice".to_string(), Vec::new()),
        explanation,
        Ok(true),
        true,
        Vec::new(),
    );
    assert_eq!(
        strict.ways_out[0],
        "strict mode: mark it exempt first (kubectl label configmaps cfg -n shop \
         holdfast.dev/strict-exempt=true, which takes the bypass permission), then remove \
         the label: kubectl label configmaps cfg -n shop holdfast.dev/protected-"
    );
    assert_eq!(
        strict.ways_out[2],
        "break glass (you may): kubectl annotate configmaps cfg -n shop \
         holdfast.dev/skip-protection=true"
    );
    let json = serde_json::to_value(&r).expect("serializes");
    assert_eq!(json["protections"][1]["enforcement"], "Enforce");
    assert_eq!(
        json["protections"][0]["policy"],
        "label holdfast.dev/protected"
    );
    assert_eq!(json["protections"][1]["policy"], "DependencyRule/vms");
    assert_eq!(json["decidedBy"], "label");
    assert_eq!(json["breakGlass"]["callerMayBypass"], false);
    assert_eq!(json["object"]["namespace"], "shop");
}

#[test]
fn an_unprotected_object_has_no_way_out_to_take() {
    let explanation = Explanation {
        evaluation: Evaluation {
            decision: Decision::Allow,
            decider: Decider::None,
            audits: Vec::new(),
        },
        findings: Vec::new(),
        break_glass: BreakGlassState {
            active: None,
            ignored: None,
        },
    };
    let r = why_report(
        object(),
        ("bob".to_string(), Vec::new()),
        explanation,
        Err("forbidden".to_string()),
        false,
        Vec::new(),
    );
    assert!(r.allowed);
    assert!(r.ways_out.is_empty());
    assert!(render_why(&r).contains("Protections: none\n"));
    assert!(render_why(&r).contains(
        "Break-glass: not set; your bypass permission could not be checked: forbidden\n"
    ));
}

#[test]
fn delete_reviews_look_like_the_api_servers() {
    let ns = ApiResourceInfo {
        namespaced: false,
        ..res("", "namespaces", "Namespace", &["ns"])
    };
    let user = UserInfo {
        username: "alice".to_string(),
        ..Default::default()
    };
    let r = delete_review(&ns, json!({"metadata": {"name": "shop"}}), user.clone());
    assert_eq!(r.operation, Operation::Delete);
    assert_eq!(r.namespace.as_deref(), Some("shop"));
    assert_eq!(r.name.as_deref(), Some("shop"));
    assert!(r.is_namespace());
    assert_eq!(r.user_info.username, "alice");
    let vpc = res("network.test.io", "vpcs", "VPC", &[]);
    let r = delete_review(
        &vpc,
        json!({"metadata": {"name": "v", "namespace": "shop"}}),
        user,
    );
    assert_eq!(r.describe(), "VPC shop/v");
    assert_eq!(r.resource.group_resource(), "vpcs.network.test.io");
    assert!(r.object.is_none());
    assert_eq!(
        r.old_object.as_ref().map(|o| &o["metadata"]["name"]),
        Some(&json!("v"))
    );
}

#[test]
fn routes_and_conditions() {
    let cfg = json!({"webhooks": [
        {"name": "policies-0.holdfast.dev", "rules": [
            {"operations": ["DELETE"], "apiGroups": ["network.example.com"], "resources": ["vpcs"]}
        ]},
        {"name": "labels.holdfast.dev", "rules": [
            {"operations": ["UPDATE"], "apiGroups": ["*"], "resources": ["*"]}
        ]}
    ]});
    assert!(routes_delete(&cfg, "network.example.com", "vpcs"));
    assert!(!routes_delete(&cfg, "network.example.com", "subnets"));
    assert!(!routes_delete(&json!({}), "", "configmaps"));
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    assert_eq!(not_ready(&ready), None);
    let not = json!({"status": {"conditions": [
        {"type": "Invalid", "status": "False", "reason": "Valid", "message": "valid"},
        {"type": "Ready", "status": "False", "reason": "NotAdmissionControlled", "message": "events expire"}
    ]}});
    assert_eq!(
        not_ready(&not),
        Some((
            "NotAdmissionControlled".to_string(),
            "events expire".to_string()
        ))
    );
    assert_eq!(
        not_ready(&json!({})).map(|r| r.0).as_deref(),
        Some("NoStatus")
    );
}
