//! `kubectl holdfast`: the pure parts of the plugin (`kubectl-holdfast`).
//!
//! Naming the object (`KIND NAME`, `TYPE/NAME`, `TYPE.group/NAME`) and resolving the
//! type through discovery; the settings the controller publishes; the reports of
//! `why` and `check` and their text rendering. The verdict itself comes from
//! [`holdfast_shared::policy::explain_delete`] over the webhook's own view: the
//! plugin never judges a policy itself.

use holdfast_shared::{
    api::common::Enforcement,
    labels::ProtectionLabels,
    names::{SKIP_ANNOTATION, STRICT_EXEMPT_LABEL},
    policy::{Decider, Decision, Explanation, Finding, PolicyKind},
    review::{AdmissionRequest, Gvk, Gvr, Operation, UserInfo},
    webhookconfig::PublishedSettings,
};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

/// Name of the backstop ValidatingAdmissionPolicy the controller installs.
pub const BACKSTOP_POLICY_NAME: &str = holdfast_shared::backstop::BACKSTOP_NAME;

/// Why the object named on the command line cannot be resolved.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Neither `KIND NAME` nor `TYPE/NAME`.
    #[error("name the object as KIND NAME or TYPE/NAME (got {0:?})")]
    Shape(String),
    /// No resource of that name.
    #[error("the server doesn't have a resource type {0:?}")]
    UnknownType(String),
}

/// One resource the API server serves (from discovery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiResourceInfo {
    /// API group ("" for the core group).
    pub group: String,
    /// The group's preferred version.
    pub version: String,
    /// Lowercase plural, as in the REST path.
    pub resource: String,
    /// Lowercase singular.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names (`ns`, `cm`...).
    pub short_names: Vec<String>,
}

impl ApiResourceInfo {
    /// Core Namespaces, as discovery lists them.
    pub fn namespaces() -> Self {
        Self {
            group: String::new(),
            version: "v1".to_string(),
            resource: "namespaces".to_string(),
            singular: "namespace".to_string(),
            kind: "Namespace".to_string(),
            namespaced: false,
            short_names: Vec::new(),
        }
    }

    /// `apiVersion` of its objects.
    pub fn api_version(&self) -> String {
        holdfast_shared::api::api_version(&self.group, &self.version)
    }
}

/// Splits the command line's object into (type, name): `KIND NAME` or `TYPE/NAME`.
pub fn parse_target(args: &[String]) -> Result<(String, String), TargetError> {
    let bad = || TargetError::Shape(args.join(" "));
    let (ty, name) = match args {
        [one] => one.split_once('/').ok_or_else(bad)?,
        [ty, name] if !ty.contains('/') && !name.contains('/') => (ty.as_str(), name.as_str()),
        _ => return Err(bad()),
    };
    if ty.is_empty() || name.is_empty() {
        return Err(bad());
    }
    Ok((ty.to_string(), name.to_string()))
}

/// Finds the resource `ty` names among `resources` as kubectl does: plural, singular,
/// short name or kind, case-insensitive, optionally qualified by its group
/// (`vpcs.network.example.com`). Where several groups serve the name, the first in
/// discovery order wins (the core group first), unless the group is given.
pub fn resolve<'a>(
    resources: &'a [ApiResourceInfo],
    ty: &str,
) -> Result<&'a ApiResourceInfo, TargetError> {
    let lower = ty.to_ascii_lowercase();
    let matches = |r: &ApiResourceInfo, n: &str| {
        r.resource == n
            || r.singular == n
            || r.kind.to_ascii_lowercase() == n
            || r.short_names.iter().any(|s| s == n)
    };
    if let Some(found) = resources.iter().find(|r| matches(r, &lower)) {
        return Ok(found);
    }
    // TYPE.group (the group may be given in full).
    if let Some((n, group)) = lower.split_once('.')
        && let Some(found) = resources.iter().find(|r| r.group == group && matches(r, n))
    {
        return Ok(found);
    }
    Err(TargetError::UnknownType(ty.to_string()))
}

/// The settings the controller published in the `holdfast.dev/settings` annotation
/// of the configuration `holdfast`: (protection labels, strict).
pub fn parse_settings(annotation: &str) -> Result<(ProtectionLabels, bool), String> {
    let published = PublishedSettings::parse(annotation)?;
    Ok((published.labels()?, published.strict))
}

