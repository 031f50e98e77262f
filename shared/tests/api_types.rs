//! API types: the docs/design.md examples round-trip through serde, and the generated
//! CRDs are structural, cluster-scoped, with status, printer columns and CEL rules.

use holdfast_shared::{
    api::{
        self, AnchorRule, AnchorRuleSpec, CriterionType, CriticalService, CriticalServiceSpec,
        DependencyRule, DependencyRuleSpec, Enforcement, Policy, ResourceProtection,
        ResourceProtectionSpec, ResourceType,
    },
    names,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResourceExt, Resource};
use serde_json::{Value, json};

/// The "Field names" block of docs/design.md, verbatim.
const DESIGN_FIELD_NAMES: &str = r#"
kind: ResourceProtection
spec:
  enforcement: Enforce          # Enforce | Warn | Audit (every policy kind has it)
  strict: false
  resources:                    # each entry selects objects
  - {group: apps, version: v1, resource: deployments, namespace: shop, names: [db], labelSelector: {...}}
---
kind: AnchorRule
spec:
  anchor: {group: vshn.appcat.vshn.io, version: v1, resource: xvshnpostgresqls}
  anchorLabels: {name: appcat.vshn.io/composite-name, namespace: appcat.vshn.io/composite-namespace}
  toggle: {fieldPath: .spec.parameters.backup.deletionProtection, default: true}
  protects:
  - {group: "", version: v1, resource: namespaces}
  - {group: "", version: v1, resource: persistentvolumeclaims, inheritFromNamespace: true}
---
kind: DependencyRule            # as in seed 003
spec:
  dependent: {apiExportName: compute.test.io, group: compute.test.io, version: v1, kind: VirtualMachine, resource: virtualmachines}
  dependencies:
  - apiExportRef: {path: "root:org:network", name: network.test.io}   # kcp only
    group: network.test.io
    version: v1
    resource: vpcs
    fieldRef: {path: .spec.vpcRef.name}
---
kind: CriticalService           # as in seed 002
spec:
  provider: {group: apps, resource: deployments, namespace: finalizer-namespace, name: finalizer-deployment}
  criteria:
  - {type: Finalizer, finalizer: {group: my.crd.group, resource: coolresources, finalizerName: my.crd.group/super-important}}
  - {type: SpecificResource, specificResource: {group: apiextensions.k8s.io, resource: customresourcedefinitions, name: coolresources.my.crd.group}}
"#;

/// Extracts the yaml block after "Field names (fixed" from docs/design.md.
fn design_block(design: &str) -> Option<String> {
    let start = design.find("Field names (fixed")?;
    let rest = &design[start..];
    let open = rest.find("```yaml\n")? + "```yaml\n".len();
    let body = &rest[open..];
    let close = body.find("\n```")?;
    Some(format!("\n{}\n", &body[..close]))
}

#[test]
fn embedded_examples_match_design_md() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/design.md");
    let design = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path} (the design contract) cannot be read: {e}"));
    let block = design_block(&design).expect("docs/design.md has the Field names yaml block");
    assert_eq!(
        block, DESIGN_FIELD_NAMES,
        "docs/design.md's Field names block changed: update DESIGN_FIELD_NAMES and the API types"
    );
}

fn design_docs() -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(DESIGN_FIELD_NAMES).expect("docs/design.md block is YAML")
}

fn design_spec(kind: &str) -> Value {
    design_docs()
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in docs/design.md block"))["spec"]
        .clone()
}

