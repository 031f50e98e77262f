//! `kubectl holdfast` end to end: the real kubectl runs the plugin (`kubectl-holdfast`
//! on PATH) against the simulator, where the shipped stack runs (the overlay
//! applied, controller and webhook under their ServiceAccounts). The callers are
//! users who may read but neither delete nor bypass (`alice`), or who may also
//! bypass (`breaker`).

use std::{path::PathBuf, process::Stdio, time::Duration};

use holdfast_e2e::steps::allow;
use holdfast_e2e::{
    Env,
    controller::ControllerProcess,
    fixtures,
    steps::{shipped_with_issued_certificate, with_users, words},
};
use holdfast_sim::SimConfig;
use serde_json::Value;

/// The simulator with the shipped ServiceAccounts, `alice` (reads everything) and
/// `breaker` (reads everything, may bypass protection).
fn sim_config() -> SimConfig {
    let mut cfg = with_users(
        holdfast_e2e::with_service_accounts(SimConfig::default()),
        &["alice", "breaker"],
        "developers",
    );
    for name in ["alice", "breaker"] {
        cfg.rbac
            .push(allow(&[name], &["get", "list", "watch"], &["*"], &["*"]));
    }
    cfg.rbac.push(allow(
        &["breaker"],
        &["bypass"],
        &["holdfast.dev"],
        &["protections"],
    ));
    cfg
}

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
async fn shipped_stack() -> (Env, ControllerProcess) {
    let mut env = Env::start_with(sim_config()).await.expect("sim");
    let c = shipped_with_issued_certificate(&mut env, &[]).await;
    (env, c)
}

/// What `kubectl holdfast ARGS` printed, run as sim user `user`.
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

