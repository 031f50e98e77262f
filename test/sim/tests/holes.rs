//! What happens around admission, compared with a real kube-apiserver
//! (`test/captures/holes/`): CRD deletion removes instances without DELETE reviews,
//! metadata changes through `/status` and `/finalize`, pod eviction without a DELETE
//! review.

mod common;

use common::*;
use serde_json::{Value, json};

const HOLES: &str = "../holes";

fn hook_config(hook: &TestWebhook) -> Value {
    let rules = json!([
        {"operations": ["*"], "apiGroups": [""], "apiVersions": ["*"],
         "resources": ["namespaces", "namespaces/status", "namespaces/finalize",
                       "pods", "pods/eviction", "pods/status"]},
        {"operations": ["*"], "apiGroups": ["apps"], "apiVersions": ["*"],
         "resources": ["deployments", "deployments/status"]},
        {"operations": ["*"], "apiGroups": ["apiextensions.k8s.io"], "apiVersions": ["*"],
         "resources": ["customresourcedefinitions"]},
        {"operations": ["*"], "apiGroups": ["holes.capture.test"], "apiVersions": ["*"],
         "resources": ["gadgets"]}
    ]);
    recording_config("record-holes", "record.holes.capture.test", hook, rules)
}

fn capture(name: &str) -> Value {
    admission_capture(&format!("{HOLES}/admission/{name}"))
}

fn rest_body(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{CAPTURES}/holes/rest/{name}")).expect("read");
    serde_json::from_str(&text).expect("JSON")
}

/// The request fields that say what was reviewed (not the objects' server fields).
fn assert_same_request(got: &Value, want_file: &str) {
    let want = &capture(want_file)["review"]["request"];
    for k in [
        "kind",
        "resource",
        "subResource",
        "requestKind",
        "requestResource",
        "requestSubResource",
        "name",
        "namespace",
        "operation",
    ] {
        assert_eq!(got.get(k), want.get(k), "{want_file}: request.{k}");
    }
    // kubectl names its field manager; the captures were taken with a raw client.
    let opts = |v: &Value| {
        let mut o = normalize(&v["options"]);
        if let Some(m) = o.as_object_mut() {
            m.remove("fieldManager");
        }
        o
    };
    assert_eq!(opts(got), opts(want), "{want_file}: request.options");
}

/// Exactly one review was recorded, of the request in capture `want_file`.
fn assert_one_review(hook: &TestWebhook, want_file: &str) {
    let r = hook.reviews();
    assert_eq!(r.len(), 1, "{r:#?}");
    assert_same_request(&r[0].review["request"], want_file);
}

fn transcript(k: &Kubectl, name: &str) {
    let (cmd, out, code) = kubectl_capture(&format!("{HOLES}/kubectl/{name}"));
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    let got = k.run(&args);
    assert_eq!(
        (got.stdout.clone() + &got.stderr, got.code),
        (out, code),
        "{name}: `{cmd}`"
    );
}

/// `kubectl patch TARGET --subresource=status --type=merge -p PATCH`, asserting success.
fn patch_status(k: &Kubectl, target: &str, patch: &str) {
    let mut args = vec!["patch"];
    args.extend(target.split_whitespace());
    args.extend(["--subresource=status", "--type=merge", "-p", patch]);
    let out = k.run(&args);
    assert_eq!(out.code, 0, "{out:?}");
}

fn labels_and_annotation(v: &Value) -> (Value, Value) {
    (
        v["metadata"]["labels"].clone(),
        v["metadata"]["annotations"]["added-through"].clone(),
    )
}

/// `kubectl get <object>` shows the labels and `added-through` annotation of the body
/// of REST capture `capture` (`<capture>.body`).
fn assert_metadata_as(k: &Kubectl, object: &str, capture: &str) {
    assert_eq!(
        labels_and_annotation(&k.json(&format!("get {object}"))),
        labels_and_annotation(&rest_body(&format!("{capture}.body"))),
        "{object} against {capture}"
    );
}

