//! Helm, as `hack/substrates.sh helm` builds it (the pin is the script's), run with
//! its cache, configuration and data under the temporary directory, never a
//! user's own.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

/// The release name and namespace the tests use, as the README's install does.
pub const RELEASE: &str = "holdfast";
/// The release namespace (the kustomize manifests' namespace).
pub const NAMESPACE: &str = "holdfast-system";

/// The `helm` binary.
pub fn path() -> anyhow::Result<PathBuf> {
    let p = crate::backend::substrate_bin("helm")?.join("helm");
    if !p.is_file() {
        bail!("{} is not built: run hack/substrates.sh helm", p.display());
    }
    Ok(p)
}

/// A `helm` command with `args`, its homes under the temporary directory.
pub fn command(args: &[&str]) -> anyhow::Result<Command> {
    let home = std::env::temp_dir().join("holdfast-e2e-helm");
    let mut cmd = Command::new(path()?);
    cmd.args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    Ok(cmd)
}

/// Runs `helm args` to its end (panics when it cannot start).
pub fn run(args: &[&str]) -> Output {
    command(args)
        .and_then(|mut c| c.output().context("running helm"))
        .unwrap_or_else(|e| panic!("helm {}: {e:#}", args.join(" ")))
}

fn render(chart: &Path, sets: &[&str], hooks: bool) -> Vec<Value> {
    let chart = chart.display().to_string();
    let mut args = vec![
        "template",
        RELEASE,
        chart.as_str(),
        "--namespace",
        NAMESPACE,
    ];
    if !hooks {
        args.push("--no-hooks");
    }
    for s in sets {
        args.extend(["--set", s]);
    }
    let out = run(&args);
    assert!(
        out.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|e| {
            panic!(
                "helm {} renders YAML that does not parse: {e}",
                args.join(" ")
            )
        });
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `helm template` of `chart` with `--set` of each of `sets`, without its hooks,
/// parsed into its documents (the test fails on a failed render).
pub fn template(chart: &Path, sets: &[&str]) -> Vec<Value> {
    render(chart, sets, false)
}

/// [`template`] with the chart's hooks.
pub fn template_with_hooks(chart: &Path, sets: &[&str]) -> Vec<Value> {
    render(chart, sets, true)
}
