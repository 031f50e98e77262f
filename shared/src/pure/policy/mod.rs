//! Policy evaluation: pure functions over an admission request and a view of
//! cluster state. No I/O happens here; the webhook implements [`ClusterView`].
//!
//! Order of evaluation for a DELETE:
//! 1. an object holdfast cannot read is denied (fail closed);
//! 2. break-glass (the skip annotation, its alias, or the allow-deletion label) allows;
//! 3. a protection label with a protecting value denies;
//! 4. if policy objects could govern the request but their registry has not loaded,
//!    the request is denied with "retry later";
//! 5. otherwise allowed.
//!
//! For an UPDATE under strict mode, removing a protection label (or changing it to a
//! value that does not protect) is denied unless the *stored* object already carries
//! `holdfast.dev/strict-exempt: "true"`.
//!
//! One module per protection: `label` (and break-glass), `strict` (UPDATEs),
//! `protection`, `dependency`, `critical` and `anchor` (the policy objects, gathered
//! by `objects`), `containment` (Namespaces and CRDs), `deferred` and `eviction`;
//! every text they write is in [`messages`]; what they produce is in [`outcome`].

mod anchor;
pub mod cascading;
mod containment;
mod critical;
mod deferred;
mod dependency;
mod eviction;
mod explain;
mod label;
pub mod messages;
mod objects;
pub mod outcome;
mod protection;
mod strict;
mod view;

#[cfg(test)]
pub(crate) mod tests;

pub use explain::{Explanation, explain_delete};
pub use label::{BreakGlass, SkipProblem, break_glass, look_alike_warnings};
pub use messages::{DEFERRED_HINT, human_duration, list_blockers};
pub use outcome::{
    BreakGlassState, Decider, Decision, Denial, DenialKind, Evaluation, Finding, PolicyKind,
    PolicyRef,
};
pub use view::{
    AccessReview, ClusterIndex, ClusterLookup, ClusterView, ContainedObject, DependentsQuery,
    LookupError, NoPolicies, WorkspaceContents,
};

use crate::{
    labels::ProtectionLabels,
    review::{AdmissionRequest, Operation, annotations, check_metadata},
};
use chrono::{DateTime, Utc};
use serde_json::Value;

/// How many blockers a message names before "and N more".
pub const MAX_BLOCKERS_SHOWN: usize = 5;

/// Longest break-glass window an RFC 3339 skip annotation may open, by default.
pub const DEFAULT_MAX_BREAK_GLASS: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// Static configuration of the label policy.
#[derive(Clone, Debug)]
pub struct PolicyConfig {
    /// Protection labels in force.
    pub labels: ProtectionLabels,
    /// Global strict mode (`--strict`).
    pub strict: bool,
    /// A skip annotation dated further ahead than this does not count
    /// (`--max-break-glass`).
    pub max_break_glass: chrono::TimeDelta,
    /// The requests come from kcp (`--topology kcp`): every object carries the
    /// `kcp.io/cluster` annotation, and a DELETE of one without it is refused (its
    /// workspace, and so every protection of it, is unknown).
    pub kcp: bool,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            labels: ProtectionLabels::default(),
            strict: false,
            max_break_glass: DEFAULT_MAX_BREAK_GLASS,
            kcp: false,
        }
    }
}

/// What one evaluation runs with besides the request: the configuration, the view
/// of the cluster and the time.
pub(crate) struct Context<'a, V> {
    pub(crate) cfg: &'a PolicyConfig,
    pub(crate) view: &'a V,
    pub(crate) now: DateTime<Utc>,
}

/// `req` as it is judged under `cfg`: outside kcp without any `kcp.io/cluster`
/// annotation on its objects, which means nothing there (anyone who may write an
/// object may set it) and must steer nothing: neither the workspace policies are
/// looked up in nor whether a deferred-deletion request is judged. Borrowed (no
/// copy) unless an object carries one.
pub fn as_judged<'r>(
    req: &'r AdmissionRequest,
    cfg: &PolicyConfig,
) -> std::borrow::Cow<'r, AdmissionRequest> {
    let carries = |o: &Option<Value>| {
        o.as_ref()
            .and_then(annotations)
            .is_some_and(|a| a.contains_key(crate::names::KCP_CLUSTER_ANNOTATION))
    };
    if cfg.kcp || !(carries(&req.object) || carries(&req.old_object)) {
        return std::borrow::Cow::Borrowed(req);
    }
    let mut owned = req.clone();
    for o in [owned.object.as_mut(), owned.old_object.as_mut()]
        .into_iter()
        .flatten()
    {
        forget_logical_cluster(o);
    }
    std::borrow::Cow::Owned(owned)
}

/// Removes the `kcp.io/cluster` annotation from `obj` (outside kcp it means nothing).
pub fn forget_logical_cluster(obj: &mut Value) {
    if let Some(a) = obj
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.remove(crate::names::KCP_CLUSTER_ANNOTATION);
    }
}

/// `<resource> <name> [-n ns]`: what a `kubectl <verb>` hint names.
pub(crate) fn kubectl_target(req: &AdmissionRequest) -> String {
    // Written into one buffer: every denial by a label builds it.
    let mut out = req.resource.write_group_resource(String::with_capacity(96));
    out.push(' ');
    out.push_str(req.object_name().unwrap_or("NAME"));
    if let Some(ns) = req.object_namespace() {
        out.push_str(" -n ");
        out.push_str(ns);
    }
    out
}

