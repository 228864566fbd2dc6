//! `agent-sandbox doctor`: reads the host's facts that decide what the jail can do here,
//! and for every failure says how to fix it. Read-only, except a short-lived probe child.

pub mod attack;
mod slurm_auth;

use crate::host;
use crate::policy::{self, FileKind, PolicyPaths};
use serde::Serialize;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
    Info,
}

#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

fn check(name: &'static str, status: Status, detail: impl Into<String>, fix: Option<&str>) -> Check {
    Check { name, status, detail: detail.into(), fix: fix.map(str::to_string) }
}

/// How the Landlock backend ends a session without signal scoping.
const WALK: &str = "at exit the launcher walks /proc for what the command left (a process that re-forks faster than the walk outlives the session)";
/// What the Landlock backend can stub.
const BY_NAME: &str = "Slurm and mail stubs by name only (first on PATH; an absolute /usr/bin/sbatch is the real one, which fails without munge)";

fn read(p: &str) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// Ubuntu 24.04+ (`kernel.apparmor_restrict_unprivileged_userns = 1`) lets only programs with
/// an AppArmor profile that allows it create user namespaces.
fn apparmor_check(restrict: Option<&str>, userns_works: impl Fn() -> bool) -> Check {
    match restrict {
        Some("1") if userns_works() => check(
            "apparmor userns",
            Status::Ok,
            "kernel.apparmor_restrict_unprivileged_userns = 1, and a profile lets agent-sandbox create user namespaces",
            None,
        ),
        Some("1") => check(
            "apparmor userns",
            Status::Fail,
            "kernel.apparmor_restrict_unprivileged_userns = 1: AppArmor blocks user namespaces for unconfined programs",
            Some("install the AppArmor profile from docs/admin/apparmor.md for the agent-sandbox binary"),
        ),
        Some(x) => {
            check("apparmor userns", Status::Ok, format!("kernel.apparmor_restrict_unprivileged_userns = {x}"), None)
        }
        None => check("apparmor userns", Status::Ok, "no AppArmor user-namespace restriction on this kernel", None),
    }
}

/// Whether this cluster's Slurm takes `--agent-sandbox` (the SPANK plugin of slurm-plugins/).
fn spank_check(sbatch: &Path) -> Check {
    let mut cmd = chaperon::spawn::RealCommand::new(sbatch);
    cmd.arg("--help").stdin(chaperon::spawn::Io::null()).stderr(chaperon::spawn::Io::null());
    let help = match chaperon::bounded::capture(cmd, 1 << 20, chaperon::session::BELT_QUESTION_TIMEOUT) {
        Ok((out, status)) if status.success() => String::from_utf8_lossy(&out).into_owned(),
        Ok((_, status)) => return belt_unknown(format!("`{} --help` failed ({status})", sbatch.display())),
        Err(e) => return belt_unknown(format!("`{} --help`: {e}", sbatch.display())),
    };
    match chaperon::session::spank_option_listed(&help) {
        true => check(
            "slurm spank",
            Status::Ok,
            "the agent-sandbox SPANK plugin is in plugstack.conf: a task of a sandboxed job that does not \
             enter the jail is refused on the node",
            None,
        ),
        false => check(
            "slurm spank",
            Status::Info,
            "no agent-sandbox SPANK plugin in plugstack.conf: jobs enter the jail through their wrapper alone",
            Some(
                "as root on every node and login node: make -C slurm-plugins install, then add the line \
                  `make -C slurm-plugins plugstack-line` prints to /etc/slurm/plugstack.conf (docs/slurm.md)",
            ),
        ),
    }
}

/// `sbatch --help` gave no answer: sessions cannot learn whether to tag jobs for the belt, so
/// they refuse sbatch, srun and salloc until it answers.
fn belt_unknown(why: String) -> Check {
    check(
        "slurm spank",
        Status::Fail,
        format!("{why}: whether the agent-sandbox SPANK plugin is installed is unknown, so sessions submit nothing (sbatch, srun and salloc are refused)"),
        Some("make `sbatch --help` answer (slurm.conf, plugstack.conf, munge) on this login node"),
    )
}

