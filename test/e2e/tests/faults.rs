//! Fault test: deletions of protected and unprotected objects are attempted without
//! pause while, in turn, the webhook is killed and restarted, the controller is
//! killed and restarted, the API server has an outage (a restart: every connection
//! and watch cut, state kept), and the serving certificate rotates to a new CA. No
//! protected object may be lost; every unprotected deletion must eventually succeed.
//!
//! `HOLDFAST_FAULT_ROUNDS` (default 1) repeats the four faults; `hack/fault-test.sh`
//! runs more rounds and prints the counts. The counts of one run are printed on
//! stdout (`cargo test -- --nocapture`).

use holdfast_e2e::controller::{start_controller, wait_configuration};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// Objects that must survive: (namespace, name, what protects it).
const PROTECTED: &[(&str, &str, &str)] = &[
    ("vault", "policy-1", "ResourceProtection"),
    ("vault", "policy-2", "ResourceProtection"),
    ("default", "crown", "label"),
];

#[derive(Default)]
struct Counts {
    protected_attempts: AtomicU64,
    protected_refused: AtomicU64,
    protected_failed_call: AtomicU64,
    protected_lost: AtomicU64,
    unprotected_created: AtomicU64,
    unprotected_deleted: AtomicU64,
    unprotected_retries: AtomicU64,
}

fn configmap(ns: &str, name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": {"k": "v"}
    }))
    .expect("configmap")
}

