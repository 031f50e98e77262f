//! One short story per policy kind on the Kubernetes topology, with the real
//! holdfast-controller installing the webhook configuration and the real
//! holdfast-webhook deciding.

use crate::runner::{Demo, Expect};
use holdfast_e2e::steps::words;
use holdfast_e2e::steps::{NO_FINALIZERS, merge_patch};
use holdfast_e2e::{Env, http_get};

fn refused(o: &holdfast_e2e::KubectlOutput) -> bool {
    o.code != 0
}

fn allowed(o: &holdfast_e2e::KubectlOutput) -> bool {
    o.code == 0
}

/// Applies test CRDs (setup, not part of the story) and waits until `resource` is
/// served.
async fn setup_crds(demo: &mut Demo, env: &Env, crds: &str, resource: &str, what: &str) {
    demo.note(&format!("setup: {what}"));
    if let Err(e) = env.apply(crds) {
        demo.check(false, &format!("applying the CRDs failed: {e:#}"));
        return;
    }
    demo.settle(env, &["get", resource], 10, allowed).await;
}

const WIDGETS: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: default}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w2, namespace: default}
"#;

const WIDGET_PROTECTION: &str = holdfast_e2e::fixtures::WIDGET_PROTECTION;

/// ResourceProtection: every instance of a CRD and the CRD itself.
pub async fn resource_protection(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "ResourceProtection — a CRD and all its instances",
        "seed 001 (Karmada: the selector CRD and its test plan: instances and the CRD itself, --force included)",
    );
    demo.say("A Widget CRD with two instances; nothing protects them yet");
    setup_crds(
        demo,
        env,
        &holdfast_e2e::fixtures::widget_crd(),
        "widgets",
        "CRD widgets.example.com, Widgets default/w1 and default/w2",
    )
    .await;
    env.apply(WIDGETS)?;
    demo.run(env, &["get", "widgets"], Expect::Succeeds, &["w1", "w2"])?;
    demo.succeeds(env, "delete widget w1", "widget.example.com \"w1\" deleted")?;

    demo.say("Protect every Widget and the Widget CRD itself");
    demo.apply(
        env,
        None,
        WIDGET_PROTECTION,
        &["resourceprotection.holdfast.dev/widgets created"],
    )?;
    demo.note("the controller routes DELETEs of widgets and of that CRD to the webhook");
    demo.settle_refused(env, "delete widget w2").await;
    demo.settle_refused(env, "delete crd widgets.example.com")
        .await;

    demo.say("Instances and the CRD are refused, --force --grace-period=0 too");
    demo.refused(
        env,
        "delete widget w2",
        "holdfast: Widget default/w2 is protected by ResourceProtection/widgets",
    )?;
    demo.refused(
        env,
        "delete widget w2 --force --grace-period=0",
        "holdfast: Widget default/w2 is protected by ResourceProtection/widgets",
    )?;
    demo.refused(env, "delete crd widgets.example.com", "holdfast: CustomResourceDefinition widgets.example.com is protected by ResourceProtection/widgets")?;
    demo.refused(
        env,
        "delete crd widgets.example.com --force --grace-period=0",
        "is protected by ResourceProtection/widgets",
    )?;

    demo.say("Remove the policy: deletion is allowed again");
    demo.succeeds(
        env,
        "delete resourceprotection widgets",
        "resourceprotection.holdfast.dev \"widgets\" deleted",
    )?;
    demo.settle_allowed(env, "delete widget w2").await;
    demo.succeeds(env, "delete widget w2", "widget.example.com \"w2\" deleted")?;
    demo.settle_allowed(env, "delete crd widgets.example.com")
        .await;
    demo.succeeds(
        env,
        "delete crd widgets.example.com",
        "\"widgets.example.com\" deleted",
    )?;
    Ok(())
}

