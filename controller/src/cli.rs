//! Command line of `holdfast-controller`.
//!
//! ```text
//! holdfast-controller [run] [FLAGS]      run the controller (the default command)
//! holdfast-controller crds [--output-dir DIR]
//!                                        print all CRDs as YAML, or write manifests/crds
//! holdfast-controller kcp-manifests [--output-dir DIR]
//!                                        kcp APIResourceSchemas + APIExport (manifests/kcp)
//! holdfast-controller uninstall [--kubeconfig FILE] [--namespace NS] [--wait-seconds S]
//!                                        stop the controller, remove what it installed
//! ```
//!
//! Every `run` flag has an environment equivalent (`--timeout-seconds` ↔
//! `HOLDFAST_TIMEOUT_SECONDS`; a flag given on the command line wins).
//! `--protection-label` is repeatable; in `HOLDFAST_PROTECTION_LABELS` entries are
//! separated by `;`. Without a subcommand `run` is assumed, so the `run` flags are
//! accepted directly (`holdfast-controller --webhook-service ns/svc:443`): clap's
//! optional subcommand with the `run` flags flattened beside it.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 invalid command line or configuration.

use std::{
    ffi::OsString,
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
};

use clap::{ArgAction, Args, Parser, Subcommand, builder::BoolishValueParser};
use holdfast_shared::runtime::{self, KcpArgs, LogArgs, ProtectionArgs};
use url::Url;

use crate::config::{
    CaSource, FailurePolicy, RunConfig, SecretRef, ServiceRef, Topology, WebhookEndpoint,
    parse_webhook_url,
};

pub use holdfast_shared::runtime::{ConfigError, EXIT_FAILURE, EXIT_USAGE, LogFormat};

/// holdfast controller: installs and heals the admission webhook configuration(s)
/// that protect Kubernetes objects from deletion.
#[derive(Parser, Debug)]
#[command(
    name = "holdfast-controller",
    version,
    after_help = "Without a subcommand, `run` is assumed: `holdfast-controller --strict ...` is \
                  `holdfast-controller run --strict ...`. Every run flag can also be set through \
                  its HOLDFAST_* environment variable (shown in brackets in `run --help`)."
)]
pub struct Cli {
    /// Command (default: `run` with the flags given beside it).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The flags of `run` when no subcommand is named.
    #[command(flatten)]
    pub run: Box<RunArgs>,
    /// Logging flags.
    #[command(flatten)]
    pub log: LogArgs,
}

impl Cli {
    /// Parses `args` (the first is the program name). The `run` flags beside
    /// the subcommand read their environment only when no subcommand is named
    /// (`crds` is not refused for a bad `HOLDFAST_TIMEOUT_SECONDS`), and are
    /// refused on the command line before another subcommand.
    pub fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        use clap::{
            CommandFactory as _, FromArgMatches as _, error::ErrorKind, parser::ValueSource,
        };
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        // First without the environment of the run flags beside the subcommand.
        let mut plain =
            Cli::command().mut_args(|a| if a.is_global_set() { a } else { a.env(None) });
        let matches = match plain.try_get_matches_from_mut(&args) {
            Ok(m) => m,
            // Help as the complete command shows it (environment names included).
            Err(e) if e.kind() == ErrorKind::DisplayHelp => {
                return Err(Cli::try_parse_from(&args)
                    .err()
                    .filter(|full| full.kind() == e.kind())
                    .unwrap_or(e));
            }
            Err(e) => return Err(e),
        };
        let Some(name) = matches.subcommand_name() else {
            // `run` by default: parse again with the environment.
            return Cli::try_parse_from(&args);
        };
        let given = plain.get_arguments().find(|a| {
            !a.is_global_set()
                && matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine)
        });
        if let Some(arg) = given {
            let flag = arg.get_long().unwrap_or(arg.get_id().as_str());
            return Err(plain.error(
                ErrorKind::ArgumentConflict,
                format!("the subcommand '{name}' cannot be used with '--{flag}' (a flag of run)"),
            ));
        }
        Cli::from_arg_matches(&matches)
    }

    /// The command to run: the named one, else `run` with the flags given.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Run(self.run))
    }
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controller (the default command).
    Run(Box<RunArgs>),
    /// Print the holdfast CustomResourceDefinitions as multi-document YAML.
    Crds(CrdsArgs),
    /// Print holdfast's kcp APIResourceSchemas and APIExport (or write manifests/kcp).
    KcpManifests(CrdsArgs),
    /// Print what the installed configuration routes to the webhook: per webhook
    /// the requests, namespaces, objects and conditions, and what an outage of
    /// the webhook blocks (Kubernetes and Karmada).
    Routes(RoutesArgs),
    /// Take enforcement down before holdfast's installation is deleted (Helm's
    /// pre-delete hook): scale the controller to zero, wait until it has stopped,
    /// then delete the self-protection policy, the backstop and the webhook
    /// configuration (Kubernetes and Karmada). Run as the controller's identity.
    Uninstall(UninstallArgs),
}