/// Tries to delete every protected object, again and again, until `stop`.
async fn attack_protected(client: kube::Client, counts: Arc<Counts>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        for (ns, name, _) in PROTECTED {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            counts.protected_attempts.fetch_add(1, Ordering::Relaxed);
            match tokio::time::timeout(
                Duration::from_secs(15),
                api.delete(name, &DeleteParams::default()),
            )
            .await
            {
                Ok(Ok(_)) => {
                    counts.protected_lost.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 403 => {
                    counts.protected_refused.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    counts.protected_failed_call.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates unprotected ConfigMaps and deletes each until its deletion succeeds (or
/// it is gone), until `stop`; returns the names it could not remove by `deadline`.
async fn churn_unprotected(
    client: kube::Client,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    deadline: Arc<std::sync::Mutex<Option<Instant>>>,
) -> Vec<String> {
    let api: Api<ConfigMap> = Api::namespaced(client, "scratch");
    let mut leftovers = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        n += 1;
        let name = format!("tmp-{n}");
        // Creating may fail during an outage: retry it too.
        let mut created = false;
        while !stop.load(Ordering::Acquire) {
            match api
                .create(
                    &PostParams::default(),
                    &configmap("scratch", &name, serde_json::json!({})),
                )
                .await
            {
                Ok(_) => {
                    created = true;
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    created = true;
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        if !created {
            break;
        }
        counts.unprotected_created.fetch_add(1, Ordering::Relaxed);
        loop {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 404 => break,
                Err(_) => {
                    counts.unprotected_retries.fetch_add(1, Ordering::Relaxed);
                    let late = deadline
                        .lock()
                        .ok()
                        .and_then(|d| *d)
                        .is_some_and(|d| Instant::now() > d);
                    if late {
                        leftovers.push(name.clone());
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        if !leftovers.contains(&name) {
            counts.unprotected_deleted.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    leftovers
}

async fn wait_until<F: Fn() -> bool>(what: &str, secs: u64, check: F) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(Instant::now() < deadline, "{what} within {secs}s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_protected_object_is_lost_while_everything_restarts() {
    holdfast_e2e::needs_simulator!("it restarts the API server");
    let rounds: u32 = std::env::var("HOLDFAST_FAULT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    for ns in ["vault", "scratch"] {
        env.run(&["create", "namespace", ns]);
    }
    env.apply(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata:\n  name: vault-configmaps\n\
         spec:\n  resources:\n  - {group: \"\", version: v1, resource: configmaps, namespace: vault}\n",
    )
    .expect("ResourceProtection");
    let client = env.sim.client().await.expect("client");
    for (ns, name, by) in PROTECTED {
        let labels = if *by == "label" {
            serde_json::json!({"holdfast.dev/protected": "Always"})
        } else {
            serde_json::json!({})
        };
        Api::<ConfigMap>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &configmap(ns, name, labels))
            .await
            .expect("create protected");
    }
    env.start_webhook(&[]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let mut controller = start_controller(&env, "controller", port, &[]).expect("controller");
    controller.wait_ready(60).await.expect("controller ready");
    wait_configuration(&env, Duration::from_secs(30), |cfg| {
        cfg.is_some_and(|c| c.to_string().contains("policies-0.holdfast.dev"))
    })
    .await
    .expect("configuration installed");
    // Both protections hold before any fault.
    for (ns, name, by) in PROTECTED {
        let out = env
            .until_failed(&["delete", "configmap", name, "-n", ns])
            .await;
        let expected = if *by == "label" {
            "is protected by label holdfast.dev/protected=Always"
        } else {
            "ResourceProtection/vault-configmaps"
        };
        assert!(out.stderr.contains(expected), "{ns}/{name}: {out:?}");
    }

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Arc::new(std::sync::Mutex::new(None));
    let attacker = tokio::spawn(attack_protected(
        client.clone(),
        counts.clone(),
        stop.clone(),
    ));
    let churn = tokio::spawn(churn_unprotected(
        client.clone(),
        counts.clone(),
        stop.clone(),
        deadline.clone(),
    ));
    let steady = || tokio::time::sleep(Duration::from_secs(2));
    for round in 0..rounds {
        steady().await;
        // 1. The webhook dies (SIGKILL) and comes back on the same port.
        drop(env.webhook.take());
        tokio::time::sleep(Duration::from_secs(1)).await;
        env.start_webhook_on(port, &[]).await.expect("webhook back");
        env.wait_webhook_ready().await.expect("webhook ready again");
        steady().await;
        // 2. The controller dies and comes back.
        controller.kill();
        tokio::time::sleep(Duration::from_secs(1)).await;
        controller = start_controller(&env, &format!("controller-{round}"), port, &[])
            .expect("controller back");
        controller
            .wait_ready(60)
            .await
            .expect("controller ready again");
        steady().await;
        // 3. The API server restarts.
        env.sim
            .outage(Duration::from_secs(2))
            .await
            .expect("outage");
        steady().await;
        // 4. The serving certificate rotates to a new CA: the bundle first (old and
        // new CA, re-read by the controller), then the pair (hot-reloaded).
        let next = holdfast_e2e::pki(&format!("rotated-{round}")).expect("pki");
        let bundle = format!("{}{}", env.pki.ca_pem, next.ca_pem);
        std::fs::write(env.dir.path().join("ca.crt"), &bundle).expect("bundle");
        let new_ca = holdfast_e2e::base64_encode(bundle.as_bytes());
        wait_configuration(&env, Duration::from_secs(30), |cfg| {
            cfg.is_some_and(|c| c.to_string().contains(&new_ca))
        })
        .await
        .expect("caBundle carries the new CA");
        std::fs::write(env.dir.path().join("tls.key"), &next.key_pem).expect("key");
        std::fs::write(env.dir.path().join("tls.crt"), &next.cert_pem).expect("cert");
        let probe = env.webhook.as_ref().map(|w| w.probe_port).expect("probe");
        let reloaded = Arc::new(AtomicBool::new(false));
        let flag = reloaded.clone();
        let watcher = tokio::spawn(async move {
            loop {
                if let Ok((_, text)) = holdfast_e2e::http_get(probe, "/metrics").await
                    && text
                        .lines()
                        .any(|l| l.starts_with("holdfast_webhook_tls_reloads_total{result=\"ok\"}"))
                {
                    flag.store(true, Ordering::Release);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        wait_until("the webhook reloads the rotated pair", 30, || {
            reloaded.load(Ordering::Acquire)
        })
        .await;
        watcher.abort();
        env.pki = next;
        // The new CA alone from now on (the old one is retired).
        std::fs::write(env.dir.path().join("ca.crt"), &env.pki.ca_pem).expect("bundle");
    }
    steady().await;
    stop.store(true, Ordering::Release);
    if let Ok(mut d) = deadline.lock() {
        *d = Some(Instant::now() + Duration::from_secs(60));
    }
    attacker.await.expect("attacker");
    let leftovers = churn.await.expect("churn");

    let c = |x: &AtomicU64| x.load(Ordering::Relaxed);
    println!(
        "fault test, {rounds} round(s): protected deletes {} attempted, {} refused, {} failed calls, {} succeeded; \
         unprotected {} created, {} deleted, {} retried deletes",
        c(&counts.protected_attempts),
        c(&counts.protected_refused),
        c(&counts.protected_failed_call),
        c(&counts.protected_lost),
        c(&counts.unprotected_created),
        c(&counts.unprotected_deleted),
        c(&counts.unprotected_retries),
    );
    assert_eq!(
        c(&counts.protected_lost),
        0,
        "a protected object was deleted"
    );
    for (ns, name, _) in PROTECTED {
        let out = env.attempt(&["get", "configmap", name, "-n", ns, "-o", "name"]);
        assert_eq!(out.code, 0, "{ns}/{name} is gone: {out:?}");
        assert_eq!(out.stdout.trim(), format!("configmap/{name}"));
    }
    assert!(
        leftovers.is_empty(),
        "unprotected deletions never succeeded: {leftovers:?}"
    );
    assert!(
        c(&counts.protected_refused) > 0 && c(&counts.unprotected_deleted) > 0,
        "the load ran: refused {} deleted {}",
        c(&counts.protected_refused),
        c(&counts.unprotected_deleted)
    );
    let rest = env.attempt(&["get", "configmaps", "-n", "scratch", "-o", "name"]);
    assert_eq!(rest.code, 0, "{rest:?}");
    assert!(
        !rest.stdout.contains("configmap/tmp-"),
        "unprotected ConfigMaps left behind: {}",
        rest.stdout
    );
}
