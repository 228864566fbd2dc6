//! Executes a plan's mount list inside the jail's new mount namespace. Knows nothing of
//! policy: it builds exactly what `Plan::mounts` says, in order, and fails on the first step
//! it cannot take. Host paths are reached under `/oldroot`, the new root is `/newroot`.

use crate::plan::anchor::Anchor;
use crate::plan::MountSpec;
use nix::mount::MsFlags;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const OLD: &str = "/oldroot";
pub const NEW: &str = "/newroot";
/// The most of an agent's own instruction file shown with the notice.
const MAX_INSTRUCTIONS: u64 = 1 << 20;

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// The system calls the executor makes, behind a seam so tests can record them.
pub trait Sys {
    fn mount(
        &mut self,
        src: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> io::Result<()>;
    /// Sets attributes on a mount tree (ro, nosuid, nodev), recursively.
    fn set_attr(&mut self, target: &Path, attr: u64) -> io::Result<()>;
    fn mkdir_all(&mut self, p: &Path) -> io::Result<()>;
    fn touch(&mut self, p: &Path) -> io::Result<()>;
    fn write_file(&mut self, p: &Path, contents: &[u8], mode: u32) -> io::Result<()>;
    fn symlink(&mut self, link: &Path, at: &Path) -> io::Result<()>;
    /// Makes the missing store `p` (below the new root, as the jail sees it) as the launcher
    /// makes one (`placeholders::make_home_entries`): an empty directory (0700) or file (0600,
    /// `{}` for JSON) in its existing parent; one made there meanwhile is kept as it is.
    fn make_store(&mut self, p: &Path, dir: bool) -> io::Result<()>;
    /// Creates an overlayfs whiteout (a 0:0 character device) at `p`.
    fn whiteout(&mut self, p: &Path) -> io::Result<()>;
    /// Up to `max` bytes of the host's regular file the plan checked (`a`, opened as
    /// `jail::anchor` opens it under `/oldroot`).
    fn read_anchored(&self, a: &Anchor, max: u64) -> io::Result<Vec<u8>>;
    /// A recursive bind of `src_root/src_rel` on `dst_root/dst_rel` with `attr` set, where
    /// the roots are trees the jail can write: nothing below a root is resolved through a
    /// symlink (the jail could swap one in between the plan and this mount), on either side.
    /// The target is created if missing (a file unless `dir`).
    /// `expect`: the device and inode the plan checked at the source (`plan::anchor`),
    /// which the source must still be.
    fn bind_beneath(
        &mut self,
        src: Host<'_>,
        dst: (&Path, &Path),
        dir: bool,
        attr: u64,
        expect: Option<(u64, u64)>,
    ) -> io::Result<()>;
    /// A recursive bind of the host's path the plan checked (`a`, reached under `/oldroot`
    /// as `jail::anchor` opens it: no symlink on the way, the inode the plan found) on
    /// `target`, made from that descriptor, with `attr` set.
    fn bind_anchored(&mut self, a: &Anchor, target: &Path, dir: bool, attr: u64) -> io::Result<()>;
    /// Binds the staged file `src` (on the launcher's tmpfs) over the regular file at
    /// `target` as the jail will see it, with `attr` set, only if that is the file the plan
    /// checked there (`a`): nothing is created and nothing else is bound over, whatever link
    /// another jail of the user swapped in since.
    fn bind_over_checked(&mut self, src: &Path, target: &Path, a: &Anchor, attr: u64) -> io::Result<()>;
    /// Up to `max` bytes of the regular file `path` as seen from inside `root` (absolute
    /// symlinks resolve inside it, never to the host); None if there is none.
    fn read_in_root(&self, root: &Path, path: &Path, max: u64) -> io::Result<Option<Vec<u8>>>;
    /// Binds `src` over `path` as seen from inside `root`, with `attr` set.
    fn bind_in_root(&mut self, src: &Path, root: &Path, path: &Path, attr: u64) -> io::Result<()>;
    /// A writable overlay at `stage/merged` whose lower layer is the directory `lower`
    /// and whose upper layer is `stage/upper`, on the session's own tmpfs at `stage`.
    fn overlay_layer(&mut self, lower: Host<'_>, stage: &Path) -> io::Result<()>;
    /// A read-only overlay on `target`: the staged `layer` (whiteouts, files) over the host's
    /// directory the plan checked (`a`), given to the kernel by its descriptor.
    fn overlay_anchored(&mut self, layer: &Path, a: &Anchor, target: &Path, flags: MsFlags) -> io::Result<()>;
}

/// A host path a bind or an overlay takes, never reached through a symlink the jail could
/// have swapped in: below a tree as `open_beneath` does (`Beneath(root, rel)`: the root's
/// own path may hold links the jail cannot change), as the plan checked it (`Anchored`), or
/// below a tree opened as the plan checked it (`BeneathAnchored`: a writable tree granted
/// through a link, `~/.local -> /scratch/u/local`, is reached where it really is).
#[derive(Clone, Copy)]
pub enum Host<'a> {
    Beneath(&'a Path, &'a Path),
    Anchored(&'a Anchor),
    BeneathAnchored(&'a Anchor, &'a Path),
}

/// The `O_PATH` descriptor of `h`.
fn open_host(h: Host<'_>) -> io::Result<std::os::fd::OwnedFd> {
    match h {
        Host::Beneath(root, rel) => open_beneath(root, rel),
        Host::Anchored(a) => open_old_anchored(a),
        Host::BeneathAnchored(a, rel) => open_beneath_at(&open_old_anchored(a)?, rel),
    }
}

/// The descriptor of `lower`: a directory, or an error.
fn open_lower(lower: Host<'_>) -> io::Result<std::os::fd::OwnedFd> {
    let dir = open_host(lower)?;
    let st = nix::sys::stat::fstat(&dir).map_err(errno)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    Ok(dir)
}

/// The host's path the plan checked, opened under `/oldroot` (`jail::anchor`).
fn open_old_anchored(a: &Anchor) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{open, OFlag};
    let old = open(OLD, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
        .map_err(errno)?;
    super::anchor::open_anchored(&old, a)
}

pub struct RealSys;

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Sys for RealSys {
    fn mount(
        &mut self,
        src: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> io::Result<()> {
        // A source or target below the new root as the jail will see it, then given to the
        // kernel through its descriptor (a bind's source there too: a pin).
        let src_fd = match src.and_then(in_new) {
            Some(rel) if flags.contains(MsFlags::MS_BIND) => Some(open_in_new(rel, nix::fcntl::OFlag::O_PATH, 0)?),
            _ => None,
        };
        let src_path = src_fd.as_ref().map(fd_path);
        let src = src_path.as_deref().or(src);
        let Some(rel) = in_new(target) else {
            return nix::mount::mount(src, target, fstype, flags, data).map_err(errno);
        };
        let fd = open_in_new(rel, nix::fcntl::OFlag::O_PATH, 0)?;
        nix::mount::mount(src, &fd_path(&fd), fstype, flags, data).map_err(errno)
    }
    fn set_attr(&mut self, target: &Path, attr: u64) -> io::Result<()> {
        let Some(rel) = in_new(target) else { return set_attr_recursive(target, attr) };
        let fd = open_in_new(rel, nix::fcntl::OFlag::O_PATH, 0)?;
        match set_attr_fd(&fd, attr) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => remount_tree_legacy(&fd_path(&fd), attr),
            r => r,
        }
    }
    fn mkdir_all(&mut self, p: &Path) -> io::Result<()> {
        if let Some(rel) = in_new(p) {
            return mkdir_in_new(rel);
        }
        match std::fs::DirBuilder::new().recursive(true).mode(0o755).create(p) {
            Ok(()) => Ok(()),
            Err(_) if p.is_dir() => Ok(()),
            Err(e) => Err(e),
        }
    }
    fn touch(&mut self, p: &Path) -> io::Result<()> {
        if let Some(rel) = in_new(p) {
            use nix::fcntl::OFlag;
            let open = || open_in_new(rel, OFlag::O_WRONLY | OFlag::O_CREAT, 0o644).map(drop);
            return match open() {
                Ok(()) => Ok(()),
                // Already there (a host file under a read-only bind): a bind over it needs nothing more.
                Err(_) if open_in_new(rel, OFlag::O_PATH, 0).is_ok() => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    mkdir_in_new(rel.parent().unwrap_or(Path::new("")))?;
                    open()
                }
                Err(e) => Err(e),
            };
        }
        let open =
            || std::fs::OpenOptions::new().write(true).create(true).truncate(false).mode(0o644).open(p).map(drop);
        match open() {
            Ok(()) => Ok(()),
            // Already there (a host file under a read-only bind): a bind over it needs nothing more.
            Err(_) if p.exists() => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(parent) = p.parent() {
                    self.mkdir_all(parent)?;
                }
                open()
            }
            Err(e) => Err(e),
        }
    }
    fn write_file(&mut self, p: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
        if let Some(rel) = in_new(p) {
            use nix::fcntl::OFlag;
            mkdir_in_new(rel.parent().unwrap_or(Path::new("")))?;
            // Written in the jail's own tree only: a link anywhere on the way fails it.
            let f = open_in_new_with(
                rel,
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC,
                mode,
                in_root() | nix::fcntl::ResolveFlag::RESOLVE_NO_SYMLINKS,
            )?;
            return io::Write::write_all(&mut std::fs::File::from(f), contents);
        }
        if let Some(parent) = p.parent() {
            self.mkdir_all(parent)?;
        }
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(p)?;
        io::Write::write_all(&mut f, contents)
    }
    fn symlink(&mut self, link: &Path, at: &Path) -> io::Result<()> {
        if let Some(rel) = in_new(at) {
            let (dir, name) = parent_in_new(rel)?;
            return nix::unistd::symlinkat(link, &dir, name).map_err(errno);
        }
        if let Some(parent) = at.parent() {
            self.mkdir_all(parent)?;
        }
        std::os::unix::fs::symlink(link, at)
    }
    fn make_store(&mut self, p: &Path, dir: bool) -> io::Result<()> {
        use nix::fcntl::OFlag;
        let rel = in_new(p).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        // No parent made: the ones between the tree and the store are pinned, so a missing
        // one means the store's directory itself went, which fails the jail as before.
        let resolve = in_root() | nix::fcntl::ResolveFlag::RESOLVE_NO_SYMLINKS;
        let at = open_in_new_with(parent, OFlag::O_PATH | OFlag::O_DIRECTORY, 0, resolve)?;
        let made = match dir {
            true => nix::sys::stat::mkdirat(&at, name, nix::sys::stat::Mode::from_bits_truncate(0o700)).map_err(errno),
            false => open_in_new_with(
                rel,
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW,
                0o600,
                resolve,
            )
            .and_then(|f| {
                let text: &[u8] = if rel.extension().is_some_and(|e| e == "json") { b"{}\n" } else { b"" };
                io::Write::write_all(&mut std::fs::File::from(f), text)
            }),
        };
        match made {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            r => r,
        }
    }
    fn whiteout(&mut self, p: &Path) -> io::Result<()> {
        if let Some(rel) = in_new(p) {
            let (dir, name) = parent_in_new(rel)?;
            return nix::sys::stat::mknodat(
                &dir,
                name,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::empty(),
                nix::sys::stat::makedev(0, 0),
            )
            .map_err(errno);
        }
        if let Some(parent) = p.parent() {
            self.mkdir_all(parent)?;
        }
        nix::sys::stat::mknod(
            p,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            nix::sys::stat::makedev(0, 0),
        )
        .map_err(errno)
    }
    fn read_anchored(&self, a: &Anchor, max: u64) -> io::Result<Vec<u8>> {
        use nix::fcntl::{open, OFlag};
        let old = open(OLD, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
            .map_err(errno)?;
        let mut buf = vec![];
        io::Read::read_to_end(&mut io::Read::take(super::anchor::open_anchored_file(&old, a)?, max), &mut buf)?;
        Ok(buf)
    }
    fn bind_beneath(
        &mut self,
        src: Host<'_>,
        dst: (&Path, &Path),
        dir: bool,
        attr: u64,
        expect: Option<(u64, u64)>,
    ) -> io::Result<()> {
        let source = open_host(src)?;
        if let Some(id) = expect {
            expect_checked(&source, id, None)?;
        }
        let target = target_beneath(dst.0, dst.1, dir)?;
        attach(&source, &target, attr)
    }

    fn bind_anchored(&mut self, a: &Anchor, target: &Path, dir: bool, attr: u64) -> io::Result<()> {
        use nix::fcntl::{open, OFlag};
        let mode = nix::sys::stat::Mode::empty();
        let source = open_old_anchored(a)?;
        if dir {
            self.mkdir_all(target)?;
        } else {
            self.touch(target)?;
        }
        let target = match in_new(target) {
            Some(rel) => open_in_new(rel, OFlag::O_PATH, 0)?,
            None => open(target, OFlag::O_PATH | OFlag::O_CLOEXEC, mode).map_err(errno)?,
        };
        attach(&source, &target, attr)
    }

    fn bind_over_checked(&mut self, src: &Path, target: &Path, a: &Anchor, attr: u64) -> io::Result<()> {
        use nix::fcntl::{open, OFlag};
        let rel = in_new(target).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // Resolved as from inside the jail, links included: a dotfile that is a link into the
        // user's dotfiles repository is the file it leads to, which the plan checked too. One
        // descriptor from here on: the bind goes where this look found the checked file.
        let found = open_in_new(rel, OFlag::O_PATH, 0).map_err(|e| {
            super::anchor::changed_error(format!(
                "{e}: the file the launch checked at {} is not there as the jail sees it (another session's jail may \
                 be changing it, or it leads where the jail shows nothing)",
                a.real.display()
            ))
        })?;
        expect_checked(&found, (a.dev, a.ino), Some(&a.real))?;
        let source = open(src, OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
            .map_err(errno)?;
        attach(&source, &found, attr)
    }

    fn read_in_root(&self, root: &Path, path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
        use nix::fcntl::{openat2, OFlag, OpenHow};
        use std::io::Read;
        let root_fd = nix::fcntl::open(
            root,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(errno)?;
        // O_NONBLOCK: a FIFO planted at the path must not block the jail's start.
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
            .resolve(in_root());
        let fd = match openat2(&root_fd, path, how) {
            Ok(fd) => fd,
            Err(nix::Error::ENOENT) => return Ok(None),
            Err(e) => return Err(errno(e)),
        };
        let st = nix::sys::stat::fstat(&fd).map_err(errno)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(None);
        }
        let mut data = vec![];
        std::fs::File::from(fd).take(max).read_to_end(&mut data)?;
        Ok(Some(data))
    }

    fn bind_in_root(&mut self, src: &Path, root: &Path, path: &Path, attr: u64) -> io::Result<()> {
        use nix::fcntl::{open, openat2, OFlag, OpenHow};
        let mode = nix::sys::stat::Mode::empty();
        let source = open(src, OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW, mode).map_err(errno)?;
        let root_fd = open(root, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, mode).map_err(errno)?;
        let target = openat2(&root_fd, path, OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC).resolve(in_root()))
            .map_err(errno)?;
        attach(&source, &target, attr)
    }

    fn overlay_anchored(&mut self, layer: &Path, a: &Anchor, target: &Path, flags: MsFlags) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let dir = open_lower(Host::Anchored(a))?;
        self.mkdir_all(target)?;
        // The lower layer by the descriptor just checked, through the host's /proc (the
        // staging root has none): the path cannot be swapped for a link in between.
        let data = format!("lowerdir={}:{OLD}/proc/self/fd/{}", overlay_escape(layer), dir.as_raw_fd());
        self.mount(Some(Path::new("overlay")), target, Some("overlay"), flags, Some(data.as_str()))
    }

