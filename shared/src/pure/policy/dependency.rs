//! DependencyRule: an object stays while dependents reference it.

use super::{
    ClusterView, DependentsQuery, PolicyKind, PolicyRef, list_blockers, messages, objects::Subject,
    outcome::Outcome,
};
use crate::index::Referrer;

/// What every DependencyRule protecting the object's resource says about its DELETE.
pub(crate) async fn evaluate<V: ClusterView>(s: &Subject<'_>, view: &V, out: &mut Outcome) {
    let what = &s.what;
    let via = s.req.via_export.as_ref();
    // kcp calls every webhook of the export's workspace whose rules match the
    // group/resource, so where another export of that workspace exports the same
    // group/resource, a review sent for one export also comes for the other's
    // consumers: which export the object's workspace binds decides (looked up once,
    // only for a dependency whose export shares the resource; the rule's status says
    // which do). A failed lookup keeps the dependency (fail closed).
    let mut bound: Option<Option<crate::review::ExportRoute>> = None;
    for rule in view.dependencies(&s.gr).iter().flat_map(|l| l.iter()) {
        for dep in rule.iter().filter(|d| d.target == s.gr && d.serves(via)) {
            let shared = dep.export.as_ref().is_some_and(|e| e.shared);
            if let Some(via) = via.filter(|_| shared) {
                if bound.is_none() {
                    bound = Some(view.bound_export(s.cluster, &s.gr).await.ok().flatten());
                }
                if bound
                    .as_ref()
                    .is_some_and(|b| b.as_ref().is_some_and(|b| b != via))
                {
                    continue;
                }
            }
            let policy = PolicyRef::new(PolicyKind::DependencyRule, &dep.rule);
            let q = DependentsQuery {
                cluster: s.cluster,
                dep,
                name: s.name,
                namespace: s.namespace,
            };
            match view.dependents(q).await {
                Ok(found) if found.is_empty() => {}
                Ok(found) => {
                    let blockers: Vec<String> = found.iter().map(Referrer::describe).collect();
                    let message = messages::still_referenced(
                        what,
                        &list_blockers(&blockers),
                        &policy.to_string(),
                        &dep.path,
                        &dep.dependent_gr(),
                    );
                    out.record(dep.enforcement, policy, message, blockers);
                }
                Err(e) => {
                    let message = messages::dependents_unverified(
                        what,
                        &policy.to_string(),
                        &dep.dependent_gr(),
                        &dep.path,
                        e.message(),
                    );
                    out.lookup_failed(dep.enforcement, policy, message);
                }
            }
        }
    }
}
