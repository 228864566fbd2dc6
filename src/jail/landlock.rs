//! Landlock fallback backend: confines the calling thread (and everything it later
//! executes) when unprivileged user namespaces are unavailable. Filesystem access is an
//! allow-list of read-only and read-write trees; TCP connect/bind is filtered per port on
//! ABI >= 4; signal and abstract-unix scoping on ABI >= 6. Fails closed without Landlock.
//! Call [`apply`] in the single-threaded child right before `exec`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ::landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};

/// What the sandbox may reach. Everything not listed is denied.
#[derive(Debug, Clone, Default)]
pub struct LandlockRules {
    /// Read + execute beneath these paths (directories or single files).
    pub read_only: Vec<PathBuf>,
    /// Full access beneath these paths.
    pub read_write: Vec<PathBuf>,
    /// TCP ports the sandbox may never connect to (the port floor: SMTP 25, 465, 587, DoT 853, ...).
    pub deny_tcp_connect: Vec<u16>,
    /// If true, no TCP connect or bind at all (network mode "isolated").
    pub deny_all_tcp: bool,
    /// Forbid signals to processes outside the sandbox (ABI >= 6).
    pub scope_signals: bool,
    /// Forbid connecting to abstract unix sockets created outside the sandbox (ABI >= 6).
    pub scope_abstract_unix: bool,
    /// What the plan checked of the rules' paths (`plan::anchor`): such a rule is added on
    /// the descriptor `jail::anchor` opens, or the launch stops.
    pub anchors: Vec<crate::plan::anchor::Anchor>,
    /// A plan's rules: a path without an anchor is granted by name only inside these trees
    /// (the launcher's own: `Plan::own`), skipped where nothing is, refused anywhere else
    /// (it appeared after the plan looked, unchecked). None: rules of no plan (tests).
    pub own: Option<Vec<PathBuf>>,
}

/// What [`apply`] actually enforced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LandlockStatus {
    /// Landlock ABI version of the running kernel.
    pub abi: u32,
    /// Filesystem allow-list enforced (always true on success).
    pub fs: bool,
    /// A TCP restriction (port floor or isolation) was asked for and is enforced.
    pub tcp: bool,
    /// Every asked scope (signals, abstract unix sockets) is enforced; false if none asked.
    pub scopes: bool,
    /// Plain-English list of protections missing versus the namespace backend and the rules.
    pub weaker: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The kernel has no usable Landlock: refusing to run unsandboxed.
    #[error("Landlock is unavailable on this kernel ({0}); refusing to run unsandboxed")]
    Unavailable(io::Error),
    /// A rule path exists but could not be opened or inspected.
    #[error("cannot open sandbox path {path}: {source}")]
    Path { path: PathBuf, source: io::Error },
    /// The landlock crate refused to build or enforce the ruleset.
    #[error("Landlock ruleset error: {0}")]
    Ruleset(#[from] RulesetError),
    /// The kernel accepted the ruleset but did not enforce all of it.
    #[error("Landlock ruleset not fully enforced: {0:?}")]
    NotEnforced(RulesetStatus),
    /// `PR_SET_NO_NEW_PRIVS` could not be set.
    #[error("no_new_privs could not be set")]
    NoNewPrivs,
}

