//! Reads the name a TCP flow's first bytes carry, before the flow is dialled: the TLS
//! ClientHello's server name (SNI) or the HTTP/1 `Host` header. Bounded: past `MAX_PEEK`
//! bytes, or on anything it cannot parse, there is no name (and the matcher decides on the
//! address alone). Parsing is left to kept crates (tls-parser, httparse).

use tls_parser::{parse_tls_extensions, parse_tls_plaintext, TlsExtension, TlsMessage, TlsMessageHandshake};

/// How much of a flow's start is read, at most, looking for a name.
pub const MAX_PEEK: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked {
    /// Not enough bytes yet to decide (and fewer than `MAX_PEEK` so far).
    NeedMore,
    /// A TLS ClientHello, with its server name if it sent one.
    Tls { sni: Option<String> },
    /// An HTTP/1 request head, with its Host (port removed) if it sent one.
    Http { host: Option<String> },
    /// Neither, or malformed, or too long: no name.
    Unknown,
}

pub fn peek(buf: &[u8]) -> Peeked {
    let verdict = match buf.first() {
        None => Peeked::NeedMore,
        Some(0x16) => peek_tls(buf),
        Some(b) if b.is_ascii_uppercase() => peek_http(buf),
        Some(_) => Peeked::Unknown,
    };
    if verdict == Peeked::NeedMore && buf.len() >= MAX_PEEK {
        return Peeked::Unknown;
    }
    verdict
}

fn peek_tls(buf: &[u8]) -> Peeked {
    let record = match parse_tls_plaintext(buf) {
        Ok((_, r)) => r,
        Err(tls_parser::nom::Err::Incomplete(_)) => return Peeked::NeedMore,
        Err(_) => return Peeked::Unknown,
    };
    for msg in &record.msg {
        if let TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)) = msg {
            let Some(ext) = hello.ext else { return Peeked::Tls { sni: None } };
            let Ok((_, exts)) = parse_tls_extensions(ext) else { return Peeked::Unknown };
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
    Peeked::Unknown
}

fn peek_http(buf: &[u8]) -> Peeked {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Peeked::NeedMore,
        Ok(httparse::Status::Complete(_)) => {
            let host =
                req.headers.iter().find(|h| h.name.eq_ignore_ascii_case("host")).and_then(|h| strip_port(h.value));
            Peeked::Http { host: host.and_then(clean_name) }
        }
        Err(_) => Peeked::Unknown,
    }
}

/// `example.org:8080` -> `example.org`; `[2001:db8::1]:443` -> `2001:db8::1`.
fn strip_port(v: &[u8]) -> Option<&[u8]> {
    let v = v.trim_ascii();
    if let Some(rest) = v.strip_prefix(b"[") {
        let end = rest.iter().position(|c| *c == b']')?;
        return Some(&rest[..end]);
    }
    match v.iter().rposition(|c| *c == b':') {
        Some(i) if v[i + 1..].iter().all(u8::is_ascii_digit) => Some(&v[..i]),
        _ => Some(v),
    }
}

/// A name fit for the matcher: ASCII letters, digits, `-`, `_`, `.`, `:` (IPv6 literals),
/// lowercased, one trailing dot removed. Anything else is no name at all.
fn clean_name(n: &[u8]) -> Option<String> {
    let n = n.strip_suffix(b".").unwrap_or(n);
    let ok = !n.is_empty()
        && n.len() <= 253
        && n.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b':'));
    ok.then(|| String::from_utf8_lossy(n).to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNI: &[u8] = include_bytes!("../../tests/fixtures/clienthello-sni.bin");
    const NO_SNI: &[u8] = include_bytes!("../../tests/fixtures/clienthello-nosni.bin");

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
            (b"GET / HTTP/1.1\r\nHost: bad host\r\n\r\n", Peeked::Http { host: None }),
            (b"GET / HTTP/1.1\r\nHost: ex", Peeked::NeedMore),
            (b"GET / HTTP/1.1\r\nHo\x00st: x\r\n\r\n", Peeked::Unknown),
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
        assert_eq!(peek(&big), Peeked::Unknown);
        let mut tls = SNI.to_vec();
        tls[3] = 0x3f; // claims a 16 KiB record
        tls[4] = 0xff;
        tls.resize(MAX_PEEK, 0);
        assert_eq!(peek(&tls), Peeked::Unknown);
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
