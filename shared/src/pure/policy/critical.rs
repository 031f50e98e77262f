//! CriticalService: a service's provider (and its namespace) stays while the
//! service's criteria are unmet, and the CriticalService itself while its provider
//! exists.

use super::{
    ClusterView, PolicyKind, PolicyRef, list_blockers, messages, objects::Subject, outcome::Outcome,
};
use crate::registry::{CompiledCriterion, CompiledCritical, critical_services_gr, namespaces_gr};

/// `Kind ns/name` (or `Kind name`) of a reference.
pub(crate) fn describe_ref(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

/// What every CriticalService concerned says about the DELETE.
pub(crate) async fn evaluate<V: ClusterView>(s: &Subject<'_>, view: &V, out: &mut Outcome) {
    let Subject {
        gr,
        name,
        namespace,
        cluster,
        what,
        ..
    } = s;
    for cs in view.critical(gr).iter().flat_map(|l| l.iter()) {
        if !cs.key.cluster.is_empty() && &*cs.key.cluster != *cluster {
            continue;
        }
        let policy = PolicyRef::new(PolicyKind::CriticalService, &cs.key);
        let provider = describe_ref(
            &cs.provider.to_string(),
            Some(&cs.provider_namespace),
            &cs.provider_name,
        );
        if *gr == critical_services_gr() && *name == &*cs.key.name {
            let found = view
                .object(
                    cluster,
                    &cs.provider,
                    Some(&cs.provider_namespace),
                    &cs.provider_name,
                )
                .await;
            match found {
                Ok(None) => {}
                Ok(Some(_)) => {
                    let message =
                        messages::critical_provider_exists(what, &provider, &policy.to_string());
                    out.record(cs.enforcement, policy, message, vec![provider]);
                }
                Err(e) => {
                    let message = messages::critical_existence_unverified(
                        &provider,
                        &policy.to_string(),
                        e.message(),
                    );
                    out.lookup_failed(cs.enforcement, policy, message);
                }
            }
            continue;
        }
        let is_provider = *gr == cs.provider
            && *namespace == Some(cs.provider_namespace.as_str())
            && *name == cs.provider_name;
        let is_namespace =
            *gr == namespaces_gr() && namespace.is_none() && *name == cs.provider_namespace;
        if !is_provider && !is_namespace {
            continue;
        }
        let remaining = unmet(cs, &policy, cluster, view, out).await;
        if remaining.is_empty() {
            continue;
        }
        let message = messages::critical_remaining(
            what,
            is_provider,
            &provider,
            &policy.to_string(),
            &list_blockers(&remaining),
        );
        out.record(cs.enforcement, policy, message, remaining);
    }
}

/// The criteria of `cs` still unmet in `cluster` (a criterion that cannot be checked
/// is recorded as such in `out`).
async fn unmet<V: ClusterView>(
    cs: &CompiledCritical,
    policy: &PolicyRef,
    cluster: &str,
    view: &V,
    out: &mut Outcome,
) -> Vec<String> {
    let mut remaining = Vec::new();
    for crit in &cs.criteria {
        match crit {
            CompiledCriterion::Finalizer {
                resource,
                finalizer,
            } => match view.count_finalizer(cluster, resource, finalizer).await {
                Ok(0) => {}
                Ok(n) => remaining.push(messages::finalizers_remain(n, resource, finalizer)),
                Err(e) => {
                    let message = messages::critical_finalizers_uncounted(
                        resource,
                        finalizer,
                        &policy.to_string(),
                        e.message(),
                    );
                    out.lookup_failed(cs.enforcement, policy.clone(), message);
                }
            },
            CompiledCriterion::SpecificResource {
                resource,
                namespace,
                name,
            } => match view
                .object(cluster, resource, namespace.as_deref(), name)
                .await
            {
                Ok(None) => {}
                Ok(Some(_)) => remaining.push(messages::still_exists(&describe_ref(
                    &resource.to_string(),
                    namespace.as_deref(),
                    name,
                ))),
                Err(e) => {
                    let message = messages::critical_existence_unverified(
                        &format!("{resource} {name}"),
                        &policy.to_string(),
                        e.message(),
                    );
                    out.lookup_failed(cs.enforcement, policy.clone(), message);
                }
            },
        }
    }
    remaining
}
