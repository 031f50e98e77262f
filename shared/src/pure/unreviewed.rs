//! What no admission webhook ever sees, so that no policy can protect it: the
//! API server never sends requests on webhook configurations and admission
//! policies to webhooks (no webhook can lock the cluster out of repairing
//! admission itself).

use crate::api::common::GroupResource;

/// Resources the API server never sends to admission webhooks.
pub const NEVER_REVIEWED: [(&str, &str); 6] = [
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
    ),
    ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
    (
        "admissionregistration.k8s.io",
        "mutatingadmissionpolicybindings",
    ),
];

/// Whether the API server never sends requests on `gr` to admission webhooks.
pub fn never_reviewed(gr: &GroupResource) -> bool {
    NEVER_REVIEWED
        .iter()
        .any(|(g, r)| gr.group == *g && gr.resource == *r)
}

/// Why DELETEs of `gr` (one of [`NEVER_REVIEWED`]) are never refused.
pub fn never_reviewed_message(gr: &GroupResource) -> String {
    format!(
        "DELETEs of {gr} never reach an admission webhook: the API server sends no \
         request on webhook configurations or admission policies to webhooks"
    )
}

/// Whether `gr` is a wildcard (protect-all: `*` as group or resource).
pub fn is_wildcard(gr: &GroupResource) -> bool {
    gr.group.contains('*') || gr.resource.contains('*')
}

/// What a wildcard (protect-all) cannot cover.
pub const WILDCARD_LIMITS: &str = "a wildcard cannot cover what no admission webhook \
    sees: webhook configurations and admission policies (the API server sends no request \
    on them to webhooks), resources of aggregated APIs (proxied to their own servers), \
    and Events expiring at their time to live; and the types holdfast leaves out \
    (Events, Leases, EndpointSlices, Endpoints, reviews, holdfast.dev)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_configurations_and_admission_policies_are_never_reviewed() {
        for (g, r) in NEVER_REVIEWED {
            let gr = GroupResource::new(g, r);
            assert!(never_reviewed(&gr));
            assert!(never_reviewed_message(&gr).contains("never reach an admission webhook"));
        }
        assert!(!never_reviewed(&GroupResource::new("", "configmaps")));
        assert!(is_wildcard(&GroupResource::new("*", "*")));
        assert!(is_wildcard(&GroupResource::new("apps", "*")));
        assert!(!is_wildcard(&GroupResource::new("apps", "deployments")));
    }
}
