//! Status of policy objects: `observedGeneration` and the conditions Ready,
//! Installed, Invalid and (DependencyRule) CycleDetected, computed from what the
//! reconciler found, written through the status subresource only when changed.

use holdfast_shared::api::condition_types::{
    CYCLE_DETECTED, INSTALLED, INVALID, READY, SOURCE_REACHABLE,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{Value, json};

use crate::policies::{Invalid, reasons};

/// What the reconciler found about one policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Why the policy is invalid, if it is.
    pub invalid: Option<Invalid>,
    /// Whether the live configuration(s) route everything the policy needs.
    pub installed: bool,
    /// What is installed (or missing), for the Installed message.
    pub installed_message: String,
    /// `Some(message)` when the policy is on a dependency cycle; `None` when not;
    /// only DependencyRules carry the condition (`cycle_applies`).
    pub cycle: Option<String>,
    /// Whether the CycleDetected condition is set (DependencyRules).
    pub cycle_applies: bool,
    /// The anchor source's state (AnchorRules naming another cluster only): the
    /// SourceReachable condition; Ready only while it holds.
    pub source: Option<SourceCondition>,
    /// Resources the policy names whose deletions no webhook sees (aggregated
    /// APIs, expiring Events): why. Installed and Ready are then False with
    /// reason NotAdmissionControlled.
    pub not_admitted: Option<String>,
    /// Why the configuration that would route the policy's DELETEs cannot be
    /// installed (kcp: the export workspace of a type does not bind holdfast):
    /// `(reason, message)`. Installed and Ready are then False with that reason.
    pub blocked: Option<(&'static str, String)>,
    /// kcp: what only a configuration kcp does not enforce yet routes (see
    /// [`crate::kcp::enforcement`]). Installed stays True, Ready is False with
    /// reason [`NOT_ENFORCED_YET`] until kcp enforces it.
    pub not_enforced: Option<String>,
}

/// Reason of Ready while kcp does not enforce the installed configuration yet.
pub const NOT_ENFORCED_YET: &str = "NotEnforcedYet";

/// The controller named as the reporter of holdfast's Events.
pub const EVENT_REPORTER: &str = "holdfast-controller";

/// A Warning Event about a policy (`note` cut to 1,000 characters).
pub fn warning_event(reason: &str, action: &str, note: &str) -> kube::runtime::events::Event {
    kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: action.to_string(),
        secondary: None,
    }
}

/// The (reason, message) of a Warning Event when `outcome` makes a policy Invalid
/// with a reason its `conditions` do not show yet (once per reason, not on every
/// pass).
pub fn newly_invalid<'a>(
    conditions: &[Condition],
    outcome: &'a Outcome,
) -> Option<(&'static str, &'a str)> {
    let inv = outcome.invalid.as_ref()?;
    let was = holdfast_shared::api::find_condition(conditions, INVALID);
    let same = was.is_some_and(|c| c.status == "True" && c.reason == inv.reason);
    (!same).then_some((inv.reason, inv.message.as_str()))
}

/// Reason of Installed and Ready when the API server refused the configuration
/// that would route the policy's DELETEs.
pub const CONFIGURATION_REFUSED: &str = "ConfigurationRefused";

/// The Installed message of a policy whose configuration the API server refused
/// with `message` (the API server's own words).
pub fn refused_message(message: &str) -> String {
    format!(
        "the API server refused ValidatingWebhookConfiguration {}, so DELETEs of what this policy protects are not checked: {message}",
        holdfast_shared::names::WEBHOOK_CONFIGURATION_NAME
    )
}

/// The (reason, message) of a Warning Event when `outcome` blocks a policy with
/// a reason its Ready condition does not show yet (once per reason).
pub fn newly_blocked<'a>(
    conditions: &[Condition],
    outcome: &'a Outcome,
) -> Option<(&'static str, &'a str)> {
    if outcome.invalid.is_some() {
        return None;
    }
    let (reason, message) = outcome.blocked.as_ref()?;
    let was = holdfast_shared::api::find_condition(conditions, READY);
    let same = was.is_some_and(|c| c.status == "False" && c.reason == *reason);
    (!same).then_some((*reason, message.as_str()))
}

