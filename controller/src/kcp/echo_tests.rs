//! Decodings and the echoes of a pass's own writes: what a status write, a new
//! generation or a configuration back at the installed version keeps or makes the
//! pass compare again.

use super::*;

#[test]
fn a_status_write_keeps_the_spec_a_new_generation_does_not() {
    let obj = |uid: Option<&str>, generation: Option<i64>, rv: &str| {
        let mut o = DynamicObject::new("r", &ApiResource::erase::<DependencyRule>(&()));
        o.metadata.uid = uid.map(str::to_string);
        o.metadata.generation = generation;
        o.metadata.resource_version = Some(rv.to_string());
        o.data = serde_json::json!({"spec": {}, "status": {"conditions": []}});
        Arc::new(Parsed::of(&Arc::new(Stored::of(o))))
    };
    let first = obj(Some("u1"), Some(1), "10");
    assert!(first.same_spec(&first), "the same decoding");
    assert!(
        first.same_spec(&obj(Some("u1"), Some(1), "11")),
        "a status write: the same object at the same generation"
    );
    assert!(
        !first.same_spec(&obj(Some("u1"), Some(2), "12")),
        "a spec change"
    );
    assert!(
        !first.same_spec(&obj(Some("u2"), Some(1), "13")),
        "deleted and created again under the name"
    );
    let unknown = obj(None, None, "14");
    assert!(unknown.same_spec(&unknown));
    assert!(
        !unknown.same_spec(&obj(None, None, "14")),
        "without uid and generation only the same decoding counts"
    );
}

