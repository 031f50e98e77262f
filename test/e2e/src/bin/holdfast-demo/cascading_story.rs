//! Cascading protection: a namespace and a workload that may go once nothing is
//! alive in them (OpenKruise's `Cascading`).

use crate::runner::{Demo, Expect};
use holdfast_e2e::Env;

const WEB_NAMESPACE: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: web
  labels: {holdfast.dev/protected: Cascading}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: web}
spec: {containers: [{name: app, image: registry.example/app:1}]}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: web
  labels: {holdfast.dev/protected: Cascading}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: app, image: registry.example/app:1}]}
";

/// Cascading: refused while alive, allowed once drained.
pub async fn cascading(demo: &mut Demo, env: &Env) -> anyhow::Result<()> {
    demo.story(
        "Cascading protection — may go once nothing is alive inside",
        "issue 20: OpenKruise's Cascading (a namespace with live Pods or PVCs, a workload with replicas)",
    );
    demo.say("Namespace web and Deployment api, both labelled Cascading; a Pod runs in web");
    demo.apply(
        env,
        None,
        WEB_NAMESPACE,
        &[
            "namespace/web created",
            "pod/web-0 created",
            "deployment.apps/api created",
        ],
    )?;
    // The webhook starts watching Pods and PVCs when it sees a Cascading namespace.
    demo.settle(
        env,
        &["delete", "namespace", "web", "--dry-run=server"],
        30,
        |o| o.code != 0 && o.stderr.contains("it still holds 1: Pod web/web-0"),
    )
    .await;

    demo.say("The Deployment still has replicas: refused, with the way out");
    demo.run(
        env,
        &["delete", "deployment", "api", "-n", "web"],
        Expect::Refused,
        &[
            "holdfast: Deployment web/api is protected by label holdfast.dev/protected=Cascading (policy: label holdfast.dev/protected) while it has replicas, and it still has .spec.replicas=2",
            "first scale it to 0 (kubectl scale deployments.apps api -n web --replicas=0)",
        ],
    )?;
    demo.say("Scaled to 0, it may go");
    demo.succeeds(
        env,
        "scale deployment api -n web --replicas=0",
        "deployment.apps/api scaled",
    )?;
    demo.succeeds(
        env,
        "delete deployment api -n web",
        "deployment.apps \"api\" deleted",
    )?;

    demo.say("The namespace still holds a live Pod: refused, naming it");
    demo.refused(env, "delete namespace web", "holdfast: Namespace web is protected by label holdfast.dev/protected=Cascading (policy: label holdfast.dev/protected) while it holds live Pods or PersistentVolumeClaims, and it still holds 1: Pod web/web-0")?;
    demo.say("Once the Pod is gone, the namespace may go");
    demo.succeeds(env, "delete pod web-0 -n web", "pod \"web-0\" deleted")?;
    demo.settle(
        env,
        &["delete", "namespace", "web", "--dry-run=server"],
        30,
        |o| o.code == 0,
    )
    .await;
    demo.succeeds(env, "delete namespace web", "namespace \"web\" deleted")?;
    Ok(())
}
