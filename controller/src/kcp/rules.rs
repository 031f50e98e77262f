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
            Some(export) => Some(self.answers.lookup(cluster, export, Where::Cluster).await),
            None => None,
        };
        let mut found_refs = Vec::with_capacity(rule.spec.dependencies.len());
        for d in &rule.spec.dependencies {
            found_refs.push(match &d.api_export_ref {
                Some(r) => Some(self.answers.lookup(&r.path, &r.name, Where::Path).await),
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
                if reason == reasons::RESOURCE_NOT_EXPORTED {
                    self.answers
                        .read_again(Where::Cluster, cluster, export)
                        .await;
                }
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
                    if reason == reasons::RESOURCE_NOT_EXPORTED {
                        self.answers.read_again(Where::Path, &r.path, &r.name).await;
                    }
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

    /// Forgets what is cached for logical cluster `lc` (a read or write there
    /// answered 403 or 404): the answers found there are read again.
    pub(super) async fn forget_cluster(&self, lc: &str) {
        self.answers.forget_cluster(lc).await;
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
        // The answers changed since the last pass (read by [`ExportAnswers::run`]).
        let replaced = self.answers.take_replaced();
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
        // The answers the rules evaluated afresh name, read first, several at a
        // time: the evaluations below await them one by one (at start, with
        // nothing kept, 10,000 exports read in turn took the first pass 10 s).
        let named: HashSet<(Where, String, String)> = objects
            .iter()
            .zip(&parsed)
            .zip(&kept)
            .filter(|(_, kept)| kept.is_none())
            .filter_map(|(((key, _), parsed), _)| Some((key, parsed.rule.as_ref().ok()?)))
            .flat_map(|(key, rule)| answers_named(&key.0, rule))
            .map(|(kind, at, name)| (kind, at.to_string(), name.to_string()))
            .collect();
        self.answers.read_missing(named).await;
        let mut fresh = removed;
        let mut rules = Vec::with_capacity(objects.len());
        for (((key, obj), parsed), kept) in objects.into_iter().zip(parsed).zip(kept) {
            let (eval, rule) = match kept {
                Some(eval) => (eval, parsed.rule.as_ref().ok().cloned()),
                None => {
                    fresh = true;
                    self.evaluate(&key, &parsed).await
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
        Evaluated {
            rules,
            fresh,
            removed,
        }
    }
}

/// The export answers `rule`, in logical cluster `cluster`, is evaluated with:
/// its dependent's export (in its own cluster), then each `apiExportRef` (by
/// path), in spec order (what [`Reconciler::evaluate`] looks up).
pub(super) fn answers_named<'a>(
    cluster: &'a str,
    rule: &'a DependencyRule,
) -> impl Iterator<Item = (Where, &'a str, &'a str)> {
    let dependent = rule
        .spec
        .dependent
        .api_export_name
        .as_deref()
        .map(|e| (Where::Cluster, cluster, e));
    let refs = rule
        .api_export_refs()
        .into_iter()
        .map(|r| (Where::Path, r.path.as_str(), r.name.as_str()));
    dependent.into_iter().chain(refs)
}

impl Parsed {
    pub(super) fn of(source: &Arc<Stored>) -> Self {
        let rule = crate::kubernetes::decode::<DependencyRule>(&source.object());
        let invalid = match &rule {
            Ok(r) => check_dependency_rule(r, &Default::default(), false),
            Err(_) => None,
        };
        // Only the spec is read from the typed rule from here on (the status below,
        // untyped): its metadata and status are not kept (about 1 KiB a rule).
        let rule = rule.map(|mut r| {
            r.metadata = Default::default();
            r.status = None;
            Arc::new(r)
        });
        Self {
            at: SpecOf::of(&source.metadata),
            rule,
            invalid,
            source: source.clone(),
        }
    }

    /// The object's status as it stands, and its `status.workspaces` (`[]` when
    /// it has none), read from its text (a status no writer of holdfast's would
    /// make reads as empty).
    pub(super) fn current(&self) -> (holdfast_shared::api::PolicyStatus, serde_json::Value) {
        let mut status = self.source.status();
        let workspaces = match status.get_mut("workspaces").map(serde_json::Value::take) {
            None | Some(serde_json::Value::Null) => json!([]),
            Some(v) => v,
        };
        (crate::kubernetes::policy_status(&status), workspaces)
    }

    /// Whether `obj` is the object this was decoded from at the same
    /// `metadata.generation` (so with the same spec; see [`Parsed::same_spec`]).
    pub(super) fn spec_at(&self, obj: &Stored) -> bool {
        self.at.same_spec(&SpecOf::of(&obj.metadata))
    }

    /// This decoding's spec for `obj` at its resourceVersion (the same object at
    /// the same generation, [`Parsed::spec_at`]): nothing is decoded again.
    pub(super) fn restated(&self, obj: &Arc<Stored>) -> Self {
        Self {
            at: SpecOf::of(&obj.metadata),
            rule: self.rule.clone(),
            invalid: self.invalid.clone(),
            source: obj.clone(),
        }
    }

    /// Whether `other` was decoded from the same spec: the same decoding, or the
    /// same object (uid) at the same generation, as after a status write. A rule's
    /// evaluation is a function of its spec and the answers it used, so it is kept
    /// across the echoes of status writes (without a generation, only the same
    /// decoding counts).
    pub(super) fn same_spec(&self, other: &Arc<Parsed>) -> bool {
        std::ptr::eq(self, Arc::as_ptr(other)) || self.at.same_spec(&other.at)
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
