//! kcp: what a namespace of a workspace holds, read live through the front-proxy.
//!
//! kcp refuses the wildcard `/clusters/*` through the front-proxy (kcp-facts 3) and a
//! claim cannot name arbitrary types, so no store can hold every workspace's objects.
//! A namespace DELETE in workspace W reads W's discovery (cached briefly per
//! workspace) and lists the metadata of every namespaced type in the namespace. It
//! never "sees nothing": a type that cannot be listed refuses the DELETE, naming the
//! type and the grant, except Secrets, left out unless a policy of W names them (as
//! on Kubernetes, where the webhook's identity does not read Secrets by default).

use super::{clients::Clients, kcp::not_served};
use dashmap::DashMap;
use holdfast_shared::{
    api::common::GroupResource,
    names::KCP_CLUSTER_ANNOTATION,
    policy::{ContainedObject, LookupError},
    registry::Registry,
    review::Gvr,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams},
    core::PartialObjectMeta,
};
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

/// How long a workspace's discovery is kept (types come and go with bindings).
const DISCOVERY_TTL: Duration = Duration::from_secs(10);
/// Workspaces whose discovery is kept at most (then all are dropped).
const DISCOVERY_CAPACITY: usize = 1024;
/// How long the discovery of a workspace, and the lists of one namespace, may take.
const READ_TIMEOUT: Duration = Duration::from_secs(8);

/// The types a workspace serves that can be listed, each with whether it is
/// namespaced, with when they were discovered.
type Discovered = (Instant, Arc<Vec<(ApiResource, bool)>>);

/// kcp: the listable types of each workspace, as last discovered (namespace,
/// binding and workspace containment read them live).
#[derive(Default)]
pub(super) struct WorkspaceTypes {
    discovered: DashMap<String, Discovered>,
}

impl WorkspaceTypes {
    /// Every object of every namespaced type of workspace `cluster` in namespace
    /// `ns` (every namespace: `None`), and of `more` (in any scope), read live.
    pub(super) async fn contents(
        &self,
        clients: &Clients,
        registry: &Registry,
        cluster: &str,
        ns: Option<&str>,
        more: &[ApiResource],
    ) -> Result<Vec<ContainedObject>, LookupError> {
        self.contents_of(clients, registry, cluster, ns, more, |_, namespaced| {
            namespaced
        })
        .await
    }

    /// The objects of `more` and of the types `keep` accepts (each with whether it
    /// is namespaced) of workspace `cluster`, in namespace `ns` (`None`: all).
    pub(super) async fn contents_of(
        &self,
        clients: &Clients,
        registry: &Registry,
        cluster: &str,
        ns: Option<&str>,
        more: &[ApiResource],
        keep: impl Fn(&ApiResource, bool) -> bool,
    ) -> Result<Vec<ContainedObject>, LookupError> {
        let client = clients.cluster(cluster)?;
        // The map's guard is dropped before the map is written (a guard held
        // across `insert` on the same shard deadlocks the review's thread).
        let cached = self
            .discovered
            .get(cluster)
            .filter(|hit| hit.0.elapsed() < DISCOVERY_TTL)
            .map(|hit| hit.1.clone());
        let types = match cached {
            Some(types) => types,
            None => {
                let found = Arc::new(listable_types(&client, cluster).await?);
                if self.discovered.len() >= DISCOVERY_CAPACITY {
                    self.discovered.clear();
                }
                self.discovered
                    .insert(cluster.to_string(), (Instant::now(), found.clone()));
                found
            }
        };
        let secrets = GroupResource::new("", "secrets");
        let secrets_named = registry.protections_in(cluster, &secrets).is_some()
            || registry.anchors.protects(&secrets)
            || registry.critical.protects(&secrets)
            || registry.dependencies.protects(&secrets);
        let mut all = more.to_vec();
        all.extend(
            types
                .iter()
                .filter(|(ar, namespaced)| keep(ar, *namespaced))
                .map(|(ar, _)| ar.clone()),
        );
        let result = contents(&client, cluster, ns, &all, secrets_named).await;
        if result.is_err() {
            // The next check discovers afresh (a type may have gone).
            self.discovered.remove(cluster);
        }
        result
    }
}

