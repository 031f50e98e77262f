//! HTTP layer: the HTTPS admission server (HTTP/1.1 and HTTP/2 over rustls) and the
//! plain-HTTP probe server. Bounded bodies, header and body read timeouts, graceful
//! drain on shutdown.

use crate::{admission::Admission, metrics::Metrics};
use bytes::Bytes;
use bytes::BytesMut;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};
use tokio::{
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore, watch},
    time::Instant,
};
use tokio_rustls::TlsAcceptor;

/// Largest AdmissionReview body accepted (the API server's own request limit is 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Bodies up to this size (declared by `Content-Length`) draw from the small-body
/// budget, which large bodies cannot exhaust; everything else from the large one.
pub const SMALL_BODY_BYTES: usize = 256 * 1024;

/// How long an idle connection gets to close gracefully before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How often each connection checks its first-request and idle deadlines.
const CONNECTION_TICK: Duration = Duration::from_millis(250);

/// Longest TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Resource limits of a listener (see docs/decisions.md, "The admission port under load").
#[derive(Clone, Debug)]
pub struct Limits {
    /// A client must send a request's headers within this time of connecting (or of
    /// starting it), and then its body.
    pub read_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// Connections open at once per listener; more are closed at accept.
    pub max_connections: usize,
    /// Bytes of request bodies held at once, all connections together.
    pub body_budget: usize,
    /// Bytes of request bodies one connection may hold at once.
    pub connection_body_budget: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub max_streams: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connections: 512,
            body_budget: 128 * 1024 * 1024,
            connection_body_budget: 8 * 1024 * 1024,
            max_streams: 64,
        }
    }
}

/// Memory budgets for request bodies, shared by every connection of a listener.
#[derive(Debug)]
pub struct BodyBudget {
    small: Arc<Semaphore>,
    large: Arc<Semaphore>,
}

impl BodyBudget {
    /// Splits `total` bytes: a quarter (at least 4 MiB) is kept for small bodies.
    pub fn new(total: usize) -> Self {
        let small = (total / 4).max(4 * 1024 * 1024).min(total.max(1));
        let large = total.saturating_sub(small).max(MAX_BODY_BYTES);
        Self {
            small: Arc::new(Semaphore::new(small)),
            large: Arc::new(Semaphore::new(large)),
        }
    }
}

/// Shared state of the HTTP layer.
pub struct App {
    /// The admission handler.
    pub admission: Admission,
    /// Metrics.
    pub metrics: Metrics,
    /// Connection and body limits.
    pub limits: Limits,
    /// Request-body memory budget.
    pub budget: BodyBudget,
    /// Set once the HTTPS listener serves.
    pub serving: AtomicBool,
}

impl App {
    /// The HTTP layer over `admission` with `limits`.
    pub fn new(admission: Admission, metrics: Metrics, limits: Limits) -> Self {
        Self {
            admission,
            metrics,
            budget: BodyBudget::new(limits.body_budget),
            limits,
            serving: AtomicBool::new(false),
        }
    }

    /// Ready: serving, every policy registry loaded, discovery complete and the object
    /// stores started (namespace containment can answer).
    pub fn ready(&self) -> bool {
        self.serving.load(Ordering::Acquire)
            && holdfast_shared::policy::ClusterView::policies_loaded(self.admission.view().as_ref())
            && self.admission.view().discovery_problem().is_none()
            && self.admission.view().stores_built()
    }
}

type Body = Full<Bytes>;

