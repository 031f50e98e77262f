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

use crate::{
    api::common::{Enforcement, GroupResource},
    cascading::{Live, live_contents},
    index::Referrer,
    labels::ProtectionLabels,
    names::{
        ALLOW_DELETION_LABEL, ALLOW_DELETION_LABEL_APPCAT, MESSAGE_PREFIX, SKIP_ANNOTATION,
        SKIP_ANNOTATION_DEPENDENCIES, STRICT_EXEMPT_LABEL,
    },
    registry::{
        AnchorSourceRef, CompiledAnchor, CompiledCriterion, CompiledCritical, CompiledDependency,
        CompiledProtection, critical_services_gr, namespaces_gr,
    },
    review::{AdmissionRequest, Gvk, Operation, annotations, check_metadata, labels},
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::{future::Future, sync::Arc};

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
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            labels: ProtectionLabels::default(),
            strict: false,
            max_break_glass: DEFAULT_MAX_BREAK_GLASS,
        }
    }
}

/// A question for the dependents lookup: who references `name` of `dep.target`?
#[derive(Clone, Copy, Debug)]
pub struct DependentsQuery<'a> {
    /// Logical cluster of the deleted object ("" on plain Kubernetes).
    pub cluster: &'a str,
    /// The dependency being checked.
    pub dep: &'a CompiledDependency,
    /// Name of the object being deleted.
    pub name: &'a str,
    /// Its namespace (None when cluster-scoped: references from every namespace count).
    pub namespace: Option<&'a str>,
}

/// Why dependents could not be looked up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LookupError(pub String);

/// What the webhook knows about the cluster, as the policies need it.
///
/// Label and strict-mode decisions need nothing from here except the registry state.
/// Lookups that may need I/O (dependents) are async; everything else answers from
/// watch-fed indexes.
pub trait ClusterView: Send + Sync {
    /// Whether every registry of policy objects has completed its initial load.
    fn policies_loaded(&self) -> bool;

    /// Whether some policy object may govern a DELETE of this object. Before the
    /// registry has loaded, a view that has policy sources must answer `true`
    /// (it cannot know otherwise).
    fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
        false
    }

    /// Whether a strict policy object covers this object (beyond `--strict`).
    fn strict_for(&self, _req: &AdmissionRequest) -> bool {
        false
    }

    /// ResourceProtections that select objects of `gr`.
    fn protections(&self, _gr: &GroupResource) -> Option<Arc<[Arc<CompiledProtection>]>> {
        None
    }

    /// The ResourceProtections of `gr` that could select an object in `namespace`
    /// (`None`: cluster-scoped): those for every namespace and those naming it, in the
    /// registry's order. The default visits every one; a view with an index answers
    /// from it.
    fn protection_candidates(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
    ) -> Vec<Arc<CompiledProtection>> {
        self.protections(gr)
            .map(|list| {
                list.iter()
                    .filter(|p| {
                        p.selectors
                            .iter()
                            .any(|s| s.selects_resource(gr) && s.namespace_matches(namespace))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// DependencyRules (their dependencies) protecting `gr`.
    fn dependencies(&self, _gr: &GroupResource) -> Option<Arc<[Arc<Vec<CompiledDependency>>]>> {
        None
    }

    /// The objects that reference the deleted object through `q.dep`.
    fn dependents(
        &self,
        _q: DependentsQuery<'_>,
    ) -> impl Future<Output = Result<Vec<Referrer>, LookupError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// CriticalServices concerned by a DELETE of `gr` (provider resource, namespaces,
    /// criticalservices).
    fn critical(&self, _gr: &GroupResource) -> Option<Arc<[Arc<CompiledCritical>]>> {
        None
    }

    /// AnchorRules protecting `gr`.
    fn anchors(&self, _gr: &GroupResource) -> Option<Arc<[Arc<CompiledAnchor>]>> {
        None
    }

    /// How many objects of `gr` in `cluster` carry `finalizer`.
    fn count_finalizer(
        &self,
        _cluster: &str,
        _gr: &GroupResource,
        _finalizer: &str,
    ) -> impl Future<Output = Result<usize, LookupError>> + Send {
        async { Ok(0) }
    }

    /// The object `name` (in `namespace`) of `gr` in `cluster`, if it exists. Anchors
    /// come back whole enough to read their toggle; others at least with metadata.
    fn object(
        &self,
        _cluster: &str,
        _gr: &GroupResource,
        _namespace: Option<&str>,
        _name: &str,
    ) -> impl Future<Output = Result<Option<Arc<Value>>, LookupError>> + Send {
        async { Ok(None) }
    }

    /// The anchor `name` (in `namespace`) of `gr` in the cluster of anchor source
    /// `source`, if it exists. Fails (and so refuses) while the source is not synced
    /// or unreachable.
    fn remote_object(
        &self,
        source: &AnchorSourceRef,
        _gr: &GroupResource,
        _namespace: Option<&str>,
        _name: &str,
    ) -> impl Future<Output = Result<Option<Arc<Value>>, LookupError>> + Send {
        let message = format!("anchor source {source} is not available here");
        async move { Err(LookupError(message)) }
    }

    /// Whether the requesting user may bypass protection of this object (a
    /// SubjectAccessReview: verb `bypass`, group `holdfast.dev`, resource
    /// `protections`, the object's namespace).
    fn can_bypass(
        &self,
        _req: &AdmissionRequest,
    ) -> impl Future<Output = Result<bool, LookupError>> + Send {
        async {
            Err(LookupError(
                "no API server is available to check the bypass permission".to_string(),
            ))
        }
    }

    /// Whether `user` alone, with the groups the API server gives an impersonated
    /// user ([`crate::deferred::impersonated_groups`]), may delete the object of
    /// `req` (a SubjectAccessReview: verb `delete` on its resource, name and
    /// namespace). Deferred deletion is carried out so.
    fn can_delete_as(
        &self,
        _req: &AdmissionRequest,
        _user: &str,
    ) -> impl Future<Output = Result<bool, LookupError>> + Send {
        async {
            Err(LookupError(
                "no API server is available to check the delete permission".to_string(),
            ))
        }
    }

    /// A strict ResourceProtection that selects the stored object but would no
    /// longer select the updated one (its labels changed), by name.
    fn strict_selection_lost(&self, _req: &AdmissionRequest) -> Option<String> {
        None
    }

    /// Every object in namespace `ns` of `cluster` that some protection could cover
    /// (labelled objects, and objects of every resource a policy object protects).
    fn namespace_contents(
        &self,
        _cluster: &str,
        _ns: &str,
    ) -> impl Future<Output = Result<Vec<ContainedObject>, LookupError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// Every instance of the custom resource the CustomResourceDefinition `crd`
    /// defines, in `cluster` (at least their metadata): deleting the CRD deletes them
    /// all from storage, without a DELETE review for any of them.
    fn custom_resources(
        &self,
        _cluster: &str,
        _crd: &Value,
    ) -> impl Future<Output = Result<Vec<ContainedObject>, LookupError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// Whether this view can tell live contents (Cascading protection). A view that
    /// cannot (`--label-only`) makes `Cascading` protect like `Always`.
    fn cascading_judged(&self) -> bool {
        false
    }

    /// The live contents of namespace `ns` in `cluster`: every Pod neither Succeeded,
    /// Failed nor terminating, and every PersistentVolumeClaim, as `Kind ns/name`,
    /// sorted. An error while they cannot be told (fail closed).
    fn live_in_namespace(
        &self,
        _cluster: &str,
        _ns: &str,
    ) -> impl Future<Output = Result<Vec<String>, LookupError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// The instances of the CustomResourceDefinition `crd` in `cluster` that are not
    /// terminating, as `Kind ns/name`, sorted.
    fn live_instances(
        &self,
        _cluster: &str,
        _crd: &Value,
    ) -> impl Future<Output = Result<Vec<String>, LookupError>> + Send {
        async { Ok(Vec::new()) }
    }

    /// The replica path of custom resource `resource` in `group` (its CRD's
    /// `scale.specReplicasPath`), or `None` when it has no scale subresource (or is no
    /// custom resource).
    fn replicas_path(
        &self,
        _cluster: &str,
        _group: &str,
        _resource: &str,
    ) -> impl Future<Output = Result<Option<String>, LookupError>> + Send {
        async { Ok(None) }
    }
}

/// An object inside a namespace, for containment checks.
#[derive(Clone, Debug)]
pub struct ContainedObject {
    /// Its group/version/resource.
    pub resource: crate::review::Gvr,
    /// Its kind.
    pub kind: String,
    /// The object (at least its metadata).
    pub object: Arc<Value>,
}

/// A view for a webhook that has no policy sources: always loaded, governs nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPolicies;

impl ClusterView for NoPolicies {
    fn policies_loaded(&self) -> bool {
        true
    }
}

/// Why a request was denied (drives metrics and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenialKind {
    /// A policy protects the object.
    Protected,
    /// The registry has not loaded yet.
    NotReady,
    /// The object could not be read.
    Unreadable,
    /// Dependents could not be looked up (fail closed).
    LookupFailed,
}

/// A denial: the message for the user and the blockers it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// Full message, starting with `holdfast:`.
    pub message: String,
    /// What stands in the way (objects, labels...).
    pub blockers: Vec<String>,
    /// Why.
    pub kind: DenialKind,
}

/// The verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Allowed, with warnings for the client.
    Warn(Vec<String>),
    /// Denied.
    Deny(Denial),
}

/// A verdict and the policy that produced it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The verdict.
    pub decision: Decision,
    /// Which policy decided, for metrics: `none`, `label`, `strict`, `break-glass`,
    /// `not-ready`, `unreadable`, or `Kind/name` of a policy object.
    pub policy: String,
    /// Denials that policies in Audit mode would have made (allowed, counted, logged).
    pub audits: Vec<String>,
}

impl Evaluation {
    fn allow(policy: &str) -> Self {
        Self {
            decision: Decision::Allow,
            policy: policy.to_string(),
            audits: Vec::new(),
        }
    }

    fn deny(policy: &str, kind: DenialKind, message: String, blockers: Vec<String>) -> Self {
        Self {
            decision: Decision::Deny(Denial {
                message,
                blockers,
                kind,
            }),
            policy: policy.to_string(),
            audits: Vec::new(),
        }
    }

    /// `allow`, `warn` or `deny`, for metrics.
    pub fn decision_label(&self) -> &'static str {
        match self.decision {
            Decision::Allow => "allow",
            Decision::Warn(_) => "warn",
            Decision::Deny(_) => "deny",
        }
    }
}

/// Which break-glass marker allowed a deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakGlass {
    /// `annotation KEY` or `label KEY`.
    pub source: String,
}

/// Why a skip annotation present on an object is not honoured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipProblem {
    /// An RFC 3339 time that has passed.
    Expired(String),
    /// A value that is neither `true` nor an RFC 3339 time.
    BadValue(String),
    /// An RFC 3339 time further ahead than the longest break-glass window allowed.
    TooFar(String, chrono::TimeDelta),
}

/// Looks for a break-glass marker on `obj`: the annotation `holdfast.dev/skip-protection`
/// or `dependencies.opendefense.cloud/skip-protection` with value `true` or an RFC 3339
/// time still in the future (and at most `max` ahead), or the label
/// `appcat.vshn.io/webhook-allowdeletion: "true"`.
pub fn break_glass(
    obj: &Value,
    now: DateTime<Utc>,
    max: chrono::TimeDelta,
) -> Result<Option<BreakGlass>, SkipProblem> {
    let mut problem = None;
    if let Some(ann) = annotations(obj) {
        for key in [SKIP_ANNOTATION, SKIP_ANNOTATION_DEPENDENCIES] {
            let Some(value) = ann.get(key).and_then(Value::as_str) else {
                continue;
            };
            let value = value.trim();
            if value == "true" {
                return Ok(Some(BreakGlass {
                    source: format!("annotation {key}"),
                }));
            }
            match DateTime::parse_from_rfc3339(value) {
                Ok(until) if until.with_timezone(&Utc) > now + max => {
                    problem = Some(SkipProblem::TooFar(format!("{key}={value}"), max));
                }
                Ok(until) if until.with_timezone(&Utc) > now => {
                    return Ok(Some(BreakGlass {
                        source: format!("annotation {key} (until {value})"),
                    }));
                }
                Ok(_) => problem = Some(SkipProblem::Expired(format!("{key}={value}"))),
                Err(_) => problem = Some(SkipProblem::BadValue(format!("{key}={value}"))),
            }
        }
    }
    if let Some(l) = labels(obj)
        && l.get(ALLOW_DELETION_LABEL_APPCAT).and_then(Value::as_str) == Some("true")
    {
        return Ok(Some(BreakGlass {
            source: format!("label {ALLOW_DELETION_LABEL_APPCAT}"),
        }));
    }
    match problem {
        Some(p) => Err(p),
        None => Ok(None),
    }
}

