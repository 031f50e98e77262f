//! Unit tests of `watch.rs`.

use super::*;
use kube::core::Status as ApiStatus;

/// Records every call, for asserting on the sequence.
#[derive(Default)]
struct Recorder {
    objects: Vec<String>,
    calls: Vec<String>,
    statuses: Vec<Status>,
}

impl Index<String> for Recorder {
    fn reset(&mut self, objects: Vec<String>) {
        self.calls.push(format!("reset {objects:?}"));
        self.objects = objects;
    }
    fn apply(&mut self, object: String) {
        self.calls.push(format!("apply {object}"));
        self.objects.retain(|o| *o != object);
        self.objects.push(object);
    }
    fn delete(&mut self, object: String) {
        self.calls.push(format!("delete {object}"));
        self.objects.retain(|o| *o != object);
    }
    fn status(&mut self, from: &Status, to: &Status) {
        assert_ne!(from, to, "a status is reported only when it changes");
        self.statuses.push(to.clone());
    }
}

fn api_error(code: u16) -> watcher::Error {
    let status = ApiStatus::failure(&format!("code {code}"), "").with_code(code);
    watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
}

fn list(driver: &mut Driver<String>, index: &mut Recorder, items: &[&str]) {
    assert_eq!(
        driver.handle(index, Ok(watcher::Event::Init)),
        Step::Continue
    );
    for i in items {
        driver.handle(index, Ok(watcher::Event::InitApply(i.to_string())));
    }
    assert_eq!(
        driver.handle(index, Ok(watcher::Event::InitDone)),
        Step::Continue
    );
}

fn listed() -> Status {
    Status {
        state: WatchState::Listed,
        synced: true,
    }
}

#[test]
fn a_list_is_swapped_in_whole_and_then_events_apply() {
    let (mut d, mut ix) = (Driver::new(NotFound::Unknown), Recorder::default());
    assert!(!d.synced());
    d.handle(&mut ix, Ok(watcher::Event::Init));
    d.handle(&mut ix, Ok(watcher::Event::InitApply("a".into())));
    // Nothing reaches the index before the list is complete.
    assert!(ix.calls.is_empty());
    assert!(!d.synced());
    d.handle(&mut ix, Ok(watcher::Event::InitApply("b".into())));
    d.handle(&mut ix, Ok(watcher::Event::InitDone));
    assert!(d.synced());
    d.handle(&mut ix, Ok(watcher::Event::Apply("c".into())));
    d.handle(&mut ix, Ok(watcher::Event::Delete("a".into())));
    assert_eq!(ix.calls, ["reset [\"a\", \"b\"]", "apply c", "delete a"]);
    assert_eq!(ix.objects, ["b", "c"]);
    assert_eq!(ix.statuses, [listed()]);
}

/// A streaming index: each list's objects one by one (recorded as `list …`),
/// what a list left out removed at its end.
#[derive(Default)]
struct Streamed {
    inner: Recorder,
    listed: Option<Vec<String>>,
}

impl Index<String> for Streamed {
    fn reset(&mut self, objects: Vec<String>) {
        self.inner.reset(objects);
    }
    fn apply(&mut self, object: String) {
        self.inner.apply(object);
    }
    fn delete(&mut self, object: String) {
        self.inner.delete(object);
    }
    fn streams_lists(&self) -> bool {
        true
    }
    fn list_begin(&mut self) {
        self.inner.calls.push("begin".into());
        self.listed = Some(Vec::new());
    }
    fn list_apply(&mut self, object: String) {
        self.listed
            .get_or_insert_with(Vec::new)
            .push(object.clone());
        self.inner.apply(object);
        if let Some(last) = self.inner.calls.last_mut() {
            *last = last.replacen("apply", "list", 1);
        }
    }
    fn list_end(&mut self) {
        self.inner.calls.push("end".into());
        let listed = self.listed.take().unwrap_or_default();
        self.inner.objects.retain(|o| listed.contains(o));
    }
}

