//! Carries out a trapped syscall for the process that made it, once the rules allow it.
//!
//! Why not let the kernel continue the syscall after checking its path: the path is in the
//! caller's memory, and another thread (or a process sharing the page) can rewrite it between
//! the check and the kernel reading it again. So the guard reads the path once, resolves it
//! itself, checks the directory the entry is really in, and makes the call on its own copy,
//! as the same user: its result (a value, an errno, or a descriptor put into the caller's
//! table) is the caller's.
//!
//! Resolution follows the caller's view: relative paths start at its working directory or
//! at its descriptor, absolute ones at its root. What means "the calling process" in a path
//! (`/proc/self`, `/dev/fd/N`, `/dev/stdout`) is rewritten to the caller's own `/proc`
//! entry, and `/dev/tty` becomes the caller's terminal. A symlink elsewhere that points into
//! `/proc/self` is not followed (ELOOP).

use super::made;
use super::notify::{open_at, Caller, Notification};
use super::repo;
use super::rules::{self, Decision, Dir, Guarded, Kind, Op, Refusal};
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What becomes of a trapped syscall.
#[derive(Debug)]
pub enum Done {
    Value(i64),
    /// An open: this descriptor goes into the caller's table (close-on-exec as asked).
    Fd {
        fd: OwnedFd,
        cloexec: bool,
    },
    Errno(i32),
    Refused {
        refusal: Refusal,
        path: PathBuf,
    },
    /// An open of a FIFO, which blocks until the other end opens: to finish on a thread of
    /// its own (`finish_fifo`) so the guard keeps serving the rest of the jail.
    Fifo {
        obj: OwnedFd,
        flags: libc::c_int,
        cloexec: bool,
    },
    /// A repository's config written directly: `write` (a pipe's) goes into the caller's
    /// table; `finish_stream` reads the other end on a thread of its own and installs what
    /// was written, checked, when the writer closes it.
    Stream {
        write: OwnedFd,
        cloexec: bool,
        job: Box<Stream>,
    },
}

/// How what is written through the pipe makes the new config.
#[derive(Debug, Clone, Copy)]
pub enum Fill {
    /// It is the whole file (a new file, or O_TRUNC).
    Replace,
    /// It follows the file's bytes (O_APPEND).
    Append,
    /// It overwrites the file from its start.
    Overwrite,
}

/// What a stream writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Streamed {
    Config {
        made: bool,
    },
    Commondir,
    /// A `.env` (`jail::dotenv`).
    Dotenv,
}

/// The refusal of a call that would change a file the rules let change only through the
/// guard (`d` is not `Go`) by another way (a second name, a truncation, an open for reading
/// and writing).
fn not_so(d: Decision) -> Refusal {
    match d {
        Decision::DotenvStream | Decision::Dotenv => Refusal::Dotenv,
        _ => Refusal::ConfigInPlace,
    }
}

/// Where a stream's writes arrive.
#[derive(Debug)]
enum Source {
    /// A pipe's read end: the writing ends when every copy of its write end is closed.
    Pipe(OwnedFd),
    /// An unnamed file of the guard's (`O_TMPFILE`, next to the name) that the writer writes as
    /// a file (an editor `fstat`s, `fsync`s and `ftruncate`s it), read once inotify says the
    /// writer's last descriptor of it closed (`IN_CLOSE_WRITE`): a `.env`.
    File { file: OwnedFd, closed: nix::sys::inotify::Inotify, skip: usize },
}

/// A config (or commondir) being written through a pipe.
#[derive(Debug)]
pub struct Stream {
    what: Streamed,
    /// Where the writes arrive (taken by `finish_stream`).
    read: Option<Source>,
    dir: OwnedFd,
    dir_path: PathBuf,
    name: Vec<u8>,
    root: PathBuf,
    fill: Fill,
    mode: u32,
    /// The empty file was the guard's, made for this stream: removed if nothing is installed.
    placeholder: bool,
    /// The file at the name when the stream began (device, inode): what the writes go into.
    file: Option<FileId>,
    /// The writer's stderr, for the line saying what was left out.
    stderr: Option<OwnedFd>,
    /// Its place among the streams of its name (`Turn`).
    turn: Option<Turn>,
}

/// Streams of one name are installed in the order they were opened (`> .env` then `>> .env`
/// keeps both lines, whichever writer's thread comes first: outside review of A4, F5). A
/// stream waits for the ones before it at most `TURN_WAIT` (a writer that keeps its
/// descriptor open holds no one up for longer).
#[derive(Debug)]
pub struct Turn {
    name: (FileId, Vec<u8>),
    number: u64,
}

const TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Numbers are never given twice, for any name: a stream that outlived its followers' wait
/// (they went ahead) then ends after its name was forgotten, and must not count as done for
/// streams opened since; with numbers per name restarting at 0 it did, and let a later stream
/// install before an earlier one.
static NEXT_TURN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Per name: the streams not installed yet, by number.
type Turns = std::collections::HashMap<(FileId, Vec<u8>), std::collections::BTreeSet<u64>>;
static TURNS: std::sync::Mutex<Option<Turns>> = std::sync::Mutex::new(None);
static TURN_DONE: std::sync::Condvar = std::sync::Condvar::new();

impl Turn {
    fn take(dir: BorrowedFd, name: &[u8]) -> Option<Turn> {
        let st = nix::sys::stat::fstat(dir).ok()?;
        Some(Turn::on(((st.st_dev, st.st_ino), name.to_vec())))
    }

    fn on(name: (FileId, Vec<u8>)) -> Turn {
        let mut all = TURNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let number = NEXT_TURN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        all.get_or_insert_with(Default::default).entry(name.clone()).or_default().insert(number);
        Turn { name, number }
    }

    /// Whether a stream opened before this one on its name is not installed yet.
    fn waits(&self, all: &Option<Turns>) -> bool {
        all.as_ref().and_then(|m| m.get(&self.name)).and_then(|open| open.first()).is_some_and(|&f| f < self.number)
    }

    /// Waits until the streams opened before this one on its name are installed (or gave up).
    fn wait(&self) {
        self.wait_at_most(TURN_WAIT);
    }

