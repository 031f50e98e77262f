use super::*;
use crate::{
    api::{dependency_rule::DependencyRule, resource_protection::ResourceProtection},
    index::{DependentsIndex, ObjectId, Reference},
    registry::Registry,
};

struct View {
    registry: Registry,
    index: DependentsIndex,
    broken: bool,
    /// kcp: the export the object's workspace binds its type from, and how often
    /// that was asked.
    bound: Option<crate::review::ExportRoute>,
    asked: std::sync::atomic::AtomicUsize,
}

impl ClusterIndex for View {
    fn policies_loaded(&self) -> bool {
        self.registry.loaded()
    }
    fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
        true
    }
    fn protections(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledProtection>]>> {
        self.registry.protections_for(gr)
    }
    fn dependencies(&self, gr: &GroupResource) -> Option<Arc<[Arc<Vec<CompiledDependency>>]>> {
        self.registry.dependencies.find(gr)
    }
}

impl ClusterLookup for View {
    fn dependents(
        &self,
        q: DependentsQuery<'_>,
    ) -> impl Future<Output = Result<Vec<Referrer>, LookupError>> + Send {
        let r = if self.broken {
            Err(LookupError::unreadable("connection refused"))
        } else {
            Ok(self.index.lookup(
                q.cluster,
                &crate::index::index_target(q.dep),
                q.name,
                q.namespace,
            ))
        };
        async move { r }
    }
    fn bound_export(
        &self,
        _cluster: &str,
        _gr: &GroupResource,
    ) -> impl Future<Output = Result<Option<crate::review::ExportRoute>, LookupError>> + Send {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let bound = self.bound.clone();
        async move { Ok(bound) }
    }
}

impl AccessReview for View {}

fn view(rps: &[Value], rules: &[Value]) -> View {
    let registry = Registry::default();
    for rp in rps {
        let rp: ResourceProtection = serde_json::from_value(rp.clone()).expect("rp");
        registry.apply("", &rp).expect("compiles");
    }
    for r in rules {
        let r: DependencyRule = serde_json::from_value(r.clone()).expect("rule");
        registry.apply("", &r).expect("compiles");
    }
    registry.protections.set_loaded();
    registry.dependencies.set_loaded();
    registry.critical.set_loaded();
    registry.anchors.set_loaded();
    View {
        registry,
        index: DependentsIndex::default(),
        broken: false,
        bound: None,
        asked: Default::default(),
    }
}

fn rp(name: &str, enforcement: &str, sel: Value) -> Value {
    json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
        "metadata": {"name": name}, "spec": {"enforcement": enforcement, "resources": [sel]}})
}

fn vm_rule(path: &str) -> Value {
    json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "DependencyRule",
        "metadata": {"name": "vm-dependencies"},
        "spec": {"dependent": {"group": "compute.test.io", "version": "v1", "kind": "VirtualMachine", "resource": "virtualmachines"},
                 "dependencies": [{"group": "network.test.io", "version": "v1", "resource": "vpcs", "fieldRef": {"path": path}}]}})
}

/// The DELETE of an object as user bob.
fn delete_of(
    what: (&str, &str, &str),
    ns: Option<&str>,
    name: &str,
    labels: Value,
) -> AdmissionRequest {
    delete_review(what, ns, ns, name, labels)
}

