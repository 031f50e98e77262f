//! What one DependencyRule routes, kept compact: every rule keeps its evaluation
//! from pass to pass, and nested B-trees (provider cluster → export → resources)
//! cost three nodes of over 500 bytes each per rule whatever they hold (a rule
//! names one provider or two).

use super::*;

/// One provider workspace's exports and the resources of each, sorted by export.
pub(super) type ExportSlice = [(String, Box<[GroupResource]>)];

/// Provider cluster → APIExport name → the resources some rule protects, sorted
/// by cluster, then export, then resource (what `BTreeMap`s would iterate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct RuleTargets(Box<[(String, Box<ExportSlice>)]>);

impl RuleTargets {
    /// The provider clusters.
    pub(super) fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(lc, _)| lc)
    }

    /// Each provider cluster and its exports.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &ExportSlice)> {
        self.0.iter().map(|(lc, e)| (lc, &**e))
    }

    /// The exports of every provider cluster.
    pub(super) fn values(&self) -> impl Iterator<Item = &ExportSlice> {
        self.0.iter().map(|(_, e)| &**e)
    }

    /// Provider cluster `lc`'s exports.
    pub(super) fn get(&self, lc: &str) -> Option<&ExportSlice> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(lc))
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|(_, e)| &**e)
    }

    /// How many provider clusters.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

impl From<BTreeMap<String, ExportTargets>> for RuleTargets {
    fn from(m: BTreeMap<String, ExportTargets>) -> Self {
        Self(
            m.into_iter()
                .map(|(lc, exports)| {
                    let exports: Box<ExportSlice> = exports
                        .into_iter()
                        .map(|(export, grs)| (export, grs.into_iter().collect()))
                        .collect();
                    (lc, exports)
                })
                .collect(),
        )
    }
}
