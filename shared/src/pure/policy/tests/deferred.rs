//! Deferred-deletion requests as the webhook judges them: the requester, the delete
//! permission, holdfast's signature, and what outside kcp `kcp.io/cluster` changes
//! (nothing).

use super::*;
use crate::request_signature::{KEY_LEN, RequestKey};

const KEY: [u8; KEY_LEN] = [42; KEY_LEN];

/// A view whose SubjectAccessReview answers `may` (an error: fails saying so),
/// recording who was asked, and whose signing key is `key` (none: it cannot be read).
struct MayDelete {
    may: Result<bool, &'static str>,
    asked: parking_lot::Mutex<Vec<String>>,
    key: Option<RequestKey>,
}

impl MayDelete {
    fn new(may: Result<bool, &'static str>) -> Self {
        Self {
            may,
            asked: Default::default(),
            key: RequestKey::from_bytes(&KEY).ok(),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().clone()
    }
}

impl ClusterIndex for MayDelete {
    fn policies_loaded(&self) -> bool {
        true
    }
}

impl ClusterLookup for MayDelete {}

impl AccessReview for MayDelete {
    async fn can_delete_as(
        &self,
        _req: &AdmissionRequest,
        user: &str,
    ) -> Result<bool, LookupError> {
        self.asked.lock().push(user.to_string());
        self.may.map_err(LookupError::unreadable)
    }
    async fn request_key(&self) -> Result<RequestKey, LookupError> {
        self.key
            .clone()
            .ok_or_else(|| LookupError::unreadable("the key Secret does not exist yet"))
    }
}

fn key() -> RequestKey {
    RequestKey::from_bytes(&KEY).expect("key")
}

/// A ConfigMap with uid `uid-cm` carrying a request by `by` (signed with `sig`).
fn request(by: &str, sig: Option<&str>) -> Value {
    let mut a = json!({"holdfast.dev/delete-when-unblocked": "true",
                       "holdfast.dev/delete-requested-by": by});
    if let Some(sig) = sig {
        a["holdfast.dev/delete-request-signature"] = json!(sig);
    }
    with_uid(cm(json!({"holdfast.dev/delete-when-unblocked": "true"}), a))
}

fn with_uid(mut o: Value) -> Value {
    o["metadata"]["uid"] = json!("uid-cm");
    o
}

fn plain() -> Value {
    with_uid(cm(json!({}), json!({})))
}

fn ask(old: Value, new: Value, view: &MayDelete) -> Evaluation {
    evaluate(&update(old, new), &cfg(false, &[]), view, now())
}

#[test]
fn deferred_requests_need_the_requester_the_delete_permission_and_a_signature() {
    let yes = MayDelete::new(Ok(true));
    // Unsigned: refused with the signature to set, issued to the requester.
    let e = ask(plain(), request("alice", None), &yes);
    let sig = key().sign("uid-cm", "alice", now());
    assert_eq!(
        denied(&e).message,
        format!(
            "holdfast: to confirm the deferred deletion request on ConfigMap ns/obj, set the \
             annotation holdfast.dev/delete-request-signature to \"{sig}\" in the same \
             request (holdfast signs each request; the signature is valid for 10 minutes): \
             kubectl patch configmaps obj -n ns --type merge -p '{}'",
            crate::deferred::signed_request_patch("alice", &sig)
        )
    );
    assert_eq!(yes.asked(), vec!["alice".to_string()]);
    // The same request with it: admitted.
    let e = ask(plain(), request("alice", Some(&sig)), &yes);
    assert_eq!(e.decision, Decision::Allow);

    // Someone else named: refused before any SubjectAccessReview, with alice's
    // signature too (it is bound to the user named).
    let e = ask(plain(), request("bob", Some(&sig)), &yes);
    assert_eq!(
        denied(&e).message,
        "holdfast: cannot accept the deferred deletion request on ConfigMap ns/obj: the \
         annotation holdfast.dev/delete-requested-by must name you, \"alice\" (it is \"bob\"). \
         Set all three in one request, then confirm it with the signature holdfast answers: \
         kubectl patch configmaps obj -n ns --type merge -p \
         '{\"metadata\":{\"annotations\":{\"holdfast.dev/delete-requested-by\":\"alice\",\
         \"holdfast.dev/delete-when-unblocked\":\"true\"},\"labels\":{\
         \"holdfast.dev/delete-when-unblocked\":\"true\"}}}'"
    );
    assert_eq!(yes.asked().len(), 2);

    // A signature for another object, another user, forged, or expired: refused.
    let other_uid = key().sign("uid-other", "alice", now());
    let other_user = key().sign("uid-cm", "bob", now());
    let expired = key().sign("uid-cm", "alice", now() - chrono::TimeDelta::minutes(11));
    for (sig, why) in [
        (
            other_uid.as_str(),
            "was not issued by holdfast for this object and user",
        ),
        (
            other_user.as_str(),
            "was not issued by holdfast for this object and user",
        ),
        (
            "v1.1.00ff",
            "was not issued by holdfast for this object and user",
        ),
        ("forged", "is not one holdfast issues"),
        (expired.as_str(), "has expired"),
    ] {
        let e = ask(plain(), request("alice", Some(sig)), &yes);
        let d = denied(&e);
        assert!(d.message.contains(why), "{sig}: {}", d.message);
        assert!(
            d.message.contains(&key().sign("uid-cm", "alice", now())),
            "{sig}"
        );
    }

    // No delete permission, or it cannot be checked: refused, no signature issued.
    let no = MayDelete::new(Ok(false));
    let e = ask(plain(), request("alice", Some(&sig)), &no);
    assert_eq!(
        denied(&e).message,
        "holdfast: user \"alice\" may not ask for the deferred deletion of ConfigMap ns/obj: \
         that takes the permission to delete it (verb delete on configmaps in namespace ns), \
         which \"alice\" does not hold as holdfast will use it: it deletes the object later \
         by impersonating the user name alone, without the groups of this request."
    );
    let failing = MayDelete::new(Err("down"));
    let e = ask(plain(), request("alice", Some(&sig)), &failing);
    assert_eq!(denied(&e).kind, DenialKind::LookupFailed);

    // No key yet: refused as "retry later", never admitted unsigned.
    let keyless = MayDelete {
        key: None,
        ..MayDelete::new(Ok(true))
    };
    let e = ask(plain(), request("alice", Some(&sig)), &keyless);
    assert_eq!(denied(&e).kind, DenialKind::LookupFailed);
    assert!(denied(&e).message.contains("Retry later"), "{e:?}");

    // Unrelated updates of a requested object, and withdrawing it: not judged.
    let mut touched = request("bob", None);
    touched["metadata"]["labels"]["x"] = json!("y");
    let e = ask(request("bob", None), touched, &no);
    assert_eq!(e.decision, Decision::Allow);
    let e = ask(request("bob", None), plain(), &no);
    assert_eq!(e.decision, Decision::Allow);
    // Changing only the signature is judged.
    let e = ask(
        request("alice", Some(&sig)),
        request("alice", Some("x")),
        &yes,
    );
    assert!(matches!(e.decision, Decision::Deny(_)), "{e:?}");
}

#[test]
fn a_created_object_cannot_carry_a_request() {
    let yes = MayDelete::new(Ok(true));
    let mut new = request("alice", None);
    new["metadata"]
        .as_object_mut()
        .map(|m| m.remove("uid"))
        .expect("metadata");
    let e = evaluate(
        &review("CREATE", "ConfigMap", "configmaps", new, Value::Null),
        &cfg(false, &[]),
        &yes,
        now(),
    );
    assert!(
        denied(&e).message.contains("create it, then ask"),
        "{}",
        denied(&e).message
    );
}

/// Outside kcp, `kcp.io/cluster` is written by whoever writes the object: it must
/// not exempt a request from judgement (the hole that let anyone have an object
/// deleted as any user), nor move an object out of its policies' reach.
#[test]
fn outside_kcp_the_logical_cluster_annotation_exempts_nothing() {
    let no = MayDelete::new(Ok(false));
    let mut forged = request(
        "system:serviceaccount:kube-system:namespace-controller",
        None,
    );
    forged["metadata"]["annotations"]["kcp.io/cluster"] = json!("root:team");
    let mut before = plain();
    before["metadata"]["annotations"] = json!({"kcp.io/cluster": "root:team"});
    let e = ask(before.clone(), forged.clone(), &no);
    assert!(matches!(e.decision, Decision::Deny(_)), "{e:?}");
    assert!(
        denied(&e).message.contains("must name you, \"alice\""),
        "{}",
        denied(&e).message
    );
    // On kcp nothing carries a request out: not judged there.
    let kcp = PolicyConfig {
        kcp: true,
        ..cfg(false, &[])
    };
    let e = evaluate(&update(before, forged), &kcp, &no, now());
    assert_eq!(e.decision, Decision::Allow);

    // A label-protected object, or one a ResourceProtection names, stays protected
    // whatever kcp.io/cluster says.
    let protected = cm(
        json!({"holdfast.dev/protected": "true"}),
        json!({"kcp.io/cluster": "elsewhere"}),
    );
    let e = judge(&delete(protected), &cfg(false, &[]));
    assert!(matches!(e.decision, Decision::Deny(_)), "{e:?}");
    let stripped = as_judged(
        &delete(cm(json!({}), json!({"kcp.io/cluster": "x", "keep": "y"}))),
        &cfg(false, &[]),
    )
    .into_owned();
    assert_eq!(
        stripped
            .old_object
            .as_ref()
            .map(|o| &o["metadata"]["annotations"]),
        Some(&json!({"keep": "y"}))
    );
    let kept = delete(cm(json!({}), json!({"kcp.io/cluster": "x"})));
    assert!(matches!(
        as_judged(&kept, &kcp),
        std::borrow::Cow::Borrowed(_)
    ));
}
