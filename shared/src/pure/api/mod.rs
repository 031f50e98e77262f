//! API types of the holdfast.dev CRDs (group `holdfast.dev`, version `v1alpha1`).
//!
//! Four cluster-scoped kinds, each with `spec.enforcement` (Enforce | Warn | Audit),
//! a status subresource (`observedGeneration` and standard `conditions`) and
//! printer columns:
//!
//! | kind | short name | module |
//! |---|---|---|
//! | [`ResourceProtection`] | `rp` | [`resource_protection`] |
//! | [`AnchorRule`] | `ar` | [`anchor_rule`] |
//! | [`DependencyRule`] | `dr` | [`dependency_rule`] |
//! | [`CriticalService`] | `cs` | [`critical_service`] |
//!
//! All share the category `holdfast` (`kubectl get holdfast`).
//! [`crds`] returns their CustomResourceDefinitions and [`crds_yaml`] renders them.

pub mod anchor_rule;
pub mod common;
pub mod critical_service;
pub mod dependency_rule;
pub mod resource_protection;
pub mod validation;

pub use anchor_rule::{
    AnchorLabels, AnchorRule, AnchorRuleSpec, AnchorSource, KubeconfigSecretRef, ProtectedType,
    Toggle,
};
pub use common::{
    Enforcement, GroupResource, PolicyStatus, ResourceType, api_version, condition_types,
    find_condition, is_condition_true,
};
pub use critical_service::{
    Criterion, CriterionType, CriticalService, CriticalServiceSpec, FinalizerCriterion, Provider,
    SpecificResourceCriterion,
};
pub use dependency_rule::{
    ApiExportRef, Dependency, DependencyRule, DependencyRuleSpec, DependencyRuleStatus, Dependent,
    FieldRef, ResolvedWorkspace,
};
pub use resource_protection::{ResourceProtection, ResourceProtectionSpec, ResourceSelector};
pub use validation::{ValidationError, join_errors};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResourceExt;

/// Error rendering the CRDs as YAML.
#[derive(Debug, thiserror::Error)]
#[error("rendering CRD {name} as YAML: {source}")]
pub struct CrdYamlError {
    /// Name of the CRD that failed.
    pub name: String,
    /// The serializer's error.
    #[source]
    pub source: serde_saphyr::SerializeError,
}

/// Common read access to every holdfast policy kind.
pub trait Policy: kube::Resource<DynamicType = ()> {
    /// The policy's `spec.enforcement`.
    fn enforcement(&self) -> Enforcement;
    /// The policy's `status.conditions` (empty without status).
    fn conditions(&self) -> &[Condition];
    /// The policy's `status.observedGeneration`.
    fn observed_generation(&self) -> Option<i64>;
    /// The problems of the spec (the CRD schema's rules, checked client-side).
    fn validate(&self) -> Vec<ValidationError>;
}

macro_rules! impl_policy {
    ($($kind:ty),* $(,)?) => {$(
        impl Policy for $kind {
            fn enforcement(&self) -> Enforcement {
                self.spec.enforcement
            }
            fn conditions(&self) -> &[Condition] {
                self.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or(&[])
            }
            fn observed_generation(&self) -> Option<i64> {
                self.status.as_ref().and_then(|s| s.observed_generation)
            }
            fn validate(&self) -> Vec<ValidationError> {
                self.spec.validate()
            }
        }
    )*};
}

impl_policy!(
    ResourceProtection,
    AnchorRule,
    DependencyRule,
    CriticalService
);

/// Kinds of the holdfast CRDs, in the fixed order used by [`crds`].
pub const KINDS: [&str; 4] = [
    "ResourceProtection",
    "AnchorRule",
    "DependencyRule",
    "CriticalService",
];

/// The CustomResourceDefinitions of all holdfast kinds, in the order of [`KINDS`].
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        ResourceProtection::crd(),
        AnchorRule::crd(),
        DependencyRule::crd(),
        CriticalService::crd(),
    ]
}

/// File name of a CRD in `manifests/crds/`: `<group>_<plural>.yaml`
/// (e.g. `holdfast.dev_resourceprotections.yaml`, as controller-gen names them).
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// One CRD as a YAML document (no leading `---`).
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdYamlError> {
    serde_saphyr::to_string(crd).map_err(|source| CrdYamlError {
        name: crd.metadata.name.clone().unwrap_or_default(),
        source,
    })
}

/// All CRDs as one multi-document YAML stream: the documents of [`crds`], in
/// order, each starting with `---`. Deterministic: same code, same bytes.
pub fn crds_yaml() -> Result<String, CrdYamlError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        let doc = crd_yaml(&crd)?;
        out.push_str(&doc);
        if !doc.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}
