//! kcp plumbing both binaries use: the logical cluster of an object, the front-proxy a
//! kubeconfig points at, clients per logical cluster, the URL an APIExportEndpointSlice
//! lists, and workspace paths resolved to logical clusters.

use std::time::Duration;

use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};
use tokio::sync::watch;

use crate::{
    clients::{ClientError, UrlClients},
    names::KCP_CLUSTER_ANNOTATION,
};

/// Per-URL clients kept at most by default (workspaces written to or read, plus a few).
pub const MAX_CLIENTS: u64 = 4096;

/// How long a resolved workspace path is trusted.
pub const PATH_TTL: Duration = Duration::from_secs(300);

/// How long one read of an APIExportEndpointSlice may take.
pub const SLICE_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The logical cluster an object lives in (its `kcp.io/cluster` annotation; "" when it
/// has none, as on Kubernetes).
pub fn cluster_of<K: Resource>(obj: &K) -> String {
    obj.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(KCP_CLUSTER_ANNOTATION))
        .cloned()
        .unwrap_or_default()
}

/// A kcp logical cluster name or workspace path: lowercase letters, digits, `-` and
/// `:` separators, at most 253 characters.
pub fn is_logical_cluster_name(lc: &str) -> bool {
    !lc.is_empty()
        && lc.len() <= 253
        && lc
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b':')
}

/// `https://h:6443/clusters/root:holdfast` → `https://h:6443`.
pub fn front_proxy_of(server: &str) -> String {
    let s = server.trim_end_matches('/');
    match s.find("/clusters/") {
        Some(i) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// `tenancy.kcp.io/v1alpha1` Workspaces.
pub fn workspace_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("tenancy.kcp.io", "v1alpha1", "Workspace"),
        "workspaces",
    )
}

/// `apis.kcp.io/v1alpha1` APIExportEndpointSlices.
pub fn endpoint_slice_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apis.kcp.io", "v1alpha1", "APIExportEndpointSlice"),
        "apiexportendpointslices",
    )
}

/// Why a kcp lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum KcpError {
    /// Not a logical cluster name.
    #[error("{0:?} is not a logical cluster name")]
    BadCluster(String),
    /// No client could be built.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The APIExportEndpointSlice was not read in time.
    #[error("the APIExportEndpointSlice was not read in time")]
    SliceTimeout,
    /// Reading the APIExportEndpointSlice failed.
    #[error("cannot read the APIExportEndpointSlice: {0}")]
    SliceRead(#[source] kube::Error),
    /// The APIExportEndpointSlice does not exist.
    #[error("APIExportEndpointSlice not found")]
    SliceMissing,
    /// The APIExportEndpointSlice lists no endpoint yet.
    #[error("APIExportEndpointSlice has no endpoint yet")]
    NoEndpoint,
    /// A workspace path could not be resolved.
    #[error("{0}")]
    Path(String),
}

/// Clients for URLs derived from one kubeconfig (same credentials and TLS settings),
/// bounded; addressed by logical cluster through the front-proxy.
#[derive(Clone)]
pub struct Clients {
    urls: UrlClients,
    front_proxy: String,
}

impl Clients {
    /// Clients sharing `base`'s credentials, at most `capacity` cached.
    pub fn new(base: kube::Config, capacity: u64) -> Self {
        let front_proxy = front_proxy_of(&base.cluster_url.to_string());
        Self {
            urls: UrlClients::new(base, capacity),
            front_proxy,
        }
    }

    /// A client whose base URL is `url`.
    pub fn at(&self, url: &str) -> Result<Client, ClientError> {
        self.urls.at(url)
    }

    /// A client for logical cluster `lc` through the front-proxy (never the wildcard
    /// `*`: the front-proxy refuses it).
    pub fn cluster(&self, lc: &str) -> Result<Client, KcpError> {
        if !is_logical_cluster_name(lc) {
            return Err(KcpError::BadCluster(lc.to_string()));
        }
        Ok(self.at(&format!("{}/clusters/{lc}", self.front_proxy))?)
    }

    /// The front-proxy base URL: the kubeconfig's server without `/clusters/...`.
    pub fn front_proxy(&self) -> &str {
        &self.front_proxy
    }

    /// The per-URL clients underneath.
    pub fn urls(&self) -> &UrlClients {
        &self.urls
    }
}

/// The first endpoint URL (without a trailing `/`) of APIExportEndpointSlice `name` in
/// `client`'s workspace.
pub async fn endpoint_url(client: &Client, name: &str) -> Result<String, KcpError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &endpoint_slice_resource());
    let slice = tokio::time::timeout(SLICE_READ_TIMEOUT, api.get_opt(name))
        .await
        .map_err(|_| KcpError::SliceTimeout)?
        .map_err(KcpError::SliceRead)?
        .ok_or(KcpError::SliceMissing)?;
    slice.data["status"]["endpoints"][0]["url"]
        .as_str()
        .map(|u| u.trim_end_matches('/').to_string())
        .ok_or(KcpError::NoEndpoint)
}

