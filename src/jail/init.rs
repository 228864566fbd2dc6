//! The jail's PID 1: builds the jail from the plan inside the new namespaces, seals itself
//! (capabilities, no_new_privs, seccomp), starts the command, reaps every orphan, forwards
//! signals, and reports the command's status to the launcher.

use super::blueprint::Blueprint;
use super::caps::{self, Sealed};
use super::msg::{self, Msg};
use super::signals::{TtyFds, FORWARDED};
use super::{mounts, net};
use crate::plan::JailNet;
use nix::mount::{MntFlags, MsFlags};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;

/// What PID 1 is told at its clone, before any plan exists: enough to make the parts of the
/// jail that need none (the network namespace and its devices, the staging root) while the
/// launcher plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Which of stdin/stdout/stderr become the jail's own terminal (None: no pty).
    pub pty: Option<TtyFds>,
    pub net: JailNet,
    /// tun0's address (`JailNet::Tun` only).
    pub tun: Option<std::net::Ipv4Addr>,
}

/// Entry point of the cloned child. Never returns to the launcher's code: exits instead.
/// `launcher_end`: this process's copy of the launcher's end of the channel.
pub fn child_main(shape: &Shape, sock: RawFd, launcher_end: RawFd) -> isize {
    super::waiter::forget();
    let _ = agent_sandbox_sys::process::die_with_parent(libc::SIGKILL);
    // A launcher gone before the line above sends no SIGKILL (and getppid says 0 here either
    // way: the parent is outside this PID namespace); with its copy of the launcher's end
    // closed, the launcher's exit reads as the end of the channel instead.
    let _ = nix::unistd::close(launcher_end);
    leave_the_terminal();
    match msg::recv(sock) {
        Ok(Some(Msg::Go)) => {}
        _ => return 126,
    }
    let failed = |e: Failed| {
        let _ = msg::send(
            sock,
            &match e {
                Failed::Said(e) => Msg::Error(e),
                Failed::Changed(e) => Msg::Changed(e),
            },
        );
        126
    };
    let net = match prepare(shape) {
        Ok(n) => n,
        Err(e) => return failed(e.into()),
    };
    let blueprint = match msg::recv(sock) {
        Ok(Some(Msg::Plan(fd))) => match Blueprint::from_fd(fd) {
            Ok(b) => b,
            Err(e) => return failed(e.into()),
        },
        _ => return 126,
    };
    crate::timing::mark("child-blueprint");
    let slave = match build(&blueprint, shape, sock, net) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    let (prog, guard) = match msg::recv(sock) {
        Ok(Some(Msg::Start { seal, guard })) => (seal, guard),
        _ => return 126,
    };
    crate::timing::mark("child-start");
    let sealed = match caps::seal(&prog) {
        Ok(s) => s,
        Err(e) => return failed(format!("cannot seal the jail: {e}").into()),
    };
    supervise(blueprint, sock, slave, shape.pty, sealed, &guard)
}

/// Why PID 1 could not build the jail, as the launcher is told: `Changed` when a path of the
/// host the plan checked is no longer what it checked (`MountError::changed`), which the
/// launcher may plan again.
enum Failed {
    Said(String),
    Changed(String),
}

impl From<String> for Failed {
    fn from(e: String) -> Failed {
        Failed::Said(e)
    }
}

/// Out of the launcher's session and process group, first thing: the terminal's signals
/// (Ctrl-C, Ctrl-Z, a hangup) reach the launcher alone, which ends the launch or, once the
/// command runs, relays them. Any that reached this process before are dropped: it was cloned
/// with them blocked, and would otherwise read them from its signalfd and pass them on.
fn leave_the_terminal() {
    let _ = nix::unistd::setsid();
    agent_sandbox_sys::signal::drain_pending(super::signals::served_signals().as_ref());
}

/// What needs no plan: the environment block scrubbed, the network namespace started (in a
/// thread, `net::start`), the staging root in place of the host's.
fn prepare(shape: &Shape) -> Result<Option<net::NetSetup>, String> {
    crate::timing::mark("child-go");
    scrub_own_environ();
    // Non-dumpable: the jailed command (same uid) cannot ptrace PID 1 or read its /proc files.
    let _ = agent_sandbox_sys::process::not_dumpable();
    crate::timing::mark("child-env");
    // Before the root is replaced: the thread opens /dev/net/tun and /proc/sys in the host's.
    let net = match shape.net.new_namespace() {
        true => Some(net::start(shape.tun).map_err(|e| format!("cannot build the jail's network: {e}"))?),
        false => None,
    };
    stage()?;
    Ok(net)
}

