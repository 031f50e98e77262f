//! kcp: workspace containment's configuration.
//!
//! Every workspace gets `workspaces.tenancy.kcp.io` by binding the `tenancy.kcp.io`
//! APIExport of `root` (root binds it too), and kcp admits a bound type only
//! through the configurations of the export's workspace (kcp-facts 12, 27). So a
//! Workspace DELETE anywhere reaches one configuration only: holdfast's
//! `holdfast-workspaces` in `root`, whose one webhook sends it to
//! `<webhook URL>/kcp-workspaces`. There the webhook refuses it while the workspace,
//! or a workspace below it that binds holdfast, holds a protected object.

use crate::webhookconfig::{InstallOptions, webhook, with_path_suffix};
use k8s_openapi::{
    api::admissionregistration::v1::{RuleWithOperations, ValidatingWebhookConfiguration},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// The configuration's name in the workspace exporting `tenancy.kcp.io`.
pub const CONFIGURATION_NAME: &str = "holdfast-workspaces";
/// Its one webhook.
pub const WEBHOOK_NAME: &str = "workspaces.holdfast.dev";
/// What follows the webhook's `/validate` path on the route of Workspace DELETEs.
pub const PATH_SUFFIX: &str = "/kcp-workspaces";
/// The workspace whose `tenancy.kcp.io` export every workspace binds, by default.
pub const DEFAULT_TENANCY_WORKSPACE: &str = "root";

/// The configuration `holdfast-workspaces`: every Workspace DELETE to the
/// webhook's workspace route.
pub fn configuration(opts: &InstallOptions) -> ValidatingWebhookConfiguration {
    let rule = RuleWithOperations {
        operations: Some(vec!["DELETE".to_string()]),
        api_groups: Some(vec!["tenancy.kcp.io".to_string()]),
        api_versions: Some(vec!["*".to_string()]),
        resources: Some(vec!["workspaces".to_string()]),
        scope: Some("Cluster".to_string()),
    };
    let mut hook = webhook(WEBHOOK_NAME.to_string(), opts, rule);
    with_path_suffix(&mut hook, PATH_SUFFIX);
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(CONFIGURATION_NAME.to_string()),
            labels: Some(
                [(
                    crate::webhookconfig::MANAGED_BY_LABEL.to_string(),
                    crate::webhookconfig::MANAGED_BY_VALUE.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        webhooks: Some(vec![hook]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhookconfig::{FailurePolicy, WebhookTarget};

    #[test]
    fn every_workspace_delete_goes_to_the_workspace_route() {
        let opts = InstallOptions {
            target: WebhookTarget::Url("https://hooks.example:8443/validate".into()),
            ca_bundle: b"CA".to_vec(),
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: 10,
        };
        let cfg = configuration(&opts);
        assert_eq!(cfg.metadata.name.as_deref(), Some("holdfast-workspaces"));
        let hooks = cfg.webhooks.expect("webhooks");
        assert_eq!(hooks.len(), 1);
        let h = &hooks[0];
        assert_eq!(
            h.client_config.url.as_deref(),
            Some("https://hooks.example:8443/validate/kcp-workspaces")
        );
        assert_eq!(h.failure_policy.as_deref(), Some("Fail"));
        let rules = serde_json::to_value(&h.rules).expect("rules");
        assert_eq!(
            rules,
            serde_json::json!([{"apiGroups": ["tenancy.kcp.io"], "apiVersions": ["*"],
                "operations": ["DELETE"], "resources": ["workspaces"], "scope": "Cluster"}])
        );
    }
}
