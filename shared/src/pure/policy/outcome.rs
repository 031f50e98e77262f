//! What an evaluation produces: the verdict, which protection decided it (typed),
//! the denial, and the findings `kubectl holdfast why` lists.

use crate::{api::common::Enforcement, registry::PolicyKey};
use std::{borrow::Cow, fmt};

/// The kinds of policy object that protect objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// A ResourceProtection.
    ResourceProtection,
    /// A DependencyRule.
    DependencyRule,
    /// A CriticalService.
    CriticalService,
    /// An AnchorRule.
    AnchorRule,
}

impl PolicyKind {
    /// Its kind, as in its manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ResourceProtection => "ResourceProtection",
            Self::DependencyRule => "DependencyRule",
            Self::CriticalService => "CriticalService",
            Self::AnchorRule => "AnchorRule",
        }
    }
}

/// One policy object: its kind, name and logical cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PolicyRef {
    /// Its kind.
    pub kind: PolicyKind,
    /// Its name and logical cluster.
    pub key: PolicyKey,
}

impl PolicyRef {
    /// The policy object `key` of `kind`.
    pub fn new(kind: PolicyKind, key: &PolicyKey) -> Self {
        Self {
            kind,
            key: key.clone(),
        }
    }
}

/// `Kind/name`, or `Kind/name (logical cluster c)` on kcp.
impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.as_str(), self.key.name)?;
        if !self.key.cluster.is_empty() {
            write!(f, " (logical cluster {})", self.key.cluster)?;
        }
        Ok(())
    }
}

/// Which protection or mechanism decided a verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decider {
    /// Nothing concerned the request.
    None,
    /// A protection label (`key`).
    Label {
        /// The label's key.
        key: String,
    },
    /// Strict mode (a protection label removed, a strict selection lost, or an
    /// update that leaves protection in place).
    Strict,
    /// A break-glass marker on the object.
    BreakGlass,
    /// A break-glass marker (or the strict exemption) added by someone allowed to
    /// bypass protection.
    BreakGlassAuthorized,
    /// Someone may not add a break-glass marker (or the exemption) under strict mode.
    BreakGlassRefused,
    /// Policy objects may govern the request and have not loaded.
    NotReady,
    /// The object could not be read.
    Unreadable,
    /// A deferred-deletion request was judged.
    Deferred,
    /// The pod an eviction names could not be read.
    Eviction,
    /// A Namespace or CustomResourceDefinition holds protected objects.
    Containment,
    /// Policy objects in Warn mode (allowed with warnings).
    Warn,
    /// Policy objects in Audit mode (allowed, counted).
    Audit,
    /// A policy object.
    Policy(PolicyRef),
}

impl Decider {
    /// How the webhook's logs name the decider: a fixed name for a
    /// mechanism (`none`, `label`, `strict`, `break-glass`, ...), `Kind/name` for a
    /// policy object (the only case that allocates).
    pub fn metric_label(&self) -> Cow<'static, str> {
        match self {
            Self::Policy(p) => Cow::Owned(p.to_string()),
            other => Cow::Borrowed(other.metric_decider()),
        }
    }

    /// The `decider` label of the webhook's `admission_requests_total`: the
    /// mechanism's name as in [`Self::metric_label`], the kind for a policy object
    /// (its name would make the label unbounded).
    pub fn metric_decider(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Label { .. } => "label",
            Self::Strict => "strict",
            Self::BreakGlass | Self::BreakGlassRefused => "break-glass",
            Self::BreakGlassAuthorized => "break-glass-authorized",
            Self::NotReady => "not-ready",
            Self::Unreadable => "unreadable",
            Self::Deferred => "deferred",
            Self::Eviction => "eviction",
            Self::Containment => "containment",
            Self::Warn => "warn",
            Self::Audit => "audit",
            Self::Policy(p) => p.kind.as_str(),
        }
    }

    /// The policy object, if one decided.
    pub fn policy(&self) -> Option<&PolicyRef> {
        match self {
            Self::Policy(p) => Some(p),
            _ => None,
        }
    }
}

/// As `kubectl holdfast why` names a protection: `label KEY`, `Kind/name`,
/// `containment`...
impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Label { key } => write!(f, "label {key}"),
            Self::Policy(p) => p.fmt(f),
            other => f.write_str(&other.metric_label()),
        }
    }
}

