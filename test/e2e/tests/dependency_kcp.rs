//! The seed 003 scenario on kcp, end to end: the compute provider's DependencyRule
//! (VirtualMachine → VPC of a network provider nested at root:providers:network)
//! protects VPCs in a consumer workspace; the real controller installs the webhook
//! through the virtual workspace, the real webhook reads rules through the holdfast
//! APIExport's virtual workspaces and dependents through every endpoint of the
//! compute export's APIExportEndpointSlice, or live through the front-proxy for a
//! consumer no synced endpoint covers. On two shards, holdfast under its
//! identities and the RBAC it ships (`holdfast_e2e::kcp::topology`); the provider
//! and the consumer act as their own users.

use holdfast_e2e::{
    KubectlOutput,
    kcp::{COMPUTE, CONSUMER, Kcp, NETWORK, dependency_rule, topology},
    steps::words,
};

fn vm_rule(path: &str) -> String {
    dependency_rule(
        "vm-dependencies",
        ("compute.test.io", "VirtualMachine", "virtualmachines"),
        &[(NETWORK, "network.test.io", "network.test.io", "vpcs", path)],
    )
}

fn refused(out: &KubectlOutput, text: &str) -> bool {
    out.refused_with(text)
}

/// Runs kubectl as the consumer until `check` accepts its output; fails with the
/// last output and the webhook's log.
async fn until(kcp: &Kcp, args: &[&str], check: impl Fn(&KubectlOutput) -> bool) -> KubectlOutput {
    kcp.until("consumer", CONSUMER, args, check)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", kcp.env.webhook_log()))
}

