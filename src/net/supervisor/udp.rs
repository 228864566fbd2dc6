//! The jail's UDP datagrams: DNS (port 53, to any address) goes to our resolver, the
//! gateway's other ports are closed, QUIC is refused while name rules are in force, and every
//! other flow is decided on its first datagram and then sent on its own connected host
//! socket. Those sockets, their answers and idle timeout are `net/udp.rs`; this file only
//! routes and decides.

use super::decide::refusal;
use super::Supervisor;
use crate::net::packet;
use crate::net::udp as host_udp;
use crate::netrules::addr;
use crate::netrules::matcher::Proto;
use std::net::SocketAddr;

impl Supervisor {
    /// A datagram the jail sent (the packet last read, `len` bytes; `payload` its range).
    pub(super) fn on_udp(&mut self, src: SocketAddr, dst: SocketAddr, len: usize, payload: (usize, usize)) {
        let data = self.stack.packet(len).get(payload.0..payload.1).unwrap_or_default().to_vec();
        if dst.port() == 53 {
            // DNS to the gateway or to any server: our resolver answers, as that server.
            return self.resolve_for_jail(src, dst, data);
        }
        let key = (src, dst);
        if self.udp.send(&key, &data) {
            return;
        }
        if addr::is_gateway(dst.ip()) {
            self.write_port_unreachable(len);
            return;
        }
        if self.udp.len() >= host_udp::MAX_FLOWS {
            let d = refusal("too many UDP flows in this jail");
            return self.deny_packet(len, "udp", dst, "limit", &d);
        }
        let mut d = self.shared.decide(dst, Proto::Udp, None);
        if d.allowed && self.hostname_ports.contains(&dst.port()) && self.shared.rules.has_name_rules() {
            // QUIC carries its name encrypted: it cannot be matched, so clients fall back to TCP.
            d = refusal(&format!("UDP to port {} (QUIC) cannot be matched by name; use TCP", dst.port()));
        }
        if !d.allowed {
            return self.deny_packet(len, "udp", dst, "udp", &d);
        }
        if let Err(e) = self.udp.open(key, &data, self.udp_events.clone()) {
            tracing::debug!(%dst, "udp flow failed: {e}");
            self.write_port_unreachable(len);
        }
    }

    /// "Port unreachable" to the jail about the packet last read: the port is closed.
    fn write_port_unreachable(&mut self, len: usize) {
        if let Some(r) = packet::port_unreachable(self.stack.packet(len)) {
            self.stack.write(&r);
        }
    }

    /// A datagram to the jail's socket `to`, from the remote `from` it talked to.
    pub(super) fn write_udp(&mut self, from: SocketAddr, to: SocketAddr, data: &[u8]) {
        if let Some(p) = packet::udp(from, to, data) {
            self.stack.write(&p);
        }
    }

    /// An answer from a UDP flow's host socket, or the flow's end after its idle timeout.
    pub(super) fn on_udp_event(&mut self, ev: host_udp::Event) {
        match ev {
            host_udp::Event::Reply { key, data } => self.write_udp(key.1, key.0, &data),
            host_udp::Event::Closed { key } => self.udp.close(&key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::Event;
    use crate::net::dns::tests::query;
    use crate::net::packet::{self, Summary};
    use crate::netrules::matcher::Action;
    use hickory_proto::op::{Message, ResponseCode};
    use std::net::SocketAddr;

    fn udp_to_jail(pkt: &[u8]) -> Option<(SocketAddr, SocketAddr, Vec<u8>)> {
        match packet::summarize(pkt) {
            Summary::Udp { src, dst, payload } => Some((src, dst, pkt[payload.0..payload.1].to_vec())),
            _ => None,
        }
    }

    #[test]
    fn udp_to_port_53_of_any_address_is_answered_by_the_resolver_as_that_address() {
        let mut rig = Rig::new(&[("blocked.test", Action::Block)]);
        for server in [sa("198.51.100.9:53"), gateway(53)] {
            rig.send(&packet::udp(jail(5353), server, &query("blocked.test", 0x5eed)).unwrap());
            assert!(rig.received().is_empty(), "answered by a task, not at once");
            let ev = rig.next_event();
            assert!(matches!(ev, Event::DnsReply { from, .. } if from == server));
            rig.deliver(ev);
            let got: Vec<_> = rig.received().iter().filter_map(|p| udp_to_jail(p)).collect();
            assert_eq!(got.len(), 1);
            let (src, dst, reply) = &got[0];
            assert_eq!((*src, *dst), (server, jail(5353)), "from the server the jail asked");
            let reply = Message::from_vec(reply).unwrap();
            assert_eq!((reply.metadata.id, reply.metadata.response_code), (0x5eed, ResponseCode::NXDomain));
        }
        assert!(rig.sup.udp.is_empty(), "no host socket for DNS");
        let d = rig.denials();
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].check.as_deref(), d[0].name.as_deref()), (Some("dns"), Some("blocked.test")));
    }

    #[test]
    fn udp_to_another_port_of_the_gateway_is_port_unreachable() {
        let mut rig = Rig::new(&[]);
        rig.send(&packet::udp(jail(5000), gateway(123), b"ntp?").unwrap());
        let got: Vec<_> = rig.received().iter().filter_map(|p| icmp(p)).collect();
        assert_eq!(got, [(gateway(0).ip(), jail(0).ip(), Icmp::PortUnreachable)]);
        assert!(rig.sup.udp.is_empty());
    }

    #[test]
    fn udp_to_a_blocked_address_is_prohibited_and_audited() {
        let mut rig = Rig::new(&[("198.51.100.0/24", Action::Block)]);
        let to = sa("198.51.100.7:514");
        rig.send(&packet::udp(jail6(5000), sa("[2001:db8::7]:514"), b"syslog").unwrap());
        rig.send(&packet::udp(jail(5000), to, b"syslog").unwrap());
        let got: Vec<_> = rig.received().iter().filter_map(|p| icmp(p)).collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.iter().all(|(_, _, what)| *what == Icmp::Prohibited), "{got:?}");
        let d = rig.denials();
        assert_eq!((d[1].check.as_deref(), d[1].dest.as_deref()), (Some("udp"), Some("198.51.100.7:514")));
        assert!(rig.sup.udp.is_empty());
    }

    #[test]
    fn quic_is_refused_while_name_rules_are_in_force() {
        let mut rig = Rig::new(&[("allowed.test", Action::Allow)]);
        rig.send(&packet::udp(jail(5000), sa("198.51.100.7:443"), b"\xc0quic initial").unwrap());
        let got: Vec<_> = rig.received().iter().filter_map(|p| icmp(p)).collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].2, Icmp::Prohibited);
        let d = rig.denials();
        assert!(d[0].reason.as_deref().unwrap_or("").contains("QUIC"), "{d:?}");
        assert!(rig.sup.udp.is_empty(), "no host socket");
    }
}
