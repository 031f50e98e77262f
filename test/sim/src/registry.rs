//! Resource type registry: built-in kinds (taken from a real kube-apiserver's
//! aggregated discovery), CRD-defined kinds and kcp-bound kinds, plus the
//! discovery documents generated from them.

use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

#[derive(Clone, Debug)]
pub struct SubInfo {
    pub name: String,
    pub group: String,
    pub version: String,
    pub kind: String,
    pub verbs: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct ResourceInfo {
    pub group: String,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    pub resource: String,
    pub kind: String,
    pub list_kind: String,
    pub singular: String,
    pub namespaced: bool,
    pub verbs: Vec<String>,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub subresources: Vec<SubInfo>,
    /// Built-in (typed) kinds: list items carry no kind/apiVersion, strategic merge patch allowed.
    pub builtin: bool,
    pub generation: bool,
    /// Resource kinds that have no storage (reviews).
    pub virtual_only: bool,
    /// CRD printer columns (name, jsonPath, type).
    pub printer_columns: Vec<(String, String, String)>,
    /// Structural schemas of custom resources per version.
    pub schemas: Vec<(String, Value)>,
    /// CRD `selectableFields` (field selectors), e.g. `spec.color`.
    pub selectable_fields: Vec<String>,
    /// A CRD's scale subresource: `specReplicasPath` and `statusReplicasPath`
    /// (`.spec.replicas`, `.status.replicas` for the built-in workloads).
    pub scale_paths: Option<(String, String)>,
}

impl ResourceInfo {
    pub fn gr(&self) -> Gr {
        Gr {
            group: self.group.clone(),
            resource: self.resource.clone(),
        }
    }
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }
    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s.name == "status")
    }
    /// `configmaps` or `deployments.apps`, as kube-apiserver qualifies resources in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gr {
    pub group: String,
    pub resource: String,
}

