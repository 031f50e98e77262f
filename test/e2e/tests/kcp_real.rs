//! holdfast on a real kcp (`holdfast_e2e::backend::kcp`: two shards, front-proxy,
//! cache server, kcp v0.31.2), installed as `docs/kcp.md` tells the platform team,
//! under the identities and RBAC it ships (`manifests/kcp`,
//! `manifests/overlays/kcp/workspace`): the real holdfast-controller and
//! holdfast-webhook run as the users `holdfast-controller` and `holdfast-webhook`
//! (bearer tokens, no other rights), the providers and the consumer act as users
//! of their own, and the real kubectl drives everything through the front-proxy.
//!
//! kcp makes workspaces asynchronously (Scheduling, Initializing, Ready) and its
//! admission reads webhook configurations from the cache server, so every step
//! waits for what kcp shows (a workspace Ready, a binding Bound, a server-side
//! dry-run DELETE refused) rather than assuming it.
//!
//! One kcp per machine (fixed ports): the tests of this file take turns on the
//! backend's lock, each on a kcp of its own.

use holdfast_e2e::{
    Env, KubectlOutput,
    backend::kcp::KcpBackend,
    controller::{ControllerProcess, start_controller},
    denied_by,
    kcp::{binding, export, schema, vm_vpc_rule},
    kcp_sharded::{bindable, holdfast_binding, workspace_on},
};
use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

const HOLDFAST: &str = "root:holdfast";
const CONSUMER: &str = "root:consumer";
const COMPUTE: &str = "root:compute";
const NETWORK: &str = "root:providers:network";

/// How long a wait for kcp may take (replication through the cache server,
/// virtual workspaces reconciling their APIs, a loaded 2-core machine).
const KCP_WAIT: Duration = Duration::from_secs(120);

/// A real kcp, an environment for holdfast's binaries (its sim stays idle) and
/// the clock of the test. Dropped in order: holdfast, kcp, then the work dir.
struct Real {
    controller: Option<ControllerProcess>,
    env: Env,
    kcp: KcpBackend,
    t0: Instant,
    _dir: tempfile::TempDir,
}

fn manifests(dir: &str) -> String {
    holdfast_e2e::workspace_root()
        .join("manifests")
        .join(dir)
        .to_string_lossy()
        .into_owned()
}

/// Everything `user` may do in a workspace.
fn admin_of(user: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {user}-admin}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
         subjects:\n- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}\n"
    )
}

