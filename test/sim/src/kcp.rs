//! kcp model: logical clusters under `/clusters/<name>`, Workspaces, APIExports,
//! APIBindings, APIExportEndpointSlices and the APIExport virtual workspace.

use crate::errors::{ApiError, ApiResult};
use crate::now_rfc3339;
use crate::registry::{self, Gr, ResourceInfo};
use crate::server::{ClusterSel, Listener, State, UserInfo, VwCtx};
use crate::store::Key;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

pub const ROOT: &str = "root";

fn gr(group: &str, resource: &str) -> Gr {
    Gr {
        group: group.into(),
        resource: resource.into(),
    }
}

/// kcp's kinds, as (group, resource) for [`kind`].
pub(crate) const WORKSPACES: (&str, &str) = ("tenancy.kcp.io", "workspaces");
pub(crate) const LOGICAL_CLUSTERS: (&str, &str) = ("core.kcp.io", "logicalclusters");
const EXPORTS: (&str, &str) = ("apis.kcp.io", "apiexports");
const BINDINGS: (&str, &str) = ("apis.kcp.io", "apibindings");
const SCHEMAS: (&str, &str) = ("apis.kcp.io", "apiresourceschemas");
const SLICES: (&str, &str) = ("apis.kcp.io", "apiexportendpointslices");
const SHARDS: (&str, &str) = ("core.kcp.io", "shards");

pub(crate) fn kind((group, resource): (&str, &str)) -> Gr {
    gr(group, resource)
}

/// The annotation kcp records a Workspace's shard in.
pub(crate) const SHARD_ANNOTATION: &str = "internal.tenancy.kcp.io/shard";
/// An APIExport with this annotation gets no endpoint slice from kcp.
const SKIP_SLICE_ANNOTATION: &str = "apiexports.apis.kcp.io/skip-endpointslice";

pub(crate) fn ckey(cluster: &str, name: &str) -> Key {
    Key {
        cluster: cluster.to_string(),
        namespace: String::new(),
        name: name.to_string(),
    }
}

pub(crate) fn create_logical_cluster(
    state: &State,
    name: &str,
    path: &str,
    shard: &str,
    phase: &str,
) {
    if let Ok(mut m) = state.lc_shards.write() {
        m.insert(name.to_string(), shard.to_string());
    }
    let now = now_rfc3339();
    let lc = json!({
        "apiVersion": "core.kcp.io/v1alpha1", "kind": "LogicalCluster",
        "metadata": {"name": "cluster", "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now,
                     "generation": 1, "finalizers": [crate::kcp_deletion::LOGICAL_CLUSTER_FINALIZER],
                     "annotations": {"kcp.io/cluster": name, "kcp.io/path": path}},
        "spec": {"initializers": if phase == "Ready" { json!([]) } else { json!(crate::kcp_workspace::INITIALIZERS) }},
        "status": {"phase": phase, "URL": format!("{}/clusters/{}", state.url, path)},
    });
    let _ = state
        .store
        .create(&kind(LOGICAL_CLUSTERS), ckey(name, "cluster"), lc);
    let ns = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "default", "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now,
                     "labels": {"kubernetes.io/metadata.name": "default"},
                     "annotations": {"kcp.io/cluster": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    });
    let _ = state
        .store
        .create(&gr("", "namespaces"), ckey(name, "default"), ns);
}

/// Removes a logical cluster with everything in it (nested workspaces included).
pub(crate) fn delete_logical_cluster(state: &State, lc: &str) {
    for (k, w) in state.store.all_objects(&kind(WORKSPACES)) {
        if k.cluster == lc
            && let Some(child) = w["spec"]["cluster"].as_str()
        {
            delete_logical_cluster(state, child);
        }
    }
    for gr in state.store.all_grs() {
        for (k, _) in state.store.all_objects(&gr) {
            if k.cluster == lc {
                let _ = state.store.delete(&gr, &k, None);
            }
        }
    }
    if let Ok(mut d) = state.registry.dynamic.write() {
        d.remove(lc);
    }
    if let Ok(mut m) = state.lc_shards.write() {
        m.remove(lc);
    }
}

/// The root logical cluster (on shard `root`) and one `Shard` object per shard in it.
pub fn bootstrap(state: &State) {
    create_logical_cluster(state, ROOT, ROOT, ROOT, "Ready");
    crate::authz::bootstrap_root(state, ROOT);
    for sh in &state.shards {
        let shard = json!({
            "apiVersion": "core.kcp.io/v1alpha1", "kind": "Shard",
            "metadata": {"name": sh.name, "uid": uuid::Uuid::new_v4().to_string(),
                         "creationTimestamp": now_rfc3339(), "generation": 1,
                         "labels": {"name": sh.name},
                         "annotations": {"kcp.io/cluster": ROOT}},
            "spec": {"baseURL": sh.url, "externalURL": state.url, "virtualWorkspaceURL": sh.url},
        });
        let _ = state
            .store
            .create(&kind(SHARDS), ckey(ROOT, &sh.name), shard);
    }
}

/// The shard a new Workspace lands on: among the shards whose `Shard` labels its
/// `spec.location.selector` matches (all without a selector), in shard order, the
/// next in a round-robin over every placement so far. None: no shard matches.
pub(crate) fn place(state: &State, ws: &Value) -> Option<String> {
    let selector = &ws["spec"]["location"]["selector"];
    let selector = crate::selectors::Selector::from_label_selector(selector);
    let candidates: Vec<&str> = state
        .shards
        .iter()
        .filter(|sh| {
            let labels = state
                .store
                .get(&kind(SHARDS), &ckey(ROOT, &sh.name))
                .map(|o| o["metadata"]["labels"].clone())
                .unwrap_or_else(|| json!({"name": sh.name}));
            selector.matches_labels(&labels)
        })
        .map(|sh| sh.name.as_str())
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let n = state
        .placements
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Some(candidates[n % candidates.len()].to_string())
}

pub fn cluster_exists(state: &State, name: &str) -> bool {
    state
        .store
        .get(&kind(LOGICAL_CLUSTERS), &ckey(name, "cluster"))
        .is_some()
}

/// The workspace path (`root:org`) of a logical cluster.
pub fn path_of(state: &State, cluster: &str) -> Option<String> {
    state
        .store
        .get(&kind(LOGICAL_CLUSTERS), &ckey(cluster, "cluster"))
        .and_then(|o| {
            o["metadata"]["annotations"]["kcp.io/path"]
                .as_str()
                .map(str::to_string)
        })
}

/// Resolves `root:org:team` (or a logical cluster name) to a logical cluster name.
pub fn resolve_path(state: &State, path: &str) -> Option<String> {
    if !path.contains(':') {
        return cluster_exists(state, path).then(|| path.to_string());
    }
    let mut segs = path.split(':');
    let first = segs.next()?;
    let mut cur = if cluster_exists(state, first) {
        first.to_string()
    } else {
        return None;
    };
    for s in segs {
        let ws = state.store.get(&kind(WORKSPACES), &ckey(&cur, s))?;
        cur = ws["spec"]["cluster"].as_str()?.to_string();
    }
    Some(cur)
}

