//! Policy: reads the TOML layers (built-in, site, user, profile, project tables, `--policy`,
//! command line) and the admin lock file, and merges them into one `Policy` with provenance.
//! Knows nothing of mounts or namespaces: turning a policy into actions is `plan`'s job.

pub mod frozen;
pub mod merge;
pub mod presets;
pub mod schema;

pub use frozen::{Frozen, FrozenError};
pub use merge::{merge, Policy, Source, Sourced, SourcedLayer};
pub use schema::*;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The directory of the site config and the admin lock file. Fixed at build time: no
/// environment variable or user file can point the launcher at another admin file.
pub const ETC_DIR: &str = match option_env!("AGENT_SANDBOX_ETC_DIR") {
    Some(d) => d,
    None => "/etc/agent-sandbox",
};

/// The source of the built-in layer; launches read `BUILTIN_JSON`, made from it.
#[cfg(test)]
const BUILTIN: &str = include_str!("builtin.toml");
/// `BUILTIN` as JSON, made by build.rs: what every launch reads (see there why).
const BUILTIN_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/builtin.json"));

/// Profiles shipped in the binary (`profiles/*.toml`).
pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    ("codex", include_str!("../../profiles/codex.toml")),
    ("claude", include_str!("../../profiles/claude.toml")),
    ("gemini", include_str!("../../profiles/gemini.toml")),
    ("aider", include_str!("../../profiles/aider.toml")),
    ("opencode", include_str!("../../profiles/opencode.toml")),
    ("pi", include_str!("../../profiles/pi.toml")),
];

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{}:{line}:{col}: {key}: {message}", path.display())]
    Parse { path: PathBuf, line: usize, col: usize, key: String, message: String },
    #[error("cannot read {}: {err}", path.display())]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{origin}: {key}: {message}")]
    Invalid { origin: String, key: String, message: String },
    #[error("{} is not trusted: {why}", path.display())]
    Untrusted { path: PathBuf, why: String, fix: String },
    #[error("no profile named `{name}` (known: {known})")]
    UnknownProfile { name: String, known: String },
}

impl PolicyError {
    /// What the user can do about it, printed under the error.
    pub fn fix(&self) -> Option<String> {
        match self {
            PolicyError::Untrusted { fix, .. } => Some(format!("fix: {fix}")),
            PolicyError::Parse { .. } => {
                Some("fix: correct the file; `agent-sandbox policy check FILE` re-checks it".into())
            }
            PolicyError::UnknownProfile { .. } => {
                Some("fix: add ~/.config/agent-sandbox/profiles/NAME.toml or use `agent-sandbox run -- CMD`".into())
            }
            _ => None,
        }
    }
}

/// Which kind of file is being parsed: decides which tables it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Site,
    User,
    Admin,
    Profile,
    PolicyFile,
}

/// Parses one layer strictly: unknown keys and wrong types name file, line and key.
pub fn parse_layer(text: &str, path: &Path, kind: FileKind) -> Result<Layer, PolicyError> {
    let layer: Layer = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0).min(text.len());
        let (line, col) = line_col(text, offset);
        PolicyError::Parse {
            path: path.to_path_buf(),
            line,
            col,
            key: key_at(text, offset),
            message: e.message().trim().to_string(),
        }
    })?;
    let bad = |key: &str, why: &str| PolicyError::Invalid {
        origin: path.display().to_string(),
        key: key.into(),
        message: why.into(),
    };
    if layer.projects.is_some() && kind != FileKind::User {
        return Err(bad("projects", "[projects] tables belong in the user config only"));
    }
    if let Some(projects) = &layer.projects {
        for (k, sub) in projects {
            if sub.projects.is_some() || sub.agent.is_some() {
                return Err(bad(&format!("projects.\"{k}\""), "a project table cannot nest [projects] or [agent]"));
            }
        }
    }
    if layer.agent.is_some() && kind != FileKind::Profile {
        return Err(bad("agent", "[agent] belongs in a profile file only"));
    }
    Ok(layer)
}

/// The built-in layer, from its JSON form.
fn builtin_layer() -> Result<Layer, PolicyError> {
    serde_json::from_str(BUILTIN_JSON).map_err(|e| PolicyError::Parse {
        path: "<built-in>".into(),
        line: e.line(),
        col: e.column(),
        key: String::new(),
        message: e.to_string(),
    })
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, col)
}

