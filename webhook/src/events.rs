//! Kubernetes Events for what the webhook does to an object: a refused deletion
//! (`DeletionBlocked`), an honoured break-glass (`BreakGlass`), an audited or warned
//! deletion. Published in the background, never on the admission path, and
//! rate-limited per object, reason and user so a retrying client cannot flood the
//! API. Dry-run requests emit nothing (the webhook declares `sideEffects: None`).

use crate::view::WebhookView;
use holdfast_shared::{policy::logical_cluster, review::AdmissionRequest};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::{sync::Arc, time::Duration};

/// Publishes Events, at most one per object, reason and user per window.
pub struct EventSink {
    view: Arc<WebhookView>,
    recent: moka::sync::Cache<String, ()>,
}

/// Longest note an Event takes.
const MAX_NOTE: usize = 1000;

impl EventSink {
    /// A sink publishing through `view`'s API client, at most once per `window`.
    pub fn new(view: Arc<WebhookView>, window: Duration) -> Self {
        Self {
            view,
            recent: moka::sync::Cache::builder()
                .time_to_live(window)
                .max_capacity(100_000)
                .build(),
        }
    }

    /// Records `reason` on the object of `req` (unless rate-limited or dry-run).
    pub fn emit(&self, req: &AdmissionRequest, warning: bool, reason: &'static str, note: String) {
        if req.dry_run.unwrap_or(false) {
            return;
        }
        let Some(obj) = req.subject().or(req.old_object.as_ref()) else {
            return;
        };
        let name = req.object_name().unwrap_or_default().to_string();
        let namespace = req.object_namespace().map(str::to_string);
        let key = format!(
            "{reason}/{}/{}/{}/{name}/{}",
            logical_cluster(obj),
            req.resource.group_resource(),
            namespace.as_deref().unwrap_or_default(),
            req.user_info.username
        );
        if self.recent.contains_key(&key) {
            return;
        }
        self.recent.insert(key, ());
        let Some(client) = self.view.client_for(logical_cluster(obj)) else {
            return;
        };
        let api_version = if req.kind.group.is_empty() {
            req.kind.version.clone()
        } else {
            format!("{}/{}", req.kind.group, req.kind.version)
        };
        let reference = ObjectReference {
            api_version: Some(api_version),
            kind: Some(req.kind.kind.clone()),
            name: Some(name),
            namespace,
            uid: holdfast_shared::review::meta_str(obj, "uid").map(str::to_string),
            ..Default::default()
        };
        let mut note = note;
        if note.len() > MAX_NOTE {
            let mut cut = MAX_NOTE;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(note),
            action: req.operation.as_str().to_string(),
            secondary: None,
        };
        tokio::spawn(async move {
            let recorder = Recorder::new(
                client,
                Reporter {
                    controller: "holdfast-webhook".to_string(),
                    instance: std::env::var("POD_NAME").ok(),
                },
            );
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %e, reason = event.reason, "cannot publish event");
            }
        });
    }
}
