//! The credential catalogue (`src/policy/credentials.toml`): where the tools users have keep
//! their credentials, expanded against the launcher's environment and the user's own git and
//! ssh configs (`HostFacts::user_configs`) into paths, and which of them a plan hides and which
//! the user or the running profile shows. Pure: it reads nothing but what it is given.

use super::fs::under;
use crate::host::configs::{shell_words, ssh_line};
use crate::host::HostFs;
use serde::Serialize;
use std::path::{Component, Path, PathBuf};

/// One credential store of one tool: a row of `src/policy/credentials.toml`, which
/// `build.rs` turns into this table (its header says what each field means).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store {
    pub name: &'static str,
    pub tool: &'static str,
    /// Path templates (the file's header says their grammar).
    pub paths: &'static [&'static str],
    pub found: &'static str,
    pub doc: &'static str,
    pub list_vars: &'static [&'static str],
    pub value_prefixes: &'static [&'static str],
    /// The agent (a profile's `[agent] name`) that logs in with it.
    pub login_of: Option<&'static str>,
    pub derived: Option<Derived>,
    /// What the launcher makes, empty, at each path in a writable tree where it is missing.
    pub made: Option<Made>,
}

/// A store the launcher makes before the session where a writable tree would show it and it
/// is not there yet, so that it is covered from the start: one a tool makes outside while a
/// session runs (a first `hf auth login`, git's credential-cache daemon) stays unseen inside,
/// and a jail cannot make it first (listen at the cache daemon's socket). Tools read an empty
/// one as no login (outside review of issue 32, R1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    Dir,
    File,
}

/// Paths an entry takes from the user's own configs rather than from templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {
    /// `credential.helper store --file`, `cache --socket`, `netrc -f`, `http.cookieFile`,
    /// `http.sslKey` in the global git config and what it includes.
    GitConfig,
    /// `IdentityFile`, `IdentityAgent`, `ControlPath` in `~/.ssh/config` and what it includes.
    SshConfig,
}

/// The catalogue, compiled in as a table: nothing to read at a launch.
pub static CATALOGUE: &[Store] = include!(concat!(env!("OUT_DIR"), "/credentials.rs"));

/// What the templates are expanded against.
pub struct Context<'a> {
    /// The home as the jail binds it (canonical).
    pub home: &'a Path,
    /// The home as the password database and the user's variables spell it (`/home/u` where
    /// `/home` leads to `/gpfs/home`): rewritten to `home`.
    pub home_as_named: &'a Path,
    pub uid: u32,
    pub user: &'a str,
    /// The launcher's environment.
    pub env: &'a [(String, String)],
    pub configs: &'a crate::host::UserConfigs,
}

