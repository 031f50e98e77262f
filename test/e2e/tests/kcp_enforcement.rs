//! "Ready means enforced" on the simulated kcp, the same story as
//! `kcp_real_enforcement.rs`: the simulator replicates webhook configurations
//! through its cache server (kcp-facts 29), so with replication stopped a new
//! policy stays `NotEnforcedYet` while its objects still go, an older policy
//! stays Ready, and once replication resumes the new one turns Ready and is
//! enforced.

use holdfast_e2e::{
    KubectlOutput,
    kcp::CONSUMER,
    kcp_sharded::{Sharded, sharded},
};
use holdfast_sim::Replication;

/// A ResourceProtection `name` of `resource` (core group).
fn protection(name: &str, resource: &str) -> String {
    format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {name}}}\n\
         spec:\n  resources:\n  - {{group: \"\", version: v1, resource: {resource}}}\n"
    )
}

const READY: &str = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}/{.status.conditions[?(@.type==\"Ready\")].reason}";

async fn ready_is(t: &Sharded, name: &str, want: &str) -> KubectlOutput {
    t.until(
        "consumer",
        CONSUMER,
        &["get", "resourceprotection", name, "-o", READY],
        |o| o.stdout == want,
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"))
}

fn dry_delete(t: &Sharded, what: &[&str]) -> KubectlOutput {
    let mut args = vec!["delete"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-n", "default", "--dry-run=server"]);
    t.kubectl("consumer", CONSUMER, &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_policy_is_ready_only_once_kcp_enforces_it() {
    let mut t = sharded().await.unwrap_or_else(|e| panic!("{e:#}"));
    t.let_bind_holdfast("consumer");
    let path = t.workspace_binding("consumer", "shard-1", true, &[]);
    assert_eq!(path, CONSUMER);
    t.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    let c = t
        .start_holdfast("controller", "watch")
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));

    // A first policy: Ready, and then refused at once.
    t.apply(
        "consumer",
        CONSUMER,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: vault, namespace: default}\n",
    );
    t.apply("consumer", CONSUMER, &protection("config", "configmaps"));
    ready_is(&t, "config", "True/Enforced").await;
    let out = dry_delete(&t, &["configmap", "vault"]);
    assert!(
        out.code != 0 && out.stderr.contains("ResourceProtection/config"),
        "Ready, so refused at once: {out:?}"
    );

    // The cache server stops: the second policy's configuration is written, not
    // enforced; the status says so and tells the truth.
    t.apply(
        "consumer",
        CONSUMER,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: key, namespace: default}\n",
    );
    t.env.sim.set_webhook_replication(Replication::Stopped);
    t.apply("consumer", CONSUMER, &protection("secrets", "secrets"));
    ready_is(&t, "secrets", "False/NotEnforcedYet").await;
    let installed = t.kubectl(
        "consumer",
        CONSUMER,
        &[
            "get",
            "resourceprotection",
            "secrets",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Installed\")].status}",
        ],
    );
    assert_eq!(installed.stdout, "True", "{installed:?}");
    let out = dry_delete(&t, &["secret", "key"]);
    assert_eq!(out.code, 0, "not enforced, and not Ready: {out:?}");
    // The first policy is still enforced, and still Ready.
    ready_is(&t, "config", "True/Enforced").await;
    let out = dry_delete(&t, &["configmap", "vault"]);
    assert!(
        out.code != 0 && out.stderr.contains("ResourceProtection/config"),
        "{out:?}"
    );

    // Replication resumes: Ready, and refused at once.
    t.env.sim.set_webhook_replication(Replication::default());
    ready_is(&t, "secrets", "True/Enforced").await;
    let out = dry_delete(&t, &["secret", "key"]);
    assert!(
        out.code != 0 && out.stderr.contains("ResourceProtection/secrets"),
        "Ready, so refused at once: {out:?}\n{}",
        c.log()
    );
}
