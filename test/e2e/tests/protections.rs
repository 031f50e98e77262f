//! The other protections end to end, with the real controller installing the
//! configuration and the real webhook deciding: ResourceProtection (the Karmada test
//! plan for a CRD and its instances), enforcement modes, namespace containment,
//! AnchorRule (the composite stories) and CriticalService (the bulk-delete story).

use holdfast_e2e::rbac;
use holdfast_e2e::steps::{allowed_until, refused_until};
use holdfast_e2e::{
    Env, KubectlOutput,
    controller::{ControllerProcess, start_controller, wait_configuration},
    http_get,
    steps::words,
};
use serde_json::Value;
use std::time::{Duration, Instant};

async fn full_stack() -> (Env, ControllerProcess) {
    let mut env = holdfast_e2e::steps::sim_with_crds().await;
    env.start_webhook(&[]).await.expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let mut c = start_controller(&env, "controller", port, &[]).expect("controller");
    c.wait_ready(30).await.expect("controller ready");
    (env, c)
}

/// Asserts kubectl's answer `out` is a refusal containing `text` (see
/// [`KubectlOutput::refused_with`]); fails printing it.
fn refused_with(out: &KubectlOutput, text: &str) {
    assert!(out.refused_with(text), "{out:?}");
}

/// [`full_stack`] with the CRDs `crds` applied and `resource` served.
async fn stack_serving(crds: &str, resource: &str) -> (Env, ControllerProcess) {
    let (env, c) = full_stack().await;
    env.apply_crds(crds).expect("crds");
    env.wait_served(&[resource]).await;
    (env, c)
}

/// Waits until `kubectl <line>` fails; asserts that failure is a refusal
/// containing `text`.
async fn refused_once_failing(env: &Env, line: &str, text: &str) {
    let out = env.until_failed(&words(line)).await;
    refused_with(&out, text);
}

/// Asserts `out` is the refusal of one of `webhooks` (each refuses alike when
/// several match; the API server returns whichever answers first; kubectl may
/// print a warning first), its message holding `text`.
fn refused_by_one_of(out: &KubectlOutput, webhooks: &[&str], text: &str) {
    assert!(
        out.code == 1
            && webhooks.iter().any(|w| out.stderr.contains(&format!(
                "Error from server (Forbidden): {}",
                holdfast_e2e::denied_by(w, "holdfast: ")
            )))
            && out.stderr.contains(text),
        "{out:?}\nexpected a refusal by one of {webhooks:?} holding {text:?}"
    );
}

/// The `policies-<i>` webhooks, as the controller splits the policies' routes.
const POLICIES_0: &str = "policies-0.holdfast.dev";
const POLICIES_1: &str = "policies-1.holdfast.dev";
const CONTAINMENT: &str = "containment.holdfast.dev";

/// Waits until the live configuration sends DELETEs of `resource` to the webhook.
async fn covered(env: &Env, group: &str, resource: &str) {
    wait_configuration(env, Duration::from_secs(15), |cfg| {
        cfg.is_some_and(|c| {
            c["webhooks"].as_array().into_iter().flatten().any(|w| {
                w["rules"].as_array().into_iter().flatten().any(|r| {
                    r["apiGroups"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|g| g == group)
                        && r["resources"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|x| x == resource)
                        && r["operations"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|o| o == "DELETE")
                })
            })
        })
    })
    .await
    .expect("configuration covers the resource");
}

