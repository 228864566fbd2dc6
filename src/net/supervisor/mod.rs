//! The network supervisor of `filtered` mode: one thread outside the jail running a
//! current-thread tokio loop over the tun fd the jail's init handed out. This file starts it
//! and routes: each packet the jail sends goes to the part that decides it (`tcp`, `udp`,
//! `icmp`, `dns`), each report of async work (a dial, a peek's timeout, an answer, a published
//! port's connection) back to its flow, and each ready flow to `tcp` (peeking) or `relay`.
//! It decides nothing itself. The jail never has a route to the host's network: every byte it
//! gets out, this loop wrote to a host socket.

mod decide;
mod dns;
mod flows;
mod host;
mod icmp;
pub mod inject;
mod pending;
mod relay;
mod services;
mod session_net;
mod tcp;
mod teardown;
#[cfg(test)]
mod testing;
mod udp;

use crate::net::audit::Auditor;
pub use flows::MAX_TCP_FLOWS;
pub use teardown::defer_teardown;

use crate::net::dns::NameCache;
use crate::net::packet::{self, Summary};
use crate::net::stack::Stack;
use crate::net::udp as host_udp;
use crate::netrules::matcher::Decision;
use decide::Shared;
use flows::{FlowTable, Phase};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcp::Dialer;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

/// Packets read from tun0 per wakeup before the loop looks at other work.
const READ_BATCH: usize = 256;

/// What the `filtered` supervisor serves a session with: what the proxies take too (`common`),
/// and what only a jail behind the tun device has.
pub struct NetConfig {
    pub common: crate::net::config::Common,
    /// Host loopback ports the jail reaches through the gateway address (`--host-port`).
    pub host_ports: Vec<u16>,
    /// Jail ports served on host loopback (`--publish`).
    pub publish: Vec<u16>,
    /// The credential endpoints on the gateway (`inject.rs`).
    pub credentials: Vec<Arc<inject::Endpoint>>,
    /// The session's listeners for its own jobs (`--job-port`), served here.
    pub jobs: Option<crate::net::cluster::jobs::JobServices>,
    /// A job's: its session's listeners, which it may reach (`--job-port`).
    pub job_services: Vec<SocketAddr>,
    /// The secret a job's flows to them prove (`net::cluster::jobs::prove_job`), and every jail of
    /// the session proves to the others (`net::cluster::peers`).
    pub job_secret: Option<crate::secret::Secret>,
    /// The session network (`net::cluster::peers`): this jail's claimed address and listener.
    pub peers: Option<crate::net::cluster::peers::PeerNet>,
}

/// Starts the supervisor thread. Its failure (or a panic in the stack) stops the jail's
/// network, loudly; the command keeps running without it.
pub fn spawn(tun: OwnedFd, cfg: NetConfig) -> io::Result<()> {
    teardown::remember_tun(tun.as_raw_fd());
    crate::net::spawn_service("net", "the jail's network", move || run(tun, cfg))
}

/// What async work reports back to the loop.
enum Event {
    Dialed {
        id: u64,
        result: io::Result<host::HostConn>,
    },
    PeekTimeout {
        id: u64,
    },
    /// A DNS answer for the jail, from `from` (the address it asked) to `to`.
    DnsReply {
        from: SocketAddr,
        to: SocketAddr,
        data: Vec<u8>,
    },
    /// A host-side connection to a published port: connect into the jail.
    Published {
        stream: TcpStream,
        port: u16,
    },
    /// A call of another jail of the session (`net::cluster::peers`), admitted: connect into the
    /// jail's `port` from `from`.
    Peer {
        stream: TcpStream,
        from: std::net::Ipv4Addr,
        port: u16,
    },
}

/// The loop's state: the stack over the tun fd, the flows, and what the parts need to reach
/// the host and report back.
struct Supervisor {
    shared: Arc<Shared>,
    stack: Stack,
    flows: FlowTable,
    events: UnboundedSender<Event>,
    udp: host_udp::Flows,
    udp_events: UnboundedSender<host_udp::Event>,
    dialer: Dialer,
    hostname_ports: Vec<u16>,
    host_ports: Vec<u16>,
    credentials: Vec<Arc<inject::Endpoint>>,
    /// Connections to the credential endpoints being served, at most `inject::MAX_CONNECTIONS`.
    credential_slots: Arc<tokio::sync::Semaphore>,
    /// The loopback listener that answers DNS over TCP (`dns::serve_dns_tcp`).
    dns_tcp: SocketAddr,
    /// The gateway's port of the last connection into the jail (`--publish`; `tcp::gateway_end`).
    last_gateway_port: u16,
    /// This jail's address on the session network, when it is on one (`net::cluster::peers`): flows
    /// to the others' go to the dialer.
    own_address: Option<std::net::Ipv4Addr>,
}

