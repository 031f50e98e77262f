//! Attacks on the admission port of a real `holdfast-webhook`, each against a fresh
//! process on 127.0.0.1, while a legitimate client sends one small review every
//! 100 ms on its own connection. For each attack it prints the webhook's peak
//! resident memory (VmHWM), how many legitimate reviews were answered correctly and
//! their slowest answer, and what the server's counters say.
//!
//! Attacks (bounded in count and time):
//! - `h2-streams`: one HTTP/2 connection, 256 concurrent 3 MB bodies, 4 rounds;
//! - `h1-bodies`: 250 HTTP/1.1 connections, one 3 MB body each, 2 rounds;
//! - `idle`: 1,000 TLS connections that send nothing, held 12 s;
//! - `events`: 2,000 forged denials of distinct objects (Event writes);
//! - `kcp-clusters`: 20,000 forged reviews naming distinct logical clusters (kcp);
//! - `busy-clients` (load, not an attack): 1,000 HTTP/1.1 connections each sending 20
//!   reviews, with `--max-connections 2048`; `busy-clients-h2`: the same on 1,000
//!   HTTP/2 connections.
//!
//! `HOLDFAST_BENCH_ATTACKS=idle,events` runs a subset.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use serde_json::{Value, json};
use std::{
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

type HttpsClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

struct Webhook {
    child: Child,
    port: u16,
    probe: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Webhook {
    fn peak_kib(&self) -> u64 {
        status_kib(self.child.id(), "VmHWM:")
    }
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

async fn start(pki: &holdfast_e2e::Pki, extra: &[&str]) -> anyhow::Result<Webhook> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("tls.crt"), &pki.cert_pem)?;
    std::fs::write(dir.path().join("tls.key"), &pki.key_pem)?;
    let kubeconfig = dir.path().join("kubeconfig");
    holdfast_e2e::steps::write_unreachable_kubeconfig(&kubeconfig)?;
    let (port, probe) = (holdfast_e2e::free_port()?, holdfast_e2e::free_port()?);
    let child = Command::new(holdfast_e2e::bin("holdfast-webhook")?)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--probe-listen", &format!("127.0.0.1:{probe}")])
        .arg("--tls-cert")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key")
        .arg(dir.path().join("tls.key"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let wh = Webhook {
        child,
        port,
        probe,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while holdfast_e2e::http_get(probe, "/healthz").await.map(|r| r.0) != Ok(200) {
        anyhow::ensure!(Instant::now() < deadline, "webhook did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(wh)
}

fn tls_config(ca_pem: &str, alpn: &[&[u8]]) -> anyhow::Result<rustls::ClientConfig> {
    holdfast_e2e::tls_client_config(ca_pem, alpn)
}

fn client(ca_pem: &str, h2: bool) -> anyhow::Result<HttpsClient> {
    let b = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(ca_pem, &[])?)
        .https_only();
    let connector = if h2 {
        b.enable_http2().build()
    } else {
        b.enable_http1().build()
    };
    let mut builder = Client::builder(TokioExecutor::new());
    builder.http2_only(h2).pool_max_idle_per_host(1);
    Ok(builder.build(connector))
}

fn review(uid: &str, name: &str, cluster: Option<&str>) -> Vec<u8> {
    let mut meta = json!({"name": name, "labels": {"holdfast.dev/protected": "true"}});
    if let Some(c) = cluster {
        meta["annotations"] = json!({"kcp.io/cluster": c});
    }
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": name, "operation": "DELETE",
            "userInfo": {"username": "mallory"},
            "object": null,
            "oldObject": {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
        }
    }))
    .unwrap_or_default()
}

async fn post(c: &HttpsClient, port: u16, body: Vec<u8>) -> Result<(u16, Bytes), String> {
    let req = http::Request::post(format!("https://localhost:{port}/validate"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = c.request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// Legitimate reviews every 100 ms until `stop`: (answered correctly, sent, slowest).
async fn legitimate(
    ca_pem: String,
    port: u16,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(u64, u64, Duration)> {
    let c = client(&ca_pem, true)?;
    let (mut ok, mut sent, mut slowest) = (0u64, 0u64, Duration::ZERO);
    while !stop.load(Ordering::Acquire) {
        sent += 1;
        let uid = format!("legit-{sent}");
        let started = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            post(&c, port, review(&uid, "prod", None)),
        )
        .await;
        slowest = slowest.max(started.elapsed());
        if let Ok(Ok((200, body))) = answer
            && let Ok(v) = serde_json::from_slice::<Value>(&body)
            && v["response"]["uid"] == uid.as_str()
            && v["response"]["allowed"] == false
        {
            ok += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((ok, sent, slowest))
}

async fn metric_sum(probe: u16, prefix: &str) -> f64 {
    let Ok((_, text)) = holdfast_e2e::http_get(probe, "/metrics").await else {
        return 0.0;
    };
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .fold(0.0, |a, b| a + b)
}

/// `n` POSTs sent at once, each with the client and body `next` gives; counts
/// in `done` those answered, and waits (at most 30 s each) for all of them.
async fn at_once(
    port: u16,
    n: usize,
    done: &Arc<AtomicU64>,
    mut next: impl FnMut() -> anyhow::Result<(HttpsClient, Vec<u8>)>,
) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let ((c, body), done) = (next()?, done.clone());
        tasks.push(tokio::spawn(async move {
            if post(&c, port, body).await.is_ok() {
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    Ok(())
}

async fn attack(name: &str, pki: &holdfast_e2e::Pki, wh: &Webhook) -> anyhow::Result<String> {
    let port = wh.port;
    let big = || vec![b' '; 3_000_000];
    let done = Arc::new(AtomicU64::new(0));
    match name {
        "h2-streams" => {
            let c = client(&pki.ca_pem, true)?;
            for _ in 0..4 {
                at_once(port, 256, &done, || Ok((c.clone(), big()))).await?;
            }
        }
        "h1-bodies" => {
            for _ in 0..2 {
                at_once(port, 250, &done, || {
                    Ok((client(&pki.ca_pem, false)?, big()))
                })
                .await?;
            }
        }
        "idle" => {
            let connector =
                tokio_rustls::TlsConnector::from(Arc::new(tls_config(&pki.ca_pem, &[b"h2"])?));
            let mut held = Vec::new();
            for _ in 0..1000 {
                let Ok(tcp) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    continue;
                };
                let server = rustls_pki_types::ServerName::try_from("localhost")?;
                if let Ok(Ok(s)) =
                    tokio::time::timeout(Duration::from_secs(2), connector.connect(server, tcp))
                        .await
                {
                    done.fetch_add(1, Ordering::Relaxed);
                    held.push(s);
                }
            }
            tokio::time::sleep(Duration::from_secs(12)).await;
            drop(held);
        }
        "events" | "kcp-clusters" => {
            let total = if name == "events" { 2_000 } else { 20_000 };
            let c = client(&pki.ca_pem, true)?;
            let mut tasks = Vec::new();
            for worker in 0..16 {
                let (c, done) = (c.clone(), done.clone());
                let kcp = name == "kcp-clusters";
                tasks.push(tokio::spawn(async move {
                    for i in (worker..total).step_by(16) {
                        let uid = format!("forged-{i}");
                        let cluster = format!("forged{i}");
                        let obj = format!("victim-{i}");
                        let body = review(&uid, &obj, kcp.then_some(cluster.as_str()));
                        if matches!(post(&c, port, body).await, Ok((200, _))) {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            for t in tasks {
                let _ = tokio::time::timeout(Duration::from_secs(120), t).await;
            }
        }
        "busy-clients" | "busy-clients-h2" => {
            let mut tasks = Vec::new();
            for c in 0..1000 {
                let h2 = name == "busy-clients-h2";
                let (client, done) = (client(&pki.ca_pem, h2)?, done.clone());
                tasks.push(tokio::spawn(async move {
                    for i in 0..20 {
                        let uid = format!("busy-{c}-{i}");
                        let body = review(&uid, &format!("ns-{c}"), None);
                        if matches!(post(&client, port, body).await, Ok((200, _))) {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            for t in tasks {
                let _ = tokio::time::timeout(Duration::from_secs(120), t).await;
            }
        }
        other => anyhow::bail!("unknown attack {other}"),
    }
    Ok(format!(
        "{} attack requests completed",
        done.load(Ordering::Relaxed)
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let pki = holdfast_e2e::pki("holdfast-bench-attack")?;
    let chosen = std::env::var("HOLDFAST_BENCH_ATTACKS").unwrap_or_else(|_| {
        "h2-streams,h1-bodies,idle,events,kcp-clusters,busy-clients,busy-clients-h2".to_string()
    });
    println!(
        "| attack | webhook peak RSS (MiB) | legitimate reviews answered | slowest legitimate | attack outcome | server counters |"
    );
    println!("|---|---|---|---|---|---|");
    for name in chosen.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let extra: &[&str] = match name {
            "kcp-clusters" => &["--topology", "kcp"],
            "events" => &[],
            "busy-clients" | "busy-clients-h2" => &["--label-only", "--max-connections", "2048"],
            _ => &["--label-only"],
        };
        let wh = start(&pki, extra).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let legit = tokio::spawn(legitimate(pki.ca_pem.clone(), wh.port, stop.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let outcome = attack(name, &pki, &wh).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Release);
        let (ok, sent, slowest) = legit.await??;
        let counters = format!(
            "busy {} / closed {} / events queued {} limited {} / cluster clients {}",
            metric_sum(
                wh.probe,
                "holdfast_webhook_http_rejected_total{reason=\"busy\"}"
            )
            .await,
            metric_sum(wh.probe, "holdfast_webhook_connections_closed_total").await,
            metric_sum(
                wh.probe,
                "holdfast_webhook_events_total{outcome=\"queued\"}"
            )
            .await,
            metric_sum(
                wh.probe,
                "holdfast_webhook_events_total{outcome=\"limited\"}"
            )
            .await,
            metric_sum(wh.probe, "holdfast_webhook_cluster_clients").await,
        );
        println!(
            "| {name} | {:.0} | {ok}/{sent} | {:.0} ms | {outcome} | {counters} |",
            wh.peak_kib() as f64 / 1024.0,
            slowest.as_secs_f64() * 1000.0
        );
    }
    Ok(())
}
