//! LIST: selectors, limit/continue, remainingItemCount, Table and metadata-only output.

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
use std::sync::Arc;

pub(super) fn encode_continue(rv: u64, k: &Key) -> String {
    let v = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": [k.cluster, k.namespace, k.name]});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

pub(super) fn decode_continue(s: &str) -> ApiResult<Key> {
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
    let (selected, rv) = f.select(state, t, ctx.cluster.key());
    let start = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l: &usize| *l > 0)
        .unwrap_or(usize::MAX);
    let mut items = vec![];
    let mut last_key = None;
    let mut remaining = 0usize;
    let mut more = false;
    for (k, v) in &selected {
        if let Some(s) = &start
            && k <= s
        {
            continue;
        }
        if items.len() >= limit {
            more = true;
            remaining += 1;
            if !f.labels.is_empty() || !f.fields.is_empty() {
                // remainingItemCount is only reported without selectors.
                break;
            }
            continue;
        }
        items.push(v.clone());
        last_key = Some(k.clone());
    }
    let mut md = json!({"resourceVersion": rv.to_string()});
    if more && let Some(k) = &last_key {
        md["continue"] = json!(encode_continue(rv, k));
        if f.labels.is_empty() && f.fields.is_empty() {
            md["remainingItemCount"] = json!(remaining);
        }
    }
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
