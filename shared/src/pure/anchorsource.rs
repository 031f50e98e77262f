//! Anchor sources: the kubeconfig Secret an AnchorRule names for the cluster its
//! anchors live in. Only Secrets in holdfast's own namespace are used: an
//! AnchorRule is cluster-scoped, and whoever may write one must not be able to
//! make holdfast use the credentials of a Secret in any namespace.

use crate::registry::AnchorSourceRef;
use k8s_openapi::api::core::v1::Secret;
use std::time::Duration;

/// How long reading an anchor source's kubeconfig Secret, or probing the source with
/// it, may take before the source counts as unreachable.
pub const SOURCE_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The namespace anchor-source Secrets must be in: `$POD_NAMESPACE`, else
/// `holdfast-system`.
pub fn allowed_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "holdfast-system".to_string())
}

/// holdfast's own Secrets, never an anchor source: whoever may write an AnchorRule
/// must not make holdfast read its serving key or its signing key as a kubeconfig.
pub const RESERVED_SECRETS: [&str; 2] = ["holdfast-webhook-tls", crate::names::DEFERRED_KEY_SECRET];

/// Why a source cannot be used (before any connection is tried).
pub fn namespace_problem(source: &AnchorSourceRef, allowed: &str) -> Option<String> {
    if source.namespace != allowed {
        return Some(format!(
            "its Secret must be in holdfast's namespace {allowed}"
        ));
    }
    RESERVED_SECRETS.contains(&source.name.as_str()).then(|| {
        format!(
            "Secret {} is holdfast's own and is no anchor source",
            source.name
        )
    })
}

/// Why a kubeconfig Secret cannot be used. Every message names the Secret's key
/// and the kind of problem, never anything the Secret holds (a parse error quotes
/// its input: the contents of whatever key the AnchorRule names).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The Secret does not exist.
    #[error("the Secret does not exist")]
    NoSecret,
    /// The key is not in the Secret.
    #[error("the Secret has no key {0}")]
    NoKey(String),
    /// The key is not UTF-8 text.
    #[error("key {0} is not text")]
    NotText(String),
    /// The key is not a kubeconfig.
    #[error(
        "key {0} holds no kubeconfig (it is not YAML of a kubeconfig; its contents are not shown)"
    )]
    NotKubeconfig(String),
    /// The kubeconfig asks for something holdfast refuses to do with it.
    #[error(
        "key {key}: {what} (an anchor source's kubeconfig may hold a token or a client certificate, inline, and nothing that runs a program or reads a file)"
    )]
    Refused {
        /// The Secret's key.
        key: String,
        /// What is refused.
        what: String,
    },
    /// The kubeconfig cannot be turned into a client.
    #[error(
        "the kubeconfig in key {0} cannot be used (its context, server or inline certificates are missing or invalid; its contents are not shown)"
    )]
    Unusable(String),
}

/// The kubeconfig in `secret` (the Secret of `source`; `None`: it does not exist),
/// accepted only when it authenticates with a token or a client certificate,
/// inline ([`credentials_problem`]).
pub fn kubeconfig(
    source: &AnchorSourceRef,
    secret: Option<&Secret>,
) -> Result<kube::config::Kubeconfig, SourceError> {
    let key = || source.key.clone();
    let secret = secret.ok_or(SourceError::NoSecret)?;
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&source.key))
        .ok_or_else(|| SourceError::NoKey(key()))?;
    let text = std::str::from_utf8(&data.0).map_err(|_| SourceError::NotText(key()))?;
    // The parse error is dropped whole: it quotes the input.
    let kc =
        kube::config::Kubeconfig::from_yaml(text).map_err(|_| SourceError::NotKubeconfig(key()))?;
    if let Some(what) = credentials_problem(&kc) {
        return Err(SourceError::Refused { key: key(), what });
    }
    Ok(kc)
}

/// A client configuration from an accepted kubeconfig; the error names the key only.
pub async fn client_config(
    source: &AnchorSourceRef,
    kc: kube::config::Kubeconfig,
) -> Result<kube::Config, SourceError> {
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|_| SourceError::Unusable(source.key.clone()))
}

