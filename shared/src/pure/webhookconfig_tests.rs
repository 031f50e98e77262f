use super::*;

/// The configuration for `needs` with the default labels, not strict.
fn plain_configuration(needs: &PolicyNeeds) -> ValidatingWebhookConfiguration {
    desired_configuration_for(&ProtectionLabels::default(), false, needs, &opts())
}

/// Whether `cfg` has the webhook `name`.
fn has_hook(cfg: &ValidatingWebhookConfiguration, name: &str) -> bool {
    let hooks = cfg.webhooks.as_ref().expect("webhooks");
    hooks.iter().any(|h| h.name == name)
}

/// The merged DELETE rules for the resources `grs` (group, resource).
fn delete_rules(grs: &[(&str, &str)]) -> Vec<RuleWithOperations> {
    let set: BTreeSet<GroupResource> = grs.iter().map(|&(g, r)| GroupResource::new(g, r)).collect();
    merged_rules("DELETE", &set)
}

/// (API groups, resources) of each rule.
fn groups_and_resources(rules: &[RuleWithOperations]) -> Vec<(Vec<String>, Vec<String>)> {
    let pair = |r: &RuleWithOperations| {
        let groups = r.api_groups.clone().unwrap_or_default();
        (groups, r.resources.clone().unwrap_or_default())
    };
    rules.iter().map(pair).collect()
}

/// Install options for tests: a URL target on this host, Fail, 10 s.
pub(crate) fn opts() -> InstallOptions {
    InstallOptions {
        target: WebhookTarget::Url("https://127.0.0.1:8443/validate".into()),
        ca_bundle: b"PEM".to_vec(),
        failure_policy: FailurePolicy::Fail,
        timeout_seconds: 10,
    }
}

#[test]
fn one_delete_webhook_per_key_and_strict_updates() {
    let labels = crate::labels::karmada_always();
    let hooks = label_webhooks(&labels, false, &opts());
    assert_eq!(hooks.len(), 2);
    for (h, want) in hooks
        .iter()
        .zip(["'Always', 'true', 'Cascading'", "'Always'"])
    {
        let cond = &h.match_conditions.as_ref().expect("condition")[0].expression;
        assert!(
            cond.starts_with("request.operation == 'DELETE' || (has(object.metadata.labels)"),
            "{cond}"
        );
        assert!(cond.contains(&format!("in [{want}])")), "{cond}");
    }
    let keys: Vec<_> = hooks
        .iter()
        .map(|h| {
            h.object_selector
                .as_ref()
                .and_then(|s| s.match_expressions.as_ref())
                .map(|e| e[0].key.clone())
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            Some("holdfast.dev/protected".to_string()),
            Some("resourcetemplate.karmada.io/deletion-protected".to_string())
        ]
    );
    let strict = label_webhooks(&labels, true, &opts());
    assert_eq!(strict.len(), 4);
    let update = &strict[1];
    assert_eq!(
        update.rules.as_ref().map(|r| r[0].operations.clone()),
        Some(Some(vec!["UPDATE".to_string()]))
    );
    let cond = &update.match_conditions.as_ref().expect("condition")[0].expression;
    assert!(cond.starts_with("(oldObject != null"));
    assert!(cond.contains("holdfast.dev/skip-protection"));
    assert!(cond.contains("holdfast.dev/strict-exempt"));
    assert!(cond.contains("'holdfast.dev/protected' in oldObject.metadata.labels"));
}

