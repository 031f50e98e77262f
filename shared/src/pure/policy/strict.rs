//! Strict mode: an UPDATE may not lift protection (remove a protection label, leave a
//! strict ResourceProtection's selection) unless the stored object is exempt, and
//! only someone allowed to bypass protection may add a break-glass marker.

use super::{
    ClusterView, Context, Decider, Decision, DenialKind, Evaluation, evaluate_delete,
    kubectl_target, list_blockers, logical_cluster, messages, unreadable,
};
use crate::{
    api::common::GroupResource,
    names::{
        ALLOW_DELETION_LABEL, ALLOW_DELETION_LABEL_APPCAT, SKIP_ANNOTATION,
        SKIP_ANNOTATION_DEPENDENCIES, STRICT_EXEMPT_LABEL,
    },
    review::{AdmissionRequest, Operation, check_metadata, labels},
    webhookconfig::{BREAK_GLASS_ANNOTATIONS, BREAK_GLASS_LABELS},
};
use serde_json::Value;

/// Whether `obj` carries the label `key` with the value `"true"`.
fn label_true(obj: &Value, key: &str) -> bool {
    labels(obj).and_then(|l| l.get(key)).and_then(Value::as_str) == Some("true")
}

/// Break-glass markers and the strict exemption an UPDATE adds.
pub(crate) fn added_markers(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let get = |o: &Value, field: &str, key: &str| -> Option<String> {
        o.get("metadata")?
            .get(field)?
            .get(key)?
            .as_str()
            .map(str::to_string)
    };
    for key in [SKIP_ANNOTATION, SKIP_ANNOTATION_DEPENDENCIES] {
        let after = get(new, "annotations", key);
        if after.is_some() && after != get(old, "annotations", key) {
            out.push(format!("annotation {key}"));
        }
    }
    for key in [
        ALLOW_DELETION_LABEL_APPCAT,
        ALLOW_DELETION_LABEL,
        STRICT_EXEMPT_LABEL,
    ] {
        let after = get(new, "labels", key);
        if after.as_deref() == Some("true") && after != get(old, "labels", key) {
            out.push(format!("label {key}"));
        }
    }
    out
}

/// Whether a DELETE of the stored object `old` (without any break-glass marker)
/// would be refused: the object is protected by some policy. A verdict that
/// cannot be reached (not loaded, lookup failed) counts as protected.
async fn protected_without_markers<V: ClusterView>(
    req: &AdmissionRequest,
    old: &Value,
    cx: &Context<'_, V>,
) -> bool {
    let mut stored = old.clone();
    if let Some(meta) = stored.get_mut("metadata").and_then(Value::as_object_mut) {
        for (field, keys) in [
            ("annotations", &BREAK_GLASS_ANNOTATIONS[..]),
            ("labels", &BREAK_GLASS_LABELS[..]),
        ] {
            if let Some(m) = meta.get_mut(field).and_then(Value::as_object_mut) {
                for k in keys {
                    m.remove(*k);
                }
            }
        }
    }
    let delete = AdmissionRequest {
        sub_resource: None,
        request_sub_resource: None,
        operation: Operation::Delete,
        object: None,
        old_object: Some(stored),
        options: None,
        ..req.clone()
    };
    matches!(
        evaluate_delete(&delete, cx).await.decision,
        Decision::Deny(_)
    )
}

/// Whether the request's resource is a custom resource whose
/// CustomResourceDefinition carries `holdfast.dev/strict-exempt: "true"`: one CRD
/// out of strict mode (seed 004's per-CRD `strictMode: false`), its instances
/// counting as exempt. A core or built-in resource (no such CRD) and a failed
/// lookup count as not exempt (strict mode applies: fail closed).
async fn resource_strict_exempt<V: ClusterView>(
    req: &AdmissionRequest,
    old: &Value,
    view: &V,
) -> bool {
    let (group, resource) = (&req.resource.group, &req.resource.resource);
    if group.is_empty() || resource.is_empty() {
        return false;
    }
    let crds = GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions");
    let name = format!("{resource}.{group}");
    match view.object(logical_cluster(old), &crds, None, &name).await {
        Ok(Some(crd)) => label_true(&crd, STRICT_EXEMPT_LABEL),
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(crd = %name, error = %e, "cannot read the CustomResourceDefinition; strict mode applies");
            false
        }
    }
}