/// Enforcement modes: Enforce refuses, Warn allows with a warning, Audit allows
/// silently and counts.
pub async fn enforcement_modes(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "Enforcement modes — Enforce, Warn, Audit",
        "design contract: spec.enforcement on every policy kind (Warn: allow with a warning; Audit: allow and count)",
    );
    demo.say("Three ConfigMaps, each protected by a policy with a different enforcement");
    for name in ["enforced", "warned", "audited"] {
        demo.run(
            env,
            &["create", "configmap", name, "--from-literal=a=b"],
            Expect::Succeeds,
            &["created"],
        )?;
    }
    let mut manifest = String::new();
    for (name, mode) in [
        ("enforced", "Enforce"),
        ("warned", "Warn"),
        ("audited", "Audit"),
    ] {
        if !manifest.is_empty() {
            manifest.push_str("---\n");
        }
        manifest.push_str(&format!(
            "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {name}}}\n\
             spec:\n  enforcement: {mode}\n  resources:\n  - {{group: \"\", version: v1, resource: configmaps, namespace: default, names: [{name}]}}\n"
        ));
    }
    demo.apply(
        env,
        None,
        &manifest,
        &[
            "resourceprotection.holdfast.dev/enforced created",
            "resourceprotection.holdfast.dev/warned created",
            "resourceprotection.holdfast.dev/audited created",
        ],
    )?;
    // Policies reach the webhook in order: once the last one acts, all do.
    demo.settle_refused(env, "delete configmap enforced").await;
    demo.settle(
        env,
        &["delete", "configmap", "warned", "--dry-run=server"],
        15,
        |o| o.code == 0 && o.stderr.contains("Warning: holdfast"),
    )
    .await;

    demo.say("Enforce: refused");
    demo.refused(
        env,
        "delete configmap enforced",
        "holdfast: ConfigMap default/enforced is protected by ResourceProtection/enforced",
    )?;
    demo.say("Warn: kubectl prints the warning, and the ConfigMap is deleted");
    demo.run(
        env,
        &["delete", "configmap", "warned"],
        Expect::Succeeds,
        &[
            "Warning: holdfast: ConfigMap default/warned is protected by ResourceProtection/warned",
            "configmap \"warned\" deleted",
        ],
    )?;
    demo.say("Audit: deleted silently; the webhook counts it");
    demo.run(
        env,
        &["delete", "configmap", "audited"],
        Expect::SucceedsSilently,
        &["configmap \"audited\" deleted"],
    )?;
    if let Some(w) = &env.webhook {
        let metric = r#"holdfast_webhook_audited_total{operation="DELETE"} 1"#;
        println!(
            "$ curl -s http://127.0.0.1:{}/metrics | grep holdfast_webhook_audited_total",
            w.probe_port
        );
        let body = http_get(w.probe_port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        for line in body
            .lines()
            .filter(|l| l.starts_with("holdfast_webhook_audited_total"))
        {
            println!("{line}");
        }
        demo.check(
            body.contains(metric),
            &format!("the webhook's /metrics lacks {metric}"),
        );
    }
    Ok(())
}

/// Namespace containment: a namespace holding a protected object is not deleted,
/// and nothing inside it is.
pub async fn namespace_containment(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "Namespace containment — never a half-deleted namespace",
        "design contract: the seeds' half-deleted namespaces, beaten (a namespace holding a protected object is refused whole)",
    );
    demo.say("Namespace orders: a label-protected PVC and two ConfigMaps");
    demo.succeeds(env, "create namespace orders", "namespace/orders created")?;
    demo.apply(
        env,
        None,
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: orders\n  labels: {holdfast.dev/protected: \"true\"}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n",
        &["persistentvolumeclaim/data created"],
    )?;
    for cm in ["a", "b"] {
        demo.run(
            env,
            &[
                "create",
                "configmap",
                cm,
                "-n",
                "orders",
                "--from-literal=k=v",
            ],
            Expect::Succeeds,
            &["created"],
        )?;
    }
    demo.say("Deleting the namespace is refused, naming the PVC");
    demo.settled_refusal(env, "delete namespace orders", "holdfast: Namespace orders holds objects that are protected from deletion: PersistentVolumeClaim orders/data (label)").await?;
    demo.say("Nothing inside was deleted, and the namespace is not terminating");
    demo.run(
        env,
        &["get", "pvc,configmaps", "-n", "orders", "-o", "name"],
        Expect::Succeeds,
        &["persistentvolumeclaim/data", "configmap/a", "configmap/b"],
    )?;
    demo.succeeds(env, "get namespace orders", "Active")?;
    Ok(())
}

/// A VPC and a VirtualMachine using it (in namespace default), and what kubectl
/// prints applying them.
pub const VPC_AND_VM: &str = "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {name: my-vpc, namespace: default}\n---\n\
     apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {name: my-vm, namespace: default}\nspec: {vpcRef: {name: my-vpc}}\n";
pub const VPC_AND_VM_CREATED: [&str; 2] = [
    "vpc.network.test.io/my-vpc created",
    "virtualmachine.compute.test.io/my-vm created",
];

