//! The network supervisor of `filtered` mode: one thread outside the jail running a
//! current-thread tokio loop over the tun fd the jail's init handed out. Every packet the
//! jail sends is decided here before it has any effect: TCP flows are terminated in the
//! userspace stack (`stack.rs`) and dialled from the host only if the matcher allows them,
//! UDP flows get a connected host socket each, DNS is answered by our resolver (`dns.rs`),
//! ICMP echo is answered for the gateway and refused for everything else. The jail never has
//! a route to the host's network: every byte it gets out, this loop wrote to a host socket.
//!
//! Relaying is single-copy: bytes move between smoltcp's socket buffers and the host socket
//! with `try_read`/`try_write` on the buffer itself. Each flow has its own waker, so host
//! readiness wakes only that flow (no walk over every flow per event).

use super::dns::{self, NameCache};
use super::http1::{self, Framer};
use super::packet::{self, Summary};
use super::peek::{self, Peeked};
use super::stack::{self, Stack};
use super::udp;
use crate::audit::AuditLog;
use crate::netrules::addr;
use crate::netrules::matcher::{Decision, Destination, Layer, Proto, RuleSet};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::sync::Notify;

/// Most TCP flows open at once (the rest are refused with RST).
pub const MAX_TCP_FLOWS: usize = 4096;
const DIAL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a flow to a hostname port may stay silent before it is decided without a name
/// (server-speaks-first protocols).
const PEEK_TIMEOUT: Duration = Duration::from_secs(3);
/// Packets read from tun0 per wakeup before the loop looks at other work.
const READ_BATCH: usize = 256;
/// Denials written to the audit log per second, at most (a scan cannot flood the log).
const AUDIT_PER_SECOND: u32 = 50;

pub struct NetConfig {
    pub rules: RuleSet,
    pub upstreams: Vec<SocketAddr>,
    /// Flows to these ports are matched on their TLS SNI / HTTP Host before being dialled.
    pub hostname_ports: Vec<u16>,
    /// Host loopback ports the jail reaches through the gateway address (`--host-port`).
    pub host_ports: Vec<u16>,
    /// Jail ports served on host loopback (`--publish`).
    pub publish: Vec<u16>,
    pub audit: Option<AuditLog>,
    pub mode: &'static str,
}

/// The tun fd's number while a supervisor serves it (-1: none), for `defer_teardown`.
static TUN_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Called by the launcher just before it exits. Closing the last reference to tun0 makes the
/// kernel unregister the device and wait for an RCU grace period: ~25 ms the user would wait
/// for at every exit. A forked child keeps a reference to the device (and nothing else: not
/// the caller's stdout) until the launcher is gone, and pays that cost after it.
pub fn defer_teardown() {
    let tun = TUN_FD.load(std::sync::atomic::Ordering::Relaxed);
    if tun < 0 {
        return;
    }
    let Ok((r, w)) = nix::unistd::pipe() else { return };
    let (r, w) = (r.as_raw_fd(), std::mem::ManuallyDrop::new(w));
    // SAFETY: the child only calls async-signal-safe functions (close_range, close, read,
    // _exit), as a fork of a multi-threaded process must.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let (lo, hi) = (tun.min(r), tun.max(r));
            let ranges = [(0, lo - 1), (lo + 1, hi - 1), (hi + 1, i32::MAX)];
            for (a, b) in ranges {
                if a <= b {
                    // SAFETY: closes descriptors of this child only.
                    unsafe { libc::syscall(libc::SYS_close_range, a as u32, b as u32, 0u32) };
                }
            }
            let mut buf = [0u8; 1];
            // SAFETY: read into a live one-byte buffer; returns at EOF, when the launcher
            // (holding the write end) has exited.
            unsafe { libc::read(r, buf.as_mut_ptr().cast(), 1) };
            // SAFETY: _exit ends this child without running the parent's exit handlers.
            unsafe { libc::_exit(0) }
        }
        // The write end stays open in the launcher until it exits (ManuallyDrop).
        Ok(nix::unistd::ForkResult::Parent { .. }) | Err(_) => {
            let _ = w;
        }
    }
}

/// Starts the supervisor thread. Its failure (or a panic in the stack) stops the jail's
/// network, loudly; the command keeps running without it.
pub fn spawn(tun: OwnedFd, cfg: NetConfig) -> io::Result<()> {
    TUN_FD.store(tun.as_raw_fd(), std::sync::atomic::Ordering::Relaxed);
    std::thread::Builder::new().name("net".into()).spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(run(tun, cfg))
        }));
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("agent-sandbox: the jail's network stopped: {e}"),
            Err(_) => eprintln!("agent-sandbox: the jail's network stopped after an internal error (reported above)"),
        }
    })?;
    Ok(())
}

type Key = (SocketAddr, SocketAddr);

