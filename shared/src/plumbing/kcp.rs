//! kcp plumbing both binaries use: the logical cluster of an object, the front-proxy a
//! kubeconfig points at, clients per logical cluster and per virtual-workspace URL,
//! workspace paths resolved to logical clusters, and APIExports read.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject, GroupVersionKind},
};

use crate::{
    api::GroupResource,
    clients::{ClientError, UrlClients},
    names::KCP_CLUSTER_ANNOTATION,
};

pub use crate::topology::{is_logical_cluster_name, is_workspace_path};

/// Per-URL clients kept at most by default (workspaces written to or read, plus a few).
pub const MAX_CLIENTS: u64 = 4096;

/// How long a resolved workspace path is trusted.
pub const PATH_TTL: Duration = Duration::from_secs(300);

/// How long one read of APIExports may take.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The logical cluster an object lives in (its `kcp.io/cluster` annotation; "" when it
/// has none, and always "" in a process fixed to the Kubernetes topology, where
/// anyone who may write the object may set the annotation:
/// [`crate::topology::honours_logical_cluster`]).
pub fn cluster_of<K: Resource>(obj: &K) -> String {
    if !crate::topology::honours_logical_cluster() {
        return String::new();
    }
    obj.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(KCP_CLUSTER_ANNOTATION))
        .cloned()
        .unwrap_or_default()
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
    /// Clients for virtual-workspace URLs when they take other credentials or
    /// another CA than the front-proxy (`--virtual-workspace-kubeconfig`).
    virtual_workspaces: Option<UrlClients>,
}

impl Clients {
    /// Clients sharing `base`'s credentials, at most `capacity` cached.
    pub fn new(base: kube::Config, capacity: u64) -> Self {
        let front_proxy = front_proxy_of(&base.cluster_url.to_string());
        Self {
            urls: UrlClients::new(base, capacity),
            front_proxy,
            virtual_workspaces: None,
        }
    }

    /// The same, with `vw`'s credentials and CA for virtual-workspace URLs (those an
    /// APIExportEndpointSlice lists); its server is not used (the URLs name theirs).
    pub fn with_virtual_workspace_config(mut self, vw: Option<kube::Config>) -> Self {
        let capacity = self.urls_capacity();
        self.virtual_workspaces = vw.map(|c| UrlClients::new(c, capacity));
        self
    }

    fn urls_capacity(&self) -> u64 {
        self.urls.capacity()
    }

    /// A client for a virtual-workspace URL (from an APIExportEndpointSlice): with
    /// the virtual-workspace kubeconfig's credentials and CA when one was given,
    /// else the front-proxy's.
    pub fn virtual_workspace(&self, url: &str) -> Result<Client, ClientError> {
        self.virtual_workspace_clients().at(url)
    }

    /// The per-URL clients virtual-workspace URLs use.
    pub fn virtual_workspace_clients(&self) -> &UrlClients {
        self.virtual_workspaces.as_ref().unwrap_or(&self.urls)
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

/// The resource `plural` of kind `gvk` (`[group, version, kind]`).
fn kcp_resource([group, version, kind]: [&str; 3], plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// `core.kcp.io/v1alpha1` LogicalClusters (one per workspace, always named `cluster`).
pub fn logical_cluster_resource() -> ApiResource {
    kcp_resource(
        ["core.kcp.io", "v1alpha1", "LogicalCluster"],
        "logicalclusters",
    )
}

/// `apis.kcp.io/v1alpha2` APIBindings (the storage version).
pub fn api_binding_resource() -> ApiResource {
    kcp_resource(["apis.kcp.io", "v1alpha2", "APIBinding"], "apibindings")
}

/// `apis.kcp.io/v1alpha2` APIExports (the storage version).
pub fn api_export_resource() -> ApiResource {
    kcp_resource(["apis.kcp.io", "v1alpha2", "APIExport"], "apiexports")
}

/// Why a workspace path did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not a workspace path (`<logical cluster>(:<workspace>)*`).
    #[error("{0:?} is not a workspace path")]
    Malformed(String),
    /// kcp answered 403 (an unknown workspace and one holdfast may not enter look
    /// alike) or 404.
    #[error(
        "workspace {path} does not exist or holdfast may not access it (verb access on / there, get logicalclusters): {detail}"
    )]
    Unknown {
        /// The path.
        path: String,
        /// What each attempt answered.
        detail: String,
    },
    /// Another failure (network, 5xx, an answer without the annotation).
    #[error("resolving workspace {path}: {detail}")]
    Failed {
        /// The path.
        path: String,
        /// What failed.
        detail: String,
    },
}