fn build(bp: &Blueprint, shape: &Shape, sock: RawFd, net: Option<net::NetSetup>) -> Result<Option<OwnedFd>, Failed> {
    nix::unistd::sethostname(&bp.hostname).map_err(|e| format!("cannot set the hostname: {e}"))?;
    build_root(bp)?;
    crate::timing::mark("child-root");
    let mut net_fds = vec![];
    if let Some(n) = net {
        // Fails closed: PID 1 (and the command it starts) never runs in the host's namespace
        // once the plan asked for one of its own.
        let built = n.finish().map_err(|e| format!("cannot build the jail's network: {e}"))?;
        net::enter(&built.netns).map_err(|e| format!("cannot enter the jail's network namespace: {e}"))?;
        net_fds.extend(built.tun);
    }
    crate::timing::mark("child-net-joined");
    if shape.net == JailNet::Proxies {
        net_fds = net::proxy_listeners().map_err(|e| format!("cannot open the proxy listeners: {e}"))?;
    }
    crate::timing::mark("child-lo");
    let mut master = None;
    let mut slave = None;
    if shape.pty.is_some() {
        let (m, s) = open_pty().map_err(|e| format!("cannot open a terminal inside the jail: {e}"))?;
        master = Some(m);
        slave = Some(s);
    }
    msg::send(sock, &Msg::Ready { pty: master, net: net_fds })
        .map_err(|e| format!("cannot reach the launcher: {e}"))?;
    Ok(slave)
}

/// The staging root, before any plan: a tmpfs over /tmp (this namespace's own) made the
/// root, with the host tree reachable at /oldroot while /newroot is filled. The host tree
/// keeps receiving the host's mount events until the plan comes (`build_root`): what the plan
/// looks at can be mounted by looking (autofs: /cvmfs, /sw, homes), and the jail must see the
/// tree the plan saw, as it did when it was cloned after the plan.
fn stage() -> Result<(), String> {
    let m = |r: nix::Result<()>, what: &str| r.map_err(|e| format!("{what}: {e}"));
    m(
        nix::mount::mount(
            Some("tmpfs"),
            "/tmp",
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0700"),
        ),
        "mount staging tmpfs",
    )?;
    for d in ["/tmp/newroot", "/tmp/oldroot", "/tmp/files"] {
        std::fs::create_dir(d).map_err(|e| format!("mkdir {d}: {e}"))?;
    }
    m(nix::unistd::pivot_root("/tmp", "/tmp/oldroot"), "pivot to staging")?;
    m(nix::unistd::chdir("/"), "chdir /")?;
    m(
        nix::mount::mount(
            Some("tmpfs"),
            mounts::NEW,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        ),
        "mount root tmpfs",
    )?;
    crate::timing::mark("child-staged");
    Ok(())
}

/// The plan's mounts on the staging root's /newroot, which then becomes the root; the host
/// tree is detached.
fn build_root(bp: &Blueprint) -> Result<(), Failed> {
    let m = |r: nix::Result<()>, what: &str| r.map_err(|e| Failed::Said(format!("{what}: {e}")));
    m(
        nix::mount::mount(None::<&str>, mounts::OLD, None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>),
        "make the host tree private",
    )?;
    mounts::apply_all(&mut mounts::RealSys, &bp.mounts, &bp.anchors, &bp.own, Path::new("/files")).map_err(|e| {
        let said = format!("cannot build the jail's filesystem: {e}");
        if e.changed() {
            Failed::Changed(said)
        } else {
            Failed::Said(said)
        }
    })?;
    m(nix::unistd::chdir(mounts::NEW), "chdir /newroot")?;
    m(nix::unistd::pivot_root(".", "."), "pivot into the jail root")?;
    m(nix::mount::umount2(".", MntFlags::MNT_DETACH), "detach the host tree")?;
    m(nix::unistd::chdir("/"), "chdir /")?;
    Ok(())
}

fn open_pty() -> nix::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let name = nix::pty::ptsname_r(&master)?;
    let slave = nix::fcntl::open(
        Path::new(&name),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    Ok((master.into(), slave))
}

