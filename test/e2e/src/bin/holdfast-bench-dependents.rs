//! Dependents benchmark on the sim: namespaces holding 10, 1,000 and 10,000
//! dependents; p50/p99 of the webhook's decision over HTTPS for `--dependents watch`
//! and `--dependents live`, side by side in one run. See docs/performance.md.

use bytes::Bytes;
use holdfast_e2e::Env;
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use kube::api::{Api, DynamicObject, PostParams};
use rustls_pki_types::{CertificateDer, pem::PemObject};
use serde_json::json;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

fn https_client(
    ca_pem: &str,
) -> anyhow::Result<
    Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Full<Bytes>,
    >,
> {
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
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

fn review(ns: &str, name: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "bench", "kind": {"group": "network.test.io", "version": "v1", "kind": "VPC"},
            "resource": {"group": "network.test.io", "version": "v1", "resource": "vpcs"},
            "name": name, "namespace": ns, "operation": "DELETE",
            "userInfo": {"username": "bench"}, "object": null,
            "oldObject": {"apiVersion": "network.test.io/v1", "kind": "VPC", "metadata": {"name": name, "namespace": ns}}
        }
    }))
    .unwrap_or_default()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::var("HOLDFAST_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10, 1_000, 10_000]);
    let samples: usize = std::env::var("HOLDFAST_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let env = Env::start().await?;
    env.install_crds()?;
    env.apply(&holdfast_e2e::fixtures::vpc_vm_crds())?;
    env.kubectl_until(&["get", "vpcs"], 10, |o| o.code == 0)
        .await?;
    env.apply(&holdfast_e2e::fixtures::vm_vpc_rule(".spec.vpcRef.name"))?;
    env.kubectl_until(&["get", "virtualmachines"], 10, |o| o.code == 0)
        .await?;

    let client = env.sim.client().await?;
    let vm = holdfast_e2e::fixtures::vm_resource();
    for &n in &sizes {
        let ns = format!("bench-{n}");
        env.kubectl(&["create", "namespace", &ns])?.ok()?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &vm);
        for i in 0..n {
            let obj: DynamicObject = serde_json::from_value(holdfast_e2e::fixtures::vm_object(
                &format!("vm-{i}"),
                &ns,
                &format!("vpc-{}", i % 10),
            ))?;
            api.create(&PostParams::default(), &obj).await?;
        }
    }
    eprintln!("created {} dependents", sizes.iter().sum::<usize>());

    let mut webhooks = Vec::new();
    for mode in ["watch", "live"] {
        let log = env.dir.path().join(format!("webhook-{mode}.log"));
        let w = env
            .spawn_webhook(holdfast_e2e::free_port()?, &["--dependents", mode], &log)
            .await?;
        w.wait_ready(60).await?;
        webhooks.push((mode, w));
    }
    // Let the watch index sync (it falls back to live until then).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, metrics) = holdfast_e2e::http_get(webhooks[0].1.probe_port, "/metrics")
            .await
            .map_err(anyhow::Error::msg)?;
        if metrics.contains("holdfast_webhook_dependents_index_synced{resource=\"virtualmachines.compute.test.io\"} 1") {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "index never synced");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let http = https_client(&env.pki.ca_pem)?;
    println!("| dependents in namespace | strategy | decision | p50 | p99 |");
    println!("|---:|---|---|---:|---:|");
    for &n in &sizes {
        let ns = format!("bench-{n}");
        for (name, expect_allowed) in [("free-vpc", true), ("vpc-3", false)] {
            for (mode, w) in &webhooks {
                let port = w.port;
                let body = review(&ns, name);
                let mut times = Vec::with_capacity(samples);
                for i in 0..samples + 10 {
                    let req = http::Request::builder()
                        .method("POST")
                        .uri(format!("https://localhost:{port}/validate?timeout=10s"))
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(body.clone())))?;
                    let t = Instant::now();
                    let resp = http.request(req).await?;
                    let bytes = resp.into_body().collect().await?.to_bytes();
                    let elapsed = t.elapsed();
                    let v: serde_json::Value = serde_json::from_slice(&bytes)?;
                    anyhow::ensure!(
                        v["response"]["allowed"] == expect_allowed,
                        "{mode} {ns}/{name}: unexpected verdict {v}"
                    );
                    if i >= 10 {
                        times.push(elapsed);
                    }
                }
                times.sort();
                println!(
                    "| {n} | {mode} | {} | {:.3} ms | {:.3} ms |",
                    if expect_allowed {
                        "allow (unreferenced)"
                    } else {
                        "deny (referenced)"
                    },
                    percentile(&times, 0.5).as_secs_f64() * 1e3,
                    percentile(&times, 0.99).as_secs_f64() * 1e3
                );
            }
        }
    }
    for (mode, w) in &webhooks {
        let rss = w.rss_kib();
        let (_, metrics) = holdfast_e2e::http_get(w.probe_port, "/metrics")
            .await
            .map_err(anyhow::Error::msg)?;
        let refs = metrics
            .lines()
            .find(|l| l.starts_with("holdfast_webhook_dependents_index_references "))
            .unwrap_or("")
            .to_string();
        println!("webhook ({mode}) RSS {rss} KiB; {refs}");
    }
    Ok(())
}
