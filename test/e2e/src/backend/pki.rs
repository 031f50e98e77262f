//! The PKI of a real backend: CAs and certificates made with rcgen, and
//! kubeconfigs authenticating with a client certificate.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

/// A certificate authority: its certificate and key (PEM) and the issuer signing
/// with it.
pub struct Ca {
    /// The CA certificate (PEM).
    pub pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A fresh self-signed CA named `cn`.
pub fn ca(cn: &str) -> anyhow::Result<Ca> {
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
pub fn leaf(
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
