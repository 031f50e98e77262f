//! Admission throughput and latency: `holdfast-webhook` against a bare hyper + rustls
//! server that parses the review and answers `allowed: true` with its uid, side by
//! side in one run, on the same certificate, with the same load generator: HTTP/1.1
//! and HTTP/2, an allowed and a denied DELETE review recorded from kube-apiserver
//! (test/captures/admission), with holdfast's registry empty (`--label-only`) and
//! loaded with 1,000 ResourceProtections and 10,000 DependencyRules (from the sim).
//!
//! `holdfast-bench-admission` runs it all and prints a table;
//! `holdfast-bench-admission bare ADDR CERT KEY` is the bare server (run by the bench).
//! Environment: `HOLDFAST_BENCH_REQUESTS` per row (20,000), `HOLDFAST_BENCH_CONNECTIONS`
//! (16), `HOLDFAST_BENCH_STREAMS` per HTTP/2 connection (4), `HOLDFAST_BENCH_LOADED=0`
//! to skip the loaded registry, `HOLDFAST_BENCH_ROUNDS` (5): every row alternates bare
//! and holdfast rounds (the order flipping each round) and reports medians.
//! `HOLDFAST_BENCH_BASELINE=PATH` runs a second `holdfast-webhook` binary (an older
//! build, say) with the same flags in the same rounds (the order rotating each round)
//! and adds its figures to each row, for an A/B on one harness.
//!
//! `holdfast-bench-admission instructions` counts instructions instead of time, which
//! does not depend on the machine's load: it runs the bare server and
//! `holdfast-webhook --label-only` (empty registry) under `valgrind --tool=callgrind`,
//! sends each `HOLDFAST_BENCH_REQUESTS` (2,000) allowed and then denied reviews per
//! protocol (after a tenth as warm-up), zeroing the counters before each phase and
//! dumping them after it, and prints the server's instructions per review. The dumps
//! (`callgrind.out.<pid>.<n>`, one per phase) stay in `HOLDFAST_BENCH_CALLGRIND_DIR`
//! (default `target/callgrind`) for `callgrind_annotate`. `HOLDFAST_BENCH_WEBHOOK=PATH`
//! measures another `holdfast-webhook` binary (an older build, say).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

fn env_num(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------- the bare server ----------

async fn bare(addr: SocketAddr, cert: &str, key: &str) -> anyhow::Result<()> {
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let builder = Arc::new(hyper_util::server::conn::auto::Builder::new(
        TokioExecutor::new(),
    ));
    loop {
        let (tcp, _) = listener.accept().await?;
        let _ = tcp.set_nodelay(true);
        let (acceptor, builder) = (acceptor.clone(), builder.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let svc = hyper::service::service_fn(
                |req: http::Request<hyper::body::Incoming>| async move {
                    let body = req.into_body().collect().await?.to_bytes();
                    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let answer = json!({
                        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], "allowed": true}
                    });
                    let mut resp = http::Response::new(Full::new(Bytes::from(
                        serde_json::to_vec(&answer).unwrap_or_default(),
                    )));
                    resp.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, hyper::Error>(resp)
                },
            );
            let _ = builder.serve_connection(TokioIo::new(tls), svc).await;
        });
    }
}

// ---------- the load generator ----------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    H1,
    H2,
}

struct Row {
    rps: f64,
    p50: Duration,
    p99: Duration,
    errors: u64,
}

