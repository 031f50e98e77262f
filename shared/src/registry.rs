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
        atomic::{AtomicBool, Ordering},
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
pub struct TargetIndex<T> {
    items: DashMap<PolicyKey, (Vec<GroupResource>, Arc<T>)>,
    members: DashMap<GroupResource, BTreeMap<PolicyKey, Arc<T>>>,
    by_target: DashMap<GroupResource, Arc<[Arc<T>]>>,
    loaded: AtomicBool,
}

impl<T> Default for TargetIndex<T> {
    fn default() -> Self {
        Self {
            items: DashMap::new(),
            members: DashMap::new(),
            by_target: DashMap::new(),
            loaded: AtomicBool::new(false),
        }
    }
}

impl<T> TargetIndex<T> {
    fn rebuild(&self, gr: &GroupResource) {
        let list: Option<Arc<[Arc<T>]>> = self
            .members
            .get(gr)
            .filter(|m| !m.is_empty())
            .map(|m| m.values().cloned().collect());
        match list {
            Some(list) => {
                self.by_target.insert(gr.clone(), list);
            }
            None => {
                self.members.remove_if(gr, |_, m| m.is_empty());
                self.by_target.remove(gr);
            }
        }
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
            self.rebuild(gr);
        }
    }

    /// Removes the entry `key`.
    pub fn delete(&self, key: &PolicyKey) {
        if let Some((_, (targets, _))) = self.items.remove(key) {
            for gr in &targets {
                if let Some(mut m) = self.members.get_mut(gr) {
                    m.remove(key);
                }
                self.rebuild(gr);
            }
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
        for (gr, m) in &members {
            let list: Arc<[Arc<T>]> = m.values().cloned().collect();
            self.by_target.insert(gr.clone(), list);
        }
        self.by_target.retain(|gr, _| members.contains_key(gr));
        self.members.retain(|gr, _| members.contains_key(gr));
        for (gr, m) in members {
            self.members.insert(gr, m);
        }
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

    /// The entries protecting `gr`: O(1), no allocation.
    pub fn find(&self, gr: &GroupResource) -> Option<Arc<[Arc<T>]>> {
        self.by_target.get(gr).map(|e| e.value().clone())
    }

    /// Whether anything protects `gr`.
    pub fn protects(&self, gr: &GroupResource) -> bool {
        self.by_target.contains_key(gr)
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
        let mut v: Vec<GroupResource> = self.by_target.iter().map(|e| e.key().clone()).collect();
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

/// Why a policy object cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// A field path does not parse.
    #[error("{field}: {source}")]
    FieldPath {
        /// Where.
        field: String,
        /// Why.
        source: FieldPathError,
    },
    /// A label selector is invalid.
    #[error("{field}: {source}")]
    Selector {
        /// Where.
        field: String,
        /// Why.
        source: selector::SelectorError,
    },
}

/// One dependency of a DependencyRule, ready for admission.
#[derive(Debug, Clone)]
pub struct CompiledDependency {
    /// The rule it comes from.
    pub rule: PolicyKey,
    /// The rule's enforcement.
    pub enforcement: Enforcement,
    /// Dependent (referencing) resource: group.
    pub dependent_group: String,
    /// Dependent resource: version.
    pub dependent_version: String,
    /// Dependent resource: plural.
    pub dependent_resource: String,
    /// Dependent kind.
    pub dependent_kind: String,
    /// Dependent APIExport (kcp).
    pub dependent_export: Option<String>,
    /// Protected (referenced) group/resource.
    pub target: GroupResource,
    /// Where the reference's name is.
    pub path: FieldPath,
    /// Where the reference's namespace is (cross-namespace references).
    pub namespace_path: Option<FieldPath>,
    /// kcp: the APIExport serving the protected resource (`apiExportRef`).
    pub export: Option<DependencyExport>,
}

/// The APIExport a dependency names (kcp), as the rule's status resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyExport {
    /// `apiExportRef.name`.
    pub name: String,
    /// The logical cluster `apiExportRef.path` resolved to
    /// (`status.workspaces[].logicalCluster`); `None` until the controller says.
    pub cluster: Option<String>,
    /// Whether another APIExport of that workspace may export the protected resource
    /// too (`status.workspaces[].sharedResources` lists it, or the status does not say):
    /// then kcp sends this export's reviews for that export's consumers as well, and
    /// the consumer's binding decides which applies.
    pub shared: bool,
}

impl CompiledDependency {
    /// Whether this dependency governs a review sent for `via` (`None`: a review
    /// through plain `/validate`, which every dependency governs). A review sent for
    /// an export is governed only by dependencies naming that export in that logical
    /// cluster; one whose path is not resolved in the rule's status yet governs every
    /// export of that name (refusing too much for a moment, never too little).
    pub fn serves(&self, via: Option<&ExportRoute>) -> bool {
        let Some(via) = via else { return true };
        self.export.as_ref().is_some_and(|e| {
            e.name == via.name && e.cluster.as_deref().is_none_or(|c| c == via.cluster)
        })
    }

    /// The dependent group/resource.
    pub fn dependent_gr(&self) -> GroupResource {
        GroupResource::new(&self.dependent_group, &self.dependent_resource)
    }
}

/// Compiles a DependencyRule into its dependencies.
pub fn compile_dependency_rule(
    cluster: &str,
    rule: &DependencyRule,
) -> Result<Vec<CompiledDependency>, CompileError> {
    let key = PolicyKey::new(cluster, rule.metadata.name.as_deref().unwrap_or_default());
    let d = &rule.spec.dependent;
    let resolved = rule
        .status
        .as_ref()
        .map(|s| s.workspaces.as_slice())
        .unwrap_or_default();
    rule.spec
        .dependencies
        .iter()
        .enumerate()
        .map(|(i, dep)| {
            let path = FieldPath::parse(&dep.field_ref.path).map_err(|source| {
                CompileError::FieldPath {
                    field: format!("spec.dependencies[{i}].fieldRef.path"),
                    source,
                }
            })?;
            let namespace_path = dep
                .namespace_field_ref
                .as_ref()
                .map(|r| FieldPath::parse(&r.path))
                .transpose()
                .map_err(|source| CompileError::FieldPath {
                    field: format!("spec.dependencies[{i}].namespaceFieldRef.path"),
                    source,
                })?;
            Ok(CompiledDependency {
                rule: key.clone(),
                enforcement: rule.spec.enforcement,
                dependent_group: d.group.clone(),
                dependent_version: d.version.clone(),
                dependent_resource: d.resource.clone(),
                dependent_kind: d.kind.clone(),
                dependent_export: d.api_export_name.clone(),
                target: GroupResource::new(&dep.group, &dep.resource),
                path,
                namespace_path,
                export: dep.api_export_ref.as_ref().map(|r| {
                    let entry = resolved
                        .iter()
                        .find(|w| w.path == r.path && w.name == r.name);
                    let target = GroupResource::new(&dep.group, &dep.resource).to_string();
                    DependencyExport {
                        name: r.name.clone(),
                        cluster: entry
                            .and_then(|w| w.logical_cluster.clone())
                            .filter(|c| !c.is_empty()),
                        shared: entry
                            .and_then(|w| w.shared_resources.as_ref())
                            .is_none_or(|shared| shared.contains(&target)),
                    }
                }),
            })
        })
        .collect()
}

/// A ResourceProtection, ready for admission.
#[derive(Debug, Clone)]
pub struct CompiledProtection {
    /// The policy.
    pub key: PolicyKey,
    /// Its enforcement.
    pub enforcement: Enforcement,
    /// Strict mode.
    pub strict: bool,
    /// Its selectors.
    pub selectors: Vec<ResourceSelector>,
    /// `mode: Cascading`: protects only while live contents remain.
    pub cascading: bool,
}

impl CompiledProtection {
    /// The selectors that select an object of `gr` named `name` in `namespace` with `labels`.
    pub fn selecting<'a>(
        &'a self,
        gr: &'a GroupResource,
        namespace: Option<&'a str>,
        name: &'a str,
        labels: Option<&'a serde_json::Map<String, serde_json::Value>>,
    ) -> impl Iterator<Item = &'a ResourceSelector> + 'a {
        self.selectors.iter().filter(move |s| {
            s.selects_resource(gr)
                && s.namespace_matches(namespace)
                && s.name_matches(name)
                && s.label_selector
                    .as_ref()
                    .is_none_or(|sel| selector::matches(sel, labels))
        })
    }
}

