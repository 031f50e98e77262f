//! The Kubernetes (and Karmada) topology: one ValidatingWebhookConfiguration
//! `holdfast`, recomputed from scratch from every policy object on each change
//! and kept true (drift reverted, deletion recreated) through a watch on it.
//!
//! Reflectors (kube-runtime) keep the four policy kinds and the configuration in
//! memory; every watch event wakes one reconcile loop, which computes the whole
//! desired state, applies it with server-side apply when the live object differs
//! and writes each policy's status when it changed.

use std::{
    collections::BTreeSet,
    fmt::Debug,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use holdfast_shared::{
    api::{AnchorRule, CriticalService, DependencyRule, GroupResource, Policy, ResourceProtection},
    names::{FIELD_MANAGER, WEBHOOK_CONFIGURATION_NAME},
    webhookconfig::{
        InstallOptions, POLICIES_WEBHOOK, PolicyNeeds, anchor_rule_needs, critical_service_needs,
        dependency_rule_needs, desired_configuration_for, matches_desired,
        resource_protection_needs, routes,
    },
};
use k8s_openapi::{
    api::admissionregistration::v1::ValidatingWebhookConfiguration,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::{
        WatchStreamExt as _,
        events::{Event, EventType, Recorder, Reporter},
        reflector::{self, Store},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

use crate::{
    cycles::{RuleEdges, find_cycles},
    policies::{
        ApiIndex, Invalid, check_anchor_rule, check_critical_service, check_dependency_rule,
        check_resource_protection,
    },
    status::{Outcome, desired_status, now_rfc3339},
};

/// Where the reconciler gets its install options (the CA bundle may rotate).
pub type OptionsSource = watch::Receiver<InstallOptions>;

/// Settings of the Kubernetes reconciler.
#[derive(Clone)]
pub struct Settings {
    /// Protection labels in force.
    pub labels: holdfast_shared::labels::ProtectionLabels,
    /// Global strict mode.
    pub strict: bool,
    /// Full resync interval (discovery refresh, status re-check).
    pub resync: Duration,
    /// Reporting instance for Events.
    pub instance: String,
}

/// Spawns a reflector for `api` whose every event wakes `notify`.
pub fn spawn_reflector<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<Notify>,
    on_event: Option<Arc<AtomicBool>>,
) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, cfg)).default_backoff();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) => {
                    if let Some(flag) = &on_event {
                        flag.store(true, Ordering::SeqCst);
                    }
                    notify.notify_one();
                }
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying")
                }
            }
        }
    });
    reader
}

/// The Kubernetes reconciler.
pub struct Reconciler {
    client: Client,
    settings: Settings,
    options: OptionsSource,
    rp: Store<ResourceProtection>,
    ar: Store<AnchorRule>,
    dr: Store<DependencyRule>,
    cs: Store<CriticalService>,
    vwc: Store<ValidatingWebhookConfiguration>,
    notify: Arc<Notify>,
    discovery_dirty: Arc<AtomicBool>,
    index: ApiIndex,
    recorder: Recorder,
    /// Set once the first reconcile succeeded.
    pub ready: Arc<AtomicBool>,
}

/// One policy, kind-erased.
struct Item {
    kind: &'static str,
    name: String,
    invalid: Option<Invalid>,
    needs: Vec<GroupResource>,
}

