//! Unit tests of `kcp/kinds.rs`.

use super::*;
use holdfast_shared::webhookconfig::{InstallOptions, WebhookTarget, workspace_configuration};
use serde_json::json;

fn binding(cluster: &str, name: &str, spec: Value, status: Value) -> (String, DynamicObject) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apis.kcp.io/v1alpha2", "kind": "APIBinding",
        "metadata": {"name": name, "annotations": {"kcp.io/cluster": cluster}},
        "spec": spec, "status": status,
    }))
    .expect("binding");
    (cluster.to_string(), obj)
}

fn holdfast_binding(cluster: &str, accepted: bool) -> (String, DynamicObject) {
    binding(
        cluster,
        "holdfast",
        json!({"reference": {"export": {"path": "root:holdfast", "name": "holdfast.dev"}},
               "permissionClaims": [{"group": "admissionregistration.k8s.io",
                   "resource": "validatingwebhookconfigurations", "verbs": ["*"],
                   "state": if accepted { "Accepted" } else { "Rejected" }}]}),
        json!({"apiExportClusterName": "hf"}),
    )
}

fn compute_binding(cluster: &str) -> (String, DynamicObject) {
    binding(
        cluster,
        "kubernetes",
        json!({"reference": {"export": {"path": "root:compute", "name": "kubernetes"}}}),
        json!({"apiExportClusterName": "comp", "boundResources": [
            {"group": "core", "resource": "persistentvolumeclaims"},
            {"group": "apps", "resource": "deployments"}]}),
    )
}

fn policy(
    cluster: &str,
    kind: &str,
    name: &str,
    spec: Value,
) -> (super::StoreKey, Arc<DynamicObject>) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name, "annotations": {"kcp.io/cluster": cluster}},
        "spec": spec,
    }))
    .expect("policy");
    (
        Arc::new((cluster.to_string(), name.to_string())),
        Arc::new(obj),
    )
}

fn fresh(kind: Kind, obj: &Arc<DynamicObject>) -> Arc<Decoded> {
    Arc::new(decode_policy(kind, obj))
}

fn bindings(list: &[(String, DynamicObject)]) -> Bindings {
    Bindings::of(
        list.iter().map(|(c, b)| (c.as_str(), b)),
        Some("hf"),
        "holdfast.dev",
    )
}

#[test]
fn the_export_cluster_is_read_from_an_endpoint_url() {
    assert_eq!(
        export_cluster_of(
            "https://shard:6443/services/apiexport/hf/holdfast.dev",
            "holdfast.dev"
        ),
        Some("hf".to_string())
    );
    assert_eq!(
        export_cluster_of("https://shard/services/apiexport/hf/other", "holdfast.dev"),
        None
    );
    assert_eq!(
        export_cluster_of("https://shard/clusters/hf/holdfast.dev", "holdfast.dev"),
        None
    );
}

#[test]
fn bindings_tell_who_binds_holdfast_and_where_types_come_from() {
    let list = [
        holdfast_binding("c1", true),
        compute_binding("c1"),
        holdfast_binding("c2", false),
        // Another export named holdfast.dev elsewhere is not holdfast's.
        binding(
            "c3",
            "fake",
            json!({"reference": {"export": {"path": "root:fake", "name": "holdfast.dev"}},
                   "permissionClaims": [{"group": "admissionregistration.k8s.io",
                       "resource": "validatingwebhookconfigurations", "state": "Accepted"}]}),
            json!({"apiExportClusterName": "fake"}),
        ),
        // Not bound yet.
        binding(
            "c4",
            "holdfast",
            json!({"reference": {"export": {"name": "holdfast.dev"}}}),
            json!({}),
        ),
    ];
    let b = bindings(&list);
    assert_eq!(b.holdfast, ["c1".to_string()].into());
    assert_eq!(b.unclaimed, ["c2".to_string()].into());
    assert_eq!(
        b.source("c1", &GroupResource::new("", "persistentvolumeclaims")),
        Some(&BoundFrom {
            cluster: "comp".into(),
            export: "kubernetes".into(),
            path: "root:compute".into()
        })
    );
    assert_eq!(b.source("c1", &GroupResource::new("", "configmaps")), None);
}