impl Context<'_> {
    fn var(&self, name: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }

    /// An absolute path as the jail sees it: `~/` is the home, the home's other spelling is
    /// rewritten, `.` and `..` resolved lexically (`..` above `/` names nothing).
    fn absolute(&self, raw: &str) -> Option<PathBuf> {
        let p = match raw.strip_prefix("~/") {
            Some(rest) => self.home.join(rest),
            None if raw == "~" => self.home.to_path_buf(),
            None => PathBuf::from(raw),
        };
        if !p.is_absolute() {
            return None;
        }
        let mut out = PathBuf::from("/");
        for c in p.components() {
            match c {
                Component::Normal(n) => out.push(n),
                Component::ParentDir => {
                    if !out.pop() {
                        return None;
                    }
                }
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        if self.home_as_named != self.home {
            if let Ok(rest) = out.strip_prefix(self.home_as_named) {
                out = self.home.join(rest);
            }
        }
        Some(out)
    }
}

/// One path of one entry, and where it came from when not from a fixed template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Located {
    pub store: &'static str,
    pub path: PathBuf,
    /// `$HF_HOME`, `~/.ssh/config IdentityFile`...: what named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// Every path of every entry, expanded (duplicates removed, the first naming kept). A `*`
/// from an ssh `%` token is expanded against `fs` (only where a user's config has one).
pub fn locate(stores: &[Store], ctx: &Context<'_>, fs: &dyn HostFs) -> Vec<Located> {
    let mut out: Vec<Located> = Vec::with_capacity(160);
    let mut add = |store: &'static str, path: PathBuf, via: Option<String>| out.push(Located { store, path, via });
    for s in stores {
        for t in s.paths {
            let paths = expand(t, s, ctx);
            let via = (t.starts_with('$') && !paths.is_empty()).then(|| t.split('/').next().unwrap_or(t).to_string());
            for p in paths {
                add(s.name, p, via.clone());
            }
        }
        match s.derived {
            Some(Derived::GitConfig) => {
                for (p, via) in git_named(ctx) {
                    add(s.name, p, Some(via));
                }
            }
            Some(Derived::SshConfig) => {
                for (p, via) in ssh_named(ctx) {
                    if crate::glob::has_glob(&p.to_string_lossy()) {
                        for m in super::fs::expand_glob(fs, &p) {
                            add(s.name, m, Some(via.clone()));
                        }
                    } else {
                        add(s.name, p, Some(via));
                    }
                }
            }
            None => {}
        }
    }
    // Each path once, as the first entry names it (a stable sort keeps the first first; a
    // hash set of the paths cost twice as much here).
    fn key(l: &Located) -> &[u8] {
        l.path.as_os_str().as_encoded_bytes()
    }
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by(|a, b| key(&out[*a]).cmp(key(&out[*b])));
    let mut keep = vec![false; out.len()];
    let mut last: Option<usize> = None;
    for i in order {
        if last.is_none_or(|l| key(&out[l]) != key(&out[i])) {
            keep[i] = true;
            last = Some(i);
        }
    }
    let mut i = 0;
    out.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    out
}

/// The paths a template names (none where its variable is unset or not a path).
pub fn expand(template: &str, store: &Store, ctx: &Context<'_>) -> Vec<PathBuf> {
    let Some(after) = template.strip_prefix('$') else {
        // A fixed place (the catalogue's own test keeps `.` and `..` out of templates).
        let t = match template.contains("{uid}") {
            true => std::borrow::Cow::Owned(template.replace("{uid}", &ctx.uid.to_string())),
            false => std::borrow::Cow::Borrowed(template),
        };
        return match t.strip_prefix("~/") {
            Some(rest) => vec![ctx.home.join(rest)],
            None => vec![PathBuf::from(t.as_ref())],
        };
    };
    let (name, rest) = match after.split_once('/') {
        Some((n, r)) => (n, Some(r)),
        None => (after, None),
    };
    let Some(value) = ctx.var(name) else { return vec![] };
    let values: Vec<&str> = match store.list_vars.contains(&name) {
        true => value.split(':').filter(|v| !v.is_empty()).collect(),
        false => vec![value],
    };
    let mut out = vec![];
    for v in values {
        let v = match store.value_prefixes.iter().find_map(|p| v.strip_prefix(p)) {
            Some(stripped) => stripped,
            // `KEYRING:persistent:1000`, `KCM:`: a cache that is no file.
            None if !store.value_prefixes.is_empty() && typed_value(v) => continue,
            None => v,
        };
        let joined = match rest {
            Some(r) => format!("{}/{}", v.trim_end_matches('/'), r.replace("{uid}", &ctx.uid.to_string())),
            None => v.to_string(),
        };
        out.extend(ctx.absolute(&joined));
    }
    out
}

/// `TYPE:residual`, the form of Kerberos cache names.
fn typed_value(v: &str) -> bool {
    v.split_once(':').is_some_and(|(t, _)| !t.is_empty() && t.bytes().all(|b| b.is_ascii_uppercase()))
}

/// `~/x` for a path in the home, for messages.
fn tilde(p: &Path, home: &Path) -> String {
    match p.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => p.display().to_string(),
    }
}

// ---- Paths the user's git config names ----------------------------------------------

/// The files git's global config and its includes name: a credential helper's store, its
/// cache socket, a netrc it reads, the cookie file and the client key `http` sends.
fn git_named(ctx: &Context<'_>) -> Vec<(PathBuf, String)> {
    let mut out = vec![];
    for file in &ctx.configs.git {
        let Some(bytes) = &file.bytes else { continue };
        let Ok(entries) = crate::gitconfig::parse(bytes) else { continue };
        let shown = tilde(&file.path, ctx.home);
        for e in entries {
            let Some(v) = e.value.as_deref().and_then(|v| std::str::from_utf8(v).ok()) else { continue };
            let named: Vec<String> = match (e.section.as_str(), e.key.as_str()) {
                ("credential", "helper") => helper_files(v),
                ("http", "cookiefile" | "sslkey") => vec![v.to_string()],
                ("core", "sshcommand") => ssh_command_keys(v),
                _ => vec![],
            };
            for n in named {
                if let Some(p) = git_path(&n, ctx) {
                    out.push((p, format!("{shown} {}.{}", e.section, e.key)));
                }
            }
        }
    }
    // git prefers the variable to `core.sshCommand`.
    for n in ctx.var("GIT_SSH_COMMAND").map(ssh_command_keys).unwrap_or_default() {
        if let Some(p) = git_path(&n, ctx) {
            out.push((p, "$GIT_SSH_COMMAND".to_string()));
        }
    }
    out
}

