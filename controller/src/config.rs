//! The validated configuration of `holdfast-controller run`, and the parsers of
//! the composite flag values (`NAMESPACE/NAME:PORT`, `NAMESPACE/NAME`).

use std::{fmt, net::SocketAddr, path::PathBuf, str::FromStr};

use holdfast_shared::{api::validation::dns_label, labels::ProtectionLabels, names::VALIDATE_PATH};
use url::Url;

pub use holdfast_shared::{topology::Topology, webhookconfig::FailurePolicy};

/// Checks a DNS-1123 label (namespace names, most object names).
fn check_dns_label(what: &str, s: &str) -> Result<(), String> {
    if dns_label(s) {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?} is not a valid name (lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)"
        ))
    }
}

/// Checks a DNS-1123 subdomain (Secret names, APIExport names).
fn check_dns_subdomain(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err(format!("{what} {s:?} must be 1 to 253 characters"));
    }
    for part in s.split('.') {
        check_dns_label(what, part).map_err(|_| {
            format!("{what} {s:?} is not a valid DNS subdomain (lowercase labels separated by '.')")
        })?;
    }
    Ok(())
}

/// `NAMESPACE/REST` split at the first '/', the namespace checked (`form`: the
/// syntax, for the message).
fn namespaced<'a>(s: &'a str, form: &str) -> Result<(&'a str, &'a str), String> {
    let (namespace, rest) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?} is not of the form {form}"))?;
    check_dns_label("namespace", namespace)?;
    Ok((namespace, rest))
}

/// A Service named as `NAMESPACE/NAME:PORT` (`:PORT` optional, default 443).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRef {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the Service.
    pub name: String,
    /// Service port.
    pub port: u16,
}

impl FromStr for ServiceRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (namespace, rest) = namespaced(s, "NAMESPACE/NAME:PORT")?;
        let (name, port) = match rest.rsplit_once(':') {
            Some((name, port)) => {
                let port: u16 = port
                    .parse()
                    .map_err(|_| format!("port {port:?} is not a number from 1 to 65535"))?;
                if port == 0 {
                    return Err("port 0 is not a valid Service port (1 to 65535)".to_string());
                }
                (name, port)
            }
            None => (rest, 443),
        };
        check_dns_label("service name", name)?;
        if !name.as_bytes()[0].is_ascii_lowercase() {
            return Err(format!("service name {name:?} must start with a letter"));
        }
        Ok(Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            port,
        })
    }
}

impl fmt::Display for ServiceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.namespace, self.name, self.port)
    }
}

/// A Secret named as `NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

impl FromStr for SecretRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (namespace, name) = namespaced(s, "NAMESPACE/NAME")?;
        check_dns_subdomain("secret name", name)?;
        Ok(Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Parses and checks a webhook URL: `https`, a host, no user info, query or
/// fragment (the API server's rules for `clientConfig.url`). An empty path
/// becomes the admission path `/validate`.
pub fn parse_webhook_url(s: &str) -> Result<Url, String> {
    let mut url = Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "{s:?}: the API server calls webhooks over https only"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{s:?}: the URL has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{s:?}: user info is not allowed in a webhook URL"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{s:?}: query and fragment are not allowed in a webhook URL"
        ));
    }
    if url.path().is_empty() || url.path() == "/" {
        url.set_path(VALIDATE_PATH);
    }
    Ok(url)
}

pub use holdfast_shared::runtime::args::parse_api_export;

/// How the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookEndpoint {
    /// `clientConfig.url`.
    Url(Url),
    /// `clientConfig.service` (path `/validate`).
    Service(ServiceRef),
}

impl fmt::Display for WebhookEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WebhookEndpoint::Url(u) => write!(f, "url {u}"),
            WebhookEndpoint::Service(s) => write!(f, "service {s} path {VALIDATE_PATH}"),
        }
    }
}

/// Where the webhook's `caBundle` comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaSource {
    /// A self-signed CA managed (and rotated) by the controller in the default
    /// Secret (`$POD_NAMESPACE/holdfast-webhook-tls`).
    Managed,
    /// A PEM bundle read from a file.
    BundleFile(PathBuf),
    /// A self-signed CA managed (and rotated) by the controller in this Secret.
    Secret(SecretRef),
}

