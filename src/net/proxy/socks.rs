//! The SOCKS5 proxy (RFC 1928): fast-socks5 speaks the protocol (greeting without
//! authentication, the request, the replies); we decide. Only CONNECT is served, with a name
//! (resolved here, on the host) or an address; the tunnel is then served like a CONNECT one.

use super::{tunnel, Ctx, OpenError, Slot, HANDSHAKE};
use fast_socks5::server::Socks5ServerProtocol;
use fast_socks5::util::target_addr::TargetAddr;
use fast_socks5::{ReplyError, Socks5Command};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;

pub(super) async fn serve(conn: TcpStream, ctx: Arc<Ctx>, _slot: Slot) {
    // Errors in the handshake end the connection; fast-socks5 has already sent the reply the
    // protocol has for them (no acceptable method, a bad address type).
    let handshake = async {
        let proto = Socks5ServerProtocol::accept_no_auth(conn).await?;
        proto.read_command().await
    };
    let (proto, command, target) = match tokio::time::timeout(HANDSHAKE, handshake).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::debug!("socks handshake failed: {e}");
            return;
        }
        Err(_) => return,
    };
    if command != Socks5Command::TCPConnect {
        // BIND and UDP ASSOCIATE: only CONNECT is served.
        let _ = proto.reply_error(&ReplyError::CommandNotSupported).await;
        return;
    }
    let (host, port) = match target {
        TargetAddr::Ip(a) => (a.ip().to_string(), a.port()),
        TargetAddr::Domain(name, port) => (name, port),
    };
    if host.is_empty() {
        let _ = proto.reply_error(&ReplyError::AddressTypeNotSupported).await;
        return;
    }
    let opened = match ctx.open(&host, port, "proxy-socks").await {
        Ok(o) => o,
        Err(OpenError::Denied(_)) => {
            let _ = proto.reply_error(&ReplyError::ConnectionNotAllowed).await;
            return;
        }
        Err(OpenError::Failed(why)) => {
            tracing::debug!("socks connect failed: {why}");
            let _ = proto.reply_error(&ReplyError::HostUnreachable).await;
            return;
        }
    };
    let bound = opened.upstream.local_addr().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    let Ok(conn) = proto.reply_success(bound).await else { return };
    tunnel(&ctx, conn, opened, "socks").await;
}
