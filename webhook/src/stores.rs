//! Watch-fed object stores the policies read instead of calling the API server per
//! request: metadata of the objects of every resource a policy names (for
//! CriticalService criteria, provider existence and namespace containment), whole
//! anchor objects (AnchorRule toggles), and every object carrying a protection label
//! (containment of label-protected objects). A store that has not synced yet is not
//! trusted: callers fall back to a live read, or refuse.

use dashmap::DashMap;
use futures::StreamExt;
use holdfast_shared::{
    api::common::GroupResource,
    names::KCP_CLUSTER_ANNOTATION,
    policy::LookupError,
    watch::{self, Driver, Index, NotFound, Status, WatchState, api_status},
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::RwLock;
use serde_json::{Value, json};
use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

/// (logical cluster, namespace, name).
pub type ObjKey = (String, String, String);

/// How much of each object a store keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Depth {
    /// Metadata only (a metadata watch).
    Metadata,
    /// The whole object (anchors, whose toggle lives in the spec).
    Full,
    /// Metadata and `status.phase` only (Pods, for Cascading protection): a full
    /// watch trimmed as each object arrives.
    Phase,
}

/// The objects of one resource, indexed for what admission asks: by (cluster,
/// namespace) for containment, and a count per (cluster, finalizer) for
/// CriticalService criteria — no scan of the whole resource per request.
#[derive(Default)]
struct Objects {
    by_ns: HashMap<(String, String), HashMap<String, Arc<Value>>>,
    finalizers: HashMap<(String, String), usize>,
    len: usize,
}

fn finalizers_of(o: &Value) -> impl Iterator<Item = &str> {
    o["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

impl Objects {
    fn insert(&mut self, (cluster, ns, name): ObjKey, obj: Arc<Value>) {
        self.remove(&(cluster.clone(), ns.clone(), name.clone()));
        for f in finalizers_of(&obj) {
            *self
                .finalizers
                .entry((cluster.clone(), f.to_string()))
                .or_default() += 1;
        }
        self.by_ns
            .entry((cluster, ns))
            .or_default()
            .insert(name, obj);
        self.len += 1;
    }

    fn remove(&mut self, (cluster, ns, name): &ObjKey) {
        let key = (cluster.clone(), ns.clone());
        let Some(names) = self.by_ns.get_mut(&key) else {
            return;
        };
        let Some(old) = names.remove(name) else {
            return;
        };
        if names.is_empty() {
            self.by_ns.remove(&key);
        }
        self.len -= 1;
        for f in finalizers_of(&old) {
            let k = (cluster.clone(), f.to_string());
            if let Some(n) = self.finalizers.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.finalizers.remove(&k);
                }
            }
        }
    }
}

/// Objects of one resource.
pub struct ResourceStore {
    /// The resource.
    pub resource: ApiResource,
    /// Whether it is namespaced.
    pub namespaced: bool,
    synced: AtomicBool,
    /// The last list or watch was refused (403): the webhook may not read the type.
    forbidden: AtomicBool,
    objects: RwLock<Objects>,
}

impl ResourceStore {
    /// An empty, unsynced store.
    pub fn new(resource: ApiResource, namespaced: bool) -> Self {
        Self {
            resource,
            namespaced,
            synced: AtomicBool::new(false),
            forbidden: AtomicBool::new(false),
            objects: RwLock::new(Objects::default()),
        }
    }

    /// Whether the initial list has completed.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Whether the API server refuses the webhook the type (403) since the last
    /// list: the store is not trusted, and label containment leaves it out.
    pub fn forbidden(&self) -> bool {
        self.forbidden.load(Ordering::Acquire)
    }