#[test]
fn subresources_evictions_and_crds_reach_the_webhook() {
    let rule_resources = |h: &ValidatingWebhook| -> Vec<Vec<String>> {
        h.rules
            .iter()
            .flatten()
            .map(|r| r.resources.clone().unwrap_or_default())
            .collect()
    };
    let mut needs = PolicyNeeds::default();
    needs.add_resource_protection(&rp(
        "resources:\n- {group: apps, version: v1, resource: deployments}\n",
    ));
    let cfg = desired_configuration_for(&ProtectionLabels::default(), true, &needs, &opts());
    let hooks = cfg.webhooks.expect("webhooks");
    let by_name = |n: &str| {
        hooks
            .iter()
            .find(|h| h.name == n)
            .unwrap_or_else(|| panic!("no webhook {n}"))
    };
    // Strict label UPDATEs: every resource and every subresource.
    assert_eq!(
        rule_resources(by_name("strict-label-0.holdfast.dev")),
        vec![vec!["*/*".to_string()]]
    );
    // CRD DELETEs always (CRD containment), next to namespaces.
    let containment = by_name(CONTAINMENT_WEBHOOK);
    assert!(routes(
        &ValidatingWebhookConfiguration {
            webhooks: Some(vec![containment.clone()]),
            ..Default::default()
        },
        CONTAINMENT_WEBHOOK,
        "DELETE",
        &crds_gr()
    ));
    // Evictions: CREATE pods/eviction, no selector.
    let ev = by_name(EVICTION_WEBHOOK);
    assert_eq!(rule_resources(ev), vec![vec!["pods/eviction".to_string()]]);
    assert_eq!(ev.object_selector, Some(LabelSelector::default()));
    // Under --strict, break-glass markers on anything a policy protects, with
    // subresources.
    let bg = by_name(BREAK_GLASS_WEBHOOK);
    let all: Vec<String> = rule_resources(bg).into_iter().flatten().collect();
    for r in [
        "deployments",
        "deployments/*",
        "namespaces",
        "namespaces/*",
        "customresourcedefinitions",
        "customresourcedefinitions/*",
    ] {
        assert!(all.contains(&r.to_string()), "{r} missing from {all:?}");
    }
    let cond = &bg.match_conditions.as_ref().expect("condition")[0].expression;
    assert!(cond.ends_with(LABELS_CHANGED), "{cond}");
    // Not strict, no strict policy: no break-glass webhook.
    assert!(!has_hook(&plain_configuration(&needs), BREAK_GLASS_WEBHOOK));
}

#[test]
fn service_target_uses_validate_path() {
    let mut o = opts();
    o.target = WebhookTarget::Service {
        namespace: "holdfast-system".into(),
        name: "holdfast-webhook".into(),
        port: 443,
    };
    let cfg = desired_configuration(&ProtectionLabels::default(), false, &o);
    let hooks = cfg.webhooks.expect("webhooks");
    let svc = hooks[0].client_config.service.as_ref().expect("service");
    assert_eq!(svc.path.as_deref(), Some("/validate"));
    assert_eq!(cfg.metadata.name.as_deref(), Some("holdfast"));
}

fn rp(yaml: &str) -> ResourceProtection {
    let spec: crate::api::ResourceProtectionSpec =
        serde_json::from_value(serde_saphyr::from_str::<serde_json::Value>(yaml).expect("yaml"))
            .expect("spec");
    ResourceProtection::new("rp", spec)
}

fn dr(dependent: (&str, &str), deps: &[(&str, &str)]) -> DependencyRule {
    let spec = serde_json::json!({
        "dependent": {"group": dependent.0, "version": "v1", "kind": "Thing", "resource": dependent.1},
        "dependencies": deps.iter().map(|(g, r)| serde_json::json!({
            "group": g, "version": "v1", "resource": r, "fieldRef": {"path": ".spec.ref"}
        })).collect::<Vec<_>>(),
    });
    DependencyRule::new("dr", serde_json::from_value(spec).expect("spec"))
}

