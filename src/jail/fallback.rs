//! The Landlock backend's executor (hosts without user namespaces). The launcher stays
//! outside as a child subreaper and forks the command, which seals and restricts itself and
//! execs in place. What the userns jail gets from its own tmpfs and its PID 1 comes here from
//! the plan's session directory, the inherited Slurm channel and the sweeper. Decides nothing:
//! every path, descriptor and way of ending is in `plan.landlock`.

use super::door::Lazy;
use super::Outcome;
use super::{caps, landlock, seccomp, stdio_ttys, JailError};
use crate::plan::{LandlockPlan, Plan, SessionDir, Sweep};
use crate::stub::session::{KEEPER, SWEEPER};
use nix::sys::signal::{kill, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// Runs the plan's command. The launcher forwards signals, reaps what gets orphaned below it,
/// starts the chaperon when the channel first carries a call and, when the command exits,
/// ends everything the session left running, then removes the session directory.
pub fn run(
    plan: &Plan,
    anchors: &[crate::plan::anchor::Anchor],
    moments: &super::Moments<'_>,
    lazy: Option<Lazy<'_>>,
) -> Result<Outcome, JailError> {
    let Some(ll) = &plan.landlock else {
        return Err(JailError::Build("the plan has no Landlock rules for the Landlock backend".into()));
    };
    let (mut lazy, inherit) = match lazy {
        Some(mut l) => {
            let fd = l.inherit.take();
            (Some(l), fd)
        }
        None => (None, None),
    };
    if ll.slurm_fd.is_some() && inherit.is_none() {
        return Err(JailError::Build("the plan passes the Slurm channel on, but the launcher holds none".into()));
    }
    let dir = SessionFiles::create(&ll.session)?;
    // With a terminal the command stays in the launcher's process group, so the terminal's
    // own signals (Ctrl-C, Ctrl-Z, window size) reach it directly and the launcher stops
    // with it; without one it gets a session of its own and the launcher forwards.
    let tty = stdio_ttys().any();
    let (forwarded, mask) = forwarded_signals(tty);
    let mut old = SigSet::empty();
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), Some(&mut old));
    let fail = |why: String| {
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        dir.remove();
        Err(JailError::Build(why))
    };
    let ready = match Ready::make(&mask, ll.sweep) {
        Ok(r) => r,
        Err(why) => return fail(why),
    };
    (moments.building)();
    (moments.ready)();
    let Ready { sfd, report: (report_r, report_w), sweeper } = ready;
    let (sweeper, ends) = match sweeper {
        Some(((go_r, go_w), (done_r, done_w))) => (Some((go_w, done_r)), Some(SweeperEnds { go: go_r, done: done_w })),
        None => (None, None),
    };
    // The launcher has no other thread here (no network supervisor runs in this backend;
    // checked). The child prepares its own sandbox and execs or _exits; the launcher's ends
    // (the signalfd, the report's read end, the sweeper's go and done) are close-on-exec
    // there. The launcher's copies of the child's ends go with the closure: only the
    // session's processes (the command, the keeper) hold the jail's end of the channel
    // now, and the chaperon sees it close when the last of them has gone.
    let channel = inherit.as_ref().map(AsRawFd::as_raw_fd);
    let child = match agent_sandbox_sys::process::fork_single_threaded(move || {
        let _inherit = inherit;
        in_child(plan, anchors, tty, report_w, ends, &old, channel)
    }) {
        Ok(child) => Pid::from_raw(child),
        Err(e) => return fail(format!("cannot fork the command: {e}")),
    };
    let outcome = match start_report(report_r) {
        Some(e) => {
            let _ = nix::sys::wait::waitpid(child, None);
            Err(e)
        }
        None => {
            super::limits::arm_timeout(plan.limits.timeout, child);
            Ok(wait_forwarding(child, &sfd, &forwarded, tty, &mut lazy))
        }
    };
    if let Some((go, done)) = sweeper {
        drop(go);
        wait_for_sweeper(done);
    }
    // Below ABI 6 the only way; above it, what a sweeper that died could not finish.
    kill_descendants();
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    dir.remove();
    outcome
}

