//! The admin server of both binaries, in plain HTTP: `/healthz` (and
//! `/livez`) answer 200 while the process runs, `/readyz` 200 once the
//! binary says it is ready (else 503 with the reason), `/metrics` the
//! Prometheus text exposition.

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use super::http::{Body, Handler, Limits, text};

/// Content type of the Prometheus text exposition.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// What a binary tells its admin server.
pub trait Probes: Send + Sync + 'static {
    /// `Ok` when ready, else why not (the body of the 503 reads `not ready: {why}`).
    fn readiness(&self) -> Result<(), String>;

    /// The Prometheus text exposition of the binary's metrics.
    fn metrics(&self) -> String;

    /// The server closed an admin connection (see [`Handler::closed`]).
    fn closed(&self, reason: &'static str) {
        let _ = reason;
    }
}

/// The admin listener: [`Probes`] under `limits`.
pub struct Admin<P> {
    probes: P,
    limits: Limits,
}

impl<P: Probes> Admin<P> {
    /// The admin server of `probes`.
    pub fn new(probes: P, limits: Limits) -> Arc<Self> {
        Arc::new(Self { probes, limits })
    }
}

/// The Prometheus text exposition of `registry`.
pub fn render(registry: &prometheus::Registry) -> String {
    use prometheus::Encoder as _;
    let mut buf = Vec::new();
    if let Err(e) = prometheus::TextEncoder::new().encode(&registry.gather(), &mut buf) {
        tracing::warn!(error = %e, "cannot encode metrics");
    }
    String::from_utf8(buf).unwrap_or_default()
}

/// The answer to `method path`.
pub fn route<P: Probes>(probes: &P, method: &Method, path: &str) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET");
    }
    match path {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok"),
        "/readyz" => match probes.readiness() {
            Ok(()) => text(StatusCode::OK, "ok"),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")),
        },
        "/metrics" => {
            let mut resp = text(StatusCode::OK, probes.metrics());
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(METRICS_CONTENT_TYPE),
            );
            resp
        }
        other => text(StatusCode::NOT_FOUND, format!("no such path {other}")),
    }
}

impl<P: Probes> Handler for Admin<P> {
    type Connection = ();

    fn listener(&self) -> &'static str {
        "probes"
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn connection(&self) {}

    async fn handle(&self, _: &(), req: Request<Incoming>) -> Response<Body> {
        route(&self.probes, req.method(), req.uri().path())
    }

    fn closed(&self, reason: &'static str) {
        self.probes.closed(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    struct Fixed(Result<(), String>);

    impl Probes for Fixed {
        fn readiness(&self) -> Result<(), String> {
            self.0.clone()
        }
        fn metrics(&self) -> String {
            "holdfast_up 1\n".into()
        }
    }

    async fn answer(p: &Fixed, method: Method, path: &str) -> (u16, String, String) {
        let resp = route(p, &method, path);
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = resp
            .into_body()
            .collect()
            .await
            .expect("full body")
            .to_bytes();
        (status, ct, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn routes() {
        let ready = Fixed(Ok(()));
        let unready = Fixed(Err("not reconciled yet".into()));
        let plain = "text/plain; charset=utf-8";
        for (probes, method, path, want) in [
            (&unready, Method::GET, "/healthz", (200, plain, "ok\n")),
            (&ready, Method::GET, "/readyz", (200, plain, "ok\n")),
            (
                &unready,
                Method::GET,
                "/readyz",
                (503, plain, "not ready: not reconciled yet\n"),
            ),
            (
                &ready,
                Method::GET,
                "/metrics",
                (200, METRICS_CONTENT_TYPE, "holdfast_up 1\n\n"),
            ),
            (
                &ready,
                Method::GET,
                "/nope",
                (404, plain, "no such path /nope\n"),
            ),
            (&ready, Method::POST, "/healthz", (405, plain, "use GET\n")),
        ] {
            let (status, ct, body) = answer(probes, method.clone(), path).await;
            assert_eq!(
                (status, ct.as_str(), body.as_str()),
                want,
                "{method} {path}"
            );
        }
    }
}
