//! `kubectl holdfast` end to end: the real kubectl runs the plugin (`kubectl-holdfast`
//! on PATH) against the simulator or the cluster of `HOLDFAST_E2E_KUBECONFIG`, where
//! the shipped stack runs (the overlay applied, controller and webhook under their
//! ServiceAccounts). The callers are users of the test's own who may read but
//! neither delete nor bypass (`alice`), or who may also bypass (`breaker`), as RBAC
//! the test creates grants them.

use std::{path::PathBuf, process::Stdio, time::Duration};

use holdfast_e2e::rbac::{self, TestUser};
use holdfast_e2e::{
    Env,
    controller::ControllerProcess,
    fixtures,
    steps::{shipped_with_issued_certificate, words},
};
use serde_json::Value;

/// The finding of the report `r` whose `field` is `value`; fails when none is.
fn finding<'a>(r: &'a Value, field: &str, value: &str) -> &'a Value {
    entry(r, "findings", field, value)
}

/// The entry of list `list` of the report `r` whose `field` is `value`; fails when
/// none is (or the list is missing).
fn entry<'a>(r: &'a Value, list: &str, field: &str, value: &str) -> &'a Value {
    let entries = r[list].as_array().map(Vec::as_slice).unwrap_or_default();
    entries
        .iter()
        .find(|f| f[field] == value)
        .unwrap_or_else(|| panic!("no {list} entry with {field} {value}: {r}"))
}

/// Asserts `text` (one stream of a run) starts with `prefix`; fails printing it.
fn starts(text: &str, prefix: &str) {
    assert!(text.starts_with(prefix), "{text}");
}

/// The shipped stack: overlay applied, controller and webhook as their
/// ServiceAccounts, the webhook serving the certificate the controller issued.
struct Plugin {
    env: Env,
    controller: ControllerProcess,
    /// Reads everything.
    alice: TestUser,
    /// Reads everything; may bypass protection where the test grants it.
    breaker: TestUser,
}

async fn shipped_stack() -> Plugin {
    let mut env = holdfast_e2e::steps::sim_with_service_accounts().await;
    let controller = shipped_with_issued_certificate(&mut env, &[]).await;
    let alice = env.test_user("alice", &["developers"]).expect("alice");
    let breaker = env.test_user("breaker", &["developers"]).expect("breaker");
    env.grant_cluster(
        "reads-everything",
        &[rbac::user(&alice.name), rbac::user(&breaker.name)],
        &[rbac::rule(&["get", "list", "watch"], &["*"], &["*"])],
    )
    .expect("grant");
    Plugin {
        env,
        controller,
        alice,
        breaker,
    }
}

/// What `kubectl holdfast ARGS` printed, run as `user`.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn plugin_dir() -> PathBuf {
    holdfast_e2e::bin("kubectl-holdfast")
        .expect("kubectl-holdfast built")
        .parent()
        .expect("a directory")
        .to_path_buf()
}

async fn holdfast(user: &TestUser, args: &[&str]) -> Run {
    let kubeconfig = &user.kubeconfig;
    let path = format!(
        "{}:{}",
        plugin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = tokio::process::Command::new(holdfast_e2e::kubectl_path().expect("kubectl"));
    cmd.env("KUBECONFIG", kubeconfig)
        .env("PATH", path)
        .arg("holdfast")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("kubectl holdfast {} did not finish", args.join(" ")))
        .expect("kubectl runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}\n{}", run.stdout, run.stderr))
}

