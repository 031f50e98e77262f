//! PUT and PATCH (and the simulator's own changes) through one update in named
//! steps: mutate, keep what the client cannot change, the subresource's share,
//! defaulting, validation, admission, storage.

use super::create::create;
use super::request::{
    dry_run, field_validation, key_for, meta, options, review, strip_system_meta, typed,
};
use super::scale::{scale_of, scale_paths, set_path};
use super::validate::{
    Decoding, check_api_version, check_shape, uid_precondition_failed, validate_meta,
};
use super::{Call, Target};
use crate::admission::Attrs;
use crate::errors::{ApiError, ApiResult, cause};
use crate::registry::ResourceInfo;
use crate::server::Resp;
use crate::store::{Key, StoreError};
use crate::{admission, kcp, patch, rbac, store};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// How an update changes the stored object.
pub enum Mutation {
    Replace(Value),
    Merge(Value),
    Strategic(Value),
    JsonPatch(Value),
    Apply(Value),
    /// Internal: arbitrary change on the current object.
    Func(Box<dyn Fn(&mut Value) + Send + Sync>),
}

/// Which metadata of an update through `/status` the resource's status strategy
/// keeps. Custom resources keep none (the whole old object but status). Built-in
/// strategies mostly reset only the spec, so labels and annotations change
/// (namespaces/status, pods/status in the captures); the apps workloads also reset
/// the labels (deployments/status keeps annotation changes, drops label changes).
pub(super) fn status_keeps(info: &ResourceInfo) -> &'static [&'static str] {
    if !info.builtin {
        return &[];
    }
    match (info.group.as_str(), info.resource.as_str()) {
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets") => &["annotations"],
        _ => &["labels", "annotations"],
    }
}

/// Sets `metadata.<field>` of `new` to that of `updated` (removing it when absent).
pub(super) fn keep_meta(new: &mut Value, updated: &Value, field: &str) {
    match updated["metadata"].get(field) {
        Some(v) if !v.is_null() => new["metadata"][field] = v.clone(),
        _ => {
            if let Some(mm) = new["metadata"].as_object_mut() {
                mm.remove(field);
            }
        }
    }
}

