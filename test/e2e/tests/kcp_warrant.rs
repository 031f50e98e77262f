//! Break-glass through an APIExport virtual workspace on the simulated kcp, the
//! same story as `kcp_real.rs`
//! `a_provider_cannot_break_glass_through_its_virtual_workspace_on_a_real_kcp`: the
//! virtual workspace forwards a write with kcp's warrant (group `system:kcp:admin`,
//! cluster-admin in every workspace) in `userInfo.extra` (kcp-facts 28), which
//! holdfast's bypass check must leave out.

use holdfast_e2e::{
    KubectlOutput, denied_by,
    kcp::{CLAIMS_BINDING, CLAIMS_EXPORT, CONSUMER},
    kcp_real::strict_label_denial,
    kcp_sharded::{COMPUTE, bindable, sharded},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_provider_cannot_break_glass_through_its_virtual_workspace() {
    let mut t = sharded().await.unwrap_or_else(|e| panic!("{e:#}"));
    t.apply("provider", COMPUTE, CLAIMS_EXPORT);
    t.apply("provider", COMPUTE, &bindable("claims.test.io"));
    t.let_bind_holdfast("consumer");
    let path = t.workspace_binding("consumer", "shard-1", true, &[]);
    assert_eq!(path, CONSUMER);
    t.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    t.apply("consumer", CONSUMER, CLAIMS_BINDING);
    let lc = t
        .env
        .sim
        .logical_cluster(CONSUMER)
        .unwrap_or_else(|| panic!("{CONSUMER} has no logical cluster"));
    let _controller = t
        .start_holdfast_with("controller", "watch", &["--strict"])
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));

    // The consumer's protected ConfigMap; holdfast enforces its label.
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
        let out = t.kubectl("consumer", CONSUMER, args);
        assert_eq!(out.code, 0, "{out:?}");
    }
    let denial = strict_label_denial("vault");
    let dry_run = [
        "delete",
        "configmap",
        "vault",
        "-n",
        "default",
        "--dry-run=server",
    ];
    let out = t
        .until("consumer", CONSUMER, &dry_run, |o| o.code != 0)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
    assert!(out.refused_with(&denial), "{out:?}");

    // The provider reaches the ConfigMap through its export's virtual workspace.
    let slice = ["get", "apiexportendpointslice", "claims.test.io", "-o"];
    let slice = [&slice[..], &["jsonpath={.status.endpoints[*].url}"]].concat();
    let out = t
        .until("provider", COMPUTE, &slice, |o| !o.stdout.is_empty())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let urls: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(urls.len(), 1, "one shard binds claims.test.io: {out:?}");
    let vw = format!("{}/clusters/{lc}", urls[0]);
    let at_vw = |args: &[&str]| -> KubectlOutput {
        let mut all = vec!["--server", vw.as_str()];
        all.extend_from_slice(args);
        t.env
            .kubectl_as("provider", &all)
            .unwrap_or_else(|e| panic!("kubectl: {e}"))
    };
    let out = at_vw(&["get", "configmap", "vault", "-n", "default", "-o", "name"]);
    assert_eq!(out.code, 0, "{out:?}");

    // The break-glass annotation through the virtual workspace: refused by the
    // strict label webhook, the warrant notwithstanding.
    let annotate = [
        "annotate",
        "configmap",
        "vault",
        "-n",
        "default",
        "holdfast.dev/skip-protection=true",
    ];
    let out = at_vw(&annotate);
    let break_glass_denial = denied_by(
        "strict-label-0.holdfast.dev",
        "holdfast: user \"provider\" may not add annotation holdfast.dev/skip-protection to \
         ConfigMap default/vault: it is protected in strict mode, and lifting that protection \
         needs the permission to bypass it (verb bypass on protections.holdfast.dev in \
         namespace default). Ask someone who holds it.",
    );
    assert!(
        out.refused_with(&break_glass_denial),
        "{out:?}\n{}",
        t.env.webhook_log()
    );
    let annotations = t.get_json(
        "consumer",
        CONSUMER,
        &["configmap", "vault", "-n", "default"],
    );
    assert!(
        annotations["metadata"]["annotations"]
            .get("holdfast.dev/skip-protection")
            .is_none(),
        "{annotations}"
    );
    let delete = ["delete", "configmap", "vault", "-n", "default"];
    let out = at_vw(&delete);
    assert!(out.refused_with(&denial), "{out:?}");
    let out = t.kubectl("consumer", CONSUMER, &delete);
    assert!(out.refused_with(&denial), "{out:?}");

    // The review the virtual workspace's write caused carried the warrant: the
    // webhook saw user `provider`, and the refusal was holdfast's, not RBAC's.
    // Positive control: the consumer's admin holds bypass in its workspace.
    let out = t.kubectl("consumer", CONSUMER, &annotate);
    assert_eq!(out.code, 0, "{out:?}\n{}", t.env.webhook_log());
    let out = t.kubectl("consumer", CONSUMER, &delete);
    assert_eq!(out.code, 0, "{out:?}");
    let log = t.env.webhook_log();
    let honoured: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("break-glass honoured"))
        .collect();
    assert!(
        honoured.len() == 1 && honoured[0].contains("consumer"),
        "{honoured:?}"
    );
}
