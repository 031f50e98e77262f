//! Which objects a list, watch or deletecollection sees: logical cluster (and
//! APIExport binding), namespace, label and field selectors.

use super::Target;
use crate::errors::{ApiError, ApiResult};
use crate::kcp;
use crate::registry::ResourceInfo;
use crate::selectors::{FieldSelector, Selector};
use crate::server::{ClusterSel, Ctx, State};
use crate::store::Key;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What a wildcard request may see: the shard it reached, a `resource:identityHash`
/// identity and the APIExport virtual workspace it is in.
pub(super) struct Wild {
    state: Arc<State>,
    vw: Option<crate::server::VwCtx>,
    shard: Option<String>,
    identity: Option<String>,
    info: Arc<ResourceInfo>,
}

pub(super) struct Filter {
    pub(super) cluster: ClusterSel,
    /// Wildcard: clusters are checked against the shard, the identity and (APIExport
    /// virtual workspace) the bindings.
    pub(super) vw: Option<Wild>,
    /// Per-request memo of the binding check (lists); watches re-check every event.
    pub(super) vw_cache: Option<std::sync::Mutex<HashMap<String, bool>>>,
    /// The verb the objects are selected for (list, watch) where the virtual
    /// workspace's binding rules apply (None: the caller bypasses them).
    pub(super) verb: Option<&'static str>,
    pub(super) namespace: Option<String>,
    /// kcp-facts 16: APIBindings served without a claim show only the bindings to
    /// the virtual workspace's export (cluster, name).
    pub(super) export_only: Option<(String, String)>,
    pub(super) labels: Selector,
    pub(super) fields: FieldSelector,
}

impl Wild {
    /// Whether this is an APIExport virtual workspace's request.
    pub(super) fn in_virtual_workspace(&self) -> bool {
        self.vw.is_some()
    }
}

impl Filter {
    pub(super) fn new(
        state: &Arc<State>,
        ctx: &Ctx,
        t: &Target,
        query: &HashMap<String, String>,
    ) -> ApiResult<Filter> {
        let labels = Selector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let mut labels_ok = field_labels(&t.info);
        labels_ok.extend(t.info.selectable_fields.iter().map(String::as_str));
        let fields = FieldSelector::parse(
            query.get("fieldSelector").map(String::as_str).unwrap_or(""),
            &labels_ok,
        )
        .map_err(ApiError::bad_request)?;
        let vw = (ctx.cluster == ClusterSel::Wildcard).then(|| Wild {
            state: state.clone(),
            vw: ctx.vw.clone(),
            shard: ctx.shard.clone(),
            identity: ctx.identity.clone(),
            info: t.info.clone(),
        });
        Ok(Filter {
            cluster: ctx.cluster.clone(),
            vw,
            vw_cache: Some(std::sync::Mutex::new(HashMap::new())),
            verb: crate::authz::enforced(state, ctx).then_some("list"),
            namespace: t.namespace.clone(),
            export_only: ctx
                .vw
                .as_ref()
                .and_then(|vw| kcp::bindings_fallback(state, vw, &t.info)),
            labels,
            fields,
        })
    }

    /// The stored objects of the target this filter selects (in `cluster`, or in
    /// every cluster when None), in key order, and the store's resourceVersion.
    pub(super) fn select(
        &self,
        state: &State,
        t: &Target,
        cluster: Option<&str>,
    ) -> (Vec<(Key, Arc<Value>)>, u64) {
        let (all, rv) = state
            .store
            .list_keyed(&t.info.gr(), cluster, t.namespace.as_deref());
        let selected = all
            .into_iter()
            .filter(|(k, v)| self.key_ok(k) && self.obj_ok(v))
            .collect();
        (selected, rv)
    }

    pub(super) fn key_ok(&self, k: &Key) -> bool {
        let c = match &self.cluster {
            ClusterSel::Plain => k.cluster.is_empty(),
            ClusterSel::Lc(c) => &k.cluster == c,
            ClusterSel::Wildcard => !k.cluster.is_empty() && self.vw_allows(&k.cluster),
        };
        c && self.namespace.as_ref().is_none_or(|n| &k.namespace == n)
    }

    pub(super) fn vw_allows(&self, cluster: &str) -> bool {
        let Some(w) = &self.vw else {
            return true;
        };
        if let Some(c) = &self.vw_cache
            && let Ok(m) = c.lock()
            && let Some(b) = m.get(cluster)
        {
            return *b;
        }
        let ok = match &w.vw {
            Some(vw) => {
                kcp::vw_cluster_allowed(&w.state, vw, &w.info, cluster)
                    && self.verb.is_none_or(|verb| {
                        crate::authz::vw_cluster_visible(&w.state, vw, &w.info, cluster, verb)
                    })
            }
            None => kcp::wildcard_cluster_allowed(
                &w.state,
                w.shard.as_deref(),
                w.identity.as_deref(),
                &w.info,
                cluster,
            ),
        };
        if let Some(c) = &self.vw_cache
            && let Ok(mut m) = c.lock()
        {
            m.insert(cluster.to_string(), ok);
        }
        ok
    }

    pub(super) fn obj_ok(&self, v: &Value) -> bool {
        self.labels.matches(v)
            && self.fields.matches(v)
            && self
                .export_only
                .as_ref()
                .is_none_or(|e| kcp::binds_export(v, e))
    }
}

/// Field selectors each kind supports besides metadata.name / metadata.namespace.
pub(super) fn field_labels(info: &ResourceInfo) -> Vec<&'static str> {
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "pods") => vec![
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") | ("events.k8s.io", "events") => vec![
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingComponent",
            "reportingController",
            "source",
            "type",
        ],
        ("", "secrets") => vec!["type"],
        ("", "namespaces") => vec!["status.phase"],
        ("", "nodes") => vec!["spec.unschedulable"],
        ("", "replicationcontrollers") => vec!["status.replicas"],
        ("batch", "jobs") => vec!["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => vec!["spec.signerName"],
        _ => vec![],
    }
}
