//! The policy watches: one per policy kind, feeding the registry through the shared
//! watch driver. An object the types cannot read arrives as
//! an invalid [`DeserializeGuard`](kube::core::DeserializeGuard) and is left out (reported),
//! like one that does not compile; it never breaks the list of the others.
//!
//! The registry is loaded once every kind has listed once. While a watch recovers from
//! a failure the registry keeps answering from what it last knew (never "empty"); on
//! kcp a 404 through the virtual workspace proves nothing, so a kind that is not served
//! there never loads (fail closed), while on Kubernetes a 404 means the CRD is not
//! installed: no such policy exists.
//!
//! On kcp each kind is read from every endpoint of the holdfast APIExportEndpointSlice
//! ([`holdfast_shared::endpoints`]): the registry holds the rules of every shard, and a
//! kind loads once the slice is read and every endpoint's watch has listed.

use super::WebhookView;
use holdfast_shared::{
    api::{
        anchor_rule::AnchorRule, critical_service::CriticalService,
        dependency_rule::DependencyRule, resource_protection::ResourceProtection,
    },
    endpoints::{Endpoints, ObjectKey, Partitioned},
    kcp::cluster_of,
    registry::{PolicyKey, PolicyObject},
    topology::Topology,
    watch::{self, Index, NotFound, Status, WatchState},
};
use kube::{Api, Client, Resource, core::DeserializeGuard, runtime::watcher};
use std::sync::Arc;

/// What a policy kind must be to be watched.
trait WatchedPolicy:
    PolicyObject<DynamicType = (), Scope = kube::core::ClusterResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl WatchedPolicy for DependencyRule {}
impl WatchedPolicy for ResourceProtection {}
impl WatchedPolicy for CriticalService {}
impl WatchedPolicy for AnchorRule {}

impl WebhookView {
    pub(super) fn start_policy_watches(
        self: &Arc<Self>,
        pc: Client,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        self.spawn(
            shutdown.clone(),
            watch_policies::<DependencyRule>(self.clone(), pc.clone()),
        );
        self.spawn(
            shutdown.clone(),
            watch_policies::<ResourceProtection>(self.clone(), pc.clone()),
        );
        self.spawn(
            shutdown.clone(),
            watch_policies::<CriticalService>(self.clone(), pc.clone()),
        );
        self.spawn(shutdown, watch_policies::<AnchorRule>(self.clone(), pc));
    }
}

/// The registry's index of kind `K`.
struct PolicyFeed<K> {
    view: Arc<WebhookView>,
    kind: std::marker::PhantomData<K>,
}

impl<K: WatchedPolicy> PolicyFeed<K> {
    fn invalid(&self, obj: &DeserializeGuard<K>, error: &dyn std::fmt::Display) {
        tracing::warn!(kind = %K::kind(&()), name = ?obj.meta().name, error = %error, "invalid policy object ignored");
    }
}

impl<K: WatchedPolicy> Index<DeserializeGuard<K>> for PolicyFeed<K> {
    fn reset(&mut self, objects: Vec<DeserializeGuard<K>>) {
        let mut valid: Vec<(String, K)> = Vec::with_capacity(objects.len());
        for obj in objects {
            match obj {
                DeserializeGuard(Ok(k)) => valid.push((cluster_of(&k), k)),
                DeserializeGuard(Err(ref i)) => self.invalid(&obj, &i.error),
            }
        }
        self.view.registry.reset(&valid);
        tracing::info!(kind = %K::kind(&()), count = valid.len(), "policy objects loaded");
        self.view.changed.notify_one();
    }

    fn apply(&mut self, obj: DeserializeGuard<K>) {
        match &obj {
            DeserializeGuard(Ok(k)) => {
                if let Err(e) = self.view.registry.apply(&cluster_of(k), k) {
                    self.invalid(&obj, &e);
                }
            }
            DeserializeGuard(Err(i)) => {
                self.view.registry.delete::<K>(&policy_key(&obj));
                self.invalid(&obj, &i.error);
            }
        }
        self.view.changed.notify_one();
    }

    fn delete(&mut self, obj: DeserializeGuard<K>) {
        self.view.registry.delete::<K>(&policy_key(&obj));
        self.view.changed.notify_one();
    }

