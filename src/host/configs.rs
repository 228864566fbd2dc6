//! The user's own configs that say where credentials are (git's global config, `~/.ssh/config`)
//! and the files they include, read as far as the credential catalogue needs and no further:
//! at most `MAX_FILES` of each, each capped. Reads only; `plan::catalogue` and
//! `plan::gitstrip` decide what they mean.

use std::path::{Path, PathBuf};

/// Files of each kind read at most (the top files and what they include, breadth first).
pub const MAX_FILES: usize = 16;
/// An ssh config larger than this is read only this far.
pub const MAX_SSH_CONFIG: u64 = 256 << 10;

/// A git config file of the user's, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitConfigFile {
    /// Where it is, symlinks resolved (what the jail binds).
    pub path: PathBuf,
    /// Its bytes; None where it is larger than `gitconfig::MAX_CONFIG` (then not read).
    pub bytes: Option<Vec<u8>>,
    pub role: GitRole,
}

/// What git makes of a config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitRole {
    /// Read as the global config: `$GIT_CONFIG_GLOBAL`, else `$XDG_CONFIG_HOME/git/config`
    /// and `~/.gitconfig`.
    Global,
    /// A global file git does not read while `$GIT_CONFIG_GLOBAL` names another (it may still
    /// hold a token, and be copied in as `home.seed`).
    Unread,
    /// Named by an `include.path` or `includeIf.*.path` of another.
    Included,
}

/// What `UserConfigs::gather` read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserConfigs {
    /// git's global config (`$GIT_CONFIG_GLOBAL`, else `$XDG_CONFIG_HOME/git/config` then
    /// `~/.gitconfig`, in git's order; the latter two also where the variable is set), and the
    /// files their `include.path` and `includeIf.*.path` name.
    pub git: Vec<GitConfigFile>,
    /// `~/.ssh/config` and the files its `Include` lines name (relative to `~/.ssh`, a glob
    /// in the last component expanded), as text.
    pub ssh: Vec<(PathBuf, String)>,
    /// Token configs earlier sessions found and stripped, where they really are
    /// (`STRIPPED_RECORD` in the state directory): still stripped when the name that led to
    /// one is gone (a link a session removed; eighth outside look at the anchors, U8-2).
    pub stripped_before: Vec<PathBuf>,
}

/// The state directory's record of the token configs the plan stripped (one absolute path a
/// line), which no jail can reach.
pub const STRIPPED_RECORD: &str = "stripped-configs";

/// The most of that record read.
const MAX_RECORD: u64 = 64 << 10;

/// The record's paths: absolute ones only, at most `MAX_RECORD` bytes read.
pub fn read_stripped_record(state_dir: &Path) -> Vec<PathBuf> {
    use std::io::Read;
    let mut text = String::new();
    let read = std::fs::File::open(state_dir.join(STRIPPED_RECORD))
        .and_then(|f| f.take(MAX_RECORD).read_to_string(&mut text).map(drop));
    if read.is_err() {
        return vec![];
    }
    text.lines().map(PathBuf::from).filter(|p| p.is_absolute()).collect()
}

/// Writes the state directory's record of stripped token configs (`STRIPPED_RECORD`) when
/// `now` differs from what it held: at most 256 paths, the ones still stripped. A record that
/// cannot be written costs only that memory (said in the log).
pub fn write_stripped_record(state_dir: &Path, before: &[PathBuf], now: &[PathBuf]) {
    let mut sorted: Vec<&PathBuf> = now.iter().take(256).collect();
    sorted.sort();
    sorted.dedup();
    let mut old: Vec<&PathBuf> = before.iter().collect();
    old.sort();
    old.dedup();
    if sorted == old {
        return;
    }
    let mut text = String::new();
    for p in sorted {
        if let Some(s) = p.to_str().filter(|s| !s.contains('\n')) {
            text.push_str(s);
            text.push('\n');
        }
    }
    let path = state_dir.join(STRIPPED_RECORD);
    if let Err(e) = agent_sandbox_sys::file::write_atomic(&path, text.as_bytes(), 0o600) {
        tracing::warn!("cannot record the stripped token configs in {}: {e}", path.display());
    }
}

