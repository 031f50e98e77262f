//! kcp model: logical clusters under `/clusters/<name>`, Workspaces, APIExports,
//! APIBindings, APIExportEndpointSlices and the APIExport virtual workspace.

use crate::errors::{ApiError, ApiResult};
use crate::now_rfc3339;
use crate::registry::{self, Gr, ResourceInfo};
use crate::server::{ClusterSel, State, UserInfo, VwCtx};
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

fn ws_gr() -> Gr {
    gr("tenancy.kcp.io", "workspaces")
}
fn lc_gr() -> Gr {
    gr("core.kcp.io", "logicalclusters")
}
fn export_gr() -> Gr {
    gr("apis.kcp.io", "apiexports")
}
fn binding_gr() -> Gr {
    gr("apis.kcp.io", "apibindings")
}
fn schema_gr() -> Gr {
    gr("apis.kcp.io", "apiresourceschemas")
}

fn ckey(cluster: &str, name: &str) -> Key {
    Key {
        cluster: cluster.to_string(),
        namespace: String::new(),
        name: name.to_string(),
    }
}

fn create_logical_cluster(state: &State, name: &str, path: &str) {
    let now = now_rfc3339();
    let lc = json!({
        "apiVersion": "core.kcp.io/v1alpha1", "kind": "LogicalCluster",
        "metadata": {"name": "cluster", "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now,
                     "generation": 1,
                     "annotations": {"kcp.io/cluster": name, "kcp.io/path": path}},
        "spec": {"initializers": []},
        "status": {"phase": "Ready", "URL": format!("{}/clusters/{}", state.url, path)},
    });
    let _ = state.store.create(&lc_gr(), ckey(name, "cluster"), lc);
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
fn delete_logical_cluster(state: &State, lc: &str) {
    for (k, w) in state.store.all_objects(&ws_gr()) {
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
}

pub fn bootstrap(state: &State) {
    create_logical_cluster(state, ROOT, ROOT);
    crate::authz::bootstrap_root(state, ROOT);
}

pub fn cluster_exists(state: &State, name: &str) -> bool {
    state.store.get(&lc_gr(), &ckey(name, "cluster")).is_some()
}

/// The workspace path (`root:org`) of a logical cluster.
pub fn path_of(state: &State, cluster: &str) -> Option<String> {
    state
        .store
        .get(&lc_gr(), &ckey(cluster, "cluster"))
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
        let ws = state.store.get(&ws_gr(), &ckey(&cur, s))?;
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

/// Splits `/clusters/<x>/...` and `/services/apiexport/<lc>/<export>/clusters/<x>/...`.
pub fn parse_prefix(
    state: &State,
    user: &UserInfo,
    path: &str,
) -> ApiResult<(ClusterSel, Option<VwCtx>, String)> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["clusters", name, rest @ ..] => {
            let rest = format!("/{}", rest.join("/"));
            if *name == "*" {
                if !user.is_master() {
                    return Err(forbidden_path(user, path));
                }
                return Ok((ClusterSel::Wildcard, None, rest));
            }
            match resolve_path(state, name) {
                Some(lc) => Ok((ClusterSel::Lc(lc), None, rest)),
                None => Err(ApiError::new(
                    404,
                    "NotFound",
                    format!("workspace or logical cluster {name:?} not found"),
                )),
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
        ] => {
            let rest = format!("/{}", rest.join("/"));
            if state.store.get(&export_gr(), &ckey(lc, export)).is_none() {
                return Err(ApiError::path_not_found());
            }
            let vw = VwCtx {
                export_cluster: lc.to_string(),
                export_name: export.to_string(),
            };
            let sel = if *name == "*" {
                ClusterSel::Wildcard
            } else {
                ClusterSel::Lc(resolve_path(state, name).unwrap_or_else(|| name.to_string()))
            };
            Ok((sel, Some(vw), rest))
        }
        ["services", ..] => Err(ApiError::path_not_found()),
        _ => Ok((ClusterSel::Plain, None, path.to_string())),
    }
}

fn random_lc_name() -> String {
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
            let lc = random_lc_name();
            let parent = path_of(state, cluster).unwrap_or_else(|| cluster.to_string());
            let path = format!("{parent}:{name}");
            obj["spec"]["cluster"] = json!(lc);
            obj["spec"]["URL"] = json!(format!("{}/clusters/{}", state.url, path));
            if obj["spec"]["type"].is_null() {
                obj["spec"]["type"] = json!({"name": "universal", "path": "root"});
            }
            obj["status"] = json!({"phase": "Ready", "conditions": [
                {"type": "WorkspaceScheduled", "status": "True", "lastTransitionTime": now_rfc3339()},
                {"type": "WorkspaceInitialized", "status": "True", "lastTransitionTime": now_rfc3339()},
            ]});
        }
        ("apis.kcp.io", "apiexports") => {
            use rand::Rng;
            let mut r = rand::rng();
            let hash: String = (0..64)
                .map(|_| format!("{:x}", r.random_range(0..16u8)))
                .collect();
            obj["status"] = json!({"identityHash": hash});
        }
        ("apis.kcp.io", "apiexportendpointslices") => {
            let export = &obj["spec"]["export"];
            let ename = export["name"].as_str().unwrap_or("").to_string();
            let epath = export["path"].as_str().unwrap_or("");
            let ecluster = if epath.is_empty() {
                Some(cluster.to_string())
            } else {
                resolve_path(state, epath)
            };
            obj["status"] = match ecluster {
                Some(ec) => {
                    json!({"endpoints": [{"url": format!("{}/services/apiexport/{}/{}", state.url, ec, ename)}]})
                }
                None => json!({"endpoints": []}),
            };
        }
        ("apis.kcp.io", "apibindings") => {
            obj["status"] = json!({"phase": "Binding"});
        }
        _ => {}
    }
    Ok(())
}

