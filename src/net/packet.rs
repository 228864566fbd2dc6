//! What the supervisor needs to know of an IP packet from `tun0` before deciding who handles
//! it, and the few packets it writes itself (UDP replies, ICMP errors and echo replies).
//! Parsing and emitting is smoltcp's `wire` module; nothing here trusts a length it did not
//! check (every `new_checked`).

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    Icmpv4DstUnreachable, Icmpv4Packet, Icmpv4Repr, Icmpv6DstUnreachable, Icmpv6Packet, Icmpv6Repr, IpProtocol,
    Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, TcpPacket, UdpPacket, UdpRepr,
};
use std::net::{IpAddr, SocketAddr};

/// The transport summary of one packet from the jail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summary {
    Tcp {
        src: SocketAddr,
        dst: SocketAddr,
        syn: bool,
        ack: bool,
        rst: bool,
    },
    /// `payload`: byte range of the UDP payload within the packet.
    Udp {
        src: SocketAddr,
        dst: SocketAddr,
        payload: (usize, usize),
    },
    /// An ICMP(v6) echo request: identifier, sequence, and the byte range of its data.
    Echo {
        src: IpAddr,
        dst: IpAddr,
        ident: u16,
        seq: u16,
        data: (usize, usize),
    },
    /// Anything else (other ICMP, unknown protocols, IPv6 extension headers, fragments):
    /// dropped. Fragments never come from the jail: its MTU is larger than any datagram.
    Other,
}

pub fn summarize(buf: &[u8]) -> Summary {
    match buf.first().map(|b| b >> 4) {
        Some(4) => summarize_v4(buf).unwrap_or(Summary::Other),
        Some(6) => summarize_v6(buf).unwrap_or(Summary::Other),
        _ => Summary::Other,
    }
}

fn summarize_v4(buf: &[u8]) -> Option<Summary> {
    let ip = Ipv4Packet::new_checked(buf).ok()?;
    if ip.more_frags() || ip.frag_offset() != 0 {
        return None;
    }
    let header = usize::from(ip.header_len());
    let total = usize::from(ip.total_len());
    let (src, dst) = (IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()));
    transport(ip.next_header(), &buf[..total], header, src, dst)
}

fn summarize_v6(buf: &[u8]) -> Option<Summary> {
    let ip = Ipv6Packet::new_checked(buf).ok()?;
    let header = ip.header_len();
    let total = header + usize::from(ip.payload_len());
    let (src, dst) = (IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()));
    transport(ip.next_header(), buf.get(..total)?, header, src, dst)
}

