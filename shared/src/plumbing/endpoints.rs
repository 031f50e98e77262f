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
    collections::{BTreeMap, HashMap},
    fmt,
    marker::PhantomData,
    sync::Arc,
};

use kube::{Api, Client, Resource, api::DynamicObject, runtime::watcher};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;

use super::keyset::KeySet;
use crate::{
    kcp::{Clients, cluster_of, endpoint_slice_resource},
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
    keys: KeySet,
    /// Whether its status changed (or it started) since readers last saw it.
    reshaped: bool,
    /// Clusters it gained or lost since readers last saw it (each one's entry in
    /// [`Seen`] is computed again alone: rebuilding every cluster's on each new one
    /// was quadratic in the fleet).
    moved: Vec<String>,
}

impl Part {
    fn add(&mut self, key: &ObjectKey) {
        if let (_, true) = self.keys.insert(key) {
            self.moved.push(key.cluster.clone());
        }
    }

    fn take(&mut self, key: &ObjectKey) -> bool {
        let (held, emptied) = self.keys.remove(key);
        if emptied {
            self.moved.push(key.cluster.clone());
        }
        held
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
        self.seen.read().synced
    }

    /// Whether a synced endpoint's watch holds objects of logical cluster `cluster`,
    /// or a synced endpoint serves `cluster` (it answered for it when asked: a virtual
    /// workspace serves only the clusters of its shard that bind the export, and its
    /// wildcard watch then holds every object of them, none included).
    pub fn covers(&self, cluster: &str) -> bool {
        let seen = self.seen.read();
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
        self.seen.read().synced_urls.clone()
    }

    /// Remembers that endpoint `url` answered a request for `cluster` (so its watch
    /// sees every object of `cluster`): [`Endpoints::covers`] holds while `url` is
    /// watched and synced.
    pub fn mark_served(&self, cluster: &str, url: &str) {
        let mut seen = self.seen.write();
        if seen.served.len() >= MAX_SERVED {
            seen.served.clear();
        }
        seen.served.insert(cluster.to_string(), url.to_string());
    }

    /// The URL of an endpoint whose watch holds objects of `cluster` (synced or not).
    pub fn seen_at(&self, cluster: &str) -> Option<String> {
        self.seen
            .read()
            .clusters
            .get(cluster)
            .map(|(url, _)| url.clone())
    }

    /// The endpoint URLs watched now.
    pub fn urls(&self) -> Vec<String> {
        self.seen.read().urls.clone()
    }

    /// Reads the merged index.
    pub fn with_index<T>(&self, f: impl FnOnce(&I) -> T) -> T {
        f(&self.state.read().index)
    }

    /// Starts a partition for `url`; returns the feed its watch drives.
    fn start(&self, url: &str) -> EndpointFeed<K, I> {
        let mut st = self.state.write();
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
                keys: KeySet::default(),
                reshaped: true,
                moved: Vec::new(),
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
        let mut st = self.state.write();
        if let Some(part) = st.parts.remove(url) {
            drop_part(&mut st, part);
            st.reshaped = true;
        }
        self.settle(&mut st);
    }

    /// The slice's watch status or presence changed.
    fn slice(&self, f: impl FnOnce(&mut Slice)) {
        let mut st = self.state.write();
        f(&mut st.slice);
        st.reshaped = true;
        self.settle(&mut st);
    }

    /// Runs `f` on the partition `url` started as `id`, if it still runs.
    fn part(&self, url: &str, id: u64, f: impl FnOnce(&mut Part, &mut I, &BTreeMap<String, Part>)) {
        let mut guard = self.state.write();
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
        let mut moved: Vec<String> = Vec::new();
        for part in st.parts.values_mut() {
            reshaped |= std::mem::take(&mut part.reshaped);
            moved.append(&mut part.moved);
        }
        if !reshaped {
            if !moved.is_empty() {
                let mut seen = self.seen.write();
                for cluster in moved {
                    match seen_at(&st.parts, &cluster) {
                        Some(at) => seen.clusters.insert(cluster, at),
                        None => seen.clusters.remove(&cluster),
                    };
                }
            }
            return;
        }
        let urls: Vec<String> = st.parts.keys().cloned().collect();
        let mut served = std::mem::take(&mut self.seen.write().served);
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
            for cluster in part.keys.clusters() {
                let entry = seen
                    .clusters
                    .entry(cluster.to_string())
                    .or_insert_with(|| (url.clone(), part.status.synced));
                if part.status.synced && !entry.1 {
                    *entry = (url.clone(), true);
                }
            }
        }
        *self.seen.write() = seen;
    }
}

/// Where readers see objects of `cluster`: the first endpoint (in URL order) whose
/// watch holds some, or the first synced one among them; the same as a full rebuild
/// of [`Seen::clusters`] gives.
fn seen_at(parts: &BTreeMap<String, Part>, cluster: &str) -> Option<(String, bool)> {
    let mut at: Option<(String, bool)> = None;
    for (url, part) in parts {
        if !part.keys.has_cluster(cluster) {
            continue;
        }
        match &at {
            None => at = Some((url.clone(), part.status.synced)),
            Some((_, false)) if part.status.synced => return Some((url.clone(), true)),
            Some(_) => {}
        }
    }
    at
}

/// Removes what `part` contributed and no other partition holds.
fn drop_part<K, I: Partitioned<K>>(st: &mut State<I>, part: Part) {
    for key in part.keys.iter() {
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
    listed: Option<KeySet>,
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
        self.listed = Some(KeySet::default());
    }

    fn list_apply(&mut self, object: K) {
        let key = ObjectKey::of(&object);
        self.listed.get_or_insert_with(KeySet::default).insert(&key);
        self.endpoints.part(&self.url, self.id, |part, index, _| {
            part.add(&key);
            index.apply(object);
        });
    }

    fn list_end(&mut self) {
        let listed = self.listed.take().unwrap_or_default();
        self.endpoints
            .part(&self.url, self.id, |part, index, others| {
                let gone = part.keys.missing_from(&listed);
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
            part.add(&ObjectKey::of(&object));
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
#[path = "endpoints_tests.rs"]
mod tests;