pub fn prepare_update(
    _state: &State,
    info: &ResourceInfo,
    _cluster: &str,
    old: &Value,
    new: &mut Value,
) -> ApiResult<()> {
    if info.group == "tenancy.kcp.io" && info.resource == "workspaces" {
        new["spec"]["cluster"] = old["spec"]["cluster"].clone();
        new["spec"]["URL"] = old["spec"]["URL"].clone();
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
        if let Some(schema) = state.store.get(&schema_gr(), &ckey(export_cluster, &s))
            && let Some(i) = state.schema_infos.get(export_cluster, &s, &schema)
        {
            out.push(i);
        }
    }
    out
}

fn claims_of(v: &Value) -> Vec<(String, String)> {
    v["spec"]["permissionClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["group"].as_str().unwrap_or("").to_string(),
                c["resource"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn accepted_claims(binding: &Value) -> Vec<(String, String)> {
    binding["spec"]["permissionClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["state"].as_str() == Some("Accepted"))
        .map(|c| {
            (
                c["group"].as_str().unwrap_or("").to_string(),
                c["resource"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
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
    state.store.list(&binding_gr(), Some(cluster), None).0
}

pub fn bound_infos(state: &State, cluster: &str) -> Vec<Arc<ResourceInfo>> {
    let mut out: Vec<Arc<ResourceInfo>> = vec![];
    for b in bindings_in(state, cluster) {
        let Some((ec, en)) = binding_export(state, cluster, &b) else {
            continue;
        };
        if let Some(export) = state.store.get(&export_gr(), &ckey(&ec, &en)) {
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
        .get(&export_gr(), &ckey(&vw.export_cluster, &vw.export_name))
    else {
        return vec![];
    };
    let mut out = export_infos(state, &vw.export_cluster, &export);
    for (g, r) in claims_of(&export) {
        if out.iter().any(|i| i.group == g && i.resource == r) {
            continue;
        }
        if let Some(i) = all
            .iter()
            .chain(state.registry.kcp.iter())
            .find(|i| i.group == g && i.resource == r)
        {
            out.push(i.clone());
        }
    }
    out
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
        .get(&export_gr(), &ckey(&vw.export_cluster, &vw.export_name))
        .is_some_and(|e| {
            export_infos(state, &vw.export_cluster, &e)
                .iter()
                .any(|i| i.group == info.group && i.resource == info.resource)
        })
}

/// Whether objects of a kind in `cluster` are visible through the virtual workspace.
pub fn vw_cluster_allowed(state: &State, vw: &VwCtx, info: &ResourceInfo, cluster: &str) -> bool {
    let Some(b) = binding_for_export(state, cluster, vw) else {
        return false;
    };
    is_exported(state, vw, info)
        || accepted_claims(&b)
            .iter()
            .any(|(g, r)| *g == info.group && *r == info.resource)
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
    let Some(b) = binding_for_export(state, c, vw) else {
        return Err(ApiError::forbidden(
            info,
            "",
            &format!("workspace {c} does not bind APIExport {}", vw.export_name),
        ));
    };
    if is_exported(state, vw, info) {
        return Ok(());
    }
    if accepted_claims(&b)
        .iter()
        .any(|(g, r)| *g == info.group && *r == info.resource)
    {
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

/// ValidatingWebhookConfigurations of the exports bound in `cluster` that provide `info`.
pub fn export_webhook_configs(
    state: &State,
    cluster: &str,
    info: &ResourceInfo,
) -> Vec<Arc<Value>> {
    let mut out = vec![];
    for b in bindings_in(state, cluster) {
        let Some((ec, en)) = binding_export(state, cluster, &b) else {
            continue;
        };
        if ec == cluster {
            continue;
        }
        let Some(export) = state.store.get(&export_gr(), &ckey(&ec, &en)) else {
            continue;
        };
        let provides = export_infos(state, &ec, &export)
            .iter()
            .any(|i| i.group == info.group && i.resource == info.resource);
        if provides {
            out.extend(
                state
                    .store
                    .list(&crate::admission::vwc_gr(), Some(&ec), None)
                    .0,
            );
        }
    }
    out
}

fn bind(state: &State, cluster: &str, b: &Arc<Value>) -> Option<Value> {
    let mut n = (**b).clone();
    if !n["status"].is_object() {
        n["status"] = json!({});
    }
    let (ec, en) = binding_export(state, cluster, b)?;
    let export = state.store.get(&export_gr(), &ckey(&ec, &en));
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
                let lc = n["spec"]["cluster"].as_str().unwrap_or("").to_string();
                let parent = path_of(state, cluster).unwrap_or_else(|| cluster.to_string());
                let name = n["metadata"]["name"].as_str().unwrap_or("");
                create_logical_cluster(state, &lc, &format!("{parent}:{name}"));
                crate::authz::init_workspace(state, &lc, n);
            }
            if new.is_none()
                && let Some(o) = old
                && let Some(lc) = o["spec"]["cluster"].as_str()
            {
                delete_logical_cluster(state, lc);
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
                    .update(&binding_gr(), &key, bound, crate::store::rv_of(n))
                    .ok();
            }
            crate::controllers::refresh_dynamic(state, cluster);
            out
        }
        ("apis.kcp.io", "apiexports") | ("apis.kcp.io", "apiresourceschemas") => {
            rebind_all(state);
            None
        }
        _ => None,
    }
}

fn rebind_all(state: &State) {
    let mut clusters = vec![];
    for (k, b) in state.store.all_objects(&binding_gr()) {
        if let Some(n) = bind(state, &k.cluster, &b) {
            let _ = state
                .store
                .update(&binding_gr(), &k, n, crate::store::rv_of(&b));
        }
        if !clusters.contains(&k.cluster) {
            clusters.push(k.cluster.clone());
        }
    }
    for c in clusters {
        crate::controllers::refresh_dynamic(state, &c);
    }
}

pub async fn reconcile(state: &Arc<State>) {
    let pending = state
        .store
        .all_objects(&binding_gr())
        .iter()
        .any(|(_, b)| b["status"]["phase"] != "Bound");
    if pending {
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
