//! Plain HTTP/1 on a name-ruled port, request by request. `parse_head` reads one request head
//! (the name it carries, how its body is framed); `Framer` follows a connection's bytes from
//! the jail to the server, so that every request head on it, the first or the tenth on a
//! kept-alive or pipelined connection, is stopped and decided before a byte of it is relayed.
//! Bodies are framed as a server frames them (RFC 9112 6): `Content-Length`, or `chunked` as
//! the final transfer coding; anything a server could read two ways (both headers, two lengths,
//! another coding, a malformed chunk) ends the connection instead. No decision is made here:
//! the caller decides each head with its matcher.

/// Longest request head (and chunk-size line or trailer section) read; the peek at a flow's
/// start reads as far (`peek::MAX_PEEK`).
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest chunk extension accepted on a chunk-size line.
const MAX_CHUNK_LINE: usize = 4096;

/// One request head, as far as the decision and the framing need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The name the request is for: its absolute-form target's host, else its `Host` header
    /// (port removed, lowercased). None: HTTP/1.0 without Host.
    pub host: Option<String>,
    /// Bytes of the head, empty lines before it included.
    pub len: usize,
    body: Body,
    /// It asks the server to switch protocols (`Upgrade`, e.g. a WebSocket handshake).
    upgrade: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Length(u64),
    Chunked,
}

/// What the start of a buffer holds, read as one request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    NeedMore,
    Complete(RequestHead),
    /// Not a head a server reads one way only: `what` says why, for the refusal.
    Unreadable(&'static str),
}

/// The refusal of HTTP/2 in the clear: its requests can name any host.
pub const H2C: &str = "HTTP/2 without TLS (h2c), whose requests can name any host";

/// What the first line of a buffer (after empty lines) is, read by the grammar of an HTTP/1
/// request line (RFC 9112 3: `method SP request-target SP HTTP/d.d`), whatever the method:
/// `PROPFIND`, `REPORT` or a method no list knows are requests a server answers too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// What came so far can still be a request line.
    NeedMore,
    Request,
    /// `PRI * HTTP/2.0`: HTTP/2 in the clear (h2c prior knowledge), whose requests can name
    /// any host.
    Http2,
    /// Not a request line (another protocol, or garbage).
    Other,
}

/// RFC 9110 5.6.2: the characters of a token (a method).
fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Reads the first line of `b` (which starts at the request line).
pub fn request_line(b: &[u8]) -> Line {
    let mut i = 0;
    let run = |i: &mut usize, ok: &dyn Fn(u8) -> bool| {
        let from = *i;
        while b.get(*i).is_some_and(|c| ok(*c)) {
            *i += 1;
        }
        *i - from
    };
    let method = run(&mut i, &is_tchar);
    if method == 0 || i == b.len() || b[i] != b' ' {
        return if i == b.len() { Line::NeedMore } else { Line::Other };
    }
    i += 1;
    let target_at = i;
    let target = run(&mut i, &|c| c > b' ' && c != 0x7f);
    if target == 0 || i == b.len() || b[i] != b' ' {
        return if i == b.len() { Line::NeedMore } else { Line::Other };
    }
    let target = &b[target_at..i];
    i += 1;
    let version_at = i;
    for want in b"HTTP/d.d" {
        let Some(&c) = b.get(i) else { return Line::NeedMore };
        if !(if *want == b'd' { c.is_ascii_digit() } else { c == *want }) {
            return Line::Other;
        }
        i += 1;
    }
    let version = &b[version_at..i];
    if b.get(i) == Some(&b'\r') {
        i += 1;
    }
    match b.get(i) {
        None => Line::NeedMore,
        Some(b'\n') if &b[..method] == b"PRI" && target == b"*" && version == b"HTTP/2.0" => Line::Http2,
        Some(b'\n') => Line::Request,
        Some(_) => Line::Other,
    }
}

