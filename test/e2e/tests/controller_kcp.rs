//! holdfast-controller on kcp, end to end, in the seed 003 topology on two shards
//! (`holdfast_e2e::kcp::topology`): the controller runs as the user
//! `holdfast-controller` with only the RBAC holdfast ships; providers act as the
//! user `provider`, the platform team (creating and deleting workspaces) as
//! `platform`.

use std::time::Duration;

use holdfast_e2e::controller::elect;
use holdfast_e2e::kcp::{gateway_vm_rule, vm_vpc_rule};
use holdfast_e2e::{
    controller::{
        ControllerProcess, condition_at, rules_of, start_controller, wait_configuration_at,
        webhook_names,
    },
    kcp::{COMPUTE, HOLDFAST, Kcp, NETWORK, dependency_rule, workspace},
    kcp_sharded::{own_webhooks, workspace_webhooks},
};
use serde_json::{Value, json};

async fn topology() -> Kcp {
    holdfast_e2e::kcp::topology().await.expect("kcp topology")
}

/// The topology and the controller for kcp (with `extra` arguments) on it.
async fn with_controller(extra: &[&str]) -> (Kcp, ControllerProcess) {
    let kcp = topology().await;
    let c = controller(&kcp, extra).await;
    (kcp, c)
}

async fn controller(kcp: &Kcp, extra: &[&str]) -> ControllerProcess {
    let mut c = spawn_controller(kcp, "controller", extra);
    c.wait_ready(kcp.wait.as_secs())
        .await
        .expect("controller ready");
    c
}

/// The controller for kcp (with `extra` arguments), not waited for.
fn spawn_controller(kcp: &Kcp, name: &str, extra: &[&str]) -> ControllerProcess {
    let port = holdfast_e2e::free_port().expect("port");
    let mut args = kcp.controller_args();
    args.extend_from_slice(extra);
    start_controller(&kcp.env, name, port, &args).expect("controller")
}

/// The holder of the controller's Lease in the holdfast workspace; fails when
/// it names nobody.
fn lease_holder(kcp: &Kcp) -> String {
    let lease = kcp.get_json(
        "platform",
        HOLDFAST,
        &["lease", "holdfast-controller", "-n", "default"],
    );
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default();
    assert!(
        !holder.is_empty(),
        "the Lease in the holdfast workspace names nobody: {lease}"
    );
    holder.to_string()
}

fn resources(cfg: Option<&Value>) -> Vec<String> {
    cfg.map(|c| {
        // One webhook per APIExport: `<export>.policies.holdfast.dev`.
        webhook_names(c)
            .iter()
            .filter(|n| n.ends_with(".policies.holdfast.dev"))
            .flat_map(|n| rules_of(c, n))
            .map(|(g, r, _)| format!("{}.{}", r.join(","), g.join(",")))
            .collect()
    })
    .unwrap_or_default()
}

/// Waits until workspace `path` (binding holdfast.dev) holds a configuration, and
/// asserts that it holds the workspace's own webhooks only (no export routed).
async fn assert_own_configuration(kcp: &Kcp, c: &ControllerProcess, path: &str) {
    let lc = kcp.logical_cluster(path);
    let (cfg, _) = wait_configuration_at(
        &kcp.env,
        Some(&kcp.ws(path)),
        Duration::from_secs(15),
        |c| c.is_some(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log()));
    assert_eq!(
        workspace_webhooks(&cfg.expect("present")),
        own_webhooks(&lc),
        "{path}"
    );
}

/// Condition `type_` of DependencyRule `name` in workspace `path` now; fails when
/// kubectl does or the condition is absent.
fn rule_condition(kcp: &Kcp, path: &str, name: &str, type_: &str) -> Value {
    condition_at(&kcp.env, Some(&kcp.ws(path)), "dependencyrule", name, type_)
        .expect("kubectl")
        .unwrap_or_else(|| panic!("{path}/{name} has no {type_} condition"))
}

