//! The kcp topology.
//!
//! The controller's kubeconfig points at the holdfast workspace. The virtual
//! workspace URL comes from the APIExportEndpointSlice of the holdfast APIExport;
//! through it (`/clusters/*`) the controller watches DependencyRules in every
//! binding workspace and the configurations it installed. Each rule's
//! `apiExportRef.path` (any depth, e.g. `root:org:team:network`) is resolved to
//! a logical cluster by walking Workspaces segment by segment from `root`, with
//! a moka cache invalidated whenever a Workspace changes. For every provider
//! workspace it installs one configuration `holdfast` through the virtual
//! workspace (authorised by the permission claim), with one rules entry per
//! protected resource, recomputed from scratch from all rules on every change:
//! deleting a rule removes only its part, deleting the last one removes the
//! configuration.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use holdfast_shared::{
    api::{DependencyRule, GroupResource},
    names::{FIELD_MANAGER, WEBHOOK_CONFIGURATION_NAME},
    webhookconfig::{
        InstallOptions, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POLICIES_WEBHOOK, matches_desired,
        provider_configuration, routes,
    },
};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::{WatchStreamExt as _, watcher},
};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::{Notify, watch};

use holdfast_shared::{
    kcp::workspace_resource,
    watch::{Index, NotFound, Status as WatchStatus, WatchState},
};

use crate::{
    cycles::{RuleEdges, find_cycles},
    policies::{Invalid, check_dependency_rule, reasons},
    status::{Outcome, desired_status, now_rfc3339},
};

/// Objects of one kind across logical clusters, keyed by (cluster, name): an
/// [`Index`] fed by the shared watch driver.
pub struct ClusterStore<K> {
    objects: BTreeMap<(String, String), Arc<K>>,
    /// Whether the index is synced (a complete list, no failure since; see
    /// [`holdfast_shared::watch`]).
    pub ready: bool,
}

impl<K> Default for ClusterStore<K> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            ready: false,
        }
    }
}

pub use holdfast_shared::kcp::{cluster_of, front_proxy_of};

impl<K: Resource> ClusterStore<K> {
    fn key(obj: &K) -> (String, String) {
        (cluster_of(obj), obj.meta().name.clone().unwrap_or_default())
    }

    /// A snapshot.
    pub fn snapshot(&self) -> Vec<((String, String), Arc<K>)> {
        self.objects
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

impl<K: Resource> Index<K> for ClusterStore<K> {
    fn reset(&mut self, objects: Vec<K>) {
        self.objects = objects
            .into_iter()
            .map(|o| (Self::key(&o), Arc::new(o)))
            .collect();
    }

    fn apply(&mut self, object: K) {
        self.objects.insert(Self::key(&object), Arc::new(object));
    }

    fn delete(&mut self, object: K) {
        self.objects.remove(&Self::key(&object));
    }

    fn status(&mut self, _from: &WatchStatus, to: &WatchStatus) {
        self.ready = to.synced;
        if let WatchState::Failed(e) | WatchState::Forbidden(e) = &to.state {
            tracing::warn!(error = %e, "kcp watch failed; listing again");
        }
    }
}

type Shared<K> = Arc<Mutex<ClusterStore<K>>>;

/// A [`ClusterStore`] behind a lock, waking `notify` after every change.
struct SharedFeed<K> {
    store: Shared<K>,
    notify: Arc<Notify>,
}

impl<K: Resource> SharedFeed<K> {
    fn with(&self, f: impl FnOnce(&mut ClusterStore<K>)) {
        if let Ok(mut st) = self.store.lock() {
            f(&mut st);
        }
        self.notify.notify_one();
    }
}

impl<K: Resource> Index<K> for SharedFeed<K> {
    fn reset(&mut self, objects: Vec<K>) {
        self.with(|s| s.reset(objects));
    }
    fn apply(&mut self, object: K) {
        self.with(|s| s.apply(object));
    }
    fn delete(&mut self, object: K) {
        self.with(|s| s.delete(object));
    }
    fn status(&mut self, from: &WatchStatus, to: &WatchStatus) {
        self.with(|s| s.status(from, to));
    }
}

fn spawn_store<K>(api: Api<K>, cfg: watcher::Config, notify: Arc<Notify>) -> Shared<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let store: Shared<K> = Arc::new(Mutex::new(ClusterStore::default()));
    let feed = SharedFeed {
        store: store.clone(),
        notify,
    };
    // Through a virtual workspace a 404 proves nothing: fail closed.
    tokio::spawn(holdfast_shared::watch::run(
        api,
        cfg,
        NotFound::Unknown,
        feed,
    ));
    store
}

/// Builds clients for URLs derived from the kubeconfig (same credentials), one
/// connection pool per server (see [`holdfast_shared::kcp::Clients`]).
#[derive(Clone)]
pub struct Clients {
    inner: holdfast_shared::kcp::Clients,
}

impl Clients {
    /// Clients sharing `base`'s credentials and TLS settings.
    pub fn new(base: kube::Config) -> Self {
        Self {
            inner: holdfast_shared::kcp::Clients::new(base, holdfast_shared::kcp::MAX_CLIENTS),
        }
    }

