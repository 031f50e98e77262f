//! Manifests the end-to-end tests, the demo and the benchmarks share: the CRDs of the
//! seeds' stories (VPCs and VMs, widgets, database composites and buckets, finalized
//! "cool" resources, storage profiles and claims).

/// A CustomResourceDefinition `plural.group` of `kind`, one served version `v1`
/// whose schema keeps unknown fields.
pub fn crd(group: &str, plural: &str, kind: &str, namespaced: bool) -> String {
    let singular = plural.strip_suffix('s').unwrap_or(plural);
    let scope = if namespaced { "Namespaced" } else { "Cluster" };
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
         metadata: {{name: {plural}.{group}}}\nspec:\n  group: {group}\n  scope: {scope}\n  \
         names: {{plural: {plural}, singular: {singular}, kind: {kind}, listKind: {kind}List}}\n  \
         versions:\n  - {{name: v1, served: true, storage: true, schema: {{openAPIV3Schema: \
         {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}}}\n"
    )
}

/// Several manifests as one multi-document stream.
pub fn documents(docs: &[String]) -> String {
    docs.join("---\n")
}

/// Namespaced VPCs (network.test.io) and VirtualMachines (compute.test.io): seed 003.
pub fn vpc_vm_crds() -> String {
    documents(&[
        crd("network.test.io", "vpcs", "VPC", true),
        crd("compute.test.io", "virtualmachines", "VirtualMachine", true),
    ])
}

/// A DependencyRule `name` on Kubernetes: `dependent` (group, kind, resource; version
/// v1) references each of `deps` (group, resource, field path; version v1).
pub fn dependency_rule(
    name: &str,
    (group, kind, resource): (&str, &str, &str),
    deps: &[(&str, &str, &str)],
) -> String {
    let mut yaml = format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: DependencyRule\nmetadata: {{name: {name}}}\n\
         spec:\n  dependent: {{group: {group}, version: v1, kind: {kind}, resource: {resource}}}\n  \
         dependencies:\n"
    );
    for (group, resource, path) in deps {
        yaml.push_str(&format!(
            "  - {{group: {group}, version: v1, resource: {resource}, fieldRef: {{path: \"{path}\"}}}}\n"
        ));
    }
    yaml
}

/// The DependencyRule of seed 003 on Kubernetes: VirtualMachines reference VPCs at
/// `path`.
pub fn vm_vpc_rule(path: &str) -> String {
    let vm = ("compute.test.io", "VirtualMachine", "virtualmachines");
    dependency_rule("vm-dependencies", vm, &[("network.test.io", "vpcs", path)])
}

/// A ResourceProtection `name` over `resources` (each a YAML flow mapping,
/// e.g. `{group: "", version: v1, resource: configmaps, namespace: shop}`), with
/// `spec` (further fields of the spec, one `key: value` a line; may be empty).
pub fn resource_protection(name: &str, spec: &str, resources: &[&str]) -> String {
    let mut yaml = format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {name}}}\nspec:\n"
    );
    for line in spec.lines() {
        yaml.push_str(&format!("  {line}\n"));
    }
    yaml.push_str("  resources:\n");
    for r in resources {
        yaml.push_str(&format!("  - {r}\n"));
    }
    yaml
}

/// The VirtualMachines of [`vpc_vm_crds`], for a kube client.
pub fn vm_resource() -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: "compute.test.io".into(),
        version: "v1".into(),
        api_version: "compute.test.io/v1".into(),
        kind: "VirtualMachine".into(),
        plural: "virtualmachines".into(),
    }
}

/// Seed 002's CriticalService as the API server takes it: the finalizer-processing
/// Deployment is critical while coolresources carry its finalizer, and while
/// their CRD exists.
pub const FINALIZER_CRITICAL_SERVICE: &str = "apiVersion: holdfast.dev/v1alpha1
kind: CriticalService
metadata: {name: for-finalizer-deployment}
spec:
  provider: {group: apps, resource: deployments, namespace: finalizer-namespace, name: finalizer-deployment}
  criteria:
  - type: Finalizer
    finalizer: {group: my.crd.group, resource: coolresources, finalizerName: my.crd.group/super-important}
  - type: SpecificResource
    specificResource: {group: apiextensions.k8s.io, resource: customresourcedefinitions, name: coolresources.my.crd.group}
";

/// [`FINALIZER_CRITICAL_SERVICE`] with its provider in namespace `namespace`
/// (a namespace of the test's own) instead of `finalizer-namespace`.
pub fn finalizer_critical_service(namespace: &str) -> String {
    FINALIZER_CRITICAL_SERVICE.replace(
        "namespace: finalizer-namespace,",
        &format!("namespace: {namespace},"),
    )
}