/// Every key and value of `original` is in `serialized` (which may add defaults).
/// A mapping `{...}` (docs/design.md's placeholder) matches anything.
fn assert_subset(original: &Value, serialized: &Value, path: &str) {
    match (original, serialized) {
        (Value::Object(o), _) if o.len() == 1 && o.contains_key("...") => {}
        (Value::Object(o), Value::Object(s)) => {
            for (k, v) in o {
                let sv = s
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}.{k} lost in the round trip"));
                assert_subset(v, sv, &format!("{path}.{k}"));
            }
        }
        (Value::Array(o), Value::Array(s)) => {
            assert_eq!(o.len(), s.len(), "{path}: list length changed");
            for (i, (ov, sv)) in o.iter().zip(s).enumerate() {
                assert_subset(ov, sv, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(original, serialized, "{path} changed in the round trip"),
    }
}

fn round_trip<T>(kind: &str) -> T
where
    T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
{
    let original = design_spec(kind);
    let spec: T = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("{kind} example does not deserialize: {e}"));
    let serialized = serde_json::to_value(&spec).expect("serializes");
    assert_subset(&original, &serialized, &format!("{kind}.spec"));
    let again: T = serde_json::from_value(serialized).expect("deserializes again");
    assert_eq!(spec, again, "{kind}: second round trip differs");
    // And through YAML as well.
    let yaml = serde_saphyr::to_string(&spec).expect("yaml");
    let from_yaml: T = serde_saphyr::from_str(&yaml).expect("yaml parses back");
    assert_eq!(spec, from_yaml, "{kind}: YAML round trip differs");
    spec
}

#[test]
fn resource_protection_example_round_trips() {
    let spec: ResourceProtectionSpec = round_trip("ResourceProtection");
    assert_eq!(spec.enforcement, Enforcement::Enforce);
    assert!(!spec.strict);
    let sel = &spec.resources[0];
    assert_eq!(
        sel.resource_type(),
        ResourceType::new("apps", "v1", "deployments")
    );
    assert_eq!(sel.namespace.as_deref(), Some("shop"));
    assert_eq!(sel.names.as_deref(), Some(&["db".to_string()][..]));
    assert!(sel.label_selector.is_some());
    assert!(sel.name_matches("db") && !sel.name_matches("web"));
    assert!(sel.namespace_matches(Some("shop")) && !sel.namespace_matches(None));
}

#[test]
fn anchor_rule_example_round_trips() {
    let spec: AnchorRuleSpec = round_trip("AnchorRule");
    assert_eq!(
        spec.anchor,
        ResourceType::new("vshn.appcat.vshn.io", "v1", "xvshnpostgresqls")
    );
    assert_eq!(spec.anchor_labels.name, "appcat.vshn.io/composite-name");
    assert_eq!(
        spec.anchor_labels.namespace.as_deref(),
        Some("appcat.vshn.io/composite-namespace")
    );
    let toggle = spec.toggle.as_ref().expect("toggle");
    assert_eq!(
        toggle.field_path,
        ".spec.parameters.backup.deletionProtection"
    );
    assert!(toggle.default);
    assert_eq!(spec.protects.len(), 2);
    assert_eq!(
        spec.protects[0].resource_type(),
        ResourceType::new("", "v1", "namespaces")
    );
    assert!(!spec.protects[0].inherit_from_namespace);
    assert!(spec.protects[1].inherit_from_namespace);
}

#[test]
fn dependency_rule_example_round_trips() {
    let spec: DependencyRuleSpec = round_trip("DependencyRule");
    assert_eq!(
        spec.dependent.api_export_name.as_deref(),
        Some("compute.test.io")
    );
    assert_eq!(spec.dependent.kind, "VirtualMachine");
    assert_eq!(spec.dependent.resource, "virtualmachines");
    let dep = &spec.dependencies[0];
    let export = dep.api_export_ref.as_ref().expect("apiExportRef");
    assert_eq!(export.path, "root:org:network");
    assert_eq!(export.name, "network.test.io");
    assert_eq!(
        dep.resource_type(),
        ResourceType::new("network.test.io", "v1", "vpcs")
    );
    assert_eq!(dep.field_ref.path, ".spec.vpcRef.name");
    assert!(dep.namespace_field_ref.is_none());
}

#[test]
fn critical_service_example_round_trips() {
    let spec: CriticalServiceSpec = round_trip("CriticalService");
    assert_eq!(
        spec.provider.group_resource().to_string(),
        "deployments.apps"
    );
    assert_eq!(spec.provider.namespace, "finalizer-namespace");
    assert_eq!(spec.provider.name, "finalizer-deployment");
    assert_eq!(spec.criteria[0].type_, CriterionType::Finalizer);
    let f = spec.criteria[0].finalizer.as_ref().expect("finalizer");
    assert_eq!(f.finalizer_name, "my.crd.group/super-important");
    assert_eq!(f.group_resource().to_string(), "coolresources.my.crd.group");
    assert_eq!(spec.criteria[1].type_, CriterionType::SpecificResource);
    let s = spec.criteria[1]
        .specific_resource
        .as_ref()
        .expect("specificResource");
    assert_eq!(s.name, "coolresources.my.crd.group");
    assert!(s.namespace.is_none());
    // The wire name of the criterion type field is `type`.
    let v = serde_json::to_value(&spec.criteria[0]).expect("serializes");
    assert_eq!(v["type"], "Finalizer");
}

#[test]
fn whole_objects_round_trip_with_api_version_and_kind() {
    let yaml = r#"
apiVersion: holdfast.dev/v1alpha1
kind: AnchorRule
metadata:
  name: appcat-postgres
spec:
  anchor: {group: vshn.appcat.vshn.io, version: v1, resource: xvshnpostgresqls}
  anchorLabels: {name: appcat.vshn.io/composite-name}
  protects:
  - {version: v1, resource: namespaces}
status:
  observedGeneration: 3
  conditions:
  - {type: Ready, status: "True", reason: Loaded, message: "", lastTransitionTime: "2026-01-02T03:04:05Z"}
"#;
    let rule: AnchorRule = serde_saphyr::from_str(yaml).expect("parses");
    assert_eq!(rule.metadata.name.as_deref(), Some("appcat-postgres"));
    // Defaults: enforcement Enforce, group "" (core), no toggle.
    assert_eq!(rule.enforcement(), Enforcement::Enforce);
    assert_eq!(rule.spec.protects[0].group, "");
    assert!(rule.spec.toggle.is_none());
    assert_eq!(rule.observed_generation(), Some(3));
    assert!(api::is_condition_true(
        rule.conditions(),
        api::condition_types::READY
    ));
    assert_eq!(
        rule.targets(),
        vec![ResourceType::new("", "v1", "namespaces")]
    );

    let v = serde_json::to_value(&rule).expect("serializes");
    assert_eq!(v["apiVersion"], names::API_GROUP_VERSION);
    assert_eq!(v["kind"], "AnchorRule");
    assert_eq!(v["spec"]["enforcement"], "Enforce");
    assert_eq!(
        v["spec"]["anchorLabels"],
        json!({"name": "appcat.vshn.io/composite-name"})
    );
    assert_eq!(v["status"]["conditions"][0]["type"], "Ready");

    let rp = ResourceProtection::new(
        "x",
        serde_json::from_value(
            json!({"resources": [{"version": "v1", "resource": "namespaces", "names": ["prod"]}]}),
        )
        .expect("spec"),
    );
    assert_eq!(
        ResourceProtection::api_version(&()),
        names::API_GROUP_VERSION
    );
    assert_eq!(rp.enforcement(), Enforcement::Enforce);
    assert!(rp.conditions().is_empty());
    let v = serde_json::to_value(&rp).expect("serializes");
    assert_eq!(v["spec"]["strict"], false);
    assert!(v["spec"]["resources"][0].get("namespace").is_none());
}

#[test]
fn serde_defaults_and_rejections() {
    let toggle: api::Toggle =
        serde_json::from_value(json!({"fieldPath": ".spec.x"})).expect("toggle");
    assert!(toggle.default, "toggle.default defaults to true");
    for (value, want) in [
        ("Enforce", Enforcement::Enforce),
        ("Warn", Enforcement::Warn),
        ("Audit", Enforcement::Audit),
    ] {
        let e: Enforcement = serde_json::from_value(json!(value)).expect("enforcement");
        assert_eq!(e, want);
        assert_eq!(e.to_string(), value);
    }
    assert!(serde_json::from_value::<Enforcement>(json!("enforce")).is_err());
    assert!(serde_json::from_value::<CriterionType>(json!("Other")).is_err());
    assert!(
        Enforcement::Enforce.denies()
            && !Enforcement::Warn.denies()
            && !Enforcement::Audit.denies()
    );
    let dep: DependencyRuleSpec = serde_json::from_value(json!({
        "dependent": {"group": "g.io", "version": "v1", "kind": "K", "resource": "ks"},
        "dependencies": [{"version": "v1", "resource": "secrets", "fieldRef": {"path": ".spec.secretRef.name"},
                          "namespaceFieldRef": {"path": ".spec.secretRef.namespace"}}]
    }))
    .expect("cross-namespace dependency");
    assert_eq!(
        dep.dependencies[0]
            .namespace_field_ref
            .as_ref()
            .map(|f| f.path.as_str()),
        Some(".spec.secretRef.namespace")
    );
}

#[test]
fn helpers() {
    let t = ResourceType::new("apps", "v1", "deployments");
    assert_eq!(t.api_version(), "apps/v1");
    assert_eq!(t.to_string(), "deployments.v1.apps");
    assert_eq!(t.group_resource().to_string(), "deployments.apps");
    let core = ResourceType::new("", "v1", "pods");
    assert_eq!(core.api_version(), "v1");
    assert_eq!(core.to_string(), "pods.v1");
    assert_eq!(core.group_resource().to_string(), "pods");

    let rule: DependencyRule = DependencyRule::new(
        "r",
        serde_json::from_value(json!({
            "dependent": {"group": "c.io", "version": "v1", "kind": "VM", "resource": "vms"},
            "dependencies": [
                {"apiExportRef": {"path": "root:a", "name": "n.io"}, "group": "n.io", "version": "v1", "resource": "vpcs", "fieldRef": {"path": ".spec.vpc"}},
                {"apiExportRef": {"path": "root:a", "name": "n.io"}, "group": "n.io", "version": "v1", "resource": "vpcs", "fieldRef": {"path": ".spec.vpc2"}},
                {"apiExportRef": {"path": "root:b:c", "name": "s.io"}, "group": "s.io", "version": "v1", "resource": "subnets", "fieldRef": {"path": ".spec.subnet"}}
            ]
        }))
        .expect("spec"),
    );
    assert_eq!(
        rule.targets(),
        vec![
            ResourceType::new("n.io", "v1", "vpcs"),
            ResourceType::new("s.io", "v1", "subnets")
        ]
    );
    let paths: Vec<_> = rule
        .api_export_refs()
        .iter()
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(paths, vec!["root:a", "root:b:c"]);
    let cs: CriticalService = CriticalService::new(
        "c",
        serde_json::from_value(design_spec("CriticalService")).expect("spec"),
    );
    assert_eq!(cs.provider_group_resource().to_string(), "deployments.apps");
}

// ---------------------------------------------------------------------------
// Generated CRDs

fn schema_of(crd: &CustomResourceDefinition) -> Value {
    let version = &crd.spec.versions[0];
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("openAPIV3Schema");
    serde_json::to_value(schema).expect("schema serializes")
}

fn crd(name: &str) -> CustomResourceDefinition {
    api::crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no CRD {name}"))
}

#[test]
fn four_cluster_scoped_crds_with_status_names_and_columns() {
    let crds = api::crds();
    let names_in_order: Vec<_> = crds
        .iter()
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        names_in_order,
        vec![
            "resourceprotections.holdfast.dev",
            "anchorrules.holdfast.dev",
            "dependencyrules.holdfast.dev",
            "criticalservices.holdfast.dev"
        ]
    );
    let expected = [
        (
            "ResourceProtection",
            "rp",
            &["Enforcement", "Strict", "Mode", "Ready", "Age"][..],
        ),
        (
            "AnchorRule",
            "ar",
            &["Enforcement", "Anchor", "Toggle", "Ready", "Age"],
        ),
        (
            "DependencyRule",
            "dr",
            &["Enforcement", "Dependent", "Group", "Ready", "Age"],
        ),
        (
            "CriticalService",
            "cs",
            &[
                "Enforcement",
                "Provider",
                "Provider-Namespace",
                "Provider-Resource",
                "Ready",
                "Age",
            ],
        ),
    ];
    for (crd, (kind, short, columns)) in crds.iter().zip(expected) {
        assert_eq!(crd.spec.group, names::API_GROUP);
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(crd.spec.scope, "Cluster", "{kind} must be cluster-scoped");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&[short.to_string()][..])
        );
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["holdfast".to_string()][..])
        );
        assert_eq!(crd.spec.versions.len(), 1);
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, names::API_VERSION);
        assert!(v.served && v.storage);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{kind} needs the status subresource"
        );
        let cols = v.additional_printer_columns.as_deref().unwrap_or_default();
        let col_names: Vec<_> = cols.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(col_names, columns, "{kind} printer columns");
        let ready = cols
            .iter()
            .find(|c| c.name == "Ready")
            .expect("Ready column");
        assert_eq!(
            ready.json_path,
            r#".status.conditions[?(@.type=="Ready")].status"#
        );
        let age = cols.iter().find(|c| c.name == "Age").expect("Age column");
        assert_eq!(
            (age.type_.as_str(), age.json_path.as_str()),
            ("date", ".metadata.creationTimestamp")
        );
        let enf = cols
            .iter()
            .find(|c| c.name == "Enforcement")
            .expect("Enforcement column");
        assert_eq!(enf.json_path, ".spec.enforcement");

        let schema = schema_of(crd);
        assert!(
            schema["properties"]["status"]["properties"]["observedGeneration"].is_object(),
            "{kind} status.observedGeneration"
        );
        let conditions = &schema["properties"]["status"]["properties"]["conditions"];
        assert_eq!(
            conditions["x-kubernetes-list-type"], "map",
            "{kind} conditions list type"
        );
        assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
        let enforcement = &schema["properties"]["spec"]["properties"]["enforcement"];
        assert_eq!(
            enforcement["enum"],
            json!(["Enforce", "Warn", "Audit"]),
            "{kind}"
        );
        assert_eq!(enforcement["default"], "Enforce", "{kind}");
        assert_eq!(
            schema["required"],
            json!(["spec"]),
            "{kind}: spec is required"
        );
        // The kube `crd()` of each type is what `crds()` returns.
        let direct = match kind {
            "ResourceProtection" => ResourceProtection::crd(),
            "AnchorRule" => AnchorRule::crd(),
            "DependencyRule" => DependencyRule::crd(),
            _ => CriticalService::crd(),
        };
        assert_eq!(&direct, crd);
    }
}

