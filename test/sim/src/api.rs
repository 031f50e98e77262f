//! REST verbs on resources: get, list, watch, create, update, patch, delete,
//! deletecollection, with admission and the apiserver's object lifecycle rules.

use crate::admission::{self, Attrs};
use crate::errors::{ApiError, ApiResult};
use crate::registry::{self, ResourceInfo};
use crate::selectors::{FieldSelector, Selector};
use crate::server::{ClusterSel, Ctx, Resp, State};
use crate::store::{self, EventType, Key, StoreError};
use crate::{kcp, now_rfc3339, patch, rbac};
use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub struct Target {
    pub info: Arc<ResourceInfo>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

#[allow(clippy::too_many_arguments)]
pub async fn handle(
    state: &Arc<State>,
    ctx: &Ctx,
    resources: &[Arc<ResourceInfo>],
    method: &Method,
    group: &str,
    version: &str,
    segs: &[&str],
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Resp> {
    let (ns, res, name, sub): (Option<&str>, &str, Option<&str>, Option<&str>) = match segs {
        ["namespaces", n, s @ ("status" | "finalize")] if group.is_empty() => {
            (None, "namespaces", Some(n), Some(s))
        }
        ["namespaces", ns, res] => (Some(ns), res, None, None),
        ["namespaces", ns, res, name] => (Some(ns), res, Some(name), None),
        ["namespaces", ns, res, name, sub] => (Some(ns), res, Some(name), Some(sub)),
        [res] => (None, res, None, None),
        [res, name] => (None, res, Some(name), None),
        [res, name, sub] => (None, res, Some(name), Some(sub)),
        _ => return Err(ApiError::path_not_found()),
    };
    let info =
        registry::find(resources, group, version, res).ok_or_else(ApiError::path_not_found)?;
    if ns.is_some() && !info.namespaced {
        return Err(ApiError::path_not_found());
    }
    if info.namespaced && ns.is_none() && name.is_some() {
        return Err(ApiError::path_not_found());
    }
    if let Some(s) = sub {
        let ok = info.subresources.iter().any(|x| x.name == s)
            || (info.resource == "namespaces" && s == "finalize");
        if !ok {
            return Err(ApiError::path_not_found());
        }
    }
    let t = Target {
        info: info.clone(),
        version: version.to_string(),
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
        sub: sub.map(str::to_string),
    };
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method.clone(), t.name.is_some()) {
        (Method::GET, true) => "get",
        (Method::GET, false) if watch => "watch",
        (Method::GET, false) => "list",
        (Method::POST, false) => "create",
        (Method::POST, true) if t.sub.as_deref() == Some("eviction") => "create",
        (Method::PUT, true) => "update",
        (Method::PATCH, true) => "patch",
        (Method::DELETE, true) => "delete",
        (Method::DELETE, false) => "deletecollection",
        _ => {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
    };
    if info.namespaced && t.namespace.is_none() && matches!(verb, "create" | "deletecollection") {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    if !info.verbs.iter().any(|v| v == verb) && t.sub.is_none() {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    rbac::authorize_request(state, ctx, verb, &t)?;
    if let Some(vw) = &ctx.vw {
        kcp::vw_authorize(state, vw, &ctx.cluster, &info)?;
    }
    if info.virtual_only {
        let obj = parse_body(&body, headers)?;
        return rbac::review(state, ctx, &t, obj).await;
    }
    let cluster = ctx.cluster.key().map(str::to_string);
    let need_cluster = || {
        cluster.clone().ok_or_else(|| {
            ApiError::method_not_allowed(format!("{verb} is not supported on the wildcard cluster"))
        })
    };
    match verb {
        "get" => {
            let r = get(state, ctx, &t, &need_cluster()?, wants_meta(headers))?;
            match r {
                Resp::Json(200, obj) if wants_table(headers) && t.sub.is_none() => {
                    let md = json!({"resourceVersion": obj["metadata"]["resourceVersion"].clone()});
                    Ok(Resp::Json(200, table(&t.info, &[Arc::new(obj)], md)))
                }
                other => Ok(other),
            }
        }
        "list" => list(state, ctx, &t, query, headers),
        "watch" => watch_stream(state, ctx, &t, query, wants_meta(headers)),
        "create" if t.sub.as_deref() == Some("eviction") => {
            let obj = parse_body(&body, headers)?;
            evict(state, ctx, &t, &need_cluster()?, obj, query).await
        }
        "create" => {
            let obj = parse_body(&body, headers)?;
            create(state, ctx, &t, &need_cluster()?, obj, query).await
        }
        "update" => {
            let obj = parse_body(&body, headers)?;
            let c = need_cluster()?;
            update(state, ctx, &t, &c, query, Mutation::Replace(obj)).await
        }
        "patch" => {
            let ct = headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            let c = need_cluster()?;
            let m = match ct.as_str() {
                "application/merge-patch+json" => Mutation::Merge(parse_json(&body)?),
                "application/strategic-merge-patch+json" => {
                    if !info.builtin {
                        return Err(ApiError::unsupported_media_type(&ct));
                    }
                    Mutation::Strategic(parse_json(&body)?)
                }
                "application/json-patch+json" => Mutation::JsonPatch(parse_json(&body)?),
                "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                    if query.get("fieldManager").is_none_or(|f| f.is_empty()) {
                        return Err(ApiError::invalid_raw(
                            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                        ));
                    }
                    let text = std::str::from_utf8(&body)
                        .map_err(|_| ApiError::bad_request("apply patch is not UTF-8"))?;
                    let v: Value = serde_saphyr::from_str(text)
                        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                    Mutation::Apply(v)
                }
                _ => return Err(ApiError::unsupported_media_type(&ct)),
            };
            update(state, ctx, &t, &c, query, m).await
        }
        "delete" => {
            let opts = delete_options(&body, headers, query)?;
            let c = need_cluster()?;
            delete(
                state,
                ctx,
                &t,
                &c,
                t.name.as_deref().unwrap_or(""),
                &opts,
                DeleteCall::Named,
            )
            .await
        }
        "deletecollection" => {
            let opts = delete_options(&body, headers, query)?;
            let c = need_cluster()?;
            delete_collection(state, ctx, &t, &c, query, &opts).await
        }
        _ => Err(ApiError::path_not_found()),
    }
}

impl ApiError {
    pub fn invalid_raw(message: &str) -> ApiError {
        ApiError::new(422, "Invalid", message)
    }
}

fn parse_json(body: &Bytes) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

pub fn parse_body(body: &Bytes, headers: &HeaderMap) -> ApiResult<Value> {
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let v: Value = if ct.contains("protobuf") {
        crate::proto::decode(body).map_err(|e| ApiError::new(415, "UnsupportedMediaType", e))?
    } else if ct.contains("yaml") {
        let text = std::str::from_utf8(body)
            .map_err(|_| ApiError::bad_request("request body is not UTF-8"))?;
        serde_saphyr::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "couldn't get version/kind; json parse error: expected an object",
        ));
    }
    Ok(v)
}

pub fn key_for(cluster: &str, info: &ResourceInfo, ns: Option<&str>, name: &str) -> Key {
    Key {
        cluster: cluster.to_string(),
        namespace: if info.namespaced {
            ns.unwrap_or("").to_string()
        } else {
            String::new()
        },
        name: name.to_string(),
    }
}

/// The object as served at `version`: with kind/apiVersion set.
pub fn typed(info: &ResourceInfo, version: &str, obj: &Value) -> Value {
    let mut o = obj.clone();
    if info.group == "apis.kcp.io" {
        kcp::convert(info, version, &mut o);
    }
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), json!(info.api_version(version)));
        m.insert("kind".into(), json!(info.kind));
    }
    o
}

fn list_item(info: &ResourceInfo, version: &str, obj: &Value) -> Value {
    if info.builtin {
        let mut o = obj.clone();
        if let Some(m) = o.as_object_mut() {
            m.remove("apiVersion");
            m.remove("kind");
        }
        o
    } else {
        typed(info, version, obj)
    }
}

fn meta<'a>(v: &'a Value, f: &str) -> &'a str {
    v["metadata"][f].as_str().unwrap_or("")
}

/// `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`
fn wants_meta(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"))
}

fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"].clone()})
}

