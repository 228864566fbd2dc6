//! The guard's own file work on repositories (`rules.rs` says when): a config installed as a
//! checked copy of the guard's, a directory checked as it becomes a git directory, a
//! worktree's commondir. Runs under the guard's gate, as the jail's user, on directories it
//! holds open; every file it installs is a new inode that no process of the jail has open,
//! so nothing written through an older descriptor reaches what git reads.

use super::gitconfig::{self, Base, Place};
use super::rules::Refusal;
use std::ffi::OsStr;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries of a `hooks` or `worktrees` directory looked at, at most.
const MAX_ENTRIES: usize = 1024;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn c(name: &[u8]) -> Result<CString, Refusal> {
    CString::new(name).map_err(|_| Refusal::Unchecked("a name with a NUL byte".into()))
}

fn open_at(dir: BorrowedFd, name: &CStr, flags: libc::c_int) -> Result<OwnedFd, i32> {
    // SAFETY: `name` is a valid C string for the call.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn stat_at(dir: BorrowedFd, name: &CStr) -> Result<libc::stat, i32> {
    // SAFETY: stat is plain data the kernel fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` and `st` live for the call.
    if unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

fn kind(st: &libc::stat) -> u32 {
    st.st_mode & libc::S_IFMT
}

/// A small regular file's bytes and permission bits; None if there is none of that name.
/// Anything but a regular file (a symlink, a FIFO, a directory) is refused: git would follow
/// or block on it.
pub fn read_file(dir: BorrowedFd, name: &[u8], max: usize) -> Result<Option<(Vec<u8>, u32)>, Refusal> {
    let shown = String::from_utf8_lossy(name).into_owned();
    let name = c(name)?;
    let fd = match open_at(dir, &name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY) {
        Ok(fd) => fd,
        Err(libc::ENOENT) => return Ok(None),
        Err(e) => {
            return Err(Refusal::Unchecked(format!(
                "`{shown}` cannot be read ({})",
                std::io::Error::from_raw_os_error(e)
            )))
        }
    };
    let st = nix::sys::stat::fstat(&fd).map_err(|e| Refusal::Unchecked(format!("`{shown}`: {e}")))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Refusal::Unchecked(format!("`{shown}` is not a regular file")));
    }
    if st.st_size < 0 || st.st_size as u64 > max as u64 {
        return Err(Refusal::Unchecked(format!("`{shown}` is larger than {max} bytes")));
    }
    let mut out = Vec::with_capacity(st.st_size as usize);
    let mut f = std::fs::File::from(fd);
    use std::io::Read;
    (&mut f).take(max as u64 + 1).read_to_end(&mut out).map_err(|e| Refusal::Unchecked(format!("`{shown}`: {e}")))?;
    if out.len() > max {
        return Err(Refusal::Unchecked(format!("`{shown}` is larger than {max} bytes")));
    }
    Ok(Some((out, st.st_mode & 0o7777)))
}

/// Puts `bytes` at `name` in `dir` as a new file (written under a name of its own, then
/// renamed over), with permission bits `mode`.
/// The number of the next install's own name (`.agent-sandbox-PID-N`).
static N: AtomicU64 = AtomicU64::new(0);