/// What a kubeconfig asks for that holdfast refuses, if anything: credential
/// plugins (`exec`, `auth-provider`: they would run inside holdfast, whose
/// identities may read and impersonate much), files (`tokenFile`,
/// `client-certificate`, `client-key`, `certificate-authority`: they would send
/// holdfast's own files, its ServiceAccount token among them, to the server named),
/// basic auth and impersonation. Names the user or cluster entry only.
pub fn credentials_problem(kc: &kube::config::Kubeconfig) -> Option<String> {
    for user in &kc.auth_infos {
        let Some(a) = &user.auth_info else { continue };
        let refused = [
            (a.exec.is_some(), "an exec credential plugin"),
            (a.auth_provider.is_some(), "an auth-provider"),
            (a.token_file.is_some(), "a tokenFile"),
            (a.client_certificate.is_some(), "a client-certificate file"),
            (a.client_key.is_some(), "a client-key file"),
            (
                a.username.is_some() || a.password.is_some(),
                "basic authentication",
            ),
            (
                a.impersonate.is_some() || a.impersonate_groups.is_some(),
                "impersonation",
            ),
        ];
        if let Some((_, what)) = refused.iter().find(|(bad, _)| *bad) {
            return Some(format!(
                "user {:?} uses {what}, which is refused",
                user.name
            ));
        }
    }
    for cluster in &kc.clusters {
        if cluster
            .cluster
            .as_ref()
            .is_some_and(|c| c.certificate_authority.is_some())
        {
            return Some(format!(
                "cluster {:?} names a certificate-authority file, which is refused (use certificate-authority-data)",
                cluster.name
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn source() -> AnchorSourceRef {
        AnchorSourceRef {
            namespace: "holdfast-system".into(),
            name: "control".into(),
            key: "kubeconfig".into(),
        }
    }

    fn secret(key: &str, value: &[u8]) -> Secret {
        Secret {
            data: Some([(key.to_string(), ByteString(value.to_vec()))].into()),
            ..Default::default()
        }
    }

    /// The attack of issue 31: an AnchorRule pointing at the managed CA's private
    /// key. Whatever a key holds, no error shows any of it.
    #[test]
    fn no_error_shows_what_the_secret_holds() {
        let s = AnchorSourceRef {
            key: "ca.key".into(),
            ..source()
        };
        let pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n";
        for contents in [
            pem.to_string(),
            format!("apiVersion: v1\nkind: Config\nclusters: {pem:?}\n"),
            "users:\n- name: u\n  user: {token: SECRET-TOKEN, exec: {command: /bin/sh}}\n"
                .to_string(),
            "a: [SECRET-TOKEN".to_string(),
        ] {
            let e = kubeconfig(&s, Some(&secret("ca.key", contents.as_bytes())))
                .expect_err("refused")
                .to_string();
            for leaked in ["PRIVATE KEY", "MIIEvQ", "SECRET-TOKEN", "/bin/sh"] {
                assert!(!e.contains(leaked), "{e}");
            }
            assert!(e.starts_with("key ca.key"), "{e}");
        }
        assert_eq!(
            namespace_problem(
                &AnchorSourceRef {
                    name: "holdfast-webhook-tls".into(),
                    ..source()
                },
                "holdfast-system"
            )
            .as_deref(),
            Some("Secret holdfast-webhook-tls is holdfast's own and is no anchor source")
        );
    }

    #[test]
    fn only_inline_tokens_and_client_certificates_are_accepted() {
        let s = source();
        let with_user = |user: &str| {
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:6443'}}\nusers:\n- name: u\n  user: {user}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
            )
        };
        for ok in [
            "{token: t}",
            "{client-certificate-data: Y2VydA==, client-key-data: a2V5}",
        ] {
            assert!(
                kubeconfig(&s, Some(&secret("kubeconfig", with_user(ok).as_bytes()))).is_ok(),
                "{ok}"
            );
        }
        for (bad, what) in [
            (
                "{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, id]}}",
                "an exec credential plugin",
            ),
            ("{auth-provider: {name: oidc}}", "an auth-provider"),
            (
                "{tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}",
                "a tokenFile",
            ),
            (
                "{client-certificate: /etc/x.crt, client-key-data: a2V5}",
                "a client-certificate file",
            ),
            ("{client-key: /etc/x.key}", "a client-key file"),
            ("{username: a, password: b}", "basic authentication"),
            ("{token: t, as: system:admin}", "impersonation"),
        ] {
            let e = kubeconfig(&s, Some(&secret("kubeconfig", with_user(bad).as_bytes())))
                .expect_err(bad)
                .to_string();
            assert_eq!(
                e,
                format!(
                    "key kubeconfig: user \"u\" uses {what}, which is refused (an anchor \
                     source's kubeconfig may hold a token or a client certificate, inline, \
                     and nothing that runs a program or reads a file)"
                )
            );
        }
        let ca_file = with_user("{token: t}").replace(
            "{server: 'https://127.0.0.1:6443'}",
            "{server: 'https://127.0.0.1:6443', certificate-authority: /etc/ca.crt}",
        );
        let e = kubeconfig(&s, Some(&secret("kubeconfig", ca_file.as_bytes())))
            .expect_err("ca file")
            .to_string();
        assert!(e.contains("certificate-authority file"), "{e}");
    }

    #[test]
    fn secrets_are_read_from_holdfasts_namespace_only() {
        assert_eq!(namespace_problem(&source(), "holdfast-system"), None);
        assert_eq!(
            namespace_problem(&source(), "elsewhere").as_deref(),
            Some("its Secret must be in holdfast's namespace elsewhere")
        );
    }

    #[test]
    fn unusable_secrets_say_why() {
        let s = source();
        let err = |s: &AnchorSourceRef, secret: Option<&Secret>| {
            kubeconfig(s, secret).err().map(|e| e.to_string())
        };
        assert_eq!(err(&s, None).as_deref(), Some("the Secret does not exist"));
        assert_eq!(
            err(&s, Some(&secret("other", b"x"))).as_deref(),
            Some("the Secret has no key kubeconfig")
        );
        assert_eq!(
            err(&s, Some(&secret("kubeconfig", &[0xff, 0xfe]))).as_deref(),
            Some("key kubeconfig is not text")
        );
        assert_eq!(
            err(&s, Some(&secret("kubeconfig", b"clusters: 7"))).as_deref(),
            Some(
                "key kubeconfig holds no kubeconfig (it is not YAML of a kubeconfig; its \
                 contents are not shown)"
            )
        );
        let good = b"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
        let kc = kubeconfig(&s, Some(&secret("kubeconfig", good))).expect("kubeconfig");
        assert_eq!(kc.current_context.as_deref(), Some("x"));
    }
}
