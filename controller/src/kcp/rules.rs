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
        prev: &PassLookups,
    ) -> (Arc<RuleEval>, Option<Arc<DependencyRule>>) {
        let (cluster, name) = (key.0.as_str(), key.1.as_str());
        let new_eval = || RuleEval {
            cluster: cluster.to_string(),
            key: format!("{cluster}/{name}"),
            invalid: None,
            workspaces: Vec::new(),
            targets: BTreeMap::new(),
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
            Some(export) => Some(
                self.lookup(answers, prev, cluster, export, Where::Cluster)
                    .await,
            ),
            None => None,
        };
        let mut found_refs = Vec::with_capacity(rule.spec.dependencies.len());
        for d in &rule.spec.dependencies {
            found_refs.push(match &d.api_export_ref {
                Some(r) => Some(
                    self.lookup(answers, prev, &r.path, &r.name, Where::Path)
                        .await,
                ),
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
        // (reason, message) per problem, in spec order.
        let mut problems: Vec<(&'static str, String)> = Vec::new();
        if let (Some(export), Some(found)) = (&dependent.api_export_name, &dependent_found) {
            // The dependent's export lives in the rule's own workspace.
            let gr = GroupResource::new(&dependent.group, &dependent.resource);
            if let Err((reason, msg)) = found.exporting(&gr, cluster, export) {
                self.reread_if_lacking(reason, found.lc.as_deref(), export)
                    .await;
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
                        eval.targets
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
            eval.targets.clear();
        } else {
            eval.edges = Some(RuleEdges::of(eval.key(), &rule));
        }
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
        prev: &PassLookups,
        at: &str,
        name: &str,
        kind: Where,
    ) -> Arc<ExportLookup> {
        if let Some(found) = answers.get(kind, at, name) {
            return found.clone();
        }
        let found = self.lookup_now(at, name, kind).await;
        let found = match prev.get(kind, at, name) {
            Some(before) if **before == found => before.clone(),
            _ => Arc::new(found),
        };
        answers.insert(kind, at, name, found.clone());
        found
    }

    pub(super) async fn lookup_now(&self, at: &str, name: &str, kind: Where) -> ExportLookup {
        let key = (at.to_string(), name.to_string());
        let resolved = match kind {
            Where::Cluster => Ok(at.to_string()),
            Where::Path => self.resolver.resolve(at).await,
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
    }

    /// The previous pass's answers, asked again first: while every one is the
    /// same, a rule whose object is unchanged keeps its evaluation without asking
    /// for its answers one by one (the same result `evaluate` reaches). Returns
    /// this pass's answers so far, the previous pass's, and whether all are the
    /// same.
    pub(super) async fn ask_again(&self) -> (PassLookups, PassLookups, bool) {
        let prev = std::mem::take(&mut *self.memo.lookups.lock());
        let mut answers = PassLookups::default();
        let mut answers_same = true;
        for (kind, at, name) in prev.keys() {
            let found = self.lookup(&mut answers, &prev, at, name, kind).await;
            answers_same &= prev
                .get(kind, at, name)
                .is_some_and(|before| Arc::ptr_eq(before, &found));
        }
        (answers, prev, answers_same)
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
        let (mut answers, prev, answers_same) = self.ask_again().await;
        // The evaluations kept, found under one lock (the fresh ones are awaited).
        let kept: Vec<Option<Arc<RuleEval>>> = match answers_same {
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
                    self.evaluate(&key, &parsed, &mut answers, &prev).await
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

impl PassLookups {
    pub(super) fn get(&self, kind: Where, at: &str, name: &str) -> Option<&Arc<ExportLookup>> {
        self.answers.get(&kind)?.get(at)?.get(name)
    }

    /// Every (where, at, name) answered.
    pub(super) fn keys(&self) -> impl Iterator<Item = (Where, &str, &str)> {
        self.answers.iter().flat_map(|(kind, at)| {
            at.iter().flat_map(move |(at, names)| {
                names
                    .keys()
                    .map(move |name| (*kind, at.as_str(), name.as_str()))
            })
        })
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

    pub(super) fn insert(&mut self, kind: Where, at: &str, name: &str, found: Arc<ExportLookup>) {
        self.answers
            .entry(kind)
            .or_default()
            .entry(at.to_string())
            .or_default()
            .insert(name.to_string(), found);
    }
}
