//! kcp: the APIBindings of every workspace that binds the holdfast export, watched
//! through every endpoint of its virtual workspace (the export claims `apibindings`,
//! `list` and `watch`). The index tells
//! - which workspaces bind holdfast (a workspace whose claimed APIBindings an
//!   endpoint serves binds the export: label protection and strict mode apply to
//!   its objects on a provider's export route; a workspace that does not bind it is
//!   untouched),
//! - which endpoint serves a workspace (its shard's: Events are written there),
//! - which APIExport a covered workspace binds a type from, without a read.

use super::clients::Clients;
use dashmap::DashMap;
use holdfast_shared::{
    api::common::GroupResource,
    endpoints::{Endpoints, ObjectKey, Partitioned},
    policy::LookupError,
    review::ExportRoute,
    watch::Index,
};
use kube::{
    Api,
    api::{DynamicObject, ListParams},
};
use serde_json::Value;
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

/// What one APIBinding binds: the export, and the group/resources it lists in
/// `status.boundResources`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bound {
    /// The export (`status.apiExportClusterName`, `spec.reference.export.name`);
    /// `None` while the binding is not bound yet.
    export: Option<ExportRoute>,
    /// Its bound resources.
    resources: Vec<GroupResource>,
    /// Its workspace's path: kcp sets `kcp.io/path` on every APIBinding, whatever the
    /// creator wrote (kcp `pkg/admission/pathannotation`, kcp-facts 27).
    path: Option<String>,
}

