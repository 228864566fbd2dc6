//! The supervisor's side of the jail's resolver: queries over UDP are answered as the server
//! the jail asked; DNS over TCP reaches a listener on host loopback that the jail's port-53
//! flows are dialled to; every query is refused or forwarded as `net/dns.rs` decides, and the
//! names of checked answers are learned for `decide.rs`. Parsing and checking DNS messages is
//! `net/dns.rs`, not here. Also `accept_surviving`, for the listeners here and of `--publish`.

use super::decide::Shared;
use super::{Event, Supervisor};
use crate::net::dns;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

impl Shared {
    /// Resolves one query from the jail: refuse, or forward and check the answer. Returns
    /// the reply (None: nothing to answer).
    pub(super) async fn resolve(&self, query: &[u8]) -> Option<Vec<u8>> {
        let (name, upstream) = match dns::check_query(query, &self.rules) {
            dns::Verdict::Drop => return None,
            dns::Verdict::Answer { reply, denied } => {
                if let Some((name, d)) = denied {
                    self.audit.deny("dns", None, Some(&name), "dns", &d);
                }
                return Some(reply);
            }
            dns::Verdict::Forward { name, upstream } => (name, upstream),
        };
        let Some(answer) = dns::forward(&upstream, &self.upstreams).await else { return Some(servfail(query)) };
        let Some(checked) = dns::check_answer(&answer, &name, &self.rules) else { return Some(servfail(query)) };
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
}

/// SERVFAIL for a query `check_query` forwarded (so at least a header long): no upstream
/// answered, or its answer was unreadable.
fn servfail(query: &[u8]) -> Vec<u8> {
    let mut r = query.to_vec();
    // QR=1, keep opcode and RD; RA=1, RCODE=SERVFAIL; no answer sections.
    r[2] = (r[2] & 0x79) | 0x80;
    r[3] = 0x82;
    r.truncate(12);
    r[4..12].fill(0);
    r
}

impl Supervisor {
    /// A DNS query over UDP from the jail's `src` to `dst`: resolved in a task, answered from
    /// `dst` (`Event::DnsReply`).
    pub(super) fn resolve_for_jail(&self, src: SocketAddr, dst: SocketAddr, query: Vec<u8>) {
        // A jail flooding queries would grow the tasks without end: past the cap a query is
        // dropped, as a busy server drops one (the client asks again).
        let Ok(slot) = self.shared.resolving.clone().try_acquire_owned() else { return };
        let shared = self.shared.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Some(reply) = shared.resolve(&query).await {
                let _ = events.send(Event::DnsReply { from: dst, to: src, data: reply });
            }
        });
    }
}

/// DNS over TCP: the jail's TCP flows to port 53 are dialled here, a listener on host
/// loopback that answers through the same resolver as UDP.
pub(super) async fn serve_dns_tcp(shared: Arc<Shared>) -> io::Result<SocketAddr> {
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
pub(super) async fn accept_surviving(listener: &tokio::net::TcpListener) -> Option<TcpStream> {
    match listener.accept().await {
        Ok((conn, _)) => Some(conn),
        Err(e) => {
            tracing::debug!("accept failed, retrying: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// One DNS-over-TCP connection: length-prefixed queries answered in turn until it is idle,
/// closed, or sends what the resolver drops.
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

#[cfg(test)]
mod tests {
    use super::super::testing::{rules, shared};
    use super::*;
    use crate::net::dns::tests::query;
    use crate::netrules::matcher::Action;
    use hickory_proto::op::{Message, ResponseCode};

    fn rcode(reply: &[u8]) -> (u16, ResponseCode) {
        let m = Message::from_vec(reply).unwrap();
        (m.metadata.id, m.metadata.response_code)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    }

    #[test]
    fn a_query_no_upstream_answers_gets_servfail_and_a_blocked_name_nxdomain() {
        let s = shared(rules(&[("blocked.test", Action::Block)]), None);
        let rt = runtime();
        let reply = rt.block_on(s.resolve(&query("allowed.test", 7))).unwrap();
        assert_eq!(rcode(&reply), (7, ResponseCode::ServFail));
        assert_eq!(reply.len(), 12, "the header alone");
        let reply = rt.block_on(s.resolve(&query("blocked.test", 8))).unwrap();
        assert_eq!(rcode(&reply), (8, ResponseCode::NXDomain));
        assert_eq!(rt.block_on(s.resolve(b"\x01")), None, "no id to answer to");
    }

    #[test]
    fn dns_over_tcp_answers_each_length_prefixed_query_in_turn() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rt = runtime();
        let s = Arc::new(shared(rules(&[("blocked.test", Action::Block)]), None));
        rt.block_on(async {
            let at = serve_dns_tcp(s).await.unwrap();
            assert!(at.ip().is_loopback());
            let mut conn = TcpStream::connect(at).await.unwrap();
            for (name, id, want) in
                [("blocked.test", 1, ResponseCode::NXDomain), ("allowed.test", 2, ResponseCode::ServFail)]
            {
                let q = query(name, id);
                let mut framed = (q.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&q);
                conn.write_all(&framed).await.unwrap();
                let mut len = [0u8; 2];
                conn.read_exact(&mut len).await.unwrap();
                let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
                conn.read_exact(&mut reply).await.unwrap();
                assert_eq!(rcode(&reply), (id, want));
            }
        });
    }
}
