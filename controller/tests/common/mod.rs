//! What the drift tests share: the comparison of a directory with the files
//! the code generates.

use std::path::Path;

/// The differences between `dir` and the generated `files` (name, content):
/// a file that differs from what the code makes (`what` names it), one that is
/// missing, and a stale generated one (it starts with `header`) the code no
/// longer makes. `dir` must exist (`hint` says how to make it).
pub fn out_of_date(
    dir: &Path,
    files: &[(String, String)],
    header: &str,
    what: &str,
    hint: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, want) in files {
        match std::fs::read_to_string(dir.join(name)) {
            Ok(have) if &have == want => {}
            Ok(_) => problems.push(format!("{name} differs from the generated {what}")),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}; {hint}", dir.display()));
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let generated = std::fs::read_to_string(entry.path()).is_ok_and(|c| c.starts_with(header));
        if generated && !files.iter().any(|(n, _)| *n == name) {
            problems.push(format!("{name} is a stale generated file"));
        }
    }
    problems
}