/// Whether jobs' prologs run at allocation (`PrologFlags=Alloc`, or `Contain`): the belt
/// marks a sandboxed job on each node in its prolog, and without them the prolog runs on a node
/// only with the first step there, so the plugin refuses to run on the nodes. `config` is
/// `scontrol show config`'s output (None where it could not be had); `belt` whether Slurm here
/// knows the plugin's option.
fn prolog_flags_check(config: Option<&str>, belt: bool) -> Check {
    const FIX: &str = "set PrologFlags=Alloc (or Contain) in slurm.conf on the controller and every node, then \
                       restart slurmctld and slurmd (docs/slurm.md, slurm-plugins/README.md)";
    let flags = config.map(prolog_flags_in);
    let at_allocation =
        |f: &str| f.split(',').any(|x| x.eq_ignore_ascii_case("Alloc") || x.eq_ignore_ascii_case("Contain"));
    match (flags, belt) {
        (None, _) => check(
            "slurm prolog flags",
            if belt { Status::Warn } else { Status::Info },
            "`scontrol show config` gave no answer: PrologFlags not checked",
            belt.then_some(FIX),
        ),
        (Some(f), _) if at_allocation(&f) => check(
            "slurm prolog flags",
            Status::Ok,
            format!("PrologFlags = {f}: every job's prolog runs on each of its nodes at allocation, where the belt marks a sandboxed job"),
            None,
        ),
        (Some(f), true) => check(
            "slurm prolog flags",
            Status::Fail,
            format!(
                "PrologFlags = {f}, without Alloc or Contain: the agent-sandbox SPANK plugin refuses to run on the \
                 nodes (slurmd does not start, every step fails), since a job's prolog would mark it only where its \
                 first step carries the tag"
            ),
            Some(FIX),
        ),
        (Some(f), false) => check(
            "slurm prolog flags",
            Status::Info,
            format!("PrologFlags = {f}: the SPANK plugin, once installed, needs Alloc (or Contain)"),
            Some(FIX),
        ),
    }
}

/// `PrologFlags` in `scontrol show config` output (`(null)` where none is set).
fn prolog_flags_in(config: &str) -> String {
    config
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            k.trim().eq_ignore_ascii_case("PrologFlags").then(|| v.trim().to_string())
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "(null)".into())
}

/// `scontrol show config` from the Slurm directory of `sbatch`, bounded.
fn slurm_config(sbatch: &Path) -> Option<String> {
    let scontrol = sbatch.with_file_name("scontrol");
    let mut cmd = chaperon::spawn::RealCommand::new(scontrol);
    cmd.args(["show", "config"]).stdin(chaperon::spawn::Io::null()).stderr(chaperon::spawn::Io::null());
    let (out, status) = chaperon::bounded::capture(cmd, 4 << 20, std::time::Duration::from_secs(20)).ok()?;
    status.success().then(|| String::from_utf8_lossy(&out).into_owned())
}

/// Every check, in the order `doctor` shows them: the kernel's isolation features, the
/// network's, Slurm's, then the policy and the credentials.
fn checks() -> Vec<Check> {
    let uname = nix::sys::utsname::uname().ok();
    let release = uname.as_ref().map(|u| u.release().to_string_lossy().to_string()).unwrap_or_default();
    let mut v = vec![
        check("kernel", Status::Info, format!("Linux {release}"), None),
        userns_check(),
        limits_check(),
        apparmor_check(read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref(), host::probe_userns),
        landlock_check(),
        git_guard_check(),
        seccomp_check(),
        tun_check(),
        network_modes(),
        ping_group_range_check(),
        cgroups_check(),
    ];
    let sbatch = crate::jail::find_in_path("sbatch", &[("PATH".into(), std::env::var("PATH").unwrap_or_default())]);
    v.push(slurm_check(sbatch.as_deref()));
    if let Some(p) = &sbatch {
        let spank = spank_check(p);
        let belt = matches!(spank.status, Status::Ok);
        v.push(spank);
        v.push(prolog_flags_check(slurm_config(p).as_deref(), belt));
        v.push(job_ports_check());
    }
    v.push(groups_check());
    for (name, warn, detail, fix) in slurm_auth::lines(sbatch.as_deref()) {
        v.push(check(name, if warn { Status::Warn } else { Status::Info }, detail, fix));
    }
    policy_checks(&mut v);
    v.extend(credential_checks());
    v
}