    fn wait_at_most(&self, most: std::time::Duration) {
        let deadline = std::time::Instant::now() + most;
        let mut all = TURNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !self.waits(&all) || left.is_zero() {
                return;
            }
            all = TURN_DONE.wait_timeout(all, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

impl Drop for Turn {
    /// Done (installed, refused or given up): the streams after it need not wait for it.
    fn drop(&mut self) {
        let mut all = TURNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(map) = all.as_mut() {
            if let Some(open) = map.get_mut(&self.name) {
                open.remove(&self.number);
                if open.is_empty() {
                    map.remove(&self.name);
                }
            }
        }
        TURN_DONE.notify_all();
    }
}

/// Held from a check to the call it allows, for every call: the rules look at what other
/// calls change (a directory becomes a git directory only through another call), so two
/// calls must not both pass their checks on the state before either acted.
static GATE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn gate() -> std::sync::MutexGuard<'static, ()> {
    GATE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The short-circuit of every step: an errno or a refusal ends the call.
type Step<T> = Result<T, Done>;

fn errno(e: i32) -> Done {
    Done::Errno(e)
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn cstr(b: &[u8]) -> Step<CString> {
    CString::new(b).map_err(|_| errno(libc::EINVAL))
}

/// Where a path argument is resolved from when it is relative.
enum Base {
    /// The caller's `dirfd` argument (`AT_FDCWD`: its working directory).
    Caller(i32),
    /// A directory the guard holds (the one a relative symlink was found in).
    Dir(OwnedFd),
}

/// A directory the guard holds, looked into through its descriptor.
impl Dir for OwnedFd {
    fn has(&self, name: &str) -> bool {
        nix::sys::stat::fstatat(self.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    }
    fn parent(&self) -> Option<Box<dyn Dir>> {
        let up = openat2(self.as_fd(), b"..", libc::O_PATH | libc::O_DIRECTORY, 0, 0).ok()?;
        Some(Box::new(up))
    }
    fn id(&self) -> Option<(u64, u64)> {
        nix::sys::stat::fstat(self.as_fd()).ok().map(|st| (st.st_dev, st.st_ino))
    }
}

fn refused(refusal: Refusal, path: PathBuf) -> Done {
    Done::Refused { refusal, path }
}

/// The kind of an entry, from its mode.
fn kind_of(mode: u32) -> Kind {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Special,
    }
}

/// The directory an object the guard holds is in, and its name there: found by its path,
/// then held only if that directory's entry of that name is the same file (a rename between
/// the two would otherwise let another directory answer). None: it has no name (a pipe, a
/// deleted file: nothing to protect).
fn located(obj: BorrowedFd) -> Step<Option<Entry>> {
    let st = nix::sys::stat::fstat(obj).map_err(|e| errno(e as i32))?;
    let Some(mut p) = path_of(obj)? else {
        // Only what has no name (a pipe, a socket pair, an anonymous inode) reads as no path.
        let named = matches!(st.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK);
        return if named { Err(errno(libc::ENAMETOOLONG)) } else { Ok(None) };
    };
    if st.st_nlink == 0 {
        return Ok(None);
    }
    for _ in 0..3 {
        let (Some(dir_path), Some(name)) = (p.parent(), p.file_name()) else { return Ok(None) };
        let dir = openat2(at_cwd(), dir_path.as_os_str().as_bytes(), libc::O_PATH | libc::O_DIRECTORY, 0, 0)?;
        let there = nix::sys::stat::fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW);
        if there.is_ok_and(|t| (t.st_dev, t.st_ino) == (st.st_dev, st.st_ino)) {
            return Ok(Some(Entry { dir, dir_path: dir_path.to_path_buf(), name: name.as_bytes().to_vec() }));
        }
        // Moved meanwhile: look again where it is now.
        match path_of(obj)? {
            Some(again) => p = again,
            None => return Err(errno(libc::ENAMETOOLONG)),
        }
    }
    // Where it is cannot be told while the jail keeps moving it: refused, not guessed.
    Err(errno(libc::EAGAIN))
}

/// An absolute path with repeated slashes and `.` components dropped (`//proc/./self` is
/// `/proc/self`), `..` kept, a trailing slash kept: the same name to the kernel, spelled so that
/// `rewrite_magic` knows it.
fn tidy(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    for part in path.split(|c| *c == b'/').filter(|p| !p.is_empty() && *p != b".") {
        out.push(b'/');
        out.extend_from_slice(part);
    }
    if out.is_empty() || path.ends_with(b"/") {
        out.push(b'/');
    }
    out
}

/// `/proc/self/...` and friends, as the caller means them: its own `/proc/<tid>` entry. A `..`
/// out of it lands in `/proc`, where `own_proc` refuses any other process's entries.
pub fn rewrite_magic(path: &[u8], tid: i32) -> Option<Vec<u8>> {
    let path = &tidy(path);
    if !path.starts_with(b"/proc/") && !path.starts_with(b"/dev/") {
        return None;
    }
    let own = format!("/proc/{tid}");
    let exact: [(&[u8], String); 6] = [
        (b"/proc/self", own.clone()),
        (b"/proc/thread-self", own.clone()),
        (b"/dev/fd", format!("{own}/fd")),
        (b"/dev/stdin", format!("{own}/fd/0")),
        (b"/dev/stdout", format!("{own}/fd/1")),
        (b"/dev/stderr", format!("{own}/fd/2")),
    ];
    for (prefix, to) in exact {
        if let Some(rest) = path.strip_prefix(prefix) {
            if rest.is_empty() || rest.starts_with(b"/") {
                let mut out = to.into_bytes();
                out.extend_from_slice(rest);
                return Some(out);
            }
        }
    }
    None
}

/// `(directory part, last name)`; trailing slashes dropped. `/` alone is `("/", ".")`.
pub fn split(path: &[u8]) -> (&[u8], &[u8]) {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    let p = &path[..end];
    if p == b"/" {
        return (b"/", b".");
    }
    match p.iter().rposition(|c| *c == b'/') {
        Some(0) => (b"/", &p[1..]),
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (b".", p),
    }
}

fn openat2(dir: BorrowedFd, path: &[u8], flags: libc::c_int, mode: u32, resolve: u64) -> Step<OwnedFd> {
    let c = cstr(path)?;
    // `struct open_how` of <linux/openat2.h> (libc's is non-exhaustive).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow { flags: (flags | libc::O_CLOEXEC) as u32 as u64, mode: u64::from(mode), resolve };
    // SAFETY: `c` and `how` live for the call; the size passed is that of `how`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(errno(last_errno()));
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn at_cwd() -> BorrowedFd<'static> {
    // SAFETY: AT_FDCWD is a valid "descriptor" for *at calls and is never closed.
    unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) }
}

/// Opens `path` (O_PATH plus `flags`) as the caller would reach it.
fn open_path(c: &Caller, base: &Base, path: &[u8], flags: libc::c_int) -> Step<OwnedFd> {
    if path.is_empty() {
        return Err(errno(libc::ENOENT));
    }
    let flags = flags | libc::O_PATH;
    if let Some(own) = path.starts_with(b"/").then(|| rewrite_magic(path, c.tid)).flatten() {
        // The caller's own /proc entries: magic links, followed on purpose, so never out of
        // them (`/proc/self/../1/fd/N` would be PID 1's descriptor, the orchestrator's
        // `--json-status` pipe among them, issue 33).
        if own.split(|b| *b == b'/').any(|p| p == b"..") {
            return Err(errno(libc::EACCES));
        }
        return openat2(at_cwd(), &own, flags, 0, 0);
    }
    if path.starts_with(b"/") {
        let root = open_at(c.dir(), "root", libc::O_PATH | libc::O_DIRECTORY).map_err(errno)?;
        return openat2(root.as_fd(), path, flags, 0, libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS);
    }
    let held;
    let dir = match base {
        Base::Dir(d) => d.as_fd(),
        Base::Caller(libc::AT_FDCWD) => {
            held = open_at(c.dir(), "cwd", libc::O_PATH | libc::O_DIRECTORY).map_err(errno)?;
            // The working directory itself (the directory of a bare name): opened already.
            if path == b"." && flags & libc::O_NOFOLLOW == 0 {
                return Ok(held);
            }
            held.as_fd()
        }
        Base::Caller(fd) if *fd >= 0 => {
            held = open_at(c.dir(), &format!("fd/{fd}"), libc::O_PATH)
                .map_err(|e| errno(if e == libc::ENOENT { libc::EBADF } else { e }))?;
            held.as_fd()
        }
        Base::Caller(_) => return Err(errno(libc::EBADF)),
    };
    openat2(dir, path, flags, 0, libc::RESOLVE_NO_MAGICLINKS)
}

/// A procfs path is opened by the guard only where it is the caller's own (`/proc/<its
/// pid or tid>/...`) or no process's (`/proc/sys`, `/proc/meminfo`): the guard is PID 1,
/// and another process's entries, its own above all (`/proc/1/maps`, `/proc/1/fd/N`, reached
/// as `/proc/self/../1` or `//proc/1`), are not the caller's to open through it (EACCES, as
/// the kernel answers for a process one may not trace).
fn own_proc(c: &Caller, path: &Path) -> Step<()> {
    let Ok(rest) = path.strip_prefix("/proc") else { return Ok(()) };
    let Some(first) = rest.components().next().and_then(|p| p.as_os_str().to_str()) else { return Ok(()) };
    let Ok(pid) = first.parse::<i32>() else { return Ok(()) };
    if pid == c.tid || c.tgid().is_ok_and(|t| t == pid) {
        return Ok(());
    }
    Err(errno(libc::EACCES))
}

/// The same for an object the guard holds: checked where it is on a procfs.
fn own_proc_object(c: &Caller, obj: BorrowedFd) -> Step<()> {
    if !on_procfs(obj) {
        return Ok(());
    }
    match path_of(obj)? {
        Some(p) => own_proc(c, &p),
        None => Ok(()),
    }
}

/// Whether `dir` is in a procfs (whose symlinks may be magic links). `fstatfs` is a round
/// trip on NFS and FUSE (one per file the guard creates there, issue 35): the answer is kept
/// per device, which names one filesystem for as long as it is mounted, and nothing in the
/// jail mounts or unmounts (the mount calls are denied, a nested namespace refused under the
/// guard). The device comes from the inode as cached (`AT_STATX_DONT_SYNC`: no request).
fn on_procfs(dir: BorrowedFd) -> bool {
    static KNOWN: std::sync::Mutex<Vec<(u64, bool)>> = std::sync::Mutex::new(Vec::new());
    const MOST: usize = 64;
    let asked =
        || nix::sys::statfs::fstatfs(dir).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC);
    let Some(dev) = device_of(dir) else { return asked() };
    let known = |k: &Vec<(u64, bool)>| k.iter().find(|(d, _)| *d == dev).map(|(_, p)| *p);
    if let Some(p) = known(&KNOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)) {
        return p;
    }
    let p = asked();
    let mut k = KNOWN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if k.len() < MOST && known(&k).is_none() {
        k.push((dev, p));
    }
    p
}

/// The device `fd`'s inode is on, as the kernel has it cached.
fn device_of(fd: BorrowedFd) -> Option<u64> {
    // SAFETY: statx is plain data written by the kernel.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let flags = libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC;
    // SAFETY: the empty path and `st` live for the call; `fd` is open.
    let rc = unsafe { libc::statx(fd.as_raw_fd(), c"".as_ptr(), flags, libc::STATX_TYPE, &mut st) };
    (rc == 0).then(|| libc::makedev(st.stx_dev_major, st.stx_dev_minor))
}

/// The path of what `fd` refers to, as the guard sees it; None for what has no path (a
/// pipe, a socket, an anonymous inode).
fn path_of(fd: BorrowedFd) -> Step<Option<PathBuf>> {
    // A path the kernel cannot spell (longer than PATH_MAX) is an error, never "no path":
    // the rules would have nothing to decide on.
    let p = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| errno(e.raw_os_error().unwrap_or(libc::ENAMETOOLONG)))?;
    Ok(p.is_absolute().then_some(p))
}

/// The directory an entry is in, and its name there.
struct Entry {
    dir: OwnedFd,
    dir_path: PathBuf,
    name: Vec<u8>,
}

fn entry(c: &Caller, base: &Base, path: &[u8]) -> Step<Entry> {
    if path.is_empty() {
        return Err(errno(libc::ENOENT));
    }
    let (dir_part, name) = split(path);
    let dir = open_path(c, base, dir_part, libc::O_DIRECTORY)?;
    let dir_path = path_of(dir.as_fd())?.ok_or(errno(libc::ENOENT))?;
    Ok(Entry { dir, dir_path, name: name.to_vec() })
}

impl Entry {
    fn name_c(&self) -> Step<CString> {
        cstr(&self.name)
    }

    fn is_dot(&self) -> bool {
        self.name == b"." || self.name == b".."
    }

    fn path(&self) -> PathBuf {
        self.dir_path.join(OsStr::from_bytes(&self.name))
    }

    /// Reads the directory's path again, under the gate: between the resolution and the gate
    /// another thread's rename may have moved the directory (to `.git`, say), and the rules
    /// must judge where it is now. Under the gate no trapped call moves a directory.
    fn refresh(&mut self) -> Step<()> {
        self.dir_path = path_of(self.dir.as_fd())?.ok_or(errno(libc::ENOENT))?;
        Ok(())
    }

