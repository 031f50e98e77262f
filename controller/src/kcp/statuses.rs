//! The kcp reconciler, phase 5: statuses (over what kcp enforces), Events and the
//! enforcement probe.

use super::*;

impl Reconciler {
    /// Writes the status of every policy of every [`Kind`] whose conditions differ
    /// from what it has (with `only`: of those policies, by index); returns what
    /// failed.
    pub(super) async fn write_kind_statuses(
        &self,
        policies: &[crate::kcp::kinds::PolicyEval],
        objects: &[Arc<Stored>],
        installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
        enforced: &Enforced,
        home: Option<&str>,
        only: Option<&BTreeSet<usize>>,
    ) -> Vec<Failure> {
        let now = now_rfc3339();
        let guard = home.map(|h| crate::kcp::kinds::HomeGuard {
            cluster: h,
            export: &self.settings.api_export,
        });
        let resources = PerKind::from_fn(Kind::api_resource);
        let writes = {
            let mut writes = Vec::new();
            let mut seen = self.memo.kind_statuses.lock();
            // A full comparison keeps the entries of the policies there are; a
            // partial one updates those it compares.
            let mut next = match only {
                None => HashMap::with_capacity(policies.len()),
                Some(_) => std::mem::take(&mut *seen),
            };
            let compared: Box<dyn Iterator<Item = (&crate::kcp::kinds::PolicyEval, &Arc<Stored>)>> =
                match only {
                    None => Box::new(policies.iter().zip(objects)),
                    Some(only) => Box::new(
                        only.iter()
                            .filter_map(|i| Some((policies.get(*i)?, objects.get(*i)?))),
                    ),
                };
            for (e, obj) in compared {
                let key = (e.kind, e.cluster.clone(), e.name.clone());
                // What the status is a function of: the object, its evaluation and the
                // configurations (by resourceVersion) it is routed through.
                let inputs = KindStatusInputs {
                    rv: obj.metadata.resource_version.clone().unwrap_or_default(),
                    eval: e.clone(),
                    installed: super::fleet::kind_status_clusters(e, guard.map(|g| g.cluster))
                        .map(|lc| {
                            enforced
                                .effective
                                .get(lc)
                                .and_then(|c| c.metadata.resource_version.clone())
                        })
                        .collect(),
                };
                let before = match only {
                    None => seen.remove(&key),
                    Some(_) => next.remove(&key),
                };
                if !inputs.rv.is_empty() && before.as_ref() == Some(&inputs) {
                    next.insert(key, inputs);
                    continue;
                }
                let outcome = crate::kcp::kinds::outcome(e, installed, enforced, guard);
                let current = crate::kubernetes::policy_status(&obj.status());
                match desired_status(
                    obj.metadata.generation,
                    current.observed_generation,
                    &current.conditions,
                    &outcome,
                    &now,
                ) {
                    Some(status) => {
                        let event = crate::status::newly_invalid(&current.conditions, &outcome)
                            .map(|(reason, message)| (reason, message.to_string()));
                        writes.push(KindStatusWrite {
                            kind: e.kind,
                            cluster: e.cluster.clone(),
                            obj: obj.clone(),
                            status,
                            event,
                            inputs,
                        })
                    }
                    None => {
                        next.insert(key, inputs);
                    }
                }
            }
            *seen = next;
            writes
        };
        let resources = &resources;
        futures::stream::iter(writes)
            .map(|w: KindStatusWrite| async move {
                let ar = resources.get(w.kind);
                let body = Patch::Merge(json!({ "status": w.status }));
                let (name, body) = (&w.obj.name_any(), &body);
                let cluster = &w.cluster;
                let written = self
                    .on_shard(cluster, |client| async move {
                        Api::<DynamicObject>::all_with(client, ar)
                            .patch_status(name, &PatchParams::default(), body)
                            .await
                            .map(|o| Some(o.metadata.resource_version.unwrap_or_default()))
                    })
                    .await;
                // A 404 from the most likely endpoint: the object is gone already.
                let written = match written {
                    Err(e)
                        if e.downcast_ref::<kube::Error>()
                            .and_then(holdfast_shared::kcp::status_of)
                            == Some(404) =>
                    {
                        Ok(None)
                    }
                    other => other,
                }
                .map_err(|source| Failure::PolicyStatus {
                    kind: ar.kind.clone(),
                    key: format!("{cluster}/{name}"),
                    source,
                })?;
                let Some(rv) = written else {
                    return Ok(());
                };
                // What the write made is what these inputs give: its echo (at
                // that resourceVersion) is not compared again.
                if !rv.is_empty() {
                    let mut inputs = w.inputs;
                    inputs.rv = rv;
                    self.memo
                        .kind_statuses
                        .lock()
                        .insert((w.kind, cluster.clone(), name.clone()), inputs);
                }
                if let Some((reason, message)) = &w.event {
                    self.warn(cluster, &w.obj.object_ref(ar), reason, "Validate", message)
                        .await;
                }
                Ok::<(), Failure>(())
            })
            .buffer_unordered(CONCURRENCY)
            .filter_map(|r| futures::future::ready(r.err()))
            .collect()
            .await
    }

