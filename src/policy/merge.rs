//! Merges parsed layers into the effective `Policy`, applying the admin lock file last.
//! Lists accumulate across layers; floors can only grow; allow-lists are bounded by the
//! admin's; ordered scalars take the stricter of user and admin. Every value keeps its source.

use super::schema::*;
use super::PolicyError;
use crate::glob::glob_match;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// Where a value came from, for `policy show` and for error messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "layer", content = "origin", rename_all = "lowercase")]
pub enum Source {
    Builtin,
    Site(PathBuf),
    User(PathBuf),
    Profile(String),
    Project(String),
    PolicyFile(PathBuf),
    Cli,
    Admin(PathBuf),
}

impl Source {
    pub fn is_admin(&self) -> bool {
        matches!(self, Source::Admin(_))
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin => write!(f, "built-in"),
            Source::Site(p) => write!(f, "site {}", p.display()),
            Source::User(p) => write!(f, "user {}", p.display()),
            Source::Profile(n) => write!(f, "profile {n}"),
            Source::Project(k) => write!(f, "user config [projects.\"{k}\"]"),
            Source::PolicyFile(p) => write!(f, "--policy {}", p.display()),
            Source::Cli => write!(f, "command line"),
            Source::Admin(p) => write!(f, "admin {}", p.display()),
        }
    }
}

/// A value with its provenance. `locked` means the admin set it and no layer can widen it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
    pub locked: bool,
}

impl<T> Sourced<T> {
    fn new(value: T, source: &Source) -> Self {
        Sourced { value, locked: source.is_admin(), source: source.clone() }
    }
}

pub type List = Vec<Sourced<String>>;

/// The effective policy: what every later stage reads. Built only by `merge`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Policy {
    pub backend: Sourced<Backend>,
    pub hostname: Sourced<String>,
    pub hide_with: Sourced<HideWith>,
    pub project_parents: List,
    pub fs_read: List,
    pub fs_write: List,
    pub hide: List,
    pub hide_files: List,
    pub protected: List,
    pub devices: List,
    pub deny_devices: List,
    pub home_access: Sourced<HomeAccess>,
    pub home_read: List,
    pub home_write: List,
    pub home_seed: List,
    pub env_keep: List,
    pub env_scrub: List,
    pub env_set: BTreeMap<String, Sourced<String>>,
    pub net_mode: Sourced<NetMode>,
    pub net_fallback: Sourced<Fallback>,
    pub net_allow: List,
    pub net_block: List,
    /// The preset in force (`agents@2026.11`), whose hosts are in `net_allow`.
    pub net_preset: Option<Sourced<String>>,
    pub net_dns: Sourced<Vec<std::net::IpAddr>>,
    pub net_host_ports: Sourced<Vec<u16>>,
    pub net_publish: Sourced<Vec<u16>>,
    /// Jail ports served to the project's own jobs (`--job-port`).
    #[serde(default = "no_job_ports")]
    pub net_job_ports: Sourced<Vec<u16>>,
    /// Where those ports listen; empty: the address routed toward the controller.
    #[serde(default = "no_job_address")]
    pub net_job_address: Sourced<String>,
    pub net_deny_private: Sourced<bool>,
    /// The session network: the jails of one session reach each other (`net::cluster::peers`).
    #[serde(default = "session_network_on")]
    pub net_session_network: Sourced<bool>,
    pub nested_userns: Sourced<bool>,
    pub unix_sockets: Sourced<bool>,
    /// `process.host_terminals` (Landlock backend): the host's /dev/pts opened to the jail.
    pub host_terminals: Sourced<bool>,
    /// `filesystem.nested_git`: the git guard is off (repositories may be made in the project).
    pub nested_git: Sourced<bool>,
    pub mail_block: Sourced<MailBlock>,
    pub agent: Option<Sourced<AgentSection>>,
    /// Per-session limits, parsed (bytes, CPUs, processes, seconds); the admin's are maxima.
    #[serde(default)]
    pub limits: Limits,
    /// The scheduler-load governor's settings (`[slurm]`).
    #[serde(default)]
    pub slurm: SlurmQueries,
    /// Things the merge dropped or changed, said once at startup.
    pub warnings: Vec<String>,
}

/// How a list key merges and how the admin constrains it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ListKind {
    /// Only grows; `!entry` is an error.
    Floor,
    /// Grows; `!entry` removes an earlier non-admin entry; the admin's list bounds it.
    Allow(Bound),
    /// Grows; `!entry` removes an earlier non-admin entry; admin entries are added and locked.
    Defaults,
}

/// How an admin allow-list decides that a user entry lies within it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bound {
    Path,
    Glob,
    Exact,
}

/// A layer with its source, in merge order (lowest first). The admin layer is separate.
pub struct SourcedLayer {
    pub layer: Layer,
    pub source: Source,
}

