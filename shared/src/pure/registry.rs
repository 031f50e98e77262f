//! The rule registry: every policy object, compiled for admission, keyed by logical
//! cluster and name, with a reverse index from the protected group/resource to the
//! entries that protect it.
//!
//! Writers (watch events) call `apply`/`delete`/`reset`; readers (admission) call
//! `find`, which is one hash lookup and an `Arc` clone: no allocation.

use crate::{
    api::{
        anchor_rule::AnchorRule,
        common::{Enforcement, GroupResource},
        critical_service::{CriterionType, CriticalService},
        dependency_rule::DependencyRule,
        resource_protection::{ResourceProtection, ResourceSelector},
    },
    fieldpath::{FieldPath, FieldPathError},
    review::ExportRoute,
    selector,
};
use dashmap::DashMap;
use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

/// Identity of a policy object: logical cluster ("" on plain Kubernetes) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyKey {
    /// Logical cluster (kcp) or "".
    pub cluster: Arc<str>,
    /// Object name.
    pub name: Arc<str>,
}

impl PolicyKey {
    /// A key.
    pub fn new(cluster: &str, name: &str) -> Self {
        Self {
            cluster: cluster.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for PolicyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.cluster.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}|{}", self.cluster, self.name)
        }
    }
}

/// A reverse index from group/resource to the entries that target it.
///
/// `members` is the truth; `by_target` caches each group/resource's entries as one
/// shared slice, built by the first [`TargetIndex::find`] after a change and dropped
/// by every change to that group/resource (building it on every change made a list
/// of n entries naming one resource cost n² on a large fleet). A reader builds the
/// slice while it holds `members`' guard, so a writer's change to that group/resource
/// (which drops the slice after changing `members`) always comes after it: a stale
/// slice never outlives the change.
pub struct TargetIndex<T> {
    items: DashMap<PolicyKey, (Vec<GroupResource>, Arc<T>)>,
    members: DashMap<GroupResource, BTreeMap<PolicyKey, Arc<T>>>,
    by_target: DashMap<GroupResource, Arc<[Arc<T>]>>,
    loaded: AtomicBool,
    /// Moves on every change (see [`TargetIndex::version`]).
    version: AtomicU64,
}

impl<T> Default for TargetIndex<T> {
    fn default() -> Self {
        Self {
            items: DashMap::new(),
            members: DashMap::new(),
            by_target: DashMap::new(),
            loaded: AtomicBool::new(false),
            version: AtomicU64::new(0),
        }
    }
}

impl<T> TargetIndex<T> {
    /// After `gr`'s members changed: drops them if none is left, and drops the
    /// cached slice (the next [`TargetIndex::find`] builds it again).
    fn invalidate(&self, gr: &GroupResource) {
        self.members.remove_if(gr, |_, m| m.is_empty());
        self.by_target.remove(gr);
    }

