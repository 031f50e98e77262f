//! kcp deletes a workspace's contents and an APIBinding's bound objects through
//! admission, and stays in deletion with a condition while something refuses
//! (docs/kcp-facts.md 33, 34).

mod common;

use common::*;
use common::{dyn_api as api, dyn_ar as ar, dyn_create as create};
use holdfast_sim::{SimConfig, SimHandle};
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

async fn client_at(sim: &SimHandle, path: &str) -> kube::Client {
    let server = format!("{}/clusters/{path}", sim.url());
    sim.client_for_server(&server, "admin")
        .await
        .unwrap_or_else(|e| panic!("client for {server}: {e}"))
}

fn ws() -> ApiResource {
    ar("tenancy.kcp.io", "v1alpha1", "Workspace", "workspaces")
}
fn binding() -> ApiResource {
    ar("apis.kcp.io", "v1alpha2", "APIBinding", "apibindings")
}
fn widget() -> ApiResource {
    ar("example.io", "v1", "Widget", "widgets")
}
fn lc() -> ApiResource {
    ar(
        "core.kcp.io",
        "v1alpha1",
        "LogicalCluster",
        "logicalclusters",
    )
}
fn cm() -> ApiResource {
    ar("", "v1", "ConfigMap", "configmaps")
}

/// Waits (30 s at the most) until `f` answers Some.
async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Creates Workspace `name` under root and waits until it is Ready.
async fn workspace(sim: &SimHandle, name: &str) -> kube::Client {
    let root = client_at(sim, "root").await;
    create(&root, &ws(), None, json!({"metadata": {"name": name}})).await;
    ready_workspace(&api(&root, &ws(), None), name).await;
    client_at(sim, &format!("root:{name}")).await
}

/// The condition `ty` of `o`.
fn condition(o: &DynamicObject, ty: &str) -> Option<Value> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .cloned()
}

