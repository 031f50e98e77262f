//! holdfast on a real kcp (`crate::backend::kcp`: two shards, front-proxy,
//! cache server), the way `docs/kcp.md` installs it: the harness of the tests on
//! the real kcp (`tests/kcp_real*.rs`).
//!
//! kcp makes workspaces asynchronously (Scheduling, Initializing, Ready) and its
//! admission reads webhook configurations from the cache server, so every step
//! waits for what kcp shows (a workspace Ready, a binding Bound, a server-side
//! dry-run DELETE refused) rather than assuming it.

use crate::{
    Env, KubectlOutput,
    backend::kcp::KcpBackend,
    controller::{ControllerProcess, start_controller},
    denied_by,
    kcp_sharded::{holdfast_binding, workspace_on},
};
use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

pub const HOLDFAST: &str = "root:holdfast";
pub const CONSUMER: &str = "root:consumer";
pub const COMPUTE: &str = "root:compute";
pub const NETWORK: &str = "root:providers:network";

/// How long a wait for kcp may take (replication through the cache server,
/// virtual workspaces reconciling their APIs, a loaded 2-core machine).
pub const KCP_WAIT: Duration = Duration::from_secs(120);

/// A real kcp, an environment for holdfast's binaries (its sim stays idle) and
/// the clock of the test. Dropped in order: holdfast, kcp, then the work dir.
pub struct Real {
    pub controller: Option<ControllerProcess>,
    pub env: Env,
    pub kcp: KcpBackend,
    pub t0: Instant,
    _dir: tempfile::TempDir,
}

pub fn manifests(dir: &str) -> String {
    crate::workspace_root()
        .join("manifests")
        .join(dir)
        .to_string_lossy()
        .into_owned()
}

/// Everything `user` may do in a workspace.
pub fn admin_of(user: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {user}-admin}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
         subjects:\n- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}\n"
    )
}

impl Real {
    pub async fn start(test: &str) -> Self {
        let t0 = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("holdfast-kcp-real-")
            .tempdir()
            .expect("temporary directory");
        let kcp = KcpBackend::start(&dir.path().join("kcp"))
            .await
            .expect("the kcp backend starts (hack/substrates.sh kcp builds it)");
        let mut env = Env::start_with(holdfast_sim::SimConfig::default())
            .await
            .expect("env");
        env.kubeconfig = kcp.admin_kubeconfig.clone();
        let real = Self {
            controller: None,
            env,
            kcp,
            t0,
            _dir: dir,
        };
        real.step(&format!(
            "{test}: kcp ready to test ({:.1}s from spawn)",
            real.kcp.started_in.as_secs_f64()
        ));
        real
    }

    pub fn step(&self, what: &str) {
        eprintln!("[kcp_real {:6.1}s] {what}", self.t0.elapsed().as_secs_f64());
    }

