//! AdmissionReviews sent by holdfast-sim compared field by field with the ones a real
//! kube-apiserver POSTed for the same operations (apiserver-captures/admission/*.json).

mod common;

use common::*;
use holdfast_sim::{Sim, SimConfig};
use serde_json::{Value, json};

fn config(hook: &TestWebhook) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "record"},
        "webhooks": [{
            "name": "record.capture.test",
            "clientConfig": {"url": hook.url("/validate"), "caBundle": hook.ca_b64()},
            "rules": [{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": ["", "apps"],
                       "apiVersions": ["*"], "resources": ["namespaces", "configmaps", "deployments"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            "failurePolicy": "Fail"
        }]
    })
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
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let hook = TestWebhook::start(&[], capture_policy()).await;
    let k = Kubectl::new(&sim.kubeconfig("admin"));
    let out = k.run_stdin(&["apply", "-f", "-"], Some(&config(&hook).to_string()));
    assert_eq!(out.code, 0, "{out:?}");

    // CREATE namespace (+ the kube-root-ca.crt ConfigMap kube-controller-manager publishes).
    assert_eq!(k.run(&["create", "ns", "cap"]).code, 0);
    let r = take(&hook, 2).await;
    assert_matches(
        find(&r, "CREATE", "namespaces", "cap"),
        "005-create-namespaces-cap.json",
    );
    assert_matches(
        find(&r, "CREATE", "configmaps", "kube-root-ca.crt"),
        "007-create-configmaps-kube-root-ca.crt.json",
    );

    // CREATE / UPDATE (label, unlabel) / DELETE of a ConfigMap.
    assert_eq!(
        k.run(&["create", "cm", "plain", "-n", "cap", "--from-literal=a=b"])
            .code,
        0
    );
    assert_matches(&take(&hook, 1).await[0], "008-create-configmaps-plain.json");
    assert_eq!(
        k.run(&["label", "cm", "plain", "-n", "cap", "team=x"]).code,
        0
    );
    assert_matches(&take(&hook, 1).await[0], "009-update-configmaps-plain.json");
    assert_eq!(
        k.run(&["label", "cm", "plain", "-n", "cap", "team-"]).code,
        0
    );
    assert_matches(&take(&hook, 1).await[0], "010-update-configmaps-plain.json");
    assert_eq!(k.run(&["delete", "cm", "plain", "-n", "cap"]).code, 0);
    assert_matches(&take(&hook, 1).await[0], "011-delete-configmaps-plain.json");

    // Denied deletes: plain, --force --grace-period=0, --dry-run=server.
    assert_eq!(k.run(&["create", "cm", "protected", "-n", "cap"]).code, 0);
    assert_matches(
        &take(&hook, 1).await[0],
        "012-create-configmaps-protected.json",
    );
    assert_eq!(
        k.run(&["label", "cm", "protected", "-n", "cap", "capture/deny=true"])
            .code,
        0
    );
    assert_matches(
        &take(&hook, 1).await[0],
        "013-update-configmaps-protected.json",
    );
    assert_eq!(k.run(&["delete", "cm", "protected", "-n", "cap"]).code, 1);
    assert_matches(
        &take(&hook, 1).await[0],
        "014-delete-configmaps-protected.json",
    );
    assert_eq!(
        k.run(&[
            "delete",
            "cm",
            "protected",
            "-n",
            "cap",
            "--force",
            "--grace-period=0"
        ])
        .code,
        1
    );
    assert_matches(
        &take(&hook, 1).await[0],
        "015-delete-configmaps-protected.json",
    );
    assert_eq!(
        k.run(&["delete", "cm", "protected", "-n", "cap", "--dry-run=server"])
            .code,
        1
    );
    assert_matches(
        &take(&hook, 1).await[0],
        "020-delete-configmaps-protected.json",
    );

    // Finalizers: apply, DELETE (sets deletionTimestamp), UPDATE removing the finalizer.
    let fin = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fin\n  namespace: cap\n  finalizers: [capture.test/hold]\n";
    assert_eq!(k.run_stdin(&["apply", "-f", "-"], Some(fin)).code, 0);
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
    assert_eq!(
        k.run(&[
            "create",
            "deployment",
            "web",
            "-n",
            "cap",
            "--image=busybox"
        ])
        .code,
        0
    );
    assert_matches(&take(&hook, 1).await[0], "027-create-deployments-web.json");
    assert_eq!(
        k.run(&[
            "delete",
            "deployment",
            "web",
            "-n",
            "cap",
            "--cascade=foreground",
            "--wait=false"
        ])
        .code,
        0
    );
    let r = take(&hook, 2).await;
    let del = find(&r, "DELETE", "deployments", "web");
    let want = admission_capture("028-delete-deployments-web.json");
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
            del.review["request"][f], want["review"]["request"][f],
            "028: request.{f}"
        );
    }
    let upd = find(&r, "UPDATE", "deployments", "web");
    let want = admission_capture("029-update-deployments-web.json");
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
            upd.review["request"][f], want["review"]["request"][f],
            "029: request.{f}"
        );
    }
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
    assert_eq!(k.run(&["create", "ns", "cascade"]).code, 0);
    let r = take(&hook, 2).await;
    assert_matches(
        find(&r, "CREATE", "namespaces", "cascade"),
        "051-create-namespaces-cascade.json",
    );
    assert_matches(
        find(&r, "CREATE", "configmaps", "kube-root-ca.crt"),
        "052-create-configmaps-kube-root-ca.crt.json",
    );
    assert_eq!(k.run(&["create", "cm", "inside", "-n", "cascade"]).code, 0);
    assert_matches(
        &take(&hook, 1).await[0],
        "054-create-configmaps-inside.json",
    );
    assert_eq!(k.run(&["delete", "ns", "cascade"]).code, 0);
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
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let hook = TestWebhook::start(&[], capture_policy()).await;
    let k = Kubectl::new(&sim.kubeconfig("admin"));
    assert_eq!(
        k.run_stdin(&["apply", "-f", "-"], Some(&config(&hook).to_string()))
            .code,
        0
    );
    assert_eq!(k.run(&["create", "ns", "held"]).code, 0);
    assert_eq!(k.run(&["create", "cm", "keep", "-n", "held"]).code, 0);
    assert_eq!(k.run(&["create", "cm", "drop", "-n", "held"]).code, 0);
    assert_eq!(
        k.run(&["label", "cm", "keep", "-n", "held", "capture/deny=true"])
            .code,
        0
    );
    assert_eq!(k.run(&["delete", "ns", "held", "--wait=false"]).code, 0);
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
    let out = k.run(&["get", "cm", "-n", "held", "-o", "name"]);
    assert_eq!(out.stdout, "configmap/keep\n");
    let ns = k.run(&["get", "ns", "held", "-o", "json"]);
    let v: Value = serde_json::from_str(&ns.stdout).expect("ns json");
    assert_eq!(v["status"]["phase"], "Terminating");
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    // New content is refused in a terminating namespace.
    let out = k.run(&["create", "cm", "late", "-n", "held"]);
    assert_eq!(
        out.stderr,
        "error: failed to create configmap: configmaps \"late\" is forbidden: unable to create new content in namespace held because it is being terminated\n"
    );
    // Lifting the protection lets the namespace go.
    assert_eq!(
        k.run(&["label", "cm", "keep", "-n", "held", "capture/deny-"])
            .code,
        0
    );
    wait_until("namespace removed", || {
        k.run(&["get", "ns", "held"]).code != 0
    })
    .await;
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
    sim.set_service_endpoint(
        "hooks",
        "hook",
        format!("127.0.0.1:{}", hook.port).parse().expect("addr"),
    );
    let k = Kubectl::new(&sim.kubeconfig("admin"));

    // clientConfig.url with a query string is rejected like kube-apiserver does.
    let bad = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bad"},
        "webhooks": [{"name": "bad.example.com", "clientConfig": {"url": "https://127.0.0.1:1/x?y=z"},
                      "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
    });
    let out = k.run_stdin(&["apply", "-f", "-"], Some(&bad.to_string()));
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
    assert_eq!(
        k.run_stdin(&["apply", "-f", "-"], Some(&cfg.to_string()))
            .code,
        0
    );

    // Service resolution: POSTed to the service path, TLS verified for hook.hooks.svc.
    assert_eq!(
        k.run(&[
            "create",
            "secret",
            "generic",
            "ok",
            "-n",
            "default",
            "--from-literal=a=b"
        ])
        .code,
        0
    );
    let r = hook.reviews();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].path, "/check?timeout=1s");
    assert_eq!(
        r[0].headers.get("host").map(String::as_str),
        Some("hook.hooks.svc:443")
    );
    assert_eq!(r[0].review["request"]["object"]["data"]["a"], "Yg==");
    hook.clear();
    let out = k.run(&["create", "secret", "generic", "denied", "-n", "default"]);
    assert_eq!(
        out.stderr,
        "error: failed to create secret admission webhook \"svc.example.com\" denied the request without explanation\n"
    );
    // Timeout: the API server gives up after timeoutSeconds. (kubectl prints "failed to
    // create secret" without a colon.)
    let out = k.run(&["create", "secret", "generic", "slow", "-n", "default"]);
    assert_eq!(
        out.stderr,
        format!(
            "error: failed to create secret Internal error occurred: failed calling webhook \"svc.example.com\": failed to call webhook: Post \"https://hook.hooks.svc:443/check?timeout=1s\": context deadline exceeded\n"
        )
    );
    // Subresource rules: only deployments/status updates are sent.
    hook.clear();
    assert_eq!(
        k.run(&["create", "deployment", "d", "-n", "default", "--image=x"])
            .code,
        0
    );
    let client = sim.client().await.expect("client");
    let deploys: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client, "default");
    deploys
        .patch(
            "d",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("spec patch is not reviewed");
    assert!(hook.reviews().is_empty());
    let err = deploys
        .patch_status(
            "d",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"status": {"replicas": 2}})),
        )
        .await
        .expect_err("status patch is denied");
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert_eq!(
                s.message,
                "admission webhook \"svc.example.com\" denied the request: no status updates"
            );
        }
        other => panic!("{other:?}"),
    }
    let r = hook.reviews();
    assert_eq!(r[0].review["request"]["subResource"], "status");
    assert_eq!(r[0].review["request"]["requestSubResource"], "status");
    assert_eq!(r[0].review["request"]["kind"]["kind"], "Deployment");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_selector_match_policy_and_namespace_selector() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let hook = TestWebhook::start(
        &[],
        std::sync::Arc::new(|_req: &Value| json!({"allowed": true})),
    )
    .await;
    let k = Kubectl::new(&sim.kubeconfig("admin"));
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced", "names": {"plural": "gadgets", "kind": "Gadget"},
                 "versions": [
                    {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    assert_eq!(
        k.run_stdin(&["apply", "-f", "-"], Some(&crd.to_string()))
            .code,
        0
    );
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
    assert_eq!(
        k.run_stdin(&["apply", "-f", "-"], Some(&cfg.to_string()))
            .code,
        0
    );
    assert_eq!(k.run(&["create", "cm", "p", "-n", "default"]).code, 0);
    assert!(hook.reviews().is_empty(), "unlabelled object: no review");
    assert_eq!(
        k.run(&[
            "label",
            "cm",
            "p",
            "-n",
            "default",
            "holdfast.dev/protected=Always"
        ])
        .code,
        0
    );
    assert_eq!(hook.reviews().len(), 1, "UPDATE: the new object matches");
    hook.clear();
    // Removing the label: only oldObject matches, the webhook is still called.
    assert_eq!(
        k.run(&[
            "label",
            "cm",
            "p",
            "-n",
            "default",
            "holdfast.dev/protected-"
        ])
        .code,
        0
    );
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
    assert_eq!(k.run(&["delete", "cm", "p", "-n", "default"]).code, 0);
    assert!(
        hook.reviews().is_empty(),
        "DELETE: evaluated on oldObject, which no longer matches"
    );

    // matchPolicy Equivalent: a v1 request is sent to a v1beta1-only rule as v1beta1;
    // namespaceSelector uses the namespace's labels.
    assert_eq!(k.run(&["create", "ns", "ta"]).code, 0);
    assert_eq!(k.run(&["label", "ns", "ta", "team=a"]).code, 0);
    assert_eq!(k.run(&["create", "ns", "tb"]).code, 0);
    let g = |ns: &str| {
        format!(
            "apiVersion: example.io/v1\nkind: Gadget\nmetadata:\n  name: g\n  namespace: {ns}\n"
        )
    };
    assert_eq!(k.run_stdin(&["apply", "-f", "-"], Some(&g("tb"))).code, 0);
    assert!(
        hook.reviews().is_empty(),
        "namespace tb does not match the namespaceSelector"
    );
    assert_eq!(k.run_stdin(&["apply", "-f", "-"], Some(&g("ta"))).code, 0);
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
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let k = Kubectl::new(&sim.kubeconfig("admin"));
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
    assert_eq!(
        k.run_stdin(&["apply", "-f", "-"], Some(&policy.to_string()))
            .code,
        0
    );
    assert_eq!(
        k.run_stdin(&["apply", "-f", "-"], Some(&binding.to_string()))
            .code,
        0
    );
    assert_eq!(k.run(&["create", "cm", "x", "-n", "default"]).code, 0);
    assert_eq!(
        k.run(&[
            "label",
            "cm",
            "x",
            "-n",
            "default",
            "holdfast.dev/protected=Always"
        ])
        .code,
        0
    );
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
    assert_eq!(
        k.run(&[
            "create",
            "cm",
            "holdfast-params",
            "-n",
            "default",
            "--from-literal=value=Always"
        ])
        .code,
        0
    );
    let err = cms
        .delete("x", &Default::default())
        .await
        .expect_err("denied");
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'protect' with binding 'protect-binding' denied request: holdfast: x is protected"
            );
        }
        other => panic!("{other:?}"),
    }
    let out = k.run(&["delete", "cm", "x", "-n", "default"]);
    assert_eq!(
        out.stderr,
        "Error from server (Forbidden): configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'protect' with binding 'protect-binding' denied request: holdfast: x is protected\n"
    );
    // Other namespaces are outside the binding's matchResources.
    assert_eq!(k.run(&["create", "ns", "other"]).code, 0);
    assert_eq!(k.run(&["create", "cm", "y", "-n", "other"]).code, 0);
    assert_eq!(
        k.run(&[
            "label",
            "cm",
            "y",
            "-n",
            "other",
            "holdfast.dev/protected=Always"
        ])
        .code,
        0
    );
    assert_eq!(k.run(&["delete", "cm", "y", "-n", "other"]).code, 0);
    // Warn action: allowed with a warning.
    let warn = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "protect-binding"},
        "spec": {"policyName": "protect", "validationActions": ["Warn"],
                 "paramRef": {"name": "holdfast-params", "namespace": "default", "parameterNotFoundAction": "Deny"}}
    });
    assert_eq!(
        k.run_stdin(&["apply", "-f", "-"], Some(&warn.to_string()))
            .code,
        0
    );
    let out = k.run(&["delete", "cm", "x", "-n", "default"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stderr,
        "Warning: Validation failed for ValidatingAdmissionPolicy 'protect' with binding 'protect-binding': holdfast: x is protected\n"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_tls_is_verified_against_ca_bundle() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let hook = TestWebhook::start(
        &[],
        std::sync::Arc::new(|_r: &Value| json!({"allowed": true})),
    )
    .await;
    let other = TestWebhook::start(
        &[],
        std::sync::Arc::new(|_r: &Value| json!({"allowed": true})),
    )
    .await;
    let k = Kubectl::new(&sim.kubeconfig("admin"));
    let cfg = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "tls"},
        "webhooks": [{"name": "tls.example.com",
                      "clientConfig": {"url": hook.url("/v"), "caBundle": other.ca_b64()},
                      "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
                      "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 3}]
    });
    assert_eq!(
        k.run_stdin(&["apply", "-f", "-"], Some(&cfg.to_string()))
            .code,
        0
    );
    let out = k.run(&["create", "cm", "x", "-n", "default"]);
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
    let out = k.run_stdin(&["apply", "-f", "-"], Some(&fixed));
    assert_eq!(out.code, 0, "{out:?}");
    let out = k.run(&["create", "cm", "x", "-n", "default"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(hook.reviews().len(), 1);
    sim.shutdown().await;
}
