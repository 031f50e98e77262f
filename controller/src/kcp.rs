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
//! per protected resource, recomputed from scratch from all rules on every change:
//! deleting a rule removes only its part, deleting the last one removes the
//! configuration.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
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
    kcp_enforcement::{Enforced, ProbeAnswer, not_enforced_message},
    policies::{Invalid, check_dependency_rule, reasons},
    reconcile::ReconcileError,
    status::{Outcome, desired_status, now_rfc3339},
};

/// Objects of one kind across logical clusters, keyed by (cluster, name): an
/// [`Index`] fed by the shared watch driver.
pub struct ClusterStore<K> {
    objects: BTreeMap<StoreKey, Arc<K>>,
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
}

/// A store's key: (logical cluster, name), shared with the snapshots and the
/// caches keyed by object (cloning it is a reference count).
pub type StoreKey = Arc<(String, String)>;

impl<K> Default for ClusterStore<K> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            ready: false,
            spec_changes: 0,
            version: 0,
        }
    }
}

pub use holdfast_shared::kcp::{cluster_of, front_proxy_of};

impl<K: Resource> ClusterStore<K> {
    fn key(obj: &K) -> (String, String) {
        (cluster_of(obj), obj.meta().name.clone().unwrap_or_default())
    }

    /// A snapshot.
    pub fn snapshot(&self) -> Vec<(StoreKey, Arc<K>)> {
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
            .map(|o| (Arc::new(Self::key(&o)), Arc::new(o)))
            .collect();
        self.spec_changes += 1;
        self.version += 1;
    }

    fn apply(&mut self, object: K) {
        let (meta, key) = (object.meta(), Self::key(&object));
        let same_spec = self.objects.get(&key).is_some_and(|old| {
            let old = old.meta();
            old.uid == meta.uid && old.generation == meta.generation
        });
        if !same_spec {
            self.spec_changes += 1;
        }
        self.version += 1;
        match self.objects.get_mut(&key) {
            // The key stays the one snapshots and caches share.
            Some(slot) => *slot = Arc::new(object),
            None => {
                self.objects.insert(Arc::new(key), Arc::new(object));
            }
        }
    }

