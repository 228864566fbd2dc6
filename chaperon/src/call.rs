//! One call as its handler carries it out: the request, the session, the caller's connection
//! and stdio, and what the call leaves for the audit log; and the running of a real Slurm
//! command for it: with the caller's stdio, the signals the stub passes on, killed when the
//! caller goes away and, for a query, when it runs too long. Decides nothing: `commands` does.

use crate::refusal::Refusal;
use crate::session::{Audit, Config};
use crate::wire::{self, Control, Request};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    pub fn run(&self, mut cmd: Command, stdio: Stdio) -> Result<i32, Refusal> {
        cmd.stdin(stdio.stdin).stdout(stdio.stdout).stderr(stdio.stderr);
        let mut child = cmd.spawn().map_err(|e| Refusal::Failed(format!("cannot run Slurm: {e}")))?;
        let watch = self.watch(&child, self.bound);
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
    /// runs longer than that. Dropping the watch (after the command was reaped) ends both.
    pub fn watch(&self, child: &Child, bound: Option<Duration>) -> Watch {
        use nix::sys::signal::{kill, Signal};
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let done = Arc::new(AtomicBool::new(false));
        if let Ok(mut conn) = self.conn.try_clone() {
            let done = done.clone();
            std::thread::spawn(move || loop {
                match wire::read_frame::<Control>(&mut conn) {
                    Ok(Control::Signal { signal }) => {
                        let sig = Signal::try_from(signal).ok().filter(|s| passable(*s));
                        if let (Some(sig), false) = (sig, done.load(Ordering::Acquire)) {
                            let _ = kill(pid, sig);
                        }
                    }
                    Err(wire::WireError::Io(_)) => {
                        // The caller is gone: nothing may keep running on its behalf (some
                        // Slurm commands block SIGTERM while they wait).
                        if !done.load(Ordering::Acquire) {
                            let _ = kill(pid, Signal::SIGKILL);
                        }
                        return;
                    }
                    Err(_) => {}
                }
            });
        }
        let (finish, finished) = std::sync::mpsc::channel::<()>();
        if let Some(limit) = bound {
            let done = done.clone();
            std::thread::spawn(move || {
                if finished.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    && !done.load(Ordering::Acquire)
                {
                    let _ = kill(pid, Signal::SIGKILL);
                }
            });
        }
        Watch { done, _finish: finish }
    }
}

/// Signals the stub may pass on: what a terminal or a job manager sends; never SIGKILL/SIGSTOP.
fn passable(s: nix::sys::signal::Signal) -> bool {
    use nix::sys::signal::Signal::*;
    matches!(s, SIGINT | SIGTERM | SIGHUP | SIGQUIT | SIGUSR1 | SIGUSR2 | SIGCONT)
}

/// A real command being watched for its call (`Call::watch`).
pub struct Watch {
    done: Arc<AtomicBool>,
    _finish: std::sync::mpsc::Sender<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
    }
}
