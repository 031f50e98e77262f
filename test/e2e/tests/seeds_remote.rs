//! Seed promises across clusters and resource sets, end to end with the real
//! binaries running as the shipped ServiceAccounts (the manifests' RBAC applied to
//! the simulator, which enforces it) and the real kubectl:
//!
//! - seed 000: an AnchorRule whose composites live in another cluster (a "control
//!   cluster" simulator, named by a kubeconfig Secret in holdfast's namespace of the
//!   "service cluster" holding the protected objects and holdfast: a simulator, or
//!   the cluster of `HOLDFAST_E2E_KUBECONFIG`; the control cluster is always a
//!   local simulator, which holdfast, running on this host, reaches).

use holdfast_e2e::{
    Env,
    controller::{ControllerProcess, condition},
    rbac,
    steps::eventually,
    steps::query,
    steps::words,
    steps::{allowed_until, refused_until},
};
use holdfast_sim::SimConfig;
use serde_json::Value;
use std::time::Duration;

/// A sim (or the cluster of `HOLDFAST_E2E_KUBECONFIG`) with the shipped manifests
/// applied, and the webhook and the controller running as their ServiceAccounts.
async fn shipped_stack() -> (Env, ControllerProcess) {
    let s = holdfast_e2e::controller::shipped_stack(
        holdfast_e2e::with_service_accounts(SimConfig::default()),
        &[],
        &[],
    )
    .await
    .expect("holdfast as shipped");
    (s.env, s.controller)
}

/// Waits until condition `type_` of the policy has `reason`; returns it.
async fn wait_reason(env: &Env, query: [&str; 4]) -> Value {
    wait_reason_or(env, query, &|| String::new()).await
}

/// [`wait_reason`], printing `context()` (a log) when it never comes.
async fn wait_reason_or(
    env: &Env,
    [kind, name, type_, reason]: [&str; 4],
    context: &dyn Fn() -> String,
) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let c = condition(env, kind, name, type_).expect("kubectl");
        if let Some(c) = &c
            && c["reason"] == reason
        {
            return c.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{kind}/{name}: condition {type_} never had reason {reason}; last: {c:?}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the DELETE of ConfigMap `app`/`cm` is refused (exactly) because
/// its anchor, composite pg-1, exists in the control cluster.
async fn refused_while_pg_1_exists(env: &Env, app: &str, cm: &str) {
    let refusal = holdfast_e2e::denied_by(
        "policies-0.holdfast.dev",
        &format!(
            "holdfast: ConfigMap {app}/{cm} is protected while its anchor \
             xvshnpostgresqls.vshn.appcat.vshn.io pg-1 exists in the cluster of anchor source \
             Secret holdfast-system/control-cluster (policy: AnchorRule/remote-composites), so \
             it cannot be deleted. To delete it, delete the anchor, or label this object \
             holdfast.dev/allow-deletion=true."
        ),
    );
    let dry_run = format!("delete configmap {cm} -n {app} --dry-run=server");
    refused_until(env, &words(&dry_run), &refusal).await;
}

/// A control cluster serving the composites' CRD, holding composites `names`: a
/// simulator of the test's own, also when the service cluster is the cluster of
/// `HOLDFAST_E2E_KUBECONFIG` (holdfast runs on this host and reaches it there).
async fn control_cluster(names: &[&str]) -> Env {
    let control = Env::start_with(SimConfig::default())
        .await
        .expect("control cluster");
    control
        .apply(&holdfast_e2e::fixtures::crd(
            "vshn.appcat.vshn.io",
            "xvshnpostgresqls",
            "XVSHNPostgreSQL",
            false,
        ))
        .expect("composite CRD");
    control.wait_served(&["xvshnpostgresqls"]).await;
    for name in names {
        control
            .apply(&format!(
                "apiVersion: vshn.appcat.vshn.io/v1\nkind: XVSHNPostgreSQL\nmetadata: {{name: {name}}}\n"
            ))
            .expect("composite");
    }
    control
}

/// Points Secret holdfast-system/control-cluster at `control` (created or replaced).
fn put_kubeconfig(env: &Env, control: &Env) {
    let kubeconfig = std::fs::read_to_string(&control.kubeconfig).expect("kubeconfig");
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "control-cluster", "namespace": "holdfast-system"},
        "stringData": {"kubeconfig": kubeconfig},
    });
    env.apply(&secret.to_string()).expect("Secret");
}

