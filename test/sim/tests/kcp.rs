//! kcp model: workspaces, APIExports/APIBindings, endpoint slices, the APIExport
//! virtual workspace (wildcard list/watch, claimed resources) and export webhooks.

mod common;

use common::*;
use futures::StreamExt;
use holdfast_sim::{Sim, SimConfig};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn obj(ar: &ApiResource, v: Value) -> DynamicObject {
    let mut o: DynamicObject = serde_json::from_value(v).expect("object");
    o.types = Some(kube::core::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    o
}

async fn create(
    client: &kube::Client,
    ar: &ApiResource,
    ns: Option<&str>,
    v: Value,
) -> DynamicObject {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let created = api
        .create(&PostParams::default(), &obj(ar, v))
        .await
        .expect("create");
    // A Workspace is used once Ready (kcp makes it so asynchronously).
    match (ar.plural.as_str(), created.metadata.name.as_deref()) {
        ("workspaces", Some(name)) => ready_workspace(&api, name).await,
        _ => created,
    }
}

/// An admin client for `server` (a workspace path, a virtual workspace, `*`).
async fn client_at(sim: &holdfast_sim::SimHandle, server: &str) -> kube::Client {
    sim.client_for_server(server, "admin")
        .await
        .unwrap_or_else(|e| panic!("client for {server}: {e}"))
}

/// The logical cluster an object is stored in (its `kcp.io/cluster` annotation).
fn cluster_of(o: &DynamicObject) -> Option<&str> {
    o.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kcp.io/cluster"))
        .map(String::as_str)
}

/// The name of the next object a watch reported (30 s at the most).
async fn next_name(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a watch event within 30 s")
        .expect("the watch is running")
}

/// An object with just a name.
fn name(name: &str) -> Value {
    json!({"metadata": {"name": name}})
}

/// A sim, its front-proxy URL and an admin client for the `root` workspace.
async fn at_root(cfg: SimConfig) -> (holdfast_sim::SimHandle, String, kube::Client) {
    let sim = Sim::start(cfg).await.expect("sim");
    let url = sim.url();
    let root = client_at(&sim, &format!("{url}/clusters/root")).await;
    (sim, url, root)
}

fn ws() -> ApiResource {
    ar("tenancy.kcp.io", "v1alpha1", "Workspace", "workspaces")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspaces_exports_bindings_and_virtual_workspace() {
    let (sim, url, root) = at_root(SimConfig::default()).await;

    // Nested workspaces.
    let org = create(&root, &ws(), None, name("org")).await;
    assert_eq!(org.data["status"]["phase"], "Ready");
    let org_lc = org.data["spec"]["cluster"]
        .as_str()
        .expect("spec.cluster")
        .to_string();
    assert_eq!(org.data["spec"]["URL"], format!("{url}/clusters/root:org"));
    assert_eq!(cluster_of(&org), Some("root"));
    let org_c = client_at(&sim, &format!("{url}/clusters/root:org")).await;
    for name in ["provider", "team", "other"] {
        create(&org_c, &ws(), None, json!({"metadata": {"name": name}})).await;
    }
    let team_lc = sim.logical_cluster("root:org:team").expect("team resolves");
    assert_ne!(team_lc, org_lc);
    assert_eq!(
        sim.logical_cluster(&team_lc).as_deref(),
        Some(team_lc.as_str())
    );

    // kubectl against a nested workspace path.
    let k = Kubectl::new(&sim.kubeconfig_for_server(&format!("{url}/clusters/root:org"), "admin"));
    k.expect_stdout("get workspaces -o name", "workspace.tenancy.kcp.io/other\nworkspace.tenancy.kcp.io/provider\nworkspace.tenancy.kcp.io/team\n");
    let out = k.sh(&format!(
        "--server {url}/clusters/root:org:team create cm hello -n default"
    ));
    assert_eq!(out.stdout, "configmap/hello created\n", "{out:?}");
    let out = k.sh(&format!(
        "--server {url}/clusters/root:org:team get cm hello -n default -o json"
    ));
    let cm: Value = serde_json::from_str(&out.stdout).expect("cm json");
    assert_eq!(
        cm["metadata"]["annotations"]["kcp.io/cluster"],
        team_lc.as_str()
    );
    let out = k.sh(&format!(
        "--server {url}/clusters/root:org:other get cm hello -n default"
    ));
    assert_eq!(
        out.stderr, "Error from server (NotFound): configmaps \"hello\" not found\n",
        "workspaces are isolated"
    );

    // Provider: schema + export (+ webhook configuration claimed by the export).
    let provider = client_at(&sim, &format!("{url}/clusters/root:org:provider")).await;
    create(&provider, &ar("apis.kcp.io", "v1alpha1", "APIResourceSchema", "apiresourceschemas"), None, json!({
        "metadata": {"name": "v1.widgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                               "schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}]}
    })).await;
    create(&provider, &ar("apis.kcp.io", "v1alpha1", "APIExport", "apiexports"), None, json!({
        "metadata": {"name": "example.io"},
        "spec": {"latestResourceSchemas": ["v1.widgets.example.io"],
                 "permissionClaims": [{"group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations", "all": true},
                                      {"group": "", "resource": "configmaps", "all": true}]}
    })).await;
    // kcp made the endpoint slice named like the export; no shard holds a binding yet.
    let slices = slice_ar();
    let slice = get_as(&provider, &slices, "example.io").await;
    // It names the export by its path and is owned by it (docs/kcp-facts.md 35).
    let provider_lc = sim
        .logical_cluster("root:org:provider")
        .expect("provider lc");
    assert_eq!(
        slice.data["spec"]["export"],
        json!({"path": "root:org:provider", "name": "example.io"})
    );
    assert_eq!(slice.data["status"]["endpoints"], json!([]));

    // Consumer binds (v1alpha2 form), accepting the claims.
    let team = client_at(&sim, &format!("{url}/clusters/root:org:team")).await;
    create(&team, &ar("apis.kcp.io", "v1alpha2", "APIBinding", "apibindings"), None, json!({
        "metadata": {"name": "example.io"},
        "spec": {"reference": {"export": {"path": "root:org:provider", "name": "example.io"}},
                 "permissionClaims": [
                    {"group": "admissionregistration.k8s.io", "resource": "validatingwebhookconfigurations", "selector": {"matchAll": true}, "verbs": ["*"], "state": "Accepted"},
                    {"group": "", "resource": "configmaps", "selector": {"matchAll": true}, "verbs": ["*"], "state": "Accepted"}]}
    })).await;
    let bindings: Api<DynamicObject> = Api::all_with(
        team.clone(),
        &ar("apis.kcp.io", "v1alpha2", "APIBinding", "apibindings"),
    );
    let b = bindings.get("example.io").await.expect("binding");
    assert_eq!(b.data["status"]["phase"], "Bound", "{:?}", b.data);
    assert_eq!(b.data["status"]["boundResources"][0]["resource"], "widgets");
    // The one shard now holds a binding: its virtual workspace URL is in the slice.
    let shard_url = sim.shards()[0].1.clone();
    let slice = get_as(&provider, &slices, "example.io").await;
    let vw_url = slice.data["status"]["endpoints"][0]["url"]
        .as_str()
        .expect("endpoint url")
        .to_string();
    assert_eq!(
        slice.data["status"]["endpoints"],
        json!([{"url": format!("{shard_url}/services/apiexport/{provider_lc}/example.io")}])
    );

    // v1alpha1 <-> v1alpha2 conversion of exports and bindings.
    let export = ar("apis.kcp.io", "v1alpha2", "APIExport", "apiexports");
    let e2 = get_as(&provider, &export, "example.io").await;
    assert_eq!(
        e2.data["spec"]["resources"][0],
        json!({"group": "example.io", "name": "widgets", "schema": "v1.widgets.example.io", "storage": {"crd": {}}})
    );
    assert!(e2.data["spec"].get("latestResourceSchemas").is_none());
    assert_eq!(
        e2.data["spec"]["permissionClaims"][0]["selector"],
        json!({"matchAll": true})
    );
    let binding = ar("apis.kcp.io", "v1alpha1", "APIBinding", "apibindings");
    let b1 = get_as(&team, &binding, "example.io").await;
    assert_eq!(b1.data["spec"]["permissionClaims"][0]["all"], true);
    assert_eq!(b1.data["spec"]["permissionClaims"][0]["state"], "Accepted");

    // Widgets are served in the consumer, not in an unbound workspace.
    let widget = ar("example.io", "v1", "Widget", "widgets");
    let w = create(
        &team,
        &widget,
        Some("default"),
        json!({"metadata": {"name": "w1"}, "spec": {"size": 1}}),
    )
    .await;
    assert_eq!(cluster_of(&w), Some(team_lc.as_str()));
    let other = client_at(&sim, &format!("{url}/clusters/root:org:other")).await;
    let other_widgets: Api<DynamicObject> = Api::namespaced_with(other.clone(), "default", &widget);
    assert!(
        other_widgets.list(&ListParams::default()).await.is_err(),
        "not bound in root:org:other"
    );

    // Virtual workspace: wildcard list and watch across binding workspaces.
    let vw_all = client_at(&sim, &format!("{vw_url}/clusters/*")).await;
    let all: Api<DynamicObject> = Api::all_with(vw_all.clone(), &widget);
    let listed = all
        .list(&ListParams::default())
        .await
        .expect("wildcard list");
    assert_eq!(listed.items.len(), 1);
    assert!(
        Api::<DynamicObject>::namespaced_with(other.clone(), "default", &widget)
            .list(&ListParams::default())
            .await
            .is_err()
    );
    assert_eq!(cluster_of(&listed.items[0]), Some(team_lc.as_str()));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let watch_task = tokio::spawn(async move {
        let mut s = watcher(all, watcher::Config::default()).boxed();
        while let Some(ev) = s.next().await {
            if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev {
                let _ = tx.send(o.metadata.name.unwrap_or_default());
            }
        }
    });
    let first = next_name(&mut rx).await;
    assert_eq!(first, "w1");
    create(&team, &widget, Some("default"), name("w2")).await;
    let second = next_name(&mut rx).await;
    assert_eq!(second, "w2");
    // A workspace that binds after the watch started is visible too.
    create(&org_c, &ws(), None, name("late")).await;
    let late = client_at(&sim, &format!("{url}/clusters/root:org:late")).await;
    create(
        &late,
        &ar("apis.kcp.io", "v1alpha1", "APIBinding", "apibindings"),
        None,
        json!({
            "metadata": {"name": "example.io"},
            "spec": {"reference": {"export": {"path": "root:org:provider", "name": "example.io"}}}
        }),
    )
    .await;
    create(&late, &widget, Some("default"), name("w3")).await;
    let third = next_name(&mut rx).await;
    assert_eq!(third, "w3");
    watch_task.abort();

    // Claimed resources through the virtual workspace: allowed where the claim was accepted.
    let vw_team = client_at(&sim, &format!("{vw_url}/clusters/{team_lc}")).await;
    let cms: Api<DynamicObject> = Api::namespaced_with(
        vw_team.clone(),
        "default",
        &ar("", "v1", "ConfigMap", "configmaps"),
    );
    let names = list_names(&cms, "claimed list").await;
    assert_eq!(names, ["hello"]);
    let other_lc = sim.logical_cluster("root:org:other").expect("other lc");
    let vw_other = client_at(&sim, &format!("{vw_url}/clusters/{other_lc}")).await;
    let denied: Api<DynamicObject> = Api::namespaced_with(
        vw_other,
        "default",
        &ar("", "v1", "ConfigMap", "configmaps"),
    );
    match denied.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403),
        other => panic!("expected 403, got {other:?}"),
    }

    // A ValidatingWebhookConfiguration in the export's workspace applies to the exported
    // resource in every binding workspace; reviews carry kcp.io/cluster.
    let deny_all: Decide = Arc::new(|req: &Value| {
        if req["operation"] == "DELETE" {
            json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "holdfast: Widget is protected"}})
        } else {
            json!({"allowed": true})
        }
    });
    let hook = TestWebhook::start(&[], deny_all).await;
    create(&provider, &ar("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"), None, json!({
        "metadata": {"name": "holdfast"},
        "webhooks": [{"name": "widgets.holdfast.dev", "clientConfig": {"url": hook.url("/validate"), "caBundle": hook.ca_b64()},
                      "rules": [{"operations": ["DELETE"], "apiGroups": ["example.io"], "apiVersions": ["v1"], "resources": ["widgets"]}],
                      "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
    })).await;
    // kcp's admission sees a configuration once the cache server replicated it.
    sim.webhooks_replicated(Duration::from_secs(30))
        .await
        .expect("replicated");
    let out = k.sh(&format!(
        "--server {url}/clusters/root:org:team delete widget w1 -n default"
    ));
    assert_eq!(
        out.stderr,
        "Error from server (Forbidden): admission webhook \"widgets.holdfast.dev\" denied the request: holdfast: Widget is protected\n",
        "{out:?}"
    );
    let reviews = hook.reviews();
    assert_eq!(reviews.len(), 1);
    assert_eq!(
        reviews[0].review["request"]["oldObject"]["metadata"]["annotations"]["kcp.io/cluster"],
        team_lc.as_str()
    );

    // The wildcard for system:masters is a shard's (the front-proxy refuses it).
    let star = client_at(&sim, &format!("{shard_url}/clusters/*")).await;
    let all_cms: Api<DynamicObject> = Api::all_with(star, &ar("", "v1", "ConfigMap", "configmaps"));
    let names = list_names(&all_cms, "wildcard").await;
    assert_eq!(names, ["hello"]);
    let fp_star = client_at(&sim, &format!("{url}/clusters/*")).await;
    let fp_cms: Api<DynamicObject> =
        Api::all_with(fp_star, &ar("", "v1", "ConfigMap", "configmaps"));
    match fp_cms.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(
            (s.code, s.message.as_str()),
            (
                403,
                "configmaps is forbidden: User \"admin\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope: workspace access not permitted"
            )
        ),
        other => panic!("expected 403 at the front-proxy, got {other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_workspace_removes_its_logical_cluster() {
    let (sim, url, root) = at_root(SimConfig::default()).await;
    create(&root, &ws(), None, name("gone")).await;
    let gone = client_at(&sim, &format!("{url}/clusters/root:gone")).await;
    create(&gone, &ws(), None, name("child")).await;
    let lc = sim.logical_cluster("root:gone").expect("lc");
    let child_lc = sim.logical_cluster("root:gone:child").expect("child lc");
    create(
        &gone,
        &ar("", "v1", "ConfigMap", "configmaps"),
        Some("default"),
        name("x"),
    )
    .await;
    let wss: Api<DynamicObject> = Api::all_with(root.clone(), &ws());
    wss.delete("gone", &Default::default())
        .await
        .expect("delete workspace");
    // kcp deletes the contents, then the logical cluster, then the Workspace.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while wss.get("gone").await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "workspace not gone");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(sim.logical_cluster("root:gone").is_none());
    assert!(sim.logical_cluster(&lc).is_none());
    assert!(sim.logical_cluster(&child_lc).is_none());
    let star = client_at(&sim, &format!("{}/clusters/*", sim.shards()[0].1)).await;
    let cms: Api<DynamicObject> = Api::all_with(star, &ar("", "v1", "ConfigMap", "configmaps"));
    assert!(
        cms.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    // Requests to the removed workspace path fail.
    let k = Kubectl::new(&sim.kubeconfig_for_server(&format!("{url}/clusters/root:gone"), "admin"));
    let out = k.sh("get cm -n default");
    // kubectl's discovery meets the front-proxy's 403 first.
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(
        out.stderr.lines().last(),
        Some("Error from server (Forbidden): unknown"),
        "{out:?}"
    );
    let gone_c = client_at(&sim, &format!("{url}/clusters/root:gone")).await;
    let gone_cms: Api<DynamicObject> =
        Api::namespaced_with(gone_c, "default", &ar("", "v1", "ConfigMap", "configmaps"));
    match gone_cms.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (
                403,
                "Forbidden",
                "configmaps is forbidden: User \"admin\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\": workspace access not permitted"
            )
        ),
        other => panic!("expected 403 for a removed workspace, got {other:?}"),
    }
    sim.shutdown().await;
}

/// The names of the objects `api` lists (`what` names the list in a failure).
async fn list_names(api: &Api<DynamicObject>, what: &str) -> Vec<String> {
    api.list(&ListParams::default())
        .await
        .expect(what)
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect()
}

/// The cluster-scoped object `name`, read as `ar` (its group version and kind).
async fn get_as(client: &kube::Client, ar: &ApiResource, name: &str) -> DynamicObject {
    Api::<DynamicObject>::all_with(client.clone(), ar)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{} {name} as {}: {e}", ar.kind, ar.api_version))
}

/// kcp's APIResourceSchema admission: the shipped `manifests/kcp` install with
/// `kubectl apply -k`; a CRD-style schema (wrapped in `openAPIV3Schema`, no
/// `listKind`) and a name without a valid prefix are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resource_schemas_are_validated_as_kcp_does() {
    let (sim, url, root) = at_root(SimConfig::default()).await;
    create(&root, &ws(), None, name("hf")).await;
    let k = Kubectl::new(&sim.kubeconfig_for_server(&format!("{url}/clusters/root:hf"), "admin"));
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests/kcp");
    let out = k.ok(&format!("apply -k {dir}"));
    let created: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.ends_with(" created"))
        .collect();
    assert_eq!(created.len(), 5, "four schemas and the export: {out:?}");

    let hf = client_at(&sim, &format!("{url}/clusters/root:hf")).await;
    let schemas = ar(
        "apis.kcp.io",
        "v1alpha1",
        "APIResourceSchema",
        "apiresourceschemas",
    );
    let api: Api<DynamicObject> = Api::all_with(hf, &schemas);
    let crd_style = json!({
        "metadata": {"name": "v1.gadgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object"}}}]}
    });
    let s = refused(
        api.create(&PostParams::default(), &obj(&schemas, crd_style)),
        "a CRD-style schema",
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "APIResourceSchema.apis.kcp.io \"v1.gadgets.example.io\" is invalid: [\
         spec.names.listKind: Required value, \
         spec.versions[0].schema.openAPIV3Schema: Forbidden: the schema is the OpenAPI v3 schema itself, not a CustomResourceDefinition's openAPIV3Schema wrapper, \
         spec.versions[0].schema.type: Required value: must not be empty at the root]"
    );
    let bad_prefix = json!({
        "metadata": {"name": "1x.gadgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"type": "object"}}]}
    });
    let s = refused(
        api.create(&PostParams::default(), &obj(&schemas, bad_prefix)),
        "a name without a valid prefix",
    )
    .await;
    assert_eq!(
        s.message,
        "APIResourceSchema.apis.kcp.io \"1x.gadgets.example.io\" is invalid: metadata.name: Invalid value: \"1x.gadgets.example.io\": must be prefix.gadgets.example.io with a prefix matching ^[a-z]([-a-z0-9]*[a-z0-9])?$"
    );
}

