use super::*;
use crate::cycles::RuleEdges;

fn key(name: &str) -> StoreKey {
    Arc::new(("c".to_string(), name.to_string()))
}

/// A rule of `c` whose dependents of type `from` need objects of type `to`.
fn eval(name: &str, from: &str, to: &str) -> Arc<RuleEval> {
    Arc::new(RuleEval {
        cluster: "c".into(),
        key: format!("c/{name}"),
        invalid: None,
        workspaces: Vec::new(),
        targets: Default::default(),
        edges: Some(RuleEdges {
            rule: format!("c/{name}"),
            dependent: GroupResource::new("p.test", from),
            dependencies: vec![GroupResource::new("p.test", to)],
        }),
    })
}

fn added(name: &str, from: &str, to: &str) -> RuleDelta {
    RuleDelta {
        key: key(name),
        old: None,
        new: Some(eval(name, from, to)),
    }
}

fn clusters(lcs: &[&str]) -> BTreeSet<String> {
    lcs.iter().map(|lc| lc.to_string()).collect()
}

#[test]
fn deferred_statuses_are_those_of_the_deferred_changes_and_add_up() {
    let mut fleet = Fleet::default();
    fleet.defer(vec![added("a", "vms", "vpcs")], Some(&clusters(&["lc1"])));
    fleet.defer(vec![added("b", "disks", "vms")], Some(&clusters(&["lc2"])));
    assert!(
        !fleet.statuses_full,
        "an update leaves only what it changed"
    );
    assert_eq!(fleet.deferred.rules, [key("a"), key("b")].into());
    assert_eq!(fleet.deferred.clusters, clusters(&["lc1", "lc2"]));
    // The status index follows the deferred changes (the next pass's delta
    // holds only its own).
    let closing = eval("x", "vpcs", "disks");
    assert!(fleet.graph.add(closing.edges.as_ref().expect("edges")));
}

#[test]
fn a_deferred_full_pass_leaves_every_status() {
    let mut fleet = Fleet::default();
    fleet.defer(vec![added("a", "vms", "vpcs")], None);
    assert!(fleet.statuses_full, "after a full evaluation");

    // Once every status is left, an update adds nothing to what is deferred.
    fleet.defer(vec![added("c", "disks", "vms")], Some(&clusters(&["lc3"])));
    assert!(fleet.statuses_full);
    assert!(!fleet.deferred.clusters.contains("lc3"));
}
