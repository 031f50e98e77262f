//! Dot-path field resolver used by DependencyRule (`fieldRef.path`) and AnchorRule
//! (`toggle.fieldPath`).
//!
//! Grammar (a leading dot is optional):
//! `.spec.vpcRef.name`, `.spec.disks[*].vpcRef.name`, `.spec.items[0].name`,
//! `.metadata.labels['app.kubernetes.io/name']`, `.metadata.labels["k"]`.
//!
//! A path that does not exist in an object resolves to nothing ("no reference").

use serde_json::Value;
use std::{fmt, str::FromStr};

/// One step of a [`FieldPath`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// A map key.
    Field(String),
    /// Every element of a list (`[*]`).
    Wildcard,
    /// One element of a list (`[N]`).
    Index(usize),
}

/// A parsed field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldPath {
    raw: String,
    segments: Vec<Segment>,
}

/// Why a field path could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldPathError {
    /// The path is empty or only a dot.
    #[error("field path is empty")]
    Empty,
    /// A segment between two dots is empty (`.spec..name`).
    #[error("field path {path:?}: empty segment at byte {at}")]
    EmptySegment {
        /// The path as given.
        path: String,
        /// Byte offset of the problem.
        at: usize,
    },
    /// A bracket expression is not `[*]`, `[N]` or a quoted key.
    #[error("field path {path:?}: bad bracket expression at byte {at} (want [*], [N] or ['key'])")]
    BadBracket {
        /// The path as given.
        path: String,
        /// Byte offset of the problem.
        at: usize,
    },
    /// A character that cannot appear in a field name.
    #[error("field path {path:?}: unexpected character {ch:?} at byte {at}")]
    UnexpectedChar {
        /// The path as given.
        path: String,
        /// The character.
        ch: char,
        /// Byte offset of the problem.
        at: usize,
    },
}

impl FieldPath {
    /// Parses a path; see the module docs for the grammar.
    pub fn parse(path: &str) -> Result<Self, FieldPathError> {
        let raw = path.trim();
        let bytes = raw.as_bytes();
        let mut segments = Vec::new();
        let mut i = 0;
        if raw.is_empty() || raw == "." {
            return Err(FieldPathError::Empty);
        }
        // An optional leading dot.
        let mut expect_name = true;
        if bytes[0] == b'.' {
            i = 1;
        }
        while i < bytes.len() {
            match bytes[i] {
                b'[' => {
                    let close = raw[i..].find(']').map(|p| p + i).ok_or_else(|| {
                        FieldPathError::BadBracket {
                            path: raw.to_string(),
                            at: i,
                        }
                    })?;
                    let inner = raw[i + 1..close].trim();
                    let seg = if inner == "*" {
                        Segment::Wildcard
                    } else if let Ok(n) = inner.parse::<usize>() {
                        Segment::Index(n)
                    } else if inner.len() >= 2
                        && ((inner.starts_with('\'') && inner.ends_with('\''))
                            || (inner.starts_with('"') && inner.ends_with('"')))
                    {
                        Segment::Field(inner[1..inner.len() - 1].to_string())
                    } else {
                        return Err(FieldPathError::BadBracket {
                            path: raw.to_string(),
                            at: i,
                        });
                    };
                    segments.push(seg);
                    i = close + 1;
                    expect_name = false;
                }
                b'.' => {
                    if expect_name {
                        return Err(FieldPathError::EmptySegment {
                            path: raw.to_string(),
                            at: i,
                        });
                    }
                    i += 1;
                    expect_name = true;
                    if i == bytes.len() {
                        return Err(FieldPathError::EmptySegment {
                            path: raw.to_string(),
                            at: i,
                        });
                    }
                }
                _ => {
                    if !expect_name {
                        let ch = raw[i..].chars().next().unwrap_or('?');
                        return Err(FieldPathError::UnexpectedChar {
                            path: raw.to_string(),
                            ch,
                            at: i,
                        });
                    }
                    let start = i;
                    while i < bytes.len() && bytes[i] != b'.' && bytes[i] != b'[' {
                        let c = bytes[i];
                        if !(c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'$') {
                            let ch = raw[i..].chars().next().unwrap_or('?');
                            return Err(FieldPathError::UnexpectedChar {
                                path: raw.to_string(),
                                ch,
                                at: i,
                            });
                        }
                        i += 1;
                    }
                    segments.push(Segment::Field(raw[start..i].to_string()));
                    expect_name = false;
                }
            }
        }
        if segments.is_empty() {
            return Err(FieldPathError::Empty);
        }
        Ok(Self {
            raw: raw.to_string(),
            segments,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The parsed segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether the path can yield more than one value.
    pub fn is_multi(&self) -> bool {
        self.segments.iter().any(|s| matches!(s, Segment::Wildcard))
    }

    /// Calls `f` with every value the path reaches, without allocating.
    pub fn for_each_value<'a>(&self, obj: &'a Value, f: &mut impl FnMut(&'a Value)) {
        walk(&self.segments, obj, f);
    }

    /// Every value the path reaches.
    pub fn values<'a>(&self, obj: &'a Value) -> Vec<&'a Value> {
        let mut out = Vec::new();
        self.for_each_value(obj, &mut |v| out.push(v));
        out
    }

    /// The first value the path reaches, if any.
    pub fn first<'a>(&self, obj: &'a Value) -> Option<&'a Value> {
        let mut found = None;
        self.for_each_value(obj, &mut |v| {
            if found.is_none() {
                found = Some(v);
            }
        });
        found
    }

    /// Every non-empty string the path reaches (references by name).
    /// Values that are not strings are ignored: they are not references.
    pub fn strings<'a>(&self, obj: &'a Value) -> Vec<&'a str> {
        let mut out = Vec::new();
        self.for_each_string(obj, &mut |s| out.push(s));
        out
    }

    /// Calls `f` with every non-empty string the path reaches.
    pub fn for_each_string<'a>(&self, obj: &'a Value, f: &mut impl FnMut(&'a str)) {
        self.for_each_value(obj, &mut |v| {
            if let Value::String(s) = v
                && !s.is_empty()
            {
                f(s)
            }
        });
    }

    /// Whether any string the path reaches equals `name`.
    pub fn references(&self, obj: &Value, name: &str) -> bool {
        let mut hit = false;
        self.for_each_string(obj, &mut |s| hit |= s == name);
        hit
    }
}

