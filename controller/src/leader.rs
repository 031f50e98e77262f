//! Leader election with a coordination.k8s.io/v1 Lease, as client-go does it:
//! the holder renews `spec.renewTime` every `renew_every`; a candidate takes the
//! Lease over once it has seen no change of the record for `lease_duration`
//! (measured on its own clock, so clock skew between replicas does not matter).
//! Writes are optimistic (resourceVersion), so two candidates never both win.

use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// How long a Lease is valid without renewal.
    pub lease_duration: Duration,
    /// How often the holder renews (and candidates retry).
    pub renew_every: Duration,
}

/// A leader elector.
pub struct LeaderElector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    /// The last record seen (holder, renewTime, transitions) and when it was seen changing.
    observed: Option<(String, Instant)>,
}

/// The outcome of one attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease.
    Leading,
    /// Another replica holds a valid Lease.
    Following,
}

fn record_key(lease: &Lease) -> String {
    let spec = lease.spec.clone().unwrap_or_default();
    format!(
        "{}|{}|{}",
        spec.holder_identity.unwrap_or_default(),
        spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
        spec.lease_transitions.unwrap_or_default()
    )
}

impl LeaderElector {
    /// A new elector.
    pub fn new(client: Client, cfg: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: None,
        }
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    fn spec(&self, transitions: i32, acquire: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.cfg.lease_duration.as_secs().max(1) as i32),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One attempt to acquire or renew.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let existing = match self.api.get_opt(&self.cfg.name).await? {
            Some(l) => l,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(0, None)),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(Attempt::Leading),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Following),
                    Err(e) => Err(e),
                };
            }
        };
        let spec = existing.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let key = record_key(&existing);
        let now = Instant::now();
        let changed = self.observed.as_ref().is_none_or(|(k, _)| *k != key);
        if changed {
            self.observed = Some((key, now));
        }
        let duration = spec
            .lease_duration_seconds
            .map_or(self.cfg.lease_duration, |s| {
                Duration::from_secs(s.max(1) as u64)
            });
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|(_, seen)| now.duration_since(*seen) >= duration);
        let mine = holder == self.cfg.identity;
        if !(mine || holder.is_empty() || expired) {
            return Ok(Attempt::Following);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
        let acquire = if mine {
            spec.acquire_time.clone()
        } else {
            None
        };
        let mut lease = existing.clone();
        lease.spec = Some(self.spec(transitions, acquire));
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observed = Some((record_key(&updated), Instant::now()));
                if !mine {
                    tracing::info!(identity = %self.cfg.identity, previous = %holder, "acquired leadership");
                }
                Ok(Attempt::Leading)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Following),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica leads.
    pub async fn acquire(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => return,
                Ok(Attempt::Following) => {}
                Err(e) => tracing::warn!(error = %e, "leader election: lease request failed"),
            }
            // Candidates look twice per renew period, so a takeover happens at most
            // half a period after the lease expires.
            tokio::time::sleep(self.cfg.renew_every / 2).await;
        }
    }

    /// Renews until the Lease is lost (another replica took it, or renewals failed
    /// for a whole lease duration); returns then.
    pub async fn keep_renewing(&mut self) {
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(self.cfg.renew_every).await;
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => last_ok = Instant::now(),
                Ok(Attempt::Following) => {
                    tracing::error!("leader election: another replica holds the lease");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: renewing failed");
                    // Stop writing before another replica may legitimately take over.
                    if last_ok.elapsed() + self.cfg.renew_every >= self.cfg.lease_duration {
                        return;
                    }
                }
            }
        }
    }

    /// Gives the Lease up (on shutdown) so another replica takes over at once.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        if let Err(e) = self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(error = %e, "leader election: releasing the lease failed");
        }
    }
}
