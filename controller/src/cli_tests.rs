//! Unit tests of `cli.rs`.

use super::*;

fn cli(a: &[&str]) -> Result<Cli, clap::Error> {
    Cli::parse_args(a)
}

#[test]
fn default_subcommand_is_run() {
    for (given, strict) in [
        (&["p"][..], false),
        (&["p", "--strict"], true),
        (&["p", "--log-format", "json", "--strict"], true),
        (&["p", "--log-format=json"], false),
        (&["p", "run", "--strict"], true),
        (&["p", "--log-format", "json", "run", "--strict"], true),
    ] {
        match cli(given).expect("parses").into_command() {
            Command::Run(r) => assert_eq!(r.protection.strict, strict, "{given:?}"),
            other => panic!("{given:?}: expected run, got {other:?}"),
        }
    }
    let json = cli(&["p", "--log-format", "json", "crds"]).expect("parses");
    assert_eq!(json.log.log_format, LogFormat::Json);
    assert!(matches!(json.into_command(), Command::Crds(_)));
    // The run flags belong to `run`: not beside another subcommand.
    let err = cli(&["p", "--strict", "crds"]).expect_err("run flag before crds");
    assert_eq!(err.kind(), clap::error::ErrorKind::ArgumentConflict);
    for (help, kind) in [
        (&["p", "--help"][..], clap::error::ErrorKind::DisplayHelp),
        (&["p", "-V"], clap::error::ErrorKind::DisplayVersion),
    ] {
        assert_eq!(cli(help).expect_err("help").kind(), kind, "{help:?}");
    }
}

fn parse(a: &[&str]) -> Result<RunArgs, clap::Error> {
    match cli(a)?.into_command() {
        Command::Run(r) => Ok(*r),
        Command::Crds(_)
        | Command::KcpManifests(_)
        | Command::Routes(_)
        | Command::Uninstall(_) => {
            panic!("expected run")
        }
    }
}

/// A directory holding `ca.pem` with `content`.
fn ca_file(content: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, content).expect("write");
    (dir, ca)
}

#[test]
fn routes_subcommand_takes_a_kubeconfig() {
    let cli = cli(&["p", "routes", "--kubeconfig", "/tmp/kc"]).expect("parses");
    match cli.into_command() {
        Command::Routes(r) => assert_eq!(r.kubeconfig, Some(PathBuf::from("/tmp/kc"))),
        other => panic!("expected routes, got {other:?}"),
    }
}

#[test]
fn clap_definition_is_consistent() {
    use clap::CommandFactory as _;
    Cli::command().debug_assert();
}

#[test]
fn defaults() {
    let cfg = parse(&["p", "--webhook-service", "holdfast-system/holdfast-webhook"])
        .expect("parses")
        .into_config()
        .expect("valid");
    assert_eq!(cfg.topology, Topology::Kubernetes);
    assert_eq!(cfg.failure_policy, FailurePolicy::Fail);
    assert_eq!(cfg.timeout_seconds, 10);
    assert_eq!(cfg.api_export, "holdfast.dev");
    assert_eq!(cfg.tenancy_workspace.as_deref(), Some("root"));
    assert_eq!(cfg.probe_listen.to_string(), "0.0.0.0:8081");
    assert_eq!(cfg.ca, CaSource::Managed);
    assert!(!cfg.strict && !cfg.leader_elect && !cfg.cleanup_on_shutdown);
    assert_eq!(
        cfg.webhook,
        WebhookEndpoint::Service(ServiceRef {
            namespace: "holdfast-system".into(),
            name: "holdfast-webhook".into(),
            port: 443
        })
    );
    let keys: Vec<_> = cfg
        .protection_labels
        .iter()
        .map(|l| l.key.clone())
        .collect();
    assert_eq!(keys, vec!["holdfast.dev/protected".to_string()]);
}

#[test]
fn backstop_is_on_by_default_and_takes_a_boolean() {
    let svc = ["--webhook-service", "holdfast-system/holdfast-webhook"];
    let with = |extra: &[&str]| {
        let mut a = vec!["p"];
        a.extend_from_slice(&svc);
        a.extend_from_slice(extra);
        parse(&a).map(|r| r.backstop)
    };
    assert!(with(&[]).expect("parses"));
    assert!(with(&["--backstop"]).expect("parses"));
    assert!(with(&["--backstop=true"]).expect("parses"));
    assert!(!with(&["--backstop=false"]).expect("parses"));
    assert!(!with(&["--backstop=no"]).expect("parses"));
    assert!(with(&["--backstop=maybe"]).is_err());
    let cfg = parse(&[
        "p",
        "--webhook-service",
        "holdfast-system/holdfast-webhook",
        "--backstop=false",
    ])
    .expect("parses")
    .into_config()
    .expect("valid");
    assert!(!cfg.backstop);
}

