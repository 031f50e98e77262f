use super::*;
use crate::{
    api::{anchor_rule::AnchorRule, critical_service::CriticalService},
    registry::Registry,
};
use std::collections::HashMap;

#[derive(Default)]
struct View {
    registry: Registry,
    objects: HashMap<(String, String, String), Arc<Value>>,
    finalizers: HashMap<(String, String), usize>,
    contents: Vec<ContainedObject>,
}

impl ClusterIndex for View {
    fn policies_loaded(&self) -> bool {
        true
    }
    fn critical(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledCritical>]>> {
        self.registry.critical.find(gr)
    }
    fn anchors(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledAnchor>]>> {
        self.registry.anchors.find(gr)
    }
}

impl ClusterLookup for View {
    fn count_finalizer(
        &self,
        _c: &str,
        gr: &GroupResource,
        f: &str,
    ) -> impl Future<Output = Result<usize, LookupError>> + Send {
        let n = self
            .finalizers
            .get(&(gr.to_string(), f.to_string()))
            .copied()
            .unwrap_or(0);
        async move { Ok(n) }
    }
    async fn object(&self, _: &str, gr: &GroupResource, ns: Option<&str>, name: &str) -> Found {
        let key = (gr.to_string(), ns.unwrap_or_default(), name);
        Ok(self
            .objects
            .get(&(key.0, key.1.into(), key.2.into()))
            .cloned())
    }
    fn namespace_contents(
        &self,
        _c: &str,
        ns: &str,
    ) -> impl Future<Output = Result<Vec<ContainedObject>, LookupError>> + Send {
        let v: Vec<ContainedObject> = self
            .contents
            .iter()
            .filter(|c| crate::review::meta_str(&c.object, "namespace") == Some(ns))
            .cloned()
            .collect();
        async move { Ok(v) }
    }
}

impl AccessReview for View {}

/// The DELETE of an object as user bob (a cluster-scoped one reviewed with its own
/// name as the request's namespace, as for a Namespace).
fn del(what: (&str, &str, &str), ns: Option<&str>, name: &str, labels: Value) -> AdmissionRequest {
    delete_review(what, ns, ns.or(Some(name)), name, labels)
}

fn critical_view() -> View {
    let v = View::default();
    let cs: CriticalService = serde_json::from_value(json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService",
        "metadata": {"name": "for-finalizer-deployment"},
        "spec": {"provider": {"group": "apps", "resource": "deployments", "namespace": "finalizer-namespace", "name": "finalizer-deployment"},
            "criteria": [
                {"type": "Finalizer", "finalizer": {"group": "my.crd.group", "resource": "coolresources", "finalizerName": "my.crd.group/super-important"}},
                {"type": "SpecificResource", "specificResource": {"group": "apiextensions.k8s.io", "resource": "customresourcedefinitions", "name": "coolresources.my.crd.group"}}
            ]}})).expect("cs");
    v.registry.apply("", &cs).expect("compiles");
    v
}

