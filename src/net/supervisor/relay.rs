//! The bytes of decided TCP flows, both ways: single-copy between smoltcp's socket buffers
//! and the host socket (`try_read`/`try_write` on the buffer itself), until neither side can
//! make progress; a FIN becomes a half-close and a broken side a RST on the other. Plain HTTP
//! is framed, so each request head is decided before a byte of it goes out. Which flows exist
//! and when they end is `flows.rs`; how they start is `tcp.rs`.

use super::Supervisor;
use crate::net::http1::{self, Framer};
use crate::net::peek;
use crate::netrules::matcher::{Decision, Proto};
use smoltcp::socket::tcp;
use std::io;
use std::os::fd::AsRawFd;
use std::task::{Context, Poll};
use tokio::net::TcpStream;

/// Plain-HTTP flows buffer at most this much from the jail while a head is read.
const FRAMED_BUF: usize = 64 * 1024;

impl Supervisor {
    /// Moves bytes both ways until neither side can make progress, then registers the flow's
    /// waker for what it waits on.
    pub(super) fn pump(&mut self, id: u64) {
        let Some(flow) = self.flows.get_mut(id) else { return };
        let Some(host) = flow.host.as_ref() else { return };
        let sock = self.stack.socket(flow.handle);
        let mut cx = Context::from_waker(&flow.waker);
        let mut failed = false;
        loop {
            // jail → host: first the peeked bytes, then the socket's receive buffer; on plain
            // HTTP, only what the framer decided.
            let mut progress = match flow.http.as_mut() {
                // Refused: what the jail still sends is dropped, never relayed.
                Some(_) if flow.refused_tail.is_some() => {
                    sock.can_recv() && matches!(sock.recv(|b| (b.len(), b.len())), Ok(n) if n > 0)
                }
                Some(framer) => match jail_to_host_framed(
                    framer,
                    &mut flow.pending,
                    &mut flow.approved,
                    sock,
                    host,
                    &mut cx,
                    |name| self.shared.decide(flow.key.1, Proto::Tcp, name),
                ) {
                    Ok(p) => p,
                    Err(Stop::Broken) => {
                        failed = true;
                        false
                    }
                    Err(Stop::Refused { name, check, decision }) => {
                        // A later request: the answers to the ones before it may still be on
                        // their way. The server is told the requests ended, and the refused
                        // request's 403 follows its answers, in the place its own would have had.
                        self.shared.audit.deny("tcp", Some(flow.key.1), name.as_deref(), check, &decision);
                        flow.refused_tail = Some(crate::net::forbidden_response(flow.key.1, &decision.reason));
                        flow.pending = Vec::new();
                        flow.shut_wr = true;
                        let _ = nix::sys::socket::shutdown(host.as_raw_fd(), nix::sys::socket::Shutdown::Write);
                        true
                    }
                },
                None => match jail_to_host(&mut flow.pending, sock, host, &mut cx) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::debug!(dst = %flow.key.1, "write to host failed: {e}");
                        failed = true;
                        false
                    }
                },
            };
            // host → jail, while the socket has room (else the jail's ACKs wake us).
            if !failed && !flow.host_eof && sock.can_send() {
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
                        progress = true;
                        if flow.refused_tail.is_none() {
                            sock.close();
                        }
                    }
                    Ok(Ok(_)) => progress = true,
                    Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        if let Poll::Ready(Ok(())) = host.poll_read_ready(&mut cx) {
                            progress = true;
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(dst = %flow.key.1, "read from host failed: {e}");
                        failed = true
                    }
                    Err(_) => {}
                }
            }
            // The server is done: the refused request's 403 goes last, then the jail's side closes.
            if flow.host_eof && sock.can_send() {
                if let Some(tail) = flow.refused_tail.as_mut().filter(|t| !t.is_empty()) {
                    let n = sock.send_slice(tail).unwrap_or(0);
                    tail.drain(..n);
                    if tail.is_empty() {
                        sock.close();
                    }
                    progress |= n > 0;
                }
            }
            if failed || !progress {
                break;
            }
        }
        if failed {
            // The host side reset or broke: so does the jail's.
            sock.abort();
            return;
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
fn jail_to_host(pending: &mut Vec<u8>, sock: &mut tcp::Socket, host: &TcpStream, cx: &mut Context) -> io::Result<bool> {
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
fn write_ready(host: &TcpStream, cx: &mut Context) -> bool {
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
    host: &TcpStream,
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
