//! Kubeconfig loading: a named file, else `$KUBECONFIG`, `~/.kube/config` or
//! the in-cluster configuration.

use std::path::Path;

use anyhow::Context as _;

/// The client configuration of `kubeconfig`, else inferred.
pub async fn load(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig or in-cluster configuration"),
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
}
