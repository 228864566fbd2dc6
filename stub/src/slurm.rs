//! The Slurm stubs: inside the jail, `sbatch`, `squeue`, `scancel`, ... are this binary. The
//! stub hands its stdin/stdout/stderr and its request to the session's chaperon (outside the
//! jail) over `/run/agent-sandbox/chaperon.sock` (userns backend) or over a socket pair of its
//! own whose other end it sends down the channel the command inherited (Landlock backend),
//! and exits with the status the chaperon reports; a refusal is one line on stderr, worded as
//! Slurm words its errors.

use chaperon::wire::{self, Request, Response};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// Every Slurm command name the jail sees as a stub: the chaperon's command table, handled
/// and refused alike.
pub const SLURM_STUBS: &[&str] = &chaperon::commands::NAMES;

/// Where the chaperon's socket is inside the jail.
/// The descriptor the Landlock backend's command inherits the chaperon's channel at: high,
/// so that a script's `exec 3>file` or a shell's own descriptors do not take it.
pub const SLURM_FD: i32 = 1000;
/// Where a stub finds that descriptor's number.
pub const SLURM_FD_VAR: &str = "AGENT_SANDBOX_SLURM_FD";
/// Where a stub finds the pid of the process that keeps the channel for it.
pub const SLURM_KEEPER_VAR: &str = "AGENT_SANDBOX_SLURM_KEEPER";

pub const SOCKET: &str = "/run/agent-sandbox/chaperon.sock";

/// While the command runs, Ctrl-C and friends reach the stub (it is the terminal's
/// foreground process): they are taken from a signalfd while the stub waits for the answer and
/// passed each to the chaperon, which signals the real command. srun then behaves as on a login
/// node (two Ctrl-C within a second cancel the step). The wait is one poll of both (no thread:
/// a thread's start cost the call a third of a millisecond on a 2-core node).
fn answer_forwarding_signals(conn: &mut UnixStream) -> Result<Response, wire::WireError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use std::os::fd::AsFd;
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT, Signal::SIGUSR1, Signal::SIGUSR2] {
        set.add(s);
    }
    let Some(fd) = set.thread_block().ok().and_then(|()| SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC).ok()) else {
        return wire::read_frame(conn);
    };
    loop {
        let (signalled, answered) = {
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN), PollFd::new(conn.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return wire::read_frame(conn),
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), ready(&fds[1]))
        };
        if answered {
            return wire::read_frame(conn);
        }
        if signalled {
            if let Ok(Some(info)) = fd.read_signal() {
                let signal = info.ssi_signo as i32;
                let _ = wire::write_frame(conn, &wire::Control::Signal { signal });
            }
        }
    }
}

pub fn run(name: &str, args: &[std::ffi::OsString]) -> i32 {
    if let Some(why) = chaperon::commands::refusal(name) {
        eprintln!("{name}: error: {why} (refused by agent-sandbox)");
        return 1;
    }
    match text_args(args).and_then(|argv| request(name, argv)) {
        Ok((Response::Allocated { job, env, command }, conn)) if name == "salloc" => {
            run_in_allocation(name, job, &env, &command, conn)
        }
        Ok((Response::Allocated { .. }, _)) => {
            eprintln!("{name}: error: agent-sandbox chaperon: an allocation answered a call that is not salloc");
            1
        }
        Ok((Response::Exited { code }, _)) => code,
        Ok((Response::Denied { reason }, _)) => {
            eprintln!("{name}: error: {reason}");
            1
        }
        Ok((Response::Error { message }, _)) => {
            eprintln!("{name}: error: agent-sandbox chaperon: {message}");
            1
        }
        Err(e) => {
            eprintln!("{name}: error: {e}");
            1
        }
    }
}

/// sbatch's script file, read here inside the jail as real sbatch reads it (open(2) of the
/// argument): the jail's own view of the files, its private /tmp included. None when there
/// is no file argument or it is no regular file (`/dev/stdin`: the chaperon reads the
/// passed stdin), or the arguments do not parse (the chaperon says why).
fn script_file(name: &str, argv: &[String]) -> Result<Option<String>, String> {
    use std::io::Read;
    if name != "sbatch" {
        return Ok(None);
    }
    let Some(path) = chaperon::commands::sbatch::parse_sbatch(argv, None, &[]).ok().and_then(|r| r.script_path) else {
        return Ok(None);
    };
    let unable = |e: std::io::Error| format!("Unable to open file {path}: {e}");
    let file = std::fs::File::open(&path).map_err(unable)?;
    if !file.metadata().map_err(unable)?.is_file() {
        return Ok(None);
    }
    let max = chaperon::job::MAX_SCRIPT;
    let mut buf = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut buf).map_err(unable)?;
    if buf.len() > max {
        return Err(format!("the batch script {path} is larger than {} MiB", max >> 20));
    }
    String::from_utf8(buf).map(Some).map_err(|_| format!("the batch script {path} is not valid UTF-8"))
}