#[test]
fn a_status_echo_keeps_the_decoding_and_reads_the_new_status() {
    let stored = |generation: i64, rv: &str, spec: serde_json::Value, ready: &str| {
        let mut o = DynamicObject::new("r", &ApiResource::erase::<DependencyRule>(&()));
        o.metadata.uid = Some("u1".into());
        o.metadata.generation = Some(generation);
        o.metadata.resource_version = Some(rv.to_string());
        o.data = serde_json::json!({"spec": spec, "status": {"conditions": [
            {"type": "Ready", "status": ready, "reason": "R", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        Arc::new(Stored::of(o))
    };
    let spec = serde_json::json!({"dependent": {"group": "g", "version": "v1",
        "resource": "vms", "kind": "VM"}, "dependencies": []});
    let key: StoreKey = Arc::new(("c".to_string(), "r".to_string()));
    let mut cache = HashMap::new();
    let first = Memo::parsed_of(&mut cache, &key, &stored(1, "10", spec.clone(), "False"));
    let echo = Memo::parsed_of(&mut cache, &key, &stored(1, "11", spec.clone(), "True"));
    assert!(
        !Arc::ptr_eq(&first, &echo),
        "a new resourceVersion is a new decoding"
    );
    assert_eq!(echo.at.rv, "11");
    assert_eq!(
        echo.current().0.conditions[0].status,
        "True",
        "the status is read from the new object"
    );
    match (&first.rule, &echo.rule) {
        (Ok(a), Ok(b)) => assert!(Arc::ptr_eq(a, b), "the spec's decoding is kept"),
        _ => panic!("the rule decodes"),
    }
    // A spec change (a new generation) is decoded afresh, whatever the cache holds.
    let changed = serde_json::json!({"dependent": {"group": "g", "version": "v1",
        "resource": "disks", "kind": "Disk"}, "dependencies": []});
    let next = Memo::parsed_of(&mut cache, &key, &stored(2, "12", changed, "True"));
    match (&echo.rule, &next.rule) {
        (Ok(a), Ok(b)) => {
            assert!(!Arc::ptr_eq(a, b));
            assert_eq!(b.spec.dependent.resource, "disks");
        }
        _ => panic!("the rule decodes"),
    }
}

#[test]
fn a_status_echo_reads_any_status_without_failing() {
    let stored = |rv: &str, data: serde_json::Value| {
        let mut o = DynamicObject::new("r", &ApiResource::erase::<DependencyRule>(&()));
        o.metadata.uid = Some("u1".into());
        o.metadata.generation = Some(1);
        o.metadata.resource_version = Some(rv.to_string());
        o.data = data;
        Arc::new(Stored::of(o))
    };
    let spec = serde_json::json!({"dependent": {"group": "g", "version": "v1",
        "resource": "vms", "kind": "VM"}, "dependencies": []});
    let key: StoreKey = Arc::new(("c".to_string(), "r".to_string()));
    let mut cache = HashMap::new();
    Memo::parsed_of(
        &mut cache,
        &key,
        &stored("1", serde_json::json!({"spec": spec})),
    );
    let ws = serde_json::json!([{"path": "root:a", "logicalCluster": "x"}]);
    let echo = Memo::parsed_of(
        &mut cache,
        &key,
        &stored(
            "2",
            serde_json::json!({"spec": spec, "status": {"workspaces": ws}}),
        ),
    );
    assert_eq!(echo.current().1, ws);
    // Statuses no writer of holdfast's would make: read as empty, never a panic.
    for odd in [
        serde_json::json!("x"),
        serde_json::json!([1]),
        serde_json::json!({"workspaces": null}),
    ] {
        let p = Memo::parsed_of(
            &mut cache,
            &key,
            &stored("3", serde_json::json!({"spec": spec, "status": odd})),
        );
        let (status, workspaces) = p.current();
        assert_eq!(workspaces, serde_json::json!([]));
        assert!(status.conditions.is_empty());
        cache.remove(&key);
        Memo::parsed_of(
            &mut cache,
            &key,
            &stored("1", serde_json::json!({"spec": spec})),
        );
    }
}

#[test]
fn a_configuration_echo_of_the_last_install_is_not_compared_again() {
    use super::pass::own_echo;
    let cfg = |name: &str, rv: Option<&str>| {
        let mut c = ValidatingWebhookConfiguration::default();
        c.metadata.name = Some(name.to_string());
        c.metadata.resource_version = rv.map(str::to_string);
        Arc::new(c)
    };
    let installed = BTreeMap::from([("c".to_string(), cfg("holdfast", Some("7")))]);
    let key = ("c".to_string(), "holdfast".to_string());
    let live = |c| Some((Arc::new(key.clone()), c));
    assert!(own_echo(&installed, &key, live(cfg("holdfast", Some("7")))));
    assert!(
        !own_echo(&installed, &key, live(cfg("holdfast", Some("8")))),
        "changed since (by someone else, or deleted and created again)"
    );
    assert!(!own_echo(&installed, &key, None), "deleted");
    let other = ("c".to_string(), "other".to_string());
    assert!(
        !own_echo(
            &installed,
            &other,
            Some((Arc::new(other.clone()), cfg("other", Some("7"))))
        ),
        "another configuration of the workspace"
    );
    assert!(
        !own_echo(
            &installed,
            &("d".to_string(), "holdfast".to_string()),
            live(cfg("holdfast", Some("7")))
        ),
        "nothing installed in that workspace"
    );
    let unversioned = BTreeMap::from([("c".to_string(), cfg("holdfast", None))]);
    assert!(!own_echo(&unversioned, &key, live(cfg("holdfast", None))));
}

#[test]
fn a_status_found_up_to_date_is_skipped_only_while_its_inputs_hold() {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "holdfast.dev/v1alpha1",
        "kind": "DependencyRule",
        "metadata": {"name": "r", "resourceVersion": "7"},
        "spec": {},
    }))
    .expect("object");
    let parsed = Arc::new(Parsed::of(&Arc::new(Stored::of(obj.clone()))));
    let gr = GroupResource::new("p.test", "widgets");
    let eval = Arc::new(RuleEval {
        cluster: "c1".into(),
        key: "c1/r".into(),
        invalid: None,
        workspaces: vec![WorkspaceRef {
            path: "root:p".into(),
            export: "widgets".into(),
            logical_cluster: Some("lc2".into()),
            identity_hash: None,
            shared_resources: None,
            message: None,
        }],
        targets: BTreeMap::from([(
            "lc1".to_string(),
            ExportTargets::from([("widgets".to_string(), [gr].into())]),
        )])
        .into(),
        edges: None,
    });
    let rule = RuleState {
        obj: Arc::new(Stored::of(obj.clone())),
        parsed: parsed.clone(),
        eval: eval.clone(),
        rule: None,
    };
    let config = |rv: Option<&str>| {
        let mut c = ValidatingWebhookConfiguration::default();
        c.metadata.resource_version = rv.map(str::to_string);
        Arc::new(c)
    };
    let installed: BTreeMap<String, Arc<ValidatingWebhookConfiguration>> =
        [("lc1".to_string(), config(Some("5")))].into();
    // lc1 (a target) installed at 5, lc2 (a workspace) not installed.
    let inputs = StatusInputs {
        eval: eval.clone(),
        object_rv: parsed.at.rv.clone(),
        installed: installed_inputs(&eval, &installed).expect("comparable"),
        cycle: None,
    };
    assert_eq!(inputs.installed, vec![Some("5".to_string()), None]);
    assert!(inputs.hold_for(&rule, &installed_rvs(&installed), None));
    // Any input changed: compared again.
    let mut other = installed.clone();
    other.insert("lc1".into(), config(Some("6")));
    assert!(!inputs.hold_for(&rule, &installed_rvs(&other), None));
    other.insert("lc1".into(), config(None));
    assert!(!inputs.hold_for(&rule, &installed_rvs(&other), None));
    assert_eq!(installed_inputs(&eval, &other), None, "no resourceVersion");
    let mut other = installed.clone();
    other.remove("lc1");
    assert!(!inputs.hold_for(&rule, &installed_rvs(&other), None));
    let mut other = installed.clone();
    other.insert("lc2".into(), config(Some("1")));
    assert!(!inputs.hold_for(&rule, &installed_rvs(&other), None));
    assert!(!inputs.hold_for(&rule, &installed_rvs(&installed), Some("a → a")));
    let reparsed = RuleState {
        parsed: Arc::new(Parsed::of(&Arc::new(Stored::of(obj.clone())))),
        obj: rule.obj.clone(),
        eval: eval.clone(),
        rule: None,
    };
    assert!(
        inputs.hold_for(&reparsed, &installed_rvs(&installed), None),
        "decoded again at the same resourceVersion: the same object"
    );
    // The rule at another resourceVersion (or none), decoded from that object.
    let at = |rv: Option<&str>| {
        let mut o = obj.clone();
        o.metadata.resource_version = rv.map(str::to_string);
        let source = Arc::new(Stored::of(o));
        RuleState {
            parsed: Arc::new(Parsed::of(&source)),
            obj: source,
            eval: eval.clone(),
            rule: None,
        }
    };
    let rewritten = at(Some("8"));
    assert!(
        !inputs.hold_for(&rewritten, &installed_rvs(&installed), None),
        "the object changed since (its status written by someone else)"
    );
    let unversioned = StatusInputs {
        eval: eval.clone(),
        object_rv: String::new(),
        installed: inputs.installed.clone(),
        cycle: None,
    };
    let bare = at(None);
    assert!(
        !unversioned.hold_for(&bare, &installed_rvs(&installed), None),
        "without a resourceVersion nothing is taken as unchanged"
    );
    let reevaluated = RuleState {
        eval: Arc::new(RuleEval {
            cluster: "c1".into(),
            key: "c1/r".into(),
            invalid: None,
            workspaces: Vec::new(),
            targets: eval.targets.clone(),
            edges: None,
        }),
        obj: rule.obj.clone(),
        parsed: parsed.clone(),
        rule: None,
    };
    assert!(!inputs.hold_for(&reevaluated, &installed_rvs(&installed), None));
}

#[test]
fn a_policy_decoding_holds_across_status_writes_not_spec_changes() {
    let of = |rv: &str, uid: Option<&str>, generation: Option<i64>| SpecOf {
        rv: rv.to_string(),
        uid: uid.map(str::to_string),
        generation,
    };
    let was = of("5", Some("u"), Some(1));
    assert!(
        was.holds_for(&of("5", Some("u"), Some(1))),
        "the same version"
    );
    assert!(
        was.holds_for(&of("6", Some("u"), Some(1))),
        "a status write"
    );
    assert!(
        !was.holds_for(&of("7", Some("u"), Some(2))),
        "a spec change"
    );
    assert!(
        !was.holds_for(&of("8", Some("v"), Some(1))),
        "deleted and created again under the name"
    );
    let bare = of("9", None, None);
    assert!(bare.holds_for(&of("9", None, None)));
    assert!(
        !bare.holds_for(&of("10", None, None)),
        "without uid and generation only the same version counts"
    );
    assert!(!of("", None, None).holds_for(&of("", None, None)));
}
