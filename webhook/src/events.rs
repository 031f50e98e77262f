//! Kubernetes Events for what the webhook does to an object: a refused deletion
//! (`DeletionBlocked`), an honoured break-glass (`BreakGlass`), an audited or warned
//! deletion. Never published on the admission path: [`EventSink::emit`] only decides
//! and enqueues; one background worker publishes, in order.
//!
//! Whoever can reach the admission port can make the webhook write Events, so three
//! limits hold whatever the caller sends: at most one Event per object and reason per
//! window (the user name is the caller's choice, so it is not part of the key); at
//! most [`GLOBAL_BURST`] Events at once and [`GLOBAL_PER_SECOND`] a second overall;
//! and a bounded queue ([`QUEUE`]) whose overflow is dropped and counted. Dry-run
//! requests emit nothing.

use crate::{
    metrics::Metrics,
    recent::{Recent, Sighting},
    view::WebhookView,
};
use holdfast_shared::{policy::logical_cluster, review::AdmissionRequest};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use parking_lot::Mutex;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::sync::mpsc;

/// Longest note an Event takes.
const MAX_NOTE: usize = 1000;

/// Events waiting to be published; more are dropped.
pub const QUEUE: usize = 1024;

/// Events published at once before the steady rate applies.
pub const GLOBAL_BURST: f64 = 100.0;

/// Steady rate of Events, all objects together.
pub const GLOBAL_PER_SECOND: f64 = 20.0;

/// Objects remembered for the per-object window.
const RECENT_CAPACITY: usize = 100_000;

/// A token bucket: `burst` tokens, refilled at `rate` per second.
#[derive(Debug)]
pub struct TokenBucket {
    tokens: f64,
    burst: f64,
    rate: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(burst: f64, rate: f64) -> Self {
        Self {
            tokens: burst,
            burst,
            rate,
            last: Instant::now(),
        }
    }

    /// Takes one token at `now`, if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        // A caller whose clock read came a little earlier than another's (threads)
        // refills nothing and never moves the clock back, so no time is counted twice.
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Pending {
    /// The logical cluster the Event goes to ("" outside kcp): one client, and so
    /// one Recorder, each. Its client is found by the worker, not on the admission
    /// path (on kcp, a client per workspace of a fleet: a cache lookup or a new
    /// client).
    cluster: String,
    event: Event,
    reference: ObjectReference,
}

/// Recorders kept by the publishing worker (one per logical cluster on kcp); past
/// this many, the map starts afresh (a Recorder only caches recent Events to
/// aggregate repeats into a series).
const RECORDERS: usize = 1024;

/// Decides which Events to publish and hands them to the publishing worker.
pub struct EventSink {
    metrics: Metrics,
    recent: Recent,
    bucket: Mutex<TokenBucket>,
    queue: mpsc::Sender<Pending>,
}

impl EventSink {
    /// A sink publishing through `view`'s API clients, at most once per object and
    /// reason per `window`. Starts the worker: call inside a Tokio runtime.
    pub fn new(view: Arc<WebhookView>, metrics: Metrics, window: Duration) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(publish(view.clone(), rx, metrics.clone()));
        Self {
            metrics,
            recent: Recent::new(window, RECENT_CAPACITY),
            bucket: Mutex::new(TokenBucket::new(GLOBAL_BURST, GLOBAL_PER_SECOND)),
            queue,
        }
    }

    fn count(&self, outcome: &str) {
        self.metrics.count_event(outcome);
    }

    /// Records `reason` on the object of `req` (unless limited or dry-run), with the
    /// note `note` makes (only for an Event that is sent), as of `now`.
    pub fn emit(
        &self,
        req: &AdmissionRequest,
        now: Instant,
        warning: bool,
        reason: &'static str,
        note: impl FnOnce() -> String,
    ) {
        if req.dry_run.unwrap_or(false) {
            return;
        }
        let Some(obj) = req.subject().or(req.old_object.as_ref()) else {
            return;
        };
        let name = req.object_name().unwrap_or_default();
        let namespace = req.object_namespace();
        let cluster = logical_cluster(obj);
        // `reason/cluster/resource.group/namespace/name`, in one buffer.
        let parts = [
            reason,
            cluster,
            &req.resource.resource,
            &req.resource.group,
            namespace.unwrap_or_default(),
            name,
        ];
        let mut key = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
        key.push_str(reason);
        key.push('/');
        key.push_str(cluster);
        key.push('/');
        let mut key = req.resource.write_group_resource(key);
        key.push('/');
        key.push_str(namespace.unwrap_or_default());
        key.push('/');
        key.push_str(name);
        if self.recent.see(&key, now, |_, _| {}) == Sighting::Repeat {
            self.count("limited");
            return;
        }
        if !self.bucket.lock().take(now) {
            self.count("limited");
            return;
        }
        let (name, namespace) = (name.to_string(), namespace.map(str::to_string));
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
        let mut note = note();
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
        match self.queue.try_send(Pending {
            cluster: cluster.to_string(),
            event,
            reference,
        }) {
            Ok(()) => self.count("queued"),
            Err(_) => self.count("dropped"),
        }
    }
}

/// Publishes queued Events one at a time until every sender is gone, through one
/// Recorder per client (per logical cluster on kcp), so that a Recorder's cache
/// aggregates the repeats it sees.
async fn publish(view: Arc<WebhookView>, mut rx: mpsc::Receiver<Pending>, metrics: Metrics) {
    let reporter = Reporter {
        controller: "holdfast-webhook".to_string(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let mut recorders: std::collections::HashMap<String, Recorder> =
        std::collections::HashMap::new();
    while let Some(p) = rx.recv().await {
        if recorders.len() >= RECORDERS && !recorders.contains_key(&p.cluster) {
            recorders.clear();
        }
        let recorder = match recorders.entry(p.cluster) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let Some(client) = view.event_client(e.key()) else {
                    metrics.count_event("failed");
                    tracing::debug!(cluster = %e.key(), reason = p.event.reason, "no client to publish the event with");
                    continue;
                };
                e.insert(Recorder::new(client, reporter.clone()))
            }
        };
        match recorder.publish(&p.event, &p.reference).await {
            Ok(()) => metrics.count_event("published"),
            Err(e) => {
                metrics.count_event("failed");
                tracing::debug!(error = %e, reason = p.event.reason, "cannot publish event");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let start = Instant::now();
        let mut b = TokenBucket::new(3.0, 2.0);
        b.last = start;
        assert!(b.take(start));
        assert!(b.take(start));
        assert!(b.take(start));
        assert!(!b.take(start), "the burst is spent");
        // Half a second at 2/s refills one token.
        let later = start + Duration::from_millis(500);
        assert!(b.take(later));
        assert!(!b.take(later));
        // A long pause refills only up to the burst.
        let much_later = later + Duration::from_secs(60);
        assert!(b.take(much_later));
        assert!(b.take(much_later));
        assert!(b.take(much_later));
        assert!(!b.take(much_later));
    }

    #[test]
    fn an_earlier_clock_read_refills_nothing_twice() {
        let start = Instant::now();
        let mut b = TokenBucket::new(1.0, 1.0);
        b.last = start;
        assert!(b.take(start + Duration::from_secs(1)));
        // A read taken before the last one (another thread's) gets no token and
        // leaves the clock where it was.
        assert!(!b.take(start + Duration::from_millis(500)));
        // So half a second after the last read is still half a token, not more.
        assert!(!b.take(start + Duration::from_millis(1500)));
        assert!(b.take(start + Duration::from_secs(2)));
    }
}
