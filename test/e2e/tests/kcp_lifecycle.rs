//! Lifecycle and ordering protection on kcp, end to end with both binaries (issue
//! 13): in a consumer workspace on each of two shards, PersistentVolumeClaims bound
//! to a top-level composite by an AnchorRule (they go once the composite is being
//! deleted), and a CriticalService keeping the Deployment that runs the composites'
//! finalizer until they are finalized; a bulk delete of everything converges in
//! that order.
//!
//! kcp serves neither PersistentVolumeClaims nor Deployments itself: the platform's
//! provider workspace `root:kube` exports them (APIExport `kubernetes`) and binds
//! holdfast.dev, so the controller routes the consumers' DELETEs of those types
//! through that workspace's configuration (kcp calls only the export's workspace's
//! configurations for a bound type, kcp-facts 12), and the webhook judges them by the
//! consumer's own policies, reading the composites live in the consumer's workspace.
//! The composites are a CustomResourceDefinition of the consumer's own. Everyone acts
//! under the identities holdfast ships: `holdfast-controller`, `holdfast-webhook`,
//! `provider`, `consumer` (never `system:masters`).

use holdfast_e2e::{
    KubectlOutput,
    kcp::{Kcp, export},
    kcp_sharded::{bindable, holdfast_binding, sharded},
};

/// The platform's provider of Kubernetes workload types.
const KUBE: &str = "root:kube";

/// An APIResourceSchema `v1.<plural>.<group or core>` (namespaced, any content).
fn schema(group: &str, plural: &str, kind: &str) -> String {
    let name_group = if group.is_empty() { "core" } else { group };
    format!(
        "apiVersion: apis.kcp.io/v1alpha1\nkind: APIResourceSchema\n\
         metadata: {{name: v1.{plural}.{name_group}}}\n\
         spec:\n  group: \"{group}\"\n  scope: Namespaced\n  \
         names: {{plural: {plural}, singular: {singular}, kind: {kind}, listKind: {kind}List}}\n  \
         versions:\n  - name: v1\n    served: true\n    storage: true\n    \
         schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
        singular = plural.trim_end_matches('s')
    )
}

