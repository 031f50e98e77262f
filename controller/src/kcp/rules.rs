//! The kcp reconciler, phases 1 and 2: the rules decoded and evaluated (workspace
//! paths resolved, APIExports looked up, answers reused within a pass).

use super::*;

impl Reconciler {
    /// One rule's evaluation: the spec's problems, then every APIExport it names
    /// (looked up once per pass). Reused from the previous pass when the rule
    /// object and every lookup answer it used are the same.
    pub(super) async fn evaluate(
        &self,
        key: &StoreKey,
        parsed: &Arc<Parsed>,
        answers: &mut PassLookups,
    ) -> (Arc<RuleEval>, Option<Arc<DependencyRule>>) {
        let (cluster, name) = (key.0.as_str(), key.1.as_str());
        let new_eval = || RuleEval {
            cluster: cluster.to_string(),
            key: format!("{cluster}/{name}"),
            invalid: None,
            workspaces: Vec::new(),
            targets: RuleTargets::default(),
            edges: None,
        };
        let rule = match &parsed.rule {
            Ok(r) => r.clone(),
            Err(message) => {
                let mut eval = new_eval();
                eval.invalid = Some(Invalid {
                    reason: reasons::INVALID_SPEC,
                    message: message.clone(),
                });
                return (Arc::new(eval), None);
            }
        };
        if parsed.invalid.is_some() {
            let mut eval = new_eval();
            eval.invalid = parsed.invalid.clone();
            return (Arc::new(eval), Some(rule));
        }
        // Every answer the rule depends on, in spec order.
        let dependent = &rule.spec.dependent;
        let dependent_found = match &dependent.api_export_name {
            Some(export) => Some(self.lookup(answers, cluster, export, Where::Cluster).await),
            None => None,
        };
        let mut found_refs = Vec::with_capacity(rule.spec.dependencies.len());
        for d in &rule.spec.dependencies {
            found_refs.push(match &d.api_export_ref {
                Some(r) => Some(self.lookup(answers, &r.path, &r.name, Where::Path).await),
                None => None,
            });
        }
        let used: Vec<Arc<ExportLookup>> = dependent_found
            .iter()
            .chain(found_refs.iter().flatten())
            .cloned()
            .collect();
        {
            let mut cache = self.memo.evals.lock();
            if let Some(c) = cache.get_mut(key)
                && c.parsed.same_spec(parsed)
                && c.used.len() == used.len()
                && c.used.iter().zip(&used).all(|(a, b)| Arc::ptr_eq(a, b))
            {
                // The newest decoding from now on (the older one is let go).
                c.parsed = parsed.clone();
                return (c.eval.clone(), Some(rule));
            }
        }
        let mut eval = new_eval();
        // Built here, kept compact (see [`RuleTargets`]).
        let mut targets: BTreeMap<String, ExportTargets> = BTreeMap::new();
        // (reason, message) per problem, in spec order.
        let mut problems: Vec<(&'static str, String)> = Vec::new();
        if let (Some(export), Some(found)) = (&dependent.api_export_name, &dependent_found) {
            // The dependent's export lives in the rule's own workspace.
            let gr = GroupResource::new(&dependent.group, &dependent.resource);
            if let Err((reason, msg)) = found.exporting(&gr, cluster, export) {
                self.reread_if_lacking(reason, found.lc.as_deref(), export)
                    .await;
                answers.read_again(Where::Cluster, cluster, export);
                problems.push((reason, format!("spec.dependent.apiExportName: {msg}")));
            }
        }
        for (i, (d, found)) in rule.spec.dependencies.iter().zip(&found_refs).enumerate() {
            let (Some(r), Some(found)) = (&d.api_export_ref, found) else {
                problems.push((
                    reasons::INVALID_SPEC,
                    format!("spec.dependencies[{i}].apiExportRef is required on kcp"),
                ));
                continue;
            };
            let gr = GroupResource::new(&d.group, &d.resource);
            let lc = found.lc.clone();
            let info = found.export.as_deref().ok();
            match found.exporting(&gr, &r.path, &r.name) {
                Ok(()) => {
                    if let Some(lc) = &lc {
                        targets
                            .entry(lc.clone())
                            .or_default()
                            .entry(r.name.clone())
                            .or_default()
                            .insert(gr);
                    }
                    eval.note_workspace(&r.path, &r.name, lc, info, None);
                }
                Err((reason, msg)) => {
                    self.reread_if_lacking(reason, lc.as_deref(), &r.name).await;
                    answers.read_again(Where::Path, &r.path, &r.name);
                    problems.push((
                        reason,
                        format!("spec.dependencies[{i}].apiExportRef: {msg}"),
                    ));
                    eval.note_workspace(&r.path, &r.name, lc, info, Some(msg));
                }
            }
        }
        if let Some((reason, _)) = problems.first() {
            eval.invalid = Some(Invalid {
                reason,
                message: problems
                    .iter()
                    .map(|(_, m)| m.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        } else {
            eval.targets = targets.into();
            eval.edges = Some(RuleEdges::of(eval.key(), &rule));
        }
        eval.workspaces.shrink_to_fit();
        let eval = Arc::new(eval);
        let mut cache = self.memo.evals.lock();
        if eval.invalid.is_none() {
            cache.insert(
                key.clone(),
                CachedEval {
                    parsed: parsed.clone(),
                    used,
                    eval: eval.clone(),
                },
            );
        } else {
            // A problem found may clear without any answer changing (an
            // export re-read): evaluate it afresh next pass.
            cache.remove(key);
        }
        (eval, Some(rule))
    }

    /// APIExport `name` at `at` (a workspace path, or the rule's own logical
    /// cluster), looked up once per pass; an answer equal to the previous pass's
    /// is that pass's `Arc`.
    pub(super) async fn lookup(
        &self,
        answers: &mut PassLookups,
        at: &str,
        name: &str,
        kind: Where,
    ) -> Arc<ExportLookup> {
        let period = self.settings.resync;
        let before = match answers.get_answer(kind, at, name) {
            Some(a) if a.pass == answers.pass || a.settled(period) => return a.found.clone(),
            Some(a) => Some(a.found.clone()),
            None => None,
        };
        let found = self.lookup_now(at, name, kind, before.is_some()).await;
        answers.insert(kind, at, name, PassLookups::same_or_new(before, found))
    }

    /// APIExport `name` at `at`, read through the caches; with `afresh`, the
    /// path's resolution and the export are read from kcp (an answer refreshed).
    pub(super) async fn lookup_now(
        &self,
        at: &str,
        name: &str,
        kind: Where,
        afresh: bool,
    ) -> ExportLookup {
        let key = (at.to_string(), name.to_string());
        let resolved = match kind {
            Where::Cluster => Ok(at.to_string()),
            Where::Path => {
                if afresh {
                    self.resolver.forget_path(at).await;
                }
                self.resolver.resolve(at).await
            }
        };
        let mut lc = match resolved {
            Ok(lc) => lc,
            Err(e) => {
                let definite = e.is_definite();
                return self.or_last_good(
                    &key,
                    definite,
                    ExportLookup::failed(None, reasons::UNRESOLVED_WORKSPACE, e.to_string()),
                );
            }
        };
        if afresh {
            self.exports.forget_export(&lc, name).await;
        }
        let mut read = self.exports.get(&lc, at, name).await;
        if kind == Where::Path
            && matches!(
                read,
                Err(ExportError::NotFound { .. } | ExportError::Forbidden { .. })
            )
        {
            // The workspace may have been deleted or replaced under the same
            // path: resolve it afresh before believing the answer.
            self.forget_cluster(&lc).await;
            match self.resolver.resolve(at).await {
                Ok(fresh) if fresh != lc => {
                    lc = fresh;
                    read = self.exports.get(&lc, at, name).await;
                }
                Ok(_) => {}
                Err(e) if e.is_definite() => {
                    let gone =
                        ExportLookup::failed(None, reasons::UNRESOLVED_WORKSPACE, e.to_string());
                    return self.or_last_good(&key, true, gone);
                }
                Err(_) => {}
            }
        }
        match read {
            Ok(export) => {
                let found = ExportFound {
                    lc: lc.clone(),
                    export,
                };
                self.memo.last_good.lock().insert(key, found.clone());
                ExportLookup {
                    lc: Some(found.lc),
                    export: Ok(found.export),
                }
            }
            Err(e) => {
                let (reason, definite) = match &e {
                    ExportError::NotFound { .. } => (reasons::API_EXPORT_NOT_FOUND, true),
                    ExportError::Forbidden { .. } => (reasons::API_EXPORT_FORBIDDEN, true),
                    ExportError::Failed { .. } => (reasons::API_EXPORT_UNREADABLE, false),
                };
                let message = match kind {
                    Where::Path => format!("{e} (logical cluster {lc})"),
                    Where::Cluster => e.to_string(),
                };
                self.or_last_good(
                    &key,
                    definite,
                    ExportLookup::failed(Some(lc), reason, message),
                )
            }
        }
    }

    /// `failed`, unless it is not definite and an earlier lookup succeeded: then
    /// that answer (a passing failure keeps protection as it was).
    pub(super) fn or_last_good(
        &self,
        key: &(String, String),
        definite: bool,
        failed: ExportLookup,
    ) -> ExportLookup {
        let mut last = self.memo.last_good.lock();
        if definite {
            last.remove(key);
            return failed;
        }
        match last.get(key) {
            Some(found) => {
                let reason = failed
                    .export
                    .as_ref()
                    .err()
                    .map(|(_, m)| m.clone())
                    .unwrap_or_default();
                tracing::warn!(path = %key.0, export = %key.1, error = %reason, "lookup failed; keeping the last answer");
                ExportLookup {
                    lc: Some(found.lc.clone()),
                    export: Ok(found.export.clone()),
                }
            }
            None => failed,
        }
    }

    /// An export found without a resource is read afresh next pass (the retry
    /// notices the resource added without waiting for the cache to expire).
    pub(super) async fn reread_if_lacking(&self, reason: &str, lc: Option<&str>, export: &str) {
        if reason == reasons::RESOURCE_NOT_EXPORTED
            && let Some(lc) = lc
        {
            self.exports.forget_export(lc, export).await;
        }
    }

    /// Forgets what is cached for logical cluster `lc` (a read or write there
    /// answered 403 or 404).
    pub(super) async fn forget_cluster(&self, lc: &str) {
        self.resolver.forget(lc).await;
        self.exports.forget(lc).await;
        // The answers found there are read again by the next pass.
        self.memo.forgotten.lock().insert(lc.to_string());
    }

    /// The answers kept from the last pass, this pass's from now on, with up to
    /// [`REFRESH_BUDGET`] of those older than the refresh period (the resync
    /// period) read again from kcp, oldest first, [`REFRESH_CONCURRENCY`] at a
    /// time: every answer is re-read about once per period, spread over the
    /// passes instead of all at once. Returns the answers, those replaced by a
    /// different one (the rules that used them are evaluated again), and whether
    /// more are due (the next pass comes soon).
    pub(super) async fn refresh_answers(&self) -> Refreshed {
        let mut answers = std::mem::take(&mut *self.memo.lookups.lock());
        answers.pass += 1;
        let forgotten = std::mem::take(&mut *self.memo.forgotten.lock());
        answers.read_again_in(&forgotten);
        let (due, more) = answers.due(self.settings.resync, REFRESH_BUDGET);
        let read: Vec<_> = futures::stream::iter(due)
            .map(|(kind, at, name)| async move {
                let found = self.lookup_now(&at, &name, kind, true).await;
                (kind, at, name, found)
            })
            .buffer_unordered(REFRESH_CONCURRENCY)
            .collect()
            .await;
        let refreshed = read.len();
        let mut replaced = Vec::new();
        for (kind, at, name, found) in read {
            let before = answers.get(kind, &at, &name).cloned();
            let kept = answers.insert(
                kind,
                &at,
                &name,
                PassLookups::same_or_new(before.clone(), found),
            );
            if let Some(b) = before
                && !Arc::ptr_eq(&b, &kept)
            {
                replaced.push(b);
            }
        }
        *self.memo.next_refresh.lock() = answers.next_due(self.settings.resync);
        Refreshed {
            answers,
            replaced,
            refreshed,
            more,
        }
    }

    /// Phases 1 and 2: every rule object decoded (cached per resourceVersion)
    /// and evaluated.
    pub(super) async fn evaluate_rules(&self) -> Evaluated {
        let objects = self.rule_objects();
        let (parsed, removed): (Vec<Arc<Parsed>>, bool) = {
            let mut cache = self.memo.parsed.lock();
            let parsed: Vec<Arc<Parsed>> = objects
                .iter()
                .map(|(key, obj)| Memo::parsed_of(&mut cache, key, obj))
                .collect();
            // Every rule has its entry now: more entries than rules means some
            // rule was removed, whose entries go (only then, not every pass).
            let removed = cache.len() > objects.len();
            if removed {
                let keep: HashSet<&(String, String)> =
                    objects.iter().map(|(k, _)| k.as_ref()).collect();
                cache.retain(|k, _| keep.contains(k.as_ref()));
                self.memo
                    .evals
                    .lock()
                    .retain(|k, _| keep.contains(k.as_ref()));
            }
            (parsed, removed)
        };
        let Refreshed {
            mut answers,
            replaced,
            more,
            ..
        } = self.refresh_answers().await;
        self.more_due.store(more, Ordering::Relaxed);
        // The evaluations kept, found under one lock (the fresh ones are awaited);
        // after an answer changed, each rule's answers are compared in `evaluate`.
        let kept: Vec<Option<Arc<RuleEval>>> = match replaced.is_empty() {
            true => {
                let mut cache = self.memo.evals.lock();
                objects
                    .iter()
                    .zip(&parsed)
                    .map(|((key, _), parsed)| Memo::kept_eval(&mut cache, key, parsed))
                    .collect()
            }
            false => vec![None; objects.len()],
        };
        let mut fresh = removed;
        let mut rules = Vec::with_capacity(objects.len());
        for (((key, obj), parsed), kept) in objects.into_iter().zip(parsed).zip(kept) {
            let (eval, rule) = match kept {
                Some(eval) => (eval, parsed.rule.as_ref().ok().cloned()),
                None => {
                    fresh = true;
                    self.evaluate(&key, &parsed, &mut answers).await
                }
            };
            rules.push((
                key,
                RuleState {
                    obj,
                    parsed,
                    eval,
                    rule,
                },
            ));
        }
        *self.memo.lookups.lock() = answers;
        Evaluated {
            rules,
            fresh,
            removed,
        }
    }
}

impl Parsed {
    pub(super) fn of(obj: &DynamicObject) -> Self {
        let rule = crate::kubernetes::decode::<DependencyRule>(obj).map(Arc::new);
        let invalid = match &rule {
            Ok(r) => check_dependency_rule(r, &Default::default(), false),
            Err(_) => None,
        };
        Self {
            rv: obj.metadata.resource_version.clone().unwrap_or_default(),
            spec_of: (obj.metadata.uid.clone(), obj.metadata.generation),
            rule,
            invalid,
            status: crate::kubernetes::current_status(obj),
            workspaces: match &obj.data["status"]["workspaces"] {
                serde_json::Value::Null => json!([]),
                v => v.clone(),
            },
        }
    }

    /// Whether `other` was decoded from the same spec: the same decoding, or the
    /// same object (uid) at the same generation, as after a status write. A rule's
    /// evaluation is a function of its spec and the answers it used, so it is kept
    /// across the echoes of status writes (without a generation, only the same
    /// decoding counts).
    pub(super) fn same_spec(&self, other: &Arc<Parsed>) -> bool {
        std::ptr::eq(self, Arc::as_ptr(other))
            || (self.spec_of.0.is_some()
                && self.spec_of.1.is_some()
                && self.spec_of == other.spec_of)
    }
}

impl ExportLookup {
    pub(super) fn failed(lc: Option<String>, reason: &'static str, message: String) -> Self {
        Self {
            lc,
            export: Err((reason, message)),
        }
    }

    /// Ok when the export was found and exports `gr`.
    pub(super) fn exporting(
        &self,
        gr: &GroupResource,
        workspace: &str,
        name: &str,
    ) -> Result<(), (&'static str, String)> {
        let export = self.export.as_ref().map_err(|e| e.clone())?;
        if export.resources.contains(gr) {
            return Ok(());
        }
        let exported: Vec<String> = export.resources.iter().map(|r| r.to_string()).collect();
        Err((
            reasons::RESOURCE_NOT_EXPORTED,
            format!(
                "APIExport {name} in workspace {workspace} does not export {gr} (it exports: {})",
                if exported.is_empty() {
                    "nothing".to_string()
                } else {
                    exported.join(", ")
                }
            ),
        ))
    }
}

/// Per pass, at most this many answers older than the refresh period are read again.
pub(super) const REFRESH_BUDGET: usize = 128;
/// Answers read again at once.
const REFRESH_CONCURRENCY: usize = 16;

/// What [`Reconciler::refresh_answers`] returns.
pub(super) struct Refreshed {
    pub(super) answers: PassLookups,
    /// Answers read again and found different: the ones before.
    pub(super) replaced: Vec<Arc<ExportLookup>>,
    /// How many were read again.
    pub(super) refreshed: usize,
    /// Whether more than the budget were due.
    pub(super) more: bool,
}

impl Answer {
    /// Whether it is carried without asking: the export was found, no rule found
    /// it lacking, and it is younger than `period`.
    fn settled(&self, period: Duration) -> bool {
        self.found.export.is_ok() && self.read_at.is_some_and(|t| t.elapsed() < period)
    }
}

impl PassLookups {
    pub(super) fn get(&self, kind: Where, at: &str, name: &str) -> Option<&Arc<ExportLookup>> {
        self.get_answer(kind, at, name).map(|a| &a.found)
    }

    pub(super) fn get_answer(&self, kind: Where, at: &str, name: &str) -> Option<&Answer> {
        self.answers.get(&kind)?.get(at)?.get(name)
    }

    fn entries(&self) -> impl Iterator<Item = (Where, &str, &str, &Answer)> {
        self.answers.iter().flat_map(|(kind, at)| {
            at.iter().flat_map(move |(at, names)| {
                names
                    .iter()
                    .map(move |(name, a)| (*kind, at.as_str(), name.as_str(), a))
            })
        })
    }

    /// The answers to read again at the start of a pass: every failed one, and
    /// up to `budget` of the others that are no longer settled, oldest first;
    /// and whether some were left for a later pass.
    pub(super) fn due(
        &self,
        period: Duration,
        budget: usize,
    ) -> (Vec<(Where, String, String)>, bool) {
        let mut failed = Vec::new();
        let mut old = Vec::new();
        for (kind, at, name, a) in self.entries() {
            if a.found.export.is_err() {
                failed.push((kind, at, name));
            } else if !a.settled(period) {
                old.push((a.read_at, kind, at, name));
            }
        }
        let more = old.len() > budget;
        if more {
            old.select_nth_unstable_by_key(budget, |(t, ..)| *t);
            old.truncate(budget);
        }
        let own = |(kind, at, name): (Where, &str, &str)| (kind, at.to_string(), name.to_string());
        let due = failed
            .into_iter()
            .chain(old.into_iter().map(|(_, kind, at, name)| (kind, at, name)))
            .map(own)
            .collect();
        (due, more)
    }

    /// When the oldest settled answer stops being settled.
    pub(super) fn next_due(&self, period: Duration) -> Option<std::time::Instant> {
        self.entries()
            .filter(|(.., a)| a.found.export.is_ok())
            .filter_map(|(.., a)| a.read_at)
            .min()
            .map(|t| t + period)
    }

    /// Answer (kind, at, name) is read again by the next pass needing it.
    pub(super) fn read_again(&mut self, kind: Where, at: &str, name: &str) {
        if let Some(a) = self
            .answers
            .get_mut(&kind)
            .and_then(|m| m.get_mut(at))
            .and_then(|m| m.get_mut(name))
        {
            a.read_at = None;
        }
    }

    /// Every answer found in one of the logical clusters `lcs` is read again by
    /// the next pass needing it.
    pub(super) fn read_again_in(&mut self, lcs: &HashSet<String>) {
        if lcs.is_empty() {
            return;
        }
        for a in self
            .answers
            .values_mut()
            .flat_map(|m| m.values_mut())
            .flat_map(|m| m.values_mut())
        {
            if a.found.lc.as_ref().is_some_and(|lc| lcs.contains(lc)) {
                a.read_at = None;
            }
        }
    }

    /// `before` when `found` equals it, else `found` anew.
    pub(super) fn same_or_new(
        before: Option<Arc<ExportLookup>>,
        found: ExportLookup,
    ) -> Arc<ExportLookup> {
        match before {
            Some(b) if *b == found => b,
            _ => Arc::new(found),
        }
    }

    /// Keeps only the answers `named` names.
    pub(super) fn retain(&mut self, named: &HashSet<(Where, &str, &str)>) {
        for (kind, at) in self.answers.iter_mut() {
            for (path, names) in at.iter_mut() {
                names.retain(|name, _| named.contains(&(*kind, path.as_str(), name.as_str())));
            }
            at.retain(|_, names| !names.is_empty());
        }
        self.answers.retain(|_, at| !at.is_empty());
    }

    /// Records `found` as read now by this pass; returns it.
    pub(super) fn insert(
        &mut self,
        kind: Where,
        at: &str,
        name: &str,
        found: Arc<ExportLookup>,
    ) -> Arc<ExportLookup> {
        let answer = Answer {
            found: found.clone(),
            read_at: Some(std::time::Instant::now()),
            pass: self.pass,
        };
        let names = self.answers.entry(kind).or_default();
        match names.get_mut(at) {
            Some(m) => {
                m.insert(name.to_string(), answer);
            }
            None => {
                names
                    .entry(at.to_string())
                    .or_default()
                    .insert(name.to_string(), answer);
            }
        }
        found
    }
}