impl serde::Serialize for Decider {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
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

/// A verdict and the protection that produced it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The verdict.
    pub decision: Decision,
    /// Which protection or mechanism decided (see [`Decider::metric_label`]).
    pub decider: Decider,
    /// Denials that policies in Audit mode would have made (allowed, counted, logged).
    pub audits: Vec<String>,
}

impl Evaluation {
    /// Allowed by `decider`.
    pub(crate) fn allow(decider: Decider) -> Self {
        Self {
            decision: Decision::Allow,
            decider,
            audits: Vec::new(),
        }
    }

    /// Denied by `decider`.
    pub(crate) fn deny(
        decider: Decider,
        kind: DenialKind,
        message: String,
        blockers: Vec<String>,
    ) -> Self {
        Self {
            decision: Decision::Deny(Denial {
                message,
                blockers,
                kind,
            }),
            decider,
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

    /// The denial, if denied.
    pub fn denial(&self) -> Option<&Denial> {
        match &self.decision {
            Decision::Deny(d) => Some(d),
            _ => None,
        }
    }
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

/// One protection that concerns a DELETE, whatever its mode: what `explain` lists.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The protection: a label, a policy object or containment (serialized as
    /// `label KEY`, `ResourceProtection/NAME`, ..., `containment`).
    #[serde(rename = "policy")]
    pub decider: Decider,
    /// The policy's mode: `Enforce` refuses, `Warn` and `Audit` allow.
    pub enforcement: Enforcement,
    /// Whether it could not be checked (a lookup failed; refuses under `Enforce`).
    pub lookup_failed: bool,
    /// The message the webhook would give for it.
    pub message: String,
    /// Every blocker, uncapped (the message names at most
    /// [`super::MAX_BLOCKERS_SHOWN`]).
    pub blockers: Vec<String>,
}

impl Finding {
    /// The finding of an enforced denial by `decider`.
    pub(crate) fn enforced(decider: Decider, denial: Denial) -> Self {
        Self {
            decider,
            enforcement: Enforcement::Enforce,
            lookup_failed: denial.kind == DenialKind::LookupFailed,
            message: denial.message,
            blockers: denial.blockers,
        }
    }
}

/// Accumulates what policy objects say about one DELETE: every protection met, in
/// evaluation order. The verdict follows from them ([`Outcome::into_evaluation`]).
#[derive(Default)]
pub(crate) struct Outcome {
    pub(crate) findings: Vec<Finding>,
}

impl Outcome {
    /// `policy` (in mode `enforcement`) protects the object.
    pub(crate) fn record(
        &mut self,
        enforcement: Enforcement,
        policy: PolicyRef,
        message: String,
        blockers: Vec<String>,
    ) {
        self.findings.push(Finding {
            decider: Decider::Policy(policy),
            enforcement,
            lookup_failed: false,
            message,
            blockers,
        });
    }

    /// `policy` (in mode `enforcement`) could not be checked.
    pub(crate) fn lookup_failed(
        &mut self,
        enforcement: Enforcement,
        policy: PolicyRef,
        message: String,
    ) {
        self.findings.push(Finding {
            decider: Decider::Policy(policy),
            enforcement,
            lookup_failed: true,
            message,
            blockers: Vec::new(),
        });
    }

    /// The verdict: the first enforced finding denies; otherwise warnings (a Warn
    /// finding, or an Audit one that could not be checked) allow with warnings;
    /// Audit findings are counted either way.
    pub(crate) fn into_evaluation(self) -> Evaluation {
        let mut denial = None;
        let mut warnings = Vec::new();
        let mut audits = Vec::new();
        for f in self.findings {
            match (f.enforcement, f.lookup_failed) {
                (Enforcement::Enforce, lookup_failed) => {
                    if denial.is_none() {
                        let kind = if lookup_failed {
                            DenialKind::LookupFailed
                        } else {
                            DenialKind::Protected
                        };
                        denial = Some(Evaluation::deny(f.decider, kind, f.message, f.blockers));
                    }
                }
                (Enforcement::Warn, _) | (Enforcement::Audit, true) => warnings.push(f.message),
                (Enforcement::Audit, false) => audits.push(f.message),
            }
        }
        let mut eval = match denial {
            Some(denied) => denied,
            None if !warnings.is_empty() => Evaluation {
                decision: Decision::Warn(warnings),
                decider: Decider::Warn,
                audits: Vec::new(),
            },
            None if audits.is_empty() => Evaluation::allow(Decider::None),
            None => Evaluation::allow(Decider::Audit),
        };
        eval.audits = audits;
        eval
    }
}
