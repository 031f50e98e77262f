//! Harness shared by the end-to-end tests and the demo: starts holdfast-sim, makes a
//! PKI, runs the real `holdfast-webhook` (and later `holdfast-controller`) binaries,
//! and drives the real `kubectl` against the sim.

pub mod alerts;
pub mod backend;
pub mod balancer;
pub mod controller;
pub mod delete_load;
pub mod fixtures;
pub mod fleet;
pub mod helm;
pub mod kcp;
pub mod kcp_real;
pub mod kcp_sharded;
pub mod rbac;
pub mod slow_link;
pub mod steps;

use anyhow::{Context, bail};
use holdfast_shared::{
    labels::{ProtectionLabel, ProtectionLabels},
    webhookconfig::{FailurePolicy, InstallOptions, WebhookTarget, desired_configuration},
};
use holdfast_sim::{Sim, SimConfig, SimHandle};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use std::{
    io::Write,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

/// How long one kubectl run may take.
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// The shortest deadline any wait for a condition gets, whatever the caller asks: a
/// loaded machine must never turn a slow success into a failure.
pub const MIN_WAIT: Duration = Duration::from_secs(30);

/// A CA and a serving certificate for 127.0.0.1/localhost.
pub struct Pki {
    /// CA certificate (PEM).
    pub ca_pem: String,
    /// Serving certificate (PEM).
    pub cert_pem: String,
    /// Serving key (PEM).
    pub key_pem: String,
}

/// Makes a fresh PKI.
pub fn pki(cn: &str) -> anyhow::Result<Pki> {
    pki_for_host(cn, "localhost")
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Path of a workspace binary, never a stale one: when the binary is older than any
/// source it is built from (its crate's and its path dependencies' `src/` and
/// `Cargo.toml`, the workspace's `Cargo.toml` and `Cargo.lock`), the workspace
/// binaries are rebuilt first with `cargo build --workspace --bins` (checked once per
/// process and binary, under a lock). `HOLDFAST_E2E_NO_BUILD=1` turns the rebuild
/// into an error instead.
pub fn bin(name: &str) -> anyhow::Result<PathBuf> {
    use std::{
        collections::HashMap,
        sync::{Mutex, OnceLock},
    };
    static CHECKED: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let checked = CHECKED.get_or_init(|| Mutex::new(HashMap::new()));
    // One check (and at most one build) per binary and process: the lock is held
    // while building, so parallel tests wait for it instead of racing.
    let mut checked = match checked.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if let Some(path) = checked.get(name) {
        return Ok(path.clone());
    }
    let path = locate_bin(name)?;
    let sources = bin_sources(name)?;
    let built = path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    let newest = newest_source(&sources)?;
    let stale = match (built, &newest) {
        (Some(b), Some((n, _))) => *n > b,
        (None, _) => true,
        (Some(_), None) => false,
    };
    if stale {
        let why = match (&path, &newest) {
            (None, _) => "it is not built".to_string(),
            (Some(p), Some((_, src))) => format!("{} is older than {}", p.display(), src.display()),
            (Some(p), None) => format!("{} is stale", p.display()),
        };
        if std::env::var_os("HOLDFAST_E2E_NO_BUILD").is_some() {
            bail!("binary {name}: {why}; run `cargo build --workspace --bins`");
        }
        // The whole workspace's binaries, as hack/test.sh builds them: the same
        // feature unification, so the build reuses what is already compiled.
        eprintln!("holdfast-e2e: building the workspace binaries ({why})");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        // Not the variables cargo set for this test: build scripts watching them
        // would rebuild what the last `cargo build` compiled.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .iter()
            .any(|p| key.starts_with(p))
            {
                cmd.env_remove(key.as_ref());
            }
        }
        let status = cmd
            .current_dir(workspace_root())
            .args(["build", "--workspace", "--bins"])
            .args(profile_flag())
            .stdout(Stdio::null())
            .status()
            .context("running cargo build --workspace --bins")?;
        if !status.success() {
            bail!("cargo build --workspace --bins failed ({status}) while {why}");
        }
    }
    let path = locate_bin(name)?.with_context(|| {
        format!("binary {name} not found after building; run `cargo build --workspace --bins`")
    })?;
    checked.insert(name.to_string(), path.clone());
    Ok(path)
}

/// The repository root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `--release` when the running test was built in release mode.
fn profile_flag() -> Vec<&'static str> {
    if cfg!(debug_assertions) {
        Vec::new()
    } else {
        vec!["--release"]
    }
}

/// The binary next to the running executable (`target/<profile>/deps/<test>` or
/// `target/<profile>/<bin>`), if built.
fn locate_bin(name: &str) -> anyhow::Result<Option<PathBuf>> {
    let exe = std::env::current_exe()?;
    let mut dirs = Vec::new();
    if let Some(parent) = exe.parent() {
        dirs.push(parent.to_path_buf());
        if let Some(grand) = parent.parent() {
            dirs.push(grand.to_path_buf());
        }
    }
    Ok(dirs.into_iter().map(|d| d.join(name)).find(|c| c.is_file()))
}

/// The directories and files binary `name` is built from.
fn bin_sources(name: &str) -> anyhow::Result<Vec<PathBuf>> {
    let root = workspace_root();
    let krate = |dir: &str| {
        [
            root.join(dir).join("src"),
            root.join(dir).join("Cargo.toml"),
        ]
    };
    let mut sources = vec![root.join("Cargo.toml"), root.join("Cargo.lock")];
    sources.extend(krate("shared"));
    match name {
        "holdfast-webhook" => sources.extend(krate("webhook")),
        "kubectl-holdfast" => {
            sources.extend(krate("webhook"));
            sources.extend(krate("plugin"));
        }
        "holdfast-controller" => sources.extend(krate("controller")),
        "holdfast-sim" => sources.extend(krate("test/sim")),
        n if n == "holdfast-demo"
            || n == "holdfast-backend"
            || n.starts_with("holdfast-bench-") =>
        {
            sources.extend(krate("test/sim"));
            sources.extend(krate("test/e2e"));
        }
        other => bail!("unknown workspace binary {other}"),
    }
    Ok(sources)
}

/// The most recently modified file among `paths` (directories walked).
fn newest_source(paths: &[PathBuf]) -> anyhow::Result<Option<(std::time::SystemTime, PathBuf)>> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut stack: Vec<PathBuf> = paths.to_vec();
    while let Some(p) = stack.pop() {
        let meta = match std::fs::metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| p.display().to_string()),
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        } else {
            let m = meta.modified()?;
            if newest.as_ref().is_none_or(|(t, _)| m > *t) {
                newest = Some((m, p));
            }
        }
    }
    Ok(newest)
}

/// Path of the real kubectl, or a clear error saying how to get it.
pub fn kubectl_path() -> anyhow::Result<PathBuf> {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join("kubectl");
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!("kubectl not found on PATH: run hack/prereqs.sh (or `apt-get install kubectl`)")
}

