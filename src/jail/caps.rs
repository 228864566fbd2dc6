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

/// `capget`/`capset`'s header and data, version 3 (two 32-bit words per set).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

fn os_error(what: &str) -> SealError {
    SealError::Caps(format!("{what}: {}", std::io::Error::last_os_error()))
}

/// A few system calls rather than a read and a write per capability and set (188 calls
/// through the caps crate, about 0.1 ms of every start).
fn drop_all_caps() -> Result<(), SealError> {
    // Bounding first: dropping it needs CAP_SETPCAP, which we still hold in our user namespace.
    // The kernel's numbers run from 0 without a gap: the first it does not know (EINVAL) ends
    // them, whatever this build knows of.
    let mut known = 0;
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes an integer capability number.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(os_error(&format!("bounding set cap {cap}")));
        }
        known = cap + 1;
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        return Err(os_error("ambient set"));
    }
    let mut header = CapHeader { version: CAP_VERSION_3, pid: 0 };
    let empty = [CapData::default(); 2];
    // SAFETY: capset reads one header and two data structs, all live for the call.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, empty.as_ptr()) } != 0 {
        return Err(os_error("effective, permitted and inheritable sets"));
    }
    // The proof. The ambient set needs none: the kernel keeps it within the permitted one.
    let mut have = [CapData::default(); 2];
    let mut header = CapHeader { version: CAP_VERSION_3, pid: 0 };
    // SAFETY: capget writes two data structs into `have`, live for the call.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, have.as_mut_ptr()) } != 0 {
        return Err(os_error("reading the sets back"));
    }
    if have.iter().any(|d| d.effective | d.permitted | d.inheritable != 0) {
        return Err(SealError::Remaining(format!(
            "effective {:#x}{:08x}, permitted {:#x}{:08x}, inheritable {:#x}{:08x}",
            have[1].effective,
            have[0].effective,
            have[1].permitted,
            have[0].permitted,
            have[1].inheritable,
            have[0].inheritable
        )));
    }
    for cap in 0..known {
        // SAFETY: PR_CAPBSET_READ takes an integer capability number.
        if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(SealError::Remaining(format!("bounding set: cap {cap}")));
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
