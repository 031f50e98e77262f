//! The Kubernetes (and Karmada) topology: one ValidatingWebhookConfiguration
//! `holdfast`, recomputed from scratch from every policy object on each change
//! and kept true (drift reverted, deletion recreated) through a watch on it.
//!
//! Reflectors (kube-runtime) keep the four policy kinds and the configuration in
//! memory; every watch event wakes one reconcile loop, which computes the whole
//! desired state, applies it with server-side apply when the live object differs
//! and writes each policy's status when it changed.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Debug,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use holdfast_shared::policy::PolicyKind;
use holdfast_shared::selfprotection::{SELF_PROTECTION_NAME, SelfProtection};
use holdfast_shared::{
    api::{AnchorRule, CriticalService, DependencyRule, GroupResource, ResourceProtection},
    names::{FIELD_MANAGER, WEBHOOK_CONFIGURATION_NAME},
    watch::{Cache, NotFound, spawn_cache},
    webhookconfig::{
        InstallOptions, PolicyNeeds, anchor_rule_needs, critical_service_needs,
        dependency_rule_needs, describe_configuration, desired_configuration_for,
        is_policies_webhook, matches_desired, resource_protection_needs, routes,
    },
};
use k8s_openapi::{
    api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    kube_aggregator::pkg::apis::apiregistration::v1::APIService,
};
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::{ApiResource, DynamicObject},
    api::{DeleteParams, Patch, PatchParams, PostParams},
    runtime::{
        events::{Recorder, Reporter},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

use crate::{
    cycles::{RuleEdges, find_cycles},
    markers::Markers,
    policies::{
        ApiIndex, Invalid, check_anchor_rule, check_critical_service, check_dependency_rule,
        check_resource_protection,
    },
    reads,
    reconcile::{Failure, ReconcileError},
    status::{Outcome, desired_status, now_rfc3339},
};

#[path = "kubernetes/access.rs"]
mod access;
#[path = "kubernetes/guards.rs"]
mod guards;
#[path = "kubernetes/statuses.rs"]
mod statuses;
#[path = "kubernetes/watches.rs"]
mod watches;
pub use guards::{
    apply_configuration, delete_configuration, delete_self_protection, self_protection,
};

/// Timing of the Kubernetes reconciler.
pub(crate) mod timing {
    use std::time::Duration;
    /// A policy kind whose watch has not synced this long after start is looked up
    /// in discovery: when its CRD is not installed, reconciling goes on without it.
    pub const CRD_GRACE: Duration = Duration::from_secs(3);
    /// How often the initial sync is checked.
    pub const SYNC_POLL: Duration = Duration::from_millis(100);
    /// A failed discovery is retried at most this often.
    pub const DISCOVERY_RETRY: Duration = Duration::from_secs(10);
    /// A reads role granted but not effective yet is looked at again after this.
    pub const READS_RECHECK: Duration = Duration::from_millis(250);
    /// Refused reads are checked again after this (nothing watched announces RBAC changes).
    pub const RBAC_RECHECK: Duration = Duration::from_secs(5);
    /// A namespace marker that could not be set or removed (the webhook refused it
    /// while it could not verify the namespace's contents, say) is tried again after
    /// this, not on the next event or resync (doubling while it keeps failing).
    pub const MARKER_RETRY: Duration = Duration::from_secs(1);
}
use timing::*;

/// Starts a pass after `delay`.
pub(crate) fn wake_after(notify: &Arc<Notify>, delay: Duration) {
    let notify = notify.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        notify.notify_one();
    });
}

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
    /// The ValidatingAdmissionPolicy guarding holdfast's own installation (None:
    /// the controller's identity could not be found; then nothing is installed).
    pub self_protection: Option<SelfProtection>,
    /// Grant read of Secrets for label containment even when no policy names them.
    pub read_secrets: bool,
    /// Install the backstop ValidatingAdmissionPolicy (`--backstop`).
    pub backstop: bool,
}

