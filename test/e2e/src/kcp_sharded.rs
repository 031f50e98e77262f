//! The seed 003 topology on a kcp of two shards behind a front-proxy, where nobody
//! but the platform team is `system:masters`: holdfast runs as the users
//! `holdfast-controller` and `holdfast-webhook` with exactly the RBAC that
//! `manifests/overlays/kcp/workspace` ships plus the two per-export grants
//! `docs/kcp.md` tells providers and consumers to make; providers and consumers act
//! as users of their own.
//!
//! Placement: `root:holdfast`, `root:compute` and `root:providers` on shard `root`;
//! `root:providers:network` on `shard-1`; consumers on the shard the test names.

use crate::{Env, KubectlOutput};
use holdfast_sim::{SimConfig, User};
use std::path::{Path, PathBuf};

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

/// A two-shard sim with the topology set up.
pub struct Sharded {
    /// The environment (sim, webhook...).
    pub env: Env,
    /// The front-proxy's base URL.
    pub url: String,
    /// The controller's kubeconfig (user holdfast-controller, holdfast workspace).
    pub controller_kubeconfig: String,
    /// The webhook's kubeconfig (user holdfast-webhook, holdfast workspace).
    pub webhook_kubeconfig: String,
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
        let mut all = vec!["--server", server.as_str()];
        all.extend_from_slice(args);
        self.env
            .kubectl_as(user, &all)
            .unwrap_or_else(|e| panic!("kubectl: {e}"))
    }

    /// `kubectl apply` of `manifest` as `user` in workspace `path`; panics on failure.
    pub fn apply(&self, user: &str, path: &str, manifest: &str) {
        let file = self.manifest_file(manifest);
        let out = self.kubectl(user, path, &["apply", "-f", &file]);
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

    /// Waits (at most [`crate::MIN_WAIT`]) until Workspace `name` in `parent` is
    /// Ready; panics with its last phase otherwise.
    pub fn wait_workspace_ready(&self, parent: &str, name: &str) {
        let deadline = std::time::Instant::now() + crate::MIN_WAIT;
        let args = ["get", "workspace", name, "-o", "jsonpath={.status.phase}"];
        loop {
            let out = self.kubectl("platform", parent, &args);
            if out.code == 0 && out.stdout.trim() == "Ready" {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "workspace {name} in {parent} not Ready: {out:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
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
    /// [`crate::MIN_WAIT`]); the last output otherwise.
    pub async fn until(
        &self,
        user: &str,
        path: &str,
        args: &[&str],
        check: impl Fn(&KubectlOutput) -> bool,
    ) -> anyhow::Result<KubectlOutput> {
        let deadline = std::time::Instant::now() + crate::MIN_WAIT;
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
        let kubeconfig = self
            .env
            .kubeconfig_for(&file, user)
            .unwrap_or_else(|e| panic!("kubeconfig for {user}: {e:#}"));
        crate::kcp::holdfast_plugin(std::path::Path::new(&kubeconfig), &self.ws(path), args)
    }

    fn kubeconfig_for(&self, user: &str) -> anyhow::Result<String> {
        let path: PathBuf = self.env.dir.path().join(format!("{user}.kubeconfig"));
        std::fs::write(
            &path,
            self.env.sim.kubeconfig_for_server(&self.ws(HOLDFAST), user),
        )?;
        Ok(path.to_string_lossy().into_owned())
    }
}

/// Sets up the two-shard topology on a fresh sim (no consumer yet).
pub async fn sharded() -> anyhow::Result<Sharded> {
    let env = Env::start_with(sim_config()).await?;
    let url = env.sim.url();
    let mut t = Sharded {
        env,
        url,
        controller_kubeconfig: String::new(),
        webhook_kubeconfig: String::new(),
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
