//! Cascading protection end to end: the real `holdfast-webhook` and
//! `holdfast-controller` run as the service accounts the manifests ship (their RBAC,
//! authorization on) against the simulator or the cluster of
//! `HOLDFAST_E2E_KUBECONFIG`, driven by the real `kubectl` as a user of the test's
//! own who may delete anything (an RBAC grant the test creates) but not bypass
//! protection.
//!
//! A Namespace labelled `Cascading` is refused while it holds live Pods or PVCs, a
//! CustomResourceDefinition while it has instances, a Deployment (and a custom
//! workload with a scale subresource) while it has replicas; each is allowed once
//! drained. Kruise's key and values on a cluster started with that
//! `--protection-label`, a ResourceProtection in `mode: Cascading`, and strict mode
//! refusing the removal of a `Cascading` label; under `--label-only` (no watches)
//! `Cascading` protects like `Always`.

use holdfast_e2e::rbac::{self, TestUser};
use holdfast_e2e::steps::merge_patch;
use holdfast_e2e::{
    Env, KubectlOutput, fixtures,
    steps::{eventually, wait_webhook_installed, words},
};
use holdfast_sim::SimConfig;

const KRUISE: &str = "policy.kruise.io/delete-protection=Always,Cascading";

/// The label webhooks of the built-in key and of the extra key.
const LABEL_0: &str = "delete-label-0.holdfast.dev";
const LABEL_1: &str = "delete-label-1.holdfast.dev";
/// Namespace and CRD containment: it refuses a namespace or CRD DELETE a label
/// webhook refuses, with the same message.
const CONTAINMENT: &str = "containment.holdfast.dev";

use holdfast_e2e::controller::Shipped as Stack;

/// holdfast as the manifests ship it, a namespace of the test's own and alice, a
/// user who may do anything to ordinary objects (an RBAC grant of the test's own)
/// but not bypass protection.
struct Cascading {
    s: Stack,
    /// The namespace named after `ns` ([`Env::namespace`]).
    ns: String,
    alice: TestUser,
}

/// [`Cascading`]: both binaries started with `args` (`--strict`,
/// `--protection-label ...`), and a namespace named after `ns` created.
async fn shipped(args: &[&str], ns: &str) -> Cascading {
    let cfg = holdfast_e2e::with_service_accounts(SimConfig::default());
    let s = holdfast_e2e::controller::shipped_stack(cfg, args, args)
        .await
        .expect("holdfast as shipped");
    wait_webhook_installed(&s.env, "eviction.holdfast.dev").await;
    let ns = s.env.namespace(ns).expect("namespace");
    let alice = s.env.test_user("alice", &["dev"]).expect("alice");
    s.env
        .grant_cluster(
            "alice-edits",
            &[rbac::user(&alice.name)],
            &[rbac::everyday()],
        )
        .expect("alice's grant");
    Cascading { s, ns, alice }
}

fn admin(env: &Env, args: &[&str]) -> KubectlOutput {
    let out = env.kubectl(args).expect("kubectl");
    assert_eq!(out.code, 0, "kubectl {}: {out:?}", args.join(" "));
    out
}

fn apply(env: &Env, manifest: &str) {
    let out = env
        .kubectl_stdin(&["apply", "-f", "-"], manifest)
        .expect("kubectl");
    assert_eq!(out.code, 0, "apply {manifest}: {out:?}");
}

fn as_alice(t: &Cascading, args: &[&str]) -> KubectlOutput {
    t.s.env.kubectl_by(&t.alice, args).expect("kubectl")
}

