//! Helpers for controller end-to-end tests: run the real `holdfast-controller`
//! binary against the sim, read what it installed, wait for conditions.

use std::{
    path::PathBuf,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{Env, bin, free_port, http_get};

/// A running `holdfast-controller`.
pub struct ControllerProcess {
    child: Child,
    /// Probe port (`/healthz`, `/readyz`).
    pub probe_port: u16,
    /// Where its log goes.
    pub log: PathBuf,
}

impl ControllerProcess {
    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether `/readyz` answers 200 (the controller leads and has reconciled).
    pub async fn is_ready(&self) -> bool {
        http_get(self.probe_port, "/readyz").await.map(|(s, _)| s) == Ok(200)
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&mut self, secs: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if self.is_ready().await {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("holdfast-controller exited with {status}: {}", self.log());
            }
            if Instant::now() > deadline {
                bail!(
                    "holdfast-controller not ready within {secs}s: {}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM and waits (at most `secs`) for the exit.
    pub async fn terminate(&mut self, secs: u64) -> anyhow::Result<ExitStatus> {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill -TERM failed");
        }
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("holdfast-controller did not exit within {secs}s after SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most `secs`) for the process to exit on its own.
    pub async fn wait_exit(&mut self, secs: u64) -> anyhow::Result<ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "holdfast-controller still running after {secs}s: {}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most 30 s) until the policy `kind`/`name` has condition `type_`
    /// with `status`, and returns it; fails printing this controller's log.
    pub async fn wait_condition(&self, env: &Env, [kind, name, type_, status]: [&str; 4]) -> Value {
        wait_condition(env, kind, name, type_, status, 30)
            .await
            .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", self.log()))
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (at most 30 s) until one of two controllers electing a leader leads
/// (never both); returns them as (leader, follower).
pub async fn elect<'a>(
    a: &'a mut ControllerProcess,
    b: &'a mut ControllerProcess,
) -> (&'a mut ControllerProcess, &'a mut ControllerProcess) {
    let a_leads = crate::steps::eventually(30, async || {
        let (ra, rb) = (a.is_ready().await, b.is_ready().await);
        assert!(!(ra && rb), "two leaders:\n{}\n{}", a.log(), b.log());
        if ra || rb {
            return Ok(ra);
        }
        Err(format!("nobody leads:\n{}\n{}", a.log(), b.log()))
    })
    .await;
    if a_leads { (a, b) } else { (b, a) }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `holdfast-controller` against the sim of `env`, pointing the
/// configuration at the env's webhook port (`webhook_port`) with `--webhook-url`
/// (unless `args` name `--webhook-service`); `args` come last. Without a `--ca-*` flag in `args`, the env's test CA is
/// given with `--ca-bundle-file`.
pub fn start_controller(
    env: &Env,
    name: &str,
    webhook_port: u16,
    args: &[&str],
) -> anyhow::Result<ControllerProcess> {
    // On a cluster, the address that cluster's API server reaches this host at.
    let url = match &env.cluster {
        Some(_) => format!(
            "https://{}:{webhook_port}/validate",
            crate::e2e_webhook_host()
        ),
        None => format!("https://127.0.0.1:{webhook_port}/validate"),
    };
    let url = (!args.contains(&"--webhook-service")).then_some(url.as_str());
    spawn_controller(env, name, url, args)
}

/// `holdfast-controller run` with the env's kubeconfig and CA unless `args` name
/// others, `--webhook-url url` when given, a free probe port, no inherited
/// `HOLDFAST_*` variables, logging to `<name>.log`. The backstop is off unless
/// `args` name `--backstop...`: the API server admits a request only when the
/// backstop and the webhook both allow it, and the backstop (evaluated first)
/// would answer the label denials that these tests assert the webhook's verdicts
/// for; `tests/backstop.rs` runs it as shipped (on).
fn spawn_controller(
    env: &Env,
    name: &str,
    url: Option<&str>,
    args: &[&str],
) -> anyhow::Result<ControllerProcess> {
    env.own_installation()?;
    let probe_port = free_port()?;
    let log = env.dir.path().join(format!("{name}.log"));
    let mut cmd = Command::new(bin("holdfast-controller")?);
    cmd.arg("run");
    if !args.contains(&"--kubeconfig") {
        cmd.arg("--kubeconfig").arg(&env.kubeconfig);
    }
    if let Some(url) = url {
        cmd.arg("--webhook-url").arg(url);
    }
    cmd.arg("--probe-listen")
        .arg(format!("127.0.0.1:{probe_port}"));
    if !args.iter().any(|a| a.starts_with("--backstop")) {
        cmd.arg("--backstop=false");
    }
    if !args.iter().any(|a| a.starts_with("--ca-")) {
        let ca = env.dir.path().join("ca.crt");
        std::fs::write(&ca, &env.pki.ca_pem)?;
        cmd.arg("--ca-bundle-file").arg(ca);
    }
    for (key, _) in std::env::vars() {
        if key.starts_with("HOLDFAST_") {
            cmd.env_remove(key);
        }
    }
    let child = cmd
        .args(args)
        .env("RUST_LOG", "info,holdfast_controller=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("starting holdfast-controller")?;
    env.register_controller(child.id());
    Ok(ControllerProcess {
        child,
        probe_port,
        log,
    })
}

/// Runs kubectl against `server` (e.g. a kcp workspace URL) instead of the
/// kubeconfig's server.
pub fn kubectl_at(env: &Env, server: &str, args: &[&str]) -> anyhow::Result<crate::KubectlOutput> {
    let mut all = vec!["--server", server];
    all.extend_from_slice(args);
    env.kubectl(&all)
}

/// The live ValidatingWebhookConfiguration `holdfast`, if any.
pub fn webhook_configuration(env: &Env) -> anyhow::Result<Option<Value>> {
    webhook_configuration_at(env, None)
}

/// The live ValidatingWebhookConfiguration `holdfast` at `server` (default: the
/// kubeconfig's), if any.
pub fn webhook_configuration_at(env: &Env, server: Option<&str>) -> anyhow::Result<Option<Value>> {
    let args = [
        "get",
        "validatingwebhookconfiguration",
        "holdfast",
        "-o",
        "json",
        "--ignore-not-found",
    ];
    let out = match server {
        Some(s) => kubectl_at(env, s, &args)?,
        None => env.kubectl(&args)?,
    };
    if out.code != 0 {
        bail!("kubectl get failed: {}", out.stderr);
    }
    if out.stdout.trim().is_empty() {
        return Ok(None);
    }
    Ok(Some(serde_json::from_str(&out.stdout)?))
}

/// Names of the webhooks in a configuration.
pub fn webhook_names(cfg: &Value) -> Vec<String> {
    cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["name"].as_str().map(str::to_string))
        .collect()
}

/// `(apiGroups, resources, operations)` of each rule of webhook `name`.
pub fn rules_of(cfg: &Value, name: &str) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["name"] == name)
        .flat_map(|w| w["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            (
                strings(&r["apiGroups"]),
                strings(&r["resources"]),
                strings(&r["operations"]),
            )
        })
        .collect()
}

/// Polls `check` on the live configuration until it holds (at most `timeout`);
/// returns the configuration (or `None` when absent) and the time it took.
pub async fn wait_configuration(
    env: &Env,
    timeout: Duration,
    check: impl Fn(Option<&Value>) -> bool,
) -> anyhow::Result<(Option<Value>, Duration)> {
    wait_configuration_at(env, None, timeout, check).await
}

/// [`wait_configuration`] at `server`.
pub async fn wait_configuration_at(
    env: &Env,
    server: Option<&str>,
    timeout: Duration,
    check: impl Fn(Option<&Value>) -> bool,
) -> anyhow::Result<(Option<Value>, Duration)> {
    let timeout = timeout.max(crate::MIN_WAIT);
    let start = Instant::now();
    loop {
        let cfg = webhook_configuration_at(env, server)?;
        if check(cfg.as_ref()) {
            return Ok((cfg, start.elapsed()));
        }
        if start.elapsed() > timeout {
            bail!(
                "webhook configuration never reached the expected state within {timeout:?}; last: {}",
                cfg.map(|c| c.to_string())
                    .unwrap_or_else(|| "<absent>".into())
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The condition `type_` of a policy object (`kind` as kubectl names it, e.g.
/// `resourceprotection`), as JSON.
pub fn condition(env: &Env, kind: &str, name: &str, type_: &str) -> anyhow::Result<Option<Value>> {
    condition_at(env, None, kind, name, type_)
}

/// [`condition`] at `server`.
pub fn condition_at(
    env: &Env,
    server: Option<&str>,
    kind: &str,
    name: &str,
    type_: &str,
) -> anyhow::Result<Option<Value>> {
    let args = ["get", kind, name, "-o", "json"];
    let out = match server {
        Some(s) => kubectl_at(env, s, &args)?,
        None => env.kubectl(&args)?,
    }
    .ok()?;
    let obj: Value = serde_json::from_str(&out.stdout)?;
    Ok(obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned())
}

/// Waits until condition `type_` of the policy has `status`; returns it.
pub async fn wait_condition(
    env: &Env,
    kind: &str,
    name: &str,
    type_: &str,
    status: &str,
    secs: u64,
) -> anyhow::Result<Value> {
    wait_condition_at(env, None, [kind, name, type_, status], secs).await
}

/// [`wait_condition`] at `server`: `[kind, name, type_, status]`.
pub async fn wait_condition_at(
    env: &Env,
    server: Option<&str>,
    [kind, name, type_, status]: [&str; 4],
    secs: u64,
) -> anyhow::Result<Value> {
    let secs = secs.max(crate::MIN_WAIT.as_secs());
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let c = condition_at(env, server, kind, name, type_)?;
        if let Some(c) = &c
            && c["status"] == status
        {
            return Ok(c.clone());
        }
        if Instant::now() > deadline {
            bail!("{kind}/{name}: condition {type_} never became {status}; last: {c:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `holdfast-controller run` installing webhooks that call `url` (e.g. a
/// webhook on this host as a remote API server reaches it), with the env's
/// kubeconfig and CA unless `args` name others.
pub fn start_controller_for_url(
    env: &Env,
    name: &str,
    url: &str,
    args: &[&str],
) -> anyhow::Result<ControllerProcess> {
    spawn_controller(env, name, Some(url), args)
}

/// holdfast as the manifests ship it (see [`shipped_stack`]).
pub struct Shipped {
    /// The simulator and the webhook.
    pub env: Env,
    /// The controller.
    pub controller: ControllerProcess,
}

/// holdfast as the manifests ship it, on a simulator started with `cfg` (its users
/// must include the shipped ServiceAccounts: [`crate::with_service_accounts`]):
/// `manifests/overlays/kubernetes` applied by the admin, then the webhook (with
/// `webhook_args`) and the controller (with `controller_args`) running as their
/// ServiceAccounts, until the controller has installed the configuration.
pub async fn shipped_stack(
    cfg: holdfast_sim::SimConfig,
    webhook_args: &[&str],
    controller_args: &[&str],
) -> anyhow::Result<Shipped> {
    let installed = shipped_installation(cfg, webhook_args).await?;
    let env = installed.env;
    let port = env.webhook.as_ref().map(|w| w.port).context("no webhook")?;
    let mut cargs = vec!["--kubeconfig", installed.controller_kubeconfig.as_str()];
    cargs.extend(controller_args);
    let mut controller = start_controller(&env, "controller", port, &cargs)?;
    if let Err(e) = controller.wait_ready(30).await {
        bail!("controller not ready: {e:#}\n{}", controller.log());
    }
    wait_configuration(&env, Duration::from_secs(30), |cfg| cfg.is_some())
        .await
        .context("the controller installed no configuration")?;
    Ok(Shipped { env, controller })
}

/// holdfast installed as the manifests ship it, the controller not started yet
/// (see [`shipped_installation`]).
pub struct ShippedInstallation {
    /// The simulator (or the cluster of `HOLDFAST_E2E_KUBECONFIG`) and the webhook.
    pub env: Env,
    /// A kubeconfig acting as the controller's ServiceAccount, for the test to
    /// start the controller with (`--kubeconfig`).
    pub controller_kubeconfig: String,
}

/// [`shipped_stack`] up to the controller: `manifests/overlays/kubernetes`
/// applied by the admin ([`Env::install_overlay`]: on the cluster of
/// `HOLDFAST_E2E_KUBECONFIG` under the suite's lock, everything of it removed
/// when the env drops) and the webhook (with `webhook_args`) running as its
/// ServiceAccount, ready; for a test that starts the controller itself, with
/// flags of its own or more than once.
pub async fn shipped_installation(
    cfg: holdfast_sim::SimConfig,
    webhook_args: &[&str],
) -> anyhow::Result<ShippedInstallation> {
    // On the cluster of `HOLDFAST_E2E_KUBECONFIG` (`cfg` is the simulator's and
    // does not apply there) the ServiceAccounts are impersonated.
    let mut env = match crate::e2e_cluster() {
        Some(_) => Env::for_kubernetes_test().await?,
        None => Env::start_with(cfg).await?,
    };
    env.install_overlay("kubernetes")?;
    let webhook_kc = env.kubeconfig_for("kubeconfig-webhook-sa", crate::WEBHOOK_SA)?;
    let controller_kubeconfig =
        env.kubeconfig_for("kubeconfig-controller-sa", crate::CONTROLLER_SA)?;
    let mut wargs = vec!["--kubeconfig", webhook_kc.as_str()];
    wargs.extend(webhook_args);
    env.start_webhook(&wargs).await?;
    env.wait_webhook_ready().await?;
    Ok(ShippedInstallation {
        env,
        controller_kubeconfig,
    })
}

/// Waits (up to 30 s) for the serving certificate the controller issues into the
/// Secret `holdfast-system/holdfast-webhook-tls` (`--ca-secret`), and writes its
/// `tls.crt` and `tls.key` into the env's directory, where `Env::start_webhook_on`
/// serves them from.
pub async fn use_issued_certificate(
    env: &Env,
    controller: &ControllerProcess,
) -> anyhow::Result<()> {
    use base64::Engine as _;
    let deadline = Instant::now() + Duration::from_secs(30);
    let secret: Value = loop {
        let out = env.kubectl(&[
            "get",
            "secret",
            "holdfast-webhook-tls",
            "-n",
            "holdfast-system",
            "-o",
            "json",
        ])?;
        if out.code == 0 {
            break serde_json::from_str(&out.stdout)?;
        }
        if Instant::now() > deadline {
            bail!(
                "no Secret holdfast-webhook-tls: {out:?}\n{}",
                controller.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for key in ["tls.crt", "tls.key"] {
        let b64 = secret["data"][key]
            .as_str()
            .with_context(|| format!("no {key} in the Secret"))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .with_context(|| format!("{key} is not base64"))?;
        std::fs::write(env.dir.path().join(key), bytes)?;
    }
    Ok(())
}
