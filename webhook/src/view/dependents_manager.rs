//! The dependents manager: one watch per dependent resource that some DependencyRule
//! names, started, and restarted when the rules for that resource change.
//!
//! At fleet size every rule of every workspace is in the registry (20,000 at 2,000
//! workspaces), and while they are listed each one wakes the manager. So a pass reads
//! again only the rules that changed (each rule's compiled form, kept by its address,
//! is fingerprinted once), and after a pass the manager pauses twice as long as the
//! pass took and yields: it gives the runtime's thread back, so that the watch tasks
//! it just started run at once instead of waiting in that thread's queue behind the
//! next pass (before, a DependencyRule list kept the manager busy on one of the two
//! runtime threads until its end).

use super::{WebhookView, watch_dependents};
use holdfast_shared::{registry::CompiledDependency, topology::Topology};
use std::{
    collections::HashMap,
    hash::{Hash, Hasher},
    sync::Arc,
    time::Duration,
};

/// The dependents manager's pass when nothing wakes it.
const PASS_PERIOD: Duration = Duration::from_secs(2);
/// The dependents manager's pause after matching its watches to changed rules, in
/// passes' lengths.
const PAUSE_PER_PASS: u32 = 2;

/// Keeps one watch per dependent resource that some DependencyRule names, restarting
/// it when the rules for that resource change.
pub(in crate::view) async fn manage_dependents(
    view: Arc<WebhookView>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut watches = Watches::default();
    // The rules' version the watches were last matched to: while it holds, the
    // same rules want the same watches (nothing to rebuild from every rule).
    let mut matched: Option<u64> = None;
    loop {
        let version = view.policies.registry().dependencies.version();
        if matched != Some(version) {
            matched = Some(version);
            let started = std::time::Instant::now();
            watches.matched_to(&view);
            // While the rules are listed every one of them wakes this task: a pause
            // twice as long as the pass gives the runtime's thread back (the watch
            // tasks just started wait in its queue) and matches a burst of changes
            // in fewer passes, while a lone change is matched at once.
            let pause = started.elapsed().saturating_mul(PAUSE_PER_PASS);
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.cancelled() => break,
            }
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = view.changed.dependents.notified() => {}
            _ = tokio::time::sleep(PASS_PERIOD) => {}
            _ = shutdown.cancelled() => break,
        }
    }
    for (_, (_, handle)) in watches.running {
        if let Some(h) = handle {
            h.abort();
        }
    }
}

/// The dependents watches running: dependent resource → (signature, task). No task:
/// on kcp, no APIExport names the dependent type, so every check lists it live.
type Running = HashMap<String, (u64, Option<tokio::task::JoinHandle<()>>)>;

/// What one version of a rule asks for: per dependency, the dependent resource it
/// names and a fingerprint of what its watch depends on.
struct RuleWants {
    /// Held so that its address (the key it is remembered by) is not reused.
    rule: Arc<Vec<CompiledDependency>>,
    wants: Vec<(Arc<str>, u64)>,
}

impl RuleWants {
    fn of(rule: Arc<Vec<CompiledDependency>>) -> Self {
        let wants = rule
            .iter()
            .map(|d| (Arc::from(d.dependent_gr().to_string()), fingerprint(d)))
            .collect();
        Self { rule, wants }
    }
}

/// What a dependent resource's watch depends on, of one dependency: the version
/// and kind listed, the protected resource and the paths of the reference, and on
/// kcp the export (and the rule's workspace, whose slice names its endpoints).
fn fingerprint(d: &CompiledDependency) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    d.dependent_version.hash(&mut h);
    d.dependent_kind.hash(&mut h);
    d.target.hash(&mut h);
    d.path.to_string().hash(&mut h);
    d.namespace_path
        .as_ref()
        .map(|p| p.to_string())
        .hash(&mut h);
    d.dependent_export.hash(&mut h);
    if d.dependent_export.is_some() {
        d.rule.cluster.hash(&mut h);
    }
    h.finish()
}

/// The address of a rule's compiled form: the same while the rule is unchanged
/// (the registry replaces it on a change).
fn address(rule: &Arc<Vec<CompiledDependency>>) -> usize {
    Arc::as_ptr(rule) as usize
}

/// The dependents manager's state: the watches running and what each rule asked
/// for when last seen (a rule is read again only when it changed, so a pass over
/// a fleet's rules does not format every one of them each time).
#[derive(Default)]
struct Watches {
    running: Running,
    /// Rule (by the address of its compiled form) → what it asks for.
    rules: HashMap<usize, RuleWants>,
}

