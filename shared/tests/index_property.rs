//! Property test: after every random create/update/delete of dependents, the index
//! answers exactly as a fresh scan of the live objects would. The scan is an
//! independent oracle: it reads the two field paths straight off the JSON, not through
//! the field-path or reference code under test. The seed is printed on failure; set
//! HOLDFAST_SEED to replay one.

use holdfast_shared::{
    api::common::{Enforcement, GroupResource},
    fieldpath::FieldPath,
    index::{DependentsIndex, ObjectId, Reference, Referrer, index_target, references},
    registry::{CompiledDependency, PolicyKey},
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

mod common;
use common::{Rng, seed};

fn dep(path: &str, ns_path: Option<&str>) -> CompiledDependency {
    CompiledDependency {
        rule: PolicyKey::new("", "r"),
        enforcement: Enforcement::Enforce,
        dependent_group: "compute.test.io".into(),
        dependent_version: "v1".into(),
        dependent_resource: "virtualmachines".into(),
        dependent_kind: "VirtualMachine".into(),
        dependent_export: None,
        target: GroupResource::new("network.test.io", "vpcs"),
        path: FieldPath::parse(path).unwrap_or_else(|e| panic!("{e}")),
        namespace_path: ns_path.map(|p| FieldPath::parse(p).unwrap_or_else(|e| panic!("{e}"))),
        export: None,
    }
}

const CLUSTERS: [&str; 2] = ["lc-a", "lc-b"];
const NAMESPACES: [&str; 3] = ["default", "prod", "dev"];
const VPCS: [&str; 4] = ["v0", "v1", "v2", "v3"];

fn random_vm(rng: &mut Rng, ns: &str) -> Value {
    let mut spec = json!({});
    if rng.below(3) > 0 {
        spec["vpcRef"] = json!({"name": *rng.pick(&VPCS)});
        if rng.chance(4) {
            spec["vpcRef"]["namespace"] = json!(*rng.pick(&NAMESPACES));
        }
    }
    let disks: Vec<Value> = (0..rng.below(3))
        .map(|_| json!({"vpcRef": {"name": *rng.pick(&VPCS)}}))
        .collect();
    spec["disks"] = json!(disks);
    let mut meta = json!({"namespace": ns, "name": "x"});
    if rng.chance(5) {
        meta["deletionTimestamp"] = json!("2026-11-22T00:00:00Z");
    }
    json!({"metadata": meta, "spec": spec})
}

#[test]
fn index_matches_a_fresh_scan_after_every_step() {
    let seed = seed();
    let result = std::panic::catch_unwind(|| run(seed));
    if result.is_err() {
        panic!("index property failed; replay with HOLDFAST_SEED={seed}");
    }
}

fn run(seed: u64) {
    let mut rng = Rng(seed);
    let d1 = dep(".spec.vpcRef.name", Some(".spec.vpcRef.namespace"));
    let d2 = dep(".spec.disks[*].vpcRef.name", None);
    let deps = [&d1, &d2];
    let index = DependentsIndex::default();
    let mut live: BTreeMap<(String, String, String), Value> = BTreeMap::new();
    for step in 0..2000 {
        let cluster = *rng.pick(&CLUSTERS);
        let ns = *rng.pick(&NAMESPACES);
        let name = format!("vm-{}", rng.below(12));
        let key = (cluster.to_string(), ns.to_string(), name.clone());
        let id = ObjectId {
            cluster: cluster.into(),
            resource: "virtualmachines.compute.test.io".into(),
            namespace: ns.into(),
            name: name.as_str().into(),
        };
        if rng.chance(4) {
            live.remove(&key);
            index.delete(&id);
        } else {
            let vm = random_vm(&mut rng, ns);
            let terminating = vm["metadata"].get("deletionTimestamp").is_some();
            index.apply(&id, "VirtualMachine", terminating, &references(&vm, &deps));
            live.insert(key, vm);
        }
        // Compare every possible query with a scan.
        for c in CLUSTERS {
            for v in VPCS {
                for q_ns in NAMESPACES.iter().map(|n| Some(*n)).chain([None]) {
                    let mut expected: Vec<String> = live
                        .iter()
                        .filter(|((lc, _, _), _)| lc == c)
                        .filter(|(_, vm)| {
                            scan_references(vm)
                                .iter()
                                .any(|(name, ns)| name == v && q_ns.is_none_or(|n| ns == n))
                        })
                        .map(|((_, ns, name), vm)| {
                            let t = if vm["metadata"].get("deletionTimestamp").is_some() {
                                " (terminating)"
                            } else {
                                ""
                            };
                            format!("VirtualMachine {ns}/{name}{t}")
                        })
                        .collect();
                    expected.sort();
                    // A rule asks for its own dependency; the scan reads both fields.
                    let mut got: Vec<String> = deps
                        .iter()
                        .flat_map(|d| index.lookup(c, &index_target(d), v, q_ns))
                        .map(|r| r.describe())
                        .collect();
                    got.sort();
                    got.dedup();
                    assert_eq!(got, expected, "step {step}: {c} {v} {q_ns:?}");
                }
            }
        }
    }
}

/// The oracle: `(name, namespace)` of each VPC the VM refers to, read by hand.
/// `.spec.vpcRef.name` in `.spec.vpcRef.namespace` (the VM's own namespace when
/// absent or empty), and every `.spec.disks[*].vpcRef.name` in the VM's namespace.
fn scan_references(vm: &Value) -> Vec<(String, String)> {
    let own = vm["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut out = Vec::new();
    if let Some(name) = vm["spec"]["vpcRef"]["name"].as_str() {
        let ns = match vm["spec"]["vpcRef"]["namespace"].as_str() {
            Some(ns) if !ns.is_empty() => ns.to_string(),
            _ => own.clone(),
        };
        out.push((name.to_string(), ns));
    }
    for disk in vm["spec"]["disks"].as_array().into_iter().flatten() {
        if let Some(name) = disk["vpcRef"]["name"].as_str() {
            out.push((name.to_string(), own.clone()));
        }
    }
    out
}

fn id(ns: &str, name: &str) -> ObjectId {
    ObjectId {
        cluster: "lc1".into(),
        resource: "virtualmachines.compute.test.io".into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

#[test]
fn references_from_paths() {
    let d1 = dep(".spec.vpcRef.name", None);
    let d2 = dep(".spec.disks[*].vpcRef.name", Some(".spec.vpcRef.namespace"));
    let vm = json!({"metadata": {"name": "vm", "namespace": "default"},
        "spec": {"vpcRef": {"name": "a", "namespace": "net"}, "disks": [{"vpcRef": {"name": "b"}}]}});
    let refs = references(&vm, &[&d1, &d2]);
    assert_eq!(refs.len(), 2);
    assert_eq!(refs[0].namespace, "default");
    assert_eq!(
        refs[1],
        Reference {
            target: index_target(&d2),
            name: "b".into(),
            namespace: "net".into()
        }
    );
    assert_eq!(
        index_target(&d2),
        "vpcs.network.test.io#.spec.disks[*].vpcRef.name#.spec.vpcRef.namespace"
    );
}

#[test]
fn two_rules_on_the_same_types_through_different_fields_stay_apart() {
    let by_ref = dep(".spec.vpcRef.name", None);
    let by_backup = dep(".spec.backupVpc", None);
    let vm = json!({"metadata": {"name": "vm", "namespace": "default"},
        "spec": {"vpcRef": {"name": "a"}}});
    let idx = DependentsIndex::default();
    idx.apply(
        &id("default", "vm"),
        "VirtualMachine",
        false,
        &references(&vm, &[&by_ref, &by_backup]),
    );
    let found = |d: &CompiledDependency| {
        idx.lookup("lc1", &index_target(d), "a", Some("default"))
            .len()
    };
    assert_eq!(found(&by_ref), 1);
    assert_eq!(
        found(&by_backup),
        0,
        "the backup rule's field names nothing"
    );
}

#[test]
fn apply_lookup_update_delete() {
    let idx = DependentsIndex::default();
    let r = |name: &str| Reference {
        target: "vpcs.network.test.io".into(),
        name: name.into(),
        namespace: "default".into(),
    };
    idx.apply(
        &id("default", "vm1"),
        "VirtualMachine",
        false,
        &[r("my-vpc")],
    );
    idx.apply(
        &id("default", "vm2"),
        "VirtualMachine",
        true,
        &[r("my-vpc"), r("other")],
    );
    let found = idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", Some("default"));
    assert_eq!(
        found.iter().map(Referrer::describe).collect::<Vec<_>>(),
        vec![
            "VirtualMachine default/vm1",
            "VirtualMachine default/vm2 (terminating)"
        ]
    );
    assert!(
        idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", Some("prod"))
            .is_empty()
    );
    assert!(
        idx.lookup("lc2", "vpcs.network.test.io", "my-vpc", Some("default"))
            .is_empty()
    );
    assert_eq!(
        idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", None)
            .len(),
        2
    );
    // vm1 now points elsewhere.
    idx.apply(
        &id("default", "vm1"),
        "VirtualMachine",
        false,
        &[r("other")],
    );
    assert_eq!(
        idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", Some("default"))
            .len(),
        1
    );
    idx.delete(&id("default", "vm2"));
    assert!(
        idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", Some("default"))
            .is_empty()
    );
    assert_eq!(idx.len(), 1);
    idx.clear_resource("virtualmachines.compute.test.io");
    assert!(idx.is_empty());
}