/// What a kubectl run printed.
#[derive(Debug)]
pub struct KubectlOutput {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl KubectlOutput {
    fn from(out: Output) -> Self {
        Self {
            code: out.status.code().unwrap_or(-1),
            stdout: one_wording(&String::from_utf8_lossy(&out.stdout)),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Fails unless kubectl exited 0.
    pub fn ok(self) -> anyhow::Result<Self> {
        if self.code != 0 {
            bail!(
                "kubectl failed ({}): {}{}",
                self.code,
                self.stdout,
                self.stderr
            );
        }
        Ok(self)
    }

    /// Whether kubectl refused with the API server's answer: exit code 1 and `text`
    /// in standard error (give the whole refusal, not a prefix every refusal shares).
    pub fn refused_with(&self, text: &str) -> bool {
        self.code == 1 && self.stderr.contains(text)
    }

    /// Whether kubectl refused with exactly one of `texts` (the possible refusals when
    /// several webhooks refuse, [`denied_by_any`]): exit code 1 and that text in
    /// standard error.
    pub fn refused_with_one_of(&self, texts: &[String]) -> bool {
        self.code == 1
            && texts
                .iter()
                .filter(|t| self.stderr.contains(t.as_str()))
                .count()
                == 1
    }

    /// Whether this is kubectl's answer for an object that does not exist
    /// (`Error from server (NotFound)`, exit code 1).
    pub fn is_not_found(&self) -> bool {
        self.code == 1 && self.stderr.contains("(NotFound)")
    }

    /// Standard output parsed as JSON, failing unless kubectl exited 0.
    pub fn json(self) -> anyhow::Result<serde_json::Value> {
        let out = self.ok()?;
        serde_json::from_str(&out.stdout)
            .with_context(|| format!("kubectl printed no JSON: {}", out.stdout))
    }
}

/// kubectl's confirmation of a deletion in one wording whatever its version:
/// kubectl v1.35 and later print `configmap "db" deleted from shop namespace` where
/// earlier ones print `configmap "db" deleted`; the tests compare the latter.
pub fn one_wording(stdout: &str) -> String {
    let mut out = String::with_capacity(stdout.len());
    for line in stdout.split_inclusive('\n') {
        let (whole, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        // A dry run adds ` (server dry run)` after either wording.
        let (body, dry) = match whole.strip_suffix(" (server dry run)") {
            Some(b) => (b, " (server dry run)"),
            None => (whole, ""),
        };
        let trimmed = body
            .rsplit_once(" deleted from ")
            .filter(|(_, ns)| {
                ns.strip_suffix(" namespace").is_some_and(|n| {
                    !n.is_empty()
                        && n.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                })
            })
            .map(|(head, _)| format!("{head} deleted{dry}"));
        out.push_str(trimmed.as_deref().unwrap_or(whole));
        out.push_str(nl);
    }
    out
}

/// The `admission webhook "NAME" denied the request: holdfast: ...` refusal kubectl
/// prints when webhook `name` refuses with `message`.
pub fn denied_by(name: &str, message: &str) -> String {
    format!("admission webhook \"{name}\" denied the request: {message}")
}

/// The refusals kubectl may print when every one of `webhooks` refuses with
/// `message`: kube-apiserver calls the matching webhooks at once and returns the
/// refusal that reaches it first, so which of them is named varies from run to run.
pub fn denied_by_any(webhooks: &[&str], message: &str) -> Vec<String> {
    webhooks.iter().map(|w| denied_by(w, message)).collect()
}

/// A running `holdfast-webhook`.
pub struct WebhookProcess {
    child: Child,
    /// HTTPS port.
    pub port: u16,
    /// Probe port.
    pub probe_port: u16,
    /// Where its log goes.
    pub log: PathBuf,
}

impl WebhookProcess {
    /// Waits until /readyz answers 200, for at most `secs` seconds.
    pub async fn wait_ready(&self, secs: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if http_get(self.probe_port, "/readyz").await.map(|(s, _)| s) == Ok(200) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                bail!("webhook not ready within {secs}s: {log}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident set size in KiB (0 if unknown).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id())
    }
}

/// Resident set size of process `pid` in KiB (0 if unknown).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

impl Drop for WebhookProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A sim, a scratch directory with a kubeconfig, and the processes under test.
pub struct Env {
    /// The simulator.
    pub sim: SimHandle,
    /// Scratch directory (kubeconfig, certificates, logs).
    pub dir: tempfile::TempDir,
    /// Admin kubeconfig for kubectl.
    pub kubeconfig: PathBuf,
    /// The webhook's PKI.
    pub pki: Pki,
    /// The webhook, once started.
    pub webhook: Option<WebhookProcess>,
    /// On the cluster of [`E2E_KUBECONFIG`]: what this test created there, removed
    /// when the env is dropped.
    pub cluster: Option<ClusterRun>,
    _sim_runtime: SimRuntime,
}

/// One test's footprint on an external cluster: an id labelling its namespaces
/// (`holdfast.dev/e2e-run=ID`, which its webhook configurations select), its
/// namespaces, and the cluster-scoped objects it created (as `kubectl delete` args).
#[derive(Debug, Default)]
pub struct ClusterRun {
    /// The run's id.
    pub id: String,
    namespaces: std::sync::Mutex<Vec<String>>,
    objects: std::sync::Mutex<Vec<Vec<String>>>,
    /// The suite's lock for the cluster, held shared while the test runs there:
    /// a test owning holdfast's cluster-wide objects (its configuration covers every
    /// namespace) waits for no other test to run.
    shared: std::sync::Mutex<Option<std::fs::File>>,
    /// The same lock held exclusively while the test owns holdfast's cluster-wide
    /// objects ([`Env::own_installation`]).
    installation: std::sync::Mutex<Option<std::fs::File>>,
    /// The controllers the test started (process ids), stopped before the
    /// installation's objects are removed so that none recreates them.
    controllers: std::sync::Mutex<Vec<u32>>,
}

/// The cluster-scoped objects holdfast's controller writes (admission policies
/// and their bindings, configuration, the reads ClusterRoles), as `(kind,
/// name)`, in the order they are removed: a test owning the installation removes
/// them when it ends, and finds none when it starts. The admission policies go
/// first (the self-protection policy refuses deleting the configuration), then
/// the configuration (its webhooks refuse deleting labelled objects).
pub const INSTALLATION_OBJECTS: [(&str, &str); 7] = [
    (
        "validatingadmissionpolicybinding",
        "holdfast-self-protection",
    ),
    ("validatingadmissionpolicy", "holdfast-self-protection"),
    ("validatingadmissionpolicybinding", "holdfast-backstop"),
    ("validatingadmissionpolicy", "holdfast-backstop"),
    ("validatingwebhookconfiguration", "holdfast"),
    ("clusterrole", "holdfast-reads-policies"),
    ("clusterrole", "holdfast-anchor-sources"),
];

/// The label marking a test's namespaces on an external cluster.
pub const E2E_RUN_LABEL: &str = "holdfast.dev/e2e-run";

impl ClusterRun {
    fn new() -> Self {
        Self {
            id: format!("{:08x}", rand_u32()),
            ..Default::default()
        }
    }

    /// Removes `kind`/`name` (cluster-scoped) when the test ends.
    pub fn remove_later(&self, kind: &str, name: &str) {
        if let Ok(mut o) = self.objects.lock() {
            o.push(vec![kind.to_string(), name.to_string()]);
        }
    }
}

impl Env {
    /// `kubectl args`, run again (for at most 30 s) while an admission policy or
    /// webhook configuration that was just removed or changed still refuses it: a
    /// real kube-apiserver enforces them from informers, so a deleted policy
    /// binding goes on refusing for a moment (the simulator forgets it at once).
    /// Returns the last answer.
    pub fn kubectl_past_lagging_admission(&self, args: &[&str]) -> anyhow::Result<KubectlOutput> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.kubectl(args)?;
            let lagging =
                out.stderr.contains("denied request") || out.stderr.contains("denied the request");
            if out.code == 0 || !lagging || Instant::now() >= deadline {
                return Ok(out);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A cleanup step (a `kubectl delete`) past lagging admission; failures are
    /// reported and left.
    fn delete_past_lagging_admission(&self, args: &[&str]) {
        match self.kubectl_past_lagging_admission(args) {
            Ok(out) if out.code == 0 => {}
            other => eprintln!("cleanup: kubectl {}: {other:?}", args.join(" ")),
        }
    }
}

/// Whether `pid` is a live (not yet reaped) child of this process (`/proc`).
fn is_own_child(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|ppid| ppid.parse::<u32>().ok())
        == Some(std::process::id())
}

impl Drop for Env {
    fn drop(&mut self) {
        let Some(run) = self.cluster.take() else {
            return;
        };
        let owned = run.installation.lock().map(|l| l.is_some()).unwrap_or(true);
        if owned {
            // No controller left to recreate what goes now; the configuration and
            // the admission policies go before anything they could refuse.
            // Only a registered controller still running as this process's child: one
            // already reaped may have left its pid to an unrelated process.
            for pid in run
                .controllers
                .lock()
                .map(|c| c.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|pid| is_own_child(*pid))
            {
                let _ = Command::new("kill")
                    .arg("-9")
                    .arg(pid.to_string())
                    .stderr(Stdio::null())
                    .status();
            }
            for (kind, name) in INSTALLATION_OBJECTS {
                self.delete_past_lagging_admission(&["delete", kind, name, "--ignore-not-found"]);
            }
        }
        // The webhook first: nothing of the test stays protected by it.
        self.webhook = None;
        let objects = run.objects.lock().map(|o| o.clone()).unwrap_or_default();
        let namespaces = run.namespaces.lock().map(|n| n.clone()).unwrap_or_default();
        let mut steps: Vec<Vec<String>> = objects
            .into_iter()
            .rev()
            .map(|o| {
                let mut v = vec!["delete".to_string()];
                v.extend(o);
                v.extend(["--ignore-not-found".to_string(), "--wait=false".to_string()]);
                v
            })
            .collect();
        for ns in namespaces {
            steps.push(
                [
                    "delete",
                    "namespace",
                    &ns,
                    "--ignore-not-found",
                    "--wait=false",
                ]
                .map(str::to_string)
                .to_vec(),
            );
        }
        for step in steps {
            self.delete_past_lagging_admission(
                &step.iter().map(String::as_str).collect::<Vec<_>>(),
            );
        }
        if owned {
            // A real API server deletes a namespace asynchronously (its contents
            // first) and the garbage collector removes dependents later: the next
            // test owning the installation must find none of it, so wait here.
            for o in run.objects.lock().map(|o| o.clone()).unwrap_or_default() {
                // Within the harness's own kubectl deadline.
                let mut args = vec!["wait", "--for=delete", "--timeout=50s"];
                args.extend(o.iter().map(String::as_str));
                match self.kubectl(&args) {
                    Ok(out) if out.code == 0 || out.stderr.contains("not found") => {}
                    other => eprintln!("cleanup: kubectl {}: {other:?}", args.join(" ")),
                }
            }
        }
        {
            // The CRDs last (holdfast's, when the test owned the installation, and
            // any of the test's own), waited for: the next test may install them
            // again.
            match self.kubectl(&[
                "delete",
                "crd",
                "-l",
                &format!("{E2E_RUN_LABEL}={}", run.id),
                "--ignore-not-found",
            ]) {
                Ok(out) if out.code == 0 => {}
                other => eprintln!("cleanup: kubectl delete crd: {other:?}"),
            }
        }
        // Dropping `run` releases the installation lock.
    }
}

/// The sim runs on a runtime of its own, on its own threads, so that tests blocking
/// their own runtime (kubectl calls) can never starve it. Dropping stops it.
struct SimRuntime {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SimRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start_sim(cfg: SimConfig) -> anyhow::Result<(SimHandle, SimRuntime)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("holdfast-sim".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("holdfast-sim-rt")
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(anyhow::Error::from(e)));
                    return;
                }
            };
            rt.block_on(async move {
                let _ = tx.send(Sim::start(cfg).await);
                let _ = stop_rx.await;
            });
            rt.shutdown_timeout(Duration::from_secs(2));
        })?;
    let sim = rx
        .recv()
        .context("the sim thread ended before starting")?
        .context("starting holdfast-sim")?;
    Ok((
        sim,
        SimRuntime {
            stop: Some(stop_tx),
            thread: Some(thread),
        },
    ))
}

impl Env {
    /// The entry point of a Kubernetes-topology test: a sim with its default
    /// users, or, when [`E2E_KUBECONFIG`] is set, that cluster (see
    /// [`Env::for_kubernetes_test`]). A test that needs the sim itself says so first
    /// with [`needs_simulator!`].
    pub async fn start() -> anyhow::Result<Self> {
        Self::for_kubernetes_test().await
    }

