//! The desired ValidatingWebhookConfiguration, computed from scratch from the
//! configuration and from every policy object on each change (never
//! incrementally). Pure: the controller applies what this returns.

use crate::{
    api::{
        AnchorRule, CriticalService, DependencyRule, GroupResource, ResourceProtection,
        resource_protection::NEVER_SELECTED_BY_WILDCARD,
    },
    labels::ProtectionLabels,
    names::{
        ALLOW_DELETION_LABEL, ALLOW_DELETION_LABEL_APPCAT, SKIP_ANNOTATION,
        SKIP_ANNOTATION_DEPENDENCIES, WEBHOOK_CONFIGURATION_NAME,
    },
};
use k8s_openapi::{
    ByteString,
    api::admissionregistration::v1::{
        MatchCondition, RuleWithOperations, ServiceReference, ValidatingWebhook,
        ValidatingWebhookConfiguration, WebhookClientConfig,
    },
    apimachinery::pkg::apis::meta::v1::{
        LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
    },
};
use serde_json::Value;
use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    str::FromStr,
};

/// Where the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookTarget {
    /// `clientConfig.url`, e.g. `https://127.0.0.1:8443/validate`.
    Url(String),
    /// `clientConfig.service`, path `/validate`.
    Service {
        /// Namespace of the Service.
        namespace: String,
        /// Name of the Service.
        name: String,
        /// Port of the Service.
        port: i32,
    },
}

/// `failurePolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "runtime", derive(clap::ValueEnum))]
pub enum FailurePolicy {
    /// Reject the request when the webhook cannot be called (default).
    #[default]
    #[cfg_attr(feature = "runtime", value(name = "Fail"))]
    Fail,
    /// Allow the request when the webhook cannot be called.
    #[cfg_attr(feature = "runtime", value(name = "Ignore"))]
    Ignore,
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        })
    }
}

/// An unknown failure policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure policy {0:?}: expected Fail or Ignore")]
pub struct UnknownFailurePolicy(pub String);

impl FromStr for FailurePolicy {
    type Err = UnknownFailurePolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Fail" | "fail" => Ok(FailurePolicy::Fail),
            "Ignore" | "ignore" => Ok(FailurePolicy::Ignore),
            _ => Err(UnknownFailurePolicy(s.to_string())),
        }
    }
}

/// How the webhooks are installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallOptions {
    /// Where the webhook listens.
    pub target: WebhookTarget,
    /// PEM CA bundle the API server verifies the webhook with.
    pub ca_bundle: Vec<u8>,
    /// `failurePolicy` of every webhook.
    pub failure_policy: FailurePolicy,
    /// `timeoutSeconds` of every webhook (1..=30).
    pub timeout_seconds: i32,
}

fn client_config(opts: &InstallOptions) -> WebhookClientConfig {
    let ca = (!opts.ca_bundle.is_empty()).then(|| ByteString(opts.ca_bundle.clone()));
    match &opts.target {
        WebhookTarget::Url(url) => WebhookClientConfig {
            url: Some(url.clone()),
            ca_bundle: ca,
            service: None,
        },
        WebhookTarget::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            url: None,
            ca_bundle: ca,
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(crate::names::VALIDATE_PATH.to_string()),
                port: Some(*port),
            }),
        },
    }
}

fn all_resources(op: &str) -> RuleWithOperations {
    RuleWithOperations {
        operations: Some(vec![op.to_string()]),
        api_groups: Some(vec!["*".to_string()]),
        api_versions: Some(vec!["*".to_string()]),
        resources: Some(vec!["*".to_string()]),
        scope: Some("*".to_string()),
    }
}

/// Like [`all_resources`], and every subresource too: `/status`, `/finalize` and
/// others can change labels and annotations. `*/*` is every resource and every
/// subresource, and kube-apiserver accepts it only alone in a rule's `resources`
/// ("if '*/*' is present, must not specify other resources").
fn all_resources_and_subresources(op: &str) -> RuleWithOperations {
    let mut rule = all_resources(op);
    rule.resources = Some(vec!["*/*".to_string()]);
    rule
}