/// The signals the launcher passes on to the command, and the mask it blocks to read them
/// (with SIGCHLD) from a signalfd.
fn forwarded_signals(tty: bool) -> (Vec<Signal>, SigSet) {
    let mut forwarded = vec![Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT];
    forwarded.extend([Signal::SIGUSR1, Signal::SIGUSR2]);
    if !tty {
        forwarded.extend([Signal::SIGTSTP, Signal::SIGCONT]);
    }
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    forwarded.iter().for_each(|s| mask.add(*s));
    (forwarded, mask)
}

/// A pipe: (read end, write end).
type Pipe = (OwnedFd, OwnedFd);

/// What the launcher makes before it forks: the signalfd, the pipe the command reports a
/// failed start on, and the sweeper's two pipes (`go` closes when the command has ended or
/// the launcher died, `done` when the sweeper has finished).
struct Ready {
    sfd: SignalFd,
    report: Pipe,
    sweeper: Option<(Pipe, Pipe)>,
}

impl Ready {
    fn make(mask: &SigSet, sweep: Sweep) -> Result<Ready, String> {
        if let Err(e) = agent_sandbox_sys::process::become_subreaper() {
            return Err(format!("cannot become a child subreaper: {e}"));
        }
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
        let (sfd, report) = match (SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK), pipe()) {
            (Ok(sfd), Ok(p)) => (sfd, p),
            _ => return Err("cannot create the launcher's signalfd or pipe".into()),
        };
        let sweeper = match sweep {
            Sweep::ScopedKill => match (pipe(), pipe()) {
                (Ok(go), Ok(done)) => Some((go, done)),
                _ => return Err("cannot create the sweeper's pipes".into()),
            },
            Sweep::ProcWalk => None,
        };
        Ok(Ready { sfd, report, sweeper })
    }
}

/// The forked child: restricts itself and execs the command, or writes why it could not on
/// the report pipe and exits 126.
fn in_child(
    plan: &Plan,
    anchors: &[crate::plan::anchor::Anchor],
    tty: bool,
    report_w: OwnedFd,
    ends: Option<SweeperEnds>,
    old: &SigSet,
    inherit: Option<RawFd>,
) -> ! {
    super::waiter::forget();
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(old), None);
    let e = match &plan.landlock {
        Some(ll) => exec_command(plan, anchors, ll, tty, ends, inherit),
        None => JailError::Build("the plan has no Landlock rules for the Landlock backend".into()),
    };
    let (tag, text) = match &e {
        JailError::CommandNotFound(name) => (b'N', name.clone()),
        // A path the plan checked changed since: the launcher may plan again (nothing ran).
        other if other.changed_since_the_plan() => (b'C', other.to_string()),
        other => (b'E', other.to_string()),
    };
    let mut bytes = vec![tag];
    bytes.extend_from_slice(text.as_bytes());
    let _ = nix::unistd::write(&report_w, &bytes);
    // Without running the launcher's exit handlers.
    agent_sandbox_sys::process::exit_now(126)
}

/// The pipe closes at the command's exec (close-on-exec) or carries why it could not start.
fn start_report(report: OwnedFd) -> Option<JailError> {
    let mut bytes = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::fs::File::from(report), &mut bytes);
    let (tag, text) = bytes.split_first()?;
    let text = String::from_utf8_lossy(text).into_owned();
    Some(match tag {
        b'N' => JailError::CommandNotFound(text),
        b'C' => JailError::Changed(text),
        _ => JailError::Sandbox(text),
    })
}

/// `si_code` of a signal the kernel raised itself, e.g. the terminal's Ctrl-C to the
/// foreground process group.
const SI_KERNEL: i32 = 0x80;

