//! `holdfast-controller run`: wires the client, probes, CA source, leader
//! election and the topology's reconciler together, and handles shutdown.

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use holdfast_shared::{
    kubeconfig,
    runtime::{
        Shutdown,
        admin::{Admin, Probes},
        http::Limits,
    },
    webhookconfig::{InstallOptions, WebhookTarget},
};
use kube::Client;
use tokio::sync::watch;

use crate::{
    certs,
    config::{CaSource, RunConfig, Topology, WebhookEndpoint},
    kcp, kubernetes,
    leader::{LeaderElector, LeaseConfig},
    reconcile::Metrics,
};

/// Name of the managed certificate Secret when neither `--ca-secret` nor
/// `--ca-bundle-file` is given (in `$POD_NAMESPACE`, else `holdfast-system`).
pub const DEFAULT_CA_SECRET: &str = "holdfast-webhook-tls";

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Default leader-election Lease duration.
pub const LEASE_DURATION: Duration = Duration::from_secs(10);
/// Default Lease renew / retry period.
pub const LEASE_RENEW: Duration = Duration::from_secs(2);
/// Default full resync period.
pub const RESYNC: Duration = Duration::from_secs(30);
/// Default validity of the managed CA (10 years).
pub const CA_VALIDITY: Duration = DAY.saturating_mul(10 * 365);
/// Default validity of the managed serving certificate (1 year).
pub const CERT_VALIDITY: Duration = DAY.saturating_mul(365);
/// Default renewal margin of the managed certificates (30 days).
pub const CERT_RENEW_BEFORE: Duration = DAY.saturating_mul(30);

/// At most this many admin (probe and metrics) connections are open at once.
const MAX_ADMIN_CONNECTIONS: usize = 64;

/// Admin connections still open this long after shutdown are dropped.
const ADMIN_GRACE: Duration = Duration::from_secs(5);

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
            lease_duration: LEASE_DURATION,
            renew_every: LEASE_RENEW,
            resync: RESYNC,
            ca_validity: CA_VALIDITY,
            cert_validity: CERT_VALIDITY,
            renew_before: CERT_RENEW_BEFORE,
            extra_sans: Vec::new(),
        }
    }
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

/// What the controller's admin server reports: ready once a reconcile pass
/// succeeded; the reconcile metrics.
struct ControllerProbes {
    ready: Arc<AtomicBool>,
    metrics: Metrics,
}

impl Probes for ControllerProbes {
    fn readiness(&self) -> Result<(), String> {
        if self.ready.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err("not reconciled yet".into())
        }
    }

    fn metrics(&self) -> String {
        self.metrics.render()
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

/// Runs the controller until SIGTERM/SIGINT (Ok) or a fatal error.
pub async fn run(config: RunConfig, tuning: Tuning) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kube_config = kubeconfig::load(config.kubeconfig.as_deref()).await?;
    let client = Client::try_from(kube_config.clone())?;
    let ready = Arc::new(AtomicBool::new(false));
    let metrics = Metrics::new().context("registering metrics")?;
    let listener = tokio::net::TcpListener::bind(config.probe_listen)
        .await
        .with_context(|| format!("listening on {} for probes", config.probe_listen))?;
    let shutdown = Arc::new(Shutdown::new());
    let shutdown_rx = shutdown.token();
    let admin = Admin::new(
        ControllerProbes {
            ready: ready.clone(),
            metrics: metrics.clone(),
        },
        Limits {
            max_connections: MAX_ADMIN_CONNECTIONS,
            ..Limits::default()
        },
    );
    // The admin server answers until the very end (cleanup and Lease release included).
    let admin_stop = Shutdown::new();
    let admin_task = tokio::spawn(holdfast_shared::runtime::http::serve(
        listener,
        None,
        admin,
        admin_stop.token(),
        ADMIN_GRACE,
    ));
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { shutdown.on_signal().await });
    }

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
        let rx = shutdown_rx.clone();
        tokio::select! {
            () = e.acquire() => {}
            _ = rx.cancelled() => return Ok(()),
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
        failure_policy: config.failure_policy,
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

    let stop_rx = shutdown_rx.clone();
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
                Box::pin(reconciler.run(stop_rx.clone(), metrics.clone()))
            }
            Topology::Kcp => {
                tracing::info!(apiexport = %config.api_export, "watching every endpoint of the APIExportEndpointSlice");
                let vw_config = match &config.virtual_workspace_kubeconfig {
                    Some(path) => Some(kubeconfig::load(Some(path)).await?),
                    None => None,
                };
                let reconciler = kcp::Reconciler::new(
                    kcp::Clients::new(kube_config.clone(), holdfast_shared::kcp::MAX_CLIENTS)
                        .with_virtual_workspace_config(vw_config),
                    client.clone(),
                    kcp::Settings {
                        api_export: config.api_export.clone(),
                        resync: tuning.resync,
                        labels: config.protection_labels.clone(),
                        strict: config.strict,
                        tenancy_workspace: config.tenancy_workspace.clone(),
                    },
                    opts_rx,
                    ready.clone(),
                )?;
                Box::pin(reconciler.run(
                    stop_rx.clone(),
                    config.cleanup_on_shutdown,
                    metrics.clone(),
                ))
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
    if config.topology == Topology::Kubernetes && config.cleanup_on_shutdown && shutdown.triggered()
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
    admin_stop.trigger();
    let _ = admin_task.await;
    result
}

