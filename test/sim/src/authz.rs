//! Authentication by static token file (kube-apiserver's `--token-auth-file`) and kcp's
//! authorization on top of the RBAC evaluation of `rbac`: workspace access (`access` on
//! the non-resource path `/` inside the workspace), kcp's pre-defined ClusterRoles, the
//! creator of a workspace as its admin, `bind` on APIExports and the APIExport virtual
//! workspace's content and binding authorizers.

use crate::api::Target;
use crate::errors::{ApiError, ApiResult};
use crate::rbac::{self, strs};
use crate::registry::{Gr, ResourceInfo};
use crate::server::{ClusterSel, Ctx, State, UserInfo, VwCtx};
use crate::store::Key;
use crate::{SimConfig, User};
use anyhow::Context;
use serde_json::{Value, json};
use std::sync::Arc;

// ---------------------------------------------------------------------------
// Static token file
// ---------------------------------------------------------------------------

/// A token file that kube-apiserver would refuse at startup.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenFileError {
    /// 1-based line of the offending record.
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for TokenFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for TokenFileError {}

fn csv_error(line: usize, message: &str) -> TokenFileError {
    TokenFileError {
        line,
        message: message.to_string(),
    }
}

/// The records of a CSV text as Go's `encoding/csv` reads them with a variable number
/// of fields: `,`-separated, `"`-quoted fields (`""` a quote, line breaks allowed
/// inside), empty lines skipped, no comment lines. Each with its first line.
fn csv_records(text: &str) -> Result<Vec<(usize, Vec<String>)>, TokenFileError> {
    let text = text.replace("\r\n", "\n");
    let chars: Vec<char> = text.chars().collect();
    let (mut i, mut line) = (0, 1);
    let mut out = Vec::new();
    while i < chars.len() {
        if chars[i] == '\n' {
            line += 1;
            i += 1;
            continue;
        }
        let first_line = line;
        let mut fields = Vec::new();
        loop {
            let mut field = String::new();
            if chars.get(i) == Some(&'"') {
                let quote_line = line;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(csv_error(
                                quote_line,
                                "extraneous or missing \" in quoted-field",
                            ));
                        }
                        Some('"') if chars.get(i + 1) == Some(&'"') => {
                            field.push('"');
                            i += 2;
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some(c) => {
                            if *c == '\n' {
                                line += 1;
                            }
                            field.push(*c);
                            i += 1;
                        }
                    }
                }
                if !matches!(chars.get(i), None | Some(',') | Some('\n')) {
                    return Err(csv_error(line, "extraneous or missing \" in quoted-field"));
                }
            } else {
                while let Some(c) = chars.get(i) {
                    if *c == ',' || *c == '\n' {
                        break;
                    }
                    if *c == '"' {
                        return Err(csv_error(line, "bare \" in non-quoted field"));
                    }
                    field.push(*c);
                    i += 1;
                }
            }
            fields.push(field);
            match chars.get(i) {
                Some(',') => i += 1,
                Some('\n') => {
                    i += 1;
                    line += 1;
                    break;
                }
                _ => break,
            }
        }
        out.push((first_line, fields));
    }
    Ok(out)
}

/// Parses kube-apiserver's static token file: one `token,user,uid[,"group1,group2"]`
/// record per line. As kube-apiserver: at least three columns (the uid may be empty),
/// groups split at `,`, records with an empty token skipped, a later duplicate token
/// wins, empty lines skipped and no comment syntax (a `#` line is a record).
pub fn parse_token_auth_file(text: &str) -> Result<Vec<User>, TokenFileError> {
    let mut users = Vec::new();
    for (line, record) in csv_records(text)? {
        if record.len() < 3 {
            return Err(TokenFileError {
                line,
                message: format!(
                    "must have at least 3 columns (token, user name, user uid), found {}",
                    record.len()
                ),
            });
        }
        if record[0].is_empty() {
            tracing::warn!(line, "empty token in the token file, record skipped");
            continue;
        }
        users.push(User {
            token: record[0].clone(),
            name: record[1].clone(),
            uid: Some(record[2].clone()),
            groups: record
                .get(3)
                .map(|g| g.split(',').map(str::to_string).collect())
                .unwrap_or_default(),
        });
    }
    Ok(users)
}