/// Adds `RESOURCE/*` after each resource of `rules`: the subresources of what
/// they cover (UPDATEs through `/status` or `/finalize` change metadata too).
fn with_subresources(mut rules: Vec<RuleWithOperations>) -> Vec<RuleWithOperations> {
    for rule in &mut rules {
        if let Some(res) = rule.resources.as_mut() {
            if res.iter().any(|r| r == "*") {
                // `*/*` is every resource and subresource, and must stand alone.
                *res = vec!["*/*".to_string()];
                continue;
            }
            let subs: Vec<String> = res
                .iter()
                .filter(|r| !r.contains('/'))
                .map(|r| format!("{r}/*"))
                .collect();
            res.extend(subs);
        }
    }
    rules
}

/// The matchCondition that lets only CREATEs and UPDATEs reach the webhook that
/// set label `key` to a value looking like one of `values` without being one
/// (`always`, `TRUE`): it protects nothing, and the webhook warns.
pub fn look_alike_condition(key: &str, values: &[String]) -> String {
    let k = cel_str(key);
    let exact = values.iter().map(|v| cel_str(v)).collect::<Vec<_>>();
    let lower = values
        .iter()
        .map(|v| cel_str(&v.to_ascii_lowercase()))
        .collect::<Vec<_>>();
    format!(
        "has(object.metadata.labels) && {k} in object.metadata.labels \
         && !(object.metadata.labels[{k}] in [{exact}]) \
         && object.metadata.labels[{k}].trim().lowerAscii() in [{lower}] \
         && (oldObject == null || !has(oldObject.metadata.labels) || !({k} in oldObject.metadata.labels) \
         || oldObject.metadata.labels[{k}] != object.metadata.labels[{k}])",
        exact = exact.join(", "),
        lower = lower.join(", "),
    )
}

fn exists(key: &str) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.to_string(),
            operator: "Exists".to_string(),
            values: None,
        }]),
        match_labels: None,
    }
}

/// CEL string literal for a label key (keys never contain quotes or backslashes).
fn cel_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The matchCondition that lets only UPDATEs that remove or change label `key` reach
/// the webhook (guarded so it never errors on objects without labels).
pub fn label_changed_condition(key: &str) -> String {
    let k = cel_str(key);
    format!(
        "oldObject != null && has(oldObject.metadata.labels) && {k} in oldObject.metadata.labels \
         && (!has(object.metadata.labels) || !({k} in object.metadata.labels) \
         || object.metadata.labels[{k}] != oldObject.metadata.labels[{k}])"
    )
}

pub(crate) fn webhook(
    name: String,
    opts: &InstallOptions,
    rule: RuleWithOperations,
) -> ValidatingWebhook {
    ValidatingWebhook {
        name,
        admission_review_versions: vec!["v1".to_string()],
        side_effects: "NoneOnDryRun".to_string(),
        failure_policy: Some(opts.failure_policy.to_string()),
        timeout_seconds: Some(opts.timeout_seconds),
        match_policy: Some("Equivalent".to_string()),
        client_config: client_config(opts),
        rules: Some(vec![rule]),
        namespace_selector: Some(LabelSelector::default()),
        object_selector: Some(LabelSelector::default()),
        ..Default::default()
    }
}

/// The label-protection webhooks: for each protection label key, one DELETE webhook
/// on every resource with objectSelector "key exists" (a LabelSelector cannot OR
/// keys), and under strict mode one UPDATE webhook whose matchCondition passes only
/// removals or changes of that key.
pub fn label_webhooks(
    labels: &ProtectionLabels,
    strict: bool,
    opts: &InstallOptions,
) -> Vec<ValidatingWebhook> {
    let mut out = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let mut delete = webhook(
            format!("delete-label-{i}.holdfast.dev"),
            opts,
            all_resources("DELETE"),
        );
        delete.object_selector = Some(exists(&label.key));
        // The same webhook warns about look-alike values (`always`) on CREATE and
        // UPDATE: they protect nothing.
        delete.rules = Some(vec![
            all_resources("DELETE"),
            all_resources("CREATE"),
            all_resources_and_subresources("UPDATE"),
        ]);
        delete.match_conditions = Some(vec![MatchCondition {
            name: "delete-or-protection-label-look-alike".to_string(),
            expression: format!(
                "request.operation == 'DELETE' || ({})",
                look_alike_condition(&label.key, &label.values)
            ),
        }]);
        out.push(delete);
        if strict {
            // Subresources too: a merge patch to namespaces/NAME/status or a PUT to
            // namespaces/NAME/finalize changes labels like a plain UPDATE.
            let mut update = webhook(
                format!("strict-label-{i}.holdfast.dev"),
                opts,
                all_resources_and_subresources("UPDATE"),
            );
            update.object_selector = Some(exists(&label.key));
            // Removing/changing the label, or adding a break-glass marker or the
            // strict exemption: the webhook checks the latter two against the
            // requester's bypass permission.
            update.match_conditions = Some(vec![MatchCondition {
                name: "protection-label-removed-or-changed".to_string(),
                expression: format!(
                    "({}) || {} || {}",
                    label_changed_condition(&label.key),
                    break_glass_condition(),
                    added_condition("labels", crate::names::STRICT_EXEMPT_LABEL)
                ),
            }]);
            out.push(update);
        }
    }
    out
}

