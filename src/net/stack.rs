//! The userspace TCP/IP stack behind `tun0`: smoltcp in any-IP mode, fed one packet at a
//! time from the tun fd, writing its packets straight back to it. This module knows TCP
//! sockets and packets, nothing of policy: the supervisor decides which flows get a socket.
//!
//! Flow start is "dial before you answer": a SYN gets a listening socket whose SYN-ACK is
//! paused (smoltcp's `pause_synack`) until the host side has connected; a refused dial
//! aborts the socket, which answers the jail with RST. A SYN that gets no socket at all is
//! answered with RST by smoltcp itself.

use crate::netrules::addr;
use crate::pages::Pages;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{HardwareAddress, IpCidr, IpListenEndpoint};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Per-direction socket buffer. The jail's kernel may keep this much in flight: with window
/// scaling this is the advertised window. The memory is calloc'd and the supervisor sets a
/// fixed mmap threshold, so pages are only committed as data actually moves.
pub const SOCKET_BUFFER: usize = 1 << 20;

/// The socket buffers of a session's flows together, at most: they live in the launcher, on
/// the host, and a jail holding thousands of stalled connections must not fill its memory.
pub const BUFFER_BUDGET: usize = 256 << 20;

/// The per-direction buffer a new flow gets while `given` bytes are held by the others: full
/// size for the first flows (bulk transfers need the window), smaller ones as the session
/// holds more connections, none past `BUFFER_BUDGET` (the flow is refused).
pub fn buffer_for(given: usize) -> Option<usize> {
    let tiers = [(SOCKET_BUFFER, BUFFER_BUDGET / 2), (64 << 10, BUFFER_BUDGET / 4 * 3), (16 << 10, BUFFER_BUDGET)];
    tiers.into_iter().find(|(size, upto)| given + 2 * size <= *upto).map(|(size, _)| size)
}

/// The tun fd as a smoltcp device: one packet of input at a time (the supervisor reads it
/// and decides before smoltcp sees it), output written to the fd at once.
pub struct TunDevice {
    fd: Arc<OwnedFd>,
    /// A packet as long as the MTU fits each; their pages are mapped (`Pages`), so an idle
    /// session keeps only what its few small packets touched.
    rx: Pages,
    rx_len: Option<usize>,
    tx: Pages,
}

impl TunDevice {
    fn new(fd: Arc<OwnedFd>) -> std::io::Result<TunDevice> {
        Ok(TunDevice { fd, rx: Pages::zeroed(addr::MTU + 64)?, rx_len: None, tx: Pages::zeroed(addr::MTU + 64)? })
    }
}

pub struct RxToken<'a>(&'a [u8]);
pub struct TxToken<'a> {
    fd: BorrowedFd<'a>,
    buf: &'a mut [u8],
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0)
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let len = len.min(self.buf.len());
        let r = f(&mut self.buf[..len]);
        write_packet(self.fd, &self.buf[..len]);
        r
    }
}

/// Writes one packet to the tun fd. A full queue drops it, like a wire would; TCP resends.
pub fn write_packet(fd: BorrowedFd, packet: &[u8]) {
    let _ = nix::unistd::write(fd, packet);
}

impl Device for TunDevice {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _: SmolInstant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        let len = self.rx_len.take()?;
        Some((RxToken(&self.rx[..len]), TxToken { fd: self.fd.as_fd(), buf: &mut self.tx }))
    }

    fn transmit(&mut self, _: SmolInstant) -> Option<TxToken<'_>> {
        Some(TxToken { fd: self.fd.as_fd(), buf: &mut self.tx })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = addr::MTU;
        // The jail's kernel checksums what it sends, and a bad checksum would only corrupt the
        // jail's own data: skip verifying, still compute ours (the jail's kernel checks them).
        let mut cs = ChecksumCapabilities::default();
        cs.ipv4 = phy::Checksum::Tx;
        cs.tcp = phy::Checksum::Tx;
        cs.udp = phy::Checksum::Tx;
        caps.checksum = cs;
        caps
    }
}

pub struct Stack {
    device: TunDevice,
    iface: Interface,
    pub sockets: SocketSet<'static>,
    epoch: std::time::Instant,
}

/// A flow's socket: `buffer` bytes each way (`buffer_for`), no Nagle (we relay what the other
/// side sent, as it sent it).
fn new_socket(buffer: usize) -> tcp::Socket<'static> {
    let rx = tcp::SocketBuffer::new(vec![0u8; buffer]);
    let tx = tcp::SocketBuffer::new(vec![0u8; buffer]);
    let mut sock = tcp::Socket::new(rx, tx);
    sock.set_nagle_enabled(false);
    sock
}

