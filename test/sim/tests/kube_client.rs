//! kube-rs clients against holdfast-sim: CRUD, watch semantics (bookmarks, 410
//! recovery), server-side apply, finalizers, namespace cascade, CRDs, GC, RBAC.

mod common;

use common::{api_status, create_obj, merge_patch, refused, wait_until};
use futures::StreamExt;
use holdfast_sim::{RbacRule, Sim, SimConfig, User};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::time::Duration;

fn cm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps")
}

/// The body of `GET path` (a watch: its event lines).
async fn get_text(client: &kube::Client, path: &str) -> String {
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    client
        .request_text(req)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

async fn create_ns(client: &kube::Client, name: &str) {
    let nss: Api<Namespace> = Api::all(client.clone());
    create_obj(&nss, json!({"metadata": {"name": name}})).await;
    // Like a real cluster, kube-root-ca.crt and the default ServiceAccount appear shortly
    // after; wait so tests see a settled namespace.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), name);
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), name);
    for _ in 0..400 {
        if cms
            .get_opt("kube-root-ca.crt")
            .await
            .ok()
            .flatten()
            .is_some()
            && sas.get_opt("default").await.ok().flatten().is_some()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("namespace {name} did not get kube-root-ca.crt and the default ServiceAccount");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_crud_errors_and_paging() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    create_ns(&client, "cap").await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "cap", &cm_resource());

    let mut obj = DynamicObject::new("", &cm_resource()).within("cap");
    obj.metadata.generate_name = Some("gen-".into());
    obj.data = json!({"data": {"k": "v"}});
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let name = created.metadata.name.clone().expect("generated name");
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let rv1: u64 = created
        .metadata
        .resource_version
        .clone()
        .expect("rv")
        .parse()
        .expect("numeric rv");
    assert_eq!(created.data["data"]["k"], "v");

    // Duplicate create.
    let mut dup = DynamicObject::new(&name, &cm_resource()).within("cap");
    dup.data = json!({});
    let s = refused(api.create(&PostParams::default(), &dup), "duplicate").await;
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(s.message, format!("configmaps \"{name}\" already exists"));

    // Missing object.
    let s = api_status(api.get("nope").await.expect_err("missing"));
    assert_eq!(
        (s.code, s.reason.as_str(), s.message.as_str()),
        (404, "NotFound", "configmaps \"nope\" not found")
    );
    let deploys: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "cap",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        ),
    );
    let s = api_status(deploys.get("nope").await.expect_err("missing"));
    assert_eq!(s.message, "deployments.apps \"nope\" not found");
    let d = s.details.expect("details");
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("nope", "apps", "deployments")
    );

    // Update with a stale resourceVersion.
    let mut upd = created.clone();
    upd.data["data"]["k"] = json!("v2");
    let updated = api
        .replace(&name, &PostParams::default(), &upd)
        .await
        .expect("replace");
    let rv2: u64 = updated
        .metadata
        .resource_version
        .clone()
        .expect("rv")
        .parse()
        .expect("rv");
    assert!(rv2 > rv1);
    let s = refused(api.replace(&name, &PostParams::default(), &upd), "stale").await;
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        format!(
            "Operation cannot be fulfilled on configmaps \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        )
    );

    // Merge and JSON patches.
    let p = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"m": "1"}}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("m"))
            .map(String::as_str),
        Some("1")
    );
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/data/j", "value": "2"}]))
            .expect("patch");
    let p = api
        .patch(&name, &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .expect("json patch");
    assert_eq!(p.data["data"]["j"], "2");
    assert_eq!(p.data["data"]["k"], "v2");

    // Paging, selectors.
    for i in 0..7 {
        let mut o = DynamicObject::new(&format!("page-{i}"), &cm_resource()).within("cap");
        o.metadata.labels = Some([("idx".to_string(), (i % 2).to_string())].into());
        o.data = json!({});
        api.create(&PostParams::default(), &o)
            .await
            .expect("create page");
    }
    let first = api
        .list(&ListParams::default().limit(3))
        .await
        .expect("list");
    assert_eq!(first.items.len(), 3);
    let token = first.metadata.continue_.clone().expect("continue token");
    assert_eq!(
        first.metadata.remaining_item_count,
        Some(6),
        "9 configmaps incl. kube-root-ca.crt"
    );
    let second = api
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .expect("list 2");
    assert_eq!(second.items.len(), 3);
    assert_ne!(first.items[0].metadata.name, second.items[0].metadata.name);
    let all = api.list(&ListParams::default()).await.expect("list all");
    assert_eq!(all.items.len(), 9);
    let names: Vec<String> = all
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "lists are ordered by name like etcd keys");
    let odd = api
        .list(&ListParams::default().labels("idx=1"))
        .await
        .expect("labels");
    assert_eq!(odd.items.len(), 3);
    let set = api
        .list(&ListParams::default().labels("idx in (0,1),idx notin (0)"))
        .await
        .expect("set");
    assert_eq!(set.items.len(), 3);
    let exists = api
        .list(&ListParams::default().labels("!idx"))
        .await
        .expect("not exists");
    let lacking: Vec<String> = exists
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(lacking, [name.clone(), "kube-root-ca.crt".to_string()]);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=page-3"))
        .await
        .expect("fields");
    assert_eq!(by_name.items.len(), 1);
    assert_eq!(by_name.items[0].metadata.name.as_deref(), Some("page-3"));
    let s = refused(
        api.list(&ListParams::default().fields("spec.foo=bar")),
        "bad field",
    )
    .await;
    assert_eq!(s.code, 400);

    // Delete returns a Status for immediate deletion.
    let res = api
        .delete("page-0", &DeleteParams::default())
        .await
        .expect("delete");
    let status = res.right().expect("Status");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    assert_eq!(status.details.expect("details").name, "page-0");
    assert!(api.get_opt("page-0").await.expect("get").is_none());

    // Precondition mismatch.
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let s = api_status(api.delete("page-1", &dp).await.expect_err("precondition"));
    assert_eq!(s.code, 409);

    // deletecollection with a selector.
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("idx=1"),
    )
    .await
    .expect("deletecollection");
    assert!(
        api.list(&ListParams::default().labels("idx=1"))
            .await
            .expect("list")
            .items
            .is_empty()
    );

    // Unknown token -> 401.
    let bad = sim
        .kubeconfig("admin")
        .replace("admin-token", "wrong-token");
    let kc = kube::config::Kubeconfig::from_yaml(&bad).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("cfg");
    let bad_client = kube::Client::try_from(cfg).expect("client");
    let s = refused(
        Api::<ConfigMap>::namespaced(bad_client, "cap").get("x"),
        "401",
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized"));
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_sees_changes_and_recovers_from_410() {
    let cfg = SimConfig {
        bookmark_interval: Duration::from_secs(3600),
        ..Default::default()
    };
    let sim = Sim::start(cfg).await.expect("sim");
    let client = sim.client().await.expect("client");
    create_ns(&client, "w").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "w");
    create_obj(&api, json!({"metadata": {"name": "a"}})).await;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let w = api.clone();
    let task = tokio::spawn(async move {
        let mut s = watcher(w, watcher::Config::default().timeout(1)).boxed();
        while let Some(ev) = s.next().await {
            let msg = match ev {
                Ok(watcher::Event::Init) => "init".to_string(),
                Ok(watcher::Event::InitApply(o)) => {
                    format!("initapply {}", o.metadata.name.unwrap_or_default())
                }
                Ok(watcher::Event::InitDone) => "initdone".to_string(),
                Ok(watcher::Event::Apply(o)) => {
                    format!("apply {}", o.metadata.name.unwrap_or_default())
                }
                Ok(watcher::Event::Delete(o)) => {
                    format!("delete {}", o.metadata.name.unwrap_or_default())
                }
                Err(e) => format!("error {e}"),
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    });
    async fn expect(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
        want: &str,
    ) -> Vec<String> {
        let mut seen = vec![];
        loop {
            let m = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {want:?}; saw {seen:?}"))
                .expect("watcher ended");
            let done = m == want;
            seen.push(m);
            if done {
                return seen;
            }
        }
    }
    let seen = expect(&mut rx, "initdone").await;
    assert!(seen.contains(&"initapply a".to_string()), "{seen:?}");
    create_obj(&api, json!({"metadata": {"name": "b"}})).await;
    expect(&mut rx, "apply b").await;
    api.delete("a", &DeleteParams::default())
        .await
        .expect("delete a");
    expect(&mut rx, "delete a").await;

    // Compact history beyond the watcher's resourceVersion: its next watch gets 410
    // Expired and it must re-list.
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    create_obj(&other, json!({"metadata": {"name": "elsewhere"}})).await;
    sim.compact();
    let seen = expect(&mut rx, "initdone").await;
    assert!(
        seen.contains(&"init".to_string()),
        "re-list after 410: {seen:?}"
    );
    assert!(seen.contains(&"initapply b".to_string()), "{seen:?}");
    create_obj(&api, json!({"metadata": {"name": "c"}})).await;
    expect(&mut rx, "apply c").await;
    task.abort();
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_watch_wire_format() {
    let sim = Sim::start(SimConfig {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await
    .expect("sim");
    let client = sim.client().await.expect("client");
    create_ns(&client, "cap").await;
    let rv = sim.resource_version();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "cap");
    create_obj(&api, json!({"metadata": {"name": "watched"}})).await;
    merge_patch(&api, "watched", json!({"metadata": {"labels": {"w": "1"}}})).await;
    api.delete("watched", &DeleteParams::default())
        .await
        .expect("delete");
    let path = format!(
        "/api/v1/namespaces/cap/configmaps?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dwatched"
    );
    let text = get_text(&client, &path).await;
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("event line"))
        .collect();
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .filter(|t| *t != "BOOKMARK")
        .collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"], "{text}");
    assert_eq!(events[0]["object"]["kind"], "ConfigMap");
    assert_eq!(events[0]["object"]["apiVersion"], "v1");
    let bookmark = events
        .iter()
        .find(|e| e["type"] == "BOOKMARK")
        .expect("a bookmark within 1s");
    assert_eq!(
        bookmark["object"]["metadata"].as_object().map(|m| m.len()),
        Some(1),
        "only resourceVersion: {bookmark}"
    );
    let rvs: Vec<u64> = events
        .iter()
        .map(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("0")
                .parse()
                .unwrap_or(0)
        })
        .collect();
    assert!(
        rvs.windows(2).all(|w| w[0] <= w[1]),
        "resourceVersions never go back: {rvs:?}"
    );

    // Expired resourceVersion: HTTP 200 with a single ERROR event.
    sim.compact();
    let path = "/api/v1/namespaces/cap/configmaps?watch=true&resourceVersion=1";
    let text = get_text(&client, path).await;
    let ev: Value = serde_json::from_str(text.trim()).expect("one event");
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert!(
        ev["object"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("too old resource version: 1 (")
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_and_finalizers() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    create_ns(&client, "cap").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "cap");
    let pp = PatchParams::apply("capture").force();
    let applied = api
        .patch("applied", &pp, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"k": "v"}})))
        .await
        .expect("apply creates");
    assert_eq!(
        applied
            .data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(String::as_str),
        Some("v")
    );
    assert!(
        applied.metadata.managed_fields.is_none(),
        "the sim keeps no managedFields"
    );
    let again = api
        .patch("applied", &pp, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied", "labels": {"x": "y"}}, "data": {"k": "v2"}})))
        .await
        .expect("apply updates");
    assert_eq!(
        again
            .data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(String::as_str),
        Some("v2")
    );
    assert_eq!(
        again
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("x"))
            .map(String::as_str),
        Some("y")
    );
    assert_eq!(again.metadata.uid, applied.metadata.uid);
    // fieldManager is required for apply.
    let s = refused(
        api.patch(
            "applied",
            &PatchParams::default(),
            &Patch::Apply(json!({"metadata": {"name": "applied"}})),
        ),
        "no field manager",
    )
    .await;
    assert_eq!(s.code, 422);

    // Finalizers hold the object after DELETE.
    api.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "fin", "finalizers": ["capture.test/hold"]}}),
        )
        .expect("cm"),
    )
    .await
    .expect("create fin");
    let res = api
        .delete("fin", &DeleteParams::default())
        .await
        .expect("delete");
    let held = res.left().expect("object returned");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(held.metadata.deletion_grace_period_seconds, Some(0));
    let still = api.get("fin").await.expect("still there");
    assert_eq!(
        still.metadata.finalizers,
        Some(vec!["capture.test/hold".to_string()])
    );
    // Adding finalizers during deletion is forbidden; removing them completes it.
    let s = refused(
        api.patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["capture.test/hold", "other"]}})),
        ),
        "no new finalizers",
    )
    .await;
    assert_eq!(s.code, 403);
    merge_patch(&api, "fin", json!({"metadata": {"finalizers": null}})).await;
    assert!(api.get_opt("fin").await.expect("get").is_none());
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_cascade_and_owner_gc() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    create_ns(&client, "doomed").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    for n in ["one", "two"] {
        create_obj(&api, json!({"metadata": {"name": n}})).await;
    }
    // Owner references: deleting the owner removes the dependent in the background.
    let owner = api.get("one").await.expect("owner");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "dependent", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "one", "uid": owner.metadata.uid}]}}),
        )
        .expect("cm"),
    )
    .await
    .expect("create dependent");
    api.delete("one", &DeleteParams::default())
        .await
        .expect("delete owner");
    let a = api.clone();
    for _ in 0..200 {
        if a.get_opt("dependent").await.expect("get").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        api.get_opt("dependent").await.expect("get").is_none(),
        "GC deleted the dependent"
    );

    create_obj(
        &api,
        json!({"metadata": {"name": "held", "finalizers": ["test/hold"]}}),
    )
    .await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let res = nss
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete ns");
    let ns = res.left().expect("namespace object returned");
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    let s = refused(
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "late"}})).expect("cm"),
        ),
        "terminating",
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        s.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    // The namespace stays while an object with a finalizer remains.
    let a = api.clone();
    for _ in 0..200 {
        if a.get_opt("two").await.expect("get").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let held = api.get("held").await.expect("held stays");
    assert!(held.metadata.deletion_timestamp.is_some());
    let ns = nss.get("doomed").await.expect("ns still terminating");
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    merge_patch(&api, "held", json!({"metadata": {"finalizers": null}})).await;
    for _ in 0..200 {
        if nss.get_opt("doomed").await.expect("get").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        nss.get_opt("doomed").await.expect("get").is_none(),
        "namespace removed once empty"
    );
    let all: Api<ConfigMap> = Api::all(client.clone());
    let left = all
        .list(&ListParams::default().fields("metadata.namespace=doomed"))
        .await
        .expect("list");
    assert!(left.items.is_empty());
    // Creating in a missing namespace.
    let s = refused(
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}})).expect("cm"),
        ),
        "missing ns",
    )
    .await;
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, "namespaces \"doomed\" not found")
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_serving_status_and_cleanup() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.io"},
        "spec": {"group": "example.io", "scope": "Cluster",
                 "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                 "versions": [
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                     "selectableFields": [{"jsonPath": ".spec.size"}],
                     "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v1beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("crd");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let got = crds.get("widgets.example.io").await.expect("get crd");
    let status = got.status.expect("status");
    let conds = status.conditions.expect("conditions");
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "NamesAccepted" && c.status == "True")
    );
    assert_eq!(
        status.accepted_names.expect("accepted").singular.as_deref(),
        Some("widget")
    );

    // Discovery knows it.
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("example.io", "v1", "Widget"))
        .expect("Widget discovered");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    let widgets: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut w = DynamicObject::new("w1", &ar);
    w.data = json!({"spec": {"size": 1}, "status": {"ignored": true}});
    let created = widgets
        .create(&PostParams::default(), &w)
        .await
        .expect("create widget");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create with a status subresource"
    );
    assert_eq!(created.metadata.annotations, None);

    // status subresource: /status changes status only; main resource ignores status.
    let s = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}, "spec": {"size": 99}})),
        )
        .await
        .expect("patch status");
    assert_eq!(s.data["status"]["ready"], true);
    assert_eq!(s.data["spec"]["size"], 1);
    assert_eq!(s.metadata.generation, Some(1));
    let s = merge_patch(
        &widgets,
        "w1",
        json!({"status": {"ready": false}, "spec": {"size": 2}}),
    )
    .await;
    assert_eq!(s.data["status"]["ready"], true);
    assert_eq!(s.data["spec"]["size"], 2);
    assert_eq!(
        s.metadata.generation,
        Some(2),
        "spec change bumps generation"
    );
    let s = merge_patch(&widgets, "w1", json!({"metadata": {"labels": {"a": "b"}}})).await;
    assert_eq!(
        s.metadata.generation,
        Some(2),
        "metadata change keeps generation"
    );
    // selectableFields make field selectors on custom fields work.
    let sel = widgets
        .list(&ListParams::default().fields("spec.size=2"))
        .await
        .expect("selectable field");
    assert_eq!(sel.items.len(), 1);
    assert!(
        widgets
            .list(&ListParams::default().fields("spec.size=3"))
            .await
            .expect("list")
            .items
            .is_empty()
    );
    assert!(
        widgets
            .list(&ListParams::default().fields("spec.other=3"))
            .await
            .is_err()
    );
    // Other served version.
    let ar_beta = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.io", "v1beta1", "Widget"),
        "widgets",
    );
    let beta: Api<DynamicObject> = Api::all_with(client.clone(), &ar_beta);
    let b = beta.get("w1").await.expect("get v1beta1");
    assert_eq!(b.types.expect("types").api_version, "example.io/v1beta1");

    // Deleting the CRD deletes its instances, then the CRD. An instance with a finalizer
    // holds the CRD in Terminating, where new instances are refused.
    merge_patch(
        &widgets,
        "w1",
        json!({"metadata": {"finalizers": ["test/hold"]}}),
    )
    .await;
    crds.delete("widgets.example.io", &DeleteParams::default())
        .await
        .expect("delete crd");
    let c2 = crds.clone();
    for _ in 0..200 {
        let w = widgets.get("w1").await.expect("still there");
        if w.metadata.deletion_timestamp.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let terminating = crds
        .get("widgets.example.io")
        .await
        .expect("terminating CRD");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert!(
        terminating
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Terminating" && c.status == "True")
    );
    let mut w2 = DynamicObject::new("w2", &ar);
    w2.data = json!({"spec": {"size": 1}});
    let s = refused(widgets.create(&PostParams::default(), &w2), "terminating").await;
    assert_eq!(s.code, 405);
    merge_patch(&widgets, "w1", json!({"metadata": {"finalizers": null}})).await;
    for _ in 0..200 {
        if c2
            .get_opt("widgets.example.io")
            .await
            .expect("get")
            .is_none()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        crds.get_opt("widgets.example.io")
            .await
            .expect("get")
            .is_none()
    );
    let err = widgets.get("w1").await.expect_err("no longer served");
    assert_eq!(api_status(err).code, 404);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_model_and_subject_access_reviews() {
    let cfg = SimConfig {
        users: vec![
            User {
                name: "admin".into(),
                token: "admin-token".into(),
                groups: vec!["system:masters".into()],
                uid: None,
            },
            User {
                name: "alice".into(),
                token: "alice-token".into(),
                groups: vec!["dev".into()],
                uid: None,
            },
            User {
                name: "bob".into(),
                token: "bob-token".into(),
                groups: vec![],
                uid: None,
            },
        ],
        rbac: vec![
            RbacRule {
                groups: vec!["dev".into()],
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                api_groups: vec!["".into()],
                resources: vec!["configmaps".into()],
                ..Default::default()
            },
            RbacRule {
                users: vec!["alice".into()],
                verbs: vec!["bypass".into()],
                api_groups: vec!["holdfast.dev".into()],
                resources: vec!["protections".into()],
                namespaces: vec!["cap".into()],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let sim = Sim::start(cfg).await.expect("sim");
    let admin = sim.client().await.expect("admin");
    let sar = |user: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": user, "groups": [], "resourceAttributes": {"namespace": ns, "verb": "bypass", "group": "holdfast.dev", "resource": "protections"}}})
    };
    let post = |body: Value| {
        http::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).expect("body"))
            .expect("req")
    };
    let r: Value = serde_json::from_str(
        &admin
            .request_text(post(sar("alice", "cap")))
            .await
            .expect("sar"),
    )
    .expect("json");
    assert_eq!(r["status"]["allowed"], true, "{r}");
    assert_eq!(r["kind"], "SubjectAccessReview");
    let r: Value = serde_json::from_str(
        &admin
            .request_text(post(sar("alice", "other")))
            .await
            .expect("sar"),
    )
    .expect("json");
    assert_eq!(r["status"], json!({"allowed": false}));
    let r: Value = serde_json::from_str(
        &admin
            .request_text(post(sar("bob", "cap")))
            .await
            .expect("sar"),
    )
    .expect("json");
    assert_eq!(r["status"]["allowed"], false);

    // The model is enforced on requests too.
    let alice = sim.client_as("alice").await.expect("alice");
    let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), "default");
    cms.list(&ListParams::default())
        .await
        .expect("alice may list configmaps");
    let s = refused(
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}})).expect("cm"),
        ),
        "alice may not create",
    )
    .await;
    assert_eq!(s.code, 403);
    assert_eq!(
        s.message,
        "configmaps is forbidden: User \"alice\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    // Impersonation (kubectl --as) and SelfSubjectAccessReview (kubectl auth can-i).
    let k = common::Kubectl::new(&sim.kubeconfig("admin"));
    let out = k.sh("auth can-i list configmaps --as alice --as-group dev");
    assert_eq!((out.stdout.as_str(), out.code), ("yes\n", 0), "{out:?}");
    let out = k.sh("auth can-i create configmaps --as alice --as-group dev");
    assert_eq!((out.stdout.as_str(), out.code), ("no\n", 1), "{out:?}");
    let out = k.sh("get secrets --as bob");
    assert_eq!(
        out.stderr,
        "Error from server (Forbidden): secrets is forbidden: User \"bob\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\"\n"
    );
    let alice_k = common::Kubectl::new(&sim.kubeconfig("alice"));
    let out = alice_k.sh("get cm --as admin");
    assert_eq!(out.code, 1, "alice may not impersonate: {out:?}");
    // A service account's user name: checked on serviceaccounts in its namespace,
    // and given the service account groups (as kube-apiserver does).
    let out = k.run_stdin(
        &["create", "--validate=false", "-f", "-"],
        Some(
            r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
   "metadata": {"name": "cm-lister"},
   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
   "metadata": {"name": "team-sa-view"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cm-lister"},
   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:serviceaccounts:team"}]}]}"#,
        ),
    );
    assert_eq!(out.code, 0, "{out:?}");
    // kubectl create clusterrole sends protobuf: the rule reads back as sent.
    k.ok("create clusterrole cm-getter --verb=get --resource=configmaps");
    let out = k.sh("get clusterrole cm-getter -o jsonpath={.rules}");
    assert_eq!(
        out.stdout, r#"[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]"#,
        "{out:?}"
    );
    let can = |who: &str| k.run(&["auth", "can-i", "list", "configmaps", "--as", who]);
    let out = can("system:serviceaccount:team:ci");
    assert_eq!((out.stdout.as_str(), out.code), ("yes\n", 0), "{out:?}");
    // Another namespace's service account, and a user of the same name: not in the group.
    for who in [
        "system:serviceaccount:other:ci",
        "system:serviceaccount:team:ci:x",
    ] {
        let out = can(who);
        assert_eq!(
            (out.stdout.as_str(), out.code),
            ("no\n", 1),
            "{who}: {out:?}"
        );
    }
    let out = alice_k
        .sh("get --raw /api/v1/namespaces/default/configmaps --as system:serviceaccount:team:ci");
    assert_eq!(
        out.stderr,
        "Error from server (Forbidden): serviceaccounts \"ci\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"team\"\n",
        "{out:?}"
    );
    sim.shutdown().await;
}

/// Impersonation headers as kube-apiserver's impersonation filter reads them: no
/// group, extra or uid without a user (400), and each of them authorized on its own
/// resource (`groups`, `userextras/KEY`, `uids`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_needs_a_user_and_checks_every_part() {
    let sim = Sim::start(SimConfig {
        users: vec![User {
            name: "imp".into(),
            token: "imp-token".into(),
            ..User::default()
        }],
        rbac: vec![RbacRule {
            users: vec!["imp".into()],
            verbs: vec!["impersonate".into()],
            api_groups: vec!["".into()],
            resources: vec!["users".into()],
            ..RbacRule::default()
        }],
        authorize: true,
        ..SimConfig::default()
    })
    .await
    .expect("sim");
    let raw = |headers: &[(&str, &str)]| {
        let mut req = http::Request::get("/api/v1/namespaces/default/configmaps");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(Vec::new()).expect("request")
    };
    let admin = sim.client().await.expect("admin");
    for (headers, message) in [
        (
            vec![("Impersonate-Group", "devs")],
            "requested [{Group  devs     }] without impersonating a user",
        ),
        (
            vec![("Impersonate-Uid", "1234")],
            "requested [{UID  1234  authentication.k8s.io/v1  }] without impersonating a user",
        ),
    ] {
        let s = api_status(
            admin
                .request_text(raw(&headers))
                .await
                .expect_err("refused without a user"),
        );
        assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (400, "BadRequest", message)
        );
    }
    // A user may be impersonated by imp; a group, an extra value or a uid may not.
    let imp = sim.client_as("imp").await.expect("imp");
    imp.request_text(raw(&[("Impersonate-User", "someone")]))
        .await
        .expect_err("someone may not list configmaps");
    for (headers, message) in [
        (
            vec![
                ("Impersonate-User", "someone"),
                ("Impersonate-Group", "devs"),
            ],
            "groups \"devs\" is forbidden: User \"imp\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope",
        ),
        (
            vec![("Impersonate-User", "someone"), ("Impersonate-Uid", "1234")],
            "uids \"1234\" is forbidden: User \"imp\" cannot impersonate resource \"uids\" in API group \"authentication.k8s.io\" at the cluster scope",
        ),
        (
            vec![
                ("Impersonate-User", "someone"),
                ("Impersonate-Extra-Scopes", "view"),
            ],
            "userextras \"view\" is forbidden: User \"imp\" cannot impersonate resource \"userextras/scopes\" in API group \"authentication.k8s.io\" at the cluster scope",
        ),
    ] {
        let s = api_status(
            imp.request_text(raw(&headers))
                .await
                .expect_err("not allowed to impersonate that part"),
        );
        assert_eq!((s.code, s.message.as_str()), (403, message), "{headers:?}");
    }
    sim.shutdown().await;
}

