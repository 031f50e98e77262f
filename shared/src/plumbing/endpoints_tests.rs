//! Unit tests of `endpoints.rs`.

use super::*;
use crate::watch::Driver;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::Status as ApiStatus;
use parking_lot::Mutex;

/// A merged index that keeps the objects by key and records its statuses.
#[derive(Default)]
struct Merged {
    objects: BTreeMap<ObjectKey, String>,
    statuses: Vec<Status>,
    resets: usize,
}

impl Index<ConfigMap> for Merged {
    fn reset(&mut self, _: Vec<ConfigMap>) {
        self.resets += 1;
    }
    fn apply(&mut self, o: ConfigMap) {
        let v = o
            .data
            .as_ref()
            .and_then(|d| d.get("v").cloned())
            .unwrap_or_default();
        self.objects.insert(ObjectKey::of(&o), v);
    }
    fn delete(&mut self, o: ConfigMap) {
        self.objects.remove(&ObjectKey::of(&o));
    }
    fn status(&mut self, from: &Status, to: &Status) {
        assert_ne!(from, to);
        self.statuses.push(to.clone());
    }
}

impl Partitioned<ConfigMap> for Merged {
    fn remove(&mut self, key: &ObjectKey) {
        self.objects.remove(key);
    }
}

fn cm(lc: &str, name: &str, v: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.namespace = Some("ns".into());
    c.metadata.annotations = Some(
        [(
            crate::names::KCP_CLUSTER_ANNOTATION.to_string(),
            lc.to_string(),
        )]
        .into(),
    );
    c.data = Some([("v".to_string(), v.to_string())].into());
    c
}

fn slice(urls: &[&str]) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExportEndpointSlice",
        "metadata": {"name": "export"},
        "status": {"endpoints": urls.iter().map(|u| serde_json::json!({"url": u})).collect::<Vec<_>>()}
    }))
    .expect("slice")
}

fn failure(code: u16) -> watcher::Error {
    let s = ApiStatus::failure(&format!("code {code}"), "").with_code(code);
    watcher::Error::InitialListFailed(kube::Error::Api(Box::new(s)))
}

/// The feeds the slice asked to start, by URL, to drive by hand.
type Started = Arc<Mutex<Vec<EndpointFeed<ConfigMap, Merged>>>>;

fn setup() -> (
    Endpoints<ConfigMap, Merged>,
    SliceFeed<ConfigMap, Merged>,
    Started,
) {
    let endpoints = Endpoints::new(Merged::default());
    let started: Started = Arc::default();
    let sink = started.clone();
    let feed = SliceFeed::new(
        endpoints.clone(),
        "export",
        Box::new(move |f| {
            sink.lock().push(f);
            None
        }),
    );
    (endpoints, feed, started)
}

fn take(started: &Started, url: &str) -> EndpointFeed<ConfigMap, Merged> {
    let mut s = started.lock();
    let i = s.iter().position(|f| f.url() == url).expect("started");
    s.remove(i)
}

fn list<I: Index<K>, K>(d: &mut Driver<K>, ix: &mut I, items: Vec<K>) {
    d.handle(ix, Ok(watcher::Event::Init));
    for i in items {
        d.handle(ix, Ok(watcher::Event::InitApply(i)));
    }
    d.handle(ix, Ok(watcher::Event::InitDone));
}

/// A slice with endpoints a and b, a holding lc1/x=1 and b `on_b`, all listed.
struct Two {
    e: Endpoints<ConfigMap, Merged>,
    sf: SliceFeed<ConfigMap, Merged>,
    started: Started,
    sd: Driver<DynamicObject>,
    a: EndpointFeed<ConfigMap, Merged>,
    b: EndpointFeed<ConfigMap, Merged>,
    da: Driver<ConfigMap>,
    db: Driver<ConfigMap>,
}

/// Endpoints a and b, their watches not listed yet.
type Ab = (
    EndpointFeed<ConfigMap, Merged>,
    EndpointFeed<ConfigMap, Merged>,
    Driver<ConfigMap>,
    Driver<ConfigMap>,
);

/// Lists a slice with endpoints a (with a trailing `/`) and b.
fn ab(
    sd: &mut Driver<DynamicObject>,
    sf: &mut SliceFeed<ConfigMap, Merged>,
    started: &Started,
) -> Ab {
    list(sd, sf, vec![slice(&["https://a/vw/", "https://b/vw"])]);
    (
        take(started, "https://a/vw"),
        take(started, "https://b/vw"),
        Driver::new(NotFound::Unknown),
        Driver::new(NotFound::Unknown),
    )
}

