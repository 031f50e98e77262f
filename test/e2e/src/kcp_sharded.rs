//! The seed 003 topology on a kcp of two shards behind a front-proxy, where nobody
//! but the platform team is `system:masters`: holdfast runs as the users
//! `holdfast-controller` and `holdfast-webhook` with exactly the RBAC that
//! `manifests/overlays/kcp/workspace` ships plus the two per-export grants
//! `docs/kcp.md` tells providers and consumers to make; providers and consumers act
//! as users of their own.
//!
//! Placement: `root:holdfast`, `root:compute` and `root:providers` on shard `root`;
//! `root:providers:network` on `shard-1`; consumers on the shard the test names.
//!
//! The same topology runs on the simulator (the default) or, with
//! `HOLDFAST_E2E_KCP=real`, on a real kcp of two shards, a front-proxy and a cache
//! server (`crate::backend::kcp`, built by `hack/substrates.sh kcp`): the same
//! users (bearer tokens), the same manifests, and waits as long as kcp's
//! replication through the cache server needs.

use crate::{Env, KubectlOutput, backend::kcp::KcpBackend};
use holdfast_sim::{SimConfig, User};
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

/// The network provider's workspace path.
pub const NETWORK: &str = "root:providers:network";
/// The compute provider's workspace path.
pub const COMPUTE: &str = "root:compute";
/// The holdfast workspace.
pub const HOLDFAST: &str = "root:holdfast";

/// The users of the topology: (name, groups).
const USERS: &[(&str, &[&str])] = &[
    ("platform", &["system:masters"]),
    ("provider", &["holdfast:providers"]),
    ("consumer", &[]),
    ("holdfast-controller", &[]),
    ("holdfast-webhook", &[]),
];

/// A two-shard kcp (simulated, or real) with the topology set up.
pub struct Sharded {
    /// The environment (sim, webhook...); on a real kcp its sim stays idle and its
    /// kubeconfig is kcp's admin kubeconfig.
    pub env: Env,
    /// The front-proxy's base URL.
    pub url: String,
    /// The controller's kubeconfig (user holdfast-controller, holdfast workspace).
    pub controller_kubeconfig: String,
    /// The webhook's kubeconfig (user holdfast-webhook, holdfast workspace).
    pub webhook_kubeconfig: String,
    /// How long a wait for what kcp shows may take.
    pub wait: Duration,
    /// The real kcp, when the topology runs on one (dropped after `env`, so
    /// holdfast's processes stop first).
    pub real: Option<KcpBackend>,
    _kcp_dir: Option<tempfile::TempDir>,
}

/// Whether the kcp tests run on a real kcp (`HOLDFAST_E2E_KCP=real`).
pub fn on_real_kcp() -> bool {
    std::env::var("HOLDFAST_E2E_KCP").is_ok_and(|v| v == "real")
}

fn sim_config() -> SimConfig {
    SimConfig {
        shards: 2,
        users: USERS
            .iter()
            .map(|(name, groups)| User {
                name: (*name).into(),
                token: format!("{name}-token"),
                groups: groups.iter().map(|g| (*g).to_string()).collect(),
                ..Default::default()
            })
            .collect(),
        ..SimConfig::default()
    }
}

/// A Workspace placed on `shard`.
pub fn workspace_on(name: &str, shard: &str) -> String {
    format!(
        "apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {{name: {name}}}\nspec:\n  location: {{selector: {{matchLabels: {{name: {shard}}}}}}}\n"
    )
}

/// Everything `user` may do in a workspace (a ClusterRole and its binding).
pub fn admin_of(user: &str) -> String {
    format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {user}-admin}}
rules:
- {{apiGroups: ["*"], resources: ["*"], verbs: ["*"]}}
- {{nonResourceURLs: ["*"], verbs: ["*"]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {user}-admin}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {user}-admin}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}
"#
    )
}

/// `bind` on APIExport `export` for every authenticated user.
pub fn bindable(export: &str) -> String {
    format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: bind-{export}}}
rules:
- {{apiGroups: [apis.kcp.io], resources: [apiexports], resourceNames: [{export}], verbs: [bind]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: bind-{export}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bind-{export}}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:authenticated"}}
"#
    )
}

