//! CustomResourceDefinitions and APIServices: what Cascading protection needs of each
//! CRD, which namespaced custom resources exist (their label stores must sync before a
//! namespace's contents are trusted), and discovery woken at once when either changes.

use super::WebhookView;
use dashmap::DashMap;
use holdfast_shared::{
    api::common::GroupResource,
    watch::{self, Index, NotFound, Status, WatchState},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
    core::PartialObjectMeta,
    runtime::watcher,
};
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

/// The CustomResourceDefinitions (Kubernetes topology, from the CRD watch).
#[derive(Default)]
pub(super) struct Crds {
    /// Every CustomResourceDefinition, by the resource it serves.
    facts: DashMap<GroupResource, CrdFacts>,
    /// Namespaced custom resources of established CRDs: each must have synced label
    /// stores before a namespace's contents are trusted.
    namespaced: DashMap<GroupResource, ()>,
    /// Whether the CRD watch has listed every CRD once.
    listed: AtomicBool,
}

impl Crds {
    /// Whether the CRD watch has listed every CRD once.
    pub(super) fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// The `specReplicasPath` of the scale subresource of custom resource `gr`, if
    /// it has one (or is no custom resource).
    pub(super) fn replicas_path(&self, gr: &GroupResource) -> Option<String> {
        self.facts.get(gr).and_then(|f| f.replicas_path.clone())
    }

    /// The namespaced custom resources of established CRDs.
    pub(super) fn namespaced(&self) -> Vec<GroupResource> {
        self.namespaced.iter().map(|e| e.key().clone()).collect()
    }

    /// Whether `gr` is a namespaced custom resource of an established CRD.
    pub(super) fn is_namespaced(&self, gr: &GroupResource) -> bool {
        self.namespaced.contains_key(gr)
    }

    /// The custom resources of established CRDs that carry a `Cascading` label
    /// (every established one: `all`).
    pub(super) fn cascading(&self, all: bool) -> Vec<GroupResource> {
        self.facts
            .iter()
            .filter(|e| e.value().established && (all || e.value().cascading))
            .map(|e| e.key().clone())
            .collect()
    }
}

/// What Cascading protection needs to know of one CustomResourceDefinition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrdFacts {
    /// Its scale subresource's `specReplicasPath` (storage version), if it has one.
    pub replicas_path: Option<String>,
    /// Whether the CRD itself carries a `Cascading` protection label.
    pub cascading: bool,
    /// Whether it is established (its instances can exist).
    pub established: bool,
}

pub(super) fn crds_gr() -> GroupResource {
    GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions")
}

/// The resource a CRD serves and what Cascading protection needs of it (its
/// `cascading` flag is left false: it depends on the protection labels).
pub(super) fn crd_facts(crd: &CustomResourceDefinition) -> (GroupResource, CrdFacts) {
    let gr = GroupResource::new(&crd.spec.group, &crd.spec.names.plural);
    let versions = &crd.spec.versions;
    let version = versions
        .iter()
        .find(|v| v.storage)
        .or_else(|| versions.iter().find(|v| v.served));
    let replicas_path = version
        .and_then(|v| v.subresources.as_ref())
        .and_then(|s| s.scale.as_ref())
        .map(|s| s.spec_replicas_path.clone());
    let established = crd.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Established" && c.status == "True")
    }) && crd.metadata.deletion_timestamp.is_none();
    (
        gr,
        CrdFacts {
            replicas_path,
            cascading: false,
            established,
        },
    )
}

/// The resource a CustomResourceDefinition serves: its group, plural, kind and the
/// storage version (else the first served one).
pub(super) fn crd_resource(crd: &serde_json::Value) -> Option<ApiResource> {
    let spec = crd.get("spec")?;
    let group = spec["group"].as_str().filter(|g| !g.is_empty())?;
    let plural = spec["names"]["plural"].as_str().filter(|p| !p.is_empty())?;
    let kind = spec["names"]["kind"].as_str().unwrap_or_default();
    let versions = spec["versions"].as_array()?;
    let version = versions
        .iter()
        .find(|v| v["storage"] == true)
        .or_else(|| versions.iter().find(|v| v["served"] == true))
        .and_then(|v| v["name"].as_str())?;
    Some(ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: format!("{group}/{version}"),
        kind: kind.to_string(),
        plural: plural.to_string(),
    })
}

/// The CRD index: every CRD's facts, and the namespaced established ones (each must
/// have synced label stores before a namespace's contents are trusted). Any change
/// wakes discovery at once.
struct CrdFeed {
    view: Arc<WebhookView>,
}

