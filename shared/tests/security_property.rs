//! Property tests of what a tenant writes (issue 31), with oracles written here
//! from docs/security.md, not from the code under test:
//! - outside kcp, adding any `kcp.io/cluster` annotation to the objects of a
//!   review changes no decision and no message;
//! - a CREATE or UPDATE setting a deferred-deletion request is admitted only when
//!   its markers are complete, name the requesting user, and carry a fresh
//!   signature holdfast issued for that object and that user.
//!
//! The seed is printed on failure; set HOLDFAST_SEED to replay one.

use chrono::{DateTime, TimeDelta, Utc};
use holdfast_shared::{
    policy::{
        AccessReview, ClusterIndex, ClusterLookup, ClusterView, Decision, LookupError, NoPolicies,
        PolicyConfig, evaluate,
    },
    request_signature::{KEY_LEN, RequestKey},
    review::{AdmissionRequest, parse_review},
};
use serde_json::{Map, Value, json};

mod common;
use common::{Rng, seed};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T08:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .expect("fixed time")
}

fn key() -> RequestKey {
    RequestKey::from_bytes(&[7; KEY_LEN]).expect("key")
}

/// A view where every user may delete everything and the key is [`key`].
struct Signing;

impl ClusterIndex for Signing {
    fn policies_loaded(&self) -> bool {
        true
    }
}

impl ClusterLookup for Signing {}

impl AccessReview for Signing {
    async fn can_delete_as(&self, _: &AdmissionRequest, _: &str) -> Result<bool, LookupError> {
        Ok(true)
    }
    async fn request_key(&self) -> Result<RequestKey, LookupError> {
        Ok(key())
    }
}

const KEYS: &[&str] = &[
    "holdfast.dev/protected",
    "holdfast.dev/skip-protection",
    "holdfast.dev/strict-exempt",
    "app",
];
const VALUES: &[&str] = &[
    "Always",
    "true",
    "false",
    "",
    "Cascading",
    "2026-11-22T09:00:00Z",
];
const CLUSTERS: &[&str] = &["", "root", "root:org", "2x8kq9", "lc1", "*", "../x"];

fn random_map(rng: &mut Rng) -> Map<String, Value> {
    let mut m = Map::new();
    for _ in 0..rng.below(4) {
        m.insert(rng.pick(KEYS).to_string(), json!(rng.pick(VALUES)));
    }
    m
}

fn configmap(labels: &Map<String, Value>, annotations: &Map<String, Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "obj", "namespace": "ns", "uid": "u1",
                        "labels": labels, "annotations": annotations}})
}

fn review(op: &str, user: &str, object: Value, old: Value) -> AdmissionRequest {
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "uid-1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "name": "obj", "namespace": "ns", "operation": op,
        "userInfo": {"username": user}, "object": object, "oldObject": old}});
    parse_review(body.to_string().as_bytes()).expect("a valid review")
}

fn with_cluster(mut o: Value, cluster: &str) -> Value {
    if !o.is_null() {
        o["metadata"]["annotations"]["kcp.io/cluster"] = json!(cluster);
    }
    o
}

fn decide<V: ClusterView>(req: &AdmissionRequest, cfg: &PolicyConfig, view: &V) -> Decision {
    futures::executor::block_on(evaluate(req, cfg, view, now())).decision
}

#[test]
fn forged_logical_clusters_change_no_decision_outside_kcp() {
    let seed = seed();
    let mut rng = Rng(seed);
    let mut denied = 0;
    for round in 0..3_000 {
        let cfg = PolicyConfig {
            strict: rng.chance(2),
            ..PolicyConfig::default()
        };
        let old = configmap(&random_map(&mut rng), &random_map(&mut rng));
        let (op, new) = match rng.below(3) {
            0 => ("DELETE", Value::Null),
            1 => (
                "UPDATE",
                configmap(&random_map(&mut rng), &random_map(&mut rng)),
            ),
            _ => (
                "CREATE",
                configmap(&random_map(&mut rng), &random_map(&mut rng)),
            ),
        };
        let old = if op == "CREATE" { Value::Null } else { old };
        let plain = decide(
            &review(op, "alice", new.clone(), old.clone()),
            &cfg,
            &NoPolicies,
        );
        let cluster = rng.pick(CLUSTERS);
        let (new_c, old_c) = match rng.below(3) {
            0 => (with_cluster(new.clone(), cluster), old.clone()),
            1 => (new.clone(), with_cluster(old.clone(), cluster)),
            _ => (with_cluster(new, cluster), with_cluster(old, cluster)),
        };
        let forged = decide(&review(op, "alice", new_c, old_c), &cfg, &NoPolicies);
        assert_eq!(
            forged, plain,
            "seed {seed} round {round}: kcp.io/cluster={cluster:?} changed the decision of a {op}"
        );
        denied += usize::from(matches!(plain, Decision::Deny(_)));
    }
    assert!(
        denied > 150,
        "{denied} denied: the generator covers refusals"
    );
}

