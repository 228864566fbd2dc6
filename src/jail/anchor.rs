//! Opens a path the plan checked exactly as it checked it (`plan::anchor`): where it really
//! was, below a root, following no symlink in any component (not even the last), never
//! above the root, and only if the inode there is still the one the plan's look found. The
//! bind, the Landlock rule or the placeholder is then made from that descriptor, so that a
//! link swapped in later changes nothing.

use crate::plan::anchor::Anchor;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, Mode};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// An `O_PATH` descriptor of `root/rel`: `rel` made of plain names only (`..` refused, as
/// is an absolute one), no symlink followed in any component, the last one included.
pub fn open_exact(root: impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(io::Error::from_raw_os_error(libc::EXDEV));
    }
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if rel.as_os_str().is_empty() {
        return openat(root.as_fd(), ".", flags, Mode::empty()).map_err(errno);
    }
    let resolve = ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS | ResolveFlag::RESOLVE_BENEATH;
    let fd = match openat2(root.as_fd(), rel, OpenHow::new().flags(flags).resolve(resolve)) {
        Ok(fd) => fd,
        // openat2 refused by a seccomp filter (the git guard's): one component at a time.
        Err(nix::Error::ENOSYS) => return walk(root, rel),
        Err(e) => return Err(errno(e)),
    };
    not_a_link(fd)
}

/// `open_exact` one component at a time, for where openat2 is not available.
fn walk(root: impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut cur = openat(root.as_fd(), ".", flags, Mode::empty()).map_err(errno)?;
    for c in rel.components() {
        cur = not_a_link(openat(&cur, c.as_os_str(), flags, Mode::empty()).map_err(errno)?)?;
    }
    Ok(cur)
}

/// O_PATH|O_NOFOLLOW opens a trailing symlink itself rather than failing: refuse it here.
fn not_a_link(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fstat(&fd).map_err(errno)?.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Ok(fd)
}

/// The anchored path, opened below `root` (`/`, or the host's tree under `/oldroot` in the
/// jail) as `open_exact` does, and still the inode the plan found; an error naming the path
/// and what changed otherwise.
pub fn open_anchored(root: impl AsFd, a: &Anchor) -> io::Result<OwnedFd> {
    let fd = open_as_checked(root, a, |root, rel| open_exact(root, rel))?;
    same_inode(&fd, a)?;
    Ok(fd)
}

/// The anchored regular file opened for reading (a seed's text): as `open_anchored` opens
/// it, never a FIFO's wait or a device's read.
pub fn open_anchored_file(root: impl AsFd, a: &Anchor) -> io::Result<std::fs::File> {
    let read = |root: &dyn AsFd, rel: &Path| -> io::Result<OwnedFd> {
        let dir = match rel.parent() {
            Some(p) => open_exact(root.as_fd(), p)?,
            None => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
        };
        let name = rel.file_name().ok_or_else(|| io::Error::from_raw_os_error(libc::EISDIR))?;
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
        openat(&dir, name, flags, Mode::empty()).map_err(errno)
    };
    let fd = open_as_checked(root, a, |root, rel| read(&root, rel))?;
    same_inode(&fd, a)?;
    if fstat(&fd).map_err(errno)?.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(changed(a, format!("{} is not a regular file now", a.real.display())));
    }
    Ok(fd.into())
}

/// A path the plan checked is no longer what it checked: the launch may be planned again
/// (`launch::session`), as nothing of the jail ran yet.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Changed(String);

fn changed(a: &Anchor, why: String) -> io::Error {
    changed_error(format!(
        "{} is no longer what the launch checked ({why}): another session's jail may be changing it",
        a.path.display()
    ))
}

/// An error saying a path the plan checked is no longer what it checked (`Changed`).
pub fn changed_error(said: String) -> io::Error {
    io::Error::other(Changed(said))
}

/// Whether `e` says a path the plan checked changed since (`Changed`).
pub fn is_changed(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Changed>())
}

