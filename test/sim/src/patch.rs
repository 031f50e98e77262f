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

/// Lists merged by key in strategic merge patch (field name -> merge key candidates,
/// the first one present in an item wins); primitive lists merged as sets.
fn merge_keys(field: &str) -> Option<&'static [&'static str]> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "webhooks"
        | "secrets"
        | "resourceClaims"
        | "schedulingGates" => Some(&["name"]),
        "resizePolicy" => Some(&["resourceName"]),
        "addresses" => Some(&["type"]),
        "ports" => Some(&["containerPort", "port"]),
        "volumeMounts" => Some(&["mountPath"]),
        "volumeDevices" => Some(&["devicePath"]),
        "hostAliases" | "podIPs" | "hostIPs" => Some(&["ip"]),
        "topologySpreadConstraints" => Some(&["topologyKey"]),
        "conditions" => Some(&["type"]),
        "ownerReferences" => Some(&["uid"]),
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
    let retain: Option<Vec<String>> = p.get("$retainKeys").and_then(|r| r.as_array()).map(|a| {
        a.iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect()
    });
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
                if let Some(mks) = merge_keys(k) {
                    for item in items {
                        let mk = mks
                            .iter()
                            .find(|m| !item[**m].is_null())
                            .copied()
                            .unwrap_or(mks[0]);
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
    if let Some(keep) = retain {
        t.retain(|k, _| keep.contains(k));
    }
}

/// RFC 6902 JSON patch.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| format!("invalid JSON patch: {e}"))?;
    json_patch::patch(target, &p).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge() {
        let mut d = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
            "template": {"spec": {"containers": [
                {"name": "a", "image": "a:1", "ports": [{"containerPort": 80}, {"containerPort": 81}], "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "b:1"}]}}},
            "metadata": {"finalizers": ["f1"]}});
        let p = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"},
            "template": {"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [
                {"name": "a", "image": "a:2", "ports": [{"containerPort": 81, "protocol": "UDP"}], "env": [{"$patch": "delete", "name": "X"}]},
                {"$patch": "delete", "name": "b"}]}}},
            "metadata": {"finalizers": ["f2"], "$deleteFromPrimitiveList/finalizers": ["f1"]}});
        strategic(&mut d, &p);
        assert_eq!(d["spec"]["strategy"], json!({"type": "Recreate"}));
        let cs = d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers");
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0]["image"], "a:2");
        assert_eq!(
            cs[0]["ports"],
            json!([{"containerPort": 80}, {"containerPort": 81, "protocol": "UDP"}])
        );
        assert_eq!(cs[0]["env"], json!([]));
        assert_eq!(d["metadata"]["finalizers"], json!(["f2"]));
    }
}