/// Adds the users of `cfg.token_auth_file` (when set) to `cfg.users`.
pub fn load_token_auth_file(cfg: &mut SimConfig) -> anyhow::Result<()> {
    let Some(path) = &cfg.token_auth_file else {
        return Ok(());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading token auth file {}", path.display()))?;
    let users = parse_token_auth_file(&text)
        .map_err(|e| anyhow::anyhow!("token auth file {}: {e}", path.display()))?;
    cfg.users.extend(users);
    Ok(())
}

// ---------------------------------------------------------------------------
// kcp's bootstrap policy
// ---------------------------------------------------------------------------

/// kcp's pre-defined ClusterRole granting `access` on `/` (workspace entry).
pub const WORKSPACE_ACCESS_ROLE: &str = "system:kcp:workspace:access";
/// The annotation kcp's workspace admission records the creator in.
const OWNER_ANNOTATION: &str = "experimental.tenancy.kcp.io/owner";

fn rbac_gr(resource: &str) -> Gr {
    Gr {
        group: "rbac.authorization.k8s.io".into(),
        resource: resource.into(),
    }
}

fn ckey(cluster: &str, name: &str) -> Key {
    Key {
        cluster: cluster.to_string(),
        namespace: String::new(),
        name: name.to_string(),
    }
}

/// The rules of a ClusterRole of kcp's bootstrap policy. kcp keeps them in its
/// `system:admin` logical cluster and merges them into every workspace's RBAC (a
/// binding anywhere may name them without a local copy).
pub fn predefined_cluster_role(name: &str) -> Option<Vec<Value>> {
    match name {
        "cluster-admin" => Some(vec![
            json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
            json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
        ]),
        WORKSPACE_ACCESS_ROLE => Some(vec![json!({"nonResourceURLs": ["/"], "verbs": ["access"]})]),
        _ => None,
    }
}

fn cluster_role_binding(name: &str, role: &str, subject: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "uid": uuid::Uuid::new_v4().to_string(),
                     "creationTimestamp": crate::now_rfc3339()},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    })
}

/// `root`'s RBAC as kcp bootstraps it: every authenticated user may enter
/// (`config/root/clusterrolebinding-access.yaml`).
pub fn bootstrap_root(state: &State, root: &str) {
    let crb = cluster_role_binding(
        "system:kcp:tenancy:authenticated:access",
        WORKSPACE_ACCESS_ROLE,
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}),
    );
    let key = ckey(root, "system:kcp:tenancy:authenticated:access");
    let _ = state
        .store
        .create(&rbac_gr("clusterrolebindings"), key, crb);
}

/// Records the creator of a Workspace (kcp's workspace admission) in its owner annotation.
fn record_owner(ctx: &Ctx, obj: &mut Value) {
    let owner = json!({"username": ctx.user.name, "uid": ctx.user.uid, "groups": ctx.user.groups});
    if !obj["metadata"]["annotations"].is_object() {
        obj["metadata"]["annotations"] = json!({});
    }
    obj["metadata"]["annotations"][OWNER_ANNOTATION] = json!(owner.to_string());
}

/// A new workspace's logical cluster: its owner (the creating user) is bound to
/// `cluster-admin` there, as kcp's workspace initialization does (ClusterRoleBinding
/// `workspace-admin`).
pub fn init_workspace(state: &State, lc: &str, workspace: &Value) {
    let owner = workspace["metadata"]["annotations"][OWNER_ANNOTATION]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    let Some(name) = owner
        .as_ref()
        .and_then(|o| o["username"].as_str())
        .filter(|n| !n.is_empty())
    else {
        return;
    };
    let crb = cluster_role_binding(
        "workspace-admin",
        "cluster-admin",
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}),
    );
    let _ = state.store.create(
        &rbac_gr("clusterrolebindings"),
        ckey(lc, "workspace-admin"),
        crb,
    );
}

// ---------------------------------------------------------------------------
// Request authorization
// ---------------------------------------------------------------------------

/// kcp's workspace content authorizer's reason for a user without `access`.
pub const NO_ACCESS: &str = "no verb=access permission on /";

/// Whether `user` may enter logical cluster `lc` (`access` on `/` there).
pub fn has_access(state: &State, user: &str, groups: &[String], lc: &str) -> bool {
    rbac::non_resource_allowed(state, user, groups, lc, "access", "/")
}

