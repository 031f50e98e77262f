//! HTTPS server, authentication, path routing and discovery.

use crate::errors::{ApiError, ApiResult};
use crate::registry::{self, Registry, ResourceInfo};
use crate::store::Store;
use crate::{SimConfig, User, kcp, tls};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, watch};
use tokio_rustls::TlsAcceptor;

pub type Body = BoxBody<Bytes, Infallible>;

pub struct State {
    pub cfg: SimConfig,
    pub url: String,
    pub addr: SocketAddr,
    pub ca_pem: String,
    pub store: Store,
    pub registry: Registry,
    pub tokens: HashMap<String, User>,
    pub shutdown_tx: watch::Sender<bool>,
    pub shutdown_rx: watch::Receiver<bool>,
    /// Wakes the background controllers (namespace, GC, CRD cleanup, kcp).
    pub kick: Notify,
    /// Objects whose deletion the garbage collector must follow up on.
    pub gc_queue: Mutex<Vec<(crate::registry::Gr, crate::store::Key, Arc<Value>)>>,
    /// Kinds decoded from APIResourceSchemas, by (cluster, schema name), with the
    /// resourceVersion they were decoded at (kcp; saves a decode per request).
    pub schema_infos: crate::kcp::SchemaInfos,
    /// kcp shards, in order (the first is `root`); each has a listener of its own.
    pub shards: Vec<ShardInfo>,
    /// The shard each logical cluster lives on.
    pub lc_shards: RwLock<HashMap<String, String>>,
    /// Workspaces placed without a shard selector so far (round-robin over the shards).
    pub placements: std::sync::atomic::AtomicUsize,
    /// kcp's cache server: the webhook configurations admission sees.
    pub cache: crate::cache::Cache,
}

/// One kcp shard: its name (`root`, `shard-1`, ...) and its own listener.
#[derive(Clone, Debug)]
pub struct ShardInfo {
    pub name: String,
    pub url: String,
}

/// Which listener a request came in on: the front-proxy (`SimConfig.listen`, also the
/// plain Kubernetes endpoint) or a kcp shard (index into `State::shards`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Listener {
    FrontProxy,
    Shard(usize),
}

impl State {
    pub fn gc_candidates(&self) -> Vec<(crate::registry::Gr, crate::store::Key, Arc<Value>)> {
        match self.gc_queue.lock() {
            Ok(mut q) => std::mem::take(&mut *q),
            Err(_) => vec![],
        }
    }
    pub fn gc_requeue(&self, gr: crate::registry::Gr, key: crate::store::Key, obj: Arc<Value>) {
        if let Ok(mut q) = self.gc_queue.lock() {
            q.push((gr, key, obj));
        }
    }
    pub fn uid_exists(&self, uid: &str) -> bool {
        self.store.uid_exists(uid)
    }
}

#[derive(Clone, Debug)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// `userInfo.extra` (impersonated extras; kcp's warrants).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn to_json(&self) -> Value {
        let mut v = json!({"username": self.name});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        v["groups"] = json!(self.groups);
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ClusterSel {
    /// The plain Kubernetes cluster (no `/clusters/` prefix).
    Plain,
    /// A kcp logical cluster.
    Lc(String),
    /// `/clusters/*`
    Wildcard,
}

