//! Paths that programs outside the jail run or load later but that no fixed name covers,
//! found at plan time: the project repository's hooks directory wherever `core.hooksPath`
//! puts it (husky's `.husky/_`, a team's `tools/hooks`), and the files the project's `.envrc`
//! loads (`dotenv`, `source_env`, `.`). They join the protected paths (`mounts::protect`).
//! Reads the host only through `HostFs` (bounded), decides nothing itself.

use crate::host::{HostFs, Kind};
use std::path::{Path, PathBuf};

/// A config larger than this is not read (git's own are a few hundred bytes).
const MAX_FILE: u64 = 1 << 20;
/// Includes followed from one config, at most (git stops at 10 too).
const MAX_DEPTH: usize = 10;

/// Every `core.hooksPath` the project's repository can take from its config files, the
/// user's and the system's, resolved as git resolves it (`~/`, relative to the work tree):
/// all of them, not only the one git would pick, so that no order of includes or conditions
/// read differently here leaves the one in force writable. The repository is the one the
/// project lies in (its `.git` found walking up from the project to `/`).
pub fn hooks_dirs(fs: &dyn HostFs, home: &Path, xdg_config: Option<&Path>, project: &Path) -> Vec<PathBuf> {
    let mut configs: Vec<PathBuf> = vec![];
    let mut top = None;
    for dir in project.ancestors() {
        let dotgit = dir.join(".git");
        let git_dir = match fs.kind(&dotgit) {
            Some(Kind::Dir) => Some(dotgit),
            Some(Kind::File) => gitfile_target(fs, &dotgit),
            _ => None,
        };
        if let Some(g) = git_dir {
            let common = read(fs, &g.join("commondir"))
                .map(|c| String::from_utf8_lossy(&c).trim_end_matches(['\n', '\r']).to_string())
                .filter(|c| !c.is_empty())
                .and_then(|c| normalize(&g.join(c)))
                .unwrap_or_else(|| g.clone());
            configs.push(common.join("config"));
            configs.push(g.join("config.worktree"));
            top = Some(dir.to_path_buf());
            break;
        }
    }
    let Some(top) = top else { return vec![] };
    configs.push(home.join(".gitconfig"));
    configs.push(xdg_config.map(Path::to_path_buf).unwrap_or_else(|| home.join(".config")).join("git/config"));
    configs.push(PathBuf::from("/etc/gitconfig"));
    let mut values = vec![];
    for c in configs {
        collect(fs, &c, home, 0, &mut values);
    }
    let mut out: Vec<PathBuf> = vec![];
    for v in values {
        let p = if let Some(rest) = v.strip_prefix("~/") {
            home.join(rest)
        } else if Path::new(&v).is_absolute() {
            PathBuf::from(&v)
        } else {
            top.join(&v)
        };
        if let Some(p) = normalize(&p) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// `.git` as a file (`gitdir: PATH`, a worktree's or a submodule's): where it points.
fn gitfile_target(fs: &dyn HostFs, dotgit: &Path) -> Option<PathBuf> {
    let text = read(fs, dotgit)?;
    let text = String::from_utf8_lossy(&text);
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let p = Path::new(target);
    Some(if p.is_absolute() { p.to_path_buf() } else { dotgit.parent()?.join(p) })
}

fn read(fs: &dyn HostFs, p: &Path) -> Option<Vec<u8>> {
    fs.read_small(p, MAX_FILE)
}

/// The hooksPath values of one config file and of the files it includes.
fn collect(fs: &dyn HostFs, file: &Path, home: &Path, depth: usize, out: &mut Vec<String>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Some(text) = read(fs, file) else { return };
    for (section, key, value) in entries(&String::from_utf8_lossy(&text)) {
        if section == "core" && key == "hookspath" {
            out.push(value);
        } else if (section == "include" || section.starts_with("includeif")) && key == "path" {
            let inc = if let Some(rest) = value.strip_prefix("~/") {
                home.join(rest)
            } else if Path::new(&value).is_absolute() {
                PathBuf::from(&value)
            } else {
                file.parent().map(|d| d.join(&value)).unwrap_or_default()
            };
            collect(fs, &inc, home, depth + 1, out);
        }
    }
}

/// `(section, key, value)` of each entry, section and key lower-cased (a subsection is kept
/// in the section's name: `includeif "gitdir:~/w/"`). Lenient: a line it cannot read is
/// skipped.
fn entries(text: &str) -> Vec<(String, String, String)> {
    let mut out = vec![];
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut rest = line.trim_start();
        if rest.starts_with('[') {
            let Some(end) = rest.find(']') else { continue };
            let head = &rest[1..end];
            section = match head.split_once(char::is_whitespace) {
                Some((name, sub)) => format!("{}{}", name.to_ascii_lowercase(), sub.trim()),
                None => head.to_ascii_lowercase(),
            };
            rest = rest[end + 1..].trim_start();
        }
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let (key, raw) = match rest.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), v.to_string()),
            None => (rest.trim().to_ascii_lowercase(), String::new()),
        };
        let mut raw = raw;
        // A value continued on the next line.
        while raw.trim_end().ends_with('\\') && !raw.trim_end().ends_with("\\\\") {
            raw = raw.trim_end().trim_end_matches('\\').to_string();
            match lines.next() {
                Some(next) => raw.push_str(next),
                None => break,
            }
        }
        out.push((section.clone(), key, value(&raw)));
    }
    out
}

