//! Authentication by static token file and authorization as kcp does it: workspace
//! access, RBAC per logical cluster, `bind` on APIExports, the APIExport virtual
//! workspace's content and binding authorizers (claim-verb intersection), and
//! SubjectAccessReviews per workspace. The plain Kubernetes topology enforces RBAC for
//! token-file users too.

mod common;

use common::{Kubectl, assert_status, ready_workspace};
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
    let created = api(client, ar, ns)
        .create(&PostParams::default(), &o)
        .await?;
    // A Workspace is used once Ready (kcp makes it so asynchronously).
    match (ar.plural.as_str(), created.metadata.name.as_deref()) {
        ("workspaces", Some(name)) => Ok(ready_workspace(&api(client, ar, ns), name).await),
        _ => Ok(created),
    }
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

/// kcp's reason for a user without `access` in the workspace.
const NO_ACCESS: &str = ": no verb=access permission on /";

/// Asserts that a request was refused with 403 Forbidden and exactly `message`.
fn forbidden<T: std::fmt::Debug>(result: kube::Result<T>, message: &str) {
    assert_status(result.expect_err(message), 403, "Forbidden", message);
}

/// Asserts that kubectl failed with exactly `stderr`.
fn kubectl_refused(out: &common::Out, stderr: &str) {
    assert_eq!((out.code, out.stderr.as_str()), (1, stderr), "{out:?}");
}

/// Lists the ConfigMaps of namespace default.
async fn list_cms(client: &kube::Client) -> kube::Result<kube::api::ObjectList<DynamicObject>> {
    api(client, &cm(), Some("default"))
        .list(&ListParams::default())
        .await
}

/// kube-apiserver's refusal of `user` listing ConfigMaps in default, with kcp's reason.
fn cannot_list_cms(user: &str, reason: &str) -> String {
    format!(
        "configmaps is forbidden: User \"{user}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"{reason}"
    )
}

/// Creates an object `name` of `ar` in namespace default.
async fn in_default(client: &kube::Client, ar: &ApiResource, name: &str) {
    create(
        client,
        ar,
        Some("default"),
        json!({"metadata": {"name": name}}),
    )
    .await;
}

/// Gets the object `name` of `ar` in namespace default, which must be there.
async fn get_in_default(client: &kube::Client, ar: &ApiResource, name: &str, what: &str) {
    let o = api(client, ar, Some("default"))
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(o.metadata.name.as_deref(), Some(name));
}

/// A ClusterRole `name` granting `user` `apiexports/content` on example.io with `verbs`.
async fn grant_content(client: &kube::Client, name: &str, user: &str, verbs: Value) {
    let rule = json!([{"apiGroups": ["apis.kcp.io"], "resources": ["apiexports/content"],
                       "resourceNames": ["example.io"], "verbs": verbs}]);
    grant(client, name, user, rule).await;
}

/// Lets `user` enter the workspace of `client` (kcp's pre-defined access role).
async fn give_access(client: &kube::Client, user: &str) {
    let name = format!("{user}-access");
    bind_user(client, &name, "system:kcp:workspace:access", user).await;
}

