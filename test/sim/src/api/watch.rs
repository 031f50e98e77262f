//! WATCH: history replay, initial events, bookmarks, 410 Expired, selector transitions.

use super::Target;
use super::filter::Filter;
use super::request::{meta, partial, typed};
use crate::errors::{ApiError, ApiResult};
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

pub(super) fn watch_stream(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    query: &HashMap<String, String>,
    meta_only: bool,
) -> ApiResult<Resp> {
    let mut f = Filter::new(state, ctx, t, query)?;
    f.vw_cache = None;
    let rv_param = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let send_initial = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let from =
        if send_initial || rv_param.is_empty() || rv_param == "0" {
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
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let info = t.info.clone();
    let version = t.version.clone();
    let gr = info.gr();
    let watched = state.store.watch(&gr, from);
    let (history, initial, mut brx, rv_now) = match watched {
        Ok(x) => x,
        Err(oldest) => {
            let st = ApiError::expired(format!(
                "too old resource version: {} ({})",
                from.unwrap_or(0),
                oldest
            ))
            .to_status();
            let _ = tx.try_send(event_line("ERROR", st));
            return Ok(Resp::Stream(rx));
        }
    };
    let state = state.clone();
    let bookmark_every = state.cfg.bookmark_interval;
    tokio::spawn(async move {
        let typed_ev = |o: &Value| {
            if meta_only {
                partial(o)
            } else {
                typed(&info, &version, o)
            }
        };
        let bookmark = |rv: u64, end: bool| {
            let mut md = json!({"resourceVersion": rv.to_string()});
            if end {
                md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            event_line(
                "BOOKMARK",
                if meta_only {
                    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md})
                } else {
                    json!({"kind": info.kind, "apiVersion": info.api_version(&version), "metadata": md})
                },
            )
        };
        let mut initial = initial;
        initial.sort_by(|a, b| {
            (meta(a, "namespace"), meta(a, "name")).cmp(&(meta(b, "namespace"), meta(b, "name")))
        });
        for o in &initial {
            let k = Key {
                cluster: o["metadata"]["annotations"]["kcp.io/cluster"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                namespace: meta(o, "namespace").to_string(),
                name: meta(o, "name").to_string(),
            };
            if f.key_ok(&k)
                && f.obj_ok(o)
                && tx.send(event_line("ADDED", typed_ev(o))).await.is_err()
            {
                return;
            }
        }
        if send_initial && bookmarks && tx.send(bookmark(rv_now, true)).await.is_err() {
            return;
        }
        let mut last_rv = rv_now;
        let filter_ev = |e: &store::Event| -> Option<Bytes> {
            if !f.key_ok(&e.key) {
                return None;
            }
            match e.kind {
                EventType::Added => f
                    .obj_ok(&e.obj)
                    .then(|| event_line("ADDED", typed_ev(&e.obj))),
                EventType::Deleted => {
                    let old_ok = e.old.as_ref().is_some_and(|o| f.obj_ok(o));
                    old_ok.then(|| event_line("DELETED", typed_ev(&e.obj)))
                }
                EventType::Modified => {
                    let new_ok = f.obj_ok(&e.obj);
                    let old_ok = e.old.as_ref().is_some_and(|o| f.obj_ok(o));
                    match (old_ok, new_ok) {
                        (true, true) => Some(event_line("MODIFIED", typed_ev(&e.obj))),
                        (false, true) => Some(event_line("ADDED", typed_ev(&e.obj))),
                        (true, false) => Some(event_line("DELETED", typed_ev(&e.obj))),
                        _ => None,
                    }
                }
            }
        };
        for e in &history {
            last_rv = last_rv.max(e.rv);
            if let Some(b) = filter_ev(e)
                && tx.send(b).await.is_err()
            {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(bookmark_every);
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
                        if let Some(b) = filter_ev(&e) && tx.send(b).await.is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    let (evs, rv, lagged) = state.store.drain_for_bookmark(&mut brx);
                    if lagged {
                        return;
                    }
                    for e in &evs {
                        if let Some(b) = filter_ev(e) && tx.send(b).await.is_err() {
                            return;
                        }
                    }
                    let rv = rv.max(last_rv);
                    last_rv = rv;
                    if tx.send(bookmark(rv, false)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Ok(Resp::Stream(rx))
}
