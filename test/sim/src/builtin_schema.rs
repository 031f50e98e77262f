//! Known fields of built-in kinds (from k8s-openapi's schemas), for kube-apiserver's
//! strict field validation (`fieldValidation=Strict`, kubectl's default): unknown
//! fields in typed objects are a 400 "strict decoding error".

use k8s_openapi::api::{
    admissionregistration::v1 as admreg, apps::v1 as apps, batch::v1 as batch,
    coordination::v1 as coord, core::v1 as core, events::v1 as events, networking::v1 as net,
    policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as sched,
};
use k8s_openapi::schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

fn gen_schema<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

type Table = HashMap<(&'static str, &'static str), Value>;

/// A built-in kind whose fields are checked: group, resource, its schema.
type Kind = (&'static str, &'static str, fn() -> Value);

/// The built-in kinds whose fields are checked.
#[rustfmt::skip]
const KINDS: &[Kind] = &[
    ("", "configmaps", gen_schema::<core::ConfigMap>),
    ("", "secrets", gen_schema::<core::Secret>),
    ("", "namespaces", gen_schema::<core::Namespace>),
    ("", "serviceaccounts", gen_schema::<core::ServiceAccount>),
    ("", "services", gen_schema::<core::Service>),
    ("", "pods", gen_schema::<core::Pod>),
    ("", "persistentvolumeclaims", gen_schema::<core::PersistentVolumeClaim>),
    ("", "events", gen_schema::<core::Event>),
    ("events.k8s.io", "events", gen_schema::<events::Event>),
    ("apps", "deployments", gen_schema::<apps::Deployment>),
    ("apps", "statefulsets", gen_schema::<apps::StatefulSet>),
    ("apps", "daemonsets", gen_schema::<apps::DaemonSet>),
    ("apps", "replicasets", gen_schema::<apps::ReplicaSet>),
    ("batch", "jobs", gen_schema::<batch::Job>),
    ("batch", "cronjobs", gen_schema::<batch::CronJob>),
    ("rbac.authorization.k8s.io", "roles", gen_schema::<rbac::Role>),
    ("rbac.authorization.k8s.io", "rolebindings", gen_schema::<rbac::RoleBinding>),
    ("rbac.authorization.k8s.io", "clusterroles", gen_schema::<rbac::ClusterRole>),
    ("rbac.authorization.k8s.io", "clusterrolebindings", gen_schema::<rbac::ClusterRoleBinding>),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", gen_schema::<admreg::ValidatingWebhookConfiguration>),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies", gen_schema::<admreg::ValidatingAdmissionPolicy>),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings", gen_schema::<admreg::ValidatingAdmissionPolicyBinding>),
    ("coordination.k8s.io", "leases", gen_schema::<coord::Lease>),
    ("networking.k8s.io", "networkpolicies", gen_schema::<net::NetworkPolicy>),
    ("networking.k8s.io", "ingresses", gen_schema::<net::Ingress>),
    ("policy", "poddisruptionbudgets", gen_schema::<policy::PodDisruptionBudget>),
    ("scheduling.k8s.io", "priorityclasses", gen_schema::<sched::PriorityClass>),
];

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        KINDS
            .iter()
            .map(|(g, r, schema)| ((*g, *r), schema()))
            .collect()
    })
}

fn resolve<'a>(root: &'a Value, s: &'a Value) -> &'a Value {
    let mut cur = s;
    for _ in 0..8 {
        let Some(r) = cur.get("$ref").and_then(|r| r.as_str()) else {
            return cur;
        };
        let Some(ptr) = r.strip_prefix('#') else {
            return cur;
        };
        match root.pointer(ptr) {
            Some(next) => cur = next,
            None => return cur,
        }
    }
    cur
}

/// What a (resolved) object schema says of one field.
enum Field<'a> {
    /// A known field, with its schema.
    Known(&'a Value),
    /// A field the type does not have.
    Unknown,
    /// Anything goes (a free-form object, or no object schema at all).
    Unchecked,
}

fn field<'a>(s: &'a Value, k: &str) -> Field<'a> {
    let additional = s.get("additionalProperties");
    if let Some(props) = s.get("properties").and_then(|p| p.as_object()) {
        if additional.is_some_and(|a| a.is_object() || a == true) {
            return Field::Unchecked;
        }
        return props.get(k).map_or(Field::Unknown, Field::Known);
    }
    additional
        .filter(|a| a.is_object())
        .map_or(Field::Unchecked, Field::Known)
}

/// The schema of a (resolved) array schema's items.
fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

fn walk(root: &Value, v: &Value, s: &Value, path: &str, out: &mut Vec<String>) {
    let s = resolve(root, s);
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match field(s, k) {
                    Field::Known(fs) => walk(root, x, fs, &p, out),
                    Field::Unknown => out.push(p),
                    Field::Unchecked => {}
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = items(s) {
                for (i, x) in a.iter().enumerate() {
                    walk(root, x, items, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn prune_walk(root: &Value, v: &mut Value, s: &Value) {
    let s = resolve(root, s);
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !matches!(field(s, k), Field::Unknown));
            for (k, x) in m.iter_mut() {
                if let Field::Known(fs) = field(s, k) {
                    prune_walk(root, x, fs);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = items(s) {
                for x in a.iter_mut() {
                    prune_walk(root, x, items);
                }
            }
        }
        _ => {}
    }
}

/// Drops unknown fields, as decoding into the Go types does.
pub fn prune_unknown(group: &str, resource: &str, obj: &mut Value) {
    if let Some(schema) = table().get(&(group, resource)) {
        prune_walk(schema, obj, schema);
    }
}

/// Unknown fields of a built-in object (empty for kinds without a known schema).
pub fn unknown_fields(group: &str, resource: &str, obj: &Value) -> Vec<String> {
    let Some(schema) = table().get(&(group, resource)) else {
        return vec![];
    };
    let mut out = vec![];
    walk(schema, obj, schema, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_unknown_fields() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labelz": {}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "imagee": "x", "ports": [{"containerPort": 80}]}]}}}});
        assert_eq!(
            unknown_fields("apps", "deployments", &d),
            ["metadata.labelz", "spec.template.spec.containers[0].imagee"]
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "b"}}, "data": {"k": "v"}});
        assert!(unknown_fields("", "configmaps", &cm).is_empty());
    }
}
