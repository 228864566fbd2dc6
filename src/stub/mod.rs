//! The launcher's side of the stubs (the crate `agent-sandbox-stub`, in `stub/`): where they
//! live inside the jail and the directory of links to them. The launcher runs as a stub itself
//! when the stub binary is not installed next to it.

pub use agent_sandbox_stub::{dispatch, mail, session, slurm};

/// Where the stubs live inside the jail: a read-only tmpfs holding the agent-sandbox binary
/// and a directory of links to it that comes first on PATH.
pub const STUB_DIR: &str = "/run/agent-sandbox";
pub const STUB_BIN_DIR: &str = "/run/agent-sandbox/bin";
pub const STUB_EXE: &str = "/run/agent-sandbox/agent-sandbox";

/// The host directory of links (one per stub name, each to `STUB_EXE`) bound read-only at
/// `STUB_BIN_DIR`: the Slurm stubs, and the mailers too when mail is blocked. Versioned by
/// the list it holds, so a new name makes a new directory.
pub fn links_dir(state_dir: &std::path::Path, with_mail: bool) -> std::path::PathBuf {
    let n = slurm::SLURM_STUBS.len();
    match with_mail {
        true => state_dir.join(format!("stubs/bin-{}", mail::MAILERS.len() + n)),
        false => state_dir.join(format!("stubs/slurm-bin-{n}")),
    }
}

/// Creates `links_dir` once (it is kept between sessions: the links point at a path that
/// exists only inside the jail). Safe to race: existing links are kept.
pub fn ensure_links(state_dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    for with_mail in [true, false] {
        let dir = links_dir(state_dir, with_mail);
        let done = dir.join(".complete");
        if done.exists() {
            continue;
        }
        std::fs::DirBuilder::new().recursive(true).mode(0o755).create(&dir)?;
        let mail_names = if with_mail { mail::MAILERS } else { &[] };
        for name in mail_names.iter().chain(slurm::SLURM_STUBS) {
            match std::os::unix::fs::symlink(STUB_EXE, dir.join(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            }
        }
        std::fs::write(done, b"")?;
    }
    Ok(())
}
