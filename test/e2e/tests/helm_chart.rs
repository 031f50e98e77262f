//! The Helm chart (`charts/holdfast`) against the kustomize manifests it packages:
//! `helm lint` passes; `helm template` with the default values renders exactly what
//! `kubectl kustomize manifests/overlays/kubernetes` renders (less the Namespace,
//! which Helm's `--create-namespace` makes, unless `namespace.create`), and each
//! toggle adds or removes exactly its component's objects; every flag both binaries
//! share has a value that reaches both Deployments; the pre-delete hook runs
//! `holdfast-controller uninstall` as the controller's ServiceAccount. Helm is the
//! one `hack/substrates.sh helm` builds. The install, upgrade, rollback and
//! uninstall on a cluster are in `helm_lifecycle.rs`.

use std::{collections::BTreeMap, path::PathBuf, process::Command};

use holdfast_e2e::{bin, helm, workspace_root};
use serde_json::Value;

/// The objects of a rendering by `(kind, namespace, name)`; a duplicate fails.
fn by_key(docs: Vec<Value>) -> BTreeMap<(String, String, String), Value> {
    let mut out = BTreeMap::new();
    for d in docs {
        let key = (
            d["kind"].as_str().unwrap_or_default().to_string(),
            d["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        assert!(
            !key.0.is_empty() && !key.2.is_empty(),
            "no kind or name: {d}"
        );
        assert!(
            out.insert(key.clone(), d).is_none(),
            "rendered twice: {key:?}"
        );
    }
    out
}

/// `kubectl kustomize` of a kustomization made for the test: the base, then
/// `components` of manifests/components (paths relative to it, as kustomize wants).
fn kustomize_with(components: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    let here = dir.path().canonicalize().expect("tempdir path");
    let repo = workspace_root().canonicalize().expect("repository path");
    let up: PathBuf = here.components().skip(1).map(|_| "..").collect();
    let rel = up.join(repo.strip_prefix("/").expect("absolute"));
    let manifests = rel.join("manifests");
    let components: Vec<String> = components
        .iter()
        .map(|c| manifests.join("components").join(c).display().to_string())
        .collect();
    let kustomization = serde_json::json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [manifests.join("base").display().to_string()],
        "components": components,
    });
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        kustomization.to_string(),
    )
    .expect("kustomization written");
    holdfast_e2e::steps::kustomize(dir.path())
}

