//! `Status` errors exactly as kube-apiserver shapes them.

use crate::registry::ResourceInfo;
use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// One cause of a 422 Invalid: field, reason (`FieldValueInvalid`, ...), message.
pub type Cause = (String, String, String);

/// A [`Cause`] from borrowed parts.
pub fn cause(field: &str, reason: &str, message: impl Into<String>) -> Cause {
    (field.to_string(), reason.to_string(), message.into())
}

/// Status details: name, group and `kind` (kube-apiserver puts the resource there,
/// except in Invalid errors, which name the kind).
fn details_as(info: &ResourceInfo, name: &str, kind: &str) -> Value {
    let mut d = json!({});
    if !name.is_empty() {
        d["name"] = json!(name);
    }
    if !info.group.is_empty() {
        d["group"] = json!(info.group);
    }
    d["kind"] = json!(kind);
    d
}

fn details(info: &ResourceInfo, name: &str) -> Value {
    details_as(info, name, &info.resource)
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    /// The same error with a `details` object.
    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
        });
        if !self.message.is_empty() {
            s["message"] = json!(self.message);
        }
        if !self.reason.is_empty() {
            s["reason"] = json!(self.reason);
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s["code"] = json!(self.code);
        s
    }

    /// `resource "name" <what>`, with the object's details.
    fn about(info: &ResourceInfo, name: &str, code: u16, reason: &str, what: &str) -> Self {
        let message = format!("{} \"{}\" {what}", info.qualified(), name);
        Self::new(code, reason, message).with_details(details(info, name))
    }

    pub fn not_found(info: &ResourceInfo, name: &str) -> Self {
        Self::about(info, name, 404, "NotFound", "not found")
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn already_exists(info: &ResourceInfo, name: &str) -> Self {
        Self::about(info, name, 409, "AlreadyExists", "already exists")
    }

    pub fn conflict(info: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                info.qualified(),
                name,
                why
            ),
        )
        .with_details(details(info, name))
    }

    pub fn stale(info: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid: `Kind "name" is invalid: field: message`.
    pub fn invalid(info: &ResourceInfo, name: &str, causes: Vec<Cause>) -> Self {
        let msgs: Vec<String> = causes
            .iter()
            .map(|(field, _, msg)| format!("{field}: {msg}"))
            .collect();
        let gk = if info.group.is_empty() {
            info.kind.clone()
        } else {
            format!("{}.{}", info.kind, info.group)
        };
        let message = if msgs.len() == 1 {
            format!("{} \"{}\" is invalid: {}", gk, name, msgs[0])
        } else {
            format!("{} \"{}\" is invalid: [{}]", gk, name, msgs.join(", "))
        };
        let mut d = details_as(info, name, &info.kind);
        d["causes"] = Value::Array(
            causes
                .into_iter()
                .map(|(field, reason, msg)| json!({"reason": reason, "message": msg, "field": field}))
                .collect(),
        );
        Self::new(422, "Invalid", message).with_details(d)
    }

    /// 422 Invalid with the whole message given (options, not objects, are invalid).
    pub fn invalid_raw(message: &str) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message).with_details(json!({}))
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// NewForbidden(qualifiedResource, name, err).
    pub fn forbidden(info: &ResourceInfo, name: &str, err: &str) -> Self {
        let message = if name.is_empty() {
            format!("{} is forbidden: {}", info.qualified(), err)
        } else {
            format!("{} \"{}\" is forbidden: {}", info.qualified(), name, err)
        };
        Self::new(403, "Forbidden", message).with_details(details(info, name))
    }

    pub fn internal(err: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {err}"),
        )
        .with_details(json!({"causes": [{"message": err}]}))
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {ct})"
            ),
        )
    }
}
