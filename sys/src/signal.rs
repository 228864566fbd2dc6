//! Signal dispositions and the signal mask, as a process sets them before it runs another
//! program or for a life of its own. Allocation-free, so usable between a clone and an exec.

/// Puts every signal that has a handler back to default, and those of `also` whether they
/// are handled or ignored; the other ignored signals stay ignored. A child that shares its
/// parent's memory calls it first, so that no handler of the parent's runs on its stack.
pub fn reset_handlers(also: &[libc::c_int]) {
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: sigaction is plain data; all zero is a valid value, overwritten below.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: with a null new action, sigaction only reads the disposition into `sa`.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut sa) } != 0 {
            continue;
        }
        if also.contains(&sig) || (sa.sa_sigaction != libc::SIG_DFL && sa.sa_sigaction != libc::SIG_IGN) {
            sa.sa_sigaction = libc::SIG_DFL;
            sa.sa_flags = 0;
            // SAFETY: installs the default disposition, from a local; no handler.
            unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
        }
    }
}

/// Unblocks every signal of the calling thread.
pub fn unblock_all() {
    // SAFETY: sigset_t is plain data; sigemptyset fills the local in.
    let mut none: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigemptyset writes the local set, sigprocmask reads it.
    unsafe {
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// Ignores each signal of `sigs`.
pub fn ignore(sigs: &[libc::c_int]) {
    for sig in sigs {
        // SAFETY: SIG_IGN installs no handler.
        unsafe { libc::signal(*sig, libc::SIG_IGN) };
    }
}

/// Puts each signal of `sigs` back to its default action.
pub fn set_default(sigs: &[libc::c_int]) {
    for sig in sigs {
        // SAFETY: SIG_DFL installs no handler.
        unsafe { libc::signal(*sig, libc::SIG_DFL) };
    }
}

/// Takes every signal of `set` pending for the calling thread or its process, delivering
/// none and waiting for none (`sigtimedwait` with a zero timeout, until none is left); the
/// signals should be blocked, or they would have been delivered already. Answers how many
/// it took. Allocates nothing.
pub fn drain_pending(set: &libc::sigset_t) -> usize {
    let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    let mut taken = 0;
    // SAFETY: sigtimedwait reads the set and the zero timeout, and writes no siginfo (null);
    // with a zero timeout it returns at once, -1 once none of the set is pending.
    while unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &zero) } > 0 {
        taken += 1;
    }
    taken
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The disposition of `sig` in this process: SIG_DFL, SIG_IGN or a handler's address.
    pub(crate) fn disposition(sig: libc::c_int) -> libc::sighandler_t {
        // SAFETY: sigaction is plain data; a null new action only reads into it.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::sigaction(sig, std::ptr::null(), &mut sa) };
        sa.sa_sigaction
    }

    /// Runs `f` in a forked child (dispositions and masks are the whole process's; the test
    /// harness's threads must not see them change) and asserts it returns true there.
    pub(crate) fn in_child(f: impl FnOnce() -> bool) {
        let status = child_status(|| if f() { 0 } else { 1 });
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
    }

    /// Runs `f` in a forked child, which ends with what `f` returns (or however `f` ends it),
    /// and gives the child's raw wait status: the sys tests' one fork.
    pub(crate) fn child_status(f: impl FnOnce() -> libc::c_int) -> libc::c_int {
        // SAFETY: the child runs `f` (the tests' system calls) and _exits.
        match unsafe { libc::fork() } {
            0 => {
                let code = f();
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(code) }
            }
            pid => {
                let mut status = 0;
                // SAFETY: waits for our own child, writing the local status.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                status
            }
        }
    }

    extern "C" fn handler(_: libc::c_int) {}

    #[test]
    fn handlers_go_back_to_default_and_ignored_signals_stay_ignored_unless_named() {
        in_child(|| {
            // SAFETY: installs a handler that does nothing, in this forked child alone.
            unsafe { libc::signal(libc::SIGUSR1, handler as extern "C" fn(libc::c_int) as libc::sighandler_t) };
            ignore(&[libc::SIGUSR2, libc::SIGPIPE]);
            reset_handlers(&[libc::SIGPIPE]);
            disposition(libc::SIGUSR1) == libc::SIG_DFL
                && disposition(libc::SIGUSR2) == libc::SIG_IGN
                && disposition(libc::SIGPIPE) == libc::SIG_DFL
        });
    }

    #[test]
    fn unblock_all_empties_the_mask_and_set_default_undoes_ignore() {
        in_child(|| {
            // SAFETY: sigset_t is plain data, filled by sigfillset.
            let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: blocks every signal of this forked child's only thread.
            unsafe {
                libc::sigfillset(&mut all);
                libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
            }
            unblock_all();
            // SAFETY: reads the mask into the local.
            unsafe { libc::sigprocmask(libc::SIG_SETMASK, std::ptr::null(), &mut all) };
            // SAFETY: sigismember reads the local set.
            let unblocked = unsafe { libc::sigismember(&all, libc::SIGTERM) } == 0;
            ignore(&[libc::SIGHUP]);
            let ignored = disposition(libc::SIGHUP) == libc::SIG_IGN;
            set_default(&[libc::SIGHUP]);
            unblocked && ignored && disposition(libc::SIGHUP) == libc::SIG_DFL
        });
    }

    /// Two blocked signals pending: draining a set that holds one takes that one alone, once.
    #[test]
    fn drain_pending_takes_the_set_pending_signals_and_leaves_the_others() {
        in_child(|| {
            // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset below.
            let (mut both, mut one, mut pending): (libc::sigset_t, libc::sigset_t, libc::sigset_t) =
                unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
            // SAFETY: fills the local sets, blocks both signals in this forked child's only
            // thread and raises them (held pending, not delivered).
            unsafe {
                libc::sigemptyset(&mut both);
                libc::sigaddset(&mut both, libc::SIGUSR1);
                libc::sigaddset(&mut both, libc::SIGUSR2);
                libc::sigemptyset(&mut one);
                libc::sigaddset(&mut one, libc::SIGUSR1);
                libc::sigprocmask(libc::SIG_BLOCK, &both, std::ptr::null_mut());
                libc::raise(libc::SIGUSR1);
                libc::raise(libc::SIGUSR2);
            }
            let taken = drain_pending(&one);
            let again = drain_pending(&one);
            // SAFETY: sigpending and sigismember read into and from the local set.
            let (usr1, usr2) = unsafe {
                libc::sigpending(&mut pending);
                (libc::sigismember(&pending, libc::SIGUSR1), libc::sigismember(&pending, libc::SIGUSR2))
            };
            taken == 1 && again == 0 && usr1 == 0 && usr2 == 1
        });
    }
}
