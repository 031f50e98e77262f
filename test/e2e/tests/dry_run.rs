//! `sideEffects: NoneOnDryRun`: the webhook writes Events, but none for a dry
//! run. The configuration the controller installs says so, a server-side dry-run
//! DELETE of a protected object is still refused with the same message, and only
//! the real attempt leaves a `DeletionBlocked` Event.
//!
//! Runs on the cluster of `HOLDFAST_E2E_KUBECONFIG` when set (in a namespace of
//! its own, removing what it created), else on a fresh sim.

use std::time::Duration;

use holdfast_e2e::{
    Env,
    controller::{start_controller_for_url, wait_configuration},
    e2e_cluster,
    steps::words,
    unique_name,
};
use serde_json::Value;

/// Removes what the test created on a cluster, however it ends.
struct Cleanup {
    kubeconfig: std::path::PathBuf,
    namespace: String,
    crds: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if e2e_cluster().is_none() {
            return;
        }
        let mut steps: Vec<Vec<&str>> = vec![
            words("delete validatingwebhookconfiguration holdfast --ignore-not-found"),
            vec![
                "delete",
                "namespace",
                &self.namespace,
                "--ignore-not-found",
                "--wait=false",
            ],
        ];
        if self.crds {
            for crd in HOLDFAST_CRDS {
                steps.push(vec!["delete", "crd", crd, "--ignore-not-found"]);
            }
        }
        for step in steps {
            let out = holdfast_e2e::kubectl_path().and_then(|k| {
                Ok(std::process::Command::new(k)
                    .env("KUBECONFIG", &self.kubeconfig)
                    .args(&step)
                    .output()?)
            });
            match out {
                Ok(out) if out.status.success() => {}
                other => eprintln!("cleanup: kubectl {}: {other:?}", step.join(" ")),
            }
        }
    }
}

const HOLDFAST_CRDS: [&str; 4] = [
    "resourceprotections.holdfast.dev",
    "anchorrules.holdfast.dev",
    "dependencyrules.holdfast.dev",
    "criticalservices.holdfast.dev",
];

fn blocked_events(env: &Env, ns: &str, name: &str) -> Vec<Value> {
    let out = env.run(&["get", "events.events.k8s.io", "-n", ns, "-o", "json"]);
    let list: Value = serde_json::from_str(&out.stdout).expect("json");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "DeletionBlocked" && e["regarding"]["name"] == name)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dry_run_is_refused_without_an_event() {
    let mut env = Env::for_kubernetes_test().await.expect("env");
    // The configuration "holdfast" is cluster-wide: never take over someone's.
    let out = env.attempt(&words(
        "get validatingwebhookconfiguration holdfast -o name",
    ));
    assert!(
        out.code != 0 && out.stderr.contains("(NotFound)"),
        "a configuration \"holdfast\" already exists: {out:?}"
    );
    let out = env
        .kubectl(&["get", "crd", HOLDFAST_CRDS[0], "-o", "name"])
        .expect("kubectl");
    let crds_before = out.code == 0;
    let ns = unique_name("holdfast-e2e-dry-run");
    let _cleanup = Cleanup {
        kubeconfig: env.kubeconfig.clone(),
        namespace: ns.clone(),
        crds: !crds_before,
    };
    env.install_crds().expect("crds");
    env.run(&["create", "namespace", &ns]);
    env.start_webhook_reachable(&[]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("ready");
    let url = env.webhook_url().expect("url");
    let mut c = start_controller_for_url(&env, "controller", &url, &["--cleanup-on-shutdown"])
        .expect("controller");
    c.wait_ready(30).await.expect("controller ready");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(30), |c| {
        c.is_some_and(|c| c["webhooks"].as_array().is_some_and(|w| !w.is_empty()))
    })
    .await
    .expect("installed");
    let cfg = cfg.expect("present");
    let effects: Vec<&str> = cfg["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .map(|w| w["sideEffects"].as_str().unwrap_or("<missing>"))
        .collect();
    assert!(
        !effects.is_empty() && effects.iter().all(|e| *e == "NoneOnDryRun"),
        "{effects:?}"
    );

    for name in ["dry", "real"] {
        env.run(&["create", "configmap", name, "-n", &ns, "--from-literal=a=b"]);
        env.run(&[
            "label",
            "configmap",
            name,
            "-n",
            &ns,
            "holdfast.dev/protected=Always",
        ]);
    }

    let refusal = |name: &str| {
        format!(
            "Error from server (Forbidden): admission webhook \"delete-label-0.holdfast.dev\" \
             denied the request: holdfast: ConfigMap {ns}/{name} is protected by label \
             holdfast.dev/protected=Always"
        )
    };
    let out = env
        .until_failed(&["delete", "configmap", "dry", "-n", &ns, "--dry-run=server"])
        .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with(&refusal("dry")), "{out:?}");

    // The real attempt on another object is refused the same way and leaves an
    // Event. Events are published in order by one worker, so once this one is
    // visible, one for the dry run would be too.
    let out = env.attempt(&["delete", "configmap", "real", "-n", &ns]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with(&refusal("real")), "{out:?}");
    let out = env
        .kubectl_until(
            &["get", "events.events.k8s.io", "-n", &ns, "-o", "json"],
            30,
            |o| o.stdout.contains("DeletionBlocked"),
        )
        .await
        .expect("event for the real attempt");
    assert_eq!(out.code, 0, "{out:?}");
    let real = blocked_events(&env, &ns, "real");
    assert_eq!(real.len(), 1, "{real:?}");
    assert_eq!(real[0]["type"], "Warning", "{real:?}");
    let dry = blocked_events(&env, &ns, "dry");
    assert_eq!(dry, Vec::<Value>::new());
    for name in ["dry", "real"] {
        env.prints(
            &[
                "get",
                "configmap",
                name,
                "-n",
                &ns,
                "-o",
                "jsonpath={.metadata.name}",
            ],
            name,
        );
    }
}
