//! The attacks of a hostile tenant (issue 31), each reproduced end to end against
//! holdfast as the manifests ship it (both binaries as their ServiceAccounts with
//! the shipped RBAC) on the simulator or the cluster of `HOLDFAST_E2E_KUBECONFIG`,
//! real kubectl, by a user of the test's own holding only the grants the attack
//! needs; each shows the hole shut. docs/security.md names the row each one holds.

use holdfast_e2e::{
    Env,
    controller::{Shipped, shipped_stack},
    rbac::{self, TestUser},
    steps::{self, merge_patch},
};
use holdfast_sim::SimConfig;
use serde_json::{Value, json};
use std::time::Duration;

/// holdfast as shipped; the controller with `controller_args`.
async fn stack(controller_args: &[&str]) -> Shipped {
    let cfg = holdfast_e2e::with_service_accounts(SimConfig::default());
    shipped_stack(cfg, &[], controller_args)
        .await
        .expect("holdfast as shipped")
}

/// A merge patch setting annotations `a` and labels `l`.
fn meta_patch(a: Value, l: Value) -> String {
    json!({"metadata": {"annotations": a, "labels": l}}).to_string()
}

/// A deferred-deletion request naming `by`, with `extra` annotations.
fn request(by: &str, extra: Value) -> String {
    let mut a = json!({"holdfast.dev/delete-when-unblocked": "true",
                       "holdfast.dev/delete-requested-by": by});
    if let (Some(a), Some(extra)) = (a.as_object_mut(), extra.as_object()) {
        a.extend(extra.clone());
    }
    meta_patch(a, json!({"holdfast.dev/delete-when-unblocked": "true"}))
}

/// Waits (at most 30 s) until `kubectl args` as the admin fails with stderr
/// containing `needle`; returns that stderr.
async fn refused_with(env: &Env, args: &[&str], needle: &str) -> String {
    steps::eventually(30, async || {
        let out = env.attempt(args);
        if out.code != 0 && out.stderr.contains(needle) {
            Ok(out.stderr)
        } else {
            Err(format!("{args:?}: {out:?}"))
        }
    })
    .await
}

/// `kubectl args` as `user`, expected to fail with stderr containing `needle`. A
/// refusal that asks to retry later (an index of the webhook re-listing after the
/// API server's discovery changed, as other tests install CRDs) is asked again, for
/// 30 s at the most: it is holdfast failing closed, not the refusal under test.
fn refused_to(env: &Env, user: &TestUser, args: &[&str], needle: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut out = env.kubectl_by(user, args).expect("kubectl runs");
    while out.code != 0
        && out.stderr.contains("retry later")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(250));
        out = env.kubectl_by(user, args).expect("kubectl runs");
    }
    assert!(
        out.code != 0 && out.stderr.contains(needle),
        "{args:?}: {out:?}"
    );
    out.stderr
}

/// Row "annotation kcp.io/cluster" × deferred deletion: a user who may only patch
/// a namespace sets `kcp.io/cluster` and a request naming the namespace
/// controller. Before: the webhook skipped the check and the controller deleted
/// the namespace as that identity. Now: refused, nothing marked, nothing deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_logical_cluster_deletes_nothing_as_anyone() {
    let s = stack(&[]).await;
    let env = &s.env;
    let shop = env.namespace("shop").expect("namespace");
    env.run(&["create", "configmap", "workload", "-n", &shop]);
    let mallory = env.test_user("mallory", &[]).expect("mallory");
    env.grant_cluster(
        "patch-shop",
        &[rbac::user(&mallory.name)],
        &[json!({"apiGroups": [""], "resources": ["namespaces"],
                 "resourceNames": [shop], "verbs": ["get", "patch"]})],
    )
    .expect("mallory's grant");
    let victim = "system:serviceaccount:kube-system:namespace-controller";
    let forged = request(victim, json!({"kcp.io/cluster": "root"}));
    let stderr = refused_to(
        env,
        &mallory,
        &merge_patch(&format!("namespace {shop}"), &forged),
        "deferred.holdfast.dev",
    );
    assert!(
        stderr.contains(&format!("must name you, \"{}\"", mallory.name)),
        "{stderr}"
    );
    // Naming herself does not help: she may not delete it.
    let own = request(&mallory.name, json!({"kcp.io/cluster": "root"}));
    let stderr = refused_to(
        env,
        &mallory,
        &merge_patch(&format!("namespace {shop}"), &own),
        "deferred.holdfast.dev",
    );
    assert!(
        stderr.contains("may not ask for the deferred deletion"),
        "{stderr}"
    );
    let ns = env.get_json(&["namespace", &shop]).expect("namespace");
    assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");
    assert!(
        ns["metadata"]["annotations"]["kcp.io/cluster"].is_null(),
        "{ns}"
    );
    assert!(
        env.exists(&["configmap", "workload", "-n", &shop])
            .expect("kubectl")
    );
}

