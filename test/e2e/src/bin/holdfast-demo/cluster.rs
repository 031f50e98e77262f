//! The Kubernetes stories on a cluster of the user's: `--kubeconfig FILE
//! [--webhook-host ADDR]`. holdfast runs on this host (the webhook listening on
//! all addresses, the controller installing a configuration that calls it at
//! `https://ADDR:PORT/validate`, so ADDR must be reachable from that cluster's API
//! server). The demo refuses to start when an object it would create already
//! exists, and removes everything it created at the end, failed or not.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use holdfast_e2e::steps::words;
use holdfast_e2e::{
    Env,
    controller::{ControllerProcess, start_controller_for_url, wait_configuration},
    free_port,
};

use crate::{label_story, policies, runner::Demo};

/// Command line of the cluster mode.
#[derive(Debug)]
pub struct Options {
    /// Kubeconfig of the cluster.
    pub kubeconfig: PathBuf,
    /// Address the cluster's API server reaches this host at.
    pub webhook_host: String,
}

/// `--kubeconfig FILE [--webhook-host ADDR]`; `Ok(None)` without `--kubeconfig`.
pub fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut kubeconfig = None;
    let mut host = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "--kubeconfig" => kubeconfig = Some(PathBuf::from(value()?)),
            "--webhook-host" => host = Some(value()?),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: holdfast-demo [--kubeconfig FILE [--webhook-host ADDR]]"
                ));
            }
        }
    }
    match (kubeconfig, host) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err("--webhook-host needs --kubeconfig".to_string()),
        (Some(kubeconfig), host) => Ok(Some(Options {
            kubeconfig,
            webhook_host: host.unwrap_or_else(|| "127.0.0.1".to_string()),
        })),
    }
}

/// Objects the stories create, checked absent first and removed at the end.
const OWN: [(&str, &str); 3] = [
    ("validatingwebhookconfiguration", "holdfast"),
    ("namespace", "shop"),
    ("customresourcedefinition", "widgets.example.com"),
];

const HOLDFAST_CRDS: [&str; 4] = [
    "resourceprotections.holdfast.dev",
    "anchorrules.holdfast.dev",
    "dependencyrules.holdfast.dev",
    "criticalservices.holdfast.dev",
];

fn exists(env: &Env, kind: &str, name: &str) -> anyhow::Result<bool> {
    let out = env.kubectl(&["get", kind, name, "-o", "name"])?;
    match out.code {
        0 => Ok(true),
        _ if out.stderr.contains("(NotFound)") => Ok(false),
        _ => bail!("kubectl get {kind} {name}: {}", out.stderr.trim()),
    }
}

/// Runs the Kubernetes stories on the cluster of `opts`.
pub async fn run(demo: &mut Demo, opts: &Options) -> anyhow::Result<()> {
    let mut env = Env::on_cluster(&opts.kubeconfig, &opts.webhook_host).await?;
    println!("cluster: {}", env.kubeconfig.display());
    for (kind, name) in OWN {
        if exists(&env, kind, name)? {
            bail!(
                "refusing to run: {kind} {name} already exists on this cluster (the demo creates and deletes it)"
            );
        }
    }
    let mut installed_crds = false;
    if !exists(&env, "customresourcedefinition", HOLDFAST_CRDS[0])? {
        env.install_crds()?;
        installed_crds = true;
        println!("installed holdfast's CRDs (removed at the end)");
    }
    let port = free_port()?;
    let url = format!("https://{}:{port}/validate", opts.webhook_host);
    let mut controller: Option<ControllerProcess> = None;
    let outcome = async {
        env.start_webhook_listening(SocketAddr::from(([0, 0, 0, 0], port)), &["--strict"])
            .await?;
        env.wait_webhook_ready().await?;
        println!("webhook: holdfast-webhook --strict on 0.0.0.0:{port}, called at {url}");
        let c = controller.insert(start_controller_for_url(
            &env,
            "controller",
            &url,
            &["--strict", "--cleanup-on-shutdown"],
        )?);
        c.wait_ready(30).await?;
        wait_configuration(&env, Duration::from_secs(30), |c| c.is_some())
            .await
            .context("the controller did not install the configuration")?;
        println!("controller: holdfast-controller run --strict --cleanup-on-shutdown installed \"holdfast\"");
        label_story(demo, &env)?;
        policies::resource_protection(demo, &env).await?;
        anyhow::Ok(())
    }
    .await;

    println!("\ncleaning up");
    let mut problems = Vec::new();
    if let Some(mut c) = controller {
        // --cleanup-on-shutdown removes the configuration on a graceful stop.
        if let Err(e) = c.terminate(30).await {
            problems.push(format!("stopping the controller: {e:#}"));
        }
    }
    let steps: Vec<Vec<&str>> = vec![
        words("delete validatingwebhookconfiguration holdfast --ignore-not-found"),
        words("delete resourceprotection widgets --ignore-not-found"),
        words("delete widget w1 w2 -n default --ignore-not-found"),
        words("delete customresourcedefinition widgets.example.com --ignore-not-found"),
        words("delete namespace shop --ignore-not-found --wait=false"),
    ];
    for step in steps {
        // Before the CRD exists or after it is gone, its kinds are unknown: fine.
        let out = env.kubectl(&step)?;
        if out.code != 0
            && !out
                .stderr
                .contains("the server doesn't have a resource type")
        {
            problems.push(format!("kubectl {}: {}", step.join(" "), out.stderr.trim()));
        }
    }
    if installed_crds {
        for crd in HOLDFAST_CRDS {
            let out = env.kubectl(&[
                "delete",
                "customresourcedefinition",
                crd,
                "--ignore-not-found",
            ])?;
            if out.code != 0 {
                problems.push(format!("deleting CRD {crd}: {}", out.stderr.trim()));
            }
        }
    }
    drop(env);
    if problems.is_empty() {
        println!("cleaned up: the cluster holds nothing the demo created");
    }
    outcome?;
    if !problems.is_empty() {
        bail!("cleanup incomplete: {}", problems.join("; "));
    }
    Ok(())
}
