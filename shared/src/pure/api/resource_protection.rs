//! `ResourceProtection`: protect objects chosen by selectors (seed 001).

// Each `#[kube(printcolumn(...))]` repeats `type_ = "string"`, which clippy
// mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    GROUP_PATTERN, GroupResource, NAME_PATTERN, NAMESPACE_PATTERN, PolicyStatus, ResourceType,
    distinct, policy_spec,
};

/// A group, or `*` for every group (with resource `*`).
const GROUP_OR_ANY_PATTERN: &str =
    r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$";
/// A version, or `*` (with resource `*`).
const VERSION_OR_ANY_PATTERN: &str = r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$";
/// A resource, or `*` for every resource of the group.
const RESOURCE_OR_ANY_PATTERN: &str = r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$";

/// Types a wildcard selector (`resource: "*"`) never selects, as (group, resource;
/// `*` for every resource of the group): objects the cluster itself deletes and
/// recreates all the time (Events, Leases, Endpoints, EndpointSlices), create-only
/// review resources that are never stored or deleted (TokenReviews,
/// SelfSubjectReviews, the SubjectAccessReviews), and holdfast's own policy objects
/// (a protect-everything policy would otherwise protect itself and every other
/// policy). Naming one of them explicitly still protects it.
pub const NEVER_SELECTED_BY_WILDCARD: &[(&str, &str)] = &[
    ("", "events"),
    ("events.k8s.io", "events"),
    ("coordination.k8s.io", "leases"),
    ("", "endpoints"),
    ("discovery.k8s.io", "endpointslices"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("holdfast.dev", "*"),
];

/// Whether a wildcard selector leaves `gr` out whatever it says.
pub fn never_selected_by_wildcard(gr: &GroupResource) -> bool {
    NEVER_SELECTED_BY_WILDCARD
        .iter()
        .any(|(g, r)| *g == gr.group && (*r == "*" || *r == gr.resource))
}

policy_spec! {
    /// Desired state of a ResourceProtection: which objects may not be deleted.
    kind("ResourceProtection", "resourceprotections", "rp", "PolicyStatus"), doc("ResourceProtection protects the objects its selectors choose from deletion (and, when strict, from losing their protection label)."),
    columns(
        ("Strict", "boolean", ".spec.strict", "Whether removing the protection label is denied"),
        ("Mode", "string", ".spec.mode", "Always, or Cascading: only while live contents remain"),
    ),
    pub struct ResourceProtectionSpec {
        /// Strict mode: an UPDATE that removes the protection label from a selected
        /// object (or sets it to a non-protecting value) is denied unless the stored
        /// object already carries `holdfast.dev/strict-exempt: "true"`.
        #[serde(default)]
        pub strict: bool,
        /// Selectors of the objects to protect; an object is protected when any entry selects it.
        #[schemars(length(min = 1, max = 64))]
        pub resources: Vec<ResourceSelector>,
        /// Always (the default): a selected object is protected as long as it is
        /// selected. Cascading: only while it still has live contents — a Namespace while
        /// it holds a Pod that is neither Succeeded, Failed nor terminating, or any
        /// PersistentVolumeClaim; a CustomResourceDefinition while an instance that is not
        /// terminating exists; an object with a scale subresource while `spec.replicas`
        /// is above 0. An object of any other kind is protected always.
        #[serde(default)]
        pub mode: ProtectionMode,
    }
}

/// How long a ResourceProtection protects what it selects.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
pub enum ProtectionMode {
    /// As long as the object is selected (the default).
    #[default]
    Always,
    /// While the object still has live contents (Pods and PVCs, instances, replicas).
    Cascading,
}

impl ProtectionMode {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtectionMode::Always => "Always",
            ProtectionMode::Cascading => "Cascading",
        }
    }
}