fn forbidden_path(user: &UserInfo, path: &str) -> ApiError {
    let mut e = ApiError::new(
        403,
        "Forbidden",
        format!(
            "forbidden: User \"{}\" cannot get path \"{}\"",
            user.name, path
        ),
    );
    e.details = Some(json!({}));
    e
}

/// The name of the `i`-th shard: `root`, then `shard-1`, `shard-2`, ...
pub fn shard_name(i: usize) -> String {
    if i == 0 {
        ROOT.to_string()
    } else {
        format!("shard-{i}")
    }
}

/// The shard a logical cluster lives on.
pub fn shard_of(state: &State, lc: &str) -> Option<String> {
    state.lc_shards.read().ok()?.get(lc).cloned()
}

fn on_shard(state: &State, lc: &str, shard: &str) -> bool {
    shard_of(state, lc).as_deref() == Some(shard)
}

/// What `parse_prefix` looks at in a request.
pub struct Request<'a> {
    pub which: Listener,
    pub user: &'a UserInfo,
    pub method: &'a http::Method,
    pub path: &'a str,
    pub query: &'a HashMap<String, String>,
}

/// Where a request goes: the logical cluster (or wildcard, or the plain cluster), the
/// virtual workspace, the shard reached directly, a wildcard identity and the path
/// below the prefix.
pub struct Prefix {
    pub cluster: ClusterSel,
    pub vw: Option<VwCtx>,
    pub shard: Option<String>,
    pub identity: Option<String>,
    pub rest: String,
}

/// The authorizer attributes of a request (as kube-apiserver's RequestInfo reads
/// `rest`, the path below `/clusters/<x>`): (verb, group, resource, subresource,
/// namespace, name), None for a non-resource request.
fn resource_attributes(req: &Request, rest: &str) -> Option<[String; 6]> {
    let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let (group, mut parts) = match segs.as_slice() {
        ["api", _v, parts @ ..] if !parts.is_empty() => ("", parts.to_vec()),
        ["apis", g, _v, parts @ ..] if !parts.is_empty() => (*g, parts.to_vec()),
        _ => return None,
    };
    let mut namespace = "";
    if parts[0] == "namespaces" && parts.len() > 1 {
        namespace = parts[1];
        if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
            parts = parts[2..].to_vec();
        }
    }
    let resource = parts[0];
    let name = parts.get(1).copied().unwrap_or("");
    let sub = parts.get(2).copied().unwrap_or("");
    let watch = req
        .query
        .get("watch")
        .is_some_and(|w| w == "true" || w == "1");
    let verb = match (req.method.as_str(), name.is_empty()) {
        ("GET", false) => "get",
        ("GET", true) if watch => "watch",
        ("GET", true) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", false) => "delete",
        ("DELETE", true) => "deletecollection",
        (m, _) => {
            return Some([
                m.to_lowercase(),
                group.into(),
                resource.into(),
                sub.into(),
                namespace.into(),
                name.into(),
            ]);
        }
    };
    Some([
        verb.into(),
        group.into(),
        resource.into(),
        sub.into(),
        namespace.into(),
        name.into(),
    ])
}

/// 403 as kcp answers a logical cluster the caller may not enter (the front-proxy for
/// an unknown cluster or `*`, a shard's workspace authorizer for a cluster it does not
/// hold): kube-apiserver's `Forbidden` writer with reason "workspace access not permitted".
fn workspace_forbidden(req: &Request, rest: &str) -> ApiError {
    const REASON: &str = "workspace access not permitted";
    let user = &req.user.name;
    let Some([verb, group, resource, sub, namespace, name]) = resource_attributes(req, rest) else {
        let verb = req.method.as_str().to_lowercase();
        let mut e = ApiError::new(
            403,
            "Forbidden",
            format!(
                "forbidden: User {user:?} cannot {verb} path {:?}: {REASON}",
                req.path
            ),
        );
        e.details = Some(json!({}));
        return e;
    };
    let full = if sub.is_empty() {
        resource.clone()
    } else {
        format!("{resource}/{sub}")
    };
    let scope = if namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {namespace:?}")
    };
    let err = format!(
        "User {user:?} cannot {verb} resource {full:?} in API group {group:?} {scope}: {REASON}"
    );
    let qualified = if group.is_empty() {
        resource.clone()
    } else {
        format!("{resource}.{group}")
    };
    let message = if name.is_empty() {
        format!("{qualified} is forbidden: {err}")
    } else {
        format!("{qualified} {name:?} is forbidden: {err}")
    };
    let mut details = json!({"kind": resource});
    if !name.is_empty() {
        details["name"] = json!(name);
    }
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    let mut e = ApiError::new(403, "Forbidden", message);
    e.details = Some(details);
    e
}

/// A logical-cluster name as kcp validates one (`*` aside): no path, no upper case.
fn is_lc_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Splits `/clusters/<x>/...` and `/services/apiexport/<lc>/<export>/clusters/<x>/...`
/// as the listener the request came in on serves them:
/// - the front-proxy resolves `<x>` (a logical-cluster name or a path whose first
///   segment is one) and refuses unknown clusters and `*` with 403; it serves no
///   virtual workspace (`/services/...` is 404);
/// - a shard serves only its own logical clusters (others 403), the wildcard for
///   `system:masters` (APIExport types named `resource:identityHash`), and the
///   APIExport virtual workspaces for its logical clusters.
///
/// Plain paths are the Kubernetes cluster on every listener.
pub fn parse_prefix(state: &State, req: &Request) -> ApiResult<Prefix> {
    // Servers decode the path before routing: `%2A` is the wildcard `*`.
    let segs: Vec<&str> = req
        .path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s.eq_ignore_ascii_case("%2A") {
                "*"
            } else {
                s
            }
        })
        .collect();
    let shard = match req.which {
        Listener::FrontProxy => None,
        Listener::Shard(i) => state.shards.get(i).map(|s| s.name.clone()),
    };
    let prefix = |cluster, vw, rest| Prefix {
        cluster,
        vw,
        shard: shard.clone(),
        identity: None,
        rest,
    };
    match segs.as_slice() {
        ["clusters", name, rest @ ..] => {
            let rest = format!("/{}", rest.join("/"));
            let Some(sh) = &shard else {
                // The front-proxy.
                return match resolve_path(state, name) {
                    Some(lc) if *name != "*" => Ok(prefix(ClusterSel::Lc(lc), None, rest)),
                    _ => Err(workspace_forbidden(req, &rest)),
                };
            };
            if *name == "*" {
                if !req.user.is_master() {
                    return Err(forbidden_path(req.user, req.path));
                }
                let (rest, identity) = wildcard_identity(state, &rest)?;
                let mut p = prefix(ClusterSel::Wildcard, None, rest);
                p.identity = identity;
                return Ok(p);
            }
            match resolve_path(state, name) {
                Some(lc) if on_shard(state, &lc, sh) => Ok(prefix(ClusterSel::Lc(lc), None, rest)),
                _ => Err(workspace_forbidden(req, &rest)),
            }
        }
        [
            "services",
            "apiexport",
            lc,
            export,
            "clusters",
            name,
            rest @ ..,
        ] if shard.is_some() => {
            let rest = format!("/{}", rest.join("/"));
            if state.store.get(&kind(EXPORTS), &ckey(lc, export)).is_none()
                || (*name != "*" && !is_lc_name(name))
            {
                return Err(ApiError::path_not_found());
            }
            let vw = VwCtx {
                export_cluster: lc.to_string(),
                export_name: export.to_string(),
                shard: shard.clone().unwrap_or_default(),
            };
            let sel = if *name == "*" {
                ClusterSel::Wildcard
            } else {
                ClusterSel::Lc(name.to_string())
            };
            Ok(prefix(sel, Some(vw), rest))
        }
        ["services", ..] => Err(ApiError::path_not_found()),
        _ => Ok(prefix(ClusterSel::Plain, None, req.path.to_string())),
    }
}

