//! holdfast-controller: installs and heals the admission webhook configurations,
//! resolves kcp workspaces, manages certificates and writes policy status.
//!
//! This crate currently provides the command line ([`cli`]), the validated run
//! configuration ([`config`]) and CRD rendering ([`crds`]); the reconciler
//! arrives with the controller issue.

pub mod cli;
pub mod config;
pub mod crds;
