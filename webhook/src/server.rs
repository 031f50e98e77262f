//! HTTP layer: the HTTPS admission server (HTTP/1.1 and HTTP/2 over rustls) and the
//! plain-HTTP probe server. Bounded bodies, header and body read timeouts, graceful
//! drain on shutdown.

use crate::{admission::Admission, metrics::Metrics};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
};
use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use tokio::{net::TcpListener, sync::watch};
use tokio_rustls::TlsAcceptor;

/// Largest AdmissionReview body accepted (the API server's own request limit is 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Shared state of the HTTP layer.
pub struct App {
    /// The admission handler.
    pub admission: Admission,
    /// Metrics.
    pub metrics: Metrics,
    /// Read timeout for headers and for the body.
    pub read_timeout: Duration,
    /// Set once the HTTPS listener serves.
    pub serving: AtomicBool,
}

impl App {
    /// Ready: serving, and every policy registry loaded.
    pub fn ready(&self) -> bool {
        self.serving.load(Ordering::Acquire)
            && holdfast_shared::policy::ClusterView::policies_loaded(self.admission.view().as_ref())
            && self.admission.view().discovery_problem().is_none()
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

fn json(value: &serde_json::Value) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

async fn admission_route(app: &App, req: Request<Incoming>) -> Response<Body> {
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
    let collected = tokio::time::timeout(
        app.read_timeout,
        Limited::new(req.into_body(), MAX_BODY_BYTES).collect(),
    )
    .await;
    let body = match collected {
        Err(_) => {
            app.metrics
                .rejected
                .with_label_values(&["body_timeout"])
                .inc();
            return text(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received in time",
            );
        }
        Ok(Err(e)) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                app.metrics.rejected.with_label_values(&["too_large"]).inc();
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("body larger than {MAX_BODY_BYTES} bytes"),
                );
            }
            app.metrics
                .rejected
                .with_label_values(&["read_error"])
                .inc();
            return text(StatusCode::BAD_REQUEST, format!("cannot read body: {e}"));
        }
        Ok(Ok(body)) => body.to_bytes(),
    };
    match app.admission.review(&body).await {
        Ok(review) => json(&review),
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

fn builder(read_timeout: Duration) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(10))
        .max_concurrent_streams(256);
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

/// Serves `listener` until `shutdown` fires, then drains in-flight requests for at
/// most `grace`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    role: Role,
    app: Arc<App>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    let builder = Arc::new(builder(app.read_timeout));
    loop {
        let (stream, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        // Reviews are small request/response pairs: never wait for Nagle.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let app = app.clone();
        let builder = builder.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let app = app.clone();
                async move {
                    let resp = match role {
                        Role::Admission => admission_route(&app, req).await,
                        Role::Probes => probe_route(&app, req).await,
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            let result = match tls {
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                            .await;
                    let stream = match handshake {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let conn = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    watcher.watch(conn).await
                }
                None => {
                    let conn = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    watcher.watch(conn).await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::debug!(?role, "connections drained"),
        _ = tokio::time::sleep(grace) => tracing::warn!(?role, "shutdown grace elapsed with connections open"),
    }
}
