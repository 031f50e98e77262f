//! Shared helpers for holdfast-sim's integration tests: a recording HTTPS admission
//! webhook with its own rcgen PKI, kubectl runner, capture loading.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

pub const CAPTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../captures");

/// One AdmissionReview as received by the test webhook.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub review: Value,
}

pub type Decide = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

pub struct TestWebhook {
    pub port: u16,
    pub ca_pem: String,
    pub recorded: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestWebhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestWebhook {
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{}", self.port, path)
    }
    pub fn ca_b64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
    pub fn reviews(&self) -> Vec<Recorded> {
        self.recorded.lock().map(|r| r.clone()).unwrap_or_default()
    }
    pub fn clear(&self) {
        if let Ok(mut r) = self.recorded.lock() {
            r.clear();
        }
    }

    /// Starts an HTTPS webhook (cert for 127.0.0.1/localhost and `extra_names`) whose
    /// AdmissionReview responses come from `decide(request)` (uid is filled in).
    pub async fn start(extra_names: &[&str], decide: Decide) -> TestWebhook {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-webhook-ca");
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let mut names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        names.extend(extra_names.iter().map(|s| s.to_string()));
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(names)
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("cert");
        let certs = vec![cert.der().clone()];
        let pk = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der");
        let cfg = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, pk)
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let recorded: Arc<Mutex<Vec<Recorded>>> = Arc::new(Mutex::new(vec![]));
        let rec = recorded.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let rec = rec.clone();
                let decide = decide.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                        let rec = rec.clone();
                        let decide = decide.clone();
                        async move {
                            let path = req
                                .uri()
                                .path_and_query()
                                .map(|p| p.to_string())
                                .unwrap_or_default();
                            let headers: BTreeMap<String, String> = req
                                .headers()
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                                .collect();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let review: Value =
                                serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let mut resp = decide(&review["request"]);
                            if let Some(ms) = resp.get("__sleep_ms").and_then(|v| v.as_u64()) {
                                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                                if let Some(m) = resp.as_object_mut() {
                                    m.remove("__sleep_ms");
                                }
                            }
                            resp["uid"] = review["request"]["uid"].clone();
                            if let Ok(mut r) = rec.lock() {
                                r.push(Recorded {
                                    path,
                                    headers,
                                    review,
                                });
                            }
                            let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp});
                            let mut r =
                                http::Response::new(Full::new(Bytes::from(out.to_string())));
                            r.headers_mut().insert(
                                "content-type",
                                http::HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, Infallible>(r)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        TestWebhook {
            port,
            ca_pem: ca_cert.pem(),
            recorded,
            task,
        }
    }
}

/// A decision function: deny DELETEs of objects labelled `capture/deny=true` (and
/// `reason: Forbidden` when labelled `capture/reason=Forbidden`), warn on
/// `capture/warn=true`, allow everything else.
pub fn capture_policy() -> Decide {
    Arc::new(|req: &Value| {
        let obj = if req["operation"] == "DELETE" {
            &req["oldObject"]
        } else {
            &req["object"]
        };
        let labels = &obj["metadata"]["labels"];
        if req["operation"] == "DELETE" && labels["capture/deny"] == "true" {
            let mut status =
                json!({"code": 403, "message": "holdfast: ConfigMap \"x\" is protected (capture)"});
            if labels["capture/reason"] == "Forbidden" {
                status["reason"] = json!("Forbidden");
            }
            return json!({"allowed": false, "status": status});
        }
        if req["operation"] == "DELETE" && labels["capture/warn"] == "true" {
            return json!({"allowed": true, "warnings": ["holdfast: deleting a warned object (capture)"]});
        }
        json!({"allowed": true})
    })
}

/// The Status of a refused request; panics on any other error.
pub fn api_status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The Status a request that must fail (`what`, for the message if it does not) was refused with.
pub async fn refused<T: std::fmt::Debug>(
    request: impl std::future::Future<Output = kube::Result<T>>,
    what: &str,
) -> kube::core::Status {
    api_status(request.await.expect_err(what))
}

