//! JSON merge patch, a strategic-merge-patch approximation and JSON patch.

use serde_json::{Map, Value};

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    if let Value::Object(p) = patch {
        if !target.is_object() {
            *target = Value::Object(Map::new());
        }
        if let Value::Object(t) = target {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
    } else {
        *target = patch.clone();
    }
}

/// Lists merged by key in strategic merge patch (field name -> merge key); primitive
/// lists merged as sets.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "volumeMounts"
        | "imagePullSecrets"
        | "ports" => Some("name"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        _ => None,
    }
}

const SET_LISTS: &[&str] = &["finalizers"];

/// Strategic merge patch, good enough for kubectl: `$patch`, `$retainKeys`,
/// `$setElementOrder/*`, `$deleteFromPrimitiveList/*` directives, lists with merge keys.
pub fn strategic(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(|v| v.as_str()) == Some("replace") {
        let mut np = p.clone();
        np.remove("$patch");
        *target = Value::Object(np);
        return;
    }
    if p.get("$patch").and_then(|v| v.as_str()) == Some("delete") {
        *target = Value::Null;
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(cur)), Value::Array(del)) = (t.get_mut(field), v) {
                cur.retain(|x| !del.contains(x));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(Value::Array(cur)), Value::Array(items)) => {
                if let Some(mk) = merge_key(k) {
                    for item in items {
                        let key = &item[mk];
                        let directive = item.get("$patch").and_then(|d| d.as_str());
                        let pos = cur.iter().position(|c| !key.is_null() && &c[mk] == key);
                        match (pos, directive) {
                            (Some(i), Some("delete")) => {
                                cur.remove(i);
                            }
                            (Some(i), _) => strategic(&mut cur[i], item),
                            (None, Some("delete")) => {}
                            (None, _) => {
                                let mut n = Value::Null;
                                strategic(&mut n, item);
                                cur.push(n);
                            }
                        }
                    }
                } else if SET_LISTS.contains(&k.as_str()) {
                    for item in items {
                        if !cur.contains(item) {
                            cur.push(item.clone());
                        }
                    }
                } else {
                    *cur = items.clone();
                }
            }
            (Some(cur), _) if v.is_object() && cur.is_object() => strategic(cur, v),
            _ => {
                let mut n = Value::Null;
                if v.is_object() {
                    strategic(&mut n, v);
                } else {
                    n = v.clone();
                }
                t.insert(k.clone(), n);
            }
        }
    }
}

/// RFC 6902 JSON patch.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| format!("invalid JSON patch: {e}"))?;
    json_patch::patch(target, &p).map_err(|e| e.to_string())
}
