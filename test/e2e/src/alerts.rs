//! The shipped alerting rules, evaluated by the real promtool
//! (`hack/substrates.sh prometheus`) over what the real binaries' `/metrics` said.
//!
//! A [`Scrape`] is what Prometheus stores for one scrape of one target: `up` (1, or
//! 0 when the scrape failed) and every sample, labelled with the target's `job` and
//! `instance`. [`Timeline`] turns a scrape (or two: before and after a fault) into
//! promtool's input series: gauges keep the last scraped value, counters (and a
//! histogram's parts) grow by what they grew between the two scrapes at every step
//! (the fault goes on as observed). [`firing`] then runs `promtool test rules` over
//! an hour of that and reads which alerts fire at its end (from the `ALERTS` series).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The job of the webhook's scrapes, as the service-monitor component names it.
pub const WEBHOOK_JOB: &str = "holdfast-webhook";
/// The job of the controller's scrapes.
pub const CONTROLLER_JOB: &str = "holdfast-controller";

/// Minutes of series promtool evaluates; the alerts are read at the last one.
const MINUTES: u32 = 60;

/// The PrometheusRule manifest the `prometheus-rule` component ships.
pub fn rule_manifest() -> PathBuf {
    crate::workspace_root().join("manifests/components/prometheus-rule/prometheus-rule.yaml")
}

/// The Grafana dashboard shipped beside it.
pub fn dashboard() -> PathBuf {
    crate::workspace_root().join("manifests/components/dashboard/holdfast.json")
}

/// promtool, as `hack/substrates.sh prometheus` builds it.
pub fn promtool() -> anyhow::Result<PathBuf> {
    let p = crate::backend::substrate_bin("prometheus")?.join("promtool");
    if !p.is_file() {
        bail!(
            "{} is not built: run hack/substrates.sh prometheus",
            p.display()
        );
    }
    Ok(p)
}

/// The rules file inside the PrometheusRule (its `spec`), as JSON (which is YAML).
pub fn rules_file(dir: &Path) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(rule_manifest())?;
    let manifest: Value = serde_saphyr::from_str(&text).context("the PrometheusRule parses")?;
    if manifest["kind"] != "PrometheusRule" {
        bail!("{} holds no PrometheusRule", rule_manifest().display());
    }
    let path = dir.join("holdfast.rules.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest["spec"])?)?;
    Ok(path)
}

/// Every alert the rules define.
pub fn alert_names() -> anyhow::Result<BTreeSet<String>> {
    let text = std::fs::read_to_string(rule_manifest())?;
    let manifest: Value = serde_saphyr::from_str(&text)?;
    Ok(manifest["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["alert"].as_str().map(str::to_string))
        .collect())
}

/// Runs promtool with `args` in `dir`: its exit code and output.
pub fn run_promtool(dir: &Path, args: &[&str]) -> anyhow::Result<(i32, String)> {
    let out = std::process::Command::new(promtool()?)
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .context("running promtool")?;
    Ok((
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// One sample of a text exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The metric name.
    pub name: String,
    /// Its labels, as exposed.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// The samples of a Prometheus text exposition, and the type of each family
/// (`# TYPE`).
pub fn parse_exposition(text: &str) -> anyhow::Result<(Vec<Sample>, BTreeMap<String, String>)> {
    let mut samples = Vec::new();
    let mut types = BTreeMap::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                types.insert(name.to_string(), kind.to_string());
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .with_context(|| format!("no value: {line}"))?;
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (
                name,
                parse_labels(rest.strip_suffix('}').unwrap_or(rest))
                    .with_context(|| format!("labels of {line}"))?,
            ),
            None => (series, BTreeMap::new()),
        };
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().with_context(|| format!("value of {line}"))?,
        };
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok((samples, types))
}

/// `a="x",b="y"` (escapes `\\`, `\"`, `\n`).
fn parse_labels(s: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").context("label without =\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("unterminated escape"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => bail!("unterminated label value"),
            }
        };
        out.insert(name.trim_start_matches(',').to_string(), value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    Ok(out)
}

/// What Prometheus stores of one scrape of one target.
#[derive(Clone, Debug)]
pub struct Scrape {
    /// The target's job.
    pub job: String,
    /// The target's address.
    pub instance: String,
    /// The samples, `None` when the scrape failed (`up` is then 0).
    pub samples: Option<Vec<Sample>>,
    /// The type of each family.
    pub types: BTreeMap<String, String>,
}

/// Scrapes `127.0.0.1:port/metrics` as job `job`: a failed GET (nothing listening,
/// an error status) is a failed scrape.
pub async fn scrape(job: &str, port: u16) -> anyhow::Result<Scrape> {
    let instance = format!("127.0.0.1:{port}");
    let (samples, types) = match crate::http_get(port, "/metrics").await {
        Ok((200, body)) => {
            let (samples, types) = parse_exposition(&body)?;
            (Some(samples), types)
        }
        _ => (None, BTreeMap::new()),
    };
    Ok(Scrape {
        job: job.to_string(),
        instance,
        samples,
        types,
    })
}

impl Scrape {
    /// `(series, value)` of every sample, `up` included, with `job` and `instance`.
    fn series(&self) -> Vec<(String, f64, bool)> {
        let target = [
            ("instance".to_string(), self.instance.clone()),
            ("job".to_string(), self.job.clone()),
        ];
        let up = f64::from(u8::from(self.samples.is_some()));
        let mut out = vec![(selector("up", target.iter().cloned()), up, false)];
        for s in self.samples.iter().flatten() {
            let counter = self.is_counter(&s.name);
            let labels = s.labels.clone().into_iter().chain(target.iter().cloned());
            out.push((selector(&s.name, labels), s.value, counter));
        }
        out
    }

    /// Whether `name` is a counter or part of a histogram (both only grow).
    fn is_counter(&self, name: &str) -> bool {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|f| self.types.get(*f).is_some_and(|t| t == "histogram"));
        let family = family.unwrap_or(name);
        matches!(
            self.types.get(family).map(String::as_str),
            Some("counter" | "histogram")
        )
    }
}

/// `name{a="x",...}` with the labels sorted.
fn selector(name: &str, labels: impl Iterator<Item = (String, String)>) -> String {
    let labels: BTreeMap<String, String> = labels.collect();
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", serde_json::to_string(v).unwrap_or_default()))
        .collect();
    format!("{name}{{{}}}", inner.join(","))
}

/// The scrapes an hour of series is made of: the targets after the fault, and,
/// for the counters' growth, the same targets before it.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    before: Vec<Scrape>,
    after: Vec<Scrape>,
}