/// Flags of `uninstall`.
#[derive(Args, Debug, Clone)]
pub struct UninstallArgs {
    /// Kubeconfig file (default: in-cluster configuration, or $KUBECONFIG).
    #[arg(long, value_name = "FILE", env = "HOLDFAST_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of holdfast's installation (the controller's Deployment and Lease).
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "HOLDFAST_NAMESPACE",
        default_value = "holdfast-system"
    )]
    pub namespace: String,
    /// How long to wait for the controller to stop (seconds).
    #[arg(long, value_name = "S", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600), env = "HOLDFAST_WAIT_SECONDS")]
    pub wait_seconds: u64,
}

/// Flags of `routes`.
#[derive(Args, Debug, Clone, Default)]
pub struct RoutesArgs {
    /// Kubeconfig file (default: in-cluster configuration, or $KUBECONFIG).
    #[arg(long, value_name = "FILE", env = "HOLDFAST_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// Flags of `crds`.
#[derive(Args, Debug, Clone, Default)]
pub struct CrdsArgs {
    /// Write one file per CRD (plus kustomization.yaml) into DIR instead of
    /// printing; stale generated files there are removed.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
}

/// Flags of `run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Kubeconfig file (default: in-cluster configuration, or $KUBECONFIG).
    #[arg(long, value_name = "FILE", env = "HOLDFAST_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Topology of the protected cluster(s).
    #[arg(long, value_enum, ignore_case = true, default_value_t = Topology::Kubernetes, env = "HOLDFAST_TOPOLOGY")]
    pub topology: Topology,

    /// URL the API server calls the webhook at (https; an empty path becomes /validate).
    /// Required on kcp. Exclusive with --webhook-service.
    #[arg(long, value_name = "URL", env = "HOLDFAST_WEBHOOK_URL", value_parser = parse_webhook_url, conflicts_with = "webhook_service")]
    pub webhook_url: Option<Url>,