pub fn merge(layers: &[SourcedLayer], admin: Option<&SourcedLayer>) -> Result<Policy, PolicyError> {
    let builtin = Source::Builtin;
    let mut p = Policy {
        backend: Sourced::new(Backend::Auto, &builtin),
        hostname: Sourced::new("agent-sandbox".to_string(), &builtin),
        hide_with: Sourced::new(HideWith::Overlay, &builtin),
        project_parents: vec![],
        fs_read: vec![],
        fs_write: vec![],
        hide: vec![],
        hide_files: vec![],
        protected: vec![],
        devices: vec![],
        deny_devices: vec![],
        home_access: Sourced::new(HomeAccess::Tmpwrite, &builtin),
        home_read: vec![],
        home_write: vec![],
        home_seed: vec![],
        env_keep: vec![],
        env_scrub: vec![],
        env_set: BTreeMap::new(),
        net_mode: Sourced::new(NetMode::Filtered, &builtin),
        net_fallback: Sourced::new(Fallback::Stricter, &builtin),
        net_allow: vec![],
        net_block: vec![],
        net_preset: None,
        net_dns: Sourced::new(vec![], &builtin),
        net_host_ports: Sourced::new(vec![], &builtin),
        net_publish: Sourced::new(vec![], &builtin),
        net_job_ports: no_job_ports(),
        net_job_address: no_job_address(),
        net_deny_private: Sourced::new(false, &builtin),
        net_session_network: session_network_on(),
        nested_userns: Sourced::new(false, &builtin),
        unix_sockets: Sourced::new(false, &builtin),
        host_terminals: Sourced::new(false, &builtin),
        nested_git: Sourced::new(false, &builtin),
        mail_block: Sourced::new(MailBlock::Auto, &builtin),
        agent: None,
        limits: Limits::default(),
        slurm: SlurmQueries::default(),
        warnings: vec![],
    };
    for l in layers {
        apply_layer(&mut p, &l.layer, &l.source)?;
    }
    if let Some(a) = admin {
        apply_admin(&mut p, &a.layer, &a.source)?;
    }
    Ok(p)
}

/// The built-in `net.job_ports`, also for a policy frozen before the setting existed.
fn no_job_ports() -> Sourced<Vec<u16>> {
    Sourced::new(vec![], &Source::Builtin)
}

fn session_network_on() -> Sourced<bool> {
    Sourced::new(true, &Source::Builtin)
}

fn no_job_address() -> Sourced<String> {
    Sourced::new(String::new(), &Source::Builtin)
}

fn set<T: Clone>(slot: &mut Sourced<T>, v: &Option<T>, src: &Source) {
    if let Some(v) = v {
        *slot = Sourced::new(v.clone(), src);
    }
}

fn apply_layer(p: &mut Policy, l: &Layer, src: &Source) -> Result<(), PolicyError> {
    use ListKind::*;
    if let Some(s) = &l.sandbox {
        set(&mut p.backend, &s.backend, src);
        set(&mut p.hostname, &s.hostname, src);
        set(&mut p.hide_with, &s.hide_with, src);
        extend(&mut p.project_parents, &s.project_parents, src, Allow(Bound::Path), "sandbox.project_parents")?;
    }
    if let Some(f) = &l.filesystem {
        layer_filesystem(p, f, src)?;
    }
    if let Some(h) = &l.home {
        set(&mut p.home_access, &h.access, src);
        extend(&mut p.home_read, &h.read, src, Allow(Bound::Path), "home.read")?;
        extend(&mut p.home_write, &h.write, src, Allow(Bound::Path), "home.write")?;
        extend(&mut p.home_seed, &h.seed, src, Allow(Bound::Path), "home.seed")?;
    }
    if let Some(e) = &l.env {
        layer_env(p, e, src)?;
    }
    if let Some(n) = &l.net {
        layer_net(p, n, src)?;
    }
    if let Some(pr) = &l.process {
        set(&mut p.nested_userns, &pr.nested_userns, src);
        set(&mut p.unix_sockets, &pr.unix_sockets, src);
        set(&mut p.host_terminals, &pr.host_terminals, src);
    }
    if let Some(m) = &l.mail {
        set(&mut p.mail_block, &m.block, src);
    }
    if let Some(lim) = &l.limits {
        layer_limits(&mut p.limits, lim, src)?;
    }
    if let Some(sl) = &l.slurm {
        let parsed = SlurmQueries::parse(sl, src)?;
        p.slurm.query_interval = parsed.query_interval.unwrap_or(p.slurm.query_interval.clone());
        p.slurm.queries_per_minute = parsed.queries_per_minute.unwrap_or(p.slurm.queries_per_minute.clone());
    }
    if let Some(a) = &l.agent {
        p.agent = Some(Sourced::new(a.clone(), src));
    }
    Ok(())
}

fn layer_filesystem(p: &mut Policy, f: &FsSection, src: &Source) -> Result<(), PolicyError> {
    use ListKind::*;
    extend(&mut p.fs_read, &f.read, src, Allow(Bound::Path), "filesystem.read")?;
    extend(&mut p.fs_write, &f.write, src, Allow(Bound::Path), "filesystem.write")?;
    set(&mut p.nested_git, &f.nested_git, src);
    extend(&mut p.hide, &f.hide, src, Floor, "filesystem.hide")?;
    extend(&mut p.hide_files, &f.hide_files, src, Floor, "filesystem.hide_files")?;
    extend(&mut p.protected, &f.protected, src, Defaults, "filesystem.protected")?;
    extend(&mut p.devices, &f.devices, src, Allow(Bound::Glob), "filesystem.devices")?;
    extend(&mut p.deny_devices, &f.deny_devices, src, Floor, "filesystem.deny_devices")
}

fn layer_env(p: &mut Policy, e: &EnvSection, src: &Source) -> Result<(), PolicyError> {
    extend(&mut p.env_keep, &e.keep, src, ListKind::Allow(Bound::Glob), "env.keep")?;
    extend(&mut p.env_scrub, &e.scrub, src, ListKind::Floor, "env.scrub")?;
    for (k, v) in e.set.iter().flatten() {
        validate_env_name(k, src)?;
        if p.env_set.get(k).is_some_and(|old| old.locked) {
            continue;
        }
        p.env_set.insert(k.clone(), Sourced::new(v.clone(), src));
    }
    Ok(())
}

