//! kcp's deletion controllers (docs/kcp-facts.md 33, 34): deleting a Workspace
//! deletes its LogicalCluster, whose contents kcp deletes through admission, and
//! deleting an APIBinding deletes every object of its bound types through
//! admission. A refusal leaves the object, and its LogicalCluster or APIBinding
//! stays in deletion with a condition saying what remains; each pass retries.
//!
//! - Workspace: finalizer `core.kcp.io/logicalcluster`, removed once its
//!   LogicalCluster is gone (`pkg/reconciler/tenancy/workspace/workspace_reconcile_deletion.go`).
//! - LogicalCluster: finalizer `core.kcp.io/logicalcluster-deletion`; every
//!   cluster-scoped type but LogicalClusters, ClusterRoles, ClusterRoleBindings and
//!   bound types is deleted by DeleteCollection (namespaces empty themselves, bound
//!   types go with their APIBinding); condition `WorkspaceContentDeleted`; at the end
//!   ClusterRoles and ClusterRoleBindings go and the finalizer is removed
//!   (`pkg/reconciler/core/logicalclusterdeletion/`).
//! - APIBinding: finalizer `apis.kcp.io/apibinding-finalizer`; each bound type is
//!   deleted by DeleteCollection per namespace; condition
//!   `BindingResourceDeleteSuccess` (`pkg/reconciler/apis/apibindingdeletion/`).
//! - Both finalizers are added on create by kcp's admission and may be removed from
//!   a deleting object only by `system:masters` (`pkg/admission/finalizer/`).
//!
//! Simplification: a workspace's nested Workspaces are deleted with its other
//! cluster-scoped contents (kcp deletes them through the binding to root's
//! `tenancy.kcp.io` export, which the simulator does not materialize); either way
//! through admission, by root's configurations.

use crate::api::{self, Call};
use crate::controllers::{change, controller_user, info_for, set_condition, target};
use crate::errors::{ApiError, ApiResult};
use crate::kcp::{LOGICAL_CLUSTERS, WORKSPACES, ckey, kind};
use crate::registry::{Gr, ResourceInfo};
use crate::server::{Ctx, State, UserInfo};
use crate::store::{Key, rv_of};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub const WORKSPACE_FINALIZER: &str = "core.kcp.io/logicalcluster";
pub const LOGICAL_CLUSTER_FINALIZER: &str = "core.kcp.io/logicalcluster-deletion";
pub const BINDING_FINALIZER: &str = "apis.kcp.io/apibinding-finalizer";

/// The finalizer kcp's admission keeps on objects of `info` (None: no such rule).
fn required_finalizer(info: &ResourceInfo) -> Option<&'static str> {
    match (info.group.as_str(), info.resource.as_str()) {
        ("apis.kcp.io", "apibindings") => Some(BINDING_FINALIZER),
        ("core.kcp.io", "logicalclusters") => Some(LOGICAL_CLUSTER_FINALIZER),
        _ => None,
    }
}

