//! The shipped RBAC is enough: `manifests/overlays/kubernetes` applied as a user
//! would, then both binaries run as the ServiceAccounts it creates (the simulator
//! enforces RBAC for them) with the arguments of the rendered Deployments: the
//! controller manages the certificate Secret and the configuration, the webhook
//! serves that certificate, and a policy added at run time over a resource type
//! that did not exist at start (a CRD created later) is enforced.

use std::time::Duration;

use holdfast_e2e::steps::words;
use holdfast_e2e::{
    controller::wait_configuration, fixtures, steps::shipped_with_issued_certificate,
};

/// ResourceProtection widgets: every Widget in namespace `shop`.
fn rp_widgets(shop: &str) -> String {
    format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: widgets}}\n\
         spec:\n  resources:\n  - {{group: example.com, version: v1, resource: widgets, namespace: {shop}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_binaries_run_as_the_shipped_service_accounts() {
    let mut env = holdfast_e2e::steps::sim_with_service_accounts().await;
    // The controller as its ServiceAccount, managing the CA Secret the manifests
    // name; the webhook serves the certificate the controller issued.
    let c = shipped_with_issued_certificate(&mut env, &["--leader-elect"]).await;

    // A resource type that appears at run time, and a policy over it.
    env.apply_crds(&fixtures::widget_crd()).expect("crd");
    let shop = env.namespace("shop").expect("namespace");
    env.apply(&rp_widgets(&shop)).expect("policy");
    wait_configuration(&env, Duration::from_secs(30), |c| {
        c.is_some_and(|c| {
            c["webhooks"].as_array().into_iter().flatten().any(|w| {
                w["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("policies-"))
                    && w["rules"].to_string().contains("widgets")
            })
        })
    })
    .await
    .expect("widgets routed");
    env.apply(&format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w1, namespace: {shop}}}\n"
    ))
    .expect("widget");
    let out = env
        .kubectl_until(&["delete", "widget", "w1", "-n", &shop], 30, |o| {
            o.code != 0
        })
        .await
        .unwrap_or_else(|e| panic!("not refused: {e}\n{}", env.webhook_log()));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with(&format!(
            "Error from server (Forbidden): admission webhook \"policies-0.holdfast.dev\" denied \
             the request: holdfast: Widget {shop}/w1 is protected by ResourceProtection/widgets"
        )),
        "{out:?}"
    );
    assert_eq!(
        env.run(&[
            "get",
            "widget",
            "w1",
            "-n",
            &shop,
            "-o",
            "jsonpath={.metadata.name}"
        ])
        .stdout,
        "w1"
    );
    // Label protection and the Lease work under the same identities.
    assert_eq!(
        env.run(&words(
            "get lease holdfast-controller -n holdfast-system -o jsonpath={.metadata.name}"
        ))
        .stdout,
        "holdfast-controller"
    );
    let out = env.attempt(&["delete", "namespace", "holdfast-system"]);
    assert_eq!(out.code, 1, "{out:?}");
    // The label webhook and containment both refuse it; whichever answers first
    // is named.
    let possible = holdfast_e2e::denied_by_any(
        &["delete-label-0.holdfast.dev", "containment.holdfast.dev"],
        "holdfast: Namespace holdfast-system is protected by label \
         holdfast.dev/protected=Always (policy: label holdfast.dev/protected), so it cannot be \
         deleted. To delete it, remove the label (kubectl label namespaces holdfast-system \
         holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true if \
         you are allowed to bypass protection.",
    );
    assert!(
        out.refused_with_one_of(&possible),
        "{out:?}\nexpected one of {possible:?}"
    );
    // Neither log shows a refused API call.
    for (who, log) in [("controller", c.log()), ("webhook", env.webhook_log())] {
        assert!(!log.contains("is forbidden"), "{who}: {log}");
    }
}