fn get(state: &State, _ctx: &Ctx, t: &Target, cluster: &str, meta_only: bool) -> ApiResult<Resp> {
    let name = t.name.as_deref().unwrap_or("");
    let key = key_for(cluster, &t.info, t.namespace.as_deref(), name);
    let obj = state
        .store
        .get(&t.info.gr(), &key)
        .ok_or_else(|| ApiError::not_found(&t.info, name))?;
    if t.sub.as_deref() == Some("scale") {
        return Ok(Resp::Json(200, scale_of(&t.info, &obj)));
    }
    if meta_only {
        return Ok(Resp::Json(200, partial(&obj)));
    }
    Ok(Resp::Json(200, typed(&t.info, &t.version, &obj)))
}

/// The `.spec.replicas`-style paths of `info`'s scale subresource.
fn scale_paths(info: &ResourceInfo) -> (&str, &str) {
    match &info.scale_paths {
        Some((spec, status)) => (spec.as_str(), status.as_str()),
        None => (".spec.replicas", ".status.replicas"),
    }
}

/// The value at a `.a.b.c` path (a CRD's replica paths are dotted field paths).
fn at_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .try_fold(obj, |v, k| v.get(k))
}

/// Sets the value at a `.a.b.c` path, creating the objects on the way.
fn set_path(obj: &mut Value, path: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .collect();
    let Some((last, init)) = parts.split_last() else {
        return;
    };
    for k in init {
        if !cur[*k].is_object() {
            cur[*k] = json!({});
        }
        cur = &mut cur[*k];
    }
    cur[*last] = value;
}

fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
    let (spec_path, status_path) = scale_paths(info);
    // kube-apiserver: a custom resource without a value at the path scales as 0.
    let spec_replicas = at_path(obj, spec_path)
        .and_then(Value::as_i64)
        .unwrap_or(if info.builtin { 1 } else { 0 });
    let status_replicas = at_path(obj, status_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            "uid": obj["metadata"]["uid"],
            "resourceVersion": obj["metadata"]["resourceVersion"],
            "creationTimestamp": obj["metadata"]["creationTimestamp"],
        },
        "spec": {"replicas": spec_replicas},
        "status": {"replicas": status_replicas},
    })
}

struct Filter {
    cluster: ClusterSel,
    /// APIExport virtual workspace wildcard: clusters are checked against bindings.
    vw: Option<(Arc<State>, crate::server::VwCtx, Arc<ResourceInfo>)>,
    /// Per-request memo of the binding check (lists); watches re-check every event.
    vw_cache: Option<std::sync::Mutex<HashMap<String, bool>>>,
    namespace: Option<String>,
    labels: Selector,
    fields: FieldSelector,
}

impl Filter {
    fn new(
        state: &Arc<State>,
        ctx: &Ctx,
        t: &Target,
        query: &HashMap<String, String>,
    ) -> ApiResult<Filter> {
        let labels = Selector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let mut labels_ok = field_labels(&t.info);
        labels_ok.extend(t.info.selectable_fields.iter().map(String::as_str));
        let fields = FieldSelector::parse(
            query.get("fieldSelector").map(String::as_str).unwrap_or(""),
            &labels_ok,
        )
        .map_err(ApiError::bad_request)?;
        let vw = match (&ctx.vw, &ctx.cluster) {
            (Some(vw), ClusterSel::Wildcard) => Some((state.clone(), vw.clone(), t.info.clone())),
            _ => None,
        };
        Ok(Filter {
            cluster: ctx.cluster.clone(),
            vw,
            vw_cache: Some(std::sync::Mutex::new(HashMap::new())),
            namespace: t.namespace.clone(),
            labels,
            fields,
        })
    }

    fn key_ok(&self, k: &Key) -> bool {
        let c = match &self.cluster {
            ClusterSel::Plain => k.cluster.is_empty(),
            ClusterSel::Lc(c) => &k.cluster == c,
            ClusterSel::Wildcard => !k.cluster.is_empty() && self.vw_allows(&k.cluster),
        };
        c && self.namespace.as_ref().is_none_or(|n| &k.namespace == n)
    }

    fn vw_allows(&self, cluster: &str) -> bool {
        let Some((state, vw, info)) = &self.vw else {
            return true;
        };
        if let Some(c) = &self.vw_cache
            && let Ok(m) = c.lock()
            && let Some(b) = m.get(cluster)
        {
            return *b;
        }
        let ok = kcp::vw_cluster_allowed(state, vw, info, cluster);
        if let Some(c) = &self.vw_cache
            && let Ok(mut m) = c.lock()
        {
            m.insert(cluster.to_string(), ok);
        }
        ok
    }

    fn obj_ok(&self, v: &Value) -> bool {
        self.labels.matches(v) && self.fields.matches(v)
    }
}

/// Field selectors each kind supports besides metadata.name / metadata.namespace.
fn field_labels(info: &ResourceInfo) -> Vec<&'static str> {
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "pods") => vec![
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") | ("events.k8s.io", "events") => vec![
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingComponent",
            "reportingController",
            "source",
            "type",
        ],
        ("", "secrets") => vec!["type"],
        ("", "namespaces") => vec!["status.phase"],
        ("", "nodes") => vec!["spec.unschedulable"],
        ("", "replicationcontrollers") => vec!["status.replicas"],
        ("batch", "jobs") => vec!["status.successful"],
        ("certificates.k8s.io", "certificatesigningrequests") => vec!["spec.signerName"],
        _ => vec![],
    }
}

fn encode_continue(rv: u64, k: &Key) -> String {
    let v = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": [k.cluster, k.namespace, k.name]});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

fn decode_continue(s: &str) -> ApiResult<Key> {
    let bad = || {
        ApiError::bad_request(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let st = v["start"].as_array().ok_or_else(bad)?;
    let g = |i: usize| st.get(i).and_then(|x| x.as_str()).unwrap_or("").to_string();
    Ok(Key {
        cluster: g(0),
        namespace: g(1),
        name: g(2),
    })
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn list(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiResult<Resp> {
    let f = Filter::new(state, ctx, t, query)?;
    let (all, rv) = state
        .store
        .list_keyed(&t.info.gr(), ctx.cluster.key(), t.namespace.as_deref());
    let start = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l: &usize| *l > 0)
        .unwrap_or(usize::MAX);
    let mut items = vec![];
    let mut last_key = None;
    let mut remaining = 0usize;
    let mut more = false;
    for (k, v) in all.iter() {
        if let Some(s) = &start
            && k <= s
        {
            continue;
        }
        if !f.key_ok(k) || !f.obj_ok(v) {
            continue;
        }
        if items.len() >= limit {
            more = true;
            remaining += 1;
            if !f.labels.is_empty() || !f.fields.is_empty() {
                // remainingItemCount is only reported without selectors.
                break;
            }
            continue;
        }
        items.push(v.clone());
        last_key = Some(k.clone());
    }
    let mut md = json!({"resourceVersion": rv.to_string()});
    if more && let Some(k) = &last_key {
        md["continue"] = json!(encode_continue(rv, k));
        if f.labels.is_empty() && f.fields.is_empty() {
            md["remainingItemCount"] = json!(remaining);
        }
    }
    if wants_table(headers) {
        return Ok(Resp::Json(200, table(&t.info, &items, md)));
    }
    if wants_meta(headers) {
        let items: Vec<Value> = items.iter().map(|o| partial(o)).collect();
        return Ok(Resp::Json(
            200,
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": md, "items": items}),
        ));
    }
    let items: Vec<Value> = items
        .iter()
        .map(|o| list_item(&t.info, &t.version, o))
        .collect();
    Ok(Resp::Json(
        200,
        json!({
            "kind": t.info.list_kind,
            "apiVersion": t.info.api_version(&t.version),
            "metadata": md,
            "items": items,
        }),
    ))
}

fn age(ts: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 3600 * 3 {
        format!("{}m", secs / 60)
    } else if secs < 86400 * 2 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86400)
    }
}

/// The JSONPath subset of additionalPrinterColumns: `.a.b`, `[N]`, `[?(@.k=="v")]`.
fn json_path(obj: &Value, path: &str) -> Value {
    let mut cur = obj.clone();
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end]).cloned().unwrap_or(Value::Null);
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return Value::Null;
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let Some((k, v)) = filter.split_once("==") else {
                    return Value::Null;
                };
                let v = v.trim().trim_matches('"').trim_matches('\'');
                cur = cur
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x[k.trim()].as_str() == Some(v)).cloned())
                    .unwrap_or(Value::Null);
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.get(i).cloned().unwrap_or(Value::Null);
            } else {
                return Value::Null;
            }
        } else {
            return Value::Null;
        }
    }
    cur
}

