//! Objects of one kind across logical clusters, fed by the watches of every
//! endpoint of the APIExportEndpointSlice.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::TypeMeta;

/// What a store keeps of an object its watches deliver: the object itself, or a
/// more compact form of it.
pub trait Keep: Resource + Sized {
    /// The form kept.
    type Kept: Resource;
    /// The form kept of `self` (already [`trimmed`]).
    fn keep(self) -> Self::Kept;
}

/// A configuration is kept with each webhook's CA bundle as a short handle of its
/// bytes (see [`CaBundles`]): every webhook of every configuration carries the same
/// bundle, about 1 KiB each, most of a kept configuration (docs/performance.md,
/// "Controller memory at fleet size").
impl Keep for ValidatingWebhookConfiguration {
    type Kept = Self;
    fn keep(mut self) -> Self {
        CaBundles::replace(&mut self, true);
        self
    }
}

/// Whether a configuration the hooks store keeps (`live`, its CA bundles as
/// handles) matches `want` ([`matches_desired`], with `want`'s CA bundles compared
/// as handles of the same bytes: exact, a changed bundle does not match).
pub(super) fn matches_kept(
    live: &ValidatingWebhookConfiguration,
    want: &ValidatingWebhookConfiguration,
) -> bool {
    let mut want = want.clone();
    CaBundles::replace(&mut want, false);
    matches_desired(live, &want)
}

/// The distinct CA bundles of the configurations kept, one copy each: a kept
/// configuration names its bundle by a handle, `<prefix><index>`, which no two
/// different bundles share (exact, unlike a digest). The prefix carries a number
/// drawn at start, so a bundle written to look like a handle is not taken for one.
/// At most [`CA_BUNDLES_MAX`] (a bundle past those is kept as it is: comparisons
/// stay exact, only the memory is not saved).
struct CaBundles {
    prefix: String,
    bundles: Vec<Box<[u8]>>,
}

/// The most CA bundles [`CaBundles`] holds (a new one per CA rotation).
const CA_BUNDLES_MAX: usize = 64;

static CA_BUNDLES: std::sync::LazyLock<Mutex<CaBundles>> = std::sync::LazyLock::new(|| {
    Mutex::new(CaBundles {
        prefix: format!("holdfast-kept-ca-bundle:{:016x}:", rand::random::<u64>()),
        bundles: Vec::new(),
    })
});

impl CaBundles {
    /// Replaces each CA bundle of `cfg` by its handle; with `intern`, a bundle not
    /// held yet is taken in (if there is room), else it stays as it is.
    fn replace(cfg: &mut ValidatingWebhookConfiguration, intern: bool) {
        let Some(hooks) = cfg.webhooks.as_mut() else {
            return;
        };
        let mut table = CA_BUNDLES.lock();
        for ca in hooks
            .iter_mut()
            .filter_map(|h| h.client_config.ca_bundle.as_mut())
        {
            if let Some(handle) = table.handle(&ca.0, intern) {
                ca.0 = handle;
            }
        }
    }

    /// The handle of `bytes`, if held (or taken in).
    fn handle(&mut self, bytes: &[u8], intern: bool) -> Option<Vec<u8>> {
        let i = match self.bundles.iter().position(|b| **b == *bytes) {
            Some(i) => i,
            None if intern && self.bundles.len() < CA_BUNDLES_MAX => {
                self.bundles.push(bytes.into());
                self.bundles.len() - 1
            }
            None => return None,
        };
        Some(format!("{}{i}", self.prefix).into_bytes())
    }
}

/// An untyped object as a store keeps it: its metadata, and the rest of it
/// (`spec`, `status`...) as compact JSON text, parsed when a pass reads it (once
/// per resourceVersion: the pass's decodings are cached). A `serde_json::Value`
/// tree costs a B-tree node (over 600 bytes) per JSON object however few its
/// fields, about 10 KiB per policy object, ten times its text: the stores held
/// most of the controller's memory at fleet size (docs/performance.md,
/// "Controller memory at fleet size").
#[derive(Clone, Debug)]
pub struct Stored {
    /// `apiVersion` and `kind`.
    pub types: Option<TypeMeta>,
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Everything else, as JSON text.
    data: Box<str>,
}

impl Stored {
    /// The form kept of `obj`.
    pub fn of(obj: DynamicObject) -> Self {
        Self {
            types: obj.types,
            metadata: obj.metadata,
            data: obj.data.to_string().into_boxed_str(),
        }
    }

    /// Everything but the metadata, parsed (`null` if it were unreadable: it
    /// was written from a parsed value).
    pub fn data(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_default()
    }

    /// Its `status` alone, parsed (`null` when it has none): the rest of the
    /// text is read past, not built.
    pub fn status(&self) -> serde_json::Value {
        #[derive(serde::Deserialize)]
        struct Only {
            #[serde(default)]
            status: serde_json::Value,
        }
        serde_json::from_str::<Only>(&self.data)
            .map(|o| o.status)
            .unwrap_or_default()
    }

    /// The object again.
    pub fn object(&self) -> DynamicObject {
        DynamicObject {
            types: self.types.clone(),
            metadata: self.metadata.clone(),
            data: self.data(),
        }
    }
}

