//! The launcher's side of Slurm: the session's door to the chaperon and the chaperon process
//! (this binary re-executed as `agent-sandbox chaperon`, started when the first Slurm command
//! knocks). The door is a socket bound before the jail is cloned, so the plan can bind it
//! inside (userns backend), or a socket pair whose other end the command inherits (Landlock
//! backend: nothing can be bound into that jail, and it may not create unix sockets).

use crate::audit::AuditLog;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The session's door to its chaperon; nothing serves it until `spawn`.
pub struct Chaperon {
    /// The bound socket's path (userns backend).
    pub socket: Option<PathBuf>,
    /// What the chaperon serves: the listening socket, or the launcher's end of the channel;
    /// the launcher's wait loop owns it once the jail runs (`take_door`).
    door: std::cell::Cell<Option<OwnedFd>>,
    /// The jail's end of the channel (Landlock backend), until the command inherits it.
    jail_end: std::cell::Cell<Option<OwnedFd>>,
}

/// Binds `<dir>/<session>.sock` (0600 in a 0700 directory: `HostFacts::sockets_dir`). A
/// stale socket of a dead session with the same id is replaced.
pub fn bind(dir: &Path, session: &str) -> std::io::Result<Chaperon> {
    agent_sandbox_sys::file::make_dir(dir, 0o700)?;
    let socket = dir.join(format!("{session}.sock"));
    let _ = std::fs::remove_file(&socket);
    // Through the directory's descriptor where the path passes `sun_path` (a deep home).
    let listener = UnixListener::bind(agent_sandbox_sys::socket_path::short(&socket)?.path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(Chaperon { socket: Some(socket), door: Some(OwnedFd::from(listener)).into(), jail_end: None.into() })
}

/// A seqpacket socket pair: the command inherits one end, and each Slurm stub sends the
/// chaperon one end of a fresh stream pair of its own over it (one message, one descriptor),
/// then talks the wire protocol over the other. Only what the jail already holds is reachable
/// that way: no path, no new socket.
pub fn channel() -> std::io::Result<Chaperon> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (door, jail) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)?;
    Ok(Chaperon { socket: None, door: Some(door).into(), jail_end: Some(jail).into() })
}

/// What the chaperon process needs from the launcher, handed over in the environment of
/// the re-executed binary (`AGENT_SANDBOX_CHAPERON`, JSON): the session's hand-off, which the
/// chaperon keeps as its `Config::who`, and how the chaperon is to watch its launcher.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Session {
    /// Whose session it is and where; its policy is None until the session first uses Slurm
    /// (the launcher freezes it then), a job's own on a compute node.
    pub who: chaperon::session::Handoff,
    /// The launcher's pid: the chaperon ends if its parent is not (or no longer) this one.
    pub launcher: i32,
    /// What stdin is: the Landlock backend's channel (true) or a listening socket.
    #[serde(default)]
    pub channel: bool,
    /// Variables of the launcher's environment the chaperon is not given: the API keys the
    /// supervisor keeps outside the jail (the chaperon needs none).
    #[serde(skip)]
    pub withheld: Vec<String>,
}

pub const CONFIG_VAR: &str = "AGENT_SANDBOX_CHAPERON";

impl Session {
    /// For a chaperon of this process.
    pub fn new(
        facts: &crate::host::HostFacts,
        session: &str,
        project: &Path,
        frozen: Option<crate::policy::Frozen>,
    ) -> Session {
        let who = chaperon::session::Handoff {
            uid: facts.uid,
            user: facts.user.clone(),
            home: facts.home.clone(),
            session: session.to_string(),
            project: project.to_path_buf(),
            state_dir: facts.state_dir(),
            exe: facts.exe.clone(),
            policy: frozen.map(|f| f.text().to_string()),
            governor: chaperon::governor::Settings::default(),
            project_id: chaperon::job::ProjectId::of(project).ok(),
        };
        Session { who, launcher: std::process::id() as i32, channel: false, withheld: vec![] }
    }
}