/// `kubectl` as alice, repeated (up to 30 s) until it gives exactly the refusal
/// of one of `webhooks` with `message` ([`denied`]; all of them refuse when
/// several match, and the API server returns the refusal that reaches it first) and
/// exit code 1: the first answers may be "not ready, retry later" while the stores
/// Cascading reads start, or name objects whose removal the watches have not
/// delivered yet.
async fn refused_until(t: &Cascading, args: &[&str], webhooks: &[&str], message: &str) {
    let stderr: Vec<String> = webhooks.iter().map(|w| denied(w, message)).collect();
    let line = args.join(" ");
    eventually(30, async || {
        let out = as_alice(t, args);
        assert_ne!(
            out.code, 0,
            "kubectl {line} was allowed; expected {stderr:?}"
        );
        if out.code == 1 && stderr.iter().any(|s| out.stderr.trim_end() == s) {
            return Ok(());
        }
        Err(format!(
            "kubectl {line} never refused with one of\n{stderr:?}\nlast: {out:?}\nwebhook log:\n{}",
            t.s.env.webhook_log()
        ))
    })
    .await;
}

/// `kubectl` as alice, repeated (up to 30 s) until it succeeds (the watches have
/// seen the contents go); returns its output.
async fn allowed_until(t: &Cascading, args: &[&str]) -> KubectlOutput {
    let line = args.join(" ");
    eventually(30, async || match as_alice(t, args) {
        out if out.code == 0 => Ok(out),
        out => Err(format!(
            "kubectl {line} was never allowed; last: {out:?}\nwebhook log:\n{}",
            t.s.env.webhook_log()
        )),
    })
    .await
}

/// Namespace `ns`'s refusal while it still `holds` live contents, protected `by`
/// a policy (as the message describes it) that `unprotect` lifts.
fn holds_live(ns: &str, by: &str, holds: &str, unprotect: &str) -> String {
    format!(
        "holdfast: Namespace {ns} is protected by {by} while it holds live Pods or \
         PersistentVolumeClaims, and it still holds {holds}, so it cannot be deleted. To \
         delete it, first delete those Pods and PersistentVolumeClaims (scale their \
         workloads to 0 first); or {unprotect}, or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    )
}

/// [`holds_live`] for a namespace labelled `key=Cascading`.
fn holds_live_by_label(ns: &str, key: &str, holds: &str) -> String {
    holds_live(
        ns,
        &format!("label {key}=Cascading (policy: label {key})"),
        holds,
        &format!("remove the label (kubectl label namespaces {ns} {key}-)"),
    )
}

/// Asserts kubectl's answer `out` is exactly the refusal of one of `webhooks`
/// with `message` ([`denied`]), exit code 1 (several webhooks refusing: the API
/// server returns the refusal that reaches it first).
fn refused_exactly(out: &KubectlOutput, webhooks: &[&str], message: &str) {
    let possible: Vec<String> = webhooks.iter().map(|w| denied(w, message)).collect();
    assert!(
        out.code == 1 && possible.iter().any(|p| out.stderr.trim_end() == p),
        "{out:?}\nexpected one of {possible:?}"
    );
}

/// Asserts kubectl's answer `out` succeeded printing exactly the line `stdout`.
fn succeeded(out: &KubectlOutput, stdout: &str) {
    assert_eq!((out.code, out.stdout.trim_end()), (0, stdout), "{out:?}");
}

/// Alice's deletion of namespace `ns`, repeated until allowed ([`allowed_until`]);
/// asserts kubectl printed exactly that it deleted it.
async fn alice_deletes_namespace(t: &Cascading, ns: &str) {
    let out = allowed_until(t, &["delete", "namespace", ns, "--wait=false"]).await;
    assert_eq!(out.stdout.trim_end(), format!("namespace \"{ns}\" deleted"));
}

/// Asserts alice's `kubectl args` deletes `what` (`kind "name"`), exactly.
fn alice_deletes(t: &Cascading, args: &[&str], what: &str) {
    succeeded(&as_alice(t, args), &format!("{what} deleted"));
}

/// `kubectl` as alice; the test fails unless it exits 0.
fn ok_as_alice(t: &Cascading, args: &[&str]) {
    let out = as_alice(t, args);
    assert_eq!(out.code, 0, "{out:?}");
}

fn denied(webhook: &str, message: &str) -> String {
    format!(
        "Error from server (Forbidden): {}",
        holdfast_e2e::denied_by(webhook, message)
    )
}

fn pod(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{containers: [{{name: app, image: registry.example/app:1}}]}}\n"
    )
}

