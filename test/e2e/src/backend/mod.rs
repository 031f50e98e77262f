//! The real control planes the end-to-end suite runs on besides the simulator
//! (`HOLDFAST_E2E_BACKEND`): `kube` starts etcd, kube-apiserver and
//! kube-controller-manager built by `hack/substrates.sh`; `karmada` a Karmada
//! control plane (karmada-apiserver, Karmada's aggregated apiserver, webhook,
//! controller manager and scheduler) with one member cluster. Processes listen on
//! 127.0.0.1 only; a port taken between choosing it and binding it is retried.

pub mod karmada;
pub mod kcp;
mod kcp_saved;
pub mod kube;
pub mod pki;

use anyhow::{Context, bail};
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Where `hack/substrates.sh` puts `component`'s binaries (the script is the one
/// place that knows the pins).
pub fn substrate_bin(component: &str) -> anyhow::Result<PathBuf> {
    let script = crate::workspace_root().join("hack/substrates.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--print-dir", component])
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} --print-dir {component}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A process of a backend, killed (and reaped) when dropped; its output goes to
/// `DIR/NAME.log`.
pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with its output in `dir/name.log`.
    pub fn spawn(name: &str, dir: &Path, mut cmd: Command) -> anyhow::Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).with_context(|| log.display().to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", cmd.get_program()))?;
        Ok(Self {
            name: name.to_string(),
            child,
            log,
        })
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `ready` until it holds, failing after `within`.
pub async fn wait_for(
    what: &str,
    within: Duration,
    mut ready: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{what}: not ready within {}s", within.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts a server on a free port of 127.0.0.1: `make(port)` gives the command
/// and the URL it serves at. The server counts as started once the port accepts
/// connections; if it exits first because the port was taken in between, another
/// port is tried (up to five).
pub async fn start_on_free_port(
    name: &str,
    dir: &Path,
    mut make: impl FnMut(u16) -> (Command, String),
) -> anyhow::Result<(Proc, String)> {
    let mut last = String::new();
    for _ in 0..5 {
        let port = crate::free_port()?;
        let (cmd, url) = make(port);
        let mut p = Proc::spawn(name, dir, cmd)?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                if p.alive() {
                    return Ok((p, url));
                }
            } else if !p.alive() {
                last = p.log();
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "{name} did not listen on 127.0.0.1:{port} within 120s: {}",
                    p.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !last.contains("address already in use") {
            bail!("{name} exited at start: {last}");
        }
    }
    bail!("{name}: every port tried was taken: {last}")
}

/// A running etcd: its process and client URL.
pub struct Etcd {
    /// The process.
    pub proc: Proc,
    /// Its client URL (plain HTTP on 127.0.0.1).
    pub url: String,
}

/// Starts a one-member etcd with its data in `dir/etcd`, its log `dir/etcd.log`.
pub async fn start_etcd(bin: &Path, dir: &Path) -> anyhow::Result<Etcd> {
    let data = dir.join("etcd");
    let (proc, url) = start_on_free_port("etcd", dir, |port| {
        // A one-member cluster talks to no peer, but etcd binds the peer port
        // too: a second free port (a clash is retried like the client port's).
        let peer = format!("http://127.0.0.1:{}", crate::free_port().unwrap_or(0));
        let client = format!("http://127.0.0.1:{port}");
        let mut c = Command::new(bin);
        c.args([
            "--name=default",
            &format!("--data-dir={}", data.display()),
            &format!("--listen-client-urls={client}"),
            &format!("--advertise-client-urls={client}"),
            &format!("--listen-peer-urls={peer}"),
            &format!("--initial-advertise-peer-urls={peer}"),
            &format!("--initial-cluster=default={peer}"),
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]);
        (c, client)
    })
    .await?;
    Ok(Etcd { proc, url })
}

/// Waits (up to 120 s) until `kubectl get --raw /readyz` with `kubeconfig` says ok.
pub async fn wait_readyz(kubectl: &Path, kubeconfig: &Path) -> anyhow::Result<()> {
    wait_for("kube-apiserver /readyz", Duration::from_secs(120), || {
        let out = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "--raw", "/readyz"])
            .output();
        matches!(out, Ok(o) if o.status.success() && o.stdout.starts_with(b"ok"))
    })
    .await
}

/// The last lines of the logs `dir/NAME.log` of `names`, for an error message.
pub fn procs_logs(dir: &Path, names: &[&str]) -> String {
    let mut out = String::new();
    for name in names {
        let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        out.push_str(&format!("\n--- {name} (last lines)\n"));
        for l in tail.into_iter().rev() {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}