    /// The rules' decision on `op` here (under the gate).
    fn decide(&self, g: &Guarded, op: Op) -> Step<Decision> {
        if self.is_dot() {
            return Ok(Decision::Go);
        }
        g.decide(&self.dir, &self.dir_path, OsStr::from_bytes(&self.name), op).map_err(|r| refused(r, self.path()))
    }

    /// What a decision asks for before the call: a directory becoming a git directory is
    /// checked, a worktree's commondir too.
    fn before(&self, g: &Guarded, d: Decision) -> Step<()> {
        let root = g.root_of(&self.dir_path).unwrap_or(&self.dir_path).to_path_buf();
        if matches!(d, Decision::FirstMark | Decision::MadeGitDir | Decision::Arrives) {
            g.room(1).map_err(|r| refused(r, self.path()))?;
        }
        let done = match d {
            Decision::FirstMark => repo::check_git_dir(self.dir.as_fd(), &self.dir_path, &root),
            Decision::Commondir => repo::check_commondir(self.dir.as_fd(), &self.dir_path),
            _ => Ok(()),
        };
        done.map_err(|r| refused(r, self.path()))
    }

    /// What a decision asks for after the call succeeded: the git directories it made.
    fn after(&self, g: &Guarded, d: Decision) {
        match d {
            Decision::FirstMark => {
                let _ = g.note(&self.dir_path, self.dir.id());
            }
            Decision::MadeGitDir => {
                let id = nix::sys::stat::fstatat(
                    self.dir.as_fd(),
                    self.name.as_slice(),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .ok()
                .map(|st| (st.st_dev, st.st_ino));
                let _ = g.note(&self.path(), id);
            }
            _ => {}
        }
    }
}

/// Sets the calling thread's umask to the caller's (each guard thread has its own `fs`).
fn take_umask(c: &Caller) -> Step<()> {
    let mask = c.umask().map_err(errno)?;
    // SAFETY: umask only changes this thread's file-creation mask (CLONE_FS unshared).
    unsafe { libc::umask(mask) };
    Ok(())
}

/// A symlink about to be at `e`: counted where the exit check looks (`made`).
fn record_link(g: &Guarded, e: &Entry) {
    if g.links.covers(&e.dir_path) {
        made::link();
    }
}

/// A rename about to be carried out, for `made`: a link moved onto a name where the exit
/// check looks (each, in an exchange), or a directory arriving there from a place it does not
/// look (the links it holds were never seen made).
fn record_rename(g: &Guarded, (from, kind): (&Entry, Kind), (to, other): (&Entry, Option<Kind>), exchanged: bool) {
    if kind == Kind::Symlink {
        record_link(g, to);
    }
    if other == Some(Kind::Symlink) {
        record_link(g, from);
    }
    if kind == Kind::Dir || other == Some(Kind::Dir) {
        let covered = |e: &Entry| g.links.covers(&e.dir_path);
        if (covered(to) && !covered(from)) || (exchanged && covered(from) && !covered(to)) {
            made::link();
        }
    }
}

/// Ends the guard's work for good and says whether it made no link where the exit check
/// looks (`made`): the gate is taken and never given back, so a call still on its way when
/// the session ended waits for ever instead of making a link uncounted.
pub fn close() -> bool {
    std::mem::forget(gate());
    made::none()
}

fn done_value(rc: libc::c_int) -> Done {
    if rc < 0 {
        Done::Errno(last_errno())
    } else {
        Done::Value(i64::from(rc))
    }
}

/// Carries out one trapped syscall.
pub fn carry_out(c: &Caller, n: &Notification, g: &Guarded) -> Done {
    let a = n.args;
    let int = |i: usize| a[i] as i32;
    let result = match n.nr {
        nr if nr == libc::SYS_openat => open(c, g, Base::Caller(int(0)), a[1], int(2), a[3] as u32),
        nr if nr == libc::SYS_mkdirat => mkdir(c, g, Base::Caller(int(0)), a[1], a[2] as u32),
        nr if nr == libc::SYS_mknodat => mknod(c, g, Base::Caller(int(0)), a[1], a[2] as u32, a[3]),
        nr if nr == libc::SYS_symlinkat => symlink(c, g, a[0], Base::Caller(int(1)), a[2]),
        nr if nr == libc::SYS_linkat => link(c, g, (Base::Caller(int(0)), a[1]), (Base::Caller(int(2)), a[3]), int(4)),
        nr if nr == libc::SYS_bind => bind(c, g, int(0), a[1], a[2] as u32),
        nr if nr == libc::SYS_renameat => rename(c, g, (Base::Caller(int(0)), a[1]), (Base::Caller(int(2)), a[3]), 0),
        nr if nr == libc::SYS_truncate => truncate(c, g, a[0], a[1] as i64),
        nr if nr == libc::SYS_unlinkat && int(2) & libc::AT_REMOVEDIR != 0 => rmdir(c, g, Base::Caller(int(0)), a[1]),
        #[cfg(target_arch = "x86_64")]
        nr if nr == libc::SYS_rmdir => rmdir(c, g, Base::Caller(libc::AT_FDCWD), a[0]),
        nr if nr == libc::SYS_renameat2 => {
            rename(c, g, (Base::Caller(int(0)), a[1]), (Base::Caller(int(2)), a[3]), a[4] as u32)
        }
        #[cfg(target_arch = "x86_64")]
        nr if nr == libc::SYS_open => open(c, g, Base::Caller(libc::AT_FDCWD), a[0], int(1), a[2] as u32),
        #[cfg(target_arch = "x86_64")]
        nr if nr == libc::SYS_creat => {
            open(c, g, Base::Caller(libc::AT_FDCWD), a[0], libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, a[1] as u32)
        }
        #[cfg(target_arch = "x86_64")]
        nr if nr == libc::SYS_mkdir => mkdir(c, g, Base::Caller(libc::AT_FDCWD), a[0], a[1] as u32),
        #[cfg(target_arch = "x86_64")]
        nr if nr == libc::SYS_mknod => mknod(c, g, Base::Caller(libc::AT_FDCWD), a[0], a[1] as u32, a[2]),
        #[cfg(target_arch = "x86_64")]
        nr if nr == libc::SYS_symlink => symlink(c, g, a[0], Base::Caller(libc::AT_FDCWD), a[1]),
        #[cfg(target_arch = "x86_64")]
        nr if nr == libc::SYS_link => {
            link(c, g, (Base::Caller(libc::AT_FDCWD), a[0]), (Base::Caller(libc::AT_FDCWD), a[1]), 0)
        }
        #[cfg(target_arch = "x86_64")]
        nr if nr == libc::SYS_rename => {
            rename(c, g, (Base::Caller(libc::AT_FDCWD), a[0]), (Base::Caller(libc::AT_FDCWD), a[1]), 0)
        }
        _ => Err(errno(libc::ENOSYS)),
    };
    result.unwrap_or_else(|d| d)
}

/// What `reopen` answers when the file it was given was replaced (a config installed by a
/// stream) before it could look at it: the open is resolved again from the caller's path.
const REPLACED: libc::c_int = libc::ESTALE;

fn open(c: &Caller, g: &Guarded, base: Base, path: u64, flags: libc::c_int, mode: u32) -> Step<Done> {
    let path = c.read_string(path).map_err(errno)?;
    let Base::Caller(dirfd) = base else { return open_once(c, g, base, path, flags, mode) };
    for _ in 0..3 {
        match open_once(c, g, Base::Caller(dirfd), path.clone(), flags, mode) {
            Err(Done::Errno(REPLACED)) => continue,
            done => return done,
        }
    }
    // Replaced again each time: the jail keeps installing configs at this name.
    Err(errno(libc::EAGAIN))
}

fn open_once(c: &Caller, g: &Guarded, base: Base, path: Vec<u8>, flags: libc::c_int, mode: u32) -> Step<Done> {
    let cloexec = flags & libc::O_CLOEXEC != 0;
    // Never the guard's own controlling terminal (it has none and must not get one).
    let flags = flags | libc::O_NOCTTY;
    // open(2) keeps only the permission bits of a mode, openat2 refuses the rest (EINVAL):
    // vim's probe passes `S_IFREG | 0600`.
    let mode = mode & 0o7777;
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        // An unnamed file in a directory: a name comes only with a later linkat, trapped too.
        let dir = open_path(c, &base, &path, libc::O_DIRECTORY)?;
        take_umask(c)?;
        let fd = openat2(dir.as_fd(), b".", flags, mode, 0)?;
        return Ok(Done::Fd { fd, cloexec });
    }
    if flags & libc::O_CREAT != 0 && !path.ends_with(b"/") {
        return create(c, g, base, path, flags, mode, cloexec);
    }
    let follow = if flags & libc::O_NOFOLLOW != 0 { libc::O_NOFOLLOW } else { 0 };
    let obj = open_path(c, &base, &path, follow | (flags & libc::O_DIRECTORY))?;
    reopen(c, g, obj, flags & !(libc::O_CREAT | libc::O_EXCL), cloexec)
}

