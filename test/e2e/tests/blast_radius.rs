//! An outage of holdfast blocks only what holdfast protects: the real controller
//! narrows the configuration to what the policies and labels name, marks the
//! namespaces holding routed objects, and with the webhook process stopped only
//! DELETEs of protected objects (and of the namespaces holding them) are refused.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use holdfast_e2e::fixtures::resource_protection;
use holdfast_e2e::{
    Env, bin,
    controller::{ControllerProcess, condition, wait_configuration},
    steps::{exists, refused, refused_exactly_until, wait_ready, words},
};
use serde_json::Value;

const MARKER: &str = "holdfast.dev/contains-protected";

/// holdfast as `manifests/overlays/kubernetes` ships it
/// ([`holdfast_e2e::controller::shipped_stack`]): the webhook and the controller
/// running as their ServiceAccounts with exactly the permissions the manifests
/// grant, holdfast's own objects in namespace `holdfast-system`.
async fn full_stack() -> (Env, ControllerProcess) {
    let s = holdfast_e2e::controller::shipped_stack(
        holdfast_e2e::with_service_accounts(holdfast_sim::SimConfig::default()),
        &[],
        &[],
    )
    .await
    .expect("holdfast as shipped");
    (s.env, s.controller)
}

/// The namespaces a cluster starts with, and holdfast's own.
const THE_CLUSTERS: [&str; 5] = [
    "default",
    "holdfast-system",
    "kube-node-lease",
    "kube-public",
    "kube-system",
];

