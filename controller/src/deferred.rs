//! Deferred deletion (Kubernetes and Karmada): objects carrying a complete request
//! ([`holdfast_shared::deferred`]) are deleted as soon as nothing blocks them.
//!
//! The controller watches the metadata of the objects labelled
//! `holdfast.dev/delete-when-unblocked=true`, of the types policy objects protect
//! and of namespaces. A request counts only when its signature
//! ([`holdfast_shared::request_signature`]) verifies for the object's uid and the
//! user it names under holdfast's key, which proves the webhook admitted it from
//! that user, and only on a kind the API server sends to webhooks; anything else
//! is ignored with a Warning Event (once per version of the object). For each
//! verified request it sends the DELETE impersonating
//! the user the request names (`Impersonate-User`), with the object's UID as a
//! precondition: the API server authorizes the deletion as that user and the
//! webhook judges it as any other. A refusal is retried with backoff (from
//! [`RETRY_FIRST`] doubling to [`RETRY_MAX`]), and at once when the object's
//! metadata or the set of watched types changes. An Event on the object records
//! who asked, the refusals while it waits (once per distinct reason) and the
//! deletion.

use holdfast_shared::{
    api::common::GroupResource,
    deferred::{never_reviewed, requested_by, signature},
    names::{DELETE_REQUEST_SIGNATURE, DELETE_REQUESTED_BY, DELETE_WHEN_UNBLOCKED},
    request_signature::RequestKey,
    watch::{Cache, NotFound, spawn_cache},
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    api::{Api, ApiResource, DynamicObject, PartialObjectMeta},
    runtime::{
        events::{Event, EventType, Recorder},
        watcher,
    },
};
use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::sync::{Notify, watch};

/// First retry after a refusal.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between two attempts on a blocked object.
pub const RETRY_MAX: Duration = Duration::from_secs(15);

/// A type whose objects may carry a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredType {
    /// The resource at a served version.
    pub resource: ApiResource,
    /// Whether it is namespaced.
    pub namespaced: bool,
}

/// The types to watch, kept by the reconciler.
pub type Types = watch::Receiver<BTreeMap<GroupResource, DeferredType>>;

/// The metadata of requested objects of one type.
type Objects = Cache<PartialObjectMeta<DynamicObject>>;

/// One type's watch: the type, its objects, the task feeding them.
type Watch = (DeferredType, Objects, tokio::task::JoinHandle<()>);

/// One object's attempts.
struct Attempts {
    next: Instant,
    delay: Duration,
    /// The last refusal reported in an Event (reported once).
    reported: Option<String>,
    /// The request's fingerprint (resourceVersion): a change retries at once.
    version: String,
}

/// Why a request is not honoured, if it is not: its kind is never reviewed by
/// admission, or its signature is not holdfast's for its uid and user.
fn unverified(
    t: &DeferredType,
    key: &RequestKey,
    uid: &str,
    user: &str,
    sig: Option<&str>,
) -> Option<String> {
    let gr = GroupResource::new(&t.resource.group, &t.resource.plural);
    if never_reviewed(&gr) {
        return Some(format!(
            "the API server never sends requests on {} to admission webhooks, so no \
             request on one can be checked",
            t.resource.plural
        ));
    }
    key.verify(sig, uid, user).err().map(|p| {
        format!(
            "{p} ({DELETE_REQUEST_SIGNATURE}): the request did not pass holdfast's webhook \
             as {user:?}; ask again"
        )
    })
}

/// The outcome of one DELETE.
enum Outcome {
    Deleted,
    Gone,
    Refused(String),
}

