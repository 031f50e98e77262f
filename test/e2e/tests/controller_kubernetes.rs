//! holdfast-controller on the Kubernetes topology, end to end: the real
//! controller and webhook binaries against holdfast-sim, driven by kubectl.

use std::time::{Duration, Instant};

use holdfast_e2e::controller::elect;
use holdfast_e2e::fixtures::resource_protection;
use holdfast_e2e::steps;
use holdfast_e2e::steps::eventually;
use holdfast_e2e::steps::installed_configuration;
use holdfast_e2e::steps::merge_patch;
use holdfast_e2e::steps::wait_ready;
use holdfast_e2e::{
    Env,
    controller::{
        ControllerProcess, condition, rules_of, start_controller, wait_condition_at,
        wait_configuration, webhook_names,
    },
    denied_by,
    steps::words,
};
use serde_json::Value;

const POLICIES: &str = "policies-0.holdfast.dev";
const LABEL: &str = "delete-label-0.holdfast.dev";
const CONTAINMENT: &str = "containment.holdfast.dev";

/// The webhook receiving pod evictions.
const EVICTION: &str = "eviction.holdfast.dev";
const DEFERRED: &str = "deferred.holdfast.dev";
const MARKER: &str = "containment-marker.holdfast.dev";

/// A webhook rule sending the DELETEs of `group`/`resource`.
fn delete_rule(group: &str, resource: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        vec![group.to_string()],
        vec![resource.to_string()],
        vec!["DELETE".to_string()],
    )
}

/// CRD DELETEs always reach the containment webhook (CRD containment).
fn crd_rule() -> (Vec<String>, Vec<String>, Vec<String>) {
    delete_rule("apiextensions.k8s.io", "customresourcedefinitions")
}

/// Asserts `cfg` holds no policy's webhook: label protection, containment of
/// namespaces and CRDs, eviction and deferred deletion only.
fn assert_without_policies(cfg: &Value, context: &str) {
    assert_eq!(
        webhook_names(cfg),
        [LABEL, CONTAINMENT, EVICTION, DEFERRED, MARKER],
        "{context}"
    );
    assert_eq!(
        rules_of(cfg, CONTAINMENT),
        vec![delete_rule("", "namespaces"), crd_rule()],
        "{context}"
    );
}

/// Waits (at most `secs`) until the configuration sends DELETEs of
/// `group`/`resource` ([`has_rule`]), failing with `what`; returns it and logs
/// how long that took.
async fn routing(env: &Env, secs: u64, group: &str, resource: &str, what: &str) -> Value {
    let (cfg, took) = wait_configuration(env, Duration::from_secs(secs), |c| {
        has_rule(c, group, resource)
    })
    .await
    .expect(what);
    eprintln!("{what} after {took:?}");
    cfg.expect("present")
}

/// Waits (at most `secs`) until the condition `query` names (`"kind name type
/// status"`) has that status, failing with `what`; returns the condition.
async fn condition_becomes(env: &Env, query: &str, secs: u64, what: &str) -> Value {
    wait_condition_at(env, None, steps::query(query), secs)
        .await
        .expect(what)
}

/// Applies the JSON patch `patch` to the configuration holdfast by hand, as
/// the admin.
fn patch_configuration(env: &Env, patch: &str) {
    env.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        "holdfast",
        "--type=json",
        "-p",
        patch,
    ])
    .expect("kubectl")
    .ok()
    .expect("patched");
}

/// Creates namespace `ns` labelled `label` (`KEY=VALUE`).
fn labelled_namespace(env: &Env, ns: &str, label: &str) -> String {
    let ns = env.namespace(ns).expect("namespace");
    env.run(&["label", "namespace", &ns, label]);
    ns
}

/// Asserts the (dry-run) DELETE of namespace `ns` is refused by `webhook` with
/// `text`; `why` says what the refusal shows.
fn namespace_refused(env: &Env, ns: &str, webhook: &str, text: &str, why: &str) {
    let out = env.attempt(&["delete", "namespace", ns, "--dry-run=server"]);
    assert_ne!(out.code, 0, "{why}: {out:?}");
    assert!(
        out.refused_with(&denied_by(webhook, text)),
        "{why}: {out:?}"
    );
}

/// [`env_with_webhook`] and the controller, started without flags.
async fn stack() -> (Env, ControllerProcess) {
    let env = env_with_webhook().await;
    let c = controller(&env, "controller", &[]).await;
    (env, c)
}

async fn env_with_webhook() -> Env {
    env_with_webhook_args(&[]).await
}