impl Chaperon {
    /// The door, for the wait loop that starts the chaperon on it (once).
    pub fn take_door(&self) -> Option<OwnedFd> {
        self.door.take()
    }

    /// The jail's end of the channel, for the command to inherit (once).
    pub fn take_jail_end(&self) -> Option<OwnedFd> {
        self.jail_end.take()
    }

    /// Starts the chaperon: this binary again (`agent-sandbox chaperon`), the door as its
    /// stdin. Called when the first Slurm command knocks: sessions that never use Slurm never
    /// pay for it. Works with the supervisor's threads running (spawn is exec, not a bare fork).
    /// Its pid, or None (with a warning) if it could not be started.
    pub fn spawn(&self, door: BorrowedFd<'_>, s: &Session) -> Option<nix::unistd::Pid> {
        let started = (|| -> std::io::Result<u32> {
            let door = door.try_clone_to_owned()?;
            let mut cfg = serde_json::to_value(s).map_err(std::io::Error::other)?;
            cfg["channel"] = serde_json::Value::Bool(self.socket.is_none());
            let mut cmd = std::process::Command::new(&s.who.exe);
            for k in &s.withheld {
                cmd.env_remove(k);
            }
            let child = cmd
                .arg("chaperon")
                .env(CONFIG_VAR, cfg.to_string())
                .stdin(std::process::Stdio::from(door))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()?;
            Ok(child.id())
        })();
        match started {
            Ok(pid) => Some(nix::unistd::Pid::from_raw(pid as i32)),
            Err(e) => {
                eprintln!("agent-sandbox: warning: cannot start the Slurm chaperon ({e}); Slurm is unavailable");
                None
            }
        }
    }
}

/// `agent-sandbox chaperon`: serves the door on stdin until the launcher dies (or, for the
/// Landlock backend's channel, until no process of the session holds the other end).
pub fn chaperon_main() -> i32 {
    let Some(s) = std::env::var(CONFIG_VAR).ok().and_then(|c| serde_json::from_str::<Session>(&c).ok()) else {
        eprintln!("agent-sandbox chaperon: started without its configuration (internal command)");
        return 2;
    };
    let _ = agent_sandbox_sys::process::die_with_parent(libc::SIGKILL);
    let _ = agent_sandbox_sys::process::set_name(c"asb-chaperon");
    if nix::unistd::getppid().as_raw() != s.launcher {
        return 0;
    }
    // Its own process group: Ctrl-C on the user's terminal is the jail's business.
    let _ = nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
    agent_sandbox_sys::signal::set_default(&[libc::SIGINT, libc::SIGQUIT]);
    // SAFETY: fd 0 is the door the launcher passed as stdin; nothing else owns it.
    let door = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(0) };
    let (channel, launcher) = (s.channel, s.launcher);
    // Eager: the chaperon is killed with its launcher, and what it left out must be counted.
    let log = AuditLog::for_session(&s.who.state_dir, &s.who.session).eager();
    let events = chaperon::scope::Registry::new(&s.who.state_dir).events(&s.who.project);
    let governor = chaperon::governor::Governor::new(s.who.governor, Some(events));
    let cfg = chaperon::session::Config {
        who: s.who,
        slurm_bin: slurm_bin(),
        audit: Box::new(move |a| write_audit(&log, a)),
        cluster: Default::default(),
        governor,
        spank: std::sync::OnceLock::new(),
        key: std::sync::OnceLock::new(),
        release: Default::default(),
    };
    let cfg = std::sync::Arc::new(cfg);
    // The installed release, learned beside the session's start rather than on its first call.
    let learning = cfg.clone();
    let _ = std::thread::Builder::new().name("slurm-release".into()).spawn(move || learning.release());
    if channel {
        if chaperon::server::serve_channel(door, cfg, launcher) == chaperon::server::ChannelEnd::Flooded {
            return crate::jail::door::CLOSED_FOR_GOOD;
        }
    } else {
        chaperon::server::serve(UnixListener::from(door), cfg);
    }
    0
}