    /// Starts a sim with `cfg`.
    pub async fn start_with(cfg: SimConfig) -> anyhow::Result<Self> {
        let (sim, sim_runtime) = start_sim(cfg)?;
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        sim.write_kubeconfig(&kubeconfig, "admin")?;
        let pki = pki("holdfast-webhook")?;
        std::fs::write(dir.path().join("tls.crt"), &pki.cert_pem)?;
        std::fs::write(dir.path().join("tls.key"), &pki.key_pem)?;
        Ok(Self {
            sim,
            dir,
            kubeconfig,
            pki,
            webhook: None,
            cluster: None,
            _sim_runtime: sim_runtime,
        })
    }

    /// Starts `holdfast-webhook` with `args` on top of the TLS, listen and kubeconfig
    /// flags, and waits until it answers /healthz.
    pub async fn start_webhook(&mut self, args: &[&str]) -> anyhow::Result<()> {
        self.start_webhook_on(free_port()?, args).await
    }

    /// Like `start_webhook`, on a given HTTPS port (to restart in place). A later
    /// `--kubeconfig` in `args` overrides the sim's.
    pub async fn start_webhook_on(&mut self, port: u16, args: &[&str]) -> anyhow::Result<()> {
        let log = self.dir.path().join("webhook.log");
        let w = self.spawn_webhook(port, args, &log).await?;
        self.webhook = Some(w);
        Ok(())
    }

    /// Starts one more `holdfast-webhook` on `port` (the env's TLS pair and kubeconfig
    /// unless `args` names another), logging to `log`, and waits until it answers
    /// /healthz. The env does not keep it: dropping it stops it.
    pub async fn spawn_webhook(
        &self,
        port: u16,
        args: &[&str],
        log: &Path,
    ) -> anyhow::Result<WebhookProcess> {
        // On an external cluster the API server may be elsewhere: every address.
        let host = if self.cluster.is_some() {
            "0.0.0.0"
        } else {
            "127.0.0.1"
        };
        self.launch_webhook(&format!("{host}:{port}"), args, log)
            .await
    }

    /// `holdfast-webhook` listening on `listen` with the env's TLS pair and a probe
    /// port of its own (no other arguments).
    pub fn webhook_command(&self, listen: &str, probe_port: u16) -> anyhow::Result<Command> {
        let mut cmd = Command::new(bin("holdfast-webhook")?);
        cmd.args(["--listen", listen])
            .arg("--probe-listen")
            .arg(format!("127.0.0.1:{probe_port}"))
            .arg("--tls-cert")
            .arg(self.dir.path().join("tls.crt"))
            .arg("--tls-key")
            .arg(self.dir.path().join("tls.key"));
        Ok(cmd)
    }