/// A sim with the CRDs and a webhook started with `args` (which must agree with the
/// controller's strict and label settings: the webhook stops when they differ).
async fn env_with_webhook_args(args: &[&str]) -> Env {
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    env.start_webhook(args).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    env
}

fn webhook_port(env: &Env) -> u16 {
    env.webhook
        .as_ref()
        .map(|w| w.port)
        .expect("webhook running")
}

async fn controller(env: &Env, name: &str, args: &[&str]) -> ControllerProcess {
    let mut c = start_controller(env, name, webhook_port(env), args).expect("controller starts");
    c.wait_ready(30).await.expect("controller ready");
    c
}

/// Whether a `policies-<i>` webhook (or, for namespaces, the containment webhook)
/// receives DELETEs of `group`/`resource`.
fn has_rule(cfg: Option<&Value>, group: &str, resource: &str) -> bool {
    cfg.is_some_and(|c| {
        webhook_names(c)
            .iter()
            .filter(|n| n.starts_with("policies-") || *n == CONTAINMENT)
            .any(|name| {
                rules_of(c, name).iter().any(|(g, r, ops)| {
                    g.iter().any(|x| x == group)
                        && r.iter().any(|x| x == resource)
                        && ops == &["DELETE"]
                })
            })
    })
}

/// ResourceProtection shop-config: ConfigMap `settings` in namespace `shop`.
fn rp_configmaps(shop: &str) -> String {
    let configmaps = format!(
        r#"{{group: "", version: v1, resource: configmaps, namespace: {shop}, names: [settings]}}"#
    );
    resource_protection("shop-config", "", &[&configmaps])
}