const WIDGET_PROTECTION: &str = holdfast_e2e::fixtures::WIDGET_PROTECTION;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resource_protection_karmada_plan_for_a_crd() {
    let (env, _c) = stack_serving(&holdfast_e2e::fixtures::widget_crd(), "widgets").await;
    let ns = env.default_namespace().expect("namespace");
    for w in ["w1", "w2"] {
        env.apply(&format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: {w}, namespace: {ns}}}\n"
        ))
        .expect("widget");
    }
    // No protection: deletion allowed.
    let out = env.attempt(&["delete", "widget", "w1"]);
    assert_eq!(out.code, 0, "{out:?}");

    // With protection: instances and the CRD itself are refused, --force too.
    env.apply(WIDGET_PROTECTION).expect("protection");
    covered(&env, "example.com", "widgets").await;
    let w2 = format!("holdfast: Widget {ns}/w2 is protected by ResourceProtection/widgets");
    // The CRD's DELETE reaches containment too, which refuses it alike.
    for (line, webhooks, refusal) in [
        ("delete widget w2", &[POLICIES_1][..], w2.as_str()),
        (
            "delete widget w2 --force --grace-period=0",
            &[POLICIES_1],
            w2.as_str(),
        ),
        (
            "delete crd widgets.example.com",
            &[POLICIES_0, CONTAINMENT],
            "holdfast: CustomResourceDefinition widgets.example.com is protected by ResourceProtection/widgets",
        ),
    ] {
        let out = env.until_failed(&words(line)).await;
        refused_by_one_of(&out, webhooks, refusal);
    }

    // Protection removed: allowed again.
    env.run(&["delete", "resourceprotection", "widgets"]);
    allowed_until(&env, &["delete", "widget", "w2"]).await;
    env.kubectl_until(&["delete", "crd", "widgets.example.com"], 15, |o| {
        o.code == 0
    })
    .await
    .expect("crd deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn enforcement_modes_warn_and_audit() {
    let (env, _c) = full_stack().await;
    let ns = env.default_namespace().expect("namespace");
    for name in ["warned", "audited", "enforced", "both"] {
        env.run(&["create", "configmap", name, "--from-literal=a=b"]);
    }
    // "both" is selected by a Warn and an Enforce policy: Enforce wins.
    for (policy, mode, object) in [
        ("warned", "Warn", "warned"),
        ("audited", "Audit", "audited"),
        ("enforced", "Enforce", "enforced"),
        ("both-warn", "Warn", "both"),
        ("both-enforce", "Enforce", "both"),
    ] {
        env.apply(&format!(
            "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {policy}}}\n\
             spec:\n  enforcement: {mode}\n  resources:\n  - {{group: \"\", version: v1, resource: configmaps, namespace: {ns}, names: [{object}]}}\n"
        ))
        .expect("protection");
    }
    covered(&env, "", "configmaps").await;
    refused_once_failing(
        &env,
        "delete configmap enforced --dry-run=server",
        &format!("holdfast: ConfigMap {ns}/enforced is protected by ResourceProtection/enforced"),
    )
    .await;
    let out = env.attempt(&["delete", "configmap", "both"]);
    assert!(
        out.refused_with(&format!(
            "holdfast: ConfigMap {ns}/both is protected by ResourceProtection/both-enforce"
        )),
        "Enforce beats Warn on one object: {out:?}"
    );
    assert!(
        env.exists(&["configmap", "both"]).expect("kubectl"),
        "still there"
    );
    // Warn: allowed, and kubectl prints the admission warning.
    let out = env.attempt(&["delete", "configmap", "warned"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "Warning: holdfast: ConfigMap {ns}/warned is protected by ResourceProtection/warned"
        )),
        "{out:?}"
    );
    // Audit: allowed silently, counted.
    let out = env.attempt(&["delete", "configmap", "audited"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!out.stderr.contains("Warning"), "{out:?}");
    let port = env.webhook.as_ref().map(|w| w.probe_port).expect("probe");
    let (_, metrics) = http_get(port, "/metrics").await.expect("metrics");
    assert!(
        metrics.contains(r#"holdfast_webhook_audited_total{operation="DELETE"} 1"#),
        "{metrics}"
    );
    assert!(
        env.webhook_log()
            .contains(&format!("audit: holdfast: ConfigMap {ns}/audited")),
        "{}",
        env.webhook_log()
    );
    // Both leave an Event on the object.
    let warned = env
        .wait_events("DeletionWarned", "warned", 30)
        .await
        .expect("DeletionWarned");
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0]["type"], "Warning", "{warned:?}");
    assert_eq!(warned[0]["regarding"]["kind"], "ConfigMap", "{warned:?}");
    let audited = env
        .wait_events("DeletionAudited", "audited", 30)
        .await
        .expect("DeletionAudited");
    assert_eq!(audited.len(), 1, "{audited:?}");
    assert_eq!(audited[0]["regarding"]["kind"], "ConfigMap", "{audited:?}");
    assert!(
        audited[0]["note"]
            .as_str()
            .is_some_and(|n| n.contains("is protected by ResourceProtection/audited")),
        "{audited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn namespace_containment_keeps_the_namespace_whole() {
    let (env, _c) = full_stack().await;
    let shop = env.namespace("shop").expect("namespace");
    env.apply(&format!("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data, namespace: {shop}, labels: {{holdfast.dev/protected: \"true\"}}}}\nspec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n"))
        .expect("pvc");
    for cm in ["a", "b"] {
        env.run(&words(&format!(
            "create configmap {cm} -n {shop} --from-literal=k=v"
        )));
    }
    let holds = format!(
        "Namespace {shop} holds objects that are protected from deletion: PersistentVolumeClaim {shop}/data (label)"
    );
    refused_once_failing(
        &env,
        &format!("delete namespace {shop}"),
        &format!("holdfast: {holds}"),
    )
    .await;
    // Nothing inside was deleted and the namespace is not terminating.
    let out = env.attempt(&["get", "configmaps", "-n", &shop, "-o", "name"]);
    assert!(
        out.stdout.contains("configmap/a") && out.stdout.contains("configmap/b"),
        "{out:?}"
    );
    let out = env.attempt(&["get", "namespace", &shop, "-o", "jsonpath={.status.phase}"]);
    assert_eq!(out.stdout, "Active");
    // The controller marks the namespace (namespace DELETEs reach containment by
    // the mark); unmarking it while it holds something protected is refused, so it
    // cannot be unmarked and deleted before the controller marks it again.
    env.kubectl_until(
        &[
            "get",
            "namespace",
            &shop,
            "-o",
            "jsonpath={.metadata.labels.holdfast\\.dev/contains-protected}",
        ],
        30,
        |o| o.stdout == "true",
    )
    .await
    .expect("namespace marked");
    let kept = format!(
        "holdfast: {holds} (policy: containment), so its label \
         holdfast.dev/contains-protected cannot be removed or changed: it routes the \
         namespace's DELETE to holdfast."
    );
    for change in [
        "holdfast.dev/contains-protected-",
        "holdfast.dev/contains-protected=no --overwrite",
    ] {
        env.refuses_with(&words(&format!("label namespace {shop} {change}")), &kept);
    }
    // Break-glass on the protected object lifts containment too (a server-side dry
    // run: the namespace is not deleted yet).
    env.run(&words(&format!(
        "annotate pvc data -n {shop} holdfast.dev/skip-protection=true"
    )));
    allowed_until(&env, &["delete", "namespace", &shop, "--dry-run=server"]).await;
    env.run(&words(&format!(
        "annotate pvc data -n {shop} holdfast.dev/skip-protection-"
    )));
    env.kubectl_until(
        &["delete", "namespace", &shop, "--dry-run=server"],
        30,
        |o| o.refused_with(&holds),
    )
    .await
    .expect("refused again without break-glass");
    // Lift the protection: the namespace goes.
    env.run(&words(&format!(
        "label pvc data -n {shop} holdfast.dev/protected-"
    )));
    env.kubectl_until(&["delete", "namespace", &shop, "--wait=false"], 15, |o| {
        o.code == 0
    })
    .await
    .expect("namespace deleted");
}

