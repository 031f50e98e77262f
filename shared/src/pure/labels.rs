//! Protection labels: which label keys protect an object, with which values.
//!
//! `holdfast.dev/protected` (values `Always`, `true`, `Cascading`) is always on. Extra
//! keys come from `--protection-label KEY[=VALUE,...]`; a key given without values
//! protects with `Always`, `true` and `Cascading`. Giving `holdfast.dev/protected=...`
//! overrides the values of the built-in key.
//!
//! The literal value `Cascading`, on any key that lists it, protects only while the
//! object still has live contents (see `policy`); every other protecting value
//! protects always.

use crate::names::{CASCADING_VALUE, PROTECTED_LABEL, PROTECTED_VALUES};
use serde_json::{Map, Value};
use std::{fmt, str::FromStr};

/// One protection label key and the values that protect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectionLabel {
    /// Label key, e.g. `resourcetemplate.karmada.io/deletion-protected`.
    pub key: String,
    /// Values that protect, e.g. `["Always"]`.
    pub values: Vec<String>,
}

/// Why a `--protection-label` argument was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// The key is not a valid qualified label key.
    #[error("invalid label key {key:?}: {why}")]
    BadKey {
        /// The key as given.
        key: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A value is not a valid label value.
    #[error("invalid value {value:?} for label {key:?}: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
}

fn valid_name_part(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("name part must not be empty");
    }
    if s.len() > 63 {
        return Err("name part must be at most 63 characters");
    }
    let b = s.as_bytes();
    if !b[0].is_ascii_alphanumeric() || !b[b.len() - 1].is_ascii_alphanumeric() {
        return Err("name part must start and end with an alphanumeric character");
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err("name part may contain only alphanumerics, '-', '_' and '.'");
    }
    Ok(())
}

fn valid_dns_subdomain(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 253 {
        return Err("prefix must be a DNS subdomain of 1 to 253 characters");
    }
    for part in s.split('.') {
        let b = part.as_bytes();
        if b.is_empty()
            || !b[0].is_ascii_alphanumeric()
            || !b[b.len() - 1].is_ascii_alphanumeric()
            || !b
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        {
            return Err("prefix must be a lowercase DNS subdomain");
        }
    }
    Ok(())
}

/// Validates a qualified label key (`[prefix/]name`), as Kubernetes does.
pub fn validate_key(key: &str) -> Result<(), LabelError> {
    let bad = |why| LabelError::BadKey {
        key: key.to_string(),
        why,
    };
    match key.split_once('/') {
        Some((prefix, name)) => {
            valid_dns_subdomain(prefix).map_err(bad)?;
            valid_name_part(name).map_err(bad)
        }
        None => valid_name_part(key).map_err(bad),
    }
}

/// Validates a label value, as Kubernetes does (empty is allowed by Kubernetes but
/// never protects, so it is refused here).
pub fn validate_value(key: &str, value: &str) -> Result<(), LabelError> {
    valid_name_part(value).map_err(|why| LabelError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        why,
    })
}

impl FromStr for ProtectionLabel {
    type Err = LabelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, values) = match s.split_once('=') {
            Some((k, v)) => (
                k.trim(),
                v.split(',')
                    .map(|v| v.trim().to_string())
                    .collect::<Vec<_>>(),
            ),
            None => (
                s.trim(),
                PROTECTED_VALUES.iter().map(|v| v.to_string()).collect(),
            ),
        };
        validate_key(key)?;
        for v in &values {
            validate_value(key, v)?;
        }
        Ok(Self {
            key: key.to_string(),
            values,
        })
    }
}

impl fmt::Display for ProtectionLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.values.join(","))
    }
}

impl ProtectionLabel {
    /// Whether `value` protects.
    pub fn protects(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }
}

/// Whether a protecting `value` protects only while live contents remain.
pub fn is_cascading(value: &str) -> bool {
    value == CASCADING_VALUE
}

/// The set of protection labels in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectionLabels {
    labels: Vec<ProtectionLabel>,
}

impl Default for ProtectionLabels {
    fn default() -> Self {
        Self {
            labels: vec![ProtectionLabel {
                key: PROTECTED_LABEL.to_string(),
                values: PROTECTED_VALUES.iter().map(|v| v.to_string()).collect(),
            }],
        }
    }
}

/// A label key currently protecting an object, with the value found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectingLabel<'a> {
    /// The key.
    pub key: &'a str,
    /// The value on the object.
    pub value: &'a str,
}

impl ProtectingLabel<'_> {
    /// Whether this label protects only while the object has live contents.
    pub fn cascading(&self) -> bool {
        is_cascading(self.value)
    }
}

impl ProtectionLabels {
    /// No protection label at all (kcp: the objects of a workspace that does not bind
    /// holdfast, reviewed through a provider's export route).
    pub fn none() -> Self {
        Self { labels: Vec::new() }
    }