    /// A number that moves whenever an entry is added, replaced or removed: a
    /// reader that saw the same number saw the same entries.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Adds or replaces the entry `key`, protecting `targets`.
    pub fn apply(&self, key: PolicyKey, targets: Vec<GroupResource>, item: Arc<T>) {
        let old = self
            .items
            .insert(key.clone(), (targets.clone(), item.clone()));
        let mut touched: Vec<GroupResource> = targets.clone();
        if let Some((old_targets, _)) = old {
            for gr in old_targets {
                if !targets.contains(&gr) {
                    if let Some(mut m) = self.members.get_mut(&gr) {
                        m.remove(&key);
                    }
                    touched.push(gr);
                }
            }
        }
        for gr in &targets {
            self.members
                .entry(gr.clone())
                .or_default()
                .insert(key.clone(), item.clone());
        }
        touched.sort();
        touched.dedup();
        for gr in &touched {
            self.invalidate(gr);
        }
        // After the change: a reader that reads the version first and then the
        // entries sees this change, or a version it has not seen yet.
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Removes the entry `key`.
    pub fn delete(&self, key: &PolicyKey) {
        if let Some((_, (targets, _))) = self.items.remove(key) {
            for gr in &targets {
                if let Some(mut m) = self.members.get_mut(gr) {
                    m.remove(key);
                }
                self.invalidate(gr);
            }
            self.version.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Replaces everything (after a full list) and marks the index loaded. Readers
    /// never see an empty window: new lists are swapped in per group/resource before
    /// stale ones are removed.
    pub fn reset(&self, entries: Vec<(PolicyKey, Vec<GroupResource>, Arc<T>)>) {
        let mut members: std::collections::HashMap<GroupResource, BTreeMap<PolicyKey, Arc<T>>> =
            std::collections::HashMap::new();
        let mut keys = std::collections::HashSet::new();
        for (key, targets, item) in entries {
            for gr in &targets {
                members
                    .entry(gr.clone())
                    .or_default()
                    .insert(key.clone(), item.clone());
            }
            keys.insert(key.clone());
            self.items.insert(key, (targets, item));
        }
        self.items.retain(|k, _| keys.contains(k));
        // Each group/resource's members are replaced at once; the cached slices are
        // dropped after all of them (a slice built from the old members meanwhile
        // is dropped with the rest).
        self.members.retain(|gr, _| members.contains_key(gr));
        for (gr, m) in members {
            self.members.insert(gr, m);
        }
        self.by_target.clear();
        self.version.fetch_add(1, Ordering::AcqRel);
        self.set_loaded();
    }

    /// Marks the index loaded (its source has been listed once).
    pub fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Release);
    }

    /// Whether the index has been loaded.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// The entries protecting `gr`: O(1), no allocation, unless `gr`'s entries
    /// changed since the last call (then they are collected once).
    pub fn find(&self, gr: &GroupResource) -> Option<Arc<[Arc<T>]>> {
        if let Some(list) = self.by_target.get(gr) {
            return Some(list.value().clone());
        }
        let members = self.members.get(gr)?;
        if members.is_empty() {
            return None;
        }
        let list: Arc<[Arc<T>]> = members.values().cloned().collect();
        // Inserted while `members` is held: see the type's docs.
        self.by_target.insert(gr.clone(), list.clone());
        drop(members);
        Some(list)
    }

    /// Whether anything protects `gr`.
    pub fn protects(&self, gr: &GroupResource) -> bool {
        self.members.get(gr).is_some_and(|m| !m.is_empty())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Every targeted group/resource.
    pub fn targets(&self) -> Vec<GroupResource> {
        let mut v: Vec<GroupResource> = self
            .members
            .iter()
            .filter(|e| !e.value().is_empty())
            .map(|e| e.key().clone())
            .collect();
        v.sort();
        v
    }

    /// Whether some entry satisfies `f` (no allocation).
    pub fn any(&self, f: impl Fn(&T) -> bool) -> bool {
        self.items.iter().any(|e| f(&e.value().1))
    }

    /// Every entry.
    pub fn entries(&self) -> Vec<Arc<T>> {
        self.items.iter().map(|e| e.value().1.clone()).collect()
    }
}

#[path = "registry_compile.rs"]
mod compile;
pub use compile::*;

/// Every registry the webhook keeps.
#[derive(Default)]
pub struct Registry {
    /// DependencyRules, one entry per rule (its dependencies), by protected resource.
    pub dependencies: TargetIndex<Vec<CompiledDependency>>,
    /// ResourceProtections by protected resource.
    pub protections: TargetIndex<CompiledProtection>,
    /// CriticalServices by provider resource, namespaces and criticalservices.
    pub critical: TargetIndex<CompiledCritical>,
    /// AnchorRules by protected resource.
    pub anchors: TargetIndex<CompiledAnchor>,
}

/// A policy kind the registry holds: how it compiles, and which index keeps it.
pub trait PolicyObject: kube::Resource {
    /// The compiled form admission reads.
    type Compiled;
    /// The index holding this kind.
    fn index(reg: &Registry) -> &TargetIndex<Self::Compiled>;
    /// Compiles the object (of logical cluster `cluster`) and the resources it protects.
    fn compile(&self, cluster: &str) -> Result<(Vec<GroupResource>, Self::Compiled), CompileError>;
}

fn sorted(mut targets: Vec<GroupResource>) -> Vec<GroupResource> {
    targets.sort();
    targets.dedup();
    targets
}

impl PolicyObject for DependencyRule {
    type Compiled = Vec<CompiledDependency>;
    fn index(reg: &Registry) -> &TargetIndex<Self::Compiled> {
        &reg.dependencies
    }
    fn compile(&self, cluster: &str) -> Result<(Vec<GroupResource>, Self::Compiled), CompileError> {
        let deps = compile_dependency_rule(cluster, self)?;
        Ok((
            sorted(deps.iter().map(|d| d.target.clone()).collect()),
            deps,
        ))
    }
}

/// `impl PolicyObject` for a kind whose compiler returns its targets with its compiled form.
macro_rules! policy_object {
    ($($kind:ty => $compiled:ty, $index:ident, $compile:expr;)*) => {$(
        impl PolicyObject for $kind {
            type Compiled = $compiled;
            fn index(reg: &Registry) -> &TargetIndex<Self::Compiled> {
                &reg.$index
            }
            fn compile(
                &self,
                cluster: &str,
            ) -> Result<(Vec<GroupResource>, Self::Compiled), CompileError> {
                $compile(cluster, self)
            }
        }
    )*};
}

policy_object! {
    ResourceProtection => CompiledProtection, protections, compile_protection;
    CriticalService => CompiledCritical, critical, |c, p| Ok(compile_critical(c, p));
    AnchorRule => CompiledAnchor, anchors, compile_anchor;
}

fn key_of<P: PolicyObject>(cluster: &str, obj: &P) -> PolicyKey {
    PolicyKey::new(cluster, obj.meta().name.as_deref().unwrap_or_default())
}

impl Registry {
    /// Adds or replaces a policy object; returns the compile error, if any (the
    /// object is then removed: an invalid policy protects nothing, and the controller
    /// reports it).
    pub fn apply<P: PolicyObject>(&self, cluster: &str, obj: &P) -> Result<(), CompileError> {
        let key = key_of(cluster, obj);
        match obj.compile(cluster) {
            Ok((targets, compiled)) => {
                P::index(self).apply(key, targets, Arc::new(compiled));
                Ok(())
            }
            Err(e) => {
                P::index(self).delete(&key);
                Err(e)
            }
        }
    }

    /// Removes the policy object `key` of kind `P`.
    pub fn delete<P: PolicyObject>(&self, key: &PolicyKey) {
        P::index(self).delete(key);
    }

    /// Replaces every object of kind `P` (after a full list; invalid ones are left
    /// out) and marks that index loaded.
    pub fn reset<P: PolicyObject>(&self, objs: &[(String, P)]) {
        let entries = objs
            .iter()
            .filter_map(|(cluster, obj)| {
                let (targets, compiled) = obj.compile(cluster).ok()?;
                Some((key_of(cluster, obj), targets, Arc::new(compiled)))
            })
            .collect();
        P::index(self).reset(entries);
    }

    /// Dependencies protecting `gr` (flattened per rule).
    pub fn find_by_target(
        &self,
        gr: &GroupResource,
    ) -> Option<Arc<[Arc<Vec<CompiledDependency>>]>> {
        self.dependencies.find(gr)
    }

    /// Whether every registry has loaded.
    pub fn loaded(&self) -> bool {
        self.dependencies.is_loaded()
            && self.protections.is_loaded()
            && self.critical.is_loaded()
            && self.anchors.is_loaded()
    }

    /// The ResourceProtections wildcard selectors (`resource: "*"`) put in charge of
    /// `gr`: those over its group and those over every group (empty for a type
    /// never selected by a wildcard), of every logical cluster.
    pub fn wildcard_protections(&self, gr: &GroupResource) -> Vec<Arc<CompiledProtection>> {
        self.wildcards(None, gr)
    }

    /// [`Self::wildcard_protections`] of logical cluster `cluster` only ("" on plain
    /// Kubernetes): a policy protects the objects of its own workspace.
    pub fn wildcard_protections_in(
        &self,
        cluster: &str,
        gr: &GroupResource,
    ) -> Vec<Arc<CompiledProtection>> {
        self.wildcards(Some(cluster), gr)
    }

    fn wildcards(&self, cluster: Option<&str>, gr: &GroupResource) -> Vec<Arc<CompiledProtection>> {
        if gr.resource == "*" || crate::api::resource_protection::never_selected_by_wildcard(gr) {
            return Vec::new();
        }
        let mut out: Vec<Arc<CompiledProtection>> = Vec::new();
        for w in [
            GroupResource::new(&gr.group, "*"),
            GroupResource::new("*", "*"),
        ] {
            let Some(list) = self.protections.find(&w) else {
                continue;
            };
            let range = cluster.map_or(0..list.len(), |c| cluster_range(&list, c));
            for p in list.get(range).unwrap_or_default() {
                if p.selectors.iter().any(|s| s.selects_resource(gr))
                    && !out.iter().any(|q| q.key == p.key)
                {
                    out.push(p.clone());
                }
            }
        }
        out
    }

    /// The ResourceProtections of logical cluster `cluster` ("" on plain Kubernetes)
    /// that could select objects of `gr`: those naming it, then the wildcard ones. A
    /// policy never protects an object of another workspace. Every index list is
    /// sorted by key (cluster first), so a cluster's policies are one range of it,
    /// found by binary search: on Kubernetes (one cluster) the list itself.
    pub fn protections_in(
        &self,
        cluster: &str,
        gr: &GroupResource,
    ) -> Option<Arc<[Arc<CompiledProtection>]>> {
        let exact = self.protections.find(gr).and_then(|list| {
            let range = cluster_range(&list, cluster);
            if range.is_empty() {
                None
            } else if range.len() == list.len() {
                Some(list)
            } else {
                list.get(range).map(Arc::from)
            }
        });
        with_wildcards(exact, self.wildcard_protections_in(cluster, gr))
    }

    /// ResourceProtections that could select objects of `gr`: those naming it, then
    /// the wildcard ones. Without wildcards, the index's own list (no allocation).
    pub fn protections_for(&self, gr: &GroupResource) -> Option<Arc<[Arc<CompiledProtection>]>> {
        with_wildcards(self.protections.find(gr), self.wildcard_protections(gr))
    }

    /// Whether any policy object protects `gr` (namespaces count when a namespaced
    /// resource is protected: containment).
    pub fn governs(&self, gr: &GroupResource) -> bool {
        self.dependencies.protects(gr)
            || self.protections.protects(gr)
            || !self.wildcard_protections(gr).is_empty()
            || self.critical.protects(gr)
            || self.anchors.protects(gr)
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