impl Timeline {
    /// An hour in which every target always says what `after` says (counters flat).
    pub fn steady(after: Vec<Scrape>) -> Self {
        Self {
            before: Vec::new(),
            after,
        }
    }

    /// An hour in which the counters grow every minute by what they grew from
    /// `before` to `after` (the fault between them goes on), the gauges as `after`.
    pub fn growing(before: Vec<Scrape>, after: Vec<Scrape>) -> Self {
        Self { before, after }
    }

    /// promtool's `input_series`.
    fn input_series(&self) -> Vec<Value> {
        let before: BTreeMap<String, f64> = self
            .before
            .iter()
            .flat_map(Scrape::series)
            .map(|(s, v, _)| (s, v))
            .collect();
        self.after
            .iter()
            .flat_map(Scrape::series)
            .map(|(series, value, counter)| {
                // A counter first exposed after `before` started from 0.
                let was = match before.get(&series) {
                    Some(b) => Some(*b),
                    None if !self.before.is_empty() => Some(0.0),
                    None => None,
                };
                let step = match was {
                    Some(b) if counter && value >= b => value - b,
                    _ => 0.0,
                };
                json!({
                    "series": series,
                    "values": format!("{}+{}x{MINUTES}", number(value), number(step)),
                })
            })
            .collect()
    }
}

/// A number as promtool's series notation reads it.
fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "Inf" } else { "-Inf" }.to_string()
    } else if v.is_nan() {
        "NaN".to_string()
    } else {
        format!("{v:?}")
    }
}

/// The alerts firing at the end of an hour of `timeline` under the shipped rules
/// (promtool test rules in a scratch directory), or promtool's complaint.
pub fn firing(timeline: &Timeline) -> anyhow::Result<BTreeSet<String>> {
    let dir = tempfile::tempdir()?;
    let rules = rules_file(dir.path())?;
    let at = format!("{}m", MINUTES - 1);
    // An impossible expectation: promtool then prints what it got.
    let test = json!({
        "rule_files": [rules.file_name().and_then(|n| n.to_str()).unwrap_or_default()],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": timeline.input_series(),
            "promql_expr_test": [{
                "expr": "count by (alertname) (ALERTS{alertstate=\"firing\"}) or vector(0)",
                "eval_time": at,
                "exp_samples": [{"labels": "{alertname=\"-\"}", "value": -1}],
            }],
        }],
    });
    std::fs::write(
        dir.path().join("test.json"),
        serde_json::to_vec_pretty(&test)?,
    )?;
    let (code, out) = run_promtool(dir.path(), &["test", "rules", "test.json"])?;
    if code == 0 {
        bail!("promtool accepted an impossible expectation: {out}");
    }
    let got = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("got:"))
        .with_context(|| format!("promtool printed no result: {out}"))?;
    // `{alertname="A"} 1E+00, {alertname="B"} 1E+00`, or `{} 0E+00` for none.
    Ok(got
        .split(", ")
        .filter_map(|s| s.trim().strip_prefix("{alertname=\""))
        .filter_map(|s| s.split_once('"').map(|(name, _)| name.to_string()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expositions_parse_with_types_escapes_and_infinities() {
        let text = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1,\\\"2\\\"\",y=\"\"} 3\n\
                    # TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2\ng 1e-05\n";
        let (samples, types) = parse_exposition(text).expect("parses");
        assert_eq!(samples.len(), 5);
        assert_eq!(samples[0].labels["x"], "1,\"2\"");
        assert_eq!(samples[0].labels["y"], "");
        assert_eq!(samples[1].value, 2.0);
        assert_eq!(samples[1].labels["le"], "+Inf");
        assert_eq!(samples[4].value, 1e-05);
        assert_eq!(types["h"], "histogram");
        let scrape = Scrape {
            job: "j".into(),
            instance: "i".into(),
            samples: Some(samples),
            types,
        };
        assert!(scrape.is_counter("a_total"));
        assert!(scrape.is_counter("h_bucket"));
        assert!(!scrape.is_counter("g"));
        let before = Scrape {
            samples: Some(vec![Sample {
                name: "a_total".into(),
                labels: [("x", "1,\"2\""), ("y", "")]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
                value: 1.0,
            }]),
            ..scrape.clone()
        };
        let series = Timeline::growing(vec![before], vec![scrape]).input_series();
        assert_eq!(
            series[0],
            json!({"series": "up{instance=\"i\",job=\"j\"}", "values": "1.0+0.0x60"})
        );
        assert_eq!(
            series[1],
            json!({
                "series": "a_total{instance=\"i\",job=\"j\",x=\"1,\\\"2\\\"\",y=\"\"}",
                "values": "3.0+2.0x60"
            })
        );
        assert_eq!(series[5]["values"], "1e-5+0.0x60");
    }
}
