//! Prometheus metrics of the webhook.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Every metric the webhook exports.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// Admission requests by operation, decision and policy.
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
    /// 1 when the dependents index of a resource is synced.
    pub index_synced: IntGaugeVec,
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
    /// 1 per resource the webhook's identity may not list (403), else 0.
    pub unreadable: IntGaugeVec,
}

impl Metrics {
    /// Creates and registers the metrics.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new_custom(Some("holdfast_webhook".to_string()), None)?;
        let requests = IntCounterVec::new(
            Opts::new(
                "admission_requests_total",
                "Admission reviews answered, by operation, decision and deciding policy.",
            ),
            &["operation", "decision", "policy"],
        )?;
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "admission_duration_seconds",
                "Time from a complete request body to the written verdict.",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
            &["operation"],
        )?;
        let rejected = IntCounterVec::new(
            Opts::new(
                "http_rejected_total",
                "HTTP requests refused before review, by reason.",
            ),
            &["reason"],
        )?;
        let tls_reloads = IntCounterVec::new(
            Opts::new(
                "tls_reloads_total",
                "Serving certificate reloads, by result.",
            ),
            &["result"],
        )?;
        let ready = IntGauge::new("ready", "1 when the webhook reports ready.")?;
        let registry_size = IntGaugeVec::new(
            Opts::new(
                "registry_policies",
                "Policy objects in the registry, by kind.",
            ),
            &["kind"],
        )?;
        let index_references = IntGauge::new(
            "dependents_index_references",
            "References held by the dependents index.",
        )?;
        let index_synced = IntGaugeVec::new(
            Opts::new(
                "dependents_index_synced",
                "1 when the dependents index of a resource is synced.",
            ),
            &["resource"],
        )?;
        let dependents_lookups = IntCounterVec::new(
            Opts::new(
                "dependents_lookups_total",
                "Dependents lookups by source: index, live, failed.",
            ),
            &["source"],
        )?;
        let audited = IntCounterVec::new(
            Opts::new(
                "audited_total",
                "Deletions that Audit-mode policies would have denied, by operation.",
            ),
            &["operation"],
        )?;
        let closed = IntCounterVec::new(
            Opts::new(
                "connections_closed_total",
                "Connections the server closed, by listener and reason: connection_limit, \
                 first_request_timeout, idle, handshake_timeout.",
            ),
            &["listener", "reason"],
        )?;
        let events = IntCounterVec::new(
            Opts::new(
                "events_total",
                "Kubernetes Events, by outcome: queued, published, limited (rate limit), \
                 dropped (queue full), failed.",
            ),
            &["outcome"],
        )?;
        let cluster_clients = IntGauge::new(
            "cluster_clients",
            "API clients held for logical clusters (kcp), bounded.",
        )?;
        let unreadable = IntGaugeVec::new(
            Opts::new(
                "unreadable_resources",
                "1 for a resource the webhook needs but may not list (403 from the API \
                 server); 0 once it can.",
            ),
            &["resource"],
        )?;
        registry.register(Box::new(unreadable.clone()))?;
        registry.register(Box::new(closed.clone()))?;
        registry.register(Box::new(events.clone()))?;
        registry.register(Box::new(cluster_clients.clone()))?;
        registry.register(Box::new(registry_size.clone()))?;
        registry.register(Box::new(index_references.clone()))?;
        registry.register(Box::new(index_synced.clone()))?;
        registry.register(Box::new(dependents_lookups.clone()))?;
        registry.register(Box::new(audited.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(latency.clone()))?;
        registry.register(Box::new(rejected.clone()))?;
        registry.register(Box::new(tls_reloads.clone()))?;
        registry.register(Box::new(ready.clone()))?;
        Ok(Self {
            registry,
            requests,
            latency,
            rejected,
            tls_reloads,
            ready,
            registry_size,
            index_references,
            index_synced,
            dependents_lookups,
            audited,
            closed,
            events,
            cluster_clients,
            unreadable,
        })
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}