/// Walks a schema and checks the structural-schema rules of
/// apiextensions.k8s.io/v1 that a generator can get wrong.
fn check_structural(node: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        errors.push(format!("{path}: schema is not an object"));
        return;
    };
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    match obj.get("type").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => {}
        _ if int_or_string || preserve => {}
        _ => errors.push(format!("{path}: no type")),
    }
    for forbidden in [
        "$ref",
        "$schema",
        "definitions",
        "$defs",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "uniqueItems",
        "additionalItems",
        "patternProperties",
        "dependencies",
        "const",
    ] {
        if obj.contains_key(forbidden) {
            errors.push(format!("{path}: has {forbidden}"));
        }
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        errors.push(format!("{path}: both properties and additionalProperties"));
    }
    if obj.get("type").and_then(Value::as_str) == Some("object")
        && !obj.contains_key("properties")
        && !obj.contains_key("additionalProperties")
        && !preserve
    {
        errors.push(format!("{path}: empty object schema"));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            let p = format!("{path}.{k}");
            if v.get("description")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errors.push(format!("{p}: no description"));
            }
            check_structural(v, &p, errors);
        }
        if let Some(required) = obj.get("required").and_then(Value::as_array) {
            for r in required {
                if !r.as_str().is_some_and(|r| props.contains_key(r)) {
                    errors.push(format!("{path}: required {r} is not a property"));
                }
            }
        }
    }
    if let Some(items) = obj.get("items") {
        check_structural(items, &format!("{path}[]"), errors);
        if obj.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
            let keys = obj
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array);
            let required = items.get("required").and_then(Value::as_array);
            match (keys, required) {
                (Some(keys), Some(required)) if !keys.is_empty() => {
                    for k in keys {
                        let defaulted = k
                            .as_str()
                            .and_then(|k| items["properties"].get(k))
                            .is_some_and(|p| p.get("default").is_some());
                        if !required.contains(k) && !defaulted {
                            errors.push(format!(
                                "{path}: map key {k} is neither required nor defaulted"
                            ));
                        }
                    }
                }
                _ => errors.push(format!("{path}: list-type map without keys or required")),
            }
        }
    }
    if let Some(ap) = obj.get("additionalProperties")
        && ap.is_object()
    {
        check_structural(ap, &format!("{path}{{}}"), errors);
    }
}

