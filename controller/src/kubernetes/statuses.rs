//! Policy statuses: what each policy's conditions say, written by server-side
//! apply, and the metrics that count them.

use super::*;

impl Reconciler {
    pub(super) fn metrics_refused(&self, refused: bool) {
        if let Some(m) = &self.metrics {
            m.configuration_refused.set(i64::from(refused));
        }
    }

    /// Counts the policies of `writes` by kind and Ready reason.
    pub(super) fn metrics_policies(&self, writes: &[StatusWrite]) {
        if let Some(m) = &self.metrics {
            m.set_policies(writes.iter().map(|w| {
                (
                    self.kinds.get(w.kind).ar.kind.as_str(),
                    crate::status::ready_reason(&w.outcome),
                )
            }));
        }
    }

    pub(super) fn metrics_backstop_missing(&self, missing: bool) {
        if let Some(m) = &self.metrics {
            m.backstop_missing.set(i64::from(missing));
        }
    }

    /// Phase four: each policy object's outcome (valid, routed by the live
    /// configuration, readable, in a cycle, ...).
    pub(super) fn status_writes(
        &self,
        gathered: &Gathered,
        live: &ValidatingWebhookConfiguration,
        reads: &Reads,
        refused: Option<&str>,
    ) -> Vec<StatusWrite> {
        let cycles = find_cycles(&gathered.edges);
        let policies_webhooks: Vec<&str> = live
            .webhooks
            .iter()
            .flatten()
            .map(|h| h.name.as_str())
            .filter(|n| is_policies_webhook(n))
            .collect();
        let mut writes = Vec::with_capacity(gathered.items.len());
        for item in &gathered.items {
            let mut via: BTreeSet<&str> = BTreeSet::new();
            let mut missing: Vec<String> = Vec::new();
            for gr in &item.needs {
                let hooks: Vec<&str> = policies_webhooks
                    .iter()
                    .copied()
                    .filter(|h| routes(live, h, "DELETE", gr))
                    .collect();
                if hooks.is_empty() {
                    missing.push(gr.to_string());
                }
                via.extend(hooks);
            }
            let cannot_read: Vec<String> = match &reads.refused {
                Some((_, missing)) => item
                    .reads
                    .iter()
                    .filter(|gr| missing.contains(*gr))
                    .map(ToString::to_string)
                    .collect(),
                None => Vec::new(),
            };
            let installed = missing.is_empty() && cannot_read.is_empty();
            let set: BTreeSet<String> = item.needs.iter().map(ToString::to_string).collect();
            let installed_message = if let (false, Some((error, _))) =
                (cannot_read.is_empty(), &reads.refused)
            {
                format!(
                    "holdfast may not read {} (get, list, watch), so its DELETEs are refused: {error}; \
                     grant the controller escalate on ClusterRole {}, or add a ClusterRole labelled {}=true granting it",
                    cannot_read.join(", "),
                    reads::READS_ROLE,
                    reads::AGGREGATE_LABEL
                )
            } else if installed {
                let routed = crate::status::routed_message(set, via);
                if item
                    .needs
                    .iter()
                    .any(holdfast_shared::unreviewed::is_wildcard)
                {
                    format!("{routed}; {}", holdfast_shared::unreviewed::WILDCARD_LIMITS)
                } else {
                    routed
                }
            } else {
                crate::status::not_routed_message(&missing)
            };
            let cycle = cycles
                .get(&item.name)
                .filter(|_| item.kind == PolicyKind::DependencyRule)
                .map(|c| c.message());
            let never: Vec<String> = item
                .needs
                .iter()
                .filter_map(|gr| self.index.not_admission_controlled(gr))
                .collect();
            let outcome = Outcome {
                not_admitted: (!never.is_empty()).then(|| never.join("; ")),
                invalid: item.invalid.clone(),
                installed,
                installed_message,
                cycle,
                cycle_applies: item.kind == PolicyKind::DependencyRule,
                source: item.source.clone(),
                // Only what the live configuration does not route: the rest is
                // still enforced by it.
                blocked: refused.filter(|_| !missing.is_empty()).map(|m| {
                    (
                        crate::status::CONFIGURATION_REFUSED,
                        crate::status::refused_message(m),
                    )
                }),
                // (kube-apiserver: no probe; see docs/decisions.md.)
                not_enforced: None,
            };
            writes.push(StatusWrite {
                kind: item.kind,
                name: item.name.clone(),
                outcome,
            });
        }
        writes
    }

    /// Phase five: writes the statuses that changed, a bounded number at a time.
    pub(super) async fn write_statuses(
        &self,
        writes: Vec<StatusWrite>,
    ) -> Result<(), ReconcileError> {
        let now = &now_rfc3339();
        let failed: Vec<Failure> = futures::stream::iter(writes)
            .map(|w| async move {
                let result = self.write_status(w.kind, &w.name, &w.outcome, now).await;
                let kind = &self.kinds.get(w.kind).ar.kind;
                result
                    .map_err(|source| {
                        tracing::warn!(kind = %kind, name = %w.name, error = %source, "writing status failed");
                        Failure::PolicyStatus {
                            kind: kind.clone(),
                            key: w.name,
                            source,
                        }
                    })
                    .err()
            })
            .buffer_unordered(STATUS_WRITES_IN_FLIGHT)
            .filter_map(futures::future::ready)
            .collect()
            .await;
        match failed.is_empty() {
            true => Ok(()),
            false => Err(ReconcileError::Status { failed }),
        }
    }

    pub(super) async fn write_status(
        &self,
        kind: PolicyKind,
        name: &str,
        outcome: &Outcome,
        now: &str,
    ) -> anyhow::Result<()> {
        let pk = self.kinds.get(kind);
        let Some(obj) = pk.store.get("", "", name) else {
            return Ok(());
        };
        let current = current_status(&obj);
        let generation = obj.metadata.generation;
        let Some(status) = desired_status(
            generation,
            current.observed_generation,
            &current.conditions,
            outcome,
            now,
        ) else {
            return Ok(());
        };
        let was_cycle = holdfast_shared::api::is_condition_true(
            &current.conditions,
            holdfast_shared::api::condition_types::CYCLE_DETECTED,
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &pk.ar);
        match api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": status })),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let reference = obj.object_ref(&pk.ar);
        if let Some(msg) = &outcome.cycle
            && !was_cycle
        {
            tracing::warn!(kind = %pk.ar.kind, name, "{msg}");
            self.publish(&reference, "CycleDetected", "DetectCycle", msg)
                .await;
        }
        if let Some((reason, message)) = crate::status::newly_blocked(&current.conditions, outcome)
        {
            tracing::warn!(kind = %pk.ar.kind, name, reason, "policy not enforced: {message}");
            self.publish(&reference, reason, "Install", message).await;
        }
        if let Some((reason, message)) = crate::status::newly_invalid(&current.conditions, outcome)
        {
            tracing::warn!(kind = %pk.ar.kind, name, reason, "invalid policy: {message}");
            self.publish(&reference, reason, "Validate", message).await;
        }
        Ok(())
    }
}
