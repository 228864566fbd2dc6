//! Removing a job directory through descriptors: the directory is found by one name below a
//! descriptor of `jobs/` opened without following a symlink, and everything in it is removed
//! with `unlinkat` below its own descriptor, so no path is resolved again on the way. A
//! `jobs/` that is a symlink, a job directory that is one, or a symlink inside either, leads
//! nowhere: a link is removed as a link, never followed.

use nix::dir::Dir;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// How deep a tree is removed: a job directory holds files only; anything deeper is left.
const MAX_DEPTH: usize = 8;

/// `dir` (a directory, never through a symlink in its last component) as a descriptor to
/// remove below.
pub fn open_dir(dir: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
}

/// Opens `name` below `parent` as a directory, never following a symlink.
pub fn open_below(parent: &impl AsFd, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(parent, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
}

/// Removes `name` below `parent`: a file or a symlink is unlinked, a directory emptied and
/// removed. Whether it is gone.
pub fn remove_tree_at(parent: &impl AsFd, name: &OsStr) -> bool {
    remove_at(parent, name, 0)
}

fn remove_at(parent: &impl AsFd, name: &OsStr, depth: usize) -> bool {
    if name.is_empty() || name == "." || name == ".." || name.as_encoded_bytes().contains(&b'/') {
        return false;
    }
    let dir = match open_below(parent, name) {
        Ok(d) => d,
        // Not a directory (a file, or a symlink: ELOOP with O_NOFOLLOW): the name goes.
        Err(nix::errno::Errno::ENOTDIR | nix::errno::Errno::ELOOP) => {
            return unlinkat(parent, name, UnlinkatFlags::NoRemoveDir).is_ok();
        }
        Err(_) => return false,
    };
    if depth < MAX_DEPTH {
        remove_children(&dir, depth);
    }
    unlinkat(parent, name, UnlinkatFlags::RemoveDir).is_ok()
}

/// Removes what the directory `dir` holds.
pub fn remove_children(dir: &OwnedFd, depth: usize) {
    let names: Vec<std::ffi::OsString> = {
        let Ok(dup) = dir.try_clone() else { return };
        let Ok(mut listing) = Dir::from_fd(dup) else { return };
        listing
            .iter()
            .flatten()
            .map(|e| <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(e.file_name().to_bytes()).to_os_string())
            .filter(|n| n != "." && n != "..")
            .collect()
    };
    for n in names {
        remove_at(dir, &n, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_removed_below_its_descriptor_and_no_symlink_is_followed() {
        let base = std::env::temp_dir().join(format!("chaperon-removeat-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (jobs, outside) = (base.join("jobs"), base.join("outside"));
        std::fs::create_dir_all(jobs.join("d/sub")).unwrap();
        std::fs::create_dir_all(outside.join("keep")).unwrap();
        std::fs::write(outside.join("keep/file"), "x").unwrap();
        std::fs::write(jobs.join("d/job.json"), "{}").unwrap();
        std::fs::write(jobs.join("d/sub/f"), "{}").unwrap();
        std::os::unix::fs::symlink(outside.join("keep"), jobs.join("d/link")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep"), jobs.join("e")).unwrap();
        let fd = open_dir(&jobs).unwrap();
        assert!(remove_tree_at(&fd, OsStr::new("d")));
        assert!(!jobs.join("d").exists());
        assert!(remove_tree_at(&fd, OsStr::new("e")), "a symlinked job directory: the link goes");
        assert!(outside.join("keep/file").exists(), "nothing followed through a link");
        for bad in ["..", ".", "", "a/b"] {
            assert!(!remove_tree_at(&fd, OsStr::new(bad)));
        }
        // A `jobs` that is itself a symlink is not opened.
        std::os::unix::fs::symlink(&outside, base.join("jobs2")).unwrap();
        assert!(open_dir(&base.join("jobs2")).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
