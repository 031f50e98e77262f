//! In-memory object store: one global resourceVersion counter, objects indexed by
//! (group/resource) then (cluster, namespace, name), per-resource broadcast of watch
//! events and a bounded per-resource event history for watch resumption.
//! `events.k8s.io` Events are stored as core Events and converted on the way in and
//! out ([`eventsview`]), as kube-apiserver keeps both in one place.

use crate::eventsview;
use crate::registry::Gr;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

#[derive(Debug)]
pub struct Event {
    pub kind: EventType,
    pub rv: u64,
    pub key: Key,
    pub obj: Arc<Value>,
    pub old: Option<Arc<Value>>,
}

pub enum StoreError {
    AlreadyExists,
    NotFound,
    Conflict,
}

#[derive(Default)]
struct GrData {
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Arc<Event>>,
    /// Highest resourceVersion no longer replayable from history.
    evicted_rv: u64,
    /// The resourceVersion of the last create, update or delete.
    changed_rv: u64,
    tx: Option<broadcast::Sender<Arc<Event>>>,
}

pub struct Inner {
    pub rv: u64,
    data: HashMap<Gr, GrData>,
    /// Watches from a resourceVersion at or below this are expired (set by compaction).
    compacted_rv: u64,
    history_cap: usize,
    /// owner uid -> dependents
    owners: HashMap<String, HashSet<(Gr, Key)>>,
    uids: HashSet<String>,
    /// Per kind given to [`Store::index_by_reference`]: its objects by the
    /// (target, name) they reference.
    references: HashMap<Gr, References>,
}

/// What an object references: (target, name), e.g. an APIBinding's export as
/// (its path, or the binding's own logical cluster when empty; its name).
pub type Referenced = fn(&Key, &Value) -> Option<(String, String)>;

struct References {
    of: Referenced,
    /// target -> name -> objects
    by: HashMap<String, BTreeMap<String, BTreeSet<Key>>>,
}

impl References {
    fn remove(&mut self, key: &Key, obj: &Value) {
        if let Some((target, name)) = (self.of)(key, obj)
            && let Some(names) = self.by.get_mut(&target)
        {
            if let Some(keys) = names.get_mut(&name) {
                keys.remove(key);
                if keys.is_empty() {
                    names.remove(&name);
                }
            }
            if names.is_empty() {
                self.by.remove(&target);
            }
        }
    }

    fn insert(&mut self, key: &Key, obj: &Value) {
        if let Some((target, name)) = (self.of)(key, obj) {
            let names = self.by.entry(target).or_default();
            names.entry(name).or_default().insert(key.clone());
        }
    }
}

pub type WatchStart = (
    Vec<Arc<Event>>,
    Vec<Arc<Value>>,
    broadcast::Receiver<Arc<Event>>,
    u64,
);

pub struct Store {
    inner: Mutex<Inner>,
}

pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn owner_uids(v: &Value) -> Vec<String> {
    v["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["uid"].as_str().map(str::to_string))
        .collect()
}

impl Store {
    pub fn new(history_cap: usize) -> Self {
        Store {
            inner: Mutex::new(Inner {
                rv: 100,
                data: HashMap::new(),
                compacted_rv: 0,
                history_cap: history_cap.max(16),
                owners: HashMap::new(),
                uids: HashSet::new(),
                references: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn get(&self, gr: &Gr, key: &Key) -> Option<Arc<Value>> {
        let stored = self
            .lock()
            .data
            .get(&eventsview::storage(gr))
            .and_then(|d| d.objects.get(key).cloned())?;
        Some(present(gr, stored))
    }

    /// Objects of `gr` in `cluster` (None = all clusters except the plain one when
    /// `kcp_only`), optionally restricted to `namespace`. Returns them with the current RV.
    pub fn list(
        &self,
        gr: &Gr,
        cluster: Option<&str>,
        namespace: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64) {
        let (items, rv) = self.list_keyed(gr, cluster, namespace);
        (items.into_iter().map(|(_, v)| v).collect(), rv)
    }

    pub fn list_keyed(
        &self,
        gr: &Gr,
        cluster: Option<&str>,
        namespace: Option<&str>,
    ) -> (Vec<(Key, Arc<Value>)>, u64) {
        let inner = self.lock();
        let rv = inner.rv;
        let Some(d) = inner.data.get(&eventsview::storage(gr)) else {
            return (vec![], rv);
        };
        let out: Vec<(Key, Arc<Value>)> = match (cluster, namespace) {
            (Some(c), Some(ns)) => {
                let start = Key {
                    cluster: c.to_string(),
                    namespace: ns.to_string(),
                    name: String::new(),
                };
                d.objects
                    .range(start..)
                    .take_while(|(k, _)| k.cluster == c && k.namespace == ns)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }
            (Some(c), None) => {
                let start = Key {
                    cluster: c.to_string(),
                    namespace: String::new(),
                    name: String::new(),
                };
                d.objects
                    .range(start..)
                    .take_while(|(k, _)| k.cluster == c)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }
            (None, ns) => d
                .objects
                .iter()
                .filter(|(k, _)| !k.cluster.is_empty() && ns.is_none_or(|n| k.namespace == n))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        if eventsview::is_view(gr) {
            let out = out.into_iter().map(|(k, v)| (k, present(gr, v))).collect();
            return (out, rv);
        }
        (out, rv)
    }

    /// Number of objects of `gr` in (cluster, namespace).
    pub fn count_in_namespace(&self, gr: &Gr, cluster: &str, namespace: &str) -> usize {
        self.list(gr, Some(cluster), Some(namespace)).0.len()
    }

    /// All resource kinds that currently have objects in a namespace of a cluster.
    pub fn grs_with_objects_in(&self, cluster: &str, namespace: &str) -> Vec<Gr> {
        let inner = self.lock();
        let mut out = vec![];
        for (gr, d) in inner.data.iter() {
            let start = Key {
                cluster: cluster.to_string(),
                namespace: namespace.to_string(),
                name: String::new(),
            };
            if d.objects
                .range(start..)
                .next()
                .is_some_and(|(k, _)| k.cluster == cluster && k.namespace == namespace)
            {
                out.push(gr.clone());
            }
        }
        out
    }

    fn emit(inner: &mut Inner, gr: &Gr, ev: Event) {
        let cap = inner.history_cap;
        let d = inner.data.entry(gr.clone()).or_default();
        let ev = Arc::new(ev);
        d.history.push_back(ev.clone());
        while d.history.len() > cap {
            if let Some(old) = d.history.pop_front() {
                d.evicted_rv = old.rv;
            }
        }
        if let Some(tx) = &d.tx {
            let _ = tx.send(ev);
        }
    }

    fn index_owners(
        inner: &mut Inner,
        gr: &Gr,
        key: &Key,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        if let Some(o) = old {
            for uid in owner_uids(o) {
                if let Some(s) = inner.owners.get_mut(&uid) {
                    s.remove(&(gr.clone(), key.clone()));
                    if s.is_empty() {
                        inner.owners.remove(&uid);
                    }
                }
            }
        }
        if let Some(n) = new {
            for uid in owner_uids(n) {
                inner
                    .owners
                    .entry(uid)
                    .or_default()
                    .insert((gr.clone(), key.clone()));
            }
        }
    }

    fn index_references(
        inner: &mut Inner,
        gr: &Gr,
        key: &Key,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        if let Some(r) = inner.references.get_mut(gr) {
            if let Some(o) = old {
                r.remove(key, o);
            }
            if let Some(n) = new {
                r.insert(key, n);
            }
        }
    }

    /// Keeps the objects of `gr` indexed by what `of` says they reference, for
    /// [`Store::referencing`] (the objects stored already included).
    pub fn index_by_reference(&self, gr: &Gr, of: Referenced) {
        let mut inner = self.lock();
        let mut r = References {
            of,
            by: HashMap::new(),
        };
        if let Some(d) = inner.data.get(gr) {
            for (k, v) in &d.objects {
                r.insert(k, v);
            }
        }
        inner.references.insert(gr.clone(), r);
    }

    /// The objects of `gr` (indexed by [`Store::index_by_reference`]) that reference
    /// `target` (by `name`, or any name), in key order; empty if `gr` is not indexed.
    pub fn referencing(&self, gr: &Gr, target: &str, name: Option<&str>) -> Vec<(Key, Arc<Value>)> {
        let inner = self.lock();
        let (Some(r), Some(d)) = (inner.references.get(gr), inner.data.get(gr)) else {
            return vec![];
        };
        let Some(names) = r.by.get(target) else {
            return vec![];
        };
        let keys: Vec<&Key> = match name {
            Some(n) => names.get(n).into_iter().flatten().collect(),
            None => names.values().flatten().collect(),
        };
        keys.into_iter()
            .filter_map(|k| d.objects.get(k).map(|v| (k.clone(), v.clone())))
            .collect()
    }

    pub fn uid_exists(&self, uid: &str) -> bool {
        self.lock().uids.contains(uid)
    }

    pub fn dependents(&self, owner_uid: &str) -> Vec<(Gr, Key)> {
        self.lock()
            .owners
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Stores `obj` (new, or replacing `old`) at the next resourceVersion, indexes its
    /// owners and emits its watch event.
    fn put(
        inner: &mut Inner,
        gr: &Gr,
        key: Key,
        mut obj: Value,
        old: Option<Arc<Value>>,
    ) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let obj = Arc::new(obj);
        inner.data.entry(gr.clone()).or_default().changed_rv = rv;
        if old.is_none()
            && let Some(u) = obj["metadata"]["uid"].as_str()
        {
            inner.uids.insert(u.to_string());
        }
        Self::index_owners(inner, gr, &key, old.as_deref(), Some(&obj));
        Self::index_references(inner, gr, &key, old.as_deref(), Some(&obj));
        inner
            .data
            .entry(gr.clone())
            .or_default()
            .objects
            .insert(key.clone(), obj.clone());
        let kind = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        Self::emit(
            inner,
            gr,
            Event {
                kind,
                rv,
                key,
                obj: obj.clone(),
                old,
            },
        );
        obj
    }

    pub fn create(&self, gr: &Gr, key: Key, obj: Value) -> Result<Arc<Value>, StoreError> {
        let (view, gr, obj) = (gr, &eventsview::storage(gr), stored_form(gr, obj));
        let mut inner = self.lock();
        if inner
            .data
            .get(gr)
            .is_some_and(|d| d.objects.contains_key(&key))
        {
            return Err(StoreError::AlreadyExists);
        }
        Ok(present(view, Self::put(&mut inner, gr, key, obj, None)))
    }

    fn stored(inner: &Inner, gr: &Gr, key: &Key) -> Result<Arc<Value>, StoreError> {
        inner
            .data
            .get(gr)
            .and_then(|d| d.objects.get(key).cloned())
            .ok_or(StoreError::NotFound)
    }

    /// Replaces the object if its stored resourceVersion equals `expected_rv`.
    pub fn update(
        &self,
        gr: &Gr,
        key: &Key,
        obj: Value,
        expected_rv: u64,
    ) -> Result<Arc<Value>, StoreError> {
        let (view, gr, obj) = (gr, &eventsview::storage(gr), stored_form(gr, obj));
        let mut inner = self.lock();
        let old = Self::stored(&inner, gr, key)?;
        if rv_of(&old) != expected_rv {
            return Err(StoreError::Conflict);
        }
        Ok(present(
            view,
            Self::put(&mut inner, gr, key.clone(), obj, Some(old)),
        ))
    }

    /// Removes the object (if `expected_rv` is Some, only when it matches).
    pub fn delete(
        &self,
        gr: &Gr,
        key: &Key,
        expected_rv: Option<u64>,
    ) -> Result<Arc<Value>, StoreError> {
        let (view, gr) = (gr, &eventsview::storage(gr));
        let mut inner = self.lock();
        let old = Self::stored(&inner, gr, key)?;
        if let Some(e) = expected_rv
            && rv_of(&old) != e
        {
            return Err(StoreError::Conflict);
        }
        inner.rv += 1;
        let rv = inner.rv;
        if let Some(d) = inner.data.get_mut(gr) {
            d.objects.remove(key);
            d.changed_rv = rv;
        }
        Self::index_owners(&mut inner, gr, key, Some(&old), None);
        Self::index_references(&mut inner, gr, key, Some(&old), None);
        if let Some(u) = old["metadata"]["uid"].as_str() {
            inner.uids.remove(u);
        }
        let mut gone = (*old).clone();
        gone["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let gone = Arc::new(gone);
        Self::emit(
            &mut inner,
            gr,
            Event {
                kind: EventType::Deleted,
                rv,
                key: key.clone(),
                obj: gone.clone(),
                old: Some(old),
            },
        );
        Ok(present(view, gone))
    }

    /// Subscribes to `gr`. With `from` = Some(rv): returns the history after rv
    /// (Err(oldest available) if expired). With None: the current objects.
    /// The initial objects are as `gr` reads them; the events (of the history, and
    /// later through the receiver) are in the stored form: pass them through
    /// [`present_event`].
    pub fn watch(&self, gr: &Gr, from: Option<u64>) -> Result<WatchStart, u64> {
        let view = gr;
        let mut inner = self.lock();
        let compacted = inner.compacted_rv;
        let rv_now = inner.rv;
        let d = inner.data.entry(eventsview::storage(gr)).or_default();
        let rx = match &d.tx {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = broadcast::channel(8192);
                d.tx = Some(tx);
                rx
            }
        };
        match from {
            Some(r) => {
                let floor = compacted.max(d.evicted_rv);
                if r < floor {
                    return Err(floor + 1);
                }
                let evs = d.history.iter().filter(|e| e.rv > r).cloned().collect();
                Ok((evs, vec![], rx, rv_now))
            }
            None => {
                let objs = d
                    .objects
                    .values()
                    .map(|o| present(view, o.clone()))
                    .collect();
                Ok((vec![], objs, rx, rv_now))
            }
        }
    }

    /// Drains events already queued for a receiver together with the current RV, so a
    /// bookmark sent after them never precedes an older event.
    pub fn drain_for_bookmark(
        &self,
        rx: &mut broadcast::Receiver<Arc<Event>>,
    ) -> (Vec<Arc<Event>>, u64, bool) {
        let inner = self.lock();
        let mut out = vec![];
        let mut lagged = false;
        loop {
            match rx.try_recv() {
                Ok(e) => out.push(e),
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    lagged = true;
                    break;
                }
                Err(_) => break,
            }
        }
        (out, inner.rv, lagged)
    }

    /// Forgets all watch history: watches from an older resourceVersion get 410 Expired.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.compacted_rv = inner.rv;
        for d in inner.data.values_mut() {
            d.history.clear();
        }
    }

    /// The resourceVersion of the last change to an object of `gr` (0: none yet):
    /// what a loop over every object of `gr` may skip while it holds.
    pub fn changed_at(&self, gr: &Gr) -> u64 {
        self.lock()
            .data
            .get(&eventsview::storage(gr))
            .map_or(0, |d| d.changed_rv)
    }

    /// The keys of `gr` changed after resourceVersion `rv`, from the watch history
    /// (`None` when it no longer reaches back to `rv`).
    pub fn keys_changed_since(&self, gr: &Gr, rv: u64) -> Option<Vec<Key>> {
        let inner = self.lock();
        if inner.compacted_rv > rv {
            return None;
        }
        let Some(d) = inner.data.get(&eventsview::storage(gr)) else {
            return Some(vec![]);
        };
        if d.evicted_rv > rv {
            return None;
        }
        Some(
            d.history
                .iter()
                .filter(|e| e.rv > rv)
                .map(|e| e.key.clone())
                .collect(),
        )
    }

    /// Every resource kind that has (or had) objects.
    pub fn all_grs(&self) -> Vec<Gr> {
        self.lock().data.keys().cloned().collect()
    }

    pub fn all_objects(&self, gr: &Gr) -> Vec<(Key, Arc<Value>)> {
        let inner = self.lock();
        inner
            .data
            .get(gr)
            .map(|d| {
                d.objects
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `obj` as it is stored for `gr` (an `events.k8s.io` Event in its core form; a
/// core Event with its unset fields as kube-apiserver serializes them).
fn stored_form(gr: &Gr, mut obj: Value) -> Value {
    if eventsview::is_view(gr) {
        return eventsview::to_core(&obj);
    }
    if eventsview::is_core(gr) {
        eventsview::normalize_core(&mut obj);
    }
    obj
}

/// A stored object as read through `gr`.
fn present(gr: &Gr, stored: Arc<Value>) -> Arc<Value> {
    if eventsview::is_view(gr) {
        Arc::new(eventsview::to_view(&stored))
    } else {
        stored
    }
}

/// A stored watch event as a watch of `gr` sees it.
pub fn present_event(gr: &Gr, e: Arc<Event>) -> Arc<Event> {
    if !eventsview::is_view(gr) {
        return e;
    }
    Arc::new(Event {
        kind: e.kind,
        rv: e.rv,
        key: e.key.clone(),
        obj: present(gr, e.obj.clone()),
        old: e.old.clone().map(|o| present(gr, o)),
    })
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
