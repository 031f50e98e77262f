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

fn opts() -> InstallOptions {
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
fn provider_configuration_has_one_webhook_per_export_and_one_entry_per_resource() {
    let gr = |r: &str| GroupResource::new("network.test.io", r);
    let exports: BTreeMap<String, BTreeSet<GroupResource>> = [
        ("net-a".to_string(), [gr("subnets"), gr("vpcs")].into()),
        ("net-b".to_string(), [gr("vpcs")].into()),
    ]
    .into();
    let rules: BTreeSet<String> = ["c1/a".to_string(), "c1/b".to_string()].into();
    let cfg = provider_configuration("lc1", &exports, &rules, &opts());
    let hooks = cfg.webhooks.clone().expect("webhooks");
    let shape: Vec<(String, Option<String>, Option<usize>)> = hooks
        .iter()
        .map(|h| {
            (
                h.name.clone(),
                h.client_config.url.clone(),
                h.rules.as_ref().map(Vec::len),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (
                "net-a.policies.holdfast.dev".to_string(),
                Some("https://127.0.0.1:8443/validate/kcp/lc1/net-a".to_string()),
                Some(2)
            ),
            (
                "net-b.policies.holdfast.dev".to_string(),
                Some("https://127.0.0.1:8443/validate/kcp/lc1/net-b".to_string()),
                Some(1)
            ),
        ]
    );
    assert!(routes(
        &cfg,
        "net-a.policies.holdfast.dev",
        "DELETE",
        &gr("subnets")
    ));
    assert!(!routes(
        &cfg,
        "net-b.policies.holdfast.dev",
        "DELETE",
        &gr("subnets")
    ));
    assert!(routes(
        &cfg,
        "net-b.policies.holdfast.dev",
        "DELETE",
        &gr("vpcs")
    ));
    assert_eq!(
        cfg.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RULES_ANNOTATION))
            .map(String::as_str),
        Some("c1/a,c1/b")
    );
    assert!(matches_desired(&cfg, &cfg));
    let fewer = provider_configuration("lc1", &exports, &["c1/a".to_string()].into(), &opts());
    assert!(!matches_desired(&cfg, &fewer), "the annotation is compared");
    let elsewhere = provider_configuration("lc2", &exports, &rules, &opts());
    assert!(!matches_desired(&cfg, &elsewhere), "the URL is compared");
    // A Service target gets the same path.
    let svc = InstallOptions {
        target: WebhookTarget::Service {
            namespace: "holdfast".into(),
            name: "holdfast-webhook".into(),
            port: 443,
        },
        ..opts()
    };
    let cfg = provider_configuration("lc1", &exports, &rules, &svc);
    let paths: Vec<String> = cfg
        .webhooks
        .iter()
        .flatten()
        .filter_map(|h| h.client_config.service.as_ref()?.path.clone())
        .collect();
    assert_eq!(
        paths,
        ["/validate/kcp/lc1/net-a", "/validate/kcp/lc1/net-b"]
    );
}

