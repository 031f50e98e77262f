//! The key that signs deferred-deletion requests, read from holdfast's own Secret
//! ([`holdfast_shared::names::DEFERRED_KEY_SECRET`], created by the controller) and
//! kept for a minute. Nothing of it is ever logged or shown.

use holdfast_shared::{
    names::DEFERRED_KEY_SECRET,
    policy::LookupError,
    request_signature::{KEY_FIELD, RequestKey},
};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// How long a read key is used before it is read again.
const KEEP: Duration = Duration::from_secs(60);

/// How long one read of the Secret may take.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The key last read, and when.
#[derive(Default)]
pub struct KeyCache(Mutex<Option<(Instant, RequestKey)>>);

impl KeyCache {
    /// The key, read through `client` from holdfast's namespace when not kept.
    pub async fn get(&self, client: Option<&Client>) -> Result<RequestKey, LookupError> {
        if let Some((at, key)) = self.0.lock().as_ref()
            && at.elapsed() < KEEP
        {
            return Ok(key.clone());
        }
        let client = client
            .ok_or_else(|| LookupError::unreadable("no API server is available to read the key"))?;
        let key = read(client).await?;
        *self.0.lock() = Some((Instant::now(), key.clone()));
        Ok(key)
    }
}

/// Reads the key; errors name the Secret and the problem, never its contents.
async fn read(client: &Client) -> Result<RequestKey, LookupError> {
    let namespace = holdfast_shared::anchorsource::allowed_namespace();
    let what = format!("Secret {namespace}/{DEFERRED_KEY_SECRET}");
    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = tokio::time::timeout(READ_TIMEOUT, api.get_opt(DEFERRED_KEY_SECRET))
        .await
        .map_err(|e| LookupError::failed(format!("{what} was not read in time"), e))?
        .map_err(|e| {
            // The source is the reason alone: the client's error may quote the Secret.
            let reason = api_reason(&e);
            LookupError::failed(format!("reading {what} failed: {reason}"), reason)
        })?
        .ok_or_else(|| {
            LookupError::unreadable(format!(
                "{what} does not exist yet (holdfast-controller creates it)"
            ))
        })?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KEY_FIELD))
        .ok_or_else(|| LookupError::unreadable(format!("{what} has no key {KEY_FIELD}")))?;
    RequestKey::from_bytes(&bytes.0).map_err(|e| {
        LookupError::failed(format!("key {KEY_FIELD} of {what} cannot be used: {e}"), e)
    })
}

/// What an API error says, without the body of anything read.
fn api_reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.reason, s.code),
        _ => "the API server could not be reached".to_string(),
    }
}