    /// Phase 6: writes the statuses; returns what failed. A status found up to
    /// date is remembered with its inputs (see [`StatusInputs`]).
    /// Each status is built when its write starts ([`CONCURRENCY`] at a time), not
    /// all before the first (at 100,000 rules their JSON alone took gigabytes).
    pub(super) async fn write_statuses(
        &self,
        writes: Vec<PendingStatus>,
        installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
        enforced: &Enforced,
    ) -> Vec<Failure> {
        let now = now_rfc3339();
        let now = &now;
        let results: Vec<(String, Result<Option<StatusInputs>, Failure>)> =
            futures::stream::iter(writes)
                .map(|p| async move {
                    let mut w = status_write(&p.rule, installed, enforced, p.cycle, p.inputs);
                    let r = match self.write_status(&w, now).await {
                        Ok(Written::No) => Ok(w.inputs.take()),
                        // What the write made is what these inputs give: its
                        // echo (at that resourceVersion) is not compared again.
                        Ok(Written::At(rv)) => Ok(w.inputs.take().map(|mut i| {
                            i.object_rv = rv;
                            i
                        })),
                        Ok(Written::Unknown) => Ok(None),
                        Err(source) => Err(Failure::RuleStatus {
                            key: w.key.clone(),
                            source,
                        }),
                    };
                    (w.key, r)
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        let mut failed = Vec::new();
        let mut seen = self.memo.statuses.lock();
        for (key, r) in results {
            match r {
                Ok(Some(inputs)) => {
                    seen.insert(key, inputs);
                }
                Ok(None) => {
                    seen.remove(&key);
                }
                Err(e) => {
                    seen.remove(&key);
                    failed.push(e);
                }
            }
        }
        failed
    }

    /// Writes one rule's status if it differs; returns whether it wrote, and the
    /// object's resourceVersion after the write.
    pub(super) async fn write_status(&self, w: &StatusWrite, now: &str) -> anyhow::Result<Written> {
        let (current, current_workspaces) = &w.current;
        let ws_same = *current_workspaces == json!(w.workspaces);
        let generation = w.obj.metadata.generation;
        let status = desired_status(
            generation,
            current.observed_generation,
            &current.conditions,
            &w.outcome,
            now,
        );
        let mut status = match (status, ws_same) {
            (None, true) => return Ok(Written::No),
            (Some(s), _) => s,
            (None, false) => {
                let mut s = json!({"conditions": serde_json::to_value(&current.conditions)?});
                if let Some(g) = generation {
                    s["observedGeneration"] = json!(g);
                }
                s
            }
        };
        status["workspaces"] = json!(w.workspaces);
        let ar = ApiResource::erase::<DependencyRule>(&());
        let api: Api<DynamicObject> = Api::all_with(self.vw_client(&w.cluster)?, &ar);
        let written = match api
            .patch_status(
                &w.obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
        {
            Ok(obj) => match obj.metadata.resource_version {
                Some(rv) if !rv.is_empty() => Written::At(rv),
                _ => Written::Unknown,
            },
            Err(kube::Error::Api(e)) if e.code == 404 => Written::Unknown,
            Err(e) => return Err(e.into()),
        };
        let reference = w.obj.object_ref(&ar);
        if let Some(cycle) = &w.outcome.cycle
            && !holdfast_shared::api::is_condition_true(
                &current.conditions,
                holdfast_shared::api::condition_types::CYCLE_DETECTED,
            )
        {
            self.warn(
                &w.cluster,
                &reference,
                "CycleDetected",
                "DetectCycle",
                cycle,
            )
            .await;
        }
        if let Some((reason, message)) =
            crate::status::newly_invalid(&current.conditions, &w.outcome)
        {
            self.warn(&w.cluster, &reference, reason, "Validate", message)
                .await;
        }
        Ok(written)
    }

    /// The enforcement probe in logical cluster `cluster`: a server-side dry-run
    /// CREATE of the Event `name` (holdfast.dev claims Events), through the
    /// endpoint of its shard (see [`holdfast_shared::enforcement`]).
    pub(super) async fn probe(&self, cluster: String, name: String, home: bool) -> ProbeAnswer {
        use holdfast_shared::enforcement::{NAMESPACE, answered_by_probe};
        use k8s_openapi::api::core::v1::{Event, ObjectReference};
        let event = Event {
            metadata: kube::api::ObjectMeta {
                name: Some(name),
                namespace: Some(NAMESPACE.to_string()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Namespace".to_string()),
                name: Some(NAMESPACE.to_string()),
                ..Default::default()
            },
            reason: Some("EnforcementProbe".to_string()),
            message: Some("never created: a server-side dry run".to_string()),
            type_: Some("Normal".to_string()),
            ..Default::default()
        };
        let event = &event;
        let params = &kube::api::PostParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.to_string()),
        };
        let send = |client: Client| async move {
            let api: Api<Event> = Api::namespaced(client, NAMESPACE);
            match api.create(params, event).await {
                Ok(_) => Ok(ProbeAnswer::NotYet(
                    "the dry run was admitted without calling the probe webhook".to_string(),
                )),
                Err(kube::Error::Api(s)) if answered_by_probe(&s.message) => {
                    Ok(ProbeAnswer::Enforced)
                }
                Err(e) => Err(e),
            }
        };
        // The holdfast workspace is the controller's own (its RBAC there, not a
        // claim); every other one through the endpoint of its shard.
        let answer = match home {
            true => send(self.home.clone()).await.map_err(anyhow::Error::from),
            false => self.on_shard(&cluster, send).await,
        };
        answer.unwrap_or_else(|e| {
            let forbidden = e
                .downcast_ref::<kube::Error>()
                .and_then(holdfast_shared::kcp::status_of)
                == Some(403);
            ProbeAnswer::NotYet(match forbidden {
                true if home => format!(
                    "holdfast may not create (even dry-run) Events in namespace {NAMESPACE} of the holdfast workspace, so it cannot see whether kcp enforces the configuration there: grant it (manifests/overlays/kcp/workspace/holdfast): {e:#}"
                ),
                true => format!(
                    "holdfast may not create (even dry-run) Events here, so it cannot see whether kcp enforces the configuration: the workspace's APIBinding to {} must accept the claim on core events (group \"\", verbs create, patch; docs/kcp.md): {e:#}",
                    self.settings.api_export
                ),
                false => format!("the probe failed: {e:#}"),
            })
        })
    }

    /// A Warning Event about `reference` (a policy) in logical cluster `cluster`,
    /// written through the endpoint of its shard (holdfast.dev claims Events), as
    /// on Kubernetes; a failure is logged, never a failure of the pass.
    pub(super) async fn warn(
        &self,
        cluster: &str,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        use kube::runtime::events::{Recorder, Reporter};
        let ev = &crate::status::warning_event(reason, action, note);
        let published = self
            .on_shard(cluster, |client| async move {
                let reporter = Reporter {
                    controller: crate::status::EVENT_REPORTER.into(),
                    instance: None,
                };
                Recorder::new(client, reporter).publish(ev, reference).await
            })
            .await;
        if let Err(e) = published {
            tracing::warn!(cluster, reason, error = %format!("{e:#}"), "emitting event failed");
        }
    }
}

impl StatusInputs {
    /// Whether `r` over `installed` with `cycle` has these inputs (compared in
    /// place: the common case, nothing changed, allocates nothing).
    pub(super) fn hold_for(
        &self,
        r: &RuleState,
        installed: &InstalledRvs,
        cycle: Option<&str>,
    ) -> bool {
        if !(Arc::ptr_eq(&self.eval, &r.eval)
            && !self.object_rv.is_empty()
            && self.object_rv == r.parsed.at.rv
            && self.cycle.as_deref() == cycle)
        {
            return false;
        }
        let mut lcs = status_clusters(&r.eval);
        let mut before = self.installed.iter();
        loop {
            match (lcs.next(), before.next()) {
                (None, None) => return true,
                (Some(lc), Some(rv)) => {
                    let same = match (installed.get(lc.as_str()), rv) {
                        (None, None) => true,
                        (Some(Some(now)), Some(rv)) => *now == rv,
                        _ => false,
                    };
                    if !same {
                        return false;
                    }
                }
                _ => return false,
            }
        }
    }
}

pub(super) fn installed_rvs(
    installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
) -> InstalledRvs<'_> {
    installed
        .iter()
        .map(|(lc, c)| (lc.as_str(), c.metadata.resource_version.as_deref()))
        .collect()
}

/// The logical clusters whose configurations a rule's status reads.
pub(super) fn status_clusters(e: &RuleEval) -> impl Iterator<Item = &String> {
    e.targets.keys().chain(
        e.workspaces
            .iter()
            .filter_map(|w| w.logical_cluster.as_ref()),
    )
}

/// What a rule's status depends on besides its evaluation: the installed
/// configuration (by resourceVersion) of every logical cluster it names; `None`
/// when one has no resourceVersion (not comparable).
pub(super) fn installed_inputs(
    e: &RuleEval,
    installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
) -> Option<Vec<Option<String>>> {
    let mut out = Vec::new();
    for lc in status_clusters(e) {
        out.push(match installed.get(lc) {
            Some(c) => Some(c.metadata.resource_version.clone()?),
            None => None,
        });
    }
    Some(out)
}

/// One rule's outcome and status workspaces over what is installed.
pub(super) fn status_write(
    r: &RuleState,
    installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    enforced: &Enforced,
    cycle: Option<String>,
    inputs: Option<StatusInputs>,
) -> StatusWrite {
    let e = &r.eval;
    let mut ok = true;
    let mut missing = Vec::new();
    let mut waiting = Vec::new();
    let mut pending = BTreeMap::new();
    for (lc, exports) in e.targets.iter() {
        for (export, grs) in exports {
            let hook = export_policies_webhook(export);
            let routed_by = |configs: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
                             gr: &GroupResource| {
                configs
                    .get(lc)
                    .is_some_and(|c| routes(c, &hook, "DELETE", gr))
            };
            for gr in grs {
                if routed_by(&enforced.effective, gr) {
                    continue;
                }
                let what = format!("{gr} of APIExport {export} in {lc}");
                if routed_by(installed, gr) {
                    waiting.push(what);
                    if let Some(why) = enforced.pending.get(lc) {
                        pending.insert(lc.clone(), why.clone());
                    }
                } else {
                    ok = false;
                    missing.push(what);
                }
            }
        }
    }
    let key = e.key().to_string();
    let outcome = Outcome {
        invalid: e.invalid.clone(),
        installed: ok && e.invalid.is_none(),
        installed_message: if ok {
            format!(
                "DELETEs of the dependencies reach webhook(s) {} in {} provider workspace(s)",
                e.targets
                    .values()
                    .flat_map(|x| x.iter().map(|(export, _)| export))
                    .map(|x| export_policies_webhook(x))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect::<Vec<_>>()
                    .join(", "),
                e.targets.len()
            )
        } else {
            format!("not yet installed: {}", missing.join(", "))
        },
        cycle,
        cycle_applies: true,
        source: None,
        not_admitted: None,
        blocked: None,
        not_enforced: (!waiting.is_empty()).then(|| not_enforced_message(&waiting, &pending)),
    };
    let workspaces: Vec<serde_json::Value> = e
        .workspaces
        .iter()
        .map(|w| {
            let mut v = json!({
                "path": w.path,
                "name": w.export,
                "webhookInstalled": w.logical_cluster.as_ref().is_some_and(|lc| installed.contains_key(lc)),
            });
            if let Some(lc) = &w.logical_cluster {
                v["logicalCluster"] = json!(lc);
            }
            if let Some(h) = &w.identity_hash {
                v["identityHash"] = json!(h);
            }
            if let Some(shared) = &w.shared_resources {
                v["sharedResources"] = json!(shared);
            }
            if let Some(m) = &w.message {
                v["message"] = json!(m);
            }
            v
        })
        .collect();
    let current = r.parsed.current();
    if let Some(c) = &outcome.cycle
        && !holdfast_shared::api::is_condition_true(
            &current.0.conditions,
            holdfast_shared::api::condition_types::CYCLE_DETECTED,
        )
    {
        tracing::warn!(rule = %key, "{c}");
    }
    StatusWrite {
        key,
        cluster: e.cluster.clone(),
        obj: r.obj.clone(),
        current,
        outcome,
        workspaces,
        inputs,
    }
}

impl Reconciler {
    /// Phase 5: the outcome of each of `rules` over what is installed (`cycles`
    /// found across all workspaces; `rvs`: the enforced configurations'
    /// resourceVersions, at least of the clusters these rules read). A rule whose
    /// status was found up to date with the same inputs needs no write and is
    /// left out.
    pub(super) fn status_writes<'a>(
        &self,
        rules: impl Iterator<Item = &'a RuleState>,
        enforced: &Enforced,
        cycles: &BTreeMap<String, crate::cycles::Cycle>,
        rvs: &InstalledRvs,
    ) -> Vec<PendingStatus> {
        // What kcp enforces decides (a configuration installed but not yet
        // enforced changes the status when it is).
        let seen = self.memo.statuses.lock();
        let mut writes = Vec::new();
        for r in rules {
            let e = &r.eval;
            let cycle = cycles.get(e.key()).map(|c| c.message());
            if seen
                .get(e.key())
                .is_some_and(|before| before.hold_for(r, rvs, cycle.as_deref()))
            {
                continue;
            }
            let inputs = installed_inputs(e, &enforced.effective).map(|installed| StatusInputs {
                eval: r.eval.clone(),
                object_rv: r.parsed.at.rv.clone(),
                installed,
                cycle: cycle.clone(),
            });
            writes.push(PendingStatus {
                rule: r.clone(),
                cycle,
                inputs,
            });
        }
        writes
    }
}

/// What [`Reconciler::write_status`] did.
pub(super) enum Written {
    /// Nothing: the status was up to date.
    No,
    /// Wrote it; the object is at this resourceVersion since.
    At(String),
    /// Wrote it (or the object is gone); its resourceVersion is not known.
    Unknown,
}

/// A rule whose status is compared (and written if it differs), with what its
/// write needs besides the configurations.
pub(super) struct PendingStatus {
    pub(super) rule: RuleState,
    pub(super) cycle: Option<String>,
    pub(super) inputs: Option<StatusInputs>,
}