/// What async work reports back to the loop.
enum Event {
    Dialed {
        id: u64,
        result: io::Result<TcpStream>,
    },
    PeekTimeout {
        id: u64,
    },
    /// A DNS answer for the jail, from `from` (the address it asked) to `to`.
    DnsReply {
        from: SocketAddr,
        to: SocketAddr,
        data: Vec<u8>,
    },
    /// A host-side connection to a published port: connect into the jail.
    Published {
        stream: TcpStream,
        port: u16,
    },
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    /// Hostname port: the handshake is done, reading the first bytes for a name.
    Peeking,
    /// Waiting for the host connection (SYN-ACK held back, or the peeked bytes kept).
    Dialing,
    Relay,
}

struct TcpFlow {
    key: Key,
    handle: SocketHandle,
    phase: Phase,
    host: Option<TcpStream>,
    /// Bytes read from the jail while peeking, owed to the host before anything else; on a
    /// plain-HTTP flow, every byte from the jail waits here until the framer decided it.
    pending: Vec<u8>,
    /// Plain HTTP: how many bytes at the front of `pending` are decided and may go.
    approved: usize,
    /// The socket's buffer size each way, counted in `Supervisor::buffered`.
    buffer: usize,
    /// Plain HTTP to a name-ruled port: every request head is decided, not only the first.
    http: Option<Framer>,
    /// A later request on this connection was refused: nothing more from the jail goes out,
    /// and once the server has answered what it had (and closed), the jail gets this 403.
    refused_tail: Option<Vec<u8>>,
    host_eof: bool,
    shut_wr: bool,
    waker: Waker,
}

/// Flow ids whose host socket became ready, filled by the flows' wakers.
struct Ready {
    ids: Mutex<Vec<u64>>,
    notify: Notify,
}

struct FlowWaker {
    id: u64,
    ready: Arc<Ready>,
}

impl Wake for FlowWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Ok(mut ids) = self.ready.ids.lock() {
            ids.push(self.id);
        }
        self.ready.notify.notify_one();
    }
}

/// Writes denials to the audit log, at most `AUDIT_PER_SECOND`.
pub(crate) struct Auditor {
    log: Option<AuditLog>,
    mode: &'static str,
    window: Mutex<(Instant, u32)>,
}

impl Auditor {
    pub(crate) fn new(log: Option<AuditLog>, mode: &'static str) -> Auditor {
        Auditor { log, mode, window: Mutex::new((Instant::now(), 0)) }
    }

    pub(crate) fn deny(&self, proto: &str, dest: Option<SocketAddr>, name: Option<&str>, check: &str, d: &Decision) {
        tracing::info!(proto, ?dest, name, check, rule = d.rule.as_str(), reason = d.reason.as_str(), "network denial");
        let Some(log) = &self.log else { return };
        if let Ok(mut w) = self.window.lock() {
            if w.0.elapsed() >= Duration::from_secs(1) {
                *w = (Instant::now(), 0);
            }
            w.1 += 1;
            if w.1 > AUDIT_PER_SECOND {
                return;
            }
        }
        let mut r = log.record("net_denied");
        r.net = Some(self.mode.into());
        r.proto = Some(proto.into());
        r.dest = dest.map(|d| d.to_string());
        r.name = name.map(str::to_owned);
        r.check = Some(check.into());
        r.rule = Some(d.rule.clone());
        r.layer = Some(
            match d.layer {
                Layer::Floor => "floor",
                Layer::Admin => "admin",
                Layer::User => "user",
            }
            .into(),
        );
        r.reason = Some(d.reason.clone());
        log.write(&r);
    }
}

/// The shared, read-mostly state the resolver tasks need too.
struct Shared {
    rules: RuleSet,
    names: Mutex<NameCache>,
    upstreams: Vec<SocketAddr>,
    audit: Auditor,
}

impl Shared {
    /// Resolves one query from the jail: refuse, or forward and check the answer. Returns
    /// the reply (None: nothing to answer).
    async fn resolve(&self, query: &[u8]) -> Option<Vec<u8>> {
        let name = match dns::check_query(query, &self.rules) {
            dns::Verdict::Drop => return None,
            dns::Verdict::Answer { reply, denied } => {
                if let Some((name, d)) = denied {
                    self.audit.deny("dns", None, Some(&name), "dns", &d);
                }
                return Some(reply);
            }
            dns::Verdict::Forward { name, upstream } => (name, upstream),
        };
        let (name, upstream) = name;
        let servfail = || {
            let mut r = query.to_vec();
            // QR=1, keep opcode and RD; RA=1, RCODE=SERVFAIL; no answer sections.
            r[2] = (r[2] & 0x79) | 0x80;
            r[3] = 0x82;
            r.truncate(12);
            r[4..12].fill(0);
            r
        };
        let Some(answer) = dns::forward(&upstream, &self.upstreams).await else { return Some(servfail()) };
        let Some(checked) = dns::check_answer(&answer, &name, &self.rules) else { return Some(servfail()) };
        for (ip, d) in &checked.floored {
            self.audit.deny("dns", Some(SocketAddr::new(*ip, 0)), Some(&name), "dns-answer", d);
        }
        if let Ok(mut names) = self.names.lock() {
            let now = Instant::now();
            for (n, ip, ttl) in &checked.learned {
                names.learn(n, *ip, *ttl, now);
            }
        }
        Some(checked.reply)
    }

