//! Helpers for the webhook's integration tests: a PKI made with rcgen, the real
//! `holdfast-webhook` binary started against an API server that is not there, TLS
//! clients, probes and metrics.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use std::{
    net::TcpListener as StdListener,
    path::Path,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CA and a leaf it signed.
pub struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA and a serving certificate for localhost / 127.0.0.1, or (with `client`) a
/// client certificate named `cn`.
pub fn pki_for(cn: &str, client: bool) -> Pki {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{cn} test CA"));
    let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn.to_string());
    if client {
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    }
    let cert = params.signed_by(&key, &issuer).expect("leaf");
    Pki {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// A CA and a serving certificate for localhost / 127.0.0.1.
pub fn pki(cn: &str) -> Pki {
    pki_for(cn, false)
}

/// Writes `p`'s pair as `tls.crt` / `tls.key` in `dir`.
pub fn write_pki(dir: &Path, p: &Pki) {
    std::fs::write(dir.join("tls.crt"), &p.cert_pem).expect("write cert");
    std::fs::write(dir.join("tls.key"), &p.key_pem).expect("write key");
}

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A running `holdfast-webhook`, killed on drop.
pub struct Webhook {
    pub child: Child,
    pub port: u16,
    pub probe_port: u16,
    pub dir: tempfile::TempDir,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the webhook serving `p` with `extra` flags (a 1 s read timeout unless
/// `extra` names one; certificate files checked every 100 ms), against an API server
/// that is not there; logs to `webhook.log` in its directory; returns once
/// `/healthz` answers.
pub async fn start(p: &Pki, extra: &[&str]) -> Webhook {
    let dir = tempfile::tempdir().expect("tempdir");
    write_pki(dir.path(), p);
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:1\n\
         contexts:\n- name: gone\n  context:\n    cluster: gone\n    user: u\ncurrent-context: gone\n\
         users:\n- name: u\n  user:\n    token: nope\n",
    )
    .expect("kubeconfig");
    let (port, probe_port) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_holdfast-webhook"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--probe-listen",
            &format!("127.0.0.1:{probe_port}"),
            "--tls-cert",
        ])
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key")
        .arg(dir.path().join("tls.key"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(if extra.contains(&"--read-timeout-seconds") {
            &[][..]
        } else {
            &["--read-timeout-seconds", "1"][..]
        })
        .args(["--tls-reload-interval-ms", "100"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("webhook.log")).expect("log file"))
        .spawn()
        .expect("start holdfast-webhook");
    let wh = Webhook {
        child,
        port,
        probe_port,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok((200, _)) = probe(wh.probe_port, "/healthz").await {
            break;
        }
        assert!(Instant::now() < deadline, "webhook did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wh
}

/// One plain-HTTP GET on the probe port: status and body.
pub async fn probe(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await?;
    let status = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    Ok((status, body))
}

/// The value of the metric series `series` (name and labels exactly as exposed), or
/// 0 when it is not exposed yet.
pub async fn metric(probe_port: u16, series: &str) -> f64 {
    let (status, text) = probe(probe_port, "/metrics").await.expect("metrics");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series)
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .unwrap_or(0.0)
}

/// A rustls client configuration trusting `ca_pem`, offering `alpn`.
pub fn tls_config(ca_pem: &str, alpn: &[&[u8]]) -> rustls::ClientConfig {
    tls_config_as(ca_pem, alpn, None)
}

/// A rustls client configuration trusting `ca_pem`, offering `alpn`, with an
/// optional client certificate.
pub fn tls_config_as(ca_pem: &str, alpn: &[&[u8]], identity: Option<&Pki>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("ca pem")).expect("add root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut cfg = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let certs = rustls_pki_types::CertificateDer::pem_slice_iter(id.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client cert");
            let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes())
                .expect("client key");
            builder
                .with_client_auth_cert(certs, key)
                .expect("client auth")
        }
    };
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    cfg
}

/// A TLS connection to the webhook on `port`.
pub async fn tls_connect(
    cfg: rustls::ClientConfig,
    port: u16,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    connector.connect(name, tcp).await
}

/// An AdmissionReview body from user `alice`.
pub fn review(uid: &str, op: &str, kind: &str, res: &str, obj: Value, old: Value) -> Vec<u8> {
    review_as(uid, op, kind, res, obj, old, "alice")
}

