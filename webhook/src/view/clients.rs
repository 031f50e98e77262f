//! How the view reaches a cluster: its own API client (the cluster on Kubernetes;
//! the holdfast workspace on kcp), a client per logical cluster through the
//! front-proxy and per virtual-workspace URL (kcp), and the resources resolved
//! through discovery.

use crate::stores::{ResolveError, Resolver};
use holdfast_shared::{api::common::GroupResource, policy::LookupError, topology::Topology};
use kube::{Client, api::ApiResource};

/// Logical clusters with a cached API client at most (kcp).
const MAX_CLUSTER_CLIENTS: u64 = 1024;

/// The clients of the view, and the resources it resolved.
pub(super) struct Clients {
    topology: Topology,
    /// The API server of the configuration (None: none could be built).
    home: Option<Client>,
    /// Per-URL clients (kcp), one connection pool per server, bounded: a review names
    /// its logical cluster, so the set of names is the caller's choice.
    per_url: Option<holdfast_shared::kcp::Clients>,
    resolver: Resolver,
    /// How many per-URL clients are cached (the `cluster_clients` gauge).
    cached: prometheus::IntGauge,
}

impl Clients {
    /// The clients of `home` (the configuration's API server), and on kcp those for
    /// URLs derived from `base` (with `virtual_workspaces`' credentials for
    /// virtual-workspace URLs, when given).
    pub(super) fn new(
        topology: Topology,
        home: Option<Client>,
        base: Option<kube::Config>,
        virtual_workspaces: Option<kube::Config>,
        cached: prometheus::IntGauge,
    ) -> Self {
        Self {
            topology,
            home,
            per_url: base.map(|c| {
                holdfast_shared::kcp::Clients::new(c, MAX_CLUSTER_CLIENTS)
                    .with_virtual_workspace_config(virtual_workspaces)
            }),
            resolver: Resolver::default(),
            cached,
        }
    }

    /// The configuration's API server, if a client could be built.
    pub(super) fn home(&self) -> Option<&Client> {
        self.home.as_ref()
    }

    /// The per-URL clients (kcp: virtual workspaces, logical clusters), if configured.
    pub(super) fn per_url(&self) -> Option<&holdfast_shared::kcp::Clients> {
        self.per_url.as_ref()
    }

    /// A client addressing logical cluster `lc` through the front-proxy (kcp), or the
    /// cluster itself (Kubernetes).
    pub(super) fn cluster(&self, lc: &str) -> Result<Client, LookupError> {
        let no_client = || LookupError::unreadable("no API server client is configured");
        if self.topology == Topology::Kubernetes || lc.is_empty() {
            return self.home.clone().ok_or_else(no_client);
        }
        let clients = self.per_url.as_ref().ok_or_else(no_client)?;
        let client = clients.cluster(lc).map_err(LookupError::from_error)?;
        self.cached
            .set(i64::try_from(clients.urls().cached()).unwrap_or(i64::MAX));
        Ok(client)
    }

    /// The ApiResource and scope (namespaced?) of `gr` in `cluster`, through
    /// `client`'s discovery (kept until [`Self::forget_resolved`]).
    pub(super) async fn resolve(
        &self,
        client: &Client,
        cluster: &str,
        gr: &GroupResource,
    ) -> Result<(ApiResource, bool), ResolveError> {
        self.resolver.resolve(client, cluster, gr).await
    }

    /// Forgets every resource resolved (discovery ran again).
    pub(super) fn forget_resolved(&self) {
        self.resolver.clear();
    }

    /// The lookup error of a failed read of `gr` in `cluster`. On kcp a 403 names the
    /// grant the consumer gives in that workspace (on Kubernetes, the ClusterRole the
    /// controller keeps).
    pub(super) fn read_error(
        &self,
        cluster: &str,
        gr: &GroupResource,
        e: kube::Error,
    ) -> LookupError {
        if self.topology == Topology::Kcp && crate::stores::is_forbidden(&e) {
            return LookupError::unreadable(format!(
                "holdfast-webhook may not read {gr} in workspace {cluster}: grant it get and \
                 list on {gr} there (docs/kcp.md, Consumer guide)"
            ));
        }
        crate::stores::lookup_error(&gr.to_string(), e)
    }
}

#[cfg(test)]
mod tests {
    use crate::view::{DependentsMode, test_view};
    use holdfast_shared::{api::common::GroupResource, topology::Topology};

    #[test]
    fn a_forbidden_read_on_kcp_names_the_consumer_grant() {
        let e = || {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("refused", "").with_code(403),
            ))
        };
        let pvcs = GroupResource::new("", "persistentvolumeclaims");
        let kcp = test_view(Topology::Kcp, DependentsMode::Live);
        assert_eq!(
            kcp.clients.read_error("lc-a", &pvcs, e()).to_string(),
            "holdfast-webhook may not read persistentvolumeclaims in workspace lc-a: grant it \
             get and list on persistentvolumeclaims there (docs/kcp.md, Consumer guide)"
        );
        let kubernetes = test_view(Topology::Kubernetes, DependentsMode::Live);
        assert_eq!(
            kubernetes.clients.read_error("", &pvcs, e()).to_string(),
            crate::stores::unreadable_error("persistentvolumeclaims").to_string()
        );
    }
}