const BYPASS_HINT: &str = "or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection";

/// ConfigMap `ns`/`name` whose label `key` names the composite `composite`.
fn configmap(ns: &str, name: &str, key: &str, composite: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    \
         {key}: {composite}\ndata: {{a: b}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_000_composite_in_another_cluster() {
    // The control cluster: the composites.
    let control = control_cluster(&["pg-1"]).await;
    // The service cluster: holdfast, the protected objects, the kubeconfig Secret.
    let (env, controller) = shipped_stack().await;
    put_kubeconfig(&env, &control);
    let app = env.namespace("app").expect("namespace");
    let app = app.as_str();
    // The rules protect ConfigMaps in every namespace: on a cluster, the label
    // keys naming the anchors are the test's own, so the cluster's own ConfigMaps
    // are never held.
    let key = rbac::own_name("appcat.vshn.io/composite-name");
    let anchored = |name: &str, composite: &str| configmap(app, name, &key, composite);
    env.apply(&anchored("cm-1", "pg-1")).expect("cm-1");
    env.apply(&anchored("cm-2", "pg-2")).expect("cm-2");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: AnchorRule\nmetadata: {{name: remote-composites}}\nspec:\n  \
         anchor: {{group: vshn.appcat.vshn.io, version: v1, resource: xvshnpostgresqls}}\n  \
         anchorLabels: {{name: {key}}}\n  \
         anchorSource:\n    kubeconfigSecretRef: {{name: control-cluster, namespace: holdfast-system}}\n  \
         protects:\n  - {{version: v1, resource: configmaps}}\n",
    ))
    .expect("anchor rule");

    // Ready once the source is listed; the anchor type is served there only.
    let ready = controller
        .wait_condition(&env, ["anchorrule", "remote-composites", "Ready", "True"])
        .await;
    assert_eq!(ready["reason"], "Enforced", "{ready}");
    let reachable = condition(&env, "anchorrule", "remote-composites", "SourceReachable")
        .expect("kubectl")
        .expect("SourceReachable condition");
    assert_eq!(
        (
            &reachable["status"],
            &reachable["reason"],
            &reachable["message"]
        ),
        (
            &"True".into(),
            &"Synced".into(),
            &"xvshnpostgresqls.vshn.appcat.vshn.io is listed in the cluster of anchor source Secret holdfast-system/control-cluster".into()
        ),
        "{reachable}"
    );
    // Both binaries read that Secret through the Role the controller keeps, which
    // names exactly the Secrets AnchorRules use.
    let role = env
        .get_json(&["role", "holdfast-anchor-sources", "-n", "holdfast-system"])
        .expect("Role");
    assert_eq!(
        role["rules"],
        serde_json::json!([{
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["control-cluster"],
            "verbs": ["get"],
        }]),
        "{role}"
    );

    // Refused while the composite exists in the control cluster.
    refused_while_pg_1_exists(&env, app, "cm-1").await;
    // No composite pg-2 there: that object is not protected.
    env.prints(
        &["delete", "configmap", "cm-2", "-n", app],
        "configmap \"cm-2\" deleted\n",
    );

    // The composite deleted in the control cluster: the object may go.
    control.run(&["delete", "xvshnpostgresql", "pg-1"]);
    let out = allowed_until(&env, &["delete", "configmap", "cm-1", "-n", app]).await;
    assert_eq!(out.stdout, "configmap \"cm-1\" deleted\n", "{out:?}");
    assert!(!env.exists(&["configmap", "cm-1", "-n", app]).expect("get"));

    // The control cluster stopped: refused (fail closed), naming the source.
    env.apply(&anchored("cm-3", "pg-1")).expect("cm-3");
    allowed_until(
        &env,
        &words(&format!("delete configmap cm-3 -n {app} --dry-run=server")),
    )
    .await;
    drop(control);
    let unreachable = holdfast_e2e::denied_by(
        "policies-0.holdfast.dev",
        &format!(
            "holdfast: cannot read the anchor xvshnpostgresqls.vshn.appcat.vshn.io pg-1 of \
             ConfigMap {app}/cm-3 (policy: AnchorRule/remote-composites): anchor source Secret \
             holdfast-system/control-cluster is unreachable; refusing rather than risk it, \
             retry later, {BYPASS_HINT}."
        ),
    );
    refused_until(
        &env,
        &["delete", "configmap", "cm-3", "-n", app],
        &unreachable,
    )
    .await;
    assert!(env.exists(&["configmap", "cm-3", "-n", app]).expect("get"));
    // An object naming no anchor is still deletable.
    env.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: plain, namespace: {app}}}\n"
    ))
    .expect("plain");
    env.run(&["delete", "configmap", "plain", "-n", app]);
    // The rule says so.
    let down = controller
        .wait_condition(
            &env,
            query("anchorrule remote-composites SourceReachable False"),
        )
        .await;
    assert_eq!(down["reason"], "Unreachable", "{down}");
    let message = down["message"].as_str().unwrap_or_default();
    assert!(
        message
            .starts_with("anchor source Secret holdfast-system/control-cluster is unreachable: ")
            && message.len()
                > "anchor source Secret holdfast-system/control-cluster is unreachable: ".len(),
        "{down}"
    );
    let ready = condition(&env, "anchorrule", "remote-composites", "Ready")
        .expect("kubectl")
        .expect("Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&"False".into(), &"SourceUnreachable".into()),
        "{ready}"
    );

    // The Secret pointed at another control cluster holding pg-1: read again, listed
    // there, refused as protected; then at one without it (the Secret changes while
    // the source is synced): listed again, allowed.
    let control2 = control_cluster(&["pg-1"]).await;
    put_kubeconfig(&env, &control2);
    refused_while_pg_1_exists(&env, app, "cm-3").await;
    wait_reason(
        &env,
        query("anchorrule remote-composites SourceReachable Synced"),
    )
    .await;
    let control3 = control_cluster(&[]).await;
    put_kubeconfig(&env, &control3);
    let out = allowed_until(&env, &["delete", "configmap", "cm-3", "-n", app]).await;
    assert_eq!(out.stdout, "configmap \"cm-3\" deleted\n", "{out:?}");
    drop(control2);

    // A Secret outside holdfast's namespace is never read (it names a reachable
    // control cluster, and still counts for nothing).
    env.run(&[
        "create",
        "secret",
        "generic",
        "elsewhere",
        "-n",
        app,
        &format!(
            "--from-file=kubeconfig={}",
            control3.kubeconfig.to_string_lossy()
        ),
    ]);
    let foreign_key = rbac::own_name("example.com/composite");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: AnchorRule\nmetadata: {{name: foreign-secret}}\nspec:\n  \
         anchor: {{group: vshn.appcat.vshn.io, version: v1, resource: xvshnpostgresqls}}\n  \
         anchorLabels: {{name: {foreign_key}}}\n  \
         anchorSource:\n    kubeconfigSecretRef: {{name: elsewhere, namespace: {app}}}\n  \
         protects:\n  - {{version: v1, resource: configmaps}}\n",
    ))
    .expect("anchor rule");
    env.apply(&configmap(app, "cm-4", &foreign_key, "x"))
        .expect("cm-4");
    let unusable = wait_reason(
        &env,
        query("anchorrule foreign-secret SourceReachable Unusable"),
    )
    .await;
    assert_eq!(
        (&unusable["reason"], &unusable["message"]),
        (
            &"Unusable".into(),
            &format!("anchor source Secret {app}/elsewhere cannot be used: its Secret must be in holdfast's namespace holdfast-system").into()
        ),
        "{unusable}"
    );
    // The configuration now splits the policies over two webhooks; either refuses.
    let message = format!(
        "holdfast: cannot read the anchor xvshnpostgresqls.vshn.appcat.vshn.io x of \
         ConfigMap {app}/cm-4 (policy: AnchorRule/foreign-secret): anchor source Secret \
         {app}/elsewhere cannot be used: its Secret must be in holdfast's namespace \
         holdfast-system; refusing rather than risk it, retry later, {BYPASS_HINT}."
    );
    let by = |hook: &str| holdfast_e2e::denied_by(hook, &message);
    env.kubectl_until(&["delete", "configmap", "cm-4", "-n", app], 30, |o| {
        o.refused_with(&by("policies-0.holdfast.dev"))
            || o.refused_with(&by("policies-1.holdfast.dev"))
    })
    .await
    .unwrap_or_else(|e| panic!("cm-4 never refused: {e:#}\nwebhook: {}", env.webhook_log()));
    assert!(env.exists(&["configmap", "cm-4", "-n", app]).expect("get"));
}

