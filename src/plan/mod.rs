//! Plan: a pure function from the effective policy and host facts to what the jail will do
//! (mounts in order, environment, network mode, seccomp set, backend). Nothing here touches
//! the system; `--dry-run` and `policy show` print this value, and the jail only executes it.

pub mod env;
pub mod fs;

pub use fs::MountSpec;

use crate::host::{HostFacts, HostFs, Kind};
use crate::policy::{expand_tilde, Backend, Fallback, HomeAccess, NetMode, Policy};
use fs::{Builder, Hidden};
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
    /// RFC 1918 / CGNAT / ULA floored.
    pub deny_private: bool,
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
    pub nested_userns: bool,
    /// Landlock backend only: `socket(AF_UNIX)` allowed (`process.unix_sockets`).
    pub unix_sockets: bool,
}

/// The git guard (`jail::guard`): the trees in which no git repository may be made and the
/// config and hooks of those there stay read-only. None: off (`filesystem.nested_git`, or
/// the Landlock backend, which cannot protect paths inside the project at all).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct GitGuardPlan {
    /// The project first, then the extra writable paths (`filesystem.write`, `--rw`).
    pub roots: Vec<PathBuf>,
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
    pub path: PathBuf,
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

/// The descriptor the Landlock backend's command inherits the chaperon's channel at: high,
/// so that a script's `exec 3>file` or a shell's own descriptors do not take it.
pub const SLURM_FD: i32 = 1000;
/// Where a stub finds that descriptor's number.
pub const SLURM_FD_VAR: &str = "AGENT_SANDBOX_SLURM_FD";
/// Where a stub finds the pid of the process that keeps the channel for it.
pub const SLURM_KEEPER_VAR: &str = "AGENT_SANDBOX_SLURM_KEEPER";

/// A path the launcher creates empty before the session so that a protected name cannot be
/// created writable inside; removed afterwards if it is still empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placeholder {
    pub path: PathBuf,
    pub dir: bool,
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
    pub placeholders: Vec<Placeholder>,
    pub hidden: Vec<PathBuf>,
    pub env: Vec<(String, String)>,
    pub env_removed: Vec<String>,
    pub net: NetPlan,
    pub seccomp: SeccompPlan,
    pub landlock: Option<LandlockPlan>,
    pub git_guard: Option<GitGuardPlan>,
    pub warnings: Vec<String>,
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
    #[error("nothing to run: the command is empty")]
    EmptyCommand,
    #[error("this kernel cannot keep the jail from making git repositories in the project: {why}")]
    GitGuard { why: String, fix: String },
}

impl PlanError {
    pub fn fix(&self) -> Option<String> {
        match self {
            PlanError::Project { fix, .. }
            | PlanError::Net { fix, .. }
            | PlanError::Backend { fix, .. }
            | PlanError::GitGuard { fix, .. } => Some(format!("fix: {fix}")),
            PlanError::ProtectedSymlink { path } => Some(format!(
                "fix: look at where it points (ls -l {0}) and replace it with a real file or directory",
                path.display()
            )),
            PlanError::Entry { .. } => {
                Some("fix: correct the entry; `agent-sandbox policy show` lists where each came from".into())
            }
            PlanError::EmptyCommand => None,
        }
    }
}

