//! DELETE and DELETE on a collection: DeleteOptions, preconditions, finalizers,
//! propagation policies and what admission sees of each.

use super::filter::Filter;
use super::request::{dry_run, key_for, list_item, meta, parse_body, review, typed};
use super::validate::uid_precondition_failed;
use super::{Call, Target};
use crate::admission::Attrs;
use crate::errors::{ApiError, ApiResult};
use crate::registry::ResourceInfo;
use crate::server::Resp;
use crate::store::StoreError;
use crate::{admission, now_rfc3339, store};
use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Value, json};
use std::collections::HashMap;

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

pub(super) fn success_status(info: &ResourceInfo, name: &str, uid: &str) -> Value {
    let mut d = json!({"name": name});
    if !info.group.is_empty() {
        d["group"] = json!(info.group);
    }
    d["kind"] = json!(info.resource);
    d["uid"] = json!(uid);
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

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

/// DELETE of one object: preconditions, admission (as `how` says), then either marks
/// it as deleting (finalizers to wait for, a namespace to empty) or removes it.
pub async fn delete(c: Call<'_>, name: &str, opts: &Value, how: DeleteCall) -> ApiResult<Resp> {
    let (state, ctx, t, cluster) = (c.state, c.ctx, c.t, c.cluster);
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
        check_preconditions(info, name, opts, &old)?;
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
            let base = review(t, cluster, "DELETE", dry, opts.clone());
            let attrs = Attrs {
                sub: "",
                name: (how == DeleteCall::Named).then_some(name),
                old: Some(&old_typed),
                ..base
            };
            admission::validate(state, ctx, attrs).await?;
        }
        let gone = || Resp::Json(200, success_status(info, name, meta(&old, "uid")));
        let written = match mark_deleting(info, &old, &old_typed, &opts) {
            Marked::AlreadyDeleting => return Ok(Resp::Json(200, old_typed)),
            Marked::Now(new) if dry => return Ok(Resp::Json(200, new)),
            Marked::Remove if dry => return Ok(gone()),
            Marked::Now(new) => state
                .store
                .update(&info.gr(), &key, new, store::rv_of(&old))
                .map(Some),
            Marked::Remove => state
                .store
                .delete(&info.gr(), &key, Some(store::rv_of(&old)))
                .map(|_| None),
        };
        match written {
            Ok(Some(stored)) => {
                crate::controllers::after_write(state, info, cluster, Some(&old), Some(&stored))
                    .await;
                return Ok(Resp::Json(200, typed(info, &t.version, &stored)));
            }
            Ok(None) => {
                crate::controllers::after_write(state, info, cluster, Some(&old), None).await;
                return Ok(gone());
            }
            Err(StoreError::Conflict) => continue,
            Err(_) => return Err(ApiError::not_found(info, name)),
        }
    }
    Err(ApiError::stale(info, name))
}

/// The DeleteOptions preconditions (UID, resourceVersion), and a namespace already
/// being emptied: 409.
fn check_preconditions(
    info: &ResourceInfo,
    name: &str,
    opts: &Value,
    old: &Value,
) -> ApiResult<()> {
    if let Some(uid) = opts["preconditions"]["uid"].as_str()
        && uid != meta(old, "uid")
    {
        return Err(uid_precondition_failed(info, name, uid, old));
    }
    if let Some(rv) = opts["preconditions"]["resourceVersion"].as_str()
        && rv != meta(old, "resourceVersion")
    {
        return Err(ApiError::conflict(
            info,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta(old, "resourceVersion")
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
    Ok(())
}

/// What a DELETE does to the object.
enum Marked {
    /// Nothing: it is already being deleted and waits for its finalizers.
    AlreadyDeleting,
    /// It is marked as deleting (this new object) and waits for finalizers.
    Now(Value),
    /// It goes at once.
    Remove,
}

/// Whether the object waits before it goes (its finalizers, those the propagation
/// policy adds, the CRD cleanup finalizer, a namespace's Terminating phase), and the
/// object marked as deleting if so.
fn mark_deleting(info: &ResourceInfo, old: &Value, old_typed: &Value, opts: &Value) -> Marked {
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
    if finalizers.is_empty() && !graceful {
        return Marked::Remove;
    }
    if already_deleting {
        return Marked::AlreadyDeleting;
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
    Marked::Now(new)
}

pub async fn delete_collection(
    c: Call<'_>,
    query: &HashMap<String, String>,
    opts: &Value,
) -> ApiResult<Resp> {
    let (state, ctx, t, cluster) = (c.state, c.ctx, c.t, c.cluster);
    let f = Filter::new(state, ctx, t, query)?;
    let (selected, _) = f.select(state, t, Some(cluster));
    let mut deleted = vec![];
    let mut first_err: Option<ApiError> = None;
    for (k, v) in selected {
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
            Call::new(state, ctx, &tt, cluster),
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
