//! kcp: ResourceProtections, AnchorRules and CriticalServices in every workspace.
//!
//! A workspace "binds holdfast" when one of its APIBindings references holdfast's
//! APIExport in the holdfast workspace and accepts the claim on validating webhook
//! configurations. Such a workspace gets the configuration `holdfast`
//! ([`workspace_configuration`]) for its own types: label protection, containment
//! and what its own policies need. A type a workspace gets from another APIExport
//! is admitted by kcp only through the export workspace's configurations
//! (kcp-facts 12): its DELETEs are routed by the `<export>.policies.holdfast.dev`
//! webhook of that workspace, which needs that workspace to bind holdfast too;
//! where it does not, the policy says so in its status
//! ([`EXPORT_WORKSPACE_NOT_BOUND`]).
//!
//! Everything here is pure: the APIBindings and policy objects come from the
//! watches (no API read per pass), the result is recomputed from scratch.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
};

use holdfast_shared::{
    api::{AnchorRule, CriticalService, GroupResource, ResourceProtection},
    names::API_GROUP,
    webhookconfig::{
        PolicyNeeds, WorkspaceTarget, anchor_rule_needs, critical_service_needs,
        export_policies_webhook, is_policies_webhook, resource_protection_needs, routes,
        well_known_scope,
    },
};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ApiResource, DynamicObject};
use serde_json::Value;

use crate::{
    kcp::enforcement::{Enforced, not_enforced_message},
    kubernetes::decode,
    policies::{
        ApiIndex, Invalid, check_anchor_rule, check_critical_service, check_resource_protection,
        reasons,
    },
    status::{Outcome, not_routed_message, routed_message},
};

/// Reason of Installed and Ready when a policy names a type its workspace gets from
/// an APIExport whose workspace does not bind holdfast.
pub const EXPORT_WORKSPACE_NOT_BOUND: &str = "ExportWorkspaceNotBound";
/// Reason of Installed and Ready when the policy's own workspace binds holdfast
/// without accepting the claim on validating webhook configurations.
pub const WEBHOOK_CLAIM_NOT_ACCEPTED: &str = "WebhookClaimNotAccepted";

/// The claim holdfast needs accepted to install a workspace's configuration.
const WEBHOOK_CLAIM: (&str, &str) = (
    "admissionregistration.k8s.io",
    "validatingwebhookconfigurations",
);

/// The kinds this module handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// ResourceProtections.
    ResourceProtection,
    /// AnchorRules.
    AnchorRule,
    /// CriticalServices (they also guard themselves through the holdfast
    /// workspace's configuration).
    CriticalService,
}

impl Kind {
    /// Every kind, in the order of [`PerKind::iter`] (the order a plan lists the
    /// policies in).
    pub const ALL: [Kind; 3] = [
        Kind::ResourceProtection,
        Kind::AnchorRule,
        Kind::CriticalService,
    ];

    /// Its resource, for untyped watches and writes.
    pub fn api_resource(self) -> ApiResource {
        match self {
            Kind::ResourceProtection => ApiResource::erase::<ResourceProtection>(&()),
            Kind::AnchorRule => ApiResource::erase::<AnchorRule>(&()),
            Kind::CriticalService => ApiResource::erase::<CriticalService>(&()),
        }
    }
}

/// One value per [`Kind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerKind<T> {
    /// The ResourceProtections'.
    pub resource_protections: T,
    /// The AnchorRules'.
    pub anchor_rules: T,
    /// The CriticalServices'.
    pub critical_services: T,
}

impl<T> PerKind<T> {
    /// `f` of every kind.
    pub fn from_fn(mut f: impl FnMut(Kind) -> T) -> Self {
        Self {
            resource_protections: f(Kind::ResourceProtection),
            anchor_rules: f(Kind::AnchorRule),
            critical_services: f(Kind::CriticalService),
        }
    }

    /// The value of `kind`.
    pub fn get(&self, kind: Kind) -> &T {
        match kind {
            Kind::ResourceProtection => &self.resource_protections,
            Kind::AnchorRule => &self.anchor_rules,
            Kind::CriticalService => &self.critical_services,
        }
    }

