//! The admission handler: AdmissionReview in, verdict out. Pure apart from metrics
//! and logs; the HTTP layer lives in `server`.

use crate::{
    events::EventSink,
    metrics::Metrics,
    recent::{Recent, Sighting},
    view::WebhookView,
};
use chrono::Utc;
use holdfast_shared::{
    policy::{self, Decider, Decision, PolicyConfig},
    review::{self, AdmissionResponse, ExportRoute, ReviewError},
};
use std::{sync::Arc, time::Instant};

/// Denials of one object are logged once per this window; the rest are counted and
/// summed up in one line when the window closes.
const DENIAL_LOG_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// Objects whose denials are being aggregated at most.
const DENIAL_LOG_CAPACITY: usize = 10_000;

/// Logs denials without a synchronous write per request: the first denial of an
/// object (per policy) in a window is logged at INFO, repeats only at DEBUG, and once
/// the window has closed one line says how many more there were. Metrics and Events
/// count every one as before.
struct DenialLog {
    recent: Recent,
}

impl DenialLog {
    fn new() -> Self {
        Self {
            recent: Recent::new(DENIAL_LOG_WINDOW, DENIAL_LOG_CAPACITY),
        }
    }

    /// True when this denial, at `now`, should be logged at INFO (the first in its
    /// window).
    fn first(&self, key: &str, now: Instant) -> bool {
        let sighting = self.recent.see(key, now, |key, more| {
            if more > 0 {
                tracing::info!(
                    object = %key,
                    repeats = more,
                    "denied {more} more time(s) in the last {}s",
                    DENIAL_LOG_WINDOW.as_secs()
                );
            }
        });
        sighting == Sighting::First
    }
}

/// The webhook route a review came through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/validate`: every policy applies (Kubernetes, Karmada).
    Plain,
    /// `/validate/kcp/<logical cluster>`: the configuration of that workspace, for
    /// its own objects (any other is refused).
    Workspace(String),
    /// `/validate/kcp/<logical cluster>/<export>`: a provider workspace's
    /// configuration, for the consumers of one of its APIExports.
    Export(ExportRoute),
    /// `/validate/kcp-workspaces`: the configuration `holdfast-workspaces` of the
    /// workspace exporting `tenancy.kcp.io`, for every Workspace DELETE (workspace
    /// containment; every policy applies, as on the plain route).
    Workspaces,
    /// `/validate/enforcement-probe`: the enforcement probe of a kcp
    /// configuration (see [`holdfast_shared::enforcement`]): always refused.
    Probe,
}

/// Answers AdmissionReviews.
pub struct Admission {
    config: PolicyConfig,
    /// kcp: `config` without protection labels and strict mode, for the objects of a
    /// workspace that does not bind holdfast reviewed through a provider's export
    /// route (only the provider's DependencyRules apply to them).
    unbound: PolicyConfig,
    view: Arc<WebhookView>,
    metrics: Metrics,
    events: EventSink,
    denials: DenialLog,
}

impl Admission {
    /// A handler deciding with `config` over `view`, publishing at most one Event
    /// per object and reason per `event_window`.
    pub fn new(
        config: PolicyConfig,
        view: Arc<WebhookView>,
        metrics: Metrics,
        event_window: std::time::Duration,
    ) -> Self {
        let unbound = PolicyConfig {
            labels: holdfast_shared::labels::ProtectionLabels::none(),
            strict: false,
            ..config.clone()
        };
        Self {
            config,
            unbound,
            events: EventSink::new(view.clone(), metrics.clone(), event_window),
            view,
            metrics,
            denials: DenialLog::new(),
        }
    }

    /// The view of cluster state (for readiness).
    pub fn view(&self) -> &Arc<WebhookView> {
        &self.view
    }

