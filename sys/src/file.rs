//! Files as the launcher's records, caches and locks use them: replaced whole or not at all
//! (a new file beside it, never through a link planted at its temporary name, renamed over
//! it), and locked with `flock`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` with `mode`: readers see the old file or the new one, never a
/// part. The temporary name is the process's and a counter's, so that threads and processes
/// writing the same path at once do not meet.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    static N: AtomicU64 = AtomicU64::new(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".new-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let tmp = PathBuf::from(name);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// `mkdir -p PATH` with `mode`, asking as little as it can (each ask a round trip on NFS): the
/// directory is made at once where its parent is there (a directory already there is kept:
/// one of another kind makes what is done in it next fail, naming it), each missing parent
/// first otherwise. `create_dir_all` asks whether it is there first, every time.
pub fn make_dir(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).mode(mode).create(path)
        }
        Err(e) => Err(e),
    }
}

/// `flock(2)` on `f` (`LOCK_SH`, `LOCK_EX`, `LOCK_UN`, with `LOCK_NB`), tried again when a
/// signal interrupts it.
pub fn flock(f: &std::fs::File, op: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a descriptor the caller holds open; no pointers.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_made_with_its_parents_or_found() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sys-mkdir-{}", std::process::id()));
        let deep = dir.join("a/b/c");
        make_dir(&deep, 0o700).unwrap();
        assert!(deep.is_dir());
        assert_eq!(std::fs::metadata(&deep).unwrap().permissions().mode() & 0o777, 0o700);
        make_dir(&deep, 0o700).unwrap();
        std::fs::write(dir.join("f"), "").unwrap();
        assert!(std::fs::write(dir.join("f/x"), "").is_err(), "a file in the way fails what comes next");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_lock_held_on_one_open_file_keeps_another_out_until_released() {
        let dir = std::env::temp_dir().join(format!("sys-flock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("lock");
        let (a, b) = (std::fs::File::create(&p).unwrap(), std::fs::File::open(&p).unwrap());
        flock(&a, libc::LOCK_EX).unwrap();
        assert!(flock(&b, libc::LOCK_EX | libc::LOCK_NB).is_err());
        assert!(flock(&b, libc::LOCK_SH | libc::LOCK_NB).is_err());
        flock(&a, libc::LOCK_UN).unwrap();
        flock(&b, libc::LOCK_SH | libc::LOCK_NB).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_is_left() {
        let dir = std::env::temp_dir().join(format!("sys-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(write_atomic(&dir.join("missing/f"), b"x", 0o600).is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "only the file");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
