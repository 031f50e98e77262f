//! DependencyRule on the Kubernetes topology, end to end, for both dependents
//! strategies: a VPC cannot be deleted while a VirtualMachine references it.

use holdfast_e2e::Env;
use holdfast_e2e::steps::allowed_until;
use holdfast_e2e::steps::words;

use holdfast_e2e::fixtures::vm_vpc_rule as rule;

fn storage_rule() -> String {
    holdfast_e2e::fixtures::dependency_rule(
        "claims-need-profiles",
        ("storage.test.io", "VolumeClaim", "volumeclaims"),
        &[("storage.test.io", "storageprofiles", ".spec.profile")],
    )
}

/// VirtualMachine `name` in namespace `ns` with `spec`.
fn vm(name: &str, ns: &str, spec: &str) -> String {
    format!(
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n"
    )
}

/// VPC `name` in namespace `ns`.
fn vpc(name: &str, ns: &str) -> String {
    format!(
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {{name: {name}, namespace: {ns}}}\n"
    )
}

async fn setup(mode: &str) -> Env {
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    env.apply_crds(&holdfast_e2e::fixtures::documents(&[
        holdfast_e2e::fixtures::vpc_vm_crds(),
        holdfast_e2e::fixtures::storage_crds(),
    ]))
    .expect("test CRDs");
    env.wait_served(&["vpcs"]).await;
    env.apply(&rule(".spec.vpcRef.name")).expect("rule");
    env.apply(&storage_rule()).expect("storage rule");
    env.start_webhook(&["--dependents", mode])
        .await
        .expect("webhook");
    env.install_delete_webhook(
        "holdfast-test-policies",
        &[
            ("network.test.io", "vpcs"),
            ("storage.test.io", "storageprofiles"),
        ],
    )
    .expect("webhook configuration");
    env.wait_webhook_ready().await.expect("ready");
    env
}

fn refused_with(out: &holdfast_e2e::KubectlOutput, text: &str) -> bool {
    out.refused_with(text)
}