/// `24h`, `90m`, `45s`: the largest whole unit.
pub fn human_duration(d: chrono::TimeDelta) -> String {
    let secs = d.num_seconds();
    if secs > 0 && secs % 3600 == 0 {
        format!("{}h", secs / 3600)
    } else if secs > 0 && secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// Formats up to [`MAX_BLOCKERS_SHOWN`] blockers, then "and N more".
pub fn list_blockers(blockers: &[String]) -> String {
    let shown = blockers
        .iter()
        .take(MAX_BLOCKERS_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if blockers.len() > MAX_BLOCKERS_SHOWN {
        format!("{shown} and {} more", blockers.len() - MAX_BLOCKERS_SHOWN)
    } else {
        shown
    }
}

/// `kubectl <verb> <resource> <name> [-n ns]` prefix for hints.
fn kubectl_target(req: &AdmissionRequest) -> String {
    let resource = req.resource.group_resource();
    let name = req.object_name().unwrap_or("NAME");
    match req.object_namespace() {
        Some(ns) => format!("{resource} {name} -n {ns}"),
        None => format!("{resource} {name}"),
    }
}

/// Evaluates the label policy, strict mode and break-glass; see the module docs.
pub async fn evaluate<V: ClusterView>(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Evaluation {
    if matches!(req.operation, Operation::Create | Operation::Update)
        && !req.is_eviction()
        && crate::deferred::request_changed(req)
        && req
            .object
            .as_ref()
            .is_some_and(|o| logical_cluster(o).is_empty())
        && let Some(denied) = evaluate_deferred_request(req, view).await
    {
        return denied;
    }
    let eval = match req.operation {
        Operation::Delete => with_deferred_hint(req, evaluate_delete(req, cfg, view, now).await),
        Operation::Create if req.is_eviction() => evaluate_eviction(req, cfg, view, now).await,
        Operation::Update => evaluate_update(req, cfg, view, now).await,
        Operation::Create | Operation::Connect => Evaluation::allow("none"),
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return eval;
    }
    with_warnings(eval, look_alike_warnings(req, cfg))
}

/// The sentence a policy's refusal of a DELETE ends with: the deferred option.
pub const DEFERRED_HINT: &str = "To have holdfast delete it once nothing blocks it, \
     ask for deferred deletion (holdfast.dev/delete-when-unblocked).";

/// Appends [`DEFERRED_HINT`] to the refusal of a DELETE by a policy object (its
/// blockers may go away); label protection and lookup failures do not end on
/// their own. Not on kcp (an object of a logical cluster), where nothing carries
/// deferred deletion out.
fn with_deferred_hint(req: &AdmissionRequest, mut eval: Evaluation) -> Evaluation {
    let on_kcp = req
        .old_object
        .as_ref()
        .is_some_and(|o| !logical_cluster(o).is_empty());
    if let Decision::Deny(d) = &mut eval.decision
        && d.kind == DenialKind::Protected
        && eval.policy.contains('/')
        && !on_kcp
    {
        d.message = format!("{} {DEFERRED_HINT}", d.message);
    }
    eval
}

/// Judges a CREATE or UPDATE that sets or changes a deferred-deletion request:
/// refused (`Some`) unless its markers are complete, name the requester, and the
/// requester may delete the object as the controller will impersonate them.
async fn evaluate_deferred_request<V: ClusterView>(
    req: &AdmissionRequest,
    view: &V,
) -> Option<Evaluation> {
    use crate::deferred::{request_patch, request_problem};
    let new = req.object.as_ref()?;
    let user = req.user_info.username.as_str();
    let what = req.describe();
    let blockers = vec![crate::names::DELETE_WHEN_UNBLOCKED.to_string()];
    if let Some(problem) = request_problem(new, user) {
        return Some(Evaluation::deny(
            "deferred",
            DenialKind::Protected,
            format!(
                "{MESSAGE_PREFIX} cannot accept the deferred deletion request on {what}: \
                 {problem}. Set all three in one request: kubectl patch {} --type merge -p '{}'",
                kubectl_target(req),
                request_patch(user),
            ),
            blockers,
        ));
    }
    let resource = req.resource.group_resource();
    let scope = req
        .object_namespace()
        .map(|n| format!(" in namespace {n}"))
        .unwrap_or_default();
    match view.can_delete_as(req, user).await {
        Ok(true) => None,
        Ok(false) => Some(Evaluation::deny(
            "deferred",
            DenialKind::Protected,
            format!(
                "{MESSAGE_PREFIX} user {user:?} may not ask for the deferred deletion of {what}: \
                 that takes the permission to delete it (verb delete on {resource}{scope}), which \
                 {user:?} does not hold as holdfast will use it: it deletes the object later \
                 by impersonating the user name alone, without the groups of this request."
            ),
            blockers,
        )),
        Err(e) => Some(Evaluation::deny(
            "deferred",
            DenialKind::LookupFailed,
            format!(
                "{MESSAGE_PREFIX} cannot check whether user {user:?} may delete {what}: {e}. \
                 Refusing rather than accept the deferred deletion request unchecked; retry \
                 later."
            ),
            blockers,
        )),
    }
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

/// Warnings for protection labels whose value looks protecting but is not
/// (`always`, `TRUE`, a value with spaces): they protect nothing, and saying so at
/// create/update time beats finding out at deletion time.
pub fn look_alike_warnings(req: &AdmissionRequest, cfg: &PolicyConfig) -> Vec<String> {
    let Some(obj) = req.object.as_ref() else {
        return Vec::new();
    };
    let old = req.old_object.as_ref().and_then(labels);
    cfg.labels
        .look_alikes(labels(obj))
        .into_iter()
        .filter(|(l, v)| {
            // On UPDATE, only when the value is new.
            old.and_then(|o| o.get(&l.key)).and_then(Value::as_str) != Some(v)
        })
        .map(|(l, v)| {
            format!(
                "{MESSAGE_PREFIX} label {}={v:?} on {} does not protect it: the value must be \
                 exactly {} (case-sensitive, no spaces).",
                l.key,
                req.describe(),
                l.values
                    .iter()
                    .map(|x| format!("{x:?}"))
                    .collect::<Vec<_>>()
                    .join(" or "),
            )
        })
        .collect()
}

/// An eviction (`CREATE pods/eviction`) deletes the pod without a DELETE review:
/// it is judged as the DELETE of the pod it names would be.
async fn evaluate_eviction<V: ClusterView>(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Evaluation {
    let Some(name) = req.name.as_deref().filter(|n| !n.is_empty()) else {
        return unreadable(req, "the eviction names no pod");
    };
    let cluster = req.object.as_ref().map(logical_cluster).unwrap_or_default();
    let ns = req.namespace.as_deref();
    let pod = match view
        .object(cluster, &GroupResource::new("", "pods"), ns, name)
        .await
    {
        Ok(Some(pod)) => pod,
        // No such pod: the API server answers 404 itself.
        Ok(None) => return Evaluation::allow("none"),
        Err(e) => {
            return Evaluation::deny(
                "eviction",
                DenialKind::LookupFailed,
                format!(
                    "{MESSAGE_PREFIX} cannot read Pod {}/{name} to judge its eviction: {e}. \
                     Refusing rather than risk evicting a protected pod; retry later.",
                    ns.unwrap_or_default()
                ),
                Vec::new(),
            );
        }
    };
    let delete = AdmissionRequest {
        kind: Gvk {
            group: String::new(),
            version: "v1".to_string(),
            kind: "Pod".to_string(),
        },
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        operation: Operation::Delete,
        object: None,
        old_object: Some((*pod).clone()),
        options: None,
        ..req.clone()
    };
    let mut eval = evaluate_delete(&delete, cfg, view, now).await;
    if let Decision::Deny(d) = &mut eval.decision {
        d.message = format!(
            "{MESSAGE_PREFIX} eviction refused: {}",
            d.message
                .strip_prefix(MESSAGE_PREFIX)
                .unwrap_or(&d.message)
                .trim_start()
        );
    }
    eval
}

fn unreadable(req: &AdmissionRequest, why: &str) -> Evaluation {
    Evaluation::deny(
        "unreadable",
        DenialKind::Unreadable,
        format!(
            "{MESSAGE_PREFIX} cannot evaluate {} of {}: {why}; refusing rather than risk \
             removing a protected object. Retry the request; if it keeps failing, check the \
             object with kubectl get -o yaml.",
            req.operation.as_str(),
            req.describe()
        ),
        Vec::new(),
    )
}

async fn evaluate_delete<V: ClusterView>(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Evaluation {
    let Some(obj) = req.subject() else {
        return unreadable(req, "the request carries no oldObject");
    };
    if let Err(why) = check_metadata(obj) {
        return unreadable(req, &why);
    }
    let skip = break_glass(obj, now, cfg.max_break_glass);
    if let Ok(Some(_)) = skip {
        return Evaluation::allow("break-glass");
    }
    let skip_note = match &skip {
        Err(SkipProblem::Expired(v)) => format!(" (break-glass {v} has expired)"),
        Err(SkipProblem::BadValue(v)) => {
            format!(" (break-glass {v} is ignored: use \"true\" or an RFC 3339 time)")
        }
        Err(SkipProblem::TooFar(v, max)) => format!(
            " (break-glass {v} is ignored: it lies more than {} ahead, the longest \
             break-glass window this installation allows)",
            human_duration(*max)
        ),
        _ => String::new(),
    };
    let single = evaluate_single(req, obj, cfg, view, &skip_note).await;
    if matches!(single.decision, Decision::Deny(_)) {
        return single;
    }
    let Some(contained) = containment(req, obj, cfg, view, now).await else {
        return single;
    };
    match contained.decision {
        Decision::Allow => single,
        _ => contained,
    }
}

/// Containment of a Namespace or CustomResourceDefinition (`None` for anything else).
async fn containment<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Option<Evaluation> {
    let name = req.object_name().unwrap_or_default();
    let cluster = logical_cluster(obj);
    Some(if req.is_namespace() {
        let container = Container {
            what: format!("Namespace {name}"),
            holds: "holds objects",
            unverified: format!("what Namespace {name} holds"),
            risk: "a half-deleted namespace",
            consequence: "that would leave it half-deleted",
            bypass_on: "namespace",
        };
        let contents = view.namespace_contents(cluster, name).await;
        evaluate_containment(req, container, contents, cfg, view, now).await
    } else if req.is_crd() {
        let container = Container {
            what: format!("CustomResourceDefinition {name}"),
            holds: "has instances",
            unverified: format!("what instances CustomResourceDefinition {name} has"),
            risk: "deleting protected objects with it",
            consequence: "that would delete them all, unchecked",
            bypass_on: "CustomResourceDefinition",
        };
        let contents = view.custom_resources(cluster, obj).await;
        evaluate_containment(req, container, contents, cfg, view, now).await
    } else {
        return None;
    })
}

/// The state of the break-glass markers on an object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakGlassState {
    /// The marker that counts (`annotation KEY`, `label KEY`), if one does.
    pub active: Option<String>,
    /// Why a marker present does not count (expired, bad value, too far ahead).
    pub ignored: Option<String>,
}

/// Everything that concerns the DELETE of one object, for `kubectl holdfast why`:
/// the webhook's own verdict, and every protection met, uncapped and whatever its
/// mode (the verdict keeps only the first refusal and caps the blockers it names).
#[derive(Clone, Debug)]
pub struct Explanation {
    /// What the webhook would answer ([`evaluate`] itself).
    pub evaluation: Evaluation,
    /// Every protection met, in evaluation order: labels, policy objects, containment.
    pub findings: Vec<Finding>,
    /// Break-glass markers on the object.
    pub break_glass: BreakGlassState,
}

/// Explains a DELETE `req`: the same evaluation as [`evaluate`], then every
/// protection it meets listed on its own (a label's refusal does not hide the policy
/// objects that would refuse next; a break-glass marker does not hide what it
/// overrides).
pub async fn explain_delete<V: ClusterView>(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Explanation {
    let evaluation = evaluate(req, cfg, view, now).await;
    let mut findings = Vec::new();
    let mut state = BreakGlassState {
        active: None,
        ignored: None,
    };
    let Some(obj) = req.subject().filter(|o| check_metadata(o).is_ok()) else {
        return Explanation {
            evaluation,
            findings,
            break_glass: state,
        };
    };
    match break_glass(obj, now, cfg.max_break_glass) {
        Ok(Some(b)) => state.active = Some(b.source),
        Ok(None) => {}
        Err(SkipProblem::Expired(v)) => state.ignored = Some(format!("{v} has expired")),
        Err(SkipProblem::BadValue(v)) => {
            state.ignored = Some(format!("{v} is neither \"true\" nor an RFC 3339 time"))
        }
        Err(SkipProblem::TooFar(v, max)) => {
            state.ignored = Some(format!(
                "{v} lies more than {} ahead, the longest break-glass window allowed",
                human_duration(max)
            ))
        }
    }
    let single = evaluate_single(req, obj, cfg, view, "").await;
    if single.policy == "label"
        && let Decision::Deny(d) = &single.decision
    {
        let key = cfg
            .labels
            .protecting(labels(obj))
            .map(|l| l.key.to_string())
            .unwrap_or_default();
        findings.push(Finding {
            policy: format!("label {key}"),
            enforcement: Enforcement::Enforce,
            lookup_failed: d.kind == DenialKind::LookupFailed,
            message: d.message.clone(),
            blockers: d.blockers.clone(),
        });
    }
    if !view.may_govern_delete(req) || view.policies_loaded() {
        findings.extend(policy_objects_outcome(req, obj, view).await.findings);
    }
    if let Some(c) = containment(req, obj, cfg, view, now).await
        && let Decision::Deny(d) = c.decision
    {
        findings.push(Finding {
            policy: "containment".to_string(),
            enforcement: Enforcement::Enforce,
            lookup_failed: d.kind == DenialKind::LookupFailed,
            message: d.message,
            blockers: d.blockers,
        });
    }
    Explanation {
        evaluation,
        findings,
        break_glass: state,
    }
}

/// The objects among `contents` whose own DELETE would be denied, as
/// `Kind ns/name (policy)`, sorted.
async fn protected_among<V: ClusterView>(
    req: &AdmissionRequest,
    contents: Vec<ContainedObject>,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Vec<String> {
    let mut blockers = Vec::new();
    for item in contents {
        if check_metadata(&item.object).is_err() {
            continue;
        }
        if let Ok(Some(_)) = break_glass(&item.object, now, cfg.max_break_glass) {
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
            name: crate::review::meta_str(&item.object, "name").map(str::to_string),
            namespace: crate::review::meta_str(&item.object, "namespace")
                .filter(|n| !n.is_empty())
                .map(str::to_string),
            operation: Operation::Delete,
            user_info: req.user_info.clone(),
            object: None,
            old_object: Some((*item.object).clone()),
            dry_run: req.dry_run,
            options: None,
        };
        let e = evaluate_single(&inner, &item.object, cfg, view, "").await;
        if let Decision::Deny(_) = e.decision {
            blockers.push(format!("{} ({})", inner.describe(), e.policy));
        }
    }
    blockers.sort();
    blockers
}

/// What a containment refusal says about its container.
struct Container<'a> {
    /// "Namespace prod", "CustomResourceDefinition widgets.example.com".
    what: String,
    /// "holds objects", "has instances".
    holds: &'a str,
    /// What could not be verified when the contents cannot be read: "what Namespace
    /// prod holds".
    unverified: String,
    /// Why unchecked contents matter: the tail of "Refusing rather than risk ...".
    risk: &'a str,
    /// What deleting it anyway would do.
    consequence: &'a str,
    /// How the bypass hint names it.
    bypass_on: &'a str,
}

/// Containment: a namespace holding any object whose own DELETE would be denied
/// cannot be deleted; nor can a CustomResourceDefinition (deleting it deletes every
/// instance from storage without a DELETE review). `contents` is what the container
/// holds, or why that could not be read (refused: fail closed).
async fn evaluate_containment<V: ClusterView>(
    req: &AdmissionRequest,
    container: Container<'_>,
    contents: Result<Vec<ContainedObject>, LookupError>,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Evaluation {
    let Container {
        what,
        holds,
        unverified,
        risk,
        consequence,
        bypass_on,
    } = container;
    let contents = match contents {
        Ok(c) => c,
        Err(e) => {
            return Evaluation::deny(
                "containment",
                DenialKind::LookupFailed,
                format!(
                    "{MESSAGE_PREFIX} cannot verify {unverified}: {e}. Refusing rather than \
                     risk {risk}; retry later, {BYPASS_HINT}."
                ),
                Vec::new(),
            );
        }
    };
    let blockers = protected_among(req, contents, cfg, view, now).await;
    if blockers.is_empty() {
        return Evaluation::allow("none");
    }
    let message = format!(
        "{MESSAGE_PREFIX} {what} {holds} that are protected from deletion: {} (policy: \
         containment), so it cannot be deleted: {consequence}. To delete it, first lift the \
         protection of those objects (or delete them), {BYPASS_HINT} on the {bypass_on}.",
        list_blockers(&blockers)
    );
    Evaluation::deny("containment", DenialKind::Protected, message, blockers)
}

/// Every protection of one object, without containment.
async fn evaluate_single<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    cfg: &PolicyConfig,
    view: &V,
    skip_note: &str,
) -> Evaluation {
    if let Some(found) = cfg.labels.protecting(labels(obj)) {
        let target = kubectl_target(req);
        let mut note = String::new();
        if found.cascading() {
            if !view.cascading_judged() {
                note = " (this webhook does not watch live contents, so Cascading protects \
                        like Always here)"
                    .to_string();
            } else {
                match live_contents(req, obj, view).await {
                    Live::Drained => {
                        return evaluate_after_labels(req, obj, view).await;
                    }
                    Live::NoContents => {
                        note = format!(
                            " ({} has no live contents holdfast can tell, so Cascading \
                             protects it like Always)",
                            req.describe()
                        );
                    }
                    Live::Unknown(why) => {
                        return Evaluation::deny(
                            "label",
                            DenialKind::LookupFailed,
                            format!(
                                "{MESSAGE_PREFIX} {} is protected by label {}={} (policy: \
                                 label {}) while it has live contents, and {why}. Refusing \
                                 rather than risk deleting them; retry later, {BYPASS_HINT}.",
                                req.describe(),
                                found.key,
                                found.value,
                                found.key,
                            ),
                            Vec::new(),
                        );
                    }
                    Live::Alive {
                        condition,
                        still,
                        blockers,
                        drain,
                    } => {
                        let message = format!(
                            "{MESSAGE_PREFIX} {} is protected by label {}={} (policy: label \
                             {}) {condition}, and {still}, so it cannot be deleted{skip_note}. \
                             To delete it, first {drain}; or {}, or set the annotation \
                             {SKIP_ANNOTATION}=true if you are allowed to bypass protection.",
                            req.describe(),
                            found.key,
                            found.value,
                            found.key,
                            unprotect_hint(cfg, view, req, &target, found.key),
                        );
                        return Evaluation::deny("label", DenialKind::Protected, message, blockers);
                    }
                }
            }
        }
        let unprotect = unprotect_hint(cfg, view, req, &target, found.key);
        let message = format!(
            "{MESSAGE_PREFIX} {} is protected by label {}={} (policy: label {}), so it cannot \
             be deleted{note}{skip_note}. To delete it, {unprotect}, or set the annotation \
             {SKIP_ANNOTATION}=true if you are allowed to bypass protection.",
            req.describe(),
            found.key,
            found.value,
            found.key,
        );
        return Evaluation::deny(
            "label",
            DenialKind::Protected,
            message,
            vec![format!("label {}={}", found.key, found.value)],
        );
    }
    evaluate_after_labels(req, obj, view).await
}

/// How to lift a label's protection: remove it (after the exemption under strict mode).
fn unprotect_hint<V: ClusterView>(
    cfg: &PolicyConfig,
    view: &V,
    req: &AdmissionRequest,
    target: &str,
    key: &str,
) -> String {
    if cfg.strict || view.strict_for(req) {
        format!(
            "first mark it exempt in its own update, as strict mode is on \
             (kubectl label {target} {STRICT_EXEMPT_LABEL}=true, which takes the bypass \
             permission), then remove the label (kubectl label {target} {key}-)"
        )
    } else {
        format!("remove the label (kubectl label {target} {key}-)")
    }
}

/// The protections of one object after its labels: policy objects, once loaded.
async fn evaluate_after_labels<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    view: &V,
) -> Evaluation {
    if view.may_govern_delete(req) && !view.policies_loaded() {
        return Evaluation::deny(
            "not-ready",
            DenialKind::NotReady,
            format!(
                "{MESSAGE_PREFIX} not ready yet, retry later: the rules that may protect {} \
                 have not finished loading.",
                req.describe()
            ),
            Vec::new(),
        );
    }
    evaluate_policy_objects(req, obj, view).await
}

/// The logical cluster of an object (kcp), or "".
pub fn logical_cluster(obj: &Value) -> &str {
    annotations(obj)
        .and_then(|a| a.get(crate::names::KCP_CLUSTER_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

const BYPASS_HINT: &str = "or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection";

/// One protection that concerns a DELETE, whatever its mode: what `explain` lists.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// `label KEY`, `ResourceProtection/NAME`, `DependencyRule/NAME`,
    /// `CriticalService/NAME`, `AnchorRule/NAME` or `containment`.
    pub policy: String,
    /// The policy's mode: `Enforce` refuses, `Warn` and `Audit` allow.
    pub enforcement: Enforcement,
    /// Whether it could not be checked (a lookup failed; refuses under `Enforce`).
    pub lookup_failed: bool,
    /// The message the webhook would give for it.
    pub message: String,
    /// Every blocker, uncapped (the message names at most [`MAX_BLOCKERS_SHOWN`]).
    pub blockers: Vec<String>,
}

/// Accumulates what policy objects say about one DELETE.
struct Outcome {
    warnings: Vec<String>,
    audits: Vec<String>,
    denial: Option<(String, DenialKind, String, Vec<String>)>,
    /// Every protection met, in evaluation order (for `explain_delete`).
    findings: Vec<Finding>,
}

impl Outcome {
    fn record(
        &mut self,
        enforcement: Enforcement,
        policy: String,
        message: String,
        blockers: Vec<String>,
    ) {
        self.findings.push(Finding {
            policy: policy.clone(),
            enforcement,
            lookup_failed: false,
            message: message.clone(),
            blockers: blockers.clone(),
        });
        match enforcement {
            Enforcement::Enforce => {
                if self.denial.is_none() {
                    self.denial = Some((policy, DenialKind::Protected, message, blockers));
                }
            }
            Enforcement::Warn => self.warnings.push(message),
            Enforcement::Audit => self.audits.push(message),
        }
    }
}

fn policy_name(kind: &str, cluster: &str, name: &str) -> String {
    if cluster.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{name} (logical cluster {cluster})")
    }
}

async fn evaluate_policy_objects<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    view: &V,
) -> Evaluation {
    let out = policy_objects_outcome(req, obj, view).await;
    match out.denial {
        Some((policy, kind, message, blockers)) => {
            let mut e = Evaluation::deny(&policy, kind, message, blockers);
            e.audits = out.audits;
            e
        }
        None if !out.warnings.is_empty() => Evaluation {
            decision: Decision::Warn(out.warnings),
            policy: "warn".to_string(),
            audits: out.audits,
        },
        None => Evaluation {
            decision: Decision::Allow,
            policy: if out.audits.is_empty() {
                "none"
            } else {
                "audit"
            }
            .to_string(),
            audits: out.audits,
        },
    }
}

/// What every policy object says about the DELETE of `obj`.
async fn policy_objects_outcome<V: ClusterView>(
    req: &AdmissionRequest,
    obj: &Value,
    view: &V,
) -> Outcome {
    let gr = GroupResource::new(&req.resource.group, &req.resource.resource);
    let name = req.object_name().unwrap_or_default();
    let namespace = req.object_namespace();
    let what = req.describe();
    let mut out = Outcome {
        warnings: Vec::new(),
        audits: Vec::new(),
        denial: None,
        findings: Vec::new(),
    };

    let mut live: Option<Live> = None;
    for rp in view.protection_candidates(&gr, namespace) {
        let Some(sel) = rp.selecting(&gr, namespace, name, labels(obj)).next() else {
            continue;
        };
        let policy = policy_name("ResourceProtection", &rp.key.cluster, &rp.key.name);
        let mut scope = match (sel.is_wildcard(), sel.group.as_str()) {
            (false, _) => format!("{gr}"),
            (true, "*") => format!("every resource, {gr} among them"),
            (true, "") => format!("every resource of the core group, {gr} among them"),
            (true, g) => format!("every resource of group {g}, {gr} among them"),
        };
        if let Some(ns) = &sel.namespace {
            scope.push_str(&format!(" in namespace {ns}"));
        }
        if let Some(names) = &sel.names {
            scope.push_str(&format!(" named {}", names.join(", ")));
        }
        if sel.label_selector.is_some() {
            scope.push_str(" matching its label selector");
        }
        let mut note = "";
        if rp.cascading {
            if !view.cascading_judged() {
                note = " (this webhook does not watch live contents, so mode Cascading \
                        protects like Always here)";
            } else {
                if live.is_none() {
                    live = Some(live_contents(req, obj, view).await);
                }
                match live.as_ref() {
                    Some(Live::Drained) => continue,
                    Some(Live::Alive {
                        condition,
                        still,
                        blockers,
                        drain,
                    }) => {
                        let message = format!(
                            "{MESSAGE_PREFIX} {what} is protected by {policy} (selects {scope}, \
                             mode Cascading) {condition}, and {still}, so it cannot be deleted. \
                             To delete it, first {drain}; or remove it from the policy \
                             (kubectl edit resourceprotection {}), {BYPASS_HINT}.",
                            rp.key.name
                        );
                        out.record(rp.enforcement, policy, message, blockers.clone());
                        continue;
                    }
                    Some(Live::Unknown(why)) => {
                        let message = format!(
                            "{MESSAGE_PREFIX} {what} is protected by {policy} (selects {scope}, \
                             mode Cascading) while it has live contents, and {why}. Refusing \
                             rather than risk deleting them; retry later, {BYPASS_HINT}."
                        );
                        lookup_failed(&mut out, rp.enforcement, policy, message);
                        continue;
                    }
                    Some(Live::NoContents) | None => {
                        note = " (it has no live contents holdfast can tell, so mode \
                                Cascading protects it like Always)";
                    }
                }
            }
        }
        let message = format!(
            "{MESSAGE_PREFIX} {what} is protected by {policy} (selects {scope}){note}, so it \
             cannot be deleted. To delete it, remove it from the policy (kubectl edit \
             resourceprotection {}), {BYPASS_HINT}.",
            rp.key.name
        );
        out.record(
            rp.enforcement,
            policy,
            message,
            vec![format!("ResourceProtection/{}", rp.key.name)],
        );
    }

    let cluster = logical_cluster(obj);
    for rule in view.dependencies(&gr).iter().flat_map(|l| l.iter()) {
        for dep in rule.iter().filter(|d| d.target == gr) {
            let policy = policy_name("DependencyRule", &dep.rule.cluster, &dep.rule.name);
            let q = DependentsQuery {
                cluster,
                dep,
                name,
                namespace,
            };
            match view.dependents(q).await {
                Ok(found) if found.is_empty() => {}
                Ok(found) => {
                    let blockers: Vec<String> = found.iter().map(Referrer::describe).collect();
                    let message = format!(
                        "{MESSAGE_PREFIX} {what} is still referenced by {} (policy: {policy}, \
                         field {} of {}), so it cannot be deleted. To delete it, delete or \
                         change the dependents first, {BYPASS_HINT}.",
                        list_blockers(&blockers),
                        dep.path,
                        dep.dependent_gr(),
                    );
                    out.record(dep.enforcement, policy, message, blockers);
                }
                Err(e) => {
                    let message = format!(
                        "{MESSAGE_PREFIX} cannot verify dependents of {what} (policy: {policy}, \
                         {} referencing it at {}): {e}. Refusing rather than risk breaking them; \
                         retry later, {BYPASS_HINT}.",
                        dep.dependent_gr(),
                        dep.path,
                    );
                    lookup_failed(&mut out, dep.enforcement, policy, message);
                }
            }
        }
    }

    evaluate_critical(&gr, name, namespace, cluster, &what, view, &mut out).await;
    evaluate_anchors(&gr, obj, name, namespace, cluster, &what, view, &mut out).await;
    out
}

fn lookup_failed(out: &mut Outcome, enforcement: Enforcement, policy: String, message: String) {
    out.findings.push(Finding {
        policy: policy.clone(),
        enforcement,
        lookup_failed: true,
        message: message.clone(),
        blockers: Vec::new(),
    });
    if enforcement == Enforcement::Enforce {
        if out.denial.is_none() {
            out.denial = Some((policy, DenialKind::LookupFailed, message, Vec::new()));
        }
    } else {
        out.warnings.push(message);
    }
}

fn describe_ref(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

async fn evaluate_critical<V: ClusterView>(
    gr: &GroupResource,
    name: &str,
    namespace: Option<&str>,
    cluster: &str,
    what: &str,
    view: &V,
    out: &mut Outcome,
) {
    for cs in view.critical(gr).iter().flat_map(|l| l.iter()) {
        if !cs.key.cluster.is_empty() && &*cs.key.cluster != cluster {
            continue;
        }
        let policy = policy_name("CriticalService", &cs.key.cluster, &cs.key.name);
        let provider = describe_ref(
            &cs.provider.to_string(),
            Some(&cs.provider_namespace),
            &cs.provider_name,
        );
        if *gr == critical_services_gr() && name == &*cs.key.name {
            match view
                .object(
                    cluster,
                    &cs.provider,
                    Some(&cs.provider_namespace),
                    &cs.provider_name,
                )
                .await
            {
                Ok(None) => {}
                Ok(Some(_)) => {
                    let message = format!(
                        "{MESSAGE_PREFIX} {what} cannot be deleted while its provider {provider} \
                         exists (policy: {policy}). To delete it, delete the provider first; \
                         this CriticalService keeps it from going before its criteria are met, \
                         {BYPASS_HINT}."
                    );
                    out.record(
                        cs.enforcement,
                        policy.clone(),
                        message,
                        vec![provider.clone()],
                    );
                }
                Err(e) => lookup_failed(
                    out,
                    cs.enforcement,
                    policy.clone(),
                    format!(
                        "{MESSAGE_PREFIX} cannot verify whether {provider} exists (policy: {policy}): {e}; retry later, {BYPASS_HINT}."
                    ),
                ),
            }
            continue;
        }
        let is_provider = *gr == cs.provider
            && namespace == Some(cs.provider_namespace.as_str())
            && name == cs.provider_name;
        let is_namespace =
            *gr == namespaces_gr() && namespace.is_none() && name == cs.provider_namespace;
        if !is_provider && !is_namespace {
            continue;
        }
        let mut remaining = Vec::new();
        for crit in &cs.criteria {
            match crit {
                CompiledCriterion::Finalizer {
                    resource,
                    finalizer,
                } => match view.count_finalizer(cluster, resource, finalizer).await {
                    Ok(0) => {}
                    Ok(n) => remaining.push(format!(
                        "{n} {resource} still {} finalizer {finalizer}",
                        if n == 1 { "carries" } else { "carry" }
                    )),
                    Err(e) => {
                        lookup_failed(
                            out,
                            cs.enforcement,
                            policy.clone(),
                            format!(
                                "{MESSAGE_PREFIX} cannot count {resource} carrying finalizer {finalizer} (policy: {policy}): {e}; retry later, {BYPASS_HINT}."
                            ),
                        );
                    }
                },
                CompiledCriterion::SpecificResource {
                    resource,
                    namespace,
                    name,
                } => {
                    match view
                        .object(cluster, resource, namespace.as_deref(), name)
                        .await
                    {
                        Ok(None) => {}
                        Ok(Some(_)) => remaining.push(format!(
                            "{} still exists",
                            describe_ref(&resource.to_string(), namespace.as_deref(), name)
                        )),
                        Err(e) => lookup_failed(
                            out,
                            cs.enforcement,
                            policy.clone(),
                            format!(
                                "{MESSAGE_PREFIX} cannot verify whether {resource} {name} exists (policy: {policy}): {e}; retry later, {BYPASS_HINT}."
                            ),
                        ),
                    }
                }
            }
        }
        if remaining.is_empty() {
            continue;
        }
        let role = if is_provider {
            "provides a critical service".to_string()
        } else {
            format!("holds {provider}, which provides a critical service")
        };
        let message = format!(
            "{MESSAGE_PREFIX} {what} {role} (policy: {policy}) and cannot be deleted while {}. \
             To delete it, wait until those are gone (the service finalizes them), {BYPASS_HINT}.",
            list_blockers(&remaining)
        );
        out.record(cs.enforcement, policy, message, remaining);
    }
}

#[allow(clippy::too_many_arguments)]
async fn evaluate_anchors<V: ClusterView>(
    gr: &GroupResource,
    obj: &Value,
    name: &str,
    namespace: Option<&str>,
    cluster: &str,
    what: &str,
    view: &V,
    out: &mut Outcome,
) {
    let Some(rules) = view.anchors(gr) else {
        return;
    };
    let own = labels(obj);
    let overridden = [ALLOW_DELETION_LABEL, ALLOW_DELETION_LABEL_APPCAT]
        .iter()
        .any(|k| own.and_then(|l| l.get(*k)).and_then(Value::as_str) == Some("true"));
    if overridden {
        return;
    }
    let mut ns_labels: Option<Option<Arc<Value>>> = None;
    for ar in rules.iter() {
        if !ar.key.cluster.is_empty() && &*ar.key.cluster != cluster {
            continue;
        }
        let policy = policy_name("AnchorRule", &ar.key.cluster, &ar.key.name);
        let label = |l: Option<&serde_json::Map<String, Value>>, key: &str| {
            l.and_then(|l| l.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let mut anchor_name = label(own, &ar.name_label);
        let mut anchor_ns = ar.namespace_label.as_deref().and_then(|k| label(own, k));
        let inherit = ar.protects.iter().any(|(g, inherit)| g == gr && *inherit);
        if anchor_name.is_none()
            && inherit
            && let Some(ns) = namespace
        {
            if ns_labels.is_none() {
                match view.object(cluster, &namespaces_gr(), None, ns).await {
                    Ok(v) => ns_labels = Some(v),
                    Err(e) => {
                        lookup_failed(
                            out,
                            ar.enforcement,
                            policy.clone(),
                            format!(
                                "{MESSAGE_PREFIX} cannot read Namespace {ns} to find the anchor of {what} (policy: {policy}): {e}; retry later, {BYPASS_HINT}."
                            ),
                        );
                        continue;
                    }
                }
            }
            let nl = ns_labels
                .as_ref()
                .and_then(|o| o.as_ref())
                .and_then(|o| labels(o));
            anchor_name = label(nl, &ar.name_label);
            anchor_ns = ar.namespace_label.as_deref().and_then(|k| label(nl, k));
        }
        let Some(anchor_name) = anchor_name else {
            continue;
        };
        let anchor_desc = describe_ref(&ar.anchor.to_string(), anchor_ns.as_deref(), &anchor_name);
        let found = match &ar.source {
            None => {
                view.object(cluster, &ar.anchor, anchor_ns.as_deref(), &anchor_name)
                    .await
            }
            Some(source) => {
                view.remote_object(source, &ar.anchor, anchor_ns.as_deref(), &anchor_name)
                    .await
            }
        };
        match found {
            Ok(None) => {}
            Ok(Some(anchor)) => {
                let deleting = anchor
                    .get("metadata")
                    .and_then(|m| m.get("deletionTimestamp"))
                    .is_some_and(|v| !v.is_null());
                if deleting {
                    continue;
                }
                let on = ar
                    .toggle
                    .as_ref()
                    .and_then(|p| p.first(&anchor))
                    .and_then(Value::as_bool)
                    .unwrap_or(ar.toggle_default);
                if !on {
                    continue;
                }
                let toggle = ar
                    .toggle
                    .as_ref()
                    .map(|p| format!(" and has {p}=true"))
                    .unwrap_or_default();
                let off = ar
                    .toggle
                    .as_ref()
                    .map(|p| format!("set {p} to false on {anchor_desc}, "))
                    .unwrap_or_default();
                let _ = name;
                let place = ar
                    .source
                    .as_ref()
                    .map(|s| format!(" in the cluster of anchor source {s}"))
                    .unwrap_or_default();
                let message = format!(
                    "{MESSAGE_PREFIX} {what} is protected while its anchor {anchor_desc} exists{place}{toggle} \
                     (policy: {policy}), so it cannot be deleted. To delete it, {off}delete the \
                     anchor, or label this object {ALLOW_DELETION_LABEL}=true."
                );
                out.record(ar.enforcement, policy, message, vec![anchor_desc]);
            }
            Err(e) => lookup_failed(
                out,
                ar.enforcement,
                policy.clone(),
                format!(
                    "{MESSAGE_PREFIX} cannot read the anchor {anchor_desc} of {what} (policy: {policy}): {e}; refusing rather than risk it, retry later, {BYPASS_HINT}."
                ),
            ),
        }
    }
}

/// Break-glass markers and the strict exemption an UPDATE adds.
fn added_markers(old: &Value, new: &Value) -> Vec<String> {
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
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> bool {
    let mut stored = old.clone();
    if let Some(meta) = stored.get_mut("metadata").and_then(Value::as_object_mut) {
        for (field, keys) in [
            (
                "annotations",
                &crate::webhookconfig::BREAK_GLASS_ANNOTATIONS[..],
            ),
            ("labels", &crate::webhookconfig::BREAK_GLASS_LABELS[..]),
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
        evaluate_delete(&delete, cfg, view, now).await.decision,
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
        Ok(Some(crd)) => {
            crd.get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(|l| l.get(STRICT_EXEMPT_LABEL))
                .and_then(Value::as_str)
                == Some("true")
        }
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(crd = %name, error = %e, "cannot read the CustomResourceDefinition; strict mode applies");
            false
        }
    }
}

async fn evaluate_update<V: ClusterView>(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &V,
    now: DateTime<Utc>,
) -> Evaluation {
    let strict_policy = view.strict_for(req);
    if !cfg.strict && !strict_policy {
        return Evaluation::allow("none");
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
            return Evaluation::allow("none");
        }
        return unreadable(req, "the request carries no object");
    };
    if !label_protected && !strict_policy {
        // Under --strict, a break-glass marker added to any protected object (a
        // policy object's, not only a label's) takes the bypass permission.
        if !cfg.strict
            || added_markers(old, new).is_empty()
            || !protected_without_markers(req, old, cfg, view, now).await
        {
            return Evaluation::allow("none");
        }
    }
    if let Err(why) = check_metadata(new) {
        return unreadable(req, &why);
    }
    let own_exempt = old_labels
        .and_then(|l| l.get(STRICT_EXEMPT_LABEL))
        .and_then(Value::as_str)
        == Some("true");
    let new_has_exempt = labels(new)
        .and_then(|l| l.get(STRICT_EXEMPT_LABEL))
        .and_then(Value::as_str)
        == Some("true");
    let same_update = if new_has_exempt {
        " Adding the exemption in the same update does not count: it must already be stored."
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
        let message = format!(
            "{MESSAGE_PREFIX} {} carries the protection {} and strict mode is on (policy: strict \
             label {}), so the label cannot be removed or changed to a value that does not \
             protect.{same_update} To unprotect it, first mark it exempt in its own update \
             (kubectl label {target} {STRICT_EXEMPT_LABEL}=true, which takes the bypass \
             permission on protections.holdfast.dev), then remove the label.",
            req.describe(),
            list_blockers(&blockers),
            removed.first().map(|l| l.key).unwrap_or_default(),
        );
        return Evaluation::deny("strict", DenialKind::Protected, message, blockers);
    }

    // 2. Labels changed so that a strict ResourceProtection no longer selects it.
    if !exempt && let Some(rp) = selection_lost {
        let message = format!(
            "{MESSAGE_PREFIX} {} is protected by {rp} in strict mode, and this update changes \
             its labels so that the policy would no longer select it.{same_update} To unprotect \
             it, first mark it exempt in its own update (kubectl label {target} \
             {STRICT_EXEMPT_LABEL}=true, which takes the bypass permission on \
             protections.holdfast.dev), or change the policy.",
            req.describe(),
        );
        return Evaluation::deny("strict", DenialKind::Protected, message, vec![rp]);
    }

    // 3. Break-glass markers or the exemption added: only by someone allowed to bypass.
    let added = added_markers(old, new);
    if added.is_empty() {
        return Evaluation::allow("strict");
    }
    let user = if req.user_info.username.is_empty() {
        "the requester".to_string()
    } else {
        format!("user {:?}", req.user_info.username)
    };
    let ns = req.object_namespace();
    let scope = ns.map(|n| format!(" in namespace {n}")).unwrap_or_default();
    match view.can_bypass(req).await {
        Ok(true) => Evaluation::allow("break-glass-authorized"),
        Ok(false) => Evaluation::deny(
            "break-glass",
            DenialKind::Protected,
            format!(
                "{MESSAGE_PREFIX} {user} may not add {} to {}: it is protected in strict mode, \
                 and lifting that protection needs the permission to bypass it (verb bypass on \
                 protections.holdfast.dev{scope}). Ask someone who holds it.",
                added.join(" and "),
                req.describe(),
            ),
            added,
        ),
        Err(e) => Evaluation::deny(
            "break-glass",
            DenialKind::LookupFailed,
            format!(
                "{MESSAGE_PREFIX} cannot check whether {user} may add {} to {}: {e}. Refusing \
                 rather than let protection be lifted unchecked; retry later.",
                added.join(" and "),
                req.describe(),
            ),
            added,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{labels::ProtectionLabel, review::parse_review};
    use serde_json::json;

    /// Synchronous wrapper for the tests (glob imports are shadowed by this).
    fn evaluate<V: ClusterView>(
        req: &AdmissionRequest,
        cfg: &PolicyConfig,
        view: &V,
        now: DateTime<Utc>,
    ) -> Evaluation {
        futures::executor::block_on(super::evaluate(req, cfg, view, now))
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-22T08:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn review(op: &str, kind: &str, resource: &str, object: Value, old: Value) -> AdmissionRequest {
        let body = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
            "uid":"uid-1","kind":{"group":"","version":"v1","kind":kind},
            "resource":{"group":"","version":"v1","resource":resource},
            "name":"obj","namespace":"ns","operation":op,"userInfo":{"username":"alice"},
            "object":object,"oldObject":old}});
        match parse_review(body.to_string().as_bytes()) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    fn cm(labels: Value, annotations: Value) -> Value {
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"obj","namespace":"ns",
            "labels":labels,"annotations":annotations}})
    }

    fn delete(obj: Value) -> AdmissionRequest {
        review("DELETE", "ConfigMap", "configmaps", Value::Null, obj)
    }

    fn update(old: Value, new: Value) -> AdmissionRequest {
        review("UPDATE", "ConfigMap", "configmaps", new, old)
    }

    fn cfg(strict: bool, extra: &[&str]) -> PolicyConfig {
        PolicyConfig {
            labels: ProtectionLabels::with_extra(
                extra
                    .iter()
                    .map(|s| s.parse::<ProtectionLabel>().expect("valid label")),
            ),
            strict,
            ..PolicyConfig::default()
        }
    }

    fn denied(e: &Evaluation) -> &Denial {
        match &e.decision {
            Decision::Deny(d) => d,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn delete_with_protecting_values_is_denied() {
        for value in ["Always", "true"] {
            let e = evaluate(
                &delete(cm(json!({"holdfast.dev/protected": value}), json!({}))),
                &cfg(false, &[]),
                &NoPolicies,
                now(),
            );
            let d = denied(&e);
            assert_eq!(e.policy, "label");
            assert!(
                d.message
                    .starts_with("holdfast: ConfigMap ns/obj is protected by label")
            );
            assert!(
                d.message
                    .contains("kubectl label configmaps obj -n ns holdfast.dev/protected-")
            );
            assert_eq!(
                d.blockers,
                vec![format!("label holdfast.dev/protected={value}")]
            );
        }
    }

    #[test]
    fn delete_without_protection_is_allowed() {
        for labels in [
            json!({}),
            json!({"holdfast.dev/protected": "false"}),
            json!(null),
        ] {
            let e = evaluate(
                &delete(cm(labels, json!({}))),
                &cfg(false, &[]),
                &NoPolicies,
                now(),
            );
            assert_eq!(e.decision, Decision::Allow);
        }
    }

    #[test]
    fn nameless_namespace_cleanup_delete_is_named_from_old_object() {
        let mut req = delete(cm(json!({"holdfast.dev/protected": "true"}), json!({})));
        req.name = None;
        let e = evaluate(&req, &cfg(false, &[]), &NoPolicies, now());
        assert!(denied(&e).message.contains("ConfigMap ns/obj"));
    }

    #[test]
    fn karmada_key_protects_only_with_always() {
        let c = cfg(
            false,
            &["resourcetemplate.karmada.io/deletion-protected=Always"],
        );
        let key = "resourcetemplate.karmada.io/deletion-protected";
        let e = evaluate(
            &delete(cm(json!({key: "Always"}), json!({}))),
            &c,
            &NoPolicies,
            now(),
        );
        assert!(denied(&e).message.contains(key));
        let e = evaluate(
            &delete(cm(json!({key: "true"}), json!({}))),
            &c,
            &NoPolicies,
            now(),
        );
        assert_eq!(e.decision, Decision::Allow);
    }

    #[test]
    fn orkestra_key_protects_with_true() {
        let c = cfg(false, &["orkestra.io/deletion-protection=true"]);
        let e = evaluate(
            &delete(cm(
                json!({"orkestra.io/deletion-protection": "true"}),
                json!({}),
            )),
            &c,
            &NoPolicies,
            now(),
        );
        assert!(
            denied(&e)
                .message
                .contains("orkestra.io/deletion-protection=true")
        );
        // The built-in key keeps working next to the extra one.
        let e = evaluate(
            &delete(cm(json!({"holdfast.dev/protected": "Always"}), json!({}))),
            &c,
            &NoPolicies,
            now(),
        );
        assert!(matches!(e.decision, Decision::Deny(_)));
    }

    #[test]
    fn skip_annotation_and_aliases_allow() {
        let protected = json!({"holdfast.dev/protected": "true"});
        for ann in [
            json!({"holdfast.dev/skip-protection": "true"}),
            json!({"dependencies.opendefense.cloud/skip-protection": "true"}),
            json!({"holdfast.dev/skip-protection": "2026-11-22T09:00:00Z"}),
        ] {
            let e = evaluate(
                &delete(cm(protected.clone(), ann)),
                &cfg(false, &[]),
                &NoPolicies,
                now(),
            );
            assert_eq!(e.decision, Decision::Allow);
            assert_eq!(e.policy, "break-glass");
        }
        let with_label = json!({"holdfast.dev/protected": "true", "appcat.vshn.io/webhook-allowdeletion": "true"});
        let e = evaluate(
            &delete(cm(with_label, json!({}))),
            &cfg(false, &[]),
            &NoPolicies,
            now(),
        );
        assert_eq!(e.decision, Decision::Allow);
    }

    #[test]
    fn skip_with_other_values_does_not_allow() {
        let protected = json!({"holdfast.dev/protected": "true"});
        for (ann, note) in [
            (json!({"holdfast.dev/skip-protection": "yes"}), "is ignored"),
            (
                json!({"holdfast.dev/skip-protection": "2026-11-22T07:00:00Z"}),
                "has expired",
            ),
        ] {
            let e = evaluate(
                &delete(cm(protected.clone(), ann)),
                &cfg(false, &[]),
                &NoPolicies,
                now(),
            );
            assert!(denied(&e).message.contains(note), "{}", denied(&e).message);
        }
        let label_false = json!({"holdfast.dev/protected": "true", "appcat.vshn.io/webhook-allowdeletion": "True"});
        let e = evaluate(
            &delete(cm(label_false, json!({}))),
            &cfg(false, &[]),
            &NoPolicies,
            now(),
        );
        assert!(matches!(e.decision, Decision::Deny(_)));
    }

    #[test]
    fn break_glass_further_ahead_than_the_cap_does_not_count() {
        let protected = json!({"holdfast.dev/protected": "true"});
        // now() is 2026-11-22T08:00Z; the default cap is 24h.
        let far = json!({"holdfast.dev/skip-protection": "9999-12-31T00:00:00Z"});
        let e = evaluate(
            &delete(cm(protected.clone(), far)),
            &cfg(false, &[]),
            &NoPolicies,
            now(),
        );
        let msg = &denied(&e).message;
        assert!(
            msg.contains(
                "break-glass holdfast.dev/skip-protection=9999-12-31T00:00:00Z is ignored: \
                 it lies more than 24h ahead"
            ),
            "{msg}"
        );
        // Just inside the cap counts; a shorter configured cap refuses it.
        let inside = json!({"holdfast.dev/skip-protection": "2026-11-23T07:59:00Z"});
        let e = evaluate(
            &delete(cm(protected.clone(), inside.clone())),
            &cfg(false, &[]),
            &NoPolicies,
            now(),
        );
        assert_eq!(e.policy, "break-glass");
        let short = PolicyConfig {
            max_break_glass: chrono::TimeDelta::hours(1),
            ..cfg(false, &[])
        };
        let e = evaluate(&delete(cm(protected, inside)), &short, &NoPolicies, now());
        assert!(denied(&e).message.contains("more than 1h ahead"));
    }

    #[test]
    fn strict_update_removing_label_is_denied() {
        let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
        let removed = cm(json!({}), json!({}));
        let downgraded = cm(json!({"holdfast.dev/protected": "false"}), json!({}));
        for new in [removed, downgraded] {
            let e = evaluate(
                &update(old.clone(), new),
                &cfg(true, &[]),
                &NoPolicies,
                now(),
            );
            let d = denied(&e);
            assert_eq!(e.policy, "strict");
            assert!(d.message.contains("strict mode is on"));
        }
    }

    #[test]
    fn strict_off_allows_label_removal() {
        let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
        let e = evaluate(
            &update(old, cm(json!({}), json!({}))),
            &cfg(false, &[]),
            &NoPolicies,
            now(),
        );
        assert_eq!(e.decision, Decision::Allow);
    }

    #[test]
    fn strict_exemption_must_already_be_stored() {
        let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
        let new = cm(json!({"holdfast.dev/strict-exempt": "true"}), json!({}));
        let e = evaluate(&update(old, new), &cfg(true, &[]), &NoPolicies, now());
        assert!(denied(&e).message.contains("must already be stored"));

        let old = cm(
            json!({"holdfast.dev/protected": "Always", "holdfast.dev/strict-exempt": "true"}),
            json!({}),
        );
        let new = cm(json!({"holdfast.dev/strict-exempt": "true"}), json!({}));
        let e = evaluate(&update(old, new), &cfg(true, &[]), &NoPolicies, now());
        assert_eq!(e.decision, Decision::Allow);
    }

    #[test]
    fn deferred_requests_need_the_requester_and_the_delete_permission() {
        struct MayDelete(Result<bool, LookupError>, std::sync::Mutex<Vec<String>>);
        impl ClusterView for MayDelete {
            fn policies_loaded(&self) -> bool {
                true
            }
            async fn can_delete_as(
                &self,
                _req: &AdmissionRequest,
                user: &str,
            ) -> Result<bool, LookupError> {
                if let Ok(mut asked) = self.1.lock() {
                    asked.push(user.to_string());
                }
                self.0.clone()
            }
        }
        let request = |by: &str| {
            cm(
                json!({"holdfast.dev/delete-when-unblocked": "true"}),
                json!({"holdfast.dev/delete-when-unblocked": "true",
                       "holdfast.dev/delete-requested-by": by}),
            )
        };
        let plain = cm(json!({}), json!({}));
        let yes = MayDelete(Ok(true), Default::default());
        let e = evaluate(
            &update(plain.clone(), request("alice")),
            &cfg(false, &[]),
            &yes,
            now(),
        );
        assert_eq!(e.decision, Decision::Allow);
        assert_eq!(*yes.1.lock().expect("lock"), vec!["alice".to_string()]);

        // Someone else named: refused before any SubjectAccessReview.
        let e = evaluate(
            &update(plain.clone(), request("bob")),
            &cfg(false, &[]),
            &yes,
            now(),
        );
        assert_eq!(
            denied(&e).message,
            "holdfast: cannot accept the deferred deletion request on ConfigMap ns/obj: the \
             annotation holdfast.dev/delete-requested-by must name you, \"alice\" (it is \"bob\"). \
             Set all three in one request: kubectl patch configmaps obj -n ns --type merge -p \
             '{\"metadata\":{\"annotations\":{\"holdfast.dev/delete-requested-by\":\"alice\",\
             \"holdfast.dev/delete-when-unblocked\":\"true\"},\"labels\":{\
             \"holdfast.dev/delete-when-unblocked\":\"true\"}}}'"
        );
        assert_eq!(yes.1.lock().expect("lock").len(), 1);

        let no = MayDelete(Ok(false), Default::default());
        let e = evaluate(
            &update(plain.clone(), request("alice")),
            &cfg(false, &[]),
            &no,
            now(),
        );
        assert_eq!(
            denied(&e).message,
            "holdfast: user \"alice\" may not ask for the deferred deletion of ConfigMap ns/obj: \
             that takes the permission to delete it (verb delete on configmaps in namespace ns), \
             which \"alice\" does not hold as holdfast will use it: it deletes the object later \
             by impersonating the user name alone, without the groups of this request."
        );
        let failing = MayDelete(Err(LookupError("down".into())), Default::default());
        let e = evaluate(
            &update(plain.clone(), request("alice")),
            &cfg(false, &[]),
            &failing,
            now(),
        );
        assert_eq!(denied(&e).kind, DenialKind::LookupFailed);

        // On kcp nothing carries a request out: not judged there.
        let mut on_kcp = request("bob");
        on_kcp["metadata"]["annotations"]["kcp.io/cluster"] = json!("root:team");
        let mut kcp_before = plain.clone();
        kcp_before["metadata"]["annotations"] = json!({"kcp.io/cluster": "root:team"});
        let e = evaluate(&update(kcp_before, on_kcp), &cfg(false, &[]), &no, now());
        assert_eq!(e.decision, Decision::Allow);
        // Unrelated updates of a requested object, and withdrawing it: not judged.
        let mut touched = request("bob");
        touched["metadata"]["labels"]["x"] = json!("y");
        let e = evaluate(
            &update(request("bob"), touched),
            &cfg(false, &[]),
            &no,
            now(),
        );
        assert_eq!(e.decision, Decision::Allow);
        let e = evaluate(&update(request("bob"), plain), &cfg(false, &[]), &no, now());
        assert_eq!(e.decision, Decision::Allow);
        assert!(no.1.lock().expect("lock").len() == 1);
    }

    #[test]
    fn strict_allows_unrelated_updates_and_guards_the_exemption() {
        struct Bypass(bool);
        impl ClusterView for Bypass {
            fn policies_loaded(&self) -> bool {
                true
            }
            async fn can_bypass(&self, _req: &AdmissionRequest) -> Result<bool, LookupError> {
                Ok(self.0)
            }
        }
        let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
        // Changing between protecting values and unrelated labels: allowed.
        let new = cm(
            json!({"holdfast.dev/protected": "true", "x": "y"}),
            json!({}),
        );
        let e = evaluate(
            &update(old.clone(), new),
            &cfg(true, &[]),
            &NoPolicies,
            now(),
        );
        assert_eq!(e.decision, Decision::Allow);
        // Adding the exemption or a break-glass marker needs the bypass permission.
        let exempt = cm(
            json!({"holdfast.dev/protected": "Always", "holdfast.dev/strict-exempt": "true"}),
            json!({}),
        );
        let skip = cm(
            json!({"holdfast.dev/protected": "Always"}),
            json!({"holdfast.dev/skip-protection": "true"}),
        );
        for new in [exempt, skip] {
            let e = evaluate(
                &update(old.clone(), new.clone()),
                &cfg(true, &[]),
                &Bypass(true),
                now(),
            );
            assert_eq!(e.decision, Decision::Allow);
            assert_eq!(e.policy, "break-glass-authorized");
            let e = evaluate(
                &update(old.clone(), new.clone()),
                &cfg(true, &[]),
                &Bypass(false),
                now(),
            );
            let d = denied(&e);
            assert!(d.message.contains("may not add"), "{}", d.message);
            assert!(
                d.message
                    .contains("verb bypass on protections.holdfast.dev in namespace ns"),
                "{}",
                d.message
            );
            // No way to ask: refused, not allowed.
            let e = evaluate(
                &update(old.clone(), new),
                &cfg(true, &[]),
                &NoPolicies,
                now(),
            );
            assert_eq!(denied(&e).kind, DenialKind::LookupFailed);
        }
        // Without strict mode nothing is checked.
        let skip = cm(
            json!({"holdfast.dev/protected": "Always"}),
            json!({"holdfast.dev/skip-protection": "true"}),
        );
        let e = evaluate(&update(old, skip), &cfg(false, &[]), &NoPolicies, now());
        assert_eq!(e.decision, Decision::Allow);
    }

    #[test]
    fn strict_applies_to_extra_keys() {
        let c = cfg(
            true,
            &["resourcetemplate.karmada.io/deletion-protected=Always"],
        );
        let old = cm(
            json!({"resourcetemplate.karmada.io/deletion-protected": "Always"}),
            json!({}),
        );
        let new = cm(
            json!({"resourcetemplate.karmada.io/deletion-protected": "true"}),
            json!({}),
        );
        let e = evaluate(&update(old, new), &c, &NoPolicies, now());
        assert!(matches!(e.decision, Decision::Deny(_)));
    }

    #[test]
    fn unreadable_objects_are_denied_not_allowed() {
        let e = evaluate(&delete(Value::Null), &cfg(false, &[]), &NoPolicies, now());
        assert_eq!(denied(&e).kind, DenialKind::Unreadable);
        let e = evaluate(
            &delete(json!({"metadata": {"labels": "x"}})),
            &cfg(false, &[]),
            &NoPolicies,
            now(),
        );
        assert_eq!(denied(&e).kind, DenialKind::Unreadable);
        let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
        let e = evaluate(
            &update(old, json!({"metadata": 3})),
            &cfg(true, &[]),
            &NoPolicies,
            now(),
        );
        assert_eq!(denied(&e).kind, DenialKind::Unreadable);
    }

    struct Loading;
    impl ClusterView for Loading {
        fn policies_loaded(&self) -> bool {
            false
        }
        fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
            true
        }
    }

    #[test]
    fn not_ready_denies_governed_deletes_but_label_decisions_still_work() {
        let e = evaluate(
            &delete(cm(json!({}), json!({}))),
            &cfg(false, &[]),
            &Loading,
            now(),
        );
        let d = denied(&e);
        assert_eq!(d.kind, DenialKind::NotReady);
        assert!(
            d.message
                .starts_with("holdfast: not ready yet, retry later")
        );
        let e = evaluate(
            &delete(cm(json!({"holdfast.dev/protected": "true"}), json!({}))),
            &cfg(false, &[]),
            &Loading,
            now(),
        );
        assert_eq!(e.policy, "label");
    }

    #[test]
    fn creates_are_allowed() {
        let e = evaluate(
            &review(
                "CREATE",
                "ConfigMap",
                "configmaps",
                cm(json!({"holdfast.dev/protected":"true"}), json!({})),
                Value::Null,
            ),
            &cfg(true, &[]),
            &NoPolicies,
            now(),
        );
        assert_eq!(e.decision, Decision::Allow);
    }

    #[test]
    fn blockers_are_capped() {
        let many: Vec<String> = (0..8).map(|i| format!("b{i}")).collect();
        assert_eq!(list_blockers(&many), "b0, b1, b2, b3, b4 and 3 more");
        assert_eq!(list_blockers(&many[..2]), "b0, b1");
    }

    mod policy_objects {
        use super::*;
        use crate::{
            api::{dependency_rule::DependencyRule, resource_protection::ResourceProtection},
            index::{DependentsIndex, ObjectId, Reference},
            registry::Registry,
        };

        struct View {
            registry: Registry,
            index: DependentsIndex,
            broken: bool,
        }

        impl ClusterView for View {
            fn policies_loaded(&self) -> bool {
                self.registry.loaded()
            }
            fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
                true
            }
            fn protections(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledProtection>]>> {
                self.registry.protections_for(gr)
            }
            fn dependencies(
                &self,
                gr: &GroupResource,
            ) -> Option<Arc<[Arc<Vec<CompiledDependency>>]>> {
                self.registry.dependencies.find(gr)
            }
            fn dependents(
                &self,
                q: DependentsQuery<'_>,
            ) -> impl Future<Output = Result<Vec<Referrer>, LookupError>> + Send {
                let r = if self.broken {
                    Err(LookupError("connection refused".into()))
                } else {
                    Ok(self
                        .index
                        .lookup(q.cluster, &q.dep.target.to_string(), q.name, q.namespace))
                };
                async move { r }
            }
        }

        fn view(rps: &[Value], rules: &[Value]) -> View {
            let registry = Registry::default();
            for rp in rps {
                let rp: ResourceProtection = serde_json::from_value(rp.clone()).expect("rp");
                registry.apply("", &rp).expect("compiles");
            }
            for r in rules {
                let r: DependencyRule = serde_json::from_value(r.clone()).expect("rule");
                registry.apply("", &r).expect("compiles");
            }
            registry.protections.set_loaded();
            registry.dependencies.set_loaded();
            registry.critical.set_loaded();
            registry.anchors.set_loaded();
            View {
                registry,
                index: DependentsIndex::default(),
                broken: false,
            }
        }

        fn rp(name: &str, enforcement: &str, sel: Value) -> Value {
            json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
                "metadata": {"name": name}, "spec": {"enforcement": enforcement, "resources": [sel]}})
        }

        fn vm_rule(path: &str) -> Value {
            json!({"apiVersion": "holdfast.dev/v1alpha1", "kind": "DependencyRule",
                "metadata": {"name": "vm-dependencies"},
                "spec": {"dependent": {"group": "compute.test.io", "version": "v1", "kind": "VirtualMachine", "resource": "virtualmachines"},
                         "dependencies": [{"group": "network.test.io", "version": "v1", "resource": "vpcs", "fieldRef": {"path": path}}]}})
        }

        fn delete_of(
            group: &str,
            kind: &str,
            resource: &str,
            ns: Option<&str>,
            name: &str,
            labels: Value,
        ) -> AdmissionRequest {
            let mut meta = json!({"name": name, "labels": labels});
            if let Some(ns) = ns {
                meta["namespace"] = json!(ns);
            }
            let body = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
                "uid":"u","kind":{"group":group,"version":"v1","kind":kind},
                "resource":{"group":group,"version":"v1","resource":resource},
                "name":name,"namespace":ns,"operation":"DELETE","userInfo":{"username":"bob"},
                "object":null,"oldObject":{"metadata": meta}}});
            parse_review(body.to_string().as_bytes()).expect("review")
        }

        #[test]
        fn resource_protection_selectors_and_modes() {
            let v = view(
                &[
                    rp(
                        "shop-db",
                        "Enforce",
                        json!({"group": "apps", "version": "v1", "resource": "deployments", "namespace": "shop", "names": ["db"]}),
                    ),
                    rp(
                        "crds",
                        "Enforce",
                        json!({"group": "apiextensions.k8s.io", "version": "v1", "resource": "customresourcedefinitions", "names": ["widgets.example.com"]}),
                    ),
                    rp(
                        "labelled",
                        "Warn",
                        json!({"group": "", "version": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"tier": "data"}}}),
                    ),
                    rp(
                        "audit",
                        "Audit",
                        json!({"group": "", "version": "v1", "resource": "secrets"}),
                    ),
                ],
                &[],
            );
            let c = cfg(false, &[]);
            let e = evaluate(
                &delete_of(
                    "apps",
                    "Deployment",
                    "deployments",
                    Some("shop"),
                    "db",
                    json!({}),
                ),
                &c,
                &v,
                now(),
            );
            let d = denied(&e);
            assert_eq!(e.policy, "ResourceProtection/shop-db");
            assert!(d.message.starts_with("holdfast: Deployment shop/db is protected by ResourceProtection/shop-db (selects deployments.apps in namespace shop named db)"), "{}", d.message);
            for (ns, name) in [("shop", "web"), ("other", "db")] {
                let e = evaluate(
                    &delete_of(
                        "apps",
                        "Deployment",
                        "deployments",
                        Some(ns),
                        name,
                        json!({}),
                    ),
                    &c,
                    &v,
                    now(),
                );
                assert_eq!(e.decision, Decision::Allow, "{ns}/{name}");
            }
            let e = evaluate(
                &delete_of(
                    "apiextensions.k8s.io",
                    "CustomResourceDefinition",
                    "customresourcedefinitions",
                    None,
                    "widgets.example.com",
                    json!({}),
                ),
                &c,
                &v,
                now(),
            );
            assert!(
                denied(&e)
                    .message
                    .contains("CustomResourceDefinition widgets.example.com")
            );
            let e = evaluate(
                &delete_of(
                    "",
                    "ConfigMap",
                    "configmaps",
                    Some("x"),
                    "cfg",
                    json!({"tier": "data"}),
                ),
                &c,
                &v,
                now(),
            );
            match &e.decision {
                Decision::Warn(w) => assert!(w[0].contains("ResourceProtection/labelled")),
                other => panic!("{other:?}"),
            }
            let e = evaluate(
                &delete_of(
                    "",
                    "ConfigMap",
                    "configmaps",
                    Some("x"),
                    "cfg",
                    json!({"tier": "web"}),
                ),
                &c,
                &v,
                now(),
            );
            assert_eq!(e.decision, Decision::Allow);
            let e = evaluate(
                &delete_of("", "Secret", "secrets", Some("x"), "s", json!({})),
                &c,
                &v,
                now(),
            );
            assert_eq!(e.decision, Decision::Allow);
            assert_eq!(e.policy, "audit");
            assert_eq!(e.audits.len(), 1);
        }

        fn vm(idx: &DependentsIndex, v: &View, name: &str, spec: Value, terminating: bool) {
            let obj = json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec});
            let rules = v.registry.dependencies.entries();
            let deps: Vec<&CompiledDependency> = rules.iter().flat_map(|r| r.iter()).collect();
            let refs: Vec<Reference> = crate::index::references(&obj, &deps);
            let id = ObjectId {
                cluster: "".into(),
                resource: "virtualmachines.compute.test.io".into(),
                namespace: "default".into(),
                name: name.into(),
            };
            idx.apply(&id, "VirtualMachine", terminating, &refs);
        }

        #[test]
        fn dependency_rule_blocks_while_referenced() {
            let mut v = view(&[], &[vm_rule(".spec.vpcRef.name")]);
            let c = cfg(false, &[]);
            let del = delete_of(
                "network.test.io",
                "VPC",
                "vpcs",
                Some("default"),
                "my-vpc",
                json!({}),
            );
            assert_eq!(evaluate(&del, &c, &v, now()).decision, Decision::Allow);
            let idx = v.index.clone();
            vm(
                &idx,
                &v,
                "my-vm",
                json!({"vpcRef": {"name": "my-vpc"}}),
                false,
            );
            let e = evaluate(&del, &c, &v, now());
            let d = denied(&e);
            assert!(d.message.starts_with("holdfast: VPC default/my-vpc is still referenced by VirtualMachine default/my-vm (policy: DependencyRule/vm-dependencies"), "{}", d.message);
            vm(
                &idx,
                &v,
                "vm-2",
                json!({"vpcRef": {"name": "my-vpc"}}),
                true,
            );
            let d = denied(&evaluate(&del, &c, &v, now())).clone();
            assert!(
                d.message.contains(
                    "VirtualMachine default/my-vm, VirtualMachine default/vm-2 (terminating)"
                ),
                "{}",
                d.message
            );
            // Another namespace's VPC of the same name is not referenced.
            let other = delete_of(
                "network.test.io",
                "VPC",
                "vpcs",
                Some("prod"),
                "my-vpc",
                json!({}),
            );
            assert_eq!(evaluate(&other, &c, &v, now()).decision, Decision::Allow);
            // Lookup failure: fail closed.
            v.broken = true;
            let d = denied(&evaluate(&del, &c, &v, now())).clone();
            assert_eq!(d.kind, DenialKind::LookupFailed);
            assert!(d.message.starts_with("holdfast: cannot verify dependents"));
        }

        #[test]
        fn explain_lists_every_protection_and_every_blocker() {
            let v = view(
                &[rp(
                    "vpcs-audited",
                    "Audit",
                    json!({"group": "network.test.io", "version": "v1", "resource": "vpcs"}),
                )],
                &[vm_rule(".spec.vpcRef.name")],
            );
            let c = cfg(false, &[]);
            let idx = v.index.clone();
            for i in 0..7 {
                vm(
                    &idx,
                    &v,
                    &format!("vm-{i}"),
                    json!({"vpcRef": {"name": "my-vpc"}}),
                    false,
                );
            }
            let del = delete_of(
                "network.test.io",
                "VPC",
                "vpcs",
                Some("default"),
                "my-vpc",
                json!({"holdfast.dev/protected": "Always"}),
            );
            let x = futures::executor::block_on(explain_delete(&del, &c, &v, now()));
            // The verdict is the webhook's: the label decides, its message names it.
            assert_eq!(x.evaluation, evaluate(&del, &c, &v, now()));
            assert_eq!(x.evaluation.policy, "label");
            let policies: Vec<(&str, Enforcement)> = x
                .findings
                .iter()
                .map(|f| (f.policy.as_str(), f.enforcement))
                .collect();
            assert_eq!(
                policies,
                [
                    ("label holdfast.dev/protected", Enforcement::Enforce),
                    ("ResourceProtection/vpcs-audited", Enforcement::Audit),
                    ("DependencyRule/vm-dependencies", Enforcement::Enforce),
                ]
            );
            let dep = &x.findings[2];
            assert_eq!(dep.blockers.len(), 7);
            assert!(dep.message.contains("and 2 more"), "{}", dep.message);
            assert_eq!(x.break_glass.active, None);
            // Break-glass: allowed, and what it overrides is still listed.
            let mut glass = del.clone();
            if let Some(old) = glass.old_object.as_mut() {
                old["metadata"]["annotations"] =
                    json!({"holdfast.dev/skip-protection": "2000-01-01T00:00:00Z"});
            }
            let x = futures::executor::block_on(explain_delete(&glass, &c, &v, now()));
            assert_eq!(
                x.break_glass.ignored.as_deref(),
                Some("holdfast.dev/skip-protection=2000-01-01T00:00:00Z has expired")
            );
            glass.old_object.as_mut().expect("old")["metadata"]["annotations"] =
                json!({"holdfast.dev/skip-protection": "true"});
            let x = futures::executor::block_on(explain_delete(&glass, &c, &v, now()));
            assert_eq!(x.evaluation.decision, Decision::Allow);
            assert_eq!(
                x.break_glass.active.as_deref(),
                Some("annotation holdfast.dev/skip-protection")
            );
            assert_eq!(x.findings.len(), 3);
        }

        #[test]
        fn not_loaded_registry_denies_retry_later() {
            let v = View {
                registry: Registry::default(),
                index: DependentsIndex::default(),
                broken: false,
            };
            let del = delete_of(
                "network.test.io",
                "VPC",
                "vpcs",
                Some("default"),
                "my-vpc",
                json!({}),
            );
            let d = denied(&evaluate(&del, &cfg(false, &[]), &v, now())).clone();
            assert_eq!(d.kind, DenialKind::NotReady);
        }
    }

    mod lifecycle {
        use super::*;
        use crate::{
            api::{anchor_rule::AnchorRule, critical_service::CriticalService},
            registry::Registry,
        };
        use std::collections::HashMap;

        #[derive(Default)]
        struct View {
            registry: Registry,
            objects: HashMap<(String, String, String), Arc<Value>>,
            finalizers: HashMap<(String, String), usize>,
            contents: Vec<ContainedObject>,
        }

        impl ClusterView for View {
            fn policies_loaded(&self) -> bool {
                true
            }
            fn critical(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledCritical>]>> {
                self.registry.critical.find(gr)
            }
            fn anchors(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledAnchor>]>> {
                self.registry.anchors.find(gr)
            }
            fn count_finalizer(
                &self,
                _c: &str,
                gr: &GroupResource,
                f: &str,
            ) -> impl Future<Output = Result<usize, LookupError>> + Send {
                let n = self
                    .finalizers
                    .get(&(gr.to_string(), f.to_string()))
                    .copied()
                    .unwrap_or(0);
                async move { Ok(n) }
            }
            fn object(
                &self,
                _c: &str,
                gr: &GroupResource,
                ns: Option<&str>,
                name: &str,
            ) -> impl Future<Output = Result<Option<Arc<Value>>, LookupError>> + Send {
                let o = self
                    .objects
                    .get(&(
                        gr.to_string(),
                        ns.unwrap_or_default().to_string(),
                        name.to_string(),
                    ))
                    .cloned();
                async move { Ok(o) }
            }
            fn namespace_contents(
                &self,
                _c: &str,
                ns: &str,
            ) -> impl Future<Output = Result<Vec<ContainedObject>, LookupError>> + Send
            {
                let v: Vec<ContainedObject> = self
                    .contents
                    .iter()
                    .filter(|c| crate::review::meta_str(&c.object, "namespace") == Some(ns))
                    .cloned()
                    .collect();
                async move { Ok(v) }
            }
        }

        fn del(
            group: &str,
            kind: &str,
            resource: &str,
            ns: Option<&str>,
            name: &str,
            labels: Value,
        ) -> AdmissionRequest {
            let mut meta = json!({"name": name, "labels": labels});
            if let Some(ns) = ns {
                meta["namespace"] = json!(ns);
            }
            let body = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
                "uid":"u","kind":{"group":group,"version":"v1","kind":kind},
                "resource":{"group":group,"version":"v1","resource":resource},
                "name":name,"namespace":ns.unwrap_or(name),"operation":"DELETE","userInfo":{"username":"bob"},
                "object":null,"oldObject":{"metadata": meta}}});
            parse_review(body.to_string().as_bytes()).expect("review")
        }

        fn critical_view() -> View {
            let v = View::default();
            let cs: CriticalService = serde_json::from_value(json!({
                "apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService",
                "metadata": {"name": "for-finalizer-deployment"},
                "spec": {"provider": {"group": "apps", "resource": "deployments", "namespace": "finalizer-namespace", "name": "finalizer-deployment"},
                    "criteria": [
                        {"type": "Finalizer", "finalizer": {"group": "my.crd.group", "resource": "coolresources", "finalizerName": "my.crd.group/super-important"}},
                        {"type": "SpecificResource", "specificResource": {"group": "apiextensions.k8s.io", "resource": "customresourcedefinitions", "name": "coolresources.my.crd.group"}}
                    ]}})).expect("cs");
            v.registry.apply("", &cs).expect("compiles");
            v
        }

        #[test]
        fn critical_service_orders_deletion() {
            let mut v = critical_view();
            let c = cfg(false, &[]);
            let provider = del(
                "apps",
                "Deployment",
                "deployments",
                Some("finalizer-namespace"),
                "finalizer-deployment",
                json!({}),
            );
            let ns = del(
                "",
                "Namespace",
                "namespaces",
                None,
                "finalizer-namespace",
                json!({}),
            );
            let itself = del(
                "holdfast.dev",
                "CriticalService",
                "criticalservices",
                None,
                "for-finalizer-deployment",
                json!({}),
            );
            v.finalizers.insert(
                (
                    "coolresources.my.crd.group".into(),
                    "my.crd.group/super-important".into(),
                ),
                2,
            );
            v.objects.insert(
                (
                    "customresourcedefinitions.apiextensions.k8s.io".into(),
                    "".into(),
                    "coolresources.my.crd.group".into(),
                ),
                Arc::new(json!({})),
            );
            v.objects.insert(
                (
                    "deployments.apps".into(),
                    "finalizer-namespace".into(),
                    "finalizer-deployment".into(),
                ),
                Arc::new(json!({})),
            );
            let d = denied(&evaluate(&provider, &c, &v, now())).clone();
            assert!(d.message.contains("2 coolresources.my.crd.group still carry finalizer my.crd.group/super-important"), "{}", d.message);
            assert!(d.message.contains("customresourcedefinitions.apiextensions.k8s.io coolresources.my.crd.group still exists"), "{}", d.message);
            let d = denied(&evaluate(&ns, &c, &v, now())).clone();
            assert!(d.message.starts_with("holdfast: Namespace finalizer-namespace holds deployments.apps finalizer-namespace/finalizer-deployment"), "{}", d.message);
            assert!(
                denied(&evaluate(&itself, &c, &v, now()))
                    .message
                    .contains("while its provider")
            );
            // One left: singular.
            v.finalizers.insert(
                (
                    "coolresources.my.crd.group".into(),
                    "my.crd.group/super-important".into(),
                ),
                1,
            );
            assert!(
                denied(&evaluate(&provider, &c, &v, now()))
                    .message
                    .contains("1 coolresources.my.crd.group still carries finalizer")
            );
            // Criteria met: provider and namespace may go; the CriticalService only once the provider is gone.
            v.finalizers.clear();
            v.objects.remove(&(
                "customresourcedefinitions.apiextensions.k8s.io".into(),
                "".into(),
                "coolresources.my.crd.group".into(),
            ));
            assert_eq!(evaluate(&provider, &c, &v, now()).decision, Decision::Allow);
            assert_eq!(evaluate(&ns, &c, &v, now()).decision, Decision::Allow);
            assert!(matches!(
                evaluate(&itself, &c, &v, now()).decision,
                Decision::Deny(_)
            ));
            v.objects.clear();
            assert_eq!(evaluate(&itself, &c, &v, now()).decision, Decision::Allow);
            // Another deployment in the namespace is not the provider.
            let other = del(
                "apps",
                "Deployment",
                "deployments",
                Some("finalizer-namespace"),
                "web",
                json!({}),
            );
            assert_eq!(evaluate(&other, &c, &v, now()).decision, Decision::Allow);
        }

        fn anchor_view() -> View {
            let v = View::default();
            let ar: AnchorRule = serde_json::from_value(json!({
                "apiVersion": "holdfast.dev/v1alpha1", "kind": "AnchorRule", "metadata": {"name": "appcat"},
                "spec": {"anchor": {"group": "vshn.appcat.vshn.io", "version": "v1", "resource": "xvshnpostgresqls"},
                    "anchorLabels": {"name": "appcat.vshn.io/composite-name"},
                    "toggle": {"fieldPath": ".spec.parameters.backup.deletionProtection", "default": true},
                    "protects": [
                        {"group": "", "version": "v1", "resource": "namespaces"},
                        {"group": "", "version": "v1", "resource": "persistentvolumeclaims", "inheritFromNamespace": true},
                        {"group": "appcat.vshn.io", "version": "v1", "resource": "xobjectbuckets"}
                    ]}})).expect("ar");
            v.registry.apply("", &ar).expect("compiles");
            v
        }

        #[test]
        fn anchors_in_another_cluster_are_never_read_locally_and_fail_closed() {
            let mut v = View::default();
            let ar: AnchorRule = serde_json::from_value(json!({
                "apiVersion": "holdfast.dev/v1alpha1", "kind": "AnchorRule", "metadata": {"name": "remote"},
                "spec": {"anchor": {"group": "vshn.appcat.vshn.io", "version": "v1", "resource": "xvshnpostgresqls"},
                    "anchorLabels": {"name": "appcat.vshn.io/composite-name"},
                    "anchorSource": {"kubeconfigSecretRef": {"name": "control", "namespace": "holdfast-system"}},
                    "protects": [{"group": "", "version": "v1", "resource": "configmaps"}]}}))
            .expect("ar");
            assert_eq!(
                ar.spec
                    .anchor_source
                    .as_ref()
                    .map(|s| s.kubeconfig_secret_ref.key.as_str()),
                Some("kubeconfig")
            );
            v.registry.apply("", &ar).expect("compiles");
            // A local object of the anchor's name is not the anchor.
            v.objects.insert(
                (
                    "xvshnpostgresqls.vshn.appcat.vshn.io".into(),
                    String::new(),
                    "pg-1".into(),
                ),
                Arc::new(json!({"metadata": {"name": "pg-1"}})),
            );
            let bucket = del(
                "",
                "ConfigMap",
                "configmaps",
                Some("app"),
                "b",
                json!({"appcat.vshn.io/composite-name": "pg-1"}),
            );
            let d = denied(&evaluate(&bucket, &cfg(false, &[]), &v, now())).clone();
            assert_eq!(
                d.message,
                format!(
                    "holdfast: cannot read the anchor xvshnpostgresqls.vshn.appcat.vshn.io pg-1 of ConfigMap app/b \
                 (policy: AnchorRule/remote): anchor source Secret holdfast-system/control is not available here; \
                 refusing rather than risk it, retry later, {BYPASS_HINT}."
                )
            );
        }

        #[test]
        fn anchor_rule_lifecycle() {
            let mut v = anchor_view();
            let c = cfg(false, &[]);
            let anchor_key = (
                "xvshnpostgresqls.vshn.appcat.vshn.io".to_string(),
                String::new(),
                "pg-1".to_string(),
            );
            let ns_key = (
                "namespaces".to_string(),
                String::new(),
                "vshn-postgresql-pg-1".to_string(),
            );
            v.objects.insert(ns_key, Arc::new(json!({"metadata": {"name": "vshn-postgresql-pg-1", "labels": {"appcat.vshn.io/composite-name": "pg-1"}}})));
            v.objects.insert(anchor_key.clone(), Arc::new(json!({"metadata": {"name": "pg-1"}, "spec": {"parameters": {"backup": {"deletionProtection": true}}}})));
            let ns = del(
                "",
                "Namespace",
                "namespaces",
                None,
                "vshn-postgresql-pg-1",
                json!({"appcat.vshn.io/composite-name": "pg-1"}),
            );
            let pvc = del(
                "",
                "PersistentVolumeClaim",
                "persistentvolumeclaims",
                Some("vshn-postgresql-pg-1"),
                "data",
                json!({}),
            );
            let bucket = del(
                "appcat.vshn.io",
                "XObjectBucket",
                "xobjectbuckets",
                None,
                "b",
                json!({"appcat.vshn.io/composite-name": "pg-1"}),
            );
            for r in [&ns, &pvc, &bucket] {
                let d = denied(&evaluate(r, &c, &v, now())).clone();
                assert!(d.message.contains("is protected while its anchor xvshnpostgresqls.vshn.appcat.vshn.io pg-1 exists and has .spec.parameters.backup.deletionProtection=true"), "{}", d.message);
            }
            // Override label on exactly that object.
            let pvc_override = del(
                "",
                "PersistentVolumeClaim",
                "persistentvolumeclaims",
                Some("vshn-postgresql-pg-1"),
                "data",
                json!({"holdfast.dev/allow-deletion": "true"}),
            );
            assert_eq!(
                evaluate(&pvc_override, &c, &v, now()).decision,
                Decision::Allow
            );
            let pvc_wrong = del(
                "",
                "PersistentVolumeClaim",
                "persistentvolumeclaims",
                Some("vshn-postgresql-pg-1"),
                "data",
                json!({"holdfast.dev/allow-deletion": "yes"}),
            );
            assert!(matches!(
                evaluate(&pvc_wrong, &c, &v, now()).decision,
                Decision::Deny(_)
            ));
            // Toggle off → deletable; absent → default (true).
            v.objects.insert(anchor_key.clone(), Arc::new(json!({"metadata": {"name": "pg-1"}, "spec": {"parameters": {"backup": {"deletionProtection": false}}}})));
            assert_eq!(evaluate(&pvc, &c, &v, now()).decision, Decision::Allow);
            v.objects.insert(
                anchor_key.clone(),
                Arc::new(json!({"metadata": {"name": "pg-1"}, "spec": {}})),
            );
            assert!(matches!(
                evaluate(&pvc, &c, &v, now()).decision,
                Decision::Deny(_)
            ));
            // Terminating or gone anchor → deletable (no deadlock).
            v.objects.insert(anchor_key.clone(), Arc::new(json!({"metadata": {"name": "pg-1", "deletionTimestamp": "2026-11-22T08:00:00Z"}, "spec": {}})));
            assert_eq!(evaluate(&pvc, &c, &v, now()).decision, Decision::Allow);
            v.objects.remove(&anchor_key);
            for r in [&ns, &pvc, &bucket] {
                assert_eq!(evaluate(r, &c, &v, now()).decision, Decision::Allow);
            }
        }

        #[test]
        fn containment_denies_namespace_with_protected_contents() {
            let mut v = View::default();
            v.contents.push(ContainedObject {
                resource: crate::review::Gvr { group: "".into(), version: "v1".into(), resource: "persistentvolumeclaims".into() },
                kind: "PersistentVolumeClaim".into(),
                object: Arc::new(json!({"metadata": {"name": "data", "namespace": "shop", "labels": {"holdfast.dev/protected": "true"}}})),
            });
            v.contents.push(ContainedObject {
                resource: crate::review::Gvr {
                    group: "".into(),
                    version: "v1".into(),
                    resource: "configmaps".into(),
                },
                kind: "ConfigMap".into(),
                object: Arc::new(json!({"metadata": {"name": "plain", "namespace": "shop"}})),
            });
            let c = cfg(false, &[]);
            let ns = del("", "Namespace", "namespaces", None, "shop", json!({}));
            let e = evaluate(&ns, &c, &v, now());
            let d = denied(&e);
            assert_eq!(e.policy, "containment");
            assert_eq!(
                d.blockers,
                vec!["PersistentVolumeClaim shop/data (label)".to_string()]
            );
            assert!(d.message.starts_with("holdfast: Namespace shop holds objects that are protected from deletion: PersistentVolumeClaim shop/data (label)"), "{}", d.message);
            // Another namespace is unaffected.
            let other = del("", "Namespace", "namespaces", None, "dev", json!({}));
            assert_eq!(evaluate(&other, &c, &v, now()).decision, Decision::Allow);
            // Break-glass on the contained object lifts it.
            v.contents[0].object = Arc::new(
                json!({"metadata": {"name": "data", "namespace": "shop", "labels": {"holdfast.dev/protected": "true"}, "annotations": {"holdfast.dev/skip-protection": "true"}}}),
            );
            assert_eq!(evaluate(&ns, &c, &v, now()).decision, Decision::Allow);
        }
    }

    mod hardening {
        use super::*;
        use crate::{api::resource_protection::ResourceProtection, registry::Registry};
        use std::sync::atomic::{AtomicBool, Ordering};

        #[derive(Default)]
        struct View {
            registry: Registry,
            pods: Vec<Value>,
            instances: Vec<ContainedObject>,
            lookup_fails: bool,
            bypass: bool,
            bypass_asked: AtomicBool,
        }

        impl ClusterView for View {
            fn policies_loaded(&self) -> bool {
                true
            }
            fn protections(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledProtection>]>> {
                self.registry.protections_for(gr)
            }
            fn object(
                &self,
                _c: &str,
                _gr: &GroupResource,
                ns: Option<&str>,
                name: &str,
            ) -> impl Future<Output = Result<Option<Arc<Value>>, LookupError>> + Send {
                let found = self
                    .pods
                    .iter()
                    .find(|p| {
                        crate::review::meta_str(p, "name") == Some(name)
                            && crate::review::meta_str(p, "namespace") == ns
                    })
                    .cloned()
                    .map(Arc::new);
                let fails = self.lookup_fails;
                async move {
                    if fails {
                        Err(LookupError("boom".into()))
                    } else {
                        Ok(found)
                    }
                }
            }
            fn custom_resources(
                &self,
                _c: &str,
                _crd: &Value,
            ) -> impl Future<Output = Result<Vec<ContainedObject>, LookupError>> + Send
            {
                let items = self.instances.clone();
                let fails = self.lookup_fails;
                async move {
                    if fails {
                        Err(LookupError("discovery of example.com/v1 failed".into()))
                    } else {
                        Ok(items)
                    }
                }
            }
            fn can_bypass(
                &self,
                _req: &AdmissionRequest,
            ) -> impl Future<Output = Result<bool, LookupError>> + Send {
                self.bypass_asked.store(true, Ordering::SeqCst);
                let b = self.bypass;
                async move { Ok(b) }
            }
        }

        fn req(body: Value) -> AdmissionRequest {
            let body = json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request": body});
            parse_review(body.to_string().as_bytes()).expect("review")
        }

        fn gadget(name: &str, labels: Value) -> ContainedObject {
            ContainedObject {
                resource: crate::review::Gvr {
                    group: "example.com".into(),
                    version: "v1".into(),
                    resource: "gadgets".into(),
                },
                kind: "Gadget".into(),
                object: Arc::new(
                    json!({"metadata": {"name": name, "namespace": "shop", "labels": labels}}),
                ),
            }
        }

        fn crd_delete() -> AdmissionRequest {
            req(
                json!({"uid":"u","kind":{"group":"apiextensions.k8s.io","version":"v1","kind":"CustomResourceDefinition"},
                "resource":{"group":"apiextensions.k8s.io","version":"v1","resource":"customresourcedefinitions"},
                "name":"gadgets.example.com","operation":"DELETE","userInfo":{"username":"bob"},
                "object":null,"oldObject":{"metadata":{"name":"gadgets.example.com"},
                    "spec":{"group":"example.com","names":{"plural":"gadgets","kind":"Gadget"},"scope":"Namespaced"}}}),
            )
        }

        #[test]
        fn crd_delete_is_refused_while_an_instance_is_protected() {
            let mut v = View::default();
            v.instances.push(gadget("plain", json!({})));
            v.instances.push(gadget(
                "precious",
                json!({"holdfast.dev/protected": "Always"}),
            ));
            let c = cfg(false, &[]);
            let e = evaluate(&crd_delete(), &c, &v, now());
            let d = denied(&e);
            assert_eq!(e.policy, "containment");
            assert_eq!(d.blockers, vec!["Gadget shop/precious (label)".to_string()]);
            assert_eq!(
                d.message,
                "holdfast: CustomResourceDefinition gadgets.example.com has instances that are \
                 protected from deletion: Gadget shop/precious (label) (policy: containment), so \
                 it cannot be deleted: that would delete them all, unchecked. To delete it, first \
                 lift the protection of those objects (or delete them), or set the annotation \
                 holdfast.dev/skip-protection=true if you are allowed to bypass protection on the \
                 CustomResourceDefinition."
            );
            // Break-glass on the instance lifts it; no protected instance: allowed.
            v.instances[1] = gadget(
                "precious",
                json!({"holdfast.dev/protected": "Always", "appcat.vshn.io/webhook-allowdeletion": "true"}),
            );
            assert_eq!(
                evaluate(&crd_delete(), &c, &v, now()).decision,
                Decision::Allow
            );
            // Instances that cannot be listed: refused.
            v.lookup_fails = true;
            let e = evaluate(&crd_delete(), &c, &v, now());
            assert_eq!(denied(&e).kind, DenialKind::LookupFailed);
            assert!(
                denied(&e).message.starts_with(
                    "holdfast: cannot verify what instances CustomResourceDefinition gadgets.example.com has: discovery of example.com/v1 failed."
                ),
                "{}",
                denied(&e).message
            );
        }

        fn eviction(name: &str) -> AdmissionRequest {
            req(
                json!({"uid":"u","kind":{"group":"policy","version":"v1","kind":"Eviction"},
                "resource":{"group":"","version":"v1","resource":"pods"},"subResource":"eviction",
                "name":name,"namespace":"shop","operation":"CREATE","userInfo":{"username":"bob"},
                "object":{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":name,"namespace":"shop"}},
                "oldObject":null}),
            )
        }

        #[test]
        fn eviction_of_a_protected_pod_is_refused() {
            let mut v = View::default();
            v.pods.push(json!({"metadata": {"name": "pinned", "namespace": "shop", "labels": {"holdfast.dev/protected": "true"}}}));
            v.pods
                .push(json!({"metadata": {"name": "free", "namespace": "shop"}}));
            let c = cfg(false, &[]);
            let e = evaluate(&eviction("pinned"), &c, &v, now());
            assert_eq!(e.policy, "label");
            assert!(
                denied(&e).message.starts_with(
                    "holdfast: eviction refused: Pod shop/pinned is protected by label holdfast.dev/protected=true (policy: label holdfast.dev/protected), so it cannot be deleted."
                ),
                "{}",
                denied(&e).message
            );
            assert_eq!(
                evaluate(&eviction("free"), &c, &v, now()).decision,
                Decision::Allow
            );
            assert_eq!(
                evaluate(&eviction("gone"), &c, &v, now()).decision,
                Decision::Allow
            );
            v.lookup_fails = true;
            let e = evaluate(&eviction("pinned"), &c, &v, now());
            assert_eq!(denied(&e).kind, DenialKind::LookupFailed);
        }

        fn rp_view() -> View {
            let v = View::default();
            let rp: ResourceProtection = serde_json::from_value(json!({
                "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
                "metadata": {"name": "keep-cms"},
                "spec": {"resources": [{"group": "", "version": "v1", "resource": "configmaps", "names": ["obj"]}]}
            }))
            .expect("rp");
            v.registry.apply("", &rp).expect("valid");
            v.registry
                .reset::<crate::api::dependency_rule::DependencyRule>(&[]);
            v.registry.reset::<crate::api::anchor_rule::AnchorRule>(&[]);
            v.registry
                .reset::<crate::api::critical_service::CriticalService>(&[]);
            v
        }

        #[test]
        fn strict_break_glass_on_a_policy_protected_object_takes_the_bypass_permission() {
            let v = rp_view();
            let old = cm(json!({}), json!({}));
            let new = cm(json!({}), json!({"holdfast.dev/skip-protection": "true"}));
            let e = evaluate(
                &update(old.clone(), new.clone()),
                &cfg(true, &[]),
                &v,
                now(),
            );
            assert_eq!(e.policy, "break-glass");
            assert_eq!(
                denied(&e).message,
                "holdfast: user \"alice\" may not add annotation holdfast.dev/skip-protection to \
                 ConfigMap ns/obj: it is protected in strict mode, and lifting that protection \
                 needs the permission to bypass it (verb bypass on protections.holdfast.dev in \
                 namespace ns). Ask someone who holds it."
            );
            v.bypass_asked.store(false, Ordering::SeqCst);
            // Not strict: no permission asked.
            assert_eq!(
                evaluate(
                    &update(old.clone(), new.clone()),
                    &cfg(false, &[]),
                    &v,
                    now()
                )
                .decision,
                Decision::Allow
            );
            // An object no policy protects: no permission asked.
            let mut other = new.clone();
            other["metadata"]["name"] = json!("other");
            let mut other_old = old.clone();
            other_old["metadata"]["name"] = json!("other");
            let mut r = update(other_old, other);
            r.name = Some("other".into());
            assert_eq!(
                evaluate(&r, &cfg(true, &[]), &v, now()).decision,
                Decision::Allow
            );
            assert!(!v.bypass_asked.load(Ordering::SeqCst));
            // With the permission: allowed.
            let mut v = rp_view();
            v.bypass = true;
            let e = evaluate(&update(old, new), &cfg(true, &[]), &v, now());
            assert_eq!(e.decision, Decision::Allow);
            assert_eq!(e.policy, "break-glass-authorized");
        }

        #[test]
        fn strict_covers_label_removal_through_subresources() {
            let old = cm(json!({"holdfast.dev/protected": "Always"}), json!({}));
            let new = cm(json!({}), json!({}));
            let mut r = update(old, new);
            r.sub_resource = Some("status".into());
            let e = evaluate(&r, &cfg(true, &[]), &NoPolicies, now());
            assert_eq!(e.policy, "strict");
            assert_eq!(
                denied(&e).blockers,
                vec!["label holdfast.dev/protected=Always".to_string()]
            );
        }

        #[test]
        fn look_alike_labels_warn_on_create_and_update() {
            let c = cfg(
                false,
                &["resourcetemplate.karmada.io/deletion-protected=Always"],
            );
            let obj = cm(json!({"holdfast.dev/protected": "always"}), json!({}));
            let e = evaluate(
                &review(
                    "CREATE",
                    "ConfigMap",
                    "configmaps",
                    obj.clone(),
                    Value::Null,
                ),
                &c,
                &NoPolicies,
                now(),
            );
            assert_eq!(
                e.decision,
                Decision::Warn(vec![
                    "holdfast: label holdfast.dev/protected=\"always\" on ConfigMap ns/obj does not \
                     protect it: the value must be exactly \"Always\" or \"true\" or \"Cascading\" (case-sensitive, \
                     no spaces)."
                        .to_string()
                ])
            );
            let karmada = cm(
                json!({"resourcetemplate.karmada.io/deletion-protected": "true"}),
                json!({}),
            );
            let e = evaluate(
                &update(cm(json!({}), json!({})), karmada.clone()),
                &c,
                &NoPolicies,
                now(),
            );
            assert_eq!(
                e.decision,
                Decision::Allow,
                "true is not a look-alike of Always"
            );
            let bad = cm(
                json!({"resourcetemplate.karmada.io/deletion-protected": "ALWAYS"}),
                json!({}),
            );
            let e = evaluate(&update(karmada, bad.clone()), &c, &NoPolicies, now());
            assert!(
                matches!(&e.decision, Decision::Warn(w) if w.len() == 1),
                "{e:?}"
            );
            // Unchanged on a later update: no repeated warning.
            let e = evaluate(&update(bad.clone(), bad), &c, &NoPolicies, now());
            assert_eq!(e.decision, Decision::Allow);
        }

        fn gadget_update(remove_label: bool) -> AdmissionRequest {
            let old = json!({"apiVersion":"example.com/v1","kind":"Gadget",
                "metadata":{"name":"g","namespace":"shop","labels":{"holdfast.dev/protected":"true"}}});
            let mut new = old.clone();
            if remove_label {
                new["metadata"]["labels"] = json!({});
            }
            req(
                json!({"uid":"u","kind":{"group":"example.com","version":"v1","kind":"Gadget"},
                "resource":{"group":"example.com","version":"v1","resource":"gadgets"},
                "name":"g","namespace":"shop","operation":"UPDATE","userInfo":{"username":"bob"},
                "object":new,"oldObject":old}),
            )
        }

        #[test]
        fn a_crd_labelled_strict_exempt_takes_its_instances_out_of_strict_mode() {
            let c = cfg(true, &[]);
            // No such CRD: strict.
            let mut v = View::default();
            let e = evaluate(&gadget_update(true), &c, &v, now());
            assert_eq!(e.policy, "strict", "{e:?}");
            // The CRD without the label: strict.
            v.pods
                .push(json!({"metadata": {"name": "gadgets.example.com", "labels": {}}}));
            let e = evaluate(&gadget_update(true), &c, &v, now());
            assert_eq!(e.policy, "strict", "{e:?}");
            // The CRD exempt: the label may go; the DELETE is still refused (the
            // label path never waits for the API server, so the hint is unchanged).
            v.pods[0] = json!({"metadata": {"name": "gadgets.example.com",
                "labels": {"holdfast.dev/strict-exempt": "true"}}});
            let e = evaluate(&gadget_update(true), &c, &v, now());
            assert_eq!(e.decision, Decision::Allow, "{e:?}");
            let mut del = gadget_update(false);
            del.operation = Operation::Delete;
            del.object = None;
            let e = evaluate(&del, &c, &v, now());
            let d = denied(&e);
            assert_eq!(e.policy, "label", "{}", d.message);
            // The CRD cannot be read: strict mode applies (fail closed).
            v.lookup_fails = true;
            let e = evaluate(&gadget_update(true), &c, &v, now());
            assert_eq!(e.policy, "strict", "{e:?}");
            assert!(matches!(e.decision, Decision::Deny(_)), "{e:?}");
        }
    }
}
