//! Checking policy objects: the spec's own rules (`validate()`), label selectors,
//! and whether the resources they name are served (discovery).

use std::collections::{BTreeSet, HashMap};

use holdfast_shared::{
    api::{
        AnchorRule, CriticalService, DependencyRule, GroupResource, Policy, ResourceProtection,
        ResourceType, ValidationError, join_errors,
    },
    webhookconfig::{Scope, well_known_scope},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Reasons of the `Invalid` condition.
pub mod reasons {
    /// A field breaks the schema's rules.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A field path does not parse.
    pub const INVALID_FIELD_PATH: &str = "InvalidFieldPath";
    /// A label selector is malformed.
    pub const INVALID_SELECTOR: &str = "InvalidSelector";
    /// A named resource is not served by the API server.
    pub const UNKNOWN_RESOURCE: &str = "UnknownResource";
    /// A kcp workspace path cannot be resolved.
    pub const UNRESOLVED_WORKSPACE: &str = "UnresolvedWorkspace";
    /// kcp: a named APIExport does not exist.
    pub const API_EXPORT_NOT_FOUND: &str = "APIExportNotFound";
    /// kcp: a named APIExport does not export the named resource.
    pub const RESOURCE_NOT_EXPORTED: &str = "ResourceNotExported";
    /// kcp: holdfast may not read a named APIExport (`get apiexports` there).
    pub const API_EXPORT_FORBIDDEN: &str = "APIExportForbidden";
    /// kcp: reading a named APIExport failed otherwise (retried).
    pub const API_EXPORT_UNREADABLE: &str = "APIExportUnreadable";
    /// The policy is valid.
    pub const VALID: &str = "Valid";
}

/// Why a policy is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// Condition reason (one of [`reasons`]).
    pub reason: &'static str,
    /// Condition message.
    pub message: String,
}

/// The resources the API server serves: group/resource → versions and scope.
#[derive(Clone, Debug, Default)]
pub struct ApiIndex {
    map: HashMap<GroupResource, (BTreeSet<String>, bool)>,
    /// Namespaced resources that can be listed and watched, at their preferred
    /// version (Events left out: nothing protects them).
    watchable: HashMap<GroupResource, kube::api::ApiResource>,
    /// (group, lowercase kind) → resource plural, for specs naming a kind.
    kinds: HashMap<(String, String), String>,
    /// Whether discovery ran at least once (before that nothing is "unknown").
    pub loaded: bool,
    /// Groups served by an aggregated API (an APIService backed by a service) →
    /// the APIService's name.
    aggregated: HashMap<String, String>,
    /// Every resource at its preferred version, with whether it is namespaced.
    preferred: HashMap<GroupResource, (kube::api::ApiResource, bool)>,
}

impl ApiIndex {
    /// Runs discovery against the API server, leaving out the groups in `exclude`
    /// (aggregated APIs: an unavailable one answers 503, which the client retries
    /// for a long time, and no webhook sees their requests anyway).
    pub async fn discover(client: &kube::Client, exclude: &[String]) -> Result<Self, kube::Error> {
        let exclude: Vec<&str> = exclude.iter().map(String::as_str).collect();
        let discovery = kube::discovery::Discovery::new(client.clone())
            .exclude(&exclude)
            .run()
            .await?;
        let mut index = ApiIndex {
            loaded: true,
            ..Default::default()
        };
        for group in discovery.groups() {
            for version in group.versions() {
                for (ar, caps) in group.versioned_resources(version) {
                    let entry = index
                        .map
                        .entry(GroupResource::new(&ar.group, &ar.plural))
                        .or_insert_with(|| (BTreeSet::new(), false));
                    entry.0.insert(ar.version.clone());
                    entry.1 = caps.scope == kube::discovery::Scope::Namespaced;
                    index.kinds.insert(
                        (ar.group.clone(), ar.kind.to_lowercase()),
                        ar.plural.clone(),
                    );
                }
            }
            for (ar, caps) in group.recommended_resources() {
                index.preferred.insert(
                    GroupResource::new(&ar.group, &ar.plural),
                    (ar.clone(), caps.scope == kube::discovery::Scope::Namespaced),
                );
                if caps.scope == kube::discovery::Scope::Namespaced
                    && caps.supports_operation(kube::discovery::verbs::LIST)
                    && caps.supports_operation(kube::discovery::verbs::WATCH)
                    && !(ar.plural == "events"
                        && (ar.group.is_empty() || ar.group == "events.k8s.io"))
                {
                    index
                        .watchable
                        .insert(GroupResource::new(&ar.group, &ar.plural), ar);
                }
            }
        }
        Ok(index)
    }