type Cell = fn(&Value) -> Value;

fn n(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Extra columns (between Name and Age) kube-apiserver's table convertors print.
fn builtin_columns(info: &ResourceInfo) -> Vec<(&'static str, Cell)> {
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "namespaces") => vec![("Status", |o| o["status"]["phase"].clone())],
        ("", "configmaps") => vec![("Data", |o| {
            json!(
                o["data"].as_object().map(|m| m.len()).unwrap_or(0)
                    + o["binaryData"].as_object().map(|m| m.len()).unwrap_or(0)
            )
        })],
        ("", "secrets") => vec![
            ("Type", |o| o["type"].clone()),
            ("Data", |o| {
                json!(o["data"].as_object().map(|m| m.len()).unwrap_or(0))
            }),
        ],
        ("", "services") => vec![
            ("Type", |o| o["spec"]["type"].clone()),
            ("Cluster-IP", |o| o["spec"]["clusterIP"].clone()),
            ("External-IP", |o| {
                let ips: Vec<String> = o["spec"]["externalIPs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect();
                json!(if ips.is_empty() {
                    "<none>".to_string()
                } else {
                    ips.join(",")
                })
            }),
            ("Port(s)", |o| {
                let ports: Vec<String> = o["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        format!(
                            "{}/{}",
                            n(&p["port"]),
                            p["protocol"].as_str().unwrap_or("TCP")
                        )
                    })
                    .collect();
                json!(if ports.is_empty() {
                    "<none>".to_string()
                } else {
                    ports.join(",")
                })
            }),
        ],
        ("apps", "deployments") => vec![
            ("Ready", |o| {
                json!(format!(
                    "{}/{}",
                    n(&o["status"]["readyReplicas"]),
                    n(&o["spec"]["replicas"])
                ))
            }),
            ("Up-to-date", |o| json!(n(&o["status"]["updatedReplicas"]))),
            ("Available", |o| json!(n(&o["status"]["availableReplicas"]))),
        ],
        ("apps", "statefulsets") => vec![("Ready", |o| {
            json!(format!(
                "{}/{}",
                n(&o["status"]["readyReplicas"]),
                n(&o["spec"]["replicas"])
            ))
        })],
        ("", "pods") => vec![
            ("Ready", |o| {
                json!(format!(
                    "0/{}",
                    o["spec"]["containers"]
                        .as_array()
                        .map(|c| c.len())
                        .unwrap_or(0)
                ))
            }),
            ("Status", |o| {
                json!(o["status"]["phase"].as_str().unwrap_or("Pending"))
            }),
            ("Restarts", |_| json!(0)),
        ],
        ("", "serviceaccounts") => vec![("Secrets", |o| {
            json!(o["secrets"].as_array().map(|a| a.len()).unwrap_or(0))
        })],
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            vec![("Webhooks", |o| {
                json!(o["webhooks"].as_array().map(|a| a.len()).unwrap_or(0))
            })]
        }
        ("tenancy.kcp.io", "workspaces") => vec![
            ("Type", |o| o["spec"]["type"]["name"].clone()),
            ("Region", |o| o["metadata"]["labels"]["region"].clone()),
            ("Phase", |o| o["status"]["phase"].clone()),
            ("URL", |o| o["spec"]["URL"].clone()),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![("Holder", |o| o["spec"]["holderIdentity"].clone())]
        }
        _ => vec![],
    }
}

