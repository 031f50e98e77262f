//! The kcp reconciler across passes (issue 34): what the last pass computed, kept
//! so that the next recomputes only what its changes reach.
//!
//! The stores record the keys added, replaced or removed since the last pass
//! ([`StoreChanges`]). A pass whose changes are all attributed to keys updates
//! the last pass's result: the rules changed (and those whose evaluation is
//! retried every pass) are evaluated again, the workspaces they route to before
//! and after get their targets rebuilt, the configurations of those workspaces
//! and of those whose live configuration changed are compared, and the statuses
//! of the rules and policies that read a configuration that changed, or that
//! changed themselves, are compared. An export answer read again outside the pass
//! (about once per resync period: [`ExportAnswers`]) and found different wakes the
//! pass and has the rules that used it evaluated again. A relist, a watch that
//! changed state, the full resync (every [`FULL_RESYNC_EVERY`] resync periods), new
//! install options, a failed write or a pass that errored make the next pass a
//! full one, which computes everything from all objects as before.

use super::*;
use crate::cycles::{Cycle, EdgeGraph};

/// One rule whose evaluation (or object) changed in a pass: its evaluation
/// before (`None`: new) and after (`None`: removed).
pub(super) struct RuleDelta {
    pub(super) key: StoreKey,
    pub(super) old: Option<Arc<RuleEval>>,
    pub(super) new: Option<Arc<RuleEval>>,
}

impl RuleDelta {
    /// Whether the evaluation changed (an object changed with the same
    /// evaluation only needs its status compared).
    pub(super) fn eval_changed(&self) -> bool {
        match (&self.old, &self.new) {
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            (None, None) => false,
            _ => true,
        }
    }
}

/// What the last pass computed.
#[derive(Default)]
pub(super) struct Fleet {
    /// Whether the rest is what the last pass computed (otherwise the next pass
    /// computes everything).
    pub(super) valid: bool,
    /// The install options of the last pass.
    pub(super) opts: Option<InstallOptions>,
    /// Every rule, by key.
    pub(super) rules: BTreeMap<StoreKey, RuleState>,
    /// The rules evaluated again on every pass: the invalid ones (a problem may
    /// clear without any change, as a full pass finds).
    pub(super) retry: BTreeSet<StoreKey>,
    /// Every workspace's target.
    pub(super) targets: Targets,
    /// The plan of the other kinds the last pass used.
    pub(super) plan: Option<Arc<PlannedKinds>>,
    /// The configurations installed after the last pass.
    pub(super) installed: BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    /// What kcp was seen enforcing after the last pass.
    pub(super) effective: BTreeMap<String, Arc<ValidatingWebhookConfiguration>>,
    pub(super) pending: BTreeMap<String, String>,
    /// Per logical cluster: the rules whose status reads its configuration.
    pub(super) readers: HashMap<String, HashSet<StoreKey>>,
    /// The rules' edges, and the cycles they form.
    pub(super) graph: EdgeGraph,
    pub(super) cycles: BTreeMap<String, Cycle>,
    /// Per logical cluster: the policies of the other kinds (indices into the
    /// plan `kind_plan`) whose status reads its configuration.
    pub(super) kind_readers: HashMap<String, Vec<usize>>,
    pub(super) kind_plan: Option<Arc<PlannedKinds>>,
    /// Whether the last pass left the statuses (deferred) after a full
    /// evaluation or a change of the cycles: the next compares all.
    pub(super) statuses_full: bool,
    /// What passes that left the statuses (deferred) after an update would have
    /// compared: the next pass compares them too.
    pub(super) deferred: Deferred,
}

/// The statuses a pass left to the next (see [`Fleet::deferred`]).
#[derive(Default)]
pub(super) struct Deferred {
    /// The rules that changed.
    pub(super) rules: BTreeSet<StoreKey>,
    /// The logical clusters whose configuration changed.
    pub(super) clusters: BTreeSet<String>,
}

