//! The desired ValidatingWebhookConfiguration, computed from scratch from the
//! configuration (and, in later stages, from every policy object). Pure: the
//! controller applies what this returns.

use crate::{labels::ProtectionLabels, names::WEBHOOK_CONFIGURATION_NAME};
use k8s_openapi::{
    ByteString,
    api::admissionregistration::v1::{
        MatchCondition, RuleWithOperations, ServiceReference, ValidatingWebhook,
        ValidatingWebhookConfiguration, WebhookClientConfig,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta},
};
use std::{fmt, str::FromStr};

/// Where the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookTarget {
    /// `clientConfig.url`, e.g. `https://127.0.0.1:8443/validate`.
    Url(String),
    /// `clientConfig.service`, path `/validate`.
    Service {
        /// Namespace of the Service.
        namespace: String,
        /// Name of the Service.
        name: String,
        /// Port of the Service.
        port: i32,
    },
}

/// `failurePolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Reject the request when the webhook cannot be called (default).
    #[default]
    Fail,
    /// Allow the request when the webhook cannot be called.
    Ignore,
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        })
    }
}

/// An unknown failure policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure policy {0:?}: expected Fail or Ignore")]
pub struct UnknownFailurePolicy(pub String);

impl FromStr for FailurePolicy {
    type Err = UnknownFailurePolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Fail" | "fail" => Ok(FailurePolicy::Fail),
            "Ignore" | "ignore" => Ok(FailurePolicy::Ignore),
            _ => Err(UnknownFailurePolicy(s.to_string())),
        }
    }
}

/// How the webhooks are installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallOptions {
    /// Where the webhook listens.
    pub target: WebhookTarget,
    /// PEM CA bundle the API server verifies the webhook with.
    pub ca_bundle: Vec<u8>,
    /// `failurePolicy` of every webhook.
    pub failure_policy: FailurePolicy,
    /// `timeoutSeconds` of every webhook (1..=30).
    pub timeout_seconds: i32,
}

fn client_config(opts: &InstallOptions) -> WebhookClientConfig {
    let ca = (!opts.ca_bundle.is_empty()).then(|| ByteString(opts.ca_bundle.clone()));
    match &opts.target {
        WebhookTarget::Url(url) => WebhookClientConfig {
            url: Some(url.clone()),
            ca_bundle: ca,
            service: None,
        },
        WebhookTarget::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            url: None,
            ca_bundle: ca,
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(crate::names::VALIDATE_PATH.to_string()),
                port: Some(*port),
            }),
        },
    }
}

fn all_resources(op: &str) -> RuleWithOperations {
    RuleWithOperations {
        operations: Some(vec![op.to_string()]),
        api_groups: Some(vec!["*".to_string()]),
        api_versions: Some(vec!["*".to_string()]),
        resources: Some(vec!["*".to_string()]),
        scope: Some("*".to_string()),
    }
}

fn exists(key: &str) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.to_string(),
            operator: "Exists".to_string(),
            values: None,
        }]),
        match_labels: None,
    }
}

/// CEL string literal for a label key (keys never contain quotes or backslashes).
fn cel_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The matchCondition that lets only UPDATEs that remove or change label `key` reach
/// the webhook (guarded so it never errors on objects without labels).
pub fn label_changed_condition(key: &str) -> String {
    let k = cel_str(key);
    format!(
        "oldObject != null && has(oldObject.metadata.labels) && {k} in oldObject.metadata.labels \
         && (!has(object.metadata.labels) || !({k} in object.metadata.labels) \
         || object.metadata.labels[{k}] != oldObject.metadata.labels[{k}])"
    )
}

fn webhook(name: String, opts: &InstallOptions, rule: RuleWithOperations) -> ValidatingWebhook {
    ValidatingWebhook {
        name,
        admission_review_versions: vec!["v1".to_string()],
        side_effects: "None".to_string(),
        failure_policy: Some(opts.failure_policy.to_string()),
        timeout_seconds: Some(opts.timeout_seconds),
        match_policy: Some("Equivalent".to_string()),
        client_config: client_config(opts),
        rules: Some(vec![rule]),
        ..Default::default()
    }
}

