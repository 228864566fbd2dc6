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

/// A file's device, inode and size as this host already knows them (`statx` with
/// `AT_STATX_DONT_SYNC`): no round trip to a network filesystem's server, where a plain `stat`
/// after a write of this host's asks it again. The size includes this host's own writes; a
/// change another host made may not be seen yet (that needs an open, on NFS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
}

/// `Known` of the file at `path` (a link itself, not followed).
pub fn known_at(path: &Path) -> std::io::Result<Known> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    known(libc::AT_FDCWD, &c, libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_DONT_SYNC)
}

/// `Known` of the open file `f`.
pub fn known_of(f: &std::fs::File) -> std::io::Result<Known> {
    use std::os::fd::AsRawFd;
    known(f.as_raw_fd(), c"", libc::AT_EMPTY_PATH | libc::AT_STATX_DONT_SYNC)
}

/// `Known` of the open file `f` as its server has it now (`AT_STATX_FORCE_SYNC`: a round trip
/// on a network filesystem, where it also updates what this host knows: the size an append
/// then writes at includes another host's appends).
pub fn refresh(f: &std::fs::File) -> std::io::Result<Known> {
    use std::os::fd::AsRawFd;
    known(f.as_raw_fd(), c"", libc::AT_EMPTY_PATH | libc::AT_STATX_FORCE_SYNC)
}

fn known(dir: libc::c_int, path: &std::ffi::CStr, flags: libc::c_int) -> std::io::Result<Known> {
    // SAFETY: statx writes one `statx` struct into `st`, which outlives the call; `path` is a
    // NUL-terminated string that outlives it.
    let (rc, st) = unsafe {
        let mut st: libc::statx = std::mem::zeroed();
        let mask = libc::STATX_INO | libc::STATX_SIZE;
        let rc = libc::statx(dir, path.as_ptr(), flags, mask, &mut st);
        (rc, st)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let dev = libc::makedev(st.stx_dev_major, st.stx_dev_minor);
    Ok(Known { dev, ino: st.stx_ino, size: st.stx_size })
}

/// Whether `f` may be on a filesystem other hosts share (NFS, SMB, Lustre, GPFS, CephFS,
/// BeeGFS, Cray DVS, FUSE other than over a local block device: sshfs, the benches' stand-in
/// for NFS...): every filesystem but the local ones this knows (ext4, XFS, btrfs, ZFS, tmpfs,
/// overlay...), and any it cannot tell. Another host sees this host's writes there only once
/// they reach the server, which a write alone does not make happen. Told from this host's
/// mount table by the file's device (`statfs` would ask the server, a round trip on NFS).
pub fn shared_over_network(f: &std::fs::File) -> bool {
    let Ok(k) = known_of(f) else { return true };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    match fs_type_of(&mountinfo, k.dev) {
        Some(kind) => !is_local_fs(kind),
        // A device the table does not name (a btrfs subvolume's own): its superblock's magic,
        // asked of the kernel (a network filesystem's device is in the table, so this asks
        // no server in the cases that matter).
        None => !local_magic(f),
    }
}

/// Whether `f`'s filesystem is one of the local ones by its magic number (`fstatfs`).
fn local_magic(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    const LOCAL: [i64; 9] = [
        0xef53,
        0x5846_5342,
        0x9123_683e,
        0x2fc1_2fc1,
        0x0102_1994,
        0x794c_7630,
        0xca45_1a4e,
        0xf2f5_2010,
        0x8584_58f6,
    ];
    // SAFETY: fstatfs writes one `statfs` struct into `st`, which outlives the call.
    let (rc, st) = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        (libc::fstatfs(f.as_raw_fd(), &mut st), st)
    };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let kind = st.f_type as i64 & 0xffff_ffff;
    rc == 0 && LOCAL.contains(&kind)
}

/// The filesystem type of the mount of device `dev` in a `/proc/self/mountinfo` text.
fn fs_type_of(mountinfo: &str, dev: u64) -> Option<&str> {
    let want = format!("{}:{}", libc::major(dev), libc::minor(dev));
    mountinfo.lines().find_map(|l| {
        let mut fields = l.split(' ');
        (fields.nth(2)? == want).then_some(())?;
        l.split_once(" - ")?.1.split(' ').next()
    })
}

fn is_local_fs(kind: &str) -> bool {
    const LOCAL: [&str; 22] = [
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "zfs",
        "tmpfs",
        "ramfs",
        "f2fs",
        "bcachefs",
        "overlay",
        "fuseblk",
        "vfat",
        "exfat",
        "ntfs3",
        "jfs",
        "reiserfs",
        "nilfs2",
        "squashfs",
        "erofs",
        "devtmpfs",
        "hugetlbfs",
    ];
    LOCAL.contains(&kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of this test process's own under the temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sys-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn what_is_known_of_a_file_is_what_stat_says_of_it() {
        use std::os::unix::fs::MetadataExt;
        let dir = scratch("known");
        let p = dir.join("f");
        std::fs::write(&p, b"12345").unwrap();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let k = known_at(&p).unwrap();
        assert_eq!((k.dev, k.ino, k.size), (m.dev(), m.ino(), 5));
        let f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut &f, b"678").unwrap();
        assert_eq!(known_of(&f).unwrap(), Known { size: 8, ..k }, "this host's write is known");
        assert_eq!(refresh(&f).unwrap(), Known { size: 8, ..k });
        std::os::unix::fs::symlink(&p, dir.join("l")).unwrap();
        assert_ne!(known_at(&dir.join("l")).unwrap().ino, k.ino, "a link is not followed");
        assert!(known_at(&dir.join("none")).is_err());
        // This machine's temporary directory is on a local disk or in memory.
        assert!(!shared_over_network(&f));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_files_filesystem_is_told_from_the_mount_table_by_its_device() {
        let table = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
                     40 22 0:52 / /home rw,relatime shared:20 - nfs4 srv:/home rw,vers=4.2\n\
                     41 22 0:53 / /scratch rw - lustre 10.0.0.1@o2ib:/scratch rw\n\
                     42 22 0:54 / /mnt/s rw,nosuid - fuse.sshfs u@h:/ rw\n\
                     43 22 8:17 / /mnt/w rw - fuseblk /dev/sdb1 rw\n";
        let dev = |a: u32, b: u32| libc::makedev(a, b);
        assert_eq!(fs_type_of(table, dev(0, 52)), Some("nfs4"));
        assert_eq!(fs_type_of(table, dev(254, 0)), Some("ext4"));
        assert_eq!(fs_type_of(table, dev(9, 9)), None);
        let shared = |a, b| !fs_type_of(table, dev(a, b)).is_some_and(is_local_fs);
        assert!(shared(0, 52) && shared(0, 53) && shared(0, 54));
        assert!(!shared(254, 0) && !shared(8, 17), "ext4, and FUSE over a local disk");
        // A filesystem this does not know (Cray's DVS), or a device the table lacks: shared,
        // which costs a flush where it was not needed, never a record another host overwrites.
        assert!(shared(9, 9));
        let dvs = "50 22 0:60 / /lus rw - dvs /lus rw\n";
        assert!(!fs_type_of(dvs, dev(0, 60)).is_some_and(is_local_fs));
    }

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
        let dir = scratch("flock");
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
        let dir = scratch("file");
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