impl ClusterSel {
    pub fn key(&self) -> Option<&str> {
        match self {
            ClusterSel::Plain => Some(""),
            ClusterSel::Lc(s) => Some(s.as_str()),
            ClusterSel::Wildcard => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct VwCtx {
    pub export_cluster: String,
    pub export_name: String,
    /// The shard serving this virtual workspace: only its logical clusters are visible.
    pub shard: String,
}

pub struct Ctx {
    pub user: UserInfo,
    pub cluster: ClusterSel,
    pub vw: Option<VwCtx>,
    /// The shard a request reached directly (None: the front-proxy).
    pub shard: Option<String>,
    /// `resource:identityHash` of a wildcard request at a shard: the identity.
    pub identity: Option<String>,
    pub warnings: Mutex<Vec<String>>,
}

impl Ctx {
    pub fn internal(user: UserInfo, cluster: &str) -> Ctx {
        Ctx {
            user,
            cluster: if cluster.is_empty() {
                ClusterSel::Plain
            } else {
                ClusterSel::Lc(cluster.to_string())
            },
            vw: None,
            shard: None,
            identity: None,
            warnings: Mutex::new(vec![]),
        }
    }
    pub fn warn(&self, w: String) {
        if let Ok(mut ws) = self.warnings.lock() {
            ws.push(w);
        }
    }
}

pub enum Resp {
    Json(u16, Value),
    Stream(mpsc::Receiver<Bytes>),
    Text(u16, &'static str, String),
}

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

fn json_bytes(v: &Value, pretty: bool) -> Vec<u8> {
    let r = if pretty {
        serde_json::to_vec_pretty(v)
    } else {
        serde_json::to_vec(v)
    };
    r.unwrap_or_default()
}

/// Formats a `Warning` header value like Go's net/http warning helpers.
pub fn warning_header(text: &str) -> String {
    let escaped: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!("299 - \"{escaped}\"")
}

/// Asks a serving loop for an outage of the given length: see `SimHandle::outage`.
pub type OutageSender =
    tokio::sync::mpsc::UnboundedSender<(std::time::Duration, tokio::sync::oneshot::Sender<()>)>;
type OutageReceiver =
    tokio::sync::mpsc::UnboundedReceiver<(std::time::Duration, tokio::sync::oneshot::Sender<()>)>;

/// Starts the front-proxy listener and one listener per kcp shard (all sharing one
/// state); the outage senders are the front-proxy's first, then the shards' in order.
pub async fn start(
    cfg: SimConfig,
) -> anyhow::Result<(Arc<State>, tokio::task::JoinHandle<()>, Vec<OutageSender>)> {
    let pki = tls::generate(&cfg.extra_sans)?;
    let listener = TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let mut listeners = vec![(Listener::FrontProxy, listener, addr)];
    let mut shards = vec![];
    for i in 0..cfg.shards.max(1) {
        let l = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let a = l.local_addr()?;
        shards.push(ShardInfo {
            name: crate::kcp::shard_name(i),
            url: format!("https://{a}"),
        });
        listeners.push((Listener::Shard(i), l, a));
    }
    let acceptor = TlsAcceptor::from(Arc::new(tls::server_config(&pki)?));
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let tokens = cfg
        .users
        .iter()
        .map(|u| (u.token.clone(), u.clone()))
        .collect();
    let state = Arc::new(State {
        url: format!("https://{addr}"),
        addr,
        ca_pem: pki.ca_pem.clone(),
        store: Store::new(cfg.watch_history),
        registry: Registry::new(),
        tokens,
        shutdown_tx,
        shutdown_rx,
        kick: Notify::new(),
        gc_queue: Mutex::new(vec![]),
        schema_infos: crate::kcp::SchemaInfos::default(),
        shards,
        lc_shards: RwLock::new(HashMap::new()),
        placements: std::sync::atomic::AtomicUsize::new(0),
        cache: crate::cache::Cache::default(),
        cfg,
    });
    crate::kcp::index(&state.store);
    crate::controllers::bootstrap(&state).await;
    crate::controllers::spawn(state.clone());
    crate::cache::spawn(state.clone());
    let mut outages = vec![];
    let mut loops = tokio::task::JoinSet::new();
    for (which, listener, addr) in listeners {
        let (outage_tx, outage_rx) = tokio::sync::mpsc::unbounded_channel();
        outages.push(outage_tx);
        let served = Served {
            state: state.clone(),
            which,
            addr,
            acceptor: acceptor.clone(),
        };
        loops.spawn(serve(served, listener, outage_rx));
    }
    let join = tokio::spawn(async move { while loops.join_next().await.is_some() {} });
    Ok((state, join, outages))
}

/// What one listener serves.
struct Served {
    state: Arc<State>,
    which: Listener,
    addr: SocketAddr,
    acceptor: TlsAcceptor,
}

/// The accept loop of one listener, with its outages.
async fn serve(served: Served, listener: TcpListener, mut outage_rx: OutageReceiver) {
    let Served {
        state: st,
        which,
        addr,
        acceptor,
    } = served;
    let mut conns = tokio::task::JoinSet::new();
    let mut shutdown = st.shutdown_rx.clone();
    let mut listener = listener;
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some((length, done)) = outage_rx.recv() => {
                // Like an API server restart: the port closes, every connection
                // (watches included) is cut, state survives (as in etcd).
                drop(listener);
                conns.abort_all();
                while conns.join_next().await.is_some() {}
                tokio::time::sleep(length).await;
                listener = loop {
                    match TcpListener::bind(addr).await {
                        Ok(l) => break l,
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
                    }
                };
                let _ = done.send(());
            }
            acc = listener.accept() => {
                let Ok((tcp, _)) = acc else { continue };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let st = st.clone();
                conns.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let svc = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, Infallible>(handle(st, which, req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

pub fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::new();
    if let Some(q) = q {
        for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
            m.insert(k.into_owned(), v.into_owned());
        }
    }
    m
}

fn authenticate(state: &State, headers: &HeaderMap) -> Option<UserInfo> {
    let h = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let token = h
        .strip_prefix("Bearer ")
        .or_else(|| h.strip_prefix("bearer "))?;
    let u = state.tokens.get(token.trim())?;
    let mut groups = u.groups.clone();
    if !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Some(UserInfo {
        name: u.name.clone(),
        uid: u.effective_uid(),
        groups,
        extra: Default::default(),
    })
}

/// `(namespace, name)` of a service account user name
/// (`system:serviceaccount:NS:NAME`), split as kube-apiserver's
/// `serviceaccount.SplitUsername` does (exactly two parts, a namespace name and a
/// service account name).
fn service_account_user(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("system:serviceaccount:")?;
    let mut parts = rest.split(':');
    let (ns, sa) = (parts.next()?, parts.next()?);
    (parts.next().is_none()
        && crate::api::is_dns1123_label(ns)
        && crate::api::is_dns1123_subdomain(sa))
    .then_some((ns, sa))
}

/// `Impersonate-User` / `Impersonate-Group` / `Impersonate-Uid` (kubectl --as/--as-group).
///
/// As kube-apiserver (`staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go`):
/// groups, extra or a uid without a user are a 400 (`requested [...] without
/// impersonating a user`); a service account user name is checked as `impersonate` on
/// `serviceaccounts` NAME in its namespace and, without `Impersonate-Group`, gets
/// the groups `system:serviceaccounts` and `system:serviceaccounts:NS`; any other
/// name is checked on `users`; each group on `groups`, each extra value on
/// `userextras/KEY` and a uid on `uids` (group `authentication.k8s.io`), in that
/// order. `system:authenticated` is added unless given.
fn impersonate(state: &State, user: UserInfo, headers: &HeaderMap) -> ApiResult<UserInfo> {
    let text = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    };
    let requested_user = text("impersonate-user")
        .into_iter()
        .next()
        .unwrap_or_default();
    let mut groups = text("impersonate-group");
    let uid = text("impersonate-uid")
        .into_iter()
        .next()
        .unwrap_or_default();
    let mut extra: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-") {
            let key = percent_decode(key);
            if let Ok(v) = value.to_str() {
                extra.push((key, v.to_string()));
            }
        }
    }
    if requested_user.is_empty() {
        if groups.is_empty() && extra.is_empty() && uid.is_empty() {
            return Ok(user);
        }
        // Go's %v of the ObjectReferences asked for (Kind Namespace Name UID
        // APIVersion ResourceVersion FieldPath).
        let mut refs: Vec<String> = groups
            .iter()
            .map(|g| format!("{{Group  {g}     }}"))
            .collect();
        refs.extend(
            extra
                .iter()
                .map(|(k, v)| format!("{{UserExtra  {v}  authentication.k8s.io/v1  {k}}}")),
        );
        if !uid.is_empty() {
            refs.push(format!("{{UID  {uid}  authentication.k8s.io/v1  }}"));
        }
        return Err(ApiError::new(
            400,
            "BadRequest",
            format!(
                "requested [{}] without impersonating a user",
                refs.join(" ")
            ),
        ));
    }
    let name = requested_user;
    let check = |group: &str, resource: &str, subresource: &str, namespace: &str, n: &str| {
        let attrs = crate::rbac::Attributes {
            user: &user.name,
            groups: &user.groups,
            verb: "impersonate",
            group,
            resource,
            subresource,
            namespace,
            name: n,
            cluster: "",
        };
        if crate::rbac::allowed(state, &attrs) {
            return Ok(());
        }
        let scope = if namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{namespace}\"")
        };
        let what = if subresource.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}/{subresource}")
        };
        let mut e = ApiError::new(
            403,
            "Forbidden",
            format!(
                "{resource} \"{n}\" is forbidden: User \"{}\" cannot impersonate resource \"{what}\" in API group \"{group}\" {scope}",
                user.name
            ),
        );
        e.details = Some(json!({"name": n, "group": group, "kind": resource}));
        if group.is_empty() {
            e.details = Some(json!({"name": n, "kind": resource}));
        }
        Err(e)
    };
    let groups_given = !groups.is_empty();
    match service_account_user(&name) {
        Some((ns, sa)) => {
            check("", "serviceaccounts", "", ns, sa)?;
            if !groups_given {
                groups = vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        None => check("", "users", "", "", &name)?,
    }
    if groups_given {
        for g in &groups {
            check("", "groups", "", "", g)?;
        }
    }
    for (k, v) in &extra {
        check("authentication.k8s.io", "userextras", k, "", v)?;
    }
    if !uid.is_empty() {
        check("authentication.k8s.io", "uids", "", "", &uid)?;
    }
    if !groups
        .iter()
        .any(|g| g == "system:authenticated" || g == "system:unauthenticated")
    {
        groups.push("system:authenticated".into());
    }
    let mut extras = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (k, v) in extra {
        extras.entry(k).or_default().push(v);
    }
    Ok(UserInfo {
        name,
        uid,
        groups,
        extra: extras,
    })
}

/// An impersonated extra key, which travels percent-encoded in its header name,
/// decoded; with a malformed escape it is kept as written, as kube-apiserver's
/// `url.PathUnescape` leaves it.
fn percent_decode(s: &str) -> String {
    let malformed = s.match_indices('%').any(|(i, _)| {
        s.get(i + 1..i + 3)
            .is_none_or(|h| !h.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    if malformed {
        return s.to_string();
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map_or_else(|_| s.to_string(), |k| k.into_owned())
}

/// `HOLDFAST_SIM_TRACE=1`: one stderr line per request (method, path, status, duration).
fn trace_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("HOLDFAST_SIM_TRACE").is_ok_and(|v| !v.is_empty() && v != "0"))
}

async fn handle(state: Arc<State>, which: Listener, req: Request<Incoming>) -> Response<Body> {
    if !trace_enabled() {
        return handle_inner(state, which, req).await;
    }
    let start = std::time::Instant::now();
    let line = format!(
        "{} {}",
        req.method(),
        req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("")
    );
    let resp = handle_inner(state, which, req).await;
    eprintln!(
        "holdfast-sim: {line} -> {} in {:?}",
        resp.status().as_u16(),
        start.elapsed()
    );
    resp
}

async fn handle_inner(
    state: Arc<State>,
    which: Listener,
    req: Request<Incoming>,
) -> Response<Body> {
    let pretty = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ua| ua.starts_with("curl"));
    let query = parse_query(req.uri().query());
    let pretty = pretty || query.get("pretty").is_some_and(|p| p == "true");
    let path = req.uri().path().to_string();
    if matches!(path.as_str(), "/healthz" | "/livez" | "/readyz") {
        return text(200, "text/plain; charset=utf-8", "ok".into(), &[]);
    }
    let Some(user) = authenticate(&state, req.headers()) else {
        return error_response(&ApiError::unauthorized(), &[], pretty);
    };
    // Who impersonates, for kcp's impersonation scoping below.
    let impersonator_is_master = req.headers().get("impersonate-user").is_none()
        || user.groups.iter().any(|g| g == "system:masters");
    let user = match impersonate(&state, user, req.headers()) {
        Ok(u) => u,
        Err(e) => return error_response(&e, &[], pretty),
    };
    let method = req.method().clone();
    let headers = req.headers().clone();
    // kube-apiserver refuses bodies over 3 MiB (etcd's request limit). A body up to
    // READ is read whole before the refusal, so the client, still sending, gets the
    // 413 rather than a connection closed under it.
    const LIMIT: usize = 3 * 1024 * 1024;
    const READ: usize = 32 * 1024 * 1024;
    let too_large = || {
        error_response(
            &ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("Request entity too large: limit is {LIMIT}"),
            ),
            &[],
            pretty,
        )
    };
    let body = match http_body_util::Limited::new(req.into_body(), READ)
        .collect()
        .await
    {
        Ok(b) => match b.to_bytes() {
            bytes if bytes.len() > LIMIT => return too_large(),
            bytes => bytes,
        },
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(e) => {
            return error_response(&ApiError::bad_request(e.to_string()), &[], pretty);
        }
    };
    let request = kcp::Request {
        which,
        user: &user,
        method: &method,
        path: &path,
        query: &query,
    };
    let prefix = match kcp::parse_prefix(&state, &request) {
        Ok(x) => x,
        Err(e) => return error_response(&e, &[], pretty),
    };
    let mut user = user;
    if let ClusterSel::Lc(lc) = &prefix.cluster {
        crate::warrant::scope_impersonated(&mut user, impersonator_is_master, lc);
    }
    // The APIExport virtual workspace forwards into a concrete logical cluster
    // impersonating the caller with kcp's warrant (docs/kcp-facts.md 28).
    if prefix.vw.is_some()
        && let ClusterSel::Lc(lc) = &prefix.cluster
    {
        crate::warrant::add_virtual_workspace_warrant(&mut user, lc);
    }
    let ctx = Ctx {
        user,
        cluster: prefix.cluster,
        vw: prefix.vw,
        shard: prefix.shard,
        identity: prefix.identity,
        warnings: Mutex::new(vec![]),
    };
    let rest = prefix.rest;
    if let Err(e) = crate::authz::authorize_path(&state, &ctx, &method, &rest) {
        return error_response(&e, &[], pretty);
    }
    let res = route(&state, &ctx, &method, &rest, &query, &headers, body).await;
    let warnings = ctx.warnings.lock().map(|w| w.clone()).unwrap_or_default();
    match res {
        Ok(Resp::Json(code, v)) => {
            let mut r = Response::new(full(json_bytes(&v, pretty)));
            *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
            finish(&mut r, "application/json", &warnings);
            r
        }
        Ok(Resp::Text(code, ct, t)) => text(code, ct, t, &warnings),
        Ok(Resp::Stream(rx)) => {
            let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
            let stream = futures::StreamExt::map(stream, |b| Ok::<_, Infallible>(Frame::data(b)));
            let mut r = Response::new(StreamBody::new(stream).boxed());
            finish(&mut r, "application/json", &warnings);
            r
        }
        Err(e) => error_response(&e, &warnings, pretty),
    }
}

fn finish(r: &mut Response<Body>, ct: &'static str, warnings: &[String]) {
    let h = r.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(ct));
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    h.insert(
        "audit-id",
        HeaderValue::from_str(&uuid::Uuid::new_v4().to_string())
            .unwrap_or(HeaderValue::from_static("0")),
    );
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&warning_header(w)) {
            h.append("warning", v);
        }
    }
}