/// The keys an ssh command line names (`core.sshCommand = ssh -i ~/deploykeys/k`, git runs it
/// through the shell): `-i KEY`, `-iKEY`, `-i` last in a group of flags (`-Ai KEY`), and
/// `IdentityFile` given with `-o` (`-oIdentityFile=KEY`, `-o IdentityFile=KEY`, `-o
/// "IdentityFile KEY"`, `-o IdentityFile KEY`). Read as ssh's getopt does: the argument of an
/// option that takes one is no flag.
pub fn ssh_command_keys(value: &str) -> Vec<String> {
    /// ssh's options that take an argument (ssh(1)).
    const WITH_ARG: &str = "BbcDEeFIiJLlmOopPQRSWw";
    let words = shell_words(value);
    let mut out = vec![];
    let mut it = words.iter().skip(1).peekable();
    while let Some(w) = it.next() {
        let Some(flags) = w.strip_prefix('-').filter(|f| !f.is_empty() && !f.starts_with('-')) else { continue };
        let Some((at, opt)) = flags.char_indices().find(|(_, c)| WITH_ARG.contains(*c)) else { continue };
        let attached = &flags[at + opt.len_utf8()..];
        let arg = match attached.is_empty() {
            true => it.next().cloned(),
            false => Some(attached.to_string()),
        };
        let Some(arg) = arg else { break };
        match opt {
            'i' => out.push(arg),
            'o' => {
                let Some((keyword, mut args)) = crate::host::configs::ssh_line(&arg) else { continue };
                if !keyword.eq_ignore_ascii_case("identityfile") {
                    continue;
                }
                // `-o IdentityFile KEY`: the key as the next word.
                if args.is_empty() {
                    args.extend(it.next().cloned());
                }
                out.extend(args.into_iter().next().filter(|k| !k.eq_ignore_ascii_case("none")));
            }
            _ => {}
        }
    }
    out
}

/// A path value as git reads one: `~/` is the home; relative paths are relative to where
/// git runs, which nothing here knows (left out).
fn git_path(v: &str, ctx: &Context<'_>) -> Option<PathBuf> {
    let v = v.strip_prefix("$HOME/").map(|r| format!("~/{r}")).unwrap_or_else(|| v.to_string());
    (v.starts_with('/') || v.starts_with("~/")).then(|| ctx.absolute(&v)).flatten()
}

/// The files a `credential.helper` value names: `store --file F`, `cache --socket S`,
/// `netrc -f F` (git runs `git credential-<name> ARGS` through the shell; a `!` snippet is
/// not read).
pub fn helper_files(value: &str) -> Vec<String> {
    let words = shell_words(value);
    let Some(first) = words.first() else { return vec![] };
    if first.starts_with('!') {
        return vec![];
    }
    let program = first.rsplit('/').next().unwrap_or(first);
    let program = program.strip_prefix("git-credential-").unwrap_or(program);
    let options: &[&str] = match program {
        "store" => &["--file"],
        "cache" => &["--socket"],
        "netrc" => &["-f", "--file"],
        _ => return vec![],
    };
    let mut out = vec![];
    let mut it = words[1..].iter();
    while let Some(w) = it.next() {
        if let Some((opt, val)) = w.split_once('=') {
            if options.contains(&opt) {
                out.push(val.to_string());
            }
        } else if options.contains(&w.as_str()) {
            out.extend(it.next().cloned());
        }
    }
    out
}

// ---- Paths the user's ssh config names ----------------------------------------------

/// The keys, agent sockets and master-connection sockets `~/.ssh/config` and its includes
/// name. Every `Host` and `Match` block counts (the jail may connect anywhere the network
/// allows). For the `%` tokens ssh fills in per connection, see `ssh_path`.
fn ssh_named(ctx: &Context<'_>) -> Vec<(PathBuf, String)> {
    let mut out = vec![];
    for (file, text) in &ctx.configs.ssh {
        let shown = tilde(file, ctx.home);
        for line in text.lines() {
            let Some((keyword, args)) = ssh_line(line) else { continue };
            let keyword = keyword.to_ascii_lowercase();
            if !matches!(keyword.as_str(), "identityfile" | "identityagent" | "controlpath") {
                continue;
            }
            let Some(arg) = args.first() else { continue };
            if arg.eq_ignore_ascii_case("none") || (keyword == "identityagent" && arg == "SSH_AUTH_SOCK") {
                continue;
            }
            if let Some(p) = ssh_path(arg, ctx) {
                out.push((p, format!("{shown} {keyword}")));
            }
        }
    }
    out
}