/// The object a `why` report is about.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apiVersion` of the object.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Resource (`group/resource`, or `resource` in the core group).
    pub resource: String,
    /// Namespace, when namespaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// `kubectl` arguments naming it: `resource name [-n ns]`.
    pub fn kubectl_target(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {} -n {ns}", self.resource, self.name),
            None => format!("{} {}", self.resource, self.name),
        }
    }
}

/// Break-glass, as `why` reports it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BreakGlassReport {
    /// The marker that counts, if one is set (`annotation KEY`, `label KEY`).
    pub active: Option<String>,
    /// A marker present that does not count, and why.
    pub ignored: Option<String>,
    /// Whether the caller may bypass protection (a SelfSubjectAccessReview for verb
    /// `bypass` on `protections.holdfast.dev` in the object's namespace); `None` when
    /// that could not be asked.
    pub caller_may_bypass: Option<bool>,
    /// Why the permission could not be checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bypass_check_error: Option<String>,
}

/// What `kubectl holdfast why` reports (also its `-o json|yaml` document).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WhyReport {
    /// The object.
    pub object: ObjectRef,
    /// The caller, as the API server sees them (SelfSubjectReview).
    pub user: String,
    /// The caller's groups.
    pub groups: Vec<String>,
    /// Whether a DELETE would go through now.
    pub allowed: bool,
    /// The webhook's decision: `allow`, `warn` or `deny`.
    pub decision: String,
    /// Which policy decided (as in the webhook's metrics).
    pub decided_by: String,
    /// The webhook's message (a refusal), or its warnings.
    pub messages: Vec<String>,
    /// Every protection that concerns the object, whatever its mode, each with
    /// every blocker.
    pub protections: Vec<Finding>,
    /// Break-glass markers and the caller's permission to use one.
    pub break_glass: BreakGlassReport,
    /// How the DELETE could go through.
    pub ways_out: Vec<String>,
    /// What the plugin could not establish (settings unread...).
    pub notes: Vec<String>,
}

/// Builds the `why` report from the shared evaluation's explanation.
pub fn why_report(
    object: ObjectRef,
    user: (String, Vec<String>),
    explanation: Explanation,
    caller_may_bypass: Result<bool, String>,
    strict: bool,
    notes: Vec<String>,
) -> WhyReport {
    let eval = &explanation.evaluation;
    let allowed = !matches!(eval.decision, Decision::Deny(_));
    let messages = match &eval.decision {
        Decision::Allow => Vec::new(),
        Decision::Warn(w) => w.clone(),
        Decision::Deny(d) => vec![d.message.clone()],
    };
    let (may, err) = match caller_may_bypass {
        Ok(m) => (Some(m), None),
        Err(e) => (None, Some(e)),
    };
    let break_glass = BreakGlassReport {
        active: explanation.break_glass.active.clone(),
        ignored: explanation.break_glass.ignored.clone(),
        caller_may_bypass: may,
        bypass_check_error: err,
    };
    let ways_out = if allowed && explanation.findings.iter().all(|f| !blocks(f)) {
        Vec::new()
    } else {
        ways_out(&object, &explanation.findings, &break_glass, strict)
    };
    WhyReport {
        decision: eval.decision_label().to_string(),
        decided_by: eval.decider.metric_label().into_owned(),
        object,
        user: user.0,
        groups: user.1,
        allowed,
        messages,
        protections: explanation.findings,
        break_glass,
        ways_out,
        notes,
    }
}

fn blocks(f: &Finding) -> bool {
    f.enforcement == Enforcement::Enforce
}

