//! What the policies need to know about the cluster: the [`ClusterView`] the
//! webhook implements (and the plugin, over the same view), in three parts: what is
//! read at once from indexes ([`ClusterIndex`]), what is looked up
//! ([`ClusterLookup`]), and access reviews ([`AccessReview`]).

use crate::{
    api::common::GroupResource,
    index::Referrer,
    registry::{
        AnchorSourceRef, CompiledAnchor, CompiledCritical, CompiledDependency, CompiledProtection,
    },
    review::AdmissionRequest,
};
use serde_json::Value;
use std::{
    future::{Future, Ready, ready},
    sync::Arc,
};

/// A question for the dependents lookup: who references `name` of `dep.target`?
#[derive(Clone, Copy, Debug)]
pub struct DependentsQuery<'a> {
    /// Logical cluster of the deleted object ("" on plain Kubernetes).
    pub cluster: &'a str,
    /// The dependency being checked.
    pub dep: &'a CompiledDependency,
    /// Name of the object being deleted.
    pub name: &'a str,
    /// Its namespace (None when cluster-scoped: references from every namespace count).
    pub namespace: Option<&'a str>,
}

/// Why a lookup of a [`ClusterView`] could not answer; the caller refuses (fails
/// closed), quoting the message. The message is complete on its own: a failed
/// request's already says what its source says (a printer of the whole chain
/// repeats it). A read of a Secret keeps none of what it holds, in the message or
/// as the source.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// What the lookup needs cannot be read: not permitted, not served, not synced
    /// yet, not configured, or missing. The text says which and, where there is
    /// something to do, what.
    #[error("{0}")]
    Unreadable(String),
    /// A request failed, was not answered in time, or what it answered cannot be
    /// used.
    #[error("{message}")]
    Failed {
        /// What was asked and what came back.
        message: String,
        /// The failure itself (the API client's error, the timeout...).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl LookupError {
    /// [`LookupError::Unreadable`], saying `why`.
    pub fn unreadable(why: impl Into<String>) -> Self {
        Self::Unreadable(why.into())
    }

    /// [`LookupError::Failed`]: `message`, which says what `source` says (or what
    /// of it is safe to show), caused by `source`.
    pub fn failed(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Failed {
            message: message.into(),
            source: source.into(),
        }
    }

    /// [`LookupError::Failed`] whose message is what `source` says.
    pub fn from_error(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::failed(source.to_string(), source)
    }

    /// The message (what the error displays): what a denial quotes.
    pub fn message(&self) -> &str {
        match self {
            Self::Unreadable(why) => why,
            Self::Failed { message, .. } => message,
        }
    }
}

/// The answer of a view that knows nothing of what is asked: empty, none, zero.
fn nothing<T: Default>() -> Ready<Result<T, LookupError>> {
    ready(Ok(T::default()))
}

/// The answer of a view that cannot ask: an error (the caller refuses).
fn unavailable<T>(why: impl Into<String>) -> Ready<Result<T, LookupError>> {
    ready(Err(LookupError::unreadable(why)))
}

