use super::*;
use crate::{api::resource_protection::ResourceProtection, registry::Registry};
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Default)]
struct View {
    registry: Registry,
    pods: Vec<Value>,
    instances: Vec<ContainedObject>,
    lookup_fails: bool,
    bypass: bool,
    bypass_asked: AtomicBool,
}

impl View {
    /// `found`, or the error `why` while lookups fail.
    fn unless_failing<T>(&self, why: &str, found: T) -> Result<T, LookupError> {
        match self.lookup_fails {
            true => Err(LookupError::unreadable(why)),
            false => Ok(found),
        }
    }
}

impl ClusterIndex for View {
    fn policies_loaded(&self) -> bool {
        true
    }
    fn protections(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledProtection>]>> {
        self.registry.protections_for(gr)
    }
}

impl ClusterLookup for View {
    async fn object(&self, _: &str, _: &GroupResource, ns: Option<&str>, name: &str) -> Found {
        let found = self.pods.iter().find(|p| {
            crate::review::meta_str(p, "name") == Some(name)
                && crate::review::meta_str(p, "namespace") == ns
        });
        self.unless_failing("boom", found.cloned().map(Arc::new))
    }
    async fn custom_resources(
        &self,
        _: &str,
        _: &Value,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        let why = "discovery of example.com/v1 failed";
        self.unless_failing(why, self.instances.clone())
    }
}

impl AccessReview for View {
    fn can_bypass(
        &self,
        _req: &AdmissionRequest,
    ) -> impl Future<Output = Result<bool, LookupError>> + Send {
        self.bypass_asked.store(true, Ordering::SeqCst);
        let b = self.bypass;
        async move { Ok(b) }
    }
}

fn req(body: Value) -> AdmissionRequest {
    let body = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request": body});
    parse_review(body.to_string().as_bytes()).expect("review")
}

fn gadget(name: &str, labels: Value) -> ContainedObject {
    ContainedObject {
        resource: crate::review::Gvr {
            group: "example.com".into(),
            version: "v1".into(),
            resource: "gadgets".into(),
        },
        kind: "Gadget".into(),
        object: Arc::new(
            json!({"metadata": {"name": name, "namespace": "shop", "labels": labels}}),
        ),
    }
}

fn crd_delete() -> AdmissionRequest {
    req(
        json!({"uid":"u","kind":{"group":"apiextensions.k8s.io","version":"v1","kind":"CustomResourceDefinition"},
        "resource":{"group":"apiextensions.k8s.io","version":"v1","resource":"customresourcedefinitions"},
        "name":"gadgets.example.com","operation":"DELETE","userInfo":{"username":"bob"},
        "object":null,"oldObject":{"metadata":{"name":"gadgets.example.com"},
            "spec":{"group":"example.com","names":{"plural":"gadgets","kind":"Gadget"},"scope":"Namespaced"}}}),
    )
}

#[test]
fn crd_delete_is_refused_while_an_instance_is_protected() {
    let mut v = View::default();
    v.instances.push(gadget("plain", json!({})));
    v.instances.push(gadget(
        "precious",
        json!({"holdfast.dev/protected": "Always"}),
    ));
    let c = cfg(false, &[]);
    let e = evaluate(&crd_delete(), &c, &v, now());
    let d = denied(&e);
    assert_decided(&e, Decider::Containment, "containment");
    assert_eq!(d.blockers, vec!["Gadget shop/precious (label)".to_string()]);
    assert_eq!(
        d.message,
        "holdfast: CustomResourceDefinition gadgets.example.com has instances that are \
         protected from deletion: Gadget shop/precious (label) (policy: containment), so \
         it cannot be deleted: that would delete them all, unchecked. To delete it, first \
         lift the protection of those objects (or delete them), or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection on the \
         CustomResourceDefinition."
    );
    // Break-glass on the instance lifts it; no protected instance: allowed.
    v.instances[1] = gadget(
        "precious",
        json!({"holdfast.dev/protected": "Always", "appcat.vshn.io/webhook-allowdeletion": "true"}),
    );
    assert_eq!(
        evaluate(&crd_delete(), &c, &v, now()).decision,
        Decision::Allow
    );
    // Instances that cannot be listed: refused.
    v.lookup_fails = true;
    let e = evaluate(&crd_delete(), &c, &v, now());
    assert_eq!(denied(&e).kind, DenialKind::LookupFailed);
    assert!(
        denied(&e).message.starts_with(
            "holdfast: cannot verify what instances CustomResourceDefinition gadgets.example.com has: discovery of example.com/v1 failed."
        ),
        "{}",
        denied(&e).message
    );
}

