//! The shipped alerts (manifests/components/prometheus-rule), each fired by the
//! fault it names: the real webhook and controller run on the API server, the
//! faults are made for real, their `/metrics` are scraped as Prometheus would
//! (a failed scrape is `up` 0), and the real promtool evaluates the shipped rules
//! over an hour of what was scraped ([`holdfast_e2e::alerts`]). A healthy
//! installation fires none. Runs on the simulator and on the real backends (a test
//! that installs holdfast there owns the cluster's installation while it runs).

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use holdfast_e2e::{
    Env,
    alerts::{CONTROLLER_JOB, Scrape, Timeline, WEBHOOK_JOB, alert_names, firing, scrape},
    controller::{ControllerProcess, start_controller, wait_condition},
    fixtures::{refusing_configuration_policy, resource_protection},
    metric,
    steps::wait_ready,
};

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Both targets, scraped now.
async fn scrape_both(webhook: u16, controller: u16) -> Vec<Scrape> {
    vec![
        scrape(WEBHOOK_JOB, webhook).await.expect("webhook scrape"),
        scrape(CONTROLLER_JOB, controller)
            .await
            .expect("controller scrape"),
    ]
}

/// Polls `series` on `port` until `ok` holds (30 s at most).
async fn wait_metric(port: u16, series: &str, ok: impl Fn(f64) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Not answering yet counts as not there yet.
        let v = metric(port, series).await.ok().flatten().unwrap_or(0.0);
        if ok(v) {
            return;
        }
        if Instant::now() > deadline {
            let body = holdfast_e2e::http_get(port, "/metrics").await;
            panic!("{series} stays at {v}: {body:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The webhook and the controller on the API server, with one ResourceProtection
/// for ConfigMap `settings` in namespace `shop`: the webhook's probe port, the
/// controller, and the namespace.
async fn stack(env: &mut Env) -> (u16, ControllerProcess, String) {
    env.install_crds().expect("holdfast CRDs");
    env.start_webhook_reachable(&[]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    let shop = env.namespace("shop").expect("namespace");
    env.apply(&resource_protection(
        "keep-settings",
        "",
        &[&format!(
            r#"{{group: "", version: v1, resource: configmaps, namespace: {shop}, names: [settings]}}"#
        )],
    ))
    .expect("policy");
    let webhook = env.webhook.as_ref().expect("webhook");
    let (port, probe) = (webhook.port, webhook.probe_port);
    let c = start_controller(env, "controller", port, &[]).expect("controller starts");
    (probe, c, shop)
}

/// Alerts no test here fires by a real fault yet: only
/// [`synthetic_faults_fire_the_alerts_not_yet_made_for_real`] evaluates them, over
/// series written by hand. Each is a gap to close, not an exemption.
const NOT_YET_MADE_FOR_REAL: [&str; 0] = [];

#[test]
fn every_shipped_alert_is_fired_by_a_test_here() {
    let source = include_str!("alerts.rs");
    let names = alert_names().expect("the rules");
    for name in &names {
        assert!(
            NOT_YET_MADE_FOR_REAL.contains(&name.as_str())
                || source.contains(&format!("\"{name}\"")),
            "no test here fires {name}"
        );
    }
    for name in NOT_YET_MADE_FOR_REAL {
        assert!(names.contains(name), "{name} is no shipped alert");
    }
}

/// A target that says `text`.
fn synthetic(job: &str, text: &str) -> Scrape {
    let (samples, types) = holdfast_e2e::alerts::parse_exposition(text).expect("exposition");
    Scrape {
        job: job.to_string(),
        instance: "10.0.0.1:8080".to_string(),
        samples: Some(samples),
        types,
    }
}

#[test]
fn synthetic_faults_fire_the_alerts_not_yet_made_for_real() {
    let healthy_controller = "# TYPE holdfast_controller_backstop_missing gauge\n\
                              holdfast_controller_backstop_missing 0\n";
    let webhook = |slow: u32, failed: u32| {
        format!(
            "# TYPE holdfast_webhook_admission_duration_seconds histogram\n\
             holdfast_webhook_admission_duration_seconds_bucket{{operation=\"DELETE\",le=\"0.1\"}} 10\n\
             holdfast_webhook_admission_duration_seconds_bucket{{operation=\"DELETE\",le=\"2.5\"}} 10\n\
             holdfast_webhook_admission_duration_seconds_bucket{{operation=\"DELETE\",le=\"+Inf\"}} {}\n\
             holdfast_webhook_admission_duration_seconds_sum{{operation=\"DELETE\"}} {}\n\
             holdfast_webhook_admission_duration_seconds_count{{operation=\"DELETE\"}} {}\n\
             # TYPE holdfast_webhook_dependents_lookups_total counter\n\
             holdfast_webhook_dependents_lookups_total{{source=\"failed\"}} {failed}\n",
            10 + slow,
            0.1 + 8.0 * f64::from(slow),
            10 + slow
        )
    };
    let at =
        |wh: String, ctl: &str| vec![synthetic(WEBHOOK_JOB, &wh), synthetic(CONTROLLER_JOB, ctl)];
    let fired = |before, after| firing(&Timeline::growing(before, after)).expect("promtool");
    assert_eq!(
        fired(
            at(webhook(0, 0), healthy_controller),
            at(webhook(0, 0), healthy_controller)
        ),
        BTreeSet::new()
    );
    // Reviews waiting 8 s for a hung read.
    assert_eq!(
        fired(
            at(webhook(0, 0), healthy_controller),
            at(webhook(2, 0), healthy_controller)
        ),
        set(&["HoldfastWebhookSlow"])
    );
    assert_eq!(
        fired(
            at(webhook(0, 0), healthy_controller),
            at(webhook(0, 3), healthy_controller)
        ),
        set(&["HoldfastWebhookReadErrors"])
    );
    let missing = "holdfast_controller_backstop_missing 1\n";
    assert_eq!(
        fired(at(webhook(0, 0), missing), at(webhook(0, 0), missing)),
        set(&["HoldfastBackstopMissing"])
    );
}

#[test]
fn the_shipped_rules_pass_promtool_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = holdfast_e2e::alerts::rules_file(dir.path()).expect("rules file");
    let (code, out) = holdfast_e2e::alerts::run_promtool(
        dir.path(),
        &["check", "rules", rules.to_str().expect("path")],
    )
    .expect("promtool");
    assert_eq!(code, 0, "{out}");
    let names = alert_names().expect("names");
    assert!(
        out.contains(&format!("SUCCESS: {} rules found", names.len())),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn healthy_fires_nothing_and_each_fault_fires_its_alert() {
    let mut env = Env::start().await.expect("env");
    let (wh, c, shop) = stack(&mut env).await;
    wait_ready(&env, "resourceprotection", "keep-settings").await;
    wait_metric(
        c.probe_port,
        "holdfast_controller_policies{kind=\"ResourceProtection\",reason=\"Enforced\"}",
        |v| v == 1.0,
    )
    .await;

    // Healthy, with traffic: an allowed DELETE between the scrapes.
    env.kubectl(&["-n", &shop, "create", "configmap", "scratch"])
        .expect("kubectl")
        .ok()
        .expect("created");
    let before = scrape_both(wh, c.probe_port).await;
    env.kubectl(&["-n", &shop, "delete", "configmap", "scratch"])
        .expect("kubectl")
        .ok()
        .expect("deleted");
    let after = scrape_both(wh, c.probe_port).await;
    assert_eq!(
        firing(&Timeline::growing(before, after.clone())).expect("promtool"),
        BTreeSet::new(),
        "a healthy installation fires nothing"
    );

    // Denials: something keeps deleting a label-protected object.
    env.kubectl(&["-n", &shop, "create", "configmap", "locked"])
        .expect("kubectl")
        .ok()
        .expect("created");
    env.kubectl(&[
        "-n",
        &shop,
        "label",
        "configmap",
        "locked",
        "holdfast.dev/protected=true",
    ])
    .expect("kubectl")
    .ok()
    .expect("labelled");
    let before = scrape_both(wh, c.probe_port).await;
    for _ in 0..15 {
        let out = env.attempt(&["-n", &shop, "delete", "configmap", "locked"]);
        assert!(out.refused_with("is protected by label"), "{out:?}");
    }
    let denied = r#"holdfast_webhook_admission_requests_total{decider="label",decision="deny",operation="DELETE"}"#;
    let count = metric(wh, denied).await.expect("metrics");
    assert!(
        count >= Some(15.0),
        "{count:?}: {:?}",
        holdfast_e2e::http_get(wh, "/metrics").await
    );
    let after = scrape_both(wh, c.probe_port).await;
    assert_eq!(
        firing(&Timeline::growing(before, after)).expect("promtool"),
        set(&["HoldfastDenialsHigh"])
    );

    // A policy that cannot be enforced (it names a resource nobody serves).
    env.apply(&resource_protection(
        "keep-ghosts",
        "",
        &[r#"{group: ghost.test.io, version: v1, resource: ghosts}"#],
    ))
    .expect("policy");
    wait_condition(
        &env,
        "resourceprotection",
        "keep-ghosts",
        "Ready",
        "False",
        30,
    )
    .await
    .expect("Ready=False");
    wait_metric(
        c.probe_port,
        "holdfast_controller_policies{kind=\"ResourceProtection\",reason=\"Invalid\"}",
        |v| v == 1.0,
    )
    .await;
    let now = scrape_both(wh, c.probe_port).await;
    assert_eq!(
        firing(&Timeline::steady(now)).expect("promtool"),
        set(&["HoldfastPolicyNotReady"])
    );
    env.kubectl(&["delete", "resourceprotection", "keep-ghosts"])
        .expect("kubectl")
        .ok()
        .expect("deleted");
    wait_metric(
        c.probe_port,
        "holdfast_controller_policies{kind=\"ResourceProtection\",reason=\"Invalid\"}",
        |v| v == 0.0,
    )
    .await;

    // The webhook stops: no replica answers.
    drop(env.webhook.take());
    let now = scrape_both(wh, c.probe_port).await;
    assert!(now[0].samples.is_none(), "the webhook still answers");
    let fired = firing(&Timeline::steady(now)).expect("promtool");
    assert_eq!(
        fired,
        set(&["HoldfastWebhookDown", "HoldfastWebhookReplicaDown"])
    );

    // The controller stops too.
    let port = c.probe_port;
    drop(c);
    let now = scrape_both(wh, port).await;
    assert!(now[1].samples.is_none(), "the controller still answers");
    let fired = firing(&Timeline::steady(now)).expect("promtool");
    assert!(fired.contains("HoldfastControllerDown"), "{fired:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_configuration_fires_its_alerts_until_lifted() {
    let mut env = Env::start().await.expect("env");
    // The installation first: on a shared cluster, the policy below would refuse
    // the configuration of any test installing holdfast while it is there.
    env.own_installation().expect("the installation");
    let name = holdfast_e2e::unique_name("e2e-alerts-reserve-holdfast");
    if let Some(run) = &env.cluster {
        run.remove_later("validatingadmissionpolicybinding", &name);
        run.remove_later("validatingadmissionpolicy", &name);
    }
    env.apply(&refusing_configuration_policy(&name))
        .expect("platform policy");
    let (wh, c, _) = stack(&mut env).await;
    let errors = r#"holdfast_controller_reconcile_errors_total{error="configuration"}"#;
    wait_metric(
        c.probe_port,
        "holdfast_controller_configuration_refused",
        |v| v == 1.0,
    )
    .await;
    wait_metric(c.probe_port, errors, |v| v >= 1.0).await;
    wait_metric(
        c.probe_port,
        "holdfast_controller_policies{kind=\"ResourceProtection\",reason=\"ConfigurationRefused\"}",
        |v| v == 1.0,
    )
    .await;
    // Two scrapes with a refused pass between them.
    let before = scrape_both(wh, c.probe_port).await;
    let seen = metric(c.probe_port, errors)
        .await
        .expect("metrics")
        .unwrap_or(0.0);
    wait_metric(c.probe_port, errors, |v| v > seen).await;
    let after = scrape_both(wh, c.probe_port).await;
    assert_eq!(
        firing(&Timeline::growing(before, after)).expect("promtool"),
        set(&[
            "HoldfastConfigurationRefused",
            "HoldfastPolicyNotReady",
            "HoldfastReconcileErrors",
        ])
    );

    // The platform lifts its policy: the alerts clear.
    env.kubectl(&["delete", "validatingadmissionpolicybinding", &name])
        .expect("kubectl")
        .ok()
        .expect("binding removed");
    wait_ready(&env, "resourceprotection", "keep-settings").await;
    wait_metric(
        c.probe_port,
        "holdfast_controller_configuration_refused",
        |v| v == 0.0,
    )
    .await;
    let now = scrape_both(wh, c.probe_port).await;
    assert_eq!(
        firing(&Timeline::steady(now)).expect("promtool"),
        BTreeSet::new()
    );
    env.kubectl(&["delete", "validatingadmissionpolicy", &name])
        .expect("kubectl")
        .ok()
        .expect("policy removed");
    drop(c);
}

/// The metric names `expr` reads (identifiers followed by `{`, `[` or `)`, not
/// functions, keywords or label names).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut depth = 0;
    let bytes: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == '{' {
            depth += 1;
        } else if c == '}' {
            depth -= 1;
        } else if c == '"' {
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                i += 1;
            }
        } else if depth == 0 && (c.is_ascii_alphabetic() || c == '_') {
            let start = i;
            while i + 1 < bytes.len()
                && (bytes[i + 1].is_ascii_alphanumeric() || bytes[i + 1] == '_')
            {
                i += 1;
            }
            let word: String = bytes[start..=i].iter().collect();
            if word.starts_with("holdfast_") || word == "up" {
                out.insert(word);
            }
        }
        i += 1;
    }
    out
}

#[test]
fn the_dashboard_queries_only_what_holdfast_exports_and_promtool_parses_it() {
    let text = std::fs::read_to_string(holdfast_e2e::alerts::dashboard()).expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    // The families the binaries register (their sources name them without the
    // registry's prefix); a histogram's series add _bucket, _sum, _count.
    let root = holdfast_e2e::workspace_root();
    let webhook = std::fs::read_to_string(root.join("webhook/src/metrics.rs")).expect("source");
    let controller =
        std::fs::read_to_string(root.join("controller/src/reconcile.rs")).expect("source");
    let exported = |name: &str| {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        name == "up"
            || family
                .strip_prefix("holdfast_webhook_")
                .is_some_and(|f| webhook.contains(&format!("\"{f}\"")))
            || family
                .strip_prefix("holdfast_controller_")
                .is_some_and(|f| controller.contains(&format!("\"{f}\"")))
    };
    let mut rules = Vec::new();
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("id")),
            "{title}: id reused"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            let names = metric_names(expr);
            assert!(
                !names.is_empty(),
                "{title}: {expr} reads no holdfast series"
            );
            for name in names {
                assert!(
                    exported(&name),
                    "{title}: {name} is not exported by holdfast"
                );
            }
            rules.push(serde_json::json!({
                "record": format!("dashboard:panel_{}", rules.len()),
                "expr": expr.replace("$__rate_interval", "5m"),
            }));
        }
    }
    // promtool parses every query (as a recording rule).
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("dashboard.rules.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}))
            .expect("json"),
    )
    .expect("write");
    let (code, out) = holdfast_e2e::alerts::run_promtool(
        dir.path(),
        &["check", "rules", file.to_str().expect("path")],
    )
    .expect("promtool");
    assert_eq!(code, 0, "{out}");
    // The ConfigMap the component generates carries the file.
    let kustomization =
        std::fs::read_to_string(root.join("manifests/components/dashboard/kustomization.yaml"))
            .expect("kustomization");
    assert!(
        kustomization.contains("files: [holdfast.json]"),
        "{kustomization}"
    );
}

#[test]
fn metric_names_are_read_from_queries() {
    assert_eq!(
        metric_names(
            r#"sum by (le) (rate(holdfast_webhook_x_bucket{job="a",le="1"}[5m])) or up == 0"#
        ),
        ["holdfast_webhook_x_bucket", "up"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

/// A live dependents lookup that fails (the webhook may read everything but the
/// dependents): the DELETE is refused, the failure counted, and
/// `HoldfastWebhookReadErrors` fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_live_lookup_fires_read_errors() {
    use holdfast_e2e::rbac;
    let mut env = vpc_and_its_rule().await;
    let webhook = env.test_user("holdfast-webhook", &[]).expect("user");
    env.grant_cluster(
        "webhook-reads-but-vms",
        &[rbac::user(&webhook.name)],
        &[
            rbac::rule(
                &["get", "list", "watch"],
                &[
                    "",
                    "holdfast.dev",
                    "apiextensions.k8s.io",
                    "network.test.io",
                ],
                &["*"],
            ),
            rbac::rule(
                &["create", "patch", "update"],
                &["events.k8s.io"],
                &["events"],
            ),
        ],
    )
    .expect("the webhook's grant");
    let kubeconfig = webhook.kubeconfig_arg();
    let (wh, c) = live_lookups_on_a_vpc(&mut env, &["--kubeconfig", &kubeconfig]).await;
    let before = scrape_both(wh, c.probe_port).await;
    let out = env.attempt(&["delete", "vpc", "my-vpc", "--dry-run=server"]);
    assert!(out.refused_with("cannot verify dependents"), "{out:?}");
    wait_metric(
        wh,
        "holdfast_webhook_dependents_lookups_total{source=\"failed\"}",
        |v| v >= 1.0,
    )
    .await;
    let after = scrape_both(wh, c.probe_port).await;
    assert_eq!(
        firing(&Timeline::growing(before, after)).expect("promtool"),
        set(&["HoldfastWebhookReadErrors"])
    );
}

/// The shipped installation, with the platform's RBAC leaving out the controller's
/// grant on admission policies: the backstop cannot be installed, and
/// `HoldfastBackstopMissing` fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backstop_the_controller_may_not_install_fires_backstop_missing() {
    use holdfast_e2e::steps::{apply_overlay, controller_as, service_account_kubeconfigs};
    let mut env = holdfast_e2e::steps::sim_with_service_accounts().await;
    apply_overlay(&env, "kubernetes");
    let mut role = env
        .get_json(&["clusterrole", "holdfast-controller"])
        .expect("the controller's ClusterRole");
    if let Some(rules) = role["rules"].as_array_mut() {
        rules.retain(|r| {
            !r["resources"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "validatingadmissionpolicies"))
        });
    }
    env.kubectl_stdin(&["replace", "-f", "-"], &role.to_string())
        .expect("kubectl")
        .ok()
        .expect("the ClusterRole without admission policies");
    let (controller_kc, webhook_kc) = service_account_kubeconfigs(&env);
    env.start_webhook(&["--kubeconfig", &webhook_kc])
        .await
        .expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    let (port, wh) = {
        let w = env.webhook.as_ref().expect("webhook");
        (w.port, w.probe_port)
    };
    // The backstop is wanted (the harness's controllers run without it).
    let c = controller_as(
        &env,
        port,
        "controller",
        &controller_kc,
        &["--backstop=true"],
    )
    .await;
    wait_metric(c.probe_port, "holdfast_controller_backstop_missing", |v| {
        v == 1.0
    })
    .await;
    let now = scrape_both(wh, c.probe_port).await;
    let fired = firing(&Timeline::steady(now)).expect("promtool");
    assert!(fired.contains("HoldfastBackstopMissing"), "{fired:?}");
    assert!(
        !fired.contains("HoldfastWebhookDown") && !fired.contains("HoldfastControllerDown"),
        "{fired:?}"
    );
}

/// A slow link to the API server under the webhook's live dependents lookups
/// (the webhook reaches the API server through a [`holdfast_e2e::slow_link`]): each
/// review takes longer than a second, and `HoldfastWebhookSlow` fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_api_server_under_live_lookups_fires_webhook_slow() {
    let mut env = vpc_and_its_rule().await;
    let (link, kubeconfig) = env
        .kubeconfig_through("webhook-slow.kubeconfig")
        .expect("a link to the API server");
    let (wh, c) = live_lookups_on_a_vpc(&mut env, &["--kubeconfig", &kubeconfig]).await;
    // Reviews at the usual speed first: the DELETE goes through (no VM uses it).
    let dry = ["delete", "vpc", "my-vpc", "--dry-run=server"];
    let out = env.attempt(&dry);
    assert_eq!(out.code, 0, "{out:?}");
    let before = scrape_both(wh, c.probe_port).await;
    link.set_delay(Duration::from_millis(1500));
    for _ in 0..3 {
        let out = env.attempt(&dry);
        assert_eq!(out.code, 0, "{out:?}");
    }
    link.set_delay(Duration::ZERO);
    let slow =
        "holdfast_webhook_admission_duration_seconds_bucket{operation=\"DELETE\",le=\"+Inf\"}";
    let (total, fast) = (
        metric(wh, slow).await.expect("metrics").unwrap_or(0.0),
        metric(
            wh,
            "holdfast_webhook_admission_duration_seconds_bucket{operation=\"DELETE\",le=\"1\"}",
        )
        .await
        .expect("metrics")
        .unwrap_or(0.0),
    );
    assert!(
        total - fast >= 3.0,
        "three reviews over a second: {total} {fast}"
    );
    let after = scrape_both(wh, c.probe_port).await;
    assert_eq!(
        firing(&Timeline::growing(before, after)).expect("promtool"),
        set(&["HoldfastWebhookSlow"])
    );
}

