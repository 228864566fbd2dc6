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
mod dotenv;
mod fallback;
pub mod guard;
pub mod init;
pub mod landlock;
pub mod limits;
pub mod links;
pub mod mounts;
mod msg;
mod net;
mod opencode_db;
pub mod placeholders;
mod procpid;
mod project_restore;
pub mod relay;
pub mod running;
pub mod seccomp;
mod session_homes;
pub mod signals;
#[cfg(test)]
pub(crate) mod test_fork;
pub mod userns;
pub mod waiter;

use crate::plan::{BackendKind, Plan};
use signals::TtyFds;

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("cannot create the jail's namespaces ({flags}): {errno}")]
    Clone { errno: nix::Error, flags: String },
    #[error("cannot write the jail's {file}: {err}")]
    IdMap { file: String, err: std::io::Error },
    #[error("cannot build the jail: {0}")]
    Build(String),
    /// As `Build`, for a path of the host the plan checked that is no longer what it checked
    /// (`anchor::Changed`): nothing of the jail ran, and a new plan may find it as it is now.
    #[error("cannot build the jail: {0}")]
    Changed(String),
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
    /// Something of the host the plan checked changed before the jail was built: a new plan
    /// may be made (`launch::session`).
    pub fn changed_since_the_plan(&self) -> bool {
        match self {
            JailError::Changed(_) => true,
            JailError::Placeholder(e) => e.changed(),
            JailError::Landlock(landlock::LandlockError::Path { source, .. }) => anchor::is_changed(source),
            _ => false,
        }
    }

    pub fn fix(&self) -> Option<String> {
        match self {
            JailError::Clone { errno: nix::Error::EPERM | nix::Error::ENOSPC | nix::Error::EINVAL, .. } => Some(
                "fix: unprivileged user namespaces are off or exhausted here; `agent-sandbox doctor` says which knob, or run with --backend landlock".into(),
            ),
            JailError::IdMap { .. } => Some("fix: the kernel refused the id map; `agent-sandbox doctor` checks user namespace support".into()),
            JailError::Build(_) | JailError::Changed(_) => Some("fix: `agent-sandbox run --dry-run -- CMD` shows the mounts; `agent-sandbox doctor` checks the host".into()),
            JailError::Placeholder(e) => e.fix(),
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

/// What the launcher does at two moments of the jail's start: once PID 1 has its plan and
/// builds the root (the start's audit record, written meanwhile: on a network home its round
/// trips overlap the build), and once the jail is ready (the banner).
pub struct Moments<'a> {
    pub building: &'a dyn Fn(),
    pub ready: &'a dyn Fn(),
}

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
    moments: &Moments<'_>,
    mut lock: placeholders::ProjectLock,
    net_start: NetStart<'_>,
    lazy: Option<door::Lazy<'_>>,
    audit: &crate::audit::AuditLog,
) -> Result<Outcome, JailError> {
    // What the launcher makes now, anchored as made: the jail holds its binds and rules to
    // those inodes as to the ones the plan checked.
    let made = placeholders::make_home_entries(&plan.home_real, &plan.home_dirs, &plan.home_files).and_then(|mut a| {
        a.extend(placeholders::make_home_texts(&plan.home_real, &plan.home_texts)?);
        a.extend(lock.create(&plan.placeholders, &plan.anchors)?);
        Ok(a)
    });
    let made = match made {
        Ok(made) => made,
        Err(e) => {
            lock.abandon();
            return Err(e.into());
        }
    };
    // The plan's anchors with what was made; the plan itself is not copied for that, which
    // would hold a second plan through the whole session (issue 35).
    let with_made: Vec<crate::plan::anchor::Anchor>;
    let anchors: &[crate::plan::anchor::Anchor] = match made.is_empty() {
        true => &plan.anchors,
        false => {
            let mut a: Vec<_> =
                plan.anchors.iter().filter(|a| !made.iter().any(|m| m.path == a.path)).cloned().collect();
            a.extend(made);
            with_made = a;
            &with_made
        }
    };
    crate::timing::mark("made");
    crate::test_pause::pause_for_test("made");
    // Before anything of the jail runs: a launcher killed from here on is cleaned up after.
    lock.hand_to_waiter();
    if let Err(e) = session_homes::make(&plan.session_homes).and_then(|()| agent_copies::prepare(&plan.merges)) {
        session_homes::remove(&plan.session_homes);
        lock.finish();
        return Err(JailError::AgentCopy(e));
    }
    // Landlock: what the protected paths hold now, put back after the session.
    let snapshot = plan.restore.as_ref().map(|r| {
        let (s, warnings) = project_restore::take(r);
        warnings.iter().for_each(|w| eprintln!("agent-sandbox: warning: {w}"));
        s
    });
    // The project's `.env`, which aider and Gemini CLI load outside: checked after.
    let (dotenv, warnings) = dotenv::take(&dotenv::paths(&plan.project, &plan.cwd), &plan.rejected);
    warnings.iter().for_each(|w| eprintln!("agent-sandbox: warning: {w}"));
    // opencode's saved approvals, which opencode started outside obeys: checked after.
    let opencode = opencode_db::writable_in(plan).and_then(|db| {
        let (s, warning) = opencode_db::take(&db);
        warning.iter().for_each(|w| eprintln!("agent-sandbox: warning: {w}"));
        s
    });
    crate::timing::mark("taken");
    let started = links::start_stamp();
    let (result, heard) = match plan.backend {
        BackendKind::Userns => match userns::run(plan, anchors, early, moments, net_start, lazy, audit) {
            Ok((outcome, heard)) => (Ok(outcome), heard),
            Err(e) => (Err(e), links::Heard::default()),
        },
        BackendKind::Landlock => (fallback::run(plan, anchors, moments, lazy), links::Heard::default()),
    };
    // Every process of the jail is gone: the links it left where something outside follows
    // them are removed (under Landlock the only check; under userns the guard's second, left
    // out after a session that made none while no other session ran: `links::sweep`).
    // Among the user's sessions running since the lock was taken (`running`).
    let alone = lock.ran_alone();
    let (swept, stopped) = links::sweep(&plan.links, started, heard.none_made() && alone);
    links::report(&swept, stopped, audit);
    dotenv::report(&dotenv::restore(&dotenv), audit);
    if let Some(s) = &opencode {
        opencode_db::report(s.path(), &opencode_db::restore(s), audit);
    }
    if let Some(s) = &snapshot {
        let (done, failed) = project_restore::restore(s, &plan.project, &lock.recorded());
        project_restore::report(s, &plan.project, &done, &failed, audit);
    }
    // The jail is gone: nothing of it writes the copies any more.
    agent_copies::merge_back(&plan.merges);
    session_homes::remove(&plan.session_homes);
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