#[test]
fn critical_service_orders_deletion() {
    let mut v = critical_view();
    let c = cfg(false, &[]);
    let provider = del(
        DEPLOYMENT,
        Some("finalizer-namespace"),
        "finalizer-deployment",
        json!({}),
    );
    let ns = del(NAMESPACE, None, "finalizer-namespace", json!({}));
    let itself = del(
        ("holdfast.dev", "criticalservices", "CriticalService"),
        None,
        "for-finalizer-deployment",
        json!({}),
    );
    v.finalizers.insert(
        (
            "coolresources.my.crd.group".into(),
            "my.crd.group/super-important".into(),
        ),
        2,
    );
    v.objects.insert(
        (
            "customresourcedefinitions.apiextensions.k8s.io".into(),
            "".into(),
            "coolresources.my.crd.group".into(),
        ),
        Arc::new(json!({})),
    );
    v.objects.insert(
        (
            "deployments.apps".into(),
            "finalizer-namespace".into(),
            "finalizer-deployment".into(),
        ),
        Arc::new(json!({})),
    );
    let d = denied(&evaluate(&provider, &c, &v, now())).clone();
    assert!(
        d.message.contains(
            "2 coolresources.my.crd.group still carry finalizer my.crd.group/super-important"
        ),
        "{}",
        d.message
    );
    assert!(
        d.message.contains(
            "customresourcedefinitions.apiextensions.k8s.io coolresources.my.crd.group still exists"
        ),
        "{}",
        d.message
    );
    let d = denied(&evaluate(&ns, &c, &v, now())).clone();
    assert!(d.message.starts_with("holdfast: Namespace finalizer-namespace holds deployments.apps finalizer-namespace/finalizer-deployment"), "{}", d.message);
    assert!(
        denied(&evaluate(&itself, &c, &v, now()))
            .message
            .contains("while its provider")
    );
    // One left: singular.
    v.finalizers.insert(
        (
            "coolresources.my.crd.group".into(),
            "my.crd.group/super-important".into(),
        ),
        1,
    );
    assert!(
        denied(&evaluate(&provider, &c, &v, now()))
            .message
            .contains("1 coolresources.my.crd.group still carries finalizer")
    );
    // Criteria met: provider and namespace may go; the CriticalService only once the provider is gone.
    v.finalizers.clear();
    v.objects.remove(&(
        "customresourcedefinitions.apiextensions.k8s.io".into(),
        "".into(),
        "coolresources.my.crd.group".into(),
    ));
    assert_eq!(evaluate(&provider, &c, &v, now()).decision, Decision::Allow);
    assert_eq!(evaluate(&ns, &c, &v, now()).decision, Decision::Allow);
    assert!(matches!(
        evaluate(&itself, &c, &v, now()).decision,
        Decision::Deny(_)
    ));
    v.objects.clear();
    assert_eq!(evaluate(&itself, &c, &v, now()).decision, Decision::Allow);
    // Another deployment in the namespace is not the provider.
    let other = del(DEPLOYMENT, Some("finalizer-namespace"), "web", json!({}));
    assert_eq!(evaluate(&other, &c, &v, now()).decision, Decision::Allow);
}

fn anchor_view() -> View {
    let v = View::default();
    let ar: AnchorRule = serde_json::from_value(json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "AnchorRule", "metadata": {"name": "appcat"},
        "spec": {"anchor": {"group": "vshn.appcat.vshn.io", "version": "v1", "resource": "xvshnpostgresqls"},
            "anchorLabels": {"name": "appcat.vshn.io/composite-name"},
            "toggle": {"fieldPath": ".spec.parameters.backup.deletionProtection", "default": true},
            "protects": [
                {"group": "", "version": "v1", "resource": "namespaces"},
                {"group": "", "version": "v1", "resource": "persistentvolumeclaims", "inheritFromNamespace": true},
                {"group": "appcat.vshn.io", "version": "v1", "resource": "xobjectbuckets"}
            ]}})).expect("ar");
    v.registry.apply("", &ar).expect("compiles");
    v
}

#[test]
fn anchors_in_another_cluster_are_never_read_locally_and_fail_closed() {
    let mut v = View::default();
    let ar: AnchorRule = serde_json::from_value(json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "AnchorRule", "metadata": {"name": "remote"},
        "spec": {"anchor": {"group": "vshn.appcat.vshn.io", "version": "v1", "resource": "xvshnpostgresqls"},
            "anchorLabels": {"name": "appcat.vshn.io/composite-name"},
            "anchorSource": {"kubeconfigSecretRef": {"name": "control", "namespace": "holdfast-system"}},
            "protects": [{"group": "", "version": "v1", "resource": "configmaps"}]}}))
    .expect("ar");
    assert_eq!(
        ar.spec
            .anchor_source
            .as_ref()
            .map(|s| s.kubeconfig_secret_ref.key.as_str()),
        Some("kubeconfig")
    );
    v.registry.apply("", &ar).expect("compiles");
    // A local object of the anchor's name is not the anchor.
    v.objects.insert(
        (
            "xvshnpostgresqls.vshn.appcat.vshn.io".into(),
            String::new(),
            "pg-1".into(),
        ),
        Arc::new(json!({"metadata": {"name": "pg-1"}})),
    );
    let bucket = del(
        CONFIGMAP,
        Some("app"),
        "b",
        json!({"appcat.vshn.io/composite-name": "pg-1"}),
    );
    let d = denied(&evaluate(&bucket, &cfg(false, &[]), &v, now())).clone();
    assert_eq!(
        d.message,
        format!(
            "holdfast: cannot read the anchor xvshnpostgresqls.vshn.appcat.vshn.io pg-1 of ConfigMap app/b \
         (policy: AnchorRule/remote): anchor source Secret holdfast-system/control is not available here; \
         refusing rather than risk it, retry later, {BYPASS_HINT}."
        )
    );
}