    /// The kubeconfig of `user` (`platform`: kcp's admin kubeconfig).
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        if user == "platform" {
            return self.kcp.admin_kubeconfig.clone();
        }
        self.kcp
            .kubeconfig_for(user, "root")
            .unwrap_or_else(|e| panic!("kubeconfig for {user}: {e:#}"))
    }

    /// kubectl as `user` in workspace `path`, through the front-proxy.
    pub fn kubectl(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        self.kubectl_at(user, &KcpBackend::workspace_url(path), args)
    }

    /// kubectl as `user` at `server` (a workspace or a virtual workspace URL).
    pub fn kubectl_at(&self, user: &str, server: &str, args: &[&str]) -> KubectlOutput {
        let kubeconfig = self.kubeconfig(user);
        let mut all = vec![
            "--kubeconfig",
            kubeconfig.to_str().unwrap_or_default(),
            "--server",
            server,
        ];
        all.extend_from_slice(args);
        self.env
            .kubectl(&all)
            .unwrap_or_else(|e| panic!("kubectl {args:?}: {e:#}"))
    }

    /// `kubectl holdfast ARGS` as `user` in workspace `path`.
    pub fn plugin(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        crate::kcp::holdfast_plugin(
            &self.kubeconfig(user),
            &KcpBackend::workspace_url(path),
            args,
        )
    }

    pub fn file(&self, manifest: &str) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = self.env.dir.path().join(format!(
            "manifest-{}.yaml",
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&path, manifest).expect("manifest");
        path.to_string_lossy().into_owned()
    }

    pub fn apply(&self, user: &str, path: &str, manifest: &str) {
        let file = self.file(manifest);
        let out = self.kubectl(user, path, &["apply", "-f", &file]);
        assert_eq!(
            out.code, 0,
            "apply as {user} in {path}: {out:?}\n{manifest}"
        );
    }

    pub fn apply_k(&self, user: &str, path: &str, dir: &str) {
        let out = self.kubectl(user, path, &["apply", "-k", &manifests(dir)]);
        assert_eq!(out.code, 0, "apply -k {dir} as {user} in {path}: {out:?}");
    }

    pub fn ok(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        let out = self.kubectl(user, path, args);
        assert_eq!(out.code, 0, "kubectl {args:?} as {user} in {path}: {out:?}");
        out
    }

    /// Runs kubectl as `user` in `path` until `check` accepts its output (at
    /// most [`KCP_WAIT`]); panics with the last output and holdfast's logs.
    pub async fn until(
        &self,
        user: &str,
        path: &str,
        args: &[&str],
        check: impl Fn(&KubectlOutput) -> bool,
    ) -> KubectlOutput {
        self.until_at(user, &KcpBackend::workspace_url(path), args, check)
            .await
    }

    /// [`Real::until`] at `server` (a workspace or a virtual workspace URL).
    pub async fn until_at(
        &self,
        user: &str,
        server: &str,
        args: &[&str],
        check: impl Fn(&KubectlOutput) -> bool,
    ) -> KubectlOutput {
        let deadline = Instant::now() + KCP_WAIT;
        loop {
            let out = self.kubectl_at(user, server, args);
            if check(&out) {
                return out;
            }
            if Instant::now() > deadline {
                panic!(
                    "kubectl {args:?} as {user} at {server}: still {out:?} after {}s\n{}",
                    KCP_WAIT.as_secs(),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    pub fn logs(&self) -> String {
        let controller = self
            .controller
            .as_ref()
            .map(ControllerProcess::log)
            .unwrap_or_default();
        let tail = |s: &str| {
            let l: Vec<&str> = s.lines().collect();
            l[l.len().saturating_sub(30)..].join("\n")
        };
        format!(
            "--- controller (last lines)\n{}\n--- webhook (last lines)\n{}",
            tail(&controller),
            tail(&self.env.webhook_log())
        )
    }

    /// As the platform team: workspace `name` in `parent` on `shard`, owned by
    /// `owner` (every right in it); waits until kcp reports it Ready. Its path.
    pub async fn workspace(&self, parent: &str, name: &str, shard: &str, owner: &str) -> String {
        self.apply("platform", parent, &workspace_on(name, shard));
        let phase = ["get", "workspace", name, "-o", "jsonpath={.status.phase}"];
        self.until("platform", parent, &phase, |o| o.stdout == "Ready")
            .await;
        let path = format!("{parent}:{name}");
        self.apply("platform", &path, &admin_of(owner));
        path
    }

    /// The logical cluster of workspace `path` (its parent's Workspace's
    /// `spec.cluster`).
    pub fn logical_cluster(&self, path: &str) -> String {
        let (parent, name) = path.rsplit_once(':').expect("a child workspace");
        let out = self.ok(
            "platform",
            parent,
            &["get", "workspace", name, "-o", "jsonpath={.spec.cluster}"],
        );
        assert!(!out.stdout.is_empty(), "{path}: no spec.cluster");
        out.stdout
    }

    /// As `user` in `path`: binds holdfast.dev accepting its claims, and waits
    /// until the binding is Bound.
    pub async fn bind_holdfast(&self, user: &str, path: &str) {
        self.bind(user, path, holdfast_binding()).await;
        self.bound(user, path, "holdfast").await;
    }

    /// Creates APIBinding `manifest` as `user` in `path`, again while kcp answers
    /// "no permission to bind": a shard checks `bind` in an export workspace on
    /// another shard against the cache server's replica of that workspace's RBAC,
    /// so a fresh grant counts there only once replicated.
    pub async fn bind(&self, user: &str, path: &str, manifest: &str) {
        let file = self.file(manifest);
        let since = Instant::now();
        let out = self
            .until(user, path, &["apply", "-f", &file], |o| {
                o.code == 0 || !o.stderr.contains("no permission to bind")
            })
            .await;
        assert_eq!(out.code, 0, "bind as {user} in {path}: {out:?}\n{manifest}");
        if since.elapsed() > Duration::from_secs(1) {
            self.step(&format!(
                "binding in {path} admitted after {:.1}s of \"no permission to bind\"",
                since.elapsed().as_secs_f64()
            ));
        }
    }

    pub async fn bound(&self, user: &str, path: &str, binding: &str) {
        let phase = [
            "get",
            "apibinding",
            binding,
            "-o",
            "jsonpath={.status.phase}",
        ];
        self.until(user, path, &phase, |o| o.stdout == "Bound")
            .await;
    }

    /// docs/kcp.md, "Platform team: install": the holdfast workspace (on shard
    /// `root`), holdfast's API and the RBAC of its identities; kcp makes the
    /// APIExportEndpointSlice `holdfast.dev` next to the export.
    pub async fn install_holdfast_api(&self) {
        self.workspace("root", "holdfast", "root", "platform").await;
        self.apply_k("platform", HOLDFAST, "kcp");
        self.apply_k("platform", HOLDFAST, "overlays/kcp/workspace/holdfast");
        self.until(
            "platform",
            HOLDFAST,
            &[
                "get",
                "apiexportendpointslice",
                "holdfast.dev",
                "-o",
                "name",
            ],
            |o| o.code == 0,
        )
        .await;
        self.step("holdfast's APIExport and RBAC installed in root:holdfast");
    }

    /// As the platform team: lets `user` bind holdfast.dev.
    pub fn let_bind_holdfast(&self, user: &str) {
        self.ok(
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
    }

    /// Starts the webhook and the controller as holdfast's identities (their
    /// kubeconfigs point at the holdfast workspace through the front-proxy), each
    /// with `flags` too (flags both must agree on, e.g. `--strict`), and waits
    /// until the controller is ready.
    pub async fn start_holdfast(&mut self, flags: &[&str]) {
        let webhook = self
            .kcp
            .kubeconfig_for("holdfast-webhook", HOLDFAST)
            .expect("kubeconfig");
        let controller = self
            .kcp
            .kubeconfig_for("holdfast-controller", HOLDFAST)
            .expect("kubeconfig");
        let webhook = webhook.to_string_lossy().into_owned();
        let controller = controller.to_string_lossy().into_owned();
        let mut webhook_args = vec![
            "--topology",
            "kcp",
            "--kubeconfig",
            &webhook,
            "--dependents",
            "watch",
        ];
        webhook_args.extend_from_slice(flags);
        let mut controller_args = vec!["--kubeconfig", &controller, "--topology", "kcp"];
        controller_args.extend_from_slice(flags);
        self.env
            .start_webhook(&webhook_args)
            .await
            .expect("holdfast-webhook starts");
        let port = self.env.webhook.as_ref().map(|w| w.port).expect("port");
        let mut c = start_controller(&self.env, "controller", port, &controller_args)
            .expect("holdfast-controller starts");
        let ready = c.wait_ready(KCP_WAIT.as_secs()).await;
        self.controller = Some(c);
        if let Err(e) = ready {
            panic!("holdfast-controller not ready: {e:#}\n{}", self.logs());
        }
        self.env
            .wait_webhook_ready()
            .await
            .unwrap_or_else(|e| panic!("webhook not ready: {e:#}\n{}", self.logs()));
        self.step("holdfast-controller ready, holdfast-webhook ready");
    }

    /// Repeats a server-side dry-run `kubectl delete ARGS` as `user` in `path`
    /// until a webhook refuses it: kcp enforces a new or changed configuration only
    /// once it came back from the cache server (and a call that fails on a loaded
    /// machine, a TLS handshake timing out, is not the refusal waited for).
    /// Returns the refusal.
    pub async fn refused(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        let mut all = vec!["delete"];
        all.extend_from_slice(args);
        all.push("--dry-run=server");
        let since = Instant::now();
        let out = self
            .until(user, path, &all, |o| {
                o.code != 0 && o.stderr.contains("denied the request")
            })
            .await;
        self.step(&format!(
            "delete {} in {path} refused after {:.2}s of dry runs",
            args.join(" "),
            since.elapsed().as_secs_f64()
        ));
        out
    }

    pub fn condition(&self, user: &str, path: &str, kind: &str, name: &str, type_: &str) -> String {
        let query = format!(
            "jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}}/{{.status.conditions[?(@.type==\"{type_}\")].reason}}"
        );
        self.kubectl(user, path, &["get", kind, name, "-o", &query])
            .stdout
    }
}

/// holdfast's refusal of deleting ConfigMap `default/NAME` labelled
/// `holdfast.dev/protected=Always`.
pub fn label_denial(name: &str) -> String {
    denied_by(
        "delete-label-0.holdfast.dev",
        &format!(
            "holdfast: ConfigMap default/{name} is protected by label holdfast.dev/protected=Always \
             (policy: label holdfast.dev/protected), so it cannot be deleted. To delete it, remove \
             the label (kubectl label configmaps {name} -n default holdfast.dev/protected-), or set \
             the annotation holdfast.dev/skip-protection=true if you are allowed to bypass \
             protection."
        ),
    )
}

/// [`label_denial`] under `--strict`: the label goes only after the exemption.
pub fn strict_label_denial(name: &str) -> String {
    let target = format!("configmaps {name} -n default");
    denied_by(
        "delete-label-0.holdfast.dev",
        &format!(
            "holdfast: ConfigMap default/{name} is protected by label holdfast.dev/protected=Always \
             (policy: label holdfast.dev/protected), so it cannot be deleted. To delete it, first \
             mark it exempt in its own update, as strict mode is on (kubectl label {target} \
             holdfast.dev/strict-exempt=true, which takes the bypass permission), then remove the \
             label (kubectl label {target} holdfast.dev/protected-), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    )
}
