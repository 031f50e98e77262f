//! Benchmarks of the admission hot path: parsing a review, label/strict evaluation,
//! field path resolution.

use chrono::Utc;
use criterion::{Criterion, criterion_group, criterion_main};
use futures::executor::block_on;
use holdfast_shared::{
    fieldpath::FieldPath,
    labels::{ProtectionLabel, ProtectionLabels},
    policy::{NoPolicies, PolicyConfig, evaluate},
    review::parse_review,
};
use serde_json::json;
use std::hint::black_box;

fn review(op: &str, labels: serde_json::Value) -> Vec<u8> {
    let obj = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns",
        "labels": labels, "annotations": {"a": "b"}}, "data": {"k": "v".repeat(2048)}});
    serde_json::to_vec(
        &json!({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{
        "uid":"u","kind":{"group":"","version":"v1","kind":"ConfigMap"},
        "resource":{"group":"","version":"v1","resource":"configmaps"},
        "name":"cm","namespace":"ns","operation":op,"userInfo":{"username":"alice"},
        "object": if op == "DELETE" { serde_json::Value::Null } else { obj.clone() },
        "oldObject": obj}}),
    )
    .unwrap_or_default()
}

fn bench(c: &mut Criterion) {
    let cfg = PolicyConfig {
        labels: ProtectionLabels::with_extra(
            [
                "resourcetemplate.karmada.io/deletion-protected=Always",
                "orkestra.io/deletion-protection=true",
            ]
            .iter()
            .filter_map(|s| s.parse::<ProtectionLabel>().ok()),
        ),
        strict: true,
        ..PolicyConfig::default()
    };
    let protected = review(
        "DELETE",
        json!({"holdfast.dev/protected": "Always", "app": "db"}),
    );
    let plain = review("DELETE", json!({"app": "db"}));
    let update = review("UPDATE", json!({"holdfast.dev/protected": "Always"}));

    c.bench_function(
        "parse_review+evaluate delete protected (2 KiB object)",
        |b| {
            b.iter(|| {
                let req = parse_review(black_box(&protected)).ok();
                req.map(|r| block_on(evaluate(&r, &cfg, &NoPolicies, Utc::now())))
            })
        },
    );
    c.bench_function("parse_review+evaluate delete unprotected", |b| {
        b.iter(|| {
            let req = parse_review(black_box(&plain)).ok();
            req.map(|r| block_on(evaluate(&r, &cfg, &NoPolicies, Utc::now())))
        })
    });
    c.bench_function("parse_review+evaluate strict update", |b| {
        b.iter(|| {
            let req = parse_review(black_box(&update)).ok();
            req.map(|r| block_on(evaluate(&r, &cfg, &NoPolicies, Utc::now())))
        })
    });
    if let Ok(req) = parse_review(&protected) {
        c.bench_function("evaluate only (parsed) delete protected", |b| {
            b.iter(|| block_on(evaluate(black_box(&req), &cfg, &NoPolicies, Utc::now())))
        });
    }

    let vm = json!({"spec": {"vpcRef": {"name": "my-vpc"},
        "disks": (0..16).map(|i| json!({"vpcRef": {"name": format!("vpc-{i}")}})).collect::<Vec<_>>()}});
    if let (Ok(simple), Ok(list)) = (
        FieldPath::parse(".spec.vpcRef.name"),
        FieldPath::parse(".spec.disks[*].vpcRef.name"),
    ) {
        c.bench_function("fieldpath .spec.vpcRef.name references", |b| {
            b.iter(|| simple.references(black_box(&vm), "my-vpc"))
        });
        c.bench_function(
            "fieldpath .spec.disks[*].vpcRef.name references (16 items)",
            |b| b.iter(|| list.references(black_box(&vm), "vpc-15")),
        );
    }
    c.bench_function("fieldpath parse", |b| {
        b.iter(|| FieldPath::parse(black_box(".spec.disks[*].vpcRef.name")))
    });
}

fn bench_indexes(c: &mut Criterion) {
    use holdfast_shared::{
        api::common::GroupResource,
        index::{DependentsIndex, ObjectId, Reference},
        registry::{PolicyKey, TargetIndex},
    };
    use std::sync::Arc;

    // 10,000 rules over 1,000 resources.
    let idx: TargetIndex<u32> = TargetIndex::default();
    let entries = (0..10_000u32)
        .map(|i| {
            (
                PolicyKey::new(&format!("lc-{}", i % 1000), &format!("rule-{i}")),
                vec![GroupResource::new(
                    "network.test.io",
                    format!("r{}", i % 1000),
                )],
                Arc::new(i),
            )
        })
        .collect();
    idx.reset(entries);
    let hit = GroupResource::new("network.test.io", "r500");
    let miss = GroupResource::new("network.test.io", "nope");
    c.bench_function("registry find_by_target hit (10k rules)", |b| {
        b.iter(|| idx.find(black_box(&hit)))
    });
    c.bench_function("registry find_by_target miss", |b| {
        b.iter(|| idx.find(black_box(&miss)))
    });

    for n in [10usize, 1_000, 10_000] {
        let index = DependentsIndex::default();
        for i in 0..n {
            let id = ObjectId {
                cluster: "lc".into(),
                resource: "virtualmachines.compute.test.io".into(),
                namespace: "default".into(),
                name: format!("vm-{i}").into(),
            };
            let r = Reference {
                target: "vpcs.network.test.io".into(),
                name: format!("vpc-{}", i % 100),
                namespace: "default".into(),
            };
            index.apply(&id, "VirtualMachine", false, &[r]);
        }
        c.bench_function(
            &format!("index lookup unreferenced ({n} dependents)"),
            |b| {
                b.iter(|| {
                    index.lookup(
                        "lc",
                        "vpcs.network.test.io",
                        black_box("free"),
                        Some("default"),
                    )
                })
            },
        );
        c.bench_function(&format!("index lookup referenced ({n} dependents)"), |b| {
            b.iter(|| {
                index.lookup(
                    "lc",
                    "vpcs.network.test.io",
                    black_box("vpc-7"),
                    Some("default"),
                )
            })
        });
    }
}

criterion_group!(benches, bench, bench_indexes);
criterion_main!(benches);
