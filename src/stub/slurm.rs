//! The Slurm stubs: inside the jail, `sbatch`, `squeue`, `scancel`, ... are this binary. The
//! stub hands its stdin/stdout/stderr and its request to the session's chaperon (outside the
//! jail) over `/run/agent-sandbox/chaperon.sock` and exits with the status the chaperon
//! reports; a refusal is one line on stderr, worded as Slurm words its errors.

use chaperon::wire::{self, Request, Response};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// Every Slurm command name the jail sees as a stub (the last six are refused outright).
pub const SLURM_STUBS: &[&str] = &[
    "sbatch", "srun", "squeue", "scancel", "scontrol", "sacct", "sacctmgr", "sinfo", "sstat", "sprio", "sshare",
    "sdiag", "sreport", "salloc", "sattach", "sbcast", "scrontab", "scrun", "strigger",
];

/// Where the chaperon's socket is inside the jail.
pub const SOCKET: &str = "/run/agent-sandbox/chaperon.sock";

/// While the command runs, Ctrl-C and friends reach the stub (it is the terminal's
/// foreground process): a thread takes them from a signalfd and passes each to the chaperon,
/// which signals the real command. srun then behaves as on a login node (two Ctrl-C within a
/// second cancel the step).
fn forward_signals(conn: &UnixStream) {
    use nix::sys::signal::{SigSet, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT, Signal::SIGUSR1, Signal::SIGUSR2] {
        set.add(s);
    }
    if set.thread_block().is_err() {
        return;
    }
    let (Ok(fd), Ok(mut conn)) = (SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC), conn.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        while let Ok(Some(info)) = fd.read_signal() {
            let signal = info.ssi_signo as i32;
            if wire::write_frame(&mut conn, &wire::Control::Signal { signal }).is_err() {
                return;
            }
        }
    });
}

pub fn run(name: &str) -> i32 {
    if let Some((_, why)) = chaperon::dispatch::REFUSED.iter().find(|(n, _)| *n == name) {
        eprintln!("{name}: error: {why} (refused by agent-sandbox)");
        return 1;
    }
    match request(name) {
        Ok(Response::Exited { code }) => code,
        Ok(Response::Denied { reason }) => {
            eprintln!("{name}: error: {reason}");
            1
        }
        Ok(Response::Error { message }) => {
            eprintln!("{name}: error: agent-sandbox chaperon: {message}");
            1
        }
        Err(e) => {
            eprintln!("{name}: error: {e}");
            1
        }
    }
}

fn request(name: &str) -> Result<Response, String> {
    let mut conn = UnixStream::connect(SOCKET).map_err(|e| {
        format!("cannot reach agent-sandbox's Slurm chaperon at {SOCKET} ({e}); Slurm is not available in this session")
    })?;
    let fds = [0, 1, 2];
    let iov = [std::io::IoSlice::new(b"F")];
    let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    nix::sys::socket::sendmsg::<()>(conn.as_raw_fd(), &iov, &cmsg, nix::sys::socket::MsgFlags::empty(), None)
        .map_err(|e| format!("cannot pass the terminal to the chaperon: {e}"))?;
    let req = Request {
        command: name.to_string(),
        argv: std::env::args().skip(1).collect(),
        cwd: std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default(),
        script: None,
        env: std::env::vars().collect::<BTreeMap<_, _>>(),
    };
    wire::write_frame(&mut conn, &req).map_err(|e| format!("cannot send the request to the chaperon: {e}"))?;
    forward_signals(&conn);
    wire::read_frame(&mut conn).map_err(|e| match e {
        wire::WireError::Io(_) => "lost contact with agent-sandbox's Slurm chaperon before it answered; \
                                   whether the command took effect is unknown (check with squeue)"
            .to_string(),
        other => format!("bad answer from the chaperon: {other}"),
    })
}
