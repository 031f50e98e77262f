//! The kcp topology.
//!
//! The controller's kubeconfig points at the holdfast workspace. The virtual
//! workspace URLs (one per shard that holds a binding) come from the
//! APIExportEndpointSlice of the holdfast APIExport; through every one of them
//! (`/clusters/*`, see [`holdfast_shared::endpoints`]) the controller watches
//! DependencyRules in every binding workspace and the configurations it installed.
//! A write to workspace X goes through the endpoint of X's shard (a virtual
//! workspace serves only its shard's clusters): the one remembered for X, else one
//! whose watch has seen objects of X, else each in turn (a 403 or 404 means "not
//! this shard"). Each rule's `apiExportRef.path` (any depth, starting at any
//! logical cluster, e.g. `root:org:team:network`) is resolved to a logical cluster
//! through its LogicalCluster object (see [`holdfast_shared::kcp::Resolver`]; no
//! Workspace watch: the cache expires, is dropped on every resync and per logical
//! cluster when a read or write there answers 403 or 404), and the named APIExport
//! is read there: a rule is Ready only when every export exists and exports its
//! resource (the dependent's export too, in the rule's own workspace). For every provider
//! workspace it installs one configuration `holdfast` through the virtual
//! workspace (authorised by the permission claim), with one webhook per APIExport
//! (`<export>.policies.holdfast.dev`, calling `<webhook URL>/kcp/<cluster>/<export>`
//! so that two exports of one group/resource are told apart) and one rules entry
//! per protected resource, computed from all rules: deleting a rule removes only
//! its part, deleting the last one removes the configuration. A pass updates the
//! last pass's result with what changed since, or computes everything when a
//! change cannot be attributed (see [`fleet`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

// The pass's maps are keyed by names and hashed many thousand times per pass:
// foldhash (seeded per process) instead of SipHash.
use foldhash::{HashMap, HashMapExt as _, HashSet, HashSetExt as _};
use futures::StreamExt as _;
use holdfast_shared::{
    api::{DependencyRule, GroupResource},
    names::{FIELD_MANAGER, WEBHOOK_CONFIGURATION_NAME},
    webhookconfig::{
        InstallOptions, MANAGED_BY_LABEL, MANAGED_BY_VALUE, WorkspaceTarget,
        export_policies_webhook, matches_desired, routes, workspace_configuration,
    },
};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::watcher,
};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::{Notify, watch};

use holdfast_shared::{
    endpoints::{Endpoints, ObjectKey, Partitioned, Source},
    kcp::{ExportError, ExportInfo},
    watch::{Index, Status as WatchStatus, WatchState},
};

use crate::{
    cycles::{RuleEdges, find_cycles},
    kcp::enforcement::{Enforced, ProbeAnswer, not_enforced_message},
    kcp::kinds::{Kind, PerKind},
    policies::{Invalid, check_dependency_rule, reasons},
    reconcile::{Failure, ReconcileError},
    status::{Outcome, desired_status, now_rfc3339},
};

/// Objects of one kind across logical clusters, keyed by (cluster, name): an
/// [`Index`] fed by the shared watch driver.
pub struct ClusterStore<K: Keep> {
    /// What the store keeps of each object (see [`Keep`]).
    objects: BTreeMap<StoreKey, Arc<K::Kept>>,
    /// Whether the index is synced (a complete list, no failure since; see
    /// [`holdfast_shared::watch`]).
    pub ready: bool,
    /// Changes of what the objects ask for: one added, removed, or given a new
    /// `metadata.generation` (a spec change); status and metadata-only updates,
    /// such as the controller's own status writes, do not count.
    pub spec_changes: u64,
    /// Changes of any kind (an object added, replaced or removed, a relist): a
    /// pass reuses what it computed from these objects while this holds.
    pub version: u64,
    /// The keys added, replaced or removed since the last pass took them.
    changed: HashSet<(String, String)>,
    /// Whether something happened that is not attributed to keys (a relist, a
    /// watch's state changed) since the last pass took the changes.
    relisted: bool,
}

pub use kinds::StoreKey;
pub use store::{Keep, Stored};

pub use holdfast_shared::kcp::{cluster_of, front_proxy_of};

type Shared<K> = Arc<Mutex<ClusterStore<K>>>;

/// A [`ClusterStore`] behind a lock, waking `notify` after every change.
struct SharedFeed<K: Keep> {
    store: Shared<K>,
    notify: Arc<Notify>,
}