impl Row {
    /// Each figure's median over `rounds`; errors summed.
    fn median(rounds: &[Row]) -> Row {
        let secs = |f: fn(&Row) -> Duration| {
            Duration::from_secs_f64(median(rounds.iter().map(|r| f(r).as_secs_f64()).collect()))
        };
        Row {
            rps: median(rounds.iter().map(|r| r.rps).collect()),
            p50: secs(|r| r.p50),
            p99: secs(|r| r.p99),
            errors: rounds.iter().map(|r| r.errors).sum(),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

async fn connect(
    ca_pem: &str,
    port: u16,
    alpn: &[u8],
) -> anyhow::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(holdfast_e2e::tls_client_config(
        ca_pem,
        &[alpn],
    )?));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    Ok(connector
        .connect(rustls_pki_types::ServerName::try_from("localhost")?, tcp)
        .await?)
}

fn request(port: u16, body: &Bytes) -> anyhow::Result<http::Request<Full<Bytes>>> {
    Ok(
        http::Request::post(format!("https://localhost:{port}/validate?timeout=10s"))
            .header("content-type", "application/json")
            .header("host", format!("localhost:{port}"))
            .body(Full::new(body.clone()))?,
    )
}

/// One worker: sends requests on `send` until `left` runs out; returns latencies.
async fn worker<F, Fut>(left: Arc<AtomicU64>, errors: Arc<AtomicU64>, mut send: F) -> Vec<u32>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut lat = Vec::new();
    while left
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
    {
        let started = Instant::now();
        if send().await.is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
        }
        lat.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
    }
    lat
}

async fn check(resp: http::Response<hyper::body::Incoming>) -> anyhow::Result<()> {
    anyhow::ensure!(resp.status() == 200, "status {}", resp.status());
    let body = resp.into_body().collect().await?.to_bytes();
    anyhow::ensure!(body.starts_with(b"{"), "not a review");
    Ok(())
}

async fn load(
    ca_pem: &str,
    port: u16,
    proto: Proto,
    body: &Bytes,
    total: u64,
) -> anyhow::Result<Row> {
    let connections = env_num("HOLDFAST_BENCH_CONNECTIONS", 16);
    let streams = env_num("HOLDFAST_BENCH_STREAMS", 4);
    let left = Arc::new(AtomicU64::new(total));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let started = Instant::now();
    for _ in 0..connections {
        match proto {
            Proto::H1 => {
                let tls = connect(ca_pem, port, b"http/1.1").await?;
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tls))
                        .await?;
                tokio::spawn(conn);
                let (left, errors, body) = (left.clone(), errors.clone(), body.clone());
                tasks.push(tokio::spawn(async move {
                    worker(left, errors, move || {
                        let req = request(port, &body);
                        let fut = req.map(|r| sender.send_request(r));
                        async move { check(fut?.await?).await }
                    })
                    .await
                }));
            }
            Proto::H2 => {
                let tls = connect(ca_pem, port, b"h2").await?;
                let (sender, conn) = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
                    TokioExecutor::new(),
                    TokioIo::new(tls),
                )
                .await?;
                tokio::spawn(conn);
                for _ in 0..streams {
                    let (left, errors, body, sender) =
                        (left.clone(), errors.clone(), body.clone(), sender.clone());
                    tasks.push(tokio::spawn(async move {
                        worker(left, errors, move || {
                            let mut sender = sender.clone();
                            let req = request(port, &body);
                            async move { check(sender.send_request(req?).await?).await }
                        })
                        .await
                    }));
                }
            }
        }
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await?);
    }
    let wall = started.elapsed();
    lat.sort_unstable();
    let pct = |p: f64| {
        let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
        Duration::from_micros(lat.get(i).copied().unwrap_or(0) as u64)
    };
    Ok(Row {
        rps: lat.len() as f64 / wall.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
        errors: errors.load(Ordering::Relaxed),
    })
}

// ---------- instruction counts ----------

/// A server under callgrind: its process and admission port.
struct Counted {
    proc: Proc,
    port: u16,
}

