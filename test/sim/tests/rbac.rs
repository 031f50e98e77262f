//! RBAC as kube-apiserver enforces it for stored objects: escalation prevention
//! on Roles/ClusterRoles and bindings, and ClusterRole aggregation.

mod common;

use common::{merge_patch, refused};

use holdfast_sim::{Sim, SimConfig, User};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

fn cfg() -> SimConfig {
    let mut cfg = SimConfig::default();
    cfg.users.push(User {
        name: "system:serviceaccount:ops:keeper".into(),
        token: "keeper-token".into(),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:ops".into(),
            "system:authenticated".into(),
        ],
        uid: None,
    });
    cfg
}

fn role(name: &str, labels: Value, rules: Value) -> ClusterRole {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "rules": rules,
    }))
    .expect("role")
}

fn binding(name: &str, role: &str) -> ClusterRoleBinding {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "keeper", "namespace": "ops"}],
    }))
    .expect("binding")
}

fn rules(v: Value) -> Option<Vec<PolicyRule>> {
    Some(serde_json::from_value(v).expect("rules"))
}

/// Adds `rule` to the keeper's own ClusterRole (as the admin).
async fn grant_keeper(admin_roles: &Api<ClusterRole>, rule: Value) {
    let mut keeper_role = admin_roles.get("keeper").await.expect("get");
    keeper_role
        .rules
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(rule).expect("rule"));
    admin_roles
        .replace("keeper", &PostParams::default(), &keeper_role)
        .await
        .expect("keeper role updated");
}

/// The keeper creates the role "other" with a rule it does not hold: refused.
async fn create_other(roles: &Api<ClusterRole>) -> kube::core::Status {
    let secrets = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]);
    let other = role("other", json!({}), secrets);
    refused(
        roles.create(&PostParams::default(), &other),
        "a role with rules not held",
    )
    .await
}

