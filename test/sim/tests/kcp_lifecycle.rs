//! kcp's workspace lifecycle in the simulator: a Workspace becomes Ready
//! asynchronously (docs/kcp-facts.md 31); deleting a Workspace or an APIBinding
//! deletes the contents through admission first (docs/kcp-facts.md 32, 33).

mod common;

use common::*;
use futures::StreamExt;
use holdfast_sim::{Sim, SimConfig, SimHandle};
use kube::api::WatchParams;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams, WatchEvent};
use serde_json::{Value, json};
use std::time::Duration;

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn ws() -> ApiResource {
    ar("tenancy.kcp.io", "v1alpha1", "Workspace", "workspaces")
}

fn obj(ar: &ApiResource, v: Value) -> DynamicObject {
    let mut o: DynamicObject = serde_json::from_value(v).expect("object");
    o.types = Some(kube::core::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    o
}

async fn client_at(sim: &SimHandle, server: &str) -> kube::Client {
    sim.client_for_server(server, "admin")
        .await
        .unwrap_or_else(|e| panic!("client for {server}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_is_scheduled_then_initialized_then_ready() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let url = sim.url();
    let root = client_at(&sim, &format!("{url}/clusters/root")).await;
    let workspaces = Api::<DynamicObject>::all_with(root.clone(), &ws());
    let created = workspaces
        .create(
            &PostParams::default(),
            &obj(&ws(), json!({"metadata": {"name": "team"}})),
        )
        .await
        .expect("create");
    // As created: Scheduling, neither a logical cluster nor a URL yet.
    assert_eq!(created.data["status"]["phase"], "Scheduling");
    assert!(
        created.data["spec"].get("cluster").is_none(),
        "{:?}",
        created.data
    );
    assert!(
        created.data["spec"].get("URL").is_none(),
        "{:?}",
        created.data
    );
    let rv = created
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let wp = WatchParams::default().fields("metadata.name=team");
    let mut events = workspaces.watch(&wp, &rv).await.expect("watch").boxed();
    let mut phases = vec![];
    let deadline = Duration::from_secs(30);
    while phases.last().map(String::as_str) != Some("Ready") {
        let event = tokio::time::timeout(deadline, events.next())
            .await
            .expect("an event within 30 s")
            .expect("the watch runs")
            .expect("an event");
        let WatchEvent::Modified(w) = event else {
            continue;
        };
        let phase = w.data["status"]["phase"].as_str().unwrap_or("").to_string();
        if phase == "Initializing" {
            assert_eq!(
                w.data["status"]["initializers"],
                json!(["root:universal", "system:apibindings"])
            );
            let lc = w.data["spec"]["cluster"].as_str().expect("spec.cluster");
            assert_eq!(w.data["spec"]["URL"], format!("{url}/clusters/root:team"));
            assert_eq!(sim.logical_cluster("root:team").as_deref(), Some(lc));
        }
        if phases.last() != Some(&phase) {
            phases.push(phase);
        }
    }
    assert_eq!(phases, ["Initializing", "Ready"]);
    let team = client_at(&sim, &format!("{url}/clusters/root:team")).await;
    let lc = Api::<DynamicObject>::all_with(
        team.clone(),
        &ar(
            "core.kcp.io",
            "v1alpha1",
            "LogicalCluster",
            "logicalclusters",
        ),
    )
    .get("cluster")
    .await
    .expect("LogicalCluster");
    assert_eq!(lc.data["status"]["phase"], "Ready");
    Api::<DynamicObject>::all_with(team, &ar("", "v1", "Namespace", "namespaces"))
        .get("default")
        .await
        .expect("namespace default");
    let _ = ready_workspace(&workspaces, "team").await;
    sim.shutdown().await;
}