/// A store fed from every endpoint of the holdfast APIExportEndpointSlice.
struct EndpointStore<K: Resource + Keep> {
    store: Shared<K>,
    endpoints: Endpoints<K, SharedFeed<K>>,
    task: tokio::task::JoinHandle<()>,
}

/// Clients for the front-proxy and virtual-workspace URLs (one connection pool per
/// server, bounded).
pub use holdfast_shared::kcp::Clients;

/// Requests in flight at once when many workspaces or rules need writes.
const CONCURRENCY: usize = 32;

/// Settings of the kcp reconciler.
#[derive(Clone)]
pub struct Settings {
    /// Name of the holdfast APIExport.
    pub api_export: String,
    /// Full resync period.
    pub resync: Duration,
    /// Protection labels in force (every workspace binding holdfast).
    pub labels: holdfast_shared::labels::ProtectionLabels,
    /// Global strict mode.
    pub strict: bool,
    /// The workspace exporting `tenancy.kcp.io`, where workspace containment's
    /// configuration goes (`None`: no workspace containment).
    pub tenancy_workspace: Option<String>,
}

/// How often the initial lists are checked for completion.
const SYNC_POLL: Duration = Duration::from_millis(200);

/// A pass runs this soon again while some workspace path is unresolved.
const UNRESOLVED_RETRY: Duration = Duration::from_secs(2);
/// A full pass every this many resync periods without events (the export answers
/// are read again within each period, outside the passes: [`ExportAnswers`]).
const FULL_RESYNC_EVERY: u32 = 10;
/// The longest a pass may leave the statuses to the next because a policy changed
/// during it (see [`Reconciler::defer_statuses`]).
const STATUS_DEFER_MAX: Duration = Duration::from_secs(1);

/// The kcp reconciler.
pub struct Reconciler {
    /// The holdfast workspace (through the front-proxy).
    home: Client,
    /// The configuration `holdfast` of the holdfast workspace, watched.
    home_hooks: holdfast_shared::watch::Cache<ValidatingWebhookConfiguration>,
    /// Whether the holdfast workspace's configuration was found unreadable or
    /// unwritable (said once until it works).
    home_warned: AtomicBool,
    /// Workspace containment's configuration, when on.
    workspaces: Option<crate::kcp::workspaces::WorkspacesConfiguration>,
    clients: Clients,
    settings: Settings,
    options: watch::Receiver<InstallOptions>,
    /// DependencyRules, untyped: one the types cannot read is reported Invalid
    /// instead of breaking the watch.
    rules: Shared<DynamicObject>,
    hooks: Shared<ValidatingWebhookConfiguration>,
    rule_endpoints: Endpoints<DynamicObject, SharedFeed<DynamicObject>>,
    hook_endpoints:
        Endpoints<ValidatingWebhookConfiguration, SharedFeed<ValidatingWebhookConfiguration>>,
    /// APIBindings of every workspace binding holdfast (which binds holdfast, where
    /// each type comes from).
    bindings: Shared<DynamicObject>,
    binding_endpoints: Endpoints<DynamicObject, SharedFeed<DynamicObject>>,
    /// ResourceProtections, AnchorRules and CriticalServices, untyped.
    kinds: PerKind<Shared<DynamicObject>>,
    /// The watch tasks (stopped with the reconciler).
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The export answers, read again outside the pass (see [`ExportAnswers`]).
    answers: Arc<ExportAnswers>,
    /// When the last full resync was.
    last_resync: std::time::Instant,
    notify: Arc<Notify>,
    /// What the passes remember from one to the next (see [`Memo`]).
    memo: Memo,
    /// Which installed configurations kcp is seen enforcing.
    enforcement: crate::kcp::enforcement::Enforcement,
    /// Whether the last pass left some workspace path unresolved (retry soon).
    unresolved: bool,
    /// Set at a full resync: the next pass is a full one.
    resynced: AtomicBool,
    /// Set once the first reconcile succeeded.
    pub ready: Arc<AtomicBool>,
}

/// Invalid reasons that may clear without the rule changing: the pass is
/// retried soon ([`UNRESOLVED_RETRY`]).
const RETRIED: [&str; 5] = [
    reasons::UNRESOLVED_WORKSPACE,
    reasons::API_EXPORT_NOT_FOUND,
    reasons::RESOURCE_NOT_EXPORTED,
    reasons::API_EXPORT_FORBIDDEN,
    reasons::API_EXPORT_UNREADABLE,
];

