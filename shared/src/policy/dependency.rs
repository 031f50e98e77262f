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
    for rule in view.dependencies(&s.gr).iter().flat_map(|l| l.iter()) {
        for dep in rule.iter().filter(|d| d.target == s.gr && d.serves(via)) {
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
                        &e.0,
                    );
                    out.lookup_failed(dep.enforcement, policy, message);
                }
            }
        }
    }
}
