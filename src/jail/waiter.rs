//! The cleanup waiter: a process that outlives the launcher, however the launcher ends
//! (SIGKILL included), and then releases what the session held: the project's and the
//! home's placeholders (through their session locks), the session's files in the state
//! directory, an allocation the chaperon left pending.
//!
//! It is forked first thing, before the command line is parsed, while the heap is a few
//! pages: it lives as long as the session, and a fork taken later would keep a copy of every
//! heap page the launcher has since changed or freed (about 140 KiB a session, measured with
//! 50 idle sessions). The launcher tells it what to do once it knows (`hand`): one message on
//! a socket pair, the lock files' descriptors riding along. The launcher's exit closes the
//! pair, and the waiter does the work.
//!
//! The waiter acts only on what its own launcher sent: each message's sender is checked by
//! the kernel's credentials (`SO_PASSCRED`), so a process that came to hold the launcher's end
//! (a child forked before it was closed) cannot order removals. The jail's processes never
//! hold it: the jail's init closes it first thing (`forget`), and everything else the
//! launcher runs gets it closed at exec.

use serde::{Deserialize, Serialize};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

/// The launcher's end of the pair (-1: no waiter runs).
static LINK: AtomicI32 = AtomicI32::new(-1);

/// The largest orders taken (a few paths); a message that does not fit is dropped whole.
const MAX_ORDERS: usize = 1 << 20;

/// The most lock files one message carries (the project's and the home's).
const MAX_LOCKS: usize = 4;

/// What the waiter does once the launcher is gone, in this order.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Orders {
    /// Files, or directories once empty, to remove.
    pub remove: Vec<Vec<u8>>,
    /// Allocations the launcher's chaperon left pending: the state directory and the
    /// launcher's pid their notes are filed under.
    pub cancel_left: Option<(Vec<u8>, i32)>,
    /// The directory each session lock guards, in the order their descriptors come.
    pub locks: Vec<Vec<u8>>,
}

fn path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(bytes).into()
}

pub fn bytes(p: &std::path::Path) -> Vec<u8> {
    p.as_os_str().as_encoded_bytes().to_vec()
}

/// Forks the waiter, unless one runs. Only a single-threaded process may call it (the
/// launcher before its threads start): the child goes on in Rust code that allocates.
pub fn start() {
    if LINK.load(Ordering::Relaxed) >= 0 {
        return;
    }
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let Ok((ours, theirs)) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC) else {
        return;
    };
    // Before the fork: a message sent before the child set it would come without credentials.
    if nix::sys::socket::setsockopt(&theirs, nix::sys::socket::sockopt::PassCred, &true).is_err() {
        return;
    }
    let launcher = std::process::id() as i32;
    // SAFETY: the caller is single-threaded (see above); the child closes every descriptor
    // but its end of the pair and ends with _exit.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop(ours);
            serve(theirs, launcher)
        }
        Ok(nix::unistd::ForkResult::Parent { .. }) => {
            drop(theirs);
            LINK.store(std::os::fd::IntoRawFd::into_raw_fd(ours), Ordering::Relaxed);
        }
        Err(_) => {}
    }
}

