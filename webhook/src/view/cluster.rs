//! [`ClusterIndex`] and [`ClusterLookup`] over the webhook's parts: the registry, the
//! dependents index and the object stores, with live reads where no synced cache
//! covers a question (its [`AccessReview`](holdfast_shared::policy::AccessReview):
//! [`super::access`]).

use super::{
    StoreKey, WebhookView, crds::crd_facts, crds::crd_resource, kcp_workspaces::unless_deleting,
    store_manager::namespace_content_keys,
};
use crate::stores::Depth;
use holdfast_shared::{
    api::common::GroupResource,
    index::Referrer,
    policy::{ClusterIndex, ClusterLookup, ContainedObject, DependentsQuery, LookupError},
    registry::{CompiledAnchor, CompiledCritical, CompiledDependency, CompiledProtection},
    review::{AdmissionRequest, ExportRoute, Gvr},
    topology::Topology,
};
use kube::{
    Api,
    api::{ApiResource, DynamicObject, ListParams},
};
use std::{sync::Arc, time::Duration};

/// How long a live read may take.
const LIVE_READ_TIMEOUT: Duration = Duration::from_secs(8);

impl ClusterIndex for WebhookView {
    fn policies_loaded(&self) -> bool {
        self.label_only || self.policies.registry().loaded()
    }

    fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
        // Before loading, any policy could govern anything.
        !self.label_only
    }

    fn strict_for(&self, req: &AdmissionRequest) -> bool {
        self.policies.strict_for(req)
    }

    fn protections(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledProtection>]>> {
        self.policies.registry().protections_for(gr)
    }

    fn protection_candidates(
        &self,
        cluster: &str,
        gr: &GroupResource,
        namespace: Option<&str>,
    ) -> Vec<Arc<CompiledProtection>> {
        self.policies.candidates(cluster, gr, namespace)
    }

    fn dependencies(&self, gr: &GroupResource) -> Option<Arc<[Arc<Vec<CompiledDependency>>]>> {
        self.policies.registry().dependencies.find(gr)
    }

    fn strict_selection_lost(&self, req: &AdmissionRequest) -> Option<String> {
        self.policies.strict_selection_lost(req)
    }

    fn critical(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledCritical>]>> {
        self.policies.registry().critical.find(gr)
    }

    fn anchors(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledAnchor>]>> {
        self.policies.registry().anchors.find(gr)
    }

    fn cascading_judged(&self) -> bool {
        !self.label_only && self.clients.home().is_some()
    }
}

impl ClusterLookup for WebhookView {
    async fn dependents(&self, q: DependentsQuery<'_>) -> Result<Vec<Referrer>, LookupError> {
        super::dependents::referrers(self, q).await
    }