/// salloc's command (the shell by default) in the jail, with the allocation's variables; the
/// connection stays open until it ends, which relinquishes the allocation.
fn run_in_allocation(
    name: &str,
    job: u32,
    env: &BTreeMap<String, String>,
    command: &[String],
    conn: UnixStream,
) -> i32 {
    let shell = std::env::var("SHELL").ok().filter(|s| s.starts_with('/')).unwrap_or_else(|| "/bin/sh".into());
    let (program, args) = match command.split_first() {
        Some((p, a)) => (p.clone(), a.to_vec()),
        None => (shell, vec![]),
    };
    // Only Slurm's variables, and the directory salloc was called from (the chaperon ran
    // salloc from /).
    let mut vars: Vec<(&String, String)> =
        env.iter().filter(|(k, _)| k.starts_with("SLURM_")).map(|(k, v)| (k, v.clone())).collect();
    let submit = "SLURM_SUBMIT_DIR".to_string();
    if let Ok(cwd) = std::env::current_dir() {
        vars.retain(|(k, _)| **k != submit);
        vars.push((&submit, cwd.display().to_string()));
    }
    let status = std::process::Command::new(&program).args(&args).envs(vars).spawn().and_then(|mut child| {
        // As salloc: Ctrl-C is the command's, it does not end the allocation under it.
        let mut set = nix::sys::signal::SigSet::empty();
        set.add(nix::sys::signal::Signal::SIGINT);
        set.add(nix::sys::signal::Signal::SIGQUIT);
        let _ = set.thread_block();
        child.wait()
    });
    // The command is done: the chaperon hears it (our end of the connection closes for
    // writing) and relinquishes the allocation; we wait for that, as salloc does, so its
    // messages come before our exit and the allocation is gone when we return.
    let mut conn = conn;
    let _ = conn.shutdown(std::net::Shutdown::Write);
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    let _ = wire::read_frame::<Response>(&mut conn);
    drop(conn);
    match status {
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
        }
        Err(e) => {
            eprintln!("{name}: error: {program}: {e} (allocation {job} relinquished)");
            1
        }
    }
}

/// The arguments as text, as the chaperon's grammars read them (Slurm's own are text); an
/// argument that is not UTF-8 is refused here, by its position.
fn text_args(args: &[std::ffi::OsString]) -> Result<Vec<String>, String> {
    args.iter()
        .enumerate()
        .map(|(i, a)| a.to_str().map(str::to_string).ok_or_else(|| format!("argument {} is not valid UTF-8", i + 1)))
        .collect()
}

fn request(name: &str, argv: Vec<String>) -> Result<(Response, UnixStream), String> {
    let script = script_file(name, &argv)?;
    let mut conn = connect()?;
    let fds = [0, 1, 2];
    let iov = [std::io::IoSlice::new(b"F")];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    if let Err(e) =
        nix::sys::socket::sendmsg::<()>(conn.as_raw_fd(), &iov, &cmsg, nix::sys::socket::MsgFlags::empty(), None)
    {
        return Err(turned_away(&mut conn, std::io::Error::from(e), "cannot pass the terminal to the chaperon"));
    }
    let req = Request {
        command: name.to_string(),
        script,
        argv,
        cwd: std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default(),
        env: std::env::vars().collect::<BTreeMap<_, _>>(),
    };
    if let Err(e) = wire::write_frame(&mut conn, &req) {
        return Err(match e {
            wire::WireError::Io(e) => turned_away(&mut conn, e, "cannot send the request to the chaperon"),
            other => format!("cannot send the request to the chaperon: {other}"),
        });
    }
    // An allocation's command gets the terminal's signals itself; Ctrl-C while salloc waits
    // for it ends the stub, and so the request.
    let answer = match name {
        "salloc" => wire::read_frame(&mut conn),
        _ => answer_forwarding_signals(&mut conn),
    };
    let answer = answer.map_err(|e| match e {
        wire::WireError::Io(_) => "lost contact with agent-sandbox's Slurm chaperon before it answered; \
                                   whether the command took effect is unknown (check with squeue)"
            .to_string(),
        other => format!("bad answer from the chaperon: {other}"),
    })?;
    Ok((answer, conn))
}