/// [`rp_configmaps`] and every Deployment in `shop`.
fn rp_configmaps_and_deployments(shop: &str) -> String {
    let configmaps = format!(
        r#"{{group: "", version: v1, resource: configmaps, namespace: {shop}, names: [settings]}}"#
    );
    let deployments =
        format!("{{group: apps, version: v1, resource: deployments, namespace: {shop}}}");
    resource_protection("shop-config", "", &[&configmaps, &deployments])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resource_protection_drives_the_configuration() {
    let (env, _c) = stack().await;

    // Without policies: label protection, and namespace DELETEs for containment
    // (a namespace holding a label-protected object must not be half-deleted).
    let cfg = installed_configuration(&env).await;
    assert_without_policies(&cfg, "before any policy");
    assert_eq!(cfg["webhooks"][0]["failurePolicy"], "Fail");
    assert_eq!(
        cfg["webhooks"][0]["clientConfig"]["url"],
        env.webhook_url().expect("webhook url")
    );
    assert!(
        cfg["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );

    // Labels and annotations others add to the configuration are left alone by the
    // reconciles that follow.
    env.run(&words(
        "label validatingwebhookconfiguration holdfast team=platform",
    ));
    env.run(&words(
        "annotate validatingwebhookconfiguration holdfast example.com/owner=ops",
    ));

    // Apply: the policies webhook appears with exactly configmaps (+ namespaces for containment).
    let shop = env.namespace("shop").expect("namespace");
    env.run(&[
        "create",
        "configmap",
        "settings",
        "-n",
        &shop,
        "--from-literal=a=b",
    ]);
    env.apply(&rp_configmaps(&shop)).expect("policy applied");
    let cfg = routing(&env, 10, "", "configmaps", "rule installed").await;
    assert_eq!(
        webhook_names(&cfg),
        [LABEL, CONTAINMENT, POLICIES, EVICTION, DEFERRED, MARKER]
    );
    assert_eq!(cfg["metadata"]["labels"]["team"], "platform", "{cfg}");
    assert_eq!(
        cfg["metadata"]["annotations"]["example.com/owner"], "ops",
        "{cfg}"
    );
    assert_eq!(
        cfg["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "holdfast-controller"
    );
    let rules = rules_of(&cfg, POLICIES);
    assert_eq!(
        rules,
        vec![delete_rule("", "configmaps")],
        "the policy's entry routes its ConfigMaps only"
    );
    let ready = wait_ready(&env, "resourceprotection", "shop-config").await;
    assert_eq!(ready["reason"], "Enforced");
    let installed = condition(&env, "resourceprotection", "shop-config", "Installed")
        .expect("kubectl")
        .expect("installed condition");
    assert_eq!(installed["status"], "True");
    let invalid = condition(&env, "resourceprotection", "shop-config", "Invalid")
        .expect("kubectl")
        .expect("invalid condition");
    assert_eq!(invalid["status"], "False");
    let out = env.attempt(&words(
        "get resourceprotection shop-config -o jsonpath={.status.observedGeneration}",
    ));
    assert_eq!(out.stdout, "1");

    // The protection works end to end.
    let out = env
        .kubectl_until(
            &[
                "delete",
                "configmap",
                "settings",
                "-n",
                &shop,
                "--dry-run=server",
            ],
            10,
            |o| o.code != 0,
        )
        .await
        .expect("refused");
    assert!(
        out.refused_with(&denied_by(
            POLICIES,
            &format!(
                "holdfast: ConfigMap {shop}/settings is protected by ResourceProtection/shop-config"
            )
        )),
        "{out:?}"
    );

    // Edit: deployments added to the same policy.
    env.apply(&rp_configmaps_and_deployments(&shop))
        .expect("policy edited");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "apps", "deployments")
    })
    .await
    .expect("rule updated");
    assert!(has_rule(cfg.as_ref(), "", "configmaps"));
    let out = env
        .kubectl_until(
            &words("get resourceprotection shop-config -o jsonpath={.status.observedGeneration}"),
            10,
            |o| o.stdout == "2",
        )
        .await
        .expect("observedGeneration follows");
    assert_eq!(out.stdout, "2");

    // Delete: the policy's resources go away; label protection and namespace
    // containment stay.
    env.run(&["delete", "resourceprotection", "shop-config"]);
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        c.is_some() && !has_rule(c, "", "configmaps") && !has_rule(c, "apps", "deployments")
    })
    .await
    .expect("rule removed");
    let cfg = cfg.expect("present");
    assert_without_policies(&cfg, "only namespaces and CRDs left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manual_edits_are_reverted_and_deletion_recreates() {
    let env = env_with_webhook_args(&["--strict"]).await;
    let _c = controller(&env, "controller", &["--strict"]).await;
    env.apply(&rp_configmaps("shop")).expect("policy applied");
    routing(&env, 10, "", "configmaps", "installed").await;

    // A manual edit (failure policy and rules) is reverted (how fast is a benchmark's
    // business: docs/testing.md).
    patch_configuration(
        &env,
        r#"[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"},{"op":"replace","path":"/webhooks/3/rules/0/resources","value":["secrets"]}]"#,
    );
    let (cfg, took) = wait_configuration(&env, Duration::from_secs(30), |c| {
        c.is_some_and(|c| c["webhooks"][0]["failurePolicy"] == "Fail")
            && has_rule(c, "", "configmaps")
    })
    .await
    .expect("edit reverted");
    eprintln!("manual edit reverted after {took:?}");
    assert!(!has_rule(cfg.as_ref(), "", "secrets"));
    // Strict mode: strict-label webhook present.
    assert!(
        webhook_names(&cfg.expect("present")).contains(&"strict-label-0.holdfast.dev".to_string())
    );

    // A webhook removed by hand comes back.
    patch_configuration(&env, r#"[{"op":"remove","path":"/webhooks/3"}]"#);
    let cfg = routing(&env, 30, "", "configmaps", "removed webhook restored").await;
    assert_eq!(
        webhook_names(&cfg),
        vec![
            LABEL,
            "strict-label-0.holdfast.dev",
            CONTAINMENT,
            POLICIES,
            EVICTION,
            DEFERRED,
            "break-glass.holdfast.dev",
            MARKER,
        ]
    );

    // Deleted: recreated.
    env.run(&["delete", "validatingwebhookconfiguration", "holdfast"]);
    let cfg = routing(
        &env,
        30,
        "",
        "configmaps",
        "deleted configuration recreated",
    )
    .await;
    assert_eq!(
        cfg["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "holdfast-controller"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cleanup_on_shutdown_leaves_nothing_behind() {
    let env = env_with_webhook().await;
    let mut c = controller(
        &env,
        "controller",
        &words("--cleanup-on-shutdown --failure-policy Ignore --timeout-seconds 5"),
    )
    .await;
    env.apply(&rp_configmaps("shop")).expect("policy applied");
    let cfg = routing(&env, 10, "", "configmaps", "installed").await;
    for hook in cfg["webhooks"].as_array().expect("webhooks") {
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(hook["timeoutSeconds"], 5);
    }
    let status = c.terminate(10).await.expect("exits on SIGTERM");
    assert!(status.success(), "exit status {status}: {}", c.log());
    let cfg = holdfast_e2e::controller::webhook_configuration(&env).expect("kubectl");
    assert!(cfg.is_none(), "configuration left behind: {cfg:?}");
    assert!(
        c.log().contains("cleanup on shutdown: deleted"),
        "{}",
        c.log()
    );

    // Without the flag, the configuration survives a shutdown.
    let mut c = controller(&env, "controller-2", &[]).await;
    wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("installed again");
    let status = c.terminate(10).await.expect("exits on SIGTERM");
    assert!(status.success());
    assert!(
        holdfast_e2e::controller::webhook_configuration(&env)
            .expect("kubectl")
            .is_some()
    );
}

fn rp_unknown() -> String {
    resource_protection(
        "widgets",
        "",
        &["{group: example.com, version: v1, resource: widgets}"],
    )
}

const RP_BAD_SELECTOR: &str = r#"
apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: bad-selector}
spec:
  resources:
  - group: ""
    version: v1
    resource: secrets
    labelSelector:
      matchExpressions:
      - {key: tier, operator: In}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_policies_are_reported_and_valid_ones_keep_working() {
    let (env, _c) = stack().await;
    env.apply(&rp_unknown()).expect("applied");
    env.apply(RP_BAD_SELECTOR).expect("applied");
    env.apply(&rp_configmaps("shop")).expect("applied");

    let widgets = "resourceprotection widgets Invalid True";
    let inv = condition_becomes(&env, widgets, 10, "unknown resource reported").await;
    assert_eq!(inv["reason"], "UnknownResource");
    assert!(
        inv["message"]
            .as_str()
            .is_some_and(|m| m.contains("widgets.example.com")),
        "{inv}"
    );
    let inv = condition_becomes(
        &env,
        "resourceprotection bad-selector Invalid True",
        10,
        "bad selector reported",
    )
    .await;
    assert_eq!(inv["reason"], "InvalidSelector");
    let ready = condition(&env, "resourceprotection", "widgets", "Ready")
        .expect("kubectl")
        .expect("ready");
    assert_eq!(ready["status"], "False");

    // The valid policy is enforced; the invalid ones add nothing.
    wait_ready(&env, "resourceprotection", "shop-config").await;
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("valid rule installed");
    assert!(!has_rule(cfg.as_ref(), "example.com", "widgets"));
    assert!(!has_rule(cfg.as_ref(), "", "secrets"));

    // A Warning Event on the policy names the problem.
    let events = env
        .wait_events("UnknownResource", "widgets", 30)
        .await
        .expect("event emitted");
    assert_eq!(events[0]["type"], "Warning", "{events:?}");
    assert_eq!(
        events[0]["regarding"]["kind"], "ResourceProtection",
        "{events:?}"
    );
    assert!(
        events[0]["note"]
            .as_str()
            .is_some_and(|n| n.contains("widgets.example.com")),
        "{events:?}"
    );

    // The CRD appears: the policy recovers on its own.
    env.apply_crds(&holdfast_e2e::fixtures::widget_crd())
        .expect("crd");
    wait_ready(&env, "resourceprotection", "widgets").await;
    wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "example.com", "widgets")
    })
    .await
    .expect("widgets now routed");
}