/// Runs until `shutdown` turns true.
pub async fn run(
    client: Client,
    recorder: Recorder,
    mut types: Types,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let notify = Arc::new(Notify::new());
    let mut watches: HashMap<GroupResource, Watch> = HashMap::new();
    let mut attempts: HashMap<String, Attempts> = HashMap::new();
    // Ignored requests already reported (uid -> resourceVersion).
    let mut ignored: HashMap<String, String> = HashMap::new();
    let mut key: Option<RequestKey> = None;
    let mut key_problem: Option<String> = None;
    loop {
        if key.is_none() {
            match crate::request_key::ensure(&client).await {
                Ok(k) => key = Some(k),
                Err(e) => {
                    if key_problem.as_deref() != Some(&e.to_string()) {
                        tracing::warn!(error = %e, "deferred deletion: no key to verify requests with; none is honoured");
                        key_problem = Some(e.to_string());
                    }
                }
            }
        }
        // Keep one label-selected metadata watch per type.
        let wanted = types.borrow_and_update().clone();
        watches.retain(|gr, (t, _, task)| {
            let keep = wanted.get(gr) == Some(t);
            if !keep {
                task.abort();
            }
            keep
        });
        for (gr, t) in &wanted {
            if !watches.contains_key(gr) {
                let (store, task) = spawn_watch(&client, t, notify.clone());
                watches.insert(gr.clone(), (t.clone(), store, task));
            }
        }
        let now = Instant::now();
        let mut next_wake = now + RETRY_MAX;
        let mut seen = std::collections::HashSet::new();
        for (t, store, _) in watches.values() {
            for obj in store.state() {
                let Some(uid) = obj.metadata.uid.clone() else {
                    continue;
                };
                if obj.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let meta = serde_json::json!({"metadata": {
                    "labels": obj.metadata.labels,
                    "annotations": obj.metadata.annotations,
                }});
                let Some(user) = requested_by(&meta).map(str::to_string) else {
                    continue;
                };
                seen.insert(uid.clone());
                let version = obj.metadata.resource_version.clone().unwrap_or_default();
                let Some(key) = key.as_ref() else {
                    continue;
                };
                if let Some(why) = unverified(t, key, &uid, &user, signature(&meta)) {
                    attempts.remove(&uid);
                    if ignored.get(&uid) != Some(&version) {
                        tracing::warn!(object = %describe(t, &obj), user = %user.escape_debug(), reason = %why, "deferred deletion: request ignored");
                        publish(
                            &recorder,
                            &reference(t, &obj),
                            EventType::Warning,
                            "DeferredDeletionIgnored",
                            &format!("deletion requested in the name of {user:?} ignored: {why}"),
                        )
                        .await;
                        ignored.insert(uid.clone(), version);
                    }
                    continue;
                }
                ignored.remove(&uid);
                let a = attempts.entry(uid.clone()).or_insert_with(|| Attempts {
                    next: now,
                    delay: RETRY_FIRST,
                    reported: None,
                    version: version.clone(),
                });
                if a.version != version {
                    a.version = version;
                    a.next = now;
                    a.delay = RETRY_FIRST;
                }
                if a.next > now {
                    next_wake = next_wake.min(a.next);
                    continue;
                }
                let reference = reference(t, &obj);
                match delete_as(&client, t, &obj, &uid, &user).await {
                    Outcome::Deleted => {
                        tracing::info!(object = %describe(t, &obj), user, "deferred deletion: deleted as requested");
                        publish(
                            &recorder,
                            &reference,
                            EventType::Normal,
                            "DeferredDeletion",
                            &format!(
                                "deleted by holdfast as {user:?}, who asked for it with {DELETE_WHEN_UNBLOCKED} ({DELETE_REQUESTED_BY}), now that nothing blocks it"
                            ),
                        )
                        .await;
                        attempts.remove(&uid);
                    }
                    Outcome::Gone => {
                        attempts.remove(&uid);
                    }
                    Outcome::Refused(reason) => {
                        if a.reported.as_deref() != Some(reason.as_str()) {
                            tracing::info!(object = %describe(t, &obj), user, reason, "deferred deletion: still blocked");
                            publish(
                                &recorder,
                                &reference,
                                EventType::Normal,
                                "DeferredDeletionWaiting",
                                &format!("deletion requested by {user:?} waits: {reason}"),
                            )
                            .await;
                            a.reported = Some(reason);
                        }
                        a.next = now + a.delay;
                        a.delay = (a.delay * 2).min(RETRY_MAX);
                        next_wake = next_wake.min(a.next);
                    }
                }
            }
        }
        attempts.retain(|uid, _| seen.contains(uid));
        ignored.retain(|uid, _| seen.contains(uid));
        let sleep = next_wake.saturating_duration_since(Instant::now());
        tokio::select! {
            _ = shutdown.cancelled() => break,
            r = types.changed() => if r.is_err() { break },
            () = notify.notified() => {}
            () = tokio::time::sleep(sleep) => {}
        }
        if shutdown.is_cancelled() {
            break;
        }
    }
    for (_, _, task) in watches.into_values() {
        task.abort();
    }
}

