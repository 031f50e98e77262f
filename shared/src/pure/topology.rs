//! Where holdfast runs: plain Kubernetes (also a Karmada control plane) or kcp.
//!
//! The process's topology also decides what the annotation `kcp.io/cluster` means
//! ([`honours_logical_cluster`]): on kcp, kcp itself writes it on every stored
//! object; anywhere else anyone who may write an object may set it, so there it
//! means nothing (docs/security.md, "kcp.io/cluster").

use std::{fmt, str::FromStr, sync::OnceLock};

/// The topology this process runs in, set once by each binary's `run`.
static PROCESS: OnceLock<Topology> = OnceLock::new();

/// Fixes this process's topology (each binary at start, before any watch or
/// review). The first call wins; a later call with another topology is refused.
pub fn set_process_topology(t: Topology) -> Result<(), ConflictingTopology> {
    let got = *PROCESS.get_or_init(|| t);
    if got == t {
        Ok(())
    } else {
        Err(ConflictingTopology { set: got, asked: t })
    }
}

/// A second, different [`set_process_topology`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the process's topology is {set} already, not {asked}")]
pub struct ConflictingTopology {
    /// The topology set first.
    pub set: Topology,
    /// The one asked for later.
    pub asked: Topology,
}

/// Whether the annotation `kcp.io/cluster` names an object's logical cluster in
/// this process: false once the process is fixed to [`Topology::Kubernetes`]
/// (anyone who may patch an object may set it there). A library user that never
/// fixes the topology (unit tests of kcp plumbing) reads it; the pure policy
/// evaluation does not rely on this and asks its own `PolicyConfig::kcp`.
pub fn honours_logical_cluster() -> bool {
    PROCESS.get() != Some(&Topology::Kubernetes)
}

/// The deployment topology, `--topology kubernetes|kcp`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "runtime", derive(clap::ValueEnum))]
pub enum Topology {
    /// One kube-apiserver (plain Kubernetes or a Karmada control plane).
    #[default]
    #[cfg_attr(feature = "runtime", value(alias = "karmada"))]
    Kubernetes,
    /// kcp: workspaces, APIExports, virtual workspaces behind a front-proxy.
    Kcp,
}

/// An unknown topology name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown topology {0:?}: expected kubernetes or kcp")]
pub struct UnknownTopology(pub String);

impl FromStr for Topology {
    type Err = UnknownTopology;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "kubernetes" | "karmada" => Ok(Topology::Kubernetes),
            "kcp" => Ok(Topology::Kcp),
            _ => Err(UnknownTopology(s.to_string())),
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Topology::Kubernetes => "kubernetes",
            Topology::Kcp => "kcp",
        })
    }
}

/// A kcp logical cluster name or workspace path: lowercase letters, digits, `-` and
/// `:` separators, at most 253 characters.
pub fn is_logical_cluster_name(lc: &str) -> bool {
    !lc.is_empty()
        && lc.len() <= 253
        && lc
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b':')
}

/// Whether `path` is `<logical cluster>(:<workspace name>)*`, each segment a DNS label.
pub fn is_workspace_path(path: &str) -> bool {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    path.len() <= 1024 && path.split(':').all(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!("kubernetes".parse(), Ok(Topology::Kubernetes));
        assert_eq!("karmada".parse(), Ok(Topology::Kubernetes));
        assert_eq!("KCP".parse(), Ok(Topology::Kcp));
        assert!("openshift".parse::<Topology>().is_err());
        assert_eq!(Topology::Kcp.to_string(), "kcp");
    }
}