async fn start() -> (holdfast_sim::SimHandle, TestWebhook, Kubectl) {
    let (sim, k) = start_with_kubectl().await;
    let hook = TestWebhook::start(&[], capture_policy()).await;
    k.apply_ok(&hook_config(&hook).to_string());
    (sim, hook, k)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_deletion_removes_instances_without_delete_reviews() {
    let (sim, hook, k) = start().await;
    let crd = capture("001-create-customresourcedefinitions-gadgets.holes.capture.test.json")
        ["review"]["request"]["object"]["metadata"]["annotations"]
        ["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .expect("CRD")
        .to_string();
    k.apply_ok(&crd);
    wait_until("CRD served", || k.sh("get gadgets -A").code == 0).await;
    k.ok("create ns holes");
    for (name, labels) in [
        ("precious", json!({"capture/deny": "true"})),
        ("plain", json!({})),
    ] {
        let g = json!({"apiVersion": "holes.capture.test/v1", "kind": "Gadget",
                       "metadata": {"name": name, "namespace": "holes", "labels": labels}});
        k.apply_ok(&g.to_string());
    }
    transcript(&k, "10-delete-protected-gadget.txt");
    hook.clear();
    transcript(&k, "11-delete-crd-with-instances.txt");
    let reviews = hook.reviews();
    let deletes: Vec<&Value> = reviews
        .iter()
        .map(|r| &r.review["request"])
        .filter(|r| r["operation"] == "DELETE")
        .collect();
    assert_eq!(
        deletes.len(),
        1,
        "only the CRD's DELETE is reviewed: {deletes:#?}"
    );
    assert_same_request(
        deletes[0],
        "006-delete-customresourcedefinitions-gadgets.holes.capture.test.json",
    );
    // The instances are gone with it: the resource is no longer served.
    let (status, body) =
        sim_get(&sim, "/apis/holes.capture.test/v1/namespaces/holes/gadgets").await;
    assert_eq!(status, 404, "{body}");
    // (The real server's 404 for an unserved group is a plain-text body; the
    // simulator answers a NotFound Status: same code, which is what clients act on.)
    transcript(&k, "13-get-crd-after-delete.txt");
}

async fn sim_get(sim: &holdfast_sim::SimHandle, path: &str) -> (u16, String) {
    let client = sim.client().await.expect("client");
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    match client.request_text(req).await {
        Ok(body) => (200, body),
        Err(kube::Error::Api(s)) => (s.code, s.message),
        Err(e) => panic!("GET {path}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_through_subresources_follows_the_strategies() {
    let (_sim, hook, k) = start().await;
    k.ok("create ns holes-status");
    k.ok("label ns holes-status keep=me");
    hook.clear();

    // namespaces/status: label removed, annotation added.
    patch_status(
        &k,
        "ns holes-status",
        r#"{"metadata":{"labels":{"keep":null},"annotations":{"added-through":"status"}}}"#,
    );
    assert_one_review(&hook, "009-update-namespaces-holes-status.json");
    assert_metadata_as(
        &k,
        "ns holes-status",
        "20-patch-namespace-status-remove-label",
    );

    // namespaces/finalize: a PUT without the label removes it.
    k.ok("label ns holes-status keep=me");
    hook.clear();
    let mut body: Value = k.json("get ns holes-status");
    body["metadata"]["labels"]
        .as_object_mut()
        .expect("labels")
        .remove("keep");
    body["metadata"]["annotations"]["added-through"] = json!("finalize");
    let out = k.raw("replace", "/api/v1/namespaces/holes-status/finalize", &body);
    assert_eq!(out.code, 0, "{out:?}");
    assert_one_review(&hook, "011-update-namespaces-holes-status.json");
    assert_metadata_as(
        &k,
        "ns holes-status",
        "21-put-namespace-finalize-without-label",
    );

    // pods/status: labels and annotations change.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "holes-status", "labels": {"keep": "me"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}});
    k.apply_ok(&pod.to_string());
    hook.clear();
    patch_status(
        &k,
        "pod p1 -n holes-status",
        r#"{"metadata":{"labels":{"keep":null},"annotations":{"added-through":"status"}}}"#,
    );
    let r = hook.reviews();
    assert_same_request(&r[0].review["request"], "022-update-pods-p1.json");
    assert_metadata_as(&k, "pod p1 -n holes-status", "23-patch-pod-status-metadata");

    // deployments/status: label changes ignored, annotation changes kept.
    let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "holes-status", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}});
    k.apply_ok(&dep.to_string());
    patch_status(
        &k,
        "deployment web -n holes-status",
        r#"{"metadata":{"labels":{"app":null},"annotations":{"added-through":"status"}}}"#,
    );
    let got = k.json("get deployment web -n holes-status");
    let want = rest_body("22-patch-deployment-status-metadata.body");
    assert_eq!(got["metadata"]["labels"], want["metadata"]["labels"]);
    assert_eq!(
        got["metadata"]["annotations"]["added-through"],
        want["metadata"]["annotations"]["added-through"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_deletes_without_a_delete_review() {
    let (_sim, hook, k) = start().await;
    k.ok("create ns holes-status");
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pinned", "namespace": "holes-status", "labels": {"capture/deny": "true"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}});
    k.apply_ok(&pod.to_string());
    transcript(&k, "30-delete-protected-pod.txt");
    hook.clear();
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "pinned", "namespace": "holes-status"}});
    let out = k.raw(
        "create",
        "/api/v1/namespaces/holes-status/pods/pinned/eviction",
        &eviction,
    );
    assert_eq!(out.code, 0, "{out:?}");
    let body: Value = serde_json::from_str(&out.stdout).expect("Status");
    assert_eq!(body, rest_body("31-evict-protected-pod.body"));
    let r = hook.reviews();
    assert_eq!(r.len(), 1, "one CREATE review, no DELETE: {r:#?}");
    let req = &r[0].review["request"];
    assert_same_request(req, "025-create-pods-pinned.json");
    assert_eq!(
        req["object"],
        capture("025-create-pods-pinned.json")["review"]["request"]["object"]
    );
    assert_eq!(req["oldObject"], Value::Null);
    let out = k.sh("get pod pinned -n holes-status");
    assert_eq!(
        (out.code, out.stderr.trim_end()),
        (1, "Error from server (NotFound): pods \"pinned\" not found")
    );
    // A mismatched name is a 400, as the eviction REST answers.
    let out = k.raw(
        "create",
        "/api/v1/namespaces/holes-status/pods/other/eviction",
        &eviction,
    );
    assert_eq!(out.code, 1, "{out:?}");
}

/// ValidatingAdmissionPolicies apply to webhook configurations (kube-apiserver skips
/// only policies and bindings themselves), and each rule's resourceNames restrict
/// that rule only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_policies_cover_webhook_configurations_by_rule() {
    let (_sim, k) = start_with_kubectl().await;
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "guard"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": ["admissionregistration.k8s.io"], "apiVersions": ["*"],
                 "operations": ["DELETE"], "resources": ["validatingwebhookconfigurations"],
                 "resourceNames": ["guarded"]},
                {"apiGroups": [""], "apiVersions": ["*"], "operations": ["DELETE"],
                 "resources": ["configmaps"], "resourceNames": ["other"]}
            ]},
            "validations": [{"expression": "false", "message": "guarded", "reason": "Forbidden"}]
        }
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "guard"},
        "spec": {"policyName": "guard", "validationActions": ["Deny"]}
    });
    for o in [&policy, &binding] {
        k.apply_ok(&o.to_string());
    }
    for name in ["guarded", "free"] {
        let vwc = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name}, "webhooks": []});
        k.apply_ok(&vwc.to_string());
    }
    let out = k.sh("delete validatingwebhookconfiguration guarded");
    assert_eq!(
        (out.code, out.stderr.trim_end()),
        (
            1,
            "Error from server (Forbidden): validatingwebhookconfigurations.admissionregistration.k8s.io \"guarded\" is forbidden: ValidatingAdmissionPolicy 'guard' with binding 'guard' denied request: guarded"
        )
    );
    k.ok("delete validatingwebhookconfiguration free");
    // A ConfigMap named like the guarded configuration is not matched: the names
    // belong to the rule that lists them.
    k.ok("create cm guarded -n default");
    k.ok("delete cm guarded -n default");
    k.ok("create cm other -n default");
    let out = k.sh("delete cm other -n default");
    assert_eq!(out.code, 1, "{out:?}");
    // Policies and bindings themselves are never subject to admission policies.
    k.ok("delete validatingadmissionpolicybinding guard");
}