/// Whether an export is named by workspace path (an `apiExportRef`) or sits in
/// a known logical cluster (the dependent's, in the rule's own workspace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Where {
    Path,
    Cluster,
}

/// What looking up one APIExport came to: its logical cluster (once resolved)
/// and the export, or why not (an `Invalid` reason and message).
#[derive(Clone, Debug, PartialEq, Eq)]
struct ExportLookup {
    lc: Option<String>,
    export: Result<Arc<ExportInfo>, (&'static str, String)>,
}

/// The installed configurations' resourceVersions by logical cluster, hashed
/// once per pass for the statuses' comparisons.
type InstalledRvs<'a> = HashMap<&'a str, Option<&'a str>>;

/// A provider workspace a rule names (`spec.dependencies[].apiExportRef`).
struct WorkspaceRef {
    /// Workspace path.
    path: String,
    /// APIExport name.
    export: String,
    /// Its logical cluster, once resolved.
    logical_cluster: Option<String>,
    /// The export's identity hash, once read.
    identity_hash: Option<String>,
    /// Its resources another export of the workspace exports too, once listed.
    shared_resources: Option<Vec<String>>,
    /// Why it is not resolved, or what the export lacks.
    message: Option<String>,
}

/// What one rule asks for.
struct RuleEval {
    cluster: String,
    /// `cluster/name`.
    key: String,
    invalid: Option<Invalid>,
    workspaces: Vec<WorkspaceRef>,
    /// provider cluster → APIExport name → resources
    targets: RuleTargets,
    /// The rule's edges between resource types, for the cycle search (a valid
    /// rule's only).
    edges: Option<RuleEdges>,
}

impl RuleEval {
    /// `cluster/name`.
    fn key(&self) -> &str {
        &self.key
    }

    /// Records the workspace of `path` and `export` once (the first problem
    /// found with it is kept).
    fn note_workspace(
        &mut self,
        path: &str,
        export: &str,
        logical_cluster: Option<String>,
        info: Option<&ExportInfo>,
        message: Option<String>,
    ) {
        match self
            .workspaces
            .iter_mut()
            .find(|w| w.path == path && w.export == export)
        {
            Some(w) => {
                if w.message.is_none() {
                    w.message = message;
                }
            }
            None => self.workspaces.push(WorkspaceRef {
                path: path.to_string(),
                export: export.to_string(),
                logical_cluster,
                identity_hash: info
                    .map(|e| e.identity_hash.clone())
                    .filter(|h| !h.is_empty()),
                shared_resources: info
                    .and_then(|e| e.shared.as_ref())
                    .map(|shared| shared.iter().map(ToString::to_string).collect()),
                message,
            }),
        }
    }
}

/// Phase 1 and 2 of a pass: a rule object, decoded and evaluated (shared parts:
/// cloning it is cheap).
#[derive(Clone)]
struct RuleState {
    obj: Arc<Stored>,
    parsed: Arc<Parsed>,
    eval: Arc<RuleEval>,
    rule: Option<Arc<DependencyRule>>,
}

/// Phases 1 and 2 of a pass: the rules, and what changed since the last pass.
struct Evaluated {
    rules: Vec<(StoreKey, RuleState)>,
    /// Some rule was evaluated afresh or removed: the rules may name other
    /// answers than the last pass's.
    fresh: bool,
    /// Some rule was removed: caches keyed by rule drop its entries.
    removed: bool,
}

/// APIExport name → the resources of it some rule protects.
type ExportTargets = BTreeMap<String, BTreeSet<GroupResource>>;

/// One workspace's target and what it was built from.
struct CachedTarget {
    /// The evaluations of the rules routing to the workspace, in rule order.
    evals: Vec<Arc<RuleEval>>,
    plan_part: Option<Arc<WorkspaceTarget>>,
    target: Arc<WorkspaceTarget>,
}

/// Phase 4: the configurations installed after the writes, and what failed.
struct Installed {
    configurations: BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    failed: Vec<Failure>,
}

/// The status of one policy of a [`Kind`] to write, and the Warning Event to emit
/// once it is written (it turned Invalid with a new reason).
struct KindStatusWrite {
    kind: Kind,
    cluster: String,
    obj: Arc<Stored>,
    status: serde_json::Value,
    event: Option<(&'static str, String)>,
    /// What the status is computed from (remembered with the write's
    /// resourceVersion, so its echo is not compared again).
    inputs: KindStatusInputs,
}

/// Phase 5: one rule's status to write.
struct StatusWrite {
    key: String,
    cluster: String,
    obj: Arc<Stored>,
    /// The status the object has, and its `status.workspaces`.
    current: (holdfast_shared::api::PolicyStatus, serde_json::Value),
    outcome: Outcome,
    workspaces: Vec<serde_json::Value>,
    /// Remembered when the status turns out to be up to date.
    inputs: Option<StatusInputs>,
}

impl crate::reconcile::Reconcile for Reconciler {
    const TOPOLOGY: &'static str = "kcp";

