//! AdmissionReviews sent by holdfast-sim compared field by field with the ones a real
//! kube-apiserver POSTed for the same operations (apiserver-captures/admission/*.json).

mod common;

use common::*;
use holdfast_sim::{Sim, SimConfig};
use serde_json::{Value, json};

fn config(hook: &TestWebhook) -> Value {
    let rules = json!([{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": ["", "apps"],
                        "apiVersions": ["*"], "resources": ["namespaces", "configmaps", "deployments"]}]);
    recording_config("record", "record.capture.test", hook, rules)
}

/// Compares one recorded review with a capture file, ignoring uids, timestamps,
/// resourceVersions and managedFields.
fn assert_matches(got: &Recorded, capture: &str) {
    let want = admission_capture(capture);
    assert_eq!(
        got.path,
        want["path"].as_str().unwrap_or(""),
        "{capture}: path"
    );
    for h in ["Accept", "Content-Type", "User-Agent"] {
        let ours = got
            .headers
            .get(&h.to_ascii_lowercase())
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            ours,
            want["headers"][h].as_str().unwrap_or(""),
            "{capture}: header {h}"
        );
    }
    assert_eq!(
        got.review["apiVersion"], want["review"]["apiVersion"],
        "{capture}: apiVersion"
    );
    assert_eq!(
        got.review["kind"], want["review"]["kind"],
        "{capture}: kind"
    );
    let g = normalize(&got.review["request"]);
    let w = normalize(&want["review"]["request"]);
    let keys: std::collections::BTreeSet<&String> = g
        .as_object()
        .into_iter()
        .flat_map(|m| m.keys())
        .chain(w.as_object().into_iter().flat_map(|m| m.keys()))
        .collect();
    for k in keys {
        assert_eq!(
            g.get(k),
            w.get(k),
            "{capture}: request.{k} differs\n ours: {}\n real: {}",
            g,
            w
        );
    }
}

