//! ICMP echo from the jail: the gateway answers its own pings, and an echo request to any
//! other address is refused at once ("administratively prohibited"), so `ping` fails fast
//! instead of hanging. Nothing is pinged on the host's side. Other ICMP from the jail never
//! gets here (`packet::summarize` drops it).

use super::Supervisor;
use crate::net::packet;
use crate::netrules::addr;
use std::net::IpAddr;

/// An echo request, as `packet::Summary::Echo` describes it.
pub(super) struct Echo {
    pub(super) src: IpAddr,
    pub(super) dst: IpAddr,
    pub(super) ident: u16,
    pub(super) seq: u16,
    /// The byte range of its data within the packet.
    pub(super) data: (usize, usize),
}

impl Supervisor {
    /// Answers the echo request last read (`len` bytes).
    pub(super) fn on_echo(&mut self, len: usize, echo: Echo) {
        let Echo { src, dst, ident, seq, data } = echo;
        let pkt = self.stack.packet(len);
        let reply = if addr::is_gateway(dst) {
            packet::echo_reply(src, dst, ident, seq, &pkt[data.0..data.1])
        } else {
            packet::prohibited(pkt)
        };
        if let Some(r) = reply {
            self.stack.write(&r);
        }
    }
}
