//! holdfast-controller on kcp, end to end: every protection in every workspace that
//! binds holdfast.dev, on two shards (`kcp_sharded::sharded`). The controller runs
//! as `holdfast-controller` with only the RBAC holdfast ships; consumers act as the
//! user `consumer` (allowed by the platform team to bind holdfast.dev), providers
//! as `provider`, the platform team as `platform`.

use holdfast_e2e::{
    controller::{ControllerProcess, rules_of, start_controller},
    kcp_sharded::{
        COMPUTE, HOLDFAST, Sharded, bindable, holdfast_binding, own_webhooks, sharded,
        workspace_webhooks,
    },
};
use serde_json::Value;

/// The topology, `consumer` allowed to bind holdfast.dev, and the controller.
async fn setup() -> (Sharded, ControllerProcess) {
    let t = sharded().await.expect("kcp topology");
    t.let_bind_holdfast("consumer");
    let port = holdfast_e2e::free_port().expect("port");
    let args = t.controller_args();
    let mut c = start_controller(&t.env, "controller", port, &args).expect("controller");
    c.wait_ready(t.wait.as_secs())
        .await
        .expect("controller ready");
    (t, c)
}

/// The topology, `consumer` allowed to bind holdfast.dev, the webhook and the
/// controller.
async fn setup_with_webhook() -> (Sharded, ControllerProcess) {
    let mut t = sharded().await.expect("kcp topology");
    t.let_bind_holdfast("consumer");
    let c = t
        .start_holdfast("controller", "watch")
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    (t, c)
}