pub fn build(policy: &Policy, facts: &HostFacts, fs: &dyn HostFs, req: &RunRequest) -> Result<Plan, PlanError> {
    if req.command.is_empty() {
        return Err(PlanError::EmptyCommand);
    }
    let home = facts.home_canonical.clone();
    let backend = choose_backend(policy, facts)?;
    let project = check_project(policy, facts, fs, &req.project)?;
    let cwd = fs.canonicalize(&req.cwd).filter(|c| c.starts_with(&project)).unwrap_or_else(|| project.clone());
    let mut warnings = policy.warnings.clone();
    let mut net = choose_net(policy, backend, facts)?;
    (net.rules, net.matcher) = net_rules(policy, facts, &net)?;
    if let Some(f) = &net.fallback {
        warnings.push(f.clone());
    }

    let mut hidden = Hidden::default();
    for h in &policy.hide {
        let p = expand_tilde(&h.value, &home);
        if !p.is_absolute() {
            return Err(entry_err("filesystem.hide", &h.value, "must be absolute or start with ~/"));
        }
        hidden.paths.extend(fs::expand_glob(fs, &p));
    }
    // The state dir holds the session locks and registry the launcher acts on afterwards.
    hidden.paths.push(facts.state_dir());
    // Your own home is shaped by the home mode, never hidden as a whole: `/root` (a floor for
    // everyone else) is root's own home, and an admin's `/home` means the other homes there.
    hidden.paths.retain(|h| !home.starts_with(h) && !facts.home.starts_with(h));
    // The project may not be hidden or sit inside a hidden path.
    if hidden.covers(&project) {
        return Err(PlanError::Project {
            path: project.clone(),
            why: "it lies inside a path the policy hides".into(),
            fix: "choose a project directory outside ~/.ssh, ~/.aws and the other hidden paths".into(),
        });
    }

    let mut b = Builder::new(fs, &hidden);
    // Landlock cannot see through an overlay's whiteouts: it gets the per-entry rebuild, whose
    // entries become its path rules, so hidden paths stay unreachable there too.
    b.overlay = backend == BackendKind::Userns
        && facts.overlay_in_userns
        && policy.hide_with.value == crate::policy::HideWith::Overlay;
    b.mountpoints = &facts.mountpoints;
    let user_line =
        format!("{}:x:{}:{}::{}:{}", facts.user, facts.uid, facts.gid, facts.home.display(), facts.shell.display());
    let synth = |target: &str, contents: String| MountSpec::File { target: target.into(), contents, mode: 0o644 };
    b.overrides.push(synth("/etc/passwd", fs::synth_passwd(&facts.etc_passwd, facts.uid, &user_line)));
    b.overrides.push(synth("/etc/group", fs::synth_group(&facts.etc_group, &facts.user, facts.gid, &facts.group)));
    b.overrides.push(synth("/etc/nsswitch.conf", fs::NSSWITCH.into()));
    b.overrides.push(synth("/etc/hostname", format!("{}\n", policy.hostname.value)));
    if net.jail == JailNet::Tun {
        b.overrides.push(synth("/etc/resolv.conf", crate::netrules::resolv::jail_resolv_conf(&facts.resolv_conf)));
    }
    b.overrides
        .push(synth("/etc/hosts", format!("{}\n127.0.1.1\t{}\n", facts.etc_hosts.trim_end(), policy.hostname.value)));

    // 1. Kernel and scratch filesystems, first: a read-only path the user lists under /tmp
    // or /run must land on top of the private tmpfs, not under it.
    b.push(MountSpec::Proc { target: "/proc".into() });
    dev_mounts(&mut b, policy, fs);
    b.push(MountSpec::Tmpfs { target: "/tmp".into(), mode: 0o1777 });
    b.push(MountSpec::Tmpfs { target: "/var/tmp".into(), mode: 0o1777 });
    b.push(MountSpec::Tmpfs { target: "/run".into(), mode: 0o755 });
    let mail_block = policy.mail_block.value != crate::policy::MailBlock::Off;
    stub_dir(&mut b, facts, mail_block, req);
    // 2. System and site trees, read-only.
    for r in &policy.fs_read {
        let p = check_extra_path("filesystem.read", &r.value, &home, fs)?;
        b.bind_tree(&p, false);
    }
    b.place_remaining_overrides();
    cover_stubbed(&mut b, fs, policy, facts, &home, mail_block);
    // 3. Home.
    let mut writable_trees = vec![project.clone()];
    home_mounts(&mut b, policy, facts, &home, &mut writable_trees, &mut warnings);
    // Home entries made writable by a choice (`--rw ~/x`, a profile's, the user's) are guarded
    // like `filesystem.write` paths; the built-in ones (`~/.cache`) hold tools' clones, which
    // run later anyway (docs/security-model.md).
    let mut guard_roots = vec![project.clone()];
    for e in policy.home_write.iter().filter(|e| e.source != crate::policy::merge::Source::Builtin) {
        let Some(rel) = home_entry(&e.value) else { continue };
        let p = home.join(rel);
        if writable_trees.contains(&p) && fs.kind(&p) == Some(Kind::Dir) {
            guard_roots.push(p);
        }
    }
    // 4. Extra writable paths, then the project.
    for w in &policy.fs_write {
        let p = check_extra_path("filesystem.write", &w.value, &home, fs)?;
        if hidden.covers(&p) {
            return Err(entry_err("filesystem.write", &w.value, "is a hidden path; it cannot be made writable"));
        }
        if fs.kind(&p).is_some() {
            let dir = fs.kind(&p) == Some(Kind::Dir);
            b.push(MountSpec::Bind { source: p.clone(), target: p.clone(), rw: true, dir });
            if dir {
                guard_roots.push(p.clone());
            }
            writable_trees.push(p);
        }
    }
    b.push(MountSpec::Bind { source: project.clone(), target: project.clone(), rw: true, dir: true });
    // 5. Hidden paths inside writable trees cannot vanish; they are covered, empty and read-only.
    for h in hidden.paths.clone() {
        // A home bound as a whole (read/write modes) was rebuilt without its hidden paths.
        let rebuilt =
            |w: &PathBuf| w == &home && matches!(policy.home_access.value, HomeAccess::Read | HomeAccess::Write);
        if writable_trees.iter().any(|w| h.starts_with(w) && &h != w && !rebuilt(w)) {
            if let Some(k) = fs.kind(&h) {
                b.push(MountSpec::Mask { target: h, dir: k == Kind::Dir });
            }
        }
    }
    for f in &policy.hide_files {
        let p = expand_tilde(&f.value, &home);
        for p in fs::expand_glob(fs, &p) {
            if let Some(k) = fs.kind(&p) {
                b.push(MountSpec::Mask { target: p, dir: k == Kind::Dir });
            }
        }
    }
    // 6. Protected paths inside the project (and the launcher's own binary if it is there).
    let mut placeholders = vec![];
    protect(&mut b, fs, policy, &project, &mut placeholders)?;
    if backend == BackendKind::Landlock {
        // Landlock cannot make a path inside the writable project read-only: a placeholder
        // would protect nothing there (docs/security-model.md lists this limit).
        placeholders.clear();
    }
    for w in &writable_trees {
        if facts.exe.starts_with(w) {
            pin_ancestors(&mut b, w, &facts.exe);
            b.push(MountSpec::Bind { source: facts.exe.clone(), target: facts.exe.clone(), rw: false, dir: false });
        }
    }
    // The user's own agent-sandbox config must not be writable from inside (next session's policy).
    if let Some(cfg) = home_config_dir(facts, &home) {
        if writable_trees.iter().any(|w| cfg.starts_with(w)) && fs.kind(&cfg) == Some(Kind::Dir) {
            b.push(MountSpec::Bind { source: cfg.clone(), target: cfg, rw: false, dir: true });
        }
    }
    if policy.home_access.value == HomeAccess::Restricted {
        b.push(MountSpec::ReadOnly { target: home.clone() });
    }
    b.push(MountSpec::ReadOnly { target: "/".into() });

    let shell = if facts.shell.as_os_str().is_empty() { PathBuf::from("/bin/sh") } else { facts.shell.clone() };
    let envp = env::build(
        req.env.as_deref().unwrap_or(&facts.env),
        policy,
        &env::JailVars {
            user: &facts.user,
            home: &facts.home,
            shell: &shell,
            project: &project,
            cwd: &cwd,
            net_mode: net.effective.as_str(),
            proxies: net.jail == JailNet::Proxies,
            backend: backend.as_str(),
            session: &req.session,
        },
    );
    let mut envp = envp;
    let mounts = b.mounts;
    let git_guard = git_guard(policy, facts, backend, guard_roots)?;
    let landlock = (backend == BackendKind::Landlock)
        .then(|| landlock_plan(&mounts, &net, landlock_session(facts, req, mail_block), facts, req));
    let stub_bin =
        landlock.as_ref().map_or_else(|| PathBuf::from(crate::stub::STUB_BIN_DIR), |l| l.session.bin.clone());
    // The stubs come first on PATH, so `sendmail` or `sbatch` finds the stub even where no
    // real program exists to cover (and, under Landlock, where none can be covered).
    if let Some((_, v)) = envp.vars.iter_mut().find(|(k, _)| k == "PATH") {
        *v = format!("{}:{v}", stub_bin.display());
    }
    let mut command = req.command.clone();
    if let Some(ll) = &landlock {
        let set = |vars: &mut Vec<(String, String)>, k: &str, v: String| {
            vars.retain(|(n, _)| n != k);
            vars.push((k.to_string(), v));
        };
        for k in ["TMPDIR", "TMP", "TEMP"] {
            set(&mut envp.vars, k, ll.session.tmp.display().to_string());
        }
        if let Some(fd) = ll.slurm_fd {
            set(&mut envp.vars, SLURM_FD_VAR, fd.to_string());
        }
        envp.vars.sort();
        // A file the userns jail has under /run/agent-sandbox is in the session directory here.
        for arg in &mut command {
            if let Some((_, host)) =
                req.extra_files.iter().zip(&ll.session.files).find(|((t, _), _)| t == Path::new(arg.as_str()))
            {
                *arg = host.0.display().to_string();
            }
        }
    }
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
        placeholders,
        hidden: hidden.paths,
        env: envp.vars,
        env_removed: envp.removed,
        net,
        seccomp: SeccompPlan { nested_userns: policy.nested_userns.value, unix_sockets: policy.unix_sockets.value },
        landlock,
        git_guard,
        warnings,
    })
}