#[test]
fn resource_protection_selectors_and_modes() {
    let v = view(
        &[
            rp(
                "shop-db",
                "Enforce",
                json!({"group": "apps", "version": "v1", "resource": "deployments", "namespace": "shop", "names": ["db"]}),
            ),
            rp(
                "crds",
                "Enforce",
                json!({"group": "apiextensions.k8s.io", "version": "v1", "resource": "customresourcedefinitions", "names": ["widgets.example.com"]}),
            ),
            rp(
                "labelled",
                "Warn",
                json!({"group": "", "version": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"tier": "data"}}}),
            ),
            rp(
                "audit",
                "Audit",
                json!({"group": "", "version": "v1", "resource": "secrets"}),
            ),
        ],
        &[],
    );
    let c = cfg(false, &[]);
    let e = evaluate(
        &delete_of(DEPLOYMENT, Some("shop"), "db", json!({})),
        &c,
        &v,
        now(),
    );
    let d = denied(&e);
    assert_decided(
        &e,
        policy(PolicyKind::ResourceProtection, "shop-db"),
        "ResourceProtection/shop-db",
    );
    assert!(d.message.starts_with("holdfast: Deployment shop/db is protected by ResourceProtection/shop-db (selects deployments.apps in namespace shop named db)"), "{}", d.message);
    for (ns, name) in [("shop", "web"), ("other", "db")] {
        let e = evaluate(
            &delete_of(DEPLOYMENT, Some(ns), name, json!({})),
            &c,
            &v,
            now(),
        );
        assert_eq!(e.decision, Decision::Allow, "{ns}/{name}");
    }
    let e = evaluate(
        &delete_of(CRD, None, "widgets.example.com", json!({})),
        &c,
        &v,
        now(),
    );
    assert!(
        denied(&e)
            .message
            .contains("CustomResourceDefinition widgets.example.com")
    );
    let e = evaluate(
        &delete_of(CONFIGMAP, Some("x"), "cfg", json!({"tier": "data"})),
        &c,
        &v,
        now(),
    );
    match &e.decision {
        Decision::Warn(w) => assert!(w[0].contains("ResourceProtection/labelled")),
        other => panic!("{other:?}"),
    }
    let e = evaluate(
        &delete_of(CONFIGMAP, Some("x"), "cfg", json!({"tier": "web"})),
        &c,
        &v,
        now(),
    );
    assert_eq!(e.decision, Decision::Allow);
    let e = evaluate(
        &delete_of(("", "secrets", "Secret"), Some("x"), "s", json!({})),
        &c,
        &v,
        now(),
    );
    assert_eq!(e.decision, Decision::Allow);
    assert_decided(&e, Decider::Audit, "audit");
    assert_eq!(e.audits.len(), 1);
}

fn vm(idx: &DependentsIndex, v: &View, name: &str, spec: Value, terminating: bool) {
    let obj = json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec});
    let rules = v.registry.dependencies.entries();
    let deps: Vec<&CompiledDependency> = rules.iter().flat_map(|r| r.iter()).collect();
    let refs: Vec<Reference> = crate::index::references(&obj, &deps);
    let id = ObjectId {
        cluster: "".into(),
        resource: "virtualmachines.compute.test.io".into(),
        namespace: "default".into(),
        name: name.into(),
    };
    idx.apply(&id, "VirtualMachine", terminating, &refs);
}

#[test]
fn dependency_rule_blocks_while_referenced() {
    let mut v = view(&[], &[vm_rule(".spec.vpcRef.name")]);
    let c = cfg(false, &[]);
    let del = delete_of(VPC, Some("default"), "my-vpc", json!({}));
    assert_eq!(evaluate(&del, &c, &v, now()).decision, Decision::Allow);
    let idx = v.index.clone();
    vm(
        &idx,
        &v,
        "my-vm",
        json!({"vpcRef": {"name": "my-vpc"}}),
        false,
    );
    let e = evaluate(&del, &c, &v, now());
    let d = denied(&e);
    assert!(d.message.starts_with("holdfast: VPC default/my-vpc is still referenced by VirtualMachine default/my-vm (policy: DependencyRule/vm-dependencies"), "{}", d.message);
    vm(
        &idx,
        &v,
        "vm-2",
        json!({"vpcRef": {"name": "my-vpc"}}),
        true,
    );
    let d = denied(&evaluate(&del, &c, &v, now())).clone();
    assert!(
        d.message
            .contains("VirtualMachine default/my-vm, VirtualMachine default/vm-2 (terminating)"),
        "{}",
        d.message
    );
    // Another namespace's VPC of the same name is not referenced.
    let other = delete_of(VPC, Some("prod"), "my-vpc", json!({}));
    assert_eq!(evaluate(&other, &c, &v, now()).decision, Decision::Allow);
    // Lookup failure: fail closed.
    v.broken = true;
    let d = denied(&evaluate(&del, &c, &v, now())).clone();
    assert_eq!(d.kind, DenialKind::LookupFailed);
    assert!(d.message.starts_with("holdfast: cannot verify dependents"));
}