/// A preset goes in before the layer's own lists, so the layer can `!`-remove a preset host.
fn layer_net(p: &mut Policy, n: &NetSection, src: &Source) -> Result<(), PolicyError> {
    use ListKind::*;
    set(&mut p.net_mode, &n.mode, src);
    set(&mut p.net_fallback, &n.fallback, src);
    if let Some(spec) = &n.preset {
        let preset = super::presets::find(spec).map_err(|message| PolicyError::Invalid {
            origin: src.to_string(),
            key: "net.preset".into(),
            message,
        })?;
        let hosts = Some(preset.hosts.iter().map(|h| h.to_string()).collect());
        extend(&mut p.net_allow, &hosts, src, Allow(Bound::Exact), "net.allow")?;
        extend(&mut p.net_block, &Some(vec!["*".into()]), src, Defaults, "net.block")?;
        p.net_preset = Some(Sourced::new(format!("{}@{}", preset.name, preset.version), src));
    }
    extend(&mut p.net_allow, &n.allow, src, Allow(Bound::Exact), "net.allow")?;
    extend(&mut p.net_block, &n.block, src, Defaults, "net.block")?;
    set(&mut p.net_host_ports, &n.host_ports, src);
    set(&mut p.net_publish, &n.publish, src);
    set(&mut p.net_job_ports, &n.job_ports, src);
    set_unless_locked(&mut p.net_dns, &n.dns, src);
    set_unless_locked(&mut p.net_job_address, &n.job_address, src);
    set_unless_locked(&mut p.net_deny_private, &n.deny_private, src);
    set_unless_locked(&mut p.net_session_network, &n.session_network, src);
    Ok(())
}

fn set_unless_locked<T: Clone>(slot: &mut Sourced<T>, v: &Option<T>, src: &Source) {
    if !slot.locked {
        set(slot, v, src);
    }
}

/// A later layer's value replaces an earlier one (the admin's, applied last, bounds them).
fn layer_limits(lim: &mut Limits, section: &LimitsSection, src: &Source) -> Result<(), PolicyError> {
    let parsed = Limits::parse(section, src)?;
    lim.mem = parsed.mem.or(lim.mem.take());
    lim.pids = parsed.pids.or(lim.pids.take());
    lim.timeout = parsed.timeout.or(lim.timeout.take());
    lim.cpus = parsed.cpus.or(lim.cpus.take());
    Ok(())
}

/// The floor lists of `l` added to `p` (what a layer may only add to): for a policy that did
/// not come from `merge` (a job's, thawed), the built-in layer's floors again.
pub(super) fn apply_floors(p: &mut Policy, l: &Layer, src: &Source) -> Result<(), PolicyError> {
    use ListKind::Floor;
    if let Some(f) = &l.filesystem {
        extend(&mut p.hide, &f.hide, src, Floor, "filesystem.hide")?;
        extend(&mut p.hide_files, &f.hide_files, src, Floor, "filesystem.hide_files")?;
        extend(&mut p.deny_devices, &f.deny_devices, src, Floor, "filesystem.deny_devices")?;
    }
    if let Some(e) = &l.env {
        extend(&mut p.env_scrub, &e.scrub, src, Floor, "env.scrub")?;
    }
    Ok(())
}

/// `!entry` removes from lower layers; the admin layer is applied last and lists what it
/// locks or allows, so a negation there is a mistake to report, not to guess at.
fn reject_negations(l: &Layer, src: &Source) -> Result<(), PolicyError> {
    let mut lists: Vec<(&str, &Option<Vec<String>>)> = vec![];
    if let Some(s) = &l.sandbox {
        lists.push(("sandbox.project_parents", &s.project_parents));
    }
    if let Some(f) = &l.filesystem {
        lists.extend([
            ("filesystem.read", &f.read),
            ("filesystem.write", &f.write),
            ("filesystem.hide", &f.hide),
            ("filesystem.hide_files", &f.hide_files),
            ("filesystem.protected", &f.protected),
            ("filesystem.devices", &f.devices),
            ("filesystem.deny_devices", &f.deny_devices),
        ]);
    }
    if let Some(h) = &l.home {
        lists.extend([("home.read", &h.read), ("home.write", &h.write), ("home.seed", &h.seed)]);
    }
    if let Some(e) = &l.env {
        lists.extend([("env.keep", &e.keep), ("env.scrub", &e.scrub)]);
    }
    if let Some(n) = &l.net {
        lists.extend([("net.allow", &n.allow), ("net.block", &n.block)]);
    }
    for (key, list) in lists {
        if let Some(bad) = list.iter().flatten().find(|e| e.starts_with('!')) {
            return Err(PolicyError::Invalid {
                origin: src.to_string(),
                key: key.into(),
                message: format!(
                    "`{bad}`: the admin lock file lists what it locks or allows; `!` removal is for user layers"
                ),
            });
        }
    }
    Ok(())
}

fn validate_env_name(k: &str, src: &Source) -> Result<(), PolicyError> {
    let ok = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(PolicyError::Invalid {
            origin: src.to_string(),
            key: "env.set".into(),
            message: format!("`{k}` is not a valid environment variable name"),
        })
    }
}

fn extend(
    list: &mut List,
    add: &Option<Vec<String>>,
    src: &Source,
    kind: ListKind,
    key: &str,
) -> Result<(), PolicyError> {
    let Some(add) = add else { return Ok(()) };
    for raw in add {
        if raw.is_empty() || raw.contains('\0') || raw.contains('\n') {
            return Err(PolicyError::Invalid {
                origin: src.to_string(),
                key: key.into(),
                message: format!("entry {raw:?} is empty or contains a control character"),
            });
        }
        if let Some(neg) = raw.strip_prefix('!') {
            if kind == ListKind::Floor {
                return Err(PolicyError::Invalid {
                    origin: src.to_string(),
                    key: key.into(),
                    message: format!("`{neg}` cannot be removed: {key} is a security floor that only grows"),
                });
            }
            if list.iter().any(|e| e.value == neg && e.locked) {
                return Err(PolicyError::Invalid {
                    origin: src.to_string(),
                    key: key.into(),
                    message: format!("`{neg}` was set by the admin and cannot be removed"),
                });
            }
            list.retain(|e| e.value != neg);
            continue;
        }
        if !list.iter().any(|e| &e.value == raw) {
            list.push(Sourced::new(raw.clone(), src));
        }
    }
    Ok(())
}