fn text(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
    let mut body = msg.into();
    body.push('\n');
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn json(bytes: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Why a request body was not taken.
#[derive(Debug)]
enum BodyError {
    TooLarge,
    Timeout,
    Busy,
    Read(String),
}

/// Takes `n` bytes of `sem`, waiting at most until `deadline`.
async fn reserve(
    sem: &Arc<Semaphore>,
    n: usize,
    deadline: Instant,
) -> Result<OwnedSemaphorePermit, BodyError> {
    let n = u32::try_from(n).map_err(|_| BodyError::TooLarge)?;
    match tokio::time::timeout_at(deadline, sem.clone().acquire_many_owned(n)).await {
        Ok(Ok(permit)) => Ok(permit),
        Ok(Err(_)) | Err(_) => Err(BodyError::Busy),
    }
}

/// Reads a request body of at most [`MAX_BODY_BYTES`] before `read_timeout`, holding
/// its size in the connection's and the listener's budgets (returned permits) so that
/// bodies in memory never exceed them. A declared `Content-Length` is reserved at
/// once (all or nothing, first come first served); undeclared bodies grow their
/// reservation in 64 KiB steps. A reservation waits at most half the read timeout:
/// past that the server is busy, and says so (503) while the client can still retry.
async fn read_body(
    app: &App,
    connection: &Arc<Semaphore>,
    mut body: Incoming,
    declared: Option<usize>,
) -> Result<(Bytes, Vec<OwnedSemaphorePermit>), BodyError> {
    const STEP: usize = 64 * 1024;
    let deadline = Instant::now() + app.limits.read_timeout;
    let budget_wait = app.limits.read_timeout / 2;
    let lane = match declared {
        Some(n) if n <= SMALL_BODY_BYTES => &app.budget.small,
        _ => &app.budget.large,
    };
    let mut held = Vec::new();
    let mut reserved = 0usize;
    if let Some(n) = declared.filter(|n| *n > 0) {
        let until = (Instant::now() + budget_wait).min(deadline);
        held.push(reserve(connection, n, until).await?);
        held.push(reserve(lane, n, until).await?);
        reserved = n;
    }
    let mut buf = BytesMut::with_capacity(reserved);
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(BodyError::Timeout),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Read(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let len = buf.len() + data.len();
        if len > MAX_BODY_BYTES {
            return Err(BodyError::TooLarge);
        }
        if len > reserved {
            let more = (len - reserved).max(STEP).min(MAX_BODY_BYTES - reserved);
            let until = (Instant::now() + budget_wait).min(deadline);
            held.push(reserve(connection, more, until).await?);
            held.push(reserve(lane, more, until).await?);
            reserved += more;
        }
        buf.extend_from_slice(&data);
    }
    Ok((buf.freeze(), held))
}

async fn admission_route(
    app: &App,
    connection: &Arc<Semaphore>,
    req: Request<Incoming>,
) -> Response<Body> {
    if req.uri().path() != holdfast_shared::names::VALIDATE_PATH {
        app.metrics.rejected.with_label_values(&["not_found"]).inc();
        return text(
            StatusCode::NOT_FOUND,
            format!("no such path {}", req.uri().path()),
        );
    }
    if req.method() != Method::POST {
        app.metrics
            .rejected
            .with_label_values(&["method_not_allowed"])
            .inc();
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "method {} not allowed: POST an AdmissionReview",
                req.method()
            ),
        );
        resp.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        return resp;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        app.metrics.rejected.with_label_values(&["too_large"]).inc();
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body larger than {MAX_BODY_BYTES} bytes"),
        );
    }
    let declared = declared.and_then(|n| usize::try_from(n).ok());
    let (body, _held) = match read_body(app, connection, req.into_body(), declared).await {
        Ok(read) => read,
        Err(BodyError::Timeout) => {
            app.metrics
                .rejected
                .with_label_values(&["body_timeout"])
                .inc();
            return text(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received in time",
            );
        }
        Err(BodyError::TooLarge) => {
            app.metrics.rejected.with_label_values(&["too_large"]).inc();
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body larger than {MAX_BODY_BYTES} bytes"),
            );
        }
        Err(BodyError::Busy) => {
            app.metrics.rejected.with_label_values(&["busy"]).inc();
            let mut resp = text(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many request bodies in flight, retry later",
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return resp;
        }
        Err(BodyError::Read(e)) => {
            app.metrics
                .rejected
                .with_label_values(&["read_error"])
                .inc();
            return text(StatusCode::BAD_REQUEST, format!("cannot read body: {e}"));
        }
    };
    match app.admission.review(&body).await {
        Ok(review) => json(review),
        Err(e) => {
            app.metrics
                .rejected
                .with_label_values(&["bad_review"])
                .inc();
            // One line: the first line of the parser's message.
            let msg = e.to_string();
            text(
                StatusCode::BAD_REQUEST,
                msg.lines().next().unwrap_or("bad request").to_string(),
            )
        }
    }
}

async fn probe_route(app: &App, req: Request<Incoming>) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET");
    }
    match req.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok"),
        "/readyz" => {
            let ready = app.ready();
            app.metrics.ready.set(i64::from(ready));
            if ready {
                text(StatusCode::OK, "ok")
            } else if !app.serving.load(Ordering::Acquire) {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: admission listener not serving",
                )
            } else if !holdfast_shared::policy::ClusterView::policies_loaded(
                app.admission.view().as_ref(),
            ) {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: policy registry not loaded",
                )
            } else if !app.admission.view().stores_built() {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: the object indexes namespace containment reads are not started yet",
                )
            } else {
                let p = app.admission.view().discovery_problem().unwrap_or_default();
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "not ready: API discovery incomplete ({p}); namespace and \
                         CustomResourceDefinition deletions are refused until it completes"
                    ),
                )
            }
        }
        "/metrics" => {
            app.metrics.ready.set(i64::from(app.ready()));
            let mut resp = text(StatusCode::OK, app.metrics.render());
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            resp
        }
        other => text(StatusCode::NOT_FOUND, format!("no such path {other}")),
    }
}

fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout)
        .max_buf_size(64 * 1024)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(10))
        .max_concurrent_streams(limits.max_streams)
        .initial_stream_window_size(256 * 1024)
        .initial_connection_window_size(512 * 1024)
        .max_header_list_size(64 * 1024)
        .max_send_buf_size(256 * 1024)
        .max_pending_accept_reset_streams(Some(64))
        .max_local_error_reset_streams(Some(256));
    b
}