#[test]
fn policies_merge_into_one_webhook_grouped_by_api_group() {
    let mut needs = PolicyNeeds::default();
    needs.add_resource_protection(&rp(
            "resources:\n- {group: apps, version: v1, resource: deployments}\n- {group: apps, version: v1, resource: statefulsets, namespace: shop}\n- {group: apiextensions.k8s.io, version: v1, resource: customresourcedefinitions, names: [things.example.com]}\n",
        ));
    needs.add_dependency_rule(&dr(
        ("compute.test.io", "virtualmachines"),
        &[("network.test.io", "vpcs"), ("network.test.io", "subnets")],
    ));
    let needs = needs.with_containment(well_known_scope);
    let cfg = plain_configuration(&needs);
    let hooks = cfg.webhooks.clone().expect("webhooks");
    let names: Vec<_> = hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "delete-label-0.holdfast.dev",
            CONTAINMENT_WEBHOOK,
            "policies-0.holdfast.dev",
            "policies-1.holdfast.dev",
            "policies-2.holdfast.dev",
            EVICTION_WEBHOOK,
            DEFERRED_WEBHOOK,
            CONTAINMENT_MARKER_WEBHOOK,
        ]
    );
    // Every namespace but the system ones: the CRD (cluster-scoped, no namespace
    // narrowing), deployments and the dependency types.
    let rules = hooks[3].rules.clone().expect("rules");
    let flat = groups_and_resources(&rules);
    assert_eq!(
        flat,
        vec![
            (vec!["apps".to_string()], vec!["deployments".to_string()]),
            (
                vec!["network.test.io".to_string()],
                vec!["subnets".to_string(), "vpcs".to_string()]
            ),
        ]
    );
    assert_eq!(
        hooks[3].namespace_selector,
        Some(NamespaceScope::not_system().selector())
    );
    // The CRD by name, every namespace (cluster-scoped).
    let crd = &hooks[2];
    assert_eq!(
        crd.rules.as_ref().and_then(|r| r[0].resources.clone()),
        Some(vec!["customresourcedefinitions".to_string()])
    );
    assert_eq!(crd.namespace_selector, Some(LabelSelector::default()));
    assert_eq!(
        crd.match_conditions
            .as_ref()
            .map(|c| c[0].expression.as_str()),
        Some("oldObject == null || oldObject.metadata.name in ['things.example.com']")
    );
    // StatefulSets in shop only.
    let sts = &hooks[4];
    assert_eq!(
        sts.namespace_selector,
        Some(NamespaceScope::Only(["shop".to_string()].into()).selector())
    );
    let rules = [hooks[3].clone(), crd.clone(), sts.clone()]
        .iter()
        .flat_map(|h| h.rules.clone().unwrap_or_default())
        .collect::<Vec<_>>();
    assert!(
        rules
            .iter()
            .all(|r| r.operations == Some(vec!["DELETE".to_string()])
                && r.api_versions == Some(vec!["*".to_string()]))
    );
    assert!(routes(
        &cfg,
        "policies-1.holdfast.dev",
        "DELETE",
        &GroupResource::new("apps", "deployments")
    ));
    assert!(!routes(
        &cfg,
        "policies-1.holdfast.dev",
        "DELETE",
        &GroupResource::new("apps", "daemonsets")
    ));
    assert!(!routes(
        &cfg,
        "policies-1.holdfast.dev",
        "UPDATE",
        &GroupResource::new("apps", "deployments")
    ));
}

#[test]
fn namespace_deletes_reach_containment_everywhere_until_marked() {
    let cfg = desired_configuration(&ProtectionLabels::default(), false, &opts());
    let ns = GroupResource::new("", "namespaces");
    assert!(routes(&cfg, CONTAINMENT_WEBHOOK, "DELETE", &ns));
    assert!(!routes(
        &cfg,
        CONTAINMENT_WEBHOOK,
        "DELETE",
        &GroupResource::new("", "configmaps")
    ));
    let hooks = cfg.webhooks.clone().expect("webhooks");
    assert_eq!(hooks[1].name, CONTAINMENT_WEBHOOK);
    assert_eq!(hooks[1].namespace_selector, Some(LabelSelector::default()));
    assert_eq!(
        hooks.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        vec![
            "delete-label-0.holdfast.dev",
            CONTAINMENT_WEBHOOK,
            EVICTION_WEBHOOK,
            DEFERRED_WEBHOOK,
            CONTAINMENT_MARKER_WEBHOOK
        ],
        "no policies: no policies-<i> webhook"
    );
    let needs = PolicyNeeds {
        containment: Containment::Marked,
        ..Default::default()
    };
    let cfg = plain_configuration(&needs);
    let hooks = cfg.webhooks.expect("webhooks");
    assert_eq!(
        hooks[1].namespace_selector,
        Some(exists(CONTAINS_PROTECTED_LABEL))
    );
}

