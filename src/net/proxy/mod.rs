//! The `proxied` mode: the jail's network namespace has only `lo`; its init binds an HTTP
//! proxy (127.0.0.1:3128: CONNECT and absolute-URI requests) and a SOCKS5 proxy
//! (127.0.0.1:1080: CONNECT with names or addresses) there and hands the listening sockets
//! out. This supervisor accepts on them from outside, resolves names on the host, checks the
//! name and every address with the matcher, and dials the address it checked. A refusal is
//! an HTTP 403 with the reason, or SOCKS reply 2 ("connection not allowed by ruleset").
//!
//! The protocols are parsed by kept crates (hyper for HTTP/1, fast-socks5 for SOCKS5); every
//! decision is ours, with the same matcher and name rules as `filtered` mode:
//! - every request of a forwarded (absolute-URI) connection is decided, keep-alive or not, and
//!   its `Host` header must name the host of its target (`http.rs`);
//! - a CONNECT or SOCKS5 tunnel to a hostname port (80 and 443 by default) has its first bytes
//!   read for the TLS server name or HTTP `Host`, which must be the name the tunnel was opened
//!   for (or, for a tunnel to an address, be allowed itself); otherwise the tunnel is closed
//!   (`tunnel` below). Past that point a tunnel's bytes are relayed untouched, as `filtered`
//!   relays a flow it decided.

pub(crate) mod http;
mod socks;

use super::parse::peek::{self, Peeked};
use crate::net::audit::Auditor;
use crate::net::config::Common;
use crate::netrules::matcher::{normalize_name, Decision, Destination, Layer, Proto, RuleSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;

pub use crate::netrules::addr::{HTTP_PORT, SOCKS_PORT};
/// A client gets this long to send a request head (each one, on a kept-alive connection) or
/// its SOCKS handshake.
const HANDSHAKE: Duration = Duration::from_secs(30);
const DIAL_TIMEOUT: Duration = Duration::from_secs(20);
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a tunnel to a hostname port may stay silent before it is relayed without a name
/// (server-speaks-first protocols), as `filtered` mode waits.
const PEEK_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest HTTP request head accepted (a 1 MiB header gets 431).
const MAX_HEAD: usize = 64 * 1024;
/// Connections served at once per session; more wait in the listen queue.
const MAX_CONNS: usize = 1024;

struct Ctx {
    rules: RuleSet,
    upstreams: Vec<SocketAddr>,
    /// Tunnels to these ports are matched on their TLS SNI / HTTP Host, as in `filtered`.
    hostname_ports: Vec<u16>,
    audit: Auditor,
    slots: Arc<tokio::sync::Semaphore>,
}

/// A connection's place among `MAX_CONNS`, shared with the tunnel it may become (hyper hands
/// an upgraded connection to another task, which must keep the place).
type Slot = Arc<OwnedSemaphorePermit>;

/// Starts the proxies on the listeners the jail's init made (`[http, socks]`).
pub fn spawn(listeners: Vec<OwnedFd>, cfg: Common) -> io::Result<()> {
    let mut it = listeners.into_iter();
    let (Some(http), Some(socks)) = (it.next(), it.next()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the jail handed out no proxy listeners"));
    };
    let http = std::net::TcpListener::from(http);
    let socks = std::net::TcpListener::from(socks);
    http.set_nonblocking(true)?;
    socks.set_nonblocking(true)?;
    let control = cfg.control.clone().map(|path| (path, cfg.rules.clone(), cfg.audit.clone(), cfg.grant_bound.clone()));
    let ctx = Arc::new(Ctx {
        rules: cfg.rules,
        upstreams: cfg.upstreams,
        hostname_ports: cfg.hostname_ports,
        audit: Auditor::new(cfg.audit, "proxied"),
        slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONNS)),
    });
    super::spawn_service("proxy", "the jail's proxies", move || async move {
        let http = TcpListener::from_std(http)?;
        let socks = TcpListener::from_std(socks)?;
        if let Some((path, rules, audit, bound)) = control {
            tokio::spawn(crate::net::control::serve(path, rules, audit, bound));
        }
        tokio::spawn(accept_loop(socks, ctx.clone(), Kind::Socks));
        accept_loop(http, ctx, Kind::Http).await;
        Ok(())
    })
}