/// Reaps every child (the command and what gets orphaned to this subreaper), forwards
/// signals to the command, and starts the chaperon when its channel is first readable, until
/// the command ends.
fn wait_forwarding(
    child: Pid,
    sfd: &SignalFd,
    forwarded: &[Signal],
    tty: bool,
    lazy: &mut Option<Lazy<'_>>,
) -> Outcome {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == child => return Outcome::Exited(code),
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => return Outcome::Signaled(sig as i32),
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(WaitStatus::Exited(pid, code)) => {
                    super::waiter::reaped(pid.as_raw());
                    if let Some(l) = lazy.as_mut() {
                        l.ended_with(pid, Some(code));
                    }
                }
                Ok(WaitStatus::Signaled(pid, ..)) => {
                    super::waiter::reaped(pid.as_raw());
                    if let Some(l) = lazy.as_mut() {
                        l.ended(pid);
                    }
                }
                Ok(_) => {}
            }
        }
        let lazy_ready = {
            let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
            if let Some(door) = lazy.as_ref().and_then(|l| l.watched()) {
                fds.push(PollFd::new(door, PollFlags::POLLIN));
            }
            if let Err(e) = poll(&mut fds, PollTimeout::NONE) {
                if e != nix::Error::EINTR {
                    // Nothing to wait on: check again for the command after a pause.
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            fds.get(1).and_then(PollFd::revents).filter(|r| !r.is_empty())
        };
        if let (Some(revents), Some(l)) = (lazy_ready, lazy.as_mut()) {
            l.ready(revents);
        }
        while let Ok(Some(info)) = sfd.read_signal() {
            let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else { continue };
            // With a terminal, a signal the kernel sent to the foreground group reached the
            // command too: passing it on would deliver it twice.
            if forwarded.contains(&sig) && !(tty && info.ssi_code == SI_KERNEL) {
                let _ = kill(child, sig);
            }
        }
    }
}

/// The sweeper closes `done` when nothing of the session is left (or when it gives up);
/// orphans it killed are reaped here meanwhile.
fn wait_for_sweeper(done: OwnedFd) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        reap_all();
        let mut fds = [PollFd::new(done.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(20u16)) {
            Ok(0) | Err(nix::Error::EINTR) => {}
            _ => break,
        }
    }
    reap_all();
}

/// The ends of the sweeper's pipes it keeps.
struct SweeperEnds {
    go: OwnedFd,
    done: OwnedFd,
}

/// How the command's child starts the session's helpers (`stub/src/session.rs`): the
/// stub binary, which the session's rules let it run, and /dev/null, opened before the rules.
struct Helpers {
    exe: std::path::PathBuf,
    null: OwnedFd,
}

impl Helpers {
    fn new(exe: &Path) -> Result<Helpers, JailError> {
        use nix::fcntl::OFlag;
        let null = nix::fcntl::open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
            .map_err(|e| JailError::Build(format!("cannot prepare the session's helpers: /dev/null: {e}")))?;
        Ok(Helpers { exe: exe.to_path_buf(), null })
    }

