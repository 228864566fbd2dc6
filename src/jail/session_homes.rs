//! The session directories the Landlock backend points the agent at instead of its own
//! (`plan::agent_home::landlock`): made before the session from the plan's entries, removed
//! after it (after the merge of their copies), so nothing the jail wrote there is left for the
//! agent outside.

use crate::plan::agent_home::landlock::{HomeEntry, SessionHome};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The largest settings file copied: a larger one is left out (the agent starts without it).
const MAX: u64 = 16 << 20;

/// Makes each session directory (a leftover of a killed launcher with the same name is
/// replaced).
pub fn make(homes: &[SessionHome]) -> std::io::Result<()> {
    for h in homes {
        remove_one(&h.root);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&h.root).map_err(|e| annotate(&h.root, e))?;
        for (path, entry) in &h.entries {
            match entry {
                HomeEntry::Dir => std::fs::DirBuilder::new().mode(0o700).create(path),
                HomeEntry::Link(to) => std::os::unix::fs::symlink(to, path),
                HomeEntry::Copy(from) => copy(from, path),
            }
            .map_err(|e| annotate(path, e))?;
        }
    }
    Ok(())
}

/// Removes each session directory, without following a link in it.
pub fn remove(homes: &[SessionHome]) {
    for h in homes {
        remove_one(&h.root);
    }
}

fn remove_one(root: &Path) {
    if std::fs::symlink_metadata(root).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_dir_all(root);
    } else {
        let _ = std::fs::remove_file(root);
    }
}

/// The user's file `from` (not followed if a link, a regular file of at most `MAX`) into a new
/// file `to` of mode 0600; one that cannot be copied is left out.
fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(from)
    else {
        return Ok(());
    };
    let meta = f.metadata()?;
    if !meta.is_file() || meta.len() > MAX {
        return Ok(());
    }
    let mut data = vec![];
    f.take(MAX).read_to_end(&mut data)?;
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(to)?;
    out.write_all(&data)
}

fn annotate(p: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}
