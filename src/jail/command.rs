//! Starts the jail's command from PID 1. Everything the command's process needs (its path,
//! arguments, environment, directory) is made first, in PID 1; the process is then cloned
//! sharing PID 1's memory (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does) and makes only
//! system calls until its exec. A plain fork copied PID 1's page tables (a clone of the
//! launcher's) only for the exec to throw them away: about half a millisecond of every
//! session's start.

use super::blueprint::Blueprint;
use super::caps::Sealed;
use super::signals::TtyFds;
use nix::unistd::Pid;
use std::ffi::{c_char, CString};
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
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    envp_ptrs: Vec<*const c_char>,
    /// Signals PID 1 has a handler for: the child puts them back to default before it
    /// unblocks anything, so no handler of PID 1 runs on the child's stack.
    handled: Vec<libc::c_int>,
}

impl Prepared {
    fn new(plan: &Blueprint) -> Prepared {
        let cstr = |s: &str| CString::new(s.as_bytes()).unwrap_or_default();
        let argv: Vec<CString> = plan.command.iter().map(|a| cstr(a)).collect();
        let envp: Vec<CString> = plan.env.iter().map(|(k, v)| cstr(&format!("{k}={v}"))).collect();
        let nul = |v: &[CString]| v.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        let name = plan.command.first().cloned().unwrap_or_default();
        let cpath = |p: PathBuf| CString::new(p.into_os_string().into_encoded_bytes()).unwrap_or_default();
        // Checked by the child, from its own working directory and with its own view of
        // `/proc/self`, as a forked one did (`pick`).
        let candidates = super::path_candidates(&name, &plan.env).into_iter().map(cpath).collect();
        Prepared {
            candidates,
            cwd: CString::new(plan.cwd.as_os_str().as_encoded_bytes()).unwrap_or_default(),
            argv_ptrs: nul(&argv),
            envp_ptrs: nul(&envp),
            _argv: argv,
            _envp: envp,
            handled: handled_signals(),
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

fn handled_signals() -> Vec<libc::c_int> {
    (1..=libc::SIGRTMAX())
        .filter(|sig| {
            // SAFETY: sigaction is plain data; all zero is a valid value, overwritten below.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: sigaction with a null new action only reads the disposition into `old`.
            let got = unsafe { libc::sigaction(*sig, std::ptr::null(), &mut old) } == 0;
            got && old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN
        })
        .collect()
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
    let mut stack = crate::pages::Pages::zeroed(STACK)
        .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::ENOMEM)))?;
    // SAFETY: the first page of our own fresh mapping becomes inaccessible; nothing uses it.
    if unsafe { libc::mprotect(stack.addr() as *mut libc::c_void, PAGE, libc::PROT_NONE) } != 0 {
        return Err(nix::Error::last());
    }
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
    for p in parts {
        // SAFETY: writes from a live buffer to descriptor 2.
        let _ = unsafe { libc::write(2, p.as_ptr().cast(), p.len()) };
    }
}

/// Ends the child at once, running nothing of PID 1's.
fn exit_now(code: i32) -> ! {
    // SAFETY: _exit ends this process immediately; it touches no shared memory.
    unsafe { libc::_exit(code) }
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
    // SAFETY: each call is a system call on this process alone, with pointers into data
    // PID 1 made before the clone and keeps until the exec.
    unsafe {
        for sig in p.handled.iter().copied().chain([
            libc::SIGPIPE,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ]) {
            libc::signal(sig, libc::SIG_DFL);
        }
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::setsid();
        if let (Some(slave), Some(tty)) = (slave, pty) {
            libc::ioctl(slave, libc::TIOCSCTTY, 0);
            for (fd, is_tty) in tty.0.iter().enumerate() {
                if *is_tty {
                    libc::dup2(slave, fd as i32);
                }
            }
        }
        // Every inherited descriptor above stderr closes at exec (the launcher's own files,
        // the init socket, signalfd...): the jail never holds a host fd it was not given.
        agent_sandbox_sys::fd::cloexec_from(3);
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            libc::chdir(c"/".as_ptr());
        }
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
    // SAFETY: both arrays are null-terminated pointers to live C strings.
    unsafe { libc::execve(path.as_ptr(), p.argv_ptrs.as_ptr(), p.envp_ptrs.as_ptr()) };
    let err = nix::Error::last();
    let code = if err == nix::Error::ENOENT { 127 } else { 126 };
    say(&[b"agent-sandbox: cannot run ", p.name.as_bytes(), b": ", err.desc().as_bytes(), b"\n"]);
    exit_now(code)
}
