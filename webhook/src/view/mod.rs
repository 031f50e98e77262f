//! The webhook's view of cluster state, as the policies see it: the rule registry
//! (fed by watches of the policy objects), the dependents index (fed by watches of
//! dependent resources), and live lookups through the API server.
//!
//! Label and strict-mode decisions need none of it. Until every registry source has
//! loaded, `policies_loaded` is false: `/readyz` answers 503 and DELETEs a policy
//! object could govern are denied with "retry later". In `--label-only` mode there
//! are no sources and the view is loaded from the start.
//!
//! Every cache here is fed by the shared watch driver ([`holdfast_shared::watch`]),
//! one module per concern:
//! - [`policies`]: the policy watches feeding the registry;
//! - [`dependents`]: the dependents index (and live dependents lookups);
//! - [`store_manager`]: which object stores run, and the stores Cascading needs;
//! - [`crds`]: CustomResourceDefinitions and APIServices (what discovery must see);
//! - [`discovery`]: the namespaced resources the label stores cover;
//! - [`cluster`]: [`ClusterView`] over all of it;
//! - [`kcp`]: every endpoint of an APIExport's virtual workspace; 404s of live reads.

mod cluster;
pub mod crds;
mod dependents;
pub mod discovery;
mod kcp;
mod kcp_bindings;
mod kcp_contents;
mod kcp_workspaces;
mod policies;
mod request_key;
mod store_manager;

use crate::{
    metrics::Metrics,
    stores::{Depth, Resolver, ResourceStore},
};
use dashmap::DashMap;
use holdfast_shared::{
    api::common::GroupResource,
    index::DependentsIndex,
    policy::LookupError,
    registry::{ProtectionPartition, Registry},
    review::ExportRoute,
    topology::Topology,
};
use kube::Client;
use std::{future::Future, path::Path, sync::Arc, time::Duration};
use tokio::sync::Notify;

pub use crds::CrdFacts;

/// Logical clusters with a cached API client at most (kcp).
const MAX_CLUSTER_CLIENTS: u64 = 1024;

/// How often the gauges of the registry and indexes are refreshed.
const GAUGE_PERIOD: Duration = Duration::from_secs(5);

/// How dependents of a DependencyRule are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DependentsMode {
    /// A watch-fed index: a check is a hash lookup (falls back to `live` until synced).
    Watch,
    /// A list through the API server per request.
    Live,
}

/// What the webhook knows of the cluster.
pub struct WebhookView {
    topology: Topology,
    label_only: bool,
    mode: DependentsMode,
    client: Option<Client>,
    /// ResourceProtections split by namespace, per logical cluster ("" on
    /// Kubernetes) and resource (rebuilt when the registry's list for the resource
    /// changes).
    partitions:
        DashMap<GroupResource, std::collections::HashMap<Arc<str>, Arc<ProtectionPartition>>>,
    /// Per-URL clients (kcp), one connection pool per server, bounded: a review names
    /// its logical cluster, so the set of names is the caller's choice.
    cluster_clients: Option<holdfast_shared::kcp::Clients>,
    registry: Arc<Registry>,
    index: DependentsIndex,
    synced: DashMap<String, bool>,
    /// kcp: the merged index of every endpoint of a dependent type's APIExport, per
    /// dependent resource (which consumer clusters the index covers).
    dependents_endpoints: DashMap<
        String,
        holdfast_shared::endpoints::Endpoints<kube::api::DynamicObject, dependents::DependentsFeed>,
    >,
    changed: Notify,
    metrics: Metrics,
    label_keys: Vec<String>,
    apiexport: String,
    resolver: Resolver,
    stores: DashMap<StoreKey, Arc<ResourceStore>>,
    /// Why the last discovery was incomplete (None: complete). While incomplete,
    /// the stores of what could not be discovered are kept, and namespace and CRD
    /// DELETEs are refused (their contents may be unknown).
    discovery_problem: std::sync::RwLock<Option<String>>,
    /// Namespaced custom resources of established CRDs (from a CRD watch): each
    /// must have synced label stores before a namespace's contents are trusted.
    crd_resources: DashMap<GroupResource, ()>,
    /// Wakes the store manager to rediscover at once (a CRD changed).
    rediscover: Notify,
    /// Protection label keys that list the value `Cascading`.
    cascading_keys: Vec<String>,
    /// Stores Cascading protection asked for: started on first need, then kept.
    cascade_demand: DashMap<StoreKey, ()>,
    /// Wakes the store manager at once when Cascading protection needs a new store.
    cascade_wanted: Notify,
    /// Every CustomResourceDefinition (Kubernetes topology, from the CRD watch), by
    /// the resource it serves.
    crds: DashMap<GroupResource, CrdFacts>,
    /// Whether the CRD watch has listed every CRD once.
    crds_listed: std::sync::atomic::AtomicBool,
    /// Types the webhook's identity may not list and watch (when last asked).
    refused: DashMap<GroupResource, ()>,
    /// Anchors of AnchorRules whose anchors live in another cluster.
    remotes: crate::remote::RemoteStores,
    /// The key that signs deferred-deletion requests, as last read.
    request_key: request_key::KeyCache,
    /// Passes of the store manager completed (every wanted store started).
    store_passes: std::sync::atomic::AtomicU64,
    /// kcp: which APIExport a consumer workspace binds a group/resource from, as
    /// last read (see `bound_export`), with when it was read.
    bindings: DashMap<(String, GroupResource), (std::time::Instant, Option<ExportRoute>)>,
    /// kcp: the namespaced types of each workspace, as last discovered (namespace
    /// containment reads them live).
    workspace_types: DashMap<String, kcp_contents::Discovered>,
    /// kcp: the path of each logical cluster workspace containment has placed (a
    /// workspace's path never changes).
    workspace_paths: DashMap<String, String>,
    /// kcp: the APIBindings of every workspace that binds the holdfast export, from
    /// every endpoint of its virtual workspace.
    apibindings: holdfast_shared::endpoints::Endpoints<
        kube::api::DynamicObject,
        kcp_bindings::BindingsIndex,
    >,
}

