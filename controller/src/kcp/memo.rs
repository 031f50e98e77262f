//! What the kcp reconciler remembers from one pass to the next: each cache,
//! documented with what it holds and when it is let go.
//!
//! One lock policy for the whole controller: [`parking_lot::Mutex`], which is
//! never poisoned, so taking a lock cannot fail and a cache is never silently
//! skipped. One lock per cache rather than one for the memo: passes run one at a
//! time, but a pass writes up to [`super::CONCURRENCY`] configurations or statuses
//! at once (each remembering its shard in [`Memo::shard_of`]), and some phases
//! hold one cache while reading another (the decodings while evaluations go). A
//! guard is never held across an `.await` (the compiler refuses it: a guard is not
//! `Send`, and a pass's future must be).

use super::*;

/// The kcp reconciler's caches across passes.
pub(super) struct Memo {
    /// When a pass last started writing statuses (see [`Reconciler::defer_statuses`]).
    pub(super) statuses_written: Mutex<std::time::Instant>,
    /// The endpoint a write to a workspace last went through (forgotten when a write
    /// through it fails).
    pub(super) shard_of: Mutex<HashMap<String, String>>,
    /// Decoding results per rule, reused while its resourceVersion is unchanged.
    pub(super) parsed: Mutex<HashMap<StoreKey, Arc<Parsed>>>,
    /// Per provider cluster: the live resourceVersion last seen matching, and what
    /// the desired configuration it matched was built from (skips building and
    /// comparing unchanged pairs).
    pub(super) matched: Mutex<HashMap<String, Matched>>,
    /// Per rule: its last evaluation (see [`CachedEval`]).
    pub(super) evals: Mutex<HashMap<StoreKey, CachedEval>>,
    /// Per rule (`cluster/name`): what its status was last found up to date with.
    pub(super) statuses: Mutex<HashMap<String, StatusInputs>>,
    /// ResourceProtections, AnchorRules and CriticalServices decoded and checked,
    /// by (kind, cluster, name), with what they were read from ([`SpecOf`]).
    pub(super) decoded: Mutex<HashMap<DecodedKey, (SpecOf, Arc<crate::kcp::kinds::Decoded>)>>,
    /// Per policy of every [`Kind`]: what its status was last found up to date
    /// with (its comparison is skipped while they hold).
    pub(super) kind_statuses: Mutex<HashMap<DecodedKey, KindStatusInputs>>,
    /// Workspaces whose configuration holdfast may no longer delete (said once).
    pub(super) abandoned: Mutex<BTreeSet<String>>,
    /// The last plan of the other kinds (see [`Reconciler::plan`]).
    pub(super) planned: Mutex<Option<Arc<PlannedKinds>>>,
    /// What the last pass computed, for the next to update (see [`Fleet`]).
    pub(super) fleet: Mutex<Fleet>,
    /// Logical clusters whose installed configuration is a write's answer, not
    /// yet the hooks store's copy (see `Reconciler::shared_with_store`).
    pub(super) unshared: Mutex<BTreeSet<String>>,
}

impl Memo {
    /// Nothing remembered yet: the first pass is a full one.
    pub(super) fn new() -> Self {
        Self {
            statuses_written: Mutex::new(std::time::Instant::now()),
            shard_of: Mutex::default(),
            parsed: Mutex::default(),
            matched: Mutex::default(),
            evals: Mutex::default(),
            statuses: Mutex::default(),
            decoded: Mutex::default(),
            kind_statuses: Mutex::default(),
            abandoned: Mutex::default(),
            planned: Mutex::default(),
            fleet: Mutex::default(),
            unshared: Mutex::default(),
        }
    }

    /// Rule `key`'s decoding of `obj` in `cache` (of [`Memo::parsed`]): the one
    /// there while its resourceVersion holds, else decoded afresh and kept.
    pub(super) fn parsed_of(
        cache: &mut HashMap<StoreKey, Arc<Parsed>>,
        key: &StoreKey,
        obj: &Arc<Stored>,
    ) -> Arc<Parsed> {
        let rv = obj.metadata.resource_version.as_deref().unwrap_or_default();
        match cache.get(key) {
            Some(p) if p.at.rv == rv => p.clone(),
            // The same spec at another resourceVersion (the echo of a status
            // write): the spec's decoding and check are kept.
            Some(p) if p.spec_at(obj) => {
                let p = Arc::new(p.restated(obj));
                cache.insert(key.clone(), p.clone());
                p
            }
            _ => {
                let p = Arc::new(Parsed::of(obj));
                cache.insert(key.clone(), p.clone());
                p
            }
        }
    }

    /// Rule `key`'s last evaluation in `evals` (of [`Memo::evals`]) while `parsed`
    /// has the same spec (the caller knows every answer it used is the same);
    /// `parsed` is its decoding from now on (the older one is let go).
    pub(super) fn kept_eval(
        evals: &mut HashMap<StoreKey, CachedEval>,
        key: &(String, String),
        parsed: &Arc<Parsed>,
    ) -> Option<Arc<RuleEval>> {
        let c = evals.get_mut(key).filter(|c| c.parsed.same_spec(parsed))?;
        c.parsed = parsed.clone();
        Some(c.eval.clone())
    }