/// The namespaces carrying the containment marker, sorted: on a simulator all of
/// them; on a cluster those among the test's namespaces `ours` and
/// [`THE_CLUSTERS`] (the cluster's other namespaces are not the test's to judge).
fn marked(env: &Env, ours: &[&str]) -> Vec<String> {
    let out = env.run(&[
        "get",
        "namespaces",
        "-l",
        MARKER,
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    let mut v: Vec<String> = out
        .stdout
        .split_whitespace()
        .filter(|n| env.cluster.is_none() || ours.contains(n) || THE_CLUSTERS.contains(n))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// Waits until the marked namespaces ([`marked`], among `ours`) are exactly
/// `want`.
async fn wait_marked(env: &Env, ours: &[&str], want: &[&str]) {
    let mut want: Vec<&str> = want.to_vec();
    want.sort_unstable();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = marked(env, ours);
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "marked namespaces never became {want:?}; last: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until namespace DELETEs are routed for marked namespaces only.
async fn wait_containment_narrowed(env: &Env) -> Value {
    let (cfg, _) = wait_configuration(env, Duration::from_secs(30), |c| {
        c.is_some_and(|c| {
            c["webhooks"].as_array().into_iter().flatten().any(|w| {
                w["name"] == "containment.holdfast.dev"
                    && w["namespaceSelector"]
                        == serde_json::json!({"matchExpressions": [{"key": MARKER, "operator": "Exists"}]})
            })
        })
    })
    .await
    .expect("containment narrowed to marked namespaces");
    cfg.expect("present")
}

fn shop_config(shop: &str) -> String {
    resource_protection(
        "shop-config",
        "",
        &[&format!(
            r#"{{group: "", version: v1, resource: configmaps, namespace: {shop}}}"#
        )],
    )
}

/// A name for an object of the test's own in a namespace of the cluster's
/// (kube-system): `prefix` on a simulator, `prefix-<8 hex digits>` on a cluster,
/// where it is removed when the env drops should the test not delete it.
fn in_cluster_namespace(env: &Env, namespace: &str, kind: &str, prefix: &str) -> String {
    let name = match env.cluster {
        Some(_) => holdfast_e2e::unique_name(prefix),
        None => prefix.to_string(),
    };
    env.remove_later_in(namespace, kind, &name);
    name
}

/// What kubectl prints when the API server cannot reach webhook `name` at
/// `port`: the process is gone (connection refused).
fn webhook_down(name: &str, port: u16) -> String {
    let host = holdfast_e2e::e2e_webhook_host();
    format!(
        "Error from server (InternalError): Internal error occurred: failed calling webhook \"{name}\": failed to call webhook: Post \"https://{host}:{port}/validate?timeout=10s\": dial tcp {host}:{port}: connect: connection refused\n"
    )
}

fn routes_report(env: &Env) -> String {
    let out = Command::new(bin("holdfast-controller").expect("binary"))
        .args(["routes", "--kubeconfig"])
        .arg(&env.kubeconfig)
        .output()
        .expect("holdfast-controller routes runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("utf8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_outage_blocks_only_what_holdfast_protects() {
    let (mut env, controller) = full_stack().await;
    let [shop, other, scratch, labelled] =
        ["shop", "other", "scratch", "labelled"].map(|n| env.namespace(n).expect("namespace"));
    let ours = [shop.as_str(), &other, &scratch, &labelled];
    // Objects of the test's own in kube-system, a namespace of the cluster's.
    let sys_cm = in_cluster_namespace(&env, "kube-system", "configmap", "sys-cm");
    let sys_secret = in_cluster_namespace(&env, "kube-system", "secret", "sys-secret");
    env.run(&words(&format!(
        "create configmap settings -n {shop} --from-literal=a=b"
    )));
    for (name, ns) in [
        ("unrelated", other.as_str()),
        ("keep", &labelled),
        (&sys_cm, "kube-system"),
    ] {
        env.run(&["create", "configmap", name, "-n", ns, "--from-literal=a=b"]);
    }
    env.run(&words(&format!(
        "label configmap keep -n {labelled} holdfast.dev/protected=true"
    )));
    env.run(&words(&format!(
        "create secret generic {sys_secret} -n kube-system --from-literal=a=b"
    )));
    env.apply(&shop_config(&shop)).expect("policy applied");
    wait_ready(&env, "resourceprotection", "shop-config").await;
    // holdfast-system holds holdfast's own protected Role and RoleBinding.
    wait_marked(&env, &ours, &["holdfast-system", &labelled, &shop]).await;
    let cfg = wait_containment_narrowed(&env).await;

    // The configuration: the policy's entry only sees ConfigMaps in shop.
    let policies: Vec<&Value> = cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| {
            w["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("policies-"))
        })
        .collect();
    assert_eq!(policies.len(), 1, "{cfg}");
    assert_eq!(policies[0]["name"], "policies-0.holdfast.dev");
    assert_eq!(
        policies[0]["namespaceSelector"],
        serde_json::json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [shop]}]})
    );
    assert_eq!(
        policies[0]["rules"][0]["resources"],
        serde_json::json!(["configmaps"])
    );

    // Per policy, its status names the webhooks its DELETEs reach.
    let installed = condition(&env, "resourceprotection", "shop-config", "Installed")
        .expect("kubectl")
        .expect("installed condition");
    assert_eq!(
        installed["message"],
        "DELETEs of configmaps reach webhook(s) policies-0.holdfast.dev of ValidatingWebhookConfiguration holdfast"
    );

    // The blast radius, as an SRE reads it.
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    // The label webhook also sees CREATE/UPDATE, but only of look-alike values.
    const LOOK_ALIKE: &str = "delete-or-protection-label-look-alike: request.operation == 'DELETE' || (has(object.metadata.labels) && 'holdfast.dev/protected' in object.metadata.labels && !(object.metadata.labels['holdfast.dev/protected'] in ['Always', 'true', 'Cascading']) && object.metadata.labels['holdfast.dev/protected'].trim().lowerAscii() in ['always', 'true', 'cascading'] && (oldObject == null || !has(oldObject.metadata.labels) || !('holdfast.dev/protected' in oldObject.metadata.labels) || oldObject.metadata.labels['holdfast.dev/protected'] != object.metadata.labels['holdfast.dev/protected']))";
    let mut marked_names = ["holdfast-system", labelled.as_str(), &shop];
    marked_names.sort_unstable();
    let outage = "  outage:     failurePolicy Fail: these requests are refused while the webhook cannot be reached; a hung webhook holds each for up to 10s\n";
    assert_eq!(
        routes_report(&env),
        format!(
            "ValidatingWebhookConfiguration holdfast: 6 webhook(s)\n\
             delete-label-0.holdfast.dev\n  requests:   DELETE *.*\n  requests:   CREATE *.*\n  requests:   UPDATE */*.*\n  namespaces: all\n  objects:    holdfast.dev/protected\n  condition:  {LOOK_ALIKE}\n{outage}\
             containment.holdfast.dev\n  requests:   DELETE namespaces\n  requests:   DELETE customresourcedefinitions.apiextensions.k8s.io\n  namespaces: {MARKER}\n  objects:    all\n{outage}\
             policies-0.holdfast.dev\n  requests:   DELETE configmaps\n  namespaces: kubernetes.io/metadata.name in ({shop})\n  objects:    all\n{outage}\
             eviction.holdfast.dev\n  requests:   CREATE pods/eviction\n  namespaces: {MARKER}\n  objects:    all\n{outage}\
             deferred.holdfast.dev\n  requests:   CREATE,UPDATE */*.*\n  namespaces: all\n  objects:    all\n  condition:  deferred-deletion-requested: {deferred}\n{outage}\
             containment-marker.holdfast.dev\n  requests:   UPDATE namespaces namespaces/*\n  namespaces: all\n  objects:    all\n  condition:  containment-marker-removed: {marker_removed}\n{outage}\
             namespaces labelled {MARKER}: {marked}\n",
            deferred = holdfast_shared::webhookconfig::deferred_condition(),
            marker_removed = holdfast_shared::webhookconfig::label_changed_condition(MARKER),
            marked = marked_names.join(", "),
        )
    );

    // With the webhook up: the same refusals as without narrowing.
    let denial = |webhook: &str, msg: &str| {
        format!(
            "Error from server (Forbidden): admission webhook \"{webhook}\" denied the request: {msg}\n"
        )
    };
    let shop_cm = format!(
        "holdfast: ConfigMap {shop}/settings is protected by ResourceProtection/shop-config (selects configmaps in namespace {shop}), so it cannot be deleted. To delete it, remove it from the policy (kubectl edit resourceprotection shop-config), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection. To have holdfast delete it once nothing blocks it, ask for deferred deletion (holdfast.dev/delete-when-unblocked)."
    );
    env.refuses(
        &words(&format!(
            "delete configmap settings -n {shop} --dry-run=server"
        )),
        &denial("policies-0.holdfast.dev", &shop_cm),
    );
    let out = env.attempt(&words(&format!(
        "delete configmap keep -n {labelled} --dry-run=server"
    )));
    refused(
        &out,
        &denial(
            "delete-label-0.holdfast.dev",
            &format!(
                "holdfast: ConfigMap {labelled}/keep is protected by label holdfast.dev/protected=true (policy: label holdfast.dev/protected), so it cannot be deleted. To delete it, remove the label (kubectl label configmaps keep -n {labelled} holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
            ),
        ),
    );
    // The namespaces holding them: refused by containment (once the webhook, as
    // its ServiceAccount, may read what they hold).
    for (ns, holds) in [
        (
            &shop,
            format!(
                "ConfigMap {shop}/kube-root-ca.crt (ResourceProtection/shop-config), ConfigMap {shop}/settings (ResourceProtection/shop-config)"
            ),
        ),
        (&labelled, format!("ConfigMap {labelled}/keep (label)")),
    ] {
        refused_exactly_until(
            &env,
            &["delete", "namespace", ns, "--dry-run=server"],
            &denial(
                "containment.holdfast.dev",
                &format!(
                    "holdfast: Namespace {ns} holds objects that are protected from deletion: {holds} (policy: containment), so it cannot be deleted: that would leave it half-deleted. To delete it, first lift the protection of those objects (or delete them), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection on the namespace."
                ),
            ),
        )
        .await;
    }

    // The webhook process stops (a crash, an upgrade, a partition).
    // Dropping the process handle kills it and waits for it.
    drop(env.webhook.take().expect("webhook running"));
    // Protected objects, and the namespaces holding them, stay refused.
    for (delete, webhook) in [
        (
            format!("delete configmap settings -n {shop}"),
            "policies-0.holdfast.dev",
        ),
        (
            format!("delete namespace {shop}"),
            "containment.holdfast.dev",
        ),
        (
            format!("delete configmap keep -n {labelled}"),
            "delete-label-0.holdfast.dev",
        ),
        (
            format!("delete namespace {labelled}"),
            "containment.holdfast.dev",
        ),
    ] {
        env.refuses(&words(&delete), &webhook_down(webhook, port));
    }
    exists(&env, &["configmap", "settings", "-n", &shop]);
    exists(&env, &["configmap", "keep", "-n", &labelled]);
    let phase = env.run(&["get", "namespace", &shop, "-o", "jsonpath={.status.phase}"]);
    assert_eq!(phase.stdout, "Active");

    // Everything else goes: a ConfigMap elsewhere, an unprotected namespace,
    // anything in kube-system.
    env.prints(
        &["delete", "configmap", "unrelated", "-n", &other],
        "configmap \"unrelated\" deleted\n",
    );
    env.prints(
        &["delete", "namespace", &scratch, "--wait=false"],
        &format!("namespace \"{scratch}\" deleted\n"),
    );
    env.prints(
        &["delete", "configmap", &sys_cm, "-n", "kube-system"],
        &format!("configmap \"{sys_cm}\" deleted\n"),
    );
    env.prints(
        &["delete", "secret", &sys_secret, "-n", "kube-system"],
        &format!("secret \"{sys_secret}\" deleted\n"),
    );
    drop(controller);
}

/// The marker follows the objects: labelling an object marks its namespace,
/// unlabelling it removes the marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn markers_follow_protected_objects() {
    let (env, _controller) = full_stack().await;
    let a = env.namespace("a").expect("namespace");
    let ours = [a.as_str()];
    env.run(&["create", "configmap", "c", "-n", &a, "--from-literal=k=v"]);
    wait_containment_narrowed(&env).await;
    // holdfast-system holds holdfast's own protected Role and RoleBinding.
    wait_marked(&env, &ours, &["holdfast-system"]).await;
    env.run(&words(&format!(
        "label configmap c -n {a} holdfast.dev/protected=Always"
    )));
    wait_marked(&env, &ours, &[&a, "holdfast-system"]).await;
    env.run(&words(&format!(
        "label configmap c -n {a} holdfast.dev/protected-"
    )));
    wait_marked(&env, &ours, &["holdfast-system"]).await;
}

/// A policy that names no namespace routes every namespace but the system ones:
/// of two Secrets, in b and in kube-system, only b's is protected and only b is
/// marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_policy_naming_no_namespace_leaves_the_system_namespaces_out() {
    holdfast_e2e::needs_simulator!(
        "its policy names no namespace, so on a cluster it would protect every Secret of the cluster's own namespaces while it runs"
    );
    let (env, _controller) = full_stack().await;
    let b = env.namespace("b").expect("namespace");
    let ours = [b.as_str()];
    wait_containment_narrowed(&env).await;
    // holdfast-system holds holdfast's own protected Role and RoleBinding.
    wait_marked(&env, &ours, &["holdfast-system"]).await;
    // Every Secret, in any namespace: b and kube-system hold one; only b is marked
    // and routed.
    env.run(&words(&format!(
        "create secret generic s -n {b} --from-literal=k=v"
    )));
    env.run(&words(
        "create secret generic s -n kube-system --from-literal=k=v",
    ));
    env.apply(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {name: all-secrets}\nspec:\n  resources:\n  - {group: \"\", version: v1, resource: secrets}\n",
    )
    .expect("policy applied");
    wait_ready(&env, "resourceprotection", "all-secrets").await;
    wait_marked(&env, &ours, &[&b, "holdfast-system"]).await;
    let cfg = wait_containment_narrowed(&env).await;
    let entry = cfg["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|w| w["name"] == "policies-0.holdfast.dev")
        .cloned()
        .expect("policies entry");
    assert_eq!(
        entry["namespaceSelector"],
        serde_json::json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-node-lease", "kube-public", "kube-system"]}]})
    );
    let out = env.attempt(&["delete", "secret", "s", "-n", &b, "--dry-run=server"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr,
        format!(
            "Error from server (Forbidden): admission webhook \"policies-0.holdfast.dev\" denied the request: holdfast: Secret {b}/s is protected by ResourceProtection/all-secrets (selects secrets), so it cannot be deleted. To delete it, remove it from the policy (kubectl edit resourceprotection all-secrets), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection. To have holdfast delete it once nothing blocks it, ask for deferred deletion (holdfast.dev/delete-when-unblocked).\n"
        )
    );
    env.prints(
        &["delete", "secret", "s", "-n", "kube-system"],
        "secret \"s\" deleted\n",
    );
}

/// The marker's lag fails closed for the protected object: with the controller
/// stopped (a lag without end), an object labelled afterwards leaves its namespace
/// unmarked, so the namespace DELETE is allowed — but the namespace controller's
/// DELETE of the protected object is still refused: it survives, the namespace
/// stays Terminating until the protection is lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn marker_lag_never_loses_the_protected_object() {
    let (env, mut controller) = full_stack().await;
    let late = env.namespace("late").expect("namespace");
    let ours = [late.as_str()];
    for cm in ["plain", "precious"] {
        env.run(&["create", "configmap", cm, "-n", &late, "--from-literal=k=v"]);
    }
    wait_containment_narrowed(&env).await;
    wait_marked(&env, &ours, &["holdfast-system"]).await;
    controller.kill();
    env.run(&words(&format!(
        "label configmap precious -n {late} holdfast.dev/protected=true"
    )));
    env.prints(
        &["delete", "namespace", &late, "--wait=false"],
        &format!("namespace \"{late}\" deleted\n"),
    );
    // The namespace controller empties what it may; the labelled ConfigMap stays.
    env.wait_absent(&["configmap", "plain", "-n", &late]).await;
    // ... and its DELETE of the protected one was refused by the label webhook.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.webhook_log().contains(&format!(
        "holdfast: ConfigMap {late}/precious is protected by label"
    )) {
        assert!(
            Instant::now() < deadline,
            "no refusal of {late}/precious logged: {}",
            env.webhook_log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    exists(&env, &["configmap", "precious", "-n", &late]);
    let phase = env.run(&["get", "namespace", &late, "-o", "jsonpath={.status.phase}"]);
    assert_eq!(phase.stdout, "Terminating");
    // Lifting the protection lets the namespace finish (a cluster's namespace
    // controller retries with a back-off: a generous deadline).
    env.run(&words(&format!(
        "label configmap precious -n {late} holdfast.dev/protected-"
    )));
    env.kubectl_until(
        &[
            "get",
            "namespace",
            &late,
            "--ignore-not-found",
            "-o",
            "name",
        ],
        120,
        |o| o.code == 0 && o.stdout.is_empty(),
    )
    .await
    .unwrap_or_else(|e| panic!("namespace {late} never finished: {e:#}"));
}