/// The binding to holdfast.dev a provider or consumer makes (docs/kcp.md): every
/// claim accepted with exactly the verbs the export claims.
pub fn holdfast_binding() -> &'static str {
    r#"apiVersion: apis.kcp.io/v1alpha2
kind: APIBinding
metadata: {name: holdfast}
spec:
  reference: {export: {path: "root:holdfast", name: holdfast.dev}}
  permissionClaims:
  - group: admissionregistration.k8s.io
    resource: validatingwebhookconfigurations
    selector: {matchAll: true}
    verbs: [get, list, watch, create, update, patch, delete]
    state: Accepted
  - group: ""
    resource: events
    selector: {matchAll: true}
    verbs: [create, patch]
    state: Accepted
  - group: apis.kcp.io
    resource: apibindings
    selector: {matchAll: true}
    verbs: [list, watch]
    state: Accepted
"#
}

/// The webhooks of configuration `cfg`: (name, path of its URL), e.g.
/// `("containment.holdfast.dev", "/validate/kcp/<lc>")`; a webhook without a URL
/// has path "".
pub fn workspace_webhooks(cfg: &serde_json::Value) -> Vec<(String, String)> {
    cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        // Every kcp configuration ends with its enforcement probe (checked by
        // `tests/kcp_enforcement.rs`); the routing is what the callers compare.
        .filter(|h| h["name"] != holdfast_shared::enforcement::WEBHOOK_NAME)
        .map(|h| {
            let url = h["clientConfig"]["url"].as_str().unwrap_or_default();
            let path = url
                .split_once("://")
                .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_string()))
                .unwrap_or_default();
            (h["name"].as_str().unwrap_or_default().to_string(), path)
        })
        .collect()
}

/// What [`workspace_webhooks`] reads in the configuration of a workspace `lc`
/// binding holdfast.dev, without strict mode or policies: label protection and
/// containment, calling the workspace's route.
pub fn own_webhooks(lc: &str) -> Vec<(String, String)> {
    let path = format!("/validate/kcp/{lc}");
    vec![
        ("delete-label-0.holdfast.dev".to_string(), path.clone()),
        ("containment.holdfast.dev".to_string(), path),
    ]
}

fn manifests(dir: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../manifests")
        .join(dir)
        .to_string_lossy()
        .into_owned()
}

impl Sharded {
    /// URL of workspace `path` at the front-proxy.
    pub fn ws(&self, path: &str) -> String {
        format!("{}/clusters/{path}", self.url)
    }

    /// kubectl as `user` in workspace `path`.
    pub fn kubectl(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        let server = self.ws(path);
        if let Some(kcp) = &self.real {
            let kubeconfig = real_kubeconfig(kcp, user);
            let mut all = vec!["--kubeconfig", kubeconfig.as_str(), "--server", &server];
            all.extend_from_slice(args);
            return self
                .env
                .kubectl(&all)
                .unwrap_or_else(|e| panic!("kubectl: {e}"));
        }
        let mut all = vec!["--server", server.as_str()];
        all.extend_from_slice(args);
        self.env
            .kubectl_as(user, &all)
            .unwrap_or_else(|e| panic!("kubectl: {e}"))
    }

    /// The logical cluster of workspace `path` (`root` for `root`).
    pub fn logical_cluster(&self, path: &str) -> String {
        if self.real.is_none() {
            return self
                .env
                .sim
                .logical_cluster(path)
                .unwrap_or_else(|| panic!("no workspace {path}"));
        }
        let Some((parent, name)) = path.rsplit_once(':') else {
            return path.to_string();
        };
        let out = self.kubectl(
            "platform",
            parent,
            &["get", "workspace", name, "-o", "jsonpath={.spec.cluster}"],
        );
        assert!(
            out.code == 0 && !out.stdout.is_empty(),
            "{path}: no spec.cluster: {out:?}"
        );
        out.stdout
    }

