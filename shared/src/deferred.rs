//! Deferred deletion: `holdfast.dev/delete-when-unblocked` asks holdfast to delete
//! an object as soon as nothing blocks it.
//!
//! A request is three markers set together: the annotation and the label
//! [`DELETE_WHEN_UNBLOCKED`] (both `"true"`; the label lets the controller find
//! such objects with a label selector) and the annotation [`DELETE_REQUESTED_BY`]
//! naming the requesting user. The webhook admits a CREATE or UPDATE that sets or
//! changes them only when the requester is the user named and that user, as the
//! controller will impersonate them (the user alone, with the groups the API
//! server gives an impersonated user), may delete the object. The controller then
//! deletes it as that user, so the API server authorizes the deletion as them.

use crate::{
    names::{DELETE_REQUESTED_BY, DELETE_WHEN_UNBLOCKED},
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
    }
}

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

    #[test]
    fn the_patch_sets_all_three_markers() {
        let patch: Value = serde_json::from_str(&request_patch("alice")).expect("json");
        assert_eq!(requested_by(&patch), Some("alice"));
    }
}