/// Confine the calling thread and its future children with `rules`.
///
/// Handles every filesystem right the running ABI knows, so nothing outside
/// `read_only`/`read_write` is reachable. Missing paths are skipped. Sets no_new_privs.
/// Errors (fail closed) if the kernel has no Landlock or anything asked for and claimed
/// in the returned status is not fully enforced.
pub fn apply(rules: &LandlockRules) -> Result<LandlockStatus, LandlockError> {
    let abi_num = crate::host::landlock_kernel_abi().map_err(LandlockError::Unavailable)?;
    // Rights of the running kernel's ABI (capped at the newest ABI the crate knows), so every
    // requested right is supported and HardRequirement never silently drops one.
    let abi = ABI::from(i32::try_from(abi_num).unwrap_or(i32::MAX));
    let fs_all = AccessFs::from_all(abi);
    // Connecting to a pathname unix socket (ABI 9 ResolveUnix) is not a write: allow it in
    // read-only trees too, as a read-only bind mount would (e.g. munge, nscd sockets).
    let fs_read = AccessFs::from_read(abi) | (fs_all & AccessFs::ResolveUnix);
    let file_mask = AccessFs::from_file(abi);

    let tcp_asked = rules.deny_all_tcp || !rules.deny_tcp_connect.is_empty();
    let tcp = tcp_asked && abi_num >= 4;
    let scopes_asked = rules.scope_signals || rules.scope_abstract_unix;
    let scopes = scopes_asked && abi_num >= 6;

    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement).handle_access(fs_all)?;
    if tcp {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    if scopes {
        let mut scope = BitFlags::<Scope>::empty();
        if rules.scope_signals {
            scope |= Scope::Signal;
        }
        if rules.scope_abstract_unix {
            scope |= Scope::AbstractUnixSocket;
        }
        ruleset = ruleset.scope(scope)?;
    }
    let mut created = ruleset.create()?;

    let root = match rules.anchors.is_empty() {
        true => None,
        false => open_path(Path::new("/"))?.map(|(f, _)| f),
    };
    for (paths, access) in [(&rules.read_only, fs_read), (&rules.read_write, fs_all)] {
        for path in paths {
            let anchor = rules.anchors.iter().find(|a| a.path == *path);
            let by_name = match &rules.own {
                None => true,
                Some(own) => own.iter().any(|o| path.starts_with(o)),
            };
            let opened = match (anchor, &root) {
                (Some(a), Some(root)) => Some(open_anchored(root, a)?),
                _ if by_name => open_path(path)?,
                _ => unchecked(path)?,
            };
            let Some((fd, is_dir)) = opened else {
                continue;
            };
            let access = if is_dir { access } else { access & file_mask };
            (&mut created).add_rule(PathBeneath::new(fd, access))?;
        }
    }

    if tcp && !rules.deny_all_tcp {
        // Landlock TCP is an allow-list: allow bind on every port, connect on all but the floor.
        let mut denied = vec![false; 1 << 16];
        for &port in &rules.deny_tcp_connect {
            denied[usize::from(port)] = true;
        }
        for port in 0..=u16::MAX {
            let access = if denied[usize::from(port)] {
                BitFlags::from(AccessNet::BindTcp)
            } else {
                AccessNet::BindTcp | AccessNet::ConnectTcp
            };
            (&mut created).add_rule(NetPort::new(port, access))?;
        }
    }

    let status = created.restrict_self()?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(LandlockError::NotEnforced(status.ruleset));
    }
    if !status.no_new_privs {
        return Err(LandlockError::NoNewPrivs);
    }

    Ok(LandlockStatus { abi: abi_num, fs: true, tcp, scopes, weaker: weaker(rules, abi_num) })
}

/// Puts the calling thread into a further, nested domain that only scopes signals and
/// abstract unix sockets (ABI 6+). A process left in the outer domain (the Landlock
/// backend's sweeper) can then signal everything below it, while nothing below can signal
/// it back. Every layer denies moving a file to another directory unless one of its rules
/// grants `Refer` there (EXDEV: submitit's and git's renames), so this one grants it beneath
/// `/` and leaves the decision to the outer layer.
pub fn scope_nested() -> Result<(), LandlockError> {
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::Refer)?
        .scope(Scope::Signal | Scope::AbstractUnixSocket)?
        .create()?;
    let Some((root, _)) = open_path(Path::new("/"))? else {
        return Err(LandlockError::Path { path: "/".into(), source: io::Error::from_raw_os_error(libc::ENOENT) });
    };
    (&mut created).add_rule(PathBeneath::new(root, AccessFs::Refer))?;
    let status = created.restrict_self()?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(LandlockError::NotEnforced(status.ruleset));
    }
    Ok(())
}

