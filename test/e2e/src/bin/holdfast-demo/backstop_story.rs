//! The backstop: label protection holds with the webhook process stopped, because
//! the controller also installed a ValidatingAdmissionPolicy the API server
//! evaluates itself.

use crate::runner::{Demo, Expect};
use holdfast_e2e::steps::words;
use holdfast_e2e::{Env, controller::start_controller};

/// With the webhook stopped, a labelled namespace and ConfigMap still cannot be
/// deleted; an unprotected ConfigMap can.
pub async fn backstop(demo: &mut Demo) -> anyhow::Result<()> {
    let mut env = Env::start().await?;
    env.install_crds()?;
    env.start_webhook(&[]).await?;
    env.wait_webhook_ready().await?;
    let Some(port) = env.webhook.as_ref().map(|w| w.port) else {
        anyhow::bail!("the webhook is not running");
    };
    let mut controller = start_controller(&env, "controller-backstop", port, &["--backstop"])?;
    controller.wait_ready(30).await?;
    demo.story(
        "The backstop — label protection with the webhook down",
        "issue 16: a ValidatingAdmissionPolicy the controller installs, evaluated by the API server itself",
    );
    demo.say("The controller installed the backstop next to the webhook configuration");
    demo.settle(
        &env,
        &words("get validatingadmissionpolicybinding holdfast-backstop"),
        30,
        |o| o.code == 0,
    )
    .await;
    demo.run(
        &env,
        &[
            "get",
            "validatingadmissionpolicy",
            "holdfast-backstop",
            "-o",
            "jsonpath={.spec.failurePolicy} {.spec.matchConstraints.resourceRules[*].operations}",
        ],
        Expect::Succeeds,
        &["Fail [\"DELETE\"]"],
    )?;
    demo.say("A protected namespace and a protected ConfigMap, and one that is not protected");
    demo.apply(
        &env,
        None,
        "apiVersion: v1
kind: Namespace
metadata:
  name: vault
  labels: {holdfast.dev/protected: \"true\"}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: keys
  namespace: vault
  labels: {holdfast.dev/protected: Always}
data: {a: b}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: scratch, namespace: vault}
data: {a: b}
",
        &[
            "namespace/vault created",
            "configmap/keys created",
            "configmap/scratch created",
        ],
    )?;
    demo.say("The webhook process stops (a crash, an upgrade, a partition)");
    drop(env.webhook.take());
    demo.note("holdfast-webhook is no longer running; the API server cannot call it");
    demo.say("Deleting the namespace: the API server itself refuses, with holdfast's message");
    demo.run(
        &env,
        &["delete", "namespace", "vault"],
        Expect::Refused,
        &["ValidatingAdmissionPolicy 'holdfast-backstop' with binding 'holdfast-backstop' denied request: holdfast: Namespace vault is protected by label holdfast.dev/protected=true (policy: label holdfast.dev/protected), so it cannot be deleted."],
    )?;
    demo.say("Deleting the protected ConfigMap: refused too");
    demo.run(
        &env,
        &["delete", "configmap", "keys", "-n", "vault"],
        Expect::Refused,
        &["holdfast: ConfigMap vault/keys is protected by label holdfast.dev/protected=Always (policy: label holdfast.dev/protected), so it cannot be deleted. To delete it, remove the label (kubectl label configmaps keys -n vault holdfast.dev/protected-)"],
    )?;
    demo.say("What nothing protects is not held back by the outage");
    demo.run(
        &env,
        &["delete", "configmap", "scratch", "-n", "vault"],
        Expect::Succeeds,
        &["configmap \"scratch\" deleted"],
    )?;
    drop(controller);
    Ok(())
}