/// `open` with O_CREAT: the name is created in the directory it resolves to, or, if it is
/// there already, opened as an existing file; a symlink in last place is followed (it may
/// point at a name to create elsewhere, which is checked in its own directory).
fn create(
    c: &Caller,
    g: &Guarded,
    base: Base,
    path: Vec<u8>,
    flags: libc::c_int,
    mode: u32,
    cloexec: bool,
) -> Step<Done> {
    let (mut base, mut path) = (base, path);
    for _ in 0..40 {
        let mut e = entry(c, &base, &path)?;
        if on_procfs(e.dir.as_fd()) {
            own_proc(c, &e.dir_path)?;
        }
        if e.is_dot() {
            let obj = openat2(e.dir.as_fd(), &e.name, libc::O_PATH, 0, 0)?;
            return reopen(c, g, obj, flags & !(libc::O_CREAT | libc::O_EXCL), cloexec);
        }
        let name = e.name_c()?;
        // SAFETY: stat is plain data written by the kernel.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `name` and `st` live for the call.
        let rc = unsafe { libc::fstatat(e.dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
        if rc < 0 {
            let err = last_errno();
            if err != libc::ENOENT {
                return Err(errno(err));
            }
            take_umask(c)?;
            let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
            let made = {
                let _gate = gate();
                e.refresh()?;
                let d = e.decide(g, Op::Make(Kind::File))?;
                if let Some(what) = streamed(d) {
                    if flags & libc::O_ACCMODE != libc::O_WRONLY {
                        return Err(refused(not_so(d), e.path()));
                    }
                    let umask = c.umask().map_err(errno)?;
                    // A new `.env` holds secrets most often, and the writer's `fchmod` reaches
                    // only its pipe: the owner's bits alone.
                    let mode = if what == Streamed::Dotenv { mode & 0o700 } else { mode };
                    return stream(c, g, e, what, Fill::Replace, mode & !umask & 0o7777, cloexec);
                }
                e.before(g, d)?;
                // O_EXCL: what was decided on is a new name; one made meanwhile is looked at again.
                let made = openat2(e.dir.as_fd(), &e.name, flags | libc::O_EXCL, mode, resolve);
                if made.is_ok() {
                    e.after(g, d);
                }
                made
            };
            match made {
                Ok(fd) => return Ok(Done::Fd { fd, cloexec }),
                // A symlink or a file appeared since: look again.
                Err(Done::Errno(libc::ELOOP)) if flags & libc::O_EXCL == 0 => continue,
                Err(Done::Errno(libc::EEXIST)) if flags & libc::O_EXCL == 0 => continue,
                Err(d) => return Err(d),
            }
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK && on_procfs(e.dir.as_fd()) {
            // A magic link (`/proc/<tid>/fd/1`): what it points to is the object itself, which
            // its text (`pipe:[123]`, a path seen from another root) does not name.
            if flags & libc::O_EXCL != 0 {
                return Err(errno(libc::EEXIST));
            }
            let obj = openat2(e.dir.as_fd(), &e.name, libc::O_PATH, 0, 0)?;
            return reopen(c, g, obj, flags & !(libc::O_CREAT | libc::O_EXCL), cloexec);
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            if flags & libc::O_EXCL != 0 {
                return Err(errno(libc::EEXIST));
            }
            if flags & libc::O_NOFOLLOW != 0 {
                return Err(errno(libc::ELOOP));
            }
            let target = nix::fcntl::readlinkat(e.dir.as_fd(), name.as_c_str()).map_err(|e| errno(e as i32))?;
            path = target.as_bytes().to_vec();
            base = Base::Dir(e.dir);
            continue;
        }
        if flags & libc::O_EXCL != 0 {
            return Err(errno(libc::EEXIST));
        }
        let obj = openat2(e.dir.as_fd(), &e.name, libc::O_PATH | libc::O_NOFOLLOW, 0, 0)?;
        return reopen(c, g, obj, flags & !(libc::O_CREAT | libc::O_EXCL), cloexec);
    }
    Err(errno(libc::ELOOP))
}

/// A pipe for the caller's writes to a repository's config or commondir (see
/// `Done::Stream`), a file of the guard's for a `.env` (`file_source`). A new file gets an
/// empty one of the guard's at once (under the gate), so that the name is there for what the
/// writer does next (`chmod`, `utime`, `stat`): git reads an empty config as one with no
/// entries.
fn stream(c: &Caller, g: &Guarded, e: Entry, what: Streamed, fill: Fill, mode: u32, cloexec: bool) -> Step<Done> {
    let root = g.root_of(&e.dir_path).unwrap_or(&e.dir_path).to_path_buf();
    let there = nix::sys::stat::fstatat(e.dir.as_fd(), e.name.as_slice(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW);
    let placeholder = there.is_err();
    let as_file = if what == Streamed::Dotenv { file_source(e.dir.as_fd(), &e.name, fill, mode) } else { None };
    let (read, write, fill) = match as_file {
        // Appended to the file as it is at the install (only the bytes written after what
        // the file held when opened: `skip`); otherwise the file is the whole new text.
        Some((source, write)) => {
            (source, write, if matches!(fill, Fill::Append) { Fill::Append } else { Fill::Replace })
        }
        None => {
            let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| errno(e as i32))?;
            (Source::Pipe(read), write, fill)
        }
    };
    if placeholder {
        repo::install(e.dir.as_fd(), &e.name, b"", mode).map_err(errno)?;
    }
    let file = file_at(e.dir.as_fd(), &e.name);
    let turn = Turn::take(e.dir.as_fd(), &e.name);
    let job = Stream {
        turn,
        what,
        read: Some(read),
        dir: e.dir,
        dir_path: e.dir_path,
        name: e.name,
        root,
        fill,
        mode,
        placeholder,
        file,
        stderr: c.fd(2).ok(),
    };
    Ok(Done::Stream { write, cloexec, job: Box::new(job) })
}

/// A file of the guard's for the writer, holding what the name holds first unless the write
/// replaces it (`fill`), with the writer's descriptor of it (write-only, appending if asked).
/// None where the filesystem has no `O_TMPFILE` or inotify is out of watches: a pipe then.
fn file_source(dir: BorrowedFd, name: &[u8], fill: Fill, mode: u32) -> Option<(Source, OwnedFd)> {
    use nix::fcntl::OFlag;
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    use std::io::Write;
    let first = match fill {
        Fill::Replace => vec![],
        _ => repo::read_file(dir, name, crate::jail::dotenv::MAX_BYTES as usize)
            .ok()?
            .map(|(b, _)| b)
            .unwrap_or_default(),
    };
    let made = nix::fcntl::openat(
        dir,
        ".",
        OFlag::O_TMPFILE | OFlag::O_RDWR | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::from_bits_truncate(mode & 0o7777),
    )
    .ok()?;
    // The umask of this thread is the caller's; the bits are the file's own.
    nix::sys::stat::fchmod(&made, nix::sys::stat::Mode::from_bits_truncate(mode & 0o7777)).ok()?;
    std::fs::File::from(made.try_clone().ok()?).write_all(&first).ok()?;
    let file = reopen_now(&made, libc::O_RDONLY).ok()?;
    let append = if matches!(fill, Fill::Append) { libc::O_APPEND } else { 0 };
    let write = reopen_now(&made, libc::O_WRONLY | append).ok()?;
    // The guard's own writable descriptor goes before the watch: only the writer's close counts.
    drop(made);
    let closed = Inotify::init(InitFlags::IN_CLOEXEC).ok()?;
    closed.add_watch(format!("/proc/self/fd/{}", file.as_raw_fd()).as_str(), AddWatchFlags::IN_CLOSE_WRITE).ok()?;
    let skip = if matches!(fill, Fill::Append) { first.len() } else { 0 };
    Some((Source::File { file, closed, skip }, write))
}

/// What the writer wrote, up to `max` bytes, once it is done (all its descriptors closed),
/// how many bytes more there were, and the bits the writer gave the file (a file's).
fn written(source: Source, max: usize) -> (Vec<u8>, usize, Option<u32>) {
    use std::io::Read;
    let mut r = match source {
        Source::Pipe(read) => std::fs::File::from(read),
        Source::File { file, closed, skip } => {
            loop {
                match closed.read_events() {
                    Ok(ev) if ev.iter().any(|e| e.mask.contains(nix::sys::inotify::AddWatchFlags::IN_CLOSE_WRITE)) => {
                        break
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break,
                }
            }
            // What the file held when opened is there again at the install (Append).
            let mut f = std::fs::File::from(file);
            let _ = std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(skip as u64));
            f
        }
    };
    let mut got = Vec::new();
    let mut more = 0usize;
    let mut buf = [0u8; 16384];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if got.len() + n <= max => got.extend_from_slice(&buf[..n]),
            Ok(n) => more += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let bits = match r.metadata() {
        Ok(m) if m.is_file() => Some(std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777),
        _ => None,
    };
    (got, more, bits)
}

/// The file a name holds (device, inode), its link not followed.
fn file_at(dir: BorrowedFd, name: &[u8]) -> Option<FileId> {
    nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok().map(|st| (st.st_dev, st.st_ino))
}

/// The files the guard's stream installs put in place of others (replaced, successor), the
/// latest last: the file a stream began on is still the one written when only the guard's
/// own installs replaced it since (`cp` of a repository, then `>>` to its config before the
/// copy's install landed). Read and written with the gate held.
static SUCCESSORS: std::sync::Mutex<Vec<(FileId, FileId)>> = std::sync::Mutex::new(Vec::new());

/// A file (device, inode).
type FileId = (u64, u64);

/// Enough for the streams a session has pending at once; older links are forgotten (the
/// stream they would have let through is then skipped, as a replaced one is).
const MAX_SUCCESSORS: usize = 256;

/// Whether the file a name holds `now` is the one a stream began on, or what the guard's
/// own installs put in its place since.
fn still_written(began: Option<FileId>, now: Option<FileId>) -> bool {
    let (Some(mut at), Some(now)) = (began, now) else { return false };
    let links = SUCCESSORS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..=links.len() {
        if at == now {
            return true;
        }
        match links.iter().rev().find(|(from, _)| *from == at) {
            Some((_, to)) => at = *to,
            None => return false,
        }
    }
    false
}

/// Remembers that an install of the guard's put `new` in place of `old`.
fn installed_over(old: Option<FileId>, new: Option<FileId>) {
    let (Some(old), Some(new)) = (old, new) else { return };
    let mut links = SUCCESSORS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if links.len() >= MAX_SUCCESSORS {
        links.remove(0);
    }
    links.push((old, new));
}

/// A stream's decision as what it writes.
fn streamed(d: Decision) -> Option<Streamed> {
    match d {
        Decision::ConfigStream { made } => Some(Streamed::Config { made }),
        Decision::CommondirStream => Some(Streamed::Commondir),
        Decision::DotenvStream => Some(Streamed::Dotenv),
        _ => None,
    }
}

/// Reads what the caller writes into the pipe until it closes it (all its copies), then,
/// under the gate, installs the config it makes, keeping only the entries the rules allow
/// (a copy cannot be refused once written): returns what to tell the writer, if anything.
pub fn finish_stream(mut job: Stream, g: &Guarded) -> Option<(Refusal, PathBuf)> {
    let path = job.dir_path.join(OsStr::from_bytes(&job.name));
    let max = match job.what {
        Streamed::Dotenv => crate::jail::dotenv::MAX_BYTES as usize,
        _ => super::gitconfig::MAX_CONFIG,
    };
    let (piped, more, bits) = written(job.read.take()?, max);
    // After the streams of this name opened before it; its turn ends when this returns.
    let turn = job.turn.take();
    if let Some(t) = &turn {
        t.wait();
    }
    if more > 0 {
        return Some((Refusal::Unchecked(format!("a config larger than {max} bytes")), path));
    }
    let _gate = gate();
    // The name no longer holds the file the writes went into: it was removed (`rm -rf` right
    // after the writer's close) or replaced (libgit2 makes a config with an empty
    // `open(O_TRUNC)`, then sets each entry through `config.lock` and a rename) before this
    // thread got here. With the file itself the writes would have gone with the old file;
    // installing them now would bring a removed name back, or put an empty config over the
    // entries renamed into place since.
    let now = file_at(job.dir.as_fd(), &job.name);
    if !still_written(job.file, now) {
        return None;
    }
    let old = match repo::read_file(job.dir.as_fd(), &job.name, max) {
        Ok(Some(o)) => Some(o),
        Ok(None) => return None,
        Err(r) => return Some((r, path)),
    };
    // The bits the writer gave its file, or the file's bits now: what the writer set on the
    // empty file (`chmod` after a copy) stay.
    let mode = bits.unwrap_or_else(|| old.as_ref().map_or(job.mode, |(_, m)| *m));
    let old = old.map(|(b, _)| b).filter(|b| !b.is_empty());
    let content = match (job.fill, &old) {
        (Fill::Replace, _) | (_, None) => piped,
        (Fill::Append, Some(o)) => [o.as_slice(), &piped].concat(),
        (Fill::Overwrite, Some(o)) => [&piped, o.get(piped.len()..).unwrap_or_default()].concat(),
    };
    let install = Install { job: &job, path, old: old.as_deref(), mode, now };
    match job.what {
        Streamed::Dotenv => install.dotenv(g, &content),
        Streamed::Commondir => install.commondir(&content),
        Streamed::Config { made } => install.config(made, &content),
    }
}

/// What a finished stream installs at its name, under the gate and in its turn.
struct Install<'a> {
    job: &'a Stream,
    path: PathBuf,
    /// The name's bytes when the stream ended (None: empty or absent).
    old: Option<&'a [u8]>,
    mode: u32,
    /// The file at the name when the stream ended.
    now: Option<FileId>,
}

impl Install<'_> {
    /// Nothing installed: the name is as it was (absent, or its old bytes).
    fn undo(&self) {
        if self.job.placeholder {
            if let Ok(n) = CString::new(self.job.name.clone()) {
                // SAFETY: `n` lives for the call.
                unsafe { libc::unlinkat(self.job.dir.as_raw_fd(), n.as_ptr(), 0) };
            }
        }
    }

    /// Writes `bytes` at the name (unless they are what it holds); why not, if it could not.
    fn put(&self, bytes: &[u8]) -> Option<(Refusal, PathBuf)> {
        if self.old == Some(bytes) {
            return None;
        }
        match repo::install(self.job.dir.as_fd(), &self.job.name, bytes, self.mode) {
            Ok(()) => {
                installed_over(self.now, file_at(self.job.dir.as_fd(), &self.job.name));
                None
            }
            Err(e) => {
                let why = format!("cannot write what was checked ({})", std::io::Error::from_raw_os_error(e));
                Some((Refusal::Unchecked(why), self.path.clone()))
            }
        }
    }

    /// A `.env`: without the controlling lines it did not have.
    fn dotenv(self, g: &Guarded, content: &[u8]) -> Option<(Refusal, PathBuf)> {
        // What it held, and the lines it held when the guard saw it before (made anew by
        // git's checkout, it is empty now).
        let before = self.old.unwrap_or_default();
        g.dotenv_seen(&self.path, before);
        let known = [before, b"\n", &g.dotenv_known(&self.path)].concat();
        let (kept, dropped) = crate::jail::dotenv::keep_allowed(&known, content);
        if let Some(failed) = self.put(&kept) {
            return Some(failed);
        }
        (!dropped.is_empty()).then_some((Refusal::DotenvControls(dropped), self.path))
    }

    /// A worktree's `commondir`: only one naming its own repository.
    fn commondir(self, content: &[u8]) -> Option<(Refusal, PathBuf)> {
        if repo::commondir_names_its_repository(content, &self.job.dir_path) {
            return self.put(content);
        }
        self.undo();
        Some((Refusal::Commondir, self.path))
    }

    /// A repository's config: without the entries that cannot be set in a repository here.
    fn config(self, made: bool, content: &[u8]) -> Option<(Refusal, PathBuf)> {
        let base = match (self.old, made) {
            (Some(o), false) => super::gitconfig::Base::Existing(o),
            _ => super::gitconfig::Base::New,
        };
        let place = super::gitconfig::Place { gitdir: &self.job.dir_path, root: &self.job.root };
        match super::gitconfig::keep_allowed(content, base, &place) {
            Ok((bytes, dropped)) => {
                if let Some(failed) = self.put(&bytes) {
                    return Some(failed);
                }
                (!dropped.is_empty()).then(|| {
                    let names = dropped.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
                    let why = format!("written without {names}, which cannot be set in a repository here");
                    (Refusal::ConfigEntry(why), self.path)
                })
            }
            Err(r) => {
                self.undo();
                Some((Refusal::ConfigEntry(format!("not written: {}", r.describe())), self.path))
            }
        }
    }
}

/// The writer's stderr of a stream, for the line `finish_stream` returns.
pub fn stream_stderr(job: &Stream) -> Option<BorrowedFd<'_>> {
    job.stderr.as_ref().map(|f| f.as_fd())
}