/// The ResourceProtections of one resource, split by the namespace they select, so a
/// check visits only those that could select an object in a given namespace (a
/// registry with a thousand namespace-scoped policies for ConfigMaps answers a DELETE
/// in one namespace from a handful). Built from one `find` list and kept for as long
/// as that list is current.
#[derive(Debug)]
pub struct ProtectionPartition {
    list: Arc<[Arc<CompiledProtection>]>,
    /// Indices (into `list`, ascending) of the policies selecting every namespace.
    any: Vec<u32>,
    /// Indices (ascending) of the policies selecting exactly this namespace.
    by_namespace: HashMap<String, Vec<u32>>,
}

impl ProtectionPartition {
    /// Splits `list` (the policies protecting `gr`) by namespace.
    pub fn new(gr: &GroupResource, list: Arc<[Arc<CompiledProtection>]>) -> Self {
        let range = 0..list.len();
        Self::of_range(gr, list, range)
    }

    /// Splits the policies of logical cluster `cluster` in `list` (the policies
    /// protecting `gr`, of every cluster) by namespace: a partition per (cluster,
    /// group/resource), so a review in one of a thousand workspaces visits only its
    /// own workspace's policies.
    pub fn of_cluster(
        gr: &GroupResource,
        list: Arc<[Arc<CompiledProtection>]>,
        cluster: &str,
    ) -> Self {
        let range = cluster_range(&list, cluster);
        Self::of_range(gr, list, range)
    }

