//! What a process says about itself: that it dies with its parent, that it leaves its
//! parent's session, that it ends now. Allocation-free, so usable between a clone and an
//! exec.

use std::io;

/// Asks the kernel to send this process `sig` when its parent thread ends
/// (`PR_SET_PDEATHSIG`). A parent already gone sends nothing: the caller checks it still
/// has the parent it expects (`getppid`) after this call where that matters.
pub fn die_with_parent(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; no pointers.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Names the calling thread `name` (what `ps` and `/proc/PID/comm` show for a process's
/// first thread); the kernel keeps its first 15 bytes.
pub fn set_name(name: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: PR_SET_NAME reads a NUL-terminated name that lives for the call.
    if unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Leaves the caller's session for a new one (so that its process group's and terminal's
/// signals miss this process) and ignores `sigs`. Fails (leaving the session as it was, the
/// signals ignored all the same) if the process leads its group already.
pub fn new_session_ignoring(sigs: &[libc::c_int]) -> io::Result<()> {
    // SAFETY: setsid takes nothing; it only changes this process.
    let made = unsafe { libc::setsid() };
    let e = io::Error::last_os_error();
    crate::signal::ignore(sigs);
    if made < 0 {
        return Err(e);
    }
    Ok(())
}

/// Makes `dir` the working directory. Allocates nothing: usable between a clone and an exec.
pub fn chdir(dir: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: chdir reads a NUL-terminated path that lives for the call.
    if unsafe { libc::chdir(dir.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Ends this process at once, with `code`, running no exit handler and nothing of its
/// parent's (the child of a clone that shares its memory ends with it).
pub fn exit_now(code: libc::c_int) -> ! {
    // SAFETY: _exit ends this process immediately; it touches no shared memory.
    unsafe { libc::_exit(code) }
}

/// Makes this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`):
/// they become its children, not init's, when their parent ends.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer; it only marks this process.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The raw wait status of child `pid` once it has ended: waits for it (`hang`), or answers
/// `None` at once while it runs. An interrupted wait is an error of kind `Interrupted`.
pub fn wait_status(pid: libc::pid_t, hang: bool) -> io::Result<Option<libc::c_int>> {
    let mut status = 0;
    // SAFETY: waitpid for one child of ours, writing into a local.
    match unsafe { libc::waitpid(pid, &mut status, if hang { 0 } else { libc::WNOHANG }) } {
        0 if !hang => Ok(None),
        p if p == pid => Ok(Some(status)),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Makes this process not dumpable (`PR_SET_DUMPABLE` 0): no core file, and a process of the
/// same user (one it runs) can neither ptrace it nor read its private /proc files.
pub fn not_dumpable() -> io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes an integer; it only marks this process.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How many threads this process has now (field 20 of `/proc/self/stat`). Allocates.
pub fn thread_count() -> io::Result<usize> {
    let stat = std::fs::read("/proc/self/stat")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "/proc/self/stat without a thread count");
    // Field 2, the command's name in parentheses, may hold spaces and parentheses itself.
    let after = stat.iter().rposition(|b| *b == b')').map(|i| &stat[i + 1..]).ok_or_else(bad)?;
    let fields = std::str::from_utf8(after).map_err(|_| bad())?;
    // Field 3 (the state) comes first after the name: field 20 is the 18th.
    fields.split_ascii_whitespace().nth(17).and_then(|n| n.parse().ok()).ok_or_else(bad)
}

/// Forks, once it has checked that this process has one thread, the caller's: the child
/// then has the whole process to itself (no lock of another thread's left held in its copy
/// of the memory), so it may run any code, allocating included. It runs `child` and ends
/// with what it returns (a panic: 101), at once (`exit_now`: no exit handler, nothing of
/// the parent's code after this call). The parent gets the child's pid, and drops its own
/// copy of `child` (what the closure holds, descriptors included) before this returns.
/// Refused (`child` not run) where the process has other threads, or its count cannot be
/// read (no /proc). A process that shares this one's memory without being one of its
/// threads (`spawn::clone_vm_detached`) is not counted: its own contract (system calls only,
/// no lock) is what keeps it out of the way.
pub fn fork_single_threaded<F: FnOnce() -> libc::c_int>(child: F) -> io::Result<libc::pid_t> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(io::Error::other(format!(
            "a fork needs a single-threaded process, this one has {threads} threads"
        )));
    }
    // SAFETY: the process has one thread, this one (checked above; only this thread could
    // start another one since): the child's copy of the memory holds no lock of another
    // thread's, and is its own. The child ends in this block; it never returns.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
            exit_now(code)
        }
        pid => Ok(pid),
    }
}

/// Whether a process of this one can unshare the namespaces of `flags` (`unshare(2)`): a
/// forked child tries, and ends. The caller's namespaces are left as they were. Usable
/// whatever threads the process has: the child makes system calls only.
pub fn can_unshare(flags: libc::c_int) -> bool {
    // SAFETY: the child makes two system calls (unshare, _exit), which are async-signal-safe,
    // so the fork is sound whatever threads the process has; it never returns from here.
    match unsafe { libc::fork() } {
        -1 => false,
        0 => {
            // SAFETY: unshare takes flags and moves only this child to new namespaces.
            let ok = unsafe { libc::unshare(flags) } == 0;
            exit_now(if ok { 0 } else { 1 })
        }
        pid => matches!(wait_status(pid, true), Ok(Some(s)) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::tests::{disposition, in_child};

    #[test]
    fn the_death_signal_is_set_and_read_back() {
        in_child(|| {
            let set = die_with_parent(libc::SIGUSR2).is_ok();
            let mut sig: libc::c_int = 0;
            // SAFETY: PR_GET_PDEATHSIG writes one int of ours.
            unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, &mut sig as *mut libc::c_int) };
            set && sig == libc::SIGUSR2 && die_with_parent(-1).is_err()
        });
    }

    #[test]
    fn a_new_session_is_led_by_the_caller_and_its_signals_are_ignored() {
        in_child(|| {
            let made = new_session_ignoring(&[libc::SIGHUP, libc::SIGTERM]).is_ok();
            // SAFETY: getsid and getpid read nothing of ours.
            let leads = unsafe { libc::getsid(0) == libc::getpid() };
            // A session leader cannot make another one; the signals are ignored all the same.
            let again = new_session_ignoring(&[libc::SIGINT]).is_err();
            made && leads
                && again
                && [libc::SIGHUP, libc::SIGTERM, libc::SIGINT].iter().all(|s| disposition(*s) == libc::SIG_IGN)
        });
    }

    #[test]
    fn exit_now_ends_with_its_code() {
        let status = crate::signal::tests::child_status(|| exit_now(13));
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 13, "status {status}");
    }

    #[test]
    fn chdir_moves_the_working_directory_or_says_why_not() {
        in_child(|| {
            let moved =
                chdir(c"/tmp").is_ok() && std::env::current_dir().is_ok_and(|d| d == std::path::Path::new("/tmp"));
            let missing = chdir(c"/nonexistent").err().and_then(|e| e.raw_os_error()) == Some(libc::ENOENT);
            moved && missing
        });
    }

    /// In a thread of its own (a name is the thread's): the name it is given is the one the
    /// kernel shows.
    #[test]
    fn set_name_names_the_calling_thread() {
        let shown = std::thread::spawn(|| {
            set_name(c"asb-test-name").unwrap();
            std::fs::read_to_string("/proc/thread-self/comm").unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(shown, "asb-test-name\n");
    }

    #[test]
    fn become_subreaper_marks_this_process() {
        in_child(|| {
            let became = become_subreaper().is_ok();
            let mut sub: libc::c_int = 0;
            // SAFETY: PR_GET_CHILD_SUBREAPER writes one int of ours.
            unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut sub as *mut libc::c_int) };
            became && sub == 1
        });
    }

    #[test]
    fn wait_status_answers_none_while_running_then_the_status() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x; exit 4"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as libc::pid_t;
        assert_eq!(wait_status(pid, false).unwrap(), None);
        drop(child.stdin.take());
        let status = wait_status(pid, true).unwrap().unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 4, "status {status}");
        assert_eq!(wait_status(pid, true).err().and_then(|e| e.raw_os_error()), Some(libc::ECHILD), "reaped once");
        assert!(child.wait().is_err(), "std finds it reaped too");
    }

    #[test]
    fn not_dumpable_clears_the_dumpable_flag() {
        in_child(|| {
            // SAFETY: PR_GET_DUMPABLE takes no pointer; it returns the flag.
            let before = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
            let done = not_dumpable().is_ok();
            // SAFETY: as above.
            before == 1 && done && unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } == 0
        });
    }

    /// In a forked child (the harness has threads of its own): one thread, then two while
    /// another runs; `fork_single_threaded` forks then, and only then.
    #[test]
    fn a_single_threaded_process_forks_and_one_with_another_thread_is_refused() {
        in_child(|| {
            let one = thread_count().ok() == Some(1);
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let other = std::thread::spawn(move || rx.recv());
            let two = thread_count().ok() == Some(2);
            let refused = fork_single_threaded(|| 0).is_err();
            drop(tx);
            let _ = other.join();
            // The thread is joined; the kernel may count it a moment longer.
            let alone = (0..1000).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                thread_count().ok() == Some(1)
            });
            one && two && refused && alone
        });
    }

    /// The child runs the closure (what it writes on a pipe reaches the parent), ends with
    /// its return (or 101 for a panic), and the parent's copy of the closure is dropped.
    #[test]
    fn the_forked_child_runs_the_closure_and_ends_with_its_return() {
        in_child(|| {
            let (r, w) = std::io::pipe().unwrap();
            let pid = fork_single_threaded(move || {
                use std::io::Write;
                let mut w = w;
                let _ = w.write_all(b"ran");
                7
            });
            let Ok(pid) = pid else { return false };
            // The parent's write end is gone with the closure: the read ends at the child's.
            let mut got = String::new();
            let read = std::io::Read::read_to_string(&mut { r }, &mut got).is_ok();
            let status = wait_status(pid, true).ok().flatten().unwrap_or(-1);
            let panicked = fork_single_threaded(|| panic!("in the child")).and_then(|p| wait_status(p, true));
            let panic_status = panicked.ok().flatten().unwrap_or(-1);
            read && got == "ran"
                && libc::WIFEXITED(status)
                && libc::WEXITSTATUS(status) == 7
                && libc::WIFEXITED(panic_status)
                && libc::WEXITSTATUS(panic_status) == 101
        });
    }

    /// What the kernel allows answers true, what it refuses false, and the caller's own
    /// namespace stays the one it had.
    #[test]
    fn can_unshare_answers_for_a_child_and_leaves_the_caller_as_it_was() {
        let uts = || std::fs::read_link("/proc/self/ns/uts").unwrap();
        let before = uts();
        assert!(can_unshare(0), "no namespace: nothing to refuse");
        // Not a namespace flag: unshare refuses it (EINVAL).
        assert!(!can_unshare(libc::CLONE_PARENT));
        // As root (or where user namespaces are open), a new UTS namespace, in the child alone.
        let _ = can_unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWUTS);
        assert_eq!(uts(), before);
    }
}
