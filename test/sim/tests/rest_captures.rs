//! Raw REST responses compared with the ones captured from a real kube-apiserver
//! (apiserver-captures/rest/*): discovery documents, /version, error Statuses,
//! delete/deletecollection results, list paging, SubjectAccessReview.

mod common;

use common::CAPTURES;
use holdfast_sim::{Sim, SimConfig};
use http_body_util::BodyExt;
use serde_json::{Value, json};

fn capture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{CAPTURES}/rest/{name}.body")).expect("capture");
    serde_json::from_str(&text).expect("capture JSON")
}

fn capture_status(name: &str) -> u16 {
    let text = std::fs::read_to_string(format!("{CAPTURES}/rest/{name}.headers")).expect("headers");
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status line")
}

async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    accept: Option<&str>,
    body: Option<Value>,
) -> (u16, Value, http::HeaderMap) {
    let mut b = http::Request::builder().method(method).uri(path);
    if let Some(a) = accept {
        b = b.header("accept", a);
    }
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    let req = b
        .body(
            body.map(|v| serde_json::to_vec(&v).expect("body"))
                .unwrap_or_default(),
        )
        .expect("request");
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        headers,
    )
}

/// PATCH `path` with `body` of `content_type`; the response, whatever its status.
async fn patch(
    client: &kube::Client,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> http::Response<kube::client::Body> {
    let req = http::Request::patch(path)
        .header("content-type", content_type)
        .body(body.to_vec())
        .expect("request");
    client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap_or_else(|e| panic!("PATCH {path} ({content_type}): {e}"))
}

/// Drops what legitimately differs between clusters and runs.
/// `METHOD PATH` (with `body`) answers as kube-apiserver did in capture `name`: the
/// same code and (normalized) body. The body.
async fn assert_like_capture(
    c: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
    name: &str,
) -> Value {
    let (code, got, _) = call(c, method, path, None, body).await;
    assert_eq!(
        (code, norm(&got)),
        (capture_status(name), norm(&capture(name))),
        "{method} {path}"
    );
    got
}

/// The names of a list's items, in order.
fn item_names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect()
}

fn norm(v: &Value) -> Value {
    let mut v = v.clone();
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "managedFields",
                    "storageVersionHash",
                    "continue",
                    "serverAddress",
                ] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