    /// Every kind and its value, in the order of [`Kind::ALL`].
    pub fn iter(&self) -> impl Iterator<Item = (Kind, &T)> {
        Kind::ALL.into_iter().map(|kind| (kind, self.get(kind)))
    }

    /// `f` of every kind and its value.
    pub fn map<U>(&self, mut f: impl FnMut(Kind, &T) -> U) -> PerKind<U> {
        PerKind::from_fn(|kind| f(kind, self.get(kind)))
    }

    /// `f` of every kind and its value, taken.
    pub fn into_map<U>(self, mut f: impl FnMut(Kind, T) -> U) -> PerKind<U> {
        PerKind {
            resource_protections: f(Kind::ResourceProtection, self.resource_protections),
            anchor_rules: f(Kind::AnchorRule, self.anchor_rules),
            critical_services: f(Kind::CriticalService, self.critical_services),
        }
    }

    /// The values, in the order of [`Kind::ALL`].
    pub fn into_values(self) -> [T; 3] {
        [
            self.resource_protections,
            self.anchor_rules,
            self.critical_services,
        ]
    }
}

/// holdfast's own resources (the four policy kinds), bound from its APIExport in
/// every workspace that binds it.
pub fn own_resources() -> BTreeSet<GroupResource> {
    let dr = ApiResource::erase::<holdfast_shared::api::DependencyRule>(&());
    Kind::ALL
        .map(Kind::api_resource)
        .into_iter()
        .chain([dr])
        .map(|ar| GroupResource::new(&ar.group, &ar.plural))
        .collect()
}

/// The logical cluster of the APIExport an endpoint URL of its slice serves:
/// `<shard>/services/apiexport/<export's logical cluster>/<export>` (kcp-facts 7).
pub fn export_cluster_of(url: &str, export: &str) -> Option<String> {
    let rest = url.trim_end_matches('/').strip_suffix(export)?;
    let rest = rest.strip_suffix('/')?;
    let (before, lc) = rest.rsplit_once('/')?;
    before
        .ends_with("/services/apiexport")
        .then(|| lc.to_string())
        .filter(|lc| !lc.is_empty())
}

/// Where a workspace gets a resource from: an APIExport of another workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundFrom {
    /// The export's logical cluster (`status.apiExportClusterName`).
    pub cluster: String,
    /// The export's name.
    pub export: String,
    /// How the binding names the export's workspace (its path; the logical
    /// cluster when the binding gives none).
    pub path: String,
}

/// What the APIBindings of every workspace say.
#[derive(Debug, Default)]
pub struct Bindings {
    /// Workspaces binding holdfast with the webhook-configuration claim accepted.
    pub holdfast: BTreeSet<String>,
    /// Workspaces binding holdfast without accepting it.
    pub unclaimed: BTreeSet<String>,
    /// Per workspace: the resources it gets from another workspace's APIExport.
    pub bound: HashMap<String, HashMap<GroupResource, BoundFrom>>,
    /// Per workspace of [`Bindings::holdfast`]: a reference to its binding, the
    /// owner of the configuration holdfast installs there.
    pub owners: BTreeMap<String, OwnerReference>,
}

/// Whether `binding` accepts the claim on `group`/`resource`.
fn accepts(binding: &Value, (group, resource): (&str, &str)) -> bool {
    binding["spec"]["permissionClaims"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["group"].as_str().unwrap_or_default() == group
                && c["resource"].as_str() == Some(resource)
                && c["state"].as_str() == Some("Accepted")
        })
}

