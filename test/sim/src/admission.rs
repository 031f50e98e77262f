//! ValidatingWebhookConfiguration dispatch, as kube-apiserver's validating admission
//! webhook plugin does it.

use crate::cel;
use crate::errors::{ApiError, ApiResult};
use crate::registry::{Gr, ResourceInfo};
use crate::selectors::Selector;
use crate::server::{Ctx, State};
use crate::store::Key;
use crate::{kcp, tls};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub struct Attrs<'a> {
    pub info: &'a ResourceInfo,
    pub version: &'a str,
    pub sub: &'a str,
    pub op: &'a str,
    /// None for DeleteCollection (reviews carry no name).
    pub name: Option<&'a str>,
    pub namespace: &'a str,
    pub cluster: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
    pub dry_run: bool,
    pub options: Value,
}

pub fn vwc_gr() -> Gr {
    Gr {
        group: "admissionregistration.k8s.io".into(),
        resource: "validatingwebhookconfigurations".into(),
    }
}

fn exempt(info: &ResourceInfo) -> bool {
    info.virtual_only
        || (info.group == "admissionregistration.k8s.io"
            && matches!(
                info.resource.as_str(),
                "validatingwebhookconfigurations"
                    | "mutatingwebhookconfigurations"
                    | "validatingadmissionpolicies"
                    | "validatingadmissionpolicybindings"
                    | "mutatingadmissionpolicies"
                    | "mutatingadmissionpolicybindings"
            ))
}

