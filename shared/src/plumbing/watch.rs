//! One watch driver for every cache both binaries keep.
//!
//! A cache is an [`Index`]: it is told of a complete list ([`Index::reset`]), of an
//! object added or changed ([`Index::apply`]) and of an object deleted
//! ([`Index::delete`], with the whole object, so its logical cluster stays known). The
//! [`Driver`] turns the events of kube-runtime's watcher into those calls, buffering a
//! list until it is complete and swapping it in at once, and keeps one [`Status`];
//! [`run`] feeds a driver from a watch until the task is dropped.
//!
//! # What "synced" means
//!
//! An index is **synced** when it holds every object the watched URL serves, as of a
//! complete list and every event since, and nothing has failed after that list. Only a
//! synced index may answer "there is none": one that is not synced is either not read
//! (object stores, the dependents index: the caller falls back to a live read, or
//! refuses) or read as "what was last known", never as "empty" (the policy registry,
//! which has loaded at least once; see `docs/decisions.md`).
//!
//! # What each failure means
//!
//! Every failure makes the index unsynced at once, and the driver lists again from
//! scratch after [`backoff`] (500 ms doubling up to 5 s, back to 500 ms after a
//! complete list). The watch is never resumed from an old resource version after a
//! failure: kube-runtime's watcher resumes a broken watch without a new list, which
//! would leave nothing to mark the index synced again.
//! - **404** ([`WatchState::NotServed`]): the type is not served at the watched URL.
//!   That proves no object exists only where the URL is the one server of the type and
//!   its discovery is authoritative ([`NotFound::Empty`], the Kubernetes topology): the
//!   index is emptied and synced. Anywhere else ([`NotFound::Unknown`]: kcp's
//!   `/clusters/*` through a front-proxy or a virtual workspace answers 404 for a type
//!   served by some workspaces but not reachable there) it proves nothing: the index is
//!   left as it was and unsynced.
//! - **403** ([`WatchState::Forbidden`]): the identity may not list or watch the type.
//!   The index is unsynced until a list succeeds.
//! - **anything else** ([`WatchState::Failed`]): the index is unsynced until a list
//!   succeeds.
//!
//! The index hears of every change of status through [`Index::status`] (to report a
//! refusal once, or flip a flag readers check).

use std::{
    collections::BTreeMap,
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{Stream, StreamExt as _};

use crate::backoff::ExponentialBackoff;
use kube::{Api, Resource, runtime::watcher};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;

/// A cache fed by a watch.
pub trait Index<K> {
    /// Replaces everything with the objects of a complete list.
    fn reset(&mut self, objects: Vec<K>);
    /// Adds or replaces one object.
    fn apply(&mut self, object: K);
    /// Removes one object (the whole object, as last seen).
    fn delete(&mut self, object: K);
    /// The watch's status changed from `from` to `to` (ignored unless overridden).
    fn status(&mut self, from: &Status, to: &Status) {
        let _ = (from, to);
    }
    /// Whether a list is given object by object ([`Index::list_begin`],
    /// [`Index::list_apply`], [`Index::list_end`]) instead of whole to
    /// [`Index::reset`], so that the list is never held at once: for an index that
    /// keeps much less than the objects (the dependents index keeps a few ids per
    /// object; a list of a million objects would otherwise be held whole). While such
    /// a list is under way the index holds what it held before plus the objects
    /// listed so far; what the list does not name goes at [`Index::list_end`].
    fn streams_lists(&self) -> bool {
        false
    }
    /// A list begins (streaming indexes only).
    fn list_begin(&mut self) {}
    /// One object of the list under way (streaming indexes only).
    fn list_apply(&mut self, object: K) {
        self.apply(object);
    }
    /// The list is complete: what it did not name goes (streaming indexes only).
    fn list_end(&mut self) {}
}

/// [`Index::reset`] of a streaming index: the objects given as one list, object by
/// object.
pub fn reset_by_list<K, I: Index<K> + ?Sized>(index: &mut I, objects: Vec<K>) {
    index.list_begin();
    for object in objects {
        index.list_apply(object);
    }
    index.list_end();
}

/// What the last event of a watch says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchState {
    /// No complete list yet.
    Starting,
    /// A complete list was applied and nothing failed since.
    Listed,
    /// The last list or watch answered 404: the type is not served at the URL.
    NotServed,
    /// The last list or watch answered 403 (the error).
    Forbidden(String),
    /// The last list or watch failed otherwise (the error).
    Failed(String),
}

/// The state of a watch and whether its index is synced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// What the last event said.
    pub state: WatchState,
    /// Whether the index holds every object the URL serves (see the module docs).
    pub synced: bool,
}

