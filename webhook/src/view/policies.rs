//! The policies: the registry, fed by one watch per policy kind through the shared
//! watch driver, and the ResourceProtections of each logical cluster split by
//! namespace. An object the types cannot read arrives as
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

use super::{WebhookView, spawn};
use crate::metrics::Metrics;
use dashmap::DashMap;
use holdfast_shared::{
    api::{
        anchor_rule::AnchorRule, common::GroupResource, critical_service::CriticalService,
        dependency_rule::DependencyRule, resource_protection::ResourceProtection,
    },
    endpoints::{Endpoints, ObjectKey, Partitioned},
    kcp::cluster_of,
    policy::logical_cluster,
    registry::{CompiledProtection, PolicyKey, PolicyObject, ProtectionPartition, Registry},
    review::AdmissionRequest,
    topology::Topology,
    watch::{self, Index, NotFound, Status, WatchState},
};
use kube::{Api, Client, Resource, core::DeserializeGuard, runtime::watcher};
use std::{collections::HashMap, sync::Arc};
use tokio_util::sync::CancellationToken;

/// The registry of policy objects, and the ResourceProtections split by namespace.
#[derive(Default)]
pub(super) struct Policies {
    registry: Registry,
    /// ResourceProtections split by namespace, per logical cluster ("" on
    /// Kubernetes) and resource (rebuilt when the registry's list for the resource
    /// changes).
    partitions: DashMap<GroupResource, HashMap<Arc<str>, Arc<ProtectionPartition>>>,
}

impl Policies {
    /// The registry.
    pub(super) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Sets the gauges of the registry's sizes.
    pub(super) fn report(&self, metrics: &Metrics) {
        let reg = &self.registry;
        for (kind, len) in [
            ("DependencyRule", reg.dependencies.len()),
            ("ResourceProtection", reg.protections.len()),
            ("CriticalService", reg.critical.len()),
            ("AnchorRule", reg.anchors.len()),
        ] {
            metrics
                .registry_size
                .with_label_values(&[kind])
                .set(i64::try_from(len).unwrap_or(i64::MAX));
        }
    }

    /// Whether a strict ResourceProtection of the object's logical cluster selects
    /// the stored object of `req`.
    pub(super) fn strict_for(&self, req: &AdmissionRequest) -> bool {
        let gr = GroupResource::new(&req.resource.group, &req.resource.resource);
        let Some(old) = req.old_object.as_ref() else {
            return false;
        };
        let name = req.object_name().unwrap_or_default();
        let labels = holdfast_shared::review::labels(old);
        let namespace = req.object_namespace();
        self.candidates(logical_cluster(old), &gr, namespace)
            .iter()
            .any(|p| p.strict && p.selecting(&gr, namespace, name, labels).next().is_some())
    }

    /// A strict ResourceProtection that selects the stored object of `req` but would
    /// not select the updated one, by name.
    pub(super) fn strict_selection_lost(&self, req: &AdmissionRequest) -> Option<String> {
        let gr = GroupResource::new(&req.resource.group, &req.resource.resource);
        let old = req.old_object.as_ref()?;
        let list = self.registry.protections_in(logical_cluster(old), &gr)?;
        let new = req.object.as_ref()?;
        let name = req.object_name().unwrap_or_default();
        let ns = req.object_namespace();
        let (old_l, new_l) = (
            holdfast_shared::review::labels(old),
            holdfast_shared::review::labels(new),
        );
        list.iter()
            .find(|p| {
                p.strict
                    && p.selecting(&gr, ns, name, old_l).next().is_some()
                    && p.selecting(&gr, ns, name, new_l).next().is_none()
            })
            .map(|p| format!("ResourceProtection/{}", p.key.name))
    }

    /// The ResourceProtections of logical cluster `cluster` naming `gr` that could
    /// select an object in `namespace`: those of its partition, then those with a
    /// wildcard selector.
    pub(super) fn candidates(
        &self,
        cluster: &str,
        gr: &GroupResource,
        namespace: Option<&str>,
    ) -> Vec<Arc<CompiledProtection>> {
        let mut out = self.exact_candidates(cluster, gr, namespace);
        // Wildcard selectors (`resource: "*"`): few policies, visited directly.
        for p in self.registry.wildcard_protections_in(cluster, gr) {
            if !out.iter().any(|q| q.key == p.key)
                && p.selectors
                    .iter()
                    .any(|s| s.selects_resource(gr) && s.namespace_matches(namespace))
            {
                out.push(p);
            }
        }
        out
    }