    fn of_range(
        gr: &GroupResource,
        list: Arc<[Arc<CompiledProtection>]>,
        range: std::ops::Range<usize>,
    ) -> Self {
        let mut any = Vec::new();
        let mut by_namespace: HashMap<String, Vec<u32>> = HashMap::new();
        let offset = range.start;
        for (i, p) in list.get(range).unwrap_or_default().iter().enumerate() {
            let i = u32::try_from(i + offset).unwrap_or(u32::MAX);
            let mut all = false;
            let mut named: Vec<&str> = Vec::new();
            for s in p.selectors.iter().filter(|s| s.selects_resource(gr)) {
                match &s.namespace {
                    None => all = true,
                    Some(ns) => named.push(ns),
                }
            }
            if all {
                any.push(i);
                continue;
            }
            named.sort_unstable();
            named.dedup();
            for ns in named {
                by_namespace.entry(ns.to_string()).or_default().push(i);
            }
        }
        Self {
            list,
            any,
            by_namespace,
        }
    }

    /// Whether this partition was built from `list`.
    pub fn is_of(&self, list: &Arc<[Arc<CompiledProtection>]>) -> bool {
        Arc::ptr_eq(&self.list, list)
    }

    /// The policies that could select an object in `namespace` (`None`: cluster-scoped),
    /// in the registry's order.
    pub fn candidates(&self, namespace: Option<&str>) -> Vec<Arc<CompiledProtection>> {
        let named: &[u32] = namespace
            .and_then(|ns| self.by_namespace.get(ns))
            .map_or(&[], Vec::as_slice);
        let (mut a, mut b) = (self.any.iter().peekable(), named.iter().peekable());
        let mut out = Vec::with_capacity(self.any.len() + named.len());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x <= y => a.next(),
                (Some(_), Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            if let Some(p) = next.and_then(|&i| self.list.get(i as usize)) {
                out.push(p.clone());
            }
        }
        out
    }
}

