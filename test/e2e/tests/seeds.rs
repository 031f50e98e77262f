//! Promises of the five seed designs that only these tests show end to end, each
//! with the real controller installing the configuration, the real webhook deciding
//! and the real kubectl against the simulator: seed 002's own CriticalService YAML
//! (the specific resource named by kind), seed 004's one CRD out of strict mode and
//! the conditions the README promises on every policy kind; and what had unit tests
//! only: a namespaced anchor and the allow-deletion override, cross-namespace and
//! terminating references, strict mode over an extra key and an exempt object still
//! refused on DELETE, and every metric the README lists.

use holdfast_e2e::fixtures;
use holdfast_e2e::steps::wait_ready;
use holdfast_e2e::steps::wait_webhook_installed;
use holdfast_e2e::steps::{NO_FINALIZERS, merge_patch};
use holdfast_e2e::{
    Env,
    controller::{ControllerProcess, start_controller, wait_condition, wait_configuration},
    steps::words,
    steps::{allowed_until, refused_until},
};
use std::time::Duration;

async fn full_stack(webhook_args: &[&str], controller_args: &[&str]) -> (Env, ControllerProcess) {
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    env.start_webhook(webhook_args).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let mut c = start_controller(&env, "controller", port, controller_args).expect("controller");
    c.wait_ready(30).await.expect("controller ready");
    (env, c)
}

/// Applies the CRDs `crds` and waits until each of `resources` is served.
async fn install_crds(env: &Env, crds: &[String], resources: &[&str]) {
    env.apply_crds(&fixtures::documents(crds)).expect("crds");
    for r in resources {
        env.wait_served(&[r]).await;
    }
}

/// [`full_stack`] without flags, with the CRDs `crds` installed and each of
/// `resources` served.
async fn stack_with_crds(crds: &[String], resources: &[&str]) -> (Env, ControllerProcess) {
    let (env, c) = full_stack(&[], &[]).await;
    install_crds(&env, crds, resources).await;
    (env, c)
}

/// Waits until the live configuration sends DELETEs of `resource` to the webhook.
async fn covered(env: &Env, group: &str, resource: &str) {
    wait_configuration(env, Duration::from_secs(30), |cfg| {
        cfg.is_some_and(|c| {
            c["webhooks"].as_array().into_iter().flatten().any(|w| {
                w["rules"].as_array().into_iter().flatten().any(|r| {
                    let has = |field: &str, v: &str| {
                        r[field].as_array().into_iter().flatten().any(|x| x == v)
                    };
                    has("apiGroups", group)
                        && has("resources", resource)
                        && has("operations", "DELETE")
                })
            })
        })
    })
    .await
    .expect("configuration covers the resource");
}

/// Seed 002's CriticalService, exactly as the seed writes it (a comment header aside).
const SEED_002_CRITICAL_SERVICE: &str = include_str!("../fixtures/seeds/002-critical-service.yaml");

