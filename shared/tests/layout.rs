//! The two halves of holdfast-shared stay apart: nothing in `src/pure` holds an
//! API client, a watch, a runtime or an executor (an evaluation may await what
//! a `ClusterView` looks up; the view is the caller's), or reaches into
//! `src/plumbing` (whose modules are also re-exported at the crate's root, so a
//! path is checked by name, not by the compiler).

use std::path::{Path, PathBuf};

/// What the pure half must not name.
const PLUMBING: [&str; 13] = [
    "kube::Client",
    "kube::Api",
    "Api<",
    "Client::",
    "tokio",
    "hyper",
    "crate::plumbing",
    "crate::clients",
    "crate::endpoints",
    "crate::kcp::",
    "crate::watch",
    "crate::backoff",
    "crate::runtime",
];

/// Every `.rs` file below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_pure_half_names_no_plumbing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pure");
    let files = sources(&root);
    assert!(files.len() > 20, "{} files in src/pure", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{e}"));
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for word in PLUMBING {
                if code.contains(word) {
                    found.push(format!("{}:{}: {word}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the pure half names plumbing:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_root_module_lives_in_one_half() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_else(|e| panic!("{e}"));
    let top: Vec<String> = std::fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut top = top;
    top.sort();
    assert_eq!(
        top,
        ["lib.rs", "plumbing", "pure"],
        "src/ holds the two halves only"
    );
    assert!(lib.contains("pub mod plumbing;") && lib.contains("pub mod pure;"));
}
