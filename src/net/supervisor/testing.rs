//! For the unit tests: a supervisor over a datagram socket pair standing in for tun0, so the
//! routing and flow logic run without root and without a network. The test writes the jail's
//! packets to its end and reads what the supervisor answers there; every dial goes to a
//! loopback listener of the test's, and no DNS upstream is configured. Also builders and
//! readers of the packets the tests exchange. Not used outside tests.

use super::decide::Shared;
use super::tcp::Dialer;
use super::{Event, Parts, Supervisor};
use crate::audit::{AuditLog, Record};
use crate::net::audit::Auditor;
use crate::net::dns::NameCache;
use crate::net::packet;
use crate::netrules::addr;
use crate::netrules::matcher::{Action, Layer, MatcherOptions, RuleSet};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    Icmpv4DstUnreachable, Icmpv4Message, Icmpv4Packet, Icmpv4Repr, Icmpv6DstUnreachable, Icmpv6Message, Icmpv6Packet,
    Icmpv6Repr, IpProtocol, Ipv4Packet, Ipv6Packet, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// The port of the host's loopback the jail reaches through the gateway (`--host-port`).
pub(super) const HOST_PORT: u16 = 8080;
/// The jail's first sequence number in every handshake the tests make.
pub(super) const JAIL_ISN: u32 = 1000;

/// The jail's side of tun0: a socket address of the jail's IPv4 (or IPv6) address.
pub(super) fn jail(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(addr::JAIL_V4), port)
}

pub(super) fn jail6(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V6(addr::JAIL_V6), port)
}

pub(super) fn gateway(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(addr::GATEWAY_V4), port)
}