    /// The built-in key plus `extra` (an extra entry for the built-in key replaces
    /// its values; a repeated key keeps its last values).
    pub fn with_extra(extra: impl IntoIterator<Item = ProtectionLabel>) -> Self {
        let mut set = Self::default();
        for label in extra {
            match set.labels.iter_mut().find(|l| l.key == label.key) {
                Some(existing) => existing.values = label.values,
                None => set.labels.push(label),
            }
        }
        set
    }

    /// The labels in force.
    pub fn iter(&self) -> impl Iterator<Item = &ProtectionLabel> {
        self.labels.iter()
    }

    /// The first label on `labels` that protects, in configuration order; one that
    /// protects always wins over a `Cascading` one found before it.
    pub fn protecting<'a>(
        &'a self,
        labels: Option<&'a Map<String, Value>>,
    ) -> Option<ProtectingLabel<'a>> {
        let labels = labels?;
        let mut found = self.labels.iter().filter_map(|l| {
            let value = labels.get(&l.key)?.as_str()?;
            l.protects(value)
                .then_some(ProtectingLabel { key: &l.key, value })
        });
        let first = found.next()?;
        if !first.cascading() {
            return Some(first);
        }
        Some(found.find(|l| !l.cascading()).unwrap_or(first))
    }

    /// Every configured key whose protection is present in `old` and gone in `new`
    /// (removed, or changed to a value that does not protect).
    /// Protection labels on an object whose value looks protecting but is not:
    /// equal to a protecting value once trimmed and compared without case
    /// (`always`, `TRUE`, `Always ` ...). Such a label protects nothing.
    pub fn look_alikes<'a>(
        &'a self,
        labels: Option<&'a Map<String, Value>>,
    ) -> Vec<(&'a ProtectionLabel, &'a str)> {
        let Some(labels) = labels else {
            return Vec::new();
        };
        self.labels
            .iter()
            .filter_map(|l| {
                let value = labels.get(&l.key)?.as_str()?;
                let looks = l
                    .values
                    .iter()
                    .any(|v| v.eq_ignore_ascii_case(value.trim()));
                (looks && !l.protects(value)).then_some((l, value))
            })
            .collect()
    }

    /// The protecting labels of `old` that `new` drops or changes to a value that does
    /// not protect (what strict mode refuses on UPDATE).
    pub fn removed<'a>(
        &'a self,
        old: Option<&'a Map<String, Value>>,
        new: Option<&Map<String, Value>>,
    ) -> Vec<ProtectingLabel<'a>> {
        let Some(old) = old else { return Vec::new() };
        self.labels
            .iter()
            .filter_map(|l| {
                let before = old.get(&l.key)?.as_str()?;
                if !l.protects(before) {
                    return None;
                }
                let after = new.and_then(|n| n.get(&l.key)).and_then(Value::as_str);
                match after {
                    Some(v) if l.protects(v) => None,
                    _ => Some(ProtectingLabel {
                        key: &l.key,
                        value: before,
                    }),
                }
            })
            .collect()
    }
}

