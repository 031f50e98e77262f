//! Which object stores run: those the policies name, the label stores of every
//! namespaced type, and those Cascading protection asks for; one watch each, through
//! the shared driver (a 404 is authoritative here: the manager runs on the Kubernetes
//! topology only).

use super::{
    StoreKey, WebhookView,
    crds::{Crds, crds_gr},
    discovery::namespaced_resources,
};
use crate::stores::{Depth, ResourceStore, run_store};
use dashmap::DashMap;
use holdfast_shared::{
    api::common::GroupResource,
    clients::may_read,
    policy::{ContainedObject, LookupError},
    registry::{CompiledCriterion, Registry, namespaces_gr},
    watch::NotFound,
};
use parking_lot::RwLock;
use std::collections::{HashMap, HashSet};
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};
use std::time::Duration;
use tokio::sync::Notify;

/// How often discovery runs while it is complete.
const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);
/// How often discovery runs while the last one was incomplete, and how long a type
/// refused to the webhook waits before it is asked about again.
const RETRY_PERIOD: Duration = Duration::from_secs(5);
/// The store manager's pass when nothing wakes it.
const PASS_PERIOD: Duration = Duration::from_secs(2);
/// How long a type refused to the webhook still counts as "its grant may not be
/// effective yet" (ClusterRole aggregation is asynchronous): namespace DELETEs are
/// refused meanwhile, rather than skipping what the type may hold; after it, label
/// containment leaves the type out (reported, and counted in
/// `holdfast_webhook_unreadable_resources`). Secrets are left out at once: the one
/// type the shipped reads role leaves out on purpose.
pub(super) const GRANT_GRACE: Duration = Duration::from_secs(30);
/// How often a type refused within [`GRANT_GRACE`] is asked about again.
const GRACE_RETRY_PERIOD: Duration = Duration::from_secs(1);

/// The object stores, and what the store manager knows of the cluster's types.
pub(super) struct Stores {
    /// Protection label keys (for the label-protected object stores).
    label_keys: Vec<String>,
    /// Protection label keys that list the value `Cascading`.
    cascading_keys: Vec<String>,
    stores: DashMap<StoreKey, Arc<ResourceStore>>,
    /// Why the last discovery was incomplete (None: complete). While incomplete,
    /// the stores of what could not be discovered are kept, and namespace and CRD
    /// DELETEs are refused (their contents may be unknown).
    discovery_problem: RwLock<Option<String>>,
    /// Wakes the store manager to rediscover at once (a CRD changed).
    rediscover: Notify,
    /// Stores Cascading protection asked for: started on first need, then kept.
    cascade_demand: DashMap<StoreKey, ()>,
    /// Wakes the store manager at once when Cascading protection needs a new store.
    cascade_wanted: Notify,
    /// Types the webhook's identity may not list and watch (when last asked), with
    /// when they were first refused (since they were last readable).
    refused: DashMap<GroupResource, std::time::Instant>,
    /// Passes of the store manager completed (every wanted store started).
    passes: AtomicU64,
}

impl Stores {
    /// No stores yet, for the protection label keys `label_keys` (those of them
    /// listing `Cascading`: `cascading_keys`).
    pub(super) fn new(label_keys: Vec<String>, cascading_keys: Vec<String>) -> Self {
        Self {
            label_keys,
            cascading_keys,
            stores: DashMap::new(),
            discovery_problem: RwLock::new(None),
            rediscover: Notify::new(),
            cascade_demand: DashMap::new(),
            cascade_wanted: Notify::new(),
            refused: DashMap::new(),
            passes: AtomicU64::new(0),
        }
    }

    /// Why discovery is incomplete, if it is.
    pub(super) fn discovery_problem(&self) -> Option<String> {
        self.discovery_problem.read().clone()
    }

    fn set_discovery_problem(&self, problem: Option<String>) {
        *self.discovery_problem.write() = problem;
    }