fn userns_check() -> Check {
    let ns = host::userns_support();
    let probe =
        if host::probe_userns() { Ok(()) } else { Err("unshare(CLONE_NEWUSER) failed in a probe child".to_string()) };
    match (&ns.available, &probe) {
        (true, Ok(())) => check("user namespaces", Status::Ok, format!("unprivileged user namespaces work (max_user_namespaces = {})", read("/proc/sys/user/max_user_namespaces").unwrap_or_default()), None),
        _ => check(
            "user namespaces",
            Status::Fail,
            ns.why_not.clone().or(probe.err()).unwrap_or_default(),
            Some("ask the admin to set user.max_user_namespaces > 0 (and kernel.unprivileged_userns_clone = 1 where it exists), or install the AppArmor profile in docs/admin/apparmor.md; until then the Landlock backend runs, with the limits `doctor` lists under landlock"),
        ),
    }
}

/// Which limits run: this version sets rlimits; a delegated cgroup v2 subtree (systemd
/// user slice) would enforce memory and CPUs for the session as a whole.
fn limits_check() -> Check {
    let cgroup2 = std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|c| c.lines().any(|l| l.starts_with("0::")))
        && std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    check(
        "limits",
        Status::Info,
        if cgroup2 {
            "rlimits (--mem per process, --pids in the jail's user namespace, --timeout); cgroup v2 is here but not used yet"
        } else {
            "rlimits (--mem per process, --pids in the jail's user namespace, --timeout): no cgroup v2 hierarchy here"
        },
        None,
    )
}

/// What the Landlock backend can do with this kernel's ABI.
fn landlock_check() -> Check {
    match host::landlock_abi() {
        0 => check("landlock", Status::Warn, "Landlock is not available: no fallback backend if user namespaces are off", Some("boot with lsm=...,landlock (Linux 5.13+)")),
        a if a < 4 => check("landlock", Status::Warn, format!("Landlock ABI {a}: fallback backend works without the TCP port floor (needs ABI 4); {WALK}"), None),
        a if a < 6 => check("landlock", Status::Ok, format!("Landlock ABI {a}: fallback has fs + TCP rules, no signal/abstract-socket scoping (ABI 6); {WALK}"), None),
        a => check("landlock", Status::Ok, format!("Landlock ABI {a}: fallback has fs rules, TCP port floor, signal and abstract-socket scoping; at exit a sweeper in the session's Landlock domain ends every process of it (kill(-1) under signal scoping); weaker than namespaces: a private TMPDIR but no private /proc (host processes visible), no /dev/shm, hidden paths give EACCES not ENOENT, protected paths are writable, no UDP filtering, host unix sockets refused (process.unix_sockets), {BY_NAME}"), None),
    }
}

fn git_guard_check() -> Check {
    if host::kernel_at_least(5, 14) {
        check(
            "git guard",
            Status::Ok,
            "seccomp user notification with descriptor answers (Linux 5.14+): the jail cannot make git \
             repositories in the project or change their config and hooks",
            None,
        )
    } else {
        check(
            "git guard",
            Status::Fail,
            "this kernel (before 5.14) cannot run the git guard: launches stop unless `filesystem.nested_git = true`",
            Some("a newer kernel; or accept that the agent can write git config and hooks your git runs later"),
        )
    }
}