    fn overlay_layer(&mut self, lower: Host<'_>, stage: &Path) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let dir = open_lower(lower)?;
        let st = nix::sys::stat::fstat(&dir).map_err(errno)?;
        let (upper, work, merged) = (stage.join("upper"), stage.join("work"), stage.join("merged"));
        for d in [&upper, &work, &merged] {
            std::fs::DirBuilder::new().mode(0o700).create(d)?;
        }
        // The merged directory shows the upper layer's mode: the agent's own (0700, mostly).
        std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(st.st_mode & 0o7777))?;
        // The lower layer by the descriptor just checked, through the host's /proc (the
        // staging root has none): the path cannot be swapped for a link in between.
        let data = format!(
            "lowerdir={OLD}/proc/self/fd/{},upperdir={},workdir={},userxattr",
            dir.as_raw_fd(),
            overlay_escape(&upper),
            overlay_escape(&work)
        );
        nix::mount::mount(
            Some("overlay"),
            &merged,
            Some("overlay"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(data.as_str()),
        )
        .map_err(errno)
    }
}

/// The agent's own text as it would see it without us, then the notice, bound over the file.
fn instructions(sys: &mut dyn Sys, target: &Path, notice: &str, stage: &Path) -> io::Result<()> {
    let mut text = sys.read_in_root(Path::new(NEW), target, MAX_INSTRUCTIONS)?.unwrap_or_default();
    text.extend_from_slice(notice.as_bytes());
    sys.write_file(stage, &text, 0o444)?;
    sys.bind_in_root(stage, Path::new(NEW), target, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
}

/// The largest settings file given as a session copy (a bigger one fails the launch rather
/// than be cut short).
const MAX_SESSION_COPY: u64 = 16 << 20;

/// The file as the jail sees it, copied to `stage` (writable, the session's own) and bound
/// over it: the agent may rewrite its settings, and what it writes is gone at exit.
fn session_copy(sys: &mut dyn Sys, target: &Path, stage: &Path) -> io::Result<()> {
    let text = sys.read_in_root(Path::new(NEW), target, MAX_SESSION_COPY + 1)?.unwrap_or_default();
    if text.len() as u64 > MAX_SESSION_COPY {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "larger than 16 MiB"));
    }
    sys.write_file(stage, &text, 0o600)?;
    sys.bind_in_root(stage, Path::new(NEW), target, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
}

