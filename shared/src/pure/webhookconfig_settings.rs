//! The settings the controller publishes on its configuration, and reading an
//! installed configuration back: its description, its routes, whether it is the one
//! desired.

use super::*;
use crate::labels::ProtectionLabel;
use serde::{Deserialize, Serialize};

/// Annotation on the configuration `holdfast` (Kubernetes and Karmada) recording
/// the settings the controller installed it for, which the webhook must share: a
/// [`PublishedSettings`], `{"protectionLabels":["KEY=V1,V2",...],"strict":BOOL}`
/// (labels sorted by key, values sorted). The webhook refuses to run while its own
/// settings differ; the kubectl plugin judges with them.
pub const SETTINGS_ANNOTATION: &str = "holdfast.dev/settings";

/// The settings the controller publishes in [`SETTINGS_ANNOTATION`], as written
/// there (fields in this order on the wire).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishedSettings {
    /// The protection labels, each `KEY=V1,V2`: sorted by key, values sorted and
    /// without repeats.
    pub protection_labels: Vec<String>,
    /// Whether the controller runs strict (`HOLDFAST_STRICT`).
    pub strict: bool,
}

impl PublishedSettings {
    /// The settings for `labels` and `strict`, labels in their canonical form.
    pub fn for_settings(labels: &ProtectionLabels, strict: bool) -> Self {
        let mut protection_labels: Vec<String> = labels
            .iter()
            .map(|l| {
                let mut values = l.values.clone();
                values.sort();
                values.dedup();
                format!("{}={}", l.key, values.join(","))
            })
            .collect();
        protection_labels.sort();
        Self {
            protection_labels,
            strict,
        }
    }

