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

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::netrules::addr;
    use std::net::IpAddr;

    #[test]
    fn echo_to_the_gateway_is_answered_by_the_gateway() {
        let mut rig = Rig::new(&[]);
        for (jail_ip, gw) in
            [(addr::JAIL_V4.into(), addr::GATEWAY_V4.into()), (addr::JAIL_V6.into(), addr::GATEWAY_V6.into())]
        {
            let (jail_ip, gw): (IpAddr, IpAddr) = (jail_ip, gw);
            rig.send(&echo_request(jail_ip, gw, 7, 3, b"ping data"));
            let got: Vec<_> = rig.received().iter().filter_map(|p| icmp(p)).collect();
            assert_eq!(got, [(gw, jail_ip, Icmp::EchoReply { ident: 7, seq: 3, data: b"ping data".to_vec() })]);
        }
    }

    #[test]
    fn echo_to_any_other_address_is_administratively_prohibited_at_once() {
        let mut rig = Rig::new(&[]);
        for (jail_ip, other) in [(addr::JAIL_V4.into(), "198.51.100.7"), (addr::JAIL_V6.into(), "2001:db8::7")] {
            let (jail_ip, other): (IpAddr, IpAddr) = (jail_ip, other.parse().unwrap());
            rig.send(&echo_request(jail_ip, other, 7, 3, b"ping data"));
            let got: Vec<_> = rig.received().iter().filter_map(|p| icmp(p)).collect();
            assert_eq!(got, [(other, jail_ip, Icmp::Prohibited)], "from the address pinged");
        }
    }
}
