//! The userspace TCP/IP stack behind `tun0`: smoltcp in any-IP mode, fed one packet at a
//! time from the tun fd, writing its packets straight back to it. This module knows TCP
//! sockets and packets, nothing of policy: the supervisor decides which flows get a socket.
//!
//! Flow start is "dial before you answer": a SYN gets a listening socket whose SYN-ACK is
//! paused (smoltcp's `pause_synack`) until the host side has connected; a refused dial
//! aborts the socket, which answers the jail with RST. A SYN that gets no socket at all is
//! answered with RST by smoltcp itself.

use crate::netrules::addr;
use agent_sandbox_sys::memory::Pages;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{HardwareAddress, IpCidr, IpListenEndpoint};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Per-direction socket buffer. The jail's kernel may keep this much in flight: with window
/// scaling this is the advertised window. The memory is mapped pages (`new_socket`), so pages
/// are only committed as data actually moves.
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
    // Declared before `pool`, so dropped before it: a socket may borrow the pool's pages.
    sockets: SocketSet<'static>,
    pool: BufferPool,
    epoch: std::time::Instant,
}

/// Full-size socket buffers (`SOCKET_BUFFER`), kept for the next flows when their flow ends.
/// A flow's two buffers were mapped when it started and unmapped when it ended, each first
/// touch of a page a fault: per connection 2 `mmap`, 2 `munmap` and their faults, in a
/// process whose threads then take the TLB shootdown. Smaller buffers are mapped for their
/// flow alone.
struct BufferPool {
    free: Vec<Pages>,
    /// The pages each full-size socket borrows (its receive and send buffer), by socket.
    lent: HashMap<SocketHandle, [Pages; 2]>,
}

/// Free full-size buffers kept: the connections a client opens one after another, or a few
/// at once, reuse them; more are unmapped.
const POOL_KEEP: usize = 8;

/// How much of a kept buffer stays resident: the rest is given back (`MADV_DONTNEED`) when
/// it returns, so a pool filled by bulk transfers holds 8 × 64 KiB, not 8 MiB, while idle.
const POOL_RESIDENT: usize = 64 << 10;

impl BufferPool {
    /// `size` bytes of mapped pages: a kept full-size buffer, else a new mapping.
    fn take(&mut self, size: usize) -> std::io::Result<Pages> {
        match size == SOCKET_BUFFER {
            true => self.free.pop().map_or_else(|| Pages::zeroed(size), Ok),
            false => Pages::zeroed(size),
        }
    }

    fn give_back(&mut self, pages: Pages) {
        if pages.size() == SOCKET_BUFFER && self.free.len() < POOL_KEEP && pages.forget_beyond(POOL_RESIDENT) {
            self.free.push(pages);
        }
    }
}

