//! The webhook's view of cluster state, as the policies see it: the rule registry
//! (fed by watches of the policy objects), the dependents index (fed by watches of
//! dependent resources), and live lookups through the API server.
//!
//! Label and strict-mode decisions need none of it. Until every registry source has
//! loaded, `policies_loaded` is false: `/readyz` answers 503 and DELETEs a policy
//! object could govern are denied with "retry later". In `--label-only` mode there
//! are no sources and the view is loaded from the start.

use crate::{
    metrics::Metrics,
    stores::{Depth, Resolver, ResourceStore, run_store},
};
use dashmap::DashMap;
use futures::StreamExt;
use holdfast_shared::{
    api::{
        anchor_rule::AnchorRule, common::GroupResource, critical_service::CriticalService,
        dependency_rule::DependencyRule, resource_protection::ResourceProtection,
    },
    index::{DependentsIndex, ObjectId, Referrer},
    policy::{ClusterView, ContainedObject, DependentsQuery, LookupError, logical_cluster},
    registry::{
        CompiledAnchor, CompiledCriterion, CompiledCritical, CompiledDependency,
        CompiledProtection, PolicyKey, PolicyObject, ProtectionPartition, Registry, namespaces_gr,
    },
    review::{AdmissionRequest, Gvr},
    topology::Topology,
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams},
    runtime::{WatchStreamExt, watcher},
};
use std::{
    collections::{HashMap, HashSet},
    future::Future,
    path::Path,
    sync::Arc,
    time::Duration,
};
use tokio::sync::{Notify, watch};

/// Logical clusters with a cached API client at most (kcp).
const MAX_CLUSTER_CLIENTS: u64 = 1024;

/// A kcp logical cluster name or workspace path: lowercase letters, digits, `-` and
/// `:` separators, at most 253 characters.
fn is_logical_cluster_name(lc: &str) -> bool {
    !lc.is_empty()
        && lc.len() <= 253
        && lc
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b':')
}

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
    /// ResourceProtections split by namespace, per resource (rebuilt when the
    /// registry's list for the resource changes).
    partitions: DashMap<GroupResource, Arc<ProtectionPartition>>,
    /// Per-URL clients (kcp), one connection pool per server, bounded: a review names
    /// its logical cluster, so the set of names is the caller's choice.
    cluster_clients: Option<holdfast_shared::clients::UrlClients>,
    registry: Arc<Registry>,
    index: DependentsIndex,
    synced: DashMap<String, bool>,
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
    /// Passes of the store manager completed (every wanted store started).
    store_passes: std::sync::atomic::AtomicU64,
}

/// What Cascading protection needs to know of one CustomResourceDefinition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrdFacts {
    /// Its scale subresource's `specReplicasPath` (storage version), if it has one.
    pub replicas_path: Option<String>,
    /// Whether the CRD itself carries a `Cascading` protection label.
    pub cascading: bool,
    /// Whether it is established (its instances can exist).
    pub established: bool,
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
    /// Protection label keys that list the value `Cascading`.
    pub cascading_keys: Vec<String>,
}

async fn load_config(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    })
}

