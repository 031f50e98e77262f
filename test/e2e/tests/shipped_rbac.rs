//! The shipped RBAC is enough: `manifests/overlays/kubernetes` applied as a user
//! would, then both binaries run as the ServiceAccounts it creates (the simulator
//! enforces RBAC for them) with the arguments of the rendered Deployments: the
//! controller manages the certificate Secret and the configuration, the webhook
//! serves that certificate, and a policy added at run time over a resource type
//! that did not exist at start (a CRD created later) is enforced.

use std::{path::Path, time::Duration};

use holdfast_e2e::{
    Env,
    controller::{start_controller, wait_configuration},
    fixtures,
};
use holdfast_sim::SimConfig;

const CONTROLLER: &str = holdfast_e2e::CONTROLLER_SA;
const WEBHOOK: &str = holdfast_e2e::WEBHOOK_SA;

const RP_WIDGETS: &str = r#"
apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: widgets}
spec:
  resources:
  - {group: example.com, version: v1, resource: widgets, namespace: shop}
"#;

fn ok(env: &Env, args: &[&str]) -> String {
    env.kubectl(args)
        .expect("kubectl runs")
        .ok()
        .unwrap_or_else(|e| panic!("kubectl {}: {e:#}", args.join(" ")))
        .stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_binaries_run_as_the_shipped_service_accounts() {
    holdfast_e2e::needs_simulator!(
        "it runs the binaries with ServiceAccount tokens the simulator is configured with"
    );
    let cfg = holdfast_e2e::with_service_accounts(SimConfig::default());
    let mut env = Env::start_with(cfg).await.expect("sim");
    let overlay = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/overlays/kubernetes");
    ok(&env, &["apply", "-k", &overlay.to_string_lossy()]);
    let controller_kc = env.dir.path().join("controller.kubeconfig");
    let webhook_kc = env.dir.path().join("webhook.kubeconfig");
    env.sim
        .write_kubeconfig(&controller_kc, CONTROLLER)
        .expect("kc");
    env.sim.write_kubeconfig(&webhook_kc, WEBHOOK).expect("kc");
    let port = holdfast_e2e::free_port().expect("port");

    // The controller as its ServiceAccount, managing the CA Secret the manifests name.
    let controller_kc = controller_kc.to_string_lossy().into_owned();
    let mut c = start_controller(
        &env,
        "controller",
        port,
        &[
            "--kubeconfig",
            &controller_kc,
            "--ca-secret",
            "holdfast-system/holdfast-webhook-tls",
            "--leader-elect",
        ],
    )
    .expect("controller");
    c.wait_ready(30).await.expect("controller ready");
    // The webhook serves the certificate the controller issued.
    holdfast_e2e::controller::use_issued_certificate(&env, &c)
        .await
        .expect("issued certificate");
    let webhook_kc = webhook_kc.to_string_lossy().into_owned();
    env.start_webhook_on(port, &["--kubeconfig", &webhook_kc])
        .await
        .expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");

    // A resource type that appears at run time, and a policy over it.
    env.apply(&fixtures::widget_crd()).expect("crd");
    ok(&env, &["create", "namespace", "shop"]);
    env.apply(RP_WIDGETS).expect("policy");
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
    env.apply("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: shop}\n")
        .expect("widget");
    let out = env
        .kubectl_until(&["delete", "widget", "w1", "-n", "shop"], 30, |o| {
            o.code != 0
        })
        .await
        .unwrap_or_else(|e| panic!("not refused: {e}\n{}", env.webhook_log()));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with(
            "Error from server (Forbidden): admission webhook \"policies-0.holdfast.dev\" denied \
             the request: holdfast: Widget shop/w1 is protected by ResourceProtection/widgets"
        ),
        "{out:?}"
    );
    assert_eq!(
        ok(
            &env,
            &[
                "get",
                "widget",
                "w1",
                "-n",
                "shop",
                "-o",
                "jsonpath={.metadata.name}"
            ]
        ),
        "w1"
    );
    // Label protection and the Lease work under the same identities.
    assert_eq!(
        ok(
            &env,
            &[
                "get",
                "lease",
                "holdfast-controller",
                "-n",
                "holdfast-system",
                "-o",
                "jsonpath={.metadata.name}"
            ]
        ),
        "holdfast-controller"
    );
    let out = env
        .kubectl(&["delete", "namespace", "holdfast-system"])
        .expect("kubectl");
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("holdfast: Namespace holdfast-system is protected by label holdfast.dev/protected=Always"),
        "{out:?}"
    );
    // Neither log shows a refused API call.
    for (who, log) in [("controller", c.log()), ("webhook", env.webhook_log())] {
        assert!(!log.contains("is forbidden"), "{who}: {log}");
    }
}
