//! The Helm chart's life on a cluster (the simulator, or the cluster of
//! `HOLDFAST_E2E_KUBECONFIG`: the kube pass runs it on a real kube-apiserver and
//! kube-controller-manager): `helm lint`, install of the previous chart version,
//! upgrade to this one and rollback while two protected ConfigMaps (one by label,
//! which the backstop also guards, one by a ResourceProtection, which only the
//! webhook does) are deleted in a loop, none of whose deletions may go through, and
//! `helm uninstall`, which must leave no webhook configuration, no backstop, no
//! self-protection policy, and every protected object (and the kept CRDs) in place.
//!
//! There are no nodes: as for the kustomize installation (`Env::install_overlay`)
//! the binaries run on this host as the chart's ServiceAccounts, with the arguments
//! of the Deployments Helm applied, and the test plays the kubelet: a rollout is a
//! new webhook and controller started with the new arguments before the old ones
//! are stopped (the old webhook keeps serving until the new controller has pointed
//! the configuration at the new one, as a Service's endpoints would), and the
//! uninstall hook's Job is run here, its Pod (or, on the simulator, which has no Job
//! controller, the Job) then marked done.
//!
//! "The previous chart version": until a chart has been released, the chart of
//! this tree as the release before it (version and appVersion 0.0.9, so the image
//! tags change) installed with `controller.timeoutSeconds=5`, so that the upgrade
//! changes both Deployments and makes the new controller rewrite the configuration
//! (docs/decisions.md, "The Helm chart").

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use holdfast_e2e::{
    Env, WebhookProcess,
    controller::{ControllerProcess, start_controller, use_issued_certificate, wait_configuration},
    helm::{self, NAMESPACE, RELEASE},
    kubectl_path,
    steps::{eventually, refused_until},
    workspace_root,
};
use serde_json::Value;

const PREVIOUS: &str = "0.0.9";

/// The chart of this tree as the previous release (see the module's text).
fn previous_chart(dir: &Path) -> PathBuf {
    let to = dir.join("previous/holdfast");
    let from = workspace_root().join("charts/holdfast");
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(&from)
        .arg(&to)
        .status()
        .expect("cp runs");
    assert!(copied.success(), "copying {}", from.display());
    let chart = std::fs::read_to_string(to.join("Chart.yaml")).expect("Chart.yaml");
    let version = env!("CARGO_PKG_VERSION");
    let chart = chart
        .replace(
            &format!("version: {version}"),
            &format!("version: {PREVIOUS}"),
        )
        .replace(
            &format!("appVersion: \"{version}\""),
            &format!("appVersion: \"{PREVIOUS}\""),
        );
    assert!(chart.contains(&format!("version: {PREVIOUS}")), "{chart}");
    std::fs::write(to.join("Chart.yaml"), chart).expect("Chart.yaml written");
    to
}

/// `helm args` against the env's cluster, as its admin; fails printing the output.
fn helm_ok(env: &Env, args: &[&str]) -> String {
    let kubeconfig = env.kubeconfig.display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    let out = helm::run(&all);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "helm {}: {stdout}\n{stderr}",
        args.join(" ")
    );
    stdout
}

