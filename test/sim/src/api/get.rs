//! GET of one object (or its scale subresource, or its metadata only).

use super::Target;
use super::request::{key_for, partial, typed};
use super::scale::scale_of;
use crate::errors::{ApiError, ApiResult};
use crate::server::{Ctx, Resp, State};

pub(super) fn get(
    state: &State,
    ctx: &Ctx,
    t: &Target,
    cluster: &str,
    meta_only: bool,
) -> ApiResult<Resp> {
    let name = t.name.as_deref().unwrap_or("");
    let key = key_for(cluster, &t.info, t.namespace.as_deref(), name);
    let obj = state
        .store
        .get(&t.info.gr(), &key)
        .ok_or_else(|| ApiError::not_found(&t.info, name))?;
    // kcp-facts 16: only the bindings to the export, where APIBindings are not claimed.
    if let Some(e) = ctx
        .vw
        .as_ref()
        .and_then(|vw| crate::kcp::bindings_fallback(state, vw, &t.info))
        && !crate::kcp::binds_export(&obj, &e)
    {
        return Err(ApiError::not_found(&t.info, name));
    }
    if t.sub.as_deref() == Some("scale") {
        return Ok(Resp::Json(200, scale_of(&t.info, &obj)));
    }
    if meta_only {
        return Ok(Resp::Json(200, partial(&obj)));
    }
    Ok(Resp::Json(200, typed(&t.info, &t.version, &obj)))
}
