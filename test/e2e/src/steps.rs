//! Steps the end-to-end tests share: a kubectl run that must succeed, the exact
//! checks of a refusal, a deletion and an object still there, and the controller
//! running as its ServiceAccount with the RBAC the manifests ship.

use std::time::{Duration, Instant};

use crate::{
    Env, KubectlOutput,
    controller::{ControllerProcess, start_controller},
};

impl Env {
    /// `kubectl args` as the admin; the test fails unless kubectl exits 0.
    pub fn run(&self, args: &[&str]) -> KubectlOutput {
        self.kubectl(args)
            .expect("kubectl runs")
            .ok()
            .unwrap_or_else(|e| panic!("kubectl {}: {e:#}", args.join(" ")))
    }

    /// Waits (at most 30 s) until `kubectl get args` succeeds: the resource is
    /// served (a CRD just created) or the object exists.
    pub async fn wait_served(&self, args: &[&str]) -> KubectlOutput {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        self.kubectl_until(&all, 30, |o| o.code == 0)
            .await
            .unwrap_or_else(|e| panic!("{args:?} never served: {e:#}"))
    }

    /// Waits (at most 30 s) until `kubectl get args --ignore-not-found -o name`
    /// prints nothing: the object is gone.
    pub async fn wait_absent(&self, args: &[&str]) {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--ignore-not-found", "-o", "name"]);
        self.kubectl_until(&all, 30, |o| o.code == 0 && o.stdout.is_empty())
            .await
            .unwrap_or_else(|e| panic!("{args:?} still there: {e:#}"));
    }

    /// Runs `kubectl args` until it fails (at most 30 s), and returns that
    /// answer for the test to check whole.
    pub async fn until_failed(&self, args: &[&str]) -> KubectlOutput {
        self.kubectl_until(args, 30, |o| o.code != 0)
            .await
            .unwrap_or_else(|e| panic!("{args:?} never failed: {e:#}"))
    }

    /// `kubectl args` as the admin, whatever its exit code (the test fails only
    /// when kubectl cannot be run at all).
    pub fn attempt(&self, args: &[&str]) -> KubectlOutput {
        self.kubectl(args).expect("kubectl runs")
    }

    /// Asserts `kubectl args` exits 0 printing exactly `stdout`.
    pub fn prints(&self, args: &[&str], stdout: &str) {
        deleted(&self.attempt(args), stdout);
    }

    /// Asserts `kubectl args` exits 1 printing exactly `stderr`.
    pub fn refuses(&self, args: &[&str], stderr: &str) {
        refused(&self.attempt(args), stderr);
    }

    /// The user name the API server gives the env's kubeconfig (`kubectl auth
    /// whoami`): `admin` on a simulator, whoever the kubeconfig names on a
    /// cluster.
    pub fn whoami(&self) -> String {
        self.run(&[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .stdout
    }

    /// Asserts `kubectl args` exits 1 with `text` in its refusal (see
    /// [`KubectlOutput::refused_with`]); fails printing the answer.
    /// Like [`Env::refuses`], just after an admission policy or webhook
    /// configuration changed: a real kube-apiserver enforces them from informers,
    /// so for a moment the previous configuration may still answer (the simulator
    /// switches at once). While `kubectl args` is refused differently it is tried
    /// again (for at most 30 s); it must end refused with exactly `stderr`. A
    /// request that is allowed is never repeated: the test fails there.
    pub async fn refuses_once_in_effect(&self, args: &[&str], stderr: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.attempt(args);
            if out.code != 0 && out.stderr != stderr && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            refused(&out, stderr);
            return;
        }
    }

    pub fn refuses_with(&self, args: &[&str], text: &str) {
        let out = self.attempt(args);
        assert!(out.refused_with(text), "{out:?}");
    }
}

/// The words of `line` (split at white space), as kubectl's arguments.
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// A condition query, `"kind name type status"` (or `reason` for the waits that
/// match a reason), as the four words the condition waits take.
pub fn query(line: &str) -> [&str; 4] {
    <[&str; 4]>::try_from(words(line))
        .unwrap_or_else(|w| panic!("a condition query is four words, not {w:?}"))
}

/// `kubectl args` as sim user `user` (any exit code).
pub fn as_user(env: &Env, user: &str, args: &[&str]) -> KubectlOutput {
    env.kubectl_as(user, args).expect("kubectl runs")
}

/// Asserts kubectl exited 1 printing exactly `stderr`.
pub fn refused(out: &KubectlOutput, stderr: &str) {
    assert_eq!((out.code, out.stderr.as_str()), (1, stderr), "{out:?}");
}

/// Asserts kubectl exited 0 printing exactly `stdout`.
pub fn deleted(out: &KubectlOutput, stdout: &str) {
    assert_eq!((out.code, out.stdout.as_str()), (0, stdout), "{out:?}");
}

/// Asserts `kubectl get args` finds the object named `args[1]`.
pub fn exists(env: &Env, args: &[&str]) {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "jsonpath={.metadata.name}"]);
    let out = env.kubectl(&all).expect("kubectl");
    assert_eq!((out.code, out.stdout.as_str()), (0, args[1]), "{out:?}");
}