/// The admin layer: floors add (locked), allow-lists bound, ordered scalars are minimums.
pub(super) fn apply_admin(p: &mut Policy, l: &Layer, src: &Source) -> Result<(), PolicyError> {
    reject_negations(l, src)?;
    if l.projects.is_some() || l.agent.is_some() {
        return Err(PolicyError::Invalid {
            origin: src.to_string(),
            key: "projects/agent".into(),
            message: "the admin lock file cannot hold [projects] or [agent] tables".into(),
        });
    }
    admin_lists(p, l, src);
    admin_set_values(p, l, src)?;
    stricter(&mut p.home_access, l.home.as_ref().and_then(|h| h.access), src);
    admin_net(p, l.net.as_ref(), src);
    stricter(&mut p.mail_block, l.mail.as_ref().and_then(|m| m.block), src);
    if let Some(lim) = &l.limits {
        let max = Limits::parse(lim, src)?;
        cap(&mut p.warnings, "mem", &mut p.limits.mem, max.mem);
        cap(&mut p.warnings, "pids", &mut p.limits.pids, max.pids);
        cap(&mut p.warnings, "timeout", &mut p.limits.timeout, max.timeout);
        cap(&mut p.warnings, "cpus", &mut p.limits.cpus, max.cpus);
    }
    if let Some(sl) = &l.slurm {
        let admin = SlurmQueries::parse(sl, src)?;
        stricter(&mut p.slurm.query_interval, admin.query_interval.map(|s| s.value), src);
        gentler(&mut p.slurm.queries_per_minute, admin.queries_per_minute.map(|s| s.value), src);
    }
    let process = l.process.as_ref();
    permit(&mut p.nested_userns, process.and_then(|pr| pr.nested_userns), src);
    permit(&mut p.unix_sockets, process.and_then(|pr| pr.unix_sockets), src);
    permit(&mut p.host_terminals, process.and_then(|pr| pr.host_terminals), src);
    permit(&mut p.nested_git, l.filesystem.as_ref().and_then(|f| f.nested_git), src);
    Ok(())
}

/// Every list the admin names: an allow-list bounds the layers' entries, a floor or a
/// defaults list gains the admin's entries, locked.
fn admin_lists(p: &mut Policy, l: &Layer, src: &Source) {
    use ListKind::*;
    let mut warnings = vec![];
    let mut bound = |list: &mut List, admin: &Option<Vec<String>>, kind: ListKind, key: &str| {
        if let Some(admin) = admin {
            bound_list(list, admin, kind, key, src, &mut warnings);
        }
    };
    if let Some(s) = &l.sandbox {
        bound(&mut p.project_parents, &s.project_parents, Allow(Bound::Path), "sandbox.project_parents");
    }
    if let Some(f) = &l.filesystem {
        bound(&mut p.fs_read, &f.read, Allow(Bound::Path), "filesystem.read");
        bound(&mut p.fs_write, &f.write, Allow(Bound::Path), "filesystem.write");
        bound(&mut p.hide, &f.hide, Floor, "filesystem.hide");
        bound(&mut p.hide_files, &f.hide_files, Floor, "filesystem.hide_files");
        bound(&mut p.protected, &f.protected, Defaults, "filesystem.protected");
        bound(&mut p.devices, &f.devices, Allow(Bound::Glob), "filesystem.devices");
        bound(&mut p.deny_devices, &f.deny_devices, Floor, "filesystem.deny_devices");
    }
    if let Some(h) = &l.home {
        bound(&mut p.home_read, &h.read, Allow(Bound::Path), "home.read");
        bound(&mut p.home_write, &h.write, Allow(Bound::Path), "home.write");
        bound(&mut p.home_seed, &h.seed, Allow(Bound::Path), "home.seed");
    }
    if let Some(e) = &l.env {
        bound(&mut p.env_keep, &e.keep, Allow(Bound::Glob), "env.keep");
        bound(&mut p.env_scrub, &e.scrub, Floor, "env.scrub");
    }
    if let Some(n) = &l.net {
        bound(&mut p.net_allow, &n.allow, Allow(Bound::Exact), "net.allow");
        bound(&mut p.net_block, &n.block, Defaults, "net.block");
    }
    p.warnings.extend(warnings);
}

fn bound_list(list: &mut List, admin: &[String], kind: ListKind, key: &str, src: &Source, warnings: &mut Vec<String>) {
    match kind {
        ListKind::Allow(b) => {
            list.retain(|e| {
                let inside = admin.iter().any(|a| within(b, &e.value, a));
                // Built-in defaults outside the admin's list go quietly: nobody asked for them.
                if !inside && e.source != Source::Builtin {
                    warnings.push(format!(
                        "{key}: `{}` (from {}) is outside what the admin allows; dropped",
                        e.value, e.source
                    ));
                }
                inside
            });
        }
        ListKind::Floor | ListKind::Defaults => {
            for a in admin {
                if let Some(e) = list.iter_mut().find(|e| &e.value == a) {
                    e.locked = true;
                    e.source = src.clone();
                } else {
                    list.push(Sourced::new(a.clone(), src));
                }
            }
        }
    }
}