    /// A client whose base URL is `url`.
    pub fn at(&self, url: &str) -> anyhow::Result<Client> {
        Ok(self.inner.at(url)?)
    }

    /// The front-proxy base URL: the kubeconfig's server without `/clusters/...`.
    pub fn front_proxy(&self) -> String {
        self.inner.front_proxy().to_string()
    }
}

/// Resolves workspace paths of any depth to logical cluster names (see
/// [`holdfast_shared::kcp::Resolver`]).
#[derive(Clone)]
pub struct Resolver(holdfast_shared::kcp::Resolver);

impl Resolver {
    /// A resolver walking Workspaces through the front-proxy.
    pub fn new(clients: Clients) -> Self {
        Self(holdfast_shared::kcp::Resolver::new(clients.inner))
    }

    /// Forgets everything (a Workspace changed).
    pub fn invalidate(&self) {
        self.0.invalidate();
    }

    /// The logical cluster of `path` (`root:org:network`), walking one segment at a time.
    pub async fn resolve(&self, path: &str) -> Result<String, String> {
        self.0.resolve(path).await.map_err(|e| e.to_string())
    }
}

/// Requests in flight at once when many workspaces or rules need writes.
const CONCURRENCY: usize = 32;

/// Settings of the kcp reconciler.
#[derive(Clone)]
pub struct Settings {
    /// Name of the holdfast APIExport.
    pub api_export: String,
    /// Full resync period.
    pub resync: Duration,
}

/// Finds the virtual workspace URL in the APIExportEndpointSlice `name` of the
/// holdfast workspace; waits until it has an endpoint (`None`: shut down first).
pub async fn virtual_workspace_url(
    home: &Client,
    name: &str,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Option<String>> {
    Ok(holdfast_shared::kcp::virtual_workspace_url(home, name, shutdown).await)
}

/// The kcp reconciler.
pub struct Reconciler {
    clients: Clients,
    vw_url: String,
    settings: Settings,
    options: watch::Receiver<InstallOptions>,
    /// DependencyRules, untyped: one the types cannot read is reported Invalid
    /// instead of breaking the watch.
    rules: Shared<DynamicObject>,
    hooks: Shared<ValidatingWebhookConfiguration>,
    resolver: Resolver,
    notify: Arc<Notify>,
    workspace_changed: Arc<AtomicBool>,
    /// Decoding results per rule, reused while its resourceVersion is unchanged.
    parsed: Mutex<HashMap<(String, String), Arc<Parsed>>>,
    /// Per provider cluster: the live resourceVersion last seen matching, and the
    /// desired configuration it matched (skips re-serializing unchanged pairs).
    matched: Mutex<HashMap<String, (String, ValidatingWebhookConfiguration)>>,
    /// Set once the first reconcile succeeded.
    pub ready: Arc<AtomicBool>,
}

/// One rule object, decoded. A cache of decoding work only: every pass still
/// recomputes the whole desired state from all rules.
struct Parsed {
    rv: String,
    rule: Result<Arc<DependencyRule>, String>,
    status: holdfast_shared::api::PolicyStatus,
    workspaces: serde_json::Value,
}

impl Parsed {
    fn of(obj: &DynamicObject) -> Self {
        Self {
            rv: obj.metadata.resource_version.clone().unwrap_or_default(),
            rule: crate::kubernetes::decode::<DependencyRule>(obj).map(Arc::new),
            status: crate::kubernetes::current_status(obj),
            workspaces: match &obj.data["status"]["workspaces"] {
                serde_json::Value::Null => json!([]),
                v => v.clone(),
            },
        }
    }
}

struct RuleEval {
    cluster: String,
    name: String,
    invalid: Option<Invalid>,
    /// (path, export name, logical cluster if resolved, message)
    workspaces: Vec<(String, String, Option<String>, Option<String>)>,
    /// provider cluster → resources
    targets: BTreeMap<String, BTreeSet<GroupResource>>,
}

impl Reconciler {
    /// Starts the watches through the virtual workspace at `vw_url`.
    pub fn new(
        clients: Clients,
        vw_url: String,
        settings: Settings,
        options: watch::Receiver<InstallOptions>,
        ready: Arc<AtomicBool>,
    ) -> anyhow::Result<Self> {
        let notify = Arc::new(Notify::new());
        let all = clients.at(&format!("{vw_url}/clusters/*"))?;
        let rules = spawn_store(
            Api::<DynamicObject>::all_with(all.clone(), &ApiResource::erase::<DependencyRule>(&())),
            watcher::Config::default(),
            notify.clone(),
        );
        let hooks = spawn_store(
            Api::<ValidatingWebhookConfiguration>::all(all),
            watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
            notify.clone(),
        );
        let resolver = Resolver::new(clients.clone());
        let workspace_changed = Arc::new(AtomicBool::new(false));
        // Workspaces anywhere: a change invalidates the path cache.
        let ws_client = clients.at(&format!("{}/clusters/*", clients.front_proxy()))?;
        let (r, n, flag) = (resolver.clone(), notify.clone(), workspace_changed.clone());
        tokio::spawn(async move {
            let api: Api<DynamicObject> = Api::all_with(ws_client, &workspace_resource());
            let stream = watcher(api, watcher::Config::default()).default_backoff();
            futures::pin_mut!(stream);
            let mut failures = 0u32;
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(
                        watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone,
                    ) => {
                        r.invalidate();
                        flag.store(true, Ordering::SeqCst);
                        n.notify_one();
                    }
                    Ok(_) => {}
                    Err(e) => {
                        failures += 1;
                        if failures == 1 {
                            tracing::warn!(error = %e, "cannot watch Workspaces across clusters; unresolved paths are retried periodically instead");
                        }
                    }
                }
            }
        });
        Ok(Self {
            clients,
            vw_url,
            settings,
            options,
            rules,
            hooks,
            resolver,
            notify,
            workspace_changed,
            parsed: Mutex::new(HashMap::new()),
            matched: Mutex::new(HashMap::new()),
            ready,
        })
    }

