//! The state of a fresh sharded kcp, saved once per machine and kcp build, that
//! later starts of the kcp backend begin from (a restart on it is ready in about
//! 10 s instead of the 50 s a fresh kcp spends bootstrapping its shards).
//!
//! It is the work dir's `.kcp*` directories (certificates, the shards' and the
//! cache server's etcd data) of a kcp stopped right after it first was ready to
//! test, without its logs and its ready-to-test mark. sharded-test-server writes
//! everything that names the work dir (the front-proxy's mapping, the cache
//! server's kubeconfig) again at each start, and reads the token file anew, so a
//! copy serves any work dir and any users.

use anyhow::Context;
use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// Where the saved state lives, and the build it belongs to.
pub(super) struct SavedState {
    dir: PathBuf,
    stamp: String,
}

impl SavedState {
    /// The saved state for the kcp binaries in `bin`: beside them, in
    /// `e2e-state`, valid while the binaries are the ones it was made with.
    pub(super) fn of(bin: &Path) -> anyhow::Result<Self> {
        let mut stamp = String::new();
        for b in [
            "sharded-test-server",
            "kcp",
            "kcp-front-proxy",
            "cache-server",
        ] {
            let meta = std::fs::metadata(bin.join(b)).with_context(|| b.to_string())?;
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or_default();
            stamp.push_str(&format!("{b} {} {modified}\n", meta.len()));
        }
        let parent = bin.parent().unwrap_or(bin);
        Ok(Self {
            dir: parent.join("e2e-state"),
            stamp,
        })
    }

    fn stamp_file(&self) -> PathBuf {
        self.dir.join("stamp")
    }

    /// Whether a complete state of these binaries is saved.
    pub(super) fn usable(&self) -> bool {
        std::fs::read_to_string(self.stamp_file()).is_ok_and(|s| s == self.stamp)
    }

    /// Copies the saved state into the work dir `work` (which holds none).
    pub(super) fn restore_into(&self, work: &Path) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(".kcp") {
                copy_tree(&entry.path(), work)?;
            }
        }
        Ok(())
    }

    /// Saves the state of the stopped kcp in `work` (replacing what was saved):
    /// written beside, then renamed into place, the stamp last.
    pub(super) fn save_from(&self, work: &Path) -> anyhow::Result<()> {
        let tmp = self.dir.with_extension("partial");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        for entry in std::fs::read_dir(work)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(".kcp") {
                copy_tree(&entry.path(), &tmp)?;
            }
        }
        let _ = std::fs::remove_file(tmp.join(".kcp/ready-to-test"));
        remove_logs(&tmp)?;
        self.discard();
        std::fs::rename(&tmp, &self.dir)
            .with_context(|| format!("renaming {} into place", tmp.display()))?;
        std::fs::write(self.stamp_file(), &self.stamp)?;
        Ok(())
    }

    /// Forgets the saved state (the next start makes a fresh kcp and saves it).
    pub(super) fn discard(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `cp -a FROM INTO/` (permissions, and the etcd data as it is).
fn copy_tree(from: &Path, into: &Path) -> anyhow::Result<()> {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(into)
        .status()
        .context("running cp")?;
    anyhow::ensure!(
        status.success(),
        "copying {} into {} failed ({status})",
        from.display(),
        into.display()
    );
    Ok(())
}

/// Removes the `*.log` files under `dir`: each start writes its own.
fn remove_logs(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            remove_logs(&path)?;
        } else if path.extension().is_some_and(|e| e == "log") {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}