/// The values the admin sets outright: the sandbox's scalars and `env.set`.
fn admin_set_values(p: &mut Policy, l: &Layer, src: &Source) -> Result<(), PolicyError> {
    if let Some(s) = &l.sandbox {
        if let Some(b) = s.backend {
            p.backend = Sourced::new(b, src);
        }
        if let Some(h) = &s.hostname {
            p.hostname = Sourced::new(h.clone(), src);
        }
        if let Some(h) = s.hide_with {
            p.hide_with = Sourced::new(h, src);
        }
    }
    for (k, v) in l.env.as_ref().and_then(|e| e.set.as_ref()).into_iter().flatten() {
        validate_env_name(k, src)?;
        p.env_set.insert(k.clone(), Sourced::new(v.clone(), src));
    }
    Ok(())
}

/// The network scalars: ordered ones the stricter of user and admin, the DNS servers and the
/// job address the admin's (locked), the port lists bounded by the admin's.
fn admin_net(p: &mut Policy, n: Option<&NetSection>, src: &Source) {
    stricter(&mut p.net_mode, n.and_then(|n| n.mode), src);
    stricter(&mut p.net_fallback, n.and_then(|n| n.fallback), src);
    stricter(&mut p.net_deny_private, n.and_then(|n| n.deny_private), src);
    gentler(&mut p.net_session_network, n.and_then(|n| n.session_network), src);
    if let Some(dns) = n.and_then(|n| n.dns.clone()) {
        p.net_dns = Sourced::new(dns, src);
        p.net_dns.locked = true;
    }
    if let Some(addr) = n.and_then(|n| n.job_address.clone()) {
        p.net_job_address = Sourced::new(addr, src);
        p.net_job_address.locked = true;
    }
    for (key, slot, bound) in [
        ("net.host_ports", &mut p.net_host_ports, n.and_then(|n| n.host_ports.clone())),
        ("net.publish", &mut p.net_publish, n.and_then(|n| n.publish.clone())),
        ("net.job_ports", &mut p.net_job_ports, n.and_then(|n| n.job_ports.clone())),
    ] {
        let Some(bound) = bound else { continue };
        let (kept, dropped): (Vec<u16>, Vec<u16>) = slot.value.iter().partition(|port| bound.contains(port));
        if !dropped.is_empty() {
            p.warnings.push(format!("{key} {dropped:?} dropped: outside the administrator's list {bound:?}"));
        }
        slot.value = kept;
        slot.locked = true;
    }
}

/// An administrator's limit is a maximum: a higher value (said in a warning) or none becomes
/// the maximum; a lower one stays. Locked either way.
fn cap<T: PartialOrd + fmt::Display>(
    warnings: &mut Vec<String>,
    key: &str,
    slot: &mut Option<Sourced<T>>,
    max: Option<Sourced<T>>,
) {
    let Some(mut m) = max else { return };
    match slot {
        Some(s) if s.value <= m.value => s.locked = true,
        _ => {
            if let Some(asked) = slot.as_ref() {
                warnings
                    .push(format!("limits.{key} {} lowered to the administrator's maximum {}", asked.value, m.value));
            }
            m.locked = true;
            *slot = Some(m);
        }
    }
}

/// Per-session limits, each with the layer that set it.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Limits {
    pub mem: Option<Sourced<u64>>,
    pub cpus: Option<Sourced<u32>>,
    pub pids: Option<Sourced<u64>>,
    pub timeout: Option<Sourced<u64>>,
}

impl Limits {
    fn parse(l: &super::schema::LimitsSection, src: &Source) -> Result<Limits, PolicyError> {
        let bad = |key: &str, message: String| PolicyError::Invalid {
            origin: src.to_string(),
            key: format!("limits.{key}"),
            message,
        };
        let mem = match &l.mem {
            Some(m) => Some(Sourced::new(parse_size(m).map_err(|e| bad("mem", e))?, src)),
            None => None,
        };
        let timeout = match &l.timeout {
            Some(t) => Some(Sourced::new(parse_seconds(t).map_err(|e| bad("timeout", e))?, src)),
            None => None,
        };
        if l.cpus == Some(0) || l.pids == Some(0) {
            return Err(bad("cpus/pids", "must be at least 1".into()));
        }
        Ok(Limits {
            mem,
            cpus: l.cpus.map(|c| Sourced::new(c, src)),
            pids: l.pids.map(|p| Sourced::new(p, src)),
            timeout,
        })
    }
}

/// How the chaperon spares the scheduler (`[slurm]`), each value with the layer that set it.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SlurmQueries {
    /// Seconds a read-only query's answer is reused; 0: never.
    pub query_interval: Sourced<u64>,
    /// Real read-only calls per minute, at most (at least 1).
    pub queries_per_minute: Sourced<u32>,
}

impl Default for SlurmQueries {
    /// The built-in values, for a policy frozen before `[slurm]` existed (builtin.toml says
    /// the same).
    fn default() -> Self {
        SlurmQueries {
            query_interval: Sourced::new(10, &Source::Builtin),
            queries_per_minute: Sourced::new(30, &Source::Builtin),
        }
    }
}

/// One layer's `[slurm]`, parsed; None where it says nothing.
struct SlurmLayer {
    query_interval: Option<Sourced<u64>>,
    queries_per_minute: Option<Sourced<u32>>,
}

impl SlurmQueries {
    fn parse(l: &super::schema::SlurmSection, src: &Source) -> Result<SlurmLayer, PolicyError> {
        let bad = |key: &str, message: String| PolicyError::Invalid {
            origin: src.to_string(),
            key: format!("slurm.{key}"),
            message,
        };
        let query_interval = match l.query_interval.as_deref().map(str::trim) {
            None => None,
            // Zero turns the cache off (concurrent identical calls are still one call).
            Some("0" | "0s") => Some(0),
            Some(t) => Some(parse_seconds(t).map_err(|e| bad("query_interval", e))?),
        };
        if query_interval.is_some_and(|s| s > 3600) {
            return Err(bad("query_interval", "at most 1h: an older answer is no answer".into()));
        }
        if l.queries_per_minute == Some(0) {
            return Err(bad("queries_per_minute", "must be at least 1 (0 would stop every query)".into()));
        }
        Ok(SlurmLayer {
            query_interval: query_interval.map(|v| Sourced::new(v, src)),
            queries_per_minute: l.queries_per_minute.map(|v| Sourced::new(v, src)),
        })
    }
}