    fn vw_client(&self, cluster: &str) -> anyhow::Result<Client> {
        self.clients
            .at(&format!("{}/clusters/{cluster}", self.vw_url))
    }

    /// Runs until `shutdown`; with `cleanup`, deletes every installed configuration on the way out.
    pub async fn run(
        self,
        mut shutdown: watch::Receiver<bool>,
        cleanup: bool,
    ) -> anyhow::Result<()> {
        // Wait for both initial lists.
        loop {
            let ready = self.rules.lock().map(|s| s.ready).unwrap_or(false)
                && self.hooks.lock().map(|s| s.ready).unwrap_or(false);
            if ready {
                break;
            }
            tokio::select! {
                () = self.notify.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = shutdown.changed() => return Ok(()),
            }
        }
        tracing::info!(vw = %self.vw_url, "kcp caches synced; reconciling");
        let mut options = self.options.clone();
        let mut retry = false;
        let mut unresolved = false;
        loop {
            if !retry {
                let wait = if unresolved {
                    Duration::from_secs(2)
                } else {
                    self.settings.resync
                };
                tokio::select! {
                    () = self.notify.notified() => {}
                    _ = options.changed() => {}
                    () = tokio::time::sleep(wait) => { self.resolver.invalidate(); }
                    _ = shutdown.changed() => break,
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if *shutdown.borrow() {
                break;
            }
            self.workspace_changed.store(false, Ordering::SeqCst);
            let pass = std::time::Instant::now();
            let result = self.reconcile_once().await;
            tracing::debug!(
                elapsed_ms = pass.elapsed().as_millis() as u64,
                "kcp reconcile pass"
            );
            match result {
                Ok(u) => {
                    unresolved = u;
                    retry = false;
                    self.ready.store(true, Ordering::SeqCst);
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "kcp reconcile failed; retrying");
                    retry = true;
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = shutdown.changed() => break,
                    }
                }
            }
        }
        if cleanup {
            let live: Vec<String> = self
                .hooks
                .lock()
                .map(|s| s.snapshot().into_iter().map(|((c, _), _)| c).collect())
                .unwrap_or_default();
            for cluster in live {
                match self.delete_in(&cluster).await {
                    Ok(()) => tracing::info!(
                        cluster,
                        "cleanup on shutdown: deleted ValidatingWebhookConfiguration holdfast"
                    ),
                    Err(e) => {
                        tracing::error!(cluster, error = %format!("{e:#}"), "cleanup on shutdown failed")
                    }
                }
            }
        }
        Ok(())
    }

