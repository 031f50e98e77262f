//! Least privilege: holdfast reads what its configuration needs and nothing more.
//! The shipped manifests name every type they grant read of (no `*`); both
//! binaries run as the shipped ServiceAccounts (the simulator enforces RBAC,
//! escalation prevention and ClusterRole aggregation); Secrets stay unreadable
//! until a policy names them; a permission the controller cannot grant is
//! reported in the policy's status and the DELETEs that need it are refused until
//! it is granted.

use std::path::Path;

use holdfast_e2e::{
    Env,
    controller::{ControllerProcess, condition},
    steps::{
        apply_overlay, controller_as, eventually, refused_until, service_account_kubeconfigs, words,
    },
};
use serde_json::Value;

const CONTROLLER: &str = holdfast_e2e::CONTROLLER_SA;
const WEBHOOK: &str = holdfast_e2e::WEBHOOK_SA;

/// Secrets referencing a ConfigMap by their label `config`.
const SECRET_RULE: &str = r#"
apiVersion: holdfast.dev/v1alpha1
kind: DependencyRule
metadata: {name: secrets-use-configmaps}
spec:
  dependent: {group: "", version: v1, kind: Secret, resource: secrets}
  dependencies:
  - {group: "", version: v1, resource: configmaps, fieldRef: {path: .metadata.labels.config}}
"#;

/// ConfigMap `settings` and Secret `creds` (referencing it) in namespace `app`.
fn objects(app: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {app}}}\n\
         data: {{mode: strict}}\n---\napiVersion: v1\nkind: Secret\n\
         metadata: {{name: creds, namespace: {app}, labels: {{config: settings}}}}\n\
         stringData: {{password: hunter2}}\n"
    )
}

/// The overlay applied as a user would; the webhook and the controller running
/// as the ServiceAccounts it creates; namespace `app` (its name returned).
async fn shipped() -> (Env, ControllerProcess, String) {
    let mut env = holdfast_e2e::steps::sim_with_service_accounts().await;
    apply_overlay(&env, "kubernetes");
    let (controller_kc, webhook_kc) = service_account_kubeconfigs(&env);
    env.start_webhook(&["--kubeconfig", &webhook_kc])
        .await
        .expect("webhook");
    env.wait_webhook_ready().await.expect("webhook ready");
    let port = env.webhook.as_ref().map(|w| w.port).expect("port");
    let c = controller_as(&env, port, "controller", &controller_kc, &[]).await;
    let app = env.namespace("app").expect("namespace");
    (env, c, app)
}

/// `kubectl auth can-i VERB RESOURCE --all-namespaces` as `user`: (exit code, answer).
fn can_i(env: &Env, user: &str, verb: &str, resource: &str) -> (i32, String) {
    let out = env.attempt(&[
        "auth",
        "can-i",
        verb,
        resource,
        "--all-namespaces",
        "--as",
        user,
    ]);
    (out.code, out.stdout.trim().to_string())
}

/// Waits until `user` may (or may not) `verb` `resource` cluster-wide.
async fn wait_can_i(env: &Env, user: &str, verb: &str, resource: &str, want: bool, log: &str) {
    let want = if want {
        (0, "yes".to_string())
    } else {
        (1, "no".to_string())
    };
    eventually(30, async || {
        let got = can_i(env, user, verb, resource);
        if got == want {
            return Ok(());
        }
        let roles = reads_role(env);
        Err(format!(
            "can-i {verb} {resource} as {user}: {got:?}, want {want:?}\nroles: {roles}\n{log}"
        ))
    })
    .await
}

/// The rules of the role the controller keeps.
fn reads_role(env: &Env) -> Value {
    let role: Value = serde_json::from_str(
        &env.run(&words("get clusterrole holdfast-reads-policies -o json"))
            .stdout,
    )
    .expect("json");
    role["rules"].clone()
}