fn vm(name: &str, ns: &str) -> String {
    format!(
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{vpcRef: {{name: my-vpc}}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn why_names_every_protection_and_blocker() {
    let t = &shipped_stack().await;
    let (env, controller, alice) = (&t.env, &t.controller, &t.alice);
    env.apply_crds(&fixtures::vpc_vm_crds()).expect("CRDs");
    env.wait_served(&["vpcs", "-A"]).await;
    let shop = env.namespace("shop").expect("namespace");
    let shop = shop.as_str();
    // breaker may bypass protection in that namespace (a Role and RoleBinding there).
    env.grant_in(
        shop,
        "bypass",
        &[rbac::user(&t.breaker.name)],
        &[rbac::bypass()],
    )
    .expect("grant");
    env.apply(&fixtures::vm_vpc_rule(".spec.vpcRef.name"))
        .expect("rule");
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {shop}, labels: {{holdfast.dev/protected: Always}}}}\n",
    ))
    .expect("cm");
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: glass, namespace: {shop}, labels: {{holdfast.dev/protected: Always}}, annotations: {{holdfast.dev/skip-protection: \"true\"}}}}\n",
    ))
    .expect("cm");
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: plain, namespace: {shop}}}\n"
    ))
    .expect("cm");
    env.apply(&format!(
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {{name: my-vpc, namespace: {shop}}}\n",
    ))
    .expect("vpc");
    let vms: Vec<String> = (0..7).map(|i| format!("vm-{i}")).collect();
    for name in &vms {
        env.apply(&vm(name, shop)).expect("vm");
    }
    // The webhook itself refuses the VPC (the rule is routed): the plugin must agree.
    let refused = env
        .kubectl_until(
            &["delete", "vpc", "my-vpc", "-n", shop, "--dry-run=server"],
            30,
            |o| o.code != 0,
        )
        .await
        .unwrap_or_else(|e| panic!("VPC not refused: {e}\n{}", controller.log()));
    assert!(refused.stderr.contains("and 2 more"), "{refused:?}");

    // A label-protected ConfigMap, KIND NAME form.
    let run = holdfast(alice, &["why", "configmap", "cfg", "-n", shop]).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    starts(
        &run.stdout,
        &format!(
            "ConfigMap {shop}/cfg: DELETE would be REFUSED (decided by: label) for user {}\n\
             Protections:\n  - label holdfast.dev/protected (mode Enforce)\n    blockers (1):\n      \
             label holdfast.dev/protected=Always\n",
            alice.name
        ),
    );
    assert!(
        run.stdout
            .contains("Break-glass: not set; you may not bypass protection\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "  - remove the label: kubectl label configmaps cfg -n {shop} holdfast.dev/protected-\n"
        )),
        "{}",
        run.stdout
    );

    // The VPC referenced by seven VMs, TYPE/NAME form with the group: all seven named.
    let run = holdfast(
        alice,
        &[
            "why",
            "vpcs.network.test.io/my-vpc",
            "-n",
            shop,
            "-o",
            "json",
        ],
    )
    .await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let r = json(&run);
    assert_eq!(r["allowed"], false);
    assert_eq!(r["user"], alice.name.as_str());
    assert_eq!(r["decidedBy"], "DependencyRule/vm-dependencies");
    assert_eq!(r["object"]["kind"], "VPC");
    assert_eq!(r["object"]["resource"], "vpcs.network.test.io");
    let p = &r["protections"][0];
    assert_eq!(p["policy"], "DependencyRule/vm-dependencies");
    assert_eq!(p["enforcement"], "Enforce");
    let mut blockers: Vec<String> = p["blockers"]
        .as_array()
        .expect("blockers")
        .iter()
        .map(|b| b.as_str().expect("string").to_string())
        .collect();
    blockers.sort();
    let want: Vec<String> = vms
        .iter()
        .map(|n| format!("VirtualMachine {shop}/{n}"))
        .collect();
    assert_eq!(blockers, want);
    assert!(
        r["messages"][0]
            .as_str()
            .is_some_and(|m| m.contains("and 2 more")),
        "{r}"
    );

    // The namespace: everything inside that blocks it.
    let run = holdfast(alice, &["why", "ns", shop, "-o", "yaml"]).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("decidedBy: containment\n"),
        "{}",
        run.stdout
    );
    let run = holdfast(alice, &["why", "namespace", shop, "-o", "json"]).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let r = json(&run);
    let containment = entry(&r, "protections", "policy", "containment").clone();
    assert_eq!(
        containment["blockers"],
        serde_json::json!([
            format!("ConfigMap {shop}/cfg (label)"),
            format!("VPC {shop}/my-vpc (DependencyRule/vm-dependencies)")
        ])
    );

    // Unprotected: exit 0, nothing to say.
    let run = holdfast(alice, &["why", "cm/plain", "-n", shop]).await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "ConfigMap {shop}/plain: DELETE would be ALLOWED (decided by: none) for user {}\n\
             Protections: none\nBreak-glass: not set; you may not bypass protection\n",
            alice.name
        )
    );

    // Break-glass set: allowed, the protection it overrides still listed; who may use it.
    for (user, may) in [(alice, false), (&t.breaker, true)] {
        let run = holdfast(
            user,
            &["why", "configmap", "glass", "-n", shop, "-o", "json"],
        )
        .await;
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
        let r = json(&run);
        assert_eq!(r["decidedBy"], "break-glass");
        assert_eq!(
            r["breakGlass"]["active"],
            "annotation holdfast.dev/skip-protection"
        );
        assert_eq!(
            r["breakGlass"]["callerMayBypass"], may,
            "{}: {r}",
            user.name
        );
        assert_eq!(
            r["protections"][0]["policy"],
            "label holdfast.dev/protected"
        );
    }

    // --server overrides the kubeconfig's URL (a kcp workspace URL works the same way).
    let server = env
        .run(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ])
        .stdout;
    let run = holdfast(
        alice,
        &["--server", server.trim(), "why", "cm", "plain", "-n", shop],
    )
    .await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let run = holdfast(
        alice,
        &["why", "cm", "plain", "-n", shop, "--server", "not a url"],
    )
    .await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    starts(&run.stderr, "error: --server \"not a url\" is not a URL");

    // Bad input: exit 2, one line.
    let run = holdfast(alice, &words("why gizmos x")).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stderr,
        "error: the server doesn't have a resource type \"gizmos\"\n"
    );
    let run = holdfast(alice, &["why", "configmap", "missing", "-n", shop]).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.stderr, "error: configmaps \"missing\" not found\n");
    let run = holdfast(alice, &words("why a/b/c")).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    let run = holdfast(alice, &words("why -o xml cm/plain")).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_reports_posture_and_findings() {
    let Plugin {
        mut env,
        mut controller,
        alice,
        ..
    } = shipped_stack().await;
    let alice = &alice;

    // Healthy: exit 0; the backstop's absence is a warning.
    let run = holdfast(alice, &words("check -o json")).await;
    let r = json(&run);
    assert_eq!(run.code, 0, "{r}\n{}", run.stderr);
    assert_eq!(r["webhookConfiguration"], true);
    assert!(
        r["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .all(|f| f["severity"] == "warning"),
        "{r}"
    );
    assert!(
        r["failurePolicies"]
            .as_array()
            .expect("failure policies")
            .iter()
            .all(|f| f.as_str().is_some_and(|f| f.ends_with(": Fail"))),
        "{r}"
    );

    // A policy that cannot be Ready (it names a resource no API serves), and a
    // label-protected object in a namespace nothing protects.
    env.apply_crds(&fixtures::widget_crd()).expect("crd");
    env.apply(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {name: ghosts}\n\
         spec:\n  resources:\n  - {group: ghost.test.io, version: v1, resource: ghosts}\n",
    )
    .expect("policy");
    let loose = env.namespace("loose").expect("namespace");
    let loose = loose.as_str();
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: keep, namespace: {loose}, labels: {{holdfast.dev/protected: Always}}}}\n",
    ))
    .expect("cm");
    // A protected Widget: the CustomResourceDefinition itself protects nothing.
    env.wait_served(&["widgets", "-A"]).await;
    env.apply(&format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w1, namespace: {loose}, labels: {{holdfast.dev/protected: Always}}}}\n",
    ))
    .expect("widget");
    // The findings of the test's own subjects (a cluster may hold others).
    let namespace_subject = format!("Namespace/{loose}");
    let crd_subject = "CustomResourceDefinition/widgets.example.com";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let r =
        loop {
            let run = holdfast(alice, &words("check -o json")).await;
            let r = json(&run);
            let found = |kind: &str, subject: &str| {
                r["findings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|f| f["kind"] == kind && f["subject"] == subject)
            };
            if found("NamespaceUnprotected", &namespace_subject)
                && found("CrdUnprotected", crd_subject)
                && r["findings"].as_array().into_iter().flatten().any(|f| {
                    f["subject"] == "ResourceProtection/ghosts" && f["severity"] == "error"
                })
            {
                assert_eq!(run.code, 1, "{r}");
                break r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "findings not reported: {r}\n{}",
                run.stderr
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
    let ns = finding(&r, "subject", &namespace_subject);
    assert_eq!(ns["kind"], "NamespaceUnprotected", "{ns}");
    assert!(
        ns["message"].as_str().is_some_and(|m| {
            m.starts_with(&format!(
            "not protected itself, yet holds protected objects: ConfigMap {loose}/keep (label), \
             Widget {loose}/w1 (label);"
        ))
        }),
        "{ns}"
    );
    let ghosts = finding(&r, "subject", "ResourceProtection/ghosts");
    assert_eq!(ghosts["kind"], "PolicyNotReady", "{ghosts}");
    assert!(
        ghosts["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Invalid: the policy is invalid and not enforced: ")),
        "{ghosts}"
    );
    let crd = finding(&r, "subject", crd_subject);
    assert_eq!(crd["kind"], "CrdUnprotected", "{crd}");
    assert!(
        crd["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!(
                "not protected itself, yet holds protected objects: Widget {loose}/w1 (label);"
            ))),
        "{crd}"
    );

    // The CRD itself: its instances are what would block its DELETE.
    let run = holdfast(alice, &words("why crd widgets.example.com -o json")).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let w = json(&run);
    assert_eq!(w["object"]["kind"], "CustomResourceDefinition");
    assert_eq!(w["decidedBy"], "containment");
    assert_eq!(w["protections"][0]["policy"], "containment");
    assert_eq!(
        w["protections"][0]["blockers"],
        serde_json::json!([format!("Widget {loose}/w1 (label)")])
    );

    // The webhook stopped: the configuration points at nothing that answers.
    env.webhook = None;
    let run = holdfast(alice, &words("check -o json")).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let r = json(&run);
    let down = finding(&r, "kind", "WebhookNotReady");
    assert_eq!(down["severity"], "error");
    // The configuration calls the webhook where the API server reaches this host.
    let host = match env.cluster {
        Some(_) => holdfast_e2e::e2e_webhook_host(),
        None => "127.0.0.1".to_string(),
    };
    assert!(
        down["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("https://{host}:"))
                && m.contains("/validate does not answer")),
        "{down}"
    );

    // The configuration deleted (the controller stopped first, or it would heal it;
    // its self-protection lifted first, as an uninstall does).
    controller.terminate(30).await.expect("controller stops");
    env.run(&words(
        "delete validatingadmissionpolicybinding holdfast-self-protection",
    ));
    // (On a real API server the removed binding refuses for a moment more.)
    env.kubectl_past_lagging_admission(&["delete", "validatingwebhookconfiguration", "holdfast"])
        .expect("kubectl")
        .ok()
        .expect("configuration deleted");
    let run = holdfast(alice, &words("check")).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    starts(&run.stdout, "Webhook configuration holdfast: MISSING\n");
    assert!(
        run.stdout.contains(
            "error: WebhookConfigurationMissing ValidatingWebhookConfiguration/holdfast: no \
             configuration holdfast"
        ),
        "{}",
        run.stdout
    );
}