    /// The shard workspace `path` lives on (`root`, `shard-1`).
    pub fn shard_of(&self, path: &str) -> String {
        if self.real.is_none() {
            let lc = self.logical_cluster(path);
            return self
                .env
                .sim
                .shard_of(&lc)
                .unwrap_or_else(|| panic!("no shard for {path}"));
        }
        // kcp schedules a Workspace onto a shard and names it by the hash of the
        // shard's name in an annotation (docs/kcp-facts.md, 35).
        let (parent, name) = path.rsplit_once(':').unwrap_or(("root", path));
        let ws = self.get_json("platform", parent, &["workspace", name]);
        let hash = ws["metadata"]["annotations"]["internal.tenancy.kcp.io/shard"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.shard_names()
            .into_iter()
            .find(|s| holdfast_sim::shard_hash(s) == hash)
            .unwrap_or_else(|| panic!("workspace {path}: no shard hashes to {hash:?}"))
    }

    /// Every shard's name and the base URL of its virtual workspaces, by name.
    pub fn shard_urls(&self) -> Vec<(String, String)> {
        if self.real.is_none() {
            return self.env.sim.shards();
        }
        let list = self.get_json("platform", "root", &["shards"]);
        let mut shards: Vec<(String, String)> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let url = s["spec"]["virtualWorkspaceURL"]
                    .as_str()
                    .or(s["spec"]["baseURL"].as_str())
                    .unwrap_or_default();
                (
                    s["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    url.to_string(),
                )
            })
            .collect();
        shards.sort();
        shards
    }

    fn shard_names(&self) -> Vec<String> {
        self.shard_urls().into_iter().map(|(n, _)| n).collect()
    }