    /// Starts the helper `name` in this process's Landlock domain with the descriptors `keep`
    /// (their numbers are its arguments) and returns its pid once it has exec'd: the stub
    /// binary, with an empty environment. A fork of the launcher left running would hold the
    /// user's whole environment, the launcher's arguments and its memory, all readable from
    /// the command in its domain (the keeper's by design: stubs take the channel from it with
    /// `pidfd_getfd`). A middle process starts it and ends, so that it is no child of the
    /// command (a shell's `wait` would wait for it) but the launcher's, the subreaper.
    fn spawn(&self, name: &str, keep: &[RawFd]) -> Result<i32, JailError> {
        let fail = |why: String| JailError::Build(format!("cannot start the session's {name}: {why}"));
        if keep.iter().any(|fd| *fd < 3) {
            return Err(fail(format!("descriptors {keep:?}: 0-2 are the helper's /dev/null")));
        }
        let (pid_r, pid_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| fail(format!("pipe: {e}")))?;
        // This process is single-threaded (forked from the launcher; checked). The middle
        // process starts the helper and ends at once (the helper goes to the subreaper); its
        // copy of `pid_r` is close-on-exec, so the helper never holds it. The parent's
        // `pid_w` goes with the closure.
        let child = agent_sandbox_sys::process::fork_single_threaded(move || {
            // `P` and the pid, or `E` and why not.
            let report = match self.start(name, keep) {
                Ok(pid) => [&[b'P'][..], &pid.to_le_bytes()].concat(),
                Err(e) => [&[b'E'][..], e.to_string().as_bytes()].concat(),
            };
            let _ = nix::unistd::write(&pid_w, &report);
            0
        })
        .map_err(|e| fail(format!("fork: {e}")))?;
        let mut report = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::fs::File::from(pid_r), &mut report);
        let _ = agent_sandbox_sys::process::wait_status(child, true);
        match report.split_first() {
            Some((b'P', pid)) if pid.len() == 4 => Ok(i32::from_le_bytes([pid[0], pid[1], pid[2], pid[3]])),
            Some((b'E', why)) => Err(fail(format!("{}: {}", self.exe.display(), String::from_utf8_lossy(why)))),
            _ => Err(fail("the process that starts it ended without a word".into())),
        }
    }

    /// In the middle process: starts the helper with /dev/null on 0-2 and only `keep` open
    /// besides. Through `posix_spawn` (std's `Command` without `pre_exec`): no copy of this
    /// process's memory is made for it, and it returns once the helper has exec'd.
    fn start(&self, name: &str, keep: &[RawFd]) -> std::io::Result<i32> {
        use std::os::unix::process::CommandExt;
        agent_sandbox_sys::fd::cloexec_from(3);
        // SAFETY: fcntl only changes the flags of this (throwaway) process's own descriptors;
        // `keep` are open.
        unsafe {
            for fd in keep {
                libc::fcntl(*fd, libc::F_SETFD, 0);
            }
        }
        let null = || self.null.try_clone().map(std::process::Stdio::from);
        let child = std::process::Command::new(&self.exe)
            .arg0(name)
            .args(keep.iter().map(|fd| fd.to_string()))
            .env_clear()
            .stdin(null()?)
            .stdout(null()?)
            .stderr(null()?)
            .spawn()?;
        i32::try_from(child.id()).map_err(std::io::Error::other)
    }
}

/// Every living process below this one, from `/proc` (no PID namespace to tear down).
fn descendants() -> Vec<i32> {
    let me = std::process::id() as i32;
    // The cleanup waiter is ours, not the command's: it must outlive us.
    let waiter = super::waiter::pid();
    let all = crate::stub::session::proc_entries();
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|e| e.ppid == p && Some(e.pid) != waiter).map(|e| e.pid));
        i += 1;
    }
    found.retain(|p| *p != me && !all.iter().any(|e| e.pid == *p && e.zombie));
    found
}

fn reap_all() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(st) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if st == WaitStatus::StillAlive {
            break;
        }
        if let Some(pid) = st.pid() {
            super::waiter::reaped(pid.as_raw());
        }
    }
}

/// Ends what is still running below the launcher by walking `/proc`: SIGTERM (and SIGCONT,
/// so stopped processes see it), up to half a second of grace, then SIGKILL until nothing is
/// left. A process that re-forks faster than the walk can outrun it (the sweeper cannot be
/// outrun; this is the way below ABI 6).
fn kill_descendants() {
    reap_all();
    let left = descendants();
    if left.is_empty() {
        return;
    }
    for p in &left {
        let _ = kill(Pid::from_raw(*p), Signal::SIGTERM);
        let _ = kill(Pid::from_raw(*p), Signal::SIGCONT);
    }
    let grace = Instant::now() + Duration::from_millis(500);
    while Instant::now() < grace {
        std::thread::sleep(Duration::from_millis(10));
        reap_all();
        if descendants().is_empty() {
            return;
        }
    }
    // Bounded, so a process forking faster than this loop kills cannot hold the launcher.
    for _ in 0..500 {
        let left = descendants();
        if left.is_empty() {
            return;
        }
        for p in left {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
        reap_all();
    }
}

/// The plan's session directory, made real: created before the command starts, removed when
/// the session ends; directories left by launchers that died are removed at the next start.
struct SessionFiles<'p> {
    dir: &'p SessionDir,
}

