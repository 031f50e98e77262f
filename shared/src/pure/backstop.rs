//! The backstop: a ValidatingAdmissionPolicy the controller installs next to the
//! webhook configuration, so label protection holds inside the API server while
//! the webhook is unreachable, configured with `failurePolicy: Ignore`, or being
//! upgraded. It refuses the DELETE of an object carrying a protection label with a
//! protecting value and, under strict mode, an UPDATE (subresources included) that
//! removes such a label or changes it to a value that does not protect, with the
//! webhook's own `holdfast:` message.
//!
//! The API server admits a request only when every ValidatingAdmissionPolicy and
//! every webhook allows it, so the backstop must never refuse what the webhook
//! allows (otherwise it would overrule the webhook while the webhook is up):
//! - the value `Cascading` protects only while live contents remain, which a CEL
//!   expression cannot see: the backstop leaves `Cascading` to the webhook;
//! - a break-glass marker (the annotations [`SKIP_ANNOTATION`] and
//!   [`SKIP_ANNOTATION_DEPENDENCIES`] with any value, the label
//!   [`ALLOW_DELETION_LABEL_APPCAT`]`="true"`) lets the request past the backstop;
//!   the webhook, when up, still judges the marker's value (expiry) and who set it;
//! - under strict mode an object whose stored labels carry
//!   [`STRICT_EXEMPT_LABEL`]`="true"` may lose its label, and so may the instances
//!   of a CustomResourceDefinition labelled so (the controller leaves their
//!   UPDATEs out of the policy, [`Backstop::strict_exempt`]).

use crate::{
    labels::{ProtectionLabels, is_cascading},
    names::{
        ALLOW_DELETION_LABEL_APPCAT, MESSAGE_PREFIX, SKIP_ANNOTATION, SKIP_ANNOTATION_DEPENDENCIES,
        STRICT_EXEMPT_LABEL,
    },
    webhookconfig::{MANAGED_BY_LABEL, MANAGED_BY_VALUE},
};
use k8s_openapi::{
    api::admissionregistration::v1::{
        MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
        ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
        ValidatingAdmissionPolicySpec, Validation,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};

/// Name of the policy and of its binding.
pub const BACKSTOP_NAME: &str = "holdfast-backstop";

fn cel_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn cel_list(values: &[&str]) -> String {
    let items: Vec<String> = values.iter().map(|v| cel_str(v)).collect();
    format!("[{}]", items.join(", "))
}

/// `request.namespace` when the object lives in one (a Namespace's own request
/// carries its name there, which the webhook's message leaves out).
const IS_NAMESPACE: &str =
    "(request.resource.group == '' && request.resource.resource == 'namespaces')";

fn has_namespace() -> String {
    format!("(!{IS_NAMESPACE} && has(request.namespace) && request.namespace != '')")
}

/// `Kind ns/name` or `Kind name`, as the webhook describes the object.
fn describe() -> String {
    format!(
        "request.kind.kind + ' ' + ({} ? request.namespace + '/' : '') + request.name",
        has_namespace()
    )
}

/// `resource[.group] name[ -n ns]`, the webhook's kubectl target.
fn target() -> String {
    format!(
        "(request.resource.group == '' ? request.resource.resource : request.resource.resource + '.' + request.resource.group) + ' ' + request.name + ({} ? ' -n ' + request.namespace : '')",
        has_namespace()
    )
}

/// `has(obj.metadata.FIELD) && KEY in obj.metadata.FIELD`.
fn has_key(obj: &str, field: &str, key: &str) -> String {
    format!(
        "(has({obj}.metadata.{field}) && {k} in {obj}.metadata.{field})",
        k = cel_str(key)
    )
}

fn value_in(obj: &str, key: &str, values: &[&str]) -> String {
    format!(
        "({} && {obj}.metadata.labels[{k}] in {})",
        has_key(obj, "labels", key),
        cel_list(values),
        k = cel_str(key)
    )
}

/// A break-glass marker on the stored object.
fn break_glass() -> String {
    format!(
        "{} || {} || {}",
        has_key("oldObject", "annotations", SKIP_ANNOTATION),
        has_key("oldObject", "annotations", SKIP_ANNOTATION_DEPENDENCIES),
        value_in("oldObject", ALLOW_DELETION_LABEL_APPCAT, &["true"])
    )
}

/// What the backstop enforces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backstop {
    /// Protection labels in force.
    pub labels: ProtectionLabels,
    /// Global strict mode.
    pub strict: bool,
    /// Custom resources (group, plural) whose CRD carries
    /// [`STRICT_EXEMPT_LABEL`]`="true"`: their UPDATEs are left out.
    pub strict_exempt: std::collections::BTreeSet<(String, String)>,
}