fn spawn_watch(
    client: &Client,
    t: &DeferredType,
    notify: Arc<Notify>,
) -> (Objects, tokio::task::JoinHandle<()>) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), &t.resource);
    let cfg = watcher::Config::default().labels(&format!("{DELETE_WHEN_UNBLOCKED}=true"));
    // Each DELETE is judged by admission: what is acted on may be stale, never unsafe.
    spawn_cache(api, cfg, NotFound::Empty, move || notify.notify_one())
}

fn describe(t: &DeferredType, obj: &PartialObjectMeta<DynamicObject>) -> String {
    let name = obj.metadata.name.clone().unwrap_or_default();
    match &obj.metadata.namespace {
        Some(ns) => format!("{} {ns}/{name}", t.resource.kind),
        None => format!("{} {name}", t.resource.kind),
    }
}

fn reference(t: &DeferredType, obj: &PartialObjectMeta<DynamicObject>) -> ObjectReference {
    ObjectReference {
        api_version: Some(t.resource.api_version.clone()),
        kind: Some(t.resource.kind.clone()),
        name: obj.metadata.name.clone(),
        namespace: obj.metadata.namespace.clone(),
        uid: obj.metadata.uid.clone(),
        resource_version: obj.metadata.resource_version.clone(),
        ..Default::default()
    }
}

async fn publish(
    recorder: &Recorder,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let ev = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: "Delete".to_string(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, reference).await {
        tracing::warn!(error = %e, reason, "emitting event failed");
    }
}

/// The path of `obj` of type `t`.
fn object_path(t: &DeferredType, obj: &PartialObjectMeta<DynamicObject>) -> Option<String> {
    let name = obj.metadata.name.as_deref()?;
    let base = if t.resource.group.is_empty() {
        format!("/api/{}", t.resource.version)
    } else {
        format!("/apis/{}/{}", t.resource.group, t.resource.version)
    };
    Some(match (&obj.metadata.namespace, t.namespaced) {
        (Some(ns), true) => format!("{base}/namespaces/{ns}/{}/{name}", t.resource.plural),
        (_, true) => return None,
        (_, false) => format!("{base}/{}/{name}", t.resource.plural),
    })
}

/// Sends the DELETE as `user`, with the UID as a precondition.
async fn delete_as(
    client: &Client,
    t: &DeferredType,
    obj: &PartialObjectMeta<DynamicObject>,
    uid: &str,
    user: &str,
) -> Outcome {
    let Some(path) = object_path(t, obj) else {
        return Outcome::Refused("the object has no name or namespace".to_string());
    };
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": uid},
    });
    let req = match http::Request::delete(&path)
        .header("Impersonate-User", user)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes())
    {
        Ok(r) => r,
        Err(e) => return Outcome::Refused(format!("cannot build the request: {e}")),
    };
    match client.request_text(req).await {
        Ok(_) => Outcome::Deleted,
        Err(kube::Error::Api(s)) if s.code == 404 => Outcome::Gone,
        // The UID precondition failed: another object of that name now.
        Err(kube::Error::Api(s)) if s.code == 409 => Outcome::Gone,
        Err(kube::Error::Api(s)) => Outcome::Refused(s.message.clone()),
        Err(e) => Outcome::Refused(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;
    use kube::core::PartialObjectMetaExt as _;

    fn t(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> DeferredType {
        DeferredType {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            ),
            namespaced,
        }
    }

    fn meta(name: &str, ns: Option<&str>) -> PartialObjectMeta<DynamicObject> {
        kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: ns.map(str::to_string),
            ..Default::default()
        }
        .into_response_partial()
    }

    #[test]
    fn paths_follow_the_scope() {
        let vpcs = t("network.test.io", "v1", "VPC", "vpcs", true);
        assert_eq!(
            object_path(&vpcs, &meta("net", Some("default"))).as_deref(),
            Some("/apis/network.test.io/v1/namespaces/default/vpcs/net")
        );
        assert_eq!(object_path(&vpcs, &meta("net", None)), None);
        let ns = t("", "v1", "Namespace", "namespaces", false);
        assert_eq!(
            object_path(&ns, &meta("shop", None)).as_deref(),
            Some("/api/v1/namespaces/shop")
        );
        assert_eq!(describe(&ns, &meta("shop", None)), "Namespace shop");
    }
}
