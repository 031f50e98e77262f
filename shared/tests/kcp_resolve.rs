//! Workspace paths resolved as kcp resolves them, and APIExports read, against the
//! simulator's kcp in-process: one GET of the path's LogicalCluster; the walk of
//! Workspaces only where that is forbidden; any logical cluster as first segment.

use holdfast_shared::kcp::{Clients, ExportError, Exports, PathError, Resolver, read_export};
use holdfast_sim::{RbacRule, Sim, SimConfig, SimHandle, User};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};

fn user(name: &str) -> User {
    User {
        name: name.into(),
        token: format!("{name}-token"),
        groups: vec![],
        uid: None,
    }
}

/// A sim with `admin`, `walker` (may read Workspaces, not LogicalClusters) and
/// `nobody` (may read neither).
async fn sim() -> SimHandle {
    let mut cfg = SimConfig::default();
    cfg.users.extend([user("walker"), user("nobody")]);
    cfg.rbac = vec![RbacRule {
        users: vec!["walker".into()],
        verbs: vec!["get".into()],
        api_groups: vec!["tenancy.kcp.io".into()],
        resources: vec!["workspaces".into()],
        ..Default::default()
    }];
    Sim::start(cfg).await.expect("sim")
}

async fn clients(sim: &SimHandle, user: &str) -> Clients {
    let server = format!("{}/clusters/root", sim.url());
    let kc = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_for_server(&server, user))
        .expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    Clients::new(config, 16)
}

fn object(text: &str) -> DynamicObject {
    serde_json::from_str(text).expect("object")
}

async fn create(admin: &Clients, at: &str, ar: &kube::api::ApiResource, obj: &str) {
    let api: Api<DynamicObject> = Api::all_with(admin.cluster(at).expect("client"), ar);
    api.create(&PostParams::default(), &object(obj))
        .await
        .unwrap_or_else(|e| panic!("create in {at}: {e}\n{obj}"));
}

/// Creates `obj` of (group, version, kind, plural) in workspace `at`.
async fn create_kind(
    admin: &Clients,
    at: &str,
    (g, v, k, plural): (&str, &str, &str, &str),
    obj: &str,
) {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(g, v, k),
        plural,
    );
    create(admin, at, &ar, obj).await;
}