/// Declares the lookups of [`ClusterLookup`] whose default answers nothing (empty,
/// none, zero): `fn name(args) -> T;` declares
/// `fn name(&self, args) -> impl Future<Output = Result<T, LookupError>> + Send`,
/// which an implementor writes as `async fn name(&self, args) -> Result<T, LookupError>`.
macro_rules! lookups {
    ($($(#[doc = $doc:expr])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $out:ty;)*) => {
        $(
            $(#[doc = $doc])*
            fn $name(&self, $($arg: $ty),*) -> impl Future<Output = Result<$out, LookupError>> + Send {
                nothing()
            }
        )*
    };
}

/// Declares the registry lists of [`ClusterIndex`] (none by default):
/// `fn name -> T;` declares `fn name(&self, gr: &GroupResource) -> Option<Arc<[Arc<T>]>>`.
macro_rules! policy_lists {
    ($($(#[doc = $doc:expr])* fn $name:ident -> $item:ty;)*) => {
        $(
            $(#[doc = $doc])*
            fn $name(&self, _gr: &GroupResource) -> Option<Arc<[Arc<$item>]>> {
                None
            }
        )*
    };
}

/// What the webhook knows about the cluster, as the policies need it: what it reads
/// at once from its indexes ([`ClusterIndex`]), what it looks up ([`ClusterLookup`]),
/// and what it asks the API server a user may do ([`AccessReview`]). Any type with
/// all three is a `ClusterView`.
///
/// Label and strict-mode decisions need nothing from here except the registry state.
pub trait ClusterView: ClusterIndex + ClusterLookup + AccessReview {}

impl<T: ClusterIndex + ClusterLookup + AccessReview + ?Sized> ClusterView for T {}

/// What a [`ClusterView`] answers synchronously, from watch-fed indexes: the
/// registry's state and lists, and what its policies select.
pub trait ClusterIndex: Send + Sync {
    /// Whether every registry of policy objects has completed its initial load.
    fn policies_loaded(&self) -> bool;

    /// Whether some policy object may govern a DELETE of this object. Before the
    /// registry has loaded, a view that has policy sources must answer `true`
    /// (it cannot know otherwise).
    fn may_govern_delete(&self, _req: &AdmissionRequest) -> bool {
        false
    }

    /// Whether a strict policy object covers this object (beyond `--strict`).
    fn strict_for(&self, _req: &AdmissionRequest) -> bool {
        false
    }

    policy_lists! {
        /// ResourceProtections that select objects of `gr`.
        fn protections -> CompiledProtection;

        /// DependencyRules (their dependencies) protecting `gr`.
        fn dependencies -> Vec<CompiledDependency>;

        /// CriticalServices concerned by a DELETE of `gr` (provider resource, namespaces,
        /// criticalservices).
        fn critical -> CompiledCritical;

        /// AnchorRules protecting `gr`.
        fn anchors -> CompiledAnchor;
    }

    /// The ResourceProtections of logical cluster `cluster` ("" on plain Kubernetes)
    /// and `gr` that could select an object in `namespace` (`None`: cluster-scoped):
    /// those for every namespace and those naming it, in the registry's order. A
    /// policy of another workspace never does. The default visits every one; a view
    /// with an index answers from it.
    fn protection_candidates(
        &self,
        cluster: &str,
        gr: &GroupResource,
        namespace: Option<&str>,
    ) -> Vec<Arc<CompiledProtection>> {
        self.protections(gr)
            .map(|list| {
                list.iter()
                    .filter(|p| {
                        &*p.key.cluster == cluster
                            && p.selectors
                                .iter()
                                .any(|s| s.selects_resource(gr) && s.namespace_matches(namespace))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A strict ResourceProtection that selects the stored object but would no
    /// longer select the updated one (its labels changed), by name.
    fn strict_selection_lost(&self, _req: &AdmissionRequest) -> Option<String> {
        None
    }

    /// Whether this view can tell live contents (Cascading protection). A view that
    /// cannot (`--label-only`) makes `Cascading` protect like `Always`.
    fn cascading_judged(&self) -> bool {
        false
    }
}

/// What a [`ClusterView`] looks up, possibly through the API server (async): objects,
/// what a container holds, dependents, live contents. A view that knows nothing of
/// what is asked answers nothing (empty, none, zero); one that cannot ask fails.
pub trait ClusterLookup: Send + Sync {
    /// The anchor `name` (in `namespace`) of `gr` in the cluster of anchor source
    /// `source`, if it exists. Fails (and so refuses) while the source is not synced
    /// or unreachable.
    fn remote_object(
        &self,
        source: &AnchorSourceRef,
        _gr: &GroupResource,
        _namespace: Option<&str>,
        _name: &str,
    ) -> impl Future<Output = Result<Option<Arc<Value>>, LookupError>> + Send {
        unavailable(format!("anchor source {source} is not available here"))
    }

    lookups! {
        /// The objects that reference the deleted object through `q.dep`.
        fn dependents(_q: DependentsQuery<'_>) -> Vec<Referrer>;

        /// How many objects of `gr` in `cluster` carry `finalizer`.
        fn count_finalizer(_cluster: &str, _gr: &GroupResource, _finalizer: &str) -> usize;

        /// The object `name` (in `namespace`) of `gr` in `cluster`, if it exists. Anchors
        /// come back whole enough to read their toggle; others at least with metadata.
        fn object(
            _cluster: &str,
            _gr: &GroupResource,
            _namespace: Option<&str>,
            _name: &str,
        ) -> Option<Arc<Value>>;

        /// Every object in namespace `ns` of `cluster` that some protection could cover
        /// (labelled objects, and objects of every resource a policy object protects).
        fn namespace_contents(_cluster: &str, _ns: &str) -> Vec<ContainedObject>;

        /// Every instance of the custom resource the CustomResourceDefinition `crd`
        /// defines, in `cluster` (at least their metadata): deleting the CRD deletes them
        /// all from storage, without a DELETE review for any of them.
        fn custom_resources(_cluster: &str, _crd: &Value) -> Vec<ContainedObject>;

        /// kcp: the objects of the types the APIBinding `binding` (the stored object)
        /// binds, in `cluster` (deleting a binding deletes them all, kcp-facts 24).
        fn binding_contents(_cluster: &str, _binding: &Value) -> Vec<ContainedObject>;

        /// kcp: what deleting the Workspace `workspace` (the stored object) would
        /// delete, per workspace: its own logical cluster and every workspace below
        /// it that binds holdfast (each object at least its metadata, annotated with
        /// its logical cluster). A workspace holdfast cannot place in the tree comes
        /// with `path: None`. Empty while the Workspace has no logical cluster yet.
        fn workspace_contents(_workspace: &Value) -> Vec<WorkspaceContents>;

        /// The live contents of namespace `ns` in `cluster`: every Pod neither Succeeded,
        /// Failed nor terminating, and every PersistentVolumeClaim, as `Kind ns/name`,
        /// sorted. An error while they cannot be told (fail closed).
        fn live_in_namespace(_cluster: &str, _ns: &str) -> Vec<String>;

        /// The instances of the CustomResourceDefinition `crd` in `cluster` that are not
        /// terminating, as `Kind ns/name`, sorted.
        fn live_instances(_cluster: &str, _crd: &Value) -> Vec<String>;

        /// The replica path of custom resource `resource` in `group` (its CRD's
        /// `scale.specReplicasPath`), or `None` when it has no scale subresource (or is no
        /// custom resource).
        fn replicas_path(_cluster: &str, _group: &str, _resource: &str) -> Option<String>;

        /// kcp: the APIExport `cluster`'s APIBindings bind `gr` from (its
        /// `status.apiExportClusterName` and `spec.reference.export.name`), `None` when
        /// no binding of `cluster` provides `gr`.
        fn bound_export(_cluster: &str, _gr: &GroupResource) -> Option<crate::review::ExportRoute>;
    }
}

/// What a [`ClusterView`] asks the API server a user may do (SubjectAccessReviews),
/// and the key deferred-deletion requests are signed with. A view that cannot ask
/// fails (the caller refuses).
pub trait AccessReview: Send + Sync {
    /// Whether the requesting user may bypass protection of this object (a
    /// SubjectAccessReview: verb `bypass`, group `holdfast.dev`, resource
    /// `protections`, the object's namespace).
    fn can_bypass(
        &self,
        _req: &AdmissionRequest,
    ) -> impl Future<Output = Result<bool, LookupError>> + Send {
        unavailable("no API server is available to check the bypass permission")
    }

    /// Whether `user` alone, with the groups the API server gives an impersonated
    /// user ([`crate::deferred::impersonated_groups`]), may delete the object of
    /// `req` (a SubjectAccessReview: verb `delete` on its resource, name and
    /// namespace). Deferred deletion is carried out so.
    fn can_delete_as(
        &self,
        _req: &AdmissionRequest,
        _user: &str,
    ) -> impl Future<Output = Result<bool, LookupError>> + Send {
        unavailable("no API server is available to check the delete permission")
    }

    /// The key that signs deferred-deletion requests
    /// ([`crate::request_signature`]), read from holdfast's own Secret.
    fn request_key(
        &self,
    ) -> impl Future<Output = Result<crate::request_signature::RequestKey, LookupError>> + Send
    {
        unavailable("no key to sign deferred deletion requests is available")
    }
}

/// An object inside a namespace, for containment checks.
#[derive(Clone, Debug)]
pub struct ContainedObject {
    /// Its group/version/resource.
    pub resource: crate::review::Gvr,
    /// Its kind.
    pub kind: String,
    /// The object (at least its metadata).
    pub object: Arc<Value>,
}

/// kcp: the objects of one workspace that a Workspace DELETE would delete.
#[derive(Clone, Debug, Default)]
pub struct WorkspaceContents {
    /// Its logical cluster.
    pub cluster: String,
    /// Its path (`root:org:team`), `None` when holdfast cannot tell where in the
    /// tree it lies (so whether the deleted Workspace holds it).
    pub path: Option<String>,
    /// Its objects that some protection could cover.
    pub objects: Vec<ContainedObject>,
    /// Why its objects could not be read (then `objects` is empty).
    pub unreadable: Option<String>,
}

/// A view for a webhook that has no policy sources: always loaded, governs nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPolicies;

impl ClusterIndex for NoPolicies {
    fn policies_loaded(&self) -> bool {
        true
    }
}

impl ClusterLookup for NoPolicies {}

impl AccessReview for NoPolicies {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_lookup_error_shows_its_message_and_keeps_its_source() {
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "deadline has elapsed");
        let e = LookupError::failed("the API server did not answer in time", timeout);
        assert_eq!(e.to_string(), "the API server did not answer in time");
        assert_eq!(e.message(), "the API server did not answer in time");
        let source = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            source.map(std::io::Error::kind),
            Some(std::io::ErrorKind::TimedOut)
        );

        let e = LookupError::from_error(std::io::Error::other("connection refused"));
        assert_eq!(e.to_string(), "connection refused");
        assert!(e.source().is_some());

        let e = LookupError::unreadable("the index of pods is not synced yet");
        assert_eq!(e.to_string(), "the index of pods is not synced yet");
        assert!(matches!(e, LookupError::Unreadable(_)) && e.source().is_none());
    }
}