impl WebhookView {
    /// Builds the view. An API server that cannot be configured is logged, not fatal:
    /// label decisions do not need it (policy objects then never load).
    pub async fn new(opts: ViewOptions<'_>, metrics: Metrics) -> Arc<Self> {
        let (client, base_config) = Self::clients(&opts).await;
        Self::build(opts, client, base_config, metrics)
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
        if opts.label_only {
            // Label protection needs no API server, but with one the webhook can
            // also judge evictions (it reads the pod) and CRD deletions.
            match load_config(opts.kubeconfig).await {
                Ok(cfg) => match Client::try_from(cfg.clone()) {
                    Ok(c) => (Some(c), Some(cfg)),
                    Err(_) => (None, None),
                },
                Err(_) => (None, None),
            }
        } else {
            match load_config(opts.kubeconfig).await {
                Ok(cfg) => match Client::try_from(cfg.clone()) {
                    Ok(c) => (Some(c), Some(cfg)),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot build an API client; policy objects cannot be loaded");
                        (None, None)
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "no API server configuration; policy objects cannot be loaded");
                    (None, None)
                }
            }
        }
    }

    fn build(
        opts: ViewOptions<'_>,
        client: Option<Client>,
        base_config: Option<kube::Config>,
        metrics: Metrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            topology: opts.topology,
            label_only: opts.label_only,
            mode: opts.mode,
            client,
            partitions: DashMap::new(),
            cluster_clients: base_config
                .as_ref()
                .map(|c| holdfast_shared::clients::UrlClients::new(c.clone(), MAX_CLUSTER_CLIENTS)),
            registry: Arc::new(Registry::default()),
            index: DependentsIndex::default(),
            synced: DashMap::new(),
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
            store_passes: std::sync::atomic::AtomicU64::new(0),
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
            Some(p) => Err(LookupError(format!(
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
    /// on kcp, where the stores depend on a wildcard client that may never exist (the
    /// kcp rework decides how containment reads workspaces there).
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

    /// The ResourceProtections naming `gr` that could select an object in
    /// `namespace`, from the partition of the registry's list.
    fn exact_protection_candidates(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
    ) -> Vec<Arc<CompiledProtection>> {
        let Some(list) = self.registry.protections.find(gr) else {
            return Vec::new();
        };
        if let Some(p) = self.partitions.get(gr)
            && p.is_of(&list)
        {
            return p.candidates(namespace);
        }
        // The list changed (or was never split): split it once for every later check.
        let p = Arc::new(ProtectionPartition::new(gr, list));
        let out = p.candidates(namespace);
        self.partitions.insert(gr.clone(), p);
        out
    }

    /// The stores of anchors in other clusters.
    pub fn remote_stores(&self) -> &crate::remote::RemoteStores {
        &self.remotes
    }

    fn synced_store(&self, gr: &GroupResource, depth: Depth) -> Option<Arc<ResourceStore>> {
        let key = StoreKey {
            gr: gr.clone(),
            depth,
            label: None,
        };
        self.stores
            .get(&key)
            .map(|s| s.value().clone())
            .filter(|s| s.synced())
    }

    /// The store `key` for Cascading protection, once synced; asking for it starts
    /// it (and keeps it) when it is not running yet.
    fn cascade_store(&self, key: StoreKey) -> Result<Arc<ResourceStore>, LookupError> {
        if self.cascade_demand.insert(key.clone(), ()).is_none() {
            self.cascade_wanted.notify_one();
        }
        match self.stores.get(&key) {
            Some(s) if s.synced() => Ok(s.value().clone()),
            _ if self.refused.contains_key(&key.gr) => Err(LookupError(format!(
                "holdfast may not list and watch {} yet (its reads role does not grant it)",
                key.gr
            ))),
            _ => Err(LookupError(format!(
                "the index of {} is not synced yet (it starts when first needed)",
                key.gr
            ))),
        }
    }

    /// Whether `labels` carry a `Cascading` protection label.
    fn cascading_labelled(
        &self,
        labels: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> bool {
        labels.is_some_and(|l| {
            self.cascading_keys.iter().any(|k| {
                l.get(k).and_then(serde_json::Value::as_str)
                    == Some(holdfast_shared::names::CASCADING_VALUE)
            })
        })
    }

    /// Whether some ResourceProtection in mode Cascading selects objects of `gr`.
    fn cascading_policy_for(&self, gr: &GroupResource) -> bool {
        self.registry
            .protections
            .find(gr)
            .is_some_and(|l| l.iter().any(|p| p.cascading))
    }

    /// The stores Cascading protection will need, known before anyone asks: Pods
    /// and PVCs once a Namespace carries a Cascading label (or a Cascading
    /// ResourceProtection selects namespaces), and the instances of each CRD that
    /// carries one (of every CRD, when a Cascading ResourceProtection selects CRDs).
    fn cascade_foreseen(&self) -> Vec<StoreKey> {
        let mut out = Vec::new();
        let ns_key = StoreKey {
            gr: namespaces_gr(),
            depth: Depth::Metadata,
            label: None,
        };
        let labelled_ns = !self.cascading_keys.is_empty()
            && self.stores.get(&ns_key).is_some_and(|s| {
                s.any(|o| self.cascading_labelled(holdfast_shared::review::labels(o)))
            });
        if labelled_ns || self.cascading_policy_for(&namespaces_gr()) {
            out.extend(namespace_content_keys());
        }
        let all_crds = self.cascading_policy_for(&crds_gr());
        for entry in self.crds.iter() {
            if entry.value().established && (all_crds || entry.value().cascading) {
                out.push(StoreKey {
                    gr: entry.key().clone(),
                    depth: Depth::Metadata,
                    label: None,
                });
            }
        }
        out
    }

    /// Starts the watches; they stop when `shutdown` fires.
    pub fn start(self: &Arc<Self>, shutdown: watch::Receiver<bool>) {
        if self.label_only {
            return;
        }
        let Some(client) = self.client.clone() else {
            return;
        };
        let crd_client = client.clone();
        let this = self.clone();
        let policy_shutdown = shutdown.clone();
        self.spawn(shutdown.clone(), async move {
            let pc = match this.topology {
                Topology::Kubernetes => client.clone(),
                Topology::Kcp => this.virtual_workspace_client(&client).await,
            };
            this.start_policy_watches(pc, policy_shutdown);
        });
        self.spawn(
            shutdown.clone(),
            manage_stores(self.clone(), shutdown.clone()),
        );
        if self.topology == Topology::Kubernetes {
            self.spawn(
                shutdown.clone(),
                crate::remote::manage(self.clone(), crd_client.clone()),
            );
            self.spawn(
                shutdown.clone(),
                watch_crds(self.clone(), crd_client.clone()),
            );
            self.spawn(
                shutdown.clone(),
                watch_api_services(self.clone(), crd_client),
            );
        }
        if self.mode == DependentsMode::Watch {
            self.spawn(
                shutdown.clone(),
                manage_dependents(self.clone(), shutdown.clone()),
            );
        }
        let this = self.clone();
        self.spawn(shutdown, async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                this.update_gauges();
            }
        });
    }

    fn start_policy_watches(self: &Arc<Self>, pc: Client, shutdown: watch::Receiver<bool>) {
        self.spawn(
            shutdown.clone(),
            watch_policies::<DependencyRule>(self.clone(), pc.clone()),
        );
        self.spawn(
            shutdown.clone(),
            watch_policies::<ResourceProtection>(self.clone(), pc.clone()),
        );
        self.spawn(
            shutdown.clone(),
            watch_policies::<CriticalService>(self.clone(), pc.clone()),
        );
        self.spawn(shutdown, watch_policies::<AnchorRule>(self.clone(), pc));
    }

    /// kcp: a client for `/clusters/*` of the holdfast APIExport's virtual workspace,
    /// whose URL comes from the APIExportEndpointSlice of the same name in the
    /// workspace the kubeconfig points at. Retries until the slice has an endpoint.
    async fn virtual_workspace_client(&self, client: &Client) -> Client {
        let mut delay = Duration::from_millis(200);
        loop {
            match self.export_client(client, &self.apiexport).await {
                Ok((c, url)) => {
                    tracing::info!(%url, apiexport = %self.apiexport, "reading policy objects through the APIExport virtual workspace");
                    return c;
                }
                Err(why) => tracing::warn!(apiexport = %self.apiexport, "{why}; retrying"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }

    /// A client for `/clusters/*` of the virtual workspace of APIExport `export`, whose
    /// URL is in the APIExportEndpointSlice of the same name in `client`'s workspace;
    /// with that URL.
    async fn export_client(
        &self,
        client: &Client,
        export: &str,
    ) -> Result<(Client, String), String> {
        let slice_ar = ApiResource {
            group: "apis.kcp.io".into(),
            version: "v1alpha1".into(),
            api_version: "apis.kcp.io/v1alpha1".into(),
            kind: "APIExportEndpointSlice".into(),
            plural: "apiexportendpointslices".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &slice_ar);
        let slice = tokio::time::timeout(Duration::from_secs(5), api.get_opt(export))
            .await
            .map_err(|_| "the APIExportEndpointSlice was not read in time".to_string())?
            .map_err(|e| format!("cannot read the APIExportEndpointSlice: {e}"))?
            .ok_or_else(|| "APIExportEndpointSlice not found".to_string())?;
        let url = slice.data["status"]["endpoints"][0]["url"]
            .as_str()
            .ok_or_else(|| "APIExportEndpointSlice has no endpoint yet".to_string())?
            .to_string();
        let clients = self
            .cluster_clients
            .as_ref()
            .ok_or_else(|| "no API server configuration".to_string())?;
        let c = clients
            .at(&format!("{}/clusters/*", url.trim_end_matches('/')))
            .map_err(|e| format!("cannot build the client: {e}"))?;
        Ok((c, url))
    }

    fn spawn(
        &self,
        mut shutdown: watch::Receiver<bool>,
        fut: impl Future<Output = ()> + Send + 'static,
    ) {
        tokio::spawn(async move {
            tokio::select! {
                _ = fut => {}
                _ = shutdown.changed() => {}
            }
        });
    }

    fn update_gauges(&self) {
        let m = &self.metrics;
        m.registry_size
            .with_label_values(&["DependencyRule"])
            .set(self.registry.dependencies.len() as i64);
        m.registry_size
            .with_label_values(&["ResourceProtection"])
            .set(self.registry.protections.len() as i64);
        m.registry_size
            .with_label_values(&["CriticalService"])
            .set(self.registry.critical.len() as i64);
        m.registry_size
            .with_label_values(&["AnchorRule"])
            .set(self.registry.anchors.len() as i64);
        m.index_references.set(self.index.len() as i64);
        for e in self.synced.iter() {
            m.index_synced
                .with_label_values(&[e.key().as_str()])
                .set(i64::from(*e.value()));
        }
    }

    /// On kcp: a client for `/clusters/*` of the dependent type's own APIExport
    /// virtual workspace (every workspace binding that export), when the export has an
    /// APIExportEndpointSlice of its name in the rule's workspace that holdfast may
    /// read; `None` otherwise (the caller falls back to the front-proxy wildcard).
    async fn dependent_export_client(&self, dep: &CompiledDependency) -> Option<Client> {
        let export = dep.dependent_export.as_deref()?;
        if dep.rule.cluster.is_empty() {
            return None;
        }
        let client = self.cluster_client(&dep.rule.cluster).ok()?;
        let (client, url) = self.export_client(&client, export).await.ok()?;
        tracing::info!(resource = %dep.dependent_gr(), apiexport = export, %url, "watching dependents through the virtual workspace of their APIExport");
        Some(client)
    }

    /// On kcp: a client for `/clusters/*` of the configured server (front-proxy).
    fn wildcard_client(&self) -> Option<Client> {
        self.cluster_client("*").ok()
    }

    fn front_proxy_base(&self) -> Option<String> {
        let cfg = self.cluster_clients.as_ref()?.config();
        let url = cfg.cluster_url.to_string();
        let base = match url.find("/clusters/") {
            Some(i) => url[..i].to_string(),
            None => url.trim_end_matches('/').to_string(),
        };
        Some(base)
    }

    /// A client addressing logical cluster `lc` through the front-proxy (kcp), or the
    /// cluster itself (Kubernetes).
    fn cluster_client(&self, lc: &str) -> Result<Client, LookupError> {
        let no_client = || LookupError("no API server client is configured".to_string());
        if self.topology == Topology::Kubernetes || lc.is_empty() {
            return self.client.clone().ok_or_else(no_client);
        }
        if !is_logical_cluster_name(lc) {
            return Err(LookupError(format!("{lc:?} is not a logical cluster name")));
        }
        let clients = self.cluster_clients.as_ref().ok_or_else(no_client)?;
        let base = self.front_proxy_base().ok_or_else(no_client)?;
        let client = clients
            .at(&format!("{base}/clusters/{lc}"))
            .map_err(|e| LookupError(e.to_string()))?;
        self.metrics
            .cluster_clients
            .set(i64::try_from(clients.cached()).unwrap_or(i64::MAX));
        Ok(client)
    }

    async fn live_dependents(&self, q: DependentsQuery<'_>) -> Result<Vec<Referrer>, LookupError> {
        self.metrics
            .dependents_lookups
            .with_label_values(&["live"])
            .inc();
        let client = self.cluster_client(q.cluster)?;
        let dep = q.dep;
        let ar = dependent_resource(dep);
        let namespaced_list = q.namespace.filter(|_| dep.namespace_path.is_none());
        let lookup = async {
            let mut out = Vec::new();
            let api: Api<DynamicObject> = match namespaced_list {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                None => Api::all_with(client.clone(), &ar),
            };
            let mut params = ListParams::default().limit(500);
            loop {
                let list = match api.list(&params).await {
                    Ok(l) => l,
                    Err(e) if crate::stores::is_not_found(&e) => return Ok(out),
                    Err(e) => {
                        return Err(crate::stores::lookup_error(
                            &dep.dependent_gr().to_string(),
                            &e,
                        ));
                    }
                };
                for obj in &list.items {
                    let value = match serde_json::to_value(obj) {
                        Ok(v) => v,
                        Err(e) => return Err(LookupError(e.to_string())),
                    };
                    if !dep.path.references(&value, q.name) {
                        continue;
                    }
                    let own_ns = obj.metadata.namespace.clone().unwrap_or_default();
                    let ref_ns = dep
                        .namespace_path
                        .as_ref()
                        .and_then(|p| p.first(&value))
                        .and_then(|v| v.as_str())
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .unwrap_or_else(|| own_ns.clone());
                    if q.namespace.is_some_and(|ns| ns != ref_ns) {
                        continue;
                    }
                    out.push(Referrer {
                        kind: dep.dependent_kind.as_str().into(),
                        namespace: own_ns.into(),
                        name: obj.metadata.name.clone().unwrap_or_default().into(),
                        ref_namespace: ref_ns.into(),
                        terminating: obj.metadata.deletion_timestamp.is_some(),
                    });
                }
                match list.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
            out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            Ok(out)
        };
        match tokio::time::timeout(Duration::from_secs(8), lookup).await {
            Ok(r) => r,
            Err(_) => Err(LookupError(
                "the API server did not answer in time".to_string(),
            )),
        }
    }
}

fn dependent_resource(dep: &CompiledDependency) -> ApiResource {
    ApiResource {
        group: dep.dependent_group.clone(),
        version: dep.dependent_version.clone(),
        api_version: if dep.dependent_group.is_empty() {
            dep.dependent_version.clone()
        } else {
            format!("{}/{}", dep.dependent_group, dep.dependent_version)
        },
        kind: dep.dependent_kind.clone(),
        plural: dep.dependent_resource.clone(),
    }
}

impl ClusterView for WebhookView {
    fn policies_loaded(&self) -> bool {
        self.label_only || self.registry.loaded()
    }

    fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
        // Before loading, any policy could govern anything.
        !self.label_only
    }

    fn strict_for(&self, req: &AdmissionRequest) -> bool {
        let gr = GroupResource::new(&req.resource.group, &req.resource.resource);
        let Some(old) = req.old_object.as_ref() else {
            return false;
        };
        let name = req.object_name().unwrap_or_default();
        let labels = holdfast_shared::review::labels(old);
        let namespace = req.object_namespace();
        self.protection_candidates(&gr, namespace)
            .iter()
            .any(|p| p.strict && p.selecting(&gr, namespace, name, labels).next().is_some())
    }

    fn protections(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledProtection>]>> {
        self.registry.protections_for(gr)
    }

    fn protection_candidates(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
    ) -> Vec<Arc<CompiledProtection>> {
        let mut out = self.exact_protection_candidates(gr, namespace);
        // Wildcard selectors (`resource: "*"`): few policies, visited directly.
        for p in self.registry.wildcard_protections(gr) {
            if !out.iter().any(|q| q.key == p.key)
                && p.selectors
                    .iter()
                    .any(|s| s.selects_resource(gr) && s.namespace_matches(namespace))
            {
                out.push(p);
            }
        }
        out
    }

    fn dependencies(&self, gr: &GroupResource) -> Option<Arc<[Arc<Vec<CompiledDependency>>]>> {
        self.registry.dependencies.find(gr)
    }

    async fn dependents(&self, q: DependentsQuery<'_>) -> Result<Vec<Referrer>, LookupError> {
        let key = q.dep.dependent_gr().to_string();
        let synced =
            self.mode == DependentsMode::Watch && self.synced.get(&key).is_some_and(|s| *s);
        let result = if synced {
            self.metrics
                .dependents_lookups
                .with_label_values(&["index"])
                .inc();
            Ok(self
                .index
                .lookup(q.cluster, &q.dep.target.to_string(), q.name, q.namespace))
        } else {
            self.live_dependents(q).await
        };
        if result.is_err() {
            self.metrics
                .dependents_lookups
                .with_label_values(&["failed"])
                .inc();
        }
        result
    }

    async fn can_bypass(&self, req: &AdmissionRequest) -> Result<bool, LookupError> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
        };
        let cluster = req
            .old_object
            .as_ref()
            .map(logical_cluster)
            .unwrap_or_default();
        let client = self.cluster_client(cluster)?;
        let u = &req.user_info;
        let extra = u.extra.as_ref().and_then(|e| {
            serde_json::from_value::<std::collections::BTreeMap<String, Vec<String>>>(e.clone())
                .ok()
        });
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(u.username.clone()),
                groups: Some(u.groups.clone()),
                uid: u.uid.clone(),
                extra,
                resource_attributes: Some(ResourceAttributes {
                    group: Some(holdfast_shared::names::API_GROUP.to_string()),
                    resource: Some("protections".to_string()),
                    verb: Some("bypass".to_string()),
                    namespace: req.object_namespace().map(str::to_string),
                    name: req.object_name().map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(client);
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            api.create(&kube::api::PostParams::default(), &sar),
        )
        .await
        .map_err(|_| LookupError("the SubjectAccessReview was not answered in time".to_string()))?
        .map_err(|e| LookupError(format!("SubjectAccessReview failed: {e}")))?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    async fn can_delete_as(&self, req: &AdmissionRequest, user: &str) -> Result<bool, LookupError> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
        };
        let cluster = req.object.as_ref().map(logical_cluster).unwrap_or_default();
        let client = self.cluster_client(cluster)?;
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.to_string()),
                groups: Some(holdfast_shared::deferred::impersonated_groups(user)),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(req.resource.group.clone()),
                    resource: Some(req.resource.resource.clone()),
                    verb: Some("delete".to_string()),
                    namespace: req.object_namespace().map(str::to_string),
                    name: req.object_name().map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(client);
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            api.create(&kube::api::PostParams::default(), &sar),
        )
        .await
        .map_err(|_| LookupError("the SubjectAccessReview was not answered in time".to_string()))?
        .map_err(|e| LookupError(format!("SubjectAccessReview failed: {e}")))?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    fn strict_selection_lost(&self, req: &AdmissionRequest) -> Option<String> {
        let gr = GroupResource::new(&req.resource.group, &req.resource.resource);
        let list = self.registry.protections_for(&gr)?;
        let old = req.old_object.as_ref()?;
        let new = req.object.as_ref()?;
        let name = req.object_name().unwrap_or_default();
        let ns = req.object_namespace();
        let (old_l, new_l) = (
            holdfast_shared::review::labels(old),
            holdfast_shared::review::labels(new),
        );
        list.iter()
            .find(|p| {
                p.strict
                    && p.selecting(&gr, ns, name, old_l).next().is_some()
                    && p.selecting(&gr, ns, name, new_l).next().is_none()
            })
            .map(|p| format!("ResourceProtection/{}", p.key.name))
    }

    fn critical(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledCritical>]>> {
        self.registry.critical.find(gr)
    }

    fn anchors(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledAnchor>]>> {
        self.registry.anchors.find(gr)
    }

    async fn count_finalizer(
        &self,
        cluster: &str,
        gr: &GroupResource,
        finalizer: &str,
    ) -> Result<usize, LookupError> {
        if let Some(store) = self.synced_store(gr, Depth::Metadata) {
            return Ok(store.count_finalizer(cluster, finalizer));
        }
        self.metrics
            .dependents_lookups
            .with_label_values(&["live"])
            .inc();
        let client = self.cluster_client(cluster)?;
        let (ar, _) = match self.resolver.resolve(&client, cluster, gr).await {
            Ok(r) => r,
            Err(crate::stores::ResolveError::NotServed(_)) => return Ok(0),
            Err(e) => return Err(LookupError(e.to_string())),
        };
        let api: Api<kube::core::PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
        let list = tokio::time::timeout(
            Duration::from_secs(8),
            api.list_metadata(&ListParams::default()),
        )
        .await
        .map_err(|_| LookupError("the API server did not answer in time".to_string()))?
        .map_err(|e| crate::stores::lookup_error(&gr.to_string(), &e))?;
        Ok(list
            .items
            .iter()
            .filter(|o| {
                o.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == finalizer)
            })
            .count())
    }

    async fn object(
        &self,
        cluster: &str,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<serde_json::Value>>, LookupError> {
        let key = (
            cluster.to_string(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        let anchor = self.registry.anchors.any(|a| a.anchor == *gr);
        let depth = if anchor { Depth::Full } else { Depth::Metadata };
        if let Some(store) = self.synced_store(gr, depth) {
            return Ok(store.get(&key));
        }
        // Not synced (yet): one GET.
        let client = self.cluster_client(cluster)?;
        let (ar, namespaced) = match self.resolver.resolve(&client, cluster, gr).await {
            Ok(r) => r,
            Err(crate::stores::ResolveError::NotServed(_)) => return Ok(None),
            Err(e) => return Err(LookupError(e.to_string())),
        };
        let api: Api<DynamicObject> = match (namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(client, ns, &ar),
            (true, None) => return Ok(None),
            (false, _) => Api::all_with(client, &ar),
        };
        let got = tokio::time::timeout(Duration::from_secs(8), api.get_opt(name))
            .await
            .map_err(|_| LookupError("the API server did not answer in time".to_string()))?
            .map_err(|e| crate::stores::lookup_error(&gr.to_string(), &e))?;
        Ok(got.and_then(|o| serde_json::to_value(o).ok()).map(Arc::new))
    }

    async fn remote_object(
        &self,
        source: &holdfast_shared::registry::AnchorSourceRef,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<serde_json::Value>>, LookupError> {
        use crate::remote::{SourceState, state_error};
        if self.topology != Topology::Kubernetes {
            return Err(state_error(
                source,
                &SourceState::Unusable(
                    "anchor sources are read on the Kubernetes topology only".to_string(),
                ),
            ));
        }
        match self.remotes.get(source, gr) {
            Some(store) => store.get(source, namespace, name),
            None => Err(state_error(source, &SourceState::Connecting)),
        }
    }

    async fn namespace_contents(
        &self,
        cluster: &str,
        ns: &str,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        if !self.stores_built() {
            return Err(LookupError(
                "holdfast has just started and is still building the indexes of what namespaces hold"
                    .to_string(),
            ));
        }
        self.discovery_complete()?;
        // A type a policy names must be readable: its objects in the namespace
        // may be what the policy protects. (Label containment of a type the
        // webhook may not read is left out below: Secrets, unless named.)
        if !self.refused.is_empty() {
            let named = wanted_stores(self, &[]);
            if let Some(gr) = named
                .iter()
                .map(|k| &k.gr)
                .find(|gr| self.refused.contains_key(*gr))
            {
                return Err(crate::stores::unreadable_error(&gr.to_string()));
            }
        }
        for gr in self.crd_resources.iter() {
            for label in &self.label_keys {
                let key = StoreKey {
                    gr: gr.key().clone(),
                    depth: Depth::Metadata,
                    label: Some(label.clone()),
                };
                if !self.stores.get(&key).is_some_and(|s| s.synced()) {
                    return Err(LookupError(format!(
                        "the objects of {} (a new custom resource) are not indexed yet",
                        gr.key()
                    )));
                }
            }
        }
        let mut out: Vec<ContainedObject> = Vec::new();
        let mut seen: HashSet<(String, String)> = HashSet::new();
        for entry in self.stores.iter() {
            let (key, store) = (entry.key(), entry.value());
            if !store.namespaced || key.depth != Depth::Metadata {
                continue;
            }
            // A type the webhook may not list is left out of label containment
            // (reported once when refused; Secrets unless a policy names them).
            // Types a policy needs have a store without a label: never skipped.
            if key.label.is_some() && store.forbidden() && !self.crd_resources.contains_key(&key.gr)
            {
                continue;
            }
            if !store.synced() {
                return Err(LookupError(format!(
                    "the index of {} is not synced yet",
                    key.gr
                )));
            }
            for obj in store.in_namespace(cluster, ns) {
                let name = obj["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if !seen.insert((key.gr.to_string(), name)) {
                    continue;
                }
                out.push(ContainedObject {
                    resource: Gvr {
                        group: store.resource.group.clone(),
                        version: store.resource.version.clone(),
                        resource: store.resource.plural.clone(),
                    },
                    kind: store.resource.kind.clone(),
                    object: obj,
                });
            }
        }
        Ok(out)
    }

    async fn custom_resources(
        &self,
        cluster: &str,
        crd: &serde_json::Value,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        if self.label_only && self.client.is_none() {
            // No API server configured: as with namespace containment, label-only
            // mode without one sees no contents.
            return Ok(Vec::new());
        }
        self.discovery_complete()?;
        let Some(ar) = crd_resource(crd) else {
            return Err(LookupError(
                "the CustomResourceDefinition names no group, plural or version".to_string(),
            ));
        };
        let client = self.cluster_client(cluster)?;
        let api: Api<kube::core::PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
        let list_all = async {
            let mut out = Vec::new();
            let mut params = ListParams::default().limit(500);
            loop {
                let list = match api.list_metadata(&params).await {
                    Ok(l) => l,
                    // Not served (not established yet, or already going): no instances.
                    Err(e) if crate::stores::is_not_found(&e) => return Ok(out),
                    Err(e) => {
                        return Err(crate::stores::lookup_error(
                            &GroupResource::new(&ar.group, &ar.plural).to_string(),
                            &e,
                        ));
                    }
                };
                for item in &list.items {
                    let meta = serde_json::to_value(&item.metadata)
                        .map_err(|e| LookupError(e.to_string()))?;
                    out.push(ContainedObject {
                        resource: Gvr {
                            group: ar.group.clone(),
                            version: ar.version.clone(),
                            resource: ar.plural.clone(),
                        },
                        kind: ar.kind.clone(),
                        object: Arc::new(serde_json::json!({ "metadata": meta })),
                    });
                }
                match list.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => return Ok(out),
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(8), list_all)
            .await
            .map_err(|_| LookupError("the API server did not answer in time".to_string()))?
    }

    fn cascading_judged(&self) -> bool {
        !self.label_only && self.client.is_some()
    }

    async fn live_in_namespace(&self, cluster: &str, ns: &str) -> Result<Vec<String>, LookupError> {
        let [pods_key, pvcs_key] = namespace_content_keys();
        // Ask for both before failing, so both start at once.
        let pods = self.cascade_store(pods_key);
        let pvcs = self.cascade_store(pvcs_key);
        let (pods, pvcs) = (pods?, pvcs?);
        let mut live_pods: Vec<String> = pods
            .in_namespace(cluster, ns)
            .iter()
            .filter(|p| holdfast_shared::cascading::pod_is_live(p))
            .map(|p| holdfast_shared::cascading::describe_object("Pod", p))
            .collect();
        live_pods.sort();
        let mut claims: Vec<String> = pvcs
            .in_namespace(cluster, ns)
            .iter()
            .map(|c| holdfast_shared::cascading::describe_object("PersistentVolumeClaim", c))
            .collect();
        claims.sort();
        live_pods.extend(claims);
        Ok(live_pods)
    }

    async fn live_instances(
        &self,
        cluster: &str,
        crd: &serde_json::Value,
    ) -> Result<Vec<String>, LookupError> {
        let established = crd["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        });
        if !established {
            // Never served: no instance can exist.
            return Ok(Vec::new());
        }
        let Some(ar) = crd_resource(crd) else {
            return Err(LookupError(
                "the CustomResourceDefinition names no group, plural or version".to_string(),
            ));
        };
        let store = self.cascade_store(StoreKey {
            gr: GroupResource::new(&ar.group, &ar.plural),
            depth: Depth::Metadata,
            label: None,
        })?;
        let mut out: Vec<String> = store
            .in_cluster(cluster)
            .iter()
            .filter(|o| !holdfast_shared::cascading::is_terminating(o))
            .map(|o| holdfast_shared::cascading::describe_object(&ar.kind, o))
            .collect();
        out.sort();
        Ok(out)
    }

    async fn replicas_path(
        &self,
        cluster: &str,
        group: &str,
        resource: &str,
    ) -> Result<Option<String>, LookupError> {
        let gr = GroupResource::new(group, resource);
        if self.topology == Topology::Kubernetes {
            if !self.crds_listed.load(std::sync::atomic::Ordering::Acquire) {
                return Err(LookupError(
                    "the CustomResourceDefinitions are not indexed yet".to_string(),
                ));
            }
            return Ok(self.crds.get(&gr).and_then(|f| f.replicas_path.clone()));
        }
        // kcp: no CRD watch; one GET of the CRD (only for a Cascading custom
        // resource's deletion).
        let name = format!("{resource}.{group}");
        let client = self.cluster_client(cluster)?;
        let api: Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = Api::all(client);
        let crd = tokio::time::timeout(Duration::from_secs(8), api.get_opt(&name))
            .await
            .map_err(|_| LookupError("the API server did not answer in time".to_string()))?
            .map_err(|e| LookupError(e.to_string()))?;
        Ok(crd.and_then(|c| crd_facts(&c).1.replicas_path))
    }
}

/// The stores a Namespace's live contents come from: Pods (metadata and phase) and
/// PersistentVolumeClaims (metadata).
fn namespace_content_keys() -> [StoreKey; 2] {
    [
        StoreKey {
            gr: GroupResource::new("", "pods"),
            depth: Depth::Phase,
            label: None,
        },
        StoreKey {
            gr: GroupResource::new("", "persistentvolumeclaims"),
            depth: Depth::Metadata,
            label: None,
        },
    ]
}

fn crds_gr() -> GroupResource {
    GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions")
}

/// The resource a CRD serves and what Cascading protection needs of it (its
/// `cascading` flag is left false: it depends on the protection labels).
fn crd_facts(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> (GroupResource, CrdFacts) {
    let gr = GroupResource::new(&crd.spec.group, &crd.spec.names.plural);
    let versions = &crd.spec.versions;
    let version = versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| versions.iter().find(|v| v.served));
    let replicas_path = version
        .and_then(|v| v.subresources.as_ref())
        .and_then(|s| s.scale.as_ref())
        .map(|s| s.spec_replicas_path.clone());
    let established = crd.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Established" && c.status == "True")
    }) && crd.metadata.deletion_timestamp.is_none();
    (
        gr,
        CrdFacts {
            replicas_path,
            cascading: false,
            established,
        },
    )
}

/// The resource a CustomResourceDefinition serves: its group, plural, kind and the
/// storage version (else the first served one).
fn crd_resource(crd: &serde_json::Value) -> Option<ApiResource> {
    let spec = crd.get("spec")?;
    let group = spec["group"].as_str().filter(|g| !g.is_empty())?;
    let plural = spec["names"]["plural"].as_str().filter(|p| !p.is_empty())?;
    let kind = spec["names"]["kind"].as_str().unwrap_or_default();
    let versions = spec["versions"].as_array()?;
    let version = versions
        .iter()
        .find(|v| v["storage"] == true)
        .or_else(|| versions.iter().find(|v| v["served"] == true))
        .and_then(|v| v["name"].as_str())?;
    Some(ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: format!("{group}/{version}"),
        kind: kind.to_string(),
        plural: plural.to_string(),
    })
}

/// Watches CustomResourceDefinitions: a new or changed CRD triggers discovery at
/// once (no waiting for the periodic one), and until its label stores have synced
/// namespace deletions are refused (its instances would be deleted unseen).
async fn watch_crds(view: Arc<WebhookView>, client: Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut initial: Vec<GroupResource> = Vec::new();
    let namespaced_established = |crd: &CustomResourceDefinition| -> Option<GroupResource> {
        let established = crd.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        (established && crd.spec.scope == "Namespaced" && crd.metadata.deletion_timestamp.is_none())
            .then(|| GroupResource::new(&crd.spec.group, &crd.spec.names.plural))
    };
    let mut initial_facts: Vec<(GroupResource, CrdFacts)> = Vec::new();
    let facts = |crd: &CustomResourceDefinition| {
        let (gr, mut f) = crd_facts(crd);
        f.cascading = view.cascading_labelled(
            crd.metadata
                .labels
                .as_ref()
                .map(|l| {
                    l.iter()
                        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                        .collect::<serde_json::Map<_, _>>()
                })
                .as_ref(),
        );
        (gr, f)
    };
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => {
                initial.clear();
                initial_facts.clear();
            }
            Ok(watcher::Event::InitApply(crd)) => {
                initial.extend(namespaced_established(&crd));
                initial_facts.push(facts(&crd));
            }
            Ok(watcher::Event::InitDone) => {
                view.crd_resources.clear();
                for gr in initial.drain(..) {
                    view.crd_resources.insert(gr, ());
                }
                view.crds.clear();
                for (gr, f) in initial_facts.drain(..) {
                    view.crds.insert(gr, f);
                }
                view.crds_listed
                    .store(true, std::sync::atomic::Ordering::Release);
                view.rediscover.notify_one();
            }
            Ok(watcher::Event::Apply(crd)) => {
                let (fgr, f) = facts(&crd);
                view.crds.insert(fgr, f);
                let gr = GroupResource::new(&crd.spec.group, &crd.spec.names.plural);
                match namespaced_established(&crd) {
                    Some(gr) => {
                        view.crd_resources.insert(gr, ());
                    }
                    None => {
                        view.crd_resources.remove(&gr);
                    }
                }
                view.rediscover.notify_one();
            }
            Ok(watcher::Event::Delete(crd)) => {
                let gr = GroupResource::new(&crd.spec.group, &crd.spec.names.plural);
                view.crd_resources.remove(&gr);
                view.crds.remove(&gr);
                view.cascade_demand.remove(&StoreKey {
                    gr: gr.clone(),
                    depth: Depth::Metadata,
                    label: None,
                });
                view.rediscover.notify_one();
            }
            Err(e) => tracing::warn!(error = %e, "CustomResourceDefinition watch error; retrying"),
        }
    }
}

/// Watches APIServices: an aggregated API added, changed or removed triggers
/// discovery at once.
async fn watch_api_services(view: Arc<WebhookView>, client: Client) {
    let ar = ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    };
    let api: Api<kube::core::PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                view.rediscover.notify_one();
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "APIService watch error; retrying"),
        }
    }
}