/// Opens what `obj` (an O_PATH descriptor) refers to with the caller's flags, after the
/// rules allowed writing it where it is.
fn reopen(c: &Caller, g: &Guarded, obj: OwnedFd, flags: libc::c_int, cloexec: bool) -> Step<Done> {
    own_proc_object(c, obj.as_fd())?;
    let st = nix::sys::stat::fstat(obj.as_fd()).map_err(|e| errno(e as i32))?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFCHR && st.st_rdev == libc::makedev(5, 0) {
        // /dev/tty means the caller's controlling terminal.
        let tty = c.terminal().map_err(errno)?;
        let fd = openat2(at_cwd(), tty.as_bytes(), flags & !libc::O_NOFOLLOW, 0, 0)?;
        return Ok(Done::Fd { fd, cloexec });
    }
    let _gate = gate();
    if replaced(obj.as_fd(), &st) {
        return Err(errno(REPLACED));
    }
    if let Some(e) = located(obj.as_fd())? {
        let d = e.decide(g, Op::Write)?;
        if let Some(what) = streamed(d) {
            if flags & libc::O_ACCMODE != libc::O_WRONLY {
                return Err(refused(not_so(d), e.path()));
            }
            let fill = if flags & libc::O_TRUNC != 0 {
                Fill::Replace
            } else if flags & libc::O_APPEND != 0 {
                Fill::Append
            } else {
                Fill::Overwrite
            };
            return stream(c, g, e, what, fill, st.st_mode & 0o7777, cloexec);
        }
    }
    if kind == libc::S_IFIFO {
        // Opening a FIFO changes no file, and it waits for the other end: outside the gate.
        return Ok(Done::Fifo { obj, flags, cloexec });
    }
    let fd = reopen_now(&obj, flags)?;
    Ok(Done::Fd { fd, cloexec })
}

fn reopen_now(obj: &OwnedFd, flags: libc::c_int) -> Step<OwnedFd> {
    let own = format!("/proc/self/fd/{}", obj.as_raw_fd());
    openat2(at_cwd(), own.as_bytes(), flags & !libc::O_NOFOLLOW, 0, 0)
}

/// Opens a FIFO for the caller (blocks until its other end is opened).
pub fn finish_fifo(obj: OwnedFd, flags: libc::c_int) -> Result<OwnedFd, i32> {
    match reopen_now(&obj, flags) {
        Ok(fd) => Ok(fd),
        Err(Done::Errno(e)) => Err(e),
        Err(_) => Err(libc::EIO),
    }
}

/// A call that makes the name `path` (relative to `base`) with the caller's umask: checked,
/// then `make(directory, name)`, under the gate.
fn make_name(
    c: &Caller,
    g: &Guarded,
    base: Base,
    path: u64,
    kind: Kind,
    make: impl FnOnce(i32, &CString) -> libc::c_int,
) -> Step<Done> {
    let path = c.read_string(path).map_err(errno)?;
    let mut e = entry(c, &base, &path)?;
    take_umask(c)?;
    let name = e.name_c()?;
    let _gate = gate();
    e.refresh()?;
    let d = e.decide(g, Op::Make(kind))?;
    e.before(g, d)?;
    let rc = make(e.dir.as_raw_fd(), &name);
    if rc == 0 {
        e.after(g, d);
    }
    Ok(done_value(rc))
}