/// Identity of an object store: resource, depth, and label selector (label stores).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoreKey {
    /// The resource.
    pub gr: GroupResource,
    /// How much of each object is kept.
    pub depth: Depth,
    /// Only objects with this label key (label-protected objects).
    pub label: Option<String>,
}

/// Options of the view.
pub struct ViewOptions<'a> {
    /// Topology.
    pub topology: Topology,
    /// Kubeconfig path (else inferred).
    pub kubeconfig: Option<&'a Path>,
    /// Serve label protection only.
    pub label_only: bool,
    /// Dependents strategy.
    pub mode: DependentsMode,
    /// Protection label keys (for the label-protected object stores).
    pub label_keys: Vec<String>,
    /// kcp: the holdfast APIExport whose virtual workspace serves the policy objects.
    pub apiexport: String,
    /// kcp: kubeconfig for virtual-workspace URLs (credentials and CA), when they
    /// differ from the front-proxy's.
    pub virtual_workspace_kubeconfig: Option<&'a Path>,
    /// Protection label keys that list the value `Cascading`.
    pub cascading_keys: Vec<String>,
}

impl WebhookView {
    /// Builds the view. An API server that cannot be configured is logged, not fatal:
    /// label decisions do not need it (policy objects then never load).
    pub async fn new(opts: ViewOptions<'_>, metrics: Metrics) -> Arc<Self> {
        let (client, base_config) = Self::clients(&opts).await;
        let vw_config = match opts.virtual_workspace_kubeconfig {
            Some(path) => match holdfast_shared::kubeconfig::load(Some(path)).await {
                Ok(c) => Some(c),
                Err(e) => {
                    // Without it the virtual workspaces would be reached with the wrong
                    // credentials: build no kcp clients (every kcp read fails closed).
                    tracing::error!(error = %format!("{e:#}"), "cannot load --virtual-workspace-kubeconfig");
                    return Self::build(opts, client, None, metrics);
                }
            },
            None => None,
        };
        Self::build_with(opts, client, base_config, vw_config, metrics)
    }

    /// Builds the view over an API server configuration already loaded (the plugin:
    /// the caller's kubeconfig with its overrides); `opts.kubeconfig` is not read.
    pub fn with_config(opts: ViewOptions<'_>, config: kube::Config, metrics: Metrics) -> Arc<Self> {
        let (client, base_config) = match Client::try_from(config.clone()) {
            Ok(c) => (Some(c), Some(config)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot build an API client; policy objects cannot be loaded");
                (None, None)
            }
        };
        Self::build(opts, client, base_config, metrics)
    }

