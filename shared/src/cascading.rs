//! Cascading protection: an object protected with the value `Cascading` (or by a
//! ResourceProtection in `mode: Cascading`) is protected only while it still has live
//! contents:
//!
//! - a Namespace: a Pod that is neither Succeeded, Failed nor terminating, or any
//!   PersistentVolumeClaim;
//! - a CustomResourceDefinition: an instance that is not terminating;
//! - an object with a scale subresource (Deployments, StatefulSets, ReplicaSets,
//!   ReplicationControllers, custom resources whose CRD declares `scale`): its
//!   replica count (`spec.replicas`, or the CRD's `specReplicasPath`) above 0.
//!
//! An object of any other kind has no notion of live contents: `Cascading` protects it
//! like `Always` (the safe reading). Pure: the contents come from a [`ClusterView`].

use crate::{
    fieldpath::FieldPath,
    policy::{ClusterView, LookupError, logical_cluster},
    review::{AdmissionRequest, meta_str},
};
use serde_json::Value;

/// Where the built-in workloads keep their replica count (their scale subresource's
/// `spec.replicas`).
pub const BUILTIN_SCALABLE: &[(&str, &str)] = &[
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "replicasets"),
    ("", "replicationcontrollers"),
];

/// Whether the object carries a deletion timestamp (it is terminating).
pub fn is_terminating(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

/// Whether a Pod is live: not terminating, and its phase neither Succeeded nor
/// Failed (a Pod without a phase is live: it has not finished).
pub fn pod_is_live(pod: &Value) -> bool {
    if is_terminating(pod) {
        return false;
    }
    !matches!(
        pod.get("status")
            .and_then(|s| s.get("phase"))
            .and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// `Kind ns/name` (or `Kind name`) of an object, for the lists in denials.
pub fn describe_object(kind: &str, obj: &Value) -> String {
    let name = meta_str(obj, "name").unwrap_or("<unnamed>");
    match meta_str(obj, "namespace").filter(|n| !n.is_empty()) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// What is still alive in (or under) an object protected with `Cascading`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Live {
    /// Nothing: the Cascading protection does not hold now.
    Drained,
    /// Still alive.
    Alive {
        /// What the protection is conditioned on: "while it holds live Pods or
        /// PersistentVolumeClaims".
        condition: String,
        /// What is still there: "it still holds 2: Pod shop/a, ...".
        still: String,
        /// The objects (or the replica count) standing in the way.
        blockers: Vec<String>,
        /// How to drain it: "delete those Pods and PersistentVolumeClaims ...".
        drain: String,
    },
    /// The object has no notion of live contents (no scale subresource, not a
    /// Namespace or CustomResourceDefinition): protected like `Always`.
    NoContents,
    /// The contents cannot be told right now (store not synced, lookup failed,
    /// replica count missing): refused, fail closed.
    Unknown(String),
}

/// `N things` with the plural `s` when needed.
fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn alive(condition: &str, still: String, blockers: Vec<String>, drain: String) -> Live {
    Live::Alive {
        condition: condition.to_string(),
        still,
        blockers,
        drain,
    }
}

/// The replica count at `path` in `obj`: `Ok(n)`, or why it cannot be read.
fn replicas_at(obj: &Value, path: &str) -> Result<i64, String> {
    let parsed = FieldPath::parse(path)
        .map_err(|e| format!("its replica path {path} cannot be read: {e}"))?;
    match parsed.first(obj) {
        Some(v) => v
            .as_i64()
            .ok_or_else(|| format!("its replica count at {path} is not an integer ({v})")),
        None => Err(format!(
            "its replica count at {path} is not in the object holdfast sees"
        )),
    }
}

/// What is still alive under the object of `req` (`obj` is the object as stored).
pub async fn live_contents<V: ClusterView>(req: &AdmissionRequest, obj: &Value, view: &V) -> Live {
    let cluster = logical_cluster(obj);
    let name = req.object_name().unwrap_or_default();
    if req.is_namespace() {
        return match view.live_in_namespace(cluster, name).await {
            Ok(found) if found.is_empty() => Live::Drained,
            Ok(found) => alive(
                "while it holds live Pods or PersistentVolumeClaims",
                format!(
                    "it still holds {}: {}",
                    found.len(),
                    crate::policy::list_blockers(&found)
                ),
                found,
                "delete those Pods and PersistentVolumeClaims (scale their workloads to 0 \
                 first)"
                    .to_string(),
            ),
            Err(LookupError(e)) => Live::Unknown(format!(
                "cannot tell whether Namespace {name} still holds live Pods or \
                 PersistentVolumeClaims: {e}"
            )),
        };
    }
    if req.is_crd() {
        let resource = obj
            .get("spec")
            .map(|s| {
                format!(
                    "{}.{}",
                    s["names"]["plural"].as_str().unwrap_or_default(),
                    s["group"].as_str().unwrap_or_default()
                )
            })
            .unwrap_or_else(|| name.to_string());
        let all = if obj["spec"]["scope"].as_str() == Some("Cluster") {
            "--all"
        } else {
            "--all --all-namespaces"
        };
        return match view.live_instances(cluster, obj).await {
            Ok(found) if found.is_empty() => Live::Drained,
            Ok(found) => alive(
                "while it has instances",
                format!(
                    "it still has {}: {}",
                    found.len(),
                    crate::policy::list_blockers(&found)
                ),
                found,
                format!("delete its instances (kubectl delete {resource} {all})"),
            ),
            Err(LookupError(e)) => Live::Unknown(format!(
                "cannot tell whether CustomResourceDefinition {name} still has instances: {e}"
            )),
        };
    }
    if req
        .sub_resource
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return Live::NoContents;
    }
    let (group, resource) = (&req.resource.group, &req.resource.resource);
    let builtin = BUILTIN_SCALABLE
        .iter()
        .any(|(g, r)| g == group && r == resource);
    let path = if builtin {
        Some(".spec.replicas".to_string())
    } else if group.is_empty() || !group.contains('.') {
        // Core and unqualified groups hold no custom resources.
        None
    } else {
        match view.replicas_path(cluster, group, resource).await {
            Ok(p) => p,
            Err(LookupError(e)) => {
                return Live::Unknown(format!(
                    "cannot tell whether {} has a scale subresource: {e}",
                    req.describe()
                ));
            }
        }
    };
    let Some(path) = path else {
        return Live::NoContents;
    };
    match replicas_at(obj, &path) {
        Ok(n) if n <= 0 => Live::Drained,
        Ok(n) => {
            let target = req.resource.group_resource();
            let ns = req
                .object_namespace()
                .map(|ns| format!(" -n {ns}"))
                .unwrap_or_default();
            alive(
                "while it has replicas",
                format!("it still has {path}={n}"),
                vec![format!("{path}={n}")],
                format!("scale it to 0 (kubectl scale {target} {name}{ns} --replicas=0)"),
            )
        }
        Err(why) => Live::Unknown(format!(
            "cannot tell whether {} still has replicas: {why}",
            req.describe()
        )),
    }
}

/// `N Pods` etc., for logs and metrics.
pub fn summary(live: &Live) -> String {
    match live {
        Live::Drained => "drained".to_string(),
        Live::Alive { blockers, .. } => count(blockers.len(), "live object", "live objects"),
        Live::NoContents => "no contents".to_string(),
        Live::Unknown(why) => why.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_liveness_follows_phase_and_termination() {
        assert!(pod_is_live(&json!({"metadata": {"name": "a"}})));
        assert!(pod_is_live(
            &json!({"metadata": {"name": "a"}, "status": {"phase": "Running"}})
        ));
        assert!(pod_is_live(
            &json!({"metadata": {"name": "a"}, "status": {"phase": "Pending"}})
        ));
        for phase in ["Succeeded", "Failed"] {
            assert!(!pod_is_live(
                &json!({"metadata": {"name": "a"}, "status": {"phase": phase}})
            ));
        }
        assert!(!pod_is_live(&json!({
            "metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running"}
        })));
        assert!(pod_is_live(
            &json!({"metadata": {"name": "a", "deletionTimestamp": null}})
        ));
    }

    #[test]
    fn objects_are_described_with_their_namespace() {
        assert_eq!(
            describe_object("Pod", &json!({"metadata": {"name": "a", "namespace": "s"}})),
            "Pod s/a"
        );
        assert_eq!(
            describe_object("Widget", &json!({"metadata": {"name": "w"}})),
            "Widget w"
        );
        assert_eq!(summary(&Live::Drained), "drained");
    }

    #[test]
    fn replica_counts_are_read_or_refused() {
        let obj = json!({"spec": {"replicas": 3, "odd": "x"}});
        assert_eq!(replicas_at(&obj, ".spec.replicas"), Ok(3));
        assert_eq!(
            replicas_at(&obj, ".spec.odd"),
            Err("its replica count at .spec.odd is not an integer (\"x\")".to_string())
        );
        assert_eq!(
            replicas_at(&json!({"metadata": {}}), ".spec.replicas"),
            Err(
                "its replica count at .spec.replicas is not in the object holdfast sees"
                    .to_string()
            )
        );
    }
}