/// The policies of `exact`, then those of `wild` not among them: `exact` itself
/// when there is no wildcard (no allocation).
fn with_wildcards(
    exact: Option<Arc<[Arc<CompiledProtection>]>>,
    wild: Vec<Arc<CompiledProtection>>,
) -> Option<Arc<[Arc<CompiledProtection>]>> {
    if wild.is_empty() {
        return exact;
    }
    let mut out: Vec<Arc<CompiledProtection>> =
        exact.iter().flat_map(|l| l.iter().cloned()).collect();
    for p in wild {
        if !out.iter().any(|q| q.key == p.key) {
            out.push(p);
        }
    }
    Some(out.into())
}

/// The range of `list` (sorted by key, as every [`TargetIndex`] list is) holding the
/// policies of logical cluster `cluster`.
pub fn cluster_range(list: &[Arc<CompiledProtection>], cluster: &str) -> std::ops::Range<usize> {
    let start = list.partition_point(|p| &*p.key.cluster < cluster);
    let len = list
        .get(start..)
        .unwrap_or_default()
        .partition_point(|p| &*p.key.cluster == cluster);
    start..start + len
}

/// Compiles a ResourceProtection.
pub fn compile_protection(
    cluster: &str,
    rp: &ResourceProtection,
) -> Result<(Vec<GroupResource>, CompiledProtection), CompileError> {
    for (i, s) in rp.spec.resources.iter().enumerate() {
        if let Some(sel) = &s.label_selector {
            selector::validate(sel).map_err(|source| CompileError::Selector {
                field: format!("spec.resources[{i}].labelSelector"),
                source,
            })?;
        }
    }
    let mut targets: Vec<GroupResource> = rp
        .spec
        .resources
        .iter()
        .map(|s| GroupResource::new(&s.group, &s.resource))
        .collect();
    targets.sort();
    targets.dedup();
    Ok((
        targets,
        CompiledProtection {
            key: PolicyKey::new(cluster, rp.metadata.name.as_deref().unwrap_or_default()),
            enforcement: rp.spec.enforcement,
            strict: rp.spec.strict,
            selectors: rp.spec.resources.clone(),
            cascading: rp.spec.mode == crate::api::resource_protection::ProtectionMode::Cascading,
        },
    ))
}

/// One criterion of a CriticalService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompiledCriterion {
    /// Some object of `resource` still carries `finalizer`.
    Finalizer {
        /// The resource whose objects may carry it.
        resource: GroupResource,
        /// The finalizer.
        finalizer: String,
    },
    /// That object still exists.
    SpecificResource {
        /// Its resource (plural, or a kind as the seed's example writes it).
        resource: GroupResource,
        /// Its namespace, if namespaced.
        namespace: Option<String>,
        /// Its name.
        name: String,
    },
}

/// A CriticalService, ready for admission.
#[derive(Debug, Clone)]
pub struct CompiledCritical {
    /// The policy.
    pub key: PolicyKey,
    /// Its enforcement.
    pub enforcement: Enforcement,
    /// Provider resource.
    pub provider: GroupResource,
    /// Provider namespace.
    pub provider_namespace: String,
    /// Provider name.
    pub provider_name: String,
    /// Criteria; the provider is protected while any holds.
    pub criteria: Vec<CompiledCriterion>,
}

/// The group/resource of the CriticalService kind itself.
pub fn critical_services_gr() -> GroupResource {
    GroupResource::new(crate::names::API_GROUP, "criticalservices")
}

/// The core group's namespaces.
pub fn namespaces_gr() -> GroupResource {
    GroupResource::new("", "namespaces")
}

