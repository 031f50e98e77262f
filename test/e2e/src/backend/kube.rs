//! The `kube` backend: a real etcd, kube-apiserver and kube-controller-manager,
//! built from their Go modules by `hack/substrates.sh`, started on 127.0.0.1 with a
//! PKI of their own. The admin user (client certificate, group `system:masters`)
//! drives the cluster; holdfast's binaries act as the ServiceAccounts the manifests
//! ship, by impersonation (see `Env::kubeconfig_for`).

use super::{Proc, substrate_bin, wait_for};
use anyhow::{Context, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
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

struct Ca {
    pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(cn: &str) -> anyhow::Result<Ca> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    let cert = p.self_signed(&key)?;
    let key_pem = key.serialize_pem();
    Ok(Ca {
        pem: cert.pem(),
        key_pem,
        issuer: Issuer::new(p, key),
    })
}

/// A certificate signed by `ca`: (cert PEM, key PEM).
fn leaf(
    ca: &Ca,
    cn: &str,
    org: Option<&str>,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> anyhow::Result<(String, String)> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    p.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        p.distinguished_name.push(DnType::OrganizationName, o);
    }
    p.extended_key_usages = vec![usage];
    let cert = p.signed_by(&key, &ca.issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A kubeconfig for `server` with a client certificate.
pub fn cert_kubeconfig(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> String {
    let b64 = crate::base64_encode;
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kube", "cluster": {
            "server": server,
            "certificate-authority-data": b64(ca_pem.as_bytes()),
        }}],
        "users": [{"name": "user", "user": {
            "client-certificate-data": b64(cert_pem.as_bytes()),
            "client-key-data": b64(key_pem.as_bytes()),
        }}],
        "contexts": [{"name": "kube", "context": {"cluster": "kube", "user": "user", "namespace": "default"}}],
        "current-context": "kube",
    })
    .to_string()
}

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
        let kc = kubeconfig.clone();
        wait_for("kube-apiserver /readyz", Duration::from_secs(120), || {
            let out = Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kc)
                .args(["get", "--raw", "/readyz"])
                .output();
            matches!(out, Ok(o) if o.status.success() && o.stdout.starts_with(b"ok"))
        })
        .await
        .with_context(|| procs_logs(dir))?;

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
        .with_context(|| procs_logs(dir))?;
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

struct Etcd {
    proc: Proc,
    url: String,
}

async fn start_etcd(bin: &Path, dir: &Path) -> anyhow::Result<Etcd> {
    let data = dir.join("etcd");
    let (proc, url) = super::start_on_free_port("etcd", dir, |port| {
        // A one-member cluster talks to no peer, but etcd binds the peer port
        // too: a second free port (a clash is retried like the client port's).
        let peer = format!("http://127.0.0.1:{}", crate::free_port().unwrap_or(0));
        let client = format!("http://127.0.0.1:{port}");
        let mut c = Command::new(bin);
        c.args([
            "--name=default",
            &format!("--data-dir={}", data.display()),
            &format!("--listen-client-urls={client}"),
            &format!("--advertise-client-urls={client}"),
            &format!("--listen-peer-urls={peer}"),
            &format!("--initial-advertise-peer-urls={peer}"),
            &format!("--initial-cluster=default={peer}"),
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]);
        (c, client)
    })
    .await?;
    Ok(Etcd { proc, url })
}

fn procs_logs(dir: &Path) -> String {
    let mut out = String::new();
    for name in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        out.push_str(&format!("\n--- {name} (last lines)\n"));
        for l in tail.into_iter().rev() {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

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
