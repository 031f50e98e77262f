//! Names fixed by the design contract: API group, labels, annotations, paths.

/// API group of every holdfast CRD.
pub const API_GROUP: &str = "holdfast.dev";
/// API version of every holdfast CRD.
pub const API_VERSION: &str = "v1alpha1";
/// `group/version` of the holdfast CRDs.
pub const API_GROUP_VERSION: &str = "holdfast.dev/v1alpha1";

/// Default protection label; `Always` or `true` protects the object, `Cascading`
/// protects it while it still has live contents.
pub const PROTECTED_LABEL: &str = "holdfast.dev/protected";
/// Protecting values of [`PROTECTED_LABEL`] (and of an extra key given without values).
pub const PROTECTED_VALUES: &[&str] = &["Always", "true", "Cascading"];
/// The protecting value, on any key, that protects an object only while it still has
/// live contents (a Namespace's live Pods and PVCs, a CRD's instances, a workload's
/// replicas).
pub const CASCADING_VALUE: &str = "Cascading";
/// Strict-mode exemption label: must already be on the stored object.
pub const STRICT_EXEMPT_LABEL: &str = "holdfast.dev/strict-exempt";
/// Break-glass annotation for exactly one object.
pub const SKIP_ANNOTATION: &str = "holdfast.dev/skip-protection";
/// Break-glass annotation honoured for compatibility with the dependency-controller design.
pub const SKIP_ANNOTATION_DEPENDENCIES: &str = "dependencies.opendefense.cloud/skip-protection";
/// Per-object override label (AnchorRule), holdfast's own key.
pub const ALLOW_DELETION_LABEL: &str = "holdfast.dev/allow-deletion";
/// Per-object override label honoured for compatibility with the composite-anchor design.
pub const ALLOW_DELETION_LABEL_APPCAT: &str = "appcat.vshn.io/webhook-allowdeletion";
/// Karmada's protection label (only `Always` protects there).
pub const KARMADA_PROTECTED_LABEL: &str = "resourcetemplate.karmada.io/deletion-protected";
/// kcp's logical-cluster annotation carried by every object in a workspace.
pub const KCP_CLUSTER_ANNOTATION: &str = "kcp.io/cluster";

/// Name of the ValidatingWebhookConfiguration holdfast installs.
pub const WEBHOOK_CONFIGURATION_NAME: &str = "holdfast";
/// Admission path served by the webhook.
pub const VALIDATE_PATH: &str = "/validate";
/// Prefix of every denial message.
pub const MESSAGE_PREFIX: &str = "holdfast:";
/// Field manager used for server-side apply.
pub const FIELD_MANAGER: &str = "holdfast";
/// Annotation asking holdfast to delete the object as soon as nothing blocks it
/// (value `true`; deferred deletion).
pub const DELETE_WHEN_UNBLOCKED: &str = "holdfast.dev/delete-when-unblocked";
/// Annotation naming the user who asked for deferred deletion; the webhook
/// requires it to equal the requesting user, and the controller deletes as that
/// user (impersonation).
pub const DELETE_REQUESTED_BY: &str = "holdfast.dev/delete-requested-by";
/// Annotation carrying holdfast's signature of a deferred-deletion request (over
/// the object's uid, the requesting user and the time the webhook issued it); the
/// controller honours only requests whose signature it can verify.
pub const DELETE_REQUEST_SIGNATURE: &str = "holdfast.dev/delete-request-signature";
/// Secret (in holdfast's namespace) holding the key that signs deferred-deletion
/// requests: created by the controller, read by the webhook.
pub const DEFERRED_KEY_SECRET: &str = "holdfast-deferred-deletion-key";
