//! The kernel side of the git guard: a seccomp filter whose matches are sent to a listener
//! (`SECCOMP_RET_USER_NOTIF`), and the listener's ioctls (receive, answer with a value or an
//! error, answer with a descriptor put into the caller's table). Also the caller's view from
//! outside: its `/proc` directory, its memory (the path arguments), its umask and terminal.
//! Knows nothing of git or of the rules.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

/// One trapped syscall.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    pub id: u64,
    /// The calling thread, in the listener's PID namespace (the jail's).
    pub tid: i32,
    pub nr: i64,
    pub args: [u64; 6],
}

/// Installs `prog` on the calling thread with a listener for its `USER_NOTIF` matches and
/// returns the listener. Asks for the caller to wait killably once a notification is read
/// (Linux 5.19): a signal then cannot restart a syscall the guard already carried out (a
/// `mkdir` would fail with EEXIST the second time); older kernels fall back to without.
pub fn install_with_listener(prog: &[seccompiler::sock_filter]) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct Fprog {
        len: libc::c_ushort,
        filter: *const seccompiler::sock_filter,
    }
    let len = libc::c_ushort::try_from(prog.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let fprog = Fprog { len, filter: prog.as_ptr() };
    let base = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    for flags in [base | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, base] {
        // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel copies the
        // program. no_new_privs is already set (the jail's init sealed itself before forking).
        let fd =
            unsafe { libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, flags, &fprog as *const Fprog) };
        if fd >= 0 {
            // SAFETY: the kernel returned a new descriptor that nothing else owns.
            let listener = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            let _ = wake_up_on_the_same_cpu(listener.as_fd());
            return Ok(listener);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6; not in the libc crate yet).
const SYNC_WAKE_UP: libc::c_ulong = 1;

/// Asks the kernel to hand each trapped call to the listener, and the answer back, on the
/// CPU the waker runs on (Linux 6.6): the trapped process sleeps while the guard decides, so
/// the two never run at once, and a wake-up on another CPU (an idle one's exit from its idle
/// loop, 30-50 µs in a VM) is most of a round trip. Best effort: older kernels answer EINVAL
/// and keep the ordinary wake-ups, which are only slower.
pub fn wake_up_on_the_same_cpu(listener: BorrowedFd) -> bool {
    // SAFETY: SET_FLAGS takes its flags by value, not through a pointer; a failure leaves the
    // listener as it was.
    unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, SYNC_WAKE_UP) == 0 }
}

fn ioctl(listener: BorrowedFd, request: libc::Ioctl, arg: *mut libc::c_void) -> io::Result<()> {
    loop {
        // SAFETY: every caller passes a pointer to the struct `request` is defined over, live
        // for the call.
        if unsafe { libc::ioctl(listener.as_raw_fd(), request, arg) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Waits for the next trapped syscall. Err(ENOENT): the caller went away before it was read,
/// or no process is under the filter any more (`orphaned` tells which); other errors end the
/// listener.
pub fn recv(listener: BorrowedFd) -> io::Result<Notification> {
    // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV, (&mut n as *mut libc::seccomp_notif).cast())?;
    Ok(Notification { id: n.id, tid: n.pid as i32, nr: i64::from(n.data.nr), args: n.data.args })
}

/// Whether every process under the filter is gone. The kernel then answers every receive
/// with ENOENT at once, without waiting, so a receive loop must stop on this or spin; the
/// listener polls as hung up from then on, for good (no process can join a filter it left).
pub fn orphaned(listener: BorrowedFd) -> bool {
    let mut fds = [libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    // SAFETY: poll reads and writes one pollfd of ours, live for the call; timeout 0.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
    // POLLHUP alone: the kernel also answers POLLERR when a signal interrupts its wait for
    // the listener's lock, which a process of the jail can cause (PID 1's threads take
    // glibc's signal 33), while processes remain under the filter.
    n > 0 && fds[0].revents & libc::POLLHUP != 0
}

/// Whether the notification is still pending: its caller has not died and been replaced by
/// another process with the same id.
pub fn id_valid(listener: BorrowedFd, id: u64) -> bool {
    let mut id = id;
    ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, (&mut id as *mut u64).cast()).is_ok()
}

/// Completes the caller's syscall with `result`: a return value, or an errno.
pub fn answer(listener: BorrowedFd, id: u64, result: Result<i64, i32>) {
    let (val, error) = match result {
        Ok(v) => (v, 0),
        Err(e) => (0, -e),
    };
    let mut r = libc::seccomp_notif_resp { id, val, error, flags: 0 };
    // A failure means the caller is gone (ENOENT): nothing to do.
    let _ = ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, (&mut r as *mut libc::seccomp_notif_resp).cast());
}

/// Completes the caller's syscall by putting a copy of `fd` into its table: the syscall
/// returns the new number (Linux 5.14, `SECCOMP_ADDFD_FLAG_SEND`).
pub fn answer_fd(listener: BorrowedFd, id: u64, fd: BorrowedFd, cloexec: bool) -> io::Result<()> {
    let mut a = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: fd.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
    };
    ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ADDFD, (&mut a as *mut libc::seccomp_notif_addfd).cast())
}