/// Whether `rest` (the path below a cluster prefix) is a resource request, which
/// is authorized once its target is known.
fn is_resource_path(rest: &str) -> bool {
    let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    matches!(
        segs.as_slice(),
        ["api", "v1", _, ..] | ["apis", _, _, _, ..]
    )
}

/// `forbidden: User "x" cannot get path "/apis": REASON` (a non-resource request).
fn forbidden_path(user: &UserInfo, verb: &str, path: &str, reason: &str) -> ApiError {
    let mut e = ApiError::new(
        403,
        "Forbidden",
        format!(
            "forbidden: User \"{}\" cannot {verb} path \"{path}\": {reason}",
            user.name
        ),
    );
    e.details = Some(json!({}));
    e
}

/// Authorizes a non-resource request (discovery, `/version`, ...) on its way in:
/// inside a kcp workspace it needs `access` there; in an APIExport virtual workspace
/// `apiexports/content` on the export. Resource requests pass here and are
/// authorized with their attributes by `authorize_resource`. `rest` is the path
/// below the cluster prefix, the path kcp authorizes (it strips `/clusters/<x>`).
pub fn authorize_path(
    state: &State,
    ctx: &Ctx,
    method: &http::Method,
    rest: &str,
) -> ApiResult<()> {
    if !enforced(state, ctx) || is_resource_path(rest) {
        return Ok(());
    }
    let verb = method.as_str().to_ascii_lowercase();
    if let Some(vw) = &ctx.vw {
        return content_allowed(state, &ctx.user, vw, &verb)
            .map_err(|reason| forbidden_path(&ctx.user, &verb, rest, &reason));
    }
    if let ClusterSel::Lc(lc) = &ctx.cluster
        && !has_access(state, &ctx.user.name, &ctx.user.groups, lc)
    {
        return Err(forbidden_path(&ctx.user, &verb, rest, NO_ACCESS));
    }
    if matches!(ctx.cluster, ClusterSel::Plain)
        && !(verb == "get" && bootstrap_non_resource(rest))
        && !crate::rbac::non_resource_allowed(
            state,
            &ctx.user.name,
            &ctx.user.groups,
            "",
            &verb,
            rest,
        )
    {
        let mut e = ApiError::new(
            403,
            "Forbidden",
            format!(
                "forbidden: User \"{}\" cannot {verb} path \"{rest}\"",
                ctx.user.name
            ),
        );
        e.details = Some(json!({}));
        return Err(e);
    }
    Ok(())
}

/// The non-resource URLs every authenticated user may get on a Kubernetes cluster:
/// the bootstrap ClusterRoles `system:discovery` and `system:public-info-viewer`,
/// bound to `system:authenticated`
/// (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`). Anything else
/// needs a ClusterRole of the cluster's RBAC granting it.
fn bootstrap_non_resource(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    matches!(
        path,
        "/healthz"
            | "/livez"
            | "/readyz"
            | "/version"
            | "/version/"
            | "/openapi"
            | "/api"
            | "/apis"
    ) || ["/openapi/", "/api/", "/apis/"]
        .iter()
        .any(|p| path.starts_with(p))
}

/// Whether authorization applies to the caller (it is on and the caller is not in
/// system:masters).
pub fn enforced(state: &State, ctx: &Ctx) -> bool {
    state.cfg.authorize && !ctx.user.is_master()
}

/// Authorizes a resource request: system:masters always; in an APIExport virtual
/// workspace the content and binding authorizers; inside a kcp workspace `access`
/// there, then its RBAC; elsewhere RBAC.
pub fn authorize_resource(state: &State, ctx: &Ctx, verb: &str, t: &Target) -> ApiResult<()> {
    if !enforced(state, ctx) {
        return Ok(());
    }
    if let Some(vw) = &ctx.vw {
        let reason = match content_allowed(state, &ctx.user, vw, verb) {
            Err(reason) => Some(reason),
            Ok(()) => match &ctx.cluster {
                ClusterSel::Lc(c) => binding_allows(state, vw, &t.info, c, verb).err(),
                _ => None,
            },
        };
        return match reason {
            Some(reason) => Err(rbac::forbidden(ctx, verb, t, Some(&reason))),
            None => Ok(()),
        };
    }
    if let ClusterSel::Lc(lc) = &ctx.cluster
        && !has_access(state, &ctx.user.name, &ctx.user.groups, lc)
    {
        return Err(rbac::forbidden(ctx, verb, t, Some(NO_ACCESS)));
    }
    rbac::authorize_request(state, ctx, verb, t)
}

