//! The addresses of the jail's side of `tun0` in `filtered` mode. Link-local IPv4 and a
//! private IPv6 /64 of our own, so that no destination a user could want is shadowed: the
//! only addresses the supervisor answers itself are the gateway's (DNS, `--host-port`), and
//! link-local destinations are floored anyway.

use std::net::{Ipv4Addr, Ipv6Addr};

pub const JAIL_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 77, 2);
pub const GATEWAY_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 77, 1);
/// The whole link-local /16: another jail of the session (`net::cluster::peers`) is on the link.
pub const PREFIX_V4: u8 = 16;
pub const JAIL_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa5b, 0, 0, 0, 0, 0, 2);
pub const GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa5b, 0, 0, 0, 0, 0, 1);
pub const PREFIX_V6: u8 = 64;
/// pasta's choice: large frames halve the per-packet work of both stacks; the host side is
/// ordinary sockets, so this MTU never reaches a wire.
pub const MTU: usize = 65520;
pub const TUN_NAME: &str = "tun0";

/// Is this one of the addresses the supervisor answers for itself?
pub fn is_gateway(ip: std::net::IpAddr) -> bool {
    ip == std::net::IpAddr::V4(GATEWAY_V4) || ip == std::net::IpAddr::V6(GATEWAY_V6)
}

/// The proxies of `proxied` mode, on the jail's loopback.
pub const HTTP_PORT: u16 = 3128;
pub const SOCKS_PORT: u16 = 1080;
