//! Unix socket paths longer than `sun_path` holds. A state directory under a deep home
//! (`/gpfs/fs1/home/projects/<group>/<user>/.local/state/agent-sandbox/sessions/<id>.sock`)
//! passes the 107 bytes a socket address can name; the socket is then bound or reached
//! through its directory's descriptor (`/proc/self/fd/N/<name>`), which the kernel resolves
//! to the same place.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The most a socket address's path may hold, its terminating NUL left out.
pub const MAX: usize = 107;

/// A path that names `path` within `sun_path`, and the directory descriptor it goes
/// through (kept open while the path is used).
pub struct Short {
    pub path: PathBuf,
    _dir: Option<OwnedFd>,
}

/// `path` itself when it fits; else its directory opened (`O_PATH`) and the name reached
/// through that descriptor, or an error saying the name alone is too long.
pub fn short(path: &Path) -> std::io::Result<Short> {
    if path.as_os_str().len() <= MAX {
        return Ok(Short { path: path.to_path_buf(), _dir: None });
    }
    let too_long = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "socket name too long");
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return Err(too_long()) };
    let dir = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)
        .map(OwnedFd::from)?;
    let via = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(OsStr::from_bytes(name.as_bytes()));
    if via.as_os_str().len() > MAX {
        return Err(too_long());
    }
    Ok(Short { path: via, _dir: Some(dir) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_below_a_path_longer_than_sun_path_is_bound_and_reached() {
        let t = tempfile_dir();
        let mut deep = t.clone();
        while deep.as_os_str().len() <= MAX + 10 {
            deep.push("a-rather-long-directory-name");
        }
        std::fs::create_dir_all(&deep).unwrap();
        let sock = deep.join("s.sock");
        assert!(std::os::unix::net::UnixListener::bind(&sock).is_err(), "the plain path fits after all");
        let at = short(&sock).unwrap();
        let l = std::os::unix::net::UnixListener::bind(&at.path).unwrap();
        drop(at);
        let to = short(&sock).unwrap();
        std::os::unix::net::UnixStream::connect(&to.path).unwrap();
        assert!(l.accept().is_ok());
        assert!(sock.exists(), "bound where the long path names");
        let short_one = t.join("x.sock");
        assert_eq!(short(&short_one).unwrap().path, short_one);
        std::fs::remove_dir_all(&t).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let p = std::env::temp_dir().join(format!("sys-socket-path-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}