/// Compiles a CriticalService; its targets are the provider's resource, namespaces
/// and criticalservices.holdfast.dev itself.
pub fn compile_critical(
    cluster: &str,
    cs: &CriticalService,
) -> (Vec<GroupResource>, CompiledCritical) {
    let p = &cs.spec.provider;
    let criteria = cs
        .spec
        .criteria
        .iter()
        .filter_map(|c| match c.type_ {
            CriterionType::Finalizer => {
                c.finalizer.as_ref().map(|f| CompiledCriterion::Finalizer {
                    resource: GroupResource::new(&f.group, &f.resource),
                    finalizer: f.finalizer_name.clone(),
                })
            }
            CriterionType::SpecificResource => {
                c.specific_resource
                    .as_ref()
                    .map(|r| CompiledCriterion::SpecificResource {
                        resource: GroupResource::new(&r.group, &r.resource),
                        namespace: r.namespace.clone().filter(|n| !n.is_empty()),
                        name: r.name.clone(),
                    })
            }
        })
        .collect();
    let provider = GroupResource::new(&p.group, &p.resource);
    let mut targets = vec![provider.clone(), namespaces_gr(), critical_services_gr()];
    targets.sort();
    targets.dedup();
    (
        targets,
        CompiledCritical {
            key: PolicyKey::new(cluster, cs.metadata.name.as_deref().unwrap_or_default()),
            enforcement: cs.spec.enforcement,
            provider,
            provider_namespace: p.namespace.clone(),
            provider_name: p.name.clone(),
            criteria,
        },
    )
}

/// An AnchorRule, ready for admission.
#[derive(Debug, Clone)]
pub struct CompiledAnchor {
    /// The policy.
    pub key: PolicyKey,
    /// Its enforcement.
    pub enforcement: Enforcement,
    /// Anchor resource.
    pub anchor: GroupResource,
    /// Anchor version.
    pub anchor_version: String,
    /// Label naming the anchor.
    pub name_label: String,
    /// Label naming the anchor's namespace (namespaced anchors).
    pub namespace_label: Option<String>,
    /// Toggle path on the anchor (None: always on while the anchor lives).
    pub toggle: Option<FieldPath>,
    /// Toggle default when the field is absent.
    pub toggle_default: bool,
    /// Protected resources and whether they inherit anchor labels from their namespace.
    pub protects: Vec<(GroupResource, bool)>,
    /// Where the anchors live (None: the protected object's own cluster).
    pub source: Option<AnchorSourceRef>,
}

/// A kubeconfig Secret naming the cluster anchors are read from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AnchorSourceRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Key of the Secret's data holding the kubeconfig.
    pub key: String,
}

impl std::fmt::Display for AnchorSourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret {}/{}", self.namespace, self.name)?;
        if self.key != "kubeconfig" {
            write!(f, " (key {})", self.key)?;
        }
        Ok(())
    }
}

/// Compiles an AnchorRule.
pub fn compile_anchor(
    cluster: &str,
    ar: &AnchorRule,
) -> Result<(Vec<GroupResource>, CompiledAnchor), CompileError> {
    let toggle = ar
        .spec
        .toggle
        .as_ref()
        .map(|t| FieldPath::parse(&t.field_path))
        .transpose()
        .map_err(|source| CompileError::FieldPath {
            field: "spec.toggle.fieldPath".to_string(),
            source,
        })?;
    let protects: Vec<(GroupResource, bool)> = ar
        .spec
        .protects
        .iter()
        .map(|p| {
            (
                GroupResource::new(&p.group, &p.resource),
                p.inherit_from_namespace,
            )
        })
        .collect();
    let mut targets: Vec<GroupResource> = protects.iter().map(|(g, _)| g.clone()).collect();
    targets.sort();
    targets.dedup();
    Ok((
        targets,
        CompiledAnchor {
            key: PolicyKey::new(cluster, ar.metadata.name.as_deref().unwrap_or_default()),
            enforcement: ar.spec.enforcement,
            anchor: GroupResource::new(&ar.spec.anchor.group, &ar.spec.anchor.resource),
            anchor_version: ar.spec.anchor.version.clone(),
            name_label: ar.spec.anchor_labels.name.clone(),
            namespace_label: ar.spec.anchor_labels.namespace.clone(),
            toggle,
            toggle_default: ar.spec.toggle.as_ref().is_none_or(|t| t.default),
            protects,
            source: ar.spec.anchor_source.as_ref().map(|s| AnchorSourceRef {
                namespace: s.kubeconfig_secret_ref.namespace.clone(),
                name: s.kubeconfig_secret_ref.name.clone(),
                key: s.kubeconfig_secret_ref.key.clone(),
            }),
        },
    ))
}

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
mod tests {
    use super::*;

    fn gr(r: &str) -> GroupResource {
        GroupResource::new("g", r)
    }