/// An ssh path argument: `~`, `%d` (home), `%u` (user), `%i` (uid), `%%` and `${VAR}`
/// expanded; other `%` tokens in the last component name the directory (in the home itself,
/// `*`: what matches now); in an earlier one, nothing.
fn ssh_path(arg: &str, ctx: &Context<'_>) -> Option<PathBuf> {
    let mut s = String::new();
    let mut chars = arg.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next()? {
                '%' => s.push('%'),
                'd' => s.push_str(&ctx.home.to_string_lossy()),
                'u' => s.push_str(ctx.user),
                'i' => s.push_str(&ctx.uid.to_string()),
                _ => s.push('*'),
            },
            '$' if chars.peek() == Some(&'{') => {
                chars.next();
                let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
                s.push_str(ctx.var(&name)?);
            }
            c => s.push(c),
        }
    }
    let p = ctx.absolute(&s)?;
    let parent = p.parent()?;
    if parent.to_string_lossy().contains('*') {
        return None;
    }
    // A socket named per connection (`ControlPath ~/.cache/ssh/%C`): its directory, so that
    // a master connection the user opens during the session is hidden too; directly in the
    // home, the sockets there now.
    match p.to_string_lossy().contains('*') && parent != ctx.home {
        true => Some(parent.to_path_buf()),
        false => Some(p),
    }
}

// ---- What a plan hides and shows ----------------------------------------------------

/// Why a catalogue path is shown after all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exposed {
    pub store: &'static str,
    pub path: PathBuf,
    pub why: String,
}

/// What the plan does with the catalogue.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CredentialsPlan {
    /// Hidden wherever the jail shows the tree around them (present or not: a missing one
    /// costs nothing).
    pub hidden: Vec<Located>,
    pub exposed: Vec<Exposed>,
    /// Paths a variable or config named that cannot be hidden (a top-level directory such as
    /// `/usr`, the home, the project, or a parent of either): listed, not hidden.
    pub refused: Vec<Located>,
    /// The user's git configs shown with entries left out (`plan::gitstrip`), and the names
    /// of those entries (never their values).
    pub stripped: Vec<(PathBuf, Vec<String>)>,
}

/// The entries the policy lists: the key, the entry as written, the path it names; with
/// their order by the path's bytes, for binary searches (a plan asks for each of the
/// catalogue's paths).
pub struct Named {
    pub entries: Vec<(&'static str, String, PathBuf)>,
    order: Vec<usize>,
}

fn bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_encoded_bytes()
}