impl UserConfigs {
    /// `home` is the canonical home; `named` the same home as the password database spells it
    /// (variables say `/home/u` where `/home` leads elsewhere).
    pub fn gather(home: &Path, named: &Path, env: &[(String, String)]) -> UserConfigs {
        let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty());
        let in_home = |p: PathBuf| match p.strip_prefix(named) {
            Ok(rest) if named != home => home.join(rest),
            _ => p,
        };
        let xdg = var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(in_home)
            .unwrap_or_else(|| home.join(".config"));
        let defaults = [xdg.join("git/config"), home.join(".gitconfig")];
        let global: Vec<(PathBuf, GitRole)> = match var("GIT_CONFIG_GLOBAL") {
            Some(g) => std::iter::once((in_home(PathBuf::from(g)), GitRole::Global))
                .chain(defaults.map(|d| (d, GitRole::Unread)))
                .collect(),
            None => defaults.map(|d| (d, GitRole::Global)).into(),
        };
        // Side by side: on a home on NFS each file is a few round trips to the server.
        let (ssh, git) = super::together(|| ssh_files(home), || git_files(global, home));
        UserConfigs { git, ssh, stripped_before: vec![] }
    }
}

/// The files, then what each includes, breadth first, each once.
fn git_files(top: Vec<(PathBuf, GitRole)>, home: &Path) -> Vec<GitConfigFile> {
    let mut queue: std::collections::VecDeque<(PathBuf, GitRole)> = top.into();
    let mut out: Vec<GitConfigFile> = vec![];
    while let Some((p, role)) = queue.pop_front() {
        if out.len() >= MAX_FILES {
            break;
        }
        let Ok(real) = std::fs::canonicalize(&p) else { continue };
        if out.iter().any(|f| f.path == real) {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&real) else { continue };
        if !meta.is_file() {
            continue;
        }
        let bytes = match meta.len() <= crate::gitconfig::MAX_CONFIG as u64 {
            true => std::fs::read(&real).ok(),
            false => None,
        };
        if let Some(b) = &bytes {
            let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
            for e in crate::gitconfig::parse(b).unwrap_or_default() {
                let include = e.key == "path" && matches!(e.section.as_str(), "include" | "includeif");
                let Some(v) = e.value.as_deref().filter(|_| include).and_then(|v| std::str::from_utf8(v).ok()) else {
                    continue;
                };
                queue.push_back((include_target(v, &dir, home), GitRole::Included));
            }
        }
        out.push(GitConfigFile { path: real, bytes, role });
    }
    out
}

/// Where git finds an included file: `~/` in the home, a relative path next to the file
/// that includes it.
pub fn include_target(v: &str, dir: &Path, home: &Path) -> PathBuf {
    match v.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None => dir.join(v),
    }
}

/// `~/.ssh/config` and what it includes.
fn ssh_files(home: &Path) -> Vec<(PathBuf, String)> {
    let ssh_dir = home.join(".ssh");
    let mut queue: std::collections::VecDeque<PathBuf> = [ssh_dir.join("config")].into();
    let mut out: Vec<(PathBuf, String)> = vec![];
    while let Some(p) = queue.pop_front() {
        if out.len() >= MAX_FILES {
            break;
        }
        if out.iter().any(|(f, _)| *f == p) {
            continue;
        }
        let Ok(f) = std::fs::File::open(&p) else { continue };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let mut text = Vec::new();
        if std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_SSH_CONFIG), &mut text).is_err() {
            continue;
        }
        let text = String::from_utf8_lossy(&text).into_owned();
        for line in text.lines() {
            let Some((keyword, args)) = ssh_line(line) else { continue };
            if !keyword.eq_ignore_ascii_case("include") {
                continue;
            }
            for a in args {
                let target = match a.strip_prefix("~/") {
                    Some(rest) => home.join(rest),
                    None => ssh_dir.join(&a),
                };
                queue.extend(expand_last(&target));
            }
        }
        out.push((p, text));
    }
    out
}

