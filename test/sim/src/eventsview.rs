//! `events.k8s.io/v1` Events are a second view of core `v1` Events: kube-apiserver
//! stores both in one place (`/events/NAMESPACE/NAME`) and converts between them
//! (`pkg/apis/events/v1/conversion.go`), so an Event written through either API is
//! read through both (`kubectl get events` lists the ones written as
//! `events.k8s.io`). The store keeps the core form; reads through `events.k8s.io`
//! convert it, writes convert to it.
//!
//! Fields that differ by name only: `regarding`/`involvedObject`, `note`/`message`,
//! `reportingController`/`reportingComponent`, `deprecatedSource`/`source`,
//! `deprecatedFirstTimestamp`/`firstTimestamp`, `deprecatedLastTimestamp`/
//! `lastTimestamp`, `deprecatedCount`/`count`. Each form serializes as its Go type
//! does: a struct or time field without `omitempty` effect (a struct is never
//! empty to encoding/json) is `{}` or `null` when unset, a plain string without
//! `omitempty` is `""`.

use crate::registry::Gr;
use serde_json::{Map, Value, json};

/// (events.k8s.io name, core name) of the fields that differ by name only.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether `gr` is the `events.k8s.io` view.
pub fn is_view(gr: &Gr) -> bool {
    gr.group == "events.k8s.io" && gr.resource == "events"
}

/// Whether `gr` is core Events (the stored form).
pub fn is_core(gr: &Gr) -> bool {
    gr.group.is_empty() && gr.resource == "events"
}

/// Where the objects of `gr` are stored.
pub fn storage(gr: &Gr) -> Gr {
    if is_view(gr) {
        Gr {
            group: String::new(),
            resource: "events".to_string(),
        }
    } else {
        gr.clone()
    }
}

fn rename(from: &Map<String, Value>, to_core: bool) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in from {
        let name = RENAMED
            .iter()
            .find_map(|(view, core)| match to_core {
                true if k == view => Some(*core),
                false if k == core => Some(*view),
                _ => None,
            })
            .unwrap_or(k.as_str());
        out.insert(name.to_string(), v.clone());
    }
    out
}

fn fill(m: &mut Map<String, Value>, defaults: &[(&str, Value)]) {
    for (k, v) in defaults {
        if m.get(*k).is_none_or(Value::is_null) {
            m.insert((*k).to_string(), v.clone());
        }
    }
}

/// A core Event as kube-apiserver serializes it (unset fields filled).
pub fn normalize_core(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        fill(
            m,
            &[
                ("involvedObject", json!({})),
                ("source", json!({})),
                ("firstTimestamp", Value::Null),
                ("lastTimestamp", Value::Null),
                ("eventTime", Value::Null),
                ("reportingComponent", json!("")),
                ("reportingInstance", json!("")),
            ],
        );
    }
}

/// `obj`'s fields under the other form's names, typed as `api_version` Event
/// (`None`: not an object).
fn converted(obj: &Value, to_core: bool, api_version: &str) -> Option<Map<String, Value>> {
    let mut out = rename(obj.as_object()?, to_core);
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Some(out)
}

/// The core form of an `events.k8s.io/v1` Event.
pub fn to_core(obj: &Value) -> Value {
    let Some(out) = converted(obj, true, "v1") else {
        return obj.clone();
    };
    let mut out = Value::Object(out);
    normalize_core(&mut out);
    out
}

/// The `events.k8s.io/v1` form of a stored (core) Event.
pub fn to_view(obj: &Value) -> Value {
    let Some(mut out) = converted(obj, false, "events.k8s.io/v1") else {
        return obj.clone();
    };
    // Empty strings the core form always carries are omitted here.
    for k in ["reportingController", "reportingInstance", "note"] {
        if out.get(k).is_some_and(|v| v == "") {
            out.remove(k);
        }
    }
    fill(
        &mut out,
        &[
            ("eventTime", Value::Null),
            ("regarding", json!({})),
            ("deprecatedSource", json!({})),
            ("deprecatedFirstTimestamp", Value::Null),
            ("deprecatedLastTimestamp", Value::Null),
        ],
    );
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_v1_event_round_trips_through_the_core_form() {
        let (when, by) = ("2026-11-23T04:00:00.000000Z", "holdfast.dev/webhook");
        let regarding = json!({"kind": "ConfigMap", "name": "c", "namespace": "default"});
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e"}, "eventTime": when, "reportingController": by,
            "reportingInstance": "w-1", "action": "Delete", "reason": "DeletionBlocked",
            "type": "Warning", "regarding": regarding, "note": "refused"});
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "eventTime": when, "reportingComponent": by, "reportingInstance": "w-1",
            "action": "Delete", "reason": "DeletionBlocked", "type": "Warning",
            "involvedObject": regarding, "message": "refused",
            "source": {}, "firstTimestamp": null, "lastTimestamp": null});
        assert_eq!(to_core(&v1), core);
        let mut back = v1.clone();
        back["deprecatedSource"] = json!({});
        back["deprecatedFirstTimestamp"] = Value::Null;
        back["deprecatedLastTimestamp"] = Value::Null;
        assert_eq!(to_view(&core), back);
    }

    #[test]
    fn a_core_event_reads_through_events_v1_with_deprecated_fields() {
        let mut core = json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "m",
            "source": {"component": "kubelet"}, "count": 3,
            "firstTimestamp": "2026-11-23T04:00:00Z", "lastTimestamp": "2026-11-23T04:01:00Z"
        });
        normalize_core(&mut core);
        assert_eq!(core["eventTime"], Value::Null);
        assert_eq!(core["reportingComponent"], "");
        let v1 = to_view(&core);
        assert_eq!(v1["deprecatedCount"], 3);
        assert_eq!(v1["deprecatedSource"], json!({"component": "kubelet"}));
        assert_eq!(v1["regarding"], json!({"kind": "Pod", "name": "p"}));
        assert_eq!(v1["note"], "m");
        assert_eq!(v1["eventTime"], Value::Null);
        assert!(v1.get("reportingController").is_none(), "{v1}");
        assert!(
            v1.get("message").is_none() && v1.get("count").is_none(),
            "{v1}"
        );
    }
}