fn eviction(name: &str) -> AdmissionRequest {
    req(
        json!({"uid":"u","kind":{"group":"policy","version":"v1","kind":"Eviction"},
        "resource":{"group":"","version":"v1","resource":"pods"},"subResource":"eviction",
        "name":name,"namespace":"shop","operation":"CREATE","userInfo":{"username":"bob"},
        "object":{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":name,"namespace":"shop"}},
        "oldObject":null}),
    )
}

#[test]
fn eviction_of_a_protected_pod_is_refused() {
    let mut v = View::default();
    v.pods.push(json!({"metadata": {"name": "pinned", "namespace": "shop", "labels": {"holdfast.dev/protected": "true"}}}));
    v.pods
        .push(json!({"metadata": {"name": "free", "namespace": "shop"}}));
    let c = cfg(false, &[]);
    let e = evaluate(&eviction("pinned"), &c, &v, now());
    assert_decided(&e, label("holdfast.dev/protected"), "label");
    assert!(
        denied(&e).message.starts_with(
            "holdfast: eviction refused: Pod shop/pinned is protected by label holdfast.dev/protected=true (policy: label holdfast.dev/protected), so it cannot be deleted."
        ),
        "{}",
        denied(&e).message
    );
    assert_eq!(
        evaluate(&eviction("free"), &c, &v, now()).decision,
        Decision::Allow
    );
    assert_eq!(
        evaluate(&eviction("gone"), &c, &v, now()).decision,
        Decision::Allow
    );
    v.lookup_fails = true;
    let e = evaluate(&eviction("pinned"), &c, &v, now());
    assert_eq!(denied(&e).kind, DenialKind::LookupFailed);
}

fn rp_view() -> View {
    let v = View::default();
    let rp: ResourceProtection = serde_json::from_value(json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
        "metadata": {"name": "keep-cms"},
        "spec": {"resources": [{"group": "", "version": "v1", "resource": "configmaps", "names": ["obj"]}]}
    }))
    .expect("rp");
    v.registry.apply("", &rp).expect("valid");
    v.registry
        .reset::<crate::api::dependency_rule::DependencyRule>(&[]);
    v.registry.reset::<crate::api::anchor_rule::AnchorRule>(&[]);
    v.registry
        .reset::<crate::api::critical_service::CriticalService>(&[]);
    v
}

#[test]
fn strict_break_glass_on_a_policy_protected_object_takes_the_bypass_permission() {
    let v = rp_view();
    let old = cm(json!({}), json!({}));
    let new = cm(json!({}), json!({"holdfast.dev/skip-protection": "true"}));
    let e = evaluate(
        &update(old.clone(), new.clone()),
        &cfg(true, &[]),
        &v,
        now(),
    );
    assert_decided(&e, Decider::BreakGlassRefused, "break-glass");
    assert_eq!(
        denied(&e).message,
        "holdfast: user \"alice\" may not add annotation holdfast.dev/skip-protection to \
         ConfigMap ns/obj: it is protected in strict mode, and lifting that protection \
         needs the permission to bypass it (verb bypass on protections.holdfast.dev in \
         namespace ns). Ask someone who holds it."
    );
    v.bypass_asked.store(false, Ordering::SeqCst);
    // Not strict: no permission asked.
    assert_eq!(
        evaluate(
            &update(old.clone(), new.clone()),
            &cfg(false, &[]),
            &v,
            now()
        )
        .decision,
        Decision::Allow
    );
    // An object no policy protects: no permission asked.
    let mut other = new.clone();
    other["metadata"]["name"] = json!("other");
    let mut other_old = old.clone();
    other_old["metadata"]["name"] = json!("other");
    let mut r = update(other_old, other);
    r.name = Some("other".into());
    assert_eq!(
        evaluate(&r, &cfg(true, &[]), &v, now()).decision,
        Decision::Allow
    );
    assert!(!v.bypass_asked.load(Ordering::SeqCst));
    // With the permission: allowed.
    let mut v = rp_view();
    v.bypass = true;
    let e = evaluate(&update(old, new), &cfg(true, &[]), &v, now());
    assert_eq!(e.decision, Decision::Allow);
    assert_decided(&e, Decider::BreakGlassAuthorized, "break-glass-authorized");
}

