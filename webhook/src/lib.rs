//! holdfast-webhook: the HTTPS admission server that refuses protected deletions.
//!
//! `run` wires the pieces: certificate store with hot reload, the admission handler
//! over a view of cluster state, the HTTPS listener and the probe listener, and a
//! graceful drain on SIGTERM/SIGINT.
//!
//! The server is the default feature `server`. Without it the crate is the
//! webhook's view of the cluster ([`view`], its stores and metrics) and nothing that
//! serves: the kubectl plugin (`holdfast-plugin`) judges a DELETE over that view
//! in-process and links no HTTPS server, TLS acceptor or certificate reload.

#[cfg(feature = "server")]
pub mod admission;
#[cfg(feature = "server")]
pub mod args;
#[cfg(feature = "server")]
pub mod events;
pub mod metrics;
#[cfg(feature = "server")]
pub mod recent;
pub mod remote;
#[cfg(feature = "server")]
mod run;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod settings;
pub mod stores;
#[cfg(feature = "server")]
pub mod tls;
pub mod view;

#[cfg(feature = "server")]
pub use args::{Args, LogFormat};
#[cfg(feature = "server")]
pub use holdfast_shared::runtime::log::DEFAULT_LOG_FILTER;
#[cfg(feature = "server")]
pub use run::run;