/// What a policy kind must be for `watch_policies`.
trait WatchedPolicy:
    PolicyObject<DynamicType = (), Scope = kube::core::ClusterResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> WatchedPolicy for K where
    K: PolicyObject<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

fn cluster_of<K: kube::Resource>(obj: &K) -> String {
    obj.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(holdfast_shared::names::KCP_CLUSTER_ANNOTATION))
        .cloned()
        .unwrap_or_default()
}

async fn watch_policies<K: WatchedPolicy>(view: Arc<WebhookView>, client: Client) {
    let api: Api<K> = Api::all(client);
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut buffer: Vec<(String, K)> = Vec::new();
    let mut reported_missing = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => buffer.clear(),
            Ok(watcher::Event::InitApply(obj)) => buffer.push((cluster_of(&obj), obj)),
            Ok(watcher::Event::InitDone) => {
                view.registry.reset(&buffer);
                tracing::info!(
                    kind = %K::kind(&()),
                    count = buffer.len(),
                    "policy objects loaded"
                );
                buffer.clear();
                view.changed.notify_one();
            }
            Ok(watcher::Event::Apply(obj)) => {
                let cluster = cluster_of(&obj);
                if let Err(e) = view.registry.apply(&cluster, &obj) {
                    tracing::warn!(kind = %K::kind(&()), name = ?obj.meta().name, error = %e, "invalid policy object ignored");
                }
                view.changed.notify_one();
            }
            Ok(watcher::Event::Delete(obj)) => {
                let key = PolicyKey::new(
                    &cluster_of(&obj),
                    obj.meta().name.as_deref().unwrap_or_default(),
                );
                view.registry.delete::<K>(&key);
                view.changed.notify_one();
            }
            Err(e) if crate::stores::watcher_not_found(&e) => {
                // The CRD is not installed: no such policies can exist.
                view.registry.reset::<K>(&[]);
                if !reported_missing {
                    tracing::warn!(
                        kind = %K::kind(&()),
                        "resource not served (CRD not installed?); treating as none"
                    );
                    reported_missing = true;
                }
            }
            Err(e) => {
                tracing::warn!(kind = %K::kind(&()), error = %e, "policy watch error; retrying")
            }
        }
    }
}

