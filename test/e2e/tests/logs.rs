//! Logs and settings of both binaries, as an operator meets them: the same
//! environment names and boolean syntax for the flags they share, plain lines
//! when stderr is not a terminal, `--log-format json`, and a fatal error as one
//! line with its causes and no backtrace unless asked for.

use std::{
    collections::BTreeMap,
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use holdfast_e2e::{bin, free_port, pki};
use serde_json::Value;

/// `--flag` → environment variable, from a `--help` output.
fn env_names(help: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut flag: Option<String> = None;
    for line in help.lines() {
        let t = line.trim_start();
        // Flags are indented by 2 or 6; "Possible values" lists by 10. An optional
        // value reads `--flag[=<VALUE>]`.
        if t.starts_with('-') && line.len() - t.len() <= 6 {
            flag = t
                .split([' ', ',', '['])
                .find(|w| w.starts_with("--"))
                .map(|w| w.split('=').next().unwrap_or(w).to_string());
        } else if let Some(rest) = t.strip_prefix("[env: ")
            && let Some(f) = flag.take()
        {
            let name = rest.split('=').next().unwrap_or(rest).to_string();
            out.insert(f, name);
        }
    }
    out
}

fn help(binary: &str, args: &[&str]) -> String {
    let out = Command::new(bin(binary).expect("binary"))
        .args(args)
        .arg("--help")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{binary} --help");
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn shared_flags_have_the_same_environment_names() {
    let webhook = env_names(&help("holdfast-webhook", &[]));
    let controller = env_names(&help("holdfast-controller", &["run"]));
    let shared: Vec<&String> = webhook
        .keys()
        .filter(|k| controller.contains_key(*k))
        .collect();
    for flag in [
        "--kubeconfig",
        "--topology",
        "--strict",
        "--protection-label",
        "--probe-listen",
        "--apiexport",
        "--log-format",
    ] {
        assert!(
            shared.iter().any(|s| *s == flag),
            "{flag} is not in both --help outputs: webhook {webhook:?} controller {controller:?}"
        );
    }
    for flag in &shared {
        assert_eq!(webhook[*flag], controller[*flag], "{flag}");
    }
    assert_eq!(webhook["--protection-label"], "HOLDFAST_PROTECTION_LABELS");
    assert_eq!(webhook["--strict"], "HOLDFAST_STRICT");
    for (flag, env) in webhook.iter().chain(controller.iter()) {
        let want = format!(
            "HOLDFAST_{}",
            flag.trim_start_matches("--")
                .replace('-', "_")
                .to_uppercase()
        );
        // One naming rule for both: the flag's name, plural for a list.
        assert!(
            *env == want || *env == format!("{want}S"),
            "{flag} reads {env}"
        );
    }
}

/// A webhook run in label-only mode (no API server needed), stderr piped.
struct Webhook {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    _dir: tempfile::TempDir,
}

impl Webhook {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = pki("logs").expect("pki");
        std::fs::write(dir.path().join("tls.crt"), &p.cert_pem).expect("cert");
        std::fs::write(dir.path().join("tls.key"), &p.key_pem).expect("key");
        let mut cmd = Command::new(bin("holdfast-webhook").expect("binary"));
        for (key, _) in std::env::vars() {
            if key.starts_with("HOLDFAST_") || key == "RUST_LOG" || key.ends_with("_BACKTRACE") {
                cmd.env_remove(key);
            }
        }
        let mut child = cmd
            .arg("--label-only")
            // Port 0: the kernel picks a free port at bind, so no other process can
            // take it in between (these tests read the log, never connect).
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--probe-listen")
            .arg("127.0.0.1:0")
            .arg("--tls-cert")
            .arg(dir.path().join("tls.crt"))
            .arg("--tls-key")
            .arg(dir.path().join("tls.key"))
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Webhook {
            child,
            lines,
            _dir: dir,
        }
    }

    /// Lines up to and including the first one containing `needle`.
    fn wait_for(&self, needle: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return seen;
                }
            }
        }
        panic!("no line with {needle:?} within 30s; seen: {seen:?}");
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn webhook_logs_are_plain_when_piped_and_json_on_request() {
    let w = Webhook::start(&[], &[]);
    let lines = w.wait_for("holdfast-webhook serving");
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "colour escape in {line:?}");
    }
    let serving = lines.last().expect("line");
    assert!(serving.contains(" INFO "), "{serving}");
    assert!(serving.contains("strict=false"), "{serving}");

    let w = Webhook::start(&["--log-format", "json"], &[]);
    let lines = w.wait_for("holdfast-webhook serving");
    for line in &lines {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert!(v["level"].is_string(), "{line}");
    }
    let v: Value = serde_json::from_str(lines.last().expect("line")).expect("json");
    assert_eq!(v["fields"]["message"], "holdfast-webhook serving");
    assert_eq!(v["fields"]["strict"], false);
}