// ---------------------------------------------------------------------------
// APIExport virtual workspace
// ---------------------------------------------------------------------------

fn kcp_gr(resource: &str) -> Gr {
    Gr {
        group: "apis.kcp.io".into(),
        resource: resource.into(),
    }
}

/// Whether RBAC in `export_cluster` allows `user` `verb` on APIExport `export`
/// (or its `subresource`).
fn export_allows(
    state: &State,
    user: &UserInfo,
    export_cluster: &str,
    export: &str,
    verb: &str,
    subresource: &str,
) -> bool {
    let what = ("apis.kcp.io", "apiexports", subresource);
    rbac::allowed(
        state,
        &rbac::Attributes::cluster_scoped(user, export_cluster, verb, what, export),
    )
}

/// kcp's content authorizer: `apiexports/content` with the request's verb on the
/// export, in the export's workspace (a deep review: no `access` needed there).
fn content_allowed(state: &State, user: &UserInfo, vw: &VwCtx, verb: &str) -> Result<(), String> {
    if export_allows(
        state,
        user,
        &vw.export_cluster,
        &vw.export_name,
        verb,
        "content",
    ) {
        return Ok(());
    }
    Err(format!(
        "API export: {:?}, workspace: {:?} RBAC decision: ",
        vw.export_name, vw.export_cluster
    ))
}

/// The APIBinding of `cluster` to the virtual workspace's export (by name and
/// `status.apiExportClusterName`, as kcp looks it up).
fn binding_to(state: &State, cluster: &str, vw: &VwCtx) -> Option<Arc<Value>> {
    state
        .store
        .list(&kcp_gr("apibindings"), Some(cluster), None)
        .0
        .into_iter()
        .find(|b| {
            b["spec"]["reference"]["export"]["name"].as_str() == Some(vw.export_name.as_str())
                && b["status"]["apiExportClusterName"].as_str() == Some(vw.export_cluster.as_str())
        })
}

/// A permission claim's verbs; a claim stored in v1alpha1 form (no verbs) reads as
/// v1alpha2 does after conversion: `["*"]`.
fn claim_verbs(claim: &Value) -> Vec<String> {
    if claim["verbs"].is_array() {
        strs(&claim["verbs"])
    } else {
        vec!["*".into()]
    }
}

fn same_claim(a: &Value, b: &Value) -> bool {
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or("").to_string();
    ["group", "resource", "identityHash"]
        .iter()
        .all(|k| s(a, k) == s(b, k))
}

/// kcp's bound-API authorizer for one concrete logical cluster: the cluster binds the
/// export; a bound resource is allowed; a claimed one needs an accepted claim whose
/// verbs, intersected with the export's verbs for that claim, hold the verb (or `*`);
/// APIBindings are readable. Err holds kcp's reason.
fn binding_allows(
    state: &State,
    vw: &VwCtx,
    info: &ResourceInfo,
    cluster: &str,
    verb: &str,
) -> Result<(), String> {
    let Some(binding) = binding_to(state, cluster, vw) else {
        return Err("could not find suitable APIBinding in target logical cluster".into());
    };
    let bound = binding["status"]["boundResources"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["group"] == info.group.as_str() && r["resource"] == info.resource.as_str());
    if bound {
        return Ok(());
    }
    let export = state.store.get(
        &kcp_gr("apiexports"),
        &ckey(&vw.export_cluster, &vw.export_name),
    );
    let export_claims: Vec<Value> = export
        .as_ref()
        .and_then(|e| e["spec"]["permissionClaims"].as_array().cloned())
        .unwrap_or_default();
    // kcp normalizes Events of either API to core Events before comparing with
    // the claims (kcp-facts 32): an `events.k8s.io` claim never matches.
    let (group, resource) = crate::kcp::normalize_events(&info.group, &info.resource);
    for claim in binding["spec"]["permissionClaims"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if claim["state"].as_str() != Some("Accepted")
            || claim["group"].as_str().unwrap_or("") != group
            || claim["resource"].as_str().unwrap_or("") != resource
        {
            continue;
        }
        let export_verbs = export_claims
            .iter()
            .find(|c| same_claim(c, claim))
            .map(claim_verbs)
            .unwrap_or_default();
        let allowed: Vec<String> = claim_verbs(claim)
            .into_iter()
            .filter(|v| export_verbs.contains(v))
            .collect();
        if allowed.iter().any(|v| v == verb || v == "*") {
            return Ok(());
        }
    }
    if info.group == "apis.kcp.io" && info.resource == "apibindings" {
        return if ["get", "list", "watch"].contains(&verb) {
            Ok(())
        } else {
            Err("write access to APIBinding is not allowed from virtual workspace".into())
        };
    }
    Err("failed to find suitable reason to allow access in APIBinding".into())
}

