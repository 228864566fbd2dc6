//! What a flow of the jail may reach, beyond what the matcher alone says: an address the
//! jail's resolver gave out is judged as the names it was given for, and a name the flow shows
//! (TLS SNI, HTTP Host) counts only if our resolver gave it for that address or the address is
//! allowed anyway, so a forged SNI opens nothing. Also `Shared`, the read-mostly state the
//! loop and the resolver tasks hold. Knows nothing of packets, sockets or flows.

use super::audit::Auditor;
use crate::net::dns::NameCache;
use crate::netrules::matcher::{Decision, Destination, Layer, Proto, RuleSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Instant;

/// The shared, read-mostly state the resolver tasks need too.
pub(super) struct Shared {
    pub(super) rules: RuleSet,
    /// The names our resolver gave for each address (filled by `dns.rs`).
    pub(super) names: Mutex<NameCache>,
    pub(super) upstreams: Vec<SocketAddr>,
    pub(super) audit: Auditor,
}

impl Shared {
    /// Decides a flow to `dst`. `shown`: the name the flow itself carries (SNI or Host).
    pub(super) fn decide(&self, dst: SocketAddr, proto: Proto, shown: Option<&str>) -> Decision {
        let ip = dst.ip();
        let port = dst.port();
        let known = self.names.lock().map(|n| n.names_for(ip, Instant::now())).unwrap_or_default();
        let by_address = || {
            if known.is_empty() {
                return self.rules.decide(&Destination { ip: Some(ip), name: None, port, proto });
            }
            // An address the jail resolved: allowed if the flow is allowed under one of the
            // names it was resolved for (the floors apply whatever the name).
            let mut first_denial = None;
            for n in &known {
                let d = self.rules.decide(&Destination { ip: Some(ip), name: Some(n), port, proto });
                if d.allowed {
                    return d;
                }
                first_denial.get_or_insert(d);
            }
            first_denial.unwrap_or_else(|| self.rules.decide(&Destination { ip: Some(ip), name: None, port, proto }))
        };
        let Some(name) = shown else { return by_address() };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let as_named = self.rules.decide(&Destination { ip: Some(ip), name: Some(&name), port, proto });
        if !as_named.allowed || known.contains(&name) || name.parse::<IpAddr>().is_ok() {
            return as_named;
        }
        // A name our resolver never gave for this address: the flow must also be allowed as
        // what the address is known to be, or a forged SNI would open any address.
        let d = by_address();
        if d.allowed {
            return as_named;
        }
        Decision {
            reason: format!("the name `{name}` was not resolved to {ip} by the jail's resolver, and {}", d.reason),
            ..d
        }
    }
}

/// A refusal of the supervisor's own (a limit, the gateway's closed ports, QUIC under name
/// rules): no rule of the policy lifts it.
pub(super) fn refusal(reason: &str) -> Decision {
    Decision { allowed: false, rule: String::new(), layer: Layer::Floor, reason: reason.to_owned() }
}