/// Polls `probe` (every 100 ms, for at most `secs` seconds) until it answers
/// `Ok`, and returns that; past the deadline the test fails with the last `Err`
/// it answered (what was last seen).
pub async fn eventually<T>(secs: u64, mut probe: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) => assert!(Instant::now() < deadline, "after {secs}s: {last}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (at most `secs`) until `kubectl args` answers NotFound, failing with
/// what was last seen and the controller's log.
pub async fn wait_gone(env: &Env, args: &[&str], secs: u64, c: &ControllerProcess) {
    eventually(secs, async || {
        let out = env.kubectl(args).expect("kubectl runs");
        if out.is_not_found() {
            return Ok(());
        }
        Err(format!(
            "{args:?} still there: {out:?}\ncontroller log:\n{}",
            c.log()
        ))
    })
    .await
}

/// The controller (logging to `<name>.log`) with `kubeconfig`, pointing the
/// configuration at webhook `port`, `args` last; returns once it is ready.
pub async fn controller_as(
    env: &Env,
    port: u16,
    name: &str,
    kubeconfig: &str,
    args: &[&str],
) -> ControllerProcess {
    let mut all = vec!["--kubeconfig", kubeconfig];
    all.extend_from_slice(args);
    let mut c = start_controller(env, name, port, &all).expect("controller");
    c.wait_ready(30).await.expect("controller ready");
    c
}

/// The webhook started with the env's kubeconfig (the admin) and waited for.
pub async fn start_webhook(env: &mut Env, args: &[&str]) -> u16 {
    env.start_webhook(args).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    env.webhook.as_ref().map(|w| w.port).expect("port")
}

/// Runs `args` until kubectl's refusal contains `text` (see
/// [`KubectlOutput::refused_with`]); fails printing the last output.
pub async fn refused_until(env: &Env, args: &[&str], text: &str) -> KubectlOutput {
    env.kubectl_until(args, 30, |o| o.refused_with(text))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{args:?} never refused with {text:?}: {e:#}\nwebhook: {}",
                env.webhook_log()
            )
        })
}

/// Runs `args` until kubectl exits 1 printing exactly `stderr` (at most 30 s: a
/// webhook running as its ServiceAccount refuses, failing closed, until it may
/// read what it decides on); fails printing the last output.
pub async fn refused_exactly_until(env: &Env, args: &[&str], stderr: &str) -> KubectlOutput {
    env.kubectl_until(args, 30, |o| o.code == 1 && o.stderr == stderr)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{args:?} never refused with exactly {stderr:?}: {e:#}\nwebhook: {}",
                env.webhook_log()
            )
        })
}

/// Runs `args` until kubectl succeeds; fails printing the last output.
pub async fn allowed_until(env: &Env, args: &[&str]) -> KubectlOutput {
    env.kubectl_until(args, 30, |o| o.code == 0)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{args:?} never allowed: {e:#}\nwebhook: {}",
                env.webhook_log()
            )
        })
}

/// Applies `manifests/overlays/<overlay>` as the admin ([`Env::install_overlay`]).
pub fn apply_overlay(env: &Env, overlay: &str) {
    env.install_overlay(overlay).expect("overlay applied");
}

/// Kubeconfigs for the shipped ServiceAccounts of the controller and of the
/// webhook (in that order), written into the env's directory.
pub fn service_account_kubeconfigs(env: &Env) -> (String, String) {
    let write = |file: &str, user: &str| env.kubeconfig_for(file, user).expect("kubeconfig");
    (
        write("controller.kubeconfig", crate::CONTROLLER_SA),
        write("webhook.kubeconfig", crate::WEBHOOK_SA),
    )
}

/// holdfast as `manifests/overlays/kubernetes` ships it, serving the certificate
/// the controller issues: the overlay applied by the admin, the controller as
/// its ServiceAccount managing the CA Secret the manifests name (`args` last),
/// then the webhook as its ServiceAccount serving the certificate the controller
/// issued into that Secret.
pub async fn shipped_with_issued_certificate(env: &mut Env, args: &[&str]) -> ControllerProcess {
    apply_overlay(env, "kubernetes");
    let (controller_kc, webhook_kc) = service_account_kubeconfigs(env);
    let port = crate::free_port().expect("port");
    let mut all = vec!["--ca-secret", "holdfast-system/holdfast-webhook-tls"];
    all.extend_from_slice(args);
    let c = controller_as(env, port, "controller", &controller_kc, &all).await;
    crate::controller::use_issued_certificate(env, &c)
        .await
        .expect("issued certificate");
    env.start_webhook_on(port, &["--kubeconfig", &webhook_kc])
        .await
        .expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    c
}

