//! holdfast on a real Karmada: the `karmada` backend (karmada-apiserver,
//! Karmada's aggregated apiserver, webhook, controller manager and scheduler
//! v1.18.2, and one member cluster joined in Push mode; see
//! `holdfast_e2e::backend::karmada`), driven with the real kubectl, holdfast's
//! binaries run as the ServiceAccounts `manifests/overlays/karmada/karmada-apiserver`
//! creates there, with the arguments of the host part's Deployments.
//!
//! - Karmada's own deletion protection and holdfast's side by side: a template
//!   labelled `resourcetemplate.karmada.io/deletion-protected=Always` is refused by
//!   Karmada's webhook alone, then, with holdfast installed as the overlay ships
//!   it (enforcing that label too), by both; a ResourceProtection protects a
//!   template Karmada knows nothing of.
//! - A template protected by holdfast's label, propagated to the member by a
//!   PropagationPolicy: its DELETE on karmada-apiserver is refused with holdfast's
//!   message; unlabelled, it is deleted and Karmada removes it from the member.
//!
//! Each test starts its own backend (about 20 s); they run one at a time.

use std::{net::SocketAddr, path::Path, time::Duration};

use holdfast_e2e::{
    Env, KubectlOutput, WEBHOOK_SA,
    backend::karmada::{self, KarmadaBackend},
    controller::{ControllerProcess, start_controller_for_url, wait_configuration},
    steps::{kustomize, words},
};
use serde_json::Value;

/// The backends are heavy (two API servers, etcds, Karmada's processes): one at
/// a time on the project's 2 cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Karmada backend of the test's own, in `dir`.
async fn karmada_backend(dir: &Path) -> KarmadaBackend {
    if let Err(e) = karmada::check_built() {
        panic!(
            "the karmada backend's binaries are missing (run hack/substrates.sh karmada kube etcd): {e:#}"
        );
    }
    let started = std::time::Instant::now();
    let backend = KarmadaBackend::start(&dir.join("karmada"))
        .await
        .unwrap_or_else(|e| panic!("the karmada backend starts: {e:#}"));
    eprintln!(
        "karmada backend ready in {:.1}s: {:?}",
        started.elapsed().as_secs_f64(),
        backend.timings
    );
    backend
}

/// The container arguments of Deployment `name` of the Karmada overlay's host part.
fn host_args(name: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/overlays/karmada/host");
    let docs = kustomize(&dir);
    let deploy = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("Deployment {name} missing from the host part"));
    deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string").to_string())
        .collect()
}

/// `args` without the flags naming files or addresses of the pod.
fn portable(args: &[String], drop: &[&str]) -> Vec<String> {
    args.iter()
        .filter(|a| !drop.iter().any(|d| a.starts_with(d)))
        .cloned()
        .collect()
}

