//! Every refusal, warning and note the policy evaluation writes, in one place.
//!
//! The texts are part of the contract (users read them; tests and captures compare
//! them byte for byte): change one only on purpose. Each function takes the pieces
//! its text names and nothing else.

use super::MAX_BLOCKERS_SHOWN;
use crate::names::{ALLOW_DELETION_LABEL, MESSAGE_PREFIX, SKIP_ANNOTATION, STRICT_EXEMPT_LABEL};

/// The tail of most refusals: how someone allowed to may break glass.
pub const BYPASS_HINT: &str = "or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection";

/// The sentence a policy's refusal of a DELETE ends with: the deferred option.
pub const DEFERRED_HINT: &str = "To have holdfast delete it once nothing blocks it, \
     ask for deferred deletion (holdfast.dev/delete-when-unblocked).";

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

// --- Requests holdfast cannot judge -------------------------------------------------

/// Why a DELETE on kcp of an object without `kcp.io/cluster` is not evaluated.
pub const NO_LOGICAL_CLUSTER: &str = "the object carries no kcp.io/cluster annotation, so its \
     workspace (and every protection that applies there) is unknown";

/// A review sent through the webhook route of workspace `route` (kcp) whose object
/// is of workspace `object` ("" when it carries no `kcp.io/cluster` annotation).
pub fn foreign_workspace(op: &str, what: &str, route: &str, object: &str) -> String {
    let of = if object.is_empty() {
        "carries no kcp.io/cluster annotation".to_string()
    } else {
        format!("is of workspace {object}")
    };
    format!(
        "{MESSAGE_PREFIX} refused {op} of {what}: it came through the webhook route of \
         workspace {route}, but the object {of}; a workspace's webhook configuration \
         answers for that workspace's objects only (check the clientConfig.url of the \
         configuration that sent it)"
    )
}

/// The object of `op` on `what` cannot be read.
pub fn unreadable(op: &str, what: &str, why: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot evaluate {op} of {what}: {why}; refusing rather than risk \
         removing a protected object. Retry the request; if it keeps failing, check the \
         object with kubectl get -o yaml."
    )
}

/// The rules that may protect `what` have not loaded.
pub fn not_ready(what: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} not ready yet, retry later: the rules that may protect {what} \
         have not finished loading."
    )
}

// --- Break-glass ------------------------------------------------------------------

/// Why a skip annotation does not count, as a note inside a refusal.
pub fn skip_note(problem: &super::SkipProblem) -> String {
    use super::SkipProblem;
    match problem {
        SkipProblem::Expired(v) => format!(" (break-glass {v} has expired)"),
        SkipProblem::BadValue(v) => {
            format!(" (break-glass {v} is ignored: use \"true\" or an RFC 3339 time)")
        }
        SkipProblem::TooFar(v, max) => format!(
            " (break-glass {v} is ignored: it lies more than {} ahead, the longest \
             break-glass window this installation allows)",
            human_duration(*max)
        ),
    }
}

/// Why a skip annotation does not count, as `kubectl holdfast why` reports it.
pub fn skip_ignored(problem: &super::SkipProblem) -> String {
    use super::SkipProblem;
    match problem {
        SkipProblem::Expired(v) => format!("{v} has expired"),
        SkipProblem::BadValue(v) => format!("{v} is neither \"true\" nor an RFC 3339 time"),
        SkipProblem::TooFar(v, max) => format!(
            "{v} lies more than {} ahead, the longest break-glass window allowed",
            human_duration(*max)
        ),
    }
}

// --- Label protection -------------------------------------------------------------

/// A `Cascading` label on a webhook that cannot tell live contents.
pub const LABEL_CASCADING_UNJUDGED: &str = " (this webhook does not watch live contents, so \
     Cascading protects like Always here)";

/// A `Cascading` label on an object without live contents holdfast can tell.
pub fn label_cascading_no_contents(what: &str) -> String {
    format!(
        " ({what} has no live contents holdfast can tell, so Cascading protects it like \
         Always)"
    )
}

