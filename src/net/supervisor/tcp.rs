//! TCP flows of the jail from their SYN to their decision: the flow table's limits, the
//! gateway's ports (`--host-port`, DNS), dial before answering (the SYN-ACK is held back until
//! the host connected; a failed dial is a RST), the peek of hostname ports and its decision
//! (TLS SNI, HTTP Host; first bytes that hide the name are refused), and the connections
//! `--publish` brings into the jail. What is allowed is `decide.rs`; moving the bytes of a
//! decided flow is `relay.rs`.

use super::decide::refusal;
use super::dns::accept_surviving;
use super::flows::{Key, Phase};
use super::{Event, Supervisor};
use crate::net::http1::Framer;
use crate::net::peek::{self, Peeked};
use crate::netrules::addr;
use crate::netrules::matcher::{Destination, Layer, Proto};
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedSender;

const DIAL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a flow to a hostname port may stay silent before it is decided without a name
/// (server-speaks-first protocols).
const PEEK_TIMEOUT: Duration = Duration::from_secs(3);

/// A connection being made to the host side.
pub(super) type Connecting = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;

/// How decided flows reach the host's network. The real one asks the kernel; the unit tests
/// send every dial to a loopback listener, so that the routing and flow logic run without a
/// network.
pub(super) struct Dialer {
    /// Connects to the address the flow was decided for.
    pub(super) connect: Arc<dyn Fn(SocketAddr) -> Connecting + Send + Sync>,
    /// Whether the host has a route to an address (asked before a hostname port's handshake).
    pub(super) routable: fn(SocketAddr) -> bool,
}

impl Dialer {
    pub(super) fn host() -> Dialer {
        Dialer { connect: Arc::new(|target| Box::pin(TcpStream::connect(target))), routable }
    }
}

/// Whether the host has a route to `dst`: connecting a UDP socket sends nothing and fails at
/// once without one (ENETUNREACH, or EADDRNOTAVAIL for a family the host has no address of).
fn routable(dst: SocketAddr) -> bool {
    let any: SocketAddr =
        if dst.is_ipv4() { (Ipv4Addr::UNSPECIFIED, 0).into() } else { (Ipv6Addr::UNSPECIFIED, 0).into() };
    match std::net::UdpSocket::bind(any).and_then(|s| s.connect(dst)) {
        Ok(()) => true,
        Err(e) => !matches!(
            e.raw_os_error(),
            Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) | Some(libc::EADDRNOTAVAIL) | Some(libc::EAFNOSUPPORT)
        ),
    }
}

/// Serves `--publish`: each port listens on host loopback, and every connection to it is
/// handed to the loop (`Event::Published`), which connects into the jail.
pub(super) async fn listen_published(ports: &[u16], events: &UnboundedSender<Event>) {
    for port in ports {
        match tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, *port)).await {
            Ok(l) => {
                let (events, port) = (events.clone(), *port);
                tokio::spawn(async move {
                    loop {
                        let Some(stream) = accept_surviving(&l).await else { continue };
                        if events.send(Event::Published { stream, port }).is_err() {
                            return;
                        }
                    }
                });
            }
            Err(e) => eprintln!("agent-sandbox: warning: cannot publish port {port} on 127.0.0.1: {e}"),
        }
    }
}

impl Supervisor {
    /// A SYN of no flow (the packet last read, `len` bytes): refused at once, a flow that
    /// peeks first (hostname ports), or a flow dialled before its SYN-ACK.
    pub(super) fn on_syn(&mut self, src: SocketAddr, dst: SocketAddr, len: usize) {
        let buffer = match self.flows.admit() {
            Ok(buffer) => buffer,
            Err(d) => return self.deny_packet(len, "tcp", dst, "limit", &d),
        };
        let port = dst.port();
        // DNS over TCP, to the gateway or to any server the jail names: our resolver.
        let target = if port == 53 {
            self.dns_tcp
        } else if addr::is_gateway(dst.ip()) {
            if !self.host_ports.contains(&port) {
                let d = refusal(&format!("the gateway serves DNS only; port {port} is not published with --host-port"));
                return self.deny_packet(len, "tcp", dst, "connect", &d);
            }
            let lo = if dst.is_ipv4() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { IpAddr::V6(Ipv6Addr::LOCALHOST) };
            SocketAddr::new(lo, port)
        } else if self.hostname_ports.contains(&port) {
            // Decided on the name its first bytes show: complete the handshake, then read.
            let floor =
                self.shared.rules.decide(&Destination { ip: Some(dst.ip()), name: None, port, proto: Proto::Tcp });
            if !floor.allowed && floor.layer == Layer::Floor {
                return self.deny_packet(len, "tcp", dst, "connect", &floor);
            }
            // The handshake completes before the name is known, so a dial that fails later
            // would reset a connection the client believed open, and it would not try the
            // name's other address. A host without an IPv6 route (most containers) answers
            // an AAAA address at once instead: the client falls back to IPv4 as usual.
            if !(self.dialer.routable)(dst) {
                tracing::debug!(%dst, "no route from the host: refused before the handshake");
                self.stack.ingest(len);
                return;
            }
            let Some(handle) = self.stack.accept(dst, len, false, buffer) else { return };
            let id = self.flows.add((src, dst), handle, Phase::Peeking, buffer);
            let events = self.events.clone();
            tokio::spawn(async move {
                tokio::time::sleep(PEEK_TIMEOUT).await;
                let _ = events.send(Event::PeekTimeout { id });
            });
            return;
        } else {
            let d = self.shared.decide(dst, Proto::Tcp, None);
            if !d.allowed {
                return self.deny_packet(len, "tcp", dst, "connect", &d);
            }
            dst
        };
        let Some(handle) = self.stack.accept(dst, len, true, buffer) else { return };
        let id = self.flows.add((src, dst), handle, Phase::Dialing, buffer);
        self.dial(id, target);
    }