/// Row "annotation kcp.io/cluster" × policies and containment: the annotation on
/// a protected object or in a namespace moves nothing out of protection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_logical_cluster_moves_nothing_out_of_protection() {
    let s = stack(&[]).await;
    let env = &s.env;
    let shop = env.namespace("shop").expect("namespace");
    let rp = rbac::own_name("keep-in-shop");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {rp}}}\n\
         spec:\n  resources:\n  - {{group: \"\", version: v1, resource: configmaps, namespace: {shop}, names: [keep]}}\n"
    ))
    .expect("policy");
    env.run(&["create", "configmap", "keep", "-n", &shop]);
    env.run(&["create", "configmap", "held", "-n", &shop]);
    env.run(&[
        "label",
        "configmap",
        "held",
        "-n",
        &shop,
        "holdfast.dev/protected=true",
    ]);
    let mallory = env.test_user("mallory", &[]).expect("mallory");
    env.grant_in(
        &shop,
        "tenant",
        &[rbac::user(&mallory.name)],
        &[rbac::rule(
            &["get", "patch", "delete"],
            &[""],
            &["configmaps"],
        )],
    )
    .expect("mallory's grant");
    env.grant_cluster(
        "delete-shop",
        &[rbac::user(&mallory.name)],
        &[json!({"apiGroups": [""], "resources": ["namespaces"],
                 "resourceNames": [shop], "verbs": ["get", "patch", "delete"]})],
    )
    .expect("mallory's namespace grant");
    let by_policy = format!("ResourceProtection/{rp}");
    refused_with(
        env,
        &[
            "delete",
            "configmap",
            "keep",
            "-n",
            &shop,
            "--dry-run=server",
        ],
        &by_policy,
    )
    .await;
    let forged = meta_patch(json!({"kcp.io/cluster": "elsewhere"}), json!({}));
    for (target, args) in [
        (format!("configmap keep -n {shop}"), &forged),
        (format!("configmap held -n {shop}"), &forged),
        (format!("namespace {shop}"), &forged),
    ] {
        let out = env
            .kubectl_by(&mallory, &merge_patch(&target, args))
            .expect("kubectl runs");
        assert_eq!(out.code, 0, "{target}: {out:?}");
    }
    refused_to(
        env,
        &mallory,
        &["delete", "configmap", "keep", "-n", &shop],
        &by_policy,
    );
    refused_to(
        env,
        &mallory,
        &["delete", "configmap", "held", "-n", &shop],
        "holdfast.dev/protected",
    );
    refused_to(
        env,
        &mallory,
        &["delete", "namespace", &shop],
        "containment.holdfast.dev",
    );
    assert!(
        env.exists(&["configmap", "keep", "-n", &shop])
            .expect("kubectl")
    );
    // A namespace whose only protected object carries the forged annotation: the
    // webhook's index of what namespaces hold files it under its namespace all the
    // same (it once filed it under the forged cluster, and the namespace read empty).
    let lone = env.namespace("lone").expect("namespace");
    env.run(&["create", "configmap", "held", "-n", &lone]);
    env.run(&[
        "label",
        "configmap",
        "held",
        "-n",
        &lone,
        "holdfast.dev/protected=true",
    ]);
    env.run(&[
        "annotate",
        "configmap",
        "held",
        "-n",
        &lone,
        "kcp.io/cluster=elsewhere",
    ]);
    refused_with(
        env,
        &["delete", "namespace", &lone, "--dry-run=server"],
        &format!("ConfigMap {lone}/held (label)"),
    )
    .await;
}

