//! Containment markers: the label [`CONTAINS_PROTECTED_LABEL`] the controller
//! keeps on every namespace holding an object that a DELETE webhook of the
//! configuration routes (a protection-labelled object of any namespaced type, or
//! an object some policy route selects). Namespace DELETEs reach the containment
//! webhook only for marked namespaces — once every namespace that needs the
//! marker carries it; until then every namespace DELETE is routed (fail closed).
//!
//! Objects are read from metadata-only watches: per protection label key one
//! watch (label selector `KEY`) per namespaced resource, and one watch of every
//! object per namespaced resource a policy route names.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use futures::StreamExt as _;
use holdfast_shared::{
    api::GroupResource,
    watch::{Cache, NotFound, spawn_cache},
    webhookconfig::{CONTAINS_PROTECTED_LABEL, Containment, Route},
};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt as _,
    api::{ApiResource, DynamicObject, PartialObjectMeta, Patch, PatchParams},
    runtime::watcher,
};
use serde_json::{Map, Value};
use tokio::{sync::Notify, task::JoinHandle};

use crate::policies::ApiIndex;

/// One metadata watch: a resource, optionally only objects carrying a label key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct StoreKey {
    gr: GroupResource,
    label: Option<String>,
}

struct ObjectStore<K = PartialObjectMeta<DynamicObject>> {
    store: Cache<K>,
    task: JoinHandle<()>,
}

impl<K> Drop for ObjectStore<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watches and the namespaces' current markers.
pub struct Markers {
    client: Client,
    notify: Arc<Notify>,
    stores: HashMap<StoreKey, ObjectStore>,
    namespaces: ObjectStore<PartialObjectMeta<Namespace>>,
    /// The wait before trying again a marker change that failed: the first retry
    /// after [`MARKER_RETRY`](crate::kubernetes::timing::MARKER_RETRY), doubling
    /// while they keep failing (the webhook down, say) up to [`MARKER_RETRY_MAX`].
    retry: std::time::Duration,
}

/// The longest wait between tries of a marker change that keeps failing.
const MARKER_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Watches `api` into a cache (a 404 means the type is not served: none), waking
/// `notify` on every change.
fn spawn_store<K>(api: Api<K>, cfg: watcher::Config, notify: &Arc<Notify>) -> ObjectStore<K>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let notify = notify.clone();
    let (store, task) = spawn_cache(api, cfg, NotFound::Empty, move || notify.notify_one());
    ObjectStore { store, task }
}

