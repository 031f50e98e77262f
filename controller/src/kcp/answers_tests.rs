use super::*;
use futures::FutureExt as _;

/// An export found in `lc` exporting `resources` (of group `p.test`), or not found.
fn found(lc: &str, resources: Option<&[&str]>) -> ExportLookup {
    match resources {
        Some(rs) => ExportLookup {
            lc: Some(lc.to_string()),
            export: Ok(Arc::new(holdfast_shared::kcp::ExportInfo {
                identity_hash: String::new(),
                resources: rs
                    .iter()
                    .map(|r| GroupResource::new("p.test", *r))
                    .collect(),
                shared: None,
            })),
        },
        None => ExportLookup::failed(
            Some(lc.to_string()),
            reasons::API_EXPORT_NOT_FOUND,
            "gone".into(),
        ),
    }
}

fn ok(f: ExportLookup) -> Read {
    Read {
        found: f,
        failed: false,
    }
}

/// Answers with no kcp behind them (the tests read through their own `read`).
fn answers(wake_pass: &Arc<Notify>) -> ExportAnswers {
    let config = kube::Config::new(
        "https://127.0.0.1:1/clusters/root"
            .parse()
            .expect("a valid URL"),
    );
    let clients = Clients::new(config, 4);
    ExportAnswers::new(&clients, Duration::from_secs(30), wake_pass.clone())
}

/// Whether the pass was woken (a permit stored), taking the permit.
fn woken(n: &Notify) -> bool {
    n.notified().now_or_never().is_some()
}

/// A kept evaluation of rule `key` that used `used`.
fn cached(used: Vec<Arc<ExportLookup>>) -> CachedEval {
    let mut o = DynamicObject::new("r", &ApiResource::erase::<DependencyRule>(&()));
    o.data = serde_json::json!({"spec": {}});
    CachedEval {
        parsed: Arc::new(Parsed::of(&Arc::new(Stored::of(o)))),
        used,
        eval: Arc::new(RuleEval {
            cluster: "c".into(),
            key: "c/r".into(),
            invalid: None,
            workspaces: Vec::new(),
            targets: RuleTargets::default(),
            edges: None,
        }),
    }
}

#[tokio::test]
async fn a_changed_answer_wakes_the_pass_and_reaches_only_its_readers() {
    let wake = Arc::new(Notify::new());
    let a = answers(&wake);
    let now = std::time::Instant::now();
    let period = Duration::from_secs(30);
    // Two answers, as a pass reads them first.
    let (pa, pb) = {
        let mut t = a.table.lock();
        let pa = t.first(
            Where::Path,
            "root:a",
            "ea",
            ok(found("lca", Some(&["x"]))),
            now,
            period,
        );
        let pb = t.first(
            Where::Path,
            "root:b",
            "eb",
            ok(found("lcb", Some(&["y"]))),
            now,
            period,
        );
        (pa, pb)
    };
    // The pass reads the kept answers (no read: the reader is not asked).
    assert!(Arc::ptr_eq(
        &a.lookup("root:a", "ea", Where::Path).await,
        &pa
    ));
    let evals: HashMap<StoreKey, CachedEval> = [
        (
            Arc::new(("c".to_string(), "r1".to_string())),
            cached(vec![pa.clone()]),
        ),
        (
            Arc::new(("c".to_string(), "r2".to_string())),
            cached(vec![pb.clone()]),
        ),
    ]
    .into_iter()
    .collect();
    // Nothing due: a round reads nothing, and tells when the next is due.
    let next = a
        .round(|_, _, _| async { unreachable!("nothing is due") })
        .await;
    assert!(next.is_some_and(|t| t > now && t <= now + period));
    assert!(!woken(&wake));

    // Both due; read again, b unchanged: neither wakes the pass.
    a.table
        .lock()
        .read_again(Where::Path, "root:a", "ea", std::time::Instant::now());
    a.table
        .lock()
        .read_again(Where::Path, "root:b", "eb", std::time::Instant::now());
    a.round(|_, at, _| async move {
        match at.as_str() {
            "root:a" => ok(found("lca", Some(&["x"]))),
            _ => ok(found("lcb", Some(&["y"]))),
        }
    })
    .await;
    assert!(!woken(&wake), "no answer changed");
    assert!(a.take_replaced().is_empty());
    let kept = a.table.lock().get(Where::Path, "root:a", "ea").cloned();
    assert!(
        kept.is_some_and(|k| Arc::ptr_eq(&k, &pa)),
        "an equal answer keeps its Arc"
    );

    // a now exports another resource: the pass is woken, and the change reaches
    // only the rule that used a.
    for name in [("root:a", "ea"), ("root:b", "eb")] {
        a.table
            .lock()
            .read_again(Where::Path, name.0, name.1, std::time::Instant::now());
    }
    a.round(|_, at, _| async move {
        match at.as_str() {
            "root:a" => ok(found("lca", Some(&["x", "z"]))),
            _ => ok(found("lcb", Some(&["y"]))),
        }
    })
    .await;
    assert!(woken(&wake), "a changed answer wakes the pass");
    let replaced = a.take_replaced();
    assert_eq!(replaced.len(), 1);
    assert_eq!(
        readers_of(&evals, &replaced),
        BTreeSet::from([("c".to_string(), "r1".to_string())])
    );
    assert!(a.take_replaced().is_empty(), "taken once");
}