#[test]
fn strict_covers_label_removal_through_subresources() {
    let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
    let new = cm(json!({}), json!({}));
    let mut r = update(old, new);
    r.sub_resource = Some("status".into());
    let e = judge(&r, &cfg(true, &[]));
    assert_decided(&e, Decider::Strict, "strict");
    assert_eq!(
        denied(&e).blockers,
        vec!["label holdfast.dev/protected=Always".to_string()]
    );
}

#[test]
fn look_alike_labels_warn_on_create_and_update() {
    let c = cfg(
        false,
        &["resourcetemplate.karmada.io/deletion-protected=Always"],
    );
    let obj = cm(json!({"holdfast.dev/protected": "always"}), json!({}));
    let e = judge(
        &review(
            "CREATE",
            "ConfigMap",
            "configmaps",
            obj.clone(),
            Value::Null,
        ),
        &c,
    );
    assert_eq!(
        e.decision,
        Decision::Warn(vec![
            "holdfast: label holdfast.dev/protected=\"always\" on ConfigMap ns/obj does not \
             protect it: the value must be exactly \"Always\" or \"true\" or \"Cascading\" (case-sensitive, \
             no spaces)."
                .to_string()
        ])
    );
    let karmada = cm(
        json!({"resourcetemplate.karmada.io/deletion-protected": "true"}),
        json!({}),
    );
    let e = judge(&update(cm(json!({}), json!({})), karmada.clone()), &c);
    assert_eq!(
        e.decision,
        Decision::Allow,
        "true is not a look-alike of Always"
    );
    let bad = cm(
        json!({"resourcetemplate.karmada.io/deletion-protected": "ALWAYS"}),
        json!({}),
    );
    let e = judge(&update(karmada, bad.clone()), &c);
    assert!(
        matches!(&e.decision, Decision::Warn(w) if w.len() == 1),
        "{e:?}"
    );
    // Unchanged on a later update: no repeated warning.
    let e = judge(&update(bad.clone(), bad), &c);
    assert_eq!(e.decision, Decision::Allow);
}

fn gadget_update(remove_label: bool) -> AdmissionRequest {
    let old = json!({"apiVersion":"example.com/v1","kind":"Gadget",
        "metadata":{"name":"g","namespace":"shop","labels":{"holdfast.dev/protected":"true"}}});
    let mut new = old.clone();
    if remove_label {
        new["metadata"]["labels"] = json!({});
    }
    req(
        json!({"uid":"u","kind":{"group":"example.com","version":"v1","kind":"Gadget"},
        "resource":{"group":"example.com","version":"v1","resource":"gadgets"},
        "name":"g","namespace":"shop","operation":"UPDATE","userInfo":{"username":"bob"},
        "object":new,"oldObject":old}),
    )
}

#[test]
fn a_crd_labelled_strict_exempt_takes_its_instances_out_of_strict_mode() {
    let c = cfg(true, &[]);
    // No such CRD: strict.
    let mut v = View::default();
    let e = evaluate(&gadget_update(true), &c, &v, now());
    assert_decided(&e, Decider::Strict, "strict");
    // The CRD without the label: strict.
    v.pods
        .push(json!({"metadata": {"name": "gadgets.example.com", "labels": {}}}));
    let e = evaluate(&gadget_update(true), &c, &v, now());
    assert_decided(&e, Decider::Strict, "strict");
    // The CRD exempt: the label may go; the DELETE is still refused (the
    // label path never waits for the API server, so the hint is unchanged).
    v.pods[0] = json!({"metadata": {"name": "gadgets.example.com",
        "labels": {"holdfast.dev/strict-exempt": "true"}}});
    let e = evaluate(&gadget_update(true), &c, &v, now());
    assert_eq!(e.decision, Decision::Allow, "{e:?}");
    let mut del = gadget_update(false);
    del.operation = Operation::Delete;
    del.object = None;
    let e = evaluate(&del, &c, &v, now());
    assert_eq!(denied(&e).kind, DenialKind::Protected);
    assert_decided(&e, label("holdfast.dev/protected"), "label");
    // The CRD cannot be read: strict mode applies (fail closed).
    v.lookup_fails = true;
    let e = evaluate(&gadget_update(true), &c, &v, now());
    assert_decided(&e, Decider::Strict, "strict");
    assert!(matches!(e.decision, Decision::Deny(_)), "{e:?}");
}
