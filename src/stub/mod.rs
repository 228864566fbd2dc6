//! What runs inside the jail under another program's name. For now the mail-block stub;
//! the Slurm stubs (clients of the chaperon) join it with the Slurm work.

pub mod mail;

/// Where the stubs live inside the jail: a read-only tmpfs holding the agent-sandbox binary
/// and a directory of links to it that comes first on PATH.
pub const STUB_DIR: &str = "/run/agent-sandbox";
pub const STUB_BIN_DIR: &str = "/run/agent-sandbox/bin";
pub const STUB_EXE: &str = "/run/agent-sandbox/agent-sandbox";

/// If this process was started under a stub's name, runs that stub and returns its exit code.
pub fn dispatch(argv0: &std::ffi::OsStr) -> Option<i32> {
    let name = std::path::Path::new(argv0).file_name()?.to_str()?;
    if mail::MAILERS.contains(&name) {
        return Some(mail::run(name));
    }
    None
}