#[test]
fn all_flags() {
    let (dir, ca) = ca_file("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "apiVersion: v1\n").expect("write");
    let cfg = parse(&[
        "p",
        "run",
        "--kubeconfig",
        kubeconfig.to_str().expect("utf8"),
        "--topology",
        "kcp",
        "--webhook-url",
        "https://holdfast.example.com:8443",
        "--ca-bundle-file",
        ca.to_str().expect("utf8"),
        "--failure-policy",
        "Ignore",
        "--timeout-seconds",
        "30",
        "--cleanup-on-shutdown",
        "--strict",
        "--protection-label",
        "resourcetemplate.karmada.io/deletion-protected=Always",
        "--protection-label",
        "orkestra.io/deletion-protection=true",
        "--leader-elect",
        "--apiexport",
        "holdfast.example.dev",
        "--kcp-tenancy-workspace",
        "root:platform",
        "--virtual-workspace-kubeconfig",
        kubeconfig.to_str().expect("utf8"),
        "--probe-listen",
        "127.0.0.1:9000",
    ])
    .expect("parses")
    .into_config()
    .expect("valid");
    assert_eq!(cfg.topology, Topology::Kcp);
    assert_eq!(
        cfg.webhook,
        WebhookEndpoint::Url(
            Url::parse("https://holdfast.example.com:8443/validate").expect("url")
        )
    );
    assert_eq!(cfg.ca, CaSource::BundleFile(ca));
    assert_eq!(cfg.failure_policy, FailurePolicy::Ignore);
    assert_eq!(cfg.timeout_seconds, 30);
    assert!(cfg.strict && cfg.leader_elect && cfg.cleanup_on_shutdown);
    assert_eq!(cfg.api_export, "holdfast.example.dev");
    assert_eq!(cfg.tenancy_workspace.as_deref(), Some("root:platform"));
    assert_eq!(cfg.virtual_workspace_kubeconfig, Some(kubeconfig.clone()));
    let labels: Vec<_> = cfg
        .protection_labels
        .iter()
        .map(|l| l.to_string())
        .collect();
    assert_eq!(
        labels,
        vec![
            "holdfast.dev/protected=Always,true,Cascading",
            "resourcetemplate.karmada.io/deletion-protected=Always",
            "orkestra.io/deletion-protection=true"
        ]
    );
}

#[test]
fn clap_rejects_bad_values() {
    for bad in [
        &["p", "--webhook-service", "ns/svc", "--timeout-seconds", "0"][..],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--timeout-seconds",
            "31",
        ],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--timeout-seconds",
            "ten",
        ],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--failure-policy",
            "Maybe",
        ],
        &["p", "--webhook-service", "ns/svc", "--topology", "mesos"],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--kcp-tenancy-workspace",
            "Root",
        ],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--kcp-tenancy-workspace",
            "root::org",
        ],
        &["p", "--webhook-service", "nsvc"],
        &["p", "--webhook-service", "ns/svc:0"],
        &["p", "--webhook-service", "ns/svc:99999"],
        &["p", "--webhook-service", "NS/svc"],
        &["p", "--webhook-url", "http://insecure.example.com"],
        &["p", "--webhook-url", "https://x.example.com/v?x=1"],
        &["p", "--webhook-url", "not a url"],
        &[
            "p",
            "--webhook-url",
            "https://a",
            "--webhook-service",
            "ns/svc",
        ],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--ca-bundle-file",
            "f",
            "--ca-secret",
            "ns/s",
        ],
        &["p", "--webhook-service", "ns/svc", "--ca-secret", "nons"],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--protection-label",
            "Bad Key",
        ],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--protection-label",
            "a.io/k=",
        ],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--apiexport",
            "Not_Valid",
        ],
        &[
            "p",
            "--webhook-service",
            "ns/svc",
            "--probe-listen",
            "nowhere",
        ],
        &["p", "--webhook-service", "ns/svc", "--no-such-flag"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?} should be rejected");
    }
}

#[test]
fn config_rejects_bad_combinations() {
    for (bad, want) in [
        (&["p"][..], "one of --webhook-url"),
        (
            &["p", "--topology", "kcp", "--webhook-service", "ns/svc"],
            "kcp needs --webhook-url",
        ),
        (
            &[
                "p",
                "--webhook-service",
                "ns/svc",
                "--kubeconfig",
                "/nonexistent/kubeconfig",
            ],
            "no such file",
        ),
        (
            &[
                "p",
                "--webhook-service",
                "ns/svc",
                "--ca-bundle-file",
                "/nonexistent/ca.pem",
            ],
            "--ca-bundle-file",
        ),
        (
            &[
                "p",
                "--webhook-service",
                "ns/svc",
                "--protection-label",
                "a.io/k=x",
                "--protection-label",
                "a.io/k=y",
            ],
            "more than once",
        ),
    ] {
        let err = parse(bad)
            .expect("clap accepts")
            .into_config()
            .expect_err("config rejects");
        assert!(err.to_string().contains(want), "{bad:?}: {err}");
    }
}

#[test]
fn ca_bundle_without_certificate_is_rejected() {
    let (_dir, ca) = ca_file("not a certificate");
    let err = parse(&[
        "p",
        "--webhook-service",
        "ns/svc",
        "--ca-bundle-file",
        ca.to_str().expect("utf8"),
    ])
    .expect("clap accepts")
    .into_config()
    .expect_err("rejected");
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
}

#[test]
fn uninstall_takes_its_namespace_and_wait() {
    let Command::Uninstall(u) = cli(&["p", "uninstall", "--namespace=guard", "--wait-seconds=7"])
        .expect("parses")
        .into_command()
    else {
        panic!("expected uninstall")
    };
    assert_eq!((u.namespace.as_str(), u.wait_seconds), ("guard", 7));
    // A run flag is not one of uninstall's.
    assert!(cli(&["p", "--strict", "uninstall"]).is_err());
    assert!(cli(&["p", "uninstall", "--wait-seconds=0"]).is_err());
}