/// The configuration `holdfast` in `path`, read as `user`, once `check` accepts it
/// (`None`: absent); fails with the last answer and the controller's log.
async fn configuration(
    t: &Sharded,
    c: &ControllerProcess,
    user: &str,
    path: &str,
    check: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    let args = ["get", "validatingwebhookconfiguration/holdfast", "-o=json"];
    let out = t
        .until(user, path, &args, |o| {
            let cfg = (o.code == 0)
                .then(|| serde_json::from_str::<Value>(&o.stdout).ok())
                .flatten();
            let absent = o.code == 1 && o.stderr.contains("\"holdfast\" not found");
            (cfg.is_some() || absent) && check(cfg.as_ref())
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", c.log()));
    (out.code == 0).then(|| out.json().expect("configuration"))
}

/// Condition `type_` of `kind`/`name` in `path` (as the consumer) once its status is
/// `status`; fails with the last answer and the controller's log.
async fn condition(
    t: &Sharded,
    c: &ControllerProcess,
    path: &str,
    object: (&str, &str),
    wanted: (&str, &str),
) -> Value {
    condition_saying(t, c, path, object, wanted, |_| true).await
}

/// [`condition`], waiting also until `says` accepts the condition (its message
/// follows the configuration kcp enforces, which may still be an older one).
async fn condition_saying(
    t: &Sharded,
    c: &ControllerProcess,
    path: &str,
    (kind, name): (&str, &str),
    (type_, status): (&str, &str),
    says: impl Fn(&Value) -> bool,
) -> Value {
    let args = ["get", kind, name, "-o", "json"];
    let find = |o: &holdfast_e2e::KubectlOutput| -> Option<Value> {
        let obj: Value = serde_json::from_str(&o.stdout)
            .ok()
            .filter(|_| o.code == 0)?;
        obj["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|x| x["type"] == type_ && x["status"] == status && says(x))
            .cloned()
    };
    let out = t
        .until("consumer", path, &args, |o| find(o).is_some())
        .await
        .unwrap_or_else(|e| panic!("{kind}/{name} {type_}={status}: {e:#}\n{}", c.log()));
    find(&out).expect("condition")
}

/// The (reason, message) of `cond`.
fn said(cond: &Value) -> (&str, &str) {
    (
        cond["reason"].as_str().unwrap_or_default(),
        cond["message"].as_str().unwrap_or_default(),
    )
}

const RP_CONFIGMAPS: &str = r#"apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: config}
spec:
  resources:
  - {group: "", version: v1, resource: configmaps}
"#;

const RP_BAD_SELECTOR: &str = r#"apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: bad-selector}
spec: {resources: [{group: "", version: v1, resource: secrets, labelSelector: {matchExpressions: [{key: tier, operator: In}]}}]}
"#;

const ANCHOR_RULE: &str = r#"apiVersion: holdfast.dev/v1alpha1
kind: AnchorRule
metadata: {name: app-secrets}
spec:
  anchor: {group: "", version: v1, resource: configmaps}
  anchorLabels: {name: example.io/app}
  protects:
  - {group: "", version: v1, resource: secrets}
"#;

const CRITICAL_SERVICE: &str = r#"apiVersion: holdfast.dev/v1alpha1
kind: CriticalService
metadata: {name: registry}
spec:
  provider: {group: "", resource: serviceaccounts, namespace: default, name: registry}
  criteria:
  - type: Finalizer
    finalizer: {group: "", resource: configmaps, finalizerName: example.io/in-use}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_workspace_binding_holdfast_gets_its_protection_and_its_policies_status() {
    // With the webhook: deleting a CriticalService at the end is a DELETE the
    // holdfast workspace's configuration sends it (refused while it is not there).
    let (t, c) = setup_with_webhook().await;
    let a = t.workspace_binding("tenant-a", "root", true, &[]);
    let b = t.workspace_binding("tenant-b", "shard-1", true, &[]);
    // docs/kcp.md, consumer guide: the webhook's reads (a CriticalService's DELETE
    // needs to know whether its provider exists).
    for path in [&a, &b] {
        t.apply_k("consumer", path, "overlays/kcp/workspace/consumer");
    }
    let plain = t.workspace_binding(
        "plain",
        "root",
        false,
        &[("compute", COMPUTE, "compute.test.io")],
    );
    // On each shard, the consumer reads its configuration: label protection and
    // containment, calling the workspace's own route.
    for path in [&a, &b] {
        let lc = t.logical_cluster(path);
        let cfg = configuration(&t, &c, "consumer", path, |c| c.is_some()).await;
        let cfg = cfg.expect("present");
        assert_eq!(workspace_webhooks(&cfg), own_webhooks(&lc), "{path}");
        // Containment: namespace, CRD and APIBinding DELETEs of every namespace.
        let containment = &cfg["webhooks"][1];
        assert_eq!(containment["namespaceSelector"], serde_json::json!({}));
        assert_eq!(
            rules_of(&cfg, "containment.holdfast.dev"),
            vec![
                (
                    vec![String::new()],
                    vec!["namespaces".to_string()],
                    vec!["DELETE".to_string()]
                ),
                (
                    vec!["apiextensions.k8s.io".to_string()],
                    vec!["customresourcedefinitions".to_string()],
                    vec!["DELETE".to_string()]
                ),
                (
                    vec!["apis.kcp.io".to_string()],
                    vec!["apibindings".to_string()],
                    vec!["DELETE".to_string()]
                ),
            ]
        );
    }
    // A workspace that does not bind holdfast.dev gets nothing.
    assert_eq!(
        configuration(&t, &c, "platform", &plain, |c| c.is_none()).await,
        None
    );

    // Policies of each kind on the workspace's own types: Ready, Installed naming
    // the webhooks; an invalid one Invalid.
    for (path, shard) in [(&a, "root"), (&b, "shard-1")] {
        for manifest in [
            RP_CONFIGMAPS,
            ANCHOR_RULE,
            CRITICAL_SERVICE,
            RP_BAD_SELECTOR,
        ] {
            t.apply("consumer", path, manifest);
        }
        let lc = t.logical_cluster(path);
        let route = format!("/validate/kcp/{lc}");
        let mut want = own_webhooks(&lc);
        for i in 0..4 {
            want.push((format!("policies-{i}.holdfast.dev"), route.clone()));
        }
        let cfg = configuration(&t, &c, "consumer", path, |c| {
            c.is_some_and(|c| workspace_webhooks(c) == want)
        })
        .await
        .expect("present");
        // One entry per route (the policies narrow them differently).
        for (i, resource) in ["configmaps", "namespaces", "secrets", "serviceaccounts"]
            .into_iter()
            .enumerate()
        {
            assert_eq!(
                rules_of(&cfg, &format!("policies-{i}.holdfast.dev")),
                vec![(
                    vec![String::new()],
                    vec![resource.to_string()],
                    vec!["DELETE".to_string()]
                )],
                "{shard}"
            );
        }
        let home = t.logical_cluster(HOLDFAST);
        for (kind, name, resources, hooks) in [
            (
                "resourceprotection",
                "config",
                "configmaps",
                "policies-0.holdfast.dev",
            ),
            (
                "anchorrule",
                "app-secrets",
                "secrets",
                "policies-2.holdfast.dev",
            ),
            (
                "criticalservice",
                "registry",
                // (guarding itself through the holdfast workspace's configuration)
                "criticalservices.holdfast.dev, namespaces, serviceaccounts",
                &format!(
                    "holdfast.dev.policies.holdfast.dev (workspace {home}), \
                     policies-1.holdfast.dev, policies-3.holdfast.dev"
                ),
            ),
        ] {
            condition(&t, &c, path, (kind, name), ("Ready", "True")).await;
            let message = format!(
                "DELETEs of {resources} reach webhook(s) {hooks} of ValidatingWebhookConfiguration holdfast"
            );
            let installed =
                condition_saying(&t, &c, path, (kind, name), ("Installed", "True"), |x| {
                    x["message"] == message.as_str()
                })
                .await;
            assert_eq!(
                said(&installed),
                ("WebhookInstalled", message.as_str()),
                "{shard} {kind}/{name}"
            );
        }
        let invalid = condition(
            &t,
            &c,
            path,
            ("resourceprotection", "bad-selector"),
            ("Invalid", "True"),
        )
        .await;
        assert_eq!(
            said(&invalid),
            (
                "InvalidSelector",
                "spec.resources[0].labelSelector: operator In on key \"tier\" needs at least one value"
            ),
            "{shard}"
        );
        let ready = condition(
            &t,
            &c,
            path,
            ("resourceprotection", "bad-selector"),
            ("Ready", "False"),
        )
        .await;
        assert_eq!(said(&ready).0, "Invalid");
        // And a Warning Event in the workspace, as on Kubernetes (the export claims
        // Events).
        let events = ["get", "events.events.k8s.io", "-n", "default", "-o", "json"];
        let warned = |o: &holdfast_e2e::KubectlOutput| {
            serde_json::from_str::<Value>(&o.stdout)
                .ok()
                .is_some_and(|list| {
                    list["items"].as_array().into_iter().flatten().any(|e| {
                        e["type"] == "Warning"
                            && e["reason"] == "InvalidSelector"
                            && e["regarding"]["kind"] == "ResourceProtection"
                            && e["regarding"]["name"] == "bad-selector"
                            && e["note"].as_str().is_some_and(|n| {
                                n.contains("operator In on key \"tier\" needs at least one value")
                            })
                    })
                })
        };
        t.until("consumer", path, &events, warned)
            .await
            .unwrap_or_else(|e| panic!("{shard}: {e:#}\ncontroller: {}", c.log()));
    }

    // Deleting the policies leaves the workspace's own webhooks only.
    for kind in ["resourceprotection", "anchorrule", "criticalservice"] {
        let out = t.kubectl("consumer", &a, &["delete", kind, "--all"]);
        assert_eq!(out.code, 0, "{out:?}");
    }
    let lc = t.logical_cluster(&a);
    configuration(&t, &c, "consumer", &a, |c| {
        c.is_some_and(|c| workspace_webhooks(c) == own_webhooks(&lc))
    })
    .await;
    // Unbinding: `unbinding_holdfast_removes_its_configuration`.
}

/// The platform team's provider workspace `root:kube` (shard-1) exporting
/// `deployments.apps` as APIExport `kubernetes`, bindable by anyone, not binding
/// holdfast.dev.
fn kubernetes_provider(t: &Sharded) -> String {
    let path = "root:kube";
    t.provider_workspace(path, "shard-1");
    t.apply(
        "provider",
        path,
        &holdfast_e2e::kcp::schema("apps", "deployments", "Deployment"),
    );
    t.apply(
        "provider",
        path,
        &holdfast_e2e::kcp::export("kubernetes", &["v1.deployments.apps"]),
    );
    t.apply("provider", path, &bindable("kubernetes"));
    path.to_string()
}

const RP_DEPLOYMENTS: &str = r#"apiVersion: holdfast.dev/v1alpha1
kind: ResourceProtection
metadata: {name: deployments}
spec:
  resources:
  - {group: apps, version: v1, resource: deployments}
"#;

/// The configuration holdfast installs in a workspace is owned by the workspace's
/// binding to holdfast.dev: when the consumer unbinds, holdfast can no longer reach
/// the workspace, and kcp's garbage collector removes the configuration, so no
/// webhook of holdfast keeps judging (or, with holdfast gone, blocking) its DELETEs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unbinding_holdfast_removes_its_configuration() {
    // (The webhook judges the unbinding: APIBinding containment, which lists the
    // workspace's policies with the consumer overlay's grant.)
    let (t, c) = setup_with_webhook().await;
    let path = t.workspace_binding("leaving", "shard-1", true, &[]);
    t.apply_k("consumer", &path, "overlays/kcp/workspace/consumer");
    let cfg = configuration(&t, &c, "consumer", &path, |c| c.is_some())
        .await
        .expect("present");
    let binding = t.kubectl(
        "consumer",
        &path,
        &["get", "apibinding", "holdfast", "-o=json"],
    );
    assert_eq!(binding.code, 0, "{binding:?}");
    let binding: Value = serde_json::from_str(&binding.stdout).expect("binding");
    assert_eq!(
        cfg["metadata"]["ownerReferences"],
        serde_json::json!([{
            "apiVersion": "apis.kcp.io/v1alpha2",
            "kind": "APIBinding",
            "name": "holdfast",
            "uid": binding["metadata"]["uid"],
        }]),
        "owned by the binding"
    );
    // A configuration whose owner reference was removed by hand gets it back.
    let out = t.kubectl(
        "consumer",
        &path,
        &[
            "patch",
            "validatingwebhookconfiguration",
            "holdfast",
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/metadata/ownerReferences"}]"#,
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    configuration(&t, &c, "consumer", &path, |c| {
        c.is_some_and(|c| c["metadata"]["ownerReferences"] == cfg["metadata"]["ownerReferences"])
    })
    .await;
    // Unbinding: the configuration goes with the binding.
    let out = t.kubectl("consumer", &path, &["delete", "apibinding", "holdfast"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        configuration(&t, &c, "consumer", &path, |c| c.is_none()).await,
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_type_from_a_provider_is_protected_once_the_provider_binds_holdfast() {
    let (t, c) = setup().await;
    let kube = kubernetes_provider(&t);
    let kube_lc = t.logical_cluster(&kube);
    let a = t.workspace_binding(
        "tenant-a",
        "root",
        true,
        &[("kubernetes", &kube, "kubernetes")],
    );
    t.apply("consumer", &a, RP_DEPLOYMENTS);
    let want = format!(
        "deployments.apps comes from APIExport kubernetes in workspace root:kube (logical \
         cluster {kube_lc}), whose workspace does not bind holdfast.dev with its claims \
         accepted, and kcp admits its DELETEs only through that workspace's webhook \
         configurations: the provider must bind holdfast.dev in root:kube and accept its \
         claims (docs/kcp.md, provider guide)"
    );
    let rp = ("resourceprotection", "deployments");
    let installed = condition(&t, &c, &a, rp, ("Installed", "False")).await;
    assert_eq!(said(&installed), ("ExportWorkspaceNotBound", want.as_str()));
    let ready = condition(&t, &c, &a, rp, ("Ready", "False")).await;
    assert_eq!(
        said(&ready),
        (
            "ExportWorkspaceNotBound",
            format!("the policy is not enforced: {want}").as_str()
        )
    );
    // Nothing in the provider workspace yet.
    assert_eq!(
        configuration(&t, &c, "provider", &kube, |c| c.is_none()).await,
        None
    );

    // The provider binds holdfast.dev: its configuration routes the consumer's
    // type through its export's webhook, and the policy becomes Ready untouched.
    t.apply("provider", &kube, holdfast_binding());
    // Besides: label protection of the objects the holdfast-binding consumer gets
    // from the export (kcp calls only this workspace's configurations for them).
    let cfg = configuration(&t, &c, "provider", &kube, |c| {
        c.is_some_and(|c| workspace_webhooks(c).len() == 4)
    })
    .await
    .expect("present");
    let mut want_hooks = own_webhooks(&kube_lc);
    for hook in ["policies", "delete-label-0"] {
        want_hooks.push((
            format!("kubernetes.{hook}.holdfast.dev"),
            format!("/validate/kcp/{kube_lc}/kubernetes"),
        ));
    }
    assert_eq!(workspace_webhooks(&cfg), want_hooks);
    let ops = |op: &str| {
        (
            vec!["apps".to_string()],
            vec!["deployments".to_string()],
            vec![op.to_string()],
        )
    };
    let mut update = ops("UPDATE");
    update.1.push("deployments/*".to_string());
    assert_eq!(
        rules_of(&cfg, "kubernetes.delete-label-0.holdfast.dev"),
        vec![ops("DELETE"), ops("CREATE"), update]
    );
    assert_eq!(
        rules_of(&cfg, "kubernetes.policies.holdfast.dev"),
        vec![(
            vec!["apps".to_string()],
            vec!["deployments".to_string()],
            vec!["DELETE".to_string()]
        )]
    );
    let a_lc = t.logical_cluster(&a);
    assert_eq!(
        cfg["metadata"]["annotations"]["holdfast.dev/rules"],
        format!("{a_lc}/deployments").as_str()
    );
    condition(&t, &c, &a, rp, ("Ready", "True")).await;
    let installed = condition(&t, &c, &a, rp, ("Installed", "True")).await;
    assert_eq!(
        said(&installed),
        (
            "WebhookInstalled",
            format!(
                "DELETEs of deployments.apps reach webhook(s) kubernetes.policies.holdfast.dev \
                 (workspace {kube_lc}) of ValidatingWebhookConfiguration holdfast"
            )
            .as_str()
        )
    );
    // The consumer's own configuration routes nothing for it (kcp would not call it).
    let own = configuration(&t, &c, "consumer", &a, |c| c.is_some())
        .await
        .expect("present");
    assert_eq!(workspace_webhooks(&own), own_webhooks(&a_lc));

    // The policy deleted: the provider's export webhook goes; its own webhooks and
    // the label protection of the consumer's deployments stay.
    let out = t.kubectl(
        "consumer",
        &a,
        &["delete", "resourceprotection", "deployments"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let mut want_hooks = own_webhooks(&kube_lc);
    want_hooks.push((
        "kubernetes.delete-label-0.holdfast.dev".to_string(),
        format!("/validate/kcp/{kube_lc}/kubernetes"),
    ));
    configuration(&t, &c, "provider", &kube, |c| {
        c.is_some_and(|c| workspace_webhooks(c) == want_hooks)
    })
    .await;
}

const REGISTRY_ACCOUNT: &str =
    "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: registry, namespace: default}\n";

/// kcp admits the DELETE of a CriticalService (a type the workspace binds from
/// holdfast.dev) through the holdfast workspace's configurations only (kcp-facts
/// 12): the controller installs one there while a CriticalService exists, and the
/// CriticalService cannot be deleted while its provider exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_critical_service_cannot_be_deleted_while_its_provider_exists() {
    let (t, c) = setup_with_webhook().await;
    let path = t.workspace_binding("guarded", "shard-1", true, &[]);
    // docs/kcp.md, consumer guide: the webhook's reads in the workspace.
    t.apply_k("consumer", &path, "overlays/kcp/workspace/consumer");
    let home = t.logical_cluster(HOLDFAST);
    let hook = holdfast_shared::webhookconfig::export_policies_webhook("holdfast.dev");

    // No CriticalService yet: the holdfast workspace's configuration holds only the
    // label protection of holdfast's own objects (kcp admits their DELETEs there).
    let route = format!("/validate/kcp/{home}/holdfast.dev");
    let label = (
        "holdfast.dev.delete-label-0.holdfast.dev".to_string(),
        route.clone(),
    );
    let cfg = configuration(&t, &c, "platform", HOLDFAST, |c| c.is_some())
        .await
        .expect("present");
    assert_eq!(workspace_webhooks(&cfg), std::slice::from_ref(&label));
    t.apply("consumer", &path, REGISTRY_ACCOUNT);
    t.apply("consumer", &path, CRITICAL_SERVICE);
    let with_guard = vec![(hook.clone(), route.clone()), label.clone()];
    let cfg = configuration(&t, &c, "platform", HOLDFAST, |c| {
        c.is_some_and(|c| workspace_webhooks(c) == with_guard)
    })
    .await
    .expect("present");
    assert_eq!(
        rules_of(&cfg, &hook),
        vec![(
            vec!["holdfast.dev".to_string()],
            vec!["criticalservices".to_string()],
            vec!["DELETE".to_string()]
        )]
    );

    // Refused while the provider exists, with the reason (once kcp enforces the
    // configuration: it comes back from the cache server, kcp-facts 29).
    let delete = ["delete", "criticalservice", "registry", "--dry-run=server"];
    t.until("consumer", &path, &delete, |o| o.code != 0)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", c.log()));
    let delete = ["delete", "criticalservice", "registry"];
    let out = t
        .until("consumer", &path, &delete, |o| o.code != 0)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", c.log()));
    assert!(
        out.stderr.contains("admission webhook")
            && out.stderr.contains(
                "CriticalService registry cannot be deleted while its provider serviceaccounts default/registry exists"
            ),
        "{out:?}"
    );
    assert!(t.exists("consumer", &path, &["criticalservice", "registry"]));

    // The provider goes first (nothing holds the finalizer: its criteria are met),
    // then the CriticalService may go, and the guard with it.
    let out = t.kubectl(
        "consumer",
        &path,
        &["delete", "serviceaccount", "registry", "-n", "default"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = t
        .until("consumer", &path, &delete, |o| o.code == 0)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", c.log()));
    assert!(out.stdout.contains("deleted"), "{out:?}");
    configuration(&t, &c, "platform", HOLDFAST, |c| {
        c.is_some_and(|c| workspace_webhooks(c) == [label.clone()])
    })
    .await;
}