#[test]
fn a_streaming_index_takes_a_list_object_by_object() {
    let (mut d, mut ix) = (Driver::new(NotFound::Unknown), Streamed::default());
    d.handle(&mut ix, Ok(watcher::Event::Init));
    d.handle(&mut ix, Ok(watcher::Event::InitApply("a".into())));
    // Given at once, not held by the driver.
    assert_eq!(ix.inner.calls, ["begin", "list a"]);
    assert!(!d.synced(), "synced only once the list is complete");
    d.handle(&mut ix, Ok(watcher::Event::InitApply("b".into())));
    d.handle(&mut ix, Ok(watcher::Event::InitDone));
    assert!(d.synced());
    assert_eq!(ix.inner.objects, ["a", "b"]);
    // A failure in the middle of the next list: what came is kept, unsynced.
    assert_eq!(d.handle(&mut ix, Err(api_error(500))), Step::Restart);
    d.handle(&mut ix, Ok(watcher::Event::Init));
    d.handle(&mut ix, Ok(watcher::Event::InitApply("c".into())));
    assert_eq!(d.handle(&mut ix, Err(api_error(500))), Step::Restart);
    assert!(!d.synced());
    assert_eq!(ix.inner.objects, ["a", "b", "c"]);
    // The list after it begins afresh, and takes away what it does not name.
    d.handle(&mut ix, Ok(watcher::Event::Init));
    d.handle(&mut ix, Ok(watcher::Event::InitApply("b".into())));
    d.handle(&mut ix, Ok(watcher::Event::InitDone));
    assert!(d.synced());
    assert_eq!(ix.inner.objects, ["b"]);
    assert!(
        ix.inner.calls.iter().all(|c| !c.starts_with("reset")),
        "{:?}",
        ix.inner.calls
    );
    assert_eq!(ix.inner.calls.iter().filter(|c| *c == "begin").count(), 3);
    // An empty list with no Init before it (as the watcher never sends, but
    // still well-formed): everything goes.
    d.handle(&mut ix, Ok(watcher::Event::InitDone));
    assert!(ix.inner.objects.is_empty());
}

#[test]
fn any_failure_unsyncs_and_restarts_until_a_new_list_completes() {
    let (mut d, mut ix) = (Driver::new(NotFound::Empty), Recorder::default());
    list(&mut d, &mut ix, &["a"]);
    assert_eq!(d.handle(&mut ix, Err(api_error(500))), Step::Restart);
    assert!(!d.synced());
    // What was known is kept (unread while unsynced), not emptied.
    assert_eq!(ix.objects, ["a"]);
    assert_eq!(
        d.status().state,
        WatchState::Failed(api_error(500).to_string())
    );
    assert!(
        api_error(500)
            .to_string()
            .starts_with("failed to perform initial object list: "),
        "{}",
        api_error(500)
    );
    // A list half done when the stream fails is dropped, not applied.
    d.handle(&mut ix, Ok(watcher::Event::Init));
    d.handle(&mut ix, Ok(watcher::Event::InitApply("x".into())));
    assert_eq!(d.handle(&mut ix, Err(api_error(503))), Step::Restart);
    d.handle(&mut ix, Ok(watcher::Event::Init));
    d.handle(&mut ix, Ok(watcher::Event::InitDone));
    assert!(d.synced());
    assert!(ix.objects.is_empty(), "{:?}", ix.objects);
    assert_eq!(ix.statuses.len(), 4, "{:?}", ix.statuses);
}

#[test]
fn forbidden_is_reported_once_and_cleared_by_a_list() {
    let (mut d, mut ix) = (Driver::new(NotFound::Empty), Recorder::default());
    assert_eq!(d.handle(&mut ix, Err(api_error(403))), Step::Restart);
    assert_eq!(d.handle(&mut ix, Err(api_error(403))), Step::Restart);
    assert!(!d.synced());
    assert_eq!(
        ix.statuses,
        [Status {
            state: WatchState::Forbidden(api_error(403).to_string()),
            synced: false
        }]
    );
    list(&mut d, &mut ix, &[]);
    assert_eq!(ix.statuses.last(), Some(&listed()));
}