/// Asserts that a request was refused with this code, reason and message.
pub fn assert_status(e: kube::Error, code: u16, reason: &str, message: &str) {
    let s = api_status(e);
    assert_eq!(
        (s.code, s.reason.as_str(), s.message.as_str()),
        (code, reason, message)
    );
}

/// Creates the object `v` through `api`.
pub async fn create_obj<K>(api: &kube::Api<K>, v: Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let obj: K = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"));
    api.create(&kube::api::PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {v}: {e}"))
}

/// Applies the merge patch `patch` to `name` through `api`.
pub async fn merge_patch<K>(api: &kube::Api<K>, name: &str, patch: Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap_or_else(|e| panic!("merge patch {patch} of {name}: {e}"))
}

/// A ValidatingWebhookConfiguration `name` sending the requests `rules` select to
/// `hook` (path /validate) as webhook `webhook`: no side effects, v1 reviews, 5 s,
/// failing closed.
pub fn recording_config(name: &str, webhook: &str, hook: &TestWebhook, rules: Value) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": webhook,
            "clientConfig": {"url": hook.url("/validate"), "caBundle": hook.ca_b64()},
            "rules": rules,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            "failurePolicy": "Fail"
        }]
    })
}

/// A simulator with the default configuration, and kubectl as its admin.
pub async fn start_with_kubectl() -> (holdfast_sim::SimHandle, Kubectl) {
    let sim = holdfast_sim::Sim::start(holdfast_sim::SimConfig::default())
        .await
        .expect("sim");
    let k = Kubectl::new(&sim.kubeconfig("admin"));
    (sim, k)
}

/// A webhook decision that allows everything.
pub fn allow_all() -> Decide {
    Arc::new(|_: &Value| json!({"allowed": true}))
}

pub fn kubectl_path() -> PathBuf {
    let p = PathBuf::from("/usr/bin/kubectl");
    if p.exists() {
        return p;
    }
    if let Ok(path) = std::env::var("PATH") {
        for d in path.split(':') {
            let c = Path::new(d).join("kubectl");
            if c.exists() {
                return c;
            }
        }
    }
    panic!(
        "kubectl not found: these tests drive the real kubectl; run `.ci/run` or `apt-get install kubectl`"
    );
}