impl Bindings {
    /// Reads `bindings` (logical cluster, APIBinding); `home` is the logical
    /// cluster of holdfast's APIExport `export`. A binding not bound yet (no
    /// `status.apiExportClusterName`) says nothing.
    pub fn of<'a, B: std::borrow::Borrow<DynamicObject>>(
        bindings: impl IntoIterator<Item = (&'a str, B)>,
        home: Option<&str>,
        export: &str,
    ) -> Self {
        let mut out = Self::default();
        for (cluster, b) in bindings {
            let b = b.borrow();
            let (spec, status) = (&b.data["spec"], &b.data["status"]);
            let name = spec["reference"]["export"]["name"].as_str();
            let Some(from) = status["apiExportClusterName"]
                .as_str()
                .filter(|c| !c.is_empty())
            else {
                continue;
            };
            if name == Some(export) && Some(from) == home {
                if accepts(&b.data, WEBHOOK_CLAIM) {
                    out.holdfast.insert(cluster.to_string());
                    if let (Some(name), Some(uid)) = (&b.metadata.name, &b.metadata.uid) {
                        let types = b.types.as_ref();
                        out.owners.insert(
                            cluster.to_string(),
                            OwnerReference {
                                api_version: types.map_or_else(
                                    || "apis.kcp.io/v1alpha2".to_string(),
                                    |t| t.api_version.clone(),
                                ),
                                kind: "APIBinding".to_string(),
                                name: name.clone(),
                                uid: uid.clone(),
                                ..OwnerReference::default()
                            },
                        );
                    }
                } else {
                    out.unclaimed.insert(cluster.to_string());
                }
                continue;
            }
            // A workspace binding its own export: kcp calls its own configurations.
            if from == cluster {
                continue;
            }
            let path = spec["reference"]["export"]["path"]
                .as_str()
                .filter(|p| !p.is_empty())
                .unwrap_or(from);
            for r in status["boundResources"].as_array().into_iter().flatten() {
                let group = match r["group"].as_str().unwrap_or_default() {
                    "core" => "",
                    g => g,
                };
                let Some(resource) = r["resource"].as_str() else {
                    continue;
                };
                out.bound.entry(cluster.to_string()).or_default().insert(
                    GroupResource::new(group, resource),
                    BoundFrom {
                        cluster: from.to_string(),
                        export: name.unwrap_or_default().to_string(),
                        path: path.to_string(),
                    },
                );
            }
        }
        out.unclaimed.retain(|c| !out.holdfast.contains(c));
        out
    }

    /// The APIExport of another workspace `cluster` gets `gr` from.
    pub fn source(&self, cluster: &str, gr: &GroupResource) -> Option<&BoundFrom> {
        self.bound.get(cluster)?.get(gr)
    }
}

/// One policy object of a [`Kind`], evaluated.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyEval {
    /// Its kind.
    pub kind: Kind,
    /// Its logical cluster.
    pub cluster: String,
    /// Its name.
    pub name: String,
    /// Why it is invalid.
    pub invalid: Option<Invalid>,
    /// Why its configuration cannot be installed.
    pub blocked: Option<(&'static str, String)>,
    /// Resources its own workspace's `policies-<i>` webhooks route.
    pub local: Vec<GroupResource>,
    /// Resources routed by an export webhook: (resource, export cluster, export).
    pub exported: Vec<(GroupResource, String, String)>,
}

impl PolicyEval {
    /// `<logical cluster>/<name>`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.cluster, self.name)
    }
}

/// The configurations every workspace needs for the policies of every [`Kind`], and
/// each policy's evaluation.
#[derive(Debug, Default)]
pub struct Plan {
    /// Per logical cluster.
    pub targets: BTreeMap<String, WorkspaceTarget>,
    /// Per policy, in input order.
    pub policies: Vec<PolicyEval>,
}

/// A store's key: (logical cluster, name), shared with the snapshots and the
/// caches keyed by object (cloning it is a reference count).
pub type StoreKey = Arc<(String, String)>;

/// The objects of one kind, keyed by (logical cluster, name).
pub type Objects<T = DynamicObject> = Vec<(StoreKey, Arc<T>)>;

/// One policy object, decoded and checked: a function of the object alone, so the
/// caller may reuse it while the object's resourceVersion is unchanged.
pub struct Decoded {
    policy: Result<Policy, String>,
    invalid: Option<Invalid>,
    /// What the policy governs ([`Policy::needs`]) and needs from a configuration
    /// ([`Policy::add_to`]), built once.
    needs: Vec<GroupResource>,
    alone: PolicyNeeds,
}

