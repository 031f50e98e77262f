//! `kubectl holdfast`: why a DELETE would be refused, and the posture of a cluster.
//!
//! `why` builds the DELETE review the API server would send for an object (the live
//! object as `oldObject`, the caller from a SelfSubjectReview) and judges it with the
//! webhook's own evaluation over the webhook's own view of the cluster, read with the
//! caller's kubeconfig. `check` reads the installation: the webhook configuration,
//! the webhook behind it, the policies' conditions, what nothing protects, and the
//! backstop. Exit codes: `why` 0 (a DELETE would go through), 1 (refused); `check`
//! 0 (no error found), 1 (findings); 2 for bad input and API errors.

use std::{
    path::PathBuf,
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, anyhow, bail};
use clap::{Parser, Subcommand, ValueEnum};
use holdfast_shared::{
    labels::ProtectionLabels,
    names::{API_GROUP, WEBHOOK_CONFIGURATION_NAME},
    policy::{ClusterIndex as _, Decision, DenialKind, Explanation, PolicyConfig, explain_delete},
    review::{AdmissionRequest, UserInfo},
    topology::Topology,
    webhookconfig::SETTINGS_ANNOTATION,
};
use holdfast_webhook::{
    metrics::Metrics,
    view::{DependentsMode, ViewOptions, WebhookView},
};
use k8s_openapi::{
    api::{
        authentication::v1::SelfSubjectReview,
        authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        },
    },
    apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList, APIVersions},
};
use kube::{
    Api, Client,
    api::{DynamicObject, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::Value;

mod check;
mod explain;
mod kcp;
use check::{api_resource, check};
use explain::{
    ApiResourceInfo, ObjectRef, WhyReport, delete_review, parse_settings, parse_target,
    render_check, render_why, resolve, why_report,
};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-holdfast",
    version,
    about = "Why a DELETE would be refused, and the posture of holdfast in a cluster"
)]
struct Cli {
    /// Kubeconfig to read (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, global = true)]
    context: Option<String>,
    /// API server URL, overriding the kubeconfig's (a kcp workspace:
    /// https://HOST/clusters/root:org).
    #[arg(long, global = true)]
    server: Option<String>,
    /// How long to wait for the policies and indexes to load, in seconds.
    #[arg(long, global = true, default_value_t = 30)]
    timeout: u64,
    /// Log what happens on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Why a DELETE of an object would be refused: KIND NAME or TYPE/NAME.
    Why {
        /// KIND NAME, or TYPE/NAME (TYPE: plural, singular, short name or kind,
        /// optionally .group).
        #[arg(required = true, num_args = 1..=2)]
        object: Vec<String>,
        /// Namespace of a namespaced object (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// The posture of the cluster: configuration, webhook, policies, gaps.
    Check {
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
    Yaml,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The plugin reads a Kubernetes cluster: `kcp.io/cluster` means nothing there.
    let _ = holdfast_shared::topology::set_process_topology(Topology::Kubernetes);
    if cli.verbose > 0 {
        let level = if cli.verbose > 1 { "debug" } else { "info" };
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(level))
            .with_writer(std::io::stderr)
            .try_init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!(
                "error: {}",
                holdfast_shared::report::one_line(e.chain().map(ToString::to_string))
            );
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let config = load_config(&cli).await?;
    let timeout = Duration::from_secs(cli.timeout);
    match cli.command {
        Command::Why {
            ref object,
            ref namespace,
            output,
        } => {
            let report = why(config, object, namespace.as_deref(), timeout).await?;
            print(output, &report, render_why)?;
            Ok(if report.allowed { 0 } else { 1 })
        }
        Command::Check { output } => {
            let report = check(config, timeout).await?;
            print(output, &report, render_check)?;
            Ok(if report.failed() { 1 } else { 0 })
        }
    }
}

fn print<T: serde::Serialize>(
    output: Output,
    report: &T,
    text: impl Fn(&T) -> String,
) -> anyhow::Result<()> {
    match output {
        Output::Text => print!("{}", terminal_safe(&text(report))),
        Output::Json => println!("{}", serde_json::to_string_pretty(report)?),
        Output::Yaml => print!(
            "{}",
            serde_saphyr::to_string(report).map_err(|e| anyhow!("yaml: {e}"))?
        ),
    }
    Ok(())
}

/// `text` fit for a terminal: names and values in it come from objects anyone
/// who may write them chose, so every control character but the line breaks of
/// the rendering is shown escaped (`\u{1b}`), never sent to the terminal as an
/// escape sequence.
fn terminal_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

async fn load_config(cli: &Cli) -> anyhow::Result<kube::Config> {
    let opts = KubeConfigOptions {
        context: cli.context.clone(),
        ..Default::default()
    };
    let mut config = match &cli.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!(holdfast_shared::kubeconfig::redacted(&e)))
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &opts).await?
        }
        None if cli.context.is_some() => kube::Config::from_kubeconfig(&opts).await?,
        None => kube::Config::infer()
            .await
            .context("no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a cluster")?,
    };
    if let Some(server) = &cli.server {
        config.cluster_url = server
            .parse()
            .map_err(|e| anyhow!("--server {server:?} is not a URL: {e}"))?;
    }
    Ok(config)
}