async fn holdfast(env: &Env, user: &str, args: &[&str]) -> Run {
    let kubeconfig = env.dir.path().join(format!("kubeconfig-{user}"));
    if !kubeconfig.exists() {
        env.sim.write_kubeconfig(&kubeconfig, user).expect("kc");
    }
    let path = format!(
        "{}:{}",
        plugin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = tokio::process::Command::new(holdfast_e2e::kubectl_path().expect("kubectl"));
    cmd.env("KUBECONFIG", &kubeconfig)
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

fn vm(name: &str) -> String {
    format!(
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {{name: {name}, namespace: shop}}\nspec: {{vpcRef: {{name: my-vpc}}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn why_names_every_protection_and_blocker() {
    holdfast_e2e::needs_simulator!("it runs users and ServiceAccounts the simulator defines");
    let (env, controller) = shipped_stack().await;
    env.apply(&fixtures::vpc_vm_crds()).expect("CRDs");
    env.wait_served(&["vpcs", "-A"]).await;
    env.run(&["create", "namespace", "shop"]);
    env.apply(&fixtures::vm_vpc_rule(".spec.vpcRef.name"))
        .expect("rule");
    env.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: shop, labels: {holdfast.dev/protected: Always}}\n",
    )
    .expect("cm");
    env.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: glass, namespace: shop, labels: {holdfast.dev/protected: Always}, annotations: {holdfast.dev/skip-protection: \"true\"}}\n",
    )
    .expect("cm");
    env.apply("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: shop}\n")
        .expect("cm");
    env.apply(
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {name: my-vpc, namespace: shop}\n",
    )
    .expect("vpc");
    let vms: Vec<String> = (0..7).map(|i| format!("vm-{i}")).collect();
    for name in &vms {
        env.apply(&vm(name)).expect("vm");
    }
    // The webhook itself refuses the VPC (the rule is routed): the plugin must agree.
    let refused = env
        .kubectl_until(
            &["delete", "vpc", "my-vpc", "-n", "shop", "--dry-run=server"],
            30,
            |o| o.code != 0,
        )
        .await
        .unwrap_or_else(|e| panic!("VPC not refused: {e}\n{}", controller.log()));
    assert!(refused.stderr.contains("and 2 more"), "{refused:?}");

    // A label-protected ConfigMap, KIND NAME form.
    let run = holdfast(&env, "alice", &words("why configmap cfg -n shop")).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    starts(
        &run.stdout,
        "ConfigMap shop/cfg: DELETE would be REFUSED (decided by: label) for user alice\n\
             Protections:\n  - label holdfast.dev/protected (mode Enforce)\n    blockers (1):\n      \
             label holdfast.dev/protected=Always\n",
    );
    assert!(
        run.stdout
            .contains("Break-glass: not set; you may not bypass protection\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "  - remove the label: kubectl label configmaps cfg -n shop holdfast.dev/protected-\n"
        ),
        "{}",
        run.stdout
    );

    // The VPC referenced by seven VMs, TYPE/NAME form with the group: all seven named.
    let run = holdfast(
        &env,
        "alice",
        &words("why vpcs.network.test.io/my-vpc -n shop -o json"),
    )
    .await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let r = json(&run);
    assert_eq!(r["allowed"], false);
    assert_eq!(r["user"], "alice");
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
        .map(|n| format!("VirtualMachine shop/{n}"))
        .collect();
    assert_eq!(blockers, want);
    assert!(
        r["messages"][0]
            .as_str()
            .is_some_and(|m| m.contains("and 2 more")),
        "{r}"
    );

    // The namespace: everything inside that blocks it.
    let run = holdfast(&env, "alice", &words("why ns shop -o yaml")).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("decidedBy: containment\n"),
        "{}",
        run.stdout
    );
    let run = holdfast(&env, "alice", &words("why namespace shop -o json")).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let r = json(&run);
    let containment = entry(&r, "protections", "policy", "containment").clone();
    assert_eq!(
        containment["blockers"],
        serde_json::json!([
            "ConfigMap shop/cfg (label)",
            "VPC shop/my-vpc (DependencyRule/vm-dependencies)"
        ])
    );

    // Unprotected: exit 0, nothing to say.
    let run = holdfast(&env, "alice", &words("why cm/plain -n shop")).await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stdout,
        "ConfigMap shop/plain: DELETE would be ALLOWED (decided by: none) for user alice\n\
         Protections: none\nBreak-glass: not set; you may not bypass protection\n"
    );

    // Break-glass set: allowed, the protection it overrides still listed; who may use it.
    for (user, may) in [("alice", false), ("breaker", true)] {
        let run = holdfast(
            &env,
            user,
            &["why", "configmap", "glass", "-n", "shop", "-o", "json"],
        )
        .await;
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
        let r = json(&run);
        assert_eq!(r["decidedBy"], "break-glass");
        assert_eq!(
            r["breakGlass"]["active"],
            "annotation holdfast.dev/skip-protection"
        );
        assert_eq!(r["breakGlass"]["callerMayBypass"], may, "{user}: {r}");
        assert_eq!(
            r["protections"][0]["policy"],
            "label holdfast.dev/protected"
        );
    }

    // --server overrides the kubeconfig's URL (a kcp workspace URL works the same way).
    let server = env.sim.url();
    let run = holdfast(
        &env,
        "alice",
        &["--server", &server, "why", "cm", "plain", "-n", "shop"],
    )
    .await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let run = holdfast(
        &env,
        "alice",
        &["why", "cm", "plain", "-n", "shop", "--server", "not a url"],
    )
    .await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    starts(&run.stderr, "error: --server \"not a url\" is not a URL");

    // Bad input: exit 2, one line.
    let run = holdfast(&env, "alice", &words("why gizmos x")).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        run.stderr,
        "error: the server doesn't have a resource type \"gizmos\"\n"
    );
    let run = holdfast(&env, "alice", &words("why configmap missing -n shop")).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.stderr, "error: configmaps \"missing\" not found\n");
    let run = holdfast(&env, "alice", &words("why a/b/c")).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    let run = holdfast(&env, "alice", &words("why -o xml cm/plain")).await;
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_reports_posture_and_findings() {
    holdfast_e2e::needs_simulator!("it runs users and ServiceAccounts the simulator defines");
    let (mut env, mut controller) = shipped_stack().await;

    // Healthy: exit 0; the backstop's absence is a warning.
    let run = holdfast(&env, "alice", &words("check -o json")).await;
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
    env.apply(&fixtures::widget_crd()).expect("crd");
    env.apply(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {name: ghosts}\n\
         spec:\n  resources:\n  - {group: ghost.test.io, version: v1, resource: ghosts}\n",
    )
    .expect("policy");
    env.run(&["create", "namespace", "loose"]);
    env.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keep, namespace: loose, labels: {holdfast.dev/protected: Always}}\n",
    )
    .expect("cm");
    // A protected Widget: the CustomResourceDefinition itself protects nothing.
    env.wait_served(&["widgets", "-A"]).await;
    env.apply(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: loose, labels: {holdfast.dev/protected: Always}}\n",
    )
    .expect("widget");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let r =
        loop {
            let run = holdfast(&env, "alice", &words("check -o json")).await;
            let r = json(&run);
            let kinds: Vec<&str> = r["findings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["kind"].as_str())
                .collect();
            if kinds.contains(&"NamespaceUnprotected")
                && kinds.contains(&"CrdUnprotected")
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
    let ns = finding(&r, "kind", "NamespaceUnprotected");
    assert_eq!(ns["subject"], "Namespace/loose");
    assert!(
        ns["message"].as_str().is_some_and(|m| m.starts_with(
            "not protected itself, yet holds protected objects: ConfigMap loose/keep (label), \
             Widget loose/w1 (label);"
        )),
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
    let crd = finding(&r, "kind", "CrdUnprotected");
    assert_eq!(
        crd["subject"],
        "CustomResourceDefinition/widgets.example.com"
    );
    assert!(
        crd["message"].as_str().is_some_and(|m| m.starts_with(
            "not protected itself, yet holds protected objects: Widget loose/w1 (label);"
        )),
        "{crd}"
    );

    // The CRD itself: its instances are what would block its DELETE.
    let run = holdfast(&env, "alice", &words("why crd widgets.example.com -o json")).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let w = json(&run);
    assert_eq!(w["object"]["kind"], "CustomResourceDefinition");
    assert_eq!(w["decidedBy"], "containment");
    assert_eq!(w["protections"][0]["policy"], "containment");
    assert_eq!(
        w["protections"][0]["blockers"],
        serde_json::json!(["Widget loose/w1 (label)"])
    );

    // The webhook stopped: the configuration points at nothing that answers.
    env.webhook = None;
    let run = holdfast(&env, "alice", &words("check -o json")).await;
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let r = json(&run);
    let down = finding(&r, "kind", "WebhookNotReady");
    assert_eq!(down["severity"], "error");
    assert!(
        down["message"].as_str().is_some_and(
            |m| m.starts_with("https://127.0.0.1:") && m.contains("/validate does not answer")
        ),
        "{down}"
    );

    // The configuration deleted (the controller stopped first, or it would heal it;
    // its self-protection lifted first, as an uninstall does).
    controller.terminate(30).await.expect("controller stops");
    env.run(&words(
        "delete validatingadmissionpolicybinding holdfast-self-protection",
    ));
    env.run(&["delete", "validatingwebhookconfiguration", "holdfast"]);
    let run = holdfast(&env, "alice", &words("check")).await;
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