async fn vpc_story(mode: &str) {
    let env = setup(mode).await;
    let ns = env.default_namespace().expect("namespace");
    env.apply(&vpc("my-vpc", &ns)).expect("vpc");
    env.apply(&vm("my-vm", &ns, "{vpcRef: {name: my-vpc}}"))
        .expect("vm");

    let out = env
        .until_failed(&["delete", "vpc", "my-vpc", "--dry-run=server"])
        .await;
    assert!(
        out.stderr.contains(&format!("Error from server (Forbidden): admission webhook \"holdfast-test-policies.holdfast.dev\" denied the request: holdfast: VPC {ns}/my-vpc is still referenced by VirtualMachine {ns}/my-vm (policy: DependencyRule/vm-dependencies")),
        "{out:?}"
    );
    // Two VMs: both named.
    env.apply(&vm("vm-2", &ns, "{vpcRef: {name: my-vpc}}"))
        .expect("vm-2");
    env.kubectl_until(&["delete", "vpc", "my-vpc"], 10, |o| {
        refused_with(
            o,
            &format!("VirtualMachine {ns}/my-vm, VirtualMachine {ns}/vm-2"),
        )
    })
    .await
    .expect("both named");
    // Delete the VMs: then the VPC goes.
    env.run(&["delete", "virtualmachine", "my-vm", "vm-2"]);
    allowed_until(&env, &["delete", "vpc", "my-vpc"]).await;
    env.assert_dependents_source(mode).await;

    // List field path, edited in place on the live rule.
    env.apply(&vpc("net-a", &ns)).expect("vpc");
    env.apply(&vm(
        "vm-disks",
        &ns,
        "{disks: [{vpcRef: {name: other}}, {vpcRef: {name: net-a}}]}",
    ))
    .expect("vm");
    let out = env.attempt(&["delete", "vpc", "net-a", "--dry-run=server"]);
    assert_eq!(
        out.code, 0,
        "scalar path does not see list references yet: {out:?}"
    );
    env.apply(&rule(".spec.disks[*].vpcRef.name"))
        .expect("rule edited");
    env.kubectl_until(&["delete", "vpc", "net-a", "--dry-run=server"], 15, |o| {
        refused_with(
            o,
            &format!("still referenced by VirtualMachine {ns}/vm-disks"),
        )
    })
    .await
    .expect("edited path takes effect");

    // Break-glass on exactly that object.
    env.run(&words(
        "annotate vpc net-a holdfast.dev/skip-protection=true",
    ));
    let out = env.attempt(&["delete", "vpc", "net-a"]);
    assert_eq!(out.code, 0, "{out:?}");

    // Cluster-scoped dependency referenced from namespaced claims in any namespace.
    let team = env.namespace("team-a").expect("namespace");
    env.apply("apiVersion: storage.test.io/v1\nkind: StorageProfile\nmetadata: {name: fast}\n")
        .expect("profile");
    env.apply(&format!("apiVersion: storage.test.io/v1\nkind: VolumeClaim\nmetadata: {{name: data, namespace: {team}}}\nspec: {{profile: fast}}\n"))
        .expect("claim");
    env.kubectl_until(
        &["delete", "storageprofile", "fast", "--dry-run=server"],
        10,
        |o| {
            refused_with(
                o,
                &format!("StorageProfile fast is still referenced by VolumeClaim {team}/data"),
            )
        },
    )
    .await
    .expect("cluster-scoped dependency protected");
    env.run(&["delete", "volumeclaim", "data", "-n", &team]);
    allowed_until(&env, &["delete", "storageprofile", "fast"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vpc_story_watch() {
    vpc_story("watch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vpc_story_live() {
    vpc_story("live").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarted_webhook_denies_until_loaded_then_decides() {
    let mut env = setup("watch").await;
    let ns = env.default_namespace().expect("namespace");
    env.apply(&vpc("v", &ns)).expect("vpc");
    env.apply(&vm("m", &ns, "{vpcRef: {name: v}}")).expect("vm");
    env.kubectl_until(&["delete", "vpc", "v", "--dry-run=server"], 10, |o| {
        refused_with(o, &format!("still referenced by VirtualMachine {ns}/m"))
    })
    .await
    .expect("refused");
    // Restart the webhook on the same port, with the API server made unreachable
    // for it: it must refuse with "retry later", never allow.
    let port = env.webhook.as_ref().map(|w| w.port).expect("running");
    env.webhook = None;
    let bad_kubeconfig = env.dir.path().join("unreachable");
    holdfast_e2e::steps::write_unreachable_kubeconfig(&bad_kubeconfig).expect("kubeconfig");
    let bad = bad_kubeconfig.to_string_lossy().into_owned();
    env.start_webhook_on(port, &["--kubeconfig", &bad])
        .await
        .expect("restarted");
    let out = env.attempt(&["delete", "vpc", "v", "--dry-run=server"]);
    assert!(
        refused_with(&out, "holdfast: not ready yet, retry later"),
        "{out:?}"
    );
    // And once it can load, it decides correctly again.
    env.webhook = None;
    env.start_webhook_on(port, &[]).await.expect("restarted");
    env.wait_webhook_ready().await.expect("ready");
    env.kubectl_until(&["delete", "vpc", "v", "--dry-run=server"], 10, |o| {
        refused_with(o, &format!("still referenced by VirtualMachine {ns}/m"))
    })
    .await
    .expect("refused after reload");
    env.run(&["delete", "virtualmachine", "m"]);
    allowed_until(&env, &["delete", "vpc", "v"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_live_lookup_refuses_and_is_counted() {
    // The webhook's identity (a user of the test's own, granted by RBAC the test
    // creates) may read everything it needs except the dependents
    // (VirtualMachines): a live lookup fails, and the deletion is refused, not
    // allowed.
    use holdfast_e2e::rbac;
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    env.apply_crds(&holdfast_e2e::fixtures::vpc_vm_crds())
        .expect("test CRDs");
    env.wait_served(&["vpcs"]).await;
    env.apply(&rule(".spec.vpcRef.name")).expect("rule");
    let webhook = env.test_user("holdfast-webhook", &[]).expect("user");
    env.grant_cluster(
        "webhook-reads-but-vms",
        &[rbac::user(&webhook.name)],
        &[
            rbac::rule(
                &["get", "list", "watch"],
                &[
                    "",
                    "holdfast.dev",
                    "apiextensions.k8s.io",
                    "network.test.io",
                    "storage.test.io",
                    "apps",
                ],
                &["*"],
            ),
            rbac::rule(
                &["create", "patch", "update"],
                &["events.k8s.io"],
                &["events"],
            ),
        ],
    )
    .expect("the webhook's grant");
    let kubeconfig = webhook.kubeconfig_arg();
    env.start_webhook_reachable(&["--kubeconfig", &kubeconfig, "--dependents", "live"])
        .await
        .expect("webhook");
    env.install_delete_webhook("holdfast-test-policies", &[("network.test.io", "vpcs")])
        .expect("webhook configuration");
    env.wait_webhook_ready().await.expect("ready");
    let ns = env.default_namespace().expect("namespace");
    env.apply(&vpc("my-vpc", &ns)).expect("vpc");
    let out = env.attempt(&["delete", "vpc", "my-vpc", "--dry-run=server"]);
    assert!(
        out.refused_with(&holdfast_e2e::denied_by(
            "holdfast-test-policies.holdfast.dev",
            &format!(
                "holdfast: cannot verify dependents of VPC {ns}/my-vpc (policy: \
                 DependencyRule/vm-dependencies, virtualmachines.compute.test.io referencing \
                 it at .spec.vpcRef.name)"
            )
        )),
        "{out:?}\n{}",
        env.webhook_log()
    );
    let failed = env
        .webhook_metric("holdfast_webhook_dependents_lookups_total{source=\"failed\"}")
        .await
        .expect("metrics");
    assert_eq!(failed, Some(1.0), "one failed lookup counted");
    assert!(
        env.exists(&["vpc", "my-vpc"]).expect("kubectl"),
        "the VPC is still there"
    );
}