fn without_capture_group(mut v: Value) -> Value {
    if let Some(items) = v.get_mut("items").and_then(|i| i.as_array_mut()) {
        items.retain(|i| i["metadata"]["name"] != "capture.test");
    }
    if let Some(groups) = v.get_mut("groups").and_then(|g| g.as_array_mut()) {
        groups.retain(|g| g["name"] != "capture.test");
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_version_match_real_apiserver() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let c = sim.client().await.expect("client");
    for (path, cap) in [
        ("/version", "17-version"),
        ("/api", "18-api"),
        ("/apis", "19-apis"),
        ("/api/v1", "20-api-v1"),
        ("/apis/apps/v1", "21-apis-apps-v1"),
    ] {
        let (code, got, _) = call(&c, "GET", path, None, None).await;
        assert_eq!(code, 200, "{path}");
        assert_eq!(
            norm(&got),
            norm(&without_capture_group(capture(cap))),
            "{path} differs from {cap}"
        );
    }
    let agg =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    for (path, cap) in [
        ("/apis", "22-apis-aggregated"),
        ("/api", "23-api-aggregated"),
    ] {
        let (code, got, headers) = call(&c, "GET", path, Some(agg), None).await;
        assert_eq!(code, 200);
        assert_eq!(
            headers.get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
        );
        assert_eq!(
            norm(&got),
            norm(&without_capture_group(capture(cap))),
            "{path} (aggregated) differs from {cap}"
        );
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_and_lists_match_real_apiserver() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let c = sim.client().await.expect("client");
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cap"}});
    assert_eq!(
        call(&c, "POST", "/api/v1/namespaces", None, Some(ns))
            .await
            .0,
        201
    );
    // kube-controller-manager publishes kube-root-ca.crt asynchronously.
    for _ in 0..200 {
        if call(
            &c,
            "GET",
            "/api/v1/namespaces/cap/configmaps/kube-root-ca.crt",
            None,
            None,
        )
        .await
        .0 == 200
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "cap"}});
    for n in ["r1", "r2", "r3"] {
        assert_eq!(
            call(
                &c,
                "POST",
                "/api/v1/namespaces/cap/configmaps",
                None,
                Some(cm(n))
            )
            .await
            .0,
            201
        );
    }

    // 03/04: paging (same 7 ConfigMaps as the real namespace held).
    for n in ["openshift-service-ca.crt", "protected", "protected2"] {
        call(
            &c,
            "POST",
            "/api/v1/namespaces/cap/configmaps",
            None,
            Some(cm(n)),
        )
        .await;
    }
    let (code, page1, _) = call(
        &c,
        "GET",
        "/api/v1/namespaces/cap/configmaps?limit=2",
        None,
        None,
    )
    .await;
    let real1 = capture("03-list-limit");
    assert_eq!(code, 200);
    assert_eq!(page1["kind"], real1["kind"]);
    assert_eq!(page1["apiVersion"], real1["apiVersion"]);
    let names1: Vec<&str> = item_names(&page1);
    let real_names1: Vec<&str> = item_names(&real1);
    assert_eq!(names1, real_names1);
    assert_eq!(
        page1["metadata"]["remainingItemCount"],
        real1["metadata"]["remainingItemCount"]
    );
    assert!(
        page1["items"][0].get("kind").is_none(),
        "typed list items carry no kind, like the real one"
    );
    assert!(page1["metadata"]["continue"].is_string());
    assert!(page1["metadata"]["resourceVersion"].is_string());
    let token = page1["metadata"]["continue"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let (_, page2, _) = call(
        &c,
        "GET",
        &format!("/api/v1/namespaces/cap/configmaps?limit=2&continue={token}"),
        None,
        None,
    )
    .await;
    let names: Vec<&str> = item_names(&page2);
    let real2 = capture("04-list-continue");
    let real_names: Vec<&str> = item_names(&real2);
    assert_eq!(names, real_names, "same ordering by name as etcd");
    assert_eq!(
        page2["metadata"]["remainingItemCount"],
        capture("04-list-continue")["metadata"]["remainingItemCount"]
    );

    // 05: GET of a missing object.
    assert_like_capture(
        &c,
        "GET",
        "/api/v1/namespaces/cap/configmaps/nope",
        None,
        "05-get-missing",
    )
    .await;
    // 06: duplicate create.
    assert_like_capture(
        &c,
        "POST",
        "/api/v1/namespaces/cap/configmaps",
        Some(cm("r1")),
        "06-create-duplicate",
    )
    .await;
    // 07: update with a stale resourceVersion.
    let mut stale = cm("r1");
    stale["metadata"]["resourceVersion"] = json!("1");
    assert_like_capture(
        &c,
        "PUT",
        "/api/v1/namespaces/cap/configmaps/r1",
        Some(stale),
        "07-update-stale",
    )
    .await;
    // 08: immediate delete returns a Success Status with details.
    let got = assert_like_capture(
        &c,
        "DELETE",
        "/api/v1/namespaces/cap/configmaps/r3",
        None,
        "08-delete-plain",
    )
    .await;
    assert!(got["details"]["uid"].is_string());

    call(
        &c,
        "POST",
        "/api/v1/namespaces/cap/configmaps",
        None,
        Some(cm("applied")),
    )
    .await;
    // 26: label selector list of namespaces; 27: field selector.
    let (_, got, _) = call(
        &c,
        "GET",
        "/api/v1/namespaces?labelSelector=kubernetes.io%2Fmetadata.name%3Dcap",
        None,
        None,
    )
    .await;
    assert_eq!(norm(&got), norm(&capture("26-label-selector-list")));
    let (_, got, _) = call(
        &c,
        "GET",
        "/api/v1/namespaces/cap/configmaps?fieldSelector=metadata.name%3Dapplied",
        None,
        None,
    )
    .await;
    let real = capture("27-field-selector-list");
    assert_eq!(
        got["items"].as_array().map(Vec::len),
        real["items"].as_array().map(Vec::len)
    );
    assert_eq!(
        got["items"][0]["metadata"]["name"],
        real["items"][0]["metadata"]["name"]
    );

    // 16: deletecollection with a selector matching nothing.
    assert_like_capture(
        &c,
        "DELETE",
        "/api/v1/namespaces/cap/configmaps?labelSelector=nothing%3Dhere",
        None,
        "16-deletecollection",
    )
    .await;

    // 01/02: DELETE of an object with finalizers returns it, marked for deletion.
    let mut fin = cm("fin");
    fin["metadata"]["finalizers"] = json!(["capture.test/hold"]);
    call(
        &c,
        "POST",
        "/api/v1/namespaces/cap/configmaps",
        None,
        Some(fin),
    )
    .await;
    let (code, got, _) = call(
        &c,
        "DELETE",
        "/api/v1/namespaces/cap/configmaps/fin",
        None,
        None,
    )
    .await;
    let mut real = capture("01-delete-with-finalizer");
    if let Some(a) = real["metadata"]
        .get_mut("annotations")
        .and_then(|a| a.as_object_mut())
    {
        a.clear();
    }
    if let Some(m) = real["metadata"].as_object_mut() {
        m.remove("annotations");
    }
    assert_eq!(
        (code, norm(&got)),
        (capture_status("01-delete-with-finalizer"), norm(&real))
    );
    assert!(got["metadata"]["deletionTimestamp"].is_string());
    let (code, got2, _) = call(
        &c,
        "GET",
        "/api/v1/namespaces/cap/configmaps/fin",
        None,
        None,
    )
    .await;
    assert_eq!(
        (code, norm(&got2)),
        (capture_status("02-get-terminating"), norm(&real))
    );

    // 11-13: server-side apply (201 on create), merge patch, JSON patch.
    let mut last = None;
    for (cap, query, content_type, body) in [
        (
            "11-ssa",
            "?fieldManager=capture",
            "application/apply-patch+yaml",
            &b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied2\ndata:\n  k: v\n"[..],
        ),
        (
            "12-merge-patch",
            "",
            "application/merge-patch+json",
            br#"{"metadata":{"labels":{"m":"1"}}}"#,
        ),
        (
            "13-json-patch",
            "",
            "application/json-patch+json",
            br#"[{"op":"add","path":"/data/j","value":"2"}]"#,
        ),
    ] {
        let path = format!("/api/v1/namespaces/cap/configmaps/applied2{query}");
        let resp = patch(&c, &path, content_type, body).await;
        assert_eq!(resp.status().as_u16(), capture_status(cap), "{cap}");
        last = Some(resp);
    }
    let resp = last.expect("the JSON patch answered");
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let mut got: Value = serde_json::from_slice(&bytes).expect("json");
    got["metadata"]["name"] = json!("applied");
    assert_eq!(norm(&got), norm(&capture("13-json-patch")));

    // 28: Table.
    let (_, table, _) = call(
        &c,
        "GET",
        "/api/v1/namespaces/cap/configmaps?fieldSelector=metadata.name%3Dapplied2",
        Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
        None,
    )
    .await;
    let real = capture("28-table");
    let cols = |t: &Value| -> Vec<(Value, Value, Value)> {
        t["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (c["name"].clone(), c["type"].clone(), c["format"].clone()))
            .collect()
    };
    assert_eq!(table["kind"], "Table");
    assert_eq!(cols(&table), cols(&real));
    assert_eq!(table["rows"][0]["cells"][0], "applied2");
    assert_eq!(
        table["rows"][0]["cells"][1], real["rows"][0]["cells"][1],
        "Data count"
    );
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    // 24: SubjectAccessReview.
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                     "spec": {"resourceAttributes": {"namespace": "cap", "verb": "bypass", "group": "holdfast.dev", "resource": "protections"},
                              "user": "alice", "groups": ["dev"]}});
    assert_like_capture(
        &c,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(sar),
        "24-sar",
    )
    .await;
    sim.shutdown().await;
}