impl fmt::Display for CaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaSource::Managed => f.write_str("managed self-signed CA"),
            CaSource::BundleFile(p) => write!(f, "file {}", p.display()),
            CaSource::Secret(s) => write!(f, "secret {s}"),
        }
    }
}

/// The validated configuration of `holdfast-controller run`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunConfig {
    /// Kubeconfig file; `None`: in-cluster config or `$KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
    /// Topology.
    pub topology: Topology,
    /// How the API server reaches the webhook.
    pub webhook: WebhookEndpoint,
    /// Where the `caBundle` comes from.
    pub ca: CaSource,
    /// `failurePolicy` of the installed webhooks.
    pub failure_policy: FailurePolicy,
    /// `timeoutSeconds` of the installed webhooks (1..=30).
    pub timeout_seconds: i32,
    /// Remove the installed webhook configuration(s) on shutdown.
    pub cleanup_on_shutdown: bool,
    /// Global strict mode for the label policy.
    pub strict: bool,
    /// Install the backstop ValidatingAdmissionPolicy (Kubernetes topology).
    pub backstop: bool,
    /// Grant read of Secrets for label containment without a policy naming them.
    pub read_secrets: bool,
    /// Protection labels in force (built-in key plus `--protection-label`).
    pub protection_labels: ProtectionLabels,
    /// Run leader election.
    pub leader_elect: bool,
    /// Groups that may change holdfast's own installation besides the controller.
    pub admin_groups: Vec<String>,
    /// Name of the holdfast APIExport (kcp).
    pub api_export: String,
    /// kcp: the workspace exporting `tenancy.kcp.io`, where workspace containment's
    /// configuration goes (`None`: off).
    pub tenancy_workspace: Option<String>,
    /// kcp: kubeconfig for virtual-workspace URLs (credentials and CA), when
    /// they differ from the front-proxy's.
    pub virtual_workspace_kubeconfig: Option<PathBuf>,
    /// Listen address of `/healthz` and `/readyz`.
    pub probe_listen: SocketAddr,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every one of `bad` is refused by `parse`.
    fn all_rejected<T: fmt::Debug>(parse: impl Fn(&str) -> Result<T, String>, bad: &[&str]) {
        for b in bad {
            assert!(parse(b).is_err(), "{b:?} should be rejected");
        }
    }

    #[test]
    fn service_ref() {
        let s: ServiceRef = "holdfast-system/holdfast-webhook:8443"
            .parse()
            .expect("valid");
        assert_eq!(
            (s.namespace.as_str(), s.name.as_str(), s.port),
            ("holdfast-system", "holdfast-webhook", 8443)
        );
        assert_eq!(s.to_string(), "holdfast-system/holdfast-webhook:8443");
        let s: ServiceRef = "ns/svc".parse().expect("valid");
        assert_eq!(s.port, 443);
        all_rejected(
            str::parse::<ServiceRef>,
            &[
                "",
                "svc",
                "/svc",
                "ns/",
                "ns/svc:",
                "ns/svc:0",
                "ns/svc:65536",
                "ns/svc:x",
                "ns/Svc",
                "ns/1svc",
                "n_s/svc",
                "ns/svc/x",
            ],
        );
    }

    #[test]
    fn secret_ref() {
        let s: SecretRef = "holdfast-system/holdfast.ca".parse().expect("valid");
        assert_eq!(s.to_string(), "holdfast-system/holdfast.ca");
        all_rejected(
            str::parse::<SecretRef>,
            &["", "x", "/x", "ns/", "ns/X", "ns/a/b"],
        );
    }

    #[test]
    fn webhook_url() {
        assert_eq!(
            parse_webhook_url("https://h.example.com")
                .expect("valid")
                .as_str(),
            "https://h.example.com/validate"
        );
        assert_eq!(
            parse_webhook_url("https://h:8443/custom/validate")
                .expect("valid")
                .as_str(),
            "https://h:8443/custom/validate"
        );
        all_rejected(
            parse_webhook_url,
            &[
                "http://h",
                "https://u:p@h/",
                "https://h/?a=b",
                "https://h/#f",
                "h:443",
                "",
            ],
        );
    }
}
