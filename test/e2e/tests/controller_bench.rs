//! Benchmark (not a timed test; ignored by default, run by hack/bench-controller.sh):
//! the real holdfast-controller on the sim's kcp model of two shards with all four
//! kinds across 1,000 workspaces: 10,000 DependencyRules (10 per workspace, each
//! protecting a resource of the next workspace's export) and, in every workspace, a
//! ResourceProtection, an AnchorRule and a CriticalService on its own types.
//! Measures the time until every workspace has its configuration (its export's
//! webhook and its own policies' webhooks) and every policy is Ready, then the time
//! for one rule change to reach its configuration (p50/p99 over 100 changes), and
//! the controller's peak RSS (VmHWM) at the end.
//!
//! Sizes can be changed with HOLDFAST_BENCH_WORKSPACES (1,000) / HOLDFAST_BENCH_SHARDS (2)
//! / HOLDFAST_BENCH_RULES_PER_WORKSPACE (10) / HOLDFAST_BENCH_CHANGES (100);
//! HOLDFAST_BENCH_WAIT_SECONDS bounds each wait (600);
//! HOLDFAST_BENCH_OTHER_KINDS=0 leaves the three other kinds out.
//! HOLDFAST_BENCH_CONTROLLER_HEAPTRACK=/path/prefix attaches `heaptrack -p` to the
//! controller as soon as it starts (its first milliseconds are not seen) and writes
//! `/path/prefix.zst` (or `.gz`) once the run ends and the controller is killed
//! (read with `heaptrack_print`: peak and still-live allocation sites); the
//! controller runs slower under it, so its timings do not compare.
//!
//! With HOLDFAST_E2E_KCP=real the same fleet runs on a real kcp (`backend::kcp`:
//! two shards, front-proxy, cache server; `hack/substrates.sh kcp`), installed as
//! docs/kcp.md says: holdfast's API and its identities' RBAC in `root:holdfast`,
//! the containment grant in `root`, and in every workspace the binding to
//! holdfast.dev with its claims accepted and the provider grants
//! (`manifests/overlays/kcp/workspace/provider`). kcp's admin sets it up (a
//! workspace a `system:masters` user creates stays Initializing: kcp's initializer
//! finds no user recorded), a `system:masters` user reads across each shard's
//! logical clusters, and the controller runs as the shipped identity
//! `holdfast-controller`. Workspaces alternate between the two shards
//! (HOLDFAST_BENCH_SHARDS is ignored); HOLDFAST_BENCH_WORKSPACES defaults to 300
//! (setting them up takes about 9 minutes on 2 cores). What is counted is watched
//! rather than polled (configurations installed, each change reaching its
//! configuration), so that the benchmark's reads do not take kcp's CPU. Every setup
//! request is repeated while kcp refuses it for a moment (a binding before `bind`
//! reached the other shard, holdfast's types before the binding is Bound).

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
use tokio::task::JoinHandle;

use holdfast_e2e::fleet::{create, each, env_usize, list, local_policies};
use holdfast_e2e::{
    Env, backend::kcp::FRONT_PROXY, backend::kcp::KcpBackend, controller::start_controller,
    kcp_real::Real,
};
use kube::{
    Client,
    api::{GetParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams},
    core::Request,
};
use serde_json::{Value, json};

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
/// The task keeping it stops when its handle is aborted.
fn ready_count(client: Client, collection: String) -> (Arc<AtomicUsize>, JoinHandle<()>) {
    watched_count(client, collection, is_ready)
}