/// A value as git reads it: quotes joined, escapes taken, a comment outside quotes cut,
/// surrounding blanks trimmed.
fn value(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('b') => {
                    out.pop();
                }
                Some(o) => out.push(o),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// `p` without `.` and `..` (lexically), absolute; None if it climbs above `/`.
fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            std::path::Component::ParentDir if !out.pop() => return None,
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    Some(out)
}

/// The files the project's `.envrc` loads into the user's shell when direnv runs it outside:
/// `dotenv` and `dotenv_if_exists` (`.env` when no file is named), `source_env` and
/// `source_env_if_exists`, `source` and `.` of a path inside the project. Only plain words
/// are read (no variables, no globs): what is computed at run time is not found.
pub fn envrc_loads(fs: &dyn HostFs, project: &Path) -> Vec<PathBuf> {
    let Some(text) = read(fs, &project.join(".envrc")) else { return vec![] };
    let mut out: Vec<PathBuf> = vec![];
    for line in String::from_utf8_lossy(&text).lines() {
        let line = line.split('#').next().unwrap_or("");
        for cmd in line.split([';', '&', '|']) {
            let words: Vec<&str> = cmd.split_whitespace().collect();
            let Some((first, args)) = words.split_first() else { continue };
            let named = args.iter().find(|a| !a.starts_with('-')).map(|a| a.trim_matches(['"', '\'']));
            let file = match (*first, named) {
                ("dotenv" | "dotenv_if_exists", None) => ".env",
                ("dotenv" | "dotenv_if_exists" | "source_env" | "source_env_if_exists" | "source" | ".", Some(f)) => f,
                _ => continue,
            };
            if file.is_empty() || file.contains('$') || crate::glob::has_glob(file) {
                continue;
            }
            let p = if Path::new(file).is_absolute() { PathBuf::from(file) } else { project.join(file) };
            // `source_env DIR` loads DIR/.envrc.
            let p = if fs.kind(&p) == Some(Kind::Dir) { p.join(".envrc") } else { p };
            if let Some(p) = normalize(&p).filter(|p| p.starts_with(project) && p != project) {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::FakeFs;

    #[test]
    fn every_hooks_path_of_the_repository_the_user_and_their_includes_is_found() {
        let fs = FakeFs::default()
            .dir("/home/u/p/.git")
            .content("/home/u/p/.git/config", "[core]\n\tbare = false\n[core] hooksPath = .husky/_\n")
            .content("/home/u/.gitconfig", "[include]\n\tpath = more.inc\n[user]\n\tname = U\n")
            .content("/home/u/more.inc", "[CORE]\n\tHooksPath = \"~/hooks\" # mine\n")
            .content("/home/u/.config/git/config", "[includeIf \"gitdir:~/p/\"]\n\tpath = /home/u/p/tools/x.inc\n")
            .content("/home/u/p/tools/x.inc", "[core]\nhooksPath=tools/../githooks\n");
        let dirs = hooks_dirs(&fs, Path::new("/home/u"), None, Path::new("/home/u/p"));
        assert_eq!(
            dirs,
            vec![
                PathBuf::from("/home/u/p/.husky/_"),
                PathBuf::from("/home/u/hooks"),
                PathBuf::from("/home/u/p/githooks")
            ]
        );
    }

    /// A project in a subdirectory of a repository, and a worktree's `.git` file with its
    /// `commondir`: the config read is the repository's, paths relative to its top.
    #[test]
    fn the_repository_is_found_above_the_project_and_through_a_gitfile() {
        let fs = FakeFs::default()
            .dir("/home/u/mono/.git")
            .content("/home/u/mono/.git/config", "[core]\n\thooksPath = web/.husky/_\n")
            .dir("/home/u/mono/web");
        let dirs = hooks_dirs(&fs, Path::new("/home/u"), None, Path::new("/home/u/mono/web"));
        assert_eq!(dirs, vec![PathBuf::from("/home/u/mono/web/.husky/_")]);
        let fs = FakeFs::default()
            .content("/home/u/wt/.git", "gitdir: /home/u/main/.git/worktrees/wt\n")
            .content("/home/u/main/.git/worktrees/wt/commondir", "../..\n")
            .content("/home/u/main/.git/config", "[core]\n\thooksPath = hooks-here\n");
        let dirs = hooks_dirs(&fs, Path::new("/home/u"), None, Path::new("/home/u/wt"));
        assert_eq!(dirs, vec![PathBuf::from("/home/u/wt/hooks-here")]);
        let none = FakeFs::default().dir("/home/u/p");
        assert!(hooks_dirs(&none, Path::new("/home/u"), None, Path::new("/home/u/p")).is_empty());
    }

    #[test]
    fn the_files_an_envrc_loads_are_found_and_nothing_outside_the_project() {
        let fs = FakeFs::default().dir("/p/sub").content(
            "/p/.envrc",
            "dotenv\ndotenv_if_exists .env.local # mine\nsource_env sub\n. ./scripts/env.sh; export X=1\n\
             source_env ../elsewhere\ndotenv $HOME/x\nuse flake\n",
        );
        assert_eq!(
            envrc_loads(&fs, Path::new("/p")),
            vec![
                PathBuf::from("/p/.env"),
                PathBuf::from("/p/.env.local"),
                PathBuf::from("/p/sub/.envrc"),
                PathBuf::from("/p/scripts/env.sh")
            ]
        );
        assert!(envrc_loads(&FakeFs::default().dir("/p"), Path::new("/p")).is_empty());
    }
}
