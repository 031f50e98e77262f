//! Command-line flags (each with a `HOLDFAST_*` environment equivalent).

use clap::{Parser, ValueEnum};
use holdfast_shared::{labels::ProtectionLabel, topology::Topology};
use std::{net::SocketAddr, path::PathBuf};

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// holdfast admission webhook: refuses deletions that a protection forbids.
#[derive(Parser, Debug, Clone)]
#[command(name = "holdfast-webhook", version, about)]
pub struct Args {
    /// HTTPS address for admission reviews (POST /validate).
    #[arg(long, env = "HOLDFAST_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// PEM certificate chain served on --listen; reloaded when the file changes.
    #[arg(long, env = "HOLDFAST_TLS_CERT")]
    pub tls_cert: PathBuf,

    /// PEM private key of --tls-cert; reloaded when the file changes.
    #[arg(long, env = "HOLDFAST_TLS_KEY")]
    pub tls_key: PathBuf,

    /// Plain-HTTP address for /healthz, /readyz and /metrics.
    #[arg(long, env = "HOLDFAST_PROBE_LISTEN", default_value = "0.0.0.0:8080")]
    pub probe_listen: SocketAddr,

    /// Kubeconfig for the API server (default: in-cluster config or $KUBECONFIG).
    #[arg(long, env = "HOLDFAST_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Deployment topology: kubernetes (also Karmada) or kcp.
    #[arg(long, env = "HOLDFAST_TOPOLOGY", default_value = "kubernetes")]
    pub topology: Topology,

    /// Extra protection label, KEY or KEY=VALUE[,VALUE...] (repeatable). A key alone
    /// protects with Always and true. holdfast.dev/protected (Always,true) is always on.
    #[arg(
        long = "protection-label",
        env = "HOLDFAST_PROTECTION_LABELS",
        value_delimiter = ';'
    )]
    pub protection_labels: Vec<ProtectionLabel>,

    /// Strict mode: deny UPDATEs that remove a protection label unless the stored
    /// object carries holdfast.dev/strict-exempt=true.
    #[arg(long, env = "HOLDFAST_STRICT")]
    pub strict: bool,

    /// Serve label protection only: load no policy objects (no CRDs or API access
    /// needed; ready at once).
    #[arg(long, env = "HOLDFAST_LABEL_ONLY")]
    pub label_only: bool,

    /// How DependencyRule dependents are found: watch (index fed by watches, falls
    /// back to live until synced) or live (a list per request).
    #[arg(long, env = "HOLDFAST_DEPENDENTS", value_enum, default_value = "watch")]
    pub dependents: crate::view::DependentsMode,

    /// kcp: the holdfast APIExport (its APIExportEndpointSlice, of the same name in
    /// the workspace the kubeconfig points at, gives the virtual workspace URL).
    #[arg(long, env = "HOLDFAST_APIEXPORT", default_value = "holdfast.dev")]
    pub apiexport: String,

    /// Seconds a client may take to send request headers, and then the body.
    #[arg(long, env = "HOLDFAST_READ_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub read_timeout_seconds: u64,

    /// Seconds in-flight reviews get to finish after SIGTERM.
    #[arg(long, env = "HOLDFAST_SHUTDOWN_GRACE_SECONDS", default_value_t = 20)]
    pub shutdown_grace_seconds: u64,

    /// Events (DeletionBlocked, BreakGlass, DeletionWarned, DeletionAudited) are
    /// published at most once per object, reason and user within this many seconds.
    #[arg(long, env = "HOLDFAST_EVENT_WINDOW_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub event_window_seconds: u64,

    /// How often the certificate files are checked for changes, in milliseconds.
    #[arg(long, env = "HOLDFAST_TLS_RELOAD_INTERVAL_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=600_000))]
    pub tls_reload_interval_ms: u64,

    /// Log format.
    #[arg(long, env = "HOLDFAST_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}