/// How many objects of `collection` (across logical clusters) `counts` accepts,
/// kept current by a watch.
fn watched_count(
    client: Client,
    collection: String,
    counts: impl Fn(&Value) -> bool + Send + 'static,
) -> (Arc<AtomicUsize>, JoinHandle<()>) {
    let count = Arc::new(AtomicUsize::new(0));
    let out = count.clone();
    let task = tokio::spawn(async move {
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
                ready.insert(rule_key(r), counts(r));
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
                        ready.insert(rule_key(&r), counts(&r));
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
    (out, task)
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
    // A whole field (`statuses_us=` is also the end of `rule_statuses_us=`).
    let key = format!(" {field}=");
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

/// A client on the real kcp at `server`, the front-proxy's base URL (requests name
/// `/clusters/PATH/...`) or a shard's (wildcard reads across its logical clusters),
/// with the credentials of `kubeconfig`.
async fn kcp_client(kubeconfig: &Path, server: &str) -> anyhow::Result<Client> {
    let mut config = kube::config::Kubeconfig::read_from(kubeconfig)?;
    for named in &mut config.clusters {
        if let Some(cluster) = &mut named.cluster {
            cluster.server = Some(server.to_string());
        }
    }
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Setup requests repeated because kcp refused them for a moment (real kcp).
static RETRIED: AtomicUsize = AtomicUsize::new(0);

/// Creates `body` in `collection`; with `until`, repeats it while it fails (kcp
/// refuses a binding until `bind` reached the shard, and serves holdfast's types
/// only once the binding is Bound) until then, and takes AlreadyExists as done (a
/// repeat of a create that went through).
async fn put(
    client: &Client,
    collection: &str,
    body: &Value,
    until: Option<Instant>,
) -> anyhow::Result<()> {
    let Some(deadline) = until else {
        return create(client, collection, body).await.map(|_| ());
    };
    loop {
        match create(client, collection, body).await {
            Ok(_) => return Ok(()),
            Err(e) if e.to_string().contains("AlreadyExists") => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(format!("creating in {collection}")));
            }
            Err(_) => {
                RETRIED.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// Waits until the APIBinding `holdfast` at `base` is Bound (real kcp binds
/// asynchronously; holdfast's types are served only then).
async fn bound(client: &Client, base: &str, deadline: Instant) -> anyhow::Result<()> {
    loop {
        let req = Request::new(format!("{base}/apis/apis.kcp.io/v1alpha2/apibindings"))
            .get("holdfast", &GetParams::default())?;
        let phase = match client.request::<Value>(req).await {
            Ok(b) => b["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            Err(e) => e.to_string(),
        };
        if phase == "Bound" {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "binding at {base} not Bound: {phase}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits (at most `within`) until the configuration `holdfast` at `vwcs` (a
/// workspace's collection of ValidatingWebhookConfigurations) has `resource` in its
/// export webhook, watching it from resourceVersion `rv`; when.
async fn watch_until_has(
    client: &Client,
    vwcs: &str,
    rv: String,
    resource: &str,
    within: Duration,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + within;
    let has = |cfg: &Value| {
        export_rules(cfg)
            .iter()
            .any(|r| r["resources"][0] == resource)
    };
    let mut rv = rv;
    loop {
        anyhow::ensure!(Instant::now() < deadline, "{resource} never reached {vwcs}");
        let params = WatchParams::default()
            .fields("metadata.name=holdfast")
            .timeout(within.as_secs().clamp(1, 290) as u32);
        let events = client
            .request_events::<Value>(Request::new(vwcs).watch(&params, &rv)?)
            .await;
        if let Ok(events) = events {
            futures::pin_mut!(events);
            while let Ok(Some(ev)) = tokio::time::timeout_at(deadline.into(), events.next()).await {
                match ev {
                    Ok(WatchEvent::Added(cfg) | WatchEvent::Modified(cfg)) => {
                        if has(&cfg) {
                            return Ok(Instant::now());
                        }
                        if let Some(v) = cfg["metadata"]["resourceVersion"].as_str() {
                            rv = v.to_string();
                        }
                    }
                    Ok(WatchEvent::Bookmark(_) | WatchEvent::Deleted(_)) => {}
                    Ok(WatchEvent::Error(_)) | Err(_) => break,
                }
            }
        }
        // The watch ended (or could not start): read the configuration, and watch
        // again from there.
        let req = Request::new(vwcs).get("holdfast", &GetParams::default())?;
        if let Ok(cfg) = client.request::<Value>(req).await {
            if has(&cfg) {
                return Ok(Instant::now());
            }
            if let Some(v) = cfg["metadata"]["resourceVersion"].as_str() {
                rv = v.to_string();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A field of `/proc/PID/status` in kB (e.g. `VmHWM`, the peak resident set).
fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The objects of a manifest (YAML documents) of `manifests/DIR/rbac.yaml`, with
/// the collection each is created in.
fn rbac_objects(dir: &str) -> Vec<(String, Value)> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../manifests")
        .join(dir)
        .join("rbac.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("RBAC manifest");
    docs.into_iter()
        .filter(|d| d.is_object())
        .map(|d| {
            let plural = match d["kind"].as_str() {
                Some("ClusterRole") => "clusterroles",
                Some("ClusterRoleBinding") => "clusterrolebindings",
                other => panic!("{file:?}: unexpected kind {other:?}"),
            };
            (format!("apis/rbac.authorization.k8s.io/v1/{plural}"), d)
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Where the fleet runs.
enum Host {
    /// The simulator's kcp model.
    Sim(Box<Env>),
    /// A real kcp (the environment's sim stays idle).
    Real(Box<Real>),
}

impl Host {
    fn env(&self) -> &Env {
        match self {
            Host::Sim(env) => env,
            Host::Real(r) => &r.env,
        }
    }

    fn kcp(&self) -> Option<&KcpBackend> {
        match self {
            Host::Sim(_) => None,
            Host::Real(r) => Some(&r.kcp),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run hack/bench-controller.sh"]
async fn bench_kcp_convergence_and_propagation() {
    let real = holdfast_e2e::kcp_sharded::on_real_kcp();
    let n = env_usize("HOLDFAST_BENCH_WORKSPACES", if real { 300 } else { 1000 });
    // The real kcp of the harness has two shards.
    let mut shard_count = env_usize("HOLDFAST_BENCH_SHARDS", 2).max(1);
    let per = env_usize("HOLDFAST_BENCH_RULES_PER_WORKSPACE", 10);
    let changes = env_usize("HOLDFAST_BENCH_CHANGES", 100);
    let wait = Duration::from_secs(env_usize("HOLDFAST_BENCH_WAIT_SECONDS", 600) as u64);
    // 0: DependencyRules only (the other three kinds left out, for comparison).
    let others = env_usize("HOLDFAST_BENCH_OTHER_KINDS", 1) != 0;
    let other_policies = if others { 3 * n } else { 0 };
    // The controller's binary now (built first when a source is newer), not while
    // the fleet waits for it.
    holdfast_e2e::bin("holdfast-controller").expect("holdfast-controller");
    let host = if real {
        Host::Real(Box::new(Real::start("controller_bench").await))
    } else {
        // kcp on the sim, whatever HOLDFAST_E2E_KUBECONFIG says.
        Host::Sim(Box::new(
            Env::start_with(holdfast_sim::SimConfig {
                shards: shard_count,
                ..holdfast_sim::SimConfig::default()
            })
            .await
            .expect("sim"),
        ))
    };
    let env = host.env();
    let client = match host.kcp() {
        None => env.sim.client().await.expect("client"),
        // kcp's admin (the platform team): a workspace a `system:masters` user
        // creates stays Initializing, kcp's initializer binding its APIs "had no
        // user recorded".
        Some(kcp) => kcp_client(&kcp.admin_kubeconfig, FRONT_PROXY)
            .await
            .expect("client"),
    };
    // On the real kcp, how long a setup request may be repeated.
    let retry = || real.then(|| Instant::now() + wait);
    let t0 = Instant::now();

    // Workspaces: holdfast + n providers.
    let ws_coll = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces";
    if let Host::Real(r) = &host {
        // docs/kcp.md, "Platform team: install".
        r.install_holdfast_api().await;
        r.apply_k("platform", "root", "overlays/kcp/workspace/root");
    } else {
        create(&client, ws_coll, &json!({"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace", "metadata": {"name": "holdfast"}}))
            .await
            .expect("holdfast workspace");
    }
    each(n, 32, |i| {
        let client = client.clone();
        let until = retry();
        async move {
            // Spread over the shards: `root`, `shard-1`, ...
            let shard = match i % shard_count {
                0 => "root".to_string(),
                s => format!("shard-{s}"),
            };
            put(&client, ws_coll, &json!({"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace", "metadata": {"name": ws_name(i)},
                                          "spec": {"location": {"selector": {"matchLabels": {"name": shard}}}}}), until)
                .await
                .expect("workspace");
        }
    })
    .await;
    // kcp makes a workspace Ready asynchronously (kcp-facts 31).
    let deadline = Instant::now() + if real { wait } else { Duration::from_secs(300) };
    loop {
        let all = list(&client, ws_coll).await.expect("workspaces");
        if all.iter().all(|w| w["status"]["phase"] == "Ready") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "workspaces not Ready: {:?}",
            all.iter()
                .filter(|w| w["status"]["phase"] != "Ready")
                .map(|w| (&w["metadata"]["name"], &w["status"]))
                .take(3)
                .collect::<Vec<_>>()
        );
        let poll = if real { 500 } else { 100 };
        tokio::time::sleep(std::time::Duration::from_millis(poll)).await;
    }
    let workspaces_ready = t0.elapsed();
    if real {
        eprintln!("{n} workspaces Ready after {workspaces_ready:?}");
    }
    let url = match &host {
        Host::Sim(env) => {
            let url = env.sim.url();
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/kcp");
            env.run(&[
                "--server",
                &format!("{url}/clusters/root:holdfast"),
                "apply",
                "-k",
                &dir.to_string_lossy(),
            ]);
            url
        }
        Host::Real(_) => FRONT_PROXY.to_string(),
    };
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
    match host.kcp() {
        None => {
            for (_, shard_url) in env.sim.shards() {
                let c = env.sim.client_for_server(&shard_url, "admin").await;
                shards.push(c.expect("shard client"));
            }
        }
        Some(kcp) => {
            let all = list(&client, "/clusters/root/apis/core.kcp.io/v1alpha1/shards")
                .await
                .expect("shards");
            for shard in &all {
                let base = shard["spec"]["baseURL"].as_str().expect("shard baseURL");
                // A `system:masters` user reads across a shard's logical clusters.
                let platform = kcp.kubeconfig_for("platform", "root").expect("kubeconfig");
                let shard_client = kcp_client(&platform, base).await;
                shards.push(shard_client.expect("shard client"));
            }
            shard_count = shards.len();
        }
    }
    // What every workspace grants holdfast on the real kcp (docs/kcp.md, provider
    // guide, step 2: each is a provider whose export the rules of another name).
    let grants = if real {
        rbac_objects("overlays/kcp/workspace/provider")
    } else {
        Vec::new()
    };
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
            let grants = grants.clone();
            let until = retry();
            async move {
                let base = format!("/clusters/root:{}", ws_name(i));
                put(
                    &client,
                    &format!("{base}/apis/apis.kcp.io/v1alpha2/apibindings"),
                    &json!({"apiVersion": "apis.kcp.io/v1alpha2", "kind": "APIBinding", "metadata": {"name": "holdfast"},
                            "spec": {"reference": {"export": {"path": "root:holdfast", "name": "holdfast.dev"}},
                                     "permissionClaims": claims}}),
                    until,
                )
                .await
                .expect("binding");
                for (collection, object) in &grants {
                    put(&client, &format!("{base}/{collection}"), object, until)
                        .await
                        .expect("grant");
                }
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
                put(
                    &client,
                    &format!("{base}/apis/apis.kcp.io/v1alpha2/apiexports"),
                    &json!({"apiVersion": "apis.kcp.io/v1alpha2", "kind": "APIExport", "metadata": {"name": "widgets"},
                            "spec": {"resources": resources}}),
                    until,
                )
                .await
                .expect("export");
                if let Some(deadline) = until {
                    bound(&client, &base, deadline).await.expect("bound");
                }
                for j in 0..per {
                    put(
                        &client,
                        &format!("{base}/apis/holdfast.dev/v1alpha1/dependencyrules"),
                        &rule(i, j, n, &format!("widgets{j}")),
                        until,
                    )
                    .await
                    .expect("rule");
                }
                for (collection, policy) in local_policies().into_iter().filter(|_| others) {
                    let at = format!("{base}/apis/holdfast.dev/v1alpha1/{collection}");
                    put(&client, &at, &policy, until).await.expect("policy");
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
    if real {
        eprintln!(
            "setup on the real kcp: setup requests repeated while kcp refused them: {}",
            RETRIED.load(Ordering::SeqCst)
        );
    }

    // The controller, against the holdfast workspace.
    let kubeconfig = match host.kcp() {
        Some(kcp) => kcp
            .kubeconfig_for("holdfast-controller", "root:holdfast")
            .expect("kubeconfig"),
        None => {
            let kubeconfig = env.dir.path().join("holdfast-ws.kubeconfig");
            std::fs::write(
                &kubeconfig,
                env.sim
                    .kubeconfig_for_server(&format!("{url}/clusters/root:holdfast"), "admin"),
            )
            .expect("kubeconfig");
            kubeconfig
        }
    };
    let port = holdfast_e2e::free_port().expect("port");
    // Every kind on every shard.
    let mut ready_counts = Vec::new();
    let mut watches = Vec::new();
    for shard in &shards {
        for kind in [
            "dependencyrules",
            "resourceprotections",
            "anchorrules",
            "criticalservices",
        ] {
            let (count, task) = ready_count(
                shard.clone(),
                format!("/clusters/*/apis/holdfast.dev/v1alpha1/{kind}:{identity}"),
            );
            ready_counts.push(count);
            watches.push(task);
        }
    }
    let ready_now = || {
        ready_counts
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum::<usize>()
    };
    let vwc_all =
        "/clusters/*/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let complete =
        move |v: &Value| export_rules(v).len() == per && (!others || has_own_policies(v));
    // The complete configurations are watched on every backend: full lists of every
    // configuration, polled, took the backend's CPU (at 10,000 workspaces on the
    // simulator, 10,000 configurations of about 20 KiB every 100 ms per shard).
    let mut installed_counts = Vec::new();
    for shard in &shards {
        let (count, task) = watched_count(shard.clone(), vwc_all.to_string(), complete);
        installed_counts.push(count);
        watches.push(task);
    }
    let start = Instant::now();
    let mut c = start_controller(
        env,
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
    let heaptrack = std::env::var_os("HOLDFAST_BENCH_CONTROLLER_HEAPTRACK").map(|out| {
        // `-o` before `-p`: heaptrack reads nothing after the pid.
        std::process::Command::new("heaptrack")
            .arg("-o")
            .arg(out)
            .arg("-p")
            .arg(c.pid().to_string())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("heaptrack")
    });
    let installed_at = loop {
        let complete_now: usize = installed_counts
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum();
        if complete_now == n {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < wait,
            "no convergence: {complete_now}/{n}\n{}",
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
            "policies not ready: {ready}/{policies}\n{}",
            if real { c.log() } else { String::new() }
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
    // How long one change may take to reach its configuration.
    let change_within = Duration::from_secs(if real { 120 } else { 30 });
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
        let vwcs = format!(
            "/clusters/root:{target}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        );
        if real {
            // The configuration's resourceVersion before the change: the watch
            // starts there, so it sees the change however late it starts.
            let get = Request::new(&vwcs)
                .get("holdfast", &GetParams::default())
                .expect("request");
            let before: Value = client.request(get).await.expect("configuration");
            let rv = before["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let t = Instant::now();
            client.request::<Value>(req).await.expect("patched");
            let at = watch_until_has(&client, &vwcs, rv, &resource, change_within)
                .await
                .unwrap_or_else(|e| panic!("change {k}: {e:#}\n{}", c.log()));
            samples.push(at - t);
            order.push(at - t);
            continue;
        }
        let t = Instant::now();
        client.request::<Value>(req).await.expect("patched");
        loop {
            let req = Request::new(&vwcs)
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
                t.elapsed() < change_within,
                "change {k} never propagated\n{}",
                c.log()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // The controller's peak resident set over the whole run, and now.
    let vm_hwm = proc_status_kib(c.pid(), "VmHWM");
    let vm_rss = proc_status_kib(c.pid(), "VmRSS");
    if let (Some(hwm), Some(rss)) = (vm_hwm, vm_rss) {
        eprintln!(
            "controller peak RSS (VmHWM): {:.1} MiB (VmRSS now {:.1} MiB)",
            hwm as f64 / 1024.0,
            rss as f64 / 1024.0
        );
    }
    samples.sort();
    let log = c.log();
    if let Some(to) = std::env::var_os("HOLDFAST_BENCH_CONTROLLER_LOG") {
        std::fs::write(to, &log).expect("controller log");
    }
    if let Some(mut heaptrack) = heaptrack {
        // Killed, so that what it still holds shows as "leaked"; heaptrack then
        // writes its file.
        c.kill();
        let _ = heaptrack.wait();
    }
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
    for phase in [
        "evaluate_us",
        "plan_us",
        "install_us",
        "install_workspaces_us",
        "install_home_us",
        "statuses_us",
        "probe_us",
        "rule_statuses_us",
        "kind_statuses_us",
    ] {
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
    let mut out = json!({
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
        "controller_vmhwm_kib": vm_hwm,
    });
    if real {
        out["backend"] = json!("kcp");
        out["workspaces_ready_seconds"] = json!(workspaces_ready.as_secs_f64());
        if let Host::Real(r) = &host {
            out["kcp_started_seconds"] = json!(r.kcp.started_in.as_secs_f64());
        }
    }
    println!("{out}");
    for task in watches {
        task.abort();
    }
    assert_eq!(samples.len(), changes);
}
