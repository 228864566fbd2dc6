//! Credential injection: which API keys stay outside the jail. For each of the profile's
//! credentials whose variable the policy would pass in, the jail gets a stand-in value and an
//! endpoint of the supervisor's on the gateway instead of the provider's; the supervisor adds
//! the key (read from the launcher's environment when it starts, never part of the plan) to
//! the requests it sends on over TLS to that provider, and to no other. `filtered` mode only:
//! the supervisor owns the jail's routes there.

use super::{entry_err, JailNet, NetPlan, PlanError};
use crate::policy::Credential;
use serde::Serialize;

/// What the jail's copy of a key variable holds: agents that refuse to start without a key
/// start, and nothing the jail sends with it is worth anything.
pub const STAND_IN: &str = "agent-sandbox-injects-the-key";

/// The gateway's port of the first credential endpoint; the others follow.
pub const FIRST_PORT: u16 = 3380;

/// One endpoint: where the supervisor sends it on, and the keys it adds (several variables
/// may name the same provider: `ANTHROPIC_API_KEY` and `ANTHROPIC_AUTH_TOKEN`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialRoute {
    /// The variable naming the endpoint, inside the jail `http://GATEWAY:jail_port/path`.
    pub base_url_env: String,
    /// The provider, reached over TLS.
    pub host: String,
    pub port: u16,
    /// The path the provider's API lives under ("" or "/v1"), no trailing slash: requests
    /// outside it are refused.
    pub path: String,
    pub jail_port: u16,
    pub keys: Vec<KeyHeader>,
    /// Arguments for the agent's program (`Credential::args`, `{url}` filled in).
    pub args: Vec<String>,
}

/// A key the endpoint adds: the variable holding it in the launcher's environment, and the
/// header that carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyHeader {
    pub env: String,
    pub header: String,
    pub prefix: String,
}

/// `https://host[:port][/path]` -> (host, port, path). Only TLS: the key never travels in
/// the clear.
pub fn parse_https(url: &str) -> Option<(String, u16, String)> {
    let rest = url.strip_prefix("https://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') || path.contains(['?', '#', ' ']) {
        return None;
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().ok()?,
                None if after.is_empty() => 443,
                None => return None,
            };
            (h.to_string(), port)
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (authority.to_string(), 443),
        },
    };
    let host_ok = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c));
    (host_ok && port != 0).then(|| (host.to_ascii_lowercase(), port, path.to_string()))
}

/// The routes of the credentials whose variables the jail's environment (`vars`, already
/// scrubbed by policy) holds with a real value, one per endpoint variable. `launcher` is where
/// the endpoint may be overridden (`OPENAI_BASE_URL=https://...` in the user's environment).
pub fn routes(
    creds: &[Credential],
    net: &NetPlan,
    vars: &[(String, String)],
    launcher: &[(String, String)],
) -> Result<Vec<CredentialRoute>, PlanError> {
    if net.jail != JailNet::Tun {
        return Ok(vec![]);
    }
    let get = |list: &[(String, String)], k: &str| list.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut out: Vec<CredentialRoute> = vec![];
    for c in creds {
        let passed = get(vars, &c.env).is_some_and(|v| !v.is_empty() && v != STAND_IN);
        if !passed || out.iter().any(|r| r.keys.iter().any(|k| k.env == c.env)) {
            continue;
        }
        let header = c.header.to_ascii_lowercase();
        if header.is_empty() || !header.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(entry_err("agent.credentials.header", &c.header, "must be a header name"));
        }
        let key = KeyHeader { env: c.env.clone(), header, prefix: c.prefix.clone() };
        if let Some(r) = out.iter_mut().find(|r| r.base_url_env == c.base_url_env) {
            r.keys.push(key);
            if r.args.is_empty() {
                r.args = fill(&c.args, &endpoint(r.jail_port, &r.path));
            }
            continue;
        }
        // The user's own endpoint wins if it is TLS; a plain one (a local model server) is
        // the user's choice of where the key goes: no injection then.
        let upstream = match get(launcher, &c.base_url_env).filter(|u| !u.is_empty()) {
            Some(u) if u.starts_with("https://") => u,
            Some(_) => continue,
            None => c.upstream.clone(),
        };
        let Some((host, port, path)) = parse_https(&upstream) else {
            return Err(entry_err(
                "agent.credentials.upstream",
                &upstream,
                "must be an https:// URL (host, port, path)",
            ));
        };
        let jail_port = FIRST_PORT + out.len() as u16;
        let args = fill(&c.args, &endpoint(jail_port, &path));
        out.push(CredentialRoute {
            base_url_env: c.base_url_env.clone(),
            host,
            port,
            path,
            jail_port,
            keys: vec![key],
            args,
        });
    }
    Ok(out)
}

/// The endpoint's URL as the jail reaches it.
fn endpoint(jail_port: u16, path: &str) -> String {
    format!("http://{}:{jail_port}{path}", crate::netrules::addr::GATEWAY_V4)
}

fn fill(args: &[String], url: &str) -> Vec<String> {
    args.iter().map(|a| a.replace("{url}", url)).collect()
}

/// The agent's command with the routes' arguments right after its program, when the command
/// is the agent's (`agent-sandbox codex ...`, not `--profile codex run -- sh`).
pub fn apply_args(command: &mut Vec<String>, agent_program: Option<&str>, routes: &[CredentialRoute]) {
    if agent_program.is_none() || command.first().map(String::as_str) != agent_program {
        return;
    }
    let args: Vec<String> = routes.iter().flat_map(|r| r.args.iter().cloned()).collect();
    command.splice(1..1, args);
}

