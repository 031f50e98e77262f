//! Every endpoint of an APIExportEndpointSlice, watched into one index.
//!
//! On kcp an APIExport's virtual workspace has one URL per shard that holds a binding
//! to the export, listed in the APIExportEndpointSlice of the export's name, and URLs
//! come and go with the bindings. A provider sees every consumer only by watching the
//! slice and every URL in it. [`spawn`] does that: it watches the slice (through the
//! one driver in [`watch`], a field selector on its name) and keeps one watch per URL
//! (`<url>/clusters/*`, through [`watch::run`]), started when the URL appears and
//! stopped when it disappears. Every watch feeds one merged [`Index`].
//!
//! # Partitions
//!
//! Each endpoint's watch is a partition of the merged index: a list (reset) of one
//! endpoint replaces only what that endpoint contributed, by removing the keys it no
//! longer lists ([`Partitioned::remove`]) and applying what it lists; apply and delete
//! pass through. The merged index never hears [`Index::reset`]. Each partition keeps
//! the keys of its objects (logical cluster, namespace, name), not the objects, so a
//! large index is not held twice. An endpoint that disappears takes its keys with it.
//! A logical cluster lives on exactly one shard, so a key comes from one endpoint; a key
//! two endpoints list leaves the merged index only when neither lists it.
//!
//! # Synced and coverage
//!
//! The merged index is **synced** when the slice is read (a complete list that holds
//! the slice, nothing failed since) and every current endpoint's watch is synced (see
//! [`watch`]). A slice with no endpoint is synced and empty: no shard holds a binding.
//! A slice that does not exist, or one endpoint failing, makes the merged index
//! unsynced (fail closed).
//!
//! A logical cluster is **covered** when a synced endpoint's watch holds an object of
//! it: that endpoint's shard holds the cluster, so the watch sees every object of it.
//! A cluster not covered (no object yet, its shard's URL not yet in the slice, its
//! endpoint failing) must be read live.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt,
    marker::PhantomData,
    sync::{Arc, RwLock},
};

use kube::{Api, Client, Resource, api::DynamicObject, runtime::watcher};
use serde::de::DeserializeOwned;

use crate::{
    kcp::{Clients, cluster_of, endpoint_slice_resource},
    locks,
    watch::{self, Index, NotFound, Status, WatchState},
};

/// An object's key in a merged index: (logical cluster, namespace, name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Logical cluster (`kcp.io/cluster`).
    pub cluster: String,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `object`.
    pub fn of<K: Resource>(object: &K) -> Self {
        let m = object.meta();
        Self {
            cluster: cluster_of(object),
            namespace: m.namespace.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
        }
    }
}

/// An [`Index`] several endpoints feed: an object can also be removed by its key
/// (an endpoint listed again without it, or went away).
pub trait Partitioned<K>: Index<K> {
    /// Removes the object `key`.
    fn remove(&mut self, key: &ObjectKey);
}

/// What one endpoint's watch contributed.
struct Part {
    /// Which start of the URL this is (a stopped watch's late events are ignored).
    id: u64,
    status: Status,
    keys: HashSet<ObjectKey>,
    /// Objects per logical cluster.
    clusters: HashMap<String, usize>,
    /// Whether its set of clusters or its status changed since readers last saw it.
    reshaped: bool,
}

impl Part {
    fn add(&mut self, key: ObjectKey) {
        if !self.keys.contains(&key) {
            let n = self.clusters.entry(key.cluster.clone()).or_default();
            *n += 1;
            self.reshaped |= *n == 1;
            self.keys.insert(key);
        }
    }

    fn take(&mut self, key: &ObjectKey) -> bool {
        if !self.keys.remove(key) {
            return false;
        }
        if let Some(n) = self.clusters.get_mut(&key.cluster) {
            *n -= 1;
            if *n == 0 {
                self.clusters.remove(&key.cluster);
                self.reshaped = true;
            }
        }
        true
    }
}

/// What the slice's watch says.
#[derive(Default)]
struct Slice {
    status: Status,
    /// Whether the last list or event holds the slice.
    present: bool,
}

struct State<I> {
    index: I,
    slice: Slice,
    parts: BTreeMap<String, Part>,
    /// The merged status last reported to `index`.
    status: Status,
    next_id: u64,
    /// Whether the endpoints or the slice changed since readers last saw them.
    reshaped: bool,
}

