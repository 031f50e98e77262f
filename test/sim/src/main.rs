//! `holdfast-sim --listen 127.0.0.1:PORT --kubeconfig-out FILE [--config FILE] [--shards N] [--token-auth-file FILE]`

use clap::Parser;
use holdfast_sim::{Sim, SimConfig};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "holdfast-sim",
    about = "In-memory kube-apiserver / kcp simulator"
)]
struct Args {
    /// Address to listen on (port 0 picks a free port; default: the config's, else 127.0.0.1:0).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Where to write an admin kubeconfig.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// User whose credentials go into the kubeconfig (default: the first system:masters user).
    #[arg(long)]
    kubeconfig_user: Option<String>,
    /// YAML config: users [{name, token, groups}], rbac rules, ...
    #[arg(long)]
    config: Option<PathBuf>,
    /// kcp shards behind the front-proxy (default: the config's, else 1); each listens
    /// on 127.0.0.1 at a free port, printed at start.
    #[arg(long)]
    shards: Option<usize>,
    /// Static token file (kube-apiserver's CSV: token,user,uid,"group1,group2"); its users
    /// join the config's.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut cfg = match &args.config {
        Some(p) => SimConfig::from_yaml(&std::fs::read_to_string(p)?)?,
        None => SimConfig::default(),
    };
    if let Some(l) = args.listen {
        cfg.listen = l;
    }
    if let Some(n) = args.shards {
        anyhow::ensure!(n >= 1, "--shards must be at least 1");
        cfg.shards = n;
    }
    if let Some(f) = &args.token_auth_file {
        cfg.token_auth_file = Some(f.clone());
    }
    let user = args.kubeconfig_user.clone().unwrap_or_else(|| {
        cfg.users
            .iter()
            .find(|u| u.groups.iter().any(|g| g == "system:masters"))
            .or(cfg.users.first())
            .map(|u| u.name.clone())
            .unwrap_or_else(|| "admin".into())
    });
    // Install signal handlers before announcing readiness.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let sim = Sim::start(cfg).await?;
    if let Some(p) = &args.kubeconfig_out {
        sim.write_kubeconfig(p, &user)?;
    }
    // One write: a reader that stops after the first line never meets a closed pipe.
    let mut ready = format!("holdfast-sim listening on {}\n", sim.url());
    let shards = sim.shards();
    if shards.len() > 1 {
        for (name, url) in shards {
            ready.push_str(&format!("holdfast-sim shard {name} on {url}\n"));
        }
    }
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(ready.as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    sim.shutdown().await;
    Ok(())
}
