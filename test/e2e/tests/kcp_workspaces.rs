//! Workspace containment on the simulated kcp, the same story as
//! `kcp_real_workspaces.rs` on the real one: the simulator routes Workspace DELETEs
//! through root's configurations as kcp does (kcp-facts 27).

use holdfast_e2e::{
    kcp::{
        BINDING_DELETION, EVENTS, LABEL_REFUSAL, PROTECTED_POLICY, assert_kcp_shapes,
        binding_denial, blocked_events, finding_kinds, holdfast_binding_without_events,
        workspace_denial,
    },
    kcp_sharded::{admin_of, holdfast_binding, sharded},
};

const ORG: &str = "root:org";
const TEAM: &str = "root:org:team";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_workspace_that_holds_a_protected_object_is_refused() {
    let mut t = sharded().await.unwrap_or_else(|e| panic!("{e:#}"));
    t.apply_k("platform", "root", "overlays/kcp/workspace/root");
    t.create_workspace("root", "org", "root");
    t.create_workspace(ORG, "team", "shard-1");
    t.create_workspace(ORG, "scratch", "shard-1");
    t.apply("platform", TEAM, &admin_of("consumer"));
    t.let_bind_holdfast("consumer");
    t.apply("consumer", TEAM, holdfast_binding());
    t.apply_k("consumer", TEAM, "overlays/kcp/workspace/consumer");
    for args in [
        &["create", "configmap", "vault", "-n", "default"][..],
        &[
            "label",
            "configmap",
            "vault",
            "-n",
            "default",
            "holdfast.dev/protected=Always",
        ],
    ] {
        let out = t.kubectl("consumer", TEAM, args);
        assert_eq!(out.code, 0, "{out:?}");
    }
    let json = |user: &str, path: &str, args: &[&str]| {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend(["-o", "json"]);
        let out = t.kubectl(user, path, &all);
        assert_eq!(out.code, 0, "{all:?}: {out:?}");
        out.json().expect("json")
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
    let _controller = t
        .start_holdfast("controller", "watch")
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));

    let team_denial = workspace_denial(TEAM, "ConfigMap default/vault (label) in root:org:team");
    let dry_run = ["delete", "workspace", "team", "--dry-run=server"];
    let out = t
        .until("platform", ORG, &dry_run, |o| o.code != 0)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
    assert_eq!(out.stderr, team_denial, "{}", t.env.webhook_log());
    let out = t.kubectl("platform", "root", &["delete", "workspace", "org"]);
    assert_eq!(
        out.stderr,
        workspace_denial(ORG, "ConfigMap default/vault (label) in root:org:team")
    );
    let out = t.kubectl("platform", ORG, &["delete", "workspace", "team"]);
    assert_eq!(out.stderr, team_denial);
    for (path, args) in [
        (ORG, &["get", "workspace", "team"][..]),
        ("root", &["get", "workspace", "org"]),
        (TEAM, &["get", "configmap", "vault", "-n", "default"]),
    ] {
        let out = t.kubectl("platform", path, args);
        assert_eq!(out.code, 0, "{out:?}");
    }
    // The plugin on kcp: workspace containment as holdfast judges it, and kcp's own
    // reasons (a workspace that binds no holdfast.dev).
    let why = t.plugin("platform", ORG, &["why", "workspace", "team"]);
    assert_eq!(why.code, 1, "{why:?}");
    assert!(
        why.stdout.contains("DELETE would be REFUSED")
            && why
                .stdout
                .contains("ConfigMap default/vault (label) in root:org:team"),
        "{why:?}"
    );
    let out = t.kubectl(
        "platform",
        "root:org:scratch",
        &["create", "configmap", "x", "-n", "default"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let why = t.plugin(
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
    let check = t.plugin("platform", "root:org:scratch", &["check", "-o", "json"]);
    assert_eq!(
        (check.code, finding_kinds(&check.stdout)),
        (1, vec!["NotBound".to_string()]),
        "{check:?}"
    );
    // Bound without accepting the claim on Events: named, with what it costs.
    let file = t.env.dir.path().join("no-events.yaml");
    std::fs::write(&file, holdfast_binding_without_events()).expect("manifest");
    let out = t.kubectl(
        "platform",
        "root:org:scratch",
        &["apply", "-f", &file.to_string_lossy()],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let phase = [
        "get",
        "apibinding",
        "holdfast",
        "-o",
        "jsonpath={.status.phase}",
    ];
    t.until("platform", "root:org:scratch", &phase, |o| {
        o.stdout == "Bound"
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    let check = t.plugin("platform", "root:org:scratch", &["check", "-o", "json"]);
    assert!(
        finding_kinds(&check.stdout).contains(&"ClaimNotAccepted".to_string())
            && check.stdout.contains("the claim on events is not accepted"),
        "{check:?}"
    );
    // Unbinding is judged (the workspace binds holdfast now): with the consumer
    // overlay's grants the webhook sees nothing protected in it.
    t.apply_k(
        "platform",
        "root:org:scratch",
        "overlays/kcp/workspace/consumer",
    );
    t.until(
        "platform",
        "root:org:scratch",
        &["delete", "apibinding", "holdfast"],
        |o| o.code == 0,
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
    let check = t.plugin("consumer", TEAM, &["check", "-o", "json"]);
    let kinds = finding_kinds(&check.stdout);
    assert!(
        !kinds.is_empty()
            && !kinds
                .iter()
                .any(|k| ["NotBound", "BindingNotBound", "ClaimNotAccepted"].contains(&k.as_str())),
        "{check:?}"
    );

    // Break-glass on the Workspace is not honoured while it holds a protected
    // object (kcp would delete it past holdfast); on the object itself it is.
    let steps: [(&str, &str, &[&str], bool); 4] = [
        (
            "platform",
            ORG,
            &[
                "annotate",
                "workspace",
                "team",
                "holdfast.dev/skip-protection=true",
            ],
            true,
        ),
        ("platform", ORG, &dry_run, false),
        (
            "consumer",
            TEAM,
            &[
                "annotate",
                "configmap",
                "vault",
                "-n",
                "default",
                "holdfast.dev/skip-protection=true",
            ],
            true,
        ),
        ("platform", ORG, &dry_run, true),
    ];
    for (user, path, args, ok) in steps {
        let out = t.kubectl(user, path, args);
        assert_eq!(out.code == 0, ok, "{args:?}: {out:?}");
        if !ok {
            assert_eq!(out.stderr, team_denial);
        }
    }
    let out = t.kubectl(
        "consumer",
        TEAM,
        &[
            "annotate",
            "configmap",
            "vault",
            "-n",
            "default",
            "holdfast.dev/skip-protection-",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");

    // Nothing protected: deleted as usual.
    let out = t.kubectl("platform", ORG, &["delete", "workspace", "scratch"]);
    assert_eq!(out.code, 0, "{out:?}");

    // Unbinding holdfast with a protected policy among its objects: refused.
    t.apply("consumer", TEAM, PROTECTED_POLICY);
    // The policy's own label protects it (kcp admits DELETEs of holdfast's types
    // through the holdfast workspace's configuration only, which carries it).
    let delete_policy = ["delete", "resourceprotection", "keep", "--dry-run=server"];
    let out = t
        .until("consumer", TEAM, &delete_policy, |o| o.code != 0)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
    assert!(
        out.stderr.contains("denied the request")
            && out
                .stderr
                .contains("is protected by label holdfast.dev/protected=Always"),
        "{out:?}"
    );
    let out = t.kubectl("consumer", TEAM, &["delete", "apibinding", "holdfast"]);
    assert_eq!(out.stderr, binding_denial(), "{}", t.env.webhook_log());
    // Break-glass on the APIBinding: its DELETE passes, kcp deletes its objects
    // through admission, the protected policy is refused and the binding waits in
    // deletion with kcp's condition, beside holdfast's DeletionBlocked Event.
    for args in [
        &[
            "annotate",
            "apibinding",
            "holdfast",
            "holdfast.dev/skip-protection=true",
        ][..],
        &["delete", "apibinding", "holdfast", "--wait=false"],
    ] {
        let out = t.kubectl("consumer", TEAM, args);
        assert_eq!(out.code, 0, "{args:?}: {out:?}");
    }
    let stuck = t
        .until("consumer", TEAM, &BINDING_DELETION, |o| {
            o.code == 0 && o.stdout.starts_with("False/ResourceDeletionFailed/")
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
    assert!(stuck.stdout.contains(LABEL_REFUSAL), "{stuck:?}");
    let out = t.kubectl("consumer", TEAM, &["get", "resourceprotection", "keep"]);
    assert_eq!(out.code, 0, "{out:?}");
    t.until("consumer", TEAM, &EVENTS, |o| {
        o.code == 0 && blocked_events(&o.stdout, "keep") > 0
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));

    // Protection lifted: the policy goes, then the binding.
    let out = t.kubectl(
        "consumer",
        TEAM,
        &[
            "label",
            "resourceprotection",
            "keep",
            "holdfast.dev/protected-",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    t.until("consumer", TEAM, &["get", "apibinding", "holdfast"], |o| {
        o.is_not_found()
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));

    // Protection lifted: the team's workspace goes.
    let out = t.kubectl(
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
    assert_eq!(out.code, 0, "{out:?}");
    let out = t.kubectl("platform", ORG, &["delete", "workspace", "team"]);
    assert_eq!(out.code, 0, "{out:?}\nwebhook: {}", t.env.webhook_log());
}