fn labels_map(labels: &std::collections::BTreeMap<String, String>) -> Map<String, Value> {
    labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

impl Markers {
    /// Starts the namespace watch; object watches follow what [`Markers::sync`] needs.
    pub fn new(client: Client, notify: Arc<Notify>) -> Self {
        let namespaces = spawn_store(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            watcher::Config::default(),
            &notify,
        );
        Self {
            client,
            notify,
            stores: HashMap::new(),
            namespaces,
            retry: crate::kubernetes::timing::MARKER_RETRY,
        }
    }

    fn spawn(&self, ar: &ApiResource, label: Option<&str>) -> ObjectStore {
        let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(self.client.clone(), ar);
        let mut cfg = watcher::Config::default();
        if let Some(l) = label {
            cfg = cfg.labels(l);
        }
        spawn_store(api, cfg, &self.notify)
    }

    /// Keeps exactly the watches `routes` and the protection label `keys` need,
    /// over the types the controller may read (`readable`; None: any).
    fn ensure(
        &mut self,
        index: &ApiIndex,
        routes: &[Route],
        keys: &[String],
        readable: Option<&BTreeSet<GroupResource>>,
    ) {
        let mut wanted: HashMap<StoreKey, ApiResource> = HashMap::new();
        for (gr, ar) in index
            .watchable()
            .filter(|(gr, _)| readable.is_none_or(|r| r.contains(*gr)))
        {
            for key in keys {
                wanted.insert(
                    StoreKey {
                        gr: gr.clone(),
                        label: Some(key.clone()),
                    },
                    ar.clone(),
                );
            }
        }
        // Wildcard routes (`resource: "*"`) stand for every watchable type they cover.
        let covered = index
            .watchable()
            .filter(|(gr, _)| routes.iter().any(|r| r.covers(gr)))
            .map(|(gr, _)| gr.clone());
        let routed: Vec<GroupResource> = routes
            .iter()
            .flat_map(|r| r.resources.iter().cloned())
            .chain(covered)
            .collect();
        for gr in &routed {
            if let Some(ar) = index.watchable_resource(gr) {
                wanted.insert(
                    StoreKey {
                        gr: gr.clone(),
                        label: None,
                    },
                    ar.clone(),
                );
            }
        }
        self.stores.retain(|k, _| wanted.contains_key(k));
        for (key, ar) in wanted {
            if !self.stores.contains_key(&key) {
                let store = self.spawn(&ar, key.label.as_deref());
                self.stores.insert(key, store);
            }
        }
    }

    /// The namespaces that must carry the marker, or `None` while some watch has
    /// not listed yet.
    async fn wanted(&self, routes: &[Route]) -> Option<BTreeSet<String>> {
        if !self.namespaces.store.synced() || self.stores.values().any(|s| !s.store.synced()) {
            return None;
        }
        let ns_labels: HashMap<String, Map<String, Value>> = self
            .namespaces
            .store
            .state()
            .iter()
            .map(|n| (n.name_any(), labels_map(n.labels())))
            .collect();
        let objects = self.stores.iter().flat_map(|(key, s)| {
            s.store.state().into_iter().filter_map(move |obj| {
                Some(Seen {
                    gr: key.gr.clone(),
                    labelled: key.label.is_some(),
                    namespace: obj.metadata.namespace.clone()?,
                    name: obj.name_any(),
                    labels: labels_map(obj.labels()),
                })
            })
        });
        Some(namespaces_to_mark(objects, routes, &ns_labels))
    }

    /// Brings the watches and the markers in line with `routes` and `keys`, and
    /// says how namespace DELETEs may be routed: [`Containment::Marked`] only when
    /// every namespace needing the marker carries it. Label watches cover the
    /// types in `readable` only (None: every type): Secrets stay unread unless a
    /// policy names them or the controller is told to read them.
    pub async fn sync(
        &mut self,
        index: &ApiIndex,
        routes: &[Route],
        keys: &[String],
        readable: Option<&BTreeSet<GroupResource>>,
    ) -> Containment {
        if !index.loaded {
            return Containment::Everywhere;
        }
        self.ensure(index, routes, keys, readable);
        let Some(wanted) = self.wanted(routes).await else {
            return Containment::Everywhere;
        };
        let marked: BTreeSet<String> = self
            .namespaces
            .store
            .state()
            .iter()
            .filter(|n| n.labels().contains_key(CONTAINS_PROTECTED_LABEL))
            .map(|n| n.name_any())
            .collect();
        let api: Api<Namespace> = Api::all(self.client.clone());
        let changes: Vec<(String, bool)> = wanted
            .difference(&marked)
            .map(|ns| (ns.clone(), true))
            .chain(marked.difference(&wanted).map(|ns| (ns.clone(), false)))
            .collect();
        let api = &api;
        let failed = futures::stream::iter(changes)
            .map(|(ns, on)| async move {
                match set_marker(api, &ns, on).await {
                    Ok(()) => {
                        if on {
                            tracing::info!(namespace = %ns, "namespace holds routed objects: marked for containment");
                        } else {
                            tracing::info!(namespace = %ns, "namespace holds no routed object: marker removed");
                        }
                        None
                    }
                    Err(e) => {
                        if on {
                            tracing::warn!(namespace = %ns, error = %e, "marking namespace failed; every namespace DELETE stays routed");
                        } else {
                            tracing::warn!(namespace = %ns, error = %e, "removing namespace marker failed");
                        }
                        Some(on)
                    }
                }
            })
            .buffer_unordered(16)
            .filter_map(futures::future::ready)
            .collect::<Vec<bool>>()
            .await;
        if failed.is_empty() {
            self.retry = crate::kubernetes::timing::MARKER_RETRY;
        } else {
            crate::kubernetes::wake_after(&self.notify, self.retry);
            self.retry = (self.retry * 2).min(MARKER_RETRY_MAX);
        }
        let complete = !failed.iter().any(|addition| *addition);
        if complete {
            Containment::Marked
        } else {
            Containment::Everywhere
        }
    }
}

/// A namespaced object one of the marker watches saw.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Its resource.
    pub gr: GroupResource,
    /// Seen by a protection-label watch (it carries a protection label key).
    pub labelled: bool,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: Map<String, Value>,
}