/// Decides the git guard: on in the namespace backend unless `filesystem.nested_git`; a
/// kernel that cannot run it stops the launch rather than run without it.
fn git_guard(
    policy: &Policy,
    facts: &HostFacts,
    backend: BackendKind,
    roots: Vec<PathBuf>,
) -> Result<Option<GitGuardPlan>, PlanError> {
    if policy.nested_git.value || backend != BackendKind::Userns {
        return Ok(None);
    }
    if !facts.guard_kernel {
        return Err(PlanError::GitGuard {
            why: "it needs seccomp user notification with SECCOMP_ADDFD_FLAG_SEND (Linux 5.14 or later)".into(),
            fix: "run on a newer kernel, or set `nested_git = true` under [filesystem] in \
                  ~/.config/agent-sandbox/config.toml to run without this protection (the agent could then \
                  write git hooks and config that your own git runs outside the jail)"
                .into(),
        });
    }
    Ok(Some(GitGuardPlan { roots }))
}

fn entry_err(key: &str, entry: &str, why: &str) -> PlanError {
    PlanError::Entry { key: key.into(), entry: entry.into(), why: why.into() }
}

/// The backend this policy gets on this host: the plan's choice, also asked by the launch
/// before planning (the chaperon's door differs: a socket to bind in, or a channel).
pub fn choose_backend(policy: &Policy, facts: &HostFacts) -> Result<BackendKind, PlanError> {
    let landlock_ok = facts.landlock_abi > 0;
    match policy.backend.value {
        Backend::Userns if !facts.userns.available => Err(PlanError::Backend {
            why: format!(
                "user namespaces are unavailable ({})",
                facts.userns.why_not.clone().unwrap_or_default()
            ),
            fix: "ask your admin to enable unprivileged user namespaces (see `agent-sandbox doctor`), or run with --backend landlock".into(),
        }),
        Backend::Userns => Ok(BackendKind::Userns),
        Backend::Landlock if !landlock_ok => Err(PlanError::Backend {
            why: "the kernel has no Landlock (needs Linux 5.13+ with CONFIG_SECURITY_LANDLOCK and landlock in lsm=)".into(),
            fix: "use the user-namespace backend (--backend userns) or ask your admin to enable Landlock".into(),
        }),
        Backend::Landlock => Ok(BackendKind::Landlock),
        Backend::Auto if facts.userns.available => Ok(BackendKind::Userns),
        Backend::Auto if landlock_ok => Ok(BackendKind::Landlock),
        Backend::Auto => Err(PlanError::Backend {
            why: format!(
                "user namespaces are unavailable ({}) and the kernel has no Landlock",
                facts.userns.why_not.clone().unwrap_or_default()
            ),
            fix: "ask your admin to enable unprivileged user namespaces or Landlock; `agent-sandbox doctor` shows the details".into(),
        }),
    }
}

