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
        // SAFETY: the child only _exits.
        match unsafe { libc::fork() } {
            0 => exit_now(13),
            pid => {
                let mut status = 0;
                // SAFETY: waits for our own child, writing the local status.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 13, "status {status}");
            }
        }
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
}
