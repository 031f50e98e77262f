//! Self-protection (seed 004): holdfast's own installation, applied from
//! manifests/overlays/kubernetes as a user would, cannot be deleted by accident —
//! Namespace, Deployments, Service, CRDs, RBAC — while the controller keeps its
//! webhook configuration (which the API server never sends to webhooks) alive by
//! recreating it, and `--cleanup-on-shutdown` still removes it on a graceful stop.

use holdfast_e2e::steps::words;
use holdfast_e2e::{
    Env,
    controller::{start_controller, wait_configuration},
    denied_by_any,
};
use std::time::Duration;

/// Applies manifests/overlays/kubernetes as an administrator would
/// ([`Env::install_overlay`]: on the cluster of `HOLDFAST_E2E_KUBECONFIG` under the
/// suite's lock, refusing an installation it did not create, the Deployments
/// paused, everything removed when the env drops).
fn install(env: &Env) {
    env.install_overlay("kubernetes").expect("overlay applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holdfast_protects_its_own_installation() {
    let mut env = Env::start().await.expect("sim");
    install(&env);
    env.start_webhook(&[]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let mut c =
        start_controller(&env, "controller", port, &["--cleanup-on-shutdown"]).expect("controller");
    c.wait_ready(30).await.expect("controller ready");
    wait_configuration(&env, Duration::from_secs(15), |cfg| cfg.is_some())
        .await
        .expect("installed");

    // A namespace or CRD DELETE also reaches containment, which refuses it alike;
    // the API server returns whichever refusal comes first.
    const LABEL: &str = "delete-label-0.holdfast.dev";
    const CONTAINMENT: &str = "containment.holdfast.dev";
    for (line, what, target, webhooks) in [
        (
            "delete deployment holdfast-webhook -n holdfast-system",
            "Deployment holdfast-system/holdfast-webhook",
            "deployments.apps holdfast-webhook -n holdfast-system",
            &[LABEL][..],
        ),
        (
            "delete deployment holdfast-controller -n holdfast-system",
            "Deployment holdfast-system/holdfast-controller",
            "deployments.apps holdfast-controller -n holdfast-system",
            &[LABEL],
        ),
        (
            "delete service holdfast-webhook -n holdfast-system",
            "Service holdfast-system/holdfast-webhook",
            "services holdfast-webhook -n holdfast-system",
            &[LABEL],
        ),
        (
            "delete crd dependencyrules.holdfast.dev",
            "CustomResourceDefinition dependencyrules.holdfast.dev",
            "customresourcedefinitions.apiextensions.k8s.io dependencyrules.holdfast.dev",
            &[LABEL, CONTAINMENT],
        ),
        (
            "delete clusterrole holdfast-webhook",
            "ClusterRole holdfast-webhook",
            "clusterroles.rbac.authorization.k8s.io holdfast-webhook",
            &[LABEL],
        ),
        (
            "delete namespace holdfast-system",
            "Namespace holdfast-system",
            "namespaces holdfast-system",
            &[LABEL, CONTAINMENT],
        ),
    ] {
        let message = format!(
            "holdfast: {what} is protected by label holdfast.dev/protected=Always (policy: \
             label holdfast.dev/protected), so it cannot be deleted. To delete it, remove the \
             label (kubectl label {target} holdfast.dev/protected-), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        );
        let possible = denied_by_any(webhooks, &message);
        let out = env
            .kubectl_until(&words(line), 15, |o| o.code != 0)
            .await
            .unwrap_or_else(|e| panic!("{line} was not refused: {e}"));
        assert!(
            out.refused_with_one_of(&possible),
            "{line}: {out:?}\nexpected one of {possible:?}"
        );
    }
    // The configuration itself is never sent to webhooks: it is kept by recreation.
    env.run(&["delete", "validatingwebhookconfiguration", "holdfast"]);
    wait_configuration(&env, Duration::from_secs(5), |cfg| cfg.is_some())
        .await
        .expect("recreated");
    // A graceful stop with --cleanup-on-shutdown removes it all the same.
    c.terminate(20).await.expect("stopped");
    wait_configuration(&env, Duration::from_secs(10), |cfg| cfg.is_none())
        .await
        .expect("removed on shutdown");
}
