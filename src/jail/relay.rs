//! The launcher's wait loop: forwards signals to the jail's PID 1, relays the terminal
//! between the user's tty and the jail's own pty (raw mode, window size), and collects the
//! command's status. A jail with its own pty cannot push keystrokes into the user's shell.

use super::msg::{self, Msg};
use super::JailError;
use super::Outcome;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::termios::{self, SetArg, Termios};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::signals::served_signals;

/// Blocks the signals the launcher handles through a signalfd, once the jail is about to run
/// the plan: from here on they are relayed, not acted on (before, Ctrl-C ends the launch).
pub fn block_signals() -> SigSet {
    let mask = served_signals();
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None);
    mask
}

/// Restores the user's terminal settings however the loop ends.
struct RawMode {
    fd: RawFd,
    saved: Termios,
}

impl RawMode {
    fn enter(fd: RawFd) -> Option<RawMode> {
        // SAFETY: fd 0 stays open for the life of the launcher.
        let b = unsafe { BorrowedFd::borrow_raw(fd) };
        let saved = termios::tcgetattr(b).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(b, SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: as in `enter`.
        let b = unsafe { BorrowedFd::borrow_raw(self.fd) };
        let _ = termios::tcsetattr(b, SetArg::TCSADRAIN, &self.saved);
    }
}

fn copy_winsize(from: RawFd, to: RawFd) {
    // SAFETY: winsize is plain data; TIOCGWINSZ/TIOCSWINSZ read/write exactly one of it.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(from, libc::TIOCGWINSZ, &mut ws) == 0 {
            libc::ioctl(to, libc::TIOCSWINSZ, &ws);
        }
    }
}

fn is_tty(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

fn set_nonblocking(fd: RawFd) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    // SAFETY: fd is open for the duration of the call.
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    if let Ok(fl) = fcntl(b, FcntlArg::F_GETFL) {
        let _ = fcntl(b, FcntlArg::F_SETFL(OFlag::from_bits_truncate(fl) | OFlag::O_NONBLOCK));
    }
}

fn write_all(fd: RawFd, mut data: &[u8]) {
    // SAFETY: the caller's descriptor stays open for the call (stdout, stderr or the pty).
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    while !data.is_empty() {
        match nix::unistd::write(b, data) {
            Ok(n) => data = &data[n..],
            Err(nix::Error::EINTR) => {}
            Err(nix::Error::EAGAIN) => {
                let _ = poll(&mut [PollFd::new(b, PollFlags::POLLOUT)], PollTimeout::from(100u16));
            }
            Err(_) => return,
        }
    }
}

fn read_some(fd: RawFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: the caller's descriptor stays open for the call (stdin or the pty).
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    nix::unistd::read(b, buf).ok().filter(|n| *n > 0)
}

/// Waits for the jail's end: relays the terminal, the launcher's signals, PID 1's reports and
/// the chaperon's door until the command has exited, and says how, and what PID 1 said of
/// the links the git guard made.
pub fn run(
    pid: Pid,
    sock: RawFd,
    master: Option<OwnedFd>,
    mask: &SigSet,
    mut lazy: Option<super::door::Lazy<'_>>,
    audit: &crate::audit::AuditLog,
) -> Result<(Outcome, super::links::Heard), JailError> {
    let sfd = SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| JailError::Channel(format!("signalfd: {e}")))?;
    let out_fd = if is_tty(1) { 1 } else { 2 };
    let raw = master.as_ref().and_then(|_| RawMode::enter(0));
    if let Some(m) = &master {
        copy_winsize(out_fd, m.as_raw_fd());
        set_nonblocking(m.as_raw_fd());
    }
    // Mapped pages: resident only as far as terminal output reached (a session without a
    // terminal never touches it), and never memory a later heap trim would have to keep.
    let buf = agent_sandbox_sys::memory::Pages::zeroed(64 * 1024)
        .map_err(|e| JailError::Channel(format!("relay buffer: {e}")))?;
    let mut r = Relay {
        pid,
        sock,
        out_fd,
        raw,
        stdin_open: master.is_some(),
        master_open: master.is_some(),
        master,
        sock_open: true,
        buf,
        audit,
        heard: super::links::Heard::default(),
    };
    let mut trim = agent_sandbox_sys::memory::TrimLater::new();
    loop {
        trim.run_if_due(std::time::Instant::now());
        let ready = r.wait(&sfd, lazy.as_ref(), trim.wait(std::time::Instant::now()))?;
        if let (Some(revents), Some(l)) = (ready.lazy, lazy.as_mut()) {
            l.ready(revents);
        }
        if ready.sock {
            if let Some(done) = r.pid1_report() {
                return Ok((done, std::mem::take(&mut r.heard)));
            }
        }
        if ready.stdin {
            r.keys_in();
        }
        if ready.master {
            r.output_out();
        }
        if ready.signal {
            if let Some(done) = r.signals(&sfd, lazy.as_mut()) {
                return Ok((done, std::mem::take(&mut r.heard)));
            }
        }
    }
}