/// What to say when the chaperon's end closed before the request was sent: a chaperon serving
/// as many calls as it may answers at once with its reason and closes, and that reason, not the
/// broken pipe, is what the caller should read.
fn turned_away(conn: &mut UnixStream, e: std::io::Error, doing: &str) -> String {
    if matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) {
        let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(1)));
        if let Ok(Response::Error { message }) = wire::read_frame(conn) {
            return format!("agent-sandbox chaperon: {message}");
        }
    }
    format!("{doing}: {e}")
}

/// The connection to the session's chaperon. Under Landlock, `AGENT_SANDBOX_SLURM_FD` names the
/// descriptor of the channel this process inherited: a descriptor number, never a path, so a
/// changed value can only point the stub at a socket its caller already holds (and the stub
/// sends only on a unix seqpacket socket). The stub makes a stream socket pair for this call
/// and sends one end down the channel; the chaperon serves it as a connection.
fn connect() -> Result<UnixStream, String> {
    use nix::sys::socket::{sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};
    let Some(var) = std::env::var_os(SLURM_FD_VAR) else {
        return UnixStream::connect(SOCKET).map_err(|e| {
            format!(
                "cannot reach agent-sandbox's Slurm chaperon at {SOCKET} ({e}); Slurm is not available in this session"
            )
        });
    };
    let fd = var
        .to_str()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| format!("{} is {var:?}, not agent-sandbox's Slurm channel descriptor", SLURM_FD_VAR))?;
    let taken = if is_channel(fd) { None } else { Some(from_keeper(fd)?) };
    let fd = taken.as_ref().map_or(fd, |t| t.as_raw_fd());
    let (mine, theirs) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)
        .map_err(|e| format!("cannot make a socket pair for the chaperon: {e}"))?;
    let passed = [theirs.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&passed)];
    sendmsg::<()>(fd, &[std::io::IoSlice::new(b"C")], &cmsg, MsgFlags::MSG_NOSIGNAL, None).map_err(|e| {
        format!("cannot reach agent-sandbox's Slurm chaperon over descriptor {fd} ({e}); the session has ended")
    })?;
    Ok(UnixStream::from(mine))
}

/// Whether `fd` is open here as a unix seqpacket socket (what the channel is).
fn is_channel(fd: i32) -> bool {
    sock_opt(fd, libc::SO_TYPE) == Some(libc::SOCK_SEQPACKET) && sock_opt(fd, libc::SO_DOMAIN) == Some(libc::AF_UNIX)
}

/// A parent closed the inherited channel (Python's subprocess does, daemons do): a copy of
/// the keeper's, with `pidfd_getfd` (it works only on a process this one may trace).
fn from_keeper(fd: i32) -> Result<std::os::fd::OwnedFd, String> {
    let closed = |why: String| {
        format!(
            "agent-sandbox's Slurm channel (descriptor {fd}) is not open in this process (a parent closed it) \
             and the session's keeper cannot lend it ({why}); keep the descriptor open, e.g. Python's pass_fds=[{fd}]"
        )
    };
    let pid = std::env::var(SLURM_KEEPER_VAR)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|p| *p > 1)
        .ok_or_else(|| closed(format!("{} is not set", SLURM_KEEPER_VAR)))?;
    let copy = agent_sandbox_sys::pidfd::open(pid)
        .and_then(|pidfd| agent_sandbox_sys::pidfd::getfd(&pidfd, fd))
        .map_err(|e| closed(format!("pid {pid}: {e}")))?;
    if !is_channel(copy.as_raw_fd()) {
        return Err(closed(format!("descriptor {fd} of pid {pid} is no unix seqpacket socket")));
    }
    Ok(copy)
}

/// An integer socket option of a raw descriptor number; None if it is no open socket.
fn sock_opt(fd: i32, name: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`, an int it owns; a number that
    // is no open socket only makes it fail.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, name, (&mut v as *mut libc::c_int).cast(), &mut len) };
    (r == 0).then_some(v)
}
