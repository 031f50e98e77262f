//! holdfast-controller on the Kubernetes topology, end to end: the real
//! controller and webhook binaries against holdfast-sim, driven by kubectl.

use std::time::{Duration, Instant};

use holdfast_e2e::{
    Env,
    controller::{
        ControllerProcess, condition, rules_of, start_controller, wait_condition,
        wait_configuration, webhook_names,
    },
};
use serde_json::Value;

const POLICIES: &str = "policies.holdfast.dev";

/// The webhook receiving pod evictions.
const EVICTION: &str = "eviction.holdfast.dev";

/// CRD DELETEs always reach the policies webhook (CRD containment).
fn crd_rule() -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        vec!["apiextensions.k8s.io".to_string()],
        vec!["customresourcedefinitions".to_string()],
        vec!["DELETE".to_string()],
    )
}

async fn env_with_webhook() -> Env {
    let mut env = Env::start().await.expect("sim");
    env.install_crds().expect("holdfast CRDs");
    env.start_webhook(&[]).await.expect("webhook");
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

fn has_rule(cfg: Option<&Value>, group: &str, resource: &str) -> bool {
    cfg.is_some_and(|c| {
        rules_of(c, POLICIES).iter().any(|(g, r, ops)| {
            g.iter().any(|x| x == group) && r.iter().any(|x| x == resource) && ops == &["DELETE"]
        })
    })
}

const RP_CONFIGMAPS: &str = r#"
apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: shop-config}
spec:
  resources:
  - {group: "", version: v1, resource: configmaps, namespace: shop, names: [settings]}
"#;