#[derive(Clone, Copy)]
enum Kind {
    Http,
    Socks,
}

async fn accept_loop(listener: TcpListener, ctx: Arc<Ctx>, kind: Kind) {
    loop {
        let Ok(permit) = ctx.slots.clone().acquire_owned().await else { return };
        let conn = match listener.accept().await {
            Ok((c, _)) => c,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ctx = ctx.clone();
        let slot = Arc::new(permit);
        tokio::spawn(async move {
            match kind {
                Kind::Http => http::serve(conn, ctx, slot).await,
                Kind::Socks => socks::serve(conn, ctx, slot).await,
            }
        });
    }
}

/// Why a destination cannot be dialled.
enum Refusal {
    Denied(Decision, Option<SocketAddr>),
    Unresolvable(String),
}

/// Resolves `host` on the host side and returns the first address the matcher allows for
/// this name and port. The name alone is checked first (nothing is resolved for a blocked
/// name), then every address (rebinding: a name resolving to loopback is refused).
async fn admit(ctx: &Ctx, host: &str, port: u16) -> Result<SocketAddr, Refusal> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        let d = ctx.rules.decide(&Destination { ip: Some(ip), name: None, port, proto: Proto::Tcp });
        let addr = SocketAddr::new(ip, port);
        return if d.allowed { Ok(addr) } else { Err(Refusal::Denied(d, Some(addr))) };
    }
    let d = ctx.rules.decide(&Destination { ip: None, name: Some(host), port, proto: Proto::Tcp });
    if !d.allowed {
        return Err(Refusal::Denied(d, None));
    }
    // The same resolvers as the filtered mode's (net.dns, or the host's nameservers), then
    // the host's own lookup (its hosts file and NSS: cluster node names).
    let mut addrs: Vec<SocketAddr> =
        super::dns::resolve(host, &ctx.upstreams).await.into_iter().map(|ip| SocketAddr::new(ip, port)).collect();
    if addrs.is_empty() {
        addrs = match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await {
            Ok(Ok(a)) => a.collect(),
            Ok(Err(e)) => return Err(Refusal::Unresolvable(format!("cannot resolve {host}: {e}"))),
            Err(_) => return Err(Refusal::Unresolvable(format!("resolving {host} timed out"))),
        };
    }
    let mut first_denial = None;
    for addr in addrs {
        let d = ctx.rules.decide(&Destination { ip: Some(addr.ip()), name: Some(host), port, proto: Proto::Tcp });
        if d.allowed {
            return Ok(addr);
        }
        first_denial.get_or_insert((d, addr));
    }
    match first_denial {
        Some((d, addr)) => Err(Refusal::Denied(d, Some(addr))),
        None => Err(Refusal::Unresolvable(format!("{host} has no address"))),
    }
}

/// Why `Ctx::open` did not give a connection, as one line for the client.
#[derive(Debug)]
enum OpenError {
    /// The policy refused it (HTTP 403, SOCKS reply 2); already audited.
    Denied(String),
    /// It could not be resolved or dialled (HTTP 502, SOCKS reply 4).
    Failed(String),
}

/// An open connection to an admitted destination, and what the client asked for.
struct Opened {
    upstream: TcpStream,
    /// The host as the client named it (a name, or an address literal).
    requested: String,
    /// The address dialled.
    addr: SocketAddr,
}

