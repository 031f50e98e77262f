//! Client-side validation mirrors the CRD schema rules.

use holdfast_shared::api::{
    AnchorRuleSpec, CriticalServiceSpec, DependencyRuleSpec, ResourceProtectionSpec,
    ValidationError, join_errors,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn spec<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("spec deserializes")
}

fn fields(errors: &[ValidationError]) -> Vec<&str> {
    errors.iter().map(|e| e.field.as_str()).collect()
}

/// Asserts the fields `errors` name, in order (`expected`, separated by spaces),
/// printing the errors otherwise.
fn assert_fields(errors: &[ValidationError], expected: &str) {
    let expected: Vec<&str> = expected.split_whitespace().collect();
    assert_eq!(fields(errors), expected, "{}", join_errors(errors));
}

fn rp() -> Value {
    json!({"enforcement": "Enforce", "strict": false, "resources": [
        {"group": "apps", "version": "v1", "resource": "deployments", "namespace": "shop", "names": ["db"],
         "labelSelector": {"matchLabels": {"app": "db"}}},
        {"group": "", "version": "v1", "resource": "namespaces", "names": ["prod"]},
        {"group": "apiextensions.k8s.io", "version": "v1", "resource": "customresourcedefinitions",
         "names": ["coolresources.my.crd.group"]},
        {"group": "rbac.authorization.k8s.io", "version": "v1", "resource": "clusterroles", "names": ["system:controller:x"]}
    ]})
}

fn ar() -> Value {
    json!({
        "anchor": {"group": "vshn.appcat.vshn.io", "version": "v1", "resource": "xvshnpostgresqls"},
        "anchorLabels": {"name": "appcat.vshn.io/composite-name", "namespace": "appcat.vshn.io/composite-namespace"},
        "toggle": {"fieldPath": ".spec.parameters.backup.deletionProtection", "default": true},
        "protects": [
            {"group": "", "version": "v1", "resource": "namespaces"},
            {"group": "", "version": "v1", "resource": "persistentvolumeclaims", "inheritFromNamespace": true}
        ]
    })
}

fn dr() -> Value {
    json!({
        "dependent": {"apiExportName": "compute.test.io", "group": "compute.test.io", "version": "v1",
                      "kind": "VirtualMachine", "resource": "virtualmachines"},
        "dependencies": [
            {"apiExportRef": {"path": "root:org:network", "name": "network.test.io"},
             "group": "network.test.io", "version": "v1", "resource": "vpcs", "fieldRef": {"path": ".spec.vpcRef.name"}},
            {"group": "", "version": "v1", "resource": "secrets", "fieldRef": {"path": ".spec.disks[*].secretRef.name"},
             "namespaceFieldRef": {"path": ".spec.disks[*].secretRef.namespace"}}
        ]
    })
}

fn cs() -> Value {
    json!({
        "provider": {"group": "apps", "resource": "deployments", "namespace": "finalizer-namespace", "name": "finalizer-deployment"},
        "criteria": [
            {"type": "Finalizer", "finalizer": {"group": "my.crd.group", "resource": "coolresources", "finalizerName": "my.crd.group/super-important"}},
            {"type": "SpecificResource", "specificResource": {"group": "apiextensions.k8s.io", "resource": "customresourcedefinitions", "name": "coolresources.my.crd.group"}}
        ]
    })
}

#[test]
fn valid_specs_have_no_errors() {
    assert_eq!(spec::<ResourceProtectionSpec>(rp()).validate(), vec![]);
    assert_eq!(spec::<AnchorRuleSpec>(ar()).validate(), vec![]);
    assert_eq!(spec::<DependencyRuleSpec>(dr()).validate(), vec![]);
    assert_eq!(spec::<CriticalServiceSpec>(cs()).validate(), vec![]);
}

#[test]
fn resource_protection_rules() {
    let mut v = rp();
    v["resources"][1]["namespace"] = json!("shop"); // namespaces are cluster-scoped
    v["resources"][2]["namespace"] = json!("shop"); // so are CRDs
    v["resources"][0]["resource"] = json!("Deployments");
    v["resources"][0]["group"] = json!("Apps");
    v["resources"][3]["names"] = json!(["a/b", ""]);
    let errors = spec::<ResourceProtectionSpec>(v).validate();
    assert_fields(
        &errors,
        "spec.resources[0].group spec.resources[0].resource spec.resources[1].namespace spec.resources[2].namespace spec.resources[3].names[0] spec.resources[3].names[1]",
    );
    let empty = spec::<ResourceProtectionSpec>(json!({"resources": []})).validate();
    assert_eq!(fields(&empty), vec!["spec.resources"]);
    let no_names = spec::<ResourceProtectionSpec>(
        json!({"resources": [{"version": "v1", "resource": "pods", "names": []}]}),
    )
    .validate();
    assert_eq!(fields(&no_names), vec!["spec.resources[0].names"]);
}

