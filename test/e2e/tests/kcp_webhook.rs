//! holdfast in every kcp workspace (issue 13, webhook side), on two shards under the
//! identities holdfast ships: consumer workspaces on each shard bind holdfast.dev
//! (accepting its three claims) and apply the consumer overlay; each installs the
//! configuration `holdfast` calling the webhook's workspace route
//! (`/validate/kcp/<logical cluster>`), built as the controller builds it. The
//! webhook runs as `holdfast-webhook` with `--strict`. Everything is asserted with
//! the real kubectl as the consumer: label protection (objects and namespaces),
//! strict mode, a ResourceProtection of one workspace that never answers for the
//! other, a Warn policy, an AnchorRule and a CriticalService read live in the
//! workspace, namespace containment, break-glass asked in the consumer's workspace,
//! the Events there, and a workspace that does not bind holdfast.dev.

use holdfast_e2e::{
    KubectlOutput,
    kcp::vm_vpc_rule,
    kcp_sharded::{COMPUTE, HOLDFAST, Sharded, holdfast_binding, sharded},
    steps::eventually,
};
use holdfast_shared::{
    api::resource_protection::ResourceProtection,
    labels::ProtectionLabels,
    webhookconfig::{
        FailurePolicy, InstallOptions, PolicyNeeds, WebhookTarget, WorkspaceTarget,
        well_known_scope, workspace_configuration,
    },
};

/// A ClusterRole `name` with `rules` (YAML flow items) and its binding to the
/// consumer.
fn consumer_role(name: &str, rules: &[&str]) -> String {
    let rules: String = rules.iter().map(|r| format!("- {r}\n")).collect();
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {name}}}\n\
         rules:\n{rules}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
         metadata: {{name: {name}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {name}}}\n\
         subjects:\n- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: consumer}}\n"
    )
}

/// The consumer in its workspace: everything but bypassing holdfast's protection
/// (an admin of the workspace would hold `bypass` through `*`).
fn consumer_edit() -> String {
    consumer_role(
        "consumer-edit",
        &[
            r#"{apiGroups: ["", apps, apis.kcp.io, admissionregistration.k8s.io, rbac.authorization.k8s.io, events.k8s.io], resources: ["*"], verbs: ["*"]}"#,
            "{apiGroups: [holdfast.dev], resources: [resourceprotections, anchorrules, dependencyrules, criticalservices], verbs: [\"*\"]}",
            r#"{nonResourceURLs: ["*"], verbs: ["*"]}"#,
        ],
    )
}

/// `bind` on holdfast.dev for the consumer (in the holdfast workspace).
fn consumer_may_bind() -> String {
    consumer_role(
        "bind-holdfast-consumers",
        &[
            "{apiGroups: [apis.kcp.io], resources: [apiexports], resourceNames: [holdfast.dev], verbs: [bind]}",
        ],
    )
}

/// The permission to bypass holdfast's protection, for the consumer.
fn consumer_may_bypass() -> String {
    consumer_role(
        "holdfast-bypass",
        &["{apiGroups: [holdfast.dev], resources: [protections], verbs: [bypass]}"],
    )
}

/// A ResourceProtection `name` over ConfigMaps in namespace `ns`.
fn configmaps_protection(name: &str, ns: &str, enforcement: &str) -> String {
    format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {name}}}\n\
         spec:\n  enforcement: {enforcement}\n  resources:\n  - {{version: v1, resource: configmaps, namespace: {ns}}}\n"
    )
}

/// A ConfigMap `name` in namespace `ns` with `labels` (a YAML flow map).
fn configmap(ns: &str, name: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}, labels: {labels}}}\n"
    )
}

/// A Namespace `name` with `labels`.
fn namespace(name: &str, labels: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {labels}}}\n")
}

/// What the webhook's log says, for failure messages.
fn log(t: &Sharded) -> String {
    t.env.webhook_log()
}

