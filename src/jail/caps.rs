//! Drops every capability (bounding, ambient, inheritable, permitted, effective), sets
//! no_new_privs and installs the seccomp filter, then proves it: only this module can make
//! a `Sealed`, and the code that execs the command needs one.

use super::seccomp;
use caps::CapSet;

/// Proof that the calling process holds no capability, has no_new_privs and runs under the
/// jail's seccomp filter. Not constructible outside this module.
pub struct Sealed {
    _private: (),
}

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("cannot drop capabilities: {0}")]
    Caps(String),
    #[error("capabilities remain after dropping them: {0}")]
    Remaining(String),
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(std::io::Error),
    #[error("seccomp: {0}")]
    Seccomp(#[from] seccomp::SeccompError),
}

/// Seals the jail's init with a program the launcher compiled (see `seccomp::build_program`).
pub fn seal(prog: &seccompiler::BpfProgram) -> Result<Sealed, SealError> {
    drop_all_caps()?;
    crate::timing::mark("caps-dropped");
    set_no_new_privs()?;
    seccomp::install(prog)?;
    crate::timing::mark("seccomp-installed");
    Ok(Sealed { _private: () })
}

fn drop_all_caps() -> Result<(), SealError> {
    // Bounding first: dropping it needs CAP_SETPCAP, which we still hold in our user namespace.
    // Loop over every number the kernel might know (not only those the crate knows).
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes an integer capability number; EINVAL for numbers the
        // kernel does not know is expected and ignored.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(SealError::Caps(format!("bounding set cap {cap}: {e}")));
            }
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| SealError::Caps(e.to_string()))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| SealError::Caps(e.to_string()))?;
    caps::clear(None, CapSet::Effective).map_err(|e| SealError::Caps(e.to_string()))?;
    caps::clear(None, CapSet::Permitted).map_err(|e| SealError::Caps(e.to_string()))?;
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable, CapSet::Ambient, CapSet::Bounding] {
        let have = caps::read(None, set).map_err(|e| SealError::Caps(e.to_string()))?;
        if !have.is_empty() {
            return Err(SealError::Remaining(format!("{set:?}: {have:?}")));
        }
    }
    Ok(())
}

pub fn set_no_new_privs() -> Result<(), SealError> {
    // SAFETY: PR_SET_NO_NEW_PRIVS with arg 1 has no pointer arguments.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if r != 0 {
        return Err(SealError::NoNewPrivs(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Seals a process that never had namespace capabilities (the Landlock backend).
pub fn seal_unprivileged(opts: &seccomp::SeccompOptions) -> Result<Sealed, SealError> {
    let prog = seccomp::build_program(opts)?;
    // An unprivileged process cannot shrink its bounding set; it can empty the others.
    for set in [CapSet::Ambient, CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::clear(None, set).map_err(|e| SealError::Caps(e.to_string()))?;
    }
    set_no_new_privs()?;
    seccomp::install(&prog)?;
    Ok(Sealed { _private: () })
}