impl Reconciler {
    /// Starts the watches.
    pub fn new(
        client: Client,
        settings: Settings,
        options: OptionsSource,
        ready: Arc<AtomicBool>,
    ) -> Self {
        let notify = Arc::new(Notify::new());
        let discovery_dirty = Arc::new(AtomicBool::new(true));
        let cfg = watcher::Config::default();
        let rp = spawn_reflector(Api::all(client.clone()), cfg.clone(), notify.clone(), None);
        let ar = spawn_reflector(Api::all(client.clone()), cfg.clone(), notify.clone(), None);
        let dr = spawn_reflector(Api::all(client.clone()), cfg.clone(), notify.clone(), None);
        let cs = spawn_reflector(Api::all(client.clone()), cfg.clone(), notify.clone(), None);
        let vwc = spawn_reflector(
            Api::all(client.clone()),
            watcher::Config::default()
                .fields(&format!("metadata.name={WEBHOOK_CONFIGURATION_NAME}")),
            notify.clone(),
            None,
        );
        // CRDs coming and going change what discovery knows.
        let _crds: Store<CustomResourceDefinition> = spawn_reflector(
            Api::all(client.clone()),
            cfg,
            notify.clone(),
            Some(discovery_dirty.clone()),
        );
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "holdfast-controller".into(),
                instance: Some(settings.instance.clone()),
            },
        );
        Self {
            client,
            settings,
            options,
            rp,
            ar,
            dr,
            cs,
            vwc,
            notify,
            discovery_dirty,
            index: ApiIndex::default(),
            recorder,
            ready,
        }
    }

    /// Runs until `shutdown` turns true.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> anyhow::Result<()> {
        // Never compute from half-filled caches: an empty cache would remove webhooks.
        let wait = async {
            let _ = self.rp.wait_until_ready().await;
            let _ = self.ar.wait_until_ready().await;
            let _ = self.dr.wait_until_ready().await;
            let _ = self.cs.wait_until_ready().await;
            let _ = self.vwc.wait_until_ready().await;
        };
        tokio::select! {
            () = wait => {}
            _ = shutdown.changed() => return Ok(()),
        }
        tracing::info!("caches synced; reconciling");
        let mut retry = false;
        let mut options = self.options.clone();
        loop {
            if !retry {
                tokio::select! {
                    () = self.notify.notified() => {}
                    _ = options.changed() => {}
                    () = tokio::time::sleep(self.settings.resync) => {
                        self.discovery_dirty.store(true, Ordering::SeqCst);
                    }
                    _ = shutdown.changed() => return Ok(()),
                }
                // Let a burst of events settle into one pass.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if *shutdown.borrow() {
                return Ok(());
            }
            if self.discovery_dirty.swap(false, Ordering::SeqCst) {
                match ApiIndex::discover(&self.client).await {
                    Ok(index) => {
                        tracing::debug!(resources = index.len(), "discovery refreshed");
                        self.index = index;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "discovery failed; keeping the previous view");
                        self.discovery_dirty.store(true, Ordering::SeqCst);
                    }
                }
            }
            match self.reconcile_once().await {
                Ok(()) => {
                    retry = false;
                    self.ready.store(true, Ordering::SeqCst);
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "reconcile failed; retrying");
                    retry = true;
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = shutdown.changed() => return Ok(()),
                    }
                }
            }
        }
    }

    fn items(&self) -> (Vec<Item>, PolicyNeeds, Vec<RuleEdges>) {
        let mut items = Vec::new();
        let mut needs = PolicyNeeds::default();
        let mut edges = Vec::new();
        for p in self.rp.state() {
            let invalid = check_resource_protection(&p, &self.index);
            if invalid.is_none() {
                needs.add_resource_protection(&p);
            }
            items.push(Item {
                kind: "ResourceProtection",
                name: p.name_any(),
                invalid,
                needs: resource_protection_needs(&p),
            });
        }
        for p in self.ar.state() {
            let invalid = check_anchor_rule(&p, &self.index);
            if invalid.is_none() {
                needs.add_anchor_rule(&p);
            }
            items.push(Item {
                kind: "AnchorRule",
                name: p.name_any(),
                invalid,
                needs: anchor_rule_needs(&p),
            });
        }
        for p in self.dr.state() {
            let invalid = check_dependency_rule(&p, &self.index, true);
            if invalid.is_none() {
                needs.add_dependency_rule(&p);
                edges.push(RuleEdges::of(p.name_any(), &p));
            }
            items.push(Item {
                kind: "DependencyRule",
                name: p.name_any(),
                invalid,
                needs: dependency_rule_needs(&p),
            });
        }
        for p in self.cs.state() {
            let invalid = check_critical_service(&p, &self.index);
            if invalid.is_none() {
                needs.add_critical_service(&p);
            }
            items.push(Item {
                kind: "CriticalService",
                name: p.name_any(),
                invalid,
                needs: critical_service_needs(&p),
            });
        }
        let index = &self.index;
        (items, needs.with_containment(|gr| index.scope(gr)), edges)
    }

    async fn reconcile_once(&mut self) -> anyhow::Result<()> {
        let (items, needs, edges) = self.items();
        let opts = self.options.borrow().clone();
        let desired =
            desired_configuration_for(&self.settings.labels, self.settings.strict, &needs, &opts);
        let live = self
            .vwc
            .state()
            .into_iter()
            .find(|c| c.name_any() == WEBHOOK_CONFIGURATION_NAME);
        let live = match live {
            Some(l) if matches_desired(&l, &desired) => (*l).clone(),
            other => {
                let what = if other.is_some() {
                    "updating (drift or change)"
                } else {
                    "creating"
                };
                tracing::info!(
                    webhooks = desired.webhooks.as_ref().map_or(0, Vec::len),
                    protected = needs.delete.len(),
                    "{what} ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME}"
                );
                apply_configuration(&self.client, &desired).await?
            }
        };
        let cycles = find_cycles(&edges);
        let now = now_rfc3339();
        let mut writes = Vec::with_capacity(items.len());
        for item in &items {
            let missing: Vec<String> = item
                .needs
                .iter()
                .filter(|gr| !routes(&live, POLICIES_WEBHOOK, "DELETE", gr))
                .map(ToString::to_string)
                .collect();
            let installed = missing.is_empty();
            let set: BTreeSet<String> = item.needs.iter().map(ToString::to_string).collect();
            let installed_message = if installed {
                format!(
                    "DELETEs of {} reach webhook {POLICIES_WEBHOOK} of ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME}",
                    set.into_iter().collect::<Vec<_>>().join(", ")
                )
            } else {
                format!(
                    "not yet routed to {POLICIES_WEBHOOK}: {}",
                    missing.join(", ")
                )
            };
            let cycle = cycles
                .get(&item.name)
                .filter(|_| item.kind == "DependencyRule")
                .map(|c| c.message());
            let outcome = Outcome {
                invalid: item.invalid.clone(),
                installed,
                installed_message,
                cycle,
                cycle_applies: item.kind == "DependencyRule",
            };
            writes.push((item.kind.to_string(), item.name.clone(), outcome));
        }
        let now = &now;
        let this = &*self;
        let failures = futures::stream::iter(writes)
            .map(
                |(kind, name, outcome): (String, String, Outcome)| async move {
                    let result = match kind.as_str() {
                        "ResourceProtection" => {
                            this.write_status(&this.rp, &name, &outcome, now).await
                        }
                        "AnchorRule" => this.write_status(&this.ar, &name, &outcome, now).await,
                        "DependencyRule" => this.write_status(&this.dr, &name, &outcome, now).await,
                        _ => this.write_status(&this.cs, &name, &outcome, now).await,
                    };
                    if let Err(e) = &result {
                        tracing::warn!(kind = %kind, name = %name, error = %e, "writing status failed");
                    }
                    result.is_err()
                },
            )
            .buffer_unordered(32)
            .filter(|failed| futures::future::ready(*failed))
            .count()
            .await;
        if failures > 0 {
            anyhow::bail!("{failures} status update(s) failed");
        }
        Ok(())
    }

    async fn write_status<K>(
        &self,
        store: &Store<K>,
        name: &str,
        outcome: &Outcome,
        now: &str,
    ) -> anyhow::Result<()>
    where
        K: Policy
            + Resource<DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug
            + serde::Serialize,
    {
        let Some(obj) = store.get(&reflector::ObjectRef::new(name)) else {
            return Ok(());
        };
        let generation = obj.meta().generation;
        let Some(status) = desired_status(
            generation,
            obj.observed_generation(),
            obj.conditions(),
            outcome,
            now,
        ) else {
            return Ok(());
        };
        let was_cycle = holdfast_shared::api::is_condition_true(
            obj.conditions(),
            holdfast_shared::api::condition_types::CYCLE_DETECTED,
        );
        let was_invalid = holdfast_shared::api::find_condition(
            obj.conditions(),
            holdfast_shared::api::condition_types::INVALID,
        )
        .map(|c| (c.status.clone(), c.reason.clone()));
        let api: Api<K> = Api::all(self.client.clone());
        match api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": status })),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let reference = obj.object_ref(&());
        if let Some(msg) = &outcome.cycle
            && !was_cycle
        {
            tracing::warn!(kind = %K::kind(&()), name, "{msg}");
            self.publish(&reference, "CycleDetected", "DetectCycle", msg)
                .await;
        }
        if let Some(inv) = &outcome.invalid
            && was_invalid != Some(("True".to_string(), inv.reason.to_string()))
        {
            tracing::warn!(kind = %K::kind(&()), name, reason = inv.reason, "invalid policy: {}", inv.message);
            self.publish(&reference, inv.reason, "Validate", &inv.message)
                .await;
        }
        Ok(())
    }

    async fn publish(
        &self,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let ev = Event {
            type_: EventType::Warning,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, reference).await {
            tracing::warn!(error = %e, reason, "emitting event failed");
        }
    }
}

