//! The policy objects (ResourceProtection, DependencyRule, CriticalService,
//! AnchorRule) over one DELETE, once their registry has loaded.

use super::{
    ClusterView, Decider, DenialKind, Evaluation, anchor, critical, dependency, logical_cluster,
    messages, outcome::Outcome, protection,
};
use crate::{
    api::common::GroupResource,
    review::{AdmissionRequest, labels},
};
use serde_json::{Map, Value};

/// The object a DELETE is about, as every policy object's evaluator reads it.
pub(crate) struct Subject<'a> {
    /// The request.
    pub(crate) req: &'a AdmissionRequest,
    /// The object (the request's oldObject).
    pub(crate) obj: &'a Value,
    /// Its resource.
    pub(crate) gr: GroupResource,
    /// Its name.
    pub(crate) name: &'a str,
    /// Its namespace (`None`: cluster-scoped).
    pub(crate) namespace: Option<&'a str>,
    /// Its logical cluster ("" on plain Kubernetes).
    pub(crate) cluster: &'a str,
    /// `Kind ns/name`, as messages name it.
    pub(crate) what: String,
}

impl<'a> Subject<'a> {
    fn new(req: &'a AdmissionRequest, obj: &'a Value) -> Self {
        Self {
            req,
            obj,
            gr: GroupResource::new(&req.resource.group, &req.resource.resource),
            name: req.object_name().unwrap_or_default(),
            namespace: req.object_namespace(),
            cluster: logical_cluster(obj),
            what: req.describe(),
        }
    }

    /// The object's own labels.
    pub(crate) fn labels(&self) -> Option<&'a Map<String, Value>> {
        labels(self.obj)
    }
}

/// The protections of one object after its labels: policy objects, once loaded.
pub(crate) async fn evaluate<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    view: &V,
) -> Evaluation {
    if view.may_govern_delete(req) && !view.policies_loaded() {
        return Evaluation::deny(
            Decider::NotReady,
            DenialKind::NotReady,
            messages::not_ready(&req.describe()),
            Vec::new(),
        );
    }
    outcome(req, obj, view).await.into_evaluation()
}

/// What every policy object says about the DELETE of `obj`.
pub(crate) async fn outcome<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    view: &V,
) -> Outcome {
    let subject = Subject::new(req, obj);
    let mut out = Outcome::default();
    protection::evaluate(&subject, view, &mut out).await;
    dependency::evaluate(&subject, view, &mut out).await;
    critical::evaluate(&subject, view, &mut out).await;
    anchor::evaluate(&subject, view, &mut out).await;
    out
}
