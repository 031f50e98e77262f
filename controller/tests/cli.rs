//! The built `holdfast-controller` binary: `crds` output and flag handling.

use std::process::{Command, Output};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn controller(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdfast-controller"));
    cmd.args(args);
    // A developer's environment must not leak into the tests.
    for (key, _) in std::env::vars() {
        if key.starts_with("HOLDFAST_") {
            cmd.env_remove(key);
        }
    }
    cmd.env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("runs holdfast-controller")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn crds_prints_four_crds_as_yaml() {
    let out = controller(&["crds"], &[]);
    assert!(out.status.success(), "crds failed: {}", stderr(&out));
    let yaml = String::from_utf8(out.stdout).expect("utf-8");
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&yaml).expect("output parses as CRDs");
    assert_eq!(crds.len(), 4);
    let kinds: Vec<_> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ResourceProtection",
            "AnchorRule",
            "DependencyRule",
            "CriticalService"
        ]
    );
    assert!(
        crds.iter()
            .all(|c| c.spec.group == "holdfast.dev" && c.spec.scope == "Cluster")
    );
    assert_eq!(crds, holdfast_shared::api::crds());
}

#[test]
fn crds_ignores_run_environment() {
    let out = controller(&["crds"], &[("HOLDFAST_TIMEOUT_SECONDS", "99")]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn crds_output_dir_writes_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("crds");
    let out = controller(&["crds", "--output-dir", path.to_str().expect("utf8")], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(path.join("holdfast.dev_dependencyrules.yaml").is_file());
    assert!(path.join("kustomization.yaml").is_file());
}

#[test]
fn help_and_version_succeed() {
    for (args, expected) in [
        (&["--help"][..], "Usage: holdfast-controller"),
        (
            &["--version"],
            concat!("holdfast-controller ", env!("CARGO_PKG_VERSION")),
        ),
        (&["run", "--help"], "Usage: holdfast-controller run"),
        (&["crds", "--help"], "Usage: holdfast-controller crds"),
    ] {
        let out = controller(args, &[]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(expected),
            "{args:?} prints {expected:?}: {stdout}"
        );
    }
    let help = String::from_utf8(controller(&["run", "--help"], &[]).stdout).expect("utf8");
    for flag in [
        "--kubeconfig",
        "--topology",
        "--webhook-url",
        "--webhook-service",
        "--ca-bundle-file",
        "--ca-secret",
        "--failure-policy",
        "--timeout-seconds",
        "--cleanup-on-shutdown",
        "--strict",
        "--protection-label",
        "--leader-elect",
        "--apiexport",
        "--probe-listen",
        "HOLDFAST_WEBHOOK_SERVICE",
        "HOLDFAST_TIMEOUT_SECONDS",
    ] {
        assert!(help.contains(flag), "run --help lacks {flag}");
    }
}

#[test]
fn valid_run_validates_logs_and_fails_without_a_cluster() {
    for (args, env) in [
        (
            &[
                "run",
                "--webhook-service",
                "holdfast-system/holdfast-webhook:443",
                "--strict",
            ][..],
            &[][..],
        ),
        // `run` is the default subcommand.
        (
            &["--webhook-service", "holdfast-system/holdfast-webhook"],
            &[],
        ),
        // Environment equivalents.
        (
            &[],
            &[
                ("HOLDFAST_WEBHOOK_URL", "https://holdfast.example.com"),
                ("HOLDFAST_TOPOLOGY", "kcp"),
                ("HOLDFAST_STRICT", "true"),
                (
                    "HOLDFAST_PROTECTION_LABELS",
                    "resourcetemplate.karmada.io/deletion-protected=Always;orkestra.io/deletion-protection=true",
                ),
            ],
        ),
    ] {
        let mut env = env.to_vec();
        env.push(("KUBECONFIG", "/nonexistent/holdfast-test-kubeconfig"));
        let out = controller(args, &env);
        let err = stderr(&out);
        // A valid configuration, but no cluster to talk to: a runtime failure (1), not a usage error (2).
        assert_eq!(out.status.code(), Some(1), "{args:?} {env:?}: {err}");
        assert!(err.contains("configuration is valid"), "{err}");
        assert!(err.contains("kubeconfig"), "{err}");
        assert!(out.stdout.is_empty(), "run prints nothing on stdout");
    }
    let out = controller(
        &[],
        &[
            ("HOLDFAST_WEBHOOK_URL", "https://holdfast.example.com"),
            (
                "HOLDFAST_PROTECTION_LABELS",
                "resourcetemplate.karmada.io/deletion-protected=Always",
            ),
            ("KUBECONFIG", "/nonexistent/holdfast-test-kubeconfig"),
        ],
    );
    let err = stderr(&out);
    assert!(
        err.contains("https://holdfast.example.com/validate"),
        "{err}"
    );
    assert!(
        err.contains("resourcetemplate.karmada.io/deletion-protected=Always"),
        "{err}"
    );
}

/// Arguments, environment, expected part of stderr.
type Case = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[test]
fn bad_flags_fail_with_a_clear_message() {
    let cases: &[Case] = &[
        (&["run"], &[], "one of --webhook-url"),
        (
            &[
                "run",
                "--webhook-service",
                "ns/svc",
                "--timeout-seconds",
                "31",
            ],
            &[],
            "31 is not in 1..=30",
        ),
        (
            &["run", "--webhook-service", "ns-only"],
            &[],
            "NAMESPACE/NAME:PORT",
        ),
        (&["run", "--webhook-url", "http://x"], &[], "https"),
        (
            &[
                "run",
                "--webhook-url",
                "https://x",
                "--webhook-service",
                "ns/svc",
            ],
            &[],
            "cannot be used with",
        ),
        (
            &[
                "run",
                "--webhook-service",
                "ns/svc",
                "--failure-policy",
                "Sometimes",
            ],
            &[],
            "Sometimes",
        ),
        (
            &["run", "--topology", "kcp", "--webhook-service", "ns/svc"],
            &[],
            "--webhook-url",
        ),
        (
            &[
                "run",
                "--webhook-service",
                "ns/svc",
                "--ca-bundle-file",
                "/nonexistent/ca.pem",
            ],
            &[],
            "--ca-bundle-file",
        ),
        (
            &[
                "run",
                "--webhook-service",
                "ns/svc",
                "--protection-label",
                "not a key",
            ],
            &[],
            "invalid label key",
        ),
        (&["run", "--bogus"], &[], "--bogus"),
        (&["bogus"], &[], "bogus"),
        (
            &["run", "--webhook-service", "ns/svc"],
            &[("HOLDFAST_TIMEOUT_SECONDS", "0")],
            "0 is not in 1..=30",
        ),
        (
            &["run"],
            &[
                ("HOLDFAST_WEBHOOK_URL", "https://a"),
                ("HOLDFAST_WEBHOOK_SERVICE", "ns/svc"),
            ],
            "cannot be used with",
        ),
    ];
    for (args, env, want) in cases {
        let out = controller(args, env);
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?} {env:?}: exit code, stderr: {err}"
        );
        assert!(
            err.contains(want),
            "{args:?} {env:?}: stderr lacks {want:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
