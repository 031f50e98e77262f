//! POST (create): a new object, with generateName, system metadata, defaulting,
//! validation and admission.

use super::request::{
    dry_run, field_validation, key_for, meta, options, review, strip_system_meta, typed,
};
use super::validate::{
    Decoding, check_api_version, check_namespace, check_shape, validate_meta, validate_name,
};
use super::{Call, Target};
use crate::admission::Attrs;
use crate::errors::{ApiError, ApiResult, cause};
use crate::registry::ResourceInfo;
use crate::server::{Resp, State};
use crate::store::{Key, StoreError};
use crate::{admission, kcp, now_rfc3339, rbac};
use serde_json::{Value, json};
use std::collections::HashMap;

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn random_suffix(n: usize) -> String {
    use rand::Rng;
    let mut r = rand::rng();
    (0..n)
        .map(|_| NAME_CHARS[r.random_range(0..NAME_CHARS.len())] as char)
        .collect()
}

/// POST: a new object, as kube-apiserver's create handler makes it: decoded and
/// checked against the target, named, placed in its namespace, stamped with the
/// system metadata, defaulted, validated, admitted and stored.
pub async fn create(
    c: Call<'_>,
    mut obj: Value,
    query: &HashMap<String, String>,
) -> ApiResult<Resp> {
    let (state, ctx, t, cluster) = (c.state, c.ctx, c.t, c.cluster);
    let info = &t.info;
    check_api_version(info, &t.version, &obj)?;
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
    let decoding = Decoding {
        ctx,
        info,
        version: &t.version,
        field_validation: field_validation(query),
    };
    decoding.builtin_fields(&mut obj, None)?;
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    strip_system_meta(&mut obj);
    let ns = place(t, &mut obj)?;
    let name = name(info, &mut obj)?;
    validate_name(info, &name)?;
    check_crd_not_terminating(state, info, cluster)?;
    if let Some(ns) = &ns {
        check_namespace(state, cluster, info, ns, &name)?;
    }
    stamp(t, cluster, &mut obj)?;
    prepare_create(state, info, cluster, &mut obj)?;
    decoding.schema(&name, &mut obj, None)?;
    validate_meta(info, &name, &obj)?;
    let namespace = ns.as_deref().unwrap_or("");
    rbac::check_escalation(state, ctx, info, cluster, namespace, &name, &obj, None)?;
    crate::authz::admit_create(state, ctx, info, cluster, &mut obj)?;
    let base = review(
        t,
        cluster,
        "CREATE",
        dry_run(query),
        options("CreateOptions", query),
    );
    let attrs = Attrs {
        sub: "",
        name: Some(&name),
        namespace,
        object: Some(&obj),
        ..base
    };
    admission::validate(state, ctx, attrs).await?;
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

/// The namespace of a new object: the request's (a different one in the body is a
/// 400); none for a cluster-scoped kind.
fn place(t: &Target, obj: &mut Value) -> ApiResult<Option<String>> {
    if !t.info.namespaced {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        return Ok(None);
    }
    let path_ns = t.namespace.clone().unwrap_or_default();
    let body_ns = meta(obj, "namespace");
    if !body_ns.is_empty() && body_ns != path_ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    obj["metadata"]["namespace"] = json!(path_ns);
    Ok(Some(path_ns))
}

/// The name of a new object: its own, or its `generateName` with a random suffix.
fn name(info: &ResourceInfo, obj: &mut Value) -> ApiResult<String> {
    let name = meta(obj, "name");
    if !name.is_empty() {
        return Ok(name.to_string());
    }
    let gen_name = meta(obj, "generateName");
    if gen_name.is_empty() {
        return Err(ApiError::invalid(
            info,
            "",
            vec![cause(
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            )],
        ));
    }
    let name = format!("{gen_name}{}", random_suffix(5));
    obj["metadata"]["name"] = json!(name);
    Ok(name)
}

/// 405 for a new custom resource while its CRD is being deleted.
fn check_crd_not_terminating(state: &State, info: &ResourceInfo, cluster: &str) -> ApiResult<()> {
    if info.builtin {
        return Ok(());
    }
    let key = Key {
        cluster: cluster.to_string(),
        namespace: String::new(),
        name: format!("{}.{}", info.resource, info.group),
    };
    match state.store.get(&crate::controllers::crd_gr(), &key) {
        Some(crd) if !crd["metadata"]["deletionTimestamp"].is_null() => {
            Err(ApiError::method_not_allowed(
                "create not allowed while custom resource definition is terminating",
            ))
        }
        _ => Ok(()),
    }
}

/// The system metadata of a new object: kind, apiVersion, uid, creationTimestamp,
/// generation and logical cluster; no resourceVersion or deletion marks.
fn stamp(t: &Target, cluster: &str, obj: &mut Value) -> ApiResult<()> {
    let info = &t.info;
    obj["apiVersion"] = json!(info.api_version(&t.version));
    obj["kind"] = json!(info.kind);
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
    if !cluster.is_empty() {
        obj["metadata"]["annotations"]["kcp.io/cluster"] = json!(cluster);
    }
    Ok(())
}

pub(super) fn prepare_create(
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
            let kind = obj["spec"]["names"]["kind"].as_str().unwrap_or("");
            let mut causes = vec![];
            for (field, value) in [
                ("spec.group", group),
                ("spec.names.plural", plural),
                ("spec.names.kind", kind),
            ] {
                if value.is_empty() {
                    causes.push(cause(field, "FieldValueRequired", "Required value"));
                }
            }
            if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
                let message = format!(
                    "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                );
                causes.push(cause("metadata.name", "FieldValueInvalid", message));
            }
            if obj["spec"]["versions"]
                .as_array()
                .is_none_or(|v| v.is_empty())
            {
                causes.push(cause(
                    "spec.versions",
                    "FieldValueInvalid",
                    "Invalid value: null: must have exactly one version marked as storage version",
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
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            admission::validate_policy(info, obj)?;
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

/// A Pod's QoS class, as kube-apiserver computes it on create: BestEffort without
/// any cpu or memory request or limit, Guaranteed when every container limits both
/// and requests what it limits (an unset request takes the limit), else Burstable.
pub(super) fn pod_qos_class(pod: &Value) -> &'static str {
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
