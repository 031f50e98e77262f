use super::*;

/// The stores' tests keep ConfigMaps as they are.
impl Keep for k8s_openapi::api::core::v1::ConfigMap {
    type Kept = Self;
    fn keep(self) -> Self {
        self
    }
}

#[test]
fn only_spec_changes_count() {
    let rule = |uid: &str, generation: i64, status: &str| {
        let mut o = DynamicObject::new(
            "r",
            &ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        );
        o.metadata.uid = Some(uid.to_string());
        o.metadata.generation = Some(generation);
        o.metadata.resource_version = Some(status.to_string());
        o.data = serde_json::json!({"status": status});
        o
    };
    let mut store = ClusterStore::<DynamicObject>::default();
    store.reset(vec![rule("u1", 1, "a")]);
    assert_eq!(store.spec_changes, 1, "a list");
    store.apply(rule("u1", 1, "b"));
    assert_eq!(store.spec_changes, 1, "a status write is no spec change");
    store.apply(rule("u1", 2, "b"));
    assert_eq!(store.spec_changes, 2, "a new generation");
    store.apply(rule("u2", 1, "b"));
    assert_eq!(
        store.spec_changes, 3,
        "deleted and created again under the name"
    );
    store.delete(rule("u2", 1, "b"));
    assert_eq!(store.spec_changes, 4, "deleted");
    store.delete(rule("u2", 1, "b"));
    assert_eq!(store.spec_changes, 4, "a delete of what is not there");
    // Every change moves the version (a pass reuses its plan while it holds),
    // a status write too.
    assert_eq!(store.version, 5);
    store.apply(rule("u1", 2, "c"));
    assert_eq!(store.version, 6, "a status write");
    let key = store.snapshot()[0].0.clone();
    store.apply(rule("u1", 2, "d"));
    assert!(
        Arc::ptr_eq(&key, &store.snapshot()[0].0),
        "a replaced object keeps its key"
    );
}

fn target_eval(key: &str, to: &[(&str, &str, &str)]) -> Arc<RuleEval> {
    let mut targets: BTreeMap<String, ExportTargets> = BTreeMap::new();
    for (lc, export, resource) in to {
        targets
            .entry(lc.to_string())
            .or_default()
            .entry(export.to_string())
            .or_default()
            .insert(GroupResource::new("p.test", *resource));
    }
    Arc::new(RuleEval {
        cluster: "c".into(),
        key: key.into(),
        invalid: None,
        workspaces: Vec::new(),
        targets: targets.into(),
        edges: None,
    })
}

/// The store key of `cluster/name`.
fn key_of(key: &str) -> StoreKey {
    let (cluster, name) = key.split_once('/').unwrap_or(("", key));
    Arc::new((cluster.to_string(), name.to_string()))
}

/// The targets built from scratch: what [`Targets`] must equal on every pass.
fn targets_from_scratch(
    evals: &[Arc<RuleEval>],
    planned: &BTreeMap<String, Arc<WorkspaceTarget>>,
) -> BTreeMap<String, WorkspaceTarget> {
    let mut out: BTreeMap<String, WorkspaceTarget> = BTreeMap::new();
    for e in evals {
        for (lc, exports) in e.targets.iter() {
            let t = out.entry(lc.clone()).or_default();
            for (export, grs) in exports {
                t.exports
                    .entry(export.clone())
                    .or_default()
                    .extend(grs.iter().cloned());
            }
            t.rules.insert(e.key.clone());
        }
    }
    for (lc, p) in planned {
        out.entry(lc.clone()).or_default().absorb((**p).clone());
    }
    out
}

