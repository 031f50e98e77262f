//! Routes: which DELETEs (and label updates) each policy object needs to reach the
//! webhook, as rules, namespace and object selectors, and CEL match conditions;
//! merged into at most [`MAX_POLICY_WEBHOOKS`] webhooks of the configuration.

use super::*;

/// The namespaces kube-apiserver and its controllers live in. Selections that name
/// no namespace do not route them (see [`NamespaceScope::not_system`]).
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];
/// Label the API server sets on every namespace to its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// Label the controller keeps (value `"true"`) on every namespace holding an
/// object some DELETE webhook of the configuration routes; namespace DELETEs are
/// routed to [`CONTAINMENT_WEBHOOK`] only for namespaces carrying it.
pub const CONTAINS_PROTECTED_LABEL: &str = "holdfast.dev/contains-protected";

/// The webhook judging an UPDATE that removes or changes
/// [`CONTAINS_PROTECTED_LABEL`] on a namespace (Kubernetes and Karmada).
pub const CONTAINMENT_MARKER_WEBHOOK: &str = "containment-marker.holdfast.dev";
/// Name of the webhook that receives namespace DELETEs (containment).
pub const CONTAINMENT_WEBHOOK: &str = "containment.holdfast.dev";
/// Prefix of the webhooks receiving the DELETEs policy objects govern:
/// `policies-<i>.holdfast.dev`.
pub const POLICIES_WEBHOOK_PREFIX: &str = "policies-";
/// At most this many `policies-<i>` webhooks: beyond it routes are widened (see
/// [`merge_routes`]).
pub const MAX_POLICY_WEBHOOKS: usize = 16;
/// A route lists at most this many object names in its matchCondition; a
/// selection naming more routes every name.
pub const MAX_ROUTED_NAMES: usize = 64;

/// Whether `name` is the name of one of the `policies-<i>` webhooks.
pub fn is_policies_webhook(name: &str) -> bool {
    name.strip_prefix(POLICIES_WEBHOOK_PREFIX)
        .and_then(|rest| rest.strip_suffix(".holdfast.dev"))
        .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// Which namespaces a route covers. For a namespaced object it is matched
/// against the object's namespace, for a Namespace against the namespace itself
/// (as the API server evaluates a namespaceSelector); cluster-scoped objects are
/// always covered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NamespaceScope {
    /// Every namespace (no namespaceSelector).
    Any,
    /// These namespaces (`kubernetes.io/metadata.name In`).
    Only(BTreeSet<String>),
    /// Every namespace but these (`kubernetes.io/metadata.name NotIn`).
    AllBut(BTreeSet<String>),
    /// Namespaces carrying this label key (`Exists`).
    Labelled(String),
}

impl NamespaceScope {
    /// Every namespace except [`SYSTEM_NAMESPACES`]: what a selection that names
    /// no namespace covers.
    pub fn not_system() -> Self {
        NamespaceScope::AllBut(SYSTEM_NAMESPACES.iter().map(|s| s.to_string()).collect())
    }

    /// The union when one scope expresses it exactly, `None` otherwise.
    fn union_exact(&self, other: &Self) -> Option<Self> {
        use NamespaceScope::*;
        Some(
            match (self, other) {
                (Any, _) | (_, Any) => Any,
                (Only(a), Only(b)) => Only(a.union(b).cloned().collect()),
                (AllBut(a), AllBut(b)) => AllBut(a.intersection(b).cloned().collect()),
                (Only(a), AllBut(b)) | (AllBut(b), Only(a)) => {
                    AllBut(b.difference(a).cloned().collect())
                }
                (Labelled(a), Labelled(b)) if a == b => Labelled(a.clone()),
                _ => return None,
            }
            .normalized(),
        )
    }

    /// The union, widened to [`NamespaceScope::Any`] where no selector expresses it.
    fn union(&self, other: &Self) -> Self {
        self.union_exact(other).unwrap_or(NamespaceScope::Any)
    }

    fn normalized(self) -> Self {
        match self {
            NamespaceScope::AllBut(s) if s.is_empty() => NamespaceScope::Any,
            other => other,
        }
    }

    /// Whether a namespace named `ns` with `labels` is covered.
    pub fn matches(&self, ns: &str, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        match self {
            NamespaceScope::Any => true,
            NamespaceScope::Only(s) => s.contains(ns),
            NamespaceScope::AllBut(s) => !s.contains(ns),
            NamespaceScope::Labelled(k) => labels.is_some_and(|l| l.contains_key(k)),
        }
    }

