//! kcp: what deleting a Workspace, or an APIBinding, would delete (workspace and
//! binding containment).
//!
//! kcp deletes a workspace's contents, and every workspace below it, in no set
//! order, mostly without asking holdfast (kcp-facts 23). So a Workspace DELETE is
//! judged up front by the objects of its logical cluster and of every workspace
//! below it that binds holdfast (only there does holdfast protect anything). The
//! workspaces binding holdfast, and where each lies in the tree, come from the
//! APIBindings index (kcp keeps the canonical `kcp.io/path` on every APIBinding);
//! a workspace the index has no path for is placed by its LogicalCluster's
//! `kcp.io/path` (read once: a path never changes). Their objects are listed
//! live, as namespace containment lists a namespace's.

use super::{clients::Clients, kcp_bindings::Bindings, kcp_contents::WorkspaceTypes};
use dashmap::DashMap;
use holdfast_shared::{
    kcp::logical_cluster_resource,
    policy::{ContainedObject, LookupError, WorkspaceContents, workspace_path},
    registry::Registry,
};
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;

/// Workspaces whose paths are kept at most (then all are dropped).
const PATH_CAPACITY: usize = 100_000;

/// What reading the contents of workspaces needs: which workspaces bind holdfast
/// (and their paths), their types, the clients, and the registry (whether a policy
/// names Secrets).
pub(super) struct Reads<'a> {
    pub(super) bindings: &'a Bindings,
    pub(super) types: &'a WorkspaceTypes,
    pub(super) clients: &'a Clients,
    pub(super) registry: &'a Registry,
}

/// kcp: the path of each logical cluster workspace containment has placed (a
/// workspace's path never changes).
#[derive(Default)]
pub(super) struct WorkspacePaths {
    paths: DashMap<String, String>,
}

impl WorkspacePaths {
    /// See [`holdfast_shared::policy::ClusterView::workspace_contents`].
    pub(super) async fn workspace_contents(
        &self,
        reads: &Reads<'_>,
        workspace: &Value,
    ) -> Result<Vec<WorkspaceContents>, LookupError> {
        let Some(cluster) = workspace
            .pointer("/spec/cluster")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        else {
            // Not scheduled yet: no logical cluster, nothing in it.
            return Ok(Vec::new());
        };
        let path = workspace_path(workspace);
        if !reads.bindings.synced() {
            return Err(LookupError::unreadable(
                "holdfast has just started and does not know yet which workspaces bind it",
            ));
        }
        let bound = reads.bindings.clusters();
        let below = path.as_ref().map(|p| format!("{p}:"));
        let namespaces = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
        let mut out = Vec::new();
        for c in bound {
            let (place, unplaced) = if c == cluster {
                (Some(path.clone().unwrap_or_else(|| c.clone())), None)
            } else {
                match self.path_of(reads, &c).await {
                    Ok(p) if below.as_ref().is_some_and(|b| p.starts_with(b.as_str())) => {
                        (Some(p), None)
                    }
                    Ok(_) => continue,
                    Err(e) => (None, Some(e)),
                }
            };
            let listed = reads
                .types
                .contents(
                    reads.clients,
                    reads.registry,
                    &c,
                    None,
                    std::slice::from_ref(&namespaces),
                )
                .await;
            let (objects, unreadable) = match (listed, unplaced) {
                (Ok(objects), _) => (objects, None),
                (Err(e), None) => (Vec::new(), Some(e.to_string())),
                // Neither placed nor read: it may lie below and hold anything.
                (Err(read), Some(place)) => (
                    Vec::new(),
                    Some(format!(
                        "workspace {c} binds holdfast and can neither be placed in the tree \
                         ({}) nor read ({}); grant holdfast-webhook get logicalclusters there \
                         (docs/kcp.md)",
                        place, read
                    )),
                ),
            };
            out.push(WorkspaceContents {
                cluster: c,
                path: place,
                objects,
                unreadable,
            });
        }
        Ok(out)
    }

