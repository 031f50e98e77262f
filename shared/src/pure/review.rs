//! AdmissionReview v1 on the wire, read leniently and answered strictly.
//!
//! Objects stay as `serde_json::Value`: holdfast must read any resource, including
//! ones it has no type for, and must never refuse a review because an object has a
//! shape a typed model would not expect.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `admission.k8s.io/v1`.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";

/// Why a body is not an AdmissionReview holdfast can answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON at all.
    #[error("body is not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// JSON, but not shaped like an AdmissionReview.
    #[error("body is not an AdmissionReview: {0}")]
    Shape(#[source] serde_json::Error),
    /// apiVersion/kind are wrong.
    #[error(
        "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got {api_version:?}/{kind:?}"
    )]
    TypeMeta {
        /// apiVersion found.
        api_version: String,
        /// kind found.
        kind: String,
    },
    /// No `request`.
    #[error("AdmissionReview has no request")]
    NoRequest,
    /// `request.uid` is empty.
    #[error("AdmissionReview request has an empty uid")]
    NoUid,
}

/// Group/version/kind as in a review.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gvk {
    /// API group ("" for core).
    #[serde(default)]
    pub group: String,
    /// Version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
}

/// Group/version/resource as in a review.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gvr {
    /// API group ("" for core).
    #[serde(default)]
    pub group: String,
    /// Version.
    #[serde(default)]
    pub version: String,
    /// Plural resource.
    #[serde(default)]
    pub resource: String,
}

impl Gvr {
    /// `resource.group` (or `resource` for the core group), as Kubernetes names it.
    pub fn group_resource(&self) -> String {
        self.write_group_resource(String::with_capacity(
            self.resource.len() + self.group.len() + 1,
        ))
    }

    /// Appends [`Gvr::group_resource`] to `out` (no allocation of its own).
    pub fn write_group_resource(&self, mut out: String) -> String {
        out.push_str(&self.resource);
        if !self.group.is_empty() {
            out.push('.');
            out.push_str(&self.group);
        }
        out
    }
}

/// The operation under review.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// CREATE
    Create,
    /// UPDATE
    Update,
    /// DELETE
    Delete,
    /// CONNECT
    Connect,
}

impl Operation {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// The requesting user.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// User name.
    #[serde(default)]
    pub username: String,
    /// UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// `request` of an AdmissionReview v1.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// Kind of the object.
    pub kind: Gvk,
    /// Resource being acted on.
    pub resource: Gvr,
    /// Subresource, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_resource: Option<String>,
    /// Kind as originally requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_kind: Option<Gvk>,
    /// Resource as originally requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_resource: Option<Gvr>,
    /// Subresource as originally requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_sub_resource: Option<String>,
    /// Object name; absent for DeleteCollection (namespace cascade).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace; for a Namespace object, its own name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The operation.
    pub operation: Operation,
    /// Who asks.
    #[serde(default)]
    pub user_info: UserInfo,
    /// New object (CREATE/UPDATE); null on DELETE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// Stored object (UPDATE/DELETE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_object: Option<Value>,
    /// Dry run: nothing will be persisted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// CreateOptions / UpdateOptions / DeleteOptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
    /// kcp: the APIExport the review was sent for, named by the webhook URL's path
    /// (`/validate/kcp/<logical cluster>/<export>`); never read from the body.
    #[serde(skip)]
    pub via_export: Option<ExportRoute>,
}

/// The APIExport a review was sent for (kcp): the export's logical cluster and name.
/// A provider workspace's configuration has one entry per export, each calling a
/// URL naming its export, so two exports of one group/resource are told apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRoute {
    /// Logical cluster of the export's workspace.
    pub cluster: String,
    /// APIExport name.
    pub name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    request: Option<AdmissionRequest>,
}