    /// The ResourceProtections of logical cluster `cluster` naming `gr` that could
    /// select an object in `namespace`, from the partition of the registry's list
    /// for (cluster, group/resource). A cluster with no such policy is answered
    /// without one (so the partitions are at most one per cluster and resource a
    /// policy names).
    fn exact_candidates(
        &self,
        cluster: &str,
        gr: &GroupResource,
        namespace: Option<&str>,
    ) -> Vec<Arc<CompiledProtection>> {
        let Some(list) = self.registry.protections.find(gr) else {
            return Vec::new();
        };
        if let Some(by_cluster) = self.partitions.get(gr)
            && let Some(p) = by_cluster.get(cluster)
            && p.is_of(&list)
        {
            return p.candidates(namespace);
        }
        if holdfast_shared::registry::cluster_range(&list, cluster).is_empty() {
            // Its last policy of `gr` went: forget its partition.
            if self
                .partitions
                .get(gr)
                .is_some_and(|m| m.contains_key(cluster))
                && let Some(mut m) = self.partitions.get_mut(gr)
            {
                m.remove(cluster);
            }
            return Vec::new();
        }
        // The list changed (or was never split): split it once for every later check.
        let p = Arc::new(ProtectionPartition::of_cluster(gr, list, cluster));
        let out = p.candidates(namespace);
        self.partitions
            .entry(gr.clone())
            .or_default()
            .insert(cluster.into(), p);
        out
    }
}

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