pub(super) fn sa(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

/// User rules, on top of the floors.
pub(super) fn rules(list: &[(&str, Action)]) -> RuleSet {
    let r: Vec<_> = list.iter().map(|(t, a)| (t.to_string(), *a, Layer::User)).collect();
    RuleSet::new(&r, MatcherOptions::default()).expect("rules")
}

pub(super) fn shared(rules: RuleSet, audit: Option<AuditLog>) -> Shared {
    Shared {
        rules,
        names: Mutex::new(NameCache::default()),
        upstreams: vec![],
        audit: Auditor::new(audit, "filtered"),
        resolving: Arc::new(tokio::sync::Semaphore::new(super::decide::MAX_RESOLVING)),
        job_services: vec![],
    }
}

/// A supervisor over a socket pair, with a runtime that runs only while the test asks.
pub(super) struct Rig {
    pub(super) sup: Supervisor,
    jail: OwnedFd,
    events: UnboundedReceiver<Event>,
    _udp_events: UnboundedReceiver<crate::net::udp::Event>,
    /// Where every dial goes.
    pub(super) host: std::net::TcpListener,
    /// The addresses the supervisor dialled, in order.
    pub(super) dialled: Arc<Mutex<Vec<SocketAddr>>>,
    audit_dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
}

impl Rig {
    /// A supervisor under `rules` (user layer), hostname ports 80 and 443, `HOST_PORT`
    /// published with `--host-port`.
    pub(super) fn new(list: &[(&str, Action)]) -> Rig {
        Rig::build(list, false)
    }

    /// As `new`, with a dialer whose dials are done when it returns (`Dial::Done`), as the
    /// host's are to a server on loopback or behind a veth.
    pub(super) fn at_once(list: &[(&str, Action)]) -> Rig {
        Rig::build(list, true)
    }

    fn build(list: &[(&str, Action)], at_once: bool) -> Rig {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let _in = rt.enter();
        let (tun, jail) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Datagram,
            None,
            nix::sys::socket::SockFlag::SOCK_NONBLOCK | nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .expect("socketpair");
        let audit_dir = tempfile::tempdir().expect("tempdir");
        let host = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
        let to = host.local_addr().expect("local address");
        let dialled = Arc::new(Mutex::new(vec![]));
        let asked = dialled.clone();
        let dialer = Dialer {
            connect: Arc::new(move |target| {
                asked.lock().expect("dialled").push(target);
                match at_once {
                    true => super::tcp::Dial::Done(std::net::TcpStream::connect(to).and_then(|s| {
                        s.set_nonblocking(true)?;
                        tokio::net::TcpStream::from_std(s)
                    })),
                    false => super::tcp::Dial::Pending(Box::pin(tokio::net::TcpStream::connect(to))),
                }
            }),
            routable: |_| true,
        };
        let (events, events_rx) = unbounded_channel();
        let (udp_events, udp_rx) = unbounded_channel();
        let parts = Parts {
            shared: Arc::new(shared(rules(list), Some(AuditLog::new(audit_dir.path())))),
            events,
            udp_events,
            dialer,
            own_address: None,
            hostname_ports: vec![80, 443],
            host_ports: vec![HOST_PORT],
            credentials: vec![],
            // Never reached: the dialer sends every dial to `host`.
            dns_tcp: sa("127.0.0.1:53"),
        };
        let sup = Supervisor::new(Arc::new(tun), parts).expect("the supervisor's buffers");
        drop(_in);
        Rig { sup, jail, events: events_rx, _udp_events: udp_rx, host, dialled, audit_dir, rt }
    }

    /// The jail sends `packet`; the supervisor reads it and takes one turn.
    pub(super) fn send(&mut self, packet: &[u8]) {
        nix::unistd::write(&self.jail, packet).expect("write to the tun stand-in");
        let _in = self.rt.enter();
        assert!(self.sup.read_tun().expect("read_tun"), "one packet drains the fd");
        self.sup.turn();
    }

    /// Everything the supervisor wrote to the jail since the last call.
    pub(super) fn received(&mut self) -> Vec<Vec<u8>> {
        let mut out = vec![];
        let mut buf = vec![0u8; addr::MTU + 64];
        while let Ok(n) = nix::unistd::read(&self.jail, &mut buf) {
            out.push(buf[..n].to_vec());
        }
        out
    }

    /// The TCP segments among `received()`.
    pub(super) fn segments(&mut self) -> Vec<Segment> {
        self.received().iter().filter_map(|p| segment(p)).collect()
    }

    /// Runs the async work (dials, resolver tasks) until it reports to the loop.
    pub(super) fn next_event(&mut self) -> Event {
        let events = &mut self.events;
        let ev = self.rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), events.recv()).await });
        ev.ok().flatten().expect("an event within 5 s")
    }

    /// Hands an event to the loop, which then takes one turn.
    pub(super) fn deliver(&mut self, ev: Event) {
        let _in = self.rt.enter();
        self.sup.on_event(ev);
        self.sup.turn();
    }

    /// Lets the runtime notice ready host sockets, then services the flows they wake, until
    /// `done` holds (at most about a second).
    pub(super) fn settle_until(&mut self, mut done: impl FnMut(&mut Rig) -> bool) -> bool {
        for _ in 0..100 {
            if done(self) {
                return true;
            }
            self.rt.block_on(async { tokio::time::sleep(Duration::from_millis(10)).await });
            let _in = self.rt.enter();
            self.sup.flows.collect_ready();
            self.sup.turn();
        }
        done(self)
    }

    /// A host-side socket of the test's, as the loop's runtime holds them.
    pub(super) fn tokio_stream(&self, stream: std::net::TcpStream) -> tokio::net::TcpStream {
        let _in = self.rt.enter();
        stream.set_nonblocking(true).expect("nonblocking");
        tokio::net::TcpStream::from_std(stream).expect("a tokio stream")
    }

    /// A host-side connection to the published jail port `port` (`--publish`), handed to the
    /// loop. Returns the client's end.
    pub(super) fn publish(&mut self, port: u16) -> std::net::TcpStream {
        let client = std::net::TcpStream::connect(self.host.local_addr().expect("address")).expect("connect");
        let (accepted, _) = self.host.accept().expect("accept");
        let stream = self.tokio_stream(accepted);
        self.deliver(Event::Published { stream, port });
        client
    }

    /// The network denials audited so far.
    pub(super) fn denials(&self) -> Vec<Record> {
        let all = crate::audit::read(self.audit_dir.path(), None).expect("audit log");
        all.into_iter().filter(|r| r.event == "net_denied").collect()
    }

    /// The jail's SYN to `HOST_PORT` on the gateway, from `jail(40000)`: a flow waiting for
    /// its dial. Returns the flow's key and id.
    pub(super) fn open_to_host(&mut self) -> ((SocketAddr, SocketAddr), u64) {
        let key = (jail(40000), gateway(HOST_PORT));
        self.send(&syn(key.0, key.1));
        let id = self.sup.flows.id_of(&key).expect("a flow for the SYN");
        (key, id)
    }

    /// A handshake from `from` to `to` that the supervisor answers at once (a hostname port,
    /// or a flow whose dial is done): the SYN, and the ACK of the supervisor's SYN-ACK, which
    /// is returned.
    pub(super) fn handshake(&mut self, from: SocketAddr, to: SocketAddr) -> Segment {
        if self.sup.flows.id_of(&(from, to)).is_none() {
            self.send(&syn(from, to));
        }
        let synack = self.segments().pop().expect("a SYN-ACK");
        assert!(synack.syn && synack.ack_flag, "{synack:?}");
        let ack = tcp(synack.dst, synack.src, TcpControl::None, synack.ack, Some(synack.seq.wrapping_add(1)), &[]);
        self.send(&ack);
        synack
    }

    /// The jail sends `data` on an established flow, as the segment after `last` (the
    /// supervisor's last segment) and `sent` bytes of its own.
    pub(super) fn send_data(&mut self, last: &Segment, sent: u32, data: &[u8], control: TcpControl) {
        let seq = JAIL_ISN + 1 + sent;
        let ack = last.seq.wrapping_add(last.payload.len() as u32 + u32::from(last.syn || last.fin));
        let p = tcp(last.dst, last.src, control, seq, Some(ack), data);
        self.send(&p);
    }
}