/// Parses an AdmissionReview v1 body and returns its request.
/// One pass over the bytes: a syntax error means "not JSON", a data error "not an
/// AdmissionReview".
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest, ReviewError> {
    let review: ReviewIn = serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ReviewError::Shape(e),
        _ => ReviewError::Json(e),
    })?;
    if review.api_version != ADMISSION_API_VERSION || review.kind != "AdmissionReview" {
        return Err(ReviewError::TypeMeta {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    let request = review.request.ok_or(ReviewError::NoRequest)?;
    if request.uid.is_empty() {
        return Err(ReviewError::NoUid);
    }
    Ok(request)
}

impl AdmissionRequest {
    /// The object the policies look at: the stored object for DELETE, else the new one.
    pub fn subject(&self) -> Option<&Value> {
        match self.operation {
            Operation::Delete => self.old_object.as_ref().filter(|v| !v.is_null()),
            _ => self.object.as_ref().filter(|v| !v.is_null()),
        }
    }

    /// The object name: `request.name`, or `metadata.name` of the object when the
    /// API server sent none (DeleteCollection during namespace cleanup).
    pub fn object_name(&self) -> Option<&str> {
        self.name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or_else(|| self.subject().and_then(|o| meta_str(o, "name")))
            .or_else(|| self.old_object.as_ref().and_then(|o| meta_str(o, "name")))
    }

    /// The namespace of a namespaced object (None for cluster-scoped objects,
    /// including Namespaces themselves).
    pub fn object_namespace(&self) -> Option<&str> {
        if self.is_namespace() {
            return None;
        }
        self.namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .or_else(|| self.subject().and_then(|o| meta_str(o, "namespace")))
    }

    /// Whether the object is a core/v1 Namespace.
    pub fn is_namespace(&self) -> bool {
        self.resource.group.is_empty() && self.resource.resource == "namespaces"
    }

    /// Whether the object is a kcp APIBinding (not a subresource of one).
    pub fn is_api_binding(&self) -> bool {
        self.resource.group == "apis.kcp.io"
            && self.resource.resource == "apibindings"
            && self.sub_resource.as_deref().unwrap_or_default().is_empty()
    }

    /// Whether the object is a kcp Workspace (not a subresource of one).
    pub fn is_workspace(&self) -> bool {
        self.resource.group == "tenancy.kcp.io"
            && self.resource.resource == "workspaces"
            && self.sub_resource.as_deref().unwrap_or_default().is_empty()
    }

    /// Whether the object is a CustomResourceDefinition (not a subresource of one).
    pub fn is_crd(&self) -> bool {
        self.resource.group == "apiextensions.k8s.io"
            && self.resource.resource == "customresourcedefinitions"
            && self.sub_resource.as_deref().unwrap_or_default().is_empty()
    }

    /// Whether this is a pod eviction (`CREATE pods/eviction`).
    pub fn is_eviction(&self) -> bool {
        self.resource.group.is_empty()
            && self.resource.resource == "pods"
            && self.sub_resource.as_deref() == Some("eviction")
    }

    /// `Kind namespace/name` (or `Kind name` when cluster-scoped), for messages.
    pub fn describe(&self) -> String {
        self.write_description(String::with_capacity(64))
    }

    /// Appends [`AdmissionRequest::describe`] to `out` (no allocation of its own).
    pub fn write_description(&self, mut out: String) -> String {
        if self.kind.kind.is_empty() {
            out = self.resource.write_group_resource(out);
        } else {
            out.push_str(&self.kind.kind);
        }
        out.push(' ');
        if let Some(ns) = self.object_namespace() {
            out.push_str(ns);
            out.push('/');
        }
        out.push_str(self.object_name().unwrap_or("<unnamed>"));
        out
    }
}

/// `metadata.<field>` as a string.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata.labels`, if it is a map.
pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.get("labels")?.as_object()
}

/// `metadata.annotations`, if it is a map.
pub fn annotations(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.get("annotations")?.as_object()
}

/// Whether the object has a `metadata` map whose `labels`/`annotations` (when present)
/// are maps of strings: the minimum holdfast needs to evaluate label policies.
pub fn check_metadata(obj: &Value) -> Result<(), String> {
    let Some(meta) = obj.get("metadata") else {
        return Err("object has no metadata".to_string());
    };
    let Some(meta) = meta.as_object() else {
        return Err("object metadata is not a map".to_string());
    };
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                if let Some((k, _)) = m.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!("metadata.{field}[{k:?}] is not a string"));
                }
            }
            Some(_) => return Err(format!("metadata.{field} is not a map")),
        }
    }
    Ok(())
}

