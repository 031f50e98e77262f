//! The plumbing half: what talks to API servers. The API clients both
//! binaries use ([`clients`]), the one watch driver every cache is fed by
//! ([`watch`]) and its backoff, kcp's endpoint slices and workspace paths
//! resolved on the wire ([`endpoints`], [`kcp`]), kubeconfig loading
//! ([`kubeconfig`]), and the binaries' shared runtime (logs, admin server,
//! HTTPS, shutdown; feature `runtime`).

pub mod backoff;
pub mod clients;
pub mod endpoints;
pub mod kcp;
mod keyset;
pub mod kubeconfig;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod watch;
