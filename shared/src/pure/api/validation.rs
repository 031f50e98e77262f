//! Client-side validation of the policy specs: the same rules as the CRD schema
//! (patterns, required lists, CEL `x-kubernetes-validations`), for places where
//! the API server's validation cannot be relied on (a policy stored before a CRD
//! upgrade, a simulator, kcp schemas) and for the controller's `Invalid` condition.

use std::fmt;

use super::{
    AnchorRuleSpec, CriterionType, CriticalServiceSpec, DependencyRuleSpec, ResourceProtectionSpec,
};
use crate::fieldpath::FieldPath;

/// One problem in a policy spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    /// Path of the offending field, e.g. `spec.resources[0].namespace`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Joins validation errors into one message (`a: x; b: y`), e.g. for a condition.
pub fn join_errors(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Default)]
struct Errors(Vec<ValidationError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(ValidationError {
            field: field.into(),
            message: message.into(),
        });
    }

    /// Checks the group, version and resource of a type, each at `at(name)`.
    fn check_type(&mut self, at: impl Fn(&str) -> String, (g, v, r): (&str, &str, &str)) {
        self.check(at("group"), group(g));
        self.check(at("version"), version(v));
        self.check(at("resource"), resource(r));
    }

    fn check(&mut self, field: impl Into<String>, result: Result<(), String>) {
        if let Err(message) = result {
            self.push(field, message);
        }
    }
}

/// 1 to 63 characters of `allowed`, starting and ending with a letter or digit.
fn name_of(s: &str, allowed: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| allowed(*c))
}

/// Whether `s` is a DNS-1123 label (lowercase letters, digits and '-', at most
/// 63 characters, starting and ending with a letter or digit).
pub fn dns_label(s: &str) -> bool {
    name_of(s, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'
    })
}

/// `Ok` when `ok`, else why `s` is not `what`.
fn is(ok: bool, s: &str, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("{s:?} is not {what}"))
    }
}

/// Whether `s` is a DNS-1123 subdomain (dot-separated labels, at most 253 characters).
pub fn dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(dns_label)
}

fn group(s: &str) -> Result<(), String> {
    is(
        s.is_empty() || dns_subdomain(s),
        s,
        "an API group (empty for the core group, or a lowercase DNS subdomain)",
    )
}

fn version(s: &str) -> Result<(), String> {
    is(dns_label(s), s, "an API version (e.g. v1)")
}

fn resource(s: &str) -> Result<(), String> {
    is(
        dns_label(s),
        s,
        "a resource (lowercase plural as in the REST path, e.g. deployments)",
    )
}

/// A resource by its plural or by its kind (CriticalService criteria).
fn resource_or_kind(s: &str) -> Result<(), String> {
    is(
        dns_label(s) || kind(s).is_ok(),
        s,
        "a resource (lowercase plural, e.g. customresourcedefinitions) \
             or a kind (e.g. CustomResourceDefinition)",
    )
}

fn namespace(s: &str) -> Result<(), String> {
    is(dns_label(s), s, "a namespace name")
}

fn object_name(s: &str) -> Result<(), String> {
    is(
        !s.is_empty() && s.len() <= 253 && !s.contains('/') && !s.chars().any(char::is_whitespace),
        s,
        "an object name",
    )
}

fn kind(s: &str) -> Result<(), String> {
    let mut chars = s.chars();
    let ok = s.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a kind (UpperCamelCase, e.g. VirtualMachine)"
        ))
    }
}

fn qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = name_of(name, |c| {
        c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')
    });
    let ok = name_ok && prefix.is_none_or(dns_subdomain);
    is(
        ok,
        s,
        "a qualified name ([prefix/]name, the prefix a DNS subdomain)",
    )
}

fn field_path(s: &str) -> Result<(), String> {
    if !s.starts_with('.') {
        return Err(format!("{s:?} must start with '.' (e.g. .spec.ref.name)"));
    }
    FieldPath::parse(s).map(|_| ()).map_err(|e| e.to_string())
}

fn workspace_path(s: &str) -> Result<(), String> {
    let ok = s.split(':').all(dns_label);
    is(
        ok,
        s,
        "a workspace path (a logical cluster name, then workspace names: root, root:org, 2x8kq9:team, ...)",
    )
}