/// What asks Slurm the supervisor's and doctor's own questions (`chaperon::nodes`), as `user`.
pub fn asker(home: &Path, user: &str) -> chaperon::nodes::Asker {
    chaperon::nodes::Asker { bin: slurm_bin(), home: home.to_path_buf(), user: user.to_string() }
}

/// The cleanup waiter's task (`jail::waiter::Task`, by this name) that cancels the allocations a
/// session's chaperon left pending: the salloc it ran died with the launcher while Slurm was
/// still granting them. Its arguments: the state directory and the launcher's pid the notes are
/// filed under (`cancel_left_args`).
pub const CANCEL_LEFT: &str = "slurm-cancel-left";

/// The arguments of `CANCEL_LEFT` for this launcher's session.
pub fn cancel_left_args(state_dir: &Path) -> Vec<Vec<u8>> {
    vec![state_dir.as_os_str().as_encoded_bytes().to_vec(), std::process::id().to_string().into_bytes()]
}

/// The work of `CANCEL_LEFT` (ignores arguments of another shape: nothing to cancel).
pub fn cancel_left(args: &[Vec<u8>]) {
    use std::os::unix::ffi::OsStrExt;
    let [state, launcher] = args else { return };
    let Some(launcher) = std::str::from_utf8(launcher).ok().and_then(|p| p.parse::<i32>().ok()) else { return };
    let state = Path::new(std::ffi::OsStr::from_bytes(state));
    chaperon::commands::salloc::cancel_left(state, &slurm_bin().join("scancel"), launcher);
}

/// Where the real Slurm commands are: the directory of the first `sbatch` on the launcher's
/// PATH that only root can change (root-owned, not group- or world-writable, and so is the
/// `sbatch` in it), else /usr/bin. A directory the user can write (a project's `.venv/bin`,
/// `~/bin`) is skipped: the jail may have written programs there, and the chaperon and the
/// supervisor run these outside the jail.
pub fn slurm_bin() -> PathBuf {
    // Asked several times while a session starts (each lookup stats the PATH's directories);
    // the launcher's PATH does not change meanwhile.
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FOUND.get_or_init(|| slurm_bin_in(&std::env::var("PATH").unwrap_or_default())).clone()
}

fn slurm_bin_in(path: &str) -> PathBuf {
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(PathBuf::from)
        .find(|d| only_root_changes(d) && only_root_changes(&d.join("sbatch")) && d.join("sbatch").is_file())
        .unwrap_or_else(|| PathBuf::from("/usr/bin"))
}

/// Owned by root and writable by no one else (following symlinks, as exec does).
fn only_root_changes(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0)
}

fn write_audit(log: &AuditLog, a: &chaperon::session::Audit) {
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
    use super::*;

    #[test]
    fn a_slurm_directory_others_can_write_is_never_taken() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("bin");
        std::fs::create_dir(&fake).unwrap();
        std::fs::write(fake.join("sbatch"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o777)).unwrap();
        let path = format!("{}:/usr/bin", fake.display());
        assert_eq!(slurm_bin_in(&path), PathBuf::from("/usr/bin"), "a world-writable directory");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Owned by whoever runs the test: taken only when that is root.
        let root = nix::unistd::geteuid().is_root();
        assert_eq!(slurm_bin_in(&path) == fake, root, "a 0755 directory of the test's user");
        if root {
            std::os::unix::fs::chown(&fake, Some(65534), None).unwrap();
            assert_eq!(slurm_bin_in(&path), PathBuf::from("/usr/bin"), "a directory another user owns");
        }
    }

    #[test]
    fn export_values_are_redacted() {
        let a: Vec<String> =
            ["--export=ALL,TOKEN=x", "--export", "A=b", "-J", "n"].iter().map(|s| s.to_string()).collect();
        assert_eq!(super::redact(&a), ["--export=…", "--export", "…", "-J", "n"]);
    }
}