/// Keeps one watch per dependent resource that some DependencyRule names, restarting
/// it when the rules for that resource change.
async fn manage_dependents(view: Arc<WebhookView>, shutdown: watch::Receiver<bool>) {
    let mut running: HashMap<String, (String, tokio::task::JoinHandle<()>)> = HashMap::new();
    loop {
        // What is needed: dependent resource → its dependencies (and a signature).
        let mut wanted: HashMap<String, Vec<CompiledDependency>> = HashMap::new();
        for rule in view.registry.dependencies.entries() {
            for dep in rule.iter() {
                wanted
                    .entry(dep.dependent_gr().to_string())
                    .or_default()
                    .push(dep.clone());
            }
        }
        let signature = |deps: &[CompiledDependency]| {
            let mut parts: Vec<String> = deps
                .iter()
                .map(|d| {
                    format!(
                        "{}|{}|{}|{}|{}",
                        d.dependent_version,
                        d.dependent_kind,
                        d.target,
                        d.path,
                        d.namespace_path
                            .as_ref()
                            .map(|p| p.to_string())
                            .unwrap_or_default()
                    )
                })
                .collect();
            parts.sort();
            parts.dedup();
            parts.join(";")
        };
        // Stop what is no longer wanted or changed.
        let keys: Vec<String> = running.keys().cloned().collect();
        for key in keys {
            let keep = wanted.get(&key).is_some_and(|deps| {
                running
                    .get(&key)
                    .is_some_and(|(sig, _)| *sig == signature(deps))
            });
            if !keep && let Some((_, handle)) = running.remove(&key) {
                handle.abort();
                view.synced.insert(key.clone(), false);
                view.index.clear_resource(&key);
                tracing::info!(resource = %key, "stopped watching dependents");
            }
        }
        for (key, deps) in wanted {
            if running.contains_key(&key) {
                continue;
            }
            let sig = signature(&deps);
            view.synced.insert(key.clone(), false);
            let handle = tokio::spawn(watch_dependents(view.clone(), key.clone(), deps));
            tracing::info!(resource = %key, "watching dependents");
            running.insert(key, (sig, handle));
        }
        let mut shutdown = shutdown.clone();
        tokio::select! {
            _ = view.changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = shutdown.changed() => break,
        }
    }
    for (_, (_, handle)) in running {
        handle.abort();
    }
}

