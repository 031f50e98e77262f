//! Harness shared by the end-to-end tests and the demo: starts holdfast-sim, makes a
//! PKI, runs the real `holdfast-webhook` (and later `holdfast-controller`) binaries,
//! and drives the real `kubectl` against the sim.

pub mod controller;
pub mod fixtures;
pub mod kcp;

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
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{cn} CA"));
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
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

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Path of a workspace binary (`cargo build --workspace --bins` builds them).
pub fn bin(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test> or target/<profile>/<bin>
    let mut dirs = Vec::new();
    if let Some(parent) = exe.parent() {
        dirs.push(parent.to_path_buf());
        if let Some(grand) = parent.parent() {
            dirs.push(grand.to_path_buf());
        }
    }
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "binary {name} not found next to {}; run `cargo build --workspace --bins` first",
        exe.display()
    )
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
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
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
    _sim_runtime: SimRuntime,
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
    /// Starts a sim with its default users.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(SimConfig::default()).await
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
        let probe_port = free_port()?;
        let mut cmd = Command::new(bin("holdfast-webhook")?);
        if !args.contains(&"--kubeconfig") {
            cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        }
        let child = cmd
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--probe-listen")
            .arg(format!("127.0.0.1:{probe_port}"))
            .arg("--tls-cert")
            .arg(self.dir.path().join("tls.crt"))
            .arg("--tls-key")
            .arg(self.dir.path().join("tls.key"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)?,
            )
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
        self.kubectl_stdin(&["apply", "-f", "-"], &json.to_string())?
            .ok()?;
        Ok(())
    }

    /// Installs holdfast's CRDs from `manifests/crds/` with kubectl, as a user would.
    pub fn install_crds(&self) -> anyhow::Result<()> {
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
        let cfg = serde_json::json!({
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
        self.kubectl_stdin(&["apply", "-f", "-"], &cfg.to_string())?
            .ok()?;
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

    /// Runs kubectl until `check` accepts its output, for at most `secs` seconds.
    pub async fn kubectl_until(
        &self,
        args: &[&str],
        secs: u64,
        check: impl Fn(&KubectlOutput) -> bool,
    ) -> anyhow::Result<KubectlOutput> {
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

    /// Runs kubectl as sim user `user` (its kubeconfig is written on first use).
    pub fn kubectl_as(&self, user: &str, args: &[&str]) -> anyhow::Result<KubectlOutput> {
        let path = self.dir.path().join(format!("kubeconfig-{user}"));
        if !path.exists() {
            self.sim.write_kubeconfig(&path, user)?;
        }
        self.kubectl_io_with(&path, args, None)
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
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
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
        let mut env = Self::start().await?;
        env.kubeconfig = kubeconfig
            .canonicalize()
            .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
        env.pki = pki_for_host("holdfast-webhook", webhook_host)?;
        std::fs::write(env.dir.path().join("tls.crt"), &env.pki.cert_pem)?;
        std::fs::write(env.dir.path().join("tls.key"), &env.pki.key_pem)?;
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
        let probe_port = free_port()?;
        let log = self.dir.path().join("webhook.log");
        let child = Command::new(bin("holdfast-webhook")?)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--probe-listen")
            .arg(format!("127.0.0.1:{probe_port}"))
            .arg("--tls-cert")
            .arg(self.dir.path().join("tls.crt"))
            .arg("--tls-key")
            .arg(self.dir.path().join("tls.key"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting holdfast-webhook")?;
        let mut w = WebhookProcess {
            child,
            port: listen.port(),
            probe_port,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_get(probe_port, "/healthz").await.map(|(s, _)| s) == Ok(200) {
                self.webhook = Some(w);
                return Ok(());
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
        eprintln!("skipped {test}: {why}; it runs on the simulator only ({E2E_KUBECONFIG} is set)");
        true
    } else {
        false
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
    pub async fn for_kubernetes_test() -> anyhow::Result<Self> {
        match e2e_cluster() {
            Some(kubeconfig) => {
                let host = webhook_host();
                Self::on_cluster(&kubeconfig, &host).await
            }
            None => Self::start().await,
        }
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
        Ok(format!("https://{}:{}/validate", webhook_host(), w.port))
    }
}

fn webhook_host() -> String {
    std::env::var(E2E_WEBHOOK_HOST)
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "127.0.0.1".to_string())
}
