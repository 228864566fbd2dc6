//! The bytes of decided TCP flows, both ways: single-copy between smoltcp's socket buffers
//! and the host socket (`try_read`/`try_write` on the buffer itself), until neither side can
//! make progress; a FIN becomes a half-close and a broken side a RST on the other. Plain HTTP
//! is framed, so each request head is decided before a byte of it goes out. Which flows exist
//! and when they end is `flows.rs`; how they start is `tcp.rs`.

use super::flows::TcpFlow;
use super::host::HostConn;
use super::Supervisor;
use crate::net::parse::http1::{self, Framer};
use crate::net::parse::peek;
use crate::netrules::matcher::{Decision, Proto};
use smoltcp::socket::tcp;
use std::io;
use std::os::fd::AsRawFd;
use std::task::{Context, Poll};

/// Plain-HTTP flows buffer at most this much from the jail while a head is read.
const FRAMED_BUF: usize = 64 * 1024;

impl Supervisor {
    /// Moves bytes both ways until neither side can make progress, then registers the flow's
    /// waker for what it waits on.
    pub(super) fn pump(&mut self, id: u64) {
        let Some(flow) = self.flows.get_mut(id) else { return };
        // Out of the flow for the call, so the steps can take the flow whole beside it.
        let Some(host) = flow.host.take() else { return };
        let sock = self.stack.socket(flow.handle);
        pump_flow(flow, &host, sock, &self.shared);
        flow.host = Some(host);
    }
}

/// The side of a flow that broke: the other side is reset.
struct Broken;

fn pump_flow(flow: &mut TcpFlow, host: &HostConn, sock: &mut tcp::Socket, shared: &super::decide::Shared) {
    loop {
        let step = jail_to_host_step(flow, host, sock, shared).and_then(|sent| {
            let got = host_to_jail_step(flow, host, sock)?;
            Ok(sent | got | refused_tail_step(flow, sock))
        });
        match step {
            Ok(true) => {}
            Ok(false) => break,
            Err(Broken) => {
                // The host side reset or broke: so does the jail's.
                sock.abort();
                return;
            }
        }
    }
    // The jail closed its sending side and everything it sent is out: half-close the host.
    // A request head cut short by the FIN was never decided, so it never goes.
    if !flow.shut_wr && jail_sent_fin(sock) && sock.recv_queue() == 0 && flow.approved == 0 {
        let cut_short = flow.http.as_mut().is_some_and(|f| f.step(&flow.pending) == http1::Step::NeedMore);
        if cut_short {
            flow.pending.clear();
        }
        if flow.pending.is_empty() {
            flow.shut_wr = true;
            let _ = nix::sys::socket::shutdown(host.as_raw_fd(), nix::sys::socket::Shutdown::Write);
        }
    }
}

/// jail → host: first the peeked bytes, then the socket's receive buffer; on plain HTTP, only
/// what the framer decided. Whether anything moved.
fn jail_to_host_step(
    flow: &mut TcpFlow,
    host: &HostConn,
    sock: &mut tcp::Socket,
    shared: &super::decide::Shared,
) -> Result<bool, Broken> {
    let mut cx = Context::from_waker(&flow.waker);
    match flow.http.as_mut() {
        // Refused: what the jail still sends is dropped, never relayed.
        Some(_) if flow.refused_tail.is_some() => {
            Ok(sock.can_recv() && matches!(sock.recv(|b| (b.len(), b.len())), Ok(n) if n > 0))
        }
        Some(framer) => {
            let dst = flow.key.1;
            match jail_to_host_framed(framer, &mut flow.pending, &mut flow.approved, sock, host, &mut cx, |name| {
                shared.decide(dst, Proto::Tcp, name)
            }) {
                Ok(p) => Ok(p),
                Err(Stop::Broken) => Err(Broken),
                Err(Stop::Refused { name, check, decision }) => {
                    // A later request: the answers to the ones before it may still be on
                    // their way. The server is told the requests ended, and the refused
                    // request's 403 follows its answers, in the place its own would have had.
                    shared.audit.deny("tcp", Some(dst), name.as_deref(), check, &decision);
                    flow.refused_tail = Some(crate::net::forbidden_response(dst, &decision.reason));
                    flow.pending = Vec::new();
                    flow.shut_wr = true;
                    let _ = nix::sys::socket::shutdown(host.as_raw_fd(), nix::sys::socket::Shutdown::Write);
                    Ok(true)
                }
            }
        }
        None => jail_to_host(&mut flow.pending, sock, host, &mut cx).map_err(|e| {
            tracing::debug!(dst = %flow.key.1, "write to host failed: {e}");
            Broken
        }),
    }
}