pub(super) fn strip_for_compare(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

/// The changed object a mutation makes of `old` (typed), and the resourceVersion the
/// client asked to update from, if any.
fn mutate(
    m: &Mutation,
    t: &Target,
    name: &str,
    old_typed: &Value,
) -> ApiResult<(Value, Option<String>)> {
    let mut new = old_typed.clone();
    let mut client_rv: Option<String> = None;
    let rv_in = |p: &Value| {
        p["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string)
    };
    match m {
        Mutation::Replace(obj) => {
            new = obj.clone();
            let body_name = meta(&new, "name");
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            check_api_version(&t.info, &t.version, &new)?;
            let rv = meta(&new, "resourceVersion").to_string();
            if !rv.is_empty() {
                client_rv = Some(rv);
            }
        }
        Mutation::Merge(p) => {
            patch::merge(&mut new, p);
            client_rv = rv_in(p);
        }
        Mutation::Strategic(p) => {
            patch::strategic(&mut new, p);
            client_rv = rv_in(p);
        }
        Mutation::JsonPatch(p) => {
            patch::json_patch(&mut new, p).map_err(|e| {
                ApiError::invalid_raw(&format!(
                    "the server rejected our request due to an error in our request: {e}"
                ))
            })?;
            let rv = meta(&new, "resourceVersion");
            if rv != meta(old_typed, "resourceVersion") && !rv.is_empty() {
                client_rv = Some(rv.to_string());
            }
        }
        Mutation::Apply(p) => {
            let mut p = p.clone();
            if let Some(m) = p.as_object_mut() {
                m.remove("apiVersion");
                m.remove("kind");
            }
            client_rv = rv_in(&p);
            if let Some(mm) = p.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                mm.remove("resourceVersion");
                mm.remove("managedFields");
            }
            patch::merge(&mut new, &p);
        }
        Mutation::Func(f) => f(&mut new),
    }
    Ok((new, client_rv))
}

/// The metadata a client cannot change: the system-owned fields, name, namespace and
/// logical cluster stay those of `old`; kind and apiVersion those of the target.
fn keep_system_meta(t: &Target, cluster: &str, name: &str, old: &Value, new: &mut Value) {
    let info = &t.info;
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    strip_system_meta(new);
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        keep_field(&mut new["metadata"], &old["metadata"], f);
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
}

/// What of the change the subresource written keeps: `/status` the status (and the
/// metadata the status strategy keeps), `/finalize` the spec, `/scale` the replicas;
/// the main resource everything but the status (and a namespace's spec).
fn apply_subresource(
    info: &ResourceInfo,
    sub: &str,
    old: &Value,
    old_typed: &Value,
    new: &mut Value,
) {
    match sub {
        "status" => {
            // Status changes through /status, and the metadata the resource's
            // status strategy keeps (see `status_keeps`).
            let updated = std::mem::replace(new, old_typed.clone());
            keep_field(new, &updated, "status");
            for field in status_keeps(info) {
                keep_meta(new, &updated, field);
            }
        }
        "finalize" => {
            // The namespace finalize strategy resets only the status: spec and
            // metadata (labels, annotations) change.
            let spec = new.get("spec").cloned();
            let updated = std::mem::replace(new, old_typed.clone());
            if let Some(s) = spec {
                new["spec"] = s;
            }
            for field in ["labels", "annotations"] {
                keep_meta(new, &updated, field);
            }
        }
        "scale" => {
            // The Scale's spec.replicas, written where the resource keeps it.
            let replicas = new["spec"]["replicas"].clone();
            *new = old_typed.clone();
            let (spec_path, _) = scale_paths(info);
            if new["spec"].is_object() || new["spec"].is_null() {
                set_path(new, spec_path, replicas);
            }
        }
        _ => {
            if info.has_status() || info.resource == "namespaces" {
                keep_field(new, old, "status");
            }
            if info.resource == "namespaces" {
                new["spec"] = old["spec"].clone();
            }
        }
    }
}

/// Sets `<field>` of `new` to that of `from` (removing it when absent).
fn keep_field(new: &mut Value, from: &Value, field: &str) {
    match from.get(field) {
        Some(v) => new[field] = v.clone(),
        None => {
            if let Some(mm) = new.as_object_mut() {
                mm.remove(field);
            }
        }
    }
}

/// The built-in strategies' defaulting (a Service keeps its allocated cluster IPs) and
/// the generation, bumped when anything but metadata and status changed.
fn default_and_count(info: &ResourceInfo, old: &Value, old_typed: &Value, new: &mut Value) {
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
        crate::defaults::apply(info, new);
    }
    if info.generation && strip_for_compare(new) != strip_for_compare(old_typed) {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(g);
    }
}

/// One update (PUT or PATCH) of one object.
struct Update<'a> {
    c: Call<'a>,
    query: &'a HashMap<String, String>,
    name: String,
    sub: String,
}

