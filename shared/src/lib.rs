//! holdfast-shared: the API types (CRDs), field paths, rule registry and the pure
//! policy evaluation shared by `holdfast-controller` and `holdfast-webhook`.
//!
//! Policies are evaluated without I/O, over an admission request and a
//! [`policy::ClusterView`] that the webhook implements. The one module that touches the
//! network is [`clients`]: it builds (and caches) the API clients both binaries use.

#![warn(missing_docs)]

pub mod anchorsource;
pub mod api;
pub mod backstop;
pub mod cascading;
pub mod clients;
pub mod deferred;
pub mod fieldpath;
pub mod index;
pub mod labels;
pub mod names;
pub mod policy;
pub mod registry;
pub mod report;
pub mod review;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod selector;
pub mod selfprotection;
pub mod topology;
pub mod webhookconfig;