/// The reviews recorded since the last call, waiting until `n` arrived.
async fn take(hook: &TestWebhook, n: usize) -> Vec<Recorded> {
    wait_until(&format!("{n} admission reviews"), || {
        hook.reviews().len() >= n
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let r = hook.reviews();
    hook.clear();
    r
}

/// Runs kubectl `line`, expecting exit `code`, and compares the one review it caused
/// with `capture`.
async fn reviewed(k: &Kubectl, hook: &TestWebhook, line: &str, code: i32, capture: &str) {
    let out = k.sh(line);
    assert_eq!(out.code, code, "kubectl {line}: {out:?}");
    assert_matches(&take(hook, 1).await[0], capture);
}

/// Creates namespace `ns` and compares its CREATE review and that of its
/// kube-root-ca.crt ConfigMap (which kube-controller-manager publishes) with the
/// captures numbered `ns_capture` and `ca_capture`.
async fn namespace_created(
    k: &Kubectl,
    hook: &TestWebhook,
    ns: &str,
    ns_capture: &str,
    ca_capture: &str,
) {
    k.ok(&format!("create ns {ns}"));
    let r = take(hook, 2).await;
    assert_matches(
        find(&r, "CREATE", "namespaces", ns),
        &format!("{ns_capture}-create-namespaces-{ns}.json"),
    );
    assert_matches(
        find(&r, "CREATE", "configmaps", "kube-root-ca.crt"),
        &format!("{ca_capture}-create-configmaps-kube-root-ca.crt.json"),
    );
}

/// Compares the request fields a review's object does not change with capture `n`.
fn assert_request_fields(got: &Recorded, want: &Value, n: &str) {
    for f in [
        "options",
        "name",
        "namespace",
        "kind",
        "resource",
        "userInfo",
        "dryRun",
    ] {
        assert_eq!(
            got.review["request"][f], want["review"]["request"][f],
            "{n}: request.{f}"
        );
    }
}

fn find<'a>(reviews: &'a [Recorded], op: &str, resource: &str, name: &str) -> &'a Recorded {
    reviews
        .iter()
        .find(|r| {
            let req = &r.review["request"];
            let n = req["name"]
                .as_str()
                .or(req["oldObject"]["metadata"]["name"].as_str())
                .unwrap_or("");
            req["operation"] == op && req["resource"]["resource"] == resource && n == name
        })
        .unwrap_or_else(|| panic!("no {op} review of {resource} {name} among {reviews:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_reviews_match_real_apiserver() {
    let (sim, k) = start_with_kubectl().await;
    let hook = TestWebhook::start(&[], capture_policy()).await;
    k.apply_ok(&config(&hook).to_string());

    // CREATE namespace (+ the kube-root-ca.crt ConfigMap kube-controller-manager publishes).
    namespace_created(&k, &hook, "cap", "005", "007").await;

    // CREATE / UPDATE (label, unlabel) / DELETE of a ConfigMap; denied deletes: plain,
    // --force --grace-period=0, --dry-run=server.
    #[rustfmt::skip]
    let steps = [
        ("create cm plain -n cap --from-literal=a=b", 0, "008-create-configmaps-plain.json"),
        ("label cm plain -n cap team=x", 0, "009-update-configmaps-plain.json"),
        ("label cm plain -n cap team-", 0, "010-update-configmaps-plain.json"),
        ("delete cm plain -n cap", 0, "011-delete-configmaps-plain.json"),
        ("create cm protected -n cap", 0, "012-create-configmaps-protected.json"),
        ("label cm protected -n cap capture/deny=true", 0, "013-update-configmaps-protected.json"),
        ("delete cm protected -n cap", 1, "014-delete-configmaps-protected.json"),
        ("delete cm protected -n cap --force --grace-period=0", 1, "015-delete-configmaps-protected.json"),
        ("delete cm protected -n cap --dry-run=server", 1, "020-delete-configmaps-protected.json"),
    ];
    for (line, code, capture) in steps {
        reviewed(&k, &hook, line, code, capture).await;
    }

    // Finalizers: apply, DELETE (sets deletionTimestamp), UPDATE removing the finalizer.
    let fin = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fin\n  namespace: cap\n  finalizers: [capture.test/hold]\n";
    k.apply_ok(fin);
    assert_matches(&take(&hook, 1).await[0], "030-create-configmaps-fin.json");
    let client = sim.client().await.expect("client");
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, "cap");
    let res = cms
        .delete("fin", &Default::default())
        .await
        .expect("delete fin");
    let obj = res
        .left()
        .expect("object with finalizers is returned, not a Status");
    assert!(obj.metadata.deletion_timestamp.is_some());
    assert_eq!(obj.metadata.deletion_grace_period_seconds, Some(0));
    assert_matches(&take(&hook, 1).await[0], "031-delete-configmaps-fin.json");
    let out = k.run(&[
        "patch",
        "cm",
        "fin",
        "-n",
        "cap",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_matches(&take(&hook, 1).await[0], "032-update-configmaps-fin.json");
    assert!(
        cms.get_opt("fin").await.expect("get").is_none(),
        "finalizer removal deletes the object"
    );

    // Deployments: server-side defaulting; foreground deletion (finalizer, generation bump,
    // and the garbage collector's UPDATE removing the finalizer).
    k.ok("create deployment web -n cap --image=busybox");
    assert_matches(&take(&hook, 1).await[0], "027-create-deployments-web.json");
    k.ok("delete deployment web -n cap --cascade=foreground --wait=false");
    let r = take(&hook, 2).await;
    let del = find(&r, "DELETE", "deployments", "web");
    let want = admission_capture("028-delete-deployments-web.json");
    assert_request_fields(del, &want, "028");
    let upd = find(&r, "UPDATE", "deployments", "web");
    let want = admission_capture("029-update-deployments-web.json");
    assert_request_fields(upd, &want, "029");
    let (o, w) = (
        &upd.review["request"]["object"],
        &want["review"]["request"]["object"],
    );
    assert_eq!(
        o["metadata"]["generation"], w["metadata"]["generation"],
        "029: generation bumped by deletion"
    );
    assert_eq!(
        o["metadata"]["deletionGracePeriodSeconds"],
        w["metadata"]["deletionGracePeriodSeconds"]
    );
    assert_eq!(
        o["metadata"].get("finalizers"),
        w["metadata"].get("finalizers"),
        "029: finalizer removed"
    );
    assert_eq!(
        upd.review["request"]["oldObject"]["metadata"]["finalizers"],
        want["review"]["request"]["oldObject"]["metadata"]["finalizers"]
    );
    assert_eq!(o["spec"], w["spec"], "029: defaulted spec");

    // Namespace cascade: DELETE namespace, then nameless DeleteCollection reviews.
    namespace_created(&k, &hook, "cascade", "051", "052").await;
    let capture = "054-create-configmaps-inside.json";
    reviewed(&k, &hook, "create cm inside -n cascade", 0, capture).await;
    k.ok("delete ns cascade");
    let r = take(&hook, 3).await;
    assert_matches(
        find(&r, "DELETE", "namespaces", "cascade"),
        "055-delete-namespaces-cascade.json",
    );
    let inside = find(&r, "DELETE", "configmaps", "inside");
    assert!(
        inside.review["request"].get("name").is_none(),
        "DeleteCollection reviews carry no name"
    );
    assert_matches(inside, "056-delete-configmaps-NONAME.json");
    let root_ca = find(&r, "DELETE", "configmaps", "kube-root-ca.crt");
    let want = admission_capture("057-delete-configmaps-NONAME.json");
    assert_eq!(
        want["review"]["request"]["oldObject"]["metadata"]["name"], "kube-root-ca.crt",
        "capture 057 is the kube-root-ca.crt deletion"
    );
    assert_matches(root_ca, "057-delete-configmaps-NONAME.json");

    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_cascade_retries_denied_deletes_and_keeps_namespace() {
    let (sim, k) = start_with_kubectl().await;
    let hook = TestWebhook::start(&[], capture_policy()).await;
    k.apply_ok(&config(&hook).to_string());
    k.ok("create ns held");
    k.ok("create cm keep -n held");
    k.ok("create cm drop -n held");
    k.ok("label cm keep -n held capture/deny=true");
    k.ok("delete ns held --wait=false");
    hook.clear();
    // The namespace controller keeps retrying the denied object (nameless reviews).
    wait_until("retried nameless deletes of keep", || {
        hook.reviews()
            .iter()
            .filter(|r| r.review["request"]["oldObject"]["metadata"]["name"] == "keep")
            .count()
            >= 2
    })
    .await;
    k.expect_stdout("get cm -n held -o name", "configmap/keep\n");
    let v: Value = k.json("get ns held");
    assert_eq!(v["status"]["phase"], "Terminating");
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    // New content is refused in a terminating namespace.
    k.expect_stderr("create cm late -n held", "error: failed to create configmap: configmaps \"late\" is forbidden: unable to create new content in namespace held because it is being terminated\n");
    // Lifting the protection lets the namespace go.
    k.ok("label cm keep -n held capture/deny-");
    wait_until("namespace removed", || k.sh("get ns held").code != 0).await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_dispatch_rules_service_and_failure_policies() {
    // No simulated workload controller: its status updates would hit the status rule.
    let sim = Sim::start(SimConfig {
        workload_status: false,
        ..Default::default()
    })
    .await
    .expect("sim");
    let decide: Decide = std::sync::Arc::new(|req: &Value| {
        let name = req["name"].as_str().unwrap_or("");
        if name == "slow" {
            return json!({"allowed": true, "__sleep_ms": 2500});
        }
        if req["subResource"] == "status" {
            return json!({"allowed": false, "status": {"message": "no status updates", "code": 422, "reason": "Invalid"}});
        }
        json!({"allowed": name != "denied"})
    });
    let hook = TestWebhook::start(&["hook.hooks.svc"], decide).await;
    let k = Kubectl::new(&sim.kubeconfig("admin"));

    // clientConfig.url with a query string is rejected like kube-apiserver does.
    let bad = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bad"},
        "webhooks": [{"name": "bad.example.com", "clientConfig": {"url": "https://127.0.0.1:1/x?y=z"},
                      "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
    });
    let out = k.apply(&bad.to_string());
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("webhooks[0].clientConfig.url: Invalid value: \"https://127.0.0.1:1/x?y=z\": query parameters are not allowed"),
        "{out:?}"
    );

    let cfg = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "svc"},
        "webhooks": [
            {"name": "svc.example.com",
             "clientConfig": {"service": {"name": "hook", "namespace": "hooks", "path": "/check"}, "caBundle": hook.ca_b64()},
             "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"], "scope": "Namespaced"},
                       {"operations": ["UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments/status"]}],
             "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 1, "failurePolicy": "Fail"},
            {"name": "ignored.example.com",
             "clientConfig": {"url": "https://127.0.0.1:1/down", "caBundle": hook.ca_b64()},
             "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"]}],
             "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore"}
        ]
    });
    k.apply_ok(&cfg.to_string());

    // Service resolution as kube-apiserver's service resolver does it: the Service,
    // its port, then a ready endpoint of that port, each with the resolver's error.
    let refused = |why: &str| {
        format!(
            "error: failed to create secret Internal error occurred: failed calling webhook \"svc.example.com\": failed to call webhook: Post \"https://hook.hooks.svc:443/check?timeout=1s\": {why}\n"
        )
    };
    k.expect_stderr(
        "create secret generic early -n default",
        &refused("service \"hook\" not found"),
    );
    let service = |port: u16| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hook", "namespace": "hooks"},
               "spec": {"ports": [{"name": "https", "port": port, "targetPort": hook.port}]}})
        .to_string()
    };
    k.ok("create namespace hooks");
    k.apply_ok(&service(8443));
    k.expect_stderr(
        "create secret generic early -n default",
        &refused("no service port 443 found for service \"hook\""),
    );
    k.apply_ok(&service(443));
    k.expect_stderr(
        "create secret generic early -n default",
        &refused("no endpoints available for service \"hook\""),
    );
    let slice = |ready: bool, port_name: &str| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "hook-1", "namespace": "hooks", "labels": {"kubernetes.io/service-name": "hook"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": ready}}],
               "ports": [{"name": port_name, "port": hook.port, "protocol": "TCP"}]})
        .to_string()
    };
    // Not ready, or serving another port name: no endpoint either.
    k.apply_ok(&slice(false, "https"));
    k.expect_stderr(
        "create secret generic early -n default",
        &refused("no endpoints available for service \"hook\""),
    );
    k.apply_ok(&slice(true, "metrics"));
    k.expect_stderr(
        "create secret generic early -n default",
        &refused("no endpoints available for service \"hook\""),
    );
    assert!(hook.reviews().is_empty());
    k.apply_ok(&slice(true, "https"));

    // Service resolution: POSTed to the service path, TLS verified for hook.hooks.svc.
    k.ok("create secret generic ok -n default --from-literal=a=b");
    let r = hook.reviews();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].path, "/check?timeout=1s");
    assert_eq!(
        r[0].headers.get("host").map(String::as_str),
        Some("hook.hooks.svc:443")
    );
    assert_eq!(r[0].review["request"]["object"]["data"]["a"], "Yg==");
    hook.clear();
    k.expect_stderr("create secret generic denied -n default", "error: failed to create secret admission webhook \"svc.example.com\" denied the request without explanation\n");
    // Timeout: the API server gives up after timeoutSeconds. (kubectl prints "failed to
    // create secret" without a colon.)
    let out = k.sh("create secret generic slow -n default");
    assert_eq!(out.stderr, refused("context deadline exceeded"));
    // Subresource rules: only deployments/status updates are sent.
    hook.clear();
    k.ok("create deployment d -n default --image=x");
    let client = sim.client().await.expect("client");
    let deploys: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client, "default");
    let pp = kube::api::PatchParams::default();
    let merge = kube::api::Patch::Merge;
    deploys
        .patch("d", &pp, &merge(json!({"spec": {"replicas": 2}})))
        .await
        .expect("spec patch is not reviewed");
    assert!(hook.reviews().is_empty());
    let err = deploys
        .patch_status("d", &pp, &merge(json!({"status": {"replicas": 2}})))
        .await
        .expect_err("status patch is denied");
    assert_status(
        err,
        422,
        "Invalid",
        "admission webhook \"svc.example.com\" denied the request: no status updates",
    );
    let r = hook.reviews();
    assert_eq!(r[0].review["request"]["subResource"], "status");
    assert_eq!(r[0].review["request"]["requestSubResource"], "status");
    assert_eq!(r[0].review["request"]["kind"]["kind"], "Deployment");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_selector_match_policy_and_namespace_selector() {
    let (sim, k) = start_with_kubectl().await;
    let hook = TestWebhook::start(&[], allow_all()).await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced", "names": {"plural": "gadgets", "kind": "Gadget"},
                 "versions": [
                    {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    k.apply_ok(&crd.to_string());
    let cfg = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "sel"},
        "webhooks": [
            {"name": "protected.example.com", "clientConfig": {"url": hook.url("/protected"), "caBundle": hook.ca_b64()},
             "rules": [{"operations": ["UPDATE", "DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
             "objectSelector": {"matchLabels": {"holdfast.dev/protected": "Always"}},
             "sideEffects": "None", "admissionReviewVersions": ["v1"]},
            {"name": "beta.example.com", "clientConfig": {"url": hook.url("/beta"), "caBundle": hook.ca_b64()},
             "rules": [{"operations": ["CREATE"], "apiGroups": ["example.io"], "apiVersions": ["v1beta1"], "resources": ["gadgets"]}],
             "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]},
             "sideEffects": "None", "admissionReviewVersions": ["v1"]}
        ]
    });
    k.apply_ok(&cfg.to_string());
    k.ok("create cm p -n default");
    assert!(hook.reviews().is_empty(), "unlabelled object: no review");
    k.ok("label cm p -n default holdfast.dev/protected=Always");
    assert_eq!(hook.reviews().len(), 1, "UPDATE: the new object matches");
    hook.clear();
    // Removing the label: only oldObject matches, the webhook is still called.
    k.ok("label cm p -n default holdfast.dev/protected-");
    let r = hook.reviews();
    assert_eq!(r.len(), 1, "UPDATE: the old object matches");
    assert_eq!(
        r[0].review["request"]["oldObject"]["metadata"]["labels"]["holdfast.dev/protected"],
        "Always"
    );
    assert!(
        r[0].review["request"]["object"]["metadata"]
            .get("labels")
            .is_none()
    );
    hook.clear();
    k.ok("delete cm p -n default");
    assert!(
        hook.reviews().is_empty(),
        "DELETE: evaluated on oldObject, which no longer matches"
    );

    // matchPolicy Equivalent: a v1 request is sent to a v1beta1-only rule as v1beta1;
    // namespaceSelector uses the namespace's labels.
    k.ok("create ns ta");
    k.ok("label ns ta team=a");
    k.ok("create ns tb");
    let g = |ns: &str| {
        format!(
            "apiVersion: example.io/v1\nkind: Gadget\nmetadata:\n  name: g\n  namespace: {ns}\n"
        )
    };
    k.apply_ok(&g("tb"));
    assert!(
        hook.reviews().is_empty(),
        "namespace tb does not match the namespaceSelector"
    );
    k.apply_ok(&g("ta"));
    let r = hook.reviews();
    assert_eq!(r.len(), 1);
    let req = &r[0].review["request"];
    assert_eq!(r[0].path, "/beta?timeout=10s");
    assert_eq!(req["resource"]["version"], "v1beta1");
    assert_eq!(req["kind"]["version"], "v1beta1");
    assert_eq!(req["requestResource"]["version"], "v1");
    assert_eq!(req["requestKind"]["version"], "v1");
    assert_eq!(req["object"]["apiVersion"], "example.io/v1beta1");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validating_admission_policies() {
    let (sim, k) = start_with_kubectl().await;
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "protect"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["configmaps"]}]},
            "variables": [{"name": "labels", "expression": "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"}],
            "validations": [{"expression": "!('holdfast.dev/protected' in variables.labels) || variables.labels['holdfast.dev/protected'] != params.data.value",
                             "messageExpression": "'holdfast: ' + oldObject.metadata.name + ' is protected'", "reason": "Forbidden"}],
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}
        }
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "protect-binding"},
        "spec": {"policyName": "protect", "validationActions": ["Deny"],
                 "paramRef": {"name": "holdfast-params", "namespace": "default", "parameterNotFoundAction": "Deny"},
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}}}
    });
    k.apply_ok(&policy.to_string());
    k.apply_ok(&binding.to_string());
    k.ok("create cm x -n default");
    k.ok("label cm x -n default holdfast.dev/protected=Always");
    // Parameters missing: parameterNotFoundAction Deny.
    let client = sim.client().await.expect("client");
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let err = cms
        .delete("x", &Default::default())
        .await
        .expect_err("no params");
    match err {
        kube::Error::Api(s) => assert!(
            s.message
                .contains("no params found for policy binding with `Deny` parameterNotFoundAction"),
            "{}",
            s.message
        ),
        other => panic!("{other:?}"),
    }
    k.ok("create cm holdfast-params -n default --from-literal=value=Always");
    let err = cms
        .delete("x", &Default::default())
        .await
        .expect_err("denied");
    assert_status(
        err,
        403,
        "Forbidden",
        "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'protect' with binding 'protect-binding' denied request: holdfast: x is protected",
    );
    k.expect_stderr("delete cm x -n default", "Error from server (Forbidden): configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'protect' with binding 'protect-binding' denied request: holdfast: x is protected\n");
    // Other namespaces are outside the binding's matchResources.
    k.ok("create ns other");
    k.ok("create cm y -n other");
    k.ok("label cm y -n other holdfast.dev/protected=Always");
    k.ok("delete cm y -n other");
    // Warn action: allowed with a warning.
    let warn = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "protect-binding"},
        "spec": {"policyName": "protect", "validationActions": ["Warn"],
                 "paramRef": {"name": "holdfast-params", "namespace": "default", "parameterNotFoundAction": "Deny"}}
    });
    k.apply_ok(&warn.to_string());
    let out = k.ok("delete cm x -n default");
    assert_eq!(
        out.stderr,
        "Warning: Validation failed for ValidatingAdmissionPolicy 'protect' with binding 'protect-binding': holdfast: x is protected\n"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_tls_is_verified_against_ca_bundle() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let hook = TestWebhook::start(&[], allow_all()).await;
    let other = TestWebhook::start(&[], allow_all()).await;
    let k = Kubectl::new(&sim.kubeconfig("admin"));
    let cfg = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "tls"},
        "webhooks": [{"name": "tls.example.com",
                      "clientConfig": {"url": hook.url("/v"), "caBundle": other.ca_b64()},
                      "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
                      "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 3}]
    });
    k.apply_ok(&cfg.to_string());
    let out = k.sh("create cm x -n default");
    assert_eq!(
        out.stderr,
        format!(
            "error: failed to create configmap: Internal error occurred: failed calling webhook \"tls.example.com\": failed to call webhook: Post \"https://127.0.0.1:{}/v?timeout=3s\": tls: failed to verify certificate: x509: certificate signed by unknown authority\n",
            hook.port
        )
    );
    assert!(hook.reviews().is_empty());
    // With the right bundle it goes through.
    let fixed = cfg.to_string().replace(&other.ca_b64(), &hook.ca_b64());
    k.apply_ok(&fixed);
    k.ok("create cm x -n default");
    assert_eq!(hook.reviews().len(), 1);
    sim.shutdown().await;
}