async fn workspace(admin: &Clients, parent: &str, name: &str) {
    let ws = format!(
        r#"{{"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace", "metadata": {{"name": "{name}"}}}}"#
    );
    let ar = holdfast_shared::kcp::workspace_resource();
    create(admin, parent, &ar, &ws).await;
    // kcp makes a workspace asynchronously (Scheduling, Initializing, Ready).
    let api: Api<DynamicObject> = Api::all_with(admin.cluster(parent).expect("client"), &ar);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let last = api.get(name).await;
        if last
            .as_ref()
            .is_ok_and(|w| w.data["status"]["phase"] == "Ready")
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "workspace {name} in {parent} not Ready within 30 s: {last:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// The message of an `Unknown` path error (anything else fails the test).
fn unknown(answer: Result<String, PathError>) -> String {
    match answer {
        Err(e @ PathError::Unknown { .. }) => {
            assert!(e.is_definite());
            e.to_string()
        }
        other => panic!("not an unknown path: {other:?}"),
    }
}

fn lc(sim: &SimHandle, path: &str) -> String {
    sim.logical_cluster(path)
        .unwrap_or_else(|| panic!("{path} has no logical cluster"))
}

/// A sim with workspace `root:<name>`, admin's clients and its logical cluster.
async fn with_workspace(name: &str) -> (SimHandle, Clients, String) {
    let sim = sim().await;
    let admin = clients(&sim, "admin").await;
    workspace(&admin, "root", name).await;
    let lc = lc(&sim, &format!("root:{name}"));
    (sim, admin, lc)
}

/// A sim with workspaces `root:org` and `root:org:team`, and admin's clients.
async fn org_team() -> (SimHandle, Clients) {
    let sim = sim().await;
    let admin = clients(&sim, "admin").await;
    workspace(&admin, "root", "org").await;
    workspace(&admin, "root:org", "team").await;
    // Entering root:org (to read its Workspaces) needs `access` there (kcp fact 14).
    let access = r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "walker-access"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kcp:workspace:access"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "walker"}]}"#;
    create_kind(
        &admin,
        "root:org",
        (
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
        ),
        access,
    )
    .await;
    (sim, admin)
}

#[tokio::test]
async fn paths_resolve_through_their_logical_cluster_from_any_first_segment() {
    let (sim, admin) = org_team().await;
    let (org, team) = (lc(&sim, "root:org"), lc(&sim, "root:org:team"));
    assert_ne!(org, team);

    let r = Resolver::new(admin.clone());
    assert_eq!(r.resolve("root").await, Ok("root".to_string()));
    assert_eq!(r.resolve("root:org:team").await, Ok(team.clone()));
    // The first segment may be any logical cluster's name (kcp's front-proxy).
    assert_eq!(r.resolve(&format!("{org}:team")).await, Ok(team.clone()));
    assert_eq!(r.resolve(&team).await, Ok(team.clone()));

    // Unknown: unresolved, saying so (kcp answers 403 or 404 alike here).
    let msg = unknown(r.resolve("root:org:nope").await);
    assert!(
        msg.starts_with(
            "workspace root:org:nope does not exist or holdfast may not access it (verb access on / there, get logicalclusters): "
        ),
        "{msg}"
    );
    for bad in ["", "Root", "root::a", "root:a/b", "root:-a"] {
        assert_eq!(
            r.resolve(bad).await,
            Err(PathError::Malformed(bad.to_string())),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn the_walk_is_the_fallback_where_the_logical_cluster_is_forbidden() {
    let (sim, _) = org_team().await;
    let team = lc(&sim, "root:org:team");

    // May read Workspaces but not LogicalClusters: resolved by the walk.
    let walker = Resolver::new(clients(&sim, "walker").await);
    assert_eq!(walker.resolve("root:org:team").await, Ok(team));
    let msg = unknown(walker.resolve("root:org:nope").await);
    assert!(
        msg.starts_with("workspace root:org:nope does not exist or holdfast may not access it"),
        "{msg}"
    );
    // kcp's front-proxy answers 403 for an unknown path, so the walk runs and
    // names the missing segment.
    assert!(
        msg.contains("reading its LogicalCluster: ")
            && msg.contains("walking Workspaces: workspace \"nope\" in root:org: "),
        "{msg}"
    );

    // May read neither: both attempts named in the error.
    let nobody = Resolver::new(clients(&sim, "nobody").await);
    let msg = unknown(nobody.resolve("root:org:team").await);
    assert!(
        msg.contains("reading its LogicalCluster: ")
            && msg.contains("logicalclusters")
            && msg.contains("walking Workspaces: workspace \"org\" in root: ")
            && msg.contains("cannot get resource \"workspaces\""),
        "{msg}"
    );
}

#[tokio::test]
async fn a_workspace_recreated_under_the_same_path_is_followed_once_forgotten() {
    let (sim, admin, first) = with_workspace("team").await;
    let r = Resolver::new(admin.clone());
    assert_eq!(r.resolve("root:team").await, Ok(first.clone()));

    let api: Api<DynamicObject> = Api::all_with(
        admin.cluster("root").expect("client"),
        &holdfast_shared::kcp::workspace_resource(),
    );
    api.delete("team", &DeleteParams::default())
        .await
        .expect("delete");
    workspace(&admin, "root", "team").await;
    let second = lc(&sim, "root:team");
    assert_ne!(first, second);

    // Cached until forgotten (a 403/404 there) or invalidated (a resync).
    assert_eq!(r.cached("root:team").await, Some(first.clone()));
    r.forget("unrelated").await;
    assert_eq!(r.resolve("root:team").await, Ok(first.clone()));
    r.forget(&first).await;
    assert_eq!(r.cached("root:team").await, None);
    assert_eq!(r.resolve("root:team").await, Ok(second.clone()));
    r.invalidate();
    assert_eq!(r.cached("root:team").await, None);
    assert_eq!(r.resolve("root:team").await, Ok(second));
}

#[tokio::test]
async fn exports_are_read_with_their_resources_and_identity() {
    let (sim, admin, net) = with_workspace("net").await;
    create_kind(
        &admin,
        "root:net",
        ("apis.kcp.io", "v1alpha1", "APIExport", "apiexports"),
        r#"{"apiVersion": "apis.kcp.io/v1alpha1", "kind": "APIExport", "metadata": {"name": "net.test.io"},
            "spec": {"latestResourceSchemas": ["v1.vpcs.net.test.io", "v2.subnets.net.test.io"]}}"#,
    )
    .await;
    let info = read_export(&admin, &net, "root:net", "net.test.io")
        .await
        .expect("read");
    let resources: Vec<String> = info.resources.iter().map(|r| r.to_string()).collect();
    assert_eq!(resources, vec!["subnets.net.test.io", "vpcs.net.test.io"]);
    assert_eq!(info.identity_hash.len(), 64, "{info:?}");
    assert!(info.identity_hash.bytes().all(|b| b.is_ascii_hexdigit()));

    assert_eq!(
        read_export(&admin, &net, "root:net", "missing.test.io").await,
        Err(ExportError::NotFound {
            name: "missing.test.io".into(),
            workspace: "root:net".into()
        })
    );
    let nobody = clients(&sim, "nobody").await;
    match read_export(&nobody, &net, "root:net", "net.test.io").await {
        Err(e @ ExportError::Forbidden { .. }) => assert!(
            e.to_string().starts_with(
                "holdfast may not read APIExport net.test.io in workspace root:net (it needs get apiexports there): "
            ),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }

    // The cache answers until its logical cluster is forgotten.
    let exports = Exports::new(admin.clone());
    assert_eq!(
        exports.get(&net, "root:net", "net.test.io").await,
        Ok(std::sync::Arc::new(info.clone()))
    );
    let export = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("apis.kcp.io", "v1alpha1", "APIExport"),
        "apiexports",
    );
    let api: Api<DynamicObject> =
        Api::all_with(admin.cluster("root:net").expect("client"), &export);
    api.delete("net.test.io", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(
        exports.get(&net, "root:net", "net.test.io").await,
        Ok(std::sync::Arc::new(info))
    );
    exports.forget(&net).await;
    assert!(matches!(
        exports.get(&net, "root:net", "net.test.io").await,
        Err(ExportError::NotFound { .. })
    ));
}
