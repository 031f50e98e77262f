//! Least privilege: the read permissions of both binaries follow the policies.
//!
//! The shipped ClusterRole `holdfast-reads` aggregates every ClusterRole labelled
//! [`AGGREGATE_LABEL`]; both ServiceAccounts are bound to it. The controller keeps
//! one of them, [`READS_ROLE`], equal to what the configuration needs read: the
//! types the policies name (protected types, dependency and dependent types,
//! anchors, CriticalService providers and criteria) and, for label containment,
//! every namespaced type that can be listed and watched plus the types CRDs serve
//! — Secrets only when a policy names them or `--read-secrets` is given. Nothing
//! else is readable: no `*` in any read rule.
//!
//! Writing rules it does not hold needs `escalate` on that one role (the shipped
//! RBAC grants it by name). When the role cannot be kept (absent: the installation
//! does not use it, e.g. an administrator's identity; refused: RBAC changed), the
//! controller says so in its log and in the status of every policy needing a type
//! the role does not grant.

use std::collections::BTreeSet;

use holdfast_shared::api::{
    AnchorRule, CriticalService, DependencyRule, GroupResource, ResourceProtection,
    critical_service::CriterionType,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::{Api, Client, api::PostParams};

use crate::policies::ApiIndex;

/// The ClusterRole the controller keeps.
pub const READS_ROLE: &str = holdfast_shared::selfprotection::READS_POLICIES_ROLE;

/// The label that makes a ClusterRole part of `holdfast-reads`.
pub const AGGREGATE_LABEL: &str = "holdfast.dev/aggregate-to-reads";

/// The read verbs granted.
pub const VERBS: [&str; 3] = ["get", "list", "watch"];

/// Core Secrets.
pub fn secrets() -> GroupResource {
    GroupResource::new("", "secrets")
}

/// The types a ResourceProtection needs read: its protected types.
pub fn resource_protection_reads(p: &ResourceProtection) -> Vec<GroupResource> {
    p.spec
        .resources
        .iter()
        .map(|r| GroupResource::new(&r.group, &r.resource))
        .collect()
}

/// The types an AnchorRule needs read: the anchor and the protected types.
pub fn anchor_rule_reads(p: &AnchorRule) -> Vec<GroupResource> {
    std::iter::once(p.spec.anchor.group_resource())
        .chain(
            p.spec
                .protects
                .iter()
                .map(|t| GroupResource::new(&t.group, &t.resource)),
        )
        .collect()
}

/// The types a DependencyRule needs read: its dependent type (whose objects hold
/// the references) and its dependency types.
pub fn dependency_rule_reads(p: &DependencyRule) -> Vec<GroupResource> {
    std::iter::once(GroupResource::new(
        &p.spec.dependent.group,
        &p.spec.dependent.resource,
    ))
    .chain(
        p.spec
            .dependencies
            .iter()
            .map(|d| GroupResource::new(&d.group, &d.resource)),
    )
    .collect()
}

/// The types a CriticalService needs read: the provider and what its criteria
/// name (a kind is resolved to its plural through discovery).
pub fn critical_service_reads(p: &CriticalService, index: &ApiIndex) -> Vec<GroupResource> {
    let mut out = vec![index.plural(&p.spec.provider.group_resource())];
    for c in &p.spec.criteria {
        let gr = match c.type_ {
            CriterionType::Finalizer => c.finalizer.as_ref().map(|f| f.group_resource()),
            CriterionType::SpecificResource => c
                .specific_resource
                .as_ref()
                .map(|s| GroupResource::new(&s.group, &s.resource)),
        };
        out.extend(gr.map(|gr| index.plural(&gr)));
    }
    out
}

/// What the role must grant: `policy` (every type some policy needs read), every
/// namespaced type that can be listed and watched and every type a CRD serves
/// (`crd_types`) for label containment — Secrets only when a policy names them or
/// `read_secrets`.
pub fn wanted(
    index: &ApiIndex,
    policy: &BTreeSet<GroupResource>,
    crd_types: impl IntoIterator<Item = GroupResource>,
    read_secrets: bool,
) -> BTreeSet<GroupResource> {
    let secrets = secrets();
    let containment = index
        .watchable()
        .map(|(gr, _)| gr.clone())
        .chain(crd_types)
        .filter(|gr| *gr != secrets || read_secrets);
    policy.iter().cloned().chain(containment).collect()
}

/// The rules granting read of `types`: one rule per API group, resources sorted.
pub fn rules(types: &BTreeSet<GroupResource>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for gr in types {
        if gr.resource.is_empty() || gr.resource.contains('*') || gr.group.contains('*') {
            continue;
        }
        match out
            .last_mut()
            .filter(|r| r.api_groups.as_deref() == Some(std::slice::from_ref(&gr.group)))
        {
            Some(r) => r
                .resources
                .get_or_insert_with(Vec::new)
                .push(gr.resource.clone()),
            None => out.push(PolicyRule {
                api_groups: Some(vec![gr.group.clone()]),
                resources: Some(vec![gr.resource.clone()]),
                verbs: VERBS.iter().map(|v| v.to_string()).collect(),
                ..Default::default()
            }),
        }
    }
    out
}

/// The types `rules` grant all read verbs on (by exact group and resource).
pub fn granted(rules: &[PolicyRule]) -> BTreeSet<GroupResource> {
    let mut out = BTreeSet::new();
    for r in rules {
        if r.resource_names.as_ref().is_some_and(|n| !n.is_empty())
            || !VERBS
                .iter()
                .all(|v| r.verbs.iter().any(|x| x == v || x == "*"))
        {
            continue;
        }
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                out.insert(GroupResource::new(g, res));
            }
        }
    }
    out
}

