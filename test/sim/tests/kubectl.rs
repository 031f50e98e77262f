//! The real kubectl against holdfast-sim: output compared with the transcripts captured
//! from a real kube-apiserver (apiserver-captures/kubectl/*.txt), byte for byte.

mod common;

use common::*;
use serde_json::{Value, json};

fn webhook_config(hook: &TestWebhook) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "capture"},
        "webhooks": [
            {
                "name": "record.capture.test",
                "clientConfig": {"url": hook.url("/validate"), "caBundle": hook.ca_b64()},
                "rules": [{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": ["", "apps", "capture.test"],
                           "apiVersions": ["*"], "resources": ["namespaces", "configmaps", "deployments", "widgets"]}],
                "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["nomatch"]}]},
                "matchConditions": [{"name": "not-skipped", "expression": "(object == null || !has(object.metadata.labels) || !('capture/skip' in object.metadata.labels)) && (oldObject == null || !has(oldObject.metadata.labels) || !('capture/skip' in oldObject.metadata.labels))"}],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
                "failurePolicy": "Fail"
            },
            {
                "name": "down.capture.test",
                "clientConfig": {"url": "https://127.0.0.1:1/validate", "caBundle": hook.ca_b64()},
                "rules": [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
                "objectSelector": {"matchLabels": {"capture/down": "true"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2,
                "failurePolicy": "Fail"
            },
            {
                "name": "nomatch.capture.test",
                "clientConfig": {"url": hook.url("/validate"), "caBundle": hook.ca_b64()},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "nomatch"}},
                "matchConditions": [{"name": "old-labels", "expression": "has(oldObject.metadata.labels)"}],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail"
            }
        ]
    })
}

/// Runs a captured command (with the capture's arguments) and compares what kubectl
/// printed (stderr then stdout, as in the transcript) and its exit code.
fn check_capture(k: &Kubectl, name: &str) {
    let (cmd, want, want_code) = kubectl_capture(name);
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    let out = k.run(&args);
    let got = format!("{}{}", out.stderr, out.stdout);
    assert_eq!(
        got, want,
        "kubectl output of `{cmd}` ({name}) differs from the real kube-apiserver's"
    );
    assert_eq!(out.code, want_code, "exit code of `{cmd}` ({name})");
}