/// The namespaces holding an object some DELETE entry routes: a protection-labelled
/// one, or one a policy route selects (`ns_labels`: every namespace's labels).
pub fn namespaces_to_mark(
    objects: impl IntoIterator<Item = Seen>,
    routes: &[Route],
    ns_labels: &HashMap<String, Map<String, Value>>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for o in objects {
        if out.contains(&o.namespace) {
            continue;
        }
        let routed = o.labelled
            || routes.iter().any(|r| {
                r.matches(
                    &o.gr,
                    Some(&o.namespace),
                    ns_labels.get(&o.namespace),
                    &o.name,
                    Some(&o.labels),
                )
            });
        if routed {
            out.insert(o.namespace);
        }
    }
    out
}

async fn set_marker(api: &Api<Namespace>, ns: &str, on: bool) -> Result<(), kube::Error> {
    let value = if on { Value::from("true") } else { Value::Null };
    let patch = serde_json::json!({"metadata": {"labels": {CONTAINS_PROTECTED_LABEL: value}}});
    match api
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Gone meanwhile: nothing to contain.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_shared::webhookconfig::NamespaceScope;

    fn seen(
        gr: (&str, &str),
        labelled: bool,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
    ) -> Seen {
        Seen {
            gr: GroupResource::new(gr.0, gr.1),
            labelled,
            namespace: ns.to_string(),
            name: name.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), Value::from(*v)))
                .collect(),
        }
    }

    #[test]
    fn marks_namespaces_holding_labelled_or_selected_objects_only() {
        let route = |namespaces, names: Option<&[&str]>| Route {
            resources: [GroupResource::new("", "configmaps")].into(),
            namespaces,
            labels: None,
            names: names.map(|n| n.iter().map(|s| s.to_string()).collect()),
            policies: ["ResourceProtection/p".to_string()].into(),
            exclude: Default::default(),
        };
        let routes = vec![
            route(
                NamespaceScope::Only(["shop".into()].into()),
                Some(&["settings"]),
            ),
            route(NamespaceScope::Labelled("team".into()), None),
            route(NamespaceScope::not_system(), Some(&["global"])),
        ];
        let ns_labels: HashMap<String, Map<String, Value>> = [(
            "teamns".to_string(),
            [("team".to_string(), Value::from("a"))]
                .into_iter()
                .collect(),
        )]
        .into();
        let objects = vec![
            seen(("", "configmaps"), false, "shop", "settings", &[]),
            seen(("", "configmaps"), false, "shop2", "settings", &[]),
            seen(("", "configmaps"), false, "other", "unrelated", &[]),
            seen(("", "secrets"), false, "secretns", "settings", &[]),
            seen(("", "configmaps"), false, "teamns", "x", &[]),
            seen(("", "configmaps"), false, "kube-system", "global", &[]),
            seen(("", "configmaps"), false, "apps", "global", &[]),
            seen(
                ("", "persistentvolumeclaims"),
                true,
                "labelled",
                "data",
                &[],
            ),
        ];
        assert_eq!(
            namespaces_to_mark(objects, &routes, &ns_labels),
            ["apps", "labelled", "shop", "teamns"]
                .iter()
                .map(|s| s.to_string())
                .collect::<BTreeSet<_>>()
        );
    }
}