/// How keeping the role went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// The role does not exist: this installation does not manage reads through
    /// it (every read is the identity's own business).
    Unmanaged,
    /// The role grants what is wanted.
    Granted,
    /// The role could not be brought in line; it grants `held`.
    Failed {
        /// Why.
        error: String,
        /// What it grants now.
        held: BTreeSet<GroupResource>,
    },
}

/// Brings [`READS_ROLE`] in line with `types` (an update only when its rules differ).
pub async fn keep(client: &Client, types: &BTreeSet<GroupResource>) -> Kept {
    let api: Api<ClusterRole> = Api::all(client.clone());
    let live = match api.get_opt(READS_ROLE).await {
        Ok(Some(r)) => r,
        Ok(None) => return Kept::Unmanaged,
        Err(e) => {
            return Kept::Failed {
                error: format!("reading ClusterRole {READS_ROLE}: {e}"),
                held: BTreeSet::new(),
            };
        }
    };
    let want = rules(types);
    let held = live.rules.clone().unwrap_or_default();
    if held == want {
        return Kept::Granted;
    }
    let mut role = live;
    role.rules = Some(want);
    match api.replace(READS_ROLE, &PostParams::default(), &role).await {
        Ok(_) => {
            let added: Vec<String> = types
                .difference(&granted(&held))
                .map(ToString::to_string)
                .collect();
            tracing::info!(
                added = %added.join(", "),
                types = types.len(),
                "ClusterRole {READS_ROLE} updated: holdfast reads what the policies and label containment need"
            );
            Kept::Granted
        }
        Err(e) => Kept::Failed {
            error: format!("updating ClusterRole {READS_ROLE}: {e}"),
            held: granted(&held),
        },
    }
}

/// The Role (in holdfast's namespace) granting `get` on the anchor-source Secrets.
pub const SOURCES_ROLE: &str = holdfast_shared::selfprotection::ANCHOR_SOURCES_ROLE;

/// The rules granting `get` on exactly `secrets` (none for none).
pub fn source_rules(secrets: &BTreeSet<String>) -> Vec<PolicyRule> {
    if secrets.is_empty() {
        return Vec::new();
    }
    vec![PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["secrets".to_string()]),
        resource_names: Some(secrets.iter().cloned().collect()),
        verbs: vec!["get".to_string()],
        ..Default::default()
    }]
}