#[test]
fn targets_are_rebuilt_for_the_workspaces_whose_inputs_changed() {
    let mut cache = Targets::default();
    let part = |binds: bool| {
        Arc::new(WorkspaceTarget {
            binds,
            ..Default::default()
        })
    };
    let mut evals = vec![
        target_eval("c/a", &[("lc1", "w", "widgets")]),
        target_eval("c/b", &[("lc1", "w", "gadgets"), ("lc2", "v", "valves")]),
        target_eval("c/c", &[("lc3", "w", "widgets")]),
    ];
    let mut planned: BTreeMap<String, Arc<WorkspaceTarget>> = [
        ("lc2".to_string(), part(true)),
        ("lc4".to_string(), part(true)),
    ]
    .into();
    fn check(
        cache: &mut Targets,
        evals: &[Arc<RuleEval>],
        planned: &BTreeMap<String, Arc<WorkspaceTarget>>,
    ) -> BTreeMap<String, Arc<WorkspaceTarget>> {
        let keyed: Vec<(StoreKey, Arc<RuleEval>)> =
            evals.iter().map(|e| (key_of(&e.key), e.clone())).collect();
        let got = cache
            .desired(keyed.iter().map(|(k, e)| (k, e)), planned)
            .clone();
        let want = targets_from_scratch(evals, planned);
        let got_values: BTreeMap<String, WorkspaceTarget> = got
            .iter()
            .map(|(lc, t)| (lc.clone(), (**t).clone()))
            .collect();
        assert_eq!(got_values, want);
        got
    }
    let first = check(&mut cache, &evals, &planned);
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        ["lc1", "lc2", "lc3", "lc4"]
    );
    assert_eq!(first["lc1"].rules.len(), 2);

    // Nothing changed: every target is the same `Arc`.
    let same = check(&mut cache, &evals, &planned);
    for (lc, t) in &same {
        assert!(Arc::ptr_eq(t, &first[lc]), "{lc} kept");
    }

    // One rule changed: the workspaces it routes to, before and after, are
    // rebuilt; the others kept.
    evals[2] = target_eval("c/c", &[("lc1", "w", "sprockets")]);
    let changed = check(&mut cache, &evals, &planned);
    assert!(!Arc::ptr_eq(&changed["lc1"], &first["lc1"]));
    assert!(changed["lc1"].rules.contains("c/c"));
    assert!(
        !changed.contains_key("lc3"),
        "no rule routes there any more"
    );
    assert!(Arc::ptr_eq(&changed["lc2"], &first["lc2"]));
    assert!(Arc::ptr_eq(&changed["lc4"], &first["lc4"]));

    // The plan's part of one workspace changed: that one rebuilt.
    planned.insert("lc2".to_string(), part(false));
    let replanned = check(&mut cache, &evals, &planned);
    assert!(!replanned["lc2"].binds);
    assert!(Arc::ptr_eq(&replanned["lc1"], &changed["lc1"]));

    // A rule removed, another with the same routes in its place: rebuilt.
    evals.remove(0);
    evals.insert(0, target_eval("c/z", &[("lc1", "w", "widgets")]));
    let renamed = check(&mut cache, &evals, &planned);
    assert!(renamed["lc1"].rules.contains("c/z"));
    assert!(!renamed["lc1"].rules.contains("c/a"));
    planned.clear();
    evals.clear();
    assert!(check(&mut cache, &evals, &planned).is_empty());
}

fn api_error(code: u16) -> kube::Error {
    kube::Error::Api(Box::new(
        kube::core::Status::failure(&format!("code {code}"), "").with_code(code),
    ))
}

/// Answers per endpoint, as a virtual workspace would: `a` does not serve the
/// cluster (403), `b` does not either (404), `c` does, `d` fails.
async fn answer(url: String) -> Result<String, kube::Error> {
    match url.as_str() {
        "a" => Err(api_error(403)),
        "b" => Err(api_error(404)),
        "c" => Ok(format!("written through {url}")),
        _ => Err(api_error(500)),
    }
}

fn candidates(urls: &[&str]) -> Vec<(String, String)> {
    urls.iter()
        .map(|u| (u.to_string(), u.to_string()))
        .collect()
}

