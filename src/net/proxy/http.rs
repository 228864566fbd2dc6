//! The HTTP proxy: hyper's HTTP/1 server reads every request head of a connection, so each
//! request of a kept-alive connection is decided on its own. `CONNECT host:port` opens a
//! tunnel (`super::tunnel`); an absolute-URI request (`GET http://host/path`) is decided on its
//! target and on its `Host` header (which must name the target's host), then sent on in origin
//! form over a fresh upstream connection that serves that request only.

use super::{tunnel, Ctx, OpenError, Slot, HANDSHAKE, MAX_HEAD};
use crate::net::parse::http1::strip_hop_by_hop;
use crate::netrules::matcher::{Decision, Destination, Proto};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

type Body = BoxBody<Bytes, hyper::Error>;

pub(super) async fn serve(conn: TcpStream, ctx: Arc<Ctx>, slot: Slot) {
    let io = TokioIo::new(Linger(Some(conn)));
    let service = hyper::service::service_fn(move |req| {
        let (ctx, slot) = (ctx.clone(), slot.clone());
        async move { Ok::<_, Infallible>(handle(req, ctx, slot).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // Each head, the first or the next one on a kept-alive connection, within HANDSHAKE.
        .header_read_timeout(HANDSHAKE)
        // Past MAX_HEAD (or 128 headers) hyper answers 431 itself.
        .max_header_size(MAX_HEAD)
        .max_headers(128)
        .max_buf_size(2 * MAX_HEAD)
        // A client may send its request and shut its write side while it waits for the
        // answer (curl's and python's one-shot clients do): without this hyper sees the EOF
        // while the answer is being made and drops the connection unanswered.
        .half_close(true)
        .serve_connection(io, service)
        .with_upgrades()
        .await;
}

async fn handle(req: Request<Incoming>, ctx: Arc<Ctx>, slot: Slot) -> Response<Body> {
    if req.method() == Method::CONNECT {
        connect(req, ctx, slot).await
    } else {
        forward(req, &ctx).await
    }
}

fn text(status: StatusCode, line: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(format!("{line}\n"))).map_err(|never: Infallible| match never {}).boxed();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn refused(e: OpenError) -> Response<Body> {
    match e {
        OpenError::Denied(why) => text(StatusCode::FORBIDDEN, &why),
        OpenError::Failed(why) => text(StatusCode::BAD_GATEWAY, &why),
    }
}

async fn connect(mut req: Request<Incoming>, ctx: Arc<Ctx>, slot: Slot) -> Response<Body> {
    let target = req.uri().authority().and_then(|a| super::split_authority(a.as_str(), 443));
    let Some((host, port)) = target else {
        return text(StatusCode::BAD_REQUEST, "agent-sandbox proxy: CONNECT needs host:port");
    };
    let opened = match ctx.open(&host, port, "proxy-connect").await {
        Ok(o) => o,
        Err(e) => return refused(e),
    };
    // hyper hands the connection over once the 200 is written; the tunnel keeps the slot.
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let _slot = slot;
        if let Ok(upgraded) = upgrade.await {
            tunnel(&ctx, TokioIo::new(upgraded), opened, "http").await;
        }
    });
    Response::new(Empty::new().map_err(|never: Infallible| match never {}).boxed())
}

/// `Host` header value -> its host part (port and IPv6 brackets removed).
fn host_of_header(v: &HeaderValue) -> Option<&str> {
    let v = v.to_str().ok()?.trim();
    if let Some(rest) = v.strip_prefix('[') {
        return rest.split_once(']').map(|(h, _)| h);
    }
    match v.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|c| c.is_ascii_digit()) => Some(h),
        _ => Some(v),
    }
}