/// Which logical clusters synced endpoints cover, and where objects were seen:
/// readable without waiting for the merged index's lock.
#[derive(Default)]
struct Seen {
    synced: bool,
    /// Cluster → URL of an endpoint whose watch holds objects of it, and whether that
    /// watch is synced.
    clusters: HashMap<String, (String, bool)>,
    urls: Vec<String>,
    /// The endpoints whose watch is synced.
    synced_urls: Vec<String>,
    /// Cluster → endpoint that answered for it when asked directly (see
    /// [`Endpoints::mark_served`]); kept across rebuilds, dropped with the endpoint.
    served: HashMap<String, String>,
}

/// Clusters remembered as served by an endpoint at most; past it the memory starts
/// over (each is asked again once).
const MAX_SERVED: usize = 100_000;

/// A handle on a merged index fed by every endpoint of a slice.
pub struct Endpoints<K, I> {
    state: Arc<RwLock<State<I>>>,
    seen: Arc<RwLock<Seen>>,
    kind: PhantomData<fn(K)>,
}

impl<K, I> Clone for Endpoints<K, I> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            seen: self.seen.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: Resource, I: Partitioned<K>> Endpoints<K, I> {
    /// A merged index over `index`, with no slice read yet.
    pub fn new(index: I) -> Self {
        Self {
            state: Arc::new(RwLock::new(State {
                index,
                slice: Slice::default(),
                parts: BTreeMap::new(),
                status: Status::default(),
                next_id: 0,
                reshaped: true,
            })),
            seen: Arc::new(RwLock::new(Seen::default())),
            kind: PhantomData,
        }
    }

    /// Whether the merged index is synced (see the module docs).
    pub fn synced(&self) -> bool {
        locks::read(&self.seen).synced
    }

    /// Whether a synced endpoint's watch holds objects of logical cluster `cluster`,
    /// or a synced endpoint serves `cluster` (it answered for it when asked: a virtual
    /// workspace serves only the clusters of its shard that bind the export, and its
    /// wildcard watch then holds every object of them, none included).
    pub fn covers(&self, cluster: &str) -> bool {
        let seen = locks::read(&self.seen);
        seen.clusters
            .get(cluster)
            .is_some_and(|(_, synced)| *synced)
            || seen
                .served
                .get(cluster)
                .is_some_and(|url| seen.synced_urls.contains(url))
    }

    /// The endpoints whose watch is synced now.
    pub fn synced_urls(&self) -> Vec<String> {
        locks::read(&self.seen).synced_urls.clone()
    }

    /// Remembers that endpoint `url` answered a request for `cluster` (so its watch
    /// sees every object of `cluster`): [`Endpoints::covers`] holds while `url` is
    /// watched and synced.
    pub fn mark_served(&self, cluster: &str, url: &str) {
        let mut seen = locks::write(&self.seen);
        if seen.served.len() >= MAX_SERVED {
            seen.served.clear();
        }
        seen.served.insert(cluster.to_string(), url.to_string());
    }

    /// The URL of an endpoint whose watch holds objects of `cluster` (synced or not).
    pub fn seen_at(&self, cluster: &str) -> Option<String> {
        locks::read(&self.seen)
            .clusters
            .get(cluster)
            .map(|(url, _)| url.clone())
    }

    /// The endpoint URLs watched now.
    pub fn urls(&self) -> Vec<String> {
        locks::read(&self.seen).urls.clone()
    }

    /// Reads the merged index.
    pub fn with_index<T>(&self, f: impl FnOnce(&I) -> T) -> T {
        f(&locks::read(&self.state).index)
    }

    /// Starts a partition for `url`; returns the feed its watch drives.
    fn start(&self, url: &str) -> EndpointFeed<K, I> {
        let mut st = locks::write(&self.state);
        let id = st.next_id;
        st.next_id += 1;
        if let Some(old) = st.parts.remove(url) {
            drop_part(&mut st, old);
        }
        st.parts.insert(
            url.to_string(),
            Part {
                id,
                status: Status::default(),
                keys: HashSet::new(),
                clusters: HashMap::new(),
                reshaped: true,
            },
        );
        self.settle(&mut st);
        EndpointFeed {
            endpoints: self.clone(),
            url: url.to_string(),
            id,
            listed: None,
        }
    }

    /// Stops the partition of `url`: its objects leave the merged index.
    fn stop(&self, url: &str) {
        let mut st = locks::write(&self.state);
        if let Some(part) = st.parts.remove(url) {
            drop_part(&mut st, part);
            st.reshaped = true;
        }
        self.settle(&mut st);
    }

    /// The slice's watch status or presence changed.
    fn slice(&self, f: impl FnOnce(&mut Slice)) {
        let mut st = locks::write(&self.state);
        f(&mut st.slice);
        st.reshaped = true;
        self.settle(&mut st);
    }