/// Starts the watch of every policy kind through `pc`; they stop when `shutdown`
/// fires.
pub(super) fn start(view: &Arc<WebhookView>, pc: Client, shutdown: &CancellationToken) {
    spawn(
        shutdown,
        watch_policies::<DependencyRule>(view.clone(), pc.clone()),
    );
    spawn(
        shutdown,
        watch_policies::<ResourceProtection>(view.clone(), pc.clone()),
    );
    spawn(
        shutdown,
        watch_policies::<CriticalService>(view.clone(), pc.clone()),
    );
    spawn(shutdown, watch_policies::<AnchorRule>(view.clone(), pc));
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
        self.view.policies.registry.reset(&valid);
        tracing::info!(kind = %K::kind(&()), count = valid.len(), "policy objects loaded");
        self.view.changed.notify();
    }

    fn apply(&mut self, obj: DeserializeGuard<K>) {
        match &obj {
            DeserializeGuard(Ok(k)) => {
                if let Err(e) = self.view.policies.registry.apply(&cluster_of(k), k) {
                    self.invalid(&obj, &e);
                }
            }
            DeserializeGuard(Err(i)) => {
                self.view.policies.registry.delete::<K>(&policy_key(&obj));
                self.invalid(&obj, &i.error);
            }
        }
        self.view.changed.notify();
    }

    fn delete(&mut self, obj: DeserializeGuard<K>) {
        self.view.policies.registry.delete::<K>(&policy_key(&obj));
        self.view.changed.notify();
    }

    fn status(&mut self, from: &Status, to: &Status) {
        if to.synced {
            // On kcp the merged index is never reset: synced is what loads it.
            let index = K::index(&self.view.policies.registry);
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
            .policies
            .registry
            .delete::<K>(&PolicyKey::new(&key.cluster, &key.name));
        self.view.changed.notify();
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
            super::kcp::watch_endpoints(
                &view.clients,
                Endpoints::new(feed),
                client,
                view.kcp.export(),
                Api::all,
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{DependentsMode, test_view};
    use holdfast_shared::{policy::ClusterIndex, review::AdmissionRequest, watch::Driver};
    use kube::api::ObjectMeta;
    use serde_json::json;

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
        assert!(!view.policies.registry.protections.is_loaded());
        d.handle(&mut feed, Ok(watcher::Event::Init));
        d.handle(&mut feed, Ok(watcher::Event::InitApply(good)));
        d.handle(&mut feed, Ok(watcher::Event::InitApply(bad)));
        d.handle(&mut feed, Ok(watcher::Event::InitDone));
        assert!(view.policies.registry.protections.is_loaded());
        assert_eq!(view.policies.registry.protections.len(), 1);
        assert!(
            view.policies
                .registry
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
        let started = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = started.clone();
        let mut slice = SliceFeed::new(
            endpoints,
            "holdfast.dev",
            Box::new(
                move |f: EndpointFeed<
                    DeserializeGuard<ResourceProtection>,
                    PolicyFeed<ResourceProtection>,
                >| {
                    sink.lock().push(f);
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
                .policies
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
        let mut feeds = std::mem::take(&mut *started.lock());
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
            !view.policies.registry.protections.is_loaded(),
            "shard b not listed yet"
        );
        list(&mut db, &mut fb[0], vec![in_cluster("lc-b", "p2")]);
        assert!(view.policies.registry.protections.is_loaded());
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
        assert!(!view.policies.registry.anchors.is_loaded());
    }

    /// An UPDATE of ConfigMap shop/cfg in logical cluster `lc`, its labels going
    /// from `old` to `new`.
    fn update_in(lc: &str, old: serde_json::Value, new: serde_json::Value) -> AdmissionRequest {
        let meta = |labels: serde_json::Value| {
            json!({"metadata": {"name": "cfg", "namespace": "shop", "labels": labels,
                                "annotations": {"kcp.io/cluster": lc}}})
        };
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cfg", "namespace": "shop", "operation": "UPDATE", "userInfo": {"username": "bob"},
            "object": meta(new), "oldObject": meta(old)}});
        holdfast_shared::review::parse_review(body.to_string().as_bytes()).expect("review")
    }

    #[test]
    fn strict_protections_answer_for_their_own_workspace_only() {
        use holdfast_shared::api::resource_protection::ResourceProtection;
        let view = test_view(Topology::Kcp, DependentsMode::Live);
        for (lc, name) in [("lc-a", "strict-a"), ("lc-c", "strict-c")] {
            let rp: ResourceProtection = serde_json::from_value(json!({
                "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
                "metadata": {"name": name, "annotations": {"kcp.io/cluster": lc}},
                "spec": {"strict": true, "resources": [{"version": "v1", "resource": "configmaps",
                         "labelSelector": {"matchLabels": {"tier": "data"}}}]}}))
            .expect("rp");
            view.policies.registry.apply(lc, &rp).expect("compiles");
        }
        let cms = GroupResource::new("", "configmaps");
        let names = |lc: &str, ns: Option<&str>| -> Vec<String> {
            view.protection_candidates(lc, &cms, ns)
                .iter()
                .map(|p| p.key.to_string())
                .collect()
        };
        assert_eq!(names("lc-a", Some("shop")), ["lc-a|strict-a"]);
        assert_eq!(names("lc-c", Some("shop")), ["lc-c|strict-c"]);
        assert_eq!(names("lc-b", Some("shop")), Vec::<String>::new());
        // Asked again (the partition of each cluster is kept), the same answers.
        assert_eq!(names("lc-a", None), ["lc-a|strict-a"]);
        assert_eq!(names("lc-b", None), Vec::<String>::new());
        // The list changes: each cluster's partition follows it.
        view.policies.registry.delete::<ResourceProtection>(
            &holdfast_shared::registry::PolicyKey::new("lc-c", "strict-c"),
        );
        assert_eq!(names("lc-c", Some("shop")), Vec::<String>::new());
        assert_eq!(names("lc-a", Some("shop")), ["lc-a|strict-a"]);
        let lose = |lc: &str| update_in(lc, json!({"tier": "data"}), json!({"tier": "web"}));
        assert!(view.strict_for(&lose("lc-a")));
        assert_eq!(
            view.strict_selection_lost(&lose("lc-a")).as_deref(),
            Some("ResourceProtection/strict-a")
        );
        // The same labels in a workspace without a strict policy: nothing applies.
        assert!(!view.strict_for(&lose("lc-b")));
        assert_eq!(view.strict_selection_lost(&lose("lc-b")), None);
    }
}