/// The jail's environment with the stand-in for each key and the supervisor's endpoints.
pub fn apply(vars: &mut Vec<(String, String)>, routes: &[CredentialRoute]) {
    for r in routes {
        let sets = r
            .keys
            .iter()
            .map(|k| (&k.env, STAND_IN.to_string()))
            .chain([(&r.base_url_env, endpoint(r.jail_port, &r.path))]);
        for (k, v) in sets {
            vars.retain(|(n, _)| n != k);
            vars.push((k.clone(), v));
        }
    }
    vars.sort();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::NetMode;

    fn net(mode: NetMode) -> NetPlan {
        NetPlan::bare(mode)
    }

    fn openai() -> Credential {
        Credential {
            env: "OPENAI_API_KEY".into(),
            base_url_env: "OPENAI_BASE_URL".into(),
            upstream: "https://api.openai.com/v1".into(),
            header: "Authorization".into(),
            prefix: "Bearer ".into(),
            args: vec!["-c".into(), "openai_base_url=\"{url}\"".into()],
        }
    }

    fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn https_urls_only_with_their_parts() {
        assert_eq!(parse_https("https://api.openai.com/v1/"), Some(("api.openai.com".into(), 443, "/v1".into())));
        assert_eq!(parse_https("https://Model.Test:8443"), Some(("model.test".into(), 8443, "".into())));
        assert_eq!(parse_https("https://[2001:db8::1]/x"), Some(("2001:db8::1".into(), 443, "/x".into())));
        for bad in ["http://api.openai.com", "https://", "https://u@h/", "https://h:0", "https://h/a?b", "https://h:x"]
        {
            assert_eq!(parse_https(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_passed_key_gets_a_stand_in_and_the_supervisors_endpoint() {
        let vars = kv(&[("OPENAI_API_KEY", "sk-real"), ("PATH", "/bin")]);
        let r = routes(&[openai()], &net(NetMode::Filtered), &vars, &vars).unwrap();
        assert_eq!((r[0].host.as_str(), r[0].port, r[0].path.as_str()), ("api.openai.com", 443, "/v1"));
        assert_eq!(r[0].keys[0].header, "authorization");
        let mut jail = vars.clone();
        apply(&mut jail, &r);
        assert!(jail.contains(&("OPENAI_API_KEY".into(), STAND_IN.into())));
        assert!(jail.contains(&("OPENAI_BASE_URL".into(), "http://169.254.77.1:3380/v1".into())));
        assert!(!jail.iter().any(|(_, v)| v.contains("sk-real")), "{jail:?}");
        let mut cmd: Vec<String> = ["codex", "exec", "hi"].map(String::from).to_vec();
        apply_args(&mut cmd, Some("codex"), &r);
        assert_eq!(cmd, ["codex", "-c", "openai_base_url=\"http://169.254.77.1:3380/v1\"", "exec", "hi"]);
        let mut other: Vec<String> = ["sh", "-c", "x"].map(String::from).to_vec();
        apply_args(&mut other, Some("codex"), &r);
        assert_eq!(other, ["sh", "-c", "x"], "only the agent's own program");
    }

    #[test]
    fn no_route_without_a_key_outside_filtered_or_to_a_plain_endpoint() {
        let key = kv(&[("OPENAI_API_KEY", "sk-real")]);
        let c = [openai()];
        assert!(routes(&c, &net(NetMode::Filtered), &kv(&[]), &key).unwrap().is_empty(), "not passed by policy");
        assert!(routes(&c, &net(NetMode::Open), &key, &key).unwrap().is_empty(), "no supervisor");
        let stand_in = kv(&[("OPENAI_API_KEY", STAND_IN)]);
        assert!(routes(&c, &net(NetMode::Filtered), &stand_in, &stand_in).unwrap().is_empty(), "a job's stand-in");
        let local = kv(&[("OPENAI_API_KEY", "sk-real"), ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")]);
        assert!(routes(&c, &net(NetMode::Filtered), &local, &local).unwrap().is_empty(), "a local model server");
        let own = kv(&[("OPENAI_API_KEY", "sk-real"), ("OPENAI_BASE_URL", "https://proxy.example.org/openai")]);
        let r = routes(&c, &net(NetMode::Filtered), &own, &own).unwrap();
        assert_eq!((r[0].host.as_str(), r[0].path.as_str()), ("proxy.example.org", "/openai"));
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;
    use crate::policy::NetMode;

    #[test]
    fn keys_of_one_provider_share_its_endpoint() {
        let net = NetPlan::bare(NetMode::Filtered);
        let cred = |env: &str, header: &str, prefix: &str| Credential {
            env: env.into(),
            base_url_env: "ANTHROPIC_BASE_URL".into(),
            upstream: "https://api.anthropic.com".into(),
            header: header.into(),
            prefix: prefix.into(),
            args: vec![],
        };
        let creds =
            [cred("ANTHROPIC_API_KEY", "x-api-key", ""), cred("ANTHROPIC_AUTH_TOKEN", "authorization", "Bearer ")];
        let vars: Vec<(String, String)> =
            [("ANTHROPIC_API_KEY", "k1"), ("ANTHROPIC_AUTH_TOKEN", "t1")].map(|(k, v)| (k.into(), v.into())).to_vec();
        let r = routes(&creds, &net, &vars, &vars).unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].keys.len(), 2);
        let mut jail = vars.clone();
        apply(&mut jail, &r);
        assert!(jail.iter().filter(|(k, _)| k.starts_with("ANTHROPIC_A")).all(|(_, v)| v == STAND_IN), "{jail:?}");
    }
}