    /// Runs `f` on the partition `url` started as `id`, if it still runs.
    fn part(&self, url: &str, id: u64, f: impl FnOnce(&mut Part, &mut I, &BTreeMap<String, Part>)) {
        let mut guard = locks::write(&self.state);
        let st = &mut *guard;
        let Some(mut part) = st.parts.remove(url) else {
            return;
        };
        if part.id == id {
            f(&mut part, &mut st.index, &st.parts);
        }
        st.parts.insert(url.to_string(), part);
        self.settle(st);
    }

    /// Reports a change of the merged status to the index, and refreshes what
    /// readers see when a partition's clusters or status, or the slice, changed (not
    /// on every object).
    fn settle(&self, st: &mut State<I>) {
        let to = merged_status(&st.slice, &st.parts);
        if to != st.status {
            let from = std::mem::replace(&mut st.status, to);
            st.index.status(&from, &st.status);
            st.reshaped = true;
        }
        let mut reshaped = std::mem::take(&mut st.reshaped);
        for part in st.parts.values_mut() {
            reshaped |= std::mem::take(&mut part.reshaped);
        }
        if !reshaped {
            return;
        }
        let urls: Vec<String> = st.parts.keys().cloned().collect();
        let mut served = std::mem::take(&mut locks::write(&self.seen).served);
        served.retain(|_, url| urls.contains(url));
        let mut seen = Seen {
            synced: st.status.synced,
            clusters: HashMap::new(),
            synced_urls: st
                .parts
                .iter()
                .filter(|(_, p)| p.status.synced)
                .map(|(u, _)| u.clone())
                .collect(),
            urls,
            served,
        };
        for (url, part) in &st.parts {
            for cluster in part.clusters.keys() {
                let entry = seen
                    .clusters
                    .entry(cluster.clone())
                    .or_insert_with(|| (url.clone(), part.status.synced));
                if part.status.synced && !entry.1 {
                    *entry = (url.clone(), true);
                }
            }
        }
        *locks::write(&self.seen) = seen;
    }
}

/// Removes what `part` contributed and no other partition holds.
fn drop_part<K, I: Partitioned<K>>(st: &mut State<I>, part: Part) {
    for key in part.keys {
        if !st.parts.values().any(|p| p.keys.contains(&key)) {
            st.index.remove(&key);
        }
    }
}

/// The merged status: the slice's while it is not read, else the first endpoint's
/// that is not synced, else listed.
fn merged_status(slice: &Slice, parts: &BTreeMap<String, Part>) -> Status {
    if !slice.status.synced {
        return Status {
            state: slice.status.state.clone(),
            synced: false,
        };
    }
    if !slice.present {
        return Status {
            state: WatchState::Failed("the APIExportEndpointSlice does not exist".to_string()),
            synced: false,
        };
    }
    match parts.values().find(|p| !p.status.synced) {
        Some(p) => Status {
            state: p.status.state.clone(),
            synced: false,
        },
        None => Status {
            state: WatchState::Listed,
            synced: true,
        },
    }
}

/// The [`Index`] one endpoint's watch feeds: its partition of the merged index.
pub struct EndpointFeed<K, I> {
    endpoints: Endpoints<K, I>,
    url: String,
    id: u64,
    /// The keys of the list under way (see [`Index::streams_lists`]).
    listed: Option<HashSet<ObjectKey>>,
}