/// The destination rules, parsed once now so a bad rule stops the launch with its key: into
/// the matcher the supervisor enforces, for the modes that have one (with the host's
/// addresses as a floor); only checked for the others.
#[allow(clippy::type_complexity)]
fn net_rules(
    policy: &Policy,
    facts: &HostFacts,
    net: &NetPlan,
) -> Result<
    (
        Vec<(String, crate::netrules::matcher::Action, crate::netrules::matcher::Layer)>,
        Option<crate::netrules::matcher::RuleSet>,
    ),
    PlanError,
> {
    use crate::netrules::matcher::{Action, Layer, MatcherOptions, Rule, RuleError, RuleSet};
    use std::str::FromStr;
    let layer = |e: &crate::policy::Sourced<String>| if e.source.is_admin() { Layer::Admin } else { Layer::User };
    let rules: Vec<_> = policy
        .net_block
        .iter()
        .map(|e| (e.value.clone(), Action::Block, layer(e)))
        .chain(policy.net_allow.iter().map(|e| (e.value.clone(), Action::Allow, layer(e))))
        .collect();
    let bad = |e: RuleError| PlanError::Entry {
        key: "net.block / net.allow".into(),
        entry: e.rule.clone(),
        why: e.to_string(),
    };
    if net.jail.handed_out() == 0 {
        for (text, _, _) in &rules {
            Rule::from_str(text).map_err(bad)?;
        }
        return Ok((rules, None));
    }
    let opts = MatcherOptions {
        host_addrs: facts.host_addrs().to_vec(),
        deny_private: net.deny_private,
        extra_floor_ports: vec![],
        refresh_host_addrs: Some(crate::host::own_addresses),
    };
    let set = RuleSet::new(&rules, opts).map_err(bad)?;
    Ok((rules, Some(set)))
}

/// Which network modes this build and backend can run, and why not.
pub fn net_available(mode: NetMode, backend: BackendKind, facts: &HostFacts) -> Result<(), String> {
    match (mode, backend) {
        (NetMode::Isolated | NetMode::Open, _) => Ok(()),
        (NetMode::Filtered, BackendKind::Landlock) => {
            Err("the filtered mode needs a network namespace (the Landlock backend has none)".into())
        }
        (NetMode::Filtered, BackendKind::Userns) => match &facts.tun_unusable {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        },
        (NetMode::Proxied, BackendKind::Landlock) => {
            Err("the proxied mode needs a network namespace (the Landlock backend has none)".into())
        }
        (NetMode::Proxied, BackendKind::Userns) => Ok(()),
    }
}

fn choose_net(policy: &Policy, backend: BackendKind, facts: &HostFacts) -> Result<NetPlan, PlanError> {
    let asked = policy.net_mode.value;
    let mut upstreams: Vec<std::net::SocketAddr> =
        policy.net_dns.value.iter().map(|ip| std::net::SocketAddr::new(*ip, 53)).collect();
    if upstreams.is_empty() {
        upstreams = crate::netrules::resolv::host_resolvers(&facts.resolv_conf);
    }
    let plan = |effective: NetMode, fallback: Option<String>| NetPlan {
        requested: asked,
        effective,
        jail: JailNet::of(effective),
        rules: vec![],
        matcher: None,
        fallback,
        upstreams: upstreams.clone(),
        hostname_ports: HOSTNAME_PORTS.to_vec(),
        host_ports: policy.net_host_ports.value.clone(),
        publish: policy.net_publish.value.clone(),
        deny_private: policy.net_deny_private.value || effective == NetMode::Proxied,
    };
    let Err(why) = net_available(asked, backend, facts) else {
        return Ok(plan(asked, None));
    };
    let fallback = policy.net_fallback.value;
    let chosen = match fallback {
        Fallback::Strict => None,
        Fallback::Stricter => {
            NetMode::ALL.iter().copied().find(|m| *m > asked && net_available(*m, backend, facts).is_ok())
        }
        Fallback::Open => Some(NetMode::Open),
    };
    match chosen {
        Some(effective) => Ok(plan(
            effective,
            Some(format!(
                "network mode `{asked}` is unavailable ({why}); net.fallback = \"{fallback}\" chose `{effective}`"
            )),
        )),
        None => Err(PlanError::Net {
            asked,
            why,
            fix: "pick another mode with --net, or set net.fallback = \"stricter\"".into(),
        }),
    }
}