fn text(code: u16, ct: &'static str, t: String, warnings: &[String]) -> Response<Body> {
    let mut r = Response::new(full(t));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    finish(&mut r, ct, warnings);
    r
}

pub fn error_response(e: &ApiError, warnings: &[String], pretty: bool) -> Response<Body> {
    let mut r = Response::new(full(json_bytes(&e.to_status(), pretty)));
    *r.status_mut() = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    finish(&mut r, "application/json", warnings);
    r
}

fn wants_aggregated(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for part in accept.split(',') {
        if part.contains("as=APIGroupDiscoveryList") {
            if part.contains("v=v2beta1") {
                return Some("v2beta1");
            }
            if part.contains("v=v2") {
                return Some("v2");
            }
        }
    }
    None
}

/// (group, version) of the stored APIServices backed by a service (aggregated
/// APIs) whose group the simulator does not serve itself. The legacy `/apis` lists
/// them, as kube-aggregator does whether they are available or not; their
/// discovery and resources answer 503. (Aggregated discovery leaves them out.)
fn unavailable_api_services(
    state: &State,
    ctx: &Ctx,
    resources: &[Arc<registry::ResourceInfo>],
) -> Vec<(String, String)> {
    let Some(cluster) = ctx.cluster.key() else {
        return Vec::new();
    };
    let gr = registry::Gr {
        group: "apiregistration.k8s.io".into(),
        resource: "apiservices".into(),
    };
    let mut out: Vec<(String, String)> = state
        .store
        .list(&gr, Some(cluster), None)
        .0
        .iter()
        .filter(|a| a["spec"]["service"].is_object())
        .filter_map(|a| {
            let g = a["spec"]["group"].as_str()?.to_string();
            let v = a["spec"]["version"].as_str()?.to_string();
            (!resources.iter().any(|r| r.group == g)).then_some((g, v))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Aggregated discovery (`/api` when `legacy`, else `/apis`) at `v` (v2 or v2beta1).
fn aggregated(resources: &[Arc<ResourceInfo>], legacy: bool, v: &str) -> Resp {
    let doc = registry::aggregated(resources, legacy, &format!("apidiscovery.k8s.io/{v}"));
    let content_type = if v == "v2" {
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    } else {
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    };
    Resp::Text(200, content_type, doc.to_string())
}

async fn route(
    state: &Arc<State>,
    ctx: &Ctx,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Resp> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let resources = match &ctx.cluster {
        ClusterSel::Wildcard => state.registry.resources_any_kcp(),
        c => state.registry.resources(c.key().unwrap_or("")),
    };
    let resources = match &ctx.vw {
        Some(vw) => kcp::vw_resources(state, vw, &ctx.cluster, &resources),
        None => resources,
    };
    let is_get = method == Method::GET;
    // An aggregated API (an APIService backed by a service) that the simulator has
    // no backend for answers like an unreachable one: 503 "service unavailable".
    let unavailable = unavailable_api_services(state, ctx, &resources);
    if let ["apis", g, rest @ ..] = segs.as_slice()
        && unavailable
            .iter()
            .any(|(ug, uv)| ug == g && rest.first().is_none_or(|v| v == uv))
    {
        return Ok(Resp::Text(
            503,
            "text/plain; charset=utf-8",
            "service unavailable\n".to_string(),
        ));
    }
    match segs.as_slice() {
        [] if is_get => {
            let paths = vec![
                "/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version",
            ];
            Ok(Resp::Json(200, json!({"paths": paths})))
        }
        ["version"] if is_get => Ok(Resp::Json(
            200,
            serde_json::from_str(include_str!("data/version.json")).unwrap_or(Value::Null),
        )),
        ["openapi", "v3"] if is_get => Ok(Resp::Json(200, registry::openapi_v3_root(&resources))),
        ["openapi", "v3", rest @ ..] if is_get => {
            registry::openapi_v3_gv(&resources, &rest.join("/"))
                .map(|v| Resp::Json(200, v))
                .ok_or_else(ApiError::path_not_found)
        }
        ["openapi", ..] => Err(ApiError::path_not_found()),
        ["api"] if is_get => {
            if let Some(v) = wants_aggregated(headers) {
                return Ok(aggregated(&resources, true, v));
            }
            Ok(Resp::Json(
                200,
                registry::legacy_api_versions(&state.addr.to_string()),
            ))
        }
        ["apis"] if is_get => {
            if let Some(v) = wants_aggregated(headers) {
                return Ok(aggregated(&resources, false, v));
            }
            let mut list = registry::api_group_list(&resources);
            if let Some(groups) = list["groups"].as_array_mut() {
                for (g, v) in &unavailable {
                    let gv = json!({"groupVersion": format!("{g}/{v}"), "version": v});
                    groups
                        .push(json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv}));
                }
            }
            Ok(Resp::Json(200, list))
        }
        ["api", "v1"] if is_get => registry::api_resource_list(&resources, "", "v1")
            .map(|v| Resp::Json(200, v))
            .ok_or_else(ApiError::path_not_found),
        ["apis", g] if is_get => {
            let vs = registry::group_versions(&resources, g);
            if vs.is_empty() {
                return Err(ApiError::path_not_found());
            }
            let mut v = registry::api_group_json(g, &vs);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            Ok(Resp::Json(200, v))
        }
        ["apis", g, v] if is_get => registry::api_resource_list(&resources, g, v)
            .map(|v| Resp::Json(200, v))
            .ok_or_else(ApiError::path_not_found),
        ["api", "v1", rest @ ..] if !rest.is_empty() => {
            crate::api::handle(
                state, ctx, &resources, method, "", "v1", rest, query, headers, body,
            )
            .await
        }
        ["apis", g, v, rest @ ..] if !rest.is_empty() => {
            crate::api::handle(
                state, ctx, &resources, method, g, v, rest, query, headers, body,
            )
            .await
        }
        _ => {
            if is_get {
                Err(ApiError::path_not_found())
            } else {
                Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn impersonated_extra_keys_are_unescaped_as_the_api_server_does() {
        assert_eq!(percent_decode("scopes"), "scopes");
        assert_eq!(percent_decode("example.com%2Fteam"), "example.com/team");
        // A malformed escape keeps the whole key as written.
        assert_eq!(percent_decode("a%2Fb%zz"), "a%2Fb%zz");
        assert_eq!(percent_decode("a%2"), "a%2");
    }
}
