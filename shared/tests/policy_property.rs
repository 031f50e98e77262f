//! Property tests of the admission decision, with oracles written here from the
//! documented rules (not from the code under test):
//! - any bytes, and any mutation of a valid AdmissionReview, parse or fail cleanly and
//!   are decided without a panic;
//! - a DELETE of an object carrying a protecting label value is never allowed unless a
//!   valid break-glass marker is on it; an object without one is allowed when no
//!   policy exists;
//! - under strict mode, an UPDATE that takes away a protecting value is never allowed
//!   unless the stored object was already exempt.
//!
//! The seed is printed on failure; set HOLDFAST_SEED to replay one.

use chrono::{DateTime, TimeDelta, Utc};
use holdfast_shared::{
    labels::{ProtectionLabel, ProtectionLabels},
    policy::{Decision, NoPolicies, PolicyConfig, evaluate},
    review::parse_review,
};
use serde_json::{Map, Value, json};

mod common;
use common::{Rng, seed};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T08:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .expect("fixed time")
}

const KARMADA: &str = "resourcetemplate.karmada.io/deletion-protected";

/// The installation under test: the built-in key plus Karmada's, protecting only
/// with `Always`.
fn config(strict: bool) -> PolicyConfig {
    PolicyConfig {
        labels: ProtectionLabels::with_extra([format!("{KARMADA}=Always")
            .parse::<ProtectionLabel>()
            .expect("valid label")]),
        strict,
        ..PolicyConfig::default()
    }
}

/// Oracle: does this label map protect, per the documented values? (`Cascading`
/// protects like `Always` here: the view tells no live contents.)
fn oracle_protected(labels: &Map<String, Value>) -> bool {
    let is = |k: &str, vals: &[&str]| {
        labels
            .get(k)
            .and_then(Value::as_str)
            .is_some_and(|v| vals.contains(&v))
    };
    is("holdfast.dev/protected", &["Always", "true", "Cascading"]) || is(KARMADA, &["Always"])
}

/// Oracle: is a documented break-glass marker valid on this object at `now()`?
fn oracle_break_glass(labels: &Map<String, Value>, annotations: &Map<String, Value>) -> bool {
    let max = now() + TimeDelta::hours(24);
    let skip_ok = |v: &str| {
        let v = v.trim();
        v == "true"
            || DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .is_ok_and(|t| t > now() && t <= max)
    };
    [
        "holdfast.dev/skip-protection",
        "dependencies.opendefense.cloud/skip-protection",
    ]
    .iter()
    .any(|k| {
        annotations
            .get(*k)
            .and_then(Value::as_str)
            .is_some_and(skip_ok)
    }) || labels
        .get("appcat.vshn.io/webhook-allowdeletion")
        .and_then(Value::as_str)
        == Some("true")
}

const LABEL_KEYS: &[&str] = &[
    "holdfast.dev/protected",
    KARMADA,
    "appcat.vshn.io/webhook-allowdeletion",
    "holdfast.dev/strict-exempt",
    "app",
    "holdfast.dev/protected-not",
];
const LABEL_VALUES: &[&str] = &[
    "Always",
    "always",
    "Always ",
    "true",
    "True",
    "TRUE",
    "false",
    "",
    "yes",
    "1",
    "Cascading",
];
const ANNOTATION_KEYS: &[&str] = &[
    "holdfast.dev/skip-protection",
    "dependencies.opendefense.cloud/skip-protection",
    "note",
];
const ANNOTATION_VALUES: &[&str] = &[
    "true",
    " true ",
    "false",
    "yes",
    "2026-11-22T07:59:59Z",
    "2026-11-22T08:30:00Z",
    "2026-11-23T07:59:00Z",
    "2026-11-23T08:00:01Z",
    "9999-12-31T00:00:00Z",
    "not a time",
];

fn random_map(rng: &mut Rng, keys: &[&str], values: &[&str]) -> Map<String, Value> {
    let mut m = Map::new();
    // Half the time, start from a protecting (or break-glass) entry of the first key.
    if rng.chance(2) {
        let value = if rng.chance(2) {
            values[0]
        } else {
            values[3.min(values.len() - 1)]
        };
        m.insert(keys[0].to_string(), Value::String(value.to_string()));
    }
    for _ in 0..rng.below(4) {
        m.insert(
            rng.pick(keys).to_string(),
            Value::String(rng.pick(values).to_string()),
        );
    }
    m
}

fn configmap(labels: &Map<String, Value>, annotations: &Map<String, Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "obj", "namespace": "ns", "uid": "u1",
                        "labels": labels, "annotations": annotations},
           "data": {"k": "v"}})
}

fn review(op: &str, object: Value, old: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "uid-1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "name": "obj", "namespace": "ns", "operation": op,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object, "oldObject": old, "dryRun": false}})
}

fn decide(body: &[u8], cfg: &PolicyConfig) -> Option<Decision> {
    let req = parse_review(body).ok()?;
    Some(futures::executor::block_on(evaluate(&req, cfg, &NoPolicies, now())).decision)
}

