//! Plan: a pure function from the effective policy and host facts to what the jail will do
//! (mounts in order, environment, network mode, seccomp set, backend). Nothing here touches
//! the system; `--dry-run` and `policy show` print this value, and the jail only executes it.

pub mod agent_home;
pub mod ahead;
pub mod anchor;
mod backend;
pub mod catalogue;
pub mod credentials;
pub mod env;
pub mod fs;
pub mod gitstrip;
pub mod groups;
mod hiding;
pub mod instructions;
mod landlock;
mod mounts;
pub mod nested;
mod net;
pub mod os_path;
pub mod outside_names;
mod project;
pub mod runs_outside;
pub mod token_files;

pub use fs::MountSpec;
pub use hiding::report as credentials_report;

use crate::host::{HostFacts, HostFs, Kind};
use crate::policy::merge::Source;
use crate::policy::{expand_tilde, Backend, Fallback, HomeAccess, NetMode, Policy};
pub use backend::choose_backend;
use backend::git_guard;
use fs::{Builder, Hidden};
use landlock::{landlock_plan, landlock_session, StoresAround};
use mounts::*;
pub use net::net_available;
use net::{choose_net, net_rules};
use project::{check_extra_path, check_project};
pub use project::{check_project_basics, project_basics};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Userns,
    Landlock,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Userns => "userns",
            BackendKind::Landlock => "landlock",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct NetPlan {
    pub requested: NetMode,
    /// The one place the network mode is decided; what it means for each part is below.
    pub effective: NetMode,
    /// What the jail makes in its network namespace: the jail reads only this.
    pub jail: JailNet,
    /// Destination rules (net.block, net.allow), as written, checked at plan time.
    pub rules: Vec<(String, crate::netrules::matcher::Action, crate::netrules::matcher::Layer)>,
    /// The same rules parsed into the matcher, with the host's addresses as a floor: for the
    /// modes with a supervisor (`filtered`, `proxied`), which enforces them.
    #[serde(skip)]
    pub matcher: Option<crate::netrules::matcher::RuleSet>,
    /// Set when the requested mode could not run and the fallback rule chose another.
    pub fallback: Option<String>,
    /// Where the jail's DNS goes (filtered mode): the policy's resolvers or the host's.
    pub upstreams: Vec<std::net::SocketAddr>,
    /// Flows to these ports are matched on their TLS SNI / HTTP Host.
    pub hostname_ports: Vec<u16>,
    /// Host loopback ports reachable through the gateway address.
    pub host_ports: Vec<u16>,
    /// Jail ports published on host loopback.
    pub publish: Vec<u16>,
    /// Jail ports served to the project's jobs, with the listening address (`--job-port`).
    pub job_endpoints: Vec<(u16, std::net::SocketAddr)>,
    /// The login node's job services a job's network may reach (compute node).
    pub job_services: Vec<std::net::SocketAddr>,
    /// The secret the job proves to them, and every jail of the session to the others;
    /// never printed.
    #[serde(skip)]
    pub job_secret: Option<crate::secret::Secret>,
    /// This jail's place on its session's network (`net::cluster::peers`), when it is on one.
    pub peer: Option<PeerPlan>,
    /// RFC 1918 / CGNAT / ULA floored.
    pub deny_private: bool,
    /// API keys kept outside the jail, added by the supervisor (`credentials.rs`).
    pub credentials: Vec<credentials::CredentialRoute>,
    /// The administrator's net.allow (None if the admin set none): what `agent-sandbox allow`
    /// may grant is bounded by it as the user's own net.allow is.
    pub grant_bound: Option<Vec<String>>,
}

impl NetPlan {
    /// The jail's IPv4 address on tun0: its own on the session network, else the fixed one.
    pub fn jail_address(&self) -> std::net::Ipv4Addr {
        self.peer.as_ref().map(|p| p.address).unwrap_or(crate::netrules::addr::JAIL_V4)
    }

    /// tun0's address, where the jail has a tun0.
    pub fn tun_address(&self) -> Option<std::net::Ipv4Addr> {
        (self.jail == JailNet::Tun).then(|| self.jail_address())
    }

    /// A plan of `mode` with nothing else in it, for unit tests of the parts that read one.
    #[cfg(test)]
    pub fn bare(mode: NetMode) -> NetPlan {
        NetPlan {
            requested: mode,
            effective: mode,
            jail: JailNet::of(mode),
            rules: vec![],
            matcher: None,
            fallback: None,
            upstreams: vec![],
            hostname_ports: vec![],
            host_ports: vec![],
            publish: vec![],
            job_endpoints: vec![],
            job_services: vec![],
            job_secret: None,
            peer: None,
            deny_private: false,
            credentials: vec![],
            grant_bound: None,
        }
    }
}

/// The jail's side of a network mode: what its init makes and hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum JailNet {
    /// The host's network namespace (`open`).
    Host,
    /// A network namespace with only `lo` (`isolated`).
    Loopback,
    /// `lo` and `tun0`, whose descriptor goes to the supervisor (`filtered`).
    Tun,
    /// `lo` with the proxies' listening sockets, which go to the supervisor (`proxied`).
    Proxies,
}

impl JailNet {
    pub fn of(mode: NetMode) -> JailNet {
        match mode {
            NetMode::Open => JailNet::Host,
            NetMode::Isolated => JailNet::Loopback,
            NetMode::Filtered => JailNet::Tun,
            NetMode::Proxied => JailNet::Proxies,
        }
    }

    pub fn new_namespace(self) -> bool {
        self != JailNet::Host
    }

    /// The descriptors the jail's init hands out for the supervisor.
    pub fn handed_out(self) -> usize {
        match self {
            JailNet::Host | JailNet::Loopback => 0,
            JailNet::Tun => 1,
            JailNet::Proxies => 2,
        }
    }
}

/// Ports whose flows show a name (TLS SNI on 443, HTTP Host on 80).
pub const HOSTNAME_PORTS: [u16; 2] = [80, 443];

#[derive(Debug, Clone, Serialize)]
pub struct SeccompPlan {
    /// `process.nested_userns`: the command may create user namespaces.
    pub nested_userns: bool,
    /// And, inside them, mount what a nested sandbox (bubblewrap) needs: the userns backend
    /// only (Landlock refuses every mount).
    pub nested_mounts: bool,
    /// Landlock backend only: `socket(AF_UNIX)` allowed (`process.unix_sockets`).
    pub unix_sockets: bool,
    /// Where Landlock's TCP port rules are the network boundary (its backend): inet sockets
    /// only as plain TCP, UDP and ICMP, no TCP Fast Open.
    pub tcp_udp_icmp_only: bool,
    /// Where the jail shares the host's PID namespace (Landlock): calls that take a pid act
    /// on the caller only.
    pub own_process_only: bool,
}

/// The git guard (`jail::guard`): the trees in which no git repository may be made and the
/// config and hooks of those there stay read-only. None: off (`filesystem.nested_git`, or
/// the Landlock backend, which cannot protect paths inside the project at all).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct GitGuardPlan {
    /// The project first, then the extra writable paths (`filesystem.write`, `--rw`).
    #[serde(with = "os_path::vec")]
    pub roots: Vec<PathBuf>,
    /// Where a symlink the jail makes is judged (the plan's `links`).
    #[serde(default)]
    pub links: LinkPlan,
}

/// The places a symlink is judged in (`jail::links`): by the git guard as it is made, and
/// after the session, as the host names them (the jail binds them at the same paths).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct LinkPlan {
    /// The agent's state entries that are directories (bound writable from the host): a link
    /// there leads inside its entry only.
    #[serde(with = "os_path::vec")]
    pub state: Vec<PathBuf>,
    /// What the jail does not see (the policy's hidden paths, the catalogue's stores, the
    /// state directory): no link the jail makes leads there.
    #[serde(with = "os_path::vec")]
    pub hidden: Vec<PathBuf>,
    /// The trees the jail writes that outlive it (the project first). The exit sweep walks
    /// them whether or not the git guard judged each link as it was made: a link made later
    /// can change where an earlier one leads (about 0.6 ms per 1000 entries at exit).
    #[serde(with = "os_path::vec")]
    pub trees: Vec<PathBuf>,
    /// The state entries and trees whose names are not where they are on the host (bound from
    /// where a symlink leads: `~/.cache -> /scratch/u/cache`): a link's `..` climbs from the
    /// real directory there, as a tool outside follows it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub real: Vec<RealRoot>,
}

/// A root of `LinkPlan` the jail sees at `name`, on the host at `real`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RealRoot {
    #[serde(with = "os_path")]
    pub name: PathBuf,
    #[serde(with = "os_path")]
    pub real: PathBuf,
}

/// The roots among `roots` whose canonical path is not their name.
fn real_roots(fs: &dyn HostFs, roots: &[&PathBuf]) -> Vec<RealRoot> {
    roots
        .iter()
        .filter_map(|name| {
            fs.canonicalize(name).filter(|real| real != *name).map(|real| RealRoot { name: name.to_path_buf(), real })
        })
        .collect()
}

