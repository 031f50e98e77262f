//! Deferred deletion: `holdfast.dev/delete-when-unblocked` asks holdfast to delete
//! an object as soon as nothing blocks it.
//!
//! A request is three markers set together: the annotation and the label
//! [`DELETE_WHEN_UNBLOCKED`] (both `"true"`; the label lets the controller find
//! such objects with a label selector) and the annotation [`DELETE_REQUESTED_BY`]
//! naming the requesting user, confirmed by holdfast's signature in
//! [`DELETE_REQUEST_SIGNATURE`] ([`crate::request_signature`]). The webhook admits
//! a CREATE or UPDATE that sets or changes them only when the requester is the
//! user named, that user, as the controller will impersonate them (the user
//! alone, with the groups the API server gives an impersonated user), may delete
//! the object, and the signature is one it issued to that user for that object.
//! The controller deletes only objects whose signature verifies, as that user, so
//! the API server authorizes the deletion as them.

use crate::{
    names::{DELETE_REQUEST_SIGNATURE, DELETE_REQUESTED_BY, DELETE_WHEN_UNBLOCKED},
    review::{AdmissionRequest, annotations, labels},
};
use serde_json::Value;

/// The prefix of service account user names.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// `(namespace, name)` when `user` is a service account's user name
/// (`system:serviceaccount:NS:NAME`, both DNS labels), as kube-apiserver splits it.
pub fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let mut parts = rest.split(':');
    let (ns, name) = (parts.next()?, parts.next()?);
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    (parts.next().is_none() && label(ns) && ns.len() <= 63 && !ns.contains('.') && label(name))
        .then_some((ns, name))
}

/// The groups kube-apiserver gives a user impersonated without `Impersonate-Group`:
/// a service account's groups for `system:serviceaccount:NS:NAME`, then
/// `system:authenticated`.
pub fn impersonated_groups(user: &str) -> Vec<String> {
    let mut groups = Vec::new();
    if let Some((ns, _)) = service_account(user) {
        groups.push("system:serviceaccounts".to_string());
        groups.push(format!("system:serviceaccounts:{ns}"));
    }
    groups.push("system:authenticated".to_string());
    groups
}

/// The three markers of a request as set on `obj` (absent ones are `None`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Markers<'a> {
    /// The annotation [`DELETE_WHEN_UNBLOCKED`].
    pub annotation: Option<&'a str>,
    /// The label [`DELETE_WHEN_UNBLOCKED`].
    pub label: Option<&'a str>,
    /// The annotation [`DELETE_REQUESTED_BY`].
    pub requested_by: Option<&'a str>,
    /// The annotation [`DELETE_REQUEST_SIGNATURE`].
    pub signature: Option<&'a str>,
}

/// The markers on `obj`; a value that is not a string counts as `""`.
pub fn markers(obj: &Value) -> Markers<'_> {
    fn get<'a>(m: Option<&'a serde_json::Map<String, Value>>, key: &str) -> Option<&'a str> {
        m.and_then(|m| m.get(key)).map(|v| v.as_str().unwrap_or(""))
    }
    Markers {
        annotation: get(annotations(obj), DELETE_WHEN_UNBLOCKED),
        label: get(labels(obj), DELETE_WHEN_UNBLOCKED),
        requested_by: get(annotations(obj), DELETE_REQUESTED_BY),
        signature: get(annotations(obj), DELETE_REQUEST_SIGNATURE),
    }
}

/// The signature annotation of `obj`, if set.
pub fn signature(obj: &Value) -> Option<&str> {
    markers(obj).signature
}

pub use crate::unreviewed::{NEVER_REVIEWED, never_reviewed};

/// The user a complete request on `obj` names: the annotation and the label
/// both `"true"` and a non-empty requester.
pub fn requested_by(obj: &Value) -> Option<&str> {
    let m = markers(obj);
    (m.annotation == Some("true") && m.label == Some("true"))
        .then_some(m.requested_by)
        .flatten()
        .filter(|u| !u.is_empty())
}

/// Whether a CREATE or UPDATE sets or changes a request: the new object carries
/// the annotation or the label [`DELETE_WHEN_UNBLOCKED`] and its markers differ
/// from the stored object's. Removing a request is never judged.
pub fn request_changed(req: &AdmissionRequest) -> bool {
    let Some(new) = req.object.as_ref().filter(|v| !v.is_null()) else {
        return false;
    };
    let now = markers(new);
    if now.annotation.is_none() && now.label.is_none() {
        return false;
    }
    let before = req
        .old_object
        .as_ref()
        .filter(|v| !v.is_null())
        .map(markers)
        .unwrap_or_default();
    now != before
}