fn mkdir(c: &Caller, g: &Guarded, base: Base, path: u64, mode: u32) -> Step<Done> {
    // SAFETY: `name` lives for the call.
    make_name(c, g, base, path, Kind::Dir, |dir, name| unsafe {
        libc::mkdirat(dir, name.as_ptr(), mode as libc::mode_t)
    })
}

fn mknod(c: &Caller, g: &Guarded, base: Base, path: u64, mode: u32, dev: u64) -> Step<Done> {
    // SAFETY: `name` lives for the call.
    let kind =
        if mode & libc::S_IFMT == 0 || mode & libc::S_IFMT == libc::S_IFREG { Kind::File } else { Kind::Special };
    // SAFETY: `name` lives for the call.
    make_name(c, g, base, path, kind, |dir, name| unsafe {
        libc::mknodat(dir, name.as_ptr(), mode as libc::mode_t, dev as libc::dev_t)
    })
}

fn symlink(c: &Caller, g: &Guarded, target: u64, base: Base, path: u64) -> Step<Done> {
    let target = cstr(&c.read_string(target).map_err(errno)?)?;
    let path = c.read_string(path).map_err(errno)?;
    let mut e = entry(c, &base, &path)?;
    let name = e.name_c()?;
    let _gate = gate();
    e.refresh()?;
    let d = e.decide(g, Op::Make(Kind::Symlink))?;
    g.judge_link(&e.dir_path, Path::new(OsStr::from_bytes(target.as_bytes()))).map_err(|r| refused(r, e.path()))?;
    e.before(g, d)?;
    record_link(g, &e);
    // SAFETY: both strings live for the call.
    let rc = unsafe { libc::symlinkat(target.as_ptr(), e.dir.as_raw_fd(), name.as_ptr()) };
    if rc == 0 {
        e.after(g, d);
    }
    Ok(done_value(rc))
}

fn link(c: &Caller, g: &Guarded, old: (Base, u64), new: (Base, u64), flags: libc::c_int) -> Step<Done> {
    let old_path = c.read_string(old.1).map_err(errno)?;
    if flags & libc::AT_EMPTY_PATH != 0 && old_path.is_empty() {
        // Needs CAP_DAC_READ_SEARCH, which nothing in the jail has: what the kernel answers.
        return Err(errno(libc::ENOENT));
    }
    let follow = if flags & libc::AT_SYMLINK_FOLLOW != 0 { 0 } else { libc::O_NOFOLLOW };
    let new_path = c.read_string(new.1).map_err(errno)?;
    let mut e = entry(c, &new.0, &new_path)?;
    // Before the source is opened: a stream's install (a config or `.env` the jail wrote a
    // moment ago, put in place by rename on a thread of its own) cannot replace it between
    // the open and the look at where it is, which then found it deleted (ENOENT).
    let _gate = gate();
    let obj = open_path(c, &old.0, &old_path, follow)?;
    e.refresh()?;
    // A second name for a file the rules keep read-only would be a way to write it.
    if let Some(old) = located(obj.as_fd())? {
        let d = old.decide(g, Op::Write)?;
        if d != Decision::Go {
            return Err(refused(not_so(d), old.path()));
        }
    }
    let kind = nix::sys::stat::fstat(obj.as_fd()).map(|st| kind_of(st.st_mode)).map_err(|e| errno(e as i32))?;
    if kind == Kind::Symlink {
        // A second name for a link leads where the link's text says from its new directory.
        let t = nix::fcntl::readlinkat(obj.as_fd(), c"").map_err(|e| errno(e as i32))?;
        g.judge_link(&e.dir_path, Path::new(&t)).map_err(|r| refused(r, e.path()))?;
        record_link(g, &e);
    } else if let Some(from) = path_of(obj.as_fd())? {
        g.judge_hard_link(&from, &e.dir_path).map_err(|r| refused(r, e.path()))?;
    }
    match e.decide(g, Op::Make(kind))? {
        Decision::Go => {}
        d @ (Decision::DotenvStream | Decision::Dotenv) => return Err(refused(not_so(d), e.path())),
        // A mark or a git directory made by a second name: not how git makes them.
        _ => return Err(refused(Refusal::Unchecked("a hard link as a git repository's mark".into()), e.path())),
    }
    let own = cstr(format!("/proc/self/fd/{}", obj.as_raw_fd()).as_bytes())?;
    let name = e.name_c()?;
    // SAFETY: both strings live for the call.
    Ok(done_value(unsafe {
        libc::linkat(libc::AT_FDCWD, own.as_ptr(), e.dir.as_raw_fd(), name.as_ptr(), libc::AT_SYMLINK_FOLLOW)
    }))
}

/// `bind`: a unix socket bound to a path makes a name (git takes a socket for `objects` or
/// `refs`, whose mode passes its test). Bound here on a duplicate of the caller's socket, from
/// inside the directory checked; other addresses make no name and are bound as they are.
fn bind(c: &Caller, g: &Guarded, sockfd: i32, addr: u64, len: u32) -> Step<Done> {
    let len = len as usize;
    if len > std::mem::size_of::<libc::sockaddr_storage>() {
        return Err(errno(libc::EINVAL));
    }
    let raw = c.read_bytes(addr, len).map_err(errno)?;
    let sock = c.fd(sockfd).map_err(|e| errno(if e == libc::EBADF { libc::EBADF } else { e }))?;
    let unix = raw.get(..2).is_some_and(|f| u16::from_ne_bytes([f[0], f[1]]) == libc::AF_UNIX as u16);
    let path = raw.get(2..).filter(|p| unix && p.first().is_some_and(|b| *b != 0));
    let Some(path) = path else {
        // SAFETY: `raw` holds `len` bytes of a socket address for the call.
        let rc = unsafe { libc::bind(sock.as_raw_fd(), raw.as_ptr().cast(), len as libc::socklen_t) };
        return Ok(done_value(rc));
    };
    let path = &path[..path.iter().position(|b| *b == 0).unwrap_or(path.len())];
    let mut e = entry(c, &Base::Caller(libc::AT_FDCWD), path)?;
    // SAFETY: sockaddr_un is plain data.
    let mut un: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if e.name.len() >= un.sun_path.len() {
        return Err(errno(libc::ENAMETOOLONG));
    }
    un.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, b) in un.sun_path.iter_mut().zip(&e.name) {
        *d = *b as libc::c_char;
    }
    let un_len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + e.name.len() + 1;
    take_umask(c)?;
    let _gate = gate();
    e.refresh()?;
    let d = e.decide(g, Op::Make(Kind::Special))?;
    e.before(g, d)?;
    // bind takes a path, not a directory descriptor: the name, from inside that directory
    // (this thread's own working directory: its `fs` is unshared).
    // SAFETY: fchdir on a descriptor we hold.
    if unsafe { libc::fchdir(e.dir.as_raw_fd()) } != 0 {
        return Err(errno(last_errno()));
    }
    // SAFETY: `un` is a valid sockaddr_un of `un_len` bytes.
    let rc =
        unsafe { libc::bind(sock.as_raw_fd(), (&un as *const libc::sockaddr_un).cast(), un_len as libc::socklen_t) };
    if rc == 0 {
        e.after(g, d);
    }
    let done = done_value(rc);
    // SAFETY: a constant path.
    unsafe { libc::chdir(c"/".as_ptr()) };
    Ok(done)
}

/// Sticky paths below a renamed directory's destination checked at most, per rename.
const MAX_ARRIVING: usize = 256;

/// `renameat2`, judged as the rules say for what leaves its name and what arrives at the
/// other: links, git directories, configs and `.env` files moved, and exchanges.
fn rename(c: &Caller, g: &Guarded, old: (Base, u64), new: (Base, u64), flags: u32) -> Step<Done> {
    let old_path = c.read_string(old.1).map_err(errno)?;
    let new_path = c.read_string(new.1).map_err(errno)?;
    let mut from = entry(c, &old.0, &old_path)?;
    let mut to = entry(c, &new.0, &new_path)?;
    let _gate = gate();
    from.refresh()?;
    to.refresh()?;
    let (a, b) = (from.name_c()?, to.name_c()?);
    let carry_out = || {
        // SAFETY: both names live for the call.
        done_value(unsafe {
            libc::renameat2(from.dir.as_raw_fd(), a.as_ptr(), to.dir.as_raw_fd(), b.as_ptr(), flags as libc::c_uint)
        })
    };
    let unguarded = g.root_of(&to.dir_path).is_none() && g.root_of(&from.dir_path).is_none();
    if from.is_dot() || to.is_dot() || unguarded && !g.links.covers(&to.dir_path) && !g.links.covers(&from.dir_path) {
        return Ok(carry_out());
    }
    let kind = kind_of(mode_of(&from)?);
    // A relative link moved leads elsewhere from its new directory (each, in an exchange).
    let moved_link = |e: &Entry, onto: &Entry| -> Step<()> {
        let t = nix::fcntl::readlinkat(e.dir.as_fd(), e.name.as_slice()).map_err(|e| errno(e as i32))?;
        g.judge_link(&onto.dir_path, Path::new(&t)).map_err(|r| refused(r, onto.path()))
    };
    if kind == Kind::Symlink {
        moved_link(&from, &to)?;
    }
    let exchanged = flags & libc::RENAME_EXCHANGE != 0;
    let other = if exchanged { mode_of(&to).ok().map(kind_of) } else { None };
    if other == Some(Kind::Symlink) {
        moved_link(&to, &from)?;
    }
    record_rename(g, (&from, kind), (&to, other), exchanged);
    if exchanged {
        exchange(g, &from, &to, kind)?;
        return Ok(carry_out());
    }
    let d = to.decide(g, Op::RenameOnto(kind))?;
    let root = g.root_of(&to.dir_path).unwrap_or(&to.dir_path).to_path_buf();
    let (src, dst) = (from.path(), to.path());
    // A mark or a git directory moved away leaves a git directory's path behind: it stays one.
    let src_name = String::from_utf8_lossy(&from.name);
    if rules::MARKS.iter().any(|m| src_name.eq_ignore_ascii_case(m)) && g.is_git_dir(&from.dir, &from.dir_path) {
        g.note(&from.dir_path, None).map_err(|r| refused(r, src.clone()))?;
    }
    let incoming = if kind == Kind::Dir { Some(moved_dir(g, &from, &to, &src, &dst)?) } else { None };
    match d {
        Decision::Config { .. } | Decision::Dotenv => return rename_streamed(g, (&from, &to), flags, d, &root, dst),
        Decision::Arrives => {
            if let Some(obj) = &incoming {
                g.room(1).map_err(|r| refused(r, dst.clone()))?;
                // Checked whatever it was: a directory that was one may hold what was
                // written into its worktrees before it became one.
                repo::check_git_dir(obj.as_fd(), &dst, &root).map_err(|r| refused(r, dst.clone()))?;
            }
        }
        Decision::WorktreesArrive => {
            if let Some(obj) = &incoming {
                repo::check_worktrees(obj.as_fd(), &dst, &root, 0).map_err(|r| refused(r, dst.clone()))?;
            }
        }
        other => to.before(g, other)?,
    }
    if let Some(obj) = &incoming {
        check_arriving(g, obj, &dst, &root)?;
    }
    let done = carry_out();
    if matches!(done, Done::Value(0)) {
        if incoming.is_some() {
            g.moved(&src, &dst);
        }
        match d {
            Decision::Arrives => {
                let _ = g.note(&dst, incoming.as_ref().and_then(|o| o.id()));
            }
            other => to.after(g, other),
        }
    }
    Ok(done)
}

