//! The holdfast demo: starts holdfast-sim and the real holdfast-webhook, then shows
//! with the real kubectl what a user sees. Exits non-zero if any outcome differs from
//! what is expected; every process it started is stopped on exit.

use anyhow::bail;
use holdfast_e2e::{Env, KubectlOutput};

struct Demo {
    env: Env,
    step: usize,
    failures: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Succeeds,
    Refused,
}

impl Demo {
    fn say(&mut self, text: &str) {
        self.step += 1;
        println!("\n== {}. {text}", self.step);
    }

    fn run(
        &mut self,
        args: &[&str],
        expect: Expect,
        must_contain: &str,
    ) -> anyhow::Result<KubectlOutput> {
        println!("$ kubectl {}", args.join(" "));
        let out = self.env.kubectl(args)?;
        print!("{}", out.stdout);
        print!("{}", out.stderr);
        let ok = match expect {
            Expect::Succeeds => out.code == 0,
            Expect::Refused => out.code != 0,
        } && (out.stdout.contains(must_contain) || out.stderr.contains(must_contain));
        if ok {
            println!("   -> as expected");
        } else {
            let what = format!(
                "`kubectl {}` (exit {}) did not {} with {must_contain:?}",
                args.join(" "),
                out.code,
                if expect == Expect::Succeeds {
                    "succeed"
                } else {
                    "get refused"
                }
            );
            println!("   -> UNEXPECTED: {what}");
            self.failures.push(what);
        }
        Ok(out)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    println!(
        "holdfast demo: an API-server simulator, the real holdfast-webhook, the real kubectl."
    );
    let mut env = Env::start().await?;
    println!("simulator: {}", env.sim.url());
    env.start_webhook(&["--strict"]).await?;
    env.install_label_webhooks(&[], true)?;
    println!(
        "webhook: holdfast-webhook --strict, installed as ValidatingWebhookConfiguration \"holdfast\""
    );
    let mut demo = Demo {
        env,
        step: 0,
        failures: Vec::new(),
    };

    demo.say("A namespace holding a shop's databases, protected by a label");
    demo.run(
        &["create", "namespace", "shop"],
        Expect::Succeeds,
        "namespace/shop created",
    )?;
    demo.run(
        &[
            "label",
            "namespace",
            "shop",
            "holdfast.dev/protected=Always",
        ],
        Expect::Succeeds,
        "labeled",
    )?;

    demo.say("Someone deletes the wrong namespace: holdfast refuses");
    demo.run(
        &["delete", "namespace", "shop"],
        Expect::Refused,
        "holdfast: Namespace shop is protected by label holdfast.dev/protected=Always",
    )?;

    demo.say("Strict mode: the protection label cannot simply be removed");
    demo.run(
        &["label", "namespace", "shop", "holdfast.dev/protected-"],
        Expect::Refused,
        "strict mode is on",
    )?;

    demo.say("Nor by adding the exemption in the same update");
    demo.run(
        &[
            "label",
            "namespace",
            "shop",
            "holdfast.dev/protected-",
            "holdfast.dev/strict-exempt=true",
        ],
        Expect::Refused,
        "must already be stored",
    )?;

    demo.say("Deliberately unprotect: mark exempt first, then remove the label");
    demo.run(
        &[
            "label",
            "namespace",
            "shop",
            "holdfast.dev/strict-exempt=true",
        ],
        Expect::Succeeds,
        "labeled",
    )?;
    demo.run(
        &["label", "namespace", "shop", "holdfast.dev/protected-"],
        Expect::Succeeds,
        "unlabeled",
    )?;

    demo.say("Now the deletion goes through");
    demo.run(
        &["delete", "namespace", "shop"],
        Expect::Succeeds,
        "namespace \"shop\" deleted",
    )?;

    let failures = std::mem::take(&mut demo.failures);
    drop(demo);
    if failures.is_empty() {
        println!("\ndemo finished: every outcome as expected");
        Ok(())
    } else {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        bail!("{} step(s) did not behave as expected", failures.len())
    }
}