    /// An index from a list of (group, version, resource, namespaced) (tests).
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str, &'a str, bool)>,
    ) -> Self {
        let mut index = ApiIndex {
            loaded: true,
            ..Default::default()
        };
        for (g, v, r, namespaced) in entries {
            let e = index
                .map
                .entry(GroupResource::new(g, r))
                .or_insert_with(|| (BTreeSet::new(), namespaced));
            e.0.insert(v.to_string());
        }
        index
    }

    /// An index of namespaced, watchable resources (group, version, kind, plural)
    /// (tests).
    pub fn with_watchable(entries: &[(&str, &str, &str, &str)]) -> Self {
        let mut index = Self::from_entries(entries.iter().map(|(g, v, _, r)| (*g, *v, *r, true)));
        for &(g, v, k, r) in entries {
            let gvk = kube::api::GroupVersionKind::gvk(g, v, k);
            index.watchable.insert(
                GroupResource::new(g, r),
                kube::api::ApiResource::from_gvk_with_plural(&gvk, r),
            );
            index
                .kinds
                .insert((g.to_string(), k.to_lowercase()), r.to_string());
        }
        index
    }

    /// Records the APIServices backed by a service (aggregated APIs): `(group,
    /// APIService name)`.
    pub fn set_aggregated(&mut self, services: impl IntoIterator<Item = (String, String)>) {
        self.aggregated = services.into_iter().collect();
    }

    /// Why DELETEs of `gr` never pass DELETE admission, if they do not: webhook
    /// configurations and admission policies are never sent to webhooks, an
    /// aggregated API's requests are proxied to its own server without the
    /// webhooks being called, and Events expire from storage without a DELETE.
    pub fn not_admission_controlled(&self, gr: &GroupResource) -> Option<String> {
        if holdfast_shared::unreviewed::never_reviewed(gr) {
            return Some(holdfast_shared::unreviewed::never_reviewed_message(gr));
        }
        if let Some(service) = self.aggregated.get(&gr.group) {
            return Some(format!(
                "DELETEs of {gr} never reach an admission webhook: group {} is served by \
                 APIService {service}, an aggregated API whose requests the API server \
                 proxies without calling webhooks",
                gr.group
            ));
        }
        if gr.resource == "events" && (gr.group.is_empty() || gr.group == "events.k8s.io") {
            return Some(format!(
                "{gr} expire from storage when their time to live runs out (the API \
                 server's --event-ttl, 1h by default) without a DELETE, so no webhook sees \
                 it; only explicit DELETEs are refused"
            ));
        }
        None
    }

    /// The namespaced resources that can be listed and watched.
    pub fn watchable(&self) -> impl Iterator<Item = (&GroupResource, &kube::api::ApiResource)> {
        self.watchable.iter()
    }

    /// `gr` at its preferred version, and whether it is namespaced.
    pub fn preferred_resource(
        &self,
        gr: &GroupResource,
    ) -> Option<&(kube::api::ApiResource, bool)> {
        self.preferred.get(gr)
    }

    /// `gr` if it is namespaced and can be listed and watched.
    pub fn watchable_resource(&self, gr: &GroupResource) -> Option<&kube::api::ApiResource> {
        self.watchable.get(gr)
    }

    /// `gr` with its resource as the REST plural: a spec may name a kind
    /// (`CoolResource`); unknown kinds are kept as written.
    pub fn plural(&self, gr: &GroupResource) -> GroupResource {
        if self.map.contains_key(gr) {
            return gr.clone();
        }
        match self
            .kinds
            .get(&(gr.group.clone(), gr.resource.to_lowercase()))
        {
            Some(plural) => GroupResource::new(&gr.group, plural),
            None => gr.clone(),
        }
    }

    /// Whether the API server serves `gr` (in any version).
    pub fn serves(&self, gr: &GroupResource) -> bool {
        self.map.contains_key(gr)
    }

    /// Number of resources known.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no resource is known.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The scope of a resource (discovery first, then well-known types).
    pub fn scope(&self, gr: &GroupResource) -> Scope {
        match self.map.get(gr) {
            Some((_, true)) => Scope::Namespaced,
            Some((_, false)) => Scope::Cluster,
            None => well_known_scope(gr),
        }
    }

    fn check_gr(&self, field: &str, gr: &GroupResource, version: Option<&str>) -> Option<String> {
        if !self.loaded || self.aggregated.contains_key(&gr.group) {
            // An aggregated API's resources may be unavailable to discovery; the
            // NotAdmissionControlled condition says what matters about them.
            return None;
        }
        match self.map.get(gr) {
            None => Some(format!(
                "{field}: the API server does not serve resource {gr} (is its CRD installed, or the group/resource misspelled?)"
            )),
            Some((versions, _)) => match version {
                Some(v) if !versions.contains(v) => Some(format!(
                    "{field}: resource {gr} is not served in version {v} (served: {})",
                    versions.iter().cloned().collect::<Vec<_>>().join(", ")
                )),
                _ => None,
            },
        }
    }

    fn check_type(&self, field: &str, t: &ResourceType) -> Option<String> {
        self.check_gr(field, &t.group_resource(), Some(&t.version))
    }
}

