//! `DependencyRule`: reference protection (seed 003, the dependency-controller).

// Each `#[kube(printcolumn(...))]` repeats `type_ = "string"`, which clippy
// mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    FIELD_PATH_PATTERN, GROUP_PATTERN, KIND_PATTERN, RESOURCE_PATTERN, ResourceType,
    VERSION_PATTERN, WORKSPACE_PATH_PATTERN, distinct, policy_spec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Pattern of an APIExport name (a DNS subdomain, e.g. `network.test.io`).
pub const API_EXPORT_NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

policy_spec! {
    /// Desired state of a DependencyRule: objects of each dependency type are
    /// protected while an object of the dependent type references them by name.
    kind("DependencyRule", "dependencyrules", "dr", "DependencyRuleStatus"), doc("DependencyRule protects objects from deletion while objects of the dependent type in the same logical cluster (and namespace) reference them by name."),
    columns(
        ("Dependent", "string", ".spec.dependent.kind", "Kind of the objects holding references"),
        ("Group", "string", ".spec.dependent.group", "API group of the dependent kind", 1),
    ),
    #[x_kube(validation = Rule::new(
        "self.dependencies.all(d, self.dependencies.exists_one(e, e.group == d.group && e.resource == d.resource && e.fieldRef.path == d.fieldRef.path))"
    ).message("dependencies must not repeat the same group, resource and fieldRef.path").field_path(".dependencies"))]
    pub struct DependencyRuleSpec {
        /// The type whose objects hold the references (queried when a dependency is deleted).
        pub dependent: Dependent,
        /// The referenced types, protected while referenced.
        #[schemars(length(min = 1, max = 32))]
        pub dependencies: Vec<Dependency>,
    }
}

/// The resource type that holds references.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dependent {
    /// On kcp: the APIExport, in the rule's workspace, that provides this type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(API_EXPORT_NAME_PATTERN))]
    pub api_export_name: Option<String>,
    /// API group; empty (the default) for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_PATTERN))]
    pub group: String,
    /// API version, e.g. `v1`.
    #[schemars(length(min = 1, max = 63), pattern(VERSION_PATTERN))]
    pub version: String,
    /// Kind, e.g. `VirtualMachine`.
    #[schemars(length(min = 1, max = 63), pattern(KIND_PATTERN))]
    pub kind: String,
    /// Resource, lowercase plural as in the REST path, e.g. `virtualmachines`.
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_PATTERN))]
    pub resource: String,
}

impl Dependent {
    /// The dependent resource type.
    pub fn resource_type(&self) -> ResourceType {
        ResourceType::new(&self.group, &self.version, &self.resource)
    }
}

/// A referenced (protected) resource type and where the dependent names it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// On kcp: the APIExport that provides this type (required there, ignored on
    /// Kubernetes). Its workspace receives the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_export_ref: Option<ApiExportRef>,
    /// API group; empty (the default) for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_PATTERN))]
    pub group: String,
    /// API version, e.g. `v1`.
    #[schemars(length(min = 1, max = 63), pattern(VERSION_PATTERN))]
    pub version: String,
    /// Resource, lowercase plural as in the REST path, e.g. `vpcs`.
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_PATTERN))]
    pub resource: String,
    /// Where in a dependent object the referenced object's name is.
    pub field_ref: FieldRef,
    /// Where in a dependent object the referenced object's namespace is, for
    /// cross-namespace references. Unset: the dependent's own namespace (or none,
    /// for cluster-scoped dependencies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_field_ref: Option<FieldRef>,
}

impl Dependency {
    /// The referenced (protected) resource type.
    pub fn resource_type(&self) -> ResourceType {
        ResourceType::new(&self.group, &self.version, &self.resource)
    }
}

/// A kcp APIExport named by workspace path and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiExportRef {
    /// Workspace path of any depth: a logical cluster name (e.g. `root`) followed by
    /// workspace names, e.g. `root:org:network`.
    #[schemars(length(min = 1, max = 1024), pattern(WORKSPACE_PATH_PATTERN))]
    pub path: String,
    /// Name of the APIExport, e.g. `network.test.io`.
    #[schemars(length(min = 1, max = 253), pattern(API_EXPORT_NAME_PATTERN))]
    pub name: String,
}

/// A field of an object, named by a dot path.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldRef {
    /// Dot path, `[*]` over lists, e.g. `.spec.vpcRef.name` or `.spec.nics[*].subnet`.
    #[schemars(length(min = 2, max = 512), pattern(FIELD_PATH_PATTERN))]
    pub path: String,
}

impl DependencyRule {
    /// The protected (referenced) resource types, in spec order, without duplicates.
    pub fn targets(&self) -> Vec<ResourceType> {
        distinct(self.spec.dependencies.iter().map(|d| d.resource_type()))
    }

    /// The distinct APIExport references of the dependencies (kcp), in spec order.
    pub fn api_export_refs(&self) -> Vec<&ApiExportRef> {
        let mut out: Vec<&ApiExportRef> = Vec::new();
        for r in self
            .spec
            .dependencies
            .iter()
            .filter_map(|d| d.api_export_ref.as_ref())
        {
            if !out.contains(&r) {
                out.push(r);
            }
        }
        out
    }
}

/// Status of a DependencyRule, written by holdfast-controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependencyRuleStatus {
    /// The `metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: Ready, Installed, Invalid, CycleDetected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    #[schemars(length(max = 16))]
    pub conditions: Vec<Condition>,
    /// kcp: how each `apiExportRef` was resolved and whether its webhook is installed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["path".into(), "name".into()]))]
    #[schemars(length(max = 64))]
    pub workspaces: Vec<ResolvedWorkspace>,
}

impl DependencyRuleStatus {
    /// The condition of the given type, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        super::common::find_condition(&self.conditions, type_)
    }
}

/// An `apiExportRef` resolved to a logical cluster (kcp).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedWorkspace {
    /// Workspace path from `apiExportRef.path`.
    pub path: String,
    /// APIExport name from `apiExportRef.name`.
    pub name: String,
    /// Logical cluster name the path resolved to; unset while unresolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_cluster: Option<String>,
    /// kcp: the APIExport's identity hash (`status.identityHash`), once read; two
    /// exports of one group/resource differ in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_hash: Option<String>,
    /// kcp: the resources (`resource.group`) of that APIExport another APIExport of the
    /// same workspace also exports; unset while unknown (the workspace's APIExports
    /// could not be listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_resources: Option<Vec<String>>,
    /// Whether the merged webhook is installed in that workspace.
    #[serde(default)]
    pub webhook_installed: bool,
    /// Why resolution or installation failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