/// `holdfast-controller routes`: what the live configuration `holdfast` routes
/// to the webhook (the blast radius of a webhook outage), and which namespaces
/// carry the containment marker.
pub async fn routes(kubeconfig: Option<&Path>) -> anyhow::Result<String> {
    use holdfast_shared::{
        names::WEBHOOK_CONFIGURATION_NAME,
        webhookconfig::{CONTAINS_PROTECTED_LABEL, describe_configuration},
    };
    use k8s_openapi::api::{
        admissionregistration::v1::ValidatingWebhookConfiguration, core::v1::Namespace,
    };
    let client = kubeconfig::client(kubeconfig).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// `GET path` over plain HTTP/1.1: status code and body.
    async fn get(port: u16, path: &str) -> (u16, String) {
        let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        sock.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("write");
        let mut raw = String::new();
        sock.read_to_string(&mut raw).await.expect("read");
        let (head, body) = raw.split_once("\r\n\r\n").expect("a complete response");
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status code");
        (status, body.to_string())
    }

    #[tokio::test]
    async fn admin_server_reports_readiness_and_reconcile_metrics() {
        let ready = Arc::new(AtomicBool::new(false));
        let metrics = Metrics::new().expect("metrics");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("address").port();
        let stop = Shutdown::new();
        let server = tokio::spawn(holdfast_shared::runtime::http::serve(
            listener,
            None,
            Admin::new(
                ControllerProbes {
                    ready: ready.clone(),
                    metrics: metrics.clone(),
                },
                Limits::default(),
            ),
            stop.token(),
            ADMIN_GRACE,
        ));
        assert_eq!(get(port, "/healthz").await, (200, "ok\n".into()));
        assert_eq!(
            get(port, "/readyz").await,
            (503, "not ready: not reconciled yet\n".into())
        );
        ready.store(true, Ordering::SeqCst);
        assert_eq!(get(port, "/readyz").await, (200, "ok\n".into()));
        metrics.reconciles.inc();
        metrics.errors.with_label_values(&["status"]).inc();
        let (status, body) = get(port, "/metrics").await;
        assert_eq!(status, 200);
        for line in [
            "holdfast_controller_reconcile_total 1",
            "holdfast_controller_reconcile_errors_total{error=\"status\"} 1",
            "holdfast_controller_reconcile_duration_seconds_count 0",
        ] {
            assert!(body.lines().any(|l| l == line), "{line:?} not in:\n{body}");
        }
        assert_eq!(get(port, "/nope").await.0, 404);
        stop.trigger();
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("the admin server stops on shutdown")
            .expect("no panic");
    }
}