pub fn install(dir: BorrowedFd, name: &[u8], bytes: &[u8], mode: u32) -> Result<(), i32> {
    let name = CString::new(name).map_err(|_| libc::EINVAL)?;
    // A name the jail made first (it can guess them) is passed over, not an error.
    let mut made = Err(libc::EEXIST);
    let mut tmp = CString::default();
    for _ in 0..64 {
        let n = format!(".agent-sandbox-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        tmp = CString::new(n).map_err(|_| libc::EINVAL)?;
        made = open_at(dir, &tmp, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW);
        if !matches!(made, Err(libc::EEXIST)) {
            break;
        }
    }
    let fd = made?;
    let written = (|| {
        // The umask of the thread is the caller's; the bits are the file's own.
        nix::sys::stat::fchmod(&fd, nix::sys::stat::Mode::from_bits_truncate(mode & 0o7777)).map_err(|e| e as i32)?;
        let mut f = std::fs::File::from(fd);
        use std::io::Write;
        f.write_all(bytes).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
    })();
    let moved = written.and_then(|()| {
        // SAFETY: both names live for the call.
        if unsafe { libc::renameat(dir.as_raw_fd(), tmp.as_ptr(), dir.as_raw_fd(), name.as_ptr()) } == 0 {
            Ok(())
        } else {
            Err(errno())
        }
    });
    if moved.is_err() {
        // SAFETY: `tmp` lives for the call.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    }
    moved
}

/// The config of a git directory, checked and installed in place as the guard's own file.
fn check_config(dir: BorrowedFd, name: &[u8], place: &Place) -> Result<(), Refusal> {
    let Some((bytes, mode)) = read_file(dir, name, gitconfig::MAX_CONFIG)? else { return Ok(()) };
    let clean = gitconfig::sanitise(&bytes, Base::New, place).map_err(|r| Refusal::ConfigEntry(r.describe()))?;
    install(dir, name, &clean, mode).map_err(|e| {
        Refusal::Unchecked(format!("cannot write the checked config ({})", std::io::Error::from_raw_os_error(e)))
    })
}

/// A directory held open and the names in it.
type Listing = (OwnedFd, Vec<Vec<u8>>);

/// The entries of the directory `name` in `dir` (None: there is none), at most MAX_ENTRIES.
fn entries(dir: BorrowedFd, name: &[u8]) -> Result<Option<Listing>, Refusal> {
    let shown = String::from_utf8_lossy(name).into_owned();
    let cname = c(name)?;
    match stat_at(dir, &cname) {
        Err(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(Refusal::Unchecked(format!("`{shown}`: {}", std::io::Error::from_raw_os_error(e)))),
        Ok(st) if kind(&st) != libc::S_IFDIR => {
            return Err(Refusal::Unchecked(format!("`{shown}` is not a directory")))
        }
        Ok(_) => {}
    }
    let fd = open_at(dir, &cname, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .map_err(|e| Refusal::Unchecked(format!("`{shown}`: {}", std::io::Error::from_raw_os_error(e))))?;
    let d = nix::dir::Dir::from_fd(fd.try_clone().map_err(|e| Refusal::Unchecked(e.to_string()))?)
        .map_err(|e| Refusal::Unchecked(e.to_string()))?;
    let mut names = vec![];
    for e in d {
        let e = e.map_err(|e| Refusal::Unchecked(e.to_string()))?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        if names.len() >= MAX_ENTRIES {
            return Err(Refusal::Unchecked(format!("`{shown}` holds more than {MAX_ENTRIES} entries")));
        }
        names.push(n.to_vec());
    }
    Ok(Some((fd, names)))
}

/// Worktrees inside worktrees looked into, at most (git makes none).
const MAX_DEPTH: usize = 2;

/// A directory that is, or becomes with the caller's call, a git directory: its config and
/// config.worktree checked and installed anew, its hooks git's samples only, its commondir
/// git's own; and each of its worktrees (`worktrees/<name>`, git directories by where they
/// are) the same way, whatever was written into them before. `path` is where it is, as the
/// jail sees it.
pub fn check_git_dir(dir: BorrowedFd, path: &Path, root: &Path) -> Result<(), Refusal> {
    check_tree(dir, path, root, 0)
}

fn check_tree(dir: BorrowedFd, path: &Path, root: &Path, depth: usize) -> Result<(), Refusal> {
    let place = Place { gitdir: path, root };
    check_config(dir, b"config", &place)?;
    check_config(dir, b"config.worktree", &place)?;
    match stat_at(dir, c"hooks") {
        Err(libc::ENOENT) => {}
        Ok(st) if kind(&st) != libc::S_IFDIR => return Err(Refusal::Hook),
        _ => {
            if let Some((hooks, names)) = entries(dir, b"hooks")? {
                for n in names {
                    let regular = stat_at(hooks.as_fd(), &c(&n)?).is_ok_and(|st| kind(&st) == libc::S_IFREG);
                    if !(n.ends_with(b".sample") && n.len() > 7 && regular) {
                        return Err(Refusal::Hook);
                    }
                }
            }
        }
    }
    if stat_at(dir, c"HEAD").is_ok() && stat_at(dir, c"commondir").is_ok() {
        check_commondir(dir, path)?;
    }
    if let Some((worktrees, _)) = entries(dir, b"worktrees")? {
        check_worktrees(worktrees.as_fd(), &path.join("worktrees"), root, depth)?;
    }
    Ok(())
}

/// Each entry of a git directory's `worktrees` (the directory `wt`, at `path`), checked as a
/// git directory; a symlink there (git makes none) is refused, as git would follow it.
pub fn check_worktrees(wt: BorrowedFd, path: &Path, root: &Path, depth: usize) -> Result<(), Refusal> {
    if depth >= MAX_DEPTH {
        return Err(Refusal::Unchecked("worktrees inside worktrees".into()));
    }
    // Its own descriptor, open for reading (the caller's may be O_PATH).
    let readable = open_at(wt, c".", libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|e| Refusal::Unchecked(std::io::Error::from_raw_os_error(e).to_string()))?;
    let d = nix::dir::Dir::from_fd(readable).map_err(|e| Refusal::Unchecked(e.to_string()))?;
    let mut seen = 0;
    for e in d {
        let e = e.map_err(|e| Refusal::Unchecked(e.to_string()))?;
        let n = e.file_name().to_bytes().to_vec();
        if n == b"." || n == b".." {
            continue;
        }
        seen += 1;
        if seen > MAX_ENTRIES {
            return Err(Refusal::Unchecked(format!("more than {MAX_ENTRIES} worktrees")));
        }
        let cn = c(&n)?;
        let st = stat_at(wt, &cn).map_err(|e| Refusal::Unchecked(std::io::Error::from_raw_os_error(e).to_string()))?;
        match kind(&st) {
            libc::S_IFDIR => {}
            libc::S_IFLNK => return Err(Refusal::Link),
            _ => continue,
        }
        let w = open_at(wt, &cn, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .map_err(|e| Refusal::Unchecked(std::io::Error::from_raw_os_error(e).to_string()))?;
        check_tree(w.as_fd(), &path.join(OsStr::from_bytes(&n)), root, depth + 1)?;
    }
    Ok(())
}

/// Whether a commondir's bytes name the repository two levels up from the worktree's
/// directory at `path`: git's `../..`, or that directory's absolute path.
pub fn commondir_names_its_repository(bytes: &[u8], path: &Path) -> bool {
    let mut text: &[u8] = bytes;
    while let Some(rest) = text.strip_suffix(b"\n").or_else(|| text.strip_suffix(b"\r")) {
        text = rest;
    }
    let up2 = path.parent().and_then(Path::parent);
    text == b"../.." || up2.is_some_and(|u| u.as_os_str().as_bytes() == text)
}

/// A worktree's commondir (in `dir`, at `path`), checked as above; then installed as the
/// guard's own file.
pub fn check_commondir(dir: BorrowedFd, path: &Path) -> Result<(), Refusal> {
    let Some((bytes, mode)) = read_file(dir, b"commondir", 4096)? else { return Ok(()) };
    if !commondir_names_its_repository(&bytes, path) {
        return Err(Refusal::Commondir);
    }
    install(dir, b"commondir", &bytes, mode).map_err(|e| {
        Refusal::Unchecked(format!("cannot write the checked commondir ({})", std::io::Error::from_raw_os_error(e)))
    })
}

/// The rename of a complete config (`from_name` in `from`) onto a git directory's config:
/// installs the checked bytes as the guard's own file and removes the source, as the rename
/// would have. `made`: the jail made this repository (every entry is its own).
pub fn rename_config(
    from: BorrowedFd,
    from_name: &[u8],
    to: BorrowedFd,
    to_name: &[u8],
    made: bool,
    place: &Place,
) -> Result<Result<(), i32>, Refusal> {
    let Some((new, mode)) = read_file(from, from_name, gitconfig::MAX_CONFIG)? else {
        return Ok(Err(libc::ENOENT));
    };
    let old = if made { None } else { read_file(to, to_name, gitconfig::MAX_CONFIG)?.map(|(b, _)| b) };
    let base = match &old {
        Some(b) => Base::Existing(b),
        None if made => Base::New,
        None => Base::Existing(b""),
    };
    let clean = gitconfig::sanitise(&new, base, place).map_err(|r| Refusal::ConfigEntry(r.describe()))?;
    install_renamed(from, from_name, to, to_name, &clean, mode)
}

/// A rename carried out as the guard's own copy: `bytes` (checked) installed at `to_name`, the
/// source removed; the errno of an install that failed.
fn install_renamed(
    from: BorrowedFd,
    from_name: &[u8],
    to: BorrowedFd,
    to_name: &[u8],
    bytes: &[u8],
    mode: u32,
) -> Result<Result<(), i32>, Refusal> {
    let src = c(from_name)?;
    if let Err(e) = install(to, to_name, bytes, mode) {
        return Ok(Err(e));
    }
    // SAFETY: `src` lives for the call.
    unsafe { libc::unlinkat(from.as_raw_fd(), src.as_ptr(), 0) };
    Ok(Ok(()))
}

/// A rename of `from_name` onto the `.env` `to_name`: a copy of the guard's is installed and
/// the source removed, so that nothing written later through a descriptor of the source
/// reaches what the loaders read; refused if it sets a controlling variable that the `.env`
/// there did not have, nor `known` (the lines the guard saw there before:
/// `Guarded::dotenv_known`). What is there now but not a regular file (a link the user made)
/// counts as an empty one.
pub fn rename_dotenv(
    from: BorrowedFd,
    from_name: &[u8],
    to: BorrowedFd,
    to_name: &[u8],
    known: &[u8],
) -> Result<Result<(), i32>, Refusal> {
    let max = crate::jail::dotenv::MAX_BYTES as usize;
    let Some((new, mode)) = read_file(from, from_name, max)? else {
        return Ok(Err(libc::ENOENT));
    };
    let mut old = read_file(to, to_name, max).ok().flatten().map(|(b, _)| b).unwrap_or_default();
    old.push(b'\n');
    old.extend_from_slice(known);
    let (_, added) = crate::jail::dotenv::keep_allowed(&old, &new);
    if !added.is_empty() {
        return Err(Refusal::DotenvControls(added));
    }
    install_renamed(from, from_name, to, to_name, &new, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(p: &Path) -> OwnedFd {
        OwnedFd::from(std::fs::File::open(p).expect("open dir"))
    }

    #[test]
    fn a_directory_becoming_a_repository_gets_its_config_checked_and_replaced() {
        let t = tempfile::tempdir().expect("tmp");
        let g = t.path().join("r");
        std::fs::create_dir_all(g.join("hooks")).expect("mkdir");
        std::fs::write(g.join("config"), "[core]\n\tbare = true\n").expect("write");
        std::fs::write(g.join("hooks/pre-commit.sample"), "#!/bin/sh\n").expect("write");
        // A descriptor opened for writing before the check: what it writes goes nowhere git reads.
        let mut held = std::fs::OpenOptions::new().append(true).open(g.join("config")).expect("open");
        check_git_dir(dir(&g).as_fd(), &g, t.path()).expect("a clean repository passes");
        use std::io::Write;
        held.write_all(b"\tfsmonitor = touch /tmp/x\n").expect("write");
        let now = std::fs::read_to_string(g.join("config")).expect("read");
        assert!(!now.contains("fsmonitor") && now.contains("bare"), "{now}");

        std::fs::write(g.join("hooks/post-checkout"), "#!/bin/sh\n").expect("write");
        assert_eq!(check_git_dir(dir(&g).as_fd(), &g, t.path()), Err(Refusal::Hook));
        std::fs::remove_file(g.join("hooks/post-checkout")).expect("rm");
        std::fs::write(g.join("config"), "[core]\n\tfsmonitor = x\n").expect("write");
        assert!(matches!(check_git_dir(dir(&g).as_fd(), &g, t.path()), Err(Refusal::ConfigEntry(_))));
        std::fs::remove_file(g.join("config")).expect("rm");
        std::os::unix::fs::symlink("/etc/passwd", g.join("config")).expect("ln");
        assert!(matches!(check_git_dir(dir(&g).as_fd(), &g, t.path()), Err(Refusal::Unchecked(_))));
    }

    #[test]
    fn worktrees_inside_are_checked_with_their_directory() {
        let t = tempfile::tempdir().expect("tmp");
        let g = t.path().join(".git");
        let w = g.join("worktrees/w");
        std::fs::create_dir_all(&w).expect("mkdir");
        std::fs::write(w.join("HEAD"), "ref: refs/heads/w\n").expect("write");
        std::fs::write(w.join("commondir"), "../..\n").expect("write");
        check_git_dir(dir(&g).as_fd(), &g, t.path()).expect("git's own worktree");
        std::fs::write(w.join("commondir"), "/tmp/elsewhere\n").expect("write");
        assert_eq!(check_git_dir(dir(&g).as_fd(), &g, t.path()), Err(Refusal::Commondir));
        std::fs::write(w.join("commondir"), format!("{}\n", g.display())).expect("write");
        check_git_dir(dir(&g).as_fd(), &g, t.path()).expect("the absolute form");
        std::fs::write(w.join("config.worktree"), "[core]\n\tpager = x\n").expect("write");
        assert!(matches!(check_git_dir(dir(&g).as_fd(), &g, t.path()), Err(Refusal::ConfigEntry(_))));
    }

    #[test]
    fn an_install_passes_over_its_own_names_made_first_by_the_jail() {
        let t = tempfile::tempdir().expect("tmp");
        let next = N.load(Ordering::SeqCst);
        for k in next..next + 10 {
            std::fs::write(t.path().join(format!(".agent-sandbox-{}-{k}", std::process::id())), "x").expect("plant");
        }
        install(dir(t.path()).as_fd(), b"config", b"[core]\n", 0o644).expect("installed past them");
        assert_eq!(std::fs::read_to_string(t.path().join("config")).expect("read"), "[core]\n");
    }

    #[test]
    fn a_config_renamed_in_is_installed_checked_and_its_source_is_gone() {
        let t = tempfile::tempdir().expect("tmp");
        let g = t.path().join(".git");
        std::fs::create_dir_all(&g).expect("mkdir");
        let place = Place { gitdir: &g, root: t.path() };
        std::fs::write(g.join("config"), "# mine\n[core]\n\tbare = false\n").expect("write");
        std::fs::write(g.join("config.lock"), "# mine\n[core]\n\tbare = false\n[remote \"o\"]\n\turl = ../x\n")
            .expect("write");
        let d = dir(&g);
        rename_config(d.as_fd(), b"config.lock", d.as_fd(), b"config", false, &place).expect("allowed").expect("done");
        let now = std::fs::read_to_string(g.join("config")).expect("read");
        assert!(now.starts_with("# mine\n") && now.contains("[remote \"o\"]"), "{now}");
        assert!(!g.join("config.lock").exists());
        std::fs::write(g.join("config.lock"), format!("{now}\tsshCommand = x\n")).expect("write");
        assert!(matches!(
            rename_config(d.as_fd(), b"config.lock", d.as_fd(), b"config", false, &place),
            Err(Refusal::ConfigEntry(_))
        ));
        assert_eq!(std::fs::read_to_string(g.join("config")).expect("read"), now, "unchanged when refused");
    }
}
