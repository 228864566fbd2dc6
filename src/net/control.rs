//! The session's control socket: `agent-sandbox allow` from another terminal of the same user
//! widens a running session for a time (`host NAME`: a network grant, applied at once by the
//! supervisor or the proxies; `path P`: needs a new session, and says so). The socket lives in
//! the state directory, which no jail sees (hidden in the userns jail, outside every Landlock
//! rule), is 0600, and only the session's own user is heard (SO_PEERCRED). Every request is
//! logged in the session's audit log.

use crate::audit::AuditLog;
use crate::netrules::matcher::RuleSet;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// The longest grant: a day. A grant is an exception, not a policy.
pub const MAX_GRANT: Duration = Duration::from_secs(24 * 3600);
const MAX_REQUEST: u64 = 4096;
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// What `agent-sandbox allow` asks.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "lowercase")]
pub enum Request {
    /// A destination rule (as in `net.allow`) for `seconds`.
    Host { rule: String, seconds: u64 },
    /// A path to add, `~/data` or `~/data:ro`.
    Path { path: String },
}

/// The answer: `ok` false means nothing changed.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    pub message: String,
}

/// The control socket of `session` in the state directory.
pub fn socket_path(state_dir: &Path, session: &str) -> PathBuf {
    state_dir.join("sessions").join(format!("{session}.allow"))
}

/// Serves the control socket until the runtime ends. A socket that cannot be made costs the
/// escape hatch, loudly, not the session.
pub async fn serve(path: PathBuf, rules: RuleSet, audit: Option<AuditLog>) {
    let _ = std::fs::remove_file(&path);
    let listener = match UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "agent-sandbox: warning: `agent-sandbox allow` cannot reach this session: {}: {e}",
                path.display()
            );
            return;
        }
    };
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
    let me = nix::unistd::getuid().as_raw();
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if !conn.peer_cred().is_ok_and(|c| c.uid() == me) {
            continue;
        }
        let (rules, audit) = (rules.clone(), audit.clone());
        tokio::spawn(async move {
            let _ = tokio::time::timeout(IO_TIMEOUT, answer(conn, &rules, audit.as_ref())).await;
        });
    }
}

async fn answer(conn: UnixStream, rules: &RuleSet, audit: Option<&AuditLog>) -> std::io::Result<()> {
    let (r, mut w) = conn.into_split();
    let mut line = String::new();
    BufReader::new(tokio::io::AsyncReadExt::take(r, MAX_REQUEST)).read_line(&mut line).await?;
    let reply = match serde_json::from_str::<Request>(line.trim()) {
        Ok(req) => apply(req, rules, audit),
        Err(e) => Reply { ok: false, message: format!("a request this session does not understand: {e}") },
    };
    let mut out = serde_json::to_vec(&reply).unwrap_or_default();
    out.push(b'\n');
    w.write_all(&out).await
}

fn apply(req: Request, rules: &RuleSet, audit: Option<&AuditLog>) -> Reply {
    let log = |rule: &str, reason: String| {
        if let Some(a) = audit {
            let mut r = a.record("allow");
            r.rule = Some(rule.to_owned());
            r.reason = Some(reason);
            a.write(&r);
        }
    };
    match req {
        Request::Host { rule, seconds } => {
            let secs = seconds.clamp(1, MAX_GRANT.as_secs());
            match rules.grant(&rule, Instant::now() + Duration::from_secs(secs)) {
                Ok(()) => {
                    log(&rule, format!("granted for {secs} s"));
                    Reply { ok: true, message: format!("`{rule}` is allowed in this session for {}", human(secs)) }
                }
                Err(e) => Reply { ok: false, message: format!("`{rule}`: {e}") },
            }
        }
        Request::Path { path } => {
            log(&path, "asked; a path needs a new session".into());
            let (p, mode) = match path.rsplit_once(':') {
                Some((p, "ro")) => (p, "--ro"),
                Some((p, "rw")) => (p, "--rw"),
                _ => (path.as_str(), "--ro"),
            };
            Reply {
                ok: false,
                message: format!(
                    "a running jail's filesystem is fixed when it starts: start the next session with `{mode} {p}` \
                     (or add it to home.read / filesystem.read)"
                ),
            }
        }
    }
}

fn human(secs: u64) -> String {
    match secs {
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netrules::matcher::{Action, Destination, Layer, MatcherOptions, Proto};

    #[test]
    fn a_host_grant_applies_at_once_a_path_asks_for_a_new_session() {
        let rules = RuleSet::new(&[("*".into(), Action::Block, Layer::User)], MatcherOptions::default()).unwrap();
        let gh = Destination { ip: None, name: Some("github.com"), port: 443, proto: Proto::Tcp };
        assert!(!rules.decide(&gh).allowed);
        let r = apply(Request::Host { rule: "github.com".into(), seconds: 600 }, &rules, None);
        assert!(r.ok && r.message.contains("10 min"), "{r:?}");
        assert!(rules.decide(&gh).allowed);
        let r = apply(Request::Host { rule: "bad rule".into(), seconds: 600 }, &rules, None);
        assert!(!r.ok);
        let r = apply(Request::Path { path: "~/data:ro".into() }, &rules, None);
        assert!(!r.ok && r.message.contains("--ro ~/data"), "{r:?}");
        let bad: Result<Request, _> = serde_json::from_str(r#"{"what":"shell","cmd":"id"}"#);
        assert!(bad.is_err());
    }
}