/// Reads the request head at the start of `buf` (after empty lines, which RFC 9112 2.2 lets a
/// server skip).
pub fn parse_head(buf: &[u8]) -> Head {
    let start = buf.iter().position(|b| *b != b'\r' && *b != b'\n').unwrap_or(buf.len());
    let verdict = parse_at(buf, start);
    if verdict == Head::NeedMore && buf.len() >= MAX_HEAD {
        return Head::Unreadable("HTTP");
    }
    verdict
}

fn parse_at(buf: &[u8], start: usize) -> Head {
    let line = &buf[start..];
    match request_line(line) {
        Line::NeedMore => return Head::NeedMore,
        Line::Http2 => return Head::Unreadable(H2C),
        Line::Other => return Head::Unreadable("HTTP"),
        Line::Request => {}
    }
    // As many headers as hyper reads; a head with more is not one a server would take either.
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(line) {
        Ok(httparse::Status::Partial) => return Head::NeedMore,
        Ok(httparse::Status::Complete(n)) => n,
        Err(_) => return Head::Unreadable("HTTP"),
    };
    if req.method == Some("CONNECT") {
        // A tunnel through whatever the server is, to a target the connection was not decided
        // on: a proxy's own port is the place for it, not a name-ruled one.
        return Head::Unreadable("HTTP (CONNECT to a web server's port)");
    }
    let host = match request_host(&req) {
        Ok(h) => h,
        Err(what) => return Head::Unreadable(what),
    };
    let body = match body_framing(&req) {
        Ok(b) => b,
        Err(what) => return Head::Unreadable(what),
    };
    // A body on a method without one (RFC 9110 9.3): a server that ignores it reads it as the
    // next request, one this framer relayed as body, undecided.
    if body != Body::Length(0) && matches!(req.method, Some("GET" | "HEAD" | "OPTIONS" | "DELETE" | "TRACE")) {
        return Head::Unreadable("HTTP (a body on a request whose method has none)");
    }
    let mut upgrades = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("upgrade"));
    let upgrade = match (upgrades.next(), upgrades.next()) {
        (None, _) => false,
        // A WebSocket is the one upgrade followed: after `101` its frames go to the resource
        // the handshake was decided for. h2c would carry requests for any authority.
        (Some(u), None) if u.value.trim_ascii().eq_ignore_ascii_case(b"websocket") => true,
        _ => return Head::Unreadable("HTTP (an upgrade to a protocol other than WebSocket)"),
    };
    Head::Complete(RequestHead { host, len: start + len, body, upgrade })
}

fn request_host(req: &httparse::Request) -> Result<Option<String>, &'static str> {
    let mut hosts = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host"));
    let first = hosts.next();
    if hosts.next().is_some() {
        return Err("HTTP (two Host headers)");
    }
    // A Host that is there but not a plain name (`x@blocked.test`, `blocked.test/`) is not
    // "no name": servers and frameworks read a name out of it.
    let host = match first {
        None => None,
        Some(h) => Some(strip_port(h.value).and_then(clean_name).ok_or("HTTP (a Host that is not a plain name)")?),
    };
    // An absolute-form target names the host itself (RFC 9112 3.2.2), and a server takes it
    // over Host: both must agree, or the name shown is not the one served.
    let target = req.path.and_then(authority_of).map(|a| strip_port(a).and_then(clean_name));
    match (target, host) {
        (Some(None), _) => Err("HTTP (a request target without a host)"),
        (Some(Some(t)), Some(h)) if t != h => Err("HTTP (Host is not the request's target)"),
        (Some(Some(t)), _) => Ok(Some(t)),
        (None, host) => Ok(host),
    }
}

