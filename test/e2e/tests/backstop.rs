//! The backstop: the real controller, running as its shipped ServiceAccount,
//! installs the ValidatingAdmissionPolicy `holdfast-backstop` and its binding, so
//! with the webhook process stopped the API server itself still refuses the DELETE
//! of label-protected objects (and, under `--strict`, removing the label), with
//! the webhook's `holdfast:` message. The backstop follows the flags, comes back
//! when deleted or changed, and `--backstop=false` removes it: then the same
//! DELETE is refused by `failurePolicy: Fail` with the API server's webhook error.

use std::time::{Duration, Instant};

use holdfast_e2e::{
    Env,
    steps::{controller_as as controller, exists, words},
};
use serde_json::Value;

const NAME: &str = "holdfast-backstop";

/// holdfast installed as `manifests/overlays/kubernetes` ships it, the webhook
/// (with `webhook_args`) running as its ServiceAccount
/// ([`holdfast_e2e::controller::shipped_installation`]); the controller's
/// kubeconfig (its ServiceAccount) is returned for the test to start it with.
async fn stack(webhook_args: &[&str]) -> (Env, String) {
    let installed = holdfast_e2e::controller::shipped_installation(
        holdfast_e2e::with_service_accounts(holdfast_sim::SimConfig::default()),
        webhook_args,
    )
    .await
    .expect("holdfast installed as shipped");
    (installed.env, installed.controller_kubeconfig)
}

/// The live policy or binding (`kind`), None when absent; any other kubectl
/// failure fails the test.
fn live(env: &Env, kind: &str) -> Option<Value> {
    let out = env.attempt(&["get", kind, NAME, "-o", "json"]);
    if out.code != 0 {
        assert!(out.is_not_found(), "{out:?}");
        return None;
    }
    Some(serde_json::from_str(&out.stdout).expect("json"))
}