/// In a child of the launcher that stays (the jail's init): closes its copy of the
/// launcher's end, so the waiter hears of the launcher's exit, and nothing in the child can
/// write to it.
pub fn forget() {
    let fd = LINK.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the descriptor was ours (stored by `start`), and is dropped from LINK first.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

/// Gives the waiter its orders (starting one now if none runs), with the session locks'
/// descriptors in `orders.locks`' order. False if no waiter took them.
pub fn hand(orders: &Orders, locks: &[RawFd]) -> bool {
    start();
    let fd = LINK.load(Ordering::Relaxed);
    if fd < 0 || locks.len() != orders.locks.len() || locks.len() > MAX_LOCKS {
        return false;
    }
    let Ok(body) = serde_json::to_vec(orders) else { return false };
    let iov = [std::io::IoSlice::new(&body)];
    let rights = [nix::sys::socket::ControlMessage::ScmRights(locks)];
    let cmsgs: &[nix::sys::socket::ControlMessage] = if locks.is_empty() { &[] } else { &rights };
    loop {
        match nix::sys::socket::sendmsg::<()>(fd, &iov, cmsgs, nix::sys::socket::MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) => return n == body.len(),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

/// The waiter's life: orders until the launcher is gone, then the work.
fn serve(sock: OwnedFd, launcher: i32) -> ! {
    super::placeholders::close_all_but(&[sock.as_raw_fd()]);
    let mut orders = Orders::default();
    let mut lock_files: Vec<OwnedFd> = vec![];
    loop {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
        // Each message's own size: a buffer made for the largest would be written whole (it
        // is zeroed), and the waiter lives as long as the session.
        let size =
            match nix::sys::socket::recv(sock.as_raw_fd(), &mut [0u8; 0], MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC) {
                Ok(n) => n.min(MAX_ORDERS),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            };
        let mut buf = vec![0u8; size];
        let mut cmsg = nix::cmsg_space!([RawFd; MAX_LOCKS], libc::ucred);
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let (n, fds, sender, cut) =
            match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC) {
                Ok(m) => {
                    let mut fds = vec![];
                    let mut sender = None;
                    for c in m.cmsgs().into_iter().flatten() {
                        match c {
                            ControlMessageOwned::ScmRights(v) => fds.extend(v.into_iter().map(|f| {
                                // SAFETY: the kernel just installed these descriptors in this
                                // process; nothing else owns them.
                                unsafe { OwnedFd::from_raw_fd(f) }
                            })),
                            ControlMessageOwned::ScmCredentials(c) => sender = Some(c.pid()),
                            _ => {}
                        }
                    }
                    let cut = m.flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
                    (m.bytes, fds, sender, cut)
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            };
        if n == 0 {
            break; // the launcher is gone (every copy of its end closed)
        }
        if sender != Some(launcher) || cut {
            continue;
        }
        let Ok(more) = serde_json::from_slice::<Orders>(&buf[..n]) else { continue };
        if more.locks.len() != fds.len() {
            continue;
        }
        orders.remove.extend(more.remove);
        orders.cancel_left = more.cancel_left.or(orders.cancel_left.take());
        orders.locks.extend(more.locks);
        lock_files.extend(fds);
    }
    carry_out(orders, lock_files);
    // SAFETY: ends the waiter without running the launcher's exit path.
    unsafe { libc::_exit(0) }
}

fn carry_out(orders: Orders, lock_files: Vec<OwnedFd>) {
    // A directory goes only once empty (the session network's registry, while jobs of the
    // session still run elsewhere, stays).
    for p in orders.remove.iter().map(|p| path(p)) {
        let _ = std::fs::remove_file(&p).or_else(|_| std::fs::remove_dir(&p));
    }
    if let Some((state, launcher)) = &orders.cancel_left {
        let scancel = crate::slurm::slurm_bin().join("scancel");
        chaperon::commands::salloc::cancel_left(&path(state), &scancel, *launcher);
    }
    for (file, project) in lock_files.into_iter().zip(&orders.locks) {
        super::placeholders::ProjectLock::held(std::fs::File::from(file), path(project)).release_as_waiter();
    }
}

#[cfg(test)]
mod tests {
    use super::Orders;

    #[test]
    fn the_waiter_works_after_its_launcher_and_takes_orders_from_it_alone() {
        let dir = std::env::temp_dir().join(format!("asb-waiter-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ours, theirs) = (dir.join("ours"), dir.join("theirs"));
        std::fs::write(&ours, "").unwrap();
        std::fs::write(&theirs, "").unwrap();
        let order = |p: &std::path::Path| Orders { remove: vec![super::bytes(p)], ..Orders::default() };
        super::start();
        // Another process holding the launcher's end (a child forked before it closed it)
        // orders a removal: ignored.
        // SAFETY: the child only sends one message and _exits.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let sent = super::hand(&order(&theirs), &[]);
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(if sent { 0 } else { 1 }) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0), "the impostor's message was sent");
            }
        }
        assert!(super::hand(&order(&ours), &[]));
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(ours.exists(), "the waiter worked before its launcher was gone");
        super::forget(); // as the launcher's exit would
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while ours.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!ours.exists(), "the launcher's order was not carried out");
        assert!(theirs.exists(), "another process's order was carried out");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn orders_keep_paths_that_are_not_utf8() {
        let o = Orders {
            remove: vec![b"/tmp/a\xffb".to_vec()],
            cancel_left: Some((b"/state".to_vec(), 42)),
            locks: vec![b"/p".to_vec()],
        };
        let back: Orders = serde_json::from_slice(&serde_json::to_vec(&o).unwrap()).unwrap();
        assert_eq!(back, o);
    }
}
