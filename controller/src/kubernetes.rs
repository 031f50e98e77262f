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
    reconcile::ReconcileError,
    status::{Outcome, desired_status, now_rfc3339},
};

/// Timing of the Kubernetes reconciler.
mod timing {
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
}
use timing::*;

/// Starts a pass after `delay`.
fn wake_after(notify: &Arc<Notify>, delay: Duration) {
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

/// The self-protection of the installation: the controller's identity (a
/// SelfSubjectReview), `admin_groups`, and the namespace it runs in
/// (`$POD_NAMESPACE`, else `holdfast-system`).
pub async fn self_protection(client: &Client, admin_groups: &[String]) -> Option<SelfProtection> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = SelfSubjectReview::default();
    let identity = match api.create(&PostParams::default(), &review).await {
        Ok(r) => r
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot learn the controller's identity (SelfSubjectReview); holdfast's installation is not guarded by a ValidatingAdmissionPolicy");
            None
        }
    }?;
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "holdfast-system".to_string());
    tracing::info!(%identity, admin_groups = ?admin_groups, %namespace, "guarding holdfast's installation with ValidatingAdmissionPolicy {SELF_PROTECTION_NAME}");
    Some(SelfProtection {
        identity,
        admin_groups: admin_groups.to_vec(),
        namespace,
    })
}

/// Installs (or restores) the self-protection policy and its binding when they
/// are missing or differ, with server-side apply.
async fn ensure_self_protection(client: &Client, sp: &SelfProtection) -> anyhow::Result<()> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let want = sp.policy();
    let live = policies.get_opt(SELF_PROTECTION_NAME).await?;
    if live.as_ref().map(|l| &l.spec) != Some(&want.spec) {
        tracing::info!("applying ValidatingAdmissionPolicy {SELF_PROTECTION_NAME}");
        crate::backstop::apply(client, SELF_PROTECTION_NAME, &want).await?;
    }
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let want = sp.binding();
    let live = bindings.get_opt(SELF_PROTECTION_NAME).await?;
    let same = live.as_ref().is_some_and(|l| {
        l.spec.policy_name == want.spec.policy_name
            && l.spec.validation_actions == want.spec.validation_actions
            && l.spec.match_resources.is_none()
            && l.spec.param_ref.is_none()
    });
    if !same {
        tracing::info!("applying ValidatingAdmissionPolicyBinding {SELF_PROTECTION_NAME}");
        crate::backstop::apply(client, SELF_PROTECTION_NAME, &want).await?;
    }
    Ok(())
}

