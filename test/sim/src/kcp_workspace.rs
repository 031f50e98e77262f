//! A Workspace becomes Ready asynchronously (docs/kcp-facts.md 31), as kcp's
//! workspace reconciler and initializers make it: `Scheduling` (no `spec.cluster`,
//! no `spec.URL`), then `Initializing` (placed on a shard, its LogicalCluster
//! created, initializers `root:universal` and `system:apibindings` pending), then
//! `Ready`, each step a short random delay after the previous one, in a task of
//! its own (`pkg/reconciler/tenancy/workspace/workspace_reconcile_scheduling.go`,
//! `workspace_reconcile_phase.go`; `pkg/reconciler/tenancy/initialization/`;
//! `config/root/workspacetype-universal.yaml`).

use crate::kcp::{LOGICAL_CLUSTERS, SHARD_ANNOTATION, WORKSPACES, ckey, kind};
use crate::now_rfc3339;
use crate::server::State;
use crate::store::rv_of;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The initializers of a workspace of type `universal`: the type's own
/// (`initializer: true`, named `<path>:<name>`) and the APIBinder's (the type has
/// `defaultAPIBindings`).
pub const INITIALIZERS: [&str; 2] = ["root:universal", "system:apibindings"];

/// What kcp's scheduler records in a Workspace's `internal.tenancy.kcp.io/shard`:
/// the first 8 characters of the lowercase base36 of the SHA-224 of the shard's
/// name (`pkg/reconciler/tenancy/workspace/workspace_indexes.go`
/// `ByBase36Sha224NameValue`, docs/kcp-facts.md 35).
pub fn shard_hash(shard: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha224::digest(shard.as_bytes());
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    // Repeated division of the big-endian number by 36, least significant digit first.
    let mut n: Vec<u8> = digest.to_vec();
    let mut out = vec![];
    while n.iter().any(|b| *b != 0) {
        let mut rem = 0u32;
        for b in n.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 36) as u8;
            rem = cur % 36;
        }
        out.push(DIGITS[rem as usize]);
    }
    out.extend(digest.iter().take_while(|b| **b == 0).map(|_| b'0'));
    out.reverse();
    String::from_utf8_lossy(&out).chars().take(8).collect()
}

/// The status of a Workspace just created: waiting for the scheduler.
pub fn scheduling_status() -> Value {
    json!({"phase": "Scheduling"})
}

fn step_delay() -> Duration {
    use rand::Rng;
    Duration::from_millis(rand::rng().random_range(20..=120))
}

/// Starts the lifecycle of the Workspace `name` (uid `uid`) just created in
/// logical cluster `parent`.
pub fn spawn(state: &Arc<State>, parent: &str, name: &str, uid: &str) {
    let (state, parent, name, uid) = (
        state.clone(),
        parent.to_string(),
        name.to_string(),
        uid.to_string(),
    );
    tokio::spawn(async move {
        tokio::time::sleep(step_delay()).await;
        let Some(lc) = schedule(&state, &parent, &name, &uid) else {
            return;
        };
        tokio::time::sleep(step_delay()).await;
        ready(&state, &parent, &name, &uid, &lc);
    });
}

/// Changes the Workspace with `f` (None: it is gone or another one now).
fn change(
    state: &State,
    parent: &str,
    name: &str,
    uid: &str,
    f: impl Fn(&mut Value),
) -> Option<Arc<Value>> {
    let key = ckey(parent, name);
    for _ in 0..16 {
        let old = state.store.get(&kind(WORKSPACES), &key)?;
        if old["metadata"]["uid"].as_str() != Some(uid)
            || !old["metadata"]["deletionTimestamp"].is_null()
        {
            return None;
        }
        let mut new = (*old).clone();
        f(&mut new);
        if let Ok(stored) = state
            .store
            .update(&kind(WORKSPACES), &key, new, rv_of(&old))
        {
            return Some(stored);
        }
    }
    None
}

