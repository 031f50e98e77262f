//! The scale subresource: where a resource keeps its replicas, and its `Scale`.

use crate::registry::ResourceInfo;
use serde_json::{Value, json};

/// The `.spec.replicas`-style paths of `info`'s scale subresource.
pub(super) fn scale_paths(info: &ResourceInfo) -> (&str, &str) {
    match &info.scale_paths {
        Some((spec, status)) => (spec.as_str(), status.as_str()),
        None => (".spec.replicas", ".status.replicas"),
    }
}

/// The value at a `.a.b.c` path (a CRD's replica paths are dotted field paths).
pub(super) fn at_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .try_fold(obj, |v, k| v.get(k))
}

/// Sets the value at a `.a.b.c` path, creating the objects on the way.
pub(super) fn set_path(obj: &mut Value, path: &str, value: Value) {
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

pub(super) fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
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