    /// Decides a flow to `dst`. `shown`: the name the flow itself carries (SNI or Host).
    fn decide(&self, dst: SocketAddr, proto: Proto, shown: Option<&str>) -> Decision {
        let ip = dst.ip();
        let port = dst.port();
        let known = self.names.lock().map(|n| n.names_for(ip, Instant::now())).unwrap_or_default();
        let by_address = || {
            if known.is_empty() {
                return self.rules.decide(&Destination { ip: Some(ip), name: None, port, proto });
            }
            // An address the jail resolved: allowed if the flow is allowed under one of the
            // names it was resolved for (the floors apply whatever the name).
            let mut first_denial = None;
            for n in &known {
                let d = self.rules.decide(&Destination { ip: Some(ip), name: Some(n), port, proto });
                if d.allowed {
                    return d;
                }
                first_denial.get_or_insert(d);
            }
            first_denial.unwrap_or_else(|| self.rules.decide(&Destination { ip: Some(ip), name: None, port, proto }))
        };
        let Some(name) = shown else { return by_address() };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let as_named = self.rules.decide(&Destination { ip: Some(ip), name: Some(&name), port, proto });
        if !as_named.allowed || known.contains(&name) || name.parse::<IpAddr>().is_ok() {
            return as_named;
        }
        // A name our resolver never gave for this address: the flow must also be allowed as
        // what the address is known to be, or a forged SNI would open any address.
        let d = by_address();
        if d.allowed {
            return as_named;
        }
        Decision {
            reason: format!("the name `{name}` was not resolved to {ip} by the jail's resolver, and {}", d.reason),
            ..d
        }
    }
}

struct Supervisor {
    shared: Arc<Shared>,
    stack: Stack,
    flows: HashMap<u64, TcpFlow>,
    by_key: HashMap<Key, u64>,
    next_id: u64,
    dirty: HashSet<u64>,
    /// Flows serviced since the last egress, to drop if their socket is done.
    serviced: Vec<u64>,
    ready: Arc<Ready>,
    events: UnboundedSender<Event>,
    udp: udp::Flows,
    udp_events: UnboundedSender<udp::Event>,
    hostname_ports: Vec<u16>,
    host_ports: Vec<u16>,
    dns_tcp: SocketAddr,
    /// Local ports of the gateway's connections into the jail (`--publish`).
    next_ephemeral: u16,
    /// Socket buffer bytes the open flows hold, against `stack::BUFFER_BUDGET`.
    buffered: usize,
}

