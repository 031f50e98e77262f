//! Compiling policy objects for admission: each kind's compiled form and its
//! errors.

use super::*;

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
    let compiled: Result<Vec<CompiledDependency>, CompileError> = rule
        .spec
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
        .collect();
    // Exactly as long as the rule's dependencies: collected through a `Result`,
    // the list starts with room for four (about 1.3 KiB a rule of one dependency,
    // a fifth of the webhook's memory at 100,000 rules).
    compiled.map(|mut c| {
        c.shrink_to_fit();
        c
    })
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
pub(super) fn with_wildcards(
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
