//! `manifests/kcp/` must be exactly what the code generates from the API types.

mod common;

/// Each schema is its CRD in kcp's form (kcp's APIResourceSchema admission): the
/// same group, scope and names plus the `listKind` kcp requires, a name
/// `<prefix>.<plural>.<group>`, and each version's `schema` the CRD's OpenAPI v3
/// schema itself, not wrapped in `openAPIV3Schema`.
#[test]
fn every_schema_matches_its_crd() {
    let docs = holdfast_controller::kcp::manifests::documents().expect("render");
    let crds = holdfast_shared::api::crds();
    assert_eq!(docs.len(), crds.len() + 1);
    for (doc, crd) in docs.iter().zip(&crds) {
        let spec = serde_json::to_value(&crd.spec).expect("json");
        let plural = &crd.spec.names.plural;
        assert_eq!(doc["spec"]["group"], spec["group"]);
        assert_eq!(doc["spec"]["scope"], spec["scope"]);
        let mut names = spec["names"].clone();
        names["listKind"] = serde_json::json!(format!("{}List", crd.spec.names.kind));
        assert_eq!(
            doc["spec"]["names"], names,
            "{plural}: the CRD's names and listKind"
        );
        let name = doc["metadata"]["name"].as_str().expect("name");
        let prefix = name
            .strip_suffix(&format!(".{plural}.{}", crd.spec.group))
            .expect("name ends in .<plural>.<group>");
        assert!(
            prefix.starts_with(|c: char| c.is_ascii_lowercase())
                && prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{name}: prefix matches ^[a-z]([-a-z0-9]*[a-z0-9])?$"
        );
        let versions = doc["spec"]["versions"].as_array().expect("versions");
        assert_eq!(
            versions.len(),
            spec["versions"].as_array().map_or(0, Vec::len)
        );
        for (v, crd_v) in versions
            .iter()
            .zip(spec["versions"].as_array().into_iter().flatten())
        {
            assert!(
                v["schema"].get("openAPIV3Schema").is_none(),
                "{plural}: no CRD wrapper"
            );
            assert_eq!(v["schema"]["type"], "object", "{plural}: structural root");
            assert_eq!(
                v["schema"], crd_v["schema"]["openAPIV3Schema"],
                "same OpenAPI schema as the CRD {plural}"
            );
        }
    }
}

#[test]
fn manifests_kcp_match_the_generated_schemas_and_export() {
    common::assert_up_to_date(common::Generated::Kcp);
}
