//! kcp's cache server as webhook admission sees it (docs/kcp-facts.md 29): kcp's
//! validating webhook admission reads ValidatingWebhookConfigurations from the
//! global (cache-server) informers, so a configuration created, updated or deleted
//! in a workspace takes effect in admission only once replicated. The simulator
//! keeps a replica of every kcp workspace's configurations, brought up to date
//! after a delay ([`Replication`]); admission on kcp reads the replica only.

use crate::server::State;
use crate::store::{Key, rv_of};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How webhook configurations reach kcp's admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// Each change replicates after a random delay in `[min, max]` (the default,
    /// 50-500 ms: tests cannot assume immediacy).
    Random { min: Duration, max: Duration },
    /// Each change replicates after exactly this delay.
    Fixed(Duration),
    /// The cache server is down: nothing replicates; admission keeps using the last
    /// replicated configurations. Changes replicate once another setting is made.
    Stopped,
}

impl Default for Replication {
    fn default() -> Self {
        Replication::Random {
            min: Duration::from_millis(50),
            max: Duration::from_millis(500),
        }
    }
}

impl Replication {
    fn delay(&self) -> Option<Duration> {
        match *self {
            Replication::Random { min, max } => {
                use rand::Rng;
                let (lo, hi) = (min.as_millis() as u64, max.as_millis() as u64);
                let ms = if hi > lo {
                    rand::rng().random_range(lo..=hi)
                } else {
                    lo
                };
                Some(Duration::from_millis(ms))
            }
            Replication::Fixed(d) => Some(d),
            Replication::Stopped => None,
        }
    }
}

/// The replica of kcp's ValidatingWebhookConfigurations.
#[derive(Default)]
pub struct Cache {
    /// By key: a cluster's configurations are one range.
    replica: RwLock<BTreeMap<Key, Arc<Value>>>,
    /// When each pending change replicates.
    due: Mutex<HashMap<Key, Instant>>,
    setting: Mutex<Replication>,
    /// The store's last change to configurations when the replica last equalled
    /// it: nothing to do while that holds.
    in_sync_at: Mutex<Option<u64>>,
    /// The store's last change to configurations the last sync read (the next
    /// reads only the keys changed since, and those waiting to replicate).
    scanned_at: Mutex<Option<u64>>,
}

impl Cache {
    /// The replicated configurations of logical cluster `cluster`.
    pub fn configs(&self, cluster: &str) -> Vec<Arc<Value>> {
        self.replica
            .read()
            .map(|r| {
                let from = Key {
                    cluster: cluster.to_string(),
                    namespace: String::new(),
                    name: String::new(),
                };
                r.range(from..)
                    .take_while(|(k, _)| k.cluster == cluster)
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn set(&self, setting: Replication) {
        if let Ok(mut s) = self.setting.lock() {
            *s = setting;
        }
        if let Ok(mut d) = self.due.lock() {
            d.clear();
        }
        if let Ok(mut at) = self.in_sync_at.lock() {
            *at = None;
        }
        // A stopped replica left changes unscheduled: the next sync reads all.
        if let Ok(mut at) = self.scanned_at.lock() {
            *at = None;
        }
    }

    pub fn setting(&self) -> Replication {
        self.setting.lock().map(|s| *s).unwrap_or_default()
    }

    /// Brings the replica closer to the store: replicates every change whose delay
    /// has passed. True when the replica equals the store.
    pub fn sync(&self, state: &State) -> bool {
        let setting = self.setting();
        let now = Instant::now();
        let changed = state.store.changed_at(&crate::admission::vwc_gr());
        if self.in_sync_at.lock().is_ok_and(|at| *at == Some(changed)) {
            return true;
        }
        let gr = crate::admission::vwc_gr();
        let since = self.scanned_at.lock().ok().and_then(|at| *at);
        let changed_keys = since.and_then(|at| state.store.keys_changed_since(&gr, at));
        let (Ok(mut replica), Ok(mut due)) = (self.replica.write(), self.due.lock()) else {
            return false;
        };
        // What may differ: the keys changed since the last sync and those waiting to
        // replicate; every key on the first sync, after a setting change or once the
        // store's history no longer reaches the last sync.
        let (live, keys): (HashMap<Key, Arc<Value>>, HashSet<Key>) = match changed_keys {
            Some(changed) => {
                let keys: HashSet<Key> = changed
                    .into_iter()
                    .chain(due.keys().cloned())
                    .filter(|k| !k.cluster.is_empty())
                    .collect();
                let live = keys
                    .iter()
                    .filter_map(|k| Some((k.clone(), state.store.get(&gr, k)?)))
                    .collect();
                (live, keys)
            }
            None => {
                let live: HashMap<Key, Arc<Value>> = state
                    .store
                    .all_objects(&gr)
                    .into_iter()
                    .filter(|(k, _)| !k.cluster.is_empty())
                    .collect();
                let keys = live.keys().chain(replica.keys()).cloned().collect();
                (live, keys)
            }
        };
        let mut in_sync = true;
        for k in keys {
            let (l, r) = (live.get(&k), replica.get(&k));
            let same = match (l, r) {
                (Some(a), Some(b)) => rv_of(a) == rv_of(b),
                (None, None) => true,
                _ => false,
            };
            if same {
                due.remove(&k);
                continue;
            }
            in_sync = false;
            let Some(delay) = setting.delay() else {
                continue;
            };
            let at = *due.entry(k.clone()).or_insert(now + delay);
            if now < at {
                continue;
            }
            due.remove(&k);
            match l {
                Some(v) => {
                    replica.insert(k, v.clone());
                }
                None => {
                    replica.remove(&k);
                }
            }
        }
        if let Ok(mut at) = self.in_sync_at.lock() {
            *at = in_sync.then_some(changed);
        }
        // (Stopped, a change found is not scheduled: every sync reads all.)
        if let Ok(mut at) = self.scanned_at.lock() {
            *at = setting.delay().is_some().then_some(changed);
        }
        in_sync
    }
}

/// Runs the replication until the simulator shuts down.
pub fn spawn(state: Arc<State>) {
    tokio::spawn(async move {
        let mut shutdown = state.shutdown_rx.clone();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(Duration::from_millis(10)) => {},
            }
            state.cache.sync(&state);
        }
    });
}