    /// The path of logical cluster `cluster`: from the `kcp.io/path` kcp keeps on
    /// its APIBindings (the index), else its LogicalCluster's (one GET, kept).
    async fn path_of(&self, reads: &Reads<'_>, cluster: &str) -> Result<String, LookupError> {
        if let Some(p) = reads.bindings.path(cluster) {
            return Ok(p);
        }
        if let Some(p) = self.paths.get(cluster) {
            return Ok(p.clone());
        }
        let read = read_logical_cluster(reads.clients, cluster).await?;
        let path = read
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kcp.io/path"))
            .filter(|p| holdfast_shared::kcp::is_workspace_path(p))
            .cloned()
            .ok_or_else(|| {
                LookupError::unreadable(format!(
                    "the LogicalCluster of {cluster} carries no usable kcp.io/path"
                ))
            })?;
        if self.paths.len() >= PATH_CAPACITY {
            self.paths.clear();
        }
        self.paths.insert(cluster.to_string(), path.clone());
        Ok(path)
    }
}

/// See [`holdfast_shared::policy::ClusterView::binding_contents`]: every object
/// of the types the binding lists in `status.boundResources`, read live in its
/// workspace.
pub(super) async fn binding_contents(
    reads: &Reads<'_>,
    cluster: &str,
    binding: &Value,
) -> Result<Vec<ContainedObject>, LookupError> {
    let bound: Vec<(String, String)> = binding
        .pointer("/status/boundResources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((
                r["group"].as_str()?.to_string(),
                r["resource"].as_str()?.to_string(),
            ))
        })
        .collect();
    if bound.is_empty() {
        return Ok(Vec::new());
    }
    reads
        .types
        .contents_of(
            reads.clients,
            reads.registry,
            cluster,
            None,
            &[],
            |ar, _| bound.iter().any(|(g, r)| *g == ar.group && *r == ar.plural),
        )
        .await
}

/// What a namespace or an APIBinding of logical cluster `cluster` holds
/// (`read`), unless it could not be read while kcp deletes that logical
/// cluster: then nothing, so kcp's deletion goes on. kcp deletes a logical
/// cluster only once its Workspace DELETE was admitted (workspace containment
/// judged everything in it up front) and only kcp can mark a LogicalCluster
/// deleted (kcp `pkg/admission/logicalcluster`); each object the namespace or
/// binding holds still comes to holdfast on its own DELETE, so a protected one
/// is still refused (kcp's condition and holdfast's Event say so). Refusing
/// here instead left the workspace in deletion for good when its contents
/// could not be read (kcp-facts 36).
pub(super) async fn unless_deleting(
    clients: &Clients,
    cluster: &str,
    what: &str,
    read: Result<Vec<ContainedObject>, LookupError>,
) -> Result<Vec<ContainedObject>, LookupError> {
    match read {
        Err(e) if logical_cluster_deleting(clients, cluster).await => {
            tracing::info!(logical_cluster = %cluster, %what, error = %e, "kcp is deleting this logical cluster and what it holds could not be read: its DELETE is let through, each object in it is judged on its own DELETE");
            Ok(Vec::new())
        }
        other => other,
    }
}

/// Whether kcp is deleting logical cluster `cluster` (its LogicalCluster
/// `cluster` carries a deletion timestamp). Any failure to read it: no.
async fn logical_cluster_deleting(clients: &Clients, cluster: &str) -> bool {
    read_logical_cluster(clients, cluster)
        .await
        .is_ok_and(|lc| lc.metadata.deletion_timestamp.is_some())
}

/// The LogicalCluster `cluster` of logical cluster `cluster` (one GET, 5 s at most).
async fn read_logical_cluster(
    clients: &Clients,
    cluster: &str,
) -> Result<DynamicObject, LookupError> {
    let client = clients.cluster(cluster)?;
    let api: Api<DynamicObject> = Api::all_with(client, &logical_cluster_resource());
    tokio::time::timeout(std::time::Duration::from_secs(5), api.get("cluster"))
        .await
        .map_err(|e| {
            LookupError::failed(
                format!("reading the LogicalCluster of {cluster} timed out"),
                e,
            )
        })?
        .map_err(|e| {
            LookupError::failed(format!("reading the LogicalCluster of {cluster}: {e}"), e)
        })
}