    /// Service the API server calls the webhook through, path /validate
    /// (":PORT" defaults to 443). Exclusive with --webhook-url.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME:PORT",
        env = "HOLDFAST_WEBHOOK_SERVICE"
    )]
    pub webhook_service: Option<ServiceRef>,

    /// PEM file with the CA bundle the API server trusts for the webhook, re-read
    /// when it changes (default: a self-signed CA managed and rotated by the
    /// controller in Secret $POD_NAMESPACE/holdfast-webhook-tls, namespace
    /// holdfast-system without $POD_NAMESPACE). Exclusive with --ca-secret.
    #[arg(
        long,
        value_name = "FILE",
        env = "HOLDFAST_CA_BUNDLE_FILE",
        conflicts_with = "ca_secret"
    )]
    pub ca_bundle_file: Option<PathBuf>,

    /// Secret the controller manages: a self-signed CA (ca.crt, ca.key) and the
    /// webhook's serving certificate (tls.crt, tls.key) for the Service DNS names
    /// or the URL host, renewed before expiry; the caBundle follows ca.crt.
    /// Exclusive with --ca-bundle-file.
    #[arg(long, value_name = "NAMESPACE/NAME", env = "HOLDFAST_CA_SECRET")]
    pub ca_secret: Option<SecretRef>,

    /// failurePolicy of the installed webhooks.
    #[arg(long, value_enum, default_value_t = FailurePolicy::Fail, env = "HOLDFAST_FAILURE_POLICY")]
    pub failure_policy: FailurePolicy,

    /// timeoutSeconds of the installed webhooks (1 to 30).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=30), env = "HOLDFAST_TIMEOUT_SECONDS")]
    pub timeout_seconds: i32,

    /// Delete the installed webhook configuration(s) on shutdown.
    #[arg(long, action = ArgAction::SetTrue, value_parser = BoolishValueParser::new(), env = "HOLDFAST_CLEANUP_ON_SHUTDOWN")]
    pub cleanup_on_shutdown: bool,

    /// What is protected and how strictly (shared with holdfast-webhook).
    #[command(flatten)]
    pub protection: ProtectionArgs,

    /// Install the backstop, a ValidatingAdmissionPolicy that refuses the DELETE of
    /// label-protected objects (and, under --strict, removing the label) inside the
    /// API server, so label protection holds while the webhook is down. On by
    /// default where the API server serves admissionregistration.k8s.io/v1
    /// ValidatingAdmissionPolicy; --backstop=false removes an installed one.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_value = "true", default_missing_value = "true", value_parser = BoolishValueParser::new(), env = "HOLDFAST_BACKSTOP")]
    pub backstop: bool,

    /// Let holdfast read Secrets for label containment even when no policy names
    /// them (a labelled Secret then holds back its namespace's deletion). Without
    /// it, the reads role the controller keeps never grants Secrets unless a
    /// policy names them.
    #[arg(long, action = ArgAction::SetTrue, value_parser = BoolishValueParser::new(), env = "HOLDFAST_READ_SECRETS")]
    pub read_secrets: bool,

    /// Run leader election (for more than one replica).
    #[arg(long, action = ArgAction::SetTrue, value_parser = BoolishValueParser::new(), env = "HOLDFAST_LEADER_ELECT")]
    pub leader_elect: bool,

    /// Group whose members may change or delete holdfast's own installation
    /// (webhook configuration, CRDs, Deployments, Service, Secret) besides the
    /// controller itself (repeatable; ';' separates several in one value).
    #[arg(long, value_name = "GROUP", action = ArgAction::Append, value_delimiter = ';', env = "HOLDFAST_ADMIN_GROUP")]
    pub admin_group: Vec<String>,

    /// kcp: the holdfast APIExport and virtual-workspace credentials (shared with
    /// holdfast-webhook).
    #[command(flatten)]
    pub kcp: KcpArgs,

    /// kcp: the workspace whose `tenancy.kcp.io` APIExport every workspace binds
    /// (kcp's `root`); the controller keeps workspace containment's configuration
    /// `holdfast-workspaces` there. Empty: no workspace containment.
    #[arg(long, value_name = "PATH", default_value = holdfast_shared::workspaces::DEFAULT_TENANCY_WORKSPACE, value_parser = parse_tenancy_workspace, env = "HOLDFAST_KCP_TENANCY_WORKSPACE")]
    pub kcp_tenancy_workspace: String,

    /// Listen address of /healthz and /readyz.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8081",
        env = "HOLDFAST_PROBE_LISTEN"
    )]
    pub probe_listen: SocketAddr,

    /// Tuning (hidden flags).
    #[command(flatten)]
    pub tuning: TuningArgs,
}

/// Hidden tuning flags (tests, unusual deployments).
#[derive(Args, Debug, Clone)]
pub struct TuningArgs {
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else holdfast-system).
    #[arg(
        long,
        value_name = "NAMESPACE",
        env = "HOLDFAST_LEADER_ELECT_NAMESPACE",
        hide = true
    )]
    pub leader_elect_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "holdfast-controller",
        env = "HOLDFAST_LEADER_ELECT_LEASE",
        hide = true
    )]
    pub leader_elect_lease: String,
    /// Lease duration in seconds.
    #[arg(long, value_name = "S", default_value_t = crate::run::LEASE_DURATION.as_secs(), value_parser = clap::value_parser!(u64).range(2..=300), hide = true)]
    pub leader_elect_lease_duration_seconds: u64,
    /// Lease renew period in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = crate::run::LEASE_RENEW.as_millis() as u64, value_parser = clap::value_parser!(u64).range(100..=60_000), hide = true)]
    pub leader_elect_renew_millis: u64,
    /// Full resync period in seconds.
    #[arg(long, value_name = "S", default_value_t = crate::run::RESYNC.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600), hide = true)]
    pub resync_seconds: u64,
    /// Validity of the managed CA in seconds (default 10 years).
    #[arg(long, value_name = "S", default_value_t = crate::run::CA_VALIDITY.as_secs(), value_parser = clap::value_parser!(u64).range(10..), env = "HOLDFAST_CA_VALIDITY_SECONDS", hide = true)]
    pub ca_validity_seconds: u64,
    /// Validity of the managed serving certificate in seconds (default 1 year).
    #[arg(long, value_name = "S", default_value_t = crate::run::CERT_VALIDITY.as_secs(), value_parser = clap::value_parser!(u64).range(10..), env = "HOLDFAST_CERT_VALIDITY_SECONDS", hide = true)]
    pub cert_validity_seconds: u64,
    /// Renew managed certificates this many seconds before expiry (default 30 days).
    #[arg(long, value_name = "S", default_value_t = crate::run::CERT_RENEW_BEFORE.as_secs(), value_parser = clap::value_parser!(u64).range(1..), env = "HOLDFAST_CERT_RENEW_BEFORE_SECONDS", hide = true)]
    pub cert_renew_before_seconds: u64,
    /// Extra SAN (DNS name or IP) for the managed serving certificate (repeatable).
    #[arg(long, value_name = "NAME", action = ArgAction::Append, hide = true)]
    pub cert_extra_san: Vec<String>,
}