    fn status(&mut self, from: &Status, to: &Status) {
        if to.synced {
            // On kcp the merged index is never reset: synced is what loads it.
            let index = K::index(&self.view.registry);
            if !from.synced && self.view.topology == Topology::Kcp {
                tracing::info!(kind = %K::kind(&()), count = index.len(), "policy objects loaded from every endpoint");
            }
            index.set_loaded();
        }
        match &to.state {
            WatchState::NotServed if from.state != WatchState::NotServed => {
                if to.synced {
                    tracing::warn!(kind = %K::kind(&()), "resource not served (CRD not installed?); treating as none");
                } else {
                    tracing::warn!(kind = %K::kind(&()), "resource not served through the virtual workspace; the policies stay unloaded until it is");
                }
            }
            WatchState::Failed(e) | WatchState::Forbidden(e) => {
                tracing::warn!(kind = %K::kind(&()), error = %e, "policy watch error; retrying");
            }
            _ => {}
        }
    }
}

impl<K: WatchedPolicy> Partitioned<DeserializeGuard<K>> for PolicyFeed<K> {
    fn remove(&mut self, key: &ObjectKey) {
        self.view
            .registry
            .delete::<K>(&PolicyKey::new(&key.cluster, &key.name));
        self.view.changed.notify_one();
    }
}

/// The registry key of a policy object.
fn policy_key<K: Resource>(obj: &K) -> PolicyKey {
    PolicyKey::new(
        &cluster_of(obj),
        obj.meta().name.as_deref().unwrap_or_default(),
    )
}

