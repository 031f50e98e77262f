//! The admission handler: AdmissionReview in, verdict out. Pure apart from metrics
//! and logs; the HTTP layer lives in `server`.

use crate::{events::EventSink, metrics::Metrics, view::WebhookView};
use chrono::Utc;
use holdfast_shared::{
    policy::{self, Decision, PolicyConfig},
    review::{self, AdmissionResponse, ReviewError},
};
use serde_json::Value;
use std::{sync::Arc, time::Instant};

/// Answers AdmissionReviews.
pub struct Admission {
    config: PolicyConfig,
    view: Arc<WebhookView>,
    metrics: Metrics,
    events: EventSink,
}

impl Admission {
    /// A handler deciding with `config` over `view`.
    pub fn new(config: PolicyConfig, view: Arc<WebhookView>, metrics: Metrics) -> Self {
        Self {
            config,
            events: EventSink::new(view.clone(), std::time::Duration::from_secs(10)),
            view,
            metrics,
        }
    }

    /// The view of cluster state (for readiness).
    pub fn view(&self) -> &Arc<WebhookView> {
        &self.view
    }

    /// Reviews one body; `Err` means the body is not an AdmissionReview (HTTP 400).
    pub async fn review(&self, body: &[u8]) -> Result<Value, ReviewError> {
        let started = Instant::now();
        let req = review::parse_review(body)?;
        tracing::debug!(uid = %req.uid, operation = req.operation.as_str(), object = %req.describe(), "reviewing");
        let eval = policy::evaluate(&req, &self.config, self.view.as_ref(), Utc::now()).await;
        let op = req.operation.as_str();
        let user = &req.user_info.username;
        for audit in &eval.audits {
            self.metrics.audited.with_label_values(&[op]).inc();
            tracing::info!(uid = %req.uid, operation = op, object = %req.describe(), user = %user, "audit: {audit}");
            self.events.emit(
                &req,
                false,
                "DeletionAudited",
                format!("{user} deleted it; in Enforce mode this would have been refused: {audit}"),
            );
        }
        match (&eval.decision, eval.policy.as_str()) {
            (Decision::Deny(d), _) if req.operation == review::Operation::Delete => {
                self.events.emit(
                    &req,
                    true,
                    "DeletionBlocked",
                    format!("{user} tried to delete it: {}", d.message),
                );
            }
            // (Evictions are judged as the pod's DELETE but reviewed as an Eviction:
            // no Event names the Eviction as if it were the pod.)
            (Decision::Allow, "break-glass") if req.operation == review::Operation::Delete => {
                tracing::info!(uid = %req.uid, object = %req.describe(), user = %user, "break-glass honoured");
                self.events.emit(
                    &req,
                    true,
                    "BreakGlass",
                    format!("{user} deleted it past its protection with the break-glass marker"),
                );
            }
            (Decision::Allow, "break-glass-authorized") => {
                self.events.emit(&req, true, "BreakGlassGranted", format!("{user}, allowed to bypass protection, added a break-glass marker or the strict exemption"));
            }
            (Decision::Warn(w), _) if req.operation == review::Operation::Delete => {
                self.events.emit(
                    &req,
                    true,
                    "DeletionWarned",
                    format!("{user} deleted it despite: {}", w.join("; ")),
                );
            }
            _ => {}
        }
        let response = match &eval.decision {
            Decision::Allow => {
                tracing::debug!(uid = %req.uid, operation = op, object = %req.describe(), policy = %eval.policy, "allowed");
                AdmissionResponse::allow(&req.uid, Vec::new())
            }
            Decision::Warn(warnings) => {
                tracing::info!(uid = %req.uid, operation = op, object = %req.describe(), policy = %eval.policy, "allowed with warnings");
                AdmissionResponse::allow(&req.uid, warnings.clone())
            }
            Decision::Deny(denial) => {
                tracing::info!(
                    uid = %req.uid,
                    operation = op,
                    object = %req.describe(),
                    user = %req.user_info.username,
                    policy = %eval.policy,
                    dry_run = req.dry_run.unwrap_or(false),
                    "denied: {}", denial.message
                );
                AdmissionResponse::deny(&req.uid, denial.message.clone())
            }
        };
        self.metrics
            .requests
            .with_label_values(&[op, eval.decision_label(), eval.policy.as_str()])
            .inc();
        self.metrics
            .latency
            .with_label_values(&[op])
            .observe(started.elapsed().as_secs_f64());
        Ok(response.into_review())
    }
}