/// Waits until `pred` holds for the live policy and binding.
async fn wait_backstop(
    env: &Env,
    what: &str,
    pred: impl Fn(Option<&Value>, Option<&Value>) -> bool,
) -> (Option<Value>, Option<Value>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = live(env, "validatingadmissionpolicy");
        let b = live(env, "validatingadmissionpolicybinding");
        if pred(p.as_ref(), b.as_ref()) {
            return (p, b);
        }
        assert!(
            Instant::now() < deadline,
            "the backstop never became {what}; last policy: {p:?}; last binding: {b:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn operations(p: Option<&Value>) -> Vec<String> {
    p.map(|p| {
        p["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r["operations"].as_array().cloned().unwrap_or_default())
            .filter_map(|o| o.as_str().map(str::to_string))
            .collect()
    })
    .unwrap_or_default()
}

fn installed_with(p: Option<&Value>, b: Option<&Value>, ops: &[&str]) -> bool {
    operations(p) == ops
        && b.is_some_and(|b| {
            b["spec"]["policyName"] == NAME
                && b["spec"]["validationActions"] == serde_json::json!(["Deny"])
        })
}

fn backstop_denial(resource: &str, name: &str, message: &str) -> String {
    format!(
        "Error from server (Forbidden): {resource} \"{name}\" is forbidden: ValidatingAdmissionPolicy '{NAME}' with binding '{NAME}' denied request: {message}\n"
    )
}

/// What kubectl prints when the API server cannot reach webhook `name` at
/// `port` (where the webhook listened, at the address that API server reaches
/// this host at): the process is gone.
fn webhook_down(name: &str, port: u16) -> String {
    let host = holdfast_e2e::e2e_webhook_host();
    format!(
        "Error from server (InternalError): Internal error occurred: failed calling webhook \"{name}\": failed to call webhook: Post \"https://{host}:{port}/validate?timeout=10s\": dial tcp {host}:{port}: connect: connection refused\n"
    )
}

/// The label refusal of protected Namespace `guarded`.
fn ns_message(guarded: &str) -> String {
    format!(
        "holdfast: Namespace {guarded} is protected by label holdfast.dev/protected=true (policy: label holdfast.dev/protected), so it cannot be deleted. To delete it, remove the label (kubectl label namespaces {guarded} holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    )
}

/// The label refusal of ConfigMap `keep` in namespace `shop`.
fn cm_message(shop: &str) -> String {
    format!(
        "holdfast: ConfigMap {shop}/keep is protected by label holdfast.dev/protected=Always (policy: label holdfast.dev/protected), so it cannot be deleted. To delete it, remove the label (kubectl label configmaps keep -n {shop} holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    )
}

/// The test's namespaces `guarded` (itself protected) and `shop` (ConfigMaps
/// keep, free, glass and casc) with their labels; returns their names.
fn objects(env: &Env) -> (String, String) {
    let guarded = env.namespace("guarded").expect("namespace");
    env.run(&[
        "label",
        "namespace",
        &guarded,
        "holdfast.dev/protected=true",
    ]);
    let shop = env.namespace("shop").expect("namespace");
    for cm in ["keep", "free", "glass", "casc"] {
        env.run(&words(&format!(
            "create configmap {cm} -n {shop} --from-literal=a=b"
        )));
    }
    for change in [
        "label configmap keep holdfast.dev/protected=Always",
        "label configmap glass holdfast.dev/protected=true",
        "annotate configmap glass holdfast.dev/skip-protection=true",
        "label configmap casc holdfast.dev/protected=Cascading",
    ] {
        env.run(&words(&format!("{change} -n {shop}")));
    }
    (guarded, shop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_the_webhook_stopped_the_backstop_still_refuses_labelled_deletes() {
    let (mut env, kubeconfig) = stack(&[]).await;
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let c = controller(&env, port, "controller", &kubeconfig, &["--backstop=true"]).await;
    let (p, _) = wait_backstop(&env, "installed for DELETE", |p, b| {
        installed_with(p, b, &["DELETE"])
    })
    .await;
    let p = p.expect("policy");
    assert_eq!(p["spec"]["failurePolicy"], "Fail");
    assert_eq!(
        p["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "holdfast-controller"
    );
    let (guarded, shop) = objects(&env);

    // Up or down, the API server refuses a labelled DELETE: the backstop is
    // evaluated before the webhooks. The API server compiles policies from an
    // informer of its own, so a policy just written (or just restored) takes
    // effect a moment later: the refusals after a change wait for it.
    env.refuses_once_in_effect(
        &["delete", "configmap", "keep", "-n", &shop],
        &backstop_denial("configmaps", "keep", &cm_message(&shop)),
    )
    .await;

    // The webhook process stops.
    drop(env.webhook.take().expect("webhook running"));
    env.refuses(
        &["delete", "namespace", &guarded],
        &backstop_denial("namespaces", &guarded, &ns_message(&guarded)),
    );
    env.refuses(
        &["delete", "configmap", "keep", "-n", &shop],
        &backstop_denial("configmaps", "keep", &cm_message(&shop)),
    );
    // Break-glass passes the backstop (it cannot ask who set it); the webhook,
    // which judges the marker, is down and fails closed.
    env.refuses(
        &["delete", "configmap", "glass", "-n", &shop],
        &webhook_down("delete-label-0.holdfast.dev", port),
    );
    // Cascading is left to the webhook (the backstop cannot see live contents).
    env.refuses(
        &["delete", "configmap", "casc", "-n", &shop],
        &webhook_down("delete-label-0.holdfast.dev", port),
    );
    exists(&env, &["namespace", &guarded]);
    exists(&env, &["configmap", "keep", "-n", &shop]);
    // Unprotected objects are not held back.
    env.prints(
        &["delete", "configmap", "free", "-n", &shop],
        "configmap \"free\" deleted\n",
    );
    // Without strict mode, removing the label is allowed by the backstop (the
    // label webhook does not see it either).
    env.run(&words(&format!(
        "label configmap keep -n {shop} holdfast.dev/protected-"
    )));
    env.prints(
        &["delete", "configmap", "keep", "-n", &shop],
        "configmap \"keep\" deleted\n",
    );

    // Deleted: re-created. Changed: restored.
    let uid = p["metadata"]["uid"].clone();
    env.run(&["delete", "validatingadmissionpolicy", NAME]);
    let (p, _) = wait_backstop(&env, "re-created", |p, b| {
        installed_with(p, b, &["DELETE"]) && p.is_some_and(|p| p["metadata"]["uid"] != uid)
    })
    .await;
    let buid =
        live(&env, "validatingadmissionpolicybinding").expect("binding")["metadata"]["uid"].clone();
    env.run(&["delete", "validatingadmissionpolicybinding", NAME]);
    wait_backstop(&env, "re-bound", |p, b| {
        installed_with(p, b, &["DELETE"]) && b.is_some_and(|b| b["metadata"]["uid"] != buid)
    })
    .await;
    let expression = p.expect("policy")["spec"]["validations"][0]["expression"].clone();
    env.run(&[
        "patch",
        "validatingadmissionpolicy",
        NAME,
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/validations/0/expression","value":"true"}]"#,
    ]);
    wait_backstop(&env, "restored", |p, _| {
        p.is_some_and(|p| p["spec"]["validations"][0]["expression"] == expression)
    })
    .await;
    env.refuses_once_in_effect(
        &["delete", "namespace", &guarded],
        &backstop_denial("namespaces", &guarded, &ns_message(&guarded)),
    )
    .await;
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strict_mode_keeps_the_label_and_the_flags_drive_the_backstop() {
    let (mut env, kubeconfig) = stack(&["--strict"]).await;
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    // Without --strict first: DELETE only.
    let mut c = controller(&env, port, "controller-1", &kubeconfig, &["--backstop"]).await;
    wait_backstop(&env, "installed for DELETE", |p, b| {
        installed_with(p, b, &["DELETE"])
    })
    .await;
    c.terminate(30).await.expect("controller stops");
    // The flags change: --strict adds UPDATE.
    let mut c = controller(
        &env,
        port,
        "controller-2",
        &kubeconfig,
        &["--strict", "--backstop=yes"],
    )
    .await;
    wait_backstop(&env, "installed for DELETE and UPDATE", |p, b| {
        installed_with(p, b, &["DELETE", "UPDATE"])
    })
    .await;
    let (guarded, shop) = objects(&env);
    env.run(&words(&format!(
        "label configmap free -n {shop} holdfast.dev/protected=true holdfast.dev/strict-exempt=true"
    )));
    // A CRD whose instances strict mode leaves alone: their UPDATEs leave the backstop.
    env.apply_crds(&holdfast_e2e::fixtures::widget_crd())
        .expect("widget CRD");
    env.run(&words(
        "label crd widgets.example.com holdfast.dev/strict-exempt=true",
    ));
    wait_backstop(&env, "leaving widget UPDATEs out", |p, _| {
        p.is_some_and(|p| {
            p["spec"]["matchConstraints"]["excludeResourceRules"]
                == serde_json::json!([{"apiGroups": ["example.com"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["widgets", "widgets/*"], "scope": "*"}])
        })
    })
    .await;
    env.wait_served(&["widgets", "-n", &shop]).await;
    env.apply(&format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w1, namespace: {shop}, labels: {{holdfast.dev/protected: \"true\"}}}}\n",
    ))
    .expect("widget");
    drop(env.webhook.take().expect("webhook running"));
    let strict_down = webhook_down("strict-label-0.holdfast.dev", port);
    env.refuses_once_in_effect(
        &words(&format!(
            "label widget w1 -n {shop} holdfast.dev/protected-"
        )),
        &strict_down,
    )
    .await;
    // Deletes under strict mode: the message tells how to unprotect first.
    let strict_delete = |kind: &str, resource: &str, name: &str, value: &str| {
        let target = format!("{resource} {name} -n {shop}");
        let message = format!(
            "holdfast: {kind} {shop}/{name} is protected by label holdfast.dev/protected={value} (policy: label holdfast.dev/protected), so it cannot be deleted. To delete it, first mark it exempt in its own update, as strict mode is on (kubectl label {target} holdfast.dev/strict-exempt=true, which takes the bypass permission), then remove the label (kubectl label {target} holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        );
        let kind = kind.to_lowercase();
        env.refuses(
            &["delete", &kind, name, "-n", &shop],
            &backstop_denial(resource, name, &message),
        );
    };
    strict_delete("Widget", "widgets.example.com", "w1", "true");

    let strict_message = |desc: &str, value: &str, target: &str, extra: &str| {
        format!(
            "holdfast: {desc} carries the protection label holdfast.dev/protected={value} and strict mode is on (policy: strict label holdfast.dev/protected), so the label cannot be removed or changed to a value that does not protect.{extra} To unprotect it, first mark it exempt in its own update (kubectl label {target} holdfast.dev/strict-exempt=true, which takes the bypass permission on protections.holdfast.dev), then remove the label."
        )
    };
    // Cascading counts as protecting for strict mode too.
    for (name, value) in [("keep", "Always"), ("casc", "Cascading")] {
        let message = strict_message(
            &format!("ConfigMap {shop}/{name}"),
            value,
            &format!("configmaps {name} -n {shop}"),
            "",
        );
        env.refuses(
            &words(&format!(
                "label configmap {name} -n {shop} holdfast.dev/protected-"
            )),
            &backstop_denial("configmaps", name, &message),
        );
    }
    env.refuses(&words(&format!("label --overwrite namespace {guarded} holdfast.dev/protected=no holdfast.dev/strict-exempt=true")), &backstop_denial(
            "namespaces",
            &guarded,
            &strict_message(
                &format!("Namespace {guarded}"),
                "true",
                &format!("namespaces {guarded}"),
                " Adding the exemption in the same update does not count: it must already be stored.",
            ),
        ));
    // A stored exemption passes the backstop; the strict webhook (down) fails closed.
    env.refuses(
        &words(&format!(
            "label configmap free -n {shop} holdfast.dev/protected-"
        )),
        &strict_down,
    );
    strict_delete("ConfigMap", "configmaps", "keep", "Always");
    c.terminate(30).await.expect("controller stops");

    // --backstop=false removes it; the webhook outage then refuses by
    // failurePolicy: Fail, as without a backstop.
    let c = controller(
        &env,
        port,
        "controller-3",
        &kubeconfig,
        &["--strict", "--backstop=false"],
    )
    .await;
    wait_backstop(&env, "removed", |p, b| p.is_none() && b.is_none()).await;
    for delete in [
        format!("delete namespace {guarded}"),
        format!("delete configmap keep -n {shop}"),
    ] {
        env.refuses_once_in_effect(
            &words(&delete),
            &webhook_down("delete-label-0.holdfast.dev", port),
        )
        .await;
    }
    exists(&env, &["namespace", &guarded]);
    exists(&env, &["configmap", "keep", "-n", &shop]);
    let mut c = c;
    c.terminate(30).await.expect("controller stops");

    // Another protection label: the backstop is back and refuses it too.
    let karmada = "resourcetemplate.karmada.io/deletion-protected";
    let c = controller(
        &env,
        port,
        "controller-4",
        &kubeconfig,
        &[
            "--backstop",
            "--protection-label",
            &format!("{karmada}=Always"),
        ],
    )
    .await;
    let (p, _) = wait_backstop(&env, "installed for two labels", |p, b| {
        installed_with(p, b, &["DELETE"])
            && p.is_some_and(|p| p["spec"]["validations"].as_array().map(Vec::len) == Some(2))
    })
    .await;
    assert!(
        p.expect("policy")["spec"]["validations"][1]["expression"]
            .as_str()
            .is_some_and(|e| e.ends_with(&format!(
                "!((has(oldObject.metadata.labels) && '{karmada}' in oldObject.metadata.labels) && oldObject.metadata.labels['{karmada}'] in ['Always'])"
            ))),
        "second validation guards {karmada}"
    );
    env.run(&["create", "configmap", "template", "-n", &shop]);
    env.run(&[
        "label",
        "configmap",
        "template",
        "-n",
        &shop,
        &format!("{karmada}=Always"),
    ]);
    env.refuses_once_in_effect(&["delete", "configmap", "template", "-n", &shop], &backstop_denial(
            "configmaps",
            "template",
            &format!(
                "holdfast: ConfigMap {shop}/template is protected by label {karmada}=Always (policy: label {karmada}), so it cannot be deleted. To delete it, remove the label (kubectl label configmaps template -n {shop} {karmada}-), or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
            ),
        )).await;
    drop(c);
}

/// One source of truth for the text: for every combination of labels, objects,
/// strict mode and operation below, the backstop's CEL (evaluated by the
/// simulator's evaluator) refuses exactly when the webhook's own evaluation does
/// and with the same message, except where the backstop defers to the webhook
/// (`Cascading`, break-glass markers whose value only the webhook judges).
mod parity {
    use holdfast_shared::{
        backstop::Backstop,
        labels::{ProtectionLabel, ProtectionLabels},
        policy::{Decision, NoPolicies, PolicyConfig, evaluate},
        review::AdmissionRequest,
    };
    use holdfast_sim::cel::{Vars, eval_bool, eval_value};
    use serde_json::{Value, json};

    /// The backstop's verdict: the first failed validation's message.
    fn backstop_verdict(b: &Backstop, request: &Value) -> Option<String> {
        let vars = Vars {
            object: request["object"].clone(),
            old_object: request["oldObject"].clone(),
            request: request.clone(),
            self_value: None,
            old_self: None,
            extra: Vec::new(),
        };
        for v in b.validations() {
            match eval_bool(&v.expression, &vars) {
                Ok(true) => {}
                Ok(false) => {
                    let me = v.message_expression.as_deref().expect("messageExpression");
                    let m = eval_value(me, &vars).unwrap_or_else(|e| panic!("{me}: {e:?}"));
                    return Some(m.as_str().expect("a string").to_string());
                }
                Err(e) => panic!("{}: {e:?} on {request}", v.expression),
            }
        }
        None
    }

    async fn webhook_verdict(cfg: &PolicyConfig, request: &Value) -> Option<String> {
        let req: AdmissionRequest = serde_json::from_value(request.clone()).expect("request");
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-22T08:00:00Z")
            .expect("time")
            .with_timezone(&chrono::Utc);
        match evaluate(&req, cfg, &NoPolicies, now).await.decision {
            Decision::Deny(d) => Some(d.message),
            Decision::Allow | Decision::Warn(_) => None,
        }
    }

    struct Target {
        group: &'static str,
        version: &'static str,
        resource: &'static str,
        kind: &'static str,
        namespace: Option<&'static str>,
        name: &'static str,
    }

    const TARGETS: [Target; 4] = [
        Target {
            group: "",
            version: "v1",
            resource: "configmaps",
            kind: "ConfigMap",
            namespace: Some("shop"),
            name: "settings",
        },
        Target {
            group: "",
            version: "v1",
            resource: "namespaces",
            kind: "Namespace",
            namespace: None,
            name: "shop",
        },
        Target {
            group: "example.com",
            version: "v1",
            resource: "widgets",
            kind: "Widget",
            namespace: Some("team-a"),
            name: "w",
        },
        Target {
            group: "example.com",
            version: "v1",
            resource: "gadgets",
            kind: "Gadget",
            namespace: None,
            name: "g",
        },
    ];

    fn object(t: &Target, labels: &Value, annotations: &Value) -> Value {
        let mut meta =
            json!({"name": t.name, "uid": "u-1", "labels": labels, "annotations": annotations});
        if let Some(ns) = t.namespace {
            meta["namespace"] = json!(ns);
        }
        let api_version = if t.group.is_empty() {
            t.version.to_string()
        } else {
            format!("{}/{}", t.group, t.version)
        };
        json!({"apiVersion": api_version, "kind": t.kind, "metadata": meta})
    }

    fn request(t: &Target, op: &str, old: Value, new: Value) -> Value {
        let mut r = json!({
            "uid": "r-1",
            "kind": {"group": t.group, "version": t.version, "kind": t.kind},
            "resource": {"group": t.group, "version": t.version, "resource": t.resource},
            "name": t.name,
            "operation": op,
            "userInfo": {"username": "alice"},
            "oldObject": old,
            "object": new,
        });
        // The API server puts a Namespace's own name in request.namespace.
        match (t.namespace, t.resource) {
            (Some(ns), _) => r["namespace"] = json!(ns),
            (None, "namespaces") => r["namespace"] = json!(t.name),
            _ => {}
        }
        r
    }

    fn label_sets() -> Vec<ProtectionLabels> {
        vec![
            ProtectionLabels::default(),
            ProtectionLabels::with_extra([
                ProtectionLabel {
                    key: "resourcetemplate.karmada.io/deletion-protected".into(),
                    values: vec!["Always".into()],
                },
                ProtectionLabel {
                    key: "policy.kruise.io/delete-protection".into(),
                    values: vec!["Always".into(), "Cascading".into()],
                },
            ]),
        ]
    }

    /// The webhook's and the backstop's settings for `labels` and `strict`.
    fn both(labels: &ProtectionLabels, strict: bool) -> (PolicyConfig, Backstop) {
        let cfg = PolicyConfig {
            labels: labels.clone(),
            strict,
            ..PolicyConfig::default()
        };
        let b = Backstop {
            labels: labels.clone(),
            strict,
            strict_exempt: Default::default(),
        };
        (cfg, b)
    }

    /// How many requests were compared, and how many of them refused.
    #[derive(Default)]
    struct Tally {
        compared: usize,
        refusals: usize,
    }

    impl Tally {
        /// Asserts the backstop and the webhook give `r` the same verdict (`what`
        /// names the case), and counts it.
        async fn same(&mut self, cfg: &PolicyConfig, b: &Backstop, r: &Value, what: String) {
            let ours = backstop_verdict(b, r);
            assert_eq!(ours, webhook_verdict(cfg, r).await, "{what}");
            self.compared += 1;
            self.refusals += usize::from(ours.is_some());
        }
    }

    const VALUES: [&str; 5] = ["Always", "true", "Cascading", "always", "no"];

    #[tokio::test]
    async fn deletes_are_refused_with_the_webhooks_message() {
        let mut tally = Tally::default();
        for labels in label_sets() {
            for strict in [false, true] {
                let (cfg, b) = both(&labels, strict);
                for t in &TARGETS {
                    for l in labels.iter() {
                        for value in VALUES {
                            let old = object(t, &json!({l.key.clone(): value}), &json!({}));
                            let r = request(t, "DELETE", old, Value::Null);
                            if value == "Cascading" {
                                assert_eq!(
                                    backstop_verdict(&b, &r),
                                    None,
                                    "Cascading is left to the webhook"
                                );
                                continue;
                            }
                            let what = format!("{} {value} strict={strict} {}", l.key, t.resource);
                            tally.same(&cfg, &b, &r, what).await;
                            // A break-glass marker: the backstop lets it through,
                            // whatever its value; the webhook judges it.
                            for marker in [
                                "true",
                                "2026-11-22T09:00:00Z",
                                "2020-01-01T00:00:00Z",
                                "soon",
                            ] {
                                let old = object(
                                    t,
                                    &json!({l.key.clone(): value}),
                                    &json!({"holdfast.dev/skip-protection": marker}),
                                );
                                let r = request(t, "DELETE", old, Value::Null);
                                assert_eq!(backstop_verdict(&b, &r), None, "{marker}");
                                if marker == "true" || marker.starts_with("2026") {
                                    assert_eq!(webhook_verdict(&cfg, &r).await, None, "{marker}");
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(tally.compared, 2 * (4 * 4) + 2 * (4 * 4 * 3));
        // Always and true on the built-in key, Always on the two extra keys.
        assert_eq!(tally.refusals, 2 * 4 * 2 + 2 * 4 * 4);
    }

    #[tokio::test]
    async fn strict_label_removals_are_refused_with_the_webhooks_message() {
        let mut tally = Tally::default();
        for labels in label_sets() {
            let (cfg, b) = both(&labels, true);
            for t in &TARGETS {
                for l in labels.iter() {
                    for before in VALUES {
                        let afters: [Value; 5] = [
                            json!({}),
                            json!({l.key.clone(): "no"}),
                            json!({l.key.clone(): before}),
                            json!({l.key.clone(): "Always"}),
                            json!({l.key.clone(): "", "holdfast.dev/strict-exempt": "true"}),
                        ];
                        for after in afters {
                            for exempt in [false, true] {
                                let mut old_labels = json!({l.key.clone(): before});
                                if exempt {
                                    old_labels["holdfast.dev/strict-exempt"] = json!("true");
                                }
                                let old = object(t, &old_labels, &json!({}));
                                let new = object(t, &after, &json!({}));
                                let r = request(t, "UPDATE", old, new);
                                let what = format!(
                                    "{}: {before} -> {after} exempt={exempt} {}",
                                    l.key, t.resource
                                );
                                tally.same(&cfg, &b, &r, what).await;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(tally.compared, (1 + 3) * 4 * 5 * 5 * 2);
        // Per target: each protecting value before (3 on the built-in key, 1 on
        // the Karmada key, 2 on the Kruise key; the built-in key twice), times
        // three removals (the label gone, "no", blank with the exemption added),
        // none when the exemption is stored.
        assert_eq!(tally.refusals, 4 * ((3 + 3 + 1 + 2) * 3));
    }
}