    /// Forgets rule `key` (removed), whose status was remembered under `status_key`.
    pub(super) fn forget_rule(&self, key: &(String, String), status_key: &str) {
        self.parsed.lock().remove(key);
        self.evals.lock().remove(key);
        self.statuses.lock().remove(status_key);
    }
}

/// An APIExport found, and the logical cluster it is in.
#[derive(Clone)]
pub(super) struct ExportFound {
    pub(super) lc: String,
    pub(super) export: Arc<ExportInfo>,
}

/// One rule object, decoded. A cache of decoding work only: every pass still
/// recomputes the whole desired state from all rules.
pub(super) struct Parsed {
    /// The object's resourceVersion, uid and `metadata.generation`: while uid and
    /// generation hold, its spec is the same (a status write moves the
    /// resourceVersion only).
    pub(super) at: SpecOf,
    pub(super) rule: Result<Arc<DependencyRule>, String>,
    /// The spec's own problems ([`check_dependency_rule`], a function of the
    /// rule alone).
    pub(super) invalid: Option<Invalid>,
    /// The object it was decoded from (the store's copy, shared): its status is
    /// read from it when compared ([`Parsed::current`]), not kept decoded (about
    /// 1 KiB a rule, and an echo of a status write needs no decoding at all).
    pub(super) source: Arc<Stored>,
}

/// A rule's evaluation and what it was computed from.
pub(super) struct CachedEval {
    pub(super) parsed: Arc<Parsed>,
    /// The answers used, in the order [`Reconciler::evaluate`] asks for them.
    pub(super) used: Vec<Arc<ExportLookup>>,
    pub(super) eval: Arc<RuleEval>,
}

/// What a rule's status was last found up to date with: the same evaluation,
/// object, installed configurations (by resourceVersion) and cycle give the
/// same status, so the comparison is skipped.
pub(super) struct StatusInputs {
    pub(super) eval: Arc<RuleEval>,
    /// The resourceVersion of the object whose status was found up to date, or
    /// that the write of this status made (its echo then needs no comparison).
    pub(super) object_rv: String,
    pub(super) installed: Vec<Option<String>>,
    pub(super) cycle: Option<String>,
}

/// What an object's decoding was made from: its resourceVersion, uid and
/// `metadata.generation`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SpecOf {
    pub(super) rv: String,
    pub(super) uid: Option<String>,
    pub(super) generation: Option<i64>,
}

impl SpecOf {
    pub(super) fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        Self {
            rv: meta.resource_version.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            generation: meta.generation,
        }
    }

    /// Whether a decoding of `self`'s object holds for `now`'s: the same
    /// resourceVersion, or the same object (uid) at the same generation (a
    /// status write moves the resourceVersion only, so the spec is the same).
    pub(super) fn holds_for(&self, now: &SpecOf) -> bool {
        (!self.rv.is_empty() && self.rv == now.rv) || self.same_spec(now)
    }

    /// Whether `other` is the same object (uid) at the same generation, both
    /// known: then its spec is the same.
    pub(super) fn same_spec(&self, other: &SpecOf) -> bool {
        self.uid.is_some()
            && self.generation.is_some()
            && self.uid == other.uid
            && self.generation == other.generation
    }
}

/// A policy of a [`Kind`]: (kind, logical cluster, name).
pub(super) type DecodedKey = (Kind, String, String);

/// What the status of a policy of a [`Kind`] is computed from.
#[derive(PartialEq)]
pub(super) struct KindStatusInputs {
    pub(super) rv: String,
    pub(super) eval: crate::kcp::kinds::PolicyEval,
    pub(super) installed: Vec<Option<String>>,
}

/// A live configuration's resourceVersion, and the target and options of the
/// desired configuration it matched.
pub(super) type Matched = (String, Arc<WorkspaceTarget>, Arc<InstallOptions>);

/// The versions of the stores a plan of the other kinds is made from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct PlanVersions {
    pub(super) kinds: PerKind<u64>,
    pub(super) bindings: u64,
}

/// The other kinds' plan, and what it was made from.
pub(super) struct PlannedKinds {
    /// The versions of the three kinds' stores and of the APIBindings' store.
    pub(super) versions: PlanVersions,
    /// holdfast's own logical cluster.
    pub(super) home: Option<String>,
    /// Per logical cluster: the plan's part of its target.
    pub(super) targets: BTreeMap<String, Arc<WorkspaceTarget>>,
    /// Per policy, in the order of `objects`.
    pub(super) policies: Vec<crate::kcp::kinds::PolicyEval>,
    pub(super) objects: Vec<Arc<Stored>>,
}
