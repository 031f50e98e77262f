//! The admission handler without the HTTP layer: a recorded DELETE AdmissionReview in,
//! response body out, for an allowed and for a denied (label-protected) delete. The
//! difference between the two rows is what a denial adds (message, metrics, the
//! rate-limited log and Event bookkeeping).
//!
//! `cargo bench -p holdfast-webhook --bench admission -- --warm-up-time 1 --measurement-time 3`

use std::{hint::black_box, path::Path, sync::Arc, time::Duration};

use criterion::{Criterion, criterion_group, criterion_main};
use holdfast_shared::{policy::PolicyConfig, topology::Topology};
use holdfast_webhook::{admission::Admission, metrics::Metrics, view};
use serde_json::Value;

fn review(name: &str, protected: bool) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../test/captures/admission")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("capture");
    let capture: Value = serde_json::from_str(&text).expect("capture JSON");
    let mut review = capture["review"].clone();
    if protected {
        review["request"]["oldObject"]["metadata"]["labels"]["holdfast.dev/protected"] =
            "true".into();
    }
    serde_json::to_vec(&review).expect("review")
}

fn admission(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // The Event sink spawns its sender task on this runtime.
    let _runtime = rt.enter();
    let metrics = Metrics::new().expect("metrics");
    let missing = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/no-such-kubeconfig");
    let view = rt.block_on(view::WebhookView::new(
        view::ViewOptions {
            virtual_workspace_kubeconfig: None,
            topology: Topology::Kubernetes,
            kubeconfig: Some(&missing),
            label_only: true,
            mode: view::DependentsMode::Watch,
            label_keys: vec!["holdfast.dev/protected".into()],
            apiexport: String::new(),
            cascading_keys: vec!["holdfast.dev/protected".into()],
        },
        metrics.clone(),
    ));
    let handler = Arc::new(Admission::new(
        PolicyConfig::default(),
        view,
        metrics,
        Duration::from_secs(60),
    ));
    let allowed = review("011-delete-configmaps-plain.json", false);
    let denied = review("014-delete-configmaps-protected.json", true);
    for (name, body) in [
        ("DELETE allowed", &allowed),
        ("DELETE denied (label)", &denied),
    ] {
        c.bench_function(&format!("review {name}"), |b| {
            b.iter(|| {
                rt.block_on(
                    handler.review(black_box(body), holdfast_webhook::admission::Route::Plain),
                )
                .expect("a review")
            })
        });
    }
}

criterion_group!(benches, admission);
criterion_main!(benches);