    /// [`Env::webhook_command`] with the env's kubeconfig unless `args` names
    /// another, `args` last, appending to `log`; waits until it answers /healthz.
    async fn launch_webhook(
        &self,
        listen: &str,
        args: &[&str],
        log: &Path,
    ) -> anyhow::Result<WebhookProcess> {
        let port = listen
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .with_context(|| format!("no port in {listen}"))?;
        let probe_port = free_port()?;
        let mut cmd = self.webhook_command(listen, probe_port)?;
        if !args.contains(&"--kubeconfig") {
            cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        }
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = cmd
            .args(args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .context("starting holdfast-webhook")?;
        let mut w = WebhookProcess {
            child,
            port,
            probe_port,
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_get(probe_port, "/healthz").await.map(|(s, _)| s) == Ok(200) {
                return Ok(w);
            }
            if let Ok(Some(status)) = w.child.try_wait() {
                let log = std::fs::read_to_string(&w.log).unwrap_or_default();
                bail!("holdfast-webhook exited with {status}: {log}");
            }
            if Instant::now() > deadline {
                bail!("holdfast-webhook did not become healthy within 30s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Installs the label-protection webhook configuration pointing at the running
    /// webhook, with `kubectl apply` as a user would.
    pub fn install_label_webhooks(
        &self,
        extra_labels: &[&str],
        strict: bool,
    ) -> anyhow::Result<()> {
        let Some(w) = &self.webhook else {
            bail!("start the webhook first")
        };
        let labels = ProtectionLabels::with_extra(
            extra_labels
                .iter()
                .map(|s| s.parse::<ProtectionLabel>())
                .collect::<Result<Vec<_>, _>>()?,
        );
        let opts = InstallOptions {
            target: WebhookTarget::Url(format!("https://127.0.0.1:{}/validate", w.port)),
            ca_bundle: self.pki.ca_pem.as_bytes().to_vec(),
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: 10,
        };
        let cfg = desired_configuration(&labels, strict, &opts);
        let mut json = serde_json::to_value(&cfg)?;
        json["apiVersion"] = "admissionregistration.k8s.io/v1".into();
        json["kind"] = "ValidatingWebhookConfiguration".into();
        self.fit_configuration(&mut json)?;
        self.kubectl_stdin(&["apply", "-f", "-"], &json.to_string())?
            .ok()?;
        Ok(())
    }

    /// Installs holdfast's CRDs from `manifests/crds/` with kubectl, as a user would.
    /// On the cluster of [`E2E_KUBECONFIG`] the test owns the installation first
    /// ([`Env::own_installation`]) and labels the CRDs with its run id (removed when
    /// the env drops).
    pub fn install_crds(&self) -> anyhow::Result<()> {
        self.own_installation()?;
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/crds");
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.starts_with("holdfast.dev_") && name.ends_with(".yaml") {
                let file = path.to_string_lossy().into_owned();
                self.kubectl(&["apply", "-f", &file])?.ok()?;
                if let Some(run) = &self.cluster {
                    let label = format!("{E2E_RUN_LABEL}={}", run.id);
                    self.kubectl(&["label", "-f", &file, &label, "--overwrite"])?
                        .ok()?;
                }
            }
        }
        Ok(())
    }

    /// Installs a ValidatingWebhookConfiguration `name` sending DELETEs of `resources`
    /// (`(group, resource)`) to the running webhook.
    pub fn install_delete_webhook(
        &self,
        name: &str,
        resources: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let Some(w) = &self.webhook else {
            bail!("start the webhook first")
        };
        let rules: Vec<serde_json::Value> = resources
            .iter()
            .map(|(g, r)| {
                serde_json::json!({"operations": ["DELETE"], "apiGroups": [g], "apiVersions": ["*"],
                    "resources": [r], "scope": "*"})
            })
            .collect();
        let ca = base64_encode(self.pki.ca_pem.as_bytes());
        let mut cfg = serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": format!("{name}.holdfast.dev"),
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "clientConfig": {"url": format!("https://127.0.0.1:{}/validate", w.port), "caBundle": ca},
                "rules": rules
            }]
        });
        self.fit_configuration(&mut cfg)?;
        self.kubectl_stdin(&["apply", "-f", "-"], &cfg.to_string())?
            .ok()?;
        Ok(())
    }

    /// Applies `manifest`, CustomResourceDefinitions only, with kubectl; on the
    /// cluster of [`E2E_KUBECONFIG`] labels them with the run's id, which removes
    /// them when the env drops.
    pub fn apply_crds(&self, manifest: &str) -> anyhow::Result<()> {
        self.refuse_foreign_crds(manifest)?;
        self.kubectl_stdin(&["apply", "-f", "-"], manifest)?.ok()?;
        if let Some(run) = &self.cluster {
            let label = format!("{E2E_RUN_LABEL}={}", run.id);
            self.kubectl_stdin(&["label", "-f", "-", &label, "--overwrite"], manifest)?
                .ok()?;
        }
        Ok(())
    }

    /// Applies `manifest` (YAML or JSON) with kubectl.
    pub fn apply(&self, manifest: &str) -> anyhow::Result<KubectlOutput> {
        self.kubectl_stdin(&["apply", "-f", "-"], manifest)?.ok()
    }

    /// Waits until the webhook reports ready.
    pub async fn wait_webhook_ready(&self) -> anyhow::Result<()> {
        let Some(w) = &self.webhook else {
            bail!("start the webhook first")
        };
        w.wait_ready(30).await
    }

    /// `kubectl get ARGS -o json`, parsed; fails unless kubectl exited 0.
    pub fn get_json(&self, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        self.kubectl(&all)?.json()
    }

    /// Whether `kubectl get ARGS` finds the object: `true` when it exits 0, `false` on
    /// NotFound, an error on any other failure (a failing kubectl never reads as
    /// "absent").
    pub fn exists(&self, args: &[&str]) -> anyhow::Result<bool> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        let out = self.kubectl(&all)?;
        if out.code == 0 {
            Ok(true)
        } else if out.is_not_found() {
            Ok(false)
        } else {
            bail!("kubectl get {} failed: {out:?}", args.join(" "))
        }
    }