fn api_export_name(s: &str) -> Result<(), String> {
    is(dns_subdomain(s), s, "an APIExport name (a DNS subdomain)")
}

fn list_len(errors: &mut Errors, field: &str, len: usize, max: usize) {
    if len == 0 {
        errors.push(field, "must have at least one entry");
    } else if len > max {
        errors.push(field, format!("must have at most {max} entries"));
    }
}

fn cluster_scoped(group: &str, resource: &str) -> bool {
    (group.is_empty() && matches!(resource, "namespaces" | "nodes" | "persistentvolumes"))
        || (group == "apiextensions.k8s.io" && resource == "customresourcedefinitions")
}

impl ResourceProtectionSpec {
    /// The problems of this spec (empty when valid).
    pub fn validate(&self) -> Vec<ValidationError> {
        let mut e = Errors::default();
        list_len(&mut e, "spec.resources", self.resources.len(), 64);
        for (i, r) in self.resources.iter().enumerate() {
            let f = |name: &str| format!("spec.resources[{i}].{name}");
            if r.is_wildcard() {
                if r.group != "*" {
                    e.check(f("group"), group(&r.group));
                }
                if r.version != "*" {
                    e.check(f("version"), version(&r.version));
                }
                if let Some(ex) = &r.exclude {
                    list_len(&mut e, &f("exclude"), ex.len(), 64);
                    for (j, x) in ex.iter().enumerate() {
                        let g = format!("spec.resources[{i}].exclude[{j}]");
                        e.check(format!("{g}.group"), group(&x.group));
                        if x.resource != "*" {
                            e.check(format!("{g}.resource"), resource(&x.resource));
                        }
                    }
                }
            } else {
                e.check_type(f, (&r.group, &r.version, &r.resource));
                if r.group == "*" || r.version == "*" {
                    e.push(
                        f("resource"),
                        "group and version may be '*' only with resource '*'",
                    );
                }
                if r.exclude.is_some() {
                    e.push(f("exclude"), "exclude is only for resource '*'");
                }
            }
            if let Some(ns) = &r.namespace {
                e.check(f("namespace"), namespace(ns));
                if cluster_scoped(&r.group, &r.resource) {
                    e.push(
                        f("namespace"),
                        "must not be set for a cluster-scoped resource; select them by names",
                    );
                }
            }
            if let Some(names) = &r.names {
                list_len(&mut e, &f("names"), names.len(), 256);
                for (j, n) in names.iter().enumerate() {
                    e.check(format!("spec.resources[{i}].names[{j}]"), object_name(n));
                }
            }
        }
        e.0
    }
}

impl AnchorRuleSpec {
    /// The problems of this spec (empty when valid).
    pub fn validate(&self) -> Vec<ValidationError> {
        let mut e = Errors::default();
        let a = &self.anchor;
        e.check_type(
            |n| format!("spec.anchor.{n}"),
            (&a.group, &a.version, &a.resource),
        );
        e.check(
            "spec.anchorLabels.name",
            qualified_name(&self.anchor_labels.name),
        );
        if let Some(ns) = &self.anchor_labels.namespace {
            e.check("spec.anchorLabels.namespace", qualified_name(ns));
        }
        if let Some(t) = &self.toggle {
            e.check("spec.toggle.fieldPath", field_path(&t.field_path));
        }
        if let Some(src) = &self.anchor_source {
            let r = &src.kubeconfig_secret_ref;
            let f = |name: &str| format!("spec.anchorSource.kubeconfigSecretRef.{name}");
            if !dns_subdomain(&r.name) {
                e.push(f("name"), format!("{:?} is not a Secret name", r.name));
            }
            e.check(f("namespace"), namespace(&r.namespace));
            let key_ok = !r.key.is_empty()
                && r.key.len() <= 253
                && r.key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
            if !key_ok {
                e.push(f("key"), format!("{:?} is not a key of a Secret", r.key));
            }
        }
        list_len(&mut e, "spec.protects", self.protects.len(), 64);
        for (i, p) in self.protects.iter().enumerate() {
            let f = |name: &str| format!("spec.protects[{i}].{name}");
            e.check_type(f, (&p.group, &p.version, &p.resource));
            if p.group.is_empty() && p.resource == "namespaces" && p.inherit_from_namespace {
                e.push(
                    f("inheritFromNamespace"),
                    "cannot be set for namespaces themselves",
                );
            }
            if p.group == self.anchor.group && p.resource == self.anchor.resource {
                e.push(
                    format!("spec.protects[{i}]"),
                    "must not be the anchor's own type: the anchor could never be deleted",
                );
            }
        }
        e.0
    }
}

