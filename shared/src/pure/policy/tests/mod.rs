//! Unit tests of the policy evaluation.

use super::*;
use crate::{
    api::common::{Enforcement, GroupResource},
    index::Referrer,
    labels::{ProtectionLabel, ProtectionLabels},
    policy::messages::BYPASS_HINT,
    registry::{CompiledAnchor, CompiledCritical, CompiledDependency, CompiledProtection},
    review::{AdmissionRequest, Operation, parse_review},
};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::sync::Arc;

/// Synchronous wrapper for the tests (glob imports are shadowed by this).
fn evaluate<V: ClusterView>(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Evaluation {
    futures::executor::block_on(super::evaluate(req, cfg, view, now))
}

pub(crate) fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T08:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

pub(crate) fn review(
    op: &str,
    kind: &str,
    resource: &str,
    object: Value,
    old: Value,
) -> AdmissionRequest {
    let body = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
        "uid":"uid-1","kind":{"group":"","version":"v1","kind":kind},
        "resource":{"group":"","version":"v1","resource":resource},
        "name":"obj","namespace":"ns","operation":op,"userInfo":{"username":"alice"},
        "object":object,"oldObject":old}});
    match parse_review(body.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

pub(crate) fn cm(labels: Value, annotations: Value) -> Value {
    json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"obj","namespace":"ns",
        "labels":labels,"annotations":annotations}})
}

pub(crate) fn delete(obj: Value) -> AdmissionRequest {
    review("DELETE", "ConfigMap", "configmaps", Value::Null, obj)
}

pub(crate) fn update(old: Value, new: Value) -> AdmissionRequest {
    review("UPDATE", "ConfigMap", "configmaps", new, old)
}

pub(crate) fn cfg(strict: bool, extra: &[&str]) -> PolicyConfig {
    PolicyConfig {
        labels: ProtectionLabels::with_extra(
            extra
                .iter()
                .map(|s| s.parse::<ProtectionLabel>().expect("valid label")),
        ),
        strict,
        ..PolicyConfig::default()
    }
}

/// Asserts who decided `e`: the variant, and the label the webhook's metrics give it.
pub(crate) fn assert_decided(e: &Evaluation, decider: Decider, metric_label: &str) {
    assert_eq!(e.decider, decider, "{e:?}");
    assert_eq!(e.decider.metric_label(), metric_label, "{e:?}");
}

/// The protection label `key`, as a decider.
pub(crate) fn label(key: &str) -> Decider {
    Decider::Label { key: key.into() }
}

/// The policy object `name` of `kind` (plain Kubernetes), as a decider.
pub(crate) fn policy(kind: PolicyKind, name: &str) -> Decider {
    Decider::Policy(PolicyRef::new(
        kind,
        &crate::registry::PolicyKey::new("", name),
    ))
}

/// What a test view's `object` answers.
pub(crate) type Found = Result<Option<Arc<Value>>, LookupError>;

/// `req` judged under `cfg` with no policy objects.
fn judge(req: &AdmissionRequest, cfg: &PolicyConfig) -> Evaluation {
    evaluate(req, cfg, &NoPolicies, now())
}

/// The DELETE of a ConfigMap carrying `labels` and `annotations`, under the default
/// configuration and no policy objects.
fn plain_delete(labels: Value, annotations: Value) -> Evaluation {
    judge(&delete(cm(labels, annotations)), &cfg(false, &[]))
}

/// Resources as the reviews name them: (group, resource, kind).
pub(crate) const NAMESPACE: (&str, &str, &str) = ("", "namespaces", "Namespace");
pub(crate) const DEPLOYMENT: (&str, &str, &str) = ("apps", "deployments", "Deployment");
pub(crate) const CONFIGMAP: (&str, &str, &str) = ("", "configmaps", "ConfigMap");
pub(crate) const PVC: (&str, &str, &str) = ("", "persistentvolumeclaims", "PersistentVolumeClaim");
pub(crate) const VPC: (&str, &str, &str) = ("network.test.io", "vpcs", "VPC");
pub(crate) const CRD: (&str, &str, &str) = (
    "apiextensions.k8s.io",
    "customresourcedefinitions",
    "CustomResourceDefinition",
);

/// The DELETE, as user bob, of `kind` `name` (in `ns`) of `group`/`resource`, carrying
/// `labels`; `request_ns` is the namespace the review names.
pub(crate) fn delete_review(
    (group, resource, kind): (&str, &str, &str),
    ns: Option<&str>,
    request_ns: Option<&str>,
    name: &str,
    labels: Value,
) -> AdmissionRequest {
    let mut meta = json!({"name": name, "labels": labels});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    let body = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
        "uid":"u","kind":{"group":group,"version":"v1","kind":kind},
        "resource":{"group":group,"version":"v1","resource":resource},
        "name":name,"namespace":request_ns,"operation":"DELETE","userInfo":{"username":"bob"},
        "object":null,"oldObject":{"metadata": meta}}});
    parse_review(body.to_string().as_bytes()).expect("review")
}