/// Malformed requests get a 4xx Status, never a dropped connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_statuses() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let c = sim.client().await.expect("client");
    let cm = "/api/v1/namespaces/default/configmaps/kube-root-ca.crt";
    let cases: Vec<(&str, String, &str, Vec<u8>, u16)> = vec![
        (
            "POST",
            "/api/v1/namespaces/default/configmaps".into(),
            "application/json",
            b"notjson".to_vec(),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps".into(),
            "application/json",
            b"[]".to_vec(),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps".into(),
            "application/json",
            br#"{"metadata":{"name":"x","labels":5}}"#.to_vec(),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps".into(),
            "application/json",
            br#"{"metadata":{}}"#.to_vec(),
            422,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps".into(),
            "application/vnd.kubernetes.protobuf",
            b"k8s\0\x0a\xff".to_vec(),
            415,
        ),
        (
            "PATCH",
            cm.into(),
            "application/merge-patch+json",
            b"5".to_vec(),
            400,
        ),
        (
            "PATCH",
            cm.into(),
            "application/json-patch+json",
            br#"[{"op":"replace","path":"","value":3}]"#.to_vec(),
            400,
        ),
        (
            "PATCH",
            cm.into(),
            "application/json-patch+json",
            b"{}".to_vec(),
            422,
        ),
        (
            "PATCH",
            cm.into(),
            "application/apply-patch+yaml",
            b"a: [".to_vec(),
            422,
        ),
        (
            "PATCH",
            format!("{cm}?fieldManager=t"),
            "application/apply-patch+yaml",
            b"a: [".to_vec(),
            400,
        ),
        ("PATCH", cm.into(), "text/plain", b"x".to_vec(), 415),
        (
            "PUT",
            cm.into(),
            "application/json",
            br#"{"metadata":{"name":"other"}}"#.to_vec(),
            400,
        ),
        (
            "DELETE",
            cm.into(),
            "application/json",
            b"notjson".to_vec(),
            400,
        ),
        (
            "DELETE",
            cm.into(),
            "application/json",
            br#"{"propagationPolicy":"Bad"}"#.to_vec(),
            422,
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(".into(),
            "",
            vec![],
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=abc".into(),
            "",
            vec![],
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?continue=garbage".into(),
            "",
            vec![],
            400,
        ),
        ("GET", "/apis/nope/v1/things".into(), "", vec![], 404),
        // kcp's front-proxy: an unknown logical cluster is 403, not 404.
        (
            "GET",
            "/clusters/nope/api/v1/namespaces".into(),
            "",
            vec![],
            403,
        ),
        (
            "POST",
            "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces".into(),
            "application/json",
            br#"{"metadata":{"name":"w"},"spec":5}"#.to_vec(),
            400,
        ),
        (
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations".into(),
            "application/json",
            br#"{"metadata":{"name":"v"},"webhooks":[5,{"name":"a.b.c","rules":[5]}]}"#.to_vec(),
            422,
        ),
        (
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews".into(),
            "application/json",
            br#"{"spec":{}}"#.to_vec(),
            422,
        ),
    ];
    let mut cases = cases;
    let big = format!(
        r#"{{"metadata":{{"name":"big"}},"data":{{"k":"{}"}}}}"#,
        "x".repeat(4 * 1024 * 1024)
    );
    cases.push((
        "POST",
        "/api/v1/namespaces/default/configmaps".into(),
        "application/json",
        big.into_bytes(),
        413,
    ));
    for (method, path, ct, body, want) in cases {
        let mut b = http::Request::builder().method(method).uri(path.as_str());
        if !ct.is_empty() {
            b = b.header("content-type", ct);
        }
        let req = b.body(body).expect("request");
        let resp = c
            .send(req.map(kube::client::Body::from))
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: connection failed: {e}"));
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        assert_eq!(status, want, "{method} {path}: {v}");
        assert_eq!(v["kind"], "Status", "{method} {path}: {v}");
        assert_eq!(v["code"], want);
    }
    sim.shutdown().await;
}
