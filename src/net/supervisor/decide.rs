//! What a flow of the jail may reach, beyond what the matcher alone says: an address the
//! jail's resolver gave out is judged as the names it was given for, and a name the flow shows
//! (TLS SNI, HTTP Host) counts only if our resolver gave it for that address or the address is
//! allowed anyway, so a forged SNI opens nothing. Also `Shared`, the read-mostly state the
//! loop and the resolver tasks hold. Knows nothing of packets, sockets or flows.

use crate::net::audit::Auditor;
use crate::net::dns::NameCache;
use crate::netrules::matcher::{Decision, Destination, Layer, Proto, RuleSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The shared, read-mostly state the resolver tasks need too.
pub(super) struct Shared {
    pub(super) rules: RuleSet,
    /// The names our resolver gave for each address (filled by `dns.rs`).
    pub(super) names: Mutex<NameCache>,
    pub(super) upstreams: Vec<SocketAddr>,
    pub(super) audit: Auditor,
    /// UDP queries being resolved at once, at most `MAX_RESOLVING`.
    pub(super) resolving: Arc<tokio::sync::Semaphore>,
    /// A job's: its session's listeners on the login node (`--job-port`), reachable whatever
    /// the rules and floors say of their address (an internal one, often).
    pub(super) job_services: Vec<SocketAddr>,
}

/// UDP queries from the jail resolved at once, at most.
pub(super) const MAX_RESOLVING: usize = 256;

impl Shared {
    /// Decides a flow to `dst`. `shown`: the name the flow itself carries (SNI or Host).
    pub(super) fn decide(&self, dst: SocketAddr, proto: Proto, shown: Option<&str>) -> Decision {
        if proto == Proto::Tcp && self.job_services.contains(&dst) {
            return Decision {
                allowed: true,
                rule: dst.to_string(),
                layer: Layer::Admin,
                reason: "the job's session serves its jobs there (--job-port)".into(),
            };
        }
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

#[cfg(test)]
mod tests {
    use super::super::testing::{rules, sa, shared};
    use super::*;
    use crate::netrules::matcher::Action::{Allow, Block};

    const IP: &str = "198.51.100.7:443";

    fn resolved(s: &Shared, name: &str, dst: SocketAddr) {
        s.names.lock().unwrap().learn(name, dst.ip(), 60, Instant::now());
    }

    #[test]
    fn a_jobs_session_listener_is_reached_past_every_rule_and_nothing_next_to_it() {
        let mut s = shared(rules(&[("*", Block), ("10.0.0.0/8", Block)]), None);
        s.job_services = vec![sa("10.1.2.3:40123")];
        assert!(s.decide(sa("10.1.2.3:40123"), Proto::Tcp, None).allowed, "the session's job port");
        for (dst, proto) in
            [("10.1.2.3:40124", Proto::Tcp), ("10.1.2.3:22", Proto::Tcp), ("10.1.2.3:40123", Proto::Udp)]
        {
            assert!(!s.decide(sa(dst), proto, None).allowed, "{dst} {proto:?}");
        }
    }

    #[test]
    fn an_address_the_jails_resolver_gave_is_judged_as_its_names() {
        let s = shared(rules(&[("*", Block), ("allowed.test", Allow)]), None);
        assert!(!s.decide(sa(IP), Proto::Tcp, None).allowed, "a bare address under `*` blocked");
        resolved(&s, "allowed.test", sa(IP));
        assert!(s.decide(sa(IP), Proto::Tcp, None).allowed, "the name the jail resolved it for");
        assert!(s.decide(sa(IP), Proto::Udp, None).allowed);
        assert!(s.decide(sa(IP), Proto::Tcp, Some("Allowed.Test.")).allowed, "case and root dot do not matter");
    }

    #[test]
    fn an_address_known_under_several_names_is_allowed_if_one_of_them_is() {
        let s = shared(rules(&[("blocked.test", Block)]), None);
        resolved(&s, "blocked.test", sa(IP));
        assert!(!s.decide(sa(IP), Proto::Tcp, None).allowed);
        resolved(&s, "cdn.test", sa(IP));
        assert!(s.decide(sa(IP), Proto::Tcp, None).allowed);
    }

    #[test]
    fn a_forged_sni_for_an_address_known_under_another_name_is_refused() {
        let s = shared(rules(&[("*", Block), ("allowed.test", Allow)]), None);
        resolved(&s, "other.test", sa(IP));
        let d = s.decide(sa(IP), Proto::Tcp, Some("allowed.test"));
        assert!(!d.allowed);
        assert!(d.reason.contains("`allowed.test` was not resolved to 198.51.100.7"), "{d:?}");
        resolved(&s, "allowed.test", sa(IP));
        assert!(s.decide(sa(IP), Proto::Tcp, Some("allowed.test")).allowed, "once our resolver gave it");
    }

    #[test]
    fn a_shown_name_that_is_blocked_is_refused_by_its_own_rule() {
        let s = shared(rules(&[("blocked.test", Block)]), None);
        resolved(&s, "blocked.test", sa(IP));
        let d = s.decide(sa(IP), Proto::Tcp, Some("blocked.test"));
        assert_eq!((d.allowed, d.rule.as_str()), (false, "blocked.test"));
    }

    #[test]
    fn an_address_rule_allows_a_name_the_resolver_never_gave() {
        let s = shared(rules(&[("*", Block), ("198.51.100.0/24", Allow)]), None);
        assert!(s.decide(sa(IP), Proto::Tcp, Some("unknown.test")).allowed);
        assert!(!s.decide(sa("192.0.2.7:443"), Proto::Tcp, Some("unknown.test")).allowed, "outside the rule");
    }

    #[test]
    fn the_floors_hold_whatever_name_a_flow_shows() {
        let s = shared(rules(&[("allowed.test", Allow)]), None);
        resolved(&s, "allowed.test", sa("127.0.0.1:443"));
        for shown in [None, Some("allowed.test")] {
            let d = s.decide(sa("127.0.0.1:443"), Proto::Tcp, shown);
            assert_eq!((d.allowed, d.layer), (false, Layer::Floor), "{shown:?}: {d:?}");
        }
        assert!(!s.decide(sa("198.51.100.7:25"), Proto::Tcp, Some("allowed.test")).allowed, "port floor");
    }
}