    #[test]
    fn apply_delete_and_reverse_index() {
        let idx: TargetIndex<&'static str> = TargetIndex::default();
        idx.apply(
            PolicyKey::new("c", "a"),
            vec![gr("vpcs"), gr("subnets")],
            Arc::new("a"),
        );
        idx.apply(PolicyKey::new("c", "b"), vec![gr("vpcs")], Arc::new("b"));
        assert_eq!(idx.find(&gr("vpcs")).map(|l| l.len()), Some(2));
        assert_eq!(idx.find(&gr("subnets")).map(|l| l.len()), Some(1));
        // In-place edit moves a rule's targets.
        idx.apply(PolicyKey::new("c", "a"), vec![gr("disks")], Arc::new("a2"));
        assert!(idx.find(&gr("subnets")).is_none());
        assert_eq!(idx.find(&gr("vpcs")).map(|l| l.len()), Some(1));
        assert_eq!(idx.find(&gr("disks")).map(|l| *l[0]), Some("a2"));
        idx.delete(&PolicyKey::new("c", "b"));
        assert!(idx.find(&gr("vpcs")).is_none());
        assert_eq!(idx.len(), 1);
        assert_eq!(idx.targets(), vec![gr("disks")]);
        assert!(idx.any(|v| *v == "a2"));
        assert!(!idx.any(|v| *v == "b"));
        assert!(!idx.is_loaded());
        idx.reset(vec![(
            PolicyKey::new("", "x"),
            vec![gr("vpcs")],
            Arc::new("x"),
        )]);
        assert!(idx.is_loaded());
        assert!(idx.find(&gr("disks")).is_none());
        assert_eq!(idx.find(&gr("vpcs")).map(|l| *l[0]), Some("x"));
    }