/// A consumer workspace `name` on `shard` as the consumer guide has it: owned by
/// the consumer (without bypass), binding holdfast.dev with its three claims, the
/// consumer overlay applied. Returns (path, logical cluster).
async fn consumer(t: &Sharded, name: &str, shard: &str) -> (String, String) {
    let path = t.create_workspace("root", name, shard);
    t.apply("platform", &path, &consumer_edit());
    t.apply("consumer", &path, holdfast_binding());
    t.apply_k("consumer", &path, "overlays/kcp/workspace/consumer");
    let lc = t.kubectl(
        "platform",
        "root",
        &["get", "workspace", name, "-o", "jsonpath={.spec.cluster}"],
    );
    assert_eq!(lc.code, 0, "{lc:?}");
    // The binding is bound (its resources served) before anything uses them.
    t.until("consumer", &path, &["get", "resourceprotections"], |o| {
        o.code == 0
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    (path, lc.stdout.trim().to_string())
}

/// The configuration `holdfast` for workspace `lc`, built by the controller's own
/// builder (`workspace_configuration`: labels, strict mode, containment of every
/// namespace, the workspace route and its matchCondition) for a workspace whose
/// policies route every ConfigMap DELETE; applied as the consumer. (The controller
/// installing it is tested in controller_kcp_kinds.rs, kcp_lifecycle.rs and the
/// demo; here every policy applies at once, without waiting for routes.)
fn install_configuration(t: &Sharded, path: &str, lc: &str) {
    let port = t.env.webhook.as_ref().map(|w| w.port).unwrap_or_default();
    let rp: ResourceProtection = serde_json::from_value(serde_json::json!({
        "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
        "metadata": {"name": "configmaps"},
        "spec": {"resources": [{"version": "v1", "resource": "configmaps"}]}}))
    .unwrap_or_else(|e| panic!("{e}"));
    let mut needs = PolicyNeeds::default();
    needs.add_resource_protection(&rp);
    let needs = needs.with_containment(well_known_scope);
    let opts = InstallOptions {
        target: WebhookTarget::Url(format!("https://127.0.0.1:{port}/validate")),
        ca_bundle: t.env.pki.ca_pem.as_bytes().to_vec(),
        failure_policy: FailurePolicy::Fail,
        timeout_seconds: 10,
    };
    let target = WorkspaceTarget {
        binds: true,
        local: needs,
        ..WorkspaceTarget::default()
    };
    let cfg = workspace_configuration(lc, &ProtectionLabels::default(), true, &target, &opts)
        .unwrap_or_else(|| panic!("a workspace binding holdfast has a configuration"));
    let mut json = serde_json::to_value(&cfg).unwrap_or_else(|e| panic!("{e}"));
    json["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    json["kind"] = "ValidatingWebhookConfiguration".into();
    t.apply("consumer", path, &json.to_string());
}

/// Runs kubectl as the consumer in `path` until `check` accepts the output.
async fn until(
    t: &Sharded,
    path: &str,
    args: &[&str],
    check: impl Fn(&KubectlOutput) -> bool,
) -> KubectlOutput {
    eventually(t.wait.as_secs(), async || {
        let out = t.kubectl("consumer", path, args);
        if check(&out) {
            return Ok(out);
        }
        Err(format!(
            "kubectl {args:?} in {path}: {out:?}\nwebhook: {}",
            log(t)
        ))
    })
    .await
}

/// The outcomes of a story, compared with what was expected; every difference is
/// reported at the end (one run shows them all).
#[derive(Default)]
struct Checks {
    differences: Vec<String>,
}

impl Checks {
    fn same(&mut self, what: &str, expected: &str, actual: &str) {
        if expected != actual {
            self.differences.push(format!(
                "{what}:\n  expected: {expected:?}\n  actual:   {actual:?}"
            ));
        }
    }

    /// Waits until the webhook refuses `kubectl args` as the consumer in `path`;
    /// its message must be `message`, from webhook `hook`.
    async fn refused(&mut self, t: &Sharded, path: &str, args: &[&str], hook: &str, message: &str) {
        self.refused_by_one_of(t, path, args, &[hook], message)
            .await;
    }

    /// Like [`Checks::refused`] where several matching webhooks refuse: the API server
    /// calls them in parallel and reports the refusal that reaches it first, so the
    /// refusal must come from exactly one of `hooks`.
    async fn refused_by_one_of(
        &mut self,
        t: &Sharded,
        path: &str,
        args: &[&str],
        hooks: &[&str],
        message: &str,
    ) {
        // Dry runs until kcp enforces the configuration (it comes back from the
        // cache server, kcp-facts 29), then the request itself, once.
        let mut dry = args.to_vec();
        dry.push("--dry-run=server");
        until(t, path, &dry, |o| {
            o.code != 0 && o.stderr.contains("denied the request")
        })
        .await;
        let out = t.kubectl("consumer", path, args);
        let actual = out.stderr.trim();
        let expected: Vec<String> = hooks
            .iter()
            .map(|hook| {
                format!(
                    "Error from server (Forbidden): admission webhook \"{hook}\" denied the request: {message}"
                )
            })
            .collect();
        if !expected.iter().any(|e| e == actual) {
            self.differences.push(format!(
                "{args:?} in {path}:\n  expected one of: {expected:?}\n  actual:   {actual:?}"
            ));
        }
    }

    fn done(self, t: &Sharded) {
        assert!(
            self.differences.is_empty(),
            "{}\nwebhook: {}",
            self.differences.join("\n"),
            log(t)
        );
    }
}

/// `kubectl args` as the consumer in `path`, which must succeed.
fn ok(t: &Sharded, path: &str, args: &[&str]) -> KubectlOutput {
    let out = t.kubectl("consumer", path, args);
    assert_eq!(
        out.code,
        0,
        "kubectl {args:?} in {path}: {out:?}\nwebhook: {}",
        log(t)
    );
    out
}

/// The label refusal of `what` (`Kind ns/name`), kubectl target `target`.
fn label_refusal(what: &str, target: &str) -> String {
    format!(
        "holdfast: {what} is protected by label holdfast.dev/protected=true (policy: label \
         holdfast.dev/protected), so it cannot be deleted. To delete it, first mark it exempt \
         in its own update, as strict mode is on (kubectl label {target} \
         holdfast.dev/strict-exempt=true, which takes the bypass permission), then remove the \
         label (kubectl label {target} holdfast.dev/protected-), or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    )
}

/// The Events of a `kubectl get events.events.k8s.io -o json`, as `type reason
/// Kind/name`, sorted, without repeats ("" when kubectl failed).
fn event_summary(out: &KubectlOutput) -> String {
    if out.code != 0 {
        return String::new();
    }
    let list: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
    let mut seen: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{} {} {}/{}",
                e["type"].as_str().unwrap_or_default(),
                e["reason"].as_str().unwrap_or_default(),
                e["regarding"]["kind"].as_str().unwrap_or_default(),
                e["regarding"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    seen.sort();
    seen.dedup();
    seen.join(", ")
}

const PROTECTED: &str = "{holdfast.dev/protected: \"true\"}";

#[tokio::test]
async fn every_protection_in_every_consumer_workspace() {
    let mut t = sharded().await.unwrap_or_else(|e| panic!("{e:#}"));
    t.apply("platform", HOLDFAST, &consumer_may_bind());
    let mut args = t.webhook_args("watch");
    args.push("--strict".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    t.env
        .start_webhook(&args)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (a, lc_a) = consumer(&t, "team-a", "root").await;
    let (b, lc_b) = consumer(&t, "team-b", "shard-1").await;
    install_configuration(&t, &a, &lc_a);
    install_configuration(&t, &b, &lc_b);
    let mut c = Checks::default();

    // Label protection in a consumer workspace on each shard: a ConfigMap and a
    // namespace; strict mode guards the label.
    for path in [&a, &b] {
        t.apply("consumer", path, &namespace("vault", PROTECTED));
        t.apply("consumer", path, &configmap("default", "keep", PROTECTED));
        let delete_keep = ["delete", "configmap", "keep", "-n", "default"];
        // The label webhook and the ResourceProtections' webhook (every ConfigMap
        // DELETE) both refuse a labelled ConfigMap; the label webhook and containment a
        // labelled namespace.
        let hooks = ["delete-label-0.holdfast.dev", "policies-0.holdfast.dev"];
        let message = label_refusal("ConfigMap default/keep", "configmaps keep -n default");
        c.refused_by_one_of(&t, path, &delete_keep, &hooks, &message)
            .await;
        let hooks = ["delete-label-0.holdfast.dev", "containment.holdfast.dev"];
        let message = label_refusal("Namespace vault", "namespaces vault");
        let delete_vault = ["delete", "namespace", "vault"];
        c.refused_by_one_of(&t, path, &delete_vault, &hooks, &message)
            .await;
        // Label changes of strictly protected objects reach both the strict label
        // webhook and the break-glass webhook (under --strict).
        let strict_hooks = ["strict-label-0.holdfast.dev", "break-glass.holdfast.dev"];
        let unlabel = [
            "label",
            "configmap",
            "keep",
            "-n",
            "default",
            "holdfast.dev/protected-",
        ];
        let message = "holdfast: ConfigMap default/keep carries the protection label \
             holdfast.dev/protected=true and strict mode is on (policy: strict label \
             holdfast.dev/protected), so the label cannot be removed or changed to a value that \
             does not protect. To unprotect it, first mark it exempt in its own update (kubectl \
             label configmaps keep -n default holdfast.dev/strict-exempt=true, which takes the \
             bypass permission on protections.holdfast.dev), then remove the label.";
        c.refused_by_one_of(&t, path, &unlabel, &strict_hooks, message)
            .await;
        let unlabel = ["label", "namespace", "vault", "holdfast.dev/protected-"];
        let message = "holdfast: Namespace vault carries the protection label \
             holdfast.dev/protected=true and strict mode is on (policy: strict label \
             holdfast.dev/protected), so the label cannot be removed or changed to a value that \
             does not protect. To unprotect it, first mark it exempt in its own update (kubectl \
             label namespaces vault holdfast.dev/strict-exempt=true, which takes the bypass \
             permission on protections.holdfast.dev), then remove the label.";
        c.refused_by_one_of(&t, path, &unlabel, &strict_hooks, message)
            .await;
    }

    // A ResourceProtection of team-a protects team-a's ConfigMaps only.
    for path in [&a, &b] {
        t.apply("consumer", path, &namespace("shop", "{}"));
        t.apply("consumer", path, &configmap("shop", "plain", "{}"));
    }
    t.apply(
        "consumer",
        &a,
        &configmaps_protection("shop-configs", "shop", "Enforce"),
    );
    let message = format!(
        "holdfast: ConfigMap shop/plain is protected by ResourceProtection/shop-configs \
         (logical cluster {lc_a}) (selects configmaps in namespace shop), so it cannot be \
         deleted. To delete it, remove it from the policy (kubectl edit resourceprotection \
         shop-configs), or set the annotation holdfast.dev/skip-protection=true if you are \
         allowed to bypass protection."
    );
    let delete_plain = ["delete", "configmap", "plain", "-n", "shop"];
    c.refused(&t, &a, &delete_plain, "policies-0.holdfast.dev", &message)
        .await;
    let out = ok(&t, &b, &delete_plain);
    c.same(
        "delete in team-b",
        "configmap \"plain\" deleted",
        out.stdout.trim(),
    );
    c.same("delete in team-b (stderr)", "", out.stderr.trim());

    // A Warn policy (team-b) prints its warning and lets the DELETE through.
    t.apply("consumer", &b, &namespace("notes", "{}"));
    t.apply("consumer", &b, &configmap("notes", "memo", "{}"));
    t.apply(
        "consumer",
        &b,
        &configmaps_protection("notes-configs", "notes", "Warn"),
    );
    let dry_run = [
        "delete",
        "configmap",
        "memo",
        "-n",
        "notes",
        "--dry-run=server",
    ];
    until(&t, &b, &dry_run, |o| {
        o.code == 0 && o.stderr.contains("Warning: holdfast:")
    })
    .await;
    let out = ok(&t, &b, &["delete", "configmap", "memo", "-n", "notes"]);
    let warning = format!(
        "Warning: holdfast: ConfigMap notes/memo is protected by ResourceProtection/notes-configs \
         (logical cluster {lc_b}) (selects configmaps in namespace notes), so it cannot be \
         deleted. To delete it, remove it from the policy (kubectl edit resourceprotection \
         notes-configs), or set the annotation holdfast.dev/skip-protection=true if you are \
         allowed to bypass protection."
    );
    c.same("warned delete", &warning, out.stderr.trim());
    c.same(
        "warned delete (stdout)",
        "configmap \"memo\" deleted",
        out.stdout.trim(),
    );

    // An AnchorRule (team-b): ConfigMaps naming an anchor ServiceAccount are
    // protected while it exists, read live in team-b.
    t.apply("consumer", &b, &namespace("app", "{}"));
    t.apply(
        "consumer",
        &b,
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: composite, namespace: app}\n",
    );
    let anchored = "{app.test/composite: composite, app.test/composite-namespace: app}";
    t.apply("consumer", &b, &configmap("app", "data", anchored));
    t.apply(
        "consumer",
        &b,
        "apiVersion: holdfast.dev/v1alpha1\nkind: AnchorRule\nmetadata: {name: composite}\n\
         spec:\n  anchor: {version: v1, resource: serviceaccounts}\n  \
         anchorLabels: {name: app.test/composite, namespace: app.test/composite-namespace}\n  \
         protects:\n  - {version: v1, resource: configmaps}\n",
    );
    let delete_data = ["delete", "configmap", "data", "-n", "app"];
    let message = format!(
        "holdfast: ConfigMap app/data is protected while its anchor serviceaccounts \
         app/composite exists (policy: AnchorRule/composite (logical cluster {lc_b})), so it \
         cannot be deleted. To delete it, delete the anchor, or label this object \
         holdfast.dev/allow-deletion=true."
    );
    c.refused(&t, &b, &delete_data, "policies-0.holdfast.dev", &message)
        .await;
    ok(
        &t,
        &b,
        &["delete", "serviceaccount", "composite", "-n", "app"],
    );
    let out = until(&t, &b, &delete_data, |o| o.code == 0).await;
    c.same(
        "anchor gone",
        "configmap \"data\" deleted",
        out.stdout.trim(),
    );

    // A CriticalService (team-b): its provider stays while ConfigMaps carry its
    // finalizer (counted live in team-b).
    t.apply("consumer", &b, &configmap("app", "provider", "{}"));
    t.apply(
        "consumer",
        &b,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, namespace: app, finalizers: [app.test/cleanup]}\n",
    );
    t.apply(
        "consumer",
        &b,
        "apiVersion: holdfast.dev/v1alpha1\nkind: CriticalService\nmetadata: {name: cleanup}\n\
         spec:\n  provider: {group: \"\", resource: configmaps, namespace: app, name: provider}\n  \
         criteria:\n  - type: Finalizer\n    finalizer: {group: \"\", resource: configmaps, finalizerName: app.test/cleanup}\n",
    );
    let delete_provider = ["delete", "configmap", "provider", "-n", "app"];
    let message = format!(
        "holdfast: ConfigMap app/provider provides a critical service (policy: \
         CriticalService/cleanup (logical cluster {lc_b})) and cannot be deleted while 1 \
         configmaps still carries finalizer app.test/cleanup. To delete it, wait until those \
         are gone (the service finalizes them), or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    );
    c.refused(
        &t,
        &b,
        &delete_provider,
        "policies-0.holdfast.dev",
        &message,
    )
    .await;
    let unfinalize = r#"{"metadata":{"finalizers":null}}"#;
    ok(
        &t,
        &b,
        &[
            "patch",
            "configmap",
            "held",
            "-n",
            "app",
            "--type=merge",
            "-p",
            unfinalize,
        ],
    );
    let out = until(&t, &b, &delete_provider, |o| o.code == 0).await;
    c.same(
        "criteria met",
        "configmap \"provider\" deleted",
        out.stdout.trim(),
    );

    // Containment: a namespace holding a labelled ConfigMap.
    t.apply("consumer", &a, &namespace("box", "{}"));
    t.apply("consumer", &a, &configmap("box", "held", PROTECTED));
    let message = "holdfast: Namespace box holds objects that are protected from deletion: \
         ConfigMap box/held (label) (policy: containment), so it cannot be deleted: that would \
         leave it half-deleted. To delete it, first lift the protection of those objects (or \
         delete them), or set the annotation holdfast.dev/skip-protection=true if you are \
         allowed to bypass protection on the namespace.";
    c.refused(
        &t,
        &a,
        &["delete", "namespace", "box"],
        "containment.holdfast.dev",
        message,
    )
    .await;

    // Break-glass, asked in the consumer's workspace: refused without bypass,
    // allowed once it is granted there.
    let annotate = |ns: &'static str, name: &'static str| {
        [
            "annotate",
            "configmap",
            name,
            "-n",
            ns,
            "holdfast.dev/skip-protection=true",
        ]
    };
    let message = "holdfast: user \"consumer\" may not add annotation \
         holdfast.dev/skip-protection to ConfigMap default/keep: it is protected in strict mode, \
         and lifting that protection needs the permission to bypass it (verb bypass on \
         protections.holdfast.dev in namespace default). Ask someone who holds it.";
    // Both the strict label webhook and the break-glass webhook see the marker added.
    c.refused_by_one_of(
        &t,
        &a,
        &annotate("default", "keep"),
        &["strict-label-0.holdfast.dev", "break-glass.holdfast.dev"],
        message,
    )
    .await;
    t.apply("platform", &a, &consumer_may_bypass());
    until(&t, &a, &annotate("default", "keep"), |o| o.code == 0).await;
    let out = ok(&t, &a, &["delete", "configmap", "keep", "-n", "default"]);
    c.same(
        "break-glass delete",
        "configmap \"keep\" deleted",
        out.stdout.trim(),
    );
    // Emptied, the namespace goes.
    ok(&t, &a, &annotate("box", "held"));
    ok(&t, &a, &["delete", "configmap", "held", "-n", "box"]);
    let out = ok(&t, &a, &["delete", "namespace", "box", "--wait=false"]);
    c.same(
        "emptied namespace",
        "namespace \"box\" deleted",
        out.stdout.trim(),
    );

    // The Events, in the consumer's workspace (a namespace's in `default`).
    let expected = "Warning BreakGlass ConfigMap/keep, Warning BreakGlassGranted ConfigMap/keep, \
         Warning DeletionBlocked ConfigMap/keep, Warning DeletionBlocked Namespace/box, \
         Warning DeletionBlocked Namespace/vault";
    let get_events = ["get", "events.events.k8s.io", "-n", "default", "-o", "json"];
    let events = until(&t, &a, &get_events, |o| event_summary(o) == expected).await;
    c.same("events in team-a", expected, &event_summary(&events));

    // A workspace that does not bind holdfast.dev is untouched.
    let cpath = t.create_workspace("root", "team-c", "shard-1");
    t.apply("platform", &cpath, &consumer_edit());
    t.apply("consumer", &cpath, &configmap("default", "keep", PROTECTED));
    let out = ok(
        &t,
        &cpath,
        &["get", "validatingwebhookconfigurations", "-o", "name"],
    );
    c.same("configurations in team-c", "", out.stdout.trim());
    let out = ok(
        &t,
        &cpath,
        &["delete", "configmap", "keep", "-n", "default"],
    );
    c.same(
        "delete in team-c",
        "configmap \"keep\" deleted",
        out.stdout.trim(),
    );
    c.done(&t);
}

/// On a provider's export route (`/kcp/<lc>/<export>`), label protection applies
/// only to the objects of workspaces that bind holdfast.dev (known from the
/// APIBindings index); a workspace that binds only the provider's export gets the
/// provider's DependencyRules and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn on_an_export_route_labels_protect_only_workspaces_that_bind_holdfast() {
    let mut t = sharded().await.unwrap_or_else(|e| panic!("{e:#}"));
    t.apply("platform", HOLDFAST, &consumer_may_bind());
    let with = t.consumer("with-holdfast", "root");
    t.apply("consumer", &with, holdfast_binding());
    let without = t.consumer("without-holdfast", "shard-1");
    let controller = t
        .start_holdfast("controller", "watch")
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    t.apply("provider", COMPUTE, &vm_vpc_rule("vm-dependencies"));
    t.rule_ready(COMPUTE, "vm-dependencies")
        .await
        .unwrap_or_else(|e| panic!("{e:#}\ncontroller: {}", controller.log()));
    let vpc = "apiVersion: network.test.io/v1\nkind: VPC\n\
               metadata: {name: tagged, namespace: default, labels: {holdfast.dev/protected: \"true\"}}\n";
    let compute = t.logical_cluster(COMPUTE);
    let mut c = Checks::default();
    for path in [&with, &without] {
        t.apply("consumer", path, vpc);
    }
    let delete = ["delete", "vpc", "tagged", "-n", "default"];
    let message = "holdfast: VPC default/tagged is protected by label \
         holdfast.dev/protected=true (policy: label holdfast.dev/protected), so it cannot be \
         deleted. To delete it, remove the label (kubectl label vpcs.network.test.io tagged -n \
         default holdfast.dev/protected-), or set the annotation \
         holdfast.dev/skip-protection=true if you are allowed to bypass protection.";
    // The provider binds holdfast.dev: its configuration has the export's label
    // webhook (for workspaces binding holdfast) beside the rules' webhook, and both
    // see a labelled VPC's DELETE.
    let hooks = [
        "network.test.io.policies.holdfast.dev",
        "network.test.io.delete-label-0.holdfast.dev",
    ];
    c.refused_by_one_of(&t, &with, &delete, &hooks, message)
        .await;
    // The workspace without holdfast: allowed once the index has listed every
    // endpoint (until then it counts as binding: refused, never skipped).
    let dry_run = [
        "delete",
        "vpc",
        "tagged",
        "-n",
        "default",
        "--dry-run=server",
    ];
    until(&t, &without, &dry_run, |o| o.code == 0).await;
    let out = ok(&t, &without, &delete);
    c.same(
        "delete without holdfast",
        "vpc.network.test.io \"tagged\" deleted",
        out.stdout.trim(),
    );
    // The provider's rule still applies there: a VM referencing a VPC refuses.
    t.apply("consumer", &without, &vpc.replace("tagged", "used"));
    t.apply(
        "consumer",
        &without,
        "apiVersion: compute.test.io/v1\nkind: VirtualMachine\nmetadata: {name: vm, namespace: default}\nspec: {vpcRef: {name: used}}\n",
    );
    c.refused_by_one_of(
        &t,
        &without,
        &["delete", "vpc", "used", "-n", "default"],
        &hooks,
        &format!(
            "holdfast: VPC default/used is still referenced by VirtualMachine default/vm \
             (policy: DependencyRule/vm-dependencies (logical cluster {compute}), field \
             .spec.vpcRef.name of virtualmachines.compute.test.io), so it cannot be deleted. To \
             delete it, delete or change the dependents first, or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        ),
    )
    .await;
    c.done(&t);
}
