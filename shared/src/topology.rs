//! Where holdfast runs: plain Kubernetes (also a Karmada control plane) or kcp.

use std::{fmt, str::FromStr};

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