impl Counted {
    /// Starts `program args` under callgrind (instrumented from the start, dumps in
    /// `dir`) and waits for its admission `port`.
    async fn start(dir: &Path, port: u16, program: &Path, args: &[&str]) -> anyhow::Result<Self> {
        let proc = Proc(
            Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg("--collect-systime=nsec")
                .arg(format!(
                    "--callgrind-out-file={}/callgrind.out.%p",
                    dir.display()
                ))
                .arg(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        let deadline = Instant::now() + Duration::from_secs(300);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} under callgrind never opened port {port}",
                program.display()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(Self { proc, port })
    }

    /// Runs `callgrind_control ARG PID`.
    fn control(&self, arg: &str) -> anyhow::Result<()> {
        let status = Command::new("callgrind_control")
            .arg(arg)
            .arg(self.proc.0.id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "callgrind_control {arg} failed: {status}");
        Ok(())
    }

    /// Instructions executed and system calls made while `n` reviews of `body` were
    /// answered (after a tenth as warm-up), from the dump written after them.
    async fn phase(
        &self,
        dir: &Path,
        ca: &str,
        proto: Proto,
        body: &Bytes,
        n: u64,
    ) -> anyhow::Result<(u64, u64)> {
        load(ca, self.port, proto, body, (n / 10).max(1)).await?;
        self.control("-z")?;
        let row = load(ca, self.port, proto, body, n).await?;
        anyhow::ensure!(row.errors == 0, "{} reviews failed", row.errors);
        let before = dumps(dir, self.proc.0.id())?;
        self.control("-d")?;
        let after = dumps(dir, self.proc.0.id())?;
        let Some(dump) = after.iter().find(|d| !before.contains(d)) else {
            anyhow::bail!("callgrind wrote no dump");
        };
        let text = std::fs::read_to_string(dump)?;
        let line = |prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .map(|v| v.split_whitespace().collect::<Vec<_>>())
        };
        let (Some(events), Some(totals)) = (line("events: "), line("summary: ")) else {
            anyhow::bail!("no events or summary in {}", dump.display());
        };
        let total = |event: &str| -> u64 {
            events
                .iter()
                .position(|e| *e == event)
                .and_then(|i| totals.get(i)?.parse().ok())
                .unwrap_or(0)
        };
        Ok((total("Ir"), total("sysCount")))
    }
}

/// The callgrind dumps of process `pid` in `dir`.
fn dumps(dir: &Path, pid: u32) -> anyhow::Result<Vec<PathBuf>> {
    let prefix = format!("callgrind.out.{pid}.");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&prefix))
        {
            found.push(path);
        }
    }
    Ok(found)
}

