//! Signatures of deferred-deletion requests: what lets the controller tell a
//! request holdfast's webhook admitted from one set past it.
//!
//! The webhook is validating only: it cannot write into the object it admits. So
//! a request is made in two steps. The first UPDATE setting the markers is refused
//! with a signature, HMAC-SHA256 over the object's uid, the requesting user (from
//! the review's own userInfo, which the API server authenticated) and the time,
//! under a key only holdfast holds ([`crate::names::DEFERRED_KEY_SECRET`]); the
//! same UPDATE with the signature in
//! [`crate::names::DELETE_REQUEST_SIGNATURE`] is admitted while the signature is
//! fresh ([`ISSUED_VALIDITY`]). The controller deletes only objects whose
//! signature verifies for the uid and the user named; anything else is ignored
//! with a Warning Event (docs/decisions.md, "Deferred deletion that cannot be
//! forged").
//!
//! The signature is no secret (it is bound to one object and one user): it only
//! proves that holdfast's webhook answered that user about that object.

use chrono::{DateTime, TimeDelta, Utc};
use ring::hmac;

/// How long after it was issued a signature may be set on the object.
pub const ISSUED_VALIDITY: TimeDelta = TimeDelta::minutes(10);

/// Tolerated clock skew between the webhook replicas (a signature dated ahead).
pub const CLOCK_SKEW: TimeDelta = TimeDelta::minutes(1);

/// Bytes of a freshly generated key.
pub const KEY_LEN: usize = 32;

/// The key data field of [`crate::names::DEFERRED_KEY_SECRET`].
pub const KEY_FIELD: &str = "key";

/// Format tag of a signature.
const VERSION: &str = "v1";

/// The signing key. Its bytes are never shown (`Debug` prints nothing of them).
#[derive(Clone)]
pub struct RequestKey(hmac::Key);

impl std::fmt::Debug for RequestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RequestKey(..)")
    }
}

/// Why a key cannot be used or made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key is shorter than [`KEY_LEN`] bytes.
    #[error("the key is shorter than {KEY_LEN} bytes")]
    TooShort,
    /// The system's random source failed.
    #[error("the system's random source failed")]
    Random,
}

/// What is wrong with a signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureProblem {
    /// No signature is set.
    #[error("it carries no signature")]
    Absent,
    /// The value is not a holdfast signature.
    #[error("its signature is not one holdfast issues")]
    Malformed,
    /// The signature is not holdfast's for this object and user.
    #[error("its signature was not issued by holdfast for this object and user")]
    Mismatch,
}

impl RequestKey {
    /// A key from its bytes (at least [`KEY_LEN`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        if bytes.len() < KEY_LEN {
            return Err(KeyError::TooShort);
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, bytes)))
    }

    /// Fresh random key bytes.
    pub fn generate() -> Result<Vec<u8>, KeyError> {
        use ring::rand::SecureRandom as _;
        let mut bytes = vec![0u8; KEY_LEN];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| KeyError::Random)?;
        Ok(bytes)
    }

    /// The signature of a request on the object `uid` by `user`, issued `at`:
    /// `v1.<unix seconds>.<hex HMAC>`.
    pub fn sign(&self, uid: &str, user: &str, at: DateTime<Utc>) -> String {
        let secs = at.timestamp();
        let tag = hmac::sign(&self.0, &message(uid, user, secs));
        format!("{VERSION}.{secs}.{}", hex(tag.as_ref()))
    }

    /// When the signature `sig` was issued, if holdfast issued it for `uid` and `user`.
    pub fn verify(
        &self,
        sig: Option<&str>,
        uid: &str,
        user: &str,
    ) -> Result<DateTime<Utc>, SignatureProblem> {
        let sig = sig
            .filter(|s| !s.is_empty())
            .ok_or(SignatureProblem::Absent)?;
        let mut parts = sig.split('.');
        let (Some(VERSION), Some(secs), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SignatureProblem::Malformed);
        };
        let secs: i64 = secs.parse().map_err(|_| SignatureProblem::Malformed)?;
        let mac = unhex(mac).ok_or(SignatureProblem::Malformed)?;
        let at = DateTime::from_timestamp(secs, 0).ok_or(SignatureProblem::Malformed)?;
        hmac::verify(&self.0, &message(uid, user, secs), &mac)
            .map_err(|_| SignatureProblem::Mismatch)?;
        Ok(at)
    }
}