/// Row "containment marker": a user who may only get, patch and delete one
/// namespace removes the mark that routes its DELETE to containment, to delete it
/// (and what it holds) before the controller marks it again. Before: the race was
/// won every time. Now: the unmarking is refused, and so is the DELETE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_containment_mark_cannot_be_lifted_to_delete_a_namespace() {
    let s = stack(&[]).await;
    let env = &s.env;
    let shop = env.namespace("shop").expect("namespace");
    env.run(&["create", "configmap", "held", "-n", &shop]);
    env.run(&[
        "label",
        "configmap",
        "held",
        "-n",
        &shop,
        "holdfast.dev/protected=true",
    ]);
    let mallory = env.test_user("mallory", &[]).expect("mallory");
    env.grant_cluster(
        "unmark-shop",
        &[rbac::user(&mallory.name)],
        &[json!({"apiGroups": [""], "resources": ["namespaces"],
                 "resourceNames": [shop], "verbs": ["get", "patch", "delete"]})],
    )
    .expect("mallory's namespace grant");
    let marked = [
        "get",
        "namespace",
        &shop,
        "-o",
        "jsonpath={.metadata.labels.holdfast\\.dev/contains-protected}",
    ];
    steps::eventually(30, async || {
        let out = env.attempt(&marked);
        (out.stdout == "true")
            .then_some(())
            .ok_or(format!("{out:?}"))
    })
    .await;
    let unmark = json!({"metadata": {"labels": {"holdfast.dev/contains-protected": null}}});
    // Once the webhook's containment sees the protected ConfigMap (its indexes of
    // what namespaces hold start with holdfast's reads role; until every one has
    // synced it refuses with "cannot verify").
    let held = format!("ConfigMap {shop}/held (label)");
    refused_with(
        env,
        &["delete", "namespace", &shop, "--dry-run=server"],
        &held,
    )
    .await;
    let stderr = refused_to(
        env,
        &mallory,
        &merge_patch(&format!("namespace {shop}"), &unmark.to_string()),
        "containment-marker.holdfast.dev",
    );
    assert!(
        stderr.contains(&format!(
            "holdfast: Namespace {shop} holds objects that are protected from deletion: \
             ConfigMap {shop}/held (label)"
        )),
        "{stderr}"
    );
    refused_to(
        env,
        &mallory,
        &["delete", "namespace", &shop],
        "containment.holdfast.dev",
    );
    assert_eq!(env.attempt(&marked).stdout, "true");
    assert!(
        env.exists(&["configmap", "held", "-n", &shop])
            .expect("kubectl")
    );
}

/// Row "deferred-deletion markers" set past the webhook: with `failurePolicy:
/// Ignore` and the webhook down, a user who may only patch ConfigMaps sets a
/// request naming alice (who may delete it) with a forged signature, and a
/// requester name that would forge a log line. The controller verifies nothing
/// holdfast signed: the ConfigMap stays, a Warning Event says why, and no log
/// line is forged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_set_past_the_webhook_is_ignored() {
    let mut s = stack(&["--failure-policy", "Ignore"]).await;
    let ns = s.env.default_namespace().expect("namespace");
    let env = &s.env;
    // A policy on ConfigMaps: the controller watches their requests.
    let rp = rbac::own_name("keep-other");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {rp}}}\n\
         spec:\n  resources:\n  - {{group: \"\", version: v1, resource: configmaps, namespace: {ns}, names: [other]}}\n"
    ))
    .expect("policy");
    s.controller
        .wait_condition(env, ["resourceprotection", &rp, "Ready", "True"])
        .await;
    env.run(&["create", "configmap", "victim", "-n", &ns]);
    let alice = env.test_user("alice", &[]).expect("alice");
    let mallory = env.test_user("mallory", &[]).expect("mallory");
    env.grant_in(
        &ns,
        "owner",
        &[rbac::user(&alice.name)],
        &[rbac::rule(&["get", "delete"], &[""], &["configmaps"])],
    )
    .expect("alice's grant");
    env.grant_in(
        &ns,
        "patcher",
        &[rbac::user(&mallory.name)],
        &[rbac::rule(&["get", "patch"], &[""], &["configmaps"])],
    )
    .expect("mallory's grant");
    // The webhook goes down; with Ignore the API server admits unchecked.
    drop(s.env.webhook.take().expect("webhook running"));
    let env = &s.env;
    let forged_user = format!("{}\nINFO forged line", alice.name);
    let forged = request(
        &forged_user,
        json!({"holdfast.dev/delete-request-signature": "v1.1700000000.00ff"}),
    );
    steps::eventually(30, async || {
        let out = env
            .kubectl_by(
                &mallory,
                &merge_patch(&format!("configmap victim -n {ns}"), &forged),
            )
            .expect("kubectl runs");
        (out.code == 0).then_some(()).ok_or(format!("{out:?}"))
    })
    .await;
    let ignored = env
        .wait_events("DeferredDeletionIgnored", "victim", 30)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", s.controller.log()));
    assert_eq!(ignored[0]["type"], "Warning", "{ignored:?}");
    let note = ignored[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("was not issued by holdfast for this object and user"),
        "{note}"
    );
    assert!(
        env.exists(&["configmap", "victim", "-n", &ns])
            .expect("kubectl")
    );
    assert!(
        env.events("DeferredDeletion", "victim")
            .expect("events")
            .is_empty()
    );
    let log = s.controller.log();
    assert!(
        !log.lines().any(|l| l.starts_with("INFO forged line")),
        "{log}"
    );
}