#[test]
fn label_protected_deletes_need_a_valid_break_glass() {
    let seed = seed();
    let mut rng = Rng(seed);
    let (mut denied, mut allowed) = (0, 0);
    for round in 0..5_000 {
        let labels = random_map(&mut rng, LABEL_KEYS, LABEL_VALUES);
        let annotations = random_map(&mut rng, ANNOTATION_KEYS, ANNOTATION_VALUES);
        let strict = rng.chance(2);
        let body = review("DELETE", Value::Null, configmap(&labels, &annotations));
        let decision = decide(body.to_string().as_bytes(), &config(strict))
            .unwrap_or_else(|| panic!("seed {seed} round {round}: valid review refused"));
        let protected = oracle_protected(&labels);
        let glass = oracle_break_glass(&labels, &annotations);
        let context = format!(
            "seed {seed} round {round}: labels {labels:?} annotations {annotations:?} → {decision:?}"
        );
        match (protected, glass) {
            (true, false) => {
                assert!(matches!(decision, Decision::Deny(_)), "{context}");
                denied += 1;
            }
            _ => {
                assert!(matches!(decision, Decision::Allow), "{context}");
                allowed += 1;
            }
        }
    }
    // The generator covers both sides.
    assert!(
        denied > 500 && allowed > 500,
        "{denied} denied, {allowed} allowed"
    );
}

#[test]
fn strict_updates_never_take_protection_away_unexempted() {
    let seed = seed();
    let mut rng = Rng(seed);
    let mut refused = 0;
    for round in 0..5_000 {
        let old_labels = random_map(&mut rng, LABEL_KEYS, LABEL_VALUES);
        let mut new_labels = old_labels.clone();
        for _ in 0..1 + rng.below(3) {
            let key = rng.pick(LABEL_KEYS).to_string();
            if rng.chance(2) {
                new_labels.remove(&key);
            } else {
                new_labels.insert(key, Value::String(rng.pick(LABEL_VALUES).to_string()));
            }
        }
        let annotations = random_map(&mut rng, ANNOTATION_KEYS, ANNOTATION_VALUES);
        let body = review(
            "UPDATE",
            configmap(&new_labels, &annotations),
            configmap(&old_labels, &annotations),
        );
        let decision = decide(body.to_string().as_bytes(), &config(true))
            .unwrap_or_else(|| panic!("seed {seed} round {round}: valid review refused"));
        let exempt = old_labels
            .get("holdfast.dev/strict-exempt")
            .and_then(Value::as_str)
            == Some("true");
        // Protection taken away: some key protected before and not after.
        let weakened = ["holdfast.dev/protected", KARMADA].iter().any(|k| {
            let only = |m: &Map<String, Value>| {
                let mut one = Map::new();
                if let Some(v) = m.get(*k) {
                    one.insert(k.to_string(), v.clone());
                }
                oracle_protected(&one)
            };
            only(&old_labels) && !only(&new_labels)
        });
        if weakened && !exempt {
            assert!(
                matches!(decision, Decision::Deny(_)),
                "seed {seed} round {round}: {old_labels:?} → {new_labels:?} allowed: {decision:?}"
            );
            refused += 1;
        }
    }
    assert!(refused > 100, "only {refused} weakening updates generated");
}

/// A random JSON value, shallow.
fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 2 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(2)),
        2 => json!(rng.next() as i64),
        3 => json!(-1.5e300),
        4 => Value::String(rng.pick(LABEL_VALUES).to_string()),
        5 => Value::Array(
            (0..rng.below(3))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = Map::new();
            for _ in 0..rng.below(3) {
                m.insert(
                    rng.pick(LABEL_KEYS).to_string(),
                    random_value(rng, depth + 1),
                );
            }
            Value::Object(m)
        }
    }
}

/// Replaces a random node of `v` (at most `depth` deep) with a random value.
fn mutate(rng: &mut Rng, v: &mut Value, depth: usize) {
    match v {
        Value::Object(m) if !m.is_empty() && depth > 0 && !rng.chance(4) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let key = rng.pick(&keys).clone();
            if rng.chance(6) {
                m.remove(&key);
            } else if let Some(child) = m.get_mut(&key) {
                mutate(rng, child, depth - 1);
            }
        }
        Value::Array(a) if !a.is_empty() && depth > 0 && !rng.chance(4) => {
            let i = rng.below(a.len());
            mutate(rng, &mut a[i], depth - 1);
        }
        _ => *v = random_value(rng, 0),
    }
}

#[test]
fn mutated_and_random_reviews_never_panic() {
    let seed = seed();
    let mut rng = Rng(seed);
    let base_labels: Map<String, Value> =
        serde_json::from_value(json!({"holdfast.dev/protected": "Always"})).expect("map");
    let mut parsed = 0;
    for round in 0..20_000 {
        let op = *rng.pick(&["DELETE", "UPDATE", "CREATE", "CONNECT"]);
        let mut body = review(
            op,
            configmap(&base_labels, &Map::new()),
            configmap(&base_labels, &Map::new()),
        );
        mutate(&mut rng, &mut body, 6);
        let mut bytes = body.to_string().into_bytes();
        match rng.below(8) {
            0 => bytes.truncate(rng.below(bytes.len() + 1)),
            1 => {
                let i = rng.below(bytes.len());
                bytes[i] = (rng.next() & 0xff) as u8;
            }
            _ => {}
        }
        let strict = rng.chance(2);
        let outcome = std::panic::catch_unwind(|| decide(&bytes, &config(strict)));
        match outcome {
            Ok(Some(_)) => parsed += 1,
            Ok(None) => {}
            Err(_) => panic!(
                "seed {seed} round {round}: panicked on {}",
                String::from_utf8_lossy(&bytes)
            ),
        }
    }
    assert!(parsed > 500, "only {parsed} mutated reviews still parsed");
}