/// kubectl's default (strict server-side) validation refuses `manifest` for its unknown
/// `field`, with kube-apiserver's text.
fn assert_unknown_field_refused(
    k: &Kubectl,
    manifest: &str,
    kind: &str,
    version: &str,
    field: &str,
) {
    let out = k.apply(manifest);
    assert_eq!(
        out.stderr,
        format!(
            "Error from server (BadRequest): error when creating \"STDIN\": {kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: unknown field \"{field}\"\n"
        ),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_matches_captured_transcripts() {
    let (sim, k) = start_with_kubectl().await;
    let hook = TestWebhook::start(&[], capture_policy()).await;

    let out = k.apply(&webhook_config(&hook).to_string());
    assert_eq!(out.code, 0, "apply webhook config: {out:?}");
    assert_eq!(
        out.stdout,
        "validatingwebhookconfiguration.admissionregistration.k8s.io/capture created\n"
    );

    check_capture(&k, "01-create-ns.txt");
    check_capture(&k, "02-create-cm.txt");
    check_capture(&k, "03-label-cm.txt");
    check_capture(&k, "04-unlabel-cm.txt");
    check_capture(&k, "05-delete-cm.txt");

    // Denied without a reason, with --force, with reason Forbidden, with --dry-run=server.
    k.ok("create cm protected -n cap");
    k.ok("label cm protected -n cap capture/deny=true");
    check_capture(&k, "06-delete-denied.txt");
    check_capture(&k, "07-delete-denied-force.txt");
    k.ok("create cm protected2 -n cap");
    k.ok("label cm protected2 -n cap capture/deny=true capture/reason=Forbidden");
    check_capture(&k, "07b-delete-denied-with-reason.txt");
    check_capture(&k, "08-delete-dry-run-server.txt");
    assert_eq!(
        k.sh("get cm protected -n cap -o name").stdout,
        "configmap/protected\n"
    );

    // Warnings.
    k.ok("create cm warned -n cap");
    k.ok("label cm warned -n cap capture/warn=true");
    check_capture(&k, "09-delete-warned.txt");

    // matchCondition false -> webhook not called.
    k.ok("create cm skipped -n cap");
    k.ok("label cm skipped -n cap capture/skip=true capture/deny=true");
    check_capture(&k, "10-delete-matchcondition-false.txt");

    // Webhook down, failurePolicy Fail.
    k.ok("create cm downed -n cap");
    k.ok("label cm downed -n cap capture/down=true");
    check_capture(&k, "13-delete-webhook-down.txt");

    // matchCondition error on CREATE (oldObject is null).
    k.ok("create ns nomatch");
    check_capture(&k, "00-matchcondition-error-on-create.txt");

    // A custom resource.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.capture.test"},
        "spec": {"group": "capture.test", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                               "subresources": {"status": {}}}]}
    });
    let out = k.apply(&crd.to_string());
    assert_eq!(
        out.stdout, "customresourcedefinition.apiextensions.k8s.io/widgets.capture.test created\n",
        "{out:?}"
    );
    let w1 = "apiVersion: capture.test/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: cap\nspec:\n  size: 3\n";
    let out = k.apply(w1);
    assert_eq!(out.stdout, "widget.capture.test/w1 created\n", "{out:?}");
    let v: Value = k.json("get widget w1 -n cap");
    assert_eq!(v["spec"]["size"], 3);
    assert_eq!(v["metadata"]["generation"], 1);
    check_capture(&k, "11-delete-cr.txt");

    // Deployment with foreground cascading deletion.
    k.ok("create deployment web -n cap --image=busybox");
    check_capture(&k, "12-delete-deploy-foreground.txt");

    // Namespace cascade.
    k.ok("create ns cascade");
    k.ok("create cm inside -n cascade");
    check_capture(&k, "14-delete-ns-cascade.txt");
    k.expect_stderr(
        "get ns cascade",
        "Error from server (NotFound): namespaces \"cascade\" not found\n",
    );

    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_label_delete() {
    let (sim, k) = start_with_kubectl().await;
    let manifest = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: shop\n  labels:\n    app: shop\ndata:\n  color: blue\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: db\n  namespace: shop\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers:\n      - name: db\n        image: postgres\n";
    let out = k.apply(manifest);
    assert_eq!(
        out.stdout,
        "namespace/shop created\nconfigmap/settings created\ndeployment.apps/db created\n",
        "{out:?}"
    );
    // Re-apply with a change: configured / unchanged.
    let changed = manifest.replace("color: blue", "color: red");
    let out = k.apply(&changed);
    assert_eq!(
        out.stdout,
        "namespace/shop unchanged\nconfigmap/settings configured\ndeployment.apps/db unchanged\n",
        "{out:?}"
    );
    let v: Value = k.json("get cm settings -n shop");
    assert_eq!(v["data"]["color"], "red");
    assert_eq!(v["kind"], "ConfigMap");
    assert!(
        v["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );

    #[rustfmt::skip]
    let selected: [(&[&str], &str); 4] = [
        (&["label", "cm", "settings", "-n", "shop", "tier=backend"], "configmap/settings labeled\n"),
        (&["get", "cm", "-n", "shop", "-l", "tier in (backend,frontend),app=shop", "-o", "name"], "configmap/settings\n"),
        (&["get", "cm", "-n", "shop", "-l", "tier!=backend", "-o", "name"], "configmap/kube-root-ca.crt\n"),
        (&["get", "deploy", "-n", "shop", "-o", "jsonpath={.items[0].metadata.generation}"], "1"),
    ];
    for (args, stdout) in selected {
        let out = k.run(args);
        assert_eq!(out.stdout, stdout, "kubectl {args:?}: {out:?}");
    }
    // Strict server-side field validation of built-in kinds (kubectl's default).
    let typo = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\n  namespace: shop\n  lables: {a: b}\ndata: {k: v}\n";
    assert_unknown_field_refused(&k, typo, "ConfigMap", "v1", "metadata.lables");
    let out = k.run_stdin(&["apply", "--validate=warn", "-f", "-"], Some(typo));
    assert_eq!(
        out.stderr, "Warning: unknown field \"metadata.lables\"\n",
        "{out:?}"
    );
    let v: Value = k.json("get cm typo -n shop");
    assert!(
        v["metadata"].get("lables").is_none(),
        "unknown fields are dropped: {v}"
    );
    assert_eq!(v["data"]["k"], "v");
    k.expect_stdout(
        "rollout status deploy/db -n shop --timeout=10s",
        "deployment \"db\" successfully rolled out\n",
    );
    let out = k.sh("get svc kubernetes -n default");
    assert!(
        out.stdout.starts_with("NAME         TYPE        CLUSTER-IP   EXTERNAL-IP   PORT(S)   AGE\nkubernetes   ClusterIP   10.96.0.1    <none>        443/TCP   "),
        "{out:?}"
    );
    k.expect_stdout(
        "scale deploy db -n shop --replicas=3",
        "deployment.apps/db scaled\n",
    );
    let out = k.run(&[
        "get",
        "deploy",
        "db",
        "-n",
        "shop",
        "-o",
        "jsonpath={.spec.replicas} {.metadata.generation}",
    ]);
    assert_eq!(out.stdout, "3 2", "{out:?}");
    k.expect_stderr(
        "get cm nope -n shop",
        "Error from server (NotFound): configmaps \"nope\" not found\n",
    );
    k.expect_stderr(
        "get deploy nope -n shop",
        "Error from server (NotFound): deployments.apps \"nope\" not found\n",
    );
    let out = k.sh("delete cm settings deploy/db -n shop");
    assert_eq!(out.code, 1, "{out:?}");
    k.expect_stdout(
        "delete cm/settings deploy/db -n shop",
        "configmap \"settings\" deleted\ndeployment.apps \"db\" deleted\n",
    );
    k.expect_stdout("delete ns shop", "namespace \"shop\" deleted\n");
    k.expect_stderr(
        "get ns shop",
        "Error from server (NotFound): namespaces \"shop\" not found\n",
    );
    sim.shutdown().await;
}

/// holdfast's own CRDs (manifests/crds): served with defaulting, pruning, enum/pattern
/// validation and x-kubernetes-validations rules like kube-apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holdfast_crds_schema_defaulting_and_validation() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests/crds");
    let (sim, k) = start_with_kubectl().await;
    let crd = std::fs::read_to_string(format!("{dir}/holdfast.dev_resourceprotections.yaml"))
        .expect("manifests/crds/holdfast.dev_resourceprotections.yaml");
    let out = k.apply(&crd);
    assert_eq!(
        out.stdout,
        "customresourcedefinition.apiextensions.k8s.io/resourceprotections.holdfast.dev created\n",
        "{out:?}"
    );
    let good = "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata:\n  name: db\nspec:\n  unknownField: x\n  resources:\n  - {version: v1, resource: configmaps, namespace: shop, names: [db]}\n";
    // kubectl validates strictly on the server by default: unknown fields are refused...
    let kind = "ResourceProtection";
    assert_unknown_field_refused(&k, good, kind, "v1alpha1", "spec.unknownField");
    // ...and pruned without validation.
    let out = k.run_stdin(&["apply", "--validate=false", "-f", "-"], Some(good));
    assert_eq!(
        out.stdout, "resourceprotection.holdfast.dev/db created\n",
        "{out:?}"
    );
    let v: Value = k.json("get rp db");
    assert_eq!(v["spec"]["enforcement"], "Enforce", "defaulted");
    assert_eq!(v["spec"]["strict"], false, "defaulted");
    assert_eq!(v["spec"]["mode"], "Always", "defaulted");
    assert_eq!(v["spec"]["resources"][0]["group"], "", "defaulted");
    assert!(v["spec"].get("unknownField").is_none(), "pruned");
    // additionalPrinterColumns (incl. a JSONPath filter) drive `kubectl get`.
    let out = k.sh("get rp");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0], "NAME   ENFORCEMENT   STRICT   MODE     READY    AGE",
        "{out:?}"
    );
    assert!(
        lines[1].starts_with("db     Enforce       false    Always   <none>   "),
        "{out:?}"
    );
    let client = sim.client().await.expect("client");
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("holdfast.dev", "v1alpha1", "ResourceProtection"),
        "resourceprotections",
    );
    let rps: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client, &ar);
    rps.patch_status(
        "db",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Loaded", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})),
    )
    .await
    .expect("status");
    let out = k.sh("get rp");
    assert!(
        out.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("db     Enforce       false    Always   True    ")),
        "{out:?}"
    );

    let bad = "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata:\n  name: bad\nspec:\n  enforcement: Sometimes\n  resources:\n  - {version: v1, resource: namespaces, namespace: shop}\n";
    let out = k.apply(bad);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr,
        "The ResourceProtection \"bad\" is invalid: \n* spec.enforcement: Unsupported value: \"Sometimes\": supported values: \"Enforce\", \"Warn\", \"Audit\"\n* spec.resources[0].namespace: Invalid value: \"object\": namespace must not be set for a cluster-scoped resource (namespaces, nodes, persistentvolumes, customresourcedefinitions); select them by names\n"
    );
    let empty = "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata:\n  name: empty\nspec:\n  resources: []\n";
    let out = k.apply(empty);
    assert!(
        out.stderr.contains(
            "spec.resources: Invalid value: 0: spec.resources in body should have at least 1 items"
        ),
        "{out:?}"
    );
    sim.shutdown().await;
}