impl Backstop {
    /// The validations, in label order: one DELETE validation per label with a
    /// value other than `Cascading`, and under strict mode one UPDATE validation
    /// per label.
    pub fn validations(&self) -> Vec<Validation> {
        let mut out = Vec::new();
        for label in self.labels.iter() {
            let key = label.key.as_str();
            let k = cel_str(key);
            let refused: Vec<&str> = label
                .values
                .iter()
                .map(String::as_str)
                .filter(|v| !is_cascading(v))
                .collect();
            if !refused.is_empty() {
                let unprotect = if self.strict {
                    format!(
                        "'first mark it exempt in its own update, as strict mode is on (kubectl label ' + {t} + ' {STRICT_EXEMPT_LABEL}=true, which takes the bypass permission), then remove the label (kubectl label ' + {t} + ' {key}-)'",
                        t = target()
                    )
                } else {
                    format!(
                        "'remove the label (kubectl label ' + {t} + ' {key}-)'",
                        t = target()
                    )
                };
                out.push(Validation {
                    expression: format!(
                        "request.operation != 'DELETE' || {} || !{}",
                        break_glass(),
                        value_in("oldObject", key, &refused)
                    ),
                    message_expression: Some(format!(
                        "'{MESSAGE_PREFIX} ' + {d} + ' is protected by label {key}=' + oldObject.metadata.labels[{k}] + ' (policy: label {key}), so it cannot be deleted. To delete it, ' + {unprotect} + ', or set the annotation {SKIP_ANNOTATION}=true if you are allowed to bypass protection.'",
                        d = describe(),
                    )),
                    message: Some(format!(
                        "{MESSAGE_PREFIX} this object is protected by label {key} (policy: label {key}), so it cannot be deleted."
                    )),
                    reason: Some("Forbidden".to_string()),
                });
            }
            if self.strict {
                let all: Vec<&str> = label.values.iter().map(String::as_str).collect();
                out.push(Validation {
                    expression: format!(
                        "request.operation != 'UPDATE' || {} || !{} || {}",
                        value_in("oldObject", STRICT_EXEMPT_LABEL, &["true"]),
                        value_in("oldObject", key, &all),
                        value_in("object", key, &all)
                    ),
                    message_expression: Some(format!(
                        "'{MESSAGE_PREFIX} ' + {d} + ' carries the protection label {key}=' + oldObject.metadata.labels[{k}] + ' and strict mode is on (policy: strict label {key}), so the label cannot be removed or changed to a value that does not protect.' + ({exempt_added} ? ' Adding the exemption in the same update does not count: it must already be stored.' : '') + ' To unprotect it, first mark it exempt in its own update (kubectl label ' + {t} + ' {STRICT_EXEMPT_LABEL}=true, which takes the bypass permission on protections.holdfast.dev), then remove the label.'",
                        d = describe(),
                        t = target(),
                        exempt_added = value_in("object", STRICT_EXEMPT_LABEL, &["true"]),
                    )),
                    message: Some(format!(
                        "{MESSAGE_PREFIX} this object carries the protection label {key} and strict mode is on (policy: strict label {key}), so the label cannot be removed or changed to a value that does not protect."
                    )),
                    reason: Some("Forbidden".to_string()),
                });
            }
        }
        out
    }

    /// The ValidatingAdmissionPolicy (every field the API server would default is
    /// set, so a live object compares equal).
    pub fn policy(&self) -> ValidatingAdmissionPolicy {
        let rule = |operation: &str, resources: &[&str]| NamedRuleWithOperations {
            api_groups: Some(vec!["*".to_string()]),
            api_versions: Some(vec!["*".to_string()]),
            operations: Some(vec![operation.to_string()]),
            resources: Some(resources.iter().map(|r| r.to_string()).collect()),
            resource_names: None,
            scope: Some("*".to_string()),
        };
        let mut rules = vec![rule("DELETE", &["*"])];
        let mut exclude = Vec::new();
        if self.strict {
            // `*/*` is every resource and subresource; it must stand alone.
            rules.push(rule("UPDATE", &["*/*"]));
            for (group, plural) in &self.strict_exempt {
                let sub = format!("{plural}/*");
                let mut r = rule("UPDATE", &[plural, &sub]);
                r.api_groups = Some(vec![group.clone()]);
                exclude.push(r);
            }
        }
        ValidatingAdmissionPolicy {
            metadata: meta(),
            spec: Some(ValidatingAdmissionPolicySpec {
                failure_policy: Some("Fail".to_string()),
                match_constraints: Some(MatchResources {
                    resource_rules: Some(rules),
                    match_policy: Some("Equivalent".to_string()),
                    namespace_selector: Some(LabelSelector::default()),
                    object_selector: Some(LabelSelector::default()),
                    exclude_resource_rules: (!exclude.is_empty()).then_some(exclude),
                }),
                validations: Some(self.validations()),
                ..Default::default()
            }),
            status: None,
        }
    }

    /// Its binding (Deny).
    pub fn binding(&self) -> ValidatingAdmissionPolicyBinding {
        deny_binding(meta(), BACKSTOP_NAME)
    }
}