/// The keys of Helm's own that the chart adds and kustomize lacks: the CRDs'
/// `helm.sh/resource-policy: keep` (the CRDs outlive `helm uninstall`). Checked,
/// then removed.
fn without_keep(mut docs: Vec<Value>) -> Vec<Value> {
    for d in &mut docs {
        if d["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let name = d["metadata"]["name"].to_string();
        let annotations = d["metadata"]["annotations"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("CRD {name} without helm.sh/resource-policy"));
        assert_eq!(
            annotations.remove("helm.sh/resource-policy"),
            Some("keep".into())
        );
        if annotations.is_empty() {
            d["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("annotations");
        }
    }
    docs
}

/// Fails naming every object that only one side renders, or that differs.
fn assert_same(what: &str, chart: Vec<Value>, kustomize: Vec<Value>) {
    let (chart, kustomize) = (by_key(chart), by_key(kustomize));
    let mut problems = vec![];
    for (key, k) in &kustomize {
        match chart.get(key) {
            None => problems.push(format!("only kustomize renders {key:?}")),
            Some(c) if c != k => problems.push(format!(
                "{key:?} differs:\n  chart:     {c}\n  kustomize: {k}"
            )),
            Some(_) => {}
        }
    }
    for key in chart.keys().filter(|k| !kustomize.contains_key(*k)) {
        problems.push(format!("only the chart renders {key:?}"));
    }
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

fn without_namespace(docs: Vec<Value>) -> Vec<Value> {
    docs.into_iter()
        .filter(|d| d["kind"] != "Namespace")
        .collect()
}

fn chart_dir() -> PathBuf {
    workspace_root().join("charts/holdfast")
}

#[test]
fn the_chart_lints() {
    let out = helm::run(&["lint", "--strict", &chart_dir().display().to_string()]);
    assert!(out.status.success(), "helm lint: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 chart(s) linted, 0 chart(s) failed"),
        "{out:?}"
    );
}

#[test]
fn default_values_render_the_kubernetes_overlay() {
    let overlay =
        holdfast_e2e::steps::kustomize(&workspace_root().join("manifests/overlays/kubernetes"));
    assert!(overlay.iter().any(|d| d["kind"] == "Namespace"));
    assert_same(
        "defaults",
        without_keep(helm::template(&chart_dir(), &[])),
        without_namespace(overlay.clone()),
    );
    assert_same(
        "namespace.create",
        without_keep(helm::template(&chart_dir(), &["namespace.create=true"])),
        overlay,
    );
}

#[test]
fn each_toggle_renders_its_component() {
    let chart = chart_dir();
    for (values, components) in [
        (vec!["podDisruptionBudget.enabled=false"], vec![]),
        (
            vec!["networkPolicy.enabled=true"],
            vec!["pdb", "network-policy"],
        ),
        (
            vec!["serviceMonitor.enabled=true"],
            vec!["pdb", "service-monitor"],
        ),
        (
            vec![
                "podDisruptionBudget.enabled=false",
                "networkPolicy.enabled=true",
                "serviceMonitor.enabled=true",
            ],
            vec!["network-policy", "service-monitor"],
        ),
    ] {
        let mut set = values.clone();
        set.push("namespace.create=true");
        assert_same(
            &format!("{values:?}"),
            without_keep(helm::template(&chart, &set)),
            kustomize_with(&components),
        );
    }
    // CRDs left to the user; and not kept.
    let no_crds: Vec<Value> = kustomize_with(&["pdb"])
        .into_iter()
        .filter(|d| d["kind"] != "CustomResourceDefinition")
        .collect();
    assert_same(
        "crds.install=false",
        helm::template(&chart, &["namespace.create=true", "crds.install=false"]),
        no_crds,
    );
    assert_same(
        "crds.keep=false",
        helm::template(&chart, &["namespace.create=true", "crds.keep=false"]),
        kustomize_with(&["pdb"]),
    );
}

/// The `--flags` a `--help` output lists.
fn flags(help: &str) -> Vec<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| {
            l.split([' ', ',', '[', '='])
                .find(|w| w.starts_with("--"))
                .map(str::to_string)
        })
        .collect()
}