/// The Installed message of a policy whose DELETEs of `resources` reach `webhooks`.
pub fn routed_message<'a>(
    resources: impl IntoIterator<Item = String>,
    webhooks: impl IntoIterator<Item = &'a str>,
) -> String {
    format!(
        "DELETEs of {} reach webhook(s) {} of ValidatingWebhookConfiguration {}",
        resources.into_iter().collect::<Vec<_>>().join(", "),
        webhooks.into_iter().collect::<Vec<_>>().join(", "),
        holdfast_shared::names::WEBHOOK_CONFIGURATION_NAME
    )
}

/// The Installed message of a policy some of whose resources no webhook routes yet.
pub fn not_routed_message(missing: &[String]) -> String {
    format!(
        "not yet routed to a policies webhook: {}",
        missing.join(", ")
    )
}

/// The SourceReachable condition of an AnchorRule with an anchor source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceCondition {
    /// Listed there.
    pub reachable: bool,
    /// `Synced`, `NotSynced`, `Unreachable` or `Unusable`.
    pub reason: &'static str,
    /// What was found.
    pub message: String,
}

/// Reason of Installed and Ready when a named resource is never admission-controlled.
pub const NOT_ADMISSION_CONTROLLED: &str = "NotAdmissionControlled";

struct Cond {
    type_: &'static str,
    status: bool,
    reason: String,
    message: String,
}

/// The reason of the Ready condition `outcome` makes (`Enforced` when Ready): a
/// bounded set, the `reason` label of `holdfast_controller_policies`.
pub fn ready_reason(outcome: &Outcome) -> String {
    ready(outcome).1
}

/// The Ready condition's status, reason and message.
fn ready(o: &Outcome) -> (bool, String, String) {
    match (&o.invalid, o.installed) {
        (Some(inv), _) => (
            false,
            "Invalid".to_string(),
            format!("the policy is invalid and not enforced: {}", inv.message),
        ),
        (None, _) if o.blocked.is_some() => {
            let (reason, message) = o.blocked.clone().unwrap_or_default();
            (
                false,
                reason.to_string(),
                format!("the policy is not enforced: {message}"),
            )
        }
        (None, false) => (
            false,
            "NotInstalled".to_string(),
            "waiting for the webhook configuration".to_string(),
        ),
        (None, true) if o.not_admitted.is_some() => (
            false,
            NOT_ADMISSION_CONTROLLED.to_string(),
            format!(
                "not every named resource can be protected: {}",
                o.not_admitted.as_deref().unwrap_or_default()
            ),
        ),
        (None, true) if o.not_enforced.is_some() => (
            false,
            NOT_ENFORCED_YET.to_string(),
            o.not_enforced.clone().unwrap_or_default(),
        ),
        (None, true) if o.source.as_ref().is_some_and(|s| !s.reachable) => {
            let s = o.source.as_ref().map(|s| (s.reason, s.message.as_str()));
            let (reason, message) = s.unwrap_or_default();
            (
                false,
                format!("Source{reason}"),
                format!(
                    "the anchors cannot be read, so the protected objects are refused: {message}"
                ),
            )
        }
        (None, true) => (
            true,
            "Enforced".to_string(),
            "the policy is enforced".to_string(),
        ),
    }
}