/// What kube-apiserver's admission policy plugins never evaluate (`isPolicyResource`).
fn is_policy_resource(info: &ResourceInfo) -> bool {
    info.group == "admissionregistration.k8s.io"
        && matches!(
            info.resource.as_str(),
            "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        )
}

fn list_has(v: &Value, s: &str) -> bool {
    v.as_array().is_some_and(|a| {
        a.iter()
            .any(|x| x.as_str() == Some(s) || x.as_str() == Some("*"))
    })
}

fn resource_matches(rule_res: &Value, res: &str, sub: &str) -> bool {
    rule_res.as_array().is_some_and(|a| {
        a.iter().filter_map(|x| x.as_str()).any(|r| {
            let (rr, rs) = match r.split_once('/') {
                Some((a, b)) => (a, Some(b)),
                None => (r, None),
            };
            let res_ok = rr == "*" || rr == res;
            match rs {
                None => res_ok && sub.is_empty(),
                Some("*") => res_ok,
                Some(s) => res_ok && s == sub,
            }
        })
    })
}

/// Returns the version the rule matches at (the request's, or an equivalent one).
pub fn rules_match(wh: &Value, a: &Attrs) -> Option<String> {
    let equivalent = wh["matchPolicy"].as_str() != Some("Exact");
    for rule in wh["rules"].as_array().into_iter().flatten() {
        if !list_has(&rule["operations"], a.op) {
            continue;
        }
        if !list_has(&rule["apiGroups"], &a.info.group) {
            continue;
        }
        if !resource_matches(&rule["resources"], &a.info.resource, a.sub) {
            continue;
        }
        let scope = rule["scope"].as_str().unwrap_or("*");
        let cluster_scoped = !a.info.namespaced;
        let scope_ok = match scope {
            "Cluster" => cluster_scoped,
            "Namespaced" => !cluster_scoped,
            _ => true,
        };
        if !scope_ok {
            continue;
        }
        if list_has(&rule["apiVersions"], a.version) {
            return Some(a.version.to_string());
        }
        if equivalent
            && let Some(v) = a
                .info
                .versions
                .iter()
                .find(|v| list_has(&rule["apiVersions"], v))
        {
            return Some(v.clone());
        }
    }
    None
}

fn namespace_labels(state: &State, a: &Attrs) -> Option<Value> {
    if a.info.group.is_empty() && a.info.resource == "namespaces" {
        let o = a.object.or(a.old)?;
        return Some(o["metadata"]["labels"].clone());
    }
    if !a.info.namespaced {
        return None;
    }
    let ns_info = crate::api::ns_info(state, a.cluster);
    let key = Key {
        cluster: a.cluster.to_string(),
        namespace: String::new(),
        name: a.namespace.to_string(),
    };
    Some(
        state
            .store
            .get(&ns_info.gr(), &key)
            .map(|n| n["metadata"]["labels"].clone())
            .unwrap_or(Value::Null),
    )
}

pub fn selector_matches(wh: &Value, state: &State, a: &Attrs) -> bool {
    let ns_sel = Selector::from_label_selector(&wh["namespaceSelector"]);
    if !ns_sel.is_empty()
        && let Some(labels) = namespace_labels(state, a)
        && !ns_sel.matches_labels(&labels)
    {
        return false;
    }
    let obj_sel = Selector::from_label_selector(&wh["objectSelector"]);
    if obj_sel.is_empty() {
        return true;
    }
    let m = |o: Option<&Value>| o.is_some_and(|o| obj_sel.matches(o));
    m(a.object) || m(a.old)
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn gvr(group: &str, version: &str, resource: &str) -> Value {
    json!({"group": group, "version": version, "resource": resource})
}

fn convert(o: Option<&Value>, info: &ResourceInfo, version: &str) -> Value {
    match o {
        Some(o) => {
            let mut o = o.clone();
            // Objects of a subresource's own kind (an Eviction) keep their version.
            if o["kind"].as_str().is_none_or(|k| k == info.kind) {
                o["apiVersion"] = json!(info.api_version(version));
            }
            o
        }
        None => Value::Null,
    }
}

pub fn build_request(ctx: &Ctx, a: &Attrs, version: &str) -> Value {
    let info = a.info;
    let (kind_g, kind_v, kind_k) = if a.sub.is_empty() || a.sub == "status" {
        (info.group.as_str(), version, info.kind.as_str())
    } else {
        match info.subresources.iter().find(|s| s.name == a.sub) {
            Some(s) if !s.kind.is_empty() && !s.group.is_empty() => {
                (s.group.as_str(), s.version.as_str(), s.kind.as_str())
            }
            _ => (info.group.as_str(), version, info.kind.as_str()),
        }
    };
    let mut r = serde_json::Map::new();
    r.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    r.insert("kind".into(), gvk(kind_g, kind_v, kind_k));
    r.insert("resource".into(), gvr(&info.group, version, &info.resource));
    if !a.sub.is_empty() {
        r.insert("subResource".into(), json!(a.sub));
    }
    r.insert(
        "requestKind".into(),
        gvk(
            kind_g,
            if kind_v == version { a.version } else { kind_v },
            kind_k,
        ),
    );
    r.insert(
        "requestResource".into(),
        gvr(&info.group, a.version, &info.resource),
    );
    if !a.sub.is_empty() {
        r.insert("requestSubResource".into(), json!(a.sub));
    }
    if let Some(n) = a.name
        && !n.is_empty()
    {
        r.insert("name".into(), json!(n));
    }
    let ns = if info.group.is_empty() && info.resource == "namespaces" {
        a.name
            .map(str::to_string)
            .or_else(|| {
                a.old
                    .and_then(|o| o["metadata"]["name"].as_str().map(str::to_string))
            })
            .unwrap_or_default()
    } else {
        a.namespace.to_string()
    };
    if !ns.is_empty() {
        r.insert("namespace".into(), json!(ns));
    }
    r.insert("operation".into(), json!(a.op));
    r.insert("userInfo".into(), ctx.user.to_json());
    r.insert("object".into(), convert(a.object, info, version));
    r.insert("oldObject".into(), convert(a.old, info, version));
    r.insert("dryRun".into(), json!(a.dry_run));
    r.insert("options".into(), a.options.clone());
    Value::Object(r)
}

/// Runs every matching validating webhook; Err is the Status returned to the client.
pub async fn validate(state: &Arc<State>, ctx: &Ctx, a: Attrs<'_>) -> ApiResult<()> {
    // The ValidatingAdmissionPolicy plugin runs before the webhooks. It skips only
    // policies and bindings themselves; webhook configurations are subject to it.
    if !a.info.virtual_only && !is_policy_resource(a.info) {
        crate::vap::validate(state, ctx, &a)?;
    }
    if exempt(a.info) {
        return Ok(());
    }
    // kcp calls the configurations of exactly one workspace: the export's for a
    // resource the cluster gets through an APIBinding, else the cluster's own.
    let source = if a.cluster.is_empty() {
        String::new()
    } else {
        kcp::webhook_source(state, a.cluster, a.info)
    };
    // On kcp, the configurations as replicated through the cache server
    // (docs/kcp-facts.md 29).
    let mut configs: Vec<Arc<Value>> = if source.is_empty() {
        state.store.list(&vwc_gr(), Some(&source), None).0
    } else {
        state.cache.configs(&source)
    };
    configs.sort_by(|x, y| {
        x["metadata"]["name"]
            .as_str()
            .cmp(&y["metadata"]["name"].as_str())
    });
    // Select the webhooks to call (rules, selectors, matchConditions), then call them
    // concurrently like kube-apiserver (see below for which refusal is returned).
    let mut calls: Vec<(String, bool, Value, Value)> = vec![];
    for cfg in &configs {
        for wh in cfg["webhooks"].as_array().into_iter().flatten() {
            let Some(version) = rules_match(wh, &a) else {
                continue;
            };
            if !selector_matches(wh, state, &a) {
                continue;
            }
            let name = wh["name"].as_str().unwrap_or("").to_string();
            let fail_closed = wh["failurePolicy"].as_str() != Some("Ignore");
            let request = build_request(ctx, &a, &version);
            // matchConditions
            let mut skip = false;
            let mut cond_err: Option<String> = None;
            for mc in wh["matchConditions"].as_array().into_iter().flatten() {
                let expr = mc["expression"].as_str().unwrap_or("");
                let vars = cel::Vars {
                    object: request["object"].clone(),
                    old_object: request["oldObject"].clone(),
                    request: request.clone(),
                    self_value: None,
                    old_self: None,
                    extra: vec![],
                };
                match cel::eval_bool(expr, &vars) {
                    Ok(true) => {}
                    Ok(false) => skip = true,
                    Err(e) => {
                        if cond_err.is_none() {
                            cond_err =
                                Some(format!("expression '{expr}' resulted in error: {}", e.0));
                        }
                    }
                }
            }
            if skip {
                continue;
            }
            if let Some(e) = cond_err {
                if fail_closed {
                    return Err(ApiError::forbidden(a.info, a.name.unwrap_or(""), &e));
                }
                continue;
            }
            calls.push((name, fail_closed, wh.clone(), request));
        }
    }
    let trace = std::env::var("HOLDFAST_SIM_TRACE").is_ok_and(|v| !v.is_empty() && v != "0");
    // kube-apiserver's validating dispatcher
    // (staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/validating/dispatcher.go)
    // runs one goroutine per hook, sends each refusal to a channel and returns the
    // first one received: the refusal of the hook that answered first, not the first
    // in configuration order. The dry-run check is part of each hook's call there.
    let source = source.as_str();
    let mut pending: futures::stream::FuturesUnordered<_> = calls
        .iter()
        .map(|(name, fail_closed, wh, request)| async move {
            let started = std::time::Instant::now();
            let result = if a.dry_run
                && wh["sideEffects"]
                    .as_str()
                    .is_some_and(|s| s == "Some" || s == "Unknown")
            {
                Err(Refusal::DryRun)
            } else {
                call_webhook(state, source, wh, request)
                    .await
                    .map_err(Refusal::Call)
            };
            if trace {
                eprintln!(
                    "holdfast-sim: webhook {name} {} {}/{} -> {} in {:?}",
                    a.op,
                    a.info.resource,
                    a.name.unwrap_or(""),
                    match &result {
                        Ok(r) => format!("allowed={}", r["allowed"]),
                        Err(Refusal::Call(e)) => e.clone(),
                        Err(Refusal::DryRun) => "no dry run".to_string(),
                    },
                    started.elapsed()
                );
            }
            (name, *fail_closed, result)
        })
        .collect();
    let mut first_err: Option<ApiError> = None;
    while let Some((name, fail_closed, result)) = futures::StreamExt::next(&mut pending).await {
        let err = match result {
            Ok(resp) => {
                for w in resp["warnings"].as_array().into_iter().flatten() {
                    if let Some(w) = w.as_str() {
                        ctx.warn(w.to_string());
                    }
                }
                (resp["allowed"].as_bool() != Some(true)).then(|| denied(name, &resp["status"]))
            }
            Err(Refusal::DryRun) => Some(ApiError::bad_request(format!(
                "admission webhook \"{name}\" has side effects and does not support dry run"
            ))),
            Err(Refusal::Call(e)) if fail_closed => Some(ApiError::internal(&format!(
                "failed calling webhook \"{name}\": {e}"
            ))),
            Err(Refusal::Call(e)) => {
                tracing::warn!("failed calling webhook {name:?} (failurePolicy Ignore): {e}");
                None
            }
        };
        if first_err.is_none() {
            first_err = err;
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Why a hook refused without an answer of its own.
enum Refusal {
    /// A dry run of a hook with side effects.
    DryRun,
    /// The call failed (the text after `failed calling webhook "NAME": `).
    Call(String),
}

/// webhookerrors.ToStatusErr
fn denied(name: &str, status: &Value) -> ApiError {
    let denied_by = format!("admission webhook \"{name}\" denied the request");
    let msg = status["message"].as_str().unwrap_or("");
    let reason = status["reason"].as_str().unwrap_or("");
    let message = if !msg.is_empty() {
        format!("{denied_by}: {msg}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    let mut code = status["code"].as_u64().unwrap_or(0) as u16;
    if code < 400 {
        code = 400;
    }
    ApiError {
        code,
        reason: reason.to_string(),
        message,
        details: status.get("details").filter(|d| !d.is_null()).cloned(),
    }
}

struct Endpoint {
    url: String,
    connect: String,
    server_name: String,
    host_header: String,
    path: String,
}

fn endpoint(state: &State, cluster: &str, cc: &Value, timeout: u64) -> Result<Endpoint, String> {
    if let Some(u) = cc["url"].as_str() {
        let parsed = url::Url::parse(u).map_err(|e| format!("invalid url {u:?}: {e}"))?;
        let host = parsed.host_str().unwrap_or("").to_string();
        let port = parsed.port_or_known_default().unwrap_or(443);
        let path = if parsed.path().is_empty() {
            "/"
        } else {
            parsed.path()
        };
        let path = format!("{path}?timeout={timeout}s");
        let host_port = if parsed.port().is_some() {
            format!("{host}:{port}")
        } else {
            host.clone()
        };
        let url = format!("https://{host_port}{path}");
        return Ok(Endpoint {
            url,
            connect: format!(
                "{}:{port}",
                host.trim_start_matches('[').trim_end_matches(']')
            ),
            server_name: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            host_header: host_port,
            path,
        });
    }
    let svc = &cc["service"];
    let name = svc["name"].as_str().unwrap_or("");
    let ns = svc["namespace"].as_str().unwrap_or("");
    let port = svc["port"].as_u64().unwrap_or(443);
    let p = svc["path"].as_str().unwrap_or("/");
    let path = format!("{}?timeout={timeout}s", if p.is_empty() { "/" } else { p });
    let host = format!("{name}.{ns}.svc");
    let url = format!("https://{host}:{port}{path}");
    let connect = resolve_service(state, cluster, ns, name, port)
        .map_err(|e| format!("failed to call webhook: Post \"{url}\": {e}"))?;
    Ok(Endpoint {
        url,
        connect,
        server_name: host.clone(),
        host_header: format!("{host}:{port}"),
        path,
    })
}

/// The address a `clientConfig.service` reference leads to, resolved as
/// kube-apiserver's endpoint service resolver does
/// (`staging/src/k8s.io/kube-aggregator/pkg/apiserver/resolvers.go`,
/// `staging/src/k8s.io/apiserver/pkg/util/proxy/proxy.go`): the Service must exist
/// and declare the port, its type must be ClusterIP, NodePort or LoadBalancer (an
/// ExternalName Service leads to its external name at the referenced port), and
/// one of its ready endpoints (EndpointSlices labelled `kubernetes.io/service-name`;
/// for a Service without selector also its Endpoints, which kube-controller-manager
/// mirrors into slices) serving the port's name is picked at random. Errors carry
/// the resolver's texts.
fn resolve_service(
    state: &State,
    cluster: &str,
    namespace: &str,
    name: &str,
    port: u64,
) -> Result<String, String> {
    let key = |n: &str| Key {
        cluster: cluster.to_string(),
        namespace: namespace.to_string(),
        name: n.to_string(),
    };
    let core = |resource: &str| Gr {
        group: String::new(),
        resource: resource.into(),
    };
    let Some(svc) = state.store.get(&core("services"), &key(name)) else {
        return Err(format!("service \"{name}\" not found"));
    };
    // ExternalName: both of kube-apiserver's resolvers dial the external name at
    // the port the reference gives, without looking at the Service's ports
    // (`ResolveCluster`, `staging/src/k8s.io/apiserver/pkg/util/proxy/proxy.go`).
    if svc["spec"]["type"].as_str() == Some("ExternalName") {
        let host = svc["spec"]["externalName"].as_str().unwrap_or("");
        let host = if host == "localhost" {
            "127.0.0.1"
        } else {
            host
        };
        return Ok(join_host_port(host, port));
    }
    let Some(svc_port) = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(port))
    else {
        return Err(format!(
            "no service port {port} found for service \"{name}\""
        ));
    };
    let port_name = svc_port["name"].as_str().unwrap_or("");
    let kind = svc["spec"]["type"].as_str().unwrap_or("ClusterIP");
    if !matches!(kind, "ClusterIP" | "NodePort" | "LoadBalancer") {
        return Err(format!("unsupported service type \"{kind}\""));
    }
    let mut addresses: Vec<String> = vec![];
    let slices = state.store.list(
        &Gr {
            group: "discovery.k8s.io".into(),
            resource: "endpointslices".into(),
        },
        Some(cluster),
        Some(namespace),
    );
    for slice in slices
        .0
        .iter()
        .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"].as_str() == Some(name))
    {
        for target in ports_named(&slice["ports"], port_name) {
            for ep in slice["endpoints"].as_array().into_iter().flatten() {
                if ep["conditions"]["ready"].as_bool() == Some(false) {
                    continue;
                }
                for ip in ep["addresses"].as_array().into_iter().flatten() {
                    if let Some(ip) = ip.as_str() {
                        addresses.push(join_host_port(ip, target));
                    }
                }
            }
        }
    }
    if svc["spec"]["selector"].is_null()
        && let Some(eps) = state.store.get(&core("endpoints"), &key(name))
    {
        for subset in eps["subsets"].as_array().into_iter().flatten() {
            for target in ports_named(&subset["ports"], port_name) {
                for a in subset["addresses"].as_array().into_iter().flatten() {
                    if let Some(ip) = a["ip"].as_str() {
                        let addr = join_host_port(ip, target);
                        if !addresses.contains(&addr) {
                            addresses.push(addr);
                        }
                    }
                }
            }
        }
    }
    if addresses.is_empty() {
        return Err(format!("no endpoints available for service \"{name}\""));
    }
    let pick = {
        use std::hash::{BuildHasher as _, Hasher as _};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(addresses.len());
        h.finish() as usize % addresses.len()
    };
    Ok(addresses.swap_remove(pick))
}

/// The port numbers of the endpoint ports in `ports` named `name` (no name: "").
fn ports_named<'a>(ports: &'a Value, name: &'a str) -> impl Iterator<Item = u64> + 'a {
    ports
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |p| p["name"].as_str().unwrap_or("") == name)
        .filter_map(|p| p["port"].as_u64())
}

/// Go's `net.JoinHostPort`: an IPv6 address in brackets.
fn join_host_port(host: &str, port: u64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn go_io_error(addr: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("dial tcp {addr}: connect: connection refused")
        }
        std::io::ErrorKind::TimedOut => format!("dial tcp {addr}: i/o timeout"),
        _ => {
            let s = e.to_string();
            if s.contains("failed to lookup")
                || s.contains("Name or service not known")
                || s.contains("resolve")
            {
                let host = addr.rsplit_once(':').map(|h| h.0).unwrap_or(addr);
                format!("dial tcp: lookup {host}: no such host")
            } else {
                format!("dial tcp {addr}: {s}")
            }
        }
    }
}

fn go_tls_error(e: &std::io::Error, server_name: &str) -> String {
    let s = e.to_string();
    if s.contains("UnknownIssuer") || s.contains("unknown issuer") || s.contains("BadSignature") {
        "tls: failed to verify certificate: x509: certificate signed by unknown authority".into()
    } else if s.contains("NotValidForName") || s.contains("not valid for name") {
        format!(
            "tls: failed to verify certificate: x509: certificate is not valid for {server_name}"
        )
    } else if s.contains("Expired") || s.contains("expired") {
        "tls: failed to verify certificate: x509: certificate has expired or is not yet valid"
            .into()
    } else {
        format!("remote error: tls: {s}")
    }
}

async fn call_webhook(
    state: &State,
    cluster: &str,
    wh: &Value,
    request: &Value,
) -> Result<Value, String> {
    let timeout = wh["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30);
    let ep = endpoint(state, cluster, &wh["clientConfig"], timeout)?;
    let ca = wh["clientConfig"]["caBundle"]
        .as_str()
        .map(|b| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let review =
        json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request});
    let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
    let post = format!("Post \"{}\"", ep.url);
    let fut = async {
        let tcp = TcpStream::connect(&ep.connect).await.map_err(|e| {
            format!(
                "failed to call webhook: {post}: {}",
                go_io_error(&ep.connect, &e)
            )
        })?;
        let _ = tcp.set_nodelay(true);
        let cfg = tls::client_config(&ca).map_err(|e| format!("failed to call webhook: {e}"))?;
        let connector = TlsConnector::from(Arc::new(cfg));
        let sn = rustls_pki_types::ServerName::try_from(ep.server_name.clone())
            .map_err(|e| format!("failed to call webhook: {post}: {e}"))?;
        let stream = connector.connect(sn, tcp).await.map_err(|e| {
            format!(
                "failed to call webhook: {post}: {}",
                go_tls_error(&e, &ep.server_name)
            )
        })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("failed to call webhook: {post}: {e}"))?;
        tokio::spawn(conn);
        let req = http::Request::post(ep.path.clone())
            .header(http::header::HOST, ep.host_header.clone())
            .header(http::header::ACCEPT, "application/json, */*")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::USER_AGENT, "kube-apiserver-admission")
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(Full::new(Bytes::from(body.clone())))
            .map_err(|e| e.to_string())?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("failed to call webhook: {post}: {e}"))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("failed to call webhook: {post}: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "failed to call webhook: the server responded with the status code {} but did not return more information",
                status.as_u16()
            ));
        }
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("received invalid webhook response: {e}"))?;
        Ok(v)
    };
    let v = match tokio::time::timeout(Duration::from_secs(timeout), fut).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(format!(
                "failed to call webhook: {post}: context deadline exceeded"
            ));
        }
    };
    if v["kind"] != "AdmissionReview" || v["apiVersion"] != "admission.k8s.io/v1" {
        return Err(format!(
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            v["apiVersion"].as_str().unwrap_or(""),
            v["kind"].as_str().unwrap_or("")
        ));
    }
    let resp = v["response"].clone();
    if !resp.is_object() {
        return Err("received invalid webhook response: webhook response was absent".into());
    }
    let want = request["uid"].as_str().unwrap_or("");
    let got = resp["uid"].as_str().unwrap_or("");
    if want != got {
        return Err(format!(
            "received invalid webhook response: expected response.uid=\"{want}\", got \"{got}\""
        ));
    }
    Ok(resp)
}