/// `512M`, `4G`, `1024K`, `1T` or bytes; at least 16 MiB (a smaller limit only breaks the
/// dynamic loader).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a size (e.g. 512M, 4G)"))?;
    let mult: u64 = match unit.to_ascii_uppercase().trim_end_matches('B').trim_end_matches('I') {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("`{s}`: the unit is K, M, G or T")),
    };
    let bytes = n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes < 16 << 20 {
        return Err(format!("`{s}` is below 16M: nothing would start"));
    }
    Ok(bytes)
}

/// `90s`, `30m`, `8h`, `2d` or seconds.
pub fn parse_seconds(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a time (e.g. 90s, 30m, 8h)"))?;
    let secs = match unit {
        "" | "s" => Some(n),
        "m" | "min" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86400),
        _ => return Err(format!("`{s}`: the unit is s, m, h or d")),
    };
    match secs {
        Some(0) => Err("the time must be more than zero".into()),
        Some(v) => Ok(v),
        None => Err(format!("`{s}` is too long")),
    }
}

/// A permission the admin sets (`nested_userns`, `unix_sockets`, ...): `true` permits what the
/// user chose, it does not force it; `false` forbids. Locked either way.
fn permit(slot: &mut Sourced<bool>, admin: Option<bool>, src: &Source) {
    let Some(allowed) = admin else { return };
    let value = slot.value && allowed;
    let source = if allowed { slot.source.clone() } else { src.clone() };
    *slot = Sourced { value, source, locked: true };
}

/// Ordered scalar: the admin's value is a minimum; the result is locked either way.
fn stricter<T: Ord + Copy>(slot: &mut Sourced<T>, admin: Option<T>, src: &Source) {
    if let Some(a) = admin {
        if a > slot.value {
            *slot = Sourced::new(a, src);
        }
        slot.locked = true;
    }
}

/// Ordered scalar: the admin's value is a maximum; the result is locked either way.
fn gentler<T: Ord + Copy>(slot: &mut Sourced<T>, admin: Option<T>, src: &Source) {
    if let Some(a) = admin {
        if a < slot.value {
            *slot = Sourced::new(a, src);
        }
        slot.locked = true;
    }
}

