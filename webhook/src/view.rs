//! The webhook's view of cluster state, as the policies see it.
//!
//! Label and strict-mode decisions need nothing from the API server. The registry of
//! policy objects (ResourceProtection, AnchorRule, DependencyRule, CriticalService)
//! plugs in here: until every registry source has loaded, `policies_loaded` is false,
//! `/readyz` answers 503 and DELETEs a policy object could govern are denied with
//! "retry later". A view with no registry sources is loaded from the start.

use holdfast_shared::{policy::ClusterView, review::AdmissionRequest, topology::Topology};
use std::{
    path::Path,
    sync::Arc,
    sync::atomic::{AtomicBool, Ordering},
};

/// What the webhook knows of the cluster.
pub struct WebhookView {
    topology: Topology,
    client: Option<kube::Client>,
    loaded: AtomicBool,
    sources: usize,
}

impl WebhookView {
    /// Builds the view. An API server that cannot be configured is logged, not fatal:
    /// label decisions do not need it.
    pub async fn new(
        topology: Topology,
        kubeconfig: Option<&Path>,
    ) -> Arc<dyn ClusterView + Send + Sync> {
        let client = match client(kubeconfig).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "no API server client; label decisions work, policy objects cannot be loaded");
                None
            }
        };
        let view = WebhookView {
            topology,
            client,
            loaded: AtomicBool::new(false),
            sources: 0,
        };
        // No registry sources are wired yet: nothing to wait for.
        if view.sources == 0 {
            view.loaded.store(true, Ordering::Release);
        }
        tracing::debug!(topology = %view.topology, has_client = view.client.is_some(), "cluster view ready");
        Arc::new(view)
    }
}

async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

impl ClusterView for WebhookView {
    fn policies_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
        // Before loading, any source could govern anything.
        self.sources > 0 && !self.policies_loaded()
    }
}