/// The scale subresource of a custom resource reads and writes the CRD's
/// `specReplicasPath` and reads its `statusReplicasPath`, as kube-apiserver does (a
/// value missing at the path scales as 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resource_scale_follows_the_crd_replica_paths() {
    let (_sim, k) = start_with_kubectl().await;
    let crd = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.workloads.test.io}
spec:
  group: workloads.test.io
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.size.count, statusReplicasPath: .status.running}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: object
                properties:
                  count: {type: integer}
          status:
            type: object
            properties:
              running: {type: integer}
"#;
    k.apply_ok(crd);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while k.sh("get gadgets -A").code != 0 {
        assert!(std::time::Instant::now() < deadline, "gadgets never served");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    k.apply_ok("apiVersion: workloads.test.io/v1\nkind: Gadget\nmetadata: {name: g, namespace: default}\nspec: {size: {count: 3}}\n");
    let scale = |k: &Kubectl| -> Value {
        let out = k.ok("get gadget g -n default --subresource=scale -o json");
        serde_json::from_str(&out.stdout).expect("json")
    };
    let s = scale(&k);
    assert_eq!(
        (&s["kind"], &s["spec"]["replicas"], &s["status"]["replicas"]),
        (&json!("Scale"), &json!(3), &json!(0))
    );
    let out = k.sh("scale gadget g -n default --replicas=0");
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "gadget.workloads.test.io/g scaled\n"),
        "{out:?}"
    );
    let g: Value = k.json("get gadget g -n default");
    assert_eq!(g["spec"], json!({"size": {"count": 0}}), "{g}");
    assert_eq!(scale(&k)["spec"]["replicas"], json!(0));
    // Nothing at the path: 0.
    k.apply_ok("apiVersion: workloads.test.io/v1\nkind: Gadget\nmetadata: {name: empty, namespace: default}\nspec: {}\n");
    let out = k.sh("get gadget empty -n default --subresource=scale -o jsonpath={.spec.replicas}");
    assert_eq!((out.code, out.stdout.as_str()), (0, "0"), "{out:?}");
}