/// How a request's body ends (RFC 9112 6.3), refusing what two servers could read apart.
fn body_framing(req: &httparse::Request) -> Result<Body, &'static str> {
    let mut coding: Option<String> = None;
    let mut length: Option<u64> = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let v = std::str::from_utf8(h.value).map_err(|_| "HTTP (a malformed Transfer-Encoding)")?;
            let all = coding.get_or_insert_with(String::new);
            if !all.is_empty() {
                all.push(',');
            }
            all.push_str(v);
        } else if h.name.eq_ignore_ascii_case("content-length") {
            for v in h.value.split(|c| *c == b',') {
                let v = v.trim_ascii();
                if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
                    return Err("HTTP (a malformed Content-Length)");
                }
                let n: u64 = std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or("HTTP (a malformed Content-Length)")?;
                if length.is_some_and(|l| l != n) {
                    return Err("HTTP (two different Content-Lengths)");
                }
                length = Some(n);
            }
        }
    }
    match (coding, length) {
        (Some(_), Some(_)) => Err("HTTP (both Transfer-Encoding and Content-Length)"),
        (Some(c), None) => {
            let last = c.rsplit(',').next().unwrap_or("").trim();
            if req.version == Some(0) || !last.eq_ignore_ascii_case("chunked") {
                return Err("HTTP (a Transfer-Encoding other than chunked)");
            }
            Ok(Body::Chunked)
        }
        (None, Some(n)) => Ok(Body::Length(n)),
        (None, None) => Ok(Body::Length(0)),
    }
}

/// `http://user@host:80/x` -> `host:80` (the authority of an absolute-form target, without
/// userinfo); None for the origin form (`/x`).
fn authority_of(target: &str) -> Option<&[u8]> {
    let (_, rest) = target.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    Some(authority.rsplit_once('@').map_or(authority, |(_, h)| h).as_bytes())
}

/// `example.org:8080` -> `example.org`; `[2001:db8::1]:443` -> `2001:db8::1`.
pub(super) fn strip_port(v: &[u8]) -> Option<&[u8]> {
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
pub(super) fn clean_name(n: &[u8]) -> Option<String> {
    let n = n.strip_suffix(b".").unwrap_or(n);
    let ok = !n.is_empty()
        && n.len() <= 253
        && n.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b':'));
    ok.then(|| String::from_utf8_lossy(n).to_ascii_lowercase())
}

/// What to do with the bytes at the front of what the jail sent and nothing has decided yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The next `n` bytes belong to a request already decided: relay them.
    Forward(usize),
    /// A complete request head: decide it, then `accept` it (its `len` bytes may then be
    /// relayed) or end the connection.
    Decide(RequestHead),
    /// Wait for more bytes from the jail.
    NeedMore,
    /// Relay nothing more from the jail until the server's answer to an upgrade is read
    /// (`response`).
    Hold,
    /// End the connection: the bytes cannot be framed one way only.
    Refuse(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body(u64),
    /// Chunked body: reading a chunk-size line (its length so far, and whether it is the last).
    ChunkSize {
        line: usize,
        size: Option<u64>,
        ext: bool,
        cr: bool,
    },
    ChunkData(u64),
    /// The CRLF after a chunk's data (`true`: the CR was read).
    ChunkEnd(bool),
    /// The trailer section after the last chunk: bytes so far, and the current line's.
    Trailer {
        total: usize,
        line: usize,
        cr: bool,
    },
    /// An upgrade was asked for: nothing more is relayed until the server answers.
    AwaitUpgrade,
    /// The server switched protocols: bytes are no longer HTTP/1 and pass untouched.
    Switched,
}

/// Follows one connection's requests. Feed it the undecided bytes with `step`; what it says
/// to forward has been accounted for, a head it shows must be `accept`ed before its bytes go.
#[derive(Debug)]
pub struct Framer {
    state: State,
    /// Heads decided on this connection.
    requests: u64,
    /// The server's answer to an upgrade, while it is read.
    response: Vec<u8>,
}

impl Default for Framer {
    fn default() -> Self {
        Framer { state: State::Head, requests: 0, response: Vec::new() }
    }
}

