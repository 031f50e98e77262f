//! `holdfast-controller run`: wires the client, probes, CA source, leader
//! election and the topology's reconciler together, and handles shutdown.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use holdfast_shared::webhookconfig::{self, InstallOptions, WebhookTarget};
use kube::Client;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    sync::watch,
};

use crate::{
    certs,
    config::{CaSource, FailurePolicy, RunConfig, Topology, WebhookEndpoint},
    kcp, kubernetes,
    leader::{LeaderElector, LeaseConfig},
};

/// Name of the managed certificate Secret when neither `--ca-secret` nor
/// `--ca-bundle-file` is given (in `$POD_NAMESPACE`, else `holdfast-system`).
pub const DEFAULT_CA_SECRET: &str = "holdfast-webhook-tls";

/// Settings that are not user-facing flags (hidden flags and environment).
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Namespace of the leader-election Lease.
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    pub lease_name: String,
    /// Lease duration.
    pub lease_duration: Duration,
    /// Renew / retry period.
    pub renew_every: Duration,
    /// Full resync period.
    pub resync: Duration,
    /// Validity of the managed CA.
    pub ca_validity: Duration,
    /// Validity of the managed serving certificate.
    pub cert_validity: Duration,
    /// Renew the managed certificates this long before they expire.
    pub renew_before: Duration,
    /// Extra DNS names / IPs for the managed serving certificate.
    pub extra_sans: Vec<String>,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            lease_namespace: std::env::var("POD_NAMESPACE")
                .unwrap_or_else(|_| "holdfast-system".into()),
            lease_name: "holdfast-controller".into(),
            lease_duration: Duration::from_secs(10),
            renew_every: Duration::from_secs(2),
            resync: Duration::from_secs(30),
            ca_validity: Duration::from_secs(10 * 365 * 24 * 3600),
            cert_validity: Duration::from_secs(365 * 24 * 3600),
            renew_before: Duration::from_secs(30 * 24 * 3600),
            extra_sans: Vec::new(),
        }
    }
}

pub(crate) async fn kube_config(kubeconfig: &Option<PathBuf>) -> anyhow::Result<kube::Config> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig or in-cluster configuration")?,
    };
    Ok(config)
}

fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "holdfast-controller".into());
    format!(
        "{host}_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Serves `/healthz` (always 200) and `/readyz` (200 once reconciled).
/// At most this many probe connections are served at once; more are closed.
const MAX_PROBE_CONNECTIONS: usize = 64;

async fn serve_probes(listener: tokio::net::TcpListener, ready: Arc<AtomicBool>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PROBE_CONNECTIONS));
    let mut errors = 0u32;
    loop {
        let mut sock = match listener.accept().await {
            Ok((sock, _)) => {
                errors = 0;
                sock
            }
            Err(e) => {
                // Out of file descriptors and the like: back off, never spin.
                errors = errors.saturating_add(1);
                tracing::warn!(error = %e, "probe listener: accept failed");
                tokio::time::sleep(Duration::from_millis(50u64 << errors.min(5))).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue; // dropping the socket closes it
        };
        let ready = ready.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]);
            let path = req.split_whitespace().nth(1).unwrap_or("");
            let (code, body) = match path {
                "/healthz" => ("200 OK", "ok"),
                "/readyz" if ready.load(Ordering::SeqCst) => ("200 OK", "ok"),
                "/readyz" => ("503 Service Unavailable", "not reconciled yet"),
                _ => ("404 Not Found", "not found"),
            };
            let resp = format!(
                "HTTP/1.1 {code}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ =
                tokio::time::timeout(Duration::from_secs(5), sock.write_all(resp.as_bytes())).await;
        });
    }
}

fn failure_policy(p: FailurePolicy) -> webhookconfig::FailurePolicy {
    match p {
        FailurePolicy::Fail => webhookconfig::FailurePolicy::Fail,
        FailurePolicy::Ignore => webhookconfig::FailurePolicy::Ignore,
    }
}

fn target(w: &WebhookEndpoint) -> WebhookTarget {
    match w {
        WebhookEndpoint::Url(u) => WebhookTarget::Url(u.to_string()),
        WebhookEndpoint::Service(s) => WebhookTarget::Service {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            port: i32::from(s.port),
        },
    }
}