/// A new Pod is Pending with its QoS class (what kube-apiserver stores, as in the
/// captured reviews), whatever status the client sent; the phase changes through
/// `/status` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_pods_are_pending_with_their_qos_class() {
    let (_sim, k) = start_with_kubectl().await;
    let pod = |name: &str, resources: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n\
             spec: {{containers: [{{name: c, image: i, resources: {resources}}}]}}\n\
             status: {{phase: Succeeded}}\n"
        )
    };
    for (name, resources, class) in [
        ("best", "{}", "BestEffort"),
        ("burst", "{requests: {cpu: 100m}}", "Burstable"),
        (
            "sure",
            "{limits: {cpu: 100m, memory: 64Mi}, requests: {cpu: 100m, memory: 64Mi}}",
            "Guaranteed",
        ),
        ("implied", "{limits: {cpu: 1, memory: 1Gi}}", "Guaranteed"),
        (
            "uneven",
            "{limits: {cpu: 1, memory: 1Gi}, requests: {cpu: 500m}}",
            "Burstable",
        ),
    ] {
        let out = k.run_stdin(&["create", "-f", "-"], Some(&pod(name, resources)));
        assert_eq!(out.code, 0, "{out:?}");
        let out = k.run(&["get", "pod", name, "-n", "default", "-o", "json"]);
        let v: Value = serde_json::from_str(&out.stdout).expect("json");
        assert_eq!(
            v["status"],
            json!({"phase": "Pending", "qosClass": class}),
            "{name}"
        );
    }
    let out = k.run(&[
        "patch",
        "pod",
        "best",
        "-n",
        "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Succeeded"}}"#,
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    k.expect_stdout(
        "get pod best -n default -o jsonpath={.status.phase}",
        "Succeeded",
    );
}