/// A flow's socket: `buffer` bytes each way (`buffer_for`), no Nagle (we relay what the other
/// side sent, as it sent it). Its buffers are mapped pages (`lent`, to be recorded under the
/// socket's handle), resident only as far as data reached: from the heap, calloc zeroes every
/// buffer it carves from memory the heap had before (its top is reused), which made 1000 held
/// connections cost 69 MiB, the 64 KiB tier of 512 flows resident whole.
fn new_socket(buffer: usize, pool: &mut BufferPool) -> Option<(tcp::Socket<'static>, Option<[Pages; 2]>)> {
    let (mut rx, mut tx) = (pool.take(buffer).ok()?, pool.take(buffer).ok()?);
    // SAFETY: each slice covers pages that stay mapped until the socket is gone:
    // `Stack::remove` drops the socket before it gives the pages back, and `Stack` drops its
    // sockets before its pool. The pages are moved (not copied) into `lent`, which does not
    // move the mapping, and nothing else reads or writes them meanwhile.
    let (rx_buf, tx_buf): (&'static mut [u8], &'static mut [u8]) = unsafe {
        (
            std::slice::from_raw_parts_mut(rx.as_mut_ptr(), rx.len()),
            std::slice::from_raw_parts_mut(tx.as_mut_ptr(), tx.len()),
        )
    };
    let mut sock = tcp::Socket::new(tcp::SocketBuffer::new(rx_buf), tcp::SocketBuffer::new(tx_buf));
    sock.set_nagle_enabled(false);
    Some((sock, Some([rx, tx])))
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
        Ok(Stack {
            device,
            iface,
            sockets: SocketSet::new(vec![]),
            pool: BufferPool { free: vec![], lent: HashMap::new() },
            epoch: std::time::Instant::now(),
        })
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
        let (mut sock, lent) = new_socket(buffer, &mut self.pool)?;
        sock.pause_synack(paused);
        if sock.listen(endpoint(dst)).is_err() {
            self.give_back(sock, lent);
            return None;
        }
        let handle = self.add(sock, lent);
        self.ingest(len);
        // A SYN smoltcp did not take leaves the socket listening: it must not linger and
        // catch another flow's SYN.
        if self.sockets.get::<tcp::Socket>(handle).state() == tcp::State::Listen {
            self.remove(handle);
            return None;
        }
        Some(handle)
    }

    /// A socket connecting from `local` (a gateway address) to `remote` in the jail.
    pub fn connect(&mut self, remote: SocketAddr, local: SocketAddr, buffer: usize) -> Option<SocketHandle> {
        let (mut sock, lent) = new_socket(buffer, &mut self.pool)?;
        if sock.connect(self.iface.context(), remote, local).is_err() {
            self.give_back(sock, lent);
            return None;
        }
        Some(self.add(sock, lent))
    }

    fn add(&mut self, sock: tcp::Socket<'static>, lent: Option<[Pages; 2]>) -> SocketHandle {
        let handle = self.sockets.add(sock);
        if let Some(pages) = lent {
            self.pool.lent.insert(handle, pages);
        }
        handle
    }

    /// A socket that never joined the set: dropped first, then its pages are free.
    fn give_back<S>(&mut self, sock: S, lent: Option<[Pages; 2]>) {
        drop(sock);
        for pages in lent.into_iter().flatten() {
            self.pool.give_back(pages);
        }
    }

    /// Whether no socket is left (all flows reaped).
    pub fn has_no_sockets(&self) -> bool {
        self.sockets.iter().next().is_none()
    }

    /// The socket `h`, to use in place. It may borrow the pool's pages: never move it out
    /// (`mem::replace`/`swap`), which would let it outlive `remove`.
    pub fn socket(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }

    pub fn remove(&mut self, h: SocketHandle) {
        let sock = self.sockets.remove(h);
        let lent = self.pool.lent.remove(&h);
        self.give_back(sock, lent);
    }

    pub fn write(&self, packet: &[u8]) {
        write_packet(self.device.fd.as_fd(), packet);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack() -> Stack {
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        Stack::new(Arc::new(OwnedFd::from(a))).unwrap()
    }

    fn connect(s: &mut Stack, port: u16, buffer: usize) -> SocketHandle {
        let remote: SocketAddr = "10.0.2.15:8080".parse().unwrap();
        let local = SocketAddr::new(addr::GATEWAY_V4.into(), port);
        s.connect(remote, local, buffer).unwrap()
    }

    fn lent_at(s: &Stack, h: SocketHandle) -> [usize; 2] {
        let p = &s.pool.lent[&h];
        [p[0].addr(), p[1].addr()]
    }

    #[test]
    fn a_flows_full_size_buffers_serve_the_next_flow_and_the_pool_stays_bounded() {
        let mut s = stack();
        let first = connect(&mut s, 40000, SOCKET_BUFFER);
        let pages = lent_at(&s, first);
        s.remove(first);
        assert_eq!(s.pool.free.len(), 2);
        let second = connect(&mut s, 40001, SOCKET_BUFFER);
        let mut again = lent_at(&s, second);
        again.sort();
        let mut pages = pages;
        pages.sort();
        assert_eq!(again, pages, "the same mappings, not new ones");
        assert!(s.pool.free.is_empty());
        let many: Vec<_> = (0..10).map(|i| connect(&mut s, 40100 + i, SOCKET_BUFFER)).collect();
        for h in many.into_iter().chain([second]) {
            s.remove(h);
        }
        assert_eq!(s.pool.free.len(), POOL_KEEP, "at most POOL_KEEP kept, the rest unmapped");
        assert!(s.pool.lent.is_empty());
        // Smaller buffers are mapped for their flow and unmapped after it, never kept.
        let small = connect(&mut s, 40200, 64 << 10);
        assert_eq!(s.pool.lent[&small].each_ref().map(|p| p.size()), [64 << 10; 2]);
        assert_eq!(s.pool.free.len(), POOL_KEEP, "the kept full-size buffers are not cut up");
        s.remove(small);
        assert_eq!(s.pool.free.len(), POOL_KEEP);
        assert!(s.has_no_sockets() && s.pool.lent.is_empty());
    }

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