    async fn evaluate(
        &self,
        cluster: &str,
        name: &str,
        parsed: &Parsed,
    ) -> (RuleEval, Option<Arc<DependencyRule>>) {
        let mut eval = RuleEval {
            cluster: cluster.to_string(),
            name: name.to_string(),
            invalid: None,
            workspaces: Vec::new(),
            targets: BTreeMap::new(),
        };
        let rule = match &parsed.rule {
            Ok(r) => r.clone(),
            Err(message) => {
                eval.invalid = Some(Invalid {
                    reason: reasons::INVALID_SPEC,
                    message: message.clone(),
                });
                return (eval, None);
            }
        };
        eval.invalid = check_dependency_rule(&rule, &Default::default(), false);
        if eval.invalid.is_some() {
            return (eval, Some(rule));
        }
        let mut problems = Vec::new();
        for (i, d) in rule.spec.dependencies.iter().enumerate() {
            let Some(r) = &d.api_export_ref else {
                problems.push(format!(
                    "spec.dependencies[{i}].apiExportRef is required on kcp"
                ));
                continue;
            };
            match self.resolver.resolve(&r.path).await {
                Ok(lc) => {
                    eval.targets
                        .entry(lc.clone())
                        .or_default()
                        .insert(GroupResource::new(&d.group, &d.resource));
                    if !eval
                        .workspaces
                        .iter()
                        .any(|w| w.0 == r.path && w.1 == r.name)
                    {
                        eval.workspaces
                            .push((r.path.clone(), r.name.clone(), Some(lc), None));
                    }
                }
                Err(msg) => {
                    problems.push(format!("spec.dependencies[{i}].apiExportRef.path: {msg}"));
                    if !eval
                        .workspaces
                        .iter()
                        .any(|w| w.0 == r.path && w.1 == r.name)
                    {
                        eval.workspaces
                            .push((r.path.clone(), r.name.clone(), None, Some(msg)));
                    }
                }
            }
        }
        if !problems.is_empty() {
            let missing_ref = problems.iter().all(|p| p.contains("is required on kcp"));
            eval.invalid = Some(Invalid {
                reason: if missing_ref {
                    reasons::INVALID_SPEC
                } else {
                    reasons::UNRESOLVED_WORKSPACE
                },
                message: problems.join("; "),
            });
            eval.targets.clear();
        }
        (eval, Some(rule))
    }