/// The Landlock backend: no mounts, so the mount list becomes path rules, and what the
/// userns jail gets from its own `/tmp`, `/run/agent-sandbox` and PID 1 comes from a
/// per-session directory on the host and a helper process.
#[derive(Debug, Clone, Serialize)]
pub struct LandlockPlan {
    /// Read and execute beneath these.
    pub read_only: Vec<PathBuf>,
    /// Full access beneath these.
    pub read_write: Vec<PathBuf>,
    /// The host's shared `/tmp`, `/var/tmp`, `/dev/shm` (those the policy does not bind
    /// itself): in no rule, so EACCES inside; the session directory's `tmp` replaces them.
    pub denied_shared: Vec<PathBuf>,
    pub deny_tcp_connect: Vec<u16>,
    pub deny_all_tcp: bool,
    pub session: SessionDir,
    /// How what the command leaves running is ended when it exits.
    pub sweep: Sweep,
    /// The descriptor at which the command inherits its end of the chaperon's channel
    /// (named in `AGENT_SANDBOX_SLURM_FD`); None without a chaperon. A keeper process of the
    /// session holds the same descriptor too, open to `pidfd_getfd` from the session: the
    /// executor puts its pid in `AGENT_SANDBOX_SLURM_KEEPER`, so that a stub whose parent
    /// closed the descriptor (Python's subprocess does) still finds the channel.
    pub slurm_fd: Option<i32>,
}

/// The session's own directory on the host, `<base>/PID-SESSION` (the launcher's pid: a
/// later start removes the directories of launchers that are gone). Created 0700 before the
/// command starts, removed when the session ends.
#[derive(Debug, Clone, Serialize)]
pub struct SessionDir {
    /// Where every session's directory lives: `$XDG_RUNTIME_DIR/agent-sandbox/landlock` when
    /// that is private to the user, else `<state dir>/landlock`.
    pub base: PathBuf,
    /// `base/<host id>-<launcher pid>-<session>`.
    pub path: PathBuf,
    /// The name part of this host and PID namespace: a leftover directory is swept only by a
    /// launcher of the same host and namespace, where its pid means something.
    pub host: String,
    /// `path/tmp`, read-write and empty at start: `TMPDIR`, `TMP` and `TEMP` name it.
    pub tmp: PathBuf,
    /// `path/bin`, read-only, first on `PATH`: a link to `exe` under every stub's name.
    pub bin: PathBuf,
    pub exe: PathBuf,
    pub stubs: Vec<String>,
    /// Read-only files the userns jail would see under `/run/agent-sandbox` (a job's script),
    /// written to `path/run` instead; the command names them there.
    pub files: Vec<(PathBuf, String)>,
}

/// How the Landlock backend ends what the command left running (the userns jail's PID 1
/// does it there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sweep {
    /// A helper forked into the session's Landlock domain, before the command went on into a
    /// nested one it cannot signal out of, calls `kill(-1)` when the command exits: with
    /// signal scoping (ABI 6+) that reaches every process of the session and no other, and
    /// no fork outruns it.
    ScopedKill,
    /// The launcher (a child subreaper) walks `/proc` for its descendants (ABI < 6): a process
    /// that re-forks faster than the walk can outlive the session.
    ProcWalk,
}

pub use crate::stub::slurm::{SLURM_FD, SLURM_FD_VAR, SLURM_KEEPER_VAR};

/// A path the launcher creates empty before the session so that a protected name cannot be
/// created writable inside; removed afterwards if it is still empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placeholder {
    pub path: PathBuf,
    pub dir: bool,
    /// A file made holding `{}` (an agent stops at an empty JSON file), removed afterwards if
    /// it still holds only that.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub json: bool,
}

/// The session's limits, and what enforces them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LimitsPlan {
    /// Bytes of each process's data and heap.
    pub mem: Option<u64>,
    pub cpus: Option<u32>,
    pub pids: Option<u64>,
    /// Seconds of wall-clock time.
    pub timeout: Option<u64>,
    /// `rlimits` (what runs here: no delegated cgroup v2 is used yet). Not in the jail's
    /// blueprint: PID 1 applies the limits, whatever their name.
    #[serde(skip_deserializing)]
    pub by: &'static str,
}

impl LimitsPlan {
    /// One line for the banner and `--json-status`: `none` or `mem 512M, pids 64 (rlimits)`.
    pub fn summary(&self) -> String {
        let mut parts = vec![];
        if let Some(m) = self.mem {
            parts.push(format!("mem {}M", m >> 20));
        }
        if let Some(c) = self.cpus {
            parts.push(format!("cpus {c} (affinity)"));
        }
        if let Some(p) = self.pids {
            parts.push(format!("pids {p}"));
        }
        if let Some(t) = self.timeout {
            parts.push(format!("timeout {t}s"));
        }
        match parts.is_empty() {
            true => "none".into(),
            false => format!("{} ({})", parts.join(", "), self.by),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub backend: BackendKind,
    pub command: Vec<String>,
    pub project: PathBuf,
    pub cwd: PathBuf,
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub home: PathBuf,
    pub home_access: HomeAccess,
    pub hostname: String,
    pub mounts: Vec<MountSpec>,
    /// What the plan checked of the paths it binds or grants, which the jail holds them to
    /// (`anchor`).
    #[serde(skip)]
    pub anchors: Vec<anchor::Anchor>,
    /// The launcher's own trees (the state directory, the Landlock session's directory),
    /// which no jail writes: what it made there after the plan is used by name.
    #[serde(skip)]
    pub own: Vec<PathBuf>,
    /// Where each of `home_dirs` and `home_files` is made (`anchor::home_entries`).
    #[serde(skip)]
    pub home_real: Vec<(PathBuf, PathBuf)>,
    pub placeholders: Vec<Placeholder>,
    /// Directories of the agent's own the launcher makes in the home before the session
    /// (its writable entries that do not exist yet, so what it writes there persists).
    pub home_dirs: Vec<PathBuf>,
    /// Files of the agent's own made in the home holding `{}` (`~/.claude.json`).
    pub home_files: Vec<PathBuf>,
    /// Files made in the home holding this text, if missing (Gemini CLI's `.project_root`).
    pub home_texts: Vec<(PathBuf, String)>,
    /// Files of the agent's own the jail gets as copies, whose harmless keys go back at exit
    /// (`agent_home`).
    pub merges: Vec<agent_home::MergeBack>,
    /// Landlock backend: the session directories the agent is pointed at instead of its own
    /// (`agent_home::landlock`), made before the session and removed after it.
    pub session_homes: Vec<agent_home::landlock::SessionHome>,
    /// Landlock backend: the protected paths read before the session and put back after it
    /// (`jail::project_restore`), which it cannot make read-only inside the project.
    pub restore: Option<ProjectRestore>,
    pub hidden: Vec<PathBuf>,
    /// The credential catalogue's stores: hidden, shown (and why), and the user's git configs
    /// shown without their credentials.
    pub credentials: catalogue::CredentialsPlan,
    pub env: Vec<(String, String)>,
    /// The launcher's variables the jail does not get, each with the rule (never a value).
    pub env_removed: Vec<env::Scrubbed>,
    pub net: NetPlan,
    pub seccomp: SeccompPlan,
    pub landlock: Option<LandlockPlan>,
    pub git_guard: Option<GitGuardPlan>,
    /// Where a symlink the jail makes is judged (`jail::links`).
    pub links: LinkPlan,
    /// Where the jail's versions of what is put back at exit are kept (the state
    /// directory's, per session): a `.env` it added an agent's control variable to
    /// (`jail::dotenv`).
    pub rejected: PathBuf,
    /// The token configs shown without their tokens (or left out), where they really are:
    /// recorded in the state directory, so that the next sessions still strip one whose name
    /// a session removed (`host::configs::STRIPPED_RECORD`).
    #[serde(skip)]
    pub stripped_configs: Vec<PathBuf>,
    pub limits: LimitsPlan,
    /// The user's supplementary groups in the userns jail (the Landlock backend's processes
    /// keep the host's view of them).
    pub groups: groups::GroupsPlan,
    /// How the chaperon spares the scheduler (`[slurm]`).
    pub slurm: chaperon::governor::Settings,
    pub warnings: Vec<String>,
}

/// The protected paths the Landlock backend puts back at exit, and where the jail's versions
/// of them are kept (the state directory's, per session).
#[derive(Debug, Clone, Serialize)]
pub struct ProjectRestore {
    pub paths: Vec<PathBuf>,
    pub aside: PathBuf,
}

/// What the user asked for on this invocation, besides policy.
pub struct RunRequest {
    pub command: Vec<String>,
    pub project: PathBuf,
    pub cwd: PathBuf,
    /// The session id (audit log), given to the jail as AGENT_SANDBOX_SESSION.
    pub session: String,
    /// The chaperon's socket on the host, seen inside at `/run/agent-sandbox/chaperon.sock`
    /// (userns backend).
    pub chaperon_socket: Option<PathBuf>,
    /// The command inherits one end of the chaperon's channel (Landlock backend, which cannot
    /// bind a socket into the jail).
    pub chaperon_channel: bool,
    /// Extra read-only files under `/run/agent-sandbox` (target, contents): a job's script,
    /// which the launcher read through a descriptor opened without following symlinks.
    pub extra_files: Vec<(PathBuf, String)>,
    /// The variables the jail's environment starts from, before the scrub: None for the
    /// launcher's own; a job's `--export` set on a compute node. Only the jail reads these:
    /// every host-side path still comes from the launcher's environment (`HostFacts`).
    pub env: Option<Vec<(String, String)>>,
    /// The session's job services: each jail port (`--job-port`) and the address the launcher
    /// bound for it on the cluster-facing side; the jail learns them as AGENT_SANDBOX_JOB_PORT_N.
    pub job_endpoints: Vec<(u16, std::net::SocketAddr)>,
    /// A job's on a compute node: the login node's listeners of its session, which its network
    /// may reach whatever the floors say of their address.
    pub job_services: Vec<std::net::SocketAddr>,
    /// The secret a job proves to them, from its session.
    pub job_secret: Option<crate::secret::Secret>,
    /// The address this jail claimed on its session's network, and the session's registry.
    pub peer: Option<PeerPlan>,
}

/// A jail's address on its session's network and where the session's jails are registered
/// (`net::cluster::peers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerPlan {
    pub address: std::net::Ipv4Addr,
    pub registry: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("project directory {}: {why}", path.display())]
    Project { path: PathBuf, why: String, fix: String },
    #[error("{key}: `{entry}`: {why}")]
    Entry { key: String, entry: String, why: String },
    #[error("network mode `{asked}` cannot run here: {why}")]
    Net { asked: NetMode, why: String, fix: String },
    #[error("no isolation backend works here: {why}")]
    Backend { why: String, fix: String },
    #[error("protected path {} is a symlink; agent-sandbox will not follow it", path.display())]
    ProtectedSymlink { path: PathBuf },
    #[error(
        "{} is a symbolic link in the agent's own directory: the jail could replace it with a file of its own, which the agent outside would then read",
        path.display()
    )]
    AgentSymlink { path: PathBuf },
    #[error(
        "{what} is at {}, inside the project {}, which the Landlock backend grants whole: it cannot hide a path there",
        path.display(), tree.display()
    )]
    Unhidable { what: String, path: PathBuf, tree: PathBuf },
    #[error(
        "{} changed while the launch was checking it: it now leads to {}, inside the agent-sandbox state directory; the launch stops",
        path.display(), now.display()
    )]
    Moved { path: PathBuf, now: PathBuf },
    #[error("nothing to run: the command is empty")]
    EmptyCommand,
    #[error("this kernel cannot keep the jail from making git repositories in the project: {why}")]
    GitGuard { why: String, fix: String },
    #[error("nested user namespaces (process.nested_userns = true) cannot be allowed with the git guard on: {why}")]
    NestedUserns { why: String, fix: String },
}