impl CrdFeed {
    fn facts(&self, crd: &CustomResourceDefinition) -> (GroupResource, CrdFacts) {
        let (gr, mut f) = crd_facts(crd);
        let labels: Option<serde_json::Map<String, serde_json::Value>> =
            crd.metadata.labels.as_ref().map(|l| {
                l.iter()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect()
            });
        f.cascading = self.view.stores.cascading_labelled(labels.as_ref());
        (gr, f)
    }

    fn insert(&self, crd: &CustomResourceDefinition) {
        let (gr, f) = self.facts(crd);
        let crds = &self.view.crds;
        if f.established && crd.spec.scope == "Namespaced" {
            crds.namespaced.insert(gr.clone(), ());
        } else {
            crds.namespaced.remove(&gr);
        }
        crds.facts.insert(gr, f);
    }
}

impl Index<CustomResourceDefinition> for CrdFeed {
    fn reset(&mut self, objects: Vec<CustomResourceDefinition>) {
        self.view.crds.namespaced.clear();
        self.view.crds.facts.clear();
        for crd in &objects {
            self.insert(crd);
        }
        self.view.stores.rediscover();
    }

    fn apply(&mut self, crd: CustomResourceDefinition) {
        self.insert(&crd);
        self.view.stores.rediscover();
    }

    fn delete(&mut self, crd: CustomResourceDefinition) {
        let gr = GroupResource::new(&crd.spec.group, &crd.spec.names.plural);
        self.view.crds.namespaced.remove(&gr);
        self.view.crds.facts.remove(&gr);
        self.view.stores.forget_cascade(gr);
        self.view.stores.rediscover();
    }

    fn status(&mut self, _from: &Status, to: &Status) {
        match &to.state {
            // Listed once is enough: while the watch recovers, the last list (and
            // periodic discovery) stands.
            WatchState::Listed | WatchState::NotServed if to.synced => {
                self.view.crds.listed.store(true, Ordering::Release);
            }
            WatchState::Failed(e) | WatchState::Forbidden(e) => {
                tracing::warn!(error = %e, "CustomResourceDefinition watch error; retrying");
            }
            _ => {}
        }
    }
}

/// Watches CustomResourceDefinitions: a new or changed CRD triggers discovery at
/// once (no waiting for the periodic one), and until its label stores have synced
/// namespace deletions are refused (its instances would be deleted unseen).
pub(super) async fn watch_crds(view: Arc<WebhookView>, client: Client) {
    watch_all(
        Api::<CustomResourceDefinition>::all(client),
        CrdFeed { view },
    )
    .await;
}

/// Watches every object of `api` into `feed` (Kubernetes: a 404 means none).
async fn watch_all<K, I>(api: Api<K>, feed: I)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    I: Index<K>,
{
    watch::run(api, watcher::Config::default(), NotFound::Empty, feed).await;
}

/// Wakes discovery on any change of an APIService.
struct ApiServiceFeed {
    view: Arc<WebhookView>,
}

impl<K> Index<K> for ApiServiceFeed {
    fn reset(&mut self, _: Vec<K>) {
        self.view.stores.rediscover();
    }
    fn apply(&mut self, _: K) {
        self.view.stores.rediscover();
    }
    fn delete(&mut self, _: K) {
        self.view.stores.rediscover();
    }
    fn status(&mut self, _from: &Status, to: &Status) {
        if let WatchState::Failed(e) | WatchState::Forbidden(e) = &to.state {
            tracing::warn!(error = %e, "APIService watch error; retrying");
        }
    }
}

/// `apiregistration.k8s.io/v1` APIServices.
pub(super) fn api_service_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
        "apiservices",
    )
}

/// Watches APIServices: an aggregated API added, changed or removed triggers
/// discovery at once.
pub(super) async fn watch_api_services(view: Arc<WebhookView>, client: Client) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &api_service_resource());
    watch_all(api, ApiServiceFeed { view }).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_resource_uses_the_storage_version() {
        let crd = json!({"spec": {"group": "example.com", "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [{"name": "v1beta1", "served": true, "storage": false},
                         {"name": "v1", "served": true, "storage": true}]}});
        let ar = crd_resource(&crd).expect("resource");
        assert_eq!(
            (
                ar.api_version.as_str(),
                ar.plural.as_str(),
                ar.kind.as_str()
            ),
            ("example.com/v1", "gadgets", "Gadget")
        );
        assert!(crd_resource(&json!({"spec": {"group": "example.com"}})).is_none());
        assert!(crd_resource(&json!(null)).is_none());
    }
}
