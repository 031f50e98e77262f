//! The dependents index: one watch per dependent resource some DependencyRule names,
//! through the shared driver, restarted when the rules for that resource change; and
//! live lookups where the index is not synced (or in `--dependents live` mode).
//!
//! On kcp a dependent type is watched through every endpoint of its own APIExport's
//! APIExportEndpointSlice (in the rule's workspace) when the rule names the export
//! ([`holdfast_shared::endpoints`]). A consumer's logical cluster that no synced
//! endpoint covers (no object of it seen, its shard's URL not in the slice yet, its
//! endpoint failing, no export named) is checked by a live list in the consumer's
//! workspace through the front-proxy. A 404 through a virtual workspace proves nothing
//! (fail closed); a 404 of a live list means "not served" only when discovery of that
//! workspace says so. On Kubernetes a 404 means the type is not served, so nothing
//! references anything.

use super::{DependentsMode, WebhookView};
use crate::metrics::Metrics;
use dashmap::DashMap;
use holdfast_shared::{
    endpoints::{Endpoints, ObjectKey, Partitioned},
    index::{DependentsIndex, ObjectId, Referrer},
    policy::{DependentsQuery, LookupError, logical_cluster},
    registry::CompiledDependency,
    topology::Topology,
    watch::{self, Index, NotFound, Status, WatchState},
};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
    runtime::watcher,
};
use std::{collections::HashSet, sync::Arc, time::Duration};

#[path = "dependents_manager.rs"]
mod manager;
pub(super) use manager::manage_dependents;

/// How long a live dependents lookup may take.
const LIVE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(8);
/// How long asking an endpoint whether it serves a cluster may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The dependents index and how dependents are found.
pub(super) struct Dependents {
    mode: DependentsMode,
    index: DependentsIndex,
    /// Whether the watch of each dependent resource has synced.
    synced: DashMap<String, bool>,
    /// kcp: the merged index of every endpoint of a dependent type's APIExport, per
    /// dependent resource (which consumer clusters the index covers).
    endpoints: DashMap<String, Endpoints<DynamicObject, DependentsFeed>>,
}

impl Dependents {
    /// Nothing indexed yet; dependents found the `mode` way.
    pub(super) fn new(mode: DependentsMode) -> Self {
        Self {
            mode,
            index: DependentsIndex::default(),
            synced: DashMap::new(),
            endpoints: DashMap::new(),
        }
    }

    /// Whether dependents are watched into the index (else always listed live).
    pub(super) fn watched(&self) -> bool {
        self.mode == DependentsMode::Watch
    }

    /// Sets the gauges of the index (counts, not a series per dependent type: those
    /// grow with the fleet).
    pub(super) fn report(&self, metrics: &Metrics) {
        metrics.index_references.set(self.index.len() as i64);
        let unsynced = self.synced.iter().filter(|e| !*e.value()).count();
        metrics.index_resources.set(self.synced.len() as i64);
        metrics.index_unsynced.set(unsynced as i64);
    }
}

/// The objects that reference the deleted object through `q.dep`: from the index
/// where it covers the question, else listed live.
pub(super) async fn referrers(
    view: &WebhookView,
    q: DependentsQuery<'_>,
) -> Result<Vec<Referrer>, LookupError> {
    let deps = &view.dependents;
    let key = q.dep.dependent_gr().to_string();
    let indexed = deps.watched()
        && match view.topology {
            Topology::Kubernetes => deps.synced.get(&key).is_some_and(|s| *s),
            // Only a consumer cluster a synced endpoint covers: the index cannot
            // see the others.
            Topology::Kcp => Box::pin(kcp_covered(view, &key, &q)).await,
        };
    let result = if indexed {
        view.metrics
            .dependents_lookups
            .with_label_values(&["index"])
            .inc();
        Ok(deps.index.lookup(
            q.cluster,
            &holdfast_shared::index::index_target(q.dep),
            q.name,
            q.namespace,
        ))
    } else {
        Box::pin(live(view, q)).await
    };
    if result.is_err() {
        view.metrics
            .dependents_lookups
            .with_label_values(&["failed"])
            .inc();
    }
    result
}