#[test]
fn workspace_configuration_holds_the_workspace_types_and_its_exports() {
    let labels = ProtectionLabels::default();
    let gr = |g: &str, r: &str| GroupResource::new(g, r);
    // Neither binding holdfast nor routing for consumers: nothing.
    assert_eq!(
        workspace_configuration("lc1", &labels, false, &WorkspaceTarget::default(), &opts()),
        None
    );
    let rp: ResourceProtection = serde_json::from_value(serde_json::json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
        "metadata": {"name": "cms"},
        "spec": {"resources": [{"version": "v1", "resource": "configmaps"}]}
    }))
    .expect("rp");
    let mut local = PolicyNeeds::default();
    local.add_resource_protection(&rp);
    let local = local.with_containment(well_known_scope);
    let target = WorkspaceTarget {
        binds: true,
        local,
        exports: [("kubernetes".to_string(), [gr("apps", "deployments")].into())].into(),
        rules: ["lc2/deploys".to_string()].into(),
        ..WorkspaceTarget::default()
    };
    let cfg =
        workspace_configuration("lc1", &labels, false, &target, &opts()).expect("configuration");
    let shape: Vec<(String, Option<String>)> = cfg
        .webhooks
        .iter()
        .flatten()
        .map(|h| (h.name.clone(), h.client_config.url.clone()))
        .collect();
    let url = |s: &str| Some(format!("https://127.0.0.1:8443/validate/kcp/{s}"));
    assert_eq!(
        shape,
        vec![
            ("delete-label-0.holdfast.dev".to_string(), url("lc1")),
            (CONTAINMENT_WEBHOOK.to_string(), url("lc1")),
            ("policies-0.holdfast.dev".to_string(), url("lc1")),
            (
                "kubernetes.policies.holdfast.dev".to_string(),
                url("lc1/kubernetes")
            ),
            (
                crate::enforcement::WEBHOOK_NAME.to_string(),
                Some("https://127.0.0.1:8443/validate/enforcement-probe".to_string())
            ),
        ]
    );
    let hooks = cfg.webhooks.as_ref().expect("webhooks");
    // The probe, last, names the digest of everything above it, recorded in
    // the annotation the controller probes by.
    let probe = crate::enforcement::probe_name(&hooks[..hooks.len() - 1]);
    assert_eq!(
        cfg.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::enforcement::ANNOTATION)),
        Some(&probe)
    );
    let conditions =
        serde_json::to_value(&hooks[hooks.len() - 1].match_conditions).expect("conditions");
    assert_eq!(
        conditions[0]["expression"],
        format!("object.metadata.name == '{probe}'")
    );
    // Each is for the workspace's own objects only (kcp calls it for the
    // consumers' objects of its exported types too).
    for h in &hooks[..3] {
        let conditions = h.match_conditions.as_ref().expect("conditions");
        assert_eq!(
            conditions
                .last()
                .map(|c| (c.name.as_str(), c.expression.clone())),
            Some(("object-of-this-workspace", of_workspace_condition("lc1"))),
            "{}",
            h.name
        );
    }
    assert_eq!(hooks[3].match_conditions, None, "the export webhook");
    assert_eq!(
        of_workspace_condition("lc1"),
        "(oldObject == null || !has(oldObject.metadata.annotations) \
             || !('kcp.io/cluster' in oldObject.metadata.annotations) \
             || oldObject.metadata.annotations['kcp.io/cluster'] == 'lc1') \
             && (object == null || !has(object.metadata.annotations) \
             || !('kcp.io/cluster' in object.metadata.annotations) \
             || object.metadata.annotations['kcp.io/cluster'] == 'lc1')"
    );
    // Containment routes every namespace (no markers on kcp).
    assert_eq!(hooks[1].namespace_selector, Some(LabelSelector::default()));
    assert!(routes(
        &cfg,
        CONTAINMENT_WEBHOOK,
        "DELETE",
        &gr("", "namespaces")
    ));
    assert!(routes(
        &cfg,
        CONTAINMENT_WEBHOOK,
        "DELETE",
        &gr("apiextensions.k8s.io", "customresourcedefinitions")
    ));
    assert!(routes(
        &cfg,
        "policies-0.holdfast.dev",
        "DELETE",
        &gr("", "configmaps")
    ));
    assert!(!routes(
        &cfg,
        "policies-0.holdfast.dev",
        "DELETE",
        &gr("apps", "deployments")
    ));
    assert!(routes(
        &cfg,
        "kubernetes.policies.holdfast.dev",
        "DELETE",
        &gr("apps", "deployments")
    ));
    let annotations = cfg.metadata.annotations.clone().expect("annotations");
    assert_eq!(
        annotations.get(RULES_ANNOTATION).map(String::as_str),
        Some("lc2/deploys")
    );
    assert_eq!(
        annotations.get(SETTINGS_ANNOTATION),
        Some(&settings_annotation(&labels, false))
    );
    // Strict: the strict label webhook and break-glass too.
    let strict =
        workspace_configuration("lc1", &labels, true, &target, &opts()).expect("configuration");
    let names = |cfg: &ValidatingWebhookConfiguration| -> Vec<String> {
        let hooks = cfg.webhooks.iter().flatten();
        hooks.map(|h| h.name.clone()).collect()
    };
    assert_eq!(
        names(&strict),
        [
            "delete-label-0.holdfast.dev",
            "strict-label-0.holdfast.dev",
            CONTAINMENT_WEBHOOK,
            "policies-0.holdfast.dev",
            BREAK_GLASS_WEBHOOK,
            "kubernetes.policies.holdfast.dev",
            crate::enforcement::WEBHOOK_NAME,
        ]
    );
    // Strict: the export's webhook also takes the break-glass and label-changing
    // UPDATEs of its resources (as it does for a consumer's strict policy).
    let deployments = gr("apps", "deployments");
    assert!(routes(
        &strict,
        "kubernetes.policies.holdfast.dev",
        "UPDATE",
        &deployments
    ));
    assert!(!routes(
        &cfg,
        "kubernetes.policies.holdfast.dev",
        "UPDATE",
        &deployments
    ));
    let strict_rp = WorkspaceTarget {
        strict_exports: [("kubernetes".to_string(), [deployments.clone()].into())].into(),
        ..target.clone()
    };
    let cfg = workspace_configuration("lc1", &labels, false, &strict_rp, &opts()).expect("cfg");
    let hook = cfg
        .webhooks
        .iter()
        .flatten()
        .find(|h| h.name == "kubernetes.policies.holdfast.dev")
        .expect("export webhook");
    assert_eq!(
        hook.rules.as_ref().map(|r| groups_and_resources(r)),
        Some(vec![
            (vec!["apps".to_string()], vec!["deployments".to_string()]),
            (
                vec!["apps".to_string()],
                vec!["deployments".to_string(), "deployments/*".to_string()]
            ),
        ])
    );
    let condition = &hook.match_conditions.as_ref().expect("condition")[0].expression;
    assert_eq!(
        condition,
        &format!(
            "request.operation == 'DELETE' || {} || {LABELS_CHANGED}",
            break_glass_condition()
        )
    );
    // A provider workspace that does not bind holdfast: its exports only, exactly
    // as provider_configuration builds them.
    let provider = WorkspaceTarget {
        binds: false,
        ..target.clone()
    };
    // (and the enforcement probe)
    let without_probe =
        workspace_configuration("lc1", &labels, false, &provider, &opts()).map(|mut c| {
            if let Some(h) = c.webhooks.as_mut() {
                h.retain(|h| h.name != crate::enforcement::WEBHOOK_NAME);
            }
            if let Some(a) = c.metadata.annotations.as_mut() {
                a.remove(crate::enforcement::ANNOTATION);
            }
            c
        });
    assert_eq!(
        without_probe,
        Some(provider_configuration(
            "lc1",
            &provider.exports,
            &provider.rules,
            &opts()
        ))
    );
    // Bound, nothing else: label protection and containment only.
    let bare = WorkspaceTarget {
        binds: true,
        ..WorkspaceTarget::default()
    };
    let cfg = workspace_configuration("lc9", &labels, false, &bare, &opts()).expect("cfg");
    assert_eq!(
        names(&cfg),
        [
            "delete-label-0.holdfast.dev",
            CONTAINMENT_WEBHOOK,
            crate::enforcement::WEBHOOK_NAME
        ]
    );
}