impl Fleet {
    /// The rules of a full evaluation.
    pub(super) fn set_rules(&mut self, rules: Vec<(StoreKey, RuleState)>) {
        self.retry = rules
            .iter()
            .filter(|(_, r)| r.eval.invalid.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        self.rules = rules.into_iter().collect();
    }

    /// Whether some rule's problem may clear without a change (retry soon).
    pub(super) fn unresolved(&self) -> bool {
        self.retry.iter().any(|k| {
            self.rules.get(k).is_some_and(|r| {
                r.eval
                    .invalid
                    .as_ref()
                    .is_some_and(|i| RETRIED.contains(&i.reason))
            })
        })
    }

    /// The readers, the edge graph and the cycles, from all rules.
    pub(super) fn rebuild_status_index(&mut self) {
        self.readers.clear();
        for (key, r) in &self.rules {
            for lc in status_clusters(&r.eval) {
                self.readers
                    .entry(lc.clone())
                    .or_default()
                    .insert(key.clone());
            }
        }
        let edges: Vec<&RuleEdges> = self
            .rules
            .values()
            .filter_map(|r| r.eval.edges.as_ref())
            .collect();
        self.graph = EdgeGraph::of(&edges);
        self.cycles = find_cycles(&edges);
    }

    /// Updates the readers and the edge graph with `delta`; returns whether the
    /// cycles changed (then found again over all rules).
    pub(super) fn update_status_index(&mut self, delta: &[RuleDelta]) -> bool {
        let (mut closes, mut edges_changed) = (false, false);
        for d in delta.iter().filter(|d| d.eval_changed()) {
            if let Some(old) = &d.old {
                for lc in status_clusters(old) {
                    if let Some(r) = self.readers.get_mut(lc.as_str()) {
                        r.remove(&d.key);
                        if r.is_empty() {
                            self.readers.remove(lc.as_str());
                        }
                    }
                }
                if let Some(e) = &old.edges {
                    self.graph.remove(e);
                    edges_changed = true;
                }
            }
            if let Some(new) = &d.new {
                for lc in status_clusters(new) {
                    self.readers
                        .entry(lc.clone())
                        .or_default()
                        .insert(d.key.clone());
                }
                if let Some(e) = &new.edges {
                    closes |= self.graph.add(e);
                    edges_changed = true;
                }
            }
        }
        // An acyclic graph stays acyclic unless an edge added closes a cycle.
        if !closes && (self.cycles.is_empty() || !edges_changed) {
            return false;
        }
        let edges: Vec<&RuleEdges> = self
            .rules
            .values()
            .filter_map(|r| r.eval.edges.as_ref())
            .collect();
        let cycles = find_cycles(&edges);
        let changed = cycles != self.cycles;
        self.cycles = cycles;
        changed
    }

    /// Leaves the statuses of a pass to the next: after an update (`scope`, the
    /// workspaces whose configuration it changed), the rules of `delta` and the
    /// workspaces of `scope`; after a full evaluation (`None`), or when `delta` changes the
    /// cycles, every status.
    pub(super) fn defer(&mut self, delta: Vec<RuleDelta>, scope: Option<&BTreeSet<String>>) {
        match scope {
            Some(scope) if !self.statuses_full && !self.update_status_index(&delta) => {
                self.deferred.rules.extend(delta.into_iter().map(|d| d.key));
                self.deferred.clusters.extend(scope.iter().cloned());
            }
            _ => self.statuses_full = true,
        }
    }

    /// The policies of the other kinds whose status reads the configuration of
    /// some logical cluster, by cluster (rebuilt when the plan changes).
    pub(super) fn index_kinds(&mut self, plan: &Arc<PlannedKinds>) {
        self.kind_readers.clear();
        for (i, e) in plan.policies.iter().enumerate() {
            for lc in kind_status_clusters(e, plan.home.as_deref()) {
                self.kind_readers.entry(lc.to_string()).or_default().push(i);
            }
        }
        self.kind_plan = Some(plan.clone());
    }
}

/// The logical clusters whose configurations the status of policy `e` reads
/// (the same as [`Reconciler::write_kind_statuses`] compares).
pub(super) fn kind_status_clusters<'a>(
    e: &'a crate::kcp::kinds::PolicyEval,
    home: Option<&'a str>,
) -> impl Iterator<Item = &'a str> {
    std::iter::once(e.cluster.as_str())
        .chain(e.exported.iter().map(|(_, lc, _)| lc.as_str()))
        .chain(home.filter(|_| e.kind == Kind::CriticalService))
}