/// One Event, two APIs: written through `events.k8s.io/v1` it is read through core
/// `v1` (`kubectl get events` lists it) and the other way round, watches of either
/// see writes through the other, and deleting it through one removes it from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_k8s_io_and_core_events_are_one_store() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event as NewEvent;
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    let new: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let mut watch = watcher(new.clone(), watcher::Config::default()).boxed();
    create_obj(
        &new,
        json!({"metadata": {"name": "blocked"}, "eventTime": "2026-11-23T04:00:00.000000Z",
               "reportingController": "holdfast.dev/webhook", "reportingInstance": "w-1",
               "action": "Delete", "reason": "DeletionBlocked", "type": "Warning",
               "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "namespace": "default"},
               "note": "refused: c is protected"}),
    )
    .await;
    let read = core.get("blocked").await.expect("read through core v1");
    assert_eq!(read.message.as_deref(), Some("refused: c is protected"));
    assert_eq!(
        read.reporting_component.as_deref(),
        Some("holdfast.dev/webhook")
    );
    assert_eq!(read.involved_object.name.as_deref(), Some("c"));
    assert_eq!(read.first_timestamp, None);
    let raw = get_text(&client, "/api/v1/namespaces/default/events/blocked").await;
    let raw: Value = serde_json::from_str(&raw).expect("json");
    assert_eq!(
        (
            &raw["source"],
            &raw["firstTimestamp"],
            &raw["lastTimestamp"]
        ),
        (&json!({}), &Value::Null, &Value::Null),
        "unset fields as kube-apiserver serializes them: {raw}"
    );
    let k = common::Kubectl::new(&sim.kubeconfig("admin"));
    k.expect_stdout(
        "get events -n default -o jsonpath={.items[*].message}",
        "refused: c is protected",
    );
    // kubectl's table: the Event columns kube-apiserver prints (wide ones hidden).
    let table = k.ok("get events -n default").stdout;
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines.first().map(Vec::as_slice),
        Some(&["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"][..]),
        "{table}"
    );
    assert_eq!(
        lines.get(1).map(|l| l[1..].join(" ")).as_deref(),
        Some("Warning DeletionBlocked configmap/c refused: c is protected"),
        "{table}"
    );
    let wide = k.ok("get events -n default -o wide").stdout;
    assert!(
        wide.lines()
            .next()
            .is_some_and(|h| h.split_whitespace().collect::<Vec<_>>()
                == [
                    "LAST",
                    "SEEN",
                    "TYPE",
                    "REASON",
                    "OBJECT",
                    "SUBOBJECT",
                    "SOURCE",
                    "MESSAGE",
                    "FIRST",
                    "SEEN",
                    "COUNT",
                    "NAME"
                ]),
        "{wide}"
    );
    assert!(
        wide.lines()
            .nth(1)
            .is_some_and(|r| r.contains("holdfast.dev/webhook, w-1")
                && r.split_whitespace().rev().take(2).eq(["blocked", "1"])),
        "source and count of the wide row: {wide}"
    );
    // A core Event reads through events.k8s.io with the deprecated fields.
    create_obj(
        &core,
        json!({"metadata": {"name": "old-style"}, "reason": "Pulled", "message": "pulled",
               "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
               "source": {"component": "kubelet"}, "count": 2,
               "firstTimestamp": "2026-11-23T04:00:00Z", "lastTimestamp": "2026-11-23T04:01:00Z"}),
    )
    .await;
    let read = new
        .get("old-style")
        .await
        .expect("read through events.k8s.io");
    assert_eq!(read.note.as_deref(), Some("pulled"));
    assert_eq!(read.deprecated_count, Some(2));
    assert_eq!(
        read.deprecated_source.and_then(|s| s.component).as_deref(),
        Some("kubelet")
    );
    // The events.k8s.io watch saw both, the core one converted.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .expect("watch event in time")
            .expect("watch open")
            .expect("watch event");
        if let watcher::Event::Apply(e) | watcher::Event::InitApply(e) = next {
            seen.push((
                e.metadata.name.unwrap_or_default(),
                e.note.unwrap_or_default(),
            ));
        }
    }
    assert_eq!(
        seen,
        [
            ("blocked".to_string(), "refused: c is protected".to_string()),
            ("old-style".to_string(), "pulled".to_string())
        ]
    );
    new.delete("old-style", &Default::default())
        .await
        .expect("delete through events.k8s.io");
    let s = refused(core.get("old-style"), "gone from core v1 too").await;
    assert_eq!(s.code, 404);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_objects_and_watchers_stay_fast() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    create_ns(&client, "bulk").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "bulk");
    // Many watchers on an unrelated namespace must not slow writes down.
    let mut watches = vec![];
    for i in 0..100 {
        let w: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("ns{i}"));
        watches.push(tokio::spawn(async move {
            let mut s = watcher(w, watcher::Config::default()).boxed();
            while s.next().await.is_some() {}
        }));
    }
    let start = std::time::Instant::now();
    let mut tasks = vec![];
    for chunk in 0..10 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..200 {
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(
                        json!({"metadata": {"name": format!("cm-{chunk}-{i}")}}),
                    )
                    .expect("cm"),
                )
                .await
                .expect("create");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let list = api.list(&ListParams::default()).await.expect("list");
    assert_eq!(list.items.len(), 2001);
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_secs(20),
        "2000 creates with 100 watchers took {elapsed:?}"
    );
    for w in watches {
        w.abort();
    }
    wait_until("nothing", || true).await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_and_metadata_watch() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    create_ns(&client, "s").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "s");
    create_obj(
        &api,
        json!({"metadata": {"name": "pre", "labels": {"k": "v"}}}),
    )
    .await;
    // sendInitialEvents=true watch-list: initial ADDED events then a bookmark with the
    // k8s.io/initial-events-end annotation.
    let mut s = watcher(
        api.clone(),
        watcher::Config::default().streaming_lists().labels("k=v"),
    )
    .boxed();
    let mut got = vec![];
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(10), s.next()).await {
        match ev.expect("event") {
            watcher::Event::InitApply(o) => got.push(o.metadata.name.unwrap_or_default()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(got, ["pre"]);
    // Metadata-only watch (PartialObjectMetadata).
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(client.clone(), "s");
    let mut m = watcher(meta_api, watcher::Config::default()).boxed();
    let mut names = vec![];
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_secs(10), m.next()).await {
        match ev.expect("event") {
            watcher::Event::InitApply(o) => {
                assert_eq!(
                    o.types.as_ref().map(|t| t.kind.as_str()),
                    Some("PartialObjectMetadata")
                );
                names.push(o.metadata.name.unwrap_or_default())
            }
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, ["kube-root-ca.crt", "pre"]);
    // Deleting a terminating namespace again is a Conflict.
    create_obj(
        &api,
        json!({"metadata": {"name": "hold", "finalizers": ["t/h"]}}),
    )
    .await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.delete("s", &DeleteParams::default())
        .await
        .expect("first delete");
    let s = refused(nss.delete("s", &DeleteParams::default()), "second delete").await;
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    sim.shutdown().await;
}

#[test]
fn yaml_config_file() {
    let cfg = SimConfig::from_yaml(
        "users:\n- name: admin\n  token: t0\n  groups: [system:masters]\n- name: alice\n  token: t1\n  groups: [dev]\nrbac:\n- users: [alice]\n  verbs: [bypass]\n  apiGroups: [holdfast.dev]\n  resources: [protections]\nbookmarkIntervalMs: 250\n",
    )
    .expect("config");
    assert_eq!(cfg.users.len(), 2);
    assert_eq!(cfg.users[1].groups, ["dev"]);
    assert_eq!(cfg.rbac[0].api_groups, ["holdfast.dev"]);
    assert_eq!(cfg.bookmark_interval, Duration::from_millis(250));
    assert!(SimConfig::from_yaml("users: 3").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_prints_ready_line_and_stops_on_sigterm() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().expect("dir");
    let kc = dir.path().join("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-sim"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kc)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn holdfast-sim");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("ready in time")
        .expect("read")
        .expect("a line");
    let url = line
        .strip_prefix("holdfast-sim listening on ")
        .expect("ready line format")
        .to_string();
    assert!(url.starts_with("https://127.0.0.1:"), "{line}");
    let text = std::fs::read_to_string(&kc).expect("kubeconfig written");
    assert!(text.contains(&format!("server: {url}")));
    let kcfg = kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig");
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kcfg, &Default::default())
            .await
            .expect("cfg"),
    )
    .expect("client");
    let nss: Api<Namespace> = Api::all(client);
    assert!(nss.get("default").await.is_ok());
    let pid = child.id().expect("pid") as i32;
    // SIGTERM
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert!(exit.success(), "clean exit on SIGTERM: {exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_annotation_validation() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let s = refused(
        api.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "x", "labels": {"holdfast.dev/protected": "not ok"}}}),
            )
            .expect("cm"),
        ),
        "invalid label value",
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(s.message.starts_with("ConfigMap \"x\" is invalid: metadata.labels: Invalid value: \"not ok\": a valid label must be an empty string"), "{}", s.message);
    create_obj(&api, json!({"metadata": {"name": "x", "labels": {"holdfast.dev/protected": "Always"}, "annotations": {"holdfast.dev/skip-protection": "true"}}})).await;
    let s = refused(
        api.patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"a/b/c": "1"}}})),
        ),
        "invalid annotation key",
    )
    .await;
    assert_eq!(s.code, 422);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_defaulting_and_method_not_allowed() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "default");
    let s = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "s"}, "stringData": {"a": "hello"}}),
            )
            .expect("secret"),
        )
        .await
        .expect("create secret");
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(s.string_data, None, "stringData is write-only");
    assert_eq!(s.data.expect("data")["a"].0, b"hello".to_vec());
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), "default");
    let svc = svcs
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}),
            )
            .expect("svc"),
        )
        .await
        .expect("create service");
    let spec = svc.spec.expect("spec");
    let ip = spec.cluster_ip.clone().expect("clusterIP allocated");
    assert!(ip.starts_with("10.96."), "{ip}");
    let port = &spec.ports.expect("ports")[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
    );
    let again = merge_patch(&svcs, "web", json!({"metadata": {"labels": {"a": "b"}}})).await;
    assert_eq!(
        again.spec.and_then(|s| s.cluster_ip),
        Some(ip),
        "clusterIP is stable"
    );
    // Namespaced kinds cannot be created at the cluster-wide path.
    let req = http::Request::post("/api/v1/configmaps")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}})).expect("body"))
        .expect("req");
    let err = client.request_text(req).await.expect_err("405");
    assert_eq!(api_status(err).code, 405);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_configmaps_owner_references_and_finalizer_names() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": true}),
        )
        .expect("cm"),
    )
    .await
    .expect("create");
    let s = refused(
        api.patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        ),
        "immutable",
    )
    .await;
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    merge_patch(
        &api,
        "frozen",
        json!({"metadata": {"labels": {"ok": "yes"}}}),
    )
    .await;
    let s = refused(
        api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "o", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "frozen"}]}})).expect("cm")),
        "owner uid",
)
.await;
    assert_eq!(
        s.message,
        "ConfigMap \"o\" is invalid: metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty"
    );
    let s = refused(
        api.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "f", "finalizers": ["not a/valid name"]}}),
            )
            .expect("cm"),
        ),
        "finalizer",
    )
    .await;
    assert_eq!(s.code, 422);
    sim.shutdown().await;
}

/// Objects entering / leaving a watch's label selector appear as ADDED / DELETED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_selector_transitions() {
    let sim = Sim::start(SimConfig::default()).await.expect("sim");
    let client = sim.client().await.expect("client");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = sim.resource_version();
    create_obj(&api, json!({"metadata": {"name": "t"}})).await;
    merge_patch(&api, "t", json!({"metadata": {"labels": {"a": "1"}}})).await;
    merge_patch(&api, "t", json!({"data": {"x": "y"}})).await;
    merge_patch(&api, "t", json!({"metadata": {"labels": null}})).await;
    api.delete("t", &DeleteParams::default())
        .await
        .expect("delete");
    let path = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=1&labelSelector=a%3D1"
    );
    let text = get_text(&client, &path).await;
    let types: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["type"].as_str().map(str::to_string))
        .filter(|t| t != "BOOKMARK")
        .collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"], "{text}");
    sim.shutdown().await;
}
