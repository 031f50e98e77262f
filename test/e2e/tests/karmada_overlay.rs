//! The Karmada overlay in its two parts: `overlays/karmada/host` (the pods, their
//! Service and PDBs, nothing the API server of Karmada must hold) and
//! `overlays/karmada/karmada-apiserver` (CRDs, namespace, ServiceAccounts, tokens,
//! RBAC; no workloads). Rendered and checked, then run: the karmada-apiserver part
//! applied to the simulator standing in for karmada-apiserver, and both binaries
//! started with the arguments of the rendered host Deployments, as the
//! ServiceAccounts that part creates, enforce Karmada's protection label.

use std::path::Path;

use holdfast_e2e::{
    controller::start_controller,
    steps::{installed_configuration, service_account_kubeconfigs, words},
};
use serde_json::{Value, json};

fn render(part: &str) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../manifests/overlays/karmada")
        .join(part);
    holdfast_e2e::steps::kustomize(&dir)
}

fn kinds(docs: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = docs
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    v.sort();
    v
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name} missing"))
}

fn args(deploy: &Value) -> Vec<String> {
    deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string").to_string())
        .collect()
}

/// The Secret a Deployment mounts at `path`.
fn secret_at(deploy: &Value, path: &str) -> String {
    let spec = &deploy["spec"]["template"]["spec"];
    let mount = spec["containers"][0]["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == path)
        .unwrap_or_else(|| panic!("nothing mounted at {path}"));
    let volume = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("volume");
    volume["secret"]["secretName"]
        .as_str()
        .expect("secret")
        .to_string()
}

#[test]
fn each_object_goes_where_it_is_used() {
    let host = render("host");
    let karmada = render("karmada-apiserver");
    assert_eq!(
        kinds(&host),
        words(
            "Deployment/holdfast-controller Deployment/holdfast-webhook Namespace/holdfast-system PodDisruptionBudget/holdfast-controller PodDisruptionBudget/holdfast-webhook Service/holdfast-webhook ServiceAccount/holdfast-controller ServiceAccount/holdfast-webhook"
        )
    );
    assert_eq!(
        kinds(&karmada),
        words(
            "ClusterRole/holdfast-bypass ClusterRole/holdfast-controller ClusterRole/holdfast-reads ClusterRole/holdfast-reads-policies ClusterRole/holdfast-webhook ClusterRoleBinding/holdfast-controller ClusterRoleBinding/holdfast-reads ClusterRoleBinding/holdfast-webhook CustomResourceDefinition/anchorrules.holdfast.dev CustomResourceDefinition/criticalservices.holdfast.dev CustomResourceDefinition/dependencyrules.holdfast.dev CustomResourceDefinition/resourceprotections.holdfast.dev Namespace/holdfast-system Role/holdfast-anchor-sources Role/holdfast-controller Role/holdfast-webhook-key RoleBinding/holdfast-anchor-sources RoleBinding/holdfast-controller RoleBinding/holdfast-webhook-key Secret/holdfast-controller-token Secret/holdfast-webhook-token ServiceAccount/holdfast-controller ServiceAccount/holdfast-webhook"
        )
    );
    // Host pods read nothing of the host cluster: no token mounted.
    for sa in ["holdfast-controller", "holdfast-webhook"] {
        assert_eq!(
            find(&host, "ServiceAccount", sa)["automountServiceAccountToken"],
            false
        );
        let token = find(&karmada, "Secret", &format!("{sa}-token"));
        assert_eq!(token["type"], "kubernetes.io/service-account-token");
        assert_eq!(
            token["metadata"]["annotations"]["kubernetes.io/service-account.name"],
            sa
        );
    }
    let controller = find(&host, "Deployment", "holdfast-controller");
    let webhook = find(&host, "Deployment", "holdfast-webhook");
    let c_args = args(controller);
    let w_args = args(webhook);
    // Each pod has its own kubeconfig for karmada-apiserver.
    assert!(c_args.contains(&"--kubeconfig=/etc/karmada/kubeconfig".to_string()));
    assert!(w_args.contains(&"--kubeconfig=/etc/karmada/kubeconfig".to_string()));
    assert_eq!(
        secret_at(controller, "/etc/karmada"),
        "holdfast-controller-karmada"
    );
    assert_eq!(
        secret_at(webhook, "/etc/karmada"),
        "holdfast-webhook-karmada"
    );
    // The certificate: the Secret the webhook serves is the one whose ca.crt the
    // controller installs; the controller manages no Secret in karmada-apiserver.
    assert!(c_args.contains(&"--ca-bundle-file=/tls/ca.crt".to_string()));
    assert!(
        !c_args.iter().any(|a| a.starts_with("--ca-secret")),
        "{c_args:?}"
    );
    assert_eq!(secret_at(controller, "/tls"), secret_at(webhook, "/tls"));
    // Its only Secrets there: the key that signs deferred-deletion requests.
    let role = find(&karmada, "Role", "holdfast-controller");
    let secret_rules: Vec<&Value> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["resources"] == json!(["secrets"]))
        .collect();
    assert_eq!(
        secret_rules,
        vec![
            &json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}),
            &json!({"apiGroups": [""], "resources": ["secrets"],
                    "resourceNames": ["holdfast-deferred-deletion-key"], "verbs": ["get"]}),
        ],
        "{role}"
    );
    // Called by URL at the host Service, which reaches the webhook's https port.
    let svc = find(&host, "Service", "holdfast-webhook");
    assert!(c_args.contains(&format!(
        "--webhook-url=https://{}.{}.svc:{}/validate",
        svc["metadata"]["name"].as_str().expect("name"),
        svc["metadata"]["namespace"].as_str().expect("ns"),
        svc["spec"]["ports"][0]["port"]
    )));
    // Both agree on the protection labels (the webhook refuses to run otherwise).
    let label = "--protection-label=resourcetemplate.karmada.io/deletion-protected=Always";
    assert!(c_args.iter().any(|a| a == label) && w_args.iter().any(|a| a == label));
}