#[test]
fn deferred_requests_are_admitted_only_signed_for_the_requester() {
    let seed = seed();
    let mut rng = Rng(seed);
    let (mut allowed, mut refused) = (0, 0);
    let signatures = [
        None,
        Some(key().sign("u1", "alice", now())),
        Some(key().sign("u1", "alice", now() - TimeDelta::minutes(9))),
        Some(key().sign("u1", "alice", now() - TimeDelta::minutes(11))),
        Some(key().sign("u1", "bob", now())),
        Some(key().sign("u2", "alice", now())),
        Some(
            RequestKey::from_bytes(&[8; KEY_LEN])
                .expect("key")
                .sign("u1", "alice", now()),
        ),
        Some("v1.1.00".to_string()),
        Some(String::new()),
    ];
    for round in 0..5_000 {
        let user = *rng.pick(&["alice", "bob", ""]);
        let mut labels = random_map(&mut rng);
        let mut annotations = random_map(&mut rng);
        let marker = |rng: &mut Rng| {
            rng.pick(&[None, Some("true"), Some("yes"), Some("")])
                .map(str::to_string)
        };
        let (ann, label) = (marker(&mut rng), marker(&mut rng));
        let complete = rng.chance(3);
        let (ann, label) = if complete {
            (Some("true".to_string()), Some("true".to_string()))
        } else {
            (ann, label)
        };
        let by = rng
            .pick(&[None, Some("alice"), Some("bob"), Some(""), Some("alice\n")])
            .map(str::to_string);
        let by = if complete { Some(user.to_string()) } else { by };
        let sig = rng.pick(&signatures).clone();
        let set = |m: &mut Map<String, Value>, k: &str, v: &Option<String>| {
            if let Some(v) = v {
                m.insert(k.to_string(), json!(v));
            }
        };
        set(&mut annotations, "holdfast.dev/delete-when-unblocked", &ann);
        set(&mut labels, "holdfast.dev/delete-when-unblocked", &label);
        set(&mut annotations, "holdfast.dev/delete-requested-by", &by);
        set(
            &mut annotations,
            "holdfast.dev/delete-request-signature",
            &sig,
        );
        if rng.chance(3) {
            annotations.insert("kcp.io/cluster".into(), json!(rng.pick(CLUSTERS)));
        }
        let new = configmap(&labels, &annotations);
        let old = configmap(&Map::new(), &Map::new());
        let decision = decide(
            &review("UPDATE", user, new, old),
            &PolicyConfig::default(),
            &Signing,
        );
        // The oracle: no marker, no request; else every condition of a request.
        let is_request = ann.is_some() || label.is_some();
        // Holdfast's, for this object and this user, issued at most 10 minutes ago.
        let valid_sig = [now(), now() - TimeDelta::minutes(9)]
            .into_iter()
            .any(|t| sig.as_deref() == Some(key().sign("u1", user, t).as_str()));
        let admitted = !is_request
            || (ann.as_deref() == Some("true")
                && label.as_deref() == Some("true")
                && !user.is_empty()
                && by.as_deref() == Some(user)
                && valid_sig);
        let context = format!(
            "seed {seed} round {round}: user {user:?} markers {ann:?}/{label:?}/{by:?} sig {sig:?} → {decision:?}"
        );
        if admitted {
            assert!(!matches!(decision, Decision::Deny(_)), "{context}");
            allowed += usize::from(is_request);
        } else {
            assert!(matches!(decision, Decision::Deny(_)), "{context}");
            refused += 1;
        }
    }
    assert!(
        allowed > 50 && refused > 1_000,
        "{allowed} admitted requests, {refused} refused"
    );
}