/// Brings [`SOURCES_ROLE`] in `namespace` in line with `secrets` (an update only when
/// its rules differ). `Ok(false)`: the Role does not exist (not in use).
pub async fn keep_sources(
    client: &Client,
    namespace: &str,
    secrets: &BTreeSet<String>,
) -> Result<bool, String> {
    let api: Api<Role> = Api::namespaced(client.clone(), namespace);
    let live = match api.get_opt(SOURCES_ROLE).await {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(false),
        Err(e) => return Err(format!("reading Role {namespace}/{SOURCES_ROLE}: {e}")),
    };
    let want = source_rules(secrets);
    if live.rules.clone().unwrap_or_default() == want {
        return Ok(true);
    }
    let mut role = live;
    role.rules = Some(want);
    api.replace(SOURCES_ROLE, &PostParams::default(), &role)
        .await
        .map_err(|e| format!("updating Role {namespace}/{SOURCES_ROLE}: {e}"))?;
    tracing::info!(
        secrets = %secrets.iter().cloned().collect::<Vec<_>>().join(", "),
        "Role {namespace}/{SOURCES_ROLE} updated: holdfast reads the anchor-source Secrets AnchorRules name"
    );
    Ok(true)
}

pub use holdfast_shared::clients::may_read;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_rules_name_exactly_the_secrets() {
        assert!(source_rules(&BTreeSet::new()).is_empty());
        let names: BTreeSet<String> = ["b".to_string(), "a".to_string()].into();
        let rules = source_rules(&names);
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[0].resource_names,
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(rules[0].resources, Some(vec!["secrets".to_string()]));
        assert_eq!(rules[0].verbs, vec!["get".to_string()]);
    }

    fn gr(g: &str, r: &str) -> GroupResource {
        GroupResource::new(g, r)
    }

    #[test]
    fn rules_group_by_api_group_and_round_trip() {
        let types: BTreeSet<GroupResource> = [
            gr("", "configmaps"),
            gr("apps", "deployments"),
            gr("", "pods"),
            gr("example.com", "widgets"),
            gr("", "*"),
        ]
        .into();
        let r = rules(&types);
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(
            json,
            serde_json::json!([
                {"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}
            ])
        );
        let back = granted(&r);
        assert_eq!(back.len(), 4);
        assert!(!back.contains(&gr("", "*")));
        assert!(back.contains(&gr("example.com", "widgets")));
    }

    #[test]
    fn each_kind_names_what_it_reads() {
        let index = ApiIndex::with_watchable(&[
            ("example.com", "v1", "CoolResource", "coolresources"),
            ("", "v1", "ConfigMap", "configmaps"),
        ]);
        let dr: DependencyRule = serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "DependencyRule",
            "metadata": {"name": "d"},
            "spec": {"dependent": {"group": "", "version": "v1", "kind": "Secret", "resource": "secrets"},
                     "dependencies": [{"group": "", "version": "v1", "resource": "configmaps",
                                       "fieldRef": {"path": ".metadata.labels.config"}}]}
        }))
        .expect("rule");
        assert_eq!(
            dependency_rule_reads(&dr),
            [gr("", "secrets"), gr("", "configmaps")]
        );
        let cs: CriticalService = serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService",
            "metadata": {"name": "c"},
            "spec": {"provider": {"group": "apps", "resource": "deployments", "namespace": "db", "name": "pg"},
                     "criteria": [
                         {"type": "Finalizer", "finalizer": {"group": "example.com", "resource": "CoolResource", "finalizerName": "example.com/x"}},
                         {"type": "SpecificResource", "specificResource": {"group": "", "resource": "configmaps", "namespace": "db", "name": "cfg"}}
                     ]}
        }))
        .expect("critical service");
        assert_eq!(
            critical_service_reads(&cs, &index),
            [
                gr("apps", "deployments"),
                gr("example.com", "coolresources"),
                gr("", "configmaps")
            ]
        );
    }

    #[test]
    fn secrets_only_when_named_or_opted_in() {
        let index = ApiIndex::with_watchable(&[
            ("", "v1", "Secret", "secrets"),
            ("", "v1", "ConfigMap", "configmaps"),
        ]);
        let none = BTreeSet::new();
        let w = wanted(&index, &none, [gr("example.com", "clusterwidgets")], false);
        assert_eq!(
            w,
            [gr("", "configmaps"), gr("example.com", "clusterwidgets")].into()
        );
        let named: BTreeSet<GroupResource> = [secrets()].into();
        assert!(wanted(&index, &named, [], false).contains(&secrets()));
        assert!(wanted(&index, &none, [], true).contains(&secrets()));
    }
}