#[test]
fn anchor_rule_lifecycle() {
    let mut v = anchor_view();
    let c = cfg(false, &[]);
    let anchor_key = (
        "xvshnpostgresqls.vshn.appcat.vshn.io".to_string(),
        String::new(),
        "pg-1".to_string(),
    );
    let ns_key = (
        "namespaces".to_string(),
        String::new(),
        "vshn-postgresql-pg-1".to_string(),
    );
    v.objects.insert(ns_key, Arc::new(json!({"metadata": {"name": "vshn-postgresql-pg-1", "labels": {"appcat.vshn.io/composite-name": "pg-1"}}})));
    v.objects.insert(anchor_key.clone(), Arc::new(json!({"metadata": {"name": "pg-1"}, "spec": {"parameters": {"backup": {"deletionProtection": true}}}})));
    let ns = del(
        NAMESPACE,
        None,
        "vshn-postgresql-pg-1",
        json!({"appcat.vshn.io/composite-name": "pg-1"}),
    );
    let pvc = del(PVC, Some("vshn-postgresql-pg-1"), "data", json!({}));
    let bucket = del(
        ("appcat.vshn.io", "xobjectbuckets", "XObjectBucket"),
        None,
        "b",
        json!({"appcat.vshn.io/composite-name": "pg-1"}),
    );
    for r in [&ns, &pvc, &bucket] {
        let d = denied(&evaluate(r, &c, &v, now())).clone();
        assert!(d.message.contains("is protected while its anchor xvshnpostgresqls.vshn.appcat.vshn.io pg-1 exists and has .spec.parameters.backup.deletionProtection=true"), "{}", d.message);
    }
    // Override label on exactly that object.
    let pvc_override = del(
        PVC,
        Some("vshn-postgresql-pg-1"),
        "data",
        json!({"holdfast.dev/allow-deletion": "true"}),
    );
    assert_eq!(
        evaluate(&pvc_override, &c, &v, now()).decision,
        Decision::Allow
    );
    let pvc_wrong = del(
        PVC,
        Some("vshn-postgresql-pg-1"),
        "data",
        json!({"holdfast.dev/allow-deletion": "yes"}),
    );
    assert!(matches!(
        evaluate(&pvc_wrong, &c, &v, now()).decision,
        Decision::Deny(_)
    ));
    // Toggle off → deletable; absent → default (true).
    v.objects.insert(anchor_key.clone(), Arc::new(json!({"metadata": {"name": "pg-1"}, "spec": {"parameters": {"backup": {"deletionProtection": false}}}})));
    assert_eq!(evaluate(&pvc, &c, &v, now()).decision, Decision::Allow);
    v.objects.insert(
        anchor_key.clone(),
        Arc::new(json!({"metadata": {"name": "pg-1"}, "spec": {}})),
    );
    assert!(matches!(
        evaluate(&pvc, &c, &v, now()).decision,
        Decision::Deny(_)
    ));
    // Terminating or gone anchor → deletable (no deadlock).
    v.objects.insert(anchor_key.clone(), Arc::new(json!({"metadata": {"name": "pg-1", "deletionTimestamp": "2026-11-22T08:00:00Z"}, "spec": {}})));
    assert_eq!(evaluate(&pvc, &c, &v, now()).decision, Decision::Allow);
    v.objects.remove(&anchor_key);
    for r in [&ns, &pvc, &bucket] {
        assert_eq!(evaluate(r, &c, &v, now()).decision, Decision::Allow);
    }
}