fn two(on_b: ConfigMap) -> Two {
    let (e, mut sf, started) = setup();
    let mut sd = Driver::new(NotFound::Unknown);
    let (mut a, mut b, mut da, mut db) = ab(&mut sd, &mut sf, &started);
    list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
    list(&mut db, &mut b, vec![on_b]);
    Two {
        e,
        sf,
        started,
        sd,
        a,
        b,
        da,
        db,
    }
}

fn objects(e: &Endpoints<ConfigMap, Merged>) -> Vec<String> {
    e.with_index(|m| {
        m.objects
            .iter()
            .map(|(k, v)| format!("{}/{}={v}", k.cluster, k.name))
            .collect()
    })
}

#[test]
fn every_endpoint_feeds_one_index_synced_only_when_all_are() {
    let (e, mut sf, started) = setup();
    let mut sd = Driver::new(NotFound::Unknown);
    assert!(!e.synced());
    let (mut a, mut b, mut da, mut db) = ab(&mut sd, &mut sf, &started);
    assert_eq!(e.urls(), ["https://a/vw", "https://b/vw"]);
    list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
    // One endpoint synced is not enough.
    assert!(!e.synced());
    assert!(e.covers("lc1"));
    assert!(!e.covers("lc2"));
    list(
        &mut db,
        &mut b,
        vec![cm("lc2", "x", "2"), cm("lc2", "y", "3")],
    );
    assert!(e.synced());
    assert!(e.covers("lc2"));
    assert_eq!(e.seen_at("lc2").as_deref(), Some("https://b/vw"));
    assert_eq!(objects(&e), ["lc1/x=1", "lc2/x=2", "lc2/y=3"]);
    // Apply and delete pass through.
    da.handle(&mut a, Ok(watcher::Event::Apply(cm("lc1", "z", "4"))));
    db.handle(&mut b, Ok(watcher::Event::Delete(cm("lc2", "x", "2"))));
    assert_eq!(objects(&e), ["lc1/x=1", "lc1/z=4", "lc2/y=3"]);
    // A relist of one endpoint replaces only what it contributed.
    list(&mut da, &mut a, vec![cm("lc1", "z", "5")]);
    assert_eq!(objects(&e), ["lc1/z=5", "lc2/y=3"]);
    // Its last object gone, a cluster is no longer covered.
    db.handle(&mut b, Ok(watcher::Event::Delete(cm("lc2", "y", "3"))));
    assert!(!e.covers("lc2"));
    assert!(e.synced());
    e.with_index(|m| {
        assert_eq!(m.resets, 0, "the merged index is never reset");
        assert_eq!(
            m.statuses,
            [Status {
                state: WatchState::Listed,
                synced: true
            }]
        );
    });
}

#[test]
fn a_url_appearing_later_is_watched_and_unsyncs_until_listed() {
    let (e, mut sf, started) = setup();
    let mut sd = Driver::new(NotFound::Unknown);
    list(&mut sd, &mut sf, vec![slice(&["https://a/vw"])]);
    let mut a = take(&started, "https://a/vw");
    let mut da = Driver::new(NotFound::Unknown);
    list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
    assert!(e.synced());
    // Shard b gets its first binding: its URL appears.
    sd.handle(
        &mut sf,
        Ok(watcher::Event::Apply(slice(&[
            "https://a/vw",
            "https://b/vw",
        ]))),
    );
    assert!(!e.synced(), "the new endpoint is not listed yet");
    assert!(
        e.covers("lc1"),
        "a synced endpoint still covers its clusters"
    );
    let mut b = take(&started, "https://b/vw");
    assert!(started.lock().is_empty(), "a is not restarted");
    let mut db = Driver::new(NotFound::Unknown);
    list(&mut db, &mut b, vec![cm("lc2", "x", "2")]);
    assert!(e.synced());
    assert!(e.covers("lc2"));
    assert_eq!(objects(&e), ["lc1/x=1", "lc2/x=2"]);
}

