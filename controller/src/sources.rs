//! Anchor sources of AnchorRules (anchors in another cluster): the controller
//! lists the anchor type there through the rule's kubeconfig Secret every few
//! seconds and reports the result as the SourceReachable condition (Ready only
//! while it holds). The webhook keeps its own watch of the source and refuses the
//! protected objects while that watch is not synced, whatever this says.

use holdfast_shared::{anchorsource, api::ResourceType, registry::AnchorSourceRef};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams},
};
use parking_lot::Mutex;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};
use tokio::sync::Notify;

use crate::status::SourceCondition;

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Probe {
    Pending,
    Listed,
    Unreachable(String),
    Unusable(String),
}

/// (source, anchor type).
type Key = (AnchorSourceRef, ResourceType);

/// The probes of every anchor source the AnchorRules name.
pub struct SourceProbes {
    states: Arc<Mutex<HashMap<Key, Probe>>>,
}

/// How often each source is probed.
const PROBE_EVERY: Duration = Duration::from_secs(3);

impl SourceProbes {
    /// Starts probing (the task ends with the runtime); `notify` is woken when a
    /// probe's result changes.
    pub fn start(client: Client, notify: Arc<Notify>) -> Self {
        let states: Arc<Mutex<HashMap<Key, Probe>>> = Arc::default();
        let allowed = anchorsource::allowed_namespace();
        let shared = states.clone();
        tokio::spawn(async move {
            loop {
                let keys: Vec<Key> = shared.lock().keys().cloned().collect();
                let results =
                    futures::future::join_all(keys.iter().map(|k| probe(&client, &allowed, k)))
                        .await;
                let mut changed = false;
                {
                    let mut states = shared.lock();
                    for (k, r) in keys.into_iter().zip(results) {
                        if let Some(old) = states.get_mut(&k)
                            && *old != r
                        {
                            tracing::info!(source = %k.0, anchor = %k.1.group_resource(), result = ?r, "anchor source probed");
                            *old = r;
                            changed = true;
                        }
                    }
                }
                if changed {
                    notify.notify_one();
                }
                tokio::time::sleep(PROBE_EVERY).await;
            }
        });
        Self { states }
    }

    /// Keeps probing exactly `wanted` (new ones start pending).
    pub fn want(&self, wanted: &HashSet<Key>) {
        let mut states = self.states.lock();
        states.retain(|k, _| wanted.contains(k));
        for k in wanted {
            states.entry(k.clone()).or_insert(Probe::Pending);
        }
    }

    /// The names of the wanted sources' Secrets in `namespace` (never holdfast's own,
    /// [`anchorsource::RESERVED_SECRETS`]).
    pub fn secrets_in(&self, namespace: &str) -> std::collections::BTreeSet<String> {
        self.states
            .lock()
            .keys()
            .filter(|(source, _)| source.namespace == namespace)
            // holdfast's own Secrets are never granted as sources.
            .filter(|(source, _)| !anchorsource::RESERVED_SECRETS.contains(&source.name.as_str()))
            .map(|(source, _)| source.name.clone())
            .collect()
    }

    /// The SourceReachable condition for `source` and `anchor`.
    pub fn condition(&self, source: &AnchorSourceRef, anchor: &ResourceType) -> SourceCondition {
        let state = self
            .states
            .lock()
            .get(&(source.clone(), anchor.clone()))
            .cloned()
            .unwrap_or(Probe::Pending);
        let gr = anchor.group_resource();
        match state {
            Probe::Pending => SourceCondition {
                reachable: false,
                reason: "NotSynced",
                message: format!("anchor source {source} has not been listed yet"),
            },
            Probe::Listed => SourceCondition {
                reachable: true,
                reason: "Synced",
                message: format!("{gr} is listed in the cluster of anchor source {source}"),
            },
            Probe::Unreachable(e) => SourceCondition {
                reachable: false,
                reason: "Unreachable",
                message: format!("anchor source {source} is unreachable: {e}"),
            },
            Probe::Unusable(e) => SourceCondition {
                reachable: false,
                reason: "Unusable",
                message: format!("anchor source {source} cannot be used: {e}"),
            },
        }
    }
}

/// Lists `anchor` (one object at most) in the cluster of `source`.
async fn probe(local: &Client, allowed: &str, (source, anchor): &Key) -> Probe {
    if let Some(why) = anchorsource::namespace_problem(source, allowed) {
        return Probe::Unusable(why);
    }
    let api: Api<Secret> = Api::namespaced(local.clone(), &source.namespace);
    let secret =
        match tokio::time::timeout(anchorsource::SOURCE_CALL_TIMEOUT, api.get_opt(&source.name))
            .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Probe::Unreachable(format!("reading the Secret failed: {e}")),
            Err(_) => return Probe::Unreachable("the Secret was not read in time".to_string()),
        };
    // Errors name the Secret's key and the kind of problem, never its contents.
    let kubeconfig = match anchorsource::kubeconfig(source, secret.as_ref()) {
        Ok(k) => k,
        Err(e) => return Probe::Unusable(e.to_string()),
    };
    let config = match anchorsource::client_config(source, kubeconfig).await {
        Ok(c) => c,
        Err(e) => return Probe::Unusable(e.to_string()),
    };
    let Ok(client) = Client::try_from(config) else {
        return Probe::Unusable(
            anchorsource::SourceError::Unusable(source.key.clone()).to_string(),
        );
    };
    let ar = ApiResource {
        group: anchor.group.clone(),
        version: anchor.version.clone(),
        api_version: anchor.api_version(),
        kind: String::new(),
        plural: anchor.resource.clone(),
    };
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    match tokio::time::timeout(
        anchorsource::SOURCE_CALL_TIMEOUT,
        api.list(&ListParams::default().limit(1)),
    )
    .await
    {
        Ok(Ok(_)) => Probe::Listed,
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => {
            Probe::Unusable(format!("{} is not served there", anchor.group_resource()))
        }
        Ok(Err(e)) => Probe::Unreachable(e.to_string()),
        Err(_) => Probe::Unreachable("no answer within 5s".to_string()),
    }
}
