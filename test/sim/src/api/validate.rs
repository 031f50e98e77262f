//! What kube-apiserver checks of an object before storing it: names, the namespace,
//! the Go types' shapes, labels/annotations/finalizers/ownerReferences, unknown
//! fields (`fieldValidation`) and custom resource schemas.

use crate::errors::{ApiError, ApiResult, cause};
use crate::registry;
use crate::registry::ResourceInfo;
use crate::server::{Ctx, State};
use crate::store::Key;
use serde_json::{Value, json};
use std::sync::Arc;

pub fn is_dns1123_subdomain(s: &str) -> bool {
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

pub fn is_dns1123_label(s: &str) -> bool {
    !s.contains('.') && s.len() <= 63 && is_dns1123_subdomain(s)
}

/// kube-apiserver's message for a name that is no DNS-1123 subdomain.
const DNS1123_SUBDOMAIN_ERROR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// kube-apiserver's message for a name that is no DNS-1123 label.
const DNS1123_LABEL_ERROR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// The name rules of `info`: DNS-1123 labels for namespaces and services, subdomains
/// for the other built-in kinds (kcp's `cluster:name` forms aside), path-safe names
/// for the rest.
pub(super) fn validate_name(info: &ResourceInfo, name: &str) -> ApiResult<()> {
    let error = if info.resource == "namespaces" || info.resource == "services" {
        (!is_dns1123_label(name)).then_some(DNS1123_LABEL_ERROR)
    } else if info.builtin && !is_dns1123_subdomain(name) && !name.contains(':') {
        Some(DNS1123_SUBDOMAIN_ERROR)
    } else if name.contains('/') || name == "." || name == ".." || name.contains('%') {
        Some("may not contain '/'")
    } else {
        None
    };
    match error {
        Some(e) => Err(ApiError::invalid(
            info,
            name,
            vec![cause(
                "metadata.name",
                "FieldValueInvalid",
                format!("Invalid value: \"{name}\": {e}"),
            )],
        )),
        None => Ok(()),
    }
}

/// Checks the namespace exists and is not terminating (NamespaceLifecycle admission).
pub(super) fn check_namespace(
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
pub(super) fn check_shape(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
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

pub(super) fn qualified_name_errors(key: &str) -> Option<String> {
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
        return Some(format!("prefix part {DNS1123_SUBDOMAIN_ERROR}"));
    }
    None
}

/// ObjectMeta validation of labels and annotations.
pub(super) fn validate_meta(info: &ResourceInfo, name: &str, obj: &Value) -> ApiResult<()> {
    let mut causes = vec![];
    let invalid = |field: &str, message: String| cause(field, "FieldValueInvalid", message);
    static VALUE_RE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let value_re = VALUE_RE
        .get_or_init(|| regex::Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").ok())
        .as_ref();
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if let Some(e) = qualified_name_errors(k) {
                causes.push(invalid(
                    "metadata.labels",
                    format!("Invalid value: {k:?}: {e}"),
                ));
            }
            let Some(v) = v.as_str() else {
                let message = format!("Invalid value: {v}: label values must be strings");
                causes.push(invalid("metadata.labels", message));
                continue;
            };
            if v.len() > 63 {
                let message = format!("Invalid value: {v:?}: must be no more than 63 bytes");
                causes.push(invalid("metadata.labels", message));
            } else if value_re.as_ref().is_some_and(|r| !r.is_match(v)) {
                causes.push(invalid("metadata.labels", format!("Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")));
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
            let field = format!("metadata.finalizers[{i}]");
            causes.push(invalid(&field, format!("Invalid value: {f:?}: {e}")));
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
                let field = format!("metadata.ownerReferences.{f}");
                causes.push(invalid(
                    &field,
                    format!("Invalid value: \"\": {what} must not be empty"),
                ));
            }
        }
        if r["controller"] == json!(true) {
            controllers += 1;
        }
    }
    if controllers > 1 {
        causes.push(invalid("metadata.ownerReferences", "Invalid value: []v1.OwnerReference: Only one reference can have Controller set to true".into()));
    }
    if let Some(ann) = obj["metadata"]["annotations"].as_object() {
        let mut total = 0usize;
        for (k, v) in ann {
            total += k.len() + v.as_str().map(str::len).unwrap_or(0);
            if let Some(e) = qualified_name_errors(&k.to_ascii_lowercase()) {
                causes.push(invalid(
                    "metadata.annotations",
                    format!("Invalid value: {k:?}: {e}"),
                ));
            }
            if !v.is_string() {
                let message = format!("Invalid value: {v}: annotation values must be strings");
                causes.push(invalid("metadata.annotations", message));
            }
        }
        if total > 256 * 1024 {
            causes.push(cause(
                "metadata.annotations",
                "FieldValueTooLong",
                "Too long: may not be more than 262144 bytes",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

/// How a write decodes its object: the caller (who gets the warnings), the kind and
/// version, and the request's `fieldValidation`.
pub(super) struct Decoding<'a> {
    pub ctx: &'a Ctx,
    pub info: &'a ResourceInfo,
    pub version: &'a str,
    pub field_validation: &'a str,
}

impl Decoding<'_> {
    /// `fieldValidation` for built-in kinds: unknown fields (not already stored in
    /// `old`) are reported, then dropped.
    pub(super) fn builtin_fields(&self, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        let info = self.info;
        if !info.builtin {
            return Ok(());
        }
        if self.field_validation == "Strict" || self.field_validation == "Warn" {
            let mut unknown =
                crate::builtin_schema::unknown_fields(&info.group, &info.resource, obj);
            if let Some(o) = old {
                let before = crate::builtin_schema::unknown_fields(&info.group, &info.resource, o);
                unknown.retain(|u| !before.contains(u));
            }
            self.report_unknown(&unknown)?;
        }
        crate::builtin_schema::prune_unknown(&info.group, &info.resource, obj);
        Ok(())
    }

    /// Pruning, defaulting and validation of custom resources against their schema,
    /// unknown fields reported as `fieldValidation` says.
    pub(super) fn schema(&self, name: &str, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        let info = self.info;
        if info.builtin {
            return Ok(());
        }
        let Some((_, schema)) = info.schemas.iter().find(|(v, _)| v == self.version) else {
            return Ok(());
        };
        let (causes, removed) = crate::schema::process(obj, old, schema);
        self.report_unknown(&removed)?;
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(info, name, causes))
        }
    }

    /// Unknown fields under `fieldValidation`: Strict refuses them (a strict decoding
    /// error), Warn warns of each, anything else drops them silently.
    fn report_unknown(&self, unknown: &[String]) -> ApiResult<()> {
        if unknown.is_empty() {
            return Ok(());
        }
        match self.field_validation {
            "Strict" => {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|p| format!("unknown field \"{p}\""))
                    .collect();
                Err(ApiError::bad_request(format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                    list.join(", "),
                    kind = self.info.kind,
                    version = self.version,
                )))
            }
            "Warn" => {
                for p in unknown {
                    self.ctx.warn(format!("unknown field \"{p}\""));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Refuses an object whose `apiVersion` (when set) is not the one of the request.
pub(super) fn check_api_version(info: &ResourceInfo, version: &str, obj: &Value) -> ApiResult<()> {
    match obj["apiVersion"].as_str() {
        Some(av) if !av.is_empty() && av != info.api_version(version) => {
            Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                info.api_version(version)
            )))
        }
        _ => Ok(()),
    }
}

/// 409: the UID a client required is not that of the stored object `old`.
pub(super) fn uid_precondition_failed(
    info: &ResourceInfo,
    name: &str,
    uid: &str,
    old: &Value,
) -> ApiError {
    let actual = old["metadata"]["uid"].as_str().unwrap_or("");
    ApiError::conflict(
        info,
        name,
        &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
    )
}