    fn delete(&mut self, object: K) {
        if self.objects.remove(&Self::key(&object)).is_some() {
            self.spec_changes += 1;
            self.version += 1;
        }
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

impl<K: Resource> Partitioned<K> for SharedFeed<K> {
    fn remove(&mut self, key: &ObjectKey) {
        self.with(|s| {
            if s.objects
                .remove(&(key.cluster.clone(), key.name.clone()))
                .is_some()
            {
                s.spec_changes += 1;
                s.version += 1;
            }
        });
    }
}

/// A store fed from every endpoint of the holdfast APIExportEndpointSlice.
struct EndpointStore<K: Resource> {
    store: Shared<K>,
    endpoints: Endpoints<K, SharedFeed<K>>,
    task: tokio::task::JoinHandle<()>,
}

/// Watches `api` on every endpoint of `source` (a 404 through a virtual workspace
/// proves nothing: fail closed) into a new store.
fn spawn_store<K>(source: Source<K>, notify: Arc<Notify>) -> EndpointStore<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let store: Shared<K> = Arc::new(Mutex::new(ClusterStore::default()));
    let feed = SharedFeed {
        store: store.clone(),
        notify,
    };
    let (endpoints, task) = Endpoints::spawn(feed, source);
    EndpointStore {
        store,
        endpoints,
        task,
    }
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
    workspaces: Option<crate::kcp_workspaces::WorkspacesConfiguration>,
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
    /// ResourceProtections, AnchorRules and CriticalServices (the order of
    /// [`crate::kcp_kinds::kinds`]), untyped.
    kinds: [Shared<DynamicObject>; 3],
    /// When a pass last started writing statuses (see [`Reconciler::defer_statuses`]).
    statuses_written: Mutex<std::time::Instant>,
    /// The endpoint a write to a workspace last went through (forgotten when a write
    /// through it fails).
    shard_of: Mutex<HashMap<String, String>>,
    /// The watch tasks (stopped with the reconciler).
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Workspace paths → logical clusters (no watch: TTL, dropped on every resync,
    /// and per logical cluster when a read there answers 403 or 404).
    resolver: holdfast_shared::kcp::Resolver,
    /// APIExports read through the front-proxy (same invalidation).
    exports: holdfast_shared::kcp::Exports,
    /// Per (path, export): the last complete answer, used while a lookup fails
    /// with something other than a definite 403/404 (a blip must not drop
    /// protection).
    last_good: Mutex<HashMap<(String, String), ExportFound>>,
    /// When the caches were last dropped.
    last_resync: std::time::Instant,
    notify: Arc<Notify>,
    /// Decoding results per rule, reused while its resourceVersion is unchanged.
    parsed: Mutex<HashMap<StoreKey, Arc<Parsed>>>,
    /// Per provider cluster: the live resourceVersion last seen matching, and what
    /// the desired configuration it matched was built from (skips building and
    /// comparing unchanged pairs).
    matched: Mutex<HashMap<String, Matched>>,
    /// The previous pass's lookups (see [`PassLookups`]).
    lookups: Mutex<PassLookups>,
    /// Per rule: its last evaluation (see [`CachedEval`]).
    evals: Mutex<HashMap<StoreKey, CachedEval>>,
    /// Per rule (`cluster/name`): what its status was last found up to date with.
    statuses: Mutex<HashMap<String, StatusInputs>>,
    /// Which installed configurations kcp is seen enforcing.
    enforcement: crate::kcp_enforcement::Enforcement,
    /// Whether the last pass left some workspace path unresolved (retry soon).
    unresolved: bool,
    /// ResourceProtections, AnchorRules and CriticalServices decoded and checked,
    /// by (kind, cluster, name), with the resourceVersion they were read at.
    decoded: Mutex<HashMap<DecodedKey, (String, Arc<crate::kcp_kinds::Decoded>)>>,
    /// Per policy of [`crate::kcp_kinds::kinds`]: what its status was last found up
    /// to date with (its comparison is skipped while they hold).
    kind_statuses: Mutex<HashMap<DecodedKey, KindStatusInputs>>,
    /// Workspaces whose configuration holdfast may no longer delete (said once).
    abandoned: Mutex<BTreeSet<String>>,
    /// The last plan of the other kinds (see [`Reconciler::plan`]).
    planned: Mutex<Option<Arc<PlannedKinds>>>,
    /// Per logical cluster: its last target.
    targets: Mutex<Targets>,
    /// Set once the first reconcile succeeded.
    pub ready: Arc<AtomicBool>,
}

/// One rule object, decoded. A cache of decoding work only: every pass still
/// recomputes the whole desired state from all rules.
struct Parsed {
    rv: String,
    /// The object's uid and `metadata.generation`: while both hold, its spec is the
    /// same (a status write moves the resourceVersion only).
    spec_of: (Option<String>, Option<i64>),
    rule: Result<Arc<DependencyRule>, String>,
    /// The spec's own problems ([`check_dependency_rule`], a function of the
    /// rule alone).
    invalid: Option<Invalid>,
    status: holdfast_shared::api::PolicyStatus,
    workspaces: serde_json::Value,
}

impl Parsed {
    fn of(obj: &DynamicObject) -> Self {
        let rule = crate::kubernetes::decode::<DependencyRule>(obj).map(Arc::new);
        let invalid = match &rule {
            Ok(r) => check_dependency_rule(r, &Default::default(), false),
            Err(_) => None,
        };
        Self {
            rv: obj.metadata.resource_version.clone().unwrap_or_default(),
            spec_of: (obj.metadata.uid.clone(), obj.metadata.generation),
            rule,
            invalid,
            status: crate::kubernetes::current_status(obj),
            workspaces: match &obj.data["status"]["workspaces"] {
                serde_json::Value::Null => json!([]),
                v => v.clone(),
            },
        }
    }

    /// Whether `other` was decoded from the same spec: the same decoding, or the
    /// same object (uid) at the same generation, as after a status write. A rule's
    /// evaluation is a function of its spec and the answers it used, so it is kept
    /// across the echoes of status writes (without a generation, only the same
    /// decoding counts).
    fn same_spec(&self, other: &Arc<Parsed>) -> bool {
        std::ptr::eq(self, Arc::as_ptr(other))
            || (self.spec_of.0.is_some()
                && self.spec_of.1.is_some()
                && self.spec_of == other.spec_of)
    }
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

/// An APIExport found, and the logical cluster it is in.
#[derive(Clone)]
struct ExportFound {
    lc: String,
    export: Arc<ExportInfo>,
}

/// What looking up one APIExport came to: its logical cluster (once resolved)
/// and the export, or why not (an `Invalid` reason and message).
#[derive(Clone, Debug, PartialEq, Eq)]
struct ExportLookup {
    lc: Option<String>,
    export: Result<Arc<ExportInfo>, (&'static str, String)>,
}

impl ExportLookup {
    fn failed(lc: Option<String>, reason: &'static str, message: String) -> Self {
        Self {
            lc,
            export: Err((reason, message)),
        }
    }

    /// Ok when the export was found and exports `gr`.
    fn exporting(
        &self,
        gr: &GroupResource,
        workspace: &str,
        name: &str,
    ) -> Result<(), (&'static str, String)> {
        let export = self.export.as_ref().map_err(|e| e.clone())?;
        if export.resources.contains(gr) {
            return Ok(());
        }
        let exported: Vec<String> = export.resources.iter().map(|r| r.to_string()).collect();
        Err((
            reasons::RESOURCE_NOT_EXPORTED,
            format!(
                "APIExport {name} in workspace {workspace} does not export {gr} (it exports: {})",
                if exported.is_empty() {
                    "nothing".to_string()
                } else {
                    exported.join(", ")
                }
            ),
        ))
    }
}

/// The lookups of one pass, shared by its rules: each export read once. An
/// answer equal to the previous pass's is that pass's `Arc`, so a rule's
/// evaluation can be reused when its object and every answer it used are the
/// same (compared by pointer).
#[derive(Default)]
struct PassLookups {
    /// Where → workspace path or logical cluster → export name → answer.
    answers: HashMap<Where, HashMap<String, HashMap<String, Arc<ExportLookup>>>>,
}

impl PassLookups {
    fn get(&self, kind: Where, at: &str, name: &str) -> Option<&Arc<ExportLookup>> {
        self.answers.get(&kind)?.get(at)?.get(name)
    }

    /// Every (where, at, name) answered.
    fn keys(&self) -> impl Iterator<Item = (Where, &str, &str)> {
        self.answers.iter().flat_map(|(kind, at)| {
            at.iter().flat_map(move |(at, names)| {
                names
                    .keys()
                    .map(move |name| (*kind, at.as_str(), name.as_str()))
            })
        })
    }

    /// Keeps only the answers `named` names.
    fn retain(&mut self, named: &HashSet<(Where, &str, &str)>) {
        for (kind, at) in self.answers.iter_mut() {
            for (path, names) in at.iter_mut() {
                names.retain(|name, _| named.contains(&(*kind, path.as_str(), name.as_str())));
            }
            at.retain(|_, names| !names.is_empty());
        }
        self.answers.retain(|_, at| !at.is_empty());
    }

    fn insert(&mut self, kind: Where, at: &str, name: &str, found: Arc<ExportLookup>) {
        self.answers
            .entry(kind)
            .or_default()
            .entry(at.to_string())
            .or_default()
            .insert(name.to_string(), found);
    }
}

/// A rule's evaluation and what it was computed from.
struct CachedEval {
    parsed: Arc<Parsed>,
    /// The answers used, in the order [`Reconciler::evaluate`] asks for them.
    used: Vec<Arc<ExportLookup>>,
    eval: Arc<RuleEval>,
}

/// What a rule's status was last found up to date with: the same evaluation,
/// object, installed configurations (by resourceVersion) and cycle give the
/// same status, so the comparison is skipped.
struct StatusInputs {
    eval: Arc<RuleEval>,
    parsed: Arc<Parsed>,
    installed: Vec<Option<String>>,
    cycle: Option<String>,
}

impl StatusInputs {
    /// Whether `r` over `installed` with `cycle` has these inputs (compared in
    /// place: the common case, nothing changed, allocates nothing).
    fn hold_for(&self, r: &RuleState, installed: &InstalledRvs, cycle: Option<&str>) -> bool {
        if !(Arc::ptr_eq(&self.eval, &r.eval)
            && Arc::ptr_eq(&self.parsed, &r.parsed)
            && self.cycle.as_deref() == cycle)
        {
            return false;
        }
        let mut lcs = status_clusters(&r.eval);
        let mut before = self.installed.iter();
        loop {
            match (lcs.next(), before.next()) {
                (None, None) => return true,
                (Some(lc), Some(rv)) => {
                    let same = match (installed.get(lc.as_str()), rv) {
                        (None, None) => true,
                        (Some(Some(now)), Some(rv)) => *now == rv,
                        _ => false,
                    };
                    if !same {
                        return false;
                    }
                }
                _ => return false,
            }
        }
    }
}

/// The installed configurations' resourceVersions by logical cluster, hashed
/// once per pass for the statuses' comparisons.
type InstalledRvs<'a> = HashMap<&'a str, Option<&'a str>>;

fn installed_rvs(
    installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
) -> InstalledRvs<'_> {
    installed
        .iter()
        .map(|(lc, c)| (lc.as_str(), c.metadata.resource_version.as_deref()))
        .collect()
}

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
    targets: BTreeMap<String, ExportTargets>,
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

/// Phase 1 and 2 of a pass: a rule object, decoded and evaluated.
struct RuleState {
    obj: Arc<DynamicObject>,
    parsed: Arc<Parsed>,
    eval: Arc<RuleEval>,
    rule: Option<Arc<DependencyRule>>,
}

/// Phases 1 and 2 of a pass: the rules, and what changed since the last pass.
struct Evaluated {
    rules: Vec<RuleState>,
    /// Some rule was evaluated afresh or removed: the rules may name other
    /// answers than the last pass's.
    fresh: bool,
    /// Some rule was removed: caches keyed by rule drop its entries.
    removed: bool,
}

/// APIExport name → the resources of it some rule protects.
type ExportTargets = BTreeMap<String, BTreeSet<GroupResource>>;

/// A policy of [`crate::kcp_kinds::kinds`]: (kind, logical cluster, name).
type DecodedKey = (usize, String, String);

/// What the status of a policy of [`crate::kcp_kinds::kinds`] is computed from.
#[derive(PartialEq)]
struct KindStatusInputs {
    rv: String,
    eval: crate::kcp_kinds::PolicyEval,
    installed: Vec<Option<String>>,
}

/// A live configuration's resourceVersion, and the target and options of the
/// desired configuration it matched.
type Matched = (String, Arc<WorkspaceTarget>, Arc<InstallOptions>);

/// The other kinds' plan, and what it was made from.
struct PlannedKinds {
    /// The versions of the three kinds' stores and of the APIBindings' store.
    versions: [u64; 4],
    /// holdfast's own logical cluster.
    home: Option<String>,
    /// Per logical cluster: the plan's part of its target.
    targets: BTreeMap<String, Arc<WorkspaceTarget>>,
    /// Per policy, in the order of `objects`.
    policies: Vec<crate::kcp_kinds::PolicyEval>,
    objects: Vec<Arc<DynamicObject>>,
}

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
    errors: Vec<String>,
}

/// The status of one policy of [`crate::kcp_kinds::kinds`] to write, and the
/// Warning Event to emit once it is written (it turned Invalid with a new reason).
struct KindStatusWrite {
    kind: usize,
    cluster: String,
    obj: Arc<DynamicObject>,
    status: serde_json::Value,
    event: Option<(&'static str, String)>,
}

/// Phase 5: one rule's status to write.
struct StatusWrite {
    key: String,
    cluster: String,
    obj: Arc<DynamicObject>,
    parsed: Arc<Parsed>,
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
        if self.unresolved {
            UNRESOLVED_RETRY
        } else {
            self.settings.resync
        }
    }

    fn on_resync(&mut self) {
        // The short retry of unresolved rules is no resync: only their failed
        // lookups are read again (failures are never cached).
        if self.last_resync.elapsed() >= self.settings.resync {
            self.resolver.invalidate();
            self.exports.invalidate();
            self.last_resync = std::time::Instant::now();
        }
    }

    async fn reconcile(&mut self) -> Result<(), ReconcileError> {
        self.unresolved = self.reconcile_once().await?;
        Ok(())
    }
}

impl Reconciler {
    /// Starts the watches through every endpoint of the APIExportEndpointSlice of
    /// the holdfast APIExport in `home`'s workspace (the holdfast workspace).
    pub fn new(
        clients: Clients,
        home: Client,
        settings: Settings,
        options: watch::Receiver<InstallOptions>,
        ready: Arc<AtomicBool>,
    ) -> anyhow::Result<Self> {
        let notify = Arc::new(Notify::new());
        fn source<K>(
            home: &Client,
            export: &str,
            clients: &Clients,
            api: Box<dyn Fn(Client) -> Api<K> + Send>,
            config: watcher::Config,
        ) -> Source<K> {
            Source {
                home: home.clone(),
                slice: export.to_string(),
                clients: clients.clone(),
                api,
                config,
            }
        }
        let rules = spawn_store(
            source(
                &home,
                &settings.api_export,
                &clients,
                Box::new(|c| {
                    Api::<DynamicObject>::all_with(c, &ApiResource::erase::<DependencyRule>(&()))
                }),
                watcher::Config::default(),
            ),
            notify.clone(),
        );
        let hooks = spawn_store(
            source(
                &home,
                &settings.api_export,
                &clients,
                Box::new(Api::<ValidatingWebhookConfiguration>::all),
                watcher::Config::default()
                    .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
            ),
            notify.clone(),
        );
        let untyped = |ar: ApiResource| -> Box<dyn Fn(Client) -> Api<DynamicObject> + Send> {
            Box::new(move |c| Api::<DynamicObject>::all_with(c, &ar))
        };
        let bindings = spawn_store(
            source(
                &home,
                &settings.api_export,
                &clients,
                untyped(holdfast_shared::kcp::api_binding_resource()),
                watcher::Config::default(),
            ),
            notify.clone(),
        );
        let kinds = crate::kcp_kinds::kinds().map(|ar| {
            spawn_store(
                source(
                    &home,
                    &settings.api_export,
                    &clients,
                    untyped(ar),
                    watcher::Config::default(),
                ),
                notify.clone(),
            )
        });
        // holdfast's own configuration in its workspace (kcp calls it for DELETEs of
        // the types bound from holdfast.dev: a CriticalService guarding itself).
        let wake = notify.clone();
        let (home_hooks, home_task) = holdfast_shared::watch::spawn_cache(
            Api::<ValidatingWebhookConfiguration>::all(home.clone()),
            // Only holdfast's own (a foreign one of the name is not deleted).
            watcher::Config::default()
                .fields(&format!("metadata.name={WEBHOOK_CONFIGURATION_NAME}"))
                .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
            holdfast_shared::watch::NotFound::Unknown,
            move || wake.notify_one(),
        );
        let mut tasks = vec![rules.task, hooks.task, bindings.task, home_task];
        let workspaces = match settings.tenancy_workspace.as_deref() {
            Some(path) => {
                let wake = notify.clone();
                let (w, task) = crate::kcp_workspaces::WorkspacesConfiguration::new(
                    path,
                    clients.cluster(path)?,
                    move || wake.notify_one(),
                );
                tasks.push(task);
                Some(w)
            }
            None => None,
        };
        let kinds = kinds.map(|k| {
            tasks.push(k.task);
            k.store
        });
        let resolver = holdfast_shared::kcp::Resolver::new(clients.clone());
        let exports = holdfast_shared::kcp::Exports::new(clients.clone());
        Ok(Self {
            home,
            home_hooks,
            home_warned: AtomicBool::new(false),
            workspaces,
            clients,
            settings,
            options,
            rules: rules.store,
            hooks: hooks.store,
            rule_endpoints: rules.endpoints,
            hook_endpoints: hooks.endpoints,
            bindings: bindings.store,
            binding_endpoints: bindings.endpoints,
            kinds,
            statuses_written: Mutex::new(std::time::Instant::now()),
            shard_of: Mutex::new(HashMap::new()),
            tasks,
            resolver,
            exports,
            last_good: Mutex::new(HashMap::new()),
            last_resync: std::time::Instant::now(),
            notify,
            parsed: Mutex::new(HashMap::new()),
            matched: Mutex::new(HashMap::new()),
            lookups: Mutex::new(PassLookups::default()),
            evals: Mutex::new(HashMap::new()),
            statuses: Mutex::new(HashMap::new()),
            enforcement: Default::default(),
            unresolved: false,
            abandoned: Mutex::new(BTreeSet::new()),
            planned: Mutex::new(None),
            targets: Mutex::new(Targets::default()),
            decoded: Mutex::new(HashMap::new()),
            kind_statuses: Mutex::new(HashMap::new()),
            ready,
        })
    }

    /// The endpoints to try for a write to `cluster`, most likely first: the one
    /// remembered, one whose watch has seen objects of it, then every other.
    fn shard_candidates(&self, cluster: &str) -> Vec<String> {
        let remembered = self
            .shard_of
            .lock()
            .ok()
            .and_then(|m| m.get(cluster).cloned());
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
        let mut candidates = Vec::new();
        for url in self.shard_candidates(cluster) {
            let client = self
                .clients
                .virtual_workspace(&format!("{url}/clusters/{cluster}"))?;
            candidates.push((url, client));
        }
        let result = in_turn(candidates, op).await;
        if let Ok(mut m) = self.shard_of.lock() {
            match &result {
                Ok((url, _)) => {
                    m.insert(cluster.to_string(), url.clone());
                }
                Err(_) => {
                    m.remove(cluster);
                }
            }
        }
        match result {
            Ok((_, v)) => Ok(v),
            Err(Some(e)) => Err(e.into()),
            Err(None) => anyhow::bail!(
                "APIExportEndpointSlice {} lists no endpoint",
                self.settings.api_export
            ),
        }
    }

    /// Whether both initial lists are complete.
    fn synced(&self) -> bool {
        let ready = |s: &Shared<DynamicObject>| s.lock().map(|s| s.ready).unwrap_or(false);
        ready(&self.rules)
            && self.hooks.lock().map(|s| s.ready).unwrap_or(false)
            && ready(&self.bindings)
            && self.kinds.iter().all(ready)
    }

    /// The rule objects, keyed by (cluster, name).
    fn rule_objects(&self) -> Vec<(StoreKey, Arc<DynamicObject>)> {
        self.rules.lock().map(|s| s.snapshot()).unwrap_or_default()
    }

    /// The installed configurations named holdfast, by cluster.
    fn live_configurations(&self) -> BTreeMap<String, Arc<ValidatingWebhookConfiguration>> {
        self.hooks
            .lock()
            .map(|s| {
                s.objects
                    .iter()
                    .filter(|(k, _)| k.1 == WEBHOOK_CONFIGURATION_NAME)
                    .map(|(k, v)| (k.0.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Runs until `shutdown`, counting passes in `metrics`; with `cleanup`,
    /// deletes every installed configuration on the way out.
    pub async fn run(
        mut self,
        mut shutdown: watch::Receiver<bool>,
        cleanup: bool,
        metrics: crate::reconcile::Metrics,
    ) -> anyhow::Result<()> {
        // Wait for both initial lists.
        while !self.synced() {
            tokio::select! {
                () = self.notify.notified() => {}
                () = tokio::time::sleep(SYNC_POLL) => {}
                _ = shutdown.changed() => return Ok(()),
            }
        }
        tracing::info!(endpoints = ?self.rule_endpoints.urls(), "kcp caches synced; reconciling");
        let ready = self.ready.clone();
        crate::reconcile::run(&mut self, &metrics, &ready, shutdown).await;
        if cleanup {
            self.cleanup().await;
        }
        Ok(())
    }

    /// Deletes every installed configuration (cleanup on shutdown).
    async fn cleanup(&self) {
        let live: Vec<String> = self
            .hooks
            .lock()
            .map(|s| s.objects.keys().map(|k| k.0.clone()).collect())
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
        if let Some(w) = &self.workspaces {
            w.remove().await;
        }
        // The watch sees holdfast's own only.
        if !self.home_hooks.state().is_empty() {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(self.home.clone());
            match ignore_not_found(
                api.delete(WEBHOOK_CONFIGURATION_NAME, &Default::default())
                    .await,
            ) {
                Ok(()) => tracing::info!(
                    "cleanup on shutdown: deleted ValidatingWebhookConfiguration holdfast in the holdfast workspace"
                ),
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "cleanup on shutdown failed in the holdfast workspace")
                }
            }
        }
    }

    /// One rule's evaluation: the spec's problems, then every APIExport it names
    /// (looked up once per pass). Reused from the previous pass when the rule
    /// object and every lookup answer it used are the same.
    async fn evaluate(
        &self,
        key: &StoreKey,
        parsed: &Arc<Parsed>,
        memo: &mut PassLookups,
        prev: &PassLookups,
    ) -> (Arc<RuleEval>, Option<Arc<DependencyRule>>) {
        let (cluster, name) = (key.0.as_str(), key.1.as_str());
        let new_eval = || RuleEval {
            cluster: cluster.to_string(),
            key: format!("{cluster}/{name}"),
            invalid: None,
            workspaces: Vec::new(),
            targets: BTreeMap::new(),
            edges: None,
        };
        let rule = match &parsed.rule {
            Ok(r) => r.clone(),
            Err(message) => {
                let mut eval = new_eval();
                eval.invalid = Some(Invalid {
                    reason: reasons::INVALID_SPEC,
                    message: message.clone(),
                });
                return (Arc::new(eval), None);
            }
        };
        if parsed.invalid.is_some() {
            let mut eval = new_eval();
            eval.invalid = parsed.invalid.clone();
            return (Arc::new(eval), Some(rule));
        }
        // Every answer the rule depends on, in spec order.
        let dependent = &rule.spec.dependent;
        let dependent_found = match &dependent.api_export_name {
            Some(export) => Some(
                self.lookup(memo, prev, cluster, export, Where::Cluster)
                    .await,
            ),
            None => None,
        };
        let mut found_refs = Vec::with_capacity(rule.spec.dependencies.len());
        for d in &rule.spec.dependencies {
            found_refs.push(match &d.api_export_ref {
                Some(r) => Some(self.lookup(memo, prev, &r.path, &r.name, Where::Path).await),
                None => None,
            });
        }
        let used: Vec<Arc<ExportLookup>> = dependent_found
            .iter()
            .chain(found_refs.iter().flatten())
            .cloned()
            .collect();
        if let Ok(mut cache) = self.evals.lock()
            && let Some(c) = cache.get_mut(key)
            && c.parsed.same_spec(parsed)
            && c.used.len() == used.len()
            && c.used.iter().zip(&used).all(|(a, b)| Arc::ptr_eq(a, b))
        {
            // The newest decoding from now on (the older one is let go).
            c.parsed = parsed.clone();
            return (c.eval.clone(), Some(rule));
        }
        let mut eval = new_eval();
        // (reason, message) per problem, in spec order.
        let mut problems: Vec<(&'static str, String)> = Vec::new();
        if let (Some(export), Some(found)) = (&dependent.api_export_name, &dependent_found) {
            // The dependent's export lives in the rule's own workspace.
            let gr = GroupResource::new(&dependent.group, &dependent.resource);
            if let Err((reason, msg)) = found.exporting(&gr, cluster, export) {
                self.reread_if_lacking(reason, found.lc.as_deref(), export)
                    .await;
                problems.push((reason, format!("spec.dependent.apiExportName: {msg}")));
            }
        }
        for (i, (d, found)) in rule.spec.dependencies.iter().zip(&found_refs).enumerate() {
            let (Some(r), Some(found)) = (&d.api_export_ref, found) else {
                problems.push((
                    reasons::INVALID_SPEC,
                    format!("spec.dependencies[{i}].apiExportRef is required on kcp"),
                ));
                continue;
            };
            let gr = GroupResource::new(&d.group, &d.resource);
            let lc = found.lc.clone();
            let info = found.export.as_deref().ok();
            match found.exporting(&gr, &r.path, &r.name) {
                Ok(()) => {
                    if let Some(lc) = &lc {
                        eval.targets
                            .entry(lc.clone())
                            .or_default()
                            .entry(r.name.clone())
                            .or_default()
                            .insert(gr);
                    }
                    eval.note_workspace(&r.path, &r.name, lc, info, None);
                }
                Err((reason, msg)) => {
                    self.reread_if_lacking(reason, lc.as_deref(), &r.name).await;
                    problems.push((
                        reason,
                        format!("spec.dependencies[{i}].apiExportRef: {msg}"),
                    ));
                    eval.note_workspace(&r.path, &r.name, lc, info, Some(msg));
                }
            }
        }
        if let Some((reason, _)) = problems.first() {
            eval.invalid = Some(Invalid {
                reason,
                message: problems
                    .iter()
                    .map(|(_, m)| m.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            });
            eval.targets.clear();
        } else {
            eval.edges = Some(RuleEdges::of(eval.key(), &rule));
        }
        let eval = Arc::new(eval);
        if let Ok(mut cache) = self.evals.lock() {
            if eval.invalid.is_none() {
                cache.insert(
                    key.clone(),
                    CachedEval {
                        parsed: parsed.clone(),
                        used,
                        eval: eval.clone(),
                    },
                );
            } else {
                // A problem found may clear without any answer changing (an
                // export re-read): evaluate it afresh next pass.
                cache.remove(key);
            }
        }
        (eval, Some(rule))
    }

    /// APIExport `name` at `at` (a workspace path, or the rule's own logical
    /// cluster), looked up once per pass; an answer equal to the previous pass's
    /// is that pass's `Arc`.
    async fn lookup(
        &self,
        memo: &mut PassLookups,
        prev: &PassLookups,
        at: &str,
        name: &str,
        kind: Where,
    ) -> Arc<ExportLookup> {
        if let Some(found) = memo.get(kind, at, name) {
            return found.clone();
        }
        let found = self.lookup_now(at, name, kind).await;
        let found = match prev.get(kind, at, name) {
            Some(before) if **before == found => before.clone(),
            _ => Arc::new(found),
        };
        memo.insert(kind, at, name, found.clone());
        found
    }

    async fn lookup_now(&self, at: &str, name: &str, kind: Where) -> ExportLookup {
        let key = (at.to_string(), name.to_string());
        let resolved = match kind {
            Where::Cluster => Ok(at.to_string()),
            Where::Path => self.resolver.resolve(at).await,
        };
        let mut lc = match resolved {
            Ok(lc) => lc,
            Err(e) => {
                let definite = e.is_definite();
                return self.or_last_good(
                    &key,
                    definite,
                    ExportLookup::failed(None, reasons::UNRESOLVED_WORKSPACE, e.to_string()),
                );
            }
        };
        let mut read = self.exports.get(&lc, at, name).await;
        if kind == Where::Path
            && matches!(
                read,
                Err(ExportError::NotFound { .. } | ExportError::Forbidden { .. })
            )
        {
            // The workspace may have been deleted or replaced under the same
            // path: resolve it afresh before believing the answer.
            self.forget_cluster(&lc).await;
            match self.resolver.resolve(at).await {
                Ok(fresh) if fresh != lc => {
                    lc = fresh;
                    read = self.exports.get(&lc, at, name).await;
                }
                Ok(_) => {}
                Err(e) if e.is_definite() => {
                    let gone =
                        ExportLookup::failed(None, reasons::UNRESOLVED_WORKSPACE, e.to_string());
                    return self.or_last_good(&key, true, gone);
                }
                Err(_) => {}
            }
        }
        match read {
            Ok(export) => {
                let found = ExportFound {
                    lc: lc.clone(),
                    export,
                };
                if let Ok(mut g) = self.last_good.lock() {
                    g.insert(key, found.clone());
                }
                ExportLookup {
                    lc: Some(found.lc),
                    export: Ok(found.export),
                }
            }
            Err(e) => {
                let (reason, definite) = match &e {
                    ExportError::NotFound { .. } => (reasons::API_EXPORT_NOT_FOUND, true),
                    ExportError::Forbidden { .. } => (reasons::API_EXPORT_FORBIDDEN, true),
                    ExportError::Failed { .. } => (reasons::API_EXPORT_UNREADABLE, false),
                };
                let message = match kind {
                    Where::Path => format!("{e} (logical cluster {lc})"),
                    Where::Cluster => e.to_string(),
                };
                self.or_last_good(
                    &key,
                    definite,
                    ExportLookup::failed(Some(lc), reason, message),
                )
            }
        }
    }

    /// `failed`, unless it is not definite and an earlier lookup succeeded: then
    /// that answer (a passing failure keeps protection as it was).
    fn or_last_good(
        &self,
        key: &(String, String),
        definite: bool,
        failed: ExportLookup,
    ) -> ExportLookup {
        let mut last = self.last_good.lock().ok();
        if definite {
            if let Some(g) = last.as_mut() {
                g.remove(key);
            }
            return failed;
        }
        match last.as_ref().and_then(|g| g.get(key)) {
            Some(found) => {
                let reason = failed
                    .export
                    .as_ref()
                    .err()
                    .map(|(_, m)| m.clone())
                    .unwrap_or_default();
                tracing::warn!(path = %key.0, export = %key.1, error = %reason, "lookup failed; keeping the last answer");
                ExportLookup {
                    lc: Some(found.lc.clone()),
                    export: Ok(found.export.clone()),
                }
            }
            None => failed,
        }
    }

    /// An export found without a resource is read afresh next pass (the retry
    /// notices the resource added without waiting for the cache to expire).
    async fn reread_if_lacking(&self, reason: &str, lc: Option<&str>, export: &str) {
        if reason == reasons::RESOURCE_NOT_EXPORTED
            && let Some(lc) = lc
        {
            self.exports.forget_export(lc, export).await;
        }
    }

    /// Forgets what is cached for logical cluster `lc` (a read or write there
    /// answered 403 or 404).
    async fn forget_cluster(&self, lc: &str) {
        self.resolver.forget(lc).await;
        self.exports.forget(lc).await;
    }

    /// The policies' spec changes so far (DependencyRules and the other kinds).
    fn spec_changes(&self) -> u64 {
        let of = |s: &Shared<DynamicObject>| s.lock().map_or(0, |s| s.spec_changes);
        of(&self.rules) + self.kinds.iter().map(of).sum::<u64>()
    }

    /// Whether this pass leaves the statuses to the next: a policy changed since
    /// the pass started (counted at `inputs_at_start`), and statuses were written
    /// less than [`STATUS_DEFER_MAX`] ago, so a stream of changes cannot starve them.
    fn defer_statuses(&self, inputs_at_start: u64) -> bool {
        self.spec_changes() != inputs_at_start
            && self
                .statuses_written
                .lock()
                .is_ok_and(|at| at.elapsed() < STATUS_DEFER_MAX)
    }

    /// One pass; returns whether some path is unresolved (to retry soon).
    async fn reconcile_once(&self) -> Result<bool, ReconcileError> {
        let started = std::time::Instant::now();
        let inputs_at_start = self.spec_changes();
        let Evaluated {
            rules,
            fresh,
            removed,
        } = self.evaluate_rules().await?;
        let evaluated = started.elapsed();
        let unresolved = rules.iter().any(|r| {
            r.eval
                .invalid
                .as_ref()
                .is_some_and(|i| RETRIED.contains(&i.reason))
        });
        if fresh {
            // Keep the answers some rule still names (unchanged while every rule
            // kept its evaluation and none was removed).
            let mut named: HashSet<(Where, &str, &str)> = HashSet::new();
            for r in &rules {
                let Some(rule) = &r.rule else { continue };
                if let Some(e) = &rule.spec.dependent.api_export_name {
                    named.insert((Where::Cluster, r.eval.cluster.as_str(), e.as_str()));
                }
                for x in rule.api_export_refs() {
                    named.insert((Where::Path, x.path.as_str(), x.name.as_str()));
                }
            }
            if let Ok(mut l) = self.lookups.lock() {
                l.retain(&named);
            }
            if let Ok(mut g) = self.last_good.lock() {
                g.retain(|k, _| {
                    named.contains(&(Where::Cluster, k.0.as_str(), k.1.as_str()))
                        || named.contains(&(Where::Path, k.0.as_str(), k.1.as_str()))
                });
            }
        }
        let kinds = self.plan();
        let desired = self
            .targets
            .lock()
            .map(|mut t| t.desired(rules.iter().map(|r| &r.eval), &kinds.targets))
            .map_err(|_| ReconcileError::Internal("target cache poisoned".into()))?;
        let planned = started.elapsed();
        let mut installed = self.install(&desired).await;
        // The holdfast workspace's own (CriticalServices guard themselves through
        // it): judged and probed with the others.
        match self.install_home(&kinds).await {
            Ok(Some(cfg)) => {
                if let Some(home) = &kinds.home {
                    installed.configurations.insert(home.clone(), cfg);
                }
            }
            Ok(None) => {}
            Err(e) => installed.errors.push(e),
        }
        if let Some(w) = &self.workspaces {
            let opts = self.options.borrow().clone();
            if let Err(e) = w.ensure(&opts).await {
                installed.errors.push(e);
            }
        }
        let configured = started.elapsed();
        if self.defer_statuses(inputs_at_start) {
            // A policy changed during this pass: the next pass, which starts at
            // once, computes its configuration first and writes every status.
            tracing::debug!("a policy changed during the pass; statuses wait for the next");
            return match installed.errors.is_empty() {
                true => Ok(unresolved),
                false => Err(ReconcileError::Configuration(installed.errors.join("; "))),
            };
        }
        // Statuses judge by what kcp is seen enforcing (a pending workspace is
        // probed again on the short retry).
        let enforced = self
            .enforcement
            .check(&installed.configurations, |lc, name| {
                let home = kinds.home.as_deref() == Some(lc.as_str());
                self.probe(lc, name, home)
            })
            .await;
        let probing = !enforced.pending.is_empty();
        if let Ok(mut at) = self.statuses_written.lock() {
            *at = std::time::Instant::now();
        }
        let writes = self.status_writes(&rules, removed, &installed.configurations, &enforced);
        let mut status_errors = self.write_statuses(writes).await;
        status_errors.extend(
            self.write_kind_statuses(
                &kinds.policies,
                &kinds.objects,
                &installed.configurations,
                &enforced,
                kinds.home.as_deref(),
            )
            .await,
        );
        // Where a pass goes (hack/bench-controller.sh reports the medians).
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        tracing::debug!(
            evaluate_us = us(evaluated),
            plan_us = us(planned.saturating_sub(evaluated)),
            install_us = us(configured.saturating_sub(planned)),
            statuses_us = us(started.elapsed().saturating_sub(configured)),
            "kcp pass phases"
        );
        let mut errors = installed.errors;
        let configuration_failed = !errors.is_empty();
        errors.extend(status_errors);
        match (errors.is_empty(), configuration_failed) {
            (true, _) => Ok(unresolved || probing),
            (false, true) => Err(ReconcileError::Configuration(errors.join("; "))),
            (false, false) => Err(ReconcileError::Status(errors.join("; "))),
        }
    }

    /// Phases 1 and 2: every rule object decoded (cached per resourceVersion)
    /// and evaluated.
    async fn evaluate_rules(&self) -> Result<Evaluated, ReconcileError> {
        let objects = self.rule_objects();
        let (parsed, removed): (Vec<Arc<Parsed>>, bool) = {
            let mut cache = self
                .parsed
                .lock()
                .map_err(|_| ReconcileError::Internal("parse cache poisoned".into()))?;
            let parsed: Vec<Arc<Parsed>> = objects
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
                .collect();
            // Every rule has its entry now: more entries than rules means some
            // rule was removed, whose entries go (only then, not every pass).
            let removed = cache.len() > objects.len();
            if removed {
                let keep: HashSet<&(String, String)> =
                    objects.iter().map(|(k, _)| k.as_ref()).collect();
                cache.retain(|k, _| keep.contains(k.as_ref()));
                if let Ok(mut evals) = self.evals.lock() {
                    evals.retain(|k, _| keep.contains(k.as_ref()));
                }
            }
            (parsed, removed)
        };
        let prev = self
            .lookups
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        let mut memo = PassLookups::default();
        // The previous pass's answers, asked again first: while every one is the
        // same, a rule whose object is unchanged keeps its evaluation without
        // asking for its answers one by one (the same result `evaluate` reaches).
        let mut answers_same = true;
        for (kind, at, name) in prev.keys() {
            let found = self.lookup(&mut memo, &prev, at, name, kind).await;
            answers_same &= prev
                .get(kind, at, name)
                .is_some_and(|before| Arc::ptr_eq(before, &found));
        }
        // The evaluations kept, found under one lock (the fresh ones are awaited).
        let kept: Vec<Option<Arc<RuleEval>>> = match (answers_same, self.evals.lock()) {
            (true, Ok(mut cache)) => objects
                .iter()
                .zip(&parsed)
                .map(|((key, _), parsed)| {
                    let c = cache.get_mut(key).filter(|c| c.parsed.same_spec(parsed))?;
                    // The newest decoding from now on (the older one is let go).
                    c.parsed = parsed.clone();
                    Some(c.eval.clone())
                })
                .collect(),
            _ => vec![None; objects.len()],
        };
        let mut fresh = removed;
        let mut rules = Vec::with_capacity(objects.len());
        for (((key, obj), parsed), kept) in objects.into_iter().zip(parsed).zip(kept) {
            let (eval, rule) = match kept {
                Some(eval) => (eval, parsed.rule.as_ref().ok().cloned()),
                None => {
                    fresh = true;
                    self.evaluate(&key, &parsed, &mut memo, &prev).await
                }
            };
            rules.push(RuleState {
                obj,
                parsed,
                eval,
                rule,
            });
        }
        if let Ok(mut l) = self.lookups.lock() {
            *l = memo;
        }
        Ok(Evaluated {
            rules,
            fresh,
            removed,
        })
    }

    /// The configuration `holdfast` of holdfast's own workspace. kcp admits the
    /// DELETE of an object of a type bound from holdfast.dev through the
    /// configurations of holdfast's workspace only (kcp-facts 12), so this one
    /// routes DELETEs of `criticalservices.holdfast.dev` to the webhook's export
    /// route while some valid CriticalService exists: a CriticalService cannot be
    /// deleted while its provider exists. Removed when none is left. Written with
    /// the controller's own identity in its workspace (the shipped RBAC grants
    /// exactly that configuration); while a write is refused the rest of the pass
    /// goes on, and it is said once (a refused read, by the watch).
    async fn install_home(
        &self,
        kinds: &PlannedKinds,
    ) -> Result<Option<Arc<ValidatingWebhookConfiguration>>, String> {
        let Some(home) = kinds.home.as_deref() else {
            return Ok(None);
        };
        let critical = kinds
            .policies
            .iter()
            .any(|e| e.kind == crate::kcp_kinds::CRITICAL_SERVICE && e.invalid.is_none());
        // holdfast's own objects in the workspaces binding holdfast (a policy carrying
        // the protection label) are admitted through this workspace's configurations
        // only (kcp-facts 12): their label protection lives here.
        let binders = kinds.targets.values().any(|t| t.binds);
        let needed = critical || binders;
        // Until its watch has listed (its failures, a 403 included, are logged by
        // the watch itself).
        if !self.home_hooks.synced() {
            return Ok(None);
        }
        let live = self
            .home_hooks
            .state()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(WEBHOOK_CONFIGURATION_NAME));
        let want = match needed {
            true => {
                let opts = self.options.borrow().clone();
                let export = &self.settings.api_export;
                let mut target = WorkspaceTarget::default();
                if critical {
                    target.exports.insert(
                        export.clone(),
                        [GroupResource::new(
                            holdfast_shared::names::API_GROUP,
                            "criticalservices",
                        )]
                        .into(),
                    );
                }
                if binders {
                    target
                        .label_exports
                        .insert(export.clone(), crate::kcp_kinds::own_resources());
                }
                workspace_configuration(
                    home,
                    &self.settings.labels,
                    self.settings.strict,
                    &target,
                    &opts,
                )
            }
            false => None,
        };
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.home.clone());
        let done: Result<Option<Arc<ValidatingWebhookConfiguration>>, kube::Error> = match (
            want, live,
        ) {
            (Some(want), Some(live)) if matches_desired(&live, &want) => Ok(Some(live)),
            (Some(want), _) => {
                tracing::info!(workspace = %home, "installing ValidatingWebhookConfiguration holdfast in the holdfast workspace (label protection of holdfast's own objects; CriticalServices guard themselves)");
                let mut body = serde_json::to_value(&want).map_err(|e| e.to_string())?;
                body["apiVersion"] = "admissionregistration.k8s.io/v1".into();
                body["kind"] = "ValidatingWebhookConfiguration".into();
                api.patch(
                    WEBHOOK_CONFIGURATION_NAME,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await
                .map(|c| Some(Arc::new(c)))
            }
            // Only holdfast's own: the watch sees nothing else.
            (None, Some(_)) => {
                tracing::info!(workspace = %home, "no workspace binds holdfast: deleting ValidatingWebhookConfiguration holdfast in the holdfast workspace");
                match api
                    .delete(WEBHOOK_CONFIGURATION_NAME, &Default::default())
                    .await
                {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                    other => other.map(|_| None),
                }
            }
            (None, _) => Ok(None),
        };
        match done {
            Ok(cfg) => {
                self.home_warned.store(false, Ordering::Relaxed);
                Ok(cfg)
            }
            Err(kube::Error::Api(s)) if s.code == 403 => {
                if !self.home_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(workspace = %home, error = %s.message, "may not write ValidatingWebhookConfiguration holdfast in the holdfast workspace (its RBAC must grant the controller create, update, patch and delete of it): CriticalServices cannot guard themselves until it may");
                }
                Ok(None)
            }
            Err(e) => Err(format!("holdfast workspace {home}: {e}")),
        }
    }

    /// Phase 4: makes the installed configurations what `desired` says:
    /// creates or updates those that differ, deletes those no rule targets.
    async fn install(&self, desired: &BTreeMap<String, Arc<WorkspaceTarget>>) -> Installed {
        let opts = Arc::new(self.options.borrow().clone());
        let live = self.live_configurations();
        let mut installed = Installed {
            configurations: BTreeMap::new(),
            errors: Vec::new(),
        };
        let mut to_apply = Vec::new();
        for (lc, target) in desired {
            let live_rv = live
                .get(lc)
                .and_then(|l| l.metadata.resource_version.as_deref())
                .unwrap_or_default();
            // The desired configuration is a function of (cluster, target,
            // options): the same inputs matched this live object before.
            let known_match = self.matched.lock().ok().is_some_and(|m| {
                m.get(lc).is_some_and(|(rv, t, o)| {
                    !live_rv.is_empty()
                        && rv == live_rv
                        && (Arc::ptr_eq(t, target) || t == target)
                        && (Arc::ptr_eq(o, &opts) || **o == *opts)
                })
            });
            if known_match && let Some(l) = live.get(lc) {
                installed.configurations.insert(lc.clone(), l.clone());
                continue;
            }
            let Some(want) = workspace_configuration(
                lc,
                &self.settings.labels,
                self.settings.strict,
                target,
                &opts,
            ) else {
                continue;
            };
            match live.get(lc) {
                Some(l) if matches_desired(l, &want) => {
                    if let Ok(mut m) = self.matched.lock() {
                        m.insert(
                            lc.clone(),
                            (live_rv.to_string(), target.clone(), opts.clone()),
                        );
                    }
                    installed.configurations.insert(lc.clone(), l.clone());
                }
                other => {
                    tracing::info!(
                        cluster = %lc,
                        binds = target.binds,
                        exports = target.exports.len(),
                        rules = target.rules.len(),
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
                    installed.configurations.insert(lc, Arc::new(cfg));
                }
                Err(e) => {
                    if gone_or_forbidden(&e) {
                        // The workspace may be gone or replaced: resolve again.
                        self.forget_cluster(&lc).await;
                    }
                    installed.errors.push(format!("{lc}: {e:#}"));
                }
            }
        }
        // A configuration holdfast may no longer delete is not asked again every
        // pass (until the workspace needs one again, or the controller restarts).
        let abandoned: BTreeSet<String> =
            self.abandoned.lock().map(|a| a.clone()).unwrap_or_default();
        let stale: Vec<String> = live
            .keys()
            .filter(|lc| !desired.contains_key(*lc) && !abandoned.contains(*lc))
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
        let mut abandoned = self.abandoned.lock().ok();
        if let Some(a) = abandoned.as_mut() {
            a.retain(|lc| !desired.contains_key(lc));
        }
        for (lc, r) in deleted {
            match r {
                // The workspace no longer binds holdfast (or is gone): holdfast's
                // access ended with the binding; the configuration is its owner's
                // to delete. Said once, not retried as a failure.
                Err(e) if gone_or_forbidden(&e) => {
                    if abandoned.as_mut().is_some_and(|a| a.insert(lc.clone())) {
                        tracing::warn!(cluster = %lc, error = %format!("{e:#}"), "holdfast may no longer delete ValidatingWebhookConfiguration holdfast there (the workspace no longer binds holdfast with its claims accepted); its owner may delete it");
                    }
                }
                Err(e) => installed.errors.push(format!("{lc}: {e:#}")),
                Ok(()) => {}
            }
        }
        installed
    }

    /// The policies of [`crate::kcp_kinds::kinds`] planned over the APIBindings
    /// (from the watches: no API read), and their objects (flattened in the
    /// plan's order). The last plan is reused while none of those objects changed
    /// (a plan is a function of them and of holdfast's own logical cluster).
    fn plan(&self) -> Arc<PlannedKinds> {
        use crate::kcp_kinds::{Bindings, export_cluster_of, plan};
        let export = &self.settings.api_export;
        // holdfast's own logical cluster, from the URLs of its slice.
        let home = self
            .binding_endpoints
            .urls()
            .iter()
            .chain(self.rule_endpoints.urls().iter())
            .find_map(|u| export_cluster_of(u, export));
        let version = |s: &Shared<DynamicObject>| s.lock().map_or(u64::MAX, |s| s.version);
        let versions = [
            version(&self.kinds[0]),
            version(&self.kinds[1]),
            version(&self.kinds[2]),
            version(&self.bindings),
        ];
        let last = self.planned.lock().ok().and_then(|p| p.clone());
        if let Some(last) = &last
            && last.versions == versions
            && !versions.contains(&u64::MAX)
            && last.home == home
        {
            return last.clone();
        }
        let snapshot = |s: &Shared<DynamicObject>| {
            s.lock()
                .map(|s| (s.snapshot(), s.version))
                .unwrap_or((Vec::new(), u64::MAX))
        };
        let [(o0, v0), (o1, v1), (o2, v2)] = self.kinds.each_ref().map(snapshot);
        let (bindings, vb) = snapshot(&self.bindings);
        let objects = [o0, o1, o2];
        let bindings = Bindings::of(
            bindings.iter().map(|(k, b)| (k.0.as_str(), b.as_ref())),
            home.as_deref(),
            export,
        );
        // Decoding and checking reused per object while its resourceVersion holds.
        let decoded = Mutex::new(
            self.decoded
                .lock()
                .map(|mut c| std::mem::take(&mut *c))
                .unwrap_or_default(),
        );
        let next = Mutex::new(HashMap::new());
        let decode = |kind: usize, obj: &Arc<DynamicObject>| {
            let key = (kind, cluster_of(obj.as_ref()), obj.name_any());
            let rv = obj.metadata.resource_version.clone().unwrap_or_default();
            let known = decoded
                .lock()
                .ok()
                .and_then(|mut c| c.remove(&key))
                .filter(|(was, _)| *was == rv && !rv.is_empty());
            let d = match known {
                Some((_, d)) => d,
                None => Arc::new(crate::kcp_kinds::decode_policy(kind, obj)),
            };
            if let Ok(mut n) = next.lock() {
                n.insert(key, (rv, d.clone()));
            }
            d
        };
        let planned = plan(&objects, &decode, &bindings, export);
        if let (Ok(mut c), Ok(n)) = (self.decoded.lock(), next.into_inner()) {
            *c = n;
        }
        // A workspace's part equal to the last plan's is that plan's `Arc`, so the
        // merged targets of unchanged workspaces are reused (see [`Targets`]).
        let targets = planned
            .targets
            .into_iter()
            .map(|(lc, t)| {
                let t = match last.as_ref().and_then(|l| l.targets.get(&lc)) {
                    Some(before) if **before == t => before.clone(),
                    _ => Arc::new(t),
                };
                (lc, t)
            })
            .collect();
        let planned = Arc::new(PlannedKinds {
            versions: [v0, v1, v2, vb],
            home,
            targets,
            policies: planned.policies,
            objects: objects.into_iter().flatten().map(|(_, obj)| obj).collect(),
        });
        if let Ok(mut p) = self.planned.lock() {
            *p = Some(planned.clone());
        }
        planned
    }

    /// Writes the status of every policy of [`crate::kcp_kinds::kinds`] whose
    /// conditions differ from what it has; returns what failed.
    async fn write_kind_statuses(
        &self,
        policies: &[crate::kcp_kinds::PolicyEval],
        objects: &[Arc<DynamicObject>],
        installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
        enforced: &Enforced,
        home: Option<&str>,
    ) -> Vec<String> {
        let now = now_rfc3339();
        let guard = home.map(|h| crate::kcp_kinds::HomeGuard {
            cluster: h,
            export: &self.settings.api_export,
        });
        let kinds = crate::kcp_kinds::kinds();
        let writes = {
            let mut writes = Vec::new();
            let mut seen = self.kind_statuses.lock().ok();
            let mut next = HashMap::with_capacity(policies.len());
            for (e, obj) in policies.iter().zip(objects) {
                let key = (e.kind, e.cluster.clone(), e.name.clone());
                // What the status is a function of: the object, its evaluation and the
                // configurations (by resourceVersion) it is routed through.
                let inputs = KindStatusInputs {
                    rv: obj.metadata.resource_version.clone().unwrap_or_default(),
                    eval: e.clone(),
                    installed: std::iter::once(e.cluster.as_str())
                        .chain(e.exported.iter().map(|(_, lc, _)| lc.as_str()))
                        .chain(
                            guard
                                .filter(|_| e.kind == crate::kcp_kinds::CRITICAL_SERVICE)
                                .map(|g| g.cluster),
                        )
                        .map(|lc| {
                            enforced
                                .effective
                                .get(lc)
                                .and_then(|c| c.metadata.resource_version.clone())
                        })
                        .collect(),
                };
                let before = seen.as_mut().and_then(|s| s.remove(&key));
                if !inputs.rv.is_empty() && before.as_ref() == Some(&inputs) {
                    next.insert(key, inputs);
                    continue;
                }
                let outcome = crate::kcp_kinds::outcome(e, installed, enforced, guard);
                let current = crate::kubernetes::current_status(obj);
                match desired_status(
                    obj.metadata.generation,
                    current.observed_generation,
                    &current.conditions,
                    &outcome,
                    &now,
                ) {
                    Some(status) => {
                        let event = crate::status::newly_invalid(&current.conditions, &outcome)
                            .map(|(reason, message)| (reason, message.to_string()));
                        writes.push(KindStatusWrite {
                            kind: e.kind,
                            cluster: e.cluster.clone(),
                            obj: obj.clone(),
                            status,
                            event,
                        })
                    }
                    None => {
                        next.insert(key, inputs);
                    }
                }
            }
            if let Some(s) = seen.as_mut() {
                **s = next;
            }
            writes
        };
        let kinds = &kinds;
        futures::stream::iter(writes)
            .map(|w: KindStatusWrite| async move {
                let ar = &kinds[w.kind];
                let body = Patch::Merge(json!({ "status": w.status }));
                let (name, body) = (&w.obj.name_any(), &body);
                let cluster = &w.cluster;
                let written = self
                    .on_shard(cluster, |client| async move {
                        Api::<DynamicObject>::all_with(client, ar)
                            .patch_status(name, &PatchParams::default(), body)
                            .await
                            .map(|_| true)
                    })
                    .await;
                // A 404 from the most likely endpoint: the object is gone already.
                let written = match written {
                    Err(e)
                        if e.downcast_ref::<kube::Error>()
                            .and_then(holdfast_shared::kcp::status_of)
                            == Some(404) =>
                    {
                        Ok(false)
                    }
                    other => other,
                }
                .map_err(|err| {
                    anyhow::anyhow!("status of {} {cluster}/{name}: {err:#}", ar.kind)
                })?;
                if let (true, Some((reason, message))) = (written, &w.event) {
                    self.warn(cluster, &w.obj.object_ref(ar), reason, "Validate", message)
                        .await;
                }
                Ok::<(), anyhow::Error>(())
            })
            .buffer_unordered(CONCURRENCY)
            .filter_map(|r| futures::future::ready(r.err().map(|e| format!("{e:#}"))))
            .collect()
            .await
    }

    /// Phase 6: writes the statuses; returns what failed. A status found up to
    /// date is remembered with its inputs (see [`StatusInputs`]).
    async fn write_statuses(&self, writes: Vec<StatusWrite>) -> Vec<String> {
        let now = now_rfc3339();
        let now = &now;
        let results: Vec<(String, Result<Option<StatusInputs>, String>)> =
            futures::stream::iter(writes)
                .map(|mut w| async move {
                    let r = match self.write_status(&w, now).await {
                        Ok(false) => Ok(w.inputs.take()),
                        Ok(true) => Ok(None),
                        Err(err) => Err(format!("status of {}: {err:#}", w.key)),
                    };
                    (w.key, r)
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        let mut errors = Vec::new();
        let mut seen = self.statuses.lock().ok();
        for (key, r) in results {
            match r {
                Ok(Some(inputs)) => {
                    if let Some(s) = seen.as_mut() {
                        s.insert(key, inputs);
                    }
                }
                Ok(None) => {
                    if let Some(s) = seen.as_mut() {
                        s.remove(&key);
                    }
                }
                Err(e) => {
                    if let Some(s) = seen.as_mut() {
                        s.remove(&key);
                    }
                    errors.push(e);
                }
            }
        }
        errors
    }

    /// Writes one rule's status if it differs; returns whether it wrote.
    async fn write_status(&self, w: &StatusWrite, now: &str) -> anyhow::Result<bool> {
        let current = &w.parsed.status;
        let ws_same = w.parsed.workspaces == json!(w.workspaces);
        let generation = w.obj.metadata.generation;
        let status = desired_status(
            generation,
            current.observed_generation,
            &current.conditions,
            &w.outcome,
            now,
        );
        let mut status = match (status, ws_same) {
            (None, true) => return Ok(false),
            (Some(s), _) => s,
            (None, false) => {
                let mut s = json!({"conditions": serde_json::to_value(&current.conditions)?});
                if let Some(g) = generation {
                    s["observedGeneration"] = json!(g);
                }
                s
            }
        };
        status["workspaces"] = json!(w.workspaces);
        let ar = ApiResource::erase::<DependencyRule>(&());
        let api: Api<DynamicObject> = Api::all_with(self.vw_client(&w.cluster)?, &ar);
        ignore_not_found(
            api.patch_status(
                &w.obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await,
        )?;
        let reference = w.obj.object_ref(&ar);
        if let Some(cycle) = &w.outcome.cycle
            && !holdfast_shared::api::is_condition_true(
                &current.conditions,
                holdfast_shared::api::condition_types::CYCLE_DETECTED,
            )
        {
            self.warn(
                &w.cluster,
                &reference,
                "CycleDetected",
                "DetectCycle",
                cycle,
            )
            .await;
        }
        if let Some((reason, message)) =
            crate::status::newly_invalid(&current.conditions, &w.outcome)
        {
            self.warn(&w.cluster, &reference, reason, "Validate", message)
                .await;
        }
        Ok(true)
    }

    /// The enforcement probe in logical cluster `cluster`: a server-side dry-run
    /// CREATE of the Event `name` (holdfast.dev claims Events), through the
    /// endpoint of its shard (see [`holdfast_shared::enforcement`]).
    async fn probe(&self, cluster: String, name: String, home: bool) -> ProbeAnswer {
        use holdfast_shared::enforcement::{NAMESPACE, answered_by_probe};
        use k8s_openapi::api::core::v1::{Event, ObjectReference};
        let event = Event {
            metadata: kube::api::ObjectMeta {
                name: Some(name),
                namespace: Some(NAMESPACE.to_string()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Namespace".to_string()),
                name: Some(NAMESPACE.to_string()),
                ..Default::default()
            },
            reason: Some("EnforcementProbe".to_string()),
            message: Some("never created: a server-side dry run".to_string()),
            type_: Some("Normal".to_string()),
            ..Default::default()
        };
        let event = &event;
        let params = &kube::api::PostParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.to_string()),
        };
        let send = |client: Client| async move {
            let api: Api<Event> = Api::namespaced(client, NAMESPACE);
            match api.create(params, event).await {
                Ok(_) => Ok(ProbeAnswer::NotYet(
                    "the dry run was admitted without calling the probe webhook".to_string(),
                )),
                Err(kube::Error::Api(s)) if answered_by_probe(&s.message) => {
                    Ok(ProbeAnswer::Enforced)
                }
                Err(e) => Err(e),
            }
        };
        // The holdfast workspace is the controller's own (its RBAC there, not a
        // claim); every other one through the endpoint of its shard.
        let answer = match home {
            true => send(self.home.clone()).await.map_err(anyhow::Error::from),
            false => self.on_shard(&cluster, send).await,
        };
        answer.unwrap_or_else(|e| {
            let forbidden = matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 403);
            ProbeAnswer::NotYet(match forbidden {
                true if home => format!(
                    "holdfast may not create (even dry-run) Events in namespace {NAMESPACE} of the holdfast workspace, so it cannot see whether kcp enforces the configuration there: grant it (manifests/overlays/kcp/workspace/holdfast): {e:#}"
                ),
                true => format!(
                    "holdfast may not create (even dry-run) Events here, so it cannot see whether kcp enforces the configuration: the workspace's APIBinding to {} must accept the claim on core events (group \"\", verbs create, patch; docs/kcp.md): {e:#}",
                    self.settings.api_export
                ),
                false => format!("the probe failed: {e:#}"),
            })
        })
    }

    /// A Warning Event about `reference` (a policy) in logical cluster `cluster`,
    /// written through the endpoint of its shard (holdfast.dev claims Events), as
    /// on Kubernetes; a failure is logged, never a failure of the pass.
    async fn warn(
        &self,
        cluster: &str,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        use kube::runtime::events::{Recorder, Reporter};
        let ev = &crate::status::warning_event(reason, action, note);
        let published = self
            .on_shard(cluster, |client| async move {
                let reporter = Reporter {
                    controller: crate::status::EVENT_REPORTER.into(),
                    instance: None,
                };
                Recorder::new(client, reporter).publish(ev, reference).await
            })
            .await;
        if let Err(e) = published {
            tracing::warn!(cluster, reason, error = %format!("{e:#}"), "emitting event failed");
        }
    }

    async fn apply_in(
        &self,
        cluster: &str,
        desired: &ValidatingWebhookConfiguration,
    ) -> anyhow::Result<ValidatingWebhookConfiguration> {
        let mut body = serde_json::to_value(desired)?;
        body["apiVersion"] = "admissionregistration.k8s.io/v1".into();
        body["kind"] = "ValidatingWebhookConfiguration".into();
        let body = &body;
        self.on_shard(cluster, |client| async move {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
            let applied = api
                .patch(
                    WEBHOOK_CONFIGURATION_NAME,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await?;
            if matches_desired(&applied, desired) {
                return Ok(applied);
            }
            let mut replacement = desired.clone();
            replacement.metadata.resource_version = applied.metadata.resource_version.clone();
            api.replace(
                WEBHOOK_CONFIGURATION_NAME,
                &Default::default(),
                &replacement,
            )
            .await
        })
        .await
    }

    async fn delete_in(&self, cluster: &str) -> anyhow::Result<()> {
        let deleted = self
            .on_shard(cluster, |client| async move {
                let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
                api.delete(WEBHOOK_CONFIGURATION_NAME, &DeleteParams::default())
                    .await
                    .map(|_| ())
            })
            .await;
        // A 404 from the most likely endpoint (the one that saw it): gone already.
        match deleted {
            Err(e) if matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 404) => {
                Ok(())
            }
            other => other,
        }
    }
}

impl Drop for Reconciler {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Runs `op` on each `(endpoint, client)` in turn while it answers 403 or 404 (a
/// virtual workspace serves only its shard's clusters: "not this shard"); returns the
/// endpoint that answered and the result, or the error: any other at once, else the
/// first candidate's (the most likely shard's), `None` without candidates.
async fn in_turn<C, T, F, Fut>(
    candidates: Vec<(String, C)>,
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
}

impl Targets {
    /// Every workspace's target from the evaluations of the rules (in rule order)
    /// and the plan's parts.
    fn desired<'a>(
        &mut self,
        evals: impl Iterator<Item = &'a Arc<RuleEval>>,
        planned: &BTreeMap<String, Arc<WorkspaceTarget>>,
    ) -> BTreeMap<String, Arc<WorkspaceTarget>> {
        let mut by_lc: BTreeMap<&str, Vec<&Arc<RuleEval>>> = BTreeMap::new();
        for e in evals {
            for lc in e.targets.keys() {
                by_lc.entry(lc.as_str()).or_default().push(e);
            }
        }
        let mut next = HashMap::with_capacity(by_lc.len().max(planned.len()));
        let mut desired = BTreeMap::new();
        let lcs: BTreeSet<&str> = by_lc
            .keys()
            .copied()
            .chain(planned.keys().map(String::as_str))
            .collect();
        for lc in lcs {
            let evals = by_lc.get(lc).map(Vec::as_slice).unwrap_or_default();
            let plan_part = planned.get(lc);
            let target = match self.by_lc.remove(lc) {
                Some(b) if b.built_from(evals, plan_part) => b,
                _ => CachedTarget {
                    evals: evals.iter().map(|e| Arc::clone(e)).collect(),
                    plan_part: plan_part.cloned(),
                    target: Arc::new(rules_target(lc, evals, plan_part.map(|p| (**p).clone()))),
                },
            };
            desired.insert(lc.to_string(), target.target.clone());
            next.insert(lc.to_string(), target);
        }
        self.by_lc = next;
        desired
    }
}

impl CachedTarget {
    /// Whether this target was built from these evaluations and plan part.
    fn built_from(
        &self,
        evals: &[&Arc<RuleEval>],
        plan_part: Option<&Arc<WorkspaceTarget>>,
    ) -> bool {
        self.evals.len() == evals.len()
            && self.evals.iter().zip(evals).all(|(a, b)| Arc::ptr_eq(a, b))
            && match (&self.plan_part, plan_part) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

/// Workspace `lc`'s target: what the rules `evals` route to it, joined with the
/// other kinds' plan for it.
fn rules_target(
    lc: &str,
    evals: &[&Arc<RuleEval>],
    plan_part: Option<WorkspaceTarget>,
) -> WorkspaceTarget {
    let mut target = WorkspaceTarget::default();
    for e in evals {
        if let Some(exports) = e.targets.get(lc) {
            for (export, grs) in exports {
                let routed = target.exports.entry(export.clone()).or_default();
                routed.extend(grs.iter().cloned());
            }
        }
        target.rules.insert(e.key().to_string());
    }
    if let Some(p) = plan_part {
        target.absorb(p);
    }
    target
}

/// The logical clusters whose configurations a rule's status reads.
fn status_clusters(e: &RuleEval) -> impl Iterator<Item = &String> {
    e.targets.keys().chain(
        e.workspaces
            .iter()
            .filter_map(|w| w.logical_cluster.as_ref()),
    )
}

/// What a rule's status depends on besides its evaluation: the installed
/// configuration (by resourceVersion) of every logical cluster it names; `None`
/// when one has no resourceVersion (not comparable).
fn installed_inputs(
    e: &RuleEval,
    installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
) -> Option<Vec<Option<String>>> {
    let mut out = Vec::new();
    for lc in status_clusters(e) {
        out.push(match installed.get(lc) {
            Some(c) => Some(c.metadata.resource_version.clone()?),
            None => None,
        });
    }
    Some(out)
}

impl Reconciler {
    /// Phase 5: each rule's outcome over what is installed (cycles over resource
    /// types are found across all workspaces). A rule whose status was found up
    /// to date with the same inputs needs no write and is left out.
    fn status_writes(
        &self,
        rules: &[RuleState],
        removed: bool,
        installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
        enforced: &Enforced,
    ) -> Vec<StatusWrite> {
        // Built with each evaluation (so reused with it).
        let edges: Vec<&RuleEdges> = rules.iter().filter_map(|r| r.eval.edges.as_ref()).collect();
        let cycles = find_cycles(&edges);
        // What kcp enforces decides (a configuration installed but not yet
        // enforced changes the status when it is).
        let rvs = installed_rvs(&enforced.effective);
        let mut seen = self.statuses.lock().ok();
        if removed && let Some(s) = seen.as_mut() {
            let keep: HashSet<&str> = rules.iter().map(|r| r.eval.key()).collect();
            s.retain(|k, _| keep.contains(k.as_str()));
        }
        let mut writes = Vec::new();
        for r in rules {
            let e = &r.eval;
            let cycle = cycles.get(e.key()).map(|c| c.message());
            if seen.as_ref().is_some_and(|s| {
                s.get(e.key())
                    .is_some_and(|before| before.hold_for(r, &rvs, cycle.as_deref()))
            }) {
                continue;
            }
            let inputs = installed_inputs(e, &enforced.effective).map(|installed| StatusInputs {
                eval: r.eval.clone(),
                parsed: r.parsed.clone(),
                installed,
                cycle: cycle.clone(),
            });
            writes.push(status_write(r, installed, enforced, cycle, inputs));
        }
        writes
    }
}

/// One rule's outcome and status workspaces over what is installed.
fn status_write(
    r: &RuleState,
    installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    enforced: &Enforced,
    cycle: Option<String>,
    inputs: Option<StatusInputs>,
) -> StatusWrite {
    let e = &r.eval;
    let mut ok = true;
    let mut missing = Vec::new();
    let mut waiting = Vec::new();
    let mut pending = BTreeMap::new();
    for (lc, exports) in &e.targets {
        for (export, grs) in exports {
            let hook = export_policies_webhook(export);
            let routed_by = |configs: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
                             gr: &GroupResource| {
                configs
                    .get(lc)
                    .is_some_and(|c| routes(c, &hook, "DELETE", gr))
            };
            for gr in grs {
                if routed_by(&enforced.effective, gr) {
                    continue;
                }
                let what = format!("{gr} of APIExport {export} in {lc}");
                if routed_by(installed, gr) {
                    waiting.push(what);
                    if let Some(why) = enforced.pending.get(lc) {
                        pending.insert(lc.clone(), why.clone());
                    }
                } else {
                    ok = false;
                    missing.push(what);
                }
            }
        }
    }
    let key = e.key().to_string();
    let outcome = Outcome {
        invalid: e.invalid.clone(),
        installed: ok && e.invalid.is_none(),
        installed_message: if ok {
            format!(
                "DELETEs of the dependencies reach webhook(s) {} in {} provider workspace(s)",
                e.targets
                    .values()
                    .flat_map(|x| x.keys())
                    .map(|x| export_policies_webhook(x))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect::<Vec<_>>()
                    .join(", "),
                e.targets.len()
            )
        } else {
            format!("not yet installed: {}", missing.join(", "))
        },
        cycle,
        cycle_applies: true,
        source: None,
        not_admitted: None,
        blocked: None,
        not_enforced: (!waiting.is_empty()).then(|| not_enforced_message(&waiting, &pending)),
    };
    let workspaces: Vec<serde_json::Value> = e
        .workspaces
        .iter()
        .map(|w| {
            let mut v = json!({
                "path": w.path,
                "name": w.export,
                "webhookInstalled": w.logical_cluster.as_ref().is_some_and(|lc| installed.contains_key(lc)),
            });
            if let Some(lc) = &w.logical_cluster {
                v["logicalCluster"] = json!(lc);
            }
            if let Some(h) = &w.identity_hash {
                v["identityHash"] = json!(h);
            }
            if let Some(shared) = &w.shared_resources {
                v["sharedResources"] = json!(shared);
            }
            if let Some(m) = &w.message {
                v["message"] = json!(m);
            }
            v
        })
        .collect();
    if let Some(c) = &outcome.cycle
        && !holdfast_shared::api::is_condition_true(
            &r.parsed.status.conditions,
            holdfast_shared::api::condition_types::CYCLE_DETECTED,
        )
    {
        tracing::warn!(rule = %key, "{c}");
    }
    StatusWrite {
        key,
        cluster: e.cluster.clone(),
        obj: r.obj.clone(),
        parsed: r.parsed.clone(),
        outcome,
        workspaces,
        inputs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_spec_changes_count() {
        let rule = |uid: &str, generation: i64, status: &str| {
            let mut o = DynamicObject::new(
                "r",
                &ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
            );
            o.metadata.uid = Some(uid.to_string());
            o.metadata.generation = Some(generation);
            o.metadata.resource_version = Some(status.to_string());
            o.data = serde_json::json!({"status": status});
            o
        };
        let mut store = ClusterStore::<DynamicObject>::default();
        store.reset(vec![rule("u1", 1, "a")]);
        assert_eq!(store.spec_changes, 1, "a list");
        store.apply(rule("u1", 1, "b"));
        assert_eq!(store.spec_changes, 1, "a status write is no spec change");
        store.apply(rule("u1", 2, "b"));
        assert_eq!(store.spec_changes, 2, "a new generation");
        store.apply(rule("u2", 1, "b"));
        assert_eq!(
            store.spec_changes, 3,
            "deleted and created again under the name"
        );
        store.delete(rule("u2", 1, "b"));
        assert_eq!(store.spec_changes, 4, "deleted");
        store.delete(rule("u2", 1, "b"));
        assert_eq!(store.spec_changes, 4, "a delete of what is not there");
        // Every change moves the version (a pass reuses its plan while it holds),
        // a status write too.
        assert_eq!(store.version, 5);
        store.apply(rule("u1", 2, "c"));
        assert_eq!(store.version, 6, "a status write");
        let key = store.snapshot()[0].0.clone();
        store.apply(rule("u1", 2, "d"));
        assert!(
            Arc::ptr_eq(&key, &store.snapshot()[0].0),
            "a replaced object keeps its key"
        );
    }

    #[test]
    fn a_status_write_keeps_the_spec_a_new_generation_does_not() {
        let obj = |uid: Option<&str>, generation: Option<i64>, rv: &str| {
            let mut o = DynamicObject::new("r", &ApiResource::erase::<DependencyRule>(&()));
            o.metadata.uid = uid.map(str::to_string);
            o.metadata.generation = generation;
            o.metadata.resource_version = Some(rv.to_string());
            o.data = serde_json::json!({"spec": {}, "status": {"conditions": []}});
            Arc::new(Parsed::of(&o))
        };
        let first = obj(Some("u1"), Some(1), "10");
        assert!(first.same_spec(&first), "the same decoding");
        assert!(
            first.same_spec(&obj(Some("u1"), Some(1), "11")),
            "a status write: the same object at the same generation"
        );
        assert!(
            !first.same_spec(&obj(Some("u1"), Some(2), "12")),
            "a spec change"
        );
        assert!(
            !first.same_spec(&obj(Some("u2"), Some(1), "13")),
            "deleted and created again under the name"
        );
        let unknown = obj(None, None, "14");
        assert!(unknown.same_spec(&unknown));
        assert!(
            !unknown.same_spec(&obj(None, None, "14")),
            "without uid and generation only the same decoding counts"
        );
    }

    fn target_eval(key: &str, to: &[(&str, &str, &str)]) -> Arc<RuleEval> {
        let mut targets: BTreeMap<String, ExportTargets> = BTreeMap::new();
        for (lc, export, resource) in to {
            targets
                .entry(lc.to_string())
                .or_default()
                .entry(export.to_string())
                .or_default()
                .insert(GroupResource::new("p.test", *resource));
        }
        Arc::new(RuleEval {
            cluster: "c".into(),
            key: key.into(),
            invalid: None,
            workspaces: Vec::new(),
            targets,
            edges: None,
        })
    }

    /// The targets built from scratch: what [`Targets`] must equal on every pass.
    fn targets_from_scratch(
        evals: &[Arc<RuleEval>],
        planned: &BTreeMap<String, Arc<WorkspaceTarget>>,
    ) -> BTreeMap<String, WorkspaceTarget> {
        let mut out: BTreeMap<String, WorkspaceTarget> = BTreeMap::new();
        for e in evals {
            for (lc, exports) in &e.targets {
                let t = out.entry(lc.clone()).or_default();
                for (export, grs) in exports {
                    t.exports
                        .entry(export.clone())
                        .or_default()
                        .extend(grs.iter().cloned());
                }
                t.rules.insert(e.key.clone());
            }
        }
        for (lc, p) in planned {
            out.entry(lc.clone()).or_default().absorb((**p).clone());
        }
        out
    }

    #[test]
    fn targets_are_rebuilt_for_the_workspaces_whose_inputs_changed() {
        let mut cache = Targets::default();
        let part = |binds: bool| {
            Arc::new(WorkspaceTarget {
                binds,
                ..Default::default()
            })
        };
        let mut evals = vec![
            target_eval("c/a", &[("lc1", "w", "widgets")]),
            target_eval("c/b", &[("lc1", "w", "gadgets"), ("lc2", "v", "valves")]),
            target_eval("c/c", &[("lc3", "w", "widgets")]),
        ];
        let mut planned: BTreeMap<String, Arc<WorkspaceTarget>> = [
            ("lc2".to_string(), part(true)),
            ("lc4".to_string(), part(true)),
        ]
        .into();
        fn check(
            cache: &mut Targets,
            evals: &[Arc<RuleEval>],
            planned: &BTreeMap<String, Arc<WorkspaceTarget>>,
        ) -> BTreeMap<String, Arc<WorkspaceTarget>> {
            let got = cache.desired(evals.iter(), planned);
            let want = targets_from_scratch(evals, planned);
            let got_values: BTreeMap<String, WorkspaceTarget> = got
                .iter()
                .map(|(lc, t)| (lc.clone(), (**t).clone()))
                .collect();
            assert_eq!(got_values, want);
            got
        }
        let first = check(&mut cache, &evals, &planned);
        assert_eq!(
            first.keys().collect::<Vec<_>>(),
            ["lc1", "lc2", "lc3", "lc4"]
        );
        assert_eq!(first["lc1"].rules.len(), 2);

        // Nothing changed: every target is the same `Arc`.
        let same = check(&mut cache, &evals, &planned);
        for (lc, t) in &same {
            assert!(Arc::ptr_eq(t, &first[lc]), "{lc} kept");
        }

        // One rule changed: the workspaces it routes to, before and after, are
        // rebuilt; the others kept.
        evals[2] = target_eval("c/c", &[("lc1", "w", "sprockets")]);
        let changed = check(&mut cache, &evals, &planned);
        assert!(!Arc::ptr_eq(&changed["lc1"], &first["lc1"]));
        assert!(changed["lc1"].rules.contains("c/c"));
        assert!(
            !changed.contains_key("lc3"),
            "no rule routes there any more"
        );
        assert!(Arc::ptr_eq(&changed["lc2"], &first["lc2"]));
        assert!(Arc::ptr_eq(&changed["lc4"], &first["lc4"]));

        // The plan's part of one workspace changed: that one rebuilt.
        planned.insert("lc2".to_string(), part(false));
        let replanned = check(&mut cache, &evals, &planned);
        assert!(!replanned["lc2"].binds);
        assert!(Arc::ptr_eq(&replanned["lc1"], &changed["lc1"]));

        // A rule removed, another with the same routes in its place: rebuilt.
        evals.remove(0);
        evals.insert(0, target_eval("c/z", &[("lc1", "w", "widgets")]));
        let renamed = check(&mut cache, &evals, &planned);
        assert!(renamed["lc1"].rules.contains("c/z"));
        assert!(!renamed["lc1"].rules.contains("c/a"));
        planned.clear();
        evals.clear();
        assert!(check(&mut cache, &evals, &planned).is_empty());
    }

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure(&format!("code {code}"), "").with_code(code),
        ))
    }

    /// Answers per endpoint, as a virtual workspace would: `a` does not serve the
    /// cluster (403), `b` does not either (404), `c` does, `d` fails.
    async fn answer(url: String) -> Result<String, kube::Error> {
        match url.as_str() {
            "a" => Err(api_error(403)),
            "b" => Err(api_error(404)),
            "c" => Ok(format!("written through {url}")),
            _ => Err(api_error(500)),
        }
    }

    fn candidates(urls: &[&str]) -> Vec<(String, String)> {
        urls.iter()
            .map(|u| (u.to_string(), u.to_string()))
            .collect()
    }

    fn code(e: Option<kube::Error>) -> Option<u16> {
        match e {
            Some(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_write_goes_through_the_first_endpoint_that_serves_the_cluster() {
        // 403 and 404 mean "not this shard": the next endpoint is tried.
        let r = in_turn(candidates(&["a", "b", "c", "d"]), answer).await;
        assert_eq!(
            r.ok(),
            Some(("c".to_string(), "written through c".to_string()))
        );
        // Any other error stops at once (and is the answer).
        let r = in_turn(candidates(&["d", "c"]), answer).await;
        assert_eq!(r.err().map(code), Some(Some(500)));
        // No endpoint serves it: the most likely endpoint's answer.
        let r = in_turn(candidates(&["b", "a"]), answer).await;
        assert_eq!(r.err().map(code), Some(Some(404)));
        let r = in_turn(candidates(&["a", "b"]), answer).await;
        assert_eq!(r.err().map(code), Some(Some(403)));
        // No endpoint at all.
        let r = in_turn(candidates(&[]), answer).await;
        assert_eq!(r.err().map(code), Some(None));
    }

    #[test]
    fn an_export_must_export_the_resource() {
        let export = |resources: &[(&str, &str)]| ExportLookup {
            lc: Some("lc1".into()),
            export: Ok(Arc::new(ExportInfo {
                identity_hash: "h".into(),
                resources: resources
                    .iter()
                    .map(|(g, r)| GroupResource::new(*g, *r))
                    .collect(),
                shared: None,
            })),
        };
        let vpcs = GroupResource::new("network.test.io", "vpcs");
        let both = export(&[("network.test.io", "vpcs"), ("network.test.io", "subnets")]);
        assert_eq!(both.exporting(&vpcs, "root:net", "network.test.io"), Ok(()));
        assert_eq!(
            export(&[("network.test.io", "subnets")]).exporting(&vpcs, "root:net", "net.io"),
            Err((
                reasons::RESOURCE_NOT_EXPORTED,
                "APIExport net.io in workspace root:net does not export vpcs.network.test.io (it exports: subnets.network.test.io)".to_string()
            ))
        );
        assert_eq!(
            export(&[]).exporting(&vpcs, "root:net", "net.io"),
            Err((
                reasons::RESOURCE_NOT_EXPORTED,
                "APIExport net.io in workspace root:net does not export vpcs.network.test.io (it exports: nothing)".to_string()
            ))
        );
        // A failed lookup is passed on as it is.
        let missing = ExportLookup::failed(None, reasons::API_EXPORT_NOT_FOUND, "gone".into());
        assert_eq!(
            missing.exporting(&vpcs, "root:net", "net.io"),
            Err((reasons::API_EXPORT_NOT_FOUND, "gone".to_string()))
        );
    }

    #[test]
    fn a_status_found_up_to_date_is_skipped_only_while_its_inputs_hold() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "holdfast.dev/v1alpha1",
            "kind": "DependencyRule",
            "metadata": {"name": "r", "resourceVersion": "7"},
            "spec": {},
        }))
        .expect("object");
        let parsed = Arc::new(Parsed::of(&obj));
        let gr = GroupResource::new("p.test", "widgets");
        let eval = Arc::new(RuleEval {
            cluster: "c1".into(),
            key: "c1/r".into(),
            invalid: None,
            workspaces: vec![WorkspaceRef {
                path: "root:p".into(),
                export: "widgets".into(),
                logical_cluster: Some("lc2".into()),
                identity_hash: None,
                shared_resources: None,
                message: None,
            }],
            targets: [(
                "lc1".to_string(),
                [("widgets".to_string(), [gr].into())].into(),
            )]
            .into(),
            edges: None,
        });
        let rule = RuleState {
            obj: Arc::new(obj.clone()),
            parsed: parsed.clone(),
            eval: eval.clone(),
            rule: None,
        };
        let config = |rv: Option<&str>| {
            let mut c = ValidatingWebhookConfiguration::default();
            c.metadata.resource_version = rv.map(str::to_string);
            Arc::new(c)
        };
        let installed: BTreeMap<String, Arc<ValidatingWebhookConfiguration>> =
            [("lc1".to_string(), config(Some("5")))].into();
        // lc1 (a target) installed at 5, lc2 (a workspace) not installed.
        let inputs = StatusInputs {
            eval: eval.clone(),
            parsed: parsed.clone(),
            installed: installed_inputs(&eval, &installed).expect("comparable"),
            cycle: None,
        };
        assert_eq!(inputs.installed, vec![Some("5".to_string()), None]);
        assert!(inputs.hold_for(&rule, &installed_rvs(&installed), None));
        // Any input changed: compared again.
        let mut other = installed.clone();
        other.insert("lc1".into(), config(Some("6")));
        assert!(!inputs.hold_for(&rule, &installed_rvs(&other), None));
        other.insert("lc1".into(), config(None));
        assert!(!inputs.hold_for(&rule, &installed_rvs(&other), None));
        assert_eq!(installed_inputs(&eval, &other), None, "no resourceVersion");
        let mut other = installed.clone();
        other.remove("lc1");
        assert!(!inputs.hold_for(&rule, &installed_rvs(&other), None));
        let mut other = installed.clone();
        other.insert("lc2".into(), config(Some("1")));
        assert!(!inputs.hold_for(&rule, &installed_rvs(&other), None));
        assert!(!inputs.hold_for(&rule, &installed_rvs(&installed), Some("a → a")));
        let reparsed = RuleState {
            parsed: Arc::new(Parsed::of(&obj)),
            obj: rule.obj.clone(),
            eval: eval.clone(),
            rule: None,
        };
        assert!(!inputs.hold_for(&reparsed, &installed_rvs(&installed), None));
        let reevaluated = RuleState {
            eval: Arc::new(RuleEval {
                cluster: "c1".into(),
                key: "c1/r".into(),
                invalid: None,
                workspaces: Vec::new(),
                targets: eval.targets.clone(),
                edges: None,
            }),
            obj: rule.obj.clone(),
            parsed: parsed.clone(),
            rule: None,
        };
        assert!(!inputs.hold_for(&reevaluated, &installed_rvs(&installed), None));
    }

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
        let mut d = holdfast_shared::watch::Driver::new(holdfast_shared::watch::NotFound::Unknown);
        d.handle(&mut s, Ok(watcher::Event::Init));
        d.handle(&mut s, Ok(watcher::Event::InitApply(mk("a", "x"))));
        d.handle(&mut s, Ok(watcher::Event::InitApply(mk("b", "x"))));
        assert!(!s.ready);
        d.handle(&mut s, Ok(watcher::Event::InitDone));
        assert!(s.ready);
        assert_eq!(s.snapshot().len(), 2, "same name in two clusters");
        d.handle(&mut s, Ok(watcher::Event::Delete(mk("a", "x"))));
        let keys: Vec<_> = s
            .snapshot()
            .into_iter()
            .map(|(k, _)| (*k).clone())
            .collect();
        assert_eq!(keys, vec![("b".to_string(), "x".to_string())]);
        // Fed by several endpoints: an endpoint's object leaves by its key.
        let store = Arc::new(Mutex::new(s));
        let mut feed = SharedFeed {
            store: store.clone(),
            notify: Arc::new(Notify::new()),
        };
        feed.remove(&ObjectKey {
            cluster: "b".into(),
            namespace: String::new(),
            name: "x".into(),
        });
        assert!(
            store
                .lock()
                .map(|s| s.snapshot().is_empty())
                .unwrap_or(false)
        );
    }
}