impl DependencyRuleSpec {
    /// The problems of this spec (empty when valid).
    pub fn validate(&self) -> Vec<ValidationError> {
        let mut e = Errors::default();
        let d = &self.dependent;
        if let Some(name) = &d.api_export_name {
            e.check("spec.dependent.apiExportName", api_export_name(name));
        }
        e.check("spec.dependent.group", group(&d.group));
        e.check("spec.dependent.version", version(&d.version));
        e.check("spec.dependent.kind", kind(&d.kind));
        e.check("spec.dependent.resource", resource(&d.resource));
        list_len(&mut e, "spec.dependencies", self.dependencies.len(), 32);
        for (i, dep) in self.dependencies.iter().enumerate() {
            let f = |name: &str| format!("spec.dependencies[{i}].{name}");
            if let Some(r) = &dep.api_export_ref {
                e.check(f("apiExportRef.path"), workspace_path(&r.path));
                e.check(f("apiExportRef.name"), api_export_name(&r.name));
            }
            e.check_type(f, (&dep.group, &dep.version, &dep.resource));
            e.check(f("fieldRef.path"), field_path(&dep.field_ref.path));
            if let Some(n) = &dep.namespace_field_ref {
                e.check(f("namespaceFieldRef.path"), field_path(&n.path));
            }
            let repeated = self.dependencies[..i].iter().any(|o| {
                o.group == dep.group
                    && o.resource == dep.resource
                    && o.field_ref.path == dep.field_ref.path
            });
            if repeated {
                e.push(
                    format!("spec.dependencies[{i}]"),
                    "repeats the group, resource and fieldRef.path of an earlier entry",
                );
            }
        }
        e.0
    }
}

impl CriticalServiceSpec {
    /// The problems of this spec (empty when valid).
    pub fn validate(&self) -> Vec<ValidationError> {
        let mut e = Errors::default();
        let p = &self.provider;
        e.check("spec.provider.group", group(&p.group));
        e.check("spec.provider.resource", resource(&p.resource));
        e.check("spec.provider.namespace", namespace(&p.namespace));
        e.check("spec.provider.name", object_name(&p.name));
        list_len(&mut e, "spec.criteria", self.criteria.len(), 32);
        for (i, c) in self.criteria.iter().enumerate() {
            let f = |name: &str| format!("spec.criteria[{i}].{name}");
            match c.type_ {
                CriterionType::Finalizer => {
                    if c.finalizer.is_none() || c.specific_resource.is_some() {
                        e.push(
                            format!("spec.criteria[{i}]"),
                            "type Finalizer requires finalizer and forbids specificResource",
                        );
                    }
                }
                CriterionType::SpecificResource => {
                    if c.specific_resource.is_none() || c.finalizer.is_some() {
                        e.push(
                            format!("spec.criteria[{i}]"),
                            "type SpecificResource requires specificResource and forbids finalizer",
                        );
                    }
                }
            }
            if let Some(fin) = &c.finalizer {
                e.check(f("finalizer.group"), group(&fin.group));
                e.check(f("finalizer.resource"), resource_or_kind(&fin.resource));
                e.check(
                    f("finalizer.finalizerName"),
                    qualified_name(&fin.finalizer_name),
                );
            }
            if let Some(s) = &c.specific_resource {
                e.check(f("specificResource.group"), group(&s.group));
                e.check(
                    f("specificResource.resource"),
                    resource_or_kind(&s.resource),
                );
                if let Some(ns) = &s.namespace {
                    e.check(f("specificResource.namespace"), namespace(ns));
                }
                e.check(f("specificResource.name"), object_name(&s.name));
            }
        }
        e.0
    }
}
