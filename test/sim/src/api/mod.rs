//! REST verbs on resources: get, list, watch, create, update, patch, delete,
//! deletecollection, with admission and the apiserver's object lifecycle rules.
//!
//! One file per verb; `request` holds the shapes shared by all of them (body decoding,
//! typed objects, the `*Options` admission sees), `validate` what kube-apiserver
//! checks before an object is stored, `filter` the selectors of list, watch and
//! deletecollection, `scale` and `table` the scale subresource and Table output.

mod create;
mod delete;
mod evict;
mod filter;
mod get;
mod list;
mod patch;
mod request;
mod scale;
mod table;
mod update;
pub(crate) mod validate;
mod watch;

pub use self::create::create;
pub use self::delete::{DeleteCall, delete, delete_collection};
pub use self::request::typed;
pub use self::update::{Mutation, update};
pub use self::validate::{is_dns1123_label, is_dns1123_subdomain, ns_info};

use self::delete::delete_options;
use self::evict::evict;
use self::get::get;
use self::list::list;
use self::request::{parse_body, wants_meta, wants_table};
use self::table::table;
use self::watch::watch_stream;
use crate::errors::{ApiError, ApiResult};
use crate::registry::ResourceInfo;
use crate::server::{Ctx, Resp, State};
use crate::{kcp, rbac, registry};
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// The resource (and object, subresource) a request is about.
#[derive(Clone)]
pub struct Target {
    pub info: Arc<ResourceInfo>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

/// A write's context: the server, the caller, the target and its logical cluster.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub state: &'a Arc<State>,
    pub ctx: &'a Ctx,
    pub t: &'a Target,
    pub cluster: &'a str,
}

impl<'a> Call<'a> {
    pub fn new(state: &'a Arc<State>, ctx: &'a Ctx, t: &'a Target, cluster: &'a str) -> Self {
        Call {
            state,
            ctx,
            t,
            cluster,
        }
    }
}

/// A list or watch whose field selector requires `metadata.name` to be one valid
/// name is authorized as a request for that name (kube-apiserver's
/// `RequestInfoFactory`), so `resourceNames` in RBAC rules apply to it.
fn named_collection(t: &Target, verb: &str, query: &HashMap<String, String>) -> Option<Target> {
    if t.name.is_some() || !matches!(verb, "list" | "watch") {
        return None;
    }
    let selector = query.get("fieldSelector")?;
    let name = selector.split(',').find_map(|term| {
        let term = term.trim();
        term.strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))
    })?;
    let valid = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('%');
    valid.then(|| Target {
        name: Some(name.to_string()),
        ..t.clone()
    })
}

/// What kube-apiserver answers a method the resource does not serve.
const METHOD_NOT_ALLOWED: &str = "the server does not allow this method on the requested resource";

/// One REST request below `/api/v1` or `/apis/GROUP/VERSION`: resolves the target,
/// authorizes the verb and runs it.
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
    let t = target(resources, group, version, segs)?;
    let verb = verb(&t, method, query)?;
    match named_collection(&t, verb, query) {
        Some(named) => crate::authz::authorize_resource(state, ctx, verb, &named)?,
        None => crate::authz::authorize_resource(state, ctx, verb, &t)?,
    }
    if let Some(vw) = &ctx.vw {
        kcp::vw_authorize(state, vw, &ctx.cluster, &t.info)?;
        // kcp-facts 16: unclaimed APIBindings are served by a read-only storage.
        if kcp::bindings_fallback(state, vw, &t.info).is_some()
            && !matches!(verb, "get" | "list" | "watch")
        {
            return Err(ApiError::method_not_allowed(METHOD_NOT_ALLOWED));
        }
    }
    if t.info.virtual_only {
        let obj = parse_body(&body, headers)?;
        return rbac::review(state, ctx, &t, obj).await;
    }
    if matches!(verb, "list" | "watch") {
        // The only verbs served on the wildcard cluster.
        return if verb == "list" {
            list(state, ctx, &t, query, headers)
        } else {
            watch_stream(state, ctx, &t, query, wants_meta(headers))
        };
    }
    // Everything else needs one logical cluster (checked where the verb always did:
    // after decoding the body).
    let need_cluster = || {
        ctx.cluster.key().ok_or_else(|| {
            // kcp's wildcard guard: NewMethodNotSupported(resource, verb) + " in the `*` logical cluster".
            let mut e = ApiError::method_not_allowed(format!(
                "{verb} is not supported on resources of kind {:?} in the `*` logical cluster",
                t.info.qualified()
            ));
            let mut d = json!({"kind": t.info.resource});
            if !t.info.group.is_empty() {
                d["group"] = json!(t.info.group);
            }
            e.details = Some(d);
            e
        })
    };
    match verb {
        "get" => match get(state, ctx, &t, need_cluster()?, wants_meta(headers))? {
            Resp::Json(200, obj) if wants_table(headers) && t.sub.is_none() => {
                let md = json!({"resourceVersion": obj["metadata"]["resourceVersion"].clone()});
                Ok(Resp::Json(200, table(&t.info, &[Arc::new(obj)], md)))
            }
            other => Ok(other),
        },
        "create" if t.sub.as_deref() == Some("eviction") => {
            let obj = parse_body(&body, headers)?;
            evict(Call::new(state, ctx, &t, need_cluster()?), obj, query).await
        }
        "create" => {
            let obj = parse_body(&body, headers)?;
            create(Call::new(state, ctx, &t, need_cluster()?), obj, query).await
        }
        "update" => {
            let obj = parse_body(&body, headers)?;
            let m = Mutation::Replace(obj);
            update(Call::new(state, ctx, &t, need_cluster()?), query, m).await
        }
        "patch" => {
            let cluster = need_cluster()?;
            let m = patch::mutation(&t.info, headers, query, &body)?;
            update(Call::new(state, ctx, &t, cluster), query, m).await
        }
        "delete" => {
            let opts = delete_options(&body, headers, query)?;
            let name = t.name.as_deref().unwrap_or("");
            let how = DeleteCall::Named;
            delete(Call::new(state, ctx, &t, need_cluster()?), name, &opts, how).await
        }
        "deletecollection" => {
            let opts = delete_options(&body, headers, query)?;
            delete_collection(Call::new(state, ctx, &t, need_cluster()?), query, &opts).await
        }
        _ => Err(ApiError::path_not_found()),
    }
}

/// The target of a path below the group version: `[namespaces/NS/]RESOURCE[/NAME[/SUB]]`
/// (and `namespaces/NAME/{status,finalize}`), 404 where the resource does not serve it.
fn target(
    resources: &[Arc<ResourceInfo>],
    group: &str,
    version: &str,
    segs: &[&str],
) -> ApiResult<Target> {
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
    Ok(Target {
        info,
        version: version.to_string(),
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
        sub: sub.map(str::to_string),
    })
}

/// The verb of a request (as RBAC names it), 405 where the resource does not serve it.
fn verb(t: &Target, method: &Method, query: &HashMap<String, String>) -> ApiResult<&'static str> {
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
        _ => return Err(ApiError::method_not_allowed(METHOD_NOT_ALLOWED)),
    };
    let info = &t.info;
    let cluster_wide_write =
        info.namespaced && t.namespace.is_none() && matches!(verb, "create" | "deletecollection");
    let served = t.sub.is_some() || info.verbs.iter().any(|v| v == verb);
    if cluster_wide_write || !served {
        return Err(ApiError::method_not_allowed(METHOD_NOT_ALLOWED));
    }
    Ok(verb)
}
