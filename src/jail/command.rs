//! Starts the jail's command from PID 1. Everything the command's process needs (its path,
//! arguments, environment, directory) is made first, in PID 1; the process is then cloned
//! sharing PID 1's memory (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does) and makes only
//! system calls until its exec. A plain fork copied PID 1's page tables (a clone of the
//! launcher's) only for the exec to throw them away: about half a millisecond of every
//! session's start.

use super::blueprint::Blueprint;
use super::caps::Sealed;
use super::signals::TtyFds;
use agent_sandbox_sys::memory::Pages;
use agent_sandbox_sys::process::{self, exit_now};
use agent_sandbox_sys::signal;
use agent_sandbox_sys::spawn::{self, CStrings};
use nix::unistd::Pid;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// The git guard's program and the socket its listener goes to PID 1 on.
pub struct GuardStart<'a> {
    pub prog: &'a [seccompiler::sock_filter],
    pub sock: RawFd,
}

/// The child's stack until its exec. Its own frames measured under 2 KiB; a failure report
/// formats a message. The lowest page is left unmapped, so an overflow faults instead of
/// writing over PID 1's memory.
const STACK: usize = 256 << 10;
const PAGE: usize = 4096;

/// The command's exec, made before the clone.
struct Prepared {
    name: String,
    /// Where to look for it, in order, as the child sees them (a relative PATH entry counts
    /// from its working directory): the first regular file it may execute is run.
    candidates: Vec<CString>,
    cwd: CString,
    argv: CStrings,
    envp: CStrings,
}

impl Prepared {
    fn new(plan: &Blueprint) -> Prepared {
        let cstr = |s: &str| CString::new(s.as_bytes()).unwrap_or_default();
        let argv: Vec<CString> = plan.command.iter().map(|a| cstr(a)).collect();
        let envp: Vec<CString> = plan.env.iter().map(|(k, v)| cstr(&format!("{k}={v}"))).collect();
        let name = plan.command.first().cloned().unwrap_or_default();
        let cpath = |p: PathBuf| CString::new(p.into_os_string().into_encoded_bytes()).unwrap_or_default();
        // Checked by the child, from its own working directory and with its own view of
        // `/proc/self`, as a forked one did (`pick`).
        let candidates = super::path_candidates(&name, &plan.env).into_iter().map(cpath).collect();
        Prepared {
            candidates,
            cwd: CString::new(plan.cwd.as_os_str().as_encoded_bytes()).unwrap_or_default(),
            argv: CStrings::new(argv),
            envp: CStrings::new(envp),
            name,
        }
    }
}

/// The first candidate that is a regular file the child may execute; a name with a slash
/// is run as it is (execve then says why it cannot run).
fn pick(p: &Prepared) -> Option<&CString> {
    if p.name.contains('/') {
        return p.candidates.first();
    }
    p.candidates.iter().find(|c| {
        // SAFETY: stat is plain data; all zero is a valid value, overwritten by the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: stat and access read a NUL-terminated path and write one stat of ours.
        unsafe {
            libc::stat(c.as_ptr(), &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFREG
                && libc::access(c.as_ptr(), libc::X_OK) == 0
        }
    })
}

/// Starts the command; returns once it has exec'd (or failed and exited).
pub fn spawn(
    plan: &Blueprint,
    sealed: &Sealed,
    slave: Option<&OwnedFd>,
    pty: Option<TtyFds>,
    guard: Option<GuardStart>,
) -> nix::Result<Pid> {
    let prepared = Prepared::new(plan);
    let errno = |e: std::io::Error| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::ENOMEM));
    let mut stack = Pages::zeroed(STACK).map_err(errno)?;
    stack.guard_low(PAGE).map_err(errno)?;
    let usable = &mut stack[PAGE..];
    let slave_fd = slave.map(|s| s.as_raw_fd());
    let limits = &plan.limits;
    // SAFETY: the child shares our memory and runs on `usable`, which outlives the call (it
    // returns once the child has exec'd or exited). PID 1 is single-threaded here (the
    // guard's threads start after), and the child makes only system calls on data made
    // above, except on the paths that end it (a report of why), where the allocator is free:
    // its only other user waits for this clone.
    let pid = unsafe {
        agent_sandbox_sys::spawn::clone_vfork(usable, || {
            child(&prepared, limits, sealed, slave_fd, pty, guard.as_ref())
        })
    };
    pid.map(Pid::from_raw).map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EAGAIN)))
}

/// Writes the parts of one line to stderr, allocating nothing.
fn say(parts: &[&[u8]]) {
    agent_sandbox_sys::fd::write_parts(2, parts);
}

/// The command's process: restores signals, takes the terminal, applies the limits, hands the
/// guard's listener to PID 1, execs.
fn child(
    p: &Prepared,
    limits: &crate::plan::LimitsPlan,
    _sealed: &Sealed,
    slave: Option<RawFd>,
    pty: Option<TtyFds>,
    guard: Option<&GuardStart>,
) -> ! {
    // Every handler of PID 1's back to default before anything is unblocked, so that none runs
    // on the child's stack; SIGPIPE and the job-control signals too, handled or ignored.
    signal::reset_handlers(&[libc::SIGPIPE, libc::SIGINT, libc::SIGQUIT, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU]);
    signal::unblock_all();
    // SAFETY: each call is a system call on this process alone (the terminal's descriptors
    // are PID 1's, open until the exec).
    unsafe {
        libc::setsid();
        if let (Some(slave), Some(tty)) = (slave, pty) {
            libc::ioctl(slave, libc::TIOCSCTTY, 0);
            for (fd, is_tty) in tty.0.iter().enumerate() {
                if *is_tty {
                    libc::dup2(slave, fd as i32);
                }
            }
        }
    }
    // Every inherited descriptor above stderr closes at exec (the launcher's own files, the
    // init socket, signalfd...): the jail never holds a host fd it was not given.
    agent_sandbox_sys::fd::cloexec_from(3);
    if process::chdir(&p.cwd).is_err() {
        let _ = process::chdir(c"/");
    }
    let Some(path) = pick(p) else {
        say(&[b"agent-sandbox: ", p.name.as_bytes(), b": command not found inside the jail\n"]);
        exit_now(127);
    };
    // Allocates only to describe a failure.
    if let Err(e) = super::limits::apply(limits) {
        say(&[b"agent-sandbox: cannot set the session's limits: ", e.as_bytes(), b"\n"]);
        exit_now(126);
    }
    if let Some(g) = guard {
        // Last before exec: from here on, every name this process makes goes through PID 1.
        let handed =
            super::guard::notify::install_with_listener(g.prog).and_then(|l| super::guard::hand_over(g.sock, &l));
        if let Err(e) = handed {
            say(&[b"agent-sandbox: cannot start the git guard: ", e.to_string().as_bytes(), b"\n"]);
            exit_now(126);
        }
    }
    let err = nix::Error::from_raw(spawn::exec(path, &p.argv, &p.envp).raw_os_error().unwrap_or(libc::EINVAL));
    let code = if err == nix::Error::ENOENT { 127 } else { 126 };
    say(&[b"agent-sandbox: cannot run ", p.name.as_bytes(), b": ", err.desc().as_bytes(), b"\n"]);
    exit_now(code)
}
