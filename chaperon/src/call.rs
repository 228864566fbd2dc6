//! One call as its handler carries it out: the request, the session, the caller's connection
//! and stdio, and what the call leaves for the audit log; and the running of a real Slurm
//! command for it: with the caller's stdio, the signals the stub passes on, killed when the
//! caller goes away and, for a query, when it runs too long. Decides nothing: `commands` does.

use crate::refusal::Refusal;
use crate::session::{Audit, Config};
use crate::spawn::RealCommand;
use crate::wire::{self, Control, Request};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The stub's stdin, stdout, stderr.
pub struct Stdio {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

pub struct Call<'a> {
    pub req: &'a Request,
    pub cfg: &'a Config,
    /// The connection the request came on: while the command runs the stub may send signals
    /// on it, and its end ends the command.
    pub conn: &'a UnixStream,
    /// How long the real command may run: None for one that lasts as long as its tasks (srun).
    pub bound: Option<Duration>,
    /// Filled in as the call is carried out; the decision is added by the dispatcher.
    pub audit: Audit,
}

impl Call<'_> {
    /// Runs a real Slurm command with the caller's stdio; signals the stub sends meanwhile go to
    /// it, and if the stub goes away (its jail ended, it was killed) the command is terminated,
    /// as it is when it outlives the call's bound.
    pub fn run(&self, mut cmd: RealCommand, stdio: Stdio) -> Result<i32, Refusal> {
        cmd.stdin(stdio.stdin).stdout(stdio.stdout).stderr(stdio.stderr);
        let mut child = cmd.spawn().map_err(|e| Refusal::Failed(format!("cannot run Slurm: {e}")))?;
        // This thread has nothing else to do meanwhile: it watches the command itself, until
        // the pidfd says it ended (without pidfds, a thread watches while this one waits).
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let watched = match (pidfd_open(child.id()), self.conn.try_clone()) {
            (Ok(Some(pidfd)), Ok(conn)) => {
                let target = Target { pid, pidfd: Some(pidfd), done: Arc::new(AtomicBool::new(false)) };
                watch_until_exit(target, Some(conn), self.bound.map(|b| Instant::now() + b));
                Ok(None)
            }
            (Ok(None), _) => self.watch(child.id(), self.bound).map(Some),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let watch = match watched {
            Ok(w) => w,
            Err(e) => return Err(unwatched(child, e)),
        };
        let status = child.wait().map_err(|e| Refusal::Failed(format!("waiting for Slurm: {e}")))?;
        drop(watch);
        use std::os::unix::process::ExitStatusExt;
        Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
    }

    /// Runs the real command of the call's own name with `args`.
    pub fn run_with(&self, args: Vec<String>, stdio: Stdio) -> Result<i32, Refusal> {
        let mut cmd = self.cfg.command(&self.req.command);
        cmd.args(args);
        self.run(cmd, stdio)
    }

    /// While a real command runs for this call: the signals the stub sends go to it, it is
    /// killed if the stub goes away (its jail ended, it was killed), and, with a `bound`, if it
    /// runs longer than that. One thread does all three, in one `poll` of the connection and
    /// a pidfd of the command, and ends with the command. Dropping the watch (after the command
    /// was reaped) ends its signals. An error (no descriptor, no thread): the command must not
    /// run unwatched (`unwatched`).
    pub fn watch(&self, child: u32, bound: Option<Duration>) -> std::io::Result<Watch> {
        watch_command(self.conn, child, bound)
    }
}

/// A command that could not be watched is not left running: killed, reaped, and the call
/// refused.
pub fn unwatched(mut child: crate::spawn::RealChild, why: std::io::Error) -> Refusal {
    let _ = child.kill();
    let _ = child.wait();
    Refusal::Failed(format!("cannot watch the Slurm command: {why}"))
}

/// `Call::watch` for the command `child` and the stub's connection `conn`.
fn watch_command(conn: &UnixStream, child: u32, bound: Option<Duration>) -> std::io::Result<Watch> {
    let done = Arc::new(AtomicBool::new(false));
    let target =
        Target { pid: nix::unistd::Pid::from_raw(child as i32), pidfd: pidfd_open(child)?, done: done.clone() };
    let conn = conn.try_clone()?;
    let deadline = bound.map(|b| Instant::now() + b);
    // A kept thread of the task pool: starting one for each sbatch cost it a thread's start.
    crate::pool::spawn(Box::new(move || watch_until_exit(target, Some(conn), deadline)))
        .map_err(|_| std::io::Error::other("no thread to watch the command"))?;
    Ok(Watch { done })
}

/// How long a control frame the stub began may take to arrive whole.
const FRAME_TIMEOUT: Duration = Duration::from_secs(1);

