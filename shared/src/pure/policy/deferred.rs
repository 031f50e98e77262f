//! Deferred deletion as the webhook sees it: requests for it are judged, and the
//! refusals it can outlast point to it.

use super::{
    ClusterView, Decider, Decision, DenialKind, Evaluation, kubectl_target,
    messages::{self, DEFERRED_HINT},
};
use crate::review::AdmissionRequest;

/// Appends [`DEFERRED_HINT`] to the refusal of a DELETE by a policy object (its
/// blockers may go away); label protection and lookup failures do not end on
/// their own. Not on kcp (an object of a logical cluster), where nothing carries
/// deferred deletion out.
pub(crate) fn with_hint(cfg: &super::PolicyConfig, mut eval: Evaluation) -> Evaluation {
    let on_kcp = cfg.kcp;
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
/// refused (`Some`) unless its markers are complete and name the requester (the
/// review's own userInfo), the kind is one the API server sends to webhooks, the
/// requester may delete the object as the controller will impersonate them, and
/// it carries a fresh signature holdfast issued for the object and that user.
/// Without one the refusal carries it: the same request with the signature is
/// admitted (see [`crate::request_signature`]).
pub(crate) async fn evaluate_request<V: ClusterView>(
    req: &AdmissionRequest,
    view: &V,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Evaluation> {
    use crate::deferred::{never_reviewed, request_patch, request_problem, signature};
    use crate::request_signature::{SignatureProblem, fresh};
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
    let gr = crate::api::common::GroupResource::new(&req.resource.group, &req.resource.resource);
    if never_reviewed(&gr) {
        return refuse(
            DenialKind::Protected,
            messages::deferred_never_reviewed(&what, &resource),
        );
    }
    let scope = req
        .object_namespace()
        .map(|n| format!(" in namespace {n}"))
        .unwrap_or_default();
    match view.can_delete_as(req, user).await {
        Ok(true) => {}
        Ok(false) => {
            return refuse(
                DenialKind::Protected,
                messages::deferred_not_permitted(user, &what, &resource.to_string(), &scope),
            );
        }
        Err(e) => {
            return refuse(
                DenialKind::LookupFailed,
                messages::deferred_unverified(user, &what, e.message()),
            );
        }
    }
    let Some(uid) = crate::review::meta_str(new, "uid").filter(|u| !u.is_empty()) else {
        return refuse(DenialKind::Protected, messages::deferred_no_uid(&what));
    };
    let key = match view.request_key().await {
        Ok(k) => k,
        Err(e) => {
            return refuse(
                DenialKind::LookupFailed,
                messages::deferred_no_key(&what, e.message()),
            );
        }
    };
    let why = match key.verify(signature(new), uid, user) {
        Ok(at) if fresh(at, now) => return None,
        Ok(_) => "the signature it carries has expired".to_string(),
        Err(SignatureProblem::Absent) => "holdfast signs each request".to_string(),
        Err(p) => p.to_string(),
    };
    let sig = key.sign(uid, user, now);
    let target = kubectl_target(req);
    let patch = crate::deferred::signed_request_patch(user, &sig);
    refuse(
        DenialKind::Protected,
        messages::deferred_sign(&what, &why, &sig, &target, &patch),
    )
}
