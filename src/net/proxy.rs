//! The `proxied` mode: the jail's network namespace has only `lo`; its init binds an HTTP
//! proxy (127.0.0.1:3128: CONNECT and absolute-URI requests) and a SOCKS5 proxy
//! (127.0.0.1:1080: CONNECT with names or addresses) there and hands the listening sockets
//! out. This supervisor accepts on them from outside, resolves names on the host, checks the
//! name and every address with the matcher, and dials the address it checked. A refusal is
//! an HTTP 403 with the reason, or SOCKS reply 2 ("connection not allowed by ruleset").
//!
//! Both protocols are only read up to the point of deciding (a request head, parsed by
//! httparse; a SOCKS5 greeting and request, a few fixed fields); after that the bytes are
//! relayed untouched, so there is no HTTP or SOCKS state machine to get wrong beyond it.

use super::matcher::{Decision, Destination, Proto, RuleSet};
use super::supervisor::{Auditor, NetConfig};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const HTTP_PORT: u16 = 3128;
pub const SOCKS_PORT: u16 = 1080;
/// A client gets this long to send its request head or SOCKS handshake.
const HANDSHAKE: Duration = Duration::from_secs(30);
const DIAL_TIMEOUT: Duration = Duration::from_secs(20);
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest HTTP request head accepted (a 1 MiB header gets 431).
const MAX_HEAD: usize = 64 * 1024;
/// Connections served at once per session; more wait in the listen queue.
const MAX_CONNS: usize = 1024;

struct Ctx {
    rules: RuleSet,
    upstreams: Vec<SocketAddr>,
    audit: Auditor,
    slots: Arc<tokio::sync::Semaphore>,
}

/// Starts the proxies on the listeners the jail's init made (`[http, socks]`).
pub fn spawn(listeners: Vec<OwnedFd>, cfg: NetConfig) -> io::Result<()> {
    let mut it = listeners.into_iter();
    let (Some(http), Some(socks)) = (it.next(), it.next()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the jail handed out no proxy listeners"));
    };
    let http = std::net::TcpListener::from(http);
    let socks = std::net::TcpListener::from(socks);
    http.set_nonblocking(true)?;
    socks.set_nonblocking(true)?;
    let ctx = Arc::new(Ctx {
        rules: cfg.rules,
        upstreams: cfg.upstreams,
        audit: Auditor::new(cfg.audit, "proxied"),
        slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONNS)),
    });
    std::thread::Builder::new().name("proxy".into()).spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> io::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async move {
                let http = TcpListener::from_std(http)?;
                let socks = TcpListener::from_std(socks)?;
                tokio::spawn(accept_loop(socks, ctx.clone(), Kind::Socks));
                accept_loop(http, ctx, Kind::Http).await;
                Ok(())
            })
        }));
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("agent-sandbox: the jail's proxies stopped: {e}"),
            Err(_) => eprintln!("agent-sandbox: the jail's proxies stopped after an internal error (reported above)"),
        }
    })?;
    Ok(())
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
        tokio::spawn(async move {
            match kind {
                Kind::Http => serve_http(conn, ctx).await,
                Kind::Socks => serve_socks(conn, ctx).await,
            }
            drop(permit);
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

impl Ctx {
    /// Admits and dials; a refusal is audited and returned as one line for the client.
    async fn open(&self, host: &str, port: u16, check: &str) -> Result<TcpStream, (String, bool)> {
        match admit(self, host, port).await {
            Ok(addr) => match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    Ok(s)
                }
                Ok(Err(e)) => Err((format!("cannot connect to {host}:{port} ({addr}): {e}"), false)),
                Err(_) => Err((format!("connecting to {host}:{port} ({addr}) timed out"), false)),
            },
            Err(Refusal::Denied(d, addr)) => {
                let dest = addr.map(|a| a.to_string()).unwrap_or_else(|| format!("{host}:{port}"));
                self.audit.deny("tcp", addr, Some(host), check, &d);
                Err((format!("agent-sandbox: {dest} refused by the network policy: {}", d.reason), true))
            }
            Err(Refusal::Unresolvable(why)) => Err((why, false)),
        }
    }
}

/// Relays both ways until both sides are done, with large buffers.
async fn relay(mut client: TcpStream, mut upstream: TcpStream) {
    let _ = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, 64 << 10, 64 << 10).await;
}

