//! The kcp reconciler, phases 3 and 4: each workspace's target, the configurations
//! installed (and the holdfast workspace's own), and the plan of the other kinds.

use std::cell::RefCell;

use super::*;

impl Reconciler {
    /// The configuration `holdfast` of holdfast's own workspace. kcp admits the
    /// DELETE of an object of a type bound from holdfast.dev through the
    /// configurations of holdfast's workspace only (kcp-facts 12), so this one
    /// routes DELETEs of `criticalservices.holdfast.dev` to the webhook's export
    /// route while some valid CriticalService exists: a CriticalService cannot be
    /// deleted while its provider exists. Removed when none is left. Written with
    /// the controller's own identity in its workspace (the shipped RBAC grants
    /// exactly that configuration); while a write is refused the rest of the pass
    /// goes on, and it is said once (a refused read, by the watch).
    pub(super) async fn install_home(
        &self,
        kinds: &PlannedKinds,
    ) -> Result<Option<Arc<ValidatingWebhookConfiguration>>, Failure> {
        let Some(home) = kinds.home.as_deref() else {
            return Ok(None);
        };
        let critical = kinds
            .policies
            .iter()
            .any(|e| e.kind == Kind::CriticalService && e.invalid.is_none());
        // holdfast's own objects in the workspaces binding holdfast (a policy carrying
        // the protection label) are admitted through this workspace's configurations
        // only (kcp-facts 12): their label protection lives here.
        let binders = kinds.targets.values().any(|t| t.binds);
        let needed = critical || binders;
        // Until its watch has listed (its failures, a 403 included, are logged by
        // the watch itself).
        if !self.home_hooks.synced() {
            return Ok(None);
        }
        let live = self
            .home_hooks
            .state()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(WEBHOOK_CONFIGURATION_NAME));
        let want = match needed {
            true => {
                let opts = self.options.borrow().clone();
                let export = &self.settings.api_export;
                let mut target = WorkspaceTarget::default();
                if critical {
                    target.exports.insert(
                        export.clone(),
                        [GroupResource::new(
                            holdfast_shared::names::API_GROUP,
                            "criticalservices",
                        )]
                        .into(),
                    );
                }
                if binders {
                    target
                        .label_exports
                        .insert(export.clone(), crate::kcp::kinds::own_resources());
                }
                workspace_configuration(
                    home,
                    &self.settings.labels,
                    self.settings.strict,
                    &target,
                    &opts,
                )
            }
            false => None,
        };
        let api: Api<ValidatingWebhookConfiguration> = Api::all(self.home.clone());
        let done: Result<Option<Arc<ValidatingWebhookConfiguration>>, kube::Error> = match (
            want, live,
        ) {
            (Some(want), Some(live)) if matches_desired(&live, &want) => Ok(Some(live)),
            (Some(want), _) => {
                tracing::info!(workspace = %home, "installing ValidatingWebhookConfiguration holdfast in the holdfast workspace (label protection of holdfast's own objects; CriticalServices guard themselves)");
                let mut body =
                    serde_json::to_value(&want).map_err(|e| Failure::HoldfastWorkspace {
                        cluster: home.to_string(),
                        source: e.into(),
                    })?;
                body["apiVersion"] = "admissionregistration.k8s.io/v1".into();
                body["kind"] = "ValidatingWebhookConfiguration".into();
                api.patch(
                    WEBHOOK_CONFIGURATION_NAME,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await
                .map(|c| Some(Arc::new(c)))
            }
            // Only holdfast's own: the watch sees nothing else.
            (None, Some(_)) => {
                tracing::info!(workspace = %home, "no workspace binds holdfast: deleting ValidatingWebhookConfiguration holdfast in the holdfast workspace");
                match api
                    .delete(WEBHOOK_CONFIGURATION_NAME, &Default::default())
                    .await
                {
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
                    other => other.map(|_| None),
                }
            }
            (None, _) => Ok(None),
        };
        match done {
            Ok(cfg) => {
                self.home_warned.store(false, Ordering::Relaxed);
                Ok(cfg)
            }
            Err(kube::Error::Api(s)) if s.code == 403 => {
                if !self.home_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(workspace = %home, error = %s.message, "may not write ValidatingWebhookConfiguration holdfast in the holdfast workspace (its RBAC must grant the controller create, update, patch and delete of it): CriticalServices cannot guard themselves until it may");
                }
                Ok(None)
            }
            Err(e) => Err(Failure::HoldfastWorkspace {
                cluster: home.to_string(),
                source: e.into(),
            }),
        }
    }

    /// Phase 4: makes the installed configurations what `desired` says:
    /// creates or updates those that differ, deletes those no rule targets. With
    /// a `scope`, only the configurations of those logical clusters are compared
    /// and `base` (the last pass's) holds the others'.
    pub(super) async fn install(
        &self,
        desired: &BTreeMap<String, Arc<WorkspaceTarget>>,
        scope: Option<&BTreeSet<String>>,
        base: BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    ) -> Installed {
        let opts = Arc::new(self.options.borrow().clone());
        let live = match scope {
            None => self.live_configurations(),
            Some(scope) => self.live_configurations_in(scope),
        };
        let mut installed = Installed {
            configurations: self.shared_with_store(base),
            failed: Vec::new(),
        };
        for lc in scope.into_iter().flatten() {
            installed.configurations.remove(lc);
        }
        let compared: Vec<(&String, &Arc<WorkspaceTarget>)> = match scope {
            None => desired.iter().collect(),
            Some(scope) => scope
                .iter()
                .filter_map(|lc| desired.get_key_value(lc))
                .collect(),
        };
        let mut to_apply = Vec::new();
        for (lc, target) in compared {
            let live_rv = live
                .get(lc)
                .and_then(|l| l.metadata.resource_version.as_deref())
                .unwrap_or_default();
            // The desired configuration is a function of (cluster, target,
            // options): the same inputs matched this live object before.
            let known_match = self.memo.matched.lock().get(lc).is_some_and(|(rv, t, o)| {
                !live_rv.is_empty()
                    && rv == live_rv
                    && (Arc::ptr_eq(t, target) || t == target)
                    && (Arc::ptr_eq(o, &opts) || **o == *opts)
            });
            if known_match && let Some(l) = live.get(lc) {
                installed.configurations.insert(lc.clone(), l.clone());
                continue;
            }
            let Some(want) = workspace_configuration(
                lc,
                &self.settings.labels,
                self.settings.strict,
                target,
                &opts,
            ) else {
                continue;
            };
            match live.get(lc) {
                Some(l) if matches_kept(l, &want) => {
                    self.memo.matched.lock().insert(
                        lc.clone(),
                        (live_rv.to_string(), target.clone(), opts.clone()),
                    );
                    installed.configurations.insert(lc.clone(), l.clone());
                }
                other => {
                    tracing::info!(
                        cluster = %lc,
                        binds = target.binds,
                        exports = target.exports.len(),
                        rules = target.rules.len(),
                        "{} ValidatingWebhookConfiguration holdfast",
                        if other.is_some() { "updating" } else { "creating" }
                    );
                    to_apply.push((lc.clone(), want));
                }
            }
        }
        {
            let mut m = self.memo.matched.lock();
            match scope {
                None => m.retain(|lc, _| desired.contains_key(lc)),
                Some(scope) => {
                    for lc in scope.iter().filter(|lc| !desired.contains_key(*lc)) {
                        m.remove(lc);
                    }
                }
            }
        }
        let applied: Vec<(String, anyhow::Result<ValidatingWebhookConfiguration>)> =
            futures::stream::iter(to_apply)
                .map(|(lc, want)| async move {
                    let r = self.apply_in(&lc, &want).await;
                    (lc, r)
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        for (lc, r) in applied {
            match r {
                Ok(cfg) => {
                    // The store's copy when its watch has it already, else once it
                    // has (see `shared_with_store`).
                    let key = (lc.clone(), WEBHOOK_CONFIGURATION_NAME.to_string());
                    let live = self.hooks.lock().objects.get(&key).cloned();
                    let cfg = match live {
                        Some(live)
                            if live.metadata.resource_version.is_some()
                                && live.metadata.resource_version
                                    == cfg.metadata.resource_version =>
                        {
                            live
                        }
                        _ => {
                            self.memo.unshared.lock().insert(lc.clone());
                            Arc::new(cfg)
                        }
                    };
                    installed.configurations.insert(lc, cfg);
                }
                Err(e) => {
                    if gone_or_forbidden(&e) {
                        // The workspace may be gone or replaced: resolve again.
                        self.forget_cluster(&lc).await;
                    }
                    installed.failed.push(Failure::Workspace {
                        cluster: lc,
                        source: e,
                    });
                }
            }
        }
        // A configuration holdfast may no longer delete is not asked again every
        // pass (until the workspace needs one again, or the controller restarts).
        let abandoned: BTreeSet<String> = self.memo.abandoned.lock().clone();
        // (`live` holds only the scope's.)
        let stale: Vec<String> = live
            .keys()
            .filter(|lc| !desired.contains_key(*lc) && !abandoned.contains(*lc))
            .cloned()
            .collect();
        let deleted: Vec<(String, anyhow::Result<()>)> = futures::stream::iter(stale)
            .map(|lc| async move {
                tracing::info!(cluster = %lc, "no rule targets this workspace any more: deleting ValidatingWebhookConfiguration holdfast");
                let r = self.delete_in(&lc).await;
                (lc, r)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut abandoned = self.memo.abandoned.lock();
        abandoned.retain(|lc| !desired.contains_key(lc));
        for (lc, r) in deleted {
            match r {
                // The workspace no longer binds holdfast (or is gone): holdfast's
                // access ended with the binding; the configuration is its owner's
                // to delete. Said once, not retried as a failure.
                Err(e) if gone_or_forbidden(&e) => {
                    if abandoned.insert(lc.clone()) {
                        tracing::warn!(cluster = %lc, error = %format!("{e:#}"), "holdfast may no longer delete ValidatingWebhookConfiguration holdfast there (the workspace no longer binds holdfast with its claims accepted); its owner may delete it");
                    }
                }
                Err(source) => installed.failed.push(Failure::Workspace {
                    cluster: lc,
                    source,
                }),
                Ok(()) => {}
            }
        }
        installed
    }

    /// The policies of every [`Kind`] planned over the APIBindings
    /// (from the watches: no API read), and their objects (flattened in the
    /// plan's order). The last plan is reused while none of those objects changed
    /// (a plan is a function of them and of holdfast's own logical cluster).
    pub(super) fn plan(&self) -> Arc<PlannedKinds> {
        use crate::kcp::kinds::{Bindings, export_cluster_of, plan};
        let export = &self.settings.api_export;
        // holdfast's own logical cluster, from the URLs of its slice.
        let home = self
            .binding_endpoints
            .urls()
            .iter()
            .chain(self.rule_endpoints.urls().iter())
            .find_map(|u| export_cluster_of(u, export));
        let versions = PlanVersions {
            kinds: self.kinds.map(|_, s| s.lock().version),
            bindings: self.bindings.lock().version,
        };
        let last = self.memo.planned.lock().clone();
        if let Some(last) = &last
            && last.versions == versions
            && last.home == home
        {
            return last.clone();
        }
        let snapshot = |s: &Shared<DynamicObject>| {
            let s = s.lock();
            (s.snapshot(), s.version)
        };
        let snapshots = self.kinds.map(|_, s| snapshot(s));
        let (bindings, vb) = snapshot(&self.bindings);
        let versions = PlanVersions {
            kinds: snapshots.map(|_, (_, v)| *v),
            bindings: vb,
        };
        let objects = snapshots.into_map(|_, (o, _)| o);
        // Parsed again from the stores' text, one at a time (a plan is made
        // again only when a binding or a policy changed).
        let bindings = Bindings::of(
            bindings.iter().map(|(k, b)| (k.0.as_str(), b.object())),
            home.as_deref(),
            export,
        );
        // Decoding and checking reused per object while its spec holds (the same
        // resourceVersion, or the same generation: a plan reads only specs, so
        // the echo of a status write decodes nothing again). (The pass's own:
        // cells, not locks.)
        let decoded = RefCell::new(std::mem::take(&mut *self.memo.decoded.lock()));
        let next = RefCell::new(HashMap::new());
        let decode = |kind: Kind, obj: &Arc<Stored>| {
            let key = (kind, cluster_of(obj.as_ref()), obj.name_any());
            let now = SpecOf::of(&obj.metadata);
            let known = decoded
                .borrow_mut()
                .remove(&key)
                .filter(|(was, _)| was.holds_for(&now));
            let d = match known {
                Some((_, d)) => d,
                None => Arc::new(crate::kcp::kinds::decode_policy(kind, &obj.object())),
            };
            next.borrow_mut().insert(key, (now, d.clone()));
            d
        };
        let planned = plan(&objects, &decode, &bindings, export);
        *self.memo.decoded.lock() = next.into_inner();
        // A workspace's part equal to the last plan's is that plan's `Arc`, so the
        // merged targets of unchanged workspaces are reused (see [`Targets`]).
        let targets = planned
            .targets
            .into_iter()
            .map(|(lc, t)| {
                let t = match last.as_ref().and_then(|l| l.targets.get(&lc)) {
                    Some(before) if **before == t => before.clone(),
                    _ => Arc::new(t),
                };
                (lc, t)
            })
            .collect();
        let planned = Arc::new(PlannedKinds {
            versions,
            home,
            targets,
            policies: planned.policies,
            objects: objects
                .into_values()
                .into_iter()
                .flatten()
                .map(|(_, obj)| obj)
                .collect(),
        });
        *self.memo.planned.lock() = Some(planned.clone());
        planned
    }

    /// `configurations` (the last pass's), with each one written by a pass (the
    /// write's answer) replaced by the hooks store's copy once the store holds it
    /// at the same resourceVersion: a configuration is kept once, not twice.
    fn shared_with_store(
        &self,
        mut configurations: BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    ) -> BTreeMap<String, Arc<ValidatingWebhookConfiguration>> {
        let hooks = self.hooks.lock();
        self.memo.unshared.lock().retain(|lc| {
            let Some(cfg) = configurations.get_mut(lc) else {
                return false;
            };
            let key = (lc.clone(), WEBHOOK_CONFIGURATION_NAME.to_string());
            match hooks.objects.get(&key) {
                Some(live)
                    if live.metadata.resource_version.is_some()
                        && live.metadata.resource_version == cfg.metadata.resource_version =>
                {
                    *cfg = live.clone();
                    false
                }
                _ => true,
            }
        });
        configurations
    }

    pub(super) async fn apply_in(
        &self,
        cluster: &str,
        desired: &ValidatingWebhookConfiguration,
    ) -> anyhow::Result<ValidatingWebhookConfiguration> {
        let mut body = serde_json::to_value(desired)?;
        body["apiVersion"] = "admissionregistration.k8s.io/v1".into();
        body["kind"] = "ValidatingWebhookConfiguration".into();
        let body = &body;
        self.on_shard(cluster, |client| async move {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
            let applied = api
                .patch(
                    WEBHOOK_CONFIGURATION_NAME,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await?;
            if matches_desired(&applied, desired) {
                return Ok(applied);
            }
            let mut replacement = desired.clone();
            replacement.metadata.resource_version = applied.metadata.resource_version.clone();
            api.replace(
                WEBHOOK_CONFIGURATION_NAME,
                &Default::default(),
                &replacement,
            )
            .await
        })
        .await
    }

    pub(super) async fn delete_in(&self, cluster: &str) -> anyhow::Result<()> {
        let deleted = self
            .on_shard(cluster, |client| async move {
                let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
                api.delete(WEBHOOK_CONFIGURATION_NAME, &DeleteParams::default())
                    .await
                    .map(|_| ())
            })
            .await;
        // A 404 from the most likely endpoint (the one that saw it): gone already.
        match deleted {
            Err(e) if matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 404) => {
                Ok(())
            }
            other => other,
        }
    }
}

impl Targets {
    /// Every workspace's target from the evaluations of the rules (in rule order)
    /// and the plan's parts.
    /// Every workspace's target from the evaluations of all rules (in rule
    /// order, by key) and the plan's parts; the routes are indexed afresh.
    pub(super) fn desired<'a>(
        &mut self,
        evals: impl Iterator<Item = (&'a StoreKey, &'a Arc<RuleEval>)>,
        planned: &BTreeMap<String, Arc<WorkspaceTarget>>,
    ) -> &BTreeMap<String, Arc<WorkspaceTarget>> {
        self.routes.clear();
        for (key, e) in evals {
            for lc in e.targets.keys() {
                self.routes
                    .entry(lc.clone())
                    .or_default()
                    .insert(key.clone(), e.clone());
            }
        }
        let mut next = HashMap::with_capacity(self.routes.len().max(planned.len()));
        let mut desired = BTreeMap::new();
        let lcs: BTreeSet<&str> = self
            .routes
            .keys()
            .map(String::as_str)
            .chain(planned.keys().map(String::as_str))
            .collect();
        for lc in lcs {
            let evals: Vec<&Arc<RuleEval>> = self
                .routes
                .get(lc)
                .map(|r| r.values().collect())
                .unwrap_or_default();
            let evals = evals.as_slice();
            let plan_part = planned.get(lc);
            let target = match self.by_lc.remove(lc) {
                Some(b) if b.built_from(evals, plan_part) => b,
                _ => CachedTarget {
                    evals: evals.iter().map(|e| Arc::clone(e)).collect(),
                    plan_part: plan_part.cloned(),
                    target: Arc::new(rules_target(lc, evals, plan_part.map(|p| (**p).clone()))),
                },
            };
            desired.insert(lc.to_string(), target.target.clone());
            next.insert(lc.to_string(), target);
        }
        self.by_lc = next;
        self.desired = desired;
        &self.desired
    }
}

impl CachedTarget {
    /// Whether this target was built from these evaluations and plan part.
    pub(super) fn built_from(
        &self,
        evals: &[&Arc<RuleEval>],
        plan_part: Option<&Arc<WorkspaceTarget>>,
    ) -> bool {
        self.evals.len() == evals.len()
            && self.evals.iter().zip(evals).all(|(a, b)| Arc::ptr_eq(a, b))
            && match (&self.plan_part, plan_part) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

/// Workspace `lc`'s target: what the rules `evals` route to it, joined with the
/// other kinds' plan for it.
pub(super) fn rules_target(
    lc: &str,
    evals: &[&Arc<RuleEval>],
    plan_part: Option<WorkspaceTarget>,
) -> WorkspaceTarget {
    let mut target = WorkspaceTarget::default();
    for e in evals {
        if let Some(exports) = e.targets.get(lc) {
            for (export, grs) in exports {
                let routed = target.exports.entry(export.clone()).or_default();
                routed.extend(grs.iter().cloned());
            }
        }
        target.rules.insert(e.key().to_string());
    }
    if let Some(p) = plan_part {
        target.absorb(p);
    }
    target
}