fn transport(proto: IpProtocol, packet: &[u8], header: usize, src: IpAddr, dst: IpAddr) -> Option<Summary> {
    let payload = packet.get(header..)?;
    match proto {
        IpProtocol::Tcp => {
            let tcp = TcpPacket::new_checked(payload).ok()?;
            Some(Summary::Tcp {
                src: SocketAddr::new(src, tcp.src_port()),
                dst: SocketAddr::new(dst, tcp.dst_port()),
                syn: tcp.syn(),
                ack: tcp.ack(),
                rst: tcp.rst(),
            })
        }
        IpProtocol::Udp => {
            let udp = UdpPacket::new_checked(payload).ok()?;
            let start = header + 8;
            let end = header + usize::from(udp.len());
            Some(Summary::Udp {
                src: SocketAddr::new(src, udp.src_port()),
                dst: SocketAddr::new(dst, udp.dst_port()),
                payload: (start, end),
            })
        }
        IpProtocol::Icmp => {
            let icmp = Icmpv4Packet::new_checked(payload).ok()?;
            match Icmpv4Repr::parse(&icmp, &ChecksumCapabilities::ignored()).ok()? {
                Icmpv4Repr::EchoRequest { ident, seq_no, data } => {
                    let start = packet.len() - data.len();
                    Some(Summary::Echo { src, dst, ident, seq: seq_no, data: (start, packet.len()) })
                }
                _ => None,
            }
        }
        IpProtocol::Icmpv6 => {
            let icmp = Icmpv6Packet::new_checked(payload).ok()?;
            let (IpAddr::V6(s), IpAddr::V6(d)) = (src, dst) else { return None };
            match Icmpv6Repr::parse(&s, &d, &icmp, &ChecksumCapabilities::ignored()).ok()? {
                Icmpv6Repr::EchoRequest { ident, seq_no, data } => {
                    let start = packet.len() - data.len();
                    Some(Summary::Echo { src, dst, ident, seq: seq_no, data: (start, packet.len()) })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

const HOP_LIMIT: u8 = 64;

/// A UDP datagram from `from` (the remote the jail talked to) to `to` (the jail's socket).
pub fn udp(from: SocketAddr, to: SocketAddr, payload: &[u8]) -> Option<Vec<u8>> {
    let udp = UdpRepr { src_port: from.port(), dst_port: to.port() };
    let len = 8 + payload.len();
    let caps = ChecksumCapabilities::default();
    let (src, dst) = (from.ip(), to.ip());
    let fill = |buf: &mut [u8]| {
        udp.emit(
            &mut UdpPacket::new_unchecked(buf),
            &src.into(),
            &dst.into(),
            payload.len(),
            |p| p.copy_from_slice(payload),
            &caps,
        )
    };
    ip_packet(src, dst, IpProtocol::Udp, len, fill)
}

/// An IP packet from `src` to `dst` whose `len` bytes of `proto` payload `fill` writes; None
/// for mixed families or a payload too long for one packet.
pub(super) fn ip_packet(
    src: IpAddr,
    dst: IpAddr,
    proto: IpProtocol,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) -> Option<Vec<u8>> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let ip = Ipv4Repr { src_addr: s, dst_addr: d, next_header: proto, payload_len: len, hop_limit: HOP_LIMIT };
            let mut buf = vec![0u8; ip.buffer_len() + len];
            if buf.len() > usize::from(u16::MAX) {
                return None;
            }
            let mut packet = Ipv4Packet::new_unchecked(&mut buf[..]);
            ip.emit(&mut packet, &ChecksumCapabilities::default());
            fill(packet.payload_mut());
            Some(buf)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = Ipv6Repr { src_addr: s, dst_addr: d, next_header: proto, payload_len: len, hop_limit: HOP_LIMIT };
            let mut buf = vec![0u8; ip.buffer_len() + len];
            if len > usize::from(u16::MAX) {
                return None;
            }
            let mut packet = Ipv6Packet::new_unchecked(&mut buf[..]);
            ip.emit(&mut packet);
            fill(packet.payload_mut());
            Some(buf)
        }
        _ => None,
    }
}

/// "Communication administratively prohibited" about `original` (a packet the jail sent):
/// the client's socket fails at once (EHOSTUNREACH for TCP and connected UDP) instead of
/// waiting for a timeout.
pub fn prohibited(original: &[u8]) -> Option<Vec<u8>> {
    unreachable(original, Unreachable::Prohibited)
}

/// "Port unreachable": what a closed UDP port answers (ECONNREFUSED).
pub fn port_unreachable(original: &[u8]) -> Option<Vec<u8>> {
    unreachable(original, Unreachable::Port)
}

enum Unreachable {
    Prohibited,
    Port,
}

fn unreachable(original: &[u8], why: Unreachable) -> Option<Vec<u8>> {
    let caps = ChecksumCapabilities::default();
    match original.first().map(|b| b >> 4) {
        Some(4) => {
            let ip = Ipv4Packet::new_checked(original).ok()?;
            let header = Ipv4Repr::parse(&ip, &ChecksumCapabilities::ignored()).ok()?;
            // RFC 792: the original header and the first 8 bytes of its payload.
            let data = &ip.payload()[..ip.payload().len().min(8)];
            let reason = match why {
                Unreachable::Prohibited => Icmpv4DstUnreachable::CommProhibited,
                Unreachable::Port => Icmpv4DstUnreachable::PortUnreachable,
            };
            let icmp = Icmpv4Repr::DstUnreachable { reason, header, data };
            let len = icmp.buffer_len();
            ip_packet(header.dst_addr.into(), header.src_addr.into(), IpProtocol::Icmp, len, |buf| {
                icmp.emit(&mut Icmpv4Packet::new_unchecked(buf), &caps)
            })
        }
        Some(6) => {
            let ip = Ipv6Packet::new_checked(original).ok()?;
            let header = Ipv6Repr::parse(&ip).ok()?;
            // RFC 4443: as much of the original as fits in the minimum MTU.
            let data = &ip.payload()[..ip.payload().len().min(1232 - 48)];
            let reason = match why {
                Unreachable::Prohibited => Icmpv6DstUnreachable::AdminProhibit,
                Unreachable::Port => Icmpv6DstUnreachable::PortUnreachable,
            };
            let icmp = Icmpv6Repr::DstUnreachable { reason, header, data };
            let (s, d) = (header.dst_addr, header.src_addr);
            ip_packet(s.into(), d.into(), IpProtocol::Icmpv6, icmp.buffer_len(), |buf| {
                icmp.emit(&s, &d, &mut Icmpv6Packet::new_unchecked(buf), &caps)
            })
        }
        _ => None,
    }
}

/// The echo reply to an echo request the supervisor answers itself (the gateway's).
pub fn echo_reply(src: IpAddr, dst: IpAddr, ident: u16, seq: u16, data: &[u8]) -> Option<Vec<u8>> {
    let caps = ChecksumCapabilities::default();
    match (dst, src) {
        (IpAddr::V4(_), IpAddr::V4(_)) => {
            let icmp = Icmpv4Repr::EchoReply { ident, seq_no: seq, data };
            ip_packet(dst, src, IpProtocol::Icmp, icmp.buffer_len(), |buf| {
                icmp.emit(&mut Icmpv4Packet::new_unchecked(buf), &caps)
            })
        }
        (IpAddr::V6(d), IpAddr::V6(s)) => {
            let icmp = Icmpv6Repr::EchoReply { ident, seq_no: seq, data };
            ip_packet(dst, src, IpProtocol::Icmpv6, icmp.buffer_len(), |buf| {
                icmp.emit(&d, &s, &mut Icmpv6Packet::new_unchecked(buf), &caps)
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn udp_round_trips_through_the_summary() {
        for (from, to) in [("198.51.100.2:53", "169.254.77.2:40000"), ("[2001:db8::2]:9999", "[fd00:a5b::2]:5000")] {
            let p = udp(sa(from), sa(to), b"hello").unwrap();
            match summarize(&p) {
                Summary::Udp { src, dst, payload } => {
                    assert_eq!((src, dst), (sa(from), sa(to)));
                    assert_eq!(&p[payload.0..payload.1], b"hello");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn unreachable_names_the_original_flow() {
        let orig = udp(sa("169.254.77.2:40000"), sa("198.51.100.2:514"), b"x").unwrap();
        let icmp = prohibited(&orig).unwrap();
        let ip = Ipv4Packet::new_checked(&icmp[..]).unwrap();
        assert_eq!(ip.src_addr().to_string(), "198.51.100.2");
        assert_eq!(ip.dst_addr().to_string(), "169.254.77.2");
        assert_eq!(ip.next_header(), IpProtocol::Icmp);
        let orig6 = udp(sa("[fd00:a5b::2]:40000"), sa("[2001:db8::2]:514"), b"x").unwrap();
        assert!(port_unreachable(&orig6).is_some());
    }

    #[test]
    fn garbage_is_other_never_a_panic() {
        let mut seed = 0x1234_5678_u64;
        for len in 0..200 {
            let mut buf = vec![0u8; len];
            for b in &mut buf {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            if let Some(b) = buf.first_mut() {
                *b = if len % 2 == 0 { 0x45 } else { 0x60 };
            }
            let _ = summarize(&buf);
            let _ = prohibited(&buf);
        }
    }
}
