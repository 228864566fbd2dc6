//! The chaperon server: one per session, a process of its own outside the jail, listening
//! on a Unix socket that the jail sees at `/run/agent-sandbox/chaperon.sock`. Each
//! connection is one Slurm command from a stub: first the stub's stdin/stdout/stderr as
//! passed descriptors (one byte with SCM_RIGHTS), then one `Request` frame; the server
//! answers with one `Response` frame after the command ran with those descriptors as its
//! own stdio, so output streams straight to the caller. Connections are served
//! concurrently, a thread each (kept a while for the next call); the peer must be the
//! session's own user (SO_PEERCRED).
//! Under the Landlock backend the connections arrive instead as descriptors on a channel
//! the jail inherited (`serve_channel`): one stub's end of a stream socket pair each. The
//! server is the transport only: `commands::dispatch` decides and carries out each call.

use crate::call::Stdio;
use crate::session::{Audit, Config};
use crate::wire::{self, Request, Response};
use nix::sys::socket::{getsockopt, recvmsg, sockopt::PeerCredentials, ControlMessageOwned, MsgFlags};
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::Duration;

/// A client gets this long to send its descriptors and request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Refused messages on the Landlock backend's channel within `GARBAGE_WINDOW` after which it is
/// closed: a session's stubs never send one, so a sender of many is the jail flooding it.
const GARBAGE_LIMIT: usize = 64;
const GARBAGE_WINDOW: Duration = Duration::from_secs(10);

/// Serves until the listener fails. Never returns early on a bad client.
pub fn serve(listener: UnixListener, cfg: Arc<Config>) {
    serve_connections(listener.incoming().filter_map(Result::ok), cfg);
}

/// Serves the Landlock backend's channel until no process of the session holds its other
/// end. Every message must be one byte carrying exactly one descriptor: a connected unix
/// stream socket (a stub's end of the pair it made for this call) whose creator is a process
/// of this session (`session_root`, the launcher, is its ancestor) and of the session's user.
/// Anything else (garbage, no descriptor, several, a pipe, a file, a socket of another kind or
/// of a process outside the session) is refused: the descriptors are closed, the refusal is
/// audited and answered on the channel with one `Response::Error` frame (the stubs never read
/// the channel; a sender that does learns why), and serving goes on, unless more than
/// `GARBAGE_LIMIT` come within `GARBAGE_WINDOW`: then the channel is closed for the session.
/// How serving the channel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelEnd {
    /// No process of the session holds the other end any more.
    HungUp,
    /// Flooded with refused messages: to stay closed for the session.
    Flooded,
}

pub fn serve_channel(channel: OwnedFd, cfg: Arc<Config>, session_root: i32) -> ChannelEnd {
    let audit = cfg.clone();
    let flooded = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = flooded.clone();
    let mut refused: std::collections::VecDeque<std::time::Instant> = Default::default();
    let conns = std::iter::from_fn(move || loop {
        match receive(channel.as_raw_fd(), audit.who.uid, session_root) {
            Received::Conn(c) => return Some(c),
            Received::End => return None,
            Received::Refused(why) => {
                let now = std::time::Instant::now();
                refused.push_back(now);
                while refused.front().is_some_and(|t| now.duration_since(*t) > GARBAGE_WINDOW) {
                    refused.pop_front();
                }
                if refused.len() > GARBAGE_LIMIT {
                    // The session's Slurm calls end here: its jail flooded the channel.
                    (audit.audit)(&Audit {
                        command: "channel".into(),
                        decision: "closed".into(),
                        reason: Some(format!(
                            "more than {GARBAGE_LIMIT} refused messages in {} s: the Slurm channel is closed for this session",
                            GARBAGE_WINDOW.as_secs()
                        )),
                        ..Default::default()
                    });
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                    return None;
                }
                (audit.audit)(&Audit {
                    command: "channel".into(),
                    decision: "denied".into(),
                    reason: Some(why.clone()),
                    ..Default::default()
                });
                let message = format!("refused on the Slurm channel: {why}");
                if let Ok(frame) = wire::encode(&Response::Error { message }) {
                    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
                    let _ = nix::sys::socket::send(channel.as_raw_fd(), &frame, flags);
                }
            }
        }
    });
    serve_connections(conns, cfg);
    if flooded.load(std::sync::atomic::Ordering::SeqCst) {
        ChannelEnd::Flooded
    } else {
        ChannelEnd::HungUp
    }
}

enum Received {
    Conn(UnixStream),
    Refused(String),
    End,
}

/// The most descriptors one message can carry (SCM_MAX_FD): a buffer this large is never
/// truncated, so every descriptor the kernel installed is seen, and closed if refused.
const MAX_PASSED: usize = 253;