/// Validation of ValidatingWebhookConfiguration objects (the parts that matter).
pub fn validate_config(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let mut causes = vec![];
    let mut names = std::collections::HashSet::new();
    for (i, wh) in obj["webhooks"].as_array().into_iter().flatten().enumerate() {
        let n = wh["name"].as_str().unwrap_or("");
        if n.is_empty() {
            causes.push((
                format!("webhooks[{i}].name"),
                "FieldValueRequired".into(),
                "Required value".into(),
            ));
        } else if !names.insert(n.to_string()) {
            causes.push((
                format!("webhooks[{i}].name"),
                "FieldValueDuplicate".into(),
                format!("Duplicate value: \"{n}\""),
            ));
        } else if n.split('.').count() < 3 {
            causes.push((format!("webhooks[{i}].name"), "FieldValueInvalid".into(), format!("Invalid value: \"{n}\": should be a domain with at least three segments separated by dots")));
        }
        match wh["sideEffects"].as_str() {
            Some("None") | Some("NoneOnDryRun") => {}
            Some(s) => causes.push((
                format!("webhooks[{i}].sideEffects"),
                "FieldValueNotSupported".into(),
                format!("Unsupported value: \"{s}\": supported values: \"None\", \"NoneOnDryRun\""),
            )),
            None => causes.push((
                format!("webhooks[{i}].sideEffects"),
                "FieldValueRequired".into(),
                "Required value".into(),
            )),
        }
        if wh["admissionReviewVersions"]
            .as_array()
            .is_none_or(|a| a.is_empty())
        {
            causes.push((
                format!("webhooks[{i}].admissionReviewVersions"),
                "FieldValueRequired".into(),
                "Required value: must specify one of v1, v1beta1".into(),
            ));
        } else if !list_has(&wh["admissionReviewVersions"], "v1") {
            causes.push((
                format!("webhooks[{i}].admissionReviewVersions"),
                "FieldValueInvalid".into(),
                "Invalid value: must include at least one of v1, v1beta1".into(),
            ));
        }
        let cc = &wh["clientConfig"];
        match (cc["url"].as_str(), cc["service"].is_object()) {
            (Some(_), true) => causes.push((
                format!("webhooks[{i}].clientConfig"),
                "FieldValueRequired".into(),
                "Required value: exactly one of url or service is required".into(),
            )),
            (None, false) => causes.push((
                format!("webhooks[{i}].clientConfig"),
                "FieldValueRequired".into(),
                "Required value: exactly one of url or service is required".into(),
            )),
            (Some(u), false) => match url::Url::parse(u) {
                Ok(p) if p.scheme() != "https" => causes.push((
                    format!("webhooks[{i}].clientConfig.url"),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: \"{u}\": 'https' is the only allowed URL scheme"),
                )),
                Ok(p) if p.query().is_some() => causes.push((
                    format!("webhooks[{i}].clientConfig.url"),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: \"{u}\": query parameters are not allowed"),
                )),
                Ok(p) if p.fragment().is_some() => causes.push((
                    format!("webhooks[{i}].clientConfig.url"),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: \"{u}\": fragments are not allowed"),
                )),
                Ok(_) => {}
                Err(e) => causes.push((
                    format!("webhooks[{i}].clientConfig.url"),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: \"{u}\": host must be specified ({e})"),
                )),
            },
            (None, true) => {
                if cc["service"]["name"].as_str().is_none_or(str::is_empty) {
                    causes.push((
                        format!("webhooks[{i}].clientConfig.service.name"),
                        "FieldValueRequired".into(),
                        "Required value: service name is required".into(),
                    ));
                }
                if cc["service"]["namespace"]
                    .as_str()
                    .is_none_or(str::is_empty)
                {
                    causes.push((
                        format!("webhooks[{i}].clientConfig.service.namespace"),
                        "FieldValueRequired".into(),
                        "Required value: service namespace is required".into(),
                    ));
                }
            }
        }
        if let Some(fp) = wh["failurePolicy"].as_str()
            && fp != "Fail"
            && fp != "Ignore"
        {
            causes.push((
                format!("webhooks[{i}].failurePolicy"),
                "FieldValueNotSupported".into(),
                format!("Unsupported value: \"{fp}\": supported values: \"Fail\", \"Ignore\""),
            ));
        }
        if let Some(t) = wh["timeoutSeconds"].as_i64()
            && !(1..=30).contains(&t)
        {
            causes.push((
                format!("webhooks[{i}].timeoutSeconds"),
                "FieldValueInvalid".into(),
                format!("Invalid value: {t}: the timeout value must be between 1 and 30 seconds"),
            ));
        }
        for (j, mc) in wh["matchConditions"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let expr = mc["expression"].as_str().unwrap_or("");
            if let Err(e) = cel::parse(expr) {
                causes.push((
                    format!("webhooks[{i}].matchConditions[{j}].expression"),
                    "FieldValueInvalid".into(),
                    format!("Invalid value: \"{expr}\": compilation failed: {}", e.0),
                ));
            }
        }
    }
    crate::admreg_rules::validate_webhook_rules(obj, &mut causes);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

