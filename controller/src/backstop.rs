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
    Api, Client, Resource,
    api::{DeleteParams, Patch, PatchParams},
    runtime::watcher,
};
use serde::{Serialize, de::DeserializeOwned};
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

/// The object named [`BACKSTOP_NAME`] in `store`.
fn named<K>(store: &Cache<K>) -> Option<Arc<K>>
where
    K: Resource,
{
    store
        .state()
        .into_iter()
        .find(|o| o.meta().name.as_deref() == Some(BACKSTOP_NAME))
}

/// Applies the policy and binding (server-side apply, field manager `holdfast`)
/// when the watched live objects are missing or differ. Returns whether anything
/// was written.
pub async fn ensure(client: &Client, watches: &Watches, want: &Backstop) -> anyhow::Result<bool> {
    let mut wrote = false;
    let policy = want.policy();
    let live = named(&watches.policy);
    if live.as_ref().map(|l| &l.spec) != Some(&policy.spec) {
        tracing::info!(
            strict = want.strict,
            "applying ValidatingAdmissionPolicy {BACKSTOP_NAME}"
        );
        apply(client, BACKSTOP_NAME, &policy).await?;
        wrote = true;
    }
    let binding = want.binding();
    let live = named(&watches.binding);
    if !live.is_some_and(|l| binding_same(&l, &binding)) {
        tracing::info!("applying ValidatingAdmissionPolicyBinding {BACKSTOP_NAME}");
        apply(client, BACKSTOP_NAME, &binding).await?;
        wrote = true;
    }
    Ok(wrote)
}

/// Deletes the binding, then the policy, when the watches still see them (absent
/// is fine). Returns whether anything was deleted.
pub async fn remove(client: &Client, watches: &Watches) -> anyhow::Result<bool> {
    let mut deleted = false;
    if !watches.binding.state().is_empty() {
        deleted |= delete::<ValidatingAdmissionPolicyBinding>(client, BACKSTOP_NAME).await?;
    }
    if !watches.policy.state().is_empty() {
        deleted |= delete::<ValidatingAdmissionPolicy>(client, BACKSTOP_NAME).await?;
    }
    if deleted {
        tracing::info!(
            "removed the backstop ValidatingAdmissionPolicy {BACKSTOP_NAME} and its binding"
        );
    }
    Ok(deleted)
}

/// Applies `obj` as `name` with server-side apply (holdfast's field manager,
/// forced), naming its apiVersion and kind.
pub(crate) async fn apply<K>(client: &Client, name: &str, obj: &K) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let mut body = serde_json::to_value(obj)?;
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    let api: Api<K> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Deletes the cluster-scoped `name`: whether it existed.
pub(crate) async fn delete<K>(client: &Client, name: &str) -> anyhow::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the binding and the policy without consulting the watches (cleanup
/// on shutdown); absent is fine.
pub async fn remove_now(client: &Client) {
    delete_policy_and_binding(client, BACKSTOP_NAME, "the backstop").await;
}

/// Deletes the ValidatingAdmissionPolicyBinding and then the
/// ValidatingAdmissionPolicy `name` (absent is fine); a failure is logged as
/// deleting `what`.
pub(crate) async fn delete_policy_and_binding(client: &Client, name: &str, what: &str) {
    for r in [
        delete::<ValidatingAdmissionPolicyBinding>(client, name).await,
        delete::<ValidatingAdmissionPolicy>(client, name).await,
    ] {
        if let Err(e) = r {
            tracing::warn!(error = %format!("{e:#}"), "deleting {what} failed");
        }
    }
}
