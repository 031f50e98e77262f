//! kcp: every endpoint of an APIExport's virtual workspace (the holdfast export, whose
//! virtual workspaces serve the policy objects of every binding workspace, and a
//! dependent type's own export), found through the APIExportEndpointSlice of the
//! export's name and watched into one merged index
//! ([`holdfast_shared::endpoints`]); and what a 404 of a live read means there.

use super::WebhookView;
use holdfast_shared::{
    api::common::GroupResource,
    endpoints::{Endpoints, Partitioned, Source},
    policy::LookupError,
    registry::CompiledDependency,
    review::ExportRoute,
};
use kube::{
    Api, Client, Resource,
    api::{DynamicObject, ListParams},
};
use serde_json::Value;
use std::{fmt, time::Duration};

/// How long an answer of [`WebhookView::bound_export_of`] is kept (a workspace
/// rarely rebinds a type; a stale answer only holds for this long).
const BINDING_TTL: Duration = Duration::from_secs(30);
/// Consumer workspaces whose bindings are kept at most (then all are dropped).
const BINDING_CAPACITY: usize = 10_000;
/// How long a read of a workspace's APIBindings may take.
const BINDING_READ_TIMEOUT: Duration = Duration::from_secs(8);

impl WebhookView {
    /// Feeds `index` from every endpoint of APIExportEndpointSlice `export` in the
    /// workspace of `home`, until the future is dropped.
    pub(super) async fn watch_endpoints<K, I>(
        &self,
        endpoints: Endpoints<K, I>,
        home: Client,
        export: &str,
        api: impl Fn(Client) -> Api<K> + Send + 'static,
    ) where
        K: Resource + Clone + serde::de::DeserializeOwned + fmt::Debug + Send + Sync + 'static,
        I: Partitioned<K> + Send + Sync + 'static,
    {
        let Some(clients) = self.cluster_clients.clone() else {
            tracing::warn!(
                apiexport = export,
                "no API server configuration; its endpoints are not watched"
            );
            return;
        };
        tracing::info!(
            apiexport = export,
            "watching every endpoint of the APIExportEndpointSlice"
        );
        endpoints
            .run(Source {
                home,
                slice: export.to_string(),
                clients,
                api: Box::new(api),
                config: kube::runtime::watcher::Config::default(),
            })
            .await;
    }

    /// On kcp: the workspace whose APIExportEndpointSlice lists the virtual
    /// workspaces of the dependent type's own APIExport (the rule's workspace), and
    /// the export; `None` when the rule names no export (the dependents are then read
    /// live, per request).
    pub(super) fn dependent_export(&self, dep: &CompiledDependency) -> Option<(Client, String)> {
        let export = dep.dependent_export.as_deref()?;
        if dep.rule.cluster.is_empty() {
            return None;
        }
        let client = self.cluster_client(&dep.rule.cluster).ok()?;
        Some((client, export.to_string()))
    }

    /// The APIExport workspace `cluster` binds `gr` from: from the APIBindings index
    /// when an endpoint of the holdfast export covers `cluster`, else its APIBindings
    /// read through the front-proxy (`list apibindings` there), kept [`BINDING_TTL`].
    pub(super) async fn bound_export_of(
        &self,
        cluster: &str,
        gr: &GroupResource,
    ) -> Result<Option<ExportRoute>, LookupError> {
        if let Some(indexed) = self.indexed_binding(cluster, gr) {
            return Ok(indexed);
        }
        let key = (cluster.to_string(), gr.clone());
        if let Some(hit) = self.bindings.get(&key)
            && hit.0.elapsed() < BINDING_TTL
        {
            return Ok(hit.1.clone());
        }
        let client = self.cluster_client(cluster)?;
        let api: Api<DynamicObject> =
            Api::all_with(client, &holdfast_shared::kcp::api_binding_resource());
        let list = tokio::time::timeout(BINDING_READ_TIMEOUT, api.list(&ListParams::default()))
            .await
            .map_err(|e| {
                LookupError::failed(
                    format!("reading the APIBindings of workspace {cluster} timed out"),
                    e,
                )
            })?
            .map_err(|e| {
                LookupError::failed(
                    format!("reading the APIBindings of workspace {cluster}: {e}"),
                    e,
                )
            })?;
        let found = list.items.iter().find_map(|b| binding_of(&b.data, gr));
        if self.bindings.len() >= BINDING_CAPACITY {
            self.bindings.clear();
        }
        self.bindings
            .insert(key, (std::time::Instant::now(), found.clone()));
        Ok(found)
    }
}

/// The export an APIBinding (`data`: everything but its metadata) binds `gr` from,
/// if its `status.boundResources` lists `gr`.
fn binding_of(data: &Value, gr: &GroupResource) -> Option<ExportRoute> {
    let bound = super::kcp_bindings::Bound::of(data);
    if bound.resources.contains(gr) {
        bound.export
    } else {
        None
    }
}