#[test]
fn identical_resource_lists_share_a_rule() {
    let rules = delete_rules(&[("a.io", "things"), ("b.io", "things"), ("c.io", "others")]);
    assert_eq!(rules.len(), 2);
    assert_eq!(
        rules[0].api_groups,
        Some(vec!["a.io".to_string(), "b.io".to_string()])
    );
}

#[test]
fn wildcards_become_lone_star_rules_and_leave_types_out() {
    // A wildcard over a group swallows that group's other resources; every
    // group swallows everything; `*` never becomes `*/*` for DELETE.
    let rules = delete_rules(&[("apps", "*"), ("apps", "deployments"), ("", "configmaps")]);
    let view = groups_and_resources(&rules);
    assert_eq!(
        view,
        vec![
            (vec![String::new()], vec!["configmaps".to_string()]),
            (vec!["apps".to_string()], vec!["*".to_string()]),
        ]
    );
    let all: BTreeSet<GroupResource> = [
        GroupResource::new("*", "*"),
        GroupResource::new("", "configmaps"),
    ]
    .into();
    assert_eq!(merged_rules("DELETE", &all), vec![all_resources("DELETE")]);
    // UPDATE subresources of a wildcard: `*/*` alone.
    let upd = with_subresources(merged_rules("UPDATE", &all));
    assert_eq!(upd[0].resources, Some(vec!["*/*".to_string()]));

    let p = rp(
        "resources:\n- {group: apps, version: '*', resource: '*', exclude: [{group: apps, resource: replicasets}]}\n",
    );
    assert!(p.spec.validate().is_empty(), "{:?}", p.spec.validate());
    let routes = resource_protection_routes(&p);
    assert_eq!(routes.len(), 1);
    let r = &routes[0];
    assert!(r.covers(&GroupResource::new("apps", "deployments")));
    assert!(!r.covers(&GroupResource::new("apps", "replicasets")));
    assert!(!r.covers(&GroupResource::new("", "configmaps")));
    assert_eq!(
        r.exclude_condition().map(|c| c.expression),
        Some(
            "!((request.resource.group == 'apps' && request.resource.resource == 'replicasets'))"
                .to_string()
        )
    );
    // Every group: the types never selected by a wildcard are left out.
    let every = rp("resources:\n- {group: '*', version: '*', resource: '*'}\n");
    let r = &resource_protection_routes(&every)[0];
    for (g, res) in [
        ("", "events"),
        ("coordination.k8s.io", "leases"),
        ("holdfast.dev", "resourceprotections"),
    ] {
        assert!(!r.covers(&GroupResource::new(g, res)), "{g}/{res}");
    }
    assert!(r.covers(&GroupResource::new("example.com", "widgets")));
    // Misuse is refused by validate() as by the schema.
    for bad in [
        "resources:\n- {group: '*', version: v1, resource: configmaps}\n",
        "resources:\n- {version: v1, resource: configmaps, exclude: [{resource: secrets}]}\n",
    ] {
        assert!(!rp(bad).spec.validate().is_empty(), "{bad}");
    }
}