    fn triggers(&self) -> crate::reconcile::Triggers {
        crate::reconcile::Triggers::new(&self.notify, &self.options)
    }

    fn idle_wait(&self) -> Duration {
        // A changed export answer wakes the pass (see [`ExportAnswers`]).
        match self.unresolved {
            true => UNRESOLVED_RETRY,
            false => self.settings.resync,
        }
    }

    fn on_resync(&mut self) {
        // The short retries are no resync. A full pass only every
        // FULL_RESYNC_EVERY periods.
        if self.last_resync.elapsed() >= self.settings.resync * FULL_RESYNC_EVERY {
            self.last_resync = std::time::Instant::now();
            self.resynced.store(true, Ordering::Relaxed);
        }
    }

    async fn reconcile(&mut self) -> Result<(), ReconcileError> {
        self.unresolved = self.reconcile_once().await?;
        Ok(())
    }
}

impl Reconciler {
    /// The endpoints to try for a write to `cluster`, most likely first: the one
    /// remembered, one whose watch has seen objects of it, then every other.
    fn shard_candidates(&self, cluster: &str) -> Vec<String> {
        let remembered = self.memo.shard_of.lock().get(cluster).cloned();
        let mut out: Vec<String> = Vec::new();
        let all = remembered
            .into_iter()
            .chain(self.rule_endpoints.seen_at(cluster))
            .chain(self.hook_endpoints.seen_at(cluster))
            .chain(self.binding_endpoints.seen_at(cluster))
            .chain(self.rule_endpoints.urls())
            .chain(self.hook_endpoints.urls());
        for url in all {
            if !out.contains(&url) {
                out.push(url);
            }
        }
        out
    }

    /// A client for `cluster` through the endpoint most likely to serve it.
    fn vw_client(&self, cluster: &str) -> anyhow::Result<Client> {
        let Some(url) = self.shard_candidates(cluster).into_iter().next() else {
            anyhow::bail!(
                "APIExportEndpointSlice {} lists no endpoint",
                self.settings.api_export
            );
        };
        Ok(self
            .clients
            .virtual_workspace(&format!("{url}/clusters/{cluster}"))?)
    }

    /// Runs `op` with a client for `cluster` through the endpoint of its shard (see
    /// [`in_turn`]). Remembers the endpoint that answered, forgets it on failure.
    async fn on_shard<T, F, Fut>(&self, cluster: &str, op: F) -> anyhow::Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        // Each endpoint's client built only when it is tried: a client per URL
        // costs its request queue (about 20 KiB), and the first candidate answers
        // almost always.
        let mut unbuilt = None;
        let candidates = self
            .shard_candidates(cluster)
            .into_iter()
            .filter_map(|url| {
                match self
                    .clients
                    .virtual_workspace(&format!("{url}/clusters/{cluster}"))
                {
                    Ok(client) => Some((url, client)),
                    Err(e) => {
                        unbuilt.get_or_insert(e);
                        None
                    }
                }
            });
        let result = in_turn(candidates, op).await;
        match &result {
            Ok((url, _)) => {
                self.memo
                    .shard_of
                    .lock()
                    .insert(cluster.to_string(), url.clone());
            }
            Err(_) => {
                self.memo.shard_of.lock().remove(cluster);
            }
        }
        match result {
            Ok((_, v)) => Ok(v),
            Err(Some(e)) => Err(e.into()),
            Err(None) => match unbuilt {
                Some(e) => Err(e.into()),
                None => anyhow::bail!(
                    "APIExportEndpointSlice {} lists no endpoint",
                    self.settings.api_export
                ),
            },
        }
    }

    /// Whether both initial lists are complete.
    fn synced(&self) -> bool {
        let ready = |s: &Shared<DynamicObject>| s.lock().ready;
        ready(&self.rules)
            && self.hooks.lock().ready
            && ready(&self.bindings)
            && self.kinds.iter().all(|(_, s)| ready(s))
    }

