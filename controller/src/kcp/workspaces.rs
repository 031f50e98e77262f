//! kcp: workspace containment's configuration `holdfast-workspaces`, kept in the
//! workspace that exports `tenancy.kcp.io` (`root`), where kcp looks for the
//! configurations of every Workspace DELETE (kcp-facts 27). Watched there (by name
//! and holdfast's label: a foreign object of the name is left alone), put back when
//! changed or deleted, and removed on cleanup.

use holdfast_shared::{
    names::FIELD_MANAGER,
    watch::{Cache, NotFound, spawn_cache},
    webhookconfig::{InstallOptions, MANAGED_BY_LABEL, MANAGED_BY_VALUE, matches_desired},
    workspaces::{CONFIGURATION_NAME, configuration},
};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
    runtime::watcher,
};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::reconcile::Failure;

/// The configuration `holdfast-workspaces` in one workspace.
pub struct WorkspacesConfiguration {
    /// The workspace's path.
    path: String,
    api: Api<ValidatingWebhookConfiguration>,
    live: Cache<ValidatingWebhookConfiguration>,
    /// Whether a refused write was reported (said once until it works).
    warned: AtomicBool,
}

impl WorkspacesConfiguration {
    /// Watches the configuration in workspace `path` through `client` (a client of
    /// that workspace), calling `wake` on every change.
    pub fn new(
        path: &str,
        client: Client,
        wake: impl Fn() + Send + 'static,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
        let (live, task) = spawn_cache(
            api.clone(),
            watcher::Config::default()
                .fields(&format!("metadata.name={CONFIGURATION_NAME}"))
                .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
            NotFound::Unknown,
            wake,
        );
        let this = Self {
            path: path.to_string(),
            api,
            live,
            warned: AtomicBool::new(false),
        };
        (this, task)
    }

    /// Makes the configuration what `opts` says (nothing until the watch listed).
    /// A refused write is logged once and is no error of the pass: the rest of
    /// holdfast works without workspace containment.
    pub async fn ensure(&self, opts: &InstallOptions) -> Result<(), Failure> {
        if !self.live.synced() {
            return Ok(());
        }
        let want = configuration(opts);
        if let Some(live) = self.live.state().first()
            && matches_desired(live, &want)
        {
            return Ok(());
        }
        tracing::info!(workspace = %self.path, "installing ValidatingWebhookConfiguration {CONFIGURATION_NAME} (workspace containment)");
        let failed = |source: anyhow::Error| Failure::Containment {
            path: self.path.clone(),
            source,
        };
        let mut body = serde_json::to_value(&want).map_err(|e| failed(e.into()))?;
        body["apiVersion"] = "admissionregistration.k8s.io/v1".into();
        body["kind"] = "ValidatingWebhookConfiguration".into();
        match self
            .api
            .patch(
                CONFIGURATION_NAME,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
        {
            Ok(_) => {
                self.warned.store(false, Ordering::Relaxed);
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 403 => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(workspace = %self.path, error = %s.message, "may not write ValidatingWebhookConfiguration {CONFIGURATION_NAME} there (manifests/overlays/kcp/workspace/root grants it): Workspace DELETEs are not checked, so deleting a workspace deletes its protected objects, until it may");
                }
                Ok(())
            }
            Err(e) => Err(failed(e.into())),
        }
    }

    /// Deletes the configuration (cleanup on shutdown), if holdfast's is there.
    pub async fn remove(&self) {
        if self.live.state().is_empty() {
            return;
        }
        match self
            .api
            .delete(CONFIGURATION_NAME, &Default::default())
            .await
        {
            Ok(_) => {
                tracing::info!(workspace = %self.path, "cleanup on shutdown: deleted ValidatingWebhookConfiguration {CONFIGURATION_NAME}")
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::error!(workspace = %self.path, error = %e, "cleanup on shutdown failed")
            }
        }
    }
}