/// Instructions per review, bare server against holdfast, allowed and denied, both
/// protocols (see the module documentation).
async fn instructions() -> anyhow::Result<()> {
    let n = env_num("HOLDFAST_BENCH_REQUESTS", 2_000);
    let dir = std::env::var_os("HOLDFAST_BENCH_CALLGRIND_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| holdfast_e2e::workspace_root().join("target/callgrind"));
    std::fs::create_dir_all(&dir)?;
    let webhook = match std::env::var_os("HOLDFAST_BENCH_WEBHOOK") {
        Some(path) => PathBuf::from(path),
        None => holdfast_e2e::bin("holdfast-webhook")?,
    };
    let allowed = capture("011-delete-configmaps-plain.json")?;
    let denied = capture("014-delete-configmaps-protected.json")?;
    let env = holdfast_e2e::Env::start().await?;
    let tls = env.dir.path();
    let (cert, key) = (tls.join("tls.crt"), tls.join("tls.key"));
    let (cert, key) = (cert.to_string_lossy(), key.to_string_lossy());
    let bare_port = holdfast_e2e::free_port()?;
    let bare_addr = format!("127.0.0.1:{bare_port}");
    let hf_port = holdfast_e2e::free_port()?;
    let (hf_addr, probe) = (
        format!("127.0.0.1:{hf_port}"),
        format!("127.0.0.1:{}", holdfast_e2e::free_port()?),
    );
    let kubeconfig = env.kubeconfig.to_string_lossy();
    let hf_args = [
        "--listen",
        &hf_addr,
        "--probe-listen",
        &probe,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--kubeconfig",
        &kubeconfig,
        "--label-only",
        "--protection-label",
        "capture/deny=true",
        "--max-streams",
        "256",
    ];
    let servers = [
        (
            "bare",
            Counted::start(
                &dir,
                bare_port,
                &std::env::current_exe()?,
                &["bare", &bare_addr, &cert, &key],
            )
            .await?,
        ),
        (
            "holdfast",
            Counted::start(&dir, hf_port, &webhook, &hf_args).await?,
        ),
    ];
    let ca = env.pki.ca_pem.clone();
    println!(
        "{n} reviews per phase, {} connections ({} streams each on HTTP/2); dumps in {}",
        env_num("HOLDFAST_BENCH_CONNECTIONS", 16),
        env_num("HOLDFAST_BENCH_STREAMS", 4),
        dir.display()
    );
    println!(
        "| server | review | protocol | instructions per review | system calls per review | dump of pid |"
    );
    println!("|---|---|---|---:|---:|---:|");
    for (name, server) in &servers {
        for (review, body) in [("allowed", &allowed), ("denied", &denied)] {
            for proto in [Proto::H1, Proto::H2] {
                let (total, calls) = server.phase(&dir, &ca, proto, body, n).await?;
                println!(
                    "| {name} | {review} | {} | {} | {:.1} | {} |",
                    if proto == Proto::H1 {
                        "HTTP/1.1"
                    } else {
                        "HTTP/2"
                    },
                    total / n,
                    calls as f64 / n as f64,
                    server.proc.0.id()
                );
            }
        }
    }
    Ok(())
}

// ---------- processes ----------

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_port(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        anyhow::ensure!(Instant::now() < deadline, "port {port} never opened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn capture(name: &str) -> anyhow::Result<Bytes> {
    let path = format!(
        "{}/../captures/admission/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    Ok(Bytes::from(serde_json::to_vec(&v["review"])?))
}

async fn load_registry(env: &holdfast_e2e::Env) -> anyhow::Result<()> {
    env.install_crds()?;
    env.apply(&holdfast_e2e::fixtures::vpc_vm_crds())?;
    let client = env.sim.client().await?;
    let ar = |kind: &str, plural: &str| ApiResource {
        group: "holdfast.dev".into(),
        version: "v1alpha1".into(),
        api_version: "holdfast.dev/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let rp: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ar("ResourceProtection", "resourceprotections"),
    );
    let dr: Api<DynamicObject> =
        Api::all_with(client.clone(), &ar("DependencyRule", "dependencyrules"));
    let mut tasks = Vec::new();
    for w in 0..8usize {
        let (rp, dr) = (rp.clone(), dr.clone());
        tasks.push(tokio::spawn(async move {
            for i in (w..1_000).step_by(8) {
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
                    "metadata": {"name": format!("rp-{i}")},
                    "spec": {"resources": [{"group": "", "version": "v1", "resource": "configmaps",
                                            "namespace": format!("team-{i}")}]}
                }))?;
                rp.create(&PostParams::default(), &obj).await?;
            }
            for i in (w..10_000).step_by(8) {
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "holdfast.dev/v1alpha1", "kind": "DependencyRule",
                    "metadata": {"name": format!("dr-{i}")},
                    "spec": {"dependent": {"group": "compute.test.io", "version": "v1",
                                           "kind": "VirtualMachine", "resource": "virtualmachines"},
                             "dependencies": [{"group": "network.test.io", "version": "v1",
                                               "resource": "vpcs",
                                               "fieldRef": {"path": format!(".spec.ref{}.name", i % 50)}}]}
                }))?;
                dr.create(&PostParams::default(), &obj).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// CPU time (user + system, clock ticks) process `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

async fn metric(probe: u16, series: &str) -> f64 {
    let Ok((_, text)) = holdfast_e2e::http_get(probe, "/metrics").await else {
        return 0.0;
    };
    text.lines()
        .find_map(|l| {
            let (name, v) = l.rsplit_once(' ')?;
            (name == series).then(|| v.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// Waits until the webhook holds every policy and has gone quiet (under 5 % of a core
/// for 2 s): measuring while it still digests the load would measure the load.
async fn settle(pid: u32, probe: u16, loaded: bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    if loaded {
        loop {
            let rp = metric(
                probe,
                r#"holdfast_webhook_registry_policies{kind="ResourceProtection"}"#,
            )
            .await;
            let dr = metric(
                probe,
                r#"holdfast_webhook_registry_policies{kind="DependencyRule"}"#,
            )
            .await;
            if rp >= 1_000.0 && dr >= 10_000.0 {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "registry stuck at {rp} RP / {dr} DR"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    loop {
        let before = cpu_ticks(pid);
        tokio::time::sleep(Duration::from_secs(2)).await;
        // 100 ticks a second: 5 % of a core for 2 s is 10 ticks.
        if cpu_ticks(pid).saturating_sub(before) <= 10 {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "webhook never went quiet");
    }
}

/// With `HOLDFAST_BENCH_PIN` (on by default on a machine of two or more cores): the
/// load generator (this process, the simulator in it included) runs on CPU 0 and every
/// server measured on CPU 1, so the servers compete with one another's load generator
/// never, and each gets one core alike.
/// Decided once, before this process is pinned (which leaves it one CPU).
fn pinning() -> bool {
    static PINNING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PINNING.get_or_init(|| {
        env_num("HOLDFAST_BENCH_PIN", 1) == 1
            && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
    })
}

/// Moves every thread of process `pid` to `cpu` (`taskset` from util-linux; a
/// warning when it cannot, and the run goes on unpinned).
fn pin(pid: u32, cpu: u32) {
    if !pinning() {
        return;
    }
    let done = Command::new("taskset")
        .args(["-a", "-c", "-p", &cpu.to_string(), &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !done.is_ok_and(|s| s.success()) {
        eprintln!(
            "warning: could not pin process {pid} to CPU {cpu} (taskset); measuring unpinned"
        );
    }
}

/// The baseline binary at `path` with the flags the env's webhook gets (its TLS pair,
/// the sim's kubeconfig, `flags`), once ready: (process, admission port).
async fn start_baseline(
    env: &holdfast_e2e::Env,
    path: &Path,
    flags: &[&str],
    loaded: bool,
) -> anyhow::Result<(Proc, u16)> {
    let (port, probe) = (holdfast_e2e::free_port()?, holdfast_e2e::free_port()?);
    let log = std::fs::File::create(env.dir.path().join("baseline.log"))?;
    let proc = Proc(
        Command::new(path)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--probe-listen")
            .arg(format!("127.0.0.1:{probe}"))
            .arg("--tls-cert")
            .arg(env.dir.path().join("tls.crt"))
            .arg("--tls-key")
            .arg(env.dir.path().join("tls.key"))
            .arg("--kubeconfig")
            .arg(&env.kubeconfig)
            .args(flags)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while holdfast_e2e::http_get(probe, "/readyz")
        .await
        .map(|(s, _)| s)
        != Ok(200)
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "baseline {} not ready within 60 s",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pin(proc.0.id(), 1);
    settle(proc.0.id(), probe, loaded).await?;
    Ok((proc, port))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("bare") {
        let [_, _, addr, cert, key] = args.as_slice() else {
            anyhow::bail!("usage: holdfast-bench-admission bare ADDR CERT KEY");
        };
        return bare(addr.parse()?, cert, key).await;
    }
    if args.get(1).map(String::as_str) == Some("instructions") {
        return instructions().await;
    }
    pinning();
    let total = env_num("HOLDFAST_BENCH_REQUESTS", 20_000);
    let rounds = env_num("HOLDFAST_BENCH_ROUNDS", 5).max(1);
    let baseline = std::env::var_os("HOLDFAST_BENCH_BASELINE").map(PathBuf::from);
    let allowed = capture("011-delete-configmaps-plain.json")?;
    let denied = capture("014-delete-configmaps-protected.json")?;

    let mut env = holdfast_e2e::Env::start().await?;
    let dir = env.dir.path().to_path_buf();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let bare_port = holdfast_e2e::free_port()?;
    let _bare = Proc(
        Command::new(std::env::current_exe()?)
            .arg("bare")
            .arg(format!("127.0.0.1:{bare_port}"))
            .arg(&cert)
            .arg(&key)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    wait_port(bare_port).await?;
    pin(std::process::id(), 0);
    pin(_bare.0.id(), 1);
    let ca = env.pki.ca_pem.clone();

    println!(
        "{total} requests per row in {rounds} alternating rounds (medians), {} connections ({} streams each on HTTP/2); {}",
        env_num("HOLDFAST_BENCH_CONNECTIONS", 16),
        env_num("HOLDFAST_BENCH_STREAMS", 4),
        if pinning() {
            "load generator on CPU 0, servers on CPU 1"
        } else {
            "unpinned"
        }
    );
    let baseline_head = if baseline.is_some() {
        " baseline req/s | baseline ratio | baseline p99 ratio |"
    } else {
        ""
    };
    println!(
        "| registry | review | protocol | bare req/s | holdfast req/s | ratio | bare p99 | holdfast p99 | p99 ratio | holdfast p50 | errors |{baseline_head}"
    );
    println!(
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|{}",
        if baseline.is_some() {
            "---:|---:|---:|"
        } else {
            ""
        }
    );
    let mut registries = vec!["empty"];
    if env_num("HOLDFAST_BENCH_LOADED", 1) == 1 {
        registries.push("1,000 RP + 10,000 DR");
    }
    for registry in registries {
        let flags: Vec<&str> = if registry == "empty" {
            vec!["--label-only", "--protection-label", "capture/deny=true"]
        } else {
            load_registry(&env).await?;
            vec!["--protection-label", "capture/deny=true"]
        };
        let mut wflags = flags.clone();
        wflags.extend(["--max-streams", "256"]);
        env.start_webhook(&wflags).await?;
        env.wait_webhook_ready().await?;
        if let Some(w) = env.webhook.as_ref() {
            pin(w.pid(), 1);
            settle(w.pid(), w.probe_port, registry != "empty").await?;
        }
        let hf_port = env.webhook.as_ref().map(|w| w.port).unwrap_or_default();
        let base = match &baseline {
            Some(path) => Some(start_baseline(&env, path, &wflags, registry != "empty").await?),
            None => None,
        };
        // The servers measured: bare, holdfast, then the baseline when there is one.
        let mut ports = vec![bare_port, hf_port];
        ports.extend(base.as_ref().map(|(_, port)| *port));
        for (review, body) in [("allowed", &allowed), ("denied", &denied)] {
            for proto in [Proto::H1, Proto::H2] {
                // Warm every server up, then measure them in rounds whose order rotates
                // (flips, for two), so drift in the machine's load hits them alike;
                // each figure is the median over the rounds.
                for port in &ports {
                    load(&ca, *port, proto, body, total / 10).await?;
                }
                let mut rounds_of: Vec<Vec<Row>> = ports.iter().map(|_| Vec::new()).collect();
                let per = (total / rounds).max(1);
                for round in 0..rounds {
                    for i in 0..ports.len() {
                        let at = (i + round as usize) % ports.len();
                        rounds_of[at].push(load(&ca, ports[at], proto, body, per).await?);
                    }
                }
                let ratios = |of: &[Row]| {
                    let rps = median(
                        rounds_of[0]
                            .iter()
                            .zip(of)
                            .map(|(b, h)| h.rps / b.rps)
                            .collect(),
                    );
                    let p99 = median(
                        rounds_of[0]
                            .iter()
                            .zip(of)
                            .map(|(b, h)| h.p99.as_secs_f64() / b.p99.as_secs_f64().max(1e-9))
                            .collect(),
                    );
                    (rps, p99)
                };
                let (ratio, p99_ratio) = ratios(&rounds_of[1]);
                let (b, h) = (Row::median(&rounds_of[0]), Row::median(&rounds_of[1]));
                let base_cols = match rounds_of.get(2) {
                    Some(of) => {
                        let (ratio, p99_ratio) = ratios(of);
                        let a = Row::median(of);
                        format!(" {:.0} | {ratio:.2} | {p99_ratio:.2} |", a.rps)
                    }
                    None => String::new(),
                };
                println!(
                    "| {registry} | {review} | {} | {:.0} | {:.0} | {:.2} | {:.2} ms | {:.2} ms | {:.2} | {:.2} ms | {} |{base_cols}",
                    if proto == Proto::H1 {
                        "HTTP/1.1"
                    } else {
                        "HTTP/2"
                    },
                    b.rps,
                    h.rps,
                    ratio,
                    b.p99.as_secs_f64() * 1e3,
                    h.p99.as_secs_f64() * 1e3,
                    p99_ratio,
                    h.p50.as_secs_f64() * 1e3,
                    b.errors
                        + h.errors
                        + rounds_of
                            .get(2)
                            .map_or(0, |of| of.iter().map(|r| r.errors).sum()),
                );
            }
        }
        drop(base);
        drop(env.webhook.take());
    }
    Ok(())
}
