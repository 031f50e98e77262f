//! Deferred deletion as the webhook sees it: requests for it are judged, and the
//! refusals it can outlast point to it.

use super::{
    ClusterView, Decider, Decision, DenialKind, Evaluation, kubectl_target, logical_cluster,
    messages::{self, DEFERRED_HINT},
};
use crate::review::AdmissionRequest;

/// Appends [`DEFERRED_HINT`] to the refusal of a DELETE by a policy object (its
/// blockers may go away); label protection and lookup failures do not end on
/// their own. Not on kcp (an object of a logical cluster), where nothing carries
/// deferred deletion out.
pub(crate) fn with_hint(req: &AdmissionRequest, mut eval: Evaluation) -> Evaluation {
    let on_kcp = req
        .old_object
        .as_ref()
        .is_some_and(|o| !logical_cluster(o).is_empty());
    if let Decision::Deny(d) = &mut eval.decision
        && d.kind == DenialKind::Protected
        && matches!(eval.decider, Decider::Policy(_))
        && !on_kcp
    {
        d.message = format!("{} {DEFERRED_HINT}", d.message);
    }
    eval
}

/// Judges a CREATE or UPDATE that sets or changes a deferred-deletion request:
/// refused (`Some`) unless its markers are complete, name the requester, and the
/// requester may delete the object as the controller will impersonate them.
pub(crate) async fn evaluate_request<V: ClusterView>(
    req: &AdmissionRequest,
    view: &V,
) -> Option<Evaluation> {
    use crate::deferred::{request_patch, request_problem};
    let new = req.object.as_ref()?;
    let user = req.user_info.username.as_str();
    let what = req.describe();
    let blockers = vec![crate::names::DELETE_WHEN_UNBLOCKED.to_string()];
    let refuse = |kind, message| Some(Evaluation::deny(Decider::Deferred, kind, message, blockers));
    if let Some(problem) = request_problem(new, user) {
        let target = kubectl_target(req);
        let message = messages::deferred_incomplete(&what, &problem, &target, &request_patch(user));
        return refuse(DenialKind::Protected, message);
    }
    let resource = req.resource.group_resource();
    let scope = req
        .object_namespace()
        .map(|n| format!(" in namespace {n}"))
        .unwrap_or_default();
    match view.can_delete_as(req, user).await {
        Ok(true) => None,
        Ok(false) => refuse(
            DenialKind::Protected,
            messages::deferred_not_permitted(user, &what, &resource.to_string(), &scope),
        ),
        Err(e) => refuse(
            DenialKind::LookupFailed,
            messages::deferred_unverified(user, &what, &e.0),
        ),
    }
}
