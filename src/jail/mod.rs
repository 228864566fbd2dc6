//! The jail: executes a `Plan`. Two backends: user namespaces (the full jail, `userns.rs`
//! and `init.rs`) and Landlock (the fallback for hosts without user namespaces). Nothing
//! here decides policy; if a value is missing, the plan is missing a field.

pub mod caps;
pub mod guard;
pub mod init;
pub mod landlock;
pub mod mounts;
mod msg;
mod net;
pub mod placeholders;
pub mod relay;
pub mod seccomp;
pub mod userns;

use crate::plan::{BackendKind, Plan};
use init::TtyFds;
pub use userns::Outcome;

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("cannot create the jail's namespaces ({flags}): {errno}")]
    Clone { errno: nix::Error, flags: String },
    #[error("cannot write the jail's {file}: {err}")]
    IdMap { file: String, err: std::io::Error },
    #[error("cannot build the jail: {0}")]
    Build(String),
    #[error("lost contact with the jail: {0}")]
    Channel(String),
    #[error(transparent)]
    Placeholder(#[from] placeholders::PlaceholderError),
    #[error("cannot apply Landlock: {0}")]
    Landlock(#[from] landlock::LandlockError),
    #[error("cannot seal the sandbox: {0}")]
    Seal(#[from] caps::SealError),
    #[error("Landlock enforces less than this plan needs: {0}")]
    LandlockWeak(String),
    #[error("{0}: command not found")]
    CommandNotFound(String),
    /// Why the Landlock backend's command could not start, as its forked child said it.
    #[error("{0}")]
    Sandbox(String),
}

impl JailError {
    pub fn fix(&self) -> Option<String> {
        match self {
            JailError::Clone { errno: nix::Error::EPERM | nix::Error::ENOSPC | nix::Error::EINVAL, .. } => Some(
                "fix: unprivileged user namespaces are off or exhausted here; `agent-sandbox doctor` says which knob, or run with --backend landlock".into(),
            ),
            JailError::IdMap { .. } => Some("fix: the kernel refused the id map; `agent-sandbox doctor` checks user namespace support".into()),
            JailError::Build(_) => Some("fix: `agent-sandbox run --dry-run -- CMD` shows the mounts; `agent-sandbox doctor` checks the host".into()),
            _ => None,
        }
    }
}

pub fn stdio_ttys() -> TtyFds {
    // SAFETY: isatty only inspects the descriptor number.
    TtyFds([0, 1, 2].map(|fd| unsafe { libc::isatty(fd) == 1 }))
}

/// Runs the plan's command in the jail and returns how it ended.
/// `lock`: the project's session lock, taken before the plan was made (see `placeholders`).
pub fn run(
    plan: &Plan,
    banner: &dyn Fn(),
    mut lock: placeholders::ProjectLock,
    net: Option<crate::net::supervisor::NetConfig>,
    lazy: Option<relay::Lazy<'_>>,
    audit: &crate::audit::AuditLog,
) -> Result<Outcome, JailError> {
    if let Err(e) = lock.create(&plan.placeholders) {
        lock.release_now();
        return Err(e.into());
    }
    let result = match plan.backend {
        BackendKind::Userns => userns::run(plan, stdio_ttys(), banner, &mut || lock.spawn_waiter(), net, lazy, audit),
        BackendKind::Landlock => run_landlock(plan, banner),
    };
    lock.finish();
    result
}

/// The Landlock backend has no namespaces: the launcher stays outside the sandbox as a child
/// subreaper and forks the command, which restricts itself (seccomp, Landlock) and execs in
/// place. The launcher forwards signals, reaps what gets orphaned below it and, when the
/// command exits, kills every descendant still running (a daemon cannot outlive the session),
/// then removes the session's private temp directory.
fn run_landlock(plan: &Plan, banner: &dyn Fn()) -> Result<Outcome, JailError> {
    use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use nix::unistd::{fork, ForkResult};

    let tmp = PrivateTmp::create(plan)?;
    // With a terminal the command stays in the launcher's process group, so the terminal's
    // own signals (Ctrl-C, Ctrl-Z, window size) reach it directly and the launcher stops
    // with it; without one it gets a session of its own and the launcher forwards.
    let tty = stdio_ttys().any();
    let mut forwarded = vec![Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT];
    forwarded.extend([Signal::SIGUSR1, Signal::SIGUSR2]);
    if !tty {
        forwarded.extend([Signal::SIGTSTP, Signal::SIGCONT]);
    }
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    forwarded.iter().for_each(|s| mask.add(*s));
    let mut old = SigSet::empty();
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), Some(&mut old));
    let restore = |old: &SigSet| {
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(old), None);
    };
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer; it only marks this process.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        restore(&old);
        tmp.remove();
        return Err(JailError::Build(format!("cannot become a child subreaper: {}", std::io::Error::last_os_error())));
    }
    let (sfd, (err_r, err_w)) =
        match (SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC), nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)) {
            (Ok(sfd), Ok(pipe)) => (sfd, pipe),
            _ => {
                restore(&old);
                tmp.remove();
                return Err(JailError::Build("cannot create the launcher's signalfd or pipe".into()));
            }
        };
    banner();
    // SAFETY: the child only prepares its own sandbox and execs or _exits; the launcher has
    // no other thread here (glibc's malloc is fork-safe should one exist).
    let child = match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(err_r);
            restore(&old);
            let e = exec_landlock(plan, &tmp.path, tty);
            let (tag, text) = match &e {
                JailError::CommandNotFound(name) => (b'N', name.clone()),
                other => (b'E', other.to_string()),
            };
            let mut bytes = vec![tag];
            bytes.extend_from_slice(text.as_bytes());
            let _ = nix::unistd::write(&err_w, &bytes);
            // SAFETY: _exit ends the child without running the launcher's exit handlers.
            unsafe { libc::_exit(126) }
        }
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => {
            restore(&old);
            tmp.remove();
            return Err(JailError::Build(format!("cannot fork the command: {e}")));
        }
    };
    drop(err_w);
    // The pipe closes at the command's exec (close-on-exec) or carries why it could not start.
    let mut report = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::fs::File::from(err_r), &mut report);
    let outcome = match report.split_first() {
        Some((tag, text)) => {
            let _ = nix::sys::wait::waitpid(child, None);
            let text = String::from_utf8_lossy(text).into_owned();
            Err(if *tag == b'N' { JailError::CommandNotFound(text) } else { JailError::Sandbox(text) })
        }
        None => Ok(wait_forwarding(child, &sfd, &forwarded, tty)),
    };
    kill_descendants();
    restore(&old);
    tmp.remove();
    outcome
}

