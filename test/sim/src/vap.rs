//! ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) evaluation, as the
//! kube-apiserver's ValidatingAdmissionPolicy admission plugin does it (runs before
//! the validating webhooks).

use crate::admission::Attrs;
use crate::cel::{self, Vars};
use crate::errors::{ApiError, ApiResult};
use crate::registry::Gr;
use crate::server::{Ctx, State};
use crate::store::Key;
use serde_json::{Value, json};

fn gr(resource: &str) -> Gr {
    Gr {
        group: "admissionregistration.k8s.io".into(),
        resource: resource.into(),
    }
}

/// Matches `matchConstraints` / `matchResources` (resourceRules, excludeResourceRules,
/// namespaceSelector, objectSelector).
fn matches(state: &State, m: &Value, a: &Attrs) -> bool {
    if m.is_null() {
        return true;
    }
    let as_webhook = |rules: &Value| json!({"rules": rules, "matchPolicy": m["matchPolicy"], "namespaceSelector": m["namespaceSelector"], "objectSelector": m["objectSelector"]});
    let name = a
        .name
        .or(a.old.and_then(|o| o["metadata"]["name"].as_str()))
        .or(a.object.and_then(|o| o["metadata"]["name"].as_str()));
    // Each rule matches with its own resourceNames.
    let hit = |rules: &Value| {
        rules.as_array().into_iter().flatten().any(|r| {
            let names_ok = r["resourceNames"].as_array().is_none_or(|n| {
                n.is_empty() || n.iter().any(|x| x.as_str().is_some() && x.as_str() == name)
            });
            names_ok && crate::admission::rules_match(&as_webhook(&json!([r])), a).is_some()
        })
    };
    let include = &m["resourceRules"];
    if !include.is_null() && !hit(include) {
        return false;
    }
    let exclude = &m["excludeResourceRules"];
    if exclude.as_array().is_some_and(|e| !e.is_empty()) && hit(exclude) {
        return false;
    }
    crate::admission::selector_matches(&as_webhook(&Value::Null), state, a)
}