/// The loop's state: what is still open, the terminal, the buffer.
struct Relay<'a> {
    pid: Pid,
    sock: RawFd,
    master: Option<OwnedFd>,
    out_fd: RawFd,
    raw: Option<RawMode>,
    stdin_open: bool,
    master_open: bool,
    sock_open: bool,
    buf: agent_sandbox_sys::memory::Pages,
    audit: &'a crate::audit::AuditLog,
    /// What PID 1 said of the links the git guard made.
    heard: super::links::Heard,
}

/// Which of the loop's sources have something.
struct Ready {
    signal: bool,
    sock: bool,
    stdin: bool,
    master: bool,
    lazy: Option<PollFlags>,
}

impl Relay<'_> {
    /// One poll of every open source, at most `wait` (for ever if None).
    fn wait(
        &self,
        sfd: &SignalFd,
        lazy: Option<&super::door::Lazy<'_>>,
        wait: Option<std::time::Duration>,
    ) -> Result<Ready, JailError> {
        let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        // SAFETY: the raw fds below stay open for the whole call.
        let sock_fd = unsafe { BorrowedFd::borrow_raw(self.sock) };
        fds.push(PollFd::new(sock_fd, if self.sock_open { PollFlags::POLLIN } else { PollFlags::empty() }));
        // SAFETY: fd 0 stays open for the launcher's life.
        let stdin_b = unsafe { BorrowedFd::borrow_raw(0) };
        let (mut i_stdin, mut i_master, mut i_lazy) = (None, None, None);
        if let (true, Some(_)) = (self.stdin_open, &self.master) {
            i_stdin = Some(fds.len());
            fds.push(PollFd::new(stdin_b, PollFlags::POLLIN));
        }
        if let (true, Some(m)) = (self.master_open, &self.master) {
            i_master = Some(fds.len());
            fds.push(PollFd::new(m.as_fd(), PollFlags::POLLIN));
        }
        if let Some(door) = lazy.and_then(|l| l.watched()) {
            i_lazy = Some(fds.len());
            fds.push(PollFd::new(door, PollFlags::POLLIN));
        }
        let timeout = match wait {
            Some(w) => PollTimeout::from(u16::try_from(w.as_millis().max(1)).unwrap_or(u16::MAX)),
            None => PollTimeout::NONE,
        };
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(JailError::Channel(format!("poll: {e}"))),
        }
        let events = |i: Option<usize>| i.and_then(|i| fds[i].revents()).filter(|r| !r.is_empty());
        Ok(Ready {
            signal: events(Some(0)).is_some(),
            sock: events(Some(1)).is_some(),
            stdin: events(i_stdin).is_some(),
            master: events(i_master).is_some(),
            lazy: events(i_lazy),
        })
    }

    /// A report of PID 1's; how the command ended, once it has.
    fn pid1_report(&mut self) -> Option<Outcome> {
        match msg::recv(self.sock) {
            // Init reports only once every process of the jail is gone: return now and
            // leave the namespace teardown to the kernel.
            Ok(Some(Msg::Exited(c))) => {
                crate::timing::mark("got-exited");
                drain(&self.master, self.out_fd, &mut self.buf);
                Some(Outcome::Exited(c))
            }
            Ok(Some(Msg::Signaled(s))) => {
                drain(&self.master, self.out_fd, &mut self.buf);
                Some(Outcome::Signaled(s))
            }
            Ok(Some(m)) => {
                note(m, self.audit, &mut self.heard);
                None
            }
            Ok(None) => {
                self.sock_open = false;
                None
            }
            Err(_) => None,
        }
    }

    /// The user's keystrokes, to the jail's pty.
    fn keys_in(&mut self) {
        match read_some(0, &mut self.buf) {
            Some(n) => {
                if let Some(m) = &self.master {
                    write_all(m.as_raw_fd(), &self.buf[..n]);
                }
            }
            None => self.stdin_open = false,
        }
    }

    /// What the jail wrote on its pty, to the user's terminal.
    fn output_out(&mut self) {
        if let Some(m) = &self.master {
            match read_some(m.as_raw_fd(), &mut self.buf) {
                Some(n) => write_all(self.out_fd, &self.buf[..n]),
                None => self.master_open = false,
            }
        }
    }

    /// The launcher's signals: a child's end (the chaperon's, or the jail's: how the command
    /// ended), a window resized, and the rest passed on to the jail.
    fn signals(&mut self, sfd: &SignalFd, mut lazy: Option<&mut super::door::Lazy<'_>>) -> Option<Outcome> {
        while let Ok(Some(info)) = sfd.read_signal() {
            let signo = info.ssi_signo as i32;
            if signo == libc::SIGCHLD {
                if let Some(l) = lazy.as_deref_mut() {
                    reap_chaperon(l);
                }
                let outcome = match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(_, c)) => {
                        crate::timing::mark("exited");
                        Outcome::Exited(c)
                    }
                    Ok(WaitStatus::Signaled(_, s, _)) => Outcome::Signaled(s as i32),
                    _ => continue,
                };
                drain(&self.master, self.out_fd, &mut self.buf);
                settle(self.sock, self.audit, &mut self.heard);
                return Some(outcome);
            } else if signo == libc::SIGWINCH && self.master.is_some() {
                if let Some(m) = &self.master {
                    copy_winsize(self.out_fd, m.as_raw_fd());
                }
            } else if let Ok(sig) = Signal::try_from(signo) {
                relay(self.sock, self.pid, sig);
                if sig == Signal::SIGTSTP {
                    // Stopped like the job it is, so the user's shell sees it stop (with
                    // its terminal settings back); the shell's SIGCONT resumes us, and we
                    // pass that on above and take the terminal again.
                    let was_raw = self.raw.take().is_some();
                    let _ = kill(nix::unistd::getpid(), Signal::SIGSTOP);
                    if was_raw {
                        self.raw = RawMode::enter(0);
                    }
                }
            }
        }
        None
    }
}

