//! The cleanup waiter: a process that outlives the launcher, however the launcher ends
//! (SIGKILL included), and then releases what the session held: the project's and the
//! home's placeholders (through their session locks), the session's files in the state
//! directory, and the tasks it was ordered to run by name (the session's Slurm clean-up is one:
//! an allocation the chaperon left pending). It knows no task: the launcher hands it the table
//! at `start`.
//!
//! It is forked first thing, before the command line is parsed, while the heap is a few
//! pages: it lives as long as the session, and a fork taken later would keep a copy of every
//! heap page the launcher has since changed or freed (about 60 KiB a session, measured with
//! 50 idle sessions). The launcher tells it what to do as it learns it (`hand`): the session's
//! socket and network claim as soon as they exist (`remove_after_exit`), the rest before
//! anything of the jail runs; messages on a socket pair, the lock files' descriptors riding
//! along, merged by the waiter.
//!
//! The launcher's end is in no process of the jail (the jail's init closes its copy first
//! thing, `forget`; everything else the launcher runs gets it closed at exec), and still the
//! waiter trusts nothing that comes on it but its launcher's orders:
//! - the launcher's exit is learnt from a pidfd of it, never from the socket (a message of no
//!   bytes reads like the end of the stream);
//! - a message counts only if the kernel's credentials (`SO_PASSCRED`) name the launcher's
//!   pid while the pidfd shows the launcher alive (so the pid is not yet anyone else's).
//!
//! It leaves the launcher's session and process group and ignores the terminal's and a job
//! control's signals: a hangup or `kill -- -PGID` that ends the session must not end it.

use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

/// The launcher's end of the pair (-1: no waiter runs).
static LINK: AtomicI32 = AtomicI32::new(-1);
/// The waiter's pid (0: none), which the launcher must not count among the command's.
static WAITER: AtomicI32 = AtomicI32::new(0);

/// The largest orders taken (a few paths); a message that does not fit is dropped whole.
const MAX_ORDERS: usize = 1 << 20;

/// The most lock files one message carries (the project's and the home's).
const MAX_LOCKS: usize = 4;

/// What the waiter does once the launcher is gone, in this order.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Orders {
    /// Files, or directories once empty, to remove.
    pub remove: Vec<Vec<u8>>,
    /// Tasks to run, each a name of the table handed to `start` (`Task`) and its arguments.
    pub run: Vec<(String, Vec<Vec<u8>>)>,
    /// The directory each session lock guards, in the order their descriptors come.
    pub locks: Vec<Vec<u8>>,
}

fn path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(bytes).into()
}

pub fn bytes(p: &std::path::Path) -> Vec<u8> {
    p.as_os_str().as_encoded_bytes().to_vec()
}

/// How the waiter lets go of a session lock it was handed (the lock's directory, its file):
/// given at `start` by the module that owns the locks (`placeholders::release_for_waiter`), so
/// that the waiter runs its orders without knowing what a lock records.
pub type ReleaseLock = fn(std::fs::File, PathBuf);

/// Work the waiter can be ordered to do once the launcher is gone (`Orders::run`): a name and
/// what does it, given the order's arguments. The launcher's main hands the table to `start`,
/// so the waiter runs the session's after-exit work (cancelling what Slurm was left holding)
/// without naming any of it. A function of the same binary rather than an argv to exec: nothing
/// to find on a PATH or to load once the user has their status, and it survives the installed
/// binary being replaced during the session.
pub type Task = (&'static str, fn(&[Vec<u8>]));

/// What the waiter is handed at `start`: how it releases a lock, and the tasks it knows.
#[derive(Clone, Copy)]
pub struct Duties {
    pub release: ReleaseLock,
    pub tasks: &'static [Task],
}

/// The tasks given to `start`, for the launcher doing the work itself when no waiter took it
/// (`remove_and_run`).
static TASKS: std::sync::OnceLock<&'static [Task]> = std::sync::OnceLock::new();

/// Forks the waiter, unless one runs. Only a single-threaded process forks it (the launcher
/// before it parsed its command line; checked, none is started in another): the child goes
/// on in Rust code that allocates.
pub fn start(duties: Duties) {
    let _ = TASKS.set(duties.tasks);
    // As the first process of a PID namespace, our exit would take the waiter with it: the
    // launcher then does the work itself (`ProjectLock::finish`).
    if LINK.load(Ordering::Relaxed) >= 0 || std::process::id() == 1 {
        return;
    }
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let Ok((ours, theirs)) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC) else {
        return;
    };
    // Before the fork: a message sent before the child set it would come without credentials.
    if nix::sys::socket::setsockopt(&theirs, nix::sys::socket::sockopt::PassCred, &true).is_err() {
        return;
    }
    let launcher = std::process::id() as i32;
    // Refused (no waiter, as when the fork fails) unless the process is single-threaded. The
    // child closes every descriptor but its end of the pair (`ours` too) first thing, and
    // ends with _exit; the parent's `theirs` goes with the closure.
    if let Ok(child) = agent_sandbox_sys::process::fork_single_threaded(move || serve(theirs, launcher, duties)) {
        WAITER.store(child, Ordering::Relaxed);
        LINK.store(std::os::fd::IntoRawFd::into_raw_fd(ours), Ordering::Relaxed);
    }
}