fn code(e: Option<kube::Error>) -> Option<u16> {
    match e {
        Some(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn a_write_goes_through_the_first_endpoint_that_serves_the_cluster() {
    // 403 and 404 mean "not this shard": the next endpoint is tried.
    let r = in_turn(candidates(&["a", "b", "c", "d"]), answer).await;
    assert_eq!(
        r.ok(),
        Some(("c".to_string(), "written through c".to_string()))
    );
    // Any other error stops at once (and is the answer).
    let r = in_turn(candidates(&["d", "c"]), answer).await;
    assert_eq!(r.err().map(code), Some(Some(500)));
    // No endpoint serves it: the most likely endpoint's answer.
    let r = in_turn(candidates(&["b", "a"]), answer).await;
    assert_eq!(r.err().map(code), Some(Some(404)));
    let r = in_turn(candidates(&["a", "b"]), answer).await;
    assert_eq!(r.err().map(code), Some(Some(403)));
    // No endpoint at all.
    let r = in_turn(candidates(&[]), answer).await;
    assert_eq!(r.err().map(code), Some(None));
}

#[test]
fn an_export_must_export_the_resource() {
    let export = |resources: &[(&str, &str)]| ExportLookup {
        lc: Some("lc1".into()),
        export: Ok(Arc::new(ExportInfo {
            identity_hash: "h".into(),
            resources: resources
                .iter()
                .map(|(g, r)| GroupResource::new(*g, *r))
                .collect(),
            shared: None,
        })),
    };
    let vpcs = GroupResource::new("network.test.io", "vpcs");
    let both = export(&[("network.test.io", "vpcs"), ("network.test.io", "subnets")]);
    assert_eq!(both.exporting(&vpcs, "root:net", "network.test.io"), Ok(()));
    assert_eq!(
        export(&[("network.test.io", "subnets")]).exporting(&vpcs, "root:net", "net.io"),
        Err((
            reasons::RESOURCE_NOT_EXPORTED,
            "APIExport net.io in workspace root:net does not export vpcs.network.test.io (it exports: subnets.network.test.io)".to_string()
        ))
    );
    assert_eq!(
        export(&[]).exporting(&vpcs, "root:net", "net.io"),
        Err((
            reasons::RESOURCE_NOT_EXPORTED,
            "APIExport net.io in workspace root:net does not export vpcs.network.test.io (it exports: nothing)".to_string()
        ))
    );
    // A failed lookup is passed on as it is.
    let missing = ExportLookup::failed(None, reasons::API_EXPORT_NOT_FOUND, "gone".into());
    assert_eq!(
        missing.exporting(&vpcs, "root:net", "net.io"),
        Err((reasons::API_EXPORT_NOT_FOUND, "gone".to_string()))
    );
}

#[test]
fn cluster_store_keys_by_cluster_and_name() {
    let mk = |c: &str, n: &str| {
        let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
        cm.metadata.name = Some(n.into());
        cm.metadata.annotations = Some(
            [(
                holdfast_shared::names::KCP_CLUSTER_ANNOTATION.to_string(),
                c.to_string(),
            )]
            .into(),
        );
        cm
    };
    let mut s = ClusterStore::default();
    let mut d = holdfast_shared::watch::Driver::new(holdfast_shared::watch::NotFound::Unknown);
    d.handle(&mut s, Ok(watcher::Event::Init));
    d.handle(&mut s, Ok(watcher::Event::InitApply(mk("a", "x"))));
    d.handle(&mut s, Ok(watcher::Event::InitApply(mk("b", "x"))));
    assert!(!s.ready);
    d.handle(&mut s, Ok(watcher::Event::InitDone));
    assert!(s.ready);
    assert_eq!(s.snapshot().len(), 2, "same name in two clusters");
    d.handle(&mut s, Ok(watcher::Event::Delete(mk("a", "x"))));
    let keys: Vec<_> = s
        .snapshot()
        .into_iter()
        .map(|(k, _)| (*k).clone())
        .collect();
    assert_eq!(keys, vec![("b".to_string(), "x".to_string())]);
    // Fed by several endpoints: an endpoint's object leaves by its key.
    let store = Arc::new(Mutex::new(s));
    let mut feed = SharedFeed {
        store: store.clone(),
        notify: Arc::new(Notify::new()),
    };
    feed.remove(&ObjectKey {
        cluster: "b".into(),
        namespace: String::new(),
        name: "x".into(),
    });
    assert!(store.lock().snapshot().is_empty());
}

/// A sequence of rule and plan changes applied incrementally
/// ([`Targets::update`]): after every step the targets equal those built from
/// scratch and those a full pass builds, exactly the workspaces whose target
/// changed are reported, and every other keeps its target (the same `Arc`).
#[test]
fn incremental_targets_equal_a_full_recompute_after_every_change() {
    let mut next = crate::test_sequence(0x2545_f491_4f6c_dd1d);
    let lcs = ["lc0", "lc1", "lc2", "lc3", "lc4"];
    let resources = ["widgets", "gadgets", "valves"];
    let mut rules: BTreeMap<StoreKey, Arc<RuleEval>> = BTreeMap::new();
    let mut planned: BTreeMap<String, Arc<WorkspaceTarget>> = BTreeMap::new();
    let mut incremental = Targets::default();
    incremental.desired(rules.iter(), &planned);
    for step in 0..3_000 {
        let mut delta = Vec::new();
        for _ in 0..1 + next(3) {
            let key = key_of(&format!("c/r{}", next(10)));
            let old = rules.get(&key).cloned();
            let new = match next(4) {
                0 => None,
                // The same evaluation again (an object changed, not what it asks).
                1 => old.clone(),
                _ => {
                    let to: Vec<(&str, &str, &str)> = (0..next(3))
                        .map(|_| (lcs[next(5) as usize], "w", resources[next(3) as usize]))
                        .collect();
                    Some(target_eval(&format!("c/{}", key.1), &to))
                }
            };
            match &new {
                Some(e) => rules.insert(key.clone(), e.clone()),
                None => rules.remove(&key),
            };
            if old.is_some() || new.is_some() {
                delta.push(RuleDelta { key, old, new });
            }
        }
        let before_plan = planned.clone();
        let plan_changed = next(4) == 0;
        if plan_changed {
            let lc = lcs[next(5) as usize].to_string();
            match next(3) {
                0 => planned.remove(&lc),
                b => planned.insert(
                    lc,
                    Arc::new(WorkspaceTarget {
                        binds: b == 1,
                        ..Default::default()
                    }),
                ),
            };
        }
        let was = incremental.current().clone();
        let changed = incremental.update(&delta, &planned, plan_changed.then_some(&before_plan));
        let got: BTreeMap<String, WorkspaceTarget> = incremental
            .current()
            .iter()
            .map(|(lc, t)| (lc.clone(), (**t).clone()))
            .collect();
        let evals: Vec<Arc<RuleEval>> = rules.values().cloned().collect();
        assert_eq!(got, targets_from_scratch(&evals, &planned), "step {step}");
        let mut full = Targets::default();
        let full: BTreeMap<String, WorkspaceTarget> = full
            .desired(rules.iter(), &planned)
            .iter()
            .map(|(lc, t)| (lc.clone(), (**t).clone()))
            .collect();
        assert_eq!(got, full, "step {step}");
        for lc in lcs {
            let same = match (was.get(lc), incremental.current().get(lc)) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            assert_eq!(!same, changed.contains(lc), "step {step}: {lc}");
        }
    }
}

/// The keys a store records as changed between two passes, and a relist (or a
/// watch changing state) counting as everything.
#[test]
fn a_store_records_the_keys_changed_since_the_last_pass() {
    let obj = |cluster: &str, name: &str, rv: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "holdfast.dev/v1alpha1",
            "kind": "DependencyRule",
            "metadata": {"name": name, "resourceVersion": rv,
                         "annotations": {"kcp.io/cluster": cluster}},
        }))
        .expect("object")
    };
    let key = |c: &str, n: &str| (c.to_string(), n.to_string());
    let mut store = ClusterStore::<DynamicObject>::default();
    // Nothing taken yet: everything.
    assert!(store.take_changes().all());
    store.apply(obj("a", "r1", "1"));
    store.apply(obj("b", "r1", "2"));
    assert_eq!(
        store.take_changes(),
        StoreChanges::Keys([key("a", "r1"), key("b", "r1")].into_iter().collect())
    );
    assert_eq!(store.take_changes(), StoreChanges::Keys(Default::default()));
    store.apply(obj("a", "r1", "3"));
    store.delete(obj("b", "r1", "2"));
    // Deleting what is not there changes nothing.
    store.delete(obj("c", "r9", "4"));
    assert_eq!(
        store.take_changes(),
        StoreChanges::Keys([key("a", "r1"), key("b", "r1")].into_iter().collect())
    );
    assert_eq!(
        store.get(&key("a", "r1")).map(|(k, _)| (*k).clone()),
        Some(key("a", "r1"))
    );
    store.reset(vec![obj("a", "r2", "5")]);
    store.apply(obj("a", "r3", "6"));
    assert!(
        store.take_changes().all(),
        "a relist is not attributed to keys"
    );
    store.apply(obj("a", "r3", "7"));
    let synced = WatchStatus {
        state: WatchState::Starting,
        synced: true,
    };
    store.status(&WatchStatus::default(), &synced);
    assert!(store.take_changes().all(), "a watch changed state");
    store.status(&synced, &synced);
    assert_eq!(store.take_changes(), StoreChanges::Keys(Default::default()));
}

