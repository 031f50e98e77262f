//! Benchmark (not a timed test; ignored by default, run by hack/bench-fleet-webhook.sh):
//! the real holdfast-webhook at fleet size on the sim's kcp model.
//!
//! The fleet is the one of `controller_bench.rs`: HOLDFAST_BENCH_WORKSPACES (10,000)
//! workspaces spread over HOLDFAST_BENCH_SHARDS (4) shards, each binding holdfast.dev,
//! exporting `widgets` and holding HOLDFAST_BENCH_RULES_PER_WORKSPACE (10)
//! DependencyRules, a ResourceProtection, an AnchorRule and a CriticalService (130,000
//! policies at 10,000 workspaces). Beside it, the seed 003 providers: `root:compute`
//! exports VirtualMachines, `root:network` VPCs, and the compute provider's
//! DependencyRule `vm-dependencies` protects a VPC while a VirtualMachine of the same
//! workspace references it (`.spec.vpcRef.name`). Every fleet workspace binds both
//! exports and holds its share of HOLDFAST_BENCH_DEPENDENTS (1,000,000)
//! VirtualMachines (`vm-K` references `vpc-(K mod 10)`).
//!
//! Then the release `holdfast-webhook --topology kcp --dependents watch` starts under
//! the shipped `holdfast-webhook` identity (the RBAC of `manifests/overlays/kcp/workspace`
//! and the content grant of docs/kcp.md, "Let the webhook watch your dependents"),
//! and reads the policies through holdfast.dev's virtual workspaces and the
//! VirtualMachines through every endpoint of the compute export's
//! APIExportEndpointSlice. Measured:
//! 1. the time from its start until `/readyz` answers 200 and until its dependents
//!    index holds every reference (from its log's timestamp of "dependents index
//!    synced", and as first seen by its gauges, which refresh every 5 s);
//! 2. its VmRSS and VmHWM at full size, and this process's (simulator and driver);
//! 3. the latency of HOLDFAST_BENCH_REVIEWS (4,000) DELETE AdmissionReviews posted
//!    straight to its HTTPS route for the network provider's configuration
//!    (`/validate/kcp/<network cluster>/network.test.io`, where kcp sends VPC DELETEs
//!    of the consumers), half of a referenced VPC (refused, naming a VirtualMachine),
//!    half of an unreferenced one (allowed), over many workspaces on every shard.
//!
//! The benchmark fails unless every verdict is the expected one and every answer
//! came from the index: `holdfast_webhook_dependents_lookups_total` counts no `live`,
//! `probe` or `failed` lookup during the reviews and one `index` lookup per review.
//!
//! HOLDFAST_BENCH_WAIT_SECONDS bounds each wait (900); HOLDFAST_BENCH_WEBHOOK_LOG=FILE
//! keeps a copy of the webhook's log. HOLDFAST_BENCH_WEBHOOK_BIN=PATH runs that
//! binary instead of the workspace's build (a before/after with a binary kept
//! aside). HOLDFAST_BENCH_WEBHOOK_HEAPTRACK=/path/prefix
//! attaches `heaptrack -p` to the webhook as soon as it answers `/healthz` (its first
//! milliseconds are not seen) and writes `/path/prefix.zst` (or `.gz`) once the run
//! ends and the webhook is stopped (read with `heaptrack_print`); the webhook runs
//! slower under it, so its timings do not compare. heaptrack sees the system
//! allocator only: build the webhook with the `#[global_allocator]` line of
//! `webhook/src/main.rs` commented out.

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use holdfast_e2e::fleet::{create, each, env_usize, list, local_policies};
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client as HttpClient, rt::TokioExecutor};
use kube::{
    Client,
    api::{Patch, PatchParams},
    core::Request,
};
use rustls_pki_types::{CertificateDer, pem::PemObject};
use serde_json::{Value, json};