/// Decodes and checks an object of `kind`.
pub fn decode_policy(kind: Kind, obj: &DynamicObject) -> Decoded {
    let policy = Policy::decode(kind, obj);
    let invalid = match &policy {
        Ok(p) => p.check(),
        Err(message) => Some(Invalid {
            reason: reasons::INVALID_SPEC,
            message: message.clone(),
        }),
    };
    let (needs, alone) = match &policy {
        Ok(p) if invalid.is_none() => {
            let mut alone = PolicyNeeds::default();
            p.add_to(&mut alone);
            (p.needs(), alone)
        }
        _ => (Vec::new(), PolicyNeeds::default()),
    };
    Decoded {
        policy,
        invalid,
        needs,
        alone,
    }
}

/// A decoded policy of one [`Kind`].
enum Policy {
    Rp(ResourceProtection),
    Ar(AnchorRule),
    Cs(CriticalService),
}

impl Policy {
    fn decode(kind: Kind, obj: &DynamicObject) -> Result<Self, String> {
        Ok(match kind {
            Kind::ResourceProtection => Self::Rp(decode(obj)?),
            Kind::AnchorRule => Self::Ar(decode(obj)?),
            Kind::CriticalService => Self::Cs(decode(obj)?),
        })
    }

    /// The spec's problems (kcp: no discovery per workspace, so the types are not
    /// looked up; an unknown type routes DELETEs nobody makes).
    fn check(&self) -> Option<Invalid> {
        let index = ApiIndex::default();
        match self {
            Self::Rp(p) => check_resource_protection(p, &index),
            Self::Ar(p) => check_anchor_rule(p, &index),
            Self::Cs(p) => check_critical_service(p, &index),
        }
    }

    /// The resources whose DELETEs it governs in its workspace's configuration. A
    /// CriticalService's guard of itself is left out: kcp admits DELETEs of
    /// `criticalservices.holdfast.dev` through the holdfast workspace's
    /// configurations only (see `Reconciler::install_home`).
    fn needs(&self) -> Vec<GroupResource> {
        match self {
            Self::Rp(p) => resource_protection_needs(p),
            Self::Ar(p) => anchor_rule_needs(p),
            Self::Cs(p) => critical_service_needs(p)
                .into_iter()
                .filter(|gr| gr.group != API_GROUP)
                .collect(),
        }
    }

    /// Whether label changes and break-glass markers on what it protects are
    /// judged too (a strict ResourceProtection).
    fn strict(&self) -> bool {
        matches!(self, Self::Rp(p) if p.spec.strict)
    }

    fn add_to(&self, needs: &mut PolicyNeeds) {
        match self {
            Self::Rp(p) => needs.add_resource_protection(p),
            Self::Ar(p) => needs.add_anchor_rule(p),
            Self::Cs(p) => needs.add_critical_service(p),
        }
    }
}

/// Keeps in `needs` only what `local` says is the workspace's own.
fn retain_local(needs: &mut PolicyNeeds, local: impl Fn(&GroupResource) -> bool) {
    needs.delete.retain(&local);
    needs.strict.retain(&local);
    for r in &mut needs.routes {
        r.resources.retain(&local);
    }
    needs.routes.retain(|r| !r.resources.is_empty());
}

