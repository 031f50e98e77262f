//! Containment: a Namespace holding any object whose own DELETE would be denied
//! cannot be deleted; nor can a CustomResourceDefinition (deleting it deletes every
//! instance from storage without a DELETE review), nor, on kcp, a Workspace (kcp
//! deletes everything in it and below it, in no set order) or an APIBinding (kcp
//! deletes every object of the types it binds).

use super::{
    ClusterView, ContainedObject, Context, Decider, Decision, DenialKind, Evaluation, LookupError,
    break_glass, label, list_blockers, logical_cluster, messages::Container,
};
use crate::review::{AdmissionRequest, Gvk, Operation, check_metadata, meta_str};
use serde_json::Value;

/// Containment of a Namespace or CustomResourceDefinition (`None` for anything else).
pub(crate) async fn evaluate<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    cx: &Context<'_, V>,
) -> Option<Evaluation> {
    let name = req.object_name().unwrap_or_default();
    let cluster = logical_cluster(obj);
    let (container, contents) = if req.is_namespace() {
        let contents = cx.view.namespace_contents(cluster, name).await;
        (Container::Namespace(name), contents)
    } else if req.is_crd() {
        let contents = cx.view.custom_resources(cluster, obj).await;
        (Container::Crd(name), contents)
    } else if cx.cfg.kcp && req.is_workspace() {
        return Some(workspace(req, obj, cx).await);
    } else if cx.cfg.kcp && req.is_api_binding() {
        let contents = cx.view.binding_contents(cluster, obj).await;
        (Container::ApiBinding(name), contents)
    } else {
        return None;
    };
    Some(judge(req, container, contents, cx).await)
}