// ---- Shards behind a front-proxy (docs/kcp-facts.md facts 1-3, 7, 8, 11-13, 15) ----

/// Two shards (`root`, `shard-1`) and a user outside `system:masters`.
fn two_shards() -> SimConfig {
    let mut cfg = SimConfig {
        shards: 2,
        ..SimConfig::default()
    };
    cfg.users.push(holdfast_sim::User {
        name: "alice".into(),
        token: "alice-token".into(),
        groups: vec![],
        uid: None,
    });
    cfg
}

/// The base URL of shard `name`.
fn shard_url(sim: &holdfast_sim::SimHandle, name: &str) -> String {
    sim.shards()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, u)| u)
        .unwrap_or_else(|| panic!("no shard {name}"))
}

/// A Workspace placed through `spec.location.selector` (None: no selector).
fn ws_at(name: &str, selector: Option<Value>) -> Value {
    match selector {
        Some(s) => json!({"metadata": {"name": name}, "spec": {"location": {"selector": s}}}),
        None => json!({"metadata": {"name": name}}),
    }
}

/// `ar` across the cluster (or virtual workspace) at `server`.
async fn all_at(
    sim: &holdfast_sim::SimHandle,
    server: &str,
    ar: &ApiResource,
) -> Api<DynamicObject> {
    Api::all_with(client_at(sim, server).await, ar)
}