/// A wildcard request's resource as a shard names it: an APIExport's type must be
/// `resource:identityHash` (the identity of an export that provides it), built-in
/// and kcp system types must not carry one; anything else is 404. Returns the path
/// with the plain resource and the identity.
fn wildcard_identity(state: &State, rest: &str) -> ApiResult<(String, Option<String>)> {
    let mut segs: Vec<String> = rest
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let (group, at) = match segs
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", _, "namespaces", _, _, ..] => (String::new(), 4),
        ["api", _, _, ..] => (String::new(), 2),
        ["apis", g, _, "namespaces", _, _, ..] => (g.to_string(), 5),
        ["apis", g, _, _, ..] => (g.to_string(), 3),
        _ => return Ok((rest.to_string(), None)),
    };
    let (resource, identity) = match segs[at].split_once(':') {
        Some((r, h)) => (r.to_string(), Some(h.to_string())),
        None => (segs[at].clone(), None),
    };
    let system = state
        .registry
        .kcp
        .iter()
        .any(|i| i.group == group && i.resource == resource);
    let exports = state.store.all_objects(&kind(EXPORTS));
    let from_export = |hash: Option<&str>| {
        exports.iter().any(|(k, e)| {
            hash.is_none_or(|h| e["status"]["identityHash"].as_str() == Some(h))
                && export_infos(state, &k.cluster, e)
                    .iter()
                    .any(|i| i.group == group && i.resource == resource)
        })
    };
    let ok = match &identity {
        None => system || !from_export(None),
        Some(h) => !system && from_export(Some(h)),
    };
    if !ok {
        return Err(ApiError::path_not_found());
    }
    segs[at] = resource;
    Ok((format!("/{}", segs.join("/")), identity))
}

/// Whether a wildcard request at a shard sees objects of `cluster`: it must be on that
/// shard and, for `resource:identityHash`, bind the type with that identity.
pub fn wildcard_cluster_allowed(
    state: &State,
    shard: Option<&str>,
    identity: Option<&str>,
    info: &ResourceInfo,
    cluster: &str,
) -> bool {
    shard.is_none_or(|s| on_shard(state, cluster, s))
        && identity.is_none_or(|h| {
            bound_identity(state, cluster, &info.group, &info.resource).as_deref() == Some(h)
        })
}

/// The identity hash of the APIExport a cluster binds `group`/`resource` from
/// (its APIBindings' `status.boundResources`), None for a type it does not bind.
pub fn bound_identity(state: &State, cluster: &str, group: &str, resource: &str) -> Option<String> {
    bound_source(state, cluster, group, resource).map(|(_, h)| h)
}

