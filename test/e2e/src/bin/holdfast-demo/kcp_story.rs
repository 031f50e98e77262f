//! The seed 003 story on kcp: a compute provider's DependencyRule protects VPCs (of a
//! network provider nested at root:providers:network) in a consumer workspace, on a
//! kcp of two shards with holdfast under its own identities and shipped RBAC; then
//! the consumer binds holdfast.dev and gets holdfast in its own workspace: a
//! labelled namespace and a ResourceProtection of its own.

use crate::policies::{VPC_AND_VM, VPC_AND_VM_CREATED};
use crate::runner::{Demo, Expect};
use holdfast_e2e::kcp::{COMPUTE, CONSUMER, NETWORK, topology, vm_vpc_rule};
use holdfast_e2e::kcp_sharded::holdfast_binding;

/// Sets up the kcp topology, starts the webhook and controller for kcp, and tells
/// the story. Every process it started is stopped when it returns.
pub async fn story(demo: &mut Demo) -> anyhow::Result<()> {
    demo.story(
        "DependencyRule on kcp — across workspaces",
        "seed 003 (kcp dependency-controller: rule in a provider workspace, webhook through the virtual workspace, objects in a consumer workspace)",
    );
    let mut kcp = topology().await?;
    let _controller = kcp.start_holdfast("controller-kcp", "watch").await?;
    let Some(port) = kcp.env.webhook.as_ref().map(|w| w.port) else {
        anyhow::bail!("the kcp webhook did not start");
    };
    demo.note(&format!(
        "a second simulator, modelling kcp with two shards behind a front-proxy at {}: \
         root:holdfast (holdfast's APIExport) and {COMPUTE} (VirtualMachines) on shard root, \
         {NETWORK} (VPCs) and {CONSUMER} (binding both) on shard-1",
        kcp.url
    ));
    demo.note(&format!(
        "holdfast-webhook --topology kcp --kubeconfig <root:holdfast> (webhook port {port}) and \
         holdfast-controller --topology kcp, installing the webhook into provider workspaces; \
         they run as the users holdfast-webhook and holdfast-controller with only the RBAC \
         manifests/overlays/kcp/workspace ships (never system:masters)"
    ));

    let compute = kcp.ws(COMPUTE);
    let consumer = kcp.ws(CONSUMER);
    demo.say("The compute provider declares that VirtualMachines depend on VPCs");
    let rule = vm_vpc_rule("vm-dependencies");
    demo.apply(
        &kcp.env,
        Some(&compute),
        &rule,
        &["dependencyrule.holdfast.dev/vm-dependencies created"],
    )?;
    kcp.env.wait_webhook_ready().await?;

    demo.say("In the consumer workspace: a VPC and a VirtualMachine using it");
    demo.apply(&kcp.env, Some(&consumer), VPC_AND_VM, &VPC_AND_VM_CREATED)?;
    demo.note("the controller installs the webhook in root:providers:network");
    let dry_run_delete_vpc = dry_run_delete(&consumer, "vpc", "my-vpc");
    demo.settle(&kcp.env, &dry_run_delete_vpc, 20, |o| o.code != 0)
        .await;

    demo.say("The VPC is refused while the VM uses it");
    demo.run(
        &kcp.env,
        &["--server", &consumer, "delete", "vpc", "my-vpc"],
        Expect::Refused,
        &[
            "holdfast: VPC default/my-vpc is still referenced by VirtualMachine default/my-vm (policy: DependencyRule/vm-dependencies",
        ],
    )?;
    demo.say("Delete the VM; then the VPC goes");
    demo.run(
        &kcp.env,
        &["--server", &consumer, "delete", "virtualmachine", "my-vm"],
        Expect::Succeeds,
        &["\"my-vm\" deleted"],
    )?;
    demo.settle(&kcp.env, &dry_run_delete_vpc, 20, |o| o.code == 0)
        .await;
    demo.run(
        &kcp.env,
        &["--server", &consumer, "delete", "vpc", "my-vpc"],
        Expect::Succeeds,
        &["vpc.network.test.io \"my-vpc\" deleted"],
    )?;

    demo.say("The consumer binds holdfast.dev too, accepting its three claims");
    kcp.let_bind_holdfast("consumer");
    kcp.apply("consumer", CONSUMER, holdfast_binding());
    kcp.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    demo.note(&format!(
        "as the user consumer in {CONSUMER}: an APIBinding to holdfast.dev accepting the claims on \
         validatingwebhookconfigurations, events and apibindings, and the consumer overlay \
         (what the webhook may read there); the controller installs the configuration holdfast \
         in {CONSUMER}, calling the webhook's route for that workspace"
    ));
    demo.say("A labelled namespace in the consumer workspace is refused");
    demo.apply(
        &kcp.env,
        Some(&consumer),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels: {holdfast.dev/protected: \"true\"}\n",
        &["namespace/shop created"],
    )?;
    let dry_run_delete_shop = dry_run_delete(&consumer, "namespace", "shop");
    demo.settle(&kcp.env, &dry_run_delete_shop, 20, |o| o.code != 0)
        .await;
    demo.run(
        &kcp.env,
        &["--server", &consumer, "delete", "namespace", "shop"],
        Expect::Refused,
        &[
            "holdfast: Namespace shop is protected by label holdfast.dev/protected=true (policy: label holdfast.dev/protected)",
        ],
    )?;

    demo.say(
        "A ResourceProtection of the consumer's own guards its ConfigMaps in namespace orders",
    );
    demo.apply(
        &kcp.env,
        Some(&consumer),
        ORDERS,
        &[
            "namespace/orders created",
            "configmap/prices created",
            "resourceprotection.holdfast.dev/orders-configs created",
        ],
    )?;
    let ready = [
        "--server",
        &consumer,
        "get",
        "resourceprotection",
        "orders-configs",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ];
    demo.settle(&kcp.env, &ready, 20, |o| o.stdout.trim() == "True")
        .await;
    demo.run(&kcp.env, &ready, Expect::Succeeds, &["True"])?;
    demo.run(
        &kcp.env,
        &[
            "--server",
            &consumer,
            "delete",
            "configmap",
            "prices",
            "-n",
            "orders",
        ],
        Expect::Refused,
        &[
            "holdfast: ConfigMap orders/prices is protected by ResourceProtection/orders-configs",
            "(selects configmaps in namespace orders), so it cannot be deleted",
        ],
    )?;
    demo.say("Another workspace's ConfigMaps are not the consumer's policy's business");
    demo.run(
        &kcp.env,
        &[
            "--server",
            &kcp.ws(COMPUTE),
            "create",
            "configmap",
            "prices",
            "-n",
            "default",
        ],
        Expect::Succeeds,
        &["configmap/prices created"],
    )?;
    demo.run(
        &kcp.env,
        &[
            "--server",
            &kcp.ws(COMPUTE),
            "delete",
            "configmap",
            "prices",
            "-n",
            "default",
        ],
        Expect::Succeeds,
        &["configmap \"prices\" deleted"],
    )?;
    Ok(())
}

/// `kubectl --server SERVER delete KIND NAME --dry-run=server`'s arguments.
fn dry_run_delete<'a>(server: &'a str, kind: &'a str, name: &'a str) -> [&'a str; 6] {
    ["--server", server, "delete", kind, name, "--dry-run=server"]
}

/// The consumer's namespace `orders`, a ConfigMap in it and a ResourceProtection
/// of its own over the ConfigMaps there.
const ORDERS: &str = "apiVersion: v1
kind: Namespace
metadata: {name: orders}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: prices, namespace: orders}
data: {tea: \"3\"}
---
apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: orders-configs}
spec:
  resources:
  - {version: v1, resource: configmaps, namespace: orders}
";