    /// An error while discovery is incomplete.
    pub(super) fn discovery_complete(&self) -> Result<(), LookupError> {
        match self.discovery_problem() {
            Some(p) => Err(LookupError::unreadable(format!(
                "API discovery is incomplete ({p}), so objects of some resources cannot be seen"
            ))),
            None => Ok(()),
        }
    }

    /// Asks the store manager to discover again at once (a CRD or an APIService
    /// changed).
    pub(super) fn rediscover(&self) {
        self.rediscover.notify_one();
    }

    /// How many passes of the store manager have completed.
    pub(super) fn passes(&self) -> u64 {
        self.passes.load(Ordering::Acquire)
    }

    /// Counts a pass of the store manager (every wanted store started).
    fn pass_done(&self) {
        self.passes.fetch_add(1, Ordering::AcqRel);
    }

    /// The store of `gr` at `depth` (no label), once synced.
    pub(super) fn synced(&self, gr: &GroupResource, depth: Depth) -> Option<Arc<ResourceStore>> {
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
    pub(super) fn cascade(&self, key: StoreKey) -> Result<Arc<ResourceStore>, LookupError> {
        if self.cascade_demand.insert(key.clone(), ()).is_none() {
            self.cascade_wanted.notify_one();
        }
        match self.stores.get(&key) {
            Some(s) if s.synced() => Ok(s.value().clone()),
            _ if self.refused.contains_key(&key.gr) => Err(LookupError::unreadable(format!(
                "holdfast may not list and watch {} yet (its reads role does not grant it)",
                key.gr
            ))),
            _ => Err(LookupError::unreadable(format!(
                "the index of {} is not synced yet (it starts when first needed)",
                key.gr
            ))),
        }
    }

    /// Forgets that Cascading protection asked for the instances of `gr` (its CRD
    /// went).
    pub(super) fn forget_cascade(&self, gr: GroupResource) {
        self.cascade_demand.remove(&StoreKey {
            gr,
            depth: Depth::Metadata,
            label: None,
        });
    }

    /// Whether `labels` carry a `Cascading` protection label.
    pub(super) fn cascading_labelled(
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

    /// The stores Cascading protection will need, known before anyone asks: Pods
    /// and PVCs once a Namespace carries a Cascading label (or a Cascading
    /// ResourceProtection selects namespaces), and the instances of each CRD that
    /// carries one (of every CRD, when a Cascading ResourceProtection selects CRDs).
    fn cascade_foreseen(&self, registry: &Registry, crds: &Crds) -> Vec<StoreKey> {
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
        if labelled_ns || cascading_policy_for(registry, &namespaces_gr()) {
            out.extend(namespace_content_keys());
        }
        let all_crds = cascading_policy_for(registry, &crds_gr());
        out.extend(crds.cascading(all_crds).into_iter().map(|gr| StoreKey {
            gr,
            depth: Depth::Metadata,
            label: None,
        }));
        out
    }

    /// Every object in namespace `ns` of `cluster` the stores hold that some
    /// protection could cover: of every type a policy names, and every labelled one.
    /// Refused while a type a policy names may not be read, or a namespaced custom
    /// resource (`crds`) or a store is not synced.
    pub(super) fn namespace_contents(
        &self,
        registry: &Registry,
        crds: &Crds,
        cluster: &str,
        ns: &str,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        // A type a policy names must be readable: its objects in the namespace
        // may be what the policy protects. (Label containment of a type the
        // webhook may not read is left out below: Secrets, unless named.)
        if !self.refused.is_empty() {
            let named = self.wanted(registry, crds, &[]);
            if let Some(gr) = named
                .iter()
                .map(|k| &k.gr)
                .find(|gr| self.refused.contains_key(*gr))
            {
                return Err(crate::stores::unreadable_error(&gr.to_string()));
            }
        }
        for gr in crds.namespaced() {
            for label in &self.label_keys {
                let key = StoreKey {
                    gr: gr.clone(),
                    depth: Depth::Metadata,
                    label: Some(label.clone()),
                };
                if !self.stores.get(&key).is_some_and(|s| s.synced()) {
                    return Err(LookupError::unreadable(format!(
                        "the objects of {gr} (a new custom resource) are not indexed yet"
                    )));
                }
            }
        }
        // A type refused a moment ago may be granted already, not yet in effect: what
        // it holds is unknown, not absent (a new custom resource says so above).
        if let Some(gr) = self.refused_within_grace() {
            return Err(crate::stores::unreadable_error(&gr.to_string()));
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
            if key.label.is_some() && store.forbidden() && !crds.is_namespaced(&key.gr) {
                continue;
            }
            if !store.synced() {
                return Err(LookupError::unreadable(format!(
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
                out.push(super::cluster::contained(&store.resource, obj));
            }
        }
        Ok(out)
    }

    /// A type refused (other than Secrets) whose first refusal is less than
    /// [`GRANT_GRACE`] old, if any (the first in name order).
    fn refused_within_grace(&self) -> Option<GroupResource> {
        let secrets = GroupResource::new("", "secrets");
        self.refused
            .iter()
            .filter(|e| *e.key() != secrets && e.value().elapsed() < GRANT_GRACE)
            .map(|e| e.key().clone())
            .min()
    }

    /// Records that `gr` was refused now (keeping when it was first refused).
    pub(super) fn refuse(&self, gr: &GroupResource) {
        self.refused
            .entry(gr.clone())
            .or_insert_with(std::time::Instant::now);
    }

    /// What object stores the policies need now.
    fn wanted(
        &self,
        registry: &Registry,
        crds: &Crds,
        namespaced: &[GroupResource],
    ) -> HashSet<StoreKey> {
        let meta = |gr: GroupResource| StoreKey {
            gr,
            depth: Depth::Metadata,
            label: None,
        };
        let mut out = HashSet::new();
        out.insert(meta(namespaces_gr()));
        let reg = registry;
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
        for d in self.cascade_demand.iter() {
            out.insert(d.key().clone());
        }
        out.extend(self.cascade_foreseen(registry, crds));
        for gr in namespaced {
            // Wildcard ResourceProtections: the objects of every namespaced type they
            // select (namespace containment must see them all).
            if !reg.wildcard_protections(gr).is_empty() {
                out.insert(meta(gr.clone()));
            }
            for key in &self.label_keys {
                out.insert(StoreKey {
                    gr: gr.clone(),
                    depth: Depth::Metadata,
                    label: Some(key.clone()),
                });
            }
        }
        out
    }

    /// Records that `gr` has been refused since `at` (tests of the grace).
    #[cfg(test)]
    pub(super) fn refused_since(&self, gr: GroupResource, at: std::time::Instant) {
        self.refused.insert(gr, at);
    }

    /// Counts a pass without running one (tests of what waits for the stores).
    #[cfg(test)]
    pub(super) fn count_pass(&self) {
        self.pass_done();
    }
}

/// The wait before the next pass: shorter while a type is refused within the grace.
fn pass_period(stores: &Stores) -> Duration {
    if stores.refused_within_grace().is_some() {
        GRACE_RETRY_PERIOD
    } else {
        PASS_PERIOD
    }
}

/// Whether some ResourceProtection in mode Cascading selects objects of `gr`.
fn cascading_policy_for(registry: &Registry, gr: &GroupResource) -> bool {
    registry
        .protections
        .find(gr)
        .is_some_and(|l| l.iter().any(|p| p.cascading))
}

/// The stores a Namespace's live contents come from: Pods (metadata and phase) and
/// PersistentVolumeClaims (metadata).
pub(super) fn namespace_content_keys() -> [StoreKey; 2] {
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

/// Keeps one watch per wanted object store.
pub(super) async fn manage_stores(
    view: Arc<WebhookView>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let Some(client) = view.clients.home().cloned() else {
        return;
    };
    let stores = &view.stores;
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
        let every = if stores.discovery_problem().is_some() {
            RETRY_PERIOD
        } else {
            DISCOVERY_PERIOD
        };
        if rediscover || last_discovery.is_none_or(|t| t.elapsed() > every) {
            let (found, problems) = namespaced_resources(&client, &by_group).await;
            by_group = found;
            namespaced = by_group.values().flatten().cloned().collect();
            namespaced.sort();
            namespaced.dedup();
            let problem = (!problems.is_empty()).then(|| problems.join("; "));
            if let Some(p) = &problem
                && stores.discovery_problem().as_ref() != Some(p)
            {
                tracing::warn!(problem = %p, "API discovery incomplete: keeping the stores of what could not be discovered; namespace and CRD deletions are refused until it completes");
            }
            stores.set_discovery_problem(problem);
            view.clients.forget_resolved();
            last_discovery = Some(std::time::Instant::now());
        }
        let wanted = stores.wanted(view.policies.registry(), &view.crds, &namespaced);
        let stale: Vec<StoreKey> = running
            .keys()
            .filter(|k| !wanted.contains(*k))
            .cloned()
            .collect();
        for key in stale {
            if let Some(h) = running.remove(&key) {
                h.abort();
            }
            stores.stores.remove(&key);
        }
        for key in wanted {
            if running.contains_key(&key) {
                continue;
            }
            // Kubernetes: ask before listing (a SelfSubjectAccessReview), so a type
            // the reads role does not grant is reported once and asked about again
            // every 5 s, not listed into a 403 on every retry.
            if !readable.contains(&key.gr) {
                // Within the grace a grant may take effect any moment: asked again
                // sooner.
                let retry = match stores.refused.get(&key.gr) {
                    Some(first) if first.elapsed() < GRANT_GRACE => GRACE_RETRY_PERIOD,
                    _ => RETRY_PERIOD,
                };
                if refused.get(&key.gr).is_some_and(|t| t.elapsed() < retry) {
                    continue;
                }
                let resource = key.gr.to_string();
                if may_read(&client, &key.gr).await {
                    stores.refused.remove(&key.gr);
                    if refused.remove(&key.gr).is_some() {
                        tracing::info!(resource = %key.gr, "{} is readable now", key.gr);
                    }
                    view.metrics.set_unreadable(&resource, false);
                    readable.insert(key.gr.clone());
                } else {
                    if refused
                        .insert(key.gr.clone(), std::time::Instant::now())
                        .is_none()
                    {
                        tracing::warn!(resource = %key.gr, "may not list and watch {}: label containment does not see its objects, and DELETEs the policies naming it govern are refused, until holdfast's reads role grants it", key.gr);
                    }
                    stores.refuse(&key.gr);
                    view.metrics.set_unreadable(&resource, true);
                    continue;
                }
            }
            let (ar, ns) = match view.clients.resolve(&client, "", &key.gr).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(resource = %key.gr, error = %e, "store not started");
                    continue;
                }
            };
            let store = Arc::new(ResourceStore::new(ar, ns));
            stores.stores.insert(key.clone(), store.clone());
            let metrics = view.metrics.clone();
            let (gr, label) = (key.gr.clone(), key.label.clone());
            let on_forbidden = move |forbidden: bool| {
                metrics.set_unreadable(&gr.to_string(), forbidden);
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
                NotFound::Empty,
                on_forbidden,
            ));
            running.insert(key, handle);
        }
        stores.pass_done();
        rediscover = false;
        tokio::select! {
            _ = view.changed.stores.notified() => {}
            _ = stores.cascade_wanted.notified() => {}
            _ = stores.rediscover.notified() => rediscover = true,
            _ = tokio::time::sleep(pass_period(stores)) => {}
            _ = shutdown.cancelled() => break,
        }
    }
    for (_, h) in running {
        h.abort();
    }
}