/// (export logical cluster, identity hash) a cluster binds `group`/`resource` from.
fn bound_source(
    state: &State,
    cluster: &str,
    group: &str,
    resource: &str,
) -> Option<(String, String)> {
    bindings_in(state, cluster).iter().find_map(|b| {
        let bound = b["status"]["boundResources"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["group"].as_str().unwrap_or("") == group && r["resource"] == resource)?;
        Some((
            b["status"]["apiExportClusterName"].as_str()?.to_string(),
            bound["schema"]["identityHash"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        ))
    })
}

/// The logical cluster whose ValidatingWebhookConfigurations apply to a request in
/// `cluster` on `info`: the export's workspace when the cluster gets the resource
/// through an APIBinding (its `status.boundResources`), else the cluster itself.
pub fn webhook_source(state: &State, cluster: &str, info: &ResourceInfo) -> String {
    // Every workspace, root too, binds root's `tenancy.kcp.io` export, so kcp admits
    // Workspaces through root's configurations (docs/kcp-facts.md 27).
    if (info.group.as_str(), info.resource.as_str()) == WORKSPACES {
        return ROOT.to_string();
    }
    bound_source(state, cluster, &info.group, &info.resource)
        .map(|(ec, _)| ec)
        .unwrap_or_else(|| cluster.to_string())
}

/// Sets an annotation where `metadata.annotations` is an object or absent.
pub(crate) fn set_annotation(obj: &mut Value, key: &str, value: Value) {
    if !obj["metadata"].is_object() {
        return;
    }
    let annotations = &mut obj["metadata"]["annotations"];
    if annotations.is_null() {
        *annotations = json!({});
    }
    if let Some(m) = annotations.as_object_mut() {
        m.insert(key.to_string(), value);
    }
}

pub(crate) fn random_lc_name() -> String {
    use rand::Rng;
    const CH: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut r = rand::rng();
    (0..16)
        .map(|_| CH[r.random_range(0..CH.len())] as char)
        .collect()
}

pub fn prepare_create(
    state: &State,
    info: &ResourceInfo,
    cluster: &str,
    obj: &mut Value,
) -> ApiResult<()> {
    if cluster.is_empty() {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    if !obj["spec"].is_object() && !obj["spec"].is_null() {
        return Ok(());
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("apis.kcp.io", "apiresourceschemas") => {
            let causes = schema_causes(&name, obj);
            if !causes.is_empty() {
                return Err(ApiError::invalid(info, &name, causes));
            }
        }
        ("tenancy.kcp.io", "workspaces") => {
            // The parent's default child type: root's is `organization` (the default
            // `workspace-types` battery), an organization's and universal's
            // `universal` (`config/root/workspacetype-*.yaml`, docs/kcp-facts.md 35).
            if obj["spec"]["type"].is_null() {
                let name = if cluster == ROOT {
                    "organization"
                } else {
                    "universal"
                };
                obj["spec"]["type"] = json!({"name": name, "path": "root"});
            }
            // Scheduled, initialized and made Ready asynchronously
            // (`crate::kcp_workspace`, docs/kcp-facts.md 31).
            if let Some(spec) = obj["spec"].as_object_mut() {
                spec.remove("cluster");
                spec.remove("URL");
            }
            obj["status"] = crate::kcp_workspace::scheduling_status();
        }
        ("apis.kcp.io", "apiexports") => {
            canonical_path(state, cluster, obj);
            use rand::Rng;
            let mut r = rand::rng();
            let hash: String = (0..64)
                .map(|_| format!("{:x}", r.random_range(0..16u8)))
                .collect();
            obj["status"] = json!({"identityHash": hash});
        }
        ("apis.kcp.io", "apiexportendpointslices") => {
            let bound = slice_bound(state, cluster, obj);
            let endpoints = slice_endpoints(state, &bound, cluster, obj);
            obj["status"] = json!({"endpoints": endpoints});
        }
        ("apis.kcp.io", "apibindings") => {
            canonical_path(state, cluster, obj);
            crate::kcp_deletion::add_finalizer(info, obj);
            obj["status"] = json!({"phase": "Binding"});
        }
        _ => {}
    }
    Ok(())
}

/// kcp's path annotation admission for APIBindings: `kcp.io/path` is set to the
/// workspace's canonical path, whatever the request carried (kcp
/// `pkg/admission/pathannotation` `Admit`, docs/kcp-facts.md 27).
fn canonical_path(state: &State, cluster: &str, obj: &mut Value) {
    if let Some(path) = path_of(state, cluster) {
        set_annotation(obj, "kcp.io/path", json!(path));
    }
}

pub fn prepare_update(
    state: &State,
    info: &ResourceInfo,
    cluster: &str,
    old: &Value,
    new: &mut Value,
) -> ApiResult<()> {
    if info.group == "apis.kcp.io"
        && (info.resource == "apibindings" || info.resource == "apiexports")
    {
        canonical_path(state, cluster, new);
    }
    crate::kcp_deletion::add_finalizer(info, new);
    if info.group == "tenancy.kcp.io" && info.resource == "workspaces" {
        new["spec"]["cluster"] = old["spec"]["cluster"].clone();
        new["spec"]["URL"] = old["spec"]["URL"].clone();
        if let Some(shard) = old["metadata"]["annotations"].get(SHARD_ANNOTATION) {
            set_annotation(new, SHARD_ANNOTATION, shard.clone());
        }
    }
    Ok(())
}

/// What kcp's APIResourceSchema admission refuses on create: the name is
/// `<prefix>.<plural>.<group>` (prefix a DNS label starting with a letter); plural,
/// singular, kind and listKind are required; each version's `schema` is the OpenAPI v3
/// schema itself, structural (`type: object` at the root), never a CRD's
/// `{openAPIV3Schema: ...}` wrapper.
fn schema_causes(name: &str, obj: &Value) -> Vec<crate::errors::Cause> {
    use crate::errors::cause;
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    let mut causes = vec![];
    let suffix = if group.is_empty() {
        format!(".{plural}.core")
    } else {
        format!(".{plural}.{group}")
    };
    let prefix_ok = name.strip_suffix(&suffix).is_some_and(|p| {
        p.starts_with(|c: char| c.is_ascii_lowercase()) && crate::api::validate::is_dns1123_label(p)
    });
    if !prefix_ok {
        causes.push(cause(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: \"{name}\": must be prefix.{plural}.{group} with a prefix matching ^[a-z]([-a-z0-9]*[a-z0-9])?$"),
        ));
    }
    for field in ["plural", "singular", "kind", "listKind"] {
        if spec["names"][field].as_str().is_none_or(str::is_empty) {
            causes.push(cause(
                &format!("spec.names.{field}"),
                "FieldValueRequired",
                "Required value",
            ));
        }
    }
    for (i, v) in spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let schema = &v["schema"];
        if schema.get("openAPIV3Schema").is_some() {
            causes.push(cause(
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "FieldValueForbidden",
                "Forbidden: the schema is the OpenAPI v3 schema itself, not a CustomResourceDefinition's openAPIV3Schema wrapper",
            ));
        }
        if schema["type"].as_str().is_none_or(str::is_empty) {
            causes.push(cause(
                &format!("spec.versions[{i}].schema.type"),
                "FieldValueRequired",
                "Required value: must not be empty at the root",
            ));
        }
    }
    causes
}