/// An aggregated API whose service the simulator cannot reach: listed in the legacy
/// `/apis`, its discovery answers 503, as kube-aggregator does for an unavailable
/// APIService (kubectl: "the server is currently unable to handle the request").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_aggregated_api_answers_503() {
    let (_sim, k) = start_with_kubectl().await;
    let api = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                 "versionPriority": 100, "insecureSkipTLSVerify": true,
                 "service": {"name": "unreachable-api", "namespace": "kube-system"}}});
    k.apply_ok(&api.to_string());
    let out = k.sh("get --raw /apis");
    let groups: Value = serde_json::from_str(&out.stdout).expect("APIGroupList");
    let listed = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["name"] == "metrics.k8s.io")
        .cloned();
    assert_eq!(
        listed,
        Some(json!({"name": "metrics.k8s.io",
            "versions": [{"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
            "preferredVersion": {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}}))
    );
    let out = k.sh("get --raw /apis/metrics.k8s.io/v1beta1");
    assert_eq!(
        (out.code, out.stderr.trim_end()),
        (
            1,
            "Error from server (ServiceUnavailable): the server is currently unable to handle the request"
        )
    );
    // Gone with its APIService.
    k.ok("delete apiservice v1beta1.metrics.k8s.io");
    let out = k.sh("get --raw /apis/metrics.k8s.io/v1beta1");
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.trim_end(),
        "Error from server (NotFound): the server could not find the requested resource"
    );
}