/// An UPDATE of a Namespace that removes or changes the containment marker
/// (`holdfast.dev/contains-protected`): refused while the namespace holds something
/// protected, as its DELETE would be (`None`: not such an update).
pub(crate) async fn marker_removal<V: ClusterView>(
    req: &AdmissionRequest,
    cx: &Context<'_, V>,
) -> Option<Evaluation> {
    use crate::webhookconfig::CONTAINS_PROTECTED_LABEL as MARKER;
    if req.operation != crate::review::Operation::Update || !req.is_namespace() || cx.cfg.kcp {
        return None;
    }
    let old = req.old_object.as_ref().filter(|v| !v.is_null())?;
    let marker = |o: &Value| {
        crate::review::labels(o)
            .and_then(|l| l.get(MARKER))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let before = marker(old)?;
    let after = req.object.as_ref().and_then(marker);
    if after.as_deref() == Some(before.as_str()) {
        return None;
    }
    let name = req.object_name().unwrap_or_default();
    let contents = cx.view.namespace_contents(logical_cluster(old), name).await;
    let judged = judge(req, Container::Namespace(name), contents, cx).await;
    Some(match judged.decision {
        super::Decision::Deny(d) if d.kind == DenialKind::Protected => Evaluation::deny(
            Decider::Containment,
            DenialKind::Protected,
            super::messages::containment_marker_kept(name, MARKER, &list_blockers(&d.blockers)),
            d.blockers,
        ),
        _ => judged,
    })
}

/// Judges a container by `contents`, what it holds, or why that could not be read
/// (refused: fail closed).
async fn judge<V: ClusterView>(
    req: &AdmissionRequest,
    container: Container<'_>,
    contents: Result<Vec<ContainedObject>, LookupError>,
    cx: &Context<'_, V>,
) -> Evaluation {
    let contents = match contents {
        Ok(c) => c,
        Err(e) => {
            return Evaluation::deny(
                Decider::Containment,
                DenialKind::LookupFailed,
                container.unverified(e.message()),
                Vec::new(),
            );
        }
    };
    let blockers = protected_among(req, contents, cx).await;
    if blockers.is_empty() {
        return Evaluation::allow(Decider::None);
    }
    let message = container.protected(&list_blockers(&blockers));
    Evaluation::deny(
        Decider::Containment,
        DenialKind::Protected,
        message,
        blockers,
    )
}

/// kcp: a Workspace is judged by what it and every workspace below it that binds
/// holdfast hold: the protected objects found are named first; a workspace that
/// cannot be read refuses, and so does one holding protected objects whose place in
/// the tree cannot be read (it may lie below): never an unchecked delete.
async fn workspace<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    cx: &Context<'_, V>,
) -> Evaluation {
    let path = super::workspace_path(obj).unwrap_or_else(|| {
        let parent = logical_cluster(obj);
        let name = req.object_name().unwrap_or_default();
        format!("{parent}:{name}")
    });
    let container = || Container::Workspace(&path);
    let contents = match cx.view.workspace_contents(obj).await {
        Ok(c) => c,
        Err(e) => {
            return Evaluation::deny(
                Decider::Containment,
                DenialKind::LookupFailed,
                container().unverified(e.message()),
                Vec::new(),
            );
        }
    };
    let mut blockers = Vec::new();
    let mut unplaced = Vec::new();
    let mut unreadable = Vec::new();
    for wc in contents {
        if let Some(why) = wc.unreadable {
            unreadable.push(why);
            continue;
        }
        let found = protected_among(req, wc.objects, cx).await;
        if found.is_empty() {
            continue;
        }
        match wc.path {
            Some(p) => blockers.extend(found.into_iter().map(|b| format!("{b} in {p}"))),
            None => unplaced.push(wc.cluster),
        }
    }
    if !blockers.is_empty() {
        blockers.sort();
        let message = container().protected(&list_blockers(&blockers));
        return Evaluation::deny(
            Decider::Containment,
            DenialKind::Protected,
            message,
            blockers,
        );
    }
    // What is protected is said first; what could not be read refuses too.
    if !unreadable.is_empty() {
        unreadable.sort();
        return Evaluation::deny(
            Decider::Containment,
            DenialKind::LookupFailed,
            container().unverified(&unreadable.join("; ")),
            Vec::new(),
        );
    }
    if !unplaced.is_empty() {
        unplaced.sort();
        let why = format!(
            "the workspaces of logical cluster {} hold protected objects and \
             holdfast-webhook may not read where they lie (get logicalclusters there, \
             docs/kcp.md Consumer guide)",
            unplaced.join(", ")
        );
        return Evaluation::deny(
            Decider::Containment,
            DenialKind::LookupFailed,
            container().unverified(&why),
            Vec::new(),
        );
    }
    Evaluation::allow(Decider::None)
}

/// The objects among `contents` whose own DELETE would be denied, as
/// `Kind ns/name (policy)`, sorted.
async fn protected_among<V: ClusterView>(
    req: &AdmissionRequest,
    contents: Vec<ContainedObject>,
    cx: &Context<'_, V>,
) -> Vec<String> {
    let mut blockers = Vec::new();
    for item in contents {
        if check_metadata(&item.object).is_err() {
            continue;
        }
        if let Ok(Some(_)) = break_glass(&item.object, cx.now, cx.cfg.max_break_glass) {
            continue;
        }
        let inner = AdmissionRequest {
            uid: req.uid.clone(),
            kind: Gvk {
                group: item.resource.group.clone(),
                version: item.resource.version.clone(),
                kind: item.kind.clone(),
            },
            resource: item.resource.clone(),
            sub_resource: None,
            request_kind: None,
            request_resource: None,
            request_sub_resource: None,
            name: meta_str(&item.object, "name").map(str::to_string),
            namespace: meta_str(&item.object, "namespace")
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            operation: Operation::Delete,
            user_info: req.user_info.clone(),
            object: None,
            old_object: Some((*item.object).clone()),
            dry_run: req.dry_run,
            options: None,
            via_export: req.via_export.clone(),
        };
        let e = label::evaluate_single(&inner, &item.object, cx, "").await;
        if let Decision::Deny(_) = e.decision {
            blockers.push(format!(
                "{} ({})",
                inner.describe(),
                e.decider.metric_label()
            ));
        }
    }
    blockers.sort();
    blockers
}
