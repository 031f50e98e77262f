//! kcp: the APIBindings of every workspace that binds the holdfast export, watched
//! through every endpoint of its virtual workspace (the export claims `apibindings`,
//! `list` and `watch`). The index tells
//! - which workspaces bind holdfast (a workspace whose claimed APIBindings an
//!   endpoint serves binds the export: label protection and strict mode apply to
//!   its objects on a provider's export route; a workspace that does not bind it is
//!   untouched),
//! - which endpoint serves a workspace (its shard's: Events are written there),
//! - which APIExport a covered workspace binds a type from, without a read.

use super::WebhookView;
use holdfast_shared::{
    api::common::GroupResource,
    endpoints::{ObjectKey, Partitioned},
    review::ExportRoute,
    watch::Index,
};
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::HashMap;

/// What one APIBinding binds: the export, and the group/resources it lists in
/// `status.boundResources`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Bound {
    /// The export (`status.apiExportClusterName`, `spec.reference.export.name`);
    /// `None` while the binding is not bound yet.
    pub(super) export: Option<ExportRoute>,
    /// Its bound resources.
    pub(super) resources: Vec<GroupResource>,
    /// Its workspace's path: kcp sets `kcp.io/path` on every APIBinding, whatever the
    /// creator wrote (kcp `pkg/admission/pathannotation`, kcp-facts 27).
    pub(super) path: Option<String>,
}

impl Bound {
    /// What the APIBinding `data` (everything but its metadata) binds.
    pub(super) fn of(data: &Value) -> Self {
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
    pub(super) fn bound(&self, cluster: &str, gr: &GroupResource) -> Option<ExportRoute> {
        let mut bindings: Vec<(&String, &Bound)> = self.clusters.get(cluster)?.iter().collect();
        // One answer whatever the map's order (kcp binds a group/resource once).
        bindings.sort_by(|a, b| a.0.cmp(b.0));
        bindings
            .into_iter()
            .find(|(_, b)| b.resources.contains(gr))
            .and_then(|(_, b)| b.export.clone())
    }

    /// Every workspace with an APIBinding in the index (each binds holdfast).
    pub(super) fn clusters(&self) -> Vec<String> {
        self.clusters.keys().cloned().collect()
    }

    /// The path of workspace `cluster`, from the `kcp.io/path` of its APIBindings.
    pub(super) fn path(&self, cluster: &str) -> Option<String> {
        self.clusters
            .get(cluster)?
            .values()
            .find_map(|b| b.path.clone())
    }

    /// Whether `cluster` has any APIBinding in the index.
    pub(super) fn holds(&self, cluster: &str) -> bool {
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

impl WebhookView {
    /// kcp: whether workspace `cluster` binds the holdfast export, as far as the
    /// APIBindings index knows. Unknown (the index not synced, or the workspace not
    /// seen while it is not) counts as binding: protection is applied rather than
    /// skipped. Kubernetes: always.
    pub fn binds_holdfast(&self, cluster: &str) -> bool {
        if self.topology != holdfast_shared::topology::Topology::Kcp || cluster.is_empty() {
            return true;
        }
        !self.apibindings.synced() || self.apibindings.seen_at(cluster).is_some()
    }

    /// kcp: the export a covered workspace binds `gr` from, from the index
    /// (`None`: not covered, ask the workspace).
    pub(super) fn indexed_binding(
        &self,
        cluster: &str,
        gr: &GroupResource,
    ) -> Option<Option<ExportRoute>> {
        if !self.apibindings.covers(cluster) {
            return None;
        }
        Some(
            self.apibindings
                .with_index(|i| i.holds(cluster).then(|| i.bound(cluster, gr)).flatten()),
        )
    }

    /// A client Events of objects of `cluster` are written with: on kcp, workspace
    /// `cluster` in the holdfast export's virtual workspace at the endpoint of its
    /// shard (the export claims `events`, `create` and `patch`), if an endpoint
    /// serves it (never the front-proxy); on Kubernetes, the cluster.
    pub fn event_client(&self, cluster: &str) -> Option<kube::Client> {
        if self.topology != holdfast_shared::topology::Topology::Kcp || cluster.is_empty() {
            return self.client_for(cluster);
        }
        let url = self.apibindings.seen_at(cluster)?;
        let clients = self.cluster_clients.as_ref()?;
        clients
            .virtual_workspace(&format!("{url}/clusters/{cluster}"))
            .ok()
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
    fn an_unsynced_index_counts_every_workspace_as_binding() {
        use crate::view::DependentsMode;
        use holdfast_shared::topology::Topology;
        let kcp = crate::view::test_view(Topology::Kcp, DependentsMode::Live);
        // Nothing listed yet: unknown, so protection applies (never skipped).
        assert!(kcp.binds_holdfast("lc-a"));
        // Not covered: the workspace is asked (no answer from the index), and no
        // endpoint is known to write its Events at.
        let vpcs = GroupResource::new("network.test.io", "vpcs");
        assert_eq!(kcp.indexed_binding("lc-a", &vpcs), None);
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
