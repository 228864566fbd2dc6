//! UDP flows of the jail: one connected host socket per (jail socket, destination), closed
//! after an idle timeout. Datagrams the jail sends go out with `try_send` (a full socket
//! buffer drops, as UDP may); each flow's task reads answers and hands them to the loop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

pub const IDLE: Duration = Duration::from_secs(60);
/// Most UDP flows open at once; past it new ones are refused (a jail cannot exhaust the
/// host's ports or the supervisor's memory).
pub const MAX_FLOWS: usize = 1024;

pub type Key = (SocketAddr, SocketAddr);

pub struct Flow {
    sock: Arc<tokio::net::UdpSocket>,
    /// Milliseconds since `epoch` of the last datagram from the jail.
    last_out: Arc<AtomicU64>,
}

pub struct Flows {
    map: HashMap<Key, Flow>,
    epoch: Instant,
}

/// What a flow's task tells the loop.
pub enum Event {
    Reply { key: Key, data: Vec<u8> },
    Closed { key: Key },
}

impl Default for Flows {
    fn default() -> Self {
        Flows { map: HashMap::new(), epoch: Instant::now() }
    }
}

impl Flows {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Sends on an existing flow; false if there is none.
    pub fn send(&mut self, key: &Key, payload: &[u8]) -> bool {
        let Some(f) = self.map.get(key) else { return false };
        f.last_out.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        // Not try_send: it trusts tokio's readiness cache, which may not have seen the socket
        // writable yet; a plain non-blocking send asks the kernel.
        let _ = nix::sys::socket::send(f.sock.as_raw_fd(), payload, nix::sys::socket::MsgFlags::MSG_DONTWAIT);
        true
    }

    /// Opens a flow (already allowed by the matcher) and sends its first datagram.
    pub fn open(&mut self, key: Key, payload: &[u8], events: UnboundedSender<Event>) -> std::io::Result<()> {
        let dst = key.1;
        let bind: SocketAddr = if dst.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
        let std_sock = std::net::UdpSocket::bind(bind)?;
        std_sock.connect(dst)?;
        std_sock.set_nonblocking(true)?;
        // Sent before tokio owns the socket: its try_send reports WouldBlock until the reactor
        // has seen the socket writable once, which would drop this first datagram.
        let _ = std_sock.send(payload);
        let sock = Arc::new(tokio::net::UdpSocket::from_std(std_sock)?);
        let last_out = Arc::new(AtomicU64::new(self.epoch.elapsed().as_millis() as u64));
        tokio::spawn(serve(key, sock.clone(), last_out.clone(), self.epoch, events));
        self.map.insert(key, Flow { sock, last_out });
        Ok(())
    }

    pub fn close(&mut self, key: &Key) {
        self.map.remove(key);
    }
}

async fn serve(
    key: Key,
    sock: Arc<tokio::net::UdpSocket>,
    last_out: Arc<AtomicU64>,
    epoch: Instant,
    events: UnboundedSender<Event>,
) {
    let mut buf = vec![0u8; 65536];
    let mut last_in = Instant::now();
    loop {
        match tokio::time::timeout(IDLE / 4, sock.recv(&mut buf)).await {
            Ok(Ok(n)) => {
                last_in = Instant::now();
                if events.send(Event::Reply { key, data: buf[..n].to_vec() }).is_err() {
                    return;
                }
            }
            // ICMP errors from the destination surface here (ECONNREFUSED): keep the flow,
            // the jail's next datagram may succeed.
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(_) => {}
        }
        let out = epoch + Duration::from_millis(last_out.load(Ordering::Relaxed));
        if out.max(last_in).elapsed() >= IDLE {
            let _ = events.send(Event::Closed { key });
            return;
        }
    }
}
