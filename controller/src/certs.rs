//! The webhook's certificates and the caBundle.
//!
//! `--ca-bundle-file`: the bundle is read from the file and re-read when it
//! changes. `--ca-secret NAMESPACE/NAME`: the controller manages that Secret —
//! a self-signed CA (`ca.crt`, `ca.key`) and the webhook's serving certificate
//! signed by it (`tls.crt`, `tls.key`), SANs for the Service DNS names and/or the
//! URL host — renews each before it expires and keeps the caBundle in step.
//! When the CA rotates, `ca.crt` carries the new and the previous CA until the
//! previous one expires, so the webhook's old certificate stays trusted until it
//! has reloaded the new one.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use holdfast_shared::webhookconfig::InstallOptions;
use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{Api, Client, api::PostParams};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tokio::sync::watch;

use crate::{
    config::{SecretRef, WebhookEndpoint},
    run::Tuning,
};

/// Annotation with the CA's expiry (RFC 3339).
pub const CA_NOT_AFTER: &str = "holdfast.dev/ca-not-after";
/// Annotation with the serving certificate's expiry (RFC 3339).
pub const CERT_NOT_AFTER: &str = "holdfast.dev/cert-not-after";
/// Annotation with the previous CA's expiry (RFC 3339), while it is still in `ca.crt`.
pub const PREVIOUS_CA_NOT_AFTER: &str = "holdfast.dev/previous-ca-not-after";

/// How often a `--ca-bundle-file` is re-read.
const CA_FILE_POLL: Duration = Duration::from_secs(2);
/// How far before "now" a new certificate's validity starts, for clocks slightly behind.
const CLOCK_SKEW: Duration = Duration::from_secs(60);
/// Bounds of the managed CA Secret's re-check period (a quarter of `renew_before`).
const SECRET_CHECK_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// Follows a CA bundle file: re-reads it every [`CA_FILE_POLL`] and publishes changes.
pub async fn follow_file(path: PathBuf, tx: watch::Sender<InstallOptions>) {
    loop {
        tokio::time::sleep(CA_FILE_POLL).await;
        match std::fs::read(&path) {
            Ok(bundle) if !bundle.is_empty() => {
                tx.send_if_modified(|o| {
                    if o.ca_bundle == bundle {
                        false
                    } else {
                        tracing::info!(file = %path.display(), "CA bundle changed");
                        o.ca_bundle = bundle;
                        true
                    }
                });
            }
            Ok(_) => {
                tracing::warn!(file = %path.display(), "CA bundle file is empty; keeping the previous bundle")
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "reading the CA bundle failed; keeping the previous bundle")
            }
        }
    }
}

/// The DNS names and IPs the serving certificate is for.
pub fn sans_for(endpoint: &WebhookEndpoint, extra: &[String]) -> Vec<String> {
    let mut sans: Vec<String> = Vec::new();
    match endpoint {
        WebhookEndpoint::Service(s) => {
            sans.push(format!("{}.{}.svc", s.name, s.namespace));
            sans.push(format!("{}.{}.svc.cluster.local", s.name, s.namespace));
            sans.push(format!("{}.{}", s.name, s.namespace));
            sans.push(s.name.clone());
        }
        WebhookEndpoint::Url(u) => {
            if let Some(host) = u.host_str() {
                sans.push(
                    host.trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_string(),
                );
            }
        }
    }
    for e in extra {
        if !sans.contains(e) {
            sans.push(e.clone());
        }
    }
    sans
}

fn offset(t: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(t)
}

fn rfc3339(t: SystemTime) -> String {
    let ts = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    k8s_openapi::jiff::Timestamp::from_second(ts)
        .map_or_else(|_| "1970-01-01T00:00:00Z".to_string(), |t| t.to_string())
}

