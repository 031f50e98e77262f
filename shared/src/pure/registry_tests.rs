use super::*;

fn gr(r: &str) -> GroupResource {
    GroupResource::new("g", r)
}

#[test]
fn apply_delete_and_reverse_index() {
    let idx: TargetIndex<&'static str> = TargetIndex::default();
    idx.apply(
        PolicyKey::new("c", "a"),
        vec![gr("vpcs"), gr("subnets")],
        Arc::new("a"),
    );
    idx.apply(PolicyKey::new("c", "b"), vec![gr("vpcs")], Arc::new("b"));
    assert_eq!(idx.find(&gr("vpcs")).map(|l| l.len()), Some(2));
    assert_eq!(idx.find(&gr("subnets")).map(|l| l.len()), Some(1));
    // In-place edit moves a rule's targets.
    idx.apply(PolicyKey::new("c", "a"), vec![gr("disks")], Arc::new("a2"));
    assert!(idx.find(&gr("subnets")).is_none());
    assert_eq!(idx.find(&gr("vpcs")).map(|l| l.len()), Some(1));
    assert_eq!(idx.find(&gr("disks")).map(|l| *l[0]), Some("a2"));
    idx.delete(&PolicyKey::new("c", "b"));
    assert!(idx.find(&gr("vpcs")).is_none());
    assert_eq!(idx.len(), 1);
    assert_eq!(idx.targets(), vec![gr("disks")]);
    assert!(idx.any(|v| *v == "a2"));
    assert!(!idx.any(|v| *v == "b"));
    assert!(!idx.is_loaded());
    idx.reset(vec![(
        PolicyKey::new("", "x"),
        vec![gr("vpcs")],
        Arc::new("x"),
    )]);
    assert!(idx.is_loaded());
    assert!(idx.find(&gr("disks")).is_none());
    assert_eq!(idx.find(&gr("vpcs")).map(|l| *l[0]), Some("x"));
}

