//! HTTP layer of the webhook: the admission listener (`POST /validate`, bounded
//! bodies, body read timeout) and what the shared admin server reports (readiness,
//! metrics). Both listeners run on the shared serving loop
//! ([`holdfast_shared::runtime::http`]: connection limits, header read timeout,
//! graceful drain on shutdown).

use crate::{
    admission::{Admission, Route},
    metrics::Metrics,
};
use bytes::Bytes;
use bytes::BytesMut;
use holdfast_shared::{
    api::validation::dns_subdomain,
    review::ExportRoute,
    runtime::{
        admin::Probes,
        http::{Body, Handler, text},
    },
};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

pub use holdfast_shared::runtime::http::Limits;

/// Largest AdmissionReview body accepted (the API server's own request limit is 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Bodies up to this size (declared by `Content-Length`) draw from the small-body
/// budget, which large bodies cannot exhaust; everything else from the large one.
pub const SMALL_BODY_BYTES: usize = 256 * 1024;

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

    /// Counts a connection the server closed on `listener` for `reason`.
    fn count_closed(&self, listener: &str, reason: &str) {
        self.metrics
            .closed
            .with_label_values(&[listener, reason])
            .inc();
    }

    /// Ready: serving, every policy registry loaded, discovery complete and the object
    /// stores started (namespace containment can answer).
    pub fn ready(&self) -> bool {
        self.serving.load(Ordering::Acquire)
            && holdfast_shared::policy::ClusterIndex::policies_loaded(
                self.admission.view().as_ref(),
            )
            && self.admission.view().discovery_problem().is_none()
            && self.admission.view().stores_built()
    }
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

/// Why a request path names no review endpoint.
#[derive(Debug, PartialEq, Eq)]
enum BadPath {
    /// Not `/validate` nor under `/validate/kcp/` (404).
    NotFound,
    /// Under `/validate/kcp/` but not `<logical cluster>[/<export>]` (400).
    Malformed(String),
}

/// The review endpoint `path` names: `/validate` (every policy applies),
/// `/validate/kcp/<logical cluster>`, where a workspace's own configuration sends
/// the reviews of its objects, or `/validate/kcp/<logical cluster>/<APIExport
/// name>`, where a provider workspace's configuration sends the reviews of one
/// export (only that export's dependencies apply).
fn route_of(path: &str) -> Result<Route, BadPath> {
    let validate = holdfast_shared::names::VALIDATE_PATH;
    if path == validate {
        return Ok(Route::Plain);
    }
    if path.strip_prefix(validate) == Some(holdfast_shared::workspaces::PATH_SUFFIX) {
        return Ok(Route::Workspaces);
    }
    if path.strip_prefix(validate) == Some(holdfast_shared::enforcement::PATH_SUFFIX) {
        return Ok(Route::Probe);
    }
    let Some(rest) = path
        .strip_prefix(validate)
        .and_then(|p| p.strip_prefix(KCP_SEGMENT))
    else {
        return Err(BadPath::NotFound);
    };
    let malformed = |why: &str| {
        Err(BadPath::Malformed(format!(
            "bad path {path}: expected {validate}{KCP_SEGMENT}<logical cluster>[/<APIExport name>]: {why}"
        )))
    };
    let mut parts = rest.split('/');
    let (Some(cluster), name, None) = (parts.next(), parts.next(), parts.next()) else {
        return malformed("one or two segments required");
    };
    if cluster.contains(':') || !holdfast_shared::kcp::is_logical_cluster_name(cluster) {
        return malformed(&format!("{cluster:?} is not a logical cluster name"));
    }
    let Some(name) = name else {
        return Ok(Route::Workspace(cluster.to_string()));
    };
    if !dns_subdomain(name) {
        return malformed(&format!("{name:?} is not an APIExport name"));
    }
    Ok(Route::Export(ExportRoute {
        cluster: cluster.to_string(),
        name: name.to_string(),
    }))
}

/// What follows [`holdfast_shared::names::VALIDATE_PATH`] in an export's URL.
const KCP_SEGMENT: &str = "/kcp/";

