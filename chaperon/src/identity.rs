//! Which directory a project is, so that a job runs in the directory its session ran in and
//! not whatever the project's path names when it starts (a project inside another session's
//! project can be renamed, or a symlink put in its place, by that session's jail).

use serde::{Deserialize, Serialize};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Which directory a project is: its device and inode, and the boot of the host that looked
/// (device numbers of a network file system are the host's own; inode numbers are the
/// server's, the same on every host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectId {
    pub dev: u64,
    pub ino: u64,
    pub boot: String,
}

impl ProjectId {
    /// The directory `path` names now. `path` must be canonical: it is opened without
    /// following a symlink anywhere on the way.
    pub fn of(path: &Path) -> Result<ProjectId, String> {
        use std::os::unix::fs::MetadataExt;
        let dir = open_dir_exactly(path)?;
        let m = dir.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(ProjectId { dev: m.dev(), ino: m.ino(), boot: boot_id() })
    }

    /// Whether `now` (looked up on this host) is this directory.
    pub fn is(&self, now: &ProjectId) -> bool {
        let same_host = !self.boot.is_empty() && self.boot == now.boot;
        now.ino == self.ino && (!same_host || now.dev == self.dev)
    }

    /// This directory as an identity looked up here (the plan's look at it: `dev`, `ino`).
    pub fn here(dev: u64, ino: u64) -> ProjectId {
        ProjectId { dev, ino, boot: boot_id() }
    }

    /// Whether `path` still names this directory; why not otherwise.
    pub fn check(&self, path: &Path) -> Result<(), String> {
        let now = ProjectId::of(path).map_err(|e| format!("the job's project {}: {e}", path.display()))?;
        if !self.is(&now) {
            return Err(format!(
                "the job's project {} is no longer the directory it was submitted from (inode {} on device {}, \
                 now inode {} on device {}): it was replaced since; the job does not run elsewhere",
                path.display(),
                self.ino,
                self.dev,
                now.ino,
                now.dev
            ));
        }
        Ok(())
    }
}

/// The directory `path` names, opened without following a symlink in any component: the path
/// the kernel reports for the descriptor must be `path` itself.
fn open_dir_exactly(path: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if real != path {
        return Err(format!("{} is reached through a symlink (it leads to {})", path.display(), real.display()));
    }
    Ok(f)
}

/// This boot's id, empty where the kernel does not say.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_is_the_directory_it_was_not_one_in_its_place() {
        let dir = std::env::temp_dir().join(format!("chaperon-project-id-{}", std::process::id()));
        let p = dir.join("p");
        std::fs::create_dir_all(&p).unwrap();
        let p = std::fs::canonicalize(&p).unwrap();
        let id = ProjectId::of(&p).unwrap();
        assert!(id.check(&p).is_ok());
        std::fs::rename(&p, dir.join("p-old")).unwrap();
        std::fs::create_dir(&p).unwrap();
        assert!(id.check(&p).unwrap_err().contains("no longer the directory"), "another directory in its place");
        std::fs::remove_dir(&p).unwrap();
        std::os::unix::fs::symlink(dir.join("p-old"), &p).unwrap();
        assert!(id.check(&p).is_err(), "the same directory through a symlink");
        assert!(ProjectId::of(&dir.join("p/../p-old")).is_err(), "a path that is not canonical");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
