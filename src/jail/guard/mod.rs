//! The git guard: lets the jail make and use git repositories in the trees it writes while
//! nothing it writes into them makes the user's own git, outside the jail, run a program the
//! user did not put there (`rules.rs` says exactly what). The command runs under a second
//! seccomp filter (`seccomp::build_guard_program`) that sends every syscall making or
//! removing a directory entry (but `unlink`) or opening a file for writing to the jail's
//! PID 1; threads of PID 1 decide each, check a repository's config, hooks and links where
//! the rules say (`repo.rs`, `gitconfig.rs`) and carry the call out for the caller
//! (`emulate.rs`), or refuse it with EPERM, one line on the caller's stderr and an audit
//! record through the launcher.

mod emulate;
pub mod gitconfig;
mod made;

/// The guard's reading of trapped paths, for the fuzz targets (fuzz/): not an API.
#[doc(hidden)]
pub mod emulate_fuzz {
    pub use super::emulate::{rewrite_magic, split};
}
pub mod notify;
mod repo;
pub mod rules;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Threads serving the listener: one may wait on a slow filesystem while others serve.
const WORKERS: usize = 4;
/// Refusal lines written to callers' stderr per second, at most (a loop cannot flood it).
const LINES_PER_SECOND: u64 = 10;
/// Refusals reported to the audit log per second, at most (as the network's denials).
const REPORTS_PER_SECOND: u64 = 50;
/// Threads waiting on a FIFO's other end, or on a full stderr pipe, at most: each is one of
/// the user's processes (RLIMIT_NPROC counts them), and the jail could start any number.
const WAITING_THREADS: usize = 64;

/// Refusals not reported (past `REPORTS_PER_SECOND`): counted, for the launcher to count in
/// the audit log (`take_left_out`), so that a flood hides nothing uncounted.
static LEFT_OUT: AtomicU64 = AtomicU64::new(0);

/// The refusals left unreported since the last call.
pub fn take_left_out() -> u64 {
    LEFT_OUT.swap(0, Ordering::SeqCst)
}

/// Configs being written through a pipe whose checked copy is not installed yet.
static STREAMS: AtomicUsize = AtomicUsize::new(0);