async fn watch_dependents(view: Arc<WebhookView>, key: String, deps: Vec<CompiledDependency>) {
    let Some(first) = deps.first() else { return };
    let client = match view.topology {
        Topology::Kubernetes => view.client.clone(),
        Topology::Kcp => match view.dependent_export_client(first).await {
            Some(c) => Some(c),
            None => {
                tracing::info!(resource = %key, "watching dependents through the front-proxy wildcard /clusters/*");
                view.wildcard_client()
            }
        },
    };
    let Some(client) = client else { return };
    let ar = dependent_resource(first);
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let dep_refs: Vec<&CompiledDependency> = deps.iter().collect();
    let mut stream = watcher(api, watcher::Config::default())
        .backoff(crate::stores::WatchBackoff::default())
        .boxed();
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let unreadable = view.metrics.unreadable.with_label_values(&[key.as_str()]);
    let mut forbidden = false;
    let id_of = |obj: &DynamicObject, value: &serde_json::Value| ObjectId {
        cluster: logical_cluster(value).into(),
        resource: key.as_str().into(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default().into(),
        name: obj.metadata.name.clone().unwrap_or_default().into(),
    };
    let apply = |obj: &DynamicObject| -> Option<ObjectId> {
        let value = serde_json::to_value(obj).ok()?;
        let id = id_of(obj, &value);
        let refs = holdfast_shared::index::references(&value, &dep_refs);
        view.index.apply(
            &id,
            &first.dependent_kind,
            obj.metadata.deletion_timestamp.is_some(),
            &refs,
        );
        Some(id)
    };
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => seen.clear(),
            Ok(watcher::Event::InitApply(obj)) => {
                if let Some(id) = apply(&obj) {
                    seen.insert(id);
                }
            }
            Ok(watcher::Event::InitDone) => {
                view.index.retain_resource(&key, &seen);
                // Release the list-sized set, not just its contents.
                seen = HashSet::new();
                view.synced.insert(key.clone(), true);
                if forbidden {
                    forbidden = false;
                    unreadable.set(0);
                    tracing::info!(resource = %key, "{key} is readable now");
                }
                tracing::info!(resource = %key, "dependents index synced");
            }
            Ok(watcher::Event::Apply(obj)) => {
                apply(&obj);
            }
            Ok(watcher::Event::Delete(obj)) => {
                if let Ok(value) = serde_json::to_value(&obj) {
                    view.index.delete(&id_of(&obj, &value));
                }
            }
            Err(e) if crate::stores::watcher_not_found(&e) => {
                // The dependent type is not served: nothing can reference anything.
                view.index.clear_resource(&key);
                view.synced.insert(key.clone(), true);
            }
            Err(e) if crate::stores::watcher_forbidden(&e) => {
                // Live lookups are refused as well: the rule's DELETEs are refused
                // until holdfast's reads role grants the type.
                view.synced.insert(key.clone(), false);
                if !forbidden {
                    forbidden = true;
                    unreadable.set(1);
                    tracing::warn!(resource = %key, "may not list {key} (403): DELETEs the DependencyRules naming it as dependent govern are refused until holdfast's reads role grants it");
                }
            }
            Err(e) => {
                // Until the watch recovers, answers come from live lookups.
                view.synced.insert(key.clone(), false);
                tracing::warn!(resource = %key, error = %e, "dependents watch error; retrying");
            }
        }
    }
}