/// Whether the objects of `cluster` are visible to a `verb` (list, watch) on the
/// virtual workspace's wildcard: the cluster binds the export and the binding allows
/// the verb on the kind, as for a request naming that cluster (system:masters, who
/// bypass that check there, see every binding cluster).
pub fn vw_cluster_visible(
    state: &State,
    vw: &VwCtx,
    info: &ResourceInfo,
    cluster: &str,
    verb: &str,
) -> bool {
    binding_allows(state, vw, info, cluster, verb).is_ok()
}

// ---------------------------------------------------------------------------
// Admission: `bind` on APIExports, the owner of a Workspace
// ---------------------------------------------------------------------------

/// The export an APIBinding references: (path as written, export name).
fn binding_reference(obj: &Value) -> (String, String) {
    let e = &obj["spec"]["reference"]["export"];
    (
        e["path"].as_str().unwrap_or("").to_string(),
        e["name"].as_str().unwrap_or("").to_string(),
    )
}

/// kcp's APIBinding admission: creating a binding, or changing its reference, needs
/// `bind` on the APIExport in the export's workspace. The refusal does not tell
/// whether the workspace or export exists.
fn check_bind(
    state: &State,
    ctx: &Ctx,
    info: &ResourceInfo,
    cluster: &str,
    obj: &Value,
    action: &str,
) -> ApiResult<()> {
    let (path, name) = binding_reference(obj);
    let export_cluster = if path.is_empty() {
        Some(cluster.to_string())
    } else {
        crate::kcp::resolve_path(state, &path)
    };
    let allowed =
        export_cluster.is_some_and(|ec| export_allows(state, &ctx.user, &ec, &name, "bind", ""));
    if allowed {
        return Ok(());
    }
    let export = if path.is_empty() {
        name.clone()
    } else {
        format!("{path}:{name}")
    };
    Err(ApiError::forbidden(
        info,
        obj["metadata"]["name"].as_str().unwrap_or(""),
        &format!("unable to {action} APIBinding: no permission to bind to export {export}"),
    ))
}

fn is_kcp(info: &ResourceInfo, group: &str, resource: &str) -> bool {
    info.group == group && info.resource == resource
}

/// kcp's admission on a create in logical cluster `cluster` (none on the plain
/// cluster): `bind` for APIBindings, the owner annotation on Workspaces.
pub fn admit_create(
    state: &State,
    ctx: &Ctx,
    info: &ResourceInfo,
    cluster: &str,
    obj: &mut Value,
) -> ApiResult<()> {
    let kcp = !cluster.is_empty();
    if kcp && is_kcp(info, "tenancy.kcp.io", "workspaces") {
        record_owner(ctx, obj);
    }
    let binds = kcp && is_kcp(info, "apis.kcp.io", "apibindings");
    match binds && enforced(state, ctx) {
        true => check_bind(state, ctx, info, cluster, obj, "create"),
        false => Ok(()),
    }
}

/// kcp's admission on an update: changing an APIBinding's reference needs `bind`
/// on the new export.
pub fn admit_update(
    state: &State,
    ctx: &Ctx,
    info: &ResourceInfo,
    cluster: &str,
    new: &Value,
    old: &Value,
) -> ApiResult<()> {
    if !cluster.is_empty() {
        crate::kcp_deletion::check_finalizer_removal(&ctx.user, info, old, new)?;
    }
    if cluster.is_empty()
        || !is_kcp(info, "apis.kcp.io", "apibindings")
        || !enforced(state, ctx)
        || binding_reference(new) == binding_reference(old)
    {
        return Ok(());
    }
    check_bind(state, ctx, info, cluster, new, "update")
}
