//! Two APIExports of one provider workspace export the same group/resource
//! (`vpcs.network.test.io`, different identities): consumer A binds
//! `network.test.io`, consumer B binds `net-b`. kcp calls the provider workspace's
//! configuration for both, and calls every webhook in it whose rules match; a
//! DependencyRule naming one export protects only the VPCs of that export's
//! consumers. holdfast runs under the identities and RBAC it ships.

use holdfast_e2e::{
    KubectlOutput,
    controller::{ControllerProcess, rules_of},
    kcp::{dependency_rule, export},
    kcp_sharded::{COMPUTE, NETWORK, Sharded, bindable, sharded},
};
use serde_json::Value;

/// Rules `vm-dependencies` and `vm-backups`: VMs reference VPCs at
/// `.spec.vpcRef.name`, of export `network.test.io` and of export `net-b`.
fn rules() -> String {
    let vm = ("compute.test.io", "VirtualMachine", "virtualmachines");
    let a = dependency_rule(
        "vm-dependencies",
        vm,
        &[(
            NETWORK,
            "network.test.io",
            "network.test.io",
            "vpcs",
            ".spec.vpcRef.name",
        )],
    );
    let b = dependency_rule(
        "vm-backups",
        vm,
        &[(
            NETWORK,
            "net-b",
            "network.test.io",
            "vpcs",
            ".spec.vpcRef.name",
        )],
    );
    format!("{a}---\n{b}")
}

fn vpc(name: &str) -> String {
    format!(
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {{name: {name}, namespace: default}}\n"
    )
}

/// A VM referencing VPC `vpc` at `.spec.<field>.name`.
fn vm(name: &str, field: &str, vpc: &str) -> String {
    format!(
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {{name: {name}, namespace: default}}\nspec: {{{field}: {{name: {vpc}}}}}\n"
    )
}

/// `kubectl delete vpc NAME` as the consumer in `path`, repeated until `check`
/// accepts the outcome (at most [`Sharded::wait`]); fails with the logs otherwise.
async fn delete_vpc(
    t: &Sharded,
    c: &ControllerProcess,
    path: &str,
    name: &str,
    check: impl Fn(&KubectlOutput) -> bool,
) -> KubectlOutput {
    let args = ["delete", "vpc", name, "-n", "default", "--wait=false"];
    t.until("consumer", path, &args, check)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{e:#}\nwebhook: {}\ncontroller: {}",
                t.env.webhook_log(),
                c.log()
            )
        })
}

/// The refusal of VPC my-vpc, referenced by VM my-vm through rule `rule` (in the
/// compute provider's logical cluster `lc`).
fn refusal(webhook: &str, (lc, rule): (&str, &str)) -> String {
    format!(
        "Error from server (Forbidden): admission webhook \"{webhook}\" denied the request: \
         holdfast: VPC default/my-vpc is still referenced by VirtualMachine default/my-vm \
         (policy: DependencyRule/{rule} (logical cluster {lc}), field .spec.vpcRef.name of \
         virtualmachines.compute.test.io), so it cannot be deleted. To delete it, delete or \
         change the dependents first, or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection.\n"
    )
}