/// `open` of the anchor's real path below `root`, its errors said as what changed.
fn open_as_checked<R: AsFd>(
    root: R,
    a: &Anchor,
    open: impl FnOnce(R, &Path) -> io::Result<OwnedFd>,
) -> io::Result<OwnedFd> {
    let rel = a.real.strip_prefix("/").map_err(|_| changed(a, "not an absolute path".into()))?;
    open(root, rel).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => changed(a, format!("a symbolic link is on the way to {} now", a.real.display())),
        Some(libc::ENOENT) => changed(a, format!("{} is gone", a.real.display())),
        Some(libc::ENOTDIR) => changed(a, format!("a directory on the way to {} is not one now", a.real.display())),
        // Not a change of the host's tree (no access, an I/O error): said as it is, and the
        // launch is not planned again for it.
        _ => io::Error::new(e.kind(), format!("{}: {e}", a.real.display())),
    })
}

fn same_inode(fd: &OwnedFd, a: &Anchor) -> io::Result<()> {
    let st = fstat(fd).map_err(errno)?;
    if (st.st_dev, st.st_ino) != (a.dev, a.ino) {
        return Err(changed(
            a,
            format!(
                "{} is another file now: inode {} on device {}, checked as inode {} on device {}",
                a.real.display(),
                st.st_ino,
                st.st_dev,
                a.ino,
                a.dev
            ),
        ));
    }
    Ok(())
}

/// The anchor of `path` as the launcher just made or found it at `real` (`fd`: opened
/// there with no link on the way): its inode now, checked to be what `real` opens from
/// `/` the same way, so that the jail later holds the entry to that very inode.
pub fn anchor_made(path: &Path, real: &Path, fd: &OwnedFd) -> io::Result<Anchor> {
    let st = fstat(fd).map_err(errno)?;
    let a = Anchor { path: path.to_path_buf(), real: real.to_path_buf(), dev: st.st_dev, ino: st.st_ino };
    open_anchored(std::fs::File::open("/")?, &a)?;
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("asb-jail-anchor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a/b/c")).unwrap();
        std::fs::write(d.join("a/b/c/f"), "x").unwrap();
        std::fs::create_dir_all(d.join("secret")).unwrap();
        std::fs::canonicalize(&d).unwrap()
    }

    fn root(d: &Path) -> OwnedFd {
        nix::fcntl::open(d, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).unwrap()
    }

    /// A link at any component, the last one included, is refused, by openat2 and by the
    /// component walk alike; so is `..` and an absolute path, which would leave the root.
    #[test]
    fn a_link_at_any_component_or_a_way_up_is_refused() {
        let d = scratch("walk");
        let r = root(&d);
        type Open = fn(&OwnedFd, &Path) -> io::Result<OwnedFd>;
        let opens: [Open; 2] = [|r, p| open_exact(r, p), |r, p| walk(r, p)];
        for open in opens {
            assert!(open(&r, Path::new("a/b/c/f")).is_ok());
            assert!(open(&r, Path::new("")).is_ok());
        }
        for (i, link) in ["a", "a/b", "a/b/c", "a/b/c/f"].iter().enumerate() {
            let d = scratch(&format!("walk{i}"));
            let p = d.join(link);
            std::fs::rename(&p, d.join("moved")).unwrap();
            std::os::unix::fs::symlink(d.join("moved"), &p).unwrap();
            let r = root(&d);
            for open in opens {
                let e = open(&r, Path::new("a/b/c/f")).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "a link at {link} was followed");
            }
            std::fs::remove_dir_all(&d).unwrap();
        }
        for rel in ["a/../secret", "../secret", "a/b/../../secret"] {
            let e = open_exact(&r, Path::new(rel)).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{rel} was opened");
        }
        assert!(open_exact(&r, &d.join("secret")).is_err(), "an absolute path left the root");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The anchored inode and no other: a directory put in its place, or a link to another,
    /// is refused with the path named.
    #[test]
    fn an_anchored_path_must_still_be_the_checked_inode() {
        let d = scratch("id");
        let m = std::fs::metadata(d.join("a/b")).unwrap();
        let a = Anchor { path: d.join("a/b"), real: d.join("a/b"), dev: m.dev(), ino: m.ino() };
        let slash = root(Path::new("/"));
        assert!(open_anchored(&slash, &a).is_ok());
        std::fs::rename(d.join("a/b"), d.join("a/old")).unwrap();
        std::fs::create_dir(d.join("a/b")).unwrap();
        let e = open_anchored(&slash, &a).unwrap_err().to_string();
        assert!(e.contains(&d.join("a/b").display().to_string()) && e.contains("another file now"), "{e}");
        std::fs::remove_dir(d.join("a/b")).unwrap();
        std::os::unix::fs::symlink("old", d.join("a/b")).unwrap();
        let e = open_anchored(&slash, &a).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