/// The referrers of `q`, listed through the API server.
async fn live(view: &WebhookView, q: DependentsQuery<'_>) -> Result<Vec<Referrer>, LookupError> {
    view.metrics
        .dependents_lookups
        .with_label_values(&["live"])
        .inc();
    let client = view.clients.cluster(q.cluster)?;
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
                Err(e) if crate::stores::is_not_found(&e) => {
                    if view.topology == Topology::Kcp {
                        super::kcp::not_served(
                            &client,
                            q.cluster,
                            &dep.dependent_group,
                            &dep.dependent_version,
                            &dep.dependent_resource,
                        )
                        .await?;
                    }
                    return Ok(out);
                }
                Err(e) => {
                    return Err(crate::stores::lookup_error(
                        &dep.dependent_gr().to_string(),
                        e,
                    ));
                }
            };
            for obj in &list.items {
                let value = match serde_json::to_value(obj) {
                    Ok(v) => v,
                    Err(e) => return Err(LookupError::from_error(e)),
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
    match tokio::time::timeout(LIVE_LOOKUP_TIMEOUT, lookup).await {
        Ok(r) => r,
        Err(e) => Err(LookupError::failed(
            "the API server did not answer in time",
            e,
        )),
    }
}

/// kcp: whether the dependents index can answer for the consumer cluster of `q`:
/// a synced endpoint's watch holds objects of it, or a synced endpoint serves it.
/// The second is asked once per cluster (then remembered): a list of at most one
/// dependent of the cluster through each synced endpoint until one answers (a
/// virtual workspace serves only the clusters of its shard that bind the export,
/// and its wildcard watch holds every object of those, none included). No endpoint
/// answering: not covered (a live lookup follows).
async fn kcp_covered(view: &WebhookView, key: &str, q: &DependentsQuery<'_>) -> bool {
    let Some(endpoints) = view.dependents.endpoints.get(key).map(|e| e.clone()) else {
        return false;
    };
    if endpoints.covers(q.cluster) {
        return true;
    }
    let Some(clients) = view.clients.per_url() else {
        return false;
    };
    if !holdfast_shared::kcp::is_logical_cluster_name(q.cluster) || q.cluster.contains(':') {
        return false;
    }
    let ar = dependent_resource(q.dep);
    for url in endpoints.synced_urls() {
        let Ok(client) = clients.virtual_workspace(&format!("{url}/clusters/{}", q.cluster)) else {
            continue;
        };
        let api: Api<DynamicObject> = Api::all_with(client, &ar);
        let one = ListParams::default().limit(1);
        match tokio::time::timeout(PROBE_TIMEOUT, api.list(&one)).await {
            Ok(Ok(_)) => {
                view.metrics
                    .dependents_lookups
                    .with_label_values(&["probe"])
                    .inc();
                tracing::debug!(cluster = q.cluster, endpoint = %url, resource = key, "the endpoint serves the cluster: answered from the index from now on");
                endpoints.mark_served(q.cluster, &url);
                return true;
            }
            Ok(Err(e)) => {
                tracing::debug!(cluster = q.cluster, endpoint = %url, error = %e, "the endpoint does not serve the cluster");
            }
            Err(_) => {
                tracing::debug!(cluster = q.cluster, endpoint = %url, "the endpoint did not answer in time");
            }
        }
    }
    false
}

fn dependent_resource(dep: &CompiledDependency) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            &dep.dependent_group,
            &dep.dependent_version,
            &dep.dependent_kind,
        ),
        &dep.dependent_resource,
    )
}

/// The dependents index's part for one dependent resource.
pub(super) struct DependentsFeed {
    view: Arc<WebhookView>,
    /// `resource.group` of the dependent.
    key: String,
    deps: Vec<CompiledDependency>,
    /// The objects of the list under way (see [`Index::streams_lists`]).
    listed: Option<HashSet<ObjectId>>,
}