/// The project checks that need no policy: run before any policy file is read, so a bad
/// project (`/`, `~`) is reported as such and not as a side effect elsewhere.
pub fn check_project_basics(facts: &HostFacts, fs: &dyn HostFs, asked: &Path) -> Result<PathBuf, PlanError> {
    let err = |why: &str, fix: &str| PlanError::Project { path: asked.to_path_buf(), why: why.into(), fix: fix.into() };
    let project =
        fs.canonicalize(asked).ok_or_else(|| err("it does not exist", "create it first, or pass --project DIR"))?;
    if fs.kind(&project) != Some(Kind::Dir) {
        return Err(err("it is not a directory", "pass --project DIR with a directory"));
    }
    if project == Path::new("/") {
        return Err(err(
            "`/` cannot be a project",
            "cd into your project (a directory under your home or scratch space)",
        ));
    }
    if facts.home_canonical.starts_with(&project) {
        return Err(err(
            "it is your home directory or one of its parents; the whole home would become writable",
            "cd into a project directory under your home, e.g. ~/myproject",
        ));
    }
    Ok(project)
}

fn check_project(policy: &Policy, facts: &HostFacts, fs: &dyn HostFs, asked: &Path) -> Result<PathBuf, PlanError> {
    let err = |why: &str, fix: &str| PlanError::Project { path: asked.to_path_buf(), why: why.into(), fix: fix.into() };
    let project = check_project_basics(facts, fs, asked)?;
    if let Some(exe_dir) = facts.exe.parent() {
        if project.starts_with(exe_dir) {
            return Err(err(
                "it is agent-sandbox's install directory",
                "run agent-sandbox from your project directory",
            ));
        }
    }
    // Most projects sit under a parent as written (~, /scratch): only canonicalize the
    // parents (a few syscalls each) when none matches literally.
    let literal: Vec<PathBuf> = policy.project_parents.iter().map(|p| expand_tilde(&p.value, &facts.home)).collect();
    let inside = |parents: &[PathBuf]| parents.iter().any(|p| project.starts_with(p) && &project != p);
    let canonical: Vec<PathBuf>;
    let parents = if inside(&literal) {
        &literal
    } else {
        canonical = literal.iter().map(|p| fs.canonicalize(p).unwrap_or_else(|| p.clone())).collect();
        &canonical
    };
    if !inside(parents) {
        let list: Vec<String> = parents.iter().map(|p| p.display().to_string()).collect();
        return Err(err(
            &format!("it is not under an allowed parent ({})", list.join(", ")),
            "move the project under one of those, or ask your admin to add its parent to sandbox.project_parents",
        ));
    }
    Ok(project)
}

/// Extra read/write paths: absolute, never `/`, never home or its parents, not inside home
/// (home entries go through `home.read`/`home.write`, which know the home modes).
fn check_extra_path(key: &str, raw: &str, home: &Path, fs: &dyn HostFs) -> Result<PathBuf, PlanError> {
    if raw.starts_with('~') {
        return Err(entry_err(key, raw, "paths in your home belong in home.read or home.write"));
    }
    let p = PathBuf::from(raw);
    if !p.is_absolute() || p.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(entry_err(key, raw, "must be an absolute path without `..`"));
    }
    let canon = fs.canonicalize(&p).unwrap_or_else(|| p.clone());
    for candidate in [&p, &canon] {
        if home.starts_with(candidate) {
            return Err(entry_err(
                key,
                raw,
                "would expose home directories (yours and other users'); list the subdirectory you need",
            ));
        }
        if candidate.starts_with(home) {
            return Err(entry_err(
                key,
                raw,
                "is inside your home; use home.read / home.write (--ro/--rw accept it there)",
            ));
        }
    }
    Ok(p)
}