/// A `Cascading` label whose live contents cannot be told.
pub fn label_live_unknown(what: &str, key: &str, value: &str, why: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} is protected by label {key}={value} (policy: label {key}) \
         while it has live contents, and {why}. Refusing rather than risk deleting them; \
         retry later, {BYPASS_HINT}."
    )
}

/// What a `Cascading` label's refusal says about the live contents.
pub struct Alive<'a> {
    /// "while it holds live pods or claims"...
    pub condition: &'a str,
    /// "3 pods still run"...
    pub still: &'a str,
    /// How to drain it.
    pub drain: &'a str,
}

/// A `Cascading` label with live contents.
pub fn label_alive(
    what: &str,
    (key, value): (&str, &str),
    alive: Alive<'_>,
    skip_note: &str,
    unprotect: &str,
) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} is protected by label {key}={value} (policy: label \
         {key}) {}, and {}, so it cannot be deleted{skip_note}. \
         To delete it, first {}; or {unprotect}, or set the annotation \
         {SKIP_ANNOTATION}=true if you are allowed to bypass protection.",
        alive.condition, alive.still, alive.drain
    )
}

/// A protection label with a protecting value.
pub fn label_protected(
    what: &str,
    (key, value): (&str, &str),
    note: &str,
    skip_note: &str,
    unprotect: &str,
) -> String {
    // Every denial by a label builds this text: joined in one allocation of the
    // exact size rather than formatted (see docs/performance.md, instruction counts).
    concat(&[
        MESSAGE_PREFIX,
        " ",
        what,
        " is protected by label ",
        key,
        "=",
        value,
        " (policy: label ",
        key,
        "), so it cannot be deleted",
        note,
        skip_note,
        ". To delete it, ",
        unprotect,
        ", or set the annotation ",
        SKIP_ANNOTATION,
        "=true if you are allowed to bypass protection.",
    ])
}

/// `parts` joined in one allocation of the exact size, for the messages every denial
/// builds (no formatting machinery, no buffer growth).
pub fn concat(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.push_str(part);
    }
    out
}

/// How to lift a label's protection: remove it (after the exemption under strict mode).
pub fn unprotect_hint(strict: bool, target: &str, key: &str) -> String {
    if strict {
        concat(&[
            "first mark it exempt in its own update, as strict mode is on (kubectl label ",
            target,
            " ",
            STRICT_EXEMPT_LABEL,
            "=true, which takes the bypass permission), then remove the label (kubectl label ",
            target,
            " ",
            key,
            "-)",
        ])
    } else {
        concat(&["remove the label (kubectl label ", target, " ", key, "-)"])
    }
}

/// A protection label whose value looks protecting but is not.
pub fn look_alike(key: &str, value: &str, what: &str, protecting: &[String]) -> String {
    format!(
        "{MESSAGE_PREFIX} label {key}={value:?} on {what} does not protect it: the value must \
         be exactly {} (case-sensitive, no spaces).",
        protecting
            .iter()
            .map(|x| format!("{x:?}"))
            .collect::<Vec<_>>()
            .join(" or "),
    )
}

// --- Strict mode ------------------------------------------------------------------

/// The tail of a strict refusal when the update itself adds the exemption.
pub const SAME_UPDATE: &str =
    " Adding the exemption in the same update does not count: it must already be stored.";

/// A protection label removed or downgraded under strict mode.
pub fn strict_label_removed(
    what: &str,
    labels: &str,
    key: &str,
    same_update: &str,
    target: &str,
) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} carries the protection {labels} and strict mode is on (policy: \
         strict label {key}), so the label cannot be removed or changed to a value that does \
         not protect.{same_update} To unprotect it, first mark it exempt in its own update \
         (kubectl label {target} {STRICT_EXEMPT_LABEL}=true, which takes the bypass \
         permission on protections.holdfast.dev), then remove the label."
    )
}

