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
