//! Reads the name a TCP flow's first bytes carry, before the flow is dialled: the TLS
//! ClientHello's server name (SNI) or the HTTP/1 `Host` header. A ClientHello may span several
//! TLS records (and TCP segments), an HTTP head may follow empty lines: both are read as TLS and
//! HTTP allow, within `MAX_PEEK`. Bytes that are TLS or HTTP but cannot be read (split past the
//! bound, malformed, two Hosts, a Host that is not the request's target) are `Unreadable`: the
//! caller refuses them, since a name hidden that way would otherwise pass on the address alone.
//! Anything else (another protocol) has no name. Parsing is left to kept crates (tls-parser,
//! httparse); the HTTP head is read by `http1`, which also follows the requests after it.

use super::http1::{self, clean_name, Head, Line};
use tls_parser::{parse_tls_extensions, parse_tls_plaintext, TlsExtension, TlsMessage, TlsMessageHandshake};

/// How much of a flow's start is read, at most, looking for a name: as much as the longest
/// request head HTTP/1 reads (a ClientHello of that size is already an oddity).
pub const MAX_PEEK: usize = http1::MAX_HEAD;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked {
    /// Not enough bytes yet to decide (and fewer than `MAX_PEEK` so far).
    NeedMore,
    /// A TLS ClientHello, with its server name if it sent one.
    Tls { sni: Option<String> },
    /// An HTTP/1 request head, with its Host (port removed) if it sent one.
    Http { host: Option<String> },
    /// Neither TLS nor HTTP: no name.
    Unknown,
    /// TLS or HTTP that does not show its name in a way that can be read: refuse.
    Unreadable(&'static str),
}

/// The refusal for bytes that are TLS or HTTP but hide their name (`what` says which).
pub fn unreadable(what: &str) -> crate::netrules::matcher::Decision {
    let reason = if what == NAMELESS {
        "the connection's first bytes are neither TLS nor HTTP (or none came in time), on a web port where \
         names are ruled: the server could be asked for any name after it; use TLS or HTTP"
            .to_string()
    } else if what == super::http1::H2C {
        "the connection's first bytes are HTTP/2 without TLS (h2c prior knowledge), whose requests can name any \
         host: use HTTP/2 over TLS, or HTTP/1"
            .to_string()
    } else {
        format!(
            "the connection's first bytes are {what} whose server name cannot be read (split, cut short, \
             too long or ambiguous); send one complete request or handshake"
        )
    };
    crate::netrules::matcher::Decision {
        allowed: false,
        rule: String::new(),
        layer: crate::netrules::matcher::Layer::Floor,
        reason,
    }
}

/// Whether a flow whose first bytes show no name may go on the address alone on a port where
/// names are ruled (80, 443), when name rules exist: only an SSH banner (`ssh -p 443`, which a
/// web server cannot take for a request to another host). Silence, garbage or another
/// protocol there could be followed by what a web server does take: HTTP/2 in the clear, a
/// request after the flow was decided (issue 33).
pub fn nameless_may_pass(first: &[u8]) -> bool {
    first.starts_with(b"SSH-")
}

/// The refusal of a nameless flow on a name-ruled port (see `nameless_may_pass`).
pub const NAMELESS: &str = "neither TLS nor HTTP";

/// After the peek's time ran out (or the client stopped sending) with `buf` read: a prefix of
/// TLS or HTTP that never completed is refused, so a name cannot be smuggled by waiting.
pub fn timed_out(buf: &[u8]) -> Peeked {
    match peek(buf) {
        Peeked::NeedMore if buf.is_empty() => Peeked::Unknown,
        Peeked::NeedMore => match buf.first() {
            Some(0x16) => Peeked::Unreadable("a TLS ClientHello"),
            _ => Peeked::Unreadable("HTTP"),
        },
        other => other,
    }
}

pub fn peek(buf: &[u8]) -> Peeked {
    // RFC 9112 2.2: a server should ignore empty lines before the request line.
    let start = buf.iter().position(|b| *b != b'\r' && *b != b'\n').unwrap_or(buf.len());
    let head = &buf[start..];
    let verdict = match buf.first() {
        None => Peeked::NeedMore,
        Some(0x16) => peek_tls(buf),
        _ if head.is_empty() => Peeked::NeedMore,
        _ => match http1::request_line(head) {
            Line::Request => match http1::parse_head(buf) {
                Head::NeedMore => Peeked::NeedMore,
                Head::Complete(h) => Peeked::Http { host: h.host },
                Head::Unreadable(what) => Peeked::Unreadable(what),
            },
            Line::Http2 => Peeked::Unreadable(http1::H2C),
            // A request line cut short: wait for the rest of it.
            Line::NeedMore => Peeked::NeedMore,
            Line::Other if start > 0 => Peeked::Unreadable("HTTP"),
            Line::Other => Peeked::Unknown,
        },
    };
    if verdict == Peeked::NeedMore && buf.len() >= MAX_PEEK {
        return match buf.first() {
            Some(0x16) => Peeked::Unreadable("a TLS ClientHello"),
            _ => Peeked::Unreadable("HTTP"),
        };
    }
    verdict
}

/// The handshake bytes of the TLS records at the start of `buf`, joined: a ClientHello may
/// be cut into several records. NeedMore until the first handshake message is whole.
fn handshake_message(buf: &[u8]) -> Result<Vec<u8>, Peeked> {
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + 5) else { return Err(Peeked::NeedMore) };
        if header[0] != 0x16 {
            return Err(Peeked::Unreadable("a TLS ClientHello"));
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > (1 << 14) {
            return Err(Peeked::Unreadable("a TLS ClientHello"));
        }
        let Some(body) = buf.get(at + 5..at + 5 + len) else { return Err(Peeked::NeedMore) };
        data.extend_from_slice(body);
        at += 5 + len;
        if data.len() >= 4 {
            let msg_len = (usize::from(data[1]) << 16) | (usize::from(data[2]) << 8) | usize::from(data[3]);
            if data[0] != 1 || msg_len + 4 > MAX_PEEK {
                return Err(Peeked::Unreadable("a TLS ClientHello"));
            }
            if data.len() >= msg_len + 4 {
                data.truncate(msg_len + 4);
                return Ok(data);
            }
        }
    }
}