/// `dir/pattern` with `*` and `?` in the last component matched against the directory.
fn expand_last(p: &Path) -> Vec<PathBuf> {
    let s = p.to_string_lossy();
    if !crate::glob::has_glob(&s) {
        return vec![p.to_path_buf()];
    }
    let (Some(dir), Some(pat)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) else { return vec![] };
    if crate::glob::has_glob(&dir.to_string_lossy()) {
        return vec![];
    }
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_str().is_some_and(|n| crate::glob::glob_match(pat, n)))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `Keyword args` or `Keyword=args`, comments and blank lines skipped, quoted arguments
/// unquoted (ssh's own argv splitting).
pub fn ssh_line(line: &str) -> Option<(String, Vec<String>)> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return None;
    }
    let end = t.find(|c: char| c.is_whitespace() || c == '=').unwrap_or(t.len());
    let (keyword, rest) = t.split_at(end);
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('=').unwrap_or(rest);
    Some((keyword.to_string(), shell_words(rest)))
}

/// Words as a POSIX shell splits a simple command: blanks separate, quotes group, a
/// backslash escapes the next character outside single quotes.
pub fn shell_words(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur: Option<String> = None;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => out.extend(cur.take()),
            '\'' => {
                let w = cur.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = cur.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            '\\' => cur.get_or_insert_with(String::new).extend(chars.next()),
            c => cur.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(cur);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stripped_record_keeps_absolute_paths_of_one_line_each_and_is_written_only_when_it_changes() {
        let t = tempfile::tempdir().expect("tempdir");
        let (a, b) = (PathBuf::from("/h/.gitconfig"), PathBuf::from("/h/dots/git/config"));
        write_stripped_record(t.path(), &[], &[b.clone(), a.clone(), a.clone(), PathBuf::from("/h/x\ny")]);
        assert_eq!(read_stripped_record(t.path()), [a.clone(), b.clone()]);
        let record = t.path().join(STRIPPED_RECORD);
        std::fs::write(&record, "/h/.gitconfig\nrelative\n").expect("write");
        assert_eq!(read_stripped_record(t.path()), std::slice::from_ref(&a), "a relative path is nobody's");
        // What the record held before, as the launch read it: nothing to write.
        write_stripped_record(t.path(), &[b.clone(), a.clone()], &[a.clone(), b.clone()]);
        assert_eq!(std::fs::read_to_string(&record).expect("read"), "/h/.gitconfig\nrelative\n");
    }

    #[test]
    fn global_configs_their_includes_and_ssh_includes_are_read_once_each() {
        let t = tempfile::tempdir().expect("tempdir");
        let home = t.path();
        std::fs::create_dir_all(home.join(".config/git")).expect("mkdir");
        std::fs::create_dir_all(home.join(".ssh/conf.d")).expect("mkdir");
        std::fs::write(home.join(".gitconfig"), "[include]\n\tpath = .gitconfig.local\n\tpath = ~/.gitconfig\n")
            .expect("write");
        std::fs::write(home.join(".gitconfig.local"), "[credential]\n\thelper = store --file ~/c\n").expect("write");
        std::fs::write(home.join(".config/git/config"), "[user]\n\tname = u\n").expect("write");
        std::fs::write(home.join(".ssh/config"), "Include conf.d/*.conf ~/.ssh/extra\nHost x\n").expect("write");
        std::fs::write(home.join(".ssh/conf.d/a.conf"), "IdentityFile ~/k\n").expect("write");
        std::fs::write(home.join(".ssh/conf.d/b.txt"), "IdentityFile ~/no\n").expect("write");
        std::fs::write(home.join(".ssh/extra"), "IdentityFile ~/k2\n").expect("write");
        let c = UserConfigs::gather(home, home, &[]);
        let git: Vec<PathBuf> = c.git.iter().map(|f| f.path.strip_prefix(home).expect("in home").into()).collect();
        assert_eq!(git, vec![PathBuf::from(".config/git/config"), ".gitconfig".into(), ".gitconfig.local".into()]);
        let ssh: Vec<PathBuf> = c.ssh.iter().map(|(p, _)| p.strip_prefix(home).expect("in home").into()).collect();
        assert_eq!(ssh, vec![PathBuf::from(".ssh/config"), ".ssh/conf.d/a.conf".into(), ".ssh/extra".into()]);
        let moved = UserConfigs::gather(
            home,
            home,
            &[("GIT_CONFIG_GLOBAL".into(), home.join(".gitconfig.local").display().to_string())],
        );
        let roles: Vec<GitRole> = moved.git.iter().map(|f| f.role).collect();
        assert_eq!(
            roles,
            vec![GitRole::Global, GitRole::Unread, GitRole::Unread],
            "GIT_CONFIG_GLOBAL is git's only one"
        );
    }
}
