//! The passthrough: each inode the kernel knows is held as an `O_PATH` descriptor of the
//! backing file (as libfuse's passthrough_ll does), so every request works with `*at` calls
//! relative to it and renames of directories above never invalidate anything.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::{Gid, Uid};

use crate::counters::{Counters, Op};

struct Node {
    fd: Arc<OwnedFd>,
    key: (u64, u64),
    lookups: u64,
}

/// A directory's entries as read at its opening: inode, kind, name.
type Entries = Vec<(u64, FileType, OsString)>;

#[derive(Default)]
struct Tables {
    nodes: HashMap<u64, Node>,
    by_key: HashMap<(u64, u64), u64>,
    files: HashMap<u64, Arc<File>>,
    dirs: HashMap<u64, Arc<Entries>>,
}

/// What a setattr request changes.
struct Change {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    times: (Option<TimeOrNow>, Option<TimeOrNow>),
    fh: Option<FileHandle>,
}

pub struct SlowFs {
    delay: Duration,
    ttl: Duration,
    /// Listings answered with each entry's attributes (`--readdirplus`).
    plus: bool,
    counts: Counters,
    trace: Option<Mutex<File>>,
    next: AtomicU64,
    t: Mutex<Tables>,
}

type R<T> = Result<T, Errno>;

fn errno(e: nix::Error) -> Errno {
    Errno::from_i32(e as i32)
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn time(s: i64, ns: i64) -> SystemTime {
    let ns = u32::try_from(ns).unwrap_or(0);
    match u64::try_from(s) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, ns),
        Err(_) => UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + Duration::from_nanos(u64::from(ns)),
    }
}

fn attr(ino: u64, st: &FileStat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: u64::try_from(st.st_size).unwrap_or(0),
        blocks: u64::try_from(st.st_blocks).unwrap_or(0),
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: u32::try_from(st.st_rdev).unwrap_or(0),
        blksize: u32::try_from(st.st_blksize).unwrap_or(4096),
        flags: 0,
    }
}

/// `/proc/self/fd/N`: reopens or changes the file an `O_PATH` descriptor holds.
fn proc_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

fn stat_fd(fd: &OwnedFd) -> R<FileStat> {
    nix::sys::stat::fstatat(fd, "", AtFlags::AT_EMPTY_PATH | AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno)
}

fn timespec(t: Option<TimeOrNow>) -> nix::sys::time::TimeSpec {
    match t {
        None => nix::sys::time::TimeSpec::UTIME_OMIT,
        Some(TimeOrNow::Now) => nix::sys::time::TimeSpec::UTIME_NOW,
        Some(TimeOrNow::SpecificTime(t)) => {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            nix::sys::time::TimeSpec::from_duration(d)
        }
    }
}

impl SlowFs {
    pub fn new(backing: &Path, delay: Duration, ttl: Duration) -> Result<SlowFs, String> {
        let fd = nix::fcntl::open(backing, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| e.to_string())?;
        let st = stat_fd(&fd).map_err(|e| format!("{e:?}"))?;
        let key = (st.st_dev, st.st_ino);
        let mut t = Tables::default();
        t.nodes.insert(1, Node { fd: Arc::new(fd), key, lookups: 1 });
        t.by_key.insert(key, 1);
        Ok(SlowFs {
            delay,
            ttl,
            plus: false,
            counts: Counters::default(),
            trace: None,
            next: AtomicU64::new(2),
            t: Mutex::new(t),
        })
    }

    /// Listings answered as NFS's READDIRPLUS answers them (`--readdirplus`): each entry with
    /// its attributes, in the listing's one round trip, so that the kernel knows the names
    /// listed without a lookup each (Linux's NFS client lists so by default, `rdirplus`).
    pub fn with_readdirplus(mut self, on: bool) -> SlowFs {
        self.plus = on;
        self
    }
    /// Writes a line per metadata request to `out` (`--trace`).
    pub fn traced(mut self, out: File) -> SlowFs {
        self.trace = Some(Mutex::new(out));
        self
    }