impl PlanError {
    pub fn fix(&self) -> Option<String> {
        match self {
            PlanError::Project { fix, .. }
            | PlanError::Net { fix, .. }
            | PlanError::Backend { fix, .. }
            | PlanError::GitGuard { fix, .. }
            | PlanError::NestedUserns { fix, .. } => Some(format!("fix: {fix}")),
            PlanError::ProtectedSymlink { path } => Some(format!(
                "fix: look at where it points (ls -l {0}) and replace it with a real file or directory",
                path.display()
            )),
            PlanError::AgentSymlink { path } => Some(format!(
                "fix: put the file itself there (cp --remove-destination \"$(readlink -f {0})\" {0}), or list it in the \
                 profile's agent.state if the agent may change it",
                path.display()
            )),
            PlanError::Entry { .. } => {
                Some("fix: correct the entry; `agent-sandbox policy show` lists where each came from".into())
            }
            PlanError::Unhidable { what, tree, .. } if what.contains("state directory") => Some(format!(
                "fix: keep the state directory out of {0}: set XDG_STATE_HOME to a directory of yours outside it (or make \
                 ~/.local/state a real directory outside the project), or choose another project directory; the userns \
                 backend can hide it there",
                tree.display()
            )),
            PlanError::Unhidable { tree, path, .. } => Some(format!(
                "fix: move {} out of {}, or choose another project directory; the userns backend can hide it there",
                path.display(),
                tree.display()
            )),
            PlanError::Moved { path, .. } => Some(format!(
                "fix: something (the jail of another session that may write there?) replaced {} by a link; look at it \
                 (ls -la {}) and start again",
                path.display(),
                path.parent().unwrap_or(path).display()
            )),
            PlanError::EmptyCommand => None,
        }
    }
}

/// The choices the rest of a launch rests on, made once from the policy and the host
/// (`choose`): the backend, the jail's network, the host's groups to map. The launch's prelude
/// makes them; what the jail's PID 1 is cloned with (`jail_shape`) and the plan
/// (`build_with`) read the same ones.
pub struct Choices {
    backend: Result<BackendKind, PlanError>,
    /// None where the backend failed (the plan reports that first).
    net: Option<Result<NetPlan, PlanError>>,
    groups: groups::GroupsPlan,
}

impl Choices {
    /// Whether the backend is Landlock's (false where none can run).
    pub fn landlock(&self) -> bool {
        matches!(self.backend, Ok(BackendKind::Landlock))
    }
}

/// Makes the launch's choices (see `Choices`).
pub fn choose(policy: &Policy, facts: &HostFacts) -> Choices {
    let backend = choose_backend(policy, facts);
    let net = backend.as_ref().ok().map(|b| choose_net(policy, *b, facts));
    Choices { backend, net, groups: groups::of_host(facts) }
}

/// The plan, its choices made here (tests, `policy show`); a launch makes them in its prelude
/// and calls `build_with`.
pub fn build(policy: &Policy, facts: &HostFacts, fs: &dyn HostFs, req: &RunRequest) -> Result<Plan, PlanError> {
    build_with(&choose(policy, facts), policy, facts, fs, req)
}

pub fn build_with(
    choices: &Choices,
    policy: &Policy,
    facts: &HostFacts,
    fs: &dyn HostFs,
    req: &RunRequest,
) -> Result<Plan, PlanError> {
    if req.command.is_empty() {
        return Err(PlanError::EmptyCommand);
    }
    let mut base = Base::decide(choices, policy, facts, fs, req)?;
    // The environment before the mounts: whether the profile's key is kept outside the jail
    // decides whether its agent's own login file is shown.
    let mut envp = environment(policy, facts, req, &base);
    let creds = policy.agent.as_ref().and_then(|a| a.value.credentials.clone()).unwrap_or_default();
    base.net.credentials = credentials::routes(&creds, &base.net, &envp.vars, &facts.env)?;
    let (credentials_plan, git_view) = hiding::decide(policy, facts, fs, &mut base)?;
    let token_copies = token_copies(facts, fs, &mut base);
    let mut warnings = std::mem::take(&mut base.warnings);
    let mut b = Builder::new(fs, &base.hidden);
    synthesized_files(&mut b, policy, facts, &base);
    let mail_block = policy.mail_block.value != crate::policy::MailBlock::Off;
    system_mounts(&mut b, policy, facts, req, &base, mail_block)?;
    // 3. Home; 4. extra writable paths, then the project; 5. what is hidden inside them.
    let trees = writable_trees(&mut b, policy, facts, fs, &base, &git_view, &mut warnings)?;
    place_token_copies(&mut b, &base.hidden, token_copies, &mut warnings);
    masks(&mut b, policy, fs, &base, &trees)?;
    if base.backend == BackendKind::Userns {
        cover_missing_stores(&mut b, fs, &base, &trees, &credentials_plan, &mut warnings);
    }
    // 6. Protected paths inside the project (and the launcher's own binary if it is there).
    let (mut placeholders, git_dir, restore, walk) = protected(&mut b, policy, facts, fs, &base, &trees)?;
    warnings.extend(walk);
    let restore =
        restore.map(|paths| ProjectRestore { paths, aside: facts.state_dir().join("rejected").join(&req.session) });
    warnings.extend(git_dir.and_then(|g| repo_credentials_warning(fs, &g)));
    // 7. The agent's own directories: its state writable, what it runs or obeys outside
    // read-only or a copy for the session.
    let placed = instructions::place(policy, fs, &base.home, base.backend)?;
    let (confined, agents) = agent_dirs(&mut b, policy, facts, req, &base, &trees.writable)?;
    placeholders.extend(confined);
    warnings.extend(agents.warnings);
    for (k, v) in agents.env {
        envp.vars.retain(|(n, _)| *n != k);
        envp.vars.push((k, v));
    }
    // 8. The agent's instruction file with the jail's notice, over every other mount.
    let mut home_dirs = std::mem::take(&mut b.home_dirs);
    let home_files = std::mem::take(&mut b.home_files);
    let home_texts = std::mem::take(&mut b.home_texts);
    if let Some(placed) = placed {
        push_notice(&mut b, &placed, policy, req, &base, &trees.writable);
        home_dirs.extend(placed.home_dirs.iter().filter(|d| !home_dirs.contains(d)).cloned().collect::<Vec<_>>());
        placeholders.extend(placed.placeholder);
    } else if base.backend == BackendKind::Landlock
        && policy.agent.as_ref().is_some_and(|a| a.value.instructions.is_some())
    {
        warnings.push(
            "the Landlock backend cannot show the agent the sandbox notice in its instruction file (no mounts there)"
                .into(),
        );
    }
    if base.backend == BackendKind::Userns {
        cover_again_what_later_mounts_show(&mut b);
    }
    if policy.home_access.value == HomeAccess::Restricted {
        b.push(MountSpec::ReadOnly { target: base.home.clone() });
    }
    b.push(MountSpec::ReadOnly { target: "/".into() });
    let link_trees = trees.guarded.clone();
    let git_guard = git_guard(policy, facts, base.backend, trees.guarded)?;
    nested::check_guard(policy, git_guard.is_some())?;
    warnings.extend(nested_warnings(policy, req, base.backend));
    base.warnings = warnings;
    let shaped = Shaped {
        mounts: b.mounts,
        placeholders,
        git_guard,
        mail_block,
        credentials: credentials_plan,
        git_view,
        keep_out: agents.keep_out,
        state_dirs: b.state_dirs,
        link_trees,
    };
    let mut plan = finish(policy, facts, fs, req, base, envp, shaped)?;
    (plan.home_dirs, plan.home_files, plan.merges) = (home_dirs, home_files, agents.merges);
    plan.home_texts = home_texts;
    plan.session_homes = agents.homes;
    plan.restore = restore;
    own_paths(&mut plan, fs, facts)?;
    Ok(plan)
}

