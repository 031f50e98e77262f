//! Everything that concerns one DELETE, for `kubectl holdfast why`.

use super::{
    BreakGlassState, ClusterView, Context, Decider, Decision, Evaluation, Finding, PolicyConfig,
    break_glass, containment, evaluate, label, messages, objects,
};
use crate::review::{AdmissionRequest, check_metadata};
use chrono::{DateTime, Utc};

/// Everything that concerns the DELETE of one object, for `kubectl holdfast why`:
/// the webhook's own verdict, and every protection met, uncapped and whatever its
/// mode (the verdict keeps only the first refusal and caps the blockers it names).
#[derive(Clone, Debug)]
pub struct Explanation {
    /// What the webhook would answer ([`evaluate`] itself).
    pub evaluation: Evaluation,
    /// Every protection met, in evaluation order: labels, policy objects, containment.
    pub findings: Vec<Finding>,
    /// Break-glass markers on the object.
    pub break_glass: BreakGlassState,
}

/// Explains a DELETE `req`: the same evaluation as [`evaluate`], then every
/// protection it meets listed on its own (a label's refusal does not hide the policy
/// objects that would refuse next; a break-glass marker does not hide what it
/// overrides).
pub async fn explain_delete<V: ClusterView>(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Explanation {
    let judged = super::as_judged(req, cfg);
    let req = &*judged;
    let evaluation = evaluate(req, cfg, view, now).await;
    let mut findings = Vec::new();
    let mut state = BreakGlassState {
        active: None,
        ignored: None,
    };
    let Some(obj) = req.subject().filter(|o| check_metadata(o).is_ok()) else {
        return Explanation {
            evaluation,
            findings,
            break_glass: state,
        };
    };
    match break_glass(obj, now, cfg.max_break_glass) {
        Ok(b) => state.active = b.map(|b| b.source),
        Err(problem) => state.ignored = Some(messages::skip_ignored(&problem)),
    }
    let cx = Context { cfg, view, now };
    let single = label::evaluate_single(req, obj, &cx, "").await;
    if let Decider::Label { .. } = single.decider
        && let Decision::Deny(d) = single.decision
    {
        findings.push(Finding::enforced(single.decider, d));
    }
    if !view.may_govern_delete(req) || view.policies_loaded() {
        findings.extend(objects::outcome(req, obj, view).await.findings);
    }
    if let Some(c) = containment::evaluate(req, obj, &cx).await
        && let Decision::Deny(d) = c.decision
    {
        findings.push(Finding::enforced(Decider::Containment, d));
    }
    Explanation {
        evaluation,
        findings,
        break_glass: state,
    }
}
