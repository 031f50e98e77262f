//! The four policy kinds' watches, one named field per kind.

use super::*;

/// One policy kind, watched as untyped objects.
pub(super) struct PolicyWatch {
    pub(super) ar: ApiResource,
    pub(super) store: Cache<DynamicObject>,
}

impl PolicyWatch {
    fn new<K>(client: &Client, notify: &Arc<Notify>) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        let ar = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let store = spawn_watch(api, watcher::Config::default(), notify, None);
        Self { ar, store }
    }
}

/// The watches of the four policy kinds, untyped so that one object the Rust
/// types cannot read is reported Invalid instead of breaking the whole watch.
pub(super) struct PolicyWatches {
    resource_protections: PolicyWatch,
    anchor_rules: PolicyWatch,
    dependency_rules: PolicyWatch,
    critical_services: PolicyWatch,
}

impl PolicyWatches {
    /// The order a pass reads the kinds in.
    const ORDER: [PolicyKind; 4] = [
        PolicyKind::ResourceProtection,
        PolicyKind::AnchorRule,
        PolicyKind::DependencyRule,
        PolicyKind::CriticalService,
    ];

    /// Starts the watches; every change wakes `notify`.
    pub(super) fn start(client: &Client, notify: &Arc<Notify>) -> Self {
        Self {
            resource_protections: PolicyWatch::new::<ResourceProtection>(client, notify),
            anchor_rules: PolicyWatch::new::<AnchorRule>(client, notify),
            dependency_rules: PolicyWatch::new::<DependencyRule>(client, notify),
            critical_services: PolicyWatch::new::<CriticalService>(client, notify),
        }
    }

    /// The watch of `kind`.
    pub(super) fn get(&self, kind: PolicyKind) -> &PolicyWatch {
        match kind {
            PolicyKind::ResourceProtection => &self.resource_protections,
            PolicyKind::AnchorRule => &self.anchor_rules,
            PolicyKind::DependencyRule => &self.dependency_rules,
            PolicyKind::CriticalService => &self.critical_services,
        }
    }

    /// Every kind and its watch, in the order a pass reads them.
    pub(super) fn iter(&self) -> impl Iterator<Item = (PolicyKind, &PolicyWatch)> {
        Self::ORDER.into_iter().map(|kind| (kind, self.get(kind)))
    }
}