/// Labels changed so that a strict ResourceProtection `rp` no longer selects the object.
pub fn strict_selection_lost(what: &str, rp: &str, same_update: &str, target: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} is protected by {rp} in strict mode, and this update changes \
         its labels so that the policy would no longer select it.{same_update} To unprotect \
         it, first mark it exempt in its own update (kubectl label {target} \
         {STRICT_EXEMPT_LABEL}=true, which takes the bypass permission on \
         protections.holdfast.dev), or change the policy."
    )
}

/// `user` may not add break-glass markers (`added`) under strict mode.
pub fn break_glass_not_permitted(user: &str, added: &str, what: &str, scope: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} {user} may not add {added} to {what}: it is protected in strict mode, \
         and lifting that protection needs the permission to bypass it (verb bypass on \
         protections.holdfast.dev{scope}). Ask someone who holds it."
    )
}

/// The bypass permission of `user` could not be checked.
pub fn break_glass_unverified(user: &str, added: &str, what: &str, e: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot check whether {user} may add {added} to {what}: {e}. Refusing \
         rather than let protection be lifted unchecked; retry later."
    )
}

// --- Deferred deletion and eviction -----------------------------------------------

/// An incomplete deferred-deletion request.
pub fn deferred_incomplete(what: &str, problem: &str, target: &str, patch: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot accept the deferred deletion request on {what}: \
         {problem}. Set all three in one request, then confirm it with the signature \
         holdfast answers: kubectl patch {target} --type merge -p \
         '{patch}'"
    )
}

/// The requester of a deferred deletion may not delete the object as holdfast will.
pub fn deferred_not_permitted(user: &str, what: &str, resource: &str, scope: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} user {user:?} may not ask for the deferred deletion of {what}: \
         that takes the permission to delete it (verb delete on {resource}{scope}), which \
         {user:?} does not hold as holdfast will use it: it deletes the object later \
         by impersonating the user name alone, without the groups of this request."
    )
}

/// The delete permission of the requester could not be checked.
pub fn deferred_unverified(user: &str, what: &str, e: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot check whether user {user:?} may delete {what}: {e}. \
         Refusing rather than accept the deferred deletion request unchecked; retry \
         later."
    )
}

/// A deferred-deletion request on a kind the API server never sends to webhooks.
pub fn deferred_never_reviewed(what: &str, resource: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot accept the deferred deletion request on {what}: the API \
         server never sends requests on {resource} to admission webhooks, so no request \
         on one can be checked; delete it yourself."
    )
}

/// The first step of a deferred-deletion request: the signature to set with it.
pub fn deferred_sign(what: &str, why: &str, sig: &str, target: &str, patch: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} to confirm the deferred deletion request on {what}, set the \
         annotation {} to {sig:?} in the same request ({why}; the signature is valid for \
         10 minutes): kubectl patch {target} --type merge -p '{patch}'",
        crate::names::DELETE_REQUEST_SIGNATURE
    )
}

/// A deferred-deletion request on an object that has no uid yet (a CREATE).
pub fn deferred_no_uid(what: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot accept the deferred deletion request on {what} as it is \
         created: the request is signed for the object's uid, which it has only once \
         created; create it, then ask for deferred deletion with an update."
    )
}

/// The key that signs deferred-deletion requests could not be read.
pub fn deferred_no_key(what: &str, e: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot sign the deferred deletion request on {what}: {e}. \
         Retry later."
    )
}

/// The pod an eviction names could not be read.
pub fn eviction_unverified(namespace: &str, name: &str, e: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot read Pod {namespace}/{name} to judge its eviction: {e}. \
         Refusing rather than risk evicting a protected pod; retry later."
    )
}

/// An eviction refused as the pod's DELETE was (`refusal`, the DELETE's message).
pub fn eviction_refused(refusal: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} eviction refused: {}",
        refusal
            .strip_prefix(MESSAGE_PREFIX)
            .unwrap_or(refusal)
            .trim_start()
    )
}