fn cycle_rules() -> String {
    use holdfast_e2e::fixtures::{dependency_rule, documents};
    documents(&[
        dependency_rule(
            "vm-needs-vpc",
            ("compute.test.io", "VirtualMachine", "virtualmachines"),
            &[("network.test.io", "vpcs", ".spec.vpcRef.name")],
        ),
        dependency_rule(
            "vpc-needs-vm",
            ("network.test.io", "VPC", "vpcs"),
            &[("compute.test.io", "virtualmachines", ".spec.gatewayVm")],
        ),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dependency_cycle_is_reported_on_both_rules() {
    let env = env_with_webhook().await;
    env.apply_crds(&holdfast_e2e::fixtures::vpc_vm_crds())
        .expect("crds");
    env.wait_served(&["vpcs"]).await;
    let _c = controller(&env, "controller", &[]).await;
    env.apply(&cycle_rules()).expect("rules");

    let a = condition_becomes(
        &env,
        "dependencyrule vm-needs-vpc CycleDetected True",
        10,
        "cycle on the first rule",
    )
    .await;
    let b = condition_becomes(
        &env,
        "dependencyrule vpc-needs-vm CycleDetected True",
        10,
        "cycle on the second rule",
    )
    .await;
    let msg = a["message"].as_str().expect("message");
    assert!(
        msg.contains("virtualmachines.compute.test.io → vpcs.network.test.io → virtualmachines.compute.test.io"),
        "{msg}"
    );
    assert!(
        msg.contains("vm-needs-vpc") && msg.contains("vpc-needs-vm"),
        "{msg}"
    );
    assert_eq!(
        a["message"], b["message"],
        "the same cycle named on both rules"
    );
    for rule in ["vm-needs-vpc", "vpc-needs-vm"] {
        let events = env
            .wait_events("CycleDetected", rule, 30)
            .await
            .expect("warning event");
        assert_eq!(events[0]["type"], "Warning", "{events:?}");
        assert_eq!(events[0]["note"], a["message"], "{events:?}");
    }
    // Both are still enforced (the cycle is a warning, not a reason to drop protection).
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "network.test.io", "vpcs") && has_rule(c, "compute.test.io", "virtualmachines")
    })
    .await
    .expect("both protected");
    assert!(
        has_rule(cfg.as_ref(), "", "namespaces"),
        "containment for namespaced types"
    );

    // Break the cycle: the remaining rule reports no cycle.
    env.run(&["delete", "dependencyrule", "vpc-needs-vm"]);
    let c = condition_becomes(
        &env,
        "dependencyrule vm-needs-vpc CycleDetected False",
        10,
        "cycle gone",
    )
    .await;
    assert_eq!(c["reason"], "NoCycle");
}