/// The jail's notice (what it shows, writes, reaches) in the agent's instruction file.
fn push_notice(
    b: &mut Builder<'_>,
    placed: &instructions::Placed,
    policy: &Policy,
    req: &RunRequest,
    base: &Base,
    writable: &[PathBuf],
) {
    let slurm = req.chaperon_socket.is_some() || req.chaperon_channel;
    let facts = instructions::NoticeFacts {
        project: &base.project,
        writable,
        net: &base.net,
        slurm,
        nested: nested::NestedSandbox::of(policy, base.backend),
    };
    instructions::push(b, placed, instructions::notice(&facts));
}

/// Stages 1 and 2: kernel and scratch filesystems first (a read-only path the user lists
/// under /tmp or /run must land on top of the private tmpfs, not under it), then the system
/// and site trees, read-only.
fn system_mounts(
    b: &mut Builder<'_>,
    policy: &Policy,
    facts: &HostFacts,
    req: &RunRequest,
    base: &Base,
    mail_block: bool,
) -> Result<(), PlanError> {
    let fs = b.fs;
    b.push(MountSpec::Proc { target: "/proc".into() });
    dev_mounts(b, policy, fs);
    b.push(MountSpec::Tmpfs { target: "/tmp".into(), mode: 0o1777 });
    b.push(MountSpec::Tmpfs { target: "/var/tmp".into(), mode: 0o1777 });
    b.push(MountSpec::Tmpfs { target: "/run".into(), mode: 0o755 });
    stub_dir(b, facts, mail_block, req);
    for r in &policy.fs_read {
        let p = check_extra_path("filesystem.read", &r.value, &base.home, fs)?;
        b.bind_tree(&p, false);
    }
    b.place_remaining_overrides();
    cover_stubbed(b, fs, policy, facts, &base.home, mail_block);
    Ok(())
}

/// Everyday configs that hold a token (cargo's, pip's...): a copy without it where shown.
fn place_token_copies(
    b: &mut Builder<'_>,
    hidden: &Hidden,
    copies: Vec<(PathBuf, String, PathBuf)>,
    warnings: &mut Vec<String>,
) {
    for (path, text, named) in copies {
        if !hidden.covers(&path) && hiding::shown(&b.mounts, &path) {
            b.push(MountSpec::Stripped { target: path, contents: text, seed: false });
        } else if named != path && hiding::shown(&b.mounts, &named) {
            // A name the jail shows that leads where it shows nothing: programs inside run
            // without that config, which is said (eighth outside look, U8-4).
            warnings.push(format!(
                "{}: it leads to {}, which the jail does not show (it holds a token): programs inside read no \
                 config there; to give them one without the token, keep the file where the jail shows it (the \
                 home's configs are shown as copies without their tokens)",
                named.display(),
                path.display()
            ));
        }
    }
}

/// Stage 7 by backend: under userns the agents' directories confined in place (their
/// placeholders returned), under Landlock (no mounts) the real directories read-only but for
/// their state, the agent pointed at a session directory standing in for them
/// (`agent_home::landlock`).
fn agent_dirs(
    b: &mut Builder<'_>,
    policy: &Policy,
    facts: &HostFacts,
    req: &RunRequest,
    base: &Base,
    writable: &[PathBuf],
) -> Result<(Vec<Placeholder>, agent_home::landlock::Redirected), PlanError> {
    let injected = !base.net.credentials.is_empty();
    if base.backend == BackendKind::Userns {
        let copies = facts.state_dir().join("copies").join(&req.session);
        let layers = facts.overlay_in_userns;
        let mut places = vec![base.cwd.clone()];
        if base.project != base.cwd {
            places.push(base.project.clone());
        }
        let confined = agent_home::confine(b, policy, &base.home, &places, writable, &copies, layers, injected)?;
        let merges = agent_home::landlock::Redirected { merges: confined.merges, ..Default::default() };
        return Ok((confined.placeholders, merges));
    }
    let copies = facts.state_dir().join("copies");
    let mut r = agent_home::landlock::confine(b, policy, &base.home, &copies, &req.session, injected)?;
    if policy.home_access.value == HomeAccess::Write {
        r.warnings.push(
            "the Landlock backend cannot protect the agents' configuration in a writable home (no mounts there): \
             hooks and MCP servers written into ~/.claude.json, ~/.claude, ~/.codex, ~/.gemini, ~/.pi or \
             ~/.cache/opencode run outside the jail later"
                .into(),
        );
    }
    Ok((vec![], r))
}

fn nested_warnings(policy: &Policy, req: &RunRequest, backend: BackendKind) -> Vec<String> {
    let nested = nested::NestedSandbox::of(policy, backend);
    let mut warnings = vec![];
    if nested == nested::NestedSandbox::Landlock && policy.nested_userns.value {
        warnings.push(
            "process.nested_userns = true lets the command create user namespaces, but a sandbox that mounts \
             (bubblewrap) cannot start under the Landlock backend, which refuses every mount"
                .into(),
        );
    }
    warnings.extend(nested::warning(&req.command, nested));
    warnings
}

/// What the launch checks and owns once the plan is whole: the anchors of the host paths
/// the jail opens, the home's entries where they really are, the state directory (and the
/// Landlock session directory and its executable).
fn own_paths(plan: &mut Plan, fs: &dyn HostFs, facts: &HostFacts) -> Result<(), PlanError> {
    plan.anchors = anchor::stamp(plan, fs, &facts.state_dir())?;
    plan.home_real = anchor::home_entries(plan, fs, &facts.state_dir())?;
    plan.own = vec![facts.state_dir()];
    if let Some(ll) = &plan.landlock {
        plan.own.extend([ll.session.path.clone(), ll.session.exe.clone()]);
    }
    Ok(())
}

/// What the jail's PID 1 is cloned with, known before the plan is made (`jail::userns::Early`,
/// which makes the namespaces while the plan is built): the jail's network, tun0's address,
/// the groups to map. None where the plan would have no PID 1 of ours (the Landlock
/// backend) or will fail; the plan then decides as it would have. The jail checks the plan
/// against it (`Early::fits`) and clones anew on any difference.
pub fn jail_shape(
    choices: &Choices,
    req: &RunRequest,
) -> Option<(JailNet, Option<std::net::Ipv4Addr>, groups::GroupsPlan)> {
    choices.backend.as_ref().ok().filter(|b| **b == BackendKind::Userns)?;
    let mut net = choices.net.as_ref()?.as_ref().ok()?.clone();
    net.peer = req.peer.clone();
    Some((net.jail, net.tun_address(), choices.groups.clone()))
}

/// What every later stage rests on: the backend, the project and cwd, the network, the
/// hidden paths, the warnings so far.
struct Base {
    home: PathBuf,
    backend: BackendKind,
    project: PathBuf,
    cwd: PathBuf,
    net: NetPlan,
    /// The host's groups to map (`Choices`).
    groups: groups::GroupsPlan,
    hidden: Hidden,
    warnings: Vec<String>,
    /// The token configs with something left out, where they really are (`token_copies`).
    token_configs: Vec<PathBuf>,
}

