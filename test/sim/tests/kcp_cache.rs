//! kcp's admission reads webhook configurations from the cache server
//! (docs/kcp-facts.md 29), and the enforcement probe holdfast's controller relies on
//! (a dry-run CREATE of an Event through an APIExport virtual workspace, judged by
//! the workspace's own replicated configurations, docs/kcp-facts.md 30).

mod common;

use common::*;
use common::{dyn_api as api, dyn_ar as ar, dyn_create as create};
use holdfast_sim::{Replication, Sim, SimConfig, SimHandle};
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

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

fn ws() -> ApiResource {
    ar("tenancy.kcp.io", "v1alpha1", "Workspace", "workspaces")
}

fn vwc() -> ApiResource {
    ar(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    )
}

fn cm() -> ApiResource {
    ar("", "v1", "ConfigMap", "configmaps")
}

/// Creates Workspace `name` under root on `shard` and waits until it is Ready;
/// returns an admin client of it and its logical cluster.
async fn workspace(sim: &SimHandle, name: &str, shard: &str) -> (kube::Client, String) {
    let url = sim.url();
    let root = client_at(sim, &format!("{url}/clusters/root")).await;
    let v = json!({"metadata": {"name": name},
                   "spec": {"location": {"selector": {"matchLabels": {"name": shard}}}}});
    create(&root, &ws(), None, v).await;
    let workspaces = api(&root, &ws(), None);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let lc = loop {
        let w = workspaces.get(name).await.expect("get workspace");
        if w.data["status"]["phase"] == "Ready" {
            break w.data["spec"]["cluster"].as_str().unwrap_or("").to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "workspace {name} not Ready: {:?}",
            w.data["status"]
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    (
        client_at(sim, &format!("{url}/clusters/root:{name}")).await,
        lc,
    )
}

/// Waits (30 s at the most) until `f` answers true.
async fn wait_until_async<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f().await {
        if std::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn deny(message: &'static str) -> Decide {
    Arc::new(
        move |_: &Value| json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": message}}),
    )
}

/// Whether a dry-run DELETE of ConfigMap `x` in `default` is refused by `hook`'s
/// webhook (`Some(message)`) or allowed (`None`).
async fn dry_run_delete(c: &kube::Client) -> Option<String> {
    let dp = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    match api(c, &cm(), Some("default")).delete("x", &dp).await {
        Ok(_) => None,
        Err(e) => Some(api_status(e).message),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_configuration_is_enforced_once_replicated_through_the_cache_server() {
    let cfg = SimConfig {
        shards: 2,
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg).await.expect("sim");
    let (c, _) = workspace(&sim, "team", "shard-1").await;
    create(
        &c,
        &cm(),
        Some("default"),
        json!({"metadata": {"name": "x"}}),
    )
    .await;
    let hook = TestWebhook::start(&[], deny("kept")).await;
    let config = recording_config(
        "keep",
        "keep.test.io",
        &hook,
        json!([{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]),
    );
    let refusal = "admission webhook \"keep.test.io\" denied the request: kept".to_string();

    // The cache server down: a new configuration is stored but never enforced.
    sim.set_webhook_replication(Replication::Stopped);
    create(&c, &vwc(), None, config).await;
    let not_replicated = sim.webhooks_replicated(Duration::from_secs(1)).await;
    assert!(not_replicated.is_err(), "replicated while stopped");
    assert_eq!(dry_run_delete(&c).await, None);
    assert!(hook.reviews().is_empty(), "{:?}", hook.reviews());

    // Replication resumes (after a delay): enforced.
    sim.set_webhook_replication(Replication::Fixed(Duration::from_millis(300)));
    sim.webhooks_replicated(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(dry_run_delete(&c).await, Some(refusal.clone()));

    // Deleted while the cache server is down: still enforced (the last
    // replicated version), until replication resumes.
    sim.set_webhook_replication(Replication::Stopped);
    api(&c, &vwc(), None)
        .delete("keep", &DeleteParams::default())
        .await
        .expect("delete the configuration");
    assert_eq!(dry_run_delete(&c).await, Some(refusal));
    sim.set_webhook_replication(Replication::default());
    sim.webhooks_replicated(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(dry_run_delete(&c).await, None);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_enforcement_probe_is_judged_by_the_workspaces_own_configurations() {
    let cfg = SimConfig {
        shards: 2,
        ..SimConfig::default()
    };
    let sim = Sim::start(cfg).await.expect("sim");
    // A provider claiming (core) Events; a consumer binding it, accepting the claim.
    // The claim serves events.k8s.io too; one on events.k8s.io authorizes nothing
    // (kcp-facts 32).
    let (p, _) = workspace(&sim, "provider", "root").await;
    create(
        &p,
        &ar("apis.kcp.io", "v1alpha2", "APIExport", "apiexports"),
        None,
        json!({
            "metadata": {"name": "probe.test.io"},
            "spec": {"permissionClaims": [{"group": "", "resource": "events", "verbs": ["create"]}]}
        }),
    )
    .await;
    let (c, lc) = workspace(&sim, "consumer", "shard-1").await;
    // Every Ready workspace has namespace default.
    api(&c, &ar("", "v1", "Namespace", "namespaces"), None)
        .get("default")
        .await
        .expect("namespace default");
    create(
        &c,
        &ar("apis.kcp.io", "v1alpha2", "APIBinding", "apibindings"),
        None,
        json!({
            "metadata": {"name": "probe"},
            "spec": {"reference": {"export": {"path": "root:provider", "name": "probe.test.io"}},
                     "permissionClaims": [{"group": "", "resource": "events", "verbs": ["create"],
                                           "selector": {"matchAll": true}, "state": "Accepted"}]}
        }),
    )
    .await;
    let hook = TestWebhook::start(&[], deny("enforced")).await;
    let probe = "holdfast-enforcement-probe-1a2b";
    create(&c, &vwc(), None, json!({
        "metadata": {"name": "holdfast"},
        "webhooks": [{
            "name": "enforcement-probe.holdfast.dev",
            "clientConfig": {"url": hook.url("/validate/enforcement-probe"), "caBundle": hook.ca_b64()},
            "rules": [{"operations": ["CREATE"], "apiGroups": ["events.k8s.io"], "apiVersions": ["*"],
                       "resources": ["events"], "scope": "Namespaced"}],
            "matchConditions": [{"name": "probe", "expression": format!("object.metadata.name == '{probe}'")}],
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail"
        }]
    }))
    .await;

    // Through the export's virtual workspace (the shard of the consumer).
    let shard = sim
        .shards()
        .into_iter()
        .find(|(n, _)| n == "shard-1")
        .map(|(_, u)| u)
        .expect("shard-1");
    let vw = format!("{shard}/services/apiexport/");
    let export_lc = sim.logical_cluster("root:provider").expect("provider lc");
    let vw = client_at(
        &sim,
        &format!("{vw}{export_lc}/probe.test.io/clusters/{lc}"),
    )
    .await;
    let events = api(
        &vw,
        &ar("events.k8s.io", "v1", "Event", "events"),
        Some("default"),
    );
    let event = |name: &str| {
        obj(
            &ar("events.k8s.io", "v1", "Event", "events"),
            json!({"metadata": {"name": name}, "eventTime": "2026-01-01T00:00:00.000000Z",
                   "reportingController": "holdfast.dev/controller", "reportingInstance": "x",
                   "action": "Probe", "reason": "Probe", "type": "Normal",
                   "regarding": {"kind": "Namespace", "name": "default"}}),
        )
    };
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_until_async("the probe refused", || async {
        events.create(&dry, &event(probe)).await.is_err()
    })
    .await;
    let s = api_status(
        events
            .create(&dry, &event(probe))
            .await
            .expect_err("the probe is refused"),
    );
    assert_eq!(
        s.message,
        "admission webhook \"enforcement-probe.holdfast.dev\" denied the request: enforced"
    );
    let reviews = hook.reviews();
    let last = reviews.last().expect("a review");
    assert!(
        last.path.starts_with("/validate/enforcement-probe?"),
        "{}",
        last.path
    );
    assert_eq!(last.review["request"]["dryRun"], true);
    // Another name: not matched, allowed, and a dry run stores nothing.
    events
        .create(&dry, &event("another"))
        .await
        .expect("another event is allowed");
    assert!(events.get_opt(probe).await.expect("get").is_none());
    sim.shutdown().await;
}
