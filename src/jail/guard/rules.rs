//! What the git guard refuses in the trees it guards (the project, extra writable trees): the
//! entries through which a user's own git, run outside the jail later, would run code the
//! jail wrote. Pure: the caller says where an entry is (its directory's path) and how to
//! look into directories; the syscalls are `emulate.rs`'s.
//!
//! A git directory is what git itself takes for one (`HEAD` plus `objects` and `refs`, or
//! `HEAD` plus `commondir` for a worktree's). In a guarded tree:
//! 1. no entry named `.git` (directory, gitfile, symlink, any case) is made, written or
//!    replaced, the top's own included: a nested work tree, or a gitfile pointing anywhere;
//! 2. no directory becomes a git directory: the entry that would complete one (`HEAD`,
//!    `objects`, `refs`, `commondir`) is refused, so no new repository appears, bare or not;
//! 3. in a git directory that exists (the project's own `.git`, its `modules/*` and
//!    `worktrees/*`, a nested clone that was there before), `config`, `config.worktree`,
//!    `commondir` and `hooks` are not made, written or replaced, nor anything below `hooks`.
//!
//! The project's top-level `.git/config` and `.git/hooks` are read-only mounts besides, and a
//! missing top-level `.git` a read-only placeholder.

use std::path::{Path, PathBuf};

/// How the jail means to change an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new name appears (create, mkdir, symlink, link, rename onto a free name).
    Create,
    /// An existing entry is opened for writing, truncated or replaced.
    Write,
}

/// A directory the guard holds open: looked into through its descriptor, so that a rename
/// elsewhere cannot make another directory answer in its place.
pub trait Dir {
    /// Whether it holds an entry `name` (of any kind; a symlink is not followed).
    fn has(&self, name: &str) -> bool;
    /// Its parent directory (`..`); None if that cannot be opened.
    fn parent(&self) -> Option<Box<dyn Dir>>;
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
fn is_git_dir(dir: &dyn Dir, adding: Option<&str>) -> bool {
    let has = |n: &str| adding.is_some_and(|a| is(a, n)) || dir.has(n);
    has("HEAD") && ((has("objects") && has("refs")) || has("commondir"))
}

impl Guarded {
    /// The tree top `dir` is in, if any.
    fn root_of(&self, dir: &Path) -> Option<&Path> {
        self.roots.iter().map(PathBuf::as_path).find(|r| dir.starts_with(r))
    }