fn conditions(o: &Outcome) -> Vec<Cond> {
    let mut out = Vec::new();
    let (ready, ready_reason, ready_msg) = ready(o);
    out.push(Cond {
        type_: READY,
        status: ready,
        reason: ready_reason,
        message: ready_msg,
    });
    out.push(match &o.invalid {
        Some(_) => Cond {
            type_: INSTALLED,
            status: false,
            reason: "Invalid".into(),
            message: "not installed: the policy is invalid".into(),
        },
        None if o.blocked.is_some() => {
            let (reason, message) = o.blocked.clone().unwrap_or_default();
            Cond {
                type_: INSTALLED,
                status: false,
                reason: reason.into(),
                message,
            }
        }
        None if o.installed && o.not_admitted.is_some() => Cond {
            type_: INSTALLED,
            status: false,
            reason: NOT_ADMISSION_CONTROLLED.into(),
            message: o.not_admitted.clone().unwrap_or_default(),
        },
        None => Cond {
            type_: INSTALLED,
            status: o.installed,
            reason: if o.installed {
                "WebhookInstalled".into()
            } else {
                "NotInstalled".into()
            },
            message: o.installed_message.clone(),
        },
    });
    out.push(match &o.invalid {
        Some(inv) => Cond {
            type_: INVALID,
            status: true,
            reason: inv.reason.into(),
            message: inv.message.clone(),
        },
        None => Cond {
            type_: INVALID,
            status: false,
            reason: reasons::VALID.into(),
            message: "the spec is valid".into(),
        },
    });
    if let Some(s) = &o.source {
        out.push(Cond {
            type_: SOURCE_REACHABLE,
            status: s.reachable,
            reason: s.reason.into(),
            message: s.message.clone(),
        });
    }
    if o.cycle_applies {
        out.push(match &o.cycle {
            Some(m) => Cond {
                type_: CYCLE_DETECTED,
                status: true,
                reason: "DependencyCycle".into(),
                message: m.clone(),
            },
            None => Cond {
                type_: CYCLE_DETECTED,
                status: false,
                reason: "NoCycle".into(),
                message: "the rule is not on a dependency cycle".into(),
            },
        });
    }
    out
}