fn dev_mounts(b: &mut Builder<'_>, policy: &Policy, fs: &dyn HostFs) {
    b.push(MountSpec::Tmpfs { target: "/dev".into(), mode: 0o755 });
    for d in ["null", "zero", "full", "random", "urandom", "tty"] {
        let p = PathBuf::from(format!("/dev/{d}"));
        b.push(MountSpec::Device { source: p.clone(), target: p });
    }
    b.push(MountSpec::Devpts { target: "/dev/pts".into() });
    b.push(MountSpec::Symlink { target: "/dev/ptmx".into(), link: "pts/ptmx".into() });
    b.push(MountSpec::Tmpfs { target: "/dev/shm".into(), mode: 0o1777 });
    for (name, to) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("core", "/proc/kcore"),
    ] {
        if name != "core" {
            b.push(MountSpec::Symlink { target: format!("/dev/{name}").into(), link: to.into() });
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for g in &policy.devices {
        for p in fs::expand_glob(fs, Path::new(&g.value)) {
            let denied = policy.deny_devices.iter().any(|d| crate::glob::glob_match(&d.value, &p.to_string_lossy()));
            // The host's /dev/pts must never be bound in: it would hand out other terminals.
            let host_pts = p.starts_with("/dev/pts");
            if !denied
                && !host_pts
                && p.starts_with("/dev")
                && fs.kind(&p) == Some(Kind::Char)
                && seen.insert(p.clone())
            {
                b.push(MountSpec::Device { source: p.clone(), target: p });
            }
        }
    }
    b.push(MountSpec::ReadOnly { target: "/dev".into() });
}

fn home_config_dir(facts: &HostFacts, home: &Path) -> Option<PathBuf> {
    let base = facts
        .env_var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".config"));
    Some(base.join("agent-sandbox"))
}

fn home_entry(raw: &str) -> Option<PathBuf> {
    let rel = raw.strip_prefix("~/").unwrap_or(raw);
    let p = PathBuf::from(rel);
    let ok = !rel.is_empty() && p.is_relative() && p.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    ok.then_some(p)
}

fn home_mounts(
    b: &mut Builder<'_>,
    policy: &Policy,
    facts: &HostFacts,
    home: &Path,
    writable: &mut Vec<PathBuf>,
    warnings: &mut Vec<String>,
) {
    if facts.home != facts.home_canonical {
        // `$HOME` is reached through a symlink on the host (e.g. /home -> /gpfs/home): keep
        // the name the user and the password database use working inside.
        b.push(MountSpec::Symlink { target: facts.home.clone(), link: home.to_path_buf() });
    }
    // Homes often live on NFS, GPFS or Lustre, where an overlay's lower layer is not
    // dependable: every tree under the home is rebuilt entry by entry.
    let overlay = std::mem::replace(&mut b.overlay, false);
    home_trees(b, policy, home, writable, warnings);
    b.overlay = overlay;
}

fn home_trees(
    b: &mut Builder<'_>,
    policy: &Policy,
    home: &Path,
    writable: &mut Vec<PathBuf>,
    warnings: &mut Vec<String>,
) {
    match policy.home_access.value {
        HomeAccess::Read | HomeAccess::Write => {
            let rw = policy.home_access.value == HomeAccess::Write;
            b.bind_tree(home, rw);
            if rw {
                writable.push(home.to_path_buf());
            } else {
                // A read-only home still lets the agent write its own listed entries (~/.codex).
                for e in &policy.home_write {
                    let Some(rel) = home_entry(&e.value) else { continue };
                    let p = home.join(rel);
                    if !b.hidden.covers(&p) && b.fs.kind(&p).is_some() {
                        let dir = b.fs.kind(&p) == Some(Kind::Dir);
                        b.push(MountSpec::Bind { source: p.clone(), target: p.clone(), rw: true, dir });
                        writable.push(p);
                    }
                }
            }
        }
        HomeAccess::Tmpwrite | HomeAccess::Restricted => {
            b.push(MountSpec::Tmpfs { target: home.to_path_buf(), mode: 0o700 });
            let mut entries = |list: &crate::policy::merge::List, rw: bool, key: &str, b: &mut Builder<'_>| {
                for e in list {
                    let Some(rel) = home_entry(&e.value) else {
                        warnings.push(format!("{key}: `{}` is not a plain path relative to ~; ignored", e.value));
                        continue;
                    };
                    let p = home.join(rel);
                    if b.hidden.covers(&p) {
                        warnings.push(format!("{key}: `{}` is hidden by policy; not bound", e.value));
                        continue;
                    }
                    if b.fs.kind(&p).is_none() {
                        continue;
                    }
                    if rw {
                        let dir = b.fs.kind(&p) == Some(Kind::Dir);
                        b.push(MountSpec::Bind { source: p.clone(), target: p.clone(), rw: true, dir });
                        writable.push(p);
                    } else {
                        b.bind_tree(&p, false);
                    }
                }
            };
            entries(&policy.home_read, false, "home.read", b);
            entries(&policy.home_write, true, "home.write", b);
            for s in &policy.home_seed {
                if let Some(rel) = home_entry(&s.value) {
                    let p = home.join(rel);
                    if !b.hidden.covers(&p) && b.fs.kind(&p) == Some(Kind::File) {
                        b.push(MountSpec::Copy { source: p.clone(), target: p });
                    }
                }
            }
        }
    }
}

