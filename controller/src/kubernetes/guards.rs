//! The guards beside the configuration: the backstop ValidatingAdmissionPolicy
//! and holdfast's self-protection.

use super::*;

/// The self-protection of the installation: the controller's identity (a
/// SelfSubjectReview), `admin_groups`, and the namespace it runs in
/// (`$POD_NAMESPACE`, else `holdfast-system`).
pub async fn self_protection(client: &Client, admin_groups: &[String]) -> Option<SelfProtection> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = SelfSubjectReview::default();
    let identity = match api.create(&PostParams::default(), &review).await {
        Ok(r) => r
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot learn the controller's identity (SelfSubjectReview); holdfast's installation is not guarded by a ValidatingAdmissionPolicy");
            None
        }
    }?;
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "holdfast-system".to_string());
    tracing::info!(%identity, admin_groups = ?admin_groups, %namespace, "guarding holdfast's installation with ValidatingAdmissionPolicy {SELF_PROTECTION_NAME}");
    Some(SelfProtection {
        identity,
        admin_groups: admin_groups.to_vec(),
        namespace,
    })
}

/// Installs (or restores) the self-protection policy and its binding when they
/// are missing or differ, with server-side apply.
async fn ensure_self_protection(client: &Client, sp: &SelfProtection) -> anyhow::Result<()> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let want = sp.policy();
    let live = policies.get_opt(SELF_PROTECTION_NAME).await?;
    if live.as_ref().map(|l| &l.spec) != Some(&want.spec) {
        tracing::info!("applying ValidatingAdmissionPolicy {SELF_PROTECTION_NAME}");
        crate::backstop::apply(client, SELF_PROTECTION_NAME, &want).await?;
    }
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let want = sp.binding();
    let live = bindings.get_opt(SELF_PROTECTION_NAME).await?;
    let same = live.as_ref().is_some_and(|l| {
        l.spec.policy_name == want.spec.policy_name
            && l.spec.validation_actions == want.spec.validation_actions
            && l.spec.match_resources.is_none()
            && l.spec.param_ref.is_none()
    });
    if !same {
        tracing::info!("applying ValidatingAdmissionPolicyBinding {SELF_PROTECTION_NAME}");
        crate::backstop::apply(client, SELF_PROTECTION_NAME, &want).await?;
    }
    Ok(())
}

/// Deletes the self-protection binding and policy (cleanup on shutdown).
pub async fn delete_self_protection(client: &Client) {
    crate::backstop::delete_policy_and_binding(
        client,
        SELF_PROTECTION_NAME,
        "the self-protection policy",
    )
    .await;
}

/// Applies `desired` with server-side apply (field manager `holdfast`, forced);
/// if fields of other managers survive (a real API server keeps what it does not
/// own), replaces the object so it is exactly the desired one.
pub async fn apply_configuration(
    client: &Client,
    desired: &ValidatingWebhookConfiguration,
) -> anyhow::Result<ValidatingWebhookConfiguration> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut body = serde_json::to_value(desired)?;
    body["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    body["kind"] = "ValidatingWebhookConfiguration".into();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api
        .patch(WEBHOOK_CONFIGURATION_NAME, &pp, &Patch::Apply(&body))
        .await?;
    if matches_desired(&applied, desired) {
        return Ok(applied);
    }
    tracing::info!("server-side apply left foreign fields; replacing {WEBHOOK_CONFIGURATION_NAME}");
    let mut replacement = desired.clone();
    replacement.metadata.resource_version = applied.metadata.resource_version.clone();
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    Ok(api
        .replace(WEBHOOK_CONFIGURATION_NAME, &pp, &replacement)
        .await?)
}

/// Deletes the configuration (cleanup on shutdown); absent is fine.
pub async fn delete_configuration(client: &Client) -> anyhow::Result<bool> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    match api
        .delete(WEBHOOK_CONFIGURATION_NAME, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl Reconciler {
    /// Installs, updates or removes the backstop (see [`crate::backstop`]);
    /// failures are logged, never fatal (the webhook still protects).
    pub(super) async fn keep_backstop(&mut self) {
        let strict_exempt = if self.settings.strict {
            self.crds
                .state()
                .iter()
                .filter(|c| {
                    c.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(holdfast_shared::names::STRICT_EXEMPT_LABEL))
                        .is_some_and(|v| v == "true")
                })
                .map(|c| (c.spec.group.clone(), c.spec.names.plural.clone()))
                .collect()
        } else {
            Default::default()
        };
        let want = crate::backstop::Backstop {
            labels: self.settings.labels.clone(),
            strict: self.settings.strict,
            strict_exempt,
        };
        let wanted = self.settings.backstop && !want.validations().is_empty();
        if !wanted {
            self.metrics_backstop_missing(false);
        }
        // Where the API server does not serve them, there is nothing to install
        // or remove; asked again every resync.
        let stale = self
            .backstop_served
            .is_none_or(|(served, at)| !served && at.elapsed() >= self.settings.resync);
        if stale {
            match crate::backstop::served(&self.client).await {
                Ok(served) => {
                    if !served && wanted && self.backstop_served.is_none() {
                        tracing::warn!(
                            "the API server does not serve {} ValidatingAdmissionPolicies; the backstop is not installed (label protection relies on the webhook alone)",
                            crate::backstop::GROUP_VERSION
                        );
                    }
                    self.backstop_served = Some((served, std::time::Instant::now()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "discovery of ValidatingAdmissionPolicies failed; the backstop is not checked this pass");
                    return;
                }
            }
        }
        if !self.backstop_served.is_some_and(|(served, _)| served) {
            self.metrics_backstop_missing(wanted);
            return;
        }
        let watches = self
            .backstop
            .get_or_insert_with(|| crate::backstop::Watches::start(&self.client, &self.notify));
        let name = holdfast_shared::backstop::BACKSTOP_NAME;
        if wanted {
            let installed = crate::backstop::ensure(&self.client, watches, &want).await;
            if let Err(e) = &installed {
                tracing::warn!(error = %format!("{e:#}"), "cannot install the backstop ValidatingAdmissionPolicy {name}");
            }
            self.metrics_backstop_missing(installed.is_err());
        } else if let Err(e) = crate::backstop::remove(&self.client, watches).await {
            tracing::warn!(error = %format!("{e:#}"), "cannot remove the backstop ValidatingAdmissionPolicy {name}");
        }
    }

    /// Keeps holdfast's own guards: the self-protection policy and the backstop.
    /// Failures are logged; the webhook still protects.
    pub(super) async fn keep_guards(&mut self) {
        if let Some(sp) = &self.settings.self_protection
            && let Err(e) = ensure_self_protection(&self.client, sp).await
        {
            tracing::warn!(error = %format!("{e:#}"), "cannot install ValidatingAdmissionPolicy {SELF_PROTECTION_NAME}; holdfast's installation is not guarded");
        }
        self.keep_backstop().await;
    }
}