impl Ctx {
    /// Admits and dials; a refusal is audited.
    async fn open(&self, host: &str, port: u16, check: &str) -> Result<Opened, OpenError> {
        match admit(self, host, port).await {
            Ok(addr) => match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    Ok(Opened { upstream: s, requested: host.to_owned(), addr })
                }
                Ok(Err(e)) => Err(OpenError::Failed(format!("cannot connect to {host}:{port} ({addr}): {e}"))),
                Err(_) => Err(OpenError::Failed(format!("connecting to {host}:{port} ({addr}) timed out"))),
            },
            Err(Refusal::Denied(d, addr)) => {
                let dest = addr.map(|a| a.to_string()).unwrap_or_else(|| format!("{host}:{port}"));
                self.audit.deny("tcp", addr, Some(host), check, &d);
                Err(OpenError::Denied(format!("agent-sandbox: {dest} refused by the network policy: {}", d.reason)))
            }
            Err(Refusal::Unresolvable(why)) => Err(OpenError::Failed(why)),
        }
    }

    /// A name a flow shows (`what`: "TLS server name", "Host header") on its way to `ip:port`,
    /// where the client asked for `requested`. Refused when the rules block the name there, or
    /// when the client asked for another name: a flow may not carry a name it was not decided
    /// on. A flow to an address literal may show any name the rules allow to that address
    /// (the address itself was allowed bare, as `filtered` allows a name the resolver never
    /// gave only if the address passes on its own).
    fn check_shown(&self, requested: &str, ip: IpAddr, port: u16, shown: &str, what: &str) -> Result<(), Decision> {
        let d = self.rules.decide(&Destination { ip: Some(ip), name: Some(shown), port, proto: Proto::Tcp });
        if !d.allowed {
            return Err(d);
        }
        let requested = requested.trim_start_matches('[').trim_end_matches(']');
        if requested.parse::<IpAddr>().is_ok() {
            return Ok(());
        }
        if same_name(requested, shown) {
            return Ok(());
        }
        Err(mismatch(requested, shown, what))
    }
}

/// The refusal of a flow that shows a name other than the one it was decided on.
fn mismatch(requested: &str, shown: &str, what: &str) -> Decision {
    Decision {
        allowed: false,
        rule: String::new(),
        layer: Layer::Floor,
        reason: format!("the {what} `{shown}` is not `{requested}`, the host this connection was opened for"),
    }
}

/// Two spellings of one host: names compared as the matcher normalizes them (case, trailing
/// dot, Unicode as punycode), address literals as addresses.
fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim_start_matches('[').trim_end_matches(']'), b.trim_start_matches('[').trim_end_matches(']'));
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(x), Ok(y)) => x == y,
        (Err(_), Err(_)) => matches!((normalize_name(a), normalize_name(b)), (Ok(x), Ok(y)) if x == y),
        _ => false,
    }
}

/// What a tunnel's first bytes show.
enum Shown {
    Tls(String),
    /// An HTTP/1 request, with its Host if it sent one (HTTP/1.0 need not): framed either way,
    /// so that every later request is decided.
    Http(Option<String>),
    /// TLS or HTTP that hides its name (split past the bound, cut short, ambiguous): refused.
    Unreadable(&'static str),
    /// A TLS hello without SNI: decided on the destination alone, which was already allowed.
    Nothing,
    /// Neither TLS nor HTTP, or silence: refused where names are ruled, unless
    /// `peek::nameless_may_pass`.
    Other,
}

/// Reads a tunnel's first bytes (at most `peek::MAX_PEEK`, `PEEK_TIMEOUT`) into `buf` until
/// they show a name or cannot. Err: the client's connection broke.
async fn read_shown<C: AsyncRead + Unpin>(client: &mut C, buf: &mut Vec<u8>) -> io::Result<Shown> {
    let deadline = tokio::time::Instant::now() + PEEK_TIMEOUT;
    loop {
        match peek::peek(buf) {
            Peeked::NeedMore => {}
            Peeked::Tls { sni: Some(n) } => return Ok(Shown::Tls(n)),
            Peeked::Http { host } => return Ok(Shown::Http(host)),
            Peeked::Tls { sni: None } => return Ok(Shown::Nothing),
            Peeked::Unknown => return Ok(Shown::Other),
            Peeked::Unreadable(what) => return Ok(Shown::Unreadable(what)),
        }
        let mut chunk = [0u8; 4096];
        let room = peek::MAX_PEEK.saturating_sub(buf.len()).min(chunk.len());
        let ended = |buf: &[u8]| match peek::timed_out(buf) {
            Peeked::Unreadable(what) => Shown::Unreadable(what),
            Peeked::Tls { sni: Some(n) } => Shown::Tls(n),
            Peeked::Http { host } => Shown::Http(host),
            Peeked::Tls { sni: None } => Shown::Nothing,
            Peeked::Unknown | Peeked::NeedMore => Shown::Other,
        };
        if room == 0 {
            return Ok(ended(buf));
        }
        match tokio::time::timeout_at(deadline, client.read(&mut chunk[..room])).await {
            Ok(Ok(0)) | Err(_) => return Ok(ended(buf)),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(e),
        }
    }
}

/// A fatal TLS alert, access_denied (49), in a plaintext record: what a client sees instead of
/// a ServerHello when its server name is refused ("tlsv1 alert access denied").
const TLS_ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49];

