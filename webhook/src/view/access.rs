//! [`AccessReview`] for the webhook: what a user may do, asked of the API server of
//! the object's logical cluster (SubjectAccessReviews), and the key that signs
//! deferred-deletion requests ([`super::request_key`]).

use super::{WebhookView, clients::Clients};
use holdfast_shared::{
    policy::{AccessReview, LookupError, logical_cluster},
    review::AdmissionRequest,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use std::time::Duration;

/// How long a SubjectAccessReview may take.
const ACCESS_REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

impl AccessReview for WebhookView {
    async fn can_bypass(&self, req: &AdmissionRequest) -> Result<bool, LookupError> {
        let cluster = req
            .old_object
            .as_ref()
            .map(logical_cluster)
            .unwrap_or_default();
        let u = &req.user_info;
        let extra = u.extra.as_ref().and_then(bypass_extra);
        let spec = SubjectAccessReviewSpec {
            user: Some(u.username.clone()),
            groups: Some(u.groups.clone()),
            uid: u.uid.clone(),
            extra,
            resource_attributes: Some(attributes(
                req,
                holdfast_shared::names::API_GROUP,
                "protections",
                "bypass",
            )),
            ..Default::default()
        };
        Box::pin(access_review(&self.clients, cluster, spec)).await
    }

    async fn can_delete_as(&self, req: &AdmissionRequest, user: &str) -> Result<bool, LookupError> {
        let cluster = req.object.as_ref().map(logical_cluster).unwrap_or_default();
        let spec = SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            groups: Some(holdfast_shared::deferred::impersonated_groups(user)),
            resource_attributes: Some(attributes(
                req,
                &req.resource.group,
                &req.resource.resource,
                "delete",
            )),
            ..Default::default()
        };
        Box::pin(access_review(&self.clients, cluster, spec)).await
    }

    async fn request_key(
        &self,
    ) -> Result<holdfast_shared::request_signature::RequestKey, LookupError> {
        self.request_key.get(self.clients.home()).await
    }
}

/// Asks logical cluster `cluster` whether `spec` is allowed (a SubjectAccessReview).
async fn access_review(
    clients: &Clients,
    cluster: &str,
    spec: SubjectAccessReviewSpec,
) -> Result<bool, LookupError> {
    let client = clients.cluster(cluster)?;
    let sar = SubjectAccessReview {
        spec,
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client);
    let answer = tokio::time::timeout(
        ACCESS_REVIEW_TIMEOUT,
        api.create(&kube::api::PostParams::default(), &sar),
    )
    .await
    .map_err(|e| LookupError::failed("the SubjectAccessReview was not answered in time", e))?
    .map_err(|e| LookupError::failed(format!("SubjectAccessReview failed: {e}"), e))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// `verb` on `group`/`resource`, for the object under review (its namespace and name).
fn attributes(
    req: &AdmissionRequest,
    group: &str,
    resource: &str,
    verb: &str,
) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(group.to_string()),
        resource: Some(resource.to_string()),
        verb: Some(verb.to_string()),
        namespace: req.object_namespace().map(str::to_string),
        name: req.object_name().map(str::to_string),
        ..Default::default()
    }
}

/// The extra kcp attaches to a write made through an APIExport's virtual workspace:
/// a warrant whose group (`system:kcp:admin`) is bound to cluster-admin
/// (`pkg/virtual/apiexport/builder/build.go`, `pkg/authorization/bootstrap/policy.go`).
pub const KCP_WARRANT_EXTRA: &str = "authorization.kcp.io/warrant";

/// The caller's extra as the bypass review asks it: everything the API server
/// gave the caller but kcp's warrants. A warrant lets the virtual workspace act
/// for the provider; it is not the caller's own permission to bypass protection
/// in the consumer's workspace (docs/decisions.md, "Break-glass through a virtual
/// workspace").
pub fn bypass_extra(
    extra: &serde_json::Value,
) -> Option<std::collections::BTreeMap<String, Vec<String>>> {
    let mut map =
        serde_json::from_value::<std::collections::BTreeMap<String, Vec<String>>>(extra.clone())
            .ok()?;
    map.remove(KCP_WARRANT_EXTRA);
    Some(map)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_warrant_is_never_the_callers_permission_to_bypass() {
        let extra = serde_json::json!({
            "authorization.kcp.io/warrant": ["{\"user\":\"system:kcp:admin\",\"groups\":[\"system:kcp:admin\"]}"],
            "authentication.kcp.io/scopes": ["cluster:abc"],
        });
        let kept = super::bypass_extra(&extra).expect("a map of lists");
        assert_eq!(
            kept.keys().map(String::as_str).collect::<Vec<_>>(),
            ["authentication.kcp.io/scopes"]
        );
        assert_eq!(super::bypass_extra(&serde_json::json!("not a map")), None);
    }
}
