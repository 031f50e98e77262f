//! Watch-fed object stores the policies read instead of calling the API server per
//! request: metadata of the objects of every resource a policy names (for
//! CriticalService criteria, provider existence and namespace containment), whole
//! anchor objects (AnchorRule toggles), and every object carrying a protection label
//! (containment of label-protected objects). A store that has not synced yet is not
//! trusted: callers fall back to a live read, or refuse.

use dashmap::DashMap;
use futures::StreamExt;
use holdfast_shared::{api::common::GroupResource, names::KCP_CLUSTER_ANNOTATION};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject},
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, RwLock,
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
}

/// Objects of one resource.
pub struct ResourceStore {
    /// The resource.
    pub resource: ApiResource,
    /// Whether it is namespaced.
    pub namespaced: bool,
    synced: AtomicBool,
    objects: RwLock<HashMap<ObjKey, Arc<Value>>>,
}

impl ResourceStore {
    /// An empty, unsynced store.
    pub fn new(resource: ApiResource, namespaced: bool) -> Self {
        Self {
            resource,
            namespaced,
            synced: AtomicBool::new(false),
            objects: RwLock::new(HashMap::new()),
        }
    }

    /// Whether the initial list has completed.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ObjKey, Arc<Value>>> {
        match self.objects.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ObjKey, Arc<Value>>> {
        match self.objects.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// One object.
    pub fn get(&self, key: &ObjKey) -> Option<Arc<Value>> {
        self.read().get(key).cloned()
    }

    /// Objects of `cluster` carrying `finalizer`.
    pub fn count_finalizer(&self, cluster: &str, finalizer: &str) -> usize {
        self.read()
            .iter()
            .filter(|((c, _, _), _)| c == cluster)
            .filter(|(_, o)| {
                o["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(finalizer)))
            })
            .count()
    }

    /// Objects in namespace `ns` of `cluster`.
    pub fn in_namespace(&self, cluster: &str, ns: &str) -> Vec<Arc<Value>> {
        self.read()
            .iter()
            .filter(|((c, n, _), _)| c == cluster && n == ns)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
}

fn key_of(meta: &Value) -> ObjKey {
    let cluster = meta["annotations"][KCP_CLUSTER_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (
        cluster,
        meta["namespace"].as_str().unwrap_or_default().to_string(),
        meta["name"].as_str().unwrap_or_default().to_string(),
    )
}

fn meta_value(meta: &PartialObjectMeta<DynamicObject>) -> Value {
    let m = serde_json::to_value(&meta.metadata).unwrap_or(Value::Null);
    json!({ "metadata": m })
}

/// A 404 from the API server (the resource is not served).
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// A watch failure that means the resource is not served.
pub fn watcher_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => is_not_found(e),
        watcher::Error::WatchError(s) => s.code == 404,
        watcher::Error::NoResourceVersion => false,
    }
}

/// Runs the watch feeding `store` until aborted.
pub async fn run_store(
    client: Client,
    store: Arc<ResourceStore>,
    depth: Depth,
    label_selector: Option<String>,
) {
    let mut cfg = watcher::Config::default();
    if let Some(sel) = &label_selector {
        cfg = cfg.labels(sel);
    }
    let name = store.resource.plural.clone();
    let mut seen: HashSet<ObjKey> = HashSet::new();
    let mut buffer: Vec<(ObjKey, Value)> = Vec::new();
    macro_rules! handle {
        ($stream:expr, $to_value:expr) => {{
            let mut stream = $stream;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => {
                        seen.clear();
                        buffer.clear();
                    }
                    Ok(watcher::Event::InitApply(obj)) => {
                        let v: Value = $to_value(&obj);
                        let key = key_of(&v["metadata"]);
                        seen.insert(key.clone());
                        buffer.push((key, v));
                    }
                    Ok(watcher::Event::InitDone) => {
                        let mut objects = store.write();
                        objects.retain(|k, _| seen.contains(k));
                        for (k, v) in buffer.drain(..) {
                            objects.insert(k, Arc::new(v));
                        }
                        drop(objects);
                        store.synced.store(true, Ordering::Release);
                        tracing::debug!(resource = %name, "store synced");
                    }
                    Ok(watcher::Event::Apply(obj)) => {
                        let v: Value = $to_value(&obj);
                        let key = key_of(&v["metadata"]);
                        store.write().insert(key, Arc::new(v));
                    }
                    Ok(watcher::Event::Delete(obj)) => {
                        let v: Value = $to_value(&obj);
                        store.write().remove(&key_of(&v["metadata"]));
                    }
                    Err(e) if watcher_not_found(&e) => {
                        store.write().clear();
                        store.synced.store(true, Ordering::Release);
                    }
                    Err(e) => {
                        store.synced.store(false, Ordering::Release);
                        tracing::warn!(resource = %name, error = %e, "store watch error; retrying");
                    }
                }
            }
        }};
    }
    match depth {
        Depth::Metadata => handle!(
            watcher(
                Api::<PartialObjectMeta<DynamicObject>>::all_with(client, &store.resource),
                cfg
            )
            .default_backoff()
            .boxed(),
            meta_value
        ),
        Depth::Full => handle!(
            watcher(Api::<DynamicObject>::all_with(client, &store.resource), cfg)
                .default_backoff()
                .boxed(),
            |o: &DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null)
        ),
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
