//! Runs the real kubectl the way a user does and tells whether each outcome is the
//! expected one: the command line, what kubectl printed (stdout and stderr merged in
//! the order kubectl wrote them, as on a terminal), then the verdict.

use anyhow::{Context, bail};
use holdfast_e2e::{Env, KUBECTL_TIMEOUT, KubectlOutput, kubectl_path};
use std::{
    io::{Read, Write},
    process::{Command, Stdio},
};

/// What a step must do.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// kubectl exits 0.
    Succeeds,
    /// kubectl exits 0 and prints no warning.
    SucceedsSilently,
    /// kubectl exits non-zero (the API server refused).
    Refused,
}

/// What one kubectl run printed, stdout and stderr interleaved.
pub struct Printed {
    /// Exit code.
    pub code: i32,
    /// Everything kubectl wrote, in order.
    pub text: String,
}

/// The step counter and the outcomes that were not as expected.
#[derive(Default)]
pub struct Demo {
    step: usize,
    story: usize,
    failures: Vec<String>,
}

/// How long a story waits for holdfast to pick a change up. Seconds when the
/// machine is quiet; a real kube-apiserver on a busy machine (the end of the full
/// test run on two cores) once took more than 15 s to route a new
/// ResourceProtection, so the bound is wide: a passing wait returns at once.
const SETTLE_SECS: u64 = 60;

impl Demo {
    /// A story header: what it shows and which seed behaviour it is.
    pub fn story(&mut self, title: &str, seed: &str) {
        self.story += 1;
        println!("\n\n######## Story {}: {title}", self.story);
        println!("######## {seed}");
    }

    /// A numbered step.
    pub fn say(&mut self, text: &str) {
        self.step += 1;
        println!("\n== {}. {text}", self.step);
    }

    /// An aside (what happens behind the scenes).
    pub fn note(&self, text: &str) {
        println!("   ({text})");
    }

    /// Runs `kubectl args` against `env`, prints it, and checks the outcome.
    pub fn run(
        &mut self,
        env: &Env,
        args: &[&str],
        expect: Expect,
        must_contain: &[&str],
    ) -> anyhow::Result<Printed> {
        println!("$ kubectl {}", shell_words(args));
        let out = kubectl_merged(env, args, None)?;
        self.verdict(
            &format!("kubectl {}", args.join(" ")),
            &out,
            expect,
            must_contain,
        );
        Ok(out)
    }

    /// `kubectl apply -f -` of `manifest`, shown as a here-document.
    pub fn apply(
        &mut self,
        env: &Env,
        server: Option<&str>,
        manifest: &str,
        must_contain: &[&str],
    ) -> anyhow::Result<Printed> {
        let mut args = Vec::new();
        if let Some(s) = server {
            args.extend(["--server", s]);
        }
        args.extend(["apply", "-f", "-"]);
        println!("$ kubectl {} <<EOF", shell_words(&args));
        print!("{}", manifest.trim_start_matches('\n'));
        if !manifest.ends_with('\n') {
            println!();
        }
        println!("EOF");
        let out = kubectl_merged(env, &args, Some(manifest))?;
        self.verdict(
            &format!("kubectl {}", args.join(" ")),
            &out,
            Expect::Succeeds,
            must_contain,
        );
        Ok(out)
    }

    /// Records a check that is not a kubectl run.
    pub fn check(&mut self, ok: bool, what: &str) {
        if ok {
            println!("   -> as expected");
        } else {
            println!("   -> UNEXPECTED: {what}");
            self.failures.push(what.to_string());
        }
    }

    /// [`Demo::run`] of `line` (kubectl's arguments, split at white space), which
    /// must succeed and print `expected`.
    pub fn succeeds(&mut self, env: &Env, line: &str, expected: &str) -> anyhow::Result<Printed> {
        let args = holdfast_e2e::steps::words(line);
        self.run(env, &args, Expect::Succeeds, &[expected])
    }

    /// [`Demo::run`] of `line` (kubectl's arguments, split at white space), which
    /// the API server must refuse, printing `expected`.
    pub fn refused(&mut self, env: &Env, line: &str, expected: &str) -> anyhow::Result<Printed> {
        let args = holdfast_e2e::steps::words(line);
        self.run(env, &args, Expect::Refused, &[expected])
    }