    /// The namespaceSelector.
    pub fn selector(&self) -> LabelSelector {
        let req = |key: &str, operator: &str, values: Option<Vec<String>>| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.to_string(),
                operator: operator.to_string(),
                values,
            }]),
            match_labels: None,
        };
        match self {
            NamespaceScope::Any => LabelSelector::default(),
            NamespaceScope::Only(s) => req(
                NAMESPACE_NAME_LABEL,
                "In",
                Some(s.iter().cloned().collect()),
            ),
            NamespaceScope::AllBut(s) => req(
                NAMESPACE_NAME_LABEL,
                "NotIn",
                Some(s.iter().cloned().collect()),
            ),
            NamespaceScope::Labelled(k) => req(k, "Exists", None),
        }
    }
}

/// DELETEs some policy needs to see: of `resources`, in `namespaces`, of objects
/// whose labels match `labels` and whose name is one of `names`. Wider is always
/// safe (the webhook decides); narrower never happens.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// Group/resources.
    pub resources: BTreeSet<GroupResource>,
    /// Namespaces.
    pub namespaces: NamespaceScope,
    /// Object labels (objectSelector); `None`: any.
    pub labels: Option<LabelSelector>,
    /// Object names (a matchCondition); `None`: any.
    pub names: Option<BTreeSet<String>>,
    /// The policies asking for it (`Kind/name`).
    pub policies: BTreeSet<String>,
    /// Types left out of a wildcard resource (`*`), by a matchCondition: `(group,
    /// resource)`, resource `*` for a whole group. Empty for other routes.
    pub exclude: BTreeSet<GroupResource>,
}

impl Route {
    fn new(policy: String, gr: GroupResource, namespaces: NamespaceScope) -> Self {
        Route {
            resources: [gr].into(),
            namespaces,
            labels: None,
            names: None,
            policies: [policy].into(),
            exclude: BTreeSet::new(),
        }
    }

    fn with_names<'a>(mut self, names: impl IntoIterator<Item = &'a String>) -> Self {
        let names: BTreeSet<String> = names.into_iter().cloned().collect();
        if !names.is_empty() && names.len() <= MAX_ROUTED_NAMES {
            self.names = Some(names);
        }
        self
    }

    /// Whether a DELETE of an object of `gr` in namespace `ns` (`None`:
    /// cluster-scoped; for a Namespace its own name) named `name` with `labels`
    /// reaches this route; `ns_labels` are the labels of the namespace.
    pub fn matches(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        ns_labels: Option<&serde_json::Map<String, Value>>,
        name: &str,
        labels: Option<&serde_json::Map<String, Value>>,
    ) -> bool {
        self.covers(gr)
            && ns.is_none_or(|ns| self.namespaces.matches(ns, ns_labels))
            && self
                .labels
                .as_ref()
                .is_none_or(|sel| crate::selector::matches(sel, labels))
            && self.names.as_ref().is_none_or(|n| n.contains(name))
    }

    /// Whether DELETEs of `gr` are routed: it is listed, or a wildcard covers it
    /// (`*` of its group or of every group) and does not leave it out.
    pub fn covers(&self, gr: &GroupResource) -> bool {
        if self.resources.contains(gr) {
            return true;
        }
        let wild = self.resources.contains(&GroupResource::new(&gr.group, "*"))
            || self.resources.contains(&GroupResource::new("*", "*"));
        wild && gr.resource != "*"
            && !self
                .exclude
                .iter()
                .any(|x| x.group == gr.group && (x.resource == "*" || x.resource == gr.resource))
    }

    /// The matchConditions of the route: its names, and the types a wildcard
    /// leaves out.
    pub(super) fn conditions(&self) -> Option<Vec<MatchCondition>> {
        let out: Vec<MatchCondition> = self
            .condition()
            .into_iter()
            .chain(self.exclude_condition())
            .collect();
        (!out.is_empty()).then_some(out)
    }

    /// The matchCondition leaving out the types in `exclude`.
    pub(super) fn exclude_condition(&self) -> Option<MatchCondition> {
        if self.exclude.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .exclude
            .iter()
            .map(|gr| {
                let g = format!("request.resource.group == {}", cel_str(&gr.group));
                if gr.resource == "*" {
                    g
                } else {
                    format!(
                        "({g} && request.resource.resource == {})",
                        cel_str(&gr.resource)
                    )
                }
            })
            .collect();
        Some(MatchCondition {
            name: "not-excluded".to_string(),
            expression: format!("!({})", parts.join(" || ")),
        })
    }

    /// The matchCondition narrowing the route to its names. Namespace-controller
    /// DELETEs carry no request name, so the name is read from `oldObject`; a
    /// request without one is routed (fail closed).
    fn condition(&self) -> Option<MatchCondition> {
        let names = self.names.as_ref()?;
        let list = names
            .iter()
            .map(|n| cel_str(n))
            .collect::<Vec<_>>()
            .join(", ");
        Some(MatchCondition {
            name: "object-name".to_string(),
            expression: format!("oldObject == null || oldObject.metadata.name in [{list}]"),
        })
    }

    fn key_without_resources(&self) -> String {
        serde_json::json!([self.namespaces_key(), self.labels, self.names, self.exclude])
            .to_string()
    }

    fn namespaces_key(&self) -> String {
        format!("{:?}", self.namespaces)
    }
}

