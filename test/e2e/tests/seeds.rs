//! Promises of the five seed designs that only these tests show end to end, each
//! with the real controller installing the configuration, the real webhook deciding
//! and the real kubectl against the simulator: seed 002's own CriticalService YAML
//! (the specific resource named by kind).

use holdfast_e2e::{
    Env, KubectlOutput,
    controller::{ControllerProcess, start_controller, wait_condition, wait_configuration},
};
use std::time::Duration;

async fn full_stack(webhook_args: &[&str], controller_args: &[&str]) -> (Env, ControllerProcess) {
    let mut env = Env::start().await.expect("sim");
    env.install_crds().expect("holdfast CRDs");
    env.start_webhook(webhook_args).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let mut c = start_controller(&env, "controller", port, controller_args).expect("controller");
    c.wait_ready(30).await.expect("controller ready");
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

/// Runs `args` until kubectl's refusal contains `text`; fails printing the last output.
async fn refused_until(env: &Env, args: &[&str], text: &str) -> KubectlOutput {
    env.kubectl_until(args, 30, |o| o.refused_with(text))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{args:?} never refused with {text:?}: {e:#}\nwebhook: {}",
                env.webhook_log()
            )
        })
}

/// Runs `args` until kubectl succeeds; fails printing the last output.
async fn allowed_until(env: &Env, args: &[&str]) -> KubectlOutput {
    env.kubectl_until(args, 30, |o| o.code == 0)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{args:?} never allowed: {e:#}\nwebhook: {}",
                env.webhook_log()
            )
        })
}

/// Seed 002's CriticalService, exactly as the seed writes it (a comment header aside).
const SEED_002_CRITICAL_SERVICE: &str = include_str!("../fixtures/seeds/002-critical-service.yaml");

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_002_critical_service_yaml_applies_verbatim_and_orders_deletion() {
    let (env, _c) = full_stack(&[], &[]).await;
    env.apply(&holdfast_e2e::fixtures::cool_crd()).expect("crd");
    env.kubectl_until(&["get", "coolresources"], 30, |o| o.code == 0)
        .await
        .expect("served");
    env.kubectl(&["create", "namespace", "finalizer-namespace"])
        .expect("kubectl")
        .ok()
        .expect("ns");
    env.kubectl(&[
        "create",
        "deployment",
        "finalizer-deployment",
        "-n",
        "finalizer-namespace",
        "--image=registry.example/finalizer:1",
    ])
    .expect("kubectl")
    .ok()
    .expect("deployment");
    env.apply(
        "apiVersion: my.crd.group/v1\nkind: CoolResource\nmetadata: {name: some-instance, finalizers: [my.crd.group/super-important]}\n",
    )
    .expect("instance");

    // The seed's YAML, with only what the API server requires and the seed omits.
    let manifest = format!(
        "apiVersion: holdfast.dev/v1alpha1\nmetadata: {{name: for-finalizer-deployment}}\n{SEED_002_CRITICAL_SERVICE}"
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
    wait_condition(
        &env,
        "criticalservice",
        "for-finalizer-deployment",
        "Ready",
        "True",
        30,
    )
    .await
    .expect("ready");
    covered(&env, "apps", "deployments").await;

    let provider = [
        "delete",
        "deployment",
        "finalizer-deployment",
        "-n",
        "finalizer-namespace",
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
    env.kubectl(&[
        "patch",
        "coolresource",
        "some-instance",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ])
    .expect("kubectl")
    .ok()
    .expect("finalizer removed");
    env.kubectl(&["delete", "coolresource", "some-instance"])
        .expect("kubectl")
        .ok()
        .expect("instance deleted");
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
        &["delete", "criticalservice", "for-finalizer-deployment", "--dry-run=server"],
        "cannot be deleted while its provider deployments.apps finalizer-namespace/finalizer-deployment exists",
    )
    .await;
    // The CRD goes: nothing holds the provider any more, then the CriticalService.
    env.kubectl(&["delete", "crd", "coolresources.my.crd.group"])
        .expect("kubectl")
        .ok()
        .expect("crd deleted");
    allowed_until(
        &env,
        &[
            "delete",
            "deployment",
            "finalizer-deployment",
            "-n",
            "finalizer-namespace",
        ],
    )
    .await;
    allowed_until(
        &env,
        &["delete", "criticalservice", "for-finalizer-deployment"],
    )
    .await;
}