impl Base {
    fn decide(
        choices: &Choices,
        policy: &Policy,
        facts: &HostFacts,
        fs: &dyn HostFs,
        req: &RunRequest,
    ) -> Result<Base, PlanError> {
        let home = facts.home_canonical.clone();
        // A failed choice is made again for its error to be this plan's (the failure path only).
        let backend = match choices.backend {
            Ok(b) => b,
            Err(_) => choose_backend(policy, facts)?,
        };
        let groups = choices.groups.clone();
        let project = check_project(policy, facts, fs, &req.project)?;
        let cwd = fs.canonicalize(&req.cwd).filter(|c| c.starts_with(&project)).unwrap_or_else(|| project.clone());
        let mut warnings = policy.warnings.clone();
        let mut net = match &choices.net {
            Some(Ok(net)) => net.clone(),
            _ => choose_net(policy, backend, facts)?,
        };
        (net.rules, net.matcher) = net_rules(policy, &net)?;
        net::job_services(&mut net, req)?;
        if let Some(f) = &net.fallback {
            warnings.push(f.clone());
        }
        let mut hidden = Hidden::default();
        // The state dir holds the session locks and registry the launcher acts on afterwards,
        // the audit log and the job directories a node trusts: hidden where it really is (the
        // facts resolved it on this host), and by the name the environment gives it.
        let named = crate::host::state_dir_as_named(&facts.env, &home);
        for p in [facts.state_dir(), named] {
            hidden.must_hide.push((p, "the agent-sandbox state directory".into()));
        }
        // So are the sessions' sockets where the runtime directory holds them: a jail that
        // reached another session's control socket could only knock (it has no token), but
        // it has nothing to do there.
        if !facts.sockets_dir().starts_with(facts.state_dir()) {
            hidden.must_hide.push((facts.sockets_dir(), "the agent-sandbox sessions' sockets".into()));
            hidden.paths.push(facts.sockets_dir());
        }
        for h in &policy.hide {
            let p = fs::normalized(&expand_tilde(&h.value, &home));
            if !p.is_absolute() {
                return Err(entry_err("filesystem.hide", &h.value, "must be absolute or start with ~/"));
            }
            let floor = matches!(h.source, Source::Builtin | Source::Admin(_));
            for p in fs::expand_glob(fs, &p) {
                if floor && !hidden.must_hide.iter().any(|(q, _)| *q == p) {
                    hidden.must_hide.push((p.clone(), format!("filesystem.hide `{}`", h.value)));
                }
                hidden.paths.push(p);
            }
        }
        hidden.paths.push(facts.state_dir());
        // Each hidden path is hidden where it really is as well: with `~/.local` a link to
        // `/scratch/u/local` (or into the project), `~/.local/state/agent-sandbox` is also
        // `/scratch/u/local/state/agent-sandbox`, which a jail granted that tree would reach.
        // Only what exists has a real place to look up (and a missing path needs no cover).
        // The named state directory is among the paths as the built-in floor's entry.
        for i in 0..hidden.paths.len() {
            let Some(r) = fs::real_if_linked(fs, &hidden.paths[i]) else { continue };
            let why = hidden.must_hide.iter().find(|(q, _)| *q == hidden.paths[i]).map(|(_, w)| w.clone());
            if let Some(why) = why.filter(|_| !hidden.must_hide.iter().any(|(q, _)| *q == r)) {
                hidden.must_hide.push((r.clone(), why));
            }
            if !hidden.paths.contains(&r) {
                hidden.paths.push(r);
            }
        }
        // And at each other mount of its file system that shows it (a bind-mount alias of
        // `/scratch`, of `/home`): a tree granted by that name is compared with it there.
        for i in 0..hidden.paths.len() {
            let h = hidden.paths[i].clone();
            if fs.kind(&h).is_none_or(|k| k == Kind::Symlink) || fs::through_link(fs, &h) {
                continue;
            }
            let why = hidden.must_hide.iter().find(|(q, _)| *q == h).map(|(_, w)| w.clone());
            for a in fs::mount_aliases(&facts.mounts, &h) {
                if let Some(why) = why.clone().filter(|_| !hidden.must_hide.iter().any(|(q, _)| *q == a)) {
                    hidden.must_hide.push((a.clone(), why));
                }
                if !hidden.paths.contains(&a) {
                    hidden.paths.push(a);
                }
            }
        }
        // Your own home is shaped by the home mode, never hidden as a whole: `/root` (a floor
        // for everyone else) is root's own home, and an admin's `/home` means the other homes.
        hidden.paths.retain(|h| !home.starts_with(h) && !facts.home.starts_with(h));
        hidden.must_hide.retain(|(h, _)| !home.starts_with(h) && !facts.home.starts_with(h));
        // The project may not be hidden or sit inside a hidden path.
        if hidden.covers(&project) {
            return Err(PlanError::Project {
                path: project.clone(),
                why: "it lies inside a path the policy hides".into(),
                fix: "choose a project directory outside ~/.ssh, ~/.aws and the other hidden paths".into(),
            });
        }
        Ok(Base { home, backend, project, cwd, net, groups, hidden, warnings, token_configs: vec![] })
    }
}

/// The files the jail's /etc gets instead of the host's (own user only in passwd, files-only
/// NSS, the session's hostname and resolver), placed as the system trees are bound.
fn synthesized_files<'a>(b: &mut Builder<'a>, policy: &Policy, facts: &'a HostFacts, base: &Base) {
    // Landlock cannot see through an overlay's whiteouts: it gets the per-entry rebuild, whose
    // entries become its path rules, so hidden paths stay unreachable there too.
    b.overlay = base.backend == BackendKind::Userns
        && facts.overlay_in_userns
        && policy.hide_with.value == crate::policy::HideWith::Overlay;
    b.mountpoints = &facts.mountpoints;
    let user_line =
        format!("{}:x:{}:{}::{}:{}", facts.user, facts.uid, facts.gid, facts.home.display(), facts.shell.display());
    let synth = |target: &str, contents: String| MountSpec::File { target: target.into(), contents, mode: 0o644 };
    b.overrides.push(synth("/etc/passwd", fs::synth_passwd(&facts.etc_passwd, facts.uid, &user_line)));
    let mapped = base.groups.mapped.clone();
    b.overrides
        .push(synth("/etc/group", fs::synth_group(&facts.etc_group, &facts.user, facts.gid, &facts.group, &mapped)));
    b.overrides.push(synth("/etc/nsswitch.conf", fs::NSSWITCH.into()));
    b.overrides.push(synth("/etc/hostname", format!("{}\n", policy.hostname.value)));
    if base.net.jail == JailNet::Tun {
        b.overrides.push(synth("/etc/resolv.conf", crate::netrules::resolv::jail_resolv_conf(&facts.resolv_conf)));
    }
    if let Some(host_conf) = &facts.etc_tmux_conf {
        b.overrides.push(synth("/etc/tmux.conf", format!("{host_conf}{}", fs::NESTED_TMUX)));
    }
    b.overrides
        .push(synth("/etc/hosts", format!("{}\n127.0.1.1\t{}\n", facts.etc_hosts.trim_end(), policy.hostname.value)));
}

/// The trees the jail may write, and those of them the git guard holds.
struct Trees {
    writable: Vec<PathBuf>,
    guarded: Vec<PathBuf>,
}

/// Stages 3 and 4: the home, in its mode; the extra writable paths, then the project.
fn writable_trees(
    b: &mut Builder<'_>,
    policy: &Policy,
    facts: &HostFacts,
    fs: &dyn HostFs,
    base: &Base,
    git: &hiding::GitView,
    warnings: &mut Vec<String>,
) -> Result<Trees, PlanError> {
    let home = base.home.clone();
    let mut writable = vec![base.project.clone()];
    home_mounts(b, policy, facts, &home, git, &mut writable, warnings);
    for w in &policy.fs_write {
        let p = check_extra_path("filesystem.write", &w.value, &home, fs)?;
        if base.hidden.covers(&p) || base.hidden.covers(&fs::real_path(fs, &p)) {
            return Err(entry_err("filesystem.write", &w.value, "is a hidden path; it cannot be made writable"));
        }
        if fs.kind(&p).is_some() {
            let dir = fs.kind(&p) == Some(Kind::Dir);
            b.push(MountSpec::Bind { source: p.clone(), target: p.clone(), rw: true, dir });
            writable.push(p);
        }
    }
    // Every tree the jail writes that outlives it is guarded, the built-in `~/.cache`
    // included: a gitfile in the project may point at a repository anywhere the jail could
    // write one, so every such repository's config is checked (docs/security-model.md).
    let guarded = writable.clone();
    b.push(MountSpec::Bind { source: base.project.clone(), target: base.project.clone(), rw: true, dir: true });
    // The user's git configs the jail shows, without their credentials (the seeded
    // `~/.gitconfig` got its stripped copy already): after the writable trees, so that one
    // kept in the project or a writable path (a dotfiles repository worked on as the project)
    // gets its copy over the tree's bind, not under it (seventh outside look, P1).
    for (path, text) in &git.stripped {
        let seeded = b.mounts.iter().any(|m| matches!(m, MountSpec::Stripped { target, .. } if target == path));
        if !seeded && !base.hidden.covers(path) && hiding::shown(&b.mounts, path) {
            b.push(MountSpec::Stripped { target: path.clone(), contents: text.clone(), seed: false });
        }
    }
    Ok(Trees { writable, guarded })
}