fn ns_or_any(ns: Option<&String>) -> NamespaceScope {
    match ns {
        Some(ns) => NamespaceScope::Only([ns.clone()].into()),
        None => NamespaceScope::not_system(),
    }
}

fn policy_key(kind: &str, name: Option<&String>) -> String {
    format!("{kind}/{}", name.map_or("", String::as_str))
}

/// The DELETE routes of a ResourceProtection: one per selector, narrowed by its
/// namespace, names and label selector.
pub fn resource_protection_routes(rp: &ResourceProtection) -> Vec<Route> {
    let policy = policy_key("ResourceProtection", rp.metadata.name.as_ref());
    rp.spec
        .resources
        .iter()
        .map(|sel| {
            let gr = GroupResource::new(&sel.group, &sel.resource);
            if sel.is_wildcard() {
                // Every resource of the group (or of every group): rule `*` (no
                // subresources), the types never selected by a wildcard and the
                // selector's exclusions left out by a matchCondition.
                let mut r = Route::new(policy.clone(), gr, ns_or_any(sel.namespace.as_ref()));
                r.exclude = NEVER_SELECTED_BY_WILDCARD
                    .iter()
                    .filter(|(g, _)| sel.group == "*" || *g == sel.group)
                    .map(|(g, r)| GroupResource::new(*g, *r))
                    .chain(
                        sel.exclude
                            .iter()
                            .flatten()
                            .filter(|x| sel.group == "*" || x.group == sel.group)
                            .map(|x| GroupResource::new(&x.group, &x.resource)),
                    )
                    .collect();
                return narrowed(r, sel);
            }
            let namespaces = if is_namespaces(&gr) {
                NamespaceScope::Any
            } else {
                ns_or_any(sel.namespace.as_ref())
            };
            narrowed(Route::new(policy.clone(), gr, namespaces), sel)
        })
        .collect()
}

/// `r` narrowed by the names and the label selector of `sel`.
fn narrowed(mut r: Route, sel: &crate::api::ResourceSelector) -> Route {
    if let Some(names) = &sel.names {
        r = r.with_names(names);
    }
    r.labels = sel
        .label_selector
        .clone()
        .filter(|s| *s != LabelSelector::default());
    r
}

fn is_namespaces(gr: &GroupResource) -> bool {
    gr.group.is_empty() && gr.resource == "namespaces"
}

/// The DELETE routes of an AnchorRule: objects carrying the anchor-name label
/// and, for `inheritFromNamespace` types, every object in a namespace carrying it.
pub fn anchor_rule_routes(ar: &AnchorRule) -> Vec<Route> {
    let policy = policy_key("AnchorRule", ar.metadata.name.as_ref());
    let key = &ar.spec.anchor_labels.name;
    let mut out = Vec::new();
    for p in &ar.spec.protects {
        let gr = GroupResource::new(&p.group, &p.resource);
        let mut own = Route::new(policy.clone(), gr.clone(), NamespaceScope::Any);
        own.labels = Some(exists(key));
        out.push(own);
        if p.inherit_from_namespace {
            out.push(Route::new(
                policy.clone(),
                gr,
                NamespaceScope::Labelled(key.clone()),
            ));
        }
    }
    out
}

/// The DELETE routes of a DependencyRule: its dependency types outside the
/// system namespaces (any object of them may be referenced).
pub fn dependency_rule_routes(dr: &DependencyRule) -> Vec<Route> {
    let policy = policy_key("DependencyRule", dr.metadata.name.as_ref());
    dr.spec
        .dependencies
        .iter()
        .map(|d| {
            Route::new(
                policy.clone(),
                GroupResource::new(&d.group, &d.resource),
                NamespaceScope::not_system(),
            )
        })
        .collect()
}