/// Deletes the self-protection binding and policy (cleanup on shutdown).
pub async fn delete_self_protection(client: &Client) {
    crate::backstop::delete_policy_and_binding(
        client,
        SELF_PROTECTION_NAME,
        "the self-protection policy",
    )
    .await;
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

/// Index of DependencyRules in `Reconciler::kinds` (the kind with CycleDetected).
const DEPENDENCY_RULES: usize = 2;
/// How many status writes a pass has in flight at once.
const STATUS_WRITES_IN_FLIGHT: usize = 32;

/// One policy kind, watched as untyped objects.
struct PolicyKind {
    ar: ApiResource,
    store: Cache<DynamicObject>,
}

impl PolicyKind {
    fn new<K>(client: &Client, notify: &Arc<Notify>) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        let ar = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let store = spawn_watch(api, watcher::Config::default(), notify, None);
        Self { ar, store }
    }
}

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
    let status = &obj.data["status"];
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
    /// The four policy kinds, watched untyped so that one object the Rust types
    /// cannot read is reported Invalid instead of breaking the whole watch.
    kinds: Vec<PolicyKind>,
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
    /// Index into `Reconciler::kinds`.
    kind: usize,
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
    kind: usize,
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
        let kinds = vec![
            PolicyKind::new::<ResourceProtection>(&client, &notify),
            PolicyKind::new::<AnchorRule>(&client, &notify),
            PolicyKind::new::<DependencyRule>(&client, &notify),
            PolicyKind::new::<CriticalService>(&client, &notify),
        ];
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
        mut shutdown: watch::Receiver<bool>,
        metrics: crate::reconcile::Metrics,
    ) -> anyhow::Result<()> {
        // Never compute from half-filled caches: an empty cache would remove webhooks.
        // A policy kind whose CRD is not installed at all cannot sync; once discovery
        // confirms that, go on without it (its watch keeps retrying and catches up
        // when the CRD appears), so label protection does not wait for the CRDs.
        let started = std::time::Instant::now();
        loop {
            let mut unready = Vec::new();
            for k in &self.kinds {
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
                _ = shutdown.changed() => return Ok(()),
            }
        }
        let absent: Vec<&str> = self
            .kinds
            .iter()
            .filter(|k| k.store.not_served())
            .map(|k| k.ar.kind.as_str())
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
        for (k, kind) in self.kinds.iter().enumerate() {
            for obj in kind.store.state() {
                let name = obj.name_any();
                let mut source = None;
                let checked = match k {
                    0 => self.check(&obj, &mut needs, |p: &ResourceProtection, index, needs| {
                        let invalid = check_resource_protection(p, index);
                        if invalid.is_none() {
                            needs.add_resource_protection(p);
                        }
                        Checked::new(
                            invalid,
                            resource_protection_needs(p),
                            reads::resource_protection_reads(p),
                        )
                    }),
                    1 => self.check(&obj, &mut needs, |p: &AnchorRule, index, needs| {
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
                    }),
                    2 => self.check(&obj, &mut needs, |p: &DependencyRule, index, needs| {
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
                    }),
                    _ => self.check(&obj, &mut needs, |p: &CriticalService, index, needs| {
                        let invalid = check_critical_service(p, index);
                        if invalid.is_none() {
                            needs.add_critical_service(p);
                        }
                        Checked::new(
                            invalid,
                            critical_service_needs(p),
                            reads::critical_service_reads(p, index),
                        )
                    }),
                };
                items.push(Item {
                    kind: k,
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

    /// Keeps the anchor-sources Role equal to the Secrets AnchorRules name; a failure
    /// is logged once per change (the sources then report the refused read).
    async fn keep_source_reads(&mut self) {
        let namespace = holdfast_shared::anchorsource::allowed_namespace();
        let secrets = self.sources.secrets_in(&namespace);
        let failure = reads::keep_sources(&self.client, &namespace, &secrets)
            .await
            .err();
        if failure != self.sources_failure {
            if let Some(e) = &failure {
                tracing::warn!(error = %e, "cannot keep the anchor-sources Role; anchor sources stay unreadable");
            }
            self.sources_failure = failure;
        }
    }

    /// Keeps the reads role; returns what the marker watches cover (None: every
    /// type, the role is not in use) and, when the role could not be kept, why and
    /// the wanted types it does not grant.
    async fn keep_reads(&mut self, policy: &BTreeSet<GroupResource>) -> Reads {
        if !self.index.loaded {
            return Reads::default();
        }
        let wanted = reads::wanted(
            &self.index,
            policy,
            self.crd_types(),
            self.settings.read_secrets,
        );
        match reads::keep(&self.client, &wanted).await {
            reads::Kept::Unmanaged => {
                self.reads_failure = None;
                Reads::default()
            }
            reads::Kept::Granted => {
                self.reads_failure = None;
                // Watch only what the identity can read already: a type granted a
                // moment ago waits for the aggregation (the caller routes every
                // namespace DELETE meanwhile, and retries).
                self.confirmed.retain(|gr| wanted.contains(gr));
                let unconfirmed: Vec<GroupResource> =
                    wanted.difference(&self.confirmed).cloned().collect();
                let client = &self.client;
                let checks = futures::future::join_all(
                    unconfirmed
                        .iter()
                        .map(|gr| async move { (gr.clone(), reads::may_read(client, gr).await) }),
                )
                .await;
                for (gr, ok) in checks {
                    if ok {
                        self.confirmed.insert(gr);
                    }
                }
                Reads {
                    pending: wanted.iter().any(|gr| !self.confirmed.contains(gr)),
                    covered: Some(self.confirmed.clone()),
                    refused: None,
                }
            }
            reads::Kept::Failed { error, held } => {
                if self.reads_failure.as_ref() != Some(&error) {
                    tracing::warn!(%error, "cannot grant holdfast the reads its policies need; policies needing a type it cannot read are reported not installed");
                    self.reads_failure = Some(error.clone());
                }
                // Missing: what the role does not grant and holdfast cannot read
                // otherwise either (an administrator may grant it by hand, through
                // a ClusterRole labelled for holdfast-reads).
                let client = &self.client;
                let checks = futures::future::join_all(
                    wanted
                        .difference(&held)
                        .map(|gr| async move { (gr.clone(), reads::may_read(client, gr).await) }),
                )
                .await;
                let missing: BTreeSet<GroupResource> = checks
                    .into_iter()
                    .filter(|(_, readable)| !readable)
                    .map(|(gr, _)| gr)
                    .collect();
                // Look again shortly: nothing the controller watches announces a
                // change of RBAC.
                wake_after(&self.notify, RBAC_RECHECK);
                // The marker watches still cover everything wanted: one refused
                // keeps namespace DELETEs routed everywhere (fail closed).
                Reads {
                    covered: Some(wanted),
                    refused: Some((error, missing)),
                    pending: false,
                }
            }
        }
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

    /// Installs, updates or removes the backstop (see [`crate::backstop`]);
    /// failures are logged, never fatal (the webhook still protects).
    async fn keep_backstop(&mut self) {
        let strict_exempt = if self.settings.strict {
            self.crds
                .state()
                .iter()
                .filter(|c| {
                    c.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(holdfast_shared::names::STRICT_EXEMPT_LABEL))
                        .is_some_and(|v| v == "true")
                })
                .map(|c| (c.spec.group.clone(), c.spec.names.plural.clone()))
                .collect()
        } else {
            Default::default()
        };
        let want = crate::backstop::Backstop {
            labels: self.settings.labels.clone(),
            strict: self.settings.strict,
            strict_exempt,
        };
        let wanted = self.settings.backstop && !want.validations().is_empty();
        if !wanted {
            self.metrics_backstop_missing(false);
        }
        // Where the API server does not serve them, there is nothing to install
        // or remove; asked again every resync.
        let stale = self
            .backstop_served
            .is_none_or(|(served, at)| !served && at.elapsed() >= self.settings.resync);
        if stale {
            match crate::backstop::served(&self.client).await {
                Ok(served) => {
                    if !served && wanted && self.backstop_served.is_none() {
                        tracing::warn!(
                            "the API server does not serve {} ValidatingAdmissionPolicies; the backstop is not installed (label protection relies on the webhook alone)",
                            crate::backstop::GROUP_VERSION
                        );
                    }
                    self.backstop_served = Some((served, std::time::Instant::now()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "discovery of ValidatingAdmissionPolicies failed; the backstop is not checked this pass");
                    return;
                }
            }
        }
        if !self.backstop_served.is_some_and(|(served, _)| served) {
            self.metrics_backstop_missing(wanted);
            return;
        }
        let watches = self
            .backstop
            .get_or_insert_with(|| crate::backstop::Watches::start(&self.client, &self.notify));
        let name = holdfast_shared::backstop::BACKSTOP_NAME;
        if wanted {
            let installed = crate::backstop::ensure(&self.client, watches, &want).await;
            if let Err(e) = &installed {
                tracing::warn!(error = %format!("{e:#}"), "cannot install the backstop ValidatingAdmissionPolicy {name}");
            }
            self.metrics_backstop_missing(installed.is_err());
        } else if let Err(e) = crate::backstop::remove(&self.client, watches).await {
            tracing::warn!(error = %format!("{e:#}"), "cannot remove the backstop ValidatingAdmissionPolicy {name}");
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
            Err(ReconcileError::Configuration(message)) => {
                let live = self
                    .vwc
                    .state()
                    .into_iter()
                    .find(|c| c.name_any() == WEBHOOK_CONFIGURATION_NAME)
                    .map(|l| (*l).clone())
                    .unwrap_or_default();
                (live, Some(message))
            }
            Err(e) => return Err(e),
        };
        self.metrics_refused(refused.is_some());
        let writes = self.status_writes(&gathered, &live, &reads, refused.as_deref());
        self.metrics_policies(&writes);
        self.write_statuses(writes).await?;
        match refused {
            Some(message) => Err(ReconcileError::Configuration(message)),
            None => Ok(()),
        }
    }

    fn metrics_refused(&self, refused: bool) {
        if let Some(m) = &self.metrics {
            m.configuration_refused.set(i64::from(refused));
        }
    }

    /// Counts the policies of `writes` by kind and Ready reason.
    fn metrics_policies(&self, writes: &[StatusWrite]) {
        if let Some(m) = &self.metrics {
            m.set_policies(writes.iter().map(|w| {
                (
                    self.kinds[w.kind].ar.kind.as_str(),
                    crate::status::ready_reason(&w.outcome),
                )
            }));
        }
    }

    fn metrics_backstop_missing(&self, missing: bool) {
        if let Some(m) = &self.metrics {
            m.backstop_missing.set(i64::from(missing));
        }
    }

    /// Keeps holdfast's own guards: the self-protection policy and the backstop.
    /// Failures are logged; the webhook still protects.
    async fn keep_guards(&mut self) {
        if let Some(sp) = &self.settings.self_protection
            && let Err(e) = ensure_self_protection(&self.client, sp).await
        {
            tracing::warn!(error = %format!("{e:#}"), "cannot install ValidatingAdmissionPolicy {SELF_PROTECTION_NAME}; holdfast's installation is not guarded");
        }
        self.keep_backstop().await;
    }

    /// Phase two: keeps the roles that let holdfast read what the policies name,
    /// and the marker watches over what it may read (which decide the namespace
    /// containment routed in `needs`).
    async fn keep_all_reads(&mut self, items: &[Item], needs: &mut PolicyNeeds) -> Reads {
        self.keep_source_reads().await;
        let policy: BTreeSet<GroupResource> =
            items.iter().flat_map(|i| i.reads.iter().cloned()).collect();
        let reads = self.keep_reads(&policy).await;
        let keys: Vec<String> = self.settings.labels.iter().map(|l| l.key.clone()).collect();
        needs.containment = self
            .markers
            .sync(&self.index, &needs.routes, &keys, reads.covered.as_ref())
            .await;
        if reads.pending {
            // Granted but not effective yet: route every namespace DELETE and look
            // again shortly.
            needs.containment = holdfast_shared::webhookconfig::Containment::Everywhere;
            wake_after(&self.notify, READS_RECHECK);
        }
        reads
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
                    .map_err(|e| ReconcileError::configuration(&e))
            }
        }
    }

    /// Phase four: each policy object's outcome (valid, routed by the live
    /// configuration, readable, in a cycle, ...).
    fn status_writes(
        &self,
        gathered: &Gathered,
        live: &ValidatingWebhookConfiguration,
        reads: &Reads,
        refused: Option<&str>,
    ) -> Vec<StatusWrite> {
        let cycles = find_cycles(&gathered.edges);
        let policies_webhooks: Vec<&str> = live
            .webhooks
            .iter()
            .flatten()
            .map(|h| h.name.as_str())
            .filter(|n| is_policies_webhook(n))
            .collect();
        let mut writes = Vec::with_capacity(gathered.items.len());
        for item in &gathered.items {
            let mut via: BTreeSet<&str> = BTreeSet::new();
            let mut missing: Vec<String> = Vec::new();
            for gr in &item.needs {
                let hooks: Vec<&str> = policies_webhooks
                    .iter()
                    .copied()
                    .filter(|h| routes(live, h, "DELETE", gr))
                    .collect();
                if hooks.is_empty() {
                    missing.push(gr.to_string());
                }
                via.extend(hooks);
            }
            let cannot_read: Vec<String> = match &reads.refused {
                Some((_, missing)) => item
                    .reads
                    .iter()
                    .filter(|gr| missing.contains(*gr))
                    .map(ToString::to_string)
                    .collect(),
                None => Vec::new(),
            };
            let installed = missing.is_empty() && cannot_read.is_empty();
            let set: BTreeSet<String> = item.needs.iter().map(ToString::to_string).collect();
            let installed_message = if let (false, Some((error, _))) =
                (cannot_read.is_empty(), &reads.refused)
            {
                format!(
                    "holdfast may not read {} (get, list, watch), so its DELETEs are refused: {error}; \
                     grant the controller escalate on ClusterRole {}, or add a ClusterRole labelled {}=true granting it",
                    cannot_read.join(", "),
                    reads::READS_ROLE,
                    reads::AGGREGATE_LABEL
                )
            } else if installed {
                let routed = crate::status::routed_message(set, via);
                if item
                    .needs
                    .iter()
                    .any(holdfast_shared::unreviewed::is_wildcard)
                {
                    format!("{routed}; {}", holdfast_shared::unreviewed::WILDCARD_LIMITS)
                } else {
                    routed
                }
            } else {
                crate::status::not_routed_message(&missing)
            };
            let cycle = cycles
                .get(&item.name)
                .filter(|_| item.kind == DEPENDENCY_RULES)
                .map(|c| c.message());
            let never: Vec<String> = item
                .needs
                .iter()
                .filter_map(|gr| self.index.not_admission_controlled(gr))
                .collect();
            let outcome = Outcome {
                not_admitted: (!never.is_empty()).then(|| never.join("; ")),
                invalid: item.invalid.clone(),
                installed,
                installed_message,
                cycle,
                cycle_applies: item.kind == DEPENDENCY_RULES,
                source: item.source.clone(),
                // Only what the live configuration does not route: the rest is
                // still enforced by it.
                blocked: refused.filter(|_| !missing.is_empty()).map(|m| {
                    (
                        crate::status::CONFIGURATION_REFUSED,
                        crate::status::refused_message(m),
                    )
                }),
                // (kube-apiserver: no probe; see docs/decisions.md.)
                not_enforced: None,
            };
            writes.push(StatusWrite {
                kind: item.kind,
                name: item.name.clone(),
                outcome,
            });
        }
        writes
    }

    /// Phase five: writes the statuses that changed, a bounded number at a time.
    async fn write_statuses(&self, writes: Vec<StatusWrite>) -> Result<(), ReconcileError> {
        let now = &now_rfc3339();
        let failures = futures::stream::iter(writes)
            .map(|w| async move {
                let result = self.write_status(w.kind, &w.name, &w.outcome, now).await;
                if let Err(e) = &result {
                    tracing::warn!(kind = %self.kinds[w.kind].ar.kind, name = %w.name, error = %e, "writing status failed");
                }
                result.is_err()
            })
            .buffer_unordered(STATUS_WRITES_IN_FLIGHT)
            .filter(|failed| futures::future::ready(*failed))
            .count()
            .await;
        if failures > 0 {
            return Err(ReconcileError::Status(format!(
                "{failures} status update(s) failed"
            )));
        }
        Ok(())
    }

    async fn write_status(
        &self,
        kind: usize,
        name: &str,
        outcome: &Outcome,
        now: &str,
    ) -> anyhow::Result<()> {
        let pk = &self.kinds[kind];
        let Some(obj) = pk.store.get("", "", name) else {
            return Ok(());
        };
        let current = current_status(&obj);
        let generation = obj.metadata.generation;
        let Some(status) = desired_status(
            generation,
            current.observed_generation,
            &current.conditions,
            outcome,
            now,
        ) else {
            return Ok(());
        };
        let was_cycle = holdfast_shared::api::is_condition_true(
            &current.conditions,
            holdfast_shared::api::condition_types::CYCLE_DETECTED,
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &pk.ar);
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
        let reference = obj.object_ref(&pk.ar);
        if let Some(msg) = &outcome.cycle
            && !was_cycle
        {
            tracing::warn!(kind = %pk.ar.kind, name, "{msg}");
            self.publish(&reference, "CycleDetected", "DetectCycle", msg)
                .await;
        }
        if let Some((reason, message)) = crate::status::newly_blocked(&current.conditions, outcome)
        {
            tracing::warn!(kind = %pk.ar.kind, name, reason, "policy not enforced: {message}");
            self.publish(&reference, reason, "Install", message).await;
        }
        if let Some((reason, message)) = crate::status::newly_invalid(&current.conditions, outcome)
        {
            tracing::warn!(kind = %pk.ar.kind, name, reason, "invalid policy: {message}");
            self.publish(&reference, reason, "Validate", message).await;
        }
        Ok(())
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