fn spec_invalid(errors: &[ValidationError]) -> Option<Invalid> {
    if errors.is_empty() {
        return None;
    }
    let reason = if errors.iter().all(|e| {
        e.field.contains("fieldRef")
            || e.field.contains("fieldPath")
            || e.field.contains("FieldRef")
    }) {
        reasons::INVALID_FIELD_PATH
    } else {
        reasons::INVALID_SPEC
    };
    Some(Invalid {
        reason,
        message: join_errors(errors),
    })
}

fn selector_problem(sel: &LabelSelector) -> Option<String> {
    for (k, v) in sel.match_labels.iter().flatten() {
        if let Err(e) = holdfast_shared::labels::validate_key(k) {
            return Some(e.to_string());
        }
        if let Err(e) = holdfast_shared::labels::validate_value(k, v) {
            return Some(e.to_string());
        }
    }
    for req in sel.match_expressions.iter().flatten() {
        if let Err(e) = holdfast_shared::labels::validate_key(&req.key) {
            return Some(e.to_string());
        }
        let n = req.values.as_ref().map_or(0, Vec::len);
        match req.operator.as_str() {
            "In" | "NotIn" if n == 0 => {
                return Some(format!(
                    "operator {} on key {:?} needs at least one value",
                    req.operator, req.key
                ));
            }
            "Exists" | "DoesNotExist" if n > 0 => {
                return Some(format!(
                    "operator {} on key {:?} takes no values",
                    req.operator, req.key
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                return Some(format!(
                    "unknown operator {other:?} on key {:?} (In, NotIn, Exists, DoesNotExist)",
                    req.key
                ));
            }
        }
    }
    None
}

fn unknown(problems: Vec<String>) -> Option<Invalid> {
    (!problems.is_empty()).then(|| Invalid {
        reason: reasons::UNKNOWN_RESOURCE,
        message: problems.join("; "),
    })
}

/// Checks a ResourceProtection.
pub fn check_resource_protection(rp: &ResourceProtection, index: &ApiIndex) -> Option<Invalid> {
    if let Some(i) = spec_invalid(&rp.validate()) {
        return Some(i);
    }
    for (i, r) in rp.spec.resources.iter().enumerate() {
        if let Some(sel) = &r.label_selector
            && let Some(p) = selector_problem(sel)
        {
            return Some(Invalid {
                reason: reasons::INVALID_SELECTOR,
                message: format!("spec.resources[{i}].labelSelector: {p}"),
            });
        }
    }
    unknown(
        rp.spec
            .resources
            .iter()
            .enumerate()
            // A wildcard names no one type: nothing to look up.
            .filter(|(_, r)| !r.is_wildcard())
            .filter_map(|(i, r)| {
                index.check_type(&format!("spec.resources[{i}]"), &r.resource_type())
            })
            .collect(),
    )
}

/// Checks an AnchorRule.
pub fn check_anchor_rule(ar: &AnchorRule, index: &ApiIndex) -> Option<Invalid> {
    if let Some(i) = spec_invalid(&ar.validate()) {
        return Some(i);
    }
    // Anchors in another cluster are checked there (the SourceReachable condition).
    let mut problems: Vec<String> = index
        .check_type("spec.anchor", &ar.spec.anchor)
        .into_iter()
        .filter(|_| ar.spec.anchor_source.is_none())
        .collect();
    problems.extend(
        ar.spec.protects.iter().enumerate().filter_map(|(i, p)| {
            index.check_type(&format!("spec.protects[{i}]"), &p.resource_type())
        }),
    );
    unknown(problems)
}

/// Checks a DependencyRule (on kcp the types live in other workspaces: `check_types` false).
pub fn check_dependency_rule(
    dr: &DependencyRule,
    index: &ApiIndex,
    check_types: bool,
) -> Option<Invalid> {
    if let Some(i) = spec_invalid(&dr.validate()) {
        return Some(i);
    }
    if !check_types {
        return None;
    }
    let mut problems: Vec<String> = index
        .check_type("spec.dependent", &dr.spec.dependent.resource_type())
        .into_iter()
        .collect();
    problems.extend(
        dr.spec
            .dependencies
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                index.check_type(&format!("spec.dependencies[{i}]"), &d.resource_type())
            }),
    );
    unknown(problems)
}