fn help(binary: &str, args: &[&str]) -> String {
    let out = Command::new(bin(binary).expect("binary"))
        .args(args)
        .arg("--help")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{binary} --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn args_of<'a>(docs: &'a [Value], deployment: &str) -> Vec<&'a str> {
    docs.iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == deployment)
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].as_array())
        .unwrap_or_else(|| panic!("no Deployment {deployment}"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn every_flag_both_binaries_share_has_a_value() {
    // flag → (values, the argument in the controller's, in the webhook's Deployment).
    let table: BTreeMap<&str, (&[&str], &str, &str)> = BTreeMap::from([
        (
            "--topology",
            (&["topology=kcp"][..], "--topology=kcp", "--topology=kcp"),
        ),
        ("--strict", (&["strict=true"][..], "--strict", "--strict")),
        (
            "--protection-label",
            (
                &["protectionLabels={orkestra.io/deletion-protection=true}"][..],
                "--protection-label=orkestra.io/deletion-protection=true",
                "--protection-label=orkestra.io/deletion-protection=true",
            ),
        ),
        (
            "--log-format",
            (
                &["logFormat=json"][..],
                "--log-format=json",
                "--log-format=json",
            ),
        ),
        (
            "--apiexport",
            (
                &["apiExport=guard.dev"][..],
                "--apiexport=guard.dev",
                "--apiexport=guard.dev",
            ),
        ),
        (
            "--kubeconfig",
            (
                &[
                    "kubeconfigSecret.controller=c-kc",
                    "kubeconfigSecret.webhook=w-kc",
                ][..],
                "--kubeconfig=/etc/holdfast-kubeconfig/kubeconfig",
                "--kubeconfig=/etc/holdfast-kubeconfig/kubeconfig",
            ),
        ),
        (
            "--virtual-workspace-kubeconfig",
            (
                &["virtualWorkspaceKubeconfigSecret=vw-kc"][..],
                "--virtual-workspace-kubeconfig=/etc/holdfast-vw/kubeconfig",
                "--virtual-workspace-kubeconfig=/etc/holdfast-vw/kubeconfig",
            ),
        ),
        (
            "--probe-listen",
            (
                &["controller.probePort=9091", "webhook.probePort=9090"][..],
                "--probe-listen=0.0.0.0:9091",
                "--probe-listen=0.0.0.0:9090",
            ),
        ),
    ]);
    let webhook = flags(&help("holdfast-webhook", &[]));
    let controller = flags(&help("holdfast-controller", &["run"]));
    let shared: std::collections::BTreeSet<&str> = webhook
        .iter()
        .filter(|f| controller.contains(f) && *f != "--help" && *f != "--version")
        .map(String::as_str)
        .collect();
    assert_eq!(
        shared,
        table.keys().copied().collect(),
        "the flags both binaries share, and those the chart has a value for"
    );
    let defaults = helm::template(&chart_dir(), &[]);
    for (flag, (values, in_controller, in_webhook)) in &table {
        // Not there at the defaults.
        assert!(
            !args_of(&defaults, "holdfast-controller").contains(in_controller),
            "{flag}"
        );
        assert!(
            !args_of(&defaults, "holdfast-webhook").contains(in_webhook),
            "{flag}"
        );
        let docs = helm::template(&chart_dir(), values);
        assert!(
            args_of(&docs, "holdfast-controller").contains(in_controller),
            "{flag}: {:?}",
            args_of(&docs, "holdfast-controller")
        );
        assert!(
            args_of(&docs, "holdfast-webhook").contains(in_webhook),
            "{flag}: {:?}",
            args_of(&docs, "holdfast-webhook")
        );
    }
}

#[test]
fn the_chart_version_follows_the_workspace() {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_saphyr::from_str(&text).expect("Chart.yaml parses");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["version"], version);
    assert_eq!(chart["appVersion"], version);
    let docs = helm::template(&chart_dir(), &[]);
    for name in ["holdfast-controller", "holdfast-webhook"] {
        let d = docs
            .iter()
            .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == name)
            .expect("rendered");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            format!("ghcr.io/holdfast-dev/{name}:{version}")
        );
    }
}

#[test]
fn the_uninstall_hook_runs_the_controller_as_its_service_account() {
    let docs = helm::template_with_hooks(&chart_dir(), &["controller.resources.limits.cpu=1"]);
    let job = docs
        .iter()
        .find(|d| d["kind"] == "Job")
        .expect("the hook is rendered");
    assert_eq!(job["metadata"]["name"], "holdfast-uninstall");
    assert_eq!(job["metadata"]["annotations"]["helm.sh/hook"], "pre-delete");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "holdfast-controller");
    assert_eq!(pod["restartPolicy"], "Never");
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        format!(
            "ghcr.io/holdfast-dev/holdfast-controller:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(
        c["args"],
        serde_json::json!([
            "uninstall",
            "--namespace=holdfast-system",
            "--wait-seconds=120"
        ])
    );
    assert_eq!(c["resources"]["limits"]["cpu"], 1);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    // The arguments are the subcommand's.
    let out = Command::new(bin("holdfast-controller").expect("binary"))
        .args(
            c["args"]
                .as_array()
                .expect("args")
                .iter()
                .filter_map(Value::as_str),
        )
        .arg("--help")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{out:?}");
    // Off: no hook.
    let off = helm::template_with_hooks(&chart_dir(), &["uninstallHook.enabled=false"]);
    assert!(!off.iter().any(|d| d["kind"] == "Job"));
}