/// The extra Karmada key `resourcetemplate.karmada.io/deletion-protected=Always` alone.
#[cfg(test)]
pub(crate) fn karmada_always() -> ProtectionLabels {
    ProtectionLabels::with_extra(["resourcetemplate.karmada.io/deletion-protected=Always"
        .parse::<ProtectionLabel>()
        .expect("valid")])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn look_alike_values_are_found() {
        let set = ProtectionLabels::with_extra([ProtectionLabel {
            key: "resourcetemplate.karmada.io/deletion-protected".into(),
            values: vec!["Always".into()],
        }]);
        let l = map(json!({
            "holdfast.dev/protected": "always",
            "resourcetemplate.karmada.io/deletion-protected": "Always ",
            "other": "Always"
        }));
        let found: Vec<(String, String)> = set
            .look_alikes(Some(&l))
            .into_iter()
            .map(|(p, v)| (p.key.clone(), v.to_string()))
            .collect();
        assert_eq!(
            found,
            vec![
                ("holdfast.dev/protected".to_string(), "always".to_string()),
                (
                    "resourcetemplate.karmada.io/deletion-protected".to_string(),
                    "Always ".to_string()
                )
            ]
        );
        let ok = map(json!({"holdfast.dev/protected": "Always", "x": "TRUE"}));
        assert!(set.look_alikes(Some(&ok)).is_empty());
        let other = map(json!({"holdfast.dev/protected": "never"}));
        assert!(set.look_alikes(Some(&other)).is_empty());
        assert!(set.look_alikes(None).is_empty());
    }

    #[test]
    fn parses_keys_and_values() {
        let l: ProtectionLabel = "resourcetemplate.karmada.io/deletion-protected=Always"
            .parse()
            .expect("valid");
        assert_eq!(l.key, "resourcetemplate.karmada.io/deletion-protected");
        assert_eq!(l.values, vec!["Always"]);
        let l: ProtectionLabel = "orkestra.io/deletion-protection".parse().expect("valid");
        assert_eq!(l.values, vec!["Always", "true", "Cascading"]);
        let l: ProtectionLabel = "example.com/p=yes, on".parse().expect("valid");
        assert_eq!(l.values, vec!["yes", "on"]);
        assert_eq!(l.to_string(), "example.com/p=yes,on");
    }

    #[test]
    fn refuses_bad_keys_and_values() {
        for bad in [
            "",
            "/x",
            "Example.com/x",
            "a/b/c",
            "-x",
            "x-",
            "example.com/",
            "k=",
            "k=a,,b",
            "k=-bad",
            "k=has space",
        ] {
            assert!(
                bad.parse::<ProtectionLabel>().is_err(),
                "{bad:?} should fail"
            );
        }
        let long = format!("k={}", "a".repeat(64));
        assert!(long.parse::<ProtectionLabel>().is_err());
    }

    #[test]
    fn default_key_always_present_and_overridable() {
        let set = ProtectionLabels::with_extra([]);
        assert_eq!(set.iter().count(), 1);
        let set = ProtectionLabels::with_extra(["holdfast.dev/protected=Always"
            .parse::<ProtectionLabel>()
            .expect("valid")]);
        assert_eq!(set.iter().count(), 1);
        let labels = map(json!({"holdfast.dev/protected": "true"}));
        assert!(set.protecting(Some(&labels)).is_none());
    }

    #[test]
    fn karmada_key_only_always_protects() {
        let set = karmada_always();
        let always = map(json!({"resourcetemplate.karmada.io/deletion-protected": "Always"}));
        let truthy = map(json!({"resourcetemplate.karmada.io/deletion-protected": "true"}));
        assert!(set.protecting(Some(&always)).is_some());
        assert!(set.protecting(Some(&truthy)).is_none());
    }

    #[test]
    fn cascading_is_a_protecting_value_and_always_wins() {
        let kruise: ProtectionLabel = "policy.kruise.io/delete-protection=Always,Cascading"
            .parse()
            .expect("valid");
        let set = ProtectionLabels::with_extra([kruise]);
        let cascading = map(json!({"policy.kruise.io/delete-protection": "Cascading"}));
        let found = set.protecting(Some(&cascading)).expect("protects");
        assert_eq!(
            (found.key, found.value, found.cascading()),
            ("policy.kruise.io/delete-protection", "Cascading", true)
        );
        // The built-in key protects with Cascading too.
        let builtin = map(json!({"holdfast.dev/protected": "Cascading"}));
        assert!(
            set.protecting(Some(&builtin))
                .is_some_and(|l| l.cascading())
        );
        // Both: the key that protects always is the one reported.
        let both = map(json!({
            "holdfast.dev/protected": "Cascading",
            "policy.kruise.io/delete-protection": "Always"
        }));
        let found = set.protecting(Some(&both)).expect("protects");
        assert_eq!(
            (found.key, found.value, found.cascading()),
            ("policy.kruise.io/delete-protection", "Always", false)
        );
        // A key that does not list Cascading is not protected by it.
        let karmada = karmada_always();
        let l = map(json!({"resourcetemplate.karmada.io/deletion-protected": "Cascading"}));
        assert!(karmada.protecting(Some(&l)).is_none());
        // Strict mode: removing Cascading is a removal; Always -> Cascading is not.
        let old = map(json!({"holdfast.dev/protected": "Cascading"}));
        assert_eq!(set.removed(Some(&old), Some(&map(json!({})))).len(), 1);
        let always = map(json!({"holdfast.dev/protected": "Always"}));
        assert!(set.removed(Some(&always), Some(&old)).is_empty());
    }

    #[test]
    fn removed_detects_removal_and_downgrade() {
        let set = ProtectionLabels::default();
        let old = map(json!({"holdfast.dev/protected": "Always"}));
        assert_eq!(set.removed(Some(&old), None).len(), 1);
        assert_eq!(set.removed(Some(&old), Some(&map(json!({})))).len(), 1);
        assert_eq!(
            set.removed(
                Some(&old),
                Some(&map(json!({"holdfast.dev/protected": "false"})))
            )
            .len(),
            1
        );
        assert!(
            set.removed(
                Some(&old),
                Some(&map(json!({"holdfast.dev/protected": "true"})))
            )
            .is_empty()
        );
        let unprotected = map(json!({"holdfast.dev/protected": "no"}));
        assert!(set.removed(Some(&unprotected), None).is_empty());
    }
}