/// `status` of an AdmissionResponse (a `metav1.Status`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseStatus {
    /// HTTP-like code, 403 for denials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    /// Machine-readable reason (`Forbidden`), which kubectl prints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `response` of an AdmissionReview v1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionResponse {
    /// The request's uid.
    pub uid: String,
    /// The verdict.
    pub allowed: bool,
    /// Details of a denial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ResponseStatus>,
    /// Warnings shown to the client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl AdmissionResponse {
    /// Allow, with optional warnings.
    pub fn allow(uid: &str, warnings: Vec<String>) -> Self {
        Self {
            uid: uid.to_string(),
            allowed: true,
            status: None,
            warnings,
        }
    }

    /// Deny with 403 Forbidden and `message`.
    pub fn deny(uid: &str, message: String) -> Self {
        Self {
            uid: uid.to_string(),
            allowed: false,
            status: Some(ResponseStatus {
                code: Some(403),
                reason: Some("Forbidden".to_string()),
                message: Some(message),
            }),
            warnings: Vec::new(),
        }
    }

    /// The full AdmissionReview JSON body carrying this response, written in one pass
    /// into a buffer sized up front: the same bytes serde_json writes for
    /// [`AdmissionResponse::into_review`]'s fields in their declared order, with the
    /// strings escaped eight bytes at a time (the message names the object, so it is
    /// escaped on every denial).
    pub fn to_review_bytes(&self) -> Vec<u8> {
        let text = self.status.as_ref().and_then(|s| s.message.as_ref());
        let size = 256
            + self.uid.len()
            + text.map_or(0, String::len)
            + self.warnings.iter().map(|w| w.len() + 3).sum::<usize>();
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(b"{\"apiVersion\":");
        json_str(&mut out, ADMISSION_API_VERSION);
        out.extend_from_slice(b",\"kind\":\"AdmissionReview\",\"response\":{\"uid\":");
        json_str(&mut out, &self.uid);
        out.extend_from_slice(if self.allowed {
            b",\"allowed\":true"
        } else {
            b",\"allowed\":false"
        });
        if let Some(status) = &self.status {
            out.extend_from_slice(b",\"status\":{");
            let mut first = true;
            let mut key = |out: &mut Vec<u8>, name: &[u8]| {
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(name);
            };
            if let Some(code) = status.code {
                key(&mut out, b"\"code\":");
                let digits = code.to_string();
                out.extend_from_slice(digits.as_bytes());
            }
            if let Some(reason) = &status.reason {
                key(&mut out, b"\"reason\":");
                json_str(&mut out, reason);
            }
            if let Some(message) = &status.message {
                key(&mut out, b"\"message\":");
                json_str(&mut out, message);
            }
            out.push(b'}');
        }
        if !self.warnings.is_empty() {
            out.extend_from_slice(b",\"warnings\":[");
            for (i, w) in self.warnings.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_str(&mut out, w);
            }
            out.push(b']');
        }
        out.extend_from_slice(b"}}");
        out
    }

    /// The full AdmissionReview JSON body carrying this response.
    pub fn into_review(self) -> Value {
        serde_json::json!({
            "apiVersion": ADMISSION_API_VERSION,
            "kind": "AdmissionReview",
            "response": self,
        })
    }
}

