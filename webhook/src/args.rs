//! Command-line flags (each with a `HOLDFAST_*` environment equivalent).

use clap::{ArgAction, Parser, builder::BoolishValueParser};
use holdfast_shared::{
    runtime::{KcpArgs, LogArgs, ProtectionArgs, http::Limits},
    topology::Topology,
};
use std::{net::SocketAddr, path::PathBuf};

/// `30`, `30s`, `90m`, `24h`, `7d`: a positive duration of at most a year.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 30s, 90m, 24h, 7d)"))?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use s, m, h or d"
            ));
        }
    };
    if secs == 0 || secs > 366 * 86_400 {
        return Err(format!("{text:?} must be between 1s and 366d"));
    }
    Ok(std::time::Duration::from_secs(secs))
}

impl Args {
    /// `--max-break-glass` as a time span.
    pub fn max_break_glass(&self) -> chrono::TimeDelta {
        chrono::TimeDelta::from_std(self.max_break_glass)
            .unwrap_or(holdfast_shared::policy::DEFAULT_MAX_BREAK_GLASS)
    }

    /// The admission and probe listeners' limits.
    pub fn limits(&self) -> Limits {
        const MIB: u64 = 1024 * 1024;
        let mib = |n: u64| usize::try_from(n.saturating_mul(MIB)).unwrap_or(usize::MAX);
        Limits {
            read_timeout: std::time::Duration::from_secs(self.read_timeout_seconds),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout_seconds),
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            body_budget: mib(self.max_body_budget_mib),
            connection_body_budget: mib(self.max_connection_body_mib),
            max_streams: self.max_streams,
            max_age: (self.max_connection_age_seconds > 0)
                .then(|| std::time::Duration::from_secs(self.max_connection_age_seconds)),
        }
    }
}

pub use holdfast_shared::runtime::LogFormat;

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
    #[arg(long, env = "HOLDFAST_TOPOLOGY", value_enum, ignore_case = true, default_value_t = Topology::Kubernetes)]
    pub topology: Topology,

    /// What is protected and how strictly (shared with holdfast-controller).
    #[command(flatten)]
    pub protection: ProtectionArgs,

    /// Serve label protection only: load no policy objects (no CRDs or API access
    /// needed; ready at once).
    #[arg(long, action = ArgAction::SetTrue, value_parser = BoolishValueParser::new(), env = "HOLDFAST_LABEL_ONLY")]
    pub label_only: bool,

    /// How DependencyRule dependents are found: watch (index fed by watches, falls
    /// back to live until synced) or live (a list per request).
    #[arg(long, env = "HOLDFAST_DEPENDENTS", value_enum, default_value = "watch")]
    pub dependents: crate::view::DependentsMode,

    /// kcp: the holdfast APIExport and virtual-workspace credentials (shared with
    /// holdfast-controller).
    #[command(flatten)]
    pub kcp: KcpArgs,

    /// Seconds a client may take to send request headers, and then the body.
    #[arg(long, env = "HOLDFAST_READ_TIMEOUT_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub read_timeout_seconds: u64,

    /// Seconds a connection may stay open with no request in flight.
    #[arg(long, env = "HOLDFAST_IDLE_TIMEOUT_SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub idle_timeout_seconds: u64,

    /// Seconds a connection may stay open (less up to a tenth, per connection) before
    /// it is closed gracefully (HTTP/2 GOAWAY; in-flight requests finish), so that
    /// an API server's long-lived connection moves to another replica in time; 0:
    /// no limit.
    #[arg(long, env = "HOLDFAST_MAX_CONNECTION_AGE_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub max_connection_age_seconds: u64,

    /// Connections open at once on each listener; more are closed at accept.
    #[arg(long, env = "HOLDFAST_MAX_CONNECTIONS", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,

    /// MiB of request bodies held in memory at once, all connections together (a
    /// quarter is kept for bodies of at most 256 KiB).
    #[arg(long, env = "HOLDFAST_MAX_BODY_BUDGET_MIB", default_value_t = 128, value_parser = clap::value_parser!(u64).range(16..=4096))]
    pub max_body_budget_mib: u64,

    /// MiB of request bodies one connection may hold at once (at least one 3 MiB body).
    #[arg(long, env = "HOLDFAST_MAX_CONNECTION_BODY_MIB", default_value_t = 8, value_parser = clap::value_parser!(u64).range(4..=1024))]
    pub max_connection_body_mib: u64,

    /// HTTP/2 streams one connection may have open at once.
    #[arg(long, env = "HOLDFAST_MAX_STREAMS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_streams: u32,

    /// PEM bundle of CAs whose client certificates may call the admission port; with it,
    /// a client without such a certificate cannot complete the TLS handshake (configure
    /// the API server's AdmissionConfiguration to present one; see docs/decisions.md).
    #[arg(long, env = "HOLDFAST_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// Longest break-glass window: a skip annotation dated further ahead does not
    /// count (the denial says so). Seconds, or with a unit: 90m, 24h, 7d.
    #[arg(long, env = "HOLDFAST_MAX_BREAK_GLASS", default_value = "24h", value_parser = parse_duration)]
    pub max_break_glass: std::time::Duration,

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

    /// How often the controller's settings (annotation holdfast.dev/settings of the
    /// configuration "holdfast") are compared with this webhook's, in milliseconds.
    #[arg(long, env = "HOLDFAST_SETTINGS_CHECK_INTERVAL_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=600_000), hide = true)]
    pub settings_check_interval_ms: u64,

    /// Logging flags.
    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_virtual_workspace_kubeconfig_is_optional() {
        let base = ["holdfast-webhook", "--tls-cert", "c", "--tls-key", "k"];
        let args = Args::try_parse_from(base).expect("parses");
        assert_eq!(args.kcp.virtual_workspace_kubeconfig, None);
        let mut with = base.to_vec();
        with.extend(["--virtual-workspace-kubeconfig", "/etc/holdfast/vw"]);
        let args = Args::try_parse_from(with).expect("parses");
        assert_eq!(
            args.kcp.virtual_workspace_kubeconfig,
            Some(PathBuf::from("/etc/holdfast/vw"))
        );
    }
}