/// The VPC and VM test types and the DependencyRule `vm-dependencies` on a simulator.
async fn vpc_and_its_rule() -> Env {
    let env = holdfast_e2e::steps::sim_with_crds().await;
    env.apply_crds(&holdfast_e2e::fixtures::vpc_vm_crds())
        .expect("test CRDs");
    env.wait_served(&["vpcs"]).await;
    env.apply(&holdfast_e2e::fixtures::vm_vpc_rule(".spec.vpcRef.name"))
        .expect("rule");
    env
}

/// The webhook (`args`, live dependents lookups) and a controller on `env` of
/// [`vpc_and_its_rule`], the rule Ready, and VPC `my-vpc` in the default namespace:
/// the webhook's probe port and the controller.
async fn live_lookups_on_a_vpc(env: &mut Env, args: &[&str]) -> (u16, ControllerProcess) {
    let mut all = args.to_vec();
    all.extend(["--dependents", "live"]);
    env.start_webhook_reachable(&all).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    let (port, wh) = {
        let w = env.webhook.as_ref().expect("webhook");
        (w.port, w.probe_port)
    };
    let c = start_controller(env, "controller", port, &[]).expect("controller starts");
    wait_ready(env, "dependencyrule", "vm-dependencies").await;
    let ns = env.default_namespace().expect("namespace");
    env.apply(&format!(
        "apiVersion: network.test.io/v1\nkind: VPC\nmetadata: {{name: my-vpc, namespace: {ns}}}\n"
    ))
    .expect("vpc");
    (wh, c)
}