/// Waits until the live configuration has a policies webhook routing every
/// resource (`*` of every group); returns that webhook.
async fn wildcard_webhook(env: &Env) -> Value {
    eventually(30, async || {
        let cfg = holdfast_e2e::controller::webhook_configuration(env).expect("kubectl");
        let hook = cfg.as_ref().and_then(|c| {
            c["webhooks"].as_array().into_iter().flatten().find(|w| {
                w["name"]
                    .as_str()
                    .is_some_and(holdfast_shared::webhookconfig::is_policies_webhook)
                    && w["rules"][0]["apiGroups"] == serde_json::json!(["*"])
            })
        });
        hook.cloned()
            .ok_or_else(|| format!("no wildcard policies webhook; last: {cfg:?}"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_001_protect_everything_in_a_namespace() {
    let (env, controller) = shipped_stack().await;
    env.apply_crds(&holdfast_e2e::fixtures::crd(
        "example.com",
        "widgets",
        "Widget",
        true,
    ))
    .expect("crd");
    env.wait_served(&["widgets"]).await;
    let shop = env.namespace("shop").expect("namespace");
    let other = env.namespace("other").expect("namespace");
    for ns in [&shop, &other] {
        env.run(&["create", "configmap", "cm", "-n", ns]);
        env.run(&["create", "secret", "generic", "s", "-n", ns]);
    }
    env.apply(&format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w1, namespace: {shop}}}\n"
    ))
    .expect("widget");
    env.apply(&format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: ev, namespace: {shop}}}\n\
         involvedObject: {{kind: ConfigMap, name: cm, namespace: {shop}}}\nreason: Test\nmessage: m\n",
    ))
    .expect("event");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: everything-in-shop}}\n\
         spec:\n  resources:\n  - group: \"*\"\n    version: \"*\"\n    resource: \"*\"\n    namespace: {shop}\n    \
         exclude:\n    - {{group: \"\", resource: secrets}}\n",
    ))
    .expect("policy");
    let ready = controller
        .wait_condition(
            &env,
            ["resourceprotection", "everything-in-shop", "Ready", "True"],
        )
        .await;
    assert_eq!(ready["reason"], "Enforced", "{ready}");

    // One rule over every resource, no subresources, the never-selected types and
    // the exclusion left out by a matchCondition, only namespace shop.
    let hook = wildcard_webhook(&env).await;
    assert_eq!(
        hook["rules"],
        serde_json::json!([{"operations": ["DELETE"], "apiGroups": ["*"], "apiVersions": ["*"],
            "resources": ["*"], "scope": "*"}]),
        "{hook}"
    );
    assert_eq!(
        hook["matchConditions"],
        serde_json::json!([{"name": "not-excluded", "expression":
            "!((request.resource.group == '' && request.resource.resource == 'endpoints') \
             || (request.resource.group == '' && request.resource.resource == 'events') \
             || (request.resource.group == '' && request.resource.resource == 'secrets') \
             || (request.resource.group == 'authentication.k8s.io' && request.resource.resource == 'selfsubjectreviews') \
             || (request.resource.group == 'authentication.k8s.io' && request.resource.resource == 'tokenreviews') \
             || (request.resource.group == 'authorization.k8s.io' && request.resource.resource == 'localsubjectaccessreviews') \
             || (request.resource.group == 'authorization.k8s.io' && request.resource.resource == 'selfsubjectaccessreviews') \
             || (request.resource.group == 'authorization.k8s.io' && request.resource.resource == 'selfsubjectrulesreviews') \
             || (request.resource.group == 'authorization.k8s.io' && request.resource.resource == 'subjectaccessreviews') \
             || (request.resource.group == 'coordination.k8s.io' && request.resource.resource == 'leases') \
             || (request.resource.group == 'discovery.k8s.io' && request.resource.resource == 'endpointslices') \
             || (request.resource.group == 'events.k8s.io' && request.resource.resource == 'events') \
             || request.resource.group == 'holdfast.dev')"}]),
        "{hook}"
    );
    assert_eq!(
        hook["namespaceSelector"],
        serde_json::json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
            "operator": "In", "values": [shop]}]}),
        "{hook}"
    );

    // A ConfigMap and a custom resource in shop: refused.
    let refusal = |what: &str, gr: &str, kind_arg: &str| {
        (
            holdfast_e2e::denied_by(
                hook["name"].as_str().unwrap_or_default(),
                &format!(
                    "holdfast: {what} is protected by ResourceProtection/everything-in-shop \
                     (selects every resource, {gr} among them in namespace {shop}), so it cannot \
                     be deleted. To delete it, remove it from the policy (kubectl edit \
                     resourceprotection everything-in-shop), {BYPASS_HINT}."
                ),
            ),
            kind_arg.to_string(),
        )
    };
    for (text, kind) in [
        refusal(
            &format!("ConfigMap {shop}/cm"),
            "configmaps",
            "configmap/cm",
        ),
        refusal(
            &format!("Widget {shop}/w1"),
            "widgets.example.com",
            "widget/w1",
        ),
    ] {
        refused_until(&env, &["delete", &kind, "-n", &shop], &text).await;
        assert!(env.exists(&[&kind, "-n", &shop]).expect("get"), "{kind}");
    }
    // Excluded, never selected by a wildcard, or in another namespace: deletable.
    for (kind, ns) in [
        ("secret/s", &shop),
        ("event/ev", &shop),
        ("configmap/cm", &other),
        ("secret/s", &other),
    ] {
        let out = env.attempt(&["delete", kind, "-n", ns]);
        assert_eq!(out.code, 0, "{kind} in {ns}: {out:?}");
        assert!(
            !env.exists(&[kind, "-n", ns]).expect("get"),
            "{kind} in {ns}"
        );
    }
    // Namespace shop holds protected objects: it is not half-deleted.
    // Every object counts, the ones the cluster puts in every namespace too. (Until
    // the webhook may read the new Widget type, it refuses as "not indexed yet".)
    refused_until(
        &env,
        &["delete", "namespace", &shop],
        &holdfast_e2e::denied_by(
            "containment.holdfast.dev",
            &format!(
                "holdfast: Namespace {shop} holds objects that are protected from deletion: \
                 ConfigMap {shop}/cm (ResourceProtection/everything-in-shop), ConfigMap \
                 {shop}/kube-root-ca.crt (ResourceProtection/everything-in-shop), ServiceAccount \
                 {shop}/default (ResourceProtection/everything-in-shop), Widget {shop}/w1 \
                 (ResourceProtection/everything-in-shop) (policy: containment), so it cannot be \
                 deleted: that would leave it half-deleted. To delete it, first lift the \
                 protection of those objects (or delete them), {BYPASS_HINT} on the namespace."
            ),
        ),
    )
    .await;
    assert!(env.exists(&["namespace", &shop]).expect("get"));
    // The policy itself stays deletable (holdfast's own types are never selected).
    env.run(&["delete", "resourceprotection", "everything-in-shop"]);
    allowed_until(&env, &["delete", "configmap", "cm", "-n", &shop]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resources_never_sent_to_a_webhook_are_named_in_the_status() {
    let (env, controller) = shipped_stack().await;
    let ns = env.default_namespace().expect("namespace");
    // A group served by an aggregated API, as metrics-server registers
    // metrics.k8s.io: a group of the test's own (a cluster's metrics server may own
    // that one), its service one that does not exist, in the test's namespace.
    let group = holdfast_e2e::unique_name("metrics").replace('-', "") + ".test.io";
    let apiservice = format!("v1beta1.{group}");
    if let Some(run) = &env.cluster {
        run.remove_later("apiservice", &apiservice);
    }
    env.apply(&format!(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {{name: {apiservice}}}\n\
         spec:\n  group: {group}\n  version: v1beta1\n  groupPriorityMinimum: 100\n  versionPriority: 100\n  \
         insecureSkipTLSVerify: true\n  service: {{name: metrics-server, namespace: {ns}, port: 443}}\n",
    ))
    .expect("APIService");
    // Its requests are proxied, never admitted: an API server with no reachable
    // backend answers 503 without any webhook being called.
    let out = env.attempt(&words(&format!(
        "get --raw /apis/{group}/v1beta1/namespaces/{ns}/pods"
    )));
    assert_eq!(out.code, 1, "{out:?}");
    // (The ConfigMaps it protects are those of the test's namespace: on a cluster,
    // never the cluster's own.)
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: pod-metrics}}\n\
         spec:\n  resources:\n  - {{group: {group}, version: v1beta1, resource: pods}}\n  \
         - {{version: v1, resource: configmaps, namespace: {ns}}}\n",
    ))
    .expect("policy");
    env.apply(&format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: events}}\n\
         spec:\n  resources:\n  - {{version: v1, resource: events, namespace: {ns}}}\n",
    ))
    .expect("policy");
    let why = format!(
        "DELETEs of pods.{group} never reach an admission webhook: group {group} is served by \
         APIService {apiservice}, an aggregated API whose requests the API server proxies \
         without calling webhooks"
    );
    let installed = wait_reason_or(
        &env,
        query("resourceprotection pod-metrics Installed NotAdmissionControlled"),
        &|| format!("controller: {}", controller.log()),
    )
    .await;
    assert_eq!(
        (&installed["status"], &installed["message"]),
        (&"False".into(), &why.as_str().into()),
        "{installed}\ncontroller: {}",
        controller.log()
    );
    let ready = condition(&env, "resourceprotection", "pod-metrics", "Ready")
        .expect("kubectl")
        .expect("Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"], &ready["message"]),
        (
            &"False".into(),
            &"NotAdmissionControlled".into(),
            &format!("not every named resource can be protected: {why}").into()
        ),
        "{ready}"
    );
    // And indeed: a DELETE there, routed by the configuration, is answered by the
    // (unreachable) aggregated API without a review reaching the webhook.
    let before = env.webhook_reviews("DELETE").await.expect("metrics");
    let out = env.attempt(&words(&format!(
        "delete --raw /apis/{group}/v1beta1/namespaces/{ns}/pods/p"
    )));
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            1,
            "Error from server (ServiceUnavailable): the server is currently unable to handle the request\n"
        ),
        "{out:?}"
    );
    assert_eq!(
        env.webhook_reviews("DELETE").await.expect("metrics"),
        before
    );
    // Not invalid: the resource is simply out of the webhooks' reach.
    let invalid = condition(&env, "resourceprotection", "pod-metrics", "Invalid")
        .expect("kubectl")
        .expect("Invalid");
    assert_eq!(invalid["status"], "False", "{invalid}");
    // The configmaps it names are still protected.
    env.run(&["create", "configmap", "kept"]);
    refused_until(
        &env,
        &["delete", "configmap", "kept"],
        &holdfast_e2e::denied_by(
            "policies-0.holdfast.dev",
            &format!(
                "holdfast: ConfigMap {ns}/kept is protected by ResourceProtection/pod-metrics \
                 (selects configmaps in namespace {ns}), so it cannot be deleted. To delete it, remove it from the \
                 policy (kubectl edit resourceprotection pod-metrics), {BYPASS_HINT}."
            ),
        ),
    )
    .await;
    // (The count does move for a DELETE that is admitted.)
    assert!(env.webhook_reviews("DELETE").await.expect("metrics") > before);
    // Events expire without a DELETE.
    let events = wait_reason(
        &env,
        query("resourceprotection events Installed NotAdmissionControlled"),
    )
    .await;
    assert_eq!(
        events["message"],
        "events expire from storage when their time to live runs out (the API server's \
         --event-ttl, 1h by default) without a DELETE, so no webhook sees it; only explicit \
         DELETEs are refused",
        "{events}"
    );
    // The APIService gone, nothing serves the group's pods: the policy names an
    // unknown resource, like any misspelled one.
    env.run(&["delete", "apiservice", &apiservice]);
    let invalid = wait_reason(
        &env,
        query("resourceprotection pod-metrics Invalid UnknownResource"),
    )
    .await;
    assert_eq!(invalid["status"], "True", "{invalid}");
}
