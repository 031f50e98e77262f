//! TLS with hot certificate reload: a rustls `ResolvesServerCert` over an `ArcSwap`,
//! refreshed by a task that re-reads the PEM files and swaps in a new key when they
//! change. A broken new pair is logged and ignored; the old one keeps serving.

use arc_swap::ArcSwap;
use rustls::{
    ServerConfig,
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use std::{path::Path, path::PathBuf, sync::Arc, time::Duration};

/// Why a certificate pair could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{0}: no PEM certificate found")]
    NoCertificate(PathBuf),
    /// The certificate PEM is malformed.
    #[error("{path}: bad certificate PEM: {why}")]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        why: String,
    },
    /// The key PEM is malformed or missing.
    #[error("{path}: no usable private key: {why}")]
    BadKey {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        why: String,
    },
    /// The key does not match the certificate, or is of an unsupported type.
    #[error("certificate and key do not form a usable pair: {0}")]
    Pair(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The certificates of the PEM `pem` read from `path`: at least one.
fn certificates(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

/// Builds a `CertifiedKey` from PEM bytes.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
) -> Result<CertifiedKey, TlsError> {
    let certs = certificates(cert_pem, cert_path)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::BadKey {
        path: key_path.to_path_buf(),
        why: e.to_string(),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(certs, key, &provider).map_err(|e| TlsError::Pair(e.to_string()))
}

/// The files a certificate comes from, and the key currently served.
#[derive(Debug)]
pub struct CertStore {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: ArcSwap<CertifiedKey>,
    last_pem: parking_lot::Mutex<(Vec<u8>, Vec<u8>)>,
}

/// What a reload check did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    /// Files unchanged.
    Unchanged,
    /// A new pair is being served.
    Reloaded,
}

impl CertStore {
    /// Loads the pair; fails if it is unusable.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let cert_pem = read(cert_path)?;
        let key_pem = read(key_path)?;
        let key = certified_key(&cert_pem, &key_pem, cert_path, key_path)?;
        Ok(Arc::new(Self {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: ArcSwap::from_pointee(key),
            last_pem: parking_lot::Mutex::new((cert_pem, key_pem)),
        }))
    }

    /// Re-reads the files and swaps in the new pair when they changed and are valid.
    pub fn reload_if_changed(&self) -> Result<Reload, TlsError> {
        let cert_pem = read(&self.cert_path)?;
        let key_pem = read(&self.key_path)?;
        let mut last = self.last_pem.lock();
        if last.0 == cert_pem && last.1 == key_pem {
            return Ok(Reload::Unchanged);
        }
        let key = certified_key(&cert_pem, &key_pem, &self.cert_path, &self.key_path)?;
        self.current.store(Arc::new(key));
        *last = (cert_pem, key_pem);
        Ok(Reload::Reloaded)
    }

    /// A rustls server configuration serving this store, with ALPN h2 and http/1.1.
    /// With `client_ca`, only clients presenting a certificate signed by one of its
    /// CAs complete the handshake.
    pub fn server_config(
        self: &Arc<Self>,
        client_ca: Option<&Path>,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => builder.with_client_cert_verifier(client_verifier(path, provider)?),
        };
        let mut config = builder.with_cert_resolver(Arc::new(Resolver(self.clone())));
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Polls the files every `interval` until `shutdown` fires, calling `on_reload`
    /// with each outcome that is not [`Reload::Unchanged`].
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        shutdown: tokio_util::sync::CancellationToken,
        on_reload: impl Fn(&Result<Reload, TlsError>) + Send + 'static,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_error: Option<String> = None;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            let store = self.clone();
            let outcome = tokio::task::spawn_blocking(move || store.reload_if_changed()).await;
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => Err(TlsError::Config(format!("reload task failed: {e}"))),
            };
            match &outcome {
                Ok(Reload::Unchanged) => {
                    last_error = None;
                    continue;
                }
                Ok(Reload::Reloaded) => last_error = None,
                Err(e) => {
                    // Report a persistent error once, not every tick.
                    let text = e.to_string();
                    if last_error.as_deref() == Some(text.as_str()) {
                        continue;
                    }
                    last_error = Some(text);
                }
            }
            on_reload(&outcome);
        }
    }
}

/// A verifier accepting client certificates issued by the CAs in the PEM file `path`.
fn client_verifier(
    path: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let pem = read(path)?;
    let cas = certificates(&pem, path)?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add(ca).map_err(|e| TlsError::BadCertificate {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsError::Config(format!("client CA {}: {e}", path.display())))
}

#[derive(Debug)]
struct Resolver(Arc<CertStore>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current.load_full())
    }
}