impl Default for Status {
    fn default() -> Self {
        Self {
            state: WatchState::Starting,
            synced: false,
        }
    }
}

/// What a 404 proves at the watched URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotFound {
    /// No object of the type exists: the index is emptied and synced (one API server
    /// whose discovery is authoritative: Kubernetes).
    Empty,
    /// Nothing: the index is kept and unsynced (kcp, a remote cluster that may be the
    /// wrong one).
    Unknown,
}

/// What the caller does after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Go on reading the stream.
    Continue,
    /// The stream failed: wait for the backoff, then list again with a new stream.
    Restart,
}

/// The state machine between a watch and an [`Index`].
pub struct Driver<K> {
    not_found: NotFound,
    /// Objects of a list in progress (between `Init` and `InitDone`).
    buffer: Option<Vec<K>>,
    /// A list in progress given to a streaming index object by object.
    streaming: bool,
    status: Status,
}

impl<K> Driver<K> {
    /// A driver that has seen nothing yet.
    pub fn new(not_found: NotFound) -> Self {
        Self {
            not_found,
            buffer: None,
            streaming: false,
            status: Status::default(),
        }
    }

    /// The current status.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// Whether the index is synced.
    pub fn synced(&self) -> bool {
        self.status.synced
    }

    fn set<I: Index<K>>(&mut self, index: &mut I, state: WatchState, synced: bool) {
        let to = Status { state, synced };
        if to != self.status {
            let from = std::mem::replace(&mut self.status, to);
            index.status(&from, &self.status);
        }
    }

    /// Feeds one item of a watcher stream to `index`.
    pub fn handle<I: Index<K>>(
        &mut self,
        index: &mut I,
        item: Result<watcher::Event<K>, watcher::Error>,
    ) -> Step {
        match item {
            Ok(watcher::Event::Init) if index.streams_lists() => {
                self.streaming = true;
                index.list_begin();
            }
            Ok(watcher::Event::Init) => self.buffer = Some(Vec::new()),
            Ok(watcher::Event::InitApply(o)) if index.streams_lists() => {
                if !std::mem::replace(&mut self.streaming, true) {
                    index.list_begin();
                }
                index.list_apply(o);
            }
            Ok(watcher::Event::InitApply(o)) => self.buffer.get_or_insert_with(Vec::new).push(o),
            Ok(watcher::Event::InitDone) if index.streams_lists() => {
                if !std::mem::replace(&mut self.streaming, false) {
                    index.list_begin();
                }
                index.list_end();
                self.set(index, WatchState::Listed, true);
            }
            Ok(watcher::Event::InitDone) => {
                index.reset(self.buffer.take().unwrap_or_default());
                self.set(index, WatchState::Listed, true);
            }
            Ok(watcher::Event::Apply(o)) => index.apply(o),
            Ok(watcher::Event::Delete(o)) => index.delete(o),
            Err(e) => {
                // A list cut short: a streaming index keeps what it got (unsynced
                // below); the next list begins afresh.
                self.buffer = None;
                self.streaming = false;
                match watcher_status(&e) {
                    Some(404) if self.not_found == NotFound::Empty => {
                        index.reset(Vec::new());
                        self.set(index, WatchState::NotServed, true);
                    }
                    Some(404) => self.set(index, WatchState::NotServed, false),
                    Some(403) => self.set(index, WatchState::Forbidden(e.to_string()), false),
                    _ => self.set(index, WatchState::Failed(e.to_string()), false),
                }
                return Step::Restart;
            }
        }
        Step::Continue
    }
}

/// Feeds `index` through `driver` from the streams `watch` makes (each a fresh watch,
/// starting with a list) until the task is dropped; after a failure waits for
/// [`backoff`] and starts a new stream.
pub async fn run_streams<K, I, S>(
    mut watch: impl FnMut() -> S,
    driver: &mut Driver<K>,
    index: &mut I,
) where
    I: Index<K>,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Unpin,
{
    let mut backoff = backoff();
    loop {
        let mut stream = watch();
        while let Some(item) = stream.next().await {
            if driver.handle(index, item) == Step::Restart {
                break;
            }
            if driver.synced() {
                backoff.reset();
            }
        }
        drop(stream);
        tokio::time::sleep(backoff.next().unwrap_or(WATCH_RETRY_MAX)).await;
    }
}

/// Watches `api` with `config` and feeds `index` until the task is dropped (see
/// [`run_streams`]).
pub async fn run<K, I>(api: Api<K>, config: watcher::Config, not_found: NotFound, mut index: I)
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + 'static,
    I: Index<K>,
{
    let mut driver = Driver::new(not_found);
    run_streams(
        || watcher(api.clone(), config.clone()).boxed(),
        &mut driver,
        &mut index,
    )
    .await;
}

