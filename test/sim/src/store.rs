//! In-memory object store: one global resourceVersion counter, objects indexed by
//! (group/resource) then (cluster, namespace, name), per-resource broadcast of watch
//! events and a bounded per-resource event history for watch resumption.

use crate::registry::Gr;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
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
        self.lock()
            .data
            .get(gr)
            .and_then(|d| d.objects.get(key).cloned())
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
        let Some(d) = inner.data.get(gr) else {
            return (vec![], rv);
        };
        let out = match (cluster, namespace) {
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
        if old.is_none()
            && let Some(u) = obj["metadata"]["uid"].as_str()
        {
            inner.uids.insert(u.to_string());
        }
        Self::index_owners(inner, gr, &key, old.as_deref(), Some(&obj));
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
        let mut inner = self.lock();
        if inner
            .data
            .get(gr)
            .is_some_and(|d| d.objects.contains_key(&key))
        {
            return Err(StoreError::AlreadyExists);
        }
        Ok(Self::put(&mut inner, gr, key, obj, None))
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
        let mut inner = self.lock();
        let old = Self::stored(&inner, gr, key)?;
        if rv_of(&old) != expected_rv {
            return Err(StoreError::Conflict);
        }
        Ok(Self::put(&mut inner, gr, key.clone(), obj, Some(old)))
    }

    /// Removes the object (if `expected_rv` is Some, only when it matches).
    pub fn delete(
        &self,
        gr: &Gr,
        key: &Key,
        expected_rv: Option<u64>,
    ) -> Result<Arc<Value>, StoreError> {
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
        }
        Self::index_owners(&mut inner, gr, key, Some(&old), None);
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
        Ok(gone)
    }

    /// Subscribes to `gr`. With `from` = Some(rv): returns the history after rv
    /// (Err(oldest available) if expired). With None: the current objects.
    pub fn watch(&self, gr: &Gr, from: Option<u64>) -> Result<WatchStart, u64> {
        let mut inner = self.lock();
        let compacted = inner.compacted_rv;
        let rv_now = inner.rv;
        let d = inner.data.entry(gr.clone()).or_default();
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
                let objs = d.objects.values().cloned().collect();
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
