//! The Landlock backend's stand-in for the read-only protected paths it cannot make inside the
//! project it grants whole (`Plan::restore`): what each protected path holds is read when the
//! session starts (the agents' and editors' settings, the hook managers' files, the hooks, what
//! the `.envrc` loads: small files), and once every process of the session has ended, a path
//! the jail changed, made or removed is put back as it was, the jail's version kept aside in
//! the state directory, named in one line and in the audit log. Between the two, an agent
//! started outside in the project reads what the jail wrote (docs/security-model.md).

use crate::plan::ProjectRestore;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What a session keeps of the protected paths, in all: a path beyond it is not kept (said at
/// the start), since putting it back would need what was not read.
const MAX_BYTES: u64 = 64 << 20;
const MAX_ENTRIES: usize = 20_000;

/// A protected path's contents: what is put back.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File {
        data: Vec<u8>,
        mode: u32,
    },
    Dir {
        mode: u32,
        entries: Vec<(OsString, Node)>,
    },
    Link(PathBuf),
    /// A socket, a device, a FIFO: left as it is.
    Other,
}

/// The protected paths as the session found them (None: missing), and where each one's
/// parent really was.
pub struct Snapshot {
    kept: Vec<(PathBuf, Option<PathBuf>, Option<Node>)>,
    aside: PathBuf,
}

struct Budget {
    bytes: u64,
    entries: usize,
}

impl Budget {
    fn take(&mut self, bytes: u64) -> bool {
        self.entries += 1;
        self.bytes += bytes;
        self.entries <= MAX_ENTRIES && self.bytes <= MAX_BYTES
    }
}

fn read_node(p: &Path, budget: &mut Budget) -> std::io::Result<Option<Node>> {
    let meta = match std::fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mode = meta.permissions().mode() & 0o7777;
    let ft = meta.file_type();
    let too_big = || std::io::Error::new(std::io::ErrorKind::InvalidData, "more than 64 MiB or 20000 entries");
    if ft.is_symlink() {
        if !budget.take(0) {
            return Err(too_big());
        }
        return Ok(Some(Node::Link(std::fs::read_link(p)?)));
    }
    if ft.is_file() {
        if !budget.take(meta.len()) {
            return Err(too_big());
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(p)?;
        let mut data = vec![];
        f.take(MAX_BYTES).read_to_end(&mut data)?;
        return Ok(Some(Node::File { data, mode }));
    }
    if ft.is_dir() {
        if !budget.take(0) {
            return Err(too_big());
        }
        let mut names: Vec<OsString> = std::fs::read_dir(p)?.flatten().map(|e| e.file_name()).collect();
        names.sort();
        let mut entries = vec![];
        for n in names {
            if let Some(node) = read_node(&p.join(&n), budget)? {
                entries.push((n, node));
            }
        }
        return Ok(Some(Node::Dir { mode, entries }));
    }
    Ok(Some(Node::Other))
}

/// Where `p`'s parent really is now (None: it cannot be resolved).
fn real_parent(p: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(p.parent()?).ok()
}

/// Reads every protected path before the session. Returns the warnings for the paths that
/// could not be kept (too large, unreadable): they are not put back.
pub fn take(r: &ProjectRestore) -> (Snapshot, Vec<String>) {
    let mut budget = Budget { bytes: 0, entries: 0 };
    let mut kept = vec![];
    let mut warnings = vec![];
    for p in &r.paths {
        match read_node(p, &mut budget) {
            Ok(node) => kept.push((p.clone(), real_parent(p), node)),
            Err(e) => warnings.push(format!(
                "{}: not kept to be put back at exit ({e}): the Landlock backend cannot make it read-only",
                p.display()
            )),
        }
    }
    (Snapshot { kept, aside: r.aside.clone() }, warnings)
}

fn write_node(p: &Path, n: &Node, own_mode: Option<u32>) -> std::io::Result<()> {
    match n {
        Node::File { data, mode } => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(own_mode.unwrap_or(*mode))
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(p)?;
            f.write_all(data)?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(own_mode.unwrap_or(*mode)))
        }
        Node::Dir { mode, entries } => {
            std::fs::DirBuilder::new().mode(0o700).create(p)?;
            for (name, e) in entries {
                write_node(&p.join(name), e, own_mode)?;
            }
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(own_mode.map_or(*mode, |_| 0o700)))
        }
        Node::Link(to) => std::os::unix::fs::symlink(to, p),
        Node::Other => Ok(()),
    }
}

