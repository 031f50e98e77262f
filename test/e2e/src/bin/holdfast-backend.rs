//! Starts one of the suite's real backends and keeps it running until stopped
//! (SIGINT or SIGTERM):
//!
//!   holdfast-backend kube DIR
//!   holdfast-backend karmada DIR
//!
//! prints `kubeconfig PATH` on standard output once the backend is ready (for
//! `karmada`, the admin of karmada-apiserver, then `member-kubeconfig PATH`, the
//! admin of the member cluster). `hack/e2e-on-cluster.sh --backend kube` runs the
//! suite on the kube backend.

use anyhow::{Context, bail};
use holdfast_e2e::backend::{karmada::KarmadaBackend, kube::KubeBackend};
use std::{io::Write, path::PathBuf};

/// A started backend.
enum Backend {
    Kube(KubeBackend),
    Karmada(KarmadaBackend),
}

impl Backend {
    fn alive(&mut self) -> bool {
        match self {
            Backend::Kube(b) => b.alive(),
            Backend::Karmada(b) => b.alive(),
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kind, dir) = match args.as_slice() {
        [k, d] => (k.as_str(), PathBuf::from(d)),
        _ => bail!("usage: holdfast-backend kube|karmada DIR"),
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
        other => bail!("unknown backend {other:?} (known: kube, karmada)"),
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