/// Which routes a listener serves.
#[derive(Clone, Copy, Debug)]
pub enum Role {
    /// `/validate` over TLS.
    Admission,
    /// `/healthz`, `/readyz`, `/metrics` in plain HTTP.
    Probes,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Admission => "admission",
            Role::Probes => "probes",
        }
    }
}

/// What one connection has done, for its first-request and idle deadlines.
#[derive(Debug)]
struct Activity {
    opened: Instant,
    requests: AtomicU64,
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` when the last request finished.
    last_done_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            last_done_ms: AtomicU64::new(0),
        }
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Ordering::AcqRel);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    /// `Some(reason)` when the connection should be closed now.
    fn expired(&self, limits: &Limits) -> Option<&'static str> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let age = self.opened.elapsed();
        if self.requests.load(Ordering::Acquire) == 0 {
            return (age > limits.read_timeout).then_some("first_request_timeout");
        }
        let idle_since = Duration::from_millis(self.last_done_ms.load(Ordering::Acquire));
        (age.saturating_sub(idle_since) > limits.idle_timeout).then_some("idle")
    }
}

/// A request in flight on a connection; finishing it restarts the idle clock.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let ms = u64::try_from(self.0.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_done_ms.store(ms, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves one accepted connection until it ends, is idle too long, sends no request
/// in time, or `shutdown` fires (then it closes gracefully).
async fn connection<I>(
    io: I,
    role: Role,
    app: Arc<App>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut shutdown: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let budget = Arc::new(Semaphore::new(app.limits.connection_body_budget));
    let service = {
        let (app, activity) = (app.clone(), activity.clone());
        hyper::service::service_fn(move |req| {
            let (app, budget) = (app.clone(), budget.clone());
            let in_flight = activity.begin();
            async move {
                let resp = match role {
                    Role::Admission => admission_route(&app, &budget, req).await,
                    Role::Probes => probe_route(&app, req).await,
                };
                drop(in_flight);
                Ok::<_, Infallible>(resp)
            }
        })
    };
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(CONNECTION_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing: Option<Instant> = None;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = shutdown.changed(), if closing.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(Instant::now());
            }
            _ = tick.tick() => match closing {
                Some(since) => {
                    if since.elapsed() > CLOSE_GRACE && !*shutdown.borrow() {
                        return; // an idle close the client ignores
                    }
                }
                None => {
                    if let Some(reason) = activity.expired(&app.limits) {
                        app.metrics.closed.with_label_values(&[role.label(), reason]).inc();
                        if reason == "first_request_timeout" {
                            return;
                        }
                        conn.as_mut().graceful_shutdown();
                        closing = Some(Instant::now());
                    }
                }
            },
        }
    }
}

/// Serves `listener` until `shutdown` fires, then drains in-flight requests for at
/// most `grace`. At most `limits.max_connections` connections are open at once;
/// the accept loop closes the rest at once.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    role: Role,
    app: Arc<App>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let builder = Arc::new(builder(&app.limits));
    let max = app.limits.max_connections.clamp(1, u32::MAX as usize);
    let slots = Arc::new(Semaphore::new(max));
    let mut accept_errors = 0u32;
    loop {
        let (stream, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => {
                    accept_errors = 0;
                    a
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off, never spin.
                    accept_errors = accept_errors.saturating_add(1);
                    tracing::warn!(error = %e, "accept failed");
                    let pause = Duration::from_millis(50u64 << accept_errors.min(5));
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => continue,
                        _ = shutdown.changed() => break,
                    }
                }
            },
            _ = shutdown.changed() => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            app.metrics
                .closed
                .with_label_values(&[role.label(), "connection_limit"])
                .inc();
            tracing::debug!(%peer, "connection limit reached; closing");
            drop(stream);
            continue;
        };
        // Reviews are small request/response pairs: never wait for Nagle.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let (app, builder, tls, shutdown) =
            (app.clone(), builder.clone(), tls.clone(), shutdown.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                Some(acceptor) => {
                    let stream = match tokio::time::timeout(
                        HANDSHAKE_TIMEOUT,
                        acceptor.accept(stream),
                    )
                    .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            app.metrics
                                .closed
                                .with_label_values(&[role.label(), "handshake_timeout"])
                                .inc();
                            return;
                        }
                    };
                    connection(stream, role, app, builder, shutdown).await;
                }
                None => connection(stream, role, app, builder, shutdown).await,
            }
        });
    }
    drop(listener);
    // Every connection holds a slot until it ends: all slots back means drained.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    tokio::select! {
        _ = slots.acquire_many(all) => tracing::debug!(?role, "connections drained"),
        _ = tokio::time::sleep(grace) => tracing::warn!(?role, "shutdown grace elapsed with connections open"),
    }
}