fn finalizers(obj: &Value) -> Vec<&str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn deleting(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// kcp's finalizer admission, mutating half (create and update): the finalizer is
/// added to an object not being deleted that lacks it.
pub fn add_finalizer(info: &ResourceInfo, obj: &mut Value) {
    let Some(f) = required_finalizer(info) else {
        return;
    };
    if deleting(obj) || finalizers(obj).contains(&f) {
        return;
    }
    if !obj["metadata"]["finalizers"].is_array() {
        obj["metadata"]["finalizers"] = json!([]);
    }
    if let Some(a) = obj["metadata"]["finalizers"].as_array_mut() {
        a.push(json!(f));
    }
}

/// kcp's finalizer admission, validating half on update: only `system:masters`
/// removes the finalizer from an object being deleted.
pub fn check_finalizer_removal(
    user: &UserInfo,
    info: &ResourceInfo,
    old: &Value,
    new: &Value,
) -> ApiResult<()> {
    let Some(f) = required_finalizer(info) else {
        return Ok(());
    };
    let removing = finalizers(old).contains(&f) && !finalizers(new).contains(&f);
    let system = user.groups.iter().any(|g| g == "system:masters");
    if deleting(new) && removing && !system {
        let name = new["metadata"]["name"].as_str().unwrap_or("");
        return Err(ApiError::forbidden(
            info,
            name,
            &format!("removing the finalizer {f} is forbidden"),
        ));
    }
    Ok(())
}

/// One pass of the three deletion controllers.
pub async fn reconcile(state: &Arc<State>, idle: &mut crate::controllers::Idle) {
    for (key, ws) in idle.work("workspace deletion", state, &kind(WORKSPACES), deleting) {
        workspace(state, &key, &ws).await;
    }
    let lcs = idle.work(
        "logical cluster deletion",
        state,
        &kind(LOGICAL_CLUSTERS),
        |lc| deleting(lc) && finalizers(lc).contains(&LOGICAL_CLUSTER_FINALIZER),
    );
    for (key, lc) in lcs {
        logical_cluster(state, &key, &lc).await;
    }
    let bindings = Gr {
        group: "apis.kcp.io".into(),
        resource: "apibindings".into(),
    };
    let bindings = idle.work("binding deletion", state, &bindings, |b| {
        deleting(b) && finalizers(b).contains(&BINDING_FINALIZER)
    });
    for (key, b) in bindings {
        binding(state, &key, &b).await;
    }
}

fn ctx(state: &State, cluster: &str) -> Ctx {
    Ctx::internal(controller_user(state), cluster)
}

/// Drops finalizer `f` from the object of `info` at `key` (an update through the API).
async fn drop_finalizer(state: &Arc<State>, info: &Arc<ResourceInfo>, key: &Key, f: &str) {
    let t = target(info, None, Some(&key.name));
    let f = f.to_string();
    change(
        state,
        &ctx(state, &key.cluster),
        &t,
        &key.cluster,
        move |o| {
            if let Some(a) = o["metadata"]["finalizers"].as_array_mut() {
                a.retain(|x| x != f.as_str());
            }
        },
    )
    .await;
}

/// The workspace reconciler's deletion step: delete the LogicalCluster, then drop
/// the Workspace's finalizer once it is gone.
async fn workspace(state: &Arc<State>, key: &Key, ws: &Value) {
    let fins = finalizers(ws);
    if !fins.contains(&WORKSPACE_FINALIZER) || fins.len() > 1 {
        return;
    }
    let Some(ws_info) = info_for(state, &key.cluster, &kind(WORKSPACES)) else {
        return;
    };
    let lc = ws["spec"]["cluster"].as_str().unwrap_or("");
    let lc_obj = (!lc.is_empty())
        .then(|| {
            state
                .store
                .get(&kind(LOGICAL_CLUSTERS), &ckey(lc, "cluster"))
        })
        .flatten();
    match lc_obj {
        None => drop_finalizer(state, &ws_info, key, WORKSPACE_FINALIZER).await,
        Some(o) if !deleting(&o) => {
            let Some(info) = info_for(state, lc, &kind(LOGICAL_CLUSTERS)) else {
                return;
            };
            let t = target(&info, None, Some("cluster"));
            let opts = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
            let _ = api::delete(
                Call::new(state, &ctx(state, lc), &t, lc),
                "cluster",
                &opts,
                api::DeleteCall::Named,
            )
            .await;
        }
        Some(_) => {}
    }
}

/// Types the LogicalCluster deleter leaves alone.
fn kept_by_logical_cluster_deletion(gr: &Gr) -> bool {
    matches!(
        (gr.group.as_str(), gr.resource.as_str()),
        ("core.kcp.io", "logicalclusters")
            | ("rbac.authorization.k8s.io", "clusterroles")
            | ("rbac.authorization.k8s.io", "clusterrolebindings")
    )
}

/// What remains of the types deleted, and the errors met: kcp's messages.
#[derive(Default)]
struct Remaining {
    /// `<resource>.<group>` → instances left (kcp prints `namespaces.` for core).
    by_type: BTreeMap<String, usize>,
    by_finalizer: BTreeMap<String, usize>,
    errors: Vec<String>,
}

impl Remaining {
    fn count(&mut self, gr: &Gr, left: &[Arc<Value>]) {
        if left.is_empty() {
            return;
        }
        *self
            .by_type
            .entry(format!("{}.{}", gr.resource, gr.group))
            .or_default() += left.len();
        for o in left {
            for f in finalizers(o) {
                *self.by_finalizer.entry(f.to_string()).or_default() += 1;
            }
        }
    }

    fn types(&self) -> String {
        let v: Vec<String> = self
            .by_type
            .iter()
            .map(|(t, n)| format!("{t} has {n} resource instances"))
            .collect();
        v.join(", ")
    }

    fn finalizers(&self) -> String {
        let v: Vec<String> = self
            .by_finalizer
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        v.join(", ")
    }

    /// kcp's aggregate error text: one error as is, several in brackets.
    fn error(&self) -> String {
        match self.errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        }
    }
}