fn table(info: &ResourceInfo, items: &[Arc<Value>], md: Value) -> Value {
    let crd_table =
        info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions";
    let mut cols = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    for (n, _, ty) in &info.printer_columns {
        cols.push(json!({"name": n, "type": ty, "format": "", "description": "", "priority": 0}));
    }
    let extra = builtin_columns(info);
    for (name, _) in &extra {
        cols.push(
            json!({"name": name, "type": "string", "format": "", "description": "", "priority": 0}),
        );
    }
    if crd_table {
        cols.push(json!({"name": "Created At", "type": "date", "format": "", "description": "", "priority": 0}));
    } else if info.printer_columns.is_empty() {
        cols.push(json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp", "priority": 0}));
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut cells = vec![json!(meta(o, "name"))];
            for (_, p, ty) in &info.printer_columns {
                let v = json_path(o, p);
                cells.push(match (&v, ty.as_str()) {
                    (Value::Null, _) => json!("<none>"),
                    (Value::String(ts), "date") => json!(age(ts)),
                    _ => v,
                });
            }
            for (_, f) in &extra {
                let v = f(o);
                cells.push(if v.is_null() { json!("<none>") } else { v });
            }
            if crd_table {
                cells.push(json!(meta(o, "creationTimestamp")));
            } else if info.printer_columns.is_empty() {
                cells.push(json!(age(meta(o, "creationTimestamp"))));
            }
            let mut pm = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"].clone()});
            if let Some(m) = pm["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            json!({"cells": cells, "object": pm})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md, "columnDefinitions": cols, "rows": rows})
}

fn event_line(kind: &str, obj: Value) -> Bytes {
    let mut s = json!({"type": kind, "object": obj}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn watch_stream(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    query: &HashMap<String, String>,
    meta_only: bool,
) -> ApiResult<Resp> {
    let mut f = Filter::new(state, ctx, t, query)?;
    f.vw_cache = None;
    let rv_param = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let send_initial = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let from =
        if send_initial || rv_param.is_empty() || rv_param == "0" {
            None
        } else {
            Some(rv_param.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?)
        };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let info = t.info.clone();
    let version = t.version.clone();
    let gr = info.gr();
    let watched = state.store.watch(&gr, from);
    let (history, initial, mut brx, rv_now) = match watched {
        Ok(x) => x,
        Err(oldest) => {
            let st = ApiError::expired(format!(
                "too old resource version: {} ({})",
                from.unwrap_or(0),
                oldest
            ))
            .to_status();
            let _ = tx.try_send(event_line("ERROR", st));
            return Ok(Resp::Stream(rx));
        }
    };
    let state = state.clone();
    let bookmark_every = state.cfg.bookmark_interval;
    tokio::spawn(async move {
        let typed_ev = |o: &Value| {
            if meta_only {
                partial(o)
            } else {
                typed(&info, &version, o)
            }
        };
        let bookmark = |rv: u64, end: bool| {
            let mut md = json!({"resourceVersion": rv.to_string()});
            if end {
                md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            event_line(
                "BOOKMARK",
                if meta_only {
                    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md})
                } else {
                    json!({"kind": info.kind, "apiVersion": info.api_version(&version), "metadata": md})
                },
            )
        };
        let mut initial = initial;
        initial.sort_by(|a, b| {
            (meta(a, "namespace"), meta(a, "name")).cmp(&(meta(b, "namespace"), meta(b, "name")))
        });
        for o in &initial {
            let k = Key {
                cluster: o["metadata"]["annotations"]["kcp.io/cluster"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                namespace: meta(o, "namespace").to_string(),
                name: meta(o, "name").to_string(),
            };
            if f.key_ok(&k)
                && f.obj_ok(o)
                && tx.send(event_line("ADDED", typed_ev(o))).await.is_err()
            {
                return;
            }
        }
        if send_initial && bookmarks && tx.send(bookmark(rv_now, true)).await.is_err() {
            return;
        }
        let mut last_rv = rv_now;
        let filter_ev = |e: &store::Event| -> Option<Bytes> {
            if !f.key_ok(&e.key) {
                return None;
            }
            match e.kind {
                EventType::Added => f
                    .obj_ok(&e.obj)
                    .then(|| event_line("ADDED", typed_ev(&e.obj))),
                EventType::Deleted => {
                    let old_ok = e.old.as_ref().is_some_and(|o| f.obj_ok(o));
                    old_ok.then(|| event_line("DELETED", typed_ev(&e.obj)))
                }
                EventType::Modified => {
                    let new_ok = f.obj_ok(&e.obj);
                    let old_ok = e.old.as_ref().is_some_and(|o| f.obj_ok(o));
                    match (old_ok, new_ok) {
                        (true, true) => Some(event_line("MODIFIED", typed_ev(&e.obj))),
                        (false, true) => Some(event_line("ADDED", typed_ev(&e.obj))),
                        (true, false) => Some(event_line("DELETED", typed_ev(&e.obj))),
                        _ => None,
                    }
                }
            }
        };
        for e in &history {
            last_rv = last_rv.max(e.rv);
            if let Some(b) = filter_ev(e)
                && tx.send(b).await.is_err()
            {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(bookmark_every);
        tick.tick().await;
        let mut shutdown = state.shutdown_rx.clone();
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
                r = brx.recv() => match r {
                    Ok(e) => {
                        last_rv = e.rv;
                        if let Some(b) = filter_ev(&e) && tx.send(b).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    let (evs, rv, lagged) = state.store.drain_for_bookmark(&mut brx);
                    if lagged {
                        return;
                    }
                    for e in &evs {
                        if let Some(b) = filter_ev(e) && tx.send(b).await.is_err() {
                            return;
                        }
                    }
                    let rv = rv.max(last_rv);
                    last_rv = rv;
                    if tx.send(bookmark(rv, false)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Ok(Resp::Stream(rx))
}

// ------------------------------------------------------------------ create

fn dry_run(query: &HashMap<String, String>) -> bool {
    query.get("dryRun").is_some_and(|d| d == "All")
}

fn options(kind: &str, query: &HashMap<String, String>) -> Value {
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if dry_run(query) {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(f) = query.get("fieldManager").filter(|f| !f.is_empty()) {
        o["fieldManager"] = json!(f);
    }
    if let Some(f) = query.get("fieldValidation").filter(|f| !f.is_empty()) {
        o["fieldValidation"] = json!(f);
    }
    o
}

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub fn random_suffix(n: usize) -> String {
    use rand::Rng;
    let mut r = rand::rng();
    (0..n)
        .map(|_| NAME_CHARS[r.random_range(0..NAME_CHARS.len())] as char)
        .collect()
}

pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

pub(crate) fn is_dns1123_label(s: &str) -> bool {
    !s.contains('.') && s.len() <= 63 && is_dns1123_subdomain(s)
}

fn validate_name(info: &ResourceInfo, name: &str) -> ApiResult<()> {
    if info.resource == "namespaces" || info.resource == "services" {
        if !is_dns1123_label(name) {
            return Err(ApiError::invalid(
                info,
                name,
                vec![(
                    "metadata.name".into(),
                    "FieldValueInvalid".into(),
                    format!(
                        "Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                    ),
                )],
            ));
        }
    } else if info.builtin && !is_dns1123_subdomain(name) && !name.contains(':') {
        return Err(ApiError::invalid(
            info,
            name,
            vec![(
                "metadata.name".into(),
                "FieldValueInvalid".into(),
                format!(
                    "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                ),
            )],
        ));
    } else if name.contains('/') || name == "." || name == ".." || name.contains('%') {
        return Err(ApiError::invalid(
            info,
            name,
            vec![(
                "metadata.name".into(),
                "FieldValueInvalid".into(),
                format!("Invalid value: \"{name}\": may not contain '/'"),
            )],
        ));
    }
    Ok(())
}

/// Checks the namespace exists and is not terminating (NamespaceLifecycle admission).
fn check_namespace(
    state: &State,
    cluster: &str,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
) -> ApiResult<()> {
    let nsinfo = ns_info(state, cluster);
    let key = Key {
        cluster: cluster.to_string(),
        namespace: String::new(),
        name: ns.to_string(),
    };
    match state.store.get(&nsinfo.gr(), &key) {
        None => Err(ApiError::not_found(&nsinfo, ns)),
        Some(n) if !n["metadata"]["deletionTimestamp"].is_null() => {
            let msg = format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            );
            let mut e = ApiError::forbidden(info, name, &msg);
            if let Some(d) = e.details.as_mut() {
                d["causes"] = json!([{"reason": "NamespaceTerminating", "message": msg, "field": "metadata.namespace"}]);
            }
            Err(e)
        }
        Some(_) => Ok(()),
    }
}

pub fn ns_info(state: &State, cluster: &str) -> Arc<ResourceInfo> {
    let list = state.registry.resources(cluster);
    registry::find(&list, "", "v1", "namespaces")
        .or_else(|| {
            state
                .registry
                .kube
                .iter()
                .find(|i| i.resource == "namespaces" && i.group.is_empty())
                .cloned()
        })
        .unwrap_or_else(|| state.registry.kube[0].clone())
}

/// What JSON decoding into the Go types rejects: wrongly typed object metadata (and,
/// for built-in and kcp kinds, non-object spec/status).
fn check_shape(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let bad = |field: &str, v: &Value, want: &str| {
        let got = match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {got} into Go struct field {field} of type {want}"
        )))
    };
    if !obj.is_object() {
        return bad(&info.kind, obj, "object");
    }
    let Some(meta) = obj.get("metadata") else {
        return Ok(());
    };
    if meta.is_null() {
        return Ok(());
    }
    if !meta.is_object() {
        return bad("ObjectMeta.metadata", meta, "v1.ObjectMeta");
    }
    for f in [
        "name",
        "generateName",
        "namespace",
        "resourceVersion",
        "uid",
    ] {
        if let Some(v) = meta.get(f)
            && !v.is_string()
            && !v.is_null()
        {
            return bad(&format!("ObjectMeta.metadata.{f}"), v, "string");
        }
    }
    for f in ["labels", "annotations"] {
        if let Some(v) = meta.get(f)
            && !v.is_null()
            && !v
                .as_object()
                .is_some_and(|m| m.values().all(|x| x.is_string()))
        {
            return bad(&format!("ObjectMeta.metadata.{f}"), v, "map[string]string");
        }
    }
    if let Some(v) = meta.get("finalizers")
        && !v.is_null()
        && !v
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x.is_string()))
    {
        return bad("ObjectMeta.metadata.finalizers", v, "[]string");
    }
    if let Some(v) = meta.get("ownerReferences")
        && !v.is_null()
        && !v
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x.is_object()))
    {
        return bad(
            "ObjectMeta.metadata.ownerReferences",
            v,
            "[]v1.OwnerReference",
        );
    }
    if info.builtin || info.schemas.is_empty() {
        for f in ["spec", "status"] {
            if let Some(v) = obj.get(f)
                && !v.is_null()
                && !v.is_object()
            {
                return bad(&format!("{}.{f}", info.kind), v, "object");
            }
        }
    }
    Ok(())
}

fn strip_system_meta(obj: &mut Value) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("managedFields");
        m.remove("selfLink");
        // ObjectMeta's omitempty: empty maps and lists are not serialized.
        for k in ["labels", "annotations", "finalizers", "ownerReferences"] {
            let empty = match m.get(k) {
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                m.remove(k);
            }
        }
    }
}

/// `POST pods/NAME/eviction`, as kube-apiserver's eviction REST does it: one CREATE
/// review of the Eviction (`subResource: eviction`, `name` the pod), then the pod is
/// deleted without a DELETE review; `201` with a `Success` Status. (No
/// PodDisruptionBudgets are modelled: every eviction is allowed by them.)
async fn evict(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    cluster: &str,
    eviction: Value,
    query: &HashMap<String, String>,
) -> ApiResult<Resp> {
    let info = &t.info;
    let name = t.name.clone().unwrap_or_default();
    let ns = t.namespace.clone().unwrap_or_default();
    let av = eviction["apiVersion"].as_str().unwrap_or("");
    let kind = eviction["kind"].as_str().unwrap_or("");
    if !matches!(av, "policy/v1" | "policy/v1beta1") || kind != "Eviction" {
        return Err(ApiError::bad_request(format!(
            "the object in the data ({av}, Kind={kind}) is not a policy/v1 Eviction"
        )));
    }
    if meta(&eviction, "name") != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let key = key_for(cluster, info, Some(&ns), &name);
    if state.store.get(&info.gr(), &key).is_none() {
        return Err(ApiError::not_found(info, &name));
    }
    let mut object = eviction.clone();
    object["metadata"]["namespace"] = json!(ns);
    let dry = dry_run(query);
    admission::validate(
        state,
        ctx,
        Attrs {
            info,
            version: &t.version,
            sub: "eviction",
            op: "CREATE",
            name: Some(&name),
            namespace: &ns,
            cluster,
            object: Some(&object),
            old: None,
            dry_run: dry,
            options: options("CreateOptions", query),
        },
    )
    .await?;
    let mut opts = if eviction["deleteOptions"].is_object() {
        eviction["deleteOptions"].clone()
    } else {
        json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"})
    };
    if dry {
        opts["dryRun"] = json!(["All"]);
    }
    delete(state, ctx, t, cluster, &name, &opts, DeleteCall::Unadmitted).await?;
    Ok(Resp::Json(
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

pub async fn create(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    cluster: &str,
    mut obj: Value,
    query: &HashMap<String, String>,
) -> ApiResult<Resp> {
    let info = &t.info;
    if let Some(av) = obj["apiVersion"].as_str()
        && av != info.api_version(&t.version)
        && !av.is_empty()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            info.api_version(&t.version)
        )));
    }
    if let Some(k) = obj["kind"].as_str()
        && !k.is_empty()
        && k != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            info.kind
        )));
    }
    check_shape(info, &obj)?;
    builtin_field_validation(
        ctx,
        info,
        &t.version,
        &mut obj,
        None,
        query
            .get("fieldValidation")
            .map(String::as_str)
            .unwrap_or(""),
    )?;
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    strip_system_meta(&mut obj);
    let ns = if info.namespaced {
        let path_ns = t.namespace.clone().unwrap_or_default();
        let body_ns = meta(&obj, "namespace").to_string();
        if !body_ns.is_empty() && body_ns != path_ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        obj["metadata"]["namespace"] = json!(path_ns);
        Some(path_ns)
    } else {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        None
    };
    let mut name = meta(&obj, "name").to_string();
    if name.is_empty() {
        let gen_name = meta(&obj, "generateName").to_string();
        if gen_name.is_empty() {
            return Err(ApiError::invalid(
                info,
                "",
                vec![(
                    "metadata.name".into(),
                    "FieldValueRequired".into(),
                    "Required value: name or generateName is required".into(),
                )],
            ));
        }
        name = format!("{gen_name}{}", random_suffix(5));
        obj["metadata"]["name"] = json!(name);
    }
    validate_name(info, &name)?;
    if !info.builtin
        && let Some(crd) = state.store.get(
            &crate::controllers::crd_gr(),
            &Key {
                cluster: cluster.to_string(),
                namespace: String::new(),
                name: format!("{}.{}", info.resource, info.group),
            },
        )
        && !crd["metadata"]["deletionTimestamp"].is_null()
    {
        return Err(ApiError::method_not_allowed(
            "create not allowed while custom resource definition is terminating",
        ));
    }
    if let Some(ns) = &ns {
        check_namespace(state, cluster, info, ns, &name)?;
    }
    obj["apiVersion"] = json!(info.api_version(&t.version));
    obj["kind"] = json!(info.kind);
    {
        let m = obj["metadata"]
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        if info.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    if !cluster.is_empty() {
        obj["metadata"]["annotations"]["kcp.io/cluster"] = json!(cluster);
    }
    prepare_create(state, info, cluster, &mut obj)?;
    apply_schema(
        ctx,
        info,
        &t.version,
        &name,
        &mut obj,
        None,
        query
            .get("fieldValidation")
            .map(String::as_str)
            .unwrap_or(""),
    )?;
    validate_meta(info, &name, &obj)?;
    rbac::check_escalation(
        state,
        ctx,
        info,
        cluster,
        ns.as_deref().unwrap_or(""),
        &name,
        &obj,
        None,
    )?;
    let opts = options("CreateOptions", query);
    admission::validate(
        state,
        ctx,
        Attrs {
            info,
            version: &t.version,
            sub: "",
            op: "CREATE",
            name: Some(&name),
            namespace: ns.as_deref().unwrap_or(""),
            cluster,
            object: Some(&obj),
            old: None,
            dry_run: dry_run(query),
            options: opts,
        },
    )
    .await?;
    if dry_run(query) {
        return Ok(Resp::Json(201, obj));
    }
    let key = key_for(cluster, info, ns.as_deref(), &name);
    let stored = match state.store.create(&info.gr(), key, obj) {
        Ok(s) => s,
        Err(StoreError::AlreadyExists) => return Err(ApiError::already_exists(info, &name)),
        Err(_) => return Err(ApiError::internal("store failure")),
    };
    let out = crate::controllers::after_write(state, info, cluster, None, Some(&stored)).await;
    let out = out.unwrap_or(stored);
    Ok(Resp::Json(201, typed(info, &t.version, &out)))
}

fn qualified_name_errors(key: &str) -> Option<String> {
    if key.matches('/').count() > 1 {
        return Some("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into());
    }
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    static NAME_RE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let name_re = NAME_RE
        .get_or_init(|| regex::Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").ok())
        .as_ref()?;
    if name.is_empty() {
        return Some("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 bytes".into());
    }
    if !name_re.is_match(name) {
        return Some("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into());
    }
    if let Some(p) = prefix
        && !is_dns1123_subdomain(p)
    {
        return Some("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    None
}

/// ObjectMeta validation of labels and annotations.
fn validate_meta(info: &ResourceInfo, name: &str, obj: &Value) -> ApiResult<()> {
    let mut causes = vec![];
    static VALUE_RE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let value_re = VALUE_RE
        .get_or_init(|| regex::Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").ok())
        .as_ref();
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if let Some(e) = qualified_name_errors(k) {
                causes.push((
                    "metadata.labels".to_string(),
                    "FieldValueInvalid".to_string(),
                    format!("Invalid value: {k:?}: {e}"),
                ));
            }
            let Some(v) = v.as_str() else {
                causes.push((
                    "metadata.labels".into(),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: {v}: label values must be strings"),
                ));
                continue;
            };
            if v.len() > 63 {
                causes.push((
                    "metadata.labels".into(),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: {v:?}: must be no more than 63 bytes"),
                ));
            } else if value_re.as_ref().is_some_and(|r| !r.is_match(v)) {
                causes.push(("metadata.labels".into(), "FieldValueInvalid".into(), format!("Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")));
            }
        }
    }
    for (i, f) in obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let f = f.as_str().unwrap_or("");
        if let Some(e) = qualified_name_errors(f) {
            causes.push((
                format!("metadata.finalizers[{i}]"),
                "FieldValueInvalid".into(),
                format!("Invalid value: {f:?}: {e}"),
            ));
        }
    }
    let mut controllers = 0;
    for r in obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for (f, what) in [
            ("apiVersion", "version"),
            ("kind", "kind"),
            ("name", "name"),
            ("uid", "uid"),
        ] {
            if r[f].as_str().is_none_or(str::is_empty) {
                causes.push((
                    format!("metadata.ownerReferences.{f}"),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: \"\": {what} must not be empty"),
                ));
            }
        }
        if r["controller"] == json!(true) {
            controllers += 1;
        }
    }
    if controllers > 1 {
        causes.push(("metadata.ownerReferences".into(), "FieldValueInvalid".into(), "Invalid value: []v1.OwnerReference: Only one reference can have Controller set to true".into()));
    }
    if let Some(ann) = obj["metadata"]["annotations"].as_object() {
        let mut total = 0usize;
        for (k, v) in ann {
            total += k.len() + v.as_str().map(str::len).unwrap_or(0);
            if let Some(e) = qualified_name_errors(&k.to_ascii_lowercase()) {
                causes.push((
                    "metadata.annotations".into(),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: {k:?}: {e}"),
                ));
            }
            if !v.is_string() {
                causes.push((
                    "metadata.annotations".into(),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: {v}: annotation values must be strings"),
                ));
            }
        }
        if total > 256 * 1024 {
            causes.push((
                "metadata.annotations".into(),
                "FieldValueTooLong".into(),
                "Too long: may not be more than 262144 bytes".into(),
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

/// `fieldValidation` for built-in kinds: unknown fields (not already stored in `old`).
fn builtin_field_validation(
    ctx: &Ctx,
    info: &ResourceInfo,
    version: &str,
    obj: &mut Value,
    old: Option<&Value>,
    field_validation: &str,
) -> ApiResult<()> {
    if !info.builtin {
        return Ok(());
    }
    if !(field_validation == "Strict" || field_validation == "Warn") {
        crate::builtin_schema::prune_unknown(&info.group, &info.resource, obj);
        return Ok(());
    }
    let mut unknown = crate::builtin_schema::unknown_fields(&info.group, &info.resource, obj);
    if let Some(o) = old {
        let before = crate::builtin_schema::unknown_fields(&info.group, &info.resource, o);
        unknown.retain(|u| !before.contains(u));
    }
    if unknown.is_empty() {
        crate::builtin_schema::prune_unknown(&info.group, &info.resource, obj);
        return Ok(());
    }
    if field_validation == "Warn" {
        for u in &unknown {
            ctx.warn(format!("unknown field \"{u}\""));
        }
        crate::builtin_schema::prune_unknown(&info.group, &info.resource, obj);
        return Ok(());
    }
    let list: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field \"{p}\""))
        .collect();
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        list.join(", "),
        kind = info.kind
    )))
}

/// Pruning, defaulting and validation of custom resources against their schema, with
/// `fieldValidation` (Strict: unknown fields are an error; Warn: a warning each).
fn apply_schema(
    ctx: &Ctx,
    info: &ResourceInfo,
    version: &str,
    name: &str,
    obj: &mut Value,
    old: Option<&Value>,
    field_validation: &str,
) -> ApiResult<()> {
    if info.builtin {
        return Ok(());
    }
    let Some((_, schema)) = info.schemas.iter().find(|(v, _)| v == version) else {
        return Ok(());
    };
    let (causes, removed) = crate::schema::process(obj, old, schema);
    if !removed.is_empty() {
        match field_validation {
            "Strict" => {
                let list: Vec<String> = removed
                    .iter()
                    .map(|p| format!("unknown field \"{p}\""))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                    list.join(", "),
                    kind = info.kind
                )));
            }
            "Warn" => {
                for p in &removed {
                    ctx.warn(format!("unknown field \"{p}\""));
                }
            }
            _ => {}
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

fn prepare_create(
    state: &State,
    info: &ResourceInfo,
    cluster: &str,
    obj: &mut Value,
) -> ApiResult<()> {
    let name = meta(obj, "name").to_string();
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "namespaces") => {
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let group = obj["spec"]["group"].as_str().unwrap_or("");
            let plural = obj["spec"]["names"]["plural"].as_str().unwrap_or("");
            let mut causes = vec![];
            if group.is_empty() {
                causes.push((
                    "spec.group".into(),
                    "FieldValueRequired".into(),
                    "Required value".into(),
                ));
            }
            if plural.is_empty() {
                causes.push((
                    "spec.names.plural".into(),
                    "FieldValueRequired".into(),
                    "Required value".into(),
                ));
            }
            if obj["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or("")
                .is_empty()
            {
                causes.push((
                    "spec.names.kind".into(),
                    "FieldValueRequired".into(),
                    "Required value".into(),
                ));
            }
            if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
                causes.push((
                    "metadata.name".into(),
                    "FieldValueInvalid".into(),
                    format!(
                        "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                    ),
                ));
            }
            if obj["spec"]["versions"]
                .as_array()
                .is_none_or(|v| v.is_empty())
            {
                causes.push((
                    "spec.versions".into(),
                    "FieldValueInvalid".into(),
                    "Invalid value: null: must have exactly one version marked as storage version"
                        .into(),
                ));
            }
            if !causes.is_empty() {
                return Err(ApiError::invalid(info, &name, causes));
            }
            obj["status"] = json!({"conditions": [], "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": []});
        }
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            admission::validate_config(info, obj)?;
            admission::default_config(obj);
        }
        ("", "pods") => {
            crate::defaults::apply(info, obj);
            // kube-apiserver's pod strategy: a new Pod is Pending, with its QoS class.
            obj["status"] = json!({"phase": "Pending", "qosClass": pod_qos_class(obj)});
        }
        _ => {
            crate::defaults::apply(info, obj);
            if info.has_status() {
                if info.builtin {
                    obj["status"] = json!({});
                } else if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    }
    kcp::prepare_create(state, info, cluster, obj)?;
    Ok(())
}

// ------------------------------------------------------------------ update / patch

pub enum Mutation {
    Replace(Value),
    Merge(Value),
    Strategic(Value),
    JsonPatch(Value),
    Apply(Value),
    /// Internal: arbitrary change on the current object.
    Func(Box<dyn Fn(&mut Value) + Send + Sync>),
}

/// A Pod's QoS class, as kube-apiserver computes it on create: BestEffort without
/// any cpu or memory request or limit, Guaranteed when every container limits both
/// and requests what it limits (an unset request takes the limit), else Burstable.
fn pod_qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| pod["spec"][*k].as_array().into_iter().flatten())
        .collect();
    let res = |c: &Value, kind: &str, r: &str| -> Option<String> {
        c["resources"][kind][r]
            .as_str()
            .map(str::to_string)
            .or_else(|| c["resources"][kind][r].as_i64().map(|n| n.to_string()))
    };
    let any = containers.iter().any(|c| {
        ["requests", "limits"]
            .iter()
            .any(|k| ["cpu", "memory"].iter().any(|r| res(c, k, r).is_some()))
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| match res(c, "limits", r) {
            Some(limit) => res(c, "requests", r).is_none_or(|req| req == limit),
            None => false,
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Which metadata of an update through `/status` the resource's status strategy
/// keeps. Custom resources keep none (the whole old object but status). Built-in
/// strategies mostly reset only the spec, so labels and annotations change
/// (namespaces/status, pods/status in the captures); the apps workloads also reset
/// the labels (deployments/status keeps annotation changes, drops label changes).
fn status_keeps(info: &ResourceInfo) -> &'static [&'static str] {
    if !info.builtin {
        return &[];
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets") => &["annotations"],
        _ => &["labels", "annotations"],
    }
}

/// Sets `metadata.<field>` of `new` to that of `updated` (removing it when absent).
fn keep_meta(new: &mut Value, updated: &Value, field: &str) {
    match updated["metadata"].get(field) {
        Some(v) if !v.is_null() => new["metadata"][field] = v.clone(),
        _ => {
            if let Some(mm) = new["metadata"].as_object_mut() {
                mm.remove(field);
            }
        }
    }
}

fn strip_for_compare(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

pub async fn update(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    cluster: &str,
    query: &HashMap<String, String>,
    m: Mutation,
) -> ApiResult<Resp> {
    let info = &t.info;
    let name = t.name.clone().unwrap_or_default();
    let key = key_for(cluster, info, t.namespace.as_deref(), &name);
    let sub = t.sub.clone().unwrap_or_default();
    let retryable = !matches!(m, Mutation::Replace(_));
    for _attempt in 0..16 {
        let Some(old) = state.store.get(&info.gr(), &key) else {
            if let Mutation::Apply(obj) = &m
                && sub.is_empty()
            {
                check_shape(info, obj)?;
                let mut obj = obj.clone();
                if !obj["metadata"].is_object() {
                    obj["metadata"] = json!({});
                }
                obj["metadata"]["name"] = json!(name);
                let mut q = query.clone();
                q.remove("force");
                return create(state, ctx, t, cluster, obj, &q).await;
            }
            return Err(ApiError::not_found(info, &name));
        };
        let old_typed = typed(info, &t.version, &old);
        let mut new = old_typed.clone();
        let mut client_rv: Option<String> = None;
        match &m {
            Mutation::Replace(obj) => {
                new = obj.clone();
                let body_name = meta(&new, "name");
                if !body_name.is_empty() && body_name != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({name})"
                    )));
                }
                if let Some(av) = new["apiVersion"].as_str()
                    && !av.is_empty()
                    && av != info.api_version(&t.version)
                {
                    return Err(ApiError::bad_request(format!(
                        "the API version in the data ({av}) does not match the expected API version ({})",
                        info.api_version(&t.version)
                    )));
                }
                let rv = meta(&new, "resourceVersion").to_string();
                if !rv.is_empty() {
                    client_rv = Some(rv);
                }
            }
            Mutation::Merge(p) => {
                patch::merge(&mut new, p);
                if let Some(rv) = p["metadata"]["resourceVersion"].as_str() {
                    client_rv = Some(rv.to_string());
                }
            }
            Mutation::Strategic(p) => {
                patch::strategic(&mut new, p);
                if let Some(rv) = p["metadata"]["resourceVersion"].as_str() {
                    client_rv = Some(rv.to_string());
                }
            }
            Mutation::JsonPatch(p) => {
                patch::json_patch(&mut new, p).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                    )
                })?;
                let rv = meta(&new, "resourceVersion");
                if rv != meta(&old_typed, "resourceVersion") && !rv.is_empty() {
                    client_rv = Some(rv.to_string());
                }
            }
            Mutation::Apply(p) => {
                let mut p = p.clone();
                if let Some(m) = p.as_object_mut() {
                    m.remove("apiVersion");
                    m.remove("kind");
                }
                if let Some(rv) = p["metadata"]["resourceVersion"].as_str() {
                    client_rv = Some(rv.to_string());
                }
                if let Some(mm) = p.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                    mm.remove("resourceVersion");
                    mm.remove("managedFields");
                }
                patch::merge(&mut new, &p);
            }
            Mutation::Func(f) => f(&mut new),
        }
        check_shape(info, &new)?;
        builtin_field_validation(
            ctx,
            info,
            &t.version,
            &mut new,
            Some(&old_typed),
            query
                .get("fieldValidation")
                .map(String::as_str)
                .unwrap_or(""),
        )?;
        if let Some(uid) = new["metadata"]["uid"].as_str()
            && !uid.is_empty()
            && uid != meta(&old, "uid")
        {
            return Err(ApiError::conflict(
                info,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(&old, "uid")
                ),
            ));
        }
        if let Some(rv) = &client_rv
            && rv != meta(&old, "resourceVersion")
        {
            return Err(ApiError::stale(info, &name));
        }
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        strip_system_meta(&mut new);
        // Immutable / system-owned metadata.
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
        ] {
            match old["metadata"].get(f) {
                Some(v) => new["metadata"][f] = v.clone(),
                None => {
                    if let Some(mm) = new["metadata"].as_object_mut() {
                        mm.remove(f);
                    }
                }
            }
        }
        new["metadata"]["name"] = json!(name);
        if info.namespaced {
            new["metadata"]["namespace"] = old["metadata"]["namespace"].clone();
        } else if let Some(mm) = new["metadata"].as_object_mut() {
            mm.remove("namespace");
        }
        if !cluster.is_empty() {
            new["metadata"]["annotations"]["kcp.io/cluster"] = json!(cluster);
        }
        new["apiVersion"] = json!(info.api_version(&t.version));
        new["kind"] = json!(info.kind);
        match sub.as_str() {
            "status" => {
                // Status changes through /status, and the metadata the resource's
                // status strategy keeps (see `status_keeps`).
                let status = new.get("status").cloned();
                let updated = std::mem::replace(&mut new, old_typed.clone());
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        if let Some(mm) = new.as_object_mut() {
                            mm.remove("status");
                        }
                    }
                }
                for field in status_keeps(info) {
                    keep_meta(&mut new, &updated, field);
                }
            }
            "finalize" => {
                // The namespace finalize strategy resets only the status: spec and
                // metadata (labels, annotations) change.
                let spec = new.get("spec").cloned();
                let updated = std::mem::replace(&mut new, old_typed.clone());
                if let Some(s) = spec {
                    new["spec"] = s;
                }
                for field in ["labels", "annotations"] {
                    keep_meta(&mut new, &updated, field);
                }
            }
            "scale" => {
                // The Scale's spec.replicas, written where the resource keeps it.
                let replicas = new["spec"]["replicas"].clone();
                new = old_typed.clone();
                let (spec_path, _) = scale_paths(info);
                if new["spec"].is_object() || new["spec"].is_null() {
                    set_path(&mut new, spec_path, replicas);
                }
            }
            _ => {
                if info.has_status() || info.resource == "namespaces" {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(mm) = new.as_object_mut() {
                                mm.remove("status");
                            }
                        }
                    }
                }
                if info.resource == "namespaces" {
                    new["spec"] = old["spec"].clone();
                }
            }
        }
        if info.builtin {
            if info.group.is_empty()
                && info.resource == "services"
                && new["spec"]["clusterIP"].is_null()
            {
                for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                    if let Some(v) = old["spec"].get(f) {
                        new["spec"][f] = v.clone();
                    }
                }
            }
            crate::defaults::apply(info, &mut new);
        }
        if info.generation && strip_for_compare(&new) != strip_for_compare(&old_typed) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            new["metadata"]["generation"] = json!(g);
        }
        if !old["metadata"]["deletionTimestamp"].is_null() {
            // Finalizers may only be removed once deletion started.
            let old_f: Vec<Value> = old["metadata"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let new_f: Vec<Value> = new["metadata"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if new_f.iter().any(|f| !old_f.contains(f)) {
                return Err(ApiError::forbidden(
                    info,
                    &name,
                    "no new finalizers can be added if the object is being deleted",
                ));
            }
        }
        if info.group == "admissionregistration.k8s.io"
            && info.resource == "validatingwebhookconfigurations"
        {
            admission::validate_config(info, &new)?;
            admission::default_config(&mut new);
        }
        kcp::prepare_update(state, info, cluster, &old, &mut new)?;
        apply_schema(
            ctx,
            info,
            &t.version,
            &name,
            &mut new,
            Some(&old_typed),
            query
                .get("fieldValidation")
                .map(String::as_str)
                .unwrap_or(""),
        )?;
        validate_meta(info, &name, &new)?;
        if info.group.is_empty()
            && (info.resource == "configmaps" || info.resource == "secrets")
            && old["immutable"] == json!(true)
        {
            let mut causes = vec![];
            if new["immutable"] != json!(true) {
                causes.push((
                    "immutable".to_string(),
                    "FieldValueForbidden".to_string(),
                    "Forbidden: field is immutable when `immutable` is set".to_string(),
                ));
            }
            for f in ["data", "binaryData"] {
                if new.get(f) != old.get(f) {
                    causes.push((
                        f.to_string(),
                        "FieldValueForbidden".to_string(),
                        "Forbidden: field is immutable when `immutable` is set".to_string(),
                    ));
                }
            }
            if !causes.is_empty() {
                return Err(ApiError::invalid(info, &name, causes));
            }
        }
        rbac::check_escalation(
            state,
            ctx,
            info,
            cluster,
            t.namespace.as_deref().unwrap_or(""),
            &name,
            &new,
            Some(&old),
        )?;
        let mut opts = options("UpdateOptions", query);
        if matches!(m, Mutation::Apply(_))
            && let Some(o) = opts.as_object_mut()
        {
            o.remove("fieldValidation");
        }
        admission::validate(
            state,
            ctx,
            Attrs {
                info,
                version: &t.version,
                sub: &sub,
                op: "UPDATE",
                name: Some(&name),
                namespace: t.namespace.as_deref().unwrap_or(""),
                cluster,
                object: Some(&new),
                old: Some(&old_typed),
                dry_run: dry_run(query),
                options: opts,
            },
        )
        .await?;
        let mut cmp_new = new.clone();
        let mut cmp_old = old_typed.clone();
        cmp_new["metadata"]["resourceVersion"] = Value::Null;
        cmp_old["metadata"]["resourceVersion"] = Value::Null;
        if cmp_new == cmp_old {
            if sub == "scale" {
                return Ok(Resp::Json(200, scale_of(info, &old)));
            }
            return Ok(Resp::Json(200, old_typed));
        }
        if dry_run(query) {
            return Ok(Resp::Json(200, new));
        }
        let finalizing = !new["metadata"]["deletionTimestamp"].is_null()
            && new["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty())
            && !(info.resource == "namespaces"
                && new["spec"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty()));
        let res = if finalizing {
            state
                .store
                .delete(&info.gr(), &key, Some(store::rv_of(&old)))
        } else {
            state
                .store
                .update(&info.gr(), &key, new, store::rv_of(&old))
        };
        match res {
            Ok(stored) => {
                let out = if finalizing {
                    crate::controllers::after_write(state, info, cluster, Some(&old), None).await;
                    stored
                } else {
                    crate::controllers::after_write(state, info, cluster, Some(&old), Some(&stored))
                        .await
                        .unwrap_or(stored)
                };
                if sub == "scale" {
                    return Ok(Resp::Json(200, scale_of(info, &out)));
                }
                return Ok(Resp::Json(200, typed(info, &t.version, &out)));
            }
            Err(StoreError::Conflict) if retryable || client_rv.is_none() => continue,
            Err(StoreError::Conflict) => return Err(ApiError::stale(info, &name)),
            Err(StoreError::NotFound) => return Err(ApiError::not_found(info, &name)),
            Err(StoreError::AlreadyExists) => return Err(ApiError::internal("store failure")),
        }
    }
    Err(ApiError::stale(info, &name))
}

// ------------------------------------------------------------------ delete

/// DeleteOptions from the body and/or query, as passed on to admission.
pub fn delete_options(
    body: &Bytes,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> ApiResult<Value> {
    let mut o = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    if !body.is_empty() {
        let b: Value = parse_body(body, headers)?;
        if let Some(m) = b.as_object() {
            for (k, v) in m {
                if k != "kind" && k != "apiVersion" && !v.is_null() {
                    o[k] = v.clone();
                }
            }
        }
    }
    if let Some(g) = query
        .get("gracePeriodSeconds")
        .and_then(|g| g.parse::<i64>().ok())
    {
        o["gracePeriodSeconds"] = json!(g);
    }
    if let Some(p) = query.get("propagationPolicy") {
        o["propagationPolicy"] = json!(p);
    }
    if let Some(p) = query.get("orphanDependents") {
        o["orphanDependents"] = json!(p == "true");
    }
    if dry_run(query) {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(p) = o["propagationPolicy"].as_str()
        && !["Foreground", "Background", "Orphan"].contains(&p)
    {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            ),
        ));
    }
    Ok(o)
}