/// The virtual workspace URL in APIExportEndpointSlice `name` of `home`'s workspace;
/// waits (polling every second) until it lists one, or `shutdown` fires (`None`).
pub async fn virtual_workspace_url(
    home: &Client,
    name: &str,
    mut shutdown: watch::Receiver<bool>,
) -> Option<String> {
    let mut warned = false;
    loop {
        match endpoint_url(home, name).await {
            Ok(url) => return Some(url),
            Err(e) => tracing::debug!(error = %e, "reading the APIExportEndpointSlice failed"),
        }
        if !warned {
            tracing::warn!(
                slice = name,
                "waiting for APIExportEndpointSlice {name} to list an endpoint"
            );
            warned = true;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.changed() => return None,
        }
    }
}

/// Resolves workspace paths of any depth to logical cluster names.
#[derive(Clone)]
pub struct Resolver {
    clients: Clients,
    cache: moka::future::Cache<String, String>,
}

impl Resolver {
    /// A resolver walking Workspaces through the front-proxy.
    pub fn new(clients: Clients) -> Self {
        Self {
            clients,
            cache: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(PATH_TTL)
                .build(),
        }
    }

    /// Forgets everything (a Workspace changed).
    pub fn invalidate(&self) {
        self.cache.invalidate_all();
    }

    /// The logical cluster of `path` (`root:org:network`), walking one segment at a time.
    pub async fn resolve(&self, path: &str) -> Result<String, KcpError> {
        if let Some(lc) = self.cache.get(path).await {
            return Ok(lc);
        }
        let fail = |s: String| KcpError::Path(s);
        let mut segs = path.split(':');
        if segs.next() != Some("root") {
            return Err(fail(format!(
                "workspace path {path:?} does not start at root"
            )));
        }
        let mut cur_path = "root".to_string();
        let mut cur_lc = "root".to_string();
        for seg in segs {
            let next = format!("{cur_path}:{seg}");
            if let Some(lc) = self.cache.get(&next).await {
                cur_path = next;
                cur_lc = lc;
                continue;
            }
            let client = self.clients.cluster(&cur_lc)?;
            let api: Api<DynamicObject> = Api::all_with(client, &workspace_resource());
            let ws = match api.get_opt(seg).await {
                Ok(Some(ws)) => ws,
                Ok(None) => return Err(fail(format!("workspace {seg:?} not found in {cur_path}"))),
                Err(e) => {
                    return Err(fail(format!(
                        "reading workspace {seg:?} in {cur_path}: {e}"
                    )));
                }
            };
            let Some(lc) = ws.data["spec"]["cluster"]
                .as_str()
                .filter(|s| !s.is_empty())
            else {
                return Err(fail(format!(
                    "workspace {next} is not scheduled yet (no spec.cluster)"
                )));
            };
            self.cache.insert(next.clone(), lc.to_string()).await;
            cur_path = next;
            cur_lc = lc.to_string();
        }
        Ok(cur_lc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_proxy_strips_the_cluster_path() {
        assert_eq!(
            front_proxy_of("https://kcp:6443/clusters/root:holdfast"),
            "https://kcp:6443"
        );
        assert_eq!(
            front_proxy_of("https://kcp:6443/clusters/root:holdfast/"),
            "https://kcp:6443"
        );
        assert_eq!(front_proxy_of("https://kcp:6443"), "https://kcp:6443");
    }

    #[test]
    fn logical_cluster_names_are_checked() {
        for good in ["root", "root:org:network", "2x4k-9", "a"] {
            assert!(is_logical_cluster_name(good), "{good}");
        }
        for bad in ["", "Root", "root/x", "../x", "a b", &"a".repeat(254)] {
            assert!(!is_logical_cluster_name(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn clients_address_logical_clusters_through_the_front_proxy_only() {
        let url: http::Uri = "https://kcp:6443/clusters/root:holdfast"
            .parse()
            .expect("url");
        let clients = Clients::new(kube::Config::new(url), 8);
        assert_eq!(clients.front_proxy(), "https://kcp:6443");
        assert!(clients.cluster("root:org:network").is_ok());
        for bad in ["*", "", "root/../x"] {
            match clients.cluster(bad) {
                Err(KcpError::BadCluster(lc)) => assert_eq!(lc, bad),
                Err(e) => panic!("{bad}: {e}"),
                Ok(_) => panic!("{bad} accepted"),
            }
        }
        assert_eq!(clients.urls().cached_exactly(), 1);
    }

    #[test]
    fn the_cluster_comes_from_the_annotation() {
        let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
        assert_eq!(cluster_of(&cm), "");
        cm.metadata.annotations =
            Some([(KCP_CLUSTER_ANNOTATION.to_string(), "lc1".to_string())].into());
        assert_eq!(cluster_of(&cm), "lc1");
    }
}
