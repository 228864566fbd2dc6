//! The launcher <-> jail init channel: a SOCK_SEQPACKET pair carrying one-byte-tagged
//! messages and, with `Ready`, the file descriptors the jail made for the host side.

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

#[derive(Debug)]
pub enum Msg {
    /// Launcher -> init: the id maps are written; make the namespaces' parts that need no
    /// plan (the network, the staging root) while the plan is made.
    Go,
    /// Launcher -> init: the plan's part for the jail (`blueprint::Blueprint`, in a sealed
    /// memfd): build the jail.
    Plan(OwnedFd),
    /// Init -> launcher: the jail is built; the pty master (if the launcher asked for one)
    /// and what the network supervisor serves: tun0 (`filtered`) or the proxies' listening
    /// sockets (`proxied`).
    Ready {
        pty: Option<OwnedFd>,
        net: Vec<OwnedFd>,
    },
    /// Launcher -> init: start the command, under this seccomp program (compiled by the
    /// launcher while the jail was being built, as raw sock_filter instructions), and the
    /// git guard's program if the plan has the guard.
    Start {
        seal: Vec<seccompiler::sock_filter>,
        guard: Vec<seccompiler::sock_filter>,
    },
    /// Init -> launcher: the jail could not be built.
    Error(String),
    /// Init -> launcher: the jail could not be built as planned: a path of the host the plan
    /// checked is no longer what it checked (`JailError::Changed`).
    Changed(String),
    /// Init -> launcher: the command ended: exit code, or signal number.
    Exited(i32),
    Signaled(i32),
    /// Launcher -> init: the launcher received this signal; pass it on to the command.
    Relay(i32),
    /// Init -> launcher: the git guard refused a change (its check, the path), for the audit log.
    Refused {
        check: String,
        path: String,
    },
    /// Init -> launcher: refusals the git guard did not report (past its rate), to be counted.
    LeftOut(u64),
    /// Init -> launcher, once the command has ended: the git guard made no symlink where the
    /// exit check looks (`jail::links::sweep`), which walks no tree then.
    NoLinks,
}

fn put_program(buf: &mut Vec<u8>, prog: &[seccompiler::sock_filter]) {
    for i in prog {
        buf.extend_from_slice(&i.code.to_le_bytes());
        buf.push(i.jt);
        buf.push(i.jf);
        buf.extend_from_slice(&i.k.to_le_bytes());
    }
}

fn get_program(body: &[u8]) -> Vec<seccompiler::sock_filter> {
    body.chunks_exact(8)
        .map(|c| seccompiler::sock_filter {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

pub fn send(sock: RawFd, m: &Msg) -> nix::Result<()> {
    let mut buf = vec![];
    let mut fds: Vec<RawFd> = vec![];
    match m {
        Msg::Go => buf.push(b'G'),
        Msg::Plan(fd) => {
            buf.push(b'P');
            fds.push(fd.as_raw_fd());
        }
        Msg::Start { seal, guard } => {
            buf.push(b'S');
            buf.extend_from_slice(&(seal.len() as u32).to_le_bytes());
            put_program(&mut buf, seal);
            put_program(&mut buf, guard);
        }
        Msg::Ready { pty, net } => {
            buf.push(b'R');
            buf.push(u8::from(pty.is_some()));
            fds = pty.iter().chain(net.iter()).map(|f| f.as_raw_fd()).collect();
        }
        Msg::Error(s) | Msg::Changed(s) => {
            buf.push(if matches!(m, Msg::Changed(_)) { b'C' } else { b'E' });
            buf.extend_from_slice(&s.as_bytes()[..s.len().min(4000)]);
        }
        Msg::Exited(c) => {
            buf.push(b'X');
            buf.extend_from_slice(&c.to_le_bytes());
        }
        Msg::Signaled(s) => {
            buf.push(b'K');
            buf.extend_from_slice(&s.to_le_bytes());
        }
        Msg::Relay(s) => {
            buf.push(b'Y');
            buf.extend_from_slice(&s.to_le_bytes());
        }
        Msg::LeftOut(n) => {
            buf.push(b'L');
            buf.extend_from_slice(&n.to_le_bytes());
        }
        Msg::NoLinks => buf.push(b'N'),
        Msg::Refused { check, path } => {
            buf.push(b'F');
            buf.extend_from_slice(check.as_bytes());
            buf.push(0);
            buf.extend_from_slice(&path.as_bytes()[..path.len().min(4000)]);
        }
    }
    let iov = [std::io::IoSlice::new(&buf)];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map(drop)
}

/// Receives one message; `Ok(None)` means the other side is gone.
pub fn recv(sock: RawFd) -> nix::Result<Option<Msg>> {
    recv_with(sock, MsgFlags::MSG_CMSG_CLOEXEC)
}

/// Receives one message already queued, without waiting: `Err(EAGAIN)` when none is.
pub fn try_recv(sock: RawFd) -> nix::Result<Option<Msg>> {
    recv_with(sock, MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT)
}

fn recv_with(sock: RawFd, flags: MsgFlags) -> nix::Result<Option<Msg>> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut cspace = nix::cmsg_space!([RawFd; 4]);
    let (n, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        match recvmsg::<()>(sock, &mut iov, Some(&mut cspace), flags) {
            Ok(r) => {
                let mut fds = vec![];
                for c in r.cmsgs()? {
                    if let ControlMessageOwned::ScmRights(v) = c {
                        // SAFETY: the kernel just installed these descriptors in our table for
                        // us; nothing else owns them.
                        fds.extend(v.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                    }
                }
                break (r.bytes, fds);
            }
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e),
        }
    };
    if n == 0 {
        return Ok(None);
    }
    let body = &buf[1..n];
    let int = || body.get(..4).and_then(|b| b.try_into().ok()).map(i32::from_le_bytes).unwrap_or(126);
    Ok(Some(match buf[0] {
        b'G' => Msg::Go,
        b'P' => match fds.into_iter().next() {
            Some(fd) => Msg::Plan(fd),
            None => Msg::Error("the jail's blueprint came without its descriptor".into()),
        },
        b'S' => {
            let seal_len = body.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes).unwrap_or(0);
            let split = (seal_len as usize).saturating_mul(8).saturating_add(4).min(body.len());
            Msg::Start { seal: get_program(&body[4.min(body.len())..split]), guard: get_program(&body[split..]) }
        }
        b'R' => {
            let mut fds = fds.into_iter();
            let pty = if body.first() == Some(&1) { fds.next() } else { None };
            Msg::Ready { pty, net: fds.collect() }
        }
        b'E' => Msg::Error(String::from_utf8_lossy(body).into_owned()),
        b'C' => Msg::Changed(String::from_utf8_lossy(body).into_owned()),
        b'X' => Msg::Exited(int()),
        b'K' => Msg::Signaled(int()),
        b'Y' => Msg::Relay(int()),
        b'L' => Msg::LeftOut(body.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).unwrap_or(0)),
        b'N' => Msg::NoLinks,
        b'F' => {
            let (check, path) = body.split_at(body.iter().position(|b| *b == 0).unwrap_or(body.len()));
            Msg::Refused {
                check: String::from_utf8_lossy(check).into_owned(),
                path: String::from_utf8_lossy(path.get(1..).unwrap_or_default()).into_owned(),
            }
        }
        _ => Msg::Error("garbled message from the jail".into()),
    }))
}