/// Every verb an ordinary editor of objects holds.
pub const EVERYDAY: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// Waits (at most 30 s) until the live configuration has the webhook `name`.
pub async fn wait_webhook_installed(env: &Env, name: &str) {
    crate::controller::wait_configuration(env, Duration::from_secs(30), |cfg| {
        cfg.is_some_and(|c| {
            c["webhooks"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| w["name"] == name)
        })
    })
    .await
    .unwrap_or_else(|e| panic!("webhook {name} never installed: {e:#}"));
}

/// A simulator that knows the shipped ServiceAccounts (and nobody else but its
/// admin), with no webhook yet.
pub async fn sim_with_service_accounts() -> Env {
    if crate::e2e_cluster().is_some() {
        // The ServiceAccounts are impersonated there (`Env::kubeconfig_for`).
        return Env::for_kubernetes_test().await.expect("cluster");
    }
    let cfg = crate::with_service_accounts(holdfast_sim::SimConfig::default());
    Env::start_with(cfg).await.expect("sim")
}

/// Waits (at most 30 s) until the controller has installed the configuration
/// `holdfast`, and returns it.
pub async fn installed_configuration(env: &Env) -> serde_json::Value {
    let (cfg, _) =
        crate::controller::wait_configuration(env, Duration::from_secs(30), |c| c.is_some())
            .await
            .unwrap_or_else(|e| panic!("no configuration installed: {e:#}"));
    cfg.expect("present")
}

/// Writes to `path` a kubeconfig whose API server nobody serves (port 1 of
/// this host), for a process that must run without reaching one.
pub fn write_unreachable_kubeconfig(path: &std::path::Path) -> std::io::Result<()> {
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
        "current-context": "gone",
        "users": [{"name": "u", "user": {"token": "nope"}}],
    });
    std::fs::write(path, config.to_string())
}

/// What `kubectl kustomize dir` renders, as its documents; the test fails on
/// a failed render or a document that does not parse.
pub fn kustomize(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let kubectl = crate::kubectl_path().expect("kubectl");
    let out = std::process::Command::new(kubectl)
        .args([std::ffi::OsStr::new("kustomize"), dir.as_os_str()])
        .output()
        .expect("kubectl runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {stderr}",
        dir.display()
    );
    serde_saphyr::from_multiple(&stdout).expect("rendered YAML parses")
}

/// A simulator with holdfast's CRDs installed, and no webhook yet.
pub async fn sim_with_crds() -> Env {
    let env = Env::start().await.expect("sim");
    env.install_crds().expect("holdfast CRDs");
    env
}

/// kubectl's arguments for a JSON merge patch of `target` (the object and
/// its flags, e.g. `pod p1 -n vault --subresource=status`) with `patch`.
pub fn merge_patch<'a>(target: &'a str, patch: &'a str) -> Vec<&'a str> {
    let mut args = vec!["patch"];
    args.extend(target.split_whitespace());
    args.extend(["--type=merge", "-p", patch]);
    args
}

/// `user` asks for the deferred deletion of `target` (e.g. `vpc net`), naming
/// `requester`, in the two steps the webhook asks for: the markers, then (when the
/// refusal issues a signature) the markers with that signature. The last output.
pub fn ask_deferred_deletion(
    env: &Env,
    user: &crate::rbac::TestUser,
    target: &str,
    requester: &str,
) -> KubectlOutput {
    use holdfast_shared::deferred::{issued_signature, request_patch, signed_request_patch};
    let first = env
        .kubectl_by(user, &merge_patch(target, &request_patch(requester)))
        .expect("kubectl runs");
    let Some(sig) = issued_signature(&first.stderr) else {
        return first;
    };
    env.kubectl_by(
        user,
        &merge_patch(target, &signed_request_patch(requester, sig)),
    )
    .expect("kubectl runs")
}

/// The merge patch that clears an object's finalizers.
pub const NO_FINALIZERS: &str = r#"{"metadata":{"finalizers":null}}"#;

/// Waits (at most 30 s) until the policy `kind`/`name` reports `Ready=True`, and
/// returns that condition.
pub async fn wait_ready(env: &Env, kind: &str, name: &str) -> serde_json::Value {
    crate::controller::wait_condition(env, kind, name, "Ready", "True", 30)
        .await
        .unwrap_or_else(|e| panic!("{kind}/{name} never ready: {e:#}"))
}
