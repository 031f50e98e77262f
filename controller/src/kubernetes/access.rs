//! The reads the controller keeps: the anchor-sources Role and the reads role
//! (what the webhook may list for containment and the policies' types).

use super::*;

impl Reconciler {
    /// Keeps the anchor-sources Role equal to the Secrets AnchorRules name; a failure
    /// is logged once per change (the sources then report the refused read).
    pub(super) async fn keep_source_reads(&mut self) {
        let namespace = holdfast_shared::anchorsource::allowed_namespace();
        let secrets = self.sources.secrets_in(&namespace);
        let failure = reads::keep_sources(&self.client, &namespace, &secrets)
            .await
            .err();
        if failure != self.sources_failure {
            if let Some(e) = &failure {
                tracing::warn!(error = %e, "cannot keep the anchor-sources Role; anchor sources stay unreadable");
            }
            self.sources_failure = failure;
        }
    }

    /// Keeps the reads role; returns what the marker watches cover (None: every
    /// type, the role is not in use) and, when the role could not be kept, why and
    /// the wanted types it does not grant.
    pub(super) async fn keep_reads(&mut self, policy: &BTreeSet<GroupResource>) -> Reads {
        if !self.index.loaded {
            return Reads::default();
        }
        let wanted = reads::wanted(
            &self.index,
            policy,
            self.crd_types(),
            self.settings.read_secrets,
        );
        match reads::keep(&self.client, &wanted).await {
            reads::Kept::Unmanaged => {
                self.reads_failure = None;
                Reads::default()
            }
            reads::Kept::Granted => {
                self.reads_failure = None;
                // Watch only what the identity can read already: a type granted a
                // moment ago waits for the aggregation (the caller routes every
                // namespace DELETE meanwhile, and retries).
                self.confirmed.retain(|gr| wanted.contains(gr));
                let unconfirmed: Vec<GroupResource> =
                    wanted.difference(&self.confirmed).cloned().collect();
                let client = &self.client;
                let checks = futures::future::join_all(
                    unconfirmed
                        .iter()
                        .map(|gr| async move { (gr.clone(), reads::may_read(client, gr).await) }),
                )
                .await;
                for (gr, ok) in checks {
                    if ok {
                        self.confirmed.insert(gr);
                    }
                }
                Reads {
                    pending: wanted.iter().any(|gr| !self.confirmed.contains(gr)),
                    covered: Some(self.confirmed.clone()),
                    refused: None,
                }
            }
            reads::Kept::Failed { error, held } => {
                if self.reads_failure.as_ref() != Some(&error) {
                    tracing::warn!(%error, "cannot grant holdfast the reads its policies need; policies needing a type it cannot read are reported not installed");
                    self.reads_failure = Some(error.clone());
                }
                // Missing: what the role does not grant and holdfast cannot read
                // otherwise either (an administrator may grant it by hand, through
                // a ClusterRole labelled for holdfast-reads).
                let client = &self.client;
                let checks = futures::future::join_all(
                    wanted
                        .difference(&held)
                        .map(|gr| async move { (gr.clone(), reads::may_read(client, gr).await) }),
                )
                .await;
                let missing: BTreeSet<GroupResource> = checks
                    .into_iter()
                    .filter(|(_, readable)| !readable)
                    .map(|(gr, _)| gr)
                    .collect();
                // Look again shortly: nothing the controller watches announces a
                // change of RBAC.
                wake_after(&self.notify, RBAC_RECHECK);
                // The marker watches still cover everything wanted: one refused
                // keeps namespace DELETEs routed everywhere (fail closed).
                Reads {
                    covered: Some(wanted),
                    refused: Some((error, missing)),
                    pending: false,
                }
            }
        }
    }

    /// Phase two: keeps the roles that let holdfast read what the policies name,
    /// and the marker watches over what it may read (which decide the namespace
    /// containment routed in `needs`).
    pub(super) async fn keep_all_reads(
        &mut self,
        items: &[Item],
        needs: &mut PolicyNeeds,
    ) -> Reads {
        self.keep_source_reads().await;
        let policy: BTreeSet<GroupResource> =
            items.iter().flat_map(|i| i.reads.iter().cloned()).collect();
        let reads = self.keep_reads(&policy).await;
        let keys: Vec<String> = self.settings.labels.iter().map(|l| l.key.clone()).collect();
        needs.containment = self
            .markers
            .sync(&self.index, &needs.routes, &keys, reads.covered.as_ref())
            .await;
        if reads.pending {
            // Granted but not effective yet: route every namespace DELETE and look
            // again shortly.
            needs.containment = holdfast_shared::webhookconfig::Containment::Everywhere;
            wake_after(&self.notify, READS_RECHECK);
        }
        reads
    }
}
