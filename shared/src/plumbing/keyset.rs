//! A set of object keys (logical cluster, namespace, name) grouped by logical
//! cluster: each cluster's name is held once, each object's namespace and name as
//! one boxed string. A partition of a merged index keeps the keys of every object
//! its endpoint serves (a million at fleet size), and the same again while a list
//! streams in; as `HashSet<ObjectKey>` (three `String`s a key) that was the
//! webhook's largest single holding (docs/performance.md, "The webhook at fleet
//! size").

use std::collections::{HashMap, HashSet};

use crate::endpoints::ObjectKey;

/// Object keys by logical cluster.
#[derive(Default, Debug)]
pub struct KeySet {
    clusters: HashMap<Box<str>, HashSet<Box<str>>>,
}

/// An object's namespace and name as one string, exact whatever either holds:
/// the namespace's length in decimal, `:`, the namespace, then the name.
fn within(namespace: &str, name: &str) -> Box<str> {
    format!("{}:{namespace}{name}", namespace.len()).into_boxed_str()
}

/// The key of [`within`]'s string `id` in `cluster`.
fn key_of(cluster: &str, id: &str) -> Option<ObjectKey> {
    let (n, rest) = id.split_once(':')?;
    let n: usize = n.parse().ok()?;
    Some(ObjectKey {
        cluster: cluster.to_string(),
        namespace: rest.get(..n)?.to_string(),
        name: rest.get(n..)?.to_string(),
    })
}

impl KeySet {
    /// Adds `key`; returns whether it is new, and whether its cluster is (its
    /// first object).
    pub fn insert(&mut self, key: &ObjectKey) -> (bool, bool) {
        let id = within(&key.namespace, &key.name);
        match self.clusters.get_mut(key.cluster.as_str()) {
            Some(set) => (set.insert(id), false),
            None => {
                self.clusters
                    .insert(key.cluster.as_str().into(), HashSet::from([id]));
                (true, true)
            }
        }
    }

    /// Removes `key`; returns whether it was there, and whether its cluster is
    /// gone with it (its last object).
    pub fn remove(&mut self, key: &ObjectKey) -> (bool, bool) {
        let Some(set) = self.clusters.get_mut(key.cluster.as_str()) else {
            return (false, false);
        };
        if !set.remove(&within(&key.namespace, &key.name)) {
            return (false, false);
        }
        let emptied = set.is_empty();
        if emptied {
            self.clusters.remove(key.cluster.as_str());
        }
        (true, emptied)
    }

    /// Whether `key` is held.
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.clusters
            .get(key.cluster.as_str())
            .is_some_and(|set| set.contains(&within(&key.namespace, &key.name)))
    }

    /// Whether some object of `cluster` is held.
    pub fn has_cluster(&self, cluster: &str) -> bool {
        self.clusters.contains_key(cluster)
    }

    /// The clusters with some object held.
    pub fn clusters(&self) -> impl Iterator<Item = &str> {
        self.clusters.keys().map(|c| &**c)
    }

    /// Every key held.
    pub fn iter(&self) -> impl Iterator<Item = ObjectKey> + '_ {
        self.clusters
            .iter()
            .flat_map(|(cluster, set)| set.iter().filter_map(move |id| key_of(cluster, id)))
    }

    /// The keys held here and not in `other`.
    pub fn missing_from(&self, other: &KeySet) -> Vec<ObjectKey> {
        self.clusters
            .iter()
            .flat_map(|(cluster, set)| {
                let theirs = other.clusters.get(cluster);
                set.iter()
                    .filter(move |id| !theirs.is_some_and(|t| t.contains(*id)))
                    .filter_map(move |id| key_of(cluster, id))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cluster: &str, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            cluster: cluster.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn keys_are_added_and_removed_by_cluster() {
        let mut set = KeySet::default();
        assert_eq!(set.insert(&key("c1", "ns", "a")), (true, true));
        assert_eq!(set.insert(&key("c1", "ns", "a")), (false, false));
        assert_eq!(set.insert(&key("c1", "", "a")), (true, false));
        assert_eq!(set.insert(&key("c2", "ns", "a")), (true, true));
        assert_eq!(set.iter().count(), 3);
        assert!(set.contains(&key("c1", "", "a")));
        assert!(!set.contains(&key("c1", "ns", "b")));
        assert!(!set.contains(&key("c3", "ns", "a")));
        let mut clusters: Vec<&str> = set.clusters().collect();
        clusters.sort();
        assert_eq!(clusters, ["c1", "c2"]);
        assert_eq!(set.remove(&key("c1", "ns", "b")), (false, false));
        assert_eq!(set.remove(&key("c9", "ns", "a")), (false, false));
        assert_eq!(set.remove(&key("c1", "ns", "a")), (true, false));
        assert_eq!(set.remove(&key("c1", "", "a")), (true, true));
        assert!(!set.has_cluster("c1"));
        assert_eq!(set.iter().count(), 1);
        let all: Vec<ObjectKey> = set.iter().collect();
        assert_eq!(all, [key("c2", "ns", "a")]);
        assert_eq!(set.remove(&key("c2", "ns", "a")), (true, true));
        assert_eq!(set.iter().count(), 0);
        assert!(!set.has_cluster("c2"));
    }

    #[test]
    fn namespace_and_name_stay_apart_whatever_they_hold() {
        // Keys a plain separator would confuse: each is its own.
        let tricky = [
            key("c", "a", "b/c"),
            key("c", "a/b", "c"),
            key("c", "", "a/b/c"),
            key("c", "1:a", "b"),
            key("c", "1", ":ab"),
            key("c", "", ""),
        ];
        let mut set = KeySet::default();
        for k in &tricky {
            assert!(set.insert(k).0, "{k:?} is new");
        }
        assert_eq!(set.iter().count(), tricky.len());
        let mut back: Vec<ObjectKey> = set.iter().collect();
        back.sort();
        let mut want = tricky.to_vec();
        want.sort();
        assert_eq!(back, want, "every key reads back as it was");
    }

    #[test]
    fn missing_from_lists_what_the_other_set_lacks() {
        let mut old = KeySet::default();
        let mut listed = KeySet::default();
        for k in [
            key("c1", "ns", "a"),
            key("c1", "ns", "b"),
            key("c2", "", "x"),
        ] {
            old.insert(&k);
        }
        listed.insert(&key("c1", "ns", "a"));
        listed.insert(&key("c3", "", "y"));
        let mut gone = old.missing_from(&listed);
        gone.sort();
        assert_eq!(gone, [key("c1", "ns", "b"), key("c2", "", "x")]);
    }
}