/// The keys of two maps whose values differ (by `same`), or that only one has.
pub(super) fn changed_keys<V>(
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
    same: impl Fn(&V, &V) -> bool,
    into: &mut BTreeSet<String>,
) {
    let (mut a, mut b) = (before.iter().peekable(), after.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => return,
            (Some((k, _)), None) => {
                into.insert((*k).clone());
                a.next();
            }
            (None, Some((k, _))) => {
                into.insert((*k).clone());
                b.next();
            }
            (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    into.insert((*ka).clone());
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    into.insert((*kb).clone());
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if !same(va, vb) {
                        into.insert((*ka).clone());
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
}

impl Targets {
    /// The targets of the last [`Targets::desired`] or [`Targets::update`].
    pub(super) fn current(&self) -> &BTreeMap<String, Arc<WorkspaceTarget>> {
        &self.desired
    }

    /// Updates the targets with the rules changed (`delta`) and the plan
    /// (`before`: the last plan's parts when the plan changed, `None` when it is
    /// the same); returns the logical clusters whose target changed or went.
    /// Every other workspace keeps its target: it is the same function of the
    /// same inputs (what [`Targets::desired`] would keep too).
    pub(super) fn update(
        &mut self,
        delta: &[RuleDelta],
        planned: &BTreeMap<String, Arc<WorkspaceTarget>>,
        before: Option<&BTreeMap<String, Arc<WorkspaceTarget>>>,
    ) -> BTreeSet<String> {
        let mut affected: BTreeSet<String> = BTreeSet::new();
        for d in delta.iter().filter(|d| d.eval_changed()) {
            if let Some(old) = &d.old {
                for lc in old.targets.keys() {
                    affected.insert(lc.clone());
                    if let Some(r) = self.routes.get_mut(lc.as_str()) {
                        r.remove(&d.key);
                        if r.is_empty() {
                            self.routes.remove(lc.as_str());
                        }
                    }
                }
            }
            if let Some(new) = &d.new {
                for lc in new.targets.keys() {
                    affected.insert(lc.clone());
                    self.routes
                        .entry(lc.clone())
                        .or_default()
                        .insert(d.key.clone(), new.clone());
                }
            }
        }
        if let Some(before) = before {
            changed_keys(before, planned, Arc::ptr_eq, &mut affected);
        }
        let mut changed = BTreeSet::new();
        for lc in affected {
            let now = self.rebuild(&lc, planned);
            let was = self.desired.get(lc.as_str());
            let same = match (was, &now) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            if !same {
                match now {
                    Some(t) => self.desired.insert(lc.clone(), t),
                    None => self.desired.remove(lc.as_str()),
                };
                changed.insert(lc);
            }
        }
        changed
    }

    /// Workspace `lc`'s target from the rules routing there and the plan's part
    /// (the last one while those are the same objects); `None` when it needs none.
    pub(super) fn rebuild(
        &mut self,
        lc: &str,
        planned: &BTreeMap<String, Arc<WorkspaceTarget>>,
    ) -> Option<Arc<WorkspaceTarget>> {
        let evals: Vec<&Arc<RuleEval>> = self
            .routes
            .get(lc)
            .map(|r| r.values().collect())
            .unwrap_or_default();
        let plan_part = planned.get(lc);
        if evals.is_empty() && plan_part.is_none() {
            self.by_lc.remove(lc);
            return None;
        }
        let target = match self.by_lc.remove(lc) {
            Some(b) if b.built_from(&evals, plan_part) => b,
            _ => CachedTarget {
                evals: evals.iter().map(|e| Arc::clone(e)).collect(),
                plan_part: plan_part.cloned(),
                target: Arc::new(rules_target(lc, &evals, plan_part.map(|p| (**p).clone()))),
            },
        };
        let out = target.target.clone();
        self.by_lc.insert(lc.to_string(), target);
        Some(out)
    }
}

impl Reconciler {
    /// The changes of `store` since the last pass.
    pub(super) fn take_changes<K: Keep>(store: &Shared<K>) -> StoreChanges {
        store.lock().take_changes()
    }

    /// Phases 1 and 2 of an incremental pass: the rules changed since the last
    /// pass (`changes`) and those retried every pass evaluated again into
    /// `fleet`; returns what changed, or `None` when some export answer changed
    /// (then every rule is evaluated: a full pass).
    pub(super) async fn evaluate_changed(
        &self,
        fleet: &mut Fleet,
        changes: &StoreChanges,
    ) -> Option<Vec<RuleDelta>> {
        // The rules that used an answer now different (read again outside the
        // pass, [`ExportAnswers::run`]) are evaluated again (their answers compared
        // one by one in `evaluate`).
        let replaced = self.answers.take_replaced();
        let readers = readers_of(&self.memo.evals.lock(), &replaced);
        let keys: BTreeSet<(String, String)> = changes
            .keys()
            .cloned()
            .chain(fleet.retry.iter().map(|k| (**k).clone()))
            .chain(readers.iter().cloned())
            .collect();
        if !replaced.is_empty() {
            tracing::debug!(
                changed = replaced.len(),
                rules = readers.len(),
                "export answers changed"
            );
        }
        let mut delta = Vec::new();
        for key in keys {
            let found = self.rules.lock().get(&key);
            let Some((skey, obj)) = found else {
                fleet.retry.remove(&key);
                if let Some((k, old)) = fleet.rules.remove_entry(&key) {
                    self.memo.forget_rule(&key, old.eval.key());
                    delta.push(RuleDelta {
                        key: k,
                        old: Some(old.eval),
                        new: None,
                    });
                }
                continue;
            };
            let parsed = Memo::parsed_of(&mut self.memo.parsed.lock(), &skey, &obj);
            // The evaluation kept while the spec and every answer are the same
            // (what the full evaluation keeps).
            let kept = match readers.contains(&key) {
                true => None,
                false => Memo::kept_eval(&mut self.memo.evals.lock(), &key, &parsed),
            };
            let (eval, rule) = match kept {
                Some(eval) => (eval, parsed.rule.as_ref().ok().cloned()),
                None => self.evaluate(&skey, &parsed).await,
            };
            match eval.invalid.is_some() {
                true => fleet.retry.insert(skey.clone()),
                false => fleet.retry.remove(&key),
            };
            let state = RuleState {
                obj,
                parsed,
                eval: eval.clone(),
                rule,
            };
            let old = fleet.rules.insert(skey.clone(), state);
            let same = old.as_ref().is_some_and(|o| {
                Arc::ptr_eq(&o.eval, &eval)
                    && fleet
                        .rules
                        .get(&key)
                        .is_some_and(|n| Arc::ptr_eq(&o.parsed, &n.parsed))
            });
            if !same {
                delta.push(RuleDelta {
                    key: skey,
                    old: old.map(|o| o.eval),
                    new: Some(eval),
                });
            }
        }
        Some(delta)
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
