//! The session's limits on the rlimit path (no delegated cgroup v2 here): set in the command's
//! process just before it execs, inherited by everything it starts. Memory is the data
//! segment and heap of each process (`RLIMIT_DATA`: anonymous memory, not the address-space
//! reservations of JITs and runtimes, which `RLIMIT_AS` would refuse); processes are counted
//! in the jail's own user namespace (`RLIMIT_NPROC`, Linux 5.14+ counts per namespace), so a
//! fork bomb stops there and the user's other sessions keep theirs; no core files
//! (`RLIMIT_CORE` 0: a core of an agent holds its keys and prompts). CPUs are the command's
//! affinity: a hint a process may widen again, said as such. The wall-clock limit is the
//! launcher's.

use crate::plan::LimitsPlan;
use nix::sys::resource::{setrlimit, Resource};

/// Applies the limits to this process. Errors are the caller's to report (the command does
/// not run with fewer limits than the plan says).
pub fn apply(l: &LimitsPlan) -> Result<(), String> {
    setrlimit(Resource::RLIMIT_CORE, 0, 0).map_err(|e| format!("no core files: {e}"))?;
    if let Some(mem) = l.mem {
        setrlimit(Resource::RLIMIT_DATA, mem, mem).map_err(|e| format!("memory limit {mem}: {e}"))?;
    }
    if let Some(pids) = l.pids {
        setrlimit(Resource::RLIMIT_NPROC, pids, pids).map_err(|e| format!("process limit {pids}: {e}"))?;
    }
    if let Some(n) = l.cpus {
        use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
        use nix::unistd::Pid;
        let have = sched_getaffinity(Pid::from_raw(0)).map_err(|e| format!("cpus: {e}"))?;
        let mut want = CpuSet::new();
        let mut taken = 0;
        for cpu in 0..CpuSet::count() {
            if taken == n {
                break;
            }
            if have.is_set(cpu).unwrap_or(false) {
                let _ = want.set(cpu);
                taken += 1;
            }
        }
        sched_setaffinity(Pid::from_raw(0), &want).map_err(|e| format!("cpus {n}: {e}"))?;
    }
    Ok(())
}

static TIMED_OUT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The wall-clock limit: after `secs`, `pid` (the jail's init, whose end ends its whole PID
/// namespace; or the Landlock backend's command, whose descendants the launcher then ends) is
/// killed and the session reports it (`timed_out`).
pub fn arm_timeout(secs: Option<u64>, pid: nix::unistd::Pid) {
    let Some(secs) = secs else { return };
    let spawned = std::thread::Builder::new().name("asb-timeout".into()).spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(secs));
        TIMED_OUT.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    });
    if let Err(e) = spawned {
        // Without the timer the limit would not hold: end the session now rather than run
        // without it.
        eprintln!("agent-sandbox: cannot start the session's timer ({e}): ending it");
        TIMED_OUT.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Whether the session was ended by its wall-clock limit.
pub fn timed_out() -> bool {
    TIMED_OUT.load(std::sync::atomic::Ordering::SeqCst)
}