/// Waits, at most `limit`, for the configs being written through pipes to be installed: the
/// session's end has ended every writer (each pipe is at its end), and a config copied last
/// must not be lost with PID 1.
pub fn wait_for_streams(limit: std::time::Duration) {
    let t0 = std::time::Instant::now();
    while STREAMS.load(Ordering::SeqCst) > 0 && t0.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The guard's last act, once every process under it has ended: it carries out no call
/// after this, and says whether it made no symlink where the exit check looks (`made`).
pub fn close() -> bool {
    emulate::close()
}

/// A refusal, for the launcher's audit log: `check` (see `Refusal::check`), the path.
pub type Report = dyn Fn(&str, &str) + Send + Sync;

/// What the guard's threads share.
struct Shared {
    listener: OwnedFd,
    guarded: rules::Guarded,
    report: Box<Report>,
    /// Refusal lines written this second (see `tell`), and audit reports.
    lines: AtomicU64,
    reports: AtomicU64,
    /// Threads serving, and how many of them wait for a call.
    threads: AtomicUsize,
    idle: AtomicUsize,
    /// Threads opening a FIFO or writing a refusal line (see `WAITING_THREADS`).
    waiting: Arc<AtomicUsize>,
}

/// Serves the guard's listener on threads of the calling process (the jail's PID 1, after it
/// forked the command: it must not fork again once these exist). `report` is called for
/// every refusal. One thread starts now; another joins whenever a call finds none waiting,
/// up to `WORKERS`, so a short command pays for one. The threads end once no process is
/// left under the filter.
pub fn serve(listener: OwnedFd, guarded: rules::Guarded, report: Box<Report>) -> Serving {
    let shared = Arc::new(Shared {
        listener,
        guarded,
        report,
        lines: AtomicU64::new(0),
        reports: AtomicU64::new(0),
        threads: AtomicUsize::new(0),
        idle: AtomicUsize::new(0),
        waiting: Arc::new(AtomicUsize::new(0)),
    });
    spawn_worker(&shared);
    Serving(shared)
}

/// The guard being served: lets its caller see how many threads serve it.
pub struct Serving(Arc<Shared>);

impl Serving {
    pub fn threads(&self) -> usize {
        self.0.threads.load(Ordering::SeqCst)
    }
}

fn spawn_worker(shared: &Arc<Shared>) {
    if shared.threads.fetch_add(1, Ordering::SeqCst) >= WORKERS {
        shared.threads.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let s = shared.clone();
    let spawned = std::thread::Builder::new().name("guard".into()).spawn(move || {
        // The umask is per `fs` struct: each thread takes the caller's before creating.
        // SAFETY: unshare(CLONE_FS) only gives this thread its own cwd/root/umask.
        if unsafe { libc::unshare(libc::CLONE_FS) } == 0 {
            worker(&s);
        }
        s.threads.fetch_sub(1, Ordering::SeqCst);
    });
    if spawned.is_err() {
        // Fewer threads serve; with none, every trapped call fails (ENOSYS) once the
        // listener closes: closed, not open.
        shared.threads.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A thread of the guard: takes the command's calls one at a time and answers each as the
/// rules decide; starts another thread when it was the last one waiting.
fn worker(shared: &Arc<Shared>) {
    let listener = shared.listener.as_fd();
    loop {
        shared.idle.fetch_add(1, Ordering::SeqCst);
        let got = notify::recv(listener);
        let was_last = shared.idle.fetch_sub(1, Ordering::SeqCst) == 1;
        let n = match got {
            Ok(n) => n,
            // Once the command's processes are all gone the kernel answers ENOENT at once,
            // for good: without this check the threads would spin on both cores until PID 1
            // exits, delaying the session's end by milliseconds.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && notify::orphaned(listener) => return,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(_) => return,
        };
        if was_last {
            // This was the last thread waiting: the next call should not wait for this one.
            spawn_worker(shared);
        }
        let caller = match notify::Caller::open(listener, &n) {
            Ok(c) => c,
            Err(e) => {
                notify::answer(listener, n.id, Err(e));
                continue;
            }
        };
        match emulate::carry_out(&caller, &n, &shared.guarded) {
            emulate::Done::Value(v) => notify::answer(listener, n.id, Ok(v)),
            emulate::Done::Errno(e) => notify::answer(listener, n.id, Err(e)),
            emulate::Done::Fd { fd, cloexec } => send_fd(listener, n.id, fd, cloexec),
            emulate::Done::Refused { refusal, path } => {
                let shown = path.display().to_string();
                report(shared, &refusal, &shown);
                if within(&shared.lines, LINES_PER_SECOND) {
                    tell(&caller, &shown, &refusal.reason(), shared);
                }
                notify::answer(listener, n.id, Err(libc::EPERM));
            }
            emulate::Done::Stream { write, cloexec, job } => stream(shared, n.id, (write, cloexec), job),
            emulate::Done::Fifo { obj, flags, cloexec } => fifo(shared, n.id, obj, flags, cloexec),
        }
    }
}

/// A refusal for the audit log, within its rate (past it, counted).
fn report(shared: &Shared, refusal: &rules::Refusal, shown: &str) {
    if within(&shared.reports, REPORTS_PER_SECOND) {
        (shared.report)(refusal.check(), shown);
    } else {
        LEFT_OUT.fetch_add(1, Ordering::SeqCst);
    }
}

/// A write taken through a pipe (a config, a `.env`): the pipe's other end is read on a
/// thread of its own, started first (a writer that fills the pipe must find a reader), and
/// the writer gets the pipe.
fn stream(shared: &Arc<Shared>, id: u64, (write, cloexec): (OwnedFd, bool), job: Box<emulate::Stream>) {
    let listener = shared.listener.as_fd();
    let Some(slot) = Waiting::take(&shared.waiting) else {
        notify::answer(listener, id, Err(libc::EAGAIN));
        return;
    };
    let s = shared.clone();
    STREAMS.fetch_add(1, Ordering::SeqCst);
    let spawned = std::thread::Builder::new().name("guard-config".into()).spawn(move || {
        let _slot = slot;
        let _streaming = Streaming;
        let err = emulate::stream_stderr(&job).and_then(|f| f.try_clone_to_owned().ok());
        if let Some((refusal, path)) = emulate::finish_stream(*job, &s.guarded) {
            let shown = path.display().to_string();
            report(&s, &refusal, &shown);
            if let (Some(err), true) = (err, within(&s.lines, LINES_PER_SECOND)) {
                let line = format!("agent-sandbox: {shown}: {}\n", refusal.reason());
                // SAFETY: writes from a live buffer to a descriptor this thread owns.
                let _ = unsafe { libc::write(err.as_raw_fd(), line.as_ptr().cast(), line.len()) };
            }
        }
    });
    match spawned {
        Ok(_) => send_fd(listener, id, write, cloexec),
        Err(_) => {
            STREAMS.fetch_sub(1, Ordering::SeqCst);
            notify::answer(listener, id, Err(libc::EAGAIN));
        }
    }
}

/// A FIFO's open, which blocks until its other end opens: on a thread of its own.
fn fifo(shared: &Arc<Shared>, id: u64, obj: OwnedFd, flags: i32, cloexec: bool) {
    let listener = shared.listener.as_fd();
    let Some(slot) = Waiting::take(&shared.waiting) else {
        notify::answer(listener, id, Err(libc::EAGAIN));
        return;
    };
    let s = shared.clone();
    let spawned = std::thread::Builder::new().name("guard-fifo".into()).spawn(move || {
        let _slot = slot;
        let listener = s.listener.as_fd();
        match emulate::finish_fifo(obj, flags) {
            Ok(fd) => send_fd(listener, id, fd, cloexec),
            Err(e) => notify::answer(listener, id, Err(e)),
        }
    });
    if spawned.is_err() {
        notify::answer(listener, id, Err(libc::EAGAIN));
    }
}

fn send_fd(listener: BorrowedFd, id: u64, fd: OwnedFd, cloexec: bool) {
    if let Err(e) = notify::answer_fd(listener, id, fd.as_fd(), cloexec) {
        // Not put into the caller's table (EMFILE, or the caller is gone): the call fails.
        notify::answer(listener, id, Err(e.raw_os_error().unwrap_or(libc::EIO)));
    }
}

/// One of `STREAMS`, counted off when dropped.
struct Streaming;

impl Drop for Streaming {
    fn drop(&mut self) {
        STREAMS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A place among `WAITING_THREADS`, given back when dropped.
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn take(count: &Arc<AtomicUsize>) -> Option<Waiting> {
        if count.fetch_add(1, Ordering::SeqCst) >= WAITING_THREADS {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Waiting(count.clone()))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts one more event this second in `window` (seconds in the high bits, the count in
/// the low ones); false once `most` were counted.
fn within(window: &AtomicU64, most: u64) -> bool {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let prev = window.load(Ordering::Relaxed);
    let count = if prev >> 16 == now { prev & 0xffff } else { 0 };
    if count >= most {
        return false;
    }
    window.store((now << 16) | (count + 1), Ordering::Relaxed);
    true
}

/// One line on the caller's stderr: what was refused and why, for the agent to act on.
fn tell(caller: &notify::Caller, path: &str, reason: &str, shared: &Shared) {
    // The caller's own stderr (a duplicate of its descriptor, not a reopen of the file, which
    // a pipe made by another user would refuse), written on a thread of its own: a full pipe
    // nobody reads must not stall the guard.
    let Ok(err) = caller.fd(2) else { return };
    let line = format!("agent-sandbox: {path}: {reason}\n");
    // Most often the stderr takes the line at once: written here, no thread (under load a
    // thread may not start in time, or at all, and the line was lost).
    let mut ready = libc::pollfd { fd: err.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    // SAFETY: polls one pollfd that lives for the call, without waiting.
    if unsafe { libc::poll(&mut ready, 1, 0) } == 1 && ready.revents & libc::POLLOUT != 0 {
        // SAFETY: writes from a live buffer to a descriptor we own; a pipe or terminal with
        // room takes a line this short without blocking.
        let _ = unsafe { libc::write(err.as_raw_fd(), line.as_ptr().cast(), line.len()) };
        return;
    }
    let Some(slot) = Waiting::take(&shared.waiting) else { return };
    let _ = std::thread::Builder::new().name("guard-tell".into()).spawn(move || {
        let _slot = slot;
        // SAFETY: writes from a live buffer to a descriptor this thread owns.
        let _ = unsafe { libc::write(err.as_raw_fd(), line.as_ptr().cast(), line.len()) };
    });
}

/// Sends the listener from the command (which installed the filter) to PID 1. Allocates
/// nothing: it runs in the command's process between its clone and its exec, on PID 1's
/// memory (see `jail::command`).
pub fn hand_over(sock: RawFd, listener: &OwnedFd) -> std::io::Result<()> {
    // Room for one descriptor's control message, aligned for cmsghdr.
    let mut space = [0u64; 4];
    let mut byte = *b"L";
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // SAFETY: msghdr is plain data; every field used is set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE/CMSG_LEN compute sizes; CMSG_FIRSTHDR and CMSG_DATA point into
    // `space`, which holds CMSG_SPACE(4) bytes (24 of its 32), aligned for cmsghdr.
    unsafe {
        msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), listener.as_raw_fd());
    }
    // SAFETY: `msg` points at `iov`, `byte` and `space`, all live for the call.
    if unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) } == 1 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Receives the listener in PID 1.
pub fn take_over(sock: RawFd) -> nix::Result<OwnedFd> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::FromRawFd;
    let mut buf = [0u8; 1];
    let mut cspace = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let r = recvmsg::<()>(sock, &mut iov, Some(&mut cspace), MsgFlags::MSG_CMSG_CLOEXEC)?;
    for c in r.cmsgs()? {
        if let ControlMessageOwned::ScmRights(v) = c {
            if let Some(fd) = v.first() {
                // SAFETY: the kernel just installed this descriptor for us.
                return Ok(unsafe { OwnedFd::from_raw_fd(*fd) });
            }
        }
    }
    Err(nix::Error::EPROTO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Installs the guard's filter on a thread of its own (a filter without TSYNC is the
    /// calling thread's alone), hands the listener out, and ends that thread when told.
    fn filtered_thread() -> (OwnedFd, std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (give, take) = std::sync::mpsc::channel();
        let (end, ended) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments and affects this thread only.
            assert_eq!(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }, 0);
            let prog = crate::jail::seccomp::build_guard_program().expect("the guard's program compiles");
            give.send(notify::install_with_listener(&prog).expect("the filter installs")).expect("send");
            let _ = ended.recv();
        });
        let listener = take.recv().expect("the thread hands its listener over");
        (listener, end, t)
    }

    fn wait_for_no_threads(serving: &Serving) -> usize {
        let t0 = Instant::now();
        while serving.threads() > 0 && t0.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(5));
        }
        serving.threads()
    }

    #[test]
    fn the_guards_threads_end_when_no_process_is_left_under_its_filter() {
        let (listener, end, t) = filtered_thread();
        let serving = serve(listener, rules::Guarded::new(vec![]), Box::new(|_, _| {}));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(serving.threads(), 1, "one thread waits while the filtered thread lives");
        end.send(()).expect("tell the thread to end");
        t.join().expect("the filtered thread ends");
        // The kernel answers ENOENT at once from here on: a thread that took that for a lost
        // caller would spin (and start others) until the process exits.
        assert_eq!(wait_for_no_threads(&serving), 0, "the guard's threads still run with no process to serve");
    }

    #[test]
    fn the_listener_takes_the_same_cpu_wake_ups_where_the_kernel_has_them() {
        let (listener, end, t) = filtered_thread();
        let release = nix::sys::utsname::uname().expect("uname").release().to_string_lossy().into_owned();
        let mut v = release.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u32>().ok());
        let has_it = (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 6);
        // Older kernels refuse it (EINVAL) unless a distribution backported it.
        let took = notify::wake_up_on_the_same_cpu(listener.as_fd());
        assert!(took || !has_it, "kernel {release} has SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP but refused it");
        end.send(()).expect("tell the thread to end");
        t.join().expect("the filtered thread ends");
    }

    #[test]
    fn a_guard_served_after_its_last_process_ended_starts_no_thread_that_stays() {
        let (listener, end, t) = filtered_thread();
        end.send(()).expect("tell the thread to end");
        t.join().expect("the filtered thread ends");
        let serving = serve(listener, rules::Guarded::new(vec![]), Box::new(|_, _| {}));
        assert_eq!(wait_for_no_threads(&serving), 0);
    }
}