    /// The rule objects, keyed by (cluster, name).
    fn rule_objects(&self) -> Vec<(StoreKey, Arc<Stored>)> {
        self.rules.lock().snapshot()
    }

    /// The installed configurations named holdfast, by cluster.
    fn live_configurations(&self) -> BTreeMap<String, Arc<ValidatingWebhookConfiguration>> {
        self.hooks
            .lock()
            .objects
            .iter()
            .filter(|(k, _)| k.1 == WEBHOOK_CONFIGURATION_NAME)
            .map(|(k, v)| (k.0.clone(), v.clone()))
            .collect()
    }

    /// The installed configurations named holdfast in `lcs`.
    fn live_configurations_in(
        &self,
        lcs: &BTreeSet<String>,
    ) -> BTreeMap<String, Arc<ValidatingWebhookConfiguration>> {
        let hooks = self.hooks.lock();
        lcs.iter()
            .filter_map(|lc| {
                let key = (lc.clone(), WEBHOOK_CONFIGURATION_NAME.to_string());
                hooks.objects.get(&key).map(|c| (lc.clone(), c.clone()))
            })
            .collect()
    }

    /// The policies' spec changes so far (DependencyRules and the other kinds).
    fn spec_changes(&self) -> u64 {
        let of = |s: &Shared<DynamicObject>| s.lock().spec_changes;
        of(&self.rules) + self.kinds.iter().map(|(_, s)| of(s)).sum::<u64>()
    }

    /// Whether this pass leaves the statuses to the next: a policy changed since
    /// the pass started (counted at `inputs_at_start`), and statuses were written
    /// less than [`STATUS_DEFER_MAX`] ago, so a stream of changes cannot starve them.
    fn defer_statuses(&self, inputs_at_start: u64) -> bool {
        self.spec_changes() != inputs_at_start
            && self.memo.statuses_written.lock().elapsed() < STATUS_DEFER_MAX
    }
}

/// Runs `op` on each `(endpoint, client)` in turn while it answers 403 or 404 (a
/// virtual workspace serves only its shard's clusters: "not this shard"); returns the
/// endpoint that answered and the result, or the error: any other at once, else the
/// first candidate's (the most likely shard's), `None` without candidates.
async fn in_turn<C, T, F, Fut>(
    candidates: impl IntoIterator<Item = (String, C)>,
    op: F,
) -> Result<(String, T), Option<kube::Error>>
where
    F: Fn(C) -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut first_error = None;
    for (url, client) in candidates {
        match op(client).await {
            Ok(v) => return Ok((url, v)),
            Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => {
                first_error.get_or_insert(kube::Error::Api(e));
            }
            Err(e) => return Err(Some(e)),
        }
    }
    Err(first_error)
}

/// Whether `e` is kcp's 403 or 404 (a logical cluster gone, replaced, or no
/// longer accessible).
fn gone_or_forbidden(e: &anyhow::Error) -> bool {
    e.downcast_ref::<kube::Error>()
        .and_then(holdfast_shared::kcp::status_of)
        .is_some_and(|c| c == 403 || c == 404)
}

/// A result whose 404 means the object is gone already: success.
fn ignore_not_found<T>(result: Result<T, kube::Error>) -> anyhow::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Phase 3: the desired configuration's contents per logical cluster: the rules'
/// part (what the DependencyRules route to each provider workspace) joined with
/// the other kinds' plan. Keeps each workspace's last target: one whose rules'
/// evaluations and plan part are the last pass's (compared by pointer) keeps its
/// target; the others are built afresh.
#[derive(Default)]
struct Targets {
    by_lc: HashMap<String, CachedTarget>,
    /// Per logical cluster: the evaluations of the rules routing there, by rule.
    routes: HashMap<String, BTreeMap<StoreKey, Arc<RuleEval>>>,
    /// Every workspace's target.
    desired: BTreeMap<String, Arc<WorkspaceTarget>>,
}

mod answers;
pub mod enforcement;
mod fleet;
mod install;
pub mod kinds;
mod lifecycle;
pub mod manifests;
mod memo;
mod pass;
mod rules;
mod statuses;
mod store;
mod targets;
pub mod workspaces;
#[allow(unused_imports)]
use {answers::*, fleet::*, install::*, memo::*, rules::*, statuses::*, store::*, targets::*};

#[cfg(test)]
mod echo_tests;
#[cfg(test)]
mod tests;