/// The waiter's pid, while it is ours (started, and not reaped).
pub fn pid() -> Option<i32> {
    Some(WAITER.load(Ordering::Relaxed)).filter(|p| *p > 0)
}

/// The launcher reaped `pid`: if it was the waiter, its pid may now be anyone's (a process
/// of the jail that took it must not pass for the waiter).
pub fn reaped(pid: i32) {
    let _ = WAITER.compare_exchange(pid, 0, Ordering::Relaxed, Ordering::Relaxed);
}

/// In a child of the launcher that stays (the jail's init, the Landlock command): closes its
/// copy of the launcher's end, so that nothing in the jail can write to it.
pub fn forget() {
    let fd = LINK.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the descriptor was ours (stored by `start`), and is dropped from LINK first.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

/// Gives the waiter its orders, with the session locks' descriptors in `orders.locks`' order.
/// False if no waiter took them (none runs, or it is gone): the caller then does the work.
pub fn hand(orders: &Orders, locks: &[RawFd]) -> bool {
    let fd = LINK.load(Ordering::Relaxed);
    if fd < 0 || locks.len() != orders.locks.len() || locks.len() > MAX_LOCKS {
        return false;
    }
    let Ok(body) = serde_json::to_vec(orders) else { return false };
    let iov = [std::io::IoSlice::new(&body)];
    let rights = [nix::sys::socket::ControlMessage::ScmRights(locks)];
    let cmsgs: &[nix::sys::socket::ControlMessage] = if locks.is_empty() { &[] } else { &rights };
    loop {
        match nix::sys::socket::sendmsg::<()>(fd, &iov, cmsgs, nix::sys::socket::MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) => return n == body.len(),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

/// Removals for the waiter, given as soon as the files exist: the session's socket and its
/// network claim are made before the plan, and a launcher killed while it plans (a Ctrl-C)
/// never reaches the orders of `ProjectLock::hand_to_waiter`. Merged with those (a path named
/// twice is gone at the second try, which does nothing). False where no waiter runs.
pub fn remove_after_exit(paths: &[&std::path::Path]) -> bool {
    let orders = Orders { remove: paths.iter().map(|p| bytes(p)).collect(), ..Orders::default() };
    hand(&orders, &[])
}

/// Closes every descriptor of this process but `keep` (stdio becomes /dev/null).
fn close_all_but(keep: &[i32]) {
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        let _ = agent_sandbox_sys::fd::place_stdio([null.as_raw_fd(); 3]);
    }
    agent_sandbox_sys::fd::close_all_but(keep);
}

/// A pidfd of our parent, if it is still `launcher` (checked after the pidfd exists, so the
/// pid was not reused in between).
fn pidfd_of(launcher: i32) -> Option<OwnedFd> {
    let fd = agent_sandbox_sys::pidfd::open(launcher).ok()?;
    (nix::unistd::getppid().as_raw() == launcher).then_some(fd)
}

/// Leaves the launcher's session (so its process group's and terminal's signals miss us),
/// and ignores the signals a job control or a batch system sends to end a session.
fn shelter() {
    let _ = agent_sandbox_sys::process::new_session_ignoring(&SHELTERED);
}

/// What `shelter` ignores, given back before the waiter runs its tasks (a program they run
/// inherits the default dispositions).
const SHELTERED: [libc::c_int; 9] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The waiter's life: its launcher's orders until the launcher is gone, then the work.
fn serve(sock: OwnedFd, launcher: i32, duties: Duties) -> ! {
    close_all_but(&[sock.as_raw_fd()]);
    shelter();
    let Some(alive) = pidfd_of(launcher) else {
        // The launcher is already gone and gave no orders: nothing to do.
        agent_sandbox_sys::process::exit_now(0)
    };
    let mut orders = Orders::default();
    let mut lock_files: Vec<OwnedFd> = vec![];
    let mut open = true;
    loop {
        use nix::poll::{PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        // Once no more orders can come, the socket is left out (a closed one polls as ready).
        let mut fds = vec![PollFd::new(alive.as_fd(), PollFlags::POLLIN)];
        if open {
            fds.push(PollFd::new(sock.as_fd(), PollFlags::POLLIN));
        }
        match nix::poll::poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            // Only the pidfd says the launcher has ended; anything else is waited out.
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        }
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            break; // the launcher has ended
        }
        if fds.get(1).and_then(|f| f.revents()).is_none_or(|r| r.is_empty()) {
            continue;
        }
        match receive(&sock) {
            Received::Message { body, fds, sender } => {
                // From the launcher, while it still lives: its pid is not anyone else's yet.
                let from_launcher = sender == Some(launcher) && !agent_sandbox_sys::pidfd::ended(&alive, 0);
                let Some(more) = from_launcher.then(|| serde_json::from_slice::<Orders>(&body).ok()).flatten() else {
                    continue;
                };
                if more.locks.len() != fds.len() {
                    continue;
                }
                orders.remove.extend(more.remove);
                // A task ordered twice (each hand-off carries the lock's whole list) runs once.
                for task in more.run {
                    if !orders.run.contains(&task) {
                        orders.run.push(task);
                    }
                }
                orders.locks.extend(more.locks);
                lock_files.extend(fds);
            }
            Received::Nothing => {}
            // No more orders can come; the launcher's end is learnt from the pidfd.
            Received::Closed => open = false,
        }
    }
    // The user has the session's status by now: the cleanup yields the CPU to them.
    agent_sandbox_sys::sched::last_in_line();
    // A program a task runs inherits the defaults.
    agent_sandbox_sys::signal::set_default(&SHELTERED);
    carry_out(orders, lock_files, duties);
    // Without running the launcher's exit path.
    agent_sandbox_sys::process::exit_now(0)
}

enum Received {
    /// A whole message with bytes, its descriptors and the sender's pid.
    Message { body: Vec<u8>, fds: Vec<OwnedFd>, sender: Option<i32> },
    /// A message to drop (empty, cut short, or garbled).
    Nothing,
    /// Every copy of the launcher's end is closed, or the socket failed.
    Closed,
}

fn receive(sock: &OwnedFd) -> Received {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    // The message's own size: a buffer made for the largest would be written whole (it is
    // zeroed), and the waiter lives as long as the session.
    let size = loop {
        match nix::sys::socket::recv(sock.as_raw_fd(), &mut [0u8; 0], MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC) {
            Ok(n) => break n.min(MAX_ORDERS),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Received::Closed,
        }
    };
    let mut buf = vec![0u8; size.max(1)];
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_LOCKS], libc::ucred);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let m = loop {
        match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => break m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Received::Closed,
        }
    };
    let mut fds = vec![];
    let mut sender = None;
    for c in m.cmsgs().into_iter().flatten() {
        match c {
            ControlMessageOwned::ScmRights(v) => fds.extend(v.into_iter().map(|f| {
                // SAFETY: the kernel just installed these descriptors in this process; nothing
                // else owns them.
                unsafe { OwnedFd::from_raw_fd(f) }
            })),
            ControlMessageOwned::ScmCredentials(c) => sender = Some(c.pid()),
            _ => {}
        }
    }
    let (n, cut) = (m.bytes, m.flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC));
    match (n, sender) {
        // No bytes and no credentials: the end of the stream (a message always has both).
        (0, None) => Received::Closed,
        (0, Some(_)) => Received::Nothing,
        _ if cut => Received::Nothing,
        _ => {
            buf.truncate(n);
            Received::Message { body: buf, fds, sender }
        }
    }
}

