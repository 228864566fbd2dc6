//! Real Slurm commands, started the way `posix_spawn` starts a program, with the one thing
//! `posix_spawn` cannot do: the command dies with the chaperon (`PR_SET_PDEATHSIG`), so an
//! orphaned `srun` never keeps running or holds the jail's output open.
//!
//! std's `Command` can set the death signal only in a `pre_exec` closure, and that makes it
//! `fork`: the chaperon's page tables copied, copy-on-write faults in both processes, and the
//! copy torn down again by the exec, about 0.5 ms of CPU for every Slurm call
//! (docs/performance.md). Here the child shares the chaperon's memory until its exec
//! (`CLONE_VM | CLONE_VFORK`: only the calling thread waits, as in `posix_spawn`), and between
//! the clone and the exec it makes only system calls: no allocation, no lock.

use agent_sandbox_sys::spawn::CStrings;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

/// What one of the child's standard descriptors is.
pub enum Io {
    /// The chaperon's own (the default for stdout and stderr).
    Inherit,
    /// `/dev/null` (the default for stdin).
    Null,
    /// A pipe whose other end the chaperon gets (`RealChild::stdin` / `stdout` / `stderr`).
    Piped,
    /// This descriptor (a caller's, passed to the chaperon).
    Fd(OwnedFd),
}

impl Io {
    pub fn null() -> Io {
        Io::Null
    }
    pub fn piped() -> Io {
        Io::Piped
    }
}

impl From<OwnedFd> for Io {
    fn from(fd: OwnedFd) -> Io {
        Io::Fd(fd)
    }
}

/// A real command to run: by absolute path, with exactly the environment given (nothing is
/// inherited), and dying with the chaperon unless `outliving`.
pub struct RealCommand {
    program: PathBuf,
    args: Vec<OsString>,
    env: BTreeMap<OsString, OsString>,
    cwd: Option<PathBuf>,
    stdio: [Io; 3],
    dies_with_chaperon: bool,
}

impl RealCommand {
    pub fn new(program: impl AsRef<Path>) -> RealCommand {
        RealCommand {
            program: program.as_ref().to_path_buf(),
            args: vec![],
            env: BTreeMap::new(),
            cwd: None,
            // Not the chaperon's stdin (which may be its listening socket): nothing, unless set.
            stdio: [Io::Null, Io::Inherit, Io::Inherit],
            dies_with_chaperon: true,
        }
    }

