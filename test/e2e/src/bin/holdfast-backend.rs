//! Starts one of the suite's real backends and keeps it running until stopped
//! (SIGINT or SIGTERM):
//!
//!   holdfast-backend kube DIR
//!   holdfast-backend karmada DIR
//!   holdfast-backend kcp DIR
//!
//! prints `kubeconfig PATH` on standard output once the backend is ready (for
//! `karmada`, the admin of karmada-apiserver, then `member-kubeconfig PATH`, the
//! admin of the member cluster; for `kcp`, kcp's admin kubeconfig, then
//! `user-kubeconfig USER PATH` for each user of the e2e topology, at `root`
//! through the front-proxy). `hack/e2e-on-cluster.sh --backend kube` runs the
//! suite on the kube backend.

use anyhow::{Context, bail};
use holdfast_e2e::backend::{
    karmada::KarmadaBackend,
    kcp::{DEFAULT_USERS, KcpBackend},
    kube::KubeBackend,
};
use std::{io::Write, path::PathBuf};

/// A started backend.
enum Backend {
    Kube(KubeBackend),
    Karmada(KarmadaBackend),
    Kcp(KcpBackend),
}

impl Backend {
    fn alive(&mut self) -> bool {
        match self {
            Backend::Kube(b) => b.alive(),
            Backend::Karmada(b) => b.alive(),
            Backend::Kcp(b) => b.alive(),
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kind, dir) = match args.as_slice() {
        [k, d] => (k.as_str(), PathBuf::from(d)),
        _ => bail!("usage: holdfast-backend kube|karmada|kcp DIR"),
    };
    let started = std::time::Instant::now();
    let mut backend = match kind {
        "kube" => {
            holdfast_e2e::backend::kube::check_built()?;
            let b = KubeBackend::start(&dir)
                .await
                .context("starting the kube backend")?;
            eprintln!(
                "holdfast-backend: kube ready at {} in {:.1}s",
                b.url,
                started.elapsed().as_secs_f64()
            );
            println!("kubeconfig {}", b.kubeconfig.display());
            Backend::Kube(b)
        }
        "karmada" => {
            holdfast_e2e::backend::karmada::check_built()?;
            let b = KarmadaBackend::start(&dir)
                .await
                .context("starting the karmada backend")?;
            for (step, secs) in &b.timings {
                eprintln!("holdfast-backend: {secs:6.1}s {step}");
            }
            eprintln!(
                "holdfast-backend: karmada ready at {} (member {}) in {:.1}s",
                b.url,
                b.member_name,
                started.elapsed().as_secs_f64()
            );
            println!("kubeconfig {}", b.kubeconfig.display());
            println!("member-kubeconfig {}", b.member_kubeconfig.display());
            Backend::Karmada(b)
        }
        "kcp" => {
            holdfast_e2e::backend::kcp::check_built()?;
            // A signal while kcp starts stops what already runs (dropping the
            // start drops the backend): kcp's fixed ports stay free.
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            let b = tokio::select! {
                b = KcpBackend::start(&dir) => b.context("starting the kcp backend")?,
                _ = tokio::signal::ctrl_c() => bail!("interrupted while kcp was starting"),
                _ = term.recv() => bail!("terminated while kcp was starting"),
            };
            eprintln!(
                "holdfast-backend: kcp ready at {} in {:.1}s",
                holdfast_e2e::backend::kcp::FRONT_PROXY,
                started.elapsed().as_secs_f64()
            );
            println!("kubeconfig {}", b.admin_kubeconfig.display());
            for (user, _) in DEFAULT_USERS {
                println!(
                    "user-kubeconfig {user} {}",
                    b.kubeconfig_for(user, "root")?.display()
                );
            }
            Backend::Kcp(b)
        }
        other => bail!("unknown backend {other:?} (known: kube, karmada, kcp)"),
    };
    std::io::stdout().flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
                if !backend.alive() {
                    bail!("a process of the {kind} backend exited; logs in {}", dir.display());
                }
            }
        }
    }
    drop(backend);
    Ok(())
}