/// Names of the APIResourceSchemas an APIExport publishes (v1alpha1 and v1alpha2 forms).
fn export_schema_names(export: &Value) -> Vec<String> {
    let mut out: Vec<String> = export["spec"]["latestResourceSchemas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect();
    for r in export["spec"]["resources"].as_array().into_iter().flatten() {
        if let Some(s) = r["schema"].as_str() {
            out.push(s.to_string());
        }
    }
    out
}

/// A decoded kind and the schema resourceVersion it was decoded at.
type Decoded = (String, Arc<ResourceInfo>);

/// Decoded APIResourceSchemas by (cluster, schema name).
#[derive(Default)]
pub struct SchemaInfos(std::sync::Mutex<HashMap<(String, String), Decoded>>);

impl SchemaInfos {
    /// The kind a stored schema describes, decoded once per resourceVersion.
    fn get(&self, cluster: &str, name: &str, schema: &Value) -> Option<Arc<ResourceInfo>> {
        let rv = schema["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let key = (cluster.to_string(), name.to_string());
        if let Ok(cache) = self.0.lock()
            && let Some((cached_rv, info)) = cache.get(&key)
            && cached_rv == rv
        {
            return Some(info.clone());
        }
        let mut i = registry::info_from_crd(&json!({"spec": schema["spec"].clone()}))?;
        i.categories.retain(|c| c != "kcp");
        let info = Arc::new(i);
        if let Ok(mut cache) = self.0.lock() {
            cache.insert(key, (rv.to_string(), info.clone()));
        }
        Some(info)
    }
}

/// Kinds an export provides (from its APIResourceSchemas).
fn export_infos(state: &State, export_cluster: &str, export: &Value) -> Vec<Arc<ResourceInfo>> {
    let mut out = vec![];
    for s in export_schema_names(export) {
        if let Some(schema) = state.store.get(&kind(SCHEMAS), &ckey(export_cluster, &s))
            && let Some(i) = state.schema_infos.get(export_cluster, &s, &schema)
        {
            out.push(i);
        }
    }
    out
}

/// A permission claim: group, resource and identity hash ("" for a built-in type).
type Claim = (String, String, String);

fn claim(c: &Value) -> Claim {
    (
        c["group"].as_str().unwrap_or("").to_string(),
        c["resource"].as_str().unwrap_or("").to_string(),
        c["identityHash"].as_str().unwrap_or("").to_string(),
    )
}

fn claims_of(v: &Value) -> Vec<Claim> {
    v["spec"]["permissionClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .map(claim)
        .collect()
}

fn accepted_claims(binding: &Value) -> Vec<Claim> {
    binding["spec"]["permissionClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["state"].as_str() == Some("Accepted"))
        .map(claim)
        .collect()
}

/// Whether an accepted claim covers `info` in `cluster`: same group/resource, and the
/// identity of the export the cluster binds it from ("" for a type not bound there).
/// Events of either API count as core Events, so only a claim on core `events`
/// covers them (kcp-facts 32).
fn claim_covers(state: &State, claims: &[Claim], info: &ResourceInfo, cluster: &str) -> bool {
    let (group, resource) = normalize_events(&info.group, &info.resource);
    claims.iter().any(|(g, r, h)| {
        g == group
            && r == resource
            && *h == bound_identity(state, cluster, g, r).unwrap_or_default()
    })
}

/// kcp's `NormalizeEventGroupResource` (`pkg/permissionclaim/permissionclaim_labeler.go`):
/// `events.k8s.io` `events` is core `events`.
pub fn normalize_events<'a>(group: &'a str, resource: &'a str) -> (&'a str, &'a str) {
    match (group, resource) {
        ("events.k8s.io", "events") => ("", "events"),
        other => other,
    }
}

/// The kind of `group`/`resource` the APIExport with identity `hash` provides.
fn info_by_identity(
    state: &State,
    hash: &str,
    group: &str,
    resource: &str,
) -> Option<Arc<ResourceInfo>> {
    state
        .store
        .all_objects(&kind(EXPORTS))
        .iter()
        .filter(|(_, e)| e["status"]["identityHash"].as_str() == Some(hash))
        .flat_map(|(k, e)| export_infos(state, &k.cluster, e))
        .find(|i| i.group == group && i.resource == resource)
}

/// (export cluster, export name) a binding references.
fn binding_export(state: &State, cluster: &str, binding: &Value) -> Option<(String, String)> {
    let e = &binding["spec"]["reference"]["export"];
    let name = e["name"].as_str()?.to_string();
    let path = e["path"].as_str().unwrap_or("");
    let ec = if path.is_empty() {
        cluster.to_string()
    } else {
        resolve_path(state, path)?
    };
    Some((ec, name))
}

fn bindings_in(state: &State, cluster: &str) -> Vec<Arc<Value>> {
    state.store.list(&kind(BINDINGS), Some(cluster), None).0
}

pub fn bound_infos(state: &State, cluster: &str) -> Vec<Arc<ResourceInfo>> {
    let mut out: Vec<Arc<ResourceInfo>> = vec![];
    for b in bindings_in(state, cluster) {
        let Some((ec, en)) = binding_export(state, cluster, &b) else {
            continue;
        };
        if let Some(export) = state.store.get(&kind(EXPORTS), &ckey(&ec, &en)) {
            out.extend(export_infos(state, &ec, &export));
        }
    }
    out
}

/// Kinds served in an APIExport virtual workspace: the exported kinds plus claimed ones.
pub fn vw_resources(
    state: &State,
    vw: &VwCtx,
    _sel: &ClusterSel,
    all: &[Arc<ResourceInfo>],
) -> Vec<Arc<ResourceInfo>> {
    let Some(export) = state
        .store
        .get(&kind(EXPORTS), &ckey(&vw.export_cluster, &vw.export_name))
    else {
        return vec![];
    };
    let mut out = export_infos(state, &vw.export_cluster, &export);
    let mut claimed = claims_of(&export);
    // A claim on Events (either API) serves both (kcp `claimedBuiltInGroupResources`,
    // `pkg/virtual/apiexport/controllers/apireconciler/`).
    for (g, r, h) in claimed.clone() {
        if r == "events" && h.is_empty() && (g.is_empty() || g == "events.k8s.io") {
            let other = if g.is_empty() { "events.k8s.io" } else { "" };
            claimed.push((other.to_string(), r, h));
        }
    }
    for (g, r, h) in claimed {
        if out.iter().any(|i| i.group == g && i.resource == r) {
            continue;
        }
        // Another export's type is named by its identity (group/resource is not unique).
        let found = if h.is_empty() {
            state
                .registry
                .kcp
                .iter()
                .chain(all.iter())
                .find(|i| i.group == g && i.resource == r)
                .cloned()
        } else {
            info_by_identity(state, &h, &g, &r)
        };
        out.extend(found);
    }
    // kcp-facts 16: APIBindings are always served (the fallback when not claimed).
    if !out
        .iter()
        .any(|i| (i.group.as_str(), i.resource.as_str()) == BINDINGS)
    {
        out.extend(
            state
                .registry
                .kcp
                .iter()
                .filter(|i| (i.group.as_str(), i.resource.as_str()) == BINDINGS)
                .cloned(),
        );
    }
    out
}

/// Whether the virtual workspace's export claims APIBindings.
fn claims_bindings(state: &State, vw: &VwCtx) -> bool {
    state
        .store
        .get(&kind(EXPORTS), &ckey(&vw.export_cluster, &vw.export_name))
        .is_some_and(|e| {
            claims_of(&e)
                .iter()
                .any(|(g, r, _)| (g.as_str(), r.as_str()) == BINDINGS)
        })
}

/// kcp-facts 16: the virtual workspace of an export that does not claim APIBindings
/// serves them anyway, read only, restricted to the bindings to this export
/// (`Some((export cluster, export name))`); `None` where `info` is not APIBindings
/// or the export claims them (then the claim decides, as for every claimed type).
pub fn bindings_fallback(
    state: &State,
    vw: &VwCtx,
    info: &ResourceInfo,
) -> Option<(String, String)> {
    ((info.group.as_str(), info.resource.as_str()) == BINDINGS && !claims_bindings(state, vw))
        .then(|| (vw.export_cluster.clone(), vw.export_name.clone()))
}

/// Whether APIBinding `b` binds the export `(cluster, name)` (kcp's label
/// `internal.apis.kcp.io/export`, set once it is bound).
pub fn binds_export(b: &Value, (cluster, name): &(String, String)) -> bool {
    b["status"]["apiExportClusterName"].as_str() == Some(cluster.as_str())
        && b["spec"]["reference"]["export"]["name"].as_str() == Some(name.as_str())
}

fn binding_for_export(state: &State, cluster: &str, vw: &VwCtx) -> Option<Arc<Value>> {
    bindings_in(state, cluster).into_iter().find(|b| {
        binding_export(state, cluster, b)
            .is_some_and(|(c, n)| c == vw.export_cluster && n == vw.export_name)
    })
}

fn is_exported(state: &State, vw: &VwCtx, info: &ResourceInfo) -> bool {
    state
        .store
        .get(&kind(EXPORTS), &ckey(&vw.export_cluster, &vw.export_name))
        .is_some_and(|e| {
            export_infos(state, &vw.export_cluster, &e)
                .iter()
                .any(|i| i.group == info.group && i.resource == info.resource)
        })
}

/// Whether objects of a kind in `cluster` are visible through the virtual workspace
/// (the shard's logical clusters that bind the export).
pub fn vw_cluster_allowed(state: &State, vw: &VwCtx, info: &ResourceInfo, cluster: &str) -> bool {
    if !on_shard(state, cluster, &vw.shard) {
        return false;
    }
    let Some(b) = binding_for_export(state, cluster, vw) else {
        return false;
    };
    is_exported(state, vw, info)
        || bindings_fallback(state, vw, info).is_some()
        || claim_covers(state, &accepted_claims(&b), info, cluster)
}

pub fn vw_authorize(
    state: &State,
    vw: &VwCtx,
    sel: &ClusterSel,
    info: &ResourceInfo,
) -> ApiResult<()> {
    let ClusterSel::Lc(c) = sel else {
        return Ok(());
    };
    // A logical cluster on another shard is one this virtual workspace has no binding of.
    let binding = binding_for_export(state, c, vw).filter(|_| on_shard(state, c, &vw.shard));
    let Some(b) = binding else {
        return Err(ApiError::forbidden(
            info,
            "",
            &format!("workspace {c} does not bind APIExport {}", vw.export_name),
        ));
    };
    if is_exported(state, vw, info) || bindings_fallback(state, vw, info).is_some() {
        return Ok(());
    }
    if claim_covers(state, &accepted_claims(&b), info, c) {
        return Ok(());
    }
    Err(ApiError::forbidden(
        info,
        "",
        &format!(
            "permission claim for {} not accepted in workspace {c}",
            info.qualified()
        ),
    ))
}

/// The shards holding at least one APIBinding, by the (export logical cluster,
/// export name) bound.
type BoundShards = HashMap<(String, String), Vec<String>>;

fn bound_shards(state: &State) -> BoundShards {
    bound_shards_of(state, None)
}

/// Whether `reference` (an APIBinding's or an endpoint slice's `export`, written
/// in workspace `at`) may name an export of logical cluster `ec` named `name`,
/// by strings alone: its name, and its path empty (its own workspace), the logical
/// cluster's name or its canonical path (`ec_path`). kcp's paths are canonical and
/// never renamed, so a reference that resolves to `ec` reads one of these.
fn may_name(reference: &Value, at: &str, ec: &str, ec_path: Option<&str>, name: &str) -> bool {
    if reference["name"].as_str() != Some(name) {
        return false;
    }
    match reference["path"].as_str().unwrap_or("") {
        "" => at == ec,
        p => p == ec || Some(p) == ec_path,
    }
}

/// What an APIBinding (`spec.reference.export`) or an endpoint slice
/// (`spec.export`) names, for the store's index: (its path, or its own logical
/// cluster when the path is empty; the export's name).
pub(crate) fn export_reference(key: &Key, obj: &Value) -> Option<(String, String)> {
    let export = named_export(obj);
    let name = export["name"].as_str()?.to_string();
    let target = match export["path"].as_str().unwrap_or("") {
        "" => key.cluster.clone(),
        p => p.to_string(),
    };
    Some((target, name))
}

/// The export an APIBinding (`spec.reference.export`) or an endpoint slice
/// (`spec.export`) names.
fn named_export(obj: &Value) -> &Value {
    match obj["spec"]["reference"].is_object() {
        true => &obj["spec"]["reference"]["export"],
        false => &obj["spec"]["export"],
    }
}

/// Indexes APIBindings and endpoint slices by the export they name, as kcp's
/// informers index them by export: what an export's change re-queues is found
/// without a scan of every binding and slice.
pub fn index(store: &crate::store::Store) {
    store.index_by_reference(&kind(BINDINGS), export_reference);
    store.index_by_reference(&kind(SLICES), export_reference);
}

/// The objects of `what` (bindings or slices) that name an export of logical
/// cluster `ec` (`name`, or any), by [`may_name`]: through the index, under the
/// logical cluster's name and its canonical path.
fn referencing_export(
    state: &State,
    what: (&str, &str),
    ec: &str,
    name: Option<&str>,
) -> Vec<(Key, Arc<Value>)> {
    let gr = kind(what);
    let path = path_of(state, ec);
    let mut out = state.store.referencing(&gr, ec, name);
    if let Some(p) = path.as_deref().filter(|p| *p != ec) {
        out.extend(state.store.referencing(&gr, p, name));
    }
    out.retain(|(k, o)| {
        let export = named_export(o);
        let n = name.or_else(|| export["name"].as_str()).unwrap_or("");
        may_name(export, &k.cluster, ec, path.as_deref(), n)
    });
    out
}

/// [`bound_shards`], for one export (`Some((export lc, name))`) or all: kcp's
/// indexes find the bindings of one export without visiting the others. For one
/// export the scan stops once every shard is found.
fn bound_shards_of(state: &State, only: Option<(&str, &str)>) -> BoundShards {
    let Some((ec, name)) = only else {
        let mut out: BoundShards = HashMap::new();
        for (k, b) in state.store.all_objects(&kind(BINDINGS)) {
            if let Some(export) = binding_export(state, &k.cluster, &b)
                && let Some(sh) = shard_of(state, &k.cluster)
            {
                out.entry(export).or_default().push(sh);
            }
        }
        return out;
    };
    let mut shards: Vec<String> = Vec::new();
    for (k, _) in referencing_export(state, BINDINGS, ec, Some(name)) {
        if let Some(sh) = shard_of(state, &k.cluster)
            && !shards.contains(&sh)
        {
            shards.push(sh);
        }
    }
    let mut out = BoundShards::new();
    if !shards.is_empty() {
        out.insert((ec.to_string(), name.to_string()), shards);
    }
    out
}

/// The export an endpoint slice in `cluster` names (its logical cluster, its name).
fn slice_export(state: &State, cluster: &str, slice: &Value) -> Option<(String, String)> {
    let export = &slice["spec"]["export"];
    let name = export["name"].as_str()?.to_string();
    let ec = match export["path"].as_str().unwrap_or("") {
        "" => cluster.to_string(),
        path => resolve_path(state, path)?,
    };
    Some((ec, name))
}

/// The shards bound to the export of one slice (see [`bound_shards_of`]).
fn slice_bound(state: &State, cluster: &str, slice: &Value) -> BoundShards {
    match slice_export(state, cluster, slice) {
        Some((ec, name)) => bound_shards_of(state, Some((&ec, &name))),
        None => BoundShards::new(),
    }
}

/// `status.endpoints` of an endpoint slice in `cluster`: one URL per shard (in shard
/// order) holding at least one APIBinding to the slice's export,
/// `<shard virtualWorkspaceURL>/services/apiexport/<export lc>/<export name>`.
fn slice_endpoints(state: &State, bound: &BoundShards, cluster: &str, slice: &Value) -> Vec<Value> {
    let export = &slice["spec"]["export"];
    let name = export["name"].as_str().unwrap_or("");
    let path = export["path"].as_str().unwrap_or("");
    let ec = if path.is_empty() {
        Some(cluster.to_string())
    } else {
        resolve_path(state, path)
    };
    let Some(ec) = ec.filter(|ec| state.store.get(&kind(EXPORTS), &ckey(ec, name)).is_some())
    else {
        return vec![];
    };
    let Some(shards) = bound.get(&(ec.clone(), name.to_string())) else {
        return vec![];
    };
    state
        .shards
        .iter()
        .filter(|sh| shards.contains(&sh.name))
        .map(|sh| json!({"url": format!("{}/services/apiexport/{ec}/{name}", sh.url)}))
        .collect()
}

/// Recomputes every endpoint slice's URLs (a status update where they changed, so
/// watchers see MODIFIED).
fn refresh_slices(state: &State) {
    let bound = bound_shards(state);
    for (k, slice) in state.store.all_objects(&kind(SLICES)) {
        write_slice_endpoints(state, &bound, &k, &slice);
    }
}

/// [`refresh_slices`] for the slices of one export (logical cluster `ec`, `name`):
/// what a change of its bindings moves (kcp's slice controller re-queues by export).
fn refresh_slices_of(state: &State, ec: &str, name: &str) {
    let slices = referencing_export(state, SLICES, ec, Some(name));
    if slices.is_empty() {
        return;
    }
    let bound = bound_shards_of(state, Some((ec, name)));
    for (k, slice) in slices {
        write_slice_endpoints(state, &bound, &k, &slice);
    }
}

fn write_slice_endpoints(state: &State, bound: &BoundShards, k: &Key, slice: &Arc<Value>) {
    let endpoints = json!(slice_endpoints(state, bound, &k.cluster, slice));
    if slice["status"]["endpoints"] == endpoints {
        return;
    }
    let mut n = (**slice).clone();
    if !n["status"].is_object() {
        n["status"] = json!({});
    }
    n["status"]["endpoints"] = endpoints;
    let _ = state
        .store
        .update(&kind(SLICES), k, n, crate::store::rv_of(slice));
}

/// As kcp's APIExport controller: an endpoint slice named like a new APIExport in its
/// workspace, unless the export opts out (or a slice of that name exists already).
fn create_export_slice(state: &State, cluster: &str, export: &Value) {
    let name = export["metadata"]["name"].as_str().unwrap_or("");
    if name.is_empty()
        || export["metadata"]["annotations"]
            .get(SKIP_SLICE_ANNOTATION)
            .is_some()
    {
        return;
    }
    // kcp's APIExport reconciler: the slice names the export by its `kcp.io/path`
    // and is owned by it (`pkg/reconciler/apis/apiexport/apiexport_reconcile.go`,
    // docs/kcp-facts.md 35).
    let path = export["metadata"]["annotations"]["kcp.io/path"]
        .as_str()
        .unwrap_or(cluster);
    let mut slice = json!({
        "apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExportEndpointSlice",
        "metadata": {"name": name, "uid": uuid::Uuid::new_v4().to_string(),
                     "creationTimestamp": now_rfc3339(), "generation": 1,
                     "annotations": {"kcp.io/cluster": cluster},
                     "ownerReferences": [{"apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExport",
                                          "name": name, "uid": export["metadata"]["uid"]}]},
        "spec": {"export": {"path": path, "name": name}},
    });
    let bound = slice_bound(state, cluster, &slice);
    let endpoints = slice_endpoints(state, &bound, cluster, &slice);
    slice["status"] = json!({"endpoints": endpoints});
    let _ = state
        .store
        .create(&kind(SLICES), ckey(cluster, name), slice);
}

fn bind(state: &State, cluster: &str, b: &Arc<Value>) -> Option<Value> {
    let mut n = (**b).clone();
    if !n["status"].is_object() {
        n["status"] = json!({});
    }
    let (ec, en) = binding_export(state, cluster, b)?;
    let export = state.store.get(&kind(EXPORTS), &ckey(&ec, &en));
    match export {
        None => {
            n["status"]["phase"] = json!("Binding");
            crate::controllers::set_condition(
                &mut n,
                "Ready",
                "False",
                "APIExportNotFound",
                &format!("APIExport {en} not found"),
            );
        }
        Some(export) => {
            let infos = export_infos(state, &ec, &export);
            n["status"]["phase"] = json!("Bound");
            n["status"]["apiExportClusterName"] = json!(ec);
            n["status"]["boundResources"] = Value::Array(
                infos
                    .iter()
                    .map(|i| json!({"group": i.group, "resource": i.resource, "storageVersions": [i.versions.first()], "schema": {"identityHash": export["status"]["identityHash"]}}))
                    .collect(),
            );
            let accepted: Vec<Value> = n["spec"]["permissionClaims"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["state"].as_str() == Some("Accepted"))
                .map(|c| {
                    let mut c = c.clone();
                    if let Some(m) = c.as_object_mut() {
                        m.remove("state");
                    }
                    c
                })
                .collect();
            n["status"]["appliedPermissionClaims"] = json!(accepted);
            n["status"]["exportPermissionClaims"] = export["spec"]["permissionClaims"].clone();
            crate::controllers::set_condition(&mut n, "Ready", "True", "", "");
            crate::controllers::set_condition(&mut n, "APIExportValid", "True", "", "");
            crate::controllers::set_condition(&mut n, "InitialBindingCompleted", "True", "", "");
        }
    }
    if n["status"] == b["status"] {
        return None;
    }
    Some(n)
}

pub async fn after_write(
    state: &Arc<State>,
    info: &ResourceInfo,
    cluster: &str,
    old: Option<&Arc<Value>>,
    new: Option<&Arc<Value>>,
) -> Option<Arc<Value>> {
    if cluster.is_empty() || info.group.ends_with(".k8s.io") || info.group.is_empty() {
        return None;
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("tenancy.kcp.io", "workspaces") => {
            if old.is_none()
                && let Some(n) = new
            {
                let name = n["metadata"]["name"].as_str().unwrap_or("");
                let uid = n["metadata"]["uid"].as_str().unwrap_or("");
                crate::kcp_workspace::spawn(state, cluster, name, uid);
            }
            if new.is_none()
                && let Some(o) = old
                && let Some(lc) = o["spec"]["cluster"].as_str()
            {
                delete_logical_cluster(state, lc);
                refresh_slices(state);
            }
            None
        }
        ("apis.kcp.io", "apibindings") => {
            let mut out = None;
            if let Some(n) = new
                && let Some(bound) = bind(state, cluster, n)
            {
                let key = ckey(cluster, n["metadata"]["name"].as_str().unwrap_or(""));
                out = state
                    .store
                    .update(&kind(BINDINGS), &key, bound, crate::store::rv_of(n))
                    .ok();
            }
            if let Some(n) = new {
                touch_claimed(state, cluster, old.map(|o| accepted_claims(o)), n);
            }
            crate::controllers::refresh_dynamic(state, cluster);
            if old.is_none() || new.is_none() {
                // The slices of the export it binds (a new or last binding on a
                // shard moves their URLs).
                match new.or(old).and_then(|b| binding_export(state, cluster, b)) {
                    Some((ec, name)) => refresh_slices_of(state, &ec, &name),
                    None => refresh_slices(state),
                }
            }
            out
        }
        ("apis.kcp.io", "apiexports") => {
            if old.is_none()
                && let Some(n) = new
            {
                create_export_slice(state, cluster, n);
            }
            // kcp re-queues the bindings and slices of this export only.
            let name = new.or(old).and_then(|e| e["metadata"]["name"].as_str());
            if let Some(name) = name {
                rebind_exports_of(state, cluster, Some(name));
                refresh_slices_of(state, cluster, name);
            }
            None
        }
        ("apis.kcp.io", "apiresourceschemas") => {
            // Exports name schemas of their own workspace.
            rebind_exports_of(state, cluster, None);
            None
        }
        ("apis.kcp.io", "apiexportendpointslices") => {
            // A spec change (another export) moves the URLs.
            if old.is_some()
                && let Some(n) = new
            {
                let key = ckey(cluster, n["metadata"]["name"].as_str().unwrap_or(""));
                let bound = slice_bound(state, cluster, n);
                write_slice_endpoints(state, &bound, &key, n);
            }
            None
        }
        _ => None,
    }
}

/// kcp's permission-claim labeler labels every object of a resource whose claim a
/// binding newly accepts, so a virtual workspace's watch sees the objects that
/// were there before the claim (as MODIFIED, ADDED through its label filter).
/// Modelled by rewriting each such object of `cluster` (a new resourceVersion):
/// a watcher of the virtual workspace, to which they become visible now, receives
/// them. `before`: the claims accepted before this write.
fn touch_claimed(state: &State, cluster: &str, before: Option<Vec<Claim>>, binding: &Value) {
    let before = before.unwrap_or_default();
    for (g, r, _) in accepted_claims(binding) {
        if before.iter().any(|(bg, br, _)| *bg == g && *br == r) {
            continue;
        }
        let gr = gr(&g, &r);
        let objects = state.store.list_keyed(&gr, Some(cluster), None).0;
        let this = binding["metadata"]["name"].as_str().unwrap_or_default();
        for (key, obj) in objects {
            // The binding itself was just written.
            if (g.as_str(), r.as_str()) == BINDINGS && key.name == this {
                continue;
            }
            let _ = state
                .store
                .update(&gr, &key, (*obj).clone(), crate::store::rv_of(&obj));
        }
    }
}

fn rebind_all(state: &State) {
    rebind(state, state.store.all_objects(&kind(BINDINGS)));
}

/// Re-binds the APIBindings to the exports of logical cluster `ec` (`name`: that
/// export only), as kcp's binding controller re-queues an export's bindings when it
/// or its schemas change, without visiting the others' exports.
fn rebind_exports_of(state: &State, ec: &str, name: Option<&str>) {
    rebind(state, referencing_export(state, BINDINGS, ec, name));
}

/// Re-binds `bindings` and refreshes the types their workspaces serve.
fn rebind(state: &State, bindings: Vec<(Key, Arc<Value>)>) {
    let mut clusters = vec![];
    for (k, b) in bindings {
        if let Some(n) = bind(state, &k.cluster, &b) {
            let _ = state
                .store
                .update(&kind(BINDINGS), &k, n, crate::store::rv_of(&b));
        }
        if !clusters.contains(&k.cluster) {
            clusters.push(k.cluster.clone());
        }
    }
    for c in clusters {
        crate::controllers::refresh_dynamic(state, &c);
    }
}

pub async fn reconcile(state: &Arc<State>, idle: &mut crate::controllers::Idle) {
    let pending = idle.work("binding", state, &kind(BINDINGS), |b| {
        b["status"]["phase"] != "Bound"
    });
    if !pending.is_empty() {
        rebind_all(state);
    }
}

/// Conversion of APIExports and APIBindings between apis.kcp.io v1alpha1 and v1alpha2
/// (schemas list vs resources, `all` vs `selector.matchAll` permission claims).
pub fn convert(info: &ResourceInfo, to: &str, obj: &mut Value) {
    let from = obj["apiVersion"]
        .as_str()
        .and_then(|a| a.strip_prefix("apis.kcp.io/"))
        .unwrap_or(to)
        .to_string();
    if from == to || !obj["spec"].is_object() {
        return;
    }
    let claims_to = |claims: &mut Value, to: &str| {
        for c in claims
            .as_array_mut()
            .into_iter()
            .flatten()
            .filter(|c| c.is_object())
        {
            if to == "v1alpha2" {
                let all = c.as_object_mut().and_then(|m| m.remove("all"));
                if let Some(m) = c.as_object_mut() {
                    m.remove("resourceSelector");
                }
                if c["selector"].is_null() {
                    c["selector"] =
                        json!({"matchAll": all.and_then(|a| a.as_bool()).unwrap_or(true)});
                }
                if c["verbs"].is_null() {
                    c["verbs"] = json!(["*"]);
                }
            } else {
                let sel = c.as_object_mut().and_then(|m| m.remove("selector"));
                if let Some(m) = c.as_object_mut() {
                    m.remove("verbs");
                }
                c["all"] = json!(
                    sel.map(|s| s["matchAll"].as_bool().unwrap_or(false))
                        .unwrap_or(true)
                );
            }
        }
    };
    if info.resource == "apiexports" {
        if to == "v1alpha2" {
            if let Some(schemas) = take_array(&mut obj["spec"], "latestResourceSchemas") {
                let resources: Vec<Value> = schemas
                    .iter()
                    .filter_map(|s| s.as_str())
                    .map(|s| {
                        // <prefix>.<plural>.<group>
                        let mut parts = s.splitn(3, '.');
                        let _prefix = parts.next();
                        let plural = parts.next().unwrap_or("");
                        let group = parts.next().unwrap_or("");
                        json!({"group": group, "name": plural, "schema": s, "storage": {"crd": {}}})
                    })
                    .collect();
                obj["spec"]["resources"] = json!(resources);
            }
        } else if let Some(resources) = take_array(&mut obj["spec"], "resources") {
            let schemas: Vec<Value> = resources.iter().map(|r| r["schema"].clone()).collect();
            obj["spec"]["latestResourceSchemas"] = json!(schemas);
        }
    }
    if let Some(claims) = obj["spec"].get_mut("permissionClaims") {
        claims_to(claims, to);
    }
    if let Some(claims) = obj
        .get_mut("status")
        .and_then(|s| s.get_mut("exportPermissionClaims"))
    {
        claims_to(claims, to);
    }
}

/// Removes `key` from the object `v`: its items (none when it is not an array),
/// or `None` where it is absent.
fn take_array(v: &mut Value, key: &str) -> Option<Vec<Value>> {
    v.as_object_mut()
        .and_then(|m| m.remove(key))
        .map(|removed| match removed {
            Value::Array(items) => items,
            _ => Vec::new(),
        })
}