#[test]
fn containment_denies_namespace_with_protected_contents() {
    let mut v = View::default();
    v.contents.push(ContainedObject {
        resource: crate::review::Gvr { group: "".into(), version: "v1".into(), resource: "persistentvolumeclaims".into() },
        kind: "PersistentVolumeClaim".into(),
        object: Arc::new(json!({"metadata": {"name": "data", "namespace": "shop", "labels": {"holdfast.dev/protected": "true"}}})),
    });
    v.contents.push(ContainedObject {
        resource: crate::review::Gvr {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
        },
        kind: "ConfigMap".into(),
        object: Arc::new(json!({"metadata": {"name": "plain", "namespace": "shop"}})),
    });
    let c = cfg(false, &[]);
    let ns = del(NAMESPACE, None, "shop", json!({}));
    let e = evaluate(&ns, &c, &v, now());
    let d = denied(&e);
    assert_decided(&e, Decider::Containment, "containment");
    assert_eq!(
        d.blockers,
        vec!["PersistentVolumeClaim shop/data (label)".to_string()]
    );
    assert!(d.message.starts_with("holdfast: Namespace shop holds objects that are protected from deletion: PersistentVolumeClaim shop/data (label)"), "{}", d.message);
    // Another namespace is unaffected.
    let other = del(NAMESPACE, None, "dev", json!({}));
    assert_eq!(evaluate(&other, &c, &v, now()).decision, Decision::Allow);
    // Break-glass on the contained object lifts it.
    v.contents[0].object = Arc::new(
        json!({"metadata": {"name": "data", "namespace": "shop", "labels": {"holdfast.dev/protected": "true"}, "annotations": {"holdfast.dev/skip-protection": "true"}}}),
    );
    assert_eq!(evaluate(&ns, &c, &v, now()).decision, Decision::Allow);
}

#[test]
fn anchor_rules_and_critical_services_answer_for_their_own_workspace_only() {
    let mut v = View::default();
    let cs: CriticalService = serde_json::from_value(json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService",
        "metadata": {"name": "db", "annotations": {"kcp.io/cluster": "lc-a"}},
        "spec": {"provider": {"group": "apps", "resource": "deployments", "namespace": "shop", "name": "db"},
            "criteria": [{"type": "SpecificResource", "specificResource": {"group": "", "resource": "configmaps", "namespace": "shop", "name": "needs-db"}}]}}))
    .expect("cs");
    v.registry.apply("lc-a", &cs).expect("compiles");
    let ar: AnchorRule = serde_json::from_value(json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "AnchorRule",
        "metadata": {"name": "app", "annotations": {"kcp.io/cluster": "lc-a"}},
        "spec": {"anchor": {"group": "apps", "version": "v1", "resource": "deployments"},
            "anchorLabels": {"name": "app.test/anchor"},
            "protects": [{"group": "", "version": "v1", "resource": "persistentvolumeclaims"}]}}))
    .expect("ar");
    v.registry.apply("lc-a", &ar).expect("compiles");
    v.objects.insert(
        ("configmaps".into(), "shop".into(), "needs-db".into()),
        Arc::new(json!({})),
    );
    v.objects.insert(
        ("deployments.apps".into(), String::new(), "web".into()),
        Arc::new(json!({"metadata": {"name": "web"}})),
    );
    let c = PolicyConfig {
        kcp: true,
        ..cfg(false, &[])
    };
    let provider = || del(DEPLOYMENT, Some("shop"), "db", json!({}));
    let pvc = || del(PVC, Some("shop"), "data", json!({"app.test/anchor": "web"}));
    // Workspace A: both policies refuse.
    for (what, r) in [("provider", provider()), ("pvc", pvc())] {
        let e = evaluate(&in_cluster(r, "lc-a"), &c, &v, now());
        assert!(matches!(e.decision, Decision::Deny(_)), "{what}: {e:?}");
    }
    let of_a = |kind, name| {
        Decider::Policy(PolicyRef::new(
            kind,
            &crate::registry::PolicyKey::new("lc-a", name),
        ))
    };
    let e = evaluate(&in_cluster(provider(), "lc-a"), &c, &v, now());
    assert_eq!(e.decider, of_a(PolicyKind::CriticalService, "db"));
    assert_eq!(
        denied(&e).message,
        "holdfast: Deployment shop/db provides a critical service (policy: CriticalService/db \
         (logical cluster lc-a)) and cannot be deleted while configmaps shop/needs-db still \
         exists. To delete it, wait until those are gone (the service finalizes them), or set \
         the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    );
    let e = evaluate(&in_cluster(pvc(), "lc-a"), &c, &v, now());
    assert_eq!(e.decider, of_a(PolicyKind::AnchorRule, "app"));
    // The same objects in workspace B: neither policy is B's.
    for (what, r) in [("provider", provider()), ("pvc", pvc())] {
        let e = evaluate(&in_cluster(r, "lc-b"), &c, &v, now());
        assert_eq!(e.decision, Decision::Allow, "{what}");
    }
}

