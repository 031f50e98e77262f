//! Structural-schema handling of custom resources, as kube-apiserver's apiextensions
//! does it: pruning of unknown fields, defaulting, OpenAPI v3 validation and
//! `x-kubernetes-validations` CEL rules (with `self` / `oldSelf`).

use crate::cel;
use serde_json::Value;

/// One validation failure: (field path, reason, message).
pub type Cause = (String, String, String);

fn preserve(s: &Value) -> bool {
    s["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Compiled `pattern`s, cached (schemas are validated on every write).
pub fn cached_regex(p: &str) -> Option<regex::Regex> {
    static CACHE: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<String, Option<regex::Regex>>>,
    > = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut m = cache.lock().ok()?;
    if m.len() > 1024 {
        m.clear();
    }
    m.entry(p.to_string())
        .or_insert_with(|| regex::Regex::new(p).ok())
        .clone()
}

/// Prunes unknown fields and drops nulls of non-nullable fields (recursively); the
/// paths of pruned unknown fields are appended to `removed`.
pub fn prune(v: &mut Value, s: &Value, root: bool, path: &str, removed: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(props) = s["properties"].as_object() {
                let keep_unknown = preserve(s) || s["additionalProperties"].is_object();
                let keys: Vec<String> = m.keys().cloned().collect();
                for k in keys {
                    if root && (k == "apiVersion" || k == "kind" || k == "metadata") {
                        continue;
                    }
                    match props.get(&k) {
                        Some(ps) => {
                            if m.get(&k).is_some_and(|x| x.is_null())
                                && ps["nullable"].as_bool() != Some(true)
                            {
                                m.remove(&k);
                            } else if let Some(x) = m.get_mut(&k) {
                                prune(x, ps, false, &join(path, &k), removed);
                            }
                        }
                        None if !keep_unknown => {
                            m.remove(&k);
                            removed.push(join(path, &k));
                        }
                        None => {}
                    }
                }
            } else if s["additionalProperties"].is_object() {
                let ap = &s["additionalProperties"];
                for (k, x) in m.iter_mut() {
                    prune(x, ap, false, &join(path, k), removed);
                }
            } else if !preserve(s)
                && !root
                && s["type"].as_str() == Some("object")
                && s["x-kubernetes-embedded-resource"].as_bool() != Some(true)
            {
                removed.extend(m.keys().map(|k| join(path, k)));
                m.clear();
            }
        }
        Value::Array(a) if s["items"].is_object() => {
            for (i, x) in a.iter_mut().enumerate() {
                prune(x, &s["items"], false, &format!("{path}[{i}]"), removed);
            }
        }
        _ => {}
    }
}

