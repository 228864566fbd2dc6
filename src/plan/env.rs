//! The jail's environment: the launcher's variables minus the scrub patterns (unless kept),
//! plus the variables the jail defines. Values never appear in `policy show`, only names.

use crate::glob::Pattern;
use crate::policy::Policy;
use std::path::Path;

pub struct EnvPlan {
    pub vars: Vec<(String, String)>,
    /// Names removed by a scrub pattern (for `--dry-run`; never the values).
    pub removed: Vec<String>,
}

pub struct JailVars<'a> {
    pub user: &'a str,
    pub home: &'a Path,
    pub shell: &'a Path,
    pub project: &'a Path,
    pub cwd: &'a Path,
    pub net_mode: &'a str,
    /// The jail reaches out through the proxies on its loopback (`proxied`).
    pub proxies: bool,
    pub backend: &'a str,
    pub session: &'a str,
    /// The session's job services (`--job-port`): jail port, outside address.
    pub job_endpoints: &'a [(u16, std::net::SocketAddr)],
}

/// Variables the launcher always drops: they point at host things that do not exist inside
/// (old cwd, the host's runtime dir) or would confuse the agent about where it runs.
const ALWAYS_DROPPED: &[&str] = &["OLDPWD", "PWD", "XDG_RUNTIME_DIR", "AGENT_SANDBOX_LOG"];

/// Tools that keep a cache (and logs) in the home and fail when they cannot write it: where
/// the jail's home is not writable (the Landlock backend; `home.access` `read` or
/// `restricted`), each is pointed at a directory of the session, unless the user set the
/// variable. (npm refuses to install anything without a writable cache.)
pub const SESSION_CACHES: &[(&str, &str)] = &[("npm_config_cache", ".npm")];

/// Points the tools of `SESSION_CACHES` under `dir`, where the user has not pointed them.
pub fn session_caches(vars: &mut Vec<(String, String)>, launcher_env: &[(String, String)], dir: &Path) {
    for (var, sub) in SESSION_CACHES {
        if !launcher_env.iter().any(|(k, _)| k == var) {
            vars.retain(|(k, _)| k != var);
            vars.push((var.to_string(), dir.join(sub).display().to_string()));
        }
    }
    vars.sort();
}

pub fn build(launcher_env: &[(String, String)], policy: &Policy, j: &JailVars<'_>) -> EnvPlan {
    let keep_p: Vec<Pattern> = policy.env_keep.iter().map(|p| Pattern::new(&p.value, false)).collect();
    let scrub_p: Vec<Pattern> = policy.env_scrub.iter().map(|p| Pattern::new(&p.value, true)).collect();
    // The admin's scrub entries are a floor: only the admin's own keep entries pass a name
    // they match, never a user's keep, set or --env.
    let admin_keep_p: Vec<Pattern> =
        policy.env_keep.iter().filter(|p| p.locked).map(|p| Pattern::new(&p.value, false)).collect();
    let admin_scrub_p: Vec<Pattern> =
        policy.env_scrub.iter().filter(|p| p.locked).map(|p| Pattern::new(&p.value, true)).collect();
    let admin_floor =
        |k: &str| admin_scrub_p.iter().any(|p| p.matches(k)) && !admin_keep_p.iter().any(|p| p.matches(k));
    let keep = |k: &str| keep_p.iter().any(|p| p.matches(k));
    let scrub = |k: &str| admin_floor(k) || (scrub_p.iter().any(|p| p.matches(k)) && !keep(k));
    let mut vars = vec![];
    let mut removed = vec![];
    for (k, v) in launcher_env {
        if ALWAYS_DROPPED.contains(&k.as_str()) || k.starts_with("AGENT_SANDBOX") {
            continue;
        }
        if scrub(k) {
            removed.push(k.clone());
            continue;
        }
        vars.push((k.clone(), v.clone()));
    }
    fn put(vars: &mut Vec<(String, String)>, k: &str, v: String) {
        vars.retain(|(name, _)| name != k);
        vars.push((k.to_string(), v));
    }
    let has_path = vars.iter().any(|(k, _)| k == "PATH");
    let mut set = |k: &str, v: String| put(&mut vars, k, v);
    set("HOME", j.home.display().to_string());
    set("USER", j.user.to_string());
    set("LOGNAME", j.user.to_string());
    set("SHELL", j.shell.display().to_string());
    set("PWD", j.cwd.display().to_string());
    set("TMPDIR", "/tmp".into());
    set("AGENT_SANDBOX", "1".into());
    set("AGENT_SANDBOX_PROJECT", j.project.display().to_string());
    set("AGENT_SANDBOX_NET", j.net_mode.to_string());
    set("AGENT_SANDBOX_BACKEND", j.backend.to_string());
    if !j.session.is_empty() {
        set("AGENT_SANDBOX_SESSION", j.session.to_string());
    }
    // What a server in the jail advertises to the project's jobs (a Dask scheduler's
    // contact address): the login node's listener that forwards to its port.
    for (port, outside) in j.job_endpoints {
        set(&format!("AGENT_SANDBOX_JOB_PORT_{port}"), outside.to_string());
    }
    if j.proxies {
        // Both spellings: curl and Go read the lower case, most others the upper; socks5h
        // makes clients send names, so the host side resolves and matches them.
        let http = format!("http://127.0.0.1:{}", crate::netrules::addr::HTTP_PORT);
        let socks = format!("socks5h://127.0.0.1:{}", crate::netrules::addr::SOCKS_PORT);
        for (k, v) in [("HTTP_PROXY", &http), ("HTTPS_PROXY", &http), ("ALL_PROXY", &socks)] {
            set(k, v.clone());
            set(&k.to_ascii_lowercase(), v.clone());
        }
        set("NO_PROXY", "localhost,127.0.0.1,::1".into());
        set("no_proxy", "localhost,127.0.0.1,::1".into());
    }
    if !has_path {
        set("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".into());
    }
    for (k, v) in &policy.env_set {
        if !v.locked && admin_floor(k) {
            removed.push(k.clone());
            continue;
        }
        // `~/x` names a file in the user's home (a profile cannot know where that is).
        let value = match v.value.strip_prefix("~/") {
            Some(rest) => j.home.join(rest).display().to_string(),
            None => v.value.clone(),
        };
        set(k, value);
    }
    vars.sort();
    removed.sort();
    EnvPlan { vars, removed }
}
