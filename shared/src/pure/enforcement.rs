//! kcp: "Ready means enforced".
//!
//! kcp's admission reads webhook configurations, a workspace's own included, from
//! data replicated through the cache server (kcp-facts 22), so a configuration
//! the controller just wrote is enforced some time later, or never while the
//! cache server is down. Every kcp configuration `holdfast` therefore carries one
//! more webhook, the enforcement probe: it receives only the CREATE of a (core)
//! Event named after a digest of the configuration's other webhooks
//! ([`probe_name`], recorded in [`ANNOTATION`]) and the webhook always refuses it
//! ([`MESSAGE`]). The controller sends that CREATE as a server-side dry run into
//! the workspace: an answer naming the probe webhook proves kcp enforces this very
//! configuration there; an admitted dry run proves it does not yet. Nothing is
//! ever written.

use crate::webhookconfig::{InstallOptions, webhook, with_path_suffix};
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, RuleWithOperations, ValidatingWebhook,
};

/// The probe webhook's name.
pub const WEBHOOK_NAME: &str = "enforcement-probe.holdfast.dev";
/// Annotation on a kcp configuration `holdfast`: the name of its probe Event.
pub const ANNOTATION: &str = "holdfast.dev/enforcement-probe";
/// What follows the webhook's `/validate` path on the probe's route.
pub const PATH_SUFFIX: &str = "/enforcement-probe";
/// The namespace of the probe Event (every kcp workspace has it once Ready).
pub const NAMESPACE: &str = "default";
/// The probe webhook's answer.
pub const MESSAGE: &str = "holdfast enforcement probe: kcp enforces this ValidatingWebhookConfiguration here (nothing is created)";
/// The prefix of every probe Event's name.
const PREFIX: &str = "holdfast-enforcement-probe-";

/// The probe Event's name for a configuration with these `webhooks` (the probe
/// excluded): a digest of them, so a configuration that routes anything else gets
/// another name and is probed again.
pub fn probe_name(webhooks: &[ValidatingWebhook]) -> String {
    let bytes = serde_json::to_vec(webhooks).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let hex: String = digest
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{PREFIX}{hex}")
}

/// The probe webhook for the Event `name`: CREATE of core Events whose
/// name is `name` (a matchCondition: any other Event is not sent), to the
/// webhook's probe route. Fails closed, as the configuration's other webhooks.
pub fn probe_webhook(name: &str, opts: &InstallOptions) -> ValidatingWebhook {
    let rule = RuleWithOperations {
        operations: Some(vec!["CREATE".to_string()]),
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["*".to_string()]),
        resources: Some(vec!["events".to_string()]),
        scope: Some("Namespaced".to_string()),
    };
    let mut hook = webhook(WEBHOOK_NAME.to_string(), opts, rule);
    with_path_suffix(&mut hook, PATH_SUFFIX);
    hook.match_policy = Some("Exact".to_string());
    hook.match_conditions = Some(vec![MatchCondition {
        name: "the-probe-event".to_string(),
        // `name` is [a-z0-9-] only: no quoting needed.
        expression: format!("object.metadata.name == '{name}'"),
    }]);
    hook
}

/// Whether an API server's answer to the probe's dry-run CREATE names the probe
/// webhook: refused by it, or failed calling it (either way kcp called it, so
/// the configuration is in effect).
pub fn answered_by_probe(message: &str) -> bool {
    message.contains(&format!("\"{WEBHOOK_NAME}\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhookconfig::tests::opts;

    #[test]
    fn the_probe_name_follows_what_the_configuration_routes() {
        let a = probe_webhook("x", &opts());
        let mut b = a.clone();
        b.name = "other.holdfast.dev".into();
        let one = probe_name(std::slice::from_ref(&a));
        assert_eq!(one, probe_name(std::slice::from_ref(&a)), "stable");
        assert_ne!(one, probe_name(&[b]));
        assert!(
            one.starts_with(PREFIX) && one.len() == PREFIX.len() + 16,
            "{one}"
        );
        assert!(
            one.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "a DNS subdomain that needs no quoting in CEL: {one}"
        );
    }

    #[test]
    fn the_probe_webhook_sees_only_its_event() {
        let h = probe_webhook("holdfast-enforcement-probe-0123", &opts());
        assert_eq!(h.name, WEBHOOK_NAME);
        assert_eq!(
            h.client_config.url.as_deref(),
            Some("https://127.0.0.1:8443/validate/enforcement-probe")
        );
        assert_eq!(h.failure_policy.as_deref(), Some("Fail"));
        let v = serde_json::to_value(&h).expect("json");
        assert_eq!(
            v["rules"],
            serde_json::json!([{"apiGroups": [""], "apiVersions": ["*"],
                "operations": ["CREATE"], "resources": ["events"], "scope": "Namespaced"}])
        );
        assert_eq!(
            v["matchConditions"][0]["expression"],
            "object.metadata.name == 'holdfast-enforcement-probe-0123'"
        );
    }

    #[test]
    fn only_an_answer_naming_the_probe_counts() {
        assert!(answered_by_probe(&format!(
            "admission webhook \"{WEBHOOK_NAME}\" denied the request: {MESSAGE}"
        )));
        assert!(answered_by_probe(&format!(
            "Internal error occurred: failed calling webhook \"{WEBHOOK_NAME}\": connection refused"
        )));
        assert!(!answered_by_probe(
            "admission webhook \"other.holdfast.dev\" denied the request: no"
        ));
        assert!(!answered_by_probe("namespaces \"default\" not found"));
    }
}