    /// The command keeps running if the chaperon ends (salloc: it must relinquish its
    /// allocation, which SIGKILL would not let it do).
    pub fn outliving(&mut self) -> &mut Self {
        self.dies_with_chaperon = false;
        self
    }

    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&mut self, args: I) -> &mut Self {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> &mut Self {
        self.env.insert(k.as_ref().to_owned(), v.as_ref().to_owned());
        self
    }

    pub fn current_dir(&mut self, d: impl AsRef<Path>) -> &mut Self {
        self.cwd = Some(d.as_ref().to_path_buf());
        self
    }

    pub fn stdin(&mut self, io: impl Into<Io>) -> &mut Self {
        self.stdio[0] = io.into();
        self
    }

    pub fn stdout(&mut self, io: impl Into<Io>) -> &mut Self {
        self.stdio[1] = io.into();
        self
    }

    pub fn stderr(&mut self, io: impl Into<Io>) -> &mut Self {
        self.stdio[2] = io.into();
        self
    }

    pub fn get_program(&self) -> &Path {
        &self.program
    }

    pub fn get_args(&self) -> impl Iterator<Item = &OsStr> {
        self.args.iter().map(OsString::as_os_str)
    }

    pub fn get_envs(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    pub fn get_current_dir(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// Runs the command to its end; its descriptors are the chaperon's unless set.
    pub fn status(&mut self) -> io::Result<ExitStatus> {
        self.spawn()?.wait()
    }

    /// Starts the command. The descriptors given with `Io::Fd` are used up; the command can
    /// be spawned again only with the others.
    pub fn spawn(&mut self) -> io::Result<RealChild> {
        let cstr = |s: &OsStr| CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
        let program = cstr(self.program.as_os_str())?;
        let mut argv = vec![program.clone()];
        for a in &self.args {
            argv.push(cstr(a)?);
        }
        let mut envp = Vec::with_capacity(self.env.len());
        for (k, v) in &self.env {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(CString::new(kv).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?);
        }
        let cwd = self.cwd.as_deref().map(|d| cstr(d.as_os_str())).transpose()?;
        let argv = CStrings::new(argv);
        let envp = CStrings::new(envp);

        // The child's ends (kept open until the child has exec'd) and the chaperon's.
        let mut child_ends: [Option<OwnedFd>; 3] = [None, None, None];
        let mut ours: [Option<File>; 3] = [None, None, None];
        for (i, io) in self.stdio.iter_mut().enumerate() {
            match std::mem::replace(io, Io::Inherit) {
                Io::Inherit => {}
                Io::Null => child_ends[i] = Some(File::options().read(true).write(true).open("/dev/null")?.into()),
                Io::Fd(fd) => child_ends[i] = Some(fd),
                Io::Piped => {
                    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
                    let (theirs, mine) = if i == 0 { (r, w) } else { (w, r) };
                    child_ends[i] = Some(theirs);
                    ours[i] = Some(File::from(mine));
                }
            }
        }
        let error = AtomicI32::new(0);
        let args = ChildArgs {
            program: &program,
            argv: &argv,
            envp: &envp,
            cwd: cwd.as_deref(),
            fds: [0, 1, 2].map(|i| child_ends[i].as_ref().map_or(-1, |f| f.as_raw_fd())),
            dies: self.dies_with_chaperon,
            parent: std::process::id() as libc::pid_t,
            error: &error,
        };
        let mut stack = vec![0u8; CHILD_STACK];
        // SAFETY: `child` makes system calls only, on `args`, which lives past the call (the
        // clone returns once the child exec'd or exited).
        let pid = unsafe { agent_sandbox_sys::spawn::clone_vfork(&mut stack, || child(&args)) }?;
        match error.load(Ordering::Acquire) {
            0 => {}
            e => {
                // It exited without exec'ing: reap it and say why.
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
                return Err(io::Error::from_raw_os_error(e));
            }
        }
        let [stdin, stdout, stderr] = ours;
        Ok(RealChild { pid, status: None, stdin, stdout, stderr })
    }
}

/// A real command started by `RealCommand::spawn`. Dropping it neither waits nor kills.
pub struct RealChild {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
    pub stdin: Option<File>,
    pub stdout: Option<File>,
    pub stderr: Option<File>,
}

impl RealChild {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Waits for the command's end (closing its stdin first, like std's `Child::wait`).
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        drop(self.stdin.take());
        if let Some(s) = self.status {
            return Ok(s);
        }
        loop {
            match agent_sandbox_sys::process::wait_status(self.pid, true) {
                Ok(Some(status)) => {
                    let s = ExitStatus::from_raw(status);
                    self.status = Some(s);
                    return Ok(s);
                }
                Err(e) if e.kind() != io::ErrorKind::Interrupted => return Err(e),
                _ => {}
            }
        }
    }

    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        match agent_sandbox_sys::process::wait_status(self.pid, false)? {
            None => Ok(None),
            Some(status) => {
                let s = ExitStatus::from_raw(status);
                self.status = Some(s);
                Ok(Some(s))
            }
        }
    }

    /// SIGKILL, unless it was already reaped (its pid may be another process's by now).
    pub fn kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGKILL)
            .map_err(io::Error::from)
    }
}

/// The child's stack until its exec: it makes system calls only.
const CHILD_STACK: usize = 32 << 10;

/// What the child needs, all of it made before the clone and alive until the exec (the
/// calling thread waits for it: `CLONE_VFORK`).
struct ChildArgs<'a> {
    program: &'a CStr,
    argv: &'a CStrings,
    envp: &'a CStrings,
    cwd: Option<&'a CStr>,
    /// The child's stdin, stdout, stderr; -1: the chaperon's own.
    fds: [RawFd; 3],
    dies: bool,
    parent: libc::pid_t,
    /// Set by the child if it could not exec (an errno).
    error: &'a AtomicI32,
}

