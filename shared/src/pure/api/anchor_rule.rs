//! `AnchorRule`: lifecycle protection bound to a topmost composite (seed 000).

// Each `#[kube(printcolumn(...))]` repeats `type_ = "string"`, which clippy
// mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    FIELD_PATH_PATTERN, GROUP_PATTERN, NAMESPACE_PATTERN, PolicyStatus, QUALIFIED_NAME_PATTERN,
    RESOURCE_PATTERN, ResourceType, VERSION_PATTERN, distinct, policy_spec,
};

policy_spec! {
    /// Desired state of an AnchorRule: objects of the listed types are protected
    /// while their anchor exists, is not being deleted, and its toggle is true.
    kind("AnchorRule", "anchorrules", "ar", "PolicyStatus"), doc("AnchorRule protects objects while the anchor object named by their labels (or their namespace's labels) exists, is not being deleted and has its toggle field set."),
    columns(
        ("Anchor", "string", ".spec.anchor.resource", "Resource of the anchor objects"),
        ("Toggle", "string", ".spec.toggle.fieldPath", "Field of the anchor that switches protection on", 1),
    ),
    #[x_kube(validation = Rule::new(
        "self.protects.all(p, !(p.group == self.anchor.group && p.resource == self.anchor.resource))"
    ).message("protects must not list the anchor's own type: the anchor could never be deleted").field_path(".protects"))]
    pub struct AnchorRuleSpec {
        /// Type of the anchor objects (the topmost composites).
        pub anchor: ResourceType,
        /// Label keys that name an object's anchor.
        pub anchor_labels: AnchorLabels,
        /// Field of the anchor that switches protection on or off. Unset: protection
        /// is on whenever the anchor exists and is not being deleted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub toggle: Option<Toggle>,
        /// Types of the objects protected by their anchor.
        #[schemars(length(min = 1, max = 64))]
        pub protects: Vec<ProtectedType>,
        /// Where the anchor objects live. Unset: in the cluster of the protected objects.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub anchor_source: Option<AnchorSource>,
    }
}

/// Another cluster holding the anchor objects (e.g. a control cluster holding the
/// composites of the objects in this service cluster).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnchorSource {
    /// A Secret holding a kubeconfig for the cluster of the anchors. It must be in
    /// holdfast's own namespace (holdfast-system unless installed elsewhere).
    pub kubeconfig_secret_ref: KubeconfigSecretRef,
}

/// A key of a Secret holding a kubeconfig.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigSecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), pattern(SECRET_NAME_PATTERN))]
    pub name: String,
    /// Namespace of the Secret: holdfast's own namespace.
    #[schemars(length(min = 1, max = 63), pattern(NAMESPACE_PATTERN))]
    pub namespace: String,
    /// Key of the Secret's data holding the kubeconfig (default `kubeconfig`).
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1, max = 253), pattern(SECRET_KEY_PATTERN))]
    pub key: String,
}

/// A Secret name: a lowercase DNS subdomain.
const SECRET_NAME_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A key of a Secret's data.
const SECRET_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";

fn default_kubeconfig_key() -> String {
    "kubeconfig".to_string()
}

/// Label keys, on a protected object (or its namespace), naming its anchor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnchorLabels {
    /// Label key whose value is the anchor's name, e.g. `appcat.vshn.io/composite-name`.
    #[schemars(length(min = 1, max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    pub name: String,
    /// Label key whose value is the anchor's namespace, for namespaced anchors,
    /// e.g. `appcat.vshn.io/composite-namespace`. Unset: the anchor is cluster-scoped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316), pattern(QUALIFIED_NAME_PATTERN))]
    pub namespace: Option<String>,
}

/// The anchor field that turns protection on.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Toggle {
    /// Dot path of a boolean field of the anchor, e.g.
    /// `.spec.parameters.backup.deletionProtection`.
    #[schemars(length(min = 2, max = 512), pattern(FIELD_PATH_PATTERN))]
    pub field_path: String,
    /// Value used when the field is absent (default true: protected).
    #[serde(default = "default_true")]
    pub default: bool,
}

impl Default for Toggle {
    fn default() -> Self {
        Self {
            field_path: String::new(),
            default: true,
        }
    }
}

fn default_true() -> bool {
    true
}

/// A type of object protected by its anchor.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!(self.group == '' && self.resource == 'namespaces' && self.inheritFromNamespace)"
).message("inheritFromNamespace cannot be set for namespaces themselves").field_path(".inheritFromNamespace"))]
pub struct ProtectedType {
    /// API group; empty (the default) for the core group.
    #[serde(default)]
    #[schemars(length(max = 253), pattern(GROUP_PATTERN))]
    pub group: String,
    /// API version, e.g. `v1`.
    #[schemars(length(min = 1, max = 63), pattern(VERSION_PATTERN))]
    pub version: String,
    /// Resource, lowercase plural as in the REST path, e.g. `persistentvolumeclaims`.
    #[schemars(length(min = 1, max = 63), pattern(RESOURCE_PATTERN))]
    pub resource: String,
    /// Read the anchor labels from the object's namespace instead of the object
    /// (for objects not managed by the composite but living in its namespace).
    #[serde(default)]
    pub inherit_from_namespace: bool,
}

impl ProtectedType {
    /// The protected resource type.
    pub fn resource_type(&self) -> ResourceType {
        ResourceType::new(&self.group, &self.version, &self.resource)
    }
}

impl AnchorRule {
    /// The resource types this rule protects, in spec order, without duplicates.
    pub fn targets(&self) -> Vec<ResourceType> {
        distinct(self.spec.protects.iter().map(|p| p.resource_type()))
    }
}