fn walk<'a>(segments: &[Segment], v: &'a Value, f: &mut impl FnMut(&'a Value)) {
    let Some((head, rest)) = segments.split_first() else {
        if !v.is_null() {
            f(v);
        }
        return;
    };
    match (head, v) {
        (Segment::Field(name), Value::Object(map)) => {
            if let Some(next) = map.get(name) {
                walk(rest, next, f);
            }
        }
        (Segment::Wildcard, Value::Array(items)) => {
            for item in items {
                walk(rest, item, f);
            }
        }
        (Segment::Index(n), Value::Array(items)) => {
            if let Some(item) = items.get(*n) {
                walk(rest, item, f);
            }
        }
        _ => {}
    }
}

impl FromStr for FieldPath {
    type Err = FieldPathError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> FieldPath {
        match FieldPath::parse(s) {
            Ok(p) => p,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn simple_path() {
        let obj = json!({"spec": {"vpcRef": {"name": "my-vpc"}}});
        assert_eq!(p(".spec.vpcRef.name").strings(&obj), vec!["my-vpc"]);
        assert_eq!(p("spec.vpcRef.name").strings(&obj), vec!["my-vpc"]);
        assert!(p(".spec.vpcRef.name").references(&obj, "my-vpc"));
        assert!(!p(".spec.vpcRef.name").references(&obj, "other"));
    }

    #[test]
    fn wildcard_over_lists() {
        let obj = json!({"spec": {"disks": [
            {"vpcRef": {"name": "a"}}, {"vpcRef": {"name": "b"}}, {"other": 1}, {"vpcRef": {"name": ""}}
        ]}});
        let path = p(".spec.disks[*].vpcRef.name");
        assert!(path.is_multi());
        assert_eq!(path.strings(&obj), vec!["a", "b"]);
        assert!(path.references(&obj, "b"));
        assert_eq!(p(".spec.disks[1].vpcRef.name").strings(&obj), vec!["b"]);
        assert!(p(".spec.disks[9].vpcRef.name").strings(&obj).is_empty());
    }

    #[test]
    fn nested_wildcards() {
        let obj = json!({"a": [{"b": ["x", "y"]}, {"b": ["z"]}]});
        assert_eq!(p(".a[*].b[*]").strings(&obj), vec!["x", "y", "z"]);
    }

    #[test]
    fn quoted_keys() {
        let obj = json!({"metadata": {"labels": {"app.kubernetes.io/name": "db"}}});
        assert_eq!(
            p(".metadata.labels['app.kubernetes.io/name']").strings(&obj),
            vec!["db"]
        );
        assert_eq!(
            p(".metadata.labels[\"app.kubernetes.io/name\"]").strings(&obj),
            vec!["db"]
        );
    }

    #[test]
    fn missing_and_mismatched_types_mean_no_reference() {
        let obj = json!({"spec": {"vpcRef": "flat", "list": {"not": "a list"}, "n": 3}});
        assert!(p(".spec.vpcRef.name").strings(&obj).is_empty());
        assert!(p(".spec.list[*].name").strings(&obj).is_empty());
        assert!(p(".status.x").strings(&obj).is_empty());
        // Non-string leaves are values but not references.
        assert_eq!(p(".spec.n").values(&obj), vec![&json!(3)]);
        assert!(p(".spec.n").strings(&obj).is_empty());
        assert!(p(".spec.x").first(&json!(null)).is_none());
    }

    #[test]
    fn booleans_for_toggles() {
        let obj = json!({"spec": {"parameters": {"backup": {"deletionProtection": false}}}});
        let path = p(".spec.parameters.backup.deletionProtection");
        assert_eq!(path.first(&obj), Some(&json!(false)));
    }

    #[test]
    fn invalid_paths_are_rejected() {
        for bad in [
            "", ".", "..a", ".a..b", ".a.", ".a[", ".a[x]", ".a[*", ".a b", ".a[*]b", "a.$[",
        ] {
            assert!(FieldPath::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn display_round_trips() {
        let path = p(".spec.disks[*].vpcRef.name");
        assert_eq!(path.to_string(), ".spec.disks[*].vpcRef.name");
        assert_eq!(
            path.segments(),
            &[
                Segment::Field("spec".into()),
                Segment::Field("disks".into()),
                Segment::Wildcard,
                Segment::Field("vpcRef".into()),
                Segment::Field("name".into()),
            ]
        );
    }
}