fn seccomp_check() -> Check {
    if Path::new("/proc/sys/kernel/seccomp/actions_avail").exists() {
        check(
            "seccomp",
            Status::Ok,
            format!(
                "seccomp filters available ({})",
                read("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default()
            ),
            None,
        )
    } else {
        check(
            "seccomp",
            Status::Fail,
            "the kernel has no seccomp filter support",
            Some("a kernel with CONFIG_SECCOMP_FILTER is required"),
        )
    }
}

fn tun_check() -> Check {
    match std::fs::metadata("/dev/net/tun") {
        Ok(m) if m.permissions().mode() & 0o006 == 0o006 => check("/dev/net/tun", Status::Ok, format!("present, mode {:o}", m.permissions().mode() & 0o777), None),
        Ok(m) => check(
            "/dev/net/tun",
            Status::Warn,
            format!("mode {:o}: users cannot open it, so the filtered network mode cannot run (it falls back per net.fallback)", m.permissions().mode() & 0o777),
            Some("as root: chmod 0666 /dev/net/tun (distributions ship it 0666; a udev rule keeps it: KERNEL==\"tun\", MODE=\"0666\")"),
        ),
        Err(_) => check("/dev/net/tun", Status::Warn, "missing: the filtered network mode cannot run", Some("as root: modprobe tun")),
    }
}

fn ping_group_range_check() -> Check {
    match read("/proc/sys/net/ipv4/ping_group_range") {
        Some(r) => check(
            "ping_group_range",
            Status::Info,
            format!(
                "host: net.ipv4.ping_group_range = {r}; filtered jails set their own for the user (ping works there)"
            ),
            None,
        ),
        None => check("ping_group_range", Status::Info, "unknown", None),
    }
}

fn cgroups_check() -> Check {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let limits = "per-session limits (--mem, --pids, --timeout, [limits]) are rlimits in the jail's user \
                  namespace and a wall-clock timer; this version does not use a cgroup";
    check(
        "cgroups",
        Status::Info,
        format!("{}; {limits}", if v2 { "cgroup v2" } else { "cgroup v1, no delegation" }),
        None,
    )
}

fn slurm_check(sbatch: Option<&Path>) -> Check {
    match sbatch {
        Some(p) => check(
            "slurm",
            Status::Info,
            format!(
                "sbatch at {}; slurm.conf {}; inside a jail Slurm goes through the session's chaperon \
                 (jobs re-enter the jail on nodes: `{}` must exist there too); under the Landlock backend \
                 the stubs are first on PATH over a descriptor the command inherits, and an absolute \
                 /usr/bin/sbatch is the real one, which fails without munge",
                p.display(),
                if Path::new("/etc/slurm/slurm.conf").exists() { "present" } else { "not in /etc/slurm" },
                std::env::current_exe().map(|e| e.display().to_string()).unwrap_or_default()
            ),
            None,
        ),
        None => check("slurm", Status::Info, "no sbatch on PATH: Slurm mediation not needed here", None),
    }
}

/// The credential catalogue against this user's home and variables: the stores you have
/// (every session hides them), those your policy shows and why, the agents' logins (shown to
/// their own profile unless its key is injected), and what your git config loses inside.
fn credential_checks() -> Vec<Check> {
    let Ok(facts) = host::HostFacts::gather() else {
        return vec![check("credentials", Status::Warn, "cannot read this host's facts", None)];
    };
    let paths = PolicyPaths::new(&facts.home, facts.env_var("XDG_CONFIG_HOME").map(Path::new));
    let loaded = policy::load(policy::LoadRequest {
        paths: &paths,
        home: &facts.home,
        uid: facts.uid,
        project: None,
        profile: None,
        policy_files: &[],
        cli: Default::default(),
    });
    let policy = match loaded {
        Ok(p) => p,
        Err(e) => return vec![check("credentials", Status::Warn, format!("not checked: {e}"), None)],
    };
    match crate::plan::credentials_report(&policy, &facts, &host::RealFs::default()) {
        Ok(report) => credential_lines(&report, &facts.home_canonical, &host::RealFs::default()),
        Err(e) => vec![check("credentials", Status::Warn, e.to_string(), None)],
    }
}

/// The lines of `credential_checks` for a report, with `fs` saying which paths exist.
fn credential_lines(r: &crate::plan::catalogue::CredentialsPlan, home: &Path, fs: &dyn host::HostFs) -> Vec<Check> {
    use crate::plan::catalogue::{present, CATALOGUE};
    let shown = |p: &Path| match p.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => p.display().to_string(),
    };
    let login = |store: &str| CATALOGUE.iter().find(|s| s.name == store).and_then(|s| s.login_of);
    let (mut logins, mut others) = (vec![], vec![]);
    for l in present(&r.hidden, fs) {
        match login(l.store) {
            Some(agent) => logins.push(format!("{} ({agent})", shown(&l.path))),
            None => others.push(format!("{} ({})", shown(&l.path), l.store)),
        }
    }
    let total = CATALOGUE.len();
    let mut v = vec![match others.is_empty() {
        true => check("credentials", Status::Ok, format!("none of the {total} stores of the credential catalogue is here"), None),
        false => check(
            "credentials",
            Status::Info,
            format!("hidden from every session ({} of the catalogue's stores are here): {}", others.len(), others.join(", ")),
            Some("to show one to the jail on purpose, name it: --ro ~/PATH, or home.read in your config (docs/policy.md)"),
        ),
    }];
    if !logins.is_empty() {
        v.push(check(
            "agent logins",
            Status::Info,
            format!(
                "shown only to the agent's own profile, and to it only without an API key injected from outside: {}",
                logins.join(", ")
            ),
            None,
        ));
    }
    let exposed: Vec<String> = r
        .exposed
        .iter()
        .filter(|e| fs.kind(&e.path).is_some())
        .map(|e| format!("{} ({}: {})", shown(&e.path), e.store, e.why))
        .collect();
    if !exposed.is_empty() {
        v.push(check("credentials shown", Status::Warn, format!("your policy shows: {}", exposed.join(", ")), None));
    }
    for (file, dropped) in &r.stripped {
        v.push(check(
            "git config",
            Status::Info,
            format!("sessions see {} without: {}", shown(file), dropped.join(" ")),
            None,
        ));
    }
    v
}

