//! Evictions: a `CREATE pods/eviction` deletes the pod without a DELETE review, so
//! it is judged as the DELETE of the pod it names would be.

use super::{
    ClusterView, Context, Decider, Decision, DenialKind, Evaluation, evaluate_delete,
    logical_cluster, messages, unreadable,
};
use crate::{
    api::common::GroupResource,
    review::{AdmissionRequest, Gvk, Operation},
};

/// Judges an eviction as the DELETE of its pod.
pub(crate) async fn evaluate<V: ClusterView>(
    req: &AdmissionRequest,
    cx: &Context<'_, V>,
) -> Evaluation {
    let Some(name) = req.name.as_deref().filter(|n| !n.is_empty()) else {
        return unreadable(req, "the eviction names no pod");
    };
    let cluster = req.object.as_ref().map(logical_cluster).unwrap_or_default();
    let ns = req.namespace.as_deref();
    let pod = match cx
        .view
        .object(cluster, &GroupResource::new("", "pods"), ns, name)
        .await
    {
        Ok(Some(pod)) => pod,
        // No such pod: the API server answers 404 itself.
        Ok(None) => return Evaluation::allow(Decider::None),
        Err(e) => {
            return Evaluation::deny(
                Decider::Eviction,
                DenialKind::LookupFailed,
                messages::eviction_unverified(ns.unwrap_or_default(), name, e.message()),
                Vec::new(),
            );
        }
    };
    let delete = AdmissionRequest {
        kind: Gvk {
            group: String::new(),
            version: "v1".to_string(),
            kind: "Pod".to_string(),
        },
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        operation: Operation::Delete,
        object: None,
        old_object: Some((*pod).clone()),
        options: None,
        ..req.clone()
    };
    let delete = super::as_judged(&delete, cx.cfg).into_owned();
    let mut eval = evaluate_delete(&delete, cx).await;
    if let Decision::Deny(d) = &mut eval.decision {
        d.message = messages::eviction_refused(&d.message);
    }
    eval
}