/// Attaches a detached copy of the mount tree at `source` on `target`, with `attr` set.
fn attach(source: &std::os::fd::OwnedFd, target: &std::os::fd::OwnedFd, attr: u64) -> io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: open_tree on a descriptor we own with an empty path; the kernel returns a
    // new descriptor of a detached copy of that mount tree, which we take ownership of.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            source.as_raw_fd(),
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
        )
    };
    if tree < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just returned by the kernel and nothing else owns it.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    set_attr_fd(&tree, attr)?;
    // SAFETY: move_mount between two descriptors we own, both with empty paths.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// Resolution as from inside the jail's root: symlinks are followed, but `/` and `..` stop
/// at the root, and no magic link (`/proc/self/fd/N`) leads out.
fn in_root() -> nix::fcntl::ResolveFlag {
    nix::fcntl::ResolveFlag::RESOLVE_IN_ROOT | nix::fcntl::ResolveFlag::RESOLVE_NO_MAGICLINKS
}

/// A path below the jail's new root, as the part below it. Every target there is made and
/// mounted on as seen from inside the jail (`in_root`): a host tree bound there can hold a
/// link another jail of the user planted, which by name would lead to `/oldroot`, the host's
/// whole tree, while the jail is built (outside review S1, S2).
fn in_new(p: &Path) -> Option<&Path> {
    p.strip_prefix(NEW).ok()
}

/// `rel` below the new root, opened with `flags` (created with `mode` if O_CREAT), resolved
/// as from inside the jail.
fn open_in_new(rel: &Path, flags: nix::fcntl::OFlag, mode: u32) -> io::Result<std::os::fd::OwnedFd> {
    open_in_new_with(rel, flags, mode, in_root())
}

fn open_in_new_with(
    rel: &Path,
    flags: nix::fcntl::OFlag,
    mode: u32,
    resolve: nix::fcntl::ResolveFlag,
) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{open, openat2, OFlag, OpenHow};
    let root = open(NEW, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
        .map_err(errno)?;
    let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(nix::sys::stat::Mode::from_bits_truncate(mode))
        .resolve(resolve);
    openat2(&root, rel, how).map_err(errno)
}

/// Every directory of `rel` below the new root, made where missing, each looked up as from
/// inside the jail.
fn mkdir_in_new(rel: &Path) -> io::Result<()> {
    use nix::fcntl::OFlag;
    let mut done = PathBuf::new();
    for part in rel.components() {
        let std::path::Component::Normal(name) = part else { continue };
        let dir = open_in_new(&done, OFlag::O_PATH | OFlag::O_DIRECTORY, 0)?;
        match nix::sys::stat::mkdirat(&dir, name, nix::sys::stat::Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(nix::Error::EEXIST) => {}
            Err(e) => return Err(errno(e)),
        }
        done.push(name);
    }
    open_in_new(&done, OFlag::O_PATH | OFlag::O_DIRECTORY, 0).map(drop)
}

/// The directory of `rel` below the new root (made if missing) and its last name.
fn parent_in_new(rel: &Path) -> io::Result<(std::os::fd::OwnedFd, &std::ffi::OsStr)> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    mkdir_in_new(parent)?;
    Ok((open_in_new(parent, nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY, 0)?, name))
}