/// What object stores the policies need now.
fn wanted_stores(view: &WebhookView, namespaced: &[GroupResource]) -> HashSet<StoreKey> {
    let meta = |gr: GroupResource| StoreKey {
        gr,
        depth: Depth::Metadata,
        label: None,
    };
    let mut out = HashSet::new();
    out.insert(meta(namespaces_gr()));
    let reg = &view.registry;
    for gr in reg
        .protections
        .targets()
        .into_iter()
        .chain(reg.dependencies.targets())
        .chain(reg.anchors.targets())
        // A wildcard names no one resource; the types it covers come below.
        .filter(|gr| gr.resource != "*")
    {
        out.insert(meta(gr));
    }
    for cs in reg.critical.entries() {
        out.insert(meta(cs.provider.clone()));
        for c in &cs.criteria {
            match c {
                CompiledCriterion::Finalizer { resource, .. }
                | CompiledCriterion::SpecificResource { resource, .. } => {
                    out.insert(meta(resource.clone()));
                }
            }
        }
    }
    for ar in reg.anchors.entries() {
        if ar.source.is_some() {
            // Read in the source's cluster (crate::remote).
            continue;
        }
        out.insert(StoreKey {
            gr: ar.anchor.clone(),
            depth: Depth::Full,
            label: None,
        });
    }
    for d in view.cascade_demand.iter() {
        out.insert(d.key().clone());
    }
    out.extend(view.cascade_foreseen());
    for gr in namespaced {
        // Wildcard ResourceProtections: the objects of every namespaced type they
        // select (namespace containment must see them all).
        if !reg.wildcard_protections(gr).is_empty() {
            out.insert(meta(gr.clone()));
        }
        for key in &view.label_keys {
            out.insert(StoreKey {
                gr: gr.clone(),
                depth: Depth::Metadata,
                label: Some(key.clone()),
            });
        }
    }
    out
}