/// The logical cluster of an object (kcp), or "": always "" in a process fixed to
/// the Kubernetes topology ([`crate::topology::honours_logical_cluster`]), where
/// anyone who may write the object may set the annotation. Evaluation asks
/// [`Context::cluster`], which also follows `PolicyConfig::kcp`.
pub fn logical_cluster(obj: &Value) -> &str {
    if !crate::topology::honours_logical_cluster() {
        return "";
    }
    annotations(obj)
        .and_then(|a| a.get(crate::names::KCP_CLUSTER_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Evaluates the label policy, strict mode and break-glass; see the module docs.
pub async fn evaluate<V: ClusterView>(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Evaluation {
    let judged = as_judged(req, cfg);
    let req = &*judged;
    let cx = Context { cfg, view, now };
    // Deferred deletion exists outside kcp only; there `kcp.io/cluster` means
    // nothing (anyone may set it), so it never exempts a request from judgement.
    if !cfg.kcp
        && matches!(req.operation, Operation::Create | Operation::Update)
        && !req.is_eviction()
        && crate::deferred::request_changed(req)
        && let Some(denied) = deferred::evaluate_request(req, view, now).await
    {
        return denied;
    }
    let eval = match req.operation {
        Operation::Delete => deferred::with_hint(cfg, evaluate_delete(req, &cx).await),
        Operation::Create if req.is_eviction() => eviction::evaluate(req, &cx).await,
        Operation::Update => match containment::marker_removal(req, &cx).await {
            Some(e) if !matches!(e.decision, Decision::Allow) => e,
            _ => strict::evaluate_update(req, &cx).await,
        },
        Operation::Create | Operation::Connect => Evaluation::allow(Decider::None),
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return eval;
    }
    with_warnings(eval, look_alike_warnings(req, cfg))
}

/// kcp: the refusal of a review that came through the route of workspace `route`
/// (`/validate/kcp/<logical cluster>`) for an object of another workspace: that
/// workspace's configuration may not speak for others. The stored object
/// (oldObject: UPDATE, DELETE) always carries its workspace, so one without it is
/// refused too; a new object (CREATE) without it is taken as the route's. `None`
/// when the object is of `route`.
pub fn foreign_workspace(req: &AdmissionRequest, route: &str) -> Option<Evaluation> {
    let (object, stored) = match req.old_object.as_ref().filter(|v| !v.is_null()) {
        Some(old) => (logical_cluster(old), true),
        None => (req.object.as_ref().map_or("", logical_cluster), false),
    };
    if object == route || (object.is_empty() && !stored) {
        return None;
    }
    Some(Evaluation::deny(
        Decider::Unreadable,
        DenialKind::Unreadable,
        messages::foreign_workspace(req.operation.as_str(), &req.describe(), route, object),
        Vec::new(),
    ))
}

/// Adds `warnings` to an allowing verdict (a denial needs none).
fn with_warnings(mut eval: Evaluation, warnings: Vec<String>) -> Evaluation {
    if warnings.is_empty() {
        return eval;
    }
    eval.decision = match eval.decision {
        Decision::Allow => Decision::Warn(warnings),
        Decision::Warn(mut w) => {
            w.extend(warnings);
            Decision::Warn(w)
        }
        deny @ Decision::Deny(_) => deny,
    };
    eval
}

/// The refusal of a request whose object cannot be read (fail closed).
pub(crate) fn unreadable(req: &AdmissionRequest, why: &str) -> Evaluation {
    Evaluation::deny(
        Decider::Unreadable,
        DenialKind::Unreadable,
        messages::unreadable(req.operation.as_str(), &req.describe(), why),
        Vec::new(),
    )
}

/// kcp: the path of the Workspace `workspace` (the stored object), read from the
/// `spec.URL` kcp sets (`https://SHARD/clusters/<path>`; only system identities may
/// set or change it). `None` before kcp has scheduled it.
pub fn workspace_path(workspace: &Value) -> Option<String> {
    let url = workspace.pointer("/spec/URL")?.as_str()?;
    let (_, path) = url.rsplit_once("/clusters/")?;
    let path = path.trim_end_matches('/');
    crate::topology::is_workspace_path(path).then(|| path.to_string())
}

/// A DELETE: break-glass, then every protection of the object, then containment.
pub(crate) async fn evaluate_delete<V: ClusterView>(
    req: &AdmissionRequest,
    cx: &Context<'_, V>,
) -> Evaluation {
    let Some(obj) = req.subject() else {
        return unreadable(req, "the request carries no oldObject");
    };
    if let Err(why) = check_metadata(obj) {
        return unreadable(req, &why);
    }
    if cx.cfg.kcp && logical_cluster(obj).is_empty() {
        return unreadable(req, messages::NO_LOGICAL_CLUSTER);
    }
    let skip_note = match break_glass(obj, cx.now, cx.cfg.max_break_glass) {
        // kcp deletes a workspace's contents past holdfast (its own configuration
        // and policies may go first, kcp-facts 23): the marker on a Workspace is
        // honoured only once nothing protected is left in it or below it.
        Ok(Some(_)) if cx.cfg.kcp && req.is_workspace() => {
            return match containment::evaluate(req, obj, cx).await {
                Some(e) if !matches!(e.decision, Decision::Allow) => e,
                _ => Evaluation::allow(Decider::BreakGlass),
            };
        }
        Ok(Some(_)) => return Evaluation::allow(Decider::BreakGlass),
        Ok(None) => String::new(),
        Err(problem) => messages::skip_note(&problem),
    };
    let single = label::evaluate_single(req, obj, cx, &skip_note).await;
    if matches!(single.decision, Decision::Deny(_)) {
        return single;
    }
    let Some(contained) = containment::evaluate(req, obj, cx).await else {
        return single;
    };
    match contained.decision {
        Decision::Allow => single,
        _ => contained,
    }
}