fn client(config: &kube::Config) -> anyhow::Result<Client> {
    Client::try_from(config.clone()).context("building the API client")
}

async fn get_json<T: serde::de::DeserializeOwned>(
    client: &Client,
    path: &str,
) -> anyhow::Result<T> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| anyhow!("request {path}: {e}"))?;
    client
        .request::<T>(req)
        .await
        .with_context(|| format!("reading {path}"))
}

/// Every resource the server serves, at each group's preferred version (core group
/// first), without subresources.
/// [`discover`] within what is left of `--timeout`.
async fn discover_by(
    client: &Client,
    deadline: Instant,
) -> anyhow::Result<(Vec<ApiResourceInfo>, Vec<String>)> {
    let left = deadline.saturating_duration_since(Instant::now());
    tokio::time::timeout(left, discover(client))
        .await
        .map_err(|_| anyhow!("discovery did not finish within --timeout"))?
}

async fn discover(client: &Client) -> anyhow::Result<(Vec<ApiResourceInfo>, Vec<String>)> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let core: APIVersions = get_json(client, "/api").await?;
    let mut lists = Vec::new();
    for v in core.versions {
        lists.push((String::new(), v.clone(), format!("/api/{v}")));
    }
    let groups: APIGroupList = get_json(client, "/apis").await?;
    for g in groups.groups {
        if let Some(v) = holdfast_webhook::view::discovery::preferred_version(&g) {
            lists.push((g.name.clone(), v.clone(), format!("/apis/{}/{v}", g.name)));
        }
    }
    for (group, version, path) in lists {
        let list: APIResourceList = match get_json(client, &path).await {
            Ok(l) => l,
            Err(e) => {
                problems.push(format!("{e:#}"));
                continue;
            }
        };
        for r in list.resources {
            if r.name.contains('/') {
                continue;
            }
            out.push(ApiResourceInfo {
                group: group.clone(),
                version: version.clone(),
                singular: if r.singular_name.is_empty() {
                    r.kind.to_ascii_lowercase()
                } else {
                    r.singular_name
                },
                resource: r.name,
                kind: r.kind,
                namespaced: r.namespaced,
                short_names: r.short_names.unwrap_or_default(),
            });
        }
    }
    Ok((out, problems))
}

/// The caller as the API server sees them.
async fn whoami(client: &Client) -> Result<UserInfo, String> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(|e| format!("SelfSubjectReview: {e}"))?;
    let info = review
        .status
        .and_then(|s| s.user_info)
        .ok_or("SelfSubjectReview answered without userInfo")?;
    Ok(UserInfo {
        username: info.username.unwrap_or_default(),
        uid: info.uid,
        groups: info.groups.unwrap_or_default(),
        extra: info.extra.and_then(|e| serde_json::to_value(e).ok()),
    })
}

/// Whether the caller may bypass protection in `namespace`.
async fn may_bypass(client: &Client, namespace: Option<&str>) -> Result<bool, String> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("bypass".to_string()),
                group: Some(API_GROUP.to_string()),
                resource: Some("protections".to_string()),
                namespace: namespace.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &review)
        .await
        .map_err(|e| format!("SelfSubjectAccessReview: {e}"))?
        .status
        .map(|s| s.allowed)
        .ok_or_else(|| "SelfSubjectAccessReview answered without status".to_string())
}

/// The settings the controller published (labels, strict), or the defaults with a
/// note saying why.
async fn settings(
    client: &Client,
    notes: &mut Vec<String>,
) -> (ProtectionLabels, bool, Option<Value>) {
    let api: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    match api.get_opt(WEBHOOK_CONFIGURATION_NAME).await {
        Ok(Some(c)) => {
            let annotation = c
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SETTINGS_ANNOTATION))
                .cloned();
            let json = serde_json::to_value(&c).ok();
            match annotation.map(|a| parse_settings(&a)) {
                Some(Ok((labels, strict))) => (labels, strict, json),
                Some(Err(e)) => {
                    notes.push(format!("{e}; judging with the default label settings"));
                    (ProtectionLabels::default(), false, json)
                }
                None => {
                    notes.push(format!(
                        "the configuration {WEBHOOK_CONFIGURATION_NAME} carries no \
                         {SETTINGS_ANNOTATION}; judging with the default label settings"
                    ));
                    (ProtectionLabels::default(), false, json)
                }
            }
        }
        Ok(None) => {
            notes.push(format!(
                "no configuration {WEBHOOK_CONFIGURATION_NAME}: holdfast is not installed \
                 here, nothing would refuse the DELETE; judged with the default settings"
            ));
            (ProtectionLabels::default(), false, None)
        }
        Err(e) => {
            notes.push(format!(
                "cannot read the configuration {WEBHOOK_CONFIGURATION_NAME} ({e}); judging \
                 with the default label settings"
            ));
            (ProtectionLabels::default(), false, None)
        }
    }
}