/// Every namespaced resource that can be listed and watched (for label stores),
/// by API group version, from discovery group by group. A group whose discovery
/// fails keeps what `previous` had for it (a broken aggregated API never shrinks
/// what is watched); the failures are returned.
async fn namespaced_resources(
    client: &Client,
    previous: &HashMap<String, Vec<GroupResource>>,
) -> (HashMap<String, Vec<GroupResource>>, Vec<String>) {
    let mut out: HashMap<String, Vec<GroupResource>> = HashMap::new();
    let mut problems = Vec::new();
    let mut group_versions: Vec<(String, String)> = vec![(String::new(), "v1".to_string())];
    match client.list_api_groups().await {
        Ok(groups) => {
            for g in groups.groups {
                let version = g
                    .preferred_version
                    .map(|v| v.version)
                    .or_else(|| g.versions.first().map(|v| v.version.clone()));
                if let Some(v) = version {
                    group_versions.push((g.name, v));
                }
            }
        }
        Err(e) => {
            problems.push(format!("listing API groups failed: {e}"));
            return (previous.clone(), problems);
        }
    }
    // Every group at once, each bounded in time: the client retries 503s with
    // backoff, and one unreachable aggregated API must not hold up the others.
    let lookups = group_versions
        .into_iter()
        .map(|(group, version)| async move {
            let gv = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            let listed = tokio::time::timeout(Duration::from_secs(5), async {
                if group.is_empty() {
                    client.list_core_api_resources(&version).await
                } else {
                    client.list_api_group_resources(&gv).await
                }
            })
            .await;
            (group, gv, listed)
        });
    for (group, gv, listed) in futures::future::join_all(lookups).await {
        let resources = match listed {
            Ok(Ok(list)) => list
                .resources
                .into_iter()
                .filter(|r| {
                    r.namespaced
                        && !r.name.contains('/')
                        && r.verbs.iter().any(|v| v == "list")
                        && r.verbs.iter().any(|v| v == "watch")
                        && r.name != "events"
                })
                .map(|r| GroupResource::new(&group, &r.name))
                .collect(),
            Ok(Err(e)) => {
                problems.push(format!("discovery of {gv} failed: {e}"));
                previous.get(&group).cloned().unwrap_or_default()
            }
            Err(_) => {
                problems.push(format!("discovery of {gv} failed: no answer within 5s"));
                previous.get(&group).cloned().unwrap_or_default()
            }
        };
        out.insert(group, resources);
    }
    (out, problems)
}

/// Whether the webhook's identity may list and watch `gr` cluster-wide now (a
/// SelfSubjectAccessReview per verb; an error counts as no).
async fn may_read(client: &Client, gr: &GroupResource) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let ask = |verb: &str| {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(gr.group.clone()),
                    resource: Some(gr.resource.clone()),
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = api.clone();
        async move {
            tokio::time::timeout(
                Duration::from_secs(5),
                api.create(&kube::api::PostParams::default(), &review),
            )
            .await
            .is_ok_and(|r| r.is_ok_and(|r| r.status.is_some_and(|s| s.allowed)))
        }
    };
    let (list, watch) = futures::join!(ask("list"), ask("watch"));
    list && watch
}

