//! holdfast-sim: an in-memory kube-apiserver (and kcp) simulator speaking the real
//! Kubernetes wire protocol over HTTPS, for holdfast's tests and demo.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use holdfast_sim::{Sim, SimConfig};
//! let sim = Sim::start(SimConfig::default()).await?;
//! let client = sim.client().await?;
//! # drop(client);
//! sim.shutdown().await;
//! # Ok(()) }
//! ```

mod admission;
mod admreg_rules;
mod api;
mod authz;
mod builtin_schema;
mod cache;
/// The CEL subset the simulator evaluates (admission policies, matchConditions, CRD
/// validation rules); public so tests can evaluate expressions exactly as it does.
pub mod cel;
mod controllers;
mod defaults;
mod errors;
mod eventsview;
mod kcp;
mod kcp_deletion;
mod kcp_workspace;
mod patch;
mod proto;
mod rbac;
mod registry;
mod schema;
mod selectors;
mod server;
mod store;
mod tls;
mod vap;
mod warrant;

pub use authz::{TokenFileError, parse_token_auth_file};
pub use cache::Replication;
/// The hash kcp names a shard by in a Workspace's `internal.tenancy.kcp.io/shard`.
pub use kcp_workspace::shard_hash;

use anyhow::Context;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A user authenticated by bearer token. Its uid (as seen in AdmissionReview
/// `userInfo.uid`) is `uid` when given (a token file's third column), else
/// `<name>-uid`; `system:authenticated` is added to its groups.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct User {
    pub name: String,
    pub token: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl User {
    /// The uid the user authenticates with.
    pub fn effective_uid(&self) -> String {
        self.uid.clone().unwrap_or_else(|| user_uid(&self.name))
    }
}

/// One allow rule of the static RBAC model; `*` wildcards everywhere, empty lists mean
/// "any" for `namespaces` and `resource_names` and "nobody/nothing" elsewhere.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct RbacRule {
    pub users: Vec<String>,
    pub groups: Vec<String>,
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub namespaces: Vec<String>,
    pub resource_names: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimConfig {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    pub users: Vec<User>,
    pub rbac: Vec<RbacRule>,
    /// Enforce the RBAC model on every request (system:masters is always allowed).
    pub authorize: bool,
    /// Watch events kept per resource for resumption (older resourceVersions get 410).
    pub watch_history: usize,
    /// Interval of BOOKMARK events on watches that allow them.
    #[serde(rename = "bookmarkIntervalMs", with = "millis")]
    pub bookmark_interval: Duration,
    /// Publish a `kube-root-ca.crt` ConfigMap in every new namespace (as kube-controller-manager does).
    pub root_ca_configmap: bool,
    /// Create the `default` ServiceAccount in every new namespace (service-account controller).
    pub default_service_accounts: bool,
    /// Report workloads (Deployments, StatefulSets, ReplicaSets, DaemonSets) as fully
    /// rolled out, as their controllers would once the pods run.
    pub workload_status: bool,
    /// Extra DNS names for the serving certificate.
    pub extra_sans: Vec<String>,
    /// kcp shards behind the front-proxy (`listen`): `root`, `shard-1`, ... each with a
    /// listener of its own on 127.0.0.1 (a free port). 0 counts as 1.
    pub shards: usize,
    /// kube-apiserver's `--token-auth-file`: a CSV of `token,user,uid,"group1,group2"`
    /// whose users join `users` when the simulator starts.
    pub token_auth_file: Option<std::path::PathBuf>,
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            users: vec![User {
                name: "admin".into(),
                token: "admin-token".into(),
                groups: vec!["system:masters".into()],
                uid: None,
            }],
            rbac: vec![],
            authorize: true,
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(1),
            root_ca_configmap: true,
            default_service_accounts: true,
            workload_status: true,
            extra_sans: vec![],
            shards: 1,
            token_auth_file: None,
        }
    }
}

impl SimConfig {
    /// Parses the YAML config file format of the binary (`users`, `rbac`, ...).
    pub fn from_yaml(text: &str) -> anyhow::Result<SimConfig> {
        let v: serde_json::Value = serde_saphyr::from_str(text).context("parsing YAML")?;
        let mut cfg: SimConfig = serde_json::from_value(v).context("invalid config")?;
        if cfg.users.is_empty() {
            cfg.users = SimConfig::default().users;
        }
        Ok(cfg)
    }
}

pub struct Sim;

impl Sim {
    pub async fn start(mut cfg: SimConfig) -> anyhow::Result<SimHandle> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        authz::load_token_auth_file(&mut cfg)?;
        let (state, join, outage) = server::start(cfg).await?;
        Ok(SimHandle {
            state,
            join,
            outage,
        })
    }
}

pub struct SimHandle {
    state: Arc<server::State>,
    join: tokio::task::JoinHandle<()>,
    /// The front-proxy's outage sender first, then each shard's.
    outage: Vec<server::OutageSender>,
}

impl SimHandle {
    /// `https://127.0.0.1:PORT`: the plain Kubernetes endpoint and kcp's front-proxy.
    pub fn url(&self) -> String {
        self.state.url.clone()
    }

    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    pub fn ca_pem(&self) -> String {
        self.state.ca_pem.clone()
    }

    /// Kubeconfig YAML for `user` (its bearer token), trusting the sim's CA.
    pub fn kubeconfig(&self, user: &str) -> String {
        self.kubeconfig_for_server(&self.url(), user)
    }

