//! Label protection and break-glass: the protections an object carries itself.

use super::{
    ClusterView, Context, Decider, DenialKind, Evaluation, PolicyConfig, kubectl_target,
    messages::{self, Alive},
    objects,
};
use crate::{
    names::{ALLOW_DELETION_LABEL_APPCAT, SKIP_ANNOTATION, SKIP_ANNOTATION_DEPENDENCIES},
    policy::cascading::{Live, live_contents},
    review::{AdmissionRequest, annotations, labels},
};
use chrono::{DateTime, Utc};
use serde_json::Value;

/// Which break-glass marker allowed a deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakGlass {
    /// `annotation KEY` or `label KEY`.
    pub source: String,
}

/// Why a skip annotation present on an object is not honoured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipProblem {
    /// An RFC 3339 time that has passed.
    Expired(String),
    /// A value that is neither `true` nor an RFC 3339 time.
    BadValue(String),
    /// An RFC 3339 time further ahead than the longest break-glass window allowed.
    TooFar(String, chrono::TimeDelta),
}

/// Looks for a break-glass marker on `obj`: the annotation `holdfast.dev/skip-protection`
/// or `dependencies.opendefense.cloud/skip-protection` with value `true` or an RFC 3339
/// time still in the future (and at most `max` ahead), or the label
/// `appcat.vshn.io/webhook-allowdeletion: "true"`.
pub fn break_glass(
    obj: &Value,
    now: DateTime<Utc>,
    max: chrono::TimeDelta,
) -> Result<Option<BreakGlass>, SkipProblem> {
    let mut problem = None;
    if let Some(ann) = annotations(obj) {
        for key in [SKIP_ANNOTATION, SKIP_ANNOTATION_DEPENDENCIES] {
            let Some(value) = ann.get(key).and_then(Value::as_str) else {
                continue;
            };
            let value = value.trim();
            if value == "true" {
                return Ok(Some(BreakGlass {
                    source: format!("annotation {key}"),
                }));
            }
            match DateTime::parse_from_rfc3339(value) {
                Ok(until) if until.with_timezone(&Utc) > now + max => {
                    problem = Some(SkipProblem::TooFar(format!("{key}={value}"), max));
                }
                Ok(until) if until.with_timezone(&Utc) > now => {
                    return Ok(Some(BreakGlass {
                        source: format!("annotation {key} (until {value})"),
                    }));
                }
                Ok(_) => problem = Some(SkipProblem::Expired(format!("{key}={value}"))),
                Err(_) => problem = Some(SkipProblem::BadValue(format!("{key}={value}"))),
            }
        }
    }
    if let Some(l) = labels(obj)
        && l.get(ALLOW_DELETION_LABEL_APPCAT).and_then(Value::as_str) == Some("true")
    {
        return Ok(Some(BreakGlass {
            source: format!("label {ALLOW_DELETION_LABEL_APPCAT}"),
        }));
    }
    match problem {
        Some(p) => Err(p),
        None => Ok(None),
    }
}

/// Warnings for protection labels whose value looks protecting but is not
/// (`always`, `TRUE`, a value with spaces): they protect nothing, and saying so at
/// create/update time beats finding out at deletion time.
pub fn look_alike_warnings(req: &AdmissionRequest, cfg: &PolicyConfig) -> Vec<String> {
    let Some(obj) = req.object.as_ref() else {
        return Vec::new();
    };
    let old = req.old_object.as_ref().and_then(labels);
    cfg.labels
        .look_alikes(labels(obj))
        .into_iter()
        .filter(|(l, v)| {
            // On UPDATE, only when the value is new.
            old.and_then(|o| o.get(&l.key)).and_then(Value::as_str) != Some(v)
        })
        .map(|(l, v)| messages::look_alike(&l.key, v, &req.describe(), &l.values))
        .collect()
}

/// Every protection of one object, without containment: its protection label, then
/// the policy objects.
pub(crate) async fn evaluate_single<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    cx: &Context<'_, V>,
    skip_note: &str,
) -> Evaluation {
    let view = cx.view;
    let Some(found) = cx.cfg.labels.protecting(labels(obj)) else {
        return objects::evaluate(req, obj, view).await;
    };
    let decider = || Decider::Label {
        key: found.key.to_string(),
    };
    let label = (found.key, found.value);
    let what = req.describe();
    let mut note = String::new();
    if found.cascading() {
        if !view.cascading_judged() {
            note = messages::LABEL_CASCADING_UNJUDGED.to_string();
        } else {
            match live_contents(req, obj, view).await {
                Live::Drained => return objects::evaluate(req, obj, view).await,
                Live::NoContents => note = messages::label_cascading_no_contents(&what),
                Live::Unknown(why) => {
                    return Evaluation::deny(
                        decider(),
                        DenialKind::LookupFailed,
                        messages::label_live_unknown(&what, found.key, found.value, &why),
                        Vec::new(),
                    );
                }
                Live::Alive {
                    condition,
                    still,
                    blockers,
                    drain,
                } => {
                    let alive = Alive {
                        condition: &condition,
                        still: &still,
                        drain: &drain,
                    };
                    let unprotect = unprotect_hint(req, cx, found.key);
                    let message = messages::label_alive(&what, label, alive, skip_note, &unprotect);
                    return Evaluation::deny(decider(), DenialKind::Protected, message, blockers);
                }
            }
        }
    }
    let unprotect = unprotect_hint(req, cx, found.key);
    Evaluation::deny(
        decider(),
        DenialKind::Protected,
        messages::label_protected(&what, label, &note, skip_note, &unprotect),
        vec![messages::concat(&["label ", found.key, "=", found.value])],
    )
}

/// How to lift a label's protection: remove it (after the exemption under strict mode).
fn unprotect_hint<V: ClusterView>(
    req: &AdmissionRequest,
    cx: &Context<'_, V>,
    key: &str,
) -> String {
    let strict = cx.cfg.strict || cx.view.strict_for(req);
    messages::unprotect_hint(strict, &kubectl_target(req), key)
}