fn status_str(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// The status to write, or `None` when `existing` already says the same
/// (lastTransitionTime is kept for conditions whose status did not change).
pub fn desired_status(
    generation: Option<i64>,
    existing_generation: Option<i64>,
    existing: &[Condition],
    outcome: &Outcome,
    now: &str,
) -> Option<Value> {
    let wanted = conditions(outcome);
    let same = existing_generation == generation
        && existing.len() == wanted.len()
        && wanted.iter().all(|w| {
            existing.iter().any(|e| {
                e.type_ == w.type_
                    && e.status == status_str(w.status)
                    && e.reason == w.reason
                    && e.message == w.message
                    && e.observed_generation == generation
            })
        });
    if same {
        return None;
    }
    let conds: Vec<Value> = wanted
        .iter()
        .map(|w| {
            let prior = existing
                .iter()
                .find(|e| e.type_ == w.type_ && e.status == status_str(w.status));
            let ltt = prior
                .and_then(|e| serde_json::to_value(&e.last_transition_time).ok())
                .filter(|v| v.is_string())
                .unwrap_or_else(|| Value::String(now.to_string()));
            let mut c = json!({
                "type": w.type_,
                "status": status_str(w.status),
                "reason": w.reason,
                "message": truncate(&w.message, 32_000),
                "lastTransitionTime": ltt,
            });
            if let Some(g) = generation {
                c["observedGeneration"] = json!(g);
            }
            c
        })
        .collect();
    let mut status = json!({ "conditions": conds });
    if let Some(g) = generation {
        status["observedGeneration"] = json!(g);
    }
    Some(status)
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The current time as the API server writes it (RFC 3339, seconds, `Z`).
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        Outcome {
            invalid: None,
            installed: true,
            installed_message: "installed".into(),
            cycle: None,
            cycle_applies: true,
            source: None,
            not_admitted: None,
            blocked: None,
            not_enforced: None,
        }
    }

    fn parse(v: &Value) -> Vec<Condition> {
        serde_json::from_value(v["conditions"].clone()).expect("conditions")
    }

    #[test]
    fn unchanged_status_is_not_rewritten_and_transition_time_is_kept() {
        let s =
            desired_status(Some(1), None, &[], &outcome(), "2026-01-01T00:00:00Z").expect("new");
        assert_eq!(s["observedGeneration"], 1);
        let conds = parse(&s);
        assert_eq!(conds.len(), 4);
        let ready = conds.iter().find(|c| c.type_ == "Ready").expect("ready");
        assert_eq!(ready.status, "True");
        assert_eq!(
            desired_status(Some(1), Some(1), &conds, &outcome(), "2026-02-02T00:00:00Z"),
            None
        );
        // New generation: rewritten, times kept.
        let s2 = desired_status(Some(2), Some(1), &conds, &outcome(), "2026-02-02T00:00:00Z")
            .expect("changed");
        assert_eq!(
            s2["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        // Invalid: Ready false, time updated.
        let mut o = outcome();
        o.invalid = Some(Invalid {
            reason: reasons::UNKNOWN_RESOURCE,
            message: "no".into(),
        });
        let s3 = desired_status(Some(2), Some(2), &parse(&s2), &o, "2026-03-03T00:00:00Z")
            .expect("changed");
        let conds = parse(&s3);
        let inv = conds
            .iter()
            .find(|c| c.type_ == "Invalid")
            .expect("invalid");
        assert_eq!(
            (inv.status.as_str(), inv.reason.as_str()),
            ("True", "UnknownResource")
        );
        let ready = &s3["conditions"][0];
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["lastTransitionTime"], "2026-03-03T00:00:00Z");
    }

    #[test]
    fn cycle_condition_only_for_dependency_rules() {
        let mut o = outcome();
        o.cycle_applies = false;
        let s = desired_status(None, None, &[], &o, "2026-01-01T00:00:00Z").expect("new");
        assert_eq!(parse(&s).len(), 3);
        o.cycle_applies = true;
        o.cycle = Some("dependency cycle a → b → a".into());
        let s = desired_status(None, None, &[], &o, "2026-01-01T00:00:00Z").expect("new");
        let c = parse(&s);
        let cyc = c
            .iter()
            .find(|c| c.type_ == "CycleDetected")
            .expect("cycle");
        assert_eq!(cyc.status, "True");
        assert!(cyc.message.contains("a → b → a"));
    }

    #[test]
    fn source_and_never_admitted_resources_take_ready_away() {
        let find = |o: &Outcome, t: &str| -> (String, String) {
            let s = desired_status(None, None, &[], o, "2026-01-01T00:00:00Z").expect("new");
            let c = parse(&s)
                .into_iter()
                .find(|c| c.type_ == t)
                .expect("condition");
            (c.status, c.reason)
        };
        let want = |o: &Outcome, t: &str, (status, reason): (&str, &str)| {
            let (s, r) = find(o, t);
            assert_eq!((s.as_str(), r.as_str()), (status, reason), "{t}");
        };
        let mut o = outcome();
        o.cycle_applies = false;
        o.source = Some(SourceCondition {
            reachable: false,
            reason: "Unreachable",
            message: "anchor source Secret a/b is unreachable: refused".into(),
        });
        want(&o, "SourceReachable", ("False", "Unreachable"));
        want(&o, "Ready", ("False", "SourceUnreachable"));
        o.source = Some(SourceCondition {
            reachable: true,
            reason: "Synced",
            message: "listed".into(),
        });
        want(&o, "Ready", ("True", "Enforced"));
        o.source = None;
        // kcp: installed, not enforced yet.
        let waiting = Outcome {
            not_enforced: Some("installed, but kcp does not enforce it yet".into()),
            ..o.clone()
        };
        want(&waiting, "Ready", ("False", "NotEnforcedYet"));
        want(&waiting, "Installed", ("True", "WebhookInstalled"));
        let never = "DELETEs of pods.metrics.k8s.io never reach a webhook";
        let blocked = Outcome {
            blocked: Some(("ExportWorkspaceNotBound", "bind it".into())),
            ..o.clone()
        };
        o.not_admitted = Some(never.into());
        for (o, reason) in [
            (&o, NOT_ADMISSION_CONTROLLED),
            (&blocked, "ExportWorkspaceNotBound"),
        ] {
            for t in ["Installed", "Ready"] {
                assert_eq!(find(o, t), ("False".into(), reason.into()), "{t}");
            }
        }
    }
}
