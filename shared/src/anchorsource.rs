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

/// Why a source cannot be used (before any connection is tried).
pub fn namespace_problem(source: &AnchorSourceRef, allowed: &str) -> Option<String> {
    (source.namespace != allowed)
        .then(|| format!("its Secret must be in holdfast's namespace {allowed}"))
}

/// The kubeconfig in `secret` (the Secret of `source`; `None`: it does not exist).
pub fn kubeconfig(
    source: &AnchorSourceRef,
    secret: Option<&Secret>,
) -> Result<kube::config::Kubeconfig, String> {
    let secret = secret.ok_or_else(|| "the Secret does not exist".to_string())?;
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&source.key))
        .ok_or_else(|| format!("the Secret has no key {}", source.key))?;
    let text =
        std::str::from_utf8(&data.0).map_err(|_| format!("key {} is not text", source.key))?;
    kube::config::Kubeconfig::from_yaml(text)
        .map_err(|e| format!("key {} holds no kubeconfig: {e}", source.key))
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
        assert_eq!(
            kubeconfig(&s, None).err().as_deref(),
            Some("the Secret does not exist")
        );
        assert_eq!(
            kubeconfig(&s, Some(&secret("other", b"x")))
                .err()
                .as_deref(),
            Some("the Secret has no key kubeconfig")
        );
        assert_eq!(
            kubeconfig(&s, Some(&secret("kubeconfig", &[0xff, 0xfe])))
                .err()
                .as_deref(),
            Some("key kubeconfig is not text")
        );
        let bad = kubeconfig(&s, Some(&secret("kubeconfig", b"clusters: 7")));
        assert!(
            bad.as_ref()
                .is_err_and(|e| e.starts_with("key kubeconfig holds no kubeconfig: ")),
            "{bad:?}"
        );
        let good = b"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:6443'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n";
        let kc = kubeconfig(&s, Some(&secret("kubeconfig", good))).expect("kubeconfig");
        assert_eq!(kc.current_context.as_deref(), Some("x"));
    }
}