/// The entry's mode, not following a link.
fn mode_of(e: &Entry) -> Step<u32> {
    nix::sys::stat::fstatat(e.dir.as_fd(), e.name.as_slice(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map(|st| st.st_mode)
        .map_err(|e| errno(e as i32))
}

/// `RENAME_EXCHANGE`: both names are made anew; git never swaps entries of a repository, so
/// anything the rules would have to check first is refused; each directory comes to be where
/// the other was, its links judged from there.
fn exchange(g: &Guarded, from: &Entry, to: &Entry, kind: Kind) -> Step<()> {
    let other = kind_of(mode_of(to)?);
    for (e, k) in [(to, kind), (from, other)] {
        let d = e.decide(g, Op::RenameOnto(k))?;
        if d == Decision::Dotenv {
            return Err(refused(Refusal::Dotenv, e.path()));
        }
        if d != Decision::Go || (k == Kind::Dir && !g.sticky_below(&e.path()).is_empty()) {
            let why = "an exchange of entries where git reads a repository".to_string();
            return Err(refused(Refusal::Unchecked(why), e.path()));
        }
    }
    for (moved, onto, k) in [(from, to, kind), (to, from, other)] {
        if k != Kind::Dir {
            continue;
        }
        let obj = openat2(moved.dir.as_fd(), &moved.name, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0, 0)?;
        if moved.dir_path != onto.dir_path {
            judge_links_below(g, obj.as_fd(), &onto.path()).map_err(|(r, p)| refused(r, p))?;
        }
        names_below_run_nothing(g, obj.as_fd(), &onto.path())?;
    }
    Ok(())
}

/// A directory about to move from `src` to `dst`, opened: where it goes, the git directories
/// it holds are remembered again (that must fit), and moved to another directory, a relative
/// link below it leads elsewhere (outside review of the agents' homes, A2); within one
/// directory its links lead where they did.
fn moved_dir(g: &Guarded, from: &Entry, to: &Entry, src: &Path, dst: &Path) -> Step<OwnedFd> {
    let obj = openat2(from.dir.as_fd(), &from.name, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0, 0)?;
    g.room(g.below(src) + 2).map_err(|r| refused(r, dst.to_path_buf()))?;
    if g.is_git_dir(&obj, src) {
        g.note(src, None).map_err(|r| refused(r, src.to_path_buf()))?;
    }
    if from.dir_path != to.dir_path {
        judge_links_below(g, obj.as_fd(), dst).map_err(|(r, p)| refused(r, p))?;
    }
    names_below_run_nothing(g, obj.as_fd(), dst)?;
    Ok(obj)
}

/// Entries looked at in the two levels below a directory moved in the project, at most: past
/// them the move is refused (what they come to be could not all be judged).
const MAX_RENAMED_NAMES: usize = 20_000;

/// A directory moved in the project makes every path below it anew: none of them may come to
/// be a name that runs outside (`mkdir y; echo .. > y/lefthook-local.yml; mv y .config` made
/// `.config/lefthook-local.yml`, which the user's next `git commit` ran; third look at issue
/// 32, H1). The names span at most three components (`.config/mise/config.toml`,
/// `.github/hooks/x.json`), so two levels below the directory are judged.
fn names_below_run_nothing(g: &Guarded, obj: BorrowedFd, dst: &Path) -> Step<()> {
    let Some(root) = g.root_of(dst).filter(|r| g.is_project(r)) else { return Ok(()) };
    let Ok(dst_rel) = dst.strip_prefix(root) else { return Ok(()) };
    let refuse = |rel: &Path, what| Err(refused(Refusal::RunsOutside(what), dst.join(rel)));
    let mut seen = 0usize;
    let mut level: Vec<PathBuf> = vec![PathBuf::new()];
    for depth in 0..2 {
        let mut next = vec![];
        for rel in &level {
            let at = if rel.as_os_str().is_empty() { b".".to_vec() } else { rel.as_os_str().as_bytes().to_vec() };
            let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
            // One it cannot read (`chmod 000` before the move) could hold anything: refused
            // (fourth look at issue 32, I1).
            let unread = || {
                let what = if rel.as_os_str().is_empty() { dst.to_path_buf() } else { dst.join(rel) };
                let why = format!(
                    "{} could not be read, so what the move makes of its entries could not be judged: make it \
                     readable first, or move it outside the sandbox",
                    what.display()
                );
                refused(Refusal::Moved(why), dst.to_path_buf())
            };
            let fd = openat2(obj, &at, libc::O_RDONLY | libc::O_DIRECTORY, 0, resolve).map_err(|_| unread())?;
            let mut dir = nix::dir::Dir::from_fd(fd).map_err(|_| unread())?;
            let mut entries = vec![];
            for e in dir.iter() {
                let e = e.map_err(|_| unread())?;
                let name = e.file_name().to_bytes();
                if name != b"." && name != b".." {
                    entries.push((OsStr::from_bytes(name).to_os_string(), e.file_type()));
                }
            }
            for (name, kind) in entries {
                seen += 1;
                if seen > MAX_RENAMED_NAMES {
                    let why = format!(
                        "a directory of more than {MAX_RENAMED_NAMES} entries in its first two levels moved in the \
                         project (what each comes to be could not be judged); move it outside the sandbox"
                    );
                    return Err(refused(Refusal::Moved(why), dst.to_path_buf()));
                }
                let sub = rel.join(&name);
                if let Some(what) = rules::runs_outside_name(&dst_rel.join(&sub)) {
                    return refuse(&sub, what);
                }
                let is_dir = match kind {
                    Some(t) => t == nix::dir::Type::Directory,
                    // No type from the filesystem: asked of the entry itself.
                    None => nix::sys::stat::fstatat(&dir, name.as_os_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
                };
                if depth == 0 && is_dir {
                    next.push(sub);
                }
            }
        }
        level = next;
    }
    Ok(())
}

/// A config or a `.env` renamed into place: installed as the guard checked it, never as the
/// jail wrote it.
fn rename_streamed(
    g: &Guarded,
    (from, to): (&Entry, &Entry),
    flags: u32,
    d: Decision,
    root: &Path,
    dst: PathBuf,
) -> Step<Done> {
    if flags & libc::RENAME_NOREPLACE != 0 && mode_of(to).is_ok() {
        return Err(errno(libc::EEXIST));
    }
    let done = match d {
        Decision::Config { made } => {
            let place = crate::jail::guard::gitconfig::Place { gitdir: &to.dir_path, root };
            repo::rename_config(from.dir.as_fd(), &from.name, to.dir.as_fd(), &to.name, made, &place)
        }
        _ => {
            let known = g.dotenv_known(&dst);
            repo::rename_dotenv(from.dir.as_fd(), &from.name, to.dir.as_fd(), &to.name, &known)
        }
    };
    match done {
        Ok(Ok(())) => Ok(Done::Value(0)),
        Ok(Err(e)) => Err(errno(e)),
        Err(r) => Err(refused(r, dst)),
    }
}

/// What a directory brings to paths that held git directories, checked as it arrives.
fn check_arriving(g: &Guarded, obj: &OwnedFd, dst: &Path, root: &Path) -> Step<()> {
    let below = g.sticky_below(dst);
    if below.len() > MAX_ARRIVING {
        let why = format!("a directory moved over more than {MAX_ARRIVING} git repositories' places");
        return Err(refused(Refusal::Unchecked(why), dst.to_path_buf()));
    }
    for rel in below.iter().filter(|r| !r.as_os_str().is_empty()) {
        let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
        let Ok(sub) = openat2(obj.as_fd(), rel.as_os_str().as_bytes(), libc::O_PATH | libc::O_DIRECTORY, 0, resolve)
        else {
            continue;
        };
        repo::check_git_dir(sub.as_fd(), &dst.join(rel), root).map_err(|r| refused(r, dst.join(rel)))?;
    }
    Ok(())
}

/// Entries looked at below a directory moved to another directory, at most: past them the move
/// is refused (its links could not all be judged).
const MAX_MOVED_ENTRIES: usize = 100_000;

/// The symbolic links below the directory `obj`, moved to `dst`, judged from where they come
/// to be (`Guarded::judge_link`): a relative one may lead into a hidden path from there
/// (outside review of the agents' homes, A2). Directories are opened beneath `obj`, no link
/// followed. Where no place below `dst` judges links, nothing is looked at.
fn judge_links_below(g: &Guarded, obj: BorrowedFd, dst: &Path) -> Result<(), (Refusal, PathBuf)> {
    if g.root_of(dst).is_none() && !g.links.covers(dst) {
        return Ok(());
    }
    let unchecked = |why: String| (Refusal::Unchecked(why), dst.to_path_buf());
    let mut pending: Vec<PathBuf> = vec![PathBuf::new()];
    let mut seen = 0usize;
    while let Some(rel) = pending.pop() {
        let at = if rel.as_os_str().is_empty() { b".".to_vec() } else { rel.as_os_str().as_bytes().to_vec() };
        let resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
        let Ok(fd) = openat2(obj, &at, libc::O_RDONLY | libc::O_DIRECTORY, 0, resolve) else {
            return Err(unchecked(format!("{} could not be looked through", dst.join(&rel).display())));
        };
        let mut dir =
            nix::dir::Dir::from_fd(fd).map_err(|e| unchecked(format!("{}: {e}", dst.join(&rel).display())))?;
        let mut entries = vec![];
        for e in dir.iter() {
            let e = e.map_err(|e| unchecked(format!("{}: {e}", dst.join(&rel).display())))?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            seen += 1;
            if seen > MAX_MOVED_ENTRIES {
                return Err(unchecked(format!(
                    "a directory of more than {MAX_MOVED_ENTRIES} entries moved to another directory (its symbolic \
                     links would have to be judged where they come to be); move it outside the sandbox"
                )));
            }
            entries.push((OsStr::from_bytes(name).to_os_string(), e.file_type()));
        }
        for (name, kind) in entries {
            let kind = match kind {
                Some(k) => k,
                None => match nix::sys::stat::fstatat(&dir, name.as_os_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                {
                    Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => nix::dir::Type::Symlink,
                    Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => nix::dir::Type::Directory,
                    _ => continue,
                },
            };
            match kind {
                nix::dir::Type::Directory => pending.push(rel.join(&name)),
                nix::dir::Type::Symlink => {
                    let Ok(target) = nix::fcntl::readlinkat(&dir, name.as_os_str()) else { continue };
                    let target = PathBuf::from(target);
                    if target.is_relative() {
                        let there = dst.join(&rel);
                        g.judge_link(&there, &target).map_err(|r| (r, there.join(&name)))?;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// `truncate` by path (symlinks followed, as the kernel does): a write to what it names.
/// A regular file the walk found linked and that is unlinked now (looked at with the gate
/// held): replaced meanwhile, most often by the install of a config the caller itself just
/// wrote through a stream (installs hold the gate). The name holds another file now, which
/// is what the call must decide on. A file reached already unlinked (a temporary file
/// through its magic link) stays what it is.
fn replaced(obj: BorrowedFd, found: &libc::stat) -> bool {
    found.st_mode & libc::S_IFMT == libc::S_IFREG
        && found.st_nlink > 0
        && nix::sys::stat::fstat(obj).is_ok_and(|now| now.st_nlink == 0)
}

fn truncate(c: &Caller, g: &Guarded, path: u64, len: i64) -> Step<Done> {
    let path = c.read_string(path).map_err(errno)?;
    for _ in 0..3 {
        let obj = open_path(c, &Base::Caller(libc::AT_FDCWD), &path, 0)?;
        own_proc_object(c, obj.as_fd())?;
        let st = nix::sys::stat::fstat(obj.as_fd()).map_err(|e| errno(e as i32))?;
        let _gate = gate();
        if replaced(obj.as_fd(), &st) {
            continue;
        }
        return truncate_found(g, obj, len);
    }
    Err(errno(libc::EAGAIN))
}

fn truncate_found(g: &Guarded, obj: OwnedFd, len: i64) -> Step<Done> {
    if let Some(e) = located(obj.as_fd())? {
        let d = e.decide(g, Op::Write)?;
        // An emptied `.env` sets nothing; one cut short could change a value.
        if d != Decision::Go && !(d == Decision::DotenvStream && len == 0) {
            return Err(refused(not_so(d), e.path()));
        }
    }
    let own = cstr(format!("/proc/self/fd/{}", obj.as_raw_fd()).as_bytes())?;
    // SAFETY: `own` lives for the call.
    Ok(done_value(unsafe { libc::truncate(own.as_ptr(), len) }))
}

/// `rmdir`: a git directory's path stays one's after it is gone (see `rules.rs`).
fn rmdir(c: &Caller, g: &Guarded, base: Base, path: u64) -> Step<Done> {
    let path = c.read_string(path).map_err(errno)?;
    let mut e = entry(c, &base, &path)?;
    let name = e.name_c()?;
    let _gate = gate();
    e.refresh()?;
    e.decide(g, Op::Remove)?;
    // SAFETY: `name` lives for the call.
    Ok(done_value(unsafe { libc::unlinkat(e.dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer kept per device is the one `fstatfs` gives, asked again or not.
    #[test]
    fn procfs_is_told_apart_per_device_and_kept() {
        let proc_dir = std::fs::File::open("/proc/self").expect("open /proc/self");
        let tmp = tempfile::tempdir().expect("tempdir");
        let other = std::fs::File::open(tmp.path()).expect("open a directory");
        for _ in 0..2 {
            assert!(on_procfs(proc_dir.as_fd()));
            assert!(!on_procfs(other.as_fd()));
        }
        assert!(device_of(proc_dir.as_fd()).is_some_and(|d| Some(d) != device_of(other.as_fd())));
    }

    /// A stream that outlived its followers' wait ends after they installed: streams opened
    /// on the name since then still install in their own order (numbers never restart).
    #[test]
    fn a_straggler_ending_late_does_not_let_a_later_stream_go_first() {
        let name = ((u64::MAX, u64::MAX), b"turns-test.env".to_vec());
        let straggler = Turn::on(name.clone());
        let follower = Turn::on(name.clone());
        follower.wait_at_most(std::time::Duration::from_millis(10));
        assert!(follower.waits(&TURNS.lock().unwrap()), "the follower gave up on the straggler");
        drop(follower);
        // Opened after the follower went ahead, while the straggler still writes.
        let first = Turn::on(name.clone());
        let second = Turn::on(name.clone());
        drop(straggler);
        assert!(second.waits(&TURNS.lock().unwrap()), "the second went ahead of the first");
        drop(first);
        assert!(!second.waits(&TURNS.lock().unwrap()));
        drop(second);
        assert!(TURNS.lock().unwrap().as_ref().is_none_or(|m| !m.contains_key(&name)));
    }

    #[test]
    fn paths_split_into_directory_and_name() {
        type Case<'a> = (&'a [u8], (&'a [u8], &'a [u8]));
        let cases: &[Case] = &[
            (b"a", (b".", b"a")),
            (b"a/b", (b"a", b"b")),
            (b"a/b/", (b"a", b"b")),
            (b"/a", (b"/", b"a")),
            (b"/", (b"/", b".")),
            (b"//", (b"/", b".")),
            (b"a//b", (b"a/", b"b")),
            (b"../x/.git", (b"../x", b".git")),
        ];
        for (path, want) in cases {
            assert_eq!(split(path), *want, "{:?}", String::from_utf8_lossy(path));
        }
    }

    #[test]
    fn a_stream_writes_its_file_or_what_the_guards_installs_put_there_only() {
        let (a, b, c, other) = ((9_001, 1), (9_001, 2), (9_001, 3), (9_001, 4));
        assert!(still_written(Some(a), Some(a)));
        assert!(!still_written(Some(a), Some(b)), "replaced by the writer: not its file");
        assert!(!still_written(Some(a), None), "removed");
        assert!(!still_written(None, Some(a)));
        installed_over(Some(a), Some(b));
        installed_over(Some(b), Some(c));
        assert!(still_written(Some(a), Some(c)), "two installs of the guard's since");
        assert!(!still_written(Some(a), Some(other)));
        // A loop in the links (inode numbers reused) ends.
        installed_over(Some(c), Some(a));
        assert!(!still_written(Some(a), Some(other)));
    }

    #[test]
    fn what_means_the_calling_process_is_rewritten_to_its_own_proc_entry() {
        let r = |p: &[u8]| rewrite_magic(p, 42).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(r(b"/dev/stdout").as_deref(), Some("/proc/42/fd/1"));
        assert_eq!(r(b"/dev/fd/7").as_deref(), Some("/proc/42/fd/7"));
        assert_eq!(r(b"/proc/self/cwd/x").as_deref(), Some("/proc/42/cwd/x"));
        assert_eq!(r(b"/proc/thread-self/fd/3").as_deref(), Some("/proc/42/fd/3"));
        assert_eq!(r(b"/proc/selfish"), None);
        assert_eq!(r(b"/dev/stdout2"), None);
        // Spelled otherwise, the same names (issue 33: `//proc/self` was the guard's own).
        assert_eq!(r(b"//proc/self/fd/1").as_deref(), Some("/proc/42/fd/1"));
        assert_eq!(r(b"/proc/./self//fd/2").as_deref(), Some("/proc/42/fd/2"));
        assert_eq!(r(b"/./dev/stdout").as_deref(), Some("/proc/42/fd/1"));
        // `..` out of it stays a `..` (where own_proc refuses another process's entries).
        assert_eq!(r(b"/proc/self/../1/fd/9").as_deref(), Some("/proc/42/../1/fd/9"));
    }
}