/// The objects of one watch, keyed by (logical cluster, namespace, name), and whether
/// they are synced: what kube-runtime's reflector store keeps, with this module's
/// meaning of synced (a reflector store stays "ready" through failures).
pub struct Cache<K> {
    inner: Arc<CacheInner<K>>,
}

struct CacheInner<K> {
    objects: RwLock<BTreeMap<(String, String, String), Arc<K>>>,
    synced: AtomicBool,
    not_served: AtomicBool,
}

impl<K> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Default for Cache<K> {
    fn default() -> Self {
        Self {
            inner: Arc::new(CacheInner {
                objects: RwLock::new(BTreeMap::new()),
                synced: AtomicBool::new(false),
                not_served: AtomicBool::new(false),
            }),
        }
    }
}

impl<K> Cache<K> {
    /// Every object, in key order.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.inner.objects.read().values().cloned().collect()
    }

    /// The object `name` in `namespace` of logical cluster `cluster` (`""` for
    /// cluster-scoped objects and outside kcp).
    pub fn get(&self, cluster: &str, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.inner
            .objects
            .read()
            .get(&(cluster.to_owned(), namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Whether the last answer of the watched URL was 404 (the type is not served).
    pub fn not_served(&self) -> bool {
        self.inner.not_served.load(Ordering::Acquire)
    }

    /// Whether the cache is synced (see the module docs).
    pub fn synced(&self) -> bool {
        self.inner.synced.load(Ordering::Acquire)
    }
}

fn cache_key<K: Resource>(o: &K) -> (String, String, String) {
    let m = o.meta();
    (
        crate::kcp::cluster_of(o),
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// A [`Cache`] as an [`Index`]: every change wakes `on_change`.
struct CacheFeed<K, F> {
    cache: Cache<K>,
    on_change: F,
    what: String,
}

impl<K: Resource, F: Fn()> Index<K> for CacheFeed<K, F> {
    fn reset(&mut self, objects: Vec<K>) {
        *self.cache.inner.objects.write() = objects
            .into_iter()
            .map(|o| (cache_key(&o), Arc::new(o)))
            .collect();
        (self.on_change)();
    }

    fn apply(&mut self, object: K) {
        self.cache
            .inner
            .objects
            .write()
            .insert(cache_key(&object), Arc::new(object));
        (self.on_change)();
    }

    fn delete(&mut self, object: K) {
        self.cache.inner.objects.write().remove(&cache_key(&object));
        (self.on_change)();
    }

    fn status(&mut self, _from: &Status, to: &Status) {
        self.cache
            .inner
            .not_served
            .store(to.state == WatchState::NotServed, Ordering::Release);
        self.cache.inner.synced.store(to.synced, Ordering::Release);
        if let WatchState::Failed(e) | WatchState::Forbidden(e) = &to.state {
            tracing::warn!(resource = %self.what, error = %e, "watch failed; listing again");
        }
        (self.on_change)();
    }
}

/// Spawns a watch of `api` feeding a new [`Cache`]; every change (objects or status)
/// calls `on_change`. The task runs until aborted.
pub fn spawn_cache<K>(
    api: Api<K>,
    config: watcher::Config,
    not_found: NotFound,
    on_change: impl Fn() + Send + 'static,
) -> (Cache<K>, tokio::task::JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    let cache = Cache::default();
    let feed = CacheFeed {
        cache: cache.clone(),
        on_change,
        what: api.resource_url().to_string(),
    };
    let task = tokio::spawn(run(api, config, not_found, feed));
    (cache, task)
}

/// First retry delay after a failed watch.
pub const WATCH_RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest retry delay after failed watches (a type refused with 403 is picked up
/// within seconds of its grant).
pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(5);

/// The retry delays of every watch: [`WATCH_RETRY_FIRST`] doubling up to
/// [`WATCH_RETRY_MAX`], back to the first after a complete list.
pub fn backoff() -> ExponentialBackoff {
    ExponentialBackoff::new(WATCH_RETRY_FIRST, WATCH_RETRY_MAX)
}

/// The HTTP status an API error carries, if it is one.
pub fn api_status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// An API error in one line: the server's message, reason and code, without the
/// debug dump of its Status; other errors as they display.
pub fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason.is_empty() => format!("{} ({})", s.message, s.code),
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}

/// The HTTP status a watch failure carries, if it is one.
pub fn watcher_status(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_status(e),
        watcher::Error::WatchError(s) => Some(s.code),
        watcher::Error::NoResourceVersion => None,
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