async fn run(tun: OwnedFd, cfg: NetConfig) -> io::Result<()> {
    // Socket buffers are large and mostly idle: a fixed mmap threshold keeps them out of the
    // heap, so their pages are committed only when data moves through them.
    // SAFETY: mallopt only changes allocator tuning; called before the buffers exist.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
    let shared = Arc::new(Shared {
        rules: cfg.rules,
        names: Mutex::new(NameCache::default()),
        upstreams: cfg.upstreams,
        audit: Auditor::new(cfg.audit, cfg.mode),
    });
    let dns_tcp = serve_dns_tcp(shared.clone()).await?;
    let (events, mut events_rx) = unbounded_channel();
    for port in &cfg.publish {
        match tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, *port)).await {
            Ok(l) => {
                let (events, port) = (events.clone(), *port);
                tokio::spawn(async move {
                    loop {
                        let Some(stream) = accept_surviving(&l).await else { continue };
                        if events.send(Event::Published { stream, port }).is_err() {
                            return;
                        }
                    }
                });
            }
            Err(e) => eprintln!("agent-sandbox: warning: cannot publish port {port} on 127.0.0.1: {e}"),
        }
    }
    let (udp_events, mut udp_rx) = unbounded_channel();
    let raw = tun.as_raw_fd();
    // SAFETY: the AsyncFd owns the OwnedFd, so the descriptor stays open and the same for
    // the AsyncFd's whole life; the stack (dropped first: declared later) only borrows it.
    let tun_fd =
        unsafe { AsyncFd::register_with_interest(tun, tokio::io::Interest::READABLE) }.map_err(|e| e.into_parts().1)?;
    let stack = Stack::new(raw);
    let mut sup = Supervisor {
        shared,
        stack,
        flows: HashMap::new(),
        by_key: HashMap::new(),
        next_id: 1,
        dirty: HashSet::new(),
        serviced: vec![],
        ready: Arc::new(Ready { ids: Mutex::new(vec![]), notify: Notify::new() }),
        events,
        udp: udp::Flows::default(),
        udp_events,
        hostname_ports: cfg.hostname_ports,
        host_ports: cfg.host_ports,
        dns_tcp,
        next_ephemeral: 0,
        buffered: 0,
    };
    loop {
        sup.service_dirty();
        sup.stack.egress();
        // After egress: a socket closed by abort() still had its RST to send.
        sup.reap_serviced();
        let delay = sup.stack.delay().unwrap_or(Duration::from_secs(3600));
        let ready = sup.ready.clone();
        tokio::select! {
            biased;
            guard = tun_fd.readable() => {
                let mut guard = guard?;
                if sup.read_tun()? {
                    guard.clear_ready();
                }
            }
            Some(ev) = events_rx.recv() => sup.on_event(ev),
            Some(ev) = udp_rx.recv() => sup.on_udp_event(ev),
            _ = ready.notify.notified() => {
                let ids = ready.ids.lock().map(|mut v| std::mem::take(&mut *v)).unwrap_or_default();
                sup.dirty.extend(ids);
            }
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

impl Supervisor {
    /// Reads up to a batch of packets; true once the fd is drained.
    fn read_tun(&mut self) -> io::Result<bool> {
        for _ in 0..READ_BATCH {
            let len = match self.stack.read_packet() {
                Ok(p) => p.len(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if len == 0 {
                return Ok(true);
            }
            self.on_packet(len);
        }
        Ok(false)
    }

    fn on_packet(&mut self, len: usize) {
        match packet::summarize(self.stack.packet(len)) {
            Summary::Tcp { src, dst, syn, ack, rst } => {
                if let Some(id) = self.by_key.get(&(src, dst)) {
                    self.dirty.insert(*id);
                    self.stack.ingest(len);
                } else if syn && !ack && !rst {
                    self.on_syn(src, dst, len);
                } else {
                    // A segment of no flow: smoltcp answers RST (or nothing, to a RST).
                    self.stack.ingest(len);
                }
            }
            Summary::Udp { src, dst, payload } => self.on_udp(src, dst, len, payload),
            Summary::Echo { src, dst, ident, seq, data } => {
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
            Summary::Other => {}
        }
    }

    fn deny_packet(&mut self, len: usize, proto: &str, dst: SocketAddr, check: &str, d: &Decision) {
        self.shared.audit.deny(proto, Some(dst), None, check, d);
        if proto == "udp" {
            if let Some(r) = packet::prohibited(self.stack.packet(len)) {
                self.stack.write(&r);
            }
        } else {
            // No socket takes the SYN: smoltcp answers RST at once.
            self.stack.ingest(len);
        }
    }

    fn on_syn(&mut self, src: SocketAddr, dst: SocketAddr, len: usize) {
        if self.flows.len() >= MAX_TCP_FLOWS {
            let d = refusal("too many open connections in this jail");
            return self.deny_packet(len, "tcp", dst, "limit", &d);
        }
        let Some(buffer) = stack::buffer_for(self.buffered) else {
            let d = refusal(&format!(
                "the jail's open connections hold {} MiB of buffers, the session's limit; close some",
                stack::BUFFER_BUDGET >> 20
            ));
            return self.deny_packet(len, "tcp", dst, "limit", &d);
        };
        let port = dst.port();
        // DNS over TCP, to the gateway or to any server the jail names: our resolver.
        let target = if port == 53 {
            self.dns_tcp
        } else if addr::is_gateway(dst.ip()) {
            if !self.host_ports.contains(&port) {
                let d = refusal(&format!("the gateway serves DNS only; port {port} is not published with --host-port"));
                return self.deny_packet(len, "tcp", dst, "connect", &d);
            }
            let lo = if dst.is_ipv4() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { IpAddr::V6(Ipv6Addr::LOCALHOST) };
            SocketAddr::new(lo, port)
        } else if self.hostname_ports.contains(&port) {
            // Decided on the name its first bytes show: complete the handshake, then read.
            let floor =
                self.shared.rules.decide(&Destination { ip: Some(dst.ip()), name: None, port, proto: Proto::Tcp });
            if !floor.allowed && floor.layer == Layer::Floor {
                return self.deny_packet(len, "tcp", dst, "connect", &floor);
            }
            // The handshake completes before the name is known, so a dial that fails later
            // would reset a connection the client believed open, and it would not try the
            // name's other address. A host without an IPv6 route (most containers) answers
            // an AAAA address at once instead: the client falls back to IPv4 as usual.
            if !routable(dst) {
                tracing::debug!(%dst, "no route from the host: refused before the handshake");
                self.stack.ingest(len);
                return;
            }
            let Some(handle) = self.stack.accept(dst, len, false, buffer) else { return };
            let id = self.add_flow((src, dst), handle, Phase::Peeking, buffer);
            let events = self.events.clone();
            tokio::spawn(async move {
                tokio::time::sleep(PEEK_TIMEOUT).await;
                let _ = events.send(Event::PeekTimeout { id });
            });
            return;
        } else {
            let d = self.shared.decide(dst, Proto::Tcp, None);
            if !d.allowed {
                return self.deny_packet(len, "tcp", dst, "connect", &d);
            }
            dst
        };
        let Some(handle) = self.stack.accept(dst, len, true, buffer) else { return };
        let id = self.add_flow((src, dst), handle, Phase::Dialing, buffer);
        self.dial(id, target);
    }

    fn add_flow(&mut self, key: Key, handle: SocketHandle, phase: Phase, buffer: usize) -> u64 {
        self.buffered += 2 * buffer;
        let id = self.next_id;
        self.next_id += 1;
        let waker = Waker::from(Arc::new(FlowWaker { id, ready: self.ready.clone() }));
        let flow = TcpFlow {
            key,
            handle,
            phase,
            host: None,
            pending: vec![],
            approved: 0,
            buffer,
            http: None,
            refused_tail: None,
            host_eof: false,
            shut_wr: false,
            waker,
        };
        self.flows.insert(id, flow);
        self.by_key.insert(key, id);
        id
    }

    fn dial(&self, id: u64, target: SocketAddr) {
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(target)).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
            };
            let _ = events.send(Event::Dialed { id, result });
        });
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Dialed { id, result } => {
                let Some(flow) = self.flows.get_mut(&id) else { return };
                match result {
                    Ok(stream) => {
                        let _ = stream.set_nodelay(true);
                        flow.host = Some(stream);
                        flow.phase = Phase::Relay;
                        self.stack.socket(flow.handle).pause_synack(false);
                    }
                    Err(e) => {
                        tracing::debug!(dst = %flow.key.1, "dial failed: {e}");
                        self.stack.socket(flow.handle).abort();
                    }
                }
                self.dirty.insert(id);
            }
            Event::PeekTimeout { id } => {
                if let Some(flow) = self.flows.get(&id).filter(|f| f.phase == Phase::Peeking) {
                    // Silence has no name; a prefix that never completed hides one.
                    match peek::timed_out(&flow.pending) {
                        Peeked::Unreadable(what) => self.refuse_unreadable(id, what),
                        _ => self.decide_peeked(id, None, false),
                    }
                    self.dirty.insert(id);
                }
            }
            Event::Published { stream, port } => self.connect_in(stream, port),
            Event::DnsReply { from, to, data } => {
                if let Some(p) = packet::udp(from, to, &data) {
                    self.stack.write(&p);
                }
            }
        }
    }

    /// A published port: the gateway connects to the jail's port, and the host connection
    /// is relayed to it once established (a refused connect closes it).
    fn connect_in(&mut self, stream: TcpStream, port: u16) {
        if self.flows.len() >= MAX_TCP_FLOWS {
            return;
        }
        let Some(buffer) = stack::buffer_for(self.buffered) else { return };
        self.next_ephemeral = if self.next_ephemeral < 40000 { 40000 } else { self.next_ephemeral + 1 };
        let local = SocketAddr::new(IpAddr::V4(addr::GATEWAY_V4), self.next_ephemeral);
        // The jail's loopback (tun0 routes it, see route_localnet): reaches servers bound to
        // localhost as well as to every address.
        let remote = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        let Some(handle) = self.stack.connect(remote, local, buffer) else { return };
        let _ = stream.set_nodelay(true);
        let id = self.add_flow((remote, local), handle, Phase::Relay, buffer);
        if let Some(f) = self.flows.get_mut(&id) {
            f.host = Some(stream);
        }
        self.dirty.insert(id);
    }

    fn on_udp(&mut self, src: SocketAddr, dst: SocketAddr, len: usize, payload: (usize, usize)) {
        let data = self.stack.packet(len).get(payload.0..payload.1).unwrap_or_default().to_vec();
        if dst.port() == 53 {
            // DNS to the gateway or to any server: our resolver answers, as that server.
            let shared = self.shared.clone();
            let events = self.events.clone();
            tokio::spawn(async move {
                if let Some(reply) = shared.resolve(&data).await {
                    let _ = events.send(Event::DnsReply { from: dst, to: src, data: reply });
                }
            });
            return;
        }
        let key = (src, dst);
        if self.udp.send(&key, &data) {
            return;
        }
        if addr::is_gateway(dst.ip()) {
            if let Some(r) = packet::port_unreachable(self.stack.packet(len)) {
                self.stack.write(&r);
            }
            return;
        }
        if self.udp.len() >= udp::MAX_FLOWS {
            let d = refusal("too many UDP flows in this jail");
            return self.deny_packet(len, "udp", dst, "limit", &d);
        }
        let mut d = self.shared.decide(dst, Proto::Udp, None);
        if d.allowed && self.hostname_ports.contains(&dst.port()) && self.shared.rules.has_name_rules() {
            // QUIC carries its name encrypted: it cannot be matched, so clients fall back to TCP.
            d = Decision {
                allowed: false,
                rule: String::new(),
                layer: Layer::Floor,
                reason: format!("UDP to port {} (QUIC) cannot be matched by name; use TCP", dst.port()),
            };
        }
        if !d.allowed {
            return self.deny_packet(len, "udp", dst, "udp", &d);
        }
        if let Err(e) = self.udp.open(key, &data, self.udp_events.clone()) {
            tracing::debug!(%dst, "udp flow failed: {e}");
            if let Some(r) = packet::port_unreachable(self.stack.packet(len)) {
                self.stack.write(&r);
            }
        }
    }

    fn on_udp_event(&mut self, ev: udp::Event) {
        match ev {
            udp::Event::Reply { key, data } => {
                if let Some(p) = packet::udp(key.1, key.0, &data) {
                    self.stack.write(&p);
                }
            }
            udp::Event::Closed { key } => self.udp.close(&key),
        }
    }

    fn service_dirty(&mut self) {
        // Servicing may make more flows dirty (never the same one twice in a row).
        let mut rounds = 0;
        while !self.dirty.is_empty() && rounds < 4 {
            rounds += 1;
            let ids: Vec<u64> = self.dirty.drain().collect();
            for id in ids {
                self.service(id);
            }
        }
    }

    fn service(&mut self, id: u64) {
        let Some(phase) = self.flows.get(&id).map(|f| &f.phase) else { return };
        match phase {
            Phase::Peeking => self.service_peek(id),
            Phase::Dialing => {}
            Phase::Relay => self.pump(id),
        }
        self.serviced.push(id);
    }

    fn reap_serviced(&mut self) {
        for id in std::mem::take(&mut self.serviced) {
            self.reap(id);
        }
    }

    fn service_peek(&mut self, id: u64) {
        let Some(flow) = self.flows.get_mut(&id) else { return };
        let sock = self.stack.socket(flow.handle);
        while sock.can_recv() && flow.pending.len() < peek::MAX_PEEK {
            let room = peek::MAX_PEEK - flow.pending.len();
            let _ = sock.recv(|b| {
                let n = b.len().min(room);
                flow.pending.extend_from_slice(&b[..n]);
                (n, ())
            });
        }
        let closed = jail_sent_fin(sock);
        let peeked = if closed { peek::timed_out(&flow.pending) } else { peek::peek(&flow.pending) };
        match peeked {
            Peeked::NeedMore => {}
            Peeked::Unknown => self.decide_peeked(id, None, false),
            Peeked::Tls { sni } => self.decide_peeked(id, sni, false),
            Peeked::Http { host } => self.decide_peeked(id, host, true),
            Peeked::Unreadable(what) => self.refuse_unreadable(id, what),
        }
    }

    /// TLS or HTTP that hides its name: refused like a blocked name, never decided on the
    /// address alone.
    fn refuse_unreadable(&mut self, id: u64, what: &'static str) {
        let Some(flow) = self.flows.get_mut(&id) else { return };
        let d = peek::unreadable(what);
        self.shared.audit.deny("tcp", Some(flow.key.1), None, "peek", &d);
        let sock = self.stack.socket(flow.handle);
        if what.starts_with("HTTP") {
            // As for a refused name: plain HTTP carries the reason to whoever asked.
            let _ = sock.send_slice(&super::forbidden_response(flow.key.1, &d.reason));
            sock.close();
        } else {
            sock.abort();
        }
        flow.phase = Phase::Dialing; // no host will come: the socket closes and is reaped
    }

    fn decide_peeked(&mut self, id: u64, name: Option<String>, http: bool) {
        let Some(flow) = self.flows.get_mut(&id) else { return };
        let dst = flow.key.1;
        let d = self.shared.decide(dst, Proto::Tcp, name.as_deref());
        if d.allowed {
            if http {
                // Every later request head is decided too: the framer reads them all,
                // starting again from the first (decided again, the same way).
                flow.http = Some(Framer::default());
            }
            flow.phase = Phase::Dialing;
            self.dial(id, dst);
            return;
        }
        let check = if http {
            "http-host"
        } else if name.is_some() {
            "sni"
        } else {
            "connect"
        };
        self.shared.audit.deny("tcp", Some(dst), name.as_deref(), check, &d);
        let sock = self.stack.socket(flow.handle);
        if http {
            // Plain HTTP can carry the reason to whoever asked: one line an agent can act on.
            let _ = sock.send_slice(&super::forbidden_response(dst, &d.reason));
            sock.close();
        } else {
            sock.abort();
        }
        flow.phase = Phase::Dialing; // no host will come: the socket closes and is reaped
    }

    /// Moves bytes both ways until neither side can make progress, then registers the flow's
    /// waker for what it waits on.
    fn pump(&mut self, id: u64) {
        let Some(flow) = self.flows.get_mut(&id) else { return };
        let Some(host) = flow.host.as_ref() else { return };
        let sock = self.stack.socket(flow.handle);
        let mut cx = Context::from_waker(&flow.waker);
        let mut failed = false;
        loop {
            // jail → host: first the peeked bytes, then the socket's receive buffer; on plain
            // HTTP, only what the framer decided.
            let mut progress = match flow.http.as_mut() {
                // Refused: what the jail still sends is dropped, never relayed.
                Some(_) if flow.refused_tail.is_some() => {
                    sock.can_recv() && matches!(sock.recv(|b| (b.len(), b.len())), Ok(n) if n > 0)
                }
                Some(framer) => match jail_to_host_framed(
                    framer,
                    &mut flow.pending,
                    &mut flow.approved,
                    sock,
                    host,
                    &mut cx,
                    |name| self.shared.decide(flow.key.1, Proto::Tcp, name),
                ) {
                    Ok(p) => p,
                    Err(Stop::Broken) => {
                        failed = true;
                        false
                    }
                    Err(Stop::Refused { name, check, decision }) => {
                        // A later request: the answers to the ones before it may still be on
                        // their way. The server is told the requests ended, and the refused
                        // request's 403 follows its answers, in the place its own would have had.
                        self.shared.audit.deny("tcp", Some(flow.key.1), name.as_deref(), check, &decision);
                        flow.refused_tail = Some(super::forbidden_response(flow.key.1, &decision.reason));
                        flow.pending = Vec::new();
                        flow.shut_wr = true;
                        let _ = nix::sys::socket::shutdown(host.as_raw_fd(), nix::sys::socket::Shutdown::Write);
                        true
                    }
                },
                None => match jail_to_host(&mut flow.pending, sock, host, &mut cx) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::debug!(dst = %flow.key.1, "write to host failed: {e}");
                        failed = true;
                        false
                    }
                },
            };
            // host → jail, while the socket has room (else the jail's ACKs wake us).
            if !failed && !flow.host_eof && sock.can_send() {
                let framer = &mut flow.http;
                match sock.send(|b| match host.try_read(b) {
                    Ok(n) => {
                        // The server's answer to an upgrade decides what the jail's next bytes are.
                        let read = match framer.as_mut().filter(|f| f.awaits_response()) {
                            Some(f) => f.response(&b[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
                            None => Ok(()),
                        };
                        (n, read.map(|()| n))
                    }
                    Err(e) => (0, Err(e)),
                }) {
                    Ok(Ok(0)) => {
                        flow.host_eof = true;
                        progress = true;
                        if flow.refused_tail.is_none() {
                            sock.close();
                        }
                    }
                    Ok(Ok(_)) => progress = true,
                    Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        if let Poll::Ready(Ok(())) = host.poll_read_ready(&mut cx) {
                            progress = true;
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(dst = %flow.key.1, "read from host failed: {e}");
                        failed = true
                    }
                    Err(_) => {}
                }
            }
            // The server is done: the refused request's 403 goes last, then the jail's side closes.
            if flow.host_eof && sock.can_send() {
                if let Some(tail) = flow.refused_tail.as_mut().filter(|t| !t.is_empty()) {
                    let n = sock.send_slice(tail).unwrap_or(0);
                    tail.drain(..n);
                    if tail.is_empty() {
                        sock.close();
                    }
                    progress |= n > 0;
                }
            }
            if failed || !progress {
                break;
            }
        }
        if failed {
            // The host side reset or broke: so does the jail's.
            sock.abort();
            return;
        }
        // The jail closed its sending side and everything it sent is out: half-close the host.
        // A request head cut short by the FIN was never decided, so it never goes.
        if !flow.shut_wr && jail_sent_fin(sock) && sock.recv_queue() == 0 && flow.approved == 0 {
            let cut_short = flow.http.as_mut().is_some_and(|f| f.step(&flow.pending) == http1::Step::NeedMore);
            if cut_short {
                flow.pending.clear();
            }
            if flow.pending.is_empty() {
                flow.shut_wr = true;
                let _ = nix::sys::socket::shutdown(host.as_raw_fd(), nix::sys::socket::Shutdown::Write);
            }
        }
    }

    /// Drops a flow whose socket is done.
    fn reap(&mut self, id: u64) {
        let Some(flow) = self.flows.get(&id) else { return };
        let state = self.stack.socket(flow.handle).state();
        if !matches!(state, tcp::State::Closed | tcp::State::TimeWait) {
            return;
        }
        let Some(flow) = self.flows.remove(&id) else { return };
        self.by_key.remove(&flow.key);
        self.stack.remove(flow.handle);
        self.buffered -= 2 * flow.buffer;
        if let Some(host) = flow.host {
            // Closed without both FINs: the jail reset the connection, and so do we.
            if !(flow.host_eof && flow.shut_wr) {
                let _ = host.set_zero_linger();
            }
        }
    }
}