impl Framer {
    pub fn step(&mut self, buf: &[u8]) -> Step {
        match self.state {
            State::Head => {
                if buf.is_empty() {
                    return Step::NeedMore;
                }
                match parse_head(buf) {
                    Head::NeedMore => Step::NeedMore,
                    Head::Unreadable(what) => Step::Refuse(what),
                    Head::Complete(h) if h.upgrade && self.requests > 0 => {
                        // Only the first response can be told apart without framing responses.
                        Step::Refuse("HTTP (an upgrade after the first request of a connection)")
                    }
                    // The server would wait for the body while the relay waits for its answer.
                    Head::Complete(h) if h.upgrade && h.body != Body::Length(0) => {
                        Step::Refuse("HTTP (an upgrade request with a body)")
                    }
                    Head::Complete(h) => Step::Decide(h),
                }
            }
            State::AwaitUpgrade => Step::Hold,
            State::Switched => match buf.len() {
                0 => Step::NeedMore,
                n => Step::Forward(n),
            },
            State::Body(_) | State::ChunkData(_) if buf.is_empty() => Step::NeedMore,
            State::Body(n) => {
                let take = n.min(buf.len() as u64);
                self.state = if take == n { State::Head } else { State::Body(n - take) };
                Step::Forward(take as usize)
            }
            State::ChunkData(n) => {
                let take = n.min(buf.len() as u64);
                self.state = if take == n { State::ChunkEnd(false) } else { State::ChunkData(n - take) };
                Step::Forward(take as usize)
            }
            _ => self.step_chunk_framing(buf),
        }
    }

    /// Size lines, chunk ends and trailers, a byte at a time (they are short).
    fn step_chunk_framing(&mut self, buf: &[u8]) -> Step {
        if buf.is_empty() {
            return Step::NeedMore;
        }
        let mut used = 0;
        for &b in buf {
            used += 1;
            let next = match self.state {
                State::ChunkSize { line, size, ext, cr } => {
                    if line + 1 > MAX_CHUNK_LINE {
                        return Step::Refuse("HTTP (a chunk-size line too long)");
                    }
                    match (b, cr) {
                        (b'\n', true) => match size {
                            None => return Step::Refuse("HTTP (a chunk without a size)"),
                            Some(0) => State::Trailer { total: 0, line: 0, cr: false },
                            Some(n) => State::ChunkData(n),
                        },
                        (_, true) => return Step::Refuse("HTTP (a malformed chunk-size line)"),
                        (b'\r', false) => State::ChunkSize { line: line + 1, size, ext, cr: true },
                        (b';', false) if size.is_some() => State::ChunkSize { line: line + 1, size, ext: true, cr },
                        (c, false) if ext => {
                            if c == b'\n' || c == 0 {
                                return Step::Refuse("HTTP (a malformed chunk extension)");
                            }
                            State::ChunkSize { line: line + 1, size, ext, cr }
                        }
                        (c, false) => {
                            let Some(d) = (c as char).to_digit(16) else {
                                return Step::Refuse("HTTP (a malformed chunk size)");
                            };
                            let s = size.unwrap_or(0);
                            if s >> 60 != 0 {
                                return Step::Refuse("HTTP (a chunk size too large)");
                            }
                            State::ChunkSize { line: line + 1, size: Some(s * 16 + u64::from(d)), ext, cr }
                        }
                    }
                }
                State::ChunkEnd(cr) => match (b, cr) {
                    (b'\r', false) => State::ChunkEnd(true),
                    (b'\n', true) => State::ChunkSize { line: 0, size: None, ext: false, cr: false },
                    _ => return Step::Refuse("HTTP (a chunk not ended by CRLF)"),
                },
                State::Trailer { total, line, cr } => {
                    if total + 1 > MAX_HEAD {
                        return Step::Refuse("HTTP (a trailer section too long)");
                    }
                    match (b, cr) {
                        // An empty line ends the trailers, and the request.
                        (b'\n', true) if line == 0 => State::Head,
                        (b'\n', true) => State::Trailer { total: total + 1, line: 0, cr: false },
                        (_, true) => return Step::Refuse("HTTP (a malformed trailer)"),
                        (b'\r', false) => State::Trailer { total: total + 1, line, cr: true },
                        (b'\n' | 0, false) => return Step::Refuse("HTTP (a malformed trailer)"),
                        (_, false) => State::Trailer { total: total + 1, line: line + 1, cr },
                    }
                }
                // step() sends only the chunk-framing states here.
                _ => return Step::Refuse("HTTP"),
            };
            self.state = next;
            if matches!(next, State::Head | State::ChunkData(_)) {
                break;
            }
        }
        Step::Forward(used)
    }

