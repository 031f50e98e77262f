//! The dependents index: from (logical cluster, referenced group/resource, referenced
//! name) to the objects that reference it, with the namespace each reference points
//! into. Fed by watches of dependent resources; a DependencyRule check is then a hash
//! lookup with no API call.

use crate::registry::CompiledDependency;
use serde_json::Value;
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use parking_lot::RwLock;

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

type Id = u32;

/// Reference-counted string interner: low-cardinality strings (clusters, resources,
/// namespaces, kinds, referenced names) are stored once and named by a `u32`; a
/// string no object uses any more is freed.
#[derive(Default)]
struct Interner {
    ids: HashMap<Str, Id>,
    strings: Vec<Option<(Str, u32)>>,
    free: Vec<Id>,
}

impl Interner {
    fn get(&self, s: &str) -> Option<Id> {
        self.ids.get(s).copied()
    }

    fn acquire(&mut self, s: &str) -> Id {
        if let Some(&id) = self.ids.get(s) {
            if let Some(Some((_, n))) = self.strings.get_mut(id as usize) {
                *n += 1;
            }
            return id;
        }
        let v: Str = s.into();
        let id = match self.free.pop() {
            Some(id) => {
                self.strings[id as usize] = Some((v.clone(), 1));
                id
            }
            None => {
                self.strings.push(Some((v.clone(), 1)));
                (self.strings.len() - 1) as Id
            }
        };
        self.ids.insert(v, id);
        id
    }

    fn release(&mut self, id: Id) {
        let Some(entry) = self.strings.get_mut(id as usize) else {
            return;
        };
        let gone = match entry {
            Some((_, n)) if *n > 1 => {
                *n -= 1;
                None
            }
            Some((s, _)) => Some(s.clone()),
            None => None,
        };
        if let Some(s) = gone {
            *entry = None;
            self.ids.remove(&s);
            self.free.push(id);
        }
    }