/// Repeats `kubectl delete vpc VPC --dry-run=server` as the consumer, asserting
/// `outcome` on every answer, until the webhook's dependents lookups (live, index)
/// before and after the answer satisfy `counted`.
async fn dry_run_until(
    kcp: &Kcp,
    vpc: &str,
    outcome: impl Fn(&KubectlOutput) -> bool,
    counted: impl Fn((f64, f64), (f64, f64)) -> bool,
) {
    let deadline = std::time::Instant::now() + kcp.wait;
    loop {
        let before = kcp.env.dependents_lookups().await;
        let args = ["delete", "vpc", vpc, "--dry-run=server"];
        let out = kcp.kubectl("consumer", CONSUMER, &args);
        assert!(outcome(&out), "{out:?}");
        let after = kcp.env.dependents_lookups().await;
        if counted(before, after) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "delete vpc {vpc}: lookups never counted as expected ({before:?} -> {after:?})\nwebhook: {}",
            kcp.env.webhook_log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn seed_story(mode: &str) {
    let mut kcp = topology().await.expect("topology");
    // The compute export starts without an APIExportEndpointSlice (kcp makes one
    // unless told not to): its provider publishes one later in the story.
    for args in [
        "annotate apiexport compute.test.io apiexports.apis.kcp.io/skip-endpointslice=true",
        "delete apiexportendpointslice compute.test.io",
    ] {
        let out = kcp.kubectl("provider", COMPUTE, &words(args));
        assert_eq!(out.code, 0, "{args}: {out:?}");
    }
    let _c = kcp
        .start_holdfast("controller", mode)
        .await
        .expect("holdfast");
    kcp.apply("provider", COMPUTE, &vm_rule(".spec.vpcRef.name"));
    kcp.env.wait_webhook_ready().await.expect("webhook ready");

    kcp.apply(
        "consumer",
        CONSUMER,
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {name: my-vpc, namespace: default}\n",
    );
    kcp.apply("consumer", CONSUMER, "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {name: my-vm, namespace: default}\nspec: {vpcRef: {name: my-vpc}}\n");
    let out = until(
        &kcp,
        &["delete", "vpc", "my-vpc", "--dry-run=server"],
        |o| o.code != 0,
    )
    .await;
    assert!(
        refused(
            &out,
            "holdfast: VPC default/my-vpc is still referenced by VirtualMachine default/my-vm (policy: DependencyRule/vm-dependencies"
        ),
        "{out:?}"
    );
    // The compute export has no APIExportEndpointSlice yet: no endpoint covers the
    // consumer, so every check was live, in both modes.
    let (live, index) = kcp.env.dependents_lookups().await;
    assert!(
        live >= 1.0 && index == 0.0,
        "lookups live {live}, index {index}"
    );
    // The compute provider publishes its export's endpoints: holdfast watches VMs
    // through every one of them rather than the front-proxy wildcard.
    kcp.apply(
        "provider",
        COMPUTE,
        "apiVersion: apis.kcp.io/v1alpha1\nkind: APIExportEndpointSlice\nmetadata: {name: compute.test.io}\nspec: {export: {path: \"root:compute\", name: compute.test.io}}\n",
    );
    if mode == "watch" {
        // Once an endpoint's synced watch covers the consumer, its checks come from
        // the index (no API call), still refused.
        let text = "still referenced by VirtualMachine default/my-vm";
        dry_run_until(
            &kcp,
            "my-vpc",
            |o| refused(o, text),
            |before, after| after.1 > before.1,
        )
        .await;
    }
    // Two VMs: both named.
    kcp.apply("consumer", CONSUMER, "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {name: vm-2, namespace: default}\nspec: {vpcRef: {name: my-vpc}}\n");
    until(
        &kcp,
        &["delete", "vpc", "my-vpc", "--dry-run=server"],
        |o| {
            refused(
                o,
                "VirtualMachine default/my-vm, VirtualMachine default/vm-2",
            )
        },
    )
    .await;
    // A list field path, edited in place on the live rule.
    kcp.apply("consumer", CONSUMER, "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {name: disk-vpc, namespace: default}\n");
    kcp.apply("consumer", CONSUMER, "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {name: vm-disks, namespace: default}\nspec: {disks: [{vpcRef: {name: disk-vpc}}]}\n");
    kcp.apply("provider", COMPUTE, &vm_rule(".spec.disks[*].vpcRef.name"));
    until(
        &kcp,
        &["delete", "vpc", "disk-vpc", "--dry-run=server"],
        |o| refused(o, "still referenced by VirtualMachine default/vm-disks"),
    )
    .await;
    kcp.apply("provider", COMPUTE, &vm_rule(".spec.vpcRef.name"));
    // Break-glass with the seed's own annotation.
    let out = kcp.kubectl(
        "consumer",
        CONSUMER,
        &words("annotate vpc disk-vpc dependencies.opendefense.cloud/skip-protection=true"),
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = kcp.kubectl("consumer", CONSUMER, &["delete", "vpc", "disk-vpc"]);
    assert_eq!(out.code, 0, "break-glass: {out:?}");
    // The webhook restarted with the API server out of its reach: "not ready, retry
    // later", never an allow; restarted normally, it decides correctly again.
    let port = kcp.env.webhook.as_ref().map(|w| w.port).expect("port");
    kcp.env.webhook = None;
    let unreachable = kcp.env.dir.path().join("unreachable.kubeconfig");
    std::fs::write(
        &unreachable,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:1/clusters/root:holdfast\n\
         contexts:\n- name: gone\n  context:\n    cluster: gone\n    user: u\ncurrent-context: gone\n\
         users:\n- name: u\n  user:\n    token: nope\n",
    )
    .expect("kubeconfig");
    let unreachable = unreachable.to_string_lossy().into_owned();
    kcp.env
        .start_webhook_on(
            port,
            &[
                "--topology",
                "kcp",
                "--kubeconfig",
                &unreachable,
                "--dependents",
                mode,
            ],
        )
        .await
        .expect("restarted");
    let out = kcp.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "vpc", "my-vpc", "--dry-run=server"],
    );
    assert!(
        refused(&out, "holdfast: not ready yet, retry later"),
        "{out:?}"
    );
    kcp.env.webhook = None;
    let args = kcp.webhook_args(mode);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    kcp.env
        .start_webhook_on(port, &args)
        .await
        .expect("restarted");
    kcp.env.wait_webhook_ready().await.expect("ready again");
    until(
        &kcp,
        &["delete", "vpc", "my-vpc", "--dry-run=server"],
        |o| refused(o, "still referenced by VirtualMachine default/my-vm"),
    )
    .await;
    // Delete the VMs, then the VPC goes.
    let out = kcp.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "virtualmachine", "my-vm", "vm-2"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    kcp.env.assert_dependents_source(mode).await;
    until(&kcp, &["delete", "vpc", "my-vpc"], |o| o.code == 0).await;
    if mode == "watch" {
        // The last VM gone, no endpoint's watch holds an object of the consumer any
        // more, but its shard's endpoint serves it (asked once): still answered from
        // the index, no live list.
        let out = kcp.kubectl(
            "consumer",
            CONSUMER,
            &["delete", "virtualmachine", "vm-disks"],
        );
        assert_eq!(out.code, 0, "{out:?}");
        kcp.apply(
            "consumer",
            CONSUMER,
            "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {name: spare, namespace: default}\n",
        );
        dry_run_until(
            &kcp,
            "spare",
            |o| o.code == 0,
            |(live, index), after| after == (live, index + 1.0),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_scenario_on_kcp_watch() {
    seed_story("watch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_scenario_on_kcp_live() {
    seed_story("live").await;
}
