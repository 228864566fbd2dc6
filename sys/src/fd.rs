//! Descriptors a process keeps when it hands itself to another program: every one but
//! those named is closed, or marked to close at the exec. Allocation-free, so usable between
//! a clone and an exec.

use std::os::fd::RawFd;

/// Closes every descriptor of this process from 3 up but `keep` (0-2 are left to the
/// caller). Allocates nothing: usable in a child that shares its parent's memory.
pub fn close_all_but(keep: &[RawFd]) {
    close_from_but(3, keep)
}

/// Closes every descriptor of this process from `lo` up but `keep`. Allocates nothing.
pub fn close_from_but(mut lo: u32, keep: &[RawFd]) {
    loop {
        let next = keep.iter().filter_map(|k| u32::try_from(*k).ok()).filter(|k| *k >= lo).min();
        match next {
            Some(k) => {
                if k > lo {
                    close_range(lo, k - 1, 0);
                }
                lo = k.saturating_add(1);
            }
            None => {
                close_range(lo, u32::MAX, 0);
                return;
            }
        }
    }
}

/// Marks every descriptor from `lo` up close-on-exec: the program run next holds only
/// what the caller opens (or clears the mark of) after this.
pub fn cloexec_from(lo: u32) {
    close_range(lo, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
}

/// `close_range(2)` (Linux 5.9; 5.11 for CLOSE_RANGE_CLOEXEC), one descriptor at a time up
/// to the descriptor limit where the kernel has no such call.
fn close_range(lo: u32, hi: u32, flags: u32) {
    // SAFETY: close_range only closes (or flags) descriptors of this process's own table.
    if unsafe { libc::syscall(libc::SYS_close_range, lo, hi, flags) } == 0 {
        return;
    }
    // SAFETY: getrlimit writes the local struct; it is plain data.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let max = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } {
        0 => lim.rlim_cur.min(1 << 20) as u32,
        _ => 1 << 16,
    };
    for fd in lo..=hi.min(max.saturating_sub(1)) {
        // SAFETY: close and fcntl on this process's own descriptor numbers; a closed one
        // answers EBADF and nothing else happens.
        unsafe {
            if flags & libc::CLOSE_RANGE_CLOEXEC != 0 {
                libc::fcntl(fd as RawFd, libc::F_SETFD, libc::FD_CLOEXEC);
            } else {
                libc::close(fd as RawFd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, IntoRawFd};

    fn open(fd: RawFd) -> bool {
        // SAFETY: F_GETFD on a descriptor number reads no memory.
        unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
    }

    /// In a forked child (the test harness's threads hold descriptors of their own), only the
    /// kept descriptors and 0-2 stay open.
    #[test]
    fn close_all_but_keeps_only_what_it_names() {
        let files: Vec<RawFd> = (0..6).map(|_| std::fs::File::open("/dev/null").unwrap().into_raw_fd()).collect();
        let keep = [files[4], files[1]];
        // SAFETY: the child makes system calls only and ends with _exit.
        match unsafe { libc::fork() } {
            0 => {
                close_all_but(&keep);
                let kept = keep.iter().all(|fd| open(*fd));
                let closed = files.iter().filter(|fd| !keep.contains(fd)).all(|fd| !open(*fd));
                let stdio = (0..3).all(open);
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(if kept && closed && stdio { 0 } else { 1 }) }
            }
            pid => {
                let mut status = 0;
                // SAFETY: waits for our own child, writing the local status.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
            }
        }
        for fd in files {
            // SAFETY: our own descriptors, opened above.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn cloexec_from_marks_every_descriptor_past_the_bound() {
        let a = std::fs::File::open("/dev/null").unwrap();
        let b = std::fs::File::open("/dev/null").unwrap();
        let (lo, hi) = (a.as_raw_fd().min(b.as_raw_fd()), a.as_raw_fd().max(b.as_raw_fd()));
        // SAFETY: clears the flag on our own descriptor.
        unsafe { libc::fcntl(hi, libc::F_SETFD, 0) };
        // SAFETY: as above.
        unsafe { libc::fcntl(lo, libc::F_SETFD, 0) };
        // Marks only what is past `hi`'s number, and `hi` itself.
        cloexec_from(hi as u32);
        // SAFETY: F_GETFD reads no memory.
        let flag = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(flag(hi) & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        assert_eq!(flag(lo) & libc::FD_CLOEXEC, 0);
        // Back as std made it.
        cloexec_from(lo as u32);
    }
}
