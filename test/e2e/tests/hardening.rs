//! The holes a real API server and a hostile client open, closed end to end: the real
//! `holdfast-webhook` and `holdfast-controller` run as the service accounts the
//! manifests ship (with their RBAC, authorization on), against the simulator or the
//! cluster of `HOLDFAST_E2E_KUBECONFIG`, driven by the real `kubectl` as users of the
//! test's own, who hold what RBAC the test creates grants them.
//!
//! CRD deletion (instances go without a DELETE review), pod eviction (no DELETE
//! review), strict mode through subresources and break-glass on policy-protected
//! objects, new CRDs and containment, look-alike label values, and holdfast's own
//! configuration guarded by a ValidatingAdmissionPolicy.

use holdfast_e2e::fixtures::resource_protection;
use holdfast_e2e::rbac::{self, TestUser};
use holdfast_e2e::steps::merge_patch;
use holdfast_e2e::{
    Env, KubectlOutput,
    steps::{eventually, wait_webhook_installed, words},
};
use holdfast_sim::SimConfig;
use serde_json::{Value, json};
use std::time::Duration;

use holdfast_e2e::controller::Shipped as Stack;

/// holdfast as the manifests ship it, and the test's users, who hold what RBAC
/// the test creates grants them (the same on a sim and on a cluster).
struct Hardening {
    s: Stack,
    /// May do anything to ordinary objects, but not bypass protection.
    alice: TestUser,
    /// Like alice, and also holds the bypass permission.
    breaker: TestUser,
    /// A member of the admin group named with `--admin-group` ([`Hardening::admins`]).
    ops: TestUser,
    /// That group.
    admins: String,
    /// The namespace objects created without `-n` land in ([`Env::default_namespace`]).
    ns: String,
}

impl Hardening {
    fn env(&self) -> &Env {
        &self.s.env
    }
}

/// holdfast as the manifests ship it: namespace, service accounts, RBAC and CRDs
/// applied by the admin; webhook and controller running as their service accounts.
async fn shipped(strict: bool) -> Hardening {
    shipped_with(strict, false).await
}

/// [`shipped`]; with `admin_group`, the controller names the test's admin group
/// with `--admin-group`.
async fn shipped_with(strict: bool, admin_group: bool) -> Hardening {
    let admins = rbac::own_name("platform-admins");
    let strict_flag: &[&str] = if strict { &["--strict"] } else { &[] };
    let mut cargs = strict_flag.to_vec();
    if admin_group {
        cargs.extend(["--admin-group", admins.as_str()]);
    }
    let cfg = holdfast_e2e::with_service_accounts(SimConfig::default());
    let s = holdfast_e2e::controller::shipped_stack(cfg, strict_flag, &cargs)
        .await
        .expect("holdfast as shipped");
    wait_webhook_installed(&s.env, "eviction.holdfast.dev").await;
    let env = &s.env;
    let alice = env.test_user("alice", &["dev"]).expect("alice");
    let breaker = env.test_user("breaker", &["dev"]).expect("breaker");
    let ops = env.test_user("ops", &[admins.as_str()]).expect("ops");
    env.grant_cluster(
        "everyday",
        &[
            rbac::user(&alice.name),
            rbac::user(&breaker.name),
            rbac::user(&ops.name),
        ],
        &[rbac::everyday()],
    )
    .expect("grant");
    env.grant_cluster("bypass", &[rbac::user(&breaker.name)], &[rbac::bypass()])
        .expect("grant");
    let ns = env.default_namespace().expect("namespace");
    Hardening {
        s,
        alice,
        breaker,
        ops,
        admins,
        ns,
    }
}

/// Asserts kubectl failed with exactly `stderr`.
fn refused_with(out: &KubectlOutput, stderr: &str) {
    assert_eq!(
        (out.code, out.stderr.trim_end()),
        (1, stderr),
        "stdout: {}",
        out.stdout
    );
}

/// Asserts `kubectl <args>` as alice fails with exactly `stderr`.
fn alice_refused(t: &Hardening, args: &[&str], stderr: &str) {
    refused_with(&as_alice(t, args), stderr);
}