/// Creates root:org and the workspaces `children` in it (as admin); admin clients of
/// root and root:org.
async fn org_with(sim: &SimHandle, children: &[&str]) -> (kube::Client, kube::Client) {
    let root = client(sim, "/clusters/root", "admin").await;
    create(&root, &ws(), None, json!({"metadata": {"name": "org"}})).await;
    let org = client(sim, "/clusters/root:org", "admin").await;
    for name in children {
        create(&org, &ws(), None, json!({"metadata": {"name": name}})).await;
    }
    (root, org)
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
    // Virtual workspaces are served by the shard (one here), not the front-proxy.
    let base = if path.starts_with("/services/") {
        sim.shards()
            .first()
            .map(|(_, url)| url.clone())
            .unwrap_or_else(|| sim.url())
    } else {
        sim.url()
    };
    let server = format!("{base}{path}");
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

/// A child process, killed when dropped (a failed assertion does not leave it running).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_binary_serves_token_file_users() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("tempdir");
    let (tokens, kubeconfig) = (dir.path().join("tokens.csv"), dir.path().join("kubeconfig"));
    std::fs::write(&tokens, TOKENS).expect("token file");
    let mut sim = Running(
        std::process::Command::new(env!("CARGO_BIN_EXE_holdfast-sim"))
            .args(["--listen", "127.0.0.1:0", "--kubeconfig-user", "erin"])
            .arg("--token-auth-file")
            .arg(&tokens)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start holdfast-sim"),
    );
    let mut ready = String::new();
    let out = sim.0.stdout.take().expect("stdout");
    std::io::BufReader::new(out)
        .read_line(&mut ready)
        .expect("read stdout");
    assert!(
        ready.starts_with("holdfast-sim listening on https://127.0.0.1:"),
        "{ready:?}"
    );
    let kubeconfig = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written");
    let me = Kubectl::new(&kubeconfig).json("auth whoami");
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "erin", "uid": "1002", "groups": ["dev", "ops", "system:authenticated"]})
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
    kubectl_refused(
        &k.sh("get configmaps -n default"),
        &format!(
            "Error from server (Forbidden): {}\n",
            cannot_list_cms("erin", "")
        ),
    );
    // Non-resource URLs: discovery, version and health for every authenticated user
    // (the bootstrap roles system:discovery and system:public-info-viewer); any
    // other path only by a ClusterRole bound to the user.
    for path in ["/api", "/apis", "/version", "/healthz", "/openapi/v3"] {
        k.ok(&format!("get --raw {path}"));
    }
    kubectl_refused(
        &k.sh("get --raw /metrics"),
        "Error from server (Forbidden): forbidden: User \"erin\" cannot get path \"/metrics\"\n",
    );
    let admin = client(&sim, "", "admin").await;
    create(
        &admin,
        &cluster_roles(),
        None,
        json!({"metadata": {"name": "metrics-reader"},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
    )
    .await;
    create(&admin, &cluster_role_bindings(), None, json!({
        "metadata": {"name": "metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "erin"}],
    }))
    .await;
    // Granted: past authorization, to a path the simulator does not serve.
    kubectl_refused(
        &k.sh("get --raw /metrics"),
        "Error from server (NotFound): the server could not find the requested resource\n",
    );
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
    let (_root, org) = org_with(&sim, &["team"]).await;

    // root: every authenticated user enters; RBAC decides the rest.
    let dave_root = client(&sim, "/clusters/root", "dave").await;
    forbidden(list_cms(&dave_root).await, &cannot_list_cms("dave", ""));
    // root:org: no access at all, for resources and discovery alike.
    let dave_org = client(&sim, "/clusters/root:org", "dave").await;
    forbidden(
        list_cms(&dave_org).await,
        &cannot_list_cms("dave", NO_ACCESS),
    );
    // (`--raw` takes the whole path, whatever the kubeconfig's server path.)
    let k = Kubectl::new(&sim.kubeconfig("dave"));
    kubectl_refused(
        &k.sh("get --raw /clusters/root:org/api"),
        "Error from server (Forbidden): forbidden: User \"dave\" cannot get path \"/api\": no verb=access permission on /\n",
    );

    // access in root:org (kcp's pre-defined ClusterRole, no local copy needed).
    give_access(&org, "dave").await;
    let out = k.ok("get --raw /clusters/root:org/api");
    let v: Value = serde_json::from_str(&out.stdout).expect("APIVersions");
    assert_eq!(v["kind"], "APIVersions");
    forbidden(list_cms(&dave_org).await, &cannot_list_cms("dave", ""));
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
    let listed = list_cms(&dave_org).await.expect("list in root:org");
    assert_eq!(listed.items.len(), 0);
    // Reading the child Workspace is RBAC in the parent; entering it is access there.
    let team = api(&dave_org, &ws(), None)
        .get("team")
        .await
        .expect("get team");
    assert_eq!(team.data["status"]["phase"], "Ready");
    let dave_team = client(&sim, "/clusters/root:org:team", "dave").await;
    forbidden(
        list_cms(&dave_team).await,
        &cannot_list_cms("dave", NO_ACCESS),
    );
    forbidden(list_cms(&dave_root).await, &cannot_list_cms("dave", ""));

    // system:masters bypasses access and RBAC (a token-file user in the group too).
    let masters = client(&sim, "/clusters/root:org:team", "root-user").await;
    in_default(&masters, &cm(), "by-masters").await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_creator_of_a_workspace_is_its_admin() {
    let (sim, _dir) = start().await;
    let (_root, org) = org_with(&sim, &[]).await;
    give_access(&org, "dave").await;
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
    in_default(&dave_mine, &cm(), "mine").await;
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
    give_access(&org, "erin").await;
    let erin_mine = client(&sim, "/clusters/root:org:mine", "erin").await;
    forbidden(
        api(&erin_mine, &cm(), Some("default")).get("mine").await,
        "configmaps \"mine\" is forbidden: User \"erin\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\": no verb=access permission on /",
    );
    sim.shutdown().await;
}

/// `status.allowed` of a SubjectAccessReview with `spec` posted through `client`.
async fn reviewed(client: &kube::Client, spec: Value) -> bool {
    let sar = ar(
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
    );
    let o = try_create(client, &sar, None, json!({"spec": spec}))
        .await
        .expect("review");
    o.data["status"]["allowed"]
        .as_bool()
        .expect("status.allowed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_access_reviews_use_the_workspace_rbac() {
    let (sim, _dir) = start().await;
    let (root, org) = org_with(&sim, &[]).await;
    let delete = |user: &str| json!({"user": user, "resourceAttributes": {"verb": "delete", "resource": "configmaps", "namespace": "default"}});
    let rule = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]}]);
    grant(&org, "deleter", "dave", rule).await;
    assert!(
        !reviewed(&org, delete("dave")).await,
        "no access in root:org"
    );
    give_access(&org, "dave").await;
    assert!(reviewed(&org, delete("dave")).await, "access and RBAC");
    assert!(
        !reviewed(&root, delete("dave")).await,
        "root:org's role in root"
    );
    assert!(!reviewed(&org, delete("erin")).await, "erin holds nothing");
    // Non-resource attributes: `access` on `/`, granted in root to system:authenticated.
    let access = json!({"user": "erin", "groups": ["system:authenticated"],
        "nonResourceAttributes": {"verb": "access", "path": "/"}});
    assert!(reviewed(&root, access.clone()).await, "root");
    assert!(!reviewed(&org, access).await, "root:org");
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------
// APIExports: bind, virtual workspace
// ---------------------------------------------------------------------------

/// A simulator where root:org:provider exports widgets (`example.io`, and `other.io`
/// alike) and claims configmaps with `claim_verbs`, and root:org:a and root:org:b
/// exist; with the provider's logical cluster.
async fn provider(claim_verbs: Value) -> (SimHandle, tempfile::TempDir, String) {
    let (sim, dir) = start().await;
    let plc = export_widgets(&sim, claim_verbs).await;
    (sim, dir, plc)
}

async fn export_widgets(sim: &SimHandle, claim_verbs: Value) -> String {
    org_with(sim, &["provider", "a", "b"]).await;
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
    let (sim, _dir, _) = provider(json!(["get"])).await;
    let a = client(&sim, "/clusters/root:org:a", "admin").await;
    give_access(&a, "dave").await;
    grant(&a, "binder", "dave", json!([{"apiGroups": ["apis.kcp.io"], "resources": ["apibindings"], "verbs": ["create", "update", "get"]}])).await;
    let dave_a = client(&sim, "/clusters/root:org:a", "dave").await;
    forbidden(
        try_create(
            &dave_a,
            &bindings(),
            None,
            binding("example.io", json!(["get"])),
        )
        .await,
        "apibindings.apis.kcp.io \"example\" is forbidden: unable to create APIBinding: no permission to bind to export root:org:provider:example.io",
    );
    // The same refusal for an export path that does not resolve.
    let mut missing = binding("example.io", json!(["get"]));
    missing["spec"]["reference"]["export"]["path"] = json!("root:org:nowhere");
    forbidden(
        try_create(&dave_a, &bindings(), None, missing).await,
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
    forbidden(
        b.replace("example", &PostParams::default(), &current).await,
        "apibindings.apis.kcp.io \"example\" is forbidden: unable to update APIBinding: no permission to bind to export root:org:provider:other.io",
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_workspace_needs_apiexports_content_with_the_same_verb() {
    let (sim, _dir, plc) = provider(json!(["get", "list"])).await;
    let a = client(&sim, "/clusters/root:org:a", "admin").await;
    create(
        &a,
        &bindings(),
        None,
        binding("example.io", json!(["get", "list"])),
    )
    .await;
    in_default(&a, &widgets(), "w1").await;
    let a_lc = sim.logical_cluster("root:org:a").expect("a");
    let vw = format!("/services/apiexport/{plc}/example.io/clusters");

    let p = client(&sim, "/clusters/root:org:provider", "admin").await;
    grant_content(&p, "content-list", "erin", json!(["list"])).await;
    let all = client(&sim, &format!("{vw}/*"), "erin").await;
    let listed = api(&all, &widgets(), None)
        .list(&ListParams::default())
        .await
        .expect("list with content list");
    assert_eq!(listed.items.len(), 1);
    let one = client(&sim, &format!("{vw}/{a_lc}"), "erin").await;
    forbidden(
        api(&one, &widgets(), Some("default")).get("w1").await,
        &format!(
            "widgets.example.io \"w1\" is forbidden: User \"erin\" cannot get resource \"widgets\" in API group \"example.io\" in the namespace \"default\": API export: \"example.io\", workspace: \"{plc}\" RBAC decision: "
        ),
    );
    // dave holds nothing: discovery in the virtual workspace is refused too.
    let shard = sim
        .shards()
        .first()
        .map(|(_, url)| url.clone())
        .expect("a shard");
    let k = Kubectl::new(&sim.kubeconfig_for_server(&shard, "dave"));
    kubectl_refused(
        &k.sh(&format!("get --raw {vw}/*/apis")),
        &format!(
            "Error from server (Forbidden): forbidden: User \"dave\" cannot get path \"/apis\": API export: \"example.io\", workspace: \"{plc}\" RBAC decision: \n"
        ),
    );
    grant_content(&p, "content-get", "erin", json!(["get"])).await;
    // A cluster that does not bind the export.
    let b_lc = sim.logical_cluster("root:org:b").expect("b");
    let other = client(&sim, &format!("{vw}/{b_lc}"), "erin").await;
    forbidden(
        api(&other, &widgets(), Some("default")).get("w1").await,
        "widgets.example.io \"w1\" is forbidden: User \"erin\" cannot get resource \"widgets\" in API group \"example.io\" in the namespace \"default\": could not find suitable APIBinding in target logical cluster",
    );
    get_in_default(&one, &widgets(), "w1", "get with content get").await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_resources_allow_the_intersection_of_claim_verbs() {
    let (sim, _dir, plc) = provider(json!(["get", "list"])).await;
    // a accepts with ["*"]: grants nothing (the export lists explicit verbs).
    let a = client(&sim, "/clusters/root:org:a", "admin").await;
    create(&a, &bindings(), None, binding("example.io", json!(["*"]))).await;
    in_default(&a, &cm(), "in-a").await;
    // b accepts get, list and delete: get and list are granted, delete is not.
    let b = client(&sim, "/clusters/root:org:b", "admin").await;
    create(
        &b,
        &bindings(),
        None,
        binding("example.io", json!(["get", "list", "delete"])),
    )
    .await;
    in_default(&b, &cm(), "in-b").await;
    let (a_lc, b_lc) = (
        sim.logical_cluster("root:org:a").expect("a"),
        sim.logical_cluster("root:org:b").expect("b"),
    );
    let p = client(&sim, "/clusters/root:org:provider", "admin").await;
    grant_content(&p, "content", "erin", json!(["*"])).await;
    let vw = format!("/services/apiexport/{plc}/example.io/clusters");
    let in_a = client(&sim, &format!("{vw}/{a_lc}"), "erin").await;
    forbidden(
        api(&in_a, &cm(), Some("default")).get("in-a").await,
        "configmaps \"in-a\" is forbidden: User \"erin\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"default\": failed to find suitable reason to allow access in APIBinding",
    );
    let in_b = client(&sim, &format!("{vw}/{b_lc}"), "erin").await;
    get_in_default(&in_b, &cm(), "in-b", "get in b").await;
    forbidden(
        api(&in_b, &cm(), Some("default"))
            .delete("in-b", &Default::default())
            .await,
        "configmaps \"in-b\" is forbidden: User \"erin\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"default\": failed to find suitable reason to allow access in APIBinding",
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
    in_default(&a, &widgets(), "w-a").await;
    get_in_default(&in_a, &widgets(), "w-a", "own resource").await;
    sim.shutdown().await;
}
