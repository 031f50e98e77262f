//! The webhook's view of cluster state, as the policies see it: the rule registry
//! (fed by watches of the policy objects), the dependents index (fed by watches of
//! dependent resources), and live lookups through the API server.
//!
//! Label and strict-mode decisions need none of it. Until every registry source has
//! loaded, `policies_loaded` is false: `/readyz` answers 503 and DELETEs a policy
//! object could govern are denied with "retry later". In `--label-only` mode there
//! are no sources and the view is loaded from the start.
//!
//! Every cache here is fed by the shared watch driver ([`holdfast_shared::watch`]).
//! The view is made of parts, each owning its state (private to its module), its
//! watches and tasks, and offering the others a small API:
//! - [`clients`]: how a cluster is reached (per logical cluster on kcp), and the
//!   resources resolved through discovery;
//! - [`policies`]: the policy watches feeding the registry, and the
//!   ResourceProtections split by namespace;
//! - [`store_manager`]: which object stores run, and the stores Cascading needs;
//! - [`crds`]: CustomResourceDefinitions and APIServices (what discovery must see);
//! - [`dependents`]: the dependents index (and live dependents lookups);
//! - [`kcp`]: what is known of the workspaces (the APIBindings of those binding
//!   holdfast: [`kcp_bindings`]; their types and contents: [`kcp_contents`],
//!   [`kcp_workspaces`]), and every endpoint of an APIExport's virtual workspace;
//! - [`request_key`]: the key that signs deferred-deletion requests;
//!
//! and [`discovery`], the namespaced resources the label stores cover. [`cluster`]
//! and [`access`] make it a [`ClusterView`](holdfast_shared::policy::ClusterView)
//! over all of them.

mod access;
mod clients;
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

use crate::{metrics::Metrics, remote::RemoteStores, stores::Depth};
use holdfast_shared::{api::common::GroupResource, registry::Registry, topology::Topology};
use kube::Client;
use std::{future::Future, path::Path, sync::Arc, time::Duration};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use crds::CrdFacts;

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
    /// Serve label protection only: no policy sources, no stores.
    label_only: bool,
    clients: clients::Clients,
    policies: policies::Policies,
    stores: store_manager::Stores,
    crds: crds::Crds,
    dependents: dependents::Dependents,
    kcp: kcp::Kcp,
    /// Anchors of AnchorRules whose anchors live in another cluster.
    remotes: RemoteStores,
    /// The key that signs deferred-deletion requests, as last read.
    request_key: request_key::KeyCache,
    metrics: Metrics,
    /// Wakes the store manager and the dependents manager (the policies changed, or
    /// another pass is asked for): one `Notify` each, so that one waking does not
    /// take the other's permit.
    changed: Changed,
}

/// The store manager's and the dependents manager's wake-ups.
#[derive(Default)]
pub(crate) struct Changed {
    pub(crate) stores: Notify,
    pub(crate) dependents: Notify,
}

impl Changed {
    /// Wakes both (a permit is kept for one that is busy).
    pub(crate) fn notify(&self) {
        self.stores.notify_one();
        self.dependents.notify_one();
    }
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
            clients: clients::Clients::new(
                opts.topology,
                client,
                base_config,
                vw_config,
                metrics.cluster_clients.clone(),
            ),
            policies: policies::Policies::default(),
            stores: store_manager::Stores::new(opts.label_keys, opts.cascading_keys),
            crds: crds::Crds::default(),
            dependents: dependents::Dependents::new(opts.mode),
            kcp: kcp::Kcp::new(opts.apiexport),
            remotes: RemoteStores::default(),
            request_key: request_key::KeyCache::default(),
            metrics,
            changed: Changed::default(),
        })
    }

    /// Why discovery is incomplete, if it is (for `/readyz`).
    pub fn discovery_problem(&self) -> Option<String> {
        self.stores.discovery_problem()
    }

    /// An API client for logical cluster `lc` ("" on Kubernetes), if configured.
    pub fn client_for(&self, lc: &str) -> Option<Client> {
        self.clients.cluster(lc).ok()
    }

    /// How many passes of the store manager have completed: one that starts after
    /// the policies loaded and the CRDs were listed has started every store they
    /// need (the plugin waits for it; each store then reports its own sync).
    pub fn store_passes(&self) -> u64 {
        self.stores.passes()
    }

    /// Whether the object stores namespace containment reads have been started (one
    /// store-manager pass completed). Before that the set of stores is empty, and an
    /// empty set must not read as "the namespace holds nothing". Label-only mode (and a
    /// webhook without an API client) keeps no stores, so nothing is waited for; nor
    /// on kcp, where containment reads no store: it lists the namespace's contents
    /// live in the object's workspace (`kcp_contents`).
    pub fn stores_built(&self) -> bool {
        self.label_only
            || self.clients.home().is_none()
            || self.topology != Topology::Kubernetes
            || self.store_passes() > 0
    }

    /// Asks the store manager for another pass at once.
    pub fn wake_stores(&self) {
        self.changed.stores.notify_one();
    }

    /// Whether the CRD watch has listed every CRD once (Kubernetes).
    pub fn crds_listed(&self) -> bool {
        self.crds.listed()
    }

    /// The registry (for metrics and tests).
    pub fn registry(&self) -> &Registry {
        self.policies.registry()
    }

    /// The stores of anchors in other clusters.
    pub fn remote_stores(&self) -> &RemoteStores {
        &self.remotes
    }

    /// kcp: whether workspace `cluster` binds the holdfast export, as far as the
    /// APIBindings index knows. Unknown (the index not synced, or the workspace not
    /// seen while it is not) counts as binding: protection is applied rather than
    /// skipped. Kubernetes: always.
    pub fn binds_holdfast(&self, cluster: &str) -> bool {
        if self.topology != Topology::Kcp || cluster.is_empty() {
            return true;
        }
        self.kcp.binds_holdfast(cluster)
    }

    /// A client Events of objects of `cluster` are written with: on kcp, workspace
    /// `cluster` in the holdfast export's virtual workspace at the endpoint of its
    /// shard (the export claims `events`, `create` and `patch`), if an endpoint
    /// serves it (never the front-proxy); on Kubernetes, the cluster.
    pub fn event_client(&self, cluster: &str) -> Option<Client> {
        if self.topology != Topology::Kcp || cluster.is_empty() {
            return self.client_for(cluster);
        }
        self.kcp.event_client(&self.clients, cluster)
    }

    /// Starts the watches; they stop when `shutdown` fires.
    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) {
        if self.label_only {
            return;
        }
        let Some(client) = self.clients.home().cloned() else {
            return;
        };
        // kcp: `client` is at the holdfast workspace, whose APIExportEndpointSlice
        // lists the virtual workspaces the policies are read through.
        policies::start(self, client.clone(), &shutdown);
        if self.topology == Topology::Kubernetes {
            // kcp: no object stores (they would need a wildcard through the
            // front-proxy, which kcp refuses); reads there are live.
            spawn(
                &shutdown,
                store_manager::manage_stores(self.clone(), shutdown.clone()),
            );
            spawn(
                &shutdown,
                crate::remote::manage(self.clone(), client.clone()),
            );
            spawn(&shutdown, crds::watch_crds(self.clone(), client.clone()));
            spawn(
                &shutdown,
                crds::watch_api_services(self.clone(), client.clone()),
            );
        }
        if self.topology == Topology::Kcp {
            spawn(&shutdown, kcp::watch_bindings(self.clone(), client));
        }
        if self.dependents.watched() {
            spawn(
                &shutdown,
                dependents::manage_dependents(self.clone(), shutdown.clone()),
            );
        }
        let this = self.clone();
        spawn(&shutdown, async move {
            let mut tick = tokio::time::interval(GAUGE_PERIOD);
            loop {
                tick.tick().await;
                this.policies.report(&this.metrics);
                this.dependents.report(&this.metrics);
            }
        });
    }
}

