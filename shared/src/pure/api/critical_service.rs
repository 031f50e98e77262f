//! `CriticalService`: ordering protection for providers of finalizers and
//! webhooks (seed 002, generic delete protection).

// Each `#[kube(printcolumn(...))]` repeats `type_ = "string"`, which clippy
// mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    GROUP_PATTERN, GroupResource, NAME_PATTERN, NAMESPACE_PATTERN, PolicyStatus,
    QUALIFIED_NAME_PATTERN, RESOURCE_OR_KIND_PATTERN, RESOURCE_PATTERN, policy_spec,
};

policy_spec! {
    /// Desired state of a CriticalService: the provider (and its namespace) may not
    /// be deleted while any criterion still holds.
    kind("CriticalService", "criticalservices", "cs", "PolicyStatus"), doc("CriticalService keeps a provider (e.g. the Deployment running a finalizer or webhook) and its namespace from being deleted while objects still depend on it; the CriticalService itself cannot be deleted while its provider exists."),
    columns(
        ("Provider", "string", ".spec.provider.name", "Name of the provider object"),
        ("Provider-Namespace", "string", ".spec.provider.namespace", "Namespace of the provider object"),
        ("Provider-Resource", "string", ".spec.provider.resource", "Resource of the provider object", 1),
    ),
    pub struct CriticalServiceSpec {
        /// The object providing the critical service, e.g. a Deployment running a finalizer.
        pub provider: Provider,
        /// Conditions that keep the provider alive; the provider may be deleted only
        /// when none holds.
        #[schemars(length(min = 1, max = 32))]
        pub criteria: Vec<Criterion>,
    }
}

/// The provider object, by group, resource, namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Provider {
    /// API group of the provider, e.g. `apps`; empty (the default) for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_PATTERN))]
    pub group: String,
    /// Resource of the provider, e.g. `deployments`.
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_PATTERN))]
    pub resource: String,
    /// Namespace of the provider; it is protected as well.
    #[schemars(length(min = 1, max = 63), pattern(NAMESPACE_PATTERN))]
    pub namespace: String,
    /// Name of the provider.
    #[schemars(length(min = 1, max = 253), pattern(NAME_PATTERN))]
    pub name: String,
}

impl Provider {
    /// The provider's group/resource.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.resource)
    }
}

/// Kind of a criterion.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum CriterionType {
    /// Holds while any object of a group/resource carries a finalizer.
    Finalizer,
    /// Holds while a specific object exists.
    SpecificResource,
}

/// One condition keeping the provider alive. Exactly the member named by `type` is set.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.type != 'Finalizer' || (has(self.finalizer) && !has(self.specificResource))")
        .message("type Finalizer requires finalizer and forbids specificResource"),
    validation = Rule::new("self.type != 'SpecificResource' || (has(self.specificResource) && !has(self.finalizer))")
        .message("type SpecificResource requires specificResource and forbids finalizer")
)]
pub struct Criterion {
    /// Finalizer or SpecificResource.
    #[serde(rename = "type")]
    pub type_: CriterionType,
    /// Set when type is Finalizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<FinalizerCriterion>,
    /// Set when type is SpecificResource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specific_resource: Option<SpecificResourceCriterion>,
}

/// Holds while any object of the group/resource carries the finalizer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerCriterion {
    /// API group, e.g. `my.crd.group`; empty (the default) for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_PATTERN))]
    pub group: String,
    /// Resource, by its lowercase plural (`coolresources`) or its kind
    /// (`CoolResource`).
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_OR_KIND_PATTERN))]
    pub resource: String,
    /// Finalizer, e.g. `my.crd.group/super-important`.
    #[schemars(length(min = 1, max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    pub finalizer_name: String,
}

impl FinalizerCriterion {
    /// The group/resource whose objects are checked.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.resource)
    }
}

/// Holds while the named object exists.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpecificResourceCriterion {
    /// API group, e.g. `apiextensions.k8s.io`; empty (the default) for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_PATTERN))]
    pub group: String,
    /// Resource, by its lowercase plural (`customresourcedefinitions`) or its
    /// kind (`CustomResourceDefinition`).
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_OR_KIND_PATTERN))]
    pub resource: String,
    /// Namespace of the object; unset for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(NAMESPACE_PATTERN))]
    pub namespace: Option<String>,
    /// Name of the object.
    #[schemars(length(min = 1, max = 253), pattern(NAME_PATTERN))]
    pub name: String,
}

impl SpecificResourceCriterion {
    /// The object's group/resource.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.resource)
    }
}

impl CriticalService {
    /// The provider's group/resource.
    pub fn provider_group_resource(&self) -> GroupResource {
        self.spec.provider.group_resource()
    }
}