/// Where `--job-port` would listen without `net.job_address`: the local address of the route
/// toward the Slurm controller (loopback on a one-host cluster).
fn job_ports_check() -> Check {
    use crate::net::cluster::jobs::ClusterAddress;
    let Some(home) = std::env::var_os("HOME") else {
        return check("job ports", Status::Info, "no HOME: not checked", None);
    };
    let asker = crate::slurm::asker(std::path::Path::new(&home), &std::env::var("USER").unwrap_or_default());
    match crate::net::cluster::jobs::cluster_address("", &asker) {
        Ok(ClusterAddress::Routed(ip)) => check(
            "job ports",
            Status::Info,
            format!(
                "--job-port listens on {ip} (the route toward the Slurm controller; net.job_address \
                 chooses another) and admits only nodes running the project's jobs; the session \
                 network's listener goes there too, from a session's first Slurm call"
            ),
            None,
        ),
        Ok(ClusterAddress::OneHost(ip)) => check(
            "job ports",
            Status::Info,
            format!(
                "this host is the Slurm controller and every node (a one-host cluster): --job-port and \
                 the session network listen on loopback, {ip}, where only this host's jobs and its users \
                 reach them; other users' connections are closed unanswered"
            ),
            None,
        ),
        Err(e) => check("job ports", Status::Warn, format!("--job-port cannot run here: {e}"), None),
    }
}

