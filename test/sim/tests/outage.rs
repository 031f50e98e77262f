//! `SimHandle::outage`: like an API server restart, the port closes and connections
//! are cut for a while; stored objects survive and it serves again on the same port.

use holdfast_sim::{Sim, SimConfig};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, api::PostParams};
use std::time::Duration;

#[tokio::test]
async fn an_outage_closes_the_port_and_keeps_the_objects() {
    let sim = std::sync::Arc::new(Sim::start(SimConfig::default()).await.expect("sim"));
    let client = sim.client().await.expect("client");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kept"}, "data": {"k": "v"}
    }))
    .expect("cm");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let addr = sim.addr();

    let s = sim.clone();
    let outage = tokio::spawn(async move { s.outage(Duration::from_secs(2)).await });
    // While it lasts, nothing listens on the port.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the port never closed during the outage"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    outage.await.expect("task").expect("outage");
    // Afterwards: the same address serves, the object is still there.
    let got = api.get("kept").await.expect("get after the outage");
    assert_eq!(
        got.data.and_then(|d| d.get("k").cloned()),
        Some("v".to_string())
    );
}