#[test]
fn merged_needs_are_the_needs_of_both_policies() {
    let rp = |name: &str, strict: bool, resource: &str| -> ResourceProtection {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
            "metadata": {"name": name},
            "spec": {"strict": strict, "resources": [{"version": "v1", "resource": resource}]}
        }))
        .expect("rp")
    };
    let (a, b) = (rp("a", false, "configmaps"), rp("b", true, "secrets"));
    let mut both = PolicyNeeds::default();
    both.add_resource_protection(&a);
    both.add_resource_protection(&b);
    let (mut merged, mut alone) = (PolicyNeeds::default(), PolicyNeeds::default());
    merged.add_resource_protection(&a);
    alone.add_resource_protection(&b);
    merged.merge(&alone);
    assert_eq!(merged, both);
    assert!(merged.strict_labels);
}

#[test]
fn export_webhook_names_are_fully_qualified_and_bounded() {
    assert_eq!(
        export_policies_webhook("network.test.io"),
        "network.test.io.policies.holdfast.dev"
    );
    let long = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    assert_eq!(long.len(), 253);
    let name = export_policies_webhook(&long);
    assert!(name.len() <= 253, "{name}");
    assert!(crate::api::validation::dns_subdomain(&name), "{name}");
    assert_eq!(name, export_policies_webhook(&long), "stable");
    let other = format!("{}e", &long[..252]);
    assert_ne!(name, export_policies_webhook(&other));
}