fn within(b: Bound, entry: &str, allowed: &str) -> bool {
    match b {
        Bound::Exact => entry == allowed,
        Bound::Glob => entry == allowed || glob_match(allowed, entry),
        Bound::Path => {
            let a = allowed.trim_end_matches('/');
            let e = entry.trim_end_matches('/');
            e == a || e.strip_prefix(a).is_some_and(|rest| rest.starts_with('/'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(toml_text: &str) -> Layer {
        toml::from_str(toml_text).expect("test layer parses")
    }
    fn user(t: &str) -> SourcedLayer {
        SourcedLayer { layer: layer(t), source: Source::User("u.toml".into()) }
    }
    fn admin(t: &str) -> SourcedLayer {
        SourcedLayer { layer: layer(t), source: Source::Admin("admin.toml".into()) }
    }
    fn values(l: &List) -> Vec<&str> {
        l.iter().map(|e| e.value.as_str()).collect()
    }

    #[test]
    fn lists_accumulate_and_negation_removes_defaults() {
        let p = merge(
            &[user("[filesystem]\nread = [\"/usr\", \"/sys\"]"), user("[filesystem]\nread = [\"!/sys\", \"/data\"]")],
            None,
        )
        .unwrap();
        assert_eq!(values(&p.fs_read), ["/usr", "/data"]);
    }

    #[test]
    fn floors_cannot_be_negated() {
        let e = merge(&[user("[filesystem]\nhide = [\"~/.ssh\"]"), user("[filesystem]\nhide = [\"!~/.ssh\"]")], None)
            .unwrap_err();
        assert!(e.to_string().contains("security floor"), "{e}");
    }

    #[test]
    fn admin_mode_is_a_minimum_user_cannot_widen() {
        let p = merge(&[user("[net]\nmode = \"open\"")], Some(&admin("[net]\nmode = \"proxied\""))).unwrap();
        assert_eq!(p.net_mode.value, NetMode::Proxied);
        assert!(p.net_mode.locked);
        assert!(p.net_mode.source.is_admin());
    }

    #[test]
    fn admin_job_ports_bound_the_users_and_the_admins_address_is_final() {
        let asked = user("[net]\njob_ports = [8786, 8787]\njob_address = \"10.9.9.9\"");
        let p = merge(std::slice::from_ref(&asked), None).unwrap();
        assert_eq!((p.net_job_ports.value.clone(), p.net_job_address.value.as_str()), (vec![8786, 8787], "10.9.9.9"));
        let site = admin("[net]\njob_ports = [8786]\njob_address = \"10.1.0.5\"");
        let p = merge(&[asked], Some(&site)).unwrap();
        assert_eq!((p.net_job_ports.value, p.net_job_address.value.as_str()), (vec![8786], "10.1.0.5"));
        assert!(p.warnings.iter().any(|w| w.contains("net.job_ports") && w.contains("8787")), "{:?}", p.warnings);
        // A policy frozen before the setting existed thaws with none.
        let mut v = serde_json::to_value(merge(&[], None).unwrap()).unwrap();
        v.as_object_mut().unwrap().retain(|k, _| !k.starts_with("net_job"));
        let old: Policy = serde_json::from_value(v).unwrap();
        assert!(old.net_job_ports.value.is_empty() && old.net_job_address.value.is_empty());
    }

    #[test]
    fn admin_network_extras_bound_and_lock_the_users() {
        let p = merge(
            &[user("[net]\nhost_ports = [11434, 22]\npublish = [8888]\ndeny_private = false\ndns = [\"192.0.2.9\"]")],
            Some(&admin("[net]\nhost_ports = [11434]\npublish = []\ndeny_private = true\ndns = [\"10.0.0.53\"]")),
        )
        .unwrap();
        assert_eq!(p.net_host_ports.value, vec![11434], "22 is outside the admin's list");
        assert!(p.net_publish.value.is_empty(), "the admin allows no --publish");
        assert!(p.net_deny_private.value && p.net_deny_private.locked);
        assert_eq!(p.net_dns.value, vec!["10.0.0.53".parse::<std::net::IpAddr>().unwrap()]);
        assert!(p.net_dns.locked);
        assert!(p.warnings.iter().any(|w| w.contains("net.host_ports") && w.contains("22")), "{:?}", p.warnings);
        assert!(p.warnings.iter().any(|w| w.contains("net.publish") && w.contains("8888")), "{:?}", p.warnings);
        // Without admin words on these keys, the user's values stand.
        let p = merge(&[user("[net]\nhost_ports = [22]\npublish = [8888]")], None).unwrap();
        assert_eq!((p.net_host_ports.value, p.net_publish.value), (vec![22], vec![8888]));
    }

    #[test]
    fn the_session_network_is_on_by_default_and_an_admin_off_is_final() {
        assert!(merge(&[], None).unwrap().net_session_network.value);
        let off = merge(&[user("[net]\nsession_network = false")], None).unwrap();
        assert!(!off.net_session_network.value, "a user may turn it off");
        let p =
            merge(&[user("[net]\nsession_network = true")], Some(&admin("[net]\nsession_network = false"))).unwrap();
        assert!(!p.net_session_network.value && p.net_session_network.locked, "the admin's off is final");
        let p =
            merge(&[user("[net]\nsession_network = false")], Some(&admin("[net]\nsession_network = true"))).unwrap();
        assert!(!p.net_session_network.value, "an admin's on does not turn a user's off on");
    }

    #[test]
    fn admin_minimum_keeps_a_stricter_user_value() {
        let p = merge(&[user("[net]\nmode = \"isolated\"")], Some(&admin("[net]\nmode = \"proxied\""))).unwrap();
        assert_eq!(p.net_mode.value, NetMode::Isolated);
        assert!(p.net_mode.locked);
    }

    #[test]
    fn admin_home_access_and_mail_block_are_minimums() {
        let p = merge(
            &[user("[home]\naccess = \"write\"\n[mail]\nblock = \"off\"")],
            Some(&admin("[home]\naccess = \"restricted\"\n[mail]\nblock = \"on\"")),
        )
        .unwrap();
        assert_eq!(p.home_access.value, HomeAccess::Restricted);
        assert_eq!(p.mail_block.value, MailBlock::On);
    }

    #[test]
    fn admin_allow_list_drops_user_entries_outside_with_warning() {
        let p = merge(
            &[user("[filesystem]\nwrite = [\"/scratch/u\", \"/etc/cron.d\"]")],
            Some(&admin("[filesystem]\nwrite = [\"/scratch\"]")),
        )
        .unwrap();
        assert_eq!(values(&p.fs_write), ["/scratch/u"]);
        assert!(p.warnings.iter().any(|w| w.contains("/etc/cron.d")), "{:?}", p.warnings);
    }

    #[test]
    fn path_bound_is_component_wise() {
        assert!(within(Bound::Path, "/scratch/u", "/scratch"));
        assert!(within(Bound::Path, "/scratch", "/scratch/"));
        assert!(!within(Bound::Path, "/scratchy", "/scratch"));
    }

    #[test]
    fn admin_floors_are_added_and_locked_and_user_cannot_remove_them() {
        let p = merge(&[], Some(&admin("[filesystem]\nprotected = [\"Makefile\"]"))).unwrap();
        assert!(p.protected.iter().any(|e| e.value == "Makefile" && e.locked));
        // A user negation applied before the admin layer cannot remove what the admin adds later.
        let p = merge(
            &[user("[filesystem]\nprotected = [\"!Makefile\"]")],
            Some(&admin("[filesystem]\nprotected = [\"Makefile\"]")),
        )
        .unwrap();
        assert!(p.protected.iter().any(|e| e.value == "Makefile"));
    }

    #[test]
    fn admin_env_set_cannot_be_overridden() {
        let p = merge(&[user("[env.set]\nHTTP_PROXY = \"user\"")], Some(&admin("[env.set]\nHTTP_PROXY = \"admin\"")))
            .unwrap();
        assert_eq!(p.env_set["HTTP_PROXY"].value, "admin");
        assert!(p.env_set["HTTP_PROXY"].locked);
    }

    #[test]
    fn unix_sockets_off_by_default_user_can_enable_admin_can_forbid() {
        assert!(!merge(&[], None).unwrap().unix_sockets.value);
        assert!(merge(&[user("[process]\nunix_sockets = true")], None).unwrap().unix_sockets.value);
        let p =
            merge(&[user("[process]\nunix_sockets = true")], Some(&admin("[process]\nunix_sockets = false"))).unwrap();
        assert!(!p.unix_sockets.value && p.unix_sockets.locked);
    }

    #[test]
    fn host_terminals_off_by_default_user_can_open_admin_can_forbid() {
        assert!(!merge(&[], None).unwrap().host_terminals.value);
        assert!(merge(&[user("[process]\nhost_terminals = true")], None).unwrap().host_terminals.value);
        let p = merge(&[user("[process]\nhost_terminals = true")], Some(&admin("[process]\nhost_terminals = false")))
            .unwrap();
        assert!(!p.host_terminals.value && p.host_terminals.locked);
    }

    #[test]
    fn nested_git_off_by_default_user_can_allow_admin_can_forbid() {
        assert!(!merge(&[], None).unwrap().nested_git.value);
        assert!(merge(&[user("[filesystem]\nnested_git = true")], None).unwrap().nested_git.value);
        let p = merge(&[user("[filesystem]\nnested_git = true")], Some(&admin("[filesystem]\nnested_git = false")))
            .unwrap();
        assert!(!p.nested_git.value && p.nested_git.locked);
    }

    #[test]
    fn admin_forbids_nested_userns() {
        let p = merge(&[user("[process]\nnested_userns = true")], Some(&admin("[process]\nnested_userns = false")))
            .unwrap();
        assert!(!p.nested_userns.value);
        let p =
            merge(&[user("[process]\nnested_userns = true")], Some(&admin("[process]\nnested_userns = true"))).unwrap();
        assert!(p.nested_userns.value);
    }

    #[test]
    fn bad_env_names_are_errors() {
        let e = merge(&[user("[env.set]\n\"A-B\" = \"x\"")], None).unwrap_err();
        assert!(e.to_string().contains("A-B"));
    }

    #[test]
    fn control_characters_in_entries_are_errors() {
        let e = merge(&[user("[filesystem]\nread = [\"/a\\nb\"]")], None).unwrap_err();
        assert!(e.to_string().contains("control character"));
    }

    #[test]
    fn builtin_entries_outside_admin_bounds_drop_quietly_and_admin_negation_is_an_error() {
        let builtin =
            SourcedLayer { layer: layer("[filesystem]\nread = [\"/usr\", \"/opt\"]"), source: Source::Builtin };
        let p = merge(&[builtin], Some(&admin("[filesystem]\nread = [\"/usr\"]"))).unwrap();
        assert_eq!(values(&p.fs_read), ["/usr"]);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let e = merge(&[], Some(&admin("[filesystem]\nhide = [\"!/x\"]"))).unwrap_err();
        assert!(e.to_string().contains("admin lock file"), "{e}");
    }

    #[test]
    fn admin_cannot_hold_projects() {
        let e = merge(&[], Some(&admin("[projects.\"/p\"]\n"))).unwrap_err();
        assert!(e.to_string().contains("admin lock file"));
    }

    #[test]
    fn env_keep_bounded_by_admin_glob() {
        let p = merge(
            &[user("[env]\nkeep = [\"OPENAI_API_KEY\", \"AWS_SECRET_ACCESS_KEY\"]")],
            Some(&admin("[env]\nkeep = [\"*_API_KEY\"]")),
        )
        .unwrap();
        assert_eq!(values(&p.env_keep), ["OPENAI_API_KEY"]);
    }

    #[test]
    fn limits_parse_and_the_admins_are_maxima() {
        let p = merge(
            &[user("[limits]\nmem = \"4G\"\npids = 100\ntimeout = \"30m\"")],
            Some(&admin("[limits]\nmem = \"1G\"\npids = 500\ncpus = 4")),
        )
        .unwrap();
        assert_eq!(p.limits.mem.as_ref().map(|l| l.value), Some(1 << 30), "lowered to the admin's maximum");
        assert!(p.warnings.iter().any(|w| w.contains("limits.mem")), "{:?}", p.warnings);
        assert_eq!(p.limits.pids.as_ref().map(|l| l.value), Some(100), "below the maximum: the user's");
        assert_eq!(p.limits.timeout.as_ref().map(|l| l.value), Some(1800));
        assert_eq!(p.limits.cpus.as_ref().map(|l| l.value), Some(4), "the admin's applies when the user set none");
        for bad in
            ["[limits]\nmem = \"1K\"", "[limits]\nmem = \"lots\"", "[limits]\ntimeout = \"0s\"", "[limits]\npids = 0"]
        {
            assert!(merge(&[user(bad)], None).is_err(), "{bad}");
        }
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_seconds("8h"), Ok(28800));
    }

    #[test]
    fn the_admins_query_interval_is_a_minimum_and_rate_a_maximum() {
        let p = merge(&[], None).unwrap();
        assert_eq!((p.slurm.query_interval.value, p.slurm.queries_per_minute.value), (10, 30));
        let gentle = "[slurm]\nquery_interval = \"15s\"\nqueries_per_minute = 12";
        for (asked, interval, rate) in [
            ("[slurm]\nquery_interval = \"0\"\nqueries_per_minute = 600", 15, 12),
            ("[slurm]\nquery_interval = \"1m\"\nqueries_per_minute = 4", 60, 4),
        ] {
            let p = merge(&[user(asked)], Some(&admin(gentle))).unwrap();
            assert_eq!((p.slurm.query_interval.value, p.slurm.queries_per_minute.value), (interval, rate), "{asked}");
            assert!(p.slurm.query_interval.locked && p.slurm.queries_per_minute.locked);
        }
        let p = merge(&[user("[slurm]\nquery_interval = \"0s\"")], None).unwrap();
        assert_eq!(p.slurm.query_interval.value, 0, "a user may turn the cache off where no admin says otherwise");
        for bad in
            ["[slurm]\nqueries_per_minute = 0", "[slurm]\nquery_interval = \"2h\"", "[slurm]\nquery_interval = \"x\""]
        {
            assert!(merge(&[user(bad)], None).is_err(), "{bad}");
        }
    }
}
