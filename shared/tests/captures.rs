//! Every AdmissionReview recorded from a real kube-apiserver v1.36 parses, and the
//! label policy decides each one as expected.

use chrono::Utc;
use holdfast_shared::{
    labels::{ProtectionLabel, ProtectionLabels},
    policy::{Decision, NoPolicies, PolicyConfig, evaluate},
    review::{Operation, parse_review},
};
use serde_json::Value;
use std::path::PathBuf;

fn captures_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../test/captures/admission");
    assert!(
        dir.is_dir(),
        "{} is missing: the recorded captures belong to the repository (test/captures)",
        dir.display()
    );
    dir
}

#[test]
fn every_capture_parses_and_is_decided() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(captures_dir())
        .expect("readable captures dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 60,
        "expected 60+ captures, found {}",
        files.len()
    );

    // The captures were recorded with the protection label `capture/deny=true`.
    let cfg = PolicyConfig {
        labels: ProtectionLabels::with_extra(["capture/deny=true"
            .parse::<ProtectionLabel>()
            .expect("valid label")]),
        strict: false,
    };
    let (mut deletes, mut nameless, mut denied) = (0, 0, 0);
    for file in &files {
        let raw = std::fs::read(file).expect("readable capture");
        let capture: Value = serde_json::from_slice(&raw).expect("capture is JSON");
        let path = capture["path"].as_str().unwrap_or_default();
        assert!(
            path.starts_with("/validate?timeout=") && path.ends_with('s'),
            "{}: unexpected path {path}",
            file.display()
        );
        let body = serde_json::to_vec(&capture["review"]).expect("serialisable");
        let req = parse_review(&body)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        assert!(!req.uid.is_empty());
        let name = req
            .object_name()
            .unwrap_or_else(|| panic!("{}: no object name", file.display()));
        let file_name = file
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        if file_name.contains("NONAME") {
            assert!(req.name.is_none(), "{file_name}: expected no request.name");
            nameless += 1;
        } else {
            assert!(file_name.contains(name), "{file_name}: name {name}");
        }
        let eval = futures::executor::block_on(evaluate(&req, &cfg, &NoPolicies, Utc::now()));
        let subject = req.subject().cloned().unwrap_or(Value::Null);
        let protected = subject["metadata"]["labels"]["capture/deny"] == "true";
        if req.operation == Operation::Delete {
            deletes += 1;
            assert!(req.object.is_none(), "{file_name}: DELETE with an object");
            match &eval.decision {
                Decision::Deny(d) if protected => {
                    denied += 1;
                    assert!(d.message.starts_with("holdfast: "));
                    assert!(d.message.contains(name), "{file_name}: {}", d.message);
                }
                Decision::Allow if !protected => {}
                other => panic!("{file_name}: protected={protected} but {other:?}"),
            }
        } else {
            assert_eq!(eval.decision, Decision::Allow, "{file_name}");
        }
    }
    assert!(deletes >= 20, "deletes: {deletes}");
    assert!(nameless >= 10, "nameless deletes: {nameless}");
    assert!(denied >= 3, "denied: {denied}");
}