impl TuningArgs {
    /// The tuning settings.
    pub fn into_tuning(self) -> Result<crate::run::Tuning, ConfigError> {
        use std::time::Duration;
        let d = crate::run::Tuning::default();
        let renew_every = Duration::from_millis(self.leader_elect_renew_millis);
        let lease_duration = Duration::from_secs(self.leader_elect_lease_duration_seconds);
        if renew_every * 2 > lease_duration {
            return Err(config_error(
                "--leader-elect-renew-millis must be at most half of --leader-elect-lease-duration-seconds",
            ));
        }
        if self.cert_renew_before_seconds >= self.cert_validity_seconds {
            return Err(config_error(
                "--cert-renew-before-seconds must be less than --cert-validity-seconds",
            ));
        }
        Ok(crate::run::Tuning {
            lease_namespace: self.leader_elect_namespace.unwrap_or(d.lease_namespace),
            lease_name: self.leader_elect_lease,
            lease_duration,
            renew_every,
            resync: Duration::from_secs(self.resync_seconds),
            ca_validity: Duration::from_secs(self.ca_validity_seconds),
            cert_validity: Duration::from_secs(self.cert_validity_seconds),
            renew_before: Duration::from_secs(self.cert_renew_before_seconds),
            extra_sans: self.cert_extra_san,
        })
    }
}

fn config_error(msg: impl Into<String>) -> ConfigError {
    ConfigError::new(msg)
}

impl RunArgs {
    /// Checks what clap cannot (combinations, files) and builds the run configuration.
    pub fn into_config(self) -> Result<RunConfig, ConfigError> {
        let webhook = match (self.webhook_url, self.webhook_service) {
            (Some(_), Some(_)) => {
                return Err(config_error(
                    "--webhook-url and --webhook-service are mutually exclusive (check HOLDFAST_WEBHOOK_URL and HOLDFAST_WEBHOOK_SERVICE)",
                ));
            }
            (None, None) => {
                return Err(config_error(
                    "one of --webhook-url URL or --webhook-service NAMESPACE/NAME:PORT is required (or HOLDFAST_WEBHOOK_URL / HOLDFAST_WEBHOOK_SERVICE)",
                ));
            }
            (Some(url), None) => WebhookEndpoint::Url(url),
            (None, Some(svc)) => WebhookEndpoint::Service(svc),
        };
        if self.topology == Topology::Kcp && matches!(webhook, WebhookEndpoint::Service(_)) {
            return Err(config_error(
                "--topology kcp needs --webhook-url: a workspace cannot reach a Service of the hosting cluster",
            ));
        }
        let ca = match (self.ca_bundle_file, self.ca_secret) {
            (Some(_), Some(_)) => {
                return Err(config_error(
                    "--ca-bundle-file and --ca-secret are mutually exclusive (check HOLDFAST_CA_BUNDLE_FILE and HOLDFAST_CA_SECRET)",
                ));
            }
            (Some(file), None) => {
                check_ca_bundle(&file)?;
                CaSource::BundleFile(file)
            }
            (None, Some(secret)) => CaSource::Secret(secret),
            (None, None) => CaSource::Managed,
        };
        for (flag, file) in [
            ("--kubeconfig", &self.kubeconfig),
            (
                "--virtual-workspace-kubeconfig",
                &self.kcp.virtual_workspace_kubeconfig,
            ),
        ] {
            if let Some(file) = file
                && !file.is_file()
            {
                return Err(config_error(format!(
                    "{flag} {}: no such file",
                    file.display()
                )));
            }
        }
        self.protection.check().map_err(config_error)?;
        Ok(RunConfig {
            kubeconfig: self.kubeconfig,
            topology: self.topology,
            webhook,
            ca,
            failure_policy: self.failure_policy,
            timeout_seconds: self.timeout_seconds,
            cleanup_on_shutdown: self.cleanup_on_shutdown,
            strict: self.protection.strict,
            backstop: self.backstop,
            read_secrets: self.read_secrets,
            protection_labels: self.protection.labels(),
            leader_elect: self.leader_elect,
            admin_groups: self
                .admin_group
                .into_iter()
                .map(|g| g.trim().to_string())
                .filter(|g| !g.is_empty())
                .collect(),
            api_export: self.kcp.api_export,
            tenancy_workspace: Some(self.kcp_tenancy_workspace).filter(|p| !p.is_empty()),
            virtual_workspace_kubeconfig: self.kcp.virtual_workspace_kubeconfig,
            probe_listen: self.probe_listen,
        })
    }
}