/// The path the plan checked, opened as it checked it (`jail::anchor`).
fn open_anchored(root: &File, a: &crate::plan::anchor::Anchor) -> Result<(File, bool), LandlockError> {
    let err = |source| LandlockError::Path { path: a.path.clone(), source };
    let fd = crate::jail::anchor::open_anchored(root, a).map_err(err)?;
    let file = File::from(fd);
    let is_dir = file.metadata().map_err(err)?.is_dir();
    Ok((file, is_dir))
}

/// A rule's path the plan did not anchor: no rule where nothing is (as the plan found it);
/// refused where something is now (made after the plan looked, by whoever could: it is not
/// granted by name, which would follow a link put there).
fn unchecked(path: &Path) -> Result<Option<(File, bool)>, LandlockError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(None),
        _ => Err(LandlockError::Path {
            path: path.to_path_buf(),
            source: crate::jail::anchor::changed_error(
                "it was not checked by the launch (nothing was there when it looked): it is not granted by name, \
                 which could follow a link put there since"
                    .into(),
            ),
        }),
    }
}

/// Opens `path` with `O_PATH`; `None` if it (or a parent component) does not exist.
fn open_path(path: &Path) -> Result<Option<(File, bool)>, LandlockError> {
    let err = |source| LandlockError::Path { path: path.to_path_buf(), source };
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_CLOEXEC).open(path) {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let is_dir = file.metadata().map_err(err)?.is_dir();
    Ok(Some((file, is_dir)))
}

/// ABI that introduced pathname unix socket filtering (`AccessFs::ResolveUnix`).
const ABI_RESOLVE_UNIX: u32 = 9;
/// Newest ABI whose rights this build handles.
const ABI_NEWEST_KNOWN: u32 = 10;

