//! `--json-status FD`, for orchestrators that start one jail per agent: one JSON line on FD
//! when the jail starts (session id, project, effective network mode, backend, limits) and one
//! when it ends (exit status or signal, denials counted from the session's audit records, or
//! why it could not start). The descriptor is the caller's; the jailed command never sees it
//! (close-on-exec).

use serde_json::json;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::sync::Mutex;

static STATUS: Mutex<Option<std::fs::File>> = Mutex::new(None);

/// Takes `fd` for the status lines. An fd that is not open is an error the caller reports.
pub fn open(fd: i32) -> Result<(), String> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
    // SAFETY: fcntl on a descriptor number the caller named; F_GETFD reads its flags only.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let flags = fcntl(borrowed, FcntlArg::F_GETFD).map_err(|e| format!("--json-status {fd}: {e}"))?;
    if fd <= 2 {
        return Err(format!("--json-status {fd}: use a descriptor of its own (3 or more), not stdin/stdout/stderr"));
    }
    let status_flags = fcntl(borrowed, FcntlArg::F_GETFL).map_err(|e| format!("--json-status {fd}: {e}"))?;
    let access = OFlag::from_bits_truncate(status_flags) & OFlag::O_ACCMODE;
    if access != OFlag::O_WRONLY && access != OFlag::O_RDWR {
        return Err(format!("--json-status {fd}: the descriptor is not open for writing"));
    }
    let st = nix::sys::stat::fstat(borrowed).map_err(|e| format!("--json-status {fd}: {e}"))?;
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        return Err(format!("--json-status {fd}: a directory, not a file or pipe"));
    }
    let cloexec = FdFlag::from_bits_truncate(flags) | FdFlag::FD_CLOEXEC;
    fcntl(borrowed, FcntlArg::F_SETFD(cloexec)).map_err(|e| format!("--json-status {fd}: {e}"))?;
    // A caller that never reads must not stop the session: a full pipe drops the line.
    let nonblock = OFlag::from_bits_truncate(status_flags) | OFlag::O_NONBLOCK;
    fcntl(borrowed, FcntlArg::F_SETFL(nonblock)).map_err(|e| format!("--json-status {fd}: {e}"))?;
    // SAFETY: the caller gave this process the descriptor for the status lines; from here on
    // this File owns it, and nothing else in the launcher uses that number.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    if let Ok(mut s) = STATUS.lock() {
        *s = Some(file);
    }
    Ok(())
}

/// Whether a caller asked for status lines (what they need is gathered only then).
pub fn enabled() -> bool {
    STATUS.lock().is_ok_and(|s| s.is_some())
}

fn write(v: serde_json::Value) {
    let Ok(mut s) = STATUS.lock() else { return };
    if let Some(f) = s.as_mut() {
        let mut line = v.to_string();
        line.push('\n');
        // A caller that stopped reading costs it the status, never the session.
        let _ = f.write_all(line.as_bytes());
    }
}

/// The jail is about to start.
pub fn started(session: &str, project: &str, net: &str, backend: &str, limits: &str) {
    write(
        json!({"event": "start", "session": session, "project": project, "net": net, "backend": backend, "limits": limits}),
    );
}

/// The jail ended: its command's exit status or signal, and the session's denials.
pub fn ended(session: &str, exit: Option<i32>, signal: Option<i32>, denials: u64, duration_ms: u64) {
    write(
        json!({"event": "exit", "session": session, "status": exit, "signal": signal, "denials": denials, "duration_ms": duration_ms}),
    );
}

/// The jail could not start (exit status 126, or 127 for a command not found).
pub fn refused(session: &str, status: i32, reason: &str) {
    write(
        json!({"event": "exit", "session": session, "status": status, "signal": null, "denials": 0, "reason": reason}),
    );
}

/// Denials of `session` in the audit log written after `from` bytes: refused flows and names,
/// refused file operations, refused Slurm calls.
pub fn count_denials(log: &std::path::Path, from: u64, session: &str) -> u64 {
    use std::io::{BufRead, Seek};
    let Ok(mut f) = std::fs::File::open(log) else { return 0 };
    if f.seek(std::io::SeekFrom::Start(from)).is_err() {
        return 0;
    }
    let needle = format!("\"session\":\"{session}\"");
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.contains(&needle))
        .filter(|l| {
            l.contains("\"event\":\"net_denied\"")
                || l.contains("\"event\":\"fs_denied\"")
                || (l.contains("\"event\":\"slurm\"") && l.contains("\"decision\":\"denied\""))
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_are_counted_for_the_session_after_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        std::fs::write(&log, "{\"session\":\"a\",\"event\":\"net_denied\"}\n").unwrap();
        let from = std::fs::metadata(&log).unwrap().len();
        let lines = [
            "{\"session\":\"a\",\"event\":\"net_denied\"}",
            "{\"session\":\"b\",\"event\":\"net_denied\"}",
            "{\"session\":\"a\",\"event\":\"fs_denied\"}",
            "{\"session\":\"a\",\"event\":\"slurm\",\"decision\":\"denied\"}",
            "{\"session\":\"a\",\"event\":\"slurm\",\"decision\":\"allowed\"}",
            "{\"session\":\"a\",\"event\":\"session_end\"}",
        ];
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str(&(lines.join("\n") + "\n"));
        std::fs::write(&log, text).unwrap();
        assert_eq!(count_denials(&log, from, "a"), 3);
        assert_eq!(count_denials(&log, 0, "a"), 4);
        assert_eq!(count_denials(&dir.path().join("none"), 0, "a"), 0);
    }
}