impl Real {
    async fn start(test: &str) -> Self {
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

    fn step(&self, what: &str) {
        eprintln!("[kcp_real {:6.1}s] {what}", self.t0.elapsed().as_secs_f64());
    }

    /// The kubeconfig of `user` (`platform`: kcp's admin kubeconfig).
    fn kubeconfig(&self, user: &str) -> PathBuf {
        if user == "platform" {
            return self.kcp.admin_kubeconfig.clone();
        }
        self.kcp
            .kubeconfig_for(user, "root")
            .unwrap_or_else(|e| panic!("kubeconfig for {user}: {e:#}"))
    }

    /// kubectl as `user` in workspace `path`, through the front-proxy.
    fn kubectl(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        self.kubectl_at(user, &KcpBackend::workspace_url(path), args)
    }

    /// kubectl as `user` at `server` (a workspace or a virtual workspace URL).
    fn kubectl_at(&self, user: &str, server: &str, args: &[&str]) -> KubectlOutput {
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

    fn file(&self, manifest: &str) -> String {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = self.env.dir.path().join(format!(
            "manifest-{}.yaml",
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&path, manifest).expect("manifest");
        path.to_string_lossy().into_owned()
    }

    fn apply(&self, user: &str, path: &str, manifest: &str) {
        let file = self.file(manifest);
        let out = self.kubectl(user, path, &["apply", "-f", &file]);
        assert_eq!(
            out.code, 0,
            "apply as {user} in {path}: {out:?}\n{manifest}"
        );
    }

    fn apply_k(&self, user: &str, path: &str, dir: &str) {
        let out = self.kubectl(user, path, &["apply", "-k", &manifests(dir)]);
        assert_eq!(out.code, 0, "apply -k {dir} as {user} in {path}: {out:?}");
    }

    fn ok(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        let out = self.kubectl(user, path, args);
        assert_eq!(out.code, 0, "kubectl {args:?} as {user} in {path}: {out:?}");
        out
    }

    /// Runs kubectl as `user` in `path` until `check` accepts its output (at
    /// most [`KCP_WAIT`]); panics with the last output and holdfast's logs.
    async fn until(
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
    async fn until_at(
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

    fn logs(&self) -> String {
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
    async fn workspace(&self, parent: &str, name: &str, shard: &str, owner: &str) -> String {
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
    fn logical_cluster(&self, path: &str) -> String {
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
    async fn bind_holdfast(&self, user: &str, path: &str) {
        self.bind(user, path, holdfast_binding()).await;
        self.bound(user, path, "holdfast").await;
    }

    /// Creates APIBinding `manifest` as `user` in `path`, again while kcp answers
    /// "no permission to bind": a shard checks `bind` in an export workspace on
    /// another shard against the cache server's replica of that workspace's RBAC,
    /// so a fresh grant counts there only once replicated.
    async fn bind(&self, user: &str, path: &str, manifest: &str) {
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

    async fn bound(&self, user: &str, path: &str, binding: &str) {
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
    async fn install_holdfast_api(&self) {
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
    fn let_bind_holdfast(&self, user: &str) {
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
    async fn start_holdfast(&mut self, flags: &[&str]) {
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
    /// until it is refused: kcp enforces a new or changed configuration only once
    /// it came back from the cache server. Returns the refusal.
    async fn refused(&self, user: &str, path: &str, args: &[&str]) -> KubectlOutput {
        let mut all = vec!["delete"];
        all.extend_from_slice(args);
        all.push("--dry-run=server");
        let since = Instant::now();
        let out = self.until(user, path, &all, |o| o.code != 0).await;
        self.step(&format!(
            "delete {} in {path} refused after {:.2}s of dry runs",
            args.join(" "),
            since.elapsed().as_secs_f64()
        ));
        out
    }

    fn condition(&self, user: &str, path: &str, kind: &str, name: &str, type_: &str) -> String {
        let query = format!(
            "jsonpath={{.status.conditions[?(@.type==\"{type_}\")].status}}/{{.status.conditions[?(@.type==\"{type_}\")].reason}}"
        );
        self.kubectl(user, path, &["get", kind, name, "-o", &query])
            .stdout
    }
}

/// holdfast's refusal of deleting ConfigMap `default/NAME` labelled
/// `holdfast.dev/protected=Always`.
fn label_denial(name: &str) -> String {
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
fn strict_label_denial(name: &str) -> String {
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

/// (a) holdfast installs on a real kcp and its controller becomes ready; (b) in a
/// consumer workspace on the other shard, label protection and a
/// ResourceProtection refuse deleting ConfigMaps with holdfast's messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holdfast_installs_on_a_real_sharded_kcp_and_protects_a_consumer_workspace() {
    let mut r = Real::start("install").await;
    r.install_holdfast_api().await;

    // A consumer on shard-1 binds holdfast.dev (the platform team lets it) and
    // lets holdfast read (docs/kcp.md, consumer guide).
    r.workspace("root", "consumer", "shard-1", "consumer").await;
    r.let_bind_holdfast("consumer");
    r.bind_holdfast("consumer", CONSUMER).await;
    r.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    let lc = r.logical_cluster(CONSUMER);
    r.step(&format!("root:consumer ({lc}, shard-1) binds holdfast.dev"));
    // The slice lists the virtual workspace of the shard holding the binding.
    let slice = r
        .until(
            "platform",
            HOLDFAST,
            &[
                "get",
                "apiexportendpointslice",
                "holdfast.dev",
                "-o",
                "jsonpath={.status.endpoints[*].url}",
            ],
            |o| !o.stdout.is_empty(),
        )
        .await;
    assert!(slice.stdout.contains("/services/apiexport/"), "{slice:?}");

    r.start_holdfast(&[]).await;

    // The controller installs the consumer's configuration through the virtual
    // workspace; the consumer sees it, owned by its binding.
    let cfg = r
        .until(
            "consumer",
            CONSUMER,
            &[
                "get",
                "validatingwebhookconfiguration",
                "holdfast",
                "-o",
                "json",
            ],
            |o| o.code == 0,
        )
        .await
        .json()
        .expect("json");
    let names: Vec<&str> = cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["delete-label-0.holdfast.dev", "containment.holdfast.dev"],
        "{cfg}"
    );
    let url = cfg["webhooks"][0]["clientConfig"]["url"]
        .as_str()
        .unwrap_or_default();
    assert!(url.ends_with(&format!("/validate/kcp/{lc}")), "{url}");
    assert_eq!(
        cfg["metadata"]["ownerReferences"][0]["kind"], "APIBinding",
        "{cfg}"
    );
    r.step("configuration holdfast installed in root:consumer");

    // (b) Label protection: refused with holdfast's exact message, the
    // ConfigMap stays.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "configmap", "guarded", "-n", "default"],
    );
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "label",
            "configmap",
            "guarded",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    );
    let guarded_denial = label_denial("guarded");
    let out = r
        .refused(
            "consumer",
            CONSUMER,
            &["configmap", "guarded", "-n", "default"],
        )
        .await;
    assert!(out.refused_with(&guarded_denial), "{out:?}");
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "guarded", "-n", "default"],
    );
    assert!(out.refused_with(&guarded_denial), "{out:?}");
    r.ok(
        "consumer",
        CONSUMER,
        &["get", "configmap", "guarded", "-n", "default"],
    );
    // Without the label it goes.
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "label",
            "configmap",
            "guarded",
            "-n",
            "default",
            "holdfast.dev/protected-",
        ],
    );
    r.until(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "guarded", "-n", "default"],
        |o| o.code == 0,
    )
    .await;

    // (b) A ResourceProtection of ConfigMaps: Ready, then every ConfigMap of the
    // workspace is refused.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "configmap", "plain", "-n", "default"],
    );
    r.apply(
        "consumer",
        CONSUMER,
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {name: config}\n\
         spec:\n  resources:\n  - {group: \"\", version: v1, resource: configmaps}\n",
    );
    let ready = r
        .until(
            "consumer",
            CONSUMER,
            &[
                "get",
                "resourceprotection",
                "config",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            |o| o.stdout == "True",
        )
        .await;
    assert_eq!(ready.stdout, "True");
    assert_eq!(
        r.condition(
            "consumer",
            CONSUMER,
            "resourceprotection",
            "config",
            "Installed"
        ),
        "True/WebhookInstalled"
    );
    r.step("ResourceProtection config Ready");
    let rp_denial = denied_by(
        "policies-0.holdfast.dev",
        &format!(
            "holdfast: ConfigMap default/plain is protected by ResourceProtection/config (logical \
             cluster {lc}) (selects configmaps), so it cannot be deleted. To delete it, remove it \
             from the policy (kubectl edit resourceprotection config), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
    let out = r
        .refused(
            "consumer",
            CONSUMER,
            &["configmap", "plain", "-n", "default"],
        )
        .await;
    assert!(out.refused_with(&rp_denial), "{out:?}");
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "plain", "-n", "default"],
    );
    assert!(out.refused_with(&rp_denial), "{out:?}");
    r.ok(
        "consumer",
        CONSUMER,
        &["get", "configmap", "plain", "-n", "default"],
    );

    // A workspace that does not bind holdfast.dev is not judged by holdfast.
    let free = r.workspace("root", "free", "root", "consumer").await;
    r.ok(
        "consumer",
        &free,
        &["create", "configmap", "plain", "-n", "default"],
    );
    r.ok(
        "consumer",
        &free,
        &[
            "label",
            "configmap",
            "plain",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    );
    r.ok(
        "consumer",
        &free,
        &["delete", "configmap", "plain", "-n", "default"],
    );
    // The controller still leads after all of it.
    let c = r.controller.as_ref().expect("controller");
    assert!(c.is_ready().await, "{}", r.logs());

    // A CriticalService guards itself: kcp admits DELETEs of a type bound from
    // holdfast.dev through the holdfast workspace's configurations only
    // (kcp-facts 12), so the controller keeps one there routing them to the
    // consumer's logical cluster.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "serviceaccount", "registry", "-n", "default"],
    );
    r.apply(
        "consumer",
        CONSUMER,
        "apiVersion: holdfast.dev/v1alpha1\nkind: CriticalService\nmetadata: {name: registry}\n\
         spec:\n  provider: {group: \"\", resource: serviceaccounts, namespace: default, name: registry}\n  \
         criteria:\n  - type: Finalizer\n    finalizer: {group: \"\", resource: configmaps, finalizerName: example.io/in-use}\n",
    );
    r.until(
        "consumer",
        CONSUMER,
        &[
            "get",
            "criticalservice",
            "registry",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
        |o| o.stdout == "True",
    )
    .await;
    let own = r
        .until(
            "platform",
            HOLDFAST,
            &[
                "get",
                "validatingwebhookconfiguration",
                "holdfast",
                "-o",
                "jsonpath={.webhooks[*].name}",
            ],
            |o| o.code == 0,
        )
        .await;
    assert_eq!(own.stdout, "holdfast.dev.policies.holdfast.dev");
    let cs_denial = denied_by(
        "holdfast.dev.policies.holdfast.dev",
        &format!(
            "holdfast: CriticalService registry cannot be deleted while its provider \
             serviceaccounts default/registry exists (policy: CriticalService/registry (logical \
             cluster {lc})). To delete it, delete the provider first; this CriticalService keeps \
             it from going before its criteria are met, or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
    let out = r
        .refused("consumer", CONSUMER, &["criticalservice", "registry"])
        .await;
    assert!(out.refused_with(&cs_denial), "{out:?}");
    r.step("CriticalService registry guarded through root:holdfast's configuration");

    // Leaving holdfast (docs/kcp.md): kcp deletes the binding's objects (the
    // policies) through admission first. The CriticalService refuses its own
    // deletion while its provider exists, so the binding stays, saying why, and
    // holdfast keeps protecting the workspace.
    for args in [
        &["create", "configmap", "kept", "-n", "default"][..],
        &[
            "label",
            "configmap",
            "kept",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
        &["delete", "apibinding", "holdfast", "--wait=false"],
    ] {
        r.ok("consumer", CONSUMER, args);
    }
    let stuck =
        "jsonpath={.status.conditions[?(@.type==\"BindingResourceDeleteSuccess\")].message}";
    r.until(
        "consumer",
        CONSUMER,
        &["get", "apibinding", "holdfast", "-o", stuck],
        |o| {
            o.stdout
                .contains("CriticalService registry cannot be deleted while its provider")
        },
    )
    .await;
    assert_eq!(
        r.condition(
            "consumer",
            CONSUMER,
            "apibinding",
            "holdfast",
            "BindingResourceDeleteSuccess"
        ),
        "False/ResourceDeletionFailed"
    );
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &[
            "delete",
            "configmap",
            "kept",
            "-n",
            "default",
            "--dry-run=server",
        ],
    );
    assert!(out.refused_with(&label_denial("kept")), "{out:?}");
    r.step("APIBinding holdfast deleting: held by the CriticalService, protection goes on");
    // Once the provider is gone, the CriticalService goes, the binding with it,
    // and the configuration it owns (kcp's garbage collector): the ConfigMap is
    // then deleted normally.
    r.ok(
        "consumer",
        CONSUMER,
        &["delete", "serviceaccount", "registry", "-n", "default"],
    );
    r.until(
        "consumer",
        CONSUMER,
        &["get", "validatingwebhookconfiguration", "holdfast"],
        |o| o.is_not_found(),
    )
    .await;
    r.step("APIBinding holdfast deleted: configuration holdfast gone");
    r.until(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "plain", "kept", "-n", "default"],
        |o| o.code == 0,
    )
    .await;
    r.step("done");
}

/// As the provider in `path`: schemas for `resources` (plural, kind) of `group`,
/// exported as APIExport `group` (bindable by anyone), and the binding to
/// holdfast.dev accepting its claims (docs/kcp.md, provider guide, step 1).
async fn provider_export(r: &Real, path: &str, group: &str, resources: &[(&str, &str)]) {
    let mut names = Vec::new();
    for (plural, kind) in resources {
        r.apply("provider", path, &schema(group, plural, kind));
        names.push(format!("v1.{plural}.{group}"));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    r.apply("provider", path, &export(group, &names));
    r.apply("provider", path, &bindable(group));
    r.bind_holdfast("provider", path).await;
}

/// (c) Seed 003 across workspaces and shards: the compute provider (root:compute,
/// shard root) publishes a DependencyRule saying VirtualMachines reference VPCs of
/// the network provider (root:providers:network, shard shard-1); in the consumer
/// (root:consumer, shard-1), a VPC a VirtualMachine references cannot be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_rule_across_workspaces_protects_a_consumers_vpc_on_a_real_kcp() {
    let mut r = Real::start("dependency").await;
    r.install_holdfast_api().await;
    // The providers (group holdfast:providers may bind holdfast.dev).
    let compute = r.workspace("root", "compute", "root", "provider").await;
    r.workspace("root", "providers", "root", "provider").await;
    let network = r
        .workspace("root:providers", "network", "shard-1", "provider")
        .await;
    assert_eq!((compute.as_str(), network.as_str()), (COMPUTE, NETWORK));
    for path in [COMPUTE, NETWORK] {
        r.apply_k("provider", path, "overlays/kcp/workspace/provider");
    }
    provider_export(
        &r,
        COMPUTE,
        "compute.test.io",
        &[("virtualmachines", "VirtualMachine")],
    )
    .await;
    provider_export(
        &r,
        NETWORK,
        "network.test.io",
        &[("vpcs", "VPC"), ("subnets", "Subnet")],
    )
    .await;
    // docs/kcp.md, provider guide, step 3: the webhook watches the dependents
    // through the compute export's virtual workspace.
    r.ok(
        "provider",
        COMPUTE,
        &[
            "create",
            "clusterrole",
            "holdfast-webhook-content",
            "--verb=list,watch",
            "--resource=apiexports.apis.kcp.io/content",
            "--resource-name=compute.test.io",
        ],
    );
    r.ok(
        "provider",
        COMPUTE,
        &[
            "create",
            "clusterrolebinding",
            "holdfast-webhook-content",
            "--clusterrole=holdfast-webhook-content",
            "--user=holdfast-webhook",
        ],
    );
    r.step("providers: exports published, holdfast.dev bound");

    // The consumer binds both providers' exports and lets holdfast read.
    r.workspace("root", "consumer", "shard-1", "consumer").await;
    r.bind(
        "consumer",
        CONSUMER,
        &binding("compute", COMPUTE, "compute.test.io"),
    )
    .await;
    r.bind(
        "consumer",
        CONSUMER,
        &binding("network", NETWORK, "network.test.io"),
    )
    .await;
    r.bound("consumer", CONSUMER, "compute").await;
    r.bound("consumer", CONSUMER, "network").await;
    r.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "create",
            "clusterrole",
            "holdfast-dependents",
            "--verb=get,list",
            "--resource=virtualmachines.compute.test.io",
        ],
    );
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "create",
            "clusterrolebinding",
            "holdfast-dependents",
            "--clusterrole=holdfast-dependents",
            "--user=holdfast-webhook",
        ],
    );
    r.step("consumer binds compute.test.io and network.test.io");

    r.start_holdfast(&[]).await;
    r.apply("provider", COMPUTE, &vm_vpc_rule("vm-dependencies"));
    let ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
    r.until(
        "provider",
        COMPUTE,
        &["get", "dependencyrule", "vm-dependencies", "-o", ready],
        |o| o.stdout == "True",
    )
    .await;
    r.step("DependencyRule vm-dependencies Ready");
    // The network provider's configuration routes VPC DELETEs to holdfast.
    let cfg = r
        .until(
            "provider",
            NETWORK,
            &[
                "get",
                "validatingwebhookconfiguration",
                "holdfast",
                "-o",
                "json",
            ],
            |o| o.code == 0 && o.stdout.contains("vpcs"),
        )
        .await;
    assert!(cfg.stdout.contains("holdfast.dev"), "{cfg:?}");

    r.apply(
        "consumer",
        CONSUMER,
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {name: my-vpc, namespace: default}\n",
    );
    r.apply(
        "consumer",
        CONSUMER,
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {name: my-vm, namespace: default}\nspec: {vpcRef: {name: my-vpc}}\n",
    );
    let out = r
        .refused("consumer", CONSUMER, &["vpc", "my-vpc", "-n", "default"])
        .await;
    assert!(
        out.refused_with(
            "holdfast: VPC default/my-vpc is still referenced by VirtualMachine default/my-vm (policy: DependencyRule/vm-dependencies"
        ),
        "{out:?}"
    );
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "vpc", "my-vpc", "-n", "default"],
    );
    assert!(
        out.refused_with("still referenced by VirtualMachine default/my-vm"),
        "{out:?}"
    );
    // Once the VM is gone, the VPC goes.
    r.ok(
        "consumer",
        CONSUMER,
        &["delete", "virtualmachine", "my-vm", "-n", "default"],
    );
    r.until(
        "consumer",
        CONSUMER,
        &["delete", "vpc", "my-vpc", "-n", "default"],
        |o| o.code == 0,
    )
    .await;
    r.step("done");
}

/// The APIExport `claims.test.io` of a provider: no types of its own, a claim on
/// the consumer's ConfigMaps (kcp-facts 26).
const CLAIMS_EXPORT: &str = r#"apiVersion: apis.kcp.io/v1alpha2
kind: APIExport
metadata: {name: claims.test.io}
spec:
  permissionClaims:
  - group: ""
    resource: configmaps
    verbs: [get, list, watch, update, patch, delete]
"#;

/// The consumer's binding to `claims.test.io`, accepting its claim.
const CLAIMS_BINDING: &str = r#"apiVersion: apis.kcp.io/v1alpha2
kind: APIBinding
metadata: {name: claims}
spec:
  reference: {export: {path: "root:compute", name: claims.test.io}}
  permissionClaims:
  - group: ""
    resource: configmaps
    selector: {matchAll: true}
    verbs: [get, list, watch, update, patch, delete]
    state: Accepted
"#;

/// (d) Issue 30 item 1 (kcp-facts 26): a write through an APIExport's virtual
/// workspace carries kcp's warrant (group `system:kcp:admin`), which holdfast's
/// bypass check leaves out. Under `--strict`, a provider whose export claims the
/// consumer's ConfigMaps (accepted) can neither add the break-glass annotation to
/// a protected one through its virtual workspace nor then delete it; the
/// consumer's own admin, who holds `bypass` in its workspace, can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_cannot_break_glass_through_its_virtual_workspace_on_a_real_kcp() {
    let mut r = Real::start("warrant").await;
    r.install_holdfast_api().await;
    // The provider (root:compute, shard root) exports a claim on ConfigMaps; the
    // consumer (root:consumer, shard shard-1) binds holdfast.dev and the export,
    // accepting the claim.
    let provider = r.workspace("root", "compute", "root", "provider").await;
    assert_eq!(provider, COMPUTE);
    r.apply("provider", COMPUTE, CLAIMS_EXPORT);
    r.apply("provider", COMPUTE, &bindable("claims.test.io"));
    r.workspace("root", "consumer", "shard-1", "consumer").await;
    r.let_bind_holdfast("consumer");
    r.bind_holdfast("consumer", CONSUMER).await;
    r.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    r.bind("consumer", CONSUMER, CLAIMS_BINDING).await;
    r.bound("consumer", CONSUMER, "claims").await;
    let claims = "jsonpath={.status.conditions[?(@.type==\"PermissionClaimsApplied\")].status}";
    r.until(
        "consumer",
        CONSUMER,
        &["get", "apibinding", "claims", "-o", claims],
        |o| o.stdout == "True",
    )
    .await;
    let lc = r.logical_cluster(CONSUMER);
    r.step(&format!(
        "root:consumer ({lc}) binds holdfast.dev and claims.test.io"
    ));

    r.start_holdfast(&["--strict"]).await;

    // The consumer's protected ConfigMap; holdfast enforces its label.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "configmap", "vault", "-n", "default"],
    );
    r.ok(
        "consumer",
        CONSUMER,
        &[
            "label",
            "configmap",
            "vault",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    );
    let denial = strict_label_denial("vault");
    let out = r
        .refused(
            "consumer",
            CONSUMER,
            &["configmap", "vault", "-n", "default"],
        )
        .await;
    assert!(out.refused_with(&denial), "{out:?}");

    // The provider reaches the ConfigMap through its export's virtual workspace
    // (the slice lists shard-1's once the consumer binds there).
    let slice = r
        .until(
            "provider",
            COMPUTE,
            &[
                "get",
                "apiexportendpointslice",
                "claims.test.io",
                "-o",
                "jsonpath={.status.endpoints[*].url}",
            ],
            |o| !o.stdout.is_empty(),
        )
        .await;
    let urls: Vec<&str> = slice.stdout.split_whitespace().collect();
    assert_eq!(urls.len(), 1, "one shard binds claims.test.io: {slice:?}");
    assert!(
        urls[0].contains("/services/apiexport/") && urls[0].ends_with("/claims.test.io"),
        "{slice:?}"
    );
    let vw = format!("{}/clusters/{lc}", urls[0]);
    let get = ["get", "configmap", "vault", "-n", "default", "-o", "name"];
    r.until_at("provider", &vw, &get, |o| o.code == 0).await;
    r.step(&format!("provider reads configmap vault through {vw}"));

    // The break-glass annotation through the virtual workspace: refused by
    // holdfast's strict break-glass check (before the fix it was admitted), from
    // the strict label webhook of the consumer's configuration.
    let cfg = r.ok(
        "consumer",
        CONSUMER,
        &[
            "get",
            "validatingwebhookconfiguration",
            "holdfast",
            "-o",
            "jsonpath={.webhooks[*].name}",
        ],
    );
    r.step(&format!(
        "configuration holdfast in root:consumer: {}",
        cfg.stdout
    ));
    // Only the strict label webhook judges ConfigMap UPDATEs (the break-glass
    // webhook covers what policies protect), so exactly it refuses.
    let break_glass = r.ok(
        "consumer",
        CONSUMER,
        &[
            "get",
            "validatingwebhookconfiguration",
            "holdfast",
            "-o",
            "jsonpath={.webhooks[?(@.name==\"break-glass.holdfast.dev\")].rules[*].resources}",
        ],
    );
    assert!(
        !break_glass.stdout.contains("configmaps"),
        "{break_glass:?}"
    );
    r.step(&format!(
        "break-glass.holdfast.dev covers {}",
        break_glass.stdout
    ));
    let annotate = [
        "annotate",
        "configmap",
        "vault",
        "-n",
        "default",
        "holdfast.dev/skip-protection=true",
    ];
    let out = r.kubectl_at("provider", &vw, &annotate);
    let break_glass_denial = denied_by(
        "strict-label-0.holdfast.dev",
        "holdfast: user \"provider\" may not add annotation holdfast.dev/skip-protection to \
         ConfigMap default/vault: it is protected in strict mode, and lifting that protection \
         needs the permission to bypass it (verb bypass on protections.holdfast.dev in \
         namespace default). Ask someone who holds it.",
    );
    assert!(
        out.refused_with(&break_glass_denial),
        "{out:?}\n{}",
        r.logs()
    );
    r.step("provider's break-glass annotation through its virtual workspace refused");
    // Nothing was written, and the ConfigMap still cannot be deleted: not
    // through the virtual workspace, not in the workspace.
    let annotations = r.ok(
        "consumer",
        CONSUMER,
        &[
            "get",
            "configmap",
            "vault",
            "-n",
            "default",
            "-o",
            "jsonpath={.metadata.annotations}",
        ],
    );
    assert!(
        !annotations.stdout.contains("skip-protection"),
        "{annotations:?}"
    );
    let delete = ["delete", "configmap", "vault", "-n", "default"];
    let out = r.kubectl_at("provider", &vw, &delete);
    assert!(out.refused_with(&denial), "{out:?}");
    let out = r.kubectl("consumer", CONSUMER, &delete);
    assert!(out.refused_with(&denial), "{out:?}");
    r.ok(
        "consumer",
        CONSUMER,
        &["get", "configmap", "vault", "-n", "default"],
    );

    // Positive control: the consumer's admin holds bypass in its workspace (its
    // cluster-admin), so it may break glass, and the DELETE is then allowed.
    r.ok("consumer", CONSUMER, &annotate);
    r.ok("consumer", CONSUMER, &delete);
    let log = r.env.webhook_log();
    let honoured: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("break-glass honoured"))
        .collect();
    assert!(
        honoured.len() == 1 && honoured[0].contains("consumer"),
        "{honoured:?}"
    );
    r.step("done");
}
