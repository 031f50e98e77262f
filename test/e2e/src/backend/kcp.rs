//! The `kcp` backend: a real kcp of two shards behind a front-proxy, with a cache
//! server, started by kcp's `sharded-test-server` built by `hack/substrates.sh kcp`
//! (docs/substrates-notes.md, "kcp, sharded").
//!
//! kcp's ports are fixed (front-proxy 6443, shards 6444/6445, their etcds
//! 2379-2382, the cache server 8010-8012), so one instance runs per machine: the
//! backend takes a machine-wide lock first (another test or process waits for it),
//! stops what a previous owner of the lock that died left running, and fails with
//! the port's name when something else listens on one of them.
//!
//! Users authenticate with bearer tokens the backend writes into the
//! `test/e2e/framework/auth-tokens.csv` that every shard reads: the front-proxy
//! passes a request without a client certificate through to the shard, which
//! authenticates the token (kcp `pkg/proxy/filters/filters.go`,
//! `WithOptionalAuthentication`). The admin kubeconfig kcp writes
//! (`.kcp/admin.kubeconfig`, user `kcp-admin`, group `system:kcp:admin`) acts as
//! the platform team.

use super::{Proc, kcp_saved::SavedState, substrate_bin};
use anyhow::{Context, bail};
use std::{
    hash::{BuildHasher, Hasher},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

/// The front-proxy's URL.
pub const FRONT_PROXY: &str = "https://127.0.0.1:6443";

/// Every port the sharded kcp listens on (127.0.0.1), with what listens there.
pub const PORTS: [(u16, &str); 10] = [
    (6443, "front-proxy"),
    (6444, "shard root"),
    (6445, "shard shard-1"),
    (2379, "etcd of shard root (client)"),
    (2380, "etcd of shard root (peer)"),
    (2381, "etcd of shard shard-1 (client)"),
    (2382, "etcd of shard shard-1 (peer)"),
    (8010, "etcd of the cache server (client)"),
    (8011, "etcd of the cache server (peer)"),
    (8012, "cache server"),
];

/// The users of the e2e topology on kcp: (name, groups). `platform` is in
/// `system:masters` (a shard admin; the front-proxy passes tokens through, so the
/// group reaches the shard).
pub const DEFAULT_USERS: &[(&str, &[&str])] = &[
    ("platform", &["system:masters"]),
    ("provider", &["holdfast:providers"]),
    ("consumer", &[]),
    ("holdfast-controller", &[]),
    ("holdfast-webhook", &[]),
];

/// How long kcp may take to become ready (a fresh one about 50 s on 2 cores, one
/// started on the saved state about 10 s).
const READY_WITHIN: Duration = Duration::from_secs(240);
/// How long a start waits for the ports of a kcp that just stopped to be freed.
const PORTS_FREED_WITHIN: Duration = Duration::from_secs(30);
/// How long a start waits for another backend holding the machine's lock.
const LOCK_WAIT: Duration = Duration::from_secs(1800);

/// A running sharded kcp; every process of it stops when it drops.
pub struct KcpBackend {
    /// The work dir (kcp's state, logs, the users' kubeconfigs).
    pub dir: PathBuf,
    /// The admin kubeconfig kcp writes (contexts `root`, current, and `base`).
    pub admin_kubeconfig: PathBuf,
    /// The CA of every serving certificate (front-proxy, shards, virtual workspaces).
    pub serving_ca: PathBuf,
    /// How long the start took, from spawning to ready-to-test.
    pub started_in: Duration,
    users: Vec<(String, String)>,
    proc: Option<Proc>,
    /// The process group and the processes seen at start: (pid, start time).
    pgid: u32,
    seen: Vec<(u32, u64)>,
    lock: Option<std::fs::File>,
}

/// Fails unless the kcp substrate is built (`hack/substrates.sh kcp`).
pub fn check_built() -> anyhow::Result<PathBuf> {
    let bin = substrate_bin("kcp")?;
    for b in [
        "sharded-test-server",
        "kcp",
        "kcp-front-proxy",
        "cache-server",
    ] {
        let p = bin.join(b);
        if !p.is_file() {
            bail!("{} is not built: run hack/substrates.sh kcp", p.display());
        }
    }
    Ok(bin)
}

fn lock_path() -> PathBuf {
    std::env::temp_dir().join("holdfast-kcp-backend.lock")
}

/// Takes the machine-wide lock of the kcp backend, waiting for another holder.
fn take_lock() -> anyhow::Result<std::fs::File> {
    let path = lock_path();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| path.display().to_string())?;
    let deadline = Instant::now() + LOCK_WAIT;
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                if !told {
                    eprintln!(
                        "kcp backend: waiting for another kcp on this machine (lock {})",
                        path.display()
                    );
                    told = true;
                }
                if Instant::now() > deadline {
                    bail!(
                        "kcp backend: lock {} still held after {}s (another kcp runs on this machine)",
                        path.display(),
                        LOCK_WAIT.as_secs()
                    );
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
    }
}