impl Update<'_> {
    fn decoding(&self) -> Decoding<'_> {
        Decoding {
            ctx: self.c.ctx,
            info: &self.c.t.info,
            version: &self.c.t.version,
            field_validation: field_validation(self.query),
        }
    }

    /// What kube-apiserver refuses of the updated object: new finalizers on an object being
    /// deleted, invalid webhook configurations, kcp rules, schema and metadata errors, and
    /// changes to an immutable ConfigMap or Secret.
    fn validate(&self, old: &Value, old_typed: &Value, new: &mut Value) -> ApiResult<()> {
        let (state, t, cluster) = (self.c.state, self.c.t, self.c.cluster);
        let info = &t.info;
        let name = self.name.as_str();
        if !old["metadata"]["deletionTimestamp"].is_null() {
            // Finalizers may only be removed once deletion started.
            let finalizers = |v: &Value| {
                v["metadata"]["finalizers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            };
            let old_f = finalizers(old);
            if finalizers(new).iter().any(|f| !old_f.contains(f)) {
                return Err(ApiError::forbidden(
                    info,
                    name,
                    "no new finalizers can be added if the object is being deleted",
                ));
            }
        }
        if info.group == "admissionregistration.k8s.io"
            && info.resource == "validatingwebhookconfigurations"
        {
            admission::validate_config(info, new)?;
            admission::default_config(new);
        }
        if info.group == "admissionregistration.k8s.io"
            && info.resource == "validatingadmissionpolicies"
        {
            admission::validate_policy(info, new)?;
        }
        kcp::prepare_update(state, info, cluster, old, new)?;
        self.decoding().schema(name, new, Some(old_typed))?;
        validate_meta(info, name, new)?;
        if info.group.is_empty()
            && (info.resource == "configmaps" || info.resource == "secrets")
            && old["immutable"] == json!(true)
        {
            let forbidden = |f: &str| {
                cause(
                    f,
                    "FieldValueForbidden",
                    "Forbidden: field is immutable when `immutable` is set",
                )
            };
            let mut causes = vec![];
            if new["immutable"] != json!(true) {
                causes.push(forbidden("immutable"));
            }
            for f in ["data", "binaryData"] {
                if new.get(f) != old.get(f) {
                    causes.push(forbidden(f));
                }
            }
            if !causes.is_empty() {
                return Err(ApiError::invalid(info, name, causes));
            }
        }
        Ok(())
    }

    /// Server-side apply of an object that does not exist creates it.
    async fn create_on_apply(&self, obj: &Value) -> ApiResult<Resp> {
        check_shape(&self.c.t.info, obj)?;
        let mut obj = obj.clone();
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        obj["metadata"]["name"] = json!(self.name);
        let mut q = self.query.clone();
        q.remove("force");
        create(self.c, obj, &q).await
    }

    /// Rejects a change whose UID or resourceVersion is not that of the stored object.
    fn check_preconditions(
        &self,
        old: &Value,
        new: &Value,
        client_rv: Option<&str>,
    ) -> ApiResult<()> {
        let info = &self.c.t.info;
        if let Some(uid) = new["metadata"]["uid"].as_str()
            && !uid.is_empty()
            && uid != meta(old, "uid")
        {
            return Err(uid_precondition_failed(info, &self.name, uid, old));
        }
        if let Some(rv) = client_rv
            && rv != meta(old, "resourceVersion")
        {
            return Err(ApiError::stale(info, &self.name));
        }
        Ok(())
    }

    /// RBAC escalation checks and validating admission of the UPDATE.
    async fn admit(
        &self,
        apply: bool,
        old: &Value,
        old_typed: &Value,
        new: &Value,
    ) -> ApiResult<()> {
        let t = self.c.t;
        let info = &t.info;
        let namespace = t.namespace.as_deref().unwrap_or("");
        rbac::check_escalation(
            self.c.state,
            self.c.ctx,
            info,
            self.c.cluster,
            namespace,
            &self.name,
            new,
            Some(old),
        )?;
        crate::authz::admit_update(self.c.state, self.c.ctx, info, self.c.cluster, new, old)?;
        let mut opts = options("UpdateOptions", self.query);
        if apply && let Some(o) = opts.as_object_mut() {
            o.remove("fieldValidation");
        }
        let base = review(t, self.c.cluster, "UPDATE", dry_run(self.query), opts);
        let attrs = Attrs {
            sub: &self.sub,
            name: Some(&self.name),
            namespace,
            object: Some(new),
            old: Some(old_typed),
            ..base
        };
        admission::validate(self.c.state, self.c.ctx, attrs).await
    }

    /// The response to an update: the object, or its Scale through `/scale`.
    fn respond(&self, stored: &Value) -> Resp {
        let info = &self.c.t.info;
        if self.sub == "scale" {
            Resp::Json(200, scale_of(info, stored))
        } else {
            Resp::Json(200, typed(info, &self.c.t.version, stored))
        }
    }

    /// Stores the change (or deletes the object when it was waiting only for the
    /// finalizers this update removed); `Err(StoreError)` when the store refused it.
    async fn store(&self, key: &Key, old: &Arc<Value>, new: Value) -> Result<Resp, StoreError> {
        let (state, info, cluster) = (self.c.state, &self.c.t.info, self.c.cluster);
        let finalizing = !new["metadata"]["deletionTimestamp"].is_null()
            && new["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty())
            && !(info.resource == "namespaces"
                && new["spec"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty()));
        let out = if finalizing {
            let stored = state
                .store
                .delete(&info.gr(), key, Some(store::rv_of(old)))?;
            crate::controllers::after_write(state, info, cluster, Some(old), None).await;
            stored
        } else {
            let stored = state
                .store
                .update(&info.gr(), key, new, store::rv_of(old))?;
            crate::controllers::after_write(state, info, cluster, Some(old), Some(&stored))
                .await
                .unwrap_or(stored)
        };
        Ok(self.respond(&out))
    }
}

/// PUT and PATCH (and the simulator's own changes): mutates the stored object, keeps
/// what the client cannot change, validates, admits and stores, retrying on a
/// conflict unless the client named the resourceVersion it updates from.
pub async fn update(c: Call<'_>, query: &HashMap<String, String>, m: Mutation) -> ApiResult<Resp> {
    let (state, t, cluster) = (c.state, c.t, c.cluster);
    let info = &t.info;
    let u = Update {
        c,
        query,
        name: t.name.clone().unwrap_or_default(),
        sub: t.sub.clone().unwrap_or_default(),
    };
    let name = u.name.as_str();
    let key = key_for(cluster, info, t.namespace.as_deref(), name);
    let retryable = !matches!(m, Mutation::Replace(_));
    let apply = matches!(m, Mutation::Apply(_));
    for _attempt in 0..16 {
        let Some(old) = state.store.get(&info.gr(), &key) else {
            if let Mutation::Apply(obj) = &m
                && u.sub.is_empty()
            {
                return u.create_on_apply(obj).await;
            }
            return Err(ApiError::not_found(info, name));
        };
        let old_typed = typed(info, &t.version, &old);
        let (mut new, client_rv) = mutate(&m, t, name, &old_typed)?;
        check_shape(info, &new)?;
        u.decoding().builtin_fields(&mut new, Some(&old_typed))?;
        u.check_preconditions(&old, &new, client_rv.as_deref())?;
        keep_system_meta(t, cluster, name, &old, &mut new);
        apply_subresource(info, &u.sub, &old, &old_typed, &mut new);
        default_and_count(info, &old, &old_typed, &mut new);
        u.validate(&old, &old_typed, &mut new)?;
        u.admit(apply, &old, &old_typed, &new).await?;
        let unchanged = {
            let mut cmp_new = new.clone();
            let mut cmp_old = old_typed.clone();
            cmp_new["metadata"]["resourceVersion"] = Value::Null;
            cmp_old["metadata"]["resourceVersion"] = Value::Null;
            cmp_new == cmp_old
        };
        if unchanged {
            if u.sub == "scale" {
                return Ok(Resp::Json(200, scale_of(info, &old)));
            }
            return Ok(Resp::Json(200, old_typed));
        }
        if dry_run(query) {
            return Ok(Resp::Json(200, new));
        }
        match u.store(&key, &old, new).await {
            Ok(resp) => return Ok(resp),
            Err(StoreError::Conflict) if retryable || client_rv.is_none() => continue,
            Err(StoreError::Conflict) => return Err(ApiError::stale(info, name)),
            Err(StoreError::NotFound) => return Err(ApiError::not_found(info, name)),
            Err(StoreError::AlreadyExists) => return Err(ApiError::internal("store failure")),
        }
    }
    Err(ApiError::stale(info, name))
}