impl<'p> SessionFiles<'p> {
    fn create(dir: &'p SessionDir) -> Result<SessionFiles<'p>, JailError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let fail = |what: &Path, e: std::io::Error| {
            JailError::Build(format!("cannot create the session's directory {}: {e}", what.display()))
        };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir.base).map_err(|e| fail(&dir.base, e))?;
        sweep_dead(&dir.base, &dir.host);
        let made = SessionFiles { dir };
        let build = || -> Result<(), JailError> {
            let mkdir = |p: &Path, mode: u32| std::fs::DirBuilder::new().mode(mode).create(p).map_err(|e| fail(p, e));
            mkdir(&dir.path, 0o700)?;
            mkdir(&dir.tmp, 0o700)?;
            mkdir(&dir.bin, 0o755)?;
            for name in &dir.stubs {
                std::os::unix::fs::symlink(&dir.exe, dir.bin.join(name)).map_err(|e| fail(&dir.bin, e))?;
            }
            if !dir.files.is_empty() {
                let run = dir.path.join("run");
                mkdir(&run, 0o755)?;
                for (path, contents) in &dir.files {
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o555)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(path)
                        .map_err(|e| fail(path, e))?;
                    std::io::Write::write_all(&mut f, contents.as_bytes()).map_err(|e| fail(path, e))?;
                }
            }
            std::fs::set_permissions(&dir.bin, std::fs::Permissions::from_mode(0o555)).map_err(|e| fail(&dir.bin, e))
        };
        match build() {
            Ok(()) => Ok(made),
            Err(e) => {
                made.remove();
                Err(e)
            }
        }
    }

    fn remove(&self) {
        remove_tree(&self.dir.path);
    }
}

/// Removes the session directories of launchers of this host and PID namespace that are gone
/// (killed before they could). A directory of another node (the base may be in a shared home)
/// or namespace is never judged here: its pid means another process.
fn sweep_dead(base: &Path, host: &str) {
    let prefix = format!("{host}-");
    for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        if pid > 0 && !Path::new(&format!("/proc/{pid}")).exists() {
            remove_tree(&entry.path());
        }
    }
}

/// `remove_dir_all` (which never follows symlinks), after making every directory below
/// writable again if the jail took those rights away: each opened without following a
/// symlink and changed through its descriptor, so a directory swapped for a symlink while we
/// walk cannot turn the change onto something outside.
fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() {
        return;
    }
    // Each directory is held by an O_PATH descriptor opened without following a symlink (it
    // needs no read right, which the jail may have taken away), changed and listed through
    // that descriptor's /proc link, which is that directory whatever its name points at now.
    fn open_up(dir: std::os::fd::OwnedFd) {
        use nix::fcntl::{open, openat, OFlag};
        use nix::sys::stat::{fchmodat, FchmodatFlags, Mode};
        use std::os::fd::AsRawFd;
        let own = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let _ =
            fchmodat(nix::fcntl::AT_FDCWD, own.as_str(), Mode::from_bits_truncate(0o700), FchmodatFlags::FollowSymlink);
        let Ok(rd) = open(own.as_str(), OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()) else {
            return;
        };
        let Ok(mut entries) = nix::dir::Dir::from_fd(rd) else { return };
        let subdirs: Vec<std::ffi::CString> = entries
            .iter()
            .flatten()
            .filter(|e| e.file_type() == Some(nix::dir::Type::Directory))
            .map(|e| e.file_name().to_owned())
            .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
            .collect();
        for name in subdirs {
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            if let Ok(fd) = openat(&entries, name.as_c_str(), flags, Mode::empty()) {
                open_up(fd);
            }
        }
    }
    let flags = nix::fcntl::OFlag::O_PATH
        | nix::fcntl::OFlag::O_DIRECTORY
        | nix::fcntl::OFlag::O_NOFOLLOW
        | nix::fcntl::OFlag::O_CLOEXEC;
    let Ok(top) = nix::fcntl::open(path, flags, nix::sys::stat::Mode::empty()) else { return };
    open_up(top);
    let _ = std::fs::remove_dir_all(path);
}

