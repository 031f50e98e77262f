//! The simulator against a real kube-apiserver: the same requests, by the same
//! kubectl, on `holdfast-sim` and on the kube backend (etcd, kube-apiserver and
//! kube-controller-manager v1.36 built by `hack/substrates.sh`), and every answer
//! compared: exit code and what kubectl printed. The scenarios are the
//! admissionregistration rules a friendlier simulator once let through (a webhook
//! configuration mixing `*` and `*/*` that kube-apiserver refuses), and holdfast's
//! own configurations and admission policies, which both must accept.

use std::process::Command;

use holdfast_e2e::{Env, backend::kube::KubeBackend, kubectl_path};
use holdfast_shared::{
    api::GroupResource,
    backstop::Backstop,
    labels::ProtectionLabels,
    webhookconfig::{
        Containment, FailurePolicy, InstallOptions, NamespaceScope, PolicyNeeds, Route,
        WebhookTarget, desired_configuration_for,
    },
};

/// A webhook configuration named `name` with one webhook whose rule has
/// `operations` and `resources` (server-side dry run: nothing is stored).
fn configuration(name: &str, operations: &str, resources: &str) -> String {
    format!(
        r#"{{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
  "metadata": {{"name": "{name}"}},
  "webhooks": [{{"name": "w.holdfast.dev", "sideEffects": "None", "admissionReviewVersions": ["v1"],
    "clientConfig": {{"url": "https://127.0.0.1:1/validate"}},
    "rules": [{{"operations": {operations}, "apiGroups": ["*"], "apiVersions": ["*"], "resources": {resources}, "scope": "*"}}]}}]}}"#
    )
}

/// A ValidatingAdmissionPolicy whose one resource rule has `resources`.
fn policy(name: &str, resources: &str) -> String {
    format!(
        r#"{{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
  "metadata": {{"name": "{name}"}},
  "spec": {{"failurePolicy": "Fail",
    "matchConstraints": {{"resourceRules": [{{"operations": ["UPDATE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": {resources}, "scope": "*"}}]}},
    "validations": [{{"expression": "true"}}]}}}}"#
    )
}

/// `kubectl create --dry-run=server -f -` of `manifest` against `kubeconfig`:
/// (exit code, standard output, standard error).
fn create(kubeconfig: &std::path::Path, manifest: &str) -> (i32, String, String) {
    use std::io::Write as _;
    let mut child = Command::new(kubectl_path().expect("kubectl"))
        .env("KUBECONFIG", kubeconfig)
        .args(["create", "--dry-run=server", "-o", "name", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(manifest.as_bytes())
        .expect("manifest written");
    let out = child.wait_with_output().expect("kubectl finishes");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// holdfast's configuration for policies protecting, and strictly guarding,
/// several kinds across groups (every webhook it renders), as JSON.
fn holdfast_configuration() -> String {
    let mut needs = PolicyNeeds::default();
    for (g, r) in [
        ("", "configmaps"),
        ("apps", "deployments"),
        ("apps", "*"),
        ("example.com", "widgets"),
    ] {
        needs.delete.insert(GroupResource::new(g, r));
        needs.strict.insert(GroupResource::new(g, r));
        needs.routes.push(Route {
            resources: [GroupResource::new(g, r)].into(),
            namespaces: NamespaceScope::Any,
            labels: None,
            names: None,
            policies: [format!("ResourceProtection/{r}")].into(),
            exclude: Default::default(),
        });
    }
    needs.containment = Containment::Everywhere;
    let opts = InstallOptions {
        target: WebhookTarget::Url("https://127.0.0.1:1/validate".into()),
        ca_bundle: b"not a real bundle".to_vec(),
        failure_policy: FailurePolicy::Fail,
        timeout_seconds: 10,
    };
    let cfg = desired_configuration_for(&ProtectionLabels::default(), true, &needs, &opts);
    serde_json::to_string(&cfg).expect("configuration renders")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_admission_objects_as_kube_apiserver_does() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let kube = KubeBackend::start(&dir.path().join("kube"))
        .await
        .expect("the kube backend starts (hack/substrates.sh kube etcd builds it)");
    let sim = Env::start_with(holdfast_sim::SimConfig::default())
        .await
        .expect("sim");
    let backstop = {
        let b = Backstop {
            labels: ProtectionLabels::default(),
            strict: true,
            strict_exempt: [("example.com".to_string(), "widgets".to_string())].into(),
        };
        serde_json::to_string(&b.policy()).expect("backstop renders")
    };
    let scenarios: Vec<(&str, String)> = vec![
        (
            "star beside star/star",
            configuration("p1", r#"["UPDATE"]"#, r#"["*", "*/*"]"#),
        ),
        (
            "star/star alone",
            configuration("p2", r#"["UPDATE"]"#, r#"["*/*"]"#),
        ),
        (
            "star beside a resource",
            configuration("p3", r#"["DELETE"]"#, r#"["*", "pods"]"#),
        ),
        (
            "star beside subresources",
            configuration("p4", r#"["UPDATE"]"#, r#"["*", "pods/*"]"#),
        ),
        (
            "pods/* beside pods/status",
            configuration("p5", r#"["UPDATE"]"#, r#"["pods/*", "pods/status"]"#),
        ),
        (
            "star operation beside another",
            configuration("p6", r#"["*", "DELETE"]"#, r#"["pods"]"#),
        ),
        ("no resources", configuration("p7", r#"["DELETE"]"#, "[]")),
        (
            "policy: star beside star/star",
            policy("p8", r#"["*", "*/*"]"#),
        ),
        ("policy: star/star alone", policy("p9", r#"["*/*"]"#)),
        ("holdfast's configuration", holdfast_configuration()),
        ("holdfast's strict backstop", backstop),
    ];
    let mut differ = Vec::new();
    for (what, manifest) in &scenarios {
        let real = create(&kube.kubeconfig, manifest);
        let simulated = create(&sim.kubeconfig, manifest);
        if real != simulated {
            differ.push(format!(
                "{what}:\n  kube-apiserver: {real:?}\n  simulator:      {simulated:?}"
            ));
        }
    }
    assert!(differ.is_empty(), "answers differ:\n{}", differ.join("\n"));
    // And the scenarios do tell refusals from acceptances (on the real server).
    let refused: Vec<&str> = scenarios
        .iter()
        .filter(|(_, m)| create(&kube.kubeconfig, m).0 != 0)
        .map(|(w, _)| *w)
        .collect();
    assert_eq!(
        refused,
        [
            "star beside star/star",
            "star beside a resource",
            "pods/* beside pods/status",
            "star operation beside another",
            "no resources",
            "policy: star beside star/star"
        ]
    );
}