/// The namespaced types workspace `cluster` serves that can be listed.
#[cfg(test)]
async fn namespaced_types(client: &Client, cluster: &str) -> Result<Vec<ApiResource>, LookupError> {
    let all = listable_types(client, cluster).await?;
    Ok(all
        .into_iter()
        .filter(|(_, n)| *n)
        .map(|(ar, _)| ar)
        .collect())
}

/// The types workspace `cluster` serves that can be listed (no subresources, no
/// Events), each with whether it is namespaced, from its discovery. Any failure is
/// an error: a type not discovered would be a type not checked.
async fn listable_types(
    client: &Client,
    cluster: &str,
) -> Result<Vec<(ApiResource, bool)>, LookupError> {
    let failed = |what: &str, e: kube::Error| {
        LookupError::failed(
            format!("the discovery of workspace {cluster} failed ({what}: {e}); retry later"),
            e,
        )
    };
    let discover = async {
        let mut group_versions: Vec<(String, String)> = vec![(String::new(), "v1".to_string())];
        let groups = client
            .list_api_groups()
            .await
            .map_err(|e| failed("/apis", e))?;
        for g in groups.groups {
            if let Some(v) = super::discovery::preferred_version(&g) {
                group_versions.push((g.name, v));
            }
        }
        let lookups = group_versions
            .into_iter()
            .map(|(group, version)| async move {
                let listed = if group.is_empty() {
                    client.list_core_api_resources(&version).await
                } else {
                    client
                        .list_api_group_resources(&format!("{group}/{version}"))
                        .await
                };
                (group, version, listed)
            });
        let mut out = Vec::new();
        for (group, version, listed) in futures::future::join_all(lookups).await {
            let gv = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            let list = listed.map_err(|e| failed(&gv, e))?;
            for r in list.resources {
                if r.name.contains('/')
                    || !r.verbs.iter().any(|v| v == "list")
                    || r.name == "events"
                {
                    continue;
                }
                out.push((
                    ApiResource {
                        group: group.clone(),
                        version: version.clone(),
                        api_version: gv.clone(),
                        kind: r.kind,
                        plural: r.name,
                    },
                    r.namespaced,
                ));
            }
        }
        out.sort_by(|(a, _), (b, _)| (&a.group, &a.plural).cmp(&(&b.group, &b.plural)));
        Ok(out)
    };
    tokio::time::timeout(READ_TIMEOUT, discover)
        .await
        .map_err(|e| {
            LookupError::failed(
                format!(
                    "the discovery of workspace {cluster} failed (discovery: no answer within \
                     8s); retry later"
                ),
                e,
            )
        })?
}

/// The objects of every type of `types` in namespace `ns` of workspace `cluster`
/// (metadata only), each annotated with its logical cluster. A type whose list is
/// forbidden refuses (naming the type and the grant), unless it is Secrets and no
/// policy names them (`secrets_named`); any other failure refuses ("retry later").
async fn contents(
    client: &Client,
    cluster: &str,
    ns: Option<&str>,
    types: &[ApiResource],
    secrets_named: bool,
) -> Result<Vec<ContainedObject>, LookupError> {
    let lists = types
        .iter()
        .map(|ar| list_in(client, cluster, ns, ar, secrets_named));
    let all = tokio::time::timeout(READ_TIMEOUT, futures::future::join_all(lists))
        .await
        .map_err(|e| {
            LookupError::failed(
                format!(
                    "listing the contents of {} took longer than 8s; retry later",
                    scope(cluster, ns)
                ),
                e,
            )
        })?;
    let mut out = Vec::new();
    for listed in all {
        out.extend(listed?);
    }
    Ok(out)
}

/// `namespace NS in workspace LC`, or `workspace LC` for all of it.
fn scope(cluster: &str, ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("namespace {ns} in workspace {cluster}"),
        None => format!("workspace {cluster}"),
    }
}

