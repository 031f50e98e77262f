//! kcp's configurations: a provider's export webhooks and a workspace's.

use super::*;

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