// --- ResourceProtection -----------------------------------------------------------

/// What a selector of a ResourceProtection selects, for its refusal.
pub fn selection_scope(
    gr: &dyn std::fmt::Display,
    wildcard_group: Option<&str>,
    namespace: Option<&str>,
    names: Option<&[String]>,
    by_labels: bool,
) -> String {
    let mut scope = match wildcard_group {
        None => format!("{gr}"),
        Some("*") => format!("every resource, {gr} among them"),
        Some("") => format!("every resource of the core group, {gr} among them"),
        Some(g) => format!("every resource of group {g}, {gr} among them"),
    };
    if let Some(ns) = namespace {
        scope.push_str(&format!(" in namespace {ns}"));
    }
    if let Some(names) = names {
        scope.push_str(&format!(" named {}", names.join(", ")));
    }
    if by_labels {
        scope.push_str(" matching its label selector");
    }
    scope
}

/// Mode `Cascading` on a webhook that cannot tell live contents.
pub const PROTECTION_CASCADING_UNJUDGED: &str = " (this webhook does not watch live \
     contents, so mode Cascading protects like Always here)";

/// Mode `Cascading` on an object without live contents holdfast can tell.
pub const PROTECTION_CASCADING_NO_CONTENTS: &str = " (it has no live contents holdfast can \
     tell, so mode Cascading protects it like Always)";

/// A ResourceProtection in mode `Cascading` with live contents.
pub fn protection_alive(
    what: &str,
    policy: &str,
    scope: &str,
    alive: Alive<'_>,
    name: &str,
) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} is protected by {policy} (selects {scope}, \
         mode Cascading) {}, and {}, so it cannot be deleted. \
         To delete it, first {}; or remove it from the policy \
         (kubectl edit resourceprotection {name}), {BYPASS_HINT}.",
        alive.condition, alive.still, alive.drain
    )
}

/// A ResourceProtection in mode `Cascading` whose live contents cannot be told.
pub fn protection_live_unknown(what: &str, policy: &str, scope: &str, why: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} is protected by {policy} (selects {scope}, \
         mode Cascading) while it has live contents, and {why}. Refusing \
         rather than risk deleting them; retry later, {BYPASS_HINT}."
    )
}

/// A ResourceProtection selects the object.
pub fn protection_protected(
    what: &str,
    policy: &str,
    scope: &str,
    note: &str,
    name: &str,
) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} is protected by {policy} (selects {scope}){note}, so it \
         cannot be deleted. To delete it, remove it from the policy (kubectl edit \
         resourceprotection {name}), {BYPASS_HINT}."
    )
}

// --- DependencyRule ---------------------------------------------------------------

/// Dependents still reference the object (`dependents`: the capped list).
pub fn still_referenced(
    what: &str,
    dependents: &str,
    policy: &str,
    path: &dyn std::fmt::Display,
    dependent: &dyn std::fmt::Display,
) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} is still referenced by {dependents} (policy: {policy}, \
         field {path} of {dependent}), so it cannot be deleted. To delete it, delete or \
         change the dependents first, {BYPASS_HINT}."
    )
}

/// Dependents could not be looked up.
pub fn dependents_unverified(
    what: &str,
    policy: &str,
    dependent: &dyn std::fmt::Display,
    path: &dyn std::fmt::Display,
    e: &str,
) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot verify dependents of {what} (policy: {policy}, \
         {dependent} referencing it at {path}): {e}. Refusing rather than risk breaking them; \
         retry later, {BYPASS_HINT}."
    )
}

// --- CriticalService --------------------------------------------------------------

/// The CriticalService itself while its provider exists.
pub fn critical_provider_exists(what: &str, provider: &str, policy: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} {what} cannot be deleted while its provider {provider} \
         exists (policy: {policy}). To delete it, delete the provider first; \
         this CriticalService keeps it from going before its criteria are met, \
         {BYPASS_HINT}."
    )
}