/// An AdmissionReview body from user `alice` for a Namespace.
pub fn ns_review(uid: &str, op: &str, obj: Value, old: Value) -> Vec<u8> {
    review(uid, op, "Namespace", "namespaces", obj, old)
}

/// An AdmissionReview body from `user`.
pub fn review_as(
    uid: &str,
    op: &str,
    kind: &str,
    resource: &str,
    object: Value,
    old: Value,
    user: &str,
) -> Vec<u8> {
    let name = old["metadata"]["name"]
        .as_str()
        .or(object["metadata"]["name"].as_str())
        .unwrap_or("x")
        .to_string();
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": resource},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "requestResource": {"group": "", "version": "v1", "resource": resource},
            "name": name, "namespace": name, "operation": op,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": object, "oldObject": old, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}
        }
    }))
    .expect("json")
}

/// A Namespace object.
pub fn ns(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels},
           "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}

/// Sends one HTTP/1.1 request on `s` (keep-alive) and reads one response: status and
/// body (the webhook always answers with Content-Length).
pub async fn h1_exchange<S>(s: &mut S, body: &[u8]) -> std::io::Result<(u16, String)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a full response",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())
                        .flatten()
                })
                .unwrap_or(0);
            if rest.len() >= len {
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                return Ok((status, rest[..len].to_string()));
            }
        }
    }
}

/// Reads until the peer closes (or fails); `Err` if that takes longer than `limit`.
pub async fn closed_within<S>(s: &mut S, limit: Duration) -> Result<(), String>
where
    S: tokio::io::AsyncRead + Unpin,
{
    let mut buf = Vec::new();
    match tokio::time::timeout(limit, s.read_to_end(&mut buf)).await {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "still open after {limit:?} (read {} bytes)",
            buf.len()
        )),
    }
}

/// The protocol a [`client`] speaks.
#[derive(Clone, Copy, Debug)]
pub enum Proto {
    H1,
    H2,
}

pub type HttpsClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// A pooled HTTPS client trusting `ca_pem`, HTTP/1.1 or HTTP/2 only.
pub fn client(ca_pem: &str, proto: Proto) -> HttpsClient {
    let b = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(ca_pem, &[]))
        .https_only();
    let connector = match proto {
        Proto::H1 => b.enable_http1().build(),
        Proto::H2 => b.enable_http2().build(),
    };
    let mut builder = Client::builder(TokioExecutor::new());
    if matches!(proto, Proto::H2) {
        builder.http2_only(true);
    }
    builder.build(connector)
}

/// An answer: status, protocol version, body.
pub struct Reply {
    pub status: u16,
    pub version: http::Version,
    pub body: Vec<u8>,
}

/// Sends `method path` with `body` to the webhook on `port`.
pub async fn send(
    c: &HttpsClient,
    port: u16,
    method: &str,
    path: &str,
    body: impl Into<Bytes>,
) -> Reply {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("https://localhost:{port}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .expect("request");
    let resp = c.request(req).await.expect("response");
    let status = resp.status().as_u16();
    let version = resp.version();
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    Reply {
        status,
        version,
        body,
    }
}

/// The `response` to `body` POSTed to `/validate` over `proto` (trusting
/// `ca_pem`), which must be a 200 AdmissionReview reply.
pub async fn validate(ca_pem: &str, proto: Proto, port: u16, body: impl Into<Bytes>) -> Value {
    verdict(&send(&client(ca_pem, proto), port, "POST", "/validate", body).await)
}

/// The `status.message` of a verdict ("" when there is none).
pub fn message(r: &Value) -> &str {
    r["status"]["message"].as_str().unwrap_or_default()
}

/// The words of `line` (split at white space), as a command's arguments.
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The `response` of a 200 AdmissionReview reply.
pub fn verdict(reply: &Reply) -> Value {
    assert_eq!(
        reply.status,
        200,
        "body: {}",
        String::from_utf8_lossy(&reply.body)
    );
    let v: Value = serde_json::from_slice(&reply.body).expect("json verdict");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    v["response"].clone()
}

/// An HTTP/1.1 TLS connection to the webhook on `port`.
pub async fn tls_stream(
    ca_pem: &str,
    port: u16,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    tls_connect(tls_config(ca_pem, &[b"http/1.1"]), port)
        .await
        .expect("handshake")
}