/// Watches kind `K`: on Kubernetes through `client`; on kcp through every endpoint
/// of the holdfast APIExportEndpointSlice in `client`'s workspace.
async fn watch_policies<K: WatchedPolicy>(view: Arc<WebhookView>, client: Client) {
    let feed = PolicyFeed::<K> {
        view: view.clone(),
        kind: std::marker::PhantomData,
    };
    match view.topology {
        Topology::Kubernetes => {
            let api: Api<DeserializeGuard<K>> = Api::all(client);
            watch::run(api, watcher::Config::default(), NotFound::Empty, feed).await;
        }
        Topology::Kcp => {
            let export = view.apiexport.clone();
            view.watch_endpoints(Endpoints::new(feed), client, &export, Api::all)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{DependentsMode, test_view};
    use holdfast_shared::{api::common::GroupResource, watch::Driver};
    use kube::api::ObjectMeta;

    fn protection(name: &str, spec: serde_json::Value) -> DeserializeGuard<ResourceProtection> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap_or_else(|e| {
            DeserializeGuard(Err(kube::core::error_boundary::InvalidObject {
                metadata: ObjectMeta::default(),
                error: e.to_string(),
            }))
        })
    }

    #[test]
    fn an_unreadable_policy_is_left_out_without_breaking_the_list() {
        let view = test_view(Topology::Kubernetes, DependentsMode::Live);
        let good = protection(
            "good",
            serde_json::json!({"resources": [{"version": "v1", "resource": "configmaps"}]}),
        );
        assert!(matches!(good, DeserializeGuard(Ok(_))), "{good:?}");
        let bad = protection("bad", serde_json::json!({"resources": "not a list"}));
        match &bad {
            DeserializeGuard(Err(i)) => assert_eq!(i.metadata.name.as_deref(), Some("bad")),
            DeserializeGuard(Ok(_)) => panic!("decoded an unreadable policy"),
        }
        let mut feed = PolicyFeed::<ResourceProtection> {
            view: view.clone(),
            kind: std::marker::PhantomData,
        };
        let mut d = Driver::new(NotFound::Empty);
        assert!(!view.registry.protections.is_loaded());
        d.handle(&mut feed, Ok(watcher::Event::Init));
        d.handle(&mut feed, Ok(watcher::Event::InitApply(good)));
        d.handle(&mut feed, Ok(watcher::Event::InitApply(bad)));
        d.handle(&mut feed, Ok(watcher::Event::InitDone));
        assert!(view.registry.protections.is_loaded());
        assert_eq!(view.registry.protections.len(), 1);
        assert!(
            view.registry
                .protections_for(&GroupResource::new("", "configmaps"))
                .is_some_and(|l| l.len() == 1 && &*l[0].key.name == "good")
        );
    }

    #[test]
    fn on_kcp_the_registry_holds_every_endpoints_rules_and_loads_when_all_listed() {
        use holdfast_shared::endpoints::{EndpointFeed, SliceFeed};
        let view = test_view(Topology::Kcp, DependentsMode::Live);
        let feed = PolicyFeed::<ResourceProtection> {
            view: view.clone(),
            kind: std::marker::PhantomData,
        };
        let endpoints = Endpoints::new(feed);
        let started = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = started.clone();
        let mut slice = SliceFeed::new(
            endpoints,
            "holdfast.dev",
            Box::new(
                move |f: EndpointFeed<
                    DeserializeGuard<ResourceProtection>,
                    PolicyFeed<ResourceProtection>,
                >| {
                    sink.lock().expect("lock").push(f);
                    None
                },
            ),
        );
        let slice_object = |urls: &[&str]| -> kube::api::DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExportEndpointSlice",
                "metadata": {"name": "holdfast.dev"},
                "status": {"endpoints": urls.iter().map(|u| serde_json::json!({"url": u})).collect::<Vec<_>>()}
            }))
            .expect("slice")
        };
        let in_cluster = |lc: &str, name: &str| {
            let mut p = protection(
                name,
                serde_json::json!({"resources": [{"version": "v1", "resource": "configmaps"}]}),
            );
            p.meta_mut().annotations = Some(
                [(
                    holdfast_shared::names::KCP_CLUSTER_ANNOTATION.to_string(),
                    lc.to_string(),
                )]
                .into(),
            );
            p
        };
        let names = || {
            let mut n: Vec<String> = view
                .registry
                .protections_for(&GroupResource::new("", "configmaps"))
                .map(|l| {
                    l.iter()
                        .map(|p| format!("{}/{}", p.key.cluster, p.key.name))
                        .collect()
                })
                .unwrap_or_default();
            n.sort();
            n
        };
        let mut sd = Driver::new(NotFound::Unknown);
        sd.handle(&mut slice, Ok(watcher::Event::Init));
        sd.handle(
            &mut slice,
            Ok(watcher::Event::InitApply(slice_object(&[
                "https://a/vw",
                "https://b/vw",
            ]))),
        );
        sd.handle(&mut slice, Ok(watcher::Event::InitDone));
        let mut feeds = std::mem::take(&mut *started.lock().expect("lock"));
        let (mut da, mut db) = (
            Driver::new(NotFound::Unknown),
            Driver::new(NotFound::Unknown),
        );
        let list = |d: &mut Driver<_>, f: &mut EndpointFeed<_, _>, items: Vec<_>| {
            d.handle(f, Ok(watcher::Event::Init));
            for i in items {
                d.handle(f, Ok(watcher::Event::InitApply(i)));
            }
            d.handle(f, Ok(watcher::Event::InitDone));
        };
        let (fa, fb) = feeds.split_at_mut(1);
        list(&mut da, &mut fa[0], vec![in_cluster("lc-a", "p1")]);
        assert!(
            !view.registry.protections.is_loaded(),
            "shard b not listed yet"
        );
        list(&mut db, &mut fb[0], vec![in_cluster("lc-b", "p2")]);
        assert!(view.registry.protections.is_loaded());
        assert_eq!(names(), ["lc-a/p1", "lc-b/p2"]);
        // Shard b relists without p2; then its URL leaves the slice with what it held.
        list(&mut db, &mut fb[0], vec![in_cluster("lc-b", "p3")]);
        assert_eq!(names(), ["lc-a/p1", "lc-b/p3"]);
        sd.handle(
            &mut slice,
            Ok(watcher::Event::Apply(slice_object(&["https://a/vw"]))),
        );
        assert_eq!(names(), ["lc-a/p1"]);
    }

    #[test]
    fn on_kcp_a_policy_kind_not_served_never_loads() {
        let view = test_view(Topology::Kcp, DependentsMode::Live);
        let mut feed = PolicyFeed::<AnchorRule> {
            view: view.clone(),
            kind: std::marker::PhantomData,
        };
        let status = kube::core::Status::failure("not found", "NotFound").with_code(404);
        let mut d = Driver::new(NotFound::Unknown);
        d.handle(
            &mut feed,
            Err(watcher::Error::InitialListFailed(kube::Error::Api(
                Box::new(status),
            ))),
        );
        assert!(!view.registry.anchors.is_loaded());
    }
}
