//! The session's control socket: `agent-sandbox allow` from another terminal of the same user
//! widens a running session for a time (`host NAME`: a network grant, applied at once by the
//! supervisor or the proxies; `path P`: needs a new session, and says so). The socket lives in
//! the state directory, which no jail sees (hidden in the userns jail, outside every Landlock
//! rule), is 0600, and only the session's own user is heard (SO_PEERCRED). A socket's path is
//! not secret (`/proc/net/unix` lists it, and a Landlock jail with `process.unix_sockets` may
//! connect to it), so every request carries a token the launcher wrote beside the socket,
//! 0600 in the state directory: only what can read that directory can widen a session. Every
//! request is logged in the session's audit log.

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
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "lowercase")]
pub enum Request {
    /// A destination rule (as in `net.allow`) for `seconds`.
    Host { rule: String, seconds: u64 },
    /// A path to add, `~/data` or `~/data:ro`.
    Path { path: String },
}

/// A request as it travels: the session's token and what is asked.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    pub token: String,
    #[serde(flatten)]
    pub request: Request,
}

/// The answer: `ok` false means nothing changed.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    pub message: String,
}

/// The control socket of `session` in the sockets' directory (`HostFacts::sockets_dir`; the
/// door to the chaperon made it, in every session with a supervisor: those are userns's).
pub fn socket_path(sockets_dir: &Path, session: &str) -> PathBuf {
    sockets_dir.join(format!("{session}.allow"))
}

/// The file holding the socket's token, beside it.
pub fn token_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".token");
    PathBuf::from(p)
}

/// Connections served at once: the user's own processes could otherwise hold the supervisor's
/// descriptors.
const MAX_CONNECTIONS: usize = 16;

/// The session's token: 128 random bits, hex.
fn new_token() -> std::io::Result<String> {
    crate::random::hex::<16>()
}

/// Writes the token beside the socket: a new file (never through a link), 0600.
fn write_token(path: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.write_all(token.as_bytes())
}

/// Equal without telling, by the time taken, how much of a guess was right.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves the control socket until the runtime ends. A socket that cannot be made costs the
/// escape hatch, loudly, not the session.
pub async fn serve(path: PathBuf, rules: RuleSet, audit: Option<AuditLog>, bound: Option<Vec<String>>) {
    let warn = |e: &dyn std::fmt::Display| {
        eprintln!("agent-sandbox: warning: `agent-sandbox allow` cannot reach this session: {}: {e}", path.display());
    };
    let token = match new_token().and_then(|t| write_token(&token_path(&path), &t).map(|()| t)) {
        Ok(t) => t,
        Err(e) => return warn(&e),
    };
    let _ = std::fs::remove_file(&path);
    let listener = match agent_sandbox_sys::socket_path::short(&path).and_then(|at| UnixListener::bind(&at.path)) {
        Ok(l) => l,
        Err(e) => return warn(&e),
    };
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
    let me = nix::unistd::getuid().as_raw();
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let shared = std::sync::Arc::new((rules, audit, bound, token));
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if !conn.peer_cred().is_ok_and(|c| c.uid() == me) {
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let (rules, audit, bound, token) = &*shared;
            let _ =
                tokio::time::timeout(IO_TIMEOUT, answer(conn, rules, audit.as_ref(), bound.as_deref(), token)).await;
        });
    }
}

async fn answer(
    conn: UnixStream,
    rules: &RuleSet,
    audit: Option<&AuditLog>,
    bound: Option<&[String]>,
    token: &str,
) -> std::io::Result<()> {
    let (r, mut w) = conn.into_split();
    let mut line = String::new();
    BufReader::new(tokio::io::AsyncReadExt::take(r, MAX_REQUEST)).read_line(&mut line).await?;
    let reply = match serde_json::from_str::<Envelope>(line.trim()) {
        Ok(env) if same(&env.token, token) => apply(env.request, rules, audit, bound),
        Ok(_) => Reply {
            ok: false,
            message: "not this session's token: ask from your own terminal, with `agent-sandbox allow`".into(),
        },
        Err(e) => Reply { ok: false, message: format!("a request this session does not understand: {e}") },
    };
    let mut out = serde_json::to_vec(&reply).unwrap_or_default();
    out.push(b'\n');
    w.write_all(&out).await
}

fn apply(req: Request, rules: &RuleSet, audit: Option<&AuditLog>, bound: Option<&[String]>) -> Reply {
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
            // An administrator's net.allow bounds what users may allow; a grant too.
            let normalized = rule.parse::<crate::netrules::matcher::Rule>().map(|r| r.to_string());
            if let (Some(b), Ok(n)) = (bound, &normalized) {
                if !b.iter().any(|a| a == n) {
                    log(&rule, "refused: outside the administrator's net.allow".into());
                    return Reply {
                        ok: false,
                        message: format!("`{rule}` is outside what the administrator allows ({})", b.join(" ")),
                    };
                }
            }
            match rules.grant(&rule, Instant::now() + Duration::from_secs(secs)) {
                Ok(text) => {
                    log(&text, format!("granted for {secs} s"));
                    Reply { ok: true, message: format!("`{text}` is allowed in this session for {}", human(secs)) }
                }
                Err(e) => Reply { ok: false, message: format!("`{rule}` cannot be allowed: {e}") },
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
        let r = apply(Request::Host { rule: "github.com".into(), seconds: 600 }, &rules, None, None);
        assert!(r.ok && r.message.contains("10 min"), "{r:?}");
        assert!(rules.decide(&gh).allowed);
        let r = apply(Request::Host { rule: "bad rule".into(), seconds: 600 }, &rules, None, None);
        assert!(!r.ok);
        let r = apply(Request::Path { path: "~/data:ro".into() }, &rules, None, None);
        assert!(!r.ok && r.message.contains("--ro ~/data"), "{r:?}");
        let bad: Result<Envelope, _> = serde_json::from_str(r#"{"token":"t","what":"shell","cmd":"id"}"#);
        assert!(bad.is_err());
        let bound = ["allowed.test".to_string()];
        let r = apply(Request::Host { rule: "other.test".into(), seconds: 60 }, &rules, None, Some(&bound));
        assert!(!r.ok && r.message.contains("outside what the administrator allows"), "{r:?}");
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