/// The dotted key at a byte offset: the last `[table]` header above it plus the key of its line.
fn key_at(text: &str, offset: usize) -> String {
    let line_start = text[..offset].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line_end = text[offset..].find('\n').map(|i| offset + i).unwrap_or(text.len());
    let line = &text[line_start..line_end];
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && l.ends_with(']'))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    let key = line.split('=').next().map(str::trim).filter(|k| !k.is_empty() && line.contains('='));
    let header_line = line.trim().starts_with('[');
    match (table, key, header_line) {
        (_, _, true) => line.trim().trim_matches(|c| c == '[' || c == ']').to_string(),
        (Some(t), Some(k), _) => format!("{t}.{k}"),
        (None, Some(k), _) => k.to_string(),
        (Some(t), None, _) => t,
        (None, None, _) => "(top level)".into(),
    }
}

/// Fixed locations and the per-user ones, resolved once by the caller.
#[derive(Debug, Clone)]
pub struct PolicyPaths {
    pub etc_dir: PathBuf,
    pub user_config: PathBuf,
    pub user_profiles: PathBuf,
}

impl PolicyPaths {
    pub fn new(home: &Path, xdg_config_home: Option<&Path>) -> Self {
        let base = xdg_config_home
            .filter(|p| p.is_absolute())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| home.join(".config"))
            .join("agent-sandbox");
        PolicyPaths {
            etc_dir: PathBuf::from(ETC_DIR),
            user_config: base.join("config.toml"),
            user_profiles: base.join("profiles"),
        }
    }
    pub fn site_config(&self) -> PathBuf {
        self.etc_dir.join("config.toml")
    }
    pub fn admin_file(&self) -> PathBuf {
        self.etc_dir.join("admin.toml")
    }
    pub fn site_profiles(&self) -> PathBuf {
        self.etc_dir.join("profiles")
    }
}

/// Everything the loader needs besides files.
pub struct LoadRequest<'a> {
    pub paths: &'a PolicyPaths,
    pub home: &'a Path,
    pub uid: u32,
    /// Canonical project directory, for `[projects."..."]` tables and the in-project check.
    pub project: Option<&'a Path>,
    pub profile: Option<&'a str>,
    pub policy_files: &'a [PathBuf],
    pub cli: Layer,
}

/// Reads every layer and merges. A file that exists but cannot be read or trusted is an
/// error: a sandbox never starts on a policy it could not read.
pub fn load(req: LoadRequest<'_>) -> Result<Policy, PolicyError> {
    let mut layers = vec![SourcedLayer { layer: builtin_layer()?, source: Source::Builtin }];
    let site = req.paths.site_config();
    if let Some(text) = read_trusted_root_file(&site)? {
        layers.push(SourcedLayer {
            layer: parse_layer(&text, &site, FileKind::Site)?,
            source: Source::Site(site.clone()),
        });
    }
    let user_path = &req.paths.user_config;
    let mut project_tables = vec![];
    if let Some(text) = read_user_file(user_path, req.uid, req.project)? {
        let mut layer = parse_layer(&text, user_path, FileKind::User)?;
        if let (Some(projects), Some(project)) = (layer.projects.take(), req.project) {
            for (key, sub) in projects {
                if same_path(&expand_tilde(&key, req.home), project) {
                    project_tables.push(SourcedLayer { layer: sub, source: Source::Project(key) });
                }
            }
        }
        layers.push(SourcedLayer { layer, source: Source::User(user_path.clone()) });
    }
    if let Some(name) = req.profile {
        let (text, path) = find_profile(req.paths, name, req.uid, req.project)?;
        layers.push(SourcedLayer {
            layer: parse_layer(&text, &path, FileKind::Profile)?,
            source: Source::Profile(name.to_string()),
        });
    }
    layers.extend(project_tables);
    for f in req.policy_files {
        let text = read_user_file(f, req.uid, req.project)?.ok_or_else(|| PolicyError::Read {
            path: f.clone(),
            err: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        layers.push(SourcedLayer {
            layer: parse_layer(&text, f, FileKind::PolicyFile)?,
            source: Source::PolicyFile(f.clone()),
        });
    }
    layers.push(SourcedLayer { layer: req.cli, source: Source::Cli });

    let admin_path = req.paths.admin_file();
    let admin = match read_trusted_root_file(&admin_path)? {
        Some(text) => Some(SourcedLayer {
            layer: parse_layer(&text, &admin_path, FileKind::Admin)?,
            source: Source::Admin(admin_path.clone()),
        }),
        None => None,
    };
    merge(&layers, admin.as_ref())
}

/// A job's frozen policy with the built-in floors put back: every entry of the built-in
/// `filesystem.hide`, `filesystem.hide_files`, `filesystem.deny_devices` and `env.scrub` that it
/// lacks is added, so a thawed policy (however it was written) hides at least what every
/// session hides. The plan adds its own floors on top (the state directory, the credential
/// catalogue), as for a session.
pub fn with_builtin_floors(mut policy: Policy) -> Result<Policy, PolicyError> {
    merge::apply_floors(&mut policy, &builtin_layer()?, &Source::Builtin)?;
    Ok(policy)
}

/// A job's frozen policy, bounded again by this host's own admin lock file when the job
/// starts on a compute node: the node's admin has the last word, and a frozen copy (written
/// on another host, maybe under another admin file) can never carry a widening past it.
pub fn bound_by_admin(mut policy: Policy, paths: &PolicyPaths) -> Result<Policy, PolicyError> {
    let admin_path = paths.admin_file();
    if let Some(text) = read_trusted_root_file(&admin_path)? {
        let layer = parse_layer(&text, &admin_path, FileKind::Admin)?;
        merge::apply_admin(&mut policy, &layer, &Source::Admin(admin_path))?;
    }
    Ok(policy)
}

/// Names of every profile this user can run, for dispatch and help.
pub fn profile_names(paths: &PolicyPaths) -> Vec<String> {
    let mut names: Vec<String> = BUILTIN_PROFILES.iter().map(|(n, _)| n.to_string()).collect();
    for dir in [paths.site_profiles(), paths.user_profiles.clone()] {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "toml") {
                    if let Some(stem) = p.file_stem().and_then(|s| s.to_str()) {
                        if !names.iter().any(|n| n == stem) {
                            names.push(stem.to_string());
                        }
                    }
                }
            }
        }
    }
    names
}

