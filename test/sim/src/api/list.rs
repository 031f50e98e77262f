//! LIST: selectors, limit/continue, remainingItemCount, Table and metadata-only output.
//!
//! A list cut into pages is served, as kube-apiserver serves it from etcd, as of its
//! first page: that page's selection is kept ([`Snapshots`], named in the continue
//! token) and each later page is the next slice of it, at the first page's
//! resourceVersion. A token whose selection is gone (expired, evicted, another
//! request's) selects again from the store, after the token's key.

use super::Target;
use super::filter::Filter;
use super::request::{list_item, partial, wants_meta, wants_table};
use super::table::table;
use crate::errors::{ApiError, ApiResult};
use crate::server::{Ctx, Resp, State};
use crate::store::Key;
use base64::Engine;
use http::HeaderMap;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long the selection of a list cut into pages is kept for its next page.
const SNAPSHOT_TTL: Duration = Duration::from_secs(300);
/// At most this many selections are kept (the oldest goes first).
const SNAPSHOTS_MAX: usize = 64;

/// Selected objects, in key order.
type Page = Vec<(Key, Arc<Value>)>;

/// The selection a paged list's first page made, for its later pages.
struct Snapshot {
    /// What selected it (resource, cluster, namespace, caller, selectors): a token
    /// presented by another request selects again.
    request: String,
    rv: u64,
    items: Page,
    /// The first item of the next page.
    next: usize,
    at: Instant,
}

/// Every kept selection, by the id its continue tokens carry (process-wide: ids are
/// unique across simulators).
struct Snapshots {
    next_id: u64,
    by_id: HashMap<u64, Snapshot>,
}

fn snapshots() -> &'static Mutex<Snapshots> {
    static SNAPSHOTS: OnceLock<Mutex<Snapshots>> = OnceLock::new();
    SNAPSHOTS.get_or_init(|| {
        Mutex::new(Snapshots {
            next_id: 1,
            by_id: HashMap::new(),
        })
    })
}

fn lock_snapshots() -> std::sync::MutexGuard<'static, Snapshots> {
    match snapshots().lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Keeps `snap`; returns its id.
fn keep_snapshot(snap: Snapshot) -> u64 {
    let mut all = lock_snapshots();
    all.by_id.retain(|_, s| s.at.elapsed() < SNAPSHOT_TTL);
    while all.by_id.len() >= SNAPSHOTS_MAX {
        let Some(oldest) = all
            .by_id
            .iter()
            .min_by_key(|(_, s)| s.at)
            .map(|(id, _)| *id)
        else {
            break;
        };
        all.by_id.remove(&oldest);
    }
    let id = all.next_id;
    all.next_id += 1;
    all.by_id.insert(id, snap);
    id
}

/// The next page (at most `limit` items) of kept selection `id` made by `request`,
/// its resourceVersion and how many items follow it; the selection is dropped once
/// served to its end. None when it is not kept (or was made by another request).
fn snapshot_page(id: u64, request: &str, limit: usize) -> Option<(Page, u64, usize)> {
    let mut all = lock_snapshots();
    let snap = all.by_id.get_mut(&id)?;
    if snap.request != request || snap.at.elapsed() >= SNAPSHOT_TTL {
        return None;
    }
    let end = snap.next.saturating_add(limit).min(snap.items.len());
    let page = snap.items[snap.next..end].to_vec();
    snap.next = end;
    snap.at = Instant::now();
    let (rv, remaining) = (snap.rv, snap.items.len() - end);
    if remaining == 0 {
        all.by_id.remove(&id);
    }
    Some((page, rv, remaining))
}

/// A continue token; `snapshot`: the kept selection it continues.
fn encode_continue(rv: u64, k: &Key, snapshot: Option<u64>) -> String {
    let mut v = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": [k.cluster, k.namespace, k.name]});
    if let Some(id) = snapshot {
        v["snapshot"] = json!(id);
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

/// The kept selection a continue token names, if any.
fn continued_snapshot(s: &str) -> Option<u64> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    v["snapshot"].as_u64()
}

fn decode_continue(s: &str) -> ApiResult<Key> {
    let bad = || {
        ApiError::bad_request(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        )
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let st = v["start"].as_array().ok_or_else(bad)?;
    let g = |i: usize| st.get(i).and_then(|x| x.as_str()).unwrap_or("").to_string();
    Ok(Key {
        cluster: g(0),
        namespace: g(1),
        name: g(2),
    })
}

pub(super) fn list(
    state: &Arc<State>,
    ctx: &Ctx,
    t: &Target,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiResult<Resp> {
    let f = Filter::new(state, ctx, t, query)?;
    let token = query.get("continue").filter(|c| !c.is_empty());
    let start = match token {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l: &usize| *l > 0)
        .unwrap_or(usize::MAX);
    let selectors = !f.labels.is_empty() || !f.fields.is_empty();
    let request = format!(
        "{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}|{:?}",
        t.info.group,
        t.info.resource,
        t.namespace,
        ctx.cluster,
        ctx.vw,
        ctx.shard,
        ctx.identity,
        ctx.user.name,
        query.get("labelSelector"),
        query.get("fieldSelector"),
    );
    let kept = token
        .and_then(|c| continued_snapshot(c))
        .and_then(|id| Some((id, snapshot_page(id, &request, limit)?)));
    let (page, rv, remaining, snapshot) = match kept {
        Some((id, (page, rv, remaining))) => (page, rv, remaining, Some(id)),
        None => {
            let (selected, rv) = f.select(state, t, ctx.cluster.key());
            let mut rest: Vec<(Key, Arc<Value>)> = match &start {
                Some(s) => selected.into_iter().filter(|(k, _)| k > s).collect(),
                None => selected,
            };
            if rest.len() <= limit {
                (rest, rv, 0, None)
            } else {
                let after = rest.split_off(limit);
                let remaining = after.len();
                let id = keep_snapshot(Snapshot {
                    request,
                    rv,
                    items: after,
                    next: 0,
                    at: Instant::now(),
                });
                (rest, rv, remaining, Some(id))
            }
        }
    };
    let mut md = json!({"resourceVersion": rv.to_string()});
    if remaining > 0
        && let Some((k, _)) = page.last()
    {
        md["continue"] = json!(encode_continue(rv, k, snapshot));
        if !selectors {
            // remainingItemCount is only reported without selectors.
            md["remainingItemCount"] = json!(remaining);
        }
    }
    let items: Vec<Arc<Value>> = page.into_iter().map(|(_, v)| v).collect();
    if wants_table(headers) {
        return Ok(Resp::Json(200, table(&t.info, &items, md)));
    }
    if wants_meta(headers) {
        let items: Vec<Value> = items.iter().map(|o| partial(o)).collect();
        return Ok(Resp::Json(
            200,
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": md, "items": items}),
        ));
    }
    let items: Vec<Value> = items
        .iter()
        .map(|o| list_item(&t.info, &t.version, o))
        .collect();
    Ok(Resp::Json(
        200,
        json!({
            "kind": t.info.list_kind,
            "apiVersion": t.info.api_version(&t.version),
            "metadata": md,
            "items": items,
        }),
    ))
}