/// A TCP segment the supervisor sent the jail (or a test means to send).
#[derive(Debug, Clone)]
pub(super) struct Segment {
    pub(super) src: SocketAddr,
    pub(super) dst: SocketAddr,
    pub(super) syn: bool,
    pub(super) ack_flag: bool,
    pub(super) fin: bool,
    pub(super) rst: bool,
    pub(super) seq: u32,
    pub(super) ack: u32,
    pub(super) payload: Vec<u8>,
}

/// The source, destination, protocol and payload of an IP packet.
fn ip(pkt: &[u8]) -> Option<(IpAddr, IpAddr, IpProtocol, &[u8])> {
    match pkt.first()? >> 4 {
        4 => {
            let p = Ipv4Packet::new_checked(pkt).ok()?;
            let (src, dst, proto) = (p.src_addr().into(), p.dst_addr().into(), p.next_header());
            let header = usize::from(p.header_len());
            Some((src, dst, proto, &pkt[header..usize::from(p.total_len())]))
        }
        6 => {
            let p = Ipv6Packet::new_checked(pkt).ok()?;
            let (src, dst, proto) = (p.src_addr().into(), p.dst_addr().into(), p.next_header());
            Some((src, dst, proto, &pkt[p.header_len()..p.header_len() + usize::from(p.payload_len())]))
        }
        _ => None,
    }
}

pub(super) fn segment(pkt: &[u8]) -> Option<Segment> {
    let (src, dst, proto, payload) = ip(pkt)?;
    if proto != IpProtocol::Tcp {
        return None;
    }
    let t = TcpPacket::new_checked(payload).ok()?;
    Some(Segment {
        src: SocketAddr::new(src, t.src_port()),
        dst: SocketAddr::new(dst, t.dst_port()),
        syn: t.syn(),
        ack_flag: t.ack(),
        fin: t.fin(),
        rst: t.rst(),
        seq: t.seq_number().0 as u32,
        ack: t.ack_number().0 as u32,
        payload: t.payload().to_vec(),
    })
}