/// Whether `object` exists could not be told.
pub fn critical_existence_unverified(object: &str, policy: &str, e: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot verify whether {object} exists (policy: {policy}): {e}; retry later, {BYPASS_HINT}."
    )
}

/// Objects carrying a finalizer could not be counted.
pub fn critical_finalizers_uncounted(
    resource: &dyn std::fmt::Display,
    finalizer: &str,
    policy: &str,
    e: &str,
) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot count {resource} carrying finalizer {finalizer} (policy: {policy}): {e}; retry later, {BYPASS_HINT}."
    )
}

/// A criterion still unmet: `n` objects of `resource` carry `finalizer`.
pub fn finalizers_remain(n: usize, resource: &dyn std::fmt::Display, finalizer: &str) -> String {
    format!(
        "{n} {resource} still {} finalizer {finalizer}",
        if n == 1 { "carries" } else { "carry" }
    )
}

/// A criterion still unmet: `object` exists.
pub fn still_exists(object: &str) -> String {
    format!("{object} still exists")
}

/// The provider (or its namespace) while criteria remain (`remaining`: the capped list).
pub fn critical_remaining(
    what: &str,
    is_provider: bool,
    provider: &str,
    policy: &str,
    remaining: &str,
) -> String {
    let role = if is_provider {
        "provides a critical service".to_string()
    } else {
        format!("holds {provider}, which provides a critical service")
    };
    format!(
        "{MESSAGE_PREFIX} {what} {role} (policy: {policy}) and cannot be deleted while {remaining}. \
         To delete it, wait until those are gone (the service finalizes them), {BYPASS_HINT}."
    )
}

// --- AnchorRule -------------------------------------------------------------------

/// The namespace that names the anchor could not be read.
pub fn anchor_namespace_unread(namespace: &str, what: &str, policy: &str, e: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot read Namespace {namespace} to find the anchor of {what} (policy: {policy}): {e}; retry later, {BYPASS_HINT}."
    )
}

/// The object is protected while its anchor exists.
pub fn anchor_protected(
    what: &str,
    anchor: &str,
    source: Option<&dyn std::fmt::Display>,
    toggle: Option<&dyn std::fmt::Display>,
    policy: &str,
) -> String {
    let toggle_on = toggle
        .map(|p| format!(" and has {p}=true"))
        .unwrap_or_default();
    let off = toggle
        .map(|p| format!("set {p} to false on {anchor}, "))
        .unwrap_or_default();
    let place = source
        .map(|s| format!(" in the cluster of anchor source {s}"))
        .unwrap_or_default();
    format!(
        "{MESSAGE_PREFIX} {what} is protected while its anchor {anchor} exists{place}{toggle_on} \
         (policy: {policy}), so it cannot be deleted. To delete it, {off}delete the \
         anchor, or label this object {ALLOW_DELETION_LABEL}=true."
    )
}

/// The anchor could not be read.
pub fn anchor_unread(anchor: &str, what: &str, policy: &str, e: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} cannot read the anchor {anchor} of {what} (policy: {policy}): {e}; refusing rather than risk it, retry later, {BYPASS_HINT}."
    )
}

// --- Containment ------------------------------------------------------------------

