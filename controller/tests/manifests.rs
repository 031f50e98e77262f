//! Every kustomize overlay in manifests/overlays renders offline with
//! `kubectl kustomize`, and what it renders keeps the promises: least-privilege
//! RBAC (no wildcard write verbs), both Deployments, the Service, the PDBs.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

fn manifests() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

fn render(overlay: &str) -> Vec<Value> {
    kustomize(&manifests().join("overlays").join(overlay))
}

/// `kubectl kustomize dir`, parsed into its documents.
fn kustomize(dir: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl is installed (hack/prereqs.sh)");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    serde_saphyr::from_multiple::<Value>(&text).expect("YAML documents")
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name} missing"))
}

/// The strings of a JSON array (none for anything else).
fn strings(v: &Value) -> Vec<String> {
    let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

const READ: [&str; 3] = ["get", "list", "watch"];

fn check_rbac(overlay: &str, docs: &[Value]) {
    let mut roles = of_kind(docs, "ClusterRole");
    roles.extend(of_kind(docs, "Role"));
    assert!(!roles.is_empty(), "{overlay}: roles rendered");
    for role in roles {
        let name = role["metadata"]["name"].as_str().unwrap_or("?");
        for rule in role["rules"].as_array().into_iter().flatten() {
            let verbs = strings(&rule["verbs"]);
            assert!(
                !verbs.iter().any(|v| v == "*"),
                "{overlay}: {name} grants the wildcard verb"
            );
            let wildcard = strings(&rule["resources"]).iter().any(|r| r == "*")
                || strings(&rule["apiGroups"]).iter().any(|g| g == "*");
            if wildcard {
                assert!(
                    verbs.iter().all(|v| READ.contains(&v.as_str())),
                    "{overlay}: {name} grants write verbs {verbs:?} on a wildcard"
                );
            }
        }
    }
}

fn args(deploy: &Value) -> Vec<String> {
    strings(&deploy["spec"]["template"]["spec"]["containers"][0]["args"])
}

fn check_common(overlay: &str, docs: &[Value]) {
    check_rbac(overlay, docs);
    let controller = named(docs, "Deployment", "holdfast-controller");
    let webhook = named(docs, "Deployment", "holdfast-webhook");
    assert!(
        args(controller).contains(&"--leader-elect".to_string()),
        "{overlay}"
    );
    assert!(
        controller["spec"]["replicas"].as_i64() >= Some(2),
        "{overlay}"
    );
    assert!(webhook["spec"]["replicas"].as_i64() >= Some(2), "{overlay}");
    named(docs, "Service", "holdfast-webhook");
    named(docs, "PodDisruptionBudget", "holdfast-webhook");
    named(docs, "PodDisruptionBudget", "holdfast-controller");
    // holdfast protects its own installation.
    for (kind, name) in [
        ("Deployment", "holdfast-controller"),
        ("Deployment", "holdfast-webhook"),
        ("Service", "holdfast-webhook"),
        ("Namespace", "holdfast-system"),
    ] {
        assert_eq!(
            named(docs, kind, name)["metadata"]["labels"]["holdfast.dev/protected"],
            "Always",
            "{overlay}: {kind}/{name} carries the protection label"
        );
    }
}

#[test]
fn kubernetes_overlay_renders() {
    let docs = render("kubernetes");
    check_common("kubernetes", &docs);
    assert_eq!(of_kind(&docs, "CustomResourceDefinition").len(), 4);
    for crd in of_kind(&docs, "CustomResourceDefinition") {
        assert_eq!(
            crd["metadata"]["labels"]["app.kubernetes.io/part-of"],
            "holdfast"
        );
    }
    let a = args(named(&docs, "Deployment", "holdfast-controller"));
    assert!(
        a.contains(&"--webhook-service=holdfast-system/holdfast-webhook:443".to_string()),
        "{a:?}"
    );
    assert!(
        a.contains(&"--ca-secret=holdfast-system/holdfast-webhook-tls".to_string()),
        "{a:?}"
    );
    // Deferred deletion: impersonation of users and service accounts, nothing else;
    // the controller holds no delete permission of its own.
    let role = named(&docs, "ClusterRole", "holdfast-controller");
    let rules: Vec<&Value> = role["rules"].as_array().into_iter().flatten().collect();
    let impersonate: Vec<&&Value> = rules
        .iter()
        .filter(|r| strings(&r["verbs"]).contains(&"impersonate".to_string()))
        .collect();
    assert_eq!(impersonate.len(), 1, "{impersonate:?}");
    assert_eq!(strings(&impersonate[0]["verbs"]), vec!["impersonate"]);
    assert_eq!(strings(&impersonate[0]["apiGroups"]), vec![""]);
    assert_eq!(
        strings(&impersonate[0]["resources"]),
        vec!["users", "serviceaccounts"]
    );
    for r in &rules {
        let verbs = strings(&r["verbs"]);
        let resources = strings(&r["resources"]);
        assert!(
            !verbs.contains(&"delete".to_string()) || !r["resourceNames"].is_null(),
            "delete only by name: {r}"
        );
        assert!(!resources.contains(&"groups".to_string()), "{r}");
    }
    // Uninstall (`holdfast-controller uninstall`): its own Deployment only, by name,
    // in its namespace.
    let role = named(&docs, "Role", "holdfast-controller");
    let apps: Vec<&Value> = role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| strings(&r["apiGroups"]) == vec!["apps"])
        .collect();
    assert_eq!(apps.len(), 2, "{apps:?}");
    for r in apps {
        assert_eq!(
            strings(&r["resourceNames"]),
            vec!["holdfast-controller"],
            "{r}"
        );
        let (resources, verbs) = (strings(&r["resources"]), strings(&r["verbs"]));
        assert!(
            (resources == vec!["deployments/scale"] && verbs == vec!["patch"])
                || (resources == vec!["deployments"] && verbs == vec!["get", "delete"]),
            "{r}"
        );
    }
}