#[test]
fn not_found_is_empty_only_where_a_404_is_authoritative() {
    // Kubernetes: emptied and synced.
    let (mut d, mut ix) = (Driver::new(NotFound::Empty), Recorder::default());
    list(&mut d, &mut ix, &["a"]);
    assert_eq!(d.handle(&mut ix, Err(api_error(404))), Step::Restart);
    assert!(d.synced());
    assert!(ix.objects.is_empty());
    assert_eq!(d.status().state, WatchState::NotServed);
    // Elsewhere: kept, and not synced (fail closed).
    let (mut d, mut ix) = (Driver::new(NotFound::Unknown), Recorder::default());
    list(&mut d, &mut ix, &["a"]);
    assert_eq!(d.handle(&mut ix, Err(api_error(404))), Step::Restart);
    assert!(!d.synced());
    assert_eq!(ix.objects, ["a"]);
    assert_eq!(ix.calls, ["reset [\"a\"]"]);
    // Never listed: a 404 does not make an index synced.
    let (mut d, mut ix) = (
        Driver::<String>::new(NotFound::Unknown),
        Recorder::default(),
    );
    d.handle(&mut ix, Err(api_error(404)));
    assert!(!d.synced());
    assert!(ix.calls.is_empty());
}

#[test]
fn watch_errors_carry_their_status() {
    let status = ApiStatus::failure("gone", "Expired").with_code(410);
    assert_eq!(
        watcher_status(&watcher::Error::WatchError(Box::new(status))),
        Some(410)
    );
    assert_eq!(watcher_status(&watcher::Error::NoResourceVersion), None);
    assert_eq!(watcher_status(&api_error(403)), Some(403));
}

#[test]
fn a_cache_keeps_objects_by_cluster_namespace_and_name_and_unsyncs_on_failure() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cm = |lc: &str, ns: &str, name: &str| {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some(ns.into());
        c.metadata.annotations = Some(
            [(
                crate::names::KCP_CLUSTER_ANNOTATION.to_string(),
                lc.to_string(),
            )]
            .into(),
        );
        c
    };
    let changes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = changes.clone();
    let mut feed = CacheFeed {
        cache: Cache::default(),
        on_change: move || {
            counted.fetch_add(1, Ordering::SeqCst);
        },
        what: "configmaps".into(),
    };
    let cache = feed.cache.clone();
    let mut d = Driver::new(NotFound::Unknown);
    d.handle(&mut feed, Ok(watcher::Event::Init));
    d.handle(&mut feed, Ok(watcher::Event::InitApply(cm("a", "x", "n"))));
    d.handle(&mut feed, Ok(watcher::Event::InitApply(cm("b", "x", "n"))));
    assert!(!cache.synced());
    assert!(cache.state().is_empty());
    d.handle(&mut feed, Ok(watcher::Event::InitDone));
    assert!(cache.synced());
    assert_eq!(cache.state().len(), 2, "same name in two clusters");
    d.handle(&mut feed, Ok(watcher::Event::Delete(cm("a", "x", "n"))));
    let left: Vec<_> = cache
        .state()
        .iter()
        .map(|c| crate::kcp::cluster_of(&**c))
        .collect();
    assert_eq!(left, ["b"]);
    d.handle(&mut feed, Err(api_error(500)));
    assert!(!cache.synced());
    assert_eq!(cache.state().len(), 1, "kept while unsynced");
    // reset, status, delete, status
    assert_eq!(changes.load(Ordering::SeqCst), 4);
}

#[test]
fn watch_backoff_doubles_to_five_seconds_and_resets() {
    let mut b = backoff();
    let mut nominal = Vec::new();
    for _ in 0..6 {
        nominal.push(b.nominal());
        b.next_delay();
    }
    assert_eq!(
        nominal,
        [500, 1000, 2000, 4000, 5000, 5000].map(Duration::from_millis)
    );
    b.reset();
    assert_eq!(b.nominal(), Duration::from_millis(500));
}
