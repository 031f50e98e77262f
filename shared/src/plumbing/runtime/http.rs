//! One hardened HTTP serving loop (HTTP/1.1 and HTTP/2, plain or over rustls)
//! for every listener of both binaries: a connection limit enforced at accept,
//! a first-request and an idle deadline per connection, a header read timeout,
//! a TLS handshake timeout and a graceful drain on shutdown. What a listener
//! answers is its [`Handler`].

use std::{
    convert::Infallible,
    future::Future,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use tokio::{net::TcpListener, sync::Semaphore, time::Instant};
use tokio_rustls::TlsAcceptor;

/// How long an idle connection gets to close gracefully before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How often each connection checks its first-request and idle deadlines.
const CONNECTION_TICK: Duration = Duration::from_millis(250);

/// Default read timeout (headers, then body).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default idle timeout.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

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
    /// A connection open this long (less up to a tenth, at random per connection)
    /// is closed gracefully: HTTP/2 GOAWAY, HTTP/1.1 after its request; in-flight
    /// requests finish. Clients connect again, through a Service to any replica, so
    /// a long-lived client's requests spread over the replicas. `None`: no limit.
    pub max_age: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            read_timeout: DEFAULT_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: 512,
            body_budget: 128 * 1024 * 1024,
            connection_body_budget: 8 * 1024 * 1024,
            max_streams: 64,
            max_age: None,
        }
    }
}

/// A response body.
pub type Body = Full<Bytes>;

/// A `text/plain` response: `msg` and a line break.
pub fn text(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
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

/// What a listener answers.
pub trait Handler: Send + Sync + 'static {
    /// State of one connection (a per-connection budget, say).
    type Connection: Send + Sync + 'static;

    /// The listener's name in logs and in [`Handler::closed`].
    fn listener(&self) -> &'static str;

    /// The listener's limits.
    fn limits(&self) -> &Limits;

    /// The state of a new connection.
    fn connection(&self) -> Self::Connection;

    /// Answers one request.
    fn handle(
        &self,
        connection: &Self::Connection,
        req: Request<Incoming>,
    ) -> impl Future<Output = Response<Body>> + Send;

    /// The server closed a connection of this listener, for `reason`:
    /// `connection_limit`, `first_request_timeout`, `idle` or `handshake_timeout`.
    fn closed(&self, reason: &'static str) {
        let _ = reason;
    }
}

fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    /// HTTP/2 keep-alive ping interval, and how long the answer may take.
    const H2_KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(10));
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout)
        .max_buf_size(64 * 1024)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(H2_KEEP_ALIVE.0))
        .keep_alive_timeout(H2_KEEP_ALIVE.1)
        .max_concurrent_streams(limits.max_streams)
        .initial_stream_window_size(256 * 1024)
        .initial_connection_window_size(512 * 1024)
        .max_header_list_size(64 * 1024)
        .max_send_buf_size(256 * 1024)
        .max_pending_accept_reset_streams(Some(64))
        .max_local_error_reset_streams(Some(256));
    b
}

/// What one connection has done, for its first-request and idle deadlines.
#[derive(Debug)]
struct Activity {
    opened: Instant,
    /// This connection's maximum age (the limit less its jitter).
    max_age: Option<Duration>,
    requests: AtomicU64,
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` when the last request finished.
    last_done_ms: AtomicU64,
}

impl Activity {
    fn new(limits: &Limits) -> Self {
        Self {
            opened: Instant::now(),
            max_age: limits
                .max_age
                .map(|m| m.mul_f64(rand::random_range(0.9..=1.0))),
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
        let age = self.opened.elapsed();
        if self.max_age.is_some_and(|max| age > max) {
            return Some("max_age");
        }
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
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
async fn connection<I, H>(
    io: I,
    handler: Arc<H>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    shutdown: tokio_util::sync::CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let activity = Arc::new(Activity::new(handler.limits()));
    let state = Arc::new(handler.connection());
    let service = {
        let (handler, activity) = (handler.clone(), activity.clone());
        hyper::service::service_fn(move |req| {
            let (handler, state) = (handler.clone(), state.clone());
            let in_flight = activity.begin();
            async move {
                let resp = handler.handle(&state, req).await;
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
            _ = shutdown.cancelled(), if closing.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(Instant::now());
            }
            _ = tick.tick() => match closing {
                Some(since) => {
                    if since.elapsed() > CLOSE_GRACE
                        && !shutdown.is_cancelled()
                        && activity.in_flight.load(Ordering::Acquire) == 0
                    {
                        return; // a close the client ignores
                    }
                }
                None => {
                    if let Some(reason) = activity.expired(handler.limits()) {
                        handler.closed(reason);
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

/// Serves `listener` (over TLS with `tls`) until `shutdown` fires, then drains
/// in-flight requests for at most `grace`. At most `limits().max_connections`
/// connections are open at once; the accept loop closes the rest at once.
pub async fn serve<H: Handler>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: Arc<H>,
    shutdown: tokio_util::sync::CancellationToken,
    grace: Duration,
) {
    /// Longest TLS handshake.
    const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
    /// First pause after a failed accept; doubled per failure in a row, up to 32 times.
    const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
    let name = handler.listener();
    let builder = Arc::new(builder(handler.limits()));
    let max = handler.limits().max_connections.clamp(1, u32::MAX as usize);
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
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    let pause = ACCEPT_BACKOFF * (1u32 << accept_errors.min(5));
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => continue,
                        _ = shutdown.cancelled() => break,
                    }
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            handler.closed("connection_limit");
            tracing::debug!(listener = name, %peer, "connection limit reached; closing");
            drop(stream);
            continue;
        };
        // Small request/response pairs: never wait for Nagle.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let (handler, builder, tls, shutdown) = (
            handler.clone(),
            builder.clone(),
            tls.clone(),
            shutdown.clone(),
        );
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
                            handler.closed("handshake_timeout");
                            return;
                        }
                    };
                    connection(stream, handler, builder, shutdown).await;
                }
                None => connection(stream, handler, builder, shutdown).await,
            }
        });
    }
    drop(listener);
    // Every connection holds a slot until it ends: all slots back means drained.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    tokio::select! {
        _ = slots.acquire_many(all) => tracing::debug!(listener = name, "connections drained"),
        _ = tokio::time::sleep(grace) => tracing::warn!(listener = name, "shutdown grace elapsed with connections open"),
    }
}
