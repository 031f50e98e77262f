//! Anchors read from another cluster (an AnchorRule's `anchorSource`): one
//! watch-fed store per (source, anchor resource), shared by every rule naming the
//! same source and resource. The source's kubeconfig is read from a Secret in
//! holdfast's own namespace (only there: an AnchorRule is cluster-scoped, and
//! whoever may write one must not be able to make the webhook use the credentials
//! of any Secret in any namespace). While a store has not synced, or its watch
//! has failed, lookups fail and the anchor's objects are refused ("fail closed").

use dashmap::DashMap;
use futures::StreamExt;
use holdfast_shared::{
    anchorsource,
    api::common::GroupResource,
    policy::LookupError,
    registry::AnchorSourceRef,
    watch::{self, Driver, Index, NotFound, Status, Step, WatchState},
};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
    runtime::watcher,
};
use parking_lot::RwLock;
use serde_json::Value;
use std::{collections::HashMap, sync::Arc, time::Duration};

/// How often a watched source's Secret is read again.
const SECRET_RECHECK: Duration = Duration::from_secs(10);

/// How long a source that cannot be used waits before its Secret is read again.
const SOURCE_RETRY: Duration = Duration::from_secs(5);
/// How often the set of anchor sources the rules name is re-read: rules change
/// rarely, and a new source is picked up within this.
const SOURCE_RESCAN: Duration = Duration::from_secs(1);

/// What is known of one remote store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceState {
    /// Not listed yet.
    Connecting,
    /// Listed and watched.
    Synced,
    /// The last list or watch failed (the error).
    Unreachable(String),
    /// The source cannot be used (the Secret is missing, outside holdfast's
    /// namespace, or holds no usable kubeconfig).
    Unusable(String),
}

/// Identity of a remote store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    /// The source.
    pub source: AnchorSourceRef,
    /// The anchor resource.
    pub gr: GroupResource,
    /// Its version.
    pub version: String,
}

/// The anchors of one resource in one source's cluster.
pub struct RemoteStore {
    state: RwLock<SourceState>,
    /// (namespace, name) → object.
    objects: RwLock<HashMap<(String, String), Arc<Value>>>,
}

impl Default for RemoteStore {
    fn default() -> Self {
        Self {
            state: RwLock::new(SourceState::Connecting),
            objects: RwLock::new(HashMap::new()),
        }
    }
}

impl RemoteStore {
    /// The store's state.
    pub fn state(&self) -> SourceState {
        self.state.read().clone()
    }

    fn set_state(&self, s: SourceState) {
        *self.state.write() = s;
    }

    fn objects(&self) -> parking_lot::RwLockWriteGuard<'_, HashMap<(String, String), Arc<Value>>> {
        self.objects.write()
    }

    /// The anchor `namespace/name`, or why it cannot be known.
    pub fn get(
        &self,
        source: &AnchorSourceRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<Value>>, LookupError> {
        match self.state() {
            SourceState::Synced => {}
            other => return Err(state_error(source, &other)),
        }
        Ok(self
            .objects
            .read()
            .get(&(namespace.unwrap_or_default().to_string(), name.to_string()))
            .cloned())
    }
}

/// The refusal's reason for a store that is not synced.
pub fn state_error(source: &AnchorSourceRef, state: &SourceState) -> LookupError {
    LookupError::unreadable(match state {
        SourceState::Synced => format!("anchor source {source} is synced"),
        SourceState::Connecting => format!("anchor source {source} is not synced yet"),
        SourceState::Unreachable(_) => format!("anchor source {source} is unreachable"),
        SourceState::Unusable(why) => format!("anchor source {source} cannot be used: {why}"),
    })
}

/// Every remote store.
#[derive(Default)]
pub struct RemoteStores {
    stores: DashMap<RemoteKey, Arc<RemoteStore>>,
}

impl RemoteStores {
    /// The store of `source` and `gr`, if one is kept.
    pub fn get(&self, source: &AnchorSourceRef, gr: &GroupResource) -> Option<Arc<RemoteStore>> {
        self.stores
            .iter()
            .find(|e| e.key().source == *source && e.key().gr == *gr)
            .map(|e| e.value().clone())
    }
}

/// The Secret's resourceVersion (None: it does not exist), or why it was not read.
async fn secret_version(
    local: &Client,
    source: &AnchorSourceRef,
) -> Result<Option<String>, String> {
    let api: Api<Secret> = Api::namespaced(local.clone(), &source.namespace);
    tokio::time::timeout(anchorsource::SOURCE_CALL_TIMEOUT, api.get_opt(&source.name))
        .await
        .map_err(|_| "the Secret was not read in time".to_string())?
        .map(|s| s.map(|s| s.metadata.resource_version.unwrap_or_default()))
        .map_err(|e| format!("reading the Secret failed: {e}"))
}