/// The Lease's holder; fails when kubectl fails or the Lease names nobody.
fn lease_holder(env: &Env, ns: &str) -> String {
    let lease = env
        .get_json(&["lease", "holdfast-controller", "-n", ns])
        .expect("the Lease exists");
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| panic!("the Lease names no holder: {lease}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_election_hands_over_when_the_leader_dies() {
    let env = env_with_webhook().await;
    // The Lease in a namespace of the test's own.
    let ns = env.default_namespace().expect("namespace");
    let args = ["--leader-elect", "--leader-elect-namespace", &ns];
    let port = webhook_port(&env);
    let mut a = start_controller(&env, "controller-a", port, &args).expect("a");
    let mut b = start_controller(&env, "controller-b", port, &args).expect("b");
    // Exactly one leads.
    let (leader, follower) = elect(&mut a, &mut b).await;
    env.apply(&rp_configmaps("shop")).expect("policy");
    wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("installed by the leader");
    assert!(
        !follower.is_ready().await,
        "the follower does not reconcile"
    );
    let holder = lease_holder(&env, &ns);
    assert!(
        leader.log().contains(&holder),
        "the lease names the leader: {holder}\n{}",
        leader.log()
    );

    // The leader dies without a chance to release the lease.
    leader.kill();
    let killed = Instant::now();
    // Nobody heals now: the configuration stays deleted until the follower leads.
    env.run(&["delete", "validatingwebhookconfiguration", "holdfast"]);
    wait_configuration(&env, Duration::from_secs(60), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("the follower took over");
    eprintln!("follower took over {:?} after the kill", killed.elapsed());
    assert!(follower.is_ready().await);
    let new_holder = lease_holder(&env, &ns);
    assert_ne!(new_holder, holder);
    assert!(
        follower.log().contains(&new_holder),
        "the lease names the new leader: {new_holder}\n{}",
        follower.log()
    );
    assert!(
        !leader.log().contains(&new_holder),
        "the new holder is not the dead leader's identity: {new_holder}"
    );
}

/// `data[key]` of Secret `ns`/holdfast-webhook-tls, decoded; `None` while the
/// Secret or the key does not exist. A failing kubectl fails the test.
fn secret_data(env: &Env, ns: &str, key: &str) -> Option<String> {
    let secret = ["secret", "holdfast-webhook-tls", "-n", ns];
    if !env.exists(&secret).expect("kubectl get secret") {
        return None;
    }
    let secret = env.get_json(&secret).expect("kubectl get secret");
    let b64 = secret["data"][key].as_str()?;
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap_or_else(|e| panic!("{key} is not base64: {e}"));
    Some(String::from_utf8(bytes).unwrap_or_else(|e| panic!("{key} is not UTF-8: {e}")))
}

/// Writes the Secret's serving pair to the files the webhook reads (what the
/// kubelet does for a mounted Secret); returns the certificate written.
fn sync_files(env: &Env, ns: &str) -> Option<String> {
    let cert = secret_data(env, ns, "tls.crt")?;
    let key = secret_data(env, ns, "tls.key")?;
    std::fs::write(env.dir.path().join("tls.key.new"), &key).ok()?;
    std::fs::write(env.dir.path().join("tls.crt.new"), &cert).ok()?;
    std::fs::rename(
        env.dir.path().join("tls.key.new"),
        env.dir.path().join("tls.key"),
    )
    .ok()?;
    std::fs::rename(
        env.dir.path().join("tls.crt.new"),
        env.dir.path().join("tls.crt"),
    )
    .ok()?;
    Some(cert)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn managed_ca_rotation_keeps_admission_working() {
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    let port = holdfast_e2e::free_port().expect("port");
    // The CA Secret in the test's own namespace (default on a sim).
    let ns = env.default_namespace().expect("namespace");
    let mut c = start_controller(
        &env,
        "controller",
        port,
        &words(&format!("--ca-secret {ns}/holdfast-webhook-tls --ca-validity-seconds 24 --cert-validity-seconds 16 --cert-renew-before-seconds 10")),
    )
    .expect("controller");
    c.wait_ready(30).await.expect("ready");
    let first_ca = secret_data(&env, &ns, "ca.crt").expect("CA created");
    let mut cert = sync_files(&env, &ns).expect("serving pair created");
    env.start_webhook_on(port, &[])
        .await
        .expect("webhook serves the managed certificate");
    env.wait_webhook_ready().await.expect("webhook ready");
    let cfg = installed_configuration(&env).await;
    assert_eq!(ca_bundle(&cfg), first_ca, "caBundle is the managed CA");

    let vault = labelled_namespace(&env, "vault", "holdfast.dev/protected=Always");
    let refusal =
        format!("holdfast: Namespace {vault} is protected by label holdfast.dev/protected=Always");
    let check = |env: &Env| {
        namespace_refused(
            env,
            &vault,
            LABEL,
            &refusal,
            "admission must keep working (no TLS failure)",
        );
    };
    check(&env);
    // Self-protection: the CA Secret carries the protection label.
    let out = env.attempt(&words(
        "delete secret holdfast-webhook-tls --dry-run=server",
    ));
    assert!(
        out.code != 0
            && out.stderr.contains(&format!(
                "Secret {ns}/holdfast-webhook-tls is protected by label holdfast.dev/protected=Always"
            )),
        "{out:?}"
    );

    // Follow the Secret like the kubelet does. Each new serving certificate is
    // written to the files and must be picked up by the running webhook (hot reload:
    // the TLS handshake serves it); when the CA rotates, the configuration's bundle
    // must carry the new and the previous CA, so the certificate the webhook still
    // serves (signed by the previous CA) stays trusted until the files follow.
    let mut ca = first_ca.clone();
    let (mut cert_rotations, mut ca_rotations) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(90);
    while !(ca_rotations >= 1 && cert_rotations >= 2) {
        assert!(
            Instant::now() < deadline,
            "rotations seen: {cert_rotations} certificates, {ca_rotations} CAs: {}",
            c.log()
        );
        // Polling interval of the kubelet-like follower, not a synchronisation point.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let new_ca = secret_data(&env, &ns, "ca.crt").expect("ca.crt");
        if new_ca != ca {
            if first_pem(&new_ca) != first_pem(&ca) {
                assert!(
                    new_ca.contains(&first_pem(&ca)),
                    "the previous CA stays in ca.crt after a rotation:\n{new_ca}"
                );
                ca_rotations += 1;
            }
            let (cfg, _) = wait_configuration(&env, Duration::from_secs(30), |cfg| {
                cfg.is_some_and(|cfg| ca_bundle(cfg) == new_ca)
            })
            .await
            .expect("the configuration carries the Secret's bundle");
            assert!(cfg.is_some());
            // The webhook still serves the certificate from before: trusted through
            // the bundle the API server now has.
            let served = holdfast_e2e::served_certificate(port, &new_ca)
                .await
                .expect("the old serving certificate is trusted by the new bundle");
            assert_eq!(served, holdfast_e2e::pem_to_der(&cert).expect("pem"));
            check(&env);
            ca = new_ca;
        }
        if let Some(new) = secret_data(&env, &ns, "tls.crt")
            && new != cert
        {
            cert = sync_files(&env, &ns).expect("files written");
            cert_rotations += 1;
            // Hot reload: the running webhook serves the new certificate.
            let want = holdfast_e2e::pem_to_der(&cert).expect("pem");
            eventually(30, async || {
                let bundle = secret_data(&env, &ns, "ca.crt").expect("ca.crt");
                let served = holdfast_e2e::served_certificate(port, &bundle).await;
                if served.as_ref().is_ok_and(|s| *s == want) {
                    return Ok(());
                }
                Err(format!(
                    "the webhook never served the new certificate; last: {served:?}\n{}",
                    env.webhook_log()
                ))
            })
            .await;
        }
        check(&env);
    }
    assert!(
        env.webhook_log().contains("serving certificate reloaded"),
        "{}",
        env.webhook_log()
    );
}

/// The first PEM block of a bundle.
fn first_pem(bundle: &str) -> String {
    const END: &str = "-----END CERTIFICATE-----";
    match bundle.find(END) {
        Some(i) => bundle[..i + END.len()].to_string(),
        None => bundle.to_string(),
    }
}

/// The decoded caBundle of the configuration's first webhook.
fn ca_bundle(cfg: &Value) -> String {
    use base64::Engine as _;
    let b64 = cfg["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .unwrap_or_else(|| panic!("no caBundle: {cfg}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("caBundle is base64");
    String::from_utf8(bytes).expect("caBundle is PEM")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn managed_ca_serves_a_service_target() {
    // The API server reaches the webhook through a Service of the test's own
    // (holdfast-system/holdfast-webhook on a sim, in a namespace named after it on
    // a cluster) and verifies its certificate for holdfast-webhook.NAMESPACE.svc.
    let port = holdfast_e2e::free_port().expect("port");
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    let ns = env.namespace("holdfast-system").expect("namespace");
    // The Service leads to the webhook (a local process) as a real kube-apiserver
    // reaches one outside the cluster: an ExternalName Service naming this host,
    // the webhook's port as the service port.
    let service = holdfast_e2e::fixtures::service_to(
        &ns,
        "holdfast-webhook",
        &holdfast_e2e::e2e_webhook_host(),
        port,
    );
    env.kubectl_stdin(&["apply", "-f", "-"], &service)
        .expect("kubectl")
        .ok()
        .expect("service and endpoints");
    let mut c = start_controller(
        &env,
        "controller",
        port,
        &words(&format!(
            "--webhook-service {ns}/holdfast-webhook:{port} --ca-secret {ns}/webhook-tls"
        )),
    )
    .expect("controller");
    c.wait_ready(30).await.expect("ready");
    let read = |key: &str| -> String {
        let jsonpath = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
        let out = env.run(&["get", "secret", "webhook-tls", "-n", &ns, "-o", &jsonpath]);
        use base64::Engine as _;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(out.stdout.trim())
                .expect("base64"),
        )
        .expect("utf8")
    };
    std::fs::write(env.dir.path().join("tls.crt"), read("tls.crt")).expect("write");
    std::fs::write(env.dir.path().join("tls.key"), read("tls.key")).expect("write");
    env.start_webhook_on(port, &[]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("ready");
    let cfg = installed_configuration(&env).await;
    assert_eq!(
        cfg["webhooks"][0]["clientConfig"]["service"]["name"],
        "holdfast-webhook"
    );
    assert_eq!(
        cfg["webhooks"][0]["clientConfig"]["service"]["path"],
        "/validate"
    );
    assert_eq!(
        cfg["webhooks"][0]["clientConfig"]["service"]["namespace"],
        ns
    );
    let vault = labelled_namespace(&env, "vault", "holdfast.dev/protected=Always");
    namespace_refused(
        &env,
        &vault,
        LABEL,
        &format!("holdfast: Namespace {vault} is protected by label holdfast.dev/protected=Always"),
        "the API server trusts the managed certificate for the Service name",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn label_protection_does_not_wait_for_the_crds() {
    let mut env = Env::start().await.expect("sim");
    env.start_webhook(&["--label-only"]).await.expect("webhook");
    let c = start_controller(&env, "controller", webhook_port(&env), &[]).expect("controller");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(15), |c| c.is_some())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.log()));
    assert!(
        webhook_names(&cfg.expect("present")).contains(&"delete-label-0.holdfast.dev".to_string())
    );
    assert!(c.log().contains("CRDs not installed"), "{}", c.log());
    // The CRDs arrive later: policies are picked up without a restart.
    env.install_crds().expect("crds");
    env.wait_served(&["resourceprotections"]).await;
    let out = env
        .kubectl_stdin(&["apply", "-f", "-"], &rp_configmaps("shop"))
        .expect("kubectl");
    assert_eq!(out.code, 0, "{out:?}");
    wait_configuration(&env, Duration::from_secs(30), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", c.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn karmada_control_plane_label_is_installed_and_enforced() {
    // A Karmada control plane is a kube-apiserver: same topology, Karmada's label.
    const KARMADA: &str = "resourcetemplate.karmada.io/deletion-protected=Always";
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    env.start_webhook(&["--protection-label", KARMADA])
        .await
        .expect("webhook");
    env.wait_webhook_ready().await.expect("ready");
    let _c = controller(&env, "controller", &["--protection-label", KARMADA]).await;
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        c.is_some_and(|c| webhook_names(c).contains(&"delete-label-1.holdfast.dev".to_string()))
    })
    .await
    .expect("installed");
    let cfg = cfg.expect("present");
    let hook = cfg["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .find(|w| w["name"] == "delete-label-1.holdfast.dev")
        .expect("karmada webhook");
    assert_eq!(
        hook["objectSelector"]["matchExpressions"][0]["key"],
        "resourcetemplate.karmada.io/deletion-protected"
    );
    let karmada = "resourcetemplate.karmada.io/deletion-protected";
    let minio = labelled_namespace(&env, "minio", &format!("{karmada}=Always"));
    namespace_refused(
        &env,
        &minio,
        "delete-label-1.holdfast.dev",
        &format!(
            "holdfast: Namespace {minio} is protected by label {karmada}=Always (policy: label \
             {karmada})"
        ),
        "the Karmada key protects",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_releases_its_lease_on_sigterm_and_exits_1_when_it_loses_it() {
    let env = env_with_webhook().await;
    // The Lease in a namespace of the test's own.
    let ns = env.default_namespace().expect("namespace");
    let args = ["--leader-elect", "--leader-elect-namespace", &ns];
    let mut a = controller(&env, "controller-a", &args).await;
    let holder = lease_holder(&env, &ns);
    assert!(a.log().contains(&holder), "{holder}\n{}", a.log());

    // SIGTERM: a clean exit that gives the Lease up, so a successor need not wait
    // for it to expire.
    let status = a.terminate(30).await.expect("exits on SIGTERM");
    assert!(status.success(), "{status}: {}", a.log());
    let lease = env
        .get_json(&["lease", "holdfast-controller", "-n", &ns])
        .expect("the Lease stays");
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "released on SIGTERM: {lease}"
    );

    // A leader whose Lease another replica takes exits 1 (a fresh replica takes over).
    let mut b = controller(&env, "controller-b", &args).await;
    let holder = lease_holder(&env, &ns);
    assert!(b.log().contains(&holder), "{holder}\n{}", b.log());
    let now = env
        .get_json(&["lease", "holdfast-controller", "-n", &ns])
        .expect("lease")["spec"]["renewTime"]
        .clone();
    let patch = serde_json::json!({"spec": {
        "holderIdentity": "intruder",
        "leaseDurationSeconds": 3600,
        "renewTime": now,
    }})
    .to_string();
    let target = format!("lease holdfast-controller -n {ns}");
    env.run(&merge_patch(&target, &patch));
    let status = b.wait_exit(60).await.expect("exits once the Lease is lost");
    assert_eq!(status.code(), Some(1), "{status}: {}", b.log());
    assert!(b.log().contains("lost leadership"), "{}", b.log());
    assert_eq!(
        lease_holder(&env, &ns),
        "intruder",
        "a replica that lost the Lease does not release it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ca_bundle_file_is_re_read() {
    let (env, c) = stack().await;
    let cfg = installed_configuration(&env).await;
    assert_eq!(ca_bundle(&cfg), env.pki.ca_pem);

    // The file changes (a mounted Secret or ConfigMap updated): the new bundle, a
    // second CA beside the one the webhook's certificate comes from, is installed
    // without a restart.
    let other = holdfast_e2e::pki("another").expect("pki");
    let bundle = format!("{}{}", other.ca_pem, env.pki.ca_pem);
    let file = env.dir.path().join("ca.crt");
    std::fs::write(env.dir.path().join("ca.crt.new"), &bundle).expect("write");
    std::fs::rename(env.dir.path().join("ca.crt.new"), &file).expect("rename");
    wait_configuration(&env, Duration::from_secs(30), |c| {
        c.is_some_and(|c| {
            c["webhooks"].as_array().is_some_and(|hooks| {
                hooks.iter().all(|h| {
                    use base64::Engine as _;
                    h["clientConfig"]["caBundle"]
                        .as_str()
                        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                        .is_some_and(|b| b == bundle.as_bytes())
                })
            })
        })
    })
    .await
    .expect("the new bundle is installed in every webhook");
    // Admission still works: the webhook's CA is in the bundle.
    let vault = labelled_namespace(&env, "vault", "holdfast.dev/protected=true");
    namespace_refused(
        &env,
        &vault,
        LABEL,
        &format!("holdfast: Namespace {vault} is protected by label holdfast.dev/protected=true"),
        "the webhook's CA is in the new bundle",
    );
    // An empty file keeps the bundle (never an empty caBundle).
    std::fs::write(&file, "").expect("truncate");
    let log = "CA bundle file is empty; keeping the previous bundle";
    eventually(30, async || match c.log() {
        l if l.contains(log) => Ok(()),
        l => Err(l),
    })
    .await;
    let cfg = holdfast_e2e::controller::webhook_configuration(&env)
        .expect("kubectl")
        .expect("present");
    assert_eq!(ca_bundle(&cfg), bundle);
}