/// host → jail, while the socket has room (else the jail's ACKs wake us). Whether anything
/// moved.
fn host_to_jail_step(flow: &mut TcpFlow, host: &HostConn, sock: &mut tcp::Socket) -> Result<bool, Broken> {
    if flow.host_eof || !sock.can_send() {
        return Ok(false);
    }
    let mut cx = Context::from_waker(&flow.waker);
    let framer = &mut flow.http;
    match sock.send(|b| match host.try_read(b) {
        Ok(n) => {
            // The server's answer to an upgrade decides what the jail's next bytes are.
            let read = match framer.as_mut().filter(|f| f.awaits_response()) {
                Some(f) => f.response(&b[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
                None => Ok(()),
            };
            (n, read.map(|()| n))
        }
        Err(e) => (0, Err(e)),
    }) {
        Ok(Ok(0)) => {
            flow.host_eof = true;
            if flow.refused_tail.is_none() {
                sock.close();
            }
            Ok(true)
        }
        Ok(Ok(_)) => Ok(true),
        Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {
            Ok(matches!(host.poll_read_ready(&mut cx), Poll::Ready(Ok(()))))
        }
        Ok(Err(e)) => {
            tracing::debug!(dst = %flow.key.1, "read from host failed: {e}");
            Err(Broken)
        }
        Err(_) => Ok(false),
    }
}

/// The server is done: the refused request's 403 goes last, then the jail's side closes.
/// Whether any of it went.
fn refused_tail_step(flow: &mut TcpFlow, sock: &mut tcp::Socket) -> bool {
    if !flow.host_eof || !sock.can_send() {
        return false;
    }
    let Some(tail) = flow.refused_tail.as_mut().filter(|t| !t.is_empty()) else { return false };
    let n = sock.send_slice(tail).unwrap_or(0);
    tail.drain(..n);
    if tail.is_empty() {
        sock.close();
    }
    n > 0
}

/// Has the jail closed its sending side? (`!may_recv()` is also true before the handshake
/// completes, which is not a FIN.)
pub(super) fn jail_sent_fin(sock: &tcp::Socket) -> bool {
    use tcp::State::*;
    matches!(sock.state(), CloseWait | LastAck | Closing | TimeWait | Closed)
}

/// Why a plain-HTTP flow stops relaying.
enum Stop {
    /// The host connection broke.
    Broken,
    /// A request the jail sent was refused (or cannot be framed): audit, then end the flow.
    Refused { name: Option<String>, check: &'static str, decision: Decision },
}

/// One round of jail → host for a flow decided on its first bytes: the peeked bytes, then the
/// socket's receive buffer, written straight from smoltcp's buffer. Ok(progress).
fn jail_to_host(pending: &mut Vec<u8>, sock: &mut tcp::Socket, host: &HostConn, cx: &mut Context) -> io::Result<bool> {
    if !pending.is_empty() {
        return match host.try_write(pending) {
            Ok(n) => {
                pending.drain(..n);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(write_ready(host, cx)),
            Err(e) => Err(e),
        };
    }
    if !sock.can_recv() {
        return Ok(false);
    }
    match sock.recv(|b| match host.try_write(b) {
        Ok(n) => (n, Ok(n)),
        Err(e) => (0, Err(e)),
    }) {
        Ok(Ok(n)) => Ok(n > 0),
        Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(write_ready(host, cx)),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(false),
    }
}

/// After a write that would block: whether the host socket became writable meanwhile (try
/// again now), else the flow's waker is registered for it.
fn write_ready(host: &HostConn, cx: &mut Context) -> bool {
    matches!(host.poll_write_ready(cx), Poll::Ready(Ok(())))
}

/// One round of jail → host for plain HTTP: the jail's bytes wait in `pending` until the
/// framer places them; each request head is decided (`decide`) before a byte of it goes, and
/// `approved` counts the decided bytes at the front. Ok(progress).
fn jail_to_host_framed(
    framer: &mut Framer,
    pending: &mut Vec<u8>,
    approved: &mut usize,
    sock: &mut tcp::Socket,
    host: &HostConn,
    cx: &mut Context,
    decide: impl Fn(Option<&str>) -> Decision,
) -> Result<bool, Stop> {
    if *approved > 0 {
        return match host.try_write(&pending[..*approved]) {
            Ok(n) => {
                pending.drain(..n);
                *approved -= n;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(write_ready(host, cx)),
            Err(_) => Err(Stop::Broken),
        };
    }
    let mut progress = false;
    while pending.len() < FRAMED_BUF && sock.can_recv() {
        let room = FRAMED_BUF - pending.len();
        match sock.recv(|b| {
            let n = b.len().min(room);
            pending.extend_from_slice(&b[..n]);
            (n, n)
        }) {
            Ok(n) if n > 0 => progress = true,
            _ => break,
        }
    }
    match framer.step(pending) {
        http1::Step::Forward(n) => {
            *approved = n;
            Ok(true)
        }
        http1::Step::Decide(head) => {
            let d = decide(head.host.as_deref());
            if !d.allowed {
                return Err(Stop::Refused { name: head.host, check: "http-host", decision: d });
            }
            framer.accept(&head);
            *approved = head.len;
            Ok(true)
        }
        http1::Step::NeedMore | http1::Step::Hold => Ok(progress),
        http1::Step::Refuse(what) => Err(Stop::Refused { name: None, check: "peek", decision: peek::unreadable(what) }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use smoltcp::wire::{IpListenEndpoint, TcpControl};
    use std::io::Write;
    use std::net::{Shutdown, SocketAddr};

    /// A relayed flow from the jail to `HOST_PORT` on the gateway: the rig, the jail's key,
    /// the host's end, and the supervisor's SYN-ACK.
    fn relayed() -> (Rig, (SocketAddr, SocketAddr), std::net::TcpStream, Segment) {
        let mut rig = Rig::new(&[]);
        let (key, _) = rig.open_to_host();
        let ev = rig.next_event();
        rig.deliver(ev);
        let synack = rig.handshake(key.0, key.1);
        let (server, _) = rig.host.accept().expect("the dialled connection");
        (rig, key, server, synack)
    }

    #[test]
    fn a_fin_from_the_jail_half_closes_the_host_and_answers_still_come_back() {
        let (mut rig, key, mut server, synack) = relayed();
        rig.send_data(&synack, 0, b"request", TcpControl::Fin);
        let id = rig.sup.flows.id_of(&key).expect("the flow");
        assert!(rig.settle_until(|rig| rig.sup.flows.get(id).is_some_and(|f| f.shut_wr)), "host half-closed");
        let handle = rig.sup.flows.get(id).expect("the flow").handle;
        assert!(jail_sent_fin(rig.sup.stack.socket(handle)));
        // The host got the bytes, then EOF.
        let got = read_host(&mut rig, &mut server, usize::MAX);
        assert_eq!(got, b"request");
        // The answer still flows back, then the host's FIN.
        server.write_all(b"answer").unwrap();
        server.shutdown(Shutdown::Write).unwrap();
        let mut segs = vec![];
        rig.settle_until(|rig| {
            segs.extend(rig.segments());
            segs.iter().any(|s| s.fin)
        });
        let answer: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
        assert_eq!(answer, b"answer");
        assert!(!segs.iter().any(|s| s.rst), "{segs:?}");
        // The jail acknowledges the FIN: the flow is done, and reaped.
        let last = segs.iter().rfind(|s| s.fin).expect("FIN").clone();
        rig.send_data(&last, b"request".len() as u32 + 1, &[], TcpControl::None);
        assert!(rig.sup.flows.get(id).is_none(), "reaped after both FINs");
        assert_eq!(rig.sup.flows.id_of(&key), None);
    }

    #[test]
    fn a_host_that_resets_resets_the_jails_connection() {
        let (mut rig, key, server, _) = relayed();
        let id = rig.sup.flows.id_of(&key).expect("the flow");
        nix::sys::socket::setsockopt(
            &server,
            nix::sys::socket::sockopt::Linger,
            &libc::linger { l_onoff: 1, l_linger: 0 },
        )
        .unwrap();
        drop(server);
        let mut segs = vec![];
        rig.settle_until(|rig| {
            segs.extend(rig.segments());
            segs.iter().any(|s| s.rst)
        });
        assert!(segs.iter().any(|s| s.rst && s.dst == key.0), "{segs:?}");
        assert!(rig.sup.flows.get(id).is_none(), "reaped");
    }

    #[test]
    fn a_socket_before_its_handshake_has_not_seen_a_fin() {
        let mut sock = tcp::Socket::new(tcp::SocketBuffer::new(vec![0; 64]), tcp::SocketBuffer::new(vec![0; 64]));
        sock.listen(IpListenEndpoint { addr: None, port: 80 }).unwrap();
        assert!(!sock.may_recv(), "may_recv() alone would take this for a FIN");
        assert!(!jail_sent_fin(&sock));
    }
}