impl<K, I> EndpointFeed<K, I> {
    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl<K: Resource, I: Partitioned<K>> Index<K> for EndpointFeed<K, I> {
    fn reset(&mut self, objects: Vec<K>) {
        crate::watch::reset_by_list(self, objects);
    }

    /// A list is passed on object by object (the merged index takes each one), so
    /// it is never held whole here; only its keys are, to find what it left out.
    fn streams_lists(&self) -> bool {
        true
    }

    fn list_begin(&mut self) {
        self.listed = Some(HashSet::new());
    }

    fn list_apply(&mut self, object: K) {
        let key = ObjectKey::of(&object);
        self.listed
            .get_or_insert_with(HashSet::new)
            .insert(key.clone());
        self.endpoints.part(&self.url, self.id, |part, index, _| {
            part.add(key);
            index.apply(object);
        });
    }

    fn list_end(&mut self) {
        let listed = self.listed.take().unwrap_or_default();
        self.endpoints
            .part(&self.url, self.id, |part, index, others| {
                let gone: Vec<ObjectKey> = part
                    .keys
                    .iter()
                    .filter(|k| !listed.contains(*k))
                    .cloned()
                    .collect();
                for key in gone {
                    part.take(&key);
                    if !others.values().any(|p| p.keys.contains(&key)) {
                        index.remove(&key);
                    }
                }
            });
    }

    fn apply(&mut self, object: K) {
        self.endpoints.part(&self.url, self.id, |part, index, _| {
            part.add(ObjectKey::of(&object));
            index.apply(object);
        });
    }

    fn delete(&mut self, object: K) {
        self.endpoints
            .part(&self.url, self.id, |part, index, others| {
                let key = ObjectKey::of(&object);
                part.take(&key);
                if !others.values().any(|p| p.keys.contains(&key)) {
                    index.delete(object);
                }
            });
    }

    fn status(&mut self, _from: &Status, to: &Status) {
        if let WatchState::Failed(e) | WatchState::Forbidden(e) = &to.state {
            tracing::warn!(endpoint = %self.url, error = %e, "endpoint watch failed; listing again");
        }
        self.endpoints.part(&self.url, self.id, |part, _, _| {
            part.status = to.clone();
            part.reshaped = true;
        });
    }
}

/// The endpoint URLs of an APIExportEndpointSlice object (without trailing `/`,
/// sorted, without duplicates).
pub fn endpoint_urls(slice: &DynamicObject) -> Vec<String> {
    let mut urls: Vec<String> = slice.data["status"]["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["url"].as_str())
        .map(|u| u.trim_end_matches('/').to_string())
        .filter(|u| !u.is_empty())
        .collect();
    urls.sort();
    urls.dedup();
    urls
}

/// Starts an endpoint's watch for `feed`; `None` when it cannot be started (the
/// partition then stays unsynced).
pub type Starter<K, I> =
    Box<dyn FnMut(EndpointFeed<K, I>) -> Option<tokio::task::JoinHandle<()>> + Send>;

/// The slice's watch, as an [`Index`]: starts and stops the endpoints' watches.
pub struct SliceFeed<K: Resource, I: Partitioned<K>> {
    endpoints: Endpoints<K, I>,
    name: String,
    start: Starter<K, I>,
    running: BTreeMap<String, Option<tokio::task::JoinHandle<()>>>,
}

impl<K: Resource, I: Partitioned<K>> SliceFeed<K, I> {
    /// A feed for slice `name` over `endpoints`, starting watches with `start`.
    pub fn new(endpoints: Endpoints<K, I>, name: &str, start: Starter<K, I>) -> Self {
        Self {
            endpoints,
            name: name.to_string(),
            start,
            running: BTreeMap::new(),
        }
    }

    fn set(&mut self, slice: Option<&DynamicObject>) {
        let urls = slice.map(endpoint_urls).unwrap_or_default();
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|u| !urls.contains(u))
            .cloned()
            .collect();
        for url in gone {
            if let Some(Some(task)) = self.running.remove(&url) {
                task.abort();
            }
            self.endpoints.stop(&url);
            tracing::info!(slice = %self.name, endpoint = %url, "endpoint left the APIExportEndpointSlice; stopped watching it");
        }
        for url in urls {
            if self.running.contains_key(&url) {
                continue;
            }
            tracing::info!(slice = %self.name, endpoint = %url, "watching an endpoint of the APIExportEndpointSlice");
            let feed = self.endpoints.start(&url);
            let task = (self.start)(feed);
            self.running.insert(url, task);
        }
        let present = slice.is_some();
        self.endpoints.slice(|s| s.present = present);
    }

    fn named<'a>(&self, objects: &'a [DynamicObject]) -> Option<&'a DynamicObject> {
        objects
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(self.name.as_str()))
    }
}

impl<K: Resource, I: Partitioned<K>> Drop for SliceFeed<K, I> {
    /// Stops every endpoint's watch; what they contributed leaves the merged index
    /// (late events of a watch still running are ignored).
    fn drop(&mut self) {
        self.endpoints.slice(|s| *s = Slice::default());
        for (url, task) in std::mem::take(&mut self.running) {
            if let Some(task) = task {
                task.abort();
            }
            self.endpoints.stop(&url);
        }
    }
}

impl<K: Resource, I: Partitioned<K>> Index<DynamicObject> for SliceFeed<K, I> {
    fn reset(&mut self, objects: Vec<DynamicObject>) {
        let slice = self.named(&objects).cloned();
        self.set(slice.as_ref());
    }

    fn apply(&mut self, object: DynamicObject) {
        if object.metadata.name.as_deref() == Some(self.name.as_str()) {
            self.set(Some(&object));
        }
    }

    fn delete(&mut self, object: DynamicObject) {
        if object.metadata.name.as_deref() == Some(self.name.as_str()) {
            self.set(None);
        }
    }

    fn status(&mut self, _from: &Status, to: &Status) {
        if let WatchState::Failed(e) | WatchState::Forbidden(e) = &to.state {
            tracing::warn!(slice = %self.name, error = %e, "APIExportEndpointSlice watch failed; listing again");
        }
        self.endpoints.slice(|s| s.status = to.clone());
    }
}