async fn reply(conn: &mut TcpStream, status: &str, body: &str) {
    let body = format!("{body}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(head.as_bytes()).await;
    let _ = conn.write_all(body.as_bytes()).await;
    let _ = conn.shutdown().await;
    // A lingering close: closing with unread request bytes would make the kernel answer
    // with a reset, and the client could lose this reply. Read what it still sends, a while.
    let drain = async {
        let mut buf = [0u8; 16384];
        let mut left = 4usize << 20;
        while left > 0 {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
}

/// One request head read off the connection, and the bytes that came after it.
struct Head {
    method: String,
    target: String,
    version: u8,
    headers: Vec<(String, Vec<u8>)>,
    rest: Vec<u8>,
}

enum HeadError {
    /// The client closed or stalled before a whole head arrived.
    Gone,
    TooLarge,
    Malformed,
}

async fn read_head(conn: &mut TcpStream) -> Result<Head, HeadError> {
    let mut buf = Vec::with_capacity(4096);
    let deadline = tokio::time::Instant::now() + HANDSHAKE;
    loop {
        let mut chunk = [0u8; 4096];
        let n = match tokio::time::timeout_at(deadline, conn.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return Err(HeadError::Gone),
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
                    return Err(HeadError::Malformed);
                };
                return Ok(Head {
                    method: method.to_owned(),
                    target: target.to_owned(),
                    version,
                    headers: req.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect(),
                    rest: buf[len..].to_vec(),
                });
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(_) => return Err(HeadError::Malformed),
        }
    }
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

async fn serve_http(mut conn: TcpStream, ctx: Arc<Ctx>) {
    let head = match read_head(&mut conn).await {
        Ok(h) => h,
        Err(HeadError::Gone) => return,
        Err(HeadError::TooLarge) => {
            return reply(
                &mut conn,
                "431 Request Header Fields Too Large",
                "agent-sandbox proxy: request head too large",
            )
            .await
        }
        Err(HeadError::Malformed) => {
            return reply(&mut conn, "400 Bad Request", "agent-sandbox proxy: malformed request").await
        }
    };
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = split_authority(&head.target, 443) else {
            return reply(&mut conn, "400 Bad Request", "agent-sandbox proxy: CONNECT needs host:port").await;
        };
        let mut upstream = match ctx.open(&host, port, "proxy-connect").await {
            Ok(s) => s,
            Err((why, true)) => return reply(&mut conn, "403 Forbidden", &why).await,
            Err((why, false)) => return reply(&mut conn, "502 Bad Gateway", &why).await,
        };
        if conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
            return;
        }
        if !head.rest.is_empty() && upstream.write_all(&head.rest).await.is_err() {
            return;
        }
        return relay(conn, upstream).await;
    }
    forward_http(conn, head, ctx).await
}

/// A plain-HTTP request in absolute form (`GET http://host/path`): sent on in origin form
/// over a fresh connection that closes after the response (`Connection: close`), so a
/// client cannot reuse it for another host.
async fn forward_http(mut conn: TcpStream, head: Head, ctx: Arc<Ctx>) {
    let Some(after) = head.target.strip_prefix("http://").or_else(|| head.target.strip_prefix("HTTP://")) else {
        return reply(
            &mut conn,
            "400 Bad Request",
            "agent-sandbox proxy: send absolute http:// URIs, or CONNECT for https",
        )
        .await;
    };
    let (auth, path) = match after.find(['/', '?']) {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, "/"),
    };
    let path = if path.starts_with('?') { format!("/{path}") } else { path.to_owned() };
    let Some((host, port)) = split_authority(auth, 80) else {
        return reply(&mut conn, "400 Bad Request", "agent-sandbox proxy: the URI names no host").await;
    };
    let mut upstream = match ctx.open(&host, port, "proxy-http").await {
        Ok(s) => s,
        Err((why, true)) => return reply(&mut conn, "403 Forbidden", &why).await,
        Err((why, false)) => return reply(&mut conn, "502 Bad Gateway", &why).await,
    };
    let mut out = format!("{} {} HTTP/1.{}\r\n", head.method, path, head.version).into_bytes();
    let mut has_host = false;
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("proxy-") || lower == "connection" || lower == "keep-alive" {
            continue;
        }
        has_host |= lower == "host";
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if !has_host {
        let value = if port == 80 { host.clone() } else { format!("{host}:{port}") };
        out.extend_from_slice(format!("Host: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out.extend_from_slice(&head.rest);
    if upstream.write_all(&out).await.is_err() {
        return reply(&mut conn, "502 Bad Gateway", "agent-sandbox proxy: the server closed the connection").await;
    }
    relay(conn, upstream).await
}

/// SOCKS5 reply codes (RFC 1928).
const SOCKS_NOT_ALLOWED: u8 = 2;
const SOCKS_HOST_UNREACHABLE: u8 = 4;
const SOCKS_COMMAND_NOT_SUPPORTED: u8 = 7;
const SOCKS_ADDRESS_NOT_SUPPORTED: u8 = 8;

async fn socks_reply(conn: &mut TcpStream, code: u8, bound: SocketAddr) -> io::Result<()> {
    let mut r = vec![5, code, 0];
    match bound {
        SocketAddr::V4(a) => {
            r.push(1);
            r.extend_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            r.push(4);
            r.extend_from_slice(&a.ip().octets());
        }
    }
    r.extend_from_slice(&bound.port().to_be_bytes());
    conn.write_all(&r).await
}

enum SocksRequest {
    Connect(String, u16),
    /// The reply code to refuse with.
    Refuse(u8),
}

/// The SOCKS5 greeting (no authentication) and request, RFC 1928. Errors end the connection.
async fn socks_handshake(conn: &mut TcpStream) -> io::Result<SocksRequest> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "not SOCKS5");
    let mut two = [0u8; 2];
    conn.read_exact(&mut two).await?;
    if two[0] != 5 {
        return Err(bad());
    }
    let mut methods = vec![0u8; usize::from(two[1])];
    conn.read_exact(&mut methods).await?;
    if !methods.contains(&0) {
        conn.write_all(&[5, 0xff]).await?;
        return Err(bad());
    }
    conn.write_all(&[5, 0]).await?;
    let mut req = [0u8; 4];
    conn.read_exact(&mut req).await?;
    if req[0] != 5 {
        return Err(bad());
    }
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            conn.read_exact(&mut a).await?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        4 => {
            let mut a = [0u8; 16];
            conn.read_exact(&mut a).await?;
            std::net::Ipv6Addr::from(a).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            conn.read_exact(&mut len).await?;
            let mut name = vec![0u8; usize::from(len[0])];
            conn.read_exact(&mut name).await?;
            match String::from_utf8(name) {
                Ok(n) if !n.is_empty() => n,
                _ => return Ok(SocksRequest::Refuse(SOCKS_ADDRESS_NOT_SUPPORTED)),
            }
        }
        _ => return Ok(SocksRequest::Refuse(SOCKS_ADDRESS_NOT_SUPPORTED)),
    };
    let mut port = [0u8; 2];
    conn.read_exact(&mut port).await?;
    if req[1] != 1 {
        // BIND and UDP ASSOCIATE: only CONNECT is served.
        return Ok(SocksRequest::Refuse(SOCKS_COMMAND_NOT_SUPPORTED));
    }
    Ok(SocksRequest::Connect(host, u16::from_be_bytes(port)))
}

