//! Benchmark (not a timed test; ignored by default, run by hack/bench-controller.sh):
//! the real holdfast-controller on the sim's kcp model of two shards with all four
//! kinds across 1,000 workspaces: 10,000 DependencyRules (10 per workspace, each
//! protecting a resource of the next workspace's export) and, in every workspace, a
//! ResourceProtection, an AnchorRule and a CriticalService on its own types.
//! Measures the time until every workspace has its configuration (its export's
//! webhook and its own policies' webhooks) and every policy is Ready, then the time
//! for one rule change to reach its configuration (p50/p99 over 100 changes).
//!
//! Sizes can be changed with HOLDFAST_BENCH_WORKSPACES (1,000) / HOLDFAST_BENCH_SHARDS (2)
//! / HOLDFAST_BENCH_RULES_PER_WORKSPACE (10) / HOLDFAST_BENCH_CHANGES (100);
//! HOLDFAST_BENCH_WAIT_SECONDS bounds each wait (600);
//! HOLDFAST_BENCH_OTHER_KINDS=0 leaves the three other kinds out.

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;

use holdfast_e2e::{Env, controller::start_controller};
use kube::{
    Client,
    api::{GetParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
    core::Request,
};
use serde_json::{Value, json};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn create(client: &Client, collection: &str, body: &Value) -> anyhow::Result<Value> {
    let req = Request::new(collection).create(&PostParams::default(), serde_json::to_vec(body)?)?;
    Ok(client.request::<Value>(req).await?)
}

async fn list(client: &Client, collection: &str) -> anyhow::Result<Vec<Value>> {
    let req = Request::new(collection).list(&ListParams::default())?;
    let v: Value = client.request(req).await?;
    Ok(v["items"].as_array().cloned().unwrap_or_default())
}

fn is_ready(rule: &Value) -> bool {
    rule["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn rule_key(rule: &Value) -> String {
    format!(
        "{}/{}",
        rule["metadata"]["annotations"]["kcp.io/cluster"]
            .as_str()
            .unwrap_or(""),
        rule["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// How many objects of `collection` are Ready, kept current by a watch: polling with
/// full lists of 10,000 rules would load the simulator the controller writes to.
fn ready_count(client: Client, collection: String) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let out = count.clone();
    tokio::spawn(async move {
        let mut ready: HashMap<String, bool> = HashMap::new();
        loop {
            let Ok(req) = Request::new(&collection).list(&ListParams::default()) else {
                return;
            };
            let Ok(list) = client.request::<Value>(req).await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            ready.clear();
            for r in list["items"].as_array().into_iter().flatten() {
                ready.insert(rule_key(r), is_ready(r));
            }
            count.store(ready.values().filter(|r| **r).count(), Ordering::SeqCst);
            let rv = list["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("0")
                .to_string();
            let Ok(req) = Request::new(&collection).watch(&WatchParams::default(), &rv) else {
                return;
            };
            let events = match client.request_events::<Value>(req).await {
                Ok(events) => events,
                Err(e) => {
                    eprintln!("ready watch: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            futures::pin_mut!(events);
            while let Some(ev) = events.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        eprintln!("ready watch: {e}");
                        break;
                    }
                };
                match ev {
                    WatchEvent::Added(r) | WatchEvent::Modified(r) => {
                        ready.insert(rule_key(&r), is_ready(&r));
                    }
                    WatchEvent::Deleted(r) => {
                        ready.remove(&rule_key(&r));
                    }
                    WatchEvent::Bookmark(_) => {}
                    WatchEvent::Error(e) => {
                        eprintln!("ready watch: {e}");
                        break;
                    }
                }
                count.store(ready.values().filter(|r| **r).count(), Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    out
}

/// Runs `f(i)` for every `i` in `0..n`, at most `limit` at a time.
async fn each<F, Fut>(n: usize, limit: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(limit));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        let fut = f(i);
        set.spawn(async move {
            fut.await;
            drop(permit);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("task");
    }
}

/// The policies of every workspace besides its DependencyRules: a
/// ResourceProtection, an AnchorRule and a CriticalService on its own types, as
/// (collection, object).
fn local_policies() -> [(&'static str, Value); 3] {
    [
        (
            "resourceprotections",
            json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
                   "metadata": {"name": "config"},
                   "spec": {"resources": [{"group": "", "version": "v1", "resource": "configmaps"}]}}),
        ),
        (
            "anchorrules",
            json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "AnchorRule",
                   "metadata": {"name": "secrets"},
                   "spec": {"anchor": {"group": "", "version": "v1", "resource": "configmaps"},
                            "anchorLabels": {"name": "example.io/app"},
                            "protects": [{"group": "", "version": "v1", "resource": "secrets"}]}}),
        ),
        (
            "criticalservices",
            json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService",
                   "metadata": {"name": "registry"},
                   "spec": {"provider": {"group": "", "resource": "serviceaccounts", "namespace": "default", "name": "registry"},
                            "criteria": [{"type": "Finalizer", "finalizer": {"group": "", "resource": "configmaps", "finalizerName": "example.io/in-use"}}]}}),
        ),
    ]
}

/// The rules of the export webhook of a workspace's configuration.
fn export_rules(cfg: &Value) -> Vec<Value> {
    cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["name"] == "widgets.policies.holdfast.dev")
        .and_then(|h| h["rules"].as_array().cloned())
        .unwrap_or_default()
}

/// Whether a workspace's configuration holds its own policies' webhooks.
fn has_own_policies(cfg: &Value) -> bool {
    cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|h| h["name"] == "policies-0.holdfast.dev")
}

fn ws_name(i: usize) -> String {
    format!("p{i:04}")
}

fn rule(i: usize, j: usize, n: usize, resource: &str) -> Value {
    let target = (i + 1) % n;
    json!({
        "apiVersion": "holdfast.dev/v1alpha1",
        "kind": "DependencyRule",
        "metadata": {"name": format!("r{j}")},
        "spec": {
            "dependent": {"group": format!("{}.test", ws_name(i)), "version": "v1", "kind": "Thing", "resource": format!("things{j}")},
            "dependencies": [{
                "apiExportRef": {"path": format!("root:{}", ws_name(target)), "name": "widgets"},
                "group": format!("{}.test", ws_name(target)),
                "version": "v1",
                "resource": resource,
                "fieldRef": {"path": ".spec.ref"},
            }],
        },
    })
}

/// The numbers `field=N` of the controller's log lines containing `message`, sorted.
fn logged(log: &str, message: &str, field: &str) -> Vec<u64> {
    let key = format!("{field}=");
    let mut v: Vec<u64> = log
        .lines()
        .filter(|l| l.contains(message))
        .filter_map(|l| {
            l.split(&key)
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    v.sort_unstable();
    v
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run hack/bench-controller.sh"]
async fn bench_kcp_convergence_and_propagation() {
    let n = env_usize("HOLDFAST_BENCH_WORKSPACES", 1000);
    let shard_count = env_usize("HOLDFAST_BENCH_SHARDS", 2).max(1);
    let per = env_usize("HOLDFAST_BENCH_RULES_PER_WORKSPACE", 10);
    let changes = env_usize("HOLDFAST_BENCH_CHANGES", 100);
    let wait = Duration::from_secs(env_usize("HOLDFAST_BENCH_WAIT_SECONDS", 600) as u64);
    // 0: DependencyRules only (the other three kinds left out, for comparison).
    let others = env_usize("HOLDFAST_BENCH_OTHER_KINDS", 1) != 0;
    let other_policies = if others { 3 * n } else { 0 };
    // kcp on the sim, whatever HOLDFAST_E2E_KUBECONFIG says.
    let env = Env::start_with(holdfast_sim::SimConfig {
        shards: shard_count,
        ..holdfast_sim::SimConfig::default()
    })
    .await
    .expect("sim");
    let url = env.sim.url();
    let client = env.sim.client().await.expect("client");
    let t0 = Instant::now();

    // Workspaces: holdfast + n providers.
    let ws_coll = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces";
    create(&client, ws_coll, &json!({"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace", "metadata": {"name": "holdfast"}}))
        .await
        .expect("holdfast workspace");
    each(n, 32, |i| {
        let client = client.clone();
        async move {
            // Spread over the shards: `root`, `shard-1`, ...
            let shard = match i % shard_count {
                0 => "root".to_string(),
                s => format!("shard-{s}"),
            };
            create(&client, ws_coll, &json!({"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace", "metadata": {"name": ws_name(i)},
                                             "spec": {"location": {"selector": {"matchLabels": {"name": shard}}}}}))
                .await
                .expect("workspace");
        }
    })
    .await;
    // kcp makes a workspace Ready asynchronously (kcp-facts 31).
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let all = list(&client, ws_coll).await.expect("workspaces");
        if all.iter().all(|w| w["status"]["phase"] == "Ready") {
            break;
        }
        assert!(Instant::now() < deadline, "workspaces not Ready");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/kcp");
    env.run(&[
        "--server",
        &format!("{url}/clusters/root:holdfast"),
        "apply",
        "-k",
        &dir.to_string_lossy(),
    ]);
    // kcp makes the endpoint slice `holdfast.dev` itself. The bench reads across
    // workspaces with the wildcard, served by a shard (never the front-proxy), where
    // holdfast's exported types are named with the export's identity.
    let exports = list(
        &client,
        "/clusters/root:holdfast/apis/apis.kcp.io/v1alpha2/apiexports",
    )
    .await
    .expect("exports");
    let identity = exports
        .iter()
        .find(|e| e["metadata"]["name"] == "holdfast.dev")
        .and_then(|e| e["status"]["identityHash"].as_str())
        .expect("holdfast.dev identity")
        .to_string();
    let mut shards = Vec::new();
    for (_, shard_url) in env.sim.shards() {
        let c = env.sim.client_for_server(&shard_url, "admin").await;
        shards.push(c.expect("shard client"));
    }
    // Every workspace binds holdfast accepting its claims (docs/kcp.md), exports
    // `widgets` and holds `per` rules and one policy of each other kind.
    let claims = json!([
        {"group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations",
         "selector": {"matchAll": true}, "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"], "state": "Accepted"},
        {"group": "", "resource": "events", "selector": {"matchAll": true}, "verbs": ["create", "patch"], "state": "Accepted"},
        {"group": "apis.kcp.io", "resource": "apibindings", "selector": {"matchAll": true}, "verbs": ["list", "watch"], "state": "Accepted"},
    ]);
    each(n, 32, |i| {
            let client = client.clone();
            let claims = claims.clone();
            async move {
                let base = format!("/clusters/root:{}", ws_name(i));
                create(
                    &client,
                    &format!("{base}/apis/apis.kcp.io/v1alpha2/apibindings"),
                    &json!({"apiVersion": "apis.kcp.io/v1alpha2", "kind": "APIBinding", "metadata": {"name": "holdfast"},
                            "spec": {"reference": {"export": {"path": "root:holdfast", "name": "holdfast.dev"}},
                                     "permissionClaims": claims}}),
                )
                .await
                .expect("binding");
                // The APIExport the rules of the workspace before it name (a rule is
                // Ready only when its export exists and exports the resource).
                // Also the resources the propagation changes below switch to.
                let changed = (0..changes)
                    .filter(|k| ((k * 37) % n + 1) % n == i)
                    .map(|k| format!("widgets{}v{k}", k % per));
                let resources: Vec<Value> = (0..per)
                    .map(|j| format!("widgets{j}"))
                    .chain(changed)
                    .map(|r| json!({"group": format!("{}.test", ws_name(i)), "name": r,
                                    "schema": format!("v1.{r}.{}.test", ws_name(i)), "storage": {"crd": {}}}))
                    .collect();
                create(
                    &client,
                    &format!("{base}/apis/apis.kcp.io/v1alpha2/apiexports"),
                    &json!({"apiVersion": "apis.kcp.io/v1alpha2", "kind": "APIExport", "metadata": {"name": "widgets"},
                            "spec": {"resources": resources}}),
                )
                .await
                .expect("export");
                for j in 0..per {
                    create(
                        &client,
                        &format!("{base}/apis/holdfast.dev/v1alpha1/dependencyrules"),
                        &rule(i, j, n, &format!("widgets{j}")),
                    )
                    .await
                    .expect("rule");
                }
                for (collection, policy) in local_policies().into_iter().filter(|_| others) {
                    let at = format!("{base}/apis/holdfast.dev/v1alpha1/{collection}");
                    create(&client, &at, &policy).await.expect("policy");
                }
            }
        })
        .await;
    let setup = t0.elapsed();
    let policies = n * per + other_policies;
    eprintln!(
        "setup: {n} workspaces on {shard_count} shards, {} DependencyRules and {} other policies in {setup:?}",
        n * per,
        other_policies
    );

    // The controller, against the holdfast workspace.
    let kubeconfig = env.dir.path().join("holdfast-ws.kubeconfig");
    std::fs::write(
        &kubeconfig,
        env.sim
            .kubeconfig_for_server(&format!("{url}/clusters/root:holdfast"), "admin"),
    )
    .expect("kubeconfig");
    let port = holdfast_e2e::free_port().expect("port");
    // Every kind on every shard.
    let mut ready_counts = Vec::new();
    for shard in &shards {
        for kind in [
            "dependencyrules",
            "resourceprotections",
            "anchorrules",
            "criticalservices",
        ] {
            ready_counts.push(ready_count(
                shard.clone(),
                format!("/clusters/*/apis/holdfast.dev/v1alpha1/{kind}:{identity}"),
            ));
        }
    }
    let ready_now = || {
        ready_counts
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum::<usize>()
    };
    let start = Instant::now();
    let mut c = start_controller(
        &env,
        "controller-bench",
        port,
        &[
            "--kubeconfig",
            &kubeconfig.to_string_lossy(),
            "--topology",
            "kcp",
        ],
    )
    .expect("controller");
    let vwc_all =
        "/clusters/*/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let installed_at = loop {
        let mut complete = 0;
        for shard in &shards {
            let items = list(shard, vwc_all).await.unwrap_or_default();
            complete += items
                .iter()
                .filter(|v| export_rules(v).len() == per && (!others || has_own_policies(v)))
                .count();
        }
        if complete == n {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < wait,
            "no convergence: {complete}/{n}\n{}",
            c.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("every configuration installed after {installed_at:?}");
    let ready_at = loop {
        let ready = ready_now();
        if ready == policies {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < wait,
            "policies not ready: {ready}/{policies}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eprintln!("every policy Ready after {ready_at:?}");
    c.wait_ready(10).await.expect("ready");

    // Single-change propagation; the controller's log from here on holds the
    // passes the changes caused.
    let changes_from = c.log().len();
    let mut samples = Vec::with_capacity(changes);
    // The same, in the order the changes were made.
    let mut order = Vec::with_capacity(changes);
    for k in 0..changes {
        let i = (k * 37) % n;
        let j = k % per;
        let resource = format!("widgets{j}v{k}");
        let target = ws_name((i + 1) % n);
        let patch = json!({"spec": rule(i, j, n, &resource)["spec"].clone()});
        let req = Request::new(format!(
            "/clusters/root:{}/apis/holdfast.dev/v1alpha1/dependencyrules",
            ws_name(i)
        ))
        .patch(
            &format!("r{j}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .expect("request");
        let t = Instant::now();
        client.request::<Value>(req).await.expect("patched");
        loop {
            let req = Request::new(format!("/clusters/root:{target}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"))
                .get("holdfast", &GetParams::default())
                .expect("request");
            let cfg: Value = client.request(req).await.unwrap_or_default();
            let has = export_rules(&cfg)
                .iter()
                .any(|r| r["resources"][0] == resource.as_str());
            if has {
                samples.push(t.elapsed());
                order.push(t.elapsed());
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "change {k} never propagated\n{}",
                c.log()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    samples.sort();
    let log = c.log();
    let passes = logged(&log, "kcp reconcile pass", "elapsed_ms");
    let pass_median = passes.get(passes.len() / 2).copied();
    if let (Some(median), Some(max)) = (pass_median, passes.last()) {
        eprintln!(
            "reconcile passes: {} (median {median} ms, max {max} ms)",
            passes.len()
        );
    }
    // The passes after start-up: those the single changes caused.
    let changes_log = log.get(changes_from..).unwrap_or("");
    let steady = logged(changes_log, "kcp reconcile pass", "elapsed_ms");
    let steady_median = steady.get(steady.len() / 2).copied();
    if let (Some(median), Some(max)) = (steady_median, steady.last()) {
        eprintln!(
            "reconcile passes during the changes: {} (median {median} ms, max {max} ms)",
            steady.len()
        );
    }
    // The controller's phases per pass, medians over the run.
    let mut phases = serde_json::Map::new();
    for phase in ["evaluate_us", "plan_us", "install_us", "statuses_us"] {
        let v = logged(&log, "kcp pass phases", phase);
        if let Some(m) = v.get(v.len() / 2) {
            eprintln!("pass phase {phase}: median {m} µs over {} passes", v.len());
        }
        let v = logged(changes_log, "kcp pass phases", phase);
        if let Some(m) = v.get(v.len() / 2) {
            eprintln!(
                "pass phase {phase} during the changes: median {m} µs over {} passes",
                v.len()
            );
            phases.insert(format!("change_pass_{phase}"), json!(m));
        }
    }
    let (p50, p99, max) = (
        percentile(&samples, 50.0),
        percentile(&samples, 99.0),
        samples.last().copied().unwrap_or_default(),
    );
    // Which change was the slowest (0: the first after start-up).
    let slowest = order
        .iter()
        .enumerate()
        .max_by_key(|(_, d)| **d)
        .map_or(0, |(k, _)| k);
    let cores = std::thread::available_parallelism()
        .map(|p| p.get())
        .unwrap_or(0);
    println!(
        "{}",
        json!({
            "workspaces": n, "shards": shard_count, "rules": n * per, "other_policies": other_policies, "changes": changes,
            "setup_seconds": setup.as_secs_f64(),
            "all_configurations_installed_seconds": installed_at.as_secs_f64(),
            "all_policies_ready_seconds": ready_at.as_secs_f64(),
            "change_p50_ms": p50.as_secs_f64() * 1000.0,
            "change_p99_ms": p99.as_secs_f64() * 1000.0,
            "change_max_ms": max.as_secs_f64() * 1000.0,
            "slowest_change": slowest,
            "pass_median_ms": pass_median,
            "change_pass_median_ms": steady_median,
            "change_pass_max_ms": steady.last(),
            "phases": phases,
            "cores": cores,
        })
    );
    assert_eq!(samples.len(), changes);
}
