//! Network denials into the audit log, rate-limited so that a port scan from the jail cannot
//! flood it (every denial still goes to tracing). Shared by `filtered` (this supervisor) and
//! `proxied` (the proxies). It decides nothing: callers hand it the decision they made.

use crate::audit::AuditLog;
use crate::netrules::matcher::{Decision, Layer};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Denials written to the audit log per second, at most (a scan cannot flood the log).
const AUDIT_PER_SECOND: u32 = 50;

/// Writes denials to the audit log, at most `AUDIT_PER_SECOND`.
pub(crate) struct Auditor {
    log: Option<AuditLog>,
    mode: &'static str,
    window: Mutex<(Instant, u32)>,
}

impl Auditor {
    pub(crate) fn new(log: Option<AuditLog>, mode: &'static str) -> Auditor {
        Auditor { log, mode, window: Mutex::new((Instant::now(), 0)) }
    }

    pub(crate) fn deny(&self, proto: &str, dest: Option<SocketAddr>, name: Option<&str>, check: &str, d: &Decision) {
        tracing::info!(proto, ?dest, name, check, rule = d.rule.as_str(), reason = d.reason.as_str(), "network denial");
        let Some(log) = &self.log else { return };
        if let Ok(mut w) = self.window.lock() {
            if w.0.elapsed() >= Duration::from_secs(1) {
                *w = (Instant::now(), 0);
            }
            w.1 += 1;
            if w.1 > AUDIT_PER_SECOND {
                return;
            }
        }
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

    #[test]
    fn a_burst_of_denials_writes_at_most_the_per_second_cap() {
        let dir = tempfile::tempdir().unwrap();
        let a = Auditor::new(Some(AuditLog::new(dir.path())), "filtered");
        let d = Decision { allowed: false, rule: "*".into(), layer: Layer::User, reason: "blocked".into() };
        for port in 0..2 * AUDIT_PER_SECOND as u16 {
            a.deny("tcp", Some(SocketAddr::from(([198, 51, 100, 7], port))), None, "connect", &d);
        }
        let written = crate::audit::read(dir.path(), None).unwrap();
        assert_eq!(written.len(), AUDIT_PER_SECOND as usize);
        let r = &written[0];
        assert_eq!(
            (r.event.as_str(), r.net.as_deref(), r.layer.as_deref()),
            ("net_denied", Some("filtered"), Some("user"))
        );
        assert_eq!(r.dest.as_deref(), Some("198.51.100.7:0"));
    }
}