/// `review` with its objects (old and new) in logical cluster `cluster` (kcp).
pub(crate) fn in_cluster(mut review: AdmissionRequest, cluster: &str) -> AdmissionRequest {
    for o in [review.old_object.as_mut(), review.object.as_mut()]
        .into_iter()
        .flatten()
    {
        o["metadata"]["annotations"] = json!({"kcp.io/cluster": cluster});
    }
    review
}

pub(crate) fn denied(e: &Evaluation) -> &Denial {
    match &e.decision {
        Decision::Deny(d) => d,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn delete_with_protecting_values_is_denied() {
    for value in ["Always", "true"] {
        let e = plain_delete(json!({"holdfast.dev/protected": value}), json!({}));
        let d = denied(&e);
        assert_decided(&e, label("holdfast.dev/protected"), "label");
        assert!(
            d.message
                .starts_with("holdfast: ConfigMap ns/obj is protected by label")
        );
        assert!(
            d.message
                .contains("kubectl label configmaps obj -n ns holdfast.dev/protected-")
        );
        assert_eq!(
            d.blockers,
            vec![format!("label holdfast.dev/protected={value}")]
        );
    }
}

#[test]
fn delete_without_protection_is_allowed() {
    for labels in [
        json!({}),
        json!({"holdfast.dev/protected": "false"}),
        json!(null),
    ] {
        let e = plain_delete(labels, json!({}));
        assert_eq!(e.decision, Decision::Allow);
    }
}

#[test]
fn nameless_namespace_cleanup_delete_is_named_from_old_object() {
    let mut req = delete(cm(json!({"holdfast.dev/protected": "true"}), json!({})));
    req.name = None;
    let e = judge(&req, &cfg(false, &[]));
    assert!(denied(&e).message.contains("ConfigMap ns/obj"));
}

#[test]
fn karmada_key_protects_only_with_always() {
    let c = cfg(
        false,
        &["resourcetemplate.karmada.io/deletion-protected=Always"],
    );
    let key = "resourcetemplate.karmada.io/deletion-protected";
    let e = judge(&delete(cm(json!({key: "Always"}), json!({}))), &c);
    assert!(denied(&e).message.contains(key));
    let e = judge(&delete(cm(json!({key: "true"}), json!({}))), &c);
    assert_eq!(e.decision, Decision::Allow);
}

#[test]
fn orkestra_key_protects_with_true() {
    let c = cfg(false, &["orkestra.io/deletion-protection=true"]);
    let e = judge(
        &delete(cm(
            json!({"orkestra.io/deletion-protection": "true"}),
            json!({}),
        )),
        &c,
    );
    assert!(
        denied(&e)
            .message
            .contains("orkestra.io/deletion-protection=true")
    );
    // The built-in key keeps working next to the extra one.
    let e = judge(
        &delete(cm(json!({"holdfast.dev/protected": "Always"}), json!({}))),
        &c,
    );
    assert!(matches!(e.decision, Decision::Deny(_)));
}

#[test]
fn skip_annotation_and_aliases_allow() {
    let protected = json!({"holdfast.dev/protected": "true"});
    for ann in [
        json!({"holdfast.dev/skip-protection": "true"}),
        json!({"dependencies.opendefense.cloud/skip-protection": "true"}),
        json!({"holdfast.dev/skip-protection": "2026-11-22T09:00:00Z"}),
    ] {
        let e = plain_delete(protected.clone(), ann);
        assert_eq!(e.decision, Decision::Allow);
        assert_decided(&e, Decider::BreakGlass, "break-glass");
    }
    let with_label =
        json!({"holdfast.dev/protected": "true", "appcat.vshn.io/webhook-allowdeletion": "true"});
    let e = plain_delete(with_label, json!({}));
    assert_eq!(e.decision, Decision::Allow);
}

#[test]
fn skip_with_other_values_does_not_allow() {
    let protected = json!({"holdfast.dev/protected": "true"});
    for (ann, note) in [
        (json!({"holdfast.dev/skip-protection": "yes"}), "is ignored"),
        (
            json!({"holdfast.dev/skip-protection": "2026-11-22T07:00:00Z"}),
            "has expired",
        ),
    ] {
        let e = plain_delete(protected.clone(), ann);
        assert!(denied(&e).message.contains(note), "{}", denied(&e).message);
    }
    let label_false =
        json!({"holdfast.dev/protected": "true", "appcat.vshn.io/webhook-allowdeletion": "True"});
    let e = plain_delete(label_false, json!({}));
    assert!(matches!(e.decision, Decision::Deny(_)));
}

#[test]
fn break_glass_further_ahead_than_the_cap_does_not_count() {
    let protected = json!({"holdfast.dev/protected": "true"});
    // now() is 2026-11-22T08:00Z; the default cap is 24h.
    let far = json!({"holdfast.dev/skip-protection": "9999-12-31T00:00:00Z"});
    let e = plain_delete(protected.clone(), far);
    let msg = &denied(&e).message;
    assert!(
        msg.contains(
            "break-glass holdfast.dev/skip-protection=9999-12-31T00:00:00Z is ignored: \
             it lies more than 24h ahead"
        ),
        "{msg}"
    );
    // Just inside the cap counts; a shorter configured cap refuses it.
    let inside = json!({"holdfast.dev/skip-protection": "2026-11-23T07:59:00Z"});
    let e = plain_delete(protected.clone(), inside.clone());
    assert_decided(&e, Decider::BreakGlass, "break-glass");
    let short = PolicyConfig {
        max_break_glass: chrono::TimeDelta::hours(1),
        ..cfg(false, &[])
    };
    let e = judge(&delete(cm(protected, inside)), &short);
    assert!(denied(&e).message.contains("more than 1h ahead"));
}

#[test]
fn strict_update_removing_label_is_denied() {
    let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
    let removed = cm(json!({}), json!({}));
    let downgraded = cm(json!({"holdfast.dev/protected": "false"}), json!({}));
    for new in [removed, downgraded] {
        let e = judge(&update(old.clone(), new), &cfg(true, &[]));
        let d = denied(&e);
        assert_decided(&e, Decider::Strict, "strict");
        assert!(d.message.contains("strict mode is on"));
    }
}

#[test]
fn strict_off_allows_label_removal() {
    let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
    let e = judge(&update(old, cm(json!({}), json!({}))), &cfg(false, &[]));
    assert_eq!(e.decision, Decision::Allow);
}

#[test]
fn strict_exemption_must_already_be_stored() {
    let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
    let new = cm(json!({"holdfast.dev/strict-exempt": "true"}), json!({}));
    let e = judge(&update(old, new), &cfg(true, &[]));
    assert!(denied(&e).message.contains("must already be stored"));

    let old = cm(
        json!({"holdfast.dev/protected": "Always", "holdfast.dev/strict-exempt": "true"}),
        json!({}),
    );
    let new = cm(json!({"holdfast.dev/strict-exempt": "true"}), json!({}));
    let e = judge(&update(old, new), &cfg(true, &[]));
    assert_eq!(e.decision, Decision::Allow);
}

#[test]
fn strict_allows_unrelated_updates_and_guards_the_exemption() {
    struct Bypass(bool);
    impl ClusterIndex for Bypass {
        fn policies_loaded(&self) -> bool {
            true
        }
    }

    impl ClusterLookup for Bypass {}

    impl AccessReview for Bypass {
        async fn can_bypass(&self, _req: &AdmissionRequest) -> Result<bool, LookupError> {
            Ok(self.0)
        }
    }
    let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
    // Changing between protecting values and unrelated labels: allowed.
    let new = cm(
        json!({"holdfast.dev/protected": "true", "x": "y"}),
        json!({}),
    );
    let e = judge(&update(old.clone(), new), &cfg(true, &[]));
    assert_eq!(e.decision, Decision::Allow);
    // Adding the exemption or a break-glass marker needs the bypass permission.
    let exempt = cm(
        json!({"holdfast.dev/protected": "Always", "holdfast.dev/strict-exempt": "true"}),
        json!({}),
    );
    let skip = cm(
        json!({"holdfast.dev/protected": "Always"}),
        json!({"holdfast.dev/skip-protection": "true"}),
    );
    for new in [exempt, skip] {
        let e = evaluate(
            &update(old.clone(), new.clone()),
            &cfg(true, &[]),
            &Bypass(true),
            now(),
        );
        assert_eq!(e.decision, Decision::Allow);
        assert_decided(&e, Decider::BreakGlassAuthorized, "break-glass-authorized");
        let e = evaluate(
            &update(old.clone(), new.clone()),
            &cfg(true, &[]),
            &Bypass(false),
            now(),
        );
        let d = denied(&e);
        assert!(d.message.contains("may not add"), "{}", d.message);
        assert!(
            d.message
                .contains("verb bypass on protections.holdfast.dev in namespace ns"),
            "{}",
            d.message
        );
        // No way to ask: refused, not allowed.
        let e = judge(&update(old.clone(), new), &cfg(true, &[]));
        assert_eq!(denied(&e).kind, DenialKind::LookupFailed);
    }
    // Without strict mode nothing is checked.
    let skip = cm(
        json!({"holdfast.dev/protected": "Always"}),
        json!({"holdfast.dev/skip-protection": "true"}),
    );
    let e = judge(&update(old, skip), &cfg(false, &[]));
    assert_eq!(e.decision, Decision::Allow);
}

#[test]
fn strict_applies_to_extra_keys() {
    let c = cfg(
        true,
        &["resourcetemplate.karmada.io/deletion-protected=Always"],
    );
    let old = cm(
        json!({"resourcetemplate.karmada.io/deletion-protected": "Always"}),
        json!({}),
    );
    let new = cm(
        json!({"resourcetemplate.karmada.io/deletion-protected": "true"}),
        json!({}),
    );
    let e = judge(&update(old, new), &c);
    assert!(matches!(e.decision, Decision::Deny(_)));
}

#[test]
fn unreadable_objects_are_denied_not_allowed() {
    let e = judge(&delete(Value::Null), &cfg(false, &[]));
    assert_eq!(denied(&e).kind, DenialKind::Unreadable);
    let e = judge(
        &delete(json!({"metadata": {"labels": "x"}})),
        &cfg(false, &[]),
    );
    assert_eq!(denied(&e).kind, DenialKind::Unreadable);
    let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
    let e = judge(&update(old, json!({"metadata": 3})), &cfg(true, &[]));
    assert_eq!(denied(&e).kind, DenialKind::Unreadable);
}

struct Loading;
impl ClusterIndex for Loading {
    fn policies_loaded(&self) -> bool {
        false
    }
    fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
        true
    }
}

impl ClusterLookup for Loading {}

impl AccessReview for Loading {}

#[test]
fn not_ready_denies_governed_deletes_but_label_decisions_still_work() {
    let e = evaluate(
        &delete(cm(json!({}), json!({}))),
        &cfg(false, &[]),
        &Loading,
        now(),
    );
    let d = denied(&e);
    assert_eq!(d.kind, DenialKind::NotReady);
    assert!(
        d.message
            .starts_with("holdfast: not ready yet, retry later")
    );
    let e = evaluate(
        &delete(cm(json!({"holdfast.dev/protected": "true"}), json!({}))),
        &cfg(false, &[]),
        &Loading,
        now(),
    );
    assert_decided(&e, label("holdfast.dev/protected"), "label");
}

#[test]
fn creates_are_allowed() {
    let e = judge(
        &review(
            "CREATE",
            "ConfigMap",
            "configmaps",
            cm(json!({"holdfast.dev/protected":"true"}), json!({})),
            Value::Null,
        ),
        &cfg(true, &[]),
    );
    assert_eq!(e.decision, Decision::Allow);
}

#[test]
fn blockers_are_capped() {
    let many: Vec<String> = (0..8).map(|i| format!("b{i}")).collect();
    assert_eq!(list_blockers(&many), "b0, b1, b2, b3, b4 and 3 more");
    assert_eq!(list_blockers(&many[..2]), "b0, b1");
}

mod deferred;
mod hardening;
mod lifecycle;
mod outcome;
mod policy_objects;
mod workspaces;

#[test]
fn on_kcp_a_delete_without_its_logical_cluster_is_refused() {
    let kcp = PolicyConfig {
        kcp: true,
        ..cfg(false, &[])
    };
    // No kcp.io/cluster: its workspace is unknown, so nothing about it can be judged.
    let e = judge(&delete(cm(json!({}), json!({}))), &kcp);
    assert_decided(&e, Decider::Unreadable, "unreadable");
    let d = denied(&e);
    assert_eq!(d.kind, DenialKind::Unreadable);
    assert_eq!(
        d.message,
        "holdfast: cannot evaluate DELETE of ConfigMap ns/obj: the object carries no \
         kcp.io/cluster annotation, so its workspace (and every protection that applies \
         there) is unknown; refusing rather than risk removing a protected object. Retry \
         the request; if it keeps failing, check the object with kubectl get -o yaml."
    );
    // With it, the DELETE is judged as usual (nothing protects this one).
    let e = judge(
        &delete(cm(json!({}), json!({"kcp.io/cluster": "2x8kq9"}))),
        &kcp,
    );
    assert!(matches!(e.decision, Decision::Allow), "{e:?}");
    // Outside kcp the annotation means nothing.
    let e = judge(&delete(cm(json!({}), json!({}))), &cfg(false, &[]));
    assert!(matches!(e.decision, Decision::Allow), "{e:?}");
}