#[test]
fn cluster_scoped_only_needs_no_namespaces() {
    let mut needs = PolicyNeeds::default();
    needs.add_resource_protection(&rp(
            "resources:\n- {group: apiextensions.k8s.io, version: v1, resource: customresourcedefinitions}\n",
        ));
    let needs = needs.with_containment(well_known_scope);
    assert!(!needs.delete.contains(&GroupResource::new("", "namespaces")));
    let mut needs = PolicyNeeds::default();
    needs.add_resource_protection(&rp(
        "resources:\n- {group: x.io, version: v1, resource: unknowns}\n",
    ));
    let needs = needs.with_containment(|_| Scope::Unknown);
    assert!(needs.delete.contains(&GroupResource::new("", "namespaces")));
}

#[test]
fn strict_policy_adds_strict_label_and_break_glass_webhooks() {
    let mut needs = PolicyNeeds::default();
    needs.add_resource_protection(&rp(
        "strict: true\nresources:\n- {group: \"\", version: v1, resource: configmaps}\n",
    ));
    let cfg = plain_configuration(&needs);
    let hooks = cfg.webhooks.expect("webhooks");
    let names: Vec<_> = hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "delete-label-0.holdfast.dev",
            "strict-label-0.holdfast.dev",
            CONTAINMENT_WEBHOOK,
            "policies-0.holdfast.dev",
            EVICTION_WEBHOOK,
            DEFERRED_WEBHOOK,
            BREAK_GLASS_WEBHOOK,
            CONTAINMENT_MARKER_WEBHOOK
        ]
    );
    let bg = &hooks[6];
    assert_eq!(bg.rules.as_ref().map(|r| r.len()), Some(1));
    let cond = &bg.match_conditions.as_ref().expect("conditions")[0].expression;
    assert!(cond.contains("'holdfast.dev/skip-protection' in object.metadata.annotations"));
    assert!(cond.contains("'appcat.vshn.io/webhook-allowdeletion' in object.metadata.labels"));
    // Not strict: no break-glass webhook.
    let mut needs = PolicyNeeds::default();
    needs.add_resource_protection(&rp(
        "resources:\n- {group: \"\", version: v1, resource: configmaps}\n",
    ));
    assert!(!has_hook(&plain_configuration(&needs), BREAK_GLASS_WEBHOOK));
}

#[test]
fn critical_service_needs_provider_namespaces_and_itself() {
    let cs: CriticalService = serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService",
            "metadata": {"name": "cs"},
            "spec": {"provider": {"group": "apps", "resource": "deployments", "namespace": "f", "name": "d"},
                     "criteria": [{"type": "Finalizer", "finalizer": {"group": "my.io", "resource": "things", "finalizerName": "my.io/f"}}]}
        }))
        .expect("cs");
    let needs = critical_service_needs(&cs);
    assert_eq!(
        needs,
        vec![
            GroupResource::new("apps", "deployments"),
            GroupResource::new("", "namespaces"),
            GroupResource::new("holdfast.dev", "criticalservices"),
        ]
    );
}