fn rp_named(name: &str, yaml: &str) -> ResourceProtection {
    let mut p = rp(yaml);
    p.metadata.name = Some(name.to_string());
    p
}

fn obj_labels(pairs: &[(&str, &str)]) -> serde_json::Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect()
}

#[test]
fn selections_become_selectors_and_conditions() {
    let routes = resource_protection_routes(&rp_named(
        "shop",
        "resources:\n- {group: \"\", version: v1, resource: configmaps, namespace: shop, names: [settings, prices], labelSelector: {matchLabels: {app: web}}}\n",
    ));
    assert_eq!(routes.len(), 1);
    let r = &routes[0];
    assert_eq!(
        r.namespaces,
        NamespaceScope::Only(["shop".to_string()].into())
    );
    assert_eq!(r.policies, ["ResourceProtection/shop".to_string()].into());
    let cm = GroupResource::new("", "configmaps");
    let web = obj_labels(&[("app", "web")]);
    assert!(r.matches(&cm, Some("shop"), None, "settings", Some(&web)));
    assert!(!r.matches(&cm, Some("other"), None, "settings", Some(&web)));
    assert!(!r.matches(&cm, Some("shop"), None, "unrelated", Some(&web)));
    assert!(!r.matches(&cm, Some("shop"), None, "settings", None));
    let needs = PolicyNeeds {
        routes,
        ..Default::default()
    };
    let cfg = plain_configuration(&needs);
    let h = &cfg.webhooks.expect("webhooks")[2];
    assert_eq!(h.name, "policies-0.holdfast.dev");
    assert_eq!(
        serde_json::to_value(&h.namespace_selector).expect("json"),
        serde_json::json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["shop"]}]})
    );
    assert_eq!(
        serde_json::to_value(&h.object_selector).expect("json"),
        serde_json::json!({"matchLabels": {"app": "web"}})
    );
    assert_eq!(
        serde_json::to_value(&h.match_conditions).expect("json"),
        serde_json::json!([{"name": "object-name", "expression": "oldObject == null || oldObject.metadata.name in ['prices', 'settings']"}])
    );
}

#[test]
fn namespace_less_selections_skip_system_namespaces_unless_named() {
    let all = resource_protection_routes(&rp_named(
        "all",
        "resources:\n- {group: \"\", version: v1, resource: secrets}\n",
    ));
    let secrets = GroupResource::new("", "secrets");
    assert!(all[0].matches(&secrets, Some("shop"), None, "s", None));
    for ns in SYSTEM_NAMESPACES {
        assert!(!all[0].matches(&secrets, Some(ns), None, "s", None), "{ns}");
    }
    // A policy naming kube-system adds it back, in the same entry.
    let sys = resource_protection_routes(&rp_named(
        "sys",
        "resources:\n- {group: \"\", version: v1, resource: secrets, namespace: kube-system}\n",
    ));
    let merged = merge_routes([all, sys].concat(), MAX_POLICY_WEBHOOKS);
    assert_eq!(merged.len(), 1);
    assert_eq!(
        merged[0].namespaces,
        NamespaceScope::AllBut(["kube-node-lease".to_string(), "kube-public".to_string()].into())
    );
    assert_eq!(
        merged[0].policies,
        [
            "ResourceProtection/all".to_string(),
            "ResourceProtection/sys".to_string()
        ]
        .into()
    );
}