    /// A rule over VPCs of export `net-a` at `root:net` (and subnets of `net-b`),
    /// with `status` as its status.
    fn kcp_rule(status: serde_json::Value) -> DependencyRule {
        let dep = |resource: &str, export: &str| {
            serde_json::json!({
                "group": "network.test.io", "version": "v1", "resource": resource,
                "fieldRef": {"path": ".spec.ref"},
                "apiExportRef": {"path": "root:net", "name": export},
            })
        };
        serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "DependencyRule",
            "metadata": {"name": "vm"},
            "spec": {
                "dependent": {"group": "compute.test.io", "version": "v1",
                              "resource": "virtualmachines", "kind": "VirtualMachine"},
                "dependencies": [dep("vpcs", "net-a"), dep("subnets", "net-b")],
            },
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn route(cluster: &str, name: &str) -> ExportRoute {
        ExportRoute {
            cluster: cluster.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_dependency_serves_reviews_of_its_resolved_export_only() {
        let rule = kcp_rule(serde_json::json!({"workspaces": [
            {"path": "root:net", "name": "net-a", "logicalCluster": "lc1", "webhookInstalled": true,
             "sharedResources": ["subnets.network.test.io"]},
            {"path": "root:net", "name": "net-b", "webhookInstalled": false},
        ]}));
        let deps = compile_dependency_rule("c", &rule).unwrap_or_else(|e| panic!("{e}"));
        let exports: Vec<_> = deps.iter().map(|d| d.export.clone()).collect();
        assert_eq!(
            exports,
            vec![
                // net-a shares subnets, not vpcs, with another export: its reviews
                // of VPCs are its own consumers'.
                Some(DependencyExport {
                    name: "net-a".into(),
                    cluster: Some("lc1".into()),
                    shared: false,
                }),
                // Unknown (no status yet): maybe shared (the binding decides).
                Some(DependencyExport {
                    name: "net-b".into(),
                    cluster: None,
                    shared: true,
                }),
            ]
        );
        let (vpcs, subnets) = (&deps[0], &deps[1]);
        // Plain /validate: every dependency, as before.
        assert!(vpcs.serves(None) && subnets.serves(None));
        assert!(vpcs.serves(Some(&route("lc1", "net-a"))));
        // Another export of the same workspace, or the same name elsewhere: not this one.
        assert!(!vpcs.serves(Some(&route("lc1", "net-b"))));
        assert!(!vpcs.serves(Some(&route("lc2", "net-a"))));
        // Not resolved in the status yet: every export of that name (fail closed).
        assert!(subnets.serves(Some(&route("lc1", "net-b"))));
        assert!(subnets.serves(Some(&route("lc9", "net-b"))));
        assert!(!subnets.serves(Some(&route("lc1", "net-a"))));
    }

    #[test]
    fn a_dependency_without_status_or_export_ref() {
        let deps =
            compile_dependency_rule("c", &kcp_rule(serde_json::json!({}))).unwrap_or_default();
        assert_eq!(deps.len(), 2);
        assert!(
            deps.iter()
                .all(|d| d.export.as_ref().is_some_and(|e| e.cluster.is_none()))
        );
        // Without apiExportRef (Kubernetes), it serves plain /validate only.
        let mut plain = deps[0].clone();
        plain.export = None;
        assert!(plain.serves(None));
        assert!(!plain.serves(Some(&route("lc1", "net-a"))));
    }

    #[test]
    fn same_name_in_two_clusters_is_two_rules() {
        let idx: TargetIndex<u8> = TargetIndex::default();
        idx.apply(PolicyKey::new("c1", "r"), vec![gr("vpcs")], Arc::new(1));
        idx.apply(PolicyKey::new("c2", "r"), vec![gr("vpcs")], Arc::new(2));
        assert_eq!(idx.find(&gr("vpcs")).map(|l| l.len()), Some(2));
        idx.delete(&PolicyKey::new("c1", "r"));
        assert_eq!(idx.find(&gr("vpcs")).map(|l| *l[0]), Some(2));
    }

    /// A ResourceProtection `name` of logical cluster `cluster` selecting `resource`
    /// (core group, `"*"` for every core type) in `namespace`.
    fn rp_in(
        cluster: &str,
        name: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> ResourceProtection {
        let mut sel = serde_json::json!({"version": "v1", "resource": resource});
        if let Some(ns) = namespace {
            sel["namespace"] = serde_json::json!(ns);
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
            "metadata": {"name": name, "annotations": {"kcp.io/cluster": cluster}},
            "spec": {"resources": [sel]},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn keys(list: Option<Arc<[Arc<CompiledProtection>]>>) -> Vec<String> {
        list.iter()
            .flat_map(|l| l.iter())
            .map(|p| p.key.to_string())
            .collect()
    }

    #[test]
    fn a_protection_answers_for_its_own_workspace_only() {
        let reg = Registry::default();
        let cms = GroupResource::new("", "configmaps");
        for (cluster, name, resource, ns) in [
            ("lc-b", "b-cms", "configmaps", None),
            ("lc-a", "a-cms", "configmaps", None),
            ("lc-a", "a-shop", "configmaps", Some("shop")),
            ("lc-c", "c-core", "*", None),
            ("lc-a", "a-secrets", "secrets", None),
        ] {
            reg.apply(cluster, &rp_in(cluster, name, resource, ns))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // Exact and wildcard lists, each of its own cluster only.
        assert_eq!(
            keys(reg.protections_in("lc-a", &cms)),
            ["lc-a|a-cms", "lc-a|a-shop"]
        );
        assert_eq!(keys(reg.protections_in("lc-b", &cms)), ["lc-b|b-cms"]);
        assert_eq!(keys(reg.protections_in("lc-c", &cms)), ["lc-c|c-core"]);
        assert_eq!(keys(reg.protections_in("lc-d", &cms)), Vec::<String>::new());
        assert!(reg.protections_in("lc-d", &cms).is_none());
        assert_eq!(keys(reg.protections_in("", &cms)), Vec::<String>::new());
        assert!(reg.wildcard_protections_in("lc-a", &cms).is_empty());
        assert_eq!(reg.wildcard_protections(&cms).len(), 1);
        // Every cluster together (store management): all of them.
        assert_eq!(
            keys(reg.protections_for(&cms)),
            ["lc-a|a-cms", "lc-a|a-shop", "lc-b|b-cms", "lc-c|c-core"]
        );
        // The partition of one cluster holds that cluster's policies only.
        let list = reg
            .protections
            .find(&cms)
            .unwrap_or_else(|| panic!("listed"));
        let part = ProtectionPartition::of_cluster(&cms, list.clone(), "lc-a");
        assert!(part.is_of(&list));
        let names = |part: &ProtectionPartition, ns: Option<&str>| -> Vec<String> {
            part.candidates(ns)
                .iter()
                .map(|p| p.key.to_string())
                .collect()
        };
        assert_eq!(names(&part, Some("shop")), ["lc-a|a-cms", "lc-a|a-shop"]);
        assert_eq!(names(&part, Some("other")), ["lc-a|a-cms"]);
        let part = ProtectionPartition::of_cluster(&cms, list.clone(), "lc-b");
        assert_eq!(names(&part, Some("shop")), ["lc-b|b-cms"]);
        let part = ProtectionPartition::of_cluster(&cms, list, "lc-z");
        assert_eq!(names(&part, Some("shop")), Vec::<String>::new());
    }

    #[test]
    fn on_kubernetes_the_one_cluster_is_the_whole_list() {
        let reg = Registry::default();
        let cms = GroupResource::new("", "configmaps");
        for name in ["x", "y"] {
            let mut p = rp_in("", name, "configmaps", None);
            p.metadata.annotations = None;
            reg.apply("", &p).unwrap_or_else(|e| panic!("{e}"));
        }
        let (scoped, all) = (reg.protections_in("", &cms), reg.protections.find(&cms));
        // The index's own list, not a copy.
        assert!(matches!((&scoped, &all), (Some(a), Some(b)) if Arc::ptr_eq(a, b)));
        assert_eq!(keys(scoped), ["x", "y"]);
    }

    #[test]
    fn protections_are_partitioned_by_namespace_in_registry_order() {
        let gr = GroupResource::new("", "configmaps");
        let rp = |name: &str, sels: &[(&str, Option<&str>)]| {
            Arc::new(CompiledProtection {
                key: PolicyKey::new("", name),
                enforcement: Enforcement::Enforce,
                strict: false,
                selectors: sels
                    .iter()
                    .map(|(res, ns)| ResourceSelector {
                        group: String::new(),
                        version: "v1".into(),
                        resource: (*res).into(),
                        namespace: ns.map(str::to_string),
                        names: None,
                        label_selector: None,
                        exclude: None,
                    })
                    .collect(),
                cascading: false,
            })
        };
        let list: Arc<[Arc<CompiledProtection>]> = vec![
            rp("a-team-1", &[("configmaps", Some("team-1"))]),
            rp("b-all", &[("configmaps", None)]),
            rp(
                "c-team-2",
                &[("configmaps", Some("team-2")), ("secrets", None)],
            ),
            rp(
                "d-both",
                &[
                    ("configmaps", Some("team-1")),
                    ("configmaps", Some("team-2")),
                ],
            ),
            rp("e-secrets-only", &[("secrets", None)]),
        ]
        .into();
        let part = ProtectionPartition::new(&gr, list.clone());
        assert!(part.is_of(&list));
        let names = |ns: Option<&str>| -> Vec<String> {
            part.candidates(ns)
                .iter()
                .map(|p| p.key.name.to_string())
                .collect()
        };
        assert_eq!(names(Some("team-1")), ["a-team-1", "b-all", "d-both"]);
        assert_eq!(names(Some("team-2")), ["b-all", "c-team-2", "d-both"]);
        assert_eq!(names(Some("other")), ["b-all"]);
        assert_eq!(names(None), ["b-all"]);
        // The same answer as visiting every policy with `selecting`, for each namespace.
        for ns in [Some("team-1"), Some("team-2"), Some("other"), None] {
            let all: Vec<String> = list
                .iter()
                .filter(|p| p.selecting(&gr, ns, "x", None).next().is_some())
                .map(|p| p.key.name.to_string())
                .collect();
            assert_eq!(names(ns), all, "{ns:?}");
        }
    }
}
