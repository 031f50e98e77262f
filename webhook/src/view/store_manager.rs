//! Which object stores run: those the policies name, the label stores of every
//! namespaced type, and those Cascading protection asks for; one watch each, through
//! the shared driver (a 404 is authoritative here: the manager runs on the Kubernetes
//! topology only).

use super::{StoreKey, WebhookView, crds::crds_gr, discovery::namespaced_resources};
use crate::stores::{Depth, ResourceStore, run_store};
use holdfast_shared::{
    api::common::GroupResource,
    clients::may_read,
    policy::LookupError,
    registry::{CompiledCriterion, namespaces_gr},
    watch::NotFound,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How often discovery runs while it is complete.
const DISCOVERY_PERIOD: Duration = Duration::from_secs(30);
/// How often discovery runs while the last one was incomplete, and how long a type
/// refused to the webhook waits before it is asked about again.
const RETRY_PERIOD: Duration = Duration::from_secs(5);
/// The store manager's pass when nothing wakes it.
const PASS_PERIOD: Duration = Duration::from_secs(2);

impl WebhookView {
    pub(super) fn synced_store(
        &self,
        gr: &GroupResource,
        depth: Depth,
    ) -> Option<Arc<ResourceStore>> {
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
    pub(super) fn cascade_store(&self, key: StoreKey) -> Result<Arc<ResourceStore>, LookupError> {
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

    /// Whether some ResourceProtection in mode Cascading selects objects of `gr`.
    pub(super) fn cascading_policy_for(&self, gr: &GroupResource) -> bool {
        self.registry
            .protections
            .find(gr)
            .is_some_and(|l| l.iter().any(|p| p.cascading))
    }

    /// The stores Cascading protection will need, known before anyone asks: Pods
    /// and PVCs once a Namespace carries a Cascading label (or a Cascading
    /// ResourceProtection selects namespaces), and the instances of each CRD that
    /// carries one (of every CRD, when a Cascading ResourceProtection selects CRDs).
    pub(super) fn cascade_foreseen(&self) -> Vec<StoreKey> {
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

/// What object stores the policies need now.
pub(super) fn wanted_stores(view: &WebhookView, namespaced: &[GroupResource]) -> HashSet<StoreKey> {
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

/// Keeps one watch per wanted object store.
pub(super) async fn manage_stores(
    view: Arc<WebhookView>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let Some(client) = view.client.clone() else {
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
            if !readable.contains(&key.gr) {
                if refused
                    .get(&key.gr)
                    .is_some_and(|t| t.elapsed() < RETRY_PERIOD)
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
                NotFound::Empty,
                on_forbidden,
            ));
            running.insert(key, handle);
        }
        view.store_passes
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        rediscover = false;
        tokio::select! {
            _ = view.changed.notified() => {}
            _ = view.cascade_wanted.notified() => {}
            _ = view.rediscover.notified() => rediscover = true,
            _ = tokio::time::sleep(PASS_PERIOD) => {}
            _ = shutdown.cancelled() => break,
        }
    }
    for (_, h) in running {
        h.abort();
    }
}