/// The label-protection webhooks: for each protection label key, one DELETE webhook
/// on every resource with objectSelector "key exists" (a LabelSelector cannot OR
/// keys), and under strict mode one UPDATE webhook whose matchCondition passes only
/// removals or changes of that key.
pub fn label_webhooks(
    labels: &ProtectionLabels,
    strict: bool,
    opts: &InstallOptions,
) -> Vec<ValidatingWebhook> {
    let mut out = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let mut delete = webhook(
            format!("delete-label-{i}.holdfast.dev"),
            opts,
            all_resources("DELETE"),
        );
        delete.object_selector = Some(exists(&label.key));
        out.push(delete);
        if strict {
            let mut update = webhook(
                format!("strict-label-{i}.holdfast.dev"),
                opts,
                all_resources("UPDATE"),
            );
            update.object_selector = Some(exists(&label.key));
            update.match_conditions = Some(vec![MatchCondition {
                name: "protection-label-removed-or-changed".to_string(),
                expression: label_changed_condition(&label.key),
            }]);
            out.push(update);
        }
    }
    out
}

/// The whole configuration named `holdfast`.
pub fn desired_configuration(
    labels: &ProtectionLabels,
    strict: bool,
    opts: &InstallOptions,
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(WEBHOOK_CONFIGURATION_NAME.to_string()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    "holdfast-controller".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        webhooks: Some(label_webhooks(labels, strict, opts)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::ProtectionLabel;

    fn opts() -> InstallOptions {
        InstallOptions {
            target: WebhookTarget::Url("https://127.0.0.1:8443/validate".into()),
            ca_bundle: b"PEM".to_vec(),
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: 10,
        }
    }

    #[test]
    fn one_delete_webhook_per_key_and_strict_updates() {
        let labels =
            ProtectionLabels::with_extra(["resourcetemplate.karmada.io/deletion-protected=Always"
                .parse::<ProtectionLabel>()
                .expect("valid")]);
        let hooks = label_webhooks(&labels, false, &opts());
        assert_eq!(hooks.len(), 2);
        assert!(hooks.iter().all(|h| h.match_conditions.is_none()));
        let keys: Vec<_> = hooks
            .iter()
            .map(|h| {
                h.object_selector
                    .as_ref()
                    .and_then(|s| s.match_expressions.as_ref())
                    .map(|e| e[0].key.clone())
            })
            .collect();
        assert_eq!(
            keys,
            vec![
                Some("holdfast.dev/protected".to_string()),
                Some("resourcetemplate.karmada.io/deletion-protected".to_string())
            ]
        );
        let strict = label_webhooks(&labels, true, &opts());
        assert_eq!(strict.len(), 4);
        let update = &strict[1];
        assert_eq!(
            update.rules.as_ref().map(|r| r[0].operations.clone()),
            Some(Some(vec!["UPDATE".to_string()]))
        );
        let cond = &update.match_conditions.as_ref().expect("condition")[0].expression;
        assert!(cond.starts_with("oldObject != null"));
        assert!(cond.contains("'holdfast.dev/protected' in oldObject.metadata.labels"));
    }

    #[test]
    fn service_target_uses_validate_path() {
        let mut o = opts();
        o.target = WebhookTarget::Service {
            namespace: "holdfast-system".into(),
            name: "holdfast-webhook".into(),
            port: 443,
        };
        let cfg = desired_configuration(&ProtectionLabels::default(), false, &o);
        let hooks = cfg.webhooks.expect("webhooks");
        let svc = hooks[0].client_config.service.as_ref().expect("service");
        assert_eq!(svc.path.as_deref(), Some("/validate"));
        assert_eq!(cfg.metadata.name.as_deref(), Some("holdfast"));
    }

    #[test]
    fn failure_policy_parses() {
        assert_eq!("Ignore".parse(), Ok(FailurePolicy::Ignore));
        assert!("Maybe".parse::<FailurePolicy>().is_err());
    }
}