const GENERATION_KINDS: &[&str] = &[
    "deployments",
    "statefulsets",
    "daemonsets",
    "replicasets",
    "jobs",
    "cronjobs",
    "pods",
    "customresourcedefinitions",
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "networkpolicies",
    "ingresses",
    "poddisruptionbudgets",
    "horizontalpodautoscalers",
    "flowschemas",
    "prioritylevelconfigurations",
    "replicationcontrollers",
    "workspaces",
    "apiexports",
    "apibindings",
    "apiexportendpointslices",
    "apiresourceschemas",
    "logicalclusters",
];

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn parse_aggregated(doc: &str) -> Vec<ResourceInfo> {
    let v: Value = serde_json::from_str(doc).unwrap_or(Value::Null);
    let mut out: Vec<ResourceInfo> = Vec::new();
    for item in v["items"].as_array().into_iter().flatten() {
        let group = item["metadata"]["name"].as_str().unwrap_or("").to_string();
        for ver in item["versions"].as_array().into_iter().flatten() {
            let version = ver["version"].as_str().unwrap_or("").to_string();
            for r in ver["resources"].as_array().into_iter().flatten() {
                let resource = r["resource"].as_str().unwrap_or("").to_string();
                if let Some(existing) = out
                    .iter_mut()
                    .find(|i| i.group == group && i.resource == resource)
                {
                    existing.versions.push(version.clone());
                    continue;
                }
                let kind = r["responseKind"]["kind"].as_str().unwrap_or("").to_string();
                let verbs = strs(&r["verbs"]);
                let virtual_only = !verbs.iter().any(|v| v == "get");
                let subresources = r["subresources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| SubInfo {
                        name: s["subresource"].as_str().unwrap_or("").to_string(),
                        group: s["responseKind"]["group"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                        version: s["responseKind"]["version"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                        kind: s["responseKind"]["kind"].as_str().unwrap_or("").to_string(),
                        verbs: strs(&s["verbs"]),
                    })
                    .collect();
                out.push(ResourceInfo {
                    group: group.clone(),
                    versions: vec![version.clone()],
                    list_kind: format!("{kind}List"),
                    kind,
                    singular: r["singularResource"].as_str().unwrap_or("").to_string(),
                    namespaced: r["scope"].as_str() == Some("Namespaced"),
                    verbs,
                    short_names: strs(&r["shortNames"]),
                    categories: strs(&r["categories"]),
                    subresources,
                    builtin: true,
                    generation: GENERATION_KINDS.contains(&resource.as_str()),
                    virtual_only,
                    printer_columns: vec![],
                    schemas: vec![],
                    selectable_fields: vec![],
                    scale_paths: None,
                    resource,
                });
            }
        }
    }
    out
}

fn all_verbs() -> Vec<String> {
    [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn status_sub(group: &str, version: &str, kind: &str) -> SubInfo {
    SubInfo {
        name: "status".into(),
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        verbs: vec!["get".into(), "patch".into(), "update".into()],
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn kcp_info(
    group: &str,
    versions: &[&str],
    resource: &str,
    kind: &str,
    singular: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        versions: versions.iter().map(|s| s.to_string()).collect(),
        resource: resource.into(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        singular: singular.into(),
        namespaced,
        verbs: all_verbs(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: vec!["kcp".into()],
        subresources: if status {
            vec![status_sub("", "", kind)]
        } else {
            vec![]
        },
        builtin: false,
        generation: true,
        virtual_only: false,
        printer_columns: vec![],
        schemas: vec![],
        selectable_fields: vec![],
        scale_paths: None,
    }
}

/// Built-in kinds served in kcp logical clusters (kcp serves a reduced kube API).
const KCP_BUILTIN_GROUPS: &[&str] = &[
    "rbac.authorization.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
    "authorization.k8s.io",
    "authentication.k8s.io",
    "events.k8s.io",
];
const KCP_CORE: &[&str] = &[
    "namespaces",
    "configmaps",
    "secrets",
    "serviceaccounts",
    "events",
    "limitranges",
    "resourcequotas",
];

pub struct Registry {
    pub kube: Vec<Arc<ResourceInfo>>,
    pub kcp: Vec<Arc<ResourceInfo>>,
    /// Per logical cluster: CRD-defined and APIBinding-provided kinds.
    pub dynamic: RwLock<HashMap<String, Vec<Arc<ResourceInfo>>>>,
}

impl Registry {
    pub fn new() -> Self {
        let mut kube = parse_aggregated(include_str!("data/api-aggregated.json"));
        kube.extend(parse_aggregated(include_str!("data/apis-aggregated.json")));
        let mut kcp: Vec<ResourceInfo> = kube
            .iter()
            .filter(|i| {
                (i.group.is_empty() && KCP_CORE.contains(&i.resource.as_str()))
                    || KCP_BUILTIN_GROUPS.contains(&i.group.as_str())
            })
            .cloned()
            .collect();
        let t = "tenancy.kcp.io";
        let a = "apis.kcp.io";
        kcp.push(kcp_info(
            t,
            &["v1alpha1"],
            "workspaces",
            "Workspace",
            "workspace",
            false,
            &["ws"],
            true,
        ));
        kcp.push(kcp_info(
            t,
            &["v1alpha1"],
            "workspacetypes",
            "WorkspaceType",
            "workspacetype",
            false,
            &[],
            true,
        ));
        kcp.push(kcp_info(
            "core.kcp.io",
            &["v1alpha1"],
            "logicalclusters",
            "LogicalCluster",
            "logicalcluster",
            false,
            &[],
            true,
        ));
        kcp.push(kcp_info(
            "core.kcp.io",
            &["v1alpha1"],
            "shards",
            "Shard",
            "shard",
            false,
            &[],
            true,
        ));
        kcp.push(kcp_info(
            a,
            &["v1alpha2", "v1alpha1"],
            "apiexports",
            "APIExport",
            "apiexport",
            false,
            &[],
            true,
        ));
        kcp.push(kcp_info(
            a,
            &["v1alpha2", "v1alpha1"],
            "apibindings",
            "APIBinding",
            "apibinding",
            false,
            &[],
            true,
        ));
        kcp.push(kcp_info(
            a,
            &["v1alpha1"],
            "apiresourceschemas",
            "APIResourceSchema",
            "apiresourceschema",
            false,
            &[],
            false,
        ));
        kcp.push(kcp_info(
            a,
            &["v1alpha1"],
            "apiexportendpointslices",
            "APIExportEndpointSlice",
            "apiexportendpointslice",
            false,
            &[],
            true,
        ));
        Registry {
            kube: kube.into_iter().map(Arc::new).collect(),
            kcp: kcp.into_iter().map(Arc::new).collect(),
            dynamic: RwLock::new(HashMap::new()),
        }
    }

    /// All kinds served in `cluster` ("" = the plain Kubernetes cluster).
    pub fn resources(&self, cluster: &str) -> Vec<Arc<ResourceInfo>> {
        let base = if cluster.is_empty() {
            &self.kube
        } else {
            &self.kcp
        };
        let mut out = base.to_vec();
        if let Ok(d) = self.dynamic.read()
            && let Some(extra) = d.get(cluster)
        {
            add_missing(&mut out, extra);
        }
        if cluster != "root" {
            // kcp serves Shards in the root workspace only.
            out.retain(|i| !(i.group == "core.kcp.io" && i.resource == "shards"));
        }
        out
    }

    /// Kinds served in any kcp logical cluster (for wildcard requests).
    pub fn resources_any_kcp(&self) -> Vec<Arc<ResourceInfo>> {
        self.with_dynamic(&self.kcp, |c| !c.is_empty())
    }

    /// `base` and the dynamic kinds (CRDs, bound APIs) of the clusters `clusters`
    /// accepts that `base` does not have yet.
    fn with_dynamic(
        &self,
        base: &[Arc<ResourceInfo>],
        clusters: impl Fn(&str) -> bool,
    ) -> Vec<Arc<ResourceInfo>> {
        let mut out = base.to_vec();
        if let Ok(d) = self.dynamic.read() {
            for (_, extra) in d.iter().filter(|(c, _)| clusters(c)) {
                add_missing(&mut out, extra);
            }
        }
        out
    }

    pub fn set_dynamic(&self, cluster: &str, infos: Vec<Arc<ResourceInfo>>) {
        if let Ok(mut d) = self.dynamic.write() {
            d.insert(cluster.to_string(), infos);
        }
    }
}

pub fn find(
    list: &[Arc<ResourceInfo>],
    group: &str,
    version: &str,
    resource: &str,
) -> Option<Arc<ResourceInfo>> {
    list.iter()
        .find(|i| {
            i.group == group && i.resource == resource && i.versions.iter().any(|v| v == version)
        })
        .cloned()
}

/// Builds a ResourceInfo from a CRD object (apiextensions.k8s.io/v1).
pub fn info_from_crd(crd: &Value) -> Option<ResourceInfo> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str()?.to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str()?.to_string();
    let kind = names["kind"].as_str()?.to_string();
    let mut versions = Vec::new();
    let mut status = false;
    let mut scale = None;
    let mut printer_columns = vec![];
    let mut schemas = vec![];
    let mut selectable_fields = vec![];
    let mut served: Vec<&Value> = spec["versions"]
        .as_array()?
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .collect();
    // kube-apiserver orders versions by Kubernetes version priority; keep storage version first.
    served.sort_by_key(|v| !v["storage"].as_bool().unwrap_or(false));
    for v in served {
        let name = v["name"].as_str()?.to_string();
        if versions.is_empty() {
            for f in v["selectableFields"].as_array().into_iter().flatten() {
                if let Some(p) = f["jsonPath"].as_str() {
                    selectable_fields.push(p.trim_start_matches('.').to_string());
                }
            }
            status = v["subresources"]["status"].is_object();
            if v["subresources"]["scale"].is_object() {
                let path = |k: &str| {
                    v["subresources"]["scale"][k]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                };
                scale = Some((path("specReplicasPath"), path("statusReplicasPath")));
            }
            for c in v["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
            {
                printer_columns.push((
                    c["name"].as_str().unwrap_or("").to_string(),
                    c["jsonPath"].as_str().unwrap_or("").to_string(),
                    c["type"].as_str().unwrap_or("string").to_string(),
                ));
            }
        }
        let schema = if v["schema"]["openAPIV3Schema"].is_object() {
            v["schema"]["openAPIV3Schema"].clone()
        } else {
            v["schema"].clone()
        };
        if schema.is_object() {
            schemas.push((name.clone(), schema));
        }
        versions.push(name);
    }
    if versions.is_empty() {
        return None;
    }
    let mut subresources = vec![];
    if status {
        subresources.push(status_sub("", "", &kind));
    }
    if scale.is_some() {
        subresources.push(SubInfo {
            name: "scale".into(),
            group: "autoscaling".into(),
            version: "v1".into(),
            kind: "Scale".into(),
            verbs: vec!["get".into(), "patch".into(), "update".into()],
        });
    }
    Some(ResourceInfo {
        group,
        versions,
        resource: plural,
        list_kind: names["listKind"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{kind}List")),
        singular: names["singular"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase()),
        kind,
        namespaced: spec["scope"].as_str() != Some("Cluster"),
        verbs: all_verbs(),
        short_names: strs(&names["shortNames"]),
        categories: strs(&names["categories"]),
        subresources,
        builtin: false,
        generation: true,
        virtual_only: false,
        printer_columns,
        schemas,
        selectable_fields,
        scale_paths: scale,
    })
}

// ---------------------------------------------------------------- discovery documents

pub fn legacy_api_versions(addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]
    })
}

fn groups_of(list: &[Arc<ResourceInfo>]) -> BTreeMap<String, Vec<String>> {
    // group -> versions in order of first appearance (preferred first)
    let mut order: Vec<String> = Vec::new();
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in list {
        if i.group.is_empty() {
            continue;
        }
        if !map.contains_key(&i.group) {
            order.push(i.group.clone());
        }
        let e = map.entry(i.group.clone()).or_default();
        for v in &i.versions {
            if !e.contains(v) {
                e.push(v.clone());
            }
        }
    }
    map
}

fn group_order(list: &[Arc<ResourceInfo>]) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    for i in list {
        if !i.group.is_empty() && !order.contains(&i.group) {
            order.push(i.group.clone());
        }
    }
    order
}

pub fn api_group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let pref = vs.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": vs, "preferredVersion": pref})
}

pub fn api_group_list(list: &[Arc<ResourceInfo>]) -> Value {
    let map = groups_of(list);
    let groups: Vec<Value> = group_order(list)
        .iter()
        .map(|g| api_group_json(g, map.get(g).map(|v| v.as_slice()).unwrap_or(&[])))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group_versions(list: &[Arc<ResourceInfo>], group: &str) -> Vec<String> {
    groups_of(list).remove(group).unwrap_or_default()
}

pub fn api_resource_list(list: &[Arc<ResourceInfo>], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    let mut any = false;
    for i in list {
        if i.group != group || !i.versions.iter().any(|v| v == version) {
            continue;
        }
        any = true;
        let mut r = json!({
            "name": i.resource,
            "singularName": i.singular,
            "namespaced": i.namespaced,
            "kind": i.kind,
            "verbs": i.verbs,
        });
        names(&mut r, i);
        resources.push(r);
        for s in &i.subresources {
            let mut r = json!({
                "name": format!("{}/{}", i.resource, s.name),
                "singularName": "",
                "namespaced": i.namespaced,
                "kind": s.kind,
                "verbs": s.verbs,
            });
            if !s.group.is_empty() {
                r["group"] = json!(s.group);
                r["version"] = json!(s.version);
            }
            resources.push(r);
        }
    }
    if !any {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut list = json!({"kind": "APIResourceList", "groupVersion": gv, "resources": resources});
    if !group.is_empty() {
        // kube-apiserver omits apiVersion on the legacy /api/v1 list only.
        list["apiVersion"] = json!("v1");
    }
    Some(list)
}

/// The short names and categories of a discovery entry, where there are any.
fn names(r: &mut Value, i: &ResourceInfo) {
    if !i.short_names.is_empty() {
        r["shortNames"] = json!(i.short_names);
    }
    if !i.categories.is_empty() {
        r["categories"] = json!(i.categories);
    }
}

fn aggregated_resource(i: &ResourceInfo) -> Value {
    let mut r = json!({
        "resource": i.resource,
        "responseKind": {"group": "", "version": "", "kind": i.kind},
        "scope": if i.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": i.singular,
        "verbs": i.verbs,
    });
    names(&mut r, i);
    if !i.subresources.is_empty() {
        r["subresources"] = Value::Array(
            i.subresources
                .iter()
                .map(|s| {
                    json!({
                        "subresource": s.name,
                        "responseKind": {"group": s.group, "version": s.version, "kind": s.kind},
                        "verbs": s.verbs,
                    })
                })
                .collect(),
        );
    }
    r
}

/// `apidiscovery.k8s.io/v2` APIGroupDiscoveryList for `/api` (core=true) or `/apis`.
pub fn aggregated(list: &[Arc<ResourceInfo>], core: bool, api_version: &str) -> Value {
    let mut items = Vec::new();
    if core {
        let resources: Vec<Value> = list
            .iter()
            .filter(|i| i.group.is_empty())
            .map(|i| aggregated_resource(i))
            .collect();
        items.push(json!({"metadata": {}, "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}]}));
    } else {
        let map = groups_of(list);
        for g in group_order(list) {
            let versions: Vec<Value> = map
                .get(&g)
                .into_iter()
                .flatten()
                .map(|v| {
                    let resources: Vec<Value> = list
                        .iter()
                        .filter(|i| i.group == g && i.versions.contains(v))
                        .map(|i| aggregated_resource(i))
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            items.push(json!({"metadata": {"name": g}, "versions": versions}));
        }
    }
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items})
}

// ---------------------------------------------------------------- OpenAPI v3 (minimal)

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the group-version index.
pub fn openapi_v3_root(list: &[Arc<ResourceInfo>]) -> Value {
    let mut paths = serde_json::Map::new();
    for i in list {
        for v in &i.versions {
            let p = gv_path(&i.group, v);
            let hash = format!("{:016X}", fxhash(&p));
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}),
            );
        }
    }
    json!({"paths": paths})
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// `/openapi/v3/<gv>`: PATCH operations per kind carrying the query parameters kubectl
/// probes for (fieldValidation, dryRun, fieldManager), so server-side validation is used.
pub fn openapi_v3_gv(list: &[Arc<ResourceInfo>], gvp: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    let mut any = false;
    for i in list {
        for v in &i.versions {
            if gv_path(&i.group, v) != gvp {
                continue;
            }
            any = true;
            let prefix = format!("/{gvp}");
            let path = if i.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", i.resource)
            } else {
                format!("{prefix}/{}/{{name}}", i.resource)
            };
            let params = json!([
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}
            ]);
            let gvk = json!({"group": i.group, "version": v, "kind": i.kind});
            paths.insert(
                path,
                json!({
                    "patch": {
                        "operationId": format!("patch{}", i.kind),
                        "parameters": params,
                        "responses": {"200": {"description": "OK"}},
                        "x-kubernetes-action": "patch",
                        "x-kubernetes-group-version-kind": gvk,
                    }
                }),
            );
        }
    }
    if !any {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.2"},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}

/// Adds to `out` the kinds of `extra` it does not have yet.
fn add_missing(out: &mut Vec<Arc<ResourceInfo>>, extra: &[Arc<ResourceInfo>]) {
    for e in extra {
        if !out
            .iter()
            .any(|o| o.group == e.group && o.resource == e.resource)
        {
            out.push(e.clone());
        }
    }
}