fn remove(p: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// After the session (every process of it gone): each path that differs from what the
/// session found is put back, the jail's version kept in `aside` under the path's name
/// relative to `project` (or its full path). Returns the paths put back, and those that could
/// not be (with why).
pub fn restore(s: &Snapshot, project: &Path, others: &[(PathBuf, Option<&[u8]>)]) -> (Vec<PathBuf>, Vec<String>) {
    let (mut done, mut failed) = (vec![], vec![]);
    for (p, parent, before) in &s.kept {
        let mut budget = Budget { bytes: 0, entries: 0 };
        let now = read_node(p, &mut budget);
        if matches!(&now, Ok(n) if n == before) {
            continue;
        }
        // A placeholder another session of the project made since (a userns session started
        // during this one), still as it made it: its own, removed by the lock when the last
        // session ends (seventh outside look, P1), not a change of this jail's.
        if before.is_none() && others.iter().any(|(q, made)| q == p && untouched(&now, *made)) {
            continue;
        }
        // A parent the jail replaced by a link would carry the writes elsewhere.
        if parent.is_some() && real_parent(p) != *parent {
            failed.push(format!("{}: its directory was moved or replaced; not put back", p.display()));
            continue;
        }
        // A repository's config keeps what the user's git runs nothing through (a remote
        // added, `push -u`'s tracking), as the git guard keeps it under the namespace backend.
        let config = match &now {
            Ok(Some(n)) => config_kept(p, project, before.as_ref(), n),
            _ => None,
        };
        if let Some((bytes, dropped)) = &config {
            if dropped.is_empty() {
                let mode = match before {
                    Some(Node::File { mode, .. }) => *mode,
                    _ => 0o644,
                };
                match write_node(p, &Node::File { data: bytes.clone(), mode }, None) {
                    Ok(()) => {}
                    Err(e) => failed.push(format!("{}: not put back: {e}", p.display())),
                }
                continue;
            }
        }
        let rel = p
            .strip_prefix(project)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| p.components().filter(|c| matches!(c, std::path::Component::Normal(_))).collect());
        let keep = s.aside.join(&rel);
        let result = (|| -> std::io::Result<()> {
            if let Ok(Some(n)) = &now {
                if let Some(d) = keep.parent() {
                    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(d)?;
                }
                let _ = remove(&keep);
                // Kept for the user to look at, never to run: no mode bit of the jail's.
                write_node(&keep, n, Some(0o600))?;
            }
            remove(p)?;
            match (&config, before) {
                // The entries that may stay, the rest left out (the jail's whole file is aside).
                (Some((bytes, _)), b) => {
                    let mode = match b {
                        Some(Node::File { mode, .. }) => *mode,
                        _ => 0o644,
                    };
                    write_node(p, &Node::File { data: bytes.clone(), mode }, None)?;
                }
                (None, Some(b)) => write_node(p, b, None)?,
                (None, None) => {}
            }
            Ok(())
        })();
        match result {
            Ok(()) => done.push(p.clone()),
            Err(e) => failed.push(format!("{}: not put back: {e}", p.display())),
        }
    }
    (done, failed)
}

/// For a repository's config (`.../.git/config`) the jail wrote: what to install (the config
/// the session found with the entries the jail added that run nothing, as the git guard keeps
/// them) and the entries left out. None where it is no repository's config, or where the jail
/// changed or removed an entry that was there: then all of it is put back.
fn config_kept(p: &Path, project: &Path, before: Option<&Node>, now: &Node) -> Option<(Vec<u8>, Vec<String>)> {
    use super::guard::gitconfig::{keep_allowed, Base, Place};
    let gitdir = p.parent()?;
    if p.file_name()? != "config" || gitdir.file_name()? != ".git" {
        return None;
    }
    let Node::File { data, .. } = now else { return None };
    let base = match before {
        Some(Node::File { data, .. }) => Base::Existing(data),
        None => Base::New,
        Some(_) => return None,
    };
    keep_allowed(data, base, &Place { gitdir, root: project }).ok()
}

/// The session's outcome for the user: one line naming what was put back and where the
/// jail's versions are, and a record of each in the audit log.
/// Whether `now` is still what a placeholder was made with (`made`: its bytes, or None for an
/// empty directory).
fn untouched(now: &std::io::Result<Option<Node>>, made: Option<&[u8]>) -> bool {
    match (now, made) {
        (Ok(Some(Node::File { data, .. })), Some(bytes)) => data == bytes,
        (Ok(Some(Node::Dir { entries, .. })), None) => entries.is_empty(),
        _ => false,
    }
}

pub fn report(s: &Snapshot, project: &Path, done: &[PathBuf], failed: &[String], audit: &crate::audit::AuditLog) {
    for p in done {
        let mut r = audit.record("fs_denied");
        r.check = Some(format!(
            "landlock: a protected path the jail changed, put back at exit (its version: {})",
            s.aside.display()
        ));
        r.path = Some(p.display().to_string());
        audit.write(&r);
    }
    if !done.is_empty() {
        let names: Vec<String> =
            done.iter().map(|p| p.strip_prefix(project).unwrap_or(p).display().to_string()).collect();
        eprintln!(
            "agent-sandbox: the jail changed protected files; put back as they were: {} (the jail's versions: {})",
            names.join(", "),
            s.aside.display()
        );
    }
    for f in failed {
        eprintln!("agent-sandbox: warning: {f}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seventh outside look, P1: a userns session started while this Landlock one ran made
    /// placeholders the snapshot did not hold; they are the other session's (its lock removes
    /// them), unless the jail wrote into one, which is then put back like any change.
    #[test]
    fn another_sessions_placeholders_are_left_to_it_unless_written() {
        let d = tempfile::tempdir().expect("tmp");
        let project = d.path().join("p");
        std::fs::create_dir(&project).expect("mkdir");
        let (envrc, vscode, husky) = (project.join(".envrc"), project.join(".vscode"), project.join(".husky"));
        let r = ProjectRestore { paths: vec![envrc.clone(), vscode.clone(), husky.clone()], aside: d.path().join("a") };
        let (s, _) = take(&r);
        std::fs::write(&envrc, "").expect("placeholder");
        std::fs::create_dir(&vscode).expect("placeholder");
        std::fs::create_dir(&husky).expect("placeholder");
        std::fs::write(husky.join("pre-commit"), "#!/bin/sh\nevil\n").expect("the jail's write");
        let others: Vec<(PathBuf, Option<&[u8]>)> =
            vec![(envrc.clone(), Some(b"")), (vscode.clone(), None), (husky.clone(), None)];
        let (done, failed) = restore(&s, &project, &others);
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(done, std::slice::from_ref(&husky), "only the one the jail wrote into");
        assert!(envrc.exists() && vscode.is_dir() && !husky.exists());
        let (done, _) = restore(&s, &project, &[]);
        assert_eq!(done, [envrc, vscode], "without the record they are this jail's changes");
    }
}