/// A client for `/clusters/*` of the virtual workspace at endpoint `url`.
pub fn endpoint_client(
    clients: &Clients,
    url: &str,
) -> Result<Client, crate::clients::ClientError> {
    clients.virtual_workspace(&format!("{url}/clusters/*"))
}

/// Where a merged index's slice is and how its endpoints are watched.
pub struct Source<K> {
    /// A client for the workspace of the slice (through the front-proxy).
    pub home: Client,
    /// The slice's name (the APIExport's).
    pub slice: String,
    /// Clients for the endpoint URLs.
    pub clients: Clients,
    /// The watched API, from an endpoint's `/clusters/*` client.
    pub api: Box<dyn Fn(Client) -> Api<K> + Send>,
    /// The endpoints' watch configuration.
    pub config: watcher::Config,
}

impl<K, I> Endpoints<K, I>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    I: Partitioned<K> + Send + Sync + 'static,
{
    /// Watches the slice of `source` and every endpoint it lists, feeding this merged
    /// index, until the future is dropped (the endpoints' watches stop with it).
    pub async fn run(self, source: Source<K>) {
        let Source {
            home,
            slice,
            clients,
            api,
            config,
        } = source;
        let start: Starter<K, I> = Box::new(move |feed: EndpointFeed<K, I>| {
            match endpoint_client(&clients, feed.url()) {
                Ok(client) => Some(tokio::spawn(watch::run(
                    api(client),
                    config.clone(),
                    // Through a virtual workspace a 404 proves nothing: fail closed.
                    NotFound::Unknown,
                    feed,
                ))),
                Err(e) => {
                    tracing::error!(endpoint = %feed.url(), error = %e, "cannot build a client for the endpoint; it stays unsynced");
                    None
                }
            }
        });
        let feed = SliceFeed::new(self, &slice, start);
        let slices: Api<DynamicObject> = Api::all_with(home, &endpoint_slice_resource());
        let config = watcher::Config::default().fields(&format!("metadata.name={slice}"));
        watch::run(slices, config, NotFound::Unknown, feed).await;
    }

