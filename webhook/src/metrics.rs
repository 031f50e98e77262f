//! Prometheus metrics of the webhook.

use holdfast_shared::review::Operation;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, core::Collector,
};
use std::sync::{Arc, OnceLock};

/// Every metric the webhook exports.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Read by [`Metrics::render`] only: without the server (the plugin) nothing
    /// serves the metrics, which are still counted.
    #[cfg_attr(not(feature = "server"), expect(dead_code))]
    registry: Registry,
    /// Admission requests by operation, decision and decider.
    pub requests: IntCounterVec,
    /// Time to answer a review, by operation.
    pub latency: HistogramVec,
    /// Requests refused before review (bad body, too large, wrong method...).
    pub rejected: IntCounterVec,
    /// Certificate reloads by result.
    pub tls_reloads: IntCounterVec,
    /// 1 when ready to serve.
    pub ready: IntGauge,
    /// Policy objects in the registry, by kind.
    pub registry_size: IntGaugeVec,
    /// References held by the dependents index.
    pub index_references: IntGauge,
    /// Dependent resources the dependents index watches.
    pub index_resources: IntGauge,
    /// Of those, the ones whose watch is not synced (lookups go live meanwhile).
    pub index_unsynced: IntGauge,
    /// Dependents lookups by source (index, live, failed).
    pub dependents_lookups: IntCounterVec,
    /// Decisions that Audit-mode policies would have denied.
    pub audited: IntCounterVec,
    /// Connections closed by the server, by listener and reason.
    pub closed: IntCounterVec,
    /// Events by outcome: published, limited, dropped, failed.
    pub events: IntCounterVec,
    /// Per-logical-cluster API clients held (kcp).
    pub cluster_clients: IntGauge,
    /// 1 per resource the webhook's identity may not list (403); a resource it may
    /// list has no series (see [`Metrics::set_unreadable`]).
    unreadable: IntGaugeVec,
    /// Handles of the series every review updates, looked up once.
    hot: Arc<Hot>,
}

/// The operations a review can carry, in [`Operation`] order.
const OPERATIONS: [Operation; 4] = [
    Operation::Create,
    Operation::Update,
    Operation::Delete,
    Operation::Connect,
];

/// The decisions of `admission_requests_total`.
const DECISIONS: [&str; 3] = ["allow", "warn", "deny"];

/// The deciders of `admission_requests_total`
/// ([`holdfast_shared::policy::Decider::metric_decider`]): the mechanisms, then the
/// policy kinds.
const DECIDERS: [&str; 16] = [
    "none",
    "label",
    "strict",
    "break-glass",
    "break-glass-authorized",
    "not-ready",
    "unreadable",
    "deferred",
    "eviction",
    "containment",
    "warn",
    "audit",
    "ResourceProtection",
    "DependencyRule",
    "CriticalService",
    "AnchorRule",
];

/// The outcomes of `events_total`.
const EVENT_OUTCOMES: [&str; 5] = ["queued", "published", "limited", "dropped", "failed"];

/// Series handles, each created (and so exported) on its first use as
/// `with_label_values` would, then reused: no label hashing, map lock or handle
/// clone on the request.
#[derive(Debug, Default)]
struct Hot {
    latency: [OnceLock<Histogram>; OPERATIONS.len()],
    requests: [[[OnceLock<IntCounter>; DECIDERS.len()]; DECISIONS.len()]; OPERATIONS.len()],
    events: [OnceLock<IntCounter>; EVENT_OUTCOMES.len()],
}

fn op_index(op: Operation) -> usize {
    match op {
        Operation::Create => 0,
        Operation::Update => 1,
        Operation::Delete => 2,
        Operation::Connect => 3,
    }
}