/// Whether a signature issued `at` may still be set `now`.
pub fn fresh(at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    at <= now + CLOCK_SKEW && now - at <= ISSUED_VALIDITY
}

/// The signed bytes: every part length-prefixed, so no two requests share them.
fn message(uid: &str, user: &str, secs: i64) -> Vec<u8> {
    let mut m = Vec::with_capacity(64 + uid.len() + user.len());
    m.extend_from_slice(b"holdfast.dev/deferred-deletion/v1");
    for part in [uid.as_bytes(), user.as_bytes(), secs.to_string().as_bytes()] {
        m.extend_from_slice(&(part.len() as u64).to_be_bytes());
        m.extend_from_slice(part);
    }
    m
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> RequestKey {
        RequestKey::from_bytes(&[b; KEY_LEN]).expect("key")
    }

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).expect("time")
    }

    #[test]
    fn a_signature_verifies_for_its_object_and_user_only() {
        let k = key(7);
        let sig = k.sign("uid-1", "alice", t(1_800_000_000));
        assert!(sig.starts_with("v1.1800000000."), "{sig}");
        assert_eq!(k.verify(Some(&sig), "uid-1", "alice"), Ok(t(1_800_000_000)));
        assert_eq!(
            k.verify(Some(&sig), "uid-2", "alice"),
            Err(SignatureProblem::Mismatch)
        );
        assert_eq!(
            k.verify(Some(&sig), "uid-1", "bob"),
            Err(SignatureProblem::Mismatch)
        );
        assert_eq!(
            key(8).verify(Some(&sig), "uid-1", "alice"),
            Err(SignatureProblem::Mismatch),
            "another key"
        );
        // The time is signed: moved, it no longer verifies.
        let moved = sig.replacen("1800000000", "1800000001", 1);
        assert_eq!(
            k.verify(Some(&moved), "uid-1", "alice"),
            Err(SignatureProblem::Mismatch)
        );
        // Parts cannot be shifted between uid and user.
        let a = k.sign("ab", "c", t(1));
        assert_eq!(
            k.verify(Some(&a), "a", "bc"),
            Err(SignatureProblem::Mismatch)
        );
    }

    #[test]
    fn malformed_and_absent_signatures_say_so() {
        let k = key(1);
        assert_eq!(k.verify(None, "u", "a"), Err(SignatureProblem::Absent));
        assert_eq!(k.verify(Some(""), "u", "a"), Err(SignatureProblem::Absent));
        for bad in [
            "x",
            "v2.1.00",
            "v1.x.00",
            "v1.1.0g",
            "v1.1.0",
            "v1.1.00.00",
            "v1.99999999999999999999.00",
        ] {
            assert_eq!(
                k.verify(Some(bad), "u", "a"),
                Err(SignatureProblem::Malformed),
                "{bad}"
            );
        }
        assert_eq!(
            RequestKey::from_bytes(&[0; 8]).err(),
            Some(KeyError::TooShort)
        );
        assert_eq!(format!("{:?}", key(9)), "RequestKey(..)");
        let fresh_bytes = RequestKey::generate().expect("random");
        assert_eq!(fresh_bytes.len(), KEY_LEN);
        assert_ne!(fresh_bytes, RequestKey::generate().expect("random"));
    }

    #[test]
    fn signatures_are_fresh_for_ten_minutes() {
        let now = t(10_000);
        assert!(fresh(now, now));
        assert!(fresh(now - TimeDelta::minutes(10), now));
        assert!(!fresh(now - TimeDelta::minutes(11), now));
        assert!(fresh(now + TimeDelta::seconds(30), now));
        assert!(!fresh(now + TimeDelta::minutes(2), now));
    }
}
