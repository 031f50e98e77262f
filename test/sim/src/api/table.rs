//! `as=Table` output: the columns kube-apiserver prints for each kind.

use super::request::meta;
use crate::registry::ResourceInfo;
use serde_json::{Value, json};
use std::sync::Arc;

pub(super) fn age(ts: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 3600 * 3 {
        format!("{}m", secs / 60)
    } else if secs < 86400 * 2 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86400)
    }
}

/// The JSONPath subset of additionalPrinterColumns: `.a.b`, `[N]`, `[?(@.k=="v")]`.
pub(super) fn json_path(obj: &Value, path: &str) -> Value {
    let mut cur = obj.clone();
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end]).cloned().unwrap_or(Value::Null);
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return Value::Null;
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let Some((k, v)) = filter.split_once("==") else {
                    return Value::Null;
                };
                let v = v.trim().trim_matches('"').trim_matches('\'');
                cur = cur
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x[k.trim()].as_str() == Some(v)).cloned())
                    .unwrap_or(Value::Null);
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.get(i).cloned().unwrap_or(Value::Null);
            } else {
                return Value::Null;
            }
        } else {
            return Value::Null;
        }
    }
    cur
}

pub(super) type Cell = fn(&Value) -> Value;

pub(super) fn n(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Extra columns (between Name and Age) kube-apiserver's table convertors print.
pub(super) fn builtin_columns(info: &ResourceInfo) -> Vec<(&'static str, Cell)> {
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "namespaces") => vec![("Status", |o| o["status"]["phase"].clone())],
        ("", "configmaps") => vec![("Data", |o| {
            json!(
                o["data"].as_object().map(|m| m.len()).unwrap_or(0)
                    + o["binaryData"].as_object().map(|m| m.len()).unwrap_or(0)
            )
        })],
        ("", "secrets") => vec![
            ("Type", |o| o["type"].clone()),
            ("Data", |o| {
                json!(o["data"].as_object().map(|m| m.len()).unwrap_or(0))
            }),
        ],
        ("", "services") => vec![
            ("Type", |o| o["spec"]["type"].clone()),
            ("Cluster-IP", |o| o["spec"]["clusterIP"].clone()),
            ("External-IP", |o| {
                let ips: Vec<String> = o["spec"]["externalIPs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect();
                json!(if ips.is_empty() {
                    "<none>".to_string()
                } else {
                    ips.join(",")
                })
            }),
            ("Port(s)", |o| {
                let ports: Vec<String> = o["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        format!(
                            "{}/{}",
                            n(&p["port"]),
                            p["protocol"].as_str().unwrap_or("TCP")
                        )
                    })
                    .collect();
                json!(if ports.is_empty() {
                    "<none>".to_string()
                } else {
                    ports.join(",")
                })
            }),
        ],
        ("apps", "deployments") => vec![
            ("Ready", |o| {
                json!(format!(
                    "{}/{}",
                    n(&o["status"]["readyReplicas"]),
                    n(&o["spec"]["replicas"])
                ))
            }),
            ("Up-to-date", |o| json!(n(&o["status"]["updatedReplicas"]))),
            ("Available", |o| json!(n(&o["status"]["availableReplicas"]))),
        ],
        ("apps", "statefulsets") => vec![("Ready", |o| {
            json!(format!(
                "{}/{}",
                n(&o["status"]["readyReplicas"]),
                n(&o["spec"]["replicas"])
            ))
        })],
        ("", "pods") => vec![
            ("Ready", |o| {
                json!(format!(
                    "0/{}",
                    o["spec"]["containers"]
                        .as_array()
                        .map(|c| c.len())
                        .unwrap_or(0)
                ))
            }),
            ("Status", |o| {
                json!(o["status"]["phase"].as_str().unwrap_or("Pending"))
            }),
            ("Restarts", |_| json!(0)),
        ],
        ("", "serviceaccounts") => vec![("Secrets", |o| {
            json!(o["secrets"].as_array().map(|a| a.len()).unwrap_or(0))
        })],
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            vec![("Webhooks", |o| {
                json!(o["webhooks"].as_array().map(|a| a.len()).unwrap_or(0))
            })]
        }
        ("tenancy.kcp.io", "workspaces") => vec![
            ("Type", |o| o["spec"]["type"]["name"].clone()),
            ("Region", |o| o["metadata"]["labels"]["region"].clone()),
            ("Phase", |o| o["status"]["phase"].clone()),
            ("URL", |o| o["spec"]["URL"].clone()),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![("Holder", |o| o["spec"]["holderIdentity"].clone())]
        }
        _ => vec![],
    }
}