fn valid_profile_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn find_profile(
    paths: &PolicyPaths,
    name: &str,
    uid: u32,
    project: Option<&Path>,
) -> Result<(String, PathBuf), PolicyError> {
    let unknown = || PolicyError::UnknownProfile { name: name.to_string(), known: profile_names(paths).join(", ") };
    if !valid_profile_name(name) {
        return Err(unknown());
    }
    let user = paths.user_profiles.join(format!("{name}.toml"));
    if let Some(text) = read_user_file(&user, uid, project)? {
        return Ok((text, user));
    }
    let site = paths.site_profiles().join(format!("{name}.toml"));
    if let Some(text) = read_trusted_root_file(&site)? {
        return Ok((text, site));
    }
    BUILTIN_PROFILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, t)| (t.to_string(), PathBuf::from(format!("<built-in profiles/{n}.toml>"))))
        .ok_or_else(unknown)
}

fn read_optional(path: &Path) -> Result<Option<(String, std::fs::Metadata)>, PolicyError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(PolicyError::Read { path: path.into(), err }),
    };
    // A policy is a few KiB; a huge or endless file (a FIFO, /dev/zero behind a symlink) is
    // refused rather than read into memory.
    let mut text = String::new();
    let f = std::fs::File::open(path).map_err(|err| PolicyError::Read { path: path.into(), err })?;
    std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_POLICY_BYTES + 1), &mut text)
        .map_err(|err| PolicyError::Read { path: path.into(), err })?;
    if text.len() as u64 > MAX_POLICY_BYTES || !meta.is_file() {
        return Err(PolicyError::Invalid {
            origin: path.display().to_string(),
            key: "(file)".into(),
            message: format!("not a regular file of at most {} KiB", MAX_POLICY_BYTES / 1024),
        });
    }
    Ok(Some((text, meta)))
}

/// The largest policy file read.
pub const MAX_POLICY_BYTES: u64 = 1 << 20;

/// Site and admin files count only if root owns them and their directory, and neither is
/// group- or world-writable. Anything else fails closed: a user who could write the admin
/// file could unlock every floor.
pub fn read_trusted_root_file(path: &Path) -> Result<Option<String>, PolicyError> {
    let Some((text, meta)) = read_optional(path)? else {
        return Ok(None);
    };
    let untrusted = |why: String| {
        PolicyError::Untrusted {
        path: path.to_path_buf(),
        why,
        fix: format!("the admin must make it and {ETC_DIR} owned by root and not group/world-writable (chown root:root; chmod go-w)"),
    }
    };
    if !meta.is_file() {
        return Err(untrusted("not a regular file".into()));
    }
    check_root_owned(&meta).map_err(untrusted)?;
    if let Some(dir) = path.parent() {
        let dmeta = std::fs::metadata(dir).map_err(|err| PolicyError::Read { path: dir.into(), err })?;
        check_root_owned(&dmeta).map_err(|w| untrusted(format!("its directory {}: {w}", dir.display())))?;
    }
    Ok(Some(text))
}

