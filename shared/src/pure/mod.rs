//! The pure half: holdfast's API types, what policies decide and why, and the
//! objects holdfast installs, computed without I/O. Nothing here holds an API
//! client, a watch or a runtime (`tests/layout.rs` checks it): every input
//! arrives as a value, from an admission request or a [`policy::ClusterView`]
//! the webhook implements.

pub mod anchorsource;
pub mod api;
pub mod backstop;
pub mod deferred;
pub mod enforcement;
pub mod fieldpath;
pub mod index;
pub mod labels;
pub mod names;
pub mod policy;
pub mod registry;
pub mod report;
pub mod request_signature;
pub mod review;
pub mod selector;
pub mod selfprotection;
pub mod topology;
pub mod unreviewed;
pub mod webhookconfig;
pub mod workspaces;
