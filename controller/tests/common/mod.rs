//! What the drift tests share: a directory of the repository compared with the
//! files the code generates for it. Each test crate uses one of the variants.
#![allow(dead_code)]

use std::path::PathBuf;

/// A directory the code generates.
pub enum Generated {
    /// `manifests/crds/` (hack/gen-crds.sh).
    Crds,
    /// `manifests/kcp/` (`holdfast-controller kcp-manifests`).
    Kcp,
}

/// Fails the test, naming every difference, unless the directory holds exactly
/// what the code generates: no file that differs or is missing, and no stale
/// generated file (one starting with the generated header) the code no longer
/// makes.
pub fn assert_up_to_date(which: Generated) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let (dir, files, header, what, fix) = match which {
        Generated::Crds => (
            root.join("manifests/crds"),
            holdfast_controller::crds::render_files().expect("CRDs render"),
            holdfast_controller::crds::GENERATED_HEADER,
            "CRD",
            "manifests/crds is out of date with the API types in shared/src/pure/api; \
             run hack/gen-crds.sh and commit the result",
        ),
        Generated::Kcp => (
            root.join("manifests/kcp"),
            holdfast_controller::kcp::manifests::render_files().expect("render"),
            holdfast_controller::kcp::manifests::GENERATED_HEADER,
            "manifest",
            "manifests/kcp is out of date with shared/src/pure/api; run \
             `cargo run -p holdfast-controller -- kcp-manifests --output-dir manifests/kcp`",
        ),
    };
    let mut problems = Vec::new();
    for (name, want) in &files {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(have) if &have == want => {}
            Ok(_) => problems.push(format!("{name} differs from the generated {what}")),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}; {fix}", dir.display()));
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let generated = std::fs::read_to_string(entry.path()).is_ok_and(|c| c.starts_with(header));
        if generated && !files.iter().any(|(n, _)| *n == name) {
            problems.push(format!("{name} is a stale generated file"));
        }
    }
    assert!(problems.is_empty(), "{fix}:\n  {}", problems.join("\n  "));
}