/// Applies `desired` with server-side apply (field manager `holdfast`, forced);
/// if fields of other managers survive (a real API server keeps what it does not
/// own), replaces the object so it is exactly the desired one.
pub async fn apply_configuration(
    client: &Client,
    desired: &ValidatingWebhookConfiguration,
) -> anyhow::Result<ValidatingWebhookConfiguration> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut body = serde_json::to_value(desired)?;
    body["apiVersion"] = "admissionregistration.k8s.io/v1".into();
    body["kind"] = "ValidatingWebhookConfiguration".into();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api
        .patch(WEBHOOK_CONFIGURATION_NAME, &pp, &Patch::Apply(&body))
        .await?;
    if matches_desired(&applied, desired) {
        return Ok(applied);
    }
    tracing::info!("server-side apply left foreign fields; replacing {WEBHOOK_CONFIGURATION_NAME}");
    let mut replacement = desired.clone();
    replacement.metadata.resource_version = applied.metadata.resource_version.clone();
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    Ok(api
        .replace(WEBHOOK_CONFIGURATION_NAME, &pp, &replacement)
        .await?)
}

/// Deletes the configuration (cleanup on shutdown); absent is fine.
pub async fn delete_configuration(client: &Client) -> anyhow::Result<bool> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    match api
        .delete(WEBHOOK_CONFIGURATION_NAME, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e.into()),
    }
}