/// DependencyRule on Kubernetes: a VPC cannot go while a VM references it.
pub async fn dependency_rule(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "DependencyRule — a VPC still used by a VirtualMachine",
        "seed 003 (kcp dependency-controller), here in one Kubernetes cluster",
    );
    setup_crds(
        demo,
        env,
        &holdfast_e2e::fixtures::vpc_vm_crds(),
        "virtualmachines",
        "CRDs vpcs.network.test.io and virtualmachines.compute.test.io",
    )
    .await;
    demo.settle(env, &["get", "vpcs"], 10, allowed).await;
    demo.say("VirtualMachines reference their VPC at .spec.vpcRef.name");
    demo.apply(
        env,
        None,
        &holdfast_e2e::fixtures::vm_vpc_rule(".spec.vpcRef.name"),
        &["dependencyrule.holdfast.dev/vm-dependencies created"],
    )?;
    demo.apply(env, None, VPC_AND_VM, &VPC_AND_VM_CREATED)?;
    demo.say("The VPC is refused while the VM uses it");
    demo.settled_refusal(env, "delete vpc my-vpc", "holdfast: VPC default/my-vpc is still referenced by VirtualMachine default/my-vm (policy: DependencyRule/vm-dependencies").await?;
    demo.say("Delete the VM first; then the VPC goes");
    demo.succeeds(
        env,
        "delete virtualmachine my-vm",
        "virtualmachine.compute.test.io \"my-vm\" deleted",
    )?;
    demo.settle_allowed(env, "delete vpc my-vpc").await;
    demo.succeeds(
        env,
        "delete vpc my-vpc",
        "vpc.network.test.io \"my-vpc\" deleted",
    )?;
    Ok(())
}

const ANCHOR_RULE: &str = holdfast_e2e::fixtures::APPCAT_ANCHOR_RULE;

const INSTANCE: &str = "apiVersion: v1
kind: Namespace
metadata: {name: vshn-postgresql-pg-1, labels: {appcat.vshn.io/composite-name: pg-1}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-0, namespace: vshn-postgresql-pg-1}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: appcat.vshn.io/v1
kind: XObjectBucket
metadata: {name: pg-1-backup, labels: {appcat.vshn.io/composite-name: pg-1}}
";

fn composite(toggle: &str) -> String {
    format!(
        "apiVersion: vshn.appcat.vshn.io/v1\nkind: XVSHNPostgreSQL\nmetadata: {{name: pg-1}}\nspec: {{parameters: {{backup: {{deletionProtection: {toggle}}}}}}}\n"
    )
}

/// AnchorRule: an AppCat-style composite protects its namespace, PVCs and bucket
/// while its toggle is true.
pub async fn anchor_rule(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "AnchorRule — lifecycle protection by a composite",
        "seed 000 (AppCat: an instance's namespace, PVCs and bucket protected while the composite lives and opts in)",
    );
    setup_crds(
        demo,
        env,
        &holdfast_e2e::fixtures::appcat_crds(),
        "xobjectbuckets",
        "CRDs xvshnpostgresqls.vshn.appcat.vshn.io and xobjectbuckets.appcat.vshn.io",
    )
    .await;
    demo.settle(env, &["get", "xvshnpostgresqls"], 10, allowed)
        .await;
    demo.say("The rule, a PostgreSQL composite pg-1 with deletion protection on, and its parts");
    demo.apply(
        env,
        None,
        ANCHOR_RULE,
        &["anchorrule.holdfast.dev/appcat created"],
    )?;
    demo.apply(
        env,
        None,
        &composite("true"),
        &["xvshnpostgresql.vshn.appcat.vshn.io/pg-1 created"],
    )?;
    demo.apply(
        env,
        None,
        INSTANCE,
        &[
            "namespace/vshn-postgresql-pg-1 created",
            "persistentvolumeclaim/data-0 created",
            "xobjectbucket.appcat.vshn.io/pg-1-backup created",
        ],
    )?;
    for args in [
        ["delete", "xobjectbucket", "pg-1-backup", "--dry-run=server"].as_slice(),
        [
            "delete",
            "pvc",
            "data-0",
            "-n",
            "vshn-postgresql-pg-1",
            "--dry-run=server",
        ]
        .as_slice(),
    ] {
        demo.settle(env, args, 15, refused).await;
    }

    let protected_by = "is protected while its anchor xvshnpostgresqls.vshn.appcat.vshn.io pg-1 exists and has .spec.parameters.backup.deletionProtection=true";
    demo.say("The instance namespace, its PVC and the bucket are refused");
    demo.run(
        env,
        &["delete", "pvc", "data-0", "-n", "vshn-postgresql-pg-1"],
        Expect::Refused,
        &[
            "holdfast: PersistentVolumeClaim vshn-postgresql-pg-1/data-0",
            protected_by,
        ],
    )?;
    demo.run(
        env,
        &["delete", "xobjectbucket", "pg-1-backup"],
        Expect::Refused,
        &["holdfast: XObjectBucket pg-1-backup", protected_by],
    )?;
    demo.run(
        env,
        &["delete", "namespace", "vshn-postgresql-pg-1"],
        Expect::Refused,
        &["holdfast: Namespace vshn-postgresql-pg-1", protected_by],
    )?;

    demo.say("Turn the toggle off: the parts become deletable");
    demo.apply(
        env,
        None,
        &composite("false"),
        &["xvshnpostgresql.vshn.appcat.vshn.io/pg-1 configured"],
    )?;
    demo.settle_allowed(env, "delete xobjectbucket pg-1-backup")
        .await;
    demo.succeeds(
        env,
        "delete xobjectbucket pg-1-backup",
        "\"pg-1-backup\" deleted",
    )?;
    demo.succeeds(
        env,
        "delete pvc data-0 -n vshn-postgresql-pg-1",
        "persistentvolumeclaim \"data-0\" deleted",
    )?;
    demo.succeeds(
        env,
        "delete namespace vshn-postgresql-pg-1 --wait=false",
        "namespace \"vshn-postgresql-pg-1\" deleted",
    )?;
    Ok(())
}