    /// The head `step` showed was allowed: its bytes may go, and its body follows.
    pub fn accept(&mut self, head: &RequestHead) {
        self.requests += 1;
        self.state = match head.body {
            _ if head.upgrade => State::AwaitUpgrade,
            Body::Length(0) => State::Head,
            Body::Length(n) => State::Body(n),
            Body::Chunked => State::ChunkSize { line: 0, size: None, ext: false, cr: false },
        };
    }

    /// Whether the server's bytes are wanted (`response`): an upgrade waits for its answer.
    pub fn awaits_response(&self) -> bool {
        self.state == State::AwaitUpgrade
    }

    /// Bytes from the server while `awaits_response`: once its status line is read, a `101`
    /// switches the connection to opaque bytes, anything else returns to framing requests.
    /// Interim answers (100, 102, 103) are skipped. Err: the answer cannot be read.
    pub fn response(&mut self, bytes: &[u8]) -> Result<(), &'static str> {
        if self.state != State::AwaitUpgrade {
            return Ok(());
        }
        self.response.extend_from_slice(&bytes[..bytes.len().min(MAX_HEAD + 1)]);
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 128];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&self.response) {
                Ok(httparse::Status::Partial) if self.response.len() > MAX_HEAD => {
                    return Err("the server's answer to an upgrade is too long to read")
                }
                Ok(httparse::Status::Partial) => return Ok(()),
                Err(_) => return Err("the server's answer to an upgrade is not HTTP"),
                Ok(httparse::Status::Complete(n)) => match resp.code {
                    Some(101) => {
                        self.state = State::Switched;
                        self.response = Vec::new();
                        return Ok(());
                    }
                    Some(100 | 102 | 103) => {
                        self.response.drain(..n);
                    }
                    _ => {
                        self.state = State::Head;
                        self.response = Vec::new();
                        return Ok(());
                    }
                },
            }
        }
    }
}