#[test]
fn merge_joins_resources_namespaces_and_names_exactly() {
    let routes: Vec<Route> = [
        "- {group: \"\", version: v1, resource: configmaps, namespace: shop}",
        "- {group: \"\", version: v1, resource: secrets, namespace: shop}",
        "- {group: \"\", version: v1, resource: configmaps, namespace: billing}",
        "- {group: \"\", version: v1, resource: secrets, namespace: billing}",
        "- {group: apps, version: v1, resource: deployments, namespace: shop, names: [a]}",
        "- {group: apps, version: v1, resource: deployments, namespace: shop, names: [b]}",
    ]
    .iter()
    .enumerate()
    .flat_map(|(i, sel)| {
        resource_protection_routes(&rp_named(&format!("p{i}"), &format!("resources:\n{sel}\n")))
    })
    .collect();
    let merged = merge_routes(routes, MAX_POLICY_WEBHOOKS);
    assert_eq!(merged.len(), 2, "{merged:#?}");
    assert_eq!(
        merged[0].resources,
        [
            GroupResource::new("", "configmaps"),
            GroupResource::new("", "secrets")
        ]
        .into()
    );
    assert_eq!(
        merged[0].namespaces,
        NamespaceScope::Only(["billing".to_string(), "shop".to_string()].into())
    );
    assert_eq!(merged[0].names, None);
    assert_eq!(
        merged[1].resources,
        [GroupResource::new("apps", "deployments")].into()
    );
    assert_eq!(
        merged[1].names,
        Some(["a".to_string(), "b".to_string()].into())
    );
    // Different label selectors are never ORed (a LabelSelector cannot).
    let two = [
            "- {group: \"\", version: v1, resource: configmaps, labelSelector: {matchLabels: {a: x}}}",
            "- {group: \"\", version: v1, resource: configmaps, labelSelector: {matchLabels: {b: yes-b}}}",
        ]
        .iter()
        .flat_map(|sel| resource_protection_routes(&rp_named("l", &format!("resources:\n{sel}\n"))))
        .collect();
    assert_eq!(merge_routes(two, MAX_POLICY_WEBHOOKS).len(), 2);
}

