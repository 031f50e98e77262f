//! Label protection end to end: the real holdfast-webhook behind holdfast-sim, driven
//! by the real kubectl. Covers the Karmada test plan (no protection → allowed;
//! protection → denied, also with --force --grace-period=0 and --dry-run=server;
//! protection removed → allowed), Karmada- and Orkestra-style keys, and strict mode.
//!
//! Runs on the cluster of `HOLDFAST_E2E_KUBECONFIG` when set (namespaces of its
//! own, webhook configurations selecting only them, removed afterwards).

use holdfast_e2e::{Env, denied_by, denied_by_any, steps::words};

async fn env(webhook_args: &[&str], extra_labels: &[&str], strict: bool) -> Env {
    let mut env = Env::start().await.expect("sim starts");
    env.start_webhook(webhook_args)
        .await
        .expect("webhook starts");
    env.install_label_webhooks(extra_labels, strict)
        .expect("webhook configuration applied");
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn karmada_test_plan_for_labels() {
    let env = env(&[], &[], false).await;
    let minio = env.namespace("minio").expect("namespace");
    let minio = minio.as_str();
    env.run(&[
        "create",
        "configmap",
        "cfg",
        "-n",
        minio,
        "--from-literal=a=b",
    ]);

    // 1. No protection: deletion allowed.
    let out = env.attempt(&["delete", "configmap", "cfg", "-n", minio]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "configmap \"cfg\" deleted\n");

    // 2. With protection: denied, byte for byte as kubectl prints a webhook denial.
    // A namespace DELETE matches the label webhook and the containment webhook; both
    // refuse, and the API server returns whichever refusal reaches it first.
    env.run(&["label", "namespace", minio, "holdfast.dev/protected=Always"]);
    let out = env.attempt(&["delete", "namespace", minio]);
    assert_eq!(out.code, 1, "{out:?}");
    let message = format!(
        "holdfast: Namespace {minio} is protected by label holdfast.dev/protected=Always (policy: label holdfast.dev/protected), \
so it cannot be deleted. To delete it, remove the label (kubectl label namespaces {minio} holdfast.dev/protected-), \
or set the annotation holdfast.dev/skip-protection=true if you are allowed to bypass protection."
    );
    let expected: Vec<String> = denied_by_any(
        &["delete-label-0.holdfast.dev", "containment.holdfast.dev"],
        &message,
    )
    .into_iter()
    .map(|d| format!("Error from server (Forbidden): {d}\n"))
    .collect();
    assert!(expected.contains(&out.stderr), "{out:?}");

    // Force and server-side dry run are denied too.
    let out = env.attempt(&["delete", "namespace", minio, "--force", "--grace-period=0"]);
    // (kubectl warns about --force first, then prints the same denial.)
    assert!(out.refused_with_one_of(&expected), "{out:?}");
    let out = env.attempt(&["delete", "namespace", minio, "--dry-run=server"]);
    assert!(out.refused_with_one_of(&expected), "{out:?}");
    // Still there, not terminating.
    let out = env.attempt(&["get", "namespace", minio, "-o", "jsonpath={.status.phase}"]);
    assert_eq!(out.stdout, "Active");

    // 3. Protection removed: deletion allowed.
    env.run(&["label", "namespace", minio, "holdfast.dev/protected-"]);
    let out = env.attempt(&["delete", "namespace", minio, "--wait=false"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        env.webhook_log().contains(&format!(
            "denied: holdfast: Namespace {minio} is protected by label"
        )),
        "webhook logged its denials: {}",
        env.webhook_log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn karmada_and_orkestra_keys() {
    let labels = words(
        "resourcetemplate.karmada.io/deletion-protected=Always orkestra.io/deletion-protection=true",
    );
    let args = [
        "--protection-label",
        labels[0],
        "--protection-label",
        labels[1],
    ];
    let env = env(&args, &labels, false).await;
    let ns = env.default_namespace().expect("namespace");
    for name in ["k-always", "k-true", "o-true", "o-false"] {
        env.run(&["create", "configmap", name, "--from-literal=a=b"]);
    }
    for (name, label) in [
        (
            "k-always",
            "resourcetemplate.karmada.io/deletion-protected=Always",
        ),
        (
            "k-true",
            "resourcetemplate.karmada.io/deletion-protected=true",
        ),
        ("o-true", "orkestra.io/deletion-protection=true"),
        ("o-false", "orkestra.io/deletion-protection=false"),
    ] {
        env.run(&["label", "configmap", name, label]);
    }
    // Karmada: only Always protects.
    let out = env.attempt(&["delete", "configmap", "k-always"]);
    assert!(out.refused_with(&denied_by("delete-label-1.holdfast.dev", &format!("holdfast: ConfigMap {ns}/k-always is protected by label resourcetemplate.karmada.io/deletion-protected=Always (policy: label resourcetemplate.karmada.io/deletion-protected)"))), "{out:?}");
    let out = env.attempt(&["delete", "configmap", "k-true"]);
    assert_eq!(out.code, 0, "{out:?}");
    // Orkestra: true protects, false does not.
    let out = env.attempt(&["delete", "configmap", "o-true"]);
    assert!(
        out.refused_with(&denied_by(
            "delete-label-2.holdfast.dev",
            &format!(
                "holdfast: ConfigMap {ns}/o-true is protected by label \
                 orkestra.io/deletion-protection=true (policy: label orkestra.io/deletion-protection)"
            )
        )),
        "{out:?}"
    );
    let out = env.attempt(&["delete", "configmap", "o-false"]);
    assert_eq!(out.code, 0, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strict_mode_end_to_end() {
    let env = env(&["--strict"], &[], true).await;
    let ns = env.default_namespace().expect("namespace");
    env.run(&["create", "configmap", "db", "--from-literal=a=b"]);
    env.run(&["label", "configmap", "db", "holdfast.dev/protected=true"]);
    // Unrelated label changes pass, and the matchCondition keeps them away from the
    // webhook: it answers no UPDATE review for them.
    let before = env.webhook_reviews("UPDATE").await.expect("metrics");
    env.run(&["label", "configmap", "db", "team=shop"]);
    env.run(&["annotate", "configmap", "db", "note=x"]);
    assert_eq!(
        env.webhook_reviews("UPDATE").await.expect("metrics"),
        before,
        "an unrelated change reached the webhook"
    );
    // Removing or downgrading the protection label is refused (and is reviewed).
    let out = env.attempt(&["label", "configmap", "db", "holdfast.dev/protected-"]);
    assert!(
        out.refused_with(&format!(
            "admission webhook \"strict-label-0.holdfast.dev\" denied the request: holdfast: \
             ConfigMap {ns}/db carries the protection label holdfast.dev/protected=true and \
             strict mode is on"
        )),
        "{out:?}"
    );
    assert_eq!(
        env.webhook_reviews("UPDATE").await.expect("metrics"),
        before + 1,
        "the removal was reviewed"
    );
    let out = env.attempt(&words(
        "label --overwrite configmap db holdfast.dev/protected=no",
    ));
    assert!(
        out.refused_with(&format!(
            "holdfast: ConfigMap {ns}/db carries the protection label holdfast.dev/protected=true \
             and strict mode is on"
        )),
        "{out:?}"
    );
    // One update adding the exemption and removing the label: refused.
    let out = env.attempt(&words(
        "label configmap db holdfast.dev/protected- holdfast.dev/strict-exempt=true",
    ));
    assert!(out.refused_with("must already be stored"), "{out:?}");
    // Changing between two protecting values is allowed.
    env.run(&words(
        "label --overwrite configmap db holdfast.dev/protected=Always",
    ));
    // Exemption first, then removal, then delete.
    env.run(&words("label configmap db holdfast.dev/strict-exempt=true"));
    env.run(&["label", "configmap", "db", "holdfast.dev/protected-"]);
    env.prints(&["delete", "configmap", "db"], "configmap \"db\" deleted\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn skip_annotation_allows_exactly_that_object() {
    let env = env(&[], &[], false).await;
    let ns = env.default_namespace().expect("namespace");
    for name in ["a", "b"] {
        env.run(&["create", "configmap", name, "--from-literal=a=b"]);
        env.run(&["label", "configmap", name, "holdfast.dev/protected=Always"]);
    }
    env.run(&words(
        "annotate configmap a holdfast.dev/skip-protection=true",
    ));
    assert_eq!(env.attempt(&["delete", "configmap", "a"]).code, 0);
    let out = env.attempt(&["delete", "configmap", "b"]);
    assert!(
        out.refused_with(&denied_by(
            "delete-label-0.holdfast.dev",
            &format!(
                "holdfast: ConfigMap {ns}/b is protected by label holdfast.dev/protected=Always"
            )
        )),
        "{out:?}"
    );
    assert!(
        !env.exists(&["configmap", "a"]).expect("kubectl"),
        "a is gone"
    );
    // A break-glass time in the past does not count, and the refusal says so; one in
    // the future does.
    env.run(&words(
        "annotate configmap b holdfast.dev/skip-protection=2020-01-01T00:00:00Z",
    ));
    // The DELETE of b is refused, and the refusal says why the break-glass
    // annotation does not count.
    let b_refused = |why: &str| {
        let out = env.attempt(&["delete", "configmap", "b"]);
        let text = format!("so it cannot be deleted (break-glass {why})");
        assert!(out.refused_with(&text), "{out:?}");
    };
    b_refused("holdfast.dev/skip-protection=2020-01-01T00:00:00Z has expired");
    // Further ahead than --max-break-glass (24h): ignored, and the refusal says so.
    env.run(&words(
        "annotate --overwrite configmap b holdfast.dev/skip-protection=2999-01-01T00:00:00Z",
    ));
    b_refused(
        "holdfast.dev/skip-protection=2999-01-01T00:00:00Z is ignored: it lies more than 24h \
         ahead, the longest break-glass window this installation allows",
    );
    // Within the window: it counts.
    let soon = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let soon = httpdate_rfc3339(soon);
    env.run(&[
        "annotate",
        "--overwrite",
        "configmap",
        "b",
        &format!("holdfast.dev/skip-protection={soon}"),
    ]);
    let out = env.attempt(&["delete", "configmap", "b"]);
    assert_eq!(
        out.code, 0,
        "a break-glass time in the future counts: {out:?}"
    );
}

/// `t` as an RFC 3339 UTC time (`YYYY-MM-DDTHH:MM:SSZ`), computed by hand so the test
/// does not share the webhook's time library.
fn httpdate_rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