/// Has the jail closed its sending side? (`!may_recv()` is also true before the handshake
/// completes, which is not a FIN.)
fn jail_sent_fin(sock: &tcp::Socket) -> bool {
    use tcp::State::*;
    matches!(sock.state(), CloseWait | LastAck | Closing | TimeWait | Closed)
}

/// Why a plain-HTTP flow stops relaying.
enum Stop {
    /// The host connection broke.
    Broken,
    /// A request the jail sent was refused (or cannot be framed): audit, then end the flow.
    Refused { name: Option<String>, check: &'static str, decision: Decision },
}

/// Plain-HTTP flows buffer at most this much from the jail while a head is read.
const FRAMED_BUF: usize = 64 * 1024;

/// One round of jail → host for a flow decided on its first bytes: the peeked bytes, then the
/// socket's receive buffer, written straight from smoltcp's buffer. Ok(progress).
fn jail_to_host(pending: &mut Vec<u8>, sock: &mut tcp::Socket, host: &TcpStream, cx: &mut Context) -> io::Result<bool> {
    if !pending.is_empty() {
        return match host.try_write(pending) {
            Ok(n) => {
                pending.drain(..n);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Ok(matches!(host.poll_write_ready(cx), Poll::Ready(Ok(()))))
            }
            Err(e) => Err(e),
        };
    }
    if !sock.can_recv() {
        return Ok(false);
    }
    match sock.recv(|b| match host.try_write(b) {
        Ok(n) => (n, Ok(n)),
        Err(e) => (0, Err(e)),
    }) {
        Ok(Ok(n)) => Ok(n > 0),
        Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {
            Ok(matches!(host.poll_write_ready(cx), Poll::Ready(Ok(()))))
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(false),
    }
}

/// One round of jail → host for plain HTTP: the jail's bytes wait in `pending` until the
/// framer places them; each request head is decided (`decide`) before a byte of it goes, and
/// `approved` counts the decided bytes at the front. Ok(progress).
fn jail_to_host_framed(
    framer: &mut Framer,
    pending: &mut Vec<u8>,
    approved: &mut usize,
    sock: &mut tcp::Socket,
    host: &TcpStream,
    cx: &mut Context,
    decide: impl Fn(Option<&str>) -> Decision,
) -> Result<bool, Stop> {
    if *approved > 0 {
        return match host.try_write(&pending[..*approved]) {
            Ok(n) => {
                pending.drain(..n);
                *approved -= n;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Ok(matches!(host.poll_write_ready(cx), Poll::Ready(Ok(()))))
            }
            Err(_) => Err(Stop::Broken),
        };
    }
    let mut progress = false;
    while pending.len() < FRAMED_BUF && sock.can_recv() {
        let room = FRAMED_BUF - pending.len();
        match sock.recv(|b| {
            let n = b.len().min(room);
            pending.extend_from_slice(&b[..n]);
            (n, n)
        }) {
            Ok(n) if n > 0 => progress = true,
            _ => break,
        }
    }
    match framer.step(pending) {
        http1::Step::Forward(n) => {
            *approved = n;
            Ok(true)
        }
        http1::Step::Decide(head) => {
            let d = decide(head.host.as_deref());
            if !d.allowed {
                return Err(Stop::Refused { name: head.host, check: "http-host", decision: d });
            }
            framer.accept(&head);
            *approved = head.len;
            Ok(true)
        }
        http1::Step::NeedMore | http1::Step::Hold => Ok(progress),
        http1::Step::Refuse(what) => Err(Stop::Refused { name: None, check: "peek", decision: peek::unreadable(what) }),
    }
}

fn refusal(reason: &str) -> Decision {
    Decision { allowed: false, rule: String::new(), layer: Layer::Floor, reason: reason.to_owned() }
}

/// Whether the host has a route to `dst`: connecting a UDP socket sends nothing and fails at
/// once without one (ENETUNREACH, or EADDRNOTAVAIL for a family the host has no address of).
fn routable(dst: SocketAddr) -> bool {
    let any: SocketAddr =
        if dst.is_ipv4() { (Ipv4Addr::UNSPECIFIED, 0).into() } else { (Ipv6Addr::UNSPECIFIED, 0).into() };
    match std::net::UdpSocket::bind(any).and_then(|s| s.connect(dst)) {
        Ok(()) => true,
        Err(e) => !matches!(
            e.raw_os_error(),
            Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) | Some(libc::EADDRNOTAVAIL) | Some(libc::EAFNOSUPPORT)
        ),
    }
}

/// DNS over TCP: the jail's TCP flows to port 53 are dialled here, a listener on host
/// loopback that answers through the same resolver as UDP.
async fn serve_dns_tcp(shared: Arc<Shared>) -> io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            if let Some(conn) = accept_surviving(&listener).await {
                tokio::spawn(dns_tcp_conn(conn, shared.clone()));
            }
        }
    });
    Ok(local)
}

/// One `accept`, or None after a pause if it failed: out of descriptors (EMFILE, ENFILE: the
/// session holds many connections), out of memory, a connection reset while queued. None of
/// these ends a listener: it serves again once descriptors are free.
async fn accept_surviving(listener: &tokio::net::TcpListener) -> Option<TcpStream> {
    match listener.accept().await {
        Ok((conn, _)) => Some(conn),
        Err(e) => {
            tracing::debug!("accept failed, retrying: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

async fn dns_tcp_conn(mut conn: TcpStream, shared: Arc<Shared>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const IDLE: Duration = Duration::from_secs(10);
    loop {
        let mut len = [0u8; 2];
        if !matches!(tokio::time::timeout(IDLE, conn.read_exact(&mut len)).await, Ok(Ok(_))) {
            return;
        }
        let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if !matches!(tokio::time::timeout(IDLE, conn.read_exact(&mut query)).await, Ok(Ok(_))) {
            return;
        }
        let Some(reply) = shared.resolve(&query).await else { return };
        let Ok(n) = u16::try_from(reply.len()) else { return };
        let mut framed = n.to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        if conn.write_all(&framed).await.is_err() {
            return;
        }
    }
}