/// An UPDATE: strict mode's guards.
pub(crate) async fn evaluate_update<V: ClusterView>(
    req: &AdmissionRequest,
    cx: &Context<'_, V>,
) -> Evaluation {
    let (cfg, view) = (cx.cfg, cx.view);
    let strict_policy = view.strict_for(req);
    if !cfg.strict && !strict_policy {
        return Evaluation::allow(Decider::None);
    }
    let Some(old) = req.old_object.as_ref().filter(|v| !v.is_null()) else {
        return unreadable(req, "the request carries no oldObject");
    };
    if let Err(why) = check_metadata(old) {
        return unreadable(req, &why);
    }
    let old_labels = labels(old);
    let label_protected = cfg.labels.protecting(old_labels).is_some();
    let Some(new) = req.object.as_ref().filter(|v| !v.is_null()) else {
        if !label_protected && !strict_policy {
            return Evaluation::allow(Decider::None);
        }
        return unreadable(req, "the request carries no object");
    };
    if !label_protected && !strict_policy {
        // Under --strict, a break-glass marker added to any protected object (a
        // policy object's, not only a label's) takes the bypass permission.
        if !cfg.strict
            || added_markers(old, new).is_empty()
            || !protected_without_markers(req, old, cx).await
        {
            return Evaluation::allow(Decider::None);
        }
    }
    if let Err(why) = check_metadata(new) {
        return unreadable(req, &why);
    }
    let own_exempt = label_true(old, STRICT_EXEMPT_LABEL);
    let same_update = if label_true(new, STRICT_EXEMPT_LABEL) {
        messages::SAME_UPDATE
    } else {
        ""
    };
    let target = kubectl_target(req);

    // 1. The protection label removed or downgraded.
    let removed = cfg.labels.removed(old_labels, labels(new));
    let selection_lost = if own_exempt {
        None
    } else {
        view.strict_selection_lost(req)
    };
    // The CRD is asked only when the update would otherwise be refused.
    let exempt = own_exempt
        || ((!removed.is_empty() || selection_lost.is_some())
            && resource_strict_exempt(req, old, view).await);
    if !removed.is_empty() && !exempt {
        let blockers: Vec<String> = removed
            .iter()
            .map(|l| format!("label {}={}", l.key, l.value))
            .collect();
        let message = messages::strict_label_removed(
            &req.describe(),
            &list_blockers(&blockers),
            removed.first().map(|l| l.key).unwrap_or_default(),
            same_update,
            &target,
        );
        return Evaluation::deny(Decider::Strict, DenialKind::Protected, message, blockers);
    }

    // 2. Labels changed so that a strict ResourceProtection no longer selects it.
    if !exempt && let Some(rp) = selection_lost {
        let message = messages::strict_selection_lost(&req.describe(), &rp, same_update, &target);
        return Evaluation::deny(Decider::Strict, DenialKind::Protected, message, vec![rp]);
    }

    // 3. Break-glass markers or the exemption added: only by someone allowed to bypass.
    let added = added_markers(old, new);
    if added.is_empty() {
        return Evaluation::allow(Decider::Strict);
    }
    let user = if req.user_info.username.is_empty() {
        "the requester".to_string()
    } else {
        format!("user {:?}", req.user_info.username)
    };
    let scope = req
        .object_namespace()
        .map(|n| format!(" in namespace {n}"))
        .unwrap_or_default();
    let what = req.describe();
    let markers = added.join(" and ");
    match view.can_bypass(req).await {
        Ok(true) => Evaluation::allow(Decider::BreakGlassAuthorized),
        Ok(false) => Evaluation::deny(
            Decider::BreakGlassRefused,
            DenialKind::Protected,
            messages::break_glass_not_permitted(&user, &markers, &what, &scope),
            added,
        ),
        Err(e) => Evaluation::deny(
            Decider::BreakGlassRefused,
            DenialKind::LookupFailed,
            messages::break_glass_unverified(&user, &markers, &what, e.message()),
            added,
        ),
    }
}