fn weaker(rules: &LandlockRules, abi: u32) -> Vec<String> {
    let mut w: Vec<String> = [
        "no PID namespace: host processes are visible in /proc and keep their host PIDs",
        "hidden paths inside an allowed tree cannot be masked: Landlock only allows, so hidden \
         files must lie outside every allowed tree",
        "no mount namespace: no private /dev; the host filesystem layout is shared, limited only \
         by access rights (the host's /tmp, /var/tmp and /dev/shm are denied, TMPDIR is the session's own)",
        "file metadata is not restricted: stat/access/readlink/chdir work on any path, and \
         chmod/chown/utimes/xattr/flock are not blocked by Landlock",
        "no network namespace: the host network stack, interfaces and loopback services are shared",
        "UDP is not filtered by Landlock: DNS, QUIC and any UDP traffic reach the network",
        "no IPC namespace: SysV IPC and POSIX message queues of the same user are reachable",
        "file descriptors inherited from before the sandbox keep their access",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    if abi < 3 {
        w.push(format!(
            "truncate is not restricted: files outside read_write can be truncated (needs ABI 3, kernel has {abi})"
        ));
    }
    if abi < 5 {
        w.push(format!("ioctl on device files is not restricted (needs ABI 5, kernel has {abi})"));
    }
    if abi < ABI_RESOLVE_UNIX {
        w.push(format!(
            "pathname unix sockets anywhere can be connected to if process.unix_sockets allows creating them \
             (needs ABI {ABI_RESOLVE_UNIX}, kernel has {abi})"
        ));
    }
    if abi > ABI_NEWEST_KNOWN {
        w.push(format!(
            "kernel ABI {abi} is newer than this build knows ({ABI_NEWEST_KNOWN}): newer access rights are not handled"
        ));
    }
    if abi < 4 {
        if rules.deny_all_tcp {
            w.push(format!("network isolation cannot block TCP connect/bind: needs ABI 4, kernel has {abi}"));
        } else if !rules.deny_tcp_connect.is_empty() {
            w.push(format!("TCP port floor needs ABI 4, kernel has {abi}"));
        }
    }
    for (asked, what) in [
        (rules.scope_signals, "signals to host processes of the same user are not blocked"),
        (rules.scope_abstract_unix, "abstract unix sockets outside the sandbox (e.g. X11, D-Bus) are reachable"),
    ] {
        if !asked {
            w.push(format!("{what} (scope not requested)"));
        } else if abi < 6 {
            w.push(format!("{what}: scoping needs ABI 6, kernel has {abi}"));
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
    use std::process::Command;
    use std::time::Instant;

    const SCENARIO_ENV: &str = "AGENT_SANDBOX_LANDLOCK_SCENARIO";
    const DIR_ENV: &str = "AGENT_SANDBOX_LANDLOCK_DIR";

    /// libtest name of a test in this module (module_path! minus the crate name).
    fn test_name(f: &str) -> String {
        let m = module_path!();
        let m = m.split_once("::").map_or(m, |(_, rest)| rest);
        format!("{m}::{f}")
    }

    /// Re-executes this test binary running only `test` with the scenario env set, so
    /// Landlock is applied in a fresh single-purpose process, never in the harness.
    fn run_in_child(test: &str, dir: Option<&Path>) {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"]).env(SCENARIO_ENV, test);
        if let Some(d) = dir {
            cmd.env(DIR_ENV, d);
        }
        let out = cmd.output().expect("spawn child");
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprint!("{stderr}");
        assert_eq!(out.status.code(), Some(0), "child scenario {test} failed: {stderr}");
    }

    /// In the child: runs `body`, exits with its code (0 = pass). Returns in the parent.
    fn child_scenario(test: &str, body: impl FnOnce() -> Result<(), String>) -> bool {
        if std::env::var(SCENARIO_ENV).as_deref() != Ok(test) {
            return false;
        }
        let code = match body() {
            Ok(()) => 0,
            Err(msg) => {
                eprintln!("[{test}] FAIL: {msg}");
                1
            }
        };
        let _ = io::stderr().flush();
        std::process::exit(code);
    }

    fn errno_of(r: io::Result<impl Sized>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    fn expect_errno(what: &str, r: io::Result<impl Sized>, errno: i32) -> Result<(), String> {
        match errno_of(r) {
            Some(e) if e == errno => Ok(()),
            other => Err(format!("{what}: expected errno {errno}, got {other:?}")),
        }
    }

    fn scratch_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("agent-sandbox-landlock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir scratch");
        d
    }

    fn apply_or_err(rules: &LandlockRules) -> Result<LandlockStatus, String> {
        apply(rules).map_err(|e| format!("apply: {e}"))
    }

    #[test]
    fn detect_abi_reports_landlock() {
        assert!(crate::host::landlock_abi() >= 1, "Landlock not available on this host");
    }

    #[test]
    fn fs_allow_list() {
        if child_scenario(&test_name("fs_allow_list"), || {
            let base = PathBuf::from(std::env::var(DIR_ENV).map_err(|e| e.to_string())?);
            let rules = LandlockRules {
                read_only: vec![base.join("ro"), base.join("does-not-exist"), base.join("single")],
                read_write: vec![base.join("rw")],
                ..Default::default()
            };
            let st = apply_or_err(&rules)?;
            eprintln!("[fs] status: {st:?}");
            if !st.fs || st.tcp || st.scopes {
                return Err(format!("unexpected status {st:?}"));
            }
            let ro_file = base.join("ro/file");
            let got = std::fs::read_to_string(&ro_file).map_err(|e| format!("read ro: {e}"))?;
            if got != "hello" {
                return Err(format!("ro content {got:?}"));
            }
            expect_errno("write ro", OpenOptions::new().write(true).open(&ro_file), libc::EACCES)?;
            expect_errno("create in ro", File::create(base.join("ro/new")), libc::EACCES)?;
            std::fs::write(base.join("rw/new"), "x").map_err(|e| format!("create rw: {e}"))?;
            std::fs::rename(base.join("rw/new"), base.join("rw/sub/moved"))
                .map_err(|e| format!("rename within rw: {e}"))?;
            std::fs::read(base.join("single")).map_err(|e| format!("read single file: {e}"))?;
            expect_errno("open outside", File::open(base.join("outside")), libc::EACCES)?;
            expect_errno("read_dir base", std::fs::read_dir(&base), libc::EACCES)?;
            Ok(())
        }) {
            return;
        }
        let base = scratch_dir("fs");
        std::fs::create_dir_all(base.join("ro")).expect("mkdir ro");
        std::fs::create_dir_all(base.join("rw/sub")).expect("mkdir rw");
        std::fs::write(base.join("ro/file"), "hello").expect("write ro file");
        std::fs::write(base.join("outside"), "secret").expect("write outside");
        std::fs::write(base.join("single"), "one file").expect("write single");
        run_in_child(&test_name("fs_allow_list"), Some(&base));
        assert!(base.join("rw/sub/moved").exists());
        assert!(!base.join("ro/new").exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn tcp_port_floor() {
        if child_scenario(&test_name("tcp_port_floor"), || {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("listen: {e}"))?;
            let port = listener.local_addr().map_err(|e| e.to_string())?.port();
            let rules = LandlockRules { deny_tcp_connect: vec![25, 465, 587, 853], ..Default::default() };
            let t0 = Instant::now();
            let st = apply_or_err(&rules)?;
            eprintln!("[tcp_port_floor] apply with 65536 port rules took {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);
            if !st.tcp {
                return Err(format!("tcp not enforced: {st:?}"));
            }
            TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(|e| format!("connect allowed port {port}: {e}"))?;
            let t1 = Instant::now();
            expect_errno("connect :25", TcpStream::connect((Ipv4Addr::LOCALHOST, 25)), libc::EACCES)?;
            eprintln!("[tcp_port_floor] denied connect returned in {:?}", t1.elapsed());
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("bind ephemeral still allowed: {e}"))?;
            Ok(())
        }) {
            return;
        }
        run_in_child(&test_name("tcp_port_floor"), None);
    }

    #[test]
    fn tcp_isolated() {
        if child_scenario(&test_name("tcp_isolated"), || {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("listen: {e}"))?;
            let addr: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
            apply_or_err(&LandlockRules { deny_all_tcp: true, ..Default::default() })?;
            expect_errno("connect", TcpStream::connect(addr), libc::EACCES)?;
            expect_errno("bind", TcpListener::bind((Ipv4Addr::LOCALHOST, 0)), libc::EACCES)?;
            Ok(())
        }) {
            return;
        }
        run_in_child(&test_name("tcp_isolated"), None);
    }

    #[test]
    fn scope_signals_blocks_parent() {
        if child_scenario(&test_name("scope_signals_blocks_parent"), || {
            // SAFETY: getppid has no preconditions.
            let ppid = unsafe { libc::getppid() };
            // SAFETY: signal 0 only checks permission, nothing is delivered.
            if unsafe { libc::kill(ppid, 0) } != 0 {
                return Err("kill(ppid, 0) failed before apply".into());
            }
            let st = apply_or_err(&LandlockRules { scope_signals: true, ..Default::default() })?;
            if !st.scopes {
                return Err(format!("scopes not enforced: {st:?}"));
            }
            // SAFETY: as above.
            let r = unsafe { libc::kill(ppid, 0) };
            let e = io::Error::last_os_error().raw_os_error();
            if r == 0 || e != Some(libc::EPERM) {
                return Err(format!("kill after apply: ret {r}, errno {e:?}"));
            }
            Ok(())
        }) {
            return;
        }
        run_in_child(&test_name("scope_signals_blocks_parent"), None);
    }

    #[test]
    fn scope_abstract_unix_blocks_outside() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
        if child_scenario(&test_name("scope_abstract_unix_blocks_outside"), || {
            let name = format!("agent-sandbox-landlock-{}", std::process::id());
            let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(|e| e.to_string())?;
            let _l = UnixListener::bind_addr(&addr).map_err(|e| format!("bind: {e}"))?;
            UnixStream::connect_addr(&addr).map_err(|e| format!("connect before: {e}"))?;
            apply_or_err(&LandlockRules { scope_abstract_unix: true, ..Default::default() })?;
            expect_errno("connect after", UnixStream::connect_addr(&addr), libc::EPERM)
        }) {
            return;
        }
        run_in_child(&test_name("scope_abstract_unix_blocks_outside"), None);
    }

    #[test]
    fn a_nested_scope_cannot_signal_its_outer_domain_which_signals_it_and_files_still_move() {
        const NAME: &str = "a_nested_scope_cannot_signal_its_outer_domain_which_signals_it_and_files_still_move";
        if child_scenario(&test_name(NAME), || {
            use nix::unistd::{fork, ForkResult};
            let base = PathBuf::from(std::env::var(DIR_ENV).map_err(|e| e.to_string())?);
            let rules = LandlockRules {
                read_only: vec!["/proc".into()],
                read_write: vec![base.clone()],
                scope_signals: true,
                ..Default::default()
            };
            apply_or_err(&rules)?;
            let (r, w) = nix::unistd::pipe().map_err(|e| e.to_string())?;
            // Landlock confines this thread, not the harness's others: the check goes to it.
            let (pid, tid) = (std::process::id() as libc::pid_t, nix::unistd::gettid().as_raw());
            // The outer domain's process (where the sweeper sits): once this one has gone on
            // into the nested domain, it signals it.
            // SAFETY: the child makes system calls only and _exits.
            let outer = match unsafe { fork() }.map_err(|e| e.to_string())? {
                ForkResult::Child => {
                    // SAFETY: alarm, read, tgkill and _exit with plain arguments.
                    unsafe {
                        libc::alarm(10);
                        let mut b = [0u8; 1];
                        libc::read(std::os::fd::AsRawFd::as_raw_fd(&r), b.as_mut_ptr().cast(), 1);
                        libc::_exit(if libc::syscall(libc::SYS_tgkill, pid, tid, 0) == 0 { 0 } else { 1 })
                    }
                }
                ForkResult::Parent { child } => child,
            };
            scope_nested().map_err(|e| format!("scope_nested: {e}"))?;
            // SAFETY: signal 0 only checks permission.
            let ret = unsafe { libc::kill(outer.as_raw(), 0) };
            let e = io::Error::last_os_error().raw_os_error();
            nix::unistd::write(&w, b"x").map_err(|e| e.to_string())?;
            let status = nix::sys::wait::waitpid(outer, None).map_err(|e| e.to_string())?;
            if ret == 0 || e != Some(libc::EPERM) {
                return Err(format!("the nested domain signalled the outer one: ret {ret}, errno {e:?}"));
            }
            if status != nix::sys::wait::WaitStatus::Exited(outer, 0) {
                return Err(format!("the outer domain could not signal the nested one: {status:?}"));
            }
            std::fs::create_dir_all(base.join("a/b")).map_err(|e| e.to_string())?;
            std::fs::write(base.join("a/f"), "x").map_err(|e| e.to_string())?;
            std::fs::rename(base.join("a/f"), base.join("a/b/f")).map_err(|e| format!("rename across dirs: {e}"))
        }) {
            return;
        }
        let base = scratch_dir("nested");
        run_in_child(&test_name(NAME), Some(&base));
        assert!(base.join("a/b/f").exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn weaker_lists_structural_and_abi_gaps() {
        let rules = LandlockRules { deny_tcp_connect: vec![25], scope_signals: true, ..Default::default() };
        let w3 = weaker(&rules, 3);
        assert!(w3.iter().any(|s| s.starts_with("no PID namespace")));
        assert!(w3.iter().any(|s| s.starts_with("UDP is not filtered")));
        assert!(w3.iter().any(|s| s == "TCP port floor needs ABI 4, kernel has 3"));
        assert!(w3.iter().any(|s| s.contains("scoping needs ABI 6")));
        let w7 = weaker(&rules, 7);
        assert!(!w7.iter().any(|s| s.contains("needs ABI 4")));
        assert!(!w7.iter().any(|s| s.contains("scoping needs")));
        assert!(w7.iter().any(|s| s.starts_with("hidden paths")));
    }
}
