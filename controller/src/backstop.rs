//! Keeps the backstop ValidatingAdmissionPolicy `holdfast-backstop` and its
//! binding equal to the controller's settings (protection labels, strict mode),
//! re-applying them when they are changed or deleted, or removes them when the
//! backstop is off (`--backstop=false`) or the API server does not serve
//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicies.

use holdfast_shared::{
    backstop::BACKSTOP_NAME,
    names::FIELD_MANAGER,
    watch::{Cache, NotFound, spawn_cache},
};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams},
    runtime::watcher,
};
use std::sync::Arc;
use tokio::{sync::Notify, task::JoinHandle};

pub use holdfast_shared::backstop::Backstop;

/// The group, version and resource the backstop needs.
pub const GROUP_VERSION: &str = "admissionregistration.k8s.io/v1";

/// Watches of the backstop's two objects (their changes wake the reconciler).
pub struct Watches {
    policy: Cache<ValidatingAdmissionPolicy>,
    binding: Cache<ValidatingAdmissionPolicyBinding>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Watches {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Watches {
    /// Starts the two watches (by name).
    pub fn start(client: &Client, notify: &Arc<Notify>) -> Self {
        let cfg = watcher::Config::default().fields(&format!("metadata.name={BACKSTOP_NAME}"));
        let wake = || {
            let notify = notify.clone();
            move || notify.notify_one()
        };
        let (policy, p) = spawn_cache(
            Api::all(client.clone()),
            cfg.clone(),
            NotFound::Empty,
            wake(),
        );
        let (binding, b) = spawn_cache(Api::all(client.clone()), cfg, NotFound::Empty, wake());
        Self {
            policy,
            binding,
            tasks: [p, b],
        }
    }
}

/// Whether the API server serves ValidatingAdmissionPolicies in
/// `admissionregistration.k8s.io/v1` (discovery).
pub async fn served(client: &Client) -> kube::Result<bool> {
    match client.list_api_group_resources(GROUP_VERSION).await {
        Ok(list) => Ok(list
            .resources
            .iter()
            .any(|r| r.name == "validatingadmissionpolicies")
            && list
                .resources
                .iter()
                .any(|r| r.name == "validatingadmissionpolicybindings")),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

fn binding_same(
    live: &ValidatingAdmissionPolicyBinding,
    want: &ValidatingAdmissionPolicyBinding,
) -> bool {
    live.spec.policy_name == want.spec.policy_name
        && live.spec.validation_actions == want.spec.validation_actions
        && live.spec.match_resources.is_none()
        && live.spec.param_ref.is_none()
}

/// Applies the policy and binding (server-side apply, field manager `holdfast`)
/// when the watched live objects are missing or differ. Returns whether anything
/// was written.
pub async fn ensure(client: &Client, watches: &Watches, want: &Backstop) -> anyhow::Result<bool> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let mut wrote = false;
    let policy = want.policy();
    let live = watches
        .policy
        .state()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(BACKSTOP_NAME));
    if live.as_ref().map(|l| &l.spec) != Some(&policy.spec) {
        let mut body = serde_json::to_value(&policy)?;
        body["apiVersion"] = GROUP_VERSION.into();
        body["kind"] = "ValidatingAdmissionPolicy".into();
        tracing::info!(
            strict = want.strict,
            "applying ValidatingAdmissionPolicy {BACKSTOP_NAME}"
        );
        let api: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
        api.patch(BACKSTOP_NAME, &pp, &Patch::Apply(&body)).await?;
        wrote = true;
    }
    let binding = want.binding();
    let live = watches
        .binding
        .state()
        .into_iter()
        .find(|b| b.metadata.name.as_deref() == Some(BACKSTOP_NAME));
    if !live.is_some_and(|l| binding_same(&l, &binding)) {
        let mut body = serde_json::to_value(&binding)?;
        body["apiVersion"] = GROUP_VERSION.into();
        body["kind"] = "ValidatingAdmissionPolicyBinding".into();
        tracing::info!("applying ValidatingAdmissionPolicyBinding {BACKSTOP_NAME}");
        let api: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
        api.patch(BACKSTOP_NAME, &pp, &Patch::Apply(&body)).await?;
        wrote = true;
    }
    Ok(wrote)
}

/// Deletes the binding, then the policy, when the watches still see them (absent
/// is fine). Returns whether anything was deleted.
pub async fn remove(client: &Client, watches: &Watches) -> anyhow::Result<bool> {
    let mut deleted = false;
    if !watches.binding.state().is_empty() {
        let api: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
        deleted |= delete(
            api.delete(BACKSTOP_NAME, &DeleteParams::default())
                .await
                .map(|_| ()),
        )?;
    }
    if !watches.policy.state().is_empty() {
        let api: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
        deleted |= delete(
            api.delete(BACKSTOP_NAME, &DeleteParams::default())
                .await
                .map(|_| ()),
        )?;
    }
    if deleted {
        tracing::info!(
            "removed the backstop ValidatingAdmissionPolicy {BACKSTOP_NAME} and its binding"
        );
    }
    Ok(deleted)
}

fn delete(r: kube::Result<()>) -> anyhow::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the binding and the policy without consulting the watches (cleanup
/// on shutdown); absent is fine.
pub async fn remove_now(client: &Client) {
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    for r in [
        delete(
            bindings
                .delete(BACKSTOP_NAME, &DeleteParams::default())
                .await
                .map(|_| ()),
        ),
        delete(
            policies
                .delete(BACKSTOP_NAME, &DeleteParams::default())
                .await
                .map(|_| ()),
        ),
    ] {
        if let Err(e) = r {
            tracing::warn!(error = %format!("{e:#}"), "deleting the backstop failed");
        }
    }
}
