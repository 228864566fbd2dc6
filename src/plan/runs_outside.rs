//! Paths that programs outside the jail run or load later but that no fixed name covers,
//! found at plan time: the project repository's hooks directory wherever `core.hooksPath`
//! puts it (husky's `.husky/_` with the scripts in `.husky/` it runs, a team's `tools/hooks`),
//! the files the repository's config includes (`include.path`), the project files hooks and
//! hook managers' configs name, and what the project's `.envrc` loads or puts on `PATH`
//! (`dotenv`, `source_env`, `.`, `PATH_add`, `layout`, `use`...). They join the protected paths
//! (`mounts::protect_found`). Reads the host only through `HostFs` (bounded), decides nothing
//! itself.

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
/// Where a hooks directory is husky's `_` (its `h` runs `../<hook>`), its parent too.
pub fn hooks_dirs(fs: &dyn HostFs, home: &Path, xdg_config: Option<&Path>, project: &Path) -> Vec<PathBuf> {
    git_found(fs, home, xdg_config, project).hooks
}

/// What the repository's configs make git run or read: `hooks` (see `hooks_dirs`) and the
/// files they include (`include.path`, `includeIf.*.path`, each as git resolves it), which
/// git reads like the config itself (`core.fsmonitor` in an included `../.gitconfig` runs at
/// the next `git status`). `top` is the repository's work tree.
#[derive(Debug, Default, PartialEq)]
pub struct GitFound {
    pub hooks: Vec<PathBuf>,
    pub includes: Vec<PathBuf>,
    pub top: Option<PathBuf>,
    /// The repository's (common) git directory.
    pub git_dir: Option<PathBuf>,
}