/// A running real command, as its watch reaches it.
struct Target {
    pid: nix::unistd::Pid,
    /// Readable once the command has ended; signals sent through it reach that process only,
    /// never one that reused its pid.
    pidfd: Option<OwnedFd>,
    /// Set once the call reaped the command (its pid may then be anyone's).
    done: Arc<AtomicBool>,
}

impl Target {
    fn signal(&self, sig: nix::sys::signal::Signal) {
        match &self.pidfd {
            Some(fd) => {
                let _ = agent_sandbox_sys::pidfd::send_signal(fd, sig as libc::c_int);
            }
            None if !self.done.load(Ordering::Acquire) => {
                let _ = nix::sys::signal::kill(self.pid, sig);
            }
            None => {}
        }
    }

    fn ended(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// A pidfd of our unreaped child `pid`; None where the kernel has no pidfds (before 5.3).
/// The pid is our unreaped child's, so it cannot name another process yet.
fn pidfd_open(pid: u32) -> std::io::Result<Option<OwnedFd>> {
    match agent_sandbox_sys::pidfd::open(pid as libc::pid_t) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(None),
        Err(e) => Err(e),
    }
}

fn watch_until_exit(target: Target, mut conn: Option<UnixStream>, mut deadline: Option<Instant>) {
    use nix::sys::signal::Signal;
    // The stub's bytes so far, read as they come (the socket is non-blocking): a frame is
    // taken whole, small, and within FRAME_TIMEOUT of its first byte, or the stub counts as
    // gone. A stub trickling a frame must not keep the watch from the command's end or bound.
    let mut pending: Vec<u8> = Vec::new();
    let mut frame_by: Option<Instant> = None;
    loop {
        if target.ended() {
            return;
        }
        let timeout = poll_timeout(&target, deadline, frame_by);
        let (exited, from_stub) = match wait_ready(&target, conn.as_ref(), timeout) {
            Ok(ready) => ready,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        };
        if exited {
            return;
        }
        if from_stub {
            let mut gone = conn.as_mut().is_some_and(|c| read_stub(c, &mut pending));
            gone |= !pass_signals(&target, &mut pending);
            frame_by = match pending.is_empty() {
                true => None,
                false => frame_by.or(Some(Instant::now() + FRAME_TIMEOUT)),
            };
            if gone {
                // The caller is gone: nothing may keep running on its behalf (some Slurm
                // commands block SIGTERM while they wait).
                target.signal(Signal::SIGKILL);
                conn = None;
                frame_by = None;
            }
        }
        let now = Instant::now();
        if frame_by.is_some_and(|d| now >= d) {
            // A frame begun and not finished in time: taken as the stub gone.
            target.signal(Signal::SIGKILL);
            conn = None;
            frame_by = None;
        }
        if deadline.is_some_and(|d| now >= d) {
            target.signal(Signal::SIGKILL);
            deadline = None;
        }
        if conn.is_none() && deadline.is_none() && target.pidfd.is_none() {
            // Nothing left to watch for: the command was killed or the caller is gone.
            return;
        }
    }
}

/// Until the nearer of the deadline and the pending frame's bound; without a pidfd (before
/// Linux 5.3) the command's end is learnt from `done`, a few times a second.
fn poll_timeout(target: &Target, deadline: Option<Instant>, frame_by: Option<Instant>) -> nix::poll::PollTimeout {
    use nix::poll::PollTimeout;
    let recheck = Duration::from_millis(200);
    let now = Instant::now();
    let mut wait = [deadline, frame_by].into_iter().flatten().min().map(|d| d.saturating_duration_since(now));
    if target.pidfd.is_none() {
        wait = Some(wait.map_or(recheck, |w| w.min(recheck)));
    }
    wait.map_or(PollTimeout::NONE, |w| {
        PollTimeout::try_from(w.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
    })
}

/// Waits for the command's end or the stub's bytes: (the command exited, the stub sent).
fn wait_ready(
    target: &Target,
    conn: Option<&UnixStream>,
    timeout: nix::poll::PollTimeout,
) -> nix::Result<(bool, bool)> {
    use nix::poll::{poll, PollFd, PollFlags};
    let mut fds = vec![];
    if let Some(p) = &target.pidfd {
        fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
    }
    if let Some(c) = conn {
        fds.push(PollFd::new(c.as_fd(), PollFlags::POLLIN));
    }
    poll(&mut fds, timeout)?;
    let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
    let exited = target.pidfd.is_some() && ready(&fds[0]);
    let from_stub = conn.is_some() && ready(&fds[fds.len() - 1]);
    Ok((exited, from_stub))
}

/// What the stub sent, added to `pending`; true when it is gone (closed, or the read failed).
fn read_stub(c: &mut UnixStream, pending: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; MAX_CONTROL as usize];
    // Without waiting, and without making the shared socket non-blocking: the call
    // writes its answer on it afterwards.
    match nix::sys::socket::recv(c.as_raw_fd(), &mut chunk, nix::sys::socket::MsgFlags::MSG_DONTWAIT) {
        Ok(0) => true,
        Ok(n) => {
            pending.extend_from_slice(&chunk[..n]);
            false
        }
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => false,
        Err(_) => true,
    }
}

/// Every whole frame of `pending` taken, its signal passed on when the stub may pass it;
/// false on a frame that is not one (the stream cannot be followed any more).
fn pass_signals(target: &Target, pending: &mut Vec<u8>) -> bool {
    loop {
        match wire::take_frame::<Control>(pending, MAX_CONTROL) {
            Ok(Some(Control::Signal { signal })) => {
                if let Some(sig) = nix::sys::signal::Signal::try_from(signal).ok().filter(|s| passable(*s)) {
                    target.signal(sig);
                }
            }
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

/// The longest control frame a stub sends (a signal number in JSON is some 40 bytes).
const MAX_CONTROL: u32 = 256;

/// Signals the stub may pass on: what a terminal or a job manager sends; never SIGKILL/SIGSTOP.
fn passable(s: nix::sys::signal::Signal) -> bool {
    use nix::sys::signal::Signal::*;
    matches!(s, SIGINT | SIGTERM | SIGHUP | SIGQUIT | SIGUSR1 | SIGUSR2 | SIGCONT)
}

/// A real command being watched for its call (`Call::watch`).
pub struct Watch {
    done: Arc<AtomicBool>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::RealCommand;
    use std::os::unix::process::ExitStatusExt;

    /// A frame's header (magic, version) announcing a body of `len` bytes.
    fn head_of(len: u32) -> Vec<u8> {
        let mut head = wire::encode(&Control::Signal { signal: 2 }).unwrap()[..4].to_vec();
        head.extend_from_slice(&len.to_le_bytes());
        head
    }

    fn sleeper() -> crate::spawn::RealChild {
        RealCommand::new("/bin/sleep").arg("30").spawn().unwrap()
    }

    #[test]
    fn a_signal_from_the_stub_reaches_the_command() {
        let (ours, stub) = UnixStream::pair().unwrap();
        let mut child = sleeper();
        let watch = watch_command(&ours, child.id(), None).unwrap();
        wire::write_frame(&mut &stub, &Control::Signal { signal: libc::SIGTERM }).unwrap();
        let status = child.wait().unwrap();
        drop(watch);
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn the_command_is_killed_when_the_stub_goes_away() {
        let (ours, stub) = UnixStream::pair().unwrap();
        let mut child = sleeper();
        let _watch = watch_command(&ours, child.id(), None).unwrap();
        drop(stub);
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn the_command_is_killed_at_its_bound_and_sigkill_is_not_passed_on() {
        let (ours, stub) = UnixStream::pair().unwrap();
        let mut child = sleeper();
        let t = Instant::now();
        let _watch = watch_command(&ours, child.id(), Some(Duration::from_millis(300))).unwrap();
        wire::write_frame(&mut &stub, &Control::Signal { signal: libc::SIGSTOP }).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(stub);
    }

    #[test]
    fn a_stub_trickling_a_frame_does_not_hold_off_the_bound_or_the_watch() {
        let (ours, stub) = UnixStream::pair().unwrap();
        let mut child = sleeper();
        let t = Instant::now();
        let _watch = watch_command(&ours, child.id(), Some(Duration::from_millis(300))).unwrap();
        // A header announcing 200 bytes, then a byte every 0.2 s: each read succeeds.
        std::io::Write::write_all(&mut &stub, &head_of(200)).unwrap();
        let trickle = std::thread::spawn(move || {
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(200));
                if std::io::Write::write_all(&mut &stub, b" ").is_err() {
                    return;
                }
            }
        });
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let _ = trickle.join();
    }

    #[test]
    fn a_control_frame_larger_than_a_signal_is_taken_as_the_stub_gone() {
        let (ours, stub) = UnixStream::pair().unwrap();
        let mut child = sleeper();
        let _watch = watch_command(&ours, child.id(), None).unwrap();
        std::io::Write::write_all(&mut &stub, &head_of(1 << 20)).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        drop(stub);
    }

    #[test]
    fn a_stub_that_stops_mid_frame_is_taken_as_gone() {
        let (ours, stub) = UnixStream::pair().unwrap();
        let mut child = sleeper();
        let t = Instant::now();
        let _watch = watch_command(&ours, child.id(), Some(Duration::from_millis(1500))).unwrap();
        std::io::Write::write_all(&mut &stub, b"A").unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(stub);
    }
}