/// The caller, seen from outside through `/proc/<tid>`: opened first, then checked to still
/// be the notification's caller, so everything read through it is that process's.
pub struct Caller {
    pub tid: i32,
    pub proc_dir: OwnedFd,
    /// `/proc/<tid>/mem`, opened at the first path read.
    mem: std::cell::OnceCell<File>,
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// `openat` relative to `dir`; `flags` get O_CLOEXEC.
pub fn open_at(dir: BorrowedFd, path: &str, flags: libc::c_int) -> Result<OwnedFd, i32> {
    let c = CString::new(path).map_err(|_| libc::EINVAL)?;
    // SAFETY: `c` is a valid C string for the call; the returned descriptor is new.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno(&io::Error::last_os_error()));
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Caller {
    /// Opens the caller's `/proc` directory, then checks the notification is still pending.
    pub fn open(listener: BorrowedFd, n: &Notification) -> Result<Caller, i32> {
        let proc_dir = open_at(
            // SAFETY: AT_FDCWD is a valid "descriptor" for *at calls; the path is absolute.
            unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) },
            &format!("/proc/{}", n.tid),
            libc::O_PATH | libc::O_DIRECTORY,
        )?;
        if !id_valid(listener, n.id) {
            return Err(libc::ESRCH);
        }
        Ok(Caller { tid: n.tid, proc_dir, mem: std::cell::OnceCell::new() })
    }

    pub fn dir(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.proc_dir.as_fd()
    }

    /// A NUL-terminated string from the caller's memory (a path argument), at most PATH_MAX
    /// bytes. Read a page at a time, so a string that ends just before unmapped memory is
    /// still read.
    pub fn read_string(&self, addr: u64) -> Result<Vec<u8>, i32> {
        const PAGE: u64 = 4096;
        const MAX: usize = libc::PATH_MAX as usize;
        if addr == 0 {
            return Err(libc::EFAULT);
        }
        let mem = self.mem()?;
        let mut out = Vec::with_capacity(256);
        let mut at = addr;
        while out.len() < MAX {
            let room = (PAGE - at % PAGE).min((MAX - out.len()) as u64) as usize;
            let mut buf = vec![0u8; room];
            let n = match mem.read_at(&mut buf, at) {
                Ok(0) => return Err(libc::EFAULT),
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EIO) => return Err(libc::EFAULT),
                Err(e) => return Err(errno(&e)),
            };
            if let Some(end) = buf[..n].iter().position(|b| *b == 0) {
                out.extend_from_slice(&buf[..end]);
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
            at += n as u64;
        }
        Err(libc::ENAMETOOLONG)
    }

    /// The caller's umask (`Umask:` in its status file, Linux 4.7).
    pub fn umask(&self) -> Result<libc::mode_t, i32> {
        let status = std::fs::read_to_string(self.proc_path("status")).map_err(|e| errno(&e))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .and_then(|v| libc::mode_t::from_str_radix(v.trim(), 8).ok())
            .ok_or(libc::EIO)
    }

    /// The caller's controlling terminal as a path in the jail, for an open of `/dev/tty`
    /// (which would otherwise be the guard's own: it has none). Err(ENXIO) without one.
    pub fn terminal(&self) -> Result<String, i32> {
        let stat = std::fs::read_to_string(self.proc_path("stat")).map_err(|e| errno(&e))?;
        // Field 7 (tty_nr), counted after the command name, which may hold spaces.
        let after = stat.rsplit_once(')').map(|(_, r)| r).ok_or(libc::EIO)?;
        let tty_nr: u32 = after.split_whitespace().nth(4).and_then(|v| v.parse().ok()).ok_or(libc::EIO)?;
        let major = (tty_nr >> 8) & 0xfff;
        let minor = (tty_nr & 0xff) | ((tty_nr >> 12) & 0xfff00);
        match major {
            // UNIX98_PTY_SLAVE_MAJOR and the 7 majors after it.
            136..=143 => Ok(format!("/dev/pts/{}", (major - 136) * 256 + minor)),
            _ => Err(libc::ENXIO),
        }
    }

    /// A duplicate of the caller's descriptor `fd` (`pidfd_getfd`: the guard runs in the
    /// jail's PID 1, the ancestor of every caller, as Yama's ptrace scope asks).
    pub fn fd(&self, fd: i32) -> Result<OwnedFd, i32> {
        let status = std::fs::read_to_string(self.proc_path("status")).map_err(|e| errno(&e))?;
        let tgid: libc::pid_t = status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or(libc::EIO)?;
        let pidfd = agent_sandbox_sys::pidfd::open(tgid).map_err(|e| errno(&e))?;
        agent_sandbox_sys::pidfd::getfd(&pidfd, fd).map_err(|e| errno(&e))
    }

    /// `len` bytes of the caller's memory at `addr` (a socket address).
    pub fn read_bytes(&self, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
        let mem = self.mem()?;
        let mut buf = vec![0u8; len];
        match mem.read_at(&mut buf, addr) {
            Ok(n) if n == len => Ok(buf),
            Ok(_) => Err(libc::EFAULT),
            Err(e) if e.raw_os_error() == Some(libc::EIO) => Err(libc::EFAULT),
            Err(e) => Err(errno(&e)),
        }
    }

    fn mem(&self) -> Result<&File, i32> {
        match self.mem.get() {
            Some(m) => Ok(m),
            None => {
                let m = File::from(open_at(self.dir(), "mem", libc::O_RDONLY)?);
                Ok(self.mem.get_or_init(|| m))
            }
        }
    }

    /// The caller's process id (its thread group's), from its `status`.
    pub fn tgid(&self) -> Result<i32, i32> {
        let status =
            std::fs::read_to_string(self.proc_path("status")).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok()).ok_or(libc::EIO)
    }

    /// `/proc/<tid>/<what>` through the directory opened for this caller (never a later
    /// process with the same id).
    pub fn proc_path(&self, what: &str) -> String {
        format!("/proc/self/fd/{}/{what}", self.proc_dir.as_raw_fd())
    }
}