/// The composites: a CustomResourceDefinition of the consumer's own.
const XDATABASES: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: xdatabases.db.test.io}
spec:
  group: db.test.io
  scope: Namespaced
  names: {plural: xdatabases, singular: xdatabase, kind: XDatabase, listKind: XDatabaseList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
";

/// What the webhook may read in the consumer's workspace beyond the consumer
/// overlay: the composites and the two bound types (docs/kcp.md, consumer guide).
const READS: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: holdfast-reads-bound}
rules:
- {apiGroups: [db.test.io], resources: [xdatabases], verbs: [get, list]}
- {apiGroups: [apps], resources: [deployments], verbs: [get, list]}
- {apiGroups: [\"\"], resources: [persistentvolumeclaims], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: holdfast-reads-bound}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: holdfast-reads-bound}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: holdfast-webhook}
";

/// The application: a composite with the finalizer its operator runs, a claim bound
/// to it, the operator's Deployment.
const APP: &str = "apiVersion: v1
kind: Namespace
metadata: {name: app}
---
apiVersion: db.test.io/v1
kind: XDatabase
metadata: {name: orders, namespace: app, finalizers: [db.test.io/cleanup]}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: orders-data
  namespace: app
  labels: {db.test.io/composite: orders, db.test.io/composite-namespace: app}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: db-operator, namespace: app}
spec: {replicas: 1}
";

/// The consumer's policies: PVCs live while their composite does; the operator
/// stays while composites carry its finalizer.
const POLICIES: &str = "apiVersion: holdfast.dev/v1alpha1
kind: AnchorRule
metadata: {name: composites}
spec:
  anchor: {group: db.test.io, version: v1, resource: xdatabases}
  anchorLabels: {name: db.test.io/composite, namespace: db.test.io/composite-namespace}
  protects:
  - {version: v1, resource: persistentvolumeclaims}
---
apiVersion: holdfast.dev/v1alpha1
kind: CriticalService
metadata: {name: db-operator}
spec:
  provider: {group: apps, resource: deployments, namespace: app, name: db-operator}
  criteria:
  - type: Finalizer
    finalizer: {group: db.test.io, resource: xdatabases, finalizerName: db.test.io/cleanup}
";

/// `kubectl args` as the consumer in `path`, which must succeed.
fn ok(t: &Kcp, path: &str, args: &[&str]) -> KubectlOutput {
    let out = t.kubectl("consumer", path, args);
    assert_eq!(
        out.code,
        0,
        "kubectl {args:?} in {path}: {out:?}\nwebhook: {}",
        t.env.webhook_log()
    );
    out
}

/// The refusal kubectl prints for a DELETE the provider's export webhook refuses.
fn refused_by_export(message: &str) -> String {
    format!(
        "Error from server (Forbidden): admission webhook \"kubernetes.policies.holdfast.dev\" \
         denied the request: {message}"
    )
}

/// The provider workspace `root:kube` (shard-1): PersistentVolumeClaims and
/// Deployments exported as `kubernetes`, bindable by anyone, and its binding to
/// holdfast.dev (docs/kcp.md, provider guide).
fn kube_provider(t: &Kcp) {
    t.provider_workspace(KUBE, "shard-1");
    t.apply(
        "provider",
        KUBE,
        &schema("", "persistentvolumeclaims", "PersistentVolumeClaim"),
    );
    t.apply(
        "provider",
        KUBE,
        &schema("apps", "deployments", "Deployment"),
    );
    t.apply(
        "provider",
        KUBE,
        &export(
            "kubernetes",
            &["v1.persistentvolumeclaims.core", "v1.deployments.apps"],
        ),
    );
    t.apply("provider", KUBE, &bindable("kubernetes"));
    t.apply("provider", KUBE, holdfast_binding());
}

/// A consumer workspace `name` on `shard` binding `kubernetes` and holdfast.dev,
/// with the consumer overlay, the extra reads and the composites' CRD.
async fn consumer(t: &Kcp, name: &str, shard: &str) -> String {
    let path = t.workspace_binding(name, shard, true, &[("kubernetes", KUBE, "kubernetes")]);
    t.apply_k("consumer", &path, "overlays/kcp/workspace/consumer");
    t.apply("consumer", &path, READS);
    t.apply("consumer", &path, XDATABASES);
    // Served (the binding bound, the CRD established) before anything uses them.
    for kind in ["xdatabases", "deployments", "persistentvolumeclaims"] {
        t.until("consumer", &path, &["get", kind, "-A"], |o| o.code == 0)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    }
    path
}

/// Waits until condition `Ready` of `kind`/`name` in `path` is True.
async fn ready(t: &Kcp, path: &str, kind: &str, name: &str) {
    let jsonpath = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
    t.until(
        "consumer",
        path,
        &["get", kind, name, "-o", jsonpath],
        |o| o.stdout.trim() == "True",
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn composites_and_their_operator_on_two_shards_converge_in_order() {
    let mut t = sharded().await.unwrap_or_else(|e| panic!("{e:#}"));
    t.let_bind_holdfast("consumer");
    kube_provider(&t);
    let controller = t
        .start_holdfast("controller", "watch")
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    for (name, shard) in [("shop-a", "root"), ("shop-b", "shard-1")] {
        let path = consumer(&t, name, shard).await;
        let lc = t.logical_cluster(&path);
        t.apply("consumer", &path, APP);
        t.apply("consumer", &path, POLICIES);
        ready(&t, &path, "anchorrule", "composites").await;
        ready(&t, &path, "criticalservice", "db-operator").await;

        // The claim lives while its composite does; the operator while the
        // composite carries its finalizer. Both refusals come from the provider's
        // export webhook, judged by this workspace's policies.
        let delete_pvc = [
            "delete",
            "persistentvolumeclaim",
            "orders-data",
            "-n",
            "app",
        ];
        let anchor = format!(
            "holdfast: PersistentVolumeClaim app/orders-data is protected while its anchor \
             xdatabases.db.test.io app/orders exists (policy: AnchorRule/composites (logical \
             cluster {lc})), so it cannot be deleted. To delete it, delete the anchor, or label \
             this object holdfast.dev/allow-deletion=true."
        );
        // Right after the workspace bound the provider's export, kcp's discovery of
        // that workspace may not list the group yet: the webhook then refuses to
        // judge blind ("retry later"), as a consumer would be told; asked again.
        let out = t
            .until("consumer", &path, &delete_pvc, |o| {
                o.code != 0 && !o.stderr.contains("retry later")
            })
            .await
            .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
        assert_eq!(out.stderr.trim(), refused_by_export(&anchor), "{path}");
        let delete_operator = ["delete", "deployment", "db-operator", "-n", "app"];
        let critical = format!(
            "holdfast: Deployment app/db-operator provides a critical service (policy: \
             CriticalService/db-operator (logical cluster {lc})) and cannot be deleted while 1 \
             xdatabases.db.test.io still carries finalizer db.test.io/cleanup. To delete it, \
             wait until those are gone (the service finalizes them), or set the annotation \
             holdfast.dev/skip-protection=true if you are allowed to bypass protection."
        );
        let out = t.kubectl("consumer", &path, &delete_operator);
        assert_eq!(out.stderr.trim(), refused_by_export(&critical), "{path}");

        // Label protection of a bound type: the provider's configuration carries it
        // for workspaces that bind holdfast.dev (the CriticalService's route sees
        // the DELETE too; the first refusal to arrive is reported).
        t.apply(
            "consumer",
            &path,
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ledger\n  namespace: app\n  \
             labels: {holdfast.dev/protected: \"true\"}\nspec: {replicas: 1}\n",
        );
        let label = "holdfast: Deployment app/ledger is protected by label \
             holdfast.dev/protected=true (policy: label holdfast.dev/protected), so it cannot be \
             deleted. To delete it, remove the label (kubectl label deployments.apps ledger -n app \
             holdfast.dev/protected-), or set the annotation holdfast.dev/skip-protection=true if \
             you are allowed to bypass protection.";
        let delete_ledger = ["delete", "deployment", "ledger", "-n", "app"];
        let out = t
            .until("consumer", &path, &delete_ledger, |o| o.code != 0)
            .await
            .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
        let expected: Vec<String> = ["kubernetes.delete-label-0", "kubernetes.policies"]
            .iter()
            .map(|hook| {
                format!(
                    "Error from server (Forbidden): admission webhook \"{hook}.holdfast.dev\" \
                     denied the request: {label}"
                )
            })
            .collect();
        assert!(
            expected.iter().any(|e| e == out.stderr.trim()),
            "{path}: {out:?}, expected one of {expected:?}"
        );
        ok(
            &t,
            &path,
            &[
                "label",
                "deployment",
                "ledger",
                "-n",
                "app",
                "holdfast.dev/protected-",
            ],
        );
        ok(&t, &path, &delete_ledger);

        // Everything at once: the composite is being deleted (its finalizer holds
        // it), which releases the claim it anchors; the operator stays while the
        // composite carries its finalizer.
        let bulk = [
            "delete",
            "xdatabases,persistentvolumeclaims,deployments",
            "--all",
            "-n",
            "app",
            "--wait=false",
        ];
        let first = t.kubectl("consumer", &path, &bulk);
        assert_eq!(
            (first.code, first.stdout.as_str(), first.stderr.trim()),
            (
                1,
                "xdatabase.db.test.io \"orders\" deleted\npersistentvolumeclaim \"orders-data\" deleted\n",
                refused_by_export(&critical).as_str()
            ),
            "{path}"
        );
        assert!(t.exists("consumer", &path, &["xdatabase", "orders", "-n", "app"]));
        assert!(t.exists(
            "consumer",
            &path,
            &["deployment", "db-operator", "-n", "app"]
        ));
        // Retried, it is refused the same way while the finalizer is there.
        let again = t.kubectl("consumer", &path, &bulk);
        assert_eq!(
            (again.code, again.stderr.trim()),
            (1, refused_by_export(&critical).as_str()),
            "{path}"
        );
        // The operator finalizes it.
        ok(
            &t,
            &path,
            &[
                "patch",
                "xdatabase",
                "orders",
                "-n",
                "app",
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ],
        );
        t.until("consumer", &path, &bulk, |o| o.code == 0)
            .await
            .unwrap_or_else(|e| panic!("{e:#}\nwebhook: {}", t.env.webhook_log()));
        for args in [
            ["xdatabase", "orders", "-n", "app"],
            ["persistentvolumeclaim", "orders-data", "-n", "app"],
            ["deployment", "db-operator", "-n", "app"],
        ] {
            assert!(!t.exists("consumer", &path, &args), "{args:?} in {path}");
        }
    }
    drop(controller);
}