/// The user's supplementary groups inside the userns jail: mapped by newgidmap, or nogroup.
fn groups_check() -> Check {
    let Ok(facts) = host::HostFacts::gather() else {
        return check("groups", Status::Warn, "cannot read this host's facts", None);
    };
    let g = crate::plan::groups::of_host(&facts);
    let fix = "as root: install uidmap (a setuid newgidmap) and give each user one /etc/subgid line per group \
               they are in, `USER:GID:1`, after reading what that grants (docs/admin/groups.md)";
    let beyond = crate::plan::groups::granted_beyond_membership(
        &std::fs::read_to_string("/etc/subgid").unwrap_or_default(),
        &facts.user,
        facts.uid,
        &facts.groups,
        &facts.etc_group,
    );
    if !beyond.is_empty() {
        return check(
            "groups",
            Status::Warn,
            format!(
                "your /etc/subgid ranges cover groups you are not in ({}): newgidmap lets you take them in a user \
                 namespace of your own, outside any jail",
                beyond.join(", ")
            ),
            Some("as root: replace ranges over real gids by one `USER:GID:1` line per group the user is in"),
        );
    }
    match (g.summary(), g.why.is_some()) {
        (None, _) => check("groups", Status::Info, "you have no supplementary group: nothing to map", None),
        (Some(s), false) => check("groups", Status::Ok, format!("inside the jail: {s}"), None),
        (Some(s), true) => check(
            "groups",
            Status::Info,
            format!("inside the jail: {s}; access still works, but names, chgrp and group-owned new files do not"),
            Some(fix),
        ),
    }
}

/// Which network modes run here, asked of the planner itself (the same rule the launcher's
/// fallback uses), for the backend this host gets by default.
fn network_modes() -> Check {
    use crate::plan::{net_available, BackendKind};
    use crate::policy::NetMode;
    let Ok(facts) = host::HostFacts::gather() else {
        return check("network modes", Status::Warn, "cannot read this host's facts", None);
    };
    let backend = if facts.userns.available { BackendKind::Userns } else { BackendKind::Landlock };
    let mut lines = vec![];
    let mut filtered_ok = true;
    for &mode in NetMode::ALL {
        match net_available(mode, backend, &facts) {
            Ok(()) => lines.push(format!("{mode}: runs")),
            Err(why) => {
                filtered_ok &= mode != NetMode::Filtered;
                lines.push(format!("{mode}: cannot run ({why})"))
            }
        }
    }
    let status = if filtered_ok { Status::Ok } else { Status::Warn };
    let fix = (!filtered_ok)
        .then_some("without filtered (the default), sessions fall back per net.fallback; see the /dev/net/tun line");
    check("network modes", status, format!("with the {} backend: {}", backend.as_str(), lines.join("; ")), fix)
}

fn policy_checks(v: &mut Vec<Check>) {
    let home = nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.dir).unwrap_or_default();
    let paths = PolicyPaths::new(&home, std::env::var_os("XDG_CONFIG_HOME").map(std::path::PathBuf::from).as_deref());
    for (name, path, kind, root) in [
        ("site config", paths.site_config(), FileKind::Site, true),
        ("admin lock file", paths.admin_file(), FileKind::Admin, true),
        ("user config", paths.user_config.clone(), FileKind::User, false),
    ] {
        if std::fs::metadata(&path).is_err() {
            v.push(check(name, Status::Info, format!("{} not present", path.display()), None));
            continue;
        }
        if root {
            if let Err(e) = policy::read_trusted_root_file(&path) {
                v.push(check(
                    name,
                    Status::Fail,
                    format!("{e}: every launch refuses to start"),
                    Some("chown root:root FILE and its directory; chmod go-w both"),
                ));
                continue;
            }
        }
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| policy::parse_layer(&t, &path, kind).map(drop).map_err(|e| e.to_string()));
        v.push(match parsed {
            Ok(()) => check(name, Status::Ok, format!("{} parses", path.display()), None),
            Err(e) => check(name, Status::Fail, e, Some("fix the file; every launch refuses to start until then")),
        });
    }
}