    /// Kubeconfig YAML whose server is `server` (e.g. `<url>/clusters/root:org`).
    pub fn kubeconfig_for_server(&self, server: &str, user: &str) -> String {
        let token = self
            .state
            .cfg
            .users
            .iter()
            .find(|u| u.name == user)
            .map(|u| u.token.clone())
            .unwrap_or_default();
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: holdfast-sim\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: holdfast-sim\n  context:\n    cluster: holdfast-sim\n    user: {user}\ncurrent-context: holdfast-sim\npreferences: {{}}\n"
        )
    }

    pub fn write_kubeconfig(&self, path: &Path, user: &str) -> anyhow::Result<()> {
        std::fs::write(path, self.kubeconfig(user))
            .with_context(|| format!("writing {}", path.display()))
    }

    /// A kube client authenticated as the first `system:masters` user (default `admin`).
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let admin = self
            .state
            .cfg
            .users
            .iter()
            .find(|u| u.groups.iter().any(|g| g == "system:masters"))
            .or(self.state.cfg.users.first())
            .map(|u| u.name.clone())
            .unwrap_or_else(|| "admin".into());
        self.client_as(&admin).await
    }

    pub async fn client_as(&self, user: &str) -> anyhow::Result<kube::Client> {
        self.client_for_server(&self.url(), user).await
    }

    /// A client whose base URL is `server` (e.g. a kcp workspace or virtual workspace URL).
    pub async fn client_for_server(
        &self,
        server: &str,
        user: &str,
    ) -> anyhow::Result<kube::Client> {
        if !self.state.cfg.users.iter().any(|u| u.name == user) {
            anyhow::bail!("unknown sim user {user:?}");
        }
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_for_server(server, user))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Drops all watch history: watches resuming from an older resourceVersion get 410 Expired.
    pub fn compact(&self) {
        self.state.store.compact();
    }

    /// How kcp's webhook configurations reach admission through the cache server
    /// (default: a random 50-500 ms; [`Replication::Stopped`]: the cache server is
    /// down). Changes pending are rescheduled under the new setting.
    pub fn set_webhook_replication(&self, setting: Replication) {
        self.state.cache.set(setting);
    }

    /// Waits (at most `within`) until every kcp ValidatingWebhookConfiguration is
    /// replicated as stored, i.e. admission enforces exactly what is stored.
    pub async fn webhooks_replicated(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + within;
        while !self.state.cache.sync(&self.state) {
            if std::time::Instant::now() > deadline {
                anyhow::bail!(
                    "webhook configurations not replicated within {within:?} ({:?})",
                    self.state.cache.setting()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// The current (global) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.state.store.current_rv()
    }

    /// Resolves a kcp workspace path (`root:org:team`) to its logical cluster name.
    pub fn logical_cluster(&self, path: &str) -> Option<String> {
        kcp::resolve_path(&self.state, path)
    }

    /// kcp shards in order: (name, base URL). The first is `root`.
    pub fn shards(&self) -> Vec<(String, String)> {
        self.state
            .shards
            .iter()
            .map(|s| (s.name.clone(), s.url.clone()))
            .collect()
    }

    /// The shard a logical cluster (name or path) lives on.
    pub fn shard_of(&self, logical_cluster: &str) -> Option<String> {
        let lc = kcp::resolve_path(&self.state, logical_cluster)?;
        kcp::shard_of(&self.state, &lc)
    }

    /// An outage of `length` of the whole simulator, as in a restart: every listener
    /// (the front-proxy and every kcp shard) closes its port and cuts every open
    /// connection (watches included); stored objects survive; then each serves again
    /// on the same address. Returns once all serve again.
    pub async fn outage(&self, length: std::time::Duration) -> anyhow::Result<()> {
        let all: Vec<usize> = (0..self.outage.len()).collect();
        self.outage_of(&all, length).await
    }

    /// An outage of one kcp shard's listener only (see [`SimHandle::outage`]); the
    /// front-proxy and the other shards keep serving.
    pub async fn shard_outage(
        &self,
        shard: &str,
        length: std::time::Duration,
    ) -> anyhow::Result<()> {
        let i = self
            .state
            .shards
            .iter()
            .position(|s| s.name == shard)
            .ok_or_else(|| anyhow::anyhow!("no shard {shard:?}"))?;
        self.outage_of(&[i + 1], length).await
    }

    async fn outage_of(
        &self,
        listeners: &[usize],
        length: std::time::Duration,
    ) -> anyhow::Result<()> {
        let mut waits = vec![];
        for i in listeners {
            let (done, serving) = tokio::sync::oneshot::channel();
            self.outage
                .get(*i)
                .ok_or_else(|| anyhow::anyhow!("no listener {i}"))?
                .send((length, done))
                .map_err(|_| anyhow::anyhow!("the sim is not serving"))?;
            waits.push(serving);
        }
        for serving in waits {
            serving
                .await
                .map_err(|_| anyhow::anyhow!("the sim stopped during the outage"))?;
        }
        Ok(())
    }

    pub async fn shutdown(mut self) {
        let _ = self.state.shutdown_tx.send(true);
        self.join.abort();
        let join = std::mem::replace(&mut self.join, tokio::spawn(async {}));
        let _ = join.await;
    }
}

impl Drop for SimHandle {
    /// Stops serving (watches end, background controllers stop) when dropped.
    fn drop(&mut self) {
        let _ = self.state.shutdown_tx.send(true);
        self.join.abort();
    }
}

pub(crate) fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub(crate) fn user_uid(name: &str) -> String {
    format!("{name}-uid")
}
