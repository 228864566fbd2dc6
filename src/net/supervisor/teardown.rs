//! Hides tun0's teardown from the user: the kernel's unregistering of the device (an RCU
//! grace period, ~25 ms) is paid after the launcher has exited, by a forked child holding the
//! last reference. Knows nothing of what the supervisor does with the device.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// The tun fd's number while a supervisor serves it (-1: none), for `defer_teardown`.
static TUN_FD: AtomicI32 = AtomicI32::new(-1);

/// Notes the tun fd the supervisor serves, for `defer_teardown`.
pub(super) fn remember_tun(fd: RawFd) {
    TUN_FD.store(fd, Ordering::Relaxed);
}

/// Called by the launcher just before it exits. Closing the last reference to tun0 makes the
/// kernel unregister the device and wait for an RCU grace period: ~25 ms the user would wait
/// for at every exit. A forked child keeps a reference to the device (and nothing else: not
/// the caller's stdout) until the launcher is gone, and pays that cost after it.
pub fn defer_teardown() {
    let tun = TUN_FD.load(Ordering::Relaxed);
    if tun < 0 {
        return;
    }
    let Ok((r, w)) = nix::unistd::pipe() else { return };
    let (raw_r, w) = (r.as_raw_fd(), std::mem::ManuallyDrop::new(w));
    // SAFETY: the child only calls async-signal-safe functions (close_range, close, read,
    // _exit), as a fork of a multi-threaded process must.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let (lo, hi) = (tun.min(raw_r), tun.max(raw_r));
            let ranges = [(0, lo - 1), (lo + 1, hi - 1), (hi + 1, i32::MAX)];
            for (a, b) in ranges {
                if a <= b {
                    // SAFETY: closes descriptors of this child only (nix has no close_range).
                    unsafe { libc::syscall(libc::SYS_close_range, a as u32, b as u32, 0u32) };
                }
            }
            // Returns at EOF, when the launcher (holding the write end) has exited.
            let _ = nix::unistd::read(&r, &mut [0u8; 1]);
            // SAFETY: _exit ends this child without running the parent's exit handlers (nix
            // has no wrapper for it).
            unsafe { libc::_exit(0) }
        }
        // The write end stays open in the launcher until it exits (ManuallyDrop).
        Ok(nix::unistd::ForkResult::Parent { .. }) | Err(_) => {
            let _ = w;
        }
    }
}