    /// Waits (silently, at most [`SETTLE_SECS`]) until the server-side dry run of
    /// `line` (kubectl's arguments, split at white space) is refused.
    pub async fn settle_refused(&mut self, env: &Env, line: &str) {
        let args = dry_run(line);
        self.settle(env, &args, SETTLE_SECS, |o| o.code != 0).await;
    }

    /// [`Demo::refused`] of `line`, once its server-side dry run is refused
    /// ([`Demo::settle_refused`]).
    pub async fn settled_refusal(
        &mut self,
        env: &Env,
        line: &str,
        expected: &str,
    ) -> anyhow::Result<Printed> {
        self.settle_refused(env, line).await;
        self.refused(env, line, expected)
    }

    /// Waits (silently, at most [`SETTLE_SECS`]) until the server-side dry run of
    /// `line` is allowed.
    pub async fn settle_allowed(&mut self, env: &Env, line: &str) {
        let args = dry_run(line);
        self.settle(env, &args, SETTLE_SECS, |o| o.code == 0).await;
    }

    /// Waits (silently, at most `secs`) until `kubectl args` gives what `check` wants:
    /// the controller and the webhook pick changes up from watches, a moment later.
    pub async fn settle(
        &mut self,
        env: &Env,
        args: &[&str],
        secs: u64,
        check: impl Fn(&KubectlOutput) -> bool,
    ) {
        if let Err(e) = env.kubectl_until(args, secs, check).await {
            let what = format!("waited in vain: {e:#}");
            println!("   -> UNEXPECTED: {what}");
            self.failures.push(what);
        }
    }

    /// The outcomes that were not as expected.
    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    fn verdict(&mut self, command: &str, out: &Printed, expect: Expect, must_contain: &[&str]) {
        print!("{}", out.text);
        if !out.text.is_empty() && !out.text.ends_with('\n') {
            println!();
        }
        let exit_ok = match expect {
            Expect::Succeeds => out.code == 0,
            Expect::SucceedsSilently => out.code == 0 && !out.text.contains("Warning"),
            Expect::Refused => out.code != 0,
        };
        let missing: Vec<&str> = must_contain
            .iter()
            .copied()
            .filter(|m| !out.text.contains(m))
            .collect();
        if exit_ok && missing.is_empty() {
            println!("   -> as expected");
        } else {
            let wanted = match expect {
                Expect::Succeeds => "succeed",
                Expect::SucceedsSilently => "succeed without a warning",
                Expect::Refused => "get refused",
            };
            let what = format!(
                "`{command}` (exit {}) did not {wanted}{}",
                out.code,
                if missing.is_empty() {
                    String::new()
                } else {
                    format!(" with {missing:?}")
                }
            );
            println!("   -> UNEXPECTED: {what}");
            self.failures.push(what);
        }
    }
}

/// `args` as a user would type them in a shell (quoted where needed).
fn shell_words(args: &[&str]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
            if plain {
                (*a).to_string()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the real kubectl with the env's admin kubeconfig, its stdout and stderr
/// going to one pipe (as `2>&1` would), so that the order is the one a user sees.
pub fn kubectl_merged(env: &Env, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Printed> {
    let (mut reader, writer) = std::io::pipe().context("creating a pipe")?;
    let mut child = {
        let mut cmd = Command::new(kubectl_path()?);
        cmd.env("KUBECONFIG", &env.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(writer.try_clone().context("duplicating a pipe")?)
            .stderr(writer);
        // `cmd` (and with it our copy of the pipe's write end) is dropped at the end
        // of this block, so the reader sees end-of-file when kubectl exits.
        cmd.spawn().context("running kubectl")?
    };
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .context("writing kubectl's stdin")?;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let res = reader.read_to_end(&mut buf).map(|_| buf);
        let _ = tx.send(res);
    });
    match rx.recv_timeout(KUBECTL_TIMEOUT) {
        Ok(buf) => {
            let text =
                String::from_utf8_lossy(&buf.context("reading kubectl's output")?).into_owned();
            let status = child.wait().context("waiting for kubectl")?;
            Ok(Printed {
                code: status.code().unwrap_or(-1),
                text,
            })
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "kubectl {} did not finish within {KUBECTL_TIMEOUT:?}",
                args.join(" ")
            )
        }
    }
}

/// kubectl's arguments for the server-side dry run of `line`.
fn dry_run(line: &str) -> Vec<&str> {
    let mut args = holdfast_e2e::steps::words(line);
    args.push("--dry-run=server");
    args
}