/// Applies `default`s (recursively, only where the parent exists).
pub fn default(v: &mut Value, s: &Value) {
    match v {
        Value::Object(m) => {
            if let Some(props) = s["properties"].as_object() {
                for (k, ps) in props {
                    if !m.contains_key(k)
                        && let Some(d) = ps.get("default")
                    {
                        m.insert(k.clone(), d.clone());
                    }
                    if let Some(x) = m.get_mut(k) {
                        default(x, ps);
                    }
                }
            } else if s["additionalProperties"].is_object() {
                for (_, x) in m.iter_mut() {
                    default(x, &s["additionalProperties"]);
                }
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                default(x, &s["items"]);
            }
        }
        _ => {}
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// Validates `v` against schema `s`; `old` is the corresponding stored value (UPDATE).
pub fn validate(
    v: &Value,
    old: Option<&Value>,
    s: &Value,
    path: &str,
    root: bool,
    out: &mut Vec<Cause>,
) {
    if v.is_null() {
        if s["nullable"].as_bool() != Some(true) && !root {
            out.push((
                path.into(),
                "FieldValueInvalid".into(),
                format!(
                    "Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                    s["type"].as_str().unwrap_or("object")
                ),
            ));
        }
        return;
    }
    let int_or_string = s["x-kubernetes-int-or-string"].as_bool() == Some(true);
    if let Some(t) = s["type"].as_str() {
        let actual = type_name(v);
        let ok = actual == t || (t == "number" && actual == "integer");
        if !ok && !int_or_string {
            out.push((
                path.into(),
                "FieldValueTypeInvalid".into(),
                format!(
                    "Invalid value: {}: {path} in body must be of type {t}: \"{actual}\"",
                    short(v)
                ),
            ));
            return;
        }
    }
    if let Some(e) = s["enum"].as_array()
        && !e.contains(v)
    {
        let supported: Vec<String> = e.iter().map(|x| x.to_string()).collect();
        out.push((
            path.into(),
            "FieldValueNotSupported".into(),
            format!(
                "Unsupported value: {}: supported values: {}",
                v,
                supported.join(", ")
            ),
        ));
    }
    match v {
        Value::String(st) => {
            if let Some(p) = s["pattern"].as_str()
                && let Some(re) = cached_regex(p)
                && !re.is_match(st)
            {
                out.push((
                    path.into(),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: {v}: {path} in body should match '{p}'"),
                ));
            }
            if let Some(n) = s["maxLength"].as_u64()
                && st.chars().count() as u64 > n
            {
                out.push((
                    path.into(),
                    "FieldValueTooLong".into(),
                    format!("Too long: may not be more than {n} bytes"),
                ));
            }
            if let Some(n) = s["minLength"].as_u64()
                && (st.chars().count() as u64) < n
            {
                out.push((
                    path.into(),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: {v}: {path} in body should be at least {n} chars long"),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(m) = s["minimum"].as_f64()
                && x < m
            {
                out.push((
                    path.into(),
                    "FieldValueInvalid".into(),
                    format!(
                        "Invalid value: {v}: {path} in body should be greater than or equal to {m}"
                    ),
                ));
            }
            if let Some(m) = s["maximum"].as_f64()
                && x > m
            {
                out.push((
                    path.into(),
                    "FieldValueInvalid".into(),
                    format!(
                        "Invalid value: {v}: {path} in body should be less than or equal to {m}"
                    ),
                ));
            }
        }
        Value::Array(a) => {
            too_many(s, "maxItems", a.len(), path, out);
            if let Some(n) = s["minItems"].as_u64()
                && (a.len() as u64) < n
            {
                out.push((
                    path.into(),
                    "FieldValueInvalid".into(),
                    format!(
                        "Invalid value: {}: {path} in body should have at least {n} items",
                        a.len()
                    ),
                ));
            }
            if s["items"].is_object() {
                for (i, x) in a.iter().enumerate() {
                    let o = old.and_then(|o| o.get(i));
                    validate(x, o, &s["items"], &format!("{path}[{i}]"), false, out);
                }
            }
        }
        Value::Object(m) => {
            for r in s["required"].as_array().into_iter().flatten() {
                if let Some(r) = r.as_str()
                    && !m.contains_key(r)
                {
                    out.push((
                        join(path, r),
                        "FieldValueRequired".into(),
                        "Required value".into(),
                    ));
                }
            }
            if let Some(props) = s["properties"].as_object() {
                for (k, ps) in props {
                    if root && k == "metadata" {
                        continue;
                    }
                    if let Some(x) = m.get(k) {
                        validate(
                            x,
                            old.and_then(|o| o.get(k)),
                            ps,
                            &join(path, k),
                            false,
                            out,
                        );
                    }
                }
            } else if s["additionalProperties"].is_object() {
                for (k, x) in m {
                    validate(
                        x,
                        old.and_then(|o| o.get(k)),
                        &s["additionalProperties"],
                        &join(path, k),
                        false,
                        out,
                    );
                }
            }
            too_many(s, "maxProperties", m.len(), path, out);
        }
        _ => {}
    }
    // x-kubernetes-validations
    for rule in s["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let expr = rule["rule"].as_str().unwrap_or("");
        let transition = expr.contains("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let vars = cel::Vars {
            object: Value::Null,
            old_object: Value::Null,
            request: Value::Null,
            self_value: Some(v.clone()),
            old_self: old.cloned(),
            extra: vec![],
        };
        let field = match rule["fieldPath"].as_str() {
            Some(fp) if !fp.is_empty() => format!("{path}{fp}"),
            _ => path.to_string(),
        };
        let ty = s["type"].as_str().unwrap_or("object");
        match cel::eval_bool(expr, &vars) {
            Ok(true) => {}
            Ok(false) => {
                let msg = rule["message"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("failed rule: {}", expr.trim()));
                let reason = rule["reason"].as_str().unwrap_or("FieldValueInvalid");
                let (reason, text) = match reason {
                    "FieldValueRequired" => {
                        ("FieldValueRequired", format!("Required value: {msg}"))
                    }
                    "FieldValueForbidden" => ("FieldValueForbidden", format!("Forbidden: {msg}")),
                    "FieldValueDuplicate" => {
                        ("FieldValueDuplicate", format!("Duplicate value: {msg}"))
                    }
                    _ => (
                        "FieldValueInvalid",
                        format!("Invalid value: \"{ty}\": {msg}"),
                    ),
                };
                out.push((field, reason.into(), text));
            }
            Err(e)
                if e.0.starts_with("found no matching overload")
                    || e.0.starts_with("Syntax error")
                    || e.0.starts_with("undeclared") =>
            {
                // Outside the simulator's CEL subset: not enforced.
                tracing::debug!("skipping x-kubernetes-validations rule {expr:?}: {}", e.0);
            }
            Err(e) => out.push((
                field,
                "FieldValueInvalid".into(),
                format!(
                    "Invalid value: \"{ty}\": {} evaluating rule: {}",
                    e.0,
                    expr.trim()
                ),
            )),
        }
    }
}

/// Prunes, defaults and validates a custom resource against its version schema.
/// Prunes, defaults and validates; returns (validation causes, pruned unknown fields).
pub fn process(obj: &mut Value, old: Option<&Value>, schema: &Value) -> (Vec<Cause>, Vec<String>) {
    let mut removed = vec![];
    prune(obj, schema, true, "", &mut removed);
    default(obj, schema);
    let mut causes = vec![];
    let mut body = obj.clone();
    let mut old_body = old.cloned();
    for b in [Some(&mut body), old_body.as_mut()].into_iter().flatten() {
        if let Some(m) = b.as_object_mut() {
            m.remove("metadata");
            m.remove("apiVersion");
            m.remove("kind");
        }
    }
    let mut s = schema.clone();
    if let Some(p) = s.get_mut("properties").and_then(|p| p.as_object_mut()) {
        p.remove("metadata");
        p.remove("apiVersion");
        p.remove("kind");
    }
    validate(&body, old_body.as_ref(), &s, "", true, &mut causes);
    (causes, removed)
}

/// Escapes used by Kubernetes CEL for property names that are not CEL identifiers.
pub fn unescape_field(f: &str) -> String {
    if !f.contains("__") {
        return f.to_string();
    }
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    if let Some(inner) = f.strip_prefix("__").and_then(|x| x.strip_suffix("__"))
        && RESERVED.contains(&inner)
    {
        return inner.to_string();
    }
    f.replace("__underscores__", "\u{0}")
        .replace("__dot__", ".")
        .replace("__dash__", "-")
        .replace("__slash__", "/")
        .replace('\u{0}', "__")
}

/// `FieldValueTooMany` when `len` exceeds the schema's `key` (maxItems, maxProperties).
fn too_many(s: &Value, key: &str, len: usize, path: &str, out: &mut Vec<Cause>) {
    if let Some(n) = s[key].as_u64()
        && len as u64 > n
    {
        out.push((
            path.into(),
            "FieldValueTooMany".into(),
            format!("Too many: {len}: must have at most {n} items"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prune_default_validate() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["resources"], "properties": {
                "enforcement": {"type": "string", "default": "Enforce", "enum": ["Enforce", "Warn", "Audit"]},
                "resources": {"type": "array", "minItems": 1, "items": {"type": "object",
                    "properties": {"group": {"type": "string", "default": ""}, "namespace": {"type": "string"}, "resource": {"type": "string", "pattern": "^[a-z]+$"}},
                    "x-kubernetes-validations": [{"rule": "!has(self.__namespace__) || self.resource != 'namespaces'", "message": "no namespace for namespaces", "fieldPath": ".namespace"}]}}}}}});
        let mut o = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": {"resources": [{"resource": "pods", "junk": 1}], "junk": true}});
        assert!(process(&mut o, None, &schema).0.is_empty());
        assert_eq!(
            o["spec"],
            json!({"enforcement": "Enforce", "resources": [{"group": "", "resource": "pods"}]})
        );
        let mut bad = json!({"spec": {"enforcement": "Nope", "resources": [{"resource": "namespaces", "namespace": "x"}, {"resource": "Bad"}]}});
        let causes = process(&mut bad, None, &schema).0;
        let msgs: Vec<String> = causes.iter().map(|(f, _, m)| format!("{f}: {m}")).collect();
        assert_eq!(
            msgs,
            [
                "spec.enforcement: Unsupported value: \"Nope\": supported values: \"Enforce\", \"Warn\", \"Audit\"",
                "spec.resources[0].namespace: Invalid value: \"object\": no namespace for namespaces",
                "spec.resources[1].resource: Invalid value: \"Bad\": spec.resources[1].resource in body should match '^[a-z]+$'",
            ]
        );
        let mut missing = json!({"spec": {}});
        let causes = process(&mut missing, None, &schema).0;
        assert_eq!(causes[0].0, "spec.resources");
        assert_eq!(causes[0].2, "Required value");
    }
}