#[test]
fn crds_are_structural_and_documented() {
    for crd in api::crds() {
        let schema = schema_of(&crd);
        let mut errors = Vec::new();
        check_structural(&schema, "", &mut errors);
        assert!(
            errors.is_empty(),
            "{}:\n{}",
            crd.spec.names.kind,
            errors.join("\n")
        );
        let desc = schema["description"].as_str().unwrap_or_default();
        assert!(
            !desc.is_empty() && !desc.contains("Auto-generated"),
            "{}: root description {desc:?}",
            crd.spec.names.kind
        );
    }
}

/// All `x-kubernetes-validations` rules of a schema, with the path they sit at.
fn cel_rules(node: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    if let Some(rules) = node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for r in rules {
            out.push((path.to_string(), r.clone()));
        }
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            cel_rules(v, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = node.get("items") {
        cel_rules(items, &format!("{path}[]"), out);
    }
}

/// The schema node at a path written like `cel_rules` writes them.
fn node_at<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut node = schema;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, items) = match seg.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (seg, false),
        };
        node = &node["properties"][name];
        if items {
            node = &node["items"];
        }
    }
    node
}

#[test]
fn cel_rules_are_present_and_name_existing_fields() {
    let expected: [(&str, &[(&str, &str)]); 4] = [
        (
            "resourceprotections.holdfast.dev",
            &[
                (".spec.resources[]", "self.__namespace__"),
                (
                    ".spec.resources[]",
                    "self.resource == '*' || (self.group != '*'",
                ),
                (
                    ".spec.resources[]",
                    "!has(self.exclude) || self.resource == '*'",
                ),
            ],
        ),
        (
            "anchorrules.holdfast.dev",
            &[
                (".spec", "self.protects.all("),
                (".spec.protects[]", "self.inheritFromNamespace"),
            ],
        ),
        ("dependencyrules.holdfast.dev", &[(".spec", "exists_one")]),
        (
            "criticalservices.holdfast.dev",
            &[
                (".spec.criteria[]", "self.type != 'Finalizer'"),
                (".spec.criteria[]", "self.type != 'SpecificResource'"),
            ],
        ),
    ];
    for (name, want) in expected {
        let schema = schema_of(&crd(name));
        let mut rules = Vec::new();
        cel_rules(&schema, "", &mut rules);
        assert_eq!(rules.len(), want.len(), "{name}: {rules:#?}");
        for (path, needle) in want {
            assert!(
                rules
                    .iter()
                    .any(|(p, r)| p == path
                        && r["rule"].as_str().is_some_and(|r| r.contains(needle))),
                "{name}: no rule containing {needle:?} at {path}: {rules:#?}"
            );
        }
        for (path, rule) in &rules {
            let text = rule["rule"].as_str().expect("rule text");
            assert!(
                rule["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{name} {path}: rule without message"
            );
            // Every `self.<field>` names a property of the node the rule sits on
            // (CEL escapes reserved words such as namespace as __namespace__).
            let node = node_at(&schema, path);
            for (i, _) in text.match_indices("self.") {
                let field: String = text[i + 5..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let field = field
                    .strip_prefix("__")
                    .and_then(|f| f.strip_suffix("__"))
                    .unwrap_or(&field);
                assert!(
                    node["properties"].get(field).is_some(),
                    "{name} {path}: rule {text:?} names unknown field {field:?}"
                );
            }
            if let Some(fp) = rule.get("fieldPath").and_then(Value::as_str) {
                let field = fp.trim_start_matches('.');
                assert!(
                    node["properties"].get(field).is_some(),
                    "{name} {path}: bad fieldPath {fp}"
                );
            }
        }
    }
}

#[test]
fn schema_validation_details() {
    let rp = schema_of(&crd("resourceprotections.holdfast.dev"));
    let resources = node_at(&rp, ".spec.resources");
    assert_eq!(resources["minItems"], 1);
    assert_eq!(node_at(&rp, ".spec")["required"], json!(["resources"]));
    assert_eq!(
        node_at(&rp, ".spec.resources[]")["required"],
        json!(["resource", "version"])
    );
    assert!(
        node_at(&rp, ".spec.resources[].labelSelector")["properties"]["matchLabels"].is_object()
    );
    assert_eq!(node_at(&rp, ".spec.strict")["default"], false);

    let ar = schema_of(&crd("anchorrules.holdfast.dev"));
    assert_eq!(node_at(&ar, ".spec.toggle.default")["default"], true);
    assert!(
        node_at(&ar, ".spec.toggle.fieldPath")["pattern"]
            .as_str()
            .is_some_and(|p| p.starts_with(r"^\."))
    );
    assert_eq!(
        node_at(&ar, ".spec.protects[].inheritFromNamespace")["default"],
        false
    );
    assert_eq!(node_at(&ar, ".spec.protects")["minItems"], 1);
    assert_eq!(
        node_at(&ar, ".spec")["required"],
        json!(["anchor", "anchorLabels", "protects"])
    );

    let dr = schema_of(&crd("dependencyrules.holdfast.dev"));
    assert_eq!(
        node_at(&dr, ".spec.dependencies[].apiExportRef.path")["pattern"],
        api::common::WORKSPACE_PATH_PATTERN
    );
    assert_eq!(
        node_at(&dr, ".spec.dependencies[]")["required"],
        json!(["fieldRef", "resource", "version"])
    );
    assert!(node_at(&dr, ".spec.dependencies[].namespaceFieldRef").is_object());
    assert_eq!(
        node_at(&dr, ".status.workspaces")["x-kubernetes-list-type"],
        "map"
    );

    let cs = schema_of(&crd("criticalservices.holdfast.dev"));
    assert_eq!(
        node_at(&cs, ".spec.criteria[].type")["enum"],
        json!(["Finalizer", "SpecificResource"])
    );
    assert_eq!(
        node_at(&cs, ".spec.provider")["required"],
        json!(["name", "namespace", "resource"])
    );
    assert_eq!(
        node_at(&cs, ".spec.criteria[].finalizer")["required"],
        json!(["finalizerName", "resource"])
    );
}

#[test]
fn crds_yaml_is_deterministic_and_parses_back() {
    let a = api::crds_yaml().expect("yaml");
    let b = api::crds_yaml().expect("yaml");
    assert_eq!(a, b);
    assert!(a.starts_with("---\n"));
    assert_eq!(a.matches("\n---\n").count() + 1, 4, "four documents");
    let parsed: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&a).expect("YAML parses back");
    assert_eq!(parsed, api::crds());
    let files: Vec<_> = api::crds().iter().map(api::crd_file_name).collect();
    assert_eq!(
        files,
        vec![
            "holdfast.dev_resourceprotections.yaml",
            "holdfast.dev_anchorrules.yaml",
            "holdfast.dev_dependencyrules.yaml",
            "holdfast.dev_criticalservices.yaml"
        ]
    );
}

#[test]
fn structural_checker_catches_problems() {
    let bad = json!({
        "type": "object",
        "properties": {
            "a": {"description": "no type"},
            "b": {"type": "string"},
            "c": {"type": "object", "description": "empty"},
            "d": {"description": "ref", "$ref": "#/definitions/x", "type": "object", "properties": {}},
            "e": {"description": "map list", "type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["k"],
                  "items": {"type": "object", "properties": {"k": {"type": "string", "description": "k"}}}}
        }
    });
    let mut errors = Vec::new();
    check_structural(&bad, "", &mut errors);
    for want in [
        ".a: no type",
        ".b: no description",
        ".c: empty object schema",
        ".d: has $ref",
        ".e: list-type map",
    ] {
        assert!(
            errors.iter().any(|e| e.starts_with(want)),
            "missing {want:?} in {errors:#?}"
        );
    }
}
