//! The launcher side of the namespace backend: clones the jail's PID 1 into new user, mount,
//! pid, ipc, uts, cgroup (and net) namespaces and writes its id maps, before the plan is made
//! where it can (`Early`), hands it the plan, waits for the jail to be built, then relays the
//! terminal and signals until the command ends.

use super::blueprint::Blueprint;
use super::init;
use super::msg::{self, Msg};
use super::relay;
use super::{JailError, Outcome};
use crate::plan::groups::GroupsPlan;
use crate::plan::{JailNet, Plan};
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, OwnedFd};

pub struct Launched {
    pub pid: Pid,
    pub sock: OwnedFd,
}

/// The jail's PID 1, cloned before the plan is made (`plan::jail_shape`): its id maps are
/// written and it has gone on to make the network namespace and the staging root while the
/// launcher plans (about a millisecond of work here, off the launch's critical path). Dropped
/// unused (a plan that fails, or one of another shape), it is killed and reaped.
pub struct Early {
    launched: Option<Launched>,
    shape: init::Shape,
    ids: (u32, u32, GroupsPlan),
}

impl Early {
    /// Clones PID 1 with `shape` and the user's own ids (and `groups`) mapped.
    pub fn clone(shape: init::Shape, uid: u32, gid: u32, groups: GroupsPlan) -> Result<Early, JailError> {
        crate::timing::mark("pre-clone");
        let launched = clone_jail(&shape)?;
        crate::timing::mark("cloned");
        tracing::debug!(init = launched.pid.as_raw(), "jail init cloned");
        let early = Early { launched: Some(launched), shape, ids: (uid, gid, groups) };
        let pid = early.pid();
        write_id_maps(pid, uid, gid, &early.ids.2)?;
        msg::send(early.sock(), &Msg::Go).map_err(|e| JailError::Channel(e.to_string()))?;
        Ok(early)
    }

    /// PID 1 for `plan`, cloned now (where none was cloned before the plan).
    fn for_plan(plan: &Plan) -> Result<Early, JailError> {
        Early::clone(shape_of(plan), plan.uid, plan.gid, plan.groups.clone())
    }

    /// Whether this PID 1 was cloned as `plan` needs it.
    fn fits(&self, plan: &Plan) -> bool {
        self.shape == shape_of(plan) && self.ids == (plan.uid, plan.gid, plan.groups.clone())
    }

    fn pid(&self) -> Pid {
        self.launched.as_ref().map_or(Pid::from_raw(0), |l| l.pid)
    }

    fn sock(&self) -> std::os::fd::RawFd {
        self.launched.as_ref().map_or(-1, |l| l.sock.as_raw_fd())
    }

    /// PID 1 from here on belongs to the caller.
    fn take(mut self) -> Result<Launched, JailError> {
        self.launched.take().ok_or_else(|| JailError::Channel("the jail's init is gone".into()))
    }
}