    /// The value of [`SETTINGS_ANNOTATION`].
    pub fn to_annotation(&self) -> String {
        // Strings and a boolean: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the value of [`SETTINGS_ANNOTATION`]; the error says what is wrong
    /// with it (that it does not parse, or which field is missing or mistyped).
    pub fn parse(annotation: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(annotation)
            .map_err(|e| format!("{SETTINGS_ANNOTATION} {annotation:?} does not parse: {e}"))?;
        match Self::deserialize(&value) {
            Ok(settings) if value.is_object() => Ok(settings),
            _ => Err(wrong_fields(&value)),
        }
    }

    /// The protection labels, parsed.
    pub fn labels(&self) -> Result<ProtectionLabels, String> {
        let labels = self
            .protection_labels
            .iter()
            .map(|l| l.parse::<ProtectionLabel>().map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ProtectionLabels::with_extra(labels))
    }
}

/// Which fields of an annotation `value` that is JSON but no [`PublishedSettings`]
/// are missing or mistyped.
fn wrong_fields(value: &Value) -> String {
    let mut problems = Vec::new();
    if !value["strict"].is_boolean() {
        problems.push(format!("{SETTINGS_ANNOTATION} has no boolean \"strict\""));
    }
    if !value["protectionLabels"]
        .as_array()
        .is_some_and(|a| a.iter().all(Value::is_string))
    {
        problems.push(format!(
            "{SETTINGS_ANNOTATION} has no list of strings \"protectionLabels\""
        ));
    }
    problems.join("; ")
}

/// The value of [`SETTINGS_ANNOTATION`] for `labels` and `strict`.
pub fn settings_annotation(labels: &ProtectionLabels, strict: bool) -> String {
    PublishedSettings::for_settings(labels, strict).to_annotation()
}

/// Why the webhook's settings (`labels`, `strict`) differ from those recorded in
/// the configuration's [`SETTINGS_ANNOTATION`] (`annotation`), or `None` when they
/// agree. An annotation that does not parse, or lacks a field, is a disagreement too.
pub fn settings_disagreement(
    annotation: &str,
    labels: &ProtectionLabels,
    strict: bool,
) -> Option<String> {
    let theirs = match PublishedSettings::parse(annotation) {
        Ok(theirs) => theirs,
        Err(e) => return Some(e),
    };
    let ours = PublishedSettings::for_settings(labels, strict);
    let mut problems = Vec::new();
    if theirs.strict != ours.strict {
        problems.push(format!(
            "the controller runs with strict={}, this webhook with strict={strict} (HOLDFAST_STRICT)",
            theirs.strict
        ));
    }
    if theirs.protection_labels != ours.protection_labels {
        problems.push(format!(
            "the controller protects with labels [{}], this webhook with [{}] (HOLDFAST_PROTECTION_LABELS)",
            theirs.protection_labels.join(" "),
            ours.protection_labels.join(" ")
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// A label selector in kubectl's notation (`k=v`, `k in (a,b)`, `k notin (a)`,
/// `k`, `!k`); empty: `None`.
fn selector_text(sel: Option<&LabelSelector>) -> Option<String> {
    let sel = sel?;
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in sel.match_expressions.iter().flatten() {
        let values = r.values.clone().unwrap_or_default().join(",");
        parts.push(match r.operator.as_str() {
            "In" => format!("{} in ({values})", r.key),
            "NotIn" => format!("{} notin ({values})", r.key),
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            other => format!("{} {other} ({values})", r.key),
        });
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// What a live configuration routes, one block per webhook, for people
/// (`holdfast-controller routes`): the requests, the namespaces and objects they
/// are narrowed to, the match conditions, and what an outage of the webhook does
/// to them (failurePolicy) and how long a hung webhook holds them (timeoutSeconds).
pub fn describe_configuration(cfg: &ValidatingWebhookConfiguration) -> String {
    let hooks = cfg.webhooks.as_deref().unwrap_or_default();
    let mut out = format!(
        "ValidatingWebhookConfiguration {}: {} webhook(s)\n",
        cfg.metadata.name.as_deref().unwrap_or(""),
        hooks.len()
    );
    for h in hooks {
        out.push_str(&h.name);
        out.push('\n');
        for r in h.rules.iter().flatten() {
            let ops = r.operations.clone().unwrap_or_default().join(",");
            let groups = r.api_groups.clone().unwrap_or_default();
            let resources: Vec<String> = groups
                .iter()
                .flat_map(|g| {
                    r.resources.iter().flatten().map(move |res| {
                        if g.is_empty() {
                            res.clone()
                        } else {
                            format!("{res}.{g}")
                        }
                    })
                })
                .collect();
            out.push_str(&format!("  requests:   {ops} {}\n", resources.join(" ")));
        }
        out.push_str(&format!(
            "  namespaces: {}\n",
            selector_text(h.namespace_selector.as_ref()).unwrap_or_else(|| "all".to_string())
        ));
        out.push_str(&format!(
            "  objects:    {}\n",
            selector_text(h.object_selector.as_ref()).unwrap_or_else(|| "all".to_string())
        ));
        for c in h.match_conditions.iter().flatten() {
            out.push_str(&format!("  condition:  {}: {}\n", c.name, c.expression));
        }
        let fail = h.failure_policy.as_deref().unwrap_or("Fail");
        let timeout = h.timeout_seconds.unwrap_or(10);
        out.push_str(&format!(
            "  outage:     failurePolicy {fail}: {}; a hung webhook holds each for up to {timeout}s\n",
            if fail == "Ignore" {
                "these requests are let through unchecked while the webhook cannot be reached"
            } else {
                "these requests are refused while the webhook cannot be reached"
            }
        ));
    }
    out
}

/// Appends `suffix` to the webhook's URL (or its Service path).
pub(crate) fn with_path_suffix(h: &mut ValidatingWebhook, suffix: &str) {
    if let Some(url) = h.client_config.url.as_mut() {
        *url = format!("{}{suffix}", url.trim_end_matches('/'));
    }
    if let Some(path) = h
        .client_config
        .service
        .as_mut()
        .and_then(|s| s.path.as_mut())
    {
        path.push_str(suffix);
    }
}

/// Whether `live` routes `operation` on `gr` to the webhook named `webhook`.
pub fn routes(
    live: &ValidatingWebhookConfiguration,
    webhook: &str,
    operation: &str,
    gr: &GroupResource,
) -> bool {
    let any = |list: &Option<Vec<String>>, want: &str| {
        list.as_ref()
            .is_some_and(|l| l.iter().any(|x| x == "*" || x == want))
    };
    live.webhooks.iter().flatten().any(|h| {
        h.name == webhook
            && h.rules.iter().flatten().any(|r| {
                any(&r.operations, operation)
                    && any(&r.api_groups, &gr.group)
                    && any(&r.resources, &gr.resource)
            })
    })
}

/// Whether `live` matches `desired`: every field `desired` sets has the same
/// value in `live` (fields the API server defaults may be added), lists have the
/// same length element by element, and an empty object in `desired` (such as
/// `objectSelector: {}`) must be empty or absent in `live`. Metadata is compared
/// on the name and the labels `desired` sets only.
pub fn matches_desired(
    live: &ValidatingWebhookConfiguration,
    desired: &ValidatingWebhookConfiguration,
) -> bool {
    let (Ok(l), Ok(d)) = (serde_json::to_value(live), serde_json::to_value(desired)) else {
        return false;
    };
    let name_ok = l["metadata"]["name"] == d["metadata"]["name"];
    let labels_ok = subset(&d["metadata"]["labels"], &l["metadata"]["labels"])
        && subset(&d["metadata"]["annotations"], &l["metadata"]["annotations"])
        && subset(
            &d["metadata"]["ownerReferences"],
            &l["metadata"]["ownerReferences"],
        );
    let hooks_ok = subset(
        d.get("webhooks").unwrap_or(&Value::Null),
        l.get("webhooks").unwrap_or(&Value::Null),
    );
    name_ok && labels_ok && hooks_ok
}

fn subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Null, _) => true,
        (Value::Object(w), Value::Null) => w.is_empty(),
        (Value::Object(w), Value::Object(h)) => {
            if w.is_empty() {
                return h.values().all(|v| match v {
                    Value::Null => true,
                    Value::Object(m) => m.is_empty(),
                    Value::Array(a) => a.is_empty(),
                    _ => false,
                });
            }
            w.iter()
                .all(|(k, v)| subset(v, h.get(k).unwrap_or(&Value::Null)))
                && h.iter().all(|(k, v)| {
                    w.contains_key(k) || !SELECTOR_FIELDS.contains(&k.as_str()) || v.is_null()
                })
        }
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| subset(a, b))
        }
        (w, h) => w == h,
    }
}

/// Fields the API server does not default: present in a live object but not in
/// the desired one, they are a manual edit.
const SELECTOR_FIELDS: [&str; 5] = [
    "matchExpressions",
    "matchLabels",
    "matchConditions",
    "url",
    "service",
];
