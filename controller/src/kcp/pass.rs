//! The kcp reconciler's pass: phases 1 to 6 in order, over what changed since the
//! last pass or over everything (see [`super::fleet`]).

use super::*;

impl Reconciler {
    /// One pass; returns whether some path is unresolved (to retry soon). Takes
    /// what the last pass computed ([`Fleet`]) and updates it with the changes
    /// since, or computes everything when they cannot be attributed.
    pub(super) async fn reconcile_once(&self) -> Result<bool, ReconcileError> {
        let started = std::time::Instant::now();
        let inputs_at_start = self.spec_changes();
        // Taken for the pass (left empty, so a pass that ends early makes the
        // next one full) and put back at its end.
        let mut fleet = std::mem::take(&mut *self.memo.fleet.lock());
        let rule_changes = Self::take_changes(&self.rules);
        let hook_changes = Self::take_changes(&self.hooks);
        let opts = self.options.borrow().clone();
        let resynced = self.resynced.swap(false, Ordering::Relaxed);
        let mut full = !fleet.valid
            || rule_changes.all()
            || hook_changes.all()
            || resynced
            || fleet.opts.as_ref() != Some(&opts);
        fleet.valid = false;
        fleet.opts = Some(opts);
        let mut delta = Vec::new();
        if !full {
            match self.evaluate_changed(&mut fleet, &rule_changes).await {
                Some(d) => delta = d,
                None => full = true,
            }
        }
        let mut removed = false;
        if full {
            let Evaluated {
                rules,
                fresh,
                removed: gone,
            } = self.evaluate_rules().await;
            if fresh {
                self.keep_named_answers(rules.iter().map(|(_, r)| r));
            }
            removed = gone;
            fleet.set_rules(rules);
        }
        let evaluated = started.elapsed();
        let unresolved = fleet.unresolved();
        let kinds = self.plan();
        let plan_before = match &fleet.plan {
            Some(p) if Arc::ptr_eq(p, &kinds) => None,
            Some(p) => Some(p.clone()),
            None => None,
        };
        fleet.plan = Some(kinds.clone());
        // The workspaces whose configuration is compared: all, or those whose
        // target changed or whose live configuration changed (and holdfast's own).
        let scope: Option<BTreeSet<String>> = match full {
            true => {
                let rules = &fleet.rules;
                fleet
                    .targets
                    .desired(rules.iter().map(|(k, r)| (k, &r.eval)), &kinds.targets);
                None
            }
            false => {
                let mut scope = fleet.targets.update(
                    &delta,
                    &kinds.targets,
                    plan_before.as_ref().map(|p| &p.targets),
                );
                // A configuration changed is compared again, unless what the watch
                // has is what the last pass installed (the echo of its own write).
                {
                    let hooks = self.hooks.lock();
                    scope.extend(
                        hook_changes
                            .keys()
                            .filter(|key| !own_echo(&fleet.installed, key, hooks.get(key)))
                            .map(|(lc, _)| lc.clone()),
                    );
                }
                scope.extend(kinds.home.iter().cloned());
                Some(scope)
            }
        };
        let planned = started.elapsed();
        // The compared workspaces' configurations before (by resourceVersion): a
        // status reads only those that changed.
        let before: Vec<(String, Option<String>)> = scope
            .iter()
            .flatten()
            .map(|lc| (lc.clone(), version(fleet.installed.get(lc))))
            .collect();
        let base = match scope {
            Some(_) => std::mem::take(&mut fleet.installed),
            None => BTreeMap::new(),
        };
        let mut installed = self
            .install(fleet.targets.current(), scope.as_ref(), base)
            .await;
        let workspaces_installed = started.elapsed();
        // The holdfast workspace's own (CriticalServices guard themselves through
        // it): judged and probed with the others.
        match self.install_home(&kinds).await {
            Ok(Some(cfg)) => {
                if let Some(home) = &kinds.home {
                    installed.configurations.insert(home.clone(), cfg);
                }
            }
            Ok(None) => {}
            Err(e) => installed.failed.push(e),
        }
        let home_installed = started.elapsed();
        if let Some(w) = &self.workspaces {
            let opts = self.options.borrow().clone();
            if let Err(e) = w.ensure(&opts).await {
                installed.failed.push(e);
            }
        }
        let configured = started.elapsed();
        let reinstalled: BTreeSet<String> = before
            .into_iter()
            .filter(|(lc, was)| version(installed.configurations.get(lc)) != *was)
            .map(|(lc, _)| lc)
            .collect();
        if self.defer_statuses(inputs_at_start) {
            // A policy changed during this pass: the next pass, which starts at
            // once, computes its configuration first, then compares the statuses
            // this one would have compared with its own (all, after a full one).
            tracing::debug!("a policy changed during the pass; statuses wait for the next");
            let Installed {
                configurations,
                failed,
            } = installed;
            fleet.defer(delta, scope.as_ref().map(|_| &reinstalled));
            fleet.valid = failed.is_empty();
            fleet.installed = configurations;
            self.put_back(fleet);
            return match failed.is_empty() {
                true => Ok(unresolved),
                false => Err(ReconcileError::Pass { failed }),
            };
        }
        // Statuses judge by what kcp is seen enforcing (a pending workspace is
        // probed again on the short retry).
        let enforcing = std::time::Instant::now();
        let enforced = self
            .enforcement
            .check(&installed.configurations, |lc, name| {
                let home = kinds.home.as_deref() == Some(lc.as_str());
                self.probe(lc, name, home)
            })
            .await;
        let probing = !enforced.pending.is_empty();
        *self.memo.statuses_written.lock() = std::time::Instant::now();
        let mut statuses_full = full || fleet.statuses_full;
        let deferred = std::mem::take(&mut fleet.deferred);
        // The logical clusters whose installed or enforced configuration changed.
        let mut touched: BTreeSet<String> = BTreeSet::new();
        if !statuses_full {
            touched.extend(reinstalled);
            touched.extend(deferred.clusters);
            changed_keys(
                &fleet.effective,
                &enforced.effective,
                Arc::ptr_eq,
                &mut touched,
            );
            changed_keys(
                &fleet.pending,
                &enforced.pending,
                |a, b| a == b,
                &mut touched,
            );
            statuses_full = fleet.update_status_index(&delta);
        }
        let writes = match statuses_full {
            true => {
                fleet.rebuild_status_index();
                if removed {
                    let keep: HashSet<&str> = fleet.rules.values().map(|r| r.eval.key()).collect();
                    self.memo
                        .statuses
                        .lock()
                        .retain(|k, _| keep.contains(k.as_str()));
                }
                let rvs = installed_rvs(&enforced.effective);
                self.status_writes(fleet.rules.values(), &enforced, &fleet.cycles, &rvs)
            }
            false => {
                let mut check: BTreeSet<&StoreKey> = delta.iter().map(|d| &d.key).collect();
                check.extend(deferred.rules.iter());
                for lc in &touched {
                    check.extend(fleet.readers.get(lc.as_str()).into_iter().flatten());
                }
                let rules: Vec<&RuleState> =
                    check.iter().filter_map(|k| fleet.rules.get(*k)).collect();
                // Only the clusters these rules read.
                let rvs: InstalledRvs = rules
                    .iter()
                    .flat_map(|r| status_clusters(&r.eval))
                    .filter_map(|lc| {
                        let c = enforced.effective.get(lc)?;
                        Some((lc.as_str(), c.metadata.resource_version.as_deref()))
                    })
                    .collect();
                self.status_writes(rules.into_iter(), &enforced, &fleet.cycles, &rvs)
            }
        };
        let checked = writes.len();
        let (probed, writing) = (enforcing.elapsed(), std::time::Instant::now());
        let mut status_failed = self
            .write_statuses(writes, &installed.configurations, &enforced)
            .await;
        // The other kinds: all when the plan changed, else those reading a
        // configuration that changed.
        let kind_scope: Option<BTreeSet<usize>> = match statuses_full
            || fleet
                .kind_plan
                .as_ref()
                .is_none_or(|p| !Arc::ptr_eq(p, &kinds))
        {
            true => {
                fleet.index_kinds(&kinds);
                None
            }
            false => Some(
                touched
                    .iter()
                    .flat_map(|lc| fleet.kind_readers.get(lc.as_str()).into_iter().flatten())
                    .copied()
                    .collect(),
            ),
        };
        let (rule_statuses, kinding) = (writing.elapsed(), std::time::Instant::now());
        let kinds_compared = kind_scope
            .as_ref()
            .map_or(kinds.policies.len(), BTreeSet::len);
        status_failed.extend(
            self.write_kind_statuses(
                &kinds.policies,
                &kinds.objects,
                &installed.configurations,
                &enforced,
                kinds.home.as_deref(),
                kind_scope.as_ref(),
            )
            .await,
        );
        // Where a pass goes (hack/bench-controller.sh reports the medians).
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        tracing::debug!(
            full,
            statuses_full,
            rules_changed = delta.len(),
            workspaces_compared = scope
                .as_ref()
                .map_or(fleet.targets.current().len(), BTreeSet::len),
            statuses_compared = checked,
            kinds_compared,
            probe_us = us(probed),
            rule_statuses_us = us(rule_statuses),
            kind_statuses_us = us(kinding.elapsed()),
            evaluate_us = us(evaluated),
            plan_us = us(planned.saturating_sub(evaluated)),
            install_us = us(configured.saturating_sub(planned)),
            install_workspaces_us = us(workspaces_installed.saturating_sub(planned)),
            install_home_us = us(home_installed.saturating_sub(workspaces_installed)),
            statuses_us = us(started.elapsed().saturating_sub(configured)),
            "kcp pass phases"
        );
        // The configurations' failures first, then the statuses': the error is
        // labelled `configuration` when there is one (see
        // [`ReconcileError::metric_label`]).
        let mut failed = installed.failed;
        failed.extend(status_failed);
        fleet.valid = failed.is_empty();
        fleet.statuses_full = false;
        fleet.installed = installed.configurations;
        fleet.effective = enforced.effective;
        fleet.pending = enforced.pending;
        self.put_back(fleet);
        match failed.is_empty() {
            true => Ok(unresolved || probing),
            false => Err(ReconcileError::Pass { failed }),
        }
    }