const ANCHOR_RULE: &str = holdfast_e2e::fixtures::APPCAT_ANCHOR_RULE;

fn composite(toggle: &str) -> String {
    format!(
        "apiVersion: vshn.appcat.vshn.io/v1\nkind: XVSHNPostgreSQL\nmetadata: {{name: pg-1}}\nspec: {{parameters: {{backup: {{deletionProtection: {toggle}}}}}}}\n"
    )
}

/// A namespace of the test's own standing for a composite's instance namespace
/// (`name` on a simulator, `name-<8 hex digits>` on a cluster), labelled with
/// the composite `composite` it belongs to.
fn instance_namespace(env: &Env, name: &str, composite: &str) -> String {
    let ns = env.namespace(name).expect("namespace");
    env.run(&[
        "label",
        "namespace",
        &ns,
        &format!("appcat.vshn.io/composite-name={composite}"),
    ]);
    ns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn anchor_rule_composite_stories() {
    let (env, _c) = stack_serving(&holdfast_e2e::fixtures::appcat_crds(), "xvshnpostgresqls").await;
    env.apply(ANCHOR_RULE).expect("anchor rule");
    env.wait_served(&["xobjectbuckets"]).await;
    env.apply(&composite("true")).expect("composite");
    let ns = instance_namespace(&env, "vshn-postgresql-pg-1", "pg-1");
    for pvc in ["data-0", "data-1"] {
        env.apply(&format!("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {pvc}, namespace: {ns}}}\nspec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n"))
            .expect("pvc");
    }
    env.apply("apiVersion: appcat.vshn.io/v1\nkind: XObjectBucket\nmetadata: {name: pg-1-backup, labels: {appcat.vshn.io/composite-name: pg-1}}\n")
        .expect("bucket");
    covered(&env, "appcat.vshn.io", "xobjectbuckets").await;
    covered(&env, "", "persistentvolumeclaims").await;

    let data_0_dry_run = format!("delete pvc data-0 -n {ns} --dry-run=server");
    let protected_by = "is protected while its anchor xvshnpostgresqls.vshn.appcat.vshn.io pg-1 exists and has .spec.parameters.backup.deletionProtection=true";
    // The namespace's DELETE reaches containment too, which refuses it alike.
    for (args, webhooks) in [
        (words(&data_0_dry_run), &[POLICIES_1][..]),
        (
            vec!["delete", "xobjectbucket", "pg-1-backup", "--dry-run=server"],
            &[POLICIES_0],
        ),
        (
            vec!["delete", "namespace", &ns, "--dry-run=server"],
            &[POLICIES_0, CONTAINMENT],
        ),
    ] {
        let out = env
            .kubectl_until(&args, 15, |o| o.code != 0)
            .await
            .expect("refused");
        refused_by_one_of(&out, webhooks, protected_by);
    }
    // The override label on exactly one PVC (a corrupted Galera node, say).
    env.run(&words(&format!(
        "label pvc data-1 -n {ns} holdfast.dev/allow-deletion=true"
    )));
    let out = env.attempt(&["delete", "pvc", "data-1", "-n", &ns]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = env.attempt(&words(&data_0_dry_run));
    assert!(
        out.refused_with(protected_by),
        "the override is for exactly that object: {out:?}"
    );

    // Toggle off: deletable; back on: protected again.
    env.apply(&composite("false")).expect("toggle off");
    let backup_dry_run = words("delete xobjectbucket pg-1-backup --dry-run=server");
    allowed_until(&env, &backup_dry_run).await;
    // A toggle that is not a boolean counts as absent: the default (true) protects.
    env.apply(&composite("\"off\""))
        .expect("toggle not a boolean");
    refused_until(&env, &backup_dry_run, protected_by).await;
    // Back on: protected again.
    env.apply(&composite("true")).expect("toggle on");
    refused_until(&env, &backup_dry_run, protected_by).await;

    // The anchor goes: everything is deletable (no deadlock).
    env.run(&["delete", "xvshnpostgresql", "pg-1"]);
    env.kubectl_until(&["delete", "xobjectbucket", "pg-1-backup"], 10, |o| {
        o.code == 0
    })
    .await
    .expect("bucket deleted");
    allowed_until(&env, &["delete", "namespace", &ns, "--wait=false"]).await;
}

const FINALIZER: &str = "my.crd.group/super-important";

/// The finalizer-processing "Deployment" (`finalizer-deployment` in namespace
/// `ns`): while the Deployment exists, it removes the finalizer from instances
/// being deleted.
fn finalizer_controller(
    kubeconfig: std::path::PathBuf,
    ns: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let run = |args: &[&str]| {
        std::process::Command::new("kubectl")
            .env("KUBECONFIG", &kubeconfig)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let alive = run(&[
            "get",
            "deployment",
            "finalizer-deployment",
            "-n",
            ns,
            "-o",
            "json",
        ])
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .is_some_and(|d| d["metadata"]["deletionTimestamp"].is_null());
        if alive && let Some(list) = run(&["get", "coolresources", "-o", "json"]) {
            let list: Value = serde_json::from_str(&list).unwrap_or(Value::Null);
            for item in list["items"].as_array().into_iter().flatten() {
                let deleting = !item["metadata"]["deletionTimestamp"].is_null();
                let holds = item["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == FINALIZER));
                if deleting && holds {
                    let name = item["metadata"]["name"].as_str().unwrap_or_default();
                    let _ = run(&[
                        "patch",
                        "coolresource",
                        name,
                        "--type=merge",
                        "-p",
                        r#"{"metadata":{"finalizers":null}}"#,
                    ]);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn critical_service_bulk_delete_converges_in_order() {
    let (env, _c) = stack_serving(&holdfast_e2e::fixtures::cool_crd(), "coolresources").await;
    let ns = env.namespace("finalizer-namespace").expect("namespace");
    env.run(&words(&format!(
        "create deployment finalizer-deployment -n {ns} --image=registry.example/finalizer:1"
    )));
    env.apply(&format!("apiVersion: my.crd.group/v1\nkind: CoolResource\nmetadata: {{name: some-instance, finalizers: [{FINALIZER}]}}\n"))
        .expect("instance");
    env.apply(&holdfast_e2e::fixtures::finalizer_critical_service(&ns))
        .expect("critical service");
    covered(&env, "apps", "deployments").await;
    covered(&env, "holdfast.dev", "criticalservices").await;
    // The provider is protected before the bulk delete starts.
    let out = env
        .kubectl_until(
            &words(&format!(
                "delete deployment finalizer-deployment -n {ns} --dry-run=server"
            )),
            15,
            |o| o.code != 0,
        )
        .await
        .expect("provider refused");
    assert!(
        out.stderr.contains(
            "1 coolresources.my.crd.group still carries finalizer my.crd.group/super-important"
        ),
        "{out:?}"
    );

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fin = {
        let (kubeconfig, stop, ns) = (env.kubeconfig.clone(), stop.clone(), ns.clone());
        std::thread::spawn(move || finalizer_controller(kubeconfig, &ns, stop))
    };

    // Every DELETE at once, in an order from a seed, each retried like a client.
    let mut deletes: Vec<Vec<&str>> = vec![
        words("delete criticalservice for-finalizer-deployment --wait=false"),
        vec!["delete", "namespace", &ns, "--wait=false"],
        vec![
            "delete",
            "deployment",
            "finalizer-deployment",
            "-n",
            &ns,
            "--wait=false",
        ],
        words("delete crd coolresources.my.crd.group --wait=false"),
        vec!["delete", "coolresource", "some-instance", "--wait=false"],
    ];
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as usize)
        .unwrap_or(7);
    for i in (1..deletes.len()).rev() {
        deletes.swap(i, (seed / (i + 1)) % (i + 1));
    }
    eprintln!("delete order (seed {seed}): {deletes:?}");
    let started = Instant::now();
    let mut pending: Vec<Vec<&str>> = deletes.clone();
    // Rounds in which each object was first seen gone. Within a round, the objects
    // expected to go last are checked first, so two that vanish between checks tie
    // instead of appearing in the wrong order.
    let mut gone: Vec<(&str, usize)> = Vec::new();
    let watched: [(&str, Vec<&str>); 5] = [
        (
            "criticalservice",
            vec!["get", "criticalservice", "for-finalizer-deployment"],
        ),
        ("namespace", vec!["get", "namespace", &ns]),
        (
            "deployment",
            vec!["get", "deployment", "finalizer-deployment", "-n", &ns],
        ),
        ("crd", vec!["get", "crd", "coolresources.my.crd.group"]),
        ("instance", vec!["get", "coolresource", "some-instance"]),
    ];
    // A namespace whose first attempts were refused waits for kube-controller-manager's
    // namespace controller to try again, after a per-namespace backoff that doubles up
    // to 60 s: on a real cluster the namespace may go a minute after its last blocker.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut round = 0;
    while gone.len() < watched.len() {
        assert!(
            Instant::now() < deadline,
            "stuck (seed {seed}): pending {pending:?}, gone {gone:?}\nnamespace: {:?}\nwebhook: {}",
            env.attempt(&["get", "namespace", &ns, "-o", "jsonpath={.status}"]),
            env.webhook_log()
        );
        round += 1;
        let mut still = Vec::new();
        for args in pending {
            let out = env.attempt(&args);
            // Done when it passed or the object is gone; a refusal is asked again
            // (a refusal may quote the API server's own "NotFound" for something else).
            if out.code != 0 && !out.is_not_found() {
                still.push(args);
            }
        }
        pending = still;
        for (what, args) in &watched {
            if !gone.iter().any(|g| g.0 == *what) && !env.exists(&args[1..]).expect("kubectl get") {
                eprintln!("{what} gone after {:?} (round {round})", started.elapsed());
                gone.push((what, round));
            }
        }
        // Only the namespace left: kube-controller-manager's namespace controller,
        // refused while the provider stood, retries after a backoff that doubles
        // with each refusal. A change to the namespace queues it again at once, as
        // an operator would prompt it; the order asserted below is unchanged.
        if gone.len() + 1 == watched.len() && !gone.iter().any(|g| g.0 == "namespace") {
            let _ = env.attempt(&[
                "annotate",
                "namespace",
                &ns,
                "--overwrite",
                &format!("e2e.holdfast.dev/nudge={round}"),
            ]);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    fin.join()
        .expect("the finalizer controller thread panicked");
    let at = |w: &str| gone.iter().find(|g| g.0 == w).map(|g| g.1).expect("gone");
    for (first, then, what) in [
        (
            "instance",
            "deployment",
            "instance finalized before the provider went",
        ),
        ("crd", "deployment", "CRD gone before the provider"),
        ("deployment", "criticalservice", "CriticalService last"),
        ("deployment", "namespace", "namespace after its provider"),
    ] {
        assert!(at(first) <= at(then), "{what} (seed {seed}): {gone:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn break_glass_needs_the_bypass_permission_and_leaves_events() {
    let mut env = Env::start().await.expect("env");
    let ns = env.default_namespace().expect("namespace");
    // Developers and leads, in groups of the test's own (a cluster may know groups
    // named devs and leads already), hold nothing the cluster's RBAC does not
    // grant: both edit ConfigMaps, leads may also bypass protection.
    let devs = rbac::own_name("devs");
    let leads = rbac::own_name("leads");
    let dev = env.test_user("dev", &[devs.as_str()]).expect("dev");
    let lead = env.test_user("lead", &[leads.as_str()]).expect("lead");
    env.grant_cluster(
        "edit-configmaps",
        &[rbac::group(&devs), rbac::group(&leads)],
        &[rbac::rule(&["*"], &[""], &["configmaps"])],
    )
    .expect("grant");
    env.grant_cluster("bypass", &[rbac::group(&leads)], &[rbac::bypass()])
        .expect("grant");
    env.install_crds().expect("crds");
    // One window for the whole test: four refused retries make exactly one Event
    // however slowly kubectl runs.
    env.start_webhook(&["--strict", "--event-window-seconds", "3600"])
        .await
        .expect("webhook");
    env.wait_webhook_ready().await.expect("ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let mut c = start_controller(&env, "controller", port, &["--strict"]).expect("controller");
    c.wait_ready(30).await.expect("controller ready");
    // The strict configuration is in place, not merely some configuration.
    wait_configuration(&env, Duration::from_secs(30), |cfg| {
        cfg.is_some_and(|c| {
            holdfast_e2e::controller::webhook_names(c)
                .iter()
                .any(|n| n == "strict-label-0.holdfast.dev")
        })
    })
    .await
    .expect("strict configuration installed");
    for name in ["db", "other"] {
        env.run(&["create", "configmap", name, "--from-literal=a=b"]);
        env.run(&["label", "configmap", name, "holdfast.dev/protected=true"]);
    }
    let as_dev = |args: &[&str]| env.kubectl_by(&dev, args).expect("kubectl");
    let as_lead = |args: &[&str]| env.kubectl_by(&lead, args).expect("kubectl");
    // Strict configuration in place: a developer cannot lift protection...
    let out = env
        .until_failed(&["label", "configmap", "db", "holdfast.dev/protected-"])
        .await;
    assert!(out.stderr.contains("strict mode is on"), "{out:?}");
    let out = as_dev(&words(
        "annotate configmap db holdfast.dev/skip-protection=true",
    ));
    refused_with(
        &out,
        &format!(
            "holdfast: user \"{}\" may not add annotation holdfast.dev/skip-protection to ConfigMap {ns}/db",
            dev.name
        ),
    );
    let out = as_dev(&words("label configmap db holdfast.dev/strict-exempt=true"));
    refused_with(&out, "may not add label holdfast.dev/strict-exempt");
    // A refused dry run leaves no Event (the webhook declares sideEffects: None);
    // the same refusal for real, by another user, does.
    env.run(&["create", "configmap", "dry", "--from-literal=a=b"]);
    env.run(&["label", "configmap", "dry", "holdfast.dev/protected=true"]);
    let dry_refusal = format!("ConfigMap {ns}/dry is protected by label");
    let out = as_dev(&["delete", "configmap", "dry", "--dry-run=server"]);
    refused_with(&out, &dry_refusal);
    let out = as_lead(&["delete", "configmap", "dry"]);
    refused_with(&out, &dry_refusal);
    let dry = env
        .wait_events("DeletionBlocked", "dry", 30)
        .await
        .expect("the real refusal's Event");
    let lead_tried = format!("{} tried to delete it", lead.name);
    assert!(
        dry.iter()
            .all(|e| e["regarding"]["namespace"] == ns.as_str()
                && e["note"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&lead_tried))),
        "the dry run left an Event: {dry:?}"
    );
    // ...and gets refused deletions recorded, once per window however often retried.
    for _ in 0..4 {
        let out = as_dev(&["delete", "configmap", "other"]);
        refused_with(&out, "protected by label");
    }
    // A lead may set break-glass; then the deletion goes through.
    as_lead(&words(
        "annotate configmap db holdfast.dev/skip-protection=true",
    ))
    .ok()
    .expect("lead may bypass");
    let out = as_dev(&["delete", "configmap", "db"]);
    assert_eq!(out.code, 0, "{out:?}");

    let dev_tried = format!("{} tried to delete it: holdfast:", dev.name);
    let dev_deleted = format!("{} deleted it", dev.name);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let blocked = events_in(&env, &ns, "DeletionBlocked", "other");
        let glass = events_in(&env, &ns, "BreakGlass", "db");
        let granted = events_in(&env, &ns, "BreakGlassGranted", "db");
        if !blocked.is_empty() && !glass.is_empty() && !granted.is_empty() {
            assert_eq!(blocked.len(), 1, "rate-limited: {blocked:?}");
            assert_eq!(blocked[0]["type"], "Warning");
            assert!(
                blocked[0]["note"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with(&dev_tried),
                "{blocked:?}"
            );
            assert!(
                glass[0]["note"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with(&dev_deleted),
                "{glass:?}"
            );
            assert!(
                granted[0]["note"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with(&lead.name),
                "{granted:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "events missing: blocked {blocked:?} glass {glass:?} granted {granted:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The Events with `reason` about the object `name` in namespace `ns`.
fn events_in(env: &Env, ns: &str, reason: &str, name: &str) -> Vec<Value> {
    env.events(reason, name)
        .expect("kubectl get events")
        .into_iter()
        .filter(|e| e["regarding"]["namespace"] == ns)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strict_resource_protection_guards_its_selector() {
    let (env, _c) = full_stack().await;
    let ns = env.default_namespace().expect("namespace");
    env.run(&["create", "configmap", "db", "--from-literal=a=b"]);
    env.run(&["label", "configmap", "db", "tier=data"]);
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: data-tier}}\n\
         spec:\n  strict: true\n  resources:\n  - {{group: \"\", version: v1, resource: configmaps, namespace: {ns}, labelSelector: {{matchLabels: {{tier: data}}}}}}\n",
    ))
    .expect("protection");
    covered(&env, "", "configmaps").await;
    refused_once_failing(&env, "delete configmap db --dry-run=server", &format!("ResourceProtection/data-tier (selects configmaps in namespace {ns} matching its label selector)")).await;
    // Relabelling it out of the selector is refused under strict...
    for line in [
        "label configmap db tier-",
        "label --overwrite configmap db tier=web",
    ] {
        refused_once_failing(&env, line, "would no longer select it").await;
    }
    // ...other label changes pass...
    env.run(&["label", "configmap", "db", "team=shop"]);
    // ...and with the exemption stored first, it can leave the selector.
    env.run(&words("label configmap db holdfast.dev/strict-exempt=true"));
    env.run(&["label", "configmap", "db", "tier-"]);
    env.prints(&["delete", "configmap", "db"], "configmap \"db\" deleted\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn anchor_is_the_topmost_composite() {
    use holdfast_e2e::fixtures::{crd, documents};
    let (env, _c) = full_stack().await;
    // A Keycloak composite (topmost) owns a nested PostgreSQL composite; its backend
    // objects carry the topmost composite's name.
    env.apply_crds(&documents(&[
        crd(
            "vshn.appcat.vshn.io",
            "xvshnkeycloaks",
            "XVSHNKeycloak",
            false,
        ),
        crd(
            "vshn.appcat.vshn.io",
            "xvshnpostgresqls",
            "XVSHNPostgreSQL",
            false,
        ),
    ]))
    .expect("crds");
    env.wait_served(&["xvshnkeycloaks"]).await;
    env.apply(
        "apiVersion: holdfast.dev/v1alpha1\nkind: AnchorRule\nmetadata: {name: keycloak}\nspec:\n  \
         anchor: {group: vshn.appcat.vshn.io, version: v1, resource: xvshnkeycloaks}\n  \
         anchorLabels: {name: appcat.vshn.io/composite-name}\n  \
         toggle: {fieldPath: .spec.parameters.backup.deletionProtection, default: true}\n  protects:\n  \
         - {group: \"\", version: v1, resource: namespaces}\n  \
         - {group: \"\", version: v1, resource: persistentvolumeclaims, inheritFromNamespace: true}\n",
    )
    .expect("rule");
    env.apply("apiVersion: vshn.appcat.vshn.io/v1\nkind: XVSHNKeycloak\nmetadata: {name: kc-1}\nspec: {}\n").expect("top");
    env.apply("apiVersion: vshn.appcat.vshn.io/v1\nkind: XVSHNPostgreSQL\nmetadata: {name: kc-1-pg, labels: {appcat.vshn.io/composite-name: kc-1}}\nspec: {}\n").expect("nested");
    let ns = instance_namespace(&env, "vshn-postgresql-kc-1-pg", "kc-1");
    env.apply(&format!("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data, namespace: {ns}}}\nspec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}\n")).expect("pvc");
    covered(&env, "", "persistentvolumeclaims").await;
    let pvc = ["delete", "pvc", "data", "-n", &ns, "--dry-run=server"];
    let out = env
        .kubectl_until(&pvc, 15, |o| o.code != 0)
        .await
        .expect("refused");
    refused_with(
        &out,
        "its anchor xvshnkeycloaks.vshn.appcat.vshn.io kc-1 exists",
    );
    // Deleting the nested composite does not lift the protection: the anchor is the top.
    env.run(&["delete", "xvshnpostgresql", "kc-1-pg"]);
    env.refuses_with(
        &pvc,
        "its anchor xvshnkeycloaks.vshn.appcat.vshn.io kc-1 exists",
    );
    // Deleting the topmost composite does.
    env.run(&["delete", "xvshnkeycloak", "kc-1"]);
    env.kubectl_until(&pvc, 10, |o| o.code == 0)
        .await
        .expect("deletable once the top is gone");
}