/// Row "kinds no webhook sees": a policy on ValidatingWebhookConfigurations says
/// it protects nothing (NotAdmissionControlled, and `check` says so), and a
/// request on one, set by a user who may only patch it (the API server calls no
/// webhook for it) naming alice, who may delete it, is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_no_webhook_sees_are_neither_protected_nor_deleted_on_request() {
    let s = stack(&[]).await;
    let env = &s.env;
    let victim = rbac::own_name("victim");
    env.apply(&format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata: {{name: {victim}}}\nwebhooks: []\n"
    ))
    .expect("configuration");
    let rp = rbac::own_name("keep-webhooks");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {rp}}}\n\
         spec:\n  resources:\n  - {{group: admissionregistration.k8s.io, version: v1, resource: validatingwebhookconfigurations, names: [{victim}]}}\n"
    ))
    .expect("policy");
    let ready = s
        .controller
        .wait_condition(env, ["resourceprotection", &rp, "Ready", "False"])
        .await;
    assert_eq!(ready["reason"], "NotAdmissionControlled", "{ready}");
    let check = plugin(env, &["check", "-o", "json"]).await;
    assert!(
        check.contains("NotAdmissionControlled") && check.contains(&rp),
        "{check}"
    );

    let alice = env.test_user("alice", &[]).expect("alice");
    let mallory = env.test_user("mallory", &[]).expect("mallory");
    let on_victim = |verbs: &[&str]| {
        json!({"apiGroups": ["admissionregistration.k8s.io"],
               "resources": ["validatingwebhookconfigurations"],
               "resourceNames": [victim], "verbs": verbs})
    };
    env.grant_cluster(
        "owner",
        &[rbac::user(&alice.name)],
        &[on_victim(&["get", "delete"])],
    )
    .expect("alice's grant");
    env.grant_cluster(
        "patcher",
        &[rbac::user(&mallory.name)],
        &[on_victim(&["get", "patch"])],
    )
    .expect("mallory's grant");
    let out = env
        .kubectl_by(
            &mallory,
            &merge_patch(
                &format!("validatingwebhookconfiguration {victim}"),
                &request(&alice.name, json!({})),
            ),
        )
        .expect("kubectl runs");
    assert_eq!(out.code, 0, "no webhook is called: {out:?}");
    let ignored = env
        .wait_events("DeferredDeletionIgnored", &victim, 30)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", s.controller.log()));
    let note = ignored[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("never sends requests on validatingwebhookconfigurations"),
        "{note}"
    );
    assert!(
        env.exists(&["validatingwebhookconfiguration", &victim])
            .expect("kubectl")
    );
}

/// Row "AnchorRule anchorSource": a policy author who may not read Secrets points
/// an AnchorRule at a key of a Secret in holdfast's namespace. Before: the parse
/// error echoed the key's contents into the status, denials, Events and logs.
/// Now: the key and the kind of problem only, anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anchor_source_never_shows_the_secret_it_names() {
    let s = stack(&[]).await;
    let env = &s.env;
    let secret = rbac::own_name("tenant-db");
    let value = "SECRET-VALUE-31-do-not-show";
    env.run(&[
        "create",
        "secret",
        "generic",
        &secret,
        "-n",
        "holdfast-system",
        &format!("--from-literal=password={value}"),
    ]);
    env.remove_later_in("holdfast-system", "secret", &secret);
    let author = env.test_user("author", &[]).expect("author");
    env.grant_cluster(
        "author",
        &[rbac::user(&author.name)],
        &[rbac::rule(
            &["get", "create"],
            &["holdfast.dev"],
            &["anchorrules"],
        )],
    )
    .expect("author's grant");
    let ns = env.default_namespace().expect("namespace");
    let key = rbac::own_name("example.test/anchor");
    let rule = rbac::own_name("leak");
    let manifest = format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: AnchorRule\nmetadata: {{name: {rule}}}\nspec:\n  \
         anchor: {{group: example.test, version: v1, resource: composites}}\n  \
         anchorLabels: {{name: {key}}}\n  \
         anchorSource:\n    kubeconfigSecretRef: {{name: {secret}, namespace: holdfast-system, key: password}}\n  \
         protects:\n  - {{version: v1, resource: configmaps}}\n"
    );
    let out = env
        .kubectl_stdin(
            &[
                "--kubeconfig",
                &author.kubeconfig_arg(),
                "create",
                "-f",
                "-",
            ],
            &manifest,
        )
        .expect("kubectl runs");
    assert_eq!(out.code, 0, "{out:?}");
    let reachable = unusable(env, &rule).await;
    assert!(
        reachable["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("key password holds no kubeconfig (it is not YAML of a kubeconfig; its contents are not shown)")),
        "{reachable}"
    );
    // A protected object's DELETE is refused, naming no contents either.
    env.run(&["create", "configmap", "anchored", "-n", &ns]);
    env.run(&[
        "label",
        "configmap",
        "anchored",
        "-n",
        &ns,
        &format!("{key}=c1"),
    ]);
    let denial = refused_with(
        env,
        &[
            "delete",
            "configmap",
            "anchored",
            "-n",
            &ns,
            "--dry-run=server",
        ],
        &format!("AnchorRule/{rule}"),
    )
    .await;
    let status = env
        .attempt(&["get", "anchorrule", &rule, "-o", "json"])
        .stdout;
    let events = env.attempt(&["get", "events", "-A", "-o", "json"]).stdout;
    for (what, text) in [
        ("status", status),
        ("denial", denial),
        ("events", events),
        ("controller log", s.controller.log()),
        ("webhook log", env.webhook_log()),
    ] {
        assert!(!text.contains(value), "{what} shows the Secret: {text}");
    }
}