/// Waits for SIGTERM or SIGINT.
async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs the controller until SIGTERM/SIGINT (Ok) or a fatal error.
pub async fn run(config: RunConfig, tuning: Tuning) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kube_config = kube_config(&config.kubeconfig).await?;
    let client = Client::try_from(kube_config.clone())?;
    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(config.probe_listen)
        .await
        .with_context(|| format!("listening on {} for probes", config.probe_listen))?;
    tokio::spawn(serve_probes(listener, ready.clone()));

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        termination().await;
        tracing::info!("termination signal received; shutting down");
        let _ = shutdown_tx.send(true);
    });

    let mut elector = if config.leader_elect {
        let mut e = LeaderElector::new(
            client.clone(),
            LeaseConfig {
                namespace: tuning.lease_namespace.clone(),
                name: tuning.lease_name.clone(),
                identity: identity(),
                lease_duration: tuning.lease_duration,
                renew_every: tuning.renew_every,
            },
        );
        tracing::info!(identity = e.identity(), lease = %format!("{}/{}", tuning.lease_namespace, tuning.lease_name), "waiting for leadership");
        let mut rx = shutdown_rx.clone();
        tokio::select! {
            () = e.acquire() => {}
            _ = rx.changed() => return Ok(()),
        }
        tracing::info!(identity = e.identity(), "leading");
        Some(e)
    } else {
        None
    };

    // The install options; the CA bundle source keeps it current.
    let base = InstallOptions {
        target: target(&config.webhook),
        ca_bundle: Vec::new(),
        failure_policy: failure_policy(config.failure_policy),
        timeout_seconds: config.timeout_seconds,
    };
    let (opts_tx, opts_rx) = watch::channel(base.clone());
    let ca_task = match &config.ca {
        CaSource::BundleFile(path) => {
            let bundle =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            opts_tx.send_modify(|o| o.ca_bundle = bundle);
            tokio::spawn(certs::follow_file(path.clone(), opts_tx))
        }
        CaSource::Secret(_) | CaSource::Managed => {
            let secret = match &config.ca {
                CaSource::Secret(s) => s.clone(),
                _ => crate::config::SecretRef {
                    namespace: std::env::var("POD_NAMESPACE")
                        .unwrap_or_else(|_| "holdfast-system".to_string()),
                    name: DEFAULT_CA_SECRET.to_string(),
                },
            };
            let manager =
                certs::CertManager::new(client.clone(), secret.clone(), &config.webhook, &tuning);
            manager.ensure_once(&opts_tx).await.with_context(|| {
                format!(
                    "managing the webhook certificates in Secret {secret} (give --ca-secret NAMESPACE/NAME or --ca-bundle-file FILE to choose)"
                )
            })?;
            tokio::spawn(manager.run(opts_tx))
        }
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut outer = shutdown_rx.clone();
    tokio::spawn(async move {
        let _ = outer.changed().await;
        let _ = stop_tx.send(true);
    });
    let instance = elector
        .as_ref()
        .map_or_else(identity, |e| e.identity().to_string());
    let work: std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>> =
        match config.topology {
            Topology::Kubernetes => {
                let self_protection =
                    kubernetes::self_protection(&client, &config.admin_groups).await;
                let reconciler = kubernetes::Reconciler::new(
                    client.clone(),
                    kubernetes::Settings {
                        labels: config.protection_labels.clone(),
                        strict: config.strict,
                        resync: tuning.resync,
                        instance,
                        self_protection,
                        read_secrets: config.read_secrets,
                        backstop: config.backstop,
                    },
                    opts_rx,
                    ready.clone(),
                );
                Box::pin(reconciler.run(stop_rx.clone()))
            }
            Topology::Kcp => {
                let Some(vw) =
                    kcp::virtual_workspace_url(&client, &config.api_export, stop_rx.clone())
                        .await?
                else {
                    return Ok(());
                };
                tracing::info!(url = %vw, apiexport = %config.api_export, "found the virtual workspace");
                let reconciler = kcp::Reconciler::new(
                    kcp::Clients::new(kube_config.clone()),
                    vw,
                    kcp::Settings {
                        api_export: config.api_export.clone(),
                        resync: tuning.resync,
                    },
                    opts_rx,
                    ready.clone(),
                )?;
                Box::pin(reconciler.run(stop_rx.clone(), config.cleanup_on_shutdown))
            }
        };
    let mut lost = false;
    let result = match elector.as_mut() {
        Some(e) => {
            tokio::select! {
                r = work => r,
                () = e.keep_renewing() => { lost = true; Ok(()) }
            }
        }
        None => work.await,
    };
    ca_task.abort();
    if lost {
        anyhow::bail!("lost leadership; exiting so that a fresh replica can take over");
    }
    if config.topology == Topology::Kubernetes
        && config.cleanup_on_shutdown
        && *shutdown_rx.borrow()
    {
        kubernetes::delete_self_protection(&client).await;
        crate::backstop::remove_now(&client).await;
        match kubernetes::delete_configuration(&client).await {
            Ok(true) => tracing::info!(
                "cleanup on shutdown: deleted ValidatingWebhookConfiguration holdfast"
            ),
            Ok(false) => tracing::info!("cleanup on shutdown: nothing to delete"),
            Err(e) => tracing::error!(error = %format!("{e:#}"), "cleanup on shutdown failed"),
        }
    }
    if let Some(e) = elector.as_mut() {
        e.release().await;
    }
    result
}

/// `holdfast-controller routes`: what the live configuration `holdfast` routes
/// to the webhook (the blast radius of a webhook outage), and which namespaces
/// carry the containment marker.
pub async fn routes(kubeconfig: &Option<PathBuf>) -> anyhow::Result<String> {
    use holdfast_shared::{
        names::WEBHOOK_CONFIGURATION_NAME,
        webhookconfig::{CONTAINS_PROTECTED_LABEL, describe_configuration},
    };
    use k8s_openapi::api::{
        admissionregistration::v1::ValidatingWebhookConfiguration, core::v1::Namespace,
    };
    let client = Client::try_from(kube_config(kubeconfig).await?)?;
    let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
    let Some(cfg) = api
        .get_opt(WEBHOOK_CONFIGURATION_NAME)
        .await
        .with_context(|| {
            format!("reading ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME}")
        })?
    else {
        return Ok(format!(
            "ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME} is not installed: no request is routed to holdfast\n"
        ));
    };
    let mut out = describe_configuration(&cfg);
    let namespaces: kube::Api<Namespace> = kube::Api::all(client);
    let marked = namespaces
        .list_metadata(&kube::api::ListParams::default().labels(CONTAINS_PROTECTED_LABEL))
        .await
        .context("listing marked namespaces")?;
    let names: Vec<String> = marked
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    out.push_str(&format!(
        "namespaces labelled {CONTAINS_PROTECTED_LABEL}: {}\n",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    ));
    Ok(out)
}