/// A client for the cluster of `source` and the Secret's resourceVersion, or why
/// there is none.
async fn remote_client(
    local: &Client,
    allowed_namespace: &str,
    source: &AnchorSourceRef,
) -> Result<(Client, String), SourceState> {
    if let Some(why) = anchorsource::namespace_problem(source, allowed_namespace) {
        return Err(SourceState::Unusable(why));
    }
    let api: Api<Secret> = Api::namespaced(local.clone(), &source.namespace);
    let secret = tokio::time::timeout(anchorsource::SOURCE_CALL_TIMEOUT, api.get_opt(&source.name))
        .await
        .map_err(|_| SourceState::Unreachable("the Secret was not read in time".to_string()))?
        .map_err(|e| SourceState::Unreachable(format!("reading the Secret failed: {e}")))?;
    let version = secret
        .as_ref()
        .and_then(|s| s.metadata.resource_version.clone())
        .unwrap_or_default();
    // Errors name the Secret's key and the kind of problem, never its contents.
    let unusable = |e: anchorsource::SourceError| SourceState::Unusable(e.to_string());
    let kubeconfig = anchorsource::kubeconfig(source, secret.as_ref()).map_err(unusable)?;
    let config = anchorsource::client_config(source, kubeconfig)
        .await
        .map_err(unusable)?;
    let client = Client::try_from(config)
        .map_err(|_| unusable(anchorsource::SourceError::Unusable(source.key.clone())))?;
    Ok((client, version))
}

/// (namespace, name) of an object.
fn key_of(o: &DynamicObject) -> (String, String) {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// The index a remote watch feeds: the store, whose state follows the watch's.
struct RemoteFeed<'a> {
    key: &'a RemoteKey,
    store: &'a RemoteStore,
}

impl Index<DynamicObject> for RemoteFeed<'_> {
    fn reset(&mut self, objects: Vec<DynamicObject>) {
        *self.store.objects() = objects
            .into_iter()
            .map(|o| {
                (
                    key_of(&o),
                    Arc::new(serde_json::to_value(o).unwrap_or(Value::Null)),
                )
            })
            .collect();
    }

    fn apply(&mut self, o: DynamicObject) {
        let k = key_of(&o);
        let v = Arc::new(serde_json::to_value(o).unwrap_or(Value::Null));
        self.store.objects().insert(k, v);
    }

    fn delete(&mut self, o: DynamicObject) {
        self.store.objects().remove(&key_of(&o));
    }

    fn status(&mut self, _from: &Status, to: &Status) {
        let (key, store) = (self.key, self.store);
        let state = match &to.state {
            WatchState::Starting => SourceState::Connecting,
            WatchState::Listed => {
                tracing::info!(source = %key.source, resource = %key.gr, "anchor source synced");
                SourceState::Synced
            }
            // Not served there: most likely the wrong cluster, so nothing is taken
            // as known (fail closed).
            WatchState::NotServed => {
                store.objects().clear();
                SourceState::Unusable(format!("{} is not served there", key.gr))
            }
            WatchState::Forbidden(e) | WatchState::Failed(e) => {
                tracing::warn!(source = %key.source, resource = %key.gr, error = %e, "anchor source unreachable; refusing its anchors' objects until it is listed again");
                SourceState::Unreachable(e.clone())
            }
        };
        store.set_state(state);
    }
}

