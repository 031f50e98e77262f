//! Routes: selections become selectors and conditions, merged exactly and bounded.

use super::*;

pub(super) fn rp_named(name: &str, yaml: &str) -> ResourceProtection {
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