    /// `kubectl apply` of `manifest` as `user` in workspace `path`; panics on failure.
    pub fn apply(&self, user: &str, path: &str, manifest: &str) {
        let file = self.manifest_file(manifest);
        let mut out = self.kubectl(user, path, &["apply", "-f", &file]);
        // A real shard checks `bind` on an export of another shard against the
        // cache server's replica of that workspace's RBAC: a fresh grant counts
        // there only once replicated.
        let deadline = std::time::Instant::now() + self.wait;
        while self.real.is_some()
            && out.code != 0
            && out.stderr.contains("no permission to bind")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(500));
            out = self.kubectl(user, path, &["apply", "-f", &file]);
        }
        assert_eq!(
            out.code, 0,
            "apply as {user} in {path}: {out:?}\n{manifest}"
        );
    }

    /// As the platform team: Workspace `name` in `parent` on `shard`, waited for
    /// until Ready (kcp schedules and initializes it asynchronously, kcp-facts 19
    /// and 31); returns its path.
    pub fn create_workspace(&self, parent: &str, name: &str, shard: &str) -> String {
        self.apply("platform", parent, &workspace_on(name, shard));
        self.wait_workspace_ready(parent, name);
        format!("{parent}:{name}")
    }

    /// Waits (at most [`Sharded::wait`]) until Workspace `name` in `parent` is
    /// Ready; panics with its last phase otherwise.
    pub fn wait_workspace_ready(&self, parent: &str, name: &str) {
        let args = ["get", "workspace", name, "-o", "jsonpath={.status.phase}"];
        self.wait_for("platform", parent, &args, "Ready");
    }

    /// Waits (at most [`Sharded::wait`]) until APIBinding `name` in `path` is
    /// Bound (kcp binds asynchronously: until then its types are not served).
    pub fn wait_bound(&self, user: &str, path: &str, name: &str) {
        let args = ["get", "apibinding", name, "-o", "jsonpath={.status.phase}"];
        self.wait_for(user, path, &args, "Bound");
    }

    /// Blocks until `kubectl args` as `user` in `path` prints `want`; panics with
    /// the last output after [`Sharded::wait`].
    fn wait_for(&self, user: &str, path: &str, args: &[&str], want: &str) {
        let deadline = std::time::Instant::now() + self.wait;
        loop {
            let out = self.kubectl(user, path, args);
            if out.code == 0 && out.stdout.trim() == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{args:?} as {user} in {path}: not {want}: {out:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `kubectl apply -k manifests/<dir>` as `user` in workspace `path`.
    pub fn apply_k(&self, user: &str, path: &str, dir: &str) {
        let out = self.kubectl(user, path, &["apply", "-k", &manifests(dir)]);
        assert_eq!(out.code, 0, "apply -k {dir} as {user} in {path}: {out:?}");
    }

    fn manifest_file(&self, manifest: &str) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let path = self.env.dir.path().join(format!("manifest-{n}.yaml"));
        std::fs::write(&path, manifest).unwrap_or_else(|e| panic!("writing {path:?}: {e}"));
        path.to_string_lossy().into_owned()
    }

    /// The endpoint URLs of APIExportEndpointSlice `name` in workspace `path`.
    pub fn endpoints(&self, path: &str, name: &str) -> Vec<String> {
        let out = self.kubectl(
            "platform",
            path,
            &["get", "apiexportendpointslice", name, "-o", "json"],
        );
        let v = out
            .json()
            .unwrap_or_else(|e| panic!("slice {name} in {path}: {e}"));
        v["status"]["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["url"].as_str().map(str::to_string))
            .collect()
    }

    /// A consumer workspace `name` on `shard`, owned by user `consumer`, binding both
    /// providers' exports, with the consumer RBAC holdfast's docs recommend.
    pub fn consumer(&self, name: &str, shard: &str) -> String {
        self.consumer_of(name, shard, "network.test.io")
    }

    /// [`Sharded::consumer`], binding the network provider's export `network_export`.
    pub fn consumer_of(&self, name: &str, shard: &str, network_export: &str) -> String {
        let path = self.create_workspace("root", name, shard);
        self.apply("platform", &path, &admin_of("consumer"));
        self.apply(
            "consumer",
            &path,
            &crate::kcp::binding("compute", COMPUTE, "compute.test.io"),
        );
        self.apply(
            "consumer",
            &path,
            &crate::kcp::binding("network", NETWORK, network_export),
        );
        self.wait_bound("consumer", &path, "compute");
        self.wait_bound("consumer", &path, "network");
        self.grant_consumer_reads(&path);
        path
    }

    /// The arguments that run holdfast-controller on this topology as
    /// `holdfast-controller`.
    pub fn controller_args(&self) -> Vec<&str> {
        vec![
            "--kubeconfig",
            self.controller_kubeconfig.as_str(),
            "--topology",
            "kcp",
        ]
    }

    /// As the platform team: lets `user` bind holdfast.dev (the shipped
    /// ClusterRole `holdfast-bind` in the holdfast workspace; docs/kcp.md: grant it
    /// to whoever may publish policies).
    pub fn let_bind_holdfast(&self, user: &str) {
        let out = self.kubectl(
            "platform",
            HOLDFAST,
            &[
                "create",
                "clusterrolebinding",
                &format!("holdfast-bind-{user}"),
                "--clusterrole=holdfast-bind",
                &format!("--user={user}"),
            ],
        );
        assert_eq!(out.code, 0, "{out:?}");
    }

    /// A workspace `name` on `shard` owned by user `consumer`, binding each
    /// `(binding, export path, export)` of `bindings` and, when `holdfast`,
    /// holdfast.dev with its claims accepted ([`holdfast_binding`]; the consumer
    /// needs [`Sharded::let_bind_holdfast`] first). Returns its path.
    pub fn workspace_binding(
        &self,
        name: &str,
        shard: &str,
        holdfast: bool,
        bindings: &[(&str, &str, &str)],
    ) -> String {
        let path = self.create_workspace("root", name, shard);
        self.apply("platform", &path, &admin_of("consumer"));
        for (binding, at, export) in bindings {
            self.apply("consumer", &path, &crate::kcp::binding(binding, at, export));
        }
        if holdfast {
            self.apply("consumer", &path, holdfast_binding());
        }
        for (binding, _, _) in bindings {
            self.wait_bound("consumer", &path, binding);
        }
        path
    }

    /// A consumer workspace `name` on `shard` binding both providers' exports, with
    /// none of the consumer RBAC holdfast's docs recommend.
    pub fn bare_consumer(&self, name: &str, shard: &str) -> String {
        let path = self.create_workspace("root", name, shard);
        self.apply("platform", &path, &admin_of("consumer"));
        for (binding, at, export) in [
            ("compute", COMPUTE, "compute.test.io"),
            ("network", NETWORK, "network.test.io"),
        ] {
            self.apply("consumer", &path, &crate::kcp::binding(binding, at, export));
        }
        self.wait_bound("consumer", &path, "compute");
        self.wait_bound("consumer", &path, "network");
        path
    }

    /// docs/kcp.md, consumer guide: access, discovery, and list on the dependents for
    /// the webhook in consumer workspace `path`.
    pub fn grant_consumer_reads(&self, path: &str) {
        let path = path.to_string();
        self.apply_k("consumer", &path, "overlays/kcp/workspace/consumer");
        let out = self.kubectl(
            "consumer",
            &path,
            &[
                "create",
                "clusterrole",
                "holdfast-dependents",
                "--verb=list",
                "--resource=virtualmachines.compute.test.io",
            ],
        );
        assert_eq!(out.code, 0, "{out:?}");
        let out = self.kubectl(
            "consumer",
            &path,
            &[
                "create",
                "clusterrolebinding",
                "holdfast-dependents",
                "--clusterrole=holdfast-dependents",
                "--user=holdfast-webhook",
            ],
        );
        assert_eq!(out.code, 0, "{out:?}");
    }

    /// Runs kubectl as `user` in `path` until `check` accepts its output (at most
    /// [`Sharded::wait`]); the last output otherwise.
    pub async fn until(
        &self,
        user: &str,
        path: &str,
        args: &[&str],
        check: impl Fn(&KubectlOutput) -> bool,
    ) -> anyhow::Result<KubectlOutput> {
        let deadline = std::time::Instant::now() + self.wait;
        loop {
            let out = self.kubectl(user, path, args);
            if check(&out) {
                return Ok(out);
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!("kubectl {args:?} as {user} in {path}: last {out:?}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Waits until DependencyRule `rule` in workspace `path` is Ready (as the
    /// provider); the last kubectl output otherwise.
    pub async fn rule_ready(&self, path: &str, rule: &str) -> anyhow::Result<KubectlOutput> {
        let ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
        let args = ["get", "dependencyrule", rule, "-o", ready];
        self.until("provider", path, &args, |o| o.stdout.trim() == "True")
            .await
    }

    /// A provider workspace `path` created by the platform team on `shard` (its
    /// parent exists), owned by user `provider`, with holdfast's provider RBAC
    /// (docs/kcp.md, provider guide, step 2).
    pub fn provider_workspace(&self, path: &str, shard: &str) {
        let (parent, name) = path.rsplit_once(':').unwrap_or(("root", path));
        self.create_workspace(parent, name, shard);
        self.apply("platform", path, &admin_of("provider"));
        self.apply_k("provider", path, "overlays/kcp/workspace/provider");
    }

    /// As the provider in `path`: schemas for `resources` (plural, kind) of group
    /// `group`, exported as APIExport `group` (bindable by anyone), and the binding to
    /// holdfast.dev accepting the claim (docs/kcp.md, provider guide, step 1).
    pub fn provider_export(&self, path: &str, group: &str, resources: &[(&str, &str)]) {
        let mut names = Vec::new();
        for (plural, kind) in resources {
            self.apply("provider", path, &crate::kcp::schema(group, plural, kind));
            names.push(format!("v1.{plural}.{group}"));
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.apply("provider", path, &crate::kcp::export(group, &names));
        self.apply("provider", path, &bindable(group));
        self.apply("provider", path, holdfast_binding());
    }

    /// `kubectl holdfast ARGS` as `user` in workspace `path`.
    pub fn plugin(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        let file = format!("plugin-{user}.kubeconfig");
        let kubeconfig = match &self.real {
            Some(kcp) => real_kubeconfig(kcp, user),
            None => self
                .env
                .kubeconfig_for(&file, user)
                .unwrap_or_else(|e| panic!("kubeconfig for {user}: {e:#}")),
        };
        crate::kcp::holdfast_plugin(std::path::Path::new(&kubeconfig), &self.ws(path), args)
    }

    /// A kubeconfig of `user` at the front-proxy (its text) and `user`'s bearer
    /// token in it.
    pub fn user_kubeconfig(&self, user: &str) -> (String, String) {
        let Some(kcp) = &self.real else {
            let text = self.env.sim.kubeconfig_for_server(&self.url, user);
            return (text, format!("{user}-token"));
        };
        let file = kcp
            .kubeconfig_for(user, "root")
            .unwrap_or_else(|e| panic!("kubeconfig for {user}: {e:#}"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
        let token = kcp.token(user).unwrap_or_default().to_string();
        (text, token)
    }

    fn kubeconfig_for(&self, user: &str) -> anyhow::Result<String> {
        if let Some(kcp) = &self.real {
            return Ok(kcp
                .kubeconfig_for(user, HOLDFAST)?
                .to_string_lossy()
                .into_owned());
        }
        let path: PathBuf = self.env.dir.path().join(format!("{user}.kubeconfig"));
        std::fs::write(
            &path,
            self.env.sim.kubeconfig_for_server(&self.ws(HOLDFAST), user),
        )?;
        Ok(path.to_string_lossy().into_owned())
    }
}

/// The kubeconfig of `user` on the real kcp (`platform`: kcp's admin kubeconfig).
fn real_kubeconfig(kcp: &KcpBackend, user: &str) -> String {
    if user == "platform" {
        return kcp.admin_kubeconfig.to_string_lossy().into_owned();
    }
    kcp.kubeconfig_for(user, "root")
        .unwrap_or_else(|e| panic!("kubeconfig for {user}: {e:#}"))
        .to_string_lossy()
        .into_owned()
}

/// Sets up the two-shard topology (no consumer yet) on a fresh sim, or on a fresh
/// real kcp when [`on_real_kcp`].
pub async fn sharded() -> anyhow::Result<Sharded> {
    let mut env = Env::start_with(sim_config()).await?;
    let (url, wait, real, kcp_dir) = if on_real_kcp() {
        let dir = tempfile::Builder::new()
            .prefix("holdfast-kcp-sharded-")
            .tempdir()?;
        let kcp = KcpBackend::start(&dir.path().join("kcp")).await?;
        env.kubeconfig = kcp.admin_kubeconfig.clone();
        let url = crate::backend::kcp::FRONT_PROXY.to_string();
        (url, crate::kcp_real::KCP_WAIT, Some(kcp), Some(dir))
    } else {
        (env.sim.url(), crate::MIN_WAIT, None, None)
    };
    let mut t = Sharded {
        env,
        url,
        controller_kubeconfig: String::new(),
        webhook_kubeconfig: String::new(),
        wait,
        real,
        _kcp_dir: kcp_dir,
    };
    // The platform team: workspaces, holdfast's API and holdfast's RBAC.
    t.create_workspace("root", "holdfast", "root");
    t.create_workspace("root", "providers", "root");
    t.apply_k("platform", HOLDFAST, "kcp");
    t.apply_k("platform", HOLDFAST, "overlays/kcp/workspace/holdfast");
    t.provider_workspace(COMPUTE, "root");
    t.provider_workspace(NETWORK, "shard-1");

    // Providers: their types, their exports (bindable by anyone), their binding to
    // holdfast.dev and the webhook's read of the dependent export's virtual
    // workspace (docs/kcp.md, provider guide).
    t.provider_export(
        COMPUTE,
        "compute.test.io",
        &[("virtualmachines", "VirtualMachine")],
    );
    t.provider_export(
        NETWORK,
        "network.test.io",
        &[("vpcs", "VPC"), ("subnets", "Subnet")],
    );
    for args in [
        &[
            "create",
            "clusterrole",
            "holdfast-webhook-content",
            "--verb=list,watch",
            "--resource=apiexports.apis.kcp.io/content",
            "--resource-name=compute.test.io",
        ][..],
        &[
            "create",
            "clusterrolebinding",
            "holdfast-webhook-content",
            "--clusterrole=holdfast-webhook-content",
            "--user=holdfast-webhook",
        ][..],
    ] {
        let out = t.kubectl("provider", COMPUTE, args);
        anyhow::ensure!(out.code == 0, "{args:?}: {out:?}");
    }
    t.until("provider", COMPUTE, &["get", "dependencyrules"], |o| {
        o.code == 0
    })
    .await?;
    t.controller_kubeconfig = t.kubeconfig_for("holdfast-controller")?;
    t.webhook_kubeconfig = t.kubeconfig_for("holdfast-webhook")?;
    Ok(t)
}