impl Bound {
    /// What the APIBinding `data` (everything but its metadata) binds.
    fn of(data: &Value) -> Self {
        let export = data["status"]["apiExportClusterName"]
            .as_str()
            .zip(data["spec"]["reference"]["export"]["name"].as_str())
            .map(|(cluster, name)| ExportRoute {
                cluster: cluster.to_string(),
                name: name.to_string(),
            });
        let resources = data["status"]["boundResources"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|r| {
                        Some(GroupResource::new(
                            r["group"].as_str()?,
                            r["resource"].as_str()?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            export,
            resources,
            path: None,
        }
    }
}

/// The APIBindings of every workspace an endpoint serves, per logical cluster.
#[derive(Debug, Default)]
pub(super) struct BindingsIndex {
    clusters: HashMap<String, HashMap<String, Bound>>,
}

impl BindingsIndex {
    /// The export `cluster` binds `gr` from (`None`: no binding of it provides `gr`).
    fn bound(&self, cluster: &str, gr: &GroupResource) -> Option<ExportRoute> {
        let mut bindings: Vec<(&String, &Bound)> = self.clusters.get(cluster)?.iter().collect();
        // One answer whatever the map's order (kcp binds a group/resource once).
        bindings.sort_by(|a, b| a.0.cmp(b.0));
        bindings
            .into_iter()
            .find(|(_, b)| b.resources.contains(gr))
            .and_then(|(_, b)| b.export.clone())
    }

    /// Every workspace with an APIBinding in the index (each binds holdfast).
    fn clusters(&self) -> Vec<String> {
        self.clusters.keys().cloned().collect()
    }

    /// The path of workspace `cluster`, from the `kcp.io/path` of its APIBindings.
    fn path(&self, cluster: &str) -> Option<String> {
        self.clusters
            .get(cluster)?
            .values()
            .find_map(|b| b.path.clone())
    }

    /// Whether `cluster` has any APIBinding in the index.
    fn holds(&self, cluster: &str) -> bool {
        self.clusters.contains_key(cluster)
    }

    fn insert(&mut self, object: &DynamicObject) {
        let key = ObjectKey::of(object);
        let mut bound = Bound::of(&object.data);
        bound.path = object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kcp.io/path"))
            .filter(|p| holdfast_shared::kcp::is_workspace_path(p))
            .cloned();
        self.clusters
            .entry(key.cluster)
            .or_default()
            .insert(key.name, bound);
    }
}

impl Index<DynamicObject> for BindingsIndex {
    fn reset(&mut self, objects: Vec<DynamicObject>) {
        self.clusters.clear();
        for o in &objects {
            self.insert(o);
        }
    }

    fn apply(&mut self, object: DynamicObject) {
        self.insert(&object);
    }

    fn delete(&mut self, object: DynamicObject) {
        self.remove(&ObjectKey::of(&object));
    }
}

impl Partitioned<DynamicObject> for BindingsIndex {
    fn remove(&mut self, key: &ObjectKey) {
        if let Some(bindings) = self.clusters.get_mut(&key.cluster) {
            bindings.remove(&key.name);
            if bindings.is_empty() {
                self.clusters.remove(&key.cluster);
            }
        }
    }
}

/// How long an answer of [`Bindings::bound_export`] read from a workspace is kept (a
/// workspace rarely rebinds a type; a stale answer only holds for this long).
const BINDING_TTL: Duration = Duration::from_secs(30);
/// Consumer workspaces whose bindings are kept at most (then all are dropped).
const BINDING_CAPACITY: usize = 10_000;
/// How long a read of a workspace's APIBindings may take.
const BINDING_READ_TIMEOUT: Duration = Duration::from_secs(8);

/// kcp: the APIBindings of every workspace that binds the holdfast export (from
/// every endpoint of its virtual workspace), and the exports other workspaces bind
/// types from, as last read.
pub(super) struct Bindings {
    index: Endpoints<DynamicObject, BindingsIndex>,
    /// Which APIExport a consumer workspace binds a group/resource from, as last
    /// read (see [`Bindings::bound_export`]), with when it was read.
    read: DashMap<(String, GroupResource), (Instant, Option<ExportRoute>)>,
}

impl Default for Bindings {
    fn default() -> Self {
        Self {
            index: Endpoints::new(BindingsIndex::default()),
            read: DashMap::new(),
        }
    }
}

impl Bindings {
    /// The index, for the watch of every endpoint to feed.
    pub(super) fn endpoints(&self) -> Endpoints<DynamicObject, BindingsIndex> {
        self.index.clone()
    }

    /// Whether workspace `cluster` binds the holdfast export, as far as the index
    /// knows. Unknown (the index not synced, or the workspace not seen while it is
    /// not) counts as binding: protection is applied rather than skipped.
    pub(super) fn binds(&self, cluster: &str) -> bool {
        !self.index.synced() || self.index.seen_at(cluster).is_some()
    }

    /// The URL of the endpoint that serves workspace `cluster`, if one does.
    pub(super) fn seen_at(&self, cluster: &str) -> Option<String> {
        self.index.seen_at(cluster)
    }

    /// Whether every endpoint's watch has listed.
    pub(super) fn synced(&self) -> bool {
        self.index.synced()
    }

    /// Every workspace with an APIBinding in the index (each binds holdfast).
    pub(super) fn clusters(&self) -> Vec<String> {
        self.index.with_index(BindingsIndex::clusters)
    }

    /// The path of workspace `cluster`, from the `kcp.io/path` of its APIBindings.
    pub(super) fn path(&self, cluster: &str) -> Option<String> {
        self.index.with_index(|i| i.path(cluster))
    }

    /// The export a covered workspace binds `gr` from, from the index (`None`: not
    /// covered, ask the workspace).
    fn indexed(&self, cluster: &str, gr: &GroupResource) -> Option<Option<ExportRoute>> {
        if !self.index.covers(cluster) {
            return None;
        }
        Some(
            self.index
                .with_index(|i| i.holds(cluster).then(|| i.bound(cluster, gr)).flatten()),
        )
    }

    /// The APIExport workspace `cluster` binds `gr` from: from the index when an
    /// endpoint of the holdfast export covers `cluster`, else its APIBindings read
    /// through the front-proxy (`list apibindings` there), kept [`BINDING_TTL`].
    pub(super) async fn bound_export(
        &self,
        clients: &Clients,
        cluster: &str,
        gr: &GroupResource,
    ) -> Result<Option<ExportRoute>, LookupError> {
        if let Some(indexed) = self.indexed(cluster, gr) {
            return Ok(indexed);
        }
        let key = (cluster.to_string(), gr.clone());
        if let Some(hit) = self.read.get(&key)
            && hit.0.elapsed() < BINDING_TTL
        {
            return Ok(hit.1.clone());
        }
        let client = clients.cluster(cluster)?;
        let api: Api<DynamicObject> =
            Api::all_with(client, &holdfast_shared::kcp::api_binding_resource());
        let list = tokio::time::timeout(BINDING_READ_TIMEOUT, api.list(&ListParams::default()))
            .await
            .map_err(|e| {
                LookupError::failed(
                    format!("reading the APIBindings of workspace {cluster} timed out"),
                    e,
                )
            })?
            .map_err(|e| {
                LookupError::failed(
                    format!("reading the APIBindings of workspace {cluster}: {e}"),
                    e,
                )
            })?;
        let found = list.items.iter().find_map(|b| binding_of(&b.data, gr));
        if self.read.len() >= BINDING_CAPACITY {
            self.read.clear();
        }
        self.read.insert(key, (Instant::now(), found.clone()));
        Ok(found)
    }
}

/// The export an APIBinding (`data`: everything but its metadata) binds `gr` from,
/// if its `status.boundResources` lists `gr`.
fn binding_of(data: &Value, gr: &GroupResource) -> Option<ExportRoute> {
    let bound = Bound::of(data);
    if bound.resources.contains(gr) {
        bound.export
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding(
        cluster: &str,
        name: &str,
        export: (&str, &str),
        bound: &[(&str, &str)],
    ) -> DynamicObject {
        let resources: Vec<Value> = bound
            .iter()
            .map(|(g, r)| json!({"group": g, "resource": r}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "apis.kcp.io/v1alpha2", "kind": "APIBinding",
            "metadata": {"name": name, "annotations": {"kcp.io/cluster": cluster}},
            "spec": {"reference": {"export": {"path": "root:x", "name": export.1}}},
            "status": {"apiExportClusterName": export.0, "boundResources": resources},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn route(cluster: &str, name: &str) -> Option<ExportRoute> {
        Some(ExportRoute {
            cluster: cluster.into(),
            name: name.into(),
        })
    }

    #[test]
    fn the_index_knows_each_workspaces_bindings() {
        let vpcs = GroupResource::new("network.test.io", "vpcs");
        let rps = GroupResource::new("holdfast.dev", "resourceprotections");
        let mut idx = BindingsIndex::default();
        idx.apply(binding(
            "lc-a",
            "holdfast",
            ("lc-h", "holdfast.dev"),
            &[("holdfast.dev", "resourceprotections")],
        ));
        idx.apply(binding(
            "lc-a",
            "net",
            ("lc-n", "net-b"),
            &[("network.test.io", "vpcs")],
        ));
        idx.apply(binding("lc-b", "holdfast", ("lc-h", "holdfast.dev"), &[]));
        assert!(idx.holds("lc-a") && idx.holds("lc-b") && !idx.holds("lc-c"));
        assert_eq!(idx.bound("lc-a", &vpcs), route("lc-n", "net-b"));
        assert_eq!(idx.bound("lc-a", &rps), route("lc-h", "holdfast.dev"));
        assert_eq!(idx.bound("lc-b", &vpcs), None);
        assert_eq!(idx.bound("lc-c", &vpcs), None);
        // A binding deleted, or removed by key (its endpoint listed again without it).
        idx.delete(binding("lc-a", "net", ("lc-n", "net-b"), &[]));
        assert_eq!(idx.bound("lc-a", &vpcs), None);
        idx.remove(&ObjectKey {
            cluster: "lc-b".into(),
            namespace: String::new(),
            name: "holdfast".into(),
        });
        assert!(!idx.holds("lc-b"));
        // A reset replaces everything.
        idx.reset(vec![binding(
            "lc-c",
            "holdfast",
            ("lc-h", "holdfast.dev"),
            &[],
        )]);
        assert!(!idx.holds("lc-a") && idx.holds("lc-c"));
    }

    #[test]
    fn a_binding_names_the_export_of_the_resources_it_binds() {
        let vpcs = GroupResource::new("network.test.io", "vpcs");
        let b = json!({
            "spec": {"reference": {"export": {"path": "root:net", "name": "net-b"}}},
            "status": {"apiExportClusterName": "lc1",
                       "boundResources": [{"group": "network.test.io", "resource": "vpcs"}]},
        });
        assert_eq!(
            binding_of(&b, &vpcs),
            Some(ExportRoute {
                cluster: "lc1".into(),
                name: "net-b".into()
            })
        );
        assert_eq!(
            binding_of(&b, &GroupResource::new("network.test.io", "subnets")),
            None
        );
        assert_eq!(
            binding_of(&b, &GroupResource::new("other.test.io", "vpcs")),
            None
        );
        // Not bound yet (no status), or no export cluster: nothing.
        assert_eq!(binding_of(&json!({"spec": b["spec"]}), &vpcs), None);
        let mut no_cluster = b.clone();
        no_cluster["status"]["apiExportClusterName"] = json!(null);
        assert_eq!(binding_of(&no_cluster, &vpcs), None);
    }

    #[test]
    fn an_unsynced_index_counts_every_workspace_as_binding() {
        use crate::view::DependentsMode;
        use holdfast_shared::topology::Topology;
        let kcp = crate::view::test_view(Topology::Kcp, DependentsMode::Live);
        // Nothing listed yet: unknown, so protection applies (never skipped).
        assert!(kcp.binds_holdfast("lc-a"));
        // Not covered: the workspace is asked (no answer from the index), and no
        // endpoint is known to write its Events at.
        let vpcs = GroupResource::new("network.test.io", "vpcs");
        assert_eq!(kcp.kcp.bindings().indexed("lc-a", &vpcs), None);
        assert!(kcp.event_client("lc-a").is_none());
        let kubernetes = crate::view::test_view(Topology::Kubernetes, DependentsMode::Live);
        assert!(kubernetes.binds_holdfast(""));
    }

    #[test]
    fn a_binding_not_bound_yet_names_no_export() {
        let b = Bound::of(&json!({"spec": {"reference": {"export": {"name": "net"}}}}));
        assert_eq!(
            b,
            Bound {
                export: None,
                resources: Vec::new(),
                path: None,
            }
        );
    }

    #[test]
    fn a_workspace_is_placed_by_the_path_kcp_keeps_on_its_bindings() {
        let mut idx = BindingsIndex::default();
        let with_path = |cluster: &str, name: &str, path: &str| {
            let mut b = binding(cluster, name, ("lc-h", "holdfast.dev"), &[]);
            if let Some(a) = b.metadata.annotations.as_mut() {
                a.insert("kcp.io/path".into(), path.into());
            }
            b
        };
        idx.apply(with_path("lc-a", "holdfast", "root:org:team"));
        idx.apply(binding("lc-b", "holdfast", ("lc-h", "holdfast.dev"), &[]));
        // Not a path: ignored.
        idx.apply(with_path("lc-c", "holdfast", "root::x"));
        assert_eq!(idx.path("lc-a").as_deref(), Some("root:org:team"));
        assert_eq!(idx.path("lc-b"), None);
        assert_eq!(idx.path("lc-c"), None);
        let mut clusters = idx.clusters();
        clusters.sort();
        assert_eq!(clusters, ["lc-a", "lc-b", "lc-c"]);
        idx.delete(binding("lc-a", "holdfast", ("lc-h", "holdfast.dev"), &[]));
        assert_eq!(idx.path("lc-a"), None);
    }
}
