//! WATCH: history replay, initial events, bookmarks, 410 Expired, selector transitions.

use super::Target;
use super::filter::Filter;
use super::request::{meta, partial, typed};
use crate::errors::{ApiError, ApiResult};
use crate::registry::ResourceInfo;
use crate::server::{Ctx, Resp, State};
use crate::store;
use crate::store::{EventType, Key};
use bytes::Bytes;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub(super) fn event_line(kind: &str, obj: Value) -> Bytes {
    let mut s = json!({"type": kind, "object": obj}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// What a watch asks for.
struct Params {
    /// Replay history after this resourceVersion (None: start with the current state).
    from: Option<u64>,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
}

impl Params {
    fn parse(query: &HashMap<String, String>) -> ApiResult<Params> {
        let rv_param = query
            .get("resourceVersion")
            .map(String::as_str)
            .unwrap_or("");
        let send_initial = query.get("sendInitialEvents").is_some_and(|v| v == "true");
        let bookmarks = query
            .get("allowWatchBookmarks")
            .is_some_and(|v| v == "true");
        let from = if send_initial || rv_param.is_empty() || rv_param == "0" {
            None
        } else {
            Some(rv_param.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?)
        };
        let timeout = query
            .get("timeoutSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(Duration::from_secs(1800));
        Ok(Params {
            from,
            send_initial,
            bookmarks,
            timeout,
        })
    }
}

/// The lines one watch sends: its filter, and how objects are served.
struct Events {
    f: Filter,
    info: Arc<ResourceInfo>,
    version: String,
    meta_only: bool,
    /// The objects of a virtual workspace's wildcard watch the client knows: their
    /// DELETED event reaches it even when their workspace no longer binds the
    /// export by the time the event is sent (kcp's virtual workspace watches the
    /// export's identity across logical clusters: an object deleted while its
    /// APIBinding was still there is seen deleted, docs/kcp-facts.md 34).
    known: Option<std::sync::Mutex<std::collections::HashSet<Key>>>,
}

impl Events {
    fn object(&self, o: &Value) -> Value {
        if self.meta_only {
            partial(o)
        } else {
            typed(&self.info, &self.version, o)
        }
    }

    fn line(&self, kind: &str, o: &Value) -> Bytes {
        event_line(kind, self.object(o))
    }

    /// A BOOKMARK at `rv` (`end`: the one that closes the initial events).
    fn bookmark(&self, rv: u64, end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        event_line(
            "BOOKMARK",
            if self.meta_only {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md})
            } else {
                json!({"kind": self.info.kind, "apiVersion": self.info.api_version(&self.version), "metadata": md})
            },
        )
    }

    /// The ADDED line of an object of the initial state, if the watch selects it.
    fn initial(&self, o: &Value) -> Option<Bytes> {
        let k = Key {
            cluster: o["metadata"]["annotations"]["kcp.io/cluster"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            namespace: meta(o, "namespace").to_string(),
            name: meta(o, "name").to_string(),
        };
        let ok = self.f.key_ok(&k) && self.f.obj_ok(o);
        if ok {
            self.remember(&k, true);
        }
        ok.then(|| self.line("ADDED", o))
    }

    fn remember(&self, k: &Key, present: bool) {
        if let Some(known) = &self.known
            && let Ok(mut known) = known.lock()
        {
            if present {
                known.insert(k.clone());
            } else {
                known.remove(k);
            }
        }
    }

    fn knows(&self, k: &Key) -> bool {
        self.known
            .as_ref()
            .and_then(|m| m.lock().ok().map(|m| m.contains(k)))
            .unwrap_or(false)
    }

    /// The line of a stored event as this watch sees it: objects entering or leaving
    /// its selectors are ADDED or DELETED.
    fn event(&self, e: &Arc<store::Event>) -> Option<Bytes> {
        let gone_known = e.kind == EventType::Deleted && self.knows(&e.key);
        if !gone_known && !self.f.key_ok(&e.key) {
            return None;
        }
        let key = e.key.clone();
        let e = store::present_event(&self.info.gr(), e.clone());
        let old_ok = || e.old.as_ref().is_some_and(|o| self.f.obj_ok(o));
        let kind = match e.kind {
            EventType::Added => self.f.obj_ok(&e.obj).then_some("ADDED"),
            EventType::Deleted => old_ok().then_some("DELETED"),
            EventType::Modified => match (old_ok(), self.f.obj_ok(&e.obj)) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                _ => None,
            },
        }?;
        self.remember(&key, kind != "DELETED");
        Some(self.line(kind, &e.obj))
    }
}

/// WATCH: the initial state or the history after `resourceVersion`, then live events
/// and bookmarks until the timeout, the client leaving or the server stopping; 410
/// Expired (one ERROR event) for a compacted resourceVersion.
pub(super) fn watch_stream(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    query: &HashMap<String, String>,
    meta_only: bool,
) -> ApiResult<Resp> {
    let mut f = Filter::new(state, ctx, t, query)?;
    f.vw_cache = None;
    f.verb = f.verb.map(|_| "watch");
    let params = Params::parse(query)?;
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let start = match state.store.watch(&t.info.gr(), params.from) {
        Ok(x) => x,
        Err(oldest) => {
            let st = ApiError::expired(format!(
                "too old resource version: {} ({})",
                params.from.unwrap_or(0),
                oldest
            ))
            .to_status();
            let _ = tx.try_send(event_line("ERROR", st));
            return Ok(Resp::Stream(rx));
        }
    };
    let wildcard_vw = f.vw.as_ref().is_some_and(|w| w.in_virtual_workspace())
        && matches!(ctx.cluster, crate::server::ClusterSel::Wildcard);
    // A watch from a resourceVersion follows a LIST: the client knows what that
    // LIST showed, the objects selected now.
    let known = wildcard_vw.then(|| {
        let now = if params.from.is_some() {
            state
                .store
                .list_keyed(&t.info.gr(), None, None)
                .0
                .into_iter()
                .filter(|(k, o)| f.key_ok(k) && f.obj_ok(o))
                .map(|(k, _)| k)
                .collect()
        } else {
            std::collections::HashSet::new()
        };
        std::sync::Mutex::new(now)
    });
    let events = Events {
        f,
        info: t.info.clone(),
        version: t.version.clone(),
        meta_only,
        known,
    };
    tokio::spawn(run(state.clone(), events, params, start, tx));
    Ok(Resp::Stream(rx))
}

/// Sends a watch's lines; returns when the watch ends.
async fn run(
    state: Arc<State>,
    ev: Events,
    params: Params,
    (history, mut initial, mut brx, rv_now): store::WatchStart,
    tx: mpsc::Sender<Bytes>,
) {
    initial.sort_by(|a, b| {
        (meta(a, "namespace"), meta(a, "name")).cmp(&(meta(b, "namespace"), meta(b, "name")))
    });
    for o in &initial {
        if let Some(b) = ev.initial(o)
            && tx.send(b).await.is_err()
        {
            return;
        }
    }
    if params.send_initial && params.bookmarks && tx.send(ev.bookmark(rv_now, true)).await.is_err()
    {
        return;
    }
    let mut last_rv = rv_now;
    for e in &history {
        last_rv = last_rv.max(e.rv);
        if let Some(b) = ev.event(e)
            && tx.send(b).await.is_err()
        {
            return;
        }
    }
    let deadline = tokio::time::sleep(params.timeout);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(state.cfg.bookmark_interval);
    tick.tick().await;
    let mut shutdown = state.shutdown_rx.clone();
    loop {
        tokio::select! {
            _ = &mut deadline => return,
            _ = shutdown.changed() => return,
            _ = tx.closed() => return,
            r = brx.recv() => match r {
                Ok(e) => {
                    last_rv = e.rv;
                    if let Some(b) = ev.event(&e) && tx.send(b).await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            },
            _ = tick.tick(), if params.bookmarks => {
                let (evs, rv, lagged) = state.store.drain_for_bookmark(&mut brx);
                if lagged {
                    return;
                }
                for e in &evs {
                    if let Some(b) = ev.event(e) && tx.send(b).await.is_err() {
                        return;
                    }
                }
                let rv = rv.max(last_rv);
                last_rv = rv;
                if tx.send(ev.bookmark(rv, false)).await.is_err() {
                    return;
                }
            }
        }
    }
}
