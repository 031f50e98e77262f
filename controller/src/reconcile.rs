//! The reconcile loop both topologies share, its backoff, its typed errors and
//! its metrics.
//!
//! A pass runs when a watched object changes, when the install options change
//! (a new CA bundle), and at the latest after the topology's idle wait (the
//! resync period). A failed pass is retried after an exponential backoff
//! ([`backoff`]: from [`BACKOFF_INITIAL`], doubling, capped at
//! [`BACKOFF_MAX`], each delay jittered within the upper half of its nominal
//! one), reset by the next successful pass. Every pass is counted
//! and timed, every failure counted by [`ReconcileError::metric_label`].

use std::{
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use holdfast_shared::{backoff::ExponentialBackoff, webhookconfig::InstallOptions};
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use tokio::sync::{Notify, watch};

/// First retry delay after a failed pass.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(250);

/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// A burst of events settles this long into one pass.
pub const SETTLE: Duration = Duration::from_millis(10);

/// Why a reconcile pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Creating or updating the ValidatingWebhookConfiguration failed
    /// (Kubernetes); said with all its causes on one line.
    #[error("{source:#}")]
    Configuration {
        /// Why.
        #[source]
        source: anyhow::Error,
    },
    /// Writing the status of one or more policies failed (Kubernetes): each was
    /// logged as it failed, the error counts them.
    #[error("{} status update(s) failed", failed.len())]
    Status {
        /// Which policies, each with its error.
        failed: Vec<Failure>,
    },
    /// What failed in a kcp pass: workspaces' configurations and policies'
    /// statuses, in the order the pass met them, said one after the other.
    #[error("{}", Joined(failed))]
    Pass {
        /// Which workspaces and policies, each with its error (never empty).
        failed: Vec<Failure>,
    },
}

impl ReconcileError {
    /// The `error` label of `reconcile_errors_total`: `configuration` when some
    /// configuration failed, else `status`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Configuration { .. } => "configuration",
            ReconcileError::Status { .. } => "status",
            ReconcileError::Pass { failed } => match failed.iter().any(Failure::is_configuration) {
                true => "configuration",
                false => "status",
            },
        }
    }
}

/// One thing a pass failed to write, and why.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The configuration `holdfast` of a kcp workspace.
    #[error("{cluster}: {source:#}")]
    Workspace {
        /// Its logical cluster.
        cluster: String,
        /// Why.
        #[source]
        source: anyhow::Error,
    },
    /// The configuration `holdfast` of the holdfast workspace (said without its
    /// causes).
    #[error("holdfast workspace {cluster}: {source}")]
    HoldfastWorkspace {
        /// Its logical cluster.
        cluster: String,
        /// Why.
        #[source]
        source: anyhow::Error,
    },
    /// Workspace containment's configuration (said without its causes).
    #[error(
        "workspace {path}: ValidatingWebhookConfiguration {}: {source}",
        holdfast_shared::workspaces::CONFIGURATION_NAME
    )]
    Containment {
        /// The path of the workspace it is kept in.
        path: String,
        /// Why.
        #[source]
        source: anyhow::Error,
    },
    /// The status of a DependencyRule on kcp.
    #[error("status of {key}: {source:#}")]
    RuleStatus {
        /// `<logical cluster>/<name>`.
        key: String,
        /// Why.
        #[source]
        source: anyhow::Error,
    },
    /// The status of a policy of another kind, or of any kind on Kubernetes.
    #[error("status of {kind} {key}: {source:#}")]
    PolicyStatus {
        /// Its kind.
        kind: String,
        /// Its name (on kcp, `<logical cluster>/<name>`).
        key: String,
        /// Why.
        #[source]
        source: anyhow::Error,
    },
}

impl Failure {
    /// Whether a configuration failed (not a status).
    pub fn is_configuration(&self) -> bool {
        match self {
            Failure::Workspace { .. }
            | Failure::HoldfastWorkspace { .. }
            | Failure::Containment { .. } => true,
            Failure::RuleStatus { .. } | Failure::PolicyStatus { .. } => false,
        }
    }
}

/// Failures said one after the other, separated by `; `.
struct Joined<'a>(&'a [Failure]);

impl std::fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, failure) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{failure}")?;
        }
        Ok(())
    }
}