impl Named {
    pub fn new(entries: Vec<(&'static str, String, PathBuf)>) -> Named {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by(|a, b| bytes(&entries[*a].2).cmp(bytes(&entries[*b].2)));
        Named { entries, order }
    }

    fn key(&self, i: usize) -> &[u8] {
        bytes(&self.entries[self.order[i]].2)
    }

    /// The first entry that is `p` or lies below it.
    fn naming(&self, p: &Path) -> Option<&(&'static str, String, PathBuf)> {
        let key = bytes(p);
        let start = self.order.partition_point(|i| bytes(&self.entries[*i].2) < key);
        (start..self.order.len())
            .take_while(|i| self.key(*i).starts_with(key))
            .filter(|i| self.key(*i).len() == key.len() || self.key(*i)[key.len()] == b'/')
            .map(|i| self.order[i])
            .min()
            .map(|i| &self.entries[i])
    }
}

/// Splits `located` into what is hidden and what is shown: shown where an entry the user (or
/// a profile, a site) listed is the path or lies below it (naming a tree around a store, such
/// as the built-in `~/.cargo`, shows nothing of it), or where it is the login of `agent`
/// whose key the profile does not keep outside. The home, the project and their parents are
/// never hidden.
pub fn decide(
    stores: &[Store],
    located: Vec<Located>,
    named: &Named,
    home: &Path,
    project: &Path,
    agent: Option<&str>,
    key_kept_outside: bool,
) -> CredentialsPlan {
    let mut plan = CredentialsPlan::default();
    let logins: Vec<(&str, &str)> = stores.iter().filter_map(|s| Some((s.name, s.login_of?))).collect();
    for l in located {
        // A variable set to `/`, `/usr` or the home names a tree, not a store: hiding it would
        // take the system or the session away.
        let tree = !l.path.as_os_str().as_encoded_bytes().get(1..).is_some_and(|rest| rest.contains(&b'/'));
        if tree || under(home, &l.path) || under(project, &l.path) {
            plan.refused.push(l);
            continue;
        }
        if let Some((key, entry, _)) = named.naming(&l.path) {
            let why = format!("{key} names `{entry}`");
            plan.exposed.push(Exposed { store: l.store, path: l.path, why });
            continue;
        }
        let login = logins.iter().find(|(name, _)| *name == l.store).map(|(_, agent)| *agent);
        if let (Some(login), Some(agent)) = (login, agent) {
            if login == agent && !key_kept_outside {
                let why = format!("the {agent} profile's agent logs in with it (no API key injected from outside)");
                plan.exposed.push(Exposed { store: l.store, path: l.path, why });
                continue;
            }
        }
        plan.hidden.push(l);
    }
    plan
}

/// The catalogue paths among `paths` that exist here (for `--dry-run` and `doctor`).
pub fn present<'a>(paths: &'a [Located], fs: &dyn HostFs) -> Vec<&'a Located> {
    paths.iter().filter(|l| fs.kind(&l.path).is_some()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{FakeFs, GitConfigFile, UserConfigs};

    fn ctx<'a>(env: &'a [(String, String)], configs: &'a UserConfigs) -> Context<'a> {
        Context {
            home: Path::new("/gpfs/home/u"),
            home_as_named: Path::new("/home/u"),
            uid: 1001,
            user: "u",
            env,
            configs,
        }
    }

    fn env(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn store(name: &str) -> &'static Store {
        CATALOGUE.iter().find(|s| s.name == name).expect("in the catalogue")
    }

    const CATALOGUE_TOML: &str = include_str!("../policy/credentials.toml");

    /// A row of the TOML as a reader of its own takes it.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct TomlStore {
        name: String,
        tool: String,
        paths: Vec<String>,
        found: String,
        doc: String,
        #[serde(default)]
        list_vars: Vec<String>,
        #[serde(default)]
        value_prefixes: Vec<String>,
        login_of: Option<String>,
        derived: Option<String>,
        made: Option<String>,
    }

    #[derive(serde::Deserialize)]
    struct TomlFile {
        store: Vec<TomlStore>,
    }

    #[test]
    fn the_compiled_table_is_the_toml_file() {
        let file: TomlFile = toml::from_str(CATALOGUE_TOML).expect("the TOML parses");
        assert_eq!(file.store.len(), CATALOGUE.len());
        for (t, s) in file.store.iter().zip(CATALOGUE) {
            assert_eq!(
                (t.name.as_str(), t.tool.as_str(), t.found.as_str(), t.doc.as_str()),
                (s.name, s.tool, s.found, s.doc)
            );
            assert_eq!(t.paths, s.paths, "{}", s.name);
            assert_eq!(t.list_vars, s.list_vars, "{}", s.name);
            assert_eq!(t.value_prefixes, s.value_prefixes, "{}", s.name);
            assert_eq!(t.login_of.as_deref(), s.login_of, "{}", s.name);
            let derived = match s.derived {
                Some(Derived::GitConfig) => Some("git-config"),
                Some(Derived::SshConfig) => Some("ssh-config"),
                None => None,
            };
            assert_eq!(t.derived.as_deref(), derived, "{}", s.name);
            let made = s.made.map(|m| if m == Made::Dir { "dir" } else { "file" });
            assert_eq!(t.made.as_deref(), made, "{}", s.name);
        }
    }

    /// The table itself: names unique and plain, every template of the grammar, every entry
    /// with its rule and documentation, the agents named those the built-in profiles run.
    #[test]
    fn every_entry_is_well_formed() {
        let cat = CATALOGUE;
        assert!(cat.len() >= 50, "{} entries", cat.len());
        let mut names = std::collections::BTreeSet::new();
        let agents: Vec<String> = crate::policy::BUILTIN_PROFILES
            .iter()
            .filter_map(|(_, text)| text.lines().find_map(|l| l.strip_prefix("name = \"")))
            .map(|n| n.trim_end_matches('"').to_string())
            .collect();
        for s in cat {
            assert!(names.insert(s.name), "{} twice", s.name);
            assert!(s.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'), "{}", s.name);
            assert!(!s.tool.is_empty() && !s.found.is_empty(), "{}", s.name);
            assert!(s.doc.starts_with("https://"), "{}: {}", s.name, s.doc);
            assert!(!s.paths.is_empty() || s.derived.is_some(), "{} names nothing", s.name);
            for t in s.paths {
                let var_ok = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                let head_ok = match t.strip_prefix('$') {
                    Some(after) => var_ok(after.split('/').next().unwrap_or("")),
                    None => t.starts_with("~/") || t.starts_with('/'),
                };
                assert!(head_ok, "{}: `{t}`", s.name);
                assert!(!t.ends_with('/') && !t.contains("//") && !t.contains("/../") && !t.contains("/./"), "{t}");
                assert!(!crate::glob::has_glob(t), "{}: `{t}` (no globs: a glob costs a directory read)", s.name);
                assert!(t.replace("{uid}", "").find(['{', '}']).is_none(), "{t}");
            }
            for v in s.list_vars {
                assert!(s.paths.iter().any(|t| t.starts_with(&format!("${v}"))), "{}: {v} unused", s.name);
            }
            if let Some(a) = s.login_of {
                assert!(agents.iter().any(|n| n == a), "{}: no built-in profile runs `{a}` ({agents:?})", s.name);
            }
        }
    }

    /// docs/security-model.md lists every entry, and only entries of the catalogue.
    #[test]
    fn the_security_model_lists_the_catalogue() {
        let doc = include_str!("../../docs/security-model.md");
        let section = doc.split("### Credential stores (the catalogue)").nth(1).expect("the section");
        let section = section.split("\n### ").next().unwrap_or(section);
        let rows: Vec<&str> = section.lines().filter_map(|l| l.strip_prefix("| `")?.split('`').next()).collect();
        let names: Vec<&str> = CATALOGUE.iter().map(|s| s.name).collect();
        assert_eq!(rows, names, "the table and the catalogue, in the same order");
    }

    /// The stores issue 32 found readable inside on main are in the catalogue.
    #[test]
    fn the_measured_leaks_are_catalogued() {
        let configs = UserConfigs::default();
        let e = env(&[]);
        let all: Vec<PathBuf> =
            locate(CATALOGUE, &ctx(&e, &configs), &FakeFs::default()).into_iter().map(|l| l.path).collect();
        for p in [
            ".config/git/credentials",
            ".cargo/credentials.toml",
            ".cargo/credentials",
            ".cache/huggingface/token",
            ".npmrc",
            ".pypirc",
            ".local/share/keyrings",
            ".bash_history",
            ".python_history",
            ".Rhistory",
            ".psql_history",
            ".codex/auth.json",
            ".claude/.credentials.json",
            ".gemini/oauth_creds.json",
            ".julia/servers",
            // Red team 32 R5
            ".zhistory",
            ".local/share/atuin",
            ".lesshst",
            ".viminfo",
            ".local/share/nvim/shada",
            ".local/state/nvim/shada",
            ".claude.json",
        ] {
            assert!(all.contains(&Path::new("/gpfs/home/u").join(p)), "~/{p}");
        }
    }

    #[test]
    fn variables_move_stores_and_the_defaults_stay_hidden() {
        let configs = UserConfigs::default();
        let e = env(&[
            ("HF_HOME", "/scratch/u/hf"),
            ("HF_TOKEN_PATH", "~/tok"),
            ("CARGO_HOME", "/home/u/cargo"),
            ("XDG_CACHE_HOME", ""),
            ("KUBECONFIG", "/a/k1::/b/k2"),
            ("KRB5CCNAME", "FILE:/tmp/cc"),
            ("JULIA_DEPOT_PATH", "/d1:/d2"),
        ]);
        let c = ctx(&e, &configs);
        assert_eq!(expand("$HF_HOME/token", store("huggingface"), &c), vec![PathBuf::from("/scratch/u/hf/token")]);
        assert_eq!(expand("$HF_TOKEN_PATH", store("huggingface"), &c), vec![PathBuf::from("/gpfs/home/u/tok")]);
        assert!(expand("$XDG_CACHE_HOME/huggingface/token", store("huggingface"), &c).is_empty(), "empty: unset");
        assert_eq!(
            expand("$CARGO_HOME/credentials.toml", store("cargo"), &c),
            vec![PathBuf::from("/gpfs/home/u/cargo/credentials.toml")],
            "the home's other spelling is the one the jail binds"
        );
        assert_eq!(expand("$KUBECONFIG", store("kube"), &c), vec![PathBuf::from("/a/k1"), PathBuf::from("/b/k2")]);
        assert_eq!(expand("$KRB5CCNAME", store("kerberos"), &c), vec![PathBuf::from("/tmp/cc")]);
        assert_eq!(expand("/tmp/krb5cc_{uid}", store("kerberos"), &c), vec![PathBuf::from("/tmp/krb5cc_1001")]);
        assert_eq!(
            expand("$JULIA_DEPOT_PATH/logs/repl_history.jl", store("repl-history"), &c),
            vec![PathBuf::from("/d1/logs/repl_history.jl"), PathBuf::from("/d2/logs/repl_history.jl")]
        );
        let keyring = env(&[("KRB5CCNAME", "KEYRING:persistent:1001"), ("HF_HOME", "relative/dir")]);
        let c = ctx(&keyring, &configs);
        assert!(expand("$KRB5CCNAME", store("kerberos"), &c).is_empty(), "a keyring cache is no file");
        assert!(expand("$HF_HOME/token", store("huggingface"), &c).is_empty(), "a relative value names nothing");
        let up = env(&[("HF_HOME", "/../../x")]);
        assert_eq!(expand("$HF_HOME/token", store("huggingface"), &ctx(&up, &configs)), Vec::<PathBuf>::new());
    }

    #[test]
    fn helpers_name_their_files_as_the_shell_splits_them() {
        assert_eq!(helper_files("store --file ~/.my-creds"), vec!["~/.my-creds"]);
        assert_eq!(helper_files("store --file=\"/s p/c\""), vec!["/s p/c"]);
        assert_eq!(helper_files("/usr/lib/git-core/git-credential-store --file '/x'"), vec!["/x"]);
        assert_eq!(helper_files("cache --timeout 300 --socket /run/s"), vec!["/run/s"]);
        assert_eq!(helper_files("netrc -f ~/.authinfo"), vec!["~/.authinfo"]);
        assert!(helper_files("!f() { echo password=x; }; f").is_empty());
        assert!(helper_files("libsecret").is_empty());
        assert!(helper_files("").is_empty());
    }

    #[test]
    fn the_git_and_ssh_configs_name_files_outside_the_default_places() {
        let configs = UserConfigs {
            git: vec![GitConfigFile {
                path: "/gpfs/home/u/.gitconfig".into(),
                bytes: Some(
                    b"[credential]\n\thelper = store --file ~/secrets/git\n[credential \"https://h\"]\n\thelper = cache --socket /home/u/.sock/git\n[http]\n\tcookieFile = ~/.gitcookies-work\n[http \"https://x\"]\n\tsslKey = relative.key\n"
                        .to_vec(),
                ),
                role: crate::host::configs::GitRole::Global,
            }],
            ssh: vec![(
                "/gpfs/home/u/.ssh/config".into(),
                "Host hpc\n  IdentityFile ~/keys/id_hpc\n  identityfile=\"%d/keys/id two\"\n  IdentityAgent ${SOCK}\n  ControlPath ~/.cache/cm/%r@%h:%p\n  ControlPath ~/.cm-%r@%h:%p\n  ControlPath /tmp/%h/x\n  IdentityFile none\n# IdentityFile ~/commented\n".into(),
            )],
            stripped_before: vec![],
        };
        let e = env(&[("SOCK", "/home/u/.1password/agent.sock")]);
        let fs = FakeFs::default().file("/gpfs/home/u/.cm-u@h:22").file("/gpfs/home/u/.cm-other");
        let got: Vec<(String, Option<String>)> = locate(CATALOGUE, &ctx(&e, &configs), &fs)
            .into_iter()
            .filter(|l| l.via.as_deref().is_some_and(|v| v.contains("config")))
            .map(|l| (l.path.display().to_string(), l.via))
            .collect();
        let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "/gpfs/home/u/secrets/git",
                "/gpfs/home/u/.sock/git",
                "/gpfs/home/u/.gitcookies-work",
                "/gpfs/home/u/keys/id_hpc",
                "/gpfs/home/u/keys/id two",
                "/gpfs/home/u/.1password/agent.sock",
                "/gpfs/home/u/.cache/cm",
                "/gpfs/home/u/.cm-u@h:22",
            ],
            "{got:?}"
        );
        assert_eq!(got[0].1.as_deref(), Some("~/.gitconfig credential.helper"));
    }

    /// Red team 32 R5: the deploy key `core.sshCommand = ssh -i KEY` names, in each form ssh
    /// takes it, and nothing an option's argument or another program holds.
    #[test]
    fn an_ssh_command_names_its_keys_as_ssh_reads_its_options() {
        for (cmd, keys) in [
            ("ssh -i ~/deploykeys/deploy_ed25519", &["~/deploykeys/deploy_ed25519"][..]),
            ("ssh -i'/k/with space'", &["/k/with space"]),
            ("/usr/bin/ssh -F /dev/null -Ai ~/a -o IdentitiesOnly=yes", &["~/a"]),
            ("ssh -oIdentityFile=~/b", &["~/b"]),
            ("ssh -o IdentityFile=~/c -o 'IdentityFile ~/d'", &["~/c", "~/d"]),
            ("ssh -o IdentityFile ~/e", &["~/e"]),
            ("ssh -o identityfile=none -i ~/f -p 2222", &["~/f"]),
        ] {
            assert_eq!(ssh_command_keys(cmd), keys, "{cmd}");
        }
        // `-l` takes `pi` (no `-i`); `-p` takes `-i`'s look-alike; a lone `-i` names nothing.
        for cmd in ["ssh -lpi host", "ssh -p -i", "ssh -i", "ssh", "", "ssh --i x", "ssh -o Port=22"] {
            assert!(ssh_command_keys(cmd).is_empty(), "{cmd}");
        }
        let configs = UserConfigs {
            git: vec![GitConfigFile {
                path: "/gpfs/home/u/.gitconfig".into(),
                bytes: Some(
                    b"[core]\n\tsshCommand = ssh -i ~/deploykeys/deploy_ed25519 -o IdentitiesOnly=yes\n".to_vec(),
                ),
                role: crate::host::configs::GitRole::Global,
            }],
            ssh: vec![],
            stripped_before: vec![],
        };
        let e = env(&[("GIT_SSH_COMMAND", "ssh -i /keys/ci")]);
        let named: Vec<(PathBuf, Option<String>)> = locate(CATALOGUE, &ctx(&e, &configs), &FakeFs::default())
            .into_iter()
            .filter(|l| l.store == "git-named-files")
            .map(|l| (l.path, l.via))
            .collect();
        assert_eq!(
            named,
            vec![
                ("/gpfs/home/u/deploykeys/deploy_ed25519".into(), Some("~/.gitconfig core.sshcommand".into())),
                ("/keys/ci".into(), Some("$GIT_SSH_COMMAND".into())),
            ]
        );
    }

    #[test]
    fn naming_a_store_shows_it_and_naming_a_tree_around_it_does_not() {
        let home = Path::new("/home/u");
        let located = vec![
            Located { store: "cargo", path: home.join(".cargo/credentials.toml"), via: None },
            Located { store: "npm", path: home.join(".npmrc"), via: None },
            Located { store: "codex-login", path: home.join(".codex/auth.json"), via: None },
            Located { store: "gnupg", path: home.to_path_buf(), via: Some("$GNUPGHOME".into()) },
            Located { store: "x", path: "/home/u/proj/.hf/token".into(), via: None },
            Located { store: "docker", path: "/usr".into(), via: Some("$DOCKER_CONFIG".into()) },
        ];
        let named = Named::new(
            [("home.read", ".cargo"), ("home.read", ".npmrc"), ("home.write", ".codex/")]
                .map(|(k, e)| (k, e.to_string(), home.join(e.trim_end_matches('/'))))
                .to_vec(),
        );
        let cat = CATALOGUE;
        let plan = decide(cat, located.clone(), &named, home, Path::new("/home/u/proj"), None, false);
        let hidden: Vec<&Path> = plan.hidden.iter().map(|l| l.path.as_path()).collect();
        assert_eq!(
            hidden,
            vec![
                Path::new("/home/u/.cargo/credentials.toml"),
                Path::new("/home/u/.codex/auth.json"),
                Path::new("/home/u/proj/.hf/token")
            ]
        );
        assert_eq!(plan.exposed.len(), 1);
        assert_eq!(plan.exposed[0].why, "home.read names `.npmrc`");
        assert_eq!(plan.refused[0].path, home, "the home itself is never hidden");
        assert_eq!(plan.refused[1].path, Path::new("/usr"), "nor a system tree");
        // The codex profile's login, unless its key is injected from outside.
        let with = decide(cat, located.clone(), &named, home, Path::new("/p"), Some("codex"), false);
        assert!(with.exposed.iter().any(|e| e.store == "codex-login" && e.why.contains("codex profile")));
        let injected = decide(cat, located, &named, home, Path::new("/p"), Some("codex"), true);
        assert!(injected.hidden.iter().any(|l| l.store == "codex-login"));
    }
}