/// The compute provider (exports VirtualMachines, holds the rule), on shard `root`.
const COMPUTE: &str = "root:compute";
/// The network provider (exports VPCs), on `shard-1` when there is one.
const NETWORK: &str = "root:network";
const HOLDFAST: &str = "root:holdfast";
/// VPC names the VirtualMachines of a workspace reference.
const VPC_NAMES: usize = 10;

/// [`create`], repeated while the type is not served yet (404: kcp binds
/// asynchronously), at most `wait`.
async fn create_when_served(
    client: &Client,
    collection: &str,
    body: &Value,
    wait: Duration,
) -> anyhow::Result<Value> {
    let deadline = Instant::now() + wait;
    loop {
        match create(client, collection, body).await {
            Err(e)
                if Instant::now() < deadline
                    && e.downcast_ref::<kube::Error>()
                        .is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 404)) =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

fn ws_name(i: usize) -> String {
    format!("p{i:05}")
}

/// Shards are `root`, `shard-1`, ...
fn shard_name(s: usize) -> String {
    match s {
        0 => "root".to_string(),
        s => format!("shard-{s}"),
    }
}

/// DependencyRule `r{j}` of fleet workspace `i` (controller_bench.rs): its things
/// reference the widgets of the next workspace's export.
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

/// The binding to holdfast.dev a workspace makes (docs/kcp.md): every claim
/// accepted with exactly the verbs the export claims.
fn holdfast_binding() -> Value {
    json!({"apiVersion": "apis.kcp.io/v1alpha2", "kind": "APIBinding", "metadata": {"name": "holdfast"},
           "spec": {"reference": {"export": {"path": HOLDFAST, "name": "holdfast.dev"}},
                    "permissionClaims": [
        {"group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations",
         "selector": {"matchAll": true}, "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"], "state": "Accepted"},
        {"group": "", "resource": "events", "selector": {"matchAll": true}, "verbs": ["create", "patch"], "state": "Accepted"},
        {"group": "apis.kcp.io", "resource": "apibindings", "selector": {"matchAll": true}, "verbs": ["list", "watch"], "state": "Accepted"},
    ]}})
}

/// A consumer's binding `name` to APIExport `export` of workspace `path`.
fn binding(name: &str, path: &str, export: &str) -> Value {
    json!({"apiVersion": "apis.kcp.io/v1alpha2", "kind": "APIBinding", "metadata": {"name": name},
           "spec": {"reference": {"export": {"path": path, "name": export}}}})
}

/// VirtualMachine `vm-k` of a fleet workspace, referencing `vpc-(k mod 10)`.
fn vm(k: usize) -> Value {
    json!({"apiVersion": "compute.test.io/v1", "kind": "VirtualMachine",
           "metadata": {"name": format!("vm-{k}"), "namespace": "default"},
           "spec": {"vpcRef": {"name": format!("vpc-{}", k % VPC_NAMES)}}})
}

/// How many VirtualMachines fleet workspace `i` of `n` holds, of `total`.
fn vms_in(i: usize, n: usize, total: usize) -> usize {
    total / n + usize::from(i < total % n)
}

/// `(VmRSS, VmHWM)` of process `pid` ("self" for this one), in KiB.
fn memory_kib(pid: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

type Https = HttpClient<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// An HTTPS client trusting `ca_pem`, with TCP_NODELAY and keep-alive, as kcp's
/// webhook client.
fn https_client(ca_pem: &str) -> anyhow::Result<Https> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(cfg)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    Ok(HttpClient::builder(TokioExecutor::new()).build(connector))
}

