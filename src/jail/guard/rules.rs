//! What the git guard refuses in the trees it guards (the project, extra writable trees): the
//! entries through which a user's own git, run outside the jail later, would run code the
//! jail wrote. Pure: the caller says where an entry is (its directory's path) and how to
//! look into directories; the syscalls are `emulate.rs`'s.
//!
//! A git directory is what git itself takes for one (`HEAD` plus `objects` and `refs`, or
//! `HEAD` plus `commondir` for a worktree's). In a guarded tree:
//! 1. no entry named `.git` (directory, gitfile, symlink, any case) below the tree's top is
//!    made, written or replaced: a nested work tree or a gitfile pointing anywhere;
//! 2. no directory becomes a git directory: the entry that would complete one (`HEAD`,
//!    `objects`, `refs`, `commondir`) is refused, so no new repository appears, bare or not;
//! 3. in a git directory that exists (the project's own `.git`, its `modules/*` and
//!    `worktrees/*`, a nested clone that was there before), `config`, `config.worktree`,
//!    `commondir` and `hooks` are not made, written or replaced, nor anything below `hooks`.
//!
//! The project's top-level `.git/config` and `.git/hooks` are read-only mounts besides.

use std::path::{Path, PathBuf};

/// How the jail means to change an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new name appears (create, mkdir, symlink, link, rename onto a free name).
    Create,
    /// An existing entry is opened for writing, truncated or replaced.
    Write,
}

/// Looks into the host's directories as the jail sees them.
pub trait Look {
    /// Whether `dir` holds an entry `name` (of any kind; a symlink is not followed).
    fn has(&self, dir: &Path, name: &str) -> bool;
}

/// The trees the guard holds, as the jail sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guarded {
    /// Each tree's top; a `.git` directly in a top is the tree's own (planned as a protected
    /// path or a placeholder), not a nested one.
    pub roots: Vec<PathBuf>,
}

/// Why a change is refused: the line the jail's process gets on its stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NestedRepository,
    NewRepository,
    RepositoryConfig,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::NestedRepository => {
                "a git repository (`.git`) cannot be made or changed below the project's top: the user's \
                 git outside would run what its config names; clone or init under /tmp or $TMPDIR instead"
            }
            Refusal::NewRepository => {
                "this would make a new git repository inside the project, whose config the user's git \
                 outside would run; clone or init under /tmp or $TMPDIR instead"
            }
            Refusal::RepositoryConfig => {
                "the config and hooks of git repositories inside the project are read-only in the jail: \
                 the user's git outside runs what they name"
            }
        }
    }

    /// Short name for the audit log.
    pub fn check(self) -> &'static str {
        match self {
            Refusal::NestedRepository => "nested-git",
            Refusal::NewRepository => "new-git-dir",
            Refusal::RepositoryConfig => "git-config",
        }
    }
}

/// Entries of a git directory through which git runs commands it reads there.
const CONFIG_NAMES: &[&str] = &["config", "config.worktree", "commondir", "hooks"];

fn is(name: &str, what: &str) -> bool {
    name.eq_ignore_ascii_case(what)
}

/// Git's own test of a git directory, on names only (git also reads `HEAD`; a directory that
/// has the names counts here, which is the stricter side).
fn is_git_dir(look: &dyn Look, dir: &Path, adding: Option<&str>) -> bool {
    let has = |n: &str| adding.is_some_and(|a| is(a, n)) || look.has(dir, n);
    has("HEAD") && ((has("objects") && has("refs")) || has("commondir"))
}

impl Guarded {
    /// The tree top `dir` is in, if any.
    fn root_of(&self, dir: &Path) -> Option<&Path> {
        self.roots.iter().map(PathBuf::as_path).find(|r| dir.starts_with(r))
    }

    /// Decides a change to the entry `name` in the directory `dir` (its absolute path as the
    /// jail sees it, symlinks resolved).
    pub fn check(&self, look: &dyn Look, dir: &Path, name: &str, change: Change) -> Result<(), Refusal> {
        let Some(root) = self.root_of(dir) else { return Ok(()) };
        if is(name, ".git") && dir != root {
            return Err(Refusal::NestedRepository);
        }
        // The last of git's marks to appear would turn `dir` into a repository: refused, in
        // whatever order the others came (a `.git` that was there before counts as any).
        if change == Change::Create
            && ["HEAD", "objects", "refs", "commondir"].iter().any(|n| is(name, n))
            && !is_git_dir(look, dir, None)
            && is_git_dir(look, dir, Some(name))
        {
            return Err(Refusal::NewRepository);
        }
        if CONFIG_NAMES.iter().any(|n| is(name, n)) && is_git_dir(look, dir, None) {
            return Err(Refusal::RepositoryConfig);
        }
        // Below a `hooks` directory of a git directory, at any depth.
        for a in dir.ancestors().take_while(|a| a.starts_with(root)) {
            let named_hooks = a.file_name().and_then(|n| n.to_str()).is_some_and(|n| is(n, "hooks"));
            if named_hooks && a.parent().is_some_and(|p| is_git_dir(look, p, None)) {
                return Err(Refusal::RepositoryConfig);
            }
        }
        Ok(())
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
    }

    impl Look for Tree {
        fn has(&self, dir: &Path, name: &str) -> bool {
            self.0.contains(&dir.join(name))
        }
    }