    /// One pass; returns whether some path is unresolved (to retry soon).
    async fn reconcile_once(&self) -> anyhow::Result<bool> {
        let rules = self.rules.lock().map(|s| s.snapshot()).unwrap_or_default();
        let parsed: Vec<Arc<Parsed>> = {
            let mut cache = self
                .parsed
                .lock()
                .map_err(|_| anyhow::anyhow!("parse cache poisoned"))?;
            let keep: std::collections::HashSet<&(String, String)> =
                rules.iter().map(|(k, _)| k).collect();
            cache.retain(|k, _| keep.contains(k));
            rules
                .iter()
                .map(|(key, obj)| {
                    let rv = obj.metadata.resource_version.as_deref().unwrap_or_default();
                    match cache.get(key) {
                        Some(p) if p.rv == rv => p.clone(),
                        _ => {
                            let p = Arc::new(Parsed::of(obj));
                            cache.insert(key.clone(), p.clone());
                            p
                        }
                    }
                })
                .collect()
        };
        let mut evals = Vec::with_capacity(rules.len());
        for (((cluster, name), obj), p) in rules.iter().zip(&parsed) {
            let (eval, rule) = self.evaluate(cluster, name, p).await;
            evals.push((eval, obj.clone(), rule, p.clone()));
        }
        let unresolved = evals.iter().any(|(e, _, _, _)| {
            e.invalid
                .as_ref()
                .is_some_and(|i| i.reason == reasons::UNRESOLVED_WORKSPACE)
        });

        // Desired state per provider cluster, from scratch.
        let mut desired: BTreeMap<String, (BTreeSet<GroupResource>, BTreeSet<String>)> =
            BTreeMap::new();
        for (e, _, _, _) in &evals {
            for (lc, grs) in &e.targets {
                let entry = desired.entry(lc.clone()).or_default();
                entry.0.extend(grs.iter().cloned());
                entry.1.insert(format!("{}/{}", e.cluster, e.name));
            }
        }
        let opts = self.options.borrow().clone();
        let live: BTreeMap<String, Arc<ValidatingWebhookConfiguration>> = self
            .hooks
            .lock()
            .map(|s| {
                s.snapshot()
                    .into_iter()
                    .filter(|((_, n), _)| n == WEBHOOK_CONFIGURATION_NAME)
                    .map(|((c, _), v)| (c, v))
                    .collect()
            })
            .unwrap_or_default();
        let mut installed: BTreeMap<String, ValidatingWebhookConfiguration> = BTreeMap::new();
        let mut errors = Vec::new();
        let mut to_apply = Vec::new();
        for (lc, (grs, rule_names)) in &desired {
            let want = provider_configuration(grs, rule_names, &opts);
            let live_rv = live
                .get(lc)
                .and_then(|l| l.metadata.resource_version.clone())
                .unwrap_or_default();
            let known_match = self.matched.lock().ok().is_some_and(|m| {
                m.get(lc)
                    .is_some_and(|(rv, d)| *rv == live_rv && *d == want)
            });
            match live.get(lc) {
                Some(l) if known_match || matches_desired(l, &want) => {
                    if !known_match && let Ok(mut m) = self.matched.lock() {
                        m.insert(lc.clone(), (live_rv, want.clone()));
                    }
                    installed.insert(lc.clone(), (**l).clone());
                }
                other => {
                    tracing::info!(
                        cluster = %lc,
                        resources = grs.len(),
                        rules = rule_names.len(),
                        "{} ValidatingWebhookConfiguration holdfast",
                        if other.is_some() { "updating" } else { "creating" }
                    );
                    to_apply.push((lc.clone(), want));
                }
            }
        }
        if let Ok(mut m) = self.matched.lock() {
            m.retain(|lc, _| desired.contains_key(lc));
        }
        let applied: Vec<(String, anyhow::Result<ValidatingWebhookConfiguration>)> =
            futures::stream::iter(to_apply)
                .map(|(lc, want)| async move {
                    let r = self.apply_in(&lc, &want).await;
                    (lc, r)
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        for (lc, r) in applied {
            match r {
                Ok(cfg) => {
                    installed.insert(lc, cfg);
                }
                Err(e) => errors.push(format!("{lc}: {e:#}")),
            }
        }
        let stale: Vec<String> = live
            .keys()
            .filter(|lc| !desired.contains_key(*lc))
            .cloned()
            .collect();
        let deleted: Vec<(String, anyhow::Result<()>)> = futures::stream::iter(stale)
            .map(|lc| async move {
                tracing::info!(cluster = %lc, "no rule targets this workspace any more: deleting ValidatingWebhookConfiguration holdfast");
                let r = self.delete_in(&lc).await;
                (lc, r)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (lc, r) in deleted {
            if let Err(e) = r {
                errors.push(format!("{lc}: {e:#}"));
            }
        }

        // Cycles over resource types, across all workspaces.
        let edges: Vec<RuleEdges> = evals
            .iter()
            .filter(|(e, _, _, _)| e.invalid.is_none())
            .filter_map(|(e, _, r, _)| {
                r.as_ref()
                    .map(|r| RuleEdges::of(format!("{}/{}", e.cluster, e.name), r))
            })
            .collect();
        let cycles = find_cycles(&edges);

        let now = now_rfc3339();
        let mut writes = Vec::new();
        for (e, obj, _, p) in &evals {
            let mut ok = true;
            let mut missing = Vec::new();
            for (lc, grs) in &e.targets {
                for gr in grs {
                    let routed = installed
                        .get(lc)
                        .is_some_and(|c| routes(c, POLICIES_WEBHOOK, "DELETE", gr));
                    if !routed {
                        ok = false;
                        missing.push(format!("{gr} in {lc}"));
                    }
                }
            }
            let key = format!("{}/{}", e.cluster, e.name);
            let outcome = Outcome {
                invalid: e.invalid.clone(),
                installed: ok && e.invalid.is_none(),
                installed_message: if ok {
                    format!(
                        "DELETEs of the dependencies reach webhook {POLICIES_WEBHOOK} in {} provider workspace(s)",
                        e.targets.len()
                    )
                } else {
                    format!("not yet installed: {}", missing.join(", "))
                },
                cycle: cycles.get(&key).map(|c| c.message()),
                cycle_applies: true,
                source: None,
                not_admitted: None,
            };
            let workspaces: Vec<serde_json::Value> = e
                .workspaces
                .iter()
                .map(|(path, name, lc, msg)| {
                    let mut w = json!({
                        "path": path,
                        "name": name,
                        "webhookInstalled": lc.as_ref().is_some_and(|lc| installed.contains_key(lc)),
                    });
                    if let Some(lc) = lc {
                        w["logicalCluster"] = json!(lc);
                    }
                    if let Some(m) = msg {
                        w["message"] = json!(m);
                    }
                    w
                })
                .collect();
            if let Some(c) = &outcome.cycle
                && !holdfast_shared::api::is_condition_true(
                    &p.status.conditions,
                    holdfast_shared::api::condition_types::CYCLE_DETECTED,
                )
            {
                tracing::warn!(rule = %key, "{c}");
            }
            writes.push((
                key,
                e.cluster.clone(),
                obj.clone(),
                p.clone(),
                outcome,
                workspaces,
            ));
        }
        let now = &now;
        let results: Vec<Option<String>> = futures::stream::iter(writes)
            .map(|(key, cluster, obj, p, outcome, workspaces)| async move {
                self.write_status(&cluster, &obj, &p, &outcome, workspaces, now)
                    .await
                    .err()
                    .map(|err| format!("status of {key}: {err:#}"))
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        errors.extend(results.into_iter().flatten());
        if !errors.is_empty() {
            anyhow::bail!("{}", errors.join("; "));
        }
        Ok(unresolved)
    }

    async fn write_status(
        &self,
        cluster: &str,
        obj: &DynamicObject,
        parsed: &Parsed,
        outcome: &Outcome,
        workspaces: Vec<serde_json::Value>,
        now: &str,
    ) -> anyhow::Result<()> {
        let current = &parsed.status;
        let ws_same = parsed.workspaces == json!(workspaces);
        let generation = obj.metadata.generation;
        let status = desired_status(
            generation,
            current.observed_generation,
            &current.conditions,
            outcome,
            now,
        );
        let mut status = match (status, ws_same) {
            (None, true) => return Ok(()),
            (Some(s), _) => s,
            (None, false) => {
                let mut s = json!({"conditions": serde_json::to_value(&current.conditions)?});
                if let Some(g) = generation {
                    s["observedGeneration"] = json!(g);
                }
                s
            }
        };
        status["workspaces"] = json!(workspaces);
        let api: Api<DynamicObject> = Api::all_with(
            self.vw_client(cluster)?,
            &ApiResource::erase::<DependencyRule>(&()),
        );
        match api
            .patch_status(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn apply_in(
        &self,
        cluster: &str,
        desired: &ValidatingWebhookConfiguration,
    ) -> anyhow::Result<ValidatingWebhookConfiguration> {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.vw_client(cluster)?);
        let mut body = serde_json::to_value(desired)?;
        body["apiVersion"] = "admissionregistration.k8s.io/v1".into();
        body["kind"] = "ValidatingWebhookConfiguration".into();
        let applied = api
            .patch(
                WEBHOOK_CONFIGURATION_NAME,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await?;
        if matches_desired(&applied, desired) {
            return Ok(applied);
        }
        let mut replacement = desired.clone();
        replacement.metadata.resource_version = applied.metadata.resource_version.clone();
        Ok(api
            .replace(
                WEBHOOK_CONFIGURATION_NAME,
                &Default::default(),
                &replacement,
            )
            .await?)
    }

    async fn delete_in(&self, cluster: &str) -> anyhow::Result<()> {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.vw_client(cluster)?);
        match api
            .delete(WEBHOOK_CONFIGURATION_NAME, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_store_keys_by_cluster_and_name() {
        let mk = |c: &str, n: &str| {
            let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
            cm.metadata.name = Some(n.into());
            cm.metadata.annotations = Some(
                [(
                    holdfast_shared::names::KCP_CLUSTER_ANNOTATION.to_string(),
                    c.to_string(),
                )]
                .into(),
            );
            cm
        };
        let mut s = ClusterStore::default();
        let mut d = holdfast_shared::watch::Driver::new(NotFound::Unknown);
        d.handle(&mut s, Ok(watcher::Event::Init));
        d.handle(&mut s, Ok(watcher::Event::InitApply(mk("a", "x"))));
        d.handle(&mut s, Ok(watcher::Event::InitApply(mk("b", "x"))));
        assert!(!s.ready);
        d.handle(&mut s, Ok(watcher::Event::InitDone));
        assert!(s.ready);
        assert_eq!(s.snapshot().len(), 2, "same name in two clusters");
        d.handle(&mut s, Ok(watcher::Event::Delete(mk("a", "x"))));
        let keys: Vec<_> = s.snapshot().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![("b".to_string(), "x".to_string())]);
    }
}