/// Runs `fut` until it ends or `shutdown` fires.
fn spawn(shutdown: &CancellationToken, fut: impl Future<Output = ()> + Send + 'static) {
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = fut => {}
            _ = shutdown.cancelled() => {}
        }
    });
}

/// The DependencyRule "vms-need-vpcs": VirtualMachines (compute.test.io) need the
/// VPC (network.test.io) named at `path`; for unit tests.
#[cfg(test)]
fn vms_need_vpcs(path: &str) -> holdfast_shared::api::dependency_rule::DependencyRule {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "DependencyRule",
        "metadata": {"name": "vms-need-vpcs"},
        "spec": {
            "dependent": {"group": "compute.test.io", "version": "v1",
                          "kind": "VirtualMachine", "resource": "virtualmachines"},
            "dependencies": [{"group": "network.test.io", "version": "v1", "resource": "vpcs",
                              "fieldRef": {"path": path}}]
        }
    }))
    .unwrap_or_else(|e| panic!("rule: {e}"))
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
fn assert_retry_later(result: Result<(), holdfast_shared::policy::LookupError>, start: &str) {
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
        self.policies
            .registry()
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

    fn remote_stores(&self) -> &RemoteStores {
        &self.remotes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_shared::policy::ClusterLookup;
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
        view.stores.count_pass();
        assert!(view.stores_built());
        let contents = view.namespace_contents("", "shop").await.map(|c| c.len());
        assert_eq!(contents.ok(), Some(0));
        // Label-only mode keeps no stores and waits for none.
        let label_only = WebhookView::build(options(true), None, None, metrics);
        assert!(label_only.stores_built());
    }

    #[tokio::test]
    async fn a_type_refused_a_moment_ago_is_not_read_as_empty() {
        let metrics = Metrics::new().expect("metrics");
        let view = WebhookView::build(options(false), Some(fake_client()), None, metrics);
        view.stores.count_pass();
        let contents = || async {
            view.namespace_contents("", "shop")
                .await
                .map(|c| c.len())
                .map_err(|e| e.to_string())
        };
        // Secrets, refused a moment ago: left out of label containment at once (the
        // shipped reads role leaves them out on purpose).
        let now = std::time::Instant::now();
        view.stores
            .refused_since(GroupResource::new("", "secrets"), now);
        assert_eq!(contents().await, Ok(0));
        // Any other type refused a moment ago: its grant may not be in effect yet,
        // so what it holds is unknown and the namespace DELETE is refused.
        let hpa = GroupResource::new("autoscaling", "horizontalpodautoscalers");
        view.stores.refused_since(hpa.clone(), now);
        assert_eq!(
            contents().await,
            Err(
                crate::stores::unreadable_error("horizontalpodautoscalers.autoscaling").to_string()
            )
        );
        // Refused for longer than the grace: left out, as Secrets are.
        let long_ago = now
            .checked_sub(store_manager::GRANT_GRACE + std::time::Duration::from_secs(1))
            .expect("an instant before the grace");
        view.stores.refused_since(hpa, long_ago);
        assert_eq!(contents().await, Ok(0));
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