#[test]
fn explain_lists_every_protection_and_every_blocker() {
    let v = view(
        &[rp(
            "vpcs-audited",
            "Audit",
            json!({"group": "network.test.io", "version": "v1", "resource": "vpcs"}),
        )],
        &[vm_rule(".spec.vpcRef.name")],
    );
    let c = cfg(false, &[]);
    let idx = v.index.clone();
    for i in 0..7 {
        vm(
            &idx,
            &v,
            &format!("vm-{i}"),
            json!({"vpcRef": {"name": "my-vpc"}}),
            false,
        );
    }
    let del = delete_of(
        VPC,
        Some("default"),
        "my-vpc",
        json!({"holdfast.dev/protected": "Always"}),
    );
    let x = futures::executor::block_on(explain_delete(&del, &c, &v, now()));
    // The verdict is the webhook's: the label decides, its message names it.
    assert_eq!(x.evaluation, evaluate(&del, &c, &v, now()));
    assert_decided(&x.evaluation, label("holdfast.dev/protected"), "label");
    let deciders: Vec<(&Decider, Enforcement)> = x
        .findings
        .iter()
        .map(|f| (&f.decider, f.enforcement))
        .collect();
    assert_eq!(
        deciders,
        [
            (&label("holdfast.dev/protected"), Enforcement::Enforce),
            (
                &policy(PolicyKind::ResourceProtection, "vpcs-audited"),
                Enforcement::Audit
            ),
            (
                &policy(PolicyKind::DependencyRule, "vm-dependencies"),
                Enforcement::Enforce
            ),
        ]
    );
    // As `kubectl holdfast why` names them.
    let policies: Vec<String> = x.findings.iter().map(|f| f.decider.to_string()).collect();
    assert_eq!(
        policies,
        [
            "label holdfast.dev/protected",
            "ResourceProtection/vpcs-audited",
            "DependencyRule/vm-dependencies",
        ]
    );
    let dep = &x.findings[2];
    assert_eq!(dep.blockers.len(), 7);
    assert!(dep.message.contains("and 2 more"), "{}", dep.message);
    assert_eq!(x.break_glass.active, None);
    // Break-glass: allowed, and what it overrides is still listed.
    let mut glass = del.clone();
    if let Some(old) = glass.old_object.as_mut() {
        old["metadata"]["annotations"] =
            json!({"holdfast.dev/skip-protection": "2000-01-01T00:00:00Z"});
    }
    let x = futures::executor::block_on(explain_delete(&glass, &c, &v, now()));
    assert_eq!(
        x.break_glass.ignored.as_deref(),
        Some("holdfast.dev/skip-protection=2000-01-01T00:00:00Z has expired")
    );
    glass.old_object.as_mut().expect("old")["metadata"]["annotations"] =
        json!({"holdfast.dev/skip-protection": "true"});
    let x = futures::executor::block_on(explain_delete(&glass, &c, &v, now()));
    assert_eq!(x.evaluation.decision, Decision::Allow);
    assert_eq!(
        x.break_glass.active.as_deref(),
        Some("annotation holdfast.dev/skip-protection")
    );
    assert_eq!(x.findings.len(), 3);
}

#[test]
fn not_loaded_registry_denies_retry_later() {
    let v = View {
        registry: Registry::default(),
        index: DependentsIndex::default(),
        broken: false,
        bound: None,
        asked: Default::default(),
    };
    let del = delete_of(VPC, Some("default"), "my-vpc", json!({}));
    let d = denied(&evaluate(&del, &cfg(false, &[]), &v, now())).clone();
    assert_eq!(d.kind, DenialKind::NotReady);
}

/// The VM rule of export `net-a` at `root:net` (logical cluster `lc1`), whose status
/// says which of its resources another export of that workspace exports too.
fn export_rule(shared: Value) -> Value {
    let mut r = vm_rule(".spec.vpcRef.name");
    r["spec"]["dependencies"][0]["apiExportRef"] = json!({"path": "root:net", "name": "net-a"});
    r["status"] = json!({"workspaces": [{"path": "root:net", "name": "net-a",
        "logicalCluster": "lc1", "webhookInstalled": true, "sharedResources": shared}]});
    r
}

#[test]
fn the_binding_is_asked_only_where_another_export_shares_the_resource() {
    let via = crate::review::ExportRoute {
        cluster: "lc1".into(),
        name: "net-a".into(),
    };
    let c = cfg(false, &[]);
    let mut del = delete_of(VPC, Some("default"), "my-vpc", json!({}));
    del.via_export = Some(via);
    let asked = |v: &View| v.asked.load(std::sync::atomic::Ordering::SeqCst);

    // A VM using my-vpc; the object's workspace binds VPCs from net-b.
    let with_vm = |exports: serde_json::Value| {
        let mut v = view(&[], &[export_rule(exports)]);
        vm(
            &v.index.clone(),
            &v,
            "my-vm",
            json!({"vpcRef": {"name": "my-vpc"}}),
            false,
        );
        v.bound = Some(crate::review::ExportRoute {
            cluster: "lc1".into(),
            name: "net-b".into(),
        });
        v
    };
    // net-a alone exports VPCs in root:net: a review sent for it is its consumers';
    // no binding read.
    let v = with_vm(json!(["subnets.network.test.io"]));
    denied(&evaluate(&del, &c, &v, now()));
    assert_eq!(asked(&v), 0);

    // Another export shares VPCs: the object's workspace binds net-b, so net-a's rule
    // does not govern it; asked once.
    let mut v = with_vm(json!(["vpcs.network.test.io"]));
    assert_eq!(evaluate(&del, &c, &v, now()).decision, Decision::Allow);
    assert_eq!(asked(&v), 1);
    // Bound from net-a itself: refused.
    v.bound = Some(crate::review::ExportRoute {
        cluster: "lc1".into(),
        name: "net-a".into(),
    });
    denied(&evaluate(&del, &c, &v, now()));
}

