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

/// Reads one byte from `fd`: `None` at the end of the file (a pipe whose every write end is
/// closed). One `read(2)`, made with `syscall` rather than libc's wrapper, which is a
/// cancellation point that writes to the calling thread's own data: usable in a child that
/// shares the thread of its parent (`spawn::clone_vm_detached`). An interrupted read is an
/// error of kind `Interrupted`; the caller decides whether to read again.
pub fn read_byte(fd: RawFd) -> std::io::Result<Option<u8>> {
    let mut b = 0u8;
    // SAFETY: reads at most one byte into a local.
    match unsafe { libc::syscall(libc::SYS_read, fd, (&mut b as *mut u8).cast::<libc::c_void>(), 1usize) } {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        0 => Ok(None),
        _ => Ok(Some(b)),
    }
}

/// Opens `/dev/null` on each of descriptors 0-2 that is closed, as Rust's runtime start does
/// (a program whose entry point is C's `main` skips it). Without it, the next socket or file
/// the process opens takes the closed number and becomes its stdin, stdout or stderr.
/// Aborts if one cannot be opened, as the runtime does.
pub fn open_standard_descriptors() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
    // SAFETY: poll reads and writes the three pollfd entries of a local array.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
    for p in fds {
        let closed = match polled {
            // SAFETY: fcntl(F_GETFD) only asks whether the descriptor is open.
            n if n < 0 => (unsafe { libc::fcntl(p.fd, libc::F_GETFD) }) == -1,
            _ => p.revents & libc::POLLNVAL != 0,
        };
        // SAFETY: opens /dev/null at the lowest free number: this one, the lower ones being
        // open by now. Without it, as in Rust's runtime start, the process cannot go on.
        if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } == -1 {
            std::process::abort();
        }
    }
}

/// Makes `fds[i]` descriptor `i` (0, 1, 2; -1 leaves that one as it is), the descriptors
/// given keeping their own numbers too. Those given that are among 0-2 are first copied out of
/// the way (close-on-exec copies from 3 up), so that no placing overwrites a later source.
/// Allocates nothing: usable between a clone and an exec.
pub fn place_stdio(mut fds: [RawFd; 3]) -> std::io::Result<()> {
    for fd in fds.iter_mut() {
        if (0..3).contains(fd) {
            // SAFETY: F_DUPFD_CLOEXEC copies a descriptor of this process's own table.
            *fd = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 3) };
            if *fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    for (target, fd) in fds.iter().enumerate() {
        // SAFETY: dup2 within this process's own table.
        if *fd >= 0 && unsafe { libc::dup2(*fd, target as libc::c_int) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Writes each of `parts` to `fd`, one `write(2)` apiece, its result ignored (a report on a
/// way out). Allocates nothing: usable between a clone and an exec.
pub fn write_parts(fd: RawFd, parts: &[&[u8]]) {
    for p in parts {
        // SAFETY: writes from a live buffer.
        let _ = unsafe { libc::write(fd, p.as_ptr().cast(), p.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::tests::in_child;
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
        in_child(|| {
            close_all_but(&keep);
            let kept = keep.iter().all(|fd| open(*fd));
            let closed = files.iter().filter(|fd| !keep.contains(fd)).all(|fd| !open(*fd));
            kept && closed && (0..3).all(open)
        });
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

    #[test]
    fn read_byte_reads_one_byte_then_the_end() {
        use std::io::Write;
        let (r, w) = std::io::pipe().unwrap();
        (&w).write_all(b"xy").unwrap();
        drop(w);
        assert_eq!(read_byte(r.as_raw_fd()).unwrap(), Some(b'x'));
        assert_eq!(read_byte(r.as_raw_fd()).unwrap(), Some(b'y'));
        assert_eq!(read_byte(r.as_raw_fd()).unwrap(), None);
        assert!(read_byte(-1).is_err());
    }

    /// In a forked child with descriptors 1 and 2 closed (and 0 open), the two are opened on
    /// /dev/null and 0 is left as it was.
    #[test]
    fn closed_standard_descriptors_are_opened_on_dev_null() {
        let null = std::fs::metadata("/dev/null").unwrap();
        use std::os::unix::fs::MetadataExt;
        let is_null = |fd: RawFd| {
            // SAFETY: fstat writes one stat of ours; all zero is a valid value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            unsafe { libc::fstat(fd, &mut st) == 0 && st.st_rdev == null.rdev() && st.st_ino == null.ino() }
        };
        let pipe = std::io::pipe().unwrap();
        in_child(|| {
            // SAFETY: this forked child's own stdio.
            unsafe {
                libc::dup2(pipe.0.as_raw_fd(), 0);
                libc::close(1);
                libc::close(2);
            }
            open_standard_descriptors();
            open(1) && open(2) && is_null(1) && is_null(2) && !is_null(0)
        });
    }

    /// In a forked child: stdin and stdout swapped (each given as the other's number), stderr
    /// left alone; the inode of each says where it went.
    #[test]
    fn place_stdio_swaps_without_overwriting_a_source() {
        let ino = |fd: RawFd| {
            // SAFETY: fstat writes one stat of ours; all zero is a valid value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            unsafe { libc::fstat(fd, &mut st) };
            st.st_ino
        };
        let (r, _w) = std::io::pipe().unwrap();
        in_child(|| {
            // SAFETY: this forked child's own stdio: 0 the pipe's read end, 1 /dev/null.
            unsafe {
                libc::dup2(r.as_raw_fd(), 0);
                libc::dup2(libc::open(c"/dev/null".as_ptr(), libc::O_RDWR), 1);
            }
            let (i0, i1, i2) = (ino(0), ino(1), ino(2));
            let placed = place_stdio([1, 0, -1]).is_ok();
            placed && i0 != i1 && ino(0) == i1 && ino(1) == i0 && ino(2) == i2
        });
        assert!(place_stdio([-1, -1, -1]).is_ok(), "nothing to place");
    }

    #[test]
    fn write_parts_writes_each_part_in_order() {
        use std::io::Read;
        let (mut r, w) = std::io::pipe().unwrap();
        write_parts(w.as_raw_fd(), &[b"one ", b"", b"two\n"]);
        drop(w);
        let mut got = String::new();
        r.read_to_string(&mut got).unwrap();
        assert_eq!(got, "one two\n");
    }
}
