//! The dependents index: from (logical cluster, referenced group/resource, referenced
//! name) to the objects that reference it, with the namespace each reference points
//! into. Fed by watches of dependent resources; a DependencyRule check is then a hash
//! lookup with no API call.

use crate::registry::CompiledDependency;
use serde_json::Value;
use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, RwLock},
};

/// Interned string.
pub type Str = Arc<str>;

/// Identity of a dependent object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    /// Logical cluster ("" on Kubernetes).
    pub cluster: Str,
    /// `resource.group` of the dependent.
    pub resource: Str,
    /// Namespace ("" when cluster-scoped).
    pub namespace: Str,
    /// Name.
    pub name: Str,
}

/// A referencing object as the index stores it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Referrer {
    /// Kind, for messages.
    pub kind: Str,
    /// Namespace ("" when cluster-scoped).
    pub namespace: Str,
    /// Name.
    pub name: Str,
    /// Namespace the reference points into ("" when the target is cluster-scoped or
    /// the dependent is cluster-scoped).
    pub ref_namespace: Str,
    /// Whether the referencing object is being deleted.
    pub terminating: bool,
}

impl Referrer {
    /// `Kind namespace/name` (with "(terminating)").
    pub fn describe(&self) -> String {
        let mut s = if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        };
        if self.terminating {
            s.push_str(" (terminating)");
        }
        s
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RefKey {
    cluster: Str,
    target: Str,
    name: Str,
}

#[derive(Default)]
struct Inner {
    refs: HashMap<RefKey, HashMap<(ObjectId, Str), Referrer>>,
    by_obj: HashMap<ObjectId, Vec<RefKey>>,
    strings: HashSet<Str>,
}

impl Inner {
    fn intern(&mut self, s: &str) -> Str {
        if let Some(v) = self.strings.get(s) {
            return v.clone();
        }
        let v: Str = s.into();
        self.strings.insert(v.clone());
        v
    }

    fn remove(&mut self, id: &ObjectId) {
        if let Some(keys) = self.by_obj.remove(id) {
            for k in keys {
                if let Some(set) = self.refs.get_mut(&k) {
                    set.retain(|(oid, _), _| oid != id);
                    if set.is_empty() {
                        self.refs.remove(&k);
                    }
                }
            }
        }
    }
}

/// One reference found in a dependent object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `resource.group` of the referenced type.
    pub target: String,
    /// Referenced name.
    pub name: String,
    /// Namespace the reference points into ("" for cluster-scoped references).
    pub namespace: String,
}

/// The references `obj` (an object of the dependent type of `deps`) makes.
pub fn references(obj: &Value, deps: &[&CompiledDependency]) -> Vec<Reference> {
    let own_ns = obj
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut out = Vec::new();
    for d in deps {
        let ns = match &d.namespace_path {
            Some(p) => p
                .first(obj)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or(own_ns),
            None => own_ns,
        };
        d.path.for_each_string(obj, &mut |name| {
            let r = Reference {
                target: d.target.to_string(),
                name: name.to_string(),
                namespace: ns.to_string(),
            };
            if !out.contains(&r) {
                out.push(r);
            }
        });
    }
    out
}

/// The index. Cheap to share (`Arc` inside).
#[derive(Clone, Default)]
pub struct DependentsIndex {
    inner: Arc<RwLock<Inner>>,
}