fn carry_out(orders: Orders, lock_files: Vec<OwnedFd>, duties: Duties) {
    remove_and_run(&orders, duties.tasks);
    for (file, project) in lock_files.into_iter().zip(&orders.locks) {
        (duties.release)(std::fs::File::from(file), path(project));
    }
}

/// The orders' removals and tasks (the waiter's work but the locks; the launcher's own last
/// act when no waiter took them, with the tasks given to `start`).
pub(super) fn remove_and_run_here(orders: &Orders) {
    remove_and_run(orders, TASKS.get().copied().unwrap_or_default());
}

fn remove_and_run(orders: &Orders, tasks: &[Task]) {
    // A directory goes only once empty (the session network's registry, while jobs of the
    // session still run elsewhere, stays).
    for p in orders.remove.iter().map(|p| path(p)) {
        let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir(&p));
    }
    // A name the table lacks is skipped: orders come from the launcher of the same binary.
    for (name, args) in &orders.run {
        if let Some((_, work)) = tasks.iter().find(|(n, _)| n == name) {
            work(args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Orders;
    use crate::jail::test_fork::in_child;

    #[test]
    fn the_waiter_works_after_its_launcher_and_takes_orders_from_it_alone() {
        let dir = std::env::temp_dir().join(format!("asb-waiter-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ours, theirs) = (dir.join("ours"), dir.join("theirs"));
        std::fs::write(&ours, "").unwrap();
        std::fs::write(&theirs, "").unwrap();
        let (marked, forged) = (dir.join("marked"), dir.join("forged"));
        // A removal and a task (`mark`: makes the file its argument names).
        let order = |p: &std::path::Path, m: &std::path::Path| Orders {
            remove: vec![super::bytes(p)],
            run: vec![("mark".to_string(), vec![super::bytes(m)])],
            ..Orders::default()
        };
        // A launcher (a child here, so that it can end), its waiter below it.
        let launcher = in_child(|| {
            fn mark(args: &[Vec<u8>]) {
                if let [p] = args {
                    let _ = std::fs::write(super::path(p), "");
                }
            }
            let duties =
                super::Duties { release: crate::jail::placeholders::release_for_waiter, tasks: &[("mark", mark)] };
            super::start(duties);
            // Another process holding the launcher's end (a child forked before it closed
            // it) sends a message of no bytes (which reads like the end of the stream), then
            // orders a removal: both ignored.
            let impostor = in_child(|| {
                let fd = super::LINK.load(std::sync::atomic::Ordering::Relaxed);
                let empty = nix::sys::socket::send(fd, &[], nix::sys::socket::MsgFlags::empty());
                let sent = super::hand(&order(&theirs, &forged), &[]);
                if empty == Ok(0) && sent {
                    0
                } else {
                    1
                }
            });
            if impostor != nix::sys::wait::WaitStatus::Exited(impostor.pid().unwrap(), 0) {
                return 2;
            }
            if !super::hand(&order(&ours, &marked), &[]) {
                return 3;
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
            if !ours.exists() || !theirs.exists() || marked.exists() {
                return 4; // the waiter worked while its launcher lived
            }
            0
        });
        assert_eq!(launcher, nix::sys::wait::WaitStatus::Exited(launcher.pid().unwrap(), 0));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while (ours.exists() || !marked.exists()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!ours.exists(), "the launcher's order was not carried out after it ended");
        assert!(marked.exists(), "the launcher's task was not run after it ended");
        assert!(theirs.exists() && !forged.exists(), "another process's order was carried out");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn orders_keep_paths_that_are_not_utf8() {
        let o = Orders {
            remove: vec![b"/tmp/a\xffb".to_vec()],
            run: vec![("task".to_string(), vec![b"/state\xfe".to_vec(), b"42".to_vec()])],
            locks: vec![b"/p".to_vec()],
        };
        let back: Orders = serde_json::from_slice(&serde_json::to_vec(&o).unwrap()).unwrap();
        assert_eq!(back, o);
    }
}