/// The Karmada overlay comes in two parts: the pods in the host cluster, the API
/// objects in karmada-apiserver (where each object goes is checked in detail by
/// test/e2e/tests/karmada_overlay.rs). Together they keep the common promises.
#[test]
fn karmada_overlay_renders() {
    let mut docs = render("karmada/host");
    let api = render("karmada/karmada-apiserver");
    check_rbac("karmada/karmada-apiserver", &api);
    assert_eq!(of_kind(&api, "CustomResourceDefinition").len(), 4);
    assert!(
        of_kind(&docs, "CustomResourceDefinition").is_empty(),
        "no CRDs in the host cluster"
    );
    docs.extend(api.into_iter().filter(|d| d["kind"] != "Namespace"));
    check_common("karmada", &docs);
    let a = args(named(&docs, "Deployment", "holdfast-controller"));
    assert!(
        a.contains(
            &"--protection-label=resourcetemplate.karmada.io/deletion-protected=Always".to_string()
        ),
        "{a:?}"
    );
    assert!(
        a.iter().any(|x| x.starts_with("--webhook-url=https://")),
        "{a:?}"
    );
}

#[test]
fn kcp_overlay_renders() {
    let docs = render("kcp");
    check_common("kcp", &docs);
    assert!(
        of_kind(&docs, "CustomResourceDefinition").is_empty(),
        "no CRDs on kcp"
    );
    let a = args(named(&docs, "Deployment", "holdfast-controller"));
    assert!(a.contains(&"--topology=kcp".to_string()), "{a:?}");
    assert!(
        a.contains(&"--leader-elect-namespace=default".to_string()),
        "{a:?}"
    );
    assert!(a.contains(&"--apiexport=holdfast.dev".to_string()), "{a:?}");
    let w = args(named(&docs, "Deployment", "holdfast-webhook"));
    assert!(w.contains(&"--topology=kcp".to_string()), "{w:?}");
}

#[test]
fn kcp_workspace_rbac_renders() {
    // One kustomization per kind of workspace, each with the bindings it documents.
    for (dir, bindings) in [
        ("holdfast", 4),
        ("provider", 4),
        ("consumer", 1),
        ("root", 2),
    ] {
        let docs = kustomize(&manifests().join("overlays/kcp/workspace").join(dir));
        check_rbac(&format!("kcp/workspace/{dir}"), &docs);
        assert_eq!(
            of_kind(&docs, "ClusterRoleBinding").len(),
            bindings,
            "{dir}"
        );
    }
}

#[test]
fn kcp_api_renders() {
    let docs = kustomize(&manifests().join("kcp"));
    assert_eq!(of_kind(&docs, "APIResourceSchema").len(), 4);
    let export = named(&docs, "APIExport", "holdfast.dev");
    assert_eq!(
        export["spec"]["permissionClaims"][0]["resource"],
        "validatingwebhookconfigurations"
    );
}
