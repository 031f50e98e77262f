//! Static RBAC model (from the config) plus stored RBAC objects; authorization of
//! requests and SubjectAccessReview-style reviews.

use crate::RbacRule;
use crate::api::Target;
use crate::errors::{ApiError, ApiResult};
use crate::registry::Gr;
use crate::server::{Ctx, Resp, State};
use serde_json::{Value, json};

pub struct Attributes<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub cluster: &'a str,
}

fn any(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

fn static_allows(rule: &RbacRule, a: &Attributes) -> bool {
    let who = any(&rule.users, a.user) || a.groups.iter().any(|g| any(&rule.groups, g));
    let res = if a.subresource.is_empty() {
        a.resource.to_string()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    who && any(&rule.verbs, a.verb)
        && any(&rule.api_groups, a.group)
        && (any(&rule.resources, &res)
            || (a.subresource.is_empty() && any(&rule.resources, a.resource)))
        && (rule.namespaces.is_empty() || any(&rule.namespaces, a.namespace))
        && (rule.resource_names.is_empty() || any(&rule.resource_names, a.name))
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

fn policy_rule_allows(rule: &Value, a: &Attributes) -> bool {
    let res = if a.subresource.is_empty() {
        a.resource.to_string()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let names = strs(&rule["resourceNames"]);
    any(&strs(&rule["verbs"]), a.verb)
        && any(&strs(&rule["apiGroups"]), a.group)
        && any(&strs(&rule["resources"]), &res)
        && (names.is_empty() || names.iter().any(|n| n == a.name))
}

fn subject_matches(s: &Value, a: &Attributes) -> bool {
    let name = s["name"].as_str().unwrap_or("");
    match s["kind"].as_str().unwrap_or("") {
        "User" => name == a.user,
        "Group" => a.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            format!(
                "system:serviceaccount:{}:{}",
                s["namespace"].as_str().unwrap_or(""),
                name
            ) == a.user
        }
        _ => false,
    }
}

fn rbac_gr(resource: &str) -> Gr {
    Gr {
        group: "rbac.authorization.k8s.io".into(),
        resource: resource.into(),
    }
}

/// Evaluates stored ClusterRoleBindings / RoleBindings.
fn stored_allows(state: &State, a: &Attributes) -> bool {
    let role_rules = |kind: &str, name: &str, ns: &str| -> Vec<Value> {
        let (gr, key_ns) = if kind == "ClusterRole" {
            (rbac_gr("clusterroles"), "")
        } else {
            (rbac_gr("roles"), ns)
        };
        let key = crate::store::Key {
            cluster: a.cluster.to_string(),
            namespace: key_ns.to_string(),
            name: name.to_string(),
        };
        state
            .store
            .get(&gr, &key)
            .and_then(|r| r["rules"].as_array().cloned())
            .unwrap_or_default()
    };
    let crbs = state
        .store
        .list(&rbac_gr("clusterrolebindings"), Some(a.cluster), None)
        .0;
    for b in crbs {
        if b["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| subject_matches(s, a))
        {
            let rules = role_rules(
                "ClusterRole",
                b["roleRef"]["name"].as_str().unwrap_or(""),
                "",
            );
            if rules.iter().any(|r| policy_rule_allows(r, a)) {
                return true;
            }
        }
    }
    if a.namespace.is_empty() {
        return false;
    }
    let rbs = state
        .store
        .list(&rbac_gr("rolebindings"), Some(a.cluster), Some(a.namespace))
        .0;
    for b in rbs {
        if b["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| subject_matches(s, a))
        {
            let rules = role_rules(
                b["roleRef"]["kind"].as_str().unwrap_or("Role"),
                b["roleRef"]["name"].as_str().unwrap_or(""),
                a.namespace,
            );
            if rules.iter().any(|r| policy_rule_allows(r, a)) {
                return true;
            }
        }
    }
    false
}

pub fn allowed(state: &State, a: &Attributes) -> bool {
    if a.groups.iter().any(|g| g == "system:masters") {
        return true;
    }
    state.cfg.rbac.iter().any(|r| static_allows(r, a)) || stored_allows(state, a)
}

pub fn authorize_request(state: &State, ctx: &Ctx, verb: &str, t: &Target) -> ApiResult<()> {
    if !state.cfg.authorize || ctx.user.is_master() {
        return Ok(());
    }
    // Anyone may create reviews about themselves.
    if t.info.group == "authorization.k8s.io" && t.info.resource.starts_with("selfsubject") {
        return Ok(());
    }
    let ns = t.namespace.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let a = Attributes {
        user: &ctx.user.name,
        groups: &ctx.user.groups,
        verb,
        group: &t.info.group,
        resource: &t.info.resource,
        subresource: t.sub.as_deref().unwrap_or(""),
        namespace: &ns,
        name: &name,
        cluster: ctx.cluster.key().unwrap_or(""),
    };
    if allowed(state, &a) {
        return Ok(());
    }
    let res = if a.subresource.is_empty() {
        a.resource.to_string()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let scope = if ns.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{ns}\"")
    };
    let err = format!(
        "User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {}",
        ctx.user.name, verb, res, t.info.group, scope
    );
    Err(ApiError::forbidden(&t.info, &name, &err))
}

/// POST of SubjectAccessReview / SelfSubjectAccessReview / LocalSubjectAccessReview
/// (and TokenReview) objects.
pub async fn review(
    state: &State,
    ctx: &Ctx,
    t: &crate::api::Target,
    mut obj: Value,
) -> ApiResult<Resp> {
    let res = t.info.resource.as_str();
    if res == "tokenreviews" {
        let token = obj["spec"]["token"].as_str().unwrap_or("");
        obj["status"] = match state.tokens.get(token) {
            Some(u) => {
                let mut groups = u.groups.clone();
                groups.push("system:authenticated".into());
                json!({"authenticated": true, "user": {"username": u.name, "uid": crate::user_uid(&u.name), "groups": groups}})
            }
            None => json!({"authenticated": false}),
        };
        return Ok(Resp::Json(201, obj));
    }
    if res == "selfsubjectrulesreviews" {
        obj["status"] = json!({"resourceRules": [], "nonResourceRules": [], "incomplete": true});
        return Ok(Resp::Json(201, obj));
    }
    if res == "selfsubjectreviews" {
        obj["status"] = json!({"userInfo": ctx.user.to_json()});
        return Ok(Resp::Json(201, obj));
    }
    let spec = obj["spec"].clone();
    let (user, groups) = if res.starts_with("selfsubject") {
        (ctx.user.name.clone(), ctx.user.groups.clone())
    } else {
        (
            spec["user"].as_str().unwrap_or("").to_string(),
            strs(&spec["groups"]),
        )
    };
    if user.is_empty() && groups.is_empty() && !res.starts_with("selfsubject") {
        return Err(ApiError::invalid(
            &t.info,
            "",
            vec![(
                "spec.user".into(),
                "FieldValueInvalid".into(),
                "Invalid value: \"\": at least one of user or group must be specified".into(),
            )],
        ));
    }
    let ra = &spec["resourceAttributes"];
    let mut ns = ra["namespace"].as_str().unwrap_or("").to_string();
    if res == "localsubjectaccessreviews" {
        ns = t.namespace.clone().unwrap_or_default();
    }
    let a = Attributes {
        user: &user,
        groups: &groups,
        verb: ra["verb"].as_str().unwrap_or(""),
        group: ra["group"].as_str().unwrap_or(""),
        resource: ra["resource"].as_str().unwrap_or(""),
        subresource: ra["subresource"].as_str().unwrap_or(""),
        namespace: &ns,
        name: ra["name"].as_str().unwrap_or(""),
        cluster: ctx.cluster.key().unwrap_or(""),
    };
    let ok = if ra.is_object() {
        allowed(state, &a)
    } else {
        groups.iter().any(|g| g == "system:masters")
    };
    let mut status = json!({"allowed": ok});
    if ok {
        status["reason"] = json!(if groups.iter().any(|g| g == "system:masters") {
            "allowed by system:masters group".to_string()
        } else {
            "allowed by holdfast-sim RBAC model".to_string()
        });
    }
    obj["status"] = status;
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["apiVersion"] = json!(t.info.api_version(&t.version));
    obj["kind"] = json!(t.info.kind);
    Ok(Resp::Json(201, obj))
}
