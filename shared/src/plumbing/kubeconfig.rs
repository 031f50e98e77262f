//! Kubeconfig loading: a named file, else `$KUBECONFIG`, `~/.kube/config` or
//! the in-cluster configuration.

use std::path::Path;

use anyhow::Context as _;

/// The client configuration of `kubeconfig`, else inferred.
pub async fn load(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!(redacted(&e)))
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!(redacted(&e)))
                .with_context(|| format!("loading kubeconfig {}", path.display()))
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig or in-cluster configuration"),
    }
}

/// What is wrong with a kubeconfig, without anything it holds: a parse error
/// quotes the input, a certificate error the data it could not read.
pub fn redacted(e: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as E;
    match e {
        E::ReadConfig(io, _) => format!("it cannot be read ({})", io.kind()),
        E::Parse(_) => "it is not YAML of a kubeconfig (its contents are not shown)".to_string(),
        E::LoadCertificateAuthority(_) | E::ParseCertificates(_) => {
            "its certificate authority cannot be read (its contents are not shown)".to_string()
        }
        E::LoadClientCertificate(_) | E::LoadClientKey(_) => {
            "its client certificate or key cannot be read (its contents are not shown)".to_string()
        }
        // The others name no data of the file.
        other => other.to_string(),
    }
}

/// A client for `kubeconfig`, else inferred.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(load(kubeconfig).await?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_file_names_the_path() {
        let err = load(Some(Path::new("/nonexistent/holdfast-kubeconfig")))
            .await
            .expect_err("no such file");
        assert_eq!(
            err.to_string(),
            "reading kubeconfig /nonexistent/holdfast-kubeconfig"
        );
    }

    #[tokio::test]
    async fn a_broken_kubeconfig_is_not_quoted() {
        let dir = std::env::temp_dir().join(format!("holdfast-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("kubeconfig");
        std::fs::write(&path, "users: [{name: u, user: {token: SECRET-TOKEN}}\n").expect("write");
        let err = load(Some(&path)).await.expect_err("not a kubeconfig");
        let chain = format!("{err:#}");
        assert!(!chain.contains("SECRET-TOKEN"), "{chain}");
        assert!(
            chain.ends_with("it is not YAML of a kubeconfig (its contents are not shown)"),
            "{chain}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