/// What a 404 of a live read of `group/version` `resource` in a kcp workspace means:
/// `Ok(())` when discovery of that workspace says the type is not served there (the
/// group/version is 404 too, or does not list the resource), else a lookup error (fail
/// closed: a 404 for a served type proves nothing).
pub(super) async fn not_served(
    client: &Client,
    cluster: &str,
    group: &str,
    version: &str,
    resource: &str,
) -> Result<(), LookupError> {
    let listed = if group.is_empty() {
        client.list_core_api_resources(version).await
    } else {
        client
            .list_api_group_resources(&format!("{group}/{version}"))
            .await
    };
    let gvr = if group.is_empty() {
        format!("{resource} ({version})")
    } else {
        format!("{resource}.{group} ({group}/{version})")
    };
    match listed {
        Ok(list) if !list.resources.iter().any(|r| r.name == resource) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Ok(_) => Err(LookupError::unreadable(format!(
            "listing {gvr} in workspace {cluster} answered 404 although its discovery serves the type; retry later"
        ))),
        Err(e) => Err(LookupError::failed(
            format!(
                "listing {gvr} in workspace {cluster} answered 404 and its discovery failed ({e}); retry later"
            ),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_binding_names_the_export_of_the_resources_it_binds() {
        let vpcs = GroupResource::new("network.test.io", "vpcs");
        let b = json!({
            "spec": {"reference": {"export": {"path": "root:net", "name": "net-b"}}},
            "status": {"apiExportClusterName": "lc1",
                       "boundResources": [{"group": "network.test.io", "resource": "vpcs"}]},
        });
        assert_eq!(
            binding_of(&b, &vpcs),
            Some(ExportRoute {
                cluster: "lc1".into(),
                name: "net-b".into()
            })
        );
        assert_eq!(
            binding_of(&b, &GroupResource::new("network.test.io", "subnets")),
            None
        );
        assert_eq!(
            binding_of(&b, &GroupResource::new("other.test.io", "vpcs")),
            None
        );
        // Not bound yet (no status), or no export cluster: nothing.
        assert_eq!(binding_of(&json!({"spec": b["spec"]}), &vpcs), None);
        let mut no_cluster = b.clone();
        no_cluster["status"]["apiExportClusterName"] = json!(null);
        assert_eq!(binding_of(&no_cluster, &vpcs), None);
    }

    /// An API server whose discovery serves `vms.compute.io/v1` virtualmachines,
    /// `empty.io/v1` with no resource, fails for `broken.io`, and knows no other group.
    fn discovery() -> Client {
        let svc = tower::service_fn(|req: http::Request<kube::client::Body>| async move {
            let list = |gv: &str, names: &[&str]| {
                let resources: Vec<_> = names
                    .iter()
                    .map(|n| json!({"name": n, "singularName": "", "namespaced": true, "kind": "X", "verbs": ["list"]}))
                    .collect();
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
            };
            let status = |code: u16| json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "no", "code": code});
            let (code, body) = match req.uri().path() {
                "/apis/compute.io/v1" => (200, list("compute.io/v1", &["virtualmachines"])),
                "/apis/empty.io/v1" => (200, list("empty.io/v1", &[])),
                "/api/v1" => (200, list("v1", &["configmaps"])),
                "/apis/broken.io/v1" => (503, status(503)),
                _ => (404, status(404)),
            };
            super::super::json_response(code, &body)
        });
        Client::new(svc, "default")
    }

    #[tokio::test]
    async fn a_404_is_not_served_only_when_discovery_says_so() {
        let c = discovery();
        // The group/version is 404 too, or does not list the resource: not served.
        assert!(
            not_served(&c, "lc", "other.io", "v1", "things")
                .await
                .is_ok()
        );
        assert!(
            not_served(&c, "lc", "empty.io", "v1", "things")
                .await
                .is_ok()
        );
        assert!(not_served(&c, "lc", "", "v1", "secrets").await.is_ok());
        // Discovery serves it: the 404 proves nothing.
        let served = not_served(&c, "lc", "compute.io", "v1", "virtualmachines").await;
        assert_eq!(
            served.err().map(|e| e.to_string()).as_deref(),
            Some(
                "listing virtualmachines.compute.io (compute.io/v1) in workspace lc answered 404 although its discovery serves the type; retry later"
            )
        );
        let core = not_served(&c, "lc", "", "v1", "configmaps").await;
        assert_eq!(
            core.err().map(|e| e.to_string()).as_deref(),
            Some(
                "listing configmaps (v1) in workspace lc answered 404 although its discovery serves the type; retry later"
            )
        );
        // Discovery fails: fail closed.
        let broken = not_served(&c, "lc", "broken.io", "v1", "gizmos").await;
        crate::view::assert_retry_later(
            broken,
            "listing gizmos.broken.io (broken.io/v1) in workspace lc answered 404 and its discovery failed (",
        );
    }
}