/// Spawns a watch of `api` feeding a [`Cache`]; every change wakes `notify` and,
/// when given, raises `on_event`. A 404 means "not served": the Kubernetes API
/// server's discovery is authoritative.
fn spawn_watch<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: &Arc<Notify>,
    on_event: Option<Arc<AtomicBool>>,
) -> Cache<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let notify = notify.clone();
    let (cache, _task) = spawn_cache(api, cfg, NotFound::Empty, move || {
        if let Some(flag) = &on_event {
            flag.store(true, Ordering::SeqCst);
        }
        notify.notify_one();
    });
    cache
}

/// How many status writes a pass has in flight at once.
const STATUS_WRITES_IN_FLIGHT: usize = 32;

/// Reads an untyped object as `K` (its status, which the controller owns and
/// rewrites, is left out); the error says why it cannot be read.
pub fn decode<K: DeserializeOwned>(obj: &DynamicObject) -> Result<K, String> {
    let mut value = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    if let Some(m) = value.as_object_mut() {
        m.remove("status");
    }
    serde_json::from_value(value).map_err(|e| {
        format!(
            "the object does not match the {} schema: {e}",
            std::any::type_name::<K>()
                .rsplit("::")
                .next()
                .unwrap_or("policy")
        )
    })
}

/// The status an untyped object carries (lenient: unreadable parts count as absent).
pub fn current_status(obj: &DynamicObject) -> holdfast_shared::api::PolicyStatus {
    policy_status(&obj.data["status"])
}

/// [`current_status`] of an object's `status` alone.
pub fn policy_status(status: &serde_json::Value) -> holdfast_shared::api::PolicyStatus {
    holdfast_shared::api::PolicyStatus {
        observed_generation: status["observedGeneration"].as_i64(),
        conditions: serde_json::from_value(status["conditions"].clone()).unwrap_or_default(),
    }
}

/// The Kubernetes reconciler.
pub struct Reconciler {
    client: Client,
    settings: Settings,
    options: OptionsSource,
    /// The four policy kinds' watches.
    kinds: watches::PolicyWatches,
    vwc: Cache<ValidatingWebhookConfiguration>,
    notify: Arc<Notify>,
    discovery_dirty: Arc<AtomicBool>,
    index: ApiIndex,
    recorder: Recorder,
    markers: Markers,
    crds: Cache<CustomResourceDefinition>,
    /// The last failure to keep the reads role (logged once per change).
    reads_failure: Option<String>,
    /// Types the controller's identity was confirmed to list and watch (the
    /// aggregated role follows its parts asynchronously).
    confirmed: BTreeSet<GroupResource>,
    /// The last failure to keep the anchor-sources Role (logged once per change).
    sources_failure: Option<String>,
    sources: crate::sources::SourceProbes,
    api_services: Cache<APIService>,
    /// The types deferred deletion watches (those policies protect, namespaces).
    deferred: watch::Sender<BTreeMap<GroupResource, crate::deferred::DeferredType>>,
    /// Set once the first reconcile succeeded.
    pub ready: Arc<AtomicBool>,
    /// 1 while the API server refuses the configuration `holdfast` (set by `run`).
    metrics: Option<crate::reconcile::Metrics>,
    /// Watches of the backstop policy and binding, started once the API server
    /// is known to serve them.
    backstop: Option<crate::backstop::Watches>,
    /// Whether the API server serves ValidatingAdmissionPolicies (v1), and when
    /// that was last asked.
    backstop_served: Option<(bool, std::time::Instant)>,
    /// When discovery last failed (retried at most every [`DISCOVERY_RETRY`]).
    discovery_failed_at: Option<std::time::Instant>,
}

impl crate::reconcile::Reconcile for Reconciler {
    const TOPOLOGY: &'static str = "kubernetes";

    fn triggers(&self) -> crate::reconcile::Triggers {
        crate::reconcile::Triggers::new(&self.notify, &self.options)
    }

    fn idle_wait(&self) -> Duration {
        self.settings.resync
    }

    fn on_resync(&mut self) {
        self.discovery_dirty.store(true, Ordering::SeqCst);
    }

    async fn reconcile(&mut self) -> Result<(), ReconcileError> {
        self.refresh_discovery().await;
        self.reconcile_once().await
    }
}