/// Row "anchor-source kubeconfig": an `exec` credential plugin would run inside
/// both binaries (the controller may impersonate everyone). Refused with a clear
/// condition; the program never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anchor_source_kubeconfig_cannot_run_programs() {
    let s = stack(&[]).await;
    let env = &s.env;
    let marker = env.dir.path().join("exec-ran");
    let secret = rbac::own_name("exec-source");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:1'}}\n\
         users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
         command: /bin/sh\n      args: ['-c', 'touch {}']\n\
         contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
        marker.display()
    );
    env.run(&[
        "create",
        "secret",
        "generic",
        &secret,
        "-n",
        "holdfast-system",
        &format!("--from-literal=kubeconfig={kubeconfig}"),
    ]);
    env.remove_later_in("holdfast-system", "secret", &secret);
    let rule = rbac::own_name("exec");
    // One key for the rule and the object (on a cluster each own_name is new).
    let key = rbac::own_name("example.test/anchor");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: AnchorRule\nmetadata: {{name: {rule}}}\nspec:\n  \
         anchor: {{group: example.test, version: v1, resource: composites}}\n  \
         anchorLabels: {{name: {}}}\n  \
         anchorSource:\n    kubeconfigSecretRef: {{name: {secret}, namespace: holdfast-system}}\n  \
         protects:\n  - {{version: v1, resource: configmaps}}\n",
        key
    ))
    .expect("rule");
    let reachable = unusable(env, &rule).await;
    assert!(
        reachable["message"].as_str().is_some_and(
            |m| m.contains("user \"u\" uses an exec credential plugin, which is refused")
        ),
        "{reachable}"
    );
    // The webhook has read it too by the time it judges the rule's objects.
    let ns = env.default_namespace().expect("namespace");
    env.run(&["create", "configmap", "anchored", "-n", &ns]);
    env.run(&[
        "label",
        "configmap",
        "anchored",
        "-n",
        &ns,
        &format!("{key}=c1"),
    ]);
    refused_with(
        env,
        &[
            "delete",
            "configmap",
            "anchored",
            "-n",
            &ns,
            "--dry-run=server",
        ],
        &format!("AnchorRule/{rule}"),
    )
    .await;
    assert!(!marker.exists(), "the exec plugin ran");
}

/// Waits (at most 30 s) until AnchorRule `name` reports SourceReachable False with
/// reason Unusable; returns the condition.
async fn unusable(env: &Env, name: &str) -> Value {
    steps::eventually(30, async || {
        let rule = env
            .get_json(&["anchorrule", name])
            .map_err(|e| e.to_string())?;
        rule["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "SourceReachable" && c["reason"] == "Unusable")
            .cloned()
            .ok_or_else(|| format!("{rule}"))
    })
    .await
}

/// `kubectl holdfast ARGS` as the admin; its stdout.
async fn plugin(env: &Env, args: &[&str]) -> String {
    let dir = holdfast_e2e::bin("kubectl-holdfast")
        .expect("kubectl-holdfast built")
        .parent()
        .expect("a directory")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = tokio::process::Command::new(holdfast_e2e::kubectl_path().expect("kubectl"));
    cmd.env("KUBECONFIG", &env.kubeconfig)
        .env("PATH", path)
        .arg("holdfast")
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("kubectl holdfast finishes")
        .expect("kubectl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