/// Receives one message with its descriptors (closed on drop unless taken).
fn recv_with_fds(sock: RawFd, buf: &mut [u8]) -> nix::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; MAX_PASSED]);
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut fds: Vec<OwnedFd> = vec![];
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(v) = c {
            // SAFETY: the kernel just installed these descriptors for us; nothing else owns them.
            fds.extend(v.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    Ok((msg.bytes, fds))
}

fn receive(channel: RawFd, uid: u32, session_root: i32) -> Received {
    use nix::sys::socket::{getsockopt, sockopt};
    let mut buf = [0u8; 64];
    let (bytes, mut fds) = loop {
        match recv_with_fds(channel, &mut buf) {
            Ok(r) => break r,
            Err(nix::Error::EINTR) => continue,
            Err(nix::Error::ENOBUFS) => return Received::Refused("a message with more than one descriptor".into()),
            Err(_) => return Received::End,
        }
    };
    if bytes == 0 && fds.is_empty() {
        // End of file, or an empty message: only the first leaves the peer hung up.
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        // SAFETY: the channel stays open for the whole call.
        let b = unsafe { std::os::fd::BorrowedFd::borrow_raw(channel) };
        let mut p = [PollFd::new(b, PollFlags::POLLIN)];
        let hup =
            poll(&mut p, PollTimeout::ZERO).is_ok() && p[0].revents().is_some_and(|r| r.contains(PollFlags::POLLHUP));
        return if hup { Received::End } else { Received::Refused("an empty message".into()) };
    }
    if bytes != 1 || fds.len() != 1 {
        return Received::Refused(format!(
            "a message of {bytes} bytes with {} descriptors (one byte with one socket per call)",
            fds.len()
        ));
    }
    let Some(fd) = fds.pop() else { return Received::Refused("no descriptor".into()) };
    let stream = matches!(getsockopt(&fd, sockopt::SockType), Ok(nix::sys::socket::SockType::Stream));
    let listening = getsockopt(&fd, sockopt::AcceptConn).unwrap_or(true);
    if !stream || listening || !is_unix(&fd) {
        return Received::Refused("the descriptor is no connected unix stream socket".into());
    }
    match getsockopt(&fd, PeerCredentials) {
        Ok(c) if c.uid() == uid && descends_from(c.pid(), session_root) => {}
        Ok(c) => {
            return Received::Refused(format!(
                "the socket's peer (pid {}, uid {}) is no process of this session",
                c.pid(),
                c.uid()
            ))
        }
        Err(e) => return Received::Refused(format!("the socket has no peer credentials ({e})")),
    }
    Received::Conn(UnixStream::from(fd))
}

/// Whether a socket is a unix one (its own address's family: nix has no `SO_DOMAIN`).
fn is_unix(fd: &OwnedFd) -> bool {
    use nix::sys::socket::{getsockname, AddressFamily, SockaddrLike, SockaddrStorage};
    getsockname::<SockaddrStorage>(fd.as_raw_fd()).is_ok_and(|a| a.family() == Some(AddressFamily::Unix))
}

/// Whether `root` is `pid` or one of its ancestors (from /proc; a pid that is gone is not).
fn descends_from(pid: i32, root: i32) -> bool {
    let mut p = pid;
    for _ in 0..4096 {
        if p == root {
            return true;
        }
        if p <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { return false };
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
        let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<i32>().ok());
        match ppid {
            Some(pp) => p = pp,
            None => return false,
        }
    }
    false
}

/// Serves each connection on a kept thread of its own (`pool`), at most
/// `pool::CALLS_AT_ONCE` at once; the rest are told the chaperon is busy.
fn serve_connections(conns: impl Iterator<Item = UnixStream>, cfg: Arc<Config>) {
    let workers = crate::pool::Pool::new(crate::pool::CALLS_AT_ONCE, move |conn| handle(conn, &cfg));
    for conn in conns {
        if let Err(mut c) = workers.hand(conn) {
            let _ = wire::write_frame(
                &mut c,
                &Response::Error { message: "the chaperon is busy (too many commands at once); retry".into() },
            );
        }
    }
}

fn handle(mut conn: UnixStream, cfg: &Config) {
    match getsockopt(&conn, PeerCredentials) {
        Ok(c) if c.uid() == cfg.who.uid => {}
        _ => return,
    }
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    // A caller that never reads its answer must not hold one of the slots for good.
    let _ = conn.set_write_timeout(Some(REQUEST_TIMEOUT));
    let Some(stdio) = recv_stdio(conn.as_raw_fd()) else { return };
    // One deadline for the whole request, not for each read: a peer trickling a byte at a
    // time cannot hold the connection (and its buffer) longer.
    let mut within = Deadline { conn: &conn, until: std::time::Instant::now() + REQUEST_TIMEOUT };
    let req: Request = match wire::read_frame(&mut within) {
        Ok(r) => r,
        Err(e) => {
            let _ = wire::write_frame(&mut conn, &Response::Error { message: format!("bad request: {e}") });
            return;
        }
    };
    let _ = conn.set_read_timeout(None);
    let handled = crate::commands::dispatch(&req, stdio, cfg, &conn);
    (cfg.audit)(&handled.audit);
    let _ = wire::write_frame(&mut conn, &handled.response);
}