#[test]
fn the_containment_marker_stays_while_the_namespace_holds_something_protected() {
    let marker = "holdfast.dev/contains-protected";
    let ns = |labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "obj", "labels": labels}});
    let mut v = View {
        contents: vec![ContainedObject {
            resource: crate::review::Gvr {
                group: "".into(),
                version: "v1".into(),
                resource: "configmaps".into(),
            },
            kind: "ConfigMap".into(),
            object: Arc::new(
                json!({"metadata": {"name": "vault", "namespace": "obj", "labels": {"holdfast.dev/protected": "true"}}}),
            ),
        }],
        ..View::default()
    };
    let c = cfg(false, &[]);
    let marked = ns(json!({marker: "true", "team": "a"}));
    // Removed, or changed: refused, naming what is protected.
    for new in [
        ns(json!({"team": "a"})),
        ns(json!({marker: "no", "team": "a"})),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "obj"}}),
    ] {
        let req = review("UPDATE", "Namespace", "namespaces", new, marked.clone());
        let e = evaluate(&req, &c, &v, now());
        assert_decided(&e, Decider::Containment, "containment");
        let d = denied(&e);
        assert_eq!(d.blockers, vec!["ConfigMap obj/vault (label)".to_string()]);
        assert_eq!(
            d.message,
            "holdfast: Namespace obj holds objects that are protected from deletion: ConfigMap \
             obj/vault (label) (policy: containment), so its label holdfast.dev/contains-protected \
             cannot be removed or changed: it routes the namespace's DELETE to holdfast. \
             holdfast-controller removes it once nothing protected is left; lift the protection \
             of those objects (or delete them) first."
        );
    }
    // Kept as is (another label changes): not judged here.
    let req = review(
        "UPDATE",
        "Namespace",
        "namespaces",
        ns(json!({marker: "true", "team": "b"})),
        marked.clone(),
    );
    assert_eq!(evaluate(&req, &c, &v, now()).decision, Decision::Allow);
    // Nothing protected left: the controller may remove it.
    v.contents.clear();
    let req = review(
        "UPDATE",
        "Namespace",
        "namespaces",
        ns(json!({"team": "a"})),
        marked.clone(),
    );
    assert_eq!(evaluate(&req, &c, &v, now()).decision, Decision::Allow);
    // Another kind carrying the label is no namespace.
    let req = review(
        "UPDATE",
        "ConfigMap",
        "configmaps",
        cm(json!({}), json!({})),
        cm(json!({marker: "true"}), json!({})),
    );
    assert_eq!(evaluate(&req, &c, &v, now()).decision, Decision::Allow);
}