/// Serves an established tunnel: to a hostname port, its first bytes must show the name it
/// was opened for (see `Ctx::check_shown`); then both ways are relayed until both are done.
async fn tunnel<C: AsyncRead + AsyncWrite + Unpin>(ctx: &Ctx, mut client: C, opened: Opened, check_proto: &str) {
    let Opened { mut upstream, requested, addr } = opened;
    if ctx.hostname_ports.contains(&addr.port()) {
        let mut first = Vec::with_capacity(4096);
        let shown = match read_shown(&mut client, &mut first).await {
            Ok(s) => s,
            Err(_) => return,
        };
        let refuse = |what: &'static str| {
            let d = peek::unreadable(what);
            ctx.audit.deny("tcp", Some(addr), None, "peek", &d);
            d.reason
        };
        let (name, what, check, http) = match &shown {
            Shown::Tls(n) => (Some(n.as_str()), "TLS server name", "sni", false),
            Shown::Http(h) => (h.as_deref(), "Host header", "http-host", true),
            Shown::Nothing => (None, "", "", false),
            Shown::Other if ctx.rules.has_name_rules() && !peek::nameless_may_pass(&first) => {
                let reason = refuse(peek::NAMELESS);
                return refuse_tunnel(&mut client, addr, &reason, false).await;
            }
            Shown::Other => (None, "", "", false),
            Shown::Unreadable(what) => {
                let reason = refuse(what);
                return refuse_tunnel(&mut client, addr, &reason, what.starts_with("HTTP")).await;
            }
        };
        if let Some(name) = name {
            if let Err(d) = ctx.check_shown(&requested, addr.ip(), addr.port(), name, what) {
                ctx.audit.deny("tcp", Some(addr), Some(name), check, &d);
                tracing::debug!(proxy = check_proto, %addr, name, "tunnel refused on the name it shows");
                return refuse_tunnel(&mut client, addr, &d.reason, http).await;
            }
        }
        if http {
            // Every later request in the tunnel must show the same name: the framer reads
            // them all (the first again, which passes as it just did).
            return relay_http(ctx, client, upstream, first, &requested, addr).await;
        }
        if !first.is_empty() && upstream.write_all(&first).await.is_err() {
            return;
        }
    }
    let _ = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, 64 << 10, 64 << 10).await;
}

