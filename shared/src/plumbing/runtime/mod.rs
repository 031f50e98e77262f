//! The runtime skeleton both binaries share: the settings both take ([`args`]),
//! log flags and initialisation ([`log`]), the plain-HTTP admin server with `/healthz`, `/readyz` and
//! `/metrics` ([`admin`]) over one hardened HTTP serving loop ([`http`]), the
//! shutdown token and signals ([`shutdown`]) and exit codes with one-line fatal
//! errors ([`exit`]). Kubeconfig loading is not part of it
//! ([`crate::plumbing::kubeconfig`]): the kubectl plugin loads kubeconfigs too.
//!
//! Built with the `runtime` feature only: it pulls the server dependencies in,
//! which the pure parts of this crate and the plugin do not need.

pub mod admin;
pub mod args;
pub mod exit;
pub mod http;
pub mod log;
pub mod shutdown;

pub use args::{KcpArgs, ProtectionArgs};
pub use exit::{ConfigError, EXIT_FAILURE, EXIT_USAGE};
pub use log::{LogArgs, LogFormat};
pub use shutdown::Shutdown;
