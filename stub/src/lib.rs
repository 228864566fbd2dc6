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
