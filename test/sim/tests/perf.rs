//! Scale check (ignored by default; run hack/bench-sim.sh):
//! 20k objects, selector lists and full lists must stay fast.

use holdfast_sim::{Sim, SimConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "scale check: run hack/bench-sim.sh"]
async fn twenty_thousand_objects() {
    let sim = Sim::start(SimConfig::default()).await.expect("ok");
    let client = sim.client().await.expect("ok");
    let t = Instant::now();
    let mut tasks = vec![];
    for c in 0..20 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let api: Api<ConfigMap> = Api::namespaced(client, "default");
            for i in 0..1000 {
                api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("c{c}-{i}"), "labels": {"c": c.to_string()}}, "data": {"k": "v"}})).expect("ok")).await.expect("ok");
            }
        }));
    }
    for t in tasks {
        t.await.expect("ok");
    }
    println!("20k creates: {:?}", t.elapsed());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let t = Instant::now();
    for _ in 0..20 {
        let l = api
            .list(&ListParams::default().labels("c=3").limit(500))
            .await
            .expect("ok");
        assert_eq!(l.items.len(), 500);
    }
    println!("20 selector lists: {:?}", t.elapsed());
    let t = Instant::now();
    let l = api.list(&ListParams::default()).await.expect("ok");
    println!("full list {}: {:?}", l.items.len(), t.elapsed());
    assert_eq!(l.items.len(), 20001);
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    sim.shutdown().await;
}
