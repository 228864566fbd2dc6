//! Credential endpoints (`plan::credentials`): the jail talks plain HTTP to a port of the
//! gateway, which the supervisor serves in-process over a socket pair (nothing on the host's
//! network can reach it); each request goes on over TLS to the one provider of that
//! endpoint, with the key set in its header (whatever the jail put there is dropped). The
//! key lives in this process only; the provider's addresses are decided like any flow's
//! (floors, rules), and what the jail sends elsewhere never carries it.

use super::decide::Shared;
use crate::net::parse::http1::strip_hop_by_hop;
use crate::netrules::matcher::{Destination, Proto};
use crate::plan::credentials::CredentialRoute;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, HOST};
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpStream, UnixStream};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// A request head from the jail, within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(60);

/// One endpoint: its route, the headers with the keys (from the launcher's environment: the
/// header's name and its whole value, prefix included) and the TLS client.
pub struct Endpoint {
    pub route: CredentialRoute,
    pub keys: Vec<(String, String)>,
    pub tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Endpoint {
    // Never the key, in any log or panic message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({} -> {}:{})", self.route.base_url_env, self.route.host, self.route.port)
    }
}

/// Connections to the endpoints at once, at most: each costs the launcher descriptors.
pub(super) const MAX_CONNECTIONS: usize = 64;

/// The TLS client of the endpoints: the host's trust store (`SSL_CERT_FILE` and
/// `SSL_CERT_DIR` honoured), as the user's own tools on the host would trust.
pub(crate) fn tls_client() -> Result<Arc<rustls::ClientConfig>, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(format!("no trusted CA certificates found on this host ({:?})", found.errors.first()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves one connection of the jail to the endpoint.
pub(super) async fn serve(io: UnixStream, ep: Arc<Endpoint>, shared: Arc<Shared>) {
    let service = hyper::service::service_fn(move |req| {
        let (ep, shared) = (ep.clone(), shared.clone());
        async move { Ok::<_, Infallible>(forward(req, &ep, &shared).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .half_close(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

fn text(status: StatusCode, line: &str) -> Response<Body> {
    let body =
        Full::new(Bytes::from(format!("agent-sandbox: {line}\n"))).map_err(|never: Infallible| match never {}).boxed();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

async fn forward(req: Request<Incoming>, ep: &Endpoint, shared: &Shared) -> Response<Body> {
    let r = &ep.route;
    // An API's methods only: not a proxy (CONNECT), nothing that echoes the request with its
    // headers (TRACE, on a gateway of the user's), nothing to ask what else the server has.
    use hyper::Method;
    if ![Method::GET, Method::HEAD, Method::POST, Method::PUT, Method::PATCH, Method::DELETE].contains(req.method()) {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("the credential endpoint takes no {} requests", req.method()),
        );
    }
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "/".into());
    if !within(&path, &r.path) {
        return text(StatusCode::FORBIDDEN, &format!("the credential endpoint serves {}/ only", r.path));
    }
    let Ok(origin) = path.parse::<hyper::Uri>() else {
        return text(StatusCode::BAD_REQUEST, "the credential endpoint takes origin-form paths");
    };
    strip_hop_by_hop(&mut parts.headers);
    // What a proxy says of the client is ours to say, and we say nothing.
    for h in ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip", "via"] {
        parts.headers.remove(h);
    }
    for (name, value) in &ep.keys {
        let (Ok(header), Ok(mut value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value))
        else {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("a key of {} does not fit in an HTTP header", r.base_url_env),
            );
        };
        value.set_sensitive(true);
        parts.headers.remove(&header);
        parts.headers.insert(header, value);
    }
    let authority = match (r.host.contains(':'), r.port) {
        (true, p) => format!("[{}]:{p}", r.host),
        (false, 443) => r.host.clone(),
        (false, p) => format!("{}:{p}", r.host),
    };
    if let Ok(v) = HeaderValue::from_str(&authority) {
        parts.headers.insert(HOST, v);
    }
    parts.headers.insert(CONNECTION, HeaderValue::from_static("close"));
    parts.uri = origin;
    parts.version = Version::HTTP_11;
    let tls = match connect(r, &ep.tls, shared).await {
        Ok(s) => s,
        Err(why) => {
            tracing::warn!(host = %r.host, "credential endpoint: {why}");
            return text(StatusCode::BAD_GATEWAY, &format!("{}: {why}", r.host));
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tls)).await {
        Ok(x) => x,
        Err(e) => return text(StatusCode::BAD_GATEWAY, &format!("{}: {e}", r.host)),
    };
    tokio::spawn(async move {
        let _ = conn.await;
    });
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => text(StatusCode::BAD_GATEWAY, &format!("{} answered badly: {e}", r.host)),
    }
}

/// `path` (origin form) lies under `base` ("" or "/v1"): no `..` or `.` segment, no encoded
/// slash or dot that a server could decode into one.
fn within(path: &str, base: &str) -> bool {
    let p = path.split(['?', '#']).next().unwrap_or("");
    let lower = p.to_ascii_lowercase();
    if !p.starts_with('/')
        || lower.contains("%2f")
        || lower.contains("%2e")
        || lower.contains("%5c")
        || p.contains('\\')
    {
        return false;
    }
    if p.split('/').any(|seg| seg == ".." || seg == ".") {
        return false;
    }
    base.is_empty() || p == base || p.starts_with(&format!("{base}/"))
}

/// A TLS connection to the provider: its addresses through the session's resolvers, each
/// decided as a flow of the jail to that name would be (floors and rules), the first that
/// is allowed and answers, its certificate checked for the provider's name.
async fn connect(
    r: &CredentialRoute,
    tls: &Arc<rustls::ClientConfig>,
    shared: &Shared,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let addrs = match r.host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => crate::net::dns::resolve(&r.host, &shared.upstreams).await,
    };
    if addrs.is_empty() {
        return Err("the name does not resolve".into());
    }
    let mut last = String::from("no address allowed");
    for ip in addrs {
        let dst = Destination { ip: Some(ip), name: Some(&r.host), port: r.port, proto: Proto::Tcp };
        let d = shared.rules.decide(&dst);
        if !d.allowed {
            shared.audit.deny("tcp", Some(SocketAddr::new(ip, r.port)), Some(&r.host), "credential", &d);
            last = d.reason;
            continue;
        }
        let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((ip, r.port))).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                last = e.to_string();
                continue;
            }
            Err(_) => {
                last = "connect timed out".into();
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let name = rustls::pki_types::ServerName::try_from(r.host.clone()).map_err(|e| e.to_string())?;
        return tokio_rustls::TlsConnector::from(tls.clone()).connect(name, tcp).await.map_err(|e| e.to_string());
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::within;

    #[test]
    fn only_paths_under_the_providers_api() {
        assert!(within("/v1/messages?beta=true", "/v1"));
        assert!(within("/v1", "/v1"));
        assert!(within("/anything", ""));
        for bad in ["/v2/x", "/v1x", "/v1/../admin", "/v1/./x", "/v1/%2e%2e/x", "/v1%2fx", "x", "/v1\\..\\x"] {
            assert!(!within(bad, "/v1"), "{bad}");
        }
    }
}