/// A rule over VPCs of export `net-a` at `root:net` (and subnets of `net-b`),
/// with `status` as its status.
fn kcp_rule(status: serde_json::Value) -> DependencyRule {
    let dep = |resource: &str, export: &str| {
        serde_json::json!({
            "group": "network.test.io", "version": "v1", "resource": resource,
            "fieldRef": {"path": ".spec.ref"},
            "apiExportRef": {"path": "root:net", "name": export},
        })
    };
    serde_json::from_value(serde_json::json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "DependencyRule",
        "metadata": {"name": "vm"},
        "spec": {
            "dependent": {"group": "compute.test.io", "version": "v1",
                          "resource": "virtualmachines", "kind": "VirtualMachine"},
            "dependencies": [dep("vpcs", "net-a"), dep("subnets", "net-b")],
        },
        "status": status,
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn route(cluster: &str, name: &str) -> ExportRoute {
    ExportRoute {
        cluster: cluster.into(),
        name: name.into(),
    }
}

#[test]
fn a_dependency_serves_reviews_of_its_resolved_export_only() {
    let rule = kcp_rule(serde_json::json!({"workspaces": [
        {"path": "root:net", "name": "net-a", "logicalCluster": "lc1", "webhookInstalled": true,
         "sharedResources": ["subnets.network.test.io"]},
        {"path": "root:net", "name": "net-b", "webhookInstalled": false},
    ]}));
    let deps = compile_dependency_rule("c", &rule).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(deps.capacity(), deps.len(), "held without room to spare");
    let exports: Vec<_> = deps.iter().map(|d| d.export.clone()).collect();
    assert_eq!(
        exports,
        vec![
            // net-a shares subnets, not vpcs, with another export: its reviews
            // of VPCs are its own consumers'.
            Some(DependencyExport {
                name: "net-a".into(),
                cluster: Some("lc1".into()),
                shared: false,
            }),
            // Unknown (no status yet): maybe shared (the binding decides).
            Some(DependencyExport {
                name: "net-b".into(),
                cluster: None,
                shared: true,
            }),
        ]
    );
    let (vpcs, subnets) = (&deps[0], &deps[1]);
    // Plain /validate: every dependency, as before.
    assert!(vpcs.serves(None) && subnets.serves(None));
    assert!(vpcs.serves(Some(&route("lc1", "net-a"))));
    // Another export of the same workspace, or the same name elsewhere: not this one.
    assert!(!vpcs.serves(Some(&route("lc1", "net-b"))));
    assert!(!vpcs.serves(Some(&route("lc2", "net-a"))));
    // Not resolved in the status yet: every export of that name (fail closed).
    assert!(subnets.serves(Some(&route("lc1", "net-b"))));
    assert!(subnets.serves(Some(&route("lc9", "net-b"))));
    assert!(!subnets.serves(Some(&route("lc1", "net-a"))));
}

#[test]
fn a_dependency_without_status_or_export_ref() {
    let deps = compile_dependency_rule("c", &kcp_rule(serde_json::json!({}))).unwrap_or_default();
    assert_eq!(deps.len(), 2);
    assert!(
        deps.iter()
            .all(|d| d.export.as_ref().is_some_and(|e| e.cluster.is_none()))
    );
    // Without apiExportRef (Kubernetes), it serves plain /validate only.
    let mut plain = deps[0].clone();
    plain.export = None;
    assert!(plain.serves(None));
    assert!(!plain.serves(Some(&route("lc1", "net-a"))));
}

#[test]
fn same_name_in_two_clusters_is_two_rules() {
    let idx: TargetIndex<u8> = TargetIndex::default();
    idx.apply(PolicyKey::new("c1", "r"), vec![gr("vpcs")], Arc::new(1));
    idx.apply(PolicyKey::new("c2", "r"), vec![gr("vpcs")], Arc::new(2));
    assert_eq!(idx.find(&gr("vpcs")).map(|l| l.len()), Some(2));
    idx.delete(&PolicyKey::new("c1", "r"));
    assert_eq!(idx.find(&gr("vpcs")).map(|l| *l[0]), Some(2));
}

/// A ResourceProtection `name` of logical cluster `cluster` selecting `resource`
/// (core group, `"*"` for every core type) in `namespace`.
fn rp_in(cluster: &str, name: &str, resource: &str, namespace: Option<&str>) -> ResourceProtection {
    let mut sel = serde_json::json!({"version": "v1", "resource": resource});
    if let Some(ns) = namespace {
        sel["namespace"] = serde_json::json!(ns);
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
        "metadata": {"name": name, "annotations": {"kcp.io/cluster": cluster}},
        "spec": {"resources": [sel]},
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn keys(list: Option<Arc<[Arc<CompiledProtection>]>>) -> Vec<String> {
    list.iter()
        .flat_map(|l| l.iter())
        .map(|p| p.key.to_string())
        .collect()
}

#[test]
fn a_protection_answers_for_its_own_workspace_only() {
    let reg = Registry::default();
    let cms = GroupResource::new("", "configmaps");
    for (cluster, name, resource, ns) in [
        ("lc-b", "b-cms", "configmaps", None),
        ("lc-a", "a-cms", "configmaps", None),
        ("lc-a", "a-shop", "configmaps", Some("shop")),
        ("lc-c", "c-core", "*", None),
        ("lc-a", "a-secrets", "secrets", None),
    ] {
        reg.apply(cluster, &rp_in(cluster, name, resource, ns))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // Exact and wildcard lists, each of its own cluster only.
    assert_eq!(
        keys(reg.protections_in("lc-a", &cms)),
        ["lc-a|a-cms", "lc-a|a-shop"]
    );
    assert_eq!(keys(reg.protections_in("lc-b", &cms)), ["lc-b|b-cms"]);
    assert_eq!(keys(reg.protections_in("lc-c", &cms)), ["lc-c|c-core"]);
    assert_eq!(keys(reg.protections_in("lc-d", &cms)), Vec::<String>::new());
    assert!(reg.protections_in("lc-d", &cms).is_none());
    assert_eq!(keys(reg.protections_in("", &cms)), Vec::<String>::new());
    assert!(reg.wildcard_protections_in("lc-a", &cms).is_empty());
    assert_eq!(reg.wildcard_protections(&cms).len(), 1);
    // Every cluster together (store management): all of them.
    assert_eq!(
        keys(reg.protections_for(&cms)),
        ["lc-a|a-cms", "lc-a|a-shop", "lc-b|b-cms", "lc-c|c-core"]
    );
    // The partition of one cluster holds that cluster's policies only.
    let list = reg
        .protections
        .find(&cms)
        .unwrap_or_else(|| panic!("listed"));
    let part = ProtectionPartition::of_cluster(&cms, list.clone(), "lc-a");
    assert!(part.is_of(&list));
    let names = |part: &ProtectionPartition, ns: Option<&str>| -> Vec<String> {
        part.candidates(ns)
            .iter()
            .map(|p| p.key.to_string())
            .collect()
    };
    assert_eq!(names(&part, Some("shop")), ["lc-a|a-cms", "lc-a|a-shop"]);
    assert_eq!(names(&part, Some("other")), ["lc-a|a-cms"]);
    let part = ProtectionPartition::of_cluster(&cms, list.clone(), "lc-b");
    assert_eq!(names(&part, Some("shop")), ["lc-b|b-cms"]);
    let part = ProtectionPartition::of_cluster(&cms, list, "lc-z");
    assert_eq!(names(&part, Some("shop")), Vec::<String>::new());
}

#[test]
fn on_kubernetes_the_one_cluster_is_the_whole_list() {
    let reg = Registry::default();
    let cms = GroupResource::new("", "configmaps");
    for name in ["x", "y"] {
        let mut p = rp_in("", name, "configmaps", None);
        p.metadata.annotations = None;
        reg.apply("", &p).unwrap_or_else(|e| panic!("{e}"));
    }
    let (scoped, all) = (reg.protections_in("", &cms), reg.protections.find(&cms));
    // The index's own list, not a copy.
    assert!(matches!((&scoped, &all), (Some(a), Some(b)) if Arc::ptr_eq(a, b)));
    assert_eq!(keys(scoped), ["x", "y"]);
}

#[test]
fn protections_are_partitioned_by_namespace_in_registry_order() {
    let gr = GroupResource::new("", "configmaps");
    let rp = |name: &str, sels: &[(&str, Option<&str>)]| {
        Arc::new(CompiledProtection {
            key: PolicyKey::new("", name),
            enforcement: Enforcement::Enforce,
            strict: false,
            selectors: sels
                .iter()
                .map(|(res, ns)| ResourceSelector {
                    group: String::new(),
                    version: "v1".into(),
                    resource: (*res).into(),
                    namespace: ns.map(str::to_string),
                    names: None,
                    label_selector: None,
                    exclude: None,
                })
                .collect(),
            cascading: false,
        })
    };
    let list: Arc<[Arc<CompiledProtection>]> = vec![
        rp("a-team-1", &[("configmaps", Some("team-1"))]),
        rp("b-all", &[("configmaps", None)]),
        rp(
            "c-team-2",
            &[("configmaps", Some("team-2")), ("secrets", None)],
        ),
        rp(
            "d-both",
            &[
                ("configmaps", Some("team-1")),
                ("configmaps", Some("team-2")),
            ],
        ),
        rp("e-secrets-only", &[("secrets", None)]),
    ]
    .into();
    let part = ProtectionPartition::new(&gr, list.clone());
    assert!(part.is_of(&list));
    let names = |ns: Option<&str>| -> Vec<String> {
        part.candidates(ns)
            .iter()
            .map(|p| p.key.name.to_string())
            .collect()
    };
    assert_eq!(names(Some("team-1")), ["a-team-1", "b-all", "d-both"]);
    assert_eq!(names(Some("team-2")), ["b-all", "c-team-2", "d-both"]);
    assert_eq!(names(Some("other")), ["b-all"]);
    assert_eq!(names(None), ["b-all"]);
    // The same answer as visiting every policy with `selecting`, for each namespace.
    for ns in [Some("team-1"), Some("team-2"), Some("other"), None] {
        let all: Vec<String> = list
            .iter()
            .filter(|p| p.selecting(&gr, ns, "x", None).next().is_some())
            .map(|p| p.key.name.to_string())
            .collect();
        assert_eq!(names(ns), all, "{ns:?}");
    }
}

#[test]
fn the_index_version_moves_with_every_change_and_only_then() {
    let idx: TargetIndex<u32> = TargetIndex::default();
    let gr = GroupResource::new("", "configmaps");
    let v0 = idx.version();
    idx.apply(PolicyKey::new("", "a"), vec![gr.clone()], Arc::new(1));
    let v1 = idx.version();
    assert_ne!(v0, v1, "an added entry");
    assert_eq!(idx.version(), v1, "reading does not move it");
    idx.delete(&PolicyKey::new("", "missing"));
    assert_eq!(idx.version(), v1, "removing nothing changes nothing");
    idx.delete(&PolicyKey::new("", "a"));
    let v2 = idx.version();
    assert_ne!(v1, v2, "a removed entry");
    idx.reset(vec![(PolicyKey::new("", "b"), vec![gr], Arc::new(2))]);
    assert_ne!(idx.version(), v2, "a relist");
}

#[test]
fn a_cached_list_follows_every_change_even_read_concurrently() {
    let idx: Arc<TargetIndex<u32>> = Arc::new(TargetIndex::default());
    let gr = GroupResource::new("", "configmaps");
    idx.apply(PolicyKey::new("", "first"), vec![gr.clone()], Arc::new(0));
    assert_eq!(idx.find(&gr).map(|l| l.len()), Some(1), "built and cached");
    idx.apply(PolicyKey::new("", "second"), vec![gr.clone()], Arc::new(1));
    assert_eq!(idx.find(&gr).map(|l| l.len()), Some(2), "the cache dropped");
    // Readers build the list while a writer adds entries one by one: once the
    // writer is done, what readers see holds every entry (no stale list kept).
    let writer = {
        let (idx, gr) = (idx.clone(), gr.clone());
        std::thread::spawn(move || {
            for i in 0..2_000u32 {
                idx.apply(
                    PolicyKey::new("", &format!("k{i}")),
                    vec![gr.clone()],
                    Arc::new(i),
                );
            }
        })
    };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (idx, gr, done) = (idx.clone(), gr.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    let _ = idx.find(&gr);
                }
            })
        })
        .collect();
    writer.join().expect("writer");
    done.store(true, std::sync::atomic::Ordering::Release);
    for r in readers {
        r.join().expect("reader");
    }
    assert_eq!(idx.find(&gr).map(|l| l.len()), Some(2_002));
    assert!(idx.protects(&gr));
    assert_eq!(idx.targets(), vec![gr.clone()]);
    // A relist replaces the members and drops every cached list.
    idx.reset(vec![(
        PolicyKey::new("", "only"),
        vec![gr.clone()],
        Arc::new(7),
    )]);
    assert_eq!(idx.find(&gr).map(|l| *l[0]), Some(7));
    idx.delete(&PolicyKey::new("", "only"));
    assert!(idx.find(&gr).is_none());
    assert!(!idx.protects(&gr));
    assert!(idx.targets().is_empty());
}