    /// Reviews one body, sent through `route`, into the response body; `Err` means
    /// the body is not an AdmissionReview (HTTP 400).
    pub async fn review(&self, body: &[u8], route: Route) -> Result<Vec<u8>, ReviewError> {
        let started = Instant::now();
        let mut req = review::parse_review(body)?;
        if route == Route::Probe {
            // Nothing to judge: the answer proves kcp called this configuration.
            tracing::debug!(uid = %req.uid, object = %req.describe(), "enforcement probe");
            return Ok(AdmissionResponse::deny(
                &req.uid,
                holdfast_shared::enforcement::MESSAGE.to_string(),
            )
            .to_review_bytes());
        }
        if !self.config.kcp {
            // Outside kcp anyone who may write an object may set `kcp.io/cluster`:
            // it steers nothing here (workspace, Events, deferred deletion).
            for o in [req.object.as_mut(), req.old_object.as_mut()]
                .into_iter()
                .flatten()
            {
                policy::forget_logical_cluster(o);
            }
        }
        let workspace = match route {
            Route::Plain | Route::Workspaces | Route::Probe => None,
            Route::Workspace(lc) => Some(lc),
            Route::Export(via) => {
                req.via_export = Some(via);
                None
            }
        };
        tracing::debug!(uid = %req.uid, operation = req.operation.as_str(), object = %req.describe(), "reviewing");
        let foreign = workspace
            .as_deref()
            .and_then(|lc| policy::foreign_workspace(&req, lc));
        let config = match (&req.via_export, req.subject().or(req.old_object.as_ref())) {
            (Some(_), Some(obj)) if !self.view.binds_holdfast(policy::logical_cluster(obj)) => {
                &self.unbound
            }
            _ => &self.config,
        };
        let eval = match foreign {
            Some(refused) => refused,
            None => policy::evaluate(&req, config, self.view.as_ref(), Utc::now()).await,
        };
        // One clock read, once decided (an evaluation may wait on a live lookup), for
        // the Event window and the denial log, and none when neither is involved.
        let decided = std::cell::OnceCell::new();
        let decided = || *decided.get_or_init(Instant::now);
        let op = req.operation.as_str();
        let user = &req.user_info.username;
        for audit in &eval.audits {
            self.metrics.audited.with_label_values(&[op]).inc();
            tracing::info!(uid = %req.uid, operation = op, object = %req.describe(), user = %user, "audit: {audit}");
            self.events
                .emit(&req, decided(), false, "DeletionAudited", || {
                    format!(
                        "{user} deleted it; in Enforce mode this would have been refused: {audit}"
                    )
                });
        }
        match (&eval.decision, &eval.decider) {
            (Decision::Deny(d), _) if req.operation == review::Operation::Delete => {
                self.events
                    .emit(&req, decided(), true, "DeletionBlocked", || {
                        format!("{user} tried to delete it: {}", d.message)
                    });
            }
            // (Evictions are judged as the pod's DELETE but reviewed as an Eviction:
            // no Event names the Eviction as if it were the pod.)
            (Decision::Allow, Decider::BreakGlass)
                if req.operation == review::Operation::Delete =>
            {
                tracing::info!(uid = %req.uid, object = %req.describe(), user = %user, "break-glass honoured");
                self.events.emit(&req, decided(), true, "BreakGlass", || {
                    format!("{user} deleted it past its protection with the break-glass marker")
                });
            }
            (Decision::Allow, Decider::BreakGlassAuthorized) => {
                self.events.emit(&req, decided(), true, "BreakGlassGranted", || format!("{user}, allowed to bypass protection, added a break-glass marker or the strict exemption"));
            }
            (Decision::Warn(w), _) if req.operation == review::Operation::Delete => {
                self.events
                    .emit(&req, decided(), true, "DeletionWarned", || {
                        format!("{user} deleted it despite: {}", w.join("; "))
                    });
            }
            _ => {}
        }
        let decided_by = eval.decider.metric_label();
        self.metrics.count_review(
            req.operation,
            eval.decision_label(),
            eval.decider.metric_decider(),
        );
        let response = match eval.decision {
            Decision::Allow => {
                tracing::debug!(uid = %req.uid, operation = op, object = %req.describe(), policy = %decided_by, "allowed");
                AdmissionResponse::allow(&req.uid, Vec::new())
            }
            Decision::Warn(warnings) => {
                tracing::info!(uid = %req.uid, operation = op, object = %req.describe(), policy = %decided_by, "allowed with warnings");
                AdmissionResponse::allow(&req.uid, warnings)
            }
            Decision::Deny(denial) => {
                // The key names the operation, the object and the policy.
                let mut key = String::with_capacity(96);
                key.push_str(op);
                key.push(' ');
                let mut key = req.write_description(key);
                let object = op.len() + 1..key.len();
                key.push_str(" (");
                key.push_str(&decided_by);
                key.push(')');
                let object = key.get(object).unwrap_or_default();
                if self.denials.first(&key, decided()) {
                    tracing::info!(
                        uid = %req.uid,
                        operation = op,
                        object = %object,
                        user = %req.user_info.username,
                        policy = %decided_by,
                        dry_run = req.dry_run.unwrap_or(false),
                        "denied: {}", denial.message
                    );
                } else {
                    tracing::debug!(uid = %req.uid, operation = op, object = %object, user = %req.user_info.username, "denied again");
                }
                AdmissionResponse::deny(&req.uid, denial.message)
            }
        };
        self.metrics
            .observe_review(req.operation, started.elapsed().as_secs_f64());
        Ok(response.to_review_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_denial_is_logged_once_per_window_and_counted() {
        let log = DenialLog::new();
        let now = Instant::now();
        assert!(log.first("DELETE ConfigMap a/b (label)", now));
        assert!(!log.first("DELETE ConfigMap a/b (label)", now));
        assert!(!log.first("DELETE ConfigMap a/b (label)", now));
        // Another object, or the same one under another policy, is logged.
        assert!(log.first("DELETE ConfigMap a/c (label)", now));
        assert!(log.first("DELETE ConfigMap a/b (ResourceProtection/x)", now));
        assert_eq!(log.recent.repeats("DELETE ConfigMap a/b (label)"), Some(2));
    }
}