fn ways_out(
    object: &ObjectRef,
    findings: &[Finding],
    bg: &BreakGlassReport,
    strict: bool,
) -> Vec<String> {
    let target = object.kubectl_target();
    let mut out = Vec::new();
    for f in findings.iter().filter(|f| blocks(f)) {
        let way = match &f.decider {
            _ if f.lookup_failed => format!("{}: could not be checked; retry later", f.decider),
            Decider::Label { key } if strict => format!(
                "strict mode: mark it exempt first (kubectl label {target} \
                 {STRICT_EXEMPT_LABEL}=true, which takes the bypass permission), then remove \
                 the label: kubectl label {target} {key}-"
            ),
            Decider::Label { key } => format!("remove the label: kubectl label {target} {key}-"),
            Decider::Policy(p) if p.kind == PolicyKind::ResourceProtection => format!(
                "remove the object from the policy: kubectl edit resourceprotection {}",
                p.key.name
            ),
            Decider::Policy(p) if p.kind == PolicyKind::DependencyRule => format!(
                "delete or change its {} dependent(s) first ({p})",
                f.blockers.len()
            ),
            Decider::Containment => format!(
                "lift the protection of (or delete) the {} protected object(s) it contains",
                f.blockers.len()
            ),
            other => format!("satisfy {other}: {}", f.message),
        };
        if !out.contains(&way) {
            out.push(way);
        }
    }
    match bg.caller_may_bypass {
        Some(true) => out.push(format!(
            "break glass (you may): kubectl annotate {target} {SKIP_ANNOTATION}=true"
        )),
        Some(false) => out.push(format!(
            "break glass: ask someone allowed to bypass protection (verb bypass on \
             protections.holdfast.dev) to set {SKIP_ANNOTATION}=true; you may not"
        )),
        None => out.push(format!(
            "break glass: {SKIP_ANNOTATION}=true, if you are allowed to bypass protection"
        )),
    }
    out
}

/// Renders a `why` report for a terminal.
pub fn render_why(r: &WhyReport) -> String {
    let mut s = String::new();
    let o = &r.object;
    let what = match &o.namespace {
        Some(ns) => format!("{} {ns}/{}", o.kind, o.name),
        None => format!("{} {}", o.kind, o.name),
    };
    let verdict = if r.allowed {
        "would be ALLOWED"
    } else {
        "would be REFUSED"
    };
    let _ = writeln!(
        s,
        "{what}: DELETE {verdict} (decided by: {}) for user {}",
        r.decided_by, r.user
    );
    if r.protections.is_empty() {
        let _ = writeln!(s, "Protections: none");
    } else {
        let _ = writeln!(s, "Protections:");
        for f in &r.protections {
            let state = if f.lookup_failed {
                ", could not be checked"
            } else {
                ""
            };
            let _ = writeln!(
                s,
                "  - {} (mode {}{state})",
                f.decider,
                f.enforcement.as_str()
            );
            if !f.blockers.is_empty() {
                let _ = writeln!(s, "    blockers ({}):", f.blockers.len());
                for b in &f.blockers {
                    let _ = writeln!(s, "      {b}");
                }
            }
        }
    }
    let bg = &r.break_glass;
    let marker = match (&bg.active, &bg.ignored) {
        (Some(a), _) => format!("set ({a})"),
        (None, Some(i)) => format!("not in force ({i})"),
        (None, None) => "not set".to_string(),
    };
    let may = match (bg.caller_may_bypass, &bg.bypass_check_error) {
        (Some(true), _) => "you may bypass protection".to_string(),
        (Some(false), _) => "you may not bypass protection".to_string(),
        (None, Some(e)) => format!("your bypass permission could not be checked: {e}"),
        (None, None) => "your bypass permission is unknown".to_string(),
    };
    let _ = writeln!(s, "Break-glass: {marker}; {may}");
    if !r.ways_out.is_empty() {
        let _ = writeln!(s, "Ways out:");
        for w in &r.ways_out {
            let _ = writeln!(s, "  - {w}");
        }
    }
    for m in &r.messages {
        let _ = writeln!(s, "Webhook message: {m}");
    }
    for n in &r.notes {
        let _ = writeln!(s, "Note: {n}");
    }
    s
}

/// One finding of `check`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CheckFinding {
    /// `error` (makes `check` fail) or `warning`.
    pub severity: String,
    /// What kind: `WebhookConfigurationMissing`, `WebhookNotReady`, `FailurePolicyIgnore`,
    /// `PolicyNotRouted`, `PolicyNotReady`, `NotAdmissionControlled`, `ConfigurationRefused`,
    /// `CrdUnprotected`, `NamespaceUnprotected`, `BackstopMissing`, `ReadFailed`.
    pub kind: String,
    /// The object concerned.
    pub subject: String,
    /// What was found.
    pub message: String,
}

