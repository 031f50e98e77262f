//! Cascading protection: an object protected with the value `Cascading` (or by a
//! ResourceProtection in `mode: Cascading`) is protected only while it still has live
//! contents:
//!
//! - a Namespace: a Pod that is neither Succeeded, Failed nor terminating, or any
//!   PersistentVolumeClaim;
//! - a CustomResourceDefinition: an instance that is not terminating;
//! - an object with a scale subresource (Deployments, StatefulSets, ReplicaSets,
//!   ReplicationControllers, custom resources whose CRD declares `scale`): its
//!   replica count (`spec.replicas`, or the CRD's `specReplicasPath`) above 0.
//!
//! An object of any other kind has no notion of live contents: `Cascading` protects it
//! like `Always` (the safe reading). Pure: the contents come from a [`ClusterView`].

use super::{ClusterView, logical_cluster};
use crate::{
    fieldpath::FieldPath,
    review::{AdmissionRequest, meta_str},
};
use serde_json::Value;

/// Where the built-in workloads keep their replica count (their scale subresource's
/// `spec.replicas`).
pub const BUILTIN_SCALABLE: &[(&str, &str)] = &[
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "replicasets"),
    ("", "replicationcontrollers"),
];

/// Whether the object carries a deletion timestamp (it is terminating).
pub fn is_terminating(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

/// Whether a Pod is live: not terminating, and its phase neither Succeeded nor
/// Failed (a Pod without a phase is live: it has not finished).
pub fn pod_is_live(pod: &Value) -> bool {
    if is_terminating(pod) {
        return false;
    }
    !matches!(
        pod.get("status")
            .and_then(|s| s.get("phase"))
            .and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// `Kind ns/name` (or `Kind name`) of an object, for the lists in denials.
pub fn describe_object(kind: &str, obj: &Value) -> String {
    let name = meta_str(obj, "name").unwrap_or("<unnamed>");
    match meta_str(obj, "namespace").filter(|n| !n.is_empty()) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// What is still alive in (or under) an object protected with `Cascading`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Live {
    /// Nothing: the Cascading protection does not hold now.
    Drained,
    /// Still alive.
    Alive {
        /// What the protection is conditioned on: "while it holds live Pods or
        /// PersistentVolumeClaims".
        condition: String,
        /// What is still there: "it still holds 2: Pod shop/a, ...".
        still: String,
        /// The objects (or the replica count) standing in the way.
        blockers: Vec<String>,
        /// How to drain it: "delete those Pods and PersistentVolumeClaims ...".
        drain: String,
    },
    /// The object has no notion of live contents (no scale subresource, not a
    /// Namespace or CustomResourceDefinition): protected like `Always`.
    NoContents,
    /// The contents cannot be told right now (store not synced, lookup failed,
    /// replica count missing): refused, fail closed.
    Unknown(String),
}

fn alive(condition: &str, still: String, blockers: Vec<String>, drain: String) -> Live {
    Live::Alive {
        condition: condition.to_string(),
        still,
        blockers,
        drain,
    }
}

/// The live contents `found` of a container, or drained when there are none: "it
/// still `holds` N: ...".
fn alive_unless_empty(condition: &str, holds: &str, found: Vec<String>, drain: &str) -> Live {
    if found.is_empty() {
        return Live::Drained;
    }
    let still = format!(
        "it still {holds} {}: {}",
        found.len(),
        super::list_blockers(&found)
    );
    alive(condition, still, found, drain.to_string())
}

/// The replica count at `path` in `obj`: `Ok(n)`, or why it cannot be read.
fn replicas_at(obj: &Value, path: &str) -> Result<i64, String> {
    let parsed = FieldPath::parse(path)
        .map_err(|e| format!("its replica path {path} cannot be read: {e}"))?;
    match parsed.first(obj) {
        Some(v) => v
            .as_i64()
            .ok_or_else(|| format!("its replica count at {path} is not an integer ({v})")),
        None => Err(format!(
            "its replica count at {path} is not in the object holdfast sees"
        )),
    }
}

/// What is still alive under the object of `req` (`obj` is the object as stored).
pub async fn live_contents<V: ClusterView>(req: &AdmissionRequest, obj: &Value, view: &V) -> Live {
    let cluster = logical_cluster(obj);
    let name = req.object_name().unwrap_or_default();
    if req.is_namespace() {
        return match view.live_in_namespace(cluster, name).await {
            Ok(found) => alive_unless_empty(
                "while it holds live Pods or PersistentVolumeClaims",
                "holds",
                found,
                "delete those Pods and PersistentVolumeClaims (scale their workloads to 0 \
                 first)",
            ),
            Err(e) => Live::Unknown(format!(
                "cannot tell whether Namespace {name} still holds live Pods or \
                 PersistentVolumeClaims: {e}"
            )),
        };
    }
    if req.is_crd() {
        let resource = obj
            .get("spec")
            .map(|s| {
                format!(
                    "{}.{}",
                    s["names"]["plural"].as_str().unwrap_or_default(),
                    s["group"].as_str().unwrap_or_default()
                )
            })
            .unwrap_or_else(|| name.to_string());
        let all = if obj["spec"]["scope"].as_str() == Some("Cluster") {
            "--all"
        } else {
            "--all --all-namespaces"
        };
        return match view.live_instances(cluster, obj).await {
            Ok(found) => alive_unless_empty(
                "while it has instances",
                "has",
                found,
                &format!("delete its instances (kubectl delete {resource} {all})"),
            ),
            Err(e) => Live::Unknown(format!(
                "cannot tell whether CustomResourceDefinition {name} still has instances: {e}"
            )),
        };
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Live::NoContents;
    }
    let (group, resource) = (&req.resource.group, &req.resource.resource);
    let builtin = BUILTIN_SCALABLE
        .iter()
        .any(|(g, r)| g == group && r == resource);
    let path = if builtin {
        Some(".spec.replicas".to_string())
    } else if group.is_empty() || !group.contains('.') {
        // Core and unqualified groups hold no custom resources.
        None
    } else {
        match view.replicas_path(cluster, group, resource).await {
            Ok(p) => p,
            Err(e) => {
                return Live::Unknown(format!(
                    "cannot tell whether {} has a scale subresource: {e}",
                    req.describe()
                ));
            }
        }
    };
    let Some(path) = path else {
        return Live::NoContents;
    };
    match replicas_at(obj, &path) {
        Ok(n) if n <= 0 => Live::Drained,
        Ok(n) => {
            let target = req.resource.group_resource();
            let ns = req
                .object_namespace()
                .map(|ns| format!(" -n {ns}"))
                .unwrap_or_default();
            alive(
                "while it has replicas",
                format!("it still has {path}={n}"),
                vec![format!("{path}={n}")],
                format!("scale it to 0 (kubectl scale {target} {name}{ns} --replicas=0)"),
            )
        }
        Err(why) => Live::Unknown(format!(
            "cannot tell whether {} still has replicas: {why}",
            req.describe()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::{common::Enforcement, resource_protection::ResourceSelector},
        policy::{
            AccessReview, ClusterIndex, ClusterLookup, Decider, Decision, DenialKind, Evaluation,
            LookupError, PolicyConfig, PolicyKind, evaluate,
            tests::{CRD, DEPLOYMENT, NAMESPACE, cfg, label, now, policy},
        },
        registry::{CompiledProtection, PolicyKey},
        review::parse_review,
    };
    use serde_json::json;
    use std::sync::Arc;

    /// A view with fixed live contents.
    struct View {
        judged: bool,
        in_namespace: Result<Vec<String>, String>,
        instances: Result<Vec<String>, String>,
        replicas_path: Option<String>,
        protections: Vec<Arc<CompiledProtection>>,
    }

    impl Default for View {
        fn default() -> Self {
            Self {
                judged: true,
                in_namespace: Ok(Vec::new()),
                instances: Ok(Vec::new()),
                replicas_path: None,
                protections: Vec::new(),
            }
        }
    }

    impl ClusterIndex for View {
        fn policies_loaded(&self) -> bool {
            true
        }
        fn protections(
            &self,
            gr: &crate::api::common::GroupResource,
        ) -> Option<Arc<[Arc<CompiledProtection>]>> {
            let list: Vec<_> = self
                .protections
                .iter()
                .filter(|p| {
                    p.selectors
                        .iter()
                        .any(|s| s.group == gr.group && s.resource == gr.resource)
                })
                .cloned()
                .collect();
            (!list.is_empty()).then(|| list.into())
        }
        fn cascading_judged(&self) -> bool {
            self.judged
        }
    }

    impl ClusterLookup for View {
        async fn live_in_namespace(&self, _: &str, _: &str) -> Result<Vec<String>, LookupError> {
            self.in_namespace.clone().map_err(LookupError::Unreadable)
        }
        async fn live_instances(&self, _: &str, _: &Value) -> Result<Vec<String>, LookupError> {
            self.instances.clone().map_err(LookupError::Unreadable)
        }
        async fn replicas_path(
            &self,
            _: &str,
            _: &str,
            _: &str,
        ) -> Result<Option<String>, LookupError> {
            Ok(self.replicas_path.clone())
        }
    }

    impl AccessReview for View {}

    /// A review of `op` on `group/resource` (kind `kind`) named `name` in `ns`.
    fn review(
        op: &str,
        (group, resource, kind): (&str, &str, &str),
        ns: Option<&str>,
        object: Value,
        old: Value,
    ) -> AdmissionRequest {
        let name = old["metadata"]["name"]
            .as_str()
            .or(object["metadata"]["name"].as_str())
            .unwrap_or_default();
        let body = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"uid-1","kind":{"group":group,"version":"v1","kind":kind},
            "resource":{"group":group,"version":"v1","resource":resource},
            "name":name,"namespace":ns,"operation":op,"userInfo":{"username":"alice"},
            "object":object,"oldObject":old}});
        match parse_review(body.to_string().as_bytes()) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    const KRUISE: &str = "policy.kruise.io/delete-protection";

    fn run(req: &AdmissionRequest, cfg: &PolicyConfig, view: &View) -> Evaluation {
        futures::executor::block_on(evaluate(req, cfg, view, now()))
    }

    fn refusal(e: &Evaluation) -> (Decider, DenialKind, &str, Vec<String>) {
        match &e.decision {
            Decision::Deny(d) => (
                e.decider.clone(),
                d.kind,
                d.message.as_str(),
                d.blockers.clone(),
            ),
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    /// The DELETE of Namespace shop labelled `holdfast.dev/protected: value`.
    fn protected_namespace(value: &str) -> AdmissionRequest {
        let labels = json!({"holdfast.dev/protected": value});
        delete(NAMESPACE, None, namespace(labels))
    }

    fn namespace(labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "shop", "labels": labels}})
    }

    fn deployment(labels: Value, replicas: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "shop", "labels": labels},
               "spec": {"replicas": replicas}})
    }

    fn delete(what: (&str, &str, &str), ns: Option<&str>, obj: Value) -> AdmissionRequest {
        review("DELETE", what, ns, Value::Null, obj)
    }

    #[test]
    fn a_cascading_namespace_is_refused_while_it_holds_live_pods_or_claims() {
        let live: Vec<String> = (1..=6)
            .map(|i| format!("Pod shop/web-{i}"))
            .chain(["PersistentVolumeClaim shop/data".to_string()])
            .collect();
        let view = View {
            in_namespace: Ok(live.clone()),
            ..View::default()
        };
        let req = protected_namespace("Cascading");
        let e = run(&req, &cfg(false, &[]), &view);
        assert_eq!(
            refusal(&e),
            (
                label("holdfast.dev/protected"),
                DenialKind::Protected,
                "holdfast: Namespace shop is protected by label holdfast.dev/protected=Cascading \
                 (policy: label holdfast.dev/protected) while it holds live Pods or \
                 PersistentVolumeClaims, and it still holds 7: Pod shop/web-1, Pod shop/web-2, \
                 Pod shop/web-3, Pod shop/web-4, Pod shop/web-5 and 2 more, so it cannot be \
                 deleted. To delete it, first delete those Pods and PersistentVolumeClaims \
                 (scale their workloads to 0 first); or remove the label (kubectl label \
                 namespaces shop holdfast.dev/protected-), or set the annotation \
                 holdfast.dev/skip-protection=true if you are allowed to bypass protection.",
                live
            )
        );
        // Drained: allowed.
        let drained = View::default();
        assert_eq!(
            run(&req, &cfg(false, &[]), &drained).decision,
            Decision::Allow
        );
        // Cannot tell: refused, fail closed.
        let unsynced = View {
            in_namespace: Err("the index of pods is not synced yet".to_string()),
            ..View::default()
        };
        let e = run(&req, &cfg(false, &[]), &unsynced);
        assert_eq!(
            refusal(&e),
            (
                label("holdfast.dev/protected"),
                DenialKind::LookupFailed,
                "holdfast: Namespace shop is protected by label holdfast.dev/protected=Cascading \
                 (policy: label holdfast.dev/protected) while it has live contents, and cannot \
                 tell whether Namespace shop still holds live Pods or PersistentVolumeClaims: \
                 the index of pods is not synced yet. Refusing rather than risk deleting them; \
                 retry later, or set the annotation holdfast.dev/skip-protection=true if you \
                 are allowed to bypass protection.",
                Vec::new()
            )
        );
        // Always still protects always, whatever lives inside.
        let always = protected_namespace("Always");
        let e = run(&always, &cfg(false, &[]), &drained);
        assert_eq!(
            refusal(&e).3,
            vec!["label holdfast.dev/protected=Always".to_string()]
        );
    }

    #[test]
    fn a_cascading_workload_is_refused_while_it_has_replicas() {
        let c = cfg(false, &[&format!("{KRUISE}=Always,Cascading")]);
        let req = delete(
            DEPLOYMENT,
            Some("shop"),
            deployment(json!({KRUISE: "Cascading"}), json!(3)),
        );
        let e = run(&req, &c, &View::default());
        assert_eq!(
            refusal(&e),
            (
                label(KRUISE),
                DenialKind::Protected,
                "holdfast: Deployment shop/web is protected by label \
                 policy.kruise.io/delete-protection=Cascading (policy: label \
                 policy.kruise.io/delete-protection) while it has replicas, and it still has \
                 .spec.replicas=3, so it cannot be deleted. To delete it, first scale it to 0 \
                 (kubectl scale deployments.apps web -n shop --replicas=0); or remove the label \
                 (kubectl label deployments.apps web -n shop policy.kruise.io/delete-protection-), \
                 or set the annotation holdfast.dev/skip-protection=true if you are allowed to \
                 bypass protection.",
                vec![".spec.replicas=3".to_string()]
            )
        );
        let scaled = delete(
            DEPLOYMENT,
            Some("shop"),
            deployment(json!({KRUISE: "Cascading"}), json!(0)),
        );
        assert_eq!(run(&scaled, &c, &View::default()).decision, Decision::Allow);
        // Kruise's Always protects a scaled-down workload all the same.
        let always = delete(
            DEPLOYMENT,
            Some("shop"),
            deployment(json!({KRUISE: "Always"}), json!(0)),
        );
        assert_eq!(
            refusal(&run(&always, &c, &View::default())).3,
            vec!["label policy.kruise.io/delete-protection=Always".to_string()]
        );
        // Only metadata (a namespace's contents): the count is unknown, so refused.
        let meta_only = delete(
            DEPLOYMENT,
            Some("shop"),
            json!({"metadata": {"name": "web", "namespace": "shop",
                                "labels": {"holdfast.dev/protected": "Cascading"}}}),
        );
        let e = run(&meta_only, &c, &View::default());
        assert_eq!(
            refusal(&e).2,
            "holdfast: Deployment shop/web is protected by label holdfast.dev/protected=Cascading \
             (policy: label holdfast.dev/protected) while it has live contents, and cannot tell \
             whether Deployment shop/web still has replicas: its replica count at .spec.replicas \
             is not in the object holdfast sees. Refusing rather than risk deleting them; retry \
             later, or set the annotation holdfast.dev/skip-protection=true if you are allowed \
             to bypass protection."
        );
    }

    #[test]
    fn custom_workloads_use_their_crd_replica_path_and_others_are_always() {
        let widget = ("example.com", "widgets", "Widget");
        let obj = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "shop",
                         "labels": {"holdfast.dev/protected": "Cascading"}},
            "spec": {"size": {"count": 2}}});
        let req = delete(widget, Some("shop"), obj.clone());
        let scalable = View {
            replicas_path: Some(".spec.size.count".to_string()),
            ..View::default()
        };
        let e = run(&req, &cfg(false, &[]), &scalable);
        assert_eq!(refusal(&e).3, vec![".spec.size.count=2".to_string()]);
        assert!(
            refusal(&e).2.contains(
                "first scale it to 0 (kubectl scale widgets.example.com w -n shop --replicas=0)"
            ),
            "{e:?}"
        );
        let mut zero = obj.clone();
        zero["spec"]["size"]["count"] = json!(0);
        let e = run(
            &delete(widget, Some("shop"), zero),
            &cfg(false, &[]),
            &scalable,
        );
        assert_eq!(e.decision, Decision::Allow);
        // No scale subresource: Cascading protects like Always, and says so.
        let e = run(&req, &cfg(false, &[]), &View::default());
        assert_eq!(
            refusal(&e).2,
            "holdfast: Widget shop/w is protected by label holdfast.dev/protected=Cascading \
             (policy: label holdfast.dev/protected), so it cannot be deleted (Widget shop/w has \
             no live contents holdfast can tell, so Cascading protects it like Always). To \
             delete it, remove the label (kubectl label widgets.example.com w -n shop \
             holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true \
             if you are allowed to bypass protection."
        );
        // A webhook that does not watch contents (--label-only): like Always too.
        let label_only = View {
            judged: false,
            ..View::default()
        };
        let ns = protected_namespace("Cascading");
        assert_eq!(
            refusal(&run(&ns, &cfg(false, &[]), &label_only)).2,
            "holdfast: Namespace shop is protected by label holdfast.dev/protected=Cascading \
             (policy: label holdfast.dev/protected), so it cannot be deleted (this webhook does \
             not watch live contents, so Cascading protects like Always here). To delete it, \
             remove the label (kubectl label namespaces shop holdfast.dev/protected-), or set \
             the annotation holdfast.dev/skip-protection=true if you are allowed to bypass \
             protection."
        );
    }

    #[test]
    fn a_cascading_crd_is_refused_while_instances_exist() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com",
                         "labels": {"holdfast.dev/protected": "Cascading"}},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"plural": "widgets", "kind": "Widget"}}});
        let req = delete(CRD, None, crd);
        let view = View {
            instances: Ok(vec![
                "Widget shop/a".to_string(),
                "Widget shop/b".to_string(),
            ]),
            ..View::default()
        };
        let e = run(&req, &cfg(false, &[]), &view);
        assert_eq!(
            refusal(&e).2,
            "holdfast: CustomResourceDefinition widgets.example.com is protected by label \
             holdfast.dev/protected=Cascading (policy: label holdfast.dev/protected) while it \
             has instances, and it still has 2: Widget shop/a, Widget shop/b, so it cannot be \
             deleted. To delete it, first delete its instances (kubectl delete \
             widgets.example.com --all --all-namespaces); or remove the label (kubectl label \
             customresourcedefinitions.apiextensions.k8s.io widgets.example.com \
             holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true \
             if you are allowed to bypass protection."
        );
        assert_eq!(
            run(&req, &cfg(false, &[]), &View::default()).decision,
            Decision::Allow
        );
    }

    #[test]
    fn a_cascading_resource_protection_holds_while_live_contents_remain() {
        let rp = Arc::new(CompiledProtection {
            key: PolicyKey::new("", "empty-namespaces-may-go"),
            enforcement: Enforcement::Enforce,
            strict: false,
            selectors: vec![ResourceSelector {
                group: String::new(),
                version: "v1".into(),
                resource: "namespaces".into(),
                names: Some(vec!["shop".into()]),
                ..ResourceSelector::default()
            }],
            cascading: true,
        });
        let view = View {
            in_namespace: Ok(vec!["Pod shop/web".to_string()]),
            protections: vec![rp.clone()],
            ..View::default()
        };
        let req = delete(NAMESPACE, None, namespace(json!({})));
        let e = run(&req, &cfg(false, &[]), &view);
        assert_eq!(
            refusal(&e),
            (
                policy(PolicyKind::ResourceProtection, "empty-namespaces-may-go"),
                DenialKind::Protected,
                "holdfast: Namespace shop is protected by \
                 ResourceProtection/empty-namespaces-may-go (selects namespaces named shop, mode \
                 Cascading) while it holds live Pods or PersistentVolumeClaims, and it still \
                 holds 1: Pod shop/web, so it cannot be deleted. To delete it, first delete \
                 those Pods and PersistentVolumeClaims (scale their workloads to 0 first); or \
                 remove it from the policy (kubectl edit resourceprotection \
                 empty-namespaces-may-go), or set the annotation \
                 holdfast.dev/skip-protection=true if you are allowed to bypass protection. \
                 To have holdfast delete it once nothing blocks it, ask for deferred deletion \
                 (holdfast.dev/delete-when-unblocked).",
                vec!["Pod shop/web".to_string()]
            )
        );
        let drained = View {
            protections: vec![rp],
            ..View::default()
        };
        assert_eq!(
            run(&req, &cfg(false, &[]), &drained).decision,
            Decision::Allow
        );
    }

    #[test]
    fn strict_mode_guards_a_cascading_label() {
        let old = deployment(json!({"holdfast.dev/protected": "Cascading"}), json!(0));
        let new = deployment(json!({}), json!(0));
        let req = review("UPDATE", DEPLOYMENT, Some("shop"), new, old.clone());
        let e = run(&req, &cfg(true, &[]), &View::default());
        let (policy, kind, message, blockers) = refusal(&e);
        assert_eq!((policy, kind), (Decider::Strict, DenialKind::Protected));
        assert_eq!(
            blockers,
            vec!["label holdfast.dev/protected=Cascading".to_string()]
        );
        assert!(
            message.starts_with(
                "holdfast: Deployment shop/web carries the protection label \
                 holdfast.dev/protected=Cascading and strict mode is on"
            ),
            "{message}"
        );
        // Without --strict the label may go.
        assert_eq!(
            run(&req, &cfg(false, &[]), &View::default()).decision,
            Decision::Allow
        );
    }

    #[test]
    fn pod_liveness_follows_phase_and_termination() {
        assert!(pod_is_live(&json!({"metadata": {"name": "a"}})));
        assert!(pod_is_live(
            &json!({"metadata": {"name": "a"}, "status": {"phase": "Running"}})
        ));
        assert!(pod_is_live(
            &json!({"metadata": {"name": "a"}, "status": {"phase": "Pending"}})
        ));
        for phase in ["Succeeded", "Failed"] {
            assert!(!pod_is_live(
                &json!({"metadata": {"name": "a"}, "status": {"phase": phase}})
            ));
        }
        assert!(!pod_is_live(&json!({
            "metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running"}
        })));
        assert!(pod_is_live(
            &json!({"metadata": {"name": "a", "deletionTimestamp": null}})
        ));
    }

    #[test]
    fn objects_are_described_with_their_namespace() {
        assert_eq!(
            describe_object("Pod", &json!({"metadata": {"name": "a", "namespace": "s"}})),
            "Pod s/a"
        );
        assert_eq!(
            describe_object("Widget", &json!({"metadata": {"name": "w"}})),
            "Widget w"
        );
    }

    #[test]
    fn replica_counts_are_read_or_refused() {
        let obj = json!({"spec": {"replicas": 3, "odd": "x"}});
        assert_eq!(replicas_at(&obj, ".spec.replicas"), Ok(3));
        assert_eq!(
            replicas_at(&obj, ".spec.odd"),
            Err("its replica count at .spec.odd is not an integer (\"x\")".to_string())
        );
        assert_eq!(
            replicas_at(&json!({"metadata": {}}), ".spec.replicas"),
            Err(
                "its replica count at .spec.replicas is not in the object holdfast sees"
                    .to_string()
            )
        );
    }
}
