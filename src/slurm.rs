//! The launcher's side of Slurm: the session's chaperon socket (bound before the jail is
//! cloned, so the plan can bind it inside) and the chaperon process (this binary re-executed
//! as `agent-sandbox chaperon`, started when the first Slurm command connects).

use crate::audit::AuditLog;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The session's chaperon socket, bound and listening; nothing serves it until `spawn`.
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

/// What the chaperon process needs from the launcher, handed over in the environment of
/// the re-executed binary (`AGENT_SANDBOX_CHAPERON`, JSON).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Session {
    pub uid: u32,
    pub user: String,
    pub home: PathBuf,
    pub session: String,
    pub project: PathBuf,
    pub state_dir: PathBuf,
    pub exe: PathBuf,
    pub policy_json: String,
    /// The launcher's pid: the chaperon ends if its parent is not (or no longer) this one.
    pub launcher: i32,
}

pub const CONFIG_VAR: &str = "AGENT_SANDBOX_CHAPERON";

impl Session {
    /// For a chaperon of this process; `policy_json` may be left empty until it starts.
    pub fn new(facts: &crate::host::HostFacts, session: &str, project: &Path, policy_json: String) -> Session {
        Session {
            uid: facts.uid,
            user: facts.user.clone(),
            home: facts.home.clone(),
            session: session.to_string(),
            project: project.to_path_buf(),
            state_dir: facts.state_dir(),
            exe: facts.exe.clone(),
            policy_json,
            launcher: std::process::id() as i32,
        }
    }
}

impl Chaperon {
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.listener.as_raw_fd()
    }

    /// Starts the chaperon: this binary again (`agent-sandbox chaperon`), the listening
    /// socket as its stdin. Called when the first Slurm command connects: sessions that
    /// never use Slurm never pay for it. Works with the supervisor's threads running (spawn
    /// is exec, not a bare fork).
    pub fn spawn(&self, s: &Session) {
        let started = (|| -> std::io::Result<()> {
            let listener = std::os::fd::OwnedFd::from(self.listener.try_clone()?);
            let cfg = serde_json::to_string(s).map_err(std::io::Error::other)?;
            std::process::Command::new(&s.exe)
                .arg("chaperon")
                .env(CONFIG_VAR, cfg)
                .stdin(std::process::Stdio::from(listener))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()?;
            Ok(())
        })();
        if let Err(e) = started {
            eprintln!("agent-sandbox: warning: cannot start the Slurm chaperon ({e}); Slurm is unavailable");
        }
    }
}

/// `agent-sandbox chaperon`: serves the socket on stdin until the launcher dies.
pub fn chaperon_main() -> i32 {
    let Some(s) = std::env::var(CONFIG_VAR).ok().and_then(|c| serde_json::from_str::<Session>(&c).ok()) else {
        eprintln!("agent-sandbox chaperon: started without its configuration (internal command)");
        return 2;
    };
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::prctl(libc::PR_SET_NAME, c"asb-chaperon".as_ptr(), 0, 0, 0);
    }
    if nix::unistd::getppid().as_raw() != s.launcher {
        return 0;
    }
    // Its own process group: Ctrl-C on the user's terminal is the jail's business.
    let _ = nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
    for sig in [nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGQUIT] {
        // SAFETY: restoring the default disposition installs no handler.
        let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) };
    }
    // SAFETY: fd 0 is the listening socket the launcher passed as stdin; nothing else owns it.
    let listener = UnixListener::from(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(0) });
    let log = AuditLog::for_session(&s.state_dir, &s.session);
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
        cluster: std::sync::OnceLock::new(),
    };
    chaperon::server::serve(listener, std::sync::Arc::new(cfg));
    0
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
