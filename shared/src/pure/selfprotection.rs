//! holdfast's own installation, guarded by a ValidatingAdmissionPolicy the
//! controller installs: the ValidatingWebhookConfiguration `holdfast`, holdfast's
//! CRDs, the webhook and controller Deployments (and their scale), the webhook
//! Service, the certificate Secret and the two roles the controller keeps equal to
//! what the policies need read (ClusterRole [`READS_POLICIES_ROLE`], aggregated into
//! the webhook's reads, and Role [`ANCHOR_SOURCES_ROLE`]: whoever could edit them
//! could widen holdfast's reads, e.g. to every Secret) may be changed or deleted only by the
//! controller's own identity and by explicitly named admin groups. The API server
//! evaluates the policy itself, so it holds while the webhook is down.
//!
//! (kube-apiserver never applies ValidatingAdmissionPolicies to policies and
//! bindings themselves; the controller re-creates a deleted binding on its next
//! reconcile, and RBAC guards who may delete it.)

use crate::webhookconfig::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use k8s_openapi::{
    api::admissionregistration::v1::{
        MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
        ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicySpec, Validation,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// Name of the policy and of its binding.
pub const SELF_PROTECTION_NAME: &str = "holdfast-self-protection";

/// holdfast's CRDs.
pub const CRD_NAMES: [&str; 4] = [
    "resourceprotections.holdfast.dev",
    "anchorrules.holdfast.dev",
    "dependencyrules.holdfast.dev",
    "criticalservices.holdfast.dev",
];

/// The ClusterRole the controller keeps equal to what the policies and label
/// containment need read (aggregated into `holdfast-reads`, which the API server's
/// aggregation keeps and so is not guarded here).
pub const READS_POLICIES_ROLE: &str = "holdfast-reads-policies";

/// The Role (in holdfast's namespace) granting `get` on the anchor-source Secrets
/// the AnchorRules name.
pub const ANCHOR_SOURCES_ROLE: &str = "holdfast-anchor-sources";

/// What is guarded and who may change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelfProtection {
    /// The controller's user name (from a SelfSubjectReview).
    pub identity: String,
    /// Groups whose members may change holdfast's installation too (`--admin-group`).
    pub admin_groups: Vec<String>,
    /// Namespace of the Deployments, Service and Secret.
    pub namespace: String,
}

fn cel_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn rule(group: &str, resources: &[&str], names: &[&str]) -> NamedRuleWithOperations {
    let v = |x: &[&str]| Some(x.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    NamedRuleWithOperations {
        api_groups: v(&[group]),
        api_versions: v(&["*"]),
        operations: v(&["UPDATE", "DELETE"]),
        resources: v(resources),
        resource_names: v(names),
        scope: Some("*".to_string()),
    }
}

fn meta() -> ObjectMeta {
    ObjectMeta {
        name: Some(SELF_PROTECTION_NAME.to_string()),
        labels: Some([(MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string())].into()),
        ..Default::default()
    }
}

impl SelfProtection {
    /// The CEL expression that allows the request.
    pub fn allowed_expression(&self) -> String {
        let groups = self
            .admin_groups
            .iter()
            .map(|g| cel_str(g))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "request.userInfo.username == {} || (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in [{groups}]))",
            cel_str(&self.identity)
        )
    }

    /// The denial message.
    pub fn message(&self) -> String {
        let groups = if self.admin_groups.is_empty() {
            String::new()
        } else {
            format!(" or members of {}", self.admin_groups.join(", "))
        };
        format!(
            "holdfast: this object is part of holdfast's own installation; only the holdfast \
             controller ({}){groups} may change or delete it (policy: \
             ValidatingAdmissionPolicy/{SELF_PROTECTION_NAME}). To uninstall holdfast, delete \
             the ValidatingAdmissionPolicyBinding {SELF_PROTECTION_NAME} first, with the \
             controller stopped.",
            self.identity
        )
    }

    /// The ValidatingAdmissionPolicy.
    pub fn policy(&self) -> ValidatingAdmissionPolicy {
        ValidatingAdmissionPolicy {
            metadata: meta(),
            spec: Some(ValidatingAdmissionPolicySpec {
                failure_policy: Some("Fail".to_string()),
                match_constraints: Some(MatchResources {
                    resource_rules: Some(vec![
                        rule(
                            "admissionregistration.k8s.io",
                            &["validatingwebhookconfigurations"],
                            &[crate::names::WEBHOOK_CONFIGURATION_NAME],
                        ),
                        rule(
                            "apiextensions.k8s.io",
                            &["customresourcedefinitions"],
                            &CRD_NAMES,
                        ),
                        rule(
                            "apps",
                            &["deployments", "deployments/scale"],
                            &["holdfast-webhook", "holdfast-controller"],
                        ),
                        rule("", &["services"], &["holdfast-webhook"]),
                        rule("", &["secrets"], &["holdfast-webhook-tls"]),
                        rule(
                            "rbac.authorization.k8s.io",
                            &["clusterroles"],
                            &[READS_POLICIES_ROLE],
                        ),
                        rule(
                            "rbac.authorization.k8s.io",
                            &["roles"],
                            &[ANCHOR_SOURCES_ROLE],
                        ),
                    ]),
                    ..Default::default()
                }),
                match_conditions: Some(vec![MatchCondition {
                    name: "holdfast-namespace-or-cluster-scoped".to_string(),
                    expression: format!(
                        "!has(request.namespace) || request.namespace == '' || request.namespace == {}",
                        cel_str(&self.namespace)
                    ),
                }]),
                validations: Some(vec![Validation {
                    expression: self.allowed_expression(),
                    message: Some(self.message()),
                    reason: Some("Forbidden".to_string()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    /// Its binding (Deny).
    pub fn binding(&self) -> ValidatingAdmissionPolicyBinding {
        crate::backstop::deny_binding(meta(), SELF_PROTECTION_NAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_what_it_guards_and_who_may_change_it() {
        let sp = SelfProtection {
            identity: "system:serviceaccount:holdfast-system:holdfast-controller".into(),
            admin_groups: vec!["platform-admins".into(), "o'brien".into()],
            namespace: "holdfast-system".into(),
        };
        let p = sp.policy();
        let spec = p.spec.expect("spec");
        let rules = spec
            .match_constraints
            .and_then(|m| m.resource_rules)
            .expect("rules");
        let names: Vec<String> = rules
            .iter()
            .flat_map(|r| r.resource_names.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            vec![
                "holdfast",
                "resourceprotections.holdfast.dev",
                "anchorrules.holdfast.dev",
                "dependencyrules.holdfast.dev",
                "criticalservices.holdfast.dev",
                "holdfast-webhook",
                "holdfast-controller",
                "holdfast-webhook",
                "holdfast-webhook-tls",
                "holdfast-reads-policies",
                "holdfast-anchor-sources"
            ]
        );
        assert!(
            rules
                .iter()
                .all(|r| r.operations == Some(vec!["UPDATE".into(), "DELETE".into()]))
        );
        assert_eq!(
            sp.allowed_expression(),
            "request.userInfo.username == 'system:serviceaccount:holdfast-system:holdfast-controller' \
             || (has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ['platform-admins', 'o\\'brien']))"
        );
        assert_eq!(
            sp.binding().spec.validation_actions,
            vec!["Deny".to_string()]
        );
        let no_groups = SelfProtection {
            admin_groups: Vec::new(),
            ..sp
        };
        assert!(no_groups.allowed_expression().ends_with("g in []))"));
        assert!(no_groups.message().contains("only the holdfast controller (system:serviceaccount:holdfast-system:holdfast-controller) may change"));
    }
}