#[test]
fn a_resource_protection_protects_its_own_workspace_only() {
    let registry = Registry::default();
    for (cluster, name, enforcement) in [("lc-a", "keep", "Enforce"), ("lc-b", "warn", "Warn")] {
        let mut p = rp(
            name,
            enforcement,
            json!({"version": "v1", "resource": "configmaps"}),
        );
        p["metadata"]["annotations"] = json!({"kcp.io/cluster": cluster});
        let p: ResourceProtection = serde_json::from_value(p).expect("rp");
        registry.apply(cluster, &p).expect("compiles");
    }
    registry.protections.set_loaded();
    registry.dependencies.set_loaded();
    registry.critical.set_loaded();
    registry.anchors.set_loaded();
    let v = View {
        registry,
        index: DependentsIndex::default(),
        broken: false,
        bound: None,
        asked: Default::default(),
    };
    let mut c = cfg(false, &[]);
    c.kcp = true;
    let cm = || delete_of(CONFIGMAP, Some("shop"), "cfg", json!({}));
    // Workspace A: its Enforce policy refuses; B's Warn policy plays no part.
    let e = evaluate(&in_cluster(cm(), "lc-a"), &c, &v, now());
    assert_eq!(
        denied(&e).message,
        "holdfast: ConfigMap shop/cfg is protected by ResourceProtection/keep (logical cluster lc-a) (selects configmaps), so it cannot be deleted. To delete it, remove it from the policy (kubectl edit resourceprotection keep), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    );
    // Workspace B: only its Warn policy.
    let e = evaluate(&in_cluster(cm(), "lc-b"), &c, &v, now());
    match &e.decision {
        Decision::Warn(w) => assert_eq!(
            w,
            &vec!["holdfast: ConfigMap shop/cfg is protected by ResourceProtection/warn (logical cluster lc-b) (selects configmaps), so it cannot be deleted. To delete it, remove it from the policy (kubectl edit resourceprotection warn), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection.".to_string()]
        ),
        other => panic!("expected a warning, got {other:?}"),
    }
    // A workspace with no policy: allowed.
    let e = evaluate(&in_cluster(cm(), "lc-c"), &c, &v, now());
    assert_eq!(e.decision, Decision::Allow);
}

#[test]
fn a_workspace_route_answers_for_its_own_objects_only() {
    let refusal = |op: &str, of: &str| {
        format!(
            "holdfast: refused {op} of ConfigMap shop/cfg: it came through the webhook route \
             of workspace lc-a, but the object {of}; a workspace's webhook configuration \
             answers for that workspace's objects only (check the clientConfig.url of the \
             configuration that sent it)"
        )
    };
    let cm = || delete_of(CONFIGMAP, Some("shop"), "cfg", json!({}));
    assert!(crate::policy::foreign_workspace(&in_cluster(cm(), "lc-a"), "lc-a").is_none());
    let e = crate::policy::foreign_workspace(&in_cluster(cm(), "lc-b"), "lc-a")
        .unwrap_or_else(|| panic!("refused"));
    assert_decided(&e, Decider::Unreadable, "unreadable");
    assert_eq!(denied(&e).kind, DenialKind::Unreadable);
    assert_eq!(
        denied(&e).message,
        refusal("DELETE", "is of workspace lc-b")
    );
    // A stored object always carries its workspace: without it, refused.
    let e = crate::policy::foreign_workspace(&cm(), "lc-a").unwrap_or_else(|| panic!("refused"));
    assert_eq!(
        denied(&e).message,
        refusal("DELETE", "carries no kcp.io/cluster annotation")
    );
    // A CREATE: the new object may not carry its workspace yet (taken as the
    // route's), but one of another workspace is refused.
    let mut create = cm();
    create.operation = crate::review::Operation::Create;
    create.object = create.old_object.take();
    assert!(crate::policy::foreign_workspace(&create, "lc-a").is_none());
    let e = crate::policy::foreign_workspace(&in_cluster(create, "lc-b"), "lc-a")
        .unwrap_or_else(|| panic!("refused"));
    assert_eq!(
        denied(&e).message,
        refusal("CREATE", "is of workspace lc-b")
    );
}