/// Creates Workspace `name` in `c`, placed on `shard` by its selector.
async fn ws_on(c: &kube::Client, name: &str, shard: &str) -> DynamicObject {
    let selector = json!({"matchLabels": {"name": shard}});
    create(c, &ws(), None, ws_at(name, Some(selector))).await
}

/// The Status a list through `api` is refused with.
async fn list_refused(api: &Api<DynamicObject>, what: &str) -> kube::core::Status {
    refused(api.list(&ListParams::default()), what).await
}

fn lc_ar() -> ApiResource {
    ar(
        "core.kcp.io",
        "v1alpha1",
        "LogicalCluster",
        "logicalclusters",
    )
}

fn cm_ar() -> ApiResource {
    ar("", "v1", "ConfigMap", "configmaps")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_proxy_routes_to_shards_and_workspaces_are_placed() {
    let (sim, url, root) = at_root(two_shards()).await;
    let names: Vec<String> = sim.shards().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["root", "shard-1"]);
    let (root_url, s1_url) = (shard_url(&sim, "root"), shard_url(&sim, "shard-1"));
    assert!(
        root_url != s1_url && root_url != url,
        "{root_url} {s1_url} {url}"
    );

    // Shard objects in root, one per shard.
    let shards = ar("core.kcp.io", "v1alpha1", "Shard", "shards");
    let s1 = get_as(&root, &shards, "shard-1").await;
    assert_eq!(
        s1.metadata.labels.clone().unwrap_or_default().get("name"),
        Some(&"shard-1".to_string())
    );
    assert_eq!(
        s1.data["spec"],
        json!({"baseURL": s1_url, "externalURL": url, "virtualWorkspaceURL": s1_url})
    );
    let listed = list_names(&Api::all_with(root.clone(), &shards), "shards").await;
    assert_eq!(listed, ["root", "shard-1"]);
    assert_eq!(sim.shard_of("root").as_deref(), Some("root"));

    // Placement: by selector (matchLabels, matchExpressions), else round-robin.
    let on_s1 = ws_on(&root, "b", "shard-1").await;
    let b_lc = on_s1.data["spec"]["cluster"]
        .as_str()
        .expect("cluster")
        .to_string();
    assert_eq!(on_s1.data["spec"]["URL"], format!("{url}/clusters/root:b"));
    let annotation = |o: &DynamicObject| {
        o.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("internal.tenancy.kcp.io/shard").cloned())
    };
    // kcp records a hash of the shard's name (docs/kcp-facts.md 35).
    assert_eq!(annotation(&on_s1).as_deref(), Some("2e1tfbst"));
    assert_eq!(sim.shard_of(&b_lc).as_deref(), Some("shard-1"));
    assert_eq!(sim.shard_of("root:b").as_deref(), Some("shard-1"));
    let on_root = create(&root, &ws(), None, ws_at("a", Some(json!({"matchExpressions": [{"key": "name", "operator": "In", "values": ["root"]}]})))).await;
    assert_eq!(annotation(&on_root).as_deref(), Some("1pfxsevk"));
    let x = create(&root, &ws(), None, ws_at("x", None)).await;
    let y = create(&root, &ws(), None, ws_at("y", None)).await;
    let mut xy = [
        annotation(&x).expect("x placed"),
        annotation(&y).expect("y placed"),
    ];
    xy.sort();
    assert_eq!(xy, ["1pfxsevk", "2e1tfbst"], "round-robin over the shards");

    // No shard matches: the Workspace waits in Scheduling, without a logical cluster.
    let selector = json!({"matchLabels": {"name": "nope"}});
    let workspaces = Api::<DynamicObject>::all_with(root.clone(), &ws());
    workspaces
        .create(
            &PostParams::default(),
            &obj(&ws(), ws_at("nowhere", Some(selector))),
        )
        .await
        .expect("create nowhere");
    let mut nowhere = workspaces.get("nowhere").await.expect("nowhere");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while nowhere.data["status"]["conditions"][0]["reason"] != "Unschedulable" {
        assert!(std::time::Instant::now() < deadline, "{:?}", nowhere.data);
        tokio::time::sleep(Duration::from_millis(25)).await;
        nowhere = workspaces.get("nowhere").await.expect("nowhere");
    }
    let status = &nowhere.data["status"];
    let cond = &status["conditions"][0];
    assert_eq!(
        [
            &status["phase"],
            &cond["type"],
            &cond["status"],
            &cond["reason"]
        ],
        ["Scheduling", "WorkspaceScheduled", "False", "Unschedulable"]
    );
    assert!(
        nowhere.data["spec"].get("cluster").is_none(),
        "{:?}",
        nowhere.data
    );
    assert_eq!(annotation(&nowhere), None);
    assert_eq!(sim.logical_cluster("root:nowhere"), None);

    // Front-proxy: a path may start with any logical cluster's name.
    let b = client_at(&sim, &format!("{url}/clusters/root:b")).await;
    ws_on(&b, "child", "root").await;
    let child_lc = sim.logical_cluster("root:b:child").expect("child");
    let via_lc = client_at(&sim, &format!("{url}/clusters/{b_lc}:child")).await;
    let lcs = lc_ar();
    let lc = get_as(&via_lc, &lcs, "cluster").await;
    assert_eq!(cluster_of(&lc), Some(child_lc.as_str()));
    let lc = get_as(
        &client_at(&sim, &format!("{url}/clusters/root:b:child")).await,
        &lcs,
        "cluster",
    )
    .await;
    assert_eq!(cluster_of(&lc), Some(child_lc.as_str()));
    let by_name = client_at(&sim, &format!("{url}/clusters/{b_lc}")).await;
    assert_eq!(
        list_names(&Api::all_with(by_name, &ws()), "workspaces of b").await,
        ["child"]
    );

    // Unknown clusters and `*` at the front-proxy: 403, masters included.
    for x in ["root:nope", "nope", "root:nowhere", "*"] {
        let c = client_at(&sim, &format!("{url}/clusters/{x}")).await;
        let s = list_refused(&Api::all_with(c, &cm_ar()), x).await;
        assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (
                403,
                "Forbidden",
                "configmaps is forbidden: User \"admin\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope: workspace access not permitted"
            ),
            "{x}"
        );
    }
    let c = client_at(&sim, &format!("{url}/clusters/root:nope")).await;
    let s = refused(
        Api::<DynamicObject>::namespaced_with(c, "default", &cm_ar()).get("x"),
        "get",
    )
    .await;
    assert_eq!(
        s.message,
        "configmaps \"x\" is forbidden: User \"admin\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\": workspace access not permitted"
    );
    // Virtual workspaces are a shard's, never the front-proxy's.
    let k = Kubectl::new(&sim.kubeconfig("admin"));
    let out = k.sh(&format!(
        "get --raw /services/apiexport/{b_lc}/e/clusters/*/api/v1/configmaps"
    ));
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            1,
            "Error from server (NotFound): the server could not find the requested resource\n"
        ),
        "{out:?}"
    );
    // Plain paths keep serving the Kubernetes cluster.
    k.expect_stdout("get ns default -o name", "namespace/default\n");

    // A shard serves only its own logical clusters.
    let at_root = client_at(&sim, &format!("{root_url}/clusters/{b_lc}")).await;
    let s = list_refused(&Api::all_with(at_root, &ws()), "b at shard root").await;
    assert_eq!(
        s.message,
        "workspaces.tenancy.kcp.io is forbidden: User \"admin\" cannot list resource \"workspaces\" in API group \"tenancy.kcp.io\" at the cluster scope: workspace access not permitted"
    );
    let at_s1 = client_at(&sim, &format!("{s1_url}/clusters/root:b")).await;
    assert_eq!(
        list_names(&Api::all_with(at_s1, &ws()), "b at shard-1").await,
        ["child"]
    );
    // Shards are served in root only.
    let s = list_refused(&Api::all_with(b.clone(), &shards), "shards in b").await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));

    // The shard wildcard: system:masters only, list and watch only, this shard's clusters.
    create(&b, &cm_ar(), Some("default"), name("in-b")).await;
    let root_c = client_at(&sim, &format!("{url}/clusters/root")).await;
    create(&root_c, &cm_ar(), Some("default"), name("in-root")).await;
    let star = |u: &str| format!("{u}/clusters/*");
    let s1_all = Api::<DynamicObject>::all_with(client_at(&sim, &star(&s1_url)).await, &cm_ar());
    assert_eq!(list_names(&s1_all, "shard-1 wildcard").await, ["in-b"]);
    let root_all =
        Api::<DynamicObject>::all_with(client_at(&sim, &star(&root_url)).await, &cm_ar());
    assert_eq!(list_names(&root_all, "root wildcard").await, ["in-root"]);
    let in_ns = Api::<DynamicObject>::namespaced_with(
        client_at(&sim, &star(&s1_url)).await,
        "default",
        &cm_ar(),
    );
    let s = refused(
        in_ns.create(&PostParams::default(), &obj(&cm_ar(), name("no"))),
        "create at *",
    )
    .await;
    assert_eq!(
        (s.code, s.reason.as_str(), s.message.as_str()),
        (
            405,
            "MethodNotAllowed",
            "create is not supported on resources of kind \"configmaps\" in the `*` logical cluster"
        )
    );
    let alice = sim
        .client_for_server(&star(&s1_url), "alice")
        .await
        .expect("alice");
    let s = list_refused(&Api::all_with(alice, &cm_ar()), "alice at *").await;
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "forbidden: User \"alice\" cannot get path \"/clusters/*/api/v1/configmaps\""
        )
    );
    let hashed = Api::<DynamicObject>::all_with(
        client_at(&sim, &star(&s1_url)).await,
        &ar("", "v1", "ConfigMap", "configmaps:0123"),
    );
    let s = list_refused(&hashed, "a built-in type with an identity").await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));

    // An outage cuts the front-proxy and every shard; all serve again after it.
    sim.outage(Duration::from_millis(200))
        .await
        .expect("outage");
    assert_eq!(
        list_names(&s1_all, "shard-1 after the outage").await,
        ["in-b"]
    );
    sim.shard_outage("shard-1", Duration::from_millis(100))
        .await
        .expect("shard outage");
    assert_eq!(
        list_names(&root_all, "root after shard-1's outage").await,
        ["in-root"]
    );
    sim.shutdown().await;
}

