//! "Ready means enforced" on a real kcp (`holdfast_e2e::kcp_real`: two shards,
//! front-proxy, cache server; issue 30 item 5). kcp's admission reads webhook
//! configurations through the cache server (kcp-facts 22), so a configuration
//! holdfast wrote is enforced later, or never while the cache server is down.
//! Every kcp configuration carries an enforcement probe (`holdfast_shared::enforcement`)
//! and a policy turns Ready only once kcp answers it. With the cache server
//! stopped, a new policy stays `NotEnforcedYet` while kcp indeed lets its
//! objects go, an older policy stays Ready (kcp still enforces it), and when the
//! cache server comes back the new one turns Ready and is enforced.

use holdfast_e2e::kcp_real::*;

/// A ResourceProtection `name` of `resource` (core group).
fn protection(name: &str, resource: &str) -> String {
    format!(
        "apiVersion: holdfast.dev/v1alpha1\nkind: ResourceProtection\nmetadata: {{name: {name}}}\n\
         spec:\n  resources:\n  - {{group: \"\", version: v1, resource: {resource}}}\n"
    )
}

/// A server-side dry-run DELETE of `kind` `name` in `default` of the consumer's
/// workspace, as the consumer.
fn dry_delete(r: &Real, kind: &str, name: &str) -> holdfast_e2e::KubectlOutput {
    r.kubectl(
        "consumer",
        CONSUMER,
        &["delete", kind, name, "-n", "default", "--dry-run=server"],
    )
}

const READY: &str = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}/{.status.conditions[?(@.type==\"Ready\")].reason}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_is_ready_only_once_kcp_enforces_it_on_a_real_kcp() {
    let mut r = Real::start("enforcement").await;
    r.install_holdfast_api().await;
    r.workspace("root", "consumer", "shard-1", "consumer").await;
    r.let_bind_holdfast("consumer");
    r.bind_holdfast("consumer", CONSUMER).await;
    r.apply_k("consumer", CONSUMER, "overlays/kcp/workspace/consumer");
    r.start_holdfast(&[]).await;

    // The configuration ends with its probe, named in its annotation.
    let cfg = r
        .until(
            "consumer",
            CONSUMER,
            &[
                "get",
                "validatingwebhookconfiguration",
                "holdfast",
                "-o",
                "json",
            ],
            |o| o.code == 0,
        )
        .await
        .json()
        .expect("json");
    let probe = cfg["metadata"]["annotations"]["holdfast.dev/enforcement-probe"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(probe.starts_with("holdfast-enforcement-probe-"), "{cfg}");
    let last = cfg["webhooks"]
        .as_array()
        .and_then(|h| h.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["name"], "enforcement-probe.holdfast.dev", "{cfg}");
    assert_eq!(
        last["matchConditions"][0]["expression"],
        format!("object.metadata.name == '{probe}'"),
        "{cfg}"
    );

    // A first policy: Ready, enforced.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "configmap", "vault", "-n", "default"],
    );
    r.apply("consumer", CONSUMER, &protection("config", "configmaps"));
    r.until(
        "consumer",
        CONSUMER,
        &["get", "resourceprotection", "config", "-o", READY],
        |o| o.stdout == "True/Enforced",
    )
    .await;
    let out = dry_delete(&r, "configmap", "vault");
    assert!(
        out.code != 0 && out.stderr.contains("ResourceProtection/config"),
        "Ready, so refused at once: {out:?}"
    );
    r.step("ResourceProtection config Ready and enforced");
    // A real DELETE, refused: the webhook records it as an Event next to the
    // ConfigMap, written through holdfast's virtual workspace under the core
    // Events claim (kcp-facts 32: a claim on events.k8s.io never authorizes).
    let out = r.kubectl(
        "consumer",
        CONSUMER,
        &["delete", "configmap", "vault", "-n", "default"],
    );
    assert!(out.code != 0, "{out:?}");
    let blocked = r
        .until(
            "consumer",
            CONSUMER,
            &[
                "get",
                "events.events.k8s.io",
                "-n",
                "default",
                "-o",
                "jsonpath={range .items[?(@.reason==\"DeletionBlocked\")]}{.regarding.name}{\"\\n\"}{end}",
            ],
            |o| o.stdout.lines().any(|l| l == "vault"),
        )
        .await;
    assert!(blocked.stdout.contains("vault"), "{blocked:?}");

    // The cache server stops: a second policy's configuration is written but
    // kcp cannot enforce it.
    r.ok(
        "consumer",
        CONSUMER,
        &["create", "secret", "generic", "key", "-n", "default"],
    );
    let paused = r.kcp.pause_cache_server().expect("pause the cache server");
    r.step("cache server stopped");
    r.apply("consumer", CONSUMER, &protection("secrets", "secrets"));
    let waiting = r
        .until(
            "consumer",
            CONSUMER,
            &["get", "resourceprotection", "secrets", "-o", READY],
            |o| o.stdout == "False/NotEnforcedYet",
        )
        .await;
    assert_eq!(waiting.stdout, "False/NotEnforcedYet");
    let installed = r.condition(
        "consumer",
        CONSUMER,
        "resourceprotection",
        "secrets",
        "Installed",
    );
    assert_eq!(installed, "True/WebhookInstalled");
    // The status tells the truth: kcp lets the Secret go (a dry run)...
    let out = dry_delete(&r, "secret", "key");
    assert_eq!(out.code, 0, "not enforced, and not Ready: {out:?}");
    // ...and still enforces the first policy, which stays Ready.
    assert_eq!(
        r.kubectl(
            "consumer",
            CONSUMER,
            &["get", "resourceprotection", "config", "-o", READY]
        )
        .stdout,
        "True/Enforced"
    );
    let out = dry_delete(&r, "configmap", "vault");
    assert!(
        out.code != 0 && out.stderr.contains("ResourceProtection/config"),
        "{out:?}"
    );
    let message = r
        .kubectl(
            "consumer",
            CONSUMER,
            &[
                "get",
                "resourceprotection",
                "secrets",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}",
            ],
        )
        .stdout;
    assert!(
        message.contains("kcp does not enforce the webhook configuration yet")
            && message.contains("secrets"),
        "{message}"
    );
    r.step("ResourceProtection secrets NotEnforcedYet while kcp lets Secrets go");

    // The cache server comes back: the new policy turns Ready and is enforced.
    drop(paused);
    r.step("cache server resumed");
    r.until(
        "consumer",
        CONSUMER,
        &["get", "resourceprotection", "secrets", "-o", READY],
        |o| o.stdout == "True/Enforced",
    )
    .await;
    let out = dry_delete(&r, "secret", "key");
    assert!(
        out.code != 0 && out.stderr.contains("ResourceProtection/secrets"),
        "Ready, so refused at once: {out:?}\n{}",
        r.logs()
    );
    r.step("ResourceProtection secrets Ready and enforced");
}