/// Feeds one remote store until aborted: reads the Secret, lists and watches the
/// anchors through the shared watch driver (a 404 proves nothing there: the source
/// may be the wrong cluster); after any failure starts over with a fresh list.
async fn run_remote(
    local: Client,
    allowed_namespace: String,
    key: RemoteKey,
    store: Arc<RemoteStore>,
) {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&key.gr.group, &key.version, ""),
        &key.gr.resource,
    );
    let mut backoff = watch::backoff();
    let mut feed = RemoteFeed {
        key: &key,
        store: &store,
    };
    loop {
        let (client, version) = match remote_client(&local, &allowed_namespace, &key.source).await {
            Ok(c) => c,
            Err(state) => {
                if store.state() != state {
                    tracing::warn!(source = %key.source, resource = %key.gr, ?state, "anchor source not usable; refusing its anchors' objects");
                }
                store.set_state(state);
                tokio::time::sleep(SOURCE_RETRY).await;
                continue;
            }
        };
        let api: Api<DynamicObject> = Api::all_with(client, &ar);
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        let mut driver = Driver::new(NotFound::Unknown);
        // The Secret is read again now and then: a changed one (another cluster,
        // rotated credentials) starts over with a fresh list.
        let mut recheck = tokio::time::interval(SECRET_RECHECK);
        recheck.tick().await;
        loop {
            let item = tokio::select! {
                e = stream.next() => e,
                _ = recheck.tick() => {
                    match secret_version(&local, &key.source).await {
                        Ok(Some(v)) if v == version => continue,
                        // Not read this time: keep going on what was read.
                        Err(_) => continue,
                        Ok(_) => {
                            tracing::info!(source = %key.source, resource = %key.gr, "anchor source Secret changed; listing again");
                            store.set_state(SourceState::Connecting);
                            backoff.reset();
                            break;
                        }
                    }
                }
            };
            let Some(item) = item else { break };
            if driver.handle(&mut feed, item) == Step::Restart {
                break;
            }
            if driver.synced() {
                backoff.reset();
            }
        }
        tokio::time::sleep(backoff.next().unwrap_or(SOURCE_RETRY)).await;
    }
}

/// What [`manage`] keeps stores for, and where it keeps them (the webhook's view).
pub trait AnchorSources: Send + Sync + 'static {
    /// Every (source, anchor resource) the AnchorRules name.
    fn wanted_remotes(&self) -> std::collections::HashSet<RemoteKey>;
    /// Where the stores live.
    fn remote_stores(&self) -> &RemoteStores;
}

/// Keeps one store per (source, anchor resource) the AnchorRules name.
pub async fn manage<V: AnchorSources>(view: Arc<V>, local: Client) {
    let allowed = holdfast_shared::anchorsource::allowed_namespace();
    let mut running: HashMap<RemoteKey, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let wanted = view.wanted_remotes();
        let remotes = view.remote_stores();
        running.retain(|k, h| {
            let keep = wanted.contains(k);
            if !keep {
                h.abort();
                remotes.stores.remove(k);
            }
            keep
        });
        for key in wanted {
            if running.contains_key(&key) {
                continue;
            }
            let store = Arc::new(RemoteStore::default());
            remotes.stores.insert(key.clone(), store.clone());
            tracing::info!(source = %key.source, resource = %key.gr, "watching anchors in another cluster");
            running.insert(
                key.clone(),
                tokio::spawn(run_remote(local.clone(), allowed.clone(), key, store)),
            );
        }
        tokio::time::sleep(SOURCE_RESCAN).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> watcher::Error {
        let status = kube::core::Status::failure("refused", "").with_code(code);
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
    }

    fn anchor(name: &str) -> DynamicObject {
        let mut o = DynamicObject::new(
            name,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "ConfigMap"),
                "configmaps",
            ),
        );
        o.metadata.namespace = Some("ops".into());
        o
    }

    #[test]
    fn a_remote_store_answers_only_while_synced() {
        let key = RemoteKey {
            source: AnchorSourceRef {
                namespace: "holdfast-system".into(),
                name: "far".into(),
                key: "kubeconfig".into(),
            },
            gr: GroupResource::new("", "configmaps"),
            version: "v1".into(),
        };
        let store = RemoteStore::default();
        let mut feed = RemoteFeed {
            key: &key,
            store: &store,
        };
        let mut d = Driver::new(NotFound::Unknown);
        let get = |s: &RemoteStore| {
            s.get(&key.source, Some("ops"), "gate")
                .map(|o| o.is_some())
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            get(&store),
            Err(format!("anchor source {} is not synced yet", key.source))
        );
        d.handle(&mut feed, Ok(watcher::Event::Init));
        d.handle(&mut feed, Ok(watcher::Event::InitApply(anchor("gate"))));
        d.handle(&mut feed, Ok(watcher::Event::InitDone));
        assert_eq!(get(&store), Ok(true));
        d.handle(&mut feed, Ok(watcher::Event::Delete(anchor("gate"))));
        assert_eq!(get(&store), Ok(false));
        // A 404 there proves nothing (maybe the wrong cluster): refused.
        d.handle(&mut feed, Err(api_error(404)));
        assert_eq!(
            get(&store),
            Err(format!(
                "anchor source {} cannot be used: configmaps is not served there",
                key.source
            ))
        );
        // Any other failure: unreachable, refused.
        d.handle(&mut feed, Err(api_error(500)));
        assert_eq!(
            get(&store),
            Err(format!("anchor source {} is unreachable", key.source))
        );
    }
}