/// Every object some original route sends to the webhook is still sent by the
/// merged routes, however many policies there are, and the entry count stays
/// bounded.
#[test]
fn merge_is_bounded_and_never_narrower() {
    let cm = GroupResource::new("", "configmaps");
    let mut routes = Vec::new();
    for i in 0..200 {
        routes.extend(resource_protection_routes(&rp_named(
                &format!("p{i}"),
                &format!(
                    "resources:\n- {{group: \"\", version: v1, resource: {}, namespace: ns{i}, names: [n{i}], labelSelector: {{matchLabels: {{team: t{i}}}}}}}\n",
                    if i % 2 == 0 { "configmaps" } else { "secrets" }
                ),
            )));
    }
    let mut anchor = AnchorRule::new(
            "db",
            serde_json::from_value(serde_json::json!({
                "anchor": {"group": "x.io", "version": "v1", "resource": "dbs"},
                "anchorLabels": {"name": "x.io/db"},
                "protects": [{"group": "", "version": "v1", "resource": "persistentvolumeclaims", "inheritFromNamespace": true}]
            }))
            .expect("spec"),
        );
    anchor.metadata.name = Some("db".into());
    routes.extend(anchor_rule_routes(&anchor));
    for max in [1, 2, 4, MAX_POLICY_WEBHOOKS] {
        let merged = merge_routes(routes.clone(), max);
        assert!(
            !merged.is_empty() && merged.len() <= max,
            "{max}: {}",
            merged.len()
        );
        let covered = |gr: &GroupResource,
                       ns: &str,
                       ns_labels: Option<&serde_json::Map<String, Value>>,
                       name: &str,
                       labels: &serde_json::Map<String, Value>| {
            merged
                .iter()
                .any(|r| r.matches(gr, Some(ns), ns_labels, name, Some(labels)))
        };
        for i in 0..200 {
            let gr = if i % 2 == 0 {
                cm.clone()
            } else {
                GroupResource::new("", "secrets")
            };
            let team = format!("t{i}");
            assert!(
                covered(
                    &gr,
                    &format!("ns{i}"),
                    None,
                    &format!("n{i}"),
                    &obj_labels(&[("team", &team)])
                ),
                "max {max}: object {i} no longer routed"
            );
        }
        let pvc = GroupResource::new("", "persistentvolumeclaims");
        assert!(covered(
            &pvc,
            "any",
            None,
            "data",
            &obj_labels(&[("x.io/db", "d")])
        ));
        let ns_labels = obj_labels(&[("x.io/db", "d")]);
        assert!(covered(
            &pvc,
            "db-ns",
            Some(&ns_labels),
            "data",
            &obj_labels(&[])
        ));
        let policies: BTreeSet<String> = merged.iter().flat_map(|r| r.policies.clone()).collect();
        assert_eq!(policies.len(), 201, "every policy stays accounted for");
    }
    // Exact merging alone already keeps unrelated selections apart.
    assert_eq!(merge_routes(routes.clone(), 1000).len(), 202);
    // The configuration obeys the bound.
    let needs = PolicyNeeds {
        routes,
        ..Default::default()
    };
    let cfg = plain_configuration(&needs);
    let n = cfg
        .webhooks
        .expect("webhooks")
        .iter()
        .filter(|h| is_policies_webhook(&h.name))
        .count();
    // Names, then label selectors dropped: configmaps and secrets in the 200
    // namespaces, and every PersistentVolumeClaim.
    assert_eq!(n, 3);
}

#[test]
fn anchor_and_critical_service_routes() {
    let ar: AnchorRule = serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "AnchorRule", "metadata": {"name": "pg"},
            "spec": {"anchor": {"group": "x.io", "version": "v1", "resource": "dbs"},
                     "anchorLabels": {"name": "x.io/db"},
                     "protects": [{"group": "", "version": "v1", "resource": "namespaces"},
                                  {"group": "", "version": "v1", "resource": "persistentvolumeclaims", "inheritFromNamespace": true}]}
        }))
        .expect("ar");
    let routes = anchor_rule_routes(&ar);
    assert_eq!(routes.len(), 3);
    assert_eq!(routes[0].labels, Some(exists("x.io/db")));
    assert_eq!(
        routes[2].namespaces,
        NamespaceScope::Labelled("x.io/db".into())
    );
    assert_eq!(routes[2].labels, None);
    let cs: CriticalService = serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "CriticalService", "metadata": {"name": "cs"},
            "spec": {"provider": {"group": "apps", "resource": "deployments", "namespace": "f", "name": "d"},
                     "criteria": [{"type": "Finalizer", "finalizer": {"group": "my.io", "resource": "things", "finalizerName": "my.io/f"}}]}
        }))
        .expect("cs");
    let routes = critical_service_routes(&cs);
    let dep = GroupResource::new("apps", "deployments");
    let ns = GroupResource::new("", "namespaces");
    let any = |gr: &GroupResource, ns: Option<&str>, name: &str| {
        routes.iter().any(|r| r.matches(gr, ns, None, name, None))
    };
    assert!(any(&dep, Some("f"), "d"));
    assert!(!any(&dep, Some("f"), "other"));
    assert!(!any(&dep, Some("g"), "d"));
    assert!(any(&ns, Some("f"), "f"));
    assert!(!any(&ns, Some("g"), "g"));
    assert!(any(
        &GroupResource::new("holdfast.dev", "criticalservices"),
        None,
        "cs"
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
    let cfg = desired_configuration(&with, true, &opts());
    assert_eq!(
        cfg.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SETTINGS_ANNOTATION)),
        Some(&a)
    );
}