    async fn clients(opts: &ViewOptions<'_>) -> (Option<Client>, Option<kube::Config>) {
        // Label protection needs no API server, but with one the webhook can also
        // judge evictions (it reads the pod) and CRD deletions.
        let quiet = opts.label_only;
        match holdfast_shared::kubeconfig::load(opts.kubeconfig).await {
            Ok(cfg) => match Client::try_from(cfg.clone()) {
                Ok(c) => (Some(c), Some(cfg)),
                Err(e) => {
                    if !quiet {
                        tracing::warn!(error = %e, "cannot build an API client; policy objects cannot be loaded");
                    }
                    (None, None)
                }
            },
            Err(e) => {
                if !quiet {
                    tracing::warn!(error = %format!("{e:#}"), "no API server configuration; policy objects cannot be loaded");
                }
                (None, None)
            }
        }
    }

    fn build(
        opts: ViewOptions<'_>,
        client: Option<Client>,
        base_config: Option<kube::Config>,
        metrics: Metrics,
    ) -> Arc<Self> {
        Self::build_with(opts, client, base_config, None, metrics)
    }

    fn build_with(
        opts: ViewOptions<'_>,
        client: Option<Client>,
        base_config: Option<kube::Config>,
        vw_config: Option<kube::Config>,
        metrics: Metrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            topology: opts.topology,
            label_only: opts.label_only,
            mode: opts.mode,
            client,
            partitions: DashMap::new(),
            cluster_clients: base_config.map(|c| {
                holdfast_shared::kcp::Clients::new(c, MAX_CLUSTER_CLIENTS)
                    .with_virtual_workspace_config(vw_config)
            }),
            registry: Arc::new(Registry::default()),
            index: DependentsIndex::default(),
            synced: DashMap::new(),
            dependents_endpoints: DashMap::new(),
            changed: Notify::new(),
            metrics,
            label_keys: opts.label_keys,
            apiexport: opts.apiexport,
            resolver: Resolver::default(),
            stores: DashMap::new(),
            discovery_problem: std::sync::RwLock::new(None),
            crd_resources: DashMap::new(),
            rediscover: Notify::new(),
            cascading_keys: opts.cascading_keys,
            cascade_demand: DashMap::new(),
            cascade_wanted: Notify::new(),
            crds: DashMap::new(),
            crds_listed: std::sync::atomic::AtomicBool::new(false),
            refused: DashMap::new(),
            remotes: crate::remote::RemoteStores::default(),
            request_key: request_key::KeyCache::default(),
            store_passes: std::sync::atomic::AtomicU64::new(0),
            bindings: DashMap::new(),
            workspace_types: DashMap::new(),
            workspace_paths: DashMap::new(),
            apibindings: holdfast_shared::endpoints::Endpoints::new(
                kcp_bindings::BindingsIndex::default(),
            ),
        })
    }

    /// Why discovery is incomplete, if it is (for `/readyz`).
    pub fn discovery_problem(&self) -> Option<String> {
        match self.discovery_problem.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn set_discovery_problem(&self, problem: Option<String>) {
        match self.discovery_problem.write() {
            Ok(mut g) => *g = problem,
            Err(p) => *p.into_inner() = problem,
        }
    }

    /// An error while discovery is incomplete.
    fn discovery_complete(&self) -> Result<(), LookupError> {
        match self.discovery_problem() {
            Some(p) => Err(LookupError::unreadable(format!(
                "API discovery is incomplete ({p}), so objects of some resources cannot be seen"
            ))),
            None => Ok(()),
        }
    }

    /// An API client for logical cluster `lc` ("" on Kubernetes), if configured.
    pub fn client_for(&self, lc: &str) -> Option<Client> {
        self.cluster_client(lc).ok()
    }

    /// How many passes of the store manager have completed: one that starts after
    /// the policies loaded and the CRDs were listed has started every store they
    /// need (the plugin waits for it; each store then reports its own sync).
    pub fn store_passes(&self) -> u64 {
        self.store_passes.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the object stores namespace containment reads have been started (one
    /// store-manager pass completed). Before that the set of stores is empty, and an
    /// empty set must not read as "the namespace holds nothing". Label-only mode (and a
    /// webhook without an API client) keeps no stores, so nothing is waited for; nor
    /// on kcp, where containment reads no store: it lists the namespace's contents
    /// live in the object's workspace (`kcp_contents`).
    pub fn stores_built(&self) -> bool {
        self.label_only
            || self.client.is_none()
            || self.topology != Topology::Kubernetes
            || self.store_passes() > 0
    }

    /// Asks the store manager for another pass at once.
    pub fn wake_stores(&self) {
        self.changed.notify_one();
    }

    /// Whether the CRD watch has listed every CRD once (Kubernetes).
    pub fn crds_listed(&self) -> bool {
        self.crds_listed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The registry (for metrics and tests).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The stores of anchors in other clusters.
    pub fn remote_stores(&self) -> &crate::remote::RemoteStores {
        &self.remotes
    }

    /// Starts the watches; they stop when `shutdown` fires.
    pub fn start(self: &Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        if self.label_only {
            return;
        }
        let Some(client) = self.client.clone() else {
            return;
        };
        let crd_client = client.clone();
        // kcp: `client` is at the holdfast workspace, whose APIExportEndpointSlice
        // lists the virtual workspaces the policies are read through.
        self.start_policy_watches(client.clone(), shutdown.clone());
        if self.topology == Topology::Kubernetes {
            // kcp: no object stores (they would need a wildcard through the
            // front-proxy, which kcp refuses); reads there are live.
            self.spawn(
                shutdown.clone(),
                store_manager::manage_stores(self.clone(), shutdown.clone()),
            );
            self.spawn(
                shutdown.clone(),
                crate::remote::manage(self.clone(), crd_client.clone()),
            );
            self.spawn(
                shutdown.clone(),
                crds::watch_crds(self.clone(), crd_client.clone()),
            );
            self.spawn(
                shutdown.clone(),
                crds::watch_api_services(self.clone(), crd_client),
            );
        }
        if self.topology == Topology::Kcp {
            let this = self.clone();
            let home = client.clone();
            self.spawn(shutdown.clone(), async move {
                let ar = holdfast_shared::kcp::api_binding_resource();
                let export = this.apiexport.clone();
                this.watch_endpoints(this.apibindings.clone(), home, &export, move |c| {
                    kube::Api::all_with(c, &ar)
                })
                .await;
            });
        }
        if self.mode == DependentsMode::Watch {
            self.spawn(
                shutdown.clone(),
                dependents::manage_dependents(self.clone(), shutdown.clone()),
            );
        }
        let this = self.clone();
        self.spawn(shutdown, async move {
            let mut tick = tokio::time::interval(GAUGE_PERIOD);
            loop {
                tick.tick().await;
                this.update_gauges();
            }
        });
    }

    fn spawn(
        &self,
        shutdown: tokio_util::sync::CancellationToken,
        fut: impl Future<Output = ()> + Send + 'static,
    ) {
        tokio::spawn(async move {
            tokio::select! {
                _ = fut => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }

    fn update_gauges(&self) {
        let m = &self.metrics;
        let reg = &self.registry;
        for (kind, len) in [
            ("DependencyRule", reg.dependencies.len()),
            ("ResourceProtection", reg.protections.len()),
            ("CriticalService", reg.critical.len()),
            ("AnchorRule", reg.anchors.len()),
        ] {
            m.registry_size
                .with_label_values(&[kind])
                .set(i64::try_from(len).unwrap_or(i64::MAX));
        }
        m.index_references.set(self.index.len() as i64);
        for e in self.synced.iter() {
            m.index_synced
                .with_label_values(&[e.key().as_str()])
                .set(i64::from(*e.value()));
        }
    }

    /// A client addressing logical cluster `lc` through the front-proxy (kcp), or the
    /// cluster itself (Kubernetes).
    fn cluster_client(&self, lc: &str) -> Result<Client, LookupError> {
        let no_client = || LookupError::unreadable("no API server client is configured");
        if self.topology == Topology::Kubernetes || lc.is_empty() {
            return self.client.clone().ok_or_else(no_client);
        }
        let clients = self.cluster_clients.as_ref().ok_or_else(no_client)?;
        let client = clients.cluster(lc).map_err(LookupError::from_error)?;
        self.metrics
            .cluster_clients
            .set(i64::try_from(clients.urls().cached()).unwrap_or(i64::MAX));
        Ok(client)
    }
}

/// A view with no API server, for unit tests of its parts.
#[cfg(test)]
fn test_view(topology: Topology, mode: DependentsMode) -> Arc<WebhookView> {
    WebhookView::build(
        ViewOptions {
            virtual_workspace_kubeconfig: None,
            topology,
            kubeconfig: None,
            label_only: false,
            mode,
            label_keys: Vec::new(),
            apiexport: "holdfast".into(),
            cascading_keys: Vec::new(),
        },
        None,
        None,
        Metrics::new().unwrap_or_else(|e| panic!("metrics: {e}")),
    )
}

/// Asserts that `result` failed with a message starting with `start` and ending
/// with `); retry later` (the middle is a client error's own text).
#[cfg(test)]
fn assert_retry_later(result: Result<(), LookupError>, start: &str) {
    let message = result.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.starts_with(start) && message.ends_with("); retry later"),
        "{message}"
    );
}

/// An API server's JSON answer, for the fake servers of unit tests.
#[cfg(test)]
fn json_response(
    status: u16,
    body: &serde_json::Value,
) -> Result<http::Response<http_body_util::Full<bytes::Bytes>>, String> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .map_err(|e| e.to_string())
}

/// The anchors in other clusters the AnchorRules name, for [`crate::remote::manage`].
impl crate::remote::AnchorSources for WebhookView {
    fn wanted_remotes(&self) -> std::collections::HashSet<crate::remote::RemoteKey> {
        self.registry
            .anchors
            .entries()
            .iter()
            .filter_map(|a| {
                a.source.as_ref().map(|s| crate::remote::RemoteKey {
                    source: s.clone(),
                    gr: a.anchor.clone(),
                    version: a.anchor_version.clone(),
                })
            })
            .collect()
    }

    fn remote_stores(&self) -> &crate::remote::RemoteStores {
        &self.remotes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_shared::{policy::ClusterView, review::AdmissionRequest};
    use serde_json::json;
    use std::collections::HashMap;

    /// A fake API server answering discovery: `good.io` serves widgets, `broken.io`
    /// answers 500 for its group version, `gone.io` is listed but its group version
    /// answers 404 and has no APIService left (its CRD went between the two reads),
    /// `local.io` answers 404 with a local APIService (a CRD's, being removed), and
    /// `agg.io` answers 404 while its APIService names an extension server's Service.
    fn fake_client() -> Client {
        let svc = tower::service_fn(|req: http::Request<kube::client::Body>| async move {
            let (status, body) = match req.uri().path() {
                "/apis" => (
                    200,
                    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                        {"name": "good.io", "versions": [{"groupVersion": "good.io/v1", "version": "v1"}],
                         "preferredVersion": {"groupVersion": "good.io/v1", "version": "v1"}},
                        {"name": "broken.io", "versions": [{"groupVersion": "broken.io/v1", "version": "v1"}],
                         "preferredVersion": {"groupVersion": "broken.io/v1", "version": "v1"}},
                        {"name": "gone.io", "versions": [{"groupVersion": "gone.io/v1", "version": "v1"}],
                         "preferredVersion": {"groupVersion": "gone.io/v1", "version": "v1"}},
                        {"name": "local.io", "versions": [{"groupVersion": "local.io/v1", "version": "v1"}],
                         "preferredVersion": {"groupVersion": "local.io/v1", "version": "v1"}},
                        {"name": "agg.io", "versions": [{"groupVersion": "agg.io/v1", "version": "v1"}],
                         "preferredVersion": {"groupVersion": "agg.io/v1", "version": "v1"}},
                        {"name": "apiregistration.k8s.io", "versions": [{"groupVersion": "apiregistration.k8s.io/v1", "version": "v1"}],
                         "preferredVersion": {"groupVersion": "apiregistration.k8s.io/v1", "version": "v1"}}]}),
                ),
                "/apis/apiregistration.k8s.io/v1" => (
                    200,
                    json!({"kind": "APIResourceList", "groupVersion": "apiregistration.k8s.io/v1", "resources": [
                        {"name": "apiservices", "singularName": "apiservice", "namespaced": false, "kind": "APIService", "verbs": ["get", "list", "watch"]}]}),
                ),
                "/apis/apiregistration.k8s.io/v1/apiservices/v1.local.io" => (
                    200,
                    json!({"kind": "APIService", "apiVersion": "apiregistration.k8s.io/v1",
                        "metadata": {"name": "v1.local.io"},
                        "spec": {"group": "local.io", "version": "v1", "service": null}}),
                ),
                "/apis/apiregistration.k8s.io/v1/apiservices/v1.agg.io" => (
                    200,
                    json!({"kind": "APIService", "apiVersion": "apiregistration.k8s.io/v1",
                        "metadata": {"name": "v1.agg.io"},
                        "spec": {"group": "agg.io", "version": "v1",
                                 "service": {"namespace": "ext", "name": "agg-server"}}}),
                ),
                "/apis/gone.io/v1"
                | "/apis/local.io/v1"
                | "/apis/agg.io/v1"
                | "/apis/apiregistration.k8s.io/v1/apiservices/v1.gone.io" => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404}),
                ),
                "/api/v1" => (
                    200,
                    json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                        {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap", "verbs": ["list", "watch", "get"]},
                        {"name": "events", "singularName": "event", "namespaced": true, "kind": "Event", "verbs": ["list", "watch"]},
                        {"name": "pods/status", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]},
                        {"name": "nodes", "singularName": "node", "namespaced": false, "kind": "Node", "verbs": ["list", "watch"]}]}),
                ),
                "/apis/good.io/v1" => (
                    200,
                    json!({"kind": "APIResourceList", "groupVersion": "good.io/v1", "resources": [
                        {"name": "widgets", "singularName": "widget", "namespaced": true, "kind": "Widget", "verbs": ["list", "watch"]}]}),
                ),
                _ => (
                    500,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "boom", "code": 500}),
                ),
            };
            json_response(status, &body)
        });
        Client::new(svc, "default")
    }

    fn options(label_only: bool) -> ViewOptions<'static> {
        ViewOptions {
            virtual_workspace_kubeconfig: None,
            topology: Topology::Kubernetes,
            kubeconfig: None,
            label_only,
            mode: DependentsMode::Watch,
            label_keys: vec!["holdfast.dev/protected".to_string()],
            apiexport: String::new(),
            cascading_keys: Vec::new(),
        }
    }

    #[tokio::test]
    async fn namespace_contents_are_refused_until_the_stores_are_started() {
        let metrics = Metrics::new().expect("metrics");
        let view = WebhookView::build(options(false), Some(fake_client()), None, metrics.clone());
        // No store-manager pass yet: no stores at all, which must not read as "the
        // namespace holds nothing".
        assert!(!view.stores_built());
        let err = view
            .namespace_contents("", "shop")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "holdfast has just started and is still building the indexes of what namespaces hold"
        );
        // After a pass (every wanted store started), the stores answer.
        view.store_passes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        assert!(view.stores_built());
        let contents = view.namespace_contents("", "shop").await.map(|c| c.len());
        assert_eq!(contents.ok(), Some(0));
        // Label-only mode keeps no stores and waits for none.
        let label_only = WebhookView::build(options(true), None, None, metrics);
        assert!(label_only.stores_built());
    }

    /// An UPDATE of ConfigMap shop/cfg in logical cluster `lc`, its labels going
    /// from `old` to `new`.
    fn update_in(lc: &str, old: serde_json::Value, new: serde_json::Value) -> AdmissionRequest {
        let meta = |labels: serde_json::Value| {
            json!({"metadata": {"name": "cfg", "namespace": "shop", "labels": labels,
                                "annotations": {"kcp.io/cluster": lc}}})
        };
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cfg", "namespace": "shop", "operation": "UPDATE", "userInfo": {"username": "bob"},
            "object": meta(new), "oldObject": meta(old)}});
        holdfast_shared::review::parse_review(body.to_string().as_bytes()).expect("review")
    }

    #[test]
    fn strict_protections_answer_for_their_own_workspace_only() {
        use holdfast_shared::api::resource_protection::ResourceProtection;
        let view = test_view(Topology::Kcp, DependentsMode::Live);
        for (lc, name) in [("lc-a", "strict-a"), ("lc-c", "strict-c")] {
            let rp: ResourceProtection = serde_json::from_value(json!({
                "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
                "metadata": {"name": name, "annotations": {"kcp.io/cluster": lc}},
                "spec": {"strict": true, "resources": [{"version": "v1", "resource": "configmaps",
                         "labelSelector": {"matchLabels": {"tier": "data"}}}]}}))
            .expect("rp");
            view.registry.apply(lc, &rp).expect("compiles");
        }
        let cms = GroupResource::new("", "configmaps");
        let names = |lc: &str, ns: Option<&str>| -> Vec<String> {
            view.protection_candidates(lc, &cms, ns)
                .iter()
                .map(|p| p.key.to_string())
                .collect()
        };
        assert_eq!(names("lc-a", Some("shop")), ["lc-a|strict-a"]);
        assert_eq!(names("lc-c", Some("shop")), ["lc-c|strict-c"]);
        assert_eq!(names("lc-b", Some("shop")), Vec::<String>::new());
        // Asked again (the partition of each cluster is kept), the same answers.
        assert_eq!(names("lc-a", None), ["lc-a|strict-a"]);
        assert_eq!(names("lc-b", None), Vec::<String>::new());
        // The list changes: each cluster's partition follows it.
        view.registry
            .delete::<ResourceProtection>(&holdfast_shared::registry::PolicyKey::new(
                "lc-c", "strict-c",
            ));
        assert_eq!(names("lc-c", Some("shop")), Vec::<String>::new());
        assert_eq!(names("lc-a", Some("shop")), ["lc-a|strict-a"]);
        let lose = |lc: &str| update_in(lc, json!({"tier": "data"}), json!({"tier": "web"}));
        assert!(view.strict_for(&lose("lc-a")));
        assert_eq!(
            view.strict_selection_lost(&lose("lc-a")).as_deref(),
            Some("ResourceProtection/strict-a")
        );
        // The same labels in a workspace without a strict policy: nothing applies.
        assert!(!view.strict_for(&lose("lc-b")));
        assert_eq!(view.strict_selection_lost(&lose("lc-b")), None);
    }

    #[tokio::test]
    async fn on_kcp_a_namespace_without_an_api_client_is_never_empty() {
        let view = test_view(Topology::Kcp, DependentsMode::Live);
        assert!(view.stores_built());
        let contents = view.namespace_contents("lc-a", "shop").await;
        assert_eq!(
            contents.err().map(|e| e.to_string()).as_deref(),
            Some("no API server client is configured")
        );
    }

    #[test]
    fn a_forbidden_read_on_kcp_names_the_consumer_grant() {
        let e = || {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("refused", "").with_code(403),
            ))
        };
        let pvcs = GroupResource::new("", "persistentvolumeclaims");
        let kcp = test_view(Topology::Kcp, DependentsMode::Live);
        assert_eq!(
            kcp.read_error("lc-a", &pvcs, e()).to_string(),
            "holdfast-webhook may not read persistentvolumeclaims in workspace lc-a: grant it \
             get and list on persistentvolumeclaims there (docs/kcp.md, Consumer guide)"
        );
        let kubernetes = test_view(Topology::Kubernetes, DependentsMode::Live);
        assert_eq!(
            kubernetes.read_error("", &pvcs, e()).to_string(),
            crate::stores::unreadable_error("persistentvolumeclaims").to_string()
        );
    }

    #[tokio::test]
    async fn failed_discovery_keeps_what_was_known() {
        let client = fake_client();
        let mut previous = HashMap::new();
        previous.insert(
            "broken.io".to_string(),
            vec![GroupResource::new("broken.io", "gizmos")],
        );
        for (group, resource) in [
            ("gone.io", "things"),
            ("local.io", "stuffs"),
            ("agg.io", "secrets"),
        ] {
            previous.insert(group.to_string(), vec![GroupResource::new(group, resource)]);
        }
        let (found, problems) = discovery::namespaced_resources(&client, &previous).await;
        // A group no longer served (no APIService, or a local one) is dropped,
        // and is no problem.
        assert_eq!(found.get("gone.io"), None);
        assert_eq!(found.get("local.io"), None);
        // An extension server answering 404 is not believed, and the broken group
        // keeps its old resources: what each served is kept, the failures reported.
        for (group, resource) in [
            ("agg.io", "secrets"),
            ("", "configmaps"),
            ("good.io", "widgets"),
            ("broken.io", "gizmos"),
        ] {
            assert_eq!(
                found.get(group),
                Some(&vec![GroupResource::new(group, resource)]),
                "{group}"
            );
        }
        let mut problems = problems;
        problems.sort();
        assert_eq!(
            problems,
            [
                "discovery of agg.io/v1 failed: the aggregated API of service ext/agg-server answers 404",
                "discovery of broken.io/v1 failed: boom (500)",
            ],
        );
        // Nothing known before: nothing kept, still reported.
        let (found, problems) = discovery::namespaced_resources(&client, &HashMap::new()).await;
        assert_eq!(found.get("broken.io"), Some(&Vec::new()));
        assert_eq!(problems.len(), 2);
    }
}