fn pvc(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n"
    )
}

fn deployment(ns: &str, name: &str, label: &str, replicas: u32) -> String {
    let (key, value) = label.split_once('=').expect("KEY=VALUE");
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {ns}, \
         labels: {{{key}: {value}}}}}\nspec:\n  replicas: {replicas}\n  selector: \
         {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    \
         spec: {{containers: [{{name: app, image: registry.example/app:1}}]}}\n"
    )
}

/// A namespaced custom workload with a scale subresource whose replica count lives
/// at `.spec.workers`.
fn gadget_crd() -> String {
    let workers = serde_json::json!({
        "type": "object",
        "properties": {"workers": {"type": "integer"}},
    });
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.workloads.test.io"},
        "spec": {
            "group": "workloads.test.io",
            "scope": "Namespaced",
            "names": {
                "plural": "gadgets",
                "singular": "gadget",
                "kind": "Gadget",
                "listKind": "GadgetList",
            },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {
                    "scale": {
                        "specReplicasPath": ".spec.workers",
                        "statusReplicasPath": ".status.workers",
                    },
                },
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": workers, "status": workers},
                }},
            }],
        },
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_kind_is_refused_while_alive_and_allowed_once_drained() {
    let t = &shipped(&[], "shop").await;
    let (env, shop) = (&t.s.env, t.ns.as_str());

    // A Namespace: refused while a Pod runs or a PVC exists; a Succeeded Pod is not
    // live.
    apply(env, &pod(shop, "web-0"));
    apply(env, &pod(shop, "done"));
    admin(
        env,
        &merge_patch(
            &format!("pod done -n {shop} --subresource=status"),
            r#"{"status":{"phase":"Succeeded"}}"#,
        ),
    );
    apply(env, &pvc(shop, "data"));
    admin(
        env,
        &[
            "label",
            "namespace",
            shop,
            "holdfast.dev/protected=Cascading",
        ],
    );
    let delete_ns = ["delete", "namespace", shop, "--wait=false"];
    let still_holds = async |holds: &str| {
        let refusal = holds_live_by_label(shop, "holdfast.dev/protected", holds);
        refused_until(t, &delete_ns, &[LABEL_0, CONTAINMENT], &refusal).await;
    };
    still_holds(&format!(
        "2: Pod {shop}/web-0, PersistentVolumeClaim {shop}/data"
    ))
    .await;
    admin(env, &["delete", "pod", "web-0", "-n", shop]);
    still_holds(&format!("1: PersistentVolumeClaim {shop}/data")).await;
    admin(env, &["delete", "pvc", "data", "-n", shop, "--wait=false"]);
    alice_deletes_namespace(t, shop).await;

    // A Deployment: refused while it has replicas, allowed once scaled to 0.
    let apps = env.namespace("apps").expect("namespace");
    let apps = apps.as_str();
    apply(
        env,
        &deployment(apps, "web", "holdfast.dev/protected=Cascading", 2),
    );
    let delete_web = ["delete", "deployment", "web", "-n", apps];
    refused_exactly(
        &as_alice(t, &delete_web),
        &[LABEL_0],
        &format!(
            "holdfast: Deployment {apps}/web is protected by label \
             holdfast.dev/protected=Cascading (policy: label holdfast.dev/protected) while \
             it has replicas, and it still has .spec.replicas=2, so it cannot be deleted. \
             To delete it, first scale it to 0 (kubectl scale deployments.apps web -n {apps} \
             --replicas=0); or remove the label (kubectl label deployments.apps web -n {apps} \
             holdfast.dev/protected-), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
    ok_as_alice(
        t,
        &["scale", "deployment", "web", "-n", apps, "--replicas=0"],
    );
    alice_deletes(t, &delete_web, r#"deployment.apps "web""#);

    // A custom workload with a scale subresource, through its CRD's replica path
    // (scaling it through the scale subresource sets that path).
    env.apply_crds(&gadget_crd()).expect("CRD");
    env.wait_served(&["gadgets", "-A"]).await;
    apply(
        env,
        &format!(
            "apiVersion: workloads.test.io/v1\nkind: Gadget\nmetadata: {{name: g1, namespace: {apps}, \
             labels: {{holdfast.dev/protected: Cascading}}}}\nspec: {{workers: 3}}\n"
        ),
    );
    let delete_gadget = ["delete", "gadget", "g1", "-n", apps];
    refused_until(
        t,
        &delete_gadget,
        &[LABEL_0],
        &format!(
            "holdfast: Gadget {apps}/g1 is protected by label holdfast.dev/protected=Cascading \
             (policy: label holdfast.dev/protected) while it has replicas, and it still has \
             .spec.workers=3, so it cannot be deleted. To delete it, first scale it to 0 \
             (kubectl scale gadgets.workloads.test.io g1 -n {apps} --replicas=0); or remove the \
             label (kubectl label gadgets.workloads.test.io g1 -n {apps} \
             holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true \
             if you are allowed to bypass protection."
        ),
    )
    .await;
    ok_as_alice(t, &["scale", "gadget", "g1", "-n", apps, "--replicas=0"]);
    alice_deletes(t, &delete_gadget, r#"gadget.workloads.test.io "g1""#);

    // A CustomResourceDefinition: refused while an instance exists.
    env.apply_crds(&fixtures::widget_crd()).expect("CRD");
    env.wait_served(&["widgets", "-A"]).await;
    apply(
        env,
        &format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w1, namespace: {apps}}}\n"
        ),
    );
    admin(
        env,
        &words("label crd widgets.example.com holdfast.dev/protected=Cascading"),
    );
    let delete_crd = ["delete", "crd", "widgets.example.com", "--wait=false"];
    refused_until(
        t,
        &delete_crd,
        &[LABEL_0, CONTAINMENT],
        &format!(
            "holdfast: CustomResourceDefinition widgets.example.com is protected by label \
             holdfast.dev/protected=Cascading (policy: label holdfast.dev/protected) while it \
             has instances, and it still has 1: Widget {apps}/w1, so it cannot be deleted. To \
             delete it, first delete its instances (kubectl delete widgets.example.com --all \
             --all-namespaces); or remove the label (kubectl label \
             customresourcedefinitions.apiextensions.k8s.io widgets.example.com \
             holdfast.dev/protected-), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    )
    .await;
    admin(env, &["delete", "widget", "w1", "-n", apps]);
    let out = allowed_until(t, &delete_crd).await;
    assert_eq!(
        out.stdout.trim_end(),
        "customresourcedefinition.apiextensions.k8s.io \"widgets.example.com\" deleted"
    );
    env.kubectl_until(&["get", "crd", "widgets.example.com"], 30, |o| {
        o.is_not_found()
    })
    .await
    .expect("the CRD is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kruise_key_and_values_behave_as_kruise_users_expect() {
    let t = &shipped(&["--protection-label", KRUISE], "team").await;
    let (env, team) = (&t.s.env, t.ns.as_str());

    // Always protects always, Cascading while replicas remain.
    apply(
        env,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {team}, \
             labels: {{policy.kruise.io/delete-protection: Always}}}}\n"
        ),
    );
    refused_exactly(
        &as_alice(t, &["delete", "configmap", "settings", "-n", team]),
        &[LABEL_1],
        &format!(
            "holdfast: ConfigMap {team}/settings is protected by label \
             policy.kruise.io/delete-protection=Always (policy: label \
             policy.kruise.io/delete-protection), so it cannot be deleted. To delete it, \
             remove the label (kubectl label configmaps settings -n {team} \
             policy.kruise.io/delete-protection-), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
    apply(
        env,
        &deployment(
            team,
            "api",
            "policy.kruise.io/delete-protection=Cascading",
            1,
        )
        .replace("kind: Deployment", "kind: StatefulSet")
        .replace("  selector:", "  serviceName: api\n  selector:"),
    );
    let delete_sts = ["delete", "statefulset", "api", "-n", team];
    refused_exactly(
        &as_alice(t, &delete_sts),
        &[LABEL_1],
        &format!(
            "holdfast: StatefulSet {team}/api is protected by label \
             policy.kruise.io/delete-protection=Cascading (policy: label \
             policy.kruise.io/delete-protection) while it has replicas, and it still has \
             .spec.replicas=1, so it cannot be deleted. To delete it, first scale it to 0 \
             (kubectl scale statefulsets.apps api -n {team} --replicas=0); or remove the \
             label (kubectl label statefulsets.apps api -n {team} \
             policy.kruise.io/delete-protection-), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
    admin(
        env,
        &["scale", "statefulset", "api", "-n", team, "--replicas=0"],
    );
    alice_deletes(t, &delete_sts, r#"statefulset.apps "api""#);

    // A Namespace with Kruise's Cascading: refused while a Pod runs.
    apply(env, &pod(team, "worker"));
    admin(
        env,
        &[
            "label",
            "namespace",
            team,
            "policy.kruise.io/delete-protection=Cascading",
        ],
    );
    let delete_ns = ["delete", "namespace", team, "--wait=false"];
    refused_until(
        t,
        &delete_ns,
        &[LABEL_1, CONTAINMENT],
        &holds_live_by_label(
            team,
            "policy.kruise.io/delete-protection",
            &format!("1: Pod {team}/worker"),
        ),
    )
    .await;
    admin(env, &["delete", "pod", "worker", "-n", team]);
    // Drained of Pods, it still holds a ConfigMap its own Always protects.
    refused_until(
        t,
        &delete_ns,
        &[LABEL_1, CONTAINMENT],
        &format!(
            "holdfast: Namespace {team} holds objects that are protected from deletion: \
             ConfigMap {team}/settings (label) (policy: containment), so it cannot be deleted: \
             that would leave it half-deleted. To delete it, first lift the protection of those \
             objects (or delete them), or set the annotation holdfast.dev/skip-protection=true \
             if you are allowed to bypass protection on the namespace."
        ),
    )
    .await;
    admin(
        env,
        &[
            "label",
            "configmap",
            "settings",
            "-n",
            team,
            "policy.kruise.io/delete-protection-",
        ],
    );
    alice_deletes_namespace(t, team).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cascading_resource_protection_lets_an_empty_namespace_go() {
    let t = &shipped(&[], "scratch").await;
    let (env, scratch) = (&t.s.env, t.ns.as_str());
    apply(env, &pvc(scratch, "cache"));
    // The policy's name is the test's own: ResourceProtections are cluster-scoped.
    let policy = holdfast_e2e::unique_name("scratch-while-used");
    apply(
        env,
        &format!(
            "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\n\
             metadata: {{name: {policy}}}\nspec:\n  mode: Cascading\n  resources:\n  \
             - {{version: v1, resource: namespaces, names: [{scratch}]}}\n"
        ),
    );
    // The stored policy says Cascading; an existing one without mode stays Always.
    let rp = env
        .get_json(&["resourceprotection", &policy])
        .expect("policy");
    assert_eq!(rp["spec"]["mode"], "Cascading");
    let delete_ns = ["delete", "namespace", scratch, "--wait=false"];
    let scratch_refusal = holds_live(
        scratch,
        &format!(
            "ResourceProtection/{policy} (selects namespaces named {scratch}, mode Cascading)"
        ),
        &format!("1: PersistentVolumeClaim {scratch}/cache"),
        &format!("remove it from the policy (kubectl edit resourceprotection {policy})"),
    ) + " To have holdfast delete it once nothing blocks it, ask for deferred deletion \
         (holdfast.dev/delete-when-unblocked).";
    refused_until(
        t,
        &delete_ns,
        &["policies-0.holdfast.dev"],
        &scratch_refusal,
    )
    .await;
    admin(
        env,
        &["delete", "pvc", "cache", "-n", scratch, "--wait=false"],
    );
    alice_deletes_namespace(t, scratch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strict_mode_refuses_removing_a_cascading_label() {
    let t = &shipped(&["--strict"], "vault").await;
    let (env, vault) = (&t.s.env, t.ns.as_str());
    admin(
        env,
        &[
            "label",
            "namespace",
            vault,
            "holdfast.dev/protected=Cascading",
        ],
    );
    refused_exactly(
        &as_alice(t, &["label", "namespace", vault, "holdfast.dev/protected-"]),
        &["strict-label-0.holdfast.dev", "break-glass.holdfast.dev"],
        &format!(
            "holdfast: Namespace {vault} carries the protection label \
             holdfast.dev/protected=Cascading and strict mode is on (policy: strict label \
             holdfast.dev/protected), so the label cannot be removed or changed to a value \
             that does not protect. To unprotect it, first mark it exempt in its own update \
             (kubectl label namespaces {vault} holdfast.dev/strict-exempt=true, which takes \
             the bypass permission on protections.holdfast.dev), then remove the label."
        ),
    );
    // Cascading -> Always keeps it protected: allowed.
    succeeded(
        &as_alice(
            t,
            &[
                "label",
                "namespace",
                vault,
                "holdfast.dev/protected=Always",
                "--overwrite",
            ],
        ),
        &format!("namespace/{vault} labeled"),
    );
    let labels = env.get_json(&["namespace", vault]).expect("namespace");
    assert_eq!(
        labels["metadata"]["labels"]["holdfast.dev/protected"],
        "Always"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn label_only_mode_protects_cascading_like_always() {
    let mut env = Env::start().await.expect("sim");
    env.start_webhook(&["--label-only"]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("ready");
    env.install_label_webhooks(&[], false)
        .expect("configuration");
    // An empty namespace and a workload scaled to 0: drained, yet refused, because
    // a webhook that watches nothing cannot tell.
    let empty = env.namespace("empty").expect("namespace");
    admin(
        &env,
        &[
            "label",
            "namespace",
            &empty,
            "holdfast.dev/protected=Cascading",
        ],
    );
    refused_exactly(
        &env.attempt(&["delete", "namespace", &empty, "--wait=false"]),
        &[LABEL_0, CONTAINMENT],
        &format!(
            "holdfast: Namespace {empty} is protected by label \
             holdfast.dev/protected=Cascading (policy: label holdfast.dev/protected), so it \
             cannot be deleted (this webhook does not watch live contents, so Cascading \
             protects like Always here). To delete it, remove the label (kubectl label \
             namespaces {empty} holdfast.dev/protected-), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
    apply(
        &env,
        &deployment(&empty, "idle", "holdfast.dev/protected=Cascading", 0),
    );
    refused_exactly(
        &env.attempt(&["delete", "deployment", "idle", "-n", &empty]),
        &[LABEL_0],
        &format!(
            "holdfast: Deployment {empty}/idle is protected by label \
             holdfast.dev/protected=Cascading (policy: label holdfast.dev/protected), so it \
             cannot be deleted (this webhook does not watch live contents, so Cascading \
             protects like Always here). To delete it, remove the label (kubectl label \
             deployments.apps idle -n {empty} holdfast.dev/protected-), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    );
}
