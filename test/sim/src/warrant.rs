//! kcp's warrants (docs/kcp-facts.md 28): the APIExport virtual workspace forwards a
//! request into a concrete logical cluster impersonating the caller with an extra
//! `authorization.kcp.io/warrant`, a JSON user that kcp's authorizers also try
//! (`pkg/virtual/apiexport/builder/build.go` `newImpersonationConfig`;
//! `pkg/authorization/warrants.go` `WithWarrantsAndScopes`).

use crate::server::UserInfo;
use serde_json::{Value, json};

/// The extra key a warrant travels in (kcp's `validation.WarrantExtraKey`).
pub const WARRANT_EXTRA: &str = "authorization.kcp.io/warrant";
/// The extra a service account's logical cluster travels in
/// (`serviceaccount.ClusterNameKey` of kcp's Kubernetes).
pub const CLUSTER_NAME_EXTRA: &str = "authentication.kubernetes.io/cluster-name";
/// kcp's global admin group, bound to cluster-admin in every workspace by kcp's
/// bootstrap policy (`pkg/authorization/bootstrap/policy.go` `SystemKcpAdminGroup`).
pub const KCP_ADMIN_GROUP: &str = "system:kcp:admin";
/// The fake local service account of the virtual workspace's warrant.
pub const WARRANT_USER: &str = "system:serviceaccount:default:rest";

/// The warrant the APIExport virtual workspace adds for a request into `cluster`.
pub fn virtual_workspace_warrant(cluster: &str) -> String {
    json!({
        "user": WARRANT_USER,
        "groups": [KCP_ADMIN_GROUP],
        "extra": {CLUSTER_NAME_EXTRA: [cluster]},
    })
    .to_string()
}

/// Adds the virtual workspace's warrant for `cluster` to `user`'s extras, as the
/// virtual workspace's impersonating client does (the caller's own extras kept).
pub fn add_virtual_workspace_warrant(user: &mut UserInfo, cluster: &str) {
    user.extra
        .entry(WARRANT_EXTRA.to_string())
        .or_default()
        .push(virtual_workspace_warrant(cluster));
}

/// The extra kcp scopes an impersonated user to its logical cluster with.
pub const SCOPES_EXTRA: &str = "authentication.kcp.io/scopes";

/// kcp's impersonation scoping (`pkg/server/filters/impersonation.go`
/// `WithImpersonationScoping`, docs/kcp-facts.md 35): a user impersonated by anyone
/// but `system:masters` carries the scope `cluster:<logical cluster>` of the request.
pub fn scope_impersonated(user: &mut UserInfo, impersonator_is_master: bool, cluster: &str) {
    if impersonator_is_master {
        return;
    }
    user.extra
        .entry(SCOPES_EXTRA.to_string())
        .or_default()
        .push(format!("cluster:{cluster}"));
}

/// One user an authorizer tries: name, groups, and whether it is a service account
/// of the logical cluster asked about (kcp lets those in without `access`).
#[derive(Clone, Debug, PartialEq)]
pub struct Effective {
    pub name: String,
    pub groups: Vec<String>,
    pub local_service_account: bool,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The users kcp's authorizers try for `name`/`groups`/`extra` in logical cluster
/// `cluster`: the user itself, then each warrant (recursively). A warrant for a
/// service account counts only in the logical cluster its cluster-name extra names
/// (kcp drops foreign service accounts); an undecodable warrant is ignored.
pub fn effective_users(
    name: &str,
    groups: &[String],
    extra: &Value,
    cluster: &str,
) -> Vec<Effective> {
    let mut out = vec![];
    collect(name, groups, extra, cluster, 0, &mut out);
    out
}

fn collect(
    name: &str,
    groups: &[String],
    extra: &Value,
    cluster: &str,
    depth: usize,
    out: &mut Vec<Effective>,
) {
    let service_account = name.starts_with("system:serviceaccount:");
    let clusters = strings(&extra[CLUSTER_NAME_EXTRA]);
    let local = service_account && clusters.iter().any(|c| c == cluster);
    if depth > 0 && service_account && !local {
        return;
    }
    out.push(Effective {
        name: name.to_string(),
        groups: groups.to_vec(),
        local_service_account: local,
    });
    if depth >= 4 {
        return;
    }
    for w in strings(&extra[WARRANT_EXTRA]) {
        let Ok(w) = serde_json::from_str::<Value>(&w) else {
            continue;
        };
        let Some(user) = w["user"].as_str() else {
            continue;
        };
        collect(
            user,
            &strings(&w["groups"]),
            &w["extra"],
            cluster,
            depth + 1,
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_workspace_warrant_counts_in_its_own_cluster_only() {
        let mut u = UserInfo {
            name: "provider".into(),
            uid: String::new(),
            groups: vec!["system:authenticated".into()],
            extra: Default::default(),
        };
        add_virtual_workspace_warrant(&mut u, "abc");
        let extra = json!(u.extra);
        let here = effective_users(&u.name, &u.groups, &extra, "abc");
        assert_eq!(here.len(), 2);
        assert_eq!(here[1].name, WARRANT_USER);
        assert_eq!(here[1].groups, vec![KCP_ADMIN_GROUP.to_string()]);
        assert!(here[1].local_service_account);
        let elsewhere = effective_users(&u.name, &u.groups, &extra, "other");
        assert_eq!(elsewhere.len(), 1);
        let bad = json!({WARRANT_EXTRA: ["{not json"]});
        assert_eq!(effective_users("u", &[], &bad, "abc").len(), 1);
    }
}

#[cfg(test)]
mod scope_tests {
    use super::*;

    #[test]
    fn impersonation_by_anyone_but_system_masters_is_scoped_to_the_cluster() {
        let mut u = UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: vec![],
            extra: Default::default(),
        };
        scope_impersonated(&mut u, true, "abc");
        assert!(u.extra.is_empty());
        scope_impersonated(&mut u, false, "abc");
        assert_eq!(u.extra[SCOPES_EXTRA], ["cluster:abc"]);
    }
}
