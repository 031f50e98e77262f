//! Shapes every verb shares: body decoding, storage keys, objects as served,
//! metadata-only and Table requests, and the `*Options` admission sees.

use super::Target;
use crate::admission::Attrs;
use crate::errors::{ApiError, ApiResult};
use crate::kcp;
use crate::registry::ResourceInfo;
use crate::store::Key;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::{Value, json};
use std::collections::HashMap;

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

pub(super) fn list_item(info: &ResourceInfo, version: &str, obj: &Value) -> Value {
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

pub(super) fn meta<'a>(v: &'a Value, f: &str) -> &'a str {
    v["metadata"][f].as_str().unwrap_or("")
}

/// `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`
pub(super) fn wants_meta(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"))
}

pub(super) fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

pub(super) fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"].clone()})
}

pub(super) fn dry_run(query: &HashMap<String, String>) -> bool {
    query.get("dryRun").is_some_and(|d| d == "All")
}

/// The `fieldValidation` of a write ("" when not given).
pub(super) fn field_validation(query: &HashMap<String, String>) -> &str {
    query
        .get("fieldValidation")
        .map(String::as_str)
        .unwrap_or("")
}

pub(super) fn options(kind: &str, query: &HashMap<String, String>) -> Value {
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

pub(super) fn strip_system_meta(obj: &mut Value) {
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

/// The attributes of an admission review of a request on `t` in `cluster`: the
/// target's subresource, name and namespace, no objects (the verb adds them).
pub(super) fn review<'a>(
    t: &'a Target,
    cluster: &'a str,
    op: &'a str,
    dry_run: bool,
    options: Value,
) -> Attrs<'a> {
    Attrs {
        info: &t.info,
        version: &t.version,
        sub: t.sub.as_deref().unwrap_or(""),
        op,
        name: t.name.as_deref(),
        namespace: t.namespace.as_deref().unwrap_or(""),
        cluster,
        object: None,
        old: None,
        dry_run,
        options,
    }
}