/// holdfast installed on karmada-apiserver as the Karmada overlay ships it: the
/// karmada-apiserver part applied by the admin, the webhook and the controller
/// on 127.0.0.1 with the host Deployments' arguments, as their ServiceAccounts
/// (impersonated), until the controller has installed its configuration.
async fn install_holdfast(env: &mut Env) -> ControllerProcess {
    env.install_overlay("karmada/karmada-apiserver")
        .expect("the karmada-apiserver part applies");
    let webhook_kc = env
        .kubeconfig_for("webhook.kubeconfig", WEBHOOK_SA)
        .expect("kubeconfig");
    let controller_kc = env
        .kubeconfig_for("controller.kubeconfig", holdfast_e2e::CONTROLLER_SA)
        .expect("kubeconfig");
    let mut w = portable(
        &host_args("holdfast-webhook"),
        &words("--kubeconfig --listen --probe-listen --tls-cert --tls-key"),
    );
    w.extend(["--kubeconfig".to_string(), webhook_kc]);
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    let listen = SocketAddr::from(([127, 0, 0, 1], holdfast_e2e::free_port().expect("port")));
    env.start_webhook_listening(listen, &w)
        .await
        .expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");

    let ca = env.dir.path().join("ca.crt");
    std::fs::write(&ca, &env.pki.ca_pem).expect("ca");
    let mut c = portable(
        &host_args("holdfast-controller"),
        &words("run --kubeconfig --webhook-url --ca-bundle-file --probe-listen"),
    );
    c.extend([
        format!("--ca-bundle-file={}", ca.display()),
        "--kubeconfig".to_string(),
        controller_kc,
    ]);
    let c: Vec<&str> = c.iter().map(String::as_str).collect();
    let url = format!("https://{listen}/validate");
    let mut controller = start_controller_for_url(env, "controller", &url, &c).expect("controller");
    if let Err(e) = controller.wait_ready(60).await {
        panic!("controller not ready: {e:#}\n{}", controller.log());
    }
    let (cfg, _) = wait_configuration(env, Duration::from_secs(60), |cfg| cfg.is_some())
        .await
        .unwrap_or_else(|e| panic!("no configuration: {e:#}\n{}", controller.log()));
    // The overlay's flags, as the controller publishes them (the same check as the
    // simulator's `karmada_overlay.rs`, here on a real karmada-apiserver).
    let cfg = cfg.expect("present");
    assert_eq!(
        cfg["metadata"]["annotations"]["holdfast.dev/settings"],
        r#"{"protectionLabels":["holdfast.dev/protected=Always,Cascading,true","resourcetemplate.karmada.io/deletion-protected=Always"],"strict":false}"#
    );
    // Leader election runs in karmada-apiserver's holdfast-system.
    let lease = env
        .kubectl(&words(
            "get lease holdfast-controller -n holdfast-system -o jsonpath={.metadata.name}",
        ))
        .expect("kubectl");
    assert_eq!(lease.stdout, "holdfast-controller", "{lease:?}");
    controller
}

/// A Deployment `name` in `ns` with `labels` (`k=v` pairs).
fn deployment(ns: &str, name: &str, labels: &[(&str, &str)]) -> String {
    let mut meta_labels = serde_json::Map::new();
    meta_labels.insert("app".into(), name.into());
    for (k, v) in labels {
        meta_labels.insert((*k).into(), (*v).into());
    }
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": meta_labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}
    })
    .to_string()
}

/// Runs kubectl `args` until `check` accepts its output (at most 60 s).
async fn until(env: &Env, args: &[&str], check: impl Fn(&KubectlOutput) -> bool) -> KubectlOutput {
    env.kubectl_until(args, 60, check)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", env.webhook_log()))
}

/// What Karmada's webhook answers a DELETE of an object carrying its label.
const KARMADA_REFUSAL: &str = "Error from server (Forbidden): admission webhook \
    \"resourcedeletionprotection.karmada.io\" denied the request: This resource is protected, \
    please make sure to remove the label: resourcetemplate.karmada.io/deletion-protected";

/// holdfast's refusal of deleting `kind` (`resource`) `ns/name` protected by
/// `label=Always`, by its webhook `hook`.
fn holdfast_label_refusal(
    hook: &str,
    kind: &str,
    resource: &str,
    ns: &str,
    name: &str,
    label: &str,
) -> String {
    format!(
        "Error from server (Forbidden): admission webhook \"{hook}\" denied the request: \
         holdfast: {kind} {ns}/{name} is protected by label {label}=Always (policy: label {label}), \
         so it cannot be deleted. To delete it, remove the label (kubectl label {resource} {name} \
         -n {ns} {label}-), or set the annotation holdfast.dev/skip-protection=true if you are \
         allowed to bypass protection."
    )
}

