//! What the git guard allows, refuses or checks first in the trees it guards (every tree the
//! jail writes that outlives it: the project, `filesystem.write` paths, the home's writable
//! entries). Repositories may be made and used there (`git init`, `clone`, `worktree add`,
//! submodules); what must hold, at any depth and at any time, is that nothing the jail
//! writes into a repository makes the user's own git, run outside the jail later or in
//! another terminal while the session runs, run a program the user did not put there.
//!
//! A *git directory* here is a directory named `.git`; one git would take for a repository
//! (`HEAD` with `objects` and `refs`, or with a `commondir`) or read a worktree's config from
//! (`objects` and `refs`: a common directory); a worktree's (`<git dir>/worktrees/<name>`); or
//! one at a path that held a git directory earlier in the session (paths are sticky: the user's
//! git resolves a path once and reads through it again, so a directory swapped in there is
//! treated as the one it replaced). In a guarded tree:
//! 1. `config` and `config.worktree` of a git directory change only through the guard: a
//!    rename onto them (how git, libgit2 and dulwich write them: `config.lock`, then a rename)
//!    is carried out with a file of the guard's after every new entry is checked
//!    (`gitconfig.rs`); one written directly (a copy of a repository) goes through a pipe and
//!    is installed, checked, when the writer closes it. Links and other kinds are refused.
//! 2. `hooks` of a git directory is a directory of git's `*.sample` files only.
//! 3. A directory that becomes a git directory (by the mark that completes it, in whatever
//!    order the marks come; a rename onto `.git` or a sticky path) is checked first: its
//!    config, hooks and worktrees as above.
//! 4. A worktree's `commondir` must name the repository two levels up (git's `../..`): it is
//!    made before the worktree's `HEAD`, and checked when `HEAD` appears.
//! 5. `.git` may be a directory or a gitfile, never a symlink; no symlink is made where a git
//!    directory is or was, or above one.
//!
//! Every refusal is EPERM with one line on the caller's stderr. Pure: the caller says where an
//! entry is and how to look into directories; the syscalls are `emulate.rs`'s and `repo.rs`'s.

pub use crate::plan::outside_names::{holds_runs_outside_names, runs_outside_name};
use std::collections::{BTreeSet, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What a call does to the entry it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A new name of this kind (open with O_CREAT, mkdir, symlink, link, mknod, bind).
    Make(Kind),
    /// An existing entry opened for writing or truncated.
    Write,
    /// A rename onto the name of an entry of this kind.
    RenameOnto(Kind),
    /// rmdir.
    Remove,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// A FIFO, socket or device node.
    Special,
}

/// A directory the guard holds, looked into through its descriptor, so that a rename
/// elsewhere cannot make another directory answer in its place.
pub trait Dir {
    /// Whether it holds an entry `name` (of any kind; a symlink is not followed).
    fn has(&self, name: &str) -> bool;
    /// Its parent directory (`..`); None if that cannot be opened.
    fn parent(&self) -> Option<Box<dyn Dir>>;
    /// (device, inode), to know the git directories the jail made.
    fn id(&self) -> Option<(u64, u64)>;
}

/// What the caller does once a call is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Carry it out as asked.
    Go,
    /// Carry it out; the new directory is a git directory (note it).
    MadeGitDir,
    /// A rename onto the config of a git directory: install a checked copy instead.
    Config { made: bool },
    /// The config of a git directory written directly (a copy: `cp -r`, `tar x`): the writer
    /// gets a pipe, and what it wrote is installed, checked, once it closes it.
    ConfigStream { made: bool },
    /// A worktree's commondir written after its HEAD (a copy), or written again: the same,
    /// installed only if it names the repository two levels up.
    CommondirStream,
    /// The directory becomes a git directory with this call (the mark that completes it):
    /// check it first.
    FirstMark,
    /// `HEAD` appears next to a `commondir`: check the commondir first.
    Commondir,
    /// A directory renamed to where git takes it for a git directory: check it first, unless
    /// it is one already.
    Arrives,
    /// A directory renamed to `worktrees` in a git directory: each entry is a git directory
    /// there; check them first.
    WorktreesArrive,
    /// A `.env` written directly: through a pipe, as a config is, and installed without the
    /// controlling variables the jail added (`jail::dotenv::keep_allowed`).
    DotenvStream,
    /// A rename onto a `.env`: a copy of the guard's is installed, refused if the jail added a
    /// controlling variable.
    Dotenv,
}