/// The scheduler: places the Workspace on a shard, creates its LogicalCluster
/// (phase `Initializing`) and moves it to `Initializing`. None: unschedulable (it
/// stays `Scheduling`, condition `WorkspaceScheduled=False`) or gone.
fn schedule(state: &Arc<State>, parent: &str, name: &str, uid: &str) -> Option<String> {
    let ws = state.store.get(&kind(WORKSPACES), &ckey(parent, name))?;
    let Some(shard) = crate::kcp::place(state, &ws) else {
        change(state, parent, name, uid, |w| {
            w["status"] = json!({"phase": "Scheduling", "conditions": [
                {"type": "WorkspaceScheduled", "status": "False", "severity": "Error",
                 "reason": "Unschedulable", "message": "No available shards to schedule the workspace",
                 "lastTransitionTime": now_rfc3339()},
            ]});
        });
        return None;
    };
    let lc = crate::kcp::random_lc_name();
    let parent_path = crate::kcp::path_of(state, parent).unwrap_or_else(|| parent.to_string());
    let path = format!("{parent_path}:{name}");
    let url = format!("{}/clusters/{}", state.url, path);
    crate::kcp::create_logical_cluster(state, &lc, &path, &shard, "Initializing");
    let stored = change(state, parent, name, uid, |w| {
        crate::kcp::set_annotation(w, SHARD_ANNOTATION, json!(shard_hash(&shard)));
        let fin = crate::kcp_deletion::WORKSPACE_FINALIZER;
        if !w["metadata"]["finalizers"].is_array() {
            w["metadata"]["finalizers"] = json!([]);
        }
        if let Some(f) = w["metadata"]["finalizers"].as_array_mut()
            && !f.iter().any(|x| x == fin)
        {
            f.push(json!(fin));
        }
        w["spec"]["cluster"] = json!(lc);
        w["spec"]["URL"] = json!(url);
        let now = now_rfc3339();
        w["status"] = json!({"phase": "Initializing", "initializers": INITIALIZERS, "conditions": [
            {"type": "WorkspaceScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "WorkspaceInitialized", "status": "False", "severity": "Info",
             "reason": "InitializerExists",
             "message": format!("Initializers still exist: [{}]", INITIALIZERS.join(" ")),
             "lastTransitionTime": now},
        ]});
    });
    match stored {
        Some(w) => {
            crate::authz::init_workspace(state, &lc, &w);
            Some(lc)
        }
        None => {
            // Deleted meanwhile: its logical cluster goes too.
            crate::kcp::delete_logical_cluster(state, &lc);
            None
        }
    }
}

/// The initializers are done: the LogicalCluster and the Workspace are Ready.
fn ready(state: &Arc<State>, parent: &str, name: &str, uid: &str, lc: &str) {
    let key = ckey(lc, "cluster");
    if let Some(old) = state.store.get(&kind(LOGICAL_CLUSTERS), &key) {
        let mut new = (*old).clone();
        new["spec"]["initializers"] = json!([]);
        new["status"]["phase"] = json!("Ready");
        new["status"]["initializers"] = json!([]);
        let _ = state
            .store
            .update(&kind(LOGICAL_CLUSTERS), &key, new, rv_of(&old));
    }
    change(state, parent, name, uid, |w| {
        let now = now_rfc3339();
        w["status"] = json!({"phase": "Ready", "conditions": [
            {"type": "WorkspaceScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "WorkspaceInitialized", "status": "True", "lastTransitionTime": now},
        ]});
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn shard_hashes_are_kcps() {
        // Computed with kcp's own function (ByBase36Sha224NameValue) for these names.
        for (shard, hash) in [
            ("root", "1pfxsevk"),
            ("shard-1", "2e1tfbst"),
            ("shard-2", "quyfennr"),
            ("shard-3", "2jvdumni"),
        ] {
            assert_eq!(super::shard_hash(shard), hash, "{shard}");
        }
    }
}