/// What is wrong with the markers of a request made by `user`, if anything.
pub fn request_problem(new: &Value, user: &str) -> Option<String> {
    let m = markers(new);
    let mut problems = Vec::new();
    if m.annotation != Some("true") {
        problems.push(format!(
            "the annotation {DELETE_WHEN_UNBLOCKED} must be \"true\" (it is {})",
            shown(m.annotation)
        ));
    }
    if m.label != Some("true") {
        problems.push(format!(
            "the label {DELETE_WHEN_UNBLOCKED} must be \"true\" (it is {})",
            shown(m.label)
        ));
    }
    if m.requested_by != Some(user) || user.is_empty() {
        problems.push(format!(
            "the annotation {DELETE_REQUESTED_BY} must name you, {user:?} (it is {})",
            shown(m.requested_by)
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn shown(v: Option<&str>) -> String {
    v.map_or_else(|| "absent".to_string(), |v| format!("{v:?}"))
}

/// The merge patch that confirms a request as `user` with holdfast's signature `sig`.
pub fn signed_request_patch(user: &str, sig: &str) -> String {
    serde_json::json!({"metadata": {
        "labels": {DELETE_WHEN_UNBLOCKED: "true"},
        "annotations": {
            DELETE_WHEN_UNBLOCKED: "true",
            DELETE_REQUESTED_BY: user,
            DELETE_REQUEST_SIGNATURE: sig,
        },
    }})
    .to_string()
}

/// The signature a refusal of the webhook issues (the first step of a request), if
/// `message` carries one: what a client sets with the same request to confirm it.
pub fn issued_signature(message: &str) -> Option<&str> {
    let marker = format!("{DELETE_REQUEST_SIGNATURE} to \"");
    let start = message.find(&marker)? + marker.len();
    let rest = message.get(start..)?;
    rest.get(..rest.find('"')?)
}

/// The one merge patch that makes a request as `user`, for messages and docs.
pub fn request_patch(user: &str) -> String {
    serde_json::json!({"metadata": {
        "labels": {DELETE_WHEN_UNBLOCKED: "true"},
        "annotations": {DELETE_WHEN_UNBLOCKED: "true", DELETE_REQUESTED_BY: user},
    }})
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn service_accounts_get_their_groups() {
        assert_eq!(
            impersonated_groups("system:serviceaccount:team:ci"),
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:team",
                "system:authenticated"
            ]
        );
        assert_eq!(impersonated_groups("alice"), vec!["system:authenticated"]);
        for odd in [
            "system:serviceaccount:broken",
            "system:serviceaccount:a:b:c",
            "system:serviceaccount::ci",
            "system:serviceaccount:Team:ci",
        ] {
            assert_eq!(
                impersonated_groups(odd),
                vec!["system:authenticated"],
                "{odd}"
            );
        }
    }

    #[test]
    fn a_complete_request_names_its_user() {
        let full = obj(
            json!({DELETE_WHEN_UNBLOCKED: "true"}),
            json!({DELETE_WHEN_UNBLOCKED: "true", DELETE_REQUESTED_BY: "alice"}),
        );
        assert_eq!(requested_by(&full), Some("alice"));
        assert_eq!(request_problem(&full, "alice"), None);
        assert_eq!(
            request_problem(&full, "bob").as_deref(),
            Some(
                "the annotation holdfast.dev/delete-requested-by must name you, \"bob\" (it is \"alice\")"
            )
        );
        let no_label = obj(
            json!({}),
            json!({DELETE_WHEN_UNBLOCKED: "true", DELETE_REQUESTED_BY: "alice"}),
        );
        assert_eq!(requested_by(&no_label), None);
        assert_eq!(
            request_problem(&no_label, "alice").as_deref(),
            Some("the label holdfast.dev/delete-when-unblocked must be \"true\" (it is absent)")
        );
        let odd = obj(
            json!({DELETE_WHEN_UNBLOCKED: "yes"}),
            json!({DELETE_WHEN_UNBLOCKED: 1}),
        );
        assert_eq!(
            request_problem(&odd, "alice").as_deref(),
            Some(
                "the annotation holdfast.dev/delete-when-unblocked must be \"true\" (it is \"\"); \
                 the label holdfast.dev/delete-when-unblocked must be \"true\" (it is \"yes\"); \
                 the annotation holdfast.dev/delete-requested-by must name you, \"alice\" (it is absent)"
            )
        );
    }

    use crate::api::common::GroupResource;

    #[test]
    fn kinds_never_sent_to_webhooks_are_known() {
        for (g, r) in NEVER_REVIEWED {
            assert!(never_reviewed(&GroupResource::new(g, r)));
        }
        assert!(!never_reviewed(&GroupResource::new("", "configmaps")));
        assert!(!never_reviewed(&GroupResource::new(
            "admissionregistration.k8s.io",
            "other"
        )));
    }

    #[test]
    fn a_changed_signature_is_a_changed_request() {
        let with = |sig: &str| {
            obj(
                json!({DELETE_WHEN_UNBLOCKED: "true"}),
                json!({DELETE_WHEN_UNBLOCKED: "true", DELETE_REQUESTED_BY: "alice",
                       DELETE_REQUEST_SIGNATURE: sig}),
            )
        };
        let body = |old: Value, new: Value| {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "x", "namespace": "ns", "operation": "UPDATE",
                "userInfo": {"username": "alice"}, "object": new, "oldObject": old}})
        };
        let review = |old, new| {
            crate::review::parse_review(body(old, new).to_string().as_bytes()).expect("review")
        };
        assert!(request_changed(&review(with("a"), with("b"))));
        assert!(!request_changed(&review(with("a"), with("a"))));
        assert_eq!(signature(&with("a")), Some("a"));
        let patch: Value = serde_json::from_str(&signed_request_patch("alice", "s")).expect("json");
        assert_eq!(requested_by(&patch), Some("alice"));
        assert_eq!(signature(&patch), Some("s"));
        let refusal =
            crate::policy::messages::deferred_sign("VPC ns/x", "why", "v1.2.ab", "vpc x", "{}");
        assert_eq!(issued_signature(&refusal), Some("v1.2.ab"));
        assert_eq!(issued_signature("holdfast: nothing"), None);
    }

    #[test]
    fn the_patch_sets_all_three_markers() {
        let patch: Value = serde_json::from_str(&request_patch("alice")).expect("json");
        assert_eq!(requested_by(&patch), Some("alice"));
    }
}