/// The admin's groups but `system:authenticated`, as `controller.adminGroups`: the
/// self-protection policy lets only them (and the controller) change the Deployments.
fn admin_groups(env: &Env) -> String {
    let groups = env
        .kubectl(&["auth", "whoami", "-o", "json"])
        .and_then(|o| o.ok()?.json())
        .expect("whoami")["status"]["userInfo"]["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let groups: Vec<String> = groups
        .iter()
        .filter_map(Value::as_str)
        .filter(|g| *g != "system:authenticated")
        .map(str::to_string)
        .collect();
    assert!(!groups.is_empty(), "the admin is in no group of its own");
    format!("controller.adminGroups={{{}}}", groups.join(","))
}

/// On a cluster: refuses an installation there already (as `Env::install_overlay`
/// does) and removes every cluster-scoped object the chart renders, and the
/// namespace, when the env drops (the kept CRDs too).
fn own_cluster_objects(env: &Env) {
    env.own_installation().expect("installation owned");
    let Some(run) = &env.cluster else {
        return;
    };
    let chart = workspace_root().join("charts/holdfast");
    let mut objects = vec![("Namespace".to_string(), NAMESPACE.to_string())];
    for d in helm::template(&chart, &[]) {
        if d["metadata"]["namespace"].is_null()
            && let (Some(kind), Some(name)) = (d["kind"].as_str(), d["metadata"]["name"].as_str())
        {
            objects.push((kind.to_string(), name.to_string()));
        }
    }
    for (kind, name) in &objects {
        assert!(
            !env.exists(&[kind, name]).expect("get"),
            "{kind} {name} exists: run this test against a cluster without holdfast"
        );
        run.remove_later(kind, name);
    }
}

/// The container arguments of Deployment `name` as Helm applied it.
fn live_args(env: &Env, name: &str) -> Vec<String> {
    let d = env
        .get_json(&["deployment", name, "-n", NAMESPACE])
        .expect("deployment");
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap_or_else(|| panic!("no args in {d}"))
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// The arguments the pods of the Deployments get, less what this host decides
/// (the subcommand, listen and probe addresses, TLS files, the Service the API
/// server cannot reach without pods: the harness gives those).
fn host_args(args: &[String]) -> Vec<String> {
    const HOST: [&str; 6] = [
        "--webhook-service=",
        "--probe-listen=",
        "--listen=",
        "--tls-cert=",
        "--tls-key=",
        "--kubeconfig=",
    ];
    args.iter()
        .filter(|a| *a != "run" && !HOST.iter().any(|h| a.starts_with(h)))
        .cloned()
        .collect()
}

/// One rollout of both Deployments as Kubernetes does it, the pods played here:
/// a new webhook and controller with the applied arguments, then the old
/// controller stopped, the new one leading and pointing the configuration at the
/// new webhook with `timeout` seconds, then the old webhook stopped.
async fn roll(
    env: &Env,
    old: (ControllerProcess, WebhookProcess),
    name: &str,
    timeout: i64,
) -> (ControllerProcess, WebhookProcess) {
    let (mut old_controller, old_webhook) = old;
    let (controller_kc, webhook_kc) = holdfast_e2e::steps::service_account_kubeconfigs(env);
    let mut wargs = host_args(&live_args(env, "holdfast-webhook"));
    wargs.extend(["--kubeconfig".to_string(), webhook_kc]);
    let wargs: Vec<&str> = wargs.iter().map(String::as_str).collect();
    let port = holdfast_e2e::free_port().expect("port");
    let log = env.dir.path().join(format!("webhook-{name}.log"));
    let webhook = env
        .spawn_webhook(port, &wargs, &log)
        .await
        .expect("webhook");
    webhook.wait_ready(30).await.expect("new webhook ready");
    let mut controller = controller_with_live_args(env, name, port, &controller_kc);
    old_controller
        .terminate(30)
        .await
        .expect("old controller stopped");
    controller
        .wait_ready(60)
        .await
        .expect("new controller ready");
    wait_configuration(env, Duration::from_secs(60), |cfg| {
        cfg.is_some_and(|c| {
            let hooks = c["webhooks"].as_array().cloned().unwrap_or_default();
            !hooks.is_empty()
                && hooks.iter().all(|h| {
                    h["clientConfig"]["url"]
                        .as_str()
                        .is_some_and(|u| u.contains(&format!(":{port}/")))
                        && h["timeoutSeconds"] == timeout
                })
        })
    })
    .await
    .unwrap_or_else(|e| panic!("the configuration never moved: {e:#}\n{}", controller.log()));
    drop(old_webhook);
    (controller, webhook)
}

/// The controller as its ServiceAccount with the applied arguments, the backstop
/// on as shipped, calling the webhook on `port`.
fn controller_with_live_args(
    env: &Env,
    name: &str,
    port: u16,
    kubeconfig: &str,
) -> ControllerProcess {
    let mut args = host_args(&live_args(env, "holdfast-controller"));
    if !args.iter().any(|a| a.starts_with("--backstop")) {
        args.push("--backstop=true".to_string());
    }
    args.extend(["--kubeconfig".to_string(), kubeconfig.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    start_controller(env, name, port, &args).expect("controller")
}

/// Deletes each of `targets` (`configmap NAME`) in `namespace` again and again until
/// stopped; returns how many were tried and which went through.
struct DeletionLoop {
    stop: Arc<AtomicBool>,
    tries: Arc<Mutex<u64>>,
    slipped: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DeletionLoop {
    fn start(kubeconfig: &Path, namespace: &str, targets: &[&str]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tries = Arc::new(Mutex::new(0));
        let slipped = Arc::new(Mutex::new(vec![]));
        let (kubeconfig, namespace) = (kubeconfig.to_path_buf(), namespace.to_string());
        let targets: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
        let kubectl = kubectl_path().expect("kubectl");
        let thread = {
            let (stop, tries, slipped) = (stop.clone(), tries.clone(), slipped.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    for t in &targets {
                        let out = Command::new(&kubectl)
                            .env("KUBECONFIG", &kubeconfig)
                            .args(["delete", "configmap", t, "-n", &namespace, "--wait=false"])
                            .stdin(Stdio::null())
                            .output();
                        if let Ok(mut n) = tries.lock() {
                            *n += 1;
                        }
                        if let Ok(out) = out
                            && out.status.success()
                            && let Ok(mut s) = slipped.lock()
                        {
                            s.push(format!("{t}: {}", String::from_utf8_lossy(&out.stdout)));
                        }
                    }
                }
            })
        };
        Self {
            stop,
            tries,
            slipped,
            thread: Some(thread),
        }
    }

    fn tries(&self) -> u64 {
        self.tries.lock().map(|n| *n).unwrap_or(0)
    }

    /// Waits until the loop has tried `more` deletions past `since`.
    async fn past(&self, since: u64, more: u64) {
        eventually(60, async || {
            let n = self.tries();
            if n >= since + more {
                Ok(n)
            } else {
                Err(format!("{n} deletions tried"))
            }
        })
        .await;
    }

    /// Stops the loop; the deletions that went through.
    fn finish(mut self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let slipped = self.slipped.lock().map(|s| s.clone()).unwrap_or_default();
        (self.tries(), slipped)
    }
}

impl Drop for DeletionLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn install_upgrade_rollback_and_uninstall_keep_every_protection() {
    let env = holdfast_e2e::steps::sim_with_service_accounts().await;
    own_cluster_objects(&env);
    let chart = workspace_root().join("charts/holdfast");
    let chart_arg = chart.display().to_string();
    let lint = helm::run(&["lint", "--strict", &chart_arg]);
    assert!(lint.status.success(), "helm lint: {lint:?}");
    let previous = previous_chart(env.dir.path());
    let previous_arg = previous.display().to_string();
    let admins = admin_groups(&env);

    // The previous version, as an administrator installs it.
    let out = helm_ok(
        &env,
        &[
            "install",
            RELEASE,
            &previous_arg,
            "-n",
            NAMESPACE,
            "--create-namespace",
            "--set",
            &admins,
            "--set",
            "controller.timeoutSeconds=5",
        ],
    );
    assert!(out.contains("STATUS: deployed"), "{out}");
    assert!(live_args(&env, "holdfast-controller").contains(&"--timeout-seconds=5".to_string()));
    let (controller_kc, webhook_kc) = holdfast_e2e::steps::service_account_kubeconfigs(&env);
    let port = holdfast_e2e::free_port().expect("port");
    let mut controller = controller_with_live_args(&env, "controller-1", port, &controller_kc);
    controller.wait_ready(60).await.expect("controller ready");
    use_issued_certificate(&env, &controller)
        .await
        .expect("certificate");
    let mut wargs = host_args(&live_args(&env, "holdfast-webhook"));
    wargs.extend(["--kubeconfig".to_string(), webhook_kc]);
    let wargs: Vec<&str> = wargs.iter().map(String::as_str).collect();
    let log = env.dir.path().join("webhook-1.log");
    let webhook = env
        .spawn_webhook(port, &wargs, &log)
        .await
        .expect("webhook");
    webhook.wait_ready(30).await.expect("webhook ready");
    wait_configuration(&env, Duration::from_secs(60), |c| c.is_some())
        .await
        .expect("configuration installed");
    for (kind, name) in [
        ("validatingadmissionpolicybinding", "holdfast-backstop"),
        (
            "validatingadmissionpolicybinding",
            "holdfast-self-protection",
        ),
    ] {
        eventually(60, async || {
            env.exists(&[kind, name])
                .map_err(|e| e.to_string())?
                .then_some(())
                .ok_or(format!("no {kind} {name}"))
        })
        .await;
    }

    // Two protected objects: by label (backstop and webhook), by a
    // ResourceProtection (the webhook alone).
    let shop = env.namespace("shop").expect("namespace");
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: labelled, namespace: {shop}, labels: {{holdfast.dev/protected: Always}}}}\n\
         ---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: selected, namespace: {shop}}}\n\
         ---\napiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: helm-rollout}}\n\
         spec:\n  resources:\n  - {{group: \"\", version: v1, resource: configmaps, namespace: {shop}, names: [selected]}}\n"
    ))
    .expect("applied")
    .ok()
    .expect("applied");
    for name in ["labelled", "selected"] {
        refused_until(
            &env,
            &["delete", "configmap", name, "-n", &shop],
            "holdfast:",
        )
        .await;
    }
    let deletions = DeletionLoop::start(&env.kubeconfig, &shop, &["labelled", "selected"]);
    deletions.past(0, 4).await;

    // Upgrade to this version, and its rollout.
    let out = helm_ok(
        &env,
        &[
            "upgrade", RELEASE, &chart_arg, "-n", NAMESPACE, "--set", &admins,
        ],
    );
    assert!(
        out.contains("STATUS: deployed") && out.contains("REVISION: 2"),
        "{out}"
    );
    let args = live_args(&env, "holdfast-controller");
    assert!(
        !args.iter().any(|a| a.starts_with("--timeout-seconds")),
        "{args:?}"
    );
    let n = deletions.tries();
    let (controller, webhook) = roll(&env, (controller, webhook), "controller-2", 10).await;
    deletions.past(n, 4).await;

    // Rollback to the previous version, and its rollout.
    let out = helm_ok(&env, &["rollback", RELEASE, "1", "-n", NAMESPACE]);
    assert!(out.contains("Rollback was a success"), "{out}");
    assert!(live_args(&env, "holdfast-controller").contains(&"--timeout-seconds=5".to_string()));
    let history = helm_ok(&env, &["history", RELEASE, "-n", NAMESPACE, "-o", "json"]);
    let history: Value = serde_json::from_str(&history).expect("history is JSON");
    assert_eq!(history.as_array().map(Vec::len), Some(3), "{history}");
    assert_eq!(
        history[2]["chart"],
        format!("holdfast-{PREVIOUS}"),
        "{history}"
    );
    let n = deletions.tries();
    let (controller, webhook) = roll(&env, (controller, webhook), "controller-3", 5).await;
    deletions.past(n, 4).await;
    let (tries, slipped) = deletions.finish();
    assert!(
        slipped.is_empty(),
        "deleted during the rollouts ({tries} tried): {slipped:?}"
    );
    for name in ["labelled", "selected"] {
        assert!(
            env.exists(&["configmap", name, "-n", &shop]).expect("get"),
            "{name}"
        );
    }

    uninstall(&env, controller).await;
    drop(webhook);
    // Nothing of holdfast is enforced any more, and nothing protected went.
    for (kind, name) in [
        ("validatingwebhookconfiguration", "holdfast"),
        ("validatingadmissionpolicy", "holdfast-backstop"),
        ("validatingadmissionpolicybinding", "holdfast-backstop"),
        ("validatingadmissionpolicy", "holdfast-self-protection"),
        (
            "validatingadmissionpolicybinding",
            "holdfast-self-protection",
        ),
        ("deployment", "holdfast-controller"),
        ("deployment", "holdfast-webhook"),
        ("clusterrole", "holdfast-controller"),
    ] {
        let mut args = vec![kind, name];
        if kind == "deployment" {
            args.extend(["-n", NAMESPACE]);
        }
        assert!(!env.exists(&args).expect("get"), "{kind} {name} is left");
    }
    for name in ["labelled", "selected"] {
        assert!(
            env.exists(&["configmap", name, "-n", &shop]).expect("get"),
            "{name}"
        );
    }
    assert!(
        env.exists(&["resourceprotection", "helm-rollout"])
            .expect("get")
    );
    for crd in holdfast_shared::selfprotection::CRD_NAMES {
        assert!(
            env.exists(&["crd", crd]).expect("get"),
            "CRD {crd} not kept"
        );
    }
}