/// Zeroes this process's initial environment block, which /proc/1/environ shows: PID 1 was
/// cloned from the launcher and still carries the user's unscrubbed variables there.
fn scrub_own_environ() {
    let Ok(stat) = crate::host::read_proc("/proc/self/stat") else {
        return;
    };
    let Some(after) = stat.rsplit_once(')').map(|(_, a)| a) else {
        return;
    };
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 50 and 51 of stat(5) (env_start, env_end); `after` starts at field 3.
    let (Some(start), Some(end)) =
        (f.get(47).and_then(|s| s.parse::<usize>().ok()), f.get(48).and_then(|s| s.parse::<usize>().ok()))
    else {
        return;
    };
    if end > start && end - start < (64 << 20) {
        // SAFETY: [env_start, env_end) is this process's initial environment block on its
        // own stack mapping, writable and mapped for the life of the process. Nothing in this
        // single-threaded child reads the environment after this point.
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
    }
}

/// Tells the launcher how many of the git guard's refusals went unreported (past its rate),
/// for the audit log's count: with the next report, and at the end.
fn left_out(sock: RawFd) {
    let n = super::guard::take_left_out();
    if n > 0 {
        let _ = msg::send(sock, &Msg::LeftOut(n));
    }
}

/// Tells the launcher the guard made no symlink where the exit check looks, if so: a
/// launcher that never hears it (a link made, PID 1 gone, the message lost) walks the trees.
fn links_made(sock: RawFd) {
    if super::guard::close() {
        let _ = msg::send(sock, &Msg::NoLinks);
    }
}

/// The command is done: kill and reap everything else in the jail before telling the
/// launcher, so that when the launcher returns no process of the session is left running,
/// while the kernel's namespace teardown (slow with many mounts) happens after it returned.
fn end_session() {
    crate::timing::mark("child-cmd-done");
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    while waitpid(Pid::from_raw(-1), None).is_ok() {}
    crate::timing::mark("child-reaped");
    // Every writer is gone: a repository's config written last is installed before PID 1 ends.
    super::guard::wait_for_streams(std::time::Duration::from_secs(5));
}

/// Passes a signal on to the command. The command leads its own session with no terminal,
/// so its process group is orphaned and the kernel discards a default-action SIGTSTP there:
/// a stop request becomes SIGSTOP for the command's whole process group, and SIGCONT goes
/// to the whole group too, so pipelines stop and resume together.
fn forward(child: Pid, sig: Signal) {
    let group = Pid::from_raw(-child.as_raw());
    let _ = match sig {
        Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU => kill(group, Signal::SIGSTOP),
        Signal::SIGCONT => kill(group, Signal::SIGCONT),
        other => kill(child, other),
    };
}

/// How long PID 1 holds a relayed signal before passing it on, waiting to see whether the
/// same signal also reaches it directly; and how long a direct one makes a relay redundant.
const RELAY_HOLD: std::time::Duration = std::time::Duration::from_millis(20);
const DIRECT_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);

/// Decides which signals PID 1 passes on to the command. A signal from outside that reached
/// PID 1 itself (PID 1 leads its own session, so no terminal or process group reaches it)
/// was sent to every process of the jail at once: a process tree or a cgroup, as Slurm's
/// proctrack delivers `scancel --signal` and `--signal=SIG@T` to a step. The command has it
/// already; passing it on would deliver it twice (a checkpointing handler would run twice).
/// A signal the launcher relays (`Msg::Relay`, on the control socket) is passed on after `RELAY_HOLD`,
/// unless the same signal reaches PID 1 directly around the same time.
#[derive(Default)]
pub struct SignalPassing {
    pending: Vec<(Signal, std::time::Instant)>,
    direct: Vec<(Signal, std::time::Instant)>,
}

impl SignalPassing {
    /// A signal that arrived from outside the jail; `relayed`: the launcher passed it on.
    pub fn arrived(&mut self, sig: Signal, relayed: bool, now: std::time::Instant) {
        self.direct.retain(|(_, t)| now.saturating_duration_since(*t) < DIRECT_WINDOW);
        if relayed {
            let covered = self.direct.iter().any(|(s, _)| *s == sig);
            if !covered && !self.pending.iter().any(|(s, _)| *s == sig) {
                self.pending.push((sig, now + RELAY_HOLD));
            }
        } else {
            self.pending.retain(|(s, _)| *s != sig);
            self.direct.push((sig, now));
        }
    }

    /// The relayed signals whose hold is over: pass these on now.
    pub fn due(&mut self, now: std::time::Instant) -> Vec<Signal> {
        let (due, keep): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|(_, t)| *t <= now);
        self.pending = keep;
        due.into_iter().map(|(s, _)| s).collect()
    }

    /// How long until the next relayed signal is due, if one is held.
    pub fn wait(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        self.pending.iter().map(|(_, t)| t.saturating_duration_since(now)).min()
    }
}