/// DeleteCollection of `info` in `namespace` (None: cluster-scoped) of `cluster`, as
/// a controller with background propagation; the error message on failure.
async fn delete_all(
    state: &Arc<State>,
    cluster: &str,
    info: &Arc<ResourceInfo>,
    namespace: Option<&str>,
) -> Result<(), String> {
    let t = target(info, namespace, None);
    let opts = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1",
                      "propagationPolicy": "Background"});
    api::delete_collection(
        Call::new(state, &ctx(state, cluster), &t, cluster),
        &HashMap::new(),
        &opts,
    )
    .await
    .map(|_| ())
    .map_err(|e| e.message)
}

/// The LogicalCluster deleter's pass over `lc_key`'s logical cluster.
async fn logical_cluster(state: &Arc<State>, lc_key: &Key, lc: &Value) {
    let cluster = lc_key.cluster.as_str();
    let mut grs = state.store.grs_with_objects_in(cluster, "");
    grs.sort();
    let mut rem = Remaining::default();
    for gr in grs
        .iter()
        .filter(|gr| !kept_by_logical_cluster_deletion(gr))
    {
        let Some(info) = info_for(state, cluster, gr) else {
            continue;
        };
        let bound = crate::kcp::bound_identity(state, cluster, &gr.group, &gr.resource);
        if info.namespaced || bound.is_some() {
            continue;
        }
        if let Err(e) = delete_all(state, cluster, &info, None).await {
            rem.errors.push(e);
            continue;
        }
        let left = state.store.list(gr, Some(cluster), Some("")).0;
        if !left.is_empty() && left.iter().all(|o| finalizers(o).is_empty()) {
            rem.errors.push(format!(
                "unexpected items still remain in logical cluster: {cluster} for gvr: {}/{}, Resource={}",
                gr.group,
                info.versions.first().map(String::as_str).unwrap_or("v1"),
                gr.resource
            ));
        }
        rem.count(gr, &left);
    }
    let mut new = lc.clone();
    if !rem.by_type.is_empty() {
        let mut msg = format!("Some resources are remaining: {}", rem.types());
        if !rem.by_finalizer.is_empty() {
            msg.push_str(&format!(
                "; Some content in the logical cluster has finalizers remaining: {}",
                rem.finalizers()
            ));
        }
        set_condition(
            &mut new,
            "WorkspaceContentDeleted",
            "False",
            "SomeResourcesRemain",
            &msg,
        );
    } else if !rem.errors.is_empty() {
        set_condition(
            &mut new,
            "WorkspaceContentDeleted",
            "False",
            "ContentDeletionFailed",
            &rem.error(),
        );
    } else {
        finalize_logical_cluster(state, cluster);
        return;
    }
    if new["status"] != lc["status"] {
        let _ = state
            .store
            .update(&kind(LOGICAL_CLUSTERS), lc_key, new, rv_of(lc));
    }
}

/// Every content is gone: the ClusterRoles and ClusterRoleBindings go, then the
/// LogicalCluster (its finalizer removed), with whatever the simulator still keeps
/// for the logical cluster.
fn finalize_logical_cluster(state: &Arc<State>, cluster: &str) {
    crate::kcp::delete_logical_cluster(state, cluster);
    state.kick.notify_one();
}

