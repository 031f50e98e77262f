//! `POST pods/NAME/eviction`.

use super::Call;
use super::delete::{DeleteCall, delete};
use super::request::{dry_run, key_for, meta, options, review};
use crate::admission;
use crate::admission::Attrs;
use crate::errors::{ApiError, ApiResult};
use crate::server::Resp;
use serde_json::{Value, json};
use std::collections::HashMap;

/// `POST pods/NAME/eviction`, as kube-apiserver's eviction REST does it: one CREATE
/// review of the Eviction (`subResource: eviction`, `name` the pod), then the pod is
/// deleted without a DELETE review; `201` with a `Success` Status. (No
/// PodDisruptionBudgets are modelled: every eviction is allowed by them.)
pub(super) async fn evict(
    c: Call<'_>,
    eviction: Value,
    query: &HashMap<String, String>,
) -> ApiResult<Resp> {
    let (state, ctx, t, cluster) = (c.state, c.ctx, c.t, c.cluster);
    let info = &t.info;
    let name = t.name.clone().unwrap_or_default();
    let ns = t.namespace.clone().unwrap_or_default();
    let av = eviction["apiVersion"].as_str().unwrap_or("");
    let kind = eviction["kind"].as_str().unwrap_or("");
    if !matches!(av, "policy/v1" | "policy/v1beta1") || kind != "Eviction" {
        return Err(ApiError::bad_request(format!(
            "the object in the data ({av}, Kind={kind}) is not a policy/v1 Eviction"
        )));
    }
    if meta(&eviction, "name") != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let key = key_for(cluster, info, Some(&ns), &name);
    if state.store.get(&info.gr(), &key).is_none() {
        return Err(ApiError::not_found(info, &name));
    }
    let mut object = eviction.clone();
    object["metadata"]["namespace"] = json!(ns);
    let dry = dry_run(query);
    let base = review(t, cluster, "CREATE", dry, options("CreateOptions", query));
    let attrs = Attrs {
        sub: "eviction",
        name: Some(&name),
        namespace: &ns,
        object: Some(&object),
        ..base
    };
    admission::validate(state, ctx, attrs).await?;
    let mut opts = if eviction["deleteOptions"].is_object() {
        eviction["deleteOptions"].clone()
    } else {
        json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"})
    };
    if dry {
        opts["dryRun"] = json!(["All"]);
    }
    delete(c, &name, &opts, DeleteCall::Unadmitted).await?;
    Ok(Resp::Json(
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}