    pub fn counters(&self) -> Counters {
        self.counts.clone()
    }

    /// Counts the request and, for metadata, waits the round trip.
    fn trip(&self, op: Op) {
        self.counts.add(op);
        if op.is_metadata() && !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
    }

    /// With `--trace`: one line per metadata request, `µs kind path` (CLOCK_MONOTONIC when it
    /// arrived, before its delay; the backing file's path as
    /// the kernel names its descriptor, and the name asked for under it), to see where a
    /// program's requests go.
    fn trace(&self, op: Op, ino: INodeNo, name: Option<&OsStr>) {
        let Some(out) = &self.trace else { return };
        let at = self.fd(ino).ok().and_then(|fd| std::fs::read_link(proc_path(&fd)).ok()).unwrap_or_default();
        // The monotonic clock the launcher's timing marks use (AGENT_SANDBOX_TIMING), in µs.
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes one timespec into `ts`, which outlives the call.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let us = ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000;
        let mut line = format!("{us} {} {}", op.name(), at.display());
        if let Some(n) = name {
            line.push('/');
            line.push_str(&n.to_string_lossy());
        }
        line.push('\n');
        let mut f = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = std::io::Write::write_all(&mut *f, line.as_bytes());
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn fd(&self, ino: INodeNo) -> R<Arc<OwnedFd>> {
        self.tables().nodes.get(&ino.0).map(|n| n.fd.clone()).ok_or(Errno::ESTALE)
    }

    /// Looks `name` up under `parent` and counts one more kernel reference to it.
    fn entry(&self, parent: INodeNo, name: &OsStr) -> R<FileAttr> {
        let pfd = self.fd(parent)?;
        let st = nix::sys::stat::fstatat(&*pfd, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno)?;
        let key = (st.st_dev, st.st_ino);
        let mut t = self.tables();
        if let Some(&ino) = t.by_key.get(&key) {
            if let Some(n) = t.nodes.get_mut(&ino) {
                n.lookups += 1;
                return Ok(attr(ino, &st));
            }
        }
        drop(t);
        let fd = nix::fcntl::openat(&*pfd, name, OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(errno)?;
        let ino = self.next.fetch_add(1, Ordering::Relaxed);
        let mut t = self.tables();
        t.nodes.insert(ino, Node { fd: Arc::new(fd), key, lookups: 1 });
        t.by_key.insert(key, ino);
        Ok(attr(ino, &st))
    }

    /// Gives a file just made as root to the user whose request made it.
    fn give(&self, parent: INodeNo, name: &OsStr, req: &Request) -> R<()> {
        let pfd = self.fd(parent)?;
        nix::unistd::fchownat(
            &*pfd,
            name,
            Some(Uid::from_raw(req.uid())),
            Some(Gid::from_raw(req.gid())),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(errno)
    }

    fn made(&self, parent: INodeNo, name: &OsStr, req: &Request, reply: ReplyEntry) {
        match self.give(parent, name, req).and_then(|()| self.entry(parent, name)) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// The listing opened as `fh`, for a readdir (plain or plus) from `offset`: its round trip
    /// counted and waited. The first call is one even for an empty directory (NFS's one
    /// READDIR); a call at the listing's end is counted apart, not delayed.
    fn listing(&self, ino: INodeNo, fh: FileHandle, offset: u64) -> Option<Arc<Entries>> {
        let Some(entries) = self.tables().dirs.get(&fh.0).cloned() else {
            self.trip(Op::Readdir);
            return None;
        };
        let op = match offset > 0 && usize::try_from(offset).is_ok_and(|o| o >= entries.len()) {
            true => Op::ReaddirEnd,
            false => Op::Readdir,
        };
        self.trace(op, ino, None);
        self.trip(op);
        Some(entries)
    }

    fn file(&self, fh: FileHandle) -> R<Arc<File>> {
        self.tables().files.get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn open_file(&self, fd: &OwnedFd, flags: i32) -> R<u64> {
        let flags = OFlag::from_bits_truncate(flags)
            & !(OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOCTTY | OFlag::O_NOFOLLOW)
            | OFlag::O_CLOEXEC;
        let f = nix::fcntl::open(proc_path(fd).as_str(), flags, Mode::empty()).map_err(errno)?;
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.tables().files.insert(fh, Arc::new(File::from(f)));
        Ok(fh)
    }

    fn do_setattr(&self, ino: INodeNo, c: Change) -> R<FileAttr> {
        let Change { mode, uid, gid, size, times, fh } = c;
        let fd = self.fd(ino)?;
        let path = proc_path(&fd);
        if let Some(m) = mode {
            nix::sys::stat::fchmodat(
                nix::fcntl::AT_FDCWD,
                path.as_str(),
                Mode::from_bits_truncate(m & 0o7777),
                nix::sys::stat::FchmodatFlags::FollowSymlink,
            )
            .map_err(errno)?;
        }
        if uid.is_some() || gid.is_some() {
            nix::unistd::fchownat(
                &*fd,
                "",
                uid.map(Uid::from_raw),
                gid.map(Gid::from_raw),
                AtFlags::AT_EMPTY_PATH | AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(errno)?;
        }
        if let Some(len) = size {
            let len = i64::try_from(len).map_err(|_| Errno::EFBIG)?;
            match fh.map(|h| self.file(h)) {
                Some(Ok(f)) => nix::unistd::ftruncate(f.as_fd(), len).map_err(errno)?,
                _ => nix::unistd::truncate(path.as_str(), len).map_err(errno)?,
            }
        }
        if times.0.is_some() || times.1.is_some() {
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                path.as_str(),
                &timespec(times.0),
                &timespec(times.1),
                nix::sys::stat::UtimensatFlags::FollowSymlink,
            )
            .map_err(errno)?;
        }
        Ok(attr(ino.0, &stat_fd(&fd)?))
    }

    fn list(&self, fd: &OwnedFd) -> R<Entries> {
        use std::os::unix::ffi::OsStrExt;
        let dfd = nix::fcntl::openat(fd, ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(errno)?;
        let mut dir = nix::dir::Dir::from_fd(dfd).map_err(errno)?;
        let mut out = vec![];
        for e in dir.iter() {
            let e = e.map_err(errno)?;
            let k = match e.file_type() {
                Some(nix::dir::Type::Directory) => FileType::Directory,
                Some(nix::dir::Type::Symlink) => FileType::Symlink,
                Some(nix::dir::Type::Fifo) => FileType::NamedPipe,
                Some(nix::dir::Type::CharacterDevice) => FileType::CharDevice,
                Some(nix::dir::Type::BlockDevice) => FileType::BlockDevice,
                Some(nix::dir::Type::Socket) => FileType::Socket,
                _ => FileType::RegularFile,
            };
            out.push((e.ino(), k, OsStr::from_bytes(e.file_name().to_bytes()).to_os_string()));
        }
        Ok(out)
    }
}

impl Filesystem for SlowFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.trace(Op::Lookup, parent, Some(name));
        self.trip(Op::Lookup);
        match self.entry(parent, name) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            // With a cache, absence is cached too (node 0: a negative entry), as NFS's
            // lookup cache keeps absent names until the directory changes.
            Err(e) if e.code() == libc::ENOENT && !self.ttl.is_zero() => {
                let none = FileAttr {
                    ino: INodeNo(0),
                    size: 0,
                    blocks: 0,
                    atime: UNIX_EPOCH,
                    mtime: UNIX_EPOCH,
                    ctime: UNIX_EPOCH,
                    crtime: UNIX_EPOCH,
                    kind: FileType::RegularFile,
                    perm: 0,
                    nlink: 0,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    blksize: 4096,
                    flags: 0,
                };
                reply.entry(&self.ttl, &none, Generation(0));
            }
            Err(e) => reply.error(e),
        }
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if self.plus {
            // Every first listing of a directory as READDIRPLUS (the kernel's `auto` mode
            // lists later chunks of a large one plainly, as NFS's client does).
            let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        }
        Ok(())
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut t = self.tables();
        let gone = match t.nodes.get_mut(&ino.0) {
            Some(n) if ino.0 != 1 => {
                n.lookups = n.lookups.saturating_sub(nlookup);
                (n.lookups == 0).then_some(n.key)
            }
            _ => None,
        };
        if let Some(key) = gone {
            t.nodes.remove(&ino.0);
            if t.by_key.get(&key) == Some(&ino.0) {
                t.by_key.remove(&key);
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.trace(Op::Getattr, ino, None);
        self.trip(Op::Getattr);
        match self.fd(ino).and_then(|fd| stat_fd(&fd)) {
            Ok(st) => reply.attr(&self.ttl, &attr(ino.0, &st)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.trace(Op::Setattr, ino, None);
        self.trip(Op::Setattr);
        match self.do_setattr(ino, Change { mode, uid, gid, size, times: (atime, mtime), fh }) {
            Ok(a) => reply.attr(&self.ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        use std::os::unix::ffi::OsStrExt;
        self.trace(Op::Readlink, ino, None);
        self.trip(Op::Readlink);
        match self.fd(ino).and_then(|fd| nix::fcntl::readlinkat(&*fd, "").map_err(errno)) {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        self.trace(Op::Mknod, parent, Some(name));
        self.trip(Op::Mknod);
        let r = self.fd(parent).and_then(|p| {
            nix::sys::stat::mknodat(
                &*p,
                name,
                SFlag::from_bits_truncate(mode & libc::S_IFMT),
                Mode::from_bits_truncate(mode & !umask & 0o7777),
                u64::from(rdev),
            )
            .map_err(errno)
        });
        match r {
            Ok(()) => self.made(parent, name, req, reply),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.trace(Op::Mkdir, parent, Some(name));
        self.trip(Op::Mkdir);
        let r = self.fd(parent).and_then(|p| {
            nix::sys::stat::mkdirat(&*p, name, Mode::from_bits_truncate(mode & !umask & 0o7777)).map_err(errno)
        });
        match r {
            Ok(()) => self.made(parent, name, req, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.trace(Op::Unlink, parent, Some(name));
        self.trip(Op::Unlink);
        match self
            .fd(parent)
            .and_then(|p| nix::unistd::unlinkat(&*p, name, nix::unistd::UnlinkatFlags::NoRemoveDir).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.trace(Op::Rmdir, parent, Some(name));
        self.trip(Op::Rmdir);
        match self
            .fd(parent)
            .and_then(|p| nix::unistd::unlinkat(&*p, name, nix::unistd::UnlinkatFlags::RemoveDir).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.trace(Op::Symlink, parent, Some(link_name));
        self.trip(Op::Symlink);
        match self.fd(parent).and_then(|p| nix::unistd::symlinkat(target, &*p, link_name).map_err(errno)) {
            Ok(()) => self.made(parent, link_name, req, reply),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.trace(Op::Rename, parent, Some(name));
        self.trip(Op::Rename);
        let r = self.fd(parent).and_then(|p| {
            let np = self.fd(newparent)?;
            nix::fcntl::renameat2(&*p, name, &*np, newname, nix::fcntl::RenameFlags::from_bits_truncate(flags.bits()))
                .map_err(errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.trace(Op::Link, newparent, Some(newname));
        self.trip(Op::Link);
        let r = self.fd(ino).and_then(|fd| {
            let np = self.fd(newparent)?;
            nix::unistd::linkat(&*fd, "", &*np, newname, AtFlags::AT_EMPTY_PATH).map_err(errno)
        });
        match r.and_then(|()| self.entry(newparent, newname)) {
            Ok(a) => reply.entry(&self.ttl, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.trace(Op::Open, ino, None);
        self.trip(Op::Open);
        match self.fd(ino).and_then(|fd| self.open_file(&fd, flags.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.trip(Op::Read);
        let r = self.file(fh).and_then(|f| {
            let mut buf = vec![0; size as usize];
            let n = f.read_at(&mut buf, offset).map_err(io_errno)?;
            buf.truncate(n);
            Ok(buf)
        });
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.trip(Op::Write);
        match self.file(fh).and_then(|f| f.write_at(data, offset).map_err(io_errno)) {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.tables().files.remove(&fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.trace(Op::Fsync, ino, None);
        self.trip(Op::Fsync);
        match self.file(fh).and_then(|f| f.sync_all().map_err(io_errno)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.trace(Op::Opendir, ino, None);
        self.trip(Op::Opendir);
        match self.fd(ino).and_then(|fd| self.list(&fd)) {
            Ok(entries) => {
                let fh = self.next.fetch_add(1, Ordering::Relaxed);
                self.tables().dirs.insert(fh, Arc::new(entries));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(entries) = self.listing(ino, fh, offset) else {
            reply.error(Errno::EBADF);
            return;
        };
        for (i, (ino, k, name)) in entries.iter().enumerate().skip(usize::try_from(offset).unwrap_or(usize::MAX)) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *k, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let Some(entries) = self.listing(ino, fh, offset) else {
            reply.error(Errno::EBADF);
            return;
        };
        for (i, (_, _, name)) in entries.iter().enumerate().skip(usize::try_from(offset).unwrap_or(usize::MAX)) {
            let next = (i + 1) as u64;
            // The kernel links no dentry for `.` and `..` and sends no forget for them: no
            // lookup is counted (as libfuse's passthrough_ll answers them).
            if name == "." || name == ".." {
                continue;
            }
            // Each entry listed is a lookup the kernel will forget; one gone since the
            // opening is left out.
            let Ok(a) = self.entry(ino, name) else { continue };
            if reply.add(a.ino, next, name, &self.ttl, &a, Generation(0)) {
                // Not sent: the lookup is taken back.
                self.forget(req, a.ino, 1);
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.tables().dirs.remove(&fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.trip(Op::Statfs);
        match self.fd(ino).and_then(|fd| nix::sys::statvfs::fstatvfs(&*fd).map_err(errno)) {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                u32::try_from(s.block_size()).unwrap_or(4096),
                u32::try_from(s.name_max()).unwrap_or(255),
                u32::try_from(s.fragment_size()).unwrap_or(4096),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        // ENOSYS: the kernel stops asking for the mount's life (as for NFS without xattrs).
        self.trip(Op::Xattr);
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        self.trip(Op::Xattr);
        reply.error(Errno::ENOSYS);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Only asked without default_permissions; the kernel has checked the modes.
        self.trip(Op::Access);
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.trace(Op::Create, parent, Some(name));
        self.trip(Op::Create);
        let r = (|| {
            let p = self.fd(parent)?;
            let oflags = OFlag::from_bits_truncate(flags) & !OFlag::O_NOFOLLOW | OFlag::O_CREAT | OFlag::O_CLOEXEC;
            let f = nix::fcntl::openat(&*p, name, oflags, Mode::from_bits_truncate(mode & !umask & 0o7777))
                .map_err(errno)?;
            self.give(parent, name, req)?;
            let a = self.entry(parent, name)?;
            let fh = self.next.fetch_add(1, Ordering::Relaxed);
            self.tables().files.insert(fh, Arc::new(File::from(f)));
            Ok::<_, Errno>((a, fh))
        })();
        match r {
            Ok((a, fh)) => reply.created(&self.ttl, &a, Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}