/// Keeps one watch per wanted object store.
async fn manage_stores(view: Arc<WebhookView>, shutdown: watch::Receiver<bool>) {
    let Some(client) = (match view.topology {
        Topology::Kubernetes => view.client.clone(),
        Topology::Kcp => view.wildcard_client(),
    }) else {
        return;
    };
    let mut running: HashMap<StoreKey, tokio::task::JoinHandle<()>> = HashMap::new();
    // Types the webhook was confirmed to read, and those refused (when last asked).
    let mut readable: HashSet<GroupResource> = HashSet::new();
    let mut refused: HashMap<GroupResource, std::time::Instant> = HashMap::new();
    let mut by_group: HashMap<String, Vec<GroupResource>> = HashMap::new();
    let mut namespaced: Vec<GroupResource> = Vec::new();
    let mut last_discovery: Option<std::time::Instant> = None;
    let mut rediscover = false;
    loop {
        // Discovery: every 30 s, at once when a CRD or an APIService changed, and
        // every 5 s while the last one was incomplete.
        let every = if view.discovery_problem().is_some() {
            Duration::from_secs(5)
        } else {
            Duration::from_secs(30)
        };
        if rediscover || last_discovery.is_none_or(|t| t.elapsed() > every) {
            let (found, problems) = namespaced_resources(&client, &by_group).await;
            by_group = found;
            namespaced = by_group.values().flatten().cloned().collect();
            namespaced.sort();
            namespaced.dedup();
            let problem = (!problems.is_empty()).then(|| problems.join("; "));
            if let Some(p) = &problem
                && view.discovery_problem().as_ref() != Some(p)
            {
                tracing::warn!(problem = %p, "API discovery incomplete: keeping the stores of what could not be discovered; namespace and CRD deletions are refused until it completes");
            }
            view.set_discovery_problem(problem);
            view.resolver.clear();
            last_discovery = Some(std::time::Instant::now());
        }
        let wanted = wanted_stores(&view, &namespaced);
        let stale: Vec<StoreKey> = running
            .keys()
            .filter(|k| !wanted.contains(*k))
            .cloned()
            .collect();
        for key in stale {
            if let Some(h) = running.remove(&key) {
                h.abort();
            }
            view.stores.remove(&key);
        }
        for key in wanted {
            if running.contains_key(&key) {
                continue;
            }
            // Kubernetes: ask before listing (a SelfSubjectAccessReview), so a type
            // the reads role does not grant is reported once and asked about again
            // every 5 s, not listed into a 403 on every retry.
            if view.topology == Topology::Kubernetes && !readable.contains(&key.gr) {
                if refused
                    .get(&key.gr)
                    .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
                {
                    continue;
                }
                let gauge = view
                    .metrics
                    .unreadable
                    .with_label_values(&[key.gr.to_string().as_str()]);
                if may_read(&client, &key.gr).await {
                    view.refused.remove(&key.gr);
                    if refused.remove(&key.gr).is_some() {
                        tracing::info!(resource = %key.gr, "{} is readable now", key.gr);
                    }
                    gauge.set(0);
                    readable.insert(key.gr.clone());
                } else {
                    if refused
                        .insert(key.gr.clone(), std::time::Instant::now())
                        .is_none()
                    {
                        tracing::warn!(resource = %key.gr, "may not list and watch {}: label containment does not see its objects, and DELETEs the policies naming it govern are refused, until holdfast's reads role grants it", key.gr);
                    }
                    view.refused.insert(key.gr.clone(), ());
                    gauge.set(1);
                    continue;
                }
            }
            let (ar, ns) = match view.resolver.resolve(&client, "", &key.gr).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(resource = %key.gr, error = %e, "store not started");
                    continue;
                }
            };
            let store = Arc::new(ResourceStore::new(ar, ns));
            view.stores.insert(key.clone(), store.clone());
            let gauge = view
                .metrics
                .unreadable
                .with_label_values(&[key.gr.to_string().as_str()]);
            let (gr, label) = (key.gr.clone(), key.label.clone());
            let on_forbidden = move |forbidden: bool| {
                gauge.set(i64::from(forbidden));
                match (forbidden, &label) {
                    (true, Some(l)) => {
                        tracing::warn!(resource = %gr, label = %l, "may not list {gr} (403): objects of it carrying the protection label are not seen by namespace containment until holdfast's reads role grants it")
                    }
                    (true, None) => {
                        tracing::warn!(resource = %gr, "may not list {gr} (403): DELETEs the policies naming it govern are refused until holdfast's reads role grants it")
                    }
                    (false, _) => tracing::info!(resource = %gr, "{gr} is readable now"),
                }
            };
            let handle = tokio::spawn(run_store(
                client.clone(),
                store,
                key.depth,
                key.label.clone(),
                on_forbidden,
            ));
            running.insert(key, handle);
        }
        view.store_passes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut shutdown = shutdown.clone();
        rediscover = false;
        tokio::select! {
            _ = view.changed.notified() => {}
            _ = view.cascade_wanted.notified() => {}
            _ = view.rediscover.notified() => rediscover = true,
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = shutdown.changed() => break,
        }
    }
    for (_, h) in running {
        h.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use serde_json::json;

    /// A fake API server answering discovery: `good.io` serves widgets, `broken.io`
    /// answers 503 for its group version.
    fn fake_client() -> Client {
        let svc = tower::service_fn(|req: http::Request<kube::client::Body>| async move {
            let (status, body) = match req.uri().path() {
                "/apis" => (
                    200,
                    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                        {"name": "good.io", "versions": [{"groupVersion": "good.io/v1", "version": "v1"}],
                         "preferredVersion": {"groupVersion": "good.io/v1", "version": "v1"}},
                        {"name": "broken.io", "versions": [{"groupVersion": "broken.io/v1", "version": "v1"}],
                         "preferredVersion": {"groupVersion": "broken.io/v1", "version": "v1"}}]}),
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
            let resp = http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(bytes::Bytes::from(body.to_string())))
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(resp)
        });
        Client::new(svc, "default")
    }

    fn options(label_only: bool) -> ViewOptions<'static> {
        ViewOptions {
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
            .map(|e| e.0)
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

    #[tokio::test]
    async fn failed_discovery_keeps_what_was_known() {
        let client = fake_client();
        let mut previous = HashMap::new();
        previous.insert(
            "broken.io".to_string(),
            vec![GroupResource::new("broken.io", "gizmos")],
        );
        let (found, problems) = namespaced_resources(&client, &previous).await;
        assert_eq!(
            found.get(""),
            Some(&vec![GroupResource::new("", "configmaps")])
        );
        assert_eq!(
            found.get("good.io"),
            Some(&vec![GroupResource::new("good.io", "widgets")])
        );
        // The broken group keeps its old resources, and the failure is reported.
        assert_eq!(
            found.get("broken.io"),
            Some(&vec![GroupResource::new("broken.io", "gizmos")])
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("discovery of broken.io/v1 failed: "),
            "{problems:?}"
        );
        // Nothing known before: nothing kept, still reported.
        let (found, problems) = namespaced_resources(&client, &HashMap::new()).await;
        assert_eq!(found.get("broken.io"), Some(&Vec::new()));
        assert_eq!(problems.len(), 1);
    }

    #[test]
    fn crd_resource_uses_the_storage_version() {
        let crd = json!({"spec": {"group": "example.com", "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [{"name": "v1beta1", "served": true, "storage": false},
                         {"name": "v1", "served": true, "storage": true}]}});
        let ar = crd_resource(&crd).expect("resource");
        assert_eq!(
            (
                ar.api_version.as_str(),
                ar.plural.as_str(),
                ar.kind.as_str()
            ),
            ("example.com/v1", "gadgets", "Gadget")
        );
        assert!(crd_resource(&json!({"spec": {"group": "example.com"}})).is_none());
        assert!(crd_resource(&json!(null)).is_none());
    }
}
