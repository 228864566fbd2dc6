//! `agent-sandbox allow`: from another terminal, the user widens a running session for a time
//! (`host github.com`), or learns what a new path needs (`path ~/data:ro`). It talks to the
//! session's control socket in the sockets' directory (`HostFacts::sockets_dir`: the runtime
//! or the state directory), which no jail sees: so nothing inside a jail can call it.

use crate::net::control::{socket_path, token_path, Envelope, Reply, Request, MAX_GRANT};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `10m`, `90s`, `2h`, `1d` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a duration (e.g. 90s, 10m, 2h)"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" | "min" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86400),
        _ => return Err(format!("`{s}`: the unit is s, m, h or d")),
    };
    match Duration::from_secs(secs) {
        d if d.is_zero() => Err("the time must be more than zero".into()),
        d if d > MAX_GRANT => Err(format!("at most {} h at a time", MAX_GRANT.as_secs() / 3600)),
        d => Ok(d),
    }
}

/// The control sockets of the user's running sessions, by session id. A socket nobody
/// listens on is a session that was killed with its launcher: it and its token are removed.
fn running(dirs: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(".allow")?.to_owned();
            Some((id, e.path()))
        })
        .filter(|(_, p)| match connect(p) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                let _ = std::fs::remove_file(p);
                let _ = std::fs::remove_file(token_path(p));
                false
            }
            _ => true,
        })
        .collect();
    found.sort();
    found
}

/// The session's token, from beside its socket (a file, never through a link).
fn read_token(socket: &Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut t = String::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(token_path(socket))
        .and_then(|f| f.take(256).read_to_string(&mut t))
        .map_err(|e| format!("cannot read the session's token: {e}"))?;
    Ok(t.trim().to_owned())
}

/// Sends the request to the session (the only one running, if `session` is None) and returns
/// its answer.
/// `dirs`: where sessions' sockets may be (`HostFacts::sockets_dirs`), the first first.
pub fn run(dirs: &[PathBuf], session: Option<&str>, request: &Request) -> Result<Reply, String> {
    let path = match session {
        Some(id) => {
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(format!("`{id}` is not a session id (see `agent-sandbox log`)"));
            }
            let at = |d: &PathBuf| socket_path(d, id);
            match dirs.iter().map(at).find(|p| std::fs::symlink_metadata(p).is_ok()) {
                Some(p) => p,
                None => return Err(format!("no session {id} with a network supervisor runs on this host")),
            }
        }
        None => {
            let all = running(dirs);
            match all.as_slice() {
                [(_, p)] => p.clone(),
                [] => return Err("no running session with a network supervisor (filtered or proxied) was found".into()),
                many => {
                    let ids: Vec<&str> = many.iter().map(|(id, _)| id.as_str()).collect();
                    return Err(format!("several sessions run; name one with --session: {}", ids.join(" ")));
                }
            }
        }
    };
    let token = read_token(&path)?;
    let mut conn = connect(&path).map_err(|e| {
        format!(
            "session {} is not reachable ({e}): it ended, or runs without a network supervisor",
            session.unwrap_or("?")
        )
    })?;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let envelope = Envelope { token, request: request.clone() };
    let mut line = serde_json::to_vec(&envelope).map_err(|e| e.to_string())?;
    line.push(b'\n');
    conn.write_all(&line).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    BufReader::new(conn).read_line(&mut answer).map_err(|e| format!("no answer from the session: {e}"))?;
    serde_json::from_str(&answer).map_err(|e| format!("the session answered something unreadable: {e}"))
}

/// A session's control socket, reached through its directory where the path passes
/// `sun_path` (a state directory under a deep home).
fn connect(path: &Path) -> std::io::Result<std::os::unix::net::UnixStream> {
    std::os::unix::net::UnixStream::connect(agent_sandbox_sys::socket_path::short(path)?.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_the_forms_people_type() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        for bad in ["", "0", "10x", "m", "-5m", "2d", "99999999999999999999"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