fn reason_code(reason: &str) -> u16 {
    match reason {
        "Unauthorized" => 401,
        "Forbidden" => 403,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

fn deny(a: &Attrs, policy: &str, binding: &str, msg: &str, reason: &str) -> ApiError {
    let message = format!(
        "ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {msg}"
    );
    let mut e = ApiError::forbidden(a.info, a.name.unwrap_or(""), &message);
    let reason = if reason.is_empty() { "Invalid" } else { reason };
    e.reason = reason.to_string();
    e.code = reason_code(reason);
    if let Some(d) = e.details.as_mut() {
        d["causes"] = json!([{"message": message}]);
    }
    e
}

fn params_for(
    state: &State,
    a: &Attrs,
    policy: &Value,
    binding: &Value,
) -> Result<Option<Value>, String> {
    let pk = &policy["spec"]["paramKind"];
    if pk.is_null() {
        return Ok(None);
    }
    let api_version = pk["apiVersion"].as_str().unwrap_or("");
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let kind = pk["kind"].as_str().unwrap_or("");
    let list = state.registry.resources(a.cluster);
    let info = list
        .iter()
        .find(|i| i.group == group && i.kind == kind && i.versions.iter().any(|v| v == version))
        .cloned()
        .ok_or_else(|| format!("failed to configure policy: failed to find resource referenced by paramKind: '{api_version}, Kind={kind}'"))?;
    let pr = &binding["spec"]["paramRef"];
    let name = pr["name"].as_str().unwrap_or("");
    let ns = if info.namespaced {
        pr["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(a.namespace)
    } else {
        ""
    };
    let found = state.store.get(
        &info.gr(),
        &Key {
            cluster: a.cluster.to_string(),
            namespace: ns.to_string(),
            name: name.to_string(),
        },
    );
    match found {
        Some(p) => Ok(Some(crate::api::typed(&info, version, &p))),
        None if pr["parameterNotFoundAction"].as_str() == Some("Allow") => Ok(Some(Value::Null)),
        None => Err("failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction".into()),
    }
}

/// The message of a failed validation: `messageExpression`'s result, unless it
/// failed, is not a string, is empty or only spaces, or contains a line break
/// (then, as kube-apiserver does, as if it were unset); else `message`; else
/// `failed expression: EXPR`.
fn failure_message(evaluated: Option<Value>, message: Option<&str>, expr: &str) -> String {
    evaluated
        .and_then(|m| m.as_str().map(str::to_string))
        .filter(|m| !m.trim().is_empty() && !m.contains(['\n', '\r']))
        .or_else(|| message.map(str::to_string))
        .unwrap_or_else(|| format!("failed expression: {expr}"))
}

/// Evaluates every ValidatingAdmissionPolicyBinding that applies to the request.
pub fn validate(state: &State, ctx: &Ctx, a: &Attrs) -> ApiResult<()> {
    let mut bindings = state
        .store
        .list(
            &gr("validatingadmissionpolicybindings"),
            Some(a.cluster),
            None,
        )
        .0;
    if bindings.is_empty() {
        return Ok(());
    }
    let request = &crate::admission::build_request(ctx, a, a.version);
    bindings.sort_by(|x, y| {
        x["metadata"]["name"]
            .as_str()
            .cmp(&y["metadata"]["name"].as_str())
    });
    let ns_info = crate::api::ns_info(state, a.cluster);
    let namespace_object = if a.info.namespaced {
        state
            .store
            .get(
                &ns_info.gr(),
                &Key {
                    cluster: a.cluster.to_string(),
                    namespace: String::new(),
                    name: a.namespace.to_string(),
                },
            )
            .map(|n| crate::api::typed(&ns_info, "v1", &n))
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    for b in bindings {
        let bname = b["metadata"]["name"].as_str().unwrap_or("");
        let pname = b["spec"]["policyName"].as_str().unwrap_or("");
        let Some(policy) = state.store.get(
            &gr("validatingadmissionpolicies"),
            &Key {
                cluster: a.cluster.to_string(),
                namespace: String::new(),
                name: pname.to_string(),
            },
        ) else {
            continue;
        };
        let spec = &policy["spec"];
        if !matches(state, &spec["matchConstraints"], a)
            || !matches(state, &b["spec"]["matchResources"], a)
        {
            continue;
        }
        let fail_closed = spec["failurePolicy"].as_str() != Some("Ignore");
        let actions: Vec<&str> = b["spec"]["validationActions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str())
            .collect();
        let params = match params_for(state, a, &policy, &b) {
            Ok(Some(Value::Null)) => continue,
            Ok(p) => p.unwrap_or(Value::Null),
            Err(e) => {
                if fail_closed && actions.contains(&"Deny") {
                    return Err(deny(a, pname, bname, &e, ""));
                }
                continue;
            }
        };
        let mut vars = Vars {
            object: request["object"].clone(),
            old_object: request["oldObject"].clone(),
            request: request.clone(),
            self_value: None,
            old_self: None,
            extra: vec![
                ("params".into(), params),
                ("namespaceObject".into(), namespace_object.clone()),
            ],
        };
        let mut variables = serde_json::Map::new();
        for v in spec["variables"].as_array().into_iter().flatten() {
            let name = v["name"].as_str().unwrap_or("").to_string();
            vars.extra.retain(|(n, _)| n != "variables");
            vars.extra
                .push(("variables".into(), Value::Object(variables.clone())));
            if let Ok(val) = cel::eval_value(v["expression"].as_str().unwrap_or(""), &vars) {
                variables.insert(name, val);
            }
        }
        vars.extra.retain(|(n, _)| n != "variables");
        vars.extra
            .push(("variables".into(), Value::Object(variables)));
        // matchConditions
        let mut skip = false;
        for mc in spec["matchConditions"].as_array().into_iter().flatten() {
            let expr = mc["expression"].as_str().unwrap_or("");
            match cel::eval_bool(expr, &vars) {
                Ok(true) => {}
                Ok(false) => skip = true,
                Err(e) => {
                    if fail_closed {
                        return Err(deny(
                            a,
                            pname,
                            bname,
                            &format!("expression '{expr}' resulted in error: {}", e.0),
                            "",
                        ));
                    }
                    skip = true;
                }
            }
        }
        if skip {
            continue;
        }
        for v in spec["validations"].as_array().into_iter().flatten() {
            let expr = v["expression"].as_str().unwrap_or("");
            let (failed, msg) = match cel::eval_bool(expr, &vars) {
                Ok(true) => continue,
                Ok(false) => {
                    let evaluated = v["messageExpression"]
                        .as_str()
                        .and_then(|me| cel::eval_value(me, &vars).ok());
                    (
                        true,
                        failure_message(evaluated, v["message"].as_str(), expr),
                    )
                }
                Err(e) => {
                    if !fail_closed {
                        continue;
                    }
                    (
                        true,
                        format!("expression '{expr}' resulted in error: {}", e.0),
                    )
                }
            };
            if !failed {
                continue;
            }
            if actions.contains(&"Warn") {
                ctx.warn(format!("Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': {msg}"));
            }
            if actions.contains(&"Deny") {
                return Err(deny(
                    a,
                    pname,
                    bname,
                    &msg,
                    v["reason"].as_str().unwrap_or(""),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_expression_results_that_kube_apiserver_drops_fall_back_to_message() {
        let m = |v: Value| failure_message(Some(v), Some("static"), "x");
        assert_eq!(m(json!("holdfast: no")), "holdfast: no");
        assert_eq!(m(json!("")), "static");
        assert_eq!(m(json!("   ")), "static");
        assert_eq!(m(json!("two\nlines")), "static");
        assert_eq!(m(json!("cr\rhere")), "static");
        assert_eq!(m(json!(42)), "static");
        assert_eq!(failure_message(None, Some("static"), "x"), "static");
        assert_eq!(
            failure_message(Some(json!("")), None, "1 == 2"),
            "failed expression: 1 == 2"
        );
    }
}