/// The webhook's view of the cluster, read with the caller's credentials, once its
/// policies have loaded (or the deadline passed).
/// The configuration to judge with (`labels`, `strict`) and the webhook's own view
/// of the cluster, with the sender that stops its watches.
async fn open_judge(
    config: kube::Config,
    labels: &ProtectionLabels,
    strict: bool,
    deadline: Instant,
) -> anyhow::Result<(PolicyConfig, Arc<WebhookView>, tokio_util::sync::DropGuard)> {
    // Dropped (the judge done, or an error here): the view's tasks stop.
    let stop = tokio_util::sync::CancellationToken::new();
    let stop_guard = stop.clone().drop_guard();
    let view = open_view(config, labels, deadline, stop).await?;
    let cfg = PolicyConfig {
        labels: labels.clone(),
        strict,
        ..PolicyConfig::default()
    };
    Ok((cfg, view, stop_guard))
}

async fn open_view(
    config: kube::Config,
    labels: &ProtectionLabels,
    deadline: Instant,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<Arc<WebhookView>> {
    let metrics = Metrics::new().map_err(|e| anyhow!("metrics: {e}"))?;
    let view = WebhookView::with_config(
        ViewOptions {
            virtual_workspace_kubeconfig: None,
            topology: Topology::Kubernetes,
            kubeconfig: None,
            label_only: false,
            mode: DependentsMode::Live,
            label_keys: labels.iter().map(|l| l.key.clone()).collect(),
            apiexport: String::new(),
            cascading_keys: labels
                .iter()
                .filter(|l| l.protects(holdfast_shared::names::CASCADING_VALUE))
                .map(|l| l.key.clone())
                .collect(),
        },
        config,
        metrics,
    );
    view.start(stop);
    // Loaded: the policies and the CRDs listed, then one whole pass of the store
    // manager after that (every store they need started; each reports its sync).
    while Instant::now() < deadline
        && !(view.policies_loaded() && view.crds_listed() && view.discovery_problem().is_none())
    {
        tokio::time::sleep(LOAD_POLL).await;
    }
    let passes = view.store_passes();
    for more in 1..=2 {
        view.wake_stores();
        while Instant::now() < deadline && view.store_passes() < passes + more {
            tokio::time::sleep(LOAD_POLL / 2).await;
        }
    }
    Ok(view)
}

/// How often the view's loading is checked while the plugin waits for it.
const LOAD_POLL: Duration = Duration::from_millis(100);
/// How long an explanation that still waits on something loading waits to be asked again.
const EXPLAIN_RETRY: Duration = Duration::from_millis(200);
/// How long `check` waits for a TCP connection to the webhook.
const REACH_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether an explanation still waits on something loading (retry until the deadline).
fn unsettled(e: &Explanation) -> bool {
    matches!(&e.evaluation.decision, Decision::Deny(d)
        if matches!(d.kind, DenialKind::LookupFailed | DenialKind::NotReady))
        || e.findings.iter().any(|f| f.lookup_failed)
}

async fn explain_until(
    req: &AdmissionRequest,
    cfg: &PolicyConfig,
    view: &WebhookView,
    deadline: Instant,
) -> Explanation {
    loop {
        let e = explain_delete(req, cfg, view, chrono::Utc::now()).await;
        if !unsettled(&e) || Instant::now() >= deadline {
            return e;
        }
        tokio::time::sleep(EXPLAIN_RETRY).await;
    }
}

async fn why(
    config: kube::Config,
    object: &[String],
    namespace: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<WhyReport> {
    let deadline = Instant::now() + timeout;
    let (ty, name) = parse_target(object)?;
    let client = client(&config)?;
    let (resources, problems) = discover_by(&client, deadline).await?;
    let res = match resolve(&resources, &ty) {
        Ok(r) => r.clone(),
        Err(e) if problems.is_empty() => bail!("{e}"),
        Err(e) => bail!("{e} (discovery was incomplete: {})", problems.join("; ")),
    };
    let ar = api_resource(&res);
    let ns = namespace
        .map(str::to_string)
        .unwrap_or_else(|| config.default_namespace.clone());
    let api: Api<DynamicObject> = if res.namespaced {
        Api::namespaced_with(client.clone(), &ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let live = api.get(&name).await.map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 404 => {
            anyhow!("{} {name:?} not found", ar.plural)
        }
        _ => anyhow!("reading {} {name}: {e}", ar.plural),
    })?;
    let object = serde_json::to_value(&live).context("the object")?;
    let mut notes = Vec::new();
    let user = match whoami(&client).await {
        Ok(u) => u,
        Err(e) => {
            notes.push(format!(
                "the caller is unknown ({e}); judged as an anonymous user"
            ));
            UserInfo::default()
        }
    };
    if let Some(ws) = kcp::Workspace::of(&config.cluster_url) {
        if res.group == "tenancy.kcp.io" && res.resource == "workspaces" {
            return Ok(kcp::why_workspace(
                &config,
                &ws,
                &object,
                (user.username, user.groups),
                deadline,
            )
            .await);
        }
        match kcp::why_notes(&client, &ws).await {
            Some(more) => notes.extend(more),
            None => {
                notes.push(format!(
                    "workspace {} binds no APIExport {API_GROUP}: nothing of holdfast's \
                     judges a DELETE in it",
                    ws.path
                ));
                let target = target_of(&res, namespace_of(&res, &ns), name);
                return Ok(kcp::unjudged(target, (user.username, user.groups), notes));
            }
        }
    }
    let (labels, strict, _) = settings(&client, &mut notes).await;
    let (cfg, view, stop_tx) = open_judge(config, &labels, strict, deadline).await?;
    if !view.policies_loaded() {
        notes.push(
            "the policy objects did not load in time (may you list and watch them?)".to_string(),
        );
    }
    let req = delete_review(&res, object, user.clone());
    let explanation = explain_until(&req, &cfg, &view, deadline).await;
    let strict = cfg.strict || view.strict_for(&req);
    drop(stop_tx);
    let bypass_ns = if res.namespaced {
        Some(ns.as_str())
    } else {
        None
    };
    let may = may_bypass(&client, bypass_ns).await;
    let target = target_of(&res, namespace_of(&res, &ns), name);
    Ok(why_report(
        target,
        (user.username, user.groups),
        explanation,
        may,
        strict,
        notes,
    ))
}

fn namespace_of(res: &ApiResourceInfo, ns: &str) -> Option<String> {
    res.namespaced.then(|| ns.to_string())
}

fn target_of(res: &ApiResourceInfo, namespace: Option<String>, name: String) -> ObjectRef {
    ObjectRef {
        api_version: res.api_version(),
        kind: res.kind.clone(),
        resource: if res.group.is_empty() {
            res.resource.clone()
        } else {
            format!("{}.{}", res.resource, res.group)
        },
        namespace,
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    /// An API server that accepts connections and never answers: discovery gives
    /// up at --timeout instead of hanging.
    #[tokio::test]
    async fn discovery_keeps_to_the_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url: http::Uri = format!("http://{}", listener.local_addr().expect("addr"))
            .parse()
            .expect("url");
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                open.push(conn);
            }
        });
        let client = Client::try_from(kube::Config::new(url)).expect("client");
        let started = Instant::now();
        let err = discover_by(&client, started + Duration::from_millis(300))
            .await
            .expect_err("a silent server is no discovery");
        assert_eq!(err.to_string(), "discovery did not finish within --timeout");
        held.abort();
    }

    #[test]
    fn text_output_sends_no_escape_sequence_to_the_terminal() {
        assert_eq!(
            terminal_safe("ConfigMap a/\u{1b}[2Jx\r\nblocked by b\tc\n"),
            "ConfigMap a/\\u{1b}[2Jx\\r\nblocked by b\\tc\n"
        );
        assert_eq!(terminal_safe("plain ünïcode\n"), "plain ünïcode\n");
    }

    #[test]
    fn the_command_line_parses() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "kubectl-holdfast",
            "why",
            "cm",
            "x",
            "-n",
            "shop",
            "-o",
            "yaml",
        ])
        .expect("parses");
        match cli.command {
            Command::Why {
                object,
                namespace,
                output,
            } => {
                assert_eq!(object, ["cm", "x"]);
                assert_eq!(namespace.as_deref(), Some("shop"));
                assert_eq!(output, Output::Yaml);
            }
            Command::Check { .. } => panic!("not check"),
        }
        let cli = Cli::try_parse_from([
            "kubectl-holdfast",
            "check",
            "--server",
            "https://h/clusters/root:a",
            "-vv",
        ])
        .expect("parses");
        assert_eq!(cli.server.as_deref(), Some("https://h/clusters/root:a"));
        assert_eq!(cli.verbose, 2);
        for bad in [
            &["kubectl-holdfast", "why"][..],
            &["kubectl-holdfast", "why", "a", "b", "c"],
            &["kubectl-holdfast", "check", "-o", "xml"],
            &["kubectl-holdfast", "explain"],
        ] {
            let e = Cli::try_parse_from(bad).expect_err("refused");
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
    }
}