/// The whole configuration named `holdfast` for label protection only (no policy
/// objects): [`desired_configuration_for`] with empty [`PolicyNeeds`].
pub fn desired_configuration(
    labels: &ProtectionLabels,
    strict: bool,
    opts: &InstallOptions,
) -> ValidatingWebhookConfiguration {
    desired_configuration_for(labels, strict, &PolicyNeeds::default(), opts)
}

/// Name of the webhook that receives the DELETEs policy objects govern in a kcp
/// provider workspace (on Kubernetes they go to `policies-<i>.holdfast.dev`, see
/// [`POLICIES_WEBHOOK_PREFIX`]).
pub const POLICIES_WEBHOOK: &str = "policies.holdfast.dev";
/// Name of the webhook that receives pod evictions (`CREATE pods/eviction`).
pub const EVICTION_WEBHOOK: &str = "eviction.holdfast.dev";

/// An UPDATE that changes the labels at all: removes, adds or edits one, including
/// labelling an object that had none.
pub const LABELS_CHANGED: &str = "(oldObject != null && (has(oldObject.metadata.labels) \
     ? (!has(object.metadata.labels) || object.metadata.labels != oldObject.metadata.labels) \
     : has(object.metadata.labels)))";

fn crds_gr() -> GroupResource {
    GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions")
}
/// Name of the webhook that receives UPDATEs adding a break-glass marker to
/// resources some strict policy protects.
pub const BREAK_GLASS_WEBHOOK: &str = "break-glass.holdfast.dev";
/// Label put on every configuration the controller installs.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "holdfast-controller";

/// Whether a resource is namespaced, as far as the caller knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Namespaced (its deletion is part of a namespace deletion).
    Namespaced,
    /// Cluster-scoped.
    Cluster,
    /// Not known (treated as namespaced: containment errs on the safe side).
    Unknown,
}

/// Resources whose scope is known without discovery.
pub fn well_known_scope(gr: &GroupResource) -> Scope {
    match (gr.group.as_str(), gr.resource.as_str()) {
        ("", "namespaces" | "nodes" | "persistentvolumes" | "componentstatuses")
        | ("apiextensions.k8s.io", "customresourcedefinitions")
        | ("rbac.authorization.k8s.io", "clusterroles" | "clusterrolebindings")
        | ("storage.k8s.io", "storageclasses" | "csidrivers" | "csinodes" | "volumeattachments")
        | ("scheduling.k8s.io", "priorityclasses")
        | ("apiregistration.k8s.io", "apiservices")
        | (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations"
            | "mutatingwebhookconfigurations"
            | "validatingadmissionpolicies"
            | "validatingadmissionpolicybindings",
        )
        | ("holdfast.dev", _) => Scope::Cluster,
        (
            "",
            "pods"
            | "services"
            | "configmaps"
            | "secrets"
            | "persistentvolumeclaims"
            | "serviceaccounts"
            | "endpoints"
            | "events"
            | "limitranges"
            | "resourcequotas"
            | "replicationcontrollers",
        )
        | (
            "apps",
            "deployments" | "statefulsets" | "daemonsets" | "replicasets" | "controllerrevisions",
        )
        | ("batch", "jobs" | "cronjobs")
        | ("rbac.authorization.k8s.io", "roles" | "rolebindings")
        | ("networking.k8s.io", "ingresses" | "networkpolicies")
        | ("policy", "poddisruptionbudgets")
        | ("coordination.k8s.io", "leases") => Scope::Namespaced,
        _ => Scope::Unknown,
    }
}

