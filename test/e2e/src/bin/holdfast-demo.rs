//! The holdfast demo: starts holdfast-sim, the real holdfast-webhook and the real
//! holdfast-controller, then shows with the real kubectl what a user sees, one short
//! story per protection. Exits non-zero if any outcome differs from what is
//! expected; every process it started is stopped on exit.
//!
//! `holdfast-demo --kubeconfig FILE [--webhook-host ADDR]` runs the Kubernetes
//! stories on that cluster instead (see `cluster.rs`), cleaning up after itself.

#[path = "holdfast-demo/backstop_story.rs"]
mod backstop_story;
#[path = "holdfast-demo/cascading_story.rs"]
mod cascading_story;
#[path = "holdfast-demo/cluster.rs"]
mod cluster;
#[path = "holdfast-demo/deferred_story.rs"]
mod deferred_story;
#[path = "holdfast-demo/kcp_story.rs"]
mod kcp_story;
#[path = "holdfast-demo/plugin_story.rs"]
mod plugin_story;
#[path = "holdfast-demo/policies.rs"]
mod policies;
#[path = "holdfast-demo/runner.rs"]
mod runner;

use anyhow::bail;
use holdfast_e2e::steps::words;
use holdfast_e2e::{Env, controller::start_controller};
use runner::{Demo, Expect};
use std::{process::ExitCode, time::Instant};

/// The label and strict-mode story, with the label webhooks installed by hand.
fn label_story(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "Label protection and strict mode",
        "seeds 001 (Karmada: protection label) and 004 (Orkestra: label protection, strict mode, exemption label)",
    );
    demo.say("A namespace holding a shop's databases, protected by a label");
    demo.run(
        env,
        &["create", "namespace", "shop"],
        Expect::Succeeds,
        &["namespace/shop created"],
    )?;
    demo.run(
        env,
        &words("label namespace shop holdfast.dev/protected=Always"),
        Expect::Succeeds,
        &["labeled"],
    )?;

    demo.say("Someone deletes the wrong namespace: holdfast refuses");
    demo.run(
        env,
        &["delete", "namespace", "shop"],
        Expect::Refused,
        &["holdfast: Namespace shop is protected by label holdfast.dev/protected=Always"],
    )?;

    demo.say("Strict mode: the protection label cannot simply be removed");
    demo.run(
        env,
        &["label", "namespace", "shop", "holdfast.dev/protected-"],
        Expect::Refused,
        &["strict mode is on"],
    )?;

    demo.say("Nor by adding the exemption in the same update");
    demo.run(
        env,
        &words("label namespace shop holdfast.dev/protected- holdfast.dev/strict-exempt=true"),
        Expect::Refused,
        &["must already be stored"],
    )?;

    demo.say("Deliberately unprotect: mark exempt first, then remove the label");
    demo.run(
        env,
        &words("label namespace shop holdfast.dev/strict-exempt=true"),
        Expect::Succeeds,
        &["labeled"],
    )?;
    demo.run(
        env,
        &["label", "namespace", "shop", "holdfast.dev/protected-"],
        Expect::Succeeds,
        &["unlabeled"],
    )?;

    demo.say("Now the deletion goes through");
    demo.run(
        env,
        &["delete", "namespace", "shop"],
        Expect::Succeeds,
        &["namespace \"shop\" deleted"],
    )?;
    Ok(())
}

/// The Kubernetes topology: the label story, then one story per policy kind with
/// the real controller installing the configuration.
async fn kubernetes(demo: &mut Demo) -> anyhow::Result<()> {
    let mut env = Env::start().await?;
    println!("simulator (Kubernetes): {}", env.sim.url());
    env.install_crds()?;
    env.start_webhook(&["--strict"]).await?;
    env.wait_webhook_ready().await?;
    env.install_label_webhooks(&[], true)?;
    println!(
        "webhook: holdfast-webhook --strict, installed by hand as ValidatingWebhookConfiguration \"holdfast\""
    );
    label_story(demo, &env)?;

    let Some(port) = env.webhook.as_ref().map(|w| w.port) else {
        bail!("the webhook is not running");
    };
    let mut controller = start_controller(&env, "controller", port, &["--strict"])?;
    controller.wait_ready(30).await?;
    println!(
        "\ncontroller: holdfast-controller run --strict now owns ValidatingWebhookConfiguration \"holdfast\": \
         it routes to the webhook exactly what the policy objects below protect"
    );
    policies::resource_protection(demo, &env).await?;
    policies::enforcement_modes(demo, &env).await?;
    policies::namespace_containment(demo, &env).await?;
    policies::dependency_rule(demo, &env).await?;
    policies::anchor_rule(demo, &env).await?;
    policies::critical_service(demo, &env).await?;
    cascading_story::cascading(demo, &env).await?;
    plugin_story::story(demo, &env).await?;
    deferred_story::deferred(demo, &env).await?;
    drop(controller);
    backstop_story::backstop(demo).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let on_cluster = match cluster::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("holdfast-demo: error: {e}");
            return ExitCode::from(2);
        }
    };
    if on_cluster.is_some() {
        println!(
            "holdfast demo on your cluster: the real holdfast-webhook and holdfast-controller running here, the real kubectl."
        );
    } else {
        println!(
            "holdfast demo: an API-server simulator, the real holdfast-webhook and holdfast-controller, the real kubectl."
        );
    }
    let mut demo = Demo::default();
    let outcome = match &on_cluster {
        Some(opts) => cluster::run(&mut demo, opts).await,
        None => match kubernetes(&mut demo).await {
            Ok(()) => kcp_story::story(&mut demo).await,
            Err(e) => Err(e),
        },
    };
    // Every process and simulator has been stopped by now (dropped on return).
    let failures = demo.failures();
    for f in failures {
        eprintln!("FAILED: {f}");
    }
    if let Err(e) = outcome {
        eprintln!("Error: the demo could not run to the end: {e:#}");
        return ExitCode::FAILURE;
    }
    if failures.is_empty() {
        println!(
            "\ndemo finished in {:.1}s: every outcome as expected",
            started.elapsed().as_secs_f64()
        );
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "Error: {} step(s) did not behave as expected",
            failures.len()
        );
        ExitCode::FAILURE
    }
}