/// `helm uninstall`, the test playing the kubelet: the pre-delete hook's Job is run
/// on this host as the controller's ServiceAccount, the running controller stopped
/// once its Deployment is scaled to zero, and the Job's Pod (on the simulator,
/// which has no Job controller, the Job) marked done.
async fn uninstall(env: &Env, mut controller: ControllerProcess) {
    let kubeconfig = env.kubeconfig.display().to_string();
    let mut helm_uninstall = helm::command(&[
        "--kubeconfig",
        &kubeconfig,
        "uninstall",
        "--debug",
        RELEASE,
        "-n",
        NAMESPACE,
        "--timeout",
        "3m",
    ])
    .expect("helm")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("helm uninstall starts");
    let job = eventually(60, async || {
        env.get_json(&["job", "holdfast-uninstall", "-n", NAMESPACE])
            .map_err(|e| e.to_string())
    })
    .await;
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        job["spec"]["template"]["spec"]["serviceAccountName"],
        "holdfast-controller"
    );
    let (controller_kc, _) = holdfast_e2e::steps::service_account_kubeconfigs(env);
    let log = env.dir.path().join("uninstall.log");
    let mut hook = Command::new(holdfast_e2e::bin("holdfast-controller").expect("binary"))
        .args(
            container["args"]
                .as_array()
                .expect("args")
                .iter()
                .filter_map(Value::as_str),
        )
        .args(["--kubeconfig", &controller_kc])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("the hook's command starts");
    // The kubelet stops the controller's pods once the Deployment is scaled to zero.
    eventually(60, async || {
        if let Ok(Some(status)) = hook.try_wait() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("the hook ended ({status}) before the controller stopped: {log}");
        }
        let d = env
            .get_json(&["deployment", "holdfast-controller", "-n", NAMESPACE])
            .map_err(|e| e.to_string())?;
        (d["spec"]["replicas"] == 0)
            .then_some(())
            .ok_or(format!("replicas {}", d["spec"]["replicas"]))
    })
    .await;
    controller.terminate(30).await.expect("controller stopped");
    let status = eventually(90, async || match hook.try_wait() {
        Ok(Some(s)) => Ok(s),
        _ => Err("the hook still runs".to_string()),
    })
    .await;
    let hook_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status.success(),
        "holdfast-controller uninstall: {status}\n{hook_log}"
    );
    complete_job(env).expect("the hook's Job marked done");
    eventually(120, async || match helm_uninstall.try_wait() {
        Ok(Some(_)) => Ok(()),
        _ => Err("helm uninstall still runs".to_string()),
    })
    .await;
    let out = helm_uninstall
        .wait_with_output()
        .expect("helm uninstall output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helm uninstall: {stdout}\n{}\nhook: {hook_log}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("release \"{RELEASE}\" uninstalled")),
        "{stdout}"
    );
    assert!(
        stdout.contains("These resources were kept due to the resource policy"),
        "{stdout}"
    );
}

/// Reports the hook's Job done as the kubelet would: its Pod Succeeded (the Job
/// controller then completes the Job); on the simulator, with no Job controller,
/// the Job's status itself.
fn complete_job(env: &Env) -> anyhow::Result<()> {
    let pods = env.get_json(&["pods", "-n", NAMESPACE, "-l", "job-name=holdfast-uninstall"])?;
    let names: Vec<String> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    if names.is_empty() {
        let status = serde_json::json!({"status": {"succeeded": 1, "conditions": [
            {"type": "Complete", "status": "True"}]}});
        env.kubectl(&[
            "patch",
            "job",
            "holdfast-uninstall",
            "-n",
            NAMESPACE,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])?
        .ok()
        .context("completing the Job")?;
        return Ok(());
    }
    for name in names {
        let status = serde_json::json!({"status": {"phase": "Succeeded"}});
        env.kubectl(&[
            "patch",
            "pod",
            &name,
            "-n",
            NAMESPACE,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])?
        .ok()
        .with_context(|| format!("marking Pod {name} Succeeded"))?;
    }
    Ok(())
}