fn landlock_rules(ll: &LandlockPlan) -> landlock::LandlockRules {
    landlock::LandlockRules {
        read_only: ll.read_only.clone(),
        read_write: ll.read_write.clone(),
        deny_tcp_connect: ll.deny_tcp_connect.clone(),
        deny_all_tcp: ll.deny_all_tcp,
        scope_signals: true,
        scope_abstract_unix: true,
        anchors: vec![],
        own: None,
    }
}

/// In the forked child: seals and restricts itself, leaves the sweeper behind in the
/// session's domain and goes on into a nested one, puts the Slurm channel where the plan
/// says, then execs the command. Returns only why it could not.
fn exec_command(
    plan: &Plan,
    anchors: &[crate::plan::anchor::Anchor],
    ll: &LandlockPlan,
    tty: bool,
    sweeper: Option<SweeperEnds>,
    channel: Option<RawFd>,
) -> JailError {
    // Dies with the launcher, as the userns jail does.
    let _ = agent_sandbox_sys::process::die_with_parent(libc::SIGKILL);
    // Before the rules: what starting the helpers needs.
    let helpers = match (&sweeper, ll.slurm_fd) {
        (None, None) => None,
        _ => match Helpers::new(&ll.session.exe) {
            Ok(h) => Some(h),
            Err(e) => return e,
        },
    };
    // Not a tty? Then a new session: the command cannot reach a controlling terminal at all.
    if !tty {
        let _ = nix::unistd::setsid();
    }
    let _sealed = match restrict(plan, anchors, ll, sweeper, helpers.as_ref()) {
        Ok(s) => s,
        Err(e) => return e,
    };
    agent_sandbox_sys::fd::cloexec_from(3);
    if let Err(e) = place_channel(ll.slurm_fd, channel) {
        return e;
    }
    let mut env = plan.env.clone();
    if let Some(fd) = ll.slurm_fd {
        let Some(helpers) = &helpers else { return JailError::Build("the keeper has no way to start".into()) };
        match helpers.spawn(KEEPER, &[fd]) {
            Ok(pid) => env.push((crate::plan::SLURM_KEEPER_VAR.to_string(), pid.to_string())),
            Err(e) => return e,
        }
    }
    exec_in_place(plan, &env)
}

/// Seals the process (capabilities, no new privileges, the seccomp filter) and applies the
/// plan's Landlock rules; with a sweeper, starts it in this domain and goes on into a
/// nested one it can signal.
fn restrict(
    plan: &Plan,
    anchors: &[crate::plan::anchor::Anchor],
    ll: &LandlockPlan,
    sweeper: Option<SweeperEnds>,
    helpers: Option<&Helpers>,
) -> Result<caps::Sealed, JailError> {
    let mut rules = landlock_rules(ll);
    rules.anchors = anchors.to_vec();
    rules.own = Some(plan.own.clone());
    let opts = seccomp::SeccompOptions {
        allow_nested_userns: plan.seccomp.nested_userns,
        nested_mounts: plan.seccomp.nested_mounts,
        tcp_udp_icmp_only: plan.seccomp.tcp_udp_icmp_only,
        deny_unix_sockets: !plan.seccomp.unix_sockets,
        own_process_only: plan.seccomp.own_process_only,
    };
    let sealed = caps::seal_unprivileged(&opts)?;
    let status = landlock::apply(&rules)?;
    if rules.deny_all_tcp && !status.tcp {
        return Err(JailError::LandlockWeak(format!(
            "network mode isolated needs Landlock TCP rules (ABI 4), this kernel has ABI {}",
            status.abi
        )));
    }
    if let Some(ends) = sweeper {
        if !status.scopes {
            return Err(JailError::LandlockWeak(format!(
                "the plan ends the session with signal scoping (ABI 6), this kernel has ABI {}",
                status.abi
            )));
        }
        let Some(helpers) = helpers else { return Err(JailError::Build("the sweeper has no way to start".into())) };
        // It keeps the pipes' ends (its arguments); the launcher's close when this child
        // execs the command.
        helpers.spawn(SWEEPER, &[ends.go.as_raw_fd(), ends.done.as_raw_fd()])?;
        drop(ends);
        landlock::scope_nested()?;
    }
    Ok(sealed)
}