/// A TCP segment from the jail.
pub(super) fn tcp(
    src: SocketAddr,
    dst: SocketAddr,
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
    payload: &[u8],
) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 65535,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let (s, d) = (src.ip().into(), dst.ip().into());
    packet::ip_packet(src.ip(), dst.ip(), IpProtocol::Tcp, repr.buffer_len(), |buf| {
        repr.emit(&mut TcpPacket::new_unchecked(buf), &s, &d, &ChecksumCapabilities::default())
    })
    .expect("a TCP packet")
}

/// The jail's SYN from `src` to `dst`.
pub(super) fn syn(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    tcp(src, dst, TcpControl::Syn, JAIL_ISN, None, &[])
}

/// An ICMP (v6) echo request from the jail.
pub(super) fn echo_request(src: IpAddr, dst: IpAddr, ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let caps = ChecksumCapabilities::default();
    let built = match (src, dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let icmp = Icmpv6Repr::EchoRequest { ident, seq_no: seq, data };
            packet::ip_packet(src, dst, IpProtocol::Icmpv6, icmp.buffer_len(), |buf| {
                icmp.emit(&s, &d, &mut Icmpv6Packet::new_unchecked(buf), &caps)
            })
        }
        _ => {
            let icmp = Icmpv4Repr::EchoRequest { ident, seq_no: seq, data };
            packet::ip_packet(src, dst, IpProtocol::Icmp, icmp.buffer_len(), |buf| {
                icmp.emit(&mut Icmpv4Packet::new_unchecked(buf), &caps)
            })
        }
    };
    built.expect("an echo request")
}

/// What an ICMP (v6) packet to the jail says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Icmp {
    EchoReply { ident: u16, seq: u16, data: Vec<u8> },
    Prohibited,
    PortUnreachable,
    Other,
}

/// The source, destination and meaning of an ICMP (v6) packet. Read from type and code:
/// smoltcp's `Repr` refuses the truncated original packet an error quotes.
pub(super) fn icmp(pkt: &[u8]) -> Option<(IpAddr, IpAddr, Icmp)> {
    let (src, dst, proto, payload) = ip(pkt)?;
    // (echo reply, destination unreachable, its "prohibited" code, its "port" code)
    let [echo_reply, unreachable, prohibited, port]: [u8; 4] = match proto {
        IpProtocol::Icmp => [
            Icmpv4Message::EchoReply.into(),
            Icmpv4Message::DstUnreachable.into(),
            Icmpv4DstUnreachable::CommProhibited.into(),
            Icmpv4DstUnreachable::PortUnreachable.into(),
        ],
        IpProtocol::Icmpv6 => [
            Icmpv6Message::EchoReply.into(),
            Icmpv6Message::DstUnreachable.into(),
            Icmpv6DstUnreachable::AdminProhibit.into(),
            Icmpv6DstUnreachable::PortUnreachable.into(),
        ],
        _ => return None,
    };
    // Both families: type, code, checksum, then an echo's identifier and sequence number.
    let (kind, code) = (*payload.first()?, *payload.get(1)?);
    let what = if kind == echo_reply && payload.len() >= 8 {
        let ident = u16::from_be_bytes([payload[4], payload[5]]);
        let seq = u16::from_be_bytes([payload[6], payload[7]]);
        Icmp::EchoReply { ident, seq, data: payload[8..].to_vec() }
    } else if kind == unreachable && code == prohibited {
        Icmp::Prohibited
    } else if kind == unreachable && code == port {
        Icmp::PortUnreachable
    } else {
        Icmp::Other
    };
    Some((src, dst, what))
}

/// What the host side (`server`, a connection the rig's listener accepted) receives, until
/// `want` bytes or the end of the stream came (or the flow stopped moving).
pub(super) fn read_host(rig: &mut Rig, server: &mut std::net::TcpStream, want: usize) -> Vec<u8> {
    use std::io::Read;
    server.set_nonblocking(true).expect("nonblocking");
    let (mut got, mut eof) = (vec![], false);
    rig.settle_until(|_| {
        let mut buf = [0u8; 4096];
        while let Ok(n) = server.read(&mut buf) {
            eof |= n == 0;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        eof || got.len() >= want
    });
    got
}
