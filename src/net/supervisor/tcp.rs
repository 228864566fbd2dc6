//! TCP flows of the jail from their SYN to their decision: the flow table's limits, the
//! gateway's ports (`--host-port`, DNS), dial before answering (the SYN-ACK is held back until
//! the host connected; a failed dial is a RST), the peek of hostname ports and its decision
//! (TLS SNI, HTTP Host; first bytes that hide the name are refused), and the connections
//! `--publish` brings into the jail. What is allowed is `decide.rs`; moving the bytes of a
//! decided flow is `relay.rs`.

use super::decide::refusal;
use super::dns::accept_surviving;
use super::flows::{Key, Phase};
use super::host::HostConn;
use super::{Event, Supervisor};
use crate::net::parse::http1::Framer;
use crate::net::parse::peek::{self, Peeked};
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

/// The gateway's ports for connections into the jail (`--publish`) are this one and up.
const FIRST_GATEWAY_PORT: u16 = 40000;

/// A connection being made to the host side.
pub(super) type Connecting = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;

/// A dial as it stands when `connect(2)` returned.
pub(super) enum Dial {
    /// Connected or refused already: a server on this host or behind a veth answers within the
    /// call itself, and the SYN-ACK (or the RST) goes to the jail in the same turn.
    Done(io::Result<TcpStream>),
    /// On its way; the loop hears of it as an event.
    Pending(Connecting),
}

/// How decided flows reach the host's network. The real one asks the kernel; the unit tests
/// send every dial to a loopback listener, so that the routing and flow logic run without a
/// network.
pub(super) struct Dialer {
    /// Connects to the address the flow was decided for.
    pub(super) connect: Arc<dyn Fn(SocketAddr) -> Dial + Send + Sync>,
    /// Whether the host has a route to an address (asked before a hostname port's handshake).
    pub(super) routable: fn(SocketAddr) -> bool,
}

impl Dialer {
    pub(super) fn host() -> Dialer {
        Dialer { connect: Arc::new(connect_at_once), routable }
    }

    /// The host's, where a flow to one of the session's job ports (a job's, `--job-port`)
    /// proves the session's secret and checks the listener's before it is relayed, and a flow
    /// to another jail of the session (`peer`: this jail's address and the session's
    /// registry, `net::cluster::peers`) is dialled to that jail's listener with the same proof. Without
    /// the secret neither can be made (a job frozen before there was one).
    pub(super) fn proving(
        services: Vec<SocketAddr>,
        secret: Option<crate::secret::Secret>,
        peer: Option<(Ipv4Addr, std::path::PathBuf)>,
    ) -> Dialer {
        if services.is_empty() && peer.is_none() {
            return Dialer::host();
        }
        let services = Arc::new(services);
        let peer = Arc::new(peer);
        let connect = move |target: SocketAddr| -> Dial {
            let secret = secret.clone();
            let no_secret = || io::Error::new(io::ErrorKind::PermissionDenied, "the jail has no session secret");
            if let (Some((own, registry)), IpAddr::V4(ip)) = (peer.as_ref(), target.ip()) {
                if crate::net::cluster::peers::is_peer(target.ip()) {
                    let (own, registry) = (*own, registry.clone());
                    return Dial::Pending(Box::pin(async move {
                        let secret = secret.ok_or_else(no_secret)?;
                        let at = crate::net::cluster::peers::locate(&registry, ip).await?;
                        let to = std::net::SocketAddrV4::new(ip, target.port());
                        match crate::net::cluster::peers::dial(at, &secret, own, to).await {
                            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                                // Nothing listens there: a jail killed with its cleanup.
                                let _ = tokio::task::spawn_blocking(move || {
                                    crate::net::cluster::peers::forget_stale(&registry, ip, at)
                                })
                                .await;
                                Err(e)
                            }
                            r => r,
                        }
                    }));
                }
            }
            if !services.contains(&target) {
                return connect_at_once(target);
            }
            Dial::Pending(Box::pin(async move {
                let mut stream = TcpStream::connect(target).await?;
                let secret = secret.ok_or_else(no_secret)?;
                crate::net::cluster::jobs::prove_job(&mut stream, &secret, target).await?;
                Ok(stream)
            }))
        };
        Dialer { connect: Arc::new(connect), routable }
    }
}