/// The DELETE review of VPC `default/name` of logical cluster `lc`, as kcp sends it
/// (the stored object in `oldObject`, with its `kcp.io/cluster` annotation).
fn review(uid: &str, lc: &str, name: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "network.test.io", "version": "v1", "kind": "VPC"},
            "resource": {"group": "network.test.io", "version": "v1", "resource": "vpcs"},
            "requestKind": {"group": "network.test.io", "version": "v1", "kind": "VPC"},
            "requestResource": {"group": "network.test.io", "version": "v1", "resource": "vpcs"},
            "name": name, "namespace": "default", "operation": "DELETE",
            "userInfo": {"username": "consumer", "groups": ["system:authenticated"]},
            "object": null,
            "oldObject": {"apiVersion": "network.test.io/v1", "kind": "VPC",
                          "metadata": {"name": name, "namespace": "default",
                                       "annotations": {"kcp.io/cluster": lc}}},
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}
        }
    }))
    .expect("review")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The webhook's metrics text ("" when unreadable).
async fn metrics(probe: u16) -> String {
    match holdfast_e2e::http_get(probe, "/metrics").await {
        Ok((200, body)) => body,
        _ => String::new(),
    }
}

/// The value of series `series` (exactly as exposed) in `text`; 0 when absent.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn lookups(text: &str, source: &str) -> f64 {
    value(
        text,
        &format!("holdfast_webhook_dependents_lookups_total{{source=\"{source}\"}}"),
    )
}

/// The timestamps of the lines of `log` containing `message`.
fn logged_at(log: &str, message: &str) -> Vec<chrono::DateTime<chrono::Utc>> {
    log.lines()
        .filter(|l| l.contains(message))
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .collect()
}

/// What the webhook logs once the merged index of every endpoint of the dependent
/// type's export has synced.
const SYNCED: &str = "dependents index synced resource=virtualmachines.compute.test.io";