/// Binds each ancestor directory between `root` (exclusive) and `p` (exclusive) onto itself,
/// so that renaming or removing an ancestor (to swap in a fresh, writable copy) fails with EBUSY.
fn pin_ancestors(b: &mut Builder<'_>, root: &Path, p: &Path) {
    let mut chain: Vec<PathBuf> =
        p.ancestors().skip(1).take_while(|a| *a != root && a.starts_with(root)).map(Path::to_path_buf).collect();
    chain.reverse();
    for a in chain {
        let pin = MountSpec::Pin { target: a };
        if !b.mounts.contains(&pin) {
            b.push(pin);
        }
    }
}

fn protect(
    b: &mut Builder<'_>,
    fs: &dyn HostFs,
    policy: &Policy,
    project: &Path,
    placeholders: &mut Vec<Placeholder>,
) -> Result<(), PlanError> {
    for entry in &policy.protected {
        let want_dir = entry.value.ends_with('/');
        let Some(rel) = home_entry(entry.value.trim_end_matches('/')) else {
            return Err(entry_err(
                "filesystem.protected",
                &entry.value,
                "must be a relative path inside the project without `..`",
            ));
        };
        let full = project.join(&rel);
        let globbed = crate::glob::has_glob(&full.to_string_lossy());
        let matches: Vec<PathBuf> = fs::expand_glob(fs, &full).into_iter().filter(|m| fs.kind(m).is_some()).collect();
        if matches.is_empty() && !globbed {
            // Missing: create the first missing component as an empty placeholder and make it
            // read-only, so the name cannot be created writable during the session.
            let mut first_missing = project.to_path_buf();
            for c in rel.components() {
                first_missing.push(c);
                if fs.kind(&first_missing).is_none() {
                    break;
                }
            }
            if fs.kind(&first_missing).is_some() {
                continue;
            }
            let dir = want_dir || first_missing != full;
            let ph = Placeholder { path: first_missing.clone(), dir };
            if !placeholders.contains(&ph) {
                pin_ancestors(b, project, &first_missing);
                placeholders.push(ph);
                b.push(MountSpec::Bind { source: first_missing.clone(), target: first_missing, rw: false, dir });
            }
            continue;
        }
        for m in matches {
            match fs.kind(&m) {
                Some(Kind::Symlink) => return Err(PlanError::ProtectedSymlink { path: m }),
                Some(k) => {
                    if placeholders.iter().any(|ph| m.starts_with(&ph.path)) {
                        continue;
                    }
                    pin_ancestors(b, project, &m);
                    b.push(MountSpec::Bind { source: m.clone(), target: m, rw: false, dir: k == Kind::Dir });
                }
                None => {}
            }
        }
    }
    Ok(())
}

/// The host's temp trees every user shares; the userns jail gets private tmpfs instead.
const SHARED_TMP: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// The Landlock backend cannot build a new root, so the same mount list becomes path rules.
/// The scratch tmpfs of the userns jail have no rule: the host's shared `/tmp`, `/var/tmp`
/// and `/dev/shm` stay denied (unless the policy binds one itself), and the session's own
/// directory stands in for them, for `/run/agent-sandbox` and for PID 1.
fn landlock_plan(
    mounts: &[MountSpec],
    net: &NetPlan,
    session: SessionDir,
    facts: &HostFacts,
    req: &RunRequest,
) -> LandlockPlan {
    let (mut ro, mut rw) = (vec![], vec![]);
    for m in mounts {
        match m {
            // What the userns jail has under /run/agent-sandbox is in the session directory.
            m if m.target().starts_with(crate::stub::STUB_DIR) => {}
            MountSpec::Bind { source, rw: true, .. } | MountSpec::Device { source, .. } => rw.push(source.clone()),
            MountSpec::Bind { source, rw: false, .. } => ro.push(source.clone()),
            MountSpec::TreeBind { source, .. } if tree_rw(mounts, source) => rw.push(source.clone()),
            MountSpec::TreeBind { source, .. } => ro.push(source.clone()),
            MountSpec::File { target, .. } | MountSpec::Copy { source: target, .. } => ro.push(target.clone()),
            MountSpec::Proc { target } => ro.push(target.clone()),
            MountSpec::Devpts { target } => {
                rw.push(target.clone());
                rw.push("/dev/ptmx".into());
            }
            _ => {}
        }
    }
    // The stubs are links to the binary: it must be readable where it is.
    ro.push(facts.exe.clone());
    ro.push(session.bin.clone());
    if !session.files.is_empty() {
        ro.push(session.path.join("run"));
    }
    rw.push(session.tmp.clone());
    // One rule per path (the binary is bound under many names in the userns jail).
    for list in [&mut ro, &mut rw] {
        let mut seen = std::collections::BTreeSet::new();
        list.retain(|p| seen.insert(p.clone()));
    }
    let denied_shared =
        SHARED_TMP.iter().map(PathBuf::from).filter(|t| !ro.iter().chain(&rw).any(|r| r == t)).collect();
    LandlockPlan {
        read_only: ro,
        read_write: rw,
        denied_shared,
        deny_tcp_connect: crate::netrules::floor::floor_ports().collect(),
        deny_all_tcp: net.jail == JailNet::Loopback,
        session,
        sweep: if facts.landlock_abi >= 6 { Sweep::ScopedKill } else { Sweep::ProcWalk },
        slurm_fd: req.chaperon_channel.then_some(SLURM_FD),
    }
}