/// The objects of `ar` in namespace `ns` of workspace `cluster` (`None`: all).
async fn list_in(
    client: &Client,
    cluster: &str,
    ns: Option<&str>,
    ar: &ApiResource,
    secrets_named: bool,
) -> Result<Vec<ContainedObject>, LookupError> {
    let gr = GroupResource::new(&ar.group, &ar.plural);
    let api: Api<PartialObjectMeta<DynamicObject>> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let items = match list_metadata(&api).await {
        Ok(items) => items,
        Err(e) if crate::stores::is_forbidden(&e) => {
            if gr.group.is_empty() && gr.resource == "secrets" && !secrets_named {
                return Ok(Vec::new());
            }
            return Err(LookupError::unreadable(format!(
                "holdfast-webhook may not list {gr} in workspace {cluster}, so what \
                 {} holds cannot be checked: grant it list on {gr} there \
                 (docs/kcp.md, Consumer guide)",
                ns.map_or_else(
                    || format!("workspace {cluster}"),
                    |ns| format!("namespace {ns}")
                )
            )));
        }
        Err(e) if crate::stores::is_not_found(&e) => {
            // Gone since discovery, or not served yet: only when discovery says so.
            not_served(client, cluster, &ar.group, &ar.version, &ar.plural).await?;
            return Ok(Vec::new());
        }
        Err(e) => {
            return Err(LookupError::failed(
                format!(
                    "listing {gr} in {} failed ({e}); retry later",
                    scope(cluster, ns)
                ),
                e,
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for mut meta in items {
        meta.annotations
            .get_or_insert_with(Default::default)
            .entry(KCP_CLUSTER_ANNOTATION.to_string())
            .or_insert_with(|| cluster.to_string());
        let meta = serde_json::to_value(&meta).map_err(LookupError::from_error)?;
        out.push(ContainedObject {
            resource: Gvr {
                group: ar.group.clone(),
                version: ar.version.clone(),
                resource: ar.plural.clone(),
            },
            kind: ar.kind.clone(),
            object: Arc::new(serde_json::json!({ "metadata": meta })),
        });
    }
    Ok(out)
}

/// The metadata of every object `api` lists, page by page (500 a page).
pub(super) async fn list_metadata(
    api: &Api<PartialObjectMeta<DynamicObject>>,
) -> Result<Vec<ObjectMeta>, kube::Error> {
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let list = api.list_metadata(&params).await?;
        out.extend(list.items.into_iter().map(|i| i.metadata));
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(code: u16) -> serde_json::Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "no", "code": code})
    }

    /// A workspace's API server: discovery serves core configmaps, secrets and
    /// pods/log and apps deployments (`broken` makes the apps group fail); in
    /// namespace `shop` a ConfigMap `cfg` (with a second page `more`), Secrets
    /// forbidden, Deployments answering 500; in `gone`, ConfigMaps answer 404, in
    /// `locked` 403.
    fn workspace(broken: bool) -> Client {
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| async move {
            let query = req.uri().query().unwrap_or_default().to_string();
            let resources = |gv: &str, list: &[(&str, &str, bool)]| {
                let r: Vec<_> = list
                    .iter()
                    .map(|(n, k, ns)| json!({"name": n, "singularName": "", "namespaced": ns, "kind": k, "verbs": ["get", "list"]}))
                    .collect();
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": r})
            };
            let cm = |name: &str| json!({"metadata": {"name": name, "namespace": "shop", "labels": {"holdfast.dev/protected": "true"}}});
            let (code, body) = match req.uri().path() {
                "/apis" => (
                    200,
                    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                    {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                     "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]}),
                ),
                "/api/v1" => (
                    200,
                    resources(
                        "v1",
                        &[
                            ("configmaps", "ConfigMap", true),
                            ("secrets", "Secret", true),
                            ("pods/log", "Pod", true),
                            ("events", "Event", true),
                            ("nodes", "Node", false),
                        ],
                    ),
                ),
                "/apis/apps/v1" if broken => (503, status(503)),
                "/apis/apps/v1" => (
                    200,
                    resources("apps/v1", &[("deployments", "Deployment", true)]),
                ),
                "/api/v1/namespaces/shop/configmaps" if query.contains("continue=p2") => (
                    200,
                    json!({
                    "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {}, "items": [cm("more")]}),
                ),
                "/api/v1/namespaces/shop/configmaps" => (
                    200,
                    json!({
                    "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"continue": "p2"}, "items": [cm("cfg")]}),
                ),
                "/api/v1/namespaces/shop/secrets" => (403, status(403)),
                "/apis/apps/v1/namespaces/shop/deployments" => (500, status(500)),
                "/api/v1/namespaces/gone/configmaps" => (404, status(404)),
                "/api/v1/namespaces/locked/configmaps" => (403, status(403)),
                _ => (404, status(404)),
            };
            super::super::json_response(code, &body)
        });
        Client::new(svc, "default")
    }

    /// The refusal of a namespace DELETE in `ns` of lc-a when `resource` may not
    /// be listed.
    fn forbidden(resource: &str, ns: &str) -> String {
        format!(
            "holdfast-webhook may not list {resource} in workspace lc-a, so what namespace \
             {ns} holds cannot be checked: grant it list on {resource} there (docs/kcp.md, \
             Consumer guide)"
        )
    }

    fn ar(group: &str, plural: &str, kind: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: "v1".into(),
            api_version: if group.is_empty() {
                "v1".into()
            } else {
                format!("{group}/v1")
            },
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    fn names(found: &[ContainedObject]) -> Vec<String> {
        found
            .iter()
            .map(|o| {
                format!(
                    "{} {} {}",
                    o.kind,
                    o.object["metadata"]["name"].as_str().unwrap_or_default(),
                    o.object["metadata"]["annotations"]["kcp.io/cluster"]
                        .as_str()
                        .unwrap_or_default()
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn discovery_lists_the_namespaced_listable_types_or_fails() {
        let types = namespaced_types(&workspace(false), "lc-a").await;
        let plurals: Vec<String> = types
            .unwrap_or_else(|e| panic!("{e}"))
            .iter()
            .map(|a| format!("{}/{} {}", a.api_version, a.plural, a.kind))
            .collect();
        assert_eq!(
            plurals,
            [
                "v1/configmaps ConfigMap",
                "v1/secrets Secret",
                "apps/v1/deployments Deployment"
            ]
        );
        // One group's discovery failing fails the whole: a type not discovered
        // would be a type not checked.
        let failed = namespaced_types(&workspace(true), "lc-a").await;
        crate::view::assert_retry_later(
            failed.map(|_| ()),
            "the discovery of workspace lc-a failed (apps/v1: ",
        );
    }

    #[tokio::test]
    async fn contents_are_listed_page_by_page_secrets_left_out_unless_named() {
        let c = workspace(false);
        // Every page, each object with its workspace; forbidden Secrets left out.
        let types = [
            ar("", "configmaps", "ConfigMap"),
            ar("", "secrets", "Secret"),
        ];
        let found = contents(&c, "lc-a", Some("shop"), &types, false).await;
        assert_eq!(
            names(&found.unwrap_or_else(|e| panic!("{e}"))),
            ["ConfigMap cfg lc-a", "ConfigMap more lc-a"]
        );
        let refused = contents(&c, "lc-a", Some("shop"), &types, true).await;
        assert_eq!(
            refused.err().map(|e| e.to_string()),
            Some(forbidden("secrets", "shop"))
        );
    }

    #[tokio::test]
    async fn a_type_that_cannot_be_listed_refuses() {
        let c = workspace(false);
        // Forbidden (not Secrets): the type and the grant are named.
        let cms = [ar("", "configmaps", "ConfigMap")];
        let refused = contents(&c, "lc-a", Some("locked"), &cms, false).await;
        assert_eq!(
            refused.err().map(|e| e.to_string()),
            Some(forbidden("configmaps", "locked"))
        );
        // Any other failure: retry later.
        let deployments = [
            ar("", "configmaps", "ConfigMap"),
            ar("apps", "deployments", "Deployment"),
        ];
        let failed = contents(&c, "lc-a", Some("shop"), &deployments, false).await;
        crate::view::assert_retry_later(
            failed.map(|_| ()),
            "listing deployments.apps in namespace shop in workspace lc-a failed (",
        );
        // A 404 for a type discovery still serves proves nothing.
        let gone = contents(&c, "lc-a", Some("gone"), &cms, false).await;
        assert_eq!(
            gone.err().map(|e| e.to_string()).as_deref(),
            Some(
                "listing configmaps (v1) in workspace lc-a answered 404 although its \
                 discovery serves the type; retry later"
            )
        );
        // A 404 for a type discovery no longer serves: nothing of it.
        let widgets = [ar("gone.io", "widgets", "Widget")];
        let none = contents(&c, "lc-a", Some("shop"), &widgets, false).await;
        assert_eq!(none.map(|f| f.len()).ok(), Some(0));
    }
}
