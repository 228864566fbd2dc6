//! What runs inside the jail under another program's name: the mail-block stub and the
//! Slurm stubs (clients of the session's chaperon).
//!
//! A crate of its own so that its binary can be built alone, for a target of its own: every
//! Slurm call in the jail starts it, and it is linked statically against musl (`stub/build.sh`),
//! whose start does not ask the processor what it is. glibc's start does, with `cpuid`
//! some seventy times (its string functions and cache sizes), and in a virtual machine each
//! `cpuid` is a trap to the hypervisor: 4 µs apiece on the test VM, 0.3 ms of every call.

pub mod mail;
pub mod slurm;

/// If this process was started under a stub's name (`argv[0]`), runs that stub with the rest
/// of `argv` and returns its exit code.
///
/// The arguments are passed in, not read from `std::env::args`: under musl, std learns them
/// only in Rust's own `main`, which the stub binary does without.
pub fn dispatch(argv: &[std::ffi::OsString]) -> Option<i32> {
    let (argv0, args) = argv.split_first()?;
    let name = std::path::Path::new(argv0).file_name()?.to_str()?;
    if mail::MAILERS.contains(&name) {
        return Some(mail::run(name));
    }
    if slurm::SLURM_STUBS.contains(&name) {
        return Some(slurm::run(name, args));
    }
    None
}
