//! Process descriptors (Linux 5.3+): a process named by a descriptor, not by a pid that the
//! kernel may give to another process once it is reaped.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A pidfd of process `pid`: it stays that process's even once the pid is reused.
pub fn open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just made this descriptor for us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A copy of descriptor `fd` of the process behind `pidfd` (Linux 5.6), close-on-exec. It
/// needs ptrace rights over that process.
pub fn getfd(pidfd: &OwnedFd, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number and flags and returns a new
    // descriptor or -1; it reads no memory of ours.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above, a descriptor the kernel just installed for us.
    Ok(unsafe { OwnedFd::from_raw_fd(copy as RawFd) })
}

/// Whether the process behind `pidfd` ends within `timeout_ms` (-1: waits for it). An error
/// of the poll itself counts as ended: a caller waiting for the end must not wait for ever.
pub fn ended(pidfd: &OwnedFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd: pidfd.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: polls one pollfd that lives for the call.
        match unsafe { libc::poll(&mut p, 1, timeout_ms) } {
            n if n >= 0 => return n > 0,
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => return true,
        }
    }
}

/// Sends signal `sig` to the process behind `pidfd` (Linux 5.1), never to one that reused
/// its pid.
pub fn send_signal(pidfd: &OwnedFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: pidfd_send_signal with a pidfd we own, no siginfo, no flags: it reads no memory
    // of ours.
    if unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), sig, 0usize, 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_tells_when_its_process_ends_and_copies_its_descriptors() {
        let mut child = std::process::Command::new("sleep").arg("0.3").spawn().unwrap();
        let fd = open(child.id() as libc::pid_t).unwrap();
        assert!(!ended(&fd, 0), "running");
        let copy = getfd(&fd, 0).expect("a descriptor of our own child");
        // SAFETY: F_GETFD reads no memory.
        assert!(unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_GETFD) } & libc::FD_CLOEXEC != 0);
        assert!(ended(&fd, 5000), "ended");
        child.wait().unwrap();
        assert!(open(i32::MAX).is_err());
    }

    #[test]
    fn a_signal_sent_through_a_pidfd_reaches_its_process() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let fd = open(child.id() as libc::pid_t).unwrap();
        send_signal(&fd, libc::SIGTERM).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
        // Reaped: the process is gone, and the pidfd says so instead of reaching another.
        assert_eq!(send_signal(&fd, libc::SIGTERM).err().and_then(|e| e.raw_os_error()), Some(libc::ESRCH));
    }
}