pub struct Kubectl {
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    pub fn new(kubeconfig_text: &str) -> Kubectl {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_text).expect("write kubeconfig");
        Kubectl { dir, kubeconfig }
    }
    pub fn run(&self, args: &[&str]) -> Out {
        self.run_stdin(args, None)
    }
    /// kubectl with the words of `line` (split at whitespace) as its arguments.
    pub fn sh(&self, line: &str) -> Out {
        self.run(&line.split_whitespace().collect::<Vec<_>>())
    }
    /// [`Kubectl::sh`], asserting that kubectl succeeded.
    pub fn ok(&self, line: &str) -> Out {
        let out = self.sh(line);
        assert_eq!(out.code, 0, "kubectl {line}: {out:?}");
        out
    }
    /// [`Kubectl::sh`], asserting what kubectl printed on stdout.
    pub fn expect_stdout(&self, line: &str, want: &str) {
        let out = self.sh(line);
        assert_eq!(out.stdout, want, "kubectl {line}: {out:?}");
    }
    /// [`Kubectl::sh`], asserting what kubectl printed on stderr.
    pub fn expect_stderr(&self, line: &str, want: &str) {
        let out = self.sh(line);
        assert_eq!(out.stderr, want, "kubectl {line}: {out:?}");
    }
    /// `kubectl LINE -o json`, asserting success: the parsed output.
    pub fn json(&self, line: &str) -> Value {
        let out = self.ok(&format!("{line} -o json"));
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("kubectl {line}: {e}: {out:?}"))
    }
    /// `kubectl VERB --raw PATH -f -` with `body` on stdin.
    pub fn raw(&self, verb: &str, path: &str, body: &Value) -> Out {
        self.run_stdin(&[verb, "--raw", path, "-f", "-"], Some(&body.to_string()))
    }
    /// `kubectl apply -f -` of `manifest`.
    pub fn apply(&self, manifest: &str) -> Out {
        self.run_stdin(&["apply", "-f", "-"], Some(manifest))
    }
    /// [`Kubectl::apply`], asserting that kubectl succeeded.
    pub fn apply_ok(&self, manifest: &str) -> Out {
        let out = self.apply(manifest);
        assert_eq!(out.code, 0, "kubectl apply of {manifest}: {out:?}");
        out
    }
    pub fn run_stdin(&self, args: &[&str], stdin: Option<&str>) -> Out {
        use std::io::Write;
        let mut cmd = Command::new(kubectl_path());
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("spawn kubectl");
        if let Some(s) = stdin
            && let Some(mut i) = child.stdin.take()
        {
            i.write_all(s.as_bytes()).expect("stdin");
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("kubectl output");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The kubectl transcript capture `name`: (command line, printed output, exit code).
pub fn kubectl_capture(name: &str) -> (String, String, i32) {
    let text = std::fs::read_to_string(format!("{CAPTURES}/kubectl/{name}")).expect("read capture");
    let mut lines: Vec<&str> = text.lines().collect();
    let cmd = lines.remove(0).trim_start_matches("$ ").to_string();
    let exit = lines
        .pop()
        .and_then(|l| {
            l.trim_start_matches("[exit ")
                .trim_end_matches(']')
                .parse()
                .ok()
        })
        .unwrap_or(-1);
    let mut out = lines.join("\n");
    out.push('\n');
    (cmd, out, exit)
}

pub fn admission_capture(name: &str) -> Value {
    let text =
        std::fs::read_to_string(format!("{CAPTURES}/admission/{name}")).expect("read capture");
    serde_json::from_str(&text).expect("capture JSON")
}

/// Removes fields that legitimately differ between runs.
pub fn normalize(v: &Value) -> Value {
    let mut v = v.clone();
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in [
                    "resourceVersion",
                    "creationTimestamp",
                    "managedFields",
                    "deletionTimestamp",
                ] {
                    m.remove(k);
                }
                // uids are random UUIDs (userInfo.uid is not)
                if m.get("uid")
                    .and_then(|u| u.as_str())
                    .is_some_and(|u| u.len() == 36 && u.matches('-').count() == 4)
                {
                    m.remove("uid");
                }
                if let Some(pre) = m.get_mut("preconditions").and_then(|p| p.as_object_mut()) {
                    pre.remove("uid");
                }
                if let Some(d) = m.get_mut("data").and_then(|d| d.as_object_mut()) {
                    d.remove("ca.crt");
                }
                for (_, x) in m.iter_mut() {
                    strip(x);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

pub async fn wait_until<F: FnMut() -> bool>(what: &str, mut f: F) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !f() {
        if std::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Waits (30 s at the most) until the Workspace `name` of `workspaces` is Ready
/// (kcp schedules and initializes a workspace asynchronously); returns it.
pub async fn ready_workspace(
    workspaces: &kube::Api<kube::api::DynamicObject>,
    name: &str,
) -> kube::api::DynamicObject {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let last = workspaces.get(name).await;
        if let Ok(w) = &last
            && w.data["status"]["phase"] == "Ready"
        {
            return w.clone();
        }
        if std::time::Instant::now() > deadline {
            panic!("workspace {name} not Ready within 30 s: {last:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// The API resource `group/version` `kind` served as `plural`.
pub fn dyn_ar(group: &str, version: &str, kind: &str, plural: &str) -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, version, kind),
        plural,
    )
}

/// The dynamic API of `ar` in namespace `ns` (None: cluster-scoped or every namespace).
pub fn dyn_api(
    c: &kube::Client,
    ar: &kube::core::ApiResource,
    ns: Option<&str>,
) -> kube::Api<kube::core::DynamicObject> {
    match ns {
        Some(ns) => kube::Api::namespaced_with(c.clone(), ns, ar),
        None => kube::Api::all_with(c.clone(), ar),
    }
}

/// Creates `v` as an object of `ar` (panics on failure, naming the resource).
pub async fn dyn_create(
    c: &kube::Client,
    ar: &kube::core::ApiResource,
    ns: Option<&str>,
    v: Value,
) -> kube::core::DynamicObject {
    let mut o: kube::core::DynamicObject = serde_json::from_value(v).expect("object");
    o.types = Some(kube::core::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    dyn_api(c, ar, ns)
        .create(&kube::api::PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", ar.plural))
}
