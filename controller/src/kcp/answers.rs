//! The export answers (issue 34): each APIExport a rule names, looked up once and
//! kept, read again outside the pass.
//!
//! A pass only reads the answers kept ([`ExportAnswers::lookup`] reads one from kcp
//! only when no answer is kept for it yet: a rule naming a new export). A task of
//! its own ([`ExportAnswers::run`]) reads every kept answer again as it comes due:
//! one that found its export about once per resync period (jittered, so answers
//! read together drift apart), one that did not, or whose read failed, after a
//! backed-off, jittered delay ([`RETRY_FIRST`] doubling to [`RETRY_MAX`]), one a
//! rule found lacking a resource or found in a logical cluster that answered 403
//! or 404 at once. [`READ_CONCURRENCY`] reads at a time, at most [`ROUND_BUDGET`]
//! per round. Only an answer that changed is recorded (the one it replaced: the
//! rules whose evaluation used it are found by pointer, [`readers_of`]) and wakes
//! the pass; an equal one keeps its `Arc`, so the rules' evaluations are kept.
//!
//! A failed read never turns into an allow: a read that fails with something
//! other than a definite 403/404 keeps the last answer that found the export
//! ([`ExportAnswers::or_last_good`]), and without one the answer is the failure
//! (the rule is Invalid, `ApiExportUnreadable`), as before.

use super::*;

/// The first delay before an answer that did not find its export, or whose read
/// failed, is read again; it doubles with each such read in a row, up to
/// [`RETRY_MAX`] (never beyond the refresh period), each delay drawn from the
/// upper half of its nominal one.
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest delay between reads of an answer that did not find its export.
const RETRY_MAX: Duration = Duration::from_secs(10);
/// Answers read at once.
const READ_CONCURRENCY: usize = 16;
/// At most this many answers per round; the next round follows at once.
const ROUND_BUDGET: usize = 128;
/// Rounds start at least this far apart, unless woken (answers coming due close
/// together are read together).
const ROUND_SPACING: Duration = Duration::from_millis(50);

/// One read of an answer: what it came to, and whether the read itself failed
/// (a failure kept out by the last good answer still counts: it is retried with
/// back-off, not a period later).
pub(super) struct Read {
    pub(super) found: ExportLookup,
    pub(super) failed: bool,
}

/// The answers, and the task reading them again.
pub(super) struct ExportAnswers {
    /// Workspace paths → logical clusters (no watch: TTL, dropped per logical
    /// cluster when a read or write there answers 403 or 404).
    resolver: holdfast_shared::kcp::Resolver,
    /// APIExports read through the front-proxy (same invalidation).
    exports: holdfast_shared::kcp::Exports,
    /// The refresh period (the resync period).
    period: Duration,
    /// The answers kept.
    table: Mutex<AnswerTable>,
    /// Per (path, export): the last complete answer, used while a lookup fails
    /// with something other than a definite 403/404 (a blip must not drop
    /// protection).
    last_good: Mutex<HashMap<(String, String), ExportFound>>,
    /// Logical clusters where a read or write answered 403 or 404 since the last
    /// round: the answers found there are read again.
    forgotten: Mutex<HashSet<String>>,
    /// The answers replaced by a different one since the pass last took them.
    replaced: Mutex<Vec<Arc<ExportLookup>>>,
    /// Wakes the task (answers to read at once).
    wake: Notify,
    /// Wakes the pass (an answer changed).
    wake_pass: Arc<Notify>,
}

impl ExportAnswers {
    /// Answers read through `clients`' front-proxy, each again about once per
    /// `period`; a changed one wakes `wake_pass`.
    pub(super) fn new(clients: &Clients, period: Duration, wake_pass: Arc<Notify>) -> Self {
        Self {
            resolver: holdfast_shared::kcp::Resolver::new(clients.clone()),
            exports: holdfast_shared::kcp::Exports::new(clients.clone()),
            period,
            table: Mutex::default(),
            last_good: Mutex::default(),
            forgotten: Mutex::default(),
            replaced: Mutex::default(),
            wake: Notify::new(),
            wake_pass,
        }
    }