/// Checks a CriticalService.
pub fn check_critical_service(cs: &CriticalService, index: &ApiIndex) -> Option<Invalid> {
    if let Some(i) = spec_invalid(&cs.validate()) {
        return Some(i);
    }
    // Only the provider must be served. A criterion whose resource is not served
    // (its CRD already deleted, as in every bulk teardown) is simply met: it must not
    // make the policy invalid and so drop the provider's protection.
    let problems: Vec<String> = index
        .check_gr("spec.provider", &cs.spec.provider.group_resource(), None)
        .into_iter()
        .collect();
    unknown(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(v: serde_json::Value) -> ResourceProtection {
        ResourceProtection::new("p", serde_json::from_value(v).expect("spec"))
    }

    fn index() -> ApiIndex {
        ApiIndex::from_entries([
            ("apps", "v1", "deployments", true),
            ("", "v1", "namespaces", false),
            ("", "v1", "configmaps", true),
        ])
    }

    #[test]
    fn unknown_resource_and_version() {
        /// The ResourceProtection of one resource.
        fn one(group: &str, version: &str, resource: &str) -> ResourceProtection {
            rp(serde_json::json!({"resources": [
                {"group": group, "version": version, "resource": resource}
            ]}))
        }
        for (p, reason, text) in [
            (
                one("example.com", "v1", "widgets"),
                reasons::UNKNOWN_RESOURCE,
                "widgets.example.com",
            ),
            (
                one("apps", "v2", "deployments"),
                reasons::UNKNOWN_RESOURCE,
                "not served in version v2",
            ),
        ] {
            let inv = check_resource_protection(&p, &index()).expect("invalid");
            assert_eq!(inv.reason, reason, "{}", inv.message);
            assert!(inv.message.contains(text), "{}", inv.message);
        }
        assert_eq!(
            check_resource_protection(&one("apps", "v1", "deployments"), &index()),
            None
        );
        // Before discovery ran nothing is unknown.
        assert_eq!(
            check_resource_protection(&one("example.com", "v1", "widgets"), &ApiIndex::default()),
            None
        );
    }

    #[test]
    fn bad_selector_and_bad_spec() {
        let p = rp(
            serde_json::json!({"resources": [{"version": "v1", "resource": "configmaps",
            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}]}),
        );
        let inv = check_resource_protection(&p, &index()).expect("invalid");
        assert_eq!(inv.reason, reasons::INVALID_SELECTOR);
        let p = rp(
            serde_json::json!({"resources": [{"version": "v1", "resource": "namespaces", "namespace": "x"}]}),
        );
        let inv = check_resource_protection(&p, &index()).expect("invalid");
        assert_eq!(inv.reason, reasons::INVALID_SPEC);
    }

    #[test]
    fn critical_service_criteria_may_name_unserved_resources() {
        let cs = |provider_group: &str| -> CriticalService {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService",
                "metadata": {"name": "cs"},
                "spec": {
                    "provider": {"group": provider_group, "resource": "deployments", "namespace": "f", "name": "d"},
                    "criteria": [
                        {"type": "Finalizer", "finalizer": {"group": "my.crd.group", "resource": "coolresources", "finalizerName": "my.crd.group/x"}},
                        {"type": "SpecificResource", "specificResource": {"group": "gone.io", "resource": "things", "name": "t"}}
                    ]
                }
            }))
            .expect("cs")
        };
        // Criteria over resources already gone (a bulk teardown) are simply met.
        assert_eq!(check_critical_service(&cs("apps"), &index()), None);
        let inv = check_critical_service(&cs("nope.io"), &index()).expect("invalid");
        assert_eq!(inv.reason, reasons::UNKNOWN_RESOURCE);
        assert!(inv.message.contains("spec.provider"), "{}", inv.message);
    }

    #[test]
    fn bad_field_path() {
        let dr: DependencyRule = DependencyRule::new(
            "d",
            serde_json::from_value(serde_json::json!({
                "dependent": {"group": "apps", "version": "v1", "kind": "Deployment", "resource": "deployments"},
                "dependencies": [{"version": "v1", "resource": "configmaps", "fieldRef": {"path": ".spec[x"}}]
            }))
            .expect("spec"),
        );
        let inv = check_dependency_rule(&dr, &index(), true).expect("invalid");
        assert_eq!(inv.reason, reasons::INVALID_FIELD_PATH, "{}", inv.message);
    }
}