/// One policy, kind-erased.
struct Item {
    /// Its kind.
    kind: PolicyKind,
    name: String,
    invalid: Option<Invalid>,
    needs: Vec<GroupResource>,
    /// The types it needs read (also while invalid, when it decodes).
    reads: BTreeSet<GroupResource>,
    /// The anchor source's condition (AnchorRules naming another cluster).
    source: Option<crate::status::SourceCondition>,
}

/// What one policy object asks for, as [`Reconciler::check`] finds it.
struct Checked {
    invalid: Option<Invalid>,
    needs: Vec<GroupResource>,
    reads: Vec<GroupResource>,
}

impl Checked {
    fn new(invalid: Option<Invalid>, needs: Vec<GroupResource>, reads: Vec<GroupResource>) -> Self {
        Self {
            invalid,
            needs,
            reads,
        }
    }
}

/// Phase one of a pass: every policy object, what the valid ones need routed and
/// the DependencyRules' edges.
struct Gathered {
    items: Vec<Item>,
    needs: PolicyNeeds,
    edges: Vec<RuleEdges>,
}

/// Phase two: what holdfast may read.
#[derive(Default)]
struct Reads {
    /// What the marker watches cover (`None`: every type, the reads role is not in use).
    covered: Option<BTreeSet<GroupResource>>,
    /// The reads role could not be kept: why, and the wanted types it does not grant.
    refused: Option<(String, BTreeSet<GroupResource>)>,
    /// Granted, but some wanted type is not readable yet (the aggregation lags).
    pending: bool,
}

