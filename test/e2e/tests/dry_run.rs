//! `sideEffects: NoneOnDryRun`: the webhook writes Events, but none for a dry
//! run. The configuration the controller installs says so, a server-side dry-run
//! DELETE of a protected object is still refused with the same message, and only
//! the real attempt leaves a `DeletionBlocked` Event.

use std::time::Duration;

use holdfast_e2e::{
    Env,
    controller::{start_controller, wait_configuration},
};
use serde_json::Value;

fn blocked_events(env: &Env, name: &str) -> Vec<Value> {
    let out = env
        .kubectl(&["get", "events.events.k8s.io", "-n", "default", "-o", "json"])
        .expect("kubectl")
        .ok()
        .expect("events listed");
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
    let mut env = Env::start().await.expect("sim");
    env.install_crds().expect("crds");
    env.start_webhook(&[]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let mut c = start_controller(&env, "controller", port, &[]).expect("controller");
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
        env.kubectl(&[
            "create",
            "configmap",
            name,
            "-n",
            "default",
            "--from-literal=a=b",
        ])
        .expect("kubectl")
        .ok()
        .expect("created");
        env.kubectl(&[
            "label",
            "configmap",
            name,
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ])
        .expect("kubectl")
        .ok()
        .expect("labelled");
    }

    let refusal = |name: &str| {
        format!(
            "Error from server (Forbidden): admission webhook \"delete-label-0.holdfast.dev\" \
             denied the request: holdfast: ConfigMap default/{name} is protected by label \
             holdfast.dev/protected=Always"
        )
    };
    let out = env
        .kubectl_until(
            &[
                "delete",
                "configmap",
                "dry",
                "-n",
                "default",
                "--dry-run=server",
            ],
            30,
            |o| o.code != 0,
        )
        .await
        .expect("dry run refused");
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with(&refusal("dry")), "{out:?}");

    // The real attempt on another object is refused the same way and leaves an
    // Event. Events are published in order by one worker, so once this one is
    // visible, one for the dry run would be too.
    let out = env
        .kubectl(&["delete", "configmap", "real", "-n", "default"])
        .expect("kubectl");
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with(&refusal("real")), "{out:?}");
    let out = env
        .kubectl_until(
            &["get", "events.events.k8s.io", "-n", "default", "-o", "json"],
            30,
            |o| o.stdout.contains("DeletionBlocked"),
        )
        .await
        .expect("event for the real attempt");
    assert_eq!(out.code, 0, "{out:?}");
    let real = blocked_events(&env, "real");
    assert_eq!(real.len(), 1, "{real:?}");
    assert_eq!(real[0]["type"], "Warning", "{real:?}");
    let dry = blocked_events(&env, "dry");
    assert_eq!(dry, Vec::<Value>::new());
    for name in ["dry", "real"] {
        let out = env
            .kubectl(&[
                "get",
                "configmap",
                name,
                "-n",
                "default",
                "-o",
                "jsonpath={.metadata.name}",
            ])
            .expect("kubectl");
        assert_eq!((out.code, out.stdout.as_str()), (0, name), "{out:?}");
    }
}