/// `si_code` of a signal the kernel raised itself, e.g. the terminal's Ctrl-C to the
/// foreground process group.
const SI_KERNEL: i32 = 0x80;

/// Reaps every child (the command and what gets orphaned to this subreaper) and forwards
/// signals to the command until it ends.
fn wait_forwarding(
    child: nix::unistd::Pid,
    sfd: &nix::sys::signalfd::SignalFd,
    forwarded: &[nix::sys::signal::Signal],
    tty: bool,
) -> Outcome {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == child => return Outcome::Exited(code),
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => return Outcome::Signaled(sig as i32),
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let Ok(Some(info)) = sfd.read_signal() else { continue };
        let Ok(sig) = nix::sys::signal::Signal::try_from(info.ssi_signo as i32) else { continue };
        // With a terminal, a signal the kernel sent to the foreground group reached the
        // command too: passing it on would deliver it twice.
        if forwarded.contains(&sig) && !(tty && info.ssi_code == SI_KERNEL) {
            let _ = nix::sys::signal::kill(child, sig);
        }
    }
}

/// Every living process below this one, from `/proc` (no PID namespace to tear down).
fn descendants() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut parent = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
        let mut rest = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace();
        let (Some(state), Some(ppid)) = (rest.next(), rest.next().and_then(|p| p.parse::<i32>().ok())) else {
            continue;
        };
        // A zombie group leader whose other threads still run is no zombie: it is signalled
        // like any process (a kill of its pid reaches the whole thread group).
        let zombie = state == "Z" && std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()) <= 1;
        parent.push((pid, ppid, zombie));
    }
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent.iter().filter(|(_, pp, _)| *pp == p).map(|(pid, _, _)| *pid));
        i += 1;
    }
    found.retain(|p| *p != me && !parent.iter().any(|(pid, _, zombie)| pid == p && *zombie));
    found
}

fn reap_all() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(st) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if st == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Ends what the command left running: SIGTERM (and SIGCONT, so stopped processes see it),
/// up to half a second of grace, then SIGKILL until nothing is left.
fn kill_descendants() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::time::{Duration, Instant};
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

/// The session's own temp directory (TMPDIR, TMP, TEMP) in the Landlock backend, which has
/// no private `/tmp`: `agent-sandbox/tmp/PID-SESSION` under `$XDG_RUNTIME_DIR` when that is
/// a private directory of the user, else under the state directory. Created 0700, removed
/// when the session ends; directories left by launchers that died are removed at the next
/// start.
struct PrivateTmp {
    path: std::path::PathBuf,
}

impl PrivateTmp {
    fn base(plan: &Plan) -> std::path::PathBuf {
        use std::os::unix::fs::MetadataExt;
        let var = |k: &str| std::env::var_os(k).map(std::path::PathBuf::from).filter(|p| p.is_absolute());
        let runtime = var("XDG_RUNTIME_DIR").filter(|d| {
            std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == plan.uid && m.mode() & 0o077 == 0)
        });
        match runtime {
            Some(r) => r.join("agent-sandbox/tmp"),
            None => var("XDG_STATE_HOME").unwrap_or_else(|| plan.home.join(".local/state")).join("agent-sandbox/tmp"),
        }
    }

    fn create(plan: &Plan) -> Result<PrivateTmp, JailError> {
        use std::os::unix::fs::DirBuilderExt;
        let base = Self::base(plan);
        let fail = |e: std::io::Error| {
            JailError::Build(format!("cannot create the session's temp directory in {}: {e}", base.display()))
        };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&base).map_err(fail)?;
        Self::sweep(&base);
        let session = plan.env.iter().find(|(k, _)| k == "AGENT_SANDBOX_SESSION").map_or("", |(_, v)| v.as_str());
        let session: String = session.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(64).collect();
        let path = base.join(format!("{}-{session}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&path).map_err(fail)?;
        Ok(PrivateTmp { path })
    }

    /// Removes the directories of launchers that are gone (killed before they could).
    fn sweep(base: &std::path::Path) {
        for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.split('-').next()).and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            if pid > 0 && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                remove_tree(&entry.path());
            }
        }
    }

    fn remove(&self) {
        remove_tree(&self.path);
    }
}

