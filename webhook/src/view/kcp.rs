//! kcp: clients for the virtual workspaces of APIExports (the holdfast export, whose
//! virtual workspace serves the policy objects of every binding workspace, and a
//! dependent type's own export), found through APIExportEndpointSlices.

use super::WebhookView;
use holdfast_shared::registry::CompiledDependency;
use kube::Client;
use std::time::Duration;

/// First and longest delay between reads of the holdfast APIExportEndpointSlice.
const SLICE_RETRY_FIRST: Duration = Duration::from_millis(200);
const SLICE_RETRY_MAX: Duration = Duration::from_secs(10);

impl WebhookView {
    /// kcp: a client for `/clusters/*` of the holdfast APIExport's virtual workspace,
    /// whose URL comes from the APIExportEndpointSlice of the same name in the
    /// workspace the kubeconfig points at. Retries until the slice has an endpoint.
    pub(super) async fn virtual_workspace_client(&self, client: &Client) -> Client {
        let mut delay = SLICE_RETRY_FIRST;
        loop {
            match self.export_client(client, &self.apiexport).await {
                Ok((c, url)) => {
                    tracing::info!(%url, apiexport = %self.apiexport, "reading policy objects through the APIExport virtual workspace");
                    return c;
                }
                Err(why) => tracing::warn!(apiexport = %self.apiexport, "{why}; retrying"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(SLICE_RETRY_MAX);
        }
    }

    /// A client for `/clusters/*` of the virtual workspace of APIExport `export`, whose
    /// URL is in the APIExportEndpointSlice of the same name in `client`'s workspace;
    /// with that URL.
    async fn export_client(
        &self,
        client: &Client,
        export: &str,
    ) -> Result<(Client, String), String> {
        let url = holdfast_shared::kcp::endpoint_url(client, export)
            .await
            .map_err(|e| e.to_string())?;
        let clients = self
            .cluster_clients
            .as_ref()
            .ok_or_else(|| "no API server configuration".to_string())?;
        let c = clients
            .virtual_workspace(&format!("{url}/clusters/*"))
            .map_err(|e| format!("cannot build the client: {e}"))?;
        Ok((c, url))
    }

    /// On kcp: a client for `/clusters/*` of the dependent type's own APIExport
    /// virtual workspace (every workspace binding that export), when the export has an
    /// APIExportEndpointSlice of its name in the rule's workspace that holdfast may
    /// read; `None` otherwise (the dependents are then read live, per request).
    pub(super) async fn dependent_export_client(&self, dep: &CompiledDependency) -> Option<Client> {
        let export = dep.dependent_export.as_deref()?;
        if dep.rule.cluster.is_empty() {
            return None;
        }
        let client = self.cluster_client(&dep.rule.cluster).ok()?;
        let (client, url) = self.export_client(&client, export).await.ok()?;
        tracing::info!(resource = %dep.dependent_gr(), apiexport = export, %url, "watching dependents through the virtual workspace of their APIExport");
        Some(client)
    }
}