/// The text of file `path` from byte `from` on, and its length.
fn log_from(path: &Path, from: u64) -> (String, u64) {
    use std::io::{Read, Seek};
    let Ok(mut f) = std::fs::File::open(path) else {
        return (String::new(), 0);
    };
    let mut buf = Vec::new();
    if f.seek(std::io::SeekFrom::Start(from)).is_err() || f.read_to_end(&mut buf).is_err() {
        return (String::new(), 0);
    }
    // Up to the last whole line: the rest is read again next time.
    let whole = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    buf.truncate(whole);
    (String::from_utf8_lossy(&buf).into_owned(), whole as u64)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The webhook under test: the harness's build, or the binary
/// HOLDFAST_BENCH_WEBHOOK_BIN names (another build, for a before/after), started
/// with the same arguments; stopped when dropped.
enum Webhook {
    Harness(holdfast_e2e::WebhookProcess),
    Other {
        child: std::process::Child,
        probe_port: u16,
    },
}

impl Webhook {
    async fn spawn_other(
        env: &holdfast_e2e::Env,
        bin: &std::ffi::OsStr,
        port: u16,
        args: &[&str],
        log: &Path,
    ) -> Self {
        let probe_port = holdfast_e2e::free_port().expect("probe port");
        let template = env
            .webhook_command(&format!("127.0.0.1:{port}"), probe_port)
            .expect("webhook command");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("webhook log");
        let child = std::process::Command::new(bin)
            .args(template.get_args())
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("starting HOLDFAST_BENCH_WEBHOOK_BIN");
        let mut w = Webhook::Other { child, probe_port };
        while holdfast_e2e::http_get(probe_port, "/healthz")
            .await
            .map(|(s, _)| s)
            != Ok(200)
        {
            if let Webhook::Other { child, .. } = &mut w {
                assert!(
                    child.try_wait().ok().flatten().is_none(),
                    "HOLDFAST_BENCH_WEBHOOK_BIN exited: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        w
    }

    fn pid(&self) -> u32 {
        match self {
            Webhook::Harness(w) => w.pid(),
            Webhook::Other { child, .. } => child.id(),
        }
    }

    fn probe_port(&self) -> u16 {
        match self {
            Webhook::Harness(w) => w.probe_port,
            Webhook::Other { probe_port, .. } => *probe_port,
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        if let Webhook::Other { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "benchmark: run hack/bench-fleet-webhook.sh"]
async fn bench_webhook_at_fleet_size() {
    let n = env_usize("HOLDFAST_BENCH_WORKSPACES", 10_000).max(1);
    let shard_count = env_usize("HOLDFAST_BENCH_SHARDS", 4).max(1);
    let per = env_usize("HOLDFAST_BENCH_RULES_PER_WORKSPACE", 10);
    let dependents = env_usize("HOLDFAST_BENCH_DEPENDENTS", 1_000_000);
    let reviews = env_usize("HOLDFAST_BENCH_REVIEWS", 4_000).max(2);
    let wait = Duration::from_secs(env_usize("HOLDFAST_BENCH_WAIT_SECONDS", 900) as u64);
    let policies = n * (per + 3) + 1;
    // The webhook's binary first (found, never stale; a rebuild here, not after the
    // setup, and not inside the timed start).
    holdfast_e2e::bin("holdfast-webhook").expect("holdfast-webhook");

    // kcp on the sim, with holdfast's webhook identity (no system:masters).
    let mut cfg = holdfast_sim::SimConfig {
        shards: shard_count,
        ..holdfast_sim::SimConfig::default()
    };
    cfg.users.push(holdfast_sim::User {
        name: "holdfast-webhook".into(),
        token: "holdfast-webhook-token".into(),
        ..Default::default()
    });
    let env = holdfast_e2e::Env::start_with(cfg).await.expect("sim");
    let url = env.sim.url();
    let client = env.sim.client().await.expect("client");
    let t0 = Instant::now();

    // Workspaces: holdfast, the two providers, the fleet.
    let ws_coll = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces";
    let workspace = |name: &str, shard: &str| {
        json!({"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace", "metadata": {"name": name},
               "spec": {"location": {"selector": {"matchLabels": {"name": shard}}}}})
    };
    let network_shard = shard_name(usize::from(shard_count > 1));
    for (name, shard) in [
        ("holdfast", "root"),
        ("compute", "root"),
        ("network", network_shard.as_str()),
    ] {
        create(&client, ws_coll, &workspace(name, shard))
            .await
            .expect("workspace");
    }
    each(n, 32, |i| {
        let client = client.clone();
        let body = workspace(&ws_name(i), &shard_name(i % shard_count));
        async move {
            create(&client, ws_coll, &body).await.expect("workspace");
        }
    })
    .await;
    // kcp makes a workspace Ready asynchronously (kcp-facts 31).
    let deadline = Instant::now() + wait;
    loop {
        let all = list(&client, ws_coll).await.expect("workspaces");
        if all.iter().all(|w| w["status"]["phase"] == "Ready") {
            break;
        }
        assert!(Instant::now() < deadline, "workspaces not Ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests");
    let apply_k = |path: &str, dir: &str| {
        env.run(&[
            "--server",
            &format!("{url}/clusters/{path}"),
            "apply",
            "-k",
            &manifests.join(dir).to_string_lossy(),
        ]);
    };
    // The platform team: holdfast's API and RBAC; the providers let holdfast in
    // (docs/kcp.md, provider guide, step 2).
    apply_k(HOLDFAST, "kcp");
    apply_k(HOLDFAST, "overlays/kcp/workspace/holdfast");
    apply_k(COMPUTE, "overlays/kcp/workspace/provider");
    apply_k(NETWORK, "overlays/kcp/workspace/provider");
    // The providers' types and exports, and their bindings to holdfast.dev.
    for (path, group, plural, kind) in [
        (
            COMPUTE,
            "compute.test.io",
            "virtualmachines",
            "VirtualMachine",
        ),
        (NETWORK, "network.test.io", "vpcs", "VPC"),
    ] {
        let manifest = format!(
            "{}---\n{}",
            holdfast_e2e::kcp::schema(group, plural, kind),
            holdfast_e2e::kcp::export(group, &[&format!("v1.{plural}.{group}")])
        );
        env.kubectl_stdin(
            &[
                "--server",
                &format!("{url}/clusters/{path}"),
                "apply",
                "-f",
                "-",
            ],
            &manifest,
        )
        .expect("kubectl")
        .ok()
        .expect("provider export");
        create(
            &client,
            &format!("/clusters/{path}/apis/apis.kcp.io/v1alpha2/apibindings"),
            &holdfast_binding(),
        )
        .await
        .expect("provider binding");
    }
    // docs/kcp.md, "Let the webhook watch your dependents".
    for args in [
        "create clusterrole holdfast-webhook-content --verb=list,watch --resource=apiexports.apis.kcp.io/content --resource-name=compute.test.io",
        "create clusterrolebinding holdfast-webhook-content --clusterrole=holdfast-webhook-content --user=holdfast-webhook",
    ] {
        let server = format!("{url}/clusters/{COMPUTE}");
        let mut all = vec!["--server", server.as_str()];
        all.extend(args.split_whitespace());
        env.run(&all);
    }

    // The fleet: every workspace binds holdfast.dev and both providers' exports,
    // exports `widgets` and holds `per` rules and one policy of each other kind.
    each(n, 32, |i| {
        let client = client.clone();
        async move {
            let base = format!("/clusters/root:{}", ws_name(i));
            let bindings = format!("{base}/apis/apis.kcp.io/v1alpha2/apibindings");
            for b in [
                holdfast_binding(),
                binding("compute", COMPUTE, "compute.test.io"),
                binding("network", NETWORK, "network.test.io"),
            ] {
                create(&client, &bindings, &b).await.expect("binding");
            }
            let resources: Vec<Value> = (0..per)
                .map(|j| format!("widgets{j}"))
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
                create_when_served(
                    &client,
                    &format!("{base}/apis/holdfast.dev/v1alpha1/dependencyrules"),
                    &rule(i, j, n, &format!("widgets{j}")),
                    wait,
                )
                .await
                .expect("rule");
            }
            for (collection, policy) in local_policies() {
                let at = format!("{base}/apis/holdfast.dev/v1alpha1/{collection}");
                create_when_served(&client, &at, &policy, wait)
                    .await
                    .expect("policy");
            }
        }
    })
    .await;

    // The compute provider's rule, with the status its controller writes: the
    // export resolved, no other export of the network workspace exporting VPCs.
    let network_lc = env.sim.logical_cluster(NETWORK).expect("network cluster");
    let rules = format!("/clusters/{COMPUTE}/apis/holdfast.dev/v1alpha1/dependencyrules");
    let vm_rule = holdfast_e2e::kcp::dependency_rule(
        "vm-dependencies",
        ("compute.test.io", "VirtualMachine", "virtualmachines"),
        &[(
            NETWORK,
            "network.test.io",
            "network.test.io",
            "vpcs",
            ".spec.vpcRef.name",
        )],
    );
    let vm_rule: Value = serde_saphyr::from_str(&vm_rule).expect("rule YAML");
    create_when_served(&client, &rules, &vm_rule, wait)
        .await
        .expect("vm rule");
    let status = json!({"status": {"workspaces": [{
        "path": NETWORK, "name": "network.test.io", "logicalCluster": network_lc,
        "sharedResources": [], "webhookInstalled": true}]}});
    let req = Request::new(&rules)
        .patch_subresource(
            "status",
            "vm-dependencies",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .expect("request");
    client.request::<Value>(req).await.expect("vm rule status");
    let fleet_setup = t0.elapsed();
    eprintln!(
        "fleet: {n} workspaces on {shard_count} shards, {} DependencyRules and {} other policies (+1 provider rule) in {fleet_setup:?}",
        n * per,
        3 * n
    );

    // The dependents, over HTTP through the front-proxy (the webhook is not running:
    // it receives them through its own list and watch).
    let t1 = Instant::now();
    let mut first = Vec::with_capacity(n);
    let mut k0 = 0;
    for i in 0..n {
        first.push(k0);
        k0 += vms_in(i, n, dependents);
    }
    let first = Arc::new(first);
    each(dependents, 64, |k| {
        let client = client.clone();
        let first = first.clone();
        async move {
            let i = first.partition_point(|&s| s <= k) - 1;
            let coll = format!(
                "/clusters/root:{}/apis/compute.test.io/v1/namespaces/default/virtualmachines",
                ws_name(i)
            );
            create_when_served(&client, &coll, &vm(k - first[i]), wait)
                .await
                .expect("virtual machine");
        }
    })
    .await;
    let dependents_setup = t1.elapsed();
    eprintln!("dependents: {dependents} VirtualMachines in {dependents_setup:?}");
    let setup = t0.elapsed();
    let (sim_rss_before, _) = memory_kib("self");

    // The webhook, as `holdfast-webhook` in the holdfast workspace.
    let kubeconfig = env.dir.path().join("holdfast-webhook.kubeconfig");
    std::fs::write(
        &kubeconfig,
        env.sim
            .kubeconfig_for_server(&format!("{url}/clusters/{HOLDFAST}"), "holdfast-webhook"),
    )
    .expect("kubeconfig");
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    let log_path = env.dir.path().join("webhook-fleet.log");
    let port = holdfast_e2e::free_port().expect("port");
    let args = [
        "--topology",
        "kcp",
        "--kubeconfig",
        &kubeconfig,
        "--dependents",
        "watch",
    ];
    let wall_start = chrono::Utc::now();
    let start = Instant::now();
    let webhook = match std::env::var_os("HOLDFAST_BENCH_WEBHOOK_BIN") {
        None => Webhook::Harness(
            env.spawn_webhook(port, &args, &log_path)
                .await
                .expect("webhook"),
        ),
        Some(bin) => Webhook::spawn_other(&env, &bin, port, &args, &log_path).await,
    };
    let pid = webhook.pid().to_string();
    let heaptrack = std::env::var_os("HOLDFAST_BENCH_WEBHOOK_HEAPTRACK").map(|out| {
        // `-o` before `-p`: heaptrack reads nothing after the pid.
        std::process::Command::new("heaptrack")
            .arg("-o")
            .arg(out)
            .arg("-p")
            .arg(&pid)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("heaptrack")
    });
    let probe = webhook.probe_port();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    eprintln!("webhook pid {pid}, log {}", log_path.display());
    let mut ready_at = None;
    let mut peak_during_sync = 0;
    // readyz every 50 ms; the log (read as it grows) for the index's sync; the
    // metrics, whose gauges refresh every 5 s, once a second.
    let mut read = 0u64;
    let mut synced_seen = None;
    let mut last_metrics = None::<Instant>;
    let (text, full_seen) = loop {
        if ready_at.is_none()
            && holdfast_e2e::http_get(probe, "/readyz")
                .await
                .map(|(s, _)| s)
                == Ok(200)
        {
            ready_at = Some(start.elapsed());
            eprintln!("webhook ready (readyz) after {:?}", start.elapsed());
        }
        peak_during_sync = peak_during_sync.max(memory_kib(&pid).0);
        if synced_seen.is_none() {
            let (grown, more) = log_from(&log_path, read);
            read += more;
            if grown.contains(SYNCED) {
                synced_seen = Some(start.elapsed());
                eprintln!("webhook index synced (log) after {:?}", start.elapsed());
            }
        }
        if synced_seen.is_some()
            && ready_at.is_some()
            && last_metrics.is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            last_metrics = Some(Instant::now());
            let text = metrics(probe).await;
            let refs = value(&text, "holdfast_webhook_dependents_index_references");
            if refs as usize >= dependents {
                break (text, start.elapsed());
            }
        }
        assert!(
            start.elapsed() < wait,
            "webhook not ready with a full index after {wait:?} (ready {ready_at:?}, synced {synced_seen:?}):\n{}",
            tail(&log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ready_at = ready_at.expect("ready");
    // When the merged index of every endpoint synced, by the webhook's own clock.
    let synced_at = logged_at(&log(), SYNCED)
        .into_iter()
        .max()
        .and_then(|t| (t - wall_start).to_std().ok());
    let registry: Vec<(String, f64)> = [
        "DependencyRule",
        "ResourceProtection",
        "AnchorRule",
        "CriticalService",
    ]
    .iter()
    .map(|k| {
        (
            k.to_string(),
            value(
                &text,
                &format!("holdfast_webhook_registry_policies{{kind=\"{k}\"}}"),
            ),
        )
    })
    .collect();
    let references = value(&text, "holdfast_webhook_dependents_index_references");
    let metrics_bytes = text.len();
    eprintln!(
        "webhook index full: synced (log) after {synced_at:?}, seen in the gauges after {full_seen:?}; registry {registry:?}, references {references}"
    );
    let (rss_full, hwm_full) = memory_kib(&pid);

    // Reviews: DELETEs of VPCs, alternately referenced and not, over the fleet.
    let lcs: Vec<String> = (0..n)
        .map(|i| {
            env.sim
                .logical_cluster(&format!("root:{}", ws_name(i)))
                .expect("fleet cluster")
        })
        .collect();
    let https = https_client(&env.pki.ca_pem).expect("https client");
    let route =
        format!("https://localhost:{port}/validate/kcp/{network_lc}/network.test.io?timeout=10s");
    let post = |body: Vec<u8>| {
        let https = https.clone();
        let route = route.clone();
        async move {
            let req = http::Request::builder()
                .method("POST")
                .uri(route)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .expect("request");
            let t = Instant::now();
            let resp = https.request(req).await.expect("review answered");
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .expect("review body")
                .to_bytes();
            let elapsed = t.elapsed();
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
            let v: Value = serde_json::from_slice(&bytes).expect("review JSON");
            (elapsed, v)
        }
    };
    // Warm-up: a connection and the TLS session.
    for w in 0..20 {
        post(review(&format!("warm-{w}"), &lcs[0], "warm-up")).await;
    }
    let before = metrics(probe).await;
    let mut times = Vec::with_capacity(reviews);
    let (mut refused, mut allowed) = (0usize, 0usize);
    let mut shards_seen = std::collections::BTreeSet::new();
    let mut workspaces_seen = std::collections::BTreeSet::new();
    for r in 0..reviews {
        // A stride prime to the fleet's size visits many workspaces on every shard.
        let i = (r / 2 * 7919 + r % 2 * 3) % n;
        let held = vms_in(i, n, dependents);
        let protected = r % 2 == 0 && held > 0;
        let vpc = if protected {
            format!("vpc-{}", (r / 2) % VPC_NAMES.min(held))
        } else {
            format!("free-vpc-{r}")
        };
        let (elapsed, v) = post(review(&format!("bench-{r}"), &lcs[i], &vpc)).await;
        times.push(elapsed);
        shards_seen.insert(i % shard_count);
        workspaces_seen.insert(i);
        let answer = &v["response"];
        if protected {
            let message = answer["status"]["message"].as_str().unwrap_or_default();
            assert!(
                answer["allowed"] == false
                    && message.starts_with(&format!(
                        "holdfast: VPC default/{vpc} is still referenced by VirtualMachine default/vm-"
                    ))
                    && message.contains("policy: DependencyRule/"),
                "{} {vpc}: expected a refusal naming a VirtualMachine: {v}",
                ws_name(i)
            );
            refused += 1;
        } else {
            assert!(
                answer["allowed"] == true,
                "{} {vpc}: expected allowed: {v}",
                ws_name(i)
            );
            allowed += 1;
        }
    }
    let after = metrics(probe).await;
    let (rss_after, hwm_after) = memory_kib(&pid);
    let (sim_rss, sim_hwm) = memory_kib("self");
    let delta = |source: &str| lookups(&after, source) - lookups(&before, source);
    let from_index = delta("index");
    let not_from_index = [delta("live"), delta("probe"), delta("failed")];
    times.sort();
    let (p50, p99, max) = (
        percentile(&times, 50.0),
        percentile(&times, 99.0),
        times.last().copied().unwrap_or_default(),
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{}",
        json!({
            "workspaces": n, "shards": shard_count, "rules": n * per + 1, "other_policies": 3 * n,
            "policies": policies, "dependents": dependents,
            "fleet_setup_seconds": fleet_setup.as_secs_f64(),
            "dependents_setup_seconds": dependents_setup.as_secs_f64(),
            "setup_seconds": setup.as_secs_f64(),
            "webhook_ready_seconds": ready_at.as_secs_f64(),
            "webhook_index_synced_seconds": synced_at.map(|d| d.as_secs_f64()),
            "webhook_index_full_seen_seconds": full_seen.as_secs_f64(),
            "webhook_registry": registry.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
            "webhook_index_references": references,
            "webhook_metrics_bytes": metrics_bytes,
            "webhook_vmrss_mib_full": mib(rss_full),
            "webhook_vmhwm_mib_full": mib(hwm_full),
            "webhook_vmrss_mib_peak_seen_during_sync": mib(peak_during_sync),
            "webhook_vmrss_mib_after_reviews": mib(rss_after),
            "webhook_vmhwm_mib_after_reviews": mib(hwm_after),
            "sim_and_driver_vmrss_mib": mib(sim_rss),
            "sim_and_driver_vmhwm_mib": mib(sim_hwm),
            "sim_and_driver_vmrss_mib_before_webhook": mib(sim_rss_before),
            "reviews": reviews, "refused": refused, "allowed": allowed,
            "review_workspaces": workspaces_seen.len(), "review_shards": shards_seen.len(),
            "review_p50_ms": ms(p50), "review_p99_ms": ms(p99), "review_max_ms": ms(max),
            "lookups_index": from_index,
            "lookups_live_probe_failed": not_from_index,
            "loadavg": load.trim(),
        })
    );
    eprintln!(
        "setup {setup:?} (fleet {fleet_setup:?}, dependents {dependents_setup:?}); webhook ready {ready_at:?}, index synced {synced_at:?} (gauges {full_seen:?}); \
         webhook VmRSS {:.1} MiB, VmHWM {:.1} MiB; sim+driver VmRSS {:.1} MiB, VmHWM {:.1} MiB; \
         {reviews} reviews over {} workspaces and {} shards: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; refused {refused}, allowed {allowed}",
        mib(rss_full),
        mib(hwm_full),
        mib(sim_rss),
        mib(sim_hwm),
        workspaces_seen.len(),
        shards_seen.len(),
        ms(p50),
        ms(p99),
        ms(max),
    );
    if let Some(keep) = std::env::var_os("HOLDFAST_BENCH_WEBHOOK_LOG") {
        std::fs::copy(&log_path, &keep).expect("copying the webhook's log");
    }
    if let Some(mut heaptrack) = heaptrack {
        // Stopped, so that what it still holds shows as "leaked"; heaptrack then
        // writes its file.
        drop(webhook);
        let _ = heaptrack.wait();
    }
    assert_eq!(refused + allowed, reviews);
    assert!(
        refused > 0 && allowed > 0,
        "refused {refused}, allowed {allowed}"
    );
    assert_eq!(
        shards_seen.len(),
        shard_count.min(n),
        "reviews on every shard"
    );
    assert_eq!(
        not_from_index,
        [0.0, 0.0, 0.0],
        "live, probe and failed lookups during the reviews: every answer must come from the index\n{}",
        tail(&log(), 40)
    );
    assert!(
        from_index >= reviews as f64,
        "index lookups {from_index} < {reviews} reviews"
    );
    assert!(
        references as usize == dependents,
        "index references {references} != {dependents}"
    );
}