    fn str(&self, id: Id) -> Str {
        match self.strings.get(id as usize) {
            Some(Some((s, _))) => s.clone(),
            _ => "".into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct RefKey {
    cluster: Id,
    target: Id,
    name: Id,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ref {
    key: RefKey,
    namespace: Id,
}

/// The references of one object; one reference (the common case) stays inline.
#[derive(Debug)]
enum Refs {
    One(Ref),
    Many(Box<[Ref]>),
}

impl Refs {
    fn as_slice(&self) -> &[Ref] {
        match self {
            Refs::One(r) => std::slice::from_ref(r),
            Refs::Many(v) => v,
        }
    }
}

/// One dependent object.
struct Slot {
    cluster: Id,
    resource: Id,
    namespace: Id,
    kind: Id,
    name: Box<str>,
    terminating: bool,
    refs: Refs,
}

#[derive(Default)]
struct Inner {
    strings: Interner,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Slot ids, found by (cluster, resource, namespace, name) through the slab.
    by_obj: hashbrown::HashTable<u32>,
    refs: HashMap<RefKey, Vec<u32>>,
    hasher: std::hash::RandomState,
    references: usize,
}

fn obj_hash(
    h: &std::hash::RandomState,
    cluster: Id,
    resource: Id,
    namespace: Id,
    name: &str,
) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut s = h.build_hasher();
    (cluster, resource, namespace).hash(&mut s);
    name.hash(&mut s);
    s.finish()
}

impl Inner {
    fn find(&self, id: &ObjectId) -> Option<u32> {
        let (c, r, n) = (
            self.strings.get(&id.cluster)?,
            self.strings.get(&id.resource)?,
            self.strings.get(&id.namespace)?,
        );
        let hash = obj_hash(&self.hasher, c, r, n, &id.name);
        let slots = &self.slots;
        self.by_obj
            .find(hash, |&i| {
                slots[i as usize].as_ref().is_some_and(|s| {
                    s.cluster == c && s.resource == r && s.namespace == n && *s.name == *id.name
                })
            })
            .copied()
    }

    fn remove(&mut self, id: &ObjectId) {
        let Some(slot_id) = self.find(id) else { return };
        self.remove_slot(slot_id);
    }

    fn remove_slot(&mut self, slot_id: u32) {
        let Some(slot) = self.slots.get_mut(slot_id as usize).and_then(Option::take) else {
            return;
        };
        let hash = obj_hash(
            &self.hasher,
            slot.cluster,
            slot.resource,
            slot.namespace,
            &slot.name,
        );
        if let Ok(entry) = self.by_obj.find_entry(hash, |&i| i == slot_id) {
            entry.remove();
        }
        for r in slot.refs.as_slice() {
            if let Some(list) = self.refs.get_mut(&r.key) {
                if let Some(pos) = list.iter().position(|&i| i == slot_id) {
                    list.swap_remove(pos);
                }
                if list.is_empty() {
                    self.refs.remove(&r.key);
                } else if list.capacity() > 4 * list.len() {
                    list.shrink_to_fit();
                }
            }
            self.strings.release(r.key.target);
            self.strings.release(r.key.name);
            self.strings.release(r.namespace);
            self.references -= 1;
        }
        for id in [slot.cluster, slot.resource, slot.namespace, slot.kind] {
            self.strings.release(id);
        }
        self.free.push(slot_id);
    }

    fn insert(&mut self, id: &ObjectId, kind: &str, terminating: bool, refs: &[Reference]) {
        let cluster = self.strings.acquire(&id.cluster);
        let resource = self.strings.acquire(&id.resource);
        let namespace = self.strings.acquire(&id.namespace);
        let kind = self.strings.acquire(kind);
        let mut list: Vec<Ref> = Vec::with_capacity(refs.len());
        for r in refs {
            let target = self.strings.acquire(&r.target);
            let name = self.strings.acquire(&r.name);
            let ns = self.strings.acquire(&r.namespace);
            list.push(Ref {
                key: RefKey {
                    cluster,
                    target,
                    name,
                },
                namespace: ns,
            });
        }
        let slot_refs = if list.len() == 1 {
            Refs::One(list[0])
        } else {
            Refs::Many(list.into_boxed_slice())
        };
        let slot_id = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        for r in slot_refs.as_slice() {
            // Each extra reference of the same object to the same key is held once.
            let entry = self.refs.entry(r.key).or_default();
            entry.push(slot_id);
            self.references += 1;
        }
        let hash = obj_hash(&self.hasher, cluster, resource, namespace, &id.name);
        self.slots[slot_id as usize] = Some(Slot {
            cluster,
            resource,
            namespace,
            kind,
            name: id.name.as_ref().into(),
            terminating,
            refs: slot_refs,
        });
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_obj.insert_unique(hash, slot_id, |&i| {
            slots[i as usize]
                .as_ref()
                .map(|s| obj_hash(hasher, s.cluster, s.resource, s.namespace, &s.name))
                .unwrap_or(0)
        });
    }
}

/// One reference found in a dependent object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The dependency's key ([`index_target`]): the referenced type and the fields.
    pub target: String,
    /// Referenced name.
    pub name: String,
    /// Namespace the reference points into ("" for cluster-scoped references).
    pub namespace: String,
}

/// The key of dependency `dep`'s references in the index: the referenced type with
/// the fields the reference is read from, so two rules naming the same types through
/// different fields never answer for each other.
pub fn index_target(dep: &CompiledDependency) -> String {
    match &dep.namespace_path {
        Some(ns) => format!("{}#{}#{}", dep.target, dep.path, ns),
        None => format!("{}#{}", dep.target, dep.path),
    }
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
                target: index_target(d),
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
    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, Inner> {
        self.inner.write()
    }

    fn read(&self) -> parking_lot::RwLockReadGuard<'_, Inner> {
        self.inner.read()
    }

    /// Sets what dependent `id` (of `kind`) references, replacing what it did before.
    pub fn apply(&self, id: &ObjectId, kind: &str, terminating: bool, refs: &[Reference]) {
        let mut inner = self.write();
        inner.remove(id);
        // The same reference twice (two paths naming one object) counts once.
        let mut unique: Vec<&Reference> = Vec::with_capacity(refs.len());
        for r in refs {
            if !unique.contains(&r) {
                unique.push(r);
            }
        }
        if unique.is_empty() {
            return;
        }
        let owned: Vec<Reference> = unique.into_iter().cloned().collect();
        inner.insert(id, kind, terminating, &owned);
    }

    /// Forgets dependent `id`.
    pub fn delete(&self, id: &ObjectId) {
        self.write().remove(id);
    }

    /// Forgets every dependent of `resource` (`resource.group`) in every cluster, e.g.
    /// before a re-list.
    pub fn clear_resource(&self, resource: &str) {
        self.retain_resource(resource, &HashSet::new());
    }

    /// Forgets every dependent of `resource` except those in `keep` (after a re-list).
    pub fn retain_resource(&self, resource: &str, keep: &HashSet<ObjectId>) {
        let mut inner = self.write();
        let Some(rid) = inner.strings.get(resource) else {
            return;
        };
        let doomed: Vec<u32> = inner
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                if s.resource != rid {
                    return None;
                }
                let id = ObjectId {
                    cluster: inner.strings.str(s.cluster),
                    resource: inner.strings.str(s.resource),
                    namespace: inner.strings.str(s.namespace),
                    name: s.name.as_ref().into(),
                };
                (!keep.contains(&id)).then_some(i as u32)
            })
            .collect();
        for slot in doomed {
            inner.remove_slot(slot);
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
        let (Some(c), Some(t), Some(n)) = (
            inner.strings.get(cluster),
            inner.strings.get(target),
            inner.strings.get(name),
        ) else {
            return Vec::new();
        };
        let key = RefKey {
            cluster: c,
            target: t,
            name: n,
        };
        let want_ns = namespace.map(|ns| inner.strings.get(ns));
        if want_ns == Some(None) {
            // Nothing points into a namespace no string names.
            return Vec::new();
        }
        let want_ns = want_ns.flatten();
        let mut out: Vec<Referrer> = Vec::new();
        for &slot_id in inner.refs.get(&key).map(Vec::as_slice).unwrap_or_default() {
            let Some(slot) = inner.slots.get(slot_id as usize).and_then(Option::as_ref) else {
                continue;
            };
            for r in slot.refs.as_slice().iter().filter(|r| r.key == key) {
                if want_ns.is_some_and(|ns| r.namespace != ns) {
                    continue;
                }
                out.push(Referrer {
                    kind: inner.strings.str(slot.kind),
                    namespace: inner.strings.str(slot.namespace),
                    name: slot.name.as_ref().into(),
                    ref_namespace: inner.strings.str(r.namespace),
                    terminating: slot.terminating,
                });
            }
        }
        out.sort_by(|a, b| (&a.namespace, &a.name, &a.kind).cmp(&(&b.namespace, &b.name, &b.kind)));
        // One object referencing into several namespaces is still one blocker.
        out.dedup_by(|a, b| a.namespace == b.namespace && a.name == b.name && a.kind == b.kind);
        out
    }

    /// Number of references held.
    pub fn len(&self) -> usize {
        self.read().references
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.read().references == 0
    }
}