/// Waits (at most 60 s) until the configuration in workspace `path` routes
/// exactly `expected` to the policies webhook; fails with the controller's log.
async fn wait_routed(kcp: &Kcp, c: &ControllerProcess, path: &str, expected: &[&str]) {
    wait_configuration_at(
        &kcp.env,
        Some(&kcp.ws(path)),
        Duration::from_secs(60),
        |cfg| resources(cfg) == expected,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_003_topology_merged_per_provider_workspace() {
    let (kcp, c) = with_controller(&[]).await;
    let network = kcp.ws(NETWORK);

    kcp.apply("provider", COMPUTE, &vm_vpc_rule("vm-vpc"));
    kcp.apply(
        "provider",
        COMPUTE,
        &dependency_rule(
            "vm-subnet",
            ("compute.test.io", "VirtualMachine", "virtualmachines"),
            &[(
                NETWORK,
                "network.test.io",
                "network.test.io",
                "subnets",
                ".spec.subnetRef.name",
            )],
        ),
    );

    // Two rules protecting resources of the same provider: one configuration, two entries.
    let (cfg, _) = wait_configuration_at(&kcp.env, Some(&network), Duration::from_secs(15), |c| {
        resources(c).len() == 2
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log()));
    let cfg = cfg.expect("present");
    assert_eq!(
        resources(Some(&cfg)),
        vec!["subnets.network.test.io", "vpcs.network.test.io"]
    );
    assert_eq!(
        cfg["webhooks"][0]["clientConfig"]["url"]
            .as_str()
            .map(|u| u.starts_with("https://127.0.0.1:")),
        Some(true)
    );
    // Self-healing on kcp too: deleted by hand in the provider workspace, recreated.
    let out = kcp.kubectl(
        "provider",
        NETWORK,
        &["delete", "validatingwebhookconfiguration", "holdfast"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let (healed, took) = wait_configuration_at(&kcp.env, Some(&network), kcp.wait, |c| {
        resources(c).len() == 2
    })
    .await
    .expect("recreated");
    eprintln!("recreated after {took:?}");
    let uid = healed.expect("present")["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    // The compute workspace binds holdfast.dev: its own types are protected
    // (labels, containment), no export of it is routed.
    assert_own_configuration(&kcp, &c, COMPUTE).await;

    // Status: resolved workspace recorded, Ready.
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-vpc", "Ready", "True"])
        .await;
    let rule = kcp.get_json("provider", COMPUTE, &["dependencyrule", "vm-vpc"]);
    let lc = kcp.logical_cluster(NETWORK);
    assert_eq!(rule["status"]["workspaces"][0]["path"], NETWORK);
    assert_eq!(
        rule["status"]["workspaces"][0]["logicalCluster"],
        lc.as_str()
    );
    assert_eq!(rule["status"]["workspaces"][0]["webhookInstalled"], true);

    // fieldRef edit: propagates in place (status follows the generation), no delete/recreate.
    kcp.apply(
        "provider",
        COMPUTE,
        &dependency_rule(
            "vm-vpc",
            ("compute.test.io", "VirtualMachine", "virtualmachines"),
            &[(
                NETWORK,
                "network.test.io",
                "network.test.io",
                "vpcs",
                ".spec.network.vpc",
            )],
        ),
    );
    kcp.until(
        "provider",
        COMPUTE,
        &[
            "get",
            "dependencyrule",
            "vm-vpc",
            "-o",
            "jsonpath={.status.observedGeneration}",
        ],
        |o| o.stdout == "2",
    )
    .await
    .expect("edit observed");
    let (cfg, _) = wait_configuration_at(&kcp.env, Some(&network), Duration::from_secs(5), |c| {
        resources(c).len() == 2
    })
    .await
    .expect("still two entries");
    assert_eq!(
        cfg.expect("present")["metadata"]["uid"],
        uid.as_str(),
        "configuration kept, not recreated"
    );

    // Delete one rule: only its entry goes.
    let out = kcp.kubectl(
        "provider",
        COMPUTE,
        &["delete", "dependencyrule", "vm-subnet"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let (cfg, _) = wait_configuration_at(&kcp.env, Some(&network), Duration::from_secs(10), |c| {
        resources(c).len() == 1
    })
    .await
    .expect("one entry left");
    assert_eq!(resources(cfg.as_ref()), vec!["vpcs.network.test.io"]);

    // Delete the last: the export's webhook goes, the workspace's own stay (it
    // binds holdfast.dev).
    let out = kcp.kubectl("provider", COMPUTE, &["delete", "dependencyrule", "vm-vpc"]);
    assert_eq!(out.code, 0, "{out:?}");
    let (cfg, _) = wait_configuration_at(&kcp.env, Some(&network), Duration::from_secs(10), |c| {
        c.is_some_and(|c| resources(Some(c)).is_empty())
    })
    .await
    .expect("export webhook removed");
    assert_eq!(
        workspace_webhooks(&cfg.expect("present")),
        own_webhooks(&lc)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cycle_across_workspaces_is_reported_on_both_rules() {
    let (kcp, _c) = with_controller(&[]).await;
    kcp.apply("provider", COMPUTE, &vm_vpc_rule("vm-needs-vpc"));
    kcp.apply(
        "provider",
        NETWORK,
        &gateway_vm_rule("vpc-needs-vm", ("network.test.io", "VPC", "vpcs")),
    );
    let a = kcp
        .wait_condition(
            COMPUTE,
            ["dependencyrule", "vm-needs-vpc", "CycleDetected", "True"],
        )
        .await;
    let b = kcp
        .wait_condition(
            NETWORK,
            ["dependencyrule", "vpc-needs-vm", "CycleDetected", "True"],
        )
        .await;
    let msg = a["message"].as_str().expect("message");
    assert!(msg.contains("virtualmachines.compute.test.io → vpcs.network.test.io → virtualmachines.compute.test.io"), "{msg}");
    assert!(
        msg.contains("vm-needs-vpc") && msg.contains("vpc-needs-vm"),
        "{msg}"
    );
    assert_eq!(a["message"], b["message"]);
    // Each provider workspace got its configuration.
    wait_configuration_at(
        &kcp.env,
        Some(&kcp.ws(COMPUTE)),
        Duration::from_secs(10),
        |c| resources(c) == vec!["virtualmachines.compute.test.io"],
    )
    .await
    .expect("compute configuration");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unresolvable_path_is_invalid_and_recovers_when_the_workspace_appears() {
    let (kcp, c) = with_controller(&[]).await;
    let deep = "root:providers:storage:block";
    kcp.apply(
        "provider",
        COMPUTE,
        &dependency_rule(
            "vm-volume",
            ("compute.test.io", "VirtualMachine", "virtualmachines"),
            &[(
                deep,
                "storage.test.io",
                "storage.test.io",
                "volumes",
                ".spec.volume",
            )],
        ),
    );
    let inv = kcp
        .wait_condition(COMPUTE, ["dependencyrule", "vm-volume", "Invalid", "True"])
        .await;
    assert_eq!(inv["reason"], "UnresolvedWorkspace");
    let message = inv["message"].as_str().unwrap_or_default();
    assert!(message.contains("storage"), "{inv}");
    // A Warning Event in the provider's workspace says so too, once.
    let events = ["get", "events.events.k8s.io", "-n", "default", "-o", "json"];
    let warnings = |o: &holdfast_e2e::KubectlOutput| -> usize {
        serde_json::from_str::<Value>(&o.stdout)
            .ok()
            .and_then(|list| {
                list["items"].as_array().map(|items| {
                    items
                        .iter()
                        .filter(|e| {
                            e["type"] == "Warning"
                                && e["reason"] == "UnresolvedWorkspace"
                                && e["regarding"]["kind"] == "DependencyRule"
                                && e["regarding"]["name"] == "vm-volume"
                        })
                        .map(|e| e["series"]["count"].as_u64().unwrap_or(1) as usize)
                        .sum()
                })
            })
            .unwrap_or(0)
    };
    let out = kcp
        .until("provider", COMPUTE, &events, |o| warnings(o) > 0)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", c.log()));
    assert_eq!(warnings(&out), 1, "{}", out.stdout);
    // Not again while the reason stays (the unresolved rule is retried every 2 s).
    tokio::time::sleep(std::time::Duration::from_millis(4500)).await;
    let out = kcp.kubectl("provider", COMPUTE, &events);
    assert_eq!(warnings(&out), 1, "{}", out.stdout);

    // The workspaces appear (three levels below root): the rule recovers on its own.
    kcp.apply("platform", "root:providers", &workspace("storage"));
    kcp.wait_workspace_ready("root:providers", "storage");
    let volumes = [("volumes", "Volume")];
    provider(&kcp, deep, "shard-1", "storage.test.io", &volumes);
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-volume", "Invalid", "False"])
        .await;
    wait_routed(&kcp, &c, deep, &["volumes.storage.test.io"]).await;
    // Ready once kcp enforces the new configuration (it comes back from the cache
    // server, kcp-facts 29).
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-volume", "Ready", "True"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cleanup_on_shutdown_removes_every_provider_configuration() {
    let (kcp, mut c) = with_controller(&["--cleanup-on-shutdown"]).await;
    kcp.apply("provider", COMPUTE, &vm_vpc_rule("vm-vpc"));
    kcp.apply(
        "provider",
        NETWORK,
        &gateway_vm_rule("subnet-vm", ("network.test.io", "Subnet", "subnets")),
    );
    for ws in [NETWORK, COMPUTE] {
        wait_configuration_at(&kcp.env, Some(&kcp.ws(ws)), Duration::from_secs(15), |c| {
            resources(c).len() == 1
        })
        .await
        .unwrap_or_else(|e| panic!("{ws}: {e}\n{}", c.log()));
    }
    let status = c.terminate(15).await.expect("exits");
    assert!(status.success(), "{status}: {}", c.log());
    for ws in [NETWORK, COMPUTE] {
        assert!(
            !kcp.exists(
                "provider",
                ws,
                &["validatingwebhookconfiguration", "holdfast"]
            ),
            "{ws}: configuration left behind"
        );
    }
    assert!(
        c.log().contains("cleanup on shutdown: deleted"),
        "{}",
        c.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_election_in_the_holdfast_workspace() {
    let kcp = topology().await;
    let port = holdfast_e2e::free_port().expect("port");
    let mut args = kcp.controller_args();
    args.extend(["--leader-elect", "--leader-elect-namespace", "default"]);
    let mut a = start_controller(&kcp.env, "controller-a", port, &args).expect("a");
    let mut b = start_controller(&kcp.env, "controller-b", port, &args).expect("b");
    let (leader, follower) = elect(&mut a, &mut b).await;
    let holder = lease_holder(&kcp);
    let leader_log = leader.log();
    assert!(
        leader_log.contains(&holder),
        "the Lease names the leader: {holder}\n{leader_log}"
    );
    kcp.apply("provider", COMPUTE, &vm_vpc_rule("vm-vpc"));
    let network = kcp.ws(NETWORK);
    wait_configuration_at(&kcp.env, Some(&network), Duration::from_secs(15), |c| {
        resources(c).len() == 1
    })
    .await
    .expect("installed");
    leader.kill();
    let killed = std::time::Instant::now();
    let out = kcp.kubectl(
        "provider",
        NETWORK,
        &["delete", "validatingwebhookconfiguration", "holdfast"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    wait_configuration_at(&kcp.env, Some(&network), Duration::from_secs(60), |c| {
        resources(c).len() == 1
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", follower.log()));
    eprintln!("follower took over {:?} after the kill", killed.elapsed());
    // Ready once its first pass as the leader is done (the configuration it put
    // back is part of that pass).
    follower
        .wait_ready(kcp.wait.as_secs())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let new_holder = lease_holder(&kcp);
    assert!(
        new_holder != holder && follower.log().contains(&new_holder),
        "the Lease names the follower now: {new_holder}"
    );
}

/// Waits (at most 30 s) until rule `name` in `path` is Invalid with `reason`;
/// returns the condition, failing with the last one seen.
async fn wait_invalid(kcp: &Kcp, path: &str, name: &str, reason: &str) -> Value {
    let at = kcp.ws(path);
    let deadline = std::time::Instant::now() + kcp.wait;
    loop {
        let c =
            condition_at(&kcp.env, Some(&at), "dependencyrule", name, "Invalid").expect("kubectl");
        if let Some(c) = &c
            && c["status"] == "True"
            && c["reason"] == reason
        {
            return c.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path}/{name}: never Invalid with reason {reason}; last: {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `status.identityHash` of APIExport `name` in `path`.
fn identity_of(kcp: &Kcp, path: &str, name: &str) -> String {
    let export = kcp.get_json("provider", path, &["apiexports.apis.kcp.io", name]);
    let hash = export["status"]["identityHash"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(hash.len(), 64, "{export}");
    hash.to_string()
}

/// A provider workspace `path` on `shard` (its parent exists) with schemas for
/// `resources` of `group`, exported as APIExport `group`, bound to holdfast: the
/// provider guide of docs/kcp.md followed.
fn provider(kcp: &Kcp, path: &str, shard: &str, group: &str, resources: &[(&str, &str)]) {
    kcp.provider_workspace(path, shard);
    kcp.provider_export(path, group, resources);
}

/// A VirtualMachine rule depending on `resource` of `group` through `path`/`export`.
fn vm_rule(name: &str, path: &str, export: &str, group: &str, resource: &str) -> String {
    dependency_rule(
        name,
        ("compute.test.io", "VirtualMachine", "virtualmachines"),
        &[(path, export, group, resource, ".spec.ref")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ready_only_when_the_export_exists_and_exports_the_resource() {
    let (kcp, c) = with_controller(&[]).await;
    let storage = "root:storage";
    kcp.provider_workspace(storage, "shard-1");
    let storage_lc = kcp.logical_cluster(storage);

    // The export does not exist: not Ready, naming it and its workspace.
    kcp.apply(
        "provider",
        COMPUTE,
        &vm_rule(
            "vm-disk",
            storage,
            "storage.test.io",
            "storage.test.io",
            "disks",
        ),
    );
    let inv = wait_invalid(&kcp, COMPUTE, "vm-disk", "APIExportNotFound").await;
    assert_eq!(
        inv["message"],
        format!(
            "spec.dependencies[0].apiExportRef: APIExport storage.test.io not found in workspace {storage} (logical cluster {storage_lc})"
        ),
        "{}",
        c.log()
    );
    // Written with the Invalid condition, in the same status.
    let ready = rule_condition(&kcp, COMPUTE, "vm-disk", "Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("Invalid")),
        "{ready}"
    );
    assert!(
        !kcp.exists(
            "provider",
            storage,
            &["validatingwebhookconfiguration", "holdfast"]
        ),
        "nothing installed for an export that does not exist"
    );

    // Created later (without the resource first): the rule names what is missing.
    kcp.provider_export(storage, "storage.test.io", &[("volumes", "Volume")]);
    let inv = wait_invalid(&kcp, COMPUTE, "vm-disk", "ResourceNotExported").await;
    assert_eq!(
        inv["message"],
        format!(
            "spec.dependencies[0].apiExportRef: APIExport storage.test.io in workspace {storage} does not export disks.storage.test.io (it exports: volumes.storage.test.io)"
        )
    );

    // The export gains the resource: Ready, with the export's identity recorded.
    kcp.provider_export(
        storage,
        "storage.test.io",
        &[("volumes", "Volume"), ("disks", "Disk")],
    );
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-disk", "Ready", "True"])
        .await;
    wait_routed(&kcp, &c, storage, &["disks.storage.test.io"]).await;
    let rule = kcp.get_json("provider", COMPUTE, &["dependencyrule", "vm-disk"]);
    let ws = &rule["status"]["workspaces"][0];
    assert_eq!(ws["logicalCluster"], storage_lc.as_str(), "{rule}");
    assert_eq!(
        ws["identityHash"],
        identity_of(&kcp, storage, "storage.test.io").as_str(),
        "{rule}"
    );

    // The dependent's export (in the rule's own workspace) must export it too.
    kcp.apply(
        "provider",
        COMPUTE,
        &dependency_rule(
            "gadget-vpc",
            ("gadgets.test.io", "Gadget", "gadgets"),
            &[(
                NETWORK,
                "network.test.io",
                "network.test.io",
                "vpcs",
                ".spec.vpc",
            )],
        ),
    );
    let compute_lc = kcp.logical_cluster(COMPUTE);
    let inv = wait_invalid(&kcp, COMPUTE, "gadget-vpc", "APIExportNotFound").await;
    assert_eq!(
        inv["message"],
        format!(
            "spec.dependent.apiExportName: APIExport gadgets.test.io not found in workspace {compute_lc}"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exports_of_one_group_resource_are_told_apart_by_identity() {
    const OTHER: &str = "root:other-network";
    let (kcp, c) = with_controller(&[]).await;
    // A second export of vpcs.network.test.io, in another workspace.
    provider(&kcp, OTHER, "root", "network.test.io", &[("vpcs", "VPC")]);
    let ours = identity_of(&kcp, NETWORK, "network.test.io");
    let theirs = identity_of(&kcp, OTHER, "network.test.io");
    assert_ne!(ours, theirs);

    kcp.apply("provider", COMPUTE, &vm_vpc_rule("vm-vpc"));
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-vpc", "Ready", "True"])
        .await;
    let rule = kcp.get_json("provider", COMPUTE, &["dependencyrule", "vm-vpc"]);
    assert_eq!(
        rule["status"]["workspaces"][0]["identityHash"],
        ours.as_str()
    );
    wait_routed(&kcp, &c, NETWORK, &["vpcs.network.test.io"]).await;
    // Only the named export's workspace is routed: the other one (binding
    // holdfast.dev) holds its own webhooks only.
    assert_own_configuration(&kcp, &c, OTHER).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_path_may_start_at_any_logical_cluster() {
    let (kcp, c) = with_controller(&[]).await;
    let providers = kcp.logical_cluster("root:providers");
    let network = kcp.logical_cluster(NETWORK);
    let path = format!("{providers}:network");
    kcp.apply(
        "provider",
        COMPUTE,
        &vm_rule(
            "vm-vpc",
            &path,
            "network.test.io",
            "network.test.io",
            "vpcs",
        ),
    );
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-vpc", "Ready", "True"])
        .await;
    let rule = kcp.get_json("provider", COMPUTE, &["dependencyrule", "vm-vpc"]);
    assert_eq!(rule["status"]["workspaces"][0]["path"], path.as_str());
    assert_eq!(
        rule["status"]["workspaces"][0]["logicalCluster"],
        network.as_str()
    );
    wait_routed(&kcp, &c, NETWORK, &["vpcs.network.test.io"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workspace_recreated_under_the_same_path_is_followed() {
    // The webhook too: kcp deletes the workspace's contents through admission, and
    // the configuration the controller keeps there sends the namespace's DELETE to
    // the webhook (without one answering, kcp retries until the configuration is
    // gone, which the controller puts back: seen on the real kcp).
    let mut kcp = topology().await;
    let c = kcp
        .start_holdfast("controller", "watch")
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let edge = "root:edge";
    let gateways = [("gateways", "Gateway")];
    provider(&kcp, edge, "shard-1", "edge.test.io", &gateways);
    let first = kcp.logical_cluster(edge);
    kcp.apply(
        "provider",
        COMPUTE,
        &vm_rule("vm-gw", edge, "edge.test.io", "edge.test.io", "gateways"),
    );
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-gw", "Ready", "True"])
        .await;
    // root:edge binds holdfast.dev with the provider grants only: the webhook may
    // not list what its namespaces hold, so a namespace DELETE there is refused
    // (namespace containment never guesses "empty").
    kcp.apply(
        "provider",
        edge,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: leftover}\n",
    );
    let out = kcp.kubectl(
        "provider",
        edge,
        &["delete", "namespace", "leftover", "--dry-run=server"],
    );
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("holdfast"), "{out:?}");

    // Deleted and created again: a new logical cluster under the same path. kcp
    // deletes a workspace's contents through admission (kcp-facts 33): the
    // namespace DELETEs reach the webhook, which cannot read them but sees kcp
    // deleting the logical cluster and lets them through (each object in them is
    // judged on its own DELETE). Refused, the deletion stayed at "Some resources
    // are remaining: namespaces" for good (kcp-facts 36).
    let out = kcp.kubectl(
        "platform",
        "root",
        &["delete", "workspace", "edge", "--wait=false"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    kcp.until(
        "platform",
        "root",
        &["get", "workspace", "edge", "-o", "json"],
        holdfast_e2e::KubectlOutput::is_not_found,
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "workspace edge not deleted: {e:#}\nwebhook: {}",
            kcp.env.webhook_log()
        )
    });
    // On the simulator the namespaces go before the configuration, so the
    // webhook is asked (on the real kcp that order is a Go map's).
    if !holdfast_e2e::kcp_sharded::on_real_kcp() {
        let log = kcp.env.webhook_log();
        assert!(
            log.contains("kcp is deleting this logical cluster")
                && log.contains("what=namespace leftover"),
            "{log}"
        );
    }
    provider(&kcp, edge, "shard-1", "edge.test.io", &gateways);
    let second = kcp.logical_cluster(edge);
    assert_ne!(first, second);

    // No Workspace watch: the failed reads and writes there, the retry and the
    // resync make the rule follow.
    wait_routed(&kcp, &c, edge, &["gateways.edge.test.io"]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rule = kcp.get_json("provider", COMPUTE, &["dependencyrule", "vm-gw"]);
        let ws = &rule["status"]["workspaces"][0];
        if ws["logicalCluster"] == second.as_str() && ws["webhookInstalled"] == true {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rule never followed to {second}: {rule}\n{}",
            c.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-gw", "Ready", "True"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn virtual_workspace_urls_take_the_virtual_workspace_kubeconfig() {
    let kcp = topology().await;
    let (front_proxy, token) = kcp.user_kubeconfig("holdfast-controller");
    // Its server is never used (the endpoint slice names the URLs).
    let usable = front_proxy.replace(&kcp.url, "https://127.0.0.1:1");
    let wrong = front_proxy.replace(&token, "not-a-token");
    assert_ne!(usable, front_proxy);
    assert_ne!(wrong, front_proxy);
    let file = |name: &str, text: &str| {
        let path = kcp.env.dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.to_string_lossy().into_owned()
    };
    let (usable, wrong) = (
        file("vw.kubeconfig", &usable),
        file("vw-wrong.kubeconfig", &wrong),
    );

    let mut c = controller(&kcp, &["--virtual-workspace-kubeconfig", &usable]).await;
    kcp.apply("provider", COMPUTE, &vm_vpc_rule("vm-vpc"));
    kcp.wait_condition(COMPUTE, ["dependencyrule", "vm-vpc", "Ready", "True"])
        .await;
    let status = c.terminate(15).await.expect("exits");
    assert!(status.success(), "{status}: {}", c.log());

    // A token the server does not know: the front-proxy reads still work (the slice
    // is found), the virtual workspace answers 401.
    let wrong_vw = ["--virtual-workspace-kubeconfig", wrong.as_str()];
    let c = spawn_controller(&kcp, "controller-wrong-vw", &wrong_vw);
    let deadline = std::time::Instant::now() + kcp.wait;
    loop {
        let log = c.log();
        if log.contains("watching an endpoint of the APIExportEndpointSlice")
            && log.contains("endpoint watch failed")
            && log.contains("401")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no 401 from the virtual workspace: {log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!c.is_ready().await, "ready without the virtual workspace");
}
