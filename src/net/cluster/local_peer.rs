//! Whose is a TCP connection that comes from this host. A listener on loopback (a one-host
//! cluster) hears every local user from the same addresses, and TCP has no SO_PEERCRED: the
//! kernel's socket diagnostics (sock_diag, what `ss` reads, open to every user) name the owner
//! of the socket at the other end, looked up by its four-tuple in the caller's network
//! namespace. Knows nothing of what the answer decides.

use nix::sys::socket::{self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// Where the other end of a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A socket of this host (this network namespace), owned by `uid`.
    Here { uid: u32 },
    /// No socket of this host's has that four-tuple: another host, or one already gone.
    Elsewhere,
}

/// The other end of the connection from `peer` to `here` (this side's address, as accepted).
pub fn owner(peer: SocketAddr, here: SocketAddr) -> io::Result<Peer> {
    let fd = socket::socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        SockProtocol::NetlinkSockDiag,
    )?;
    let seq = std::process::id();
    socket::sendto(fd.as_raw_fd(), &request(peer, here, seq), &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
    // The kernel answers within the send (the lookup runs in the sender's context): nothing
    // to wait for, and a socket that has no answer is an error, not a wait.
    let mut buf = [0u8; 1024];
    let n = socket::recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT)?;
    answer(buf.get(..n).unwrap_or_default(), peer, here, seq)
}

/// `SOCK_DIAG_BY_FAMILY`, `NLMSG_ERROR`, `NLM_F_REQUEST` (linux/sock_diag.h, netlink.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
/// `nlmsghdr`, then `inet_diag_req_v2` (4 bytes, the states, `inet_diag_sockid`).
const HEADER: usize = 16;
const SOCKID: usize = 48;
const REQUEST: usize = HEADER + 8 + SOCKID;
/// In `inet_diag_msg`: family, state, timer, retrans, the sockid, then expires, rqueue, wqueue
/// and the uid.
const UID_AT: usize = HEADER + 4 + SOCKID + 12;
/// `TCP_LISTEN` (include/net/tcp_states.h).
const TCP_LISTEN: u8 = 10;

/// An exact lookup (no dump) of the socket whose own address is `peer` and whose remote is
/// `here`: the one at the other end of ours.
fn request(peer: SocketAddr, here: SocketAddr, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(REQUEST);
    m.extend_from_slice(&(REQUEST as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    let family = if peer.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    m.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    m.extend_from_slice(&peer.port().to_be_bytes());
    m.extend_from_slice(&here.port().to_be_bytes());
    m.extend_from_slice(&address(peer.ip()));
    m.extend_from_slice(&address(here.ip()));
    m.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    m.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    m
}

/// An address as `inet_diag_sockid` holds it: network order, an IPv4 one in the first word.
fn address(ip: IpAddr) -> [u8; 16] {
    let mut a = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => a[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => a = v6.octets(),
    }
    a
}

/// The kernel's answer to `request(peer, here, seq)`.
fn answer(msg: &[u8], peer: SocketAddr, here: SocketAddr, seq: u32) -> io::Result<Peer> {
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "sock_diag: a malformed answer");
    let word = |at: usize| -> Option<u32> { Some(u32::from_ne_bytes(msg.get(at..at + 4)?.try_into().ok()?)) };
    let kind = msg.get(4..6).map(|b| u16::from_ne_bytes([b[0], b[1]])).ok_or_else(malformed)?;
    if word(8) != Some(seq) {
        return Err(malformed());
    }
    match kind {
        NLMSG_ERROR => match word(HEADER).map(|e| -(e as i32)) {
            Some(libc::ENOENT) => Ok(Peer::Elsewhere),
            Some(e) => Err(io::Error::from_raw_os_error(e)),
            None => Err(malformed()),
        },
        SOCK_DIAG_BY_FAMILY => {
            // The socket found must be the other end of ours: connected from `peer` to `here`
            // (an exact lookup falls back to a listener on `peer`'s address, which is none).
            let family = *msg.get(HEADER).ok_or_else(malformed)?;
            let state = *msg.get(HEADER + 1).ok_or_else(malformed)?;
            let id = msg.get(HEADER + 4..HEADER + 4 + SOCKID).ok_or_else(malformed)?;
            let ip = |b: &[u8]| -> Option<IpAddr> {
                match i32::from(family) {
                    libc::AF_INET => Some(IpAddr::from(<[u8; 4]>::try_from(b.get(..4)?).ok()?)),
                    libc::AF_INET6 => Some(IpAddr::from(<[u8; 16]>::try_from(b.get(..16)?).ok()?).to_canonical()),
                    _ => None,
                }
            };
            let from = ip(&id[4..20]).map(|a| SocketAddr::new(a, u16::from_be_bytes([id[0], id[1]])));
            let to = ip(&id[20..36]).map(|a| SocketAddr::new(a, u16::from_be_bytes([id[2], id[3]])));
            let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
            if state == TCP_LISTEN || from != Some(canonical(peer)) || to != Some(canonical(here)) {
                return Err(malformed());
            }
            word(UID_AT).map(|uid| Peer::Here { uid }).ok_or_else(malformed)
        }
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_connection_from_this_host_is_its_owners() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        let here = s.local_addr().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(owner(peer, here).unwrap(), Peer::Here { uid: me });
        // The listener's own end is not the peer's: asked the other way round, it is ours too,
        // and a four-tuple no socket has is elsewhere.
        assert_eq!(owner(here, peer).unwrap(), Peer::Here { uid: me });
        let nowhere: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(owner(nowhere, here).unwrap(), Peer::Elsewhere);
    }

    #[test]
    fn an_answer_about_another_socket_or_another_question_is_refused() {
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let here: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        // An answer built like the kernel's: header, then inet_diag_msg with the request's sockid.
        let req = request(peer, here, 7);
        let mut msg = req[..HEADER].to_vec();
        msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        msg.extend_from_slice(&[libc::AF_INET as u8, 1, 0, 0]);
        msg.extend_from_slice(&req[HEADER + 8..]);
        msg.extend_from_slice(&[0u8; 12]);
        msg.extend_from_slice(&1234u32.to_ne_bytes());
        msg.extend_from_slice(&[0u8; 4]);
        assert_eq!(answer(&msg, peer, here, 7).unwrap(), Peer::Here { uid: 1234 });
        assert!(answer(&msg, peer, here, 8).is_err(), "another question's answer");
        let other: SocketAddr = "127.0.0.2:40000".parse().unwrap();
        assert!(answer(&msg, other, here, 7).is_err(), "another socket's answer");
        assert!(answer(&msg, peer, other, 7).is_err(), "a socket connected elsewhere");
        assert!(answer(&msg[..UID_AT], peer, here, 7).is_err(), "cut short");
        assert!(answer(&[], peer, here, 7).is_err());
        // A listener on the peer's address (what an exact lookup falls back to) is no peer.
        let mut listening = msg.clone();
        listening[HEADER + 1] = TCP_LISTEN;
        assert!(answer(&listening, peer, here, 7).is_err(), "a listener");
        // A dual-stack socket shows its IPv4 addresses mapped.
        let mut mapped = msg.clone();
        mapped[HEADER] = libc::AF_INET6 as u8;
        let v6 = |a: SocketAddr| match a.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        mapped[HEADER + 8..HEADER + 24].copy_from_slice(&v6(peer));
        mapped[HEADER + 24..HEADER + 40].copy_from_slice(&v6(here));
        assert_eq!(answer(&mapped, peer, here, 7).unwrap(), Peer::Here { uid: 1234 });
    }
}
