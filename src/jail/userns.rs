//! The launcher side of the namespace backend: clones the jail's PID 1 into new user, mount,
//! pid, ipc, uts, cgroup (and net) namespaces, writes its id maps, waits for the jail to be
//! built, then relays the terminal and signals until the command ends.

use super::init::{self, TtyFds};
use super::msg::{self, Msg};
use super::relay;
use super::{JailError, Outcome};
use crate::plan::Plan;
use nix::sched::CloneFlags;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, OwnedFd};

pub struct Launched {
    pub pid: Pid,
    pub sock: OwnedFd,
}

/// `net_start`: starts what serves the descriptors the jail hands out for its network
/// (`plan.net.jail` says how many), once the jail has built them.
pub fn run(
    plan: &Plan,
    tty: TtyFds,
    banner: &dyn Fn(),
    net_start: super::NetStart<'_>,
    lazy: Option<super::door::Lazy<'_>>,
    audit: &crate::audit::AuditLog,
) -> Result<Outcome, JailError> {
    let use_pty = tty.0[0] && (tty.0[1] || tty.0[2]);
    let pty = use_pty.then_some(tty);
    let new_net = plan.net.jail.new_namespace();
    let mask = relay::block_signals();
    crate::timing::mark("pre-clone");
    let launched = clone_jail(plan, pty, new_net)?;
    crate::timing::mark("cloned");
    tracing::debug!(init = launched.pid.as_raw(), "jail init cloned");
    let sock = launched.sock.as_raw_fd();
    let fail = |e: JailError| -> JailError {
        let _ = nix::sys::signal::kill(launched.pid, nix::sys::signal::Signal::SIGKILL);
        let _ = waitpid(launched.pid, None);
        e
    };
    write_id_maps(launched.pid, plan.uid, plan.gid, &plan.groups).map_err(fail)?;
    msg::send(sock, &Msg::Go).map_err(|e| fail(JailError::Channel(e.to_string())))?;
    // Compiled here while the jail builds its filesystem in parallel, then handed over.
    let prog = super::seccomp::build_program(&super::seccomp::SeccompOptions {
        allow_nested_userns: plan.seccomp.nested_userns,
        ..Default::default()
    })
    .map_err(|e| fail(JailError::Seal(e.into())))?;
    let guard = match plan.git_guard {
        Some(_) => super::seccomp::build_guard_program().map_err(|e| fail(JailError::Seal(e.into())))?,
        None => vec![],
    };
    let master = match msg::recv(sock) {
        Ok(Some(Msg::Ready { pty, net: fds })) => {
            if fds.len() != plan.net.jail.handed_out() {
                return Err(fail(JailError::Build("the jail's network and its plan disagree".into())));
            }
            if !fds.is_empty() {
                net_start(fds)
                    .map_err(|e| fail(JailError::Build(format!("cannot start the network supervisor: {e}"))))?;
            }
            pty
        }
        Ok(Some(Msg::Error(e))) => return Err(fail(JailError::Build(e))),
        Ok(_) | Err(_) => return Err(fail(JailError::Build(child_death_reason(launched.pid)))),
    };
    crate::timing::mark("ready");
    banner();
    msg::send(sock, &Msg::Start { seal: prog, guard }).map_err(|e| fail(JailError::Channel(e.to_string())))?;
    super::limits::arm_timeout(plan.limits.timeout, launched.pid);
    let outcome = relay::run(launched.pid, sock, master, &mask, lazy, audit)?;
    Ok(outcome)
}

fn child_death_reason(pid: Pid) -> String {
    match waitpid(pid, None) {
        Ok(WaitStatus::Exited(_, c)) => {
            format!("the jail's init exited with status {c} while building")
        }
        Ok(WaitStatus::Signaled(_, s, _)) => {
            format!("the jail's init was killed by {s} while building")
        }
        _ => "the jail's init disappeared while building".into(),
    }
}

fn clone_jail(plan: &Plan, pty: Option<TtyFds>, new_net: bool) -> Result<Launched, JailError> {
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
    let cb = Box::new(|| init::child_main(plan, child_fd, pty, new_net));
    // SAFETY: the launcher is single-threaded here (no runtime threads exist before the jail
    // is cloned), so the child may allocate and use any state; without CLONE_VM it runs on a
    // copy of the address space with its own stack.
    let pid = unsafe { nix::sched::clone(cb, &mut stack, flags, Some(libc::SIGCHLD)) }
        .map_err(|e| JailError::Clone { errno: e, flags: format!("{flags:?}") })?;
    drop(child);
    Ok(Launched { pid, sock: parent })
}

/// Maps the user's own uid and gid to themselves inside: the jail runs as the same user,
/// with no other id to become. `setgroups` is denied first (the kernel requires it of an
/// unprivileged map, and it stays denied with `newgidmap` too: no process inside can drop a
/// group to pass a permission that denies it). With supplementary groups to map
/// (`groups`), the setuid `newgidmap` writes the gid map: the user's gid and each of those
/// groups, one to one. If it fails, the session goes on with the user's gid alone, and says so.
fn write_id_maps(pid: Pid, uid: u32, gid: u32, groups: &crate::plan::groups::GroupsPlan) -> Result<(), JailError> {
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