/// The export webhooks (`<export>.policies.holdfast.dev`) of `cfg`: (name, URL).
fn hooks(cfg: &Value) -> Vec<(String, String)> {
    cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| {
            w["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(".policies.holdfast.dev"))
        })
        .map(|w| {
            (
                w["name"].as_str().unwrap_or_default().to_string(),
                w["clientConfig"]["url"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exports_of_one_group_resource_in_one_workspace_are_told_apart() {
    let mut t = sharded().await.expect("topology");
    // A second export of the same schema in the network provider's workspace.
    t.apply(
        "provider",
        NETWORK,
        &export("net-b", &["v1.vpcs.network.test.io"]),
    );
    t.apply("provider", NETWORK, &bindable("net-b"));
    let a = t.consumer("consumer-a", "root");
    let b = t.consumer_of("consumer-b", "shard-1", "net-b");
    let c = t
        .start_holdfast("controller", "watch")
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    t.apply("provider", COMPUTE, &rules());
    for rule in ["vm-dependencies", "vm-backups"] {
        let ready = t.rule_ready(COMPUTE, rule).await;
        assert!(
            ready.is_ok(),
            "{rule} Ready: {ready:?}\ncontroller: {}",
            c.log()
        );
        // Both exports export VPCs: the status says so, and the webhook reads a
        // consumer's bindings to tell which export's rules apply.
        let out = t.kubectl(
            "provider",
            COMPUTE,
            &["get", "dependencyrule", rule, "-o", "json"],
        );
        let status = out.json().expect("rule")["status"].clone();
        assert_eq!(
            status["workspaces"][0]["sharedResources"],
            serde_json::json!(["vpcs.network.test.io"]),
            "{status}"
        );
    }

    // One webhook per export, each calling the URL that names its export.
    let network = t.logical_cluster(NETWORK);
    let args = [
        "get",
        "validatingwebhookconfiguration/holdfast",
        "-o",
        "json",
    ];
    let out = t
        .until("provider", NETWORK, &args, |o| {
            serde_json::from_str::<Value>(&o.stdout).is_ok_and(|cfg| hooks(&cfg).len() == 2)
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", c.log()));
    let cfg = out.json().expect("configuration");
    // The provider workspace binds holdfast.dev: its own webhooks come first.
    let own: Vec<(String, String)> = holdfast_e2e::kcp_sharded::workspace_webhooks(&cfg)
        .into_iter()
        .filter(|(n, _)| !n.ends_with(".policies.holdfast.dev"))
        .collect();
    assert_eq!(own, holdfast_e2e::kcp_sharded::own_webhooks(&network));
    let port = t.env.webhook.as_ref().map(|w| w.port).expect("port");
    let url = |export: &str| format!("https://127.0.0.1:{port}/validate/kcp/{network}/{export}");
    assert_eq!(
        hooks(&cfg),
        vec![
            ("net-b.policies.holdfast.dev".to_string(), url("net-b")),
            (
                "network.test.io.policies.holdfast.dev".to_string(),
                url("network.test.io")
            ),
        ]
    );
    for name in [
        "net-b.policies.holdfast.dev",
        "network.test.io.policies.holdfast.dev",
    ] {
        let vpcs = vec![(
            vec!["network.test.io".to_string()],
            vec!["vpcs".to_string()],
            vec!["DELETE".to_string()],
        )];
        assert_eq!(rules_of(&cfg, name), vpcs, "{name}");
    }

    // The same objects in both consumers: VPC my-vpc, referenced by VM my-vm.
    for path in [&a, &b] {
        t.apply("consumer", path, &vpc("my-vpc"));
        t.apply("consumer", path, &vm("my-vm", "vpcRef", "my-vpc"));
    }
    let compute = t.logical_cluster(COMPUTE);
    // Both webhooks are called for either consumer's VPC (they match the same
    // group/resource): each refusal comes from the webhook of the export the
    // consumer binds, naming the rule of that export only.
    for (path, webhook, rule) in [
        (
            &a,
            "network.test.io.policies.holdfast.dev",
            "vm-dependencies",
        ),
        (&b, "net-b.policies.holdfast.dev", "vm-backups"),
    ] {
        let out = delete_vpc(&t, &c, path, "my-vpc", |o| o.code != 0).await;
        assert_eq!(
            out.stderr,
            refusal(webhook, (&compute, rule)),
            "{path}: {out:?}"
        );
    }

    // Without the rule of net-b, nothing protects B's VPC, although the remaining
    // webhook (network.test.io's) is called for it.
    let drop_rule = ["delete", "dependencyrule", "vm-backups"];
    let out = t.kubectl("provider", COMPUTE, &drop_rule);
    assert_eq!(out.code, 0, "{out:?}");
    t.until("provider", NETWORK, &args, |o| {
        serde_json::from_str::<Value>(&o.stdout).is_ok_and(|cfg| hooks(&cfg).len() == 1)
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", c.log()));
    let del = ["delete", "vpc", "my-vpc", "-n", "default", "--wait=false"];
    let out = t.kubectl("consumer", &b, &del);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "vpc.network.test.io \"my-vpc\" deleted\n"),
        "{out:?}\nwebhook: {}",
        t.env.webhook_log()
    );
    // A's stays protected.
    let out = t.kubectl("consumer", &a, &del);
    assert_eq!(
        out.stderr,
        refusal(
            "network.test.io.policies.holdfast.dev",
            (&compute, "vm-dependencies")
        ),
        "{out:?}"
    );
    let out = t.kubectl("consumer", &a, &["get", "vpc", "my-vpc", "-n", "default"]);
    assert_eq!(out.code, 0, "{out:?}");
}