#[test]
fn live_comparison_tolerates_defaults_and_catches_edits() {
    let mut needs = PolicyNeeds::default();
    needs.add_resource_protection(&rp(
        "resources:\n- {group: apps, version: v1, resource: deployments}\n",
    ));
    let desired = desired_configuration_for(&ProtectionLabels::default(), true, &needs, &opts());
    let mut live = serde_json::to_value(&desired).expect("json");
    assert!(matches_desired(
        &serde_json::from_value(live.clone()).expect("vwc"),
        &desired
    ));
    // Server-side additions: uid, resourceVersion, an extra label.
    live["metadata"]["uid"] = "u".into();
    live["metadata"]["labels"]["extra"] = "x".into();
    let with_meta: ValidatingWebhookConfiguration =
        serde_json::from_value(live.clone()).expect("vwc");
    assert!(matches_desired(&with_meta, &desired));
    // Edits: failure policy, removed webhook, added object selector, added condition.
    let mut edited = live.clone();
    edited["webhooks"][0]["failurePolicy"] = "Ignore".into();
    assert!(!matches_desired(
        &serde_json::from_value(edited).expect("vwc"),
        &desired
    ));
    let mut edited = live.clone();
    edited["webhooks"].as_array_mut().expect("array").pop();
    assert!(!matches_desired(
        &serde_json::from_value(edited).expect("vwc"),
        &desired
    ));
    let mut edited = live.clone();
    edited["webhooks"][2]["objectSelector"] = serde_json::json!({"matchLabels": {"a": "b"}});
    assert!(!matches_desired(
        &serde_json::from_value(edited).expect("vwc"),
        &desired
    ));
    let mut edited = live.clone();
    edited["webhooks"][2]["matchConditions"] =
        serde_json::json!([{"name": "n", "expression": "false"}]);
    assert!(!matches_desired(
        &serde_json::from_value(edited).expect("vwc"),
        &desired
    ));
    let mut edited = live;
    edited["webhooks"][2]["rules"][0]["resources"] = serde_json::json!(["*"]);
    assert!(!matches_desired(
        &serde_json::from_value(edited).expect("vwc"),
        &desired
    ));
}