/// What `kubectl holdfast check` reports (also its `-o json|yaml` document).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// Whether the configuration `holdfast` exists.
    pub webhook_configuration: bool,
    /// `name: failurePolicy` of each of its webhooks.
    pub failure_policies: Vec<String>,
    /// Whether the backstop ValidatingAdmissionPolicy exists.
    pub backstop: bool,
    /// Every finding.
    pub findings: Vec<CheckFinding>,
}

impl CheckReport {
    /// Records a finding.
    pub fn add(&mut self, severity: &str, kind: &str, subject: &str, message: String) {
        self.findings.push(CheckFinding {
            severity: severity.to_string(),
            kind: kind.to_string(),
            subject: subject.to_string(),
            message,
        });
    }

    /// Whether some finding is an error.
    pub fn failed(&self) -> bool {
        self.findings.iter().any(|f| f.severity == "error")
    }
}

/// Renders a `check` report for a terminal.
pub fn render_check(r: &CheckReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Webhook configuration holdfast: {}",
        if r.webhook_configuration {
            "present"
        } else {
            "MISSING"
        }
    );
    for f in &r.failure_policies {
        let _ = writeln!(s, "  failurePolicy {f}");
    }
    let _ = writeln!(
        s,
        "Backstop ValidatingAdmissionPolicy {BACKSTOP_POLICY_NAME}: {}",
        if r.backstop { "present" } else { "absent" }
    );
    if r.findings.is_empty() {
        let _ = writeln!(s, "No findings.");
    }
    for f in &r.findings {
        let _ = writeln!(s, "{}: {} {}: {}", f.severity, f.kind, f.subject, f.message);
    }
    s
}

/// Whether the configuration's webhooks (`webhooks` of a ValidatingWebhookConfiguration
/// as JSON) route DELETEs of `group`/`resource` to some webhook.
pub fn routes_delete(configuration: &Value, group: &str, resource: &str) -> bool {
    let covers = |list: &Value, want: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v == "*" || v == want))
    };
    configuration["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|w| w["rules"].as_array().into_iter().flatten())
        .any(|r| {
            (covers(&r["operations"], "DELETE"))
                && covers(&r["apiGroups"], group)
                && (covers(&r["resources"], resource)
                    || r["resources"]
                        .as_array()
                        .is_some_and(|l| l.iter().any(|v| v == "*/*")))
        })
}

/// Why a policy object is not Ready, from its `Ready` condition: (reason, message).
/// `None` when it is Ready; a policy without a Ready condition yet is reported as such.
pub fn not_ready(policy: &Value) -> Option<(String, String)> {
    let ready = policy["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    match ready {
        None => Some((
            "NoStatus".to_string(),
            "no Ready condition yet (is the controller running?)".to_string(),
        )),
        Some(r) if r["status"] == "True" => None,
        Some(r) => Some((
            r["reason"].as_str().unwrap_or("Unknown").to_string(),
            r["message"].as_str().unwrap_or_default().to_string(),
        )),
    }
}

/// The DELETE review the API server would send for `object` (of `res`) by `user`:
/// the live object as `oldObject`; a Namespace is its own namespace.
pub fn delete_review(res: &ApiResourceInfo, object: Value, user: UserInfo) -> AdmissionRequest {
    let name = object["metadata"]["name"].as_str().map(str::to_string);
    let namespace = if res.group.is_empty() && res.resource == "namespaces" {
        name.clone()
    } else {
        object["metadata"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    };
    AdmissionRequest {
        uid: "kubectl-holdfast".to_string(),
        kind: Gvk {
            group: res.group.clone(),
            version: res.version.clone(),
            kind: res.kind.clone(),
        },
        resource: Gvr {
            group: res.group.clone(),
            version: res.version.clone(),
            resource: res.resource.clone(),
        },
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name,
        namespace,
        operation: Operation::Delete,
        user_info: user,
        object: None,
        old_object: Some(object),
        dry_run: Some(false),
        options: None,
        via_export: None,
    }
}

#[cfg(test)]
#[path = "explain_tests.rs"]
mod tests;