/// Waits (at most `secs`) until alice's dry-run DELETE of namespace `ns` fails
/// with exactly `stderr`.
async fn namespace_refused_until(t: &Hardening, ns: &str, secs: u64, stderr: &str) {
    eventually(secs, async || {
        let out = as_alice(t, &["delete", "ns", ns, "--dry-run=server"]);
        if out.code == 1 && out.stderr.trim_end() == stderr {
            return Ok(());
        }
        Err(format!(
            "namespace {ns} never refused with\n{stderr}\nlast: {out:?}"
        ))
    })
    .await;
}

fn ok(out: KubectlOutput) -> KubectlOutput {
    assert_eq!(out.code, 0, "kubectl failed: {out:?}");
    out
}

fn as_alice(t: &Hardening, args: &[&str]) -> KubectlOutput {
    t.env().kubectl_by(&t.alice, args).expect("kubectl")
}

/// `kubectl VERB --raw PATH` as alice with `body` (written to a file of the env's).
fn alice_raw(t: &Hardening, verb: &str, path: &str, body: &Value) -> KubectlOutput {
    let file = t.env().dir.path().join("raw-body.json");
    std::fs::write(&file, body.to_string()).expect("body written");
    let file = file.to_string_lossy();
    as_alice(t, &[verb, "--raw", path, "-f", &file])
}

fn get_json(env: &Env, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&ok(env.attempt(&a)).stdout).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crd_deletion_is_refused_while_an_instance_is_protected() {
    let t = &shipped(false).await;
    let (env, ns) = (t.env(), t.ns.as_str());
    env.apply_crds(&holdfast_e2e::fixtures::widget_crd())
        .expect("crd");
    env.wait_served(&["widgets"]).await;
    env.apply(&format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: precious, namespace: {ns}, labels: {{holdfast.dev/protected: Always}}}}\n",
    ))
    .expect("widget");
    env.apply(&format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: plain, namespace: {ns}}}\n",
    ))
    .expect("widget");
    let out = as_alice(t, &["delete", "crd", "widgets.example.com"]);
    refused_with(
        &out,
        &format!(
            "Error from server (Forbidden): admission webhook \"containment.holdfast.dev\" denied \
             the request: holdfast: CustomResourceDefinition widgets.example.com has instances \
             that are protected from deletion: Widget {ns}/precious (label) (policy: \
             containment), so it cannot be deleted: that would delete them all, unchecked. To \
             delete it, first lift the protection of those objects (or delete them), or set the \
             annotation holdfast.dev/skip-protection=true if you are allowed to bypass \
             protection on the CustomResourceDefinition."
        ),
    );
    // Nothing was deleted.
    let names = ok(env.attempt(&["get", "widgets", "-o", "name"]));
    assert_eq!(
        names.stdout,
        "widget.example.com/plain\nwidget.example.com/precious\n"
    );
    // Unprotect the instance: the CRD goes, and its instances with it.
    ok(as_alice(
        t,
        &["label", "widget", "precious", "holdfast.dev/protected-"],
    ));
    ok(as_alice(t, &["delete", "crd", "widgets.example.com"]));
    env.kubectl_until(&["get", "crd", "widgets.example.com"], 30, |o| {
        o.is_not_found()
    })
    .await
    .expect("CRD gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eviction_of_a_protected_pod_is_refused() {
    let t = &shipped(false).await;
    let (env, ns) = (t.env(), t.ns.as_str());
    for (name, labels) in [
        ("pinned", json!({"holdfast.dev/protected": "true"})),
        ("free", json!({})),
    ] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}});
        env.apply(&pod.to_string()).expect("pod");
    }
    let evict = |name: &str| {
        let body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns}});
        alice_raw(
            t,
            "create",
            &format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"),
            &body,
        )
    };
    let out = evict("pinned");
    refused_with(
        &out,
        &format!(
            "Error from server (Forbidden): admission webhook \"eviction.holdfast.dev\" denied \
             the request: holdfast: eviction refused: Pod {ns}/pinned is protected by label \
             holdfast.dev/protected=true (policy: label holdfast.dev/protected), so it cannot be \
             deleted. To delete it, remove the label (kubectl label pods pinned -n {ns} \
             holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true \
             if you are allowed to bypass protection."
        ),
    );
    ok(env.attempt(&["get", "pod", "pinned", "-n", ns]));
    let out = ok(evict("free"));
    let status: Value = serde_json::from_str(&out.stdout).expect("Status");
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    );
    // Evicted: gone (a cluster's kubelet may first take the pod's grace period).
    let gone = "Error from server (NotFound): pods \"free\" not found";
    let out = env
        .kubectl_until(&["get", "pod", "free", "-n", ns], 30, |o| {
            o.code == 1 && o.stderr.trim_end() == gone
        })
        .await
        .expect("the evicted pod is gone");
    refused_with(&out, gone);
}