impl DependentsFeed {
    fn id(&self, cluster: &str, namespace: &str, name: &str) -> ObjectId {
        ObjectId {
            cluster: cluster.into(),
            resource: self.key.as_str().into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Indexes the references of `obj` (taken whole: its fields are moved into the
    /// JSON the paths are read from, not copied).
    fn insert(&self, obj: DynamicObject) -> Option<ObjectId> {
        let terminating = obj.metadata.deletion_timestamp.is_some();
        let value = object_value(obj)?;
        let meta = |field: &str| value["metadata"][field].as_str().unwrap_or_default();
        let id = self.id(logical_cluster(&value), meta("namespace"), meta("name"));
        let deps: Vec<&CompiledDependency> = self.deps.iter().collect();
        let refs = holdfast_shared::index::references(&value, &deps);
        let kind = self
            .deps
            .first()
            .map(|d| d.dependent_kind.as_str())
            .unwrap_or_default();
        self.view
            .dependents
            .index
            .apply(&id, kind, terminating, &refs);
        Some(id)
    }
}

/// `obj` as the JSON object it was read as, its fields moved rather than copied (a
/// list of a million dependents is read object by object).
fn object_value(obj: DynamicObject) -> Option<serde_json::Value> {
    let metadata = match serde_json::to_value(&obj.metadata) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(name = ?obj.metadata.name, error = %e, "dependent left out of the index: its metadata does not serialize");
            return None;
        }
    };
    let mut map = match obj.data {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    if let Some(t) = obj.types {
        map.insert("apiVersion".into(), t.api_version.into());
        map.insert("kind".into(), t.kind.into());
    }
    map.insert("metadata".into(), metadata);
    Some(serde_json::Value::Object(map))
}

impl Partitioned<DynamicObject> for DependentsFeed {
    fn remove(&mut self, key: &ObjectKey) {
        self.view.dependents.index.delete(&ObjectId {
            cluster: key.cluster.as_str().into(),
            resource: self.key.as_str().into(),
            namespace: key.namespace.as_str().into(),
            name: key.name.as_str().into(),
        });
    }
}

impl Index<DynamicObject> for DependentsFeed {
    fn reset(&mut self, objects: Vec<DynamicObject>) {
        holdfast_shared::watch::reset_by_list(self, objects);
    }

    /// A list is taken object by object: the index keeps a few ids per object, the
    /// list's objects are not held (a relist of a million dependents would be).
    fn streams_lists(&self) -> bool {
        true
    }

    fn list_begin(&mut self) {
        self.listed = Some(HashSet::new());
    }

    fn list_apply(&mut self, obj: DynamicObject) {
        if let Some(id) = self.insert(obj) {
            self.listed.get_or_insert_with(HashSet::new).insert(id);
        }
    }

    fn list_end(&mut self) {
        let seen = self.listed.take().unwrap_or_default();
        self.view.dependents.index.retain_resource(&self.key, &seen);
    }

    fn apply(&mut self, obj: DynamicObject) {
        self.insert(obj);
    }

    fn delete(&mut self, obj: DynamicObject) {
        let m = &obj.metadata;
        let id = self.id(
            &holdfast_shared::kcp::cluster_of(&obj),
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
        );
        self.view.dependents.index.delete(&id);
    }

    fn status(&mut self, from: &Status, to: &Status) {
        let key = &self.key;
        // Until synced again, answers come from live lookups.
        self.view.dependents.synced.insert(key.clone(), to.synced);
        let was_forbidden = matches!(from.state, WatchState::Forbidden(_));
        match &to.state {
            WatchState::Listed => {
                if was_forbidden {
                    self.view.metrics.set_unreadable(key, false);
                    tracing::info!(resource = %key, "{key} is readable now");
                }
                tracing::info!(resource = %key, "dependents index synced");
            }
            // Live lookups are refused as well: the rule's DELETEs are refused until
            // holdfast's reads role grants the type.
            WatchState::Forbidden(_) if !was_forbidden => {
                self.view.metrics.set_unreadable(key, true);
                tracing::warn!(resource = %key, "may not list {key} (403): DELETEs the DependencyRules naming it as dependent govern are refused until holdfast's reads role grants it");
            }
            WatchState::Failed(e) => {
                tracing::warn!(resource = %key, error = %e, "dependents watch error; retrying");
            }
            _ => {}
        }
    }
}

/// Watches dependent resource `key` into the index (on kcp through every endpoint of
/// its APIExport), until the task is stopped.
async fn watch_dependents(view: Arc<WebhookView>, key: String, deps: Vec<CompiledDependency>) {
    let Some(first) = deps.first() else { return };
    let ar = dependent_resource(first);
    let export = match view.topology {
        Topology::Kubernetes => None,
        // Checked before the task was started (`match_watches`).
        Topology::Kcp => match super::kcp::dependent_export(&view.clients, first) {
            Some(e) => Some(e),
            None => return,
        },
    };
    let feed = DependentsFeed {
        view: view.clone(),
        key: key.clone(),
        deps,
        listed: None,
    };
    match (export, view.clients.home().cloned()) {
        (Some((home, export)), _) => {
            let endpoints = Endpoints::new(feed);
            view.dependents.endpoints.insert(key, endpoints.clone());
            super::kcp::watch_endpoints(&view.clients, endpoints, home, &export, move |c| {
                Api::all_with(c, &ar)
            })
            .await;
        }
        (None, Some(client)) => {
            let api: Api<DynamicObject> = Api::all_with(client, &ar);
            watch::run(api, watcher::Config::default(), NotFound::Empty, feed).await;
        }
        (None, None) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{DependentsMode, test_view};
    use holdfast_shared::{api::common::GroupResource, watch::Driver};

    fn vm(name: &str, vpc: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "compute.test.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": "prod"},
            "spec": {"vpc": vpc}
        }))
        .expect("vm")
    }

    /// A VM of logical cluster `lc` (as a virtual workspace delivers it).
    fn vm_in(lc: &str, name: &str, vpc: &str) -> DynamicObject {
        let mut o = vm(name, vpc);
        o.metadata.annotations = Some(
            [(
                holdfast_shared::names::KCP_CLUSTER_ANNOTATION.to_string(),
                lc.to_string(),
            )]
            .into(),
        );
        o
    }

    fn vms_rule(view: &WebhookView, cluster: &str) -> CompiledDependency {
        let rule = crate::view::vms_need_vpcs(".spec.vpc");
        view.policies
            .registry()
            .apply(cluster, &rule)
            .expect("compiles");
        view.policies
            .registry()
            .dependencies
            .find(&GroupResource::new("network.test.io", "vpcs"))
            .and_then(|rules| rules.first().and_then(|deps| deps.first().cloned()))
            .expect("compiled dependency")
    }

    #[tokio::test]
    async fn on_kcp_only_a_covered_consumer_is_answered_from_the_index() {
        use holdfast_shared::{
            endpoints::{EndpointFeed, SliceFeed},
            policy::ClusterLookup,
        };
        let view = test_view(Topology::Kcp, DependentsMode::Watch);
        let dep = vms_rule(&view, "compute");
        let key = dep.dependent_gr().to_string();
        let feed = DependentsFeed {
            view: view.clone(),
            key: key.clone(),
            deps: vec![dep.clone()],
            listed: None,
        };
        let endpoints = Endpoints::new(feed);
        view.dependents
            .endpoints
            .insert(key.clone(), endpoints.clone());
        let started = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = started.clone();
        let mut slice = SliceFeed::new(
            endpoints.clone(),
            "compute.test.io",
            Box::new(move |f: EndpointFeed<DynamicObject, DependentsFeed>| {
                sink.lock().push(f);
                None
            }),
        );
        let slice_object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExportEndpointSlice",
            "metadata": {"name": "compute.test.io"},
            "status": {"endpoints": [{"url": "https://shard-a/vw"}, {"url": "https://shard-b/vw"}]}
        }))
        .expect("slice");
        let mut sd = Driver::new(NotFound::Unknown);
        sd.handle(&mut slice, Ok(watcher::Event::Init));
        sd.handle(&mut slice, Ok(watcher::Event::InitApply(slice_object)));
        sd.handle(&mut slice, Ok(watcher::Event::InitDone));
        let mut feeds = std::mem::take(&mut *started.lock());
        assert_eq!(feeds.len(), 2);
        // Shard a lists a VM of consumer lc-a; shard b's watch has not listed yet.
        let mut da = Driver::new(NotFound::Unknown);
        da.handle(&mut feeds[0], Ok(watcher::Event::Init));
        da.handle(
            &mut feeds[0],
            Ok(watcher::Event::InitApply(vm_in("lc-a", "web", "main"))),
        );
        da.handle(&mut feeds[0], Ok(watcher::Event::InitDone));
        let lookups = |source: &str| {
            view.metrics
                .dependents_lookups
                .with_label_values(&[source])
                .get()
        };
        let ask = |cluster: &'static str| {
            let view = view.clone();
            let dep = dep.clone();
            async move {
                view.dependents(DependentsQuery {
                    cluster,
                    dep: &dep,
                    name: "main",
                    namespace: Some("prod"),
                })
                .await
                .map(|r| r.iter().map(Referrer::describe).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
            }
        };
        // Covered: from the index, no API call.
        assert_eq!(
            ask("lc-a").await,
            Ok(vec!["VirtualMachine prod/web".to_string()])
        );
        assert_eq!((lookups("index"), lookups("live")), (1, 0));
        // Not covered (on shard b, or nowhere): live, through the front-proxy (this
        // view has no API server, so the live lookup fails: refused, never allowed).
        assert_eq!(
            ask("lc-b").await,
            Err("no API server client is configured".to_string())
        );
        assert_eq!((lookups("index"), lookups("live")), (1, 1));
        // Shard a fails: it covers nothing until it lists again.
        da.handle(
            &mut feeds[0],
            Err(watcher::Error::InitialListFailed(kube::Error::Api(
                Box::new(kube::core::Status::failure("boom", "").with_code(500)),
            ))),
        );
        assert!(ask("lc-a").await.is_err());
        assert_eq!((lookups("index"), lookups("live")), (1, 2));
        // Shard b never listed, shard a failed: the merged index is not synced.
        assert!(!endpoints.synced());
    }

    #[test]
    fn the_index_answers_only_while_synced() {
        let view = test_view(Topology::Kubernetes, DependentsMode::Watch);
        let dep = vms_rule(&view, "");
        let key = dep.dependent_gr().to_string();
        let target = holdfast_shared::index::index_target(&dep);
        let mut feed = DependentsFeed {
            view: view.clone(),
            key: key.clone(),
            deps: vec![dep],
            listed: None,
        };
        let unreadable = |v: &WebhookView| v.metrics.unreadable_series(&key);
        let synced = |v: &WebhookView| v.dependents.synced.get(&key).is_some_and(|s| *s);
        let referrers = |v: &WebhookView| {
            v.dependents
                .index
                .lookup("", &target, "main", Some("prod"))
                .iter()
                .map(Referrer::describe)
                .collect::<Vec<_>>()
        };
        let status = |code: u16| {
            let s = kube::core::Status::failure("refused", "").with_code(code);
            Err(watcher::Error::InitialListFailed(kube::Error::Api(
                Box::new(s),
            )))
        };
        let mut d = Driver::new(NotFound::Empty);
        d.handle(&mut feed, status(403));
        assert!(!synced(&view));
        assert!(unreadable(&view));
        d.handle(&mut feed, Ok(watcher::Event::Init));
        d.handle(&mut feed, Ok(watcher::Event::InitApply(vm("web", "main"))));
        d.handle(&mut feed, Ok(watcher::Event::InitDone));
        assert!(synced(&view));
        assert!(!unreadable(&view));
        assert_eq!(referrers(&view), ["VirtualMachine prod/web"]);
        d.handle(&mut feed, Ok(watcher::Event::Apply(vm("db", "main"))));
        d.handle(&mut feed, Ok(watcher::Event::Delete(vm("web", "main"))));
        assert_eq!(referrers(&view), ["VirtualMachine prod/db"]);
        // A failure: unsynced (live lookups answer), what was known kept.
        d.handle(&mut feed, status(500));
        assert!(!synced(&view));
        assert_eq!(referrers(&view), ["VirtualMachine prod/db"]);
        // A relist drops what is gone.
        d.handle(&mut feed, Ok(watcher::Event::Init));
        d.handle(&mut feed, Ok(watcher::Event::InitDone));
        assert!(synced(&view));
        assert!(referrers(&view).is_empty());
        // A list is taken object by object: each one indexed as it comes, what the
        // list leaves out dropped at its end.
        d.handle(&mut feed, Ok(watcher::Event::Apply(vm("db", "main"))));
        d.handle(&mut feed, status(500));
        d.handle(&mut feed, Ok(watcher::Event::Init));
        d.handle(&mut feed, Ok(watcher::Event::InitApply(vm("web", "main"))));
        assert_eq!(
            referrers(&view),
            ["VirtualMachine prod/db", "VirtualMachine prod/web"]
        );
        d.handle(&mut feed, Ok(watcher::Event::InitDone));
        assert_eq!(referrers(&view), ["VirtualMachine prod/web"]);
    }
}
