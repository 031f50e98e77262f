//! The repository stands alone: no test, script or document refers to a path outside
//! it (the recorded captures live in `test/captures`, the contract in `docs/design.md`).

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the shared crate sits inside the repository")
        .to_path_buf()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name == "target" || name.starts_with('.') && name != ".ci" {
                continue;
            }
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn nothing_refers_outside_the_repository() {
    // Built from pieces so this file does not match itself.
    let outside = [
        format!("{}/shared/{}", "..", "apiserver-captures"),
        format!("{}/shared/{}", "..", "seeds"),
        format!("{}/shared/{}", "..", "DESIGN.md"),
        format!("{}/shared/{}", "..", "kcp-facts.md"),
        format!("{}/../shared/", ".."),
    ];
    let mut files = Vec::new();
    walk(&repo_root(), &mut files);
    assert!(files.len() > 50, "walked too few files: {}", files.len());
    let mut offenders = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // binary
        };
        for needle in &outside {
            if text.contains(needle.as_str()) {
                offenders.push(format!("{} mentions {needle}", file.display()));
            }
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn the_fixtures_tests_read_are_in_the_repository() {
    let root = repo_root();
    for path in [
        "test/captures/README.md",
        "test/captures/admission",
        "test/captures/rest",
        "test/captures/kubectl",
        "test/captures/holes/README.md",
        "docs/design.md",
    ] {
        assert!(
            root.join(path).exists(),
            "{path} is missing from the repository"
        );
    }
}
