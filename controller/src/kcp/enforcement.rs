//! kcp: which installed configurations kcp is seen enforcing.
//!
//! A configuration written is not yet a configuration enforced: kcp's admission
//! reads configurations through the cache server (kcp-facts 22). After each
//! install the controller probes every workspace whose configuration kcp has not
//! been seen enforcing (the probe of [`holdfast_shared::enforcement`]: a
//! server-side dry-run CREATE answered by the configuration's probe webhook), and
//! statuses judge what is routed by the configuration kcp enforces: the installed
//! one once its probe answered, else the last one seen enforced (kcp enforces it
//! or a newer one), else none. A policy routed only by a configuration not yet
//! enforced is Installed but not Ready (`NotEnforcedYet`).

use std::{collections::BTreeMap, future::Future, sync::Arc};

use futures::StreamExt as _;
use holdfast_shared::enforcement::ANNOTATION;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use parking_lot::Mutex;

/// How many workspaces are probed at once.
const CONCURRENCY: usize = 16;

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// The probe webhook answered: kcp enforces the configuration there.
    Enforced,
    /// It did not (the dry run was admitted, or failed otherwise): why.
    NotYet(String),
}

/// The configurations statuses judge by, after a probe round.
#[derive(Default)]
pub struct Enforced {
    /// Per logical cluster: the configuration kcp is known to enforce (the
    /// installed one, or the last one seen enforced); absent when none is.
    pub effective: BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    /// Logical clusters whose installed configuration kcp is not seen enforcing
    /// yet, and why.
    pub pending: BTreeMap<String, String>,
}

/// The last configuration kcp was seen enforcing, per logical cluster: state the
/// part owns across passes.
#[derive(Default)]
pub struct Enforcement {
    seen: Mutex<BTreeMap<String, Arc<ValidatingWebhookConfiguration>>>,
}

fn probe_of(cfg: &ValidatingWebhookConfiguration) -> Option<&str> {
    cfg.metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION)
        .map(String::as_str)
}

impl Enforcement {
    /// Probes, through `probe(logical cluster, probe Event name)`, every installed
    /// configuration whose probe kcp has not answered yet, and returns what the
    /// statuses judge by. A configuration without a probe (none routes nothing
    /// holdfast judges) counts as enforced.
    pub async fn check<F, Fut>(
        &self,
        installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
        probe: F,
    ) -> Enforced
    where
        F: Fn(String, String) -> Fut,
        Fut: Future<Output = ProbeAnswer>,
    {
        let seen = self.seen.lock().clone();
        let mut out = Enforced::default();
        let mut to_probe = Vec::new();
        // Seen enforced with the same webhooks (the probe's name is their hash) as
        // another copy: the installed one is kept instead (one copy in memory).
        let mut same = Vec::new();
        for (lc, cfg) in installed {
            let Some(name) = probe_of(cfg) else {
                out.effective.insert(lc.clone(), cfg.clone());
                continue;
            };
            if let Some(s) = seen.get(lc).filter(|s| probe_of(s) == Some(name)) {
                if !Arc::ptr_eq(s, cfg) {
                    same.push((lc.clone(), cfg.clone()));
                }
                out.effective.insert(lc.clone(), cfg.clone());
                continue;
            }
            to_probe.push((lc.clone(), name.to_string(), cfg.clone()));
        }
        let probe = &probe;
        let answers: Vec<(String, Arc<ValidatingWebhookConfiguration>, ProbeAnswer)> =
            futures::stream::iter(to_probe)
                .map(|(lc, name, cfg)| async move {
                    let a = probe(lc.clone(), name).await;
                    (lc, cfg, a)
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        let mut next = seen;
        next.extend(same);
        next.retain(|lc, _| installed.contains_key(lc));
        for (lc, cfg, answer) in answers {
            match answer {
                ProbeAnswer::Enforced => {
                    tracing::debug!(cluster = %lc, "kcp enforces ValidatingWebhookConfiguration holdfast");
                    next.insert(lc.clone(), cfg.clone());
                    out.effective.insert(lc, cfg);
                }
                ProbeAnswer::NotYet(why) => {
                    tracing::debug!(cluster = %lc, why = %why, "kcp does not enforce ValidatingWebhookConfiguration holdfast yet");
                    if let Some(before) = next.get(&lc) {
                        out.effective.insert(lc.clone(), before.clone());
                    }
                    out.pending.insert(lc, why);
                }
            }
        }
        *self.seen.lock() = next;
        out
    }
}

/// The Ready message of a policy some of whose resources only a configuration
/// kcp does not enforce yet routes.
pub fn not_enforced_message(waiting: &[String], pending: &BTreeMap<String, String>) -> String {
    let why: Vec<String> = pending
        .iter()
        .map(|(lc, why)| format!("{lc}: {why}"))
        .collect();
    format!(
        "installed, but kcp does not enforce the webhook configuration yet (it reaches kcp's admission through the cache server): {}; probe: {}",
        waiting.join(", "),
        why.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cfg(probe: &str, rv: &str) -> Arc<ValidatingWebhookConfiguration> {
        Arc::new(ValidatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some("holdfast".into()),
                resource_version: Some(rv.into()),
                annotations: Some([(ANNOTATION.to_string(), probe.to_string())].into()),
                ..Default::default()
            },
            webhooks: None,
        })
    }

    #[tokio::test]
    async fn a_configuration_counts_once_its_probe_answers_and_is_not_probed_again() {
        let e = Enforcement::default();
        let installed: BTreeMap<_, _> = [("lc1".to_string(), cfg("p1", "1"))].into();
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let not_yet = |_: String, _: String| {
            asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { ProbeAnswer::NotYet("admitted".into()) }
        };
        let r = e.check(&installed, not_yet).await;
        assert!(
            r.effective.is_empty(),
            "nothing enforced before the probe answers"
        );
        assert_eq!(r.pending.get("lc1").map(String::as_str), Some("admitted"));

        let yes = |lc: String, name: String| {
            asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            assert_eq!((lc.as_str(), name.as_str()), ("lc1", "p1"));
            async { ProbeAnswer::Enforced }
        };
        let r = e.check(&installed, yes).await;
        assert!(r.pending.is_empty());
        assert!(r.effective.contains_key("lc1"));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);

        // Known enforced: no probe.
        let r = e.check(&installed, not_yet).await;
        assert!(r.pending.is_empty() && r.effective.contains_key("lc1"));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn while_a_new_configuration_waits_the_last_enforced_one_counts() {
        let e = Enforcement::default();
        let one: BTreeMap<_, _> = [("lc1".to_string(), cfg("p1", "1"))].into();
        e.check(&one, |_, _| async { ProbeAnswer::Enforced }).await;
        let two: BTreeMap<_, _> = [("lc1".to_string(), cfg("p2", "2"))].into();
        let r = e
            .check(&two, |_, _| async {
                ProbeAnswer::NotYet("admitted".into())
            })
            .await;
        let effective = r.effective.get("lc1").expect("the last enforced one");
        assert_eq!(effective.metadata.resource_version.as_deref(), Some("1"));
        assert!(r.pending.contains_key("lc1"));
        // A workspace no longer installed is forgotten.
        let r = e
            .check(&BTreeMap::new(), |_, _| async { ProbeAnswer::Enforced })
            .await;
        assert!(r.effective.is_empty() && r.pending.is_empty());
        let r = e
            .check(&two, |_, _| async {
                ProbeAnswer::NotYet("admitted".into())
            })
            .await;
        assert!(
            r.effective.is_empty(),
            "forgotten: {:?}",
            r.effective.keys()
        );
    }
}
