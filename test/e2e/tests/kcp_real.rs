//! holdfast on a real kcp (`holdfast_e2e::backend::kcp`: two shards, front-proxy,
//! cache server, kcp v0.31.2), installed as `docs/kcp.md` tells the platform team,
//! under the identities and RBAC it ships (`manifests/kcp`,
//! `manifests/overlays/kcp/workspace`): the real holdfast-controller and
//! holdfast-webhook run as the users `holdfast-controller` and `holdfast-webhook`
//! (bearer tokens, no other rights), the providers and the consumer act as users
//! of their own, and the real kubectl drives everything through the front-proxy.
//!
//! kcp makes workspaces asynchronously (Scheduling, Initializing, Ready) and its
//! admission reads webhook configurations from the cache server, so every step
//! waits for what kcp shows (a workspace Ready, a binding Bound, a server-side
//! dry-run DELETE refused) rather than assuming it.
//!
//! One kcp per machine (fixed ports): the tests of this file take turns on the
//! backend's lock, each on a kcp of its own.

use holdfast_e2e::{
    denied_by,
    kcp::{CLAIMS_BINDING, CLAIMS_EXPORT, binding, export, schema, vm_vpc_rule},
    kcp_real::*,
    kcp_sharded::bindable,
};

/// (a) holdfast installs on a real kcp and its controller becomes ready; (b) in a
/// consumer workspace on the other shard, label protection and a
/// ResourceProtection refuse deleting ConfigMaps with holdfast's messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holdfast_installs_on_a_real_sharded_kcp_and_protects_a_consumer_workspace() {
    let mut r = Real::start("install").await;
    r.install_holdfast_api().await;

    // A consumer on shard-1 binds holdfast.dev (the platform team lets it) and
    // lets holdfast read (docs/kcp.md, consumer guide).
    r.workspace("root", "consumer", "shard-1", "consumer").await;
    r.let_bind_holdfast("consumer");
    r.bind_holdfast("consumer", CONSUMER).await;
    r.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    let lc = r.logical_cluster(CONSUMER);
    r.step(&format!("root:consumer ({lc}, shard-1) binds holdfast.dev"));
    // The slice lists the virtual workspace of the shard holding the binding.
    let slice = r
        .until(
            "platform",
            HOLDFAST,
            &[
                "get",
                "apiexportendpointslice",
                "holdfast.dev",
                "-o",
                "jsonpath={.status.endpoints[*].url}",
            ],
            |o| !o.stdout.is_empty(),
        )
        .await;
    assert!(slice.stdout.contains("/services/apiexport/"), "{slice:?}");

    r.start_holdfast(&[]).await;

    // The controller installs the consumer's configuration through the virtual
    // workspace; the consumer sees it, owned by its binding.
    let cfg = r
        .until(
            "consumer",
            CONSUMER,
            &[
                "get",
                "validatingwebhookconfiguration",
                "holdfast",
                "-o",
                "json",
            ],
            |o| o.code == 0,
        )
        .await
        .json()
        .expect("json");
    let names: Vec<&str> = cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "delete-label-0.holdfast.dev",
            "containment.holdfast.dev",
            "enforcement-probe.holdfast.dev"
        ],
        "{cfg}"
    );
    let url = cfg["webhooks"][0]["clientConfig"]["url"]
        .as_str()
        .unwrap_or_default();
    assert!(url.ends_with(&format!("/validate/kcp/{lc}")), "{url}");
    assert_eq!(
        cfg["metadata"]["ownerReferences"][0]["kind"], "APIBinding",
        "{cfg}"
    );
    r.step("configuration holdfast installed in root:consumer");

    // (b) Label protection: refused with holdfast's exact message, the
    // ConfigMap stays.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "configmap", "guarded", "-n", "default"],
    );
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "label",
            "configmap",
            "guarded",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    );
    let guarded_denial = label_denial("guarded");
    let out = r
        .refused(
            "consumer",
            CONSUMER,
            &["configmap", "guarded", "-n", "default"],
        )
        .await;
    assert!(out.refused_with(&guarded_denial), "{out:?}");
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "guarded", "-n", "default"],
    );
    assert!(out.refused_with(&guarded_denial), "{out:?}");
    r.ok(
        "consumer",
        CONSUMER,
        &["get", "configmap", "guarded", "-n", "default"],
    );
    // Without the label it goes.
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "label",
            "configmap",
            "guarded",
            "-n",
            "default",
            "holdfast.dev/protected-",
        ],
    );
    r.until(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "guarded", "-n", "default"],
        |o| o.code == 0,
    )
    .await;

    // (b) A ResourceProtection of ConfigMaps: Ready, then every ConfigMap of the
    // workspace is refused.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "configmap", "plain", "-n", "default"],
    );
    r.apply(
        "consumer",
        CONSUMER,
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {name: config}\n\
         spec:\n  resources:\n  - {group: \"\", version: v1, resource: configmaps}\n",
    );
    let ready = r
        .until(
            "consumer",
            CONSUMER,
            &[
                "get",
                "resourceprotection",
                "config",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            |o| o.stdout == "True",
        )
        .await;
    assert_eq!(ready.stdout, "True");
    assert_eq!(
        r.condition(
            "consumer",
            CONSUMER,
            "resourceprotection",
            "config",
            "Installed"
        ),
        "True/WebhookInstalled"
    );
    r.step("ResourceProtection config Ready");
    let rp_denial = denied_by(
        "policies-0.holdfast.dev",
        &format!(
            "holdfast: ConfigMap default/plain is protected by ResourceProtection/config (logical \
             cluster {lc}) (selects configmaps), so it cannot be deleted. To delete it, remove it \
             from the policy (kubectl edit resourceprotection config), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
    let out = r
        .refused(
            "consumer",
            CONSUMER,
            &["configmap", "plain", "-n", "default"],
        )
        .await;
    assert!(out.refused_with(&rp_denial), "{out:?}");
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "plain", "-n", "default"],
    );
    assert!(out.refused_with(&rp_denial), "{out:?}");
    r.ok(
        "consumer",
        CONSUMER,
        &["get", "configmap", "plain", "-n", "default"],
    );

    // A workspace that does not bind holdfast.dev is not judged by holdfast.
    let free = r.workspace("root", "free", "root", "consumer").await;
    r.ok(
        "consumer",
        &free,
        &["create", "configmap", "plain", "-n", "default"],
    );
    r.ok(
        "consumer",
        &free,
        &[
            "label",
            "configmap",
            "plain",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    );
    r.ok(
        "consumer",
        &free,
        &["delete", "configmap", "plain", "-n", "default"],
    );
    // The controller still leads after all of it.
    let c = r.controller.as_ref().expect("controller");
    assert!(c.is_ready().await, "{}", r.logs());

    // A CriticalService guards itself: kcp admits DELETEs of a type bound from
    // holdfast.dev through the holdfast workspace's configurations only
    // (kcp-facts 12), so the controller keeps one there routing them to the
    // consumer's logical cluster.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "serviceaccount", "registry", "-n", "default"],
    );
    r.apply(
        "consumer",
        CONSUMER,
        "apiVersion: holdfast.dev/v1alpha1\nkind: CriticalService\nmetadata: {name: registry}\n\
         spec:\n  provider: {group: \"\", resource: serviceaccounts, namespace: default, name: registry}\n  \
         criteria:\n  - type: Finalizer\n    finalizer: {group: \"\", resource: configmaps, finalizerName: example.io/in-use}\n",
    );
    r.until(
        "consumer",
        CONSUMER,
        &[
            "get",
            "criticalservice",
            "registry",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
        |o| o.stdout == "True",
    )
    .await;
    let own = r
        .until(
            "platform",
            HOLDFAST,
            &[
                "get",
                "validatingwebhookconfiguration",
                "holdfast",
                "-o",
                "jsonpath={.webhooks[*].name}",
            ],
            |o| o.code == 0,
        )
        .await;
    assert_eq!(
        own.stdout,
        "holdfast.dev.policies.holdfast.dev holdfast.dev.delete-label-0.holdfast.dev \
         enforcement-probe.holdfast.dev"
    );
    let cs_denial = denied_by(
        "holdfast.dev.policies.holdfast.dev",
        &format!(
            "holdfast: CriticalService registry cannot be deleted while its provider \
             serviceaccounts default/registry exists (policy: CriticalService/registry (logical \
             cluster {lc})). To delete it, delete the provider first; this CriticalService keeps \
             it from going before its criteria are met, or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
    let out = r
        .refused("consumer", CONSUMER, &["criticalservice", "registry"])
        .await;
    assert!(out.refused_with(&cs_denial), "{out:?}");
    r.step("CriticalService registry guarded through root:holdfast's configuration");

    // Leaving holdfast (docs/kcp.md): unbinding deletes the binding's objects
    // (the policies); with a CriticalService whose provider exists among them,
    // APIBinding containment refuses the unbinding up front, naming it, and
    // holdfast keeps protecting the workspace.
    for args in [
        &["create", "configmap", "kept", "-n", "default"][..],
        &[
            "label",
            "configmap",
            "kept",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    ] {
        r.ok("consumer", CONSUMER, args);
    }
    let unbind = ["delete", "apibinding", "holdfast", "--wait=false"];
    let out = r.kubectl("consumer", CONSUMER, &unbind);
    let unbind_denial = denied_by(
        "containment.holdfast.dev",
        &format!(
            "holdfast: APIBinding holdfast binds the types of objects that are protected from \
             deletion: CriticalService registry (CriticalService/registry (logical cluster {lc})) \
             (policy: containment), so it cannot be deleted: unbinding deletes every object of \
             those types. To delete it, first lift the protection of those objects (or delete \
             them), or set the annotation holdfast.dev/skip-protection=true if you are allowed \
             to bypass protection on the APIBinding."
        ),
    );
    assert!(out.refused_with(&unbind_denial), "{out:?}\n{}", r.logs());
    r.ok("consumer", CONSUMER, &["get", "apibinding", "holdfast"]);
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &[
            "delete",
            "configmap",
            "kept",
            "-n",
            "default",
            "--dry-run=server",
        ],
    );
    // (The ResourceProtection on ConfigMaps routes it too: kcp calls the matching
    // webhooks at once and reports the refusal that arrives first.)
    let by_policy = label_denial("kept").replace(
        "\"delete-label-0.holdfast.dev\"",
        "\"policies-0.holdfast.dev\"",
    );
    assert!(
        out.refused_with(&label_denial("kept")) || out.refused_with(&by_policy),
        "{out:?}"
    );
    r.step("unbinding holdfast refused while the CriticalService holds; protection goes on");
    // Once the provider is gone, unbinding goes: the CriticalService, the binding
    // and the configuration it owns (kcp's garbage collector) go; the ConfigMap
    // is then deleted normally.
    r.ok(
        "consumer",
        CONSUMER,
        &["delete", "serviceaccount", "registry", "-n", "default"],
    );
    let out = r
        .until("consumer", CONSUMER, &unbind, |o| {
            o.code == 0 || !o.stderr.contains("retry later")
        })
        .await;
    assert_eq!(out.code, 0, "{out:?}\n{}", r.logs());
    r.until(
        "consumer",
        CONSUMER,
        &["get", "validatingwebhookconfiguration", "holdfast"],
        |o| o.is_not_found(),
    )
    .await;
    r.step("APIBinding holdfast deleted: configuration holdfast gone");
    r.until(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "plain", "kept", "-n", "default"],
        |o| o.code == 0,
    )
    .await;
    r.step("done");
}

/// As the provider in `path`: schemas for `resources` (plural, kind) of `group`,
/// exported as APIExport `group` (bindable by anyone), and the binding to
/// holdfast.dev accepting its claims (docs/kcp.md, provider guide, step 1).
async fn provider_export(r: &Real, path: &str, group: &str, resources: &[(&str, &str)]) {
    let mut names = Vec::new();
    for (plural, kind) in resources {
        r.apply("provider", path, &schema(group, plural, kind));
        names.push(format!("v1.{plural}.{group}"));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    r.apply("provider", path, &export(group, &names));
    r.apply("provider", path, &bindable(group));
    r.bind_holdfast("provider", path).await;
}

/// (c) Seed 003 across workspaces and shards: the compute provider (root:compute,
/// shard root) publishes a DependencyRule saying VirtualMachines reference VPCs of
/// the network provider (root:providers:network, shard shard-1); in the consumer
/// (root:consumer, shard-1), a VPC a VirtualMachine references cannot be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_rule_across_workspaces_protects_a_consumers_vpc_on_a_real_kcp() {
    let mut r = Real::start("dependency").await;
    r.install_holdfast_api().await;
    // The providers (group holdfast:providers may bind holdfast.dev).
    let compute = r.workspace("root", "compute", "root", "provider").await;
    r.workspace("root", "providers", "root", "provider").await;
    let network = r
        .workspace("root:providers", "network", "shard-1", "provider")
        .await;
    assert_eq!((compute.as_str(), network.as_str()), (COMPUTE, NETWORK));
    for path in [COMPUTE, NETWORK] {
        r.apply_k("provider", path, "overlays/kcp/workspace/provider");
    }
    provider_export(
        &r,
        COMPUTE,
        "compute.test.io",
        &[("virtualmachines", "VirtualMachine")],
    )
    .await;
    provider_export(
        &r,
        NETWORK,
        "network.test.io",
        &[("vpcs", "VPC"), ("subnets", "Subnet")],
    )
    .await;
    // docs/kcp.md, provider guide, step 3: the webhook watches the dependents
    // through the compute export's virtual workspace.
    r.ok(
        "provider",
        COMPUTE,
        &[
            "create",
            "clusterrole",
            "holdfast-webhook-content",
            "--verb=list,watch",
            "--resource=apiexports.apis.kcp.io/content",
            "--resource-name=compute.test.io",
        ],
    );
    r.ok(
        "provider",
        COMPUTE,
        &[
            "create",
            "clusterrolebinding",
            "holdfast-webhook-content",
            "--clusterrole=holdfast-webhook-content",
            "--user=holdfast-webhook",
        ],
    );
    r.step("providers: exports published, holdfast.dev bound");

    // The consumer binds both providers' exports and lets holdfast read.
    r.workspace("root", "consumer", "shard-1", "consumer").await;
    r.bind(
        "consumer",
        CONSUMER,
        &binding("compute", COMPUTE, "compute.test.io"),
    )
    .await;
    r.bind(
        "consumer",
        CONSUMER,
        &binding("network", NETWORK, "network.test.io"),
    )
    .await;
    r.bound("consumer", CONSUMER, "compute").await;
    r.bound("consumer", CONSUMER, "network").await;
    r.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "create",
            "clusterrole",
            "holdfast-dependents",
            "--verb=get,list",
            "--resource=virtualmachines.compute.test.io",
        ],
    );
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "create",
            "clusterrolebinding",
            "holdfast-dependents",
            "--clusterrole=holdfast-dependents",
            "--user=holdfast-webhook",
        ],
    );
    r.step("consumer binds compute.test.io and network.test.io");

    r.start_holdfast(&[]).await;
    r.apply("provider", COMPUTE, &vm_vpc_rule("vm-dependencies"));
    let ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
    r.until(
        "provider",
        COMPUTE,
        &["get", "dependencyrule", "vm-dependencies", "-o", ready],
        |o| o.stdout == "True",
    )
    .await;
    r.step("DependencyRule vm-dependencies Ready");
    // The network provider's configuration routes VPC DELETEs to holdfast.
    let cfg = r
        .until(
            "provider",
            NETWORK,
            &[
                "get",
                "validatingwebhookconfiguration",
                "holdfast",
                "-o",
                "json",
            ],
            |o| o.code == 0 && o.stdout.contains("vpcs"),
        )
        .await;
    assert!(cfg.stdout.contains("holdfast.dev"), "{cfg:?}");

    r.apply(
        "consumer",
        CONSUMER,
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {name: my-vpc, namespace: default}\n",
    );
    r.apply(
        "consumer",
        CONSUMER,
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {name: my-vm, namespace: default}\nspec: {vpcRef: {name: my-vpc}}\n",
    );
    let out = r
        .refused("consumer", CONSUMER, &["vpc", "my-vpc", "-n", "default"])
        .await;
    assert!(
        out.refused_with(
            "holdfast: VPC default/my-vpc is still referenced by VirtualMachine default/my-vm (policy: DependencyRule/vm-dependencies"
        ),
        "{out:?}"
    );
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "vpc", "my-vpc", "-n", "default"],
    );
    assert!(
        out.refused_with("still referenced by VirtualMachine default/my-vm"),
        "{out:?}"
    );
    // Once the VM is gone, the VPC goes.
    r.ok(
        "consumer",
        CONSUMER,
        &["delete", "virtualmachine", "my-vm", "-n", "default"],
    );
    r.until(
        "consumer",
        CONSUMER,
        &["delete", "vpc", "my-vpc", "-n", "default"],
        |o| o.code == 0,
    )
    .await;
    r.step("done");
}

