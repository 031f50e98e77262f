//! `manifests/crds/` must be exactly what the code generates.

mod common;

#[test]
fn manifests_crds_match_the_generated_crds() {
    common::assert_up_to_date(common::Generated::Crds);
}

#[test]
fn generated_files_hold_one_crd_each_and_a_kustomization() {
    let files = holdfast_controller::crds::render_files().expect("CRDs render");
    let names: Vec<_> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "holdfast.dev_resourceprotections.yaml",
            "holdfast.dev_anchorrules.yaml",
            "holdfast.dev_dependencyrules.yaml",
            "holdfast.dev_criticalservices.yaml",
            "kustomization.yaml"
        ]
    );
    for (name, content) in &files[..4] {
        let docs: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            serde_saphyr::from_multiple(content).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(docs.len(), 1, "{name}");
        assert_eq!(holdfast_shared::api::crd_file_name(&docs[0]), *name);
    }
    for (name, _) in &files[..4] {
        assert!(
            files[4].1.contains(&format!("- {name}\n")),
            "kustomization lists {name}"
        );
    }
}

#[test]
fn write_files_creates_and_cleans_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stale = dir.path().join("holdfast.dev_gone.yaml");
    std::fs::write(&stale, holdfast_controller::crds::GENERATED_HEADER).expect("write");
    let hand_written = dir.path().join("extra.yaml");
    std::fs::write(&hand_written, "# mine\n").expect("write");
    let written = holdfast_controller::crds::write_files(dir.path()).expect("writes");
    assert_eq!(written.len(), 5);
    assert!(!stale.exists(), "stale generated file removed");
    assert!(hand_written.exists(), "hand-written file kept");
    for (name, content) in holdfast_controller::crds::render_files().expect("render") {
        assert_eq!(
            std::fs::read_to_string(dir.path().join(&name)).expect("read"),
            content
        );
    }
}
