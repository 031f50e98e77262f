//! Resident memory of a real `holdfast-webhook --dependents watch` holding
//! HOLDFAST_BENCH_REFERENCES (default 1,000,000) indexed references: that many
//! VirtualMachines, each referencing a VPC, spread over 1,000 namespaces on the sim.
//! Prints the webhook's RSS with an empty index and with the full one.

use holdfast_e2e::{Env, fixtures, http_get};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

async fn metric(probe: u16, name: &str) -> Option<f64> {
    let (_, text) = http_get(probe, "/metrics").await.ok()?;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let total: usize = std::env::var("HOLDFAST_BENCH_REFERENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let namespaces = 1_000usize.min(total.max(1));
    let env = Env::start().await?;
    env.install_crds()?;
    env.apply(&fixtures::vpc_vm_crds())?;
    env.kubectl_until(&["get", "virtualmachines"], 10, |o| o.code == 0)
        .await?;
    env.apply(&holdfast_e2e::fixtures::vm_vpc_rule(".spec.vpcRef.name"))?;

    // The webhook first, with an empty index.
    let log = env.dir.path().join("webhook-rss.log");
    let webhook = env
        .spawn_webhook(holdfast_e2e::free_port()?, &["--dependents", "watch"], &log)
        .await?;
    webhook.wait_ready(60).await?;
    let probe = webhook.probe_port;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let empty = webhook.rss_kib();

    // Namespaces, then the VMs, created concurrently.
    let client = env.sim.client().await?;
    let ns_api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Namespace".into(),
            plural: "namespaces".into(),
        },
    );
    for n in 0..namespaces {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("t-{n:04}")}
        }))?;
        ns_api.create(&PostParams::default(), &obj).await?;
    }
    let started = Instant::now();
    let workers = 8usize;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let vm = holdfast_e2e::fixtures::vm_resource();
            let mut i = w;
            while i < total {
                let ns = format!("t-{:04}", i % namespaces);
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &vm);
                let obj: DynamicObject =
                    serde_json::from_value(holdfast_e2e::fixtures::vm_object(
                        &format!("vm-{i}"),
                        &ns,
                        &format!("vpc-{}", i % 100),
                    ))?;
                api.create(&PostParams::default(), &obj).await?;
                i += workers;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    eprintln!("created {total} VirtualMachines in {:?}", started.elapsed());
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let refs = metric(probe, "holdfast_webhook_dependents_index_references ").await;
        if refs.is_some_and(|r| r as usize >= total) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "index never reached {total} (at {refs:?})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let full = webhook.rss_kib();
    println!("webhook RSS with an empty index: {empty} KiB");
    println!("webhook RSS with {total} references over {namespaces} namespaces: {full} KiB");
    println!(
        "growth per reference: {:.0} bytes",
        (full.saturating_sub(empty) * 1024) as f64 / total as f64
    );
    Ok(())
}
