//! One source of truth for the settings both binaries must share: the controller
//! records `--strict` and the protection labels in the annotation
//! `holdfast.dev/settings` of the configuration it installs; a webhook with other
//! settings refuses to run (at start, and by draining and exiting once the
//! configuration changes under it), and one with the same settings serves them.

use std::{
    path::Path,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use holdfast_e2e::{
    Env,
    controller::start_controller,
    free_port, http_get,
    steps::{installed_configuration, words},
};

const KARMADA: &str = "resourcetemplate.karmada.io/deletion-protected=Always";

/// A webhook on the env's API server and certificate, logging to `log`: on a
/// sim at 127.0.0.1, on a cluster at every address of this host (its API server
/// calls it at `HOLDFAST_E2E_WEBHOOK_HOST`).
fn spawn_webhook(env: &Env, port: u16, args: &[&str], log: &Path) -> (Child, u16) {
    let probe = free_port().expect("port");
    let host = if env.cluster.is_some() {
        "0.0.0.0"
    } else {
        "127.0.0.1"
    };
    let mut cmd = env
        .webhook_command(&format!("{host}:{port}"), probe)
        .expect("binary");
    for (key, _) in std::env::vars() {
        if key.starts_with("HOLDFAST_") || key.ends_with("_BACKTRACE") {
            cmd.env_remove(key);
        }
    }
    let child = cmd
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["--settings-check-interval-ms", "200"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("spawn");
    (child, probe)
}

/// Waits for `child` to exit (30 s), printing its log if it does not.
async fn exit_code(child: &mut Child, log: &Path) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "webhook still running after 30s: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn last_line(log: &Path) -> String {
    std::fs::read_to_string(log)
        .expect("log")
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

fn refusal(detail: &str) -> String {
    format!(
        "holdfast-webhook: error: settings differ from those the controller installed the \
         configuration \"holdfast\" for: {detail}; start both binaries with the same \
         HOLDFAST_STRICT and HOLDFAST_PROTECTION_LABELS"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_webhook_refuses_settings_the_controller_does_not_share() {
    // On a cluster the controller owns the configuration "holdfast" there (the
    // suite's lock, `Env::own_installation`, taken with the CRDs): no other test
    // runs meanwhile, and an installation the suite did not create is refused.
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    // The HTTPS port every webhook of the test takes in turn (the configuration
    // calls it there), free when the test starts.
    let port = free_port().expect("port");

    // Nothing installed yet: a webhook without --strict serves.
    let log = env.dir.path().join("plain.log");
    let (mut plain, probe) = spawn_webhook(&env, port, &[], &log);
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(probe, "/healthz").await.map(|(s, _)| s) != Ok(200) {
        assert!(
            Instant::now() < deadline,
            "not healthy: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert_eq!(plain.try_wait().expect("wait"), None, "exited early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The controller installs strict webhooks and says so.
    let mut c = start_controller(&env, "controller", port, &["--strict"]).expect("controller");
    c.wait_ready(30).await.expect("controller ready");
    let cfg = installed_configuration(&env).await;
    assert_eq!(
        cfg["metadata"]["annotations"]["holdfast.dev/settings"],
        r#"{"protectionLabels":["holdfast.dev/protected=Always,Cascading,true"],"strict":true}"#
    );

    // The running webhook notices, drains and stops with one line.
    let strict_mismatch = refusal(
        "the controller runs with strict=true, this webhook with strict=false (HOLDFAST_STRICT)",
    );
    assert_eq!(exit_code(&mut plain, &log).await, Some(1));
    assert_eq!(last_line(&log), strict_mismatch);

    // A new one with the same mismatch refuses to start.
    let log = env.dir.path().join("plain2.log");
    let (mut again, _) = spawn_webhook(&env, port, &[], &log);
    assert_eq!(exit_code(&mut again, &log).await, Some(1));
    assert_eq!(last_line(&log), strict_mismatch);

    // So does one that is strict but knows another set of labels.
    let log = env.dir.path().join("labels.log");
    let (mut labels, _) = spawn_webhook(
        &env,
        port,
        &["--strict", "--protection-label", KARMADA],
        &log,
    );
    assert_eq!(exit_code(&mut labels, &log).await, Some(1));
    assert_eq!(
        last_line(&log),
        refusal(
            "the controller protects with labels [holdfast.dev/protected=Always,Cascading,true], this \
             webhook with [holdfast.dev/protected=Always,Cascading,true \
             resourcetemplate.karmada.io/deletion-protected=Always] (HOLDFAST_PROTECTION_LABELS)"
        )
    );

    // The same settings: it serves, and the strict webhooks are enforced.
    env.start_webhook_on(port, &["--strict"])
        .await
        .expect("strict webhook");
    env.wait_webhook_ready().await.expect("ready");
    env.run(&["create", "configmap", "db", "--from-literal=a=b"]);
    env.run(&["label", "configmap", "db", "holdfast.dev/protected=true"]);
    let out = env.attempt(&["label", "configmap", "db", "holdfast.dev/protected-"]);
    assert_eq!(out.code, 1, "{out:?}");
    // Both the strict label webhook and the break-glass webhook see the UPDATE and
    // refuse it; the API server returns the refusal that reaches it first.
    assert!(
        ["strict-label-0.holdfast.dev", "break-glass.holdfast.dev"]
            .iter()
            .any(|w| out.stderr.starts_with(&format!(
                "Error from server (Forbidden): admission webhook \"{w}\" denied the request: \
                 holdfast: "
            )))
            && out.stderr.contains("strict mode is on"),
        "{out:?}"
    );
    env.prints(
        &words("get configmap db -o jsonpath={.metadata.labels}"),
        r#"{"holdfast.dev/protected":"true"}"#,
    );
    // Still serving a while later (the check keeps agreeing).
    let log = env.webhook.as_ref().map(|w| w.log.clone()).expect("log");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("settings agree with the controller's configuration") {
            break;
        }
        assert!(Instant::now() < deadline, "no agreement logged: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