/// Why a change is refused: the line the jail's process gets on its stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A config or config.worktree written other than by a rename onto it.
    ConfigInPlace,
    /// A config whose entries are not allowed (the detail says which).
    ConfigEntry(String),
    /// A hook other than git's samples.
    Hook,
    /// A symlink where git would follow it to a repository.
    Link,
    /// A worktree's commondir that does not name the repository above it.
    Commondir,
    /// Something in the way of checking (a config that is not a file, too many entries).
    Unchecked(String),
    /// More git directories than the guard keeps track of.
    TooMany,
    /// An agent's or a hook manager's configuration in the project (`runs_outside_name`):
    /// the detail names what reads it.
    RunsOutside(&'static str),
    /// A directory moved in the project whose entries could not all be judged as the names
    /// they come to be (`emulate::names_below_run_nothing`): why.
    Moved(String),
    /// A symlink leading out of the agent's state entry it is in, or into a hidden path
    /// (`jail::links`).
    Linked(crate::jail::links::Bad),
    /// A `.env` made other than as a file written through the guard (a link, a second name, a
    /// node; opened for reading and writing at once).
    Dotenv,
    /// A `.env` whose new lines set controlling variables: the names, and who reads them.
    DotenvControls(Vec<(String, &'static str)>),
}

impl Refusal {
    pub fn reason(&self) -> String {
        let outside = "the user's git outside the jail would run what it names";
        match self {
            Refusal::ConfigInPlace => format!(
                "a git repository's config changes only through git (`git config`, which writes config.lock and \
                 renames it), so that every entry is checked: {outside}"
            ),
            Refusal::ConfigEntry(d) => {
                format!("{d}; git outside the jail reads this config (the settings kept: docs/security-model.md)")
            }
            Refusal::Hook => {
                format!("only git's sample hooks (`*.sample`) can be made in a repository's hooks directory: {outside}")
            }
            Refusal::Link => {
                "a symlink cannot stand where git would follow it to a repository (`.git`, or a path that held \
                 one this session); use a gitfile (`gitdir: <path>`) or a directory"
                    .into()
            }
            Refusal::Commondir => {
                "a commondir is made only in a worktree's directory (`<git dir>/worktrees/<name>`), before its HEAD, \
                 naming the repository two levels up (`../..`), as git makes it"
                    .into()
            }
            Refusal::Unchecked(d) => format!("{d}: a repository here could not be checked, so it is not made"),
            Refusal::TooMany => {
                format!(
                    "more than {MAX_TRACKED} git directories in one session: no more can be made inside the project"
                )
            }
            Refusal::Linked(bad) => bad.reason(),
            Refusal::Dotenv => format!(
                "aider and Gemini CLI started outside the jail load a `.env` here: it is written as a file only \
                 (opened for writing, or renamed onto), never made a symlink, a second name of another file or a \
                 node, nor opened for reading and writing at once; {DOTENV_KEPT}"
            ),
            Refusal::DotenvControls(names) => {
                let names: Vec<String> = names.iter().map(|(n, who)| format!("`{n}` (read by {who})")).collect();
                format!(
                    "{} left out: aider and Gemini CLI started outside the jail load this `.env`; {DOTENV_KEPT}",
                    names.join(", ")
                )
            }
            Refusal::RunsOutside(what) => format!(
                "{what} outside the jail reads this and runs what it names, so the jail cannot make or change it \
                 in the project; ask the user to make the change outside the sandbox"
            ),
            Refusal::Moved(why) => why.clone(),
        }
    }

    /// Short name for the audit log.
    pub fn check(&self) -> &'static str {
        match self {
            Refusal::ConfigInPlace | Refusal::ConfigEntry(_) => "git-config",
            Refusal::Hook => "git-hook",
            Refusal::Link => "git-link",
            Refusal::Commondir => "git-commondir",
            Refusal::Unchecked(_) => "git-unchecked",
            Refusal::TooMany => "git-limit",
            Refusal::RunsOutside(_) | Refusal::Moved(_) => "runs-outside",
            Refusal::Linked(bad) => bad.check(),
            Refusal::Dotenv | Refusal::DotenvControls(_) => "dotenv",
        }
    }
}

/// What a `.env` keeps, for the lines that refuse one.
const DOTENV_KEPT: &str = "a variable that decides what the agents run or where they send the user's key (`AIDER_*`, \
     `GEMINI_*`, `*_BASE_URL`, `*_PROXY`, `PATH`, `LD_*`...) stays only as the file had it; ask the user to set it \
     outside the sandbox (docs/security-model.md)";

/// Git directories (and sticky paths) tracked at most; past it no new one is made.
pub const MAX_TRACKED: usize = 65_536;
/// git's marks of a git directory.
pub const MARKS: [&str; 4] = ["HEAD", "objects", "refs", "commondir"];

fn is(name: &str, what: &str) -> bool {
    name.eq_ignore_ascii_case(what)
}

fn is_mark(name: &str) -> bool {
    MARKS.iter().any(|m| is(name, m))
}

fn is_config(name: &str) -> bool {
    is(name, "config") || is(name, "config.worktree")
}

/// git's test of a repository on names (`HEAD` with `objects` and `refs`, or with a
/// `commondir`), or a directory a worktree's commondir could name (`objects` and `refs`);
/// `adding` counts as there. Stricter than git, which also reads `HEAD`: a directory with
/// the names counts.
fn git_shape(dir: &dyn Dir, adding: Option<&str>) -> bool {
    let has = |n: &str| adding.is_some_and(|a| is(a, n)) || dir.has(n);
    (has("objects") && has("refs")) || (has("HEAD") && has("commondir"))
}

fn file_name(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// What the guard remembers through the session.
#[derive(Debug, Default)]
struct Memory {
    /// Paths that held a git directory.
    sticky: BTreeSet<PathBuf>,
    /// The git directories the jail made (their config is all the jail's).
    made: HashSet<(u64, u64)>,
}

/// The trees the guard holds, as the jail sees them, and what it learnt of them.
#[derive(Debug)]
pub struct Guarded {
    /// Each tree's top (a mount point: nothing in it can be renamed out).
    pub roots: Vec<PathBuf>,
    /// Where a symlink made in them is judged (`jail::links`).
    pub links: crate::plan::LinkPlan,
    memory: Mutex<Memory>,
    /// The controlling lines each `.env` held when the guard saw it (before a write, as it
    /// installed one): git's checkout and stash remove a `.env` and write it anew, and the
    /// user's own lines must stay then.
    dotenv_lines: Mutex<std::collections::HashMap<PathBuf, HashSet<Vec<u8>>>>,
}

/// `.env` paths, and controlling lines per path, remembered at most.
const MAX_DOTENV_PATHS: usize = 256;
const MAX_DOTENV_LINES: usize = 256;

impl Guarded {
    pub fn new(roots: Vec<PathBuf>) -> Guarded {
        Guarded {
            roots,
            links: crate::plan::LinkPlan::default(),
            memory: Mutex::default(),
            dotenv_lines: Mutex::default(),
        }
    }

    /// The same, judging symlinks as `links` says.
    pub fn with_links(mut self, links: crate::plan::LinkPlan) -> Guarded {
        self.links = links;
        self
    }

    /// A symlink to `target` made (or moved) into the directory at `dir`: refused if it
    /// leads out of its state entry or into a hidden path, as the jail sees the way there.
    pub fn judge_link(&self, dir: &Path, target: &Path) -> Result<(), Refusal> {
        match self.links.judge(dir, target, &crate::jail::links::host_read_link) {
            Some(bad) => Err(Refusal::Linked(bad)),
            None => Ok(()),
        }
    }

    /// A second name in `dir` for the file at `from` (a hard link): refused into a state
    /// entry from outside it (the kernel refuses it across mounts already).
    pub fn judge_hard_link(&self, from: &Path, dir: &Path) -> Result<(), Refusal> {
        match self.links.state_of(dir) {
            Some(s) if !from.starts_with(s) => Err(Refusal::Linked(crate::jail::links::Bad::OutOfState(s.into()))),
            _ => Ok(()),
        }
    }

    /// Remembers the controlling lines of `text`, what the `.env` at `path` held.
    pub fn dotenv_seen(&self, path: &Path, text: &[u8]) {
        let mut all = self.dotenv_lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if all.len() >= MAX_DOTENV_PATHS && !all.contains_key(path) {
            return;
        }
        let known = all.entry(path.to_path_buf()).or_default();
        for line in text.split(|c| *c == b'\n') {
            if known.len() < MAX_DOTENV_LINES && !crate::jail::dotenv::controls_in(line).is_empty() {
                known.insert(line.to_vec());
            }
        }
    }

    /// The controlling lines the `.env` at `path` held when the guard saw it, one a line.
    pub fn dotenv_known(&self, path: &Path) -> Vec<u8> {
        let all = self.dotenv_lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.get(path).map(|k| k.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect()).unwrap_or_default()
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `root` is the project's (the first tree): where names that run outside are
    /// refused.
    pub fn is_project(&self, root: &Path) -> bool {
        self.roots.first().is_some_and(|p| p == root)
    }

    /// The tree top `path` is in, if any.
    pub fn root_of(&self, path: &Path) -> Option<&Path> {
        self.roots.iter().map(PathBuf::as_path).find(|r| path.starts_with(r))
    }

    /// Whether `dir` (at `path`) is a git directory.
    pub fn is_git_dir(&self, dir: &dyn Dir, path: &Path) -> bool {
        is(file_name(path), ".git")
            || git_shape(dir, None)
            || self.is_worktree_dir(dir, path)
            || self.memory().sticky.contains(path)
    }

    /// `<git dir>/worktrees/<name>`.
    fn is_worktree_dir(&self, dir: &dyn Dir, path: &Path) -> bool {
        let Some(up) = path.parent() else { return false };
        if !is(file_name(up), "worktrees") {
            return false;
        }
        let Some(gitdir) = up.parent() else { return false };
        is(file_name(gitdir), ".git")
            || self.memory().sticky.contains(gitdir)
            || dir.parent().and_then(|w| w.parent()).is_some_and(|g| git_shape(g.as_ref(), None))
    }

    /// Whether a symlink at `path` could stand in the way of a git directory: one is there, was
    /// there, or is below it.
    fn sticky_at_or_below(&self, path: &Path) -> bool {
        let m = self.memory();
        m.sticky.range(path.to_path_buf()..).next().is_some_and(|s| s.starts_with(path))
    }

    /// Remembers `path` as a git directory's, and `id` as one the jail made.
    pub fn note(&self, path: &Path, made: Option<(u64, u64)>) -> Result<(), Refusal> {
        let mut m = self.memory();
        if m.sticky.len() >= MAX_TRACKED && !m.sticky.contains(path) {
            return Err(Refusal::TooMany);
        }
        m.sticky.insert(path.to_path_buf());
        if let Some(id) = made {
            if m.made.len() < MAX_TRACKED {
                m.made.insert(id);
            }
        }
        Ok(())
    }

    /// Fails closed before a call that would note `n` more paths where they would not fit: a
    /// path not remembered would no longer be checked (the call is refused instead).
    pub fn room(&self, n: usize) -> Result<(), Refusal> {
        if self.memory().sticky.len().saturating_add(n) > MAX_TRACKED {
            return Err(Refusal::TooMany);
        }
        Ok(())
    }

    /// Whether the jail made the git directory `id`.
    pub fn made(&self, id: Option<(u64, u64)>) -> bool {
        id.is_some_and(|id| self.memory().made.contains(&id))
    }

    /// A directory moved from `from` to `to`: the git directories it holds hold there too.
    /// How many paths `moved(from, ..)` would add.
    pub fn below(&self, from: &Path) -> usize {
        self.memory().sticky.range(from.to_path_buf()..).take_while(|s| s.starts_with(from)).count()
    }

    pub fn moved(&self, from: &Path, to: &Path) {
        let mut m = self.memory();
        let below: Vec<PathBuf> =
            m.sticky.range(from.to_path_buf()..).take_while(|s| s.starts_with(from)).cloned().collect();
        for s in below {
            if m.sticky.len() >= MAX_TRACKED {
                break;
            }
            if let Ok(rel) = s.strip_prefix(from) {
                m.sticky.insert(to.join(rel));
            }
        }
    }

    /// The paths below (or at) `to` that held git directories, relative to `to`: a directory
    /// renamed to `to` brings what it holds there, which must then be checked.
    pub fn sticky_below(&self, to: &Path) -> Vec<PathBuf> {
        let m = self.memory();
        m.sticky
            .range(to.to_path_buf()..)
            .take_while(|s| s.starts_with(to))
            .filter_map(|s| s.strip_prefix(to).ok().map(Path::to_path_buf))
            .collect()
    }

    /// Decides `op` on the entry `name` in the directory `dir`, whose path as the jail sees it
    /// (symlinks resolved) is `path`.
    pub fn decide(&self, dir: &dyn Dir, path: &Path, raw: &OsStr, op: Op) -> Result<Decision, Refusal> {
        let Some(root) = self.root_of(path) else { return Ok(Decision::Go) };
        // The path exactly as its bytes are (a name need not be UTF-8); a name that is not
        // UTF-8 is none of git's.
        let entry = path.join(raw);
        let name = raw.to_str().unwrap_or("");
        if matches!(op, Op::Make(_) | Op::RenameOnto(_) | Op::Write) && self.roots.first().is_some_and(|p| p == root) {
            if let Some(what) = entry.strip_prefix(root).ok().and_then(runs_outside_name) {
                return Err(Refusal::RunsOutside(what));
            }
            if matches!(op, Op::Make(Kind::Symlink) | Op::RenameOnto(Kind::Symlink)) {
                if let Some(what) = entry.strip_prefix(root).ok().and_then(holds_runs_outside_names) {
                    return Err(Refusal::RunsOutside(what));
                }
            }
        }
        if name == ".env" {
            match op {
                Op::Make(Kind::File) | Op::Write => return Ok(Decision::DotenvStream),
                Op::RenameOnto(Kind::File) => return Ok(Decision::Dotenv),
                // A directory (a virtual environment is often named `.env`) is no loader's.
                Op::Make(Kind::Dir) | Op::RenameOnto(Kind::Dir) | Op::Remove => {}
                _ => return Err(Refusal::Dotenv),
            }
        }
        if matches!(op, Op::Make(Kind::Symlink) | Op::RenameOnto(Kind::Symlink))
            && (is(name, ".git") || self.sticky_at_or_below(&entry) || self.becomes_git_dir(dir, path, &entry))
        {
            return Err(Refusal::Link);
        }
        if op == Op::Remove {
            // An rmdir: what was a git directory stays one at its path; and a git directory
            // losing `objects` or `refs` is still one.
            if is(name, ".git") || self.memory().sticky.contains(&entry) {
                self.note(&entry, None)?;
            } else if (is(name, "objects") || is(name, "refs")) && self.is_git_dir(dir, path) {
                self.note(path, None)?;
            }
            return Ok(Decision::Go);
        }
        // Below a git directory's `hooks`, at any depth: only git's samples, directly in it.
        if let Some(d) = self.hooks_decision(dir, path, root, raw, op) {
            return d;
        }
        self.decide_git_entry(dir, path, name, &entry, op)
    }

    /// The rest of `decide`: what `op` on `name` makes of a git directory, or of one to be
    /// (its config, `commondir`, `hooks`, the marks that make a directory one, `worktrees`).
    fn decide_git_entry(
        &self,
        dir: &dyn Dir,
        path: &Path,
        name: &str,
        entry: &Path,
        op: Op,
    ) -> Result<Decision, Refusal> {
        let git_dir = || self.is_git_dir(dir, path);
        if is_config(name) && git_dir() {
            return match op {
                Op::RenameOnto(Kind::File) => Ok(Decision::Config { made: self.made(dir.id()) }),
                Op::Make(Kind::File) | Op::Write => Ok(Decision::ConfigStream { made: self.made(dir.id()) }),
                _ => Err(Refusal::ConfigInPlace),
            };
        }
        if is(name, "commondir") && op == Op::Write && git_dir() {
            // Checked when HEAD appeared; written again it is checked again, as it is written.
            return if self.is_worktree_dir(dir, path) {
                Ok(Decision::CommondirStream)
            } else {
                Err(Refusal::Commondir)
            };
        }
        if is(name, "hooks")
            && matches!(op, Op::RenameOnto(_) | Op::Make(Kind::File | Kind::Symlink | Kind::Special))
            && git_dir()
        {
            return Err(Refusal::Hook);
        }
        if is_mark(name) && matches!(op, Op::Make(_) | Op::RenameOnto(_)) {
            if is(name, "commondir") {
                // git writes a commondir only in a worktree's directory, before its HEAD, which
                // is when it is checked; after it (a copy of a repository) as it is written.
                if !self.is_worktree_dir(dir, path) {
                    return Err(Refusal::Commondir);
                }
                if dir.has("HEAD") {
                    return if op == Op::Make(Kind::File) {
                        Ok(Decision::CommondirStream)
                    } else {
                        Err(Refusal::Commondir)
                    };
                }
            }
            if !git_dir() {
                return Ok(if git_shape(dir, Some(name)) { Decision::FirstMark } else { Decision::Go });
            }
            if is(name, "HEAD") && dir.has("commondir") {
                return Ok(Decision::Commondir);
            }
            return Ok(Decision::Go);
        }
        if op == Op::RenameOnto(Kind::Dir) && is(name, "worktrees") && git_dir() {
            return Ok(Decision::WorktreesArrive);
        }
        if matches!(op, Op::Make(Kind::Dir) | Op::RenameOnto(Kind::Dir)) && self.becomes_git_dir(dir, path, entry) {
            return Ok(if op == Op::Make(Kind::Dir) { Decision::MadeGitDir } else { Decision::Arrives });
        }
        Ok(Decision::Go)
    }

    /// Whether a directory at `entry` (in `dir`, at `path`) is a git directory by where it is:
    /// named `.git`, at a sticky path, or a worktree's.
    fn becomes_git_dir(&self, dir: &dyn Dir, path: &Path, entry: &Path) -> bool {
        if is(file_name(entry), ".git") || self.memory().sticky.contains(entry) {
            return true;
        }
        let Some(gitdir_path) = path.parent().filter(|_| is(file_name(path), "worktrees")) else { return false };
        dir.parent().is_some_and(|g| self.is_git_dir(g.as_ref(), gitdir_path))
    }

    /// For an entry below a `hooks` directory: None if there is no `hooks` on the way up.
    fn hooks_decision(
        &self,
        dir: &dyn Dir,
        path: &Path,
        root: &Path,
        name: &OsStr,
        op: Op,
    ) -> Option<Result<Decision, Refusal>> {
        for (k, a) in path.ancestors().take_while(|a| a.starts_with(root) && *a != root).enumerate() {
            if !is(file_name(a), "hooks") {
                continue;
            }
            let mut up = dir.parent();
            for _ in 0..k {
                up = up.and_then(|d| d.parent());
            }
            let Some(gitdir_path) = a.parent() else { continue };
            // An ancestor that cannot be opened is taken for a git directory.
            if !up.as_deref().is_none_or(|g| self.is_git_dir(g, gitdir_path)) {
                continue;
            }
            let sample = name.as_bytes().ends_with(b".sample") && name.len() > ".sample".len();
            let ok = k == 0 && sample && matches!(op, Op::Make(Kind::File) | Op::Write | Op::RenameOnto(Kind::File));
            return Some(if ok { Ok(Decision::Go) } else { Err(Refusal::Hook) });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A directory tree as a set of paths.
    struct Tree(BTreeSet<PathBuf>);

    impl Tree {
        fn new(paths: &[&str]) -> Tree {
            Tree(paths.iter().map(PathBuf::from).collect())
        }

        fn decide(&self, g: &Guarded, dir: &str, name: &str, op: Op) -> Result<Decision, Refusal> {
            let d = At(std::rc::Rc::new(self.0.clone()), PathBuf::from(dir));
            g.decide(&d, Path::new(dir), OsStr::new(name), op)
        }
    }

    /// A directory of a `Tree`.
    struct At(std::rc::Rc<BTreeSet<PathBuf>>, PathBuf);

    impl Dir for At {
        fn has(&self, name: &str) -> bool {
            self.0.contains(&self.1.join(name))
        }
        fn parent(&self) -> Option<Box<dyn Dir>> {
            Some(Box::new(At(self.0.clone(), self.1.parent()?.to_path_buf())))
        }
        fn id(&self) -> Option<(u64, u64)> {
            Some((1, self.1.as_os_str().len() as u64))
        }
    }

    fn guarded() -> Guarded {
        Guarded::new(vec!["/p".into(), "/data".into()])
    }

    fn repo(at: &str) -> Vec<String> {
        ["HEAD", "objects", "refs", "config", "hooks", "hooks/pre-commit"].iter().map(|n| format!("{at}/{n}")).collect()
    }

    const FILE: Op = Op::Make(Kind::File);
    const DIR: Op = Op::Make(Kind::Dir);
    const LINK: Op = Op::Make(Kind::Symlink);

    #[test]
    fn repositories_can_be_made_a_dot_git_directory_is_one_from_birth() {
        let t = Tree::new(&[]);
        let g = guarded();
        assert_eq!(t.decide(&g, "/p/sub", ".git", DIR), Ok(Decision::MadeGitDir));
        assert_eq!(t.decide(&g, "/p/sub", ".git", FILE), Ok(Decision::Go), "a gitfile is a pointer");
        assert_eq!(t.decide(&g, "/p/sub", ".GIT", LINK), Err(Refusal::Link));
        // Its config, from birth: only by a rename onto it, checked.
        assert_eq!(t.decide(&g, "/p/sub/.git", "config", FILE), Ok(Decision::ConfigStream { made: false }));
        assert_eq!(t.decide(&g, "/p/sub/.git", "config", Op::Write), Ok(Decision::ConfigStream { made: false }));
        assert_eq!(t.decide(&g, "/p/sub/.git", "config", DIR), Err(Refusal::ConfigInPlace));
        assert_eq!(
            t.decide(&g, "/p/sub/.git", "config", Op::RenameOnto(Kind::File)),
            Ok(Decision::Config { made: false })
        );
        assert_eq!(t.decide(&g, "/p/sub/.git", "CONFIG.worktree", LINK), Err(Refusal::ConfigInPlace));
        assert_eq!(t.decide(&g, "/p/sub/.git", "config.lock", FILE), Ok(Decision::Go));
        assert_eq!(t.decide(&g, "/tmp/x", ".git", LINK), Ok(Decision::Go), "outside the guarded trees");
    }

    #[test]
    fn a_dotenv_is_written_only_as_a_file_through_the_guard_and_a_directory_of_that_name_is_free() {
        let t = Tree::new(&[]);
        let g = guarded();
        for dir in ["/p", "/p/web/api", "/data"] {
            assert_eq!(t.decide(&g, dir, ".env", FILE), Ok(Decision::DotenvStream), "{dir}");
            assert_eq!(t.decide(&g, dir, ".env", Op::Write), Ok(Decision::DotenvStream), "{dir}");
            assert_eq!(t.decide(&g, dir, ".env", Op::RenameOnto(Kind::File)), Ok(Decision::Dotenv), "{dir}");
            for op in [LINK, Op::RenameOnto(Kind::Symlink), Op::Make(Kind::Special), Op::RenameOnto(Kind::Special)] {
                assert_eq!(t.decide(&g, dir, ".env", op), Err(Refusal::Dotenv), "{dir} {op:?}");
            }
            // `python -m venv .env`.
            assert_eq!(t.decide(&g, dir, ".env", DIR), Ok(Decision::Go), "{dir}");
            assert_eq!(t.decide(&g, dir, ".env", Op::RenameOnto(Kind::Dir)), Ok(Decision::Go), "{dir}");
        }
        for name in [".env.example", ".envrc.d", "env", ".ENV"] {
            assert_eq!(t.decide(&g, "/p", name, FILE), Ok(Decision::Go), "{name}: no loader's");
        }
        assert_eq!(t.decide(&g, "/tmp", ".env", LINK), Ok(Decision::Go), "outside the guarded trees");
        assert_eq!(Refusal::Dotenv.check(), "dotenv");
        let r = Refusal::DotenvControls(vec![("AIDER_LOAD".into(), "aider")]).reason();
        assert!(r.starts_with("`AIDER_LOAD` (read by aider) left out"), "{r}");
    }

    #[test]
    fn the_mark_that_completes_a_directory_is_checked_in_any_order() {
        let g = guarded();
        for (there, last) in [("objects", "refs"), ("refs", "objects")] {
            let t = Tree::new(&["/p/x/config", "/p/x/HEAD", &format!("/p/x/{there}")]);
            assert_eq!(t.decide(&g, "/p/x", last, DIR), Ok(Decision::FirstMark), "{last}");
            assert_eq!(t.decide(&g, "/p/x", last, Op::RenameOnto(Kind::Dir)), Ok(Decision::FirstMark), "{last}");
            assert_eq!(
                t.decide(&g, "/p/x", last, Op::Make(Kind::Special)),
                Ok(Decision::FirstMark),
                "a socket: {last}"
            );
        }
        // Part of the shape is an ordinary directory (a cache with `refs/`, a package with `objects/`).
        let t = Tree::new(&["/p/x/refs", "/p/x/HEAD"]);
        assert_eq!(t.decide(&g, "/p/x", "config", FILE), Ok(Decision::Go));
        assert_eq!(t.decide(&g, "/p/x", "blobs", DIR), Ok(Decision::Go));
        // Once complete, its config is checked and other marks are made as they are.
        let t = Tree::new(&["/p/x/objects", "/p/x/refs"]);
        assert_eq!(t.decide(&g, "/p/x", "HEAD", FILE), Ok(Decision::Go));
        assert_eq!(t.decide(&g, "/p/x", "config", Op::RenameOnto(Kind::File)), Ok(Decision::Config { made: false }));
        assert_eq!(t.decide(&g, "/p/x", "config", FILE), Ok(Decision::ConfigStream { made: false }));
        // Outside the guarded trees nothing is checked.
        let t = Tree::new(&["/tmp/r/objects", "/tmp/r/refs"]);
        assert_eq!(t.decide(&g, "/tmp/r", "HEAD", FILE), Ok(Decision::Go));
    }

    #[test]
    fn a_worktrees_commondir_comes_before_its_head_and_is_checked_then() {
        let g = guarded();
        let t = Tree::new(&["/p/.git/HEAD", "/p/.git/objects", "/p/.git/refs", "/p/.git/worktrees/w"]);
        assert_eq!(t.decide(&g, "/p/.git/worktrees", "w", DIR), Ok(Decision::MadeGitDir));
        // `w` is a git directory by where it is: its commondir is a mark in a git directory.
        assert_eq!(t.decide(&g, "/p/.git/worktrees/w", "commondir", FILE), Ok(Decision::Go));
        let t = Tree::new(&["/p/.git/HEAD", "/p/.git/worktrees/w/commondir"]);
        assert_eq!(t.decide(&g, "/p/.git/worktrees/w", "HEAD", Op::RenameOnto(Kind::File)), Ok(Decision::Commondir));
        // After HEAD (a copy of a repository), or written again: checked as it is written.
        let t = Tree::new(&["/p/.git/HEAD", "/p/.git/worktrees/w/HEAD"]);
        assert_eq!(t.decide(&g, "/p/.git/worktrees/w", "commondir", FILE), Ok(Decision::CommondirStream));
        assert_eq!(t.decide(&g, "/p/.git/worktrees/w", "commondir", Op::Write), Ok(Decision::CommondirStream));
        assert_eq!(t.decide(&g, "/p/.git/worktrees/w", "commondir", LINK), Err(Refusal::Commondir));
        // No symlink where a worktree's directory would be.
        assert_eq!(t.decide(&g, "/p/.git/worktrees", "v", LINK), Err(Refusal::Link));
        assert_eq!(t.decide(&g, "/p/.git/worktrees/w", "config.worktree", LINK), Err(Refusal::ConfigInPlace));
        // Nowhere else (attack G5: the project's own .git given a commondir with HEAD moved aside).
        let t = Tree::new(&["/p/.git/objects", "/p/.git/refs"]);
        assert_eq!(t.decide(&g, "/p/.git", "commondir", FILE), Err(Refusal::Commondir));
        assert_eq!(t.decide(&g, "/p/x", "commondir", FILE), Err(Refusal::Commondir));
    }

    #[test]
    fn hooks_hold_only_gits_samples() {
        let g = guarded();
        let mut all = repo("/p/.git");
        all.extend(repo("/p/vendor/clone"));
        let t = Tree(all.iter().map(PathBuf::from).collect());
        for gitdir in ["/p/.git", "/p/vendor/clone"] {
            let hooks = format!("{gitdir}/hooks");
            assert_eq!(t.decide(&g, &hooks, "pre-commit.sample", FILE), Ok(Decision::Go));
            assert_eq!(t.decide(&g, &hooks, "pre-commit.sample", Op::Write), Ok(Decision::Go));
            for (name, op) in [
                ("pre-commit", FILE),
                ("pre-commit", Op::Write),
                ("post-checkout", Op::RenameOnto(Kind::File)),
                ("x.sample", LINK),
                ("x.sample", DIR),
                (".sample", FILE),
            ] {
                assert_eq!(t.decide(&g, &hooks, name, op), Err(Refusal::Hook), "{gitdir} {name} {op:?}");
            }
            assert_eq!(t.decide(&g, &format!("{hooks}/deep"), "x.sample", FILE), Err(Refusal::Hook));
            assert_eq!(t.decide(&g, gitdir, "hooks", DIR), Ok(Decision::Go), "an empty hooks directory");
            assert_eq!(t.decide(&g, gitdir, "hooks", LINK), Err(Refusal::Hook));
            assert_eq!(t.decide(&g, gitdir, "hooks", Op::RenameOnto(Kind::Dir)), Err(Refusal::Hook));
        }
        // A directory named hooks that is not in a git directory is ordinary.
        assert_eq!(t.decide(&g, "/p/src/hooks", "useThing.ts", FILE), Ok(Decision::Go));
    }

    #[test]
    fn paths_stay_git_directories_for_the_session() {
        let g = guarded();
        let t = Tree::new(&[]);
        g.note(Path::new("/p/a/repo"), None).expect("noted");
        // Empty now (the jail removed it): whatever is made or moved there is checked.
        assert_eq!(t.decide(&g, "/p/a", "repo", DIR), Ok(Decision::MadeGitDir));
        assert_eq!(t.decide(&g, "/p/a", "repo", Op::RenameOnto(Kind::Dir)), Ok(Decision::Arrives));
        assert_eq!(t.decide(&g, "/p/x", ".git", Op::RenameOnto(Kind::Dir)), Ok(Decision::Arrives));
        assert_eq!(t.decide(&g, "/p/a/repo", "config", FILE), Ok(Decision::ConfigStream { made: false }));
        // No symlink there, nor above it.
        assert_eq!(t.decide(&g, "/p/a", "repo", LINK), Err(Refusal::Link));
        assert_eq!(t.decide(&g, "/p", "a", LINK), Err(Refusal::Link));
        assert_eq!(t.decide(&g, "/p", "b", LINK), Ok(Decision::Go));
        assert_eq!(t.decide(&g, "/p/a", "repository", LINK), Ok(Decision::Go), "a sibling with a common prefix");
        // A rename carries them along, and says what a directory renamed over brings.
        g.moved(Path::new("/p/a"), Path::new("/p/b"));
        assert_eq!(t.decide(&g, "/p/b", "repo", LINK), Err(Refusal::Link));
        assert_eq!(g.sticky_below(Path::new("/p/b")), vec![PathBuf::from("repo")]);
        // An rmdir of a git directory's objects leaves it one.
        let t = Tree::new(&["/p/c/HEAD", "/p/c/objects", "/p/c/refs"]);
        assert_eq!(t.decide(&g, "/p/c", "objects", Op::Remove), Ok(Decision::Go));
        let t = Tree::new(&[]);
        assert_eq!(t.decide(&g, "/p/c", "config", Op::Write), Ok(Decision::ConfigStream { made: false }));
    }

    #[test]
    fn past_the_paths_it_keeps_the_guard_refuses_rather_than_forget() {
        // Attack A6 of the review: with the memory full, paths were no longer remembered and
        // a repository swapped out and back in went unchecked.
        let g = guarded();
        for i in 0..MAX_TRACKED {
            g.note(&PathBuf::from(format!("/p/d{i}/.git")), None).expect("room");
        }
        assert_eq!(g.room(1), Err(Refusal::TooMany));
        assert_eq!(g.note(Path::new("/p/new/.git"), None), Err(Refusal::TooMany));
        assert!(g.note(Path::new("/p/d7/.git"), None).is_ok(), "one it has is no more");
        let t = Tree::new(&[]);
        assert_eq!(t.decide(&g, "/p/x", ".git", Op::Remove), Err(Refusal::TooMany));
    }

    #[test]
    fn a_name_that_is_not_utf8_is_remembered_as_its_bytes() {
        // Attack A3: the path was joined from a lossy name, so the remembered one was missed.
        use std::os::unix::ffi::OsStrExt;
        let g = guarded();
        let raw = OsStr::from_bytes(b"r\xff");
        g.note(&Path::new("/p").join(raw), None).expect("room");
        let t = Tree::new(&[]);
        let d = At(std::rc::Rc::new(t.0.clone()), PathBuf::from("/p"));
        assert_eq!(g.decide(&d, Path::new("/p"), raw, Op::RenameOnto(Kind::Dir)), Ok(Decision::Arrives));
        assert_eq!(g.decide(&d, Path::new("/p"), raw, LINK), Err(Refusal::Link));
    }

    #[test]
    fn what_git_writes_in_daily_work_goes_as_it_is() {
        let g = guarded();
        let t = Tree(repo("/p/.git").iter().map(PathBuf::from).collect());
        for name in ["index", "index.lock", "config.lock", "COMMIT_EDITMSG", "FETCH_HEAD", "packed-refs", "description"]
        {
            assert_eq!(t.decide(&g, "/p/.git", name, FILE), Ok(Decision::Go), "{name}");
        }
        assert_eq!(t.decide(&g, "/p/.git/objects/ab", "cdef", FILE), Ok(Decision::Go));
        assert_eq!(t.decide(&g, "/p/.git/refs/heads", "main", Op::Write), Ok(Decision::Go));
        assert_eq!(
            t.decide(&g, "/p/.git/refs/heads", "config", Op::RenameOnto(Kind::File)),
            Ok(Decision::Go),
            "a branch named config"
        );
        assert_eq!(t.decide(&g, "/p/.git", "HEAD", Op::RenameOnto(Kind::File)), Ok(Decision::Go));
        assert_eq!(t.decide(&g, "/p/src", "config", FILE), Ok(Decision::Go), "a project's own config file");
    }

    /// Red team 32, F5, F12, F4: agents' settings at any depth of the project, hook managers'
    /// configs and aider's pickle cache at its top, are neither made, renamed onto nor written.
    #[test]
    fn agent_settings_at_any_depth_and_hook_manager_configs_are_refused_in_the_project() {
        let g = guarded();
        let t = Tree::new(&["/p/web", "/p/web/.claude", "/p/web/.claude/settings.json"]);
        for (dir, name) in [
            ("/p/web", ".claude"),
            ("/p/web", ".mcp.json"),
            ("/p/web/deep/er", ".codex"),
            ("/p/web/.claude", "settings.json"),
            ("/p/x", ".GEMINI"),
            ("/p/a", ".cursor"),
            ("/p/a", "opencode.json"),
            ("/p/a/.opencode", "plugin"),
            ("/p", "lefthook-local.yml"),
            ("/p", ".lefthook-local.json"),
            ("/p", "lefthook.toml"),
            ("/p/.config", "lefthook.yaml"),
            ("/p/.lefthook-local/pre-commit", "x.sh"),
            ("/p", ".pre-commit-config.yaml"),
            ("/p", ".aider.tags.cache.v4"),
            ("/p/web", ".aider.model.settings.yml"),
            ("/p", ".aider.model.metadata.json"),
            ("/p/tools", ".agents"),
            ("/p", ".devcontainer"),
            ("/p/.devcontainer", "devcontainer.json"),
            ("/p", ".devcontainer.json"),
            // Red team 32 R6: other agents' settings at any depth, editors' at the top.
            ("/p/.github/hooks", "x.json"),
            ("/p/.github", "hooks"),
            ("/p/web/.github", "hooks"),
            ("/p", ".qwen"),
            ("/p/web", ".qwen"),
            ("/p", "crush.json"),
            ("/p/web", ".crush.json"),
            ("/p", ".roo"),
            ("/p", ".kilocode"),
            ("/p/.kiro/hooks", "x.kiro.hook"),
            ("/p/.kiro/settings", "mcp.json"),
            ("/p", ".amazonq"),
            ("/p/.junie/mcp", "mcp.json"),
            ("/p/.clinerules/hooks", "PreToolUse"),
            ("/p/web", ".clinerules"),
            ("/p/.openhands", "setup.sh"),
            ("/p/.factory", "settings.json"),
            ("/p/web", ".amp"),
            ("/p/.zed", "settings.json"),
            ("/p/.zed", "tasks.json"),
            ("/p/.helix", "languages.toml"),
            ("/p", "mise.toml"),
            ("/p", ".mise.toml"),
            ("/p", "mise.local.toml"),
            ("/p/.config", "mise.toml"),
            ("/p/.config/mise", "config.toml"),
        ] {
            for op in [FILE, DIR, Op::Write, Op::RenameOnto(Kind::File), LINK] {
                assert!(matches!(t.decide(&g, dir, name, op), Err(Refusal::RunsOutside(_))), "{dir}/{name} {op:?}");
            }
        }
        for (dir, name) in [
            ("/p/web", "settings.json"),
            ("/p/web", "lefthook-local.yml"),
            ("/p/.aider.tags.cache.v4", "cache.db"),
            ("/p/.opencode", "package.json"),
            ("/p/src", "claude.ts"),
            ("/data/x", ".claude"),
            // A cloned repository keeps its editor settings (VS Code's trust decides on them).
            ("/p/vendor/lib", ".vscode"),
            ("/p/vendor/lib/.vscode", "tasks.json"),
            ("/p/vendor/lib", ".devcontainer"),
            // Editors' and mise's settings at depth: a cloned repository keeps its own.
            ("/p/vendor/lib", ".zed"),
            ("/p/vendor/lib/.helix", "languages.toml"),
            ("/p/vendor/lib", "mise.toml"),
            // `.github` itself and its workflows are the project's.
            ("/p", ".github"),
            ("/p/.github/workflows", "ci.yml"),
            ("/p/src", "hooks"),
            ("/p", "crushing.txt"),
        ] {
            assert_eq!(t.decide(&g, dir, name, FILE), Ok(Decision::Go), "{dir}/{name}");
        }
        assert_eq!(t.decide(&g, "/p/web", ".claude", Op::Remove), Ok(Decision::Go), "removing runs nothing");
    }

    #[test]
    fn every_refusal_has_a_reason_and_an_audit_name() {
        for r in [
            Refusal::ConfigInPlace,
            Refusal::ConfigEntry("`core.fsmonitor` cannot be set here".into()),
            Refusal::Hook,
            Refusal::Link,
            Refusal::Commondir,
            Refusal::Unchecked("x".into()),
            Refusal::TooMany,
            Refusal::RunsOutside("Claude Code"),
            Refusal::Linked(crate::jail::links::Bad::Hidden),
            Refusal::Linked(crate::jail::links::Bad::OutOfState("/h/.gemini/history".into())),
            Refusal::Linked(crate::jail::links::Bad::TooDeep),
        ] {
            assert!(r.reason().len() > 40 && !r.reason().contains('\n'), "{r:?}");
            assert!(r.check().starts_with("git-") || r.check().contains("link") || r.check() == "runs-outside");
        }
    }
}