#[test]
fn a_url_disappearing_takes_its_objects_and_stops_its_watch() {
    let Two {
        e,
        mut sf,
        started,
        mut sd,
        mut b,
        mut db,
        ..
    } = two(cm("lc2", "x", "2"));
    sd.handle(&mut sf, Ok(watcher::Event::Apply(slice(&["https://a/vw"]))));
    assert_eq!(e.urls(), ["https://a/vw"]);
    assert_eq!(objects(&e), ["lc1/x=1"]);
    assert!(!e.covers("lc2"));
    assert!(e.synced());
    // Late events of the stopped watch change nothing.
    db.handle(&mut b, Ok(watcher::Event::Apply(cm("lc2", "late", "9"))));
    assert_eq!(objects(&e), ["lc1/x=1"]);
    // The URL coming back is a new watch, listed from scratch.
    sd.handle(
        &mut sf,
        Ok(watcher::Event::Apply(slice(&[
            "https://a/vw",
            "https://b/vw",
        ]))),
    );
    assert!(!e.synced());
    let mut b2 = take(&started, "https://b/vw");
    db.handle(&mut b, Ok(watcher::Event::Apply(cm("lc2", "late", "9"))));
    assert_eq!(objects(&e), ["lc1/x=1"], "the old watch is still ignored");
    let mut db2 = Driver::new(NotFound::Unknown);
    list(&mut db2, &mut b2, vec![cm("lc2", "y", "3")]);
    assert!(e.synced());
    assert_eq!(objects(&e), ["lc1/x=1", "lc2/y=3"]);
    // Every URL gone: synced and empty (no shard holds a binding).
    sd.handle(&mut sf, Ok(watcher::Event::Apply(slice(&[]))));
    assert!(e.synced());
    assert!(objects(&e).is_empty());
}

#[test]
fn dropping_the_slice_watch_stops_everything_and_unsyncs() {
    let Two {
        e,
        sf,
        mut b,
        mut db,
        ..
    } = two(cm("lc2", "x", "2"));
    assert!(e.synced());
    drop(sf);
    assert!(!e.synced());
    assert!(e.urls().is_empty());
    assert!(objects(&e).is_empty());
    db.handle(&mut b, Ok(watcher::Event::Apply(cm("lc2", "late", "9"))));
    assert!(objects(&e).is_empty(), "a stopped watch changes nothing");
}

#[test]
fn a_cluster_an_endpoint_serves_is_covered_while_that_endpoint_is_synced() {
    let Two {
        e,
        mut b,
        mut db,
        sf: _sf,
        ..
    } = two(cm("lc2", "x", "2"));
    // lc3 has no object anywhere: not covered until an endpoint says it serves it.
    assert!(!e.covers("lc3"));
    assert_eq!(e.synced_urls(), ["https://a/vw", "https://b/vw"]);
    e.mark_served("lc3", "https://b/vw");
    assert!(e.covers("lc3"));
    // That endpoint failing uncovers it; listing again covers it again.
    db.handle(&mut b, Err(failure(500)));
    assert!(!e.covers("lc3"));
    assert_eq!(e.synced_urls(), ["https://a/vw"]);
    list(&mut db, &mut b, vec![cm("lc2", "x", "2")]);
    assert!(e.covers("lc3"));
    // An endpoint that is not watched serves nothing.
    e.mark_served("lc4", "https://c/vw");
    assert!(!e.covers("lc4"));
}

#[test]
fn one_endpoint_failing_unsyncs_the_merged_index_and_uncovers_its_clusters() {
    let Two {
        e,
        mut a,
        mut b,
        mut da,
        mut db,
        // Kept alive: dropping the slice's watch stops every endpoint.
        sf: _sf,
        ..
    } = two(cm("lc2", "x", "2"));
    assert!(e.synced());
    db.handle(&mut b, Err(failure(500)));
    assert!(!e.synced());
    assert!(e.covers("lc1"));
    assert!(!e.covers("lc2"), "a failed endpoint covers nothing");
    assert_eq!(e.seen_at("lc2").as_deref(), Some("https://b/vw"));
    // Kept (unread) while unsynced.
    assert_eq!(objects(&e), ["lc1/x=1", "lc2/x=2"]);
    // A 404 through a virtual workspace proves nothing either.
    da.handle(&mut a, Err(failure(404)));
    assert!(!e.covers("lc1"));
    list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
    list(&mut db, &mut b, vec![cm("lc2", "x", "2")]);
    assert!(e.synced());
    e.with_index(|m| {
        let states: Vec<(bool, &str)> = m
            .statuses
            .iter()
            .map(|s| {
                (
                    s.synced,
                    match &s.state {
                        WatchState::Listed => "listed",
                        WatchState::Failed(_) => "failed",
                        WatchState::NotServed => "not served",
                        _ => "other",
                    },
                )
            })
            .collect();
        // The merged state names the first endpoint not synced: b failed, then a
        // not served, then b again once a listed.
        assert_eq!(
            states,
            [
                (true, "listed"),
                (false, "failed"),
                (false, "not served"),
                (false, "failed"),
                (true, "listed")
            ]
        );
    });
}