/// Seed 002's own CriticalService YAML, applied verbatim but for one thing: the
/// provider's namespace (`finalizer-namespace` in the seed) is the test's own,
/// substituted by the test (the same name on a simulator, a unique one on a
/// cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_002_critical_service_yaml_applies_verbatim_and_orders_deletion() {
    let (env, _c) = full_stack(&[], &[]).await;
    env.apply_crds(&fixtures::cool_crd()).expect("crd");
    env.wait_served(&["coolresources"]).await;
    let ns = env.namespace("finalizer-namespace").expect("namespace");
    env.run(&words(&format!(
        "create deployment finalizer-deployment -n {ns} --image=registry.example/finalizer:1"
    )));
    env.apply(
        "apiVersion: my.crd.group/v1\nkind: CoolResource\nmetadata: {name: some-instance, finalizers: [my.crd.group/super-important]}\n",
    )
    .expect("instance");

    // The seed's YAML, with only what the API server requires and the seed omits,
    // and the provider in the test's namespace.
    const SEED_NAMESPACE: &str = "    namespace: finalizer-namespace\n";
    assert_eq!(
        SEED_002_CRITICAL_SERVICE.matches(SEED_NAMESPACE).count(),
        1,
        "the seed names its provider's namespace once"
    );
    let seed = SEED_002_CRITICAL_SERVICE.replace(SEED_NAMESPACE, &format!("    namespace: {ns}\n"));
    let manifest = format!(
        "apiVersion: holdfast.dev/v1alpha1\nmetadata: {{name: for-finalizer-deployment}}\n{seed}"
    );
    let out = env.apply(&manifest).expect("kubectl");
    assert_eq!(
        out.code, 0,
        "the seed's own CriticalService is accepted: {out:?}"
    );
    let stored = env
        .get_json(&["criticalservice", "for-finalizer-deployment"])
        .expect("stored");
    assert_eq!(
        stored["spec"]["criteria"][1]["specificResource"]["resource"], "CustomResourceDefinition",
        "{stored}"
    );
    // The controller finds it valid and enforced.
    let invalid = wait_condition(
        &env,
        "criticalservice",
        "for-finalizer-deployment",
        "Invalid",
        "False",
        30,
    )
    .await
    .expect("valid");
    assert_eq!(invalid["reason"], "Valid", "{invalid}");
    wait_ready(&env, "criticalservice", "for-finalizer-deployment").await;
    covered(&env, "apps", "deployments").await;

    let provider = [
        "delete",
        "deployment",
        "finalizer-deployment",
        "-n",
        &ns,
        "--dry-run=server",
    ];
    // Both criteria hold: the finalizer on the instance, and the CRD named by kind.
    let out = refused_until(
        &env,
        &provider,
        "1 coolresources.my.crd.group still carries finalizer my.crd.group/super-important",
    )
    .await;
    assert!(
        out.stderr.contains(
            "CustomResourceDefinition.apiextensions.k8s.io coolresources.my.crd.group still exists"
        ),
        "{out:?}"
    );
    // The finalizer is processed and the instance goes: the CRD (named by kind) still holds.
    env.run(&merge_patch("coolresource some-instance", NO_FINALIZERS));
    env.run(&["delete", "coolresource", "some-instance"]);
    let out = refused_until(
        &env,
        &provider,
        "CustomResourceDefinition.apiextensions.k8s.io coolresources.my.crd.group still exists",
    )
    .await;
    assert!(!out.stderr.contains("still carries finalizer"), "{out:?}");
    // The CriticalService itself stays while its provider exists.
    refused_until(
        &env,
        &[
            "delete",
            "criticalservice",
            "for-finalizer-deployment",
            "--dry-run=server",
        ],
        &format!(
            "cannot be deleted while its provider deployments.apps {ns}/finalizer-deployment exists"
        ),
    )
    .await;
    // The CRD goes: nothing holds the provider any more, then the CriticalService.
    env.run(&["delete", "crd", "coolresources.my.crd.group"]);
    allowed_until(
        &env,
        &["delete", "deployment", "finalizer-deployment", "-n", &ns],
    )
    .await;
    allowed_until(
        &env,
        &["delete", "criticalservice", "for-finalizer-deployment"],
    )
    .await;
}

/// Waits until the live configuration has the strict label webhook for the first key.
async fn strict_label_webhook_installed(env: &Env) {
    wait_webhook_installed(env, "strict-label-0.holdfast.dev").await;
}