const CRITICAL: &str = holdfast_e2e::fixtures::FINALIZER_CRITICAL_SERVICE;

const PROVIDER: [&str; 5] = [
    "delete",
    "deployment",
    "finalizer-deployment",
    "-n",
    "finalizer-namespace",
];

/// CriticalService: the Deployment processing a finalizer outlives the objects that
/// carry it, and its CRD.
pub async fn critical_service(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "CriticalService — the finalizer's Deployment goes last",
        "seed 002 (CriticalService: the provider cannot go while objects carry its finalizer or its CRD exists)",
    );
    setup_crds(
        demo,
        env,
        &holdfast_e2e::fixtures::cool_crd(),
        "coolresources",
        "CRD coolresources.my.crd.group",
    )
    .await;
    demo.say("A Deployment that processes the finalizer, an instance carrying it, and the CriticalService");
    demo.succeeds(env, "create namespace finalizer-namespace", "created")?;
    demo.succeeds(env, "create deployment finalizer-deployment -n finalizer-namespace --image=registry.example/finalizer:1", "deployment.apps/finalizer-deployment created")?;
    demo.apply(
        env,
        None,
        "apiVersion: my.crd.group/v1\nkind: CoolResource\nmetadata:\n  name: some-instance\n  finalizers: [my.crd.group/super-important]\n",
        &["coolresource.my.crd.group/some-instance created"],
    )?;
    demo.apply(
        env,
        None,
        CRITICAL,
        &["criticalservice.holdfast.dev/for-finalizer-deployment created"],
    )?;
    let mut dry = PROVIDER.to_vec();
    dry.push("--dry-run=server");
    demo.settle(env, &dry, 15, refused).await;

    demo.say("The provider is refused while an instance carries the finalizer");
    demo.run(
        env,
        &PROVIDER,
        Expect::Refused,
        &["1 coolresources.my.crd.group still carries finalizer my.crd.group/super-important"],
    )?;
    demo.refused(
        env,
        "delete criticalservice for-finalizer-deployment",
        "holdfast: CriticalService for-finalizer-deployment",
    )?;

    demo.say("Delete the instance; the provider's controller removes the finalizer");
    demo.succeeds(
        env,
        "delete coolresource some-instance --wait=false",
        "coolresource.my.crd.group \"some-instance\" deleted",
    )?;
    demo.run(
        env,
        &merge_patch("coolresource some-instance", NO_FINALIZERS),
        Expect::Succeeds,
        &["patched"],
    )?;
    demo.settle(env, &dry, 15, |o| {
        !o.stderr.contains("still carries finalizer")
    })
    .await;

    demo.say("The CRD still exists: the provider is still needed");
    demo.run(
        env,
        &PROVIDER,
        Expect::Refused,
        &["customresourcedefinitions", "coolresources.my.crd.group"],
    )?;
    demo.succeeds(
        env,
        "delete crd coolresources.my.crd.group",
        "\"coolresources.my.crd.group\" deleted",
    )?;

    demo.say("Now, in order: the provider, then the CriticalService");
    demo.settle(env, &dry, 15, allowed).await;
    demo.run(
        env,
        &PROVIDER,
        Expect::Succeeds,
        &["deployment.apps \"finalizer-deployment\" deleted"],
    )?;
    demo.settle(
        env,
        &words("delete criticalservice for-finalizer-deployment --dry-run=server"),
        15,
        allowed,
    )
    .await;
    demo.succeeds(
        env,
        "delete criticalservice for-finalizer-deployment",
        "criticalservice.holdfast.dev \"for-finalizer-deployment\" deleted",
    )?;
    Ok(())
}