const RP_CONFIGMAPS_AND_DEPLOYMENTS: &str = r#"
apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: shop-config}
spec:
  resources:
  - {group: "", version: v1, resource: configmaps, namespace: shop, names: [settings]}
  - {group: apps, version: v1, resource: deployments, namespace: shop}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resource_protection_drives_the_configuration() {
    let env = env_with_webhook().await;
    let _c = controller(&env, "controller", &[]).await;

    // Without policies: label protection, and namespace DELETEs for containment
    // (a namespace holding a label-protected object must not be half-deleted).
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| c.is_some())
        .await
        .expect("configuration installed");
    let cfg = cfg.expect("present");
    assert_eq!(
        webhook_names(&cfg),
        vec!["delete-label-0.holdfast.dev", POLICIES, EVICTION]
    );
    assert_eq!(
        rules_of(&cfg, POLICIES),
        vec![
            (
                vec!["".to_string()],
                vec!["namespaces".to_string()],
                vec!["DELETE".to_string()]
            ),
            crd_rule()
        ]
    );
    assert_eq!(cfg["webhooks"][0]["failurePolicy"], "Fail");
    assert_eq!(
        cfg["webhooks"][0]["clientConfig"]["url"],
        format!("https://127.0.0.1:{}/validate", webhook_port(&env))
    );
    assert!(
        cfg["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );

    // Apply: the policies webhook appears with exactly configmaps (+ namespaces for containment).
    env.kubectl(&["create", "namespace", "shop"])
        .expect("kubectl")
        .ok()
        .expect("namespace");
    env.kubectl(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "shop",
        "--from-literal=a=b",
    ])
    .expect("kubectl")
    .ok()
    .expect("configmap");
    env.apply(RP_CONFIGMAPS).expect("policy applied");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("rule installed");
    let cfg = cfg.expect("present");
    assert_eq!(
        webhook_names(&cfg),
        vec!["delete-label-0.holdfast.dev", POLICIES, EVICTION]
    );
    let rules = rules_of(&cfg, POLICIES);
    assert_eq!(
        rules,
        vec![
            (
                vec!["".to_string()],
                vec!["configmaps".to_string(), "namespaces".to_string()],
                vec!["DELETE".to_string()]
            ),
            crd_rule()
        ],
        "core resources merged into one rule"
    );
    let ready = wait_condition(
        &env,
        "resourceprotection",
        "shop-config",
        "Ready",
        "True",
        10,
    )
    .await
    .expect("ready");
    assert_eq!(ready["reason"], "Enforced");
    let installed = condition(&env, "resourceprotection", "shop-config", "Installed")
        .expect("kubectl")
        .expect("installed condition");
    assert_eq!(installed["status"], "True");
    let invalid = condition(&env, "resourceprotection", "shop-config", "Invalid")
        .expect("kubectl")
        .expect("invalid condition");
    assert_eq!(invalid["status"], "False");
    let out = env
        .kubectl(&[
            "get",
            "resourceprotection",
            "shop-config",
            "-o",
            "jsonpath={.status.observedGeneration}",
        ])
        .expect("kubectl");
    assert_eq!(out.stdout, "1");

    // The protection works end to end.
    let out = env
        .kubectl_until(
            &[
                "delete",
                "configmap",
                "settings",
                "-n",
                "shop",
                "--dry-run=server",
            ],
            10,
            |o| o.code != 0,
        )
        .await
        .expect("refused");
    assert!(out.stderr.contains("holdfast:"), "{out:?}");

    // Edit: deployments added to the same policy.
    env.apply(RP_CONFIGMAPS_AND_DEPLOYMENTS)
        .expect("policy edited");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "apps", "deployments")
    })
    .await
    .expect("rule updated");
    assert!(has_rule(cfg.as_ref(), "", "configmaps"));
    let out = env
        .kubectl_until(
            &[
                "get",
                "resourceprotection",
                "shop-config",
                "-o",
                "jsonpath={.status.observedGeneration}",
            ],
            10,
            |o| o.stdout == "2",
        )
        .await
        .expect("observedGeneration follows");
    assert_eq!(out.stdout, "2");

    // Delete: the policy's resources go away; label protection and namespace
    // containment stay.
    env.kubectl(&["delete", "resourceprotection", "shop-config"])
        .expect("kubectl")
        .ok()
        .expect("deleted");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        c.is_some() && !has_rule(c, "", "configmaps") && !has_rule(c, "apps", "deployments")
    })
    .await
    .expect("rule removed");
    let cfg = cfg.expect("present");
    assert_eq!(
        webhook_names(&cfg),
        vec!["delete-label-0.holdfast.dev", POLICIES, EVICTION]
    );
    assert_eq!(
        rules_of(&cfg, POLICIES).len(),
        2,
        "only namespaces (and CRDs) left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manual_edits_are_reverted_and_deletion_recreates() {
    let env = env_with_webhook().await;
    let _c = controller(&env, "controller", &["--strict"]).await;
    env.apply(RP_CONFIGMAPS).expect("policy applied");
    wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("installed");

    // A manual edit (failure policy and rules) is reverted within 2 seconds.
    env.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        "holdfast",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"},{"op":"replace","path":"/webhooks/2/rules/0/resources","value":["secrets"]}]"#,
    ])
    .expect("kubectl")
    .ok()
    .expect("patched");
    let (cfg, took) = wait_configuration(&env, Duration::from_secs(5), |c| {
        c.is_some_and(|c| c["webhooks"][0]["failurePolicy"] == "Fail")
            && has_rule(c, "", "configmaps")
    })
    .await
    .expect("edit reverted");
    assert!(took < Duration::from_secs(2), "reverted after {took:?}");
    assert!(!has_rule(cfg.as_ref(), "", "secrets"));
    // Strict mode: strict-label webhook present.
    assert!(
        webhook_names(&cfg.expect("present")).contains(&"strict-label-0.holdfast.dev".to_string())
    );

    // A webhook removed by hand comes back.
    env.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        "holdfast",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/webhooks/2"}]"#,
    ])
    .expect("kubectl")
    .ok()
    .expect("patched");
    let (_, took) = wait_configuration(&env, Duration::from_secs(5), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("webhook restored");
    assert!(took < Duration::from_secs(2), "restored after {took:?}");

    // Deleted: recreated within 2 seconds.
    env.kubectl(&["delete", "validatingwebhookconfiguration", "holdfast"])
        .expect("kubectl")
        .ok()
        .expect("deleted");
    let (cfg, took) = wait_configuration(&env, Duration::from_secs(5), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("recreated");
    assert!(took < Duration::from_secs(2), "recreated after {took:?}");
    assert_eq!(
        cfg.expect("present")["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "holdfast-controller"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cleanup_on_shutdown_leaves_nothing_behind() {
    let env = env_with_webhook().await;
    let mut c = controller(
        &env,
        "controller",
        &[
            "--cleanup-on-shutdown",
            "--failure-policy",
            "Ignore",
            "--timeout-seconds",
            "5",
        ],
    )
    .await;
    env.apply(RP_CONFIGMAPS).expect("policy applied");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("installed");
    let cfg = cfg.expect("present");
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

const RP_UNKNOWN: &str = r#"
apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: widgets}
spec:
  resources:
  - {group: example.com, version: v1, resource: widgets}
"#;

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
    let env = env_with_webhook().await;
    let _c = controller(&env, "controller", &[]).await;
    env.apply(RP_UNKNOWN).expect("applied");
    env.apply(RP_BAD_SELECTOR).expect("applied");
    env.apply(RP_CONFIGMAPS).expect("applied");

    let inv = wait_condition(&env, "resourceprotection", "widgets", "Invalid", "True", 10)
        .await
        .expect("unknown resource reported");
    assert_eq!(inv["reason"], "UnknownResource");
    assert!(
        inv["message"]
            .as_str()
            .is_some_and(|m| m.contains("widgets.example.com")),
        "{inv}"
    );
    let inv = wait_condition(
        &env,
        "resourceprotection",
        "bad-selector",
        "Invalid",
        "True",
        10,
    )
    .await
    .expect("bad selector reported");
    assert_eq!(inv["reason"], "InvalidSelector");
    let ready = condition(&env, "resourceprotection", "widgets", "Ready")
        .expect("kubectl")
        .expect("ready");
    assert_eq!(ready["status"], "False");

    // The valid policy is enforced; the invalid ones add nothing.
    wait_condition(
        &env,
        "resourceprotection",
        "shop-config",
        "Ready",
        "True",
        10,
    )
    .await
    .expect("valid policy ready");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("valid rule installed");
    assert!(!has_rule(cfg.as_ref(), "example.com", "widgets"));
    assert!(!has_rule(cfg.as_ref(), "", "secrets"));

    // A Warning Event names the problem.
    let out = env
        .kubectl_until(
            &["get", "events.events.k8s.io", "-n", "default", "-o", "json"],
            10,
            |o| o.stdout.contains("UnknownResource"),
        )
        .await
        .expect("event emitted");
    assert!(out.stdout.contains("Warning"), "{}", out.stdout);

    // The CRD appears: the policy recovers on its own.
    env.apply(&holdfast_e2e::fixtures::widget_crd())
        .expect("crd");
    wait_condition(&env, "resourceprotection", "widgets", "Ready", "True", 15)
        .await
        .expect("recovered");
    wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "example.com", "widgets")
    })
    .await
    .expect("widgets now routed");
}