#[tokio::test]
async fn failed_reads_back_off_and_keep_what_they_had() {
    let wake = Arc::new(Notify::new());
    let a = answers(&wake);
    let now = std::time::Instant::now();
    let period = Duration::from_secs(30);
    let key = ("root:a".to_string(), "ea".to_string());
    // A blip without an earlier answer: the failure itself (the rule is
    // Invalid), never an export found.
    let blip = || {
        ExportLookup::failed(
            None,
            reasons::API_EXPORT_UNREADABLE,
            "connection refused".into(),
        )
    };
    let r = a.or_last_good(&key, false, blip());
    assert!(r.failed && r.found.export.is_err());
    // With one: that answer, still a failed read.
    a.last_good.lock().insert(
        key.clone(),
        ExportFound {
            lc: "lca".into(),
            export: Arc::new(holdfast_shared::kcp::ExportInfo {
                identity_hash: String::new(),
                resources: Default::default(),
                shared: None,
            }),
        },
    );
    let r = a.or_last_good(&key, false, blip());
    assert!(r.failed && r.found.export.is_ok());
    // A definite answer (404) is believed.
    let r = a.or_last_good(&key, true, found("lca", None));
    assert!(r.failed && r.found.export.is_err());

    // Not found: read again after a backed-off delay, doubling, never later than
    // RETRY_MAX; found again: about a period later.
    let mut t = AnswerTable::default();
    t.first(Where::Path, "root:a", "ea", r, now, period);
    let due_in = |t: &AnswerTable| {
        t.get_answer(Where::Path, "root:a", "ea")
            .map(|a| (a.due.saturating_duration_since(now), a.failures))
    };
    assert!(
        due_in(&t).is_some_and(|(d, f)| d >= RETRY_FIRST / 2 && d <= RETRY_FIRST && f == 1),
        "{:?}",
        due_in(&t)
    );
    // Read again while not found: due later each time, no answer replaced.
    for n in 2..8u32 {
        let old = t.reread(
            Where::Path,
            "root:a",
            "ea",
            Read {
                found: found("lca", None),
                failed: true,
            },
            now,
            period,
        );
        assert!(old.is_none(), "the same answer");
        let nominal = RETRY_FIRST.saturating_mul(1 << (n - 1)).min(RETRY_MAX);
        assert!(
            due_in(&t).is_some_and(|(d, f)| d >= nominal / 2 && d <= nominal && f == n),
            "{n}: {:?}",
            due_in(&t)
        );
    }
    // A failure in logical cluster lca does not cut the back-off short.
    t.read_again_in(&HashSet::from_iter(["lca".to_string()]), now);
    assert!(t.due(now, 10).0.is_empty());
    let old = t.reread(
        Where::Path,
        "root:a",
        "ea",
        ok(found("lca", Some(&["x"]))),
        now,
        period,
    );
    assert!(old.is_some(), "found now: a changed answer");
    assert!(
        due_in(&t).is_some_and(|(d, f)| d >= period - period / 10 && d <= period && f == 0),
        "{:?}",
        due_in(&t)
    );
    // Found answers in a forgotten cluster are due at once; at most the budget.
    t.read_again_in(&HashSet::from_iter(["lca".to_string()]), now);
    assert_eq!(t.due(now, 10).0.len(), 1);
    let (due, more) = t.due(now, 0);
    assert!(due.is_empty() && more);
    // An answer no rule names any more is dropped, and a late read of it too.
    t.retain(&HashSet::new());
    assert!(t.next_due().is_none());
    let late = t.reread(
        Where::Path,
        "root:a",
        "ea",
        ok(found("lca", Some(&["x"]))),
        now,
        period,
    );
    assert!(late.is_none() && t.get(Where::Path, "root:a", "ea").is_none());
}

#[tokio::test]
async fn a_new_answer_that_failed_wakes_the_reader() {
    let wake = Arc::new(Notify::new());
    let a = answers(&wake);
    // Nothing listens at the address: the read fails (not definite), and no
    // earlier answer stands in for it.
    let found = a.lookup("lcx", "ex", Where::Cluster).await;
    assert!(found.export.is_err(), "{found:?}");
    assert!(woken(&a.wake), "the task learns of it at once");
    assert!(!woken(&wake), "no answer changed: the pass is not woken");
    // Kept: the pass does not read it again.
    assert!(Arc::ptr_eq(
        &a.lookup("lcx", "ex", Where::Cluster).await,
        &found
    ));
}

#[tokio::test]
async fn answers_named_are_read_ahead_once_and_kept_ones_are_not_read_again() {
    let wake = Arc::new(Notify::new());
    let a = answers(&wake);
    let kept = a.lookup("lc0", "ex", Where::Cluster).await;
    let named = vec![
        (Where::Cluster, "lc0".to_string(), "ex".to_string()),
        (Where::Cluster, "lc1".to_string(), "ex".to_string()),
        (Where::Cluster, "lc2".to_string(), "ex".to_string()),
    ];
    a.read_missing(named).await;
    let table = |lc: &str| a.table.lock().get(Where::Cluster, lc, "ex").cloned();
    assert!(
        table("lc0").is_some_and(|t| Arc::ptr_eq(&t, &kept)),
        "a kept answer is not read again"
    );
    for lc in ["lc1", "lc2"] {
        let read = table(lc).unwrap_or_else(|| panic!("{lc} was read ahead"));
        // Nothing listens at the address: the read failed, and is kept as such
        // (never taken for an export found).
        assert!(read.export.is_err(), "{read:?}");
        assert!(
            Arc::ptr_eq(&a.lookup(lc, "ex", Where::Cluster).await, &read),
            "the evaluation finds it kept"
        );
    }
}