/// Connects to `target` without waiting, and looks once whether that already happened: on
/// loopback or a veth the handshake runs inside `connect(2)` itself, and the flow's SYN-ACK then
/// needs no task, no event and no second turn of the loop (a tenth of a connection's time when
/// the server is near). Otherwise the rest of the dial is awaited.
pub(super) fn connect_at_once(target: SocketAddr) -> Dial {
    use nix::sys::socket::{self as sock, AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6};
    use std::os::fd::{AsFd, AsRawFd};
    let family = if target.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    let fd = match sock::socket(family, SockType::Stream, SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC, None) {
        Ok(fd) => fd,
        Err(e) => return Dial::Done(Err(e.into())),
    };
    let started = match target {
        SocketAddr::V4(a) => sock::connect(fd.as_raw_fd(), &SockaddrIn::from(a)),
        SocketAddr::V6(a) => sock::connect(fd.as_raw_fd(), &SockaddrIn6::from(a)),
    };
    let connected = match started {
        Ok(()) => true,
        Err(nix::errno::Errno::EINPROGRESS) => {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
            matches!(poll(&mut fds, PollTimeout::ZERO), Ok(1))
        }
        Err(e) => return Dial::Done(Err(e.into())),
    };
    let std = std::net::TcpStream::from(fd);
    if connected {
        // Writable: connected, or refused (the error is the socket's).
        return Dial::Done(match std.take_error() {
            Ok(None) => TcpStream::from_std(std),
            Ok(Some(e)) | Err(e) => Err(e),
        });
    }
    match TcpStream::from_std(std) {
        Ok(stream) => Dial::Pending(Box::pin(async move {
            // As tokio's own connect: writable once the handshake ended, either way.
            stream.writable().await?;
            match stream.take_error()? {
                Some(e) => Err(e),
                None => Ok(stream),
            }
        })),
        Err(e) => Dial::Done(Err(e)),
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
        } else if let Some(service) = self.loopback_job_service(dst) {
            // The job's session listens on this host's loopback (a one-host cluster), which
            // the jail names at its gateway: the dialer proves the session's secret there.
            service
        } else if addr::is_gateway(dst.ip()) {
            if let Some(ep) = self.credentials.iter().find(|e| e.route.jail_port == port).cloned() {
                return self.serve_credential(src, dst, len, buffer, ep);
            }
            if !self.host_ports.contains(&port) {
                let d = refusal(&format!("the gateway serves DNS only; port {port} is not published with --host-port"));
                return self.deny_packet(len, "tcp", dst, "connect", &d);
            }
            let lo = if dst.is_ipv4() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { IpAddr::V6(Ipv6Addr::LOCALHOST) };
            SocketAddr::new(lo, port)
        } else if self.own_address.is_some() && crate::net::cluster::peers::is_peer(dst.ip()) {
            // Another jail of the session: the dialer finds it in the registry, or fails.
            dst
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

    /// A job's session listener on the host's loopback that the jail names `dst`
    /// (`jobs::seen_from_a_jail`: its gateway, at the listener's port).
    fn loopback_job_service(&self, dst: SocketAddr) -> Option<SocketAddr> {
        let services = &self.shared.job_services;
        services
            .iter()
            .copied()
            .find(|s| s.ip().is_loopback() && crate::net::cluster::jobs::seen_from_a_jail(*s) == dst)
    }

    /// A flow to a credential endpoint: served in-process over a socket pair, never dialled.
    fn serve_credential(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        len: usize,
        buffer: usize,
        ep: Arc<super::inject::Endpoint>,
    ) {
        let Ok(slot) = self.credential_slots.clone().try_acquire_owned() else {
            let d = refusal(&format!(
                "{} connections to the credential endpoints at once are the most",
                super::inject::MAX_CONNECTIONS
            ));
            return self.deny_packet(len, "tcp", dst, "limit", &d);
        };
        let Some(handle) = self.stack.accept(dst, len, true, buffer) else { return };
        let id = self.flows.add((src, dst), handle, Phase::Dialing, buffer);
        let result = tokio::net::UnixStream::pair().map(|(ours, theirs)| {
            let shared = self.shared.clone();
            tokio::spawn(async move {
                let _slot = slot;
                super::inject::serve(theirs, ep, shared).await;
            });
            HostConn::Local(ours)
        });
        let _ = self.events.send(Event::Dialed { id, result });
    }

    fn dial(&mut self, id: u64, target: SocketAddr) {
        let connect = match (self.dialer.connect)(target) {
            Dial::Done(result) => return self.on_dialed(id, result.map(HostConn::Tcp)),
            Dial::Pending(connect) => connect,
        };
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = match tokio::time::timeout(DIAL_TIMEOUT, connect).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
            };
            let _ = events.send(Event::Dialed { id, result: result.map(HostConn::Tcp) });
        });
    }

    /// The host side of a flow connected (relay from now on) or failed (RST to the jail).
    pub(super) fn on_dialed(&mut self, id: u64, result: io::Result<HostConn>) {
        let Some(flow) = self.flows.get_mut(id) else { return };
        match result {
            Ok(stream) => {
                if let HostConn::Tcp(s) = &stream {
                    let _ = s.set_nodelay(true);
                }
                flow.host = Some(stream);
                flow.phase = Phase::Relay;
                self.stack.socket(flow.handle).pause_synack(false);
            }
            Err(e) => {
                let dst = flow.key.1;
                tracing::debug!(%dst, "dial failed: {e}");
                self.stack.socket(flow.handle).abort();
                // A call to another jail of the session fails for a reason of ours (no such
                // jail, a listener without the proof): the jail's program is told by a RST,
                // the user by the audit log.
                if self.own_address.is_some() && crate::net::cluster::peers::is_peer(dst.ip()) {
                    let d = refusal(&format!("session network: {dst}: {e}"));
                    self.shared.audit.deny("tcp", Some(dst), None, "session_net", &d);
                }
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
        // The jail's loopback (tun0 routes it, see route_localnet): reaches servers bound to
        // localhost as well as to every address.
        let remote = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        self.connect_in_from(stream, remote, addr::GATEWAY_V4);
    }

    /// A connection into the jail's `remote` from the address `from` (the gateway's, or
    /// another jail's on the session network, whose programs check who calls them).
    pub(super) fn connect_in_from(&mut self, stream: TcpStream, remote: SocketAddr, from: Ipv4Addr) {
        let Ok(buffer) = self.flows.admit() else { return };
        let Some(local) = self.gateway_end(remote, from) else { return };
        let Some(handle) = self.stack.connect(remote, local, buffer) else { return };
        let _ = stream.set_nodelay(true);
        let key: Key = (remote, local);
        let id = self.flows.add(key, handle, Phase::Relay, buffer);
        if let Some(f) = self.flows.get_mut(id) {
            f.host = Some(HostConn::Tcp(stream));
        }
        self.flows.mark_dirty(id);
    }

    /// The gateway's end of a new connection into the jail's `remote`: the next port from
    /// `FIRST_GATEWAY_PORT` up, wrapping after 65535, that no open flow to `remote` uses
    /// (two flows under one key would corrupt the flow table). None: every port is in use.
    fn gateway_end(&mut self, remote: SocketAddr, from: Ipv4Addr) -> Option<SocketAddr> {
        for _ in FIRST_GATEWAY_PORT..=u16::MAX {
            self.last_gateway_port = match self.last_gateway_port {
                p if p < FIRST_GATEWAY_PORT || p == u16::MAX => FIRST_GATEWAY_PORT,
                p => p + 1,
            };
            let local = SocketAddr::new(IpAddr::V4(from), self.last_gateway_port);
            if self.flows.id_of(&(remote, local)).is_none() {
                return Some(local);
            }
        }
        None
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
            Peeked::Unknown if self.shared.rules.has_name_rules() && !peek::nameless_may_pass(&flow.pending) => {
                self.refuse_unreadable(id, peek::NAMELESS)
            }
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

#[cfg(test)]
mod tests {
    use super::super::flows::Phase;
    use super::super::testing::*;
    use super::super::Event;
    use super::{connect_at_once, Dial};
    use crate::netrules::matcher::Action;
    use smoltcp::wire::TcpControl;
    use std::io;
    use std::io::Write;

    const SNI_HELLO: &[u8] = include_bytes!("../../../tests/fixtures/clienthello-sni.bin");

    fn phase(rig: &Rig, from: std::net::SocketAddr, to: std::net::SocketAddr) -> Option<&Phase> {
        let id = rig.sup.flows.id_of(&(from, to))?;
        rig.sup.flows.get(id).map(|f| &f.phase)
    }

    #[test]
    fn syn_to_a_floored_port_gets_rst_at_once_and_an_audited_denial() {
        let mut rig = Rig::new(&[]);
        for (from, to) in [(jail(40000), sa("198.51.100.7:25")), (jail6(40001), sa("[2001:db8::7]:25"))] {
            rig.send(&syn(from, to));
            let segs = rig.segments();
            assert!(segs.len() == 1 && segs[0].rst && segs[0].src == to, "{segs:?}");
            assert!(rig.sup.flows.id_of(&(from, to)).is_none());
        }
        let denials = rig.denials();
        assert_eq!(denials.len(), 2, "{denials:?}");
        assert!(denials.iter().all(|d| d.check.as_deref() == Some("connect") && d.layer.as_deref() == Some("floor")));
        assert_eq!(denials[1].dest.as_deref(), Some("[2001:db8::7]:25"));
        assert!(rig.dialled.lock().unwrap().is_empty(), "a floored port is never dialled");
    }

    #[test]
    fn syn_to_a_gateway_port_not_published_gets_rst() {
        let mut rig = Rig::new(&[]);
        rig.send(&syn(jail(40000), gateway(9999)));
        assert!(rig.segments().iter().any(|s| s.rst));
        let d = rig.denials();
        assert!(d[0].reason.as_deref().unwrap_or("").contains("--host-port"), "{d:?}");
    }

    #[test]
    fn a_jobs_session_listening_on_loopback_is_dialled_where_the_jail_names_it_at_the_gateway() {
        // A one-host cluster: the session's job port is on the host's 127.0.0.1, which the
        // job's jail names at its gateway (its own 127.0.0.1 is its own).
        let mut rig = Rig::new(&[]);
        let service = sa("127.0.0.1:41234");
        std::sync::Arc::get_mut(&mut rig.sup.shared).expect("the supervisor's alone").job_services = vec![service];
        rig.send(&syn(jail(40000), gateway(41234)));
        assert_eq!(*rig.dialled.lock().unwrap(), [service], "the session's listener");
        // Nothing next to it: another gateway port is refused as before.
        rig.send(&syn(jail(40001), gateway(41235)));
        assert!(rig.segments().iter().any(|s| s.rst));
        assert_eq!(rig.dialled.lock().unwrap().len(), 1);
    }

    #[test]
    fn an_allowed_syn_is_answered_only_after_the_host_connected() {
        let mut rig = Rig::new(&[]);
        let ((from, to), _) = rig.open_to_host();
        assert!(rig.segments().is_empty(), "no SYN-ACK before the host side connected");
        assert_eq!(phase(&rig, from, to), Some(&Phase::Dialing));
        assert_eq!(
            *rig.dialled.lock().unwrap(),
            [sa(&format!("127.0.0.1:{HOST_PORT}"))],
            "the gateway is host loopback"
        );
        let ev = rig.next_event();
        assert!(matches!(ev, Event::Dialed { result: Ok(_), .. }));
        rig.deliver(ev);
        assert_eq!(phase(&rig, from, to), Some(&Phase::Relay));
        let segs = rig.segments();
        assert!(segs.len() == 1 && segs[0].syn && segs[0].ack_flag && segs[0].ack == JAIL_ISN + 1, "{segs:?}");
    }

    #[test]
    fn a_dial_done_at_once_answers_the_syn_in_the_same_turn() {
        let mut rig = Rig::at_once(&[]);
        let ((from, to), _) = rig.open_to_host();
        assert_eq!(phase(&rig, from, to), Some(&Phase::Relay), "no event to wait for");
        let segs = rig.segments();
        assert!(segs.len() == 1 && segs[0].syn && segs[0].ack_flag && segs[0].ack == JAIL_ISN + 1, "{segs:?}");
    }

    #[test]
    fn connecting_at_once_to_a_local_server_is_done_or_awaited_and_a_refusal_is_an_error() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let settle = |d: Dial| match d {
            Dial::Done(r) => r,
            Dial::Pending(p) => rt.block_on(p),
        };
        let stream = settle(rt.block_on(async { connect_at_once(to) })).expect("connected");
        let (accepted, peer) = listener.accept().unwrap();
        assert_eq!(stream.local_addr().unwrap(), peer, "the listener's connection is this one");
        drop(accepted);
        drop(listener);
        let refused = settle(rt.block_on(async { connect_at_once(to) }));
        assert_eq!(refused.map(|_| ()).unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_failed_dial_resets_the_jails_connection_and_frees_the_flow() {
        let mut rig = Rig::new(&[]);
        let (_, id) = rig.open_to_host();
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        rig.deliver(Event::Dialed { id, result: Err(refused) });
        let segs = rig.segments();
        assert!(segs.iter().any(|s| s.rst) && !segs.iter().any(|s| s.syn), "{segs:?}");
        assert!(rig.sup.flows.get(id).is_none(), "reaped once the RST is out");
    }

    #[test]
    fn a_hostname_port_flow_peeks_then_dials_the_checked_address_then_relays() {
        let mut rig = Rig::new(&[("*", Action::Block), ("allowed.test", Action::Allow)]);
        let (from, to) = (jail(40000), sa("198.51.100.7:80"));
        rig.sup.shared.names.lock().unwrap().learn("allowed.test", to.ip(), 60, std::time::Instant::now());
        rig.send(&syn(from, to));
        assert_eq!(phase(&rig, from, to), Some(&Phase::Peeking));
        // The handshake completes before the name is known.
        let synack = rig.handshake(from, to);
        assert!(rig.dialled.lock().unwrap().is_empty(), "nothing is dialled before the name is read");
        let request = b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n";
        rig.send_data(&synack, 0, request, TcpControl::Psh);
        assert_eq!(phase(&rig, from, to), Some(&Phase::Dialing));
        assert_eq!(*rig.dialled.lock().unwrap(), [to], "the address that was checked");
        let ev = rig.next_event();
        rig.deliver(ev);
        assert_eq!(phase(&rig, from, to), Some(&Phase::Relay));
        let (mut server, _) = rig.host.accept().unwrap();
        let got = read_host(&mut rig, &mut server, request.len());
        assert_eq!(got, request, "the peeked bytes reach the host first");
        server.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
        let mut answer = vec![];
        rig.settle_until(|rig| {
            answer.extend(rig.segments().into_iter().flat_map(|s| s.payload));
            !answer.is_empty()
        });
        assert_eq!(answer, b"HTTP/1.1 204 No Content\r\n\r\n");
    }

    #[test]
    fn a_forged_sni_for_an_address_known_under_another_name_is_reset() {
        // The ClientHello names api.example.org, allowed; the address is another name's.
        let mut rig = Rig::new(&[("*", Action::Block), ("api.example.org", Action::Allow)]);
        let (from, to) = (jail(40000), sa("198.51.100.7:443"));
        rig.sup.shared.names.lock().unwrap().learn("blocked.test", to.ip(), 60, std::time::Instant::now());
        let synack = rig.handshake(from, to);
        rig.send_data(&synack, 0, SNI_HELLO, TcpControl::Psh);
        assert!(rig.segments().iter().any(|s| s.rst), "reset");
        assert!(rig.dialled.lock().unwrap().is_empty(), "never dialled");
        let d = rig.denials();
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!((d[0].check.as_deref(), d[0].name.as_deref()), (Some("sni"), Some("api.example.org")));
        assert!(d[0].reason.as_deref().unwrap_or("").contains("was not resolved to 198.51.100.7"), "{d:?}");
        assert!(rig.sup.flows.id_of(&(from, to)).is_none(), "reaped");
    }

    #[test]
    fn plain_http_to_a_blocked_name_gets_a_403_with_the_reason() {
        let mut rig = Rig::new(&[("blocked.test", Action::Block)]);
        let (from, to) = (jail(40000), sa("198.51.100.7:80"));
        let synack = rig.handshake(from, to);
        rig.send_data(&synack, 0, b"GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n", TcpControl::Psh);
        let segs = rig.segments();
        let body: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
        let body = String::from_utf8_lossy(&body);
        assert!(body.starts_with("HTTP/1.1 403 Forbidden") && body.contains("blocked.test"), "{body}");
        assert!(segs.iter().any(|s| s.fin) && !segs.iter().any(|s| s.rst), "closed, not reset: {segs:?}");
        assert_eq!(rig.denials()[0].check.as_deref(), Some("http-host"));
    }

    #[test]
    fn a_silent_hostname_port_flow_is_decided_on_its_address_at_the_timeout() {
        let mut rig = Rig::new(&[]);
        let (from, to) = (jail(40000), sa("198.51.100.7:443"));
        rig.handshake(from, to);
        let id = rig.sup.flows.id_of(&(from, to)).expect("a flow");
        rig.deliver(Event::PeekTimeout { id });
        assert_eq!(phase(&rig, from, to), Some(&Phase::Dialing));
        assert_eq!(*rig.dialled.lock().unwrap(), [to]);
    }

    #[test]
    fn a_published_port_connects_into_the_jails_loopback_from_the_gateway() {
        let mut rig = Rig::new(&[]);
        let _client = rig.publish(3000);
        let segs = rig.segments();
        assert!(segs.len() == 1 && segs[0].syn && !segs[0].ack_flag, "{segs:?}");
        assert_eq!(segs[0].dst, sa("127.0.0.1:3000"));
        assert_eq!(segs[0].src, gateway(40000));
    }

    #[test]
    fn the_gateway_port_of_a_published_connection_wraps_past_65535_and_skips_open_flows() {
        let mut rig = Rig::new(&[]);
        let _first = rig.publish(3000);
        assert_eq!(rig.segments()[0].src, gateway(40000));
        rig.sup.last_gateway_port = u16::MAX;
        let _second = rig.publish(3000);
        let segs = rig.segments();
        assert_eq!(segs.len(), 1, "{segs:?}");
        assert_eq!(segs[0].src, gateway(40001), "40000 is still the first connection's");
        assert!(rig.sup.flows.id_of(&(sa("127.0.0.1:3000"), gateway(40000))).is_some());
    }
}
