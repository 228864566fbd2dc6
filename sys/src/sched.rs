//! Where a thread stands in line for the CPU.

/// Puts the calling thread last in line for the CPU (nice 19, still never starved): for the
/// work a session leaves after the user has their status back (the jail's init tearing
/// down its namespaces, the waiter's cleanup, tun0's teardown). On a login node, and on a
/// two-core VM, that work otherwise competes with the user's shell for the same cores and
/// delays its wake-up by the launcher's exit (0.3 ms of a `run -- true` measured).
pub fn last_in_line() {
    // SAFETY: setpriority on the calling thread (who 0) reads and writes no memory; raising
    // one's own nice value needs no privilege, and a refusal only leaves it as it was.
    unsafe { libc::syscall(libc::SYS_setpriority, libc::PRIO_PROCESS, 0, 19) };
}

#[cfg(test)]
mod tests {
    /// The thread that calls it, and only that one, runs at nice 19 from then on.
    #[test]
    fn last_in_line_puts_the_calling_thread_at_nice_19() {
        let nice = || {
            // SAFETY: getpriority of the calling thread reads no memory of ours.
            unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_PROCESS, 0) }
        };
        let before = nice();
        // The raw system call answers 20 - nice: 1 for nice 19.
        let after = std::thread::spawn(move || {
            super::last_in_line();
            nice()
        })
        .join()
        .unwrap();
        assert_eq!(after, 1);
        assert_eq!(nice(), before, "another thread's priority changed");
    }
}
