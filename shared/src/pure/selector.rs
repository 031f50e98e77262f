//! Label selector matching over an object's labels, as Kubernetes evaluates it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};

/// A selector that is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector: {0}")]
pub struct SelectorError(pub String);

/// Checks a selector for validity (known operators, values where required).
pub fn validate(sel: &LabelSelector) -> Result<(), SelectorError> {
    for req in sel.match_expressions.iter().flatten() {
        let n = req.values.as_ref().map_or(0, Vec::len);
        match req.operator.as_str() {
            "In" | "NotIn" if n == 0 => {
                return Err(SelectorError(format!(
                    "{} {} needs at least one value",
                    req.key, req.operator
                )));
            }
            "Exists" | "DoesNotExist" if n > 0 => {
                return Err(SelectorError(format!(
                    "{} {} takes no values",
                    req.key, req.operator
                )));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => return Err(SelectorError(format!("unknown operator {other:?}"))),
        }
    }
    Ok(())
}

/// Whether `labels` satisfy `sel` (an empty selector matches everything; an invalid
/// one matches nothing).
pub fn matches(sel: &LabelSelector, labels: Option<&Map<String, Value>>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    for (k, v) in sel.match_labels.iter().flatten() {
        if get(k) != Some(v.as_str()) {
            return false;
        }
    }
    for req in sel.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        let ok = match req.operator.as_str() {
            "In" => get(&req.key).is_some_and(|v| values.iter().any(|x| x == v)),
            "NotIn" => get(&req.key).is_none_or(|v| !values.iter().any(|x| x == v)),
            "Exists" => get(&req.key).is_some(),
            "DoesNotExist" => get(&req.key).is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn matching() {
        let labels = json!({"app": "db", "tier": "data"});
        let labels = labels.as_object();
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "db".to_string())].into()),
            match_expressions: Some(vec![
                req("tier", "In", &["data", "cache"]),
                req("legacy", "DoesNotExist", &[]),
                req("env", "NotIn", &["dev"]),
            ]),
        };
        assert!(matches(&sel, labels));
        let sel2 = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![
                req("app", "Exists", &[]),
                req("tier", "NotIn", &["data"]),
            ]),
        };
        assert!(!matches(&sel2, labels));
        assert!(matches(&LabelSelector::default(), None));
        assert!(!matches(&sel, None));
    }

    #[test]
    fn validation() {
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![req("a", "In", &[])]),
        };
        assert!(validate(&bad).is_err());
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![req("a", "Maybe", &[])]),
        };
        assert!(validate(&bad).is_err());
        let bad = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![req("a", "Exists", &["x"])]),
        };
        assert!(validate(&bad).is_err());
        assert!(!matches(&bad, json!({"a": "x"}).as_object()) || validate(&bad).is_err());
    }
}