/// A path the kernel resolves to what `fd` is open on (through `/oldroot`'s proc while the
/// jail is built), for the calls that take a path only.
fn fd_path(fd: &std::os::fd::OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("{OLD}/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Resolution below a root the jail can write: no symlink (not even a magic link), never
/// above the root.
fn beneath() -> nix::fcntl::ResolveFlag {
    use nix::fcntl::ResolveFlag;
    ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS | ResolveFlag::RESOLVE_BENEATH
}

/// An `O_PATH` descriptor of `root/rel` (the root itself may be reached through symlinks: the
/// jail cannot change what leads to it).
pub(super) fn open_beneath(root: &Path, rel: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{open, OFlag};
    // A tree below the new root is found as the jail will see it: renamed and replaced with a
    // link by another jail while this one is built, it never leads to `/oldroot` (third look
    // at the anchors, T2).
    let root_fd = match in_new(root) {
        Some(r) => open_in_new(r, OFlag::O_PATH | OFlag::O_DIRECTORY, 0)?,
        None => open(root, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
            .map_err(errno)?,
    };
    if rel.as_os_str().is_empty() {
        return Ok(root_fd);
    }
    open_beneath_at(&root_fd, rel)
}

/// `open_beneath` from a root already open (one the plan checked: `jail::anchor`).
pub(super) fn open_beneath_at(root_fd: &std::os::fd::OwnedFd, rel: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{openat, openat2, OFlag, OpenHow};
    if rel.as_os_str().is_empty() {
        return openat(root_fd, ".", OFlag::O_PATH | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty()).map_err(errno);
    }
    let how = OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW).resolve(beneath());
    not_a_symlink(openat2(root_fd, rel, how).map_err(errno)?)
}

/// O_PATH|O_NOFOLLOW opens a trailing symlink itself rather than failing: refuse it here.
fn not_a_symlink(fd: std::os::fd::OwnedFd) -> io::Result<std::os::fd::OwnedFd> {
    let st = nix::sys::stat::fstat(&fd).map_err(errno)?;
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Ok(fd)
}

/// Fails unless `fd` is the file the plan checked: its device and inode `id`, and, for a
/// file a session copy covers (`regular_at`: where the plan found it), a regular file. A file
/// an overlay shows, the jail's `/etc`, reports the overlay's device and is refused: no
/// session copy covers one, and an inode number alone could match a file of another
/// filesystem (fifth outside look, L2). Another session's jail of the user may have swapped
/// something in since the plan looked.
fn expect_checked(fd: &std::os::fd::OwnedFd, id: (u64, u64), regular_at: Option<&Path>) -> io::Result<()> {
    let st = nix::sys::stat::fstat(fd).map_err(errno)?;
    let regular = st.st_mode & libc::S_IFMT == libc::S_IFREG;
    if (st.st_dev, st.st_ino) == id && (regular || regular_at.is_none()) {
        return Ok(());
    }
    let checked = match regular_at {
        Some(p) => format!("the regular file at {}, inode {}", p.display(), id.1),
        None => format!("inode {}", id.1),
    };
    Err(super::anchor::changed_error(format!(
        "another file than the launch checked is there now (inode {}, checked: {checked}): another session's jail \
         may be changing it",
        st.st_ino
    )))
}

/// The mount target `root/rel`, created if missing, resolved as `open_beneath` does.
fn target_beneath(root: &Path, rel: &Path, dir: bool) -> io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else { return open_beneath(root, rel) };
    let parent_fd = open_beneath(root, parent)?;
    let made = if dir {
        nix::sys::stat::mkdirat(&parent_fd, name, Mode::from_bits_truncate(0o755))
    } else {
        openat(
            &parent_fd,
            name,
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .map(drop)
    };
    match made {
        Ok(()) | Err(nix::Error::EEXIST) => {}
        // A read-only tree that already has the name needs nothing more.
        Err(nix::Error::EROFS) | Err(nix::Error::EACCES) => {}
        Err(e) => return Err(errno(e)),
    }
    let how = nix::fcntl::OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW).resolve(beneath());
    not_a_symlink(nix::fcntl::openat2(&parent_fd, name, how).map_err(errno)?)
}

/// mount_setattr(2) on a detached tree, recursively.
fn set_attr_fd(tree: &std::os::fd::OwnedFd, attr: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let ma = MountAttr { attr_set: attr, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: an fd we own, an empty path, and a properly sized mount_attr the kernel reads.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &ma as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// mount_setattr(2) with AT_RECURSIVE (Linux 5.12+); older kernels get a remount of each
/// mount below `target`, keeping the flags the kernel locked on them.
fn set_attr_recursive(target: &Path, attr: u64) -> io::Result<()> {
    let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let ma = MountAttr { attr_set: attr, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: `c` is a valid NUL-terminated path and `ma` a properly sized mount_attr that
    // outlives the call; the kernel only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            AT_RECURSIVE,
            &ma as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::ENOSYS) {
        return Err(e);
    }
    remount_tree_legacy(target, attr)
}

fn remount_tree_legacy(target: &Path, attr: u64) -> io::Result<()> {
    let info = crate::host::read_proc("/proc/self/mountinfo")?;
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|p| p.starts_with(target))
        .collect();
    points.sort();
    points.dedup();
    for p in points {
        let st = nix::sys::statvfs::statvfs(&p).map_err(errno)?;
        let f = st.flags();
        use nix::sys::statvfs::FsFlags;
        let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND;
        for (have, ms) in [
            (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
            (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
            (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
            (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
            (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
            (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
            (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        ] {
            if f.contains(have) {
                flags |= ms;
            }
        }
        if attr & MOUNT_ATTR_RDONLY != 0 {
            flags |= MsFlags::MS_RDONLY;
        }
        if attr & MOUNT_ATTR_NOSUID != 0 {
            flags |= MsFlags::MS_NOSUID;
        }
        if attr & MOUNT_ATTR_NODEV != 0 {
            flags |= MsFlags::MS_NODEV;
        }
        nix::mount::mount(None::<&str>, &p, None::<&str>, flags, None::<&str>).map_err(errno)?;
    }
    Ok(())
}

fn unescape_mountinfo(s: &str) -> PathBuf {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from(String::from_utf8_lossy(&out).to_string()))
}

#[derive(Debug, thiserror::Error)]
#[error("{step} {}: {err}", target.display())]
pub struct MountError {
    pub step: &'static str,
    pub target: PathBuf,
    pub err: io::Error,
}

impl MountError {
    /// Something of the host the plan checked is no longer what it checked: an anchored
    /// path changed, or a directory it pinned is gone.
    pub fn changed(&self) -> bool {
        super::anchor::is_changed(&self.err)
            || (self.step.starts_with("pin") && self.err.kind() == io::ErrorKind::NotFound)
    }
}

/// The writable tree `p` lies strictly inside (the innermost), and the rest of `p` below it.
fn inside<'a>(writable: &'a [PathBuf], p: &'a Path) -> Option<(&'a Path, &'a Path)> {
    writable
        .iter()
        .filter(|w| p != w.as_path())
        .filter_map(|w| p.strip_prefix(w).ok().map(|rel| (w.as_path(), rel)))
        .max_by_key(|(w, _)| w.as_os_str().len())
}

fn under(base: &str, p: &Path) -> PathBuf {
    let rel = p.strip_prefix("/").unwrap_or(p);
    if rel.as_os_str().is_empty() {
        PathBuf::from(base)
    } else {
        Path::new(base).join(rel)
    }
}

/// Escapes the characters overlayfs treats as separators in `lowerdir=`.
fn overlay_escape(p: &Path) -> String {
    p.to_string_lossy().replace('\\', "\\\\").replace(':', "\\:").replace(',', "\\,")
}

/// The session layer of `source` mounted at `stage/merged`, on a tmpfs of its own at `stage`:
/// the lower directory is reached without following a symlink below the writable tree it lies
/// in, or as the plan checked it (`anchor`), or not at all.
fn layer(sys: &mut dyn Sys, writable: &[PathBuf], anchors: &[Anchor], source: &Path, stage: &Path) -> io::Result<()> {
    let anchor = anchors.iter().find(|a| a.path == source);
    sys.mkdir_all(stage)?;
    sys.mount(
        Some(Path::new("tmpfs")),
        stage,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0700"),
    )?;
    match (inside(writable, source), anchor) {
        (Some((root, rel)), _) => match anchors.iter().find(|a| a.path == root) {
            Some(a) => sys.overlay_layer(Host::BeneathAnchored(a, rel), stage),
            None => sys.overlay_layer(Host::Beneath(&under(OLD, root), rel), stage),
        },
        (None, Some(a)) => sys.overlay_layer(Host::Anchored(a), stage),
        (None, None) => Err(unchecked(source)),
    }
}

/// A host path the jail was to read that the plan did not check (it was not there when the
/// plan looked and the launcher did not make it): refused, never opened by name.
fn unchecked(p: &Path) -> io::Error {
    super::anchor::changed_error(format!(
        "{} was not checked by the launch (nothing was there when it looked, or not by a plain path): it is not \
         used by name, which could follow a link put there since",
        p.display()
    ))
}

/// `rel` below the writable tree `root` (at `old` under /oldroot): from the tree as the plan
/// checked it, where it really is, when it has an anchor.
fn in_tree<'a>(anchors: &'a [Anchor], old: &'a Path, root: &Path, rel: &'a Path) -> Host<'a> {
    match anchors.iter().find(|a| a.path == root) {
        Some(a) => Host::BeneathAnchored(a, rel),
        None => Host::Beneath(old, rel),
    }
}

fn bind(sys: &mut dyn Sys, src: &Path, target: &Path, dir: bool) -> io::Result<()> {
    if dir {
        sys.mkdir_all(target)?;
    } else {
        sys.touch(target)?;
    }
    sys.mount(Some(src), target, None, MsFlags::MS_BIND | MsFlags::MS_REC, None)
}

/// Applies every mount of the plan under `/newroot`, reading host paths under `/oldroot`.
/// Synthesized files are staged in `staging` (a directory on the outer tmpfs) and bound in.
/// Every host path is used as its anchor says (`bind_anchored`, ...), or beneath a writable
/// tree with no symlink followed, or, in the launcher's own trees (`own`: the state
/// directory, which no jail writes) and for its own files under `/run/agent-sandbox`, by
/// name; any other is refused (`unchecked`).
/// A writable session copy at `target` with `data`. In the jail's own home it is written
/// there, no link followed on the way (`write_file`). Below a host tree bound in (the name
/// the host's file, or a link another jail of the user put there: outside reviews of the
/// anchors, T1, U1, U2), nothing is written or created: the copy is staged on the session's
/// tmpfs and bound over the file the plan checked (`checked`), found as the jail will see
/// it, and over nothing else.
fn seed(
    sys: &mut dyn Sys,
    target: &Path,
    data: &[u8],
    over_host: Option<Option<&Anchor>>,
    staging: &Path,
    staged: &mut usize,
) -> io::Result<()> {
    let Some(checked) = over_host else { return sys.write_file(target, data, 0o600) };
    let Some(a) = checked else { return Err(unchecked(target)) };
    *staged += 1;
    let s = staging.join(staged.to_string());
    sys.write_file(&s, data, 0o600)?;
    sys.bind_over_checked(&s, target, a, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
}

/// Makes the jail's root: each mount of the plan in order, on the new root (`NEW`), from the
/// host's tree (`OLD`) where a source is the host's.
pub fn apply_all(
    sys: &mut dyn Sys,
    mounts: &[MountSpec],
    anchors: &[Anchor],
    own: &[PathBuf],
    staging: &Path,
) -> Result<(), MountError> {
    let mut a = Applier { sys, anchors, own, staging, staged: 0, writable: vec![], host_backed: vec![] };
    for m in mounts {
        a.apply(m)?;
    }
    Ok(())
}

/// The state of a root being made: what each mount needs to know of the ones before it.
struct Applier<'a> {
    sys: &'a mut dyn Sys,
    anchors: &'a [Anchor],
    /// The launcher's own trees: used by name (no jail reaches them).
    own: &'a [PathBuf],
    staging: &'a Path,
    /// Files staged so far (each staged file's name is its number).
    staged: usize,
    /// Trees bound writable so far (the project, writable paths): a later mount of a path
    /// inside one of them is resolved without following symlinks below it.
    writable: Vec<PathBuf>,
    /// Targets where a host tree shows so far: a seed below one is the host's file (or a
    /// link another jail put there), never written into; its copy is bound over it instead.
    host_backed: Vec<PathBuf>,
}

const NOSUID_NODEV: u64 = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
const MS_NOSUID_NODEV: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);
const READ_ONLY: u64 = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

fn attrs(rw: bool) -> u64 {
    NOSUID_NODEV | if rw { 0 } else { MOUNT_ATTR_RDONLY }
}

/// An error of the mount at `target`, at `step`.
fn fail(step: &'static str, target: &Path) -> impl FnOnce(io::Error) -> MountError {
    let target = target.to_path_buf();
    move |err| MountError { step, target, err }
}

impl<'a> Applier<'a> {
    fn anchored(&self, p: &Path) -> Option<&'a Anchor> {
        self.anchors.iter().find(|a| a.path == p)
    }

    /// A new file name on the session's staging tmpfs.
    fn stage(&mut self, prefix: &str) -> PathBuf {
        self.staged += 1;
        self.staging.join(format!("{prefix}{}", self.staged))
    }

    fn apply(&mut self, m: &MountSpec) -> Result<(), MountError> {
        let target = under(NEW, m.target());
        if matches!(m, MountSpec::Bind { .. } | MountSpec::TreeBind { .. } | MountSpec::Overlay { .. }) {
            self.host_backed.push(m.target().to_path_buf());
        }
        let t = m.target();
        match m {
            MountSpec::Bind { source, rw, dir, .. } => self.bind(source, t, &target, *rw, *dir),
            MountSpec::Overlay { source, whiteouts, files, .. } => self.overlay(source, whiteouts, files, (t, &target)),
            // Its rebuilt tree's `SealTree` sets the attributes.
            MountSpec::TreeBind { source, dir, .. } => match self.anchored(source) {
                Some(a) => self.sys.bind_anchored(a, &target, *dir, 0).map_err(fail("bind", t)),
                None => Err(fail("bind", t)(unchecked(source))),
            },
            MountSpec::SealTree { rw, .. } => self.sys.set_attr(&target, attrs(*rw)).map_err(fail("seal", t)),
            MountSpec::Stub { .. } => self.stub(t, &target),
            MountSpec::Layer { source, .. } => self.session_layer(source, t, &target),
            MountSpec::Copy { source, .. } => {
                let Some(a) = self.anchored(source) else { return Err(fail("read seed for", t)(unchecked(source))) };
                let data = self.sys.read_anchored(a, 1 << 20).map_err(fail("read seed for", t))?;
                #[cfg(debug_assertions)]
                if let Some(name) = target.file_name() {
                    let point = format!("seed-read-{}", name.to_string_lossy());
                    crate::test_pause::pause_for_test_under(&point, Path::new(OLD));
                }
                self.seed(t, &target, &data)
            }
            MountSpec::Stripped { contents, seed: true, .. } => self.seed(t, &target, contents.as_bytes()),
            MountSpec::Stripped { contents, seed: false, .. } => self.stripped_copy(t, &target, contents),
            MountSpec::Pin { .. } => self.pin(t, &target),
            MountSpec::Tmpfs { mode, .. } => self.filesystem(t, &target, "tmpfs", Some(&format!("mode={mode:o}"))),
            MountSpec::Proc { .. } => self.filesystem(t, &target, "proc", None),
            MountSpec::Devpts { .. } => {
                self.filesystem(t, &target, "devpts", Some("newinstance,ptmxmode=0666,mode=0620"))
            }
            MountSpec::Mask { dir, made, .. } => match self.mask(t, &target, *dir) {
                // Removed outside since the plan looked: nothing there to hide, as if the plan
                // had not seen it; but a store the launcher makes is made again and covered.
                Err(e) if e.step == "mask" && e.err.kind() == io::ErrorKind::NotFound => match made {
                    false => Ok(()),
                    true => {
                        self.sys.make_store(&target, *dir).map_err(fail("make the store again for", t))?;
                        self.mask(t, &target, *dir)
                    }
                },
                r => r,
            },
            MountSpec::ReadOnly { .. } => self
                .sys
                .mount(None, &target, None, MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MS_NOSUID_NODEV, None)
                .map_err(fail("make read-only", t)),
            MountSpec::Device { source, .. } => {
                self.sys.touch(&target).map_err(fail("create device node target", t))?;
                // No attributes to add: a device node cannot be executed (so nosuid means
                // nothing here) and nodev would make it useless.
                self.sys
                    .mount(Some(&under(OLD, source)), &target, None, MsFlags::MS_BIND, None)
                    .map_err(fail("bind device", t))
            }
            MountSpec::Symlink { link, .. } => self.sys.symlink(link, &target).map_err(fail("symlink", t)),
            MountSpec::File { contents, mode, .. } => self.file(t, &target, contents.as_bytes(), *mode),
            MountSpec::Instructions { notice, .. } => {
                let s = self.stage("");
                // Advice to the agent, not a boundary: a file the jail cannot show (a link to
                // a hidden path, planted by an earlier session) costs the notice, not the session.
                if let Err(e) = instructions(self.sys, t, notice, &s) {
                    eprintln!("agent-sandbox: warning: no sandbox notice in {}: {e}", t.display());
                }
                Ok(())
            }
            MountSpec::SessionCopy { .. } => {
                let s = self.stage("");
                session_copy(self.sys, t, &s).map_err(fail("make a session copy of", t))
            }
        }
    }

    /// A host path bound in: by its anchor, or beneath a writable tree bound before it
    /// without following a link there; only the launcher's own trees and the stubs by name.
    fn bind(&mut self, source: &Path, t: &Path, target: &Path, rw: bool, dir: bool) -> Result<(), MountError> {
        let attr = attrs(rw);
        let anchor = self.anchored(source);
        match (inside(&self.writable, source), inside(&self.writable, t)) {
            (Some((sr, srel)), Some((tr, trel))) => {
                let (src_root, dst_root) = (under(OLD, sr), under(NEW, tr));
                let expect = anchor.map(|a| (a.dev, a.ino));
                self.sys
                    .bind_beneath(in_tree(self.anchors, &src_root, sr, srel), (&dst_root, trel), dir, attr, expect)
                    .map_err(fail("bind (no symlinks followed inside the writable tree)", t))?;
            }
            _ => match anchor {
                Some(a) => self.sys.bind_anchored(a, target, dir, attr).map_err(fail("bind", t))?,
                None if self.own.iter().any(|o| source.starts_with(o)) || t.starts_with(crate::stub::STUB_DIR) => {
                    bind(self.sys, &under(OLD, source), target, dir).map_err(fail("bind", t))?;
                    self.sys.set_attr(target, attr).map_err(fail("set attributes on", t))?;
                }
                None => return Err(fail("bind", t)(unchecked(source))),
            },
        }
        if rw {
            self.writable.push(source.to_path_buf());
        }
        Ok(())
    }

    /// A read-only tree with entries hidden or added: an overlay of the anchored source
    /// under a staged layer of whiteouts and files.
    fn overlay(
        &mut self,
        source: &Path,
        whiteouts: &[PathBuf],
        files: &[crate::plan::fs::OverlayFile],
        (t, target): (&Path, &Path),
    ) -> Result<(), MountError> {
        let Some(a) = self.anchored(source) else { return Err(fail("mount overlay on", t)(unchecked(source))) };
        let layer = self.stage("layer");
        self.sys.mkdir_all(&layer).map_err(fail("create overlay layer for", t))?;
        for w in whiteouts {
            let rel = w.strip_prefix(source).unwrap_or(w);
            self.sys.whiteout(&layer.join(rel)).map_err(fail("whiteout in overlay of", t))?;
        }
        for f in files {
            let rel = f.path.strip_prefix(source).unwrap_or(&f.path);
            self.sys
                .write_file(&layer.join(rel), f.contents.as_bytes(), f.mode)
                .map_err(fail("file in overlay of", t))?;
        }
        self.sys
            .overlay_anchored(&layer, a, target, MsFlags::MS_RDONLY | MS_NOSUID_NODEV)
            .map_err(fail("mount overlay on (set sandbox.hide_with = \"rebuild\" if this kernel refuses it)", t))
    }

    /// The stub over a Slurm command's name.
    fn stub(&mut self, t: &Path, target: &Path) -> Result<(), MountError> {
        let (dir, stub) = (Path::new(crate::stub::STUB_DIR), Path::new(crate::stub::STUB_EXE));
        match inside(&self.writable, t) {
            Some((tr, trel)) => {
                let name = stub.strip_prefix(dir).unwrap_or(stub);
                self.sys
                    .bind_beneath(
                        Host::Beneath(&under(NEW, dir), name),
                        (&under(NEW, tr), trel),
                        false,
                        READ_ONLY,
                        None,
                    )
                    .map_err(fail("bind the stub (no symlinks followed inside the writable tree) over", t))
            }
            // The host's file is there to mount on, and the stub's mount is read-only,
            // nosuid and nodev already: a bind copies its source mount's attributes. One
            // call instead of four (a touch that fails on the read-only tree, a stat,
            // the bind, the attributes) for each of the 17 Slurm commands.
            None => self
                .sys
                .mount(Some(&under(NEW, stub)), target, None, MsFlags::MS_BIND, None)
                .map_err(fail("bind the stub over", t)),
        }
    }

    /// An agent's directory as a session layer; read-only where no overlay can be made.
    fn session_layer(&mut self, source: &Path, t: &Path, target: &Path) -> Result<(), MountError> {
        let stage = self.stage("layer");
        match layer(self.sys, &self.writable, self.anchors, source, &stage) {
            Ok(()) => match inside(&self.writable, t) {
                Some((tr, trel)) => self
                    .sys
                    .bind_beneath(
                        Host::Beneath(&stage, Path::new("merged")),
                        (&under(NEW, tr), trel),
                        true,
                        NOSUID_NODEV,
                        None,
                    )
                    .map_err(fail("bind the session layer (no symlinks followed inside the writable tree) on", t)),
                None => {
                    bind(self.sys, &stage.join("merged"), target, true)
                        .map_err(fail("bind the session layer on", t))?;
                    self.sys.set_attr(target, NOSUID_NODEV).map_err(fail("set attributes on", t))
                }
            },
            // No overlay here (a kernel before 5.11, a home filesystem overlayfs cannot
            // stack on): the directory is read-only instead, which keeps the same
            // promise (nothing written there reaches your files) at the cost of the
            // agent's writes outside its state.
            Err(e) => {
                eprintln!(
                    "agent-sandbox: warning: {} is read-only for this session except the agent's state (no session layer: {e})",
                    t.display()
                );
                match (inside(&self.writable, source), inside(&self.writable, t), self.anchored(source)) {
                    (Some((sr, srel)), Some((tr, trel)), a) => self
                        .sys
                        .bind_beneath(
                            in_tree(self.anchors, &under(OLD, sr), sr, srel),
                            (&under(NEW, tr), trel),
                            true,
                            READ_ONLY,
                            a.map(|a| (a.dev, a.ino)),
                        )
                        .map_err(fail("bind (no symlinks followed inside the writable tree)", t)),
                    (_, _, Some(a)) => self.sys.bind_anchored(a, target, true, READ_ONLY).map_err(fail("bind", t)),
                    (_, _, None) => Err(fail("bind", t)(unchecked(source))),
                }
            }
        }
    }

    /// A seed (`home.seed`, a stripped config seeded writable) written at its name: where a
    /// host tree shows there, staged and bound over the file the plan checked instead. A seed
    /// at a host tree's own target (`home.write = [".gitconfig"]` and the default seed of it)
    /// is over the host's file too: written there, it would rewrite it (U3).
    fn seed(&mut self, t: &Path, target: &Path, data: &[u8]) -> Result<(), MountError> {
        let anchors = self.anchors;
        let over_host = self.host_backed.iter().any(|h| t.starts_with(h)).then(|| anchors.iter().find(|a| a.path == t));
        seed(self.sys, target, data, over_host, self.staging, &mut self.staged).map_err(fail("seed", t))
    }

    /// A config without its credentials, read-only over the host's file the plan read (in a
    /// tree another jail may write): bound onto that file only, as a seed is.
    fn stripped_copy(&mut self, t: &Path, target: &Path, contents: &str) -> Result<(), MountError> {
        let s = self.stage("");
        let Some(a) = self.anchored(t) else {
            return Err(fail("bind the stripped copy over", t)(unchecked(t)));
        };
        self.sys.write_file(&s, contents.as_bytes(), 0o644).map_err(fail("stage the stripped copy of", t))?;
        self.sys.bind_over_checked(&s, target, a, READ_ONLY).map_err(fail("bind the stripped copy over", t))
    }

    /// An empty read-only directory or file over `target`.
    fn mask(&mut self, t: &Path, target: &Path, dir: bool) -> Result<(), MountError> {
        if dir {
            let flags = MS_NOSUID_NODEV | MsFlags::MS_RDONLY;
            let tmpfs = Some(Path::new("tmpfs"));
            return self.sys.mount(tmpfs, target, Some("tmpfs"), flags, Some("mode=0555")).map_err(fail("mask", t));
        }
        let s = self.staging.join("empty");
        self.sys.write_file(&s, b"", 0o444).map_err(fail("stage empty file for", t))?;
        self.sys.mount(Some(&s), target, None, MsFlags::MS_BIND, None).map_err(fail("mask", t))?;
        self.sys.set_attr(target, READ_ONLY).map_err(fail("set attributes on", t))
    }

    /// A protected path pinned as a mount point (it cannot be renamed or removed away).
    fn pin(&mut self, t: &Path, target: &Path) -> Result<(), MountError> {
        match inside(&self.writable, t) {
            Some((root, rel)) => {
                let root = under(NEW, root);
                self.sys
                    .bind_beneath(Host::Beneath(&root, rel), (&root, rel), true, NOSUID_NODEV, None)
                    .map_err(fail("pin (no symlinks followed inside the writable tree)", t))
            }
            None => self
                .sys
                .mount(Some(target), target, None, MsFlags::MS_BIND | MsFlags::MS_REC, None)
                .map_err(fail("pin", t)),
        }
    }

    /// A kernel filesystem of the jail's own (`tmpfs`, `proc`, `devpts`) on a new directory.
    fn filesystem(
        &mut self,
        t: &Path,
        target: &Path,
        kind: &'static str,
        data: Option<&str>,
    ) -> Result<(), MountError> {
        let (flags, mkdir, mount) = match kind {
            "tmpfs" => (MS_NOSUID_NODEV, "mkdir for tmpfs", "mount tmpfs on"),
            "proc" => (MS_NOSUID_NODEV | MsFlags::MS_NOEXEC, "mkdir for proc", "mount proc on"),
            _ => (MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC, "mkdir for devpts", "mount devpts on"),
        };
        self.sys.mkdir_all(target).map_err(fail(mkdir, t))?;
        self.sys.mount(Some(Path::new(kind)), target, Some(kind), flags, data).map_err(fail(mount, t))
    }

    /// A file the plan wrote (`/etc/passwd`'s lines, the resolver's), read-only.
    fn file(&mut self, t: &Path, target: &Path, contents: &[u8], mode: u32) -> Result<(), MountError> {
        let s = self.stage("");
        self.sys.write_file(&s, contents, mode).map_err(fail("stage file for", t))?;
        self.sys.touch(target).map_err(fail("create file", t))?;
        self.sys.mount(Some(&s), target, None, MsFlags::MS_BIND, None).map_err(fail("bind file", t))?;
        self.sys.set_attr(target, READ_ONLY).map_err(fail("set attributes on", t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Recorder {
        ops: Vec<String>,
    }

    impl Sys for Recorder {
        fn mount(
            &mut self,
            src: Option<&Path>,
            target: &Path,
            fstype: Option<&str>,
            flags: MsFlags,
            _data: Option<&str>,
        ) -> io::Result<()> {
            self.ops.push(format!(
                "mount {} {} {} bind={}",
                src.map(|s| s.display().to_string()).unwrap_or_default(),
                target.display(),
                fstype.unwrap_or("-"),
                flags.contains(MsFlags::MS_BIND)
            ));
            Ok(())
        }
        fn set_attr(&mut self, target: &Path, attr: u64) -> io::Result<()> {
            self.ops.push(format!("attr {} ro={}", target.display(), attr & MOUNT_ATTR_RDONLY != 0));
            Ok(())
        }
        fn mkdir_all(&mut self, p: &Path) -> io::Result<()> {
            self.ops.push(format!("mkdir {}", p.display()));
            Ok(())
        }
        fn touch(&mut self, p: &Path) -> io::Result<()> {
            self.ops.push(format!("touch {}", p.display()));
            Ok(())
        }
        fn write_file(&mut self, p: &Path, _c: &[u8], _m: u32) -> io::Result<()> {
            self.ops.push(format!("write {}", p.display()));
            Ok(())
        }
        fn make_store(&mut self, p: &Path, dir: bool) -> io::Result<()> {
            self.ops.push(format!("make store {} dir={dir}", p.display()));
            Ok(())
        }
        fn symlink(&mut self, link: &Path, at: &Path) -> io::Result<()> {
            self.ops.push(format!("symlink {} -> {}", at.display(), link.display()));
            Ok(())
        }
        fn read_anchored(&self, _a: &Anchor, _max: u64) -> io::Result<Vec<u8>> {
            Ok(b"seed".to_vec())
        }
        fn read_in_root(&self, _root: &Path, _p: &Path, _max: u64) -> io::Result<Option<Vec<u8>>> {
            Ok(Some(b"own".to_vec()))
        }
        fn bind_in_root(&mut self, src: &Path, root: &Path, p: &Path, attr: u64) -> io::Result<()> {
            self.ops.push(format!(
                "bind-in-root {} {}//{} ro={}",
                src.display(),
                root.display(),
                p.display(),
                attr & MOUNT_ATTR_RDONLY != 0
            ));
            Ok(())
        }
        fn whiteout(&mut self, p: &Path) -> io::Result<()> {
            self.ops.push(format!("whiteout {}", p.display()));
            Ok(())
        }
        fn overlay_layer(&mut self, lower: Host<'_>, stage: &Path) -> io::Result<()> {
            self.ops.push(format!("layer {} {}", host(lower), stage.display()));
            Ok(())
        }
        fn overlay_anchored(&mut self, layer: &Path, a: &Anchor, target: &Path, _f: MsFlags) -> io::Result<()> {
            self.ops.push(format!(
                "overlay {} on anchored {} at {}",
                layer.display(),
                a.real.display(),
                target.display()
            ));
            Ok(())
        }
        fn bind_anchored(&mut self, a: &Anchor, target: &Path, _dir: bool, attr: u64) -> io::Result<()> {
            self.ops.push(format!(
                "bind-anchored {} ({}:{}) {} ro={}",
                a.real.display(),
                a.dev,
                a.ino,
                target.display(),
                attr & MOUNT_ATTR_RDONLY != 0
            ));
            Ok(())
        }
        fn bind_over_checked(&mut self, src: &Path, target: &Path, a: &Anchor, attr: u64) -> io::Result<()> {
            self.ops.push(format!(
                "bind-over-checked {} {} ({}:{}) ro={}",
                src.display(),
                target.display(),
                a.dev,
                a.ino,
                attr & MOUNT_ATTR_RDONLY != 0
            ));
            Ok(())
        }
        fn bind_beneath(
            &mut self,
            src: Host<'_>,
            dst: (&Path, &Path),
            _dir: bool,
            attr: u64,
            _expect: Option<(u64, u64)>,
        ) -> io::Result<()> {
            self.ops.push(format!(
                "bind-beneath {} {}//{} ro={}",
                host(src),
                dst.0.display(),
                dst.1.display(),
                attr & MOUNT_ATTR_RDONLY != 0
            ));
            Ok(())
        }
    }

    fn host(h: Host<'_>) -> String {
        match h {
            Host::Beneath(root, rel) => format!("{}//{}", root.display(), rel.display()),
            Host::Anchored(a) => format!("anchored {}", a.real.display()),
            Host::BeneathAnchored(a, rel) => format!("anchored {}//{}", a.real.display(), rel.display()),
        }
    }

    /// An anchor for every host source of `mounts`, as the plan's `stamp` makes them.
    fn checked(mounts: &[MountSpec]) -> Vec<Anchor> {
        mounts
            .iter()
            .filter_map(|m| crate::plan::anchor::host_sources(m).or_else(|| crate::plan::anchor::covered_file(m)))
            .enumerate()
            .map(|(i, p)| Anchor { path: p.to_path_buf(), real: p.to_path_buf(), dev: 1, ino: i as u64 })
            .collect()
    }

    fn apply(r: &mut Recorder, mounts: &[MountSpec]) -> Result<(), MountError> {
        apply_all(r, mounts, &checked(mounts), &[], Path::new("/stage"))
    }

    /// Every host source is used as its anchor says: a bind, a tree's entry, an overlay's
    /// lower layer, a seed's copy, a session layer's lower directory.
    #[test]
    fn every_kind_of_host_source_is_used_by_its_anchor() {
        let mounts = vec![
            MountSpec::Bind { source: "/data".into(), target: "/data".into(), rw: false, dir: true },
            MountSpec::TreeBind { source: "/tree/a".into(), target: "/tree/a".into(), dir: true },
            MountSpec::Overlay { target: "/etc".into(), source: "/etc".into(), whiteouts: vec![], files: vec![] },
            MountSpec::Copy { source: "/h/.seed".into(), target: "/h/.seed".into() },
            MountSpec::Layer { source: "/h/.claude".into(), target: "/h/.claude".into() },
        ];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        assert_eq!(
            r.ops,
            [
                "bind-anchored /data (1:0) /newroot/data ro=true",
                "bind-anchored /tree/a (1:1) /newroot/tree/a ro=false",
                "mkdir /stage/layer1",
                "overlay /stage/layer1 on anchored /etc at /newroot/etc",
                "write /newroot/h/.seed",
                "mkdir /stage/layer2",
                "mount tmpfs /stage/layer2 tmpfs bind=false",
                "layer anchored /h/.claude /stage/layer2",
                "mkdir /newroot/h/.claude",
                "mount /stage/layer2/merged /newroot/h/.claude - bind=true",
                "attr /newroot/h/.claude ro=false",
            ]
        );
    }

    /// A host source with no anchor (nothing was there when the plan looked, and the launcher
    /// made nothing there) is refused, naming it, whatever kind of mount uses it; the
    /// launcher's own files (`own`, the stubs' directory) are bound by name.
    #[test]
    fn a_host_source_without_an_anchor_is_refused() {
        for m in [
            MountSpec::Bind { source: "/data".into(), target: "/data".into(), rw: true, dir: true },
            MountSpec::TreeBind { source: "/tree/a".into(), target: "/tree/a".into(), dir: false },
            MountSpec::Overlay { target: "/etc".into(), source: "/etc".into(), whiteouts: vec![], files: vec![] },
            MountSpec::Copy { source: "/h/.seed".into(), target: "/h/.seed".into() },
            MountSpec::Layer { source: "/h/.claude".into(), target: "/h/.claude".into() },
        ] {
            let mut r = Recorder::default();
            let e = apply_all(&mut r, std::slice::from_ref(&m), &[], &[], Path::new("/stage")).unwrap_err();
            let source = crate::plan::anchor::host_sources(&m).unwrap();
            let text = e.to_string();
            assert!(
                text.contains(&source.display().to_string()) && text.contains("not checked by the launch"),
                "{text}"
            );
            assert!(!r.ops.iter().any(|o| o.contains("bind=true") || o.starts_with("write")), "{m:?}: {:?}", r.ops);
        }
        let mounts = vec![
            MountSpec::Bind { source: "/st/copies/1".into(), target: "/h/.claude.json".into(), rw: true, dir: false },
            MountSpec::Bind {
                source: "/usr/bin/x".into(),
                target: "/run/agent-sandbox/x".into(),
                rw: false,
                dir: false,
            },
        ];
        let mut r = Recorder::default();
        apply_all(&mut r, &mounts, &[], &["/st".into()], Path::new("/stage")).unwrap();
        assert_eq!(r.ops.iter().filter(|o| o.contains("bind=true")).count(), 2, "{:?}", r.ops);
    }

    #[test]
    fn project_and_protected_paths_mount_in_order_with_ro_attr() {
        let mounts = vec![
            MountSpec::Bind { source: "/home/u/p".into(), target: "/home/u/p".into(), rw: true, dir: true },
            MountSpec::Pin { target: "/home/u/p/.git".into() },
            MountSpec::Bind {
                source: "/home/u/p/.git/config".into(),
                target: "/home/u/p/.git/config".into(),
                rw: false,
                dir: false,
            },
        ];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        assert_eq!(
            r.ops,
            vec![
                "bind-anchored /home/u/p (1:0) /newroot/home/u/p ro=false",
                // Inside the writable project nothing is resolved through a symlink: the jail
                // of another session (or the one whose job this is) could swap `.git` for one.
                "bind-beneath /newroot/home/u/p//.git /newroot/home/u/p//.git ro=false",
                "bind-beneath anchored /home/u/p//.git/config /newroot/home/u/p//.git/config ro=true",
            ]
        );
    }

    #[test]
    fn a_stub_is_one_bind_from_the_stubs_own_mount_and_beneath_a_writable_tree_follows_no_symlink() {
        let mounts = vec![
            MountSpec::Stub { target: "/usr/bin/sbatch".into() },
            MountSpec::Bind { source: "/work/p".into(), target: "/work/p".into(), rw: true, dir: true },
            MountSpec::Stub { target: "/work/p/bin/sbatch".into() },
        ];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        assert_eq!(
            r.ops,
            vec![
                "mount /newroot/run/agent-sandbox/agent-sandbox /newroot/usr/bin/sbatch - bind=true",
                "bind-anchored /work/p (1:0) /newroot/work/p ro=false",
                "bind-beneath /newroot/run/agent-sandbox//agent-sandbox /newroot/work/p//bin/sbatch ro=true",
            ]
        );
    }

    #[test]
    fn paths_inside_a_writable_tree_resolve_without_any_symlink() {
        // The jail can swap `.git` for a symlink (relative, or climbing to the old root) after
        // the plan looked: the mount must then fail, not follow it.
        let dir = std::env::temp_dir().join(format!("asb-beneath-{}", std::process::id()));
        let project = dir.join("p");
        std::fs::create_dir_all(project.join("real/.git")).unwrap();
        std::fs::write(project.join("real/.git/config"), "x").unwrap();
        std::fs::create_dir_all(dir.join("secret")).unwrap();
        std::fs::write(dir.join("secret/config"), "s").unwrap();
        std::os::unix::fs::symlink("../secret", project.join("up")).unwrap();
        std::os::unix::fs::symlink("real/.git", project.join(".git")).unwrap();
        assert!(open_beneath(&project, Path::new("real/.git/config")).is_ok());
        for rel in ["up/config", ".git/config", ".git", "../secret/config"] {
            assert!(open_beneath(&project, Path::new(rel)).is_err(), "{rel} was followed");
        }
        // A missing target is created in place; through a symlink it is not.
        assert!(target_beneath(&project, Path::new("real/.git/hooks"), true).is_ok());
        assert!(project.join("real/.git/hooks").is_dir());
        assert!(target_beneath(&project, Path::new(".git/hooks2"), true).is_err());
        assert!(!project.join("real/.git/hooks2").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn synthesized_files_are_staged_and_bound_read_only() {
        let mounts = vec![MountSpec::File { target: "/etc/passwd".into(), contents: "x".into(), mode: 0o644 }];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        assert_eq!(r.ops[0], "write /stage/1");
        assert!(r.ops.iter().any(|o| o == "attr /newroot/etc/passwd ro=true"));
    }

    /// The agent's settings as the jail sees them, copied to the staging tmpfs and bound over
    /// the file writable: what the agent writes there never reaches the host's file.
    /// A seed over a host tree, one at a host tree's own target (U3: `home.write` of the
    /// seeded `~/.gitconfig`) and a stripped copy are staged and bound over the file the plan
    /// checked, never written or created there (U1); a seed in the jail's own home is written.
    #[test]
    fn copies_over_host_files_are_staged_and_bound_onto_the_checked_file_only() {
        let mounts = vec![
            MountSpec::Tmpfs { target: "/h".into(), mode: 0o700 },
            MountSpec::Copy { source: "/h/.own".into(), target: "/h/.own".into() },
            MountSpec::Bind { source: "/h/.config".into(), target: "/h/.config".into(), rw: true, dir: true },
            MountSpec::Copy { source: "/h/.config/a.json".into(), target: "/h/.config/a.json".into() },
            MountSpec::Bind { source: "/h/.gitconfig".into(), target: "/h/.gitconfig".into(), rw: true, dir: false },
            MountSpec::Stripped { target: "/h/.gitconfig".into(), contents: "[user]\n".into(), seed: true },
            MountSpec::Stripped { target: "/h/.config/git/config".into(), contents: "[user]\n".into(), seed: false },
        ];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        let ops: Vec<&str> = r.ops.iter().map(String::as_str).filter(|o| !o.starts_with("bind-")).collect();
        assert!(!r.ops.iter().any(|o| o.starts_with("touch")), "nothing created: {:?}", r.ops);
        assert!(ops.contains(&"write /newroot/h/.own"), "{:?}", r.ops);
        for (n, (target, ro)) in
            [("/h/.config/a.json", false), ("/h/.gitconfig", false), ("/h/.config/git/config", true)].iter().enumerate()
        {
            let stage = format!("/stage/{}", n + 1);
            let a = checked(&mounts).into_iter().find(|a| a.path == Path::new(target)).unwrap();
            let want = format!("bind-over-checked {stage} /newroot{target} ({}:{}) ro={ro}", a.dev, a.ino);
            assert!(r.ops.contains(&want), "{want}: {:?}", r.ops);
            assert!(r.ops.contains(&format!("write {stage}")), "{:?}", r.ops);
            assert!(!r.ops.contains(&format!("write /newroot{target}")), "{target} written: {:?}", r.ops);
        }
        // Without the plan's look at the file, nothing is bound over it.
        let e = apply_all(&mut Recorder::default(), &mounts[2..4], &checked(&mounts[2..3]), &[], Path::new("/stage"));
        assert!(e.unwrap_err().to_string().contains("not checked by the launch"));
    }

    #[test]
    fn a_session_copy_is_the_files_text_staged_and_bound_writable_inside_the_root() {
        let mounts = vec![MountSpec::SessionCopy { target: "/home/u/.codex/config.toml".into() }];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        assert_eq!(r.ops, ["write /stage/1", "bind-in-root /stage/1 /newroot///home/u/.codex/config.toml ro=false"]);
    }

    #[test]
    fn instructions_are_the_files_own_text_then_the_notice_bound_read_only_inside_the_root() {
        let mounts =
            vec![MountSpec::Instructions { target: "/home/u/.codex/AGENTS.md".into(), notice: "NOTICE".into() }];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        assert_eq!(r.ops, ["write /stage/1", "bind-in-root /stage/1 /newroot///home/u/.codex/AGENTS.md ro=true"]);
    }

    #[test]
    fn overlay_puts_whiteouts_and_files_in_a_staged_layer() {
        let mounts = vec![MountSpec::Overlay {
            target: "/etc".into(),
            source: "/etc".into(),
            whiteouts: vec!["/etc/munge".into()],
            files: vec![crate::plan::fs::OverlayFile { path: "/etc/passwd".into(), contents: "x".into(), mode: 0o644 }],
        }];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        assert_eq!(
            r.ops,
            vec![
                "mkdir /stage/layer1",
                "whiteout /stage/layer1/munge",
                "write /stage/layer1/passwd",
                "overlay /stage/layer1 on anchored /etc at /newroot/etc",
            ]
        );
        assert_eq!(overlay_escape(Path::new("/a:b,c")), "/a\\:b\\,c");
    }

    /// An agent's directory inside a writable tree: its session layer is an overlay on a tmpfs
    /// of its own, whose lower layer is reached beneath the tree (opened as the plan checked
    /// it, where it really is), bound beneath the tree over
    /// the directory; its state is bound from the host over the layer.
    #[test]
    fn a_session_layer_is_an_overlay_on_its_own_tmpfs_bound_beneath_the_tree() {
        let mounts = vec![
            MountSpec::Bind { source: "/h/.cache".into(), target: "/h/.cache".into(), rw: true, dir: true },
            MountSpec::Layer { source: "/h/.cache/opencode".into(), target: "/h/.cache/opencode".into() },
            MountSpec::Bind {
                source: "/h/.cache/opencode/models.json".into(),
                target: "/h/.cache/opencode/models.json".into(),
                rw: true,
                dir: false,
            },
        ];
        let mut r = Recorder::default();
        apply(&mut r, &mounts).unwrap();
        assert_eq!(
            r.ops[1..],
            [
                "mkdir /stage/layer1",
                "mount tmpfs /stage/layer1 tmpfs bind=false",
                "layer anchored /h/.cache//opencode /stage/layer1",
                "bind-beneath /stage/layer1//merged /newroot/h/.cache//opencode ro=false",
                "bind-beneath anchored /h/.cache//opencode/models.json /newroot/h/.cache//opencode/models.json ro=false",
            ]
        );
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(unescape_mountinfo("/plain"), PathBuf::from("/plain"));
    }
}
