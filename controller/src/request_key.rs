//! The key that signs deferred-deletion requests: the controller creates it once
//! (random, in Secret [`DEFERRED_KEY_SECRET`] of holdfast's namespace, labelled
//! protected) and reads it; the webhook reads it too. Nothing of it is logged.

use holdfast_shared::{
    names::{DEFERRED_KEY_SECRET, PROTECTED_LABEL},
    request_signature::{KEY_FIELD, RequestKey},
};
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

/// Why the key is not available; names the Secret and the problem only.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyUnavailable(String);

/// The key, created first if the Secret does not exist.
pub async fn ensure(client: &Client) -> Result<RequestKey, KeyUnavailable> {
    let namespace = holdfast_shared::anchorsource::allowed_namespace();
    let what = format!("Secret {namespace}/{DEFERRED_KEY_SECRET}");
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let found = api
        .get_opt(DEFERRED_KEY_SECRET)
        .await
        .map_err(|e| KeyUnavailable(format!("reading {what} failed: {}", reason(&e))))?;
    let secret = match found {
        Some(s) => s,
        None => {
            let bytes = RequestKey::generate()
                .map_err(|e| KeyUnavailable(format!("creating {what}: {e}")))?;
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(DEFERRED_KEY_SECRET.to_string()),
                    namespace: Some(namespace.clone()),
                    labels: Some([(PROTECTED_LABEL.to_string(), "Always".to_string())].into()),
                    ..Default::default()
                },
                data: Some([(KEY_FIELD.to_string(), ByteString(bytes))].into()),
                type_: Some("Opaque".to_string()),
                ..Default::default()
            };
            match api.create(&PostParams::default(), &secret).await {
                Ok(s) => {
                    tracing::info!(secret = %what, "created the key that signs deferred deletion requests");
                    s
                }
                // Another replica created it first: use theirs.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    api.get(DEFERRED_KEY_SECRET).await.map_err(|e| {
                        KeyUnavailable(format!("reading {what} failed: {}", reason(&e)))
                    })?
                }
                Err(e) => {
                    return Err(KeyUnavailable(format!(
                        "creating {what} failed: {}",
                        reason(&e)
                    )));
                }
            }
        }
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KEY_FIELD))
        .ok_or_else(|| KeyUnavailable(format!("{what} has no key {KEY_FIELD}")))?;
    RequestKey::from_bytes(&bytes.0)
        .map_err(|e| KeyUnavailable(format!("key {KEY_FIELD} of {what} cannot be used: {e}")))
}

/// What an API error says, without the body of anything read.
fn reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.reason, s.code),
        _ => "the API server could not be reached".to_string(),
    }
}
