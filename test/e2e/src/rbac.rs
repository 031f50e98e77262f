//! RBAC fixtures for a test's own users, the same on a sim and on the cluster of
//! [`crate::E2E_KUBECONFIG`]: a user holds exactly what the test grants it
//! (Roles, ClusterRoles and bindings of unique names, removed when the env
//! drops), never the simulator's static rules, and is reached by impersonation
//! (the admin kubeconfig with `as:` and `as-groups`), so a test means the same
//! thing on both.

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::{Env, KubectlOutput, impersonated_groups, unique_name};

/// A user of the test's own, reached by impersonation ([`Env::test_user`]).
#[derive(Debug, Clone)]
pub struct TestUser {
    /// The user name the API server (and every admission review) sees.
    pub name: String,
    /// The groups it acts in.
    pub groups: Vec<String>,
    /// A kubeconfig acting as this user.
    pub kubeconfig: PathBuf,
}

impl TestUser {
    /// The kubeconfig's path as a string (for a binary's `--kubeconfig`).
    pub fn kubeconfig_arg(&self) -> String {
        self.kubeconfig.to_string_lossy().into_owned()
    }
}

/// One RBAC policy rule: `verbs` on `resources` of `api_groups`.
pub fn rule(verbs: &[&str], api_groups: &[&str], resources: &[&str]) -> Value {
    json!({"apiGroups": api_groups, "resources": resources, "verbs": verbs})
}

/// The rule of an ordinary editor: [`crate::steps::EVERYDAY`] verbs on every
/// resource (and subresource) of every API group.
pub fn everyday() -> Value {
    rule(crate::steps::EVERYDAY, &["*"], &["*"])
}

/// The permission to bypass holdfast's protection (verb `bypass` on
/// `protections.holdfast.dev`).
pub fn bypass() -> Value {
    rule(&["bypass"], &["holdfast.dev"], &["protections"])
}

/// A name of the test's own for something a shared cluster may know already (a
/// group, a user): `name` on a sim, `name-<8 hex digits>` on the cluster of
/// [`crate::E2E_KUBECONFIG`].
pub fn own_name(name: &str) -> String {
    if crate::e2e_cluster().is_some() {
        unique_name(name)
    } else {
        name.to_string()
    }
}

/// A binding subject: user `name` (a ServiceAccount's user name included).
pub fn user(name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name})
}

/// A binding subject: the members of group `name`.
pub fn group(name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name})
}

impl Env {
    /// A user of the test's own named after `name` (`name` on a sim,
    /// `name-<8 hex digits>` on a cluster, where a user of that name may hold
    /// permissions already), acting in `groups` beside those the API server gives
    /// every such user ([`impersonated_groups`]). It holds nothing until granted
    /// ([`Env::grant_cluster`], [`Env::grant_in`]).
    pub fn test_user(&self, name: &str, groups: &[&str]) -> anyhow::Result<TestUser> {
        let name = own_name(name);
        let mut all: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        all.extend(impersonated_groups(&name));
        let mut config = self
            .kubectl(&["config", "view", "--minify", "--flatten", "-o", "json"])?
            .json()?;
        let Some(entry) = config["users"].as_array_mut().and_then(|u| u.first_mut()) else {
            anyhow::bail!("the admin kubeconfig names no user");
        };
        entry["user"]["as"] = name.clone().into();
        entry["user"]["as-groups"] = all.clone().into();
        let kubeconfig = self
            .dir
            .path()
            .join(format!("kubeconfig-user-{}", name.replace(':', "-")));
        std::fs::write(&kubeconfig, serde_json::to_vec_pretty(&config)?)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        Ok(TestUser {
            name,
            groups: all,
            kubeconfig,
        })
    }

    /// Runs kubectl as `user`.
    pub fn kubectl_by(&self, user: &TestUser, args: &[&str]) -> anyhow::Result<KubectlOutput> {
        self.kubectl_io_with(&user.kubeconfig, args, None)
    }

    /// Grants `subjects` ([`user`], [`group`]) `rules` ([`rule`]) cluster-wide: a
    /// ClusterRole and a ClusterRoleBinding named `prefix-<8 hex digits>`, removed
    /// when the env drops (on a cluster; a sim goes with them). Returns the name.
    pub fn grant_cluster(
        &self,
        prefix: &str,
        subjects: &[Value],
        rules: &[Value],
    ) -> anyhow::Result<String> {
        let name = unique_name(prefix);
        self.apply_grant(
            "ClusterRole",
            "ClusterRoleBinding",
            &name,
            None,
            subjects,
            rules,
        )?;
        if let Some(run) = &self.cluster {
            run.remove_later("clusterrolebinding", &name);
            run.remove_later("clusterrole", &name);
        }
        Ok(name)
    }

    /// Grants `subjects` `rules` in namespace `ns`: a Role and a RoleBinding named
    /// `prefix-<8 hex digits>` (they go with the test's namespace). Returns the
    /// name.
    pub fn grant_in(
        &self,
        ns: &str,
        prefix: &str,
        subjects: &[Value],
        rules: &[Value],
    ) -> anyhow::Result<String> {
        let name = unique_name(prefix);
        self.apply_grant("Role", "RoleBinding", &name, Some(ns), subjects, rules)?;
        Ok(name)
    }

    /// Removes the ClusterRole and ClusterRoleBinding `name` of [`Env::grant_cluster`]
    /// now, the binding first.
    pub fn revoke_cluster(&self, name: &str) -> anyhow::Result<()> {
        for kind in ["clusterrolebinding", "clusterrole"] {
            self.kubectl(&["delete", kind, name])?
                .ok()
                .with_context(|| format!("deleting {kind} {name}"))?;
        }
        Ok(())
    }

    fn apply_grant(
        &self,
        role_kind: &str,
        binding_kind: &str,
        name: &str,
        ns: Option<&str>,
        subjects: &[Value],
        rules: &[Value],
    ) -> anyhow::Result<()> {
        let mut metadata = json!({"name": name});
        if let Some(ns) = ns {
            metadata["namespace"] = ns.into();
        }
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": role_kind,
            "metadata": metadata,
            "rules": rules,
        });
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": binding_kind,
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
            "subjects": subjects,
        });
        for object in [role, binding] {
            self.kubectl_stdin(&["create", "-f", "-"], &object.to_string())?
                .ok()
                .with_context(|| format!("creating {object}"))?;
        }
        Ok(())
    }
}