    fn read(&self) -> parking_lot::RwLockReadGuard<'_, Objects> {
        self.objects.read()
    }

    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, Objects> {
        self.objects.write()
    }

    /// One object.
    pub fn get(&self, (cluster, ns, name): &ObjKey) -> Option<Arc<Value>> {
        self.read()
            .by_ns
            .get(&(cluster.clone(), ns.clone()))
            .and_then(|names| names.get(name))
            .cloned()
    }

    /// Objects of `cluster` carrying `finalizer`.
    pub fn count_finalizer(&self, cluster: &str, finalizer: &str) -> usize {
        self.read()
            .finalizers
            .get(&(cluster.to_string(), finalizer.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Objects in namespace `ns` of `cluster`.
    pub fn in_namespace(&self, cluster: &str, ns: &str) -> Vec<Arc<Value>> {
        self.read()
            .by_ns
            .get(&(cluster.to_string(), ns.to_string()))
            .map(|names| names.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Every object of `cluster`, in every namespace.
    pub fn in_cluster(&self, cluster: &str) -> Vec<Arc<Value>> {
        self.read()
            .by_ns
            .iter()
            .filter(|((c, _), _)| c == cluster)
            .flat_map(|(_, names)| names.values().cloned())
            .collect()
    }

    /// Whether some object satisfies `f`.
    pub fn any(&self, f: impl Fn(&Value) -> bool) -> bool {
        self.read()
            .by_ns
            .values()
            .any(|names| names.values().any(|o| f(o)))
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.read().len
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.read().len == 0
    }
}

/// An object's key. Its logical cluster is the annotation `kcp.io/cluster` on kcp
/// only: elsewhere anyone who may patch the object writes it, and an object filed
/// under a cluster of its choosing would vanish from the namespace it is in for
/// containment (docs/security.md row 1).
fn key_of(meta: &Value) -> ObjKey {
    let cluster = if holdfast_shared::topology::honours_logical_cluster() {
        meta["annotations"][KCP_CLUSTER_ANNOTATION]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        String::new()
    };
    (
        cluster,
        meta["namespace"].as_str().unwrap_or_default().to_string(),
        meta["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// Keeps only what Cascading protection reads of a Pod: its metadata (without
/// managed fields) and `status.phase`.
pub fn trim_to_phase(obj: &mut DynamicObject) {
    obj.metadata.managed_fields = None;
    let phase = obj.data["status"]["phase"].clone();
    obj.data = if phase.is_null() {
        json!({})
    } else {
        json!({ "status": { "phase": phase } })
    };
}

/// A 404 from the API server (the resource is not served).
pub fn is_not_found(e: &kube::Error) -> bool {
    api_status(e) == Some(404)
}

/// A 403 from the API server: the webhook's identity may not read the resource.
pub fn is_forbidden(e: &kube::Error) -> bool {
    api_status(e) == Some(403)
}

/// The lookup error for a failed read of `resource`: a 403 says which permission
/// is missing and where it comes from.
pub fn lookup_error(resource: &str, e: kube::Error) -> LookupError {
    if is_forbidden(&e) {
        unreadable_error(resource)
    } else {
        LookupError::from_error(e)
    }
}

/// The lookup error for a resource the webhook may not read.
pub fn unreadable_error(resource: &str) -> LookupError {
    LookupError::unreadable(format!(
        "holdfast may not read {resource} yet (get, list, watch on {resource} is not granted to \
         its ServiceAccount; the controller grants what the policies name through ClusterRole \
         holdfast-reads)"
    ))
}

/// Feeds one [`ResourceStore`] from a watch of `K` (each object made a JSON value by
/// `to_value`), reporting a refusal (403) once through `on_forbidden(true)` and the
/// first complete list afterwards through `on_forbidden(false)`.
struct StoreFeed<F, R> {
    store: Arc<ResourceStore>,
    to_value: F,
    on_forbidden: R,
}

impl<K, F: Fn(K) -> Value, R: Fn(bool)> Index<K> for StoreFeed<F, R> {
    fn reset(&mut self, objects: Vec<K>) {
        let mut fresh = Objects::default();
        for o in objects {
            let v = (self.to_value)(o);
            fresh.insert(key_of(&v["metadata"]), Arc::new(v));
        }
        *self.store.write() = fresh;
    }

    fn apply(&mut self, object: K) {
        let v = (self.to_value)(object);
        self.store
            .write()
            .insert(key_of(&v["metadata"]), Arc::new(v));
    }

    fn delete(&mut self, object: K) {
        let v = (self.to_value)(object);
        self.store.write().remove(&key_of(&v["metadata"]));
    }

    fn status(&mut self, _from: &Status, to: &Status) {
        let store = &self.store;
        store.synced.store(to.synced, Ordering::Release);
        match &to.state {
            WatchState::Forbidden(_) => {
                if !store.forbidden.swap(true, Ordering::AcqRel) {
                    (self.on_forbidden)(true);
                }
            }
            WatchState::Listed => {
                if store.forbidden.swap(false, Ordering::AcqRel) {
                    (self.on_forbidden)(false);
                }
                tracing::debug!(resource = %store.resource.plural, "store synced");
            }
            WatchState::Failed(e) => {
                tracing::warn!(resource = %store.resource.plural, error = %e, "store watch error; listing again");
            }
            WatchState::Starting | WatchState::NotServed => {}
        }
    }
}

fn full_value(o: DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

/// Runs the watch feeding `store` until aborted (see [`holdfast_shared::watch`] for
/// what synced and each failure mean; a 404 empties it where `not_found` says so).
pub async fn run_store(
    client: Client,
    store: Arc<ResourceStore>,
    depth: Depth,
    label_selector: Option<String>,
    not_found: NotFound,
    on_forbidden: impl Fn(bool) + Send + Sync + 'static,
) {
    let mut cfg = watcher::Config::default();
    if let Some(sel) = &label_selector {
        cfg = cfg.labels(sel);
    }
    let ar = store.resource.clone();
    match depth {
        Depth::Metadata => {
            let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client, &ar);
            let to_value = |m: PartialObjectMeta<DynamicObject>| json!({ "metadata": serde_json::to_value(&m.metadata).unwrap_or(Value::Null) });
            let feed = StoreFeed {
                store,
                to_value,
                on_forbidden,
            };
            watch::run(api, cfg, not_found, feed).await;
        }
        Depth::Full => {
            let api = Api::<DynamicObject>::all_with(client, &ar);
            let feed = StoreFeed {
                store,
                to_value: full_value,
                on_forbidden,
            };
            watch::run(api, cfg, not_found, feed).await;
        }
        Depth::Phase => {
            let api = Api::<DynamicObject>::all_with(client, &ar);
            let mut feed = StoreFeed {
                store,
                to_value: full_value,
                on_forbidden,
            };
            // Trimmed as each object arrives, so a list of Pods is never held whole.
            let streams = || {
                watcher(api.clone(), cfg.clone())
                    .modify(trim_to_phase)
                    .boxed()
            };
            watch::run_streams(streams, &mut Driver::new(not_found), &mut feed).await;
        }
    }
}

/// Resolves group/resource (plural, or a kind as some specs write it) to an
/// ApiResource through discovery, with a cache.
#[derive(Default)]
pub struct Resolver {
    cache: DashMap<(String, GroupResource), (ApiResource, bool)>,
}

/// Why a resource could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The group or resource is not served.
    #[error("resource {0} is not served by the API server")]
    NotServed(String),
    /// Discovery failed.
    #[error("discovery of {0} failed: {1}")]
    Discovery(String, String),
}

impl Resolver {
    /// The ApiResource and scope (namespaced?) of `gr`.
    pub async fn resolve(
        &self,
        client: &Client,
        cluster: &str,
        gr: &GroupResource,
    ) -> Result<(ApiResource, bool), ResolveError> {
        let key = (cluster.to_string(), gr.clone());
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit.clone());
        }
        let group = kube::discovery::group(client, &gr.group)
            .await
            .map_err(|e| match &e {
                kube::Error::Api(s) if s.code == 404 => ResolveError::NotServed(gr.to_string()),
                _ => ResolveError::Discovery(gr.to_string(), e.to_string()),
            })?;
        let found = group
            .recommended_resources()
            .into_iter()
            .find(|(ar, _)| ar.plural == gr.resource || ar.kind.eq_ignore_ascii_case(&gr.resource));
        match found {
            Some((ar, caps)) => {
                let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
                self.cache.insert(key, (ar.clone(), namespaced));
                Ok((ar, namespaced))
            }
            None => Err(ResolveError::NotServed(gr.to_string())),
        }
    }

    /// Forgets everything (e.g. after CRDs change).
    pub fn clear(&self) {
        self.cache.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(ns: &str, name: &str, finalizers: &[&str]) -> Arc<Value> {
        Arc::new(json!({"metadata": {"namespace": ns, "name": name, "finalizers": finalizers}}))
    }

    fn key(c: &str, ns: &str, name: &str) -> ObjKey {
        (c.into(), ns.into(), name.into())
    }

    fn api_error(code: u16) -> watcher::Error {
        let status = kube::core::Status::failure("refused", "").with_code(code);
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
    }

    fn meta_of(ns: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}})
    }

    #[test]
    fn a_failed_read_keeps_the_client_error_and_a_refusal_names_the_grant() {
        use std::error::Error as _;
        let status = |code| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("boom", "InternalError").with_code(code),
            ))
        };
        let failed = lookup_error("pods", status(500));
        assert_eq!(failed.to_string(), status(500).to_string());
        let source = failed
            .source()
            .and_then(|s| s.downcast_ref::<kube::Error>());
        assert!(
            matches!(source, Some(kube::Error::Api(s)) if s.code == 500),
            "{failed:?}"
        );
        let refused = lookup_error("pods", status(403));
        assert!(matches!(refused, LookupError::Unreadable(_)), "{refused:?}");
        assert_eq!(refused.to_string(), unreadable_error("pods").to_string());
    }

    #[test]
    fn a_store_is_trusted_only_while_synced_and_reports_a_refusal_once() {
        let ar = ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        };
        let store = Arc::new(ResourceStore::new(ar, true));
        let reports = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = reports.clone();
        let mut feed = StoreFeed {
            store: store.clone(),
            to_value: |v: Value| v,
            on_forbidden: move |f: bool| seen.lock().push(f),
        };
        let mut d = Driver::new(NotFound::Empty);
        // Refused twice: reported once, never synced, nothing read as empty.
        d.handle(&mut feed, Err(api_error(403)));
        d.handle(&mut feed, Err(api_error(403)));
        assert!(!store.synced());
        assert!(store.forbidden());
        d.handle(&mut feed, Ok(watcher::Event::Init));
        d.handle(&mut feed, Ok(watcher::Event::InitApply(meta_of("a", "x"))));
        assert!(!store.synced(), "synced before the list completed");
        d.handle(&mut feed, Ok(watcher::Event::InitDone));
        assert!(store.synced());
        assert!(!store.forbidden());
        assert_eq!(*reports.lock(), [true, false]);
        assert_eq!(store.in_namespace("", "a").len(), 1);
        d.handle(&mut feed, Ok(watcher::Event::Delete(meta_of("a", "x"))));
        assert!(store.is_empty());
        // Any other failure: unsynced until listed again.
        d.handle(&mut feed, Ok(watcher::Event::Apply(meta_of("a", "y"))));
        d.handle(&mut feed, Err(api_error(500)));
        assert!(!store.synced());
        assert_eq!(store.len(), 1, "kept, not emptied");
        // Kubernetes: a 404 (the type is not served) is an empty, synced store.
        d.handle(&mut feed, Err(api_error(404)));
        assert!(store.synced());
        assert!(store.is_empty());
        assert_eq!(reports.lock().len(), 2);
    }

    #[test]
    fn indexes_follow_inserts_updates_and_removals() {
        let ar = ApiResource {
            group: "g".into(),
            version: "v1".into(),
            api_version: "g/v1".into(),
            kind: "K".into(),
            plural: "ks".into(),
        };
        let store = ResourceStore::new(ar, true);
        {
            let mut o = store.write();
            o.insert(key("", "a", "x"), obj("a", "x", &["f/1"]));
            o.insert(key("", "a", "y"), obj("a", "y", &["f/1", "f/2"]));
            o.insert(key("lc", "a", "z"), obj("a", "z", &["f/1"]));
        }
        assert_eq!(store.len(), 3);
        assert_eq!(store.count_finalizer("", "f/1"), 2);
        assert_eq!(store.count_finalizer("lc", "f/1"), 1);
        assert_eq!(store.in_namespace("", "a").len(), 2);
        assert!(store.in_namespace("", "b").is_empty());
        // An update that drops a finalizer, then a removal.
        store
            .write()
            .insert(key("", "a", "y"), obj("a", "y", &["f/2"]));
        assert_eq!(store.count_finalizer("", "f/1"), 1);
        assert_eq!(store.count_finalizer("", "f/2"), 1);
        store.write().remove(&key("", "a", "x"));
        assert_eq!(store.count_finalizer("", "f/1"), 0);
        assert_eq!(store.len(), 2);
        assert!(store.get(&key("", "a", "x")).is_none());
        assert!(store.get(&key("", "a", "y")).is_some());
        assert_eq!(store.len(), 2);
        assert_eq!(store.in_cluster("").len(), 1);
        assert_eq!(store.in_cluster("lc").len(), 1);
        assert!(store.any(|o| o["metadata"]["name"] == "z"));
        assert!(!store.any(|o| o["metadata"]["name"] == "x"));
    }

    #[test]
    fn pods_are_trimmed_to_metadata_and_phase() {
        let mut pod: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "s", "labels": {"a": "b"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        }))
        .expect("pod");
        trim_to_phase(&mut pod);
        let v = serde_json::to_value(&pod).expect("value");
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "namespace": "s", "labels": {"a": "b"}},
                   "status": {"phase": "Running"}})
        );
        let mut bare: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}, "spec": {}
        }))
        .expect("pod");
        trim_to_phase(&mut bare);
        assert_eq!(
            serde_json::to_value(&bare).expect("value"),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}})
        );
    }
}