/// PID 1's life after the root is made: starts the command (and the git guard that serves its
/// calls), passes on the launcher's signals, and ends when the command does, saying how.
fn supervise(
    plan: Blueprint,
    sock: RawFd,
    slave: Option<OwnedFd>,
    pty: Option<TtyFds>,
    sealed: Sealed,
    guard_prog: &[seccompiler::sock_filter],
) -> isize {
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    for s in FORWARDED {
        mask.add(*s);
    }
    // The launcher blocked these before cloning; they arrive here through the signalfd.
    let Ok(sfd) = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC) else {
        let _ = msg::send(sock, &Msg::Error("cannot create a signalfd in the jail".into()));
        return 126;
    };
    let guard_pair = match guard_pair(&plan, guard_prog) {
        Ok(p) => p,
        Err(e) => {
            let _ = msg::send(sock, &Msg::Error(e));
            return 126;
        }
    };
    crate::timing::mark("child-sealed");
    let guard = guard_pair.as_ref().map(|(_, c)| super::command::GuardStart { prog: guard_prog, sock: c.as_raw_fd() });
    let child = match super::command::spawn(&plan, &sealed, slave.as_ref(), pty, guard) {
        Ok(child) => child,
        Err(e) => {
            let _ = msg::send(sock, &Msg::Error(format!("cannot start the command: {e}")));
            return 126;
        }
    };
    drop(slave);
    let guarded = guard_pair.is_some() && plan.git_guard.is_some();
    if let (Some(pair), Some(g)) = (guard_pair, &plan.git_guard) {
        serve_guard(pair, g, sock);
    }
    // The rest of the session needs nothing of the plan: its mounts, environment and anchors
    // are given back (trimmed with the heap below), not held by every idle session's init.
    drop(plan);
    crate::timing::mark("child-forked");
    let mut trim = agent_sandbox_sys::memory::TrimLater::new();
    let mut passing = SignalPassing::default();
    let mut launcher_open = true;
    loop {
        let now = std::time::Instant::now();
        trim.run_if_due(now);
        for sig in passing.due(now) {
            forward(child, sig);
        }
        let wait = match (passing.wait(now), trim.wait(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some((sig_ready, sock_ready)) = ready(&sfd, sock, launcher_open, wait) else { continue };
        if sock_ready {
            match msg::recv(sock) {
                Ok(Some(Msg::Relay(n))) => {
                    if let Some(sig) = Signal::try_from(n).ok().filter(|s| FORWARDED.contains(s)) {
                        passing.arrived(sig, true, std::time::Instant::now());
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => launcher_open = false,
            }
        }
        if !sig_ready {
            continue;
        }
        let Ok(Some(info)) = sfd.read_signal() else {
            continue;
        };
        let signo = info.ssi_signo as i32;
        if signo == libc::SIGCHLD {
            if let Some(code) = reap(child, sock, guarded) {
                return code;
            }
        } else if let Ok(sig) = Signal::try_from(signo) {
            // A sender outside the jail's PID namespace shows as pid 0: a signal sent to every
            // process of the jail at once. The jail's own processes can reach PID 1 too (it
            // blocks these signals rather than leaving them at their default, so the kernel
            // queues them): theirs are dropped.
            if info.ssi_pid != 0 {
                continue;
            }
            passing.arrived(sig, false, std::time::Instant::now());
        }
    }
}

/// The pair the command hands the git guard's listener back on (see `guard`), where the
/// plan has a guard; an error line if it cannot have one.
fn guard_pair(plan: &Blueprint, guard_prog: &[seccompiler::sock_filter]) -> Result<Option<(OwnedFd, OwnedFd)>, String> {
    match (&plan.git_guard, guard_prog.is_empty()) {
        (Some(_), false) => {
            use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
            socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
                .map(Some)
                .map_err(|e| format!("cannot start the git guard: {e}"))
        }
        (Some(_), true) => Err("the git guard's program is missing".into()),
        (None, _) => Ok(None),
    }
}

/// Takes the guard's listener from the command and serves it on threads of PID 1.
fn serve_guard((ours, theirs): (OwnedFd, OwnedFd), g: &crate::plan::GitGuardPlan, sock: RawFd) {
    drop(theirs);
    // EOF instead of a listener: the command ended before its exec (not found, or the
    // filter failed, which it reported); it runs nothing unguarded.
    let Ok(listener) = super::guard::take_over(ours.as_raw_fd()) else { return };
    let report = Box::new(move |check: &str, path: &str| {
        left_out(sock);
        let _ = msg::send(sock, &Msg::Refused { check: check.into(), path: path.into() });
    });
    let guarded = super::guard::rules::Guarded::new(g.roots.clone()).with_links(g.links.clone());
    // The project's `.env` as the session found it: its own controlling lines stay
    // when git writes it anew.
    if let Some(env) = g.roots.first().map(|r| r.join(".env")) {
        if let Ok(text) = super::dotenv::read_for_guard(&env) {
            guarded.dotenv_seen(&env, &text);
        }
    }
    super::guard::serve(listener, guarded, report);
}

/// Waits at most `wait` (for ever if None) for a signal or a message from the launcher:
/// which of the two is ready, or None if neither is. Signals from the launcher come on the
/// control socket: a channel no process of the jail can write to, and one that never merges
/// two signals into one.
fn ready(sfd: &SignalFd, sock: RawFd, launcher_open: bool, wait: Option<std::time::Duration>) -> Option<(bool, bool)> {
    use std::os::fd::{AsFd, BorrowedFd};
    // SAFETY: `sock` stays open for the whole of `supervise`; the borrow ends with the poll.
    let sock_fd = unsafe { BorrowedFd::borrow_raw(sock) };
    let sock_flags = if launcher_open { nix::poll::PollFlags::POLLIN } else { nix::poll::PollFlags::empty() };
    let mut fds = [
        nix::poll::PollFd::new(sfd.as_fd(), nix::poll::PollFlags::POLLIN),
        nix::poll::PollFd::new(sock_fd, sock_flags),
    ];
    let timeout = match wait {
        Some(w) => nix::poll::PollTimeout::from(u16::try_from(w.as_millis().max(1)).unwrap_or(u16::MAX)),
        None => nix::poll::PollTimeout::NONE,
    };
    match nix::poll::poll(&mut fds, timeout) {
        Ok(0) | Err(_) => None,
        Ok(_) => {
            Some((fds[0].revents().is_some_and(|r| !r.is_empty()), fds[1].revents().is_some_and(|r| !r.is_empty())))
        }
    }
}

/// Reaps the jail's children; when the command is among them, ends the session and tells
/// the launcher how it ended: PID 1's exit code. Under the git guard, whether it made a link
/// first (`guard::close`), for the launcher's exit check.
fn reap(child: Pid, sock: RawFd, guarded: bool) -> Option<isize> {
    loop {
        let (said, code) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == child => (Msg::Exited(code), code as isize),
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => (Msg::Signaled(sig as i32), 128 + sig as isize),
            Ok(WaitStatus::StillAlive) | Err(_) => return None,
            Ok(_) => continue,
        };
        end_session();
        left_out(sock);
        if guarded {
            links_made(sock);
        }
        let _ = msg::send(sock, &said);
        agent_sandbox_sys::sched::last_in_line();
        return Some(code);
    }
}

#[cfg(test)]
mod tests {
    use super::{SignalPassing, DIRECT_WINDOW, RELAY_HOLD};
    use nix::sys::signal::Signal::{SIGINT, SIGTERM, SIGUSR2};
    use std::time::{Duration, Instant};

    #[test]
    fn a_relayed_signal_is_passed_on_after_its_hold() {
        let (mut p, t) = (SignalPassing::default(), Instant::now());
        p.arrived(SIGINT, true, t);
        assert!(p.due(t).is_empty());
        assert_eq!(p.wait(t), Some(RELAY_HOLD));
        assert_eq!(p.due(t + RELAY_HOLD), [SIGINT]);
        assert_eq!(p.wait(t + RELAY_HOLD), None);
    }

    #[test]
    fn a_signal_sent_to_the_whole_jail_is_not_delivered_twice() {
        // slurmstepd signals every process of the step: the launcher (which relays), PID 1
        // and the command, in any order.
        let (mut p, t) = (SignalPassing::default(), Instant::now());
        p.arrived(SIGUSR2, true, t);
        p.arrived(SIGUSR2, false, t + Duration::from_millis(1));
        assert!(p.due(t + RELAY_HOLD).is_empty(), "direct after relay");
        let mut p = SignalPassing::default();
        p.arrived(SIGUSR2, false, t);
        p.arrived(SIGUSR2, true, t + Duration::from_millis(5));
        assert!(p.due(t + Duration::from_secs(1)).is_empty(), "relay after direct");
        // Another signal, and the same one later, still go through.
        p.arrived(SIGTERM, true, t + Duration::from_millis(5));
        assert_eq!(p.due(t + Duration::from_secs(1)), [SIGTERM]);
        let later = t + DIRECT_WINDOW + Duration::from_millis(10);
        p.arrived(SIGUSR2, true, later);
        assert_eq!(p.due(later + RELAY_HOLD), [SIGUSR2]);
    }
}