/// Hop-by-hop headers (RFC 9110 7.6.1): meant for the proxy, not passed on either way. The
/// upstream connection serves one request (`Connection: close`), while the client's may be
/// kept alive: the two must not share `Connection`. `Upgrade` is dropped: a forwarded
/// request is never switched to another protocol (tunnels are CONNECT's).
pub fn strip_hop_by_hop(h: &mut hyper::header::HeaderMap) {
    let named: Vec<hyper::header::HeaderName> = h
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| hyper::header::HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    let proxy: Vec<hyper::header::HeaderName> =
        h.keys().filter(|k| k.as_str().starts_with("proxy-")).cloned().collect();
    for n in proxy {
        h.remove(n);
    }
    for n in ["connection", "keep-alive", "upgrade", "te"] {
        h.remove(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `input` through a framer, deciding each head with `allow`, the way a relay does;
    /// returns the bytes it would relay and the names it decided, and why it stopped if it did.
    fn relay(input: &[u8], allow: impl Fn(&str) -> bool) -> (Vec<u8>, Vec<String>, Option<&'static str>) {
        let mut f = Framer::default();
        let (mut out, mut names) = (vec![], vec![]);
        let mut at = 0;
        loop {
            match f.step(&input[at..]) {
                Step::Forward(n) => {
                    assert!(n > 0 && at + n <= input.len());
                    out.extend_from_slice(&input[at..at + n]);
                    at += n;
                }
                Step::Decide(h) => {
                    let name = h.host.clone().unwrap_or_default();
                    names.push(name.clone());
                    if !allow(&name) {
                        return (out, names, Some("denied"));
                    }
                    out.extend_from_slice(&input[at..at + h.len]);
                    at += h.len;
                    f.accept(&h);
                }
                Step::NeedMore | Step::Hold => return (out, names, None),
                Step::Refuse(what) => return (out, names, Some(what)),
            }
        }
    }

    fn allowed(n: &str) -> bool {
        n != "blocked.test"
    }

    #[test]
    fn a_request_line_is_known_by_its_grammar_not_a_list_of_methods() {
        // Issue 33: `PROPFIND`, `REPORT` or a method of no list was not HTTP to the peek, so
        // the flow went on the address alone and later requests were never framed.
        for line in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROPFIND /dav/ HTTP/1.1\r\n",
            b"REPORT /cal HTTP/1.1\n",
            b"MKCOL /x HTTP/1.0\r\n",
            b"BREW /pot HTTP/1.1\r\nHost: x\r\n",
        ] {
            assert_eq!(request_line(line), Line::Request, "{:?}", String::from_utf8_lossy(line));
        }
        assert_eq!(request_line(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Line::Http2);
        for partial in [
            &b"P"[..],
            b"PROPF",
            b"PROPFIND ",
            b"PROPFIND /a",
            b"PROPFIND /a HT",
            b"PROPFIND /a HTTP/1.1",
            b"GET / HTTP/1.1\r",
        ] {
            assert_eq!(request_line(partial), Line::NeedMore, "{:?}", String::from_utf8_lossy(partial));
        }
        for other in [
            &b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"[..],
            b"PING\r\n",
            b"EHLO x\r\n",
            b"DESCRIBE rtsp://h/a RTSP/1.0\r\n",
            b"\x00\x01binary",
            b"GET  / HTTP/1.1\r\n",
            b"GET / HTTP/1.1x\r\n",
            b"G\x01T / HTTP/1.1\r\n",
        ] {
            assert_eq!(request_line(other), Line::Other, "{:?}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn every_request_of_a_kept_alive_connection_is_decided() {
        let two = b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /x HTTP/1.1\r\nHost: blocked.test\r\n\r\n";
        let (out, names, stop) = relay(two, allowed);
        assert_eq!(names, ["allowed.test", "blocked.test"]);
        assert_eq!(stop, Some("denied"));
        assert_eq!(out, b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "not a byte of the second request");
    }

    #[test]
    fn bodies_are_skipped_by_length_and_by_chunks_and_the_next_head_is_found() {
        // The body (38 bytes) looks like a request to a blocked name: it is body all the same.
        let cl = b"POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 38\r\n\r\n\
                   GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\nGET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n";
        let (out, names, stop) = relay(cl, allowed);
        assert_eq!(names, ["allowed.test", "blocked.test"], "the body bytes are body, whatever they look like");
        assert_eq!(stop, Some("denied"));
        assert_eq!(out.len(), cl.len() - 38);
        let chunked = b"POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
                        5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-Trailer: y\r\n\r\n\
                        GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n";
        let (_, names, stop) = relay(chunked, allowed);
        assert_eq!(names, ["allowed.test", "blocked.test"]);
        assert_eq!(stop, Some("denied"));
        // The same, fed a byte at a time: framing never depends on how bytes arrive.
        let mut f = Framer::default();
        let mut decided = vec![];
        let mut pending: Vec<u8> = vec![];
        for &b in chunked.iter() {
            pending.push(b);
            loop {
                match f.step(&pending) {
                    Step::Forward(n) => {
                        pending.drain(..n);
                    }
                    Step::Decide(h) => {
                        decided.push(h.host.clone().unwrap_or_default());
                        pending.drain(..h.len);
                        f.accept(&h);
                    }
                    Step::NeedMore => break,
                    other => panic!("{other:?}"),
                }
            }
        }
        assert_eq!(decided, ["allowed.test", "blocked.test"]);
    }

    #[test]
    fn what_a_server_could_frame_two_ways_ends_the_connection() {
        let cases: &[&[u8]] = &[
            b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: +5\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.0\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\nZ\r\n",
            b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n",
            b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXY",
            b"CONNECT blocked.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"GET http://blocked.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: blocked.test\r\n\r\n",
            // A body a GET handler ignores would be read as the next request (attack H1).
            b"GET / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 38\r\n\r\n",
            b"HEAD / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n",
            // Hosts with more than a name in them (attack H2).
            b"GET / HTTP/1.1\r\nHost: x@blocked.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: blocked.test\\\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: blocked.test/\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: blocked.test,\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: \r\n\r\n",
            // Upgrades other than WebSocket.
            b"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: h2c\r\n\r\n",
        ];
        for c in cases {
            let (_, _, stop) = relay(c, |_| true);
            assert!(matches!(stop, Some(w) if w.starts_with("HTTP")), "{:?}: {stop:?}", String::from_utf8_lossy(c));
        }
        // Same Content-Length twice is one length (RFC 9110 8.6).
        let (_, names, stop) = relay(b"POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2, 2\r\n\r\nok", |_| true);
        assert_eq!((names.len(), stop), (1, None));
    }

    #[test]
    fn a_second_request_after_empty_lines_or_a_long_head_is_still_read() {
        let mut s =
            b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n".to_vec();
        let (_, names, _) = relay(&s, allowed);
        assert_eq!(names, ["a.test", "blocked.test"]);
        s = b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nX: ".to_vec();
        s.resize(MAX_HEAD * 2, b'a');
        let (_, names, stop) = relay(&s, allowed);
        assert_eq!(names, ["a.test"]);
        assert_eq!(stop, Some("HTTP"), "a head past the bound hides its name: refused");
    }

    #[test]
    fn an_upgrade_holds_until_the_server_switches_and_then_bytes_pass() {
        let mut f = Framer::default();
        let req = b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        let Step::Decide(h) = f.step(req) else { panic!() };
        f.accept(&h);
        assert_eq!(f.step(b"GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n"), Step::Hold);
        assert!(f.awaits_response());
        f.response(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n").expect("partial");
        assert!(f.awaits_response());
        f.response(b"\r\n\x81\x05hello").expect("complete");
        assert!(!f.awaits_response());
        assert_eq!(f.step(b"\x81\x85anything"), Step::Forward(10), "websocket frames pass untouched");
    }

    #[test]
    fn an_upgrade_the_server_refuses_returns_to_deciding_requests() {
        let mut f = Framer::default();
        let req = b"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: WebSocket\r\n\r\n";
        let Step::Decide(h) = f.step(req) else { panic!() };
        f.accept(&h);
        f.response(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").expect("ok");
        assert!(!f.awaits_response());
        assert!(
            matches!(f.step(b"GET / HTTP/1.1\r\nHost: blocked.test\r\n\r\n"), Step::Decide(h) if h.host.as_deref() == Some("blocked.test"))
        );
        // An upgrade after the first request cannot be followed: refused.
        let mut f = Framer::default();
        let Step::Decide(h) = f.step(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n") else { panic!() };
        f.accept(&h);
        assert!(matches!(f.step(req), Step::Refuse(_)));
        let mut f = Framer::default();
        let Step::Decide(h) = f.step(req) else { panic!() };
        f.accept(&h);
        assert!(f.response(b"\x00garbage\r\n\r\n").is_err());
    }

    #[test]
    fn random_bytes_never_panic_and_forward_stays_in_bounds() {
        let mut x: u64 = 0x2545f4914f6cdd1d;
        for len in 0..3000usize {
            let mut buf = b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            for _ in 0..len % 200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                const ALPHABET: &[u8] = b"0123456789abcdefABCDEF;\r\n\r\nxyz=GET / HTTP/1.1Host:";
                buf.push(ALPHABET[(x % ALPHABET.len() as u64) as usize]);
            }
            let _ = relay(&buf, |_| true);
            let mut f = Framer::default();
            let _ = f.response(&buf);
        }
    }
}
