//! holdfast-shared: what `holdfast-controller`, `holdfast-webhook` and
//! `kubectl-holdfast` share, in two halves:
//!
//! - [`pure`]: the API types (CRDs), field paths, the rule registry and index, the
//!   policy evaluation and its messages, and the objects holdfast installs (webhook
//!   configurations, the backstop), all without I/O;
//! - [`plumbing`]: the API clients, kubeconfig loading, the watch driver, kcp's
//!   resolution on the wire and the binaries' runtime.
//!
//! Every module is also at the crate's root (`holdfast_shared::policy`, ...).

#![warn(missing_docs)]

pub mod plumbing;
pub mod pure;

#[cfg(feature = "runtime")]
pub use plumbing::runtime;
pub use plumbing::{backoff, clients, endpoints, kcp, kubeconfig, watch};
pub use pure::{
    anchorsource, api, backstop, deferred, enforcement, fieldpath, index, labels, names, policy,
    registry, report, request_signature, review, selector, selfprotection, topology, unreviewed,
    webhookconfig, workspaces,
};