fn parse_time(s: &str) -> Option<SystemTime> {
    let ts: k8s_openapi::jiff::Timestamp = s.parse().ok()?;
    let secs = u64::try_from(ts.as_second()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// A freshly made CA.
pub struct Ca {
    /// Certificate (PEM).
    pub cert_pem: String,
    /// Key (PEM).
    pub key_pem: String,
    /// Expiry.
    pub not_after: SystemTime,
}

/// The CA's parameters (subject, usages); an issuer is rebuilt from them and the
/// CA key, so the CA certificate never needs parsing.
fn ca_params() -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
        .distinguished_name
        .push(DnType::CommonName, "holdfast-webhook CA");
    Ok(params)
}

/// Makes a self-signed CA valid for `validity`.
pub fn make_ca(validity: Duration) -> anyhow::Result<Ca> {
    let key = KeyPair::generate()?;
    let mut params = ca_params()?;
    let now = SystemTime::now();
    params.not_before = offset(now - CLOCK_SKEW);
    let not_after = now + validity;
    params.not_after = offset(not_after);
    let cert = params.self_signed(&key)?;
    Ok(Ca {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after,
    })
}

/// Makes a serving certificate for `sans`, signed by the CA key `ca_key_pem`;
/// returns (cert PEM, key PEM, expiry). The certificate never outlives the CA.
pub fn make_serving(
    ca_key_pem: &str,
    ca_not_after: SystemTime,
    sans: &[String],
    validity: Duration,
) -> anyhow::Result<(String, String, SystemTime)> {
    let ca_key = KeyPair::from_pem(ca_key_pem).context("parsing the CA key")?;
    let issuer = Issuer::new(ca_params()?, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    params.distinguished_name.push(
        DnType::CommonName,
        sans.first()
            .cloned()
            .unwrap_or_else(|| "holdfast-webhook".into()),
    );
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let now = SystemTime::now();
    params.not_before = offset(now - CLOCK_SKEW);
    let not_after = (now + validity).min(ca_not_after);
    params.not_after = offset(not_after);
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

fn text(data: &BTreeMap<String, ByteString>, key: &str) -> Option<String> {
    data.get(key)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .filter(|s| !s.is_empty())
}

/// Manages the certificate Secret.
pub struct CertManager {
    api: Api<Secret>,
    secret: SecretRef,
    sans: Vec<String>,
    ca_validity: Duration,
    cert_validity: Duration,
    renew_before: Duration,
}

impl CertManager {
    /// A manager for `secret`.
    pub fn new(
        client: Client,
        secret: SecretRef,
        endpoint: &WebhookEndpoint,
        tuning: &Tuning,
    ) -> Self {
        Self {
            api: Api::namespaced(client, &secret.namespace),
            sans: sans_for(endpoint, &tuning.extra_sans),
            secret,
            ca_validity: tuning.ca_validity,
            cert_validity: tuning.cert_validity,
            renew_before: tuning.renew_before,
        }
    }

    fn due(&self, not_after: Option<SystemTime>, now: SystemTime) -> bool {
        not_after.is_none_or(|t| now + self.renew_before >= t)
    }

    /// Makes sure the Secret holds a valid CA and serving certificate (creating or
    /// renewing them as needed), and publishes the caBundle.
    pub async fn ensure_once(&self, tx: &watch::Sender<InstallOptions>) -> anyhow::Result<()> {
        let existing = self.api.get_opt(&self.secret.name).await?;
        let now = SystemTime::now();
        let data = existing
            .as_ref()
            .and_then(|s| s.data.clone())
            .unwrap_or_default();
        let ann = existing
            .as_ref()
            .and_then(|s| s.metadata.annotations.clone())
            .unwrap_or_default();
        let get_time = |k: &str| ann.get(k).and_then(|s| parse_time(s));
        let ca_cert = text(&data, "ca.crt");
        let ca_key = text(&data, "ca.key");
        let ca_not_after = get_time(CA_NOT_AFTER);
        let cert_not_after = get_time(CERT_NOT_AFTER);
        let have_all = ca_cert.is_some()
            && ca_key.is_some()
            && text(&data, "tls.crt").is_some()
            && text(&data, "tls.key").is_some();
        let ca_due = !have_all || self.due(ca_not_after, now);
        let cert_due = ca_due || self.due(cert_not_after, now);
        // Drop an expired previous CA from the bundle.
        let prev_expired = get_time(PREVIOUS_CA_NOT_AFTER).is_some_and(|t| t <= now);
        if !cert_due && !prev_expired {
            if let Some(bundle) = ca_cert {
                publish(tx, bundle.into_bytes());
            }
            return Ok(());
        }
        let mut data = data;
        let mut ann = ann;
        if ca_due {
            let ca = make_ca(self.ca_validity)?;
            // Keep the previous CA (first certificate of the old bundle) while valid.
            let mut bundle = ca.cert_pem.clone();
            if let (Some(old), Some(old_after)) = (&ca_cert, ca_not_after)
                && old_after > now
            {
                let first = first_pem(old);
                bundle.push_str(&first);
                ann.insert(PREVIOUS_CA_NOT_AFTER.into(), rfc3339(old_after));
            } else {
                ann.remove(PREVIOUS_CA_NOT_AFTER);
            }
            data.insert("ca.crt".into(), ByteString(bundle.into_bytes()));
            data.insert("ca.key".into(), ByteString(ca.key_pem.into_bytes()));
            ann.insert(CA_NOT_AFTER.into(), rfc3339(ca.not_after));
            tracing::info!(secret = %self.secret, not_after = %rfc3339(ca.not_after), "created a new webhook CA");
        } else if prev_expired {
            if let Some(bundle) = &ca_cert {
                data.insert("ca.crt".into(), ByteString(first_pem(bundle).into_bytes()));
            }
            ann.remove(PREVIOUS_CA_NOT_AFTER);
        }
        if cert_due {
            let ca_key_pem = text(&data, "ca.key").context("CA key missing")?;
            let ca_after = ann
                .get(CA_NOT_AFTER)
                .and_then(|s| parse_time(s))
                .unwrap_or(now + self.cert_validity);
            let (cert, key, after) =
                make_serving(&ca_key_pem, ca_after, &self.sans, self.cert_validity)?;
            data.insert("tls.crt".into(), ByteString(cert.into_bytes()));
            data.insert("tls.key".into(), ByteString(key.into_bytes()));
            ann.insert(CERT_NOT_AFTER.into(), rfc3339(after));
            tracing::info!(secret = %self.secret, sans = ?self.sans, not_after = %rfc3339(after), "issued a new webhook serving certificate");
        }
        let bundle = text(&data, "ca.crt").unwrap_or_default();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.secret.name.clone()),
                namespace: Some(self.secret.namespace.clone()),
                annotations: Some(ann),
                // Self-protection: the CA Secret is label-protected like the rest
                // of the installation.
                labels: Some(
                    [
                        (
                            "app.kubernetes.io/managed-by".to_string(),
                            "holdfast-controller".to_string(),
                        ),
                        (
                            holdfast_shared::names::PROTECTED_LABEL.to_string(),
                            "Always".to_string(),
                        ),
                    ]
                    .into(),
                ),
                resource_version: existing
                    .as_ref()
                    .and_then(|s| s.metadata.resource_version.clone()),
                ..Default::default()
            },
            data: Some(data),
            type_: Some("kubernetes.io/tls".into()),
            ..Default::default()
        };
        let pp = PostParams {
            field_manager: Some(holdfast_shared::names::FIELD_MANAGER.into()),
            ..Default::default()
        };
        if existing.is_some() {
            self.api.replace(&self.secret.name, &pp, &secret).await?;
        } else {
            self.api.create(&pp, &secret).await?;
        }
        publish(tx, bundle.into_bytes());
        Ok(())
    }

    /// Re-checks the Secret periodically (renewal, deletion, tampering).
    pub async fn run(self, tx: watch::Sender<InstallOptions>) {
        let every = (self.renew_before / 4).clamp(SECRET_CHECK_BOUNDS.0, SECRET_CHECK_BOUNDS.1);
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = self.ensure_once(&tx).await {
                tracing::warn!(secret = %self.secret, error = %format!("{e:#}"), "managing the webhook certificates failed; retrying");
            }
        }
    }
}