/// Selects objects of one resource type, optionally narrowed by namespace, names
/// and labels. Without namespace, names and labelSelector it selects every object
/// of the type. To protect a CRD object itself, select group
/// `apiextensions.k8s.io`, resource `customresourcedefinitions` and its name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.__namespace__) || !((self.group == '' && self.resource in ['namespaces', 'nodes', 'persistentvolumes']) || (self.group == 'apiextensions.k8s.io' && self.resource == 'customresourcedefinitions'))"
).message("namespace must not be set for a cluster-scoped resource (namespaces, nodes, persistentvolumes, customresourcedefinitions); select them by names").field_path(".namespace"))]
#[x_kube(validation = Rule::new(
    "self.resource == '*' || (self.group != '*' && self.version != '*')"
).message("group and version may be '*' only with resource '*'").field_path(".resource"))]
#[x_kube(validation = Rule::new(
    "!has(self.exclude) || self.resource == '*'"
).message("exclude is only for resource '*'").field_path(".exclude"))]
pub struct ResourceSelector {
    /// API group; empty (the default) for the core group; `*` for every group
    /// (with resource `*`).
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_OR_ANY_PATTERN))]
    pub group: String,
    /// API version, e.g. `v1` (`*` with resource `*`; every version is selected
    /// either way).
    #[schemars(length(min = 1, max = 63), pattern(VERSION_OR_ANY_PATTERN))]
    pub version: String,
    /// Resource, lowercase plural as in the REST path, e.g. `deployments`; `*` for
    /// every resource of the group (or of every group) except subresources, the
    /// types in `exclude` and those never selected by a wildcard (Events, Leases,
    /// Endpoints, EndpointSlices, review resources, holdfast's own policies).
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_OR_ANY_PATTERN))]
    pub resource: String,
    /// Types left out of `resource: "*"` (resource `*`: the whole group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub exclude: Option<Vec<ExcludedResource>>,
    /// Only objects in this namespace (namespaced resources only). Unset: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(NAMESPACE_PATTERN))]
    pub namespace: Option<String>,
    /// Only objects with one of these names. Unset: any name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Set)]
    #[schemars(
        length(min = 1, max = 256),
        inner(length(min = 1, max = 253), pattern(NAME_PATTERN))
    )]
    pub names: Option<Vec<String>>,
    /// Only objects whose labels match this selector. Unset: any labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// A type left out of a wildcard selector.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExcludedResource {
    /// API group; empty (the default) for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_PATTERN))]
    pub group: String,
    /// Resource (lowercase plural), or `*` for every resource of the group.
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_OR_ANY_PATTERN))]
    pub resource: String,
}

impl ResourceSelector {
    /// Whether this selector names every resource of a group (or of every group).
    pub fn is_wildcard(&self) -> bool {
        self.resource == "*"
    }

    /// Whether this selector covers objects of `gr`: it names `gr`, or it is a
    /// wildcard over `gr`'s group (or every group) that neither excludes `gr` nor
    /// meets a type never selected by a wildcard.
    pub fn selects_resource(&self, gr: &GroupResource) -> bool {
        if !self.is_wildcard() {
            return self.group == gr.group && self.resource == gr.resource;
        }
        (self.group == "*" || self.group == gr.group)
            && gr.resource != "*"
            && !gr.resource.contains('/')
            && !never_selected_by_wildcard(gr)
            && !self
                .exclude
                .iter()
                .flatten()
                .any(|e| e.group == gr.group && (e.resource == "*" || e.resource == gr.resource))
    }

    /// The selected resource type.
    pub fn resource_type(&self) -> ResourceType {
        ResourceType::new(&self.group, &self.version, &self.resource)
    }

    /// Whether `name` is selected: no names are listed, or it is one of them.
    pub fn name_matches(&self, name: &str) -> bool {
        self.names
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
    }

    /// Whether `namespace` (`None` for cluster-scoped objects) is selected.
    pub fn namespace_matches(&self, namespace: Option<&str>) -> bool {
        match &self.namespace {
            None => true,
            Some(want) => namespace == Some(want.as_str()),
        }
    }
}

impl ResourceProtection {
    /// The resource types this policy selects, in spec order, without duplicates.
    pub fn targets(&self) -> Vec<ResourceType> {
        distinct(self.spec.resources.iter().map(|sel| sel.resource_type()))
    }
}