    fn dial(&self, id: u64, target: SocketAddr) {
        let events = self.events.clone();
        let connect = (self.dialer.connect)(target);
        tokio::spawn(async move {
            let result = match tokio::time::timeout(DIAL_TIMEOUT, connect).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
            };
            let _ = events.send(Event::Dialed { id, result });
        });
    }

    /// The host side of a flow connected (relay from now on) or failed (RST to the jail).
    pub(super) fn on_dialed(&mut self, id: u64, result: io::Result<TcpStream>) {
        let Some(flow) = self.flows.get_mut(id) else { return };
        match result {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                flow.host = Some(stream);
                flow.phase = Phase::Relay;
                self.stack.socket(flow.handle).pause_synack(false);
            }
            Err(e) => {
                tracing::debug!(dst = %flow.key.1, "dial failed: {e}");
                self.stack.socket(flow.handle).abort();
            }
        }
        self.flows.mark_dirty(id);
    }

    /// A hostname port's flow stayed silent: decided without a name, unless what it sent
    /// so far hides one.
    pub(super) fn on_peek_timeout(&mut self, id: u64) {
        let Some(flow) = self.flows.get(id).filter(|f| f.phase == Phase::Peeking) else { return };
        // Silence has no name; a prefix that never completed hides one.
        match peek::timed_out(&flow.pending) {
            Peeked::Unreadable(what) => self.refuse_unreadable(id, what),
            _ => self.decide_peeked(id, None, false),
        }
        self.flows.mark_dirty(id);
    }

    /// A published port: the gateway connects to the jail's port, and the host connection
    /// is relayed to it once established (a refused connect closes it).
    pub(super) fn connect_in(&mut self, stream: TcpStream, port: u16) {
        let Ok(buffer) = self.flows.admit() else { return };
        self.next_ephemeral = if self.next_ephemeral < 40000 { 40000 } else { self.next_ephemeral + 1 };
        let local = SocketAddr::new(IpAddr::V4(addr::GATEWAY_V4), self.next_ephemeral);
        // The jail's loopback (tun0 routes it, see route_localnet): reaches servers bound to
        // localhost as well as to every address.
        let remote = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let Some(handle) = self.stack.connect(remote, local, buffer) else { return };
        let _ = stream.set_nodelay(true);
        let key: Key = (remote, local);
        let id = self.flows.add(key, handle, Phase::Relay, buffer);
        if let Some(f) = self.flows.get_mut(id) {
            f.host = Some(stream);
        }
        self.flows.mark_dirty(id);
    }

    /// Reads a peeking flow's first bytes and decides it once they show a name (or none).
    pub(super) fn service_peek(&mut self, id: u64) {
        let Some(flow) = self.flows.get_mut(id) else { return };
        let sock = self.stack.socket(flow.handle);
        while sock.can_recv() && flow.pending.len() < peek::MAX_PEEK {
            let room = peek::MAX_PEEK - flow.pending.len();
            let _ = sock.recv(|b| {
                let n = b.len().min(room);
                flow.pending.extend_from_slice(&b[..n]);
                (n, ())
            });
        }
        let closed = super::relay::jail_sent_fin(sock);
        let peeked = if closed { peek::timed_out(&flow.pending) } else { peek::peek(&flow.pending) };
        match peeked {
            Peeked::NeedMore => {}
            Peeked::Unknown => self.decide_peeked(id, None, false),
            Peeked::Tls { sni } => self.decide_peeked(id, sni, false),
            Peeked::Http { host } => self.decide_peeked(id, host, true),
            Peeked::Unreadable(what) => self.refuse_unreadable(id, what),
        }
    }

    /// TLS or HTTP that hides its name: refused like a blocked name, never decided on the
    /// address alone.
    fn refuse_unreadable(&mut self, id: u64, what: &'static str) {
        let Some(flow) = self.flows.get(id) else { return };
        let d = peek::unreadable(what);
        self.shared.audit.deny("tcp", Some(flow.key.1), None, "peek", &d);
        self.refuse_peeked(id, &d.reason, what.starts_with("HTTP"));
    }

    fn decide_peeked(&mut self, id: u64, name: Option<String>, http: bool) {
        let Some(flow) = self.flows.get_mut(id) else { return };
        let dst = flow.key.1;
        let d = self.shared.decide(dst, Proto::Tcp, name.as_deref());
        if d.allowed {
            if http {
                // Every later request head is decided too: the framer reads them all,
                // starting again from the first (decided again, the same way).
                flow.http = Some(Framer::default());
            }
            flow.phase = Phase::Dialing;
            self.dial(id, dst);
            return;
        }
        let check = if http {
            "http-host"
        } else if name.is_some() {
            "sni"
        } else {
            "connect"
        };
        self.shared.audit.deny("tcp", Some(dst), name.as_deref(), check, &d);
        self.refuse_peeked(id, &d.reason, http);
    }

    /// Ends a peeked flow that was refused: plain HTTP gets a 403 carrying the reason (one
    /// line an agent can act on), anything else a RST.
    fn refuse_peeked(&mut self, id: u64, reason: &str, http: bool) {
        let Some(flow) = self.flows.get_mut(id) else { return };
        let sock = self.stack.socket(flow.handle);
        if http {
            let _ = sock.send_slice(&crate::net::forbidden_response(flow.key.1, reason));
            sock.close();
        } else {
            sock.abort();
        }
        flow.phase = Phase::Dialing; // no host will come: the socket closes and is reaped
    }
}
