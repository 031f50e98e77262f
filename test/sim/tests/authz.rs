//! Authentication by static token file and authorization as kcp does it: workspace
//! access, RBAC per logical cluster, `bind` on APIExports, the APIExport virtual
//! workspace's content and binding authorizers (claim-verb intersection), and
//! SubjectAccessReviews per workspace. The plain Kubernetes topology enforces RBAC for
//! token-file users too.

mod common;

use common::{Kubectl, api_status, assert_status};
use holdfast_sim::{Sim, SimConfig, SimHandle, parse_token_auth_file};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn ws() -> ApiResource {
    ar("tenancy.kcp.io", "v1alpha1", "Workspace", "workspaces")
}
fn cm() -> ApiResource {
    ar("", "v1", "ConfigMap", "configmaps")
}
fn cluster_roles() -> ApiResource {
    ar(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    )
}
fn cluster_role_bindings() -> ApiResource {
    ar(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
    )
}
fn bindings() -> ApiResource {
    ar("apis.kcp.io", "v1alpha2", "APIBinding", "apibindings")
}
fn widgets() -> ApiResource {
    ar("example.io", "v1", "Widget", "widgets")
}

fn api(client: &kube::Client, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

async fn create(client: &kube::Client, ar: &ApiResource, ns: Option<&str>, v: Value) {
    try_create(client, ar, ns, v.clone())
        .await
        .unwrap_or_else(|e| panic!("create {v}: {e}"));
}

async fn try_create(
    client: &kube::Client,
    ar: &ApiResource,
    ns: Option<&str>,
    v: Value,
) -> kube::Result<DynamicObject> {
    let mut o: DynamicObject = serde_json::from_value(v).expect("object");
    o.types = Some(kube::core::TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    api(client, ar, ns).create(&PostParams::default(), &o).await
}

/// A ClusterRole `name` with `rules` and a ClusterRoleBinding `name` of it to user `user`.
async fn grant(client: &kube::Client, name: &str, user: &str, rules: Value) {
    create(
        client,
        &cluster_roles(),
        None,
        json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await;
    bind_user(client, name, name, user).await;
}

/// A ClusterRoleBinding `name` of ClusterRole `role` to user `user`.
async fn bind_user(client: &kube::Client, name: &str, role: &str, user: &str) {
    create(client, &cluster_role_bindings(), None, json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .await;
}

/// The token file every test here starts with.
const TOKENS: &str = "\
admin-token,admin,admin-uid,system:masters
dave-token,dave,1001
erin-token,erin,1002,\"dev,ops\"
root-token,root-user,1003,system:masters
";

async fn start() -> (SimHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens.csv");
    std::fs::write(&path, TOKENS).expect("token file");
    let cfg = SimConfig {
        users: vec![],
        token_auth_file: Some(path),
        ..SimConfig::default()
    };
    (Sim::start(cfg).await.expect("sim"), dir)
}

async fn client(sim: &SimHandle, path: &str, user: &str) -> kube::Client {
    let server = if path.is_empty() {
        sim.url()
    } else {
        format!("{}{path}", sim.url())
    };
    sim.client_for_server(&server, user)
        .await
        .unwrap_or_else(|e| panic!("client for {server} as {user}: {e}"))
}

// ---------------------------------------------------------------------------
// Token file
// ---------------------------------------------------------------------------

#[test]
fn token_file_records_as_kube_apiserver_reads_them() {
    let users = parse_token_auth_file(
        "t1,alice,u-1,\"dev,ops\"\n\n t2 ,bob,,x,ignored\r\n,nobody,u-3\n\"t,4\",\"carol \"\"c\"\"\",u-4\nt5,dan,u-5,\n",
    )
    .expect("valid file");
    let got: Vec<(String, String, Option<String>, Vec<String>)> = users
        .into_iter()
        .map(|u| (u.token, u.name, u.uid, u.groups))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "t1".into(),
                "alice".into(),
                Some("u-1".into()),
                vec!["dev".into(), "ops".into()]
            ),
            (
                " t2 ".into(),
                "bob".into(),
                Some(String::new()),
                vec!["x".into()]
            ),
            (
                "t,4".into(),
                "carol \"c\"".into(),
                Some("u-4".into()),
                vec![]
            ),
            (
                "t5".into(),
                "dan".into(),
                Some("u-5".into()),
                vec![String::new()]
            ),
        ]
    );
}

#[test]
fn malformed_token_files_name_the_line() {
    let cases = [
        (
            "t1,alice,u1\nt2,bob\n",
            "line 2: must have at least 3 columns (token, user name, user uid), found 2",
        ),
        (
            "# tokens\nt1,alice,u1\n",
            "line 1: must have at least 3 columns (token, user name, user uid), found 1",
        ),
        (
            "t1,alice,u1\n\nt2,bo\"b,u2\n",
            "line 3: bare \" in non-quoted field",
        ),
        (
            "t1,alice,u1,\"dev\nt2,bob,u2\n",
            "line 1: extraneous or missing \" in quoted-field",
        ),
        (
            "t1,alice,u1,\"dev\"x\n",
            "line 1: extraneous or missing \" in quoted-field",
        ),
    ];
    for (text, want) in cases {
        let err = parse_token_auth_file(text).expect_err(text);
        assert_eq!(err.to_string(), want, "{text:?}");
    }
}

#[test]
fn the_binary_refuses_a_malformed_token_file_at_startup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens.csv");
    std::fs::write(&path, "t1,alice,u1\nt2,bob\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_holdfast-sim"))
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .args(["--listen", "127.0.0.1:0", "--token-auth-file"])
        .arg(&path)
        .output()
        .expect("run holdfast-sim");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr,
        format!(
            "Error: token auth file {}: line 2: must have at least 3 columns (token, user name, user uid), found 2\n",
            path.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_file_users_authenticate_with_their_uid_and_groups() {
    let (sim, _dir) = start().await;
    let k = Kubectl::new(&sim.kubeconfig("erin"));
    let me = k.json("auth whoami");
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "erin", "uid": "1002", "groups": ["dev", "ops", "system:authenticated"]})
    );
    // Plain Kubernetes topology: no binding, no access; a Role grants exactly it.
    let out = k.sh("get configmaps -n default");
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            1,
            "Error from server (Forbidden): configmaps is forbidden: User \"erin\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"\n"
        ),
        "{out:?}"
    );
    let admin = client(&sim, "", "admin").await;
    let roles = ar("rbac.authorization.k8s.io", "v1", "Role", "roles");
    create(
        &admin,
        &roles,
        Some("default"),
        json!({"metadata": {"name": "cm-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .await;
    create(&admin, &ar("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"), Some("default"), json!({
        "metadata": {"name": "cm-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}],
    }))
    .await;
    let out = k.ok("get configmaps -n default -o name");
    assert_eq!(out.stdout, "configmap/kube-root-ca.crt\n");
    let out = k.sh("get configmaps -n kube-system");
    assert_eq!(out.code, 1, "the Role is in default only: {out:?}");
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------
// Workspaces
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_access_and_rbac_per_logical_cluster() {
    let (sim, _dir) = start().await;
    let root = client(&sim, "/clusters/root", "admin").await;
    create(&root, &ws(), None, json!({"metadata": {"name": "org"}})).await;
    let org = client(&sim, "/clusters/root:org", "admin").await;
    create(&org, &ws(), None, json!({"metadata": {"name": "team"}})).await;

    // root: every authenticated user enters; RBAC decides the rest.
    let dave_root = client(&sim, "/clusters/root", "dave").await;
    assert_status(
        api(&dave_root, &cm(), Some("default"))
            .list(&ListParams::default())
            .await
            .expect_err("no RBAC in root"),
        403,
        "Forbidden",
        "configmaps is forbidden: User \"dave\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"",
    );
    // root:org: no access at all, for resources and discovery alike.
    let dave_org = client(&sim, "/clusters/root:org", "dave").await;
    assert_status(
        api(&dave_org, &cm(), Some("default"))
            .list(&ListParams::default())
            .await
            .expect_err("no access in root:org"),
        403,
        "Forbidden",
        "configmaps is forbidden: User \"dave\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\": no verb=access permission on /",
    );
    // (`--raw` takes the whole path, whatever the kubeconfig's server path.)
    let k = Kubectl::new(&sim.kubeconfig("dave"));
    let out = k.sh("get --raw /clusters/root:org/api");
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            1,
            "Error from server (Forbidden): forbidden: User \"dave\" cannot get path \"/api\": no verb=access permission on /\n"
        ),
        "{out:?}"
    );

    // access in root:org (kcp's pre-defined ClusterRole, no local copy needed).
    bind_user(&org, "dave-access", "system:kcp:workspace:access", "dave").await;
    let out = k.ok("get --raw /clusters/root:org/api");
    let v: Value = serde_json::from_str(&out.stdout).expect("APIVersions");
    assert_eq!(v["kind"], "APIVersions");
    assert_status(
        api(&dave_org, &cm(), Some("default"))
            .list(&ListParams::default())
            .await
            .expect_err("access, no RBAC"),
        403,
        "Forbidden",
        "configmaps is forbidden: User \"dave\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"",
    );
    // A ClusterRole bound in root:org grants in root:org only.
    grant(
        &org,
        "reader",
        "dave",
        json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]},
            {"apiGroups": ["tenancy.kcp.io"], "resources": ["workspaces"], "verbs": ["get"]},
        ]),
    )
    .await;
    let listed = api(&dave_org, &cm(), Some("default"))
        .list(&ListParams::default())
        .await
        .expect("list in root:org");
    assert_eq!(listed.items.len(), 0);
    // Reading the child Workspace is RBAC in the parent; entering it is access there.
    let team = api(&dave_org, &ws(), None)
        .get("team")
        .await
        .expect("get team");
    assert_eq!(team.data["status"]["phase"], "Ready");
    let dave_team = client(&sim, "/clusters/root:org:team", "dave").await;
    let s = api_status(
        api(&dave_team, &cm(), Some("default"))
            .list(&ListParams::default())
            .await
            .expect_err("no access in root:org:team"),
    );
    assert_eq!(
        s.message,
        "configmaps is forbidden: User \"dave\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\": no verb=access permission on /"
    );
    assert_status(
        api(&dave_root, &cm(), Some("default"))
            .list(&ListParams::default())
            .await
            .expect_err("root:org's role does not reach root"),
        403,
        "Forbidden",
        "configmaps is forbidden: User \"dave\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"",
    );

    // system:masters bypasses access and RBAC (a token-file user in the group too).
    let masters = client(&sim, "/clusters/root:org:team", "root-user").await;
    create(
        &masters,
        &cm(),
        Some("default"),
        json!({"metadata": {"name": "by-masters"}}),
    )
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_creator_of_a_workspace_is_its_admin() {
    let (sim, _dir) = start().await;
    let root = client(&sim, "/clusters/root", "admin").await;
    create(&root, &ws(), None, json!({"metadata": {"name": "org"}})).await;
    let org = client(&sim, "/clusters/root:org", "admin").await;
    bind_user(&org, "dave-access", "system:kcp:workspace:access", "dave").await;
    grant(&org, "ws-creator", "dave", json!([
        {"apiGroups": ["tenancy.kcp.io"], "resources": ["workspaces"], "verbs": ["create", "get"]},
    ]))
    .await;
    let dave_org = client(&sim, "/clusters/root:org", "dave").await;
    create(
        &dave_org,
        &ws(),
        None,
        json!({"metadata": {"name": "mine"}}),
    )
    .await;
    let mine = api(&dave_org, &ws(), None)
        .get("mine")
        .await
        .expect("get mine");
    let owner: Value = serde_json::from_str(
        mine.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("experimental.tenancy.kcp.io/owner"))
            .expect("owner annotation"),
    )
    .expect("owner json");
    assert_eq!(
        owner,
        json!({"username": "dave", "uid": "1001", "groups": ["system:authenticated"]})
    );

    let dave_mine = client(&sim, "/clusters/root:org:mine", "dave").await;
    create(
        &dave_mine,
        &cm(),
        Some("default"),
        json!({"metadata": {"name": "mine"}}),
    )
    .await;
    let crb = api(&dave_mine, &cluster_role_bindings(), None)
        .get("workspace-admin")
        .await
        .expect("workspace-admin");
    assert_eq!(crb.data["roleRef"]["name"], "cluster-admin");
    assert_eq!(
        crb.data["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}])
    );
    // Another user with access to root:org has none in root:org:mine.
    bind_user(&org, "erin-access", "system:kcp:workspace:access", "erin").await;
    let erin_mine = client(&sim, "/clusters/root:org:mine", "erin").await;
    let s = api_status(
        api(&erin_mine, &cm(), Some("default"))
            .get("mine")
            .await
            .expect_err("erin has no access in mine"),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "configmaps \"mine\" is forbidden: User \"erin\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\": no verb=access permission on /"
        )
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_access_reviews_use_the_workspace_rbac() {
    let (sim, _dir) = start().await;
    let root = client(&sim, "/clusters/root", "admin").await;
    create(&root, &ws(), None, json!({"metadata": {"name": "org"}})).await;
    let org = client(&sim, "/clusters/root:org", "admin").await;
    let sar = ar(
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
    );
    let review = |user: &str| json!({"spec": {"user": user, "resourceAttributes": {"verb": "delete", "resource": "configmaps", "namespace": "default"}}});
    let allowed = |client: kube::Client, user: String| {
        let sar = sar.clone();
        let body = review(&user);
        async move {
            let o = try_create(&client, &sar, None, body).await.expect("review");
            o.data["status"]["allowed"]
                .as_bool()
                .expect("status.allowed")
        }
    };
    grant(
        &org,
        "deleter",
        "dave",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]}]),
    )
    .await;
    assert!(
        !allowed(org.clone(), "dave".into()).await,
        "no access in root:org"
    );
    bind_user(&org, "dave-access", "system:kcp:workspace:access", "dave").await;
    assert!(
        allowed(org.clone(), "dave".into()).await,
        "access and RBAC in root:org"
    );
    assert!(
        !allowed(root.clone(), "dave".into()).await,
        "root:org's role in root"
    );
    assert!(
        !allowed(org.clone(), "erin".into()).await,
        "erin holds nothing"
    );
    // Non-resource attributes: `access` on `/`.
    let o = try_create(
        &root,
        &sar,
        None,
        json!({"spec": {"user": "erin", "groups": ["system:authenticated"],
        "nonResourceAttributes": {"verb": "access", "path": "/"}}}),
    )
    .await
    .expect("review");
    assert_eq!(
        o.data["status"]["allowed"], true,
        "root grants access to system:authenticated"
    );
    let o = try_create(
        &org,
        &sar,
        None,
        json!({"spec": {"user": "erin", "groups": ["system:authenticated"],
        "nonResourceAttributes": {"verb": "access", "path": "/"}}}),
    )
    .await
    .expect("review");
    assert_eq!(o.data["status"]["allowed"], false, "root:org does not");
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------
// APIExports: bind, virtual workspace
// ---------------------------------------------------------------------------