/// What the policy objects need from the webhook configuration: the union over
/// every (valid) policy, recomputed from scratch by the controller.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyNeeds {
    /// Resources whose DELETEs some policy governs (what [`PolicyNeeds::routes`]
    /// route, by resource).
    pub delete: BTreeSet<GroupResource>,
    /// Resources some strict policy protects (break-glass UPDATEs are sent to
    /// [`BREAK_GLASS_WEBHOOK`]).
    pub strict: BTreeSet<GroupResource>,
    /// Some policy asks for strict label mode (a strict ResourceProtection).
    pub strict_labels: bool,
    /// The DELETE routes of every policy, narrowed by what the policy says
    /// (merged into [`POLICIES_WEBHOOK_PREFIX`] entries by [`merge_routes`]).
    pub routes: Vec<Route>,
    /// Which namespace DELETEs reach [`CONTAINMENT_WEBHOOK`].
    pub containment: Containment,
}

/// The resources whose DELETEs a ResourceProtection governs: the selected types
/// (the CRD type itself when a CRD object is selected).
pub fn resource_protection_needs(rp: &ResourceProtection) -> Vec<GroupResource> {
    dedup(
        rp.spec
            .resources
            .iter()
            .map(|r| GroupResource::new(&r.group, &r.resource)),
    )
}

/// The resources whose DELETEs an AnchorRule governs: its `protects` types.
pub fn anchor_rule_needs(ar: &AnchorRule) -> Vec<GroupResource> {
    dedup(
        ar.spec
            .protects
            .iter()
            .map(|p| GroupResource::new(&p.group, &p.resource)),
    )
}

/// The resources whose DELETEs a DependencyRule governs: its dependency types.
pub fn dependency_rule_needs(dr: &DependencyRule) -> Vec<GroupResource> {
    dedup(
        dr.spec
            .dependencies
            .iter()
            .map(|d| GroupResource::new(&d.group, &d.resource)),
    )
}

/// The resources whose DELETEs a CriticalService governs: the provider's type,
/// namespaces (the provider's namespace) and criticalservices.holdfast.dev (the
/// CriticalService itself may not go while its provider exists).
pub fn critical_service_needs(cs: &CriticalService) -> Vec<GroupResource> {
    dedup([
        cs.spec.provider.group_resource(),
        GroupResource::new("", "namespaces"),
        GroupResource::new(crate::names::API_GROUP, "criticalservices"),
    ])
}

fn dedup(it: impl IntoIterator<Item = GroupResource>) -> Vec<GroupResource> {
    let mut out: Vec<GroupResource> = Vec::new();
    for gr in it {
        if !out.contains(&gr) {
            out.push(gr);
        }
    }
    out
}

impl PolicyNeeds {
    /// Adds what a ResourceProtection needs.
    pub fn add_resource_protection(&mut self, rp: &ResourceProtection) {
        let needs = resource_protection_needs(rp);
        if rp.spec.strict {
            self.strict_labels = true;
            self.strict.extend(needs.iter().cloned());
        }
        self.delete.extend(needs);
        self.routes.extend(resource_protection_routes(rp));
    }

    /// Adds what an AnchorRule needs.
    pub fn add_anchor_rule(&mut self, ar: &AnchorRule) {
        self.delete.extend(anchor_rule_needs(ar));
        self.routes.extend(anchor_rule_routes(ar));
    }

    /// Adds what a DependencyRule needs.
    pub fn add_dependency_rule(&mut self, dr: &DependencyRule) {
        self.delete.extend(dependency_rule_needs(dr));
        self.routes.extend(dependency_rule_routes(dr));
    }

    /// Adds what `other` needs (the union, as if its policies had been added here).
    pub fn merge(&mut self, other: &PolicyNeeds) {
        self.delete.extend(other.delete.iter().cloned());
        self.strict.extend(other.strict.iter().cloned());
        self.strict_labels |= other.strict_labels;
        self.routes.extend(other.routes.iter().cloned());
    }

    /// Adds what a CriticalService needs.
    pub fn add_critical_service(&mut self, cs: &CriticalService) {
        self.delete.extend(critical_service_needs(cs));
        self.routes.extend(critical_service_routes(cs));
    }