/// The chaperon's end, if it was the child that ended: the door starts it again at the next
/// Slurm call.
fn reap_chaperon(l: &mut super::door::Lazy<'_>) {
    if let Some(server) = l.running() {
        match waitpid(server, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => l.ended_with(server, Some(code)),
            Ok(WaitStatus::Signaled(..)) => l.ended(server),
            _ => {}
        }
    }
}

/// Passes a signal to the jail's PID 1 on the control socket (see `init::SignalPassing`);
/// if that is gone, as a plain signal.
fn relay(sock: RawFd, pid: nix::unistd::Pid, sig: Signal) {
    if msg::send(sock, &msg::Msg::Relay(sig as i32)).is_err() {
        let _ = kill(pid, sig);
    }
}

/// After the jail ends, whatever the command wrote last is still in the pty: pass it on.
/// What PID 1 reports on the way (an error, a refusal of the git guard, the refusals past
/// its rate), for the user and the audit log.
fn note(m: Msg, audit: &crate::audit::AuditLog, heard: &mut super::links::Heard) {
    match m {
        Msg::NoLinks => heard.no_links(),
        Msg::Error(e) => eprintln!("agent-sandbox: {e}"),
        Msg::Refused { check, path } => {
            let mut r = audit.record("fs_denied");
            r.check = Some(check);
            r.path = Some(path);
            audit.write(&r);
        }
        Msg::LeftOut(n) => audit.count_left_out("fs_denied/git-guard", n),
        _ => {}
    }
}

/// PID 1 is gone, maybe with reports still queued on the socket (the queue holds several,
/// and its exit can be seen before they are read): each is taken now, so a flood of
/// refusals ends written or counted, never lost with the session's end.
fn settle(sock: RawFd, audit: &crate::audit::AuditLog, heard: &mut super::links::Heard) {
    while let Ok(Some(m)) = msg::try_recv(sock) {
        note(m, audit, heard);
    }
}

fn drain(master: &Option<OwnedFd>, out_fd: RawFd, buf: &mut [u8]) {
    if let Some(m) = master {
        while let Some(n) = read_some(m.as_raw_fd(), buf) {
            write_all(out_fd, &buf[..n]);
        }
    }
}