    /// The events.k8s.io Events (all namespaces) with `reason` about an object
    /// named `regarding`.
    pub fn events(&self, reason: &str, regarding: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let list = self.get_json(&["events.events.k8s.io", "-A"])?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == reason && e["regarding"]["name"] == regarding)
            .cloned()
            .collect())
    }

    /// Waits (at most `secs`) until at least one Event with `reason` about
    /// `regarding` exists; returns them all.
    pub async fn wait_events(
        &self,
        reason: &str,
        regarding: &str,
        secs: u64,
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let found = self.events(reason, regarding)?;
            if !found.is_empty() {
                return Ok(found);
            }
            if Instant::now() > deadline {
                let all = self.get_json(&["events.events.k8s.io", "-A"])?;
                bail!("no {reason} Event about {regarding} within {secs}s; events: {all}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The value of metric series `series` (exactly as exposed, e.g.
    /// `holdfast_webhook_audited_total{operation="DELETE"}`) on the webhook.
    pub async fn webhook_metric(&self, series: &str) -> anyhow::Result<Option<f64>> {
        let Some(w) = &self.webhook else {
            bail!("start the webhook first")
        };
        metric(w.probe_port, series).await
    }

    /// The webhook's `/metrics` text.
    async fn webhook_metrics(&self) -> anyhow::Result<String> {
        let Some(w) = &self.webhook else {
            bail!("start the webhook first")
        };
        metrics_text(w.probe_port).await
    }

    /// The types the webhook says it may not list (the `resource` of every series of
    /// `holdfast_webhook_unreadable_resources`), sorted.
    pub async fn webhook_unreadable(&self) -> anyhow::Result<Vec<String>> {
        let body = self.webhook_metrics().await?;
        let mut out: Vec<String> = body
            .lines()
            .filter_map(|l| l.strip_prefix("holdfast_webhook_unreadable_resources{resource=\""))
            .filter_map(|rest| rest.split('"').next())
            .map(str::to_string)
            .collect();
        out.sort();
        Ok(out)
    }

    /// Asserts the webhook decided through the source `--dependents MODE` names
    /// (metric `holdfast_webhook_dependents_lookups_total`): with `live` every lookup
    /// is a live LIST and the index is never consulted; with `watch` the index
    /// answers. A `--dependents` flag the webhook ignored fails here.
    pub async fn assert_dependents_source(&self, mode: &str) {
        let (live, index) = self.dependents_lookups().await;
        match mode {
            "live" => assert!(
                live >= 1.0 && index == 0.0,
                "--dependents live: lookups live {live}, index {index}"
            ),
            "watch" => assert!(
                index >= 1.0,
                "--dependents watch: lookups live {live}, index {index}"
            ),
            other => panic!("unknown --dependents mode {other}"),
        }
    }

    /// The webhook's dependents lookups so far, (live, index): the series of
    /// `holdfast_webhook_dependents_lookups_total` (an absent series is 0); panics
    /// when the metrics cannot be read.
    pub async fn dependents_lookups(&self) -> (f64, f64) {
        let series =
            |s: &str| format!("holdfast_webhook_dependents_lookups_total{{source=\"{s}\"}}");
        let live = self.webhook_metric(&series("live")).await;
        let index = self.webhook_metric(&series("index")).await;
        match (live, index) {
            (Ok(l), Ok(i)) => (l.unwrap_or(0.0), i.unwrap_or(0.0)),
            (l, i) => panic!("metrics unreadable: {l:?} {i:?}"),
        }
    }

    /// How many admission reviews of `operation` the webhook has answered (the sum of
    /// `holdfast_webhook_admission_requests_total` over decisions and deciders).
    pub async fn webhook_reviews(&self, operation: &str) -> anyhow::Result<u64> {
        let body = self.webhook_metrics().await?;
        let op = format!("operation=\"{operation}\"");
        let mut total = 0;
        for line in body.lines() {
            if let Some(rest) = line.strip_prefix("holdfast_webhook_admission_requests_total{")
                && let Some((labels, value)) = rest.split_once("} ")
                && labels.split(',').any(|l| l == op)
            {
                total += value
                    .trim()
                    .parse::<u64>()
                    .with_context(|| line.to_string())?;
            }
        }
        Ok(total)
    }

    /// Runs kubectl until `check` accepts its output, for at most `secs` seconds.
    pub async fn kubectl_until(
        &self,
        args: &[&str],
        secs: u64,
        check: impl Fn(&KubectlOutput) -> bool,
    ) -> anyhow::Result<KubectlOutput> {
        let secs = secs.max(MIN_WAIT.as_secs());
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let out = self.kubectl(args)?;
            if check(&out) {
                return Ok(out);
            }
            if Instant::now() > deadline {
                bail!(
                    "kubectl {} never gave the expected result; last: {out:?}",
                    args.join(" ")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs kubectl with the admin kubeconfig (killed after 60 s: a test never hangs
    /// on a kubectl that waits forever).
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<KubectlOutput> {
        self.kubectl_io(args, None)
    }

    /// Runs kubectl with `stdin` fed to it.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> anyhow::Result<KubectlOutput> {
        self.kubectl_io(args, Some(stdin))
    }

    /// Runs kubectl as `user` with [`Env::kubeconfig_for`] (written on first use).
    pub fn kubectl_as(&self, user: &str, args: &[&str]) -> anyhow::Result<KubectlOutput> {
        let path = self
            .dir
            .path()
            .join(format!("kubeconfig-{}", user.replace(':', "-")));
        if !path.exists() {
            self.write_kubeconfig_for(&path, user)?;
        }
        self.kubectl_io_with(&path, args, None)
    }

    /// A kubeconfig acting as `user`, written to `file` in the env's directory (its
    /// path returned): on a sim with that user's bearer token; on the cluster of
    /// [`E2E_KUBECONFIG`] the env's kubeconfig with `as: USER` and `as-groups` (the
    /// groups the API server gives such a user, [`impersonated_groups`]), so
    /// kubectl and the binaries act as `user` by impersonation (the kubeconfig's
    /// own user needs the `impersonate` verb).
    pub fn kubeconfig_for(&self, file: &str, user: &str) -> anyhow::Result<String> {
        let path = self.dir.path().join(file);
        self.write_kubeconfig_for(&path, user)?;
        Ok(path.to_string_lossy().into_owned())
    }

    /// The env's kubeconfig (the admin), with its API server reached through a
    /// [`slow_link::SlowLink`] the caller then slows down: the link, and the
    /// kubeconfig's path (`file` in the env's directory). The server keeps its
    /// host, so its certificate still matches.
    pub fn kubeconfig_through(&self, file: &str) -> anyhow::Result<(slow_link::SlowLink, String)> {
        use std::net::ToSocketAddrs;
        let mut config = self
            .kubectl(&["config", "view", "--minify", "--flatten", "-o", "json"])?
            .json()?;
        let Some(cluster) = config["clusters"]
            .as_array_mut()
            .and_then(|c| c.first_mut())
        else {
            bail!("the env's kubeconfig names no cluster");
        };
        let server = cluster["cluster"]["server"].as_str().unwrap_or_default();
        let uri: http::Uri = server
            .parse()
            .with_context(|| format!("the env's API server {server:?}"))?;
        let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
            bail!("the env's API server {server:?} has no host and port");
        };
        let upstream = (host, port)
            .to_socket_addrs()?
            .next()
            .with_context(|| format!("resolving {host}"))?;
        let link = slow_link::SlowLink::to(upstream)?;
        let through = format!(
            "https://{host}:{}{}",
            link.addr().port(),
            uri.path().trim_end_matches('/')
        );
        cluster["cluster"]["server"] = through.into();
        let path = self.dir.path().join(file);
        std::fs::write(&path, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok((link, path.to_string_lossy().into_owned()))
    }

    fn write_kubeconfig_for(&self, path: &Path, user: &str) -> anyhow::Result<()> {
        if self.cluster.is_none() {
            return self.sim.write_kubeconfig(path, user);
        }
        let mut config = self
            .kubectl(&["config", "view", "--minify", "--flatten", "-o", "json"])?
            .json()?;
        let Some(entry) = config["users"].as_array_mut().and_then(|u| u.first_mut()) else {
            bail!("the kubeconfig of {E2E_KUBECONFIG} names no user");
        };
        entry["user"]["as"] = user.into();
        entry["user"]["as-groups"] = impersonated_groups(user).into();
        std::fs::write(path, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    fn kubectl_io(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<KubectlOutput> {
        self.kubectl_io_with(&self.kubeconfig, args, stdin)
    }

    fn kubectl_io_with(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> anyhow::Result<KubectlOutput> {
        let mut cmd = Command::new(kubectl_path()?);
        cmd.env("KUBECONFIG", kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("running kubectl")?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())?;
        }
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let started = Instant::now();
        match rx.recv_timeout(KUBECTL_TIMEOUT) {
            Ok(out) => {
                if std::env::var("HOLDFAST_DEBUG_KUBECTL").is_ok()
                    && started.elapsed() > Duration::from_secs(2)
                {
                    eprintln!("slow kubectl ({:?}): {}", started.elapsed(), args.join(" "));
                }
                Ok(KubectlOutput::from(out?))
            }
            Err(_) => {
                let _ = Command::new("kill")
                    .arg("-9")
                    .arg(pid.to_string())
                    .stderr(Stdio::null())
                    .status();
                bail!(
                    "kubectl {} did not finish within {KUBECTL_TIMEOUT:?}",
                    args.join(" ")
                )
            }
        }
    }

    /// The webhook's log so far.
    pub fn webhook_log(&self) -> String {
        self.webhook
            .as_ref()
            .and_then(|w| std::fs::read_to_string(&w.log).ok())
            .unwrap_or_default()
    }
}

/// The `/metrics` text served on 127.0.0.1:`port`; an error unless it answers 200.
pub async fn metrics_text(port: u16) -> anyhow::Result<String> {
    let (status, body) = http_get(port, "/metrics")
        .await
        .map_err(|e| anyhow::anyhow!("GET /metrics: {e}"))?;
    if status != 200 {
        bail!("GET /metrics answered {status}: {body}");
    }
    Ok(body)
}

/// Plain HTTP GET against 127.0.0.1:`port` (probes); returns status and body.
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    let status = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((
        status,
        buf.split("\r\n\r\n").nth(1).unwrap_or_default().to_string(),
    ))
}

/// The value of metric series `series` (exactly as exposed, labels included) from
/// the Prometheus text at 127.0.0.1:`port`/metrics; `None` when the series is absent.
pub async fn metric(port: u16, series: &str) -> anyhow::Result<Option<f64>> {
    let body = metrics_text(port).await?;
    for line in body.lines() {
        if let Some(value) = line.strip_prefix(series).and_then(|r| r.strip_prefix(' ')) {
            return Ok(Some(
                value.trim().parse().with_context(|| line.to_string())?,
            ));
        }
    }
    Ok(None)
}

/// A rustls client configuration trusting the CAs in `ca_bundle` (PEM), offering the
/// ALPN protocols `alpn` (none: the server picks).
pub fn tls_client_config(ca_bundle: &str, alpn: &[&[u8]]) -> anyhow::Result<rustls::ClientConfig> {
    use rustls_pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
        roots.add(cert.context("CA bundle PEM")?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    Ok(config)
}

/// The certificate (DER) the TLS server on 127.0.0.1:`port` serves, verified
/// against `ca_bundle` (PEM) for the name 127.0.0.1: what an API server trusting
/// that bundle would see.
pub async fn served_certificate(port: u16, ca_bundle: &str) -> anyhow::Result<Vec<u8>> {
    use rustls_pki_types::ServerName;
    use std::sync::Arc;
    let config = tls_client_config(ca_bundle, &[])?;
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("127.0.0.1")?;
    let tls = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .context("TLS handshake timed out")??;
    let (_, conn) = tls.get_ref();
    let cert = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .context("the server sent no certificate")?;
    Ok(cert.as_ref().to_vec())
}

/// The DER of the first certificate in `pem`.
pub fn pem_to_der(pem: &str) -> anyhow::Result<Vec<u8>> {
    use rustls_pki_types::{CertificateDer, pem::PemObject};
    Ok(CertificateDer::from_pem_slice(pem.as_bytes())
        .context("no certificate in PEM")?
        .as_ref()
        .to_vec())
}

/// Standard base64 (for caBundle fields).
pub fn base64_encode(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A PKI whose serving certificate also names `host` (an IP address or a DNS
/// name), for a webhook that a remote API server calls.
pub fn pki_for_host(cn: &str, host: &str) -> anyhow::Result<Pki> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{cn} CA"));
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !names.iter().any(|n| n == host) {
        names.push(host.to_string());
    }
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn.to_string());
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Pki {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

impl Env {
    /// An env driving the cluster of `kubeconfig` instead of the sim: kubectl and
    /// the binaries use that kubeconfig, and the webhook's certificate names
    /// `webhook_host`, the address that cluster's API server calls it at. (The
    /// env still carries an idle sim, which nothing talks to.)
    pub async fn on_cluster(kubeconfig: &Path, webhook_host: &str) -> anyhow::Result<Self> {
        let mut env = Self::start_with(SimConfig::default()).await?;
        env.kubeconfig = kubeconfig
            .canonicalize()
            .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
        env.pki = pki_for_host("holdfast-webhook", webhook_host)?;
        std::fs::write(env.dir.path().join("tls.crt"), &env.pki.cert_pem)?;
        std::fs::write(env.dir.path().join("tls.key"), &env.pki.key_pem)?;
        env.cluster = Some(ClusterRun::new());
        Ok(env)
    }

    /// Starts `holdfast-webhook` listening on `listen` (e.g. `0.0.0.0:PORT`, for an
    /// API server on another host) with the env's kubeconfig and certificate, and
    /// waits until it answers /healthz.
    pub async fn start_webhook_listening(
        &mut self,
        listen: std::net::SocketAddr,
        args: &[&str],
    ) -> anyhow::Result<()> {
        let log = self.dir.path().join("webhook.log");
        let w = self.launch_webhook(&listen.to_string(), args, &log).await?;
        self.webhook = Some(w);
        Ok(())
    }
}

/// Kubeconfig of a cluster for the Kubernetes-topology tests to run against
/// instead of a sim (`Env::for_kubernetes_test`).
pub const E2E_KUBECONFIG: &str = "HOLDFAST_E2E_KUBECONFIG";
/// The address that cluster's API server reaches this host at (default 127.0.0.1).
pub const E2E_WEBHOOK_HOST: &str = "HOLDFAST_E2E_WEBHOOK_HOST";

/// The cluster of [`E2E_KUBECONFIG`], if set.
pub fn e2e_cluster() -> Option<PathBuf> {
    std::env::var_os(E2E_KUBECONFIG)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// For a test that needs the sim itself (its users, its RBAC model, its
/// controllers): when [`E2E_KUBECONFIG`] is set, says on stderr that `test` is
/// skipped and why, and returns true.
pub fn skipped_on_cluster(test: &str, why: &str) -> bool {
    if e2e_cluster().is_some() {
        // Straight to stderr, past the test harness's output capture: a skip is
        // reported whether the test passes or not.
        let line = format!(
            "skipped {test}: {why}; it runs on the simulator only ({E2E_KUBECONFIG} is set)"
        );
        let _ = writeln!(std::io::stderr(), "{line}");
        record(&line);
        true
    } else {
        false
    }
}

/// At the top of a test that needs the simulator itself (its users and RBAC
/// model, restarts and outages, sim-only objects, or cluster-wide objects a shared
/// cluster cannot lend it): when [`E2E_KUBECONFIG`] is set, prints
/// `skipped <test>: <why>; it runs on the simulator only (...)` on stderr and
/// returns from the test.
///
/// ```no_run
/// fn restarts_the_api_server() {
///     holdfast_e2e::needs_simulator!("it restarts the API server");
///     // ... the test itself
/// }
/// ```
#[macro_export]
macro_rules! needs_simulator {
    ($why:expr) => {
        if $crate::skipped_on_cluster(
            $crate::test_name({
                fn here() {}
                ::std::any::type_name_of_val(&here)
            }),
            $why,
        ) {
            return;
        }
    };
}

/// The test function's name from the type name of a function defined in it
/// (`crate::test::here`, or `crate::test::{{closure}}::here` in an async test).
pub fn test_name(here: &'static str) -> &'static str {
    let mut s = here.strip_suffix("::here").unwrap_or(here);
    while let Some(rest) = s.strip_suffix("::{{closure}}") {
        s = rest;
    }
    s.rsplit("::").next().unwrap_or(s)
}

/// Where the harness records, one line each, which tests were skipped and which
/// drove the cluster of [`E2E_KUBECONFIG`] (set by `hack/e2e-on-cluster.sh`).
pub const E2E_RECORD: &str = "HOLDFAST_E2E_RECORD";

/// Appends `line` to the file of [`E2E_RECORD`], if set (one write per line,
/// appended: lines of concurrent tests do not mix).
fn record(line: &str) {
    let Some(path) = std::env::var_os(E2E_RECORD).filter(|v| !v.is_empty()) else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        let _ = writeln!(std::io::stderr(), "cannot record to {path:?}: {e}");
    }
}

/// A fresh name `prefix-<8 random hex digits>` (a namespace of a test's own).
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    h.finish() as u32
}

impl Env {
    /// The env of a Kubernetes-topology test: the cluster of [`E2E_KUBECONFIG`]
    /// (the webhook called at [`E2E_WEBHOOK_HOST`]) when set, else a fresh sim.
    /// On a cluster, kubectl works on a copy of the kubeconfig whose namespace is
    /// one of the test's own ([`Env::namespace`]`("default")`), so objects created
    /// without `-n` land there.
    pub async fn for_kubernetes_test() -> anyhow::Result<Self> {
        match e2e_cluster() {
            Some(kubeconfig) => {
                let host = e2e_webhook_host();
                // libtest names each test's thread after the test.
                let test = std::thread::current()
                    .name()
                    .unwrap_or("unnamed")
                    .to_string();
                record(&format!("on-cluster {test}"));
                let mut env = Self::on_cluster(&kubeconfig, &host).await?;
                let copy = env.dir.path().join("kubeconfig");
                std::fs::copy(&env.kubeconfig, &copy)
                    .with_context(|| format!("copying {}", env.kubeconfig.display()))?;
                env.kubeconfig = copy;
                // Shared: no test owning the installation runs meanwhile.
                let file = env.cluster_lock_file()?;
                file.lock_shared()
                    .context("locking the suite's cluster lock")?;
                if let Some(run) = &env.cluster
                    && let Ok(mut shared) = run.shared.lock()
                {
                    *shared = Some(file);
                }
                let ns = env.namespace("default")?;
                env.kubectl(&["config", "set-context", "--current", "--namespace", &ns])?
                    .ok()?;
                Ok(env)
            }
            None => Self::start_with(SimConfig::default()).await,
        }
    }

    /// A namespace of the test's own, created: `name` on a sim; on a cluster
    /// `name-<8 hex digits>`, labelled [`E2E_RUN_LABEL`] (which the webhook
    /// configurations the harness installs select) and removed when the env drops.
    pub fn namespace(&self, name: &str) -> anyhow::Result<String> {
        let Some(run) = &self.cluster else {
            if name != "default" {
                self.kubectl(&["create", "namespace", name])?.ok()?;
            }
            return Ok(name.to_string());
        };
        let ns = unique_name(name);
        let manifest = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "labels": {E2E_RUN_LABEL: run.id}},
        });
        self.kubectl_stdin(&["create", "-f", "-"], &manifest.to_string())?
            .ok()?;
        if let Ok(mut n) = run.namespaces.lock() {
            n.push(ns.clone());
        }
        Ok(ns)
    }

    /// The namespace objects created without `-n` land in: `default` on a sim, the
    /// test's own on a cluster.
    pub fn default_namespace(&self) -> anyhow::Result<String> {
        if self.cluster.is_none() {
            return Ok("default".to_string());
        }
        let out = self
            .kubectl(&["config", "view", "--minify", "-o", "jsonpath={..namespace}"])?
            .ok()?;
        Ok(out.stdout.trim().to_string())
    }

    /// For a test that starts the controller, which owns cluster-wide objects (the
    /// configuration `holdfast`, the admission policies, the reads ClusterRoles,
    /// holdfast's CRDs): on the cluster of [`E2E_KUBECONFIG`], waits for the lock
    /// the suite takes on that cluster (one such test at a time, across test
    /// processes on this host), then refuses to go on if any of those objects is
    /// there (an installation the suite did not create). Everything of it is
    /// removed when the env drops. Nothing to do on a sim (the test's own).
    pub fn own_installation(&self) -> anyhow::Result<()> {
        let Some(run) = &self.cluster else {
            return Ok(());
        };
        let mut held = run
            .installation
            .lock()
            .map_err(|_| anyhow::anyhow!("installation lock poisoned"))?;
        if held.is_some() {
            return Ok(());
        }
        // Exclusive: first give up this test's shared hold (a lock of its own
        // would wait for itself).
        if let Ok(mut shared) = run.shared.lock() {
            *shared = None;
        }
        let file = self.cluster_lock_file()?;
        file.lock().context("locking the suite's cluster lock")?;
        let mut found = vec![];
        for (kind, name) in INSTALLATION_OBJECTS {
            let out = self
                .kubectl(&["get", kind, name, "--ignore-not-found", "-o", "name"])?
                .ok()?;
            found.extend(out.stdout.lines().map(str::to_string));
        }
        let crds = self.kubectl(&["get", "crd", "-o", "name"])?.ok()?;
        found.extend(
            crds.stdout
                .lines()
                .filter(|l| l.ends_with(".holdfast.dev"))
                .map(str::to_string),
        );
        if !found.is_empty() {
            bail!(
                "holdfast is installed on the cluster of {E2E_KUBECONFIG} ({}), and not by this \
                 test: the tests that start the controller own those cluster-wide objects and \
                 will not touch an installation they did not create; run them against a \
                 cluster without holdfast, or remove it",
                found.join(", ")
            );
        }
        *held = Some(file);
        Ok(())
    }

    /// Applies `manifests/overlays/<overlay>` as an administrator would. On the
    /// cluster of [`E2E_KUBECONFIG`] the test owns the installation
    /// ([`Env::own_installation`]; namespace `holdfast-system` must not exist
    /// either), the rendered Deployments and PodDisruptionBudgets are left out (the
    /// binaries run here, as the ServiceAccounts by impersonation,
    /// [`Env::kubeconfig_for`]), and every cluster-scoped object applied is removed
    /// when the env drops (the namespace with its contents; CRDs by the run label).
    pub fn install_overlay(&self, overlay: &str) -> anyhow::Result<()> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../manifests/overlays")
            .join(overlay);
        let Some(run) = &self.cluster else {
            self.kubectl(&["apply", "-k", &dir.to_string_lossy()])?
                .ok()
                .with_context(|| format!("applying manifests/overlays/{overlay}"))?;
            return Ok(());
        };
        self.own_installation()?;
        let rendered = self
            .kubectl(&["kustomize", &dir.to_string_lossy()])?
            .ok()?
            .stdout;
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&rendered)
            .with_context(|| format!("rendering manifests/overlays/{overlay}"))?;
        // The binaries run on this host: the Deployments are applied paused, so that
        // the installation is the shipped one and no pod of it starts there (and no
        // PodDisruptionBudget guards pods that never run).
        let docs: Vec<serde_json::Value> = docs
            .into_iter()
            .filter(|d| d["kind"] != "PodDisruptionBudget")
            .map(|mut d| {
                if d["kind"] == "Deployment" {
                    d["spec"]["paused"] = true.into();
                }
                d
            })
            .collect();
        // Any cluster-scoped object of the overlay already there (a namespace, a
        // ClusterRole, a binding, a CRD...) is an installation the suite did not
        // create: refuse rather than take it over and remove it afterwards.
        for d in docs.iter().filter(|d| d["metadata"]["namespace"].is_null()) {
            let (Some(kind), Some(name)) = (d["kind"].as_str(), d["metadata"]["name"].as_str())
            else {
                bail!("manifests/overlays/{overlay} renders an object without kind or name: {d}");
            };
            if self.exists(&[kind, name])? {
                bail!(
                    "{kind} {name} exists on the cluster of {E2E_KUBECONFIG}: holdfast may be \
                     installed there, and this test installs it itself; run it against a cluster \
                     without holdfast, or remove it"
                );
            }
        }
        let mut docs = docs;
        for d in &mut docs {
            if d["kind"] == "CustomResourceDefinition" {
                d["metadata"]["labels"][E2E_RUN_LABEL] = run.id.clone().into();
            } else if d["metadata"]["namespace"].is_null()
                && let (Some(kind), Some(name)) =
                    (d["kind"].as_str(), d["metadata"]["name"].as_str())
            {
                run.remove_later(kind, name);
            }
        }
        // One document at a time, in the rendered order (the namespace first).
        for d in &docs {
            self.kubectl_stdin(&["apply", "-f", "-"], &d.to_string())?
                .ok()
                .with_context(|| format!("applying manifests/overlays/{overlay}"))?;
        }
        Ok(())
    }

    /// The file whose lock serializes, on this host, the tests that own holdfast's
    /// installation on the cluster of [`E2E_KUBECONFIG`] against every other test
    /// there: in the temporary directory, named after the API server's URL.
    fn cluster_lock_file(&self) -> anyhow::Result<std::fs::File> {
        let server = self
            .kubectl(&[
                "config",
                "view",
                "--minify",
                "-o",
                "jsonpath={.clusters[0].cluster.server}",
            ])?
            .ok()?
            .stdout;
        let key = {
            use std::hash::{Hash as _, Hasher as _};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            server.trim().hash(&mut h);
            h.finish()
        };
        let path = std::env::temp_dir().join(format!("holdfast-e2e-installation-{key:016x}.lock"));
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("lock file {}", path.display()))
    }

    /// Registers a controller the test started (on a cluster it is stopped before
    /// the installation's objects are removed).
    pub fn register_controller(&self, pid: u32) {
        if let Some(run) = &self.cluster
            && let Ok(mut c) = run.controllers.lock()
        {
            c.push(pid);
        }
    }

    /// A webhook configuration of the harness, fitted to where it runs: on a
    /// cluster renamed `NAME-<run id>`, restricted to the test's namespaces, called
    /// at [`E2E_WEBHOOK_HOST`], and removed when the env drops.
    fn fit_configuration(&self, cfg: &mut serde_json::Value) -> anyhow::Result<()> {
        let Some(run) = &self.cluster else {
            return Ok(());
        };
        let name = format!(
            "{}-{}",
            cfg["metadata"]["name"].as_str().unwrap_or("holdfast-e2e"),
            run.id
        );
        cfg["metadata"]["name"] = name.clone().into();
        let url = self.webhook_url()?;
        for hook in cfg["webhooks"].as_array_mut().into_iter().flatten() {
            hook["namespaceSelector"] = serde_json::json!({"matchLabels": {E2E_RUN_LABEL: run.id}});
            hook["clientConfig"]["url"] = url.clone().into();
        }
        run.remove_later("validatingwebhookconfiguration", &name);
        Ok(())
    }

    /// Starts the webhook where the API server reaches it: on a sim, 127.0.0.1;
    /// on a cluster, every address of this host.
    pub async fn start_webhook_reachable(&mut self, args: &[&str]) -> anyhow::Result<()> {
        if e2e_cluster().is_some() {
            let listen = std::net::SocketAddr::from(([0, 0, 0, 0], free_port()?));
            self.start_webhook_listening(listen, args).await
        } else {
            self.start_webhook(args).await
        }
    }

    /// The URL the API server calls the running webhook at.
    pub fn webhook_url(&self) -> anyhow::Result<String> {
        let Some(w) = &self.webhook else {
            bail!("start the webhook first")
        };
        Ok(format!(
            "https://{}:{}/validate",
            e2e_webhook_host(),
            w.port
        ))
    }
}

/// The groups kube-apiserver gives an authenticated `user`: `system:authenticated`,
/// and for a ServiceAccount (`system:serviceaccount:NS:NAME`) also
/// `system:serviceaccounts` and `system:serviceaccounts:NS`.
pub fn impersonated_groups(user: &str) -> Vec<String> {
    let mut groups = vec![];
    if let Some(ns) = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .map(|(ns, _)| ns)
    {
        groups.push("system:serviceaccounts".to_string());
        groups.push(format!("system:serviceaccounts:{ns}"));
    }
    groups.push("system:authenticated".to_string());
    groups
}

/// The address the cluster of [`E2E_KUBECONFIG`] reaches this host at
/// ([`E2E_WEBHOOK_HOST`], default 127.0.0.1).
pub fn e2e_webhook_host() -> String {
    std::env::var(E2E_WEBHOOK_HOST)
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "127.0.0.1".to_string())
}

/// The controller's ServiceAccount as a user name, as the manifests name it.
pub const CONTROLLER_SA: &str = "system:serviceaccount:holdfast-system:holdfast-controller";

/// The webhook's ServiceAccount as a user name, as the manifests name it.
pub const WEBHOOK_SA: &str = "system:serviceaccount:holdfast-system:holdfast-webhook";

/// `cfg` with the shipped ServiceAccounts as sim users (tokens `controller-token` and
/// `webhook-token`, the groups Kubernetes gives a ServiceAccount): with the manifests'
/// RBAC applied, they hold exactly what the installation grants.
pub fn with_service_accounts(mut cfg: SimConfig) -> SimConfig {
    for (name, token) in [
        (CONTROLLER_SA, "controller-token"),
        (WEBHOOK_SA, "webhook-token"),
    ] {
        cfg.users.push(holdfast_sim::User {
            name: name.to_string(),
            token: token.to_string(),
            groups: vec![
                "system:serviceaccounts".to_string(),
                "system:serviceaccounts:holdfast-system".to_string(),
                "system:authenticated".to_string(),
            ],
            uid: None,
        });
    }
    cfg
}

impl Env {
    /// On the cluster of [`E2E_KUBECONFIG`]: removes `kind`/`name` in
    /// `namespace` (a namespace not of the test's own, e.g. `kube-system`) when
    /// the env drops, should the test not get to delete it itself. Nothing to do
    /// on a sim (the test's own).
    pub fn remove_later_in(&self, namespace: &str, kind: &str, name: &str) {
        if let Some(run) = &self.cluster
            && let Ok(mut o) = run.objects.lock()
        {
            o.push([kind, name, "-n", namespace].map(str::to_string).to_vec());
        }
    }
}

impl Env {
    /// On the cluster of [`E2E_KUBECONFIG`]: refuses to go on when a
    /// CustomResourceDefinition of `manifest` is there already and not labelled
    /// with this run's id: the cluster's own (its instances would go with it when
    /// the env drops), or another run's. Nothing to check on a sim (the test's own).
    pub fn refuse_foreign_crds(&self, manifest: &str) -> anyhow::Result<()> {
        let Some(run) = &self.cluster else {
            return Ok(());
        };
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(manifest).context("the CRDs' manifest")?;
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
        {
            let Some(name) = doc["metadata"]["name"].as_str() else {
                continue;
            };
            let out = self
                .kubectl(&["get", "crd", name, "--ignore-not-found", "-o", "json"])?
                .ok()?;
            if out.stdout.trim().is_empty() {
                continue;
            }
            let live: serde_json::Value = serde_json::from_str(&out.stdout)
                .with_context(|| format!("kubectl printed no JSON: {}", out.stdout))?;
            if live["metadata"]["labels"][E2E_RUN_LABEL] != run.id.as_str() {
                bail!(
                    "CustomResourceDefinition {name} exists on the cluster of {E2E_KUBECONFIG}, \
                     and not by this test: the test would change it and remove it (with its \
                     objects) when it ends; run it against a cluster without that CRD"
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_live_child_is_killed_at_cleanup() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        assert!(super::is_own_child(pid), "running child");
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            !super::is_own_child(pid),
            "reaped: its pid may be anyone's now"
        );
        assert!(!super::is_own_child(1), "init is nobody's child here");
        assert!(!super::is_own_child(u32::MAX), "no such process");
    }

    #[test]
    fn impersonated_groups_are_what_the_api_server_gives() {
        assert_eq!(super::impersonated_groups("dev"), ["system:authenticated"]);
        assert_eq!(
            super::impersonated_groups(super::WEBHOOK_SA),
            [
                "system:serviceaccounts",
                "system:serviceaccounts:holdfast-system",
                "system:authenticated"
            ]
        );
    }

    /// On a cluster, a CRD that is there already and not the run's own is never
    /// taken over (changed now, removed with its objects when the test ends);
    /// the run's own is applied again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crd_the_cluster_holds_is_not_taken_over() {
        let sim = super::Env::start_with(holdfast_sim::SimConfig::default())
            .await
            .expect("sim");
        let widgets = crate::fixtures::widget_crd();
        sim.apply(&widgets).expect("the cluster's own CRD");
        let cluster = super::Env::on_cluster(&sim.kubeconfig, "127.0.0.1")
            .await
            .expect("env on the cluster");
        let refused = cluster
            .apply_crds(&widgets)
            .expect_err("the cluster's own CRD taken over");
        assert_eq!(
            refused.to_string(),
            "CustomResourceDefinition widgets.example.com exists on the cluster of \
             HOLDFAST_E2E_KUBECONFIG, and not by this test: the test would change it and \
             remove it (with its objects) when it ends; run it against a cluster without that CRD"
        );
        let live = sim
            .get_json(&["crd", "widgets.example.com"])
            .expect("still there");
        assert!(
            live["metadata"]["labels"][super::E2E_RUN_LABEL].is_null(),
            "{live}"
        );
        // A CRD of the run's own: applied, and again.
        let cool = crate::fixtures::cool_crd();
        cluster.apply_crds(&cool).expect("the run's own CRD");
        cluster.apply_crds(&cool).expect("the run's own CRD again");
        drop(cluster);
        assert!(
            !sim.exists(&["crd", "coolresources.my.crd.group"])
                .expect("kubectl")
        );
        assert!(
            sim.exists(&["crd", "widgets.example.com"])
                .expect("kubectl")
        );
    }

    #[test]
    fn deletions_read_alike_from_every_kubectl() {
        assert_eq!(
            super::one_wording(
                "configmap \"db\" deleted from shop-1a2b namespace\nnamespace \"shop\" deleted\n"
            ),
            "configmap \"db\" deleted\nnamespace \"shop\" deleted\n"
        );
        // Only kubectl's own suffix: a name that says more stays as it is.
        assert_eq!(
            super::one_wording("configmap \"a deleted from X namespace\" created"),
            "configmap \"a deleted from X namespace\" created"
        );
        assert_eq!(super::one_wording("no newline"), "no newline");
        assert_eq!(
            super::one_wording("configmap \"a\" deleted from ns-1 namespace (server dry run)\n"),
            "configmap \"a\" deleted (server dry run)\n"
        );
        assert_eq!(
            super::one_wording("configmap \"a\" deleted (server dry run)\n"),
            "configmap \"a\" deleted (server dry run)\n"
        );
    }

    #[test]
    fn needs_simulator_names_the_test() {
        fn here() {}
        assert_eq!(
            super::test_name(std::any::type_name_of_val(&here)),
            "needs_simulator_names_the_test"
        );
        assert_eq!(
            super::test_name("least_privilege::a_test::{{closure}}::{{closure}}::here"),
            "a_test"
        );
    }
}