/// Relays a plain-HTTP tunnel request by request: each head is checked as the first one was
/// (`Ctx::check_shown`) before a byte of it goes upstream. A refused or unframeable request is
/// never sent: the server is told the requests ended, its answers to the earlier ones reach the
/// client, and the refused request's 403 follows them, in the place its own answer would have
/// had. Answers flow back untouched.
async fn relay_http<C: AsyncRead + AsyncWrite + Unpin>(
    ctx: &Ctx,
    client: C,
    mut upstream: TcpStream,
    first: Vec<u8>,
    requested: &str,
    addr: SocketAddr,
) {
    use super::parse::http1::{Framer, Step};
    const BUF: usize = 64 << 10;
    let (mut from_client, mut to_client) = tokio::io::split(client);
    let (mut from_up, mut to_up) = upstream.split();
    let mut framer = Framer::default();
    let mut pending = first;
    let (mut client_eof, mut up_eof, mut up_shut) = (false, false, false);
    let mut refused: Option<Vec<u8>> = None;
    let mut answer = vec![0u8; BUF];
    let mut chunk = vec![0u8; BUF];
    loop {
        // Everything decidable in `pending` goes upstream first.
        while refused.is_none() {
            let n = match framer.step(&pending) {
                Step::Forward(n) => n,
                Step::Decide(head) => {
                    let shown = head.host.as_deref();
                    match shown.map(|n| ctx.check_shown(requested, addr.ip(), addr.port(), n, "Host header")) {
                        Some(Err(d)) => {
                            ctx.audit.deny("tcp", Some(addr), shown, "http-host", &d);
                            refused = Some(super::forbidden_response(addr, &d.reason));
                            break;
                        }
                        _ => framer.accept(&head),
                    }
                    head.len
                }
                Step::NeedMore | Step::Hold => break,
                Step::Refuse(what) => {
                    let d = peek::unreadable(what);
                    ctx.audit.deny("tcp", Some(addr), None, "peek", &d);
                    refused = Some(super::forbidden_response(addr, &d.reason));
                    break;
                }
            };
            if to_up.write_all(&pending[..n]).await.is_err() {
                return;
            }
            pending.drain(..n);
        }
        // A refusal, or a head cut short by the client's end (never decided, never sent):
        // the server is told the requests ended.
        let cut_short = client_eof && framer.step(&pending) == Step::NeedMore;
        if !up_shut && (refused.is_some() || cut_short) {
            pending = Vec::new();
            up_shut = true;
            let _ = to_up.shutdown().await;
        }
        if up_eof && (client_eof || refused.is_some()) {
            if let Some(tail) = refused {
                let _ = to_client.write_all(&tail).await;
                let _ = to_client.shutdown().await;
            }
            return;
        }
        let want_client = !client_eof && pending.len() < BUF;
        tokio::select! {
            r = from_client.read(&mut chunk), if want_client => match r {
                Ok(0) | Err(_) => client_eof = true,
                // After a refusal nothing more from the client is relayed.
                Ok(n) if refused.is_none() => pending.extend_from_slice(&chunk[..n]),
                Ok(_) => {}
            },
            r = from_up.read(&mut answer), if !up_eof => match r {
                Ok(0) | Err(_) => {
                    up_eof = true;
                    if refused.is_none() {
                        let _ = to_client.shutdown().await;
                    }
                }
                Ok(n) => {
                    if framer.awaits_response() && framer.response(&answer[..n]).is_err() {
                        return;
                    }
                    if to_client.write_all(&answer[..n]).await.is_err() {
                        return;
                    }
                }
            },
            else => return,
        }
    }
}

/// Closes a refused tunnel the way its client understands: plain HTTP gets the 403 with the
/// reason (as in `filtered`), TLS a fatal `access_denied` alert.
async fn refuse_tunnel<C: AsyncWrite + Unpin>(client: &mut C, addr: SocketAddr, reason: &str, http: bool) {
    let reply = if http { super::forbidden_response(addr, reason) } else { TLS_ACCESS_DENIED.to_vec() };
    let _ = client.write_all(&reply).await;
    let _ = client.shutdown().await;
}

/// `host:port` (with `[v6]:port`), the port defaulting to `default`.
fn split_authority(auth: &str, default: u16) -> Option<(String, u16)> {
    if let Some(rest) = auth.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default,
            None => return None,
        };
        return Some((host.to_owned(), port));
    }
    match auth.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((auth.to_owned(), default)),
    }
    .filter(|(h, _)| !h.is_empty() && !h.contains(['/', '@', ' ']))
}

