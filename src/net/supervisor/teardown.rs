//! Hides tun0's teardown from the user: the kernel's unregistering of the device (an RCU
//! grace period, ~25 ms) is paid after the launcher has exited, by a forked child holding the
//! last reference; so is the unmapping of the launcher's memory, with or without tun0.
//! Knows nothing of what the supervisor does with the device.

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
/// for at every exit. A child keeps a reference to the device (and nothing else: not the
/// caller's stdout) until the launcher is gone, and pays that cost after it.
///
/// The child shares the launcher's memory (`CLONE_VM`) instead of copying it: no page tables
/// are copied, and the launcher's own exit no longer unmaps its address space either (the
/// child holds it until it ends, after the user got the status). So it is made without a
/// tun0 too (`isolated`, `proxied`): unmapping took 0.3-0.4 ms of the launcher's exit. It only
/// makes system calls, on a stack of its own (`agent_sandbox_sys::spawn::clone_vm_detached`),
/// and ends there.
pub fn defer_teardown() {
    let Ok((r, w)) = nix::unistd::pipe() else { return };
    // Without a tun0 the child keeps the pipe's read end alone.
    let r_fd = r.as_raw_fd();
    let tun = Some(TUN_FD.load(Ordering::Relaxed)).filter(|t| *t >= 0).unwrap_or(r_fd);
    // SAFETY: `hold` only makes system calls (none that touches this thread's own data) and
    // ends with the child, so it touches no allocator, lock or Rust state the launcher's
    // threads use. The launcher installs no signal handler (only SIG_IGN and SIG_DFL), so
    // none of its code can run in the child.
    let held = unsafe { agent_sandbox_sys::spawn::clone_vm_detached(64 * 1024, move || hold(tun, r_fd)) };
    if held.is_ok() {
        // The write end stays open in the launcher until it exits; the child sees EOF then.
        std::mem::forget(w);
    }
    drop(r);
}

/// The teardown holder: keeps the tun descriptor (if any: else its number is the pipe's) and
/// the pipe's read end `r`, closes the rest, waits for the launcher to exit (EOF), then ends.
fn hold(tun: RawFd, r: RawFd) -> libc::c_int {
    // Its own table (a copy: no CLONE_FILES), stdio included.
    agent_sandbox_sys::fd::close_from_but(0, &[tun, r]);
    // Its exit (tun0's teardown, the address space) yields the CPU to the user's shell; only
    // now, once the caller's descriptors are closed (the end of `$(agent-sandbox ...)` waits
    // for them, and a task at nice 19 may wait long for a core).
    agent_sandbox_sys::sched::last_in_line();
    // Returns at EOF, when the launcher has exited.
    let _ = agent_sandbox_sys::fd::read_byte(r);
    0
}