/// root:org:provider exports widgets (`example.io`) and claims configmaps with
/// `claim_verbs`; root:org:a and root:org:b exist. Returns the provider's logical cluster.
async fn provider(sim: &SimHandle, claim_verbs: Value) -> String {
    let root = client(sim, "/clusters/root", "admin").await;
    create(&root, &ws(), None, json!({"metadata": {"name": "org"}})).await;
    let org = client(sim, "/clusters/root:org", "admin").await;
    for name in ["provider", "a", "b"] {
        create(&org, &ws(), None, json!({"metadata": {"name": name}})).await;
    }
    let p = client(sim, "/clusters/root:org:provider", "admin").await;
    create(&p, &ar("apis.kcp.io", "v1alpha1", "APIResourceSchema", "apiresourceschemas"), None, json!({
        "metadata": {"name": "v1.widgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}]}
    }))
    .await;
    for name in ["example.io", "other.io"] {
        create(&p, &ar("apis.kcp.io", "v1alpha2", "APIExport", "apiexports"), None, json!({
            "metadata": {"name": name},
            "spec": {"resources": [{"group": "example.io", "name": "widgets", "schema": "v1.widgets.example.io", "storage": {"crd": {}}}],
                     "permissionClaims": [{"group": "", "resource": "configmaps", "verbs": claim_verbs}]}
        }))
        .await;
    }
    sim.logical_cluster("root:org:provider")
        .expect("provider lc")
}

fn binding(export: &str, accepted_verbs: Value) -> Value {
    json!({
        "metadata": {"name": "example"},
        "spec": {"reference": {"export": {"path": "root:org:provider", "name": export}},
                 "permissionClaims": [{"group": "", "resource": "configmaps", "selector": {"matchAll": true},
                                       "verbs": accepted_verbs, "state": "Accepted"}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_needs_bind_on_the_export_in_its_workspace() {
    let (sim, _dir) = start().await;
    provider(&sim, json!(["get"])).await;
    let a = client(&sim, "/clusters/root:org:a", "admin").await;
    bind_user(&a, "dave-access", "system:kcp:workspace:access", "dave").await;
    grant(&a, "binder", "dave", json!([{"apiGroups": ["apis.kcp.io"], "resources": ["apibindings"], "verbs": ["create", "update", "get"]}])).await;
    let dave_a = client(&sim, "/clusters/root:org:a", "dave").await;
    assert_status(
        try_create(
            &dave_a,
            &bindings(),
            None,
            binding("example.io", json!(["get"])),
        )
        .await
        .expect_err("no bind"),
        403,
        "Forbidden",
        "apibindings.apis.kcp.io \"example\" is forbidden: unable to create APIBinding: no permission to bind to export root:org:provider:example.io",
    );
    // The same refusal for an export path that does not resolve.
    let mut missing = binding("example.io", json!(["get"]));
    missing["spec"]["reference"]["export"]["path"] = json!("root:org:nowhere");
    assert_status(
        try_create(&dave_a, &bindings(), None, missing)
            .await
            .expect_err("nowhere"),
        403,
        "Forbidden",
        "apibindings.apis.kcp.io \"example\" is forbidden: unable to create APIBinding: no permission to bind to export root:org:nowhere:example.io",
    );
    // `bind` on example.io in the provider's workspace (not in the consumer's).
    let p = client(&sim, "/clusters/root:org:provider", "admin").await;
    grant(&p, "bind-example", "dave", json!([{"apiGroups": ["apis.kcp.io"], "resources": ["apiexports"], "resourceNames": ["example.io"], "verbs": ["bind"]}])).await;
    create(
        &dave_a,
        &bindings(),
        None,
        binding("example.io", json!(["get"])),
    )
    .await;
    // Changing the reference needs `bind` on the new export.
    let b = api(&dave_a, &bindings(), None);
    let mut current = b.get("example").await.expect("binding");
    current.data["spec"]["reference"]["export"]["name"] = json!("other.io");
    assert_status(
        b.replace("example", &PostParams::default(), &current)
            .await
            .expect_err("no bind on other.io"),
        403,
        "Forbidden",
        "apibindings.apis.kcp.io \"example\" is forbidden: unable to update APIBinding: no permission to bind to export root:org:provider:other.io",
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_workspace_needs_apiexports_content_with_the_same_verb() {
    let (sim, _dir) = start().await;
    let plc = provider(&sim, json!(["get", "list"])).await;
    let a = client(&sim, "/clusters/root:org:a", "admin").await;
    create(
        &a,
        &bindings(),
        None,
        binding("example.io", json!(["get", "list"])),
    )
    .await;
    create(
        &a,
        &widgets(),
        Some("default"),
        json!({"metadata": {"name": "w1"}}),
    )
    .await;
    let a_lc = sim.logical_cluster("root:org:a").expect("a");
    let vw = format!("/services/apiexport/{plc}/example.io/clusters");

    let p = client(&sim, "/clusters/root:org:provider", "admin").await;
    grant(&p, "content-list", "erin", json!([{"apiGroups": ["apis.kcp.io"], "resources": ["apiexports/content"], "resourceNames": ["example.io"], "verbs": ["list"]}])).await;
    let all = client(&sim, &format!("{vw}/*"), "erin").await;
    let listed = api(&all, &widgets(), None)
        .list(&ListParams::default())
        .await
        .expect("list with content list");
    assert_eq!(listed.items.len(), 1);
    let one = client(&sim, &format!("{vw}/{a_lc}"), "erin").await;
    assert_status(
        api(&one, &widgets(), Some("default"))
            .get("w1")
            .await
            .expect_err("no get on content"),
        403,
        "Forbidden",
        &format!(
            "widgets.example.io \"w1\" is forbidden: User \"erin\" cannot get resource \"widgets\" in API group \"example.io\" in the namespace \"default\": API export: \"example.io\", workspace: \"{plc}\" RBAC decision: "
        ),
    );
    // dave holds nothing: discovery in the virtual workspace is refused too.
    let k = Kubectl::new(&sim.kubeconfig("dave"));
    let out = k.sh(&format!("get --raw {vw}/*/apis"));
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (1, format!("Error from server (Forbidden): forbidden: User \"dave\" cannot get path \"/apis\": API export: \"example.io\", workspace: \"{plc}\" RBAC decision: \n").as_str()),
        "{out:?}"
    );
    grant(&p, "content-get", "erin", json!([{"apiGroups": ["apis.kcp.io"], "resources": ["apiexports/content"], "resourceNames": ["example.io"], "verbs": ["get"]}])).await;
    let w = api(&one, &widgets(), Some("default"))
        .get("w1")
        .await
        .expect("get with content get");
    assert_eq!(w.metadata.name.as_deref(), Some("w1"));
    // A cluster that does not bind the export.
    let b_lc = sim.logical_cluster("root:org:b").expect("b");
    let other = client(&sim, &format!("{vw}/{b_lc}"), "erin").await;
    let s = api_status(
        api(&other, &widgets(), Some("default"))
            .get("w1")
            .await
            .expect_err("b does not bind"),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "widgets.example.io \"w1\" is forbidden: User \"erin\" cannot get resource \"widgets\" in API group \"example.io\" in the namespace \"default\": could not find suitable APIBinding in target logical cluster"
        )
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_resources_allow_the_intersection_of_claim_verbs() {
    let (sim, _dir) = start().await;
    let plc = provider(&sim, json!(["get", "list"])).await;
    // a accepts with ["*"]: grants nothing (the export lists explicit verbs).
    let a = client(&sim, "/clusters/root:org:a", "admin").await;
    create(&a, &bindings(), None, binding("example.io", json!(["*"]))).await;
    create(
        &a,
        &cm(),
        Some("default"),
        json!({"metadata": {"name": "in-a"}}),
    )
    .await;
    // b accepts get, list and delete: get and list are granted, delete is not.
    let b = client(&sim, "/clusters/root:org:b", "admin").await;
    create(
        &b,
        &bindings(),
        None,
        binding("example.io", json!(["get", "list", "delete"])),
    )
    .await;
    create(
        &b,
        &cm(),
        Some("default"),
        json!({"metadata": {"name": "in-b"}}),
    )
    .await;
    let (a_lc, b_lc) = (
        sim.logical_cluster("root:org:a").expect("a"),
        sim.logical_cluster("root:org:b").expect("b"),
    );
    let p = client(&sim, "/clusters/root:org:provider", "admin").await;
    grant(&p, "content", "erin", json!([{"apiGroups": ["apis.kcp.io"], "resources": ["apiexports/content"], "resourceNames": ["example.io"], "verbs": ["*"]}])).await;
    let vw = format!("/services/apiexport/{plc}/example.io/clusters");
    let in_a = client(&sim, &format!("{vw}/{a_lc}"), "erin").await;
    let s = api_status(
        api(&in_a, &cm(), Some("default"))
            .get("in-a")
            .await
            .expect_err("[*] grants nothing"),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "configmaps \"in-a\" is forbidden: User \"erin\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\": failed to find suitable reason to allow access in APIBinding"
        )
    );
    let in_b = client(&sim, &format!("{vw}/{b_lc}"), "erin").await;
    let got = api(&in_b, &cm(), Some("default"))
        .get("in-b")
        .await
        .expect("get in b");
    assert_eq!(got.metadata.name.as_deref(), Some("in-b"));
    let s = api_status(
        api(&in_b, &cm(), Some("default"))
            .delete("in-b", &Default::default())
            .await
            .expect_err("delete is not in the export's verbs"),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (
            403,
            "configmaps \"in-b\" is forbidden: User \"erin\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\": failed to find suitable reason to allow access in APIBinding"
        )
    );
    // The wildcard shows the configmaps of b only; the export's own widgets need no claim.
    let all = client(&sim, &format!("{vw}/*"), "erin").await;
    let names: Vec<String> = api(&all, &cm(), None)
        .list(&ListParams::default())
        .await
        .expect("wildcard list")
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .filter(|n| n.starts_with("in-"))
        .collect();
    assert_eq!(names, vec!["in-b".to_string()]);
    create(
        &a,
        &widgets(),
        Some("default"),
        json!({"metadata": {"name": "w-a"}}),
    )
    .await;
    let w = api(&in_a, &widgets(), Some("default"))
        .get("w-a")
        .await
        .expect("own resource");
    assert_eq!(w.metadata.name.as_deref(), Some("w-a"));
    sim.shutdown().await;
}