/// Appends `s` to `out` as a JSON string, escaped as serde_json escapes it (`"`,
/// `\\`, and control characters: `\\b \\t \\n \\f \\r` by name, the others as
/// `\\u00XX`); runs of eight bytes that need none are copied without a look at each.
fn json_str(out: &mut Vec<u8>, s: &str) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Some byte of `x` is zero (the classic test; exact for the "is there one").
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS != 0;
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(chunk) = bytes.get(i..i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let x = u64::from_le_bytes(word);
            // No byte below 0x20 (bytes of 0x80 and above, UTF-8, never count),
            // none `"`, none `\\`: nothing to escape in these eight.
            let below_space = x.wrapping_sub(ONES * 0x20) & !x & HIGHS != 0;
            if !below_space
                && !has_zero(x ^ (ONES * u64::from(b'"')))
                && !has_zero(x ^ (ONES * u64::from(b'\\')))
            {
                i += 8;
                continue;
            }
        }
        let end = (i + 8).min(bytes.len());
        while i < end {
            let b = bytes[i];
            let named: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                0x08 => b"\\b",
                0x09 => b"\\t",
                0x0a => b"\\n",
                0x0c => b"\\f",
                0x0d => b"\\r",
                0x00..=0x1f => b"",
                _ => {
                    i += 1;
                    continue;
                }
            };
            out.extend_from_slice(&bytes[start..i]);
            if named.is_empty() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            } else {
                out.extend_from_slice(named);
            }
            i += 1;
            start = i;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rejects_bad_bodies() {
        assert!(matches!(parse_review(b"nope"), Err(ReviewError::Json(_))));
        assert!(matches!(parse_review(b"[1,2]"), Err(ReviewError::Shape(_))));
        assert!(matches!(
            parse_review(br#"{"apiVersion":"v1","kind":"Pod"}"#),
            Err(ReviewError::TypeMeta { .. })
        ));
        assert!(matches!(
            parse_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#),
            Err(ReviewError::NoRequest)
        ));
        let no_uid = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"","kind":{"group":"","version":"v1","kind":"ConfigMap"},
            "resource":{"group":"","version":"v1","resource":"configmaps"},"operation":"DELETE"}});
        assert!(matches!(
            parse_review(no_uid.to_string().as_bytes()),
            Err(ReviewError::NoUid)
        ));
        let bad_op = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u","kind":{},"resource":{},"operation":"EXPLODE"}});
        assert!(matches!(
            parse_review(bad_op.to_string().as_bytes()),
            Err(ReviewError::Shape(_))
        ));
    }

    #[test]
    fn nameless_delete_takes_name_from_old_object() {
        let review = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u1","kind":{"group":"","version":"v1","kind":"ConfigMap"},
            "resource":{"group":"","version":"v1","resource":"configmaps"},
            "namespace":"ns1","operation":"DELETE","object":null,
            "oldObject":{"metadata":{"name":"cm1","namespace":"ns1"}}}});
        let req = parse_review(review.to_string().as_bytes()).expect("parses");
        assert_eq!(req.object_name(), Some("cm1"));
        assert_eq!(req.describe(), "ConfigMap ns1/cm1");
    }

    #[test]
    fn namespace_objects_are_cluster_scoped_in_messages() {
        let review = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u1","kind":{"group":"","version":"v1","kind":"Namespace"},
            "resource":{"group":"","version":"v1","resource":"namespaces"},
            "name":"prod","namespace":"prod","operation":"DELETE",
            "oldObject":{"metadata":{"name":"prod"}}}});
        let req = parse_review(review.to_string().as_bytes()).expect("parses");
        assert_eq!(req.describe(), "Namespace prod");
        assert_eq!(req.object_namespace(), None);
    }

    #[test]
    fn metadata_checks() {
        assert!(check_metadata(&json!({"metadata":{"name":"x"}})).is_ok());
        assert!(check_metadata(&json!({})).is_err());
        assert!(check_metadata(&json!({"metadata":[]})).is_err());
        assert!(check_metadata(&json!({"metadata":{"labels":"x"}})).is_err());
        assert!(check_metadata(&json!({"metadata":{"labels":{"a":1}}})).is_err());
    }

    #[test]
    fn deny_shape() {
        let denial = AdmissionResponse::deny("u", "holdfast: no".into());
        let bytes: Value =
            serde_json::from_slice(&denial.to_review_bytes()).expect("bytes are JSON");
        let body = denial.into_review();
        assert_eq!(bytes, body, "both encodings carry the same review");
        assert_eq!(body["response"]["uid"], "u");
        assert_eq!(body["response"]["allowed"], false);
        assert_eq!(body["response"]["status"]["code"], 403);
        assert_eq!(body["response"]["status"]["reason"], "Forbidden");
        assert!(body["response"].get("warnings").is_none());
    }

    #[test]
    fn review_bytes_are_what_serde_json_writes() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct ReviewOut<'a> {
            api_version: &'static str,
            kind: &'static str,
            response: &'a AdmissionResponse,
        }
        let serde = |r: &AdmissionResponse| {
            serde_json::to_vec(&ReviewOut {
                api_version: ADMISSION_API_VERSION,
                kind: "AdmissionReview",
                response: r,
            })
            .expect("serializes")
        };
        // Every control character, quotes, backslashes, DEL, UTF-8, at every
        // offset against the eight-byte runs.
        let controls: String = (0u8..0x20).map(char::from).collect();
        let mut texts = vec![
            String::new(),
            controls.clone(),
            "plain text of some length, nothing to escape here at all".to_string(),
            "\"\\/\u{7f}ßé漢\u{1F600}".to_string(),
        ];
        for pad in 0..9 {
            texts.push(format!(
                "{}\"{}\\{}\n",
                "x".repeat(pad),
                "y".repeat(pad),
                controls
            ));
        }
        for text in &texts {
            let denial = AdmissionResponse::deny(text, text.clone());
            assert_eq!(denial.to_review_bytes(), serde(&denial), "{text:?}");
            let warned = AdmissionResponse::allow(text, vec![text.clone(), "w".into()]);
            assert_eq!(warned.to_review_bytes(), serde(&warned), "{text:?}");
        }
        let partial = AdmissionResponse {
            uid: "u".into(),
            allowed: false,
            status: Some(ResponseStatus {
                code: None,
                reason: None,
                message: Some("m".into()),
            }),
            warnings: Vec::new(),
        };
        assert_eq!(partial.to_review_bytes(), serde(&partial));
        let empty = AdmissionResponse {
            status: Some(ResponseStatus::default()),
            ..partial.clone()
        };
        assert_eq!(empty.to_review_bytes(), serde(&empty));
        assert_eq!(
            AdmissionResponse::allow("u", Vec::new()).to_review_bytes(),
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}"#
        );
    }

    #[test]
    fn long_messages_and_warnings_encode_as_the_value_does() {
        let message = format!("holdfast: \"quoted\"\n{}", "ß".repeat(400));
        let denial = AdmissionResponse::deny("u", message.clone());
        let bytes = denial.to_review_bytes();
        let parsed: Value = serde_json::from_slice(&bytes).expect("bytes are JSON");
        assert_eq!(parsed["response"]["status"]["message"], message.as_str());
        assert_eq!(parsed, denial.into_review());
        let warned = AdmissionResponse::allow("u", vec!["a \"b\"".into(), "c".repeat(300)]);
        let parsed: Value =
            serde_json::from_slice(&warned.to_review_bytes()).expect("bytes are JSON");
        assert_eq!(parsed, warned.into_review());
        assert_eq!(parsed["response"]["warnings"][0], "a \"b\"");
    }

    #[test]
    fn a_kindless_request_is_described_by_its_group_resource() {
        let review = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"u1","kind":{"group":"","version":"","kind":""},
            "resource":{"group":"network.test.io","version":"v1","resource":"vpcs"},
            "name":"v1","operation":"DELETE","oldObject":{"metadata":{"name":"v1"}}}});
        let req = parse_review(review.to_string().as_bytes()).expect("parses");
        assert_eq!(req.resource.group_resource(), "vpcs.network.test.io");
        assert_eq!(req.describe(), "vpcs.network.test.io v1");
        assert_eq!(
            req.write_description("DELETE ".to_string()),
            "DELETE vpcs.network.test.io v1"
        );
        let core = Gvr {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
        };
        assert_eq!(core.group_resource(), "configmaps");
    }
}
