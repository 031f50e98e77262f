//! PATCH: the request's content type picks the kind of patch; `update` applies it.

use super::update::Mutation;
use crate::errors::{ApiError, ApiResult};
use crate::registry::ResourceInfo;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;
use std::collections::HashMap;

/// The mutation a PATCH of `info` asks for, by its `Content-Type`.
pub(super) fn mutation(
    info: &ResourceInfo,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &Bytes,
) -> ApiResult<Mutation> {
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    Ok(match ct {
        "application/merge-patch+json" => Mutation::Merge(parse_json(body)?),
        "application/strategic-merge-patch+json" => {
            if !info.builtin {
                return Err(ApiError::unsupported_media_type(ct));
            }
            Mutation::Strategic(parse_json(body)?)
        }
        "application/json-patch+json" => Mutation::JsonPatch(parse_json(body)?),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            if query.get("fieldManager").is_none_or(|f| f.is_empty()) {
                return Err(ApiError::invalid_raw(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("apply patch is not UTF-8"))?;
            let v: Value = serde_saphyr::from_str(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            Mutation::Apply(v)
        }
        _ => return Err(ApiError::unsupported_media_type(ct)),
    })
}

fn parse_json(body: &Bytes) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}