impl PathError {
    /// Whether the answer was definite (the path is unknown or not accessible), as
    /// opposed to a failure worth riding out with the last known answer.
    pub fn is_definite(&self) -> bool {
        !matches!(self, Self::Failed { .. })
    }
}

/// The HTTP status of an API error, if `e` is one.
pub fn status_of(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Resolves workspace paths of any depth to logical cluster names, as kcp's
/// front-proxy does (fact 2, 15): one GET of the path's LogicalCluster, whose
/// `kcp.io/cluster` annotation names it; where that is forbidden, a walk of
/// Workspaces from the first segment (itself a logical cluster name). Answers are
/// cached for [`PATH_TTL`]; [`Resolver::invalidate`] drops them all and
/// [`Resolver::forget`] those of one logical cluster.
#[derive(Clone)]
pub struct Resolver {
    clients: Clients,
    cache: moka::future::Cache<String, String>,
}

impl Resolver {
    /// A resolver reading through the front-proxy of `clients`.
    pub fn new(clients: Clients) -> Self {
        Self {
            clients,
            cache: answers(PATH_TTL),
        }
    }

    /// Forgets everything (a resync).
    pub fn invalidate(&self) {
        self.cache.invalidate_all();
    }

    /// Forgets every path that resolved to logical cluster `lc` (a read or write
    /// there answered 403 or 404: the workspace may be gone or replaced).
    pub async fn forget(&self, lc: &str) {
        let stale: Vec<Arc<String>> = self
            .cache
            .iter()
            .filter(|(_, v)| v == lc)
            .map(|(k, _)| k)
            .collect();
        for k in stale {
            self.cache.invalidate(k.as_str()).await;
        }
    }

    /// Forgets `path` (its answer is read again from kcp next time).
    pub async fn forget_path(&self, path: &str) {
        self.cache.invalidate(path).await;
    }

    /// The cached answer for `path`, if any.
    pub async fn cached(&self, path: &str) -> Option<String> {
        self.cache.get(path).await
    }

    /// The logical cluster of `path` (`root:org:network`, `2x8kq9:child`).
    pub async fn resolve(&self, path: &str) -> Result<String, PathError> {
        if !is_workspace_path(path) {
            return Err(PathError::Malformed(path.to_string()));
        }
        if let Some(lc) = self.cache.get(path).await {
            return Ok(lc);
        }
        let lc = match self.logical_cluster(path).await {
            Ok(lc) => lc,
            Err(Lookup::Forbidden(direct)) => match self.walk(path).await {
                Ok(lc) => lc,
                Err(Lookup::Forbidden(walk) | Lookup::NotFound(walk)) => {
                    return Err(PathError::Unknown {
                        path: path.to_string(),
                        detail: format!(
                            "reading its LogicalCluster: {direct}; walking Workspaces: {walk}"
                        ),
                    });
                }
                Err(Lookup::Failed(walk)) => {
                    return Err(PathError::Failed {
                        path: path.to_string(),
                        detail: format!(
                            "reading its LogicalCluster: {direct}; walking Workspaces: {walk}"
                        ),
                    });
                }
            },
            Err(Lookup::NotFound(detail)) => {
                return Err(PathError::Unknown {
                    path: path.to_string(),
                    detail,
                });
            }
            Err(Lookup::Failed(detail)) => {
                return Err(PathError::Failed {
                    path: path.to_string(),
                    detail,
                });
            }
        };
        self.cache.insert(path.to_string(), lc.clone()).await;
        Ok(lc)
    }

    /// One GET of `/clusters/<path>/apis/core.kcp.io/v1alpha1/logicalclusters/cluster`.
    async fn logical_cluster(&self, path: &str) -> Result<String, Lookup> {
        let client = self
            .clients
            .cluster(path)
            .map_err(|e| Lookup::Failed(e.to_string()))?;
        let api: Api<DynamicObject> = Api::all_with(client, &logical_cluster_resource());
        let obj = api.get("cluster").await.map_err(Lookup::of)?;
        let lc = cluster_of(&obj);
        if is_logical_cluster_name(&lc) && !lc.contains(':') {
            Ok(lc)
        } else {
            Err(Lookup::Failed(format!(
                "its LogicalCluster carries no usable kcp.io/cluster annotation ({lc:?})"
            )))
        }
    }

    /// Walks Workspaces from the first segment (a logical cluster name), reading
    /// `spec.cluster` of each child in its parent.
    async fn walk(&self, path: &str) -> Result<String, Lookup> {
        let mut segs = path.split(':');
        let mut cur_path = segs.next().unwrap_or_default().to_string();
        let mut cur_lc = cur_path.clone();
        for seg in segs {
            let next = format!("{cur_path}:{seg}");
            if let Some(lc) = self.cache.get(&next).await {
                cur_path = next;
                cur_lc = lc;
                continue;
            }
            let client = self
                .clients
                .cluster(&cur_lc)
                .map_err(|e| Lookup::Failed(e.to_string()))?;
            let api: Api<DynamicObject> = Api::all_with(client, &workspace_resource());
            let ws = api.get(seg).await.map_err(|e| {
                Lookup::of(e).map(|m| format!("workspace {seg:?} in {cur_path}: {m}"))
            })?;
            let Some(lc) = ws.data["spec"]["cluster"]
                .as_str()
                .filter(|s| is_logical_cluster_name(s) && !s.contains(':'))
            else {
                return Err(Lookup::NotFound(format!(
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

/// A cache of lookup answers, each kept for `ttl`.
fn answers<K, V>(ttl: Duration) -> moka::future::Cache<K, V>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    moka::future::Cache::builder()
        .max_capacity(100_000)
        .time_to_live(ttl)
        .build()
}

/// How one read went.
enum Lookup {
    Forbidden(String),
    NotFound(String),
    Failed(String),
}

impl Lookup {
    fn of(e: kube::Error) -> Self {
        match status_of(&e) {
            Some(403) => Self::Forbidden(e.to_string()),
            Some(404) => Self::NotFound(e.to_string()),
            _ => Self::Failed(e.to_string()),
        }
    }

    fn map(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::Forbidden(m) => Self::Forbidden(f(m)),
            Self::NotFound(m) => Self::NotFound(f(m)),
            Self::Failed(m) => Self::Failed(f(m)),
        }
    }
}

/// What an APIExport exports: its identity hash and group/resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// `status.identityHash` ("" until kcp sets it).
    pub identity_hash: String,
    /// `spec.resources[]` as group/resource (group `core` read as "").
    pub resources: BTreeSet<GroupResource>,
    /// Those of `resources` another APIExport of the same workspace exports too (kcp
    /// then calls this export's webhooks for that one's consumers as well); `None`
    /// when the workspace's APIExports could not be listed.
    pub shared: Option<BTreeSet<GroupResource>>,
}

impl ExportInfo {
    /// Reads an APIExport object (v1alpha2; v1alpha1's `latestResourceSchemas`
    /// names are parsed as kcp converts them).
    pub fn of(export: &DynamicObject) -> Self {
        let norm = |g: &str| {
            if g == "core" {
                String::new()
            } else {
                g.to_string()
            }
        };
        let mut resources = BTreeSet::new();
        for r in export.data["spec"]["resources"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(name) = r["name"].as_str() {
                resources.insert(GroupResource::new(
                    norm(r["group"].as_str().unwrap_or_default()),
                    name,
                ));
            }
        }
        for s in export.data["spec"]["latestResourceSchemas"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str())
        {
            let mut parts = s.splitn(3, '.');
            if let (Some(_), Some(plural), Some(group)) = (parts.next(), parts.next(), parts.next())
            {
                resources.insert(GroupResource::new(norm(group), plural));
            }
        }
        Self {
            identity_hash: export.data["status"]["identityHash"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            resources,
            shared: None,
        }
    }

    /// This export among `all` (the APIExports of its workspace, itself included),
    /// with what it shares with the others.
    fn among(name: &str, all: &[DynamicObject]) -> Option<Self> {
        let this = all
            .iter()
            .find(|e| e.metadata.name.as_deref() == Some(name))?;
        let mut info = Self::of(this);
        let others: BTreeSet<GroupResource> = all
            .iter()
            .filter(|e| e.metadata.name.as_deref() != Some(name))
            .flat_map(|e| Self::of(e).resources)
            .collect();
        info.shared = Some(info.resources.intersection(&others).cloned().collect());
        Some(info)
    }
}

/// Why an APIExport could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// 404: there is no such APIExport.
    #[error("APIExport {name} not found in workspace {workspace}")]
    NotFound {
        /// Export name.
        name: String,
        /// Workspace path or logical cluster.
        workspace: String,
    },
    /// 403: holdfast may not read it.
    #[error(
        "holdfast may not read APIExport {name} in workspace {workspace} (it needs get apiexports there): {detail}"
    )]
    Forbidden {
        /// Export name.
        name: String,
        /// Workspace path or logical cluster.
        workspace: String,
        /// kcp's answer.
        detail: String,
    },
    /// Anything else (network, 5xx).
    #[error("reading APIExport {name} in workspace {workspace}: {detail}")]
    Failed {
        /// Export name.
        name: String,
        /// Workspace path or logical cluster.
        workspace: String,
        /// What failed.
        detail: String,
    },
}

/// Reads APIExport `name` in logical cluster `lc` through the front-proxy;
/// `workspace` names it in errors.
pub async fn read_export(
    clients: &Clients,
    lc: &str,
    workspace: &str,
    name: &str,
) -> Result<ExportInfo, ExportError> {
    let failed = |detail: String| ExportError::Failed {
        name: name.to_string(),
        workspace: workspace.to_string(),
        detail,
    };
    let client = clients.cluster(lc).map_err(|e| failed(e.to_string()))?;
    let api: Api<DynamicObject> = Api::all_with(client, &api_export_resource());
    // Every export of the workspace, to tell which resources this one shares with
    // another; where listing is forbidden, this one alone (sharing unknown).
    match tokio::time::timeout(READ_TIMEOUT, api.list(&Default::default())).await {
        Err(_) => return Err(failed("timed out".into())),
        Ok(Ok(list)) => {
            return ExportInfo::among(name, &list.items).ok_or_else(|| ExportError::NotFound {
                name: name.to_string(),
                workspace: workspace.to_string(),
            });
        }
        Ok(Err(e)) if status_of(&e) == Some(403) => {}
        Ok(Err(e)) => return Err(failed(e.to_string())),
    }
    match tokio::time::timeout(READ_TIMEOUT, api.get(name)).await {
        Err(_) => Err(failed("timed out".into())),
        Ok(Ok(obj)) => Ok(ExportInfo::of(&obj)),
        Ok(Err(e)) => Err(match status_of(&e) {
            Some(404) => ExportError::NotFound {
                name: name.to_string(),
                workspace: workspace.to_string(),
            },
            Some(403) => ExportError::Forbidden {
                name: name.to_string(),
                workspace: workspace.to_string(),
                detail: e.to_string(),
            },
            _ => failed(e.to_string()),
        }),
    }
}

/// How long an APIExport read is trusted (its resources or identity changing is
/// noticed at the latest after this, or at the next resync, which drops the cache).
pub const EXPORT_TTL: Duration = Duration::from_secs(60);

/// APIExports read through the front-proxy, each answer kept for [`EXPORT_TTL`]
/// (failures are not kept: they are read again next time).
#[derive(Clone)]
pub struct Exports {
    clients: Clients,
    cache: moka::future::Cache<(String, String), Arc<ExportInfo>>,
}

impl Exports {
    /// A cache reading through the front-proxy of `clients`.
    pub fn new(clients: Clients) -> Self {
        Self {
            clients,
            cache: answers(EXPORT_TTL),
        }
    }

    /// Forgets everything (a resync).
    pub fn invalidate(&self) {
        self.cache.invalidate_all();
    }

    /// Forgets the exports of logical cluster `lc`.
    pub async fn forget(&self, lc: &str) {
        let stale: Vec<std::sync::Arc<(String, String)>> = self
            .cache
            .iter()
            .filter(|(k, _)| k.0 == lc)
            .map(|(k, _)| k)
            .collect();
        for k in stale {
            self.cache.invalidate(k.as_ref()).await;
        }
    }

    /// Forgets APIExport `name` of logical cluster `lc` (it lacked something: read
    /// it afresh next time).
    pub async fn forget_export(&self, lc: &str, name: &str) {
        self.cache
            .invalidate(&(lc.to_string(), name.to_string()))
            .await;
    }

    /// APIExport `name` in logical cluster `lc` (`workspace` names it in errors).
    pub async fn get(
        &self,
        lc: &str,
        workspace: &str,
        name: &str,
    ) -> Result<Arc<ExportInfo>, ExportError> {
        let key = (lc.to_string(), name.to_string());
        if let Some(info) = self.cache.get(&key).await {
            return Ok(info);
        }
        let info = Arc::new(read_export(&self.clients, lc, workspace, name).await?);
        self.cache.insert(key, info.clone()).await;
        Ok(info)
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
