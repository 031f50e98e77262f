//! Workspace containment on a real kcp (`holdfast_e2e::kcp_real`: two shards,
//! front-proxy, cache server): deleting a workspace that holds a protected
//! object, or holds a workspace below it that does, is refused up front and leaves
//! everything intact; kcp would otherwise delete the contents in no set order,
//! mostly without asking holdfast (kcp-facts 23). Installed as `docs/kcp.md` tells
//! the platform team (the root overlay lets the controller keep
//! `holdfast-workspaces` in root, where kcp looks for every Workspace DELETE's
//! configurations, kcp-facts 27), under the shipped identities.

use holdfast_e2e::{
    kcp::{
        BINDING_DELETION, EVENTS, LABEL_REFUSAL, PROTECTED_POLICY, assert_kcp_shapes,
        binding_denial, blocked_events, finding_kinds, holdfast_binding_without_events,
        workspace_denial,
    },
    kcp_real::*,
};

const ORG: &str = "root:org";
const TEAM: &str = "root:org:team";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_workspace_that_holds_a_protected_object_is_refused_on_a_real_kcp() {
    let mut r = Real::start("workspaces").await;
    r.install_holdfast_api().await;
    // docs/kcp.md step 2: the root overlay (workspace containment's grant).
    r.apply_k("platform", "root", "overlays/kcp/workspace/root");

    // An organization on shard root; below it a team on shard-1 that binds
    // holdfast and protects a ConfigMap, and a scratch workspace that does not.
    r.workspace("root", "org", "root", "platform").await;
    r.workspace(ORG, "team", "shard-1", "consumer").await;
    r.workspace(ORG, "scratch", "shard-1", "platform").await;
    r.let_bind_holdfast("consumer");
    r.bind_holdfast("consumer", TEAM).await;
    r.apply_k("consumer", TEAM, "overlays/kcp/workspace/consumer");
    r.ok(
        "consumer",
        TEAM,
        &["create", "configmap", "vault", "-n", "default"],
    );
    r.ok(
        "consumer",
        TEAM,
        &[
            "label",
            "configmap",
            "vault",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    );
    r.step("root:org:team (shard-1) binds holdfast and holds a protected ConfigMap");
    // Where a workspace lies in the tree: kcp keeps the canonical path on every
    // APIBinding (the webhook reads it from its index of bindings; kcp-facts 27).
    let path_of = |path: &str, binding: &str| {
        r.ok(
            "platform",
            path,
            &[
                "get",
                "apibinding",
                binding,
                "-o",
                "jsonpath={.metadata.annotations.kcp\\.io/path}",
            ],
        )
        .stdout
    };
    assert_eq!(path_of(TEAM, "holdfast"), TEAM);
    let json = |user: &str, path: &str, args: &[&str]| {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend(["-o", "json"]);
        r.ok(user, path, &all).json().expect("json")
    };
    assert_kcp_shapes(
        &json("platform", "root", &["workspace", "org"]),
        &json("platform", ORG, &["workspace", "team"]),
        &json("consumer", TEAM, &["apibinding", "holdfast"]),
        &json(
            "platform",
            "root:holdfast",
            &["apiexportendpointslice", "holdfast.dev"],
        ),
    );

    r.start_holdfast(&[]).await;

    // The controller keeps holdfast-workspaces in root.
    let cfg = r
        .until(
            "platform",
            "root",
            &[
                "get",
                "validatingwebhookconfiguration",
                "holdfast-workspaces",
                "-o",
                "json",
            ],
            |o| o.code == 0,
        )
        .await
        .json()
        .expect("json");
    let url = cfg["webhooks"][0]["clientConfig"]["url"]
        .as_str()
        .unwrap_or_default();
    assert!(url.ends_with("/validate/kcp-workspaces"), "{cfg}");
    r.step("holdfast-workspaces installed in root");

    // The team's workspace: refused (kcp enforces the configuration once it
    // came back from the cache server, so dry runs until then).
    let team_denial = workspace_denial(TEAM, "ConfigMap default/vault (label) in root:org:team");
    let out = r.refused("platform", ORG, &["workspace", "team"]).await;
    assert_eq!(out.stderr, team_denial, "{out:?}\n{}", r.logs());
    // The organization above it: refused, naming the object below.
    let out = r.kubectl("platform", "root", &["delete", "workspace", "org"]);
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (
            1,
            workspace_denial(ORG, "ConfigMap default/vault (label) in root:org:team").as_str()
        ),
        "{out:?}\n{}",
        r.logs()
    );
    // For real: refused, and everything stays.
    let out = r.kubectl("platform", ORG, &["delete", "workspace", "team"]);
    assert_eq!(out.stderr, team_denial, "{out:?}");
    r.ok("platform", ORG, &["get", "workspace", "team"]);
    r.ok("platform", "root", &["get", "workspace", "org"]);
    r.ok(
        "consumer",
        TEAM,
        &["get", "configmap", "vault", "-n", "default"],
    );
    r.step("team and org refused; both workspaces and the ConfigMap stay");

    // The plugin on kcp: workspace containment as holdfast judges it, and kcp's own
    // reasons (a workspace that binds no holdfast.dev).
    let why = r.plugin("platform", ORG, &["why", "workspace", "team"]);
    assert_eq!(why.code, 1, "{why:?}");
    assert!(
        why.stdout.contains("DELETE would be REFUSED")
            && why
                .stdout
                .contains("ConfigMap default/vault (label) in root:org:team"),
        "{why:?}"
    );
    r.ok(
        "platform",
        "root:org:scratch",
        &["create", "configmap", "x", "-n", "default"],
    );
    let why = r.plugin(
        "platform",
        "root:org:scratch",
        &["why", "configmap", "x", "-n", "default"],
    );
    assert_eq!(why.code, 0, "{why:?}");
    assert!(
        why.stdout
            .contains("workspace root:org:scratch binds no APIExport holdfast.dev"),
        "{why:?}"
    );
    let check = r.plugin("platform", "root:org:scratch", &["check", "-o", "json"]);
    assert_eq!(
        (check.code, finding_kinds(&check.stdout)),
        (1, vec!["NotBound".to_string()]),
        "{check:?}"
    );
    // Bound without accepting the claim on Events: named, with what it costs.
    r.bind(
        "platform",
        "root:org:scratch",
        &holdfast_binding_without_events(),
    )
    .await;
    r.bound("platform", "root:org:scratch", "holdfast").await;
    let check = r.plugin("platform", "root:org:scratch", &["check", "-o", "json"]);
    assert!(
        finding_kinds(&check.stdout).contains(&"ClaimNotAccepted".to_string())
            && check.stdout.contains("the claim on events is not accepted"),
        "{check:?}"
    );
    // Unbinding is judged (the workspace binds holdfast now): with the consumer
    // overlay's grants the webhook sees nothing protected in it.
    r.apply_k(
        "platform",
        "root:org:scratch",
        "overlays/kcp/workspace/consumer",
    );
    r.until(
        "platform",
        "root:org:scratch",
        &["delete", "apibinding", "holdfast"],
        |o| o.code == 0,
    )
    .await;
    let check = r.plugin("consumer", TEAM, &["check", "-o", "json"]);
    let kinds = finding_kinds(&check.stdout);
    assert!(
        !kinds.is_empty()
            && !kinds
                .iter()
                .any(|k| ["NotBound", "BindingNotBound", "ClaimNotAccepted"].contains(&k.as_str())),
        "{check:?}"
    );
    r.step("kubectl holdfast: workspace containment and kcp's reasons");

    // Break-glass on the Workspace is not honoured while it holds a protected
    // object (kcp would delete it past holdfast); on the object itself it is.
    r.ok(
        "platform",
        ORG,
        &[
            "annotate",
            "workspace",
            "team",
            "holdfast.dev/skip-protection=true",
        ],
    );
    let out = r.kubectl(
        "platform",
        ORG,
        &["delete", "workspace", "team", "--dry-run=server"],
    );
    assert_eq!(out.stderr, team_denial, "{out:?}");
    let skip = ["annotate", "configmap", "vault", "-n", "default"];
    let mut marked = skip.to_vec();
    marked.push("holdfast.dev/skip-protection=true");
    r.ok("consumer", TEAM, &marked);
    r.ok(
        "platform",
        ORG,
        &["delete", "workspace", "team", "--dry-run=server"],
    );
    let mut unmarked = skip.to_vec();
    unmarked.push("holdfast.dev/skip-protection-");
    r.ok("consumer", TEAM, &unmarked);
    r.refused("platform", ORG, &["workspace", "team"]).await;
    r.step("break-glass: not on the Workspace, on each protected object");

    // A workspace holding nothing protected is deleted as usual.
    r.ok(
        "platform",
        ORG,
        &["delete", "workspace", "scratch", "--wait=false"],
    );
    r.until("platform", ORG, &["get", "workspace", "scratch"], |o| {
        o.is_not_found()
    })
    .await;

    // holdfast's configuration, deleted, comes back.
    let uid = cfg["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    r.ok(
        "platform",
        "root",
        &[
            "delete",
            "validatingwebhookconfiguration",
            "holdfast-workspaces",
        ],
    );
    let uid_query = [
        "get",
        "validatingwebhookconfiguration",
        "holdfast-workspaces",
        "-o",
        "jsonpath={.metadata.uid}",
    ];
    r.until("platform", "root", &uid_query, |o| {
        o.code == 0 && !o.stdout.is_empty() && o.stdout != uid
    })
    .await;
    r.refused("platform", ORG, &["workspace", "team"]).await;
    r.step("holdfast-workspaces deleted and put back");

    // Unbinding an export deletes every object of its types (kcp-facts 24): with
    // a protected object among them, refused up front, naming it.
    r.apply("consumer", TEAM, PROTECTED_POLICY);
    // The policy's own label protects it (kcp admits DELETEs of holdfast's types
    // through the holdfast workspace's configuration only, which carries it).
    let out = r
        .refused("consumer", TEAM, &["resourceprotection", "keep"])
        .await;
    assert!(
        out.stderr
            .contains("is protected by label holdfast.dev/protected=Always"),
        "{out:?}"
    );
    let out = r
        .refused("consumer", TEAM, &["apibinding", "holdfast"])
        .await;
    assert_eq!(out.stderr, binding_denial(), "{out:?}\n{}", r.logs());
    let out = r.kubectl("consumer", TEAM, &["delete", "apibinding", "holdfast"]);
    assert_eq!(out.stderr, binding_denial(), "{out:?}");
    r.ok("consumer", TEAM, &["get", "apibinding", "holdfast"]);
    r.ok("consumer", TEAM, &["get", "resourceprotection", "keep"]);
    r.step("unbinding holdfast refused while a policy is protected");

    // Break-glass on the APIBinding lets its DELETE through; kcp then deletes its
    // objects through admission, holdfast refuses the protected one, and the
    // binding waits in deletion, saying why (kcp-facts 34), beside holdfast's
    // DeletionBlocked Event: nothing protected goes, nothing is half-deleted silently.
    r.ok(
        "consumer",
        TEAM,
        &[
            "annotate",
            "apibinding",
            "holdfast",
            "holdfast.dev/skip-protection=true",
        ],
    );
    r.ok(
        "consumer",
        TEAM,
        &["delete", "apibinding", "holdfast", "--wait=false"],
    );
    let stuck = r
        .until("consumer", TEAM, &BINDING_DELETION, |o| {
            o.code == 0 && o.stdout.starts_with("False/ResourceDeletionFailed/")
        })
        .await;
    assert!(
        stuck.stdout.contains(LABEL_REFUSAL),
        "{stuck:?}
{}",
        r.logs()
    );
    r.ok("consumer", TEAM, &["get", "resourceprotection", "keep"]);
    let events = r
        .until("consumer", TEAM, &EVENTS, |o| {
            o.code == 0 && blocked_events(&o.stdout, "keep") > 0
        })
        .await;
    assert!(blocked_events(&events.stdout, "keep") > 0, "{events:?}");
    r.step("break-glass on the APIBinding: it waits in deletion on the protected policy");

    // Protection lifted: kcp's next attempt deletes the policy, then the binding.
    r.ok(
        "consumer",
        TEAM,
        &[
            "label",
            "resourceprotection",
            "keep",
            "holdfast.dev/protected-",
        ],
    );
    r.until("consumer", TEAM, &["get", "apibinding", "holdfast"], |o| {
        o.is_not_found()
    })
    .await;
    r.step("protection lifted: the policy and the APIBinding went");

    // Protection lifted: the team's workspace goes.
    r.ok(
        "consumer",
        TEAM,
        &[
            "label",
            "configmap",
            "vault",
            "-n",
            "default",
            "holdfast.dev/protected-",
        ],
    );
    // (A read of the workspace that times out on a loaded machine refuses with
    // "retry later": the DELETE is repeated until it is decided otherwise.)
    let out = r
        .until(
            "platform",
            ORG,
            &["delete", "workspace", "team", "--wait=false"],
            |o| o.code == 0 || !o.stderr.contains("retry later"),
        )
        .await;
    assert_eq!(out.code, 0, "{out:?}");
    r.until("platform", ORG, &["get", "workspace", "team"], |o| {
        o.is_not_found()
    })
    .await;
    r.step("protection lifted: root:org:team deleted");
}