impl Resource for Stored {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        DynamicObject::group(dt)
    }
    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        DynamicObject::version(dt)
    }
    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        DynamicObject::kind(dt)
    }
    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        DynamicObject::api_version(dt)
    }
    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        DynamicObject::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Keep for DynamicObject {
    type Kept = Stored;
    fn keep(self) -> Stored {
        Stored::of(self)
    }
}

impl<K: Keep> Default for ClusterStore<K> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            ready: false,
            spec_changes: 0,
            version: 0,
            changed: HashSet::new(),
            relisted: true,
        }
    }
}

/// What changed in a store since the last [`ClusterStore::take_changes`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) enum StoreChanges {
    /// Nothing can be attributed to single objects (a relist, the first pass, a
    /// watch that changed state): everything is recomputed.
    #[default]
    All,
    /// The keys of the objects added, replaced or removed.
    Keys(HashSet<(String, String)>),
}

impl StoreChanges {
    /// Whether the changes cannot be attributed to single objects.
    pub(super) fn all(&self) -> bool {
        matches!(self, Self::All)
    }

    /// The keys changed (none for [`StoreChanges::All`]).
    pub(super) fn keys(&self) -> impl Iterator<Item = &(String, String)> {
        match self {
            Self::All => None,
            Self::Keys(k) => Some(k.iter()),
        }
        .into_iter()
        .flatten()
    }
}

impl<K: Keep> ClusterStore<K> {
    pub(super) fn key(obj: &impl Resource) -> (String, String) {
        (cluster_of(obj), obj.meta().name.clone().unwrap_or_default())
    }

    /// The object at `key`, with the key the store shares.
    pub(super) fn get(&self, key: &(String, String)) -> Option<(StoreKey, Arc<K::Kept>)> {
        self.objects
            .get_key_value(key)
            .map(|(k, v)| (k.clone(), v.clone()))
    }

    /// The changes since the last call (see [`StoreChanges`]); starts afresh.
    pub(super) fn take_changes(&mut self) -> StoreChanges {
        let changed = std::mem::take(&mut self.changed);
        match std::mem::replace(&mut self.relisted, false) {
            true => StoreChanges::All,
            false => StoreChanges::Keys(changed),
        }
    }

    /// Records a change of `key` (not needed while everything counts as changed).
    fn touch(&mut self, key: &(String, String)) {
        if !self.relisted {
            self.changed.insert(key.clone());
        }
    }

    /// A snapshot.
    pub fn snapshot(&self) -> Vec<(StoreKey, Arc<K::Kept>)> {
        self.objects
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// What a pass never reads is not kept: managed fields and the last-applied
/// annotation (about half of an object written with client-side apply), for every
/// object of every store (130,000 policies at 10,000 workspaces).
fn trimmed<K: Keep>(mut object: K) -> K::Kept {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    object.keep()
}

/// The annotation client-side `kubectl apply` keeps the applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl<K: Keep> Index<K> for ClusterStore<K> {
    fn reset(&mut self, objects: Vec<K>) {
        self.objects = objects
            .into_iter()
            .map(|o| (Arc::new(Self::key(&o)), Arc::new(trimmed(o))))
            .collect();
        self.spec_changes += 1;
        self.version += 1;
        self.relisted = true;
        self.changed.clear();
    }

    fn apply(&mut self, object: K) {
        let object = trimmed(object);
        let (meta, key) = (object.meta(), Self::key(&object));
        let same_spec = self.objects.get(&key).is_some_and(|old| {
            let old = old.meta();
            old.uid == meta.uid && old.generation == meta.generation
        });
        if !same_spec {
            self.spec_changes += 1;
        }
        self.version += 1;
        self.touch(&key);
        match self.objects.get_mut(&key) {
            // The key stays the one snapshots and caches share.
            Some(slot) => *slot = Arc::new(object),
            None => {
                self.objects.insert(Arc::new(key), Arc::new(object));
            }
        }
    }

    fn delete(&mut self, object: K) {
        let key = Self::key(&object);
        if self.objects.remove(&key).is_some() {
            self.spec_changes += 1;
            self.version += 1;
            self.touch(&key);
        }
    }

    fn status(&mut self, from: &WatchStatus, to: &WatchStatus) {
        self.ready = to.synced;
        if from != to {
            // A watch started, failed or listed again: what it missed meanwhile
            // is not attributed to keys.
            self.relisted = true;
            self.changed.clear();
        }
        if let WatchState::Failed(e) | WatchState::Forbidden(e) = &to.state {
            tracing::warn!(error = %e, "kcp watch failed; listing again");
        }
    }
}

impl<K: Keep> SharedFeed<K> {
    pub(super) fn with(&self, f: impl FnOnce(&mut ClusterStore<K>)) {
        f(&mut self.store.lock());
        self.notify.notify_one();
    }
}

impl<K: Keep> Index<K> for SharedFeed<K> {
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

impl<K: Keep> Partitioned<K> for SharedFeed<K> {
    fn remove(&mut self, key: &ObjectKey) {
        self.with(|s| {
            let key = (key.cluster.clone(), key.name.clone());
            if s.objects.remove(&key).is_some() {
                s.spec_changes += 1;
                s.version += 1;
                s.touch(&key);
            }
        });
    }
}

/// Watches `api` on every endpoint of `source` (a 404 through a virtual workspace
/// proves nothing: fail closed) into a new store.
pub(super) fn spawn_store<K>(source: Source<K>, notify: Arc<Notify>) -> EndpointStore<K>
where
    K: Keep + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::Kept: Send + Sync,
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
