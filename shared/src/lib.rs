//! holdfast-shared: the API types (CRDs), field paths, rule registry and the pure
//! policy evaluation shared by `holdfast-controller` and `holdfast-webhook`.
//!
//! Policies are evaluated without I/O, over an admission request and a
//! [`policy::ClusterView`] that the webhook implements. The modules that touch the
//! network are [`clients`] (the API clients both binaries use, cached), [`kcp`] (kcp
//! plumbing: logical clusters, endpoint slices, workspace paths) and [`watch`] (the one
//! watch driver every cache is fed by).

#![warn(missing_docs)]

pub mod anchorsource;
pub mod api;
pub mod backoff;
pub mod backstop;
pub mod clients;
pub mod deferred;
pub mod endpoints;
pub mod enforcement;
pub mod fieldpath;
pub mod index;
pub mod kcp;
pub mod labels;
pub mod locks;
pub mod names;
pub mod policy;
pub mod registry;
pub mod report;
pub mod request_signature;
pub mod review;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod selector;
pub mod selfprotection;
pub mod topology;
pub mod unreviewed;
pub mod watch;
pub mod webhookconfig;
pub mod workspaces;
