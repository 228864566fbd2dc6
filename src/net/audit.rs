//! Network denials into the audit log, which rate-limits them per check (a port scan from the
//! jail cannot flood it, nor hide a DNS or SNI denial of the same second) and counts what it
//! leaves out (every denial still goes to tracing). Shared by `filtered` (this supervisor) and
//! `proxied` (the proxies). It decides nothing: callers hand it the decision they made.

use crate::audit::AuditLog;
use crate::netrules::matcher::{Decision, Layer};
use std::net::SocketAddr;

/// Writes denials to the audit log (its rate per kind applies: `net_denied/<check>`).
pub(crate) struct Auditor {
    log: Option<AuditLog>,
    mode: &'static str,
}

impl Auditor {
    pub(crate) fn new(log: Option<AuditLog>, mode: &'static str) -> Auditor {
        Auditor { log, mode }
    }

    pub(crate) fn deny(&self, proto: &str, dest: Option<SocketAddr>, name: Option<&str>, check: &str, d: &Decision) {
        tracing::info!(proto, ?dest, name, check, rule = d.rule.as_str(), reason = d.reason.as_str(), "network denial");
        let Some(log) = &self.log else { return };
        let mut r = log.record("net_denied");
        r.net = Some(self.mode.into());
        r.proto = Some(proto.into());
        r.dest = dest.map(|d| d.to_string());
        r.name = name.map(str::to_owned);
        r.check = Some(check.into());
        r.rule = Some(d.rule.clone());
        r.layer = Some(
            match d.layer {
                Layer::Floor => "floor",
                Layer::Admin => "admin",
                Layer::User => "user",
            }
            .into(),
        );
        r.reason = Some(d.reason.clone());
        log.write(&r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netrules::matcher::Decision;

    const AUDIT_PER_SECOND: usize = 50;

    fn denial() -> Decision {
        Decision { allowed: false, rule: "*".into(), layer: Layer::User, reason: "blocked".into() }
    }

    #[test]
    fn a_burst_of_denials_writes_at_most_the_per_second_cap_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path());
        let a = Auditor::new(Some(log.clone()), "filtered");
        let t0 = std::time::Instant::now();
        for port in 0..500 {
            a.deny("tcp", Some(SocketAddr::from(([198, 51, 100, 7], port))), None, "connect", &denial());
        }
        let seconds = t0.elapsed().as_secs() as usize + 2;
        let written = crate::audit::read(dir.path(), None).unwrap();
        assert!(written.len() <= AUDIT_PER_SECOND * seconds && written.len() < 500, "{}", written.len());
        let r = &written[0];
        assert_eq!(
            (r.event.as_str(), r.net.as_deref(), r.layer.as_deref()),
            ("net_denied", Some("filtered"), Some("user"))
        );
        assert_eq!(r.dest.as_deref(), Some("198.51.100.7:0"));
        // Red team F6: the denials past the cap were dropped uncounted.
        log.write(&log.record("session_end"));
        let all = crate::audit::read(dir.path(), None).unwrap();
        let s = all.iter().find(|r| r.event == "audit_suppressed").expect("the rest is counted");
        assert_eq!(s.counts.get("net_denied/connect"), Some(&(500 - written.len() as u64)));
    }

    #[test]
    fn a_flood_of_one_check_does_not_hide_another() {
        // Red team F6: a connect flood hid every DNS denial of the same second.
        let dir = tempfile::tempdir().unwrap();
        let a = Auditor::new(Some(AuditLog::new(dir.path())), "filtered");
        for port in 0..500 {
            a.deny("tcp", Some(SocketAddr::from(([10, 0, 0, 1], port))), None, "connect", &denial());
        }
        a.deny("dns", None, Some("secret.blocked.example"), "dns", &denial());
        let written = crate::audit::read(dir.path(), None).unwrap();
        assert!(written.iter().any(|r| r.check.as_deref() == Some("dns")), "the DNS denial is written");
    }
}
