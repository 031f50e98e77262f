//! `holdfast-controller uninstall`: takes enforcement down so that holdfast's own
//! installation can be deleted (Helm's pre-delete hook runs it as the controller's
//! ServiceAccount). It scales the controller's Deployment to zero, waits until no
//! controller holds the leader Lease (a running controller would re-create what
//! follows), then deletes what the controller wrote at run time: the
//! self-protection policy, the backstop and the webhook configuration `holdfast`.
//! Nothing else: the objects the user protects keep their labels and policies.
//! Last it waits until the API server no longer enforces them: a kube-apiserver
//! applies admission policies and webhook configurations from its informers, so a
//! deleted one goes on refusing for a moment; a server-side dry-run DELETE of the
//! controller's own Deployment (labelled protected) goes through once none does.
//!
//! Only the controller's own identity may scale its Deployment (the policy
//! `holdfast-self-protection`), hence the ServiceAccount; its Role grants `patch`
//! on `deployments/scale` and `get` and `delete` (used as a dry run) on the
//! Deployment, by name.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::{
    api::{apps::v1::Deployment, coordination::v1::Lease},
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
};

/// Name of the controller's Deployment (and of its leader Lease).
pub const CONTROLLER: &str = "holdfast-controller";

/// What [`uninstall`] works on.
#[derive(Clone, Debug)]
pub struct Uninstall {
    /// Namespace of holdfast's installation.
    pub namespace: String,
    /// How long to wait for the controller to stop.
    pub timeout: Duration,
}

/// Whether a Lease is held now: a holder whose last renewal is younger than
/// the lease's duration.
pub fn lease_held(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    if spec
        .holder_identity
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        return false;
    }
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let duration =
        SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15).max(1)));
    renewed
        .0
        .checked_add(duration)
        .map_or(true, |until| until > now)
}

/// Why the controller is not stopped yet, or `None` once it is.
async fn still_running(client: &Client, namespace: &str) -> anyhow::Result<Option<String>> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    if let Some(d) = deployments
        .get_opt(CONTROLLER)
        .await
        .with_context(|| format!("reading Deployment {namespace}/{CONTROLLER}"))?
    {
        // Terminating pods count too where the API server reports them
        // (`terminatingReplicas`); elsewhere the Lease tells whether the leader,
        // the one replica that writes, has stopped.
        let status = d.status.unwrap_or_default();
        let replicas = status.replicas.unwrap_or(0) + status.terminating_replicas.unwrap_or(0);
        if replicas > 0 {
            return Ok(Some(format!(
                "{replicas} pod(s) of Deployment {CONTROLLER}"
            )));
        }
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    if let Some(lease) = leases
        .get_opt(CONTROLLER)
        .await
        .with_context(|| format!("reading Lease {namespace}/{CONTROLLER}"))?
        && lease_held(&lease, Timestamp::now())
    {
        let holder = lease
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        return Ok(Some(format!("leader {holder} (Lease {CONTROLLER})")));
    }
    Ok(None)
}

/// Scales the controller to zero, waits for it to stop, then removes the
/// configuration, the backstop and the self-protection policy.
pub async fn uninstall(client: &Client, what: &Uninstall) -> anyhow::Result<()> {
    let ns = what.namespace.as_str();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let scale = serde_json::json!({"spec": {"replicas": 0}});
    match deployments
        .patch_scale(CONTROLLER, &PatchParams::default(), &Patch::Merge(&scale))
        .await
    {
        Ok(_) => tracing::info!(namespace = ns, "uninstall: scaled {CONTROLLER} to 0"),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            tracing::info!(namespace = ns, "uninstall: no Deployment {CONTROLLER}")
        }
        Err(e) => {
            return Err(e).with_context(|| format!("scaling Deployment {ns}/{CONTROLLER} to 0"));
        }
    }
    let deadline = Instant::now() + what.timeout;
    let mut said = String::new();
    loop {
        match still_running(client, ns).await? {
            None => break,
            Some(why) => {
                if Instant::now() >= deadline {
                    bail!(
                        "the controller did not stop within {:?}: {why} still running",
                        what.timeout
                    );
                }
                if why != said {
                    tracing::info!("uninstall: waiting for {why} to stop");
                    said = why;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    crate::kubernetes::delete_self_protection(client).await;
    crate::backstop::remove_now(client).await;
    let deleted = crate::kubernetes::delete_configuration(client)
        .await
        .context("deleting the ValidatingWebhookConfiguration holdfast")?;
    tracing::info!(
        configuration_deleted = deleted,
        "uninstall: the self-protection policy, the backstop and the configuration are gone"
    );
    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let mut said = false;
    loop {
        match deployments.delete(CONTROLLER, &dry_run).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 404 => break,
            Err(kube::Error::Api(e)) if Instant::now() < deadline => {
                if !said {
                    tracing::info!(
                        refusal = %e.message,
                        "uninstall: waiting for the API server to stop enforcing them"
                    );
                    said = true;
                }
            }
            Err(e) => {
                return Err(e).context(
                    "the API server still refuses deleting the controller's Deployment (a dry run)",
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::info!("uninstall: nothing of holdfast refuses deletions any more");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1};

    fn lease(holder: Option<&str>, renewed_ago: i64, duration: i32) -> Lease {
        let now = Timestamp::now();
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(v1::MicroTime(now - SignedDuration::from_secs(renewed_ago))),
                lease_duration_seconds: Some(duration),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_is_held_by_a_holder_until_it_expires() {
        let now = Timestamp::now();
        assert!(lease_held(&lease(Some("pod-a"), 1, 15), now));
        assert!(!lease_held(&lease(Some("pod-a"), 16, 15), now));
        // Released on a graceful stop: no holder.
        assert!(!lease_held(&lease(None, 1, 15), now));
        assert!(!lease_held(&lease(Some(""), 1, 15), now));
        assert!(!lease_held(&Lease::default(), now));
    }
}
