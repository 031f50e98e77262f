//! `manifests/kcp/` must be exactly what the code generates from the API types.

mod common;

#[test]
fn every_schema_matches_its_crd() {
    let docs = holdfast_controller::kcp_manifests::documents().expect("render");
    let crds = holdfast_shared::api::crds();
    assert_eq!(docs.len(), crds.len() + 1);
    for (doc, crd) in docs.iter().zip(&crds) {
        let spec = serde_json::to_value(&crd.spec).expect("json");
        assert_eq!(doc["spec"]["group"], spec["group"]);
        assert_eq!(doc["spec"]["names"], spec["names"]);
        assert_eq!(doc["spec"]["scope"], spec["scope"]);
        assert_eq!(
            doc["spec"]["versions"][0]["schema"], spec["versions"][0]["schema"],
            "same OpenAPI schema as the CRD {}",
            crd.spec.names.plural
        );
    }
}

#[test]
fn manifests_kcp_match_the_generated_schemas_and_export() {
    common::assert_up_to_date(common::Generated::Kcp);
}