/// `(name, type, priority)` of kube-apiserver's Event columns (`printers` package:
/// the server generates the wide table, kubectl hides priority 1 without `-o wide`).
const EVENT_COLUMNS: [(&str, &str, u8); 10] = [
    ("Last Seen", "string", 0),
    ("Type", "string", 0),
    ("Reason", "string", 0),
    ("Object", "string", 0),
    ("Subobject", "string", 1),
    ("Source", "string", 1),
    ("Message", "string", 0),
    ("First Seen", "string", 1),
    ("Count", "string", 1),
    ("Name", "string", 1),
];

/// One Event's cells, from its core form, as kube-apiserver's `printEvent` makes them.
fn event_cells(o: &Value) -> Vec<Value> {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let set = |v: &Value| v.as_str().is_some_and(|t| !t.is_empty());
    let first = if set(&o["firstTimestamp"]) {
        age(&text(&o["firstTimestamp"]))
    } else {
        age(&text(&o["eventTime"]))
    };
    let mut last = if set(&o["lastTimestamp"]) {
        age(&text(&o["lastTimestamp"]))
    } else {
        first.clone()
    };
    let mut count = o["count"].as_i64().unwrap_or(0);
    if o["series"].is_object() {
        last = age(&text(&o["series"]["lastObservedTime"]));
        count = o["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = &o["involvedObject"];
    let kind = text(&involved["kind"]).to_lowercase();
    let target = match involved["name"].as_str() {
        Some(name) if !name.is_empty() => format!("{kind}/{name}"),
        _ => kind,
    };
    let or = |a: &Value, b: &Value| if set(a) { text(a) } else { text(b) };
    let component = or(&o["source"]["component"], &o["reportingComponent"]);
    let instance = or(&o["source"]["host"], &o["reportingInstance"]);
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        o["type"].clone(),
        o["reason"].clone(),
        json!(target),
        json!(text(&involved["fieldPath"])),
        json!(source),
        json!(text(&o["message"]).trim()),
        json!(first),
        json!(count),
        json!(meta(o, "name")),
    ]
}

/// A Table row: its cells and the object's metadata (without managedFields).
fn row(cells: Vec<Value>, o: &Value) -> Value {
    let mut pm = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"].clone()});
    if let Some(m) = pm["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    json!({"cells": cells, "object": pm})
}

/// The Table of Events (core or `events.k8s.io`, both printed from the core form).
fn event_table(info: &ResourceInfo, items: &[Arc<Value>], md: Value) -> Value {
    let cols: Vec<Value> = EVENT_COLUMNS
        .iter()
        .map(|(name, ty, priority)| json!({"name": name, "type": ty, "format": "", "description": "", "priority": priority}))
        .collect();
    let view = crate::eventsview::is_view(&info.gr());
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let cells = if view {
                event_cells(&crate::eventsview::to_core(o))
            } else {
                event_cells(o)
            };
            row(cells, o)
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md, "columnDefinitions": cols, "rows": rows})
}

pub(super) fn table(info: &ResourceInfo, items: &[Arc<Value>], md: Value) -> Value {
    let gr = info.gr();
    if crate::eventsview::is_core(&gr) || crate::eventsview::is_view(&gr) {
        return event_table(info, items, md);
    }
    let crd_table =
        info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions";
    let mut cols = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    for (n, _, ty) in &info.printer_columns {
        cols.push(json!({"name": n, "type": ty, "format": "", "description": "", "priority": 0}));
    }
    let extra = builtin_columns(info);
    for (name, _) in &extra {
        cols.push(
            json!({"name": name, "type": "string", "format": "", "description": "", "priority": 0}),
        );
    }
    if crd_table {
        cols.push(json!({"name": "Created At", "type": "date", "format": "", "description": "", "priority": 0}));
    } else if info.printer_columns.is_empty() {
        cols.push(json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp", "priority": 0}));
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut cells = vec![json!(meta(o, "name"))];
            for (_, p, ty) in &info.printer_columns {
                let v = json_path(o, p);
                cells.push(match (&v, ty.as_str()) {
                    (Value::Null, _) => json!("<none>"),
                    (Value::String(ts), "date") => json!(age(ts)),
                    _ => v,
                });
            }
            for (_, f) in &extra {
                let v = f(o);
                cells.push(if v.is_null() { json!("<none>") } else { v });
            }
            if crd_table {
                cells.push(json!(meta(o, "creationTimestamp")));
            } else if info.printer_columns.is_empty() {
                cells.push(json!(age(meta(o, "creationTimestamp"))));
            }
            row(cells, o)
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md, "columnDefinitions": cols, "rows": rows})
}