    async fn count_finalizer(
        &self,
        cluster: &str,
        gr: &GroupResource,
        finalizer: &str,
    ) -> Result<usize, LookupError> {
        if let Some(store) = self.stores.synced(gr, Depth::Metadata) {
            return Ok(store.count_finalizer(cluster, finalizer));
        }
        self.metrics
            .dependents_lookups
            .with_label_values(&["live"])
            .inc();
        let client = self.clients.cluster(cluster)?;
        let (ar, _) = match Box::pin(self.clients.resolve(&client, cluster, gr)).await {
            Ok(r) => r,
            Err(crate::stores::ResolveError::NotServed(_)) => return Ok(0),
            Err(e) => return Err(LookupError::from_error(e)),
        };
        let api: Api<kube::core::PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
        let list = Box::pin(tokio::time::timeout(
            LIVE_READ_TIMEOUT,
            api.list_metadata(&ListParams::default()),
        ))
        .await
        .map_err(|e| LookupError::failed("the API server did not answer in time", e))?
        .map_err(|e| self.clients.read_error(cluster, gr, e))?;
        Ok(list
            .items
            .iter()
            .filter(|o| {
                o.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == finalizer)
            })
            .count())
    }

    async fn object(
        &self,
        cluster: &str,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<serde_json::Value>>, LookupError> {
        let key = (
            cluster.to_string(),
            namespace.unwrap_or_default().to_string(),
            name.to_string(),
        );
        let anchor = self.policies.registry().anchors.any(|a| a.anchor == *gr);
        let depth = if anchor { Depth::Full } else { Depth::Metadata };
        if let Some(store) = self.stores.synced(gr, depth) {
            return Ok(store.get(&key));
        }
        // Not synced (yet): one GET.
        let client = self.clients.cluster(cluster)?;
        let (ar, namespaced) = match Box::pin(self.clients.resolve(&client, cluster, gr)).await {
            Ok(r) => r,
            Err(crate::stores::ResolveError::NotServed(_)) => return Ok(None),
            Err(e) => return Err(LookupError::from_error(e)),
        };
        let api: Api<DynamicObject> = match (namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(client, ns, &ar),
            (true, None) => return Ok(None),
            (false, _) => Api::all_with(client, &ar),
        };
        let got = Box::pin(tokio::time::timeout(LIVE_READ_TIMEOUT, api.get_opt(name)))
            .await
            .map_err(|e| LookupError::failed("the API server did not answer in time", e))?
            .map_err(|e| self.clients.read_error(cluster, gr, e))?;
        Ok(got.and_then(|o| serde_json::to_value(o).ok()).map(Arc::new))
    }

    async fn remote_object(
        &self,
        source: &holdfast_shared::registry::AnchorSourceRef,
        gr: &GroupResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Arc<serde_json::Value>>, LookupError> {
        use crate::remote::{SourceState, state_error};
        if self.topology != Topology::Kubernetes {
            return Err(state_error(
                source,
                &SourceState::Unusable(
                    "anchor sources are read on the Kubernetes topology only".to_string(),
                ),
            ));
        }
        match self.remotes.get(source, gr) {
            Some(store) => store.get(source, namespace, name),
            None => Err(state_error(source, &SourceState::Connecting)),
        }
    }

    async fn namespace_contents(
        &self,
        cluster: &str,
        ns: &str,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        // kcp: read live in the workspace (without an API client that fails, and
        // the DELETE is refused: never "the namespace holds nothing"). Label-only
        // mode judges no containment, as on Kubernetes.
        if self.topology == Topology::Kcp && !self.label_only {
            let read = Box::pin(self.kcp.namespace_contents(
                &self.clients,
                self.policies.registry(),
                cluster,
                ns,
            ))
            .await;
            return unless_deleting(&self.clients, cluster, &format!("namespace {ns}"), read).await;
        }
        if !self.stores_built() {
            return Err(LookupError::unreadable(
                "holdfast has just started and is still building the indexes of what namespaces hold",
            ));
        }
        self.stores.discovery_complete()?;
        self.stores
            .namespace_contents(self.policies.registry(), &self.crds, cluster, ns)
    }

    async fn binding_contents(
        &self,
        cluster: &str,
        binding: &serde_json::Value,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        if self.topology != Topology::Kcp || self.label_only {
            return Ok(Vec::new());
        }
        let read = within_review(Box::pin(self.kcp.binding_contents(
            &self.clients,
            self.policies.registry(),
            cluster,
            binding,
        )))
        .await;
        let name = binding
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        unless_deleting(&self.clients, cluster, &format!("APIBinding {name}"), read).await
    }

    async fn workspace_contents(
        &self,
        workspace: &serde_json::Value,
    ) -> Result<Vec<holdfast_shared::policy::WorkspaceContents>, LookupError> {
        if self.topology != Topology::Kcp || self.label_only {
            return Ok(Vec::new());
        }
        within_review(Box::pin(self.kcp.workspace_contents(
            &self.clients,
            self.policies.registry(),
            workspace,
        )))
        .await
    }

    async fn custom_resources(
        &self,
        cluster: &str,
        crd: &serde_json::Value,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        if self.label_only && self.clients.home().is_none() {
            // No API server configured: as with namespace containment, label-only
            // mode without one sees no contents.
            return Ok(Vec::new());
        }
        self.stores.discovery_complete()?;
        let Some(ar) = crd_resource(crd) else {
            return Err(LookupError::unreadable(
                "the CustomResourceDefinition names no group, plural or version",
            ));
        };
        // A synced store of the type answers; a live list only where none does.
        let gr = GroupResource::new(&ar.group, &ar.plural);
        if let Some(store) = self.stores.synced(&gr, Depth::Metadata) {
            let mut objects = store.in_cluster(cluster);
            objects.sort_by(|a, b| {
                let key = |o: &serde_json::Value| {
                    (
                        o["metadata"]["namespace"].to_string(),
                        o["metadata"]["name"].to_string(),
                    )
                };
                key(a).cmp(&key(b))
            });
            return Ok(objects.into_iter().map(|o| contained(&ar, o)).collect());
        }
        let client = self.clients.cluster(cluster)?;
        let api: Api<kube::core::PartialObjectMeta<DynamicObject>> =
            Api::all_with(client.clone(), &ar);
        let list_all = async {
            let items = match super::kcp_contents::list_metadata(&api).await {
                Ok(items) => items,
                // Not served (not established yet, or already going): no instances;
                // on kcp only when discovery of the workspace says so.
                Err(e) if crate::stores::is_not_found(&e) => {
                    if self.topology == Topology::Kcp {
                        super::kcp::not_served(
                            &client,
                            cluster,
                            &ar.group,
                            &ar.version,
                            &ar.plural,
                        )
                        .await?;
                    }
                    return Ok(Vec::new());
                }
                Err(e) => return Err(self.clients.read_error(cluster, &gr, e)),
            };
            let mut out = Vec::with_capacity(items.len());
            for meta in items {
                let meta = serde_json::to_value(&meta).map_err(LookupError::from_error)?;
                out.push(contained(
                    &ar,
                    Arc::new(serde_json::json!({ "metadata": meta })),
                ));
            }
            Ok(out)
        };
        Box::pin(tokio::time::timeout(LIVE_READ_TIMEOUT, list_all))
            .await
            .map_err(|e| LookupError::failed("the API server did not answer in time", e))?
    }

    async fn live_in_namespace(&self, cluster: &str, ns: &str) -> Result<Vec<String>, LookupError> {
        let [pods_key, pvcs_key] = namespace_content_keys();
        // Ask for both before failing, so both start at once.
        let pods = self.stores.cascade(pods_key);
        let pvcs = self.stores.cascade(pvcs_key);
        let (pods, pvcs) = (pods?, pvcs?);
        let mut live_pods: Vec<String> = pods
            .in_namespace(cluster, ns)
            .iter()
            .filter(|p| holdfast_shared::policy::cascading::pod_is_live(p))
            .map(|p| holdfast_shared::policy::cascading::describe_object("Pod", p))
            .collect();
        live_pods.sort();
        let mut claims: Vec<String> = pvcs
            .in_namespace(cluster, ns)
            .iter()
            .map(|c| {
                holdfast_shared::policy::cascading::describe_object("PersistentVolumeClaim", c)
            })
            .collect();
        claims.sort();
        live_pods.extend(claims);
        Ok(live_pods)
    }

    async fn bound_export(
        &self,
        cluster: &str,
        gr: &GroupResource,
    ) -> Result<Option<ExportRoute>, LookupError> {
        Box::pin(self.kcp.bound_export(&self.clients, cluster, gr)).await
    }

    async fn replicas_path(
        &self,
        cluster: &str,
        group: &str,
        resource: &str,
    ) -> Result<Option<String>, LookupError> {
        let gr = GroupResource::new(group, resource);
        if self.topology == Topology::Kubernetes {
            if !self.crds.listed() {
                return Err(LookupError::unreadable(
                    "the CustomResourceDefinitions are not indexed yet",
                ));
            }
            return Ok(self.crds.replicas_path(&gr));
        }
        // kcp: no CRD watch; one GET of the CRD (only for a Cascading custom
        // resource's deletion).
        let name = format!("{resource}.{group}");
        let client = self.clients.cluster(cluster)?;
        let api: Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = Api::all(client);
        let crd = Box::pin(tokio::time::timeout(LIVE_READ_TIMEOUT, api.get_opt(&name)))
            .await
            .map_err(|e| LookupError::failed("the API server did not answer in time", e))?
            .map_err(LookupError::from_error)?;
        Ok(crd.and_then(|c| crd_facts(&c).1.replicas_path))
    }

    async fn live_instances(
        &self,
        cluster: &str,
        crd: &serde_json::Value,
    ) -> Result<Vec<String>, LookupError> {
        // Never served: no instance can exist.
        let never_served = !crd["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        });
        if never_served {
            return Ok(Vec::new());
        }
        let Some(ar) = crd_resource(crd) else {
            return Err(LookupError::unreadable(
                "the CustomResourceDefinition names no group, plural or version",
            ));
        };
        let store = self.stores.cascade(StoreKey {
            gr: GroupResource::new(&ar.group, &ar.plural),
            depth: Depth::Metadata,
            label: None,
        })?;
        let mut out: Vec<String> = store
            .in_cluster(cluster)
            .iter()
            .filter(|o| !holdfast_shared::policy::cascading::is_terminating(o))
            .map(|o| holdfast_shared::policy::cascading::describe_object(&ar.kind, o))
            .collect();
        out.sort();
        Ok(out)
    }
}

/// The longest the live reads of one containment check may take together: an
/// answer must reach the API server within its webhook timeout (10 s by default),
/// so that the refusal says why rather than "context deadline exceeded".
const CONTAINMENT_READS: std::time::Duration = std::time::Duration::from_secs(8);

/// `reads` within [`CONTAINMENT_READS`] (then an error saying so).
async fn within_review<T>(
    reads: impl std::future::Future<Output = Result<T, LookupError>>,
) -> Result<T, LookupError> {
    tokio::time::timeout(CONTAINMENT_READS, reads)
        .await
        .unwrap_or_else(|e| {
            Err(LookupError::failed(
                "reading what it holds took longer than 8s; retry later",
                e,
            ))
        })
}

/// An object of resource `ar` as containment reports it.
pub(super) fn contained(ar: &ApiResource, object: Arc<serde_json::Value>) -> ContainedObject {
    ContainedObject {
        resource: Gvr {
            group: ar.group.clone(),
            version: ar.version.clone(),
            resource: ar.plural.clone(),
        },
        kind: ar.kind.clone(),
        object,
    }
}
