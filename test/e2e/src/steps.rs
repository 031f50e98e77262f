//! Steps the end-to-end tests share: a kubectl run that must succeed, the exact
//! checks of a refusal, a deletion and an object still there, and the controller
//! running as its ServiceAccount with the RBAC the manifests ship.

use std::time::{Duration, Instant};

use crate::{
    Env, KubectlOutput,
    controller::{ControllerProcess, start_controller},
};

/// `kubectl args` as the admin; the test fails unless kubectl exits 0.
pub fn run(env: &Env, args: &[&str]) -> KubectlOutput {
    env.kubectl(args)
        .expect("kubectl runs")
        .ok()
        .unwrap_or_else(|e| panic!("kubectl {}: {e:#}", args.join(" ")))
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

/// holdfast's CRDs, the namespace `holdfast-system` and the controller's RBAC as
/// `manifests/base/rbac-controller.yaml` and `rbac-reads.yaml` ship it, applied
/// by the admin; returns the path of a kubeconfig for the controller's
/// ServiceAccount (the sim must know it: [`crate::with_service_accounts`]).
pub fn install_controller_rbac(env: &Env) -> String {
    env.install_crds().expect("holdfast CRDs");
    run(env, &["create", "namespace", "holdfast-system"]);
    for file in ["rbac-controller.yaml", "rbac-reads.yaml"] {
        let rbac = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../manifests/base")
            .join(file);
        run(env, &["apply", "-f", &rbac.to_string_lossy()]);
    }
    let kubeconfig = env.dir.path().join("controller.kubeconfig");
    env.sim
        .write_kubeconfig(&kubeconfig, crate::CONTROLLER_SA)
        .expect("controller kubeconfig");
    kubeconfig.to_string_lossy().into_owned()
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
