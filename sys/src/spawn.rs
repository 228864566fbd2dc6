//! The workspace's clones that share the caller's memory: `clone_vfork` (a child that shares
//! it until its exec, so starting a program copies no page table, however big the caller is)
//! and `clone_vm_detached` (a child that keeps it, and may outlive the caller); and the exec
//! such a child ends with, allocating nothing.

use std::ffi::{c_char, CStr, CString};
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

/// Runs `child` in a new process that shares this one's memory (`CLONE_VM`, without
/// `CLONE_VFORK`: the call returns at once) and may outlive the caller, whose address space
/// it then keeps mapped until it ends. Its stack is a mapping of `stack` bytes that is never
/// unmapped, and `child` is moved onto it: nothing the child reads is on the caller's stack.
/// The child ends with `exit` (its own thread only, no exit handler) and the status `child`
/// returns. It starts with the calling thread's signal mask and a copy of the caller's
/// handlers, as a forked child does.
///
/// # Safety
/// `child` runs with the caller's memory shared, and its thread's (errno, thread-local
/// data): it must make system calls only (no allocation, no lock, no call that touches the
/// thread's own data, such as a cancellation point of glibc's), and no handler of the caller
/// may run in it.
pub unsafe fn clone_vm_detached<F: FnOnce() -> libc::c_int + Send + 'static>(
    stack: usize,
    child: F,
) -> io::Result<libc::pid_t> {
    extern "C" fn trampoline<F: FnOnce() -> libc::c_int>(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the start of the child's mapping, where `clone_vm_detached` wrote
        // an F that nothing else reads (the parent forgot it); the mapping is never unmapped.
        let f = unsafe { arg.cast::<F>().read() };
        let code = f();
        // SAFETY: ends this child's only thread at once, running nothing of the caller's.
        unsafe { libc::syscall(libc::SYS_exit, code) };
        code
    }
    // The closure at the bottom of the mapping, the stack growing down from its top.
    if std::mem::size_of::<F>() > stack / 2 || std::mem::align_of::<F>() > 16 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a new private anonymous mapping; the result is checked before use.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            stack,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `base` is a fresh writable mapping of `stack` bytes, page-aligned, and F fits
    // in its lower half (checked above).
    unsafe { base.cast::<F>().write(child) };
    let top = (base as usize + stack) & !15;
    // SAFETY: the child runs `trampoline` on the mapping's top, in a process that shares this
    // memory; the caller vouches for what `child` does there.
    let pid = unsafe { libc::clone(trampoline::<F>, top as *mut libc::c_void, libc::CLONE_VM | libc::SIGCHLD, base) };
    if pid < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: no child was made: the closure is read back (and dropped) once, and the
        // mapping, which nothing else uses, is unmapped.
        unsafe {
            drop(base.cast::<F>().read());
            libc::munmap(base, stack);
        }
        return Err(e);
    }
    Ok(pid)
}

/// C strings and the null-terminated array of pointers to them that `execve` takes, made
/// before a clone so that the child allocates nothing.
pub struct CStrings {
    _owned: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl CStrings {
    pub fn new(strings: Vec<CString>) -> CStrings {
        let ptrs = strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        CStrings { _owned: strings, ptrs }
    }
}

/// Replaces this process's program with `program`, with arguments `argv` and environment
/// `envp`; returns only why it could not. Allocates nothing: usable between a clone and an
/// exec.
pub fn exec(program: &CStr, argv: &CStrings, envp: &CStrings) -> io::Error {
    // SAFETY: the path is NUL-terminated and both arrays are null-terminated arrays of
    // pointers to live C strings (`CStrings`), all alive for the call.
    unsafe { libc::execve(program.as_ptr(), argv.ptrs.as_ptr(), envp.ptrs.as_ptr()) };
    io::Error::last_os_error()
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

    /// The detached child runs the closure moved to its own stack (the caller's frame is gone
    /// by then), shares our memory, and exits with what the closure returns.
    #[test]
    fn a_detached_child_runs_its_closure_on_shared_memory_and_exits_with_its_status() {
        static SEEN: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
        let pid = {
            let given = [11, 31];
            // SAFETY: the closure stores one integer and returns: no allocation, no lock.
            unsafe {
                clone_vm_detached(64 << 10, move || {
                    SEEN.store(given[0] + given[1], std::sync::atomic::Ordering::SeqCst);
                    5
                })
            }
            .unwrap()
        };
        let mut status = 0;
        // SAFETY: waits for our own child, writing the local status.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 5, "status {status}");
        assert_eq!(SEEN.load(std::sync::atomic::Ordering::SeqCst), 42, "the child did not share our memory");
        // A closure larger than half the stack is refused, not run.
        let large = [1u8; 4096];
        // SAFETY: as above.
        let big = unsafe { clone_vm_detached(4096, move || large.len() as i32) };
        assert_eq!(big.err().and_then(|e| e.raw_os_error()), Some(libc::EINVAL));
    }

    /// `exec` runs the program with exactly the arguments and environment given; a missing
    /// program is its error. The exec is tried in a forked child, which reports by status.
    #[test]
    fn exec_runs_the_program_with_its_arguments_and_environment_or_says_why_not() {
        let c = |s: &str| CString::new(s).unwrap();
        let argv = CStrings::new(vec![c("sh"), c("-c"), c("test \"$0/$X\" = zero/y && exit 9"), c("zero")]);
        let envp = CStrings::new(vec![c("X=y")]);
        let missing = exec(c"/nonexistent/sh", &argv, &envp);
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
        let status = crate::signal::tests::child_status(|| {
            let _ = exec(c"/bin/sh", &argv, &envp);
            1
        });
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 9, "status {status}");
    }
}