/// The Slurm channel at the descriptor the plan gave the command (`want`), open across exec.
fn place_channel(want: Option<RawFd>, have: Option<RawFd>) -> Result<(), JailError> {
    let (Some(want), Some(have)) = (want, have) else { return Ok(()) };
    // dup2 leaves the new descriptor open across exec; the same number keeps its flag.
    // SAFETY: dup2/fcntl on descriptors of this process; `have` is open (the launcher's pair).
    let placed = unsafe {
        if have == want {
            libc::fcntl(want, libc::F_SETFD, 0)
        } else {
            libc::dup2(have, want)
        }
    };
    if placed < 0 {
        return Err(JailError::Build(format!(
            "cannot pass the Slurm channel on at descriptor {want}: {} (is `ulimit -n` below {}?)",
            std::io::Error::last_os_error(),
            want + 1
        )));
    }
    Ok(())
}

/// The command, exec'd in this process in the plan's directory with `env`; returns only why
/// it could not.
fn exec_in_place(plan: &Plan, env: &[(String, String)]) -> JailError {
    if nix::unistd::chdir(&plan.cwd).is_err() {
        return JailError::Build(format!("cannot enter {}", plan.cwd.display()));
    }
    // SIGPIPE (ignored by the Rust runtime) back to its default.
    agent_sandbox_sys::signal::set_default(&[libc::SIGPIPE]);
    // Last, after the keeper and the sweeper started: without a user namespace, RLIMIT_NPROC counts
    // every process of the user on the host.
    if let Err(e) = super::limits::apply(&plan.limits) {
        return JailError::Build(format!("cannot set the session's limits: {e}"));
    }
    let name = &plan.command[0];
    let Some(path) = super::find_in_path(name, env) else { return JailError::CommandNotFound(name.clone()) };
    let cstr = |s: &str| std::ffi::CString::new(s.as_bytes()).unwrap_or_default();
    let argv: Vec<_> = plan.command.iter().map(|a| cstr(a)).collect();
    let envp: Vec<_> = env.iter().map(|(k, v)| cstr(&format!("{k}={v}"))).collect();
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap_or_default();
    let e = nix::unistd::execve(&p, &argv, &envp).err();
    JailError::Build(format!("cannot run {name}: {}", e.map_or_else(|| "unknown error".into(), |e| e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dead_sessions_of_this_host_and_namespace_are_swept() {
        let base = tempfile::tempdir().expect("tempdir");
        let dead = 2_000_000_000u32; // above any pid_max
        let own = std::process::id();
        for name in [
            format!("node1-4026531836-{dead}-s1"),
            format!("node2-4026531836-{dead}-s2"),
            format!("node1-4026530000-{dead}-s3"),
            format!("node1-4026531836-{own}-s4"),
        ] {
            std::fs::create_dir_all(base.path().join(&name).join("tmp/deep")).expect("mkdir");
        }
        // A session that took the rights away from its directories is still removed.
        let locked = base.path().join(format!("node1-4026531836-{dead}-s1/tmp"));
        std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o500)).expect("chmod");
        sweep_dead(base.path(), "node1-4026531836");
        let left: std::collections::BTreeSet<String> = std::fs::read_dir(base.path())
            .expect("read")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let want: std::collections::BTreeSet<String> = [
            format!("node2-4026531836-{dead}-s2"),
            format!("node1-4026530000-{dead}-s3"),
            format!("node1-4026531836-{own}-s4"),
        ]
        .into_iter()
        .collect();
        assert_eq!(left, want);
    }
}