    /// Decides a change to the entry `name` in the directory `dir`, whose path as the jail
    /// sees it (symlinks resolved) is `path`.
    ///
    /// The path places `dir` in a guarded tree (the trees' tops are mount points: nothing in
    /// them can be renamed out) and names its ancestors; what `dir` and its ancestors hold is
    /// asked of the directories themselves. A stale path can only err on the strict side: a
    /// directory cannot be renamed to `hooks` inside a git directory, nor a git directory be
    /// completed, so an ancestor the path calls otherwise is not a `hooks` that matters.
    pub fn check(&self, dir: &dyn Dir, path: &Path, name: &str, change: Change) -> Result<(), Refusal> {
        let Some(root) = self.root_of(path) else { return Ok(()) };
        // Any `.git`, the top's included: a gitfile at the top (a worktree's or submodule's
        // checkout as the project) could be pointed at a repository the jail wrote elsewhere.
        // A missing top `.git` is a read-only placeholder for the session besides.
        if is(name, ".git") {
            return Err(Refusal::NestedRepository);
        }
        // The last of git's marks to appear would turn `dir` into a repository: refused, in
        // whatever order the others came.
        if change == Change::Create
            && ["HEAD", "objects", "refs", "commondir"].iter().any(|n| is(name, n))
            && !is_git_dir(dir, None)
            && is_git_dir(dir, Some(name))
        {
            return Err(Refusal::NewRepository);
        }
        // Made only by `git worktree add` and `extensions.worktreeConfig`: never new here.
        if change == Change::Create && (is(name, "commondir") || is(name, "config.worktree")) {
            return Err(Refusal::NewRepository);
        }
        if CONFIG_NAMES.iter().any(|n| is(name, n)) && is_git_dir(dir, None) {
            return Err(Refusal::RepositoryConfig);
        }
        // Below a `hooks` directory of a git directory, at any depth: for each ancestor the
        // path calls `hooks` (rare: the walk up by descriptor happens only then).
        for (k, a) in path.ancestors().take_while(|a| a.starts_with(root)).enumerate() {
            if !a.file_name().and_then(|n| n.to_str()).is_some_and(|n| is(n, "hooks")) {
                continue;
            }
            let mut up = dir.parent();
            for _ in 0..k {
                up = up.and_then(|d| d.parent());
            }
            // An ancestor that cannot be opened is taken for a git directory.
            if up.as_deref().is_none_or(|g| is_git_dir(g, None)) {
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

        fn check(&self, g: &Guarded, dir: &str, name: &str, change: Change) -> Result<(), Refusal> {
            let d = At(std::rc::Rc::new(self.0.clone()), PathBuf::from(dir));
            g.check(&d, Path::new(dir), name, change)
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
    }

    fn guarded() -> Guarded {
        Guarded { roots: vec!["/p".into(), "/data".into()] }
    }

    fn repo(at: &str) -> Vec<String> {
        ["HEAD", "objects", "refs", "config", "hooks", "hooks/pre-commit"].iter().map(|n| format!("{at}/{n}")).collect()
    }

    #[test]
    fn a_dot_git_of_any_kind_or_case_is_refused_in_guarded_trees_only() {
        let t = Tree::new(&[]);
        let g = guarded();
        for (dir, name) in [("/p/sub", ".git"), ("/p/a/b/c", ".GIT"), ("/data/x", ".Git")] {
            for change in [Change::Create, Change::Write] {
                assert_eq!(t.check(&g, dir, name, change), Err(Refusal::NestedRepository), "{dir}/{name}");
            }
        }
        // The top's own `.git` is no exception (a gitfile there could be repointed); trees
        // not guarded are.
        assert_eq!(t.check(&g, "/p", ".git", Change::Write), Err(Refusal::NestedRepository));
        assert_eq!(t.check(&g, "/tmp/x", ".git", Change::Create), Ok(()));
        assert_eq!(t.check(&g, "/pp", ".git", Change::Create), Ok(()), "a sibling with a common prefix");
        assert_eq!(t.check(&g, "/p/sub", ".gitignore", Change::Create), Ok(()));
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
            assert_eq!(t.check(&g, "/p/x", last, Change::Create), Err(Refusal::NewRepository), "{last}");
        }
        // A worktree's git directory: HEAD plus commondir; a commondir is never new here.
        let t = Tree::new(&["/p/w/HEAD"]);
        assert_eq!(t.check(&g, "/p/w", "commondir", Change::Create), Err(Refusal::NewRepository));
        let t = Tree::new(&[]);
        assert_eq!(t.check(&g, "/p/w", "commondir", Change::Create), Err(Refusal::NewRepository));
        assert_eq!(t.check(&g, "/p/w", "config.worktree", Change::Create), Err(Refusal::NewRepository));
        // Part of the shape is fine: a file called HEAD in a plain directory.
        let t = Tree::new(&["/p/notes/refs"]);
        assert_eq!(t.check(&g, "/p/notes", "HEAD", Change::Create), Ok(()));
        // Outside the guarded trees a repository can be made.
        let t = Tree::new(&["/tmp/r/objects", "/tmp/r/refs"]);
        assert_eq!(t.check(&g, "/tmp/r", "HEAD", Change::Create), Ok(()));
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
            for name in ["config", "config.worktree", "commondir", "hooks", "CONFIG"] {
                for change in [Change::Create, Change::Write] {
                    assert!(t.check(&g, gitdir, name, change).is_err(), "{gitdir}/{name}");
                }
                assert_eq!(t.check(&g, gitdir, name, Change::Write), Err(Refusal::RepositoryConfig), "{gitdir}/{name}");
            }
            assert_eq!(
                t.check(&g, &format!("{gitdir}/hooks"), "pre-commit", Change::Write),
                Err(Refusal::RepositoryConfig)
            );
            assert_eq!(
                t.check(&g, &format!("{gitdir}/hooks/deep"), "x", Change::Create),
                Err(Refusal::RepositoryConfig)
            );
            // What git writes in daily work stays writable: the index, objects, refs, logs.
            for name in ["index", "index.lock", "config.lock", "COMMIT_EDITMSG", "FETCH_HEAD", "packed-refs"] {
                assert_eq!(t.check(&g, gitdir, name, Change::Create), Ok(()), "{gitdir}/{name}");
            }
            assert_eq!(t.check(&g, &format!("{gitdir}/objects/ab"), "cdef", Change::Create), Ok(()));
            assert_eq!(t.check(&g, &format!("{gitdir}/refs/heads"), "main", Change::Write), Ok(()));
        }
        // A directory named hooks that is not in a git directory is ordinary.
        assert_eq!(t.check(&g, "/p/src/hooks", "useThing.ts", Change::Create), Ok(()));
        // The work tree of a nested clone is ordinary too.
        assert_eq!(t.check(&g, "/p/vendor/clone/src", "main.c", Change::Write), Ok(()));
    }

    #[test]
    fn a_git_directory_renamed_under_the_guard_still_answers_for_itself() {
        // The guard read the path `/p/vendor/clone/.git`, then the jail renamed that directory
        // to `t`: the checks ask the directory the guard holds, which is still a repository.
        let g = guarded();
        let tree = std::rc::Rc::new(repo("/p/vendor/clone/t").iter().map(PathBuf::from).collect::<BTreeSet<_>>());
        let held = At(tree.clone(), PathBuf::from("/p/vendor/clone/t"));
        let stale = Path::new("/p/vendor/clone/.git");
        assert_eq!(g.check(&held, stale, "config", Change::Write), Err(Refusal::RepositoryConfig));
        let hooks = At(tree, PathBuf::from("/p/vendor/clone/t/hooks"));
        let stale = Path::new("/p/vendor/clone/.git/hooks");
        assert_eq!(g.check(&hooks, stale, "post-checkout", Change::Create), Err(Refusal::RepositoryConfig));
    }

    #[test]
    fn every_refusal_has_a_reason_and_an_audit_name() {
        for r in [Refusal::NestedRepository, Refusal::NewRepository, Refusal::RepositoryConfig] {
            assert!(r.reason().len() > 40 && !r.reason().contains('\n'));
            assert!(!r.check().is_empty());
        }
    }
}
