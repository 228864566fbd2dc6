//! The jail: executes a `Plan`. Two backends: user namespaces (the full jail, `userns.rs`
//! and `init.rs`) and Landlock (the fallback for hosts without user namespaces,
//! `fallback.rs` and `landlock.rs`). Nothing here decides policy; if a value is missing, the
//! plan is missing a field.

pub mod agent_copies;
pub mod anchor;
pub mod blueprint;
pub mod caps;
mod command;
pub mod door;
mod fallback;
pub mod guard;
pub mod init;
pub mod landlock;
pub mod limits;
pub mod mounts;
mod msg;
mod net;
pub mod placeholders;
mod procpid;
pub mod relay;
pub mod seccomp;
pub mod userns;
pub mod waiter;

use crate::plan::{BackendKind, Plan};
use init::TtyFds;

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
    #[error("cannot copy the agent's file for the session: {0}")]
    AgentCopy(std::io::Error),
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

/// Outcome of the command, as the launcher will report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Exited(i32),
    Signaled(i32),
}

impl Outcome {
    pub fn code(self) -> i32 {
        match self {
            Outcome::Exited(c) => c,
            Outcome::Signaled(s) => 128 + s,
        }
    }
}

/// Starts what serves the descriptors the jail's init hands out for its network (tun0, the
/// proxies' listeners): given by the launcher, so the jail knows nothing of the supervisor.
pub type NetStart<'a> = &'a mut dyn FnMut(Vec<std::os::fd::OwnedFd>) -> std::io::Result<()>;

pub fn stdio_ttys() -> TtyFds {
    // SAFETY: isatty only inspects the descriptor number.
    TtyFds([0, 1, 2].map(|fd| unsafe { libc::isatty(fd) == 1 }))
}

/// Runs the plan's command in the jail and returns how it ended.
/// `early`: the jail's PID 1 if cloned before the plan was made (`userns::Early`).
/// `lock`: the project's session lock, taken before the plan was made (see `placeholders`).
pub fn run(
    plan: &Plan,
    early: Option<userns::Early>,
    banner: &dyn Fn(),
    mut lock: placeholders::ProjectLock,
    net_start: NetStart<'_>,
    lazy: Option<door::Lazy<'_>>,
    audit: &crate::audit::AuditLog,
) -> Result<Outcome, JailError> {
    if let Err(e) = placeholders::make_home_entries(&plan.home, &plan.home_dirs, &plan.home_files)
        .and_then(|()| lock.create(&plan.placeholders, &plan.anchors))
    {
        lock.abandon();
        return Err(e.into());
    }
    // Before anything of the jail runs: a launcher killed from here on is cleaned up after.
    lock.hand_to_waiter();
    if let Err(e) = agent_copies::prepare(&plan.merges) {
        lock.finish();
        return Err(JailError::AgentCopy(e));
    }
    let result = match plan.backend {
        BackendKind::Userns => userns::run(plan, early, banner, net_start, lazy, audit),
        BackendKind::Landlock => fallback::run(plan, banner, lazy),
    };
    // The jail is gone: nothing of it writes the copies any more.
    agent_copies::merge_back(&plan.merges);
    lock.finish();
    result
}

pub fn find_in_path(cmd: &str, env: &[(String, String)]) -> Option<std::path::PathBuf> {
    if cmd.contains('/') {
        return Some(cmd.into());
    }
    path_candidates(cmd, env)
        .into_iter()
        .find(|p| p.is_file() && nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::X_OK).is_ok())
}

/// The paths `find_in_path` tries for `cmd`, in its order (`cmd` itself when it has a slash).
pub fn path_candidates(cmd: &str, env: &[(String, String)]) -> Vec<std::path::PathBuf> {
    if cmd.contains('/') {
        return vec![cmd.into()];
    }
    let path = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or("/usr/bin:/bin");
    path.split(':').filter(|d| !d.is_empty()).map(|d| std::path::Path::new(d).join(cmd)).collect()
}

/// Gives the free pages of the heap back to the kernel: the launcher, the jail's init and the
/// cleanup waiter live as long as the session and hold what they built it with; what they
/// freed would otherwise stay resident in each of the hundreds of sessions a node may run.
pub fn trim_heap() {
    // SAFETY: malloc_trim only walks and releases the allocator's own free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Puts the calling thread last in line for the CPU (nice 19, still never starved): for the
/// work a session leaves after the user has their status back (the jail's init tearing
/// down its namespaces, the waiter's cleanup, tun0's teardown). On a login node, and on this
/// two-core VM, that work otherwise competes with the user's shell for the same cores and
/// delays its wake-up by the launcher's exit (0.3 ms of a `run -- true` here).
pub fn last_in_line() {
    // SAFETY: setpriority on the calling thread (who 0) reads and writes no memory; raising
    // one's own nice value needs no privilege, and a refusal only leaves it as it was.
    unsafe { libc::syscall(libc::SYS_setpriority, libc::PRIO_PROCESS, 0, 19) };
}

/// How long a session runs before its long-lived processes trim their heaps: `malloc_trim`
/// walks the whole heap (about a millisecond), which a short command must not wait for.
pub const TRIM_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// A heap trim due `TRIM_AFTER` from now, for a process's wait loop.
pub struct TrimLater(Option<std::time::Instant>);

impl TrimLater {
    pub fn new() -> TrimLater {
        TrimLater(Some(std::time::Instant::now() + TRIM_AFTER))
    }

    /// How long the loop may wait before the trim is due (None: it was done).
    pub fn wait(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        self.0.map(|due| due.saturating_duration_since(now))
    }

    /// Trims once, when due.
    pub fn run_if_due(&mut self, now: std::time::Instant) {
        if self.0.is_some_and(|due| now >= due) {
            trim_heap();
            self.0 = None;
        }
    }
}

impl Default for TrimLater {
    fn default() -> Self {
        TrimLater::new()
    }
}

#[cfg(test)]
mod tests {
    /// The thread that calls it, and only that one, runs at nice 19 from then on.
    #[test]
    fn last_in_line_puts_the_calling_thread_at_nice_19() {
        let nice = || {
            // SAFETY: getpriority of the calling thread reads no memory of ours.
            unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_PROCESS, 0) }
        };
        let before = nice();
        // The raw system call answers 20 - nice: 1 for nice 19.
        let after = std::thread::spawn(move || {
            super::last_in_line();
            nice()
        })
        .join()
        .unwrap();
        assert_eq!(after, 1);
        assert_eq!(nice(), before, "another thread's priority changed");
    }
}