/// holdfast's label denials so far (its metrics).
async fn label_denials(env: &Env) -> f64 {
    env.webhook_metric(
        r#"holdfast_webhook_admission_requests_total{decider="label",decision="deny",operation="DELETE"}"#,
    )
    .await
    .expect("metrics")
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_and_holdfast_deletion_protection_side_by_side() {
    let _one = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let backend = karmada_backend(dir.path()).await;
    let mut env = Env::on_cluster(&backend.kubeconfig, "127.0.0.1")
        .await
        .expect("env");
    let ns = env.namespace("side").expect("namespace");
    let karmada_label = "resourcetemplate.karmada.io/deletion-protected";

    // Karmada alone: its webhook refuses, with its message.
    env.apply(&deployment(&ns, "plan", &[(karmada_label, "Always")]))
        .expect("template");
    let out = env
        .kubectl(&["delete", "deployment", "plan", "-n", &ns])
        .expect("kubectl");
    assert_eq!(
        (out.code, out.stderr.trim_end()),
        (1, KARMADA_REFUSAL),
        "{out:?}"
    );

    // holdfast beside it, enforcing Karmada's label too (the overlay's flag):
    // both refuse; kube-apiserver calls them in parallel and reports the first
    // denial, so either message may come back, and holdfast's metrics show it
    // denied the request as well.
    let controller = install_holdfast(&mut env).await;
    let holdfast_refusal = holdfast_label_refusal(
        "delete-label-1.holdfast.dev",
        "Deployment",
        "deployments.apps",
        &ns,
        "plan",
        karmada_label,
    );
    let before = label_denials(&env).await;
    let out = env
        .kubectl(&["delete", "deployment", "plan", "-n", &ns])
        .expect("kubectl");
    assert_eq!(out.code, 1, "{out:?}");
    eprintln!("the first refusal reported: {}", out.stderr.trim_end());
    assert!(
        [KARMADA_REFUSAL, holdfast_refusal.as_str()].contains(&out.stderr.trim_end()),
        "neither Karmada's nor holdfast's refusal: {out:?}\nholdfast's would be: {holdfast_refusal}"
    );
    assert_eq!(
        label_denials(&env).await,
        before + 1.0,
        "holdfast did not deny it too\nwebhook: {}",
        env.webhook_log()
    );
    // With Karmada's label on Never, neither protects it.
    env.kubectl(&[
        "label",
        "--overwrite",
        "deployment",
        "plan",
        "-n",
        &ns,
        &format!("{karmada_label}=Never"),
    ])
    .expect("kubectl")
    .ok()
    .expect("relabelled");
    env.kubectl(&["delete", "deployment", "plan", "-n", &ns])
        .expect("kubectl")
        .ok()
        .expect("deleted once Never");

    // A ResourceProtection protects a template Karmada's label does not name.
    env.apply(&deployment(&ns, "web", &[])).expect("template");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: keep-web}}\n\
         spec:\n  resources:\n  - {{group: apps, version: v1, resource: deployments, namespace: {ns}, names: [web]}}\n"
    ))
    .expect("protection");
    let dry = ["delete", "deployment", "web", "-n", &ns, "--dry-run=server"];
    until(&env, &dry, |o| o.code == 1).await;
    let out = env
        .kubectl(&["delete", "deployment", "web", "-n", &ns])
        .expect("kubectl");
    let expected = format!(
        "Error from server (Forbidden): admission webhook \"policies-0.holdfast.dev\" denied the \
         request: holdfast: Deployment {ns}/web is protected by ResourceProtection/keep-web \
         (selects deployments.apps in namespace {ns} named web), so it cannot be deleted. To delete \
         it, remove it from the policy (kubectl edit resourceprotection keep-web), or set the \
         annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection. \
         To have holdfast delete it once nothing blocks it, ask for deferred deletion \
         (holdfast.dev/delete-when-unblocked)."
    );
    assert_eq!(
        (out.code, out.stderr.trim_end()),
        (1, expected.as_str()),
        "{out:?}\ncontroller: {}",
        controller.log()
    );
    drop(controller);
    drop(env);
    drop(backend);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protected_template_propagated_to_the_member() {
    let _one = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let backend = karmada_backend(dir.path()).await;
    let mut env = Env::on_cluster(&backend.kubeconfig, "127.0.0.1")
        .await
        .expect("env");
    let controller = install_holdfast(&mut env).await;
    let ns = env.namespace("fleet").expect("namespace");
    let member = |args: &[&str]| -> KubectlOutput {
        let mut all = vec![
            "--kubeconfig",
            backend.member_kubeconfig.to_str().expect("path"),
        ];
        all.extend_from_slice(args);
        env.kubectl(&all).expect("kubectl")
    };

    env.apply(&format!(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\n\
         metadata: {{name: web, namespace: {ns}}}\n\
         spec:\n  resourceSelectors:\n  - {{apiVersion: apps/v1, kind: Deployment, name: web}}\n\
         \x20 placement:\n    clusterAffinity:\n      clusterNames: [{}]\n",
        backend.member_name
    ))
    .expect("PropagationPolicy");
    env.apply(&deployment(
        &ns,
        "web",
        &[("holdfast.dev/protected", "Always")],
    ))
    .expect("template");

    // Karmada propagates it: on the member, with the template's label.
    let created = std::time::Instant::now();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let on_member: Value = loop {
        let out = member(&["get", "deployment", "web", "-n", &ns, "-o", "json"]);
        if out.code == 0 {
            break serde_json::from_str(&out.stdout).expect("json");
        }
        if std::time::Instant::now() > deadline {
            let rb = env.kubectl(&["get", "resourcebindings", "-n", &ns, "-o", "yaml"]);
            panic!("never on the member: {out:?}\nbindings: {rb:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "on the member {:.1}s after the template's creation",
        created.elapsed().as_secs_f64()
    );
    assert_eq!(
        on_member["metadata"]["labels"]["holdfast.dev/protected"], "Always",
        "{on_member}"
    );
    let binding = env
        .get_json(&["resourcebinding", "web-deployment", "-n", &ns])
        .expect("the ResourceBinding");
    assert_eq!(
        binding["spec"]["clusters"][0]["name"], backend.member_name,
        "{binding}"
    );

    // The template's DELETE is refused by holdfast, with its exact message.
    let out = env
        .kubectl(&["delete", "deployment", "web", "-n", &ns])
        .expect("kubectl");
    let expected = holdfast_label_refusal(
        "delete-label-0.holdfast.dev",
        "Deployment",
        "deployments.apps",
        &ns,
        "web",
        "holdfast.dev/protected",
    );
    assert_eq!(
        (out.code, out.stderr.trim_end()),
        (1, expected.as_str()),
        "{out:?}"
    );
    assert_eq!(
        member(&["get", "deployment", "web", "-n", &ns, "-o", "name"]).code,
        0,
        "the member's copy stays"
    );

    // Unlabelled, it is deleted, and Karmada removes it from the member.
    env.kubectl(&[
        "label",
        "deployment",
        "web",
        "-n",
        &ns,
        "holdfast.dev/protected-",
    ])
    .expect("kubectl")
    .ok()
    .expect("label removed");
    let out = env
        .kubectl(&["delete", "deployment", "web", "-n", &ns])
        .expect("kubectl");
    assert_eq!(out.code, 0, "{out:?}");
    let deleted = std::time::Instant::now();
    let deadline = deleted + Duration::from_secs(90);
    loop {
        let out = member(&["get", "deployment", "web", "-n", &ns]);
        if out.is_not_found() {
            eprintln!(
                "gone from the member {:.1}s after the template's deletion",
                deleted.elapsed().as_secs_f64()
            );
            break;
        }
        if std::time::Instant::now() > deadline {
            let works = env.kubectl(&["get", "works", "-A", "-o", "yaml"]);
            panic!("Karmada never removed it from the member: {out:?}\nworks: {works:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(controller);
    drop(env);
    drop(backend);
}