#[test]
fn both_binaries_read_booleans_alike() {
    let cases = [
        ("1", Some(true)),
        ("true", Some(true)),
        ("yes", Some(true)),
        ("on", Some(true)),
        ("0", Some(false)),
        ("false", Some(false)),
        ("no", Some(false)),
        ("off", Some(false)),
        ("maybe", None),
    ];
    for (value, want) in cases {
        // The controller says what it understood before it needs a cluster.
        let mut cmd = Command::new(bin("holdfast-controller").expect("binary"));
        for (key, _) in std::env::vars() {
            if key.starts_with("HOLDFAST_") || key == "RUST_LOG" || key.ends_with("_BACKTRACE") {
                cmd.env_remove(key);
            }
        }
        let out = cmd
            .args([
                "run",
                "--kubeconfig",
                "/nonexistent/holdfast-kubeconfig",
                "--webhook-url",
                "https://127.0.0.1:9/validate",
            ])
            .env("HOLDFAST_STRICT", value)
            .output()
            .expect("controller runs");
        let err = String::from_utf8_lossy(&out.stderr);
        match want {
            Some(strict) => {
                // The kubeconfig is missing: a configuration error, after parsing.
                assert_eq!(out.status.code(), Some(2), "{value}: {err}");
                assert_eq!(
                    err.trim_end(),
                    "holdfast-controller: error: --kubeconfig /nonexistent/holdfast-kubeconfig: no such file",
                    "{value}"
                );
                let w = Webhook::start(&[], &[("HOLDFAST_STRICT", value)]);
                let lines = w.wait_for("holdfast-webhook serving");
                let serving = lines.last().expect("line");
                assert!(
                    serving.contains(&format!("strict={strict}")),
                    "{value}: {serving}"
                );
            }
            None => {
                assert_eq!(out.status.code(), Some(2), "{value}: {err}");
                let webhook = Command::new(bin("holdfast-webhook").expect("binary"))
                    .env_remove("RUST_BACKTRACE")
                    .args(["--tls-cert", "/x", "--tls-key", "/y"])
                    .env("HOLDFAST_STRICT", value)
                    .output()
                    .expect("webhook runs");
                let werr = String::from_utf8_lossy(&webhook.stderr);
                assert_eq!(webhook.status.code(), Some(2), "{value}: {werr}");
                for e in [&*err, &*werr] {
                    assert!(
                        e.contains("invalid value 'maybe' for '--strict'"),
                        "{value}: {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_fatal_error_is_one_line_without_a_backtrace_unless_asked() {
    let webhook = |backtrace: Option<&str>, args: &[&str]| {
        let mut cmd = Command::new(bin("holdfast-webhook").expect("binary"));
        cmd.env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE");
        if let Some(v) = backtrace {
            cmd.env("RUST_BACKTRACE", v);
        }
        cmd.args([
            "--tls-cert",
            "/nonexistent/tls.crt",
            "--tls-key",
            "/nonexistent/tls.key",
        ])
        .args(args)
        .output()
        .expect("webhook runs")
    };
    let out = webhook(None, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "holdfast-webhook: error: loading the serving certificate: cannot read \
         /nonexistent/tls.crt: No such file or directory (os error 2)\n"
    );
    let out = webhook(None, &["--log-format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let v: Value = serde_json::from_str(err.trim_end()).expect("one JSON line");
    assert_eq!(v["level"], "ERROR");
    assert_eq!(v["fields"]["message"], "fatal");
    assert_eq!(
        v["fields"]["error"],
        "loading the serving certificate: cannot read /nonexistent/tls.crt: \
         No such file or directory (os error 2)"
    );
    let out = webhook(Some("1"), &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let mut lines = err.lines();
    assert_eq!(
        lines.next(),
        Some(
            "holdfast-webhook: error: loading the serving certificate: cannot read \
             /nonexistent/tls.crt: No such file or directory (os error 2)"
        )
    );
    assert!(
        lines.any(|l| l.trim_start().starts_with("0: ")),
        "asked for, the backtrace follows: {err}"
    );

    // The controller: a cluster that refuses connections; its cause once.
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port().expect("port");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{port}\"}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
             current-context: c\n"
        ),
    )
    .expect("kubeconfig");
    let out = Command::new(bin("holdfast-controller").expect("binary"))
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("RUST_LOG")
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--webhook-url",
            "https://127.0.0.1:9/validate",
            "--probe-listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("controller runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "the configuration line and the error: {err}"
    );
    assert!(
        lines[0].contains(" INFO ") && lines[0].contains("configuration is valid"),
        "{err}"
    );
    assert!(!err.contains('\u{1b}'), "{err}");
    assert_eq!(
        lines[1],
        "holdfast-controller: error: managing the webhook certificates in Secret \
         holdfast-system/holdfast-webhook-tls (give --ca-secret NAMESPACE/NAME or \
         --ca-bundle-file FILE to choose): ServiceError: client error (Connect): \
         tcp connect error: Connection refused (os error 111)"
    );
}