/// For the fuzz target: serves one connection whose client sends `data` and then closes,
/// under a policy that blocks everything. Returns when the server is done with it.
#[doc(hidden)]
pub fn fuzz_one(http: bool, data: &[u8]) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    let rules = vec![("*".to_string(), crate::netrules::matcher::Action::Block, crate::netrules::matcher::Layer::User)];
    let Ok(rules) = RuleSet::new(&rules, Default::default()) else { return };
    let ctx = Arc::new(Ctx {
        rules,
        upstreams: vec![],
        hostname_ports: vec![80, 443],
        audit: Auditor::new(None, "proxied"),
        slots: Arc::new(tokio::sync::Semaphore::new(1)),
    });
    rt.block_on(async move {
        let Ok(permit) = ctx.slots.clone().acquire_owned().await else { return };
        let Ok(listener) = TcpListener::bind("127.0.0.1:0").await else { return };
        let Ok(addr) = listener.local_addr() else { return };
        let Ok(mut client) = TcpStream::connect(addr).await else { return };
        let Ok((server, _)) = listener.accept().await else { return };
        let _ = client.write_all(data).await;
        let _ = client.shutdown().await;
        let slot = Arc::new(permit);
        let serve = async {
            if http {
                http::serve(server, ctx, slot).await
            } else {
                socks::serve(server, ctx, slot).await
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), serve).await.is_err() {
            panic!("the proxy hung on a client that had closed");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netrules::matcher::{Action, MatcherOptions};

    fn ctx(rules: &[(&str, Action)]) -> Ctx {
        let rules: Vec<_> = rules.iter().map(|(r, a)| (r.to_string(), *a, Layer::User)).collect();
        let opts = MatcherOptions { deny_private: true, ..Default::default() };
        Ctx {
            rules: RuleSet::new(&rules, opts).expect("rules"),
            upstreams: vec![],
            hostname_ports: vec![80, 443],
            audit: Auditor::new(None, "proxied"),
            slots: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 2));

    #[test]
    fn a_tunnel_may_show_only_the_name_it_was_opened_for() {
        let c = ctx(&[("blocked.test", Action::Block)]);
        assert!(c.check_shown("allowed.test", IP, 443, "allowed.test", "TLS server name").is_ok());
        assert!(c.check_shown("Allowed.Test.", IP, 443, "allowed.test", "TLS server name").is_ok());
        let d = c.check_shown("allowed.test", IP, 443, "blocked.test", "TLS server name").unwrap_err();
        assert_eq!(d.rule, "blocked.test", "a blocked name is refused by its own rule: {d:?}");
        let d = c.check_shown("allowed.test", IP, 443, "other.test", "TLS server name").unwrap_err();
        assert!(d.reason.contains("`other.test` is not `allowed.test`"), "{d:?}");
        assert!(c.check_shown("allowed.test", IP, 443, "198.51.100.2", "Host header").is_err());
    }

    #[test]
    fn a_tunnel_to_an_address_may_show_any_name_the_rules_allow_there() {
        let c = ctx(&[("blocked.test", Action::Block)]);
        assert!(c.check_shown("198.51.100.2", IP, 443, "allowed.test", "TLS server name").is_ok());
        assert!(c.check_shown("[2001:db8::1]", IP, 443, "allowed.test", "TLS server name").is_ok());
        assert!(c.check_shown("198.51.100.2", IP, 443, "blocked.test", "TLS server name").is_err());
        // An address literal as the name must be the address dialled.
        assert!(c.check_shown("198.51.100.2", IP, 443, "198.51.100.2", "Host header").is_ok());
        assert!(c.check_shown("198.51.100.2", IP, 443, "198.51.100.9", "Host header").is_err());
        let allow_list = ctx(&[("*", Action::Block), ("allowed.test", Action::Allow), ("198.51.100.2", Action::Allow)]);
        assert!(allow_list.check_shown("198.51.100.2", IP, 443, "other.test", "TLS server name").is_ok());
        let names_only = ctx(&[("*", Action::Block), ("allowed.test", Action::Allow)]);
        assert!(names_only.check_shown("198.51.100.2", IP, 443, "other.test", "TLS server name").is_err());
    }

    #[test]
    fn authorities_split_with_default_ports_and_refuse_junk() {
        assert_eq!(split_authority("allowed.test:8080", 80), Some(("allowed.test".into(), 8080)));
        assert_eq!(split_authority("allowed.test", 443), Some(("allowed.test".into(), 443)));
        assert_eq!(split_authority("[2001:db8::1]:443", 80), Some(("2001:db8::1".into(), 443)));
        assert_eq!(split_authority("[2001:db8::1]", 80), Some(("2001:db8::1".into(), 80)));
        for bad in ["", ":80", "user@host", "a/b", "host:x", "[::1]x", "[::1"] {
            assert_eq!(split_authority(bad, 80), None, "{bad:?}");
        }
    }

    #[test]
    fn garbage_and_truncated_requests_neither_panic_nor_hang() {
        let mut huge = b"GET http://a.test/ HTTP/1.1\r\nX: ".to_vec();
        huge.resize(300_000, b'a');
        let http: &[&[u8]] = &[
            b"",
            b"\x00\xff\x16\x03",
            b"CONNECT\r\n\r\n",
            b"CONNECT a.test:443 HTTP/1.1\r\n\r\n\x16\x03\x01",
            b"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\nGET http://c.test/ HTTP/1.1\r\n\r\n",
            b"GET /relative HTTP/1.1\r\n\r\n",
            b"POST http://a.test/ HTTP/1.1\r\nContent-Length: 99999\r\n\r\nabc",
            b"GET http://a.test/ HTTP/1.1\r\nHost: a.te",
            &huge,
        ];
        for data in http {
            fuzz_one(true, data);
        }
        let socks: &[&[u8]] = &[
            b"",
            b"\x04\x01\x00\x50",
            b"\x05\x01\x00\x05\x01\x00\x03\xff",
            b"\x05\x01\x00\x05\x01\x00\x03\x00\x00\x50",
            b"\x05\x01\x00\x05\x03\x00\x01\x7f\x00\x00\x01\x00\x35",
            b"\x05\x01\x00\x05\x01\x00\x09",
            b"\x05\x01\x02",
        ];
        for data in socks {
            fuzz_one(false, data);
        }
    }

    #[test]
    fn read_shown_stops_at_a_name_silence_or_the_bound() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let hello = include_bytes!("../../../tests/fixtures/clienthello-sni.bin");
            let mut buf = vec![];
            let mut src: &[u8] = hello;
            match read_shown(&mut src, &mut buf).await {
                Ok(Shown::Tls(n)) => assert_eq!(n, "api.example.org"),
                _ => panic!("the fixture names api.example.org"),
            }
            let mut buf = vec![];
            let mut src: &[u8] = b"GET / HTTP/1.1\r\nHost: Blocked.Test:80\r\n\r\n";
            assert!(matches!(read_shown(&mut src, &mut buf).await, Ok(Shown::Http(Some(h))) if h == "blocked.test"));
            // A client that closes early, and one that never stops sending a head.
            let mut buf = vec![];
            // A head cut short (the rest could follow after the peek gives up) is refused.
            let mut src: &[u8] = b"GET / HT";
            assert!(matches!(read_shown(&mut src, &mut buf).await, Ok(Shown::Unreadable(_))));
            let mut buf = vec![];
            let mut src: &[u8] = b"";
            assert!(matches!(read_shown(&mut src, &mut buf).await, Ok(Shown::Other)), "silence has no name");
            let mut endless = b"GET / HTTP/1.1\r\nX: ".to_vec();
            endless.resize(1 << 20, b'a');
            let mut buf = vec![];
            let mut src: &[u8] = &endless;
            assert!(matches!(read_shown(&mut src, &mut buf).await, Ok(Shown::Unreadable(_))));
            assert!(buf.len() <= peek::MAX_PEEK);
        });
    }
}