/// Validation of a ValidatingAdmissionPolicy's resource rules, as kube-apiserver
/// does it.
pub fn validate_policy(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let mut causes = vec![];
    crate::admreg_rules::validate_policy_rules(obj, &mut causes);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

/// Server-side defaults of admissionregistration.k8s.io/v1 webhooks.
pub fn default_config(obj: &mut Value) {
    if let Some(whs) = obj.get_mut("webhooks").and_then(|w| w.as_array_mut()) {
        for wh in whs.iter_mut().filter(|w| w.is_object()) {
            if wh["failurePolicy"].is_null() {
                wh["failurePolicy"] = json!("Fail");
            }
            if wh["matchPolicy"].is_null() {
                wh["matchPolicy"] = json!("Equivalent");
            }
            if wh["namespaceSelector"].is_null() {
                wh["namespaceSelector"] = json!({});
            }
            if wh["objectSelector"].is_null() {
                wh["objectSelector"] = json!({});
            }
            if wh["timeoutSeconds"].is_null() {
                wh["timeoutSeconds"] = json!(10);
            }
            if wh["clientConfig"]["service"].is_object()
                && wh["clientConfig"]["service"]["port"].is_null()
            {
                wh["clientConfig"]["service"]["port"] = json!(443);
            }
            if let Some(rules) = wh.get_mut("rules").and_then(|r| r.as_array_mut()) {
                for r in rules.iter_mut().filter(|r| r.is_object()) {
                    if r["scope"].is_null() {
                        r["scope"] = json!("*");
                    }
                }
            }
        }
    }
}