/// The innermost of `trees` (each tree with where it really is) that holds the real path `p`
/// below its top.
fn innermost<'t>(trees: &'t [(&'t PathBuf, PathBuf)], p: &Path) -> Option<&'t (&'t PathBuf, PathBuf)> {
    trees.iter().filter(|(_, r)| fs::under(p, r) && p != r.as_path()).max_by_key(|(_, r)| r.as_os_str().len())
}

/// Where the real path `real` is inside one of `trees`, as the jail sees it (the tree bound at
/// its name, `/scratch/u/x` of a `/lustre/u` bound as `/scratch/u`), and that tree.
fn as_the_jail_sees<'t>(trees: &'t [(&'t PathBuf, PathBuf)], real: &Path) -> Option<(PathBuf, &'t PathBuf)> {
    innermost(trees, real).and_then(|(w, r)| Some((w.join(real.strip_prefix(r).ok()?), *w)))
}

/// Every place the jail shows the real path `real` at: one per writable tree whose real root
/// holds it (`~/.cache -> /scratch/u/cache` with `--rw /scratch/u` shows a store under both
/// names, two mounts a cover on one does not reach; third outside look at stop 49), each with
/// its tree.
fn every_way_the_jail_sees<'t>(trees: &'t [(&'t PathBuf, PathBuf)], real: &Path) -> Vec<(PathBuf, &'t PathBuf)> {
    let mut ways: Vec<(PathBuf, &PathBuf)> = vec![];
    for (w, r) in trees.iter().filter(|(_, r)| fs::under(real, r) && real != r.as_path()) {
        let Ok(rel) = real.strip_prefix(r) else { continue };
        let target = w.join(rel);
        if !ways.iter().any(|(t, _)| *t == target) {
            ways.push((target, *w));
        }
    }
    ways
}

/// Whether `p` lies strictly inside one of the directories `covered` (an empty cover there
/// already hides it, and a cover of its own would find no target: `--hide ~/.cache/huggingface`
/// stopped every launch; third outside look at stop 49).
fn inside_a_covered_dir(covered: &[PathBuf], p: &Path) -> bool {
    covered.iter().any(|d| p != d.as_path() && fs::under(p, d))
}

/// Stage 5 too (userns): a store the catalogue says the launcher makes (`catalogue::Made`) that
/// is missing where a writable tree would show it (where that tree really is) is made before the
/// session (`home_dirs`, `home_files`: empty, anchored) and covered like a present one. Bound
/// whole, the tree would show one a tool makes outside while the session runs (a first `hf
/// auth login`, git's credential-cache daemon and its socket), and let a jail make one first
/// (outside review of issue 32, R1). Not under Landlock: the rules around a store would keep
/// the jail from making anything new at the top of `~/.cache` in every session.
fn cover_missing_stores(
    b: &mut Builder<'_>,
    fs: &dyn HostFs,
    base: &Base,
    trees: &Trees,
    creds: &catalogue::CredentialsPlan,
    warnings: &mut Vec<String>,
) {
    // Each writable tree where it really is (a `~/.cache` that is a link to scratch, common
    // on HPC systems, is bound from there: second look, G1).
    let real_trees: Vec<(&PathBuf, PathBuf)> = trees
        .writable
        .iter()
        .filter(|w| **w != base.home)
        .map(|w| (w, fs::real_path(fs, w)))
        .filter(|(_, r)| fs.kind(r) == Some(Kind::Dir))
        .collect();
    for l in &creds.hidden {
        let Some(made) = catalogue::CATALOGUE.iter().find(|s| s.name == l.store).and_then(|s| s.made) else {
            continue;
        };
        let real = fs::real_path(fs, &l.path);
        if fs.kind(&l.path).is_some() {
            // Present, and covered by `masks`: should it be gone by the time the jail is
            // built, it is made again there (`MountSpec::Mask::made`).
            for (target, _) in every_way_the_jail_sees(&real_trees, &real) {
                for spec in &mut b.mounts {
                    if let MountSpec::Mask { target: t, made, .. } = spec {
                        *made |= *t == target;
                    }
                }
            }
            continue;
        }
        let ways = every_way_the_jail_sees(&real_trees, &real);
        if ways.is_empty() {
            // Named in a writable tree but leading out of every one through a link on its
            // way (`~/.cache/huggingface -> elsewhere`, which an earlier jail could have
            // made): nothing here to cover, said (second look, G2).
            if real != l.path && innermost(&real_trees, &l.path).is_some() {
                warnings.push(format!(
                    "{}: not covered: a link on its way leads to {}, outside the trees the jail writes; a login made \
                     there during the session is not hidden (remove the link if you did not make it)",
                    l.path.display(),
                    real.display()
                ));
            }
            continue;
        }
        for (target, w) in ways {
            if b.mounts.iter().any(|m| matches!(m, MountSpec::Mask { target: t, .. } if fs::under(&target, t))) {
                continue;
            }
            let list = match made {
                catalogue::Made::Dir => &mut b.home_dirs,
                catalogue::Made::File => &mut b.home_files,
            };
            if !list.contains(&l.path) {
                list.push(l.path.clone());
            }
            pin_ancestors(b, w, &target);
            b.push(MountSpec::Mask { target, dir: made == catalogue::Made::Dir, made: true });
        }
    }
}

/// Stage 5: hidden paths inside writable trees cannot vanish; they are covered, empty and
/// read-only, where they really are as the jail sees that tree: a tree bound from where it
/// really is (`/scratch/u` a link to `/lustre/u`) shows a hidden `/lustre/u/x` as
/// `/scratch/u/x`. The Landlock backend covers nothing (it leaves hidden paths out of a
/// granted tree's rules instead), and grants the project whole: a path that must stay hidden
/// inside the project fails the plan there, with the way out.
fn masks(b: &mut Builder<'_>, policy: &Policy, fs: &dyn HostFs, base: &Base, trees: &Trees) -> Result<(), PlanError> {
    // A home bound as a whole (read/write modes) was rebuilt without its hidden paths.
    let rebuilt =
        |w: &PathBuf| w == &base.home && matches!(policy.home_access.value, HomeAccess::Read | HomeAccess::Write);
    let real_trees: Vec<(&PathBuf, PathBuf)> =
        trees.writable.iter().filter(|w| !rebuilt(w)).map(|w| (w, fs::real_path(fs, w))).collect();
    let inside = |real: &Path| as_the_jail_sees(&real_trees, real);
    let mut covered_dirs: Vec<PathBuf> = vec![];
    if base.backend == BackendKind::Landlock {
        // Landlock leaves a hidden path out of the rules of a tree it grants (one rule per
        // entry around it: `landlock::split_around_stores`), but for the project, whose top
        // level must stay writable and which it grants whole.
        for (h, why) in &base.hidden.must_hide {
            if fs.kind(h).is_none() {
                continue;
            }
            let path = fs::real_path(fs, h);
            if let Some((_, w)) = inside(&path).filter(|(_, w)| **w == base.project) {
                return Err(PlanError::Unhidable { what: why.clone(), path, tree: w.clone() });
            }
        }
    }
    let mut done: Vec<PathBuf> = vec![];
    for h in base.hidden.all() {
        // A hidden path is listed where it really is too (`Base::decide`, `hiding::decide`):
        // one named outside every tree needs no look.
        if !real_trees.iter().any(|(w, r)| fs::under(h, w) || fs::under(h, r)) || fs.kind(h).is_none() {
            continue;
        }
        let real = fs::real_path(fs, h);
        // What is there, not a link on the way (`~/.ssh -> /lustre/u/ssh` masks a directory).
        let Some(k) = fs.kind(&real) else { continue };
        for (target, w) in every_way_the_jail_sees(&real_trees, &real) {
            if done.contains(&target) || inside_a_covered_dir(&covered_dirs, &target) {
                continue;
            }
            // The directories between the tree and the mask are pinned: renaming one
            // (`mv ~/.local/state x` under `--rw ~/.local`) would carry the mask away and
            // leave the name free for a copy the jail makes (the state directory above all).
            pin_ancestors(b, w, &target);
            b.push(MountSpec::Mask { target: target.clone(), dir: k == Kind::Dir, made: false });
            if k == Kind::Dir {
                covered_dirs.push(target.clone());
            }
            done.push(target);
        }
    }
    for f in &policy.hide_files {
        let p = fs::normalized(&expand_tilde(&f.value, &base.home));
        for p in fs::expand_glob(fs, &p) {
            if let Some(k) = fs.kind(&p) {
                if let Some(w) = trees.writable.iter().find(|w| p.starts_with(w) && &p != *w) {
                    pin_ancestors(b, w, &p);
                }
                b.push(MountSpec::Mask { target: p, dir: k == Kind::Dir, made: false });
            }
        }
    }
    Ok(())
}

/// What programs outside run or load from the project and the repositories and direnv
/// directories nested in it (`runs_outside_of` each); the project's own repository; where the
/// walk for nested ones stopped, if it did. What `plan::ahead` reads ahead asks the same.
pub(crate) fn runs_outside_all(
    facts: &HostFacts,
    fs: &dyn HostFs,
    home: &Path,
    project: &Path,
) -> (runs_outside::GitFound, Vec<(PathBuf, bool)>, Option<PathBuf>) {
    let xdg = xdg_config(facts);
    let (git, mut found) = runs_outside_of(fs, home, xdg.as_deref(), project, project);
    // A workspace holding other repositories and direnv directories (`~/work/sub`): theirs
    // too (outside review of issue 32, R2).
    let (nested, stopped) = runs_outside::nested_dirs(fs, project);
    for d in nested {
        found.extend(runs_outside_of(fs, home, xdg.as_deref(), &d, project).1);
    }
    (git, found, stopped)
}

/// `XDG_CONFIG_HOME` when it is absolute (git reads its config there then).
fn xdg_config(facts: &HostFacts) -> Option<PathBuf> {
    xdg_config_of(facts.env_var("XDG_CONFIG_HOME"))
}

/// `xdg_config` of the variable's value.
fn xdg_config_of(value: Option<&str>) -> Option<PathBuf> {
    value.map(PathBuf::from).filter(|p| p.is_absolute())
}

/// What the repository at or above `dir` and the `.envrc` in `dir` make programs outside run
/// or load that no fixed name covers: the hooks wherever `core.hooksPath` puts them (read now,
/// from its config and the user's), the files its config includes (read as the config), the
/// project files the hooks and the hook managers' configs name (`scripts/lint.sh`), and what
/// the `.envrc` loads. A directory below the project counts only with a `.git` of its own.
fn runs_outside_of(
    fs: &dyn HostFs,
    home: &Path,
    xdg: Option<&Path>,
    dir: &Path,
    project: &Path,
) -> (runs_outside::GitFound, Vec<(PathBuf, bool)>) {
    let own_repo = dir == project || fs.kind(&dir.join(".git")).is_some();
    let git = if own_repo { runs_outside::git_found(fs, home, xdg, dir) } else { Default::default() };
    let mut found: Vec<(PathBuf, bool)> = git.hooks.iter().map(|p| (p.clone(), true)).collect();
    found.extend(git.includes.iter().map(|p| (p.clone(), false)));
    if let Some(top) = &git.top {
        let mut hooks = git.hooks.clone();
        hooks.extend(git.git_dir.as_ref().map(|g| g.join("hooks")));
        hooks.extend(runs_outside::hook_manager_configs(fs, top));
        found.extend(runs_outside::hook_named(fs, &hooks, top, project));
    }
    found.extend(runs_outside::envrc_loads(fs, dir));
    (git, found)
}

/// What stage 6 made: the placeholders, the project's git directory, and under Landlock the
/// protected paths to put back at exit.
type Protected = (Vec<Placeholder>, Option<PathBuf>, Option<Vec<PathBuf>>, Option<String>);

/// Stage 6: protected paths inside the project, the launcher's own binary if it is in a
/// writable tree, and the user's own agent-sandbox config (the next session's policy).
fn protected(
    b: &mut Builder<'_>,
    policy: &Policy,
    facts: &HostFacts,
    fs: &dyn HostFs,
    base: &Base,
    trees: &Trees,
) -> Result<Protected, PlanError> {
    let mut placeholders = vec![];
    // With the git guard on, the project's `.git/config` and `.git/hooks` are the guard's to
    // keep (checked changes: `git submodule init`, `git remote add`, `git init` where there
    // was no repository), not read-only mounts or placeholders.
    let guard_keeps_git = !policy.nested_git.value && base.backend == BackendKind::Userns;
    let first = b.mounts.len();
    protect(b, fs, policy, &base.project, guard_keeps_git, &mut placeholders)?;
    // What programs outside run or load that no fixed name covers: the repository's hooks
    // wherever `core.hooksPath` puts them (read now, from its config and the user's), and
    // the files the `.envrc` loads.
    let (git, found, stopped) = runs_outside_all(facts, fs, &base.home, &base.project);
    // A jail can make enough directories for the walk to stop before a repository (second
    // look, G3): said, with where.
    let walk = stopped.map(|at| {
        format!(
            "the look for repositories nested in the project stopped at {} (after {} directories): the hooks of one \
             further on are not protected (too many directories one or two levels down)",
            at.display(),
            runs_outside::MAX_NESTED_DIRS
        )
    });
    protect_found(b, fs, &trees.writable, &base.project, guard_keeps_git, &found, &mut placeholders)?;
    if base.backend == BackendKind::Userns {
        // aider's tags cache in the project holds pickles aider loads outside: the session
        // gets an empty one of its own over an existing one (aider inside rebuilds it); the
        // guard refuses making one (aider then keeps its cache in memory).
        for c in fs::expand_glob(fs, &base.project.join(".aider.tags.cache.v*")) {
            if fs.kind(&c) == Some(Kind::Dir) {
                b.push(MountSpec::Tmpfs { target: c, mode: 0o755 });
            }
        }
    }
    let restore = (base.backend == BackendKind::Landlock).then(|| {
        // Landlock cannot make a path inside the writable project read-only: what the
        // protected paths hold (and that a missing one is missing) is put back at exit
        // instead (`jail::project_restore`).
        let mut paths: Vec<PathBuf> = b.mounts[first..]
            .iter()
            .filter_map(|m| match m {
                MountSpec::Bind { source, rw: false, .. } => Some(source.clone()),
                _ => None,
            })
            .collect();
        // A missing `.git` is git's to make (`git init`), not a settings file.
        let git = base.project.join(".git");
        paths.extend(placeholders.drain(..).map(|ph| ph.path).filter(|p| !fs::under(p, &git)));
        paths.sort();
        paths.dedup();
        // One inside another is put back with it.
        let all = paths.clone();
        paths.retain(|p| !all.iter().any(|q| q != p && fs::under(p, q)));
        paths
    });
    for w in &trees.writable {
        if facts.exe.starts_with(w) {
            pin_ancestors(b, w, &facts.exe);
            b.push(MountSpec::Bind { source: facts.exe.clone(), target: facts.exe.clone(), rw: false, dir: false });
        }
    }
    if let Some(cfg) = home_config_dir(facts, &base.home) {
        if trees.writable.iter().any(|w| cfg.starts_with(w)) && fs.kind(&cfg) == Some(Kind::Dir) {
            b.push(MountSpec::Bind { source: cfg.clone(), target: cfg, rw: false, dir: true });
        }
    }
    // A protected path inside a directory a cover hides has nothing there to protect: its
    // bind would find no target in the empty cover, and the jail could not be built (second
    // outside look at stop 49, 3: `--hide proj/.github` stopped every launch).
    let hidden_dirs: Vec<PathBuf> = b.mounts[..first]
        .iter()
        .filter_map(|m| match m {
            MountSpec::Mask { target, dir: true, .. } => Some(target.clone()),
            _ => None,
        })
        .collect();
    if !hidden_dirs.is_empty() {
        let kept: Vec<MountSpec> =
            b.mounts.drain(first..).filter(|m| !inside_a_covered_dir(&hidden_dirs, m.target())).collect();
        b.mounts.extend(kept);
        placeholders.retain(|ph| !inside_a_covered_dir(&hidden_dirs, &ph.path));
    }
    Ok((placeholders, git.git_dir, restore, walk))
}

/// Every cover (`Mask`) at or below the target of a later mount that shows host files (a
/// bind, a rebuilt tree's entry, a session layer, an overlay: a protected `.envrc`, an
/// agent's read-only directory, a `home.read` entry) is made again after it, which would
/// otherwise show what it covers (`--hide ~/proj/.envrc`, `hide_files`, a hidden file in
/// `~/.config/opencode` under the opencode profile were read; outside looks at stop 49, B2
/// and 2a/2b). Whatever made the cover.
fn cover_again_what_later_mounts_show(b: &mut Builder<'_>) {
    let shows_host = |m: &MountSpec| {
        matches!(
            m,
            MountSpec::Bind { .. } | MountSpec::TreeBind { .. } | MountSpec::Layer { .. } | MountSpec::Overlay { .. }
        )
    };
    let mut again: Vec<(PathBuf, bool, bool)> = vec![];
    for (i, m) in b.mounts.iter().enumerate() {
        let MountSpec::Mask { target: h, dir, made } = m else { continue };
        let Some(j) = b.mounts[i + 1..].iter().rposition(|l| shows_host(l) && fs::under(h, l.target())) else {
            continue;
        };
        let covered_after =
            b.mounts[i + 1 + j + 1..].iter().any(|l| matches!(l, MountSpec::Mask { target, .. } if target == h));
        let inside_again = again.iter().any(|(t, d, _)| *d && h != t && fs::under(h, t));
        if !covered_after && !inside_again && !again.iter().any(|(t, ..)| t == h) {
            again.push((h.clone(), *dir, *made));
        }
    }
    for (target, dir, made) in again {
        b.push(MountSpec::Mask { target, dir, made });
    }
}

/// Everyday config files holding a token (`token_files`): under userns the copies to show
/// over them; under Landlock, which cannot show a copy, each is hidden with a warning, as is
/// one that cannot be read surely.
fn token_copies(facts: &HostFacts, fs: &dyn HostFs, base: &mut Base) -> Vec<(PathBuf, String, PathBuf)> {
    let var = |n: &str| facts.env_var(n).map(str::to_string);
    let mut copies = vec![];
    for found in token_files::decide(fs, &base.home, &var, &facts.user_configs.stripped_before) {
        let token_files::Found { real: path, named, outcome } = found;
        if outcome != token_files::Outcome::Unchanged {
            base.token_configs.push(path.clone());
        }
        let shown = path.strip_prefix(&base.home).map(|r| format!("~/{}", r.display()));
        let shown = shown.unwrap_or_else(|_| path.display().to_string());
        match outcome {
            token_files::Outcome::Unchanged => {}
            token_files::Outcome::Stripped { text, dropped } if base.backend == BackendKind::Userns => {
                // In the project a copy bound over it makes the user's file read-only there (the
                // eighth outside look, U8-3): said, so that an edit that fails has its reason.
                if path.starts_with(&base.project) {
                    base.warnings.push(format!(
                        "{shown}: shown without {} and read-only inside (a copy without it is bound over the file, \
                         which is in the project): edit it outside the sandbox",
                        dropped.join(", ")
                    ));
                }
                copies.push((path, text, named));
            }
            // In the project, which Landlock grants whole, nothing can be left out: said as it
            // is (eighth outside look at the anchors, L8-1), not as hidden.
            token_files::Outcome::Stripped { dropped, .. } if path.starts_with(&base.project) => {
                base.warnings.push(format!(
                    "{shown}: it holds {} and is inside the project, which the Landlock backend grants whole: the \
                     jail can read it; move the token out of the project, or use the userns backend",
                    dropped.join(", ")
                ));
            }
            token_files::Outcome::Stripped { dropped, .. } => {
                base.warnings.push(format!(
                    "{shown}: not shown inside: it holds {} and the Landlock backend cannot show a copy without it",
                    dropped.join(", ")
                ));
                base.hidden.add_stores([path]);
            }
            token_files::Outcome::Withheld { why } => {
                base.warnings.push(format!("{shown}: not shown inside ({why}): it may hold a token"));
                base.hidden.add_stores([path]);
            }
        }
    }
    copies
}

/// One line when the project's repository config holds a credential the jail can read
/// (red team 32, F10): the entries' names, never their values.
fn repo_credentials_warning(fs: &dyn HostFs, git_dir: &Path) -> Option<String> {
    let names = runs_outside::repo_credentials(fs, git_dir);
    (!names.is_empty()).then(|| {
        format!(
            "the project's git config ({}) holds a credential the jail can read ({}): move it to a credential \
             helper (`git remote set-url origin https://host/path` without the token; docs/security-model.md)",
            git_dir.join("config").display(),
            names.join(", ")
        )
    })
}

/// The jail's environment from the launcher's (or a job's) and the policy, before the
/// credential routes are applied.
fn environment(policy: &Policy, facts: &HostFacts, req: &RunRequest, base: &Base) -> env::EnvPlan {
    let shell = if facts.shell.as_os_str().is_empty() { PathBuf::from("/bin/sh") } else { facts.shell.clone() };
    env::build(
        req.env.as_deref().unwrap_or(&facts.env),
        policy,
        &env::JailVars {
            user: &facts.user,
            home: &facts.home,
            shell: &shell,
            project: &base.project,
            cwd: &base.cwd,
            net_mode: base.net.effective.as_str(),
            proxies: base.net.jail == JailNet::Proxies,
            backend: base.backend.as_str(),
            session: &req.session,
            job_endpoints: &req.job_endpoints,
        },
    )
}

/// What the mount stages made, for `finish`.
struct Shaped {
    mounts: Vec<MountSpec>,
    placeholders: Vec<Placeholder>,
    git_guard: Option<GitGuardPlan>,
    mail_block: bool,
    credentials: catalogue::CredentialsPlan,
    git_view: hiding::GitView,
    /// Landlock: the agent's directories no writable tree's rule may cover.
    keep_out: Vec<PathBuf>,
    /// The agent's state directories and the trees the jail writes (`LinkPlan`).
    state_dirs: Vec<PathBuf>,
    link_trees: Vec<PathBuf>,
}

/// The environment, the Landlock backend's own plan and what it changes (the session
/// directory's TMPDIR and stubs), and the plan itself.
fn finish(
    policy: &Policy,
    facts: &HostFacts,
    fs: &dyn HostFs,
    req: &RunRequest,
    base: Base,
    mut envp: env::EnvPlan,
    shaped: Shaped,
) -> Result<Plan, PlanError> {
    let Base { backend, project, cwd, mut net, groups, hidden, warnings, token_configs, .. } = base;
    let Shaped { mounts, placeholders, git_guard, mail_block, credentials, git_view, keep_out, state_dirs, link_trees } =
        shaped;
    let real = real_roots(fs, &state_dirs.iter().chain(link_trees.iter()).collect::<Vec<_>>());
    let links = LinkPlan { state: state_dirs, hidden: hidden_and_stores(&hidden, vec![]), trees: link_trees, real };
    let git_guard = git_guard.map(|g| GitGuardPlan { links: links.clone(), ..g });
    net.grant_bound = admin_grant_bound(policy);
    credentials::apply(&mut envp.vars, &net.credentials);
    let landlock = (backend == BackendKind::Landlock).then(|| {
        let mut session = landlock_session(facts, req, mail_block);
        if let Some(text) = &git_view.landlock_global {
            landlock_gitconfig(&mut session, text, &mut envp.vars);
        }
        // Every hidden path (their real places are among them: `Base::decide`) as well as the
        // stores: Landlock hides one inside a tree it grants by leaving it out of its rules.
        let hide = hidden_and_stores(&hidden, keep_out);
        // What no read-only rule may grant: the hidden paths, not the agents' directories
        // left out of the trees around them (each gets its own read-only rule).
        let never = hidden_and_stores(&hidden, vec![]);
        let around = StoresAround { stores: &hide, never: &never, project: &project, fs };
        landlock_plan(&mounts, &net, session, facts, req, policy.host_terminals.value, &around)
    });
    jail_env(&mut envp.vars, policy, facts, req, landlock.as_ref());
    let command = jail_command(policy, req, &net, landlock.as_ref());
    Ok(Plan {
        backend,
        command,
        project,
        cwd,
        uid: facts.uid,
        gid: facts.gid,
        user: facts.user.clone(),
        home: facts.home.clone(),
        home_access: policy.home_access.value,
        hostname: policy.hostname.value.clone(),
        mounts,
        anchors: vec![],
        own: vec![],
        home_real: vec![],
        placeholders,
        home_dirs: vec![],
        home_files: vec![],
        home_texts: vec![],
        merges: vec![],
        session_homes: vec![],
        restore: None,
        hidden: hidden.paths,
        credentials,
        env: envp.vars,
        env_removed: envp.removed,
        net,
        seccomp: seccomp_plan(policy, backend),
        landlock,
        git_guard,
        links,
        rejected: facts.state_dir().join("rejected").join(&req.session),
        stripped_configs: token_configs,
        limits: limits_plan(policy),
        groups: match backend {
            BackendKind::Landlock => groups::GroupsPlan::default(),
            _ => groups,
        },
        slurm: chaperon::governor::Settings {
            query_interval: policy.slurm.query_interval.value,
            queries_per_minute: policy.slurm.queries_per_minute.value,
        },
        warnings,
    })
}

/// What `allow` may grant at most: the admin's `net.allow`, when it lists any.
fn admin_grant_bound(policy: &Policy) -> Option<Vec<String>> {
    let admin_allow: Vec<String> =
        policy.net_allow.iter().filter(|e| e.source.is_admin()).map(|e| normalized_rule(&e.value)).collect();
    (!admin_allow.is_empty()).then_some(admin_allow)
}

/// git reads the stripped copy of the user's global config instead of the files, which have
/// no rule (Landlock cannot put a copy over a file).
fn landlock_gitconfig(session: &mut SessionDir, text: &str, vars: &mut Vec<(String, String)>) {
    let path = session.path.join("run").join(hiding::LANDLOCK_GITCONFIG);
    vars.retain(|(k, _)| k != "GIT_CONFIG_GLOBAL");
    vars.push(("GIT_CONFIG_GLOBAL".into(), path.display().to_string()));
    session.files.push((path, text.to_string()));
}

/// The hidden paths and the stores, and `more`, sorted and once each.
fn hidden_and_stores(hidden: &Hidden, more: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut hide: Vec<PathBuf> = hidden.stores().to_vec();
    hide.extend(hidden.paths.iter().cloned());
    hide.extend(more);
    hide.sort();
    hide.dedup();
    hide
}

/// The stubs' directory first on PATH, the session's caches and, under Landlock, its
/// temporary directory and the chaperon's descriptor.
fn jail_env(
    vars: &mut Vec<(String, String)>,
    policy: &Policy,
    facts: &HostFacts,
    req: &RunRequest,
    landlock: Option<&LandlockPlan>,
) {
    let stub_bin = landlock.map_or_else(|| PathBuf::from(crate::stub::STUB_BIN_DIR), |l| l.session.bin.clone());
    // The stubs come first on PATH, so `sendmail` or `sbatch` finds the stub even where no
    // real program exists to cover (and, under Landlock, where none can be covered).
    if let Some((_, v)) = vars.iter_mut().find(|(k, _)| k == "PATH") {
        *v = format!("{}:{v}", stub_bin.display());
    }
    let outside = req.env.as_deref().unwrap_or(&facts.env);
    let Some(ll) = landlock else {
        if matches!(policy.home_access.value, HomeAccess::Read | HomeAccess::Restricted) {
            env::session_caches(vars, outside, Path::new("/tmp"));
        }
        return;
    };
    let set = |vars: &mut Vec<(String, String)>, k: &str, v: String| {
        vars.retain(|(n, _)| n != k);
        vars.push((k.to_string(), v));
    };
    for k in ["TMPDIR", "TMP", "TEMP"] {
        set(vars, k, ll.session.tmp.display().to_string());
    }
    // No home is writable here (no tmpfs): the tools' caches go to the session's.
    env::session_caches(vars, outside, &ll.session.tmp);
    if let Some(fd) = ll.slurm_fd {
        set(vars, SLURM_FD_VAR, fd.to_string());
    }
    vars.sort();
}

/// The command with the credential routes' arguments and, under Landlock, the files the
/// userns jail has under /run/agent-sandbox named where they are in the session directory.
fn jail_command(policy: &Policy, req: &RunRequest, net: &NetPlan, landlock: Option<&LandlockPlan>) -> Vec<String> {
    let mut command = req.command.clone();
    let program =
        policy.agent.as_ref().and_then(|a| a.value.command.as_ref()).and_then(|c| c.first()).map(String::as_str);
    credentials::apply_args(&mut command, program, &net.credentials);
    if let Some(ll) = landlock {
        for arg in &mut command {
            if let Some((_, host)) =
                req.extra_files.iter().zip(&ll.session.files).find(|((t, _), _)| t == Path::new(arg.as_str()))
            {
                *arg = host.0.display().to_string();
            }
        }
    }
    command
}

fn seccomp_plan(policy: &Policy, backend: BackendKind) -> SeccompPlan {
    SeccompPlan {
        nested_userns: policy.nested_userns.value,
        nested_mounts: policy.nested_userns.value && backend == BackendKind::Userns,
        unix_sockets: policy.unix_sockets.value,
        tcp_udp_icmp_only: backend == BackendKind::Landlock,
        own_process_only: backend == BackendKind::Landlock,
    }
}

fn limits_plan(policy: &Policy) -> LimitsPlan {
    LimitsPlan {
        mem: policy.limits.mem.as_ref().map(|l| l.value),
        cpus: policy.limits.cpus.as_ref().map(|l| l.value),
        pids: policy.limits.pids.as_ref().map(|l| l.value),
        timeout: policy.limits.timeout.as_ref().map(|l| l.value),
        by: "rlimits",
    }
}

/// A home entry of the policy (`~/.codex/`, `.config/x`) as a path below the home, or None
/// where it names none (absolute, empty, `..`).
pub(super) fn home_entry(raw: &str) -> Option<PathBuf> {
    let rel = raw.strip_prefix("~/").unwrap_or(raw);
    let p = PathBuf::from(rel);
    let ok = !rel.is_empty() && p.is_relative() && p.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    // Rebuilt from its components: `.codex/` (a directory entry) names `.codex`.
    ok.then(|| p.components().collect())
}

/// A rule as the matcher prints it (`GitHub.com.` -> `github.com`), or as written.
fn normalized_rule(r: &str) -> String {
    r.parse::<crate::netrules::matcher::Rule>().map(|r| r.to_string()).unwrap_or_else(|_| r.to_string())
}

fn entry_err(key: &str, entry: &str, why: &str) -> PlanError {
    PlanError::Entry { key: key.into(), entry: entry.into(), why: why.into() }
}

#[cfg(test)]
mod tests;