    /// Adds `namespaces` when a namespaced (or possibly namespaced) resource is
    /// governed: deleting a namespace deletes its objects, so the webhook must see
    /// the DELETEs of the namespaces holding them to refuse half-deleting a namespace
    /// (containment, [`CONTAINMENT_WEBHOOK`]). Routes over cluster-scoped resources
    /// lose their namespace narrowing (the API server ignores it for them).
    pub fn with_containment(mut self, scope: impl Fn(&GroupResource) -> Scope) -> Self {
        let namespaced = self.delete.iter().any(|gr| scope(gr) != Scope::Cluster);
        if namespaced {
            self.delete.insert(GroupResource::new("", "namespaces"));
        }
        for r in &mut self.routes {
            if r.resources.iter().all(|gr| scope(gr) == Scope::Cluster) {
                r.namespaces = NamespaceScope::Any;
            }
        }
        self
    }
}

/// Rules for `operation` on exactly `resources`, merged into as few entries as
/// the API allows: resources grouped by API group, and groups with the same
/// resource list sharing one entry; versions `*`, scope `*`.
pub fn merged_rules(
    operation: &str,
    resources: &BTreeSet<GroupResource>,
) -> Vec<RuleWithOperations> {
    // A wildcard covers the rest: `*` of a group alone in its group, every group
    // alone in the configuration (the API server accepts `*` only alone).
    if resources.contains(&GroupResource::new("*", "*")) {
        return vec![all_resources(operation)];
    }
    let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for gr in resources {
        let list = by_group.entry(gr.group.as_str()).or_default();
        if list.first().is_some_and(|r| r == "*") {
            continue;
        }
        if gr.resource == "*" {
            *list = vec!["*".to_string()];
        } else {
            list.push(gr.resource.clone());
        }
    }
    let mut by_resources: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for (group, res) in by_group {
        by_resources.entry(res).or_default().push(group.to_string());
    }
    let mut rules: Vec<RuleWithOperations> = by_resources
        .into_iter()
        .map(|(resources, groups)| RuleWithOperations {
            operations: Some(vec![operation.to_string()]),
            api_groups: Some(groups),
            api_versions: Some(vec!["*".to_string()]),
            resources: Some(resources),
            scope: Some("*".to_string()),
        })
        .collect();
    rules.sort_by(|a, b| a.api_groups.cmp(&b.api_groups));
    rules
}

/// Annotations that lift protection for one object (break-glass).
pub const BREAK_GLASS_ANNOTATIONS: [&str; 2] = [SKIP_ANNOTATION, SKIP_ANNOTATION_DEPENDENCIES];
/// Labels that lift protection for one object (break-glass).
pub const BREAK_GLASS_LABELS: [&str; 2] = [ALLOW_DELETION_LABEL_APPCAT, ALLOW_DELETION_LABEL];

fn added_condition(field: &str, key: &str) -> String {
    let k = cel_str(key);
    format!(
        "(has(object.metadata.{field}) && {k} in object.metadata.{field} \
         && (oldObject == null || !has(oldObject.metadata.{field}) || !({k} in oldObject.metadata.{field}) \
         || oldObject.metadata.{field}[{k}] != object.metadata.{field}[{k}]))"
    )
}

/// The matchCondition that lets only UPDATEs adding (or changing) a break-glass
/// annotation or label reach the webhook.
pub fn break_glass_condition() -> String {
    BREAK_GLASS_ANNOTATIONS
        .iter()
        .map(|k| added_condition("annotations", k))
        .chain(
            BREAK_GLASS_LABELS
                .iter()
                .map(|k| added_condition("labels", k)),
        )
        .collect::<Vec<_>>()
        .join(" || ")
}

/// Name of the webhook that judges deferred-deletion requests (CREATEs and UPDATEs
/// setting or changing `holdfast.dev/delete-when-unblocked` or its requester).
pub const DEFERRED_WEBHOOK: &str = "deferred.holdfast.dev";

/// The value of `metadata.<field>[key]` of `obj` in CEL, `''` when absent.
fn cel_value(obj: &str, field: &str, key: &str) -> String {
    let k = cel_str(key);
    format!(
        "((has({obj}.metadata.{field}) && {k} in {obj}.metadata.{field}) ? {obj}.metadata.{field}[{k}] : '')"
    )
}