    /// Keeps the export answers some rule still names (after some rule was
    /// evaluated afresh or removed; unchanged otherwise).
    fn keep_named_answers<'a>(&self, rules: impl Iterator<Item = &'a RuleState>) {
        let named: HashSet<(Where, &str, &str)> = rules
            .filter_map(|r| Some((r.eval.cluster.as_str(), r.rule.as_deref()?)))
            .flat_map(|(cluster, rule)| answers_named(cluster, rule))
            .collect();
        self.answers.retain(&named);
    }

    /// Keeps `fleet` for the next pass.
    fn put_back(&self, fleet: Fleet) {
        *self.memo.fleet.lock() = fleet;
    }
}

/// A configuration's resourceVersion (`None`: none installed).
fn version(cfg: Option<&Arc<ValidatingWebhookConfiguration>>) -> Option<String> {
    cfg.and_then(|c| c.metadata.resource_version.clone())
}

/// Whether `live`, the hooks store's object at `key` after a change, is the
/// configuration `installed` holds for its workspace at the same resourceVersion:
/// the watch's echo of a write the last pass made (or already saw), so nothing
/// to compare again. Gone, renamed or at another version, it is compared.
pub(super) fn own_echo(
    installed: &BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    key: &(String, String),
    live: Option<(StoreKey, Arc<ValidatingWebhookConfiguration>)>,
) -> bool {
    let (Some((_, live)), Some(mine)) = (live, installed.get(&key.0)) else {
        return false;
    };
    mine.metadata.name.as_deref() == Some(key.1.as_str())
        && live.metadata.resource_version.is_some()
        && live.metadata.resource_version == mine.metadata.resource_version
}