/// The APIBinding deleter's pass over binding `key`.
async fn binding(state: &Arc<State>, key: &Key, b: &Value) {
    let cluster = key.cluster.as_str();
    let mut rem = Remaining::default();
    for r in b["status"]["boundResources"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let gr = Gr {
            group: r["group"].as_str().unwrap_or("").to_string(),
            resource: r["resource"].as_str().unwrap_or("").to_string(),
        };
        let Some(info) = info_for(state, cluster, &gr) else {
            continue;
        };
        let items = state.store.list_keyed(&gr, Some(cluster), None).0;
        let mut namespaces: Vec<&str> = items.iter().map(|(k, _)| k.namespace.as_str()).collect();
        namespaces.dedup();
        let mut errs = vec![];
        for ns in namespaces {
            let ns = info.namespaced.then_some(ns);
            if let Err(e) = delete_all(state, cluster, &info, ns).await {
                errs.push(e);
            }
        }
        if !errs.is_empty() {
            rem.errors.push(match errs.as_slice() {
                [one] => one.clone(),
                many => format!("[{}]", many.join(", ")),
            });
        }
        let left = state.store.list(&gr, Some(cluster), None).0;
        rem.count(&gr, &left);
    }
    let mut new = b.clone();
    let done = if !rem.errors.is_empty() {
        set_condition(
            &mut new,
            "BindingResourceDeleteSuccess",
            "False",
            "ResourceDeletionFailed",
            &rem.error(),
        );
        false
    } else if !rem.by_finalizer.is_empty() {
        set_condition(
            &mut new,
            "BindingResourceDeleteSuccess",
            "False",
            "SomeFinalizersRemain",
            &format!(
                "Some content in the workspace has finalizers remaining: {}",
                rem.finalizers()
            ),
        );
        false
    } else if !rem.by_type.is_empty() {
        set_condition(
            &mut new,
            "BindingResourceDeleteSuccess",
            "False",
            "SomeResourcesRemain",
            &format!("Some resources are remaining: {}", rem.types()),
        );
        false
    } else {
        set_condition(&mut new, "BindingResourceDeleteSuccess", "True", "", "");
        true
    };
    let gr = Gr {
        group: "apis.kcp.io".into(),
        resource: "apibindings".into(),
    };
    if new["status"] != b["status"] {
        let _ = state.store.update(&gr, key, new, rv_of(b));
    }
    if done && let Some(info) = info_for(state, cluster, &gr) {
        drop_finalizer(state, &info, key, BINDING_FINALIZER).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bindings() -> ResourceInfo {
        crate::registry::kcp_info(
            "apis.kcp.io",
            &["v1alpha2"],
            "apibindings",
            "APIBinding",
            "apibinding",
            false,
            &[],
            true,
        )
    }

    fn user(groups: &[&str]) -> UserInfo {
        UserInfo {
            name: "u".into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Default::default(),
        }
    }

    #[test]
    fn the_finalizer_is_added_unless_deleting_and_removed_only_by_system_masters() {
        let info = bindings();
        let mut b = json!({"metadata": {"name": "b"}});
        add_finalizer(&info, &mut b);
        add_finalizer(&info, &mut b);
        assert_eq!(b["metadata"]["finalizers"], json!([BINDING_FINALIZER]));
        let mut gone = json!({"metadata": {"name": "b", "deletionTimestamp": "t"}});
        add_finalizer(&info, &mut gone);
        assert!(gone["metadata"]["finalizers"].is_null());

        let mut old = b.clone();
        old["metadata"]["deletionTimestamp"] = json!("t");
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!([]);
        let err = check_finalizer_removal(&user(&["tenants"]), &info, &old, &new)
            .expect_err("a tenant may not remove it");
        assert_eq!(err.code, 403);
        assert!(
            err.message
                .ends_with("removing the finalizer apis.kcp.io/apibinding-finalizer is forbidden"),
            "{}",
            err.message
        );
        check_finalizer_removal(&user(&["system:masters"]), &info, &old, &new)
            .expect("system:masters may");
        // Not deleting: the mutating half adds it back, nothing to refuse here.
        let mut live = b.clone();
        live["metadata"]["finalizers"] = json!([]);
        check_finalizer_removal(&user(&["tenants"]), &info, &b, &live).expect("not deleting");
    }
}