fn slice_ar() -> ApiResource {
    ar(
        "apis.kcp.io",
        "v1alpha1",
        "APIExportEndpointSlice",
        "apiexportendpointslices",
    )
}

/// Exports `example.io` widgets from the workspace `c` (annotations on the export);
/// returns the export's identity hash.
async fn export_widgets(c: &kube::Client, annotations: Value) -> String {
    create(c, &ar("apis.kcp.io", "v1alpha1", "APIResourceSchema", "apiresourceschemas"), None, json!({
        "metadata": {"name": "v1.widgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}]}
    })).await;
    let e = create(c, &ar("apis.kcp.io", "v1alpha2", "APIExport", "apiexports"), None, json!({
        "metadata": {"name": "widgets", "annotations": annotations},
        "spec": {"resources": [{"group": "example.io", "name": "widgets", "schema": "v1.widgets.example.io", "storage": {"crd": {}}}]}
    })).await;
    e.data["status"]["identityHash"]
        .as_str()
        .expect("identity")
        .to_string()
}

/// Admin clients of `root:p1` and `root:p2`, each exporting widgets.
async fn two_widget_exports(
    sim: &holdfast_sim::SimHandle,
    url: &str,
) -> (kube::Client, kube::Client) {
    let mut out = Vec::new();
    for p in ["p1", "p2"] {
        let c = client_at(sim, &format!("{url}/clusters/root:{p}")).await;
        export_widgets(&c, json!({})).await;
        out.push(c);
    }
    let p2 = out.pop().expect("p2");
    (out.pop().expect("p1"), p2)
}

fn binding_ar() -> ApiResource {
    ar("apis.kcp.io", "v1alpha2", "APIBinding", "apibindings")
}

/// Binds the export `widgets` of workspace `path` in `c`, as APIBinding `widgets`.
async fn bind_widgets(c: &kube::Client, path: &str) -> DynamicObject {
    create(
        c,
        &binding_ar(),
        None,
        json!({
            "metadata": {"name": "widgets"},
            "spec": {"reference": {"export": {"path": path, "name": "widgets"}}}
        }),
    )
    .await
}

fn widget() -> ApiResource {
    ar("example.io", "v1", "Widget", "widgets")
}

/// The endpoint URLs of the next MODIFIED event of a slice watch (30 s at the most).
async fn next_endpoints(
    events: &mut (
             impl futures::Stream<Item = kube::Result<kube::api::WatchEvent<DynamicObject>>> + Unpin
         ),
) -> Vec<String> {
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("a slice event within 30 s")
            .expect("the watch is running")
            .expect("a watch event");
        match ev {
            kube::api::WatchEvent::Modified(o) => {
                return o.data["status"]["endpoints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["url"].as_str().map(str::to_string))
                    .collect();
            }
            kube::api::WatchEvent::Bookmark(_) => continue,
            other => panic!("expected MODIFIED, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_slices_wildcard_identities_and_virtual_workspaces_per_shard() {
    let (sim, url, root) = at_root(two_shards()).await;
    let (root_url, s1_url) = (shard_url(&sim, "root"), shard_url(&sim, "shard-1"));
    let on = |s: &str| Some(json!({"matchLabels": {"name": s}}));
    for (n, s) in [
        ("p1", "root"),
        ("p2", "shard-1"),
        ("c0", "root"),
        ("c1", "shard-1"),
        ("c2", "shard-1"),
        ("quiet", "root"),
    ] {
        create(&root, &ws(), None, ws_at(n, on(s))).await;
    }
    let at = |p: &str| format!("{url}/clusters/root:{p}");
    let lc = |p: &str| sim.logical_cluster(&format!("root:{p}")).expect("lc");
    let (p1, p2) = (
        client_at(&sim, &at("p1")).await,
        client_at(&sim, &at("p2")).await,
    );
    // Two exports of one group/resource, told apart by identity (fact 11).
    let h1 = export_widgets(&p1, json!({})).await;
    let h2 = export_widgets(&p2, json!({})).await;
    assert_ne!(h1, h2);
    // An export that opts out of the endpoint slice.
    let quiet = client_at(&sim, &at("quiet")).await;
    export_widgets(
        &quiet,
        json!({"apiexports.apis.kcp.io/skip-endpointslice": "true"}),
    )
    .await;
    let s = refused(
        Api::<DynamicObject>::all_with(quiet, &slice_ar()).get("widgets"),
        "no slice",
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));

    // kcp's slice for p1's export: no URL before a binding; a user-made one follows too.
    let slices: Api<DynamicObject> = Api::all_with(p1.clone(), &slice_ar());
    let slice = slices.get("widgets").await.expect("kcp's slice");
    assert_eq!(slice.data["status"]["endpoints"], json!([]));
    create(&p1, &slice_ar(), None, json!({"metadata": {"name": "mine"}, "spec": {"export": {"path": "root:p1", "name": "widgets"}}})).await;
    let rv = slice.metadata.resource_version.clone().expect("rv");
    let mut events = slices
        .watch(
            &kube::api::WatchParams::default().fields("metadata.name=widgets"),
            &rv,
        )
        .await
        .expect("watch the slice")
        .boxed();
    let p1_lc = lc("p1");
    let vw = |shard: &str| format!("{shard}/services/apiexport/{p1_lc}/widgets");
    let c0 = client_at(&sim, &at("c0")).await;
    let b = bind_widgets(&c0, "root:p1").await;
    assert_eq!(
        b.data["status"]["boundResources"][0]["schema"]["identityHash"],
        h1.as_str()
    );
    // kcp keeps the workspace's canonical path on every APIBinding, whatever the
    // creator wrote (kcp-facts 27).
    assert_eq!(
        b.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kcp.io/path")),
        Some(&"root:c0".to_string())
    );
    let forged = Api::<DynamicObject>::all_with(c0.clone(), &binding_ar())
        .create(
            &Default::default(),
            &obj(
                &binding_ar(),
                json!({"metadata": {"name": "forged", "annotations": {"kcp.io/path": "root:p1"}},
                       "spec": {"reference": {"export": {"path": "root:p1", "name": "widgets"}}}}),
            ),
        )
        .await
        .expect("created");
    assert_eq!(
        forged
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kcp.io/path")),
        Some(&"root:c0".to_string())
    );
    Api::<DynamicObject>::all_with(c0.clone(), &binding_ar())
        .delete("forged", &Default::default())
        .await
        .expect("deleted");
    assert_eq!(next_endpoints(&mut events).await, [vw(&root_url)]);
    let c1 = client_at(&sim, &at("c1")).await;
    bind_widgets(&c1, "root:p1").await;
    assert_eq!(
        next_endpoints(&mut events).await,
        [vw(&root_url), vw(&s1_url)]
    );
    let mine = get_as(&p1, &slice_ar(), "mine").await;
    assert_eq!(
        mine.data["status"]["endpoints"],
        json!([{"url": vw(&root_url)}, {"url": vw(&s1_url)}])
    );
    let c2 = client_at(&sim, &at("c2")).await;
    let b = bind_widgets(&c2, "root:p2").await;
    assert_eq!(
        b.data["status"]["boundResources"][0]["schema"]["identityHash"],
        h2.as_str()
    );
    for (c, n) in [(&c0, "w-c0"), (&c1, "w-c1"), (&c2, "w-c2")] {
        create(c, &widget(), Some("default"), name(n)).await;
    }

    // The shard wildcard names an export's type with its identity; each shard sees its own.
    let star = |u: &str| format!("{u}/clusters/*");
    let w_as = |res: &str| ar("example.io", "v1", "Widget", res);
    let s = list_refused(
        &all_at(&sim, &star(&root_url), &w_as("widgets")).await,
        "no identity",
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    let s = list_refused(
        &all_at(&sim, &star(&root_url), &w_as("widgets:0000")).await,
        "an unknown identity",
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    let w1 = format!("widgets:{h1}");
    let w2 = format!("widgets:{h2}");
    let no: [&str; 0] = [];
    for (base, res, want) in [
        (&root_url, &w1, &["w-c0"][..]),
        (&s1_url, &w1, &["w-c1"]),
        (&s1_url, &w2, &["w-c2"]),
        (&root_url, &w2, &no),
    ] {
        let api = all_at(&sim, &star(base), &w_as(res)).await;
        assert_eq!(list_names(&api, res).await, want, "{base} {res}");
    }
    let s = list_refused(&all_at(&sim, &star(&url), &w_as(&w1)).await, "front-proxy").await;
    assert_eq!(s.code, 403);

    // Virtual workspaces: at each shard, that shard's binders only; no paths.
    let (c1_lc, c2_lc) = (lc("c1"), lc("c2"));
    for (base, x, want) in [
        (vw(&root_url), "*", &["w-c0"][..]),
        (vw(&s1_url), "*", &["w-c1"]),
        (vw(&s1_url), c1_lc.as_str(), &["w-c1"]),
    ] {
        let api = all_at(&sim, &format!("{base}/clusters/{x}"), &widget()).await;
        assert_eq!(list_names(&api, x).await, want, "{base} {x}");
    }
    let not_bound = |c: &str| {
        format!("widgets.example.io is forbidden: workspace {c} does not bind APIExport widgets")
    };
    for (base, x, code, message) in [
        (vw(&root_url), c1_lc.as_str(), 403, not_bound(&c1_lc)),
        (vw(&s1_url), c2_lc.as_str(), 403, not_bound(&c2_lc)),
        (
            vw(&s1_url),
            "root:c1",
            404,
            "the server could not find the requested resource".into(),
        ),
    ] {
        let api = all_at(&sim, &format!("{base}/clusters/{x}"), &widget()).await;
        let s = list_refused(&api, x).await;
        assert_eq!((s.code, s.message), (code, message), "{base} {x}");
    }
    // p2's export is served at shard-1 only through its own slice URL.
    let p2_lc = lc("p2");
    let p2_vw = format!("{s1_url}/services/apiexport/{p2_lc}/widgets");
    assert_eq!(
        list_names(
            &all_at(&sim, &format!("{p2_vw}/clusters/*"), &widget()).await,
            "p2 vw"
        )
        .await,
        ["w-c2"]
    );

    // Bindings going away remove their shard's URL.
    let drop_binding = |c: kube::Client| async move {
        Api::<DynamicObject>::all_with(c, &binding_ar())
            .delete("widgets", &Default::default())
            .await
            .expect("delete binding");
    };
    drop_binding(c1.clone()).await;
    assert_eq!(next_endpoints(&mut events).await, [vw(&root_url)]);
    drop_binding(c0.clone()).await;
    assert!(next_endpoints(&mut events).await.is_empty());
    // So does a binding's workspace going away.
    bind_widgets(&c1, "root:p1").await;
    assert_eq!(next_endpoints(&mut events).await, [vw(&s1_url)]);
    Api::<DynamicObject>::all_with(root.clone(), &ws())
        .delete("c1", &Default::default())
        .await
        .expect("delete workspace c1");
    assert!(next_endpoints(&mut events).await.is_empty());
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_come_from_the_export_or_the_workspace_never_both() {
    let (sim, url, root) = at_root(two_shards()).await;
    for (n, s) in [
        ("p1", "root"),
        ("p2", "root"),
        ("c0", "shard-1"),
        ("c2", "root"),
    ] {
        create(
            &root,
            &ws(),
            None,
            ws_at(n, Some(json!({"matchLabels": {"name": s}}))),
        )
        .await;
    }
    let at = |p: &str| format!("{url}/clusters/root:{p}");
    let (p1, p2) = two_widget_exports(&sim, &url).await;
    let (c0, c2) = (
        client_at(&sim, &at("c0")).await,
        client_at(&sim, &at("c2")).await,
    );
    bind_widgets(&c0, "root:p1").await;
    bind_widgets(&c2, "root:p2").await;

    // Every source denies DELETE of widgets and configmaps, naming itself.
    let hook = TestWebhook::start(&[], Arc::new(|_: &Value| {
        json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "denied"}})
    }))
    .await;
    let vwc = ar(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    for (c, who) in [(&p1, "p1"), (&p2, "p2"), (&c0, "c0"), (&c2, "c2")] {
        create(c, &vwc, None, json!({
            "metadata": {"name": format!("from-{who}")},
            "webhooks": [{"name": format!("{who}.holdfast.dev"), "clientConfig": {"url": hook.url(&format!("/{who}")), "caBundle": hook.ca_b64()},
                          "rules": [{"operations": ["DELETE"], "apiGroups": ["example.io", ""], "apiVersions": ["v1"], "resources": ["widgets", "configmaps"]}],
                          "sideEffects": "None", "admissionReviewVersions": ["v1"]}]
        })).await;
    }
    sim.webhooks_replicated(Duration::from_secs(30))
        .await
        .expect("replicated");
    let paths = || {
        hook.reviews()
            .into_iter()
            .map(|r| r.path.split('?').next().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    for (c, n, provider) in [(&c0, "c0", "p1"), (&c2, "c2", "p2")] {
        let lc = sim.logical_cluster(&format!("root:{n}")).expect("lc");
        // A bound resource: the export's workspace's configurations only; a resource
        // of its own: its own configurations only.
        for (res, source) in [(widget(), provider), (cm_ar(), n)] {
            create(c, &res, Some("default"), name("x")).await;
            let api = Api::<DynamicObject>::namespaced_with(c.clone(), "default", &res);
            let s = refused(api.delete("x", &Default::default()), n).await;
            let what = format!("{n}: {}", res.plural);
            assert_eq!(
                s.message,
                format!("admission webhook \"{source}.holdfast.dev\" denied the request: denied"),
                "{what}"
            );
            assert_eq!(paths(), [format!("/{source}")], "{what}");
            let review = &hook.reviews()[0].review;
            assert_eq!(
                review["request"]["oldObject"]["metadata"]["annotations"]["kcp.io/cluster"],
                lc.as_str(),
                "{what}"
            );
            hook.clear();
        }
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_names_another_exports_type_by_identity() {
    let (sim, url, root) = at_root(SimConfig::default()).await;
    for n in ["p1", "p2", "pc", "c", "d"] {
        create(&root, &ws(), None, name(n)).await;
    }
    let at = |p: &str| format!("{url}/clusters/root:{p}");
    let h1 = export_widgets(&client_at(&sim, &at("p1")).await, json!({})).await;
    export_widgets(&client_at(&sim, &at("p2")).await, json!({})).await;
    // An export that claims p1's widgets (not p2's, although group/resource are the same).
    let pc = client_at(&sim, &at("pc")).await;
    let claim = json!({"group": "example.io", "resource": "widgets", "identityHash": h1, "verbs": ["list", "watch"]});
    create(
        &pc,
        &ar("apis.kcp.io", "v1alpha2", "APIExport", "apiexports"),
        None,
        json!({
            "metadata": {"name": "watcher"}, "spec": {"permissionClaims": [claim]}
        }),
    )
    .await;
    let mut accepted = claim.clone();
    accepted["selector"] = json!({"matchAll": true});
    accepted["state"] = json!("Accepted");
    for (n, provider) in [("c", "root:p1"), ("d", "root:p2")] {
        let c = client_at(&sim, &at(n)).await;
        bind_widgets(&c, provider).await;
        create(&c, &binding_ar(), None, json!({
            "metadata": {"name": "watcher"},
            "spec": {"reference": {"export": {"path": "root:pc", "name": "watcher"}}, "permissionClaims": [accepted]}
        })).await;
        create(&c, &widget(), Some("default"), name(&format!("w-{n}"))).await;
    }
    let pc_lc = sim.logical_cluster("root:pc").expect("pc");
    let vw = format!("{}/services/apiexport/{pc_lc}/watcher", sim.shards()[0].1);
    let all = all_at(&sim, &format!("{vw}/clusters/*"), &widget()).await;
    assert_eq!(list_names(&all, "claimed widgets").await, ["w-c"]);
    let d_lc = sim.logical_cluster("root:d").expect("d");
    let s = list_refused(
        &all_at(&sim, &format!("{vw}/clusters/{d_lc}"), &widget()).await,
        "d's widgets have another identity",
    )
    .await;
    assert_eq!(
        (s.code, s.message.as_str()),
        (403, format!("widgets.example.io is forbidden: permission claim for widgets.example.io not accepted in workspace {d_lc}").as_str())
    );
    sim.shutdown().await;
}

/// `holdfast-sim --shards 2`: the front-proxy's ready line, one line per shard, Shard
/// objects naming those URLs; `--shards 0` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_serves_shards() {
    use tokio::io::AsyncBufReadExt;
    let bin = env!("CARGO_BIN_EXE_holdfast-sim");
    let dir = tempfile::tempdir().expect("dir");
    let kc = dir.path().join("kubeconfig");
    let mut child = tokio::process::Command::new(bin)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "2",
            "--kubeconfig-out",
        ])
        .arg(&kc)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn holdfast-sim");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut printed = vec![];
    for _ in 0..3 {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("a line in time")
            .expect("read")
            .expect("a line");
        printed.push(line);
    }
    let url = printed[0]
        .strip_prefix("holdfast-sim listening on ")
        .unwrap_or_else(|| panic!("{printed:?}"));
    let shard = |i: usize, name: &str| {
        printed[i]
            .strip_prefix(&format!("holdfast-sim shard {name} on "))
            .unwrap_or_else(|| panic!("{printed:?}"))
    };
    let k = Kubectl::new(&std::fs::read_to_string(&kc).expect("kubeconfig"));
    let shards = k.json(&format!("--server {url}/clusters/root get shards -o json"));
    let base: Vec<&str> = shards["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["spec"]["baseURL"].as_str())
        .collect();
    assert_eq!(base, [shard(1, "root"), shard(2, "shard-1")]);
    child.kill().await.expect("stop");
    let out = std::process::Command::new(bin)
        .args(["--shards", "0"])
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .output()
        .expect("run");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).as_ref()
        ),
        (Some(1), "Error: --shards must be at least 1\n")
    );
}

/// The names of the objects a list through `api` returns, as `<cluster>/<name>`.
async fn cluster_names(api: &Api<DynamicObject>, what: &str) -> Vec<String> {
    let list = api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    list.items
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                cluster_of(o).unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// `<cluster>/<name>` of the APIBindings listed at `<base>/clusters/*`.
async fn bindings_through(sim: &holdfast_sim::SimHandle, base: &str) -> Vec<String> {
    let api = all_at(sim, &format!("{base}/clusters/*"), &binding_ar()).await;
    cluster_names(&api, base).await
}

/// kcp-facts 16: an APIExport's virtual workspace always serves APIBindings; without
/// a claim, read only and only the bindings to that export; with an accepted claim,
/// every binding of the claiming workspace, those that existed before included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apibindings_are_always_served_by_a_virtual_workspace() {
    let (sim, url, root) = at_root(two_shards()).await;
    let (root_url, s1_url) = (shard_url(&sim, "root"), shard_url(&sim, "shard-1"));
    for (n, s) in [
        ("p1", "root"),
        ("p2", "root"),
        ("c0", "root"),
        ("c1", "shard-1"),
    ] {
        ws_on(&root, n, s).await;
    }
    let at = |p: &str| format!("{url}/clusters/root:{p}");
    let lc = |p: &str| sim.logical_cluster(&format!("root:{p}")).expect("lc");
    let (p1, _p2) = two_widget_exports(&sim, &url).await;
    let c0 = client_at(&sim, &at("c0")).await;
    let c1 = client_at(&sim, &at("c1")).await;
    for c in [&c0, &c1] {
        bind_widgets(c, "root:p1").await;
    }
    // c0 binds p2's export too, as APIBinding "other".
    create(
        &c0,
        &binding_ar(),
        None,
        json!({"metadata": {"name": "other"},
               "spec": {"reference": {"export": {"path": "root:p2", "name": "widgets"}}}}),
    )
    .await;
    let (p1_lc, c0_lc, c1_lc) = (lc("p1"), lc("c0"), lc("c1"));
    let vw = |shard: &str| format!("{shard}/services/apiexport/{p1_lc}/widgets");

    // Not claimed: the bindings to this export, each shard its own clusters.
    for (base, x, want) in [
        (vw(&root_url), "*", vec![format!("{c0_lc}/widgets")]),
        (vw(&s1_url), "*", vec![format!("{c1_lc}/widgets")]),
        (
            vw(&root_url),
            c0_lc.as_str(),
            vec![format!("{c0_lc}/widgets")],
        ),
    ] {
        let api = all_at(&sim, &format!("{base}/clusters/{x}"), &binding_ar()).await;
        assert_eq!(cluster_names(&api, x).await, want, "{base} {x}");
    }
    let in_c0 = all_at(
        &sim,
        &format!("{}/clusters/{c0_lc}", vw(&root_url)),
        &binding_ar(),
    )
    .await;
    let s = refused(in_c0.get("other"), "a binding to another export").await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(
        in_c0
            .get("widgets")
            .await
            .expect("its own binding")
            .metadata
            .name
            .as_deref(),
        Some("widgets")
    );
    // Read only.
    let new = json!({"metadata": {"name": "new"},
                     "spec": {"reference": {"export": {"path": "root:p2", "name": "widgets"}}}});
    let (new, pp) = (obj(&binding_ar(), new), PostParams::default());
    let s = refused(in_c0.create(&pp, &new), "a write").await;
    let what = "the server does not allow this method on the requested resource";
    assert_eq!(
        (s.code, s.reason, s.message),
        (405, "MethodNotAllowed".into(), what.into())
    );

    // Claimed (list, watch): nothing of a workspace until it accepts; then every
    // binding there, those made before the claim included (a watch sees them).
    let exports: Api<DynamicObject> = Api::all_with(
        p1.clone(),
        &ar("apis.kcp.io", "v1alpha2", "APIExport", "apiexports"),
    );
    let claim =
        json!({"group": "apis.kcp.io", "resource": "apibindings", "verbs": ["list", "watch"]});
    exports
        .patch(
            "widgets",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"permissionClaims": [claim.clone()]}})),
        )
        .await
        .expect("claim apibindings");
    let none: Vec<String> = Vec::new();
    assert_eq!(bindings_through(&sim, &vw(&root_url)).await, none);
    let star = all_at(
        &sim,
        &format!("{}/clusters/*", vw(&root_url)),
        &binding_ar(),
    )
    .await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = tokio::spawn(async move {
        let mut events = watcher::watcher(star, watcher::Config::default()).boxed();
        while let Some(Ok(ev)) = events.next().await {
            if let watcher::Event::Apply(o) | watcher::Event::InitApply(o) = ev {
                let _ = tx.send(format!(
                    "{}/{}",
                    cluster_of(&o).unwrap_or_default(),
                    o.metadata.name.as_deref().unwrap_or_default()
                ));
            }
        }
    });
    let mut accepted = claim;
    accepted["selector"] = json!({"matchAll": true});
    accepted["state"] = json!("Accepted");
    Api::<DynamicObject>::all_with(c0.clone(), &binding_ar())
        .patch(
            "widgets",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"permissionClaims": [accepted]}})),
        )
        .await
        .expect("accept the claim");
    // The binding accepting is seen (once or more); so is the one made before.
    let seen = vec![format!("{c0_lc}/other"), format!("{c0_lc}/widgets")];
    let mut got = std::collections::BTreeSet::new();
    while got.len() < seen.len() {
        let name = next_name(&mut rx).await;
        assert!(seen.contains(&name), "{name}");
        got.insert(name);
    }
    watch.abort();
    assert_eq!(bindings_through(&sim, &vw(&root_url)).await, seen);
    assert_eq!(
        bindings_through(&sim, &vw(&s1_url)).await,
        none,
        "c1 did not accept"
    );
    sim.shutdown().await;
}