/// The child, between the clone and the exec. Only async-signal-safe calls.
fn child(a: &ChildArgs) -> libc::c_int {
    use agent_sandbox_sys::{fd, process, signal, spawn};
    let fail = |e: io::Error| -> ! {
        a.error.store(e.raw_os_error().unwrap_or(libc::EINVAL), Ordering::Release);
        process::exit_now(127)
    };
    // Handlers are the chaperon's: back to default. SIGPIPE, which the Rust runtime ignores,
    // too (as std does for its children); other ignored signals stay ignored.
    signal::reset_handlers(&[libc::SIGPIPE]);
    if a.dies {
        if let Err(e) = process::die_with_parent(libc::SIGKILL) {
            fail(e);
        }
        // The chaperon ended before the death signal was set: it would never come.
        if nix::unistd::getppid().as_raw() != a.parent {
            process::exit_now(127);
        }
    }
    if let Err(e) = fd::place_stdio(a.fds) {
        fail(e);
    }
    if let Some(Err(e)) = a.cwd.map(process::chdir) {
        fail(e);
    }
    signal::unblock_all();
    fail(spawn::exec(a.program, a.argv, a.envp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn sh(script: &str) -> RealCommand {
        let mut c = RealCommand::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn the_command_gets_its_arguments_environment_directory_and_pipes() {
        let mut c =
            sh("read x; printf '%s|%s|%s|%s|%s' \"$x\" \"$0\" \"$FOO\" \"${HOME-unset}\" \"$(pwd)\"; echo oops >&2");
        c.arg("zero").env("FOO", "a b").current_dir("/tmp");
        c.stdin(Io::piped()).stdout(Io::piped()).stderr(Io::piped());
        let mut child = c.spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(out, "hello|zero|a b|unset|/tmp", "nothing of the chaperon's environment");
        assert_eq!(err, "oops\n");
    }

    #[test]
    fn a_given_descriptor_becomes_the_commands_and_the_status_is_its_own() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let status = sh("echo via-fd; exit 3").stdout(w).stdin(Io::null()).status().unwrap();
        assert_eq!(status.code(), Some(3));
        let mut out = String::new();
        File::from(r).read_to_string(&mut out).unwrap();
        assert_eq!(out, "via-fd\n");
    }

    #[test]
    fn a_program_that_cannot_run_is_an_error_not_a_child() {
        let e = RealCommand::new("/nonexistent/sbatch").spawn().err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        let e = RealCommand::new("/bin/true").current_dir("/nonexistent").spawn().err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        assert!(RealCommand::new("/bin/tr\0ue").spawn().is_err());
    }

    #[test]
    fn sigpipe_is_the_default_again_and_signals_are_not_blocked() {
        let mut c = sh("grep -E '^(SigBlk|SigIgn)' /proc/self/status");
        let mut child = c.stdout(Io::piped()).spawn().unwrap();
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        child.wait().unwrap();
        let mask = |name: &str| {
            let line = out.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line.rsplit('\t').next().unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0, "{out}");
        // The test harness ignores SIGPIPE, like any Rust program.
        assert_eq!(mask("SigIgn:") & (1 << (libc::SIGPIPE - 1)), 0, "{out}");
    }

    #[test]
    fn the_command_dies_with_the_chaperon_unless_outliving() {
        // A stand-in chaperon (a forked process) starts two sleeps and ends; the one that
        // dies with it must be gone, the outliving one must still run. (The pipe is
        // close-on-exec: the sleeps must not hold it open.)
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        // SAFETY: test process; the child only spawns, writes two pids and exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let dying = RealCommand::new("/bin/sleep").arg("30").spawn().unwrap();
                let outliving = RealCommand::new("/bin/sleep").arg("30").outliving().spawn().unwrap();
                let mut w = File::from(w);
                let _ = writeln!(w, "{} {}", dying.id(), outliving.id());
                // SAFETY: ends the stand-in at once.
                unsafe { libc::_exit(0) };
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(w);
                let mut pids = String::new();
                File::from(r).read_to_string(&mut pids).unwrap();
                nix::sys::wait::waitpid(child, None).unwrap();
                let pids: Vec<i32> = pids.split_whitespace().map(|p| p.parse().unwrap()).collect();
                let alive = |p: i32| {
                    std::fs::read_to_string(format!("/proc/{p}/stat"))
                        .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
                        .unwrap_or(false)
                };
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while alive(pids[0]) && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                let (dying, outliving) = (alive(pids[0]), alive(pids[1]));
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[1]), nix::sys::signal::Signal::SIGKILL);
                assert!(!dying, "the command outlived the chaperon");
                assert!(outliving, "the outliving command was killed");
            }
        }
    }
}
