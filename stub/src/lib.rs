//! What runs inside the jail under another program's name: the mail-block stub, the Slurm
//! stubs (clients of the session's chaperon) and the Landlock session's helpers.
//!
//! A crate of its own so that its binary can be built alone, for a target of its own: every
//! Slurm call in the jail starts it, and it is linked statically against musl (`stub/release.sh`),
//! whose start does not ask the processor what it is. glibc's start does, with `cpuid`
//! some seventy times (its string functions and cache sizes), and in a virtual machine each
//! `cpuid` is a trap to the hypervisor: 4 µs apiece on the test VM, 0.3 ms of every call.

pub mod mail;
pub mod session;
pub mod slurm;

/// Opens `/dev/null` on each of descriptors 0-2 that is closed, as Rust's runtime start does
/// (the launcher and the stub binary both skip it: their entry point is C's `main`). Without
/// it, the next socket or file a process opens takes the closed number and becomes its stdin,
/// stdout or stderr: the stub would hand the chaperon its own connection as the command's
/// stdio (then a killed caller no longer ends its command, and its messages go into the
/// connection). Aborts if one cannot be opened, as the runtime does.
pub fn open_standard_descriptors() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
    // SAFETY: poll reads and writes the three pollfd entries of a local array.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
    for p in fds {
        let closed = match polled {
            // SAFETY: fcntl(F_GETFD) only asks whether the descriptor is open.
            n if n < 0 => (unsafe { libc::fcntl(p.fd, libc::F_GETFD) }) == -1,
            _ => p.revents & libc::POLLNVAL != 0,
        };
        // SAFETY: opens /dev/null at the lowest free number: this one, the lower ones being
        // open by now. Without it, as in Rust's runtime start, the process cannot go on.
        if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } == -1 {
            std::process::abort();
        }
    }
}

/// `argv[0]` of the self-test's unix-socket probe (`agent-sandbox doctor --attack`):
/// `agent-sandbox-probe-unix PATH` connects to the socket at PATH, exit 0 when it could. Shell
/// tools cannot try a socket (opening one as a file always fails), and every jail has this
/// binary; it does nothing the jail's own programs could not.
pub const PROBE_UNIX: &str = "agent-sandbox-probe-unix";

fn probe_unix(args: &[std::ffi::OsString]) -> i32 {
    let [path] = args else {
        eprintln!("{PROBE_UNIX}: give the socket's path");
        return 2;
    };
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("{PROBE_UNIX}: {}: {e}", std::path::Path::new(path).display());
            1
        }
    }
}

/// If this process was started under a stub's name (`argv[0]`), runs that stub with the rest
/// of `argv` and returns its exit code.
///
/// The arguments are passed in, not read from `std::env::args`: under musl, std learns them
/// only in Rust's own `main`, which the stub binary does without.
pub fn dispatch(argv: &[std::ffi::OsString]) -> Option<i32> {
    let (argv0, args) = argv.split_first()?;
    let name = std::path::Path::new(argv0).file_name()?.to_str()?;
    match name {
        session::KEEPER => return Some(session::keeper(args)),
        session::SWEEPER => return Some(session::sweeper(args)),
        PROBE_UNIX => return Some(probe_unix(args)),
        _ => {}
    }
    if mail::MAILERS.contains(&name) {
        return Some(mail::run(name));
    }
    if slurm::SLURM_STUBS.contains(&name) {
        return Some(slurm::run(name, args));
    }
    None
}