impl Watches {
    /// Starts a watch for each dependent resource the rules name and stops those no
    /// longer named or named differently.
    fn matched_to(&mut self, view: &Arc<WebhookView>) {
        // What is needed: dependent resource → the fingerprints of its dependencies,
        // and where each one is (rule, position).
        let mut wanted: HashMap<Arc<str>, Vec<(u64, usize, usize)>> = HashMap::new();
        let current: Vec<RuleWants> = view
            .policies
            .registry()
            .dependencies
            .entries()
            .into_iter()
            .map(|rule| {
                self.rules
                    .remove(&address(&rule))
                    .unwrap_or_else(|| RuleWants::of(rule))
            })
            .collect();
        for (n, rule) in current.iter().enumerate() {
            for (i, (key, fp)) in rule.wants.iter().enumerate() {
                wanted.entry(key.clone()).or_default().push((*fp, n, i));
            }
        }
        let signature = |deps: &[(u64, usize, usize)]| {
            let mut fps: Vec<u64> = deps.iter().map(|(fp, _, _)| *fp).collect();
            fps.sort_unstable();
            fps.dedup();
            let mut h = std::hash::DefaultHasher::new();
            fps.hash(&mut h);
            h.finish()
        };
        let signatures: HashMap<&str, u64> = wanted
            .iter()
            .map(|(k, deps)| (&**k, signature(deps)))
            .collect();
        // Stop what is no longer wanted or changed.
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(key, (sig, _))| signatures.get(key.as_str()) != Some(sig))
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some((_, handle)) = self.running.remove(&key) {
                let watched = handle.is_some();
                if let Some(h) = handle {
                    h.abort();
                }
                if watched {
                    view.dependents.endpoints.remove(&key);
                    view.dependents.synced.remove(&key);
                    view.dependents.index.clear_resource(&key);
                    tracing::info!(resource = %key, "stopped watching dependents");
                }
            }
        }
        for (key, positions) in &wanted {
            if self.running.contains_key(&**key) {
                continue;
            }
            let sig = signatures.get(&**key).copied().unwrap_or_default();
            let deps: Vec<CompiledDependency> = positions
                .iter()
                .filter_map(|(_, n, i)| current.get(*n)?.rule.get(*i).cloned())
                .collect();
            // kcp: a type no APIExport names has no virtual workspace to watch (the
            // rule alone says so): no task, and no place among the indexed types.
            let no_export = view.topology == Topology::Kcp
                && deps.first().is_none_or(|d| {
                    super::super::kcp::dependent_export(&view.clients, d).is_none()
                });
            if no_export {
                tracing::debug!(resource = %key, "no APIExport names the dependent type; every check lists them live");
                self.running.insert(key.to_string(), (sig, None));
                continue;
            }
            view.dependents.synced.insert(key.to_string(), false);
            let handle = tokio::spawn(watch_dependents(view.clone(), key.to_string(), deps));
            tracing::info!(resource = %key, "watching dependents");
            self.running.insert(key.to_string(), (sig, Some(handle)));
        }
        self.rules = current
            .into_iter()
            .map(|rule| (address(&rule.rule), rule))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{DependentsMode, test_view};
    use holdfast_shared::{api::dependency_rule::DependencyRule, registry::PolicyKey};

    fn apply_rule(view: &WebhookView, path: &str) {
        let rule = crate::view::vms_need_vpcs(path);
        view.policies.registry().apply("", &rule).expect("compiles");
    }

    #[tokio::test]
    async fn a_watch_restarts_only_when_its_rules_change() {
        let view = test_view(Topology::Kubernetes, DependentsMode::Watch);
        let key = "virtualmachines.compute.test.io";
        let mut watches = Watches::default();
        let task = |w: &Watches| {
            w.running
                .get(key)
                .and_then(|(_, h)| h.as_ref().map(|h| h.id()))
        };
        apply_rule(&view, ".spec.vpc");
        watches.matched_to(&view);
        let first = task(&watches).expect("a watch for the dependent type");
        assert_eq!(watches.rules.len(), 1);
        assert_eq!(view.dependents.synced.get(key).map(|s| *s), Some(false));
        // The same rules: the same watch, and the rule is not read again.
        watches.matched_to(&view);
        assert_eq!(task(&watches), Some(first));
        // The same rule again (a new compiled form, the same dependencies): kept.
        apply_rule(&view, ".spec.vpc");
        watches.matched_to(&view);
        assert_eq!(task(&watches), Some(first));
        assert_eq!(watches.rules.len(), 1);
        // Another path: restarted.
        apply_rule(&view, ".spec.network");
        watches.matched_to(&view);
        let second = task(&watches).expect("a watch for the dependent type");
        assert_ne!(second, first);
        // No rule names the type any more: stopped, and forgotten.
        view.policies
            .registry()
            .delete::<DependencyRule>(&PolicyKey::new("", "vms-need-vpcs"));
        watches.matched_to(&view);
        assert!(watches.running.is_empty());
        assert!(watches.rules.is_empty());
        assert!(view.dependents.synced.get(key).is_none());
    }
}