/// The controller's metrics (prefix `holdfast_controller_`).
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// Reconcile passes run.
    pub reconciles: IntCounter,
    /// Failed passes, by [`ReconcileError::metric_label`].
    pub errors: IntCounterVec,
    /// Time a pass takes.
    pub duration: Histogram,
    /// 1 while the API server refuses the configuration `holdfast`.
    pub configuration_refused: IntGauge,
    /// Policy objects by kind and the reason of their Ready condition.
    pub policies: IntGaugeVec,
    /// 1 while the backstop is wanted but not installed.
    pub backstop_missing: IntGauge,
}

impl Metrics {
    /// Creates and registers the metrics.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("holdfast_controller".to_string()), None)?;
        let reconciles = IntCounter::new("reconcile_total", "Reconcile passes run.")?;
        let errors = IntCounterVec::new(
            Opts::new(
                "reconcile_errors_total",
                "Failed reconcile passes, by error: configuration, status.",
            ),
            &["error"],
        )?;
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "reconcile_duration_seconds",
                "Time a reconcile pass takes, failed ones included.",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        let configuration_refused = IntGauge::new(
            "configuration_refused",
            "1 while the API server refuses the ValidatingWebhookConfiguration holdfast (the policies it would route say so in their conditions).",
        )?;
        let policies = IntGaugeVec::new(
            Opts::new(
                "policies",
                "Policy objects by kind and the reason of their Ready condition: Enforced \
                 when Ready, else why not (Invalid, NotInstalled, ConfigurationRefused, \
                 NotAdmissionControlled, NotEnforcedYet, Source*, ...).",
            ),
            &["kind", "reason"],
        )?;
        let backstop_missing = IntGauge::new(
            "backstop_missing",
            "1 while the backstop ValidatingAdmissionPolicy holdfast-backstop is wanted \
             (--backstop) but not installed: the API server does not serve \
             ValidatingAdmissionPolicies, or refused or failed writing it.",
        )?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(configuration_refused.clone()))?;
        registry.register(Box::new(policies.clone()))?;
        registry.register(Box::new(backstop_missing.clone()))?;
        Ok(Self {
            registry,
            reconciles,
            errors,
            duration,
            configuration_refused,
            policies,
            backstop_missing,
        })
    }

    /// Sets `policies` to the count of each `(kind, Ready reason)` in `policies`,
    /// dropping the series of pairs no policy has any more.
    pub fn set_policies<'a>(&self, policies: impl IntoIterator<Item = (&'a str, String)>) {
        let mut counts: std::collections::BTreeMap<(&str, String), i64> = Default::default();
        for p in policies {
            *counts.entry(p).or_default() += 1;
        }
        self.policies.reset();
        for ((kind, reason), n) in counts {
            self.policies.with_label_values(&[kind, &reason]).set(n);
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        holdfast_shared::runtime::admin::render(&self.registry)
    }

    fn observe(&self, started: Instant, result: &Result<(), ReconcileError>) {
        self.reconciles.inc();
        self.duration.observe(started.elapsed().as_secs_f64());
        if let Err(e) = result {
            self.errors.with_label_values(&[e.metric_label()]).inc();
        }
    }
}

/// The reconcile loop's retry delays: [`BACKOFF_INITIAL`], doubling, at most
/// [`BACKOFF_MAX`], back to the first after a successful pass.
pub fn backoff() -> ExponentialBackoff {
    ExponentialBackoff::new(BACKOFF_INITIAL, BACKOFF_MAX)
}

/// What starts a pass besides the idle wait.
pub struct Triggers {
    /// Woken when a watched object changes.
    pub notify: Arc<Notify>,
    /// The install options (a change starts a pass).
    pub options: watch::Receiver<InstallOptions>,
}

impl Triggers {
    /// Wakes on `notify` and on changes of `options`.
    pub fn new(notify: &Arc<Notify>, options: &watch::Receiver<InstallOptions>) -> Self {
        Self {
            notify: notify.clone(),
            options: options.clone(),
        }
    }
}

/// One topology's reconciler, as the loop drives it.
pub trait Reconcile: Send {
    /// Topology name in logs.
    const TOPOLOGY: &'static str;

    /// What starts a pass.
    fn triggers(&self) -> Triggers;

    /// Longest wait for an event before a pass anyway.
    fn idle_wait(&self) -> Duration;

    /// The idle wait elapsed without an event: forget what a resync re-reads.
    fn on_resync(&mut self);