#[test]
fn changed_keys_are_those_one_map_lacks_or_holds_otherwise() {
    let a: BTreeMap<String, u8> = [("a".into(), 1), ("b".into(), 2), ("d".into(), 4)].into();
    let b: BTreeMap<String, u8> = [("b".into(), 2), ("c".into(), 3), ("d".into(), 5)].into();
    let mut out = BTreeSet::new();
    changed_keys(&a, &b, |x, y| x == y, &mut out);
    assert_eq!(out, ["a", "c", "d"].map(String::from).into());
}

#[test]
fn a_store_keeps_no_managed_fields_nor_last_applied_configuration() {
    let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
    cm.metadata.name = Some("x".into());
    cm.metadata.managed_fields = Some(vec![Default::default()]);
    cm.metadata.annotations = Some(
        [
            (
                holdfast_shared::names::KCP_CLUSTER_ANNOTATION.to_string(),
                "a".to_string(),
            ),
            (
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "{\"big\": true}".to_string(),
            ),
        ]
        .into(),
    );
    let mut s = ClusterStore::default();
    s.reset(vec![cm.clone()]);
    s.apply(cm);
    for (key, obj) in s.snapshot() {
        assert_eq!(
            *key,
            ("a".to_string(), "x".to_string()),
            "the cluster is kept"
        );
        assert!(obj.metadata.managed_fields.is_none());
        let annotations = obj.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.len(), 1, "{annotations:?}");
    }
}

