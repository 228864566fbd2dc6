//! The number by which the mounted `/proc` names a process of ours. It is the process's pid
//! except where the launcher runs in a pid namespace whose `/proc` is another namespace's
//! (`unshare -p -f` without `--mount-proc`): there `/proc/<pid>` names another process, or
//! none, and writing the jail's id maps through it fails (or would write another process's).
//! A pidfd is the process itself, and its fdinfo gives the process's number in the pid
//! namespace of the `/proc` it is read from.

use nix::unistd::Pid;
use std::io;
use std::os::fd::AsRawFd;

/// The number of `pid` (a pid of the launcher's own namespace, a child not yet reaped) in
/// the mounted `/proc`.
pub fn in_proc(pid: Pid) -> io::Result<Pid> {
    let fd = match agent_sandbox_sys::pidfd::open(pid.as_raw()) {
        Ok(fd) => fd,
        // Before Linux 5.3 there are no pidfds: /proc is taken to be our namespace's.
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => return Ok(pid),
        Err(e) => return Err(e),
    };
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    number_in(&info).map(|n| n.unwrap_or(pid))
}

/// The `Pid:` line of a pidfd's fdinfo: Some(number), None where the kernel writes none (a
/// kernel that old shows /proc of the caller's namespace only), an error where the process is
/// not in this /proc's namespace (0) or has ended (-1).
fn number_in(fdinfo: &str) -> io::Result<Option<Pid>> {
    let Some(value) = fdinfo.lines().find_map(|l| l.strip_prefix("Pid:")) else {
        return Ok(None);
    };
    match value.trim().parse::<i32>() {
        Ok(n) if n > 0 => Ok(Some(Pid::from_raw(n))),
        Ok(0) => Err(io::Error::other(
            "the mounted /proc belongs to a pid namespace that does not see the jail's init \
             (mount a /proc of the launcher's own pid namespace: `unshare --mount-proc`)",
        )),
        Ok(_) => Err(io::Error::other("the jail's init ended while its id maps were written")),
        Err(_) => Err(io::Error::other(format!("unreadable pidfd fdinfo line `Pid:{value}`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fdinfo_pid_line_is_read_with_its_edge_values() {
        assert_eq!(
            number_in("pos:\t0\nflags:\t02000002\nPid:\t4242\nNSpid:\t4242\t7\n").unwrap(),
            Some(Pid::from_raw(4242))
        );
        assert_eq!(number_in("pos:\t0\nflags:\t02000002\n").unwrap(), None);
        assert!(number_in("Pid:\t0\n").unwrap_err().to_string().contains("--mount-proc"));
        assert!(number_in("Pid:\t-1\n").unwrap_err().to_string().contains("ended"));
        assert!(number_in("Pid:\tx\n").is_err());
    }

    #[test]
    fn our_own_child_is_named_by_its_pid_where_proc_is_ours() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        let got = in_proc(pid);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(got.unwrap(), pid);
    }
}
