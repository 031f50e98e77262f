//! Agreement with the controller on the settings both binaries must share.
//!
//! The controller records its `--strict` and `--protection-label` settings in the
//! annotation `holdfast.dev/settings` of the configuration `holdfast` it installs
//! (Kubernetes and Karmada). A webhook whose own settings differ would allow what
//! those webhooks route to it (label removals under strict mode, deletions of
//! objects carrying a label it does not know), so it refuses to run: at start it
//! exits before serving, and while serving it drains and exits when the
//! configuration changes to settings it does not share. A configuration not
//! installed yet, without the annotation, or an API server that cannot be read
//! is not a disagreement (logged, checked again).

use std::{path::Path, time::Duration};

use holdfast_shared::{
    labels::ProtectionLabels,
    names::WEBHOOK_CONFIGURATION_NAME,
    webhookconfig::{SETTINGS_ANNOTATION, settings_disagreement},
};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;

/// Longest wait for the configuration when checking it.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The webhook's settings disagree with the controller's.
#[derive(Debug, thiserror::Error)]
#[error(
    "settings differ from those the controller installed the configuration \"{configuration}\" for: {detail}; start both binaries with the same HOLDFAST_STRICT and HOLDFAST_PROTECTION_LABELS"
)]
pub struct Disagreement {
    /// The configuration's name.
    pub configuration: String,
    /// What differs.
    pub detail: String,
}

/// Checks the configuration against `labels` and `strict`.
pub struct SettingsCheck {
    api: Api<ValidatingWebhookConfiguration>,
    labels: ProtectionLabels,
    strict: bool,
}

/// What one check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The annotation names the same settings.
    Agree,
    /// No configuration, or one without the annotation.
    Unknown(String),
}

impl SettingsCheck {
    /// A check through the API server of `kubeconfig` (else inferred); `None`
    /// when no client can be built (logged).
    pub async fn new(
        kubeconfig: Option<&Path>,
        labels: ProtectionLabels,
        strict: bool,
    ) -> Option<Self> {
        let client = match holdfast_shared::kubeconfig::client(kubeconfig).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(
                    error = %holdfast_shared::report::one_line(e.chain().map(ToString::to_string)),
                    "cannot check the controller's settings: no API client"
                );
                return None;
            }
        };
        Some(Self {
            api: Api::all(client),
            labels,
            strict,
        })
    }

    /// One check.
    pub async fn check(&self) -> Result<Outcome, Disagreement> {
        let get = self.api.get_opt(WEBHOOK_CONFIGURATION_NAME);
        let live = match tokio::time::timeout(READ_TIMEOUT, get).await {
            Ok(Ok(live)) => live,
            Err(_) => {
                return Ok(Outcome::Unknown(format!(
                    "no answer within {}s reading the configuration \"{WEBHOOK_CONFIGURATION_NAME}\"",
                    READ_TIMEOUT.as_secs()
                )));
            }
            Ok(Err(e)) => {
                return Ok(Outcome::Unknown(format!(
                    "cannot read the configuration \"{WEBHOOK_CONFIGURATION_NAME}\": {e}"
                )));
            }
        };
        let Some(live) = live else {
            return Ok(Outcome::Unknown(format!(
                "no configuration \"{WEBHOOK_CONFIGURATION_NAME}\" installed yet"
            )));
        };
        let Some(annotation) = live
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SETTINGS_ANNOTATION))
        else {
            return Ok(Outcome::Unknown(format!(
                "the configuration \"{WEBHOOK_CONFIGURATION_NAME}\" has no {SETTINGS_ANNOTATION} annotation"
            )));
        };
        match settings_disagreement(annotation, &self.labels, self.strict) {
            None => Ok(Outcome::Agree),
            Some(detail) => Err(Disagreement {
                configuration: WEBHOOK_CONFIGURATION_NAME.to_string(),
                detail,
            }),
        }
    }

    /// Checks every `every` until `stop` turns true (then `Ok`) or the settings
    /// disagree (then that error).
    pub async fn watch(
        self,
        every: Duration,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<(), Disagreement> {
        let mut last: Option<Outcome> = None;
        loop {
            let outcome = self.check().await?;
            if last.as_ref() != Some(&outcome) {
                match &outcome {
                    Outcome::Agree => {
                        tracing::info!("settings agree with the controller's configuration")
                    }
                    Outcome::Unknown(why) => {
                        tracing::info!(reason = %why, "controller settings not known yet")
                    }
                }
                last = Some(outcome);
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.cancelled() => return Ok(()),
            }
            if stop.is_cancelled() {
                return Ok(());
            }
        }
    }
}