/// Reads from `conn` until `until`, then fails (TimedOut) whatever still trickles in.
struct Deadline<'a> {
    conn: &'a UnixStream,
    until: std::time::Instant,
}

impl std::io::Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.conn.set_read_timeout(Some(left))?;
        (&mut &*self.conn).read(buf)
    }
}

fn recv_stdio(sock: RawFd) -> Option<Stdio> {
    let mut byte = [0u8; 1];
    let (_, fds) = recv_with_fds(sock, &mut byte).ok()?;
    if fds.len() != 3 {
        return None;
    }
    let mut it = fds.into_iter();
    Some(Stdio { stdin: it.next()?, stdout: it.next()?, stderr: it.next()? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{sendmsg, socketpair, AddressFamily, ControlMessage, SockFlag, SockType};

    fn channel() -> (OwnedFd, OwnedFd) {
        socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).expect("socketpair")
    }

    fn send(to: &OwnedFd, data: &[u8], fds: &[RawFd]) {
        let cmsg = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
        sendmsg::<()>(to.as_raw_fd(), &[std::io::IoSlice::new(data)], cmsgs, MsgFlags::empty(), None).expect("send");
    }

    fn refused(r: Received) -> String {
        match r {
            Received::Refused(why) => why,
            Received::Conn(_) => panic!("accepted"),
            Received::End => panic!("ended"),
        }
    }

    #[test]
    fn the_channel_takes_one_stream_socket_of_the_session_and_refuses_the_rest() {
        let (door, jail) = channel();
        let me = std::process::id() as i32;
        let uid = nix::unistd::getuid().as_raw();
        // A stub's pair: made by a process of the session (here: the root itself).
        let (mine, theirs) = UnixStream::pair().expect("pair");
        send(&jail, b"C", &[theirs.as_raw_fd()]);
        assert!(matches!(receive(door.as_raw_fd(), uid, me), Received::Conn(_)));
        drop(mine);
        send(&jail, b"GET /", &[]);
        assert!(refused(receive(door.as_raw_fd(), uid, me)).contains("0 descriptors"));
        send(&jail, b"", &[]);
        assert_eq!(refused(receive(door.as_raw_fd(), uid, me)), "an empty message");
        let (r, w) = nix::unistd::pipe().expect("pipe");
        send(&jail, b"C", &[w.as_raw_fd()]);
        assert!(refused(receive(door.as_raw_fd(), uid, me)).contains("no connected unix stream socket"));
        send(&jail, b"C", &[jail.as_raw_fd()]);
        assert!(refused(receive(door.as_raw_fd(), uid, me)).contains("no connected unix stream socket"));
        send(&jail, b"C", &[r.as_raw_fd(), w.as_raw_fd()]);
        assert!(refused(receive(door.as_raw_fd(), uid, me)).contains("2 descriptors"));
        // Peer credentials of a socket pair are its creator's (this test process): refused
        // for a session of another user, or whose launcher is not among its ancestors.
        let (a, b) = UnixStream::pair().expect("pair");
        send(&jail, b"C", &[a.as_raw_fd()]);
        assert!(refused(receive(door.as_raw_fd(), uid + 1, me)).contains("no process of this session"));
        send(&jail, b"C", &[b.as_raw_fd()]);
        assert!(refused(receive(door.as_raw_fd(), uid, i32::MAX)).contains("no process of this session"));
        drop(jail);
        assert!(matches!(receive(door.as_raw_fd(), uid, me), Received::End), "the session's end of the channel closed");
    }

    #[test]
    fn a_request_trickled_in_ends_at_its_deadline() {
        // Red team F8: the timeout was per read, so a byte every few seconds held a
        // connection (and its buffer) for good.
        let (mut jail, chaperon) = UnixStream::pair().unwrap();
        let t0 = std::time::Instant::now();
        let trickle = std::thread::spawn(move || {
            use std::io::Write;
            let _ = jail.write_all(b"ASB\x01\x00\x00\x01\x00");
            while t0.elapsed() < Duration::from_secs(5) {
                if jail.write_all(b" ").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let mut within = Deadline { conn: &chaperon, until: std::time::Instant::now() + Duration::from_millis(500) };
        let got = wire::read_frame::<Request>(&mut within);
        assert!(got.is_err());
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        drop(chaperon);
        trickle.join().unwrap();
    }
}