/// The DELETE routes of a CriticalService: its provider by namespace and name,
/// the provider's namespace, and the CriticalService itself.
pub fn critical_service_routes(cs: &CriticalService) -> Vec<Route> {
    let name = cs.metadata.name.clone().unwrap_or_default();
    let policy = policy_key("CriticalService", Some(&name));
    let p = &cs.spec.provider;
    vec![
        Route::new(
            policy.clone(),
            p.group_resource(),
            NamespaceScope::Only([p.namespace.clone()].into()),
        )
        .with_names([&p.name]),
        Route::new(
            policy.clone(),
            GroupResource::new("", "namespaces"),
            NamespaceScope::Any,
        )
        .with_names([&p.namespace]),
        Route::new(
            policy,
            GroupResource::new(crate::names::API_GROUP, "criticalservices"),
            NamespaceScope::Any,
        )
        .with_names([&name]),
    ]
}

/// One exact merging pass: routes equal in everything but one dimension become
/// one route when the union of that dimension is expressible exactly.
fn merge_exact(routes: Vec<Route>) -> Vec<Route> {
    fn group(
        routes: Vec<Route>,
        key: impl Fn(&Route) -> String,
        join: impl Fn(&mut Route, Route) -> bool,
    ) -> Vec<Route> {
        let mut out: Vec<Route> = Vec::new();
        let mut index: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        'next: for r in routes {
            let k = key(&r);
            let slots = index.entry(k).or_default();
            for &i in slots.iter() {
                let mut candidate = out[i].clone();
                if join(&mut candidate, r.clone()) {
                    out[i] = candidate;
                    continue 'next;
                }
            }
            slots.push(out.len());
            out.push(r);
        }
        out
    }
    let mut routes = routes;
    loop {
        let before = routes.len();
        // Same namespaces, labels and names: union of resources.
        routes = group(routes, Route::key_without_resources, |a, b| {
            a.resources.extend(b.resources);
            a.policies.extend(b.policies);
            true
        });
        // Same resources, labels and names: union of namespaces where exact.
        routes = group(
            routes,
            |r| serde_json::json!([r.resources, r.labels, r.names, r.exclude]).to_string(),
            |a, b| match a.namespaces.union_exact(&b.namespaces) {
                Some(ns) => {
                    a.namespaces = ns;
                    a.policies.extend(b.policies);
                    true
                }
                None => false,
            },
        );
        // Same resources, namespaces and labels: union of names.
        routes = group(
            routes,
            |r| {
                serde_json::json!([r.resources, r.namespaces_key(), r.labels, r.exclude])
                    .to_string()
            },
            |a, b| {
                a.names = match (a.names.take(), b.names) {
                    (Some(mut x), Some(y)) => {
                        x.extend(y);
                        Some(x).filter(|n| n.len() <= MAX_ROUTED_NAMES)
                    }
                    _ => None,
                };
                a.policies.extend(b.policies);
                true
            },
        );
        if routes.len() == before {
            break;
        }
    }
    routes
}

/// Merges routes into at most `max` (at least 1) webhook entries, in a stable
/// order. The rule: routes that differ in one dimension only are joined exactly
/// (resources always; namespaces when one selector expresses the union; names
/// always) until nothing changes. While more than `max` remain, routes are
/// widened, which only ever routes more: first every name condition is dropped,
/// then every object selector, and last everything becomes one route over the
/// union of resources and namespaces.
pub fn merge_routes(routes: Vec<Route>, max: usize) -> Vec<Route> {
    let max = max.max(1);
    let mut routes = merge_exact(routes);
    let widenings: [fn(&mut Route); 2] = [|r| r.names = None, |r| r.labels = None];
    for widen in widenings {
        if routes.len() > max {
            routes.iter_mut().for_each(widen);
            routes = merge_exact(routes);
        }
    }
    if routes.len() > max {
        let mut it = routes.into_iter();
        if let Some(mut first) = it.next() {
            for r in it {
                first.resources.extend(r.resources);
                first.namespaces = first.namespaces.union(&r.namespaces);
                first.policies.extend(r.policies);
            }
            first.labels = None;
            first.names = None;
            // Routing more is safe: nothing is left out any more.
            first.exclude = BTreeSet::new();
            routes = vec![first];
        } else {
            routes = Vec::new();
        }
    }
    routes.sort_by(|a, b| {
        (&a.resources, a.namespaces_key(), a.key_without_resources()).cmp(&(
            &b.resources,
            b.namespaces_key(),
            b.key_without_resources(),
        ))
    });
    routes
}