/// Registers `metric` in `registry` and returns it.
fn register<M: Collector + Clone + 'static>(
    registry: &Registry,
    metric: Result<M, prometheus::Error>,
) -> Result<M, prometheus::Error> {
    let metric = metric?;
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

impl Metrics {
    /// Sets whether `resource` may not be listed: a series of 1 while it may not, none
    /// once it may (the series of every type read would grow with the fleet: one per
    /// dependent type of every provider's rules).
    pub fn set_unreadable(&self, resource: &str, unreadable: bool) {
        if unreadable {
            self.unreadable.with_label_values(&[resource]).set(1);
        } else {
            // Absent already is the same answer.
            let _ = self.unreadable.remove_label_values(&[resource]);
        }
    }

    /// Whether `unreadable_resources` holds a series for `resource` (its value is
    /// always 1).
    #[cfg(test)]
    pub fn unreadable_series(&self, resource: &str) -> bool {
        self.unreadable
            .collect()
            .iter()
            .flat_map(|f| f.get_metric())
            .any(|m| m.get_label().iter().any(|l| l.value() == resource))
    }

    /// Creates and registers the metrics.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("holdfast_webhook".to_string()), None)?;
        let r = &registry;
        let counters = |name: &str, help: &str, labels: &[&str]| {
            register(r, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            register(r, IntGaugeVec::new(Opts::new(name, help), labels))
        };
        let gauge = |name: &str, help: &str| register(r, IntGauge::new(name, help));
        Ok(Self {
            unreadable: gauges(
                "unreadable_resources",
                "1 for a resource the webhook needs but may not list (403 from the API \
                 server); the series goes once it can.",
                &["resource"],
            )?,
            closed: counters(
                "connections_closed_total",
                "Connections the server closed, by listener and reason: connection_limit, \
                 first_request_timeout, idle, max_age, handshake_timeout.",
                &["listener", "reason"],
            )?,
            events: counters(
                "events_total",
                "Kubernetes Events, by outcome: queued, published, limited (rate limit), \
                 dropped (queue full), failed.",
                &["outcome"],
            )?,
            cluster_clients: gauge(
                "cluster_clients",
                "API clients held for logical clusters (kcp), bounded.",
            )?,
            registry_size: gauges(
                "registry_policies",
                "Policy objects in the registry, by kind.",
                &["kind"],
            )?,
            index_references: gauge(
                "dependents_index_references",
                "References held by the dependents index.",
            )?,
            index_resources: gauge(
                "dependents_index_resources",
                "Dependent resources the dependents index watches.",
            )?,
            index_unsynced: gauge(
                "dependents_index_unsynced",
                "Dependent resources whose watch is not synced (their lookups are live).",
            )?,
            dependents_lookups: counters(
                "dependents_lookups_total",
                "Dependents lookups by source: index, live, failed.",
                &["source"],
            )?,
            audited: counters(
                "audited_total",
                "Deletions that Audit-mode policies would have denied, by operation.",
                &["operation"],
            )?,
            requests: counters(
                "admission_requests_total",
                "Admission reviews answered, by operation, decision (allow, warn, deny) \
                 and decider: the mechanism (label, strict, break-glass, not-ready, ...) \
                 or the kind of the deciding policy object.",
                &["operation", "decision", "decider"],
            )?,
            latency: register(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "admission_duration_seconds",
                        "Time from a complete request body to the written verdict.",
                    )
                    .buckets(vec![
                        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
                        0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    ]),
                    &["operation"],
                ),
            )?,
            rejected: counters(
                "http_rejected_total",
                "HTTP requests refused before review, by reason.",
                &["reason"],
            )?,
            tls_reloads: counters(
                "tls_reloads_total",
                "Serving certificate reloads, by result.",
                &["result"],
            )?,
            ready: gauge("ready", "1 when the webhook reports ready.")?,
            registry,
            hot: Arc::default(),
        })
    }

    /// Counts one review of `op` answered with `decision` (`allow`, `warn`, `deny`),
    /// decided by `decider` (bounded: a mechanism or a policy kind).
    pub fn count_review(&self, op: Operation, decision: &str, decider: &str) {
        let cached = DECISIONS
            .iter()
            .position(|d| *d == decision)
            .zip(DECIDERS.iter().position(|d| *d == decider));
        match cached {
            Some((d, p)) => self.hot.requests[op_index(op)][d][p]
                .get_or_init(|| {
                    self.requests
                        .with_label_values(&[op.as_str(), DECISIONS[d], DECIDERS[p]])
                })
                .inc(),
            None => self
                .requests
                .with_label_values(&[op.as_str(), decision, decider])
                .inc(),
        }
    }

    /// Records how long a review of `op` took.
    pub fn observe_review(&self, op: Operation, seconds: f64) {
        self.hot.latency[op_index(op)]
            .get_or_init(|| self.latency.with_label_values(&[op.as_str()]))
            .observe(seconds);
    }

    /// Counts one Event with `outcome` (`queued`, `published`, `limited`, `dropped`,
    /// `failed`).
    pub fn count_event(&self, outcome: &str) {
        match EVENT_OUTCOMES.iter().position(|o| *o == outcome) {
            Some(i) => self.hot.events[i]
                .get_or_init(|| self.events.with_label_values(&[EVENT_OUTCOMES[i]]))
                .inc(),
            None => self.events.with_label_values(&[outcome]).inc(),
        }
    }

    /// The text exposition of every metric (what the probe listener serves).
    #[cfg(feature = "server")]
    pub fn render(&self) -> String {
        holdfast_shared::runtime::admin::render(&self.registry)
    }
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(series))
    }

    #[test]
    fn cached_series_count_as_labelled_ones_and_appear_on_first_use() {
        let m = Metrics::new().expect("metrics");
        let deny = r#"holdfast_webhook_admission_requests_total{decider="label",decision="deny",operation="DELETE"}"#;
        let policy = r#"holdfast_webhook_admission_requests_total{decider="ResourceProtection",decision="deny",operation="DELETE"}"#;
        let limited = r#"holdfast_webhook_events_total{outcome="limited"}"#;
        let latency = r#"holdfast_webhook_admission_duration_seconds_count{operation="DELETE"}"#;
        let text = m.render();
        for series in [deny, policy, limited, latency] {
            assert_eq!(line(&text, series), None, "{series} before any use");
        }
        m.count_review(Operation::Delete, "deny", "label");
        m.count_review(Operation::Delete, "deny", "label");
        m.count_review(Operation::Delete, "deny", "ResourceProtection");
        m.count_event("limited");
        m.observe_review(Operation::Delete, 0.001);
        m.observe_review(Operation::Delete, 0.002);
        // The cached handle and a lookup by labels reach the same series.
        m.requests
            .with_label_values(&["DELETE", "deny", "label"])
            .inc();
        m.events.with_label_values(&["limited"]).inc();
        let text = m.render();
        assert_eq!(line(&text, deny), Some(format!("{deny} 3").as_str()));
        assert_eq!(line(&text, policy), Some(format!("{policy} 1").as_str()));
        assert_eq!(line(&text, limited), Some(format!("{limited} 2").as_str()));
        assert_eq!(line(&text, latency), Some(format!("{latency} 2").as_str()));
        // A clone shares the handles and the counts.
        m.clone().count_review(Operation::Delete, "deny", "label");
        assert_eq!(line(&m.render(), deny), Some(format!("{deny} 4").as_str()));
    }
}
