//! Starts one of the suite's real backends and keeps it running until stopped
//! (SIGINT or SIGTERM):
//!
//!   holdfast-backend kube DIR
//!
//! prints `kubeconfig PATH` on standard output once the backend is ready.
//! `hack/e2e-on-cluster.sh --backend kube` runs the suite on it.

use anyhow::{Context, bail};
use holdfast_e2e::backend::kube::{KubeBackend, check_built};
use std::{io::Write, path::PathBuf};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kind, dir) = match args.as_slice() {
        [k, d] => (k.as_str(), PathBuf::from(d)),
        _ => bail!("usage: holdfast-backend kube DIR"),
    };
    if kind != "kube" {
        bail!("unknown backend {kind:?} (known: kube)");
    }
    check_built()?;
    let started = std::time::Instant::now();
    let mut backend = KubeBackend::start(&dir)
        .await
        .context("starting the kube backend")?;
    eprintln!(
        "holdfast-backend: kube ready at {} in {:.1}s",
        backend.url,
        started.elapsed().as_secs_f64()
    );
    println!("kubeconfig {}", backend.kubeconfig.display());
    std::io::stdout().flush()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
                if !backend.alive() {
                    bail!("a process of the kube backend exited; logs in {}", dir.display());
                }
            }
        }
    }
    drop(backend);
    Ok(())
}