/// The binding named by `metadata` that makes the ValidatingAdmissionPolicy
/// `policy` deny what it refuses.
pub(crate) fn deny_binding(metadata: ObjectMeta, policy: &str) -> ValidatingAdmissionPolicyBinding {
    ValidatingAdmissionPolicyBinding {
        metadata,
        spec: ValidatingAdmissionPolicyBindingSpec {
            policy_name: policy.to_string(),
            validation_actions: vec!["Deny".to_string()],
            ..Default::default()
        },
    }
}

fn meta() -> ObjectMeta {
    ObjectMeta {
        name: Some(BACKSTOP_NAME.to_string()),
        labels: Some([(MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string())].into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::ProtectionLabel;

    fn backstop(strict: bool) -> Backstop {
        Backstop {
            labels: ProtectionLabels::with_extra([ProtectionLabel {
                key: "resourcetemplate.karmada.io/deletion-protected".into(),
                values: vec!["Always".into()],
            }]),
            strict,
            strict_exempt: Default::default(),
        }
    }

    #[test]
    fn one_delete_validation_per_label_leaving_cascading_to_the_webhook() {
        let v = backstop(false).validations();
        assert_eq!(v.len(), 2);
        assert!(
            v[0].expression.ends_with(
                "!((has(oldObject.metadata.labels) && 'holdfast.dev/protected' in oldObject.metadata.labels) && oldObject.metadata.labels['holdfast.dev/protected'] in ['Always', 'true'])"
            ),
            "{}",
            v[0].expression
        );
        assert!(v[0].expression.starts_with("request.operation != 'DELETE' || (has(oldObject.metadata.annotations) && 'holdfast.dev/skip-protection' in oldObject.metadata.annotations)"), "{}", v[0].expression);
        assert!(v[1].expression.ends_with("in ['Always'])"));
        assert_eq!(v[0].reason.as_deref(), Some("Forbidden"));
        let p = backstop(false).policy();
        let rules = p
            .spec
            .and_then(|s| s.match_constraints)
            .and_then(|m| m.resource_rules)
            .expect("rules");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].operations, Some(vec!["DELETE".to_string()]));
    }

    #[test]
    fn strict_adds_update_validations_on_subresources_too() {
        let b = backstop(true);
        let v = b.validations();
        assert_eq!(v.len(), 4);
        assert!(v[1].expression.starts_with("request.operation != 'UPDATE' || ((has(oldObject.metadata.labels) && 'holdfast.dev/strict-exempt' in oldObject.metadata.labels) && oldObject.metadata.labels['holdfast.dev/strict-exempt'] in ['true'])"), "{}", v[1].expression);
        assert!(
            v[1].expression
                .contains("in ['Always', 'true', 'Cascading'])")
        );
        let rules = b
            .policy()
            .spec
            .and_then(|s| s.match_constraints)
            .and_then(|m| m.resource_rules)
            .expect("rules");
        assert_eq!(rules[1].operations, Some(vec!["UPDATE".to_string()]));
        assert_eq!(rules[1].resources, Some(vec!["*/*".to_string()]));
        assert_eq!(
            b.binding().spec.validation_actions,
            vec!["Deny".to_string()]
        );
        assert_eq!(b.binding().spec.policy_name, BACKSTOP_NAME);
    }

    #[test]
    fn a_label_protecting_only_with_cascading_has_no_delete_validation() {
        let b = Backstop {
            labels: ProtectionLabels::with_extra([ProtectionLabel {
                key: "holdfast.dev/protected".into(),
                values: vec!["Cascading".into()],
            }]),
            strict: false,
            strict_exempt: Default::default(),
        };
        assert!(b.validations().is_empty());
    }

    #[test]
    fn updates_of_strict_exempt_custom_resources_are_left_out() {
        let mut b = backstop(true);
        b.strict_exempt
            .insert(("example.com".to_string(), "gadgets".to_string()));
        let m = b
            .policy()
            .spec
            .and_then(|s| s.match_constraints)
            .expect("constraints");
        let ex = m.exclude_resource_rules.expect("excluded");
        assert_eq!(ex.len(), 1);
        assert_eq!(ex[0].api_groups, Some(vec!["example.com".to_string()]));
        assert_eq!(ex[0].operations, Some(vec!["UPDATE".to_string()]));
        assert_eq!(
            ex[0].resources,
            Some(vec!["gadgets".to_string(), "gadgets/*".to_string()])
        );
        // Without strict mode there are no UPDATEs to leave out.
        b.strict = false;
        let m = b
            .policy()
            .spec
            .and_then(|s| s.match_constraints)
            .expect("constraints");
        assert_eq!(m.exclude_resource_rules, None);
    }

    #[test]
    fn quotes_in_keys_are_escaped() {
        assert_eq!(cel_str("a'b\\c"), "'a\\'b\\\\c'");
    }
}