/// `--kcp-tenancy-workspace`: empty, or a workspace path.
fn parse_tenancy_workspace(s: &str) -> Result<String, String> {
    if s.is_empty() || holdfast_shared::kcp::is_workspace_path(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a workspace path (like root or root:org)"
        ))
    }
}

/// Checks that `path` is a readable PEM file with at least one certificate.
fn check_ca_bundle(path: &Path) -> Result<(), ConfigError> {
    let content = std::fs::read_to_string(path)
        .map_err(|e| config_error(format!("--ca-bundle-file {}: {e}", path.display())))?;
    if !content.contains("-----BEGIN CERTIFICATE-----") {
        return Err(config_error(format!(
            "--ca-bundle-file {}: no PEM certificate (-----BEGIN CERTIFICATE-----) found",
            path.display()
        )));
    }
    Ok(())
}

/// Entry point of the binary: parses `std::env::args_os()`.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// Entry point with explicit arguments (the first is the program name).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    runtime::exit::main_parsed(
        "holdfast-controller",
        Cli::parse_args(args),
        |cli: &Cli| cli.log,
        |cli| match cli.into_command() {
            Command::Crds(args) => crds(&args),
            Command::KcpManifests(args) => kcp_manifests(&args),
            Command::Routes(args) => routes(&args),
            Command::Uninstall(args) => uninstall(&args),
            Command::Run(args) => run(*args),
        },
    )
}

/// Writes `out` to stdout; a closed pipe (`holdfast-controller crds | head`) is
/// not an error.
fn print(out: &str, what: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("writing {what} to stdout"))),
    }
}

fn crds(args: &CrdsArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.output_dir {
        let written = crate::crds::write_files(dir)?;
        tracing::info!(dir = %dir.display(), files = ?written, "wrote CRD manifests");
        return Ok(());
    }
    print(&crate::crds::render_all()?, "CRDs")
}

fn kcp_manifests(args: &CrdsArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.output_dir {
        let written = crate::kcp::manifests::write_files(dir)?;
        tracing::info!(dir = %dir.display(), files = ?written, "wrote kcp manifests");
        return Ok(());
    }
    let mut out = String::new();
    for (name, content) in crate::kcp::manifests::render_files()? {
        if name != "kustomization.yaml" {
            out.push_str(content.trim_start_matches(crate::kcp::manifests::GENERATED_HEADER));
        }
    }
    print(&out, "kcp manifests")
}

fn routes(args: &RoutesArgs) -> anyhow::Result<()> {
    let out = runtime::exit::block_on_current(crate::run::routes(args.kubeconfig.as_deref()))?;
    print(&out, "routes")
}

fn uninstall(args: &UninstallArgs) -> anyhow::Result<()> {
    let what = crate::uninstall::Uninstall {
        namespace: args.namespace.clone(),
        timeout: std::time::Duration::from_secs(args.wait_seconds),
    };
    runtime::exit::block_on_current(async {
        let client = holdfast_shared::kubeconfig::client(args.kubeconfig.as_deref()).await?;
        crate::uninstall::uninstall(&client, &what).await
    })
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let tuning = args.tuning.clone().into_tuning()?;
    let config = args.into_config()?;
    // Before any watch: what `kcp.io/cluster` means follows the topology.
    holdfast_shared::topology::set_process_topology(config.topology)?;
    let labels: Vec<String> = config
        .protection_labels
        .iter()
        .map(ToString::to_string)
        .collect();
    tracing::info!(
        kubeconfig = %config.kubeconfig.as_deref().map_or_else(|| "<in-cluster or $KUBECONFIG>".to_string(), |p| p.display().to_string()),
        topology = %config.topology,
        webhook = %config.webhook,
        ca = %config.ca,
        failure_policy = %config.failure_policy,
        timeout_seconds = config.timeout_seconds,
        cleanup_on_shutdown = config.cleanup_on_shutdown,
        strict = config.strict,
        backstop = config.backstop,
        protection_labels = ?labels,
        leader_elect = config.leader_elect,
        apiexport = %config.api_export,
        probe_listen = %config.probe_listen,
        "configuration is valid"
    );
    runtime::exit::block_on(crate::run::run(config, tuning))
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
