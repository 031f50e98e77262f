//! Objects of one kind across logical clusters, fed by the watches of every
//! endpoint of the APIExportEndpointSlice.

use super::*;

impl<K> Default for ClusterStore<K> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            ready: false,
            spec_changes: 0,
            version: 0,
        }
    }
}

impl<K: Resource> ClusterStore<K> {
    pub(super) fn key(obj: &K) -> (String, String) {
        (cluster_of(obj), obj.meta().name.clone().unwrap_or_default())
    }

    /// A snapshot.
    pub fn snapshot(&self) -> Vec<(StoreKey, Arc<K>)> {
        self.objects
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

impl<K: Resource> Index<K> for ClusterStore<K> {
    fn reset(&mut self, objects: Vec<K>) {
        self.objects = objects
            .into_iter()
            .map(|o| (Arc::new(Self::key(&o)), Arc::new(o)))
            .collect();
        self.spec_changes += 1;
        self.version += 1;
    }

    fn apply(&mut self, object: K) {
        let (meta, key) = (object.meta(), Self::key(&object));
        let same_spec = self.objects.get(&key).is_some_and(|old| {
            let old = old.meta();
            old.uid == meta.uid && old.generation == meta.generation
        });
        if !same_spec {
            self.spec_changes += 1;
        }
        self.version += 1;
        match self.objects.get_mut(&key) {
            // The key stays the one snapshots and caches share.
            Some(slot) => *slot = Arc::new(object),
            None => {
                self.objects.insert(Arc::new(key), Arc::new(object));
            }
        }
    }

    fn delete(&mut self, object: K) {
        if self.objects.remove(&Self::key(&object)).is_some() {
            self.spec_changes += 1;
            self.version += 1;
        }
    }

    fn status(&mut self, _from: &WatchStatus, to: &WatchStatus) {
        self.ready = to.synced;
        if let WatchState::Failed(e) | WatchState::Forbidden(e) = &to.state {
            tracing::warn!(error = %e, "kcp watch failed; listing again");
        }
    }
}

impl<K: Resource> SharedFeed<K> {
    pub(super) fn with(&self, f: impl FnOnce(&mut ClusterStore<K>)) {
        if let Ok(mut st) = self.store.lock() {
            f(&mut st);
        }
        self.notify.notify_one();
    }
}

impl<K: Resource> Index<K> for SharedFeed<K> {
    fn reset(&mut self, objects: Vec<K>) {
        self.with(|s| s.reset(objects));
    }
    fn apply(&mut self, object: K) {
        self.with(|s| s.apply(object));
    }
    fn delete(&mut self, object: K) {
        self.with(|s| s.delete(object));
    }
    fn status(&mut self, from: &WatchStatus, to: &WatchStatus) {
        self.with(|s| s.status(from, to));
    }
}

impl<K: Resource> Partitioned<K> for SharedFeed<K> {
    fn remove(&mut self, key: &ObjectKey) {
        self.with(|s| {
            if s.objects
                .remove(&(key.cluster.clone(), key.name.clone()))
                .is_some()
            {
                s.spec_changes += 1;
                s.version += 1;
            }
        });
    }
}

/// Watches `api` on every endpoint of `source` (a 404 through a virtual workspace
/// proves nothing: fail closed) into a new store.
pub(super) fn spawn_store<K>(source: Source<K>, notify: Arc<Notify>) -> EndpointStore<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let store: Shared<K> = Arc::new(Mutex::new(ClusterStore::default()));
    let feed = SharedFeed {
        store: store.clone(),
        notify,
    };
    let (endpoints, task) = Endpoints::spawn(feed, source);
    EndpointStore {
        store,
        endpoints,
        task,
    }
}