async fn admission_route(
    app: &App,
    connection: &Arc<Semaphore>,
    req: Request<Incoming>,
) -> Response<Body> {
    let route = match route_of(req.uri().path()) {
        Ok(route) => route,
        Err(BadPath::NotFound) => {
            app.metrics.rejected.with_label_values(&["not_found"]).inc();
            return text(
                StatusCode::NOT_FOUND,
                format!("no such path {}", req.uri().path()),
            );
        }
        Err(BadPath::Malformed(why)) => {
            app.metrics.rejected.with_label_values(&["bad_path"]).inc();
            return text(StatusCode::BAD_REQUEST, why);
        }
    };
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
    match app.admission.review(&body, route).await {
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

/// The webhook's readiness and metrics, as the admin server reports them.
pub struct AppProbes(pub Arc<App>);

impl AppProbes {
    fn not_ready(&self) -> Option<String> {
        let app = &self.0;
        if app.ready() {
            None
        } else if !app.serving.load(Ordering::Acquire) {
            Some("admission listener not serving".into())
        } else if !holdfast_shared::policy::ClusterIndex::policies_loaded(
            app.admission.view().as_ref(),
        ) {
            Some("policy registry not loaded".into())
        } else if !app.admission.view().stores_built() {
            Some("the object indexes namespace containment reads are not started yet".into())
        } else {
            let p = app.admission.view().discovery_problem().unwrap_or_default();
            Some(format!(
                "API discovery incomplete ({p}); namespace and \
                 CustomResourceDefinition deletions are refused until it completes"
            ))
        }
    }
}

impl Probes for AppProbes {
    fn readiness(&self) -> Result<(), String> {
        let why = self.not_ready();
        self.0.metrics.ready.set(i64::from(why.is_none()));
        why.map_or(Ok(()), Err)
    }

    fn metrics(&self) -> String {
        self.0.metrics.ready.set(i64::from(self.0.ready()));
        self.0.metrics.render()
    }

    fn closed(&self, reason: &'static str) {
        self.0.count_closed("probes", reason);
    }
}

/// The admission listener: `POST /validate` (and `/validate/kcp/<lc>[/<export>]`) over TLS.
pub struct AdmissionListener(pub Arc<App>);

impl Handler for AdmissionListener {
    /// The connection's request-body budget.
    type Connection = Arc<Semaphore>;

    fn listener(&self) -> &'static str {
        "admission"
    }

    fn limits(&self) -> &Limits {
        &self.0.limits
    }

    fn connection(&self) -> Arc<Semaphore> {
        Arc::new(Semaphore::new(self.0.limits.connection_body_budget))
    }

    async fn handle(&self, budget: &Arc<Semaphore>, req: Request<Incoming>) -> Response<Body> {
        admission_route(&self.0, budget, req).await
    }

    fn closed(&self, reason: &'static str) {
        self.0.count_closed(self.listener(), reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn via(cluster: &str, name: &str) -> Result<Route, BadPath> {
        Ok(Route::Export(ExportRoute {
            cluster: cluster.into(),
            name: name.into(),
        }))
    }

    fn malformed(path: &str, why: &str) -> Result<Route, BadPath> {
        Err(BadPath::Malformed(format!(
            "bad path {path}: expected /validate/kcp/<logical cluster>[/<APIExport name>]: {why}"
        )))
    }

    #[test]
    fn plain_validate_names_no_export() {
        assert_eq!(route_of("/validate"), Ok(Route::Plain));
    }

    #[test]
    fn an_export_path_names_its_logical_cluster_and_export() {
        assert_eq!(
            route_of("/validate/kcp/2x8kq1/net-a"),
            via("2x8kq1", "net-a")
        );
        assert_eq!(
            route_of("/validate/kcp/root/network.test.io"),
            via("root", "network.test.io")
        );
    }

    #[test]
    fn a_workspace_path_names_its_logical_cluster() {
        assert_eq!(route_of("/validate/kcp-workspaces"), Ok(Route::Workspaces));
        assert_eq!(route_of("/validate/enforcement-probe"), Ok(Route::Probe));
        assert_eq!(
            route_of("/validate/kcp/2x8kq1"),
            Ok(Route::Workspace("2x8kq1".into()))
        );
        assert_eq!(
            route_of("/validate/kcp/root"),
            Ok(Route::Workspace("root".into()))
        );
    }

    #[test]
    fn other_paths_are_not_found() {
        for p in [
            "/",
            "/validatex",
            "/validate/",
            "/validate/kcp",
            "/kcp/a/b",
            "/kcp/a",
            "/healthz",
        ] {
            assert_eq!(route_of(p), Err(BadPath::NotFound), "{p}");
        }
    }

    #[test]
    fn bad_segments_are_malformed() {
        let cases = [
            ("/validate/kcp/", "\"\" is not a logical cluster name"),
            ("/validate/kcp/lc/net/extra", "one or two segments required"),
            ("/validate/kcp/lc/net/", "one or two segments required"),
            ("/validate/kcp//net", "\"\" is not a logical cluster name"),
            (
                "/validate/kcp/root:org",
                "\"root:org\" is not a logical cluster name",
            ),
            (
                "/validate/kcp/root:org/net",
                "\"root:org\" is not a logical cluster name",
            ),
            (
                "/validate/kcp/Root/net",
                "\"Root\" is not a logical cluster name",
            ),
            (
                "/validate/kcp/Root",
                "\"Root\" is not a logical cluster name",
            ),
            (
                "/validate/kcp/%2e%2e",
                "\"%2e%2e\" is not a logical cluster name",
            ),
            ("/validate/kcp/lc/", "\"\" is not an APIExport name"),
            (
                "/validate/kcp/lc/Net_A",
                "\"Net_A\" is not an APIExport name",
            ),
            ("/validate/kcp/lc/-net", "\"-net\" is not an APIExport name"),
            (
                "/validate/kcp/lc/%2e%2e",
                "\"%2e%2e\" is not an APIExport name",
            ),
        ];
        for (p, why) in cases {
            assert_eq!(route_of(p), malformed(p, why), "{p}");
        }
    }
}
