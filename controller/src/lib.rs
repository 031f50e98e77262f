//! holdfast-controller: installs and heals the admission webhook configurations,
//! manages the webhook's certificates, elects a leader and writes policy status.
//!
//! - [`cli`]: the command line; [`config`]: the validated run configuration;
//!   [`crds`]: CRD rendering.
//! - [`run`]: wiring (client, probes, CA source, leader election, shutdown).
//! - [`kubernetes`]: the Kubernetes/Karmada reconciler (one merged
//!   ValidatingWebhookConfiguration `holdfast`, self-healing).
//! - [`kcp`]: the kcp reconciler (virtual workspace, workspace path resolver,
//!   one configuration per provider workspace); [`kcp::manifests`]: holdfast's
//!   APIResourceSchemas and APIExport.
//! - [`policies`]: validity of policy objects (spec rules, selectors, discovery).
//! - [`reconcile`]: the reconcile loop both topologies share (backoff, typed
//!   errors, metrics).
//! - [`cycles`]: rule-level dependency cycles; [`status`]: conditions.
//! - [`markers`]: the containment marker on namespaces holding routed objects.
//! - [`leader`]: Lease-based leader election; [`certs`]: managed CA and caBundle.

pub mod backstop;
pub mod certs;
pub mod cli;
pub mod config;
pub mod crds;
pub mod cycles;
pub mod deferred;
pub mod kcp;
pub mod kubernetes;
pub mod leader;
pub mod markers;
pub mod policies;
pub mod reads;
pub mod reconcile;
pub mod request_key;
pub mod run;
pub mod sources;
pub mod status;
pub mod uninstall;

/// A pseudo-random sequence for tests (xorshift from `seed`): each call gives a
/// number below its argument.
#[cfg(test)]
pub(crate) fn test_sequence(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}
