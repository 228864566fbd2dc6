//! The Landlock session's own helpers, which live in its domain beside the command: the
//! keeper of the Slurm channel and the sweeper. The launcher (`src/jail/fallback.rs`) starts
//! each by exec'ing this binary under the helper's name with an empty environment, never as a
//! fork of itself left running: without a PID namespace the command sees them, reads every
//! process's arguments, and may read the keeper's environment and memory (stubs take the
//! channel from it by `pidfd_getfd`, which needs ptrace rights). A fork of the launcher would
//! hold the user's whole environment, unscrubbed, and the launcher's memory.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::time::{Duration, Instant};

/// `argv[0]` of the keeper: `agent-sandbox-keeper FD`.
pub const KEEPER: &str = "agent-sandbox-keeper";
/// `argv[0]` of the sweeper: `agent-sandbox-sweeper GO DONE`.
pub const SWEEPER: &str = "agent-sandbox-sweeper";

/// The descriptor numbers in `args`, each at least 3 (0-2 are /dev/null here).
fn descriptors<const N: usize>(args: &[OsString]) -> Option<[i32; N]> {
    let fds: Vec<i32> = args.iter().filter_map(|a| a.to_str()?.parse().ok()).filter(|fd| *fd > 2).collect();
    match fds.len() == args.len() {
        true => fds.try_into().ok(),
        false => None,
    }
}

/// Holds the session's end of the chaperon's channel at `FD` for stubs whose parent closed
/// theirs: they take a copy with `pidfd_getfd`, which needs ptrace rights over this process
/// (Landlock grants them within the domain; Yama's `ptrace_scope = 1` is lifted for it by
/// `PR_SET_PTRACER_ANY`: it holds nothing the session does not). Ends when the launcher's side
/// of the channel is gone; the sweeper (or the launcher's walk) ends it with the session.
pub fn keeper(args: &[OsString]) -> i32 {
    let Some([fd]) = descriptors::<1>(args) else {
        eprintln!("{KEEPER}: started by agent-sandbox with the channel's descriptor");
        return 2;
    };
    // A session of its own: the terminal's Ctrl-C to the command's group does not reach it.
    // SAFETY: setsid and prctl take no pointers; they only change this process.
    unsafe {
        libc::setsid();
        libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
    }
    agent_sandbox_sys::fd::close_all_but(&[fd]);
    // SAFETY: the channel stays open for the life of this process.
    let ch = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    loop {
        // No events asked: only the hang-up (or an error) wakes it, not the chaperon's answers
        // to garbage, which stay queued for whoever reads the channel.
        let mut p = [nix::poll::PollFd::new(ch, nix::poll::PollFlags::empty())];
        match nix::poll::poll(&mut p, nix::poll::PollTimeout::NONE) {
            Err(nix::Error::EINTR) => continue,
            _ => return 0,
        }
    }
}

/// Lives in the session's Landlock domain until the command has ended (`GO` closes: the
/// launcher says so, or died), then ends every process of the session: `kill(-1)`, which with
/// signal scoping reaches the processes of this domain and the domains nested in it and no
/// other, and which the kernel delivers to every one of them before any can fork again.
/// SIGTERM and SIGCONT first, half a second of grace, then SIGKILL until none is left.
/// Closes `DONE` by exiting.
pub fn sweeper(args: &[OsString]) -> i32 {
    let Some([go, done]) = descriptors::<2>(args) else {
        eprintln!("{SWEEPER}: started by agent-sandbox with its two pipes' descriptors");
        return 2;
    };
    // A session of its own: the terminal's Ctrl-C to the command's group does not reach it.
    let _ = agent_sandbox_sys::process::new_session_ignoring(&[
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGPIPE,
    ]);
    // Nothing else stays open here: the caller's stdout held by the sweeper would keep the
    // caller waiting (0-2 are /dev/null).
    agent_sandbox_sys::fd::close_all_but(&[go, done]);
    // Until a byte, the end of the pipe or an error other than an interruption.
    while let Err(e) = agent_sandbox_sys::fd::read_byte(go) {
        if e.kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    sweep();
    0
}

fn sweep() {
    let me = std::process::id() as i32;
    let all = Pid::from_raw(-1);
    let _ = kill(all, Signal::SIGTERM);
    let _ = kill(all, Signal::SIGCONT);
    let grace = Instant::now() + Duration::from_millis(500);
    while Instant::now() < grace && any_left(me) {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Bounded, so that a process stuck in the kernel cannot hold the session open.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let _ = kill(all, Signal::SIGKILL);
        if !any_left(me) || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether a live process other than `me` can still be signalled from here: with signal
/// scoping, a process of the session.
fn any_left(me: i32) -> bool {
    proc_entries().iter().any(|p| p.pid != me && !p.zombie && kill(Pid::from_raw(p.pid), None).is_ok())
}

/// One process as `/proc` shows it.
pub struct ProcEntry {
    pub pid: i32,
    pub ppid: i32,
    /// A zombie whose thread group has ended (nothing left to signal).
    pub zombie: bool,
}

/// Every process `/proc` shows.
pub fn proc_entries() -> Vec<ProcEntry> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
        let mut rest = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace();
        let (Some(state), Some(ppid)) = (rest.next(), rest.next().and_then(|p| p.parse::<i32>().ok())) else {
            continue;
        };
        // A zombie group leader whose other threads still run is no zombie: it is signalled
        // like any process (a kill of its pid reaches the whole thread group).
        let zombie = state == "Z" && std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count()) <= 1;
        out.push(ProcEntry { pid, ppid, zombie });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_take_only_descriptors_above_stdio() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(descriptors::<2>(&args(&["5", "6"])), Some([5, 6]));
        assert_eq!(descriptors::<1>(&args(&["1000"])), Some([1000]));
        assert_eq!(descriptors::<2>(&args(&["5"])), None);
        assert_eq!(descriptors::<1>(&args(&["2"])), None, "stdio is /dev/null, never the channel");
        assert_eq!(descriptors::<1>(&args(&["x"])), None);
        assert_eq!(descriptors::<1>(&args(&["3", "4"])), None);
    }
}
