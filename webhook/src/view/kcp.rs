//! kcp: what the view knows of the workspaces ([`Kcp`]: the APIBindings of those
//! binding holdfast, the types and paths containment found); every endpoint of an
//! APIExport's virtual workspace (the holdfast export, whose virtual workspaces serve
//! the policy objects of every binding workspace, and a dependent type's own export),
//! found through the APIExportEndpointSlice of the export's name and watched into one
//! merged index ([`holdfast_shared::endpoints`]); and what a 404 of a live read means
//! there.

use super::{
    WebhookView,
    clients::Clients,
    kcp_bindings::Bindings,
    kcp_contents::WorkspaceTypes,
    kcp_workspaces::{self, Reads, WorkspacePaths},
};
use holdfast_shared::{
    api::common::GroupResource,
    endpoints::{Endpoints, Partitioned, Source},
    policy::{ContainedObject, LookupError, WorkspaceContents},
    registry::{CompiledDependency, Registry},
    review::ExportRoute,
};
use kube::{Api, Client, Resource};
use serde_json::Value;
use std::{fmt, sync::Arc};

/// kcp: the holdfast export, the APIBindings of the workspaces binding it, and what
/// containment learnt of each workspace.
pub(super) struct Kcp {
    /// The holdfast APIExport whose virtual workspace serves the policy objects.
    export: String,
    bindings: Bindings,
    types: WorkspaceTypes,
    paths: WorkspacePaths,
}

impl Kcp {
    /// Nothing known yet of the workspaces binding `export`.
    pub(super) fn new(export: String) -> Self {
        Self {
            export,
            bindings: Bindings::default(),
            types: WorkspaceTypes::default(),
            paths: WorkspacePaths::default(),
        }
    }

    /// The holdfast APIExport.
    pub(super) fn export(&self) -> &str {
        &self.export
    }

    /// Whether workspace `cluster` binds the holdfast export, as far as the
    /// APIBindings index knows (unknown counts as binding).
    pub(super) fn binds_holdfast(&self, cluster: &str) -> bool {
        self.bindings.binds(cluster)
    }

    /// A client for workspace `cluster` in the holdfast export's virtual workspace at
    /// the endpoint of its shard, if an endpoint serves it.
    pub(super) fn event_client(&self, clients: &Clients, cluster: &str) -> Option<Client> {
        let url = self.bindings.seen_at(cluster)?;
        clients
            .per_url()?
            .virtual_workspace(&format!("{url}/clusters/{cluster}"))
            .ok()
    }

    /// See [`holdfast_shared::policy::ClusterView::bound_export`].
    pub(super) async fn bound_export(
        &self,
        clients: &Clients,
        cluster: &str,
        gr: &GroupResource,
    ) -> Result<Option<ExportRoute>, LookupError> {
        self.bindings.bound_export(clients, cluster, gr).await
    }

    /// Every object in namespace `ns` of workspace `cluster`, read live.
    pub(super) async fn namespace_contents(
        &self,
        clients: &Clients,
        registry: &Registry,
        cluster: &str,
        ns: &str,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        self.types
            .contents(clients, registry, cluster, Some(ns), &[])
            .await
    }

    /// See [`holdfast_shared::policy::ClusterView::binding_contents`].
    pub(super) async fn binding_contents(
        &self,
        clients: &Clients,
        registry: &Registry,
        cluster: &str,
        binding: &Value,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        kcp_workspaces::binding_contents(&self.reads(clients, registry), cluster, binding).await
    }

    /// See [`holdfast_shared::policy::ClusterView::workspace_contents`].
    pub(super) async fn workspace_contents(
        &self,
        clients: &Clients,
        registry: &Registry,
        workspace: &Value,
    ) -> Result<Vec<WorkspaceContents>, LookupError> {
        self.paths
            .workspace_contents(&self.reads(clients, registry), workspace)
            .await
    }

    fn reads<'a>(&'a self, clients: &'a Clients, registry: &'a Registry) -> Reads<'a> {
        Reads {
            bindings: &self.bindings,
            types: &self.types,
            clients,
            registry,
        }
    }

    /// The APIBindings index and cache, for tests.
    #[cfg(test)]
    pub(super) fn bindings(&self) -> &Bindings {
        &self.bindings
    }
}

/// Watches the APIBindings of every workspace that binds the holdfast export,
/// through every endpoint of its virtual workspace (`home`: the holdfast workspace).
pub(super) async fn watch_bindings(view: Arc<WebhookView>, home: Client) {
    let ar = holdfast_shared::kcp::api_binding_resource();
    watch_endpoints(
        &view.clients,
        view.kcp.bindings.endpoints(),
        home,
        view.kcp.export(),
        move |c| Api::all_with(c, &ar),
    )
    .await;
}

/// Feeds `endpoints` from every endpoint of APIExportEndpointSlice `export` in the
/// workspace of `home`, until the future is dropped.
pub(super) async fn watch_endpoints<K, I>(
    clients: &Clients,
    endpoints: Endpoints<K, I>,
    home: Client,
    export: &str,
    api: impl Fn(Client) -> Api<K> + Send + 'static,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    I: Partitioned<K> + Send + Sync + 'static,
{
    let Some(clients) = clients.per_url().cloned() else {
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
pub(super) fn dependent_export(
    clients: &Clients,
    dep: &CompiledDependency,
) -> Option<(Client, String)> {
    let export = dep.dependent_export.as_deref()?;
    if dep.rule.cluster.is_empty() {
        return None;
    }
    let client = clients.cluster(&dep.rule.cluster).ok()?;
    Some((client, export.to_string()))
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