/// `root:p` exports widgets and refuses, while `keep` is set, the DELETE of widget
/// `keep` (by its webhook configuration, which consumers' bound widgets go through);
/// `root:c` binds them and holds widgets `keep` and `drop` and ConfigMap `x` in
/// `default`. Returns the sim, clients of `root` and `root:c`, the switch and the
/// webhook.
async fn provider_and_consumer() -> (
    SimHandle,
    kube::Client,
    kube::Client,
    Arc<AtomicBool>,
    TestWebhook,
) {
    let sim = holdfast_sim::Sim::start(SimConfig::default())
        .await
        .expect("sim");
    let root = client_at(&sim, "root").await;
    let p = workspace(&sim, "p").await;
    let c = workspace(&sim, "c").await;
    create(&p, &ar("apis.kcp.io", "v1alpha1", "APIResourceSchema", "apiresourceschemas"), None, json!({
        "metadata": {"name": "v1.widgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}]}
    })).await;
    create(&p, &ar("apis.kcp.io", "v1alpha2", "APIExport", "apiexports"), None, json!({
        "metadata": {"name": "widgets"},
        "spec": {"resources": [{"group": "example.io", "name": "widgets", "schema": "v1.widgets.example.io", "storage": {"crd": {}}}]}
    })).await;
    let keep = Arc::new(AtomicBool::new(true));
    let k = keep.clone();
    let hook = TestWebhook::start(&[], Arc::new(move |request: &Value| {
        let name = request["oldObject"]["metadata"]["name"].as_str();
        if k.load(Ordering::SeqCst) && name == Some("keep") {
            json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "keep is kept"}})
        } else {
            json!({"allowed": true})
        }
    }))
    .await;
    create(&p, &ar("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"), None, json!({
        "metadata": {"name": "keeper"},
        "webhooks": [{"name": "keeper.example.io", "clientConfig": {"url": hook.url("/keeper"), "caBundle": hook.ca_b64()},
                      "rules": [{"operations": ["DELETE"], "apiGroups": ["example.io"], "apiVersions": ["v1"], "resources": ["widgets"]}],
                      "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
    })).await;
    sim.webhooks_replicated(Duration::from_secs(30))
        .await
        .expect("replicated");
    create(
        &c,
        &binding(),
        None,
        json!({
            "metadata": {"name": "widgets"},
            "spec": {"reference": {"export": {"path": "root:p", "name": "widgets"}}}
        }),
    )
    .await;
    let bindings = api(&c, &binding(), None);
    let b = wait_for("binding Bound", || {
        let bindings = bindings.clone();
        async move {
            let b = bindings.get("widgets").await.ok()?;
            (b.data["status"]["phase"] == "Bound").then_some(b)
        }
    })
    .await;
    assert_eq!(
        b.metadata.finalizers.as_deref(),
        Some(&["apis.kcp.io/apibinding-finalizer".to_string()][..]),
        "kcp's admission adds the binding's finalizer"
    );
    for n in ["keep", "drop"] {
        create(
            &c,
            &widget(),
            Some("default"),
            json!({"metadata": {"name": n}}),
        )
        .await;
    }
    create(
        &c,
        &cm(),
        Some("default"),
        json!({"metadata": {"name": "x"}}),
    )
    .await;
    (sim, root, c, keep, hook)
}

async fn names(c: &kube::Client, ar: &ApiResource) -> Vec<String> {
    let mut v: Vec<String> = api(c, ar, Some("default"))
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_apibinding_deletes_its_objects_through_admission_and_waits_on_a_refusal() {
    let (sim, _root, c, keep, hook) = provider_and_consumer().await;
    let bindings = api(&c, &binding(), None);
    let deleting = bindings
        .delete("widgets", &Default::default())
        .await
        .expect("delete the binding");
    let deleting = deleting
        .left()
        .expect("the binding waits for its finalizer");
    assert!(deleting.metadata.deletion_timestamp.is_some());

    let cond = wait_for("BindingResourceDeleteSuccess=False", || {
        let bindings = bindings.clone();
        async move {
            let b = bindings.get("widgets").await.ok()?;
            condition(&b, "BindingResourceDeleteSuccess").filter(|c| c["status"] == "False")
        }
    })
    .await;
    assert_eq!(cond["reason"], "ResourceDeletionFailed", "{cond}");
    assert_eq!(
        cond["message"], "admission webhook \"keeper.example.io\" denied the request: keep is kept",
        "{cond}"
    );
    // The refused object stays, and its type is still served; the others went.
    assert_eq!(names(&c, &widget()).await, ["keep"]);
    assert_eq!(names(&c, &cm()).await, ["x"]);
    let review = hook
        .reviews()
        .into_iter()
        .find(|r| r.review["request"]["oldObject"]["metadata"]["name"] == "keep")
        .expect("the refused DELETE was reviewed");
    assert_eq!(review.review["request"]["operation"], "DELETE");

    keep.store(false, Ordering::SeqCst);
    wait_for("the binding gone", || {
        let bindings = bindings.clone();
        async move {
            match bindings.get("widgets").await {
                Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
                _ => None,
            }
        }
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_workspace_deletes_its_contents_through_admission_and_waits_on_a_refusal() {
    let (sim, root, c, keep, _hook) = provider_and_consumer().await;
    let lc_name = sim.logical_cluster("root:c").expect("logical cluster");
    let wss = api(&root, &ws(), None);
    let w = wss.get("c").await.expect("workspace");
    assert_eq!(
        w.metadata.finalizers.as_deref(),
        Some(&["core.kcp.io/logicalcluster".to_string()][..])
    );
    let w = wss
        .delete("c", &Default::default())
        .await
        .expect("delete the workspace")
        .left()
        .expect("the workspace waits for its logical cluster");
    assert!(w.metadata.deletion_timestamp.is_some());

    // The namespace controller meets the refusal...
    let namespaces = api(&c, &ar("", "v1", "Namespace", "namespaces"), None);
    let content = wait_for("NamespaceDeletionContentFailure=True", || {
        let namespaces = namespaces.clone();
        async move {
            let ns = namespaces.get("default").await.ok()?;
            condition(&ns, "NamespaceDeletionContentFailure").filter(|c| c["status"] == "True")
        }
    })
    .await;
    assert!(
        content["message"]
            .as_str()
            .is_some_and(|m| m.contains("keep is kept")),
        "{content}"
    );
    // ... and the logical cluster says what remains: the binding waiting on its
    // objects (the terminating namespace answers kcp's DeleteCollection with a
    // conflict, an error kcp does not count as remaining once something else is).
    let lcs = api(&c, &lc(), None);
    let want = "Some resources are remaining: apibindings.apis.kcp.io has 1 resource instances; \
                Some content in the logical cluster has finalizers remaining: \
                apis.kcp.io/apibinding-finalizer in 1 resource instances";
    let cond = wait_for("WorkspaceContentDeleted names what remains", || {
        let lcs = lcs.clone();
        async move {
            let l = lcs.get("cluster").await.ok()?;
            l.metadata.deletion_timestamp.as_ref()?;
            condition(&l, "WorkspaceContentDeleted").filter(|c| c["message"] == want)
        }
    })
    .await;
    assert_eq!(cond["status"], "False", "{cond}");
    assert_eq!(cond["reason"], "SomeResourcesRemain", "{cond}");
    // The refused widget stays, with its namespace and binding; the rest went.
    assert_eq!(names(&c, &widget()).await, ["keep"]);
    assert_eq!(names(&c, &cm()).await, Vec::<String>::new());
    assert!(
        wss.get("c").await.is_ok(),
        "the workspace stays in deletion"
    );

    keep.store(false, Ordering::SeqCst);
    wait_for("the workspace gone", || {
        let wss = wss.clone();
        async move {
            match wss.get("c").await {
                Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
                _ => None,
            }
        }
    })
    .await;
    assert!(sim.logical_cluster(&lc_name).is_none());
    sim.shutdown().await;
}