    /// Reads the answers again as they come due, until aborted.
    pub(super) async fn run(self: Arc<Self>) {
        let me: &Self = &self;
        loop {
            let next = me
                .round(|kind, at, name| async move { me.lookup_now(&at, &name, kind, true).await })
                .await;
            let wait = next
                .map_or(me.period, |at| {
                    at.saturating_duration_since(std::time::Instant::now())
                })
                .max(ROUND_SPACING);
            tokio::select! {
                () = me.wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One round: the answers due (and those in logical clusters forgotten since
    /// the last round) read by `read`, at most [`ROUND_BUDGET`]; each different
    /// one recorded and the pass woken. Returns when the next answer is due.
    pub(super) async fn round<F, Fut>(&self, read: F) -> Option<std::time::Instant>
    where
        F: Fn(Where, String, String) -> Fut,
        Fut: std::future::Future<Output = Read>,
    {
        let forgotten = std::mem::take(&mut *self.forgotten.lock());
        let (due, more) = {
            let mut table = self.table.lock();
            let now = std::time::Instant::now();
            table.read_again_in(&forgotten, now);
            table.due(now, ROUND_BUDGET)
        };
        if due.is_empty() {
            return self.table.lock().next_due();
        }
        let read = &read;
        let reads: Vec<_> = futures::stream::iter(due)
            .map(|(kind, at, name)| async move {
                let r = read(kind, at.clone(), name.clone()).await;
                (kind, at, name, r)
            })
            .buffer_unordered(READ_CONCURRENCY)
            .collect()
            .await;
        let count = reads.len();
        let now = std::time::Instant::now();
        let mut replaced = Vec::new();
        let next = {
            let mut table = self.table.lock();
            for (kind, at, name, r) in reads {
                if let Some(old) = table.reread(kind, &at, &name, r, now, self.period) {
                    replaced.push(old);
                }
            }
            match more {
                true => Some(now),
                false => table.next_due(),
            }
        };
        tracing::debug!(
            read = count,
            changed = replaced.len(),
            "export answers read again"
        );
        if !replaced.is_empty() {
            self.replaced.lock().extend(replaced);
            self.wake_pass.notify_one();
        }
        next
    }

    /// The answers replaced since the last call (the pass evaluates again the
    /// rules that used them).
    pub(super) fn take_replaced(&self) -> Vec<Arc<ExportLookup>> {
        std::mem::take(&mut *self.replaced.lock())
    }

    /// APIExport `name` at `at` (a workspace path, or the rule's own logical
    /// cluster): the answer kept, or, when none is kept yet, read now (through
    /// the caches) and kept.
    pub(super) async fn lookup(&self, at: &str, name: &str, kind: Where) -> Arc<ExportLookup> {
        if let Some(found) = self.table.lock().get(kind, at, name) {
            return found.clone();
        }
        let read = self.lookup_now(at, name, kind, false).await;
        // One that did not find its export is read again soon (backed off): the
        // task learns of it now, not after the period it may be sleeping.
        let soon = read.failed || read.found.export.is_err();
        let found =
            self.table
                .lock()
                .first(kind, at, name, read, std::time::Instant::now(), self.period);
        if soon {
            self.wake.notify_one();
        }
        found
    }

    /// Reads the answers of `named` that none is kept for yet,
    /// [`READ_CONCURRENCY`] at a time (each as [`ExportAnswers::lookup`] would).
    pub(super) async fn read_missing(
        &self,
        named: impl IntoIterator<Item = (Where, String, String)>,
    ) {
        let missing: Vec<(Where, String, String)> = {
            let table = self.table.lock();
            named
                .into_iter()
                .filter(|(kind, at, name)| table.get(*kind, at, name).is_none())
                .collect()
        };
        futures::stream::iter(missing)
            .for_each_concurrent(READ_CONCURRENCY, |(kind, at, name)| async move {
                self.lookup(&at, &name, kind).await;
            })
            .await;
    }

    /// Answer (kind, at, name), whose export a rule found lacking a resource, is
    /// read again from kcp at once (the resource added is noticed without waiting
    /// for the period).
    pub(super) async fn read_again(&self, kind: Where, at: &str, name: &str) {
        let lc = {
            let mut table = self.table.lock();
            table.read_again(kind, at, name, std::time::Instant::now())
        };
        if let Some(lc) = lc {
            self.exports.forget_export(&lc, name).await;
        }
        self.wake.notify_one();
    }

    /// Forgets what is cached for logical cluster `lc` (a read or write there
    /// answered 403 or 404): the answers found there are read again.
    pub(super) async fn forget_cluster(&self, lc: &str) {
        self.resolver.forget(lc).await;
        self.exports.forget(lc).await;
        self.forgotten.lock().insert(lc.to_string());
        self.wake.notify_one();
    }

    /// Keeps only the answers `named` names (and their last good answers).
    pub(super) fn retain(&self, named: &HashSet<(Where, &str, &str)>) {
        self.table.lock().retain(named);
        self.last_good.lock().retain(|k, _| {
            named.contains(&(Where::Cluster, k.0.as_str(), k.1.as_str()))
                || named.contains(&(Where::Path, k.0.as_str(), k.1.as_str()))
        });
    }

    /// APIExport `name` at `at`, read through the caches; with `afresh`, the
    /// path's resolution and the export are read from kcp (an answer refreshed).
    pub(super) async fn lookup_now(&self, at: &str, name: &str, kind: Where, afresh: bool) -> Read {
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
                self.last_good.lock().insert(key, found.clone());
                Read {
                    found: ExportLookup {
                        lc: Some(found.lc),
                        export: Ok(found.export),
                    },
                    failed: false,
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
    /// that answer (a passing failure keeps protection as it was). Either way a
    /// failed read.
    pub(super) fn or_last_good(
        &self,
        key: &(String, String),
        definite: bool,
        failed: ExportLookup,
    ) -> Read {
        let mut last = self.last_good.lock();
        if definite {
            last.remove(key);
            return Read {
                found: failed,
                failed: true,
            };
        }
        let found = match last.get(key) {
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
        };
        Read {
            found,
            failed: true,
        }
    }
}

/// The rules whose kept evaluation (in `evals`, of [`Memo::evals`]) used one of
/// `replaced` (by pointer): those a changed answer reaches.
pub(super) fn readers_of(
    evals: &HashMap<StoreKey, CachedEval>,
    replaced: &[Arc<ExportLookup>],
) -> BTreeSet<(String, String)> {
    if replaced.is_empty() {
        return BTreeSet::new();
    }
    let stale: HashSet<*const ExportLookup> = replaced.iter().map(Arc::as_ptr).collect();
    evals
        .iter()
        .filter(|(_, c)| c.used.iter().any(|u| stale.contains(&Arc::as_ptr(u))))
        .map(|(k, _)| (**k).clone())
        .collect()
}

/// The export answers kept: where → workspace path or logical cluster → export
/// name → answer. An answer read again and equal to the one before keeps that
/// one's `Arc`, so a rule's evaluation is reused while its object and every
/// answer it used are the same (compared by pointer).
#[derive(Default)]
pub(super) struct AnswerTable {
    answers: HashMap<Where, HashMap<String, HashMap<String, Answer>>>,
}

/// One export answer and when it is read again.
pub(super) struct Answer {
    pub(super) found: Arc<ExportLookup>,
    /// When it is read again.
    due: std::time::Instant,
    /// Reads in a row that did not find the export, or failed.
    failures: u32,
}

impl Answer {
    /// `found`, read at `now`, after `failures` reads in a row that did not find
    /// the export: scheduled for its next read.
    fn read(
        found: Arc<ExportLookup>,
        failed: bool,
        failures: u32,
        now: std::time::Instant,
        period: Duration,
    ) -> Self {
        let jitter = |d: Duration| {
            let half = d / 2;
            let spread = u64::try_from((d - half).as_micros()).unwrap_or(u64::MAX);
            half + Duration::from_micros(rand::random_range(0..=spread))
        };
        match found.export.is_ok() && !failed {
            // About once per period: within its last tenth.
            true => Self {
                found,
                due: now + period - jitter(period / 10),
                failures: 0,
            },
            false => {
                let nominal = RETRY_FIRST
                    .saturating_mul(1 << failures.min(16))
                    .min(RETRY_MAX)
                    .min(period);
                Self {
                    found,
                    due: now + jitter(nominal),
                    failures: failures.saturating_add(1),
                }
            }
        }
    }
}

impl AnswerTable {
    pub(super) fn get(&self, kind: Where, at: &str, name: &str) -> Option<&Arc<ExportLookup>> {
        self.get_answer(kind, at, name).map(|a| &a.found)
    }

    fn get_answer(&self, kind: Where, at: &str, name: &str) -> Option<&Answer> {
        self.answers.get(&kind)?.get(at)?.get(name)
    }

    fn get_mut(&mut self, kind: Where, at: &str, name: &str) -> Option<&mut Answer> {
        self.answers.get_mut(&kind)?.get_mut(at)?.get_mut(name)
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

    /// The answers due at `now`, at most `budget`, earliest first; and whether
    /// more are due.
    pub(super) fn due(
        &self,
        now: std::time::Instant,
        budget: usize,
    ) -> (Vec<(Where, String, String)>, bool) {
        let mut due: Vec<(std::time::Instant, Where, &str, &str)> = self
            .entries()
            .filter(|(.., a)| a.due <= now)
            .map(|(kind, at, name, a)| (a.due, kind, at, name))
            .collect();
        let more = due.len() > budget;
        if more {
            due.select_nth_unstable_by_key(budget, |(t, ..)| *t);
            due.truncate(budget);
        }
        let due = due
            .into_iter()
            .map(|(_, kind, at, name)| (kind, at.to_string(), name.to_string()))
            .collect();
        (due, more)
    }

    /// When the next answer is due.
    pub(super) fn next_due(&self) -> Option<std::time::Instant> {
        self.entries().map(|(.., a)| a.due).min()
    }

    /// Answer (kind, at, name), if it found its export, is due at `now`; returns
    /// its logical cluster.
    pub(super) fn read_again(
        &mut self,
        kind: Where,
        at: &str,
        name: &str,
        now: std::time::Instant,
    ) -> Option<String> {
        let a = self.get_mut(kind, at, name)?;
        if a.found.export.is_ok() {
            a.due = a.due.min(now);
        }
        a.found.lc.clone()
    }

    /// Every answer that found its export in one of the logical clusters `lcs`
    /// is due at `now` (the others keep their back-off).
    pub(super) fn read_again_in(&mut self, lcs: &HashSet<String>, now: std::time::Instant) {
        if lcs.is_empty() {
            return;
        }
        for a in self
            .answers
            .values_mut()
            .flat_map(|m| m.values_mut())
            .flat_map(|m| m.values_mut())
        {
            if a.found.export.is_ok() && a.found.lc.as_ref().is_some_and(|lc| lcs.contains(lc)) {
                a.due = a.due.min(now);
            }
        }
    }

    /// `before` when `found` equals it, else `found` anew.
    pub(super) fn same_or_new(
        before: Option<&Arc<ExportLookup>>,
        found: ExportLookup,
    ) -> Arc<ExportLookup> {
        match before {
            Some(b) if **b == found => b.clone(),
            _ => Arc::new(found),
        }
    }

    /// The first answer for (kind, at, name), read at `now` (one kept meanwhile
    /// is kept); returns the answer kept.
    pub(super) fn first(
        &mut self,
        kind: Where,
        at: &str,
        name: &str,
        read: Read,
        now: std::time::Instant,
        period: Duration,
    ) -> Arc<ExportLookup> {
        if let Some(a) = self.get(kind, at, name) {
            return a.clone();
        }
        let found = Arc::new(read.found);
        let answer = Answer::read(found.clone(), read.failed, 0, now, period);
        self.answers
            .entry(kind)
            .or_default()
            .entry(at.to_string())
            .or_default()
            .insert(name.to_string(), answer);
        found
    }

    /// Answer (kind, at, name) read again at `now` (dropped if no longer kept:
    /// no rule names it); returns the one it replaced when different.
    pub(super) fn reread(
        &mut self,
        kind: Where,
        at: &str,
        name: &str,
        read: Read,
        now: std::time::Instant,
        period: Duration,
    ) -> Option<Arc<ExportLookup>> {
        let a = self.get_mut(kind, at, name)?;
        let found = Self::same_or_new(Some(&a.found), read.found);
        let failures = a.failures;
        let old = std::mem::replace(
            a,
            Answer::read(found.clone(), read.failed, failures, now, period),
        );
        (!Arc::ptr_eq(&old.found, &found)).then_some(old.found)
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
}

#[cfg(test)]
#[path = "answers_tests.rs"]
mod tests;