const CYCLE_RULES: &str = r#"
apiVersion: holdfast.dev/v1alpha1
kind: DependencyRule
metadata: {name: vm-needs-vpc}
spec:
  dependent: {group: compute.test.io, version: v1, kind: VirtualMachine, resource: virtualmachines}
  dependencies:
  - {group: network.test.io, version: v1, resource: vpcs, fieldRef: {path: .spec.vpcRef.name}}
---
apiVersion: holdfast.dev/v1alpha1
kind: DependencyRule
metadata: {name: vpc-needs-vm}
spec:
  dependent: {group: network.test.io, version: v1, kind: VPC, resource: vpcs}
  dependencies:
  - {group: compute.test.io, version: v1, resource: virtualmachines, fieldRef: {path: .spec.gatewayVm}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dependency_cycle_is_reported_on_both_rules() {
    let env = env_with_webhook().await;
    env.apply(&holdfast_e2e::fixtures::vpc_vm_crds())
        .expect("crds");
    env.kubectl_until(&["get", "vpcs"], 10, |o| o.code == 0)
        .await
        .expect("served");
    let _c = controller(&env, "controller", &[]).await;
    env.apply(CYCLE_RULES).expect("rules");

    let a = wait_condition(
        &env,
        "dependencyrule",
        "vm-needs-vpc",
        "CycleDetected",
        "True",
        10,
    )
    .await
    .expect("cycle on the first rule");
    let b = wait_condition(
        &env,
        "dependencyrule",
        "vpc-needs-vm",
        "CycleDetected",
        "True",
        10,
    )
    .await
    .expect("cycle on the second rule");
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
    let out = env
        .kubectl_until(
            &["get", "events.events.k8s.io", "-n", "default", "-o", "json"],
            10,
            |o| o.stdout.contains("CycleDetected"),
        )
        .await
        .expect("warning event");
    assert!(out.stdout.contains("Warning"));
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
    env.kubectl(&["delete", "dependencyrule", "vpc-needs-vm"])
        .expect("kubectl")
        .ok()
        .expect("deleted");
    let c = wait_condition(
        &env,
        "dependencyrule",
        "vm-needs-vpc",
        "CycleDetected",
        "False",
        10,
    )
    .await
    .expect("cycle gone");
    assert_eq!(c["reason"], "NoCycle");
}

fn lease_holder(env: &Env) -> String {
    env.kubectl(&[
        "get",
        "lease",
        "holdfast-controller",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.holderIdentity}",
        "--ignore-not-found",
    ])
    .map(|o| o.stdout)
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_election_hands_over_when_the_leader_dies() {
    let env = env_with_webhook().await;
    let args = ["--leader-elect", "--leader-elect-namespace", "default"];
    let port = webhook_port(&env);
    let mut a = start_controller(&env, "controller-a", port, &args).expect("a");
    let mut b = start_controller(&env, "controller-b", port, &args).expect("b");
    // Exactly one leads.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (leader_is_a, _) = loop {
        let (ra, rb) = (a.is_ready().await, b.is_ready().await);
        if ra || rb {
            break (ra, rb);
        }
        assert!(
            Instant::now() < deadline,
            "nobody leads: {}\n{}",
            a.log(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    env.apply(RP_CONFIGMAPS).expect("policy");
    wait_configuration(&env, Duration::from_secs(10), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("installed by the leader");
    let (leader, follower) = if leader_is_a {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(
        !follower.is_ready().await,
        "the follower does not reconcile"
    );
    let holder = lease_holder(&env);
    assert!(!holder.is_empty(), "lease held");
    assert!(
        leader.log().contains(&holder),
        "the lease names the leader: {holder}\n{}",
        leader.log()
    );

    // The leader dies without a chance to release the lease.
    leader.kill();
    let killed = Instant::now();
    // Nobody heals now: the configuration stays deleted until the follower leads.
    env.kubectl(&["delete", "validatingwebhookconfiguration", "holdfast"])
        .expect("kubectl")
        .ok()
        .expect("deleted");
    wait_configuration(&env, Duration::from_secs(20), |c| {
        has_rule(c, "", "configmaps")
    })
    .await
    .expect("the follower took over");
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(15), "took over after {took:?}");
    assert!(follower.is_ready().await);
    let new_holder = lease_holder(&env);
    assert_ne!(new_holder, holder);
    assert!(follower.log().contains(&new_holder));
}

fn secret_data(env: &Env, key: &str) -> Option<String> {
    let jsonpath = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
    let out = env
        .kubectl(&[
            "get",
            "secret",
            "holdfast-webhook-tls",
            "-n",
            "default",
            "-o",
            &jsonpath,
            "--ignore-not-found",
        ])
        .ok()?;
    if out.code != 0 || out.stdout.is_empty() {
        return None;
    }
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(out.stdout.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Writes the Secret's serving pair to the files the webhook reads (what the
/// kubelet does for a mounted Secret); returns the certificate written.
fn sync_files(env: &Env) -> Option<String> {
    let cert = secret_data(env, "tls.crt")?;
    let key = secret_data(env, "tls.key")?;
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
    let mut env = Env::start().await.expect("sim");
    env.install_crds().expect("crds");
    let port = holdfast_e2e::free_port().expect("port");
    let mut c = start_controller(
        &env,
        "controller",
        port,
        &[
            "--ca-secret",
            "default/holdfast-webhook-tls",
            "--ca-validity-seconds",
            "24",
            "--cert-validity-seconds",
            "16",
            "--cert-renew-before-seconds",
            "10",
        ],
    )
    .expect("controller");
    c.wait_ready(30).await.expect("ready");
    let first_ca = secret_data(&env, "ca.crt").expect("CA created");
    let mut cert = sync_files(&env).expect("serving pair created");
    env.start_webhook_on(port, &[])
        .await
        .expect("webhook serves the managed certificate");
    env.wait_webhook_ready().await.expect("webhook ready");
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| c.is_some())
        .await
        .expect("installed");
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(
            cfg.expect("present")["webhooks"][0]["clientConfig"]["caBundle"]
                .as_str()
                .unwrap_or_default(),
        )
        .expect("base64");
    assert_eq!(
        String::from_utf8_lossy(&bundle),
        first_ca,
        "caBundle is the managed CA"
    );

    env.kubectl(&["create", "namespace", "vault"])
        .expect("kubectl")
        .ok()
        .expect("ns");
    env.kubectl(&[
        "label",
        "namespace",
        "vault",
        "holdfast.dev/protected=Always",
    ])
    .expect("kubectl")
    .ok()
    .expect("label");

    let check = |env: &Env| {
        let out = env
            .kubectl(&["delete", "namespace", "vault", "--dry-run=server"])
            .expect("kubectl");
        assert_ne!(out.code, 0, "deletion must be refused: {out:?}");
        assert!(
            out.stderr
                .contains("holdfast: Namespace vault is protected"),
            "admission must keep working (no TLS failure): {}",
            out.stderr
        );
    };
    check(&env);
    // Self-protection: the CA Secret carries the protection label.
    let out = env
        .kubectl(&[
            "delete",
            "secret",
            "holdfast-webhook-tls",
            "--dry-run=server",
        ])
        .expect("kubectl");
    assert!(
        out.code != 0
            && out
                .stderr
                .contains("Secret default/holdfast-webhook-tls is protected by label holdfast.dev/protected=Always"),
        "{out:?}"
    );

    let (mut cert_rotations, mut ca_rotated) = (0, false);
    let deadline = Instant::now() + Duration::from_secs(40);
    while Instant::now() < deadline && !(ca_rotated && cert_rotations >= 2) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Some(new) = secret_data(&env, "tls.crt")
            && new != cert
        {
            cert = sync_files(&env).expect("files written");
            cert_rotations += 1;
            // Give the webhook's hot reload a moment before checking.
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        if secret_data(&env, "ca.crt").is_some_and(|ca| !ca.starts_with(first_ca.trim_end())) {
            ca_rotated = true;
        }
        check(&env);
    }
    assert!(
        cert_rotations >= 2,
        "serving certificate rotated {cert_rotations} times: {}",
        c.log()
    );
    assert!(ca_rotated, "CA rotated: {}", c.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn managed_ca_serves_a_service_target() {
    // The API server reaches the webhook through Service holdfast-system/holdfast-webhook
    // and verifies its certificate for holdfast-webhook.holdfast-system.svc.
    let port = holdfast_e2e::free_port().expect("port");
    let mut cfg = holdfast_sim::SimConfig::default();
    cfg.services.insert(
        "holdfast-webhook.holdfast-system:443".to_string(),
        format!("127.0.0.1:{port}"),
    );
    let mut env = Env::start_with(cfg).await.expect("sim");
    env.install_crds().expect("crds");
    env.kubectl(&["create", "namespace", "holdfast-system"])
        .expect("kubectl")
        .ok()
        .expect("namespace");
    let mut c = start_controller(
        &env,
        "controller",
        port,
        &[
            "--webhook-service",
            "holdfast-system/holdfast-webhook:443",
            "--ca-secret",
            "holdfast-system/webhook-tls",
        ],
    )
    .expect("controller");
    c.wait_ready(30).await.expect("ready");
    let read = |key: &str| -> String {
        let jsonpath = format!("jsonpath={{.data.{}}}", key.replace('.', "\\."));
        let out = env
            .kubectl(&[
                "get",
                "secret",
                "webhook-tls",
                "-n",
                "holdfast-system",
                "-o",
                &jsonpath,
            ])
            .expect("kubectl")
            .ok()
            .expect("secret");
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
    let (cfg, _) = wait_configuration(&env, Duration::from_secs(10), |c| c.is_some())
        .await
        .expect("installed");
    let cfg = cfg.expect("present");
    assert_eq!(
        cfg["webhooks"][0]["clientConfig"]["service"]["name"],
        "holdfast-webhook"
    );
    assert_eq!(
        cfg["webhooks"][0]["clientConfig"]["service"]["path"],
        "/validate"
    );
    env.kubectl(&["create", "namespace", "vault"])
        .expect("kubectl")
        .ok()
        .expect("ns");
    env.kubectl(&[
        "label",
        "namespace",
        "vault",
        "holdfast.dev/protected=Always",
    ])
    .expect("kubectl")
    .ok()
    .expect("label");
    let out = env
        .kubectl(&["delete", "namespace", "vault", "--dry-run=server"])
        .expect("kubectl");
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr
            .contains("holdfast: Namespace vault is protected"),
        "the API server trusts the managed certificate for the Service name: {}",
        out.stderr
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
    env.kubectl_until(&["get", "resourceprotections"], 10, |o| o.code == 0)
        .await
        .expect("served");
    let out = env
        .kubectl_stdin(&["apply", "-f", "-"], RP_CONFIGMAPS)
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
    let mut env = Env::start().await.expect("sim");
    env.install_crds().expect("crds");
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
    env.kubectl(&["create", "namespace", "minio"])
        .expect("kubectl")
        .ok()
        .expect("ns");
    env.kubectl(&[
        "label",
        "namespace",
        "minio",
        "resourcetemplate.karmada.io/deletion-protected=Always",
    ])
    .expect("kubectl")
    .ok()
    .expect("label");
    let out = env
        .kubectl(&["delete", "namespace", "minio", "--dry-run=server"])
        .expect("kubectl");
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(
            "admission webhook \"delete-label-1.holdfast.dev\" denied the request: holdfast:"
        ),
        "{}",
        out.stderr
    );
}