impl Drop for Early {
    fn drop(&mut self) {
        if let Some(l) = self.launched.take() {
            let _ = nix::sys::signal::kill(l.pid, nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(l.pid, None);
        }
    }
}

/// The shape of PID 1 a plan needs: its terminal, network and tun0 address.
fn shape_of(plan: &Plan) -> init::Shape {
    shape(plan.net.jail, plan.net.tun_address())
}

/// PID 1's shape for this launcher's terminals: a pty where stdin is a terminal, and stdout
/// or stderr.
pub fn shape(net: JailNet, tun: Option<std::net::Ipv4Addr>) -> init::Shape {
    let tty = super::stdio_ttys();
    init::Shape { pty: (tty.0[0] && (tty.0[1] || tty.0[2])).then_some(tty), net, tun }
}

/// `net_start`: starts what serves the descriptors the jail hands out for its network
/// (`plan.net.jail` says how many), once the jail has built them. `early`: PID 1 if cloned
/// before the plan was made (cloned now if not, or if it does not fit the plan).
pub fn run(
    plan: &Plan,
    anchors: &[crate::plan::anchor::Anchor],
    early: Option<Early>,
    moments: &super::Moments<'_>,
    net_start: super::NetStart<'_>,
    lazy: Option<super::door::Lazy<'_>>,
    audit: &crate::audit::AuditLog,
) -> Result<(Outcome, super::links::Heard), JailError> {
    let early = match early {
        Some(e) if e.fits(plan) => e,
        other => {
            drop(other);
            Early::for_plan(plan)?
        }
    };
    // Until the command is started, an error returns with `early`, whose drop kills and
    // reaps PID 1.
    let mask = relay::block_signals();
    let (pid, sock) = (early.pid(), early.sock());
    let blueprint = Blueprint::of(plan, anchors)
        .to_fd()
        .map_err(|e| JailError::Build(format!("cannot hand the plan to the jail: {e}")))?;
    if msg::send(sock, &Msg::Plan(blueprint)).is_err() {
        // PID 1 ended before the plan came: it said why first, if it could.
        return Err(match msg::recv(sock) {
            Ok(Some(Msg::Error(e))) => JailError::Build(e),
            Ok(Some(Msg::Changed(e))) => JailError::Changed(e),
            _ => JailError::Build(child_death_reason(pid)),
        });
    }
    (moments.building)();
    // Compiled here while the jail builds its filesystem in parallel, then handed over.
    let prog = super::seccomp::build_program(&super::seccomp::SeccompOptions {
        allow_nested_userns: plan.seccomp.nested_userns,
        nested_mounts: plan.seccomp.nested_mounts,
        ..Default::default()
    })
    .map_err(|e| JailError::Seal(e.into()))?;
    let guard = match plan.git_guard {
        Some(_) => super::seccomp::build_guard_program().map_err(|e| JailError::Seal(e.into()))?,
        None => vec![],
    };
    let master = match msg::recv(sock) {
        Ok(Some(Msg::Ready { pty, net: fds })) => {
            if fds.len() != plan.net.jail.handed_out() {
                return Err(JailError::Build("the jail's network and its plan disagree".into()));
            }
            if !fds.is_empty() {
                net_start(fds).map_err(|e| JailError::Build(format!("cannot start the network supervisor: {e}")))?;
            }
            pty
        }
        Ok(Some(Msg::Error(e))) => return Err(JailError::Build(e)),
        Ok(Some(Msg::Changed(e))) => return Err(JailError::Changed(e)),
        Ok(_) | Err(_) => return Err(JailError::Build(child_death_reason(pid))),
    };
    crate::timing::mark("ready");
    (moments.ready)();
    msg::send(sock, &Msg::Start { seal: prog, guard }).map_err(|e| JailError::Channel(e.to_string()))?;
    let launched = early.take()?;
    super::limits::arm_timeout(plan.limits.timeout, launched.pid);
    relay::run(launched.pid, sock, master, &mask, lazy, audit)
}

/// How PID 1 ended, read without reaping it: the caller's `Early` reaps it, and a pid not
/// yet reaped cannot be another process's by then.
fn child_death_reason(pid: Pid) -> String {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
        Ok(WaitStatus::Exited(_, c)) => {
            format!("the jail's init exited with status {c} while building")
        }
        Ok(WaitStatus::Signaled(_, s, _)) => {
            format!("the jail's init was killed by {s} while building")
        }
        _ => "the jail's init disappeared while building".into(),
    }
}