#[test]
fn report_names_what_each_webhook_routes_and_its_outage() {
    let needs = PolicyNeeds {
        routes: resource_protection_routes(&rp_named(
            "shop",
            "resources:\n- {group: \"\", version: v1, resource: configmaps, namespace: shop, names: [settings]}\n",
        )),
        containment: Containment::Marked,
        ..Default::default()
    };
    let cfg = plain_configuration(&needs);
    assert_eq!(
            describe_configuration(&cfg),
            format!(
            "ValidatingWebhookConfiguration holdfast: 6 webhook(s)
delete-label-0.holdfast.dev
  requests:   DELETE *.*
  requests:   CREATE *.*
  requests:   UPDATE */*.*
  namespaces: all
  objects:    holdfast.dev/protected
  condition:  delete-or-protection-label-look-alike: request.operation == 'DELETE' || (has(object.metadata.labels) && 'holdfast.dev/protected' in object.metadata.labels && !(object.metadata.labels['holdfast.dev/protected'] in ['Always', 'true', 'Cascading']) && object.metadata.labels['holdfast.dev/protected'].trim().lowerAscii() in ['always', 'true', 'cascading'] && (oldObject == null || !has(oldObject.metadata.labels) || !('holdfast.dev/protected' in oldObject.metadata.labels) || oldObject.metadata.labels['holdfast.dev/protected'] != object.metadata.labels['holdfast.dev/protected']))
  outage:     failurePolicy Fail: these requests are refused while the webhook cannot be reached; a hung webhook holds each for up to 10s
containment.holdfast.dev
  requests:   DELETE namespaces
  requests:   DELETE customresourcedefinitions.apiextensions.k8s.io
  namespaces: holdfast.dev/contains-protected
  objects:    all
  outage:     failurePolicy Fail: these requests are refused while the webhook cannot be reached; a hung webhook holds each for up to 10s
policies-0.holdfast.dev
  requests:   DELETE configmaps
  namespaces: kubernetes.io/metadata.name in (shop)
  objects:    all
  condition:  object-name: oldObject == null || oldObject.metadata.name in ['settings']
  outage:     failurePolicy Fail: these requests are refused while the webhook cannot be reached; a hung webhook holds each for up to 10s
eviction.holdfast.dev
  requests:   CREATE pods/eviction
  namespaces: holdfast.dev/contains-protected
  objects:    all
  outage:     failurePolicy Fail: these requests are refused while the webhook cannot be reached; a hung webhook holds each for up to 10s
deferred.holdfast.dev
  requests:   CREATE,UPDATE */*.*
  namespaces: all
  objects:    all
  condition:  deferred-deletion-requested: {}
  outage:     failurePolicy Fail: these requests are refused while the webhook cannot be reached; a hung webhook holds each for up to 10s
containment-marker.holdfast.dev
  requests:   UPDATE namespaces namespaces/*
  namespaces: all
  objects:    all
  condition:  containment-marker-removed: {}
  outage:     failurePolicy Fail: these requests are refused while the webhook cannot be reached; a hung webhook holds each for up to 10s
",
            deferred_condition(),
            label_changed_condition(CONTAINS_PROTECTED_LABEL)
        )
        );
}

#[test]
fn failure_policy_parses() {
    assert_eq!("Ignore".parse(), Ok(FailurePolicy::Ignore));
    assert!("Maybe".parse::<FailurePolicy>().is_err());
}

#[test]
fn settings_annotation_round_trips_and_names_each_difference() {
    use crate::labels::{ProtectionLabel, ProtectionLabels};
    let karmada: ProtectionLabel = "resourcetemplate.karmada.io/deletion-protected=Always"
        .parse()
        .expect("label");
    let with = ProtectionLabels::with_extra(vec![karmada]);
    let without = ProtectionLabels::with_extra(vec![]);
    let a = settings_annotation(&with, true);
    assert_eq!(
        a,
        r#"{"protectionLabels":["holdfast.dev/protected=Always,Cascading,true","resourcetemplate.karmada.io/deletion-protected=Always"],"strict":true}"#
    );
    assert_eq!(settings_disagreement(&a, &with, true), None);
    assert_eq!(
        settings_disagreement(&a, &with, false).as_deref(),
        Some(
            "the controller runs with strict=true, this webhook with strict=false (HOLDFAST_STRICT)"
        )
    );
    assert_eq!(
        settings_disagreement(&a, &without, true).as_deref(),
        Some(
            "the controller protects with labels [holdfast.dev/protected=Always,Cascading,true \
                 resourcetemplate.karmada.io/deletion-protected=Always], this webhook with \
                 [holdfast.dev/protected=Always,Cascading,true] (HOLDFAST_PROTECTION_LABELS)"
        )
    );
    assert!(
        settings_disagreement("{", &with, true)
            .is_some_and(|m| m.starts_with("holdfast.dev/settings \"{\" does not parse: "))
    );
    assert_eq!(
        settings_disagreement(r#"{"protectionLabels":[]}"#, &with, true).as_deref(),
        Some("holdfast.dev/settings has no boolean \"strict\"")
    );
    assert_eq!(
        settings_disagreement(r#"{"strict":"yes","protectionLabels":[1]}"#, &with, true).as_deref(),
        Some(
            "holdfast.dev/settings has no boolean \"strict\"; holdfast.dev/settings has no \
             list of strings \"protectionLabels\""
        )
    );
    assert_eq!(
        settings_disagreement(r#"[["a=b"],true]"#, &with, true).as_deref(),
        Some(
            "holdfast.dev/settings has no boolean \"strict\"; holdfast.dev/settings has no \
             list of strings \"protectionLabels\""
        )
    );
    // Read back: the same settings, labels that publish the same; fields it does
    // not know are ignored.
    let published = PublishedSettings::parse(&a).expect("parses");
    assert_eq!(published, PublishedSettings::for_settings(&with, true));
    let labels = published.labels().expect("labels");
    assert_eq!(PublishedSettings::for_settings(&labels, true), published);
    assert_eq!(
        PublishedSettings::parse(r#"{"strict":false,"protectionLabels":[],"more":1}"#),
        Ok(PublishedSettings {
            protection_labels: vec![],
            strict: false
        })
    );
    let cfg = desired_configuration(&with, true, &opts());
    assert_eq!(
        cfg.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SETTINGS_ANNOTATION)),
        Some(&a)
    );
}

#[path = "webhookconfig_tests_kcp.rs"]
mod kcp_configurations;
#[path = "webhookconfig_tests_routes.rs"]
mod routing;
use routing::rp_named;