async fn serve_socks(mut conn: TcpStream, ctx: Arc<Ctx>) {
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    let (host, port) = match tokio::time::timeout(HANDSHAKE, socks_handshake(&mut conn)).await {
        Ok(Ok(SocksRequest::Connect(h, p))) => (h, p),
        Ok(Ok(SocksRequest::Refuse(code))) => {
            let _ = socks_reply(&mut conn, code, unspecified).await;
            return;
        }
        _ => return,
    };
    let upstream = match ctx.open(&host, port, "proxy-socks").await {
        Ok(s) => s,
        Err((_, denied)) => {
            let code = if denied { SOCKS_NOT_ALLOWED } else { SOCKS_HOST_UNREACHABLE };
            let _ = socks_reply(&mut conn, code, unspecified).await;
            return;
        }
    };
    let bound = upstream.local_addr().unwrap_or(unspecified);
    if socks_reply(&mut conn, 0, bound).await.is_err() {
        return;
    }
    relay(conn, upstream).await
}

/// For the fuzz target: serves one connection whose client sends `data` and then closes,
/// under a policy that blocks everything. Returns when the server is done with it.
#[doc(hidden)]
pub fn fuzz_one(http: bool, data: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    let rules = vec![("*".to_string(), super::matcher::Action::Block, super::matcher::Layer::User)];
    let Ok(rules) = RuleSet::new(&rules, Default::default()) else { return };
    let ctx = Arc::new(Ctx {
        rules,
        upstreams: vec![],
        audit: Auditor::new(None, "proxied"),
        slots: Arc::new(tokio::sync::Semaphore::new(1)),
    });
    rt.block_on(async move {
        let Ok(listener) = TcpListener::bind("127.0.0.1:0").await else { return };
        let Ok(addr) = listener.local_addr() else { return };
        let Ok(mut client) = TcpStream::connect(addr).await else { return };
        let Ok((server, _)) = listener.accept().await else { return };
        let _ = client.write_all(data).await;
        let _ = client.shutdown().await;
        let serve = async {
            if http {
                serve_http(server, ctx).await
            } else {
                serve_socks(server, ctx).await
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), serve).await.is_err() {
            panic!("the proxy hung on a client that had closed");
        }
    });
}
