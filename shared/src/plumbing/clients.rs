//! API clients for many URLs on few servers.
//!
//! On kcp every logical cluster is a path (`/clusters/<name>`) on the front-proxy or on a
//! virtual-workspace server. A [`kube::Client`] built per path would carry its own TLS
//! configuration and its own connection pool: a controller writing to 1,000 workspaces
//! would make 1,000 TLS handshakes and keep 1,000 idle connections. [`UrlClients`] keeps one
//! client per server (scheme and authority) and hands out, per URL, a light client that
//! prefixes the URL's path to every request and sends it through the server's client, so
//! every workspace on one server shares one pool. Both caches are bounded and forget
//! clients left idle.
//!
//! Building a client performs no I/O; using one does.

use std::time::Duration;

use http::{Request, Uri};
use kube::Client;
use kube::client::Body;

/// Why no client could be built for a URL.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL does not parse, or lacks a scheme or host.
    #[error("bad API server URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The client for the server could not be built (TLS material, proxy settings...).
    #[error("cannot build an API client for {server}: {source}")]
    Build {
        /// Scheme and authority of the server.
        server: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

/// Idle time after which a cached client is dropped.
pub const CLIENT_IDLE: Duration = Duration::from_secs(600);

/// Clients for URLs derived from one kubeconfig (same credentials and TLS settings),
/// one connection pool per server.
#[derive(Clone)]
pub struct UrlClients {
    base: kube::Config,
    capacity: u64,
    servers: moka::sync::Cache<String, Client>,
    urls: moka::sync::Cache<String, Client>,
}

impl UrlClients {
    /// Clients sharing `base`'s credentials and TLS settings; at most `capacity` URLs
    /// (and as many servers) are kept.
    pub fn new(base: kube::Config, capacity: u64) -> Self {
        let cache = || {
            moka::sync::Cache::builder()
                .max_capacity(capacity)
                .time_to_idle(CLIENT_IDLE)
                .build()
        };
        Self {
            base,
            capacity,
            servers: cache(),
            urls: cache(),
        }
    }

    /// How many URLs (and servers) are kept at most.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The configuration the clients are built from.
    pub fn config(&self) -> &kube::Config {
        &self.base
    }

    /// How many per-URL clients are cached (for a gauge; approximate: no cache
    /// maintenance is run to count, so it is cheap on every lookup).
    pub fn cached(&self) -> u64 {
        self.urls.entry_count()
    }

    /// The exact number of per-URL clients cached (runs the cache's pending
    /// maintenance first: for reports and tests, not for every lookup).
    pub fn cached_exactly(&self) -> u64 {
        self.urls.run_pending_tasks();
        self.urls.entry_count()
    }

    /// A client whose requests go to `url` (its path is prefixed to every request path).
    pub fn at(&self, url: &str) -> Result<Client, ClientError> {
        let url = url.trim_end_matches('/');
        if let Some(c) = self.urls.get(url) {
            return Ok(c);
        }
        let (server, prefix) = split_url(url)?;
        let server_client = self.server(&server)?;
        let client = if prefix.is_empty() {
            server_client
        } else {
            prefixed(server_client, prefix)
        };
        self.urls.insert(url.to_string(), client.clone());
        Ok(client)
    }

    fn server(&self, server: &str) -> Result<Client, ClientError> {
        if let Some(c) = self.servers.get(server) {
            return Ok(c);
        }
        let mut cfg = self.base.clone();
        cfg.cluster_url =
            server
                .parse()
                .map_err(|e: http::uri::InvalidUri| ClientError::BadUrl {
                    url: server.to_string(),
                    reason: e.to_string(),
                })?;
        let client = Client::try_from(cfg).map_err(|source| ClientError::Build {
            server: server.to_string(),
            source,
        })?;
        self.servers.insert(server.to_string(), client.clone());
        Ok(client)
    }
}

/// How long a SelfSubjectAccessReview may take before it counts as "no".
pub const ACCESS_REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `client`'s identity may list and watch `gr` cluster-wide now (a
/// SelfSubjectAccessReview per verb, asked at once; an error or no answer within
/// [`ACCESS_REVIEW_TIMEOUT`] counts as no).
pub async fn may_read(client: &Client, gr: &crate::api::common::GroupResource) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let ask = |verb: &str| {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(gr.group.clone()),
                    resource: Some(gr.resource.clone()),
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = api.clone();
        async move {
            tokio::time::timeout(
                ACCESS_REVIEW_TIMEOUT,
                api.create(&kube::api::PostParams::default(), &review),
            )
            .await
            .is_ok_and(|r| r.is_ok_and(|r| r.status.is_some_and(|s| s.allowed)))
        }
    };
    let (list, watch) = futures::join!(ask("list"), ask("watch"));
    list && watch
}

/// `https://h:6443/clusters/root` → (`https://h:6443`, `/clusters/root`).
fn split_url(url: &str) -> Result<(String, String), ClientError> {
    let bad = |reason: &str| ClientError::BadUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    let scheme = uri.scheme_str().ok_or_else(|| bad("no scheme"))?;
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    if uri.query().is_some() {
        return Err(bad("a query is not allowed"));
    }
    let path = uri.path().trim_end_matches('/').to_string();
    Ok((format!("{scheme}://{authority}"), path))
}

/// A client sending every request through `server` with `prefix` before its path.
fn prefixed(server: Client, prefix: String) -> Client {
    let default_ns = server.default_namespace().to_string();
    let service = tower::service_fn(move |req: Request<Body>| {
        let server = server.clone();
        let prefix = prefix.clone();
        async move {
            let (mut parts, body) = req.into_parts();
            let pq = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
            parts.uri = format!("{prefix}{pq}")
                .parse()
                .map_err(|e: http::uri::InvalidUri| kube::Error::Service(Box::new(e)))?;
            server.send(Request::from_parts(parts, body)).await
        }
    });
    Client::new(service, default_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_server_and_path() {
        let (s, p) = split_url("https://127.0.0.1:6443/clusters/root:org").expect("split");
        assert_eq!(s, "https://127.0.0.1:6443");
        assert_eq!(p, "/clusters/root:org");
        let (s, p) = split_url("https://h/services/apiexport/x/y/").expect("split");
        assert_eq!(s, "https://h");
        assert_eq!(p, "/services/apiexport/x/y");
        let (_, p) = split_url("http://h:80").expect("split");
        assert_eq!(p, "");
        for bad in ["/clusters/x", "not a url", "https://h/x?y=1"] {
            assert!(split_url(bad).is_err(), "{bad} accepted");
        }
    }
}