pub fn run(json: bool) -> i32 {
    let all = checks();
    if json {
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
    } else {
        for c in &all {
            let tag = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
                Status::Info => "info",
            };
            println!("{tag} {:<18} {}", c.name, c.detail);
            if let Some(f) = &c.fix {
                println!("     {:<18} fix: {f}", "");
            }
        }
    }
    let userns_ok = all.iter().any(|c| c.name == "user namespaces" && c.status == Status::Ok);
    let landlock_ok = all.iter().any(|c| c.name == "landlock" && c.status != Status::Warn);
    let policy_ok =
        !all.iter().any(|c| c.status == Status::Fail && (c.name.contains("config") || c.name.contains("admin")));
    if (userns_ok || landlock_ok) && policy_ok {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prolog_flags_are_read_and_judged_with_the_belt_and_without() {
        let conf = |f: &str| {
            format!("Configuration data as of x\nPrologEpilogTimeout     = 65534\nPrologFlags             = {f}\nPropagateResourceLimits = ALL\n")
        };
        assert_eq!(prolog_flags_in(&conf("Alloc,Contain")), "Alloc,Contain");
        assert_eq!(prolog_flags_in("ClusterName = tc\n"), "(null)");
        let judged = |c: Option<&str>, belt| {
            let c = prolog_flags_check(c, belt);
            (format!("{:?}", c.status), c.detail, c.fix.is_some())
        };
        assert_eq!(judged(Some(&conf("Alloc")), true).0, "Ok");
        assert_eq!(judged(Some(&conf("Contain,X11")), true).0, "Ok");
        let (status, detail, fix) = judged(Some(&conf("(null)")), true);
        assert_eq!(status, "Fail");
        assert!(detail.contains("PrologFlags = (null)") && detail.contains("refuses to run") && fix, "{detail}");
        let (status, _, fix) = judged(Some(&conf("Serial")), false);
        assert_eq!((status.as_str(), fix), ("Info", true));
        assert_eq!(judged(None, true).0, "Warn");
        assert_eq!(judged(None, false).0, "Info");
    }

    #[test]
    fn the_credential_section_names_the_stores_this_user_has_and_what_shows_them() {
        use crate::plan::catalogue::{CredentialsPlan, Exposed, Located};
        let home = Path::new("/home/u");
        let at = |store: &'static str, p: &str| Located { store, path: home.join(p), via: None };
        let fs =
            host::FakeFs::default().file("/home/u/.npmrc").file("/home/u/.codex/auth.json").file("/home/u/.pypirc");
        let report = CredentialsPlan {
            hidden: vec![
                at("npm", ".npmrc"),
                at("codex-login", ".codex/auth.json"),
                at("cargo", ".cargo/credentials.toml"),
            ],
            exposed: vec![Exposed {
                store: "pypirc",
                path: home.join(".pypirc"),
                why: "home.read names `.pypirc`".into(),
            }],
            refused: vec![],
            stripped: vec![(home.join(".gitconfig"), vec!["credential.helper".into()])],
        };
        let lines = credential_lines(&report, home, &fs);
        let text: Vec<String> = lines.iter().map(|c| format!("{}: {}", c.name, c.detail)).collect();
        assert!(text[0].contains("~/.npmrc (npm)") && !text[0].contains("cargo"), "only what is here: {text:?}");
        assert!(text[1].starts_with("agent logins") && text[1].contains("~/.codex/auth.json (codex)"), "{text:?}");
        assert!(text[2].contains("~/.pypirc (pypirc: home.read names `.pypirc`)"), "{text:?}");
        assert!(text[3].contains("~/.gitconfig without: credential.helper"), "{text:?}");
        let none = credential_lines(&CredentialsPlan::default(), home, &fs);
        assert!(none[0].detail.starts_with("none of the"), "{:?}", none[0].detail);
    }

    #[test]
    fn apparmor_restricting_user_namespaces_is_named_with_its_fix() {
        let blocked = apparmor_check(Some("1"), || false);
        assert!(matches!(blocked.status, Status::Fail), "{}", blocked.detail);
        assert!(blocked.fix.as_deref().is_some_and(|f| f.contains("docs/admin/apparmor.md")));
        let profiled = apparmor_check(Some("1"), || true);
        assert!(matches!(profiled.status, Status::Ok) && profiled.detail.contains("a profile lets"));
        assert!(matches!(apparmor_check(Some("0"), || false).status, Status::Ok));
        assert!(apparmor_check(None, || false).detail.contains("no AppArmor"));
    }
}