#[test]
fn a_kept_configuration_holds_its_ca_bundle_once_and_a_changed_bundle_is_rewritten() {
    use k8s_openapi::{
        ByteString,
        api::admissionregistration::v1::{ValidatingWebhook, WebhookClientConfig},
    };
    let pem = |tag: &str| {
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            tag.repeat(200)
        )
        .into_bytes()
    };
    let cfg = |ca: Option<&[u8]>, url: &str| {
        let hook = |name: &str| ValidatingWebhook {
            name: name.to_string(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            client_config: WebhookClientConfig {
                ca_bundle: ca.map(|b| ByteString(b.to_vec())),
                url: Some(url.to_string()),
                service: None,
            },
            ..Default::default()
        };
        ValidatingWebhookConfiguration {
            metadata: kube::api::ObjectMeta {
                name: Some(WEBHOOK_CONFIGURATION_NAME.to_string()),
                ..Default::default()
            },
            webhooks: Some(vec![
                hook("a.policies.holdfast.dev"),
                hook("b.policies.holdfast.dev"),
            ]),
        }
    };
    let (a, b) = (pem("A"), pem("B"));
    let want = cfg(Some(&a), "https://w/validate");
    // What the watch delivers of the configuration written, as the store keeps it.
    let live = want.clone().keep();
    let kept: Vec<usize> = live
        .webhooks
        .iter()
        .flatten()
        .filter_map(|h| h.client_config.ca_bundle.as_ref().map(|c| c.0.len()))
        .collect();
    assert_eq!(kept.len(), 2);
    assert!(
        kept.iter().all(|n| *n < 64),
        "a handle, not the bundle: {kept:?}"
    );
    assert!(matches_kept(&live, &want), "the same bundle: no rewrite");
    // A new CA: the desired configuration no longer matches (rewritten).
    assert!(!matches_kept(&live, &cfg(Some(&b), "https://w/validate")));
    // Kept with the new bundle, it matches that one, not the old.
    let rewritten = cfg(Some(&b), "https://w/validate").keep();
    assert!(matches_kept(
        &rewritten,
        &cfg(Some(&b), "https://w/validate")
    ));
    assert!(!matches_kept(&rewritten, &want));
    // A bundle removed live, or another URL, is rewritten too.
    assert!(!matches_kept(
        &cfg(None, "https://w/validate").keep(),
        &want
    ));
    assert!(!matches_kept(
        &cfg(Some(&a), "https://x/validate").keep(),
        &want
    ));
    // A live bundle made to look like a handle is no handle.
    let handle = live
        .webhooks
        .iter()
        .flatten()
        .next()
        .and_then(|h| h.client_config.ca_bundle.clone());
    let forged = cfg(
        handle.as_ref().map(|h| h.0.as_slice()),
        "https://w/validate",
    )
    .keep();
    assert!(!matches_kept(&forged, &want));
}