fn check_root_owned(meta: &std::fs::Metadata) -> Result<(), String> {
    if meta.uid() != 0 {
        return Err(format!("owned by uid {}, not root", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!("mode {:o} is group- or world-writable", meta.mode() & 0o7777));
    }
    Ok(())
}

/// User files: owned by the user (or root), not world-writable, and never inside the
/// project, where the jail can write its own next policy.
fn read_user_file(path: &Path, uid: u32, project: Option<&Path>) -> Result<Option<String>, PolicyError> {
    if let Some(project) = project {
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if canon.starts_with(project) {
            return Err(PolicyError::Untrusted {
                path: path.to_path_buf(),
                why: format!("it lies inside the project {}, which the jail can write", project.display()),
                fix: "move it out of the project directory".into(),
            });
        }
    }
    let Some((text, meta)) = read_optional(path)? else {
        return Ok(None);
    };
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(PolicyError::Untrusted {
            path: path.to_path_buf(),
            why: format!("owned by uid {}, not by you", meta.uid()),
            fix: "only your own files (or root's) are read as your policy".into(),
        });
    }
    if meta.mode() & 0o002 != 0 {
        return Err(PolicyError::Untrusted {
            path: path.to_path_buf(),
            why: "world-writable".into(),
            fix: format!("chmod o-w {}", path.display()),
        });
    }
    Ok(Some(text))
}

pub fn expand_tilde(s: &str, home: &Path) -> PathBuf {
    if s == "~" {
        home.to_path_buf()
    } else if let Some(rest) = s.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(s)
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    let ca = std::fs::canonicalize(a).unwrap_or_else(|_| a.to_path_buf());
    ca == b
}