#[test]
fn policies_route_local_types_locally_and_bound_types_through_their_export() {
    let rp = policy(
        "c1",
        "ResourceProtection",
        "both",
        json!({"resources": [{"version": "v1", "resource": "configmaps"},
                             {"group": "apps", "version": "v1", "resource": "deployments"}]}),
    );
    let bad = policy("c1", "ResourceProtection", "bad", json!({"resources": []}));
    let objects = PerKind {
        resource_protections: vec![rp, bad],
        ..PerKind::default()
    };
    // The provider does not bind holdfast: blocked, nothing for it.
    let list = vec![holdfast_binding("c1", true), compute_binding("c1")];
    let p = plan(&objects, &fresh, &bindings(&list), "holdfast.dev");
    assert_eq!(p.targets.keys().collect::<Vec<_>>(), ["c1"]);
    let t = &p.targets["c1"];
    assert!(t.binds && t.exports.is_empty());
    assert_eq!(
        t.local.delete,
        [
            GroupResource::new("", "configmaps"),
            GroupResource::new("", "namespaces")
        ]
        .into()
    );
    let (reason, message) = p.policies[0].blocked.clone().expect("blocked");
    assert_eq!(reason, EXPORT_WORKSPACE_NOT_BOUND);
    assert_eq!(
        message,
        "deployments.apps comes from APIExport kubernetes in workspace root:compute (logical \
         cluster comp), whose workspace does not bind holdfast.dev with its claims accepted, and \
         kcp admits its DELETEs only through that workspace's webhook configurations: the \
         provider must bind holdfast.dev in root:compute and accept its claims (docs/kcp.md, \
         provider guide)"
    );
    assert_eq!(
        p.policies[1].invalid.as_ref().map(|i| i.reason),
        Some(reasons::INVALID_SPEC)
    );
    // The provider binds: its configuration routes the consumer's type.
    let mut list = list;
    list.push(holdfast_binding("comp", true));
    let p = plan(&objects, &fresh, &bindings(&list), "holdfast.dev");
    assert_eq!(p.policies[0].blocked, None);
    let comp = &p.targets["comp"];
    assert!(comp.binds);
    assert_eq!(
        comp.exports,
        [(
            "kubernetes".to_string(),
            [GroupResource::new("apps", "deployments")].into()
        )]
        .into()
    );
    assert_eq!(comp.rules, ["c1/both".to_string()].into());
    assert!(comp.strict_exports.is_empty(), "not a strict policy");
    // A strict one: the export's webhook takes its label-changing UPDATEs too.
    let strict = policy(
        "c1",
        "ResourceProtection",
        "strict",
        json!({"strict": true, "resources": [{"group": "apps", "version": "v1", "resource": "deployments"}]}),
    );
    let with_strict = PerKind {
        resource_protections: vec![strict],
        ..PerKind::default()
    };
    let p2 = plan(&with_strict, &fresh, &bindings(&list), "holdfast.dev");
    assert_eq!(
        p2.targets["comp"].strict_exports,
        [(
            "kubernetes".to_string(),
            [GroupResource::new("apps", "deployments")].into()
        )]
        .into()
    );
    // Installed only once both configurations route them.
    let opts = InstallOptions {
        target: WebhookTarget::Url("https://w/validate".into()),
        ca_bundle: Vec::new(),
        failure_policy: holdfast_shared::webhookconfig::FailurePolicy::Fail,
        timeout_seconds: 10,
    };
    let labels = holdfast_shared::labels::ProtectionLabels::default();
    let cfg = |lc: &str| {
        Arc::new(
            workspace_configuration(lc, &labels, false, &p.targets[lc], &opts)
                .expect("configuration"),
        )
    };
    let mut installed: BTreeMap<String, Arc<ValidatingWebhookConfiguration>> =
        [("c1".to_string(), cfg("c1"))].into();
    let all = |installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>| {
        crate::kcp::enforcement::Enforced {
            effective: installed.clone(),
            pending: BTreeMap::new(),
        }
    };
    let o = outcome(&p.policies[0], &installed, &all(&installed), None);
    assert!(!o.installed);
    assert_eq!(
        o.installed_message,
        "not yet routed to a policies webhook: deployments.apps (APIExport kubernetes in comp)"
    );
    installed.insert("comp".to_string(), cfg("comp"));
    let o = outcome(&p.policies[0], &installed, &all(&installed), None);
    assert!(o.installed, "{o:?}");
    assert_eq!(o.not_enforced, None);
    assert_eq!(
        o.installed_message,
        "DELETEs of configmaps, deployments.apps reach webhook(s) \
         kubernetes.policies.holdfast.dev (workspace comp), policies-0.holdfast.dev of \
         ValidatingWebhookConfiguration holdfast"
    );
    // Installed in comp, but kcp not seen enforcing it yet: not Ready.
    let mut waiting = all(&installed);
    waiting.effective.remove("comp");
    waiting
        .pending
        .insert("comp".to_string(), "the dry run was admitted".to_string());
    let o = outcome(&p.policies[0], &installed, &waiting, None);
    assert!(o.installed, "{o:?}");
    let why = o.not_enforced.as_deref().unwrap_or_default();
    assert!(
        why.contains("deployments.apps (APIExport kubernetes in comp)")
            && why.contains("comp: the dry run was admitted")
            && !why.contains("configmaps"),
        "{why}"
    );
}

#[test]
fn a_workspace_without_the_claim_is_told_so() {
    let cs = policy(
        "c2",
        "CriticalService",
        "dns",
        json!({"provider": {"group": "apps", "resource": "deployments",
                            "namespace": "kube-system", "name": "coredns"},
               "criteria": [{"type": "Finalizer", "finalizer": {"group": "example.io",
                   "resource": "widgets", "finalizerName": "example.io/keep"}}]}),
    );
    let list = [holdfast_binding("c2", false)];
    let p = plan(
        &PerKind {
            critical_services: vec![cs],
            ..PerKind::default()
        },
        &fresh,
        &bindings(&list),
        "holdfast.dev",
    );
    assert!(p.targets.is_empty(), "{:?}", p.targets);
    let e = &p.policies[0];
    assert_eq!(e.invalid, None, "{e:?}");
    assert_eq!(
        e.blocked.as_ref().map(|b| b.0),
        Some(WEBHOOK_CLAIM_NOT_ACCEPTED)
    );
    // Its own guard is left out on kcp.
    assert_eq!(
        e.local,
        [
            GroupResource::new("apps", "deployments"),
            GroupResource::new("", "namespaces")
        ]
    );
}