/// Seed 000's AnchorRule: a database composite protects its namespace, the
/// namespace's PersistentVolumeClaims and its object buckets while its
/// `deletionProtection` toggle is on (the default).
pub const APPCAT_ANCHOR_RULE: &str = "apiVersion: holdfast.dev/v1alpha1
kind: AnchorRule
metadata: {name: appcat}
spec:
  anchor: {group: vshn.appcat.vshn.io, version: v1, resource: xvshnpostgresqls}
  anchorLabels: {name: appcat.vshn.io/composite-name}
  toggle: {fieldPath: .spec.parameters.backup.deletionProtection, default: true}
  protects:
  - {group: \"\", version: v1, resource: namespaces}
  - {group: \"\", version: v1, resource: persistentvolumeclaims, inheritFromNamespace: true}
  - {group: appcat.vshn.io, version: v1, resource: xobjectbuckets}
";

/// Widgets and their CRD under one ResourceProtection.
pub const WIDGET_PROTECTION: &str = "apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: widgets}
spec:
  resources:
  - {group: example.com, version: v1, resource: widgets}
  - {group: apiextensions.k8s.io, version: v1, resource: customresourcedefinitions, names: [widgets.example.com]}
";

/// A ClusterRole `name` with `rules` (each a YAML flow mapping, e.g.
/// `{apiGroups: [""], resources: [namespaces], verbs: [get, delete]}`) and the
/// ClusterRoleBinding of the same name granting it to user `user`.
pub fn user_cluster_role(name: &str, user: &str, rules: &[&str]) -> String {
    cluster_role_for(name, &[("User", user)], rules)
}

/// A ClusterRole `name` with `rules` (as for [`user_cluster_role`]) and the
/// ClusterRoleBinding of the same name granting it to `subjects` (`(kind, name)`,
/// kind `User` or `Group`).
pub fn cluster_role_for(name: &str, subjects: &[(&str, &str)], rules: &[&str]) -> String {
    let rules: String = rules.iter().map(|r| format!("- {r}\n")).collect();
    let subjects: Vec<String> = subjects
        .iter()
        .map(|(kind, who)| {
            format!("{{apiGroup: rbac.authorization.k8s.io, kind: {kind}, name: \"{who}\"}}")
        })
        .collect();
    let subjects = subjects.join(", ");
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {name}}}\n\
         rules:\n{rules}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
         metadata: {{name: {name}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {name}}}\n\
         subjects: [{subjects}]\n"
    )
}

/// VirtualMachine `name` in `namespace` referencing VPC `vpc` (seed 003).
pub fn vm_object(name: &str, namespace: &str, vpc: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "compute.test.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"vpcRef": {"name": vpc}},
    })
}

/// Namespaced widgets.example.com.
pub fn widget_crd() -> String {
    crd("example.com", "widgets", "Widget", true)
}

/// The database composite (anchor) and object buckets of seed 000, cluster-scoped.
pub fn appcat_crds() -> String {
    documents(&[
        crd(
            "vshn.appcat.vshn.io",
            "xvshnpostgresqls",
            "XVSHNPostgreSQL",
            false,
        ),
        crd("appcat.vshn.io", "xobjectbuckets", "XObjectBucket", false),
    ])
}

/// coolresources.my.crd.group of seed 002, cluster-scoped.
pub fn cool_crd() -> String {
    crd("my.crd.group", "coolresources", "CoolResource", false)
}

/// Cluster-scoped StorageProfiles referenced from namespaced VolumeClaims.
pub fn storage_crds() -> String {
    documents(&[
        crd(
            "storage.test.io",
            "storageprofiles",
            "StorageProfile",
            false,
        ),
        crd("storage.test.io", "volumeclaims", "VolumeClaim", true),
    ])
}

/// A Service `namespace/name` leading to `host:port`, the way a real
/// kube-apiserver reaches a webhook outside the cluster: type ExternalName, which
/// its service resolvers turn into `https://EXTERNALNAME:PORT` (PORT the
/// `clientConfig.service.port`, so give the webhook's port there), while verifying
/// the serving certificate for `name.namespace.svc`. (An EndpointSlice cannot name
/// a loopback address: kube-apiserver refuses 127.0.0.0/8 in one.)
pub fn service_to(namespace: &str, name: &str, host: &str, port: u16) -> String {
    let host = if host == "127.0.0.1" || host == "::1" {
        "localhost"
    } else {
        host
    };
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec:\n  type: ExternalName\n  externalName: {host}\n  ports:\n  - {{name: https, port: {port}}}\n"
    )
}

/// The platform's ValidatingAdmissionPolicy refusing CREATEs and UPDATEs of the
/// configuration `holdfast`, and its binding (Deny).
pub fn refusing_configuration_policy(name: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [admissionregistration.k8s.io]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [validatingwebhookconfigurations]
  validations:
  - expression: "object.metadata.name != 'holdfast'"
    message: "the platform reserves the name holdfast"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_names_and_scope() {
        let c = crd("example.com", "widgets", "Widget", true);
        assert!(c.contains("metadata: {name: widgets.example.com}"));
        assert!(c.contains("singular: widget, kind: Widget, listKind: WidgetList"));
        assert!(c.contains("scope: Namespaced"));
        assert!(crd("a.io", "xs", "X", false).contains("scope: Cluster"));
        assert_eq!(
            finalizer_critical_service("fin-1234abcd"),
            FINALIZER_CRITICAL_SERVICE.replace("finalizer-namespace", "fin-1234abcd")
        );
        assert!(finalizer_critical_service("fin-1234abcd").contains("namespace: fin-1234abcd,"));
        assert_eq!(
            vpc_vm_crds()
                .matches("kind: CustomResourceDefinition")
                .count(),
            2
        );
    }
}