    /// A merged index over `index`, fed from `source` by a task of its own (stopped
    /// by aborting the returned handle).
    pub fn spawn(index: I, source: Source<K>) -> (Self, tokio::task::JoinHandle<()>) {
        let endpoints = Self::new(index);
        let task = tokio::spawn(endpoints.clone().run(source));
        (endpoints, task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::Driver;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::Status as ApiStatus;
    use std::sync::Mutex;

    /// A merged index that keeps the objects by key and records its statuses.
    #[derive(Default)]
    struct Merged {
        objects: BTreeMap<ObjectKey, String>,
        statuses: Vec<Status>,
        resets: usize,
    }

    impl Index<ConfigMap> for Merged {
        fn reset(&mut self, _: Vec<ConfigMap>) {
            self.resets += 1;
        }
        fn apply(&mut self, o: ConfigMap) {
            let v = o
                .data
                .as_ref()
                .and_then(|d| d.get("v").cloned())
                .unwrap_or_default();
            self.objects.insert(ObjectKey::of(&o), v);
        }
        fn delete(&mut self, o: ConfigMap) {
            self.objects.remove(&ObjectKey::of(&o));
        }
        fn status(&mut self, from: &Status, to: &Status) {
            assert_ne!(from, to);
            self.statuses.push(to.clone());
        }
    }

    impl Partitioned<ConfigMap> for Merged {
        fn remove(&mut self, key: &ObjectKey) {
            self.objects.remove(key);
        }
    }

    fn cm(lc: &str, name: &str, v: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.annotations = Some(
            [(
                crate::names::KCP_CLUSTER_ANNOTATION.to_string(),
                lc.to_string(),
            )]
            .into(),
        );
        c.data = Some([("v".to_string(), v.to_string())].into());
        c
    }

    fn slice(urls: &[&str]) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExportEndpointSlice",
            "metadata": {"name": "export"},
            "status": {"endpoints": urls.iter().map(|u| serde_json::json!({"url": u})).collect::<Vec<_>>()}
        }))
        .expect("slice")
    }

    fn failure(code: u16) -> watcher::Error {
        let s = ApiStatus::failure(&format!("code {code}"), "").with_code(code);
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(s)))
    }

    /// The feeds the slice asked to start, by URL, to drive by hand.
    type Started = Arc<Mutex<Vec<EndpointFeed<ConfigMap, Merged>>>>;

    fn setup() -> (
        Endpoints<ConfigMap, Merged>,
        SliceFeed<ConfigMap, Merged>,
        Started,
    ) {
        let endpoints = Endpoints::new(Merged::default());
        let started: Started = Arc::default();
        let sink = started.clone();
        let feed = SliceFeed::new(
            endpoints.clone(),
            "export",
            Box::new(move |f| {
                if let Ok(mut s) = sink.lock() {
                    s.push(f);
                }
                None
            }),
        );
        (endpoints, feed, started)
    }

    fn take(started: &Started, url: &str) -> EndpointFeed<ConfigMap, Merged> {
        let mut s = started.lock().expect("lock");
        let i = s.iter().position(|f| f.url() == url).expect("started");
        s.remove(i)
    }

    fn list<I: Index<K>, K>(d: &mut Driver<K>, ix: &mut I, items: Vec<K>) {
        d.handle(ix, Ok(watcher::Event::Init));
        for i in items {
            d.handle(ix, Ok(watcher::Event::InitApply(i)));
        }
        d.handle(ix, Ok(watcher::Event::InitDone));
    }

    /// A slice with endpoints a and b, a holding lc1/x=1 and b `on_b`, all listed.
    struct Two {
        e: Endpoints<ConfigMap, Merged>,
        sf: SliceFeed<ConfigMap, Merged>,
        started: Started,
        sd: Driver<DynamicObject>,
        a: EndpointFeed<ConfigMap, Merged>,
        b: EndpointFeed<ConfigMap, Merged>,
        da: Driver<ConfigMap>,
        db: Driver<ConfigMap>,
    }

    /// Endpoints a and b, their watches not listed yet.
    type Ab = (
        EndpointFeed<ConfigMap, Merged>,
        EndpointFeed<ConfigMap, Merged>,
        Driver<ConfigMap>,
        Driver<ConfigMap>,
    );

    /// Lists a slice with endpoints a (with a trailing `/`) and b.
    fn ab(
        sd: &mut Driver<DynamicObject>,
        sf: &mut SliceFeed<ConfigMap, Merged>,
        started: &Started,
    ) -> Ab {
        list(sd, sf, vec![slice(&["https://a/vw/", "https://b/vw"])]);
        (
            take(started, "https://a/vw"),
            take(started, "https://b/vw"),
            Driver::new(NotFound::Unknown),
            Driver::new(NotFound::Unknown),
        )
    }

    fn two(on_b: ConfigMap) -> Two {
        let (e, mut sf, started) = setup();
        let mut sd = Driver::new(NotFound::Unknown);
        let (mut a, mut b, mut da, mut db) = ab(&mut sd, &mut sf, &started);
        list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
        list(&mut db, &mut b, vec![on_b]);
        Two {
            e,
            sf,
            started,
            sd,
            a,
            b,
            da,
            db,
        }
    }

    fn objects(e: &Endpoints<ConfigMap, Merged>) -> Vec<String> {
        e.with_index(|m| {
            m.objects
                .iter()
                .map(|(k, v)| format!("{}/{}={v}", k.cluster, k.name))
                .collect()
        })
    }

    #[test]
    fn every_endpoint_feeds_one_index_synced_only_when_all_are() {
        let (e, mut sf, started) = setup();
        let mut sd = Driver::new(NotFound::Unknown);
        assert!(!e.synced());
        let (mut a, mut b, mut da, mut db) = ab(&mut sd, &mut sf, &started);
        assert_eq!(e.urls(), ["https://a/vw", "https://b/vw"]);
        list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
        // One endpoint synced is not enough.
        assert!(!e.synced());
        assert!(e.covers("lc1"));
        assert!(!e.covers("lc2"));
        list(
            &mut db,
            &mut b,
            vec![cm("lc2", "x", "2"), cm("lc2", "y", "3")],
        );
        assert!(e.synced());
        assert!(e.covers("lc2"));
        assert_eq!(e.seen_at("lc2").as_deref(), Some("https://b/vw"));
        assert_eq!(objects(&e), ["lc1/x=1", "lc2/x=2", "lc2/y=3"]);
        // Apply and delete pass through.
        da.handle(&mut a, Ok(watcher::Event::Apply(cm("lc1", "z", "4"))));
        db.handle(&mut b, Ok(watcher::Event::Delete(cm("lc2", "x", "2"))));
        assert_eq!(objects(&e), ["lc1/x=1", "lc1/z=4", "lc2/y=3"]);
        // A relist of one endpoint replaces only what it contributed.
        list(&mut da, &mut a, vec![cm("lc1", "z", "5")]);
        assert_eq!(objects(&e), ["lc1/z=5", "lc2/y=3"]);
        // Its last object gone, a cluster is no longer covered.
        db.handle(&mut b, Ok(watcher::Event::Delete(cm("lc2", "y", "3"))));
        assert!(!e.covers("lc2"));
        assert!(e.synced());
        e.with_index(|m| {
            assert_eq!(m.resets, 0, "the merged index is never reset");
            assert_eq!(
                m.statuses,
                [Status {
                    state: WatchState::Listed,
                    synced: true
                }]
            );
        });
    }

    #[test]
    fn a_url_appearing_later_is_watched_and_unsyncs_until_listed() {
        let (e, mut sf, started) = setup();
        let mut sd = Driver::new(NotFound::Unknown);
        list(&mut sd, &mut sf, vec![slice(&["https://a/vw"])]);
        let mut a = take(&started, "https://a/vw");
        let mut da = Driver::new(NotFound::Unknown);
        list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
        assert!(e.synced());
        // Shard b gets its first binding: its URL appears.
        sd.handle(
            &mut sf,
            Ok(watcher::Event::Apply(slice(&[
                "https://a/vw",
                "https://b/vw",
            ]))),
        );
        assert!(!e.synced(), "the new endpoint is not listed yet");
        assert!(
            e.covers("lc1"),
            "a synced endpoint still covers its clusters"
        );
        let mut b = take(&started, "https://b/vw");
        assert!(
            started.lock().expect("lock").is_empty(),
            "a is not restarted"
        );
        let mut db = Driver::new(NotFound::Unknown);
        list(&mut db, &mut b, vec![cm("lc2", "x", "2")]);
        assert!(e.synced());
        assert!(e.covers("lc2"));
        assert_eq!(objects(&e), ["lc1/x=1", "lc2/x=2"]);
    }

    #[test]
    fn a_url_disappearing_takes_its_objects_and_stops_its_watch() {
        let Two {
            e,
            mut sf,
            started,
            mut sd,
            mut b,
            mut db,
            ..
        } = two(cm("lc2", "x", "2"));
        sd.handle(&mut sf, Ok(watcher::Event::Apply(slice(&["https://a/vw"]))));
        assert_eq!(e.urls(), ["https://a/vw"]);
        assert_eq!(objects(&e), ["lc1/x=1"]);
        assert!(!e.covers("lc2"));
        assert!(e.synced());
        // Late events of the stopped watch change nothing.
        db.handle(&mut b, Ok(watcher::Event::Apply(cm("lc2", "late", "9"))));
        assert_eq!(objects(&e), ["lc1/x=1"]);
        // The URL coming back is a new watch, listed from scratch.
        sd.handle(
            &mut sf,
            Ok(watcher::Event::Apply(slice(&[
                "https://a/vw",
                "https://b/vw",
            ]))),
        );
        assert!(!e.synced());
        let mut b2 = take(&started, "https://b/vw");
        db.handle(&mut b, Ok(watcher::Event::Apply(cm("lc2", "late", "9"))));
        assert_eq!(objects(&e), ["lc1/x=1"], "the old watch is still ignored");
        let mut db2 = Driver::new(NotFound::Unknown);
        list(&mut db2, &mut b2, vec![cm("lc2", "y", "3")]);
        assert!(e.synced());
        assert_eq!(objects(&e), ["lc1/x=1", "lc2/y=3"]);
        // Every URL gone: synced and empty (no shard holds a binding).
        sd.handle(&mut sf, Ok(watcher::Event::Apply(slice(&[]))));
        assert!(e.synced());
        assert!(objects(&e).is_empty());
    }

    #[test]
    fn dropping_the_slice_watch_stops_everything_and_unsyncs() {
        let Two {
            e,
            sf,
            mut b,
            mut db,
            ..
        } = two(cm("lc2", "x", "2"));
        assert!(e.synced());
        drop(sf);
        assert!(!e.synced());
        assert!(e.urls().is_empty());
        assert!(objects(&e).is_empty());
        db.handle(&mut b, Ok(watcher::Event::Apply(cm("lc2", "late", "9"))));
        assert!(objects(&e).is_empty(), "a stopped watch changes nothing");
    }

    #[test]
    fn a_cluster_an_endpoint_serves_is_covered_while_that_endpoint_is_synced() {
        let Two {
            e,
            mut b,
            mut db,
            sf: _sf,
            ..
        } = two(cm("lc2", "x", "2"));
        // lc3 has no object anywhere: not covered until an endpoint says it serves it.
        assert!(!e.covers("lc3"));
        assert_eq!(e.synced_urls(), ["https://a/vw", "https://b/vw"]);
        e.mark_served("lc3", "https://b/vw");
        assert!(e.covers("lc3"));
        // That endpoint failing uncovers it; listing again covers it again.
        db.handle(&mut b, Err(failure(500)));
        assert!(!e.covers("lc3"));
        assert_eq!(e.synced_urls(), ["https://a/vw"]);
        list(&mut db, &mut b, vec![cm("lc2", "x", "2")]);
        assert!(e.covers("lc3"));
        // An endpoint that is not watched serves nothing.
        e.mark_served("lc4", "https://c/vw");
        assert!(!e.covers("lc4"));
    }

    #[test]
    fn one_endpoint_failing_unsyncs_the_merged_index_and_uncovers_its_clusters() {
        let Two {
            e,
            mut a,
            mut b,
            mut da,
            mut db,
            // Kept alive: dropping the slice's watch stops every endpoint.
            sf: _sf,
            ..
        } = two(cm("lc2", "x", "2"));
        assert!(e.synced());
        db.handle(&mut b, Err(failure(500)));
        assert!(!e.synced());
        assert!(e.covers("lc1"));
        assert!(!e.covers("lc2"), "a failed endpoint covers nothing");
        assert_eq!(e.seen_at("lc2").as_deref(), Some("https://b/vw"));
        // Kept (unread) while unsynced.
        assert_eq!(objects(&e), ["lc1/x=1", "lc2/x=2"]);
        // A 404 through a virtual workspace proves nothing either.
        da.handle(&mut a, Err(failure(404)));
        assert!(!e.covers("lc1"));
        list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
        list(&mut db, &mut b, vec![cm("lc2", "x", "2")]);
        assert!(e.synced());
        e.with_index(|m| {
            let states: Vec<(bool, &str)> = m
                .statuses
                .iter()
                .map(|s| {
                    (
                        s.synced,
                        match &s.state {
                            WatchState::Listed => "listed",
                            WatchState::Failed(_) => "failed",
                            WatchState::NotServed => "not served",
                            _ => "other",
                        },
                    )
                })
                .collect();
            // The merged state names the first endpoint not synced: b failed, then a
            // not served, then b again once a listed.
            assert_eq!(
                states,
                [
                    (true, "listed"),
                    (false, "failed"),
                    (false, "not served"),
                    (false, "failed"),
                    (true, "listed")
                ]
            );
        });
    }

    #[test]
    fn a_missing_or_failing_slice_is_not_synced() {
        let (e, mut sf, started) = setup();
        let mut sd = Driver::new(NotFound::Unknown);
        // The slice does not exist (yet): nothing is watched, not synced.
        list(&mut sd, &mut sf, Vec::new());
        assert!(!e.synced());
        assert!(e.urls().is_empty());
        // It appears without endpoints: synced, empty.
        sd.handle(&mut sf, Ok(watcher::Event::Apply(slice(&[]))));
        assert!(e.synced());
        sd.handle(&mut sf, Ok(watcher::Event::Apply(slice(&["https://a/vw"]))));
        let mut a = take(&started, "https://a/vw");
        let mut da = Driver::new(NotFound::Unknown);
        list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
        assert!(e.synced());
        // The slice's watch fails: unsynced; the endpoint keeps covering its clusters.
        sd.handle(&mut sf, Err(failure(403)));
        assert!(!e.synced());
        assert!(e.covers("lc1"));
        list(&mut sd, &mut sf, vec![slice(&["https://a/vw"])]);
        assert!(e.synced());
        // The slice deleted: its endpoints stop.
        sd.handle(
            &mut sf,
            Ok(watcher::Event::Delete(slice(&["https://a/vw"]))),
        );
        assert!(!e.synced());
        assert!(objects(&e).is_empty());
    }

    #[test]
    fn a_key_two_endpoints_list_stays_until_neither_does() {
        let mut t = two(cm("lc1", "x", "1"));
        list(&mut t.da, &mut t.a, Vec::new());
        assert_eq!(objects(&t.e), ["lc1/x=1"]);
        let gone = cm("lc1", "x", "1");
        t.db.handle(&mut t.b, Ok(watcher::Event::Delete(gone)));
        assert!(objects(&t.e).is_empty());
    }

    #[test]
    fn endpoint_urls_are_trimmed_sorted_and_unique() {
        assert_eq!(
            endpoint_urls(&slice(&[
                "https://b/vw/",
                "https://a/vw",
                "https://b/vw",
                ""
            ])),
            ["https://a/vw", "https://b/vw"]
        );
        let empty: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExportEndpointSlice",
            "metadata": {"name": "export"}, "status": {"endpoints": "bad"}
        }))
        .expect("slice");
        assert!(endpoint_urls(&empty).is_empty());
    }
}