/// `remove_dir_all` (which never follows symlinks), after making every directory below
/// writable again if the jail took those rights away.
fn remove_tree(path: &std::path::Path) {
    if std::fs::remove_dir_all(path).is_ok() {
        return;
    }
    fn open_up(dir: &std::path::Path) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&entry.path());
            }
        }
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        open_up(path);
    }
    let _ = std::fs::remove_dir_all(path);
}

/// The Landlock rules of the plan, with the host's shared `/tmp`, `/var/tmp` and `/dev/shm`
/// left out (unless the policy binds one of them itself) and the session's temp dir in.
fn landlock_rules(plan: &Plan, tmp: &std::path::Path) -> landlock::LandlockRules {
    let lp = plan.landlock.clone().unwrap_or_default();
    let asked = |p: &std::path::Path| {
        plan.mounts.iter().any(|m| matches!(m, crate::plan::MountSpec::Bind { source, .. } if source == p))
    };
    let shared = |p: &std::path::Path| ["/tmp", "/var/tmp", "/dev/shm"].iter().any(|t| p == std::path::Path::new(t));
    let mut read_write: Vec<_> = lp.read_write.into_iter().filter(|p| !shared(p) || asked(p)).collect();
    read_write.push(tmp.to_path_buf());
    landlock::LandlockRules {
        read_only: lp.read_only,
        read_write,
        deny_tcp_connect: lp.deny_tcp_connect,
        deny_all_tcp: lp.deny_all_tcp,
        scope_signals: true,
        scope_abstract_unix: true,
    }
}

/// In the forked child: seals and restricts itself, then execs the command. Returns only
/// why it could not.
fn exec_landlock(plan: &Plan, tmp: &std::path::Path, tty: bool) -> JailError {
    // Dies with the launcher, as the userns jail does.
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; it only marks this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    let rules = landlock_rules(plan, tmp);
    // Not a tty? Then a new session: the command cannot reach a controlling terminal at all.
    if !tty {
        let _ = nix::unistd::setsid();
    }
    let opts = seccomp::SeccompOptions {
        allow_nested_userns: plan.seccomp.nested_userns,
        // Landlock's TCP port rules are the network boundary here: only plain TCP may pass.
        tcp_udp_icmp_only: true,
        deny_unix_sockets: !plan.seccomp.unix_sockets,
    };
    let _sealed = match caps::seal_unprivileged(&opts) {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    let status = match landlock::apply(&rules) {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    if rules.deny_all_tcp && !status.tcp {
        return JailError::LandlockWeak(format!(
            "network mode isolated needs Landlock TCP rules (ABI 4), this kernel has ABI {}",
            status.abi
        ));
    }
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags on our own descriptors.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if nix::unistd::chdir(&plan.cwd).is_err() {
        return JailError::Build(format!("cannot enter {}", plan.cwd.display()));
    }
    // SAFETY: resetting SIGPIPE (ignored by the Rust runtime) to its default installs no handler.
    let _ =
        unsafe { nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl) };
    let tmp_str = tmp.display().to_string();
    let mut env: Vec<(String, String)> =
        plan.env.iter().filter(|(k, _)| !matches!(k.as_str(), "TMPDIR" | "TMP" | "TEMP")).cloned().collect();
    env.extend(["TMPDIR", "TMP", "TEMP"].map(|k| (k.to_string(), tmp_str.clone())));
    let name = &plan.command[0];
    let Some(path) = find_in_path(name, &env) else { return JailError::CommandNotFound(name.clone()) };
    let cstr = |s: &str| std::ffi::CString::new(s.as_bytes()).unwrap_or_default();
    let argv: Vec<_> = plan.command.iter().map(|a| cstr(a)).collect();
    let envp: Vec<_> = env.iter().map(|(k, v)| cstr(&format!("{k}={v}"))).collect();
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap_or_default();
    let e = nix::unistd::execve(&p, &argv, &envp).err();
    JailError::Build(format!("cannot run {name}: {}", e.map_or_else(|| "unknown error".into(), |e| e.to_string())))
}

pub fn find_in_path(cmd: &str, env: &[(String, String)]) -> Option<std::path::PathBuf> {
    if cmd.contains('/') {
        return Some(cmd.into());
    }
    let path = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or("/usr/bin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| std::path::Path::new(d).join(cmd))
        .find(|p| p.is_file() && nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::X_OK).is_ok())
}