/// (d) Issue 30 item 1 (kcp-facts 26): a write through an APIExport's virtual
/// workspace carries kcp's warrant (group `system:kcp:admin`), which holdfast's
/// bypass check leaves out. Under `--strict`, a provider whose export claims the
/// consumer's ConfigMaps (accepted) can neither add the break-glass annotation to
/// a protected one through its virtual workspace nor then delete it; the
/// consumer's own admin, who holds `bypass` in its workspace, can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_cannot_break_glass_through_its_virtual_workspace_on_a_real_kcp() {
    let mut r = Real::start("warrant").await;
    r.install_holdfast_api().await;
    // The provider (root:compute, shard root) exports a claim on ConfigMaps; the
    // consumer (root:consumer, shard shard-1) binds holdfast.dev and the export,
    // accepting the claim.
    let provider = r.workspace("root", "compute", "root", "provider").await;
    assert_eq!(provider, COMPUTE);
    r.apply("provider", COMPUTE, CLAIMS_EXPORT);
    r.apply("provider", COMPUTE, &bindable("claims.test.io"));
    r.workspace("root", "consumer", "shard-1", "consumer").await;
    r.let_bind_holdfast("consumer");
    r.bind_holdfast("consumer", CONSUMER).await;
    r.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    r.bind("consumer", CONSUMER, CLAIMS_BINDING).await;
    r.bound("consumer", CONSUMER, "claims").await;
    let claims = "jsonpath={.status.conditions[?(@.type==\"PermissionClaimsApplied\")].status}";
    r.until(
        "consumer",
        CONSUMER,
        &["get", "apibinding", "claims", "-o", claims],
        |o| o.stdout == "True",
    )
    .await;
    let lc = r.logical_cluster(CONSUMER);
    r.step(&format!(
        "root:consumer ({lc}) binds holdfast.dev and claims.test.io"
    ));

    r.start_holdfast(&["--strict"]).await;

    // The consumer's protected ConfigMap; holdfast enforces its label.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "configmap", "vault", "-n", "default"],
    );
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "label",
            "configmap",
            "vault",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    );
    let denial = strict_label_denial("vault");
    let out = r
        .refused(
            "consumer",
            CONSUMER,
            &["configmap", "vault", "-n", "default"],
        )
        .await;
    assert!(out.refused_with(&denial), "{out:?}");

    // The provider reaches the ConfigMap through its export's virtual workspace
    // (the slice lists shard-1's once the consumer binds there).
    let slice = r
        .until(
            "provider",
            COMPUTE,
            &[
                "get",
                "apiexportendpointslice",
                "claims.test.io",
                "-o",
                "jsonpath={.status.endpoints[*].url}",
            ],
            |o| !o.stdout.is_empty(),
        )
        .await;
    let urls: Vec<&str> = slice.stdout.split_whitespace().collect();
    assert_eq!(urls.len(), 1, "one shard binds claims.test.io: {slice:?}");
    assert!(
        urls[0].contains("/services/apiexport/") && urls[0].ends_with("/claims.test.io"),
        "{slice:?}"
    );
    let vw = format!("{}/clusters/{lc}", urls[0]);
    let get = ["get", "configmap", "vault", "-n", "default", "-o", "name"];
    r.until_at("provider", &vw, &get, |o| o.code == 0).await;
    r.step(&format!("provider reads configmap vault through {vw}"));

    // The break-glass annotation through the virtual workspace: refused by
    // holdfast's strict break-glass check (before the fix it was admitted), from
    // the strict label webhook of the consumer's configuration.
    let cfg = r.ok(
        "consumer",
        CONSUMER,
        &[
            "get",
            "validatingwebhookconfiguration",
            "holdfast",
            "-o",
            "jsonpath={.webhooks[*].name}",
        ],
    );
    r.step(&format!(
        "configuration holdfast in root:consumer: {}",
        cfg.stdout
    ));
    // Only the strict label webhook judges ConfigMap UPDATEs (the break-glass
    // webhook covers what policies protect), so exactly it refuses.
    let break_glass = r.ok(
        "consumer",
        CONSUMER,
        &[
            "get",
            "validatingwebhookconfiguration",
            "holdfast",
            "-o",
            "jsonpath={.webhooks[?(@.name==\"break-glass.holdfast.dev\")].rules[*].resources}",
        ],
    );
    assert!(
        !break_glass.stdout.contains("configmaps"),
        "{break_glass:?}"
    );
    r.step(&format!(
        "break-glass.holdfast.dev covers {}",
        break_glass.stdout
    ));
    let annotate = [
        "annotate",
        "configmap",
        "vault",
        "-n",
        "default",
        "holdfast.dev/skip-protection=true",
    ];
    let out = r.kubectl_at("provider", &vw, &annotate);
    let break_glass_denial = denied_by(
        "strict-label-0.holdfast.dev",
        "holdfast: user \"provider\" may not add annotation holdfast.dev/skip-protection to \
         ConfigMap default/vault: it is protected in strict mode, and lifting that protection \
         needs the permission to bypass it (verb bypass on protections.holdfast.dev in \
         namespace default). Ask someone who holds it.",
    );
    assert!(
        out.refused_with(&break_glass_denial),
        "{out:?}\n{}",
        r.logs()
    );
    r.step("provider's break-glass annotation through its virtual workspace refused");
    // Nothing was written, and the ConfigMap still cannot be deleted: not
    // through the virtual workspace, not in the workspace.
    let annotations = r.ok(
        "consumer",
        CONSUMER,
        &[
            "get",
            "configmap",
            "vault",
            "-n",
            "default",
            "-o",
            "jsonpath={.metadata.annotations}",
        ],
    );
    assert!(
        !annotations.stdout.contains("skip-protection"),
        "{annotations:?}"
    );
    let delete = ["delete", "configmap", "vault", "-n", "default"];
    let out = r.kubectl_at("provider", &vw, &delete);
    assert!(out.refused_with(&denial), "{out:?}");
    let out = r.kubectl("consumer", CONSUMER, &delete);
    assert!(out.refused_with(&denial), "{out:?}");
    r.ok(
        "consumer",
        CONSUMER,
        &["get", "configmap", "vault", "-n", "default"],
    );

    // Positive control: the consumer's admin holds bypass in its workspace (its
    // cluster-admin), so it may break glass, and the DELETE is then allowed.
    r.ok("consumer", CONSUMER, &annotate);
    r.ok("consumer", CONSUMER, &delete);
    let log = r.env.webhook_log();
    let honoured: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("break-glass honoured"))
        .collect();
    assert!(
        honoured.len() == 1 && honoured[0].contains("consumer"),
        "{honoured:?}"
    );
    r.step("done");
}