fn strict_denial(what: &str, target: &str, value: &str) -> String {
    format!(
        "holdfast: {what} carries the protection label holdfast.dev/protected={value} and strict \
         mode is on (policy: strict label holdfast.dev/protected), so the label cannot be removed \
         or changed to a value that does not protect. To unprotect it, first mark it exempt in its \
         own update (kubectl label {target} holdfast.dev/strict-exempt=true, which takes the \
         bypass permission on protections.holdfast.dev), then remove the label."
    )
}

/// [`strict_denial`] as kubectl prints it.
fn strict_refusal(what: &str, target: &str, value: &str) -> String {
    format!(
        "Error from server (Forbidden): admission webhook \"strict-label-0.holdfast.dev\" \
         denied the request: {}",
        strict_denial(what, target, value)
    )
}

/// Alice's merge patch `patch` of `object`'s status subresource.
fn alice_patches_status(t: &Hardening, object: &str, patch: &str) -> KubectlOutput {
    let target = format!("{object} --subresource=status");
    as_alice(t, &merge_patch(&target, patch))
}

/// The refusal of a user without the bypass permission adding the break-glass
/// marker to `what` (in `ns`, if namespaced) that `webhook` gives.
fn break_glass_refusal(webhook: &str, user: &str, what: &str, ns: Option<&str>) -> String {
    let scope = ns
        .map(|ns| format!(" in namespace {ns}"))
        .unwrap_or_default();
    format!(
        "Error from server (Forbidden): admission webhook \"{webhook}\" denied the request: \
         holdfast: user \"{user}\" may not add annotation holdfast.dev/skip-protection to \
         {what}: it is protected in strict mode, and lifting that protection needs the \
         permission to bypass it (verb bypass on protections.holdfast.dev{scope}). Ask someone \
         who holds it."
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strict_mode_covers_subresources() {
    let t = &shipped(true).await;
    let env = t.env();
    let vault = env.namespace("vault").expect("namespace");
    let vault = vault.as_str();
    ok(env.attempt(&["label", "ns", vault, "holdfast.dev/protected=Always"]));
    // namespaces/status: a merge patch dropping the label.
    let drop_label = r#"{"metadata":{"labels":{"holdfast.dev/protected":null}}}"#;
    let out = alice_patches_status(t, &format!("ns {vault}"), drop_label);
    // Under --strict a namespace's label change also reaches the break-glass webhook,
    // which refuses it alike; the API server returns whichever refusal comes first.
    let denial = strict_denial(
        &format!("Namespace {vault}"),
        &format!("namespaces {vault}"),
        "Always",
    );
    let possible: Vec<String> = holdfast_e2e::denied_by_any(
        &["strict-label-0.holdfast.dev", "break-glass.holdfast.dev"],
        &denial,
    )
    .into_iter()
    .map(|d| format!("Error from server (Forbidden): {d}"))
    .collect();
    assert!(
        out.code == 1 && possible.iter().any(|p| out.stderr.trim_end() == p),
        "{out:?}\nexpected one of {possible:?}"
    );
    // namespaces/finalize: a PUT without the label.
    let mut ns = get_json(env, &["get", "ns", vault]);
    if let Some(l) = ns["metadata"]["labels"].as_object_mut() {
        l.remove("holdfast.dev/protected");
    }
    let finalize = format!("/api/v1/namespaces/{vault}/finalize");
    let out = alice_raw(t, "replace", &finalize, &ns);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.trim_end().ends_with(&denial), "{}", out.stderr);
    let labels = get_json(env, &["get", "ns", vault])["metadata"]["labels"].clone();
    assert_eq!(labels["holdfast.dev/protected"], "Always");

    // pods/status: the label removed through /status.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "namespace": vault, "labels": {"holdfast.dev/protected": "true"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}});
    env.apply(&pod.to_string()).expect("pod");
    let out = alice_patches_status(
        t,
        &format!("pod p1 -n {vault}"),
        r#"{"metadata":{"labels":null}}"#,
    );
    refused_with(
        &out,
        &strict_refusal(
            &format!("Pod {vault}/p1"),
            &format!("pods p1 -n {vault}"),
            "true",
        ),
    );
    // deployments/status: a break-glass marker added through /status (annotations
    // are kept there) takes the bypass permission.
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": vault, "labels": {"holdfast.dev/protected": "Always"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}});
    env.apply(&dep.to_string()).expect("deployment");
    let patch = r#"{"metadata":{"annotations":{"holdfast.dev/skip-protection":"true"}}}"#;
    let target = format!("deployment web -n {vault} --subresource=status");
    let out = as_alice(t, &merge_patch(&target, patch));
    refused_with(
        &out,
        &break_glass_refusal(
            "strict-label-0.holdfast.dev",
            &t.alice.name,
            &format!("Deployment {vault}/web"),
            Some(vault),
        ),
    );
    let out = env
        .kubectl_by(&t.breaker, &merge_patch(&target, patch))
        .expect("kubectl");
    ok(out);
    let ann = get_json(env, &["get", "deployment", "web", "-n", vault])["metadata"]["annotations"]
        ["holdfast.dev/skip-protection"]
        .clone();
    assert_eq!(ann, "true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strict_break_glass_on_policy_protected_objects_and_unlabelled_selectors() {
    let t = &shipped(true).await;
    let env = t.env();
    let shop = env.namespace("shop").expect("namespace");
    let shop = shop.as_str();
    ok(env.attempt(&["create", "cm", "settings", "-n", shop]));
    ok(env.attempt(&["create", "secret", "generic", "keys", "-n", shop]));
    let settings = format!(
        r#"{{group: "", version: v1, resource: configmaps, namespace: {shop}, names: [settings]}}"#
    );
    env.apply(&resource_protection("guarded-configmaps", "", &[&settings]))
        .expect("policy");
    let unlabelled = format!(
        r#"{{group: "", version: v1, resource: secrets, namespace: {shop}, labelSelector: {{matchExpressions: [{{key: tier, operator: DoesNotExist}}]}}}}"#
    );
    env.apply(&resource_protection(
        "unlabelled-secrets",
        "strict: true",
        &[&unlabelled],
    ))
    .expect("policy");
    // Wait until the policy protects the ConfigMap.
    env.kubectl_until(
        &["delete", "cm", "settings", "-n", shop, "--dry-run=server"],
        30,
        |o| o.code == 1 && o.stderr.contains("ResourceProtection/guarded-configmaps"),
    )
    .await
    .expect("policy in force");
    // A ResourceProtection that is not strict, under --strict: adding the break-glass
    // marker takes the bypass permission.
    let mark = |cm: &str| format!("annotate cm {cm} -n {shop} holdfast.dev/skip-protection=true");
    alice_refused(
        t,
        &words(&mark("settings")),
        &break_glass_refusal(
            "break-glass.holdfast.dev",
            &t.alice.name,
            &format!("ConfigMap {shop}/settings"),
            Some(shop),
        ),
    );
    // Containment protects the namespace: its break-glass marker too.
    alice_refused(
        t,
        &["annotate", "ns", shop, "holdfast.dev/skip-protection=true"],
        &break_glass_refusal(
            "break-glass.holdfast.dev",
            &t.alice.name,
            &format!("Namespace {shop}"),
            None,
        ),
    );
    // An unprotected object: no permission needed.
    ok(as_alice(t, &["create", "cm", "loose", "-n", shop]));
    ok(as_alice(t, &words(&mark("loose"))));
    // Someone allowed to bypass may.
    ok(env
        .kubectl_by(&t.breaker, &words(&mark("settings")))
        .expect("kubectl"));
    // A strict DoesNotExist selector is not escaped by labelling an object that had
    // no labels at all.
    let out = as_alice(t, &["label", "secret", "keys", "-n", shop, "tier=free"]);
    refused_with(
        &out,
        &format!(
            "Error from server (Forbidden): admission webhook \"break-glass.holdfast.dev\" denied \
             the request: holdfast: Secret {shop}/keys is protected by \
             ResourceProtection/unlabelled-secrets in strict mode, and this update changes its \
             labels so that the policy would no longer select it. To unprotect it, first mark it \
             exempt in its own update (kubectl label secrets keys -n {shop} \
             holdfast.dev/strict-exempt=true, which takes the bypass permission on \
             protections.holdfast.dev), or change the policy."
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_crd_is_contained_at_once() {
    let t = &shipped(false).await;
    let env = t.env();
    let fresh = env.namespace("fresh").expect("namespace");
    let fresh = fresh.as_str();
    env.apply_crds(&holdfast_e2e::fixtures::widget_crd())
        .expect("crd");
    env.wait_served(&["widgets", "-n", fresh]).await;
    env.apply(&format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: new, namespace: {fresh}, labels: {{holdfast.dev/protected: Always}}}}\n",
    ))
    .expect("widget");
    // At once (no 30 s discovery wait): refused, whether the new resource is still
    // being indexed or already is.
    let out = as_alice(t, &["delete", "ns", fresh, "--wait=false"]);
    assert_eq!(out.code, 1, "{out:?}");
    let indexed = format!(
        "Error from server (Forbidden): admission webhook \"containment.holdfast.dev\" denied \
         the request: holdfast: Namespace {fresh} holds objects that are protected from \
         deletion: Widget {fresh}/new (label) (policy: containment), so it cannot be deleted: \
         that would leave it half-deleted. To delete it, first lift the protection of those \
         objects (or delete them), or set the annotation holdfast.dev/skip-protection=true if \
         you are allowed to bypass protection on the namespace."
    );
    let pending = format!(
        "Error from server (Forbidden): admission webhook \"containment.holdfast.dev\" denied \
         the request: holdfast: cannot verify what Namespace {fresh} holds: the objects of \
         widgets.example.com (a new custom resource) are not indexed yet. Refusing rather than \
         risk a half-deleted namespace; retry later, or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    );
    let first = out.stderr.trim_end().to_string();
    assert!(first == indexed || first == pending, "{first}");
    // And well before a 30 s discovery round, the refusal names the widget.
    namespace_refused_until(t, fresh, 20, &indexed).await;
    let phase = get_json(env, &["get", "ns", fresh])["status"]["phase"].clone();
    assert_eq!(phase, "Active");
    ok(env.attempt(&["get", "widget", "new", "-n", fresh]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn look_alike_protection_values_warn() {
    let t = &shipped(false).await;
    let (env, ns) = (t.env(), t.ns.as_str());
    ok(env.attempt(&["create", "cm", "almost", "-n", ns]));
    let out = ok(as_alice(
        t,
        &[
            "label",
            "cm",
            "almost",
            "-n",
            ns,
            "holdfast.dev/protected=always",
        ],
    ));
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "Warning: holdfast: label holdfast.dev/protected=\"always\" on ConfigMap {ns}/almost \
             does not protect it: the value must be exactly \"Always\" or \"true\" or \
             \"Cascading\" (case-sensitive, no spaces)."
        )
    );
    // It indeed protects nothing.
    ok(as_alice(t, &["delete", "cm", "almost", "-n", ns]));
    // A protecting value: no warning.
    let out = ok(as_alice(t, &["create", "cm", "kept", "-n", ns]));
    assert_eq!(out.stderr, "");
    let out = ok(as_alice(
        t,
        &[
            "label",
            "cm",
            "kept",
            "-n",
            ns,
            "holdfast.dev/protected=Always",
        ],
    ));
    assert_eq!(out.stderr, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn own_installation_is_guarded_by_an_admission_policy() {
    let mut t = shipped_with(false, true).await;
    t.s.env
        .wait_served(&[
            "validatingadmissionpolicybinding",
            "holdfast-self-protection",
        ])
        .await;
    let env = t.env();
    // The webhook's Deployment, as the manifests ship it (paused on a cluster:
    // `Env::install_overlay`).
    assert!(
        env.exists(&["deployment", "holdfast-webhook", "-n", "holdfast-system"])
            .expect("get")
    );
    let ns = t.ns.as_str();
    ok(env.attempt(&["create", "cm", "keep", "-n", ns]));
    ok(env.attempt(&[
        "label",
        "cm",
        "keep",
        "-n",
        ns,
        "holdfast.dev/protected=true",
    ]));
    let message = format!(
        "ValidatingAdmissionPolicy 'holdfast-self-protection' with binding \
         'holdfast-self-protection' denied request: holdfast: this object is part of \
         holdfast's own installation; only the holdfast controller \
         (system:serviceaccount:holdfast-system:holdfast-controller) or members of {} may \
         change or delete it (policy: ValidatingAdmissionPolicy/holdfast-self-protection). To \
         uninstall holdfast, delete the ValidatingAdmissionPolicyBinding \
         holdfast-self-protection first, with the controller stopped.",
        t.admins
    );
    let message = message.as_str();
    // The cluster admin (system:masters) is not the controller: refused, for the
    // configuration, a CRD, and scaling the webhook away.
    let out = env.attempt(&["delete", "validatingwebhookconfiguration", "holdfast"]);
    refused_with(
        &out,
        &format!(
            "Error from server (Forbidden): validatingwebhookconfigurations.admissionregistration.k8s.io \"holdfast\" is forbidden: {message}"
        ),
    );
    let out = env.attempt(&["delete", "crd", "resourceprotections.holdfast.dev"]);
    refused_with(
        &out,
        &format!(
            "Error from server (Forbidden): customresourcedefinitions.apiextensions.k8s.io \"resourceprotections.holdfast.dev\" is forbidden: {message}"
        ),
    );
    let out = env.attempt(&words(
        "scale deployment holdfast-webhook -n holdfast-system --replicas=0",
    ));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.trim_end().ends_with(message), "{}", out.stderr);
    // It holds while the webhook is down: the API server evaluates it.
    t.s.env.webhook = None;
    let env = t.env();
    let out = env.attempt(&["delete", "validatingwebhookconfiguration", "holdfast"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.trim_end().ends_with(message), "{}", out.stderr);
    // So deleting the configuration and then a protected object back to back does
    // not get the object deleted (the webhook being down, the API server fails
    // closed).
    let out = env.attempt(&["delete", "cm", "keep", "-n", ns]);
    assert_eq!(out.code, 1, "{out:?}");
    ok(env.attempt(&["get", "cm", "keep", "-n", ns]));
    // A member of the named admin group may change it.
    ok(env
        .kubectl_by(
            &t.ops,
            &words("annotate crd resourceprotections.holdfast.dev note=checked"),
        )
        .expect("kubectl"));
    // Other objects of the same kinds are not concerned.
    ok(env.attempt(&["create", "cm", "holdfast-webhook", "-n", "holdfast-system"]));
    ok(env.attempt(&["delete", "cm", "holdfast-webhook", "-n", "holdfast-system"]));
}

/// An APIService of a group of the test's own whose discovery fails: it names a
/// Service nothing serves (the API server answers 503 for it).
fn broken_api(group: &str, ns: &str) -> String {
    json!({
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": format!("v1beta1.{group}")},
        "spec": {
            "group": group,
            "version": "v1beta1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
            "insecureSkipTLSVerify": true,
            "service": {"name": "unreachable-api", "namespace": ns},
        },
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broken_aggregated_api_keeps_containment_closed() {
    let t = &shipped(false).await;
    let env = t.env();
    let probe = env.webhook.as_ref().map(|w| w.probe_port).expect("probe");
    let victim = env.namespace("victim").expect("namespace");
    let victim = victim.as_str();
    for name in ["plain", "precious"] {
        ok(env.attempt(&["create", "cm", name, "-n", victim]));
    }
    ok(env.attempt(&["create", "secret", "generic", "creds", "-n", victim]));
    ok(env.attempt(&[
        "label",
        "cm",
        "precious",
        "-n",
        victim,
        "holdfast.dev/protected=Always",
    ]));
    let contained = format!(
        "Error from server (Forbidden): admission webhook \"containment.holdfast.dev\" denied \
         the request: holdfast: Namespace {victim} holds objects that are protected from \
         deletion: ConfigMap {victim}/precious (label) (policy: containment), so it cannot be \
         deleted: that would leave it half-deleted. To delete it, first lift the protection of \
         those objects (or delete them), or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection on the \
         namespace."
    );
    namespace_refused_until(t, victim, 30, &contained).await;

    // One aggregated API (a group of the test's own) breaks: its discovery answers 503.
    let group = holdfast_e2e::unique_name("broken").replace('-', "") + ".test.io";
    let apiservice = format!("v1beta1.{group}");
    if let Some(run) = &env.cluster {
        run.remove_later("apiservice", &apiservice);
    }
    env.apply(&broken_api(&group, victim)).expect("APIService");
    let ready_prefix =
        format!("not ready: API discovery incomplete (discovery of {group}/v1beta1 failed: ");
    let ready_suffix =
        "); namespace and CustomResourceDefinition deletions are refused until it completes";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let body = loop {
        let got = holdfast_e2e::http_get(probe, "/readyz").await;
        if let Ok((503, body)) = &got {
            break body.trim_end().to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/readyz never reported the broken discovery; last: {got:?}\n{}",
            env.webhook_log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        body.starts_with(&ready_prefix) && body.ends_with(ready_suffix),
        "{body}"
    );
    // The namespace deletion is refused outright, nothing in it is touched.
    let out = as_alice(t, &["delete", "ns", victim, "--wait=false"]);
    let stderr = out.stderr.trim_end();
    assert_eq!(out.code, 1, "{out:?}");
    let prefix = format!(
        "Error from server (Forbidden): admission webhook \"containment.holdfast.dev\" denied \
         the request: holdfast: cannot verify what Namespace {victim} holds: API discovery is \
         incomplete (discovery of {group}/v1beta1 failed: "
    );
    let suffix = "), so objects of some resources cannot be seen. Refusing rather than risk a \
                  half-deleted namespace; retry later, or set the annotation \
                  holdfast.dev/skip-protection=true if you are allowed to bypass protection.";
    assert!(
        stderr.starts_with(&prefix) && stderr.ends_with(suffix),
        "{stderr}"
    );
    let phase = get_json(env, &["get", "ns", victim])["status"]["phase"].clone();
    assert_eq!(phase, "Active");
    let names = ok(env.attempt(&["get", "cm,secret", "-n", victim, "-o", "name"]));
    assert_eq!(
        names.stdout,
        "configmap/kube-root-ca.crt\nconfigmap/plain\nconfigmap/precious\nsecret/creds\n"
    );
    // Ordinary deletions go on: an unprotected object goes, a protected one stays.
    ok(as_alice(t, &["delete", "cm", "plain", "-n", victim]));
    let out = as_alice(t, &["delete", "cm", "precious", "-n", victim]);
    assert_eq!(out.code, 1, "{out:?}");

    // The API comes back (its APIService removed): ready again, and the label store
    // was kept all along: containment names the protected object at once.
    ok(env.attempt(&["delete", "apiservice", &apiservice]));
    env.wait_webhook_ready().await.expect("ready again");
    let out = as_alice(t, &["delete", "ns", victim, "--dry-run=server"]);
    refused_with(&out, &contained);
}
