//! What the fleet benchmarks share (`tests/controller_bench.rs`,
//! `tests/webhook_fleet_bench.rs`): sizes from the environment, raw creates and
//! lists, bounded concurrency, the policies every fleet workspace holds.

use std::sync::Arc;

use kube::{
    Client,
    api::{ListParams, PostParams},
    core::Request,
};
use serde_json::{Value, json};

/// `key` from the environment as a number, `default` when unset or unreadable.
pub fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Creates `body` in `collection` (a raw path).
pub async fn create(client: &Client, collection: &str, body: &Value) -> anyhow::Result<Value> {
    let req = Request::new(collection).create(&PostParams::default(), serde_json::to_vec(body)?)?;
    Ok(client.request::<Value>(req).await?)
}

/// Every object of `collection` (a raw path).
pub async fn list(client: &Client, collection: &str) -> anyhow::Result<Vec<Value>> {
    let req = Request::new(collection).list(&ListParams::default())?;
    let v: Value = client.request(req).await?;
    Ok(v["items"].as_array().cloned().unwrap_or_default())
}

/// Runs `f(i)` for every `i` in `0..n`, at most `limit` at a time.
pub async fn each<F, Fut>(n: usize, limit: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let sem = Arc::new(tokio::sync::Semaphore::new(limit));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        let fut = f(i);
        set.spawn(async move {
            fut.await;
            drop(permit);
        });
        // Reap what finished, so a million tasks are not all kept.
        while let Some(r) = set.try_join_next() {
            r.expect("task");
        }
    }
    while let Some(r) = set.join_next().await {
        r.expect("task");
    }
}

/// The policies of every fleet workspace besides its DependencyRules: a
/// ResourceProtection, an AnchorRule and a CriticalService on its own types, as
/// (collection, object).
pub fn local_policies() -> [(&'static str, Value); 3] {
    [
        (
            "resourceprotections",
            json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
                   "metadata": {"name": "config"},
                   "spec": {"resources": [{"group": "", "version": "v1", "resource": "configmaps"}]}}),
        ),
        (
            "anchorrules",
            json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "AnchorRule",
                   "metadata": {"name": "secrets"},
                   "spec": {"anchor": {"group": "", "version": "v1", "resource": "configmaps"},
                            "anchorLabels": {"name": "example.io/app"},
                            "protects": [{"group": "", "version": "v1", "resource": "secrets"}]}}),
        ),
        (
            "criticalservices",
            json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService",
                   "metadata": {"name": "registry"},
                   "spec": {"provider": {"group": "", "resource": "serviceaccounts", "namespace": "default", "name": "registry"},
                            "criteria": [{"type": "Finalizer", "finalizer": {"group": "", "resource": "configmaps", "finalizerName": "example.io/in-use"}}]}}),
        ),
    ]
}
