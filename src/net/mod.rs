//! Supervisor-side networking: the destination matcher and floors every mode shares, the
//! userspace stack behind `tun0` (`filtered`), the jail's resolver, and the supervisor loop.

pub mod addr;
pub mod dns;
pub mod floor;
pub mod http1;
pub mod matcher;
pub mod packet;
pub mod peek;
pub mod proxy;
pub mod stack;
pub mod supervisor;
pub mod udp;

/// The 403 a refused plain-HTTP request gets, in `filtered` and in the proxies' tunnels alike:
/// the body is the one line an agent can act on.
pub fn forbidden_response(dst: std::net::SocketAddr, reason: &str) -> Vec<u8> {
    let body = format!("agent-sandbox: {dst} refused by the network policy: {reason}\n");
    let mut out = format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}