fn clone_jail(shape: &init::Shape) -> Result<Launched, JailError> {
    // What the clone's safety rests on, checked: a thread running beside this one would leave
    // the child a copy of the locks it holds (malloc's among them), which no one releases.
    // A thread just joined leaves the count a moment after its join returned: asked again.
    let mut count = agent_sandbox_sys::process::thread_count();
    for _ in 0..20 {
        if !matches!(count, Ok(n) if n > 1) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
        count = agent_sandbox_sys::process::thread_count();
    }
    match count {
        Ok(1) => {}
        Ok(n) => {
            // Ours all end before this point; a library preloaded into the launcher (a
            // profiler's, a site's tracker) may start one of its own, which never ends.
            let cause = match std::env::var_os("LD_PRELOAD") {
                Some(p) if !p.is_empty() => format!(
                    "a library preloaded into agent-sandbox started one (LD_PRELOAD={}): run agent-sandbox without it",
                    p.to_string_lossy()
                ),
                _ => "internal error".into(),
            };
            return Err(JailError::Build(format!("{n} threads run where the jail's init is cloned: {cause}")));
        }
        Err(e) => return Err(JailError::Build(format!("cannot count the launcher's threads: {e}"))),
    }
    let (parent, child) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| JailError::Channel(e.to_string()))?;
    // The network namespace is made by a thread of the jail's init (`net::start`), so that
    // its cost overlaps the mounts; everything else is made here.
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    let mut stack = vec![0u8; 2 << 20];
    let child_fd = child.as_raw_fd();
    let launcher_end = parent.as_raw_fd();
    let cb = Box::new(|| init::child_main(shape, child_fd, launcher_end));
    // PID 1 starts with the signals it serves through its signalfd blocked, so none is lost
    // before it has one; the launcher blocks them itself only once the plan exists (`run`):
    // until then a Ctrl-C ends the launch, PID 1 with it.
    let mut old = SigSet::empty();
    let _ =
        nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&super::signals::served_signals()), Some(&mut old));
    // SAFETY: the launcher is single-threaded here (no runtime threads exist before the jail
    // is cloned), so the child may allocate and use any state; without CLONE_VM it runs on a
    // copy of the address space with its own stack.
    let pid = unsafe { nix::sched::clone(cb, &mut stack, flags, Some(libc::SIGCHLD)) }
        .map_err(|e| JailError::Clone { errno: e, flags: format!("{flags:?}") });
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    let pid = pid?;
    drop(child);
    Ok(Launched { pid, sock: parent })
}

/// Maps the user's own uid and gid to themselves inside: the jail runs as the same user,
/// with no other id to become. `setgroups` is denied first (the kernel requires it of an
/// unprivileged map, and it stays denied with `newgidmap` too: no process inside can drop a
/// group to pass a permission that denies it). With supplementary groups to map
/// (`groups`), the setuid `newgidmap` writes the gid map: the user's gid and each of those
/// groups, one to one. If it fails, the session goes on with the user's gid alone, and says so.
/// The files are reached by the number `/proc` gives PID 1 (`procpid`), which is not its pid
/// where the launcher's `/proc` is another pid namespace's.
fn write_id_maps(pid: Pid, uid: u32, gid: u32, groups: &GroupsPlan) -> Result<(), JailError> {
    let pid = super::procpid::in_proc(pid)
        .map_err(|err| JailError::IdMap { file: "id maps (its /proc entry)".to_string(), err })?;
    let base = format!("/proc/{pid}");
    let w = |file: &str, data: String| {
        std::fs::write(format!("{base}/{file}"), data).map_err(|e| JailError::IdMap { file: file.to_string(), err: e })
    };
    w("setgroups", "deny".into())?;
    w("uid_map", format!("{uid} {uid} 1\n"))?;
    if let (Some(helper), false) = (&groups.newgidmap, groups.mapped.is_empty()) {
        let mut cmd = std::process::Command::new(helper);
        cmd.arg(pid.as_raw().to_string()).args([gid.to_string(), gid.to_string(), "1".into()]);
        for (g, _) in &groups.mapped {
            cmd.args([g.to_string(), g.to_string(), "1".into()]);
        }
        cmd.env_clear().stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        match cmd.output() {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => eprintln!(
                "agent-sandbox: warning: {} failed ({}): your supplementary groups show as nogroup in this session",
                helper.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!(
                "agent-sandbox: warning: cannot run {} ({e}): your supplementary groups show as nogroup in this session",
                helper.display()
            ),
        }
    }
    w("gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}