    /// One pass: computes the desired state from scratch and writes it.
    fn reconcile(&mut self) -> impl Future<Output = Result<(), ReconcileError>> + Send;
}

/// Runs passes of `r` until `shutdown` turns true; `ready` is set after the
/// first successful pass.
pub async fn run<R: Reconcile>(
    r: &mut R,
    metrics: &Metrics,
    ready: &AtomicBool,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let Triggers {
        notify,
        mut options,
    } = r.triggers();
    let mut backoff = backoff();
    let mut retry = false;
    loop {
        if !retry {
            tokio::select! {
                () = notify.notified() => {}
                _ = options.changed() => {}
                () = tokio::time::sleep(r.idle_wait()) => r.on_resync(),
                _ = shutdown.cancelled() => return,
            }
            // Let a burst of events settle into one pass.
            tokio::time::sleep(SETTLE).await;
        }
        if shutdown.is_cancelled() {
            return;
        }
        let started = Instant::now();
        let result = r.reconcile().await;
        metrics.observe(started, &result);
        // "kcp reconcile pass elapsed_ms=N": hack/bench-controller.sh reads these.
        tracing::debug!(
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "{} reconcile pass",
            R::TOPOLOGY
        );
        match result {
            Ok(()) => {
                retry = false;
                backoff.reset();
                ready.store(true, Ordering::SeqCst);
            }
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    topology = R::TOPOLOGY,
                    error = %e,
                    kind = e.metric_label(),
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "reconcile failed; retrying"
                );
                retry = true;
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let mut b = backoff();
        let delays: Vec<u128> = (0..8)
            .map(|_| {
                let nominal = b.nominal().as_millis();
                b.next_delay();
                nominal
            })
            .collect();
        assert_eq!(
            delays,
            vec![250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000]
        );
        for _ in 0..100 {
            b.next_delay();
        }
        assert_eq!(b.nominal(), BACKOFF_MAX);
        b.reset();
        assert_eq!(b.nominal(), BACKOFF_INITIAL);
    }

    /// Plays a script of results, reporting each pass on a channel.
    struct Script {
        notify: Arc<Notify>,
        options: watch::Sender<InstallOptions>,
        results: VecDeque<Result<(), ReconcileError>>,
        passes: tokio::sync::mpsc::UnboundedSender<bool>,
    }

    impl Reconcile for Script {
        const TOPOLOGY: &'static str = "test";
        fn triggers(&self) -> Triggers {
            Triggers::new(&self.notify, &self.options.subscribe())
        }
        fn idle_wait(&self) -> Duration {
            Duration::from_secs(3600)
        }
        fn on_resync(&mut self) {}
        async fn reconcile(&mut self) -> Result<(), ReconcileError> {
            let result = self.results.pop_front().unwrap_or(Ok(()));
            let _ = self.passes.send(result.is_ok());
            result
        }
    }

    #[test]
    fn policies_are_counted_by_kind_and_ready_reason_and_stale_pairs_dropped() {
        let m = Metrics::new().expect("metrics");
        let rp = "ResourceProtection";
        m.set_policies([
            (rp, "Enforced".to_string()),
            (rp, "Enforced".to_string()),
            (rp, "ConfigurationRefused".to_string()),
            ("AnchorRule", "Invalid".to_string()),
        ]);
        let get = |kind: &str, reason: &str| m.policies.with_label_values(&[kind, reason]).get();
        assert_eq!(get(rp, "Enforced"), 2);
        assert_eq!(get(rp, "ConfigurationRefused"), 1);
        assert_eq!(get("AnchorRule", "Invalid"), 1);
        m.set_policies([(rp, "Enforced".to_string())]);
        let text = m.render();
        assert!(
            text.contains(
                "holdfast_controller_policies{kind=\"ResourceProtection\",reason=\"Enforced\"} 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("ConfigurationRefused\"}"), "{text}");
        assert!(!text.contains("AnchorRule"), "{text}");
    }

    #[test]
    fn failures_are_said_as_ever_and_labelled_by_what_failed() {
        let why = || anyhow::anyhow!("refused").context("patch failed");
        let failed = vec![
            Failure::Workspace {
                cluster: "lc1".into(),
                source: why(),
            },
            Failure::HoldfastWorkspace {
                cluster: "hf".into(),
                source: why(),
            },
            Failure::Containment {
                path: "root".into(),
                source: why(),
            },
            Failure::RuleStatus {
                key: "lc2/r".into(),
                source: why(),
            },
            Failure::PolicyStatus {
                kind: "AnchorRule".into(),
                key: "lc2/a".into(),
                source: why(),
            },
        ];
        let e = ReconcileError::Pass { failed };
        assert_eq!(
            e.to_string(),
            format!(
                "lc1: patch failed: refused; holdfast workspace hf: patch failed; workspace root: \
                 ValidatingWebhookConfiguration {}: patch failed; status of lc2/r: patch failed: \
                 refused; status of AnchorRule lc2/a: patch failed: refused",
                holdfast_shared::workspaces::CONFIGURATION_NAME
            )
        );
        assert_eq!(e.metric_label(), "configuration");
        let statuses = ReconcileError::Pass {
            failed: vec![Failure::RuleStatus {
                key: "lc2/r".into(),
                source: why(),
            }],
        };
        assert_eq!(statuses.metric_label(), "status");
        let counted = ReconcileError::Status {
            failed: (0..2)
                .map(|i| Failure::PolicyStatus {
                    kind: "ResourceProtection".into(),
                    key: format!("p{i}"),
                    source: why(),
                })
                .collect(),
        };
        assert_eq!(counted.to_string(), "2 status update(s) failed");
        assert_eq!(counted.metric_label(), "status");
        let configuration = ReconcileError::Configuration { source: why() };
        assert_eq!(configuration.to_string(), "patch failed: refused");
        assert_eq!(configuration.metric_label(), "configuration");
        let source = std::error::Error::source(&configuration).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("patch failed"));
    }

    #[tokio::test]
    async fn failures_are_retried_counted_by_kind_and_timed() {
        let metrics = Metrics::new().expect("metrics");
        let (passes_tx, mut passes) = tokio::sync::mpsc::unbounded_channel();
        let mut script = Script {
            notify: Arc::new(Notify::new()),
            options: watch::Sender::new(InstallOptions {
                target: holdfast_shared::webhookconfig::WebhookTarget::Url(
                    "https://h/validate".into(),
                ),
                ca_bundle: Vec::new(),
                failure_policy: Default::default(),
                timeout_seconds: 10,
            }),
            results: VecDeque::from([
                Err(ReconcileError::Status {
                    failed: vec![Failure::PolicyStatus {
                        kind: "ResourceProtection".into(),
                        key: "a".into(),
                        source: anyhow::anyhow!("forbidden"),
                    }],
                }),
                Err(ReconcileError::Configuration {
                    source: anyhow::anyhow!("conflict"),
                }),
                Ok(()),
            ]),
            passes: passes_tx,
        };
        let notify = script.notify.clone();
        let ready = Arc::new(AtomicBool::new(false));
        let stop = tokio_util::sync::CancellationToken::new();
        let (m, r, stop_clone) = (metrics.clone(), ready.clone(), stop.clone());
        let driver = tokio::spawn(async move { run(&mut script, &m, &r, stop_clone).await });
        notify.notify_one();
        let deadline = Duration::from_secs(30);
        let mut seen = Vec::new();
        while seen.last() != Some(&true) {
            match tokio::time::timeout(deadline, passes.recv()).await {
                Ok(Some(ok)) => seen.push(ok),
                other => panic!("no pass within 30s after {seen:?}: {other:?}"),
            }
        }
        // Two failures retried without any event, then a success.
        assert_eq!(seen, vec![false, false, true]);
        stop.cancel();
        tokio::time::timeout(deadline, driver)
            .await
            .expect("the loop stops on shutdown")
            .expect("no panic");
        assert!(ready.load(Ordering::SeqCst));
        assert_eq!(metrics.reconciles.get(), 3);
        assert_eq!(metrics.duration.get_sample_count(), 3);
        assert_eq!(metrics.errors.with_label_values(&["status"]).get(), 1);
        assert_eq!(
            metrics.errors.with_label_values(&["configuration"]).get(),
            1
        );
        let text = metrics.render();
        for line in [
            "holdfast_controller_reconcile_total 3",
            "holdfast_controller_reconcile_errors_total{error=\"configuration\"} 1",
            "holdfast_controller_reconcile_errors_total{error=\"status\"} 1",
            "holdfast_controller_reconcile_duration_seconds_count 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in:\n{text}");
        }
    }
}