/// The simulator with the keeper service account, and admin and keeper clients.
async fn start() -> (holdfast_sim::SimHandle, kube::Client, kube::Client) {
    let sim = Sim::start(cfg()).await.expect("sim");
    let admin = sim.client().await.expect("admin");
    let keeper = sim
        .client_as("system:serviceaccount:ops:keeper")
        .await
        .expect("keeper");
    (sim, admin, keeper)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granting_rules_not_held_is_refused_unless_escalate() {
    let (sim, admin, keeper) = start().await;
    let admin_roles: Api<ClusterRole> = Api::all(admin.clone());
    let admin_bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let pp = PostParams::default();
    // The keeper may read ConfigMaps and update the role "reads" (no escalate yet).
    admin_roles
        .create(
            &pp,
            &role(
                "keeper",
                json!({}),
                json!([
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["reads"], "verbs": ["get", "update", "patch"]},
                    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}
                ]),
            ),
        )
        .await
        .expect("keeper role");
    admin_bindings
        .create(&pp, &binding("keeper", "keeper"))
        .await
        .expect("binding");
    admin_roles
        .create(&pp, &role("reads", json!({}), json!([])))
        .await
        .expect("reads");
    let roles: Api<ClusterRole> = Api::all(keeper.clone());

    // Rules it holds: allowed.
    let mut held = roles.get("reads").await.expect("get");
    held.rules =
        rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]));
    let held = roles
        .replace("reads", &pp, &held)
        .await
        .expect("held rules");

    // Rules it does not hold: refused with kube-apiserver's text.
    let mut more = held.clone();
    more.rules = rules(json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
        {"apiGroups": ["", "apps"], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"], "verbs": ["delete"]}
    ]));
    let s = refused(roles.replace("reads", &pp, &more), "escalation").await;
    assert_eq!(s.code, 403, "{s:?}");
    assert_eq!(s.reason, "Forbidden");
    assert_eq!(
        s.message,
        "clusterroles.rbac.authorization.k8s.io \"reads\" is forbidden: user \
         \"system:serviceaccount:ops:keeper\" (groups=[\"system:serviceaccounts\" \
         \"system:serviceaccounts:ops\" \"system:authenticated\"]) is attempting to grant RBAC \
         permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\" \"watch\"]}\n\
         {APIGroups:[\"apps\"], Resources:[\"deployments\"], ResourceNames:[\"web\"], Verbs:[\"delete\"]}\n\
         {APIGroups:[\"apps\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\" \"watch\"]}"
    );
    // Creating a role with rules not held: refused the same way.
    let s = create_other(&roles).await;
    assert_eq!(s.code, 403);
    assert!(
        s.message.starts_with(
            "clusterroles.rbac.authorization.k8s.io \"other\" is forbidden: user \"system:serviceaccount:ops:keeper\""
        ) && s.message.ends_with(
            "not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\"]}"
        ),
        "{}",
        s.message
    );

    // escalate on the one role: the same update goes through; the role's rules are
    // then held by whoever is bound to it.
    grant_keeper(&admin_roles, json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["reads"], "verbs": ["escalate"]})).await;
    let mut more = roles.get("reads").await.expect("get");
    more.rules = rules(
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]),
    );
    roles
        .replace("reads", &pp, &more)
        .await
        .expect("escalate allows it");
    // Only on that role: another name is still checked.
    let s = create_other(&roles).await;
    assert_eq!(s.code, 403);

    // Binding: needs the rules or bind. The keeper may create bindings but holds
    // nothing of "reads".
    grant_keeper(&admin_roles, json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"], "verbs": ["create"]})).await;
    let bindings: Api<ClusterRoleBinding> = Api::all(keeper.clone());
    let s = refused(
        bindings.create(&pp, &binding("self-reads", "reads")),
        "binding a role whose rules are not held",
    )
    .await;
    assert_eq!(s.code, 403);
    assert_eq!(
        s.message,
        "clusterrolebindings.rbac.authorization.k8s.io \"self-reads\" is forbidden: user \
         \"system:serviceaccount:ops:keeper\" (groups=[\"system:serviceaccounts\" \
         \"system:serviceaccounts:ops\" \"system:authenticated\"]) is attempting to grant RBAC \
         permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\" \"watch\"]}"
    );
    let s = refused(
        bindings.create(&pp, &binding("missing", "no-such-role")),
        "unknown role",
    )
    .await;
    assert_eq!(s.code, 404);
    assert_eq!(
        s.message,
        "clusterroles.rbac.authorization.k8s.io \"no-such-role\" not found"
    );
    // system:masters is never checked.
    admin_bindings
        .create(&pp, &binding("self-reads", "reads"))
        .await
        .expect("admin binds");
    // Now bound: the keeper reads Secrets.
    let secrets: Api<Secret> = Api::namespaced(keeper.clone(), "default");
    secrets
        .list(&ListParams::default())
        .await
        .expect("bound to reads");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_cluster_roles_follow_the_roles_they_select() {
    let (sim, admin, keeper) = start().await;
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let pp = PostParams::default();
    let aggregated: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "all-reads"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-reads": "true"}}]},
    }))
    .expect("role");
    roles.create(&pp, &aggregated).await.expect("aggregated");
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    bindings
        .create(&pp, &binding("all-reads", "all-reads"))
        .await
        .expect("binding");
    let wait_rules = |want: Value| {
        let roles = roles.clone();
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let got = roles.get("all-reads").await.expect("get");
                let rules = serde_json::to_value(&got.rules).expect("json");
                let rules = if rules.is_null() { json!([]) } else { rules };
                if rules == want {
                    return;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "rules of all-reads: {rules}, want {want}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let cm = json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]});
    let sec = json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]});
    let label = json!({"example.com/aggregate-to-reads": "true"});
    roles
        .create(&pp, &role("b-configmaps", label.clone(), json!([cm])))
        .await
        .expect("b");
    roles
        .create(&pp, &role("unlabelled", json!({}), json!([sec])))
        .await
        .expect("unlabelled");
    wait_rules(json!([cm])).await;
    // A second selected role: rules in name order, duplicates once.
    roles
        .create(&pp, &role("a-secrets", label.clone(), json!([sec, cm])))
        .await
        .expect("a");
    wait_rules(json!([sec, cm])).await;
    let secrets: Api<Secret> = Api::namespaced(keeper.clone(), "default");
    secrets
        .list(&ListParams::default())
        .await
        .expect("aggregated rule grants it");
    // A selected role changes, then loses its label: the union follows.
    roles
        .patch(
            "b-configmaps",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"example.com/aggregate-to-reads": null}}}),
            ),
        )
        .await
        .expect("unlabel");
    merge_patch(&roles, "a-secrets", json!({"rules": [cm]})).await;
    wait_rules(json!([cm])).await;
    let s = refused(secrets.list(&ListParams::default()), "no longer granted").await;
    assert_eq!(s.code, 403);
    // A non-admin may not create an aggregated role at all.
    let keeper_roles: Api<ClusterRole> = Api::all(keeper.clone());
    let mut mine = aggregated.clone();
    mine.metadata.name = Some("mine".into());
    roles
        .create(
            &pp,
            &role(
                "keeper-creates",
                json!({}),
                json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}]),
            ),
        )
        .await
        .expect("role");
    bindings
        .create(&pp, &binding("keeper-creates", "keeper-creates"))
        .await
        .expect("binding");
    let s = refused(
        keeper_roles.create(&pp, &mine),
        "aggregationRule needs full authority",
    )
    .await;
    assert_eq!(s.code, 403);
    assert_eq!(
        s.message,
        "clusterroles.rbac.authorization.k8s.io \"mine\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
    );
    sim.shutdown().await;
}