pub fn git_found(fs: &dyn HostFs, home: &Path, xdg_config: Option<&Path>, project: &Path) -> GitFound {
    let mut configs: Vec<PathBuf> = vec![];
    let mut top = None;
    let mut common_dir = None;
    for dir in project.ancestors() {
        let dotgit = dir.join(".git");
        let git_dir = match fs.kind(&dotgit) {
            Some(Kind::Dir) => Some(dotgit),
            Some(Kind::File) => gitfile_target(fs, &dotgit),
            _ => None,
        };
        if let Some(g) = git_dir {
            // Its names asked about (`commondir`, `config`, `config.worktree`, `hooks`) from one
            // listing: a round trip each on NFS otherwise.
            fs.answer_from_listing(&g);
            let common = read(fs, &g.join("commondir"))
                .map(|c| String::from_utf8_lossy(&c).trim_end_matches(['\n', '\r']).to_string())
                .filter(|c| !c.is_empty())
                .and_then(|c| normalize(&g.join(c)))
                .unwrap_or_else(|| g.clone());
            configs.push(common.join("config"));
            configs.push(g.join("config.worktree"));
            top = Some(dir.to_path_buf());
            common_dir = Some(common);
            break;
        }
    }
    let Some(top) = top else { return GitFound::default() };
    configs.push(home.join(".gitconfig"));
    configs.push(xdg_config.map(Path::to_path_buf).unwrap_or_else(|| home.join(".config")).join("git/config"));
    configs.push(PathBuf::from("/etc/gitconfig"));
    // Read side by side with the hooks directory's listing (what `hook_named` asks next).
    let hooks_dir: Vec<PathBuf> = common_dir.iter().map(|c| c.join("hooks")).collect();
    fs.prefetch_files_and_dirs(&configs, MAX_FILE, &hooks_dir);
    let mut values = vec![];
    let mut includes = vec![];
    for c in configs {
        collect(fs, &c, home, 0, &mut values, &mut includes);
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
            // husky (v9): `<dir>/_/<hook>` sources `_/h`, which runs `<dir>/<hook>`.
            let parent = p.parent().filter(|_| p.file_name().is_some_and(|n| n == "_")).map(Path::to_path_buf);
            for p in std::iter::once(p).chain(parent) {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    let mut inc: Vec<PathBuf> = vec![];
    for p in includes.into_iter().filter_map(|p| normalize(&p)) {
        if !inc.contains(&p) {
            inc.push(p);
        }
    }
    GitFound { hooks: out, includes: inc, top: Some(top), git_dir: common_dir }
}

/// Directories looked at below a project for repositories and direnv directories of their
/// own, at most: past them, deeper ones are not.
pub const MAX_NESTED_DIRS: usize = 512;

/// Trees that hold dependencies or build output, never a workspace's repositories: not
/// walked.
const NOT_WORKSPACES: &[&str] = &["node_modules", "target", "venv", "__pycache__", "build", "dist", "site-packages"];

/// The directories one or two levels below the project (a workspace of clones, `~/work/sub`,
/// `~/work/group/sub`) that hold a `.git` or an `.envrc` of their own: what git and direnv
/// run there outside is read as the project's is (outside review of issue 32, R2). Hidden
/// directories and dependency trees are not walked; at most `MAX_NESTED_DIRS` are looked at.
/// Also where the walk stopped, if it did.
pub fn nested_dirs(fs: &dyn HostFs, project: &Path) -> (Vec<PathBuf>, Option<PathBuf>) {
    let mut out = vec![];
    let mut looked = 0;
    let mut stopped = None;
    let mut level: Vec<PathBuf> = vec![project.to_path_buf()];
    for depth in 0..2 {
        let mut here = vec![];
        'dirs: for d in &level {
            for name in fs.read_dir(d).iter() {
                let n = name.to_string_lossy();
                if n.starts_with('.') || NOT_WORKSPACES.contains(&n.as_ref()) {
                    continue;
                }
                let p = d.join(name);
                if looked >= MAX_NESTED_DIRS {
                    stopped = Some(p);
                    break 'dirs;
                }
                if fs.kind(&p) != Some(Kind::Dir) {
                    continue;
                }
                looked += 1;
                here.push(p);
            }
        }
        // The level's requests side by side (a round trip each on a network filesystem): a
        // directory the next level walks is listed, and its listing answers for its `.git`
        // and `.envrc`; the last level's are asked for by name.
        let last = depth == 1 || stopped.is_some();
        if last {
            let probes: Vec<PathBuf> = here.iter().flat_map(|p| [p.join(".git"), p.join(".envrc")]).collect();
            fs.prefetch_kinds(&probes);
        } else {
            fs.prefetch_dirs(&here);
        }
        for p in &here {
            let names: std::sync::Arc<[std::ffi::OsString]> = if last { Vec::new().into() } else { fs.read_dir(p) };
            let listed = |n: &str| names.binary_search_by(|x| x.as_os_str().cmp(std::ffi::OsStr::new(n))).is_ok();
            // An empty or unreadable directory (a jail can leave one `chmod 0311`) is asked
            // name by name.
            let (git, envrc) = if names.is_empty() {
                (fs.kind(&p.join(".git")).is_some(), fs.kind(&p.join(".envrc")) == Some(Kind::File))
            } else {
                (listed(".git"), listed(".envrc") && fs.kind(&p.join(".envrc")) == Some(Kind::File))
            };
            if git || envrc {
                out.push(p.clone());
            }
        }
        if stopped.is_some() {
            return (out, stopped);
        }
        level = here;
    }
    (out, None)
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

/// The hooksPath values of one config file and of the files it includes, and those files
/// (also one that does not exist yet: git reads it once it does).
fn collect(fs: &dyn HostFs, file: &Path, home: &Path, depth: usize, out: &mut Vec<String>, incs: &mut Vec<PathBuf>) {
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
            let Some(inc) = normalize(&inc).filter(|_| !inc.as_os_str().is_empty()) else { continue };
            incs.push(inc.clone());
            collect(fs, &inc, home, depth + 1, out, incs);
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

/// Words that start a command without being one (`if [ -f x ]; then source x; fi`).
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "do", "while", "until", "!", "time", "exec", "eval", "command", "builtin", "{", "}",
];

/// Variables whose value is a list of directories a shell or interpreter runs from.
const PATH_VARS: &[&str] = &["PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONSTARTUP", "BASH_ENV", "ENV"];

/// What the project's `.envrc` loads into the user's shell, or puts first on its `PATH`, when
/// direnv runs it outside (direnv refuses a changed `.envrc`, not a changed file it loads):
/// `(path, is a directory)`. An `.envrc` is code, so the reading is conservative: a word it
/// cannot follow means more is protected, never less.
/// * loads: `dotenv` and `dotenv_if_exists` (`.env` when no file is named), `source_env`
///   (a directory's `.envrc`), `source`, `.`, `watch_file`, `watch_dir`, in any position of
///   a compound command (`if ...; then source x; fi`, `a && . b`);
/// * directories: `PATH_add`, `MANPATH_add`, `path_add VAR DIR`, `load_prefix`, an
///   assignment to `PATH`-like variables, the `bin/` of a sourced `bin/activate`; `layout`
///   (`.direnv/`; `layout node`: `node_modules/.bin`); `use` (`.direnv/`, where nix-direnv
///   keeps the environment it loads, and for nix and flakes their files);
/// * `$PWD`, `${PWD}`, `$(pwd)` are the project; a word behind another variable is taken
///   for a path in the project when what follows the variable exists there; a glob protects
///   its directory; any other command's arguments, and a command named by a path, are
///   protected when they name something in the project.
///
/// Paths outside the project, and the project itself, are left out.
pub fn envrc_loads(fs: &dyn HostFs, project: &Path) -> Vec<(PathBuf, bool)> {
    let Some(text) = read(fs, &project.join(".envrc")) else { return vec![] };
    let text = String::from_utf8_lossy(&text).replace("\\\n", " ");
    let mut found = Found { fs, project, out: vec![] };
    for line in text.lines() {
        let line = uncomment(line);
        let line = line.replace("${PWD}", ".").replace("$PWD", ".").replace("$(pwd)", ".").replace("`pwd`", ".");
        for cmd in line.split([';', '&', '|', '(', ')', '`']) {
            let words: Vec<String> = cmd.split_whitespace().map(|w| w.trim_matches(['"', '\'']).to_string()).collect();
            let words = found.skip_prefix(&words);
            let Some((first, args)) = words.split_first() else { continue };
            let named: Vec<&str> = args.iter().map(String::as_str).filter(|a| !a.starts_with('-')).collect();
            found.command(first, &named);
        }
    }
    found.out
}

/// A line without its comment (a `#` that starts a word, outside quotes).
fn uncomment(line: &str) -> &str {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

fn is_name(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') && !v.as_bytes()[0].is_ascii_digit()
}

/// The paths an `.envrc` names, as they are found.
struct Found<'a> {
    fs: &'a dyn HostFs,
    project: &'a Path,
    out: Vec<(PathBuf, bool)>,
}

impl Found<'_> {
    /// `word` as a path in the project: `dir` if it names a directory to protect whole;
    /// `missing` if it is protected even where nothing is there yet (what the `.envrc` loads
    /// once it appears), else only an existing one.
    fn word(&mut self, word: &str, dir: bool, missing: bool) {
        let word = word.trim_matches(['"', '\'']);
        if word.is_empty() || word.contains("://") {
            return;
        }
        if let Some(i) = word.find('$') {
            // Behind a variable it cannot resolve: the rest, where it exists in the project.
            let rest = &word[i..];
            let Some(slash) = rest.find('/') else { return };
            let tail = rest[slash..].trim_start_matches('/');
            if !tail.is_empty() && !tail.contains('$') {
                self.word(tail, dir, false);
            }
            return;
        }
        let p = if Path::new(word).is_absolute() { PathBuf::from(word) } else { self.project.join(word) };
        let Some(p) = normalize(&p).filter(|p| p.starts_with(self.project) && p != self.project) else { return };
        if crate::glob::has_glob(&p.to_string_lossy()) {
            // Whatever comes to match it later: its whole directory (the first without a glob).
            let mut d = p.as_path();
            while crate::glob::has_glob(&d.to_string_lossy()) {
                let Some(up) = d.parent() else { return };
                d = up;
            }
            if d != self.project && d.starts_with(self.project) {
                self.push(d.to_path_buf(), true);
            }
            return;
        }
        match self.fs.kind(&p) {
            // `source_env DIR` loads DIR/.envrc.
            Some(Kind::Dir) if !dir => self.push(p.join(".envrc"), false),
            Some(k) => self.push(p, k == Kind::Dir),
            // Never a placeholder in `node_modules` (`layout node`, `PATH_add node_modules/.bin`):
            // a read-only one would stop every package install inside (docs name the limit).
            None if missing && !p.iter().any(|c| c == "node_modules") => self.push(p, dir),
            None => {}
        }
    }

    /// `word` where it names an existing file of the project (not a directory).
    fn file(&mut self, word: &str) {
        let word = word.trim_matches(['"', '\'']);
        let word = match word.find('$') {
            // Behind a variable: the rest, as in `word`.
            Some(i) => match word[i..].find('/') {
                Some(slash) => word[i + slash..].trim_start_matches('/'),
                None => return,
            },
            None => word,
        };
        if word.is_empty() || word.contains('$') || word.contains("://") || crate::glob::has_glob(word) {
            return;
        }
        let p = if Path::new(word).is_absolute() { PathBuf::from(word) } else { self.project.join(word) };
        if let Some(p) = normalize(&p).filter(|p| p.starts_with(self.project)) {
            if self.fs.kind(&p) == Some(Kind::File) {
                self.push(p, false);
            }
        }
    }

    fn push(&mut self, p: PathBuf, dir: bool) {
        if !self.out.iter().any(|(q, _)| *q == p) {
            self.out.push((p, dir));
        }
    }

    /// The command's words after the keywords and assignments before it (`if`, `A=b cmd`);
    /// an assignment to a `PATH`-like variable protects its directories.
    fn skip_prefix<'w>(&mut self, mut words: &'w [String]) -> &'w [String] {
        while let Some((first, rest)) = words.split_first() {
            if KEYWORDS.contains(&first.as_str()) || first.ends_with('$') {
                words = rest;
            } else if let Some((var, value)) = first.split_once('=').filter(|(v, _)| is_name(v)) {
                if PATH_VARS.contains(&var) {
                    for d in value.split(':') {
                        self.word(d, true, true);
                    }
                }
                words = rest;
            } else {
                break;
            }
        }
        words
    }

    /// What one command loads or puts on a path, by its name; `named` are its arguments that
    /// are not options.
    fn command(&mut self, first: &str, named: &[&str]) {
        match first {
            "dotenv" | "dotenv_if_exists" if named.is_empty() => self.word(".env", false, true),
            "dotenv" | "dotenv_if_exists" | "watch_file" => named.iter().for_each(|f| self.word(f, false, true)),
            "source_env" | "source_env_if_exists" | "source" | "." => {
                if let Some(f) = named.first() {
                    if f.ends_with("bin/activate") {
                        self.word(f.trim_end_matches("activate"), true, true);
                    }
                    self.word(f, false, true);
                    named[1..].iter().for_each(|a| self.word(a, false, false));
                }
            }
            "PATH_add" | "MANPATH_add" | "watch_dir" | "load_prefix" => {
                named.iter().for_each(|d| self.word(d, true, true))
            }
            "path_add" | "PATH_rm" => named.iter().skip(1).for_each(|d| self.word(d, true, true)),
            "export" | "local" | "declare" | "readonly" => {
                for a in named {
                    if let Some((_, value)) = a.split_once('=').filter(|(v, _)| PATH_VARS.contains(v)) {
                        value.split(':').for_each(|d| self.word(d, true, true));
                    }
                }
            }
            "layout" => {
                if named.first().is_some_and(|l| *l == "node") {
                    self.word("node_modules/.bin", true, true);
                }
                self.word(".direnv", true, true);
            }
            "use" => self.use_environment(named),
            _ => {
                // Another command: what it runs, and what it is given, where that is in
                // the project (`./scripts/setup`, `bash tools/env.sh`, `eval "$(cat x)"`).
                // Files only: a directory named there (`mkdir -p tmp`) is data.
                if first.contains('/') {
                    self.word(first, false, true);
                }
                named.iter().for_each(|a| self.file(a));
            }
        }
    }

    /// `use nix`, `use flake`, `use OTHER`: `.direnv/` where nix-direnv keeps what it loads,
    /// and the files it reads.
    fn use_environment(&mut self, named: &[&str]) {
        self.word(".direnv", true, true);
        match named.first().copied() {
            Some("nix") => {
                for f in ["shell.nix", "default.nix"] {
                    self.word(f, false, false);
                }
                named[1..].iter().for_each(|a| self.word(a, false, false));
            }
            // Not made when missing: nix writes flake.lock outside, and an empty
            // one would stop it.
            Some("flake") => {
                for f in ["flake.nix", "flake.lock"] {
                    self.word(f, false, false);
                }
            }
            _ => named.iter().skip(1).for_each(|a| self.word(a, false, false)),
        }
    }
}