/// A container whose DELETE takes what it holds with it.
#[derive(Clone, Copy, Debug)]
pub enum Container<'a> {
    /// The Namespace of this name (it holds objects).
    Namespace(&'a str),
    /// The CustomResourceDefinition of this name (it has instances).
    Crd(&'a str),
    /// The kcp Workspace of this path (deleting it deletes everything in it and
    /// below it).
    Workspace(&'a str),
    /// The kcp APIBinding of this name (deleting it deletes every object of the
    /// types it binds).
    ApiBinding(&'a str),
}

/// Removing or changing the containment marker of Namespace `name`, which holds the
/// protected objects `protected` (the capped list).
pub fn containment_marker_kept(name: &str, marker: &str, protected: &str) -> String {
    format!(
        "{MESSAGE_PREFIX} Namespace {name} holds objects that are protected from deletion: \
         {protected} (policy: containment), so its label {marker} cannot be removed or \
         changed: it routes the namespace's DELETE to holdfast. holdfast-controller removes \
         it once nothing protected is left; lift the protection of those objects (or delete \
         them) first."
    )
}

impl Container<'_> {
    /// Its contents could not be read.
    pub fn unverified(self, e: &str) -> String {
        let (unverified, risk) = match self {
            Self::Namespace(n) => (
                format!("what Namespace {n} holds"),
                "a half-deleted namespace",
            ),
            Self::Crd(n) => (
                format!("what instances CustomResourceDefinition {n} has"),
                "deleting protected objects with it",
            ),
            Self::Workspace(p) => (
                format!("what Workspace {p} holds"),
                "deleting protected objects with it",
            ),
            Self::ApiBinding(n) => (
                format!("what objects of the types APIBinding {n} binds exist"),
                "deleting protected objects with it",
            ),
        };
        format!(
            "{MESSAGE_PREFIX} cannot verify {unverified}: {e}. Refusing rather than \
             risk {risk}; retry later, {BYPASS_HINT}."
        )
    }

    /// It holds protected objects (`protected`: the capped list).
    pub fn protected(self, protected: &str) -> String {
        let (what, holds, consequence, bypass_on) = match self {
            Self::Namespace(n) => (
                format!("Namespace {n}"),
                "holds objects",
                "that would leave it half-deleted",
                "namespace",
            ),
            Self::Crd(n) => (
                format!("CustomResourceDefinition {n}"),
                "has instances",
                "that would delete them all, unchecked",
                "CustomResourceDefinition",
            ),
            Self::Workspace(p) => (
                format!("Workspace {p}"),
                "holds objects",
                "that would delete them all, unchecked",
                "Workspace",
            ),
            Self::ApiBinding(n) => (
                format!("APIBinding {n}"),
                "binds the types of objects",
                "unbinding deletes every object of those types",
                "APIBinding",
            ),
        };
        let way = match self {
            Self::Workspace(_) => "first lift the protection of those objects (or delete them, \
                 or set the annotation holdfast.dev/skip-protection=true on each if you are \
                 allowed to bypass protection): kcp deletes a workspace's contents past \
                 holdfast, so the annotation on the Workspace itself is not honoured while it \
                 holds protected objects"
                .to_string(),
            _ => format!(
                "first lift the protection of those objects (or delete them), {BYPASS_HINT} on \
                 the {bypass_on}"
            ),
        };
        format!(
            "{MESSAGE_PREFIX} {what} {holds} that are protected from deletion: {protected} \
             (policy: containment), so it cannot be deleted: {consequence}. To delete it, {way}."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_denial_reads_as_it_did_when_it_was_formatted() {
        let unprotect = unprotect_hint(false, "configmaps cm -n team", "capture/deny");
        assert_eq!(
            unprotect,
            "remove the label (kubectl label configmaps cm -n team capture/deny-)"
        );
        assert_eq!(
            label_protected(
                "ConfigMap team/cm",
                ("capture/deny", "true"),
                " (note)",
                " (skip note)",
                &unprotect
            ),
            "holdfast: ConfigMap team/cm is protected by label capture/deny=true (policy: \
             label capture/deny), so it cannot be deleted (note) (skip note). To delete it, \
             remove the label (kubectl label configmaps cm -n team capture/deny-), or set the \
             annotation holdfast.dev/skip-protection=true if you are allowed to bypass \
             protection."
        );
        assert_eq!(
            unprotect_hint(true, "widgets.example.io w", "holdfast.dev/protected"),
            "first mark it exempt in its own update, as strict mode is on (kubectl label \
             widgets.example.io w holdfast.dev/strict-exempt=true, which takes the bypass \
             permission), then remove the label (kubectl label widgets.example.io w \
             holdfast.dev/protected-)"
        );
        assert_eq!(concat(&[]), "");
    }
}
