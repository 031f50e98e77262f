//! The settings both binaries take and must agree on, declared once and flattened
//! into both command lines: one flag, one environment variable, one help text and
//! one default each.

use clap::{ArgAction, Args, builder::BoolishValueParser};
use std::path::PathBuf;

use crate::labels::{ProtectionLabel, ProtectionLabels};

/// What is protected and how strictly: the controller installs webhooks for these
/// settings and the webhook judges by them; the webhook refuses to serve while
/// they differ from those the controller published on its configuration.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtectionArgs {
    /// Extra protection label, KEY or KEY=VALUE[,VALUE...] (repeatable; a key alone
    /// protects with Always, true and Cascading). holdfast.dev/protected
    /// (Always,true,Cascading) is always in force; giving it replaces its values.
    /// Several labels in one value (and in the environment) are separated by ';'.
    #[arg(
        long = "protection-label",
        value_name = "KEY[=VALUE,...]",
        action = ArgAction::Append,
        value_delimiter = ';',
        env = "HOLDFAST_PROTECTION_LABELS"
    )]
    pub protection_labels: Vec<ProtectionLabel>,

    /// Strict mode: deny UPDATEs that remove a protection label unless the stored
    /// object carries holdfast.dev/strict-exempt="true".
    #[arg(long, action = ArgAction::SetTrue, value_parser = BoolishValueParser::new(), env = "HOLDFAST_STRICT")]
    pub strict: bool,
}

impl ProtectionArgs {
    /// The protection labels in force: holdfast.dev/protected and the extra ones.
    pub fn labels(&self) -> ProtectionLabels {
        ProtectionLabels::with_extra(self.protection_labels.clone())
    }

    /// Refuses a label key given twice (its values would silently be the last
    /// flag's): both binaries start only with settings they read alike.
    pub fn check(&self) -> Result<(), String> {
        let mut seen: Vec<&str> = Vec::new();
        for label in &self.protection_labels {
            if seen.contains(&label.key.as_str()) {
                return Err(format!(
                    "--protection-label {} is given more than once; list all its values in \
                     one flag (KEY=V1,V2)",
                    label.key
                ));
            }
            seen.push(&label.key);
        }
        Ok(())
    }
}

/// kcp: the holdfast APIExport both binaries follow, and the credentials for the
/// virtual workspace URLs its endpoint slice names.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct KcpArgs {
    /// kcp: name of the holdfast APIExport (its APIExportEndpointSlice, of the same
    /// name in the workspace the kubeconfig points at, gives the virtual workspace
    /// URLs).
    #[arg(long = "apiexport", value_name = "NAME", default_value = "holdfast.dev", value_parser = parse_api_export, env = "HOLDFAST_APIEXPORT")]
    pub api_export: String,

    /// kcp: kubeconfig whose credentials and CA are used for virtual-workspace URLs
    /// (from APIExportEndpointSlices) when they differ from the front-proxy's; its
    /// server is not used (default: the --kubeconfig credentials).
    #[arg(
        long,
        value_name = "FILE",
        env = "HOLDFAST_VIRTUAL_WORKSPACE_KUBECONFIG"
    )]
    pub virtual_workspace_kubeconfig: Option<PathBuf>,
}

/// Parses and checks an APIExport name (a DNS subdomain, at most 253 characters).
pub fn parse_api_export(s: &str) -> Result<String, String> {
    if crate::api::validation::dns_subdomain(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "APIExport name {s:?} is not a DNS subdomain (lowercase letters, digits, '-' \
             and '.', starting and ending with a letter or digit)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Both {
        #[command(flatten)]
        protection: ProtectionArgs,
        #[command(flatten)]
        kcp: KcpArgs,
    }

    #[test]
    fn flags_parse_into_one_struct() {
        let b = Both::try_parse_from([
            "x",
            "--strict",
            "--protection-label",
            "team.io/keep=yes;other.io/hold",
            "--apiexport",
            "holdfast.example",
        ])
        .expect("parses");
        assert!(b.protection.strict);
        assert_eq!(b.protection.protection_labels.len(), 2);
        assert_eq!(b.kcp.api_export, "holdfast.example");
        let keys: Vec<String> = b
            .protection
            .labels()
            .iter()
            .map(|l| l.key.clone())
            .collect();
        assert!(
            keys.iter().any(|k| k == "holdfast.dev/protected"),
            "{keys:?}"
        );
    }

    #[test]
    fn a_label_given_twice_is_refused() {
        let b =
            Both::try_parse_from(["x", "--protection-label", "a.io/k=x;a.io/k=y"]).expect("parses");
        let e = b.protection.check().expect_err("refused");
        assert!(e.contains("a.io/k is given more than once"), "{e}");
    }

    #[test]
    fn invalid_apiexport_names_are_refused() {
        for bad in ["", "Holdfast", "a..b", "-a", "a_b"] {
            assert!(parse_api_export(bad).is_err(), "{bad:?}");
        }
        assert!(parse_api_export("holdfast.dev").is_ok());
    }
}