/// The Landlock session's own directory (see `SessionDir`).
fn landlock_session(facts: &HostFacts, req: &RunRequest, mail_block: bool) -> SessionDir {
    let base = match &facts.runtime_dir {
        Some(r) => r.join("agent-sandbox/landlock"),
        None => facts.state_dir().join("landlock"),
    };
    let session: String = req.session.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(64).collect();
    let path = base.join(format!("{}-{session}", facts.pid));
    let mail: &[&str] = if mail_block { crate::stub::mail::MAILERS } else { &[] };
    let files = req
        .extra_files
        .iter()
        .map(|(target, contents)| {
            let name = target.strip_prefix(crate::stub::STUB_DIR).unwrap_or(target);
            (path.join("run").join(name.file_name().unwrap_or(name.as_os_str())), contents.clone())
        })
        .collect();
    SessionDir {
        tmp: path.join("tmp"),
        bin: path.join("bin"),
        exe: facts.exe.clone(),
        stubs: mail.iter().chain(crate::stub::slurm::SLURM_STUBS).map(|s| s.to_string()).collect(),
        files,
        base,
        path,
    }
}

/// The jail's stub directory: the agent-sandbox binary, the chaperon's socket and, first on
/// PATH, a link to it under every Slurm command's (and mailer's) name; read-only once filled.
fn stub_dir(b: &mut Builder<'_>, facts: &HostFacts, mail_block: bool, req: &RunRequest) {
    use crate::stub::{STUB_BIN_DIR, STUB_DIR, STUB_EXE};
    b.push(MountSpec::Tmpfs { target: STUB_DIR.into(), mode: 0o755 });
    b.push(MountSpec::Bind { source: facts.exe.clone(), target: STUB_EXE.into(), rw: false, dir: false });
    // One bind of a directory of links the launcher keeps in the state dir, instead of one
    // symlink call per name at every start (`stub::ensure_links`).
    b.push(MountSpec::Bind {
        source: crate::stub::links_dir(&facts.state_dir(), mail_block),
        target: STUB_BIN_DIR.into(),
        rw: false,
        dir: true,
    });
    if let Some(sock) = &req.chaperon_socket {
        let target = crate::stub::slurm::SOCKET.into();
        b.push(MountSpec::Bind { source: sock.clone(), target, rw: false, dir: false });
    }
    for (target, contents) in &req.extra_files {
        b.push(MountSpec::File { target: target.clone(), contents: contents.clone(), mode: 0o555 });
    }
    b.push(MountSpec::ReadOnly { target: STUB_DIR.into() });
}

/// Every real Slurm command (and mailer, when mail is blocked) the jail could run by absolute
/// path gets the stub bound over it (over the file a symlink leads to, when that file is
/// inside a tree the jail sees).
fn cover_stubbed(b: &mut Builder<'_>, fs: &dyn HostFs, policy: &Policy, facts: &HostFacts, home: &Path, mail: bool) {
    let visible: Vec<PathBuf> =
        policy.fs_read.iter().map(|r| PathBuf::from(&r.value)).filter(|p| p.is_absolute()).collect();
    let mut covered: Vec<PathBuf> = vec![];
    for p in &facts.mailers {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !mail && !crate::stub::slurm::SLURM_STUBS.contains(&name) {
            continue;
        }
        let Some(kind) = fs.kind(p) else { continue };
        let real = if kind == Kind::Symlink { fs.canonicalize(p) } else { Some(p.clone()) };
        let Some(real) = real else { continue };
        // A symlinked mailer's target is covered only if it is a mailer (or Slurm command)
        // itself: msmtp-mta's `newaliases -> /bin/true` must not make `true` the stub. The
        // name stays covered on PATH; by its absolute path it runs what it links to.
        let target_name = real.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let stubbed_name =
            |n: &str| crate::stub::mail::MAILERS.contains(&n) || crate::stub::slurm::SLURM_STUBS.contains(&n);
        if kind == Kind::Symlink && !stubbed_name(target_name) {
            continue;
        }
        let seen = visible.iter().any(|v| fs::under(&real, v) || fs::under(p, v));
        if !seen || real.starts_with(home) || b.hidden.covers(&real) || covered.contains(&real) {
            continue;
        }
        if fs.kind(&real) == Some(Kind::File) {
            b.push(MountSpec::Bind { source: facts.exe.clone(), target: real.clone(), rw: false, dir: false });
            covered.push(real);
        }
    }
}

/// Whether the rebuilt tree holding `p` is writable (its `SealTree` says so).
fn tree_rw(mounts: &[MountSpec], p: &Path) -> bool {
    mounts.iter().any(|m| matches!(m, MountSpec::SealTree { target, rw: true } if fs::under(p, target)))
}

#[cfg(test)]
mod tests;
