//! The one `clone(CLONE_VM | CLONE_VFORK)` of the workspace: a child that shares the
//! caller's memory until its exec, so starting a program copies no page table, however big
//! the caller is.

use std::io;

/// Runs `child` in a new process that shares this one's memory, on `stack`, and returns its
/// pid once it has exec'd or ended (`CLONE_VFORK`). Every signal stays blocked for the
/// clone: a handler of the caller's must never run on the child's stack, so `child` puts
/// the handlers it needs back to default and unblocks them itself. `child` must make system
/// calls only (no allocation, no lock: the caller's other threads hold them) and never
/// return into code that would unwind; what it returns is its exit status.
///
/// # Safety
/// `child` runs with the caller's memory shared: it must meet the rules above.
pub unsafe fn clone_vfork<F: FnMut() -> libc::c_int>(stack: &mut [u8], mut child: F) -> io::Result<libc::pid_t> {
    extern "C" fn trampoline<F: FnMut() -> libc::c_int>(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the closure the parent thread keeps alive while it waits.
        let f = unsafe { &mut *arg.cast::<F>() };
        f()
    }
    // SAFETY: sigset_t is plain data (all zero is a valid value, filled in below).
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: sigfillset writes the local set; pthread_sigmask changes only this thread's
    // mask, restored below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // 16-byte aligned top, as the x86-64 and aarch64 ABIs want it.
    let top = (stack.as_mut_ptr_range().end as usize) & !15;
    // SAFETY: the child runs `child` on `stack`, which outlives the call (CLONE_VFORK returns
    // only once the child exec'd or exited), as does the closure; the caller vouches that the
    // closure only makes system calls.
    let pid = unsafe {
        libc::clone(
            trampoline::<F>,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut child as *mut F).cast(),
        )
    };
    let e = io::Error::last_os_error();
    // SAFETY: as above: this thread's mask back as it was.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if pid < 0 {
        return Err(e);
    }
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child runs before the call returns (it shares our memory: what it writes is seen),
    /// exits with what it returns, and the caller's signal mask is as it was.
    #[test]
    fn the_child_runs_on_shared_memory_before_the_call_returns() {
        let mut stack = vec![0u8; 64 << 10];
        let mut seen: i32 = 0;
        let seen_at = &mut seen as *mut i32;
        // SAFETY: the closure writes one integer and returns: no allocation, no lock.
        let pid = unsafe {
            clone_vfork(&mut stack, || {
                *seen_at = 7;
                3
            })
        }
        .unwrap();
        assert_eq!(seen, 7, "the child ran before the clone returned");
        let mut status = 0;
        // SAFETY: waits for our own child, writing the local status.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3, "status {status}");
        // SAFETY: reads this thread's mask into a local.
        let mut now: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut now) };
        // SAFETY: sigismember reads the local set.
        assert_eq!(unsafe { libc::sigismember(&now, libc::SIGTERM) }, 0, "the mask was not put back");
    }
}