    fn guarded() -> Guarded {
        Guarded { roots: vec!["/p".into(), "/data".into()] }
    }

    fn repo(at: &str) -> Vec<String> {
        ["HEAD", "objects", "refs", "config", "hooks", "hooks/pre-commit"].iter().map(|n| format!("{at}/{n}")).collect()
    }

    #[test]
    fn a_nested_dot_git_of_any_kind_or_case_is_refused_below_the_top_only() {
        let t = Tree::new(&[]);
        let g = guarded();
        for (dir, name) in [("/p/sub", ".git"), ("/p/a/b/c", ".GIT"), ("/data/x", ".Git")] {
            for change in [Change::Create, Change::Write] {
                assert_eq!(g.check(&t, Path::new(dir), name, change), Err(Refusal::NestedRepository), "{dir}/{name}");
            }
        }
        // The project's own .git (planned as protected paths) and trees not guarded.
        assert_eq!(g.check(&t, Path::new("/p"), ".git", Change::Create), Ok(()));
        assert_eq!(g.check(&t, Path::new("/tmp/x"), ".git", Change::Create), Ok(()));
        assert_eq!(g.check(&t, Path::new("/pp"), ".git", Change::Create), Ok(()), "a sibling with a common prefix");
        assert_eq!(g.check(&t, Path::new("/p/sub"), ".gitignore", Change::Create), Ok(()));
    }

    #[test]
    fn the_entry_that_would_complete_a_git_directory_is_refused_in_any_order() {
        let g = guarded();
        // The last of HEAD, objects, refs to appear, whichever it is.
        for last in ["HEAD", "objects", "refs"] {
            let others: Vec<String> = ["HEAD", "objects", "refs", "config"]
                .iter()
                .filter(|n| **n != last)
                .map(|n| format!("/p/x/{n}"))
                .collect();
            let t = Tree(others.iter().map(PathBuf::from).collect());
            assert_eq!(g.check(&t, Path::new("/p/x"), last, Change::Create), Err(Refusal::NewRepository), "{last}");
        }
        // A worktree's git directory: HEAD plus commondir.
        let t = Tree::new(&["/p/w/HEAD"]);
        assert_eq!(g.check(&t, Path::new("/p/w"), "commondir", Change::Create), Err(Refusal::NewRepository));
        // Part of the shape is fine: a file called HEAD in a plain directory.
        let t = Tree::new(&["/p/notes/refs"]);
        assert_eq!(g.check(&t, Path::new("/p/notes"), "HEAD", Change::Create), Ok(()));
        // Outside the guarded trees a repository can be made.
        let t = Tree::new(&["/tmp/r/objects", "/tmp/r/refs"]);
        assert_eq!(g.check(&t, Path::new("/tmp/r"), "HEAD", Change::Create), Ok(()));
    }

    #[test]
    fn config_and_hooks_of_existing_git_directories_are_refused_the_rest_is_not() {
        let g = guarded();
        let mut all = repo("/p/.git");
        all.extend(repo("/p/.git/modules/lib/foo"));
        all.extend(repo("/p/vendor/clone/.git"));
        all.extend(repo("/p/bare.git"));
        let t = Tree(all.iter().map(PathBuf::from).collect());
        for gitdir in ["/p/.git", "/p/.git/modules/lib/foo", "/p/vendor/clone/.git", "/p/bare.git"] {
            let d = Path::new(gitdir);
            for name in ["config", "config.worktree", "commondir", "hooks", "CONFIG"] {
                for change in [Change::Create, Change::Write] {
                    assert_eq!(g.check(&t, d, name, change), Err(Refusal::RepositoryConfig), "{gitdir}/{name}");
                }
            }
            let hooks = d.join("hooks");
            assert_eq!(g.check(&t, &hooks, "pre-commit", Change::Write), Err(Refusal::RepositoryConfig));
            assert_eq!(g.check(&t, &hooks.join("deep"), "x", Change::Create), Err(Refusal::RepositoryConfig));
            // What git writes in daily work stays writable: the index, objects, refs, logs.
            for name in ["index", "index.lock", "config.lock", "COMMIT_EDITMSG", "FETCH_HEAD", "packed-refs"] {
                assert_eq!(g.check(&t, d, name, Change::Create), Ok(()), "{gitdir}/{name}");
            }
            assert_eq!(g.check(&t, &d.join("objects/ab"), "cdef", Change::Create), Ok(()));
            assert_eq!(g.check(&t, &d.join("refs/heads"), "main", Change::Write), Ok(()));
        }
        // A directory named hooks that is not in a git directory is ordinary.
        assert_eq!(g.check(&t, Path::new("/p/src/hooks"), "useThing.ts", Change::Create), Ok(()));
        // The work tree of a nested clone is ordinary too.
        assert_eq!(g.check(&t, Path::new("/p/vendor/clone/src"), "main.c", Change::Write), Ok(()));
    }

    #[test]
    fn every_refusal_has_a_reason_and_an_audit_name() {
        for r in [Refusal::NestedRepository, Refusal::NewRepository, Refusal::RepositoryConfig] {
            assert!(r.reason().len() > 40 && !r.reason().contains('\n'));
            assert!(!r.check().is_empty());
        }
    }
}