/// `(pgrp, start time, state)` of process `pid`, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(u32, u64, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    // cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime`
    let rest: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
    let state = rest.first()?.chars().next()?;
    let pgrp = rest.get(2)?.parse().ok()?;
    let start = rest.get(19)?.parse().ok()?;
    Some((pgrp, start, state))
}

/// The live (not zombie) processes of process group `pgid`: (pid, start time).
fn group_members(pgid: u32) -> Vec<(u32, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let (pgrp, start, state) = stat(pid)?;
            (pgrp == pgid && state != 'Z').then_some((pid, start))
        })
        .collect()
}

/// Sends `signal` to `pid` when it is still the process started at `start`.
fn signal_if_same(pid: u32, start: u64, signal: &str) {
    if stat(pid).is_some_and(|(_, s, state)| s == start && state != 'Z') {
        let _ = Command::new("kill")
            .args([signal, &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Stops what a previous holder of the lock started and left running (it died
/// without stopping kcp): the processes it recorded in the lock file, each only
/// while it is still that process (same start time), and any other process of
/// its recorded process group running a binary of kcp's bin dir `bin` (a child
/// started after the last record).
fn stop_leftovers(lock: &std::fs::File, bin: &Path) {
    use std::io::{Read, Seek};
    let mut text = String::new();
    let mut f = lock;
    if f.rewind().is_err() || f.read_to_string(&mut text).is_err() {
        return;
    }
    let mut recorded: Vec<(u32, u64)> = text
        .lines()
        .filter_map(|l| {
            let (p, s) = l.split_once(' ')?;
            Some((p.parse().ok()?, s.parse().ok()?))
        })
        .collect();
    let group = text
        .lines()
        .find_map(|l| l.strip_prefix("pgid ")?.trim().parse::<u32>().ok());
    if let Some(pgid) = group {
        for (pid, start) in group_members(pgid) {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            if exe.starts_with(bin) && !recorded.contains(&(pid, start)) {
                recorded.push((pid, start));
            }
        }
    }
    let alive = |r: &[(u32, u64)]| {
        r.iter()
            .any(|(p, s)| stat(*p).is_some_and(|(_, st, state)| st == *s && state != 'Z'))
    };
    if !alive(&recorded) {
        return;
    }
    eprintln!("kcp backend: stopping the kcp a previous run left: {recorded:?}");
    for (p, s) in &recorded {
        signal_if_same(*p, *s, "-TERM");
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while alive(&recorded) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    for (p, s) in &recorded {
        signal_if_same(*p, *s, "-KILL");
    }
}

/// Records process group `pgid` and its processes `procs` (pid, start time) in
/// the lock file.
fn record(lock: &std::fs::File, pgid: Option<u32>, procs: &[(u32, u64)]) {
    use std::io::{Seek, Write};
    let mut f = lock;
    let _ = f.set_len(0);
    let _ = f.rewind();
    if let Some(pgid) = pgid {
        let _ = writeln!(f, "pgid {pgid}");
    }
    for (p, s) in procs {
        let _ = writeln!(f, "{p} {s}");
    }
    let _ = f.flush();
}

/// Fails naming every fixed port of kcp that something already listens on.
fn check_ports_free() -> anyhow::Result<()> {
    let taken: Vec<String> = PORTS
        .iter()
        .filter(|(port, _)| std::net::TcpListener::bind(("127.0.0.1", *port)).is_err())
        .map(|(port, what)| format!("127.0.0.1:{port} ({what})"))
        .collect();
    if !taken.is_empty() {
        bail!(
            "kcp backend: kcp's fixed ports are taken: {}. Another kcp (or something else) \
             runs on this machine outside the backend's lock; stop it first (e.g. `ss -ltnp` \
             shows who listens)",
            taken.join(", ")
        );
    }
    Ok(())
}

/// Removes kcp's state from `dir` (the `.kcp*` directories: a ready-to-test left
/// there would read as ready at once).
fn clear_state(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(".kcp") {
            std::fs::remove_dir_all(entry.path())
                .with_context(|| entry.path().display().to_string())?;
        }
    }
    Ok(())
}

/// Writes what sharded-test-server looks for in `dir` (the fake kcp repository
/// root its e2e framework expects) and the token file every shard reads, with a
/// new token for each of `users`: (user, token).
fn write_users(dir: &Path, users: &[(&str, &[&str])]) -> anyhow::Result<Vec<(String, String)>> {
    std::fs::create_dir_all(dir.join(".git"))?;
    let framework = dir.join("test/e2e/framework");
    std::fs::create_dir_all(&framework)?;
    let mut tokens = String::new();
    let mut known = Vec::new();
    for (i, (name, groups)) in users.iter().enumerate() {
        let token = format!("{name}-{}", random_hex());
        // The groups column only when there are groups (an empty one would
        // read as the group "").
        let uid = format!("{:04}-holdfast-e2e", i + 1);
        if groups.is_empty() {
            tokens.push_str(&format!("{token},{name},{uid}\n"));
        } else {
            tokens.push_str(&format!("{token},{name},{uid},\"{}\"\n", groups.join(",")));
        }
        known.push((name.to_string(), token));
    }
    std::fs::write(framework.join("auth-tokens.csv"), tokens)?;
    Ok(known)
}

fn random_hex() -> String {
    let a = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let b = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    format!("{a:016x}{b:016x}")
}

impl KcpBackend {
    /// Starts the sharded kcp in `dir` with [`DEFAULT_USERS`].
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        Self::start_with_users(dir, DEFAULT_USERS).await
    }

    /// Starts the sharded kcp (two shards, front-proxy, cache server) in `dir`,
    /// with a bearer token for each of `users` (name, groups), and waits until it
    /// is ready to test.
    ///
    /// A fresh kcp bootstraps its shards for about 50 s on 2 cores; restarted on
    /// the state of a fresh kcp it is ready in about 10 s. So the first start on a
    /// machine saves the state of the fresh kcp it made ([`SavedState`], beside
    /// the kcp binaries, keyed by them), and later starts begin from a copy of it:
    /// each test still gets a kcp nothing else has touched. A start from the saved
    /// state that fails discards it and starts afresh; `HOLDFAST_E2E_KCP_FRESH=1`
    /// always starts afresh.
    pub async fn start_with_users(dir: &Path, users: &[(&str, &[&str])]) -> anyhow::Result<Self> {
        let bin = check_built()?;
        let lock = tokio::task::spawn_blocking(take_lock).await??;
        stop_leftovers(&lock, &bin);
        record(&lock, None, &[]);
        // The kcp of the test before may still be closing its listeners (killed a
        // moment ago): the lock is ours, so what holds a port now is that kcp
        // going, or something foreign that stays; wait for the first, fail on the
        // second.
        let deadline = Instant::now() + PORTS_FREED_WITHIN;
        while let Err(e) = check_ports_free() {
            if Instant::now() > deadline {
                return Err(e);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let known = write_users(&dir, users)?;
        let saved = SavedState::of(&bin)?;
        let fresh_only = std::env::var("HOLDFAST_E2E_KCP_FRESH").is_ok_and(|v| v == "1");
        let mut lock = lock;
        if !fresh_only && saved.usable() {
            clear_state(&dir)?;
            saved.restore_into(&dir)?;
            match Self::launch(&bin, &dir, known.clone(), lock).await {
                Ok(backend) => return Ok(backend),
                Err((e, back)) => {
                    eprintln!(
                        "kcp backend: a start from the saved state failed, starting afresh: {e:#}"
                    );
                    saved.discard();
                    lock = back;
                }
            }
        }
        clear_state(&dir)?;
        let mut backend = Self::launch(&bin, &dir, known.clone(), lock)
            .await
            .map_err(|(e, _)| e)?;
        if fresh_only {
            return Ok(backend);
        }
        // Saves the fresh kcp's state for the next starts: stopped (its state
        // written), copied, and started again on it.
        let fresh_in = backend.started_in;
        backend.stop_processes();
        let lock = backend.lock.take().context("the kcp lock")?;
        drop(backend);
        record(&lock, None, &[]);
        if let Err(e) = saved.save_from(&dir) {
            eprintln!("kcp backend: not saving the fresh kcp's state: {e:#}");
        }
        let mut backend = Self::launch(&bin, &dir, known, lock)
            .await
            .map_err(|(e, _)| e)?;
        backend.started_in += fresh_in;
        Ok(backend)
    }

    /// Runs sharded-test-server on the state in `dir` and waits for ready-to-test;
    /// on failure everything it started is stopped and the lock given back.
    async fn launch(
        bin: &Path,
        dir: &Path,
        users: Vec<(String, String)>,
        lock: std::fs::File,
    ) -> Result<Self, (anyhow::Error, std::fs::File)> {
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new(bin.join("sharded-test-server"));
        cmd.current_dir(dir)
            .env("NO_GORUN", "1")
            .env("PATH", path)
            .arg("--number-of-shards=2")
            .arg(format!("--work-dir-path={}", dir.display()));
        // A process group of its own (the shards, the front-proxy and the cache
        // server are its children and stay in it): the whole group stops on drop.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // Ready is the mark this start writes, not one left by a kcp before it.
        let ready = dir.join(".kcp/ready-to-test");
        if let Err(e) = std::fs::remove_file(&ready)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err((
                anyhow::Error::new(e).context("removing ready-to-test"),
                lock,
            ));
        }
        let started = Instant::now();
        let proc = match Proc::spawn("sharded-test-server", dir, cmd) {
            Ok(p) => p,
            Err(e) => return Err((e, lock)),
        };
        let pgid = proc.pid();
        // The lock joins the backend once it is ready; until then the processes
        // are recorded in it here (for a later start, should this process die).
        let mut backend = Self {
            admin_kubeconfig: dir.join(".kcp/admin.kubeconfig"),
            serving_ca: dir.join(".kcp/serving-ca.crt"),
            dir: dir.to_path_buf(),
            started_in: Duration::ZERO,
            users,
            proc: Some(proc),
            pgid,
            seen: Vec::new(),
            lock: None,
        };
        let problem = loop {
            backend.remember_processes();
            record(&lock, Some(pgid), &backend.seen);
            if ready.exists() {
                break None;
            }
            if !backend.alive() {
                break Some(anyhow::anyhow!(
                    "sharded-test-server exited before ready-to-test:\n{}",
                    backend.log_tail(40)
                ));
            }
            if started.elapsed() > READY_WITHIN {
                break Some(anyhow::anyhow!(
                    "kcp not ready to test within {}s:\n{}",
                    READY_WITHIN.as_secs(),
                    backend.log_tail(40)
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        if let Some(e) = problem {
            drop(backend);
            record(&lock, None, &[]);
            return Err((e, lock));
        }
        backend.lock = Some(lock);
        backend.started_in = started.elapsed();
        backend.remember_processes();
        Ok(backend)
    }

    /// Adds the group's current processes to those stopped on drop and recorded
    /// in the lock file (for a later start when this process dies first).
    fn remember_processes(&mut self) {
        for p in group_members(self.pgid) {
            if !self.seen.contains(&p) {
                self.seen.push(p);
            }
        }
        if let Some(lock) = &self.lock {
            record(lock, Some(self.pgid), &self.seen);
        }
    }

    /// The last `n` lines of sharded-test-server's log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.proc.as_ref().map(Proc::log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Whether sharded-test-server still runs.
    pub fn alive(&mut self) -> bool {
        self.proc.as_mut().is_some_and(Proc::alive)
    }

    /// The bearer token of `user`.
    pub fn token(&self, user: &str) -> Option<&str> {
        self.users
            .iter()
            .find(|(u, _)| u == user)
            .map(|(_, t)| t.as_str())
    }

    /// The URL of workspace `path` (`root:org:ws`) at the front-proxy.
    pub fn workspace_url(path: &str) -> String {
        format!("{FRONT_PROXY}/clusters/{path}")
    }

    /// A kubeconfig for `user` (bearer token) at workspace `path` through the
    /// front-proxy, written to `DIR/users/USER-PATH.kubeconfig`; its path.
    pub fn kubeconfig_for(&self, user: &str, path: &str) -> anyhow::Result<PathBuf> {
        let token = self
            .token(user)
            .with_context(|| format!("no token for user {user}"))?;
        let ca = std::fs::read(&self.serving_ca)
            .with_context(|| self.serving_ca.display().to_string())?;
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kcp", "cluster": {
                "server": Self::workspace_url(path),
                "certificate-authority-data": crate::base64_encode(&ca),
            }}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "kcp", "context": {"cluster": "kcp", "user": user}}],
            "current-context": "kcp",
        });
        let users = self.dir.join("users");
        std::fs::create_dir_all(&users)?;
        let file = users.join(format!("{user}-{}.kubeconfig", path.replace(':', "_")));
        std::fs::write(&file, serde_json::to_vec_pretty(&config)?)?;
        Ok(file)
    }
}

/// The cache server stopped (SIGSTOP) until this drops (SIGCONT): kcp's
/// replication stalls, as with the cache server down, while the shards serve.
pub struct CacheServerPaused {
    pid: u32,
    start: u64,
}

impl KcpBackend {
    /// Stops the cache server of this kcp until the guard drops.
    pub fn pause_cache_server(&self) -> anyhow::Result<CacheServerPaused> {
        let (pid, start) = group_members(self.pgid)
            .into_iter()
            .find(|(pid, _)| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "cache-server")
            })
            .context("no cache-server process in kcp's process group")?;
        signal_if_same(pid, start, "-STOP");
        Ok(CacheServerPaused { pid, start })
    }
}

impl Drop for CacheServerPaused {
    fn drop(&mut self) {
        signal_if_same(self.pid, self.start, "-CONT");
    }
}

impl KcpBackend {
    /// Stops every process of this kcp: SIGTERM to the whole group
    /// (sharded-test-server scrapes the shards' metrics, then stops its
    /// children), SIGKILL to whatever is left after 20 s, and to every process
    /// seen at start that still runs.
    fn stop_processes(&mut self) {
        let group = format!("-{}", self.pgid);
        let _ = Command::new("kill")
            .args(["-TERM", "--", &group])
            .stderr(std::process::Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // Reaps the leader once it exits (a zombie still counts in its group).
            let _ = self.alive();
            if group_members(self.pgid).is_empty() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(std::process::Stdio::null())
            .status();
        for (p, s) in &self.seen {
            signal_if_same(*p, *s, "-KILL");
        }
        drop(self.proc.take());
    }
}

impl Drop for KcpBackend {
    fn drop(&mut self) {
        self.stop_processes();
        if let Some(lock) = self.lock.take() {
            record(&lock, None, &[]);
            // Dropping the file releases the lock.
        }
    }
}