/// The files in the project that the hooks in `hooks` (each a directory of hook scripts, or
/// a hook manager's config: lefthook's `run:`/`rc:`/`extends:`, pre-commit's `entry:` of a
/// local hook) name: every word that is a path to an existing entry of the project, taken
/// relative to the repository's work tree `top` and to the file's own directory, that is a
/// file. What a hook runs through a tool (`npx lint-staged`, `make lint`) is project code, not
/// found here.
pub fn hook_named(fs: &dyn HostFs, hooks: &[PathBuf], top: &Path, project: &Path) -> Vec<(PathBuf, bool)> {
    let mut files: Vec<PathBuf> = vec![];
    for h in hooks {
        match fs.kind(h) {
            Some(Kind::Dir) => {
                files.extend(fs.read_dir(h).iter().take(MAX_HOOK_FILES).map(|n| h.join(n)));
            }
            Some(Kind::File) => files.push(h.clone()),
            _ => {}
        }
    }
    let mut out: Vec<(PathBuf, bool)> = vec![];
    for f in files {
        // git's own samples name nothing of the project.
        if f.extension().is_some_and(|e| e == "sample") || fs.kind(&f) != Some(Kind::File) {
            continue;
        }
        let Some(text) = read(fs, &f) else { continue };
        let here = f.parent().unwrap_or(top).to_path_buf();
        let text = String::from_utf8_lossy(&text);
        let words = text.split(|c: char| c.is_whitespace() || "\"'`;&|()<>=,[]{}".contains(c));
        for w in words.filter(|w| w.contains('/') && !w.contains("://") && !w.starts_with('-')) {
            let w = w.trim_end_matches(':');
            // node_modules is what package managers write: project code (docs).
            if w.contains('$') || crate::glob::has_glob(w) || w.split('/').any(|c| c == "node_modules") {
                continue;
            }
            for base in [top, here.as_path()] {
                let p = if Path::new(w).is_absolute() { PathBuf::from(w) } else { base.join(w) };
                let Some(p) = normalize(&p).filter(|p| p.starts_with(project) && p != project) else { continue };
                // Files only: a directory a config names (lefthook's `root: web/`, pre-commit's
                // `exclude: docs/`) is where the hook works, not what it runs.
                if fs.kind(&p) == Some(Kind::File) && !out.iter().any(|(q, _)| *q == p) {
                    out.push((p, false));
                }
            }
        }
    }
    out
}

