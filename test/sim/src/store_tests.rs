use super::*;
use serde_json::json;

fn gr() -> Gr {
    crate::kcp::kind(("apis.kcp.io", "apibindings"))
}

fn key(cluster: &str, name: &str) -> Key {
    Key {
        cluster: cluster.into(),
        namespace: String::new(),
        name: name.into(),
    }
}

fn binding(path: &str, export: &str) -> Value {
    json!({"metadata": {"name": "b"}, "spec": {"reference": {"export": {"path": path, "name": export}}}})
}

fn names(v: Vec<(Key, Arc<Value>)>) -> Vec<String> {
    v.into_iter().map(|(k, _)| k.cluster).collect()
}

#[test]
fn the_reference_index_follows_creates_updates_and_deletes() {
    let store = Store::new(16);
    // Stored before the index exists: indexed when it is made.
    let _ = store.create(&gr(), key("c1", "b"), binding("", "e"));
    store.index_by_reference(&gr(), crate::kcp::export_reference);
    let _ = store.create(&gr(), key("c2", "b"), binding("c1", "e"));
    let _ = store.create(&gr(), key("c3", "b"), binding("c1", "other"));
    assert_eq!(
        names(store.referencing(&gr(), "c1", Some("e"))),
        ["c1", "c2"]
    );
    assert_eq!(
        names(store.referencing(&gr(), "c1", None)),
        ["c1", "c2", "c3"]
    );
    assert!(store.referencing(&gr(), "c2", None).is_empty());

    // An update that names another export moves the object.
    let old = store.get(&gr(), &key("c2", "b")).map(|o| rv_of(&o));
    let moved = store.update(
        &gr(),
        &key("c2", "b"),
        binding("root:p", "e"),
        old.unwrap_or(0),
    );
    assert!(moved.is_ok());
    assert_eq!(names(store.referencing(&gr(), "c1", Some("e"))), ["c1"]);
    assert_eq!(names(store.referencing(&gr(), "root:p", Some("e"))), ["c2"]);

    // A delete removes it; a kind not indexed answers nothing.
    assert!(store.delete(&gr(), &key("c1", "b"), None).is_ok());
    assert!(store.referencing(&gr(), "c1", Some("e")).is_empty());
    let other = crate::kcp::kind(("apis.kcp.io", "apiexports"));
    assert!(store.referencing(&other, "c1", None).is_empty());
}

#[test]
fn keys_changed_since_come_from_the_history_until_it_no_longer_reaches() {
    let store = Store::new(16);
    let at = store.current_rv();
    let _ = store.create(&gr(), key("c1", "b"), binding("", "e"));
    let _ = store.create(&gr(), key("c2", "b"), binding("", "e"));
    let mid = store.current_rv();
    assert!(store.delete(&gr(), &key("c1", "b"), None).is_ok());
    let since = |rv| {
        store
            .keys_changed_since(&gr(), rv)
            .map(|ks| ks.into_iter().map(|k| k.cluster).collect::<Vec<_>>())
    };
    assert_eq!(
        since(at),
        Some(vec!["c1".to_string(), "c2".to_string(), "c1".to_string()])
    );
    assert_eq!(since(mid), Some(vec!["c1".to_string()]));
    assert_eq!(
        store.changed_at(&gr()),
        store.current_rv(),
        "the delete is the last change"
    );
    // After a compaction the history no longer reaches back: the caller reads all.
    store.compact();
    assert_eq!(since(mid), None);
}