fn strict_refusal(kind: &str, name: &str) -> String {
    holdfast_e2e::denied_by(
        "strict-label-0.holdfast.dev",
        &format!(
            "holdfast: {kind} {name} carries the protection label holdfast.dev/protected=true and \
             strict mode is on"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_004_one_crd_out_of_strict_mode() {
    let (env, _c) = full_stack(&["--strict"], &["--strict"]).await;
    let ns = env.default_namespace().expect("namespace");
    install_crds(
        &env,
        &[fixtures::widget_crd(), fixtures::cool_crd()],
        &["widgets", "coolresources"],
    )
    .await;
    strict_label_webhook_installed(&env).await;
    for w in ["w1", "w2"] {
        env.apply(&format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: {w}, namespace: {ns}, labels: {{holdfast.dev/protected: \"true\"}}}}\n"
        ))
        .expect("widget");
    }
    env.apply(
        "apiVersion: my.crd.group/v1\nkind: CoolResource\nmetadata: {name: c1, labels: {holdfast.dev/protected: \"true\"}}\n",
    )
    .expect("cool resource");
    let unlabel_w1 = ["label", "widget", "w1", "holdfast.dev/protected-"];
    let unlabel_c1 = ["label", "coolresource", "c1", "holdfast.dev/protected-"];
    // The whole installation is strict: neither label may go.
    env.refuses_with(&unlabel_w1, &strict_refusal("Widget", &format!("{ns}/w1")));
    env.refuses_with(&unlabel_c1, &strict_refusal("CoolResource", "c1"));

    // The widgets CRD opts out of strict mode.
    env.run(&words(
        "label crd widgets.example.com holdfast.dev/strict-exempt=true",
    ));
    // Its instances still cannot be deleted while labelled...
    env.refuses_with(
        &["delete", "widget", "w1", "--dry-run=server"],
        &format!(
            "holdfast: Widget {ns}/w1 is protected by label holdfast.dev/protected=true \
             (policy: label holdfast.dev/protected), so it cannot be deleted."
        ),
    );
    // ...but the label may be removed (the webhook reads the CRD's label), and then
    // the widget deleted.
    let mut dry_run = unlabel_w1.to_vec();
    dry_run.push("--dry-run=server");
    allowed_until(&env, &dry_run).await;
    env.attempt(&unlabel_w1)
        .ok()
        .expect("label removed from an instance of the exempt CRD");
    let w1 = env.get_json(&["widget", "w1"]).expect("w1");
    assert!(
        w1["metadata"]["labels"]
            .get("holdfast.dev/protected")
            .is_none(),
        "{w1}"
    );
    env.run(&["delete", "widget", "w1"]);
    // Every other CRD stays strict.
    env.refuses_with(&unlabel_c1, &strict_refusal("CoolResource", "c1"));

    // The opt-out taken back: the widgets are strict again.
    env.run(&words(
        "label crd widgets.example.com holdfast.dev/strict-exempt-",
    ));
    refused_until(
        &env,
        &words("label widget w2 holdfast.dev/protected- --dry-run=server"),
        &strict_refusal("Widget", &format!("{ns}/w2")),
    )
    .await;
}

/// The conditions the README promises: `Ready`, `Installed` and `Invalid` (and
/// `observedGeneration`) on every policy object, `CycleDetected` on DependencyRules only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditions_on_every_policy_kind_as_the_readme_says() {
    let (env, _c) = stack_with_crds(
        &[
            fixtures::widget_crd(),
            fixtures::appcat_crds(),
            fixtures::vpc_vm_crds(),
        ],
        &[
            "widgets",
            "xvshnpostgresqls",
            "xobjectbuckets",
            "vpcs",
            "virtualmachines",
        ],
    )
    .await;
    let ns = env.default_namespace().expect("namespace");
    env.apply(&fixtures::documents(&[
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {name: widgets}\n\
         spec:\n  resources:\n  - {group: example.com, version: v1, resource: widgets}\n"
            .to_string(),
        "apiVersion: holdfast.dev/v1alpha1\nkind: AnchorRule\nmetadata: {name: appcat}\n\
         spec:\n  anchor: {group: vshn.appcat.vshn.io, version: v1, resource: xvshnpostgresqls}\n  \
         anchorLabels: {name: appcat.vshn.io/composite-name}\n  \
         protects:\n  - {group: appcat.vshn.io, version: v1, resource: xobjectbuckets}\n"
            .to_string(),
        fixtures::vm_vpc_rule(".spec.vpcRef.name"),
        format!(
            "apiVersion: holdfast.dev/v1alpha1\nkind: CriticalService\nmetadata: {{name: provider}}\n\
             spec:\n  provider: {{group: apps, resource: deployments, namespace: {ns}, name: provider}}\n  \
             criteria:\n  - type: SpecificResource\n    specificResource: {{group: example.com, resource: Widget, namespace: {ns}, name: w}}\n"
        ),
    ]))
    .expect("policies");
    let policies = [
        ("resourceprotection", "widgets", false),
        ("anchorrule", "appcat", false),
        ("dependencyrule", "vm-dependencies", true),
        ("criticalservice", "provider", false),
    ];
    for (kind, name, _) in policies {
        wait_condition(&env, kind, name, "Ready", "True", 30)
            .await
            .unwrap_or_else(|e| panic!("{kind}/{name} ready: {e:#}"));
    }
    for (kind, name, dependency_rule) in policies {
        let obj = env.get_json(&[kind, name]).expect("policy");
        let conditions: Vec<(String, String, String)> = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
                (s("type"), s("status"), s("reason"))
            })
            .collect();
        let mut want = vec![
            ("Ready", "True", "Enforced"),
            ("Installed", "True", "WebhookInstalled"),
            ("Invalid", "False", "Valid"),
        ];
        if dependency_rule {
            want.push(("CycleDetected", "False", "NoCycle"));
        }
        let want: Vec<(String, String, String)> = want
            .into_iter()
            .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
            .collect();
        assert_eq!(conditions, want, "{kind}/{name}: {obj}");
        assert_eq!(
            obj["status"]["observedGeneration"], obj["metadata"]["generation"],
            "{kind}/{name}: {obj}"
        );
        assert!(obj["metadata"]["generation"].as_i64().is_some(), "{obj}");
    }
}

/// Seed 000 with a namespaced anchor: the claim lives in a namespace, the protected
/// (cluster-scoped) bucket names it with the composite-name and composite-namespace
/// labels; `appcat.vshn.io/webhook-allowdeletion=true` on the bucket lifts the
/// AnchorRule's protection for exactly that object.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_000_namespaced_anchor_and_the_allowdeletion_override() {
    let (env, _c) = stack_with_crds(
        &[
            fixtures::crd(
                "vshn.appcat.vshn.io",
                "vshnpostgresqls",
                "VSHNPostgreSQL",
                true,
            ),
            fixtures::crd("appcat.vshn.io", "xobjectbuckets", "XObjectBucket", false),
        ],
        &["vshnpostgresqls", "xobjectbuckets"],
    )
    .await;
    env.apply(
        "apiVersion: holdfast.dev/v1alpha1\nkind: AnchorRule\nmetadata: {name: claims}\nspec:\n  \
         anchor: {group: vshn.appcat.vshn.io, version: v1, resource: vshnpostgresqls}\n  \
         anchorLabels: {name: appcat.vshn.io/composite-name, namespace: appcat.vshn.io/composite-namespace}\n  \
         protects:\n  - {group: appcat.vshn.io, version: v1, resource: xobjectbuckets}\n",
    )
    .expect("anchor rule");
    let team_a = env.namespace("team-a").expect("namespace");
    let team_b = env.namespace("team-b").expect("namespace");
    env.apply(&format!(
        "apiVersion: vshn.appcat.vshn.io/v1\nkind: VSHNPostgreSQL\nmetadata: {{name: pg-1, namespace: {team_a}}}\n",
    ))
    .expect("claim");
    let bucket = |name: &str, ns: &str, extra: &str| {
        format!(
            "apiVersion: appcat.vshn.io/v1\nkind: XObjectBucket\nmetadata:\n  name: {name}\n  labels:\n    \
             appcat.vshn.io/composite-name: pg-1\n    appcat.vshn.io/composite-namespace: {ns}\n{extra}"
        )
    };
    env.apply(&bucket("bucket-a", &team_a, ""))
        .expect("bucket a");
    // The same composite name in another namespace, where no claim lives.
    env.apply(&bucket("bucket-b", &team_b, ""))
        .expect("bucket b");
    wait_ready(&env, "anchorrule", "claims").await;
    covered(&env, "appcat.vshn.io", "xobjectbuckets").await;

    // The anchor is read in the namespace the label names.
    let refusal = holdfast_e2e::denied_by(
        "policies-0.holdfast.dev",
        &format!(
            "holdfast: XObjectBucket bucket-a is protected while its anchor \
             vshnpostgresqls.vshn.appcat.vshn.io {team_a}/pg-1 exists (policy: AnchorRule/claims), \
             so it cannot be deleted. To delete it, delete the anchor, or label this object \
             holdfast.dev/allow-deletion=true."
        ),
    );
    refused_until(
        &env,
        &["delete", "xobjectbucket", "bucket-a", "--dry-run=server"],
        &refusal,
    )
    .await;
    // No claim pg-1 in team-b: that bucket is not protected.
    env.prints(
        &["delete", "xobjectbucket", "bucket-b"],
        "xobjectbucket.appcat.vshn.io \"bucket-b\" deleted\n",
    );

    // The override counts with the value `true` only.
    env.run(&words(
        "label xobjectbucket bucket-a appcat.vshn.io/webhook-allowdeletion=yes",
    ));
    env.refuses_with(
        &["delete", "xobjectbucket", "bucket-a", "--dry-run=server"],
        &refusal,
    );
    env.run(&words(
        "label --overwrite xobjectbucket bucket-a appcat.vshn.io/webhook-allowdeletion=true",
    ));
    env.prints(
        &["delete", "xobjectbucket", "bucket-a"],
        "xobjectbucket.appcat.vshn.io \"bucket-a\" deleted\n",
    );
    assert!(
        !env.exists(&["xobjectbucket", "bucket-a"])
            .expect("kubectl get")
    );
    // The honoured override leaves a BreakGlass Event on the bucket.
    let events = env
        .wait_events("BreakGlass", "bucket-a", 30)
        .await
        .expect("BreakGlass Event");
    assert_eq!(
        events[0]["note"],
        format!(
            "{} deleted it past its protection with the break-glass marker",
            env.whoami()
        ),
        "{events:?}"
    );
    assert_eq!(
        events[0]["regarding"]["kind"], "XObjectBucket",
        "{events:?}"
    );

    // The claim goes: the buckets it anchored are deletable.
    env.apply(&bucket("bucket-c", &team_a, ""))
        .expect("bucket c");
    refused_until(
        &env,
        &["delete", "xobjectbucket", "bucket-c", "--dry-run=server"],
        &format!(
            "holdfast: XObjectBucket bucket-c is protected while its anchor \
             vshnpostgresqls.vshn.appcat.vshn.io {team_a}/pg-1 exists"
        ),
    )
    .await;
    env.run(&["delete", "vshnpostgresql", "pg-1", "-n", &team_a]);
    allowed_until(&env, &["delete", "xobjectbucket", "bucket-c"]).await;
}