/// Entries of the project repository's own config (and `config.worktree`) that carry a
/// credential the jail can read there: a remote URL with a password or a token in it, an
/// `http.extraHeader` (actions/checkout's `AUTHORIZATION: basic ...`). Their names only.
pub fn repo_credentials(fs: &dyn HostFs, git_dir: &Path) -> Vec<String> {
    let mut out = vec![];
    for f in ["config", "config.worktree"] {
        let Some(text) = read(fs, &git_dir.join(f)) else { continue };
        for (section, key, value) in entries(&String::from_utf8_lossy(&text)) {
            let name = format!("{section}.{key}");
            let header = section.starts_with("http") && key == "extraheader";
            if (header || url_credential(&value)) && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// A URL whose user part holds a password (`user:pw@`) or is itself a token (`ghp_...@`,
/// `x-access-token:...@`): 20 characters or more.
fn url_credential(v: &str) -> bool {
    let Some((_, rest)) = v.split_once("://") else { return false };
    let authority = rest.split('/').next().unwrap_or("");
    let Some((user, _)) = authority.rsplit_once('@') else { return false };
    user.contains(':') || user.len() >= 20
}

/// Hook scripts read in one hooks directory, at most.
const MAX_HOOK_FILES: usize = 128;

/// The hook managers' configs at the top of a repository (`top`) whose commands name
/// project files: lefthook's (every name it reads) and pre-commit's.
pub fn hook_manager_configs(fs: &dyn HostFs, top: &Path) -> Vec<PathBuf> {
    // The names the directories hold (read once per plan, cached), not 40 lookups.
    let mut out = vec![];
    for dir in [top.to_path_buf(), top.join(".config")] {
        for name in fs.read_dir(&dir).iter() {
            let Some(n) = name.to_str() else { continue };
            let lefthook = n.rsplit_once('.').is_some_and(|(stem, ext)| {
                ["lefthook", ".lefthook", "lefthook-local", ".lefthook-local"].contains(&stem)
                    && ["yml", "yaml", "toml", "json", "jsonc"].contains(&ext)
            });
            let pre_commit = dir == top && (n == ".pre-commit-config.yaml" || n == ".pre-commit-config.yml");
            if (lefthook || pre_commit) && fs.kind(&dir.join(n)) == Some(Kind::File) {
                out.push(dir.join(n));
            }
        }
    }
    out.sort();
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
                PathBuf::from("/home/u/p/.husky"),
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
        assert_eq!(dirs, vec![PathBuf::from("/home/u/mono/web/.husky/_"), PathBuf::from("/home/u/mono/web/.husky")]);
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
             source_env ../elsewhere\ndotenv $HOME/x\n",
        );
        assert_eq!(
            files(envrc_loads(&fs, Path::new("/p"))),
            ["/p/.env", "/p/.env.local", "/p/sub/.envrc", "/p/scripts/env.sh"]
        );
        assert!(envrc_loads(&FakeFs::default().dir("/p"), Path::new("/p")).is_empty());
    }

    fn files(v: Vec<(PathBuf, bool)>) -> Vec<String> {
        v.into_iter().map(|(p, d)| format!("{}{}", p.display(), if d { "/" } else { "" })).collect()
    }

    /// Red team 32, F6: the forms the reader missed, each alone, and what it protects.
    #[test]
    fn every_form_of_loading_in_an_envrc_protects_what_it_loads() {
        let cases: &[(&str, &[&str])] = &[
            ("source \"$PWD/scripts/env.sh\"\n", &["/p/scripts/env.sh"]),
            ("source ${PWD}/a.sh\n", &["/p/a.sh"]),
            ("source \"$(pwd)/b.sh\"\n", &["/p/b.sh"]),
            ("if [ -f .envrc.local ]; then source .envrc.local; fi\n", &["/p/.envrc.local"]),
            ("[ -f x.sh ] && . ./x.sh\n", &["/p/x.sh"]),
            ("while false; do source_env_if_exists .envrc.private; done\n", &["/p/.envrc.private"]),
            ("PATH_add bin\n", &["/p/bin/"]),
            ("PATH_add \"$PWD/tools\" node_modules/.bin\n", &["/p/tools/"]),
            ("path_add PYTHONPATH lib\n", &["/p/lib/"]),
            ("MANPATH_add man\n", &["/p/man/"]),
            ("load_prefix vendor/prefix\n", &["/p/vendor/prefix/"]),
            ("export PATH=$PWD/sbin:$PATH\n", &["/p/sbin/"]),
            ("PATH=./xbin:$PATH\n", &["/p/xbin/"]),
            ("source_env sub\n", &["/p/sub/.envrc"]),
            ("dotenv .env.dev\n", &["/p/.env.dev"]),
            ("watch_file shell-env.sh\n", &["/p/shell-env.sh"]),
            ("layout python3\n", &["/p/.direnv/"]),
            ("layout node\n", &["/p/.direnv/"]),
            ("use nix\n", &["/p/.direnv/", "/p/shell.nix"]),
            ("use flake\n", &["/p/.direnv/", "/p/flake.nix"]),
            ("source .venv/bin/activate\n", &["/p/.venv/bin/", "/p/.venv/bin/activate"]),
            ("source scripts/*.sh\n", &["/p/scripts/"]),
            ("source \"$ROOT/scripts/env.sh\"\n", &["/p/scripts/env.sh"]),
            ("./tools/setup --quiet\n", &["/p/tools/setup"]),
            ("eval \"$(cat conf/env)\"\n", &["/p/conf/env"]),
            ("mkdir -p scripts sub\n", &[]),
            ("source \\\n  cont.sh\n", &["/p/cont.sh"]),
            ("echo '#' ; source quoted.sh\n", &["/p/quoted.sh"]),
            ("source_up\nsource /etc/profile\nsource ../x.sh\nPATH_add .\n", &[]),
        ];
        for (envrc, want) in cases {
            let fs = FakeFs::default()
                .dir("/p/sub")
                .dir("/p/scripts")
                .file("/p/scripts/env.sh")
                .file("/p/shell.nix")
                .file("/p/flake.nix")
                .dir("/p/.venv/bin")
                .file("/p/.venv/bin/activate")
                .file("/p/tools/setup")
                .file("/p/conf/env")
                .content("/p/.envrc", envrc);
            assert_eq!(files(envrc_loads(&fs, Path::new("/p"))), *want, "{envrc}");
        }
    }

    /// Red team 32, F11 and F15: husky's `_` protects its parent (the scripts `_/h` runs),
    /// and the files the configs include are found (also one that does not exist yet).
    #[test]
    fn huskys_scripts_and_the_files_a_config_includes_are_found() {
        let fs = FakeFs::default()
            .dir("/home/u/mono/.git")
            .content(
                "/home/u/mono/.git/config",
                "[core]\n\thooksPath = web/.husky/_\n[include]\n\tpath = ../.gitconfig\n",
            )
            .content("/home/u/mono/.gitconfig", "[includeIf \"gitdir:~/mono/\"]\n\tpath = tools/more.inc\n")
            .content("/home/u/.gitconfig", "[include]\n\tpath = ~/mono/team.inc\n");
        let g = git_found(&fs, Path::new("/home/u"), None, Path::new("/home/u/mono"));
        assert_eq!(g.hooks, [PathBuf::from("/home/u/mono/web/.husky/_"), PathBuf::from("/home/u/mono/web/.husky")]);
        assert_eq!(
            g.includes,
            [
                PathBuf::from("/home/u/mono/.gitconfig"),
                PathBuf::from("/home/u/mono/tools/more.inc"),
                PathBuf::from("/home/u/mono/team.inc")
            ]
        );
        assert_eq!(g.git_dir, Some(PathBuf::from("/home/u/mono/.git")));
    }

    #[test]
    fn what_hooks_and_hook_managers_configs_name_in_the_project_is_found() {
        let fs = FakeFs::default()
            .content("/p/.git/hooks/pre-commit", "#!/bin/sh\nexec ./scripts/lint.sh \"$@\"\n")
            .content(
                "/p/lefthook-local.yml",
                "pre-commit:\n  commands:\n    a:\n      run: tools/check.py {staged_files}\n",
            )
            .content(
                "/p/.pre-commit-config.yaml",
                "- repo: local\n  hooks:\n  - id: x\n    entry: bin/x.sh\n    exclude: docs/\n",
            )
            .dir("/p/docs")
            .content("/p/.git/hooks/pre-push.sample", "cat scripts/lint.sh docs/x\n")
            .file("/p/scripts/lint.sh")
            .file("/p/tools/check.py")
            .file("/p/bin/x.sh")
            .file("/p/node_modules/.bin/eslint");
        let mut hooks = vec![PathBuf::from("/p/.git/hooks")];
        hooks.extend(hook_manager_configs(&fs, Path::new("/p")));
        assert_eq!(
            files(hook_named(&fs, &hooks, Path::new("/p"), Path::new("/p"))),
            ["/p/scripts/lint.sh", "/p/bin/x.sh", "/p/tools/check.py"]
        );
    }

    /// Red team 32, F10: the project's own config, with a token in a remote URL or a header.
    #[test]
    fn credentials_in_the_repositorys_config_are_named_never_shown() {
        let fs = FakeFs::default().content(
            "/p/.git/config",
            "[remote \"origin\"]\n\turl = https://x-access-token:ghp_abc@github.com/o/r.git\n\
             [remote \"up\"]\n\turl = https://alice@example.org/r.git\n\
             [http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic eA==\n",
        );
        assert_eq!(
            repo_credentials(&fs, Path::new("/p/.git")),
            ["remote\"origin\".url", "http\"https://github.com/\".extraheader"]
        );
        assert!(repo_credentials(&FakeFs::default(), Path::new("/p/.git")).is_empty());
    }
}
