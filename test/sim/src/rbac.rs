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

impl<'a> Attributes<'a> {
    /// `user`'s request on the cluster-scoped `resource` (`group`, `subresource`)
    /// object `name` in logical cluster `cluster`.
    pub fn cluster_scoped(
        user: &'a crate::server::UserInfo,
        cluster: &'a str,
        verb: &'a str,
        (group, resource, subresource): (&'a str, &'a str, &'a str),
        name: &'a str,
    ) -> Self {
        Attributes {
            user: &user.name,
            groups: &user.groups,
            verb,
            group,
            resource,
            subresource,
            namespace: "",
            name,
            cluster,
        }
    }
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

pub(crate) fn strs(v: &Value) -> Vec<String> {
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
    let resources = strs(&rule["resources"]);
    // ResourceMatches: `*`, the resource (with its subresource), or `*/<subresource>`.
    let resource_ok = any(&resources, &res)
        || (!a.subresource.is_empty()
            && resources
                .iter()
                .any(|r| *r == format!("*/{}", a.subresource)));
    any(&strs(&rule["verbs"]), a.verb)
        && any(&strs(&rule["apiGroups"]), a.group)
        && resource_ok
        && (names.is_empty() || names.iter().any(|n| n == a.name))
}

/// NonResourceURLMatches: `*`, the path, or a prefix ending in `*`.
fn url_matches(pattern: &str, path: &str) -> bool {
    pattern == "*"
        || pattern == path
        || pattern
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

fn non_resource_rule_allows(rule: &Value, verb: &str, path: &str) -> bool {
    any(&strs(&rule["verbs"]), verb)
        && strs(&rule["nonResourceURLs"])
            .iter()
            .any(|u| url_matches(u, path))
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

/// Whether binding `b` names the requester among its subjects.
fn binds(b: &Value, a: &Attributes) -> bool {
    b["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| subject_matches(s, a))
}

fn rbac_gr(resource: &str) -> Gr {
    Gr {
        group: "rbac.authorization.k8s.io".into(),
        resource: resource.into(),
    }
}

/// The rules of the Role (in `ns`) or ClusterRole `name` stored in `cluster` (none
/// when it does not exist).
fn role_rules(state: &State, cluster: &str, kind: &str, name: &str, ns: &str) -> Vec<Value> {
    let (gr, key_ns) = if kind == "ClusterRole" {
        (rbac_gr("clusterroles"), "")
    } else {
        (rbac_gr("roles"), ns)
    };
    let key = crate::store::Key {
        cluster: cluster.to_string(),
        namespace: key_ns.to_string(),
        name: name.to_string(),
    };
    match state.store.get(&gr, &key) {
        Some(r) => r["rules"].as_array().cloned().unwrap_or_default(),
        None if kind == "ClusterRole" && !cluster.is_empty() => {
            crate::authz::predefined_cluster_role(name).unwrap_or_default()
        }
        None => Vec::new(),
    }
}

/// Evaluates stored ClusterRoleBindings / RoleBindings.
fn stored_allows(state: &State, a: &Attributes) -> bool {
    stored_grants(state, a, &|r| policy_rule_allows(r, a))
}

/// Whether a ClusterRoleBinding, or a RoleBinding of `a.namespace`, of `a.cluster`
/// names the requester and binds a role with a rule `rule_ok` accepts.
fn stored_grants(state: &State, a: &Attributes, rule_ok: &dyn Fn(&Value) -> bool) -> bool {
    // A binding grants when it names the user and its role's rules allow.
    let grants = |b: &Value, kind: &str, ns: &str| {
        binds(b, a)
            && role_rules(
                state,
                a.cluster,
                kind,
                b["roleRef"]["name"].as_str().unwrap_or(""),
                ns,
            )
            .iter()
            .any(rule_ok)
    };
    let crbs = state
        .store
        .list(&rbac_gr("clusterrolebindings"), Some(a.cluster), None)
        .0;
    if crbs.iter().any(|b| grants(b, "ClusterRole", "")) {
        return true;
    }
    if a.namespace.is_empty() {
        return false;
    }
    let rbs = state
        .store
        .list(&rbac_gr("rolebindings"), Some(a.cluster), Some(a.namespace))
        .0;
    rbs.iter().any(|b| {
        let kind = b["roleRef"]["kind"].as_str().unwrap_or("Role");
        grants(b, kind, a.namespace)
    })
}

pub fn allowed(state: &State, a: &Attributes) -> bool {
    if a.groups.iter().any(|g| g == "system:masters") {
        return true;
    }
    // kcp's bootstrap policy binds `system:kcp:admin` to cluster-admin in every
    // workspace (docs/kcp-facts.md 28).
    if !a.cluster.is_empty()
        && a.groups
            .iter()
            .any(|g| g == crate::warrant::KCP_ADMIN_GROUP)
    {
        return true;
    }
    state.cfg.rbac.iter().any(|r| static_allows(r, a)) || stored_allows(state, a)
}

/// Whether `verb` on the non-resource path `path` is allowed in `cluster`: only
/// ClusterRoles bound by ClusterRoleBindings grant non-resource URLs.
pub fn non_resource_allowed(
    state: &State,
    user: &str,
    groups: &[String],
    cluster: &str,
    verb: &str,
    path: &str,
) -> bool {
    if groups.iter().any(|g| g == "system:masters") {
        return true;
    }
    let a = Attributes {
        user,
        groups,
        verb,
        group: "",
        resource: "",
        subresource: "",
        namespace: "",
        name: "",
        cluster,
    };
    stored_grants(state, &a, &|r| non_resource_rule_allows(r, verb, path))
}

pub fn authorize_request(state: &State, ctx: &Ctx, verb: &str, t: &Target) -> ApiResult<()> {
    if !state.cfg.authorize || ctx.user.is_master() {
        return Ok(());
    }
    // Anyone may create reviews about themselves (system:basic-user, bound to
    // system:authenticated: selfsubjectaccessreviews, selfsubjectrulesreviews and,
    // since 1.28, selfsubjectreviews).
    if (t.info.group == "authorization.k8s.io" && t.info.resource.starts_with("selfsubject"))
        || (t.info.group == "authentication.k8s.io" && t.info.resource == "selfsubjectreviews")
    {
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
    Err(forbidden(ctx, verb, t, None))
}

/// kube-apiserver's refusal of a resource request (`responsewriters.Forbidden`),
/// with the authorizer's reason appended when there is one.
pub fn forbidden(ctx: &Ctx, verb: &str, t: &Target, reason: Option<&str>) -> ApiError {
    let ns = t.namespace.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let res = match t.sub.as_deref() {
        None | Some("") => t.info.resource.clone(),
        Some(sub) => format!("{}/{}", t.info.resource, sub),
    };
    let scope = if ns.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{ns}\"")
    };
    let mut err = format!(
        "User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {}",
        ctx.user.name, verb, res, t.info.group, scope
    );
    if let Some(reason) = reason {
        err = format!("{err}: {reason}");
    }
    ApiError::forbidden(&t.info, &name, &err)
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
                json!({"authenticated": true, "user": {"username": u.name, "uid": u.effective_uid(), "groups": groups}})
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
    let nra = &spec["nonResourceAttributes"];
    // kcp's authorizers try the user and each of its warrants (`spec.extra`);
    // a service account of the workspace itself needs no `access` there
    // (docs/kcp-facts.md 28).
    let extra = if res.starts_with("selfsubject") {
        json!(ctx.user.extra)
    } else {
        spec["extra"].clone()
    };
    let users = if a.cluster.is_empty() {
        vec![crate::warrant::Effective {
            name: user.clone(),
            groups: groups.clone(),
            local_service_account: false,
        }]
    } else {
        crate::warrant::effective_users(&user, &groups, &extra, a.cluster)
    };
    let ok = users.iter().any(|u| {
        let a = Attributes {
            user: &u.name,
            groups: &u.groups,
            ..a
        };
        let masters = u.groups.iter().any(|g| g == "system:masters");
        let ok = if ra.is_object() {
            allowed(state, &a)
        } else if nra.is_object() {
            non_resource_allowed(
                state,
                &u.name,
                &u.groups,
                a.cluster,
                nra["verb"].as_str().unwrap_or(""),
                nra["path"].as_str().unwrap_or(""),
            )
        } else {
            masters
        };
        // Inside a kcp workspace the reviewed user must also be able to enter it.
        ok && (masters
            || a.cluster.is_empty()
            || u.local_service_account
            || crate::authz::has_access(state, &u.name, &u.groups, a.cluster))
    });
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

// ---------------------------------------------------------------------------
// Escalation prevention (as kube-apiserver's RBAC storage does it)
// ---------------------------------------------------------------------------

/// One atom of a broken-down policy rule (`BreakdownRule`): a single group,
/// resource, verb and at most one resource name, or a non-resource URL and verb.
#[derive(Clone, Debug, PartialEq)]
struct Atom {
    group: Option<String>,
    resource: Option<String>,
    name: Option<String>,
    url: Option<String>,
    verb: String,
}

fn breakdown(rule: &Value) -> Vec<Atom> {
    let mut out = Vec::new();
    let verbs = strs(&rule["verbs"]);
    let names = strs(&rule["resourceNames"]);
    for group in strs(&rule["apiGroups"]) {
        for resource in strs(&rule["resources"]) {
            for verb in &verbs {
                if names.is_empty() {
                    out.push(Atom {
                        group: Some(group.clone()),
                        resource: Some(resource.clone()),
                        name: None,
                        url: None,
                        verb: verb.clone(),
                    });
                } else {
                    for n in &names {
                        out.push(Atom {
                            group: Some(group.clone()),
                            resource: Some(resource.clone()),
                            name: Some(n.clone()),
                            url: None,
                            verb: verb.clone(),
                        });
                    }
                }
            }
        }
    }
    for url in strs(&rule["nonResourceURLs"]) {
        for verb in &verbs {
            out.push(Atom {
                group: None,
                resource: None,
                name: None,
                url: Some(url.clone()),
                verb: verb.clone(),
            });
        }
    }
    out
}

/// Whether `owner` (a stored policy rule) covers `atom` (`ruleCovers`).
fn rule_covers(owner: &Value, atom: &Atom) -> bool {
    if !any(&strs(&owner["verbs"]), &atom.verb) {
        return false;
    }
    if let Some(url) = &atom.url {
        return strs(&owner["nonResourceURLs"])
            .iter()
            .any(|u| url_matches(u, url));
    }
    let (Some(group), Some(resource)) = (&atom.group, &atom.resource) else {
        return false;
    };
    if !any(&strs(&owner["apiGroups"]), group) {
        return false;
    }
    let resources = strs(&owner["resources"]);
    let resource_ok = any(&resources, resource)
        || resource
            .split_once('/')
            .is_some_and(|(_, sub)| resources.iter().any(|r| *r == format!("*/{sub}")));
    if !resource_ok {
        return false;
    }
    let names = strs(&owner["resourceNames"]);
    names.is_empty() || atom.name.as_ref().is_some_and(|n| names.contains(n))
}

/// Every stored rule bound to the requester in `cluster` (cluster-wide, plus the
/// RoleBindings of `namespace`): what `RulesFor` resolves.
fn owner_rules(state: &State, ctx: &Ctx, cluster: &str, namespace: &str) -> Vec<Value> {
    let a = Attributes {
        namespace,
        ..Attributes::cluster_scoped(&ctx.user, cluster, "", ("", "", ""), "")
    };
    let mut out = Vec::new();
    for b in state
        .store
        .list(&rbac_gr("clusterrolebindings"), Some(cluster), None)
        .0
    {
        if binds(&b, &a) {
            out.extend(role_rules(
                state,
                cluster,
                "ClusterRole",
                b["roleRef"]["name"].as_str().unwrap_or(""),
                "",
            ));
        }
    }
    if !namespace.is_empty() {
        for b in state
            .store
            .list(&rbac_gr("rolebindings"), Some(cluster), Some(namespace))
            .0
        {
            if binds(&b, &a) {
                out.extend(role_rules(
                    state,
                    cluster,
                    b["roleRef"]["kind"].as_str().unwrap_or("Role"),
                    b["roleRef"]["name"].as_str().unwrap_or(""),
                    namespace,
                ));
            }
        }
    }
    out
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let quoted: Vec<String> = list
        .iter()
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .collect();
    format!("[{}]", quoted.join(" "))
}

/// `CompactString` of a rule made of atoms sharing everything but their verbs.
fn compact_string(
    group: &Option<String>,
    resource: &Option<String>,
    name: &Option<String>,
    url: &Option<String>,
    verbs: &[String],
) -> String {
    let mut parts = Vec::new();
    let one = |v: &Option<String>| v.iter().cloned().collect::<Vec<_>>();
    if group.is_some() {
        parts.push(format!("APIGroups:{}", go_quoted(&one(group))));
    }
    if resource.is_some() {
        parts.push(format!("Resources:{}", go_quoted(&one(resource))));
    }
    if url.is_some() {
        parts.push(format!("NonResourceURLs:{}", go_quoted(&one(url))));
    }
    if name.is_some() {
        parts.push(format!("ResourceNames:{}", go_quoted(&one(name))));
    }
    if !verbs.is_empty() {
        parts.push(format!("Verbs:{}", go_quoted(verbs)));
    }
    format!("{{{}}}", parts.join(", "))
}

/// `ConfirmNoEscalation`: the requester must hold every rule it grants. The
/// error text is kube-apiserver's (`CompactRules` of the missing atoms, sorted).
fn confirm_no_escalation(
    state: &State,
    ctx: &Ctx,
    cluster: &str,
    namespace: &str,
    rules: &[Value],
) -> Result<(), String> {
    let owner = owner_rules(state, ctx, cluster, namespace);
    let missing: Vec<Atom> = rules
        .iter()
        .flat_map(breakdown)
        .filter(|atom| !owner.iter().any(|o| rule_covers(o, atom)))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    // CompactRules: simple resource atoms (one group, one resource, at most one
    // name) differing only by verb merge; non-resource atoms stay apart.
    let mut simple: Vec<(Atom, Vec<String>)> = Vec::new();
    let mut lines = std::collections::BTreeSet::new();
    for atom in missing {
        if atom.url.is_some() {
            lines.insert(compact_string(
                &None,
                &None,
                &None,
                &atom.url,
                std::slice::from_ref(&atom.verb),
            ));
            continue;
        }
        match simple.iter_mut().find(|(a, _)| {
            a.group == atom.group && a.resource == atom.resource && a.name == atom.name
        }) {
            Some((_, verbs)) => verbs.push(atom.verb.clone()),
            None => {
                let verb = atom.verb.clone();
                simple.push((atom, vec![verb]));
            }
        }
    }
    for (a, verbs) in &simple {
        lines.insert(compact_string(&a.group, &a.resource, &a.name, &None, verbs));
    }
    Err(format!(
        "user \"{}\" (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        ctx.user.name,
        go_quoted(&ctx.user.groups),
        lines.into_iter().collect::<Vec<_>>().join("\n")
    ))
}

/// `IsOnlyMutatingGCFields`: the update changes nothing but owner references and
/// finalizers (and what the server sets itself).
fn only_gc_fields(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            for f in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
                "generation",
                "creationTimestamp",
                "uid",
            ] {
                m.remove(f);
            }
        }
        v
    };
    strip(old) == strip(new)
}

/// The escalation checks of the RBAC storage on a create or update of a Role,
/// ClusterRole, RoleBinding or ClusterRoleBinding: granting rules needs holding
/// them, or `escalate` on the role (`bind` on the role for a binding);
/// system:masters may do anything. An aggregationRule needs full authority.
#[allow(clippy::too_many_arguments)]
pub fn check_escalation(
    state: &State,
    ctx: &Ctx,
    info: &crate::registry::ResourceInfo,
    cluster: &str,
    namespace: &str,
    name: &str,
    new: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    if info.group != "rbac.authorization.k8s.io" || !state.cfg.authorize || ctx.user.is_master() {
        return Ok(());
    }
    if old.is_some_and(|o| only_gc_fields(o, new)) {
        return Ok(());
    }
    let may = |verb: &str, resource: &str, target: &str| {
        allowed(
            state,
            &Attributes {
                user: &ctx.user.name,
                groups: &ctx.user.groups,
                verb,
                group: "rbac.authorization.k8s.io",
                resource,
                subresource: "",
                namespace,
                name: target,
                cluster,
            },
        )
    };
    match info.resource.as_str() {
        "clusterroles" | "roles" => {
            if may("escalate", &info.resource, name) {
                return Ok(());
            }
            let rules = new["rules"].as_array().cloned().unwrap_or_default();
            confirm_no_escalation(state, ctx, cluster, namespace, &rules)
                .map_err(|msg| ApiError::forbidden(info, name, &msg))?;
            let aggregates = |v: &Value| v["aggregationRule"].is_object();
            if info.resource == "clusterroles" && (aggregates(new) || old.is_some_and(aggregates)) {
                let full = [
                    json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
                    json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
                ];
                if confirm_no_escalation(state, ctx, cluster, namespace, &full).is_err() {
                    return Err(ApiError::forbidden(
                        info,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
            }
            Ok(())
        }
        "clusterrolebindings" | "rolebindings" => {
            let kind = new["roleRef"]["kind"].as_str().unwrap_or("");
            let role = new["roleRef"]["name"].as_str().unwrap_or("");
            let (role_resource, role_ns) = if kind == "ClusterRole" {
                ("clusterroles", "")
            } else {
                ("roles", namespace)
            };
            if may("bind", role_resource, role) {
                return Ok(());
            }
            let key = crate::store::Key {
                cluster: cluster.to_string(),
                namespace: role_ns.to_string(),
                name: role.to_string(),
            };
            // kcp's pre-defined ClusterRoles are there in every logical cluster.
            let predefined = (kind == "ClusterRole" && !cluster.is_empty())
                .then(|| crate::authz::predefined_cluster_role(role))
                .flatten();
            let rules = match (state.store.get(&rbac_gr(role_resource), &key), predefined) {
                (Some(stored), _) => stored["rules"].as_array().cloned().unwrap_or_default(),
                (None, Some(rules)) => rules,
                (None, None) => {
                    let role_info = crate::registry::ResourceInfo {
                        group: "rbac.authorization.k8s.io".into(),
                        resource: role_resource.into(),
                        ..info.clone()
                    };
                    return Err(ApiError::not_found(&role_info, role));
                }
            };
            confirm_no_escalation(state, ctx, cluster, namespace, &rules)
                .map_err(|msg| ApiError::forbidden(info, name, &msg))
        }
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// ClusterRole aggregation (kube-controller-manager's clusterrole-aggregation)
// ---------------------------------------------------------------------------

/// The rules each aggregated ClusterRole of `cluster` should carry and does not:
/// the union (first occurrence kept) of the rules of every other ClusterRole its
/// `clusterRoleSelectors` match, selector by selector, roles by name.
pub fn aggregation_updates(state: &State, cluster: &str) -> Vec<(String, Vec<Value>)> {
    let mut roles = state
        .store
        .list(&rbac_gr("clusterroles"), Some(cluster), None)
        .0;
    roles.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    let mut out = Vec::new();
    for role in &roles {
        let Some(selectors) = role["aggregationRule"]["clusterRoleSelectors"].as_array() else {
            continue;
        };
        let name = role["metadata"]["name"].as_str().unwrap_or("");
        let selectors: Vec<crate::selectors::Selector> = selectors
            .iter()
            .map(crate::selectors::Selector::from_label_selector)
            .collect();
        let mut rules: Vec<Value> = Vec::new();
        for selector in &selectors {
            for other in &roles {
                if other["metadata"]["name"].as_str() == Some(name) || !selector.matches(other) {
                    continue;
                }
                for r in other["rules"].as_array().into_iter().flatten() {
                    if !rules.contains(r) {
                        rules.push(r.clone());
                    }
                }
            }
        }
        let current = role["rules"].as_array().cloned().unwrap_or_default();
        if current != rules {
            out.push((name.to_string(), rules));
        }
    }
    out
}
