//! An API server that refuses holdfast's webhook configuration is loud: every
//! policy the configuration would route says so in its conditions (with the API
//! server's own message), a Warning Event, the controller's metric
//! `holdfast_controller_configuration_refused`, and a `ConfigurationRefused`
//! finding of `kubectl holdfast check`. Here the cluster's own admission policy
//! refuses the configuration `holdfast`; once it is lifted, holdfast installs it
//! and the policy turns Ready. Runs on the simulator and on the real backends.

use std::{process::Stdio, time::Duration};

use holdfast_e2e::{
    Env,
    controller::{start_controller, wait_condition},
    fixtures::{refusing_configuration_policy, resource_protection},
    metric,
    steps::wait_ready,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_configuration_is_loud_and_recovers() {
    let mut env = Env::start().await.expect("env");
    env.install_crds().expect("holdfast CRDs");
    env.start_webhook_reachable(&[]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    // The refusing policy first: the controller's very first write is refused.
    // The installation is this test's before it (on a shared cluster the policy
    // would refuse any other test's configuration).
    env.own_installation().expect("the installation");
    let name = holdfast_e2e::unique_name("e2e-reserve-holdfast");
    if let Some(run) = &env.cluster {
        run.remove_later("validatingadmissionpolicybinding", &name);
        run.remove_later("validatingadmissionpolicy", &name);
    }
    env.apply(&refusing_configuration_policy(&name))
        .expect("platform policy");
    let shop = env.namespace("shop").expect("namespace");
    env.apply(&resource_protection(
        "keep-settings",
        "",
        &[&format!(
            r#"{{group: "", version: v1, resource: configmaps, namespace: {shop}, names: [settings]}}"#
        )],
    ))
    .expect("policy");
    let port = env.webhook.as_ref().map(|w| w.port).expect("webhook port");
    let c = start_controller(&env, "controller", port, &[]).expect("controller starts");

    // The condition names the API server's refusal.
    let ready = wait_condition(
        &env,
        "resourceprotection",
        "keep-settings",
        "Ready",
        "False",
        60,
    )
    .await
    .expect("Ready=False");
    let installed = wait_condition(
        &env,
        "resourceprotection",
        "keep-settings",
        "Installed",
        "False",
        60,
    )
    .await
    .expect("Installed=False");
    assert_eq!(ready["reason"], "ConfigurationRefused", "{ready}");
    assert_eq!(installed["reason"], "ConfigurationRefused", "{installed}");
    let message = installed["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the API server refused ValidatingWebhookConfiguration holdfast, so DELETEs of what this policy protects are not checked: ")
            && message.contains("the platform reserves the name holdfast"),
        "{installed}"
    );
    // A Warning Event on the policy, once.
    let events = env
        .wait_events("ConfigurationRefused", "keep-settings", 60)
        .await
        .expect("event");
    assert_eq!(events[0]["type"], "Warning", "{events:?}");
    assert!(
        events[0]["note"]
            .as_str()
            .is_some_and(|n| n.contains("the platform reserves the name holdfast")),
        "{events:?}"
    );
    // The metric.
    assert_eq!(
        metric(c.probe_port, "holdfast_controller_configuration_refused")
            .await
            .expect("metrics"),
        Some(1.0)
    );
    // kubectl holdfast check: a ConfigurationRefused finding about the policy.
    let plugin = holdfast_e2e::bin("kubectl-holdfast").expect("plugin");
    let out = tokio::process::Command::new(&plugin)
        .args(["check", "-o", "json"])
        .env("KUBECONFIG", &env.kubeconfig)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("check finishes")
        .expect("check runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let finding = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["kind"] == "ConfigurationRefused")
        .unwrap_or_else(|| panic!("no ConfigurationRefused finding: {report}"));
    assert_eq!(
        finding["subject"], "ResourceProtection/keep-settings",
        "{report}"
    );
    assert_eq!(finding["severity"], "error", "{report}");

    // The platform lifts its policy: holdfast installs the configuration, the
    // policy is enforced and the metric clears.
    env.kubectl(&["delete", "validatingadmissionpolicybinding", &name])
        .expect("kubectl")
        .ok()
        .expect("binding removed");
    wait_ready(&env, "resourceprotection", "keep-settings").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while metric(c.probe_port, "holdfast_controller_configuration_refused")
        .await
        .expect("metrics")
        != Some(0.0)
    {
        assert!(std::time::Instant::now() < deadline, "the metric stays set");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.kubectl(&["delete", "validatingadmissionpolicy", &name])
        .expect("kubectl")
        .ok()
        .expect("policy removed");
    drop(c);
}
