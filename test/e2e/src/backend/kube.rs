//! The `kube` backend: a real etcd, kube-apiserver and kube-controller-manager,
//! built from their Go modules by `hack/substrates.sh`, started on 127.0.0.1 with a
//! PKI of their own. The admin user (client certificate, group `system:masters`)
//! drives the cluster; holdfast's binaries act as the ServiceAccounts the manifests
//! ship, by impersonation (see `Env::kubeconfig_for`).

use super::{
    Proc,
    pki::{ca, leaf},
    procs_logs, start_etcd, substrate_bin, wait_for, wait_readyz,
};
use anyhow::{Context, bail};
use rcgen::{ExtendedKeyUsagePurpose, KeyPair};
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

/// A running kube backend; everything stops when it drops.
pub struct KubeBackend {
    /// The admin kubeconfig (client certificate in `system:masters`).
    pub kubeconfig: PathBuf,
    /// The API server's URL.
    pub url: String,
    // Dropped in reverse: the controller manager, the API server, then etcd.
    procs: Vec<Proc>,
}

pub use super::pki::cert_kubeconfig;

impl KubeBackend {
    /// Starts etcd, kube-apiserver and kube-controller-manager with state in `dir`
    /// and waits until the API server is ready and the controller manager has made
    /// the `default` ServiceAccount (its controllers run).
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let bin = substrate_bin("kube")?;
        let etcd_bin = substrate_bin("etcd")?.join("etcd");
        std::fs::create_dir_all(dir)?;
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki)?;
        let w = |name: &str, data: &str| -> anyhow::Result<PathBuf> {
            let p = pki.join(name);
            std::fs::write(&p, data).with_context(|| p.display().to_string())?;
            Ok(p)
        };
        let ca = ca("holdfast-e2e kube CA")?;
        let ca_file = w("ca.crt", &ca.pem)?;
        w("ca.key", &ca.key_pem)?;
        let (srv_crt, srv_key) = leaf(
            &ca,
            "kube-apiserver",
            None,
            &[
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "10.96.0.1",
            ],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let srv_crt_f = w("apiserver.crt", &srv_crt)?;
        let srv_key_f = w("apiserver.key", &srv_key)?;
        let (adm_crt, adm_key) = leaf(
            &ca,
            "holdfast-e2e-admin",
            Some("system:masters"),
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let (kcm_crt, kcm_key) = leaf(
            &ca,
            "system:kube-controller-manager",
            None,
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        // The ServiceAccount token signing key (EC P-256, PKCS#8).
        let sa = KeyPair::generate()?;
        let sa_key = w("sa.key", &sa.serialize_pem())?;
        let sa_pub = w("sa.pub", &sa.public_key_pem())?;

        let mut procs = Vec::new();
        let etcd = start_etcd(&etcd_bin, dir).await?;
        let etcd_url = etcd.url.clone();
        procs.push(etcd.proc);

        let (apiserver, url) = super::start_on_free_port("kube-apiserver", dir, |port| {
            let mut c = Command::new(bin.join("kube-apiserver"));
            c.args([
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                &format!("--secure-port={port}"),
                &format!("--etcd-servers={etcd_url}"),
                &format!("--tls-cert-file={}", srv_crt_f.display()),
                &format!("--tls-private-key-file={}", srv_key_f.display()),
                &format!("--client-ca-file={}", ca_file.display()),
                &format!("--service-account-key-file={}", sa_pub.display()),
                &format!("--service-account-signing-key-file={}", sa_key.display()),
                "--service-account-issuer=https://kubernetes.default.svc",
                "--api-audiences=https://kubernetes.default.svc",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ]);
            (c, format!("https://127.0.0.1:{port}"))
        })
        .await?;
        procs.push(apiserver);
        let kubeconfig = dir.join("admin.kubeconfig");
        std::fs::write(
            &kubeconfig,
            cert_kubeconfig(&url, &ca.pem, &adm_crt, &adm_key),
        )?;
        let kubectl = bin.join("kubectl");
        wait_readyz(&kubectl, &kubeconfig)
            .await
            .with_context(|| procs_logs(dir, &LOGS))?;

        let kcm_kubeconfig = dir.join("kcm.kubeconfig");
        std::fs::write(
            &kcm_kubeconfig,
            cert_kubeconfig(&url, &ca.pem, &kcm_crt, &kcm_key),
        )?;
        let mut c = Command::new(bin.join("kube-controller-manager"));
        c.args([
            &format!("--kubeconfig={}", kcm_kubeconfig.display()),
            &format!("--authentication-kubeconfig={}", kcm_kubeconfig.display()),
            &format!("--authorization-kubeconfig={}", kcm_kubeconfig.display()),
            &format!("--service-account-private-key-file={}", sa_key.display()),
            &format!("--root-ca-file={}", ca_file.display()),
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            // No serving port: nothing scrapes it, and no port to race for.
            "--secure-port=0",
            "--controllers=*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-route,-persistentvolume-binder,-attachdetach,-persistentvolume-expander,-ephemeral-volume,-ttl,-bootstrapsigner,-tokencleaner",
            "--v=1",
        ]);
        procs.push(Proc::spawn("kube-controller-manager", dir, c)?);
        let kc = kubeconfig.clone();
        wait_for(
            "kube-controller-manager's default ServiceAccount",
            Duration::from_secs(120),
            || {
                Command::new(&kubectl)
                    .arg("--kubeconfig")
                    .arg(&kc)
                    .args(["get", "serviceaccount", "default", "-n", "default"])
                    .output()
                    .is_ok_and(|o| o.status.success())
            },
        )
        .await
        .with_context(|| procs_logs(dir, &LOGS))?;
        Ok(Self {
            kubeconfig,
            url,
            procs,
        })
    }

    /// Whether every process of the backend still runs.
    pub fn alive(&mut self) -> bool {
        self.procs.iter_mut().all(Proc::alive)
    }
}

impl Drop for KubeBackend {
    fn drop(&mut self) {
        while let Some(p) = self.procs.pop() {
            drop(p);
        }
    }
}

const LOGS: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];

/// Fails unless the backend's binaries are built (`hack/substrates.sh kube etcd`).
pub fn check_built() -> anyhow::Result<()> {
    for (c, b) in [
        ("kube", "kube-apiserver"),
        ("kube", "kube-controller-manager"),
        ("kube", "kubectl"),
        ("etcd", "etcd"),
    ] {
        let p = substrate_bin(c)?.join(b);
        if !p.is_file() {
            bail!("{} is not built: run hack/substrates.sh {c}", p.display());
        }
    }
    Ok(())
}