/// Seed 003 across namespaces: the reference names its namespace
/// (`namespaceFieldRef`); a referencing object that is being deleted (held by a
/// finalizer) still blocks until it is gone. Run with both dependents strategies.
async fn cross_namespace_and_terminating_references(mode: &str) {
    let (env, _c) = full_stack(&["--dependents", mode], &[]).await;
    env.apply_crds(&fixtures::vpc_vm_crds()).expect("crds");
    for r in ["vpcs", "virtualmachines"] {
        env.wait_served(&[r]).await;
    }
    env.apply(
        "apiVersion: holdfast.dev/v1alpha1\nkind: DependencyRule\nmetadata: {name: vm-vpcs}\nspec:\n  \
         dependent: {group: compute.test.io, version: v1, kind: VirtualMachine, resource: virtualmachines}\n  \
         dependencies:\n  - group: network.test.io\n    version: v1\n    resource: vpcs\n    \
         fieldRef: {path: .spec.vpcRef.name}\n    namespaceFieldRef: {path: .spec.vpcRef.namespace}\n",
    )
    .expect("rule");
    let network = env.namespace("network").expect("namespace");
    let apps = env.namespace("apps").expect("namespace");
    for ns in [&network, &apps] {
        env.apply(&format!(
            "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {{name: net, namespace: {ns}}}\n"
        ))
        .expect("vpc");
    }
    // A VM in apps referencing the VPC in network, held by a finalizer.
    env.apply(&format!(
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {{name: vm-1, namespace: {apps}, \
         finalizers: [compute.test.io/teardown]}}\nspec: {{vpcRef: {{name: net, namespace: {network}}}}}\n",
    ))
    .expect("vm");
    wait_ready(&env, "dependencyrule", "vm-vpcs").await;
    covered(&env, "network.test.io", "vpcs").await;

    let refusal = |note: &str| {
        holdfast_e2e::denied_by(
            "policies-0.holdfast.dev",
            &format!(
                "holdfast: VPC {network}/net is still referenced by VirtualMachine {apps}/vm-1{note} \
                 (policy: DependencyRule/vm-vpcs, field .spec.vpcRef.name of \
                 virtualmachines.compute.test.io), so it cannot be deleted. To delete it, delete \
                 or change the dependents first, or set the annotation \
                 holdfast.dev/skip-protection=true if you are allowed to bypass protection."
            ),
        )
    };
    refused_until(
        &env,
        &["delete", "vpc", "net", "-n", &network, "--dry-run=server"],
        &refusal(""),
    )
    .await;
    // The VPC of the same name in the VM's own namespace is not the one referenced.
    env.prints(
        &["delete", "vpc", "net", "-n", &apps],
        "vpc.network.test.io \"net\" deleted\n",
    );

    // The VM is being deleted but still exists (its finalizer holds it): it still blocks.
    env.run(&[
        "delete",
        "virtualmachine",
        "vm-1",
        "-n",
        &apps,
        "--wait=false",
    ]);
    let vm = env
        .get_json(&["virtualmachine", "vm-1", "-n", &apps])
        .expect("vm still there");
    assert!(vm["metadata"]["deletionTimestamp"].is_string(), "{vm}");
    refused_until(
        &env,
        &["delete", "vpc", "net", "-n", &network, "--dry-run=server"],
        &refusal(" (terminating)"),
    )
    .await;

    // The finalizer done, the VM goes, and with it the reference.
    let vm_target = format!("virtualmachine vm-1 -n {apps}");
    env.run(&merge_patch(&vm_target, NO_FINALIZERS));
    env.kubectl_until(&["get", "virtualmachine", "vm-1", "-n", &apps], 30, |o| {
        o.is_not_found()
    })
    .await
    .expect("vm gone");
    allowed_until(&env, &["delete", "vpc", "net", "-n", &network]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_003_cross_namespace_and_terminating_references_watch() {
    cross_namespace_and_terminating_references("watch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_003_cross_namespace_and_terminating_references_live() {
    cross_namespace_and_terminating_references("live").await;
}

/// Seed 004's own key under strict mode: `orkestra.io/deletion-protection=true`
/// added with `--protection-label` is guarded like the built-in key; an object
/// marked exempt may lose the label but is still refused on DELETE while it has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_004_strict_mode_over_an_extra_key_and_exempt_objects_still_protected() {
    let flags = words("--strict --protection-label orkestra.io/deletion-protection=true");
    let (env, _c) = full_stack(&flags, &flags).await;
    wait_webhook_installed(&env, "strict-label-1.holdfast.dev").await;
    let ns = env.default_namespace().expect("namespace");
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app, namespace: {ns}, labels: {{orkestra.io/deletion-protection: \"true\"}}}}\ndata: {{a: b}}\n",
    ))
    .expect("configmap");
    let unlabel = words("label configmap app orkestra.io/deletion-protection-");
    env.refuses_with(
        &unlabel,
        &holdfast_e2e::denied_by(
            "strict-label-1.holdfast.dev",
            &format!(
                "holdfast: ConfigMap {ns}/app carries the protection label \
                 orkestra.io/deletion-protection=true and strict mode is on (policy: strict label \
                 orkestra.io/deletion-protection), so the label cannot be removed or changed to a \
                 value that does not protect."
            ),
        ),
    );
    // Marked exempt (by an administrator: it takes the bypass permission, as
    // `protections::break_glass_needs_the_bypass_permission_and_leaves_events` shows).
    let exempt = words("label configmap app holdfast.dev/strict-exempt=true");
    env.attempt(&exempt).ok().expect("marked exempt");
    // Exempt is not deletable: the DELETE is still refused while the label is there.
    let delete_refusal = holdfast_e2e::denied_by(
        "delete-label-1.holdfast.dev",
        &format!(
            "holdfast: ConfigMap {ns}/app is protected by label \
             orkestra.io/deletion-protection=true (policy: label orkestra.io/deletion-protection), \
             so it cannot be deleted."
        ),
    );
    env.refuses_with(&["delete", "configmap", "app"], &delete_refusal);
    assert!(env.exists(&["configmap", "app"]).expect("kubectl get"));
    // The stored exemption lets the label go; then the DELETE passes.
    env.attempt(&unlabel)
        .ok()
        .expect("label removed from the exempt object");
    env.prints(
        &["delete", "configmap", "app"],
        "configmap \"app\" deleted\n",
    );
}

/// Every metric family the README lists on `/metrics`, each moved by something the
/// test does and read back by its exact series.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_metric_the_readme_lists() {
    let (env, _c) = full_stack(
        &["--dependents", "watch", "--read-timeout-seconds", "1"],
        &[],
    )
    .await;
    let (port, probe) = env
        .webhook
        .as_ref()
        .map(|w| (w.port, w.probe_port))
        .expect("webhook");
    install_crds(
        &env,
        &[fixtures::widget_crd(), fixtures::vpc_vm_crds()],
        &["widgets", "vpcs", "virtualmachines"],
    )
    .await;
    env.apply(&fixtures::documents(&[
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {name: widgets}\n\
         spec:\n  enforcement: Audit\n  resources:\n  - {group: example.com, version: v1, resource: widgets}\n"
            .to_string(),
        fixtures::vm_vpc_rule(".spec.vpcRef.name"),
    ]))
    .expect("policies");
    let ns = env.default_namespace().expect("namespace");
    env.apply(&fixtures::documents(&[
        format!("apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {{name: net, namespace: {ns}}}\n"),
        format!("apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {{name: vm, namespace: {ns}}}\nspec: {{vpcRef: {{name: net}}}}\n"),
        format!("apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w, namespace: {ns}}}\n"),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: locked, namespace: {ns}, labels: {{holdfast.dev/protected: \"true\"}}}}\n"),
    ]))
    .expect("objects");
    for (kind, name) in [
        ("resourceprotection", "widgets"),
        ("dependencyrule", "vm-dependencies"),
    ] {
        wait_ready(&env, kind, name).await;
    }
    covered(&env, "network.test.io", "vpcs").await;
    covered(&env, "example.com", "widgets").await;
    // Registry and index sizes, index sync state, readiness, per-cluster clients (none
    // outside kcp): gauges refreshed in the background, so waited for.
    for (series, want) in [
        (
            "holdfast_webhook_registry_policies{kind=\"ResourceProtection\"}",
            1.0,
        ),
        (
            "holdfast_webhook_registry_policies{kind=\"DependencyRule\"}",
            1.0,
        ),
        (
            "holdfast_webhook_registry_policies{kind=\"AnchorRule\"}",
            0.0,
        ),
        (
            "holdfast_webhook_registry_policies{kind=\"CriticalService\"}",
            0.0,
        ),
        ("holdfast_webhook_dependents_index_references", 1.0),
        ("holdfast_webhook_dependents_index_resources", 1.0),
        ("holdfast_webhook_dependents_index_unsynced", 0.0),
        ("holdfast_webhook_ready", 1.0),
        ("holdfast_webhook_cluster_clients", 0.0),
    ] {
        wait_metric(probe, series, want).await;
    }

    // Requests by operation, decision and policy; dependents lookups; audited
    // deletions; Events by outcome.
    refused_until(
        &env,
        &["delete", "vpc", "net", "--dry-run=server"],
        &format!("holdfast: VPC {ns}/net is still referenced by VirtualMachine {ns}/vm"),
    )
    .await;
    env.refuses_with(
        &["delete", "configmap", "locked"],
        &format!("holdfast: ConfigMap {ns}/locked is protected by label"),
    );
    let out = env.attempt(&["delete", "widget", "w"]);
    assert_eq!(out.code, 0, "Audit allows: {out:?}");
    let dependency_denials = metric_value(
        probe,
        "holdfast_webhook_admission_requests_total{decider=\"DependencyRule\",decision=\"deny\",operation=\"DELETE\"}",
    )
    .await;
    assert!(dependency_denials >= 1.0, "{dependency_denials}");
    for (series, want) in [
        (
            "holdfast_webhook_admission_requests_total{decider=\"label\",decision=\"deny\",operation=\"DELETE\"}",
            1.0,
        ),
        (
            "holdfast_webhook_admission_requests_total{decider=\"audit\",decision=\"allow\",operation=\"DELETE\"}",
            1.0,
        ),
        ("holdfast_webhook_audited_total{operation=\"DELETE\"}", 1.0),
        (
            "holdfast_webhook_dependents_lookups_total{source=\"index\"}",
            dependency_denials,
        ),
        // DeletionBlocked for the ConfigMap, DeletionAudited for the widget (the
        // dry runs leave none).
        ("holdfast_webhook_events_total{outcome=\"queued\"}", 2.0),
        ("holdfast_webhook_events_total{outcome=\"published\"}", 2.0),
    ] {
        wait_metric(probe, series, want).await;
    }
    // The latency histogram counts every DELETE review answered.
    let reviews = env.webhook_reviews("DELETE").await.expect("metrics") as f64;
    assert_eq!(reviews, dependency_denials + 2.0);
    wait_metric(
        probe,
        "holdfast_webhook_admission_duration_seconds_count{operation=\"DELETE\"}",
        reviews,
    )
    .await;

    // Connections closed by reason: one that never starts TLS is closed when the
    // read timeout (1 s here) runs out.
    let idle = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    wait_metric(
        probe,
        "holdfast_webhook_connections_closed_total{listener=\"admission\",reason=\"handshake_timeout\"}",
        1.0,
    )
    .await;
    drop(idle);

    // Certificate reloads: a broken certificate file is counted as an error and the
    // previous certificate keeps serving.
    std::fs::write(env.dir.path().join("tls.crt"), "not a certificate").expect("write");
    wait_metric(
        probe,
        "holdfast_webhook_tls_reloads_total{result=\"error\"}",
        1.0,
    )
    .await;
    let out = env.attempt(&["delete", "configmap", "locked", "--dry-run=server"]);
    assert!(
        out.refused_with(&format!(
            "holdfast: ConfigMap {ns}/locked is protected by label"
        )),
        "still serving: {out:?}"
    );
}

/// The value of `series` on the webhook's /metrics (absent counts as a failure).
async fn metric_value(probe: u16, series: &str) -> f64 {
    holdfast_e2e::metric(probe, series)
        .await
        .expect("metrics readable")
        .unwrap_or_else(|| panic!("{series} is not exposed"))
}

/// Waits until `series` has value `want`; fails printing the last value seen.
async fn wait_metric(probe: u16, series: &str, want: f64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = holdfast_e2e::metric(probe, series)
            .await
            .expect("metrics readable");
        if got == Some(want) {
            return;
        }
        if std::time::Instant::now() > deadline {
            let (_, body) = holdfast_e2e::http_get(probe, "/metrics")
                .await
                .unwrap_or_default();
            panic!("{series}: want {want}, last seen {got:?}\n{body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