fn endpoint(a: SocketAddr) -> IpListenEndpoint {
    IpListenEndpoint { addr: Some(a.ip().into()), port: a.port() }
}

impl Stack {
    /// A stack over the tun device `tun` (shared with whatever waits for it to be readable).
    pub fn new(tun: Arc<OwnedFd>) -> std::io::Result<Stack> {
        let mut device = TunDevice::new(tun)?;
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed)
            ^ u64::from(std::process::id());
        let mut iface = Interface::new(config, &mut device, SmolInstant::from_millis(0));
        iface.set_any_ip(true);
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(addr::GATEWAY_V4.into(), addr::PREFIX_V4));
            let _ = a.push(IpCidr::new(addr::GATEWAY_V6.into(), addr::PREFIX_V6));
        });
        Ok(Stack { device, iface, sockets: SocketSet::new(vec![]), epoch: std::time::Instant::now() })
    }

    fn now(&self) -> SmolInstant {
        SmolInstant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    /// Reads one packet from the tun fd into the device's input buffer.
    pub fn read_packet(&mut self) -> std::io::Result<&[u8]> {
        let device = &mut self.device;
        let n = nix::unistd::read(device.fd.as_fd(), &mut device.rx)?;
        Ok(&device.rx[..n])
    }

    /// The packet last read (`len` as `read_packet` returned it).
    pub fn packet(&self, len: usize) -> &[u8] {
        &self.device.rx[..len]
    }

    /// Hands the packet last read to smoltcp.
    pub fn ingest(&mut self, len: usize) {
        self.device.rx_len = Some(len);
        let now = self.now();
        self.iface.poll_ingress_single(now, &mut self.device, &mut self.sockets);
        self.device.rx_len = None;
    }

    /// Sends whatever the sockets have to send.
    pub fn egress(&mut self) {
        let now = self.now();
        self.iface.poll_maintenance(now);
        while self.iface.poll_egress(now, &mut self.device, &mut self.sockets)
            == smoltcp::iface::PollResult::SocketStateChanged
        {}
    }

    /// How long until smoltcp's next timer (retransmit, delayed ACK...).
    pub fn delay(&mut self) -> Option<std::time::Duration> {
        let now = self.now();
        self.iface.poll_delay(now, &self.sockets).map(|d| std::time::Duration::from_micros(d.total_micros()))
    }

    /// A socket for the flow `jail → dst`, listening on `dst` with its SYN-ACK held back
    /// while `paused`; the SYN (already read) is then handed to it.
    pub fn accept(&mut self, dst: SocketAddr, len: usize, paused: bool, buffer: usize) -> Option<SocketHandle> {
        let mut sock = new_socket(buffer);
        sock.pause_synack(paused);
        sock.listen(endpoint(dst)).ok()?;
        let handle = self.sockets.add(sock);
        self.ingest(len);
        // A SYN smoltcp did not take leaves the socket listening: it must not linger and
        // catch another flow's SYN.
        if self.sockets.get::<tcp::Socket>(handle).state() == tcp::State::Listen {
            self.sockets.remove(handle);
            return None;
        }
        Some(handle)
    }

    /// A socket connecting from `local` (a gateway address) to `remote` in the jail.
    pub fn connect(&mut self, remote: SocketAddr, local: SocketAddr, buffer: usize) -> Option<SocketHandle> {
        let mut sock = new_socket(buffer);
        sock.connect(self.iface.context(), remote, local).ok()?;
        Some(self.sockets.add(sock))
    }

    pub fn socket(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }

    pub fn remove(&mut self, h: SocketHandle) {
        self.sockets.remove(h);
    }

    pub fn write(&self, packet: &[u8]) {
        write_packet(self.device.fd.as_fd(), packet);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_get_smaller_buffers_as_the_session_holds_more_and_none_past_the_budget() {
        let (mut given, mut flows, mut sizes) = (0usize, 0usize, vec![]);
        while let Some(b) = buffer_for(given) {
            given += 2 * b;
            flows += 1;
            if sizes.last() != Some(&b) {
                sizes.push(b);
            }
        }
        assert_eq!(sizes, [SOCKET_BUFFER, 64 << 10, 16 << 10], "full size first, then smaller");
        assert!(given <= BUFFER_BUDGET, "{given}");
        assert!(flows >= 2000, "a session still holds thousands of connections: {flows}");
        assert_eq!(buffer_for(0), Some(SOCKET_BUFFER));
        assert_eq!(buffer_for(BUFFER_BUDGET), None);
    }
}
