//! Memory of the dependents index: 1,000,000 references across 1,000 logical
//! clusters, built in-process exactly as the webhook's watches build it; prints the
//! resident-set growth per reference. See docs/performance.md.

use holdfast_shared::index::{DependentsIndex, ObjectId, Reference};

fn rss_kib() -> u64 {
    holdfast_e2e::rss_kib(std::process::id())
}

fn main() {
    let total: usize = std::env::var("HOLDFAST_BENCH_REFERENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let clusters = 1_000usize;
    let before = rss_kib();
    let index = DependentsIndex::default();
    let started = std::time::Instant::now();
    for i in 0..total {
        let cluster = format!("lc-{:04}", i % clusters);
        let id = ObjectId {
            cluster: cluster.as_str().into(),
            resource: "virtualmachines.compute.test.io".into(),
            namespace: "default".into(),
            name: format!("vm-{i}").into(),
        };
        let r = Reference {
            target: "vpcs.network.test.io".into(),
            name: format!("vpc-{}", (i / clusters) % 100),
            namespace: "default".into(),
        };
        index.apply(&id, "VirtualMachine", false, &[r]);
    }
    let built = started.elapsed();
    let after = rss_kib();
    let per_ref = (after.saturating_sub(before) * 1024) as f64 / total as f64;
    let probe = std::time::Instant::now();
    let hits = index
        .lookup("lc-0007", "vpcs.network.test.io", "vpc-3", Some("default"))
        .len();
    println!(
        "references: {} across {clusters} logical clusters",
        index.len()
    );
    println!(
        "built in {built:?}; one lookup ({hits} hits) in {:?}",
        probe.elapsed()
    );
    println!("RSS before {before} KiB, after {after} KiB: {per_ref:.0} bytes per reference");
}