/// Phase four's result for one policy object: the status to write.
struct StatusWrite {
    kind: PolicyKind,
    name: String,
    outcome: Outcome,
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
        let kinds = watches::PolicyWatches::start(&client, &notify);
        let vwc = spawn_watch(
            Api::all(client.clone()),
            watcher::Config::default()
                .fields(&format!("metadata.name={WEBHOOK_CONFIGURATION_NAME}")),
            &notify,
            None,
        );
        // CRDs coming and going change what discovery knows.
        let crds: Cache<CustomResourceDefinition> = spawn_watch(
            Api::all(client.clone()),
            cfg.clone(),
            &notify,
            Some(discovery_dirty.clone()),
        );
        // So do APIServices (aggregated APIs, whose requests no webhook sees).
        let api_services: Cache<APIService> = spawn_watch(
            Api::all(client.clone()),
            cfg,
            &notify,
            Some(discovery_dirty.clone()),
        );
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::status::EVENT_REPORTER.into(),
                instance: Some(settings.instance.clone()),
            },
        );
        let markers = Markers::new(client.clone(), notify.clone());
        let sources = crate::sources::SourceProbes::start(client.clone(), notify.clone());
        Self {
            client,
            settings,
            options,
            kinds,
            vwc,
            notify,
            discovery_dirty,
            index: ApiIndex::default(),
            recorder,
            markers,
            crds,
            reads_failure: None,
            confirmed: BTreeSet::new(),
            sources_failure: None,
            sources,
            api_services,
            deferred: watch::Sender::new(BTreeMap::new()),
            ready,
            metrics: None,
            backstop: None,
            backstop_served: None,
            discovery_failed_at: None,
        }
    }

    /// Runs until `shutdown` turns true, counting passes in `metrics`.
    pub async fn run(
        mut self,
        shutdown: tokio_util::sync::CancellationToken,
        metrics: crate::reconcile::Metrics,
    ) -> anyhow::Result<()> {
        // Never compute from half-filled caches: an empty cache would remove webhooks.
        // A policy kind whose CRD is not installed at all cannot sync; once discovery
        // confirms that, go on without it (its watch keeps retrying and catches up
        // when the CRD appears), so label protection does not wait for the CRDs.
        let started = std::time::Instant::now();
        loop {
            let mut unready = Vec::new();
            for (_, k) in self.kinds.iter() {
                if !k.store.synced() {
                    unready.push(k.ar.clone());
                }
            }
            // Discovery leaves aggregated APIs out: know them first.
            let vwc_ready = self.vwc.synced() && self.api_services.synced();
            if unready.is_empty() && vwc_ready {
                break;
            }
            if vwc_ready && started.elapsed() > CRD_GRACE {
                match ApiIndex::discover(&self.client, &self.aggregated_groups()).await {
                    Ok(index) => {
                        let missing = unready
                            .iter()
                            .all(|ar| !index.serves(&GroupResource::new(&ar.group, &ar.plural)));
                        self.index = index;
                        self.discovery_dirty.store(false, Ordering::SeqCst);
                        if missing {
                            let kinds: Vec<&str> =
                                unready.iter().map(|a| a.kind.as_str()).collect();
                            tracing::warn!(
                                ?kinds,
                                "holdfast CRDs not installed: reconciling without these kinds until they appear"
                            );
                            break;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "discovery failed"),
                }
            }
            tokio::select! {
                () = tokio::time::sleep(SYNC_POLL) => {}
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
        let absent: Vec<&str> = self
            .kinds
            .iter()
            .filter(|(_, k)| k.store.not_served())
            .map(|(_, k)| k.ar.kind.as_str())
            .collect();
        if !absent.is_empty() {
            tracing::warn!(
                kinds = ?absent,
                "holdfast CRDs not installed: reconciling without these kinds until they appear"
            );
        }
        tracing::info!("caches synced; reconciling");
        let deferred = tokio::spawn(crate::deferred::run(
            self.client.clone(),
            self.recorder.clone(),
            self.deferred.subscribe(),
            shutdown.clone(),
        ));
        let ready = self.ready.clone();
        self.metrics = Some(metrics.clone());
        crate::reconcile::run(&mut self, &metrics, &ready, shutdown).await;
        deferred.abort();
        Ok(())
    }

    /// Refreshes the discovery index when it is dirty. A failing discovery (an
    /// unavailable aggregated API, say) is retried at most every
    /// [`DISCOVERY_RETRY`], so it never slows every pass down.
    async fn refresh_discovery(&mut self) {
        let may_discover = self
            .discovery_failed_at
            .is_none_or(|t| t.elapsed() > DISCOVERY_RETRY);
        if !may_discover || !self.discovery_dirty.swap(false, Ordering::SeqCst) {
            return;
        }
        match ApiIndex::discover(&self.client, &self.aggregated_groups()).await {
            Ok(index) => {
                tracing::debug!(resources = index.len(), "discovery refreshed");
                self.index = index;
                self.discovery_failed_at = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "discovery failed; keeping the previous view");
                self.discovery_dirty.store(true, Ordering::SeqCst);
                self.discovery_failed_at = Some(std::time::Instant::now());
            }
        }
    }

    /// The APIServices backed by a service (aggregated APIs): `(group, name)`.
    fn aggregated(&self) -> Vec<(String, String)> {
        self.api_services
            .state()
            .iter()
            .filter(|a| a.spec.as_ref().is_some_and(|s| s.service.is_some()))
            .filter_map(|a| Some((a.spec.as_ref()?.group.clone()?, a.name_any())))
            .collect()
    }

    /// The groups of [`Self::aggregated`].
    fn aggregated_groups(&self) -> Vec<String> {
        self.aggregated().into_iter().map(|(g, _)| g).collect()
    }

    /// Phase one: decodes and checks every policy object (see [`Gathered`]).
    fn gather(&self) -> Gathered {
        let mut items = Vec::new();
        let mut needs = PolicyNeeds::default();
        let mut edges = Vec::new();
        let mut probes = std::collections::HashSet::new();
        for (kind, watch) in self.kinds.iter() {
            for obj in watch.store.state() {
                let name = obj.name_any();
                let mut source = None;
                let checked = match kind {
                    PolicyKind::ResourceProtection => {
                        self.check(&obj, &mut needs, |p: &ResourceProtection, index, needs| {
                            let invalid = check_resource_protection(p, index);
                            if invalid.is_none() {
                                needs.add_resource_protection(p);
                            }
                            Checked::new(
                                invalid,
                                resource_protection_needs(p),
                                reads::resource_protection_reads(p),
                            )
                        })
                    }
                    PolicyKind::AnchorRule => {
                        self.check(&obj, &mut needs, |p: &AnchorRule, index, needs| {
                            let invalid = check_anchor_rule(p, index);
                            if invalid.is_none() {
                                needs.add_anchor_rule(p);
                                if let Some(s) = &p.spec.anchor_source {
                                    let r = &s.kubeconfig_secret_ref;
                                    let key = (
                                        holdfast_shared::registry::AnchorSourceRef {
                                            namespace: r.namespace.clone(),
                                            name: r.name.clone(),
                                            key: r.key.clone(),
                                        },
                                        p.spec.anchor.clone(),
                                    );
                                    source = Some(self.sources.condition(&key.0, &key.1));
                                    probes.insert(key);
                                }
                            }
                            Checked::new(invalid, anchor_rule_needs(p), reads::anchor_rule_reads(p))
                        })
                    }
                    PolicyKind::DependencyRule => {
                        self.check(&obj, &mut needs, |p: &DependencyRule, index, needs| {
                            let invalid = check_dependency_rule(p, index, true);
                            if invalid.is_none() {
                                needs.add_dependency_rule(p);
                                edges.push(RuleEdges::of(p.name_any(), p));
                            }
                            Checked::new(
                                invalid,
                                dependency_rule_needs(p),
                                reads::dependency_rule_reads(p),
                            )
                        })
                    }
                    PolicyKind::CriticalService => {
                        self.check(&obj, &mut needs, |p: &CriticalService, index, needs| {
                            let invalid = check_critical_service(p, index);
                            if invalid.is_none() {
                                needs.add_critical_service(p);
                            }
                            Checked::new(
                                invalid,
                                critical_service_needs(p),
                                reads::critical_service_reads(p, index),
                            )
                        })
                    }
                };
                items.push(Item {
                    kind,
                    name,
                    invalid: checked.invalid,
                    needs: checked.needs,
                    reads: checked.reads.into_iter().collect(),
                    source,
                });
            }
        }
        self.sources.want(&probes);
        let index = &self.index;
        Gathered {
            items,
            needs: needs.with_containment(|gr| index.scope(gr)),
            edges,
        }
    }

    /// The types served by CRDs (their instances are read when a CRD is deleted).
    fn crd_types(&self) -> Vec<GroupResource> {
        self.crds
            .state()
            .iter()
            .map(|c| GroupResource::new(&c.spec.group, &c.spec.names.plural))
            .collect()
    }

    /// Decodes `obj` as `K` and runs `f` on it; an object the types cannot read is
    /// invalid (and needs nothing).
    fn check<K, F>(&self, obj: &DynamicObject, needs: &mut PolicyNeeds, mut f: F) -> Checked
    where
        K: DeserializeOwned,
        F: FnMut(&K, &ApiIndex, &mut PolicyNeeds) -> Checked,
    {
        match decode::<K>(obj) {
            Ok(p) => f(&p, &self.index, needs),
            Err(message) => Checked {
                invalid: Some(Invalid {
                    reason: crate::policies::reasons::INVALID_SPEC,
                    message,
                }),
                needs: Vec::new(),
                reads: Vec::new(),
            },
        }
    }

    /// One pass, in phases: holdfast's own guards; [`Self::gather`] the policies;
    /// [`Self::keep_all_reads`]; [`Self::keep_configuration`]; the
    /// [`Self::status_writes`], written by [`Self::write_statuses`].
    async fn reconcile_once(&mut self) -> Result<(), ReconcileError> {
        self.keep_guards().await;
        let aggregated = self.aggregated();
        self.index.set_aggregated(aggregated);
        let mut gathered = self.gather();
        let reads = self
            .keep_all_reads(&gathered.items, &mut gathered.needs)
            .await;
        self.publish_deferred_types(&gathered.needs.delete);
        // A configuration the API server refuses must be loud: every policy it
        // would have routed says so (condition and Event), the metric is set, and
        // the pass fails (retried with backoff); what the live configuration still
        // routes stays enforced.
        let (live, refused) = match self.keep_configuration(&gathered.needs).await {
            Ok(live) => (live, None),
            Err(ReconcileError::Configuration { source }) => {
                let live = self
                    .vwc
                    .state()
                    .into_iter()
                    .find(|c| c.name_any() == WEBHOOK_CONFIGURATION_NAME)
                    .map(|l| (*l).clone())
                    .unwrap_or_default();
                (live, Some(source))
            }
            Err(e) => return Err(e),
        };
        self.metrics_refused(refused.is_some());
        // Said with all its causes, as the pass's error says it.
        let message = refused.as_ref().map(|e| format!("{e:#}"));
        let writes = self.status_writes(&gathered, &live, &reads, message.as_deref());
        self.metrics_policies(&writes);
        self.write_statuses(writes).await?;
        match refused {
            Some(source) => Err(ReconcileError::Configuration { source }),
            None => Ok(()),
        }
    }

    /// Phase three: the configuration `holdfast` as the policies need it, applied
    /// when the live one differs; returns the live configuration.
    async fn keep_configuration(
        &self,
        needs: &PolicyNeeds,
    ) -> Result<ValidatingWebhookConfiguration, ReconcileError> {
        let opts = self.options.borrow().clone();
        let desired =
            desired_configuration_for(&self.settings.labels, self.settings.strict, needs, &opts);
        let live = self
            .vwc
            .state()
            .into_iter()
            .find(|c| c.name_any() == WEBHOOK_CONFIGURATION_NAME);
        match live {
            Some(l) if matches_desired(&l, &desired) => Ok((*l).clone()),
            other => {
                let what = if other.is_some() {
                    "updating (drift or change)"
                } else {
                    "creating"
                };
                tracing::info!(
                    webhooks = desired.webhooks.as_ref().map_or(0, Vec::len),
                    protected = needs.delete.len(),
                    containment = ?needs.containment,
                    "{what} ValidatingWebhookConfiguration {WEBHOOK_CONFIGURATION_NAME}; it routes:\n{}",
                    describe_configuration(&desired)
                );
                apply_configuration(&self.client, &desired)
                    .await
                    .map_err(|source| ReconcileError::Configuration { source })
            }
        }
    }

    /// Keeps the types deferred deletion watches: `delete` (the types policies
    /// protect) and namespaces, as discovery serves them.
    fn publish_deferred_types(&self, delete: &BTreeSet<GroupResource>) {
        let types: BTreeMap<GroupResource, crate::deferred::DeferredType> = delete
            .iter()
            .map(|gr| self.index.plural(gr))
            .chain([GroupResource::new("", "namespaces")])
            .filter_map(|gr| {
                let (ar, namespaced) = self.index.preferred_resource(&gr)?.clone();
                Some((
                    gr,
                    crate::deferred::DeferredType {
                        resource: ar,
                        namespaced,
                    },
                ))
            })
            .collect();
        self.deferred.send_if_modified(|t| {
            let changed = *t != types;
            if changed {
                *t = types;
            }
            changed
        });
    }

    async fn publish(
        &self,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let ev = crate::status::warning_event(reason, action, note);
        if let Err(e) = self.recorder.publish(&ev, reference).await {
            tracing::warn!(error = %e, reason, "emitting event failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_objects_decode_to_an_error_not_a_panic() {
        let ok: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
            "metadata": {"name": "a", "generation": 3},
            "spec": {"resources": [{"version": "v1", "resource": "configmaps"}]},
            "status": {"observedGeneration": 2, "conditions": "garbage"}
        }))
        .expect("object");
        let rp: ResourceProtection = decode(&ok).expect("decodes");
        assert_eq!(rp.spec.resources[0].resource, "configmaps");
        let st = current_status(&ok);
        assert_eq!(st.observed_generation, Some(2));
        assert!(
            st.conditions.is_empty(),
            "unreadable conditions count as absent"
        );
        let bad: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "holdfast.dev/v1alpha1", "kind": "ResourceProtection",
            "metadata": {"name": "b"},
            "spec": {"enforcement": "Sometimes", "resources": "all"}
        }))
        .expect("object");
        let err = decode::<ResourceProtection>(&bad).expect_err("unreadable");
        assert!(err.contains("ResourceProtection schema"), "{err}");
    }
}
