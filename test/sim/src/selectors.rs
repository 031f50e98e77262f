//! Label selectors (string and LabelSelector object forms) and field selectors.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    Gt(String, i64),
    Lt(String, i64),
    /// A selector that matches nothing (e.g. LabelSelector with an invalid operator).
    Nothing,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector(pub Vec<Req>);

impl Selector {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches_labels(&self, labels: &Value) -> bool {
        let get = |k: &str| labels[k].as_str().map(str::to_string);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
            Req::NotEq(k, v) => get(k).as_deref() != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
            Req::Gt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Req::Lt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
            Req::Nothing => false,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.matches_labels(&obj["metadata"]["labels"])
    }

    /// Parses the string form: `a=b,c!=d,e in (f,g),h notin (i),j,!k,l>3`.
    pub fn parse(s: &str) -> Result<Selector, String> {
        let mut reqs = vec![];
        let parts = split_top(s)?;
        for p in parts {
            let p = p.trim();
            if p.is_empty() {
                continue;
            }
            reqs.push(parse_req(p)?);
        }
        Ok(Selector(reqs))
    }

    /// Builds from a metav1.LabelSelector JSON object; null/absent = match everything.
    pub fn from_label_selector(v: &Value) -> Selector {
        let mut reqs = vec![];
        if let Some(m) = v["matchLabels"].as_object() {
            for (k, val) in m {
                reqs.push(Req::Eq(k.clone(), val.as_str().unwrap_or("").to_string()));
            }
        }
        for e in v["matchExpressions"].as_array().into_iter().flatten() {
            let key = e["key"].as_str().unwrap_or("").to_string();
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect();
            reqs.push(match e["operator"].as_str().unwrap_or("") {
                "In" => Req::In(key, values),
                "NotIn" => Req::NotIn(key, values),
                "Exists" => Req::Exists(key),
                "DoesNotExist" => Req::NotExists(key),
                _ => Req::Nothing,
            });
        }
        Selector(reqs)
    }
}

fn split_top(s: &str) -> Result<Vec<String>, String> {
    let mut out = vec![];
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!(
                        "unable to parse requirement: unexpected ')' in {s:?}"
                    ));
                }
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    if depth != 0 {
        return Err(format!(
            "unable to parse requirement: unclosed '(' in {s:?}"
        ));
    }
    out.push(cur);
    Ok(out)
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{rest}', expected: '('"))?;
    Ok(inner
        .split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect())
}

fn parse_req(p: &str) -> Result<Req, String> {
    if let Some(k) = p.strip_prefix('!') {
        let k = k.trim();
        if !valid_key(k) {
            return Err(format!("invalid label key {k:?}"));
        }
        return Ok(Req::NotExists(k.to_string()));
    }
    let words: Vec<&str> = p.split_whitespace().collect();
    if words.len() >= 2 && (words[1] == "in" || words[1] == "notin") {
        let key = words[0].to_string();
        // Skip the key, the whitespace and the operator.
        let after_key = p.trim_start()[key.len()..].trim_start();
        let rest = &after_key[words[1].len()..];
        let set = parse_set(rest)?;
        return Ok(if words[1] == "in" {
            Req::In(key, set)
        } else {
            Req::NotIn(key, set)
        });
    }
    for (op, mk) in [("!=", 0u8), ("==", 1), ("=", 1), (">", 2), ("<", 3)] {
        if let Some(i) = p.find(op) {
            let k = p[..i].trim().to_string();
            let v = p[i + op.len()..].trim().to_string();
            if !valid_key(&k) {
                return Err(format!("invalid label key {k:?}"));
            }
            return match mk {
                0 => Ok(Req::NotEq(k, v)),
                1 => Ok(Req::Eq(k, v)),
                2 => v
                    .parse()
                    .map(|n| Req::Gt(k, n))
                    .map_err(|_| format!("invalid value {v:?}")),
                _ => v
                    .parse()
                    .map(|n| Req::Lt(k, n))
                    .map_err(|_| format!("invalid value {v:?}")),
            };
        }
    }
    if !valid_key(p) {
        return Err(format!("invalid label key {p:?}"));
    }
    Ok(Req::Exists(p.to_string()))
}

/// Field selector: supports metadata.name, metadata.namespace and a few common fields
/// with `=`, `==` and `!=`.
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str, kind_fields: &[&str]) -> Result<FieldSelector, String> {
        let mut out = vec![];
        for p in s.split(',') {
            let p = p.trim();
            if p.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some(i) = p.find("!=") {
                (&p[..i], false, &p[i + 2..])
            } else if let Some(i) = p.find("==") {
                (&p[..i], true, &p[i + 2..])
            } else if let Some(i) = p.find('=') {
                (&p[..i], true, &p[i + 1..])
            } else {
                return Err(format!("invalid selector: '{p}'; can't understand '{p}'"));
            };
            let k = k.trim();
            if k != "metadata.name" && k != "metadata.namespace" && !kind_fields.contains(&k) {
                return Err(format!("field label not supported: {k}"));
            }
            out.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let lookup = |path: &str| {
                let mut cur = obj;
                for part in path.split('.') {
                    cur = &cur[part];
                }
                cur
            };
            // Field labels that map to other fields (core and events.k8s.io Events).
            let mut cur = lookup(if k == "source" { "source.component" } else { k });
            if cur.is_null()
                && let Some(rest) = k.strip_prefix("involvedObject.")
            {
                cur = lookup(&format!("regarding.{rest}"));
            } else if cur.is_null()
                && let Some(rest) = k.strip_prefix("regarding.")
            {
                cur = lookup(&format!("involvedObject.{rest}"));
            }
            let actual = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == *v) == *eq
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parse_and_match() {
        let o = json!({"metadata": {"labels": {"domain": "a", "tier": "x", "n": "5"}}});
        assert!(
            Selector::parse("domain in (a,b)")
                .expect("parse")
                .matches(&o)
        );
        assert!(
            Selector::parse("domain notin (b),tier=x,n>3,!missing")
                .expect("parse")
                .matches(&o)
        );
        assert!(!Selector::parse("tier!=x").expect("parse").matches(&o));
        assert!(Selector::parse("domain in (a").is_err());
        assert!(Selector::parse("a b c").is_err());
        let fs = FieldSelector::parse("metadata.name=x", &[]).expect("fields");
        assert!(fs.matches(&json!({"metadata": {"name": "x"}})));
        assert!(FieldSelector::parse("spec.x=y", &[]).is_err());
    }
}