/// A plain-HTTP request in absolute form, decided and sent on.
async fn forward(req: Request<Incoming>, ctx: &Ctx) -> Response<Body> {
    let uri = req.uri();
    if !uri.scheme_str().is_some_and(|s| s.eq_ignore_ascii_case("http")) {
        return text(StatusCode::BAD_REQUEST, "agent-sandbox proxy: send absolute http:// URIs, or CONNECT for https");
    }
    let Some((host, port)) = uri.authority().and_then(|a| super::split_authority(a.as_str(), 80)) else {
        return text(StatusCode::BAD_REQUEST, "agent-sandbox proxy: the URI names no host");
    };
    // The Host header is what a server (or a CDN in front of many) serves by: it must name
    // the host this request is decided on, or an allowed target would carry a blocked name.
    // A target refused on its own is refused (and audited) as that, by `open` below.
    let target_ip = host.parse::<IpAddr>().ok();
    let target =
        Destination { ip: target_ip, name: target_ip.is_none().then_some(host.as_str()), port, proto: Proto::Tcp };
    let host_headers =
        if ctx.rules.decide(&target).allowed { req.headers().get_all(HOST).iter().collect() } else { vec![] };
    for value in host_headers {
        let shown = host_of_header(value).unwrap_or_default();
        if let Err(d) = ctx.check_host_header(&host, port, shown) {
            let shown_name = if shown.is_empty() { None } else { Some(shown) };
            ctx.audit.deny("tcp", None, shown_name, "http-host", &d);
            return text(
                StatusCode::FORBIDDEN,
                &format!("agent-sandbox: {host}:{port} refused by the network policy: {}", d.reason),
            );
        }
    }
    let opened = match ctx.open(&host, port, "proxy-http").await {
        Ok(o) => o,
        Err(e) => return refused(e),
    };
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let path = if path.starts_with('/') { path.to_owned() } else { format!("/{path}") };
    let Ok(origin) = path.parse::<Uri>() else {
        return text(StatusCode::BAD_REQUEST, "agent-sandbox proxy: the URI's path does not parse");
    };
    strip_hop_by_hop(&mut parts.headers);
    if !parts.headers.contains_key(HOST) {
        let value = if port == 80 { host.clone() } else { format!("{host}:{port}") };
        let value = if host.contains(':') { format!("[{host}]:{port}") } else { value };
        if let Ok(v) = HeaderValue::from_str(&value) {
            parts.headers.insert(HOST, v);
        }
    }
    parts.headers.insert(CONNECTION, HeaderValue::from_static("close"));
    parts.uri = origin;
    parts.version = Version::HTTP_11;
    let upstream_req = Request::from_parts(parts, body);
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(opened.upstream)).await {
        Ok(x) => x,
        Err(e) => return text(StatusCode::BAD_GATEWAY, &format!("agent-sandbox proxy: {host}:{port}: {e}")),
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    match sender.send_request(upstream_req).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => text(StatusCode::BAD_GATEWAY, &format!("agent-sandbox proxy: {host}:{port} answered badly: {e}")),
    }
}

impl Ctx {
    /// The Host header of a forwarded request, before anything is resolved: the name must be
    /// allowed on this port and be the target's host (for an address target: be allowed to
    /// that address on its own, as a tunnel to an address is checked).
    fn check_host_header(&self, target: &str, port: u16, shown: &str) -> Result<(), Decision> {
        if shown.is_empty() {
            return Err(super::mismatch(target, shown, "Host header"));
        }
        let ip = target.parse::<IpAddr>().ok();
        let d = self.rules.decide(&Destination { ip, name: Some(shown), port, proto: Proto::Tcp });
        if !d.allowed {
            return Err(d);
        }
        if ip.is_some() || super::same_name(target, shown) {
            return Ok(());
        }
        Err(super::mismatch(target, shown, "Host header"))
    }
}

/// The client's connection, closed with a lingering close: when hyper drops it with request
/// bytes unread (a refused upload, a head too large), closing at once would make the kernel
/// answer with a reset, and the client could lose the reply. What it still sends is read for
/// a while (2 s, 4 MiB) in a task of its own.
struct Linger(Option<TcpStream>);

impl Linger {
    fn stream(&mut self) -> io::Result<&mut TcpStream> {
        self.0.as_mut().ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

impl Drop for Linger {
    fn drop(&mut self) {
        let (Some(mut conn), Ok(rt)) = (self.0.take(), tokio::runtime::Handle::try_current()) else { return };
        rt.spawn(async move {
            let _ = conn.shutdown().await;
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
        });
    }
}

impl AsyncRead for Linger {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Linger {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
}