fn success_status(info: &ResourceInfo, name: &str, uid: &str) -> Value {
    let mut d = json!({"name": name});
    if !info.group.is_empty() {
        d["group"] = json!(info.group);
    }
    d["kind"] = json!(info.resource);
    d["uid"] = json!(uid);
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

/// Deletes one object. `named` = false for DeleteCollection (admission sees no name).
/// How a DELETE reaches the registry, which decides what admission sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteCall {
    /// A named DELETE (a client's, or the garbage collector's): reviewed with its name.
    Named,
    /// One item of a DeleteCollection (the namespace controller's): reviewed without
    /// `request.name`.
    Nameless,
    /// Straight from storage, as the CRD finalizer (`DeleteCollection` with
    /// `rest.ValidateAllObjectFunc`) and pod eviction do: no DELETE review at all.
    Unadmitted,
}

pub async fn delete(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    cluster: &str,
    name: &str,
    opts: &Value,
    how: DeleteCall,
) -> ApiResult<Resp> {
    let info = &t.info;
    let key = key_for(cluster, info, t.namespace.as_deref(), name);
    let dry = opts["dryRun"]
        .as_array()
        .is_some_and(|d| d.iter().any(|x| x == "All"));
    for _ in 0..16 {
        let old = state
            .store
            .get(&info.gr(), &key)
            .ok_or_else(|| ApiError::not_found(info, name))?;
        if let Some(uid) = opts["preconditions"]["uid"].as_str()
            && uid != meta(&old, "uid")
        {
            return Err(ApiError::conflict(
                info,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(&old, "uid")
                ),
            ));
        }
        if let Some(rv) = opts["preconditions"]["resourceVersion"].as_str()
            && rv != meta(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                info,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta(&old, "resourceVersion")
                ),
            ));
        }
        if info.group.is_empty()
            && info.resource == "namespaces"
            && !old["metadata"]["deletionTimestamp"].is_null()
        {
            return Err(ApiError::conflict(
                info,
                name,
                "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.",
            ));
        }
        let old_typed = typed(info, &t.version, &old);
        let mut opts = opts.clone();
        let uid_precondition = (info.group.is_empty() && info.resource == "namespaces")
            || (info.group == "apiextensions.k8s.io"
                && info.resource == "customresourcedefinitions");
        if uid_precondition && opts["preconditions"]["uid"].is_null() {
            // The namespace and CRD registries always delete with a UID precondition.
            opts["preconditions"]["uid"] = old["metadata"]["uid"].clone();
        }
        if how != DeleteCall::Unadmitted {
            admission::validate(
                state,
                ctx,
                Attrs {
                    info,
                    version: &t.version,
                    sub: "",
                    op: "DELETE",
                    name: (how == DeleteCall::Named).then_some(name),
                    namespace: t.namespace.as_deref().unwrap_or(""),
                    cluster,
                    object: None,
                    old: Some(&old_typed),
                    dry_run: dry,
                    options: opts.clone(),
                },
            )
            .await?;
        }
        let mut new = old_typed.clone();
        let mut finalizers: Vec<Value> = old["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let policy = opts["propagationPolicy"].as_str().unwrap_or("");
        let orphan = policy == "Orphan" || opts["orphanDependents"] == json!(true);
        let mut graceful = false;
        if info.resource == "namespaces" && info.group.is_empty() {
            graceful = true;
            new["status"]["phase"] = json!("Terminating");
        } else if info.resource == "customresourcedefinitions" {
            let f = json!("customresourcecleanup.apiextensions.k8s.io");
            if !finalizers.contains(&f) {
                finalizers.push(f);
            }
        }
        let already_deleting = !old["metadata"]["deletionTimestamp"].is_null();
        if !already_deleting {
            if policy == "Foreground" && !finalizers.contains(&json!("foregroundDeletion")) {
                finalizers.push(json!("foregroundDeletion"));
            } else if orphan && !finalizers.contains(&json!("orphan")) {
                finalizers.push(json!("orphan"));
            }
        }
        if !finalizers.is_empty() || graceful {
            if already_deleting {
                return Ok(Resp::Json(200, old_typed));
            }
            new["metadata"]["finalizers"] = json!(finalizers);
            if finalizers.is_empty()
                && let Some(m) = new["metadata"].as_object_mut()
            {
                m.remove("finalizers");
            }
            new["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            // Marking an object as deleting bumps its generation (when it has one).
            if let Some(g) = new["metadata"]["generation"].as_i64()
                && g > 0
            {
                new["metadata"]["generation"] = json!(g + 1);
            }
            if info.resource == "customresourcedefinitions" {
                crate::controllers::set_condition(
                    &mut new,
                    "Terminating",
                    "True",
                    "InstanceDeletionPending",
                    "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
                );
            }
            if dry {
                return Ok(Resp::Json(200, new));
            }
            match state
                .store
                .update(&info.gr(), &key, new, store::rv_of(&old))
            {
                Ok(stored) => {
                    crate::controllers::after_write(
                        state,
                        info,
                        cluster,
                        Some(&old),
                        Some(&stored),
                    )
                    .await;
                    return Ok(Resp::Json(200, typed(info, &t.version, &stored)));
                }
                Err(StoreError::Conflict) => continue,
                Err(_) => return Err(ApiError::not_found(info, name)),
            }
        }
        if dry {
            return Ok(Resp::Json(
                200,
                success_status(info, name, meta(&old, "uid")),
            ));
        }
        match state
            .store
            .delete(&info.gr(), &key, Some(store::rv_of(&old)))
        {
            Ok(_) => {
                crate::controllers::after_write(state, info, cluster, Some(&old), None).await;
                return Ok(Resp::Json(
                    200,
                    success_status(info, name, meta(&old, "uid")),
                ));
            }
            Err(StoreError::Conflict) => continue,
            Err(_) => return Err(ApiError::not_found(info, name)),
        }
    }
    Err(ApiError::stale(info, name))
}