/// The matchCondition of [`DEFERRED_WEBHOOK`]: the object carries the annotation
/// or the label `holdfast.dev/delete-when-unblocked`, and it is created or one of
/// the markers of a request (the three and the signature) changes. Withdrawing a
/// request is not judged.
pub fn deferred_condition() -> String {
    use crate::names::{DELETE_REQUEST_SIGNATURE, DELETE_REQUESTED_BY, DELETE_WHEN_UNBLOCKED};
    let k = cel_str(DELETE_WHEN_UNBLOCKED);
    let markers = [
        ("annotations", DELETE_WHEN_UNBLOCKED),
        ("labels", DELETE_WHEN_UNBLOCKED),
        ("annotations", DELETE_REQUESTED_BY),
        ("annotations", DELETE_REQUEST_SIGNATURE),
    ];
    let changed = markers
        .iter()
        .map(|(f, key)| {
            format!(
                "{} != {}",
                cel_value("oldObject", f, key),
                cel_value("object", f, key)
            )
        })
        .collect::<Vec<_>>()
        .join(" || ");
    format!(
        "((has(object.metadata.annotations) && {k} in object.metadata.annotations) \
         || (has(object.metadata.labels) && {k} in object.metadata.labels)) \
         && (oldObject == null || {changed})"
    )
}

