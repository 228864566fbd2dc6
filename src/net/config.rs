//! What both of the network's wings serve a session with: the `filtered` supervisor
//! (`supervisor::NetConfig` adds what only it serves) and the `proxied` proxies take the same
//! rules, resolvers, name-ruled ports, audit and control socket, built once by `net::start`.

use crate::audit::AuditLog;
use crate::netrules::matcher::RuleSet;
use std::net::SocketAddr;

pub struct Common {
    pub rules: RuleSet,
    pub upstreams: Vec<SocketAddr>,
    /// Flows to these ports are matched on their TLS SNI / HTTP Host before being dialled.
    pub hostname_ports: Vec<u16>,
    pub audit: Option<AuditLog>,
    /// The mode's name in audit records (`filtered`, `proxied`...).
    pub mode: &'static str,
    /// The session's control socket (`net::control`), for `agent-sandbox allow`.
    pub control: Option<std::path::PathBuf>,
    /// The administrator's net.allow, which bounds a grant too (None: no such list).
    pub grant_bound: Option<Vec<String>>,
}
