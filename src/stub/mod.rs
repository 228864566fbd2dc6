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

/// The host directory of links (one per stub name, each to `STUB_EXE`) bound read-only at
/// `STUB_BIN_DIR`. Versioned by the list it holds, so a new name makes a new directory.
pub fn links_dir(state_dir: &std::path::Path) -> std::path::PathBuf {
    state_dir.join(format!("stubs/bin-{}", mail::MAILERS.len()))
}

/// Creates `links_dir` once (it is kept between sessions: the links point at a path that
/// exists only inside the jail). Safe to race: existing links are kept.
pub fn ensure_links(state_dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = links_dir(state_dir);
    let done = dir.join(".complete");
    if done.exists() {
        return Ok(());
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(&dir)?;
    for name in mail::MAILERS {
        match std::os::unix::fs::symlink(STUB_EXE, dir.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    std::fs::write(done, b"")
}