#[test]
fn a_missing_or_failing_slice_is_not_synced() {
    let (e, mut sf, started) = setup();
    let mut sd = Driver::new(NotFound::Unknown);
    // The slice does not exist (yet): nothing is watched, not synced.
    list(&mut sd, &mut sf, Vec::new());
    assert!(!e.synced());
    assert!(e.urls().is_empty());
    // It appears without endpoints: synced, empty.
    sd.handle(&mut sf, Ok(watcher::Event::Apply(slice(&[]))));
    assert!(e.synced());
    sd.handle(&mut sf, Ok(watcher::Event::Apply(slice(&["https://a/vw"]))));
    let mut a = take(&started, "https://a/vw");
    let mut da = Driver::new(NotFound::Unknown);
    list(&mut da, &mut a, vec![cm("lc1", "x", "1")]);
    assert!(e.synced());
    // The slice's watch fails: unsynced; the endpoint keeps covering its clusters.
    sd.handle(&mut sf, Err(failure(403)));
    assert!(!e.synced());
    assert!(e.covers("lc1"));
    list(&mut sd, &mut sf, vec![slice(&["https://a/vw"])]);
    assert!(e.synced());
    // The slice deleted: its endpoints stop.
    sd.handle(
        &mut sf,
        Ok(watcher::Event::Delete(slice(&["https://a/vw"]))),
    );
    assert!(!e.synced());
    assert!(objects(&e).is_empty());
}

#[test]
fn a_key_two_endpoints_list_stays_until_neither_does() {
    let mut t = two(cm("lc1", "x", "1"));
    list(&mut t.da, &mut t.a, Vec::new());
    assert_eq!(objects(&t.e), ["lc1/x=1"]);
    let gone = cm("lc1", "x", "1");
    t.db.handle(&mut t.b, Ok(watcher::Event::Delete(gone)));
    assert!(objects(&t.e).is_empty());
}

#[test]
fn endpoint_urls_are_trimmed_sorted_and_unique() {
    assert_eq!(
        endpoint_urls(&slice(&[
            "https://b/vw/",
            "https://a/vw",
            "https://b/vw",
            ""
        ])),
        ["https://a/vw", "https://b/vw"]
    );
    let empty: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExportEndpointSlice",
        "metadata": {"name": "export"}, "status": {"endpoints": "bad"}
    }))
    .expect("slice");
    assert!(endpoint_urls(&empty).is_empty());
}

#[test]
fn a_cluster_moving_between_endpoints_is_seen_where_its_objects_are() {
    let Two {
        e,
        mut a,
        mut b,
        mut da,
        mut db,
        sf: _slice_watch,
        started: _started,
        sd: _slice_driver,
    } = two(cm("lc2", "x", "2"));
    assert_eq!(e.seen_at("lc1").as_deref(), Some("https://a/vw"));
    // b also gains an object of lc1: the first endpoint holding it still answers.
    db.handle(&mut b, Ok(watcher::Event::Apply(cm("lc1", "y", "3"))));
    assert_eq!(e.seen_at("lc1").as_deref(), Some("https://a/vw"));
    // a's last object of lc1 gone: b holds it now.
    da.handle(&mut a, Ok(watcher::Event::Delete(cm("lc1", "x", "1"))));
    assert_eq!(e.seen_at("lc1").as_deref(), Some("https://b/vw"));
    assert!(e.covers("lc1"));
    // New clusters on either endpoint are seen at once, each on its own.
    da.handle(&mut a, Ok(watcher::Event::Apply(cm("lc3", "x", "4"))));
    db.handle(&mut b, Ok(watcher::Event::Apply(cm("lc4", "x", "5"))));
    assert_eq!(e.seen_at("lc3").as_deref(), Some("https://a/vw"));
    assert_eq!(e.seen_at("lc4").as_deref(), Some("https://b/vw"));
    assert_eq!(e.seen_at("lc2").as_deref(), Some("https://b/vw"));
    // b's last object of lc1 gone too: nobody holds it.
    db.handle(&mut b, Ok(watcher::Event::Delete(cm("lc1", "y", "3"))));
    assert_eq!(e.seen_at("lc1"), None);
    assert!(!e.covers("lc1"));
    assert!(e.covers("lc3") && e.covers("lc4"));
}