/// The whole configuration named `holdfast`: label webhooks (strict ones when
/// `strict` or a strict policy asks), [`CONTAINMENT_WEBHOOK`] for namespace
/// DELETEs (every one, or those of marked namespaces, per `needs.containment`),
/// `policies-<i>.holdfast.dev` for the DELETEs the policies govern (their routes
/// merged by [`merge_routes`], at most [`MAX_POLICY_WEBHOOKS`]), and
/// [`BREAK_GLASS_WEBHOOK`] for the resources strict policies protect. Every field
/// the API server would default is set, so a live object can be compared with it.
pub fn desired_configuration_for(
    labels: &ProtectionLabels,
    strict: bool,
    needs: &PolicyNeeds,
    opts: &InstallOptions,
) -> ValidatingWebhookConfiguration {
    let mut hooks = label_webhooks(labels, strict || needs.strict_labels, opts);
    // Namespace DELETEs: a namespace holding a protected object must not be
    // half-deleted (containment). CRD DELETEs too: deleting a CRD deletes its
    // instances from storage without a DELETE review (CRD containment); a
    // namespaceSelector never skips a cluster-scoped object other than a namespace.
    let mut h = webhook(
        CONTAINMENT_WEBHOOK.to_string(),
        opts,
        all_resources("DELETE"),
    );
    h.rules = Some(merged_rules(
        "DELETE",
        &[GroupResource::new("", "namespaces"), crds_gr()].into(),
    ));
    if needs.containment == Containment::Marked {
        h.namespace_selector = Some(exists(CONTAINS_PROTECTED_LABEL));
    }
    hooks.push(h);
    for (i, route) in merge_routes(needs.routes.clone(), MAX_POLICY_WEBHOOKS)
        .iter()
        .enumerate()
    {
        let mut h = webhook(
            format!("{POLICIES_WEBHOOK_PREFIX}{i}.holdfast.dev"),
            opts,
            all_resources("DELETE"),
        );
        h.rules = Some(merged_rules("DELETE", &route.resources));
        h.namespace_selector = Some(route.namespaces.selector());
        h.object_selector = Some(route.labels.clone().unwrap_or_default());
        h.match_conditions = route.conditions();
        hooks.push(h);
    }
    // Evictions delete pods without a DELETE review: the webhook judges each one as
    // that DELETE (no objectSelector: the object reviewed is the Eviction). Like
    // containment, only namespaces marked as holding something protected once the
    // markers are in place, so an outage does not block every node drain.
    let mut h = webhook(EVICTION_WEBHOOK.to_string(), opts, all_resources("CREATE"));
    h.rules = Some(vec![RuleWithOperations {
        operations: Some(vec!["CREATE".to_string()]),
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["v1".to_string()]),
        resources: Some(vec!["pods/eviction".to_string()]),
        scope: Some("Namespaced".to_string()),
    }]);
    if needs.containment == Containment::Marked {
        h.namespace_selector = Some(exists(CONTAINS_PROTECTED_LABEL));
    }
    hooks.push(h);
    // Deferred-deletion requests: every resource and subresource (a request left
    // unjudged on a type no policy covers yet would be honoured once one does),
    // only CREATEs and UPDATEs that set or change the markers.
    let mut rule = all_resources("CREATE");
    rule.operations = Some(vec!["CREATE".to_string(), "UPDATE".to_string()]);
    // `*/*`: every resource and subresource; it must stand alone.
    rule.resources = Some(vec!["*/*".to_string()]);
    let mut h = webhook(DEFERRED_WEBHOOK.to_string(), opts, rule);
    h.match_conditions = Some(vec![MatchCondition {
        name: "deferred-deletion-requested".to_string(),
        expression: deferred_condition(),
    }]);
    hooks.push(h);
    // Break-glass markers need the bypass permission on objects strict policies
    // protect, and under --strict on every object any policy protects.
    let mut break_glass = needs.strict.clone();
    if strict {
        break_glass.extend(needs.delete.iter().cloned());
        break_glass.insert(GroupResource::new("", "namespaces"));
        break_glass.insert(crds_gr());
    }
    if !break_glass.is_empty() {
        let mut h = webhook(
            BREAK_GLASS_WEBHOOK.to_string(),
            opts,
            all_resources("UPDATE"),
        );
        h.rules = Some(with_subresources(merged_rules("UPDATE", &break_glass)));
        // Break-glass markers added, or labels changed (a strict ResourceProtection's
        // label selector must not be escaped by relabelling the object, including
        // labelling one that had none: NotIn / DoesNotExist selectors).
        h.match_conditions = Some(vec![MatchCondition {
            name: "break-glass-marker-added-or-labels-changed".to_string(),
            expression: format!("{} || {}", break_glass_condition(), LABELS_CHANGED),
        }]);
        hooks.push(h);
    }
    // The marker narrows which namespace DELETEs reach containment: removing or
    // changing it is judged (refused while the namespace holds something
    // protected), so whoever may patch a namespace cannot unmark it and delete it
    // before the controller marks it again. No namespaceSelector: for a namespace
    // UPDATE the API server matches the new labels, which no longer carry it.
    let mut h = webhook(
        CONTAINMENT_MARKER_WEBHOOK.to_string(),
        opts,
        all_resources("UPDATE"),
    );
    h.rules = Some(vec![RuleWithOperations {
        operations: Some(vec!["UPDATE".to_string()]),
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["v1".to_string()]),
        resources: Some(vec!["namespaces".to_string(), "namespaces/*".to_string()]),
        scope: Some("Cluster".to_string()),
    }]);
    h.match_conditions = Some(vec![MatchCondition {
        name: "containment-marker-removed".to_string(),
        expression: label_changed_condition(CONTAINS_PROTECTED_LABEL),
    }]);
    hooks.push(h);
    configuration(
        (SETTINGS_ANNOTATION, settings_annotation(labels, strict)),
        hooks,
    )
}

/// The configuration `holdfast`, managed by holdfast, annotated with `annotation`,
/// holding `webhooks`.
fn configuration(
    (key, value): (&str, String),
    webhooks: Vec<ValidatingWebhook>,
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(WEBHOOK_CONFIGURATION_NAME.to_string()),
            labels: Some([(MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string())].into()),
            annotations: Some([(key.to_string(), value)].into()),
            ..Default::default()
        },
        webhooks: Some(webhooks),
    }
}

/// Which namespace DELETEs reach [`CONTAINMENT_WEBHOOK`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Containment {
    /// Every namespace DELETE (fail closed: used until the namespaces holding
    /// routed objects are known to be marked).
    #[default]
    Everywhere,
    /// DELETEs of namespaces labelled [`CONTAINS_PROTECTED_LABEL`].
    Marked,
}

#[path = "webhookconfig_settings.rs"]
mod settings;
pub use settings::*;

#[path = "webhookconfig_routes.rs"]
mod routes;
pub use routes::*;

#[path = "webhookconfig_kcp.rs"]
mod kcp;
pub use kcp::*;

#[cfg(test)]
#[path = "webhookconfig_tests.rs"]
pub(crate) mod tests;
