//! Reads and writes on descriptors the jail holds the other end of, and real Slurm calls
//! whose output the chaperon captures, each with a size and a time bound: a session must
//! not be able to hold one of its chaperon's threads forever (a script "read" from a
//! terminal that never sends EOF, a caller that never reads the answer, a hung command).

use crate::spawn::{Io, RealCommand};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// How long a read-only Slurm call (a query, a view) may run before it is killed. Slurm's
/// own client timeouts are far below this; it only catches a call that never ends.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(120);

/// Largest output of a real command the chaperon reads to filter (`squeue --json`...).
pub const MAX_CAPTURE: usize = 256 << 20;

/// How long the chaperon waits for a batch script on the caller's stdin. Overridable on the
/// host side (never from the jail) with `AGENT_SANDBOX_SLURM_STDIN_TIMEOUT` in seconds.
pub fn stdin_timeout() -> Duration {
    std::env::var("AGENT_SANDBOX_SLURM_STDIN_TIMEOUT")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(60))
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BoundError {
    #[error("no end of input after {0} s (a script on stdin must end, e.g. `sbatch < job.sh`)")]
    Timeout(u64),
    #[error("larger than {0} bytes")]
    TooLarge(usize),
    #[error("{0}")]
    Io(String),
}

fn remaining(deadline: Instant) -> PollTimeout {
    let left = deadline.saturating_duration_since(Instant::now());
    PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::ZERO)
}

/// Waits until `fd` is ready for `flags` or the deadline passes (false).
fn ready(fd: BorrowedFd<'_>, flags: PollFlags, deadline: Instant) -> Result<bool, BoundError> {
    loop {
        let mut fds = [PollFd::new(fd, flags)];
        match poll(&mut fds, remaining(deadline)) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(BoundError::Io(e.to_string())),
        }
    }
}

/// Reads `fd` to its end: at most `max` bytes, within `timeout`. The descriptor's flags are
/// not touched (it is shared with the jail's process).
pub fn read_to_end(fd: BorrowedFd<'_>, max: usize, timeout: Duration) -> Result<Vec<u8>, BoundError> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if !ready(fd, PollFlags::POLLIN, deadline)? {
            return Err(BoundError::Timeout(timeout.as_secs()));
        }
        match nix::unistd::read(fd, &mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => {
                if out.len() + n > max {
                    return Err(BoundError::TooLarge(max));
                }
                out.extend_from_slice(&buf[..n]);
            }
            Err(nix::Error::EINTR) | Err(nix::Error::EAGAIN) => {}
            Err(e) => return Err(BoundError::Io(e.to_string())),
        }
    }
}

/// Writes all of `data` to `fd` within `timeout`; a caller that stops reading loses the rest.
pub fn write_all(fd: BorrowedFd<'_>, data: &[u8], timeout: Duration) -> Result<(), BoundError> {
    let deadline = Instant::now() + timeout;
    let mut at = 0;
    while at < data.len() {
        if !ready(fd, PollFlags::POLLOUT, deadline)? {
            return Err(BoundError::Timeout(timeout.as_secs()));
        }
        // POLLOUT promises room for PIPE_BUF bytes, not more: a larger write to a blocking
        // descriptor would wait for the reader after all.
        let chunk = &data[at..data.len().min(at + libc::PIPE_BUF)];
        match nix::unistd::write(fd, chunk) {
            Ok(n) => at += n,
            Err(nix::Error::EINTR) | Err(nix::Error::EAGAIN) => {}
            Err(e) => return Err(BoundError::Io(e.to_string())),
        }
    }
    Ok(())
}

/// Runs `cmd` with stdout captured (at most `max` bytes) and kills it if it runs longer than
/// `timeout`. Stdin and stderr are whatever the caller set on `cmd`.
pub fn capture(mut cmd: RealCommand, max: usize, timeout: Duration) -> Result<(Vec<u8>, ExitStatus), String> {
    let name = cmd.get_program().to_string_lossy().rsplit('/').next().unwrap_or("command").to_string();
    cmd.stdout(Io::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {name}: {e}"))?;
    // The pipe is dropped (closed) at the end of this statement, before the wait below.
    let read = match child.stdout.take() {
        Some(out) => read_to_end(out.as_fd(), max, timeout),
        None => Err(BoundError::Io("no stdout".into())),
    };
    let out = match read {
        Ok(v) => v,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(match e {
                BoundError::Timeout(s) => format!("{name} did not finish within {s} s"),
                other => format!("{name}'s output: {other}"),
            });
        }
    };
    // Output closed: the command is ending; still bounded, in case it closed stdout early.
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok((out, status)),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{name} did not finish within {} s", timeout.as_secs()));
            }
            Err(e) => return Err(format!("waiting for {name}: {e}")),
        }
    }
}

/// Reads a regular file the chaperon opened itself: at most `max` bytes.
pub fn read_file(f: std::fs::File, max: usize) -> Result<Vec<u8>, BoundError> {
    let mut buf = Vec::new();
    f.take(max as u64 + 1).read_to_end(&mut buf).map_err(|e| BoundError::Io(e.to_string()))?;
    if buf.len() > max {
        return Err(BoundError::TooLarge(max));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_pipe_that_never_ends_times_out() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let t = Instant::now();
        let e = read_to_end(r.as_fd(), 1 << 20, Duration::from_millis(200)).unwrap_err();
        assert_eq!(e, BoundError::Timeout(0));
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_pipe_is_read_to_its_end_and_capped() {
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&w, b"#!/bin/sh\necho hi\n").unwrap();
        drop(w);
        assert_eq!(read_to_end(r.as_fd(), 100, Duration::from_secs(5)).unwrap(), b"#!/bin/sh\necho hi\n");
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&w, &[b'x'; 200]).unwrap();
        drop(w);
        assert_eq!(read_to_end(r.as_fd(), 100, Duration::from_secs(5)), Err(BoundError::TooLarge(100)));
    }

    #[test]
    fn a_reader_that_never_reads_does_not_hold_the_writer() {
        let (_r, w) = nix::unistd::pipe().unwrap();
        let t = Instant::now();
        let e = write_all(w.as_fd(), &vec![0u8; 4 << 20], Duration::from_millis(200)).unwrap_err();
        assert_eq!(e, BoundError::Timeout(0));
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_command_that_hangs_is_killed() {
        let mut cmd = RealCommand::new("/bin/sh");
        cmd.args(["-c", "echo partial; exec sleep 30"]);
        let t = Instant::now();
        let e = capture(cmd, 1 << 20, Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("did not finish"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
        let mut cmd = RealCommand::new("/bin/sh");
        cmd.args(["-c", "echo ok; exit 3"]);
        let (out, status) = capture(cmd, 1 << 20, Duration::from_secs(10)).unwrap();
        assert_eq!((out.as_slice(), status.code()), (&b"ok\n"[..], Some(3)));
    }
}
