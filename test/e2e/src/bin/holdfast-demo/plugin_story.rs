//! `kubectl holdfast`: why a deletion would be refused, and the posture check.

use crate::runner::Demo;
use holdfast_e2e::Env;
use std::process::{Command, Stdio};

const EXPLAIN_NAMESPACE: &str = "apiVersion: v1
kind: Namespace
metadata: {name: explain}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: explain
  labels: {holdfast.dev/protected: Always}
data: {mode: production}
";

/// Runs `kubectl holdfast args` (the plugin on PATH), prints what it printed, and
/// checks its exit code and output.
fn plugin(
    demo: &mut Demo,
    env: &Env,
    args: &[&str],
    code: i32,
    must_contain: &[&str],
) -> anyhow::Result<()> {
    let bin = holdfast_e2e::bin("kubectl-holdfast")?;
    let dir = bin
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no directory", bin.display()))?;
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    println!("$ kubectl holdfast {}", args.join(" "));
    let out = Command::new(holdfast_e2e::kubectl_path()?)
        .env("KUBECONFIG", &env.kubeconfig)
        .env("PATH", path)
        .arg("holdfast")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}{stderr}");
    let got = out.status.code().unwrap_or(-1);
    let missing: Vec<&&str> = must_contain
        .iter()
        .filter(|m| !stdout.contains(**m))
        .collect();
    demo.check(
        got == code && missing.is_empty(),
        &format!(
            "kubectl holdfast {}: exit {got} (expected {code}), missing {missing:?}",
            args.join(" ")
        ),
    );
    Ok(())
}

/// `why` on an object and on its namespace, then `check`.
pub async fn story(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "kubectl holdfast — why can't I delete this? am I protected?",
        "issue 16: the plugin explains with the webhook's own evaluation, and checks the posture",
    );
    demo.say("A namespace with a label-protected ConfigMap");
    demo.apply(
        env,
        None,
        EXPLAIN_NAMESPACE,
        &["namespace/explain created", "configmap/settings created"],
    )?;
    demo.say("Why would deleting the ConfigMap be refused? (exit code 1: refused)");
    plugin(
        demo,
        env,
        &["why", "configmap", "settings", "-n", "explain"],
        1,
        &[
            "ConfigMap explain/settings: DELETE would be REFUSED (decided by: label)",
            "  - label holdfast.dev/protected (mode Enforce)",
            "Ways out:",
        ],
    )?;
    demo.say("And the namespace? Everything inside that blocks it");
    plugin(
        demo,
        env,
        &["why", "ns/explain"],
        1,
        &[
            "  - containment (mode Enforce)",
            "      ConfigMap explain/settings (label)",
        ],
    )?;
    demo.say("The posture of the cluster: the namespace protects nothing itself");
    plugin(
        demo,
        env,
        &["check"],
        1,
        &[
            "Webhook configuration holdfast: present",
            "error: NamespaceUnprotected Namespace/explain: not protected itself, yet holds \
             protected objects: ConfigMap explain/settings (label)",
        ],
    )?;
    Ok(())
}