/// `policy check FILE`: the file parsed as a layer of `kind` and merged over the built-in
/// layer as it would be (an admin file as the lock over it). Ok: the merge's warnings.
pub fn check_file(file: &Path, kind: FileKind) -> Result<Vec<String>, PolicyError> {
    let text = std::fs::read_to_string(file).map_err(|e| PolicyError::Read { path: file.to_path_buf(), err: e })?;
    let layer = parse_layer(&text, file, kind)?;
    let builtin = SourcedLayer { layer: builtin_layer()?, source: Source::Builtin };
    let admin = kind == FileKind::Admin;
    let this = SourcedLayer {
        layer,
        source: if admin { Source::Admin(file.to_path_buf()) } else { Source::User(file.to_path_buf()) },
    };
    let merged = if admin { merge(&[builtin], Some(&this)) } else { merge(&[builtin, this], None) }?;
    Ok(merged.warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thawed_policy_gets_the_built_in_floors_back() {
        // A policy missing every built-in floor (as a forged or hand-written one would be).
        let mut bare = merge(&[], None).expect("empty policy");
        bare.fs_read.push(Sourced { value: "~/.ssh".into(), source: Source::Cli, locked: false });
        let floored = with_builtin_floors(bare).expect("floors");
        let has = |l: &merge::List, v: &str| l.iter().any(|e| e.value == v);
        for v in ["~/.ssh", "~/.aws", "~/.local/state/agent-sandbox", "/etc/munge", "/etc/shadow"] {
            assert!(has(&floored.hide, v), "{v} hidden again");
        }
        assert!(has(&floored.env_scrub, "SSH_*") && has(&floored.env_scrub, "*_TOKEN"));
        // What the policy had stays: floors only add.
        assert!(has(&floored.fs_read, "~/.ssh"));
        let again = with_builtin_floors(floored.clone()).expect("floors");
        assert_eq!(again.hide.len(), floored.hide.len(), "added once");
    }

    #[test]
    fn builtin_policy_parses_and_has_the_floors() {
        let l = parse_layer(BUILTIN, Path::new("b"), FileKind::Site).unwrap();
        let hide = l.filesystem.unwrap().hide.unwrap();
        for must in ["~/.ssh", "~/.gnupg", "~/.aws", "/etc/munge", "/run/munge", "/etc/slurm", "/root"] {
            assert!(hide.iter().any(|h| h == must), "{must} missing from the hide floor");
        }
    }

    /// What build.rs made of builtin.toml is what parsing builtin.toml gives.
    #[test]
    fn the_built_in_layer_read_from_json_is_the_one_parsed_from_toml() {
        let toml = parse_layer(BUILTIN, Path::new("b"), FileKind::Site).unwrap();
        let json = builtin_layer().unwrap();
        assert_eq!(format!("{toml:?}"), format!("{json:?}"));
        assert!(format!("{json:?}").contains("api.mailgun.net"), "{json:?}");
    }

    #[test]
    fn every_builtin_profile_parses() {
        for (name, text) in BUILTIN_PROFILES {
            let l = parse_layer(text, Path::new(name), FileKind::Profile).unwrap();
            let agent = l.agent.expect("profile has [agent]");
            assert!(agent.command.is_some_and(|c| !c.is_empty()), "{name} has a command");
        }
    }

    /// The shipped templates, with every commented-out `# key = value` example switched on,
    /// must be valid policy of their kind: the examples admins copy cannot rot.
    #[test]
    fn etc_templates_and_their_commented_examples_parse() {
        for (name, text, kind) in [
            ("etc/config.toml", include_str!("../../etc/config.toml"), FileKind::Site),
            ("etc/admin.toml", include_str!("../../etc/admin.toml"), FileKind::Admin),
        ] {
            let uncommented: String = text
                .lines()
                .map(|l| {
                    let rest = l.strip_prefix("# ").unwrap_or(l);
                    let is_example = rest
                        .split_once(" = ")
                        .is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
                    if is_example {
                        rest
                    } else {
                        l
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            assert_ne!(uncommented, text, "{name} has examples");
            let layer = parse_layer(&uncommented, Path::new(name), kind).unwrap_or_else(|e| panic!("{e}"));
            let sl = SourcedLayer { layer, source: Source::Site(name.into()) };
            if kind == FileKind::Admin {
                merge(&[], Some(&SourcedLayer { layer: sl.layer, source: Source::Admin(name.into()) })).unwrap();
            } else {
                merge(&[sl], None).unwrap();
            }
        }
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let text = "[net]\nmode = \"filtered\"\nmoed = \"open\"\n";
        let e = parse_layer(text, Path::new("/x/config.toml"), FileKind::User).unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("/x/config.toml:3:"), "{s}");
        assert!(s.contains("net.moed"), "{s}");
        assert!(s.contains("unknown field"), "{s}");
    }

    #[test]
    fn wrong_type_names_the_key() {
        let text = "[home]\naccess = 3\n";
        let s = parse_layer(text, Path::new("c.toml"), FileKind::User).unwrap_err().to_string();
        assert!(s.contains("c.toml:2:") && s.contains("home.access"), "{s}");
    }

    #[test]
    fn bad_enum_value_is_an_error() {
        let s = parse_layer("[net]\nmode = \"wide-open\"\n", Path::new("c"), FileKind::User).unwrap_err().to_string();
        assert!(s.contains("net.mode") && s.contains("wide-open"), "{s}");
    }

    #[test]
    fn unknown_table_is_an_error() {
        let s = parse_layer("[netwrok]\nmode = \"open\"\n", Path::new("c"), FileKind::User).unwrap_err().to_string();
        assert!(s.contains("c:1:") && s.contains("netwrok"), "{s}");
    }

    #[test]
    fn syntax_error_is_located() {
        let s = parse_layer("[net\nmode=1", Path::new("c"), FileKind::User).unwrap_err().to_string();
        assert!(s.starts_with("c:1:"), "{s}");
    }

    #[test]
    fn projects_only_in_user_config_and_agent_only_in_profiles() {
        assert!(parse_layer("[projects.\"/p\"]\n", Path::new("c"), FileKind::Site).is_err());
        assert!(parse_layer("[projects.\"/p\"]\n", Path::new("c"), FileKind::User).is_ok());
        assert!(parse_layer("[agent]\nname=\"x\"\n", Path::new("c"), FileKind::User).is_err());
    }

    #[test]
    fn garbage_bytes_do_not_panic() {
        for text in ["\u{0}\u{1}", "[[[[", "a = [1, \"x\"]", "= =", "[a.b.c.d]\nx=1"] {
            let _ = parse_layer(text, Path::new("g"), FileKind::User);
        }
    }

    #[test]
    fn profile_names_reject_path_tricks() {
        for bad in ["../x", "a/b", "", ".hidden", "x y"] {
            assert!(!valid_profile_name(bad), "{bad}");
        }
        assert!(valid_profile_name("my-agent_2"));
    }

    #[test]
    fn tilde_expansion() {
        let h = Path::new("/home/u");
        assert_eq!(expand_tilde("~", h), PathBuf::from("/home/u"));
        assert_eq!(expand_tilde("~/.ssh", h), PathBuf::from("/home/u/.ssh"));
        assert_eq!(expand_tilde("/etc", h), PathBuf::from("/etc"));
        assert_eq!(expand_tilde("~other", h), PathBuf::from("~other"));
    }
}