pub async fn delete_collection(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    cluster: &str,
    query: &HashMap<String, String>,
    opts: &Value,
) -> ApiResult<Resp> {
    let f = Filter::new(state, ctx, t, query)?;
    let (all, _) = state
        .store
        .list_keyed(&t.info.gr(), Some(cluster), t.namespace.as_deref());
    let mut deleted = vec![];
    let mut first_err: Option<ApiError> = None;
    for (k, v) in all {
        if !f.key_ok(&k) || !f.obj_ok(&v) {
            continue;
        }
        let mut tt = Target {
            info: t.info.clone(),
            version: t.version.clone(),
            namespace: t.namespace.clone(),
            name: Some(k.name.clone()),
            sub: None,
        };
        if t.info.namespaced {
            tt.namespace = Some(k.namespace.clone());
        }
        match delete(
            state,
            ctx,
            &tt,
            cluster,
            &k.name,
            opts,
            DeleteCall::Nameless,
        )
        .await
        {
            Ok(Resp::Json(_, body)) => {
                if body["kind"] == "Status" {
                    deleted.push(list_item(&t.info, &t.version, &v));
                } else {
                    deleted.push(list_item(&t.info, &t.version, &body));
                }
            }
            Ok(_) => {}
            Err(e) if e.code == 404 => {}
            Err(e) => {
                if first_err.is_none() {
                    first_err = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(Resp::Json(
        200,
        json!({
            "kind": t.info.list_kind,
            "apiVersion": t.info.api_version(&t.version),
            "metadata": {"resourceVersion": state.store.current_rv().to_string()},
            "items": deleted,
        }),
    ))
}