/// The resources of the rule for the core group in `rules`.
fn core_resources(rules: &Value) -> Vec<String> {
    rules
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["apiGroups"] == serde_json::json!([""]))
        .map(|r| {
            assert_eq!(
                r["verbs"],
                serde_json::json!(["get", "list", "watch"]),
                "{r}"
            );
            r["resources"]
                .as_array()
                .expect("resources")
                .iter()
                .map(|v| v.as_str().expect("string").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits for `series` to read `want` (`None`: no such series).
async fn wait_metric(env: &Env, series: &str, want: Option<f64>) {
    eventually(30, async || {
        let got = env.webhook_metric(series).await.expect("metrics");
        if got == want {
            return Ok(());
        }
        Err(format!(
            "{series}: {got:?}, want {want:?}\n{}",
            env.webhook_log()
        ))
    })
    .await
}

/// Once the rule is Ready, the DELETE of ConfigMap `app`/settings is refused (exit
/// code 1, the webhook's exact refusal) while Secret `app`/creds references it.
async fn settings_held_by_the_secret(env: &Env, c: &ControllerProcess, app: &str) {
    c.wait_condition(
        env,
        ["dependencyrule", "secrets-use-configmaps", "Ready", "True"],
    )
    .await;
    let out = refused_until(
        env,
        &["delete", "configmap", "settings", "-n", app],
        "still referenced",
    )
    .await;
    assert!(
        out.refused_with(&holdfast_e2e::denied_by(
            "policies-0.holdfast.dev",
            &format!("holdfast: ConfigMap {app}/settings is still referenced by Secret {app}/creds (policy: \
             DependencyRule/secrets-use-configmaps, field .metadata.labels.config of secrets)")
        )),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_stay_unread_until_a_policy_names_them() {
    let (env, c, app) = shipped().await;
    // The controller granted what label containment needs: ConfigMaps, Pods, ...
    // never Secrets.
    let core = eventually(30, async || {
        let core = core_resources(&reads_role(&env));
        if core.iter().any(|r| r == "configmaps") {
            return Ok(core);
        }
        Err(format!("reads role: {}\n{}", reads_role(&env), c.log()))
    })
    .await;
    assert!(!core.iter().any(|r| r == "secrets"), "{core:?}");
    assert!(core.iter().any(|r| r == "pods"), "{core:?}");
    let log = c.log();
    wait_can_i(&env, WEBHOOK, "list", "configmaps", true, &log).await;
    for who in [WEBHOOK, CONTROLLER] {
        assert_eq!(can_i(&env, who, "list", "secrets"), (1, "no".to_string()));
        assert_eq!(can_i(&env, who, "get", "secrets"), (1, "no".to_string()));
    }
    // A labelled Secret: its data is not readable with the webhook's own token.
    env.apply(
        &format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: token, namespace: {app}, labels: {{holdfast.dev/protected: \"true\"}}}}\nstringData: {{key: value}}\n"),
    )
    .expect("secret");
    // (With the webhook's own kubeconfig: a ServiceAccount's user name has colons,
    // which a KUBECONFIG path cannot.)
    let webhook_kc = env.dir.path().join("webhook.kubeconfig");
    let out = env.attempt(&[
        "--kubeconfig",
        &webhook_kc.to_string_lossy(),
        "get",
        "secret",
        "token",
        "-n",
        &app,
        "-o",
        "json",
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim(),
        format!(
            "Error from server (Forbidden): secrets \"token\" is forbidden: User \
             \"system:serviceaccount:holdfast-system:holdfast-webhook\" cannot get resource \
             \"secrets\" in API group \"\" in the namespace \"{app}\""
        )
    );
    // The webhook says which type it may not read (once, as a metric and a log line).
    wait_metric(
        &env,
        "holdfast_webhook_unreadable_resources{resource=\"secrets\"}",
        Some(1.0),
    )
    .await;
    assert_eq!(
        env.webhook_log()
            .matches("may not list and watch secrets:")
            .count(),
        1,
        "{}",
        env.webhook_log()
    );
    // The labelled Secret is still protected from a direct DELETE (the label
    // decision needs no read).
    let out = env.attempt(&["delete", "secret", "token", "-n", &app]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "holdfast: Secret {app}/token is protected by label holdfast.dev/protected=true"
        )),
        "{out:?}"
    );

    // A policy added at run time needs Secrets: the role grows, the webhook reads
    // them, and the rule holds.
    env.apply(&objects(&app)).expect("objects");
    env.apply(SECRET_RULE).expect("rule");
    wait_can_i(&env, WEBHOOK, "list", "secrets", true, &c.log()).await;
    assert_eq!(
        can_i(&env, CONTROLLER, "watch", "secrets"),
        (0, "yes".to_string())
    );
    assert!(
        core_resources(&reads_role(&env))
            .iter()
            .any(|r| r == "secrets")
    );
    settings_held_by_the_secret(&env, &c, &app).await;
    wait_metric(
        &env,
        "holdfast_webhook_unreadable_resources{resource=\"secrets\"}",
        None,
    )
    .await;
    // The rule goes: Secrets are taken away again.
    env.run(&["delete", "dependencyrule", "secrets-use-configmaps"]);
    wait_can_i(&env, WEBHOOK, "list", "secrets", false, &c.log()).await;
    assert!(
        !core_resources(&reads_role(&env))
            .iter()
            .any(|r| r == "secrets")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_the_controller_cannot_grant_is_reported_and_refused_until_granted() {
    let (env, c, app) = shipped().await;
    wait_can_i(&env, WEBHOOK, "list", "configmaps", true, &c.log()).await;
    // Take escalate away from the controller: it can no longer grant what it
    // does not hold.
    let role: Value = serde_json::from_str(
        &env.run(&["get", "clusterrole", "holdfast-controller", "-o", "json"])
            .stdout,
    )
    .expect("json");
    let index = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .position(|r| r["verbs"].to_string().contains("escalate"))
        .expect("the shipped controller role has escalate");
    let verbs = format!(
        "[{{\"op\": \"replace\", \"path\": \"/rules/{index}/verbs\", \"value\": [\"get\", \"update\", \"patch\"]}}]"
    );
    env.run(&[
        "patch",
        "clusterrole",
        "holdfast-controller",
        "--type=json",
        "-p",
        &verbs,
    ]);
    env.apply(&objects(&app)).expect("objects");
    env.apply(SECRET_RULE).expect("rule");
    // The status names the missing permission and the API server's refusal.
    let installed = eventually(30, async || {
        let cond = condition(
            &env,
            "dependencyrule",
            "secrets-use-configmaps",
            "Installed",
        )
        .expect("condition");
        cond.filter(|c| c["status"] == "False")
            .ok_or_else(|| format!("no Installed=False\n{}", c.log()))
    })
    .await;
    assert_eq!(installed["reason"], "NotInstalled");
    let message = installed["message"].as_str().expect("message");
    assert!(
        message.starts_with(
            "holdfast may not read secrets (get, list, watch), so its DELETEs are refused: updating \
             ClusterRole holdfast-reads-policies: ApiError: clusterroles.rbac.authorization.k8s.io \
             \"holdfast-reads-policies\" is forbidden: user \
             \"system:serviceaccount:holdfast-system:holdfast-controller\" (groups=[\"system:serviceaccounts\" \
             \"system:serviceaccounts:holdfast-system\" \"system:authenticated\"]) is attempting to grant \
             RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], \
             Verbs:[\"get\" \"list\" \"watch\"]}"
        ) && message.ends_with(
            "; grant the controller escalate on ClusterRole holdfast-reads-policies, or add a \
             ClusterRole labelled holdfast.dev/aggregate-to-reads=true granting it"
        ),
        "{message}"
    );
    let ready = condition(&env, "dependencyrule", "secrets-use-configmaps", "Ready")
        .expect("condition")
        .expect("Ready");
    assert_eq!(ready["status"], "False", "{ready}");
    assert_eq!(
        can_i(&env, WEBHOOK, "list", "secrets"),
        (1, "no".to_string())
    );
    // The rule's DELETEs are refused, never allowed unseen.
    let dry_run = [
        "delete",
        "configmap",
        "settings",
        "-n",
        &app,
        "--dry-run=server",
    ];
    let out = refused_until(&env, &dry_run, "cannot verify dependents").await;
    assert!(
        out.refused_with(&holdfast_e2e::denied_by(
            "policies-0.holdfast.dev",
            &format!(
                "holdfast: cannot verify dependents of ConfigMap {app}/settings (policy: \
             DependencyRule/secrets-use-configmaps, secrets referencing it at \
             .metadata.labels.config): holdfast may not read secrets yet (get, list, watch on \
             secrets is not granted to its ServiceAccount; the controller grants what the \
             policies name through ClusterRole holdfast-reads)"
            )
        )),
        "{out:?}"
    );
    // A namespace holding what a policy protects among a type holdfast may not
    // read: its DELETE is refused too (containment cannot see inside).
    env.apply(&rp_creds(&app)).expect("protection");
    let ns_dry_run = ["delete", "namespace", &app, "--dry-run=server"];
    let out = refused_until(&env, &ns_dry_run, "holdfast may not read secrets yet").await;
    assert_eq!(
        out.stderr,
        format!(
            "Error from server (Forbidden): admission webhook \"containment.holdfast.dev\" denied \
         the request: holdfast: cannot verify what Namespace {app} holds: holdfast may not read \
         secrets yet (get, list, watch on secrets is not granted to its ServiceAccount; the \
         controller grants what the policies name through ClusterRole holdfast-reads). Refusing \
         rather than risk a half-deleted namespace; retry later, or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection.\n"
        )
    );
    // An administrator grants Secrets by a labelled ClusterRole of their own: the
    // aggregated role picks it up, the rule holds.
    if let Some(run) = &env.cluster {
        run.remove_later("clusterrole", "holdfast-reads-secrets");
    }
    env.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: holdfast-reads-secrets\n  labels: {holdfast.dev/aggregate-to-reads: \"true\"}\nrules:\n- {apiGroups: [\"\"], resources: [secrets], verbs: [get, list, watch]}\n",
    )
    .expect("grant");
    wait_can_i(&env, WEBHOOK, "list", "secrets", true, &c.log()).await;
    settings_held_by_the_secret(&env, &c, &app).await;
    assert!(
        env.exists(&["configmap", "settings", "-n", &app])
            .expect("kubectl")
    );
    // Now containment sees the protected Secret.
    let out = refused_until(&env, &ns_dry_run, &format!("Secret {app}/creds")).await;
    assert!(
        out.stderr
            .contains(&format!("Secret {app}/creds (ResourceProtection/creds)")),
        "{out:?}"
    );
}

/// ResourceProtection creds: every Secret in namespace `app`.
fn rp_creds(app: &str) -> String {
    format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: creds}}\n\
         spec:\n  resources:\n  - {{group: \"\", version: v1, resource: secrets, namespace: {app}}}\n"
    )
}

/// Every read rule of every shipped overlay names its types: no `*` in the groups
/// or resources of a rule granting get, list or watch, and no read of Secrets
/// beyond the controller's own certificate Secret (by name).
#[test]
fn shipped_read_rules_name_every_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/overlays");
    let mut roles = 0;
    for overlay in ["kubernetes", "karmada/karmada-apiserver", "karmada/host"] {
        let out = std::process::Command::new(holdfast_e2e::kubectl_path().expect("kubectl"))
            .args(["kustomize", &root.join(overlay).to_string_lossy()])
            .output()
            .expect("kubectl kustomize");
        assert!(out.status.success(), "{overlay}: {out:?}");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        for doc in text.split("\n---\n") {
            let v: Value = serde_saphyr::from_str(doc).expect("yaml");
            if !matches!(v["kind"].as_str(), Some("ClusterRole" | "Role")) {
                continue;
            }
            roles += 1;
            let name = v["metadata"]["name"].as_str().unwrap_or_default();
            for rule in v["rules"].as_array().into_iter().flatten() {
                let has = |field: &str, what: &str| {
                    rule[field].as_array().into_iter().flatten().any(|x| {
                        x.as_str()
                            .is_some_and(|s| s == what || (what == "*" && s.contains('*')))
                    })
                };
                let reads = ["get", "list", "watch", "*"]
                    .iter()
                    .any(|v| has("verbs", v));
                if !reads {
                    continue;
                }
                assert!(
                    !has("apiGroups", "*") && !has("resources", "*") && !has("verbs", "*"),
                    "{overlay}: {name} grants a wildcard read: {rule}"
                );
                if has("resources", "secrets") {
                    assert!(
                        rule["resourceNames"] == serde_json::json!(["holdfast-webhook-tls"])
                            || rule["resourceNames"]
                                == serde_json::json!(["holdfast-deferred-deletion-key"]),
                        "{overlay}: {name} reads Secrets: {rule}"
                    );
                }
            }
        }
    }
    assert!(roles >= 6, "{roles} roles rendered");
}
