//! Types shared by every holdfast policy kind: enforcement, resource type
//! references, status and condition types, and the schema patterns.

use std::fmt;

/// Declares the spec of a policy kind and, through its `CustomResource` derive, the
/// kind itself: group `holdfast.dev`, version `v1alpha1`, category `holdfast`,
/// `PartialEq`, fields in camelCase, with `kind(KIND, PLURAL, SHORTNAME, STATUS)` and
/// `doc(...)`. Its
/// printer columns are Enforcement, its own (`columns`: name, type, JSON path,
/// description, optionally a priority), Ready and Age; its first field is
/// `enforcement`.
macro_rules! policy_spec {
    (
        $(#[doc = $doc:expr])*
        kind($kind:literal, $plural:literal, $short:literal, $status:literal), doc($crd_doc:literal),
        columns($(($name:literal, $type:literal, $path:literal, $what:literal $(, $prio:literal)?)),* $(,)?),
        $(#[$attr:meta])*
        pub struct $spec:ident { $($fields:tt)* }
    ) => {
        $(#[doc = $doc])*
        #[derive(
            kube::CustomResource,
            kube::KubeSchema,
            serde::Serialize,
            serde::Deserialize,
            Clone,
            Debug,
            PartialEq,
        )]
        #[kube(
            group = "holdfast.dev",
            version = "v1alpha1",
            kind = $kind,
            plural = $plural,
            shortname = $short,
            category = "holdfast",
            status = $status,
            derive = "PartialEq",
            doc = $crd_doc,
            printcolumn(name = "Enforcement", type_ = "string", json_path = ".spec.enforcement", description = "Enforce, Warn or Audit"),
            $(printcolumn(name = $name, type_ = $type, json_path = $path, description = $what $(, priority = $prio)?),)*
            printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the policy is loaded and enforced"),
            printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
        )]
        #[serde(rename_all = "camelCase")]
        $(#[$attr])*
        pub struct $spec {
            /// What happens when a DELETE is blocked: Enforce (deny), Warn (allow with a
            /// warning) or Audit (allow, count and emit an Event).
            #[serde(default)]
            pub enforcement: $crate::api::common::Enforcement,
            $($fields)*
        }
    };
}
pub(crate) use policy_spec;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Pattern of an API group: empty (the core group) or a lowercase DNS subdomain.
pub const GROUP_PATTERN: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$";
/// Pattern of an API version (a lowercase DNS label such as `v1`, `v1beta2`).
pub const VERSION_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// Pattern of a resource (lowercase plural, as in the REST path, e.g. `deployments`).
pub const RESOURCE_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// Pattern of a resource named by its plural or by its kind (`deployments` or
/// `Deployment`), as CriticalService criteria accept: seed 002's own example writes
/// `resource: CustomResourceDefinition`.
pub const RESOURCE_OR_KIND_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?|[A-Z][A-Za-z0-9]*)$";
/// Pattern of a kind (`UpperCamelCase`, e.g. `VirtualMachine`).
pub const KIND_PATTERN: &str = r"^[A-Z][A-Za-z0-9]*$";
/// Pattern of a namespace name (a DNS-1123 label).
pub const NAMESPACE_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// Pattern of an object name. Deliberately loose (RBAC objects allow `:`): no
/// slash, no whitespace, not `.` or `..`.
pub const NAME_PATTERN: &str = r"^[^/\s]+$";
/// Pattern of a qualified name such as a label key or a finalizer
/// (`[prefix/]name`, the prefix a DNS subdomain).
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
/// Pattern of a field path (the grammar of `crate::fieldpath`, with the leading
/// dot required): dot-separated segments, each optionally followed by `[*]`
/// (every list element), `[N]` (one element) or a quoted key (`['a.b/c']`),
/// e.g. `.spec.vpcRef.name`, `.spec.disks[*].vpcRef.name`,
/// `.metadata.labels['app.kubernetes.io/name']`.
pub const FIELD_PATH_PATTERN: &str =
    r#"^\.[^.\[\]\s'"]+(\.[^.\[\]\s'"]+|\[(\*|[0-9]+|'[^']+'|"[^"]+")\])*$"#;
/// Pattern of a kcp workspace path of any depth: a logical cluster name (`root`,
/// or any other) followed by Workspace names, e.g. `root:org:network`,
/// `2x8kq9mzl1b0v7fa:child`.
pub const WORKSPACE_PATH_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(:[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// What happens when a policy would block an operation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Enforcement {
    /// Deny the operation (the default).
    #[default]
    Enforce,
    /// Allow the operation and return an admission warning.
    Warn,
    /// Allow the operation, count it in the metrics and emit an Event.
    Audit,
}

impl Enforcement {
    /// The wire value (`Enforce`, `Warn` or `Audit`).
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Enforce => "Enforce",
            Enforcement::Warn => "Warn",
            Enforcement::Audit => "Audit",
        }
    }

    /// Whether a blocked operation is denied.
    pub fn denies(self) -> bool {
        self == Enforcement::Enforce
    }
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A group and a resource, e.g. `deployments.apps`; the core group is `""`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// API group, `""` for the core group.
    pub group: String,
    /// Resource (lowercase plural).
    pub resource: String,
}

impl GroupResource {
    /// Builds a group/resource pair.
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }
}

impl fmt::Display for GroupResource {
    /// `resource.group`, or just `resource` for the core group (kubectl's notation).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// `items` in their order, each once.
pub(crate) fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for t in items {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// A resource type: API group, version and resource (the REST path segments).
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceType {
    /// API group; empty (the default) for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_PATTERN))]
    pub group: String,
    /// API version, e.g. `v1`.
    #[schemars(length(min = 1, max = 63), pattern(VERSION_PATTERN))]
    pub version: String,
    /// Resource, lowercase plural as in the REST path, e.g. `deployments`.
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_PATTERN))]
    pub resource: String,
}

impl ResourceType {
    /// Builds a resource type.
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        resource: impl Into<String>,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
        }
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }

    /// The group/resource pair.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.resource)
    }
}

impl fmt::Display for ResourceType {
    /// `resource.version.group` (kubectl's fully qualified notation).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}.{}", self.resource, self.version)
        } else {
            write!(f, "{}.{}.{}", self.resource, self.version, self.group)
        }
    }
}

/// `group/version`, or just `version` for the core group.
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Condition types holdfast sets on policy objects.
pub mod condition_types {
    /// The policy is valid, loaded and enforced.
    pub const READY: &str = "Ready";
    /// The webhook configuration(s) the policy needs are installed.
    pub const INSTALLED: &str = "Installed";
    /// The policy is invalid (reason and message say why).
    pub const INVALID: &str = "Invalid";
    /// The policy takes part in a rule-level dependency cycle.
    pub const CYCLE_DETECTED: &str = "CycleDetected";
    /// An AnchorRule's anchor source (another cluster) is listed and watched.
    pub const SOURCE_REACHABLE: &str = "SourceReachable";
}

/// Status of a policy object, written by holdfast-controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The `metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: Ready, Installed, Invalid, CycleDetected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    #[schemars(length(max = 16))]
    pub conditions: Vec<Condition>,
}

impl PolicyStatus {
    /// The condition of the given type, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        find_condition(&self.conditions, type_)
    }
}

/// The condition of the given type in a list of conditions.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of the given type is present with status `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == "True")
}