/// Two webhooks refuse the same request: like kube-apiserver's validating dispatcher
/// (one goroutine per hook, the first refusal received is returned), the refusal of
/// the hook that answers first wins, whatever the configuration order; once the
/// slow one answers first, its refusal is returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_refusal_to_arrive_is_returned() {
    let (sim, k) = start_with_kubectl().await;
    let deny = |message: &'static str, slow_for: &'static str| -> Decide {
        std::sync::Arc::new(move |req: &Value| {
            let mut r = json!({"allowed": false, "status": {"message": message, "code": 403}});
            if req["name"] == slow_for {
                r["__sleep_ms"] = json!(1500);
            }
            r
        })
    };
    let first = TestWebhook::start(&[], deny("from a", "a-waits")).await;
    let second = TestWebhook::start(&[], deny("from b", "b-waits")).await;
    let hook = |name: &str, h: &TestWebhook| {
        json!({"name": name, "clientConfig": {"url": h.url("/"), "caBundle": h.ca_b64()},
               "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
               "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail"})
    };
    let cfg = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "two"},
        "webhooks": [hook("a.example.com", &first), hook("b.example.com", &second)]
    });
    k.apply_ok(&cfg.to_string());
    k.expect_stderr(
        "create configmap a-waits -n default",
        "error: failed to create configmap: admission webhook \"b.example.com\" denied the request: from b\n",
    );
    k.expect_stderr(
        "create configmap b-waits -n default",
        "error: failed to create configmap: admission webhook \"a.example.com\" denied the request: from a\n",
    );
    sim.shutdown().await;
}