impl DependentsIndex {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        match self.inner.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        match self.inner.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Sets what dependent `id` (of `kind`) references, replacing what it did before.
    pub fn apply(&self, id: &ObjectId, kind: &str, terminating: bool, refs: &[Reference]) {
        let mut inner = self.write();
        inner.remove(id);
        if refs.is_empty() {
            return;
        }
        let id = ObjectId {
            cluster: inner.intern(&id.cluster),
            resource: inner.intern(&id.resource),
            namespace: inner.intern(&id.namespace),
            name: inner.intern(&id.name),
        };
        let kind = inner.intern(kind);
        let mut keys = Vec::with_capacity(refs.len());
        for r in refs {
            let key = RefKey {
                cluster: id.cluster.clone(),
                target: inner.intern(&r.target),
                name: inner.intern(&r.name),
            };
            let ref_namespace = inner.intern(&r.namespace);
            let referrer = Referrer {
                kind: kind.clone(),
                namespace: id.namespace.clone(),
                name: id.name.clone(),
                ref_namespace: ref_namespace.clone(),
                terminating,
            };
            inner
                .refs
                .entry(key.clone())
                .or_default()
                .insert((id.clone(), ref_namespace), referrer);
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        inner.by_obj.insert(id, keys);
    }

    /// Forgets dependent `id`.
    pub fn delete(&self, id: &ObjectId) {
        self.write().remove(id);
    }

    /// Forgets every dependent of `resource` (`resource.group`) in every cluster, e.g.
    /// before a re-list.
    pub fn clear_resource(&self, resource: &str) {
        let mut inner = self.write();
        let ids: Vec<ObjectId> = inner
            .by_obj
            .keys()
            .filter(|id| &*id.resource == resource)
            .cloned()
            .collect();
        for id in ids {
            inner.remove(&id);
        }
    }

    /// Forgets every dependent of `resource` except those in `keep` (after a re-list).
    pub fn retain_resource(&self, resource: &str, keep: &HashSet<ObjectId>) {
        let mut inner = self.write();
        let ids: Vec<ObjectId> = inner
            .by_obj
            .keys()
            .filter(|id| &*id.resource == resource && !keep.contains(*id))
            .cloned()
            .collect();
        for id in ids {
            inner.remove(&id);
        }
    }

    /// Objects referencing `name` of `target` (`resource.group`) in `cluster`. With
    /// `namespace`, only references pointing into that namespace count (namespaced
    /// targets); without, every reference counts (cluster-scoped targets). Sorted.
    pub fn lookup(
        &self,
        cluster: &str,
        target: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> Vec<Referrer> {
        let inner = self.read();
        let key = RefKey {
            cluster: cluster.into(),
            target: target.into(),
            name: name.into(),
        };
        let mut out: Vec<Referrer> = inner
            .refs
            .get(&key)
            .map(|set| {
                set.values()
                    .filter(|r| namespace.is_none_or(|ns| &*r.ref_namespace == ns))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| (&a.namespace, &a.name, &a.kind).cmp(&(&b.namespace, &b.name, &b.kind)));
        // One object referencing into several namespaces is still one blocker.
        out.dedup_by(|a, b| a.namespace == b.namespace && a.name == b.name && a.kind == b.kind);
        out
    }

    /// Number of references held.
    pub fn len(&self) -> usize {
        self.read().refs.values().map(HashMap::len).sum()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.read().refs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::common::{Enforcement, GroupResource},
        fieldpath::FieldPath,
        registry::PolicyKey,
    };
    use serde_json::json;

    fn dep(path: &str, ns_path: Option<&str>) -> CompiledDependency {
        CompiledDependency {
            rule: PolicyKey::new("", "r"),
            enforcement: Enforcement::Enforce,
            dependent_group: "compute.test.io".into(),
            dependent_version: "v1".into(),
            dependent_resource: "virtualmachines".into(),
            dependent_kind: "VirtualMachine".into(),
            dependent_export: None,
            target: GroupResource::new("network.test.io", "vpcs"),
            path: FieldPath::parse(path).expect("path"),
            namespace_path: ns_path.map(|p| FieldPath::parse(p).expect("ns path")),
        }
    }

    fn id(ns: &str, name: &str) -> ObjectId {
        ObjectId {
            cluster: "lc1".into(),
            resource: "virtualmachines.compute.test.io".into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn references_from_paths() {
        let d1 = dep(".spec.vpcRef.name", None);
        let d2 = dep(".spec.disks[*].vpcRef.name", Some(".spec.vpcRef.namespace"));
        let vm = json!({"metadata": {"name": "vm", "namespace": "default"},
            "spec": {"vpcRef": {"name": "a", "namespace": "net"}, "disks": [{"vpcRef": {"name": "b"}}]}});
        let refs = references(&vm, &[&d1, &d2]);
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0].namespace, "default");
        assert_eq!(
            refs[1],
            Reference {
                target: "vpcs.network.test.io".into(),
                name: "b".into(),
                namespace: "net".into()
            }
        );
    }

    #[test]
    fn apply_lookup_update_delete() {
        let idx = DependentsIndex::default();
        let r = |name: &str| Reference {
            target: "vpcs.network.test.io".into(),
            name: name.into(),
            namespace: "default".into(),
        };
        idx.apply(
            &id("default", "vm1"),
            "VirtualMachine",
            false,
            &[r("my-vpc")],
        );
        idx.apply(
            &id("default", "vm2"),
            "VirtualMachine",
            true,
            &[r("my-vpc"), r("other")],
        );
        let found = idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", Some("default"));
        assert_eq!(
            found.iter().map(Referrer::describe).collect::<Vec<_>>(),
            vec![
                "VirtualMachine default/vm1",
                "VirtualMachine default/vm2 (terminating)"
            ]
        );
        assert!(
            idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", Some("prod"))
                .is_empty()
        );
        assert!(
            idx.lookup("lc2", "vpcs.network.test.io", "my-vpc", Some("default"))
                .is_empty()
        );
        assert_eq!(
            idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", None)
                .len(),
            2
        );
        // vm1 now points elsewhere.
        idx.apply(
            &id("default", "vm1"),
            "VirtualMachine",
            false,
            &[r("other")],
        );
        assert_eq!(
            idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", Some("default"))
                .len(),
            1
        );
        idx.delete(&id("default", "vm2"));
        assert!(
            idx.lookup("lc1", "vpcs.network.test.io", "my-vpc", Some("default"))
                .is_empty()
        );
        assert_eq!(idx.len(), 1);
        idx.clear_resource("virtualmachines.compute.test.io");
        assert!(idx.is_empty());
    }
}