/// Rendered flags minus those naming files or addresses of the pod.
fn portable(args: &[String], drop: &[&str]) -> Vec<String> {
    args.iter()
        .filter(|a| !drop.iter().any(|d| a.starts_with(d)))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_karmada_parts_protect_karmada_apiserver() {
    // On a real Karmada the same installation (the karmada-apiserver part applied,
    // both binaries with the host part's arguments, the published settings, the
    // lease) is `karmada_backend.rs`'s `install_holdfast`.
    holdfast_e2e::needs_simulator!(
        "it treats the API server as a karmada-apiserver and applies the Karmada overlay's parts to it as they are; on a real Karmada: karmada_backend.rs"
    );
    let mut env = holdfast_e2e::steps::sim_with_service_accounts().await;
    let part = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../manifests/overlays/karmada/karmada-apiserver");
    let out = env.attempt(&["apply", "-k", &part.to_string_lossy()]);
    assert_eq!(out.code, 0, "{out:?}");
    let host = render("host");
    let (controller_kc, webhook_kc) = service_account_kubeconfigs(&env);
    let ca = env.dir.path().join("ca.crt");
    std::fs::write(&ca, &env.pki.ca_pem).expect("ca");

    let webhook_args = portable(
        &args(find(&host, "Deployment", "holdfast-webhook")),
        &words("--kubeconfig --listen --probe-listen --tls-cert --tls-key"),
    );
    let mut w: Vec<&str> = webhook_args.iter().map(String::as_str).collect();
    w.extend(["--kubeconfig", &webhook_kc]);
    env.start_webhook(&w).await.expect("webhook");
    env.wait_webhook_ready().await.expect("ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");

    let controller_args = portable(
        &args(find(&host, "Deployment", "holdfast-controller")),
        &words("run --kubeconfig --webhook-url --ca-bundle-file --probe-listen"),
    );
    let mut c: Vec<String> = controller_args;
    c.push(format!("--ca-bundle-file={}", ca.display()));
    c.push("--kubeconfig".to_string());
    c.push(controller_kc);
    let c: Vec<&str> = c.iter().map(String::as_str).collect();
    let mut controller = start_controller(&env, "controller", port, &c).expect("controller");
    controller.wait_ready(30).await.expect("controller ready");
    let cfg = installed_configuration(&env).await;
    assert_eq!(
        cfg["metadata"]["annotations"]["holdfast.dev/settings"],
        r#"{"protectionLabels":["holdfast.dev/protected=Always,Cascading,true","resourcetemplate.karmada.io/deletion-protected=Always"],"strict":false}"#
    );
    // Leader election ran in karmada-apiserver's holdfast-system.
    env.prints(
        &words("get lease holdfast-controller -n holdfast-system -o jsonpath={.metadata.name}"),
        "holdfast-controller",
    );

    env.run(&words(
        "create configmap plan -n default --from-literal=a=b",
    ));
    env.run(&words(
        "label configmap plan -n default resourcetemplate.karmada.io/deletion-protected=Always",
    ));
    let out = env
        .until_failed(&["delete", "configmap", "plan", "-n", "default"])
        .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with(
            "Error from server (Forbidden): admission webhook \"delete-label-1.holdfast.dev\" \
             denied the request: holdfast: ConfigMap default/plan is protected by label \
             resourcetemplate.karmada.io/deletion-protected=Always"
        ),
        "{out:?}"
    );
}