fn peek_tls(buf: &[u8]) -> Peeked {
    let message = match handshake_message(buf) {
        Ok(m) => m,
        Err(p) => return p,
    };
    // One record holding the whole message, for the parser.
    let mut record = vec![0x16, buf[1], buf[2]];
    let Ok(len) = u16::try_from(message.len()) else { return Peeked::Unreadable("a TLS ClientHello") };
    record.extend_from_slice(&len.to_be_bytes());
    record.extend_from_slice(&message);
    let record = match parse_tls_plaintext(&record) {
        Ok((_, r)) => r,
        Err(_) => return Peeked::Unreadable("a TLS ClientHello"),
    };
    for msg in &record.msg {
        if let TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)) = msg {
            let Some(ext) = hello.ext else { return Peeked::Tls { sni: None } };
            let Ok((_, exts)) = parse_tls_extensions(ext) else { return Peeked::Unreadable("a TLS ClientHello") };
            for e in exts {
                if let TlsExtension::SNI(names) = e {
                    // Type 0 is host_name, the only type defined.
                    let name = names.iter().find(|(t, _)| t.0 == 0).and_then(|(_, n)| clean_name(n));
                    return Peeked::Tls { sni: name };
                }
            }
            return Peeked::Tls { sni: None };
        }
    }
    Peeked::Unreadable("a TLS ClientHello")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNI: &[u8] = include_bytes!("../../../tests/fixtures/clienthello-sni.bin");
    const NO_SNI: &[u8] = include_bytes!("../../../tests/fixtures/clienthello-nosni.bin");

    #[test]
    fn real_client_hello_yields_its_server_name() {
        assert_eq!(peek(SNI), Peeked::Tls { sni: Some("api.example.org".into()) });
        assert_eq!(peek(NO_SNI), Peeked::Tls { sni: None });
    }

    #[test]
    fn every_truncation_of_a_client_hello_needs_more_and_never_names_wrongly() {
        for cut in 0..SNI.len() {
            match peek(&SNI[..cut]) {
                Peeked::NeedMore => {}
                Peeked::Tls { sni: Some(n) } => assert_eq!(n, "api.example.org", "cut {cut}"),
                other => panic!("cut {cut}: {other:?}"),
            }
        }
    }

    #[test]
    fn http_host_is_read_without_port_and_lowercased() {
        let cases: &[(&[u8], Peeked)] = &[
            (b"GET / HTTP/1.1\r\nHost: Example.ORG:8080\r\n\r\n", Peeked::Http { host: Some("example.org".into()) }),
            (
                b"GET / HTTP/1.1\r\nhost: pypi.org.\r\nAccept: */*\r\n\r\n",
                Peeked::Http { host: Some("pypi.org".into()) },
            ),
            (b"GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", Peeked::Http { host: Some("2001:db8::1".into()) }),
            (b"GET / HTTP/1.0\r\n\r\n", Peeked::Http { host: None }),
            (b"GET / HTTP/1.1\r\nHost: bad host\r\n\r\n", Peeked::Unreadable("HTTP (a Host that is not a plain name)")),
            (b"GET / HTTP/1.1\r\nHost: ex", Peeked::NeedMore),
            (b"GET / HTTP/1.1\r\nHo\x00st: x\r\n\r\n", Peeked::Unreadable("HTTP")),
            (b"\x00\x01\x02", Peeked::Unknown),
            (b"SSH-2.0-OpenSSH_9.2\r\n", Peeked::Unknown),
        ];
        for (input, want) in cases {
            assert_eq!(&peek(input), want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn endless_heads_stop_at_the_bound() {
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_PEEK + 10, b'a');
        assert_eq!(peek(&big), Peeked::Unreadable("HTTP"), "a name hidden past the bound is refused");
        let mut tls = SNI.to_vec();
        tls[3] = 0x3f; // claims a 16 KiB record
        tls[4] = 0xff;
        tls.resize(MAX_PEEK, 0);
        assert_eq!(peek(&tls), Peeked::Unreadable("a TLS ClientHello"));
    }

    /// The SNI fixture's ClientHello cut into records after each of `cuts` body bytes.
    fn split_hello(cuts: &[usize]) -> Vec<u8> {
        let body = &SNI[5..];
        let mut out = vec![];
        let mut from = 0;
        for &to in cuts.iter().chain(std::iter::once(&body.len())) {
            out.extend_from_slice(&[0x16, SNI[1], SNI[2]]);
            out.extend_from_slice(&((to - from) as u16).to_be_bytes());
            out.extend_from_slice(&body[from..to]);
            from = to;
        }
        out
    }

    #[test]
    fn a_client_hello_split_over_records_still_shows_its_name() {
        // Split after 1, 3 and 40 body bytes, and into three: a name hidden this way used to
        // pass as "no name".
        for cuts in [&[1usize][..], &[3], &[40], &[2, 60]] {
            let hello = split_hello(cuts);
            assert_eq!(peek(&hello), Peeked::Tls { sni: Some("api.example.org".into()) }, "{cuts:?}");
            for cut in 0..hello.len() {
                assert_eq!(peek(&hello[..cut]), Peeked::NeedMore, "{cuts:?} cut at {cut}");
            }
        }
        // A record of another type in the middle, or an empty record: not a hello to trust.
        let mut mixed = split_hello(&[10]);
        let second = 5 + 10;
        mixed[second] = 0x17;
        assert_eq!(peek(&mixed), Peeked::Unreadable("a TLS ClientHello"));
    }

    #[test]
    fn http_that_hides_its_name_is_unreadable_not_nameless() {
        let cases: &[(&[u8], Peeked)] = &[
            // Empty lines before the request line are allowed (and were a bypass).
            (b"\r\nGET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n", Peeked::Http { host: Some("blocked.test".into()) }),
            (b"\r\n\r\nGE", Peeked::NeedMore),
            (b"\r\nSSH-2.0-x\r\n", Peeked::Unreadable("HTTP")),
            // The absolute form names the target; a different Host is ambiguous.
            (
                b"GET http://blocked.test/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
                Peeked::Unreadable("HTTP (Host is not the request's target)"),
            ),
            (b"GET http://u@Blocked.Test:80/ HTTP/1.1\r\n\r\n", Peeked::Http { host: Some("blocked.test".into()) }),
            (
                b"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: blocked.test\r\n\r\n",
                Peeked::Unreadable("HTTP (two Host headers)"),
            ),
            (b"POS", Peeked::NeedMore),
        ];
        for (input, want) in cases {
            assert_eq!(&peek(input), want, "{:?}", String::from_utf8_lossy(input));
        }
        // 100 headers and then Host: read; 130: more than any server reads, refused.
        for (n, want) in [(100, Peeked::Http { host: Some("blocked.test".into()) }), (130, Peeked::Unreadable("HTTP"))]
        {
            let mut head = b"GET / HTTP/1.1\r\n".to_vec();
            for i in 0..n {
                head.extend_from_slice(format!("X-{i}: a\r\n").as_bytes());
            }
            head.extend_from_slice(b"Host: blocked.test\r\n\r\n");
            assert_eq!(peek(&head), want, "{n} headers");
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for len in 0..2000usize {
            let mut buf = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            if let Some(b) = buf.first_mut() {
                *b = [0x16, b'G', b'P', 0][len % 4];
            }
            let _ = peek(&buf);
            // Mutations of the real hello too.
            let mut h = SNI.to_vec();
            let i = len % h.len();
            h[i] = x as u8;
            let _ = peek(&h);
        }
    }
}