fn publish(tx: &watch::Sender<InstallOptions>, bundle: Vec<u8>) {
    tx.send_if_modified(|o| {
        if o.ca_bundle == bundle {
            false
        } else {
            o.ca_bundle = bundle;
            true
        }
    });
}

/// The first PEM block of a bundle.
fn first_pem(bundle: &str) -> String {
    const END: &str = "-----END CERTIFICATE-----";
    match bundle.find(END) {
        Some(i) => format!("{}\n", &bundle[..i + END.len()]),
        None => bundle.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_certificate_is_signed_by_the_ca_and_bounded_by_it() {
        let ca = make_ca(Duration::from_secs(3600)).expect("ca");
        let (cert, key, after) = make_serving(
            &ca.key_pem,
            ca.not_after,
            &[
                "holdfast-webhook.holdfast-system.svc".into(),
                "127.0.0.1".into(),
            ],
            Duration::from_secs(10 * 3600),
        )
        .expect("cert");
        assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(key.contains("PRIVATE KEY"));
        assert_eq!(after, ca.not_after, "never outlives the CA");
        assert_eq!(
            first_pem(&format!("{}{}", ca.cert_pem, cert)).trim(),
            ca.cert_pem.trim()
        );
    }

    #[test]
    fn sans_from_service_and_url() {
        let svc = WebhookEndpoint::Service("ns/hook:443".parse().expect("svc"));
        let sans = sans_for(&svc, &[]);
        assert_eq!(sans[0], "hook.ns.svc");
        let url =
            WebhookEndpoint::Url(url::Url::parse("https://127.0.0.1:8443/validate").expect("url"));
        assert_eq!(
            sans_for(&url, &["localhost".into()]),
            vec!["127.0.0.1".to_string(), "localhost".to_string()]
        );
    }

    #[test]
    fn times_round_trip() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(parse_time(&rfc3339(t)), Some(t));
    }
}