/// The message of a policy whose types come from exports whose workspaces do not
/// bind holdfast: which, and what their provider must do.
fn not_bound_message(export: &str, unbound: &[(&GroupResource, &BoundFrom)]) -> String {
    unbound
        .iter()
        .map(|(gr, from)| {
            format!(
                "{gr} comes from APIExport {} in workspace {} (logical cluster {}), whose workspace \
                 does not bind {export} with its claims accepted, and kcp admits its DELETEs only \
                 through that workspace's webhook configurations: the provider must bind {export} \
                 in {} and accept its claims (docs/kcp.md, provider guide)",
                from.export, from.path, from.cluster, from.path
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Evaluates every policy (`objects`: the objects of each kind, keyed by
/// (logical cluster, name)) over `bindings`; `export` is holdfast's APIExport.
/// Every workspace binding holdfast gets a target; the exports' targets hold the
/// types consumers' policies govern.
/// `decode` gives each object's [`Decoded`] (see [`decode_policy`]).
pub fn plan<T>(
    objects: &PerKind<Objects<T>>,
    decode: &dyn Fn(Kind, &Arc<T>) -> Arc<Decoded>,
    bindings: &Bindings,
    export: &str,
) -> Plan {
    let mut out = Plan::default();
    let mut local_needs: BTreeMap<String, PolicyNeeds> = BTreeMap::new();
    for cluster in &bindings.holdfast {
        let target = out.targets.entry(cluster.clone()).or_default();
        target.binds = true;
        target.owner = bindings.owners.get(cluster).cloned();
    }
    // Label protection of what holdfast-binding workspaces get from an export whose
    // workspace binds holdfast too: kcp calls only that workspace's configurations
    // for those objects (kcp-facts 12).
    for cluster in &bindings.holdfast {
        for (gr, from) in bindings.bound.get(cluster).into_iter().flatten() {
            if bindings.holdfast.contains(&from.cluster) {
                out.targets
                    .entry(from.cluster.clone())
                    .or_default()
                    .label_exports
                    .entry(from.export.clone())
                    .or_default()
                    .insert(gr.clone());
            }
        }
    }
    for (kind, list) in objects.iter() {
        for (key, obj) in list {
            let (cluster, name) = key.as_ref();
            let mut eval = PolicyEval {
                kind,
                cluster: cluster.clone(),
                name: name.clone(),
                invalid: None,
                blocked: None,
                local: Vec::new(),
                exported: Vec::new(),
            };
            let decoded = decode(kind, obj);
            eval.invalid = decoded.invalid.clone();
            let (Ok(policy), None) = (&decoded.policy, &eval.invalid) else {
                out.policies.push(eval);
                continue;
            };
            let mut unbound = Vec::new();
            for gr in decoded.needs.iter().cloned() {
                match bindings.source(cluster, &gr) {
                    Some(from) => {
                        if !bindings.holdfast.contains(&from.cluster) {
                            unbound.push((gr.clone(), from));
                        } else {
                            let target = out.targets.entry(from.cluster.clone()).or_default();
                            target
                                .exports
                                .entry(from.export.clone())
                                .or_default()
                                .insert(gr.clone());
                            if policy.strict() {
                                target
                                    .strict_exports
                                    .entry(from.export.clone())
                                    .or_default()
                                    .insert(gr.clone());
                            }
                            target.rules.insert(eval.key());
                        }
                        eval.exported
                            .push((gr, from.cluster.clone(), from.export.clone()));
                    }
                    None => eval.local.push(gr),
                }
            }
            if !eval.local.is_empty() {
                local_needs
                    .entry(cluster.clone())
                    .or_default()
                    .merge(&decoded.alone);
                if !bindings.holdfast.contains(cluster) {
                    eval.blocked = Some((
                        WEBHOOK_CLAIM_NOT_ACCEPTED,
                        format!(
                            "the APIBinding of {export} in this workspace does not accept the \
                             permission claim on {}.{} (with the verbs the export claims), so holdfast \
                             cannot install its webhook configuration here: accept it (docs/kcp.md)",
                            WEBHOOK_CLAIM.1, WEBHOOK_CLAIM.0
                        ),
                    ));
                }
            }
            if eval.blocked.is_none() && !unbound.is_empty() {
                let refs: Vec<(&GroupResource, &BoundFrom)> =
                    unbound.iter().map(|(gr, f)| (gr, *f)).collect();
                eval.blocked = Some((EXPORT_WORKSPACE_NOT_BOUND, not_bound_message(export, &refs)));
            }
            out.policies.push(eval);
        }
    }
    for (cluster, mut needs) in local_needs {
        let Some(target) = out.targets.get_mut(&cluster).filter(|t| t.binds) else {
            continue;
        };
        // holdfast's own types come from holdfast's export: kcp never calls this
        // workspace's configurations for them.
        retain_local(&mut needs, |gr| {
            gr.group != API_GROUP && bindings.source(&cluster, gr).is_none()
        });
        target.local = needs.with_containment(well_known_scope);
    }
    out
}

/// Where CriticalServices guard themselves: kcp admits DELETEs of a type bound
/// from holdfast.dev through the holdfast workspace's configurations only
/// (kcp-facts 12), so the controller keeps one there (`Reconciler::install_home`).
#[derive(Clone, Copy, Debug)]
pub struct HomeGuard<'a> {
    /// The holdfast workspace's logical cluster.
    pub cluster: &'a str,
    /// holdfast's APIExport.
    pub export: &'a str,
}

/// A policy's outcome over the installed configurations (by logical cluster)
/// and those kcp is seen enforcing (`enforced`): what only a configuration not
/// yet enforced routes keeps the policy from Ready. A CriticalService also needs
/// its own DELETEs routed in the holdfast workspace (`home`).
pub fn outcome(
    e: &PolicyEval,
    installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    enforced: &Enforced,
    home: Option<HomeGuard<'_>>,
) -> Outcome {
    let mut via: BTreeSet<String> = BTreeSet::new();
    let mut missing: Vec<String> = Vec::new();
    let mut waiting: Vec<String> = Vec::new();
    let mut pending: BTreeMap<String, String> = BTreeMap::new();
    let mut set: BTreeSet<String> = BTreeSet::new();
    let mut wait_on = |what: String, lc: &String| {
        waiting.push(what);
        if let Some(why) = enforced.pending.get(lc) {
            pending.insert(lc.clone(), why.clone());
        }
    };
    let local_hooks = |configs: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
                       gr: &GroupResource| {
        configs
            .get(&e.cluster)
            .into_iter()
            .flat_map(|c| {
                c.webhooks
                    .iter()
                    .flatten()
                    .map(|h| h.name.as_str())
                    .filter(|n| is_policies_webhook(n) && routes(c, n, "DELETE", gr))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<String>>()
    };
    for gr in &e.local {
        set.insert(gr.to_string());
        let hooks = local_hooks(&enforced.effective, gr);
        if hooks.is_empty() {
            let now = local_hooks(installed, gr);
            if now.is_empty() {
                missing.push(gr.to_string());
            } else {
                wait_on(gr.to_string(), &e.cluster);
                via.extend(now);
            }
        }
        via.extend(hooks);
    }
    let guard = home
        .filter(|_| e.kind == Kind::CriticalService && e.invalid.is_none())
        .map(|h| {
            (
                GroupResource::new(API_GROUP, "criticalservices"),
                h.cluster.to_string(),
                h.export.to_string(),
            )
        });
    for (gr, cluster, export) in e.exported.iter().chain(guard.as_ref()) {
        set.insert(gr.to_string());
        let hook = export_policies_webhook(export);
        let routed_by = |configs: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>| {
            configs
                .get(cluster)
                .is_some_and(|c| routes(c, &hook, "DELETE", gr))
        };
        if routed_by(&enforced.effective) {
            via.insert(format!("{hook} (workspace {cluster})"));
        } else if routed_by(installed) {
            via.insert(format!("{hook} (workspace {cluster})"));
            wait_on(format!("{gr} (APIExport {export} in {cluster})"), cluster);
        } else {
            missing.push(format!("{gr} (APIExport {export} in {cluster})"));
        }
    }
    let installed_ok = missing.is_empty();
    Outcome {
        invalid: e.invalid.clone(),
        installed: installed_ok && e.invalid.is_none() && e.blocked.is_none(),
        installed_message: if installed_ok {
            routed_message(set, via.iter().map(String::as_str))
        } else {
            not_routed_message(&missing)
        },
        cycle: None,
        cycle_applies: false,
        source: None,
        not_admitted: None,
        blocked: e.blocked.clone(),
        not_enforced: (!waiting.is_empty()).then(|| not_enforced_message(&waiting, &pending)),
    }
}

#[cfg(test)]
#[path = "kinds_tests.rs"]
mod tests;