async fn run(tun: OwnedFd, cfg: NetConfig) -> io::Result<()> {
    // Large allocations (the socket buffers are mapped pages of their own, `net::stack`) stay
    // out of the heap: a fixed threshold keeps glibc from raising it after the first free of
    // one, which would leave the next ones in the heap, zeroed whole and resident.
    // Called before the buffers exist.
    agent_sandbox_sys::memory::fixed_mmap_threshold(128 * 1024);
    let common = cfg.common;
    if let Some(path) = common.control.clone() {
        tokio::spawn(crate::net::control::serve(
            path,
            common.rules.clone(),
            common.audit.clone(),
            common.grant_bound.clone(),
        ));
    }
    let shared = Arc::new(Shared {
        rules: common.rules,
        names: Mutex::new(NameCache::default()),
        upstreams: common.upstreams,
        audit: Auditor::new(common.audit, common.mode),
        resolving: Arc::new(tokio::sync::Semaphore::new(decide::MAX_RESOLVING)),
        job_services: cfg.job_services.clone(),
    });
    let dns_tcp = dns::serve_dns_tcp(shared.clone()).await?;
    let (events, mut events_rx) = unbounded_channel();
    tcp::listen_published(&cfg.publish, &events).await;
    if let Some(jobs) = cfg.jobs {
        services::serve(jobs, &events, shared.clone());
    }
    let peer = cfg.peers.as_ref().map(|p| (p.claim.address, p.registry.clone()));
    if let Some(p) = cfg.peers {
        session_net::serve(p, &events, shared.clone());
    }
    let (udp_events, mut udp_rx) = unbounded_channel();
    let tun = Arc::new(tun);
    // SAFETY: the AsyncFd holds a reference to the OwnedFd (as does the stack), so the
    // descriptor stays open and the same for the AsyncFd's whole life.
    let tun_fd = unsafe { AsyncFd::register_with_interest(tun.clone(), tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    let parts = Parts {
        shared,
        events,
        udp_events,
        own_address: peer.as_ref().map(|p| p.0),
        dialer: Dialer::proving(cfg.job_services, cfg.job_secret, peer),
        hostname_ports: common.hostname_ports,
        host_ports: cfg.host_ports,
        credentials: cfg.credentials,
        dns_tcp,
    };
    let mut sup = Supervisor::new(tun, parts)?;
    loop {
        sup.turn();
        let delay = sup.stack.delay().unwrap_or(Duration::from_secs(3600));
        let ready = sup.flows.ready();
        tokio::select! {
            biased;
            guard = tun_fd.readable() => {
                let mut guard = guard?;
                if sup.read_tun()? {
                    guard.clear_ready();
                }
            }
            Some(ev) = events_rx.recv() => sup.on_event(ev),
            Some(ev) = udp_rx.recv() => sup.on_udp_event(ev),
            _ = ready.notified() => sup.flows.collect_ready(),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// What a `Supervisor` is built from, besides the tun fd.
struct Parts {
    shared: Arc<Shared>,
    events: UnboundedSender<Event>,
    udp_events: UnboundedSender<host_udp::Event>,
    dialer: Dialer,
    own_address: Option<std::net::Ipv4Addr>,
    hostname_ports: Vec<u16>,
    host_ports: Vec<u16>,
    credentials: Vec<Arc<inject::Endpoint>>,
    dns_tcp: SocketAddr,
}

impl Supervisor {
    fn new(tun: Arc<OwnedFd>, parts: Parts) -> std::io::Result<Supervisor> {
        let Parts { shared, events, udp_events, dialer, own_address, hostname_ports, host_ports, credentials, dns_tcp } =
            parts;
        Ok(Supervisor {
            shared,
            stack: Stack::new(tun)?,
            flows: FlowTable::new(),
            events,
            udp: host_udp::Flows::default(),
            udp_events,
            dialer,
            hostname_ports,
            host_ports,
            credentials,
            credential_slots: Arc::new(tokio::sync::Semaphore::new(inject::MAX_CONNECTIONS)),
            dns_tcp,
            last_gateway_port: 0,
            own_address,
        })
    }

    /// The work of one turn of the loop, before it waits: the flows with work, what the
    /// stack has to send, then the flows that are done.
    fn turn(&mut self) {
        self.service_dirty();
        self.stack.egress();
        // After egress: a socket closed by abort() still had its RST to send.
        self.flows.reap_serviced(&mut self.stack);
    }

    /// Reads up to a batch of packets; true once the fd is drained.
    fn read_tun(&mut self) -> io::Result<bool> {
        for _ in 0..READ_BATCH {
            let len = match self.stack.read_packet() {
                Ok(p) => p.len(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if len == 0 {
                return Ok(true);
            }
            self.on_packet(len);
        }
        Ok(false)
    }

    /// Routes the packet last read (`len` bytes) to the part that handles it.
    fn on_packet(&mut self, len: usize) {
        match packet::summarize(self.stack.packet(len)) {
            Summary::Tcp { src, dst, syn, ack, rst } => {
                if let Some(id) = self.flows.id_of(&(src, dst)) {
                    self.flows.mark_dirty(id);
                    self.stack.ingest(len);
                } else if syn && !ack && !rst {
                    self.on_syn(src, dst, len);
                } else {
                    // A segment of no flow: smoltcp answers RST (or nothing, to a RST).
                    self.stack.ingest(len);
                }
            }
            Summary::Udp { src, dst, payload } => self.on_udp(src, dst, len, payload),
            Summary::Echo { src, dst, ident, seq, data } => {
                self.on_echo(len, icmp::Echo { src, dst, ident, seq, data })
            }
            Summary::Other => {}
        }
    }

    /// Routes a report of async work to its part.
    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Dialed { id, result } => self.on_dialed(id, result),
            Event::PeekTimeout { id } => self.on_peek_timeout(id),
            Event::Published { stream, port } => self.connect_in(stream, port),
            Event::Peer { stream, from, port } => match self.own_address {
                Some(own) => self.connect_in_from(stream, SocketAddr::new(own.into(), port), from),
                None => drop(stream),
            },
            Event::DnsReply { from, to, data } => self.write_udp(from, to, &data),
        }
    }

    /// Refuses the packet last read, audited: a TCP SYN gets RST, a UDP datagram ICMP
    /// "administratively prohibited".
    fn deny_packet(&mut self, len: usize, proto: &str, dst: SocketAddr, check: &str, d: &Decision) {
        self.shared.audit.deny(proto, Some(dst), None, check, d);
        if proto == "udp" {
            if let Some(r) = packet::prohibited(self.stack.packet(len)) {
                self.stack.write(&r);
            }
        } else {
            // No socket takes the SYN: smoltcp answers RST at once.
            self.stack.ingest(len);
        }
    }

    fn service_dirty(&mut self) {
        // Servicing may make more flows dirty (never the same one twice in a row).
        let mut rounds = 0;
        while self.flows.has_dirty() && rounds < 4 {
            rounds += 1;
            for id in self.flows.take_dirty() {
                self.service(id);
            }
        }
    }

    /// A flow with work: a peeking flow reads on, a relayed one moves bytes.
    fn service(&mut self, id: u64) {
        let Some(phase) = self.flows.get(id).map(|f| &f.phase) else { return };
        match phase {
            Phase::Peeking => self.service_peek(id),
            Phase::Dialing => {}
            Phase::Relay => self.pump(id),
        }
        self.flows.serviced(id);
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use smoltcp::wire::TcpControl;

    #[test]
    fn a_segment_of_no_flow_is_answered_with_rst_and_opens_nothing() {
        let mut rig = Rig::new(&[]);
        let (from, to) = (jail(40000), sa("198.51.100.7:22"));
        rig.send(&tcp(from, to, TcpControl::None, 5000, Some(77), b"stray"));
        let segs = rig.segments();
        assert_eq!(segs.len(), 1, "{segs:?}");
        assert!(segs[0].rst, "{segs:?}");
        assert_eq!((segs[0].src, segs[0].dst), (to, from));
        assert!(rig.sup.flows.id_of(&(from, to)).is_none());
        assert!(rig.dialled.lock().unwrap().is_empty(), "nothing is dialled for a stray segment");
    }

    #[test]
    fn a_rst_of_no_flow_gets_no_answer() {
        let mut rig = Rig::new(&[]);
        rig.send(&tcp(jail(40000), sa("198.51.100.7:22"), TcpControl::Rst, 5000, None, &[]));
        assert!(rig.received().is_empty());
    }

    #[test]
    fn a_packet_of_no_known_protocol_is_dropped_silently() {
        let mut rig = Rig::new(&[]);
        let mut p = tcp(jail(40000), sa("198.51.100.7:22"), TcpControl::Syn, 1, None, &[]);
        p[9] = 132; // SCTP: neither TCP, UDP nor ICMP echo.
        p[10..12].fill(0);
        rig.send(&p);
        assert!(rig.received().is_empty());
        assert!(rig.denials().is_empty());
    }

    #[test]
    fn a_segment_of_an_open_flow_goes_to_that_flow() {
        let mut rig = Rig::new(&[]);
        let (key, id) = rig.open_to_host();
        // The SYN-ACK is held back while the host is dialled: a retransmitted SYN is the
        // flow's, not a new flow.
        rig.send(&syn(key.0, key.1));
        assert_eq!(rig.sup.flows.id_of(&key), Some(id));
        assert_eq!(rig.dialled.lock().unwrap().len(), 1, "dialled once");
    }
}