#[test]
fn anchor_rule_rules() {
    let mut v = ar();
    v["protects"][0]["inheritFromNamespace"] = json!(true);
    v["protects"].as_array_mut().expect("list").push(
        json!({"group": "vshn.appcat.vshn.io", "version": "v1", "resource": "xvshnpostgresqls"}),
    );
    v["toggle"]["fieldPath"] = json!("spec.parameters");
    v["anchorLabels"]["name"] = json!("Not A Key");
    let errors = spec::<AnchorRuleSpec>(v).validate();
    assert_fields(
        &errors,
        "spec.anchorLabels.name spec.toggle.fieldPath spec.protects[0].inheritFromNamespace spec.protects[2]",
    );
    let mut v = ar();
    v["toggle"]["fieldPath"] = json!(".spec..x");
    assert_eq!(
        fields(&spec::<AnchorRuleSpec>(v).validate()),
        vec!["spec.toggle.fieldPath"]
    );
}

#[test]
fn dependency_rule_rules() {
    let mut v = dr();
    v["dependencies"][0]["apiExportRef"]["path"] = json!("Org:network");
    v["dependent"]["kind"] = json!("virtualMachine");
    let dup = v["dependencies"][1].clone();
    v["dependencies"].as_array_mut().expect("list").push(dup);
    let errors = spec::<DependencyRuleSpec>(v).validate();
    assert_fields(
        &errors,
        "spec.dependent.kind spec.dependencies[0].apiExportRef.path spec.dependencies[2]",
    );
    // Workspace paths of any depth, starting at any logical cluster (kcp resolves
    // `<logical cluster>:<workspace>...`).
    for path in [
        "root",
        "root:a",
        "root:org:team:network-provider",
        "org:network",
        "2x8kq9mzl1b0v7fa",
        "2x8kq9mzl1b0v7fa:child",
    ] {
        let mut v = dr();
        v["dependencies"][0]["apiExportRef"]["path"] = json!(path);
        assert_eq!(spec::<DependencyRuleSpec>(v).validate(), vec![], "{path}");
    }
    for path in [
        "", "root:", "root::a", "root:A", ":a", "-x:a", "Root", "root/a",
    ] {
        let mut v = dr();
        v["dependencies"][0]["apiExportRef"]["path"] = json!(path);
        assert_eq!(spec::<DependencyRuleSpec>(v).validate().len(), 1, "{path}");
    }
}

#[test]
fn critical_service_rules() {
    let mut v = cs();
    v["criteria"][0]["specificResource"] = v["criteria"][1]["specificResource"].clone();
    v["criteria"][1]
        .as_object_mut()
        .expect("object")
        .remove("specificResource");
    v["provider"]["namespace"] = json!("Bad_NS");
    let errors = spec::<CriticalServiceSpec>(v).validate();
    assert_fields(
        &errors,
        "spec.provider.namespace spec.criteria[0] spec.criteria[1]",
    );
    assert!(errors[1].message.contains("forbids specificResource"));
    assert!(errors[2].message.contains("requires specificResource"));
    assert!(errors[1].to_string().starts_with("spec.criteria[0]: "));
}

#[test]
fn critical_service_criteria_name_resources_by_plural_or_kind() {
    // Seed 002's own example names the specific resource by kind.
    let mut v = cs();
    v["criteria"][1]["specificResource"]["resource"] = json!("CustomResourceDefinition");
    v["criteria"][0]["finalizer"]["resource"] = json!("CoolResource");
    assert_eq!(spec::<CriticalServiceSpec>(v.clone()).validate(), vec![]);
    // Neither a plural nor a kind; the provider still takes a plural only.
    v["criteria"][1]["specificResource"]["resource"] = json!("customResourceDefinitions");
    v["criteria"][0]["finalizer"]["resource"] = json!("Cool-Resource");
    v["provider"]["resource"] = json!("Deployment");
    let errors = spec::<CriticalServiceSpec>(v).validate();
    assert_fields(
        &errors,
        "spec.provider.resource spec.criteria[0].finalizer.resource spec.criteria[1].specificResource.resource",
    );
    assert_eq!(
        errors[2].message,
        "\"customResourceDefinitions\" is not a resource (lowercase plural, e.g. \
         customresourcedefinitions) or a kind (e.g. CustomResourceDefinition)"
    );
}
