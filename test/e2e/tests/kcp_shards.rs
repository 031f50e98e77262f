//! Seed 003 on a kcp of two shards, holdfast under the identities and RBAC it ships
//! (never `system:masters`): the compute provider's DependencyRule protects VPCs of
//! the network provider (nested at `root:providers:network`, on the other shard than
//! the rule) in consumers on either shard, with both `--dependents` strategies; a
//! consumer that is the first to bind the compute export on its shard is protected
//! from its first object on, before and after the shard's URL appears in the slice.

use holdfast_e2e::{
    controller::ControllerProcess,
    kcp::vm_vpc_rule,
    kcp_sharded::{COMPUTE, NETWORK, Sharded, sharded},
    steps::eventually,
};

/// A server-side dry run of the VPC's DELETE.
const DRY_RUN_DELETE_VPC: [&str; 6] = [
    "delete",
    "vpc",
    "my-vpc",
    "-n",
    "default",
    "--dry-run=server",
];
const VPC: &str =
    "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {name: my-vpc, namespace: default}\n";
const VM: &str = "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {name: my-vm, namespace: default}\nspec: {vpcRef: {name: my-vpc}}\n";

async fn holdfast(t: &mut Sharded, mode: &str) -> ControllerProcess {
    t.start_holdfast("controller", mode)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Waits until `kubectl delete vpc my-vpc` as the consumer in `path` gives an
/// outcome `check` accepts; returns it.
async fn delete_vpc_until(
    t: &Sharded,
    c: &ControllerProcess,
    path: &str,
    check: impl Fn(&holdfast_e2e::KubectlOutput) -> bool,
) -> holdfast_e2e::KubectlOutput {
    let args = ["delete", "vpc", "my-vpc", "-n", "default", "--wait=false"];
    eventually(t.wait.as_secs(), async || {
        let out = t.kubectl("consumer", path, &args);
        if check(&out) {
            return Ok(out);
        }
        Err(context(t, c, format!("delete vpc in {path}: {out:?}")))
    })
    .await
}

/// `what`, then the webhook's and the controller's logs.
fn context(t: &Sharded, c: &ControllerProcess, what: String) -> String {
    format!(
        "{what}\nwebhook: {}\ncontroller: {}",
        t.env.webhook_log(),
        c.log()
    )
}

fn refused_for_vm(out: &holdfast_e2e::KubectlOutput) -> bool {
    out.code != 0
        && out.stderr.contains("Forbidden")
        && out.stderr.contains("VirtualMachine")
        && out.stderr.contains("my-vm")
}

/// The webhook's dependents lookups so far: (live, index).
async fn lookups(t: &Sharded) -> (f64, f64) {
    t.env.dependents_lookups().await
}

/// Waits until a refused dry-run DELETE of the VPC in `path` is answered from the
/// dependents index (no API call): the index counter moves and the live one not.
async fn answered_from_the_index(t: &Sharded, c: &ControllerProcess, path: &str) {
    let args = DRY_RUN_DELETE_VPC;
    eventually(t.wait.as_secs(), async || {
        let before = lookups(t).await;
        let out = t.kubectl("consumer", path, &args);
        assert!(refused_for_vm(&out), "{out:?}");
        let after = lookups(t).await;
        if after.1 > before.1 && after.0 == before.0 {
            return Ok(());
        }
        Err(context(
            t,
            c,
            format!("{path}: not answered from the index (lookups {before:?} -> {after:?})"),
        ))
    })
    .await
}

/// The seed 003 story in consumer `path`: refused while the VM references the VPC
/// (from the index once `indexed`), allowed once it is gone.
async fn story(t: &Sharded, c: &ControllerProcess, path: &str, indexed: bool) {
    t.apply("consumer", path, VPC);
    t.apply("consumer", path, VM);
    if indexed {
        answered_from_the_index(t, c, path).await;
    }
    let out = delete_vpc_until(t, c, path, refused_for_vm).await;
    assert!(
        out.stderr.contains("my-vpc"),
        "the refusal names the VPC: {out:?}"
    );
    let vpc = t.kubectl("consumer", path, &["get", "vpc", "my-vpc", "-n", "default"]);
    assert_eq!(vpc.code, 0, "the VPC survived the refused delete: {vpc:?}");
    let out = t.kubectl(
        "consumer",
        path,
        &["delete", "virtualmachine", "my-vm", "-n", "default"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = delete_vpc_until(t, c, path, |o| o.code == 0).await;
    assert!(out.stdout.contains("deleted"), "{out:?}");
}

async fn two_shards(mode: &str) {
    let mut t = sharded().await.expect("topology");
    // A consumer on the rule's shard before holdfast starts.
    let near = t.consumer("consumer-a", "root");
    let c = holdfast(&mut t, mode).await;
    t.apply("provider", COMPUTE, &vm_rule());
    let cond = t
        .until(
            "provider",
            COMPUTE,
            &[
                "get",
                "dependencyrule",
                "vm-dependencies",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            |o| o.stdout.trim() == "True",
        )
        .await;
    assert!(
        cond.is_ok(),
        "rule Ready: {cond:?}\ncontroller: {}",
        c.log()
    );
    // network.test.io is the only export of VPCs in its workspace: the webhook need
    // not read a consumer's bindings to tell which export's rules apply.
    let rule = t.kubectl(
        "provider",
        COMPUTE,
        &["get", "dependencyrule", "vm-dependencies", "-o", "json"],
    );
    let rule = rule.json().expect("rule");
    assert_eq!(
        rule["status"]["workspaces"][0]["sharedResources"],
        serde_json::json!([]),
        "{rule}"
    );
    // The controller installed the provider's webhook configuration on the network
    // provider's shard (through that shard's endpoint of holdfast.dev).
    let out = t.kubectl(
        "provider",
        NETWORK,
        &["get", "validatingwebhookconfiguration", "holdfast"],
    );
    assert_eq!(out.code, 0, "{out:?}\ncontroller: {}", c.log());
    assert_eq!(t.shard_of(NETWORK), "shard-1");
    // `kubectl holdfast check` in the rule's workspace: a DependencyRule's DELETEs
    // are routed by the configurations of the workspaces holding its dependencies
    // (Ready says they enforce it), not by its own workspace's configuration.
    let check = t.plugin("provider", COMPUTE, &["check", "-o", "json"]);
    assert_eq!(
        (check.code, holdfast_e2e::kcp::finding_kinds(&check.stdout)),
        (0, Vec::<String>::new()),
        "{check:?}"
    );
    story(&t, &c, &near, false).await;

    // A consumer on the other shard: the first binding of compute.test.io there, so
    // that shard's URL joins the compute slice only now.
    assert_eq!(t.endpoints(COMPUTE, "compute.test.io").len(), 1);
    let far = t.consumer("consumer-b", "shard-1");
    assert_eq!(t.shard_of(&far), "shard-1");
    story(&t, &c, &far, false).await;
    let urls = t.endpoints(COMPUTE, "compute.test.io");
    assert_eq!(urls.len(), 2, "one URL per shard with a binding: {urls:?}");
    let shards: Vec<String> = t.shard_urls().into_iter().map(|(_, url)| url).collect();
    for (url, shard) in urls.iter().zip(&shards) {
        assert!(url.starts_with(shard.as_str()), "{url} is not at {shard}");
    }
    // Once both endpoints are watched, the index answers for both consumers (with
    // `--dependents live` every check stays a live list).
    let indexed = mode == "watch";
    story(&t, &c, &near, indexed).await;
    story(&t, &c, &far, indexed).await;
    if !indexed {
        assert_eq!(lookups(&t).await.1, 0.0, "live mode never reads the index");
    }

    // A consumer that granted holdfast nothing, on a shard the slice covers, with a
    // VPC and no VM: with the watched index the endpoint of its shard is asked once
    // whether it serves the consumer, and the index answers (allowed, no live list);
    // every live list there is refused, so `--dependents live` refuses ("retry
    // later"), never allows unchecked.
    let bare = t.bare_consumer("consumer-c", "root");
    t.apply("consumer", &bare, VPC);
    let dry_run = DRY_RUN_DELETE_VPC;
    if indexed {
        let before = lookups(&t).await;
        let out = t.kubectl("consumer", &bare, &dry_run);
        assert_eq!(out.code, 0, "{}", context(&t, &c, format!("{out:?}")));
        let after = lookups(&t).await;
        assert_eq!(after.0, before.0, "no live list for a served consumer");
        assert!(
            after.1 > before.1,
            "answered from the index: {before:?} -> {after:?}"
        );
        // Then a VM there is seen through the same endpoint: refused from the index.
        t.apply("consumer", &bare, VM);
        answered_from_the_index(&t, &c, &bare).await;
    } else {
        let out = t.kubectl("consumer", &bare, &dry_run);
        assert!(
            out.code != 0 && out.stderr.contains("cannot verify dependents"),
            "{}",
            context(&t, &c, format!("{out:?}"))
        );
    }
}

fn vm_rule() -> String {
    vm_vpc_rule("vm-dependencies")
}

#[tokio::test(flavor = "multi_thread")]
async fn seed_003_across_two_shards_with_the_watched_index() {
    two_shards("watch").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn seed_003_across_two_shards_with_live_lookups() {
    two_shards("live").await;
}
