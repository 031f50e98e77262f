//! kube-apiserver's validation of admission rules (`rules` of webhook
//! configurations, `matchConstraints` of ValidatingAdmissionPolicies), as
//! `pkg/apis/admissionregistration/validation/validation.go` does it: the API
//! server refuses a configuration whose rule mixes `*/*` with other resources, and
//! so must the simulator (test/captures/kube-apiserver/ holds the real refusal).

use serde_json::Value;

/// One field error: (field path, reason, message).
pub type Cause = (String, String, String);

fn invalid(path: String, value: &Value, msg: &str) -> Cause {
    let shown = match value {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    };
    (
        path,
        "FieldValueInvalid".into(),
        format!("Invalid value: {shown}: {msg}"),
    )
}

fn required(path: String) -> Cause {
    (path, "FieldValueRequired".into(), "Required value".into())
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The resources of one rule (subresources allowed).
fn validate_resources(v: &Value, path: &str, causes: &mut Vec<Cause>) {
    let resources = strings(v);
    if resources.is_empty() {
        causes.push(required(path.to_string()));
    }
    let mut wildcard_sub = std::collections::HashSet::new();
    let mut wildcard_res = std::collections::HashSet::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, r) in resources.iter().enumerate() {
        if r.is_empty() {
            causes.push(required(format!("{path}[{i}]")));
            continue;
        }
        double |= *r == "*/*";
        single |= *r == "*";
        let Some((res, sub)) = r.split_once('/') else {
            plain = *r != "*";
            continue;
        };
        let value = Value::String((*r).to_string());
        if wildcard_sub.contains(res) {
            causes.push(invalid(
                format!("{path}[{i}]"),
                &value,
                &format!("if '{res}/*' is present, must not specify {r}"),
            ));
        }
        if wildcard_res.contains(sub) {
            causes.push(invalid(
                format!("{path}[{i}]"),
                &value,
                &format!("if '*/{sub}' is present, must not specify {r}"),
            ));
        }
        if sub == "*" {
            wildcard_sub.insert(res);
        }
        if res == "*" {
            wildcard_res.insert(sub);
        }
    }
    if resources.len() > 1 && double {
        causes.push(invalid(
            path.to_string(),
            v,
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        causes.push(invalid(
            path.to_string(),
            v,
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
}

/// One `RuleWithOperations` (or `NamedRuleWithOperations`) at `path`.
pub fn validate_rule(rule: &Value, path: &str, causes: &mut Vec<Cause>) {
    let ops = strings(&rule["operations"]);
    if ops.is_empty() {
        causes.push(required(format!("{path}.operations")));
    }
    if ops.len() > 1 && ops.contains(&"*") {
        causes.push(invalid(
            format!("{path}.operations"),
            &rule["operations"],
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(op) {
            causes.push((
                format!("{path}.operations[{i}]"),
                "FieldValueNotSupported".into(),
                format!(
                    "Unsupported value: \"{op}\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\""
                ),
            ));
        }
    }
    for (field, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let list = strings(&rule[field]);
        if list.is_empty() {
            causes.push(required(format!("{path}.{field}")));
        }
        if list.len() > 1 && list.contains(&"*") {
            causes.push(invalid(
                format!("{path}.{field}"),
                &rule[field],
                &format!("if '*' is present, must not specify other {what}"),
            ));
        }
        if field == "apiVersions" {
            for (i, v) in list.iter().enumerate() {
                if v.is_empty() {
                    causes.push(required(format!("{path}.apiVersions[{i}]")));
                }
            }
        }
    }
    validate_resources(&rule["resources"], &format!("{path}.resources"), causes);
    if let Some(scope) = rule["scope"].as_str()
        && !["*", "Cluster", "Namespaced"].contains(&scope)
    {
        causes.push((
            format!("{path}.scope"),
            "FieldValueNotSupported".into(),
            format!(
                "Unsupported value: \"{scope}\": supported values: \"*\", \"Cluster\", \"Namespaced\""
            ),
        ));
    }
}

/// Every rule of every webhook of a webhook configuration.
pub fn validate_webhook_rules(obj: &Value, causes: &mut Vec<Cause>) {
    for (i, wh) in obj["webhooks"].as_array().into_iter().flatten().enumerate() {
        for (j, rule) in wh["rules"].as_array().into_iter().flatten().enumerate() {
            validate_rule(rule, &format!("webhooks[{i}].rules[{j}]"), causes);
        }
    }
}

/// The resource rules of a ValidatingAdmissionPolicy's `matchConstraints`
/// (`resourceRules` required, `excludeResourceRules` optional).
pub fn validate_policy_rules(obj: &Value, causes: &mut Vec<Cause>) {
    let mc = &obj["spec"]["matchConstraints"];
    if mc.is_null() {
        causes.push(required("spec.matchConstraints".into()));
        return;
    }
    for field in ["resourceRules", "excludeResourceRules"] {
        for (j, rule) in mc[field].as_array().into_iter().flatten().enumerate() {
            validate_rule(rule, &format!("spec.matchConstraints.{field}[{j}]"), causes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(resources: Value) -> Vec<String> {
        let rule = json!({"operations": ["UPDATE"], "apiGroups": ["*"], "apiVersions": ["*"],
                          "resources": resources, "scope": "*"});
        let mut causes = vec![];
        validate_rule(&rule, "webhooks[0].rules[2]", &mut causes);
        causes
            .into_iter()
            .map(|(f, _, m)| format!("{f}: {m}"))
            .collect()
    }

    #[test]
    fn the_real_refusal_of_star_beside_star_slash_star() {
        assert_eq!(
            check(json!(["*", "*/*"])),
            [
                "webhooks[0].rules[2].resources: Invalid value: [\"*\",\"*/*\"]: if '*/*' is present, must not specify other resources"
            ]
        );
        assert!(check(json!(["*/*"])).is_empty());
        assert!(check(json!(["*", "pods/*"])).is_empty());
        assert!(check(json!(["pods", "pods/*"])).is_empty());
        assert_eq!(
            check(json!(["*", "pods"])),
            [
                "webhooks[0].rules[2].resources: Invalid value: [\"*\",\"pods\"]: if '*' is present, must not specify other resources without subresources"
            ]
        );
        assert_eq!(
            check(json!(["pods/*", "pods/status"])),
            [
                "webhooks[0].rules[2].resources[1]: Invalid value: \"pods/status\": if 'pods/*' is present, must not specify pods/status"
            ]
        );
        assert_eq!(
            check(json!([])),
            ["webhooks[0].rules[2].resources: Required value"]
        );
    }

    #[test]
    fn groups_versions_and_operations() {
        let rule = json!({"operations": ["*", "DELETE"], "apiGroups": ["*", "apps"],
                          "apiVersions": [], "resources": ["x"], "scope": "Everywhere"});
        let mut causes = vec![];
        validate_rule(&rule, "r", &mut causes);
        let fields: Vec<_> = causes.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(
            fields,
            ["r.operations", "r.apiGroups", "r.apiVersions", "r.scope"]
        );
    }
}
