//! Tests that need a process of their own: the test binary's other threads fork too, and a
//! child of theirs holds a copy of every descriptor open at that moment (a lock among them).

/// Forks, runs `f` in the child and returns its exit status: `f`'s value, or 101 if it
/// panicked (its message on stderr). The child never returns into the test harness.
pub(crate) fn in_child(f: impl FnOnce() -> i32) -> nix::sys::wait::WaitStatus {
    // SAFETY: the child runs `f` (system calls, small allocations) and _exits.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        nix::unistd::ForkResult::Child => {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) }
        }
        nix::unistd::ForkResult::Parent { child } => nix::sys::wait::waitpid(child, None).expect("waitpid"),
    }
}
