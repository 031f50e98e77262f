//! The admission handler: AdmissionReview in, verdict out. Pure apart from metrics
//! and logs; the HTTP layer lives in `server`.

use crate::{metrics::Metrics, view::WebhookView};
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
}

impl Admission {
    /// A handler deciding with `config` over `view`.
    pub fn new(config: PolicyConfig, view: Arc<WebhookView>, metrics: Metrics) -> Self {
        Self {
            config,
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
        for audit in &eval.audits {
            self.metrics.audited.with_label_values(&[op]).inc();
            tracing::info!(uid = %req.uid, operation = op, object = %req.describe(), user = %req.user_info.username, "audit: {audit}");
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
