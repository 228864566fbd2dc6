//! The launcher's side of Slurm: the session's chaperon (bound before the jail is cloned,
//! forked while the jail builds itself) and `agent-sandbox exec --job`, which a job runs on
//! the compute node to re-enter the jail.

use crate::audit::AuditLog;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The session's chaperon socket, bound and listening; nothing serves it until `start`.
pub struct Chaperon {
    pub socket: PathBuf,
    listener: UnixListener,
}

/// Binds `<state>/sessions/<session>.sock` (0600 in a 0700 directory). A stale socket of a
/// dead session with the same id is replaced.
pub fn bind(state_dir: &Path, session: &str) -> std::io::Result<Chaperon> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = state_dir.join("sessions");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    let socket = dir.join(format!("{session}.sock"));
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(Chaperon { socket, listener })
}

/// What the chaperon process needs from the launcher.
pub struct Session {
    pub uid: u32,
    pub user: String,
    pub home: PathBuf,
    pub session: String,
    pub project: PathBuf,
    pub state_dir: PathBuf,
    pub exe: PathBuf,
    pub policy_json: String,
    pub log: AuditLog,
}

impl Chaperon {
    /// Forks the chaperon process. Call while the launcher is single-threaded. The child
    /// never returns: it serves until the launcher dies (PR_SET_PDEATHSIG). The launcher
    /// keeps only the socket's path, to remove it when the session ends.
    pub fn start(self, s: Session) {
        let launcher = nix::unistd::getpid();
        // SAFETY: the launcher has no other threads yet (the network supervisor starts after
        // the jail reports ready), so the child may allocate and start threads.
        match unsafe { nix::unistd::fork() } {
            Ok(nix::unistd::ForkResult::Child) => {
                child(self.listener, s, launcher);
            }
            Ok(nix::unistd::ForkResult::Parent { .. }) => {}
            Err(e) => eprintln!("agent-sandbox: warning: cannot start the Slurm chaperon ({e}); Slurm is unavailable"),
        }
    }
}

fn child(listener: UnixListener, s: Session, launcher: nix::unistd::Pid) -> ! {
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::prctl(libc::PR_SET_NAME, c"asb-chaperon".as_ptr(), 0, 0, 0);
    }
    if nix::unistd::getppid() != launcher {
        std::process::exit(0);
    }
    // Its own process group: Ctrl-C on the user's terminal is the jail's business. Signals
    // unblocked: the launcher blocks them, and Slurm commands run from here inherit the mask.
    let _ = nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
    // Dispositions too: an ignored SIGINT would be inherited by srun and every command.
    for s in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGQUIT, nix::sys::signal::Signal::SIGPIPE] {
        // SAFETY: restoring the default disposition installs no handler.
        let _ = unsafe { nix::sys::signal::signal(s, nix::sys::signal::SigHandler::SigDfl) };
    }
    // One malloc arena: a thread per request would otherwise map (and unmap) a fresh 64 MiB
    // arena each, a fair part of the chaperon's per-call cost.
    // SAFETY: mallopt only changes allocator tuning.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    // Nothing of the launcher's but the socket: a pipe on its stdout must close when it exits.
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto our own stdio numbers; `null` stays open across the calls.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    let keep = listener.as_raw_fd();
    // SAFETY: close_range on this process's own descriptors above stdio, around `keep`.
    unsafe {
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, (keep - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
    }
    let log = s.log.clone();
    let cfg = chaperon::server::Config {
        uid: s.uid,
        user: s.user,
        home: s.home,
        session: s.session,
        project: s.project,
        state_dir: s.state_dir,
        exe: s.exe,
        policy: s.policy_json,
        slurm_bin: slurm_bin(),
        audit: Box::new(move |a| write_audit(&log, a)),
    };
    chaperon::server::serve(listener, std::sync::Arc::new(cfg));
    std::process::exit(0)
}

/// Where the real Slurm commands are: the directory of the first `sbatch` on the launcher's
/// PATH, else /usr/bin.
fn slurm_bin() -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(PathBuf::from)
        .find(|d| d.join("sbatch").is_file())
        .unwrap_or_else(|| PathBuf::from("/usr/bin"))
}

fn write_audit(log: &AuditLog, a: &chaperon::server::Audit) {
    let mut r = log.record("slurm");
    r.program = Some(a.command.clone());
    r.argv = redact(&a.argv);
    r.cwd = Some(a.cwd.clone());
    r.decision = Some(a.decision.clone());
    r.reason = a.reason.clone();
    r.job = a.job;
    r.script_bytes = a.script_bytes;
    r.script_hash = a.script_hash.clone();
    log.write(&r);
}

/// Argument lists are logged for Slurm calls, except values that may carry secrets (what
/// `--export` passes).
fn redact(argv: &[String]) -> Vec<String> {
    let mut out = vec![];
    let mut hide_next = false;
    for a in argv {
        if hide_next {
            out.push("…".into());
            hide_next = false;
        } else if let Some((k, _)) = a.split_once('=').filter(|(k, _)| k.starts_with("--export")) {
            out.push(format!("{k}=…"));
        } else {
            hide_next = a == "--export";
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn export_values_are_redacted() {
        let a: Vec<String> =
            ["--export=ALL,TOKEN=x", "--export", "A=b", "-J", "n"].iter().map(|s| s.to_string()).collect();
        assert_eq!(super::redact(&a), ["--export=…", "--export", "…", "-J", "n"]);
    }
}
