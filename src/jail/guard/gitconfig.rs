//! The entries a repository the jail made or changed may hold (the format itself, read as
//! git's config.c reads it, is `crate::gitconfig`): those through which the user's git cannot
//! run a program. The guard installs only bytes this module wrote, so a difference between
//! this reader and git's can change what a value reads as, never smuggle in a key: a new
//! repository's config is spelled again in one unambiguous form, and a repository that was
//! there before keeps its own bytes with the new entries appended in that form. Pure.

pub use crate::gitconfig::{parse, write, Entry, SyntaxError, MAX_CONFIG};
use std::path::{Component, Path, PathBuf};

impl From<SyntaxError> for Rejection {
    fn from(e: SyntaxError) -> Rejection {
        Rejection::Syntax { line: e.line }
    }
}

/// Why a config is not installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Not a config git would read (the line, from 1).
    Syntax {
        line: usize,
    },
    /// An entry this repository may not hold.
    Key {
        name: String,
        why: &'static str,
    },
    /// An entry of a repository that was there before the session removed or changed.
    Changed {
        name: String,
    },
    TooLarge,
}

impl Rejection {
    pub fn describe(&self) -> String {
        match self {
            Rejection::Syntax { line } => format!("line {line} of the new config is not git's config syntax"),
            Rejection::Key { name, why } => format!("`{name}` cannot be set in a repository here: {why}"),
            Rejection::Changed { name } => format!(
                "`{name}` was in this repository's config before the session: entries can be added to it, not changed or removed"
            ),
            Rejection::TooLarge => format!("a config larger than {MAX_CONFIG} bytes"),
        }
    }
}

/// Where the config is: its git directory and the guarded tree it is in (paths as the jail
/// sees them, which are the host's).
pub struct Place<'a> {
    pub gitdir: &'a Path,
    pub root: &'a Path,
}

/// What the new config is checked against.
pub enum Base<'a> {
    /// A repository the jail made: every entry is checked; the file is written anew.
    New,
    /// A repository that was there (its config's bytes, empty if none): entries may only be
    /// added, each checked; the file keeps these bytes and gets the new entries after them.
    Existing(&'a [u8]),
}

/// For a config written directly (a copy of a repository: `cp -r`, `tar x`), where the writer
/// cannot be refused once it wrote: the bytes to install, keeping what may be kept, and the
/// entries left out. A repository that was there keeps its config unless the new one only
/// adds to it (then the allowed additions are kept).
pub fn keep_allowed(new: &[u8], base: Base, place: &Place) -> Result<(Vec<u8>, Vec<String>), Rejection> {
    if new.len() > MAX_CONFIG {
        return Err(Rejection::TooLarge);
    }
    let entries = parse(new)?;
    let (kept, dropped): (Vec<Entry>, Vec<Entry>) = match &base {
        Base::New => entries.into_iter().partition(|e| check(e, place).is_ok()),
        Base::Existing(old) => {
            let before = parse(old)?;
            let added = additions(&before, entries)?;
            let mut all = before.clone();
            let (keep, drop): (Vec<Entry>, Vec<Entry>) = added.into_iter().partition(|e| check(e, place).is_ok());
            all.extend(keep);
            (all, drop)
        }
    };
    let dropped: Vec<String> = dropped.iter().map(Entry::name).collect();
    let bytes = match base {
        Base::New => write(&kept),
        Base::Existing(old) => {
            let n = parse(old)?.len();
            append(old, &kept[n..])?
        }
    };
    Ok((bytes, dropped))
}

/// The bytes to install in place of `new`, or why not.
pub fn sanitise(new: &[u8], base: Base, place: &Place) -> Result<Vec<u8>, Rejection> {
    if new.len() > MAX_CONFIG {
        return Err(Rejection::TooLarge);
    }
    let entries = parse(new)?;
    match base {
        Base::New => {
            for e in &entries {
                check(e, place)?;
            }
            Ok(write(&entries))
        }
        Base::Existing(old) => {
            let added = additions(&parse(old)?, entries)?;
            for e in &added {
                check(e, place)?;
            }
            append(old, &added)
        }
    }
}

/// The entries of `new` that `before` does not have (as a multiset), or the first of
/// `before`'s that `new` lost.
fn additions(before: &[Entry], new: Vec<Entry>) -> Result<Vec<Entry>, Rejection> {
    let mut left: Vec<Option<&Entry>> = before.iter().map(Some).collect();
    let mut added = vec![];
    for e in new {
        match left.iter_mut().find(|l| l.is_some_and(|o| *o == e)) {
            Some(slot) => *slot = None,
            None => added.push(e),
        }
    }
    if let Some(gone) = left.into_iter().flatten().next() {
        return Err(Rejection::Changed { name: gone.name() });
    }
    Ok(added)
}

/// `old`'s bytes with `added` after them, or an error where git would read the result as
/// anything else than the old entries then the added ones.
fn append(old: &[u8], added: &[Entry]) -> Result<Vec<u8>, Rejection> {
    if added.is_empty() {
        return Ok(old.to_vec());
    }
    // What follows the old bytes starts on a line of its own; a blank line ends a value the
    // old bytes leave continued by a trailing backslash.
    let mut out = old.to_vec();
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    if !out.is_empty() {
        out.push(b'\n');
    }
    out.extend(write(added));
    // And the result is read back: exactly the old entries, then the added ones. Where the old
    // bytes would swallow or shift what is appended, nothing is installed.
    let mut want = parse(old)?;
    want.extend(added.iter().cloned());
    if parse(&out)? != want {
        return Err(Rejection::Syntax { line: old.split(|b| *b == b'\n').count() });
    }
    Ok(out)
}

// ---- What a repository's config may hold --------------------------------------------

/// Whether an entry has a subsection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sub {
    No,
    Yes,
    Either,
}

/// A check of the value, beyond the name.
#[derive(Clone, Copy)]
enum Value {
    Any,
    /// A remote's address: not a transport helper's `name::` form (`ext::sh -c ...` runs a
    /// command where the user's protocol policy allows it), nor an option.
    Url,
    /// `submodule.<name>.update`: a mode, never `!command`.
    UpdateMode,
    /// `core.worktree`: a relative path that stays inside the guarded tree.
    InsideTree,
}

/// The entries a repository's config may hold: what git itself writes (`init`, `clone`,
/// `worktree`, `submodule`, `remote`, `branch`) and settings that only choose among git's own
/// behaviours. Absent on purpose, since the user's git runs what they name or reads a file
/// they name: `core.fsmonitor`, `core.hooksPath`, `core.sshCommand`, `core.editor`,
/// `core.pager`, `core.askPass`, `core.gitProxy`, `core.alternateRefsCommand`, `alias.*`,
/// `include.*`, `includeIf.*`, `filter.*`, `diff.external` and `diff.<driver>.*`,
/// `merge.<driver>.*`, `credential.*`, `gpg.*`, `sequence.editor`, `pager.*`, `sendemail.*`,
/// `remote.*.uploadpack`/`receivepack`/`vcs`/`proxy`, `protocol.*.allow`, `init.templateDir`,
/// `gc.recentObjectsHook`, `trace2.*`, `lfs.customtransfer.*`, `*.tool`/`difftool.*`/
/// `mergetool.*`, `web.browser`, `trailer.*`, `uploadpack.packObjectsHook`.
const ALLOWED: &[(&str, Sub, &[&str], Value)] = &[
    (
        "core",
        Sub::No,
        &[
            "repositoryformatversion",
            "filemode",
            "bare",
            "logallrefupdates",
            "ignorecase",
            "precomposeunicode",
            "symlinks",
            "autocrlf",
            "safecrlf",
            "eol",
            "sharedrepository",
            "quotepath",
            "checkstat",
            "trustctime",
            "compression",
            "loosecompression",
            "bigfilethreshold",
            "packedgitlimit",
            "packedgitwindowsize",
            "deltabasecachelimit",
            "preloadindex",
            "untrackedcache",
            "splitindex",
            "sparsecheckout",
            "sparsecheckoutcone",
            "abbrev",
            "commentchar",
            "commentstring",
            "whitespace",
            "protectntfs",
            "protecthfs",
            "multipackindex",
            "commitgraph",
            "fsync",
            "fsyncmethod",
            "fsyncobjectfiles",
            "warnambiguousrefs",
            "longpaths",
            "filesreflocktimeout",
            "packedrefstimeout",
            "excludesfile",
            "attributesfile",
            "notesref",
            "hidedotfiles",
            "createobject",
        ],
        Value::Any,
    ),
    ("core", Sub::No, &["worktree"], Value::InsideTree),
    // git refuses a repository with an extension it does not know: none can run anything.
    ("extensions", Sub::No, &["*"], Value::Any),
    ("remote", Sub::Yes, &["url", "pushurl"], Value::Url),
    (
        "remote",
        Sub::Yes,
        &[
            "fetch",
            "push",
            "mirror",
            "tagopt",
            "prune",
            "prunetags",
            "promisor",
            "partialclonefilter",
            "skipdefaultupdate",
            "skipfetchall",
            "followremotehead",
        ],
        Value::Any,
    ),
    ("branch", Sub::Yes, &["remote", "merge", "rebase", "pushremote", "description"], Value::Any),
    ("branch", Sub::No, &["autosetupmerge", "autosetuprebase", "sort"], Value::Any),
    ("submodule", Sub::Yes, &["url"], Value::Url),
    ("submodule", Sub::Yes, &["update"], Value::UpdateMode),
    ("submodule", Sub::Yes, &["active", "branch", "fetchrecursesubmodules", "ignore", "shallow", "path"], Value::Any),
    (
        "submodule",
        Sub::No,
        &["active", "recurse", "fetchjobs", "alternatelocation", "alternateerrorstrategy", "propagatebranches"],
        Value::Any,
    ),
    ("user", Sub::No, &["name", "email", "signingkey", "useconfigonly"], Value::Any),
    ("author", Sub::No, &["name", "email"], Value::Any),
    ("committer", Sub::No, &["name", "email"], Value::Any),
    ("commit", Sub::No, &["gpgsign", "verbose", "cleanup", "status"], Value::Any),
    ("tag", Sub::No, &["gpgsign", "sort", "forcesignannotated"], Value::Any),
    ("init", Sub::No, &["defaultbranch"], Value::Any),
    ("pull", Sub::No, &["rebase", "ff"], Value::Any),
    (
        "push",
        Sub::No,
        &["default", "autosetupremote", "followtags", "recursesubmodules", "gpgsign", "usebitmaps", "negotiate"],
        Value::Any,
    ),
    (
        "fetch",
        Sub::No,
        &[
            "prune",
            "prunetags",
            "recursesubmodules",
            "fsckobjects",
            "writecommitgraph",
            "parallel",
            "negotiationalgorithm",
            "showforcedupdates",
            "output",
            "unpacklimit",
            "all",
        ],
        Value::Any,
    ),
    (
        "gc",
        Sub::No,
        &[
            "auto",
            "autopacklimit",
            "autodetach",
            "pruneexpire",
            "reflogexpire",
            "reflogexpireunreachable",
            "writecommitgraph",
            "worktreepruneexpire",
            "packrefs",
            "aggressivedepth",
            "aggressivewindow",
            "bigpackthreshold",
            "cruftpacks",
            "logexpiry",
            "rerereresolved",
            "rerereunresolved",
        ],
        Value::Any,
    ),
    ("gc", Sub::Yes, &["reflogexpire", "reflogexpireunreachable"], Value::Any),
    (
        "pack",
        Sub::No,
        &[
            "window",
            "depth",
            "windowmemory",
            "compression",
            "deltacachesize",
            "deltacachelimit",
            "threads",
            "indexversion",
            "packsizelimit",
            "usebitmaps",
            "usesparse",
            "writebitmaps",
            "writebitmaphashcache",
            "writebitmaplookuptable",
            "writereverseindex",
            "allowpackreuse",
        ],
        Value::Any,
    ),
    (
        "index",
        Sub::No,
        &["version", "threads", "recordendofindexentries", "recordoffsettable", "skiphash", "sparse"],
        Value::Any,
    ),
    (
        "status",
        Sub::No,
        &[
            "showuntrackedfiles",
            "submodulesummary",
            "relativepaths",
            "short",
            "branch",
            "aheadbehind",
            "renames",
            "renamelimit",
            "showstash",
            "displaycommentprefix",
        ],
        Value::Any,
    ),
    (
        "diff",
        Sub::No,
        &[
            "renames",
            "renamelimit",
            "algorithm",
            "indentheuristic",
            "mnemonicprefix",
            "noprefix",
            "relative",
            "submodule",
            "colormoved",
            "colormovedws",
            "ignoresubmodules",
            "statgraphwidth",
            "context",
            "interhunkcontext",
            "orderfile",
            "suppressblankempty",
            "wserrorhighlight",
            "dirstat",
        ],
        Value::Any,
    ),
    (
        "merge",
        Sub::No,
        &[
            "conflictstyle",
            "ff",
            "renames",
            "renamelimit",
            "log",
            "stat",
            "autostash",
            "verbosity",
            "directoryrenames",
            "renormalize",
        ],
        Value::Any,
    ),
    (
        "rebase",
        Sub::No,
        &[
            "autosquash",
            "autostash",
            "updaterefs",
            "missingcommitscheck",
            "abbreviatecommands",
            "stat",
            "instructionformat",
            "backend",
            "forkpoint",
        ],
        Value::Any,
    ),
    ("color", Sub::Either, &["*"], Value::Any),
    ("advice", Sub::No, &["*"], Value::Any),
    (
        "log",
        Sub::No,
        &[
            "date",
            "decorate",
            "follow",
            "showroot",
            "showsignature",
            "abbrevcommit",
            "mailmap",
            "excludedecoration",
            "initialdecorationset",
        ],
        Value::Any,
    ),
    ("rerere", Sub::No, &["enabled", "autoupdate"], Value::Any),
    (
        "lfs",
        Sub::No,
        &[
            "repositoryformatversion",
            "url",
            "pushurl",
            "fetchinclude",
            "fetchexclude",
            "locksverify",
            "setlockablereadonly",
        ],
        Value::Any,
    ),
    (
        "http",
        Sub::Either,
        &["sslverify", "postbuffer", "version", "lowspeedlimit", "lowspeedtime", "maxrequests", "extraheader"],
        Value::Any,
    ),
    ("maintenance", Sub::No, &["auto", "strategy"], Value::Any),
    ("maintenance", Sub::Yes, &["enabled", "schedule"], Value::Any),
    ("feature", Sub::No, &["manyfiles", "experimental"], Value::Any),
    ("checkout", Sub::No, &["defaultremote", "workers", "thresholdforparallelism", "guess"], Value::Any),
    ("worktree", Sub::No, &["guessremote", "userelativepaths"], Value::Any),
    ("protocol", Sub::No, &["version"], Value::Any),
    ("transfer", Sub::No, &["fsckobjects", "unpacklimit"], Value::Any),
    (
        "receive",
        Sub::No,
        &["denycurrentbranch", "denydeletes", "denynonfastforwards", "fsckobjects", "unpacklimit"],
        Value::Any,
    ),
    (
        "uploadpack",
        Sub::No,
        &["allowfilter", "allowanysha1inwant", "allowtipsha1inwant", "allowreachablesha1inwant"],
        Value::Any,
    ),
    ("fsck", Sub::No, &["*"], Value::Any),
    ("versionsort", Sub::No, &["suffix"], Value::Any),
    ("splitindex", Sub::No, &["maxpercentchange", "sharedindexexpire"], Value::Any),
    ("sparse", Sub::No, &["expectfilesoutsideofpatterns"], Value::Any),
];

const NOT_LISTED: &str = "it is not among the settings that cannot make git run a program";

/// Whether `e` may be in a repository's config at `place`.
fn check(e: &Entry, place: &Place) -> Result<(), Rejection> {
    let listed = ALLOWED.iter().find(|(section, sub, keys, _)| {
        *section == e.section
            && match sub {
                Sub::No => e.subsection.is_none(),
                Sub::Yes => e.subsection.is_some(),
                Sub::Either => true,
            }
            && keys.iter().any(|k| *k == "*" || *k == e.key)
    });
    let Some((_, _, _, value)) = listed else {
        return Err(Rejection::Key { name: e.name(), why: NOT_LISTED });
    };
    let v = e.value.as_deref().unwrap_or(b"");
    let bad = |why| Err(Rejection::Key { name: e.name(), why });
    match value {
        Value::Any => Ok(()),
        Value::Url => {
            if v.first() == Some(&b'-') {
                return bad("an address starting with `-` would reach the transport as an option");
            }
            // `<helper>::<address>` runs the program `git-remote-<helper>`.
            let scheme_end = v.iter().position(|c| !(c.is_ascii_alphanumeric() || b"+.-_".contains(c)));
            if scheme_end.is_some_and(|i| v[i..].starts_with(b"::")) {
                return bad("a `<transport>::` address runs a remote helper program");
            }
            Ok(())
        }
        Value::UpdateMode => match v {
            b"checkout" | b"rebase" | b"merge" | b"none" => Ok(()),
            _ => bad("only checkout, rebase, merge or none (a `!command` runs it)"),
        },
        Value::InsideTree => {
            let p = Path::new(std::ffi::OsStr::new(std::str::from_utf8(v).unwrap_or("/")));
            if p.is_absolute() || v.first() == Some(&b'-') {
                return bad("it must be a path relative to the repository, inside the project");
            }
            match lexical_join(place.gitdir, p) {
                Some(j) if j.starts_with(place.root) => Ok(()),
                _ => bad("it must be a path relative to the repository, inside the project"),
            }
        }
    }
}

/// `base` joined with the relative `rel`, `..` taken lexically; None above `/`.
pub fn lexical_join(base: &Path, rel: &Path) -> Option<PathBuf> {
    let mut out = base.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> Place<'static> {
        Place { gitdir: Path::new("/p/sub/.git"), root: Path::new("/p") }
    }

    fn names(b: &[u8]) -> Vec<String> {
        parse(b).unwrap_or_default().iter().map(Entry::name).collect()
    }

    #[test]
    fn a_new_repository_keeps_what_git_writes_and_loses_nothing() {
        let clone = b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n\
[remote \"origin\"]\n\turl = https://example.org/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\
[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[submodule \"lib\"]\n\tactive = true\n\turl = ../lib.git\n";
        let out = sanitise(clone, Base::New, &place()).expect("a clone's config is allowed");
        assert_eq!(parse(&out).expect("parses"), parse(clone).expect("parses"));
        let sub = b"[core]\n\tworktree = ../../../lib\n";
        let p = Place { gitdir: Path::new("/p/.git/modules/lib"), root: Path::new("/p") };
        assert!(sanitise(sub, Base::New, &p).is_ok(), "a submodule's core.worktree");
    }

    /// Each of these makes the user's git run a program or read a file the jail names.
    #[test]
    fn keys_that_run_programs_are_refused_however_they_are_spelled() {
        for (cfg, key) in [
            (&b"[core]\n\tfsmonitor = touch /tmp/x\n"[..], "core.fsmonitor"),
            (b"[CORE]\n\tFsMonitor = x\n", "core.fsmonitor"),
            (b"[core]\n\thooksPath = .husky\n", "core.hookspath"),
            (b"[core]\n\tsshCommand = x\n", "core.sshcommand"),
            (b"[core]\n\tpager = x\n", "core.pager"),
            (b"[core]\n\teditor = x\n", "core.editor"),
            (b"[core]\n\taskPass = x\n", "core.askpass"),
            (b"[core]\n\talternateRefsCommand = x\n", "core.alternaterefscommand"),
            (b"[alias]\n\tst = !x\n", "alias.st"),
            (b"[include]\n\tpath = ../x\n", "include.path"),
            (b"[includeIf \"gitdir:/\"]\n\tpath = x\n", "includeif.gitdir:/.path"),
            (b"[filter \"f\"]\n\tclean = x\n", "filter.f.clean"),
            (b"[diff]\n\texternal = x\n", "diff.external"),
            (b"[diff \"d\"]\n\ttextconv = x\n", "diff.d.textconv"),
            (b"[merge \"m\"]\n\tdriver = x\n", "merge.m.driver"),
            (b"[credential]\n\thelper = x\n", "credential.helper"),
            (b"[gpg]\n\tprogram = x\n", "gpg.program"),
            (b"[sequence]\n\teditor = x\n", "sequence.editor"),
            (b"[remote \"o\"]\n\tuploadpack = x\n", "remote.o.uploadpack"),
            (b"[remote \"o\"]\n\treceivepack = x\n", "remote.o.receivepack"),
            (b"[protocol \"ext\"]\n\tallow = always\n", "protocol.ext.allow"),
            (b"[init]\n\ttemplateDir = x\n", "init.templatedir"),
            (b"[gc]\n\trecentObjectsHook = x\n", "gc.recentobjectshook"),
            (b"[trace2]\n\teventTarget = /home/u/.bashrc\n", "trace2.eventtarget"),
            (b"[lfs \"customtransfer.x\"]\n\tpath = x\n", "lfs.customtransfer.x.path"),
            (b"[pager]\n\tlog = x\n", "pager.log"),
            (b"[core.x]\n\tfsmonitor = y\n", "core.x.fsmonitor"),
        ] {
            match sanitise(cfg, Base::New, &place()) {
                Err(Rejection::Key { name, .. }) => assert_eq!(name, key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }

    #[test]
    fn values_that_run_programs_are_refused() {
        for cfg in [
            &b"[remote \"o\"]\n\turl = ext::sh -c touch% /tmp/x\n"[..],
            b"[remote \"o\"]\n\tpushurl = fd::3\n",
            b"[remote \"o\"]\n\turl = evil::x\n",
            b"[remote \"o\"]\n\turl = -oProxyCommand=x\n",
            b"[submodule \"s\"]\n\tupdate = !touch /tmp/x\n",
            b"[submodule \"s\"]\n\turl = ext::x\n",
            b"[core]\n\tworktree = /home/u\n",
            b"[core]\n\tworktree = ../../..\n",
        ] {
            assert!(
                matches!(sanitise(cfg, Base::New, &place()), Err(Rejection::Key { .. })),
                "{}",
                String::from_utf8_lossy(cfg)
            );
        }
        for ok in [
            &b"[remote \"o\"]\n\turl = https://h/r.git\n"[..],
            b"[remote \"o\"]\n\turl = git@github.com:a/b.git\n",
            b"[remote \"o\"]\n\turl = ../local\n",
            b"[remote \"o\"]\n\turl = C:/x\n",
        ] {
            assert!(sanitise(ok, Base::New, &place()).is_ok(), "{}", String::from_utf8_lossy(ok));
        }
    }

    #[test]
    fn a_repository_that_was_there_gets_entries_added_after_its_own_bytes() {
        let old = b"# mine\n[core]\n\tbare = false\n\thooksPath = /home/u/hooks\n";
        // git config submodule.x.url ...: git keeps the old bytes and adds a section.
        let new =
            b"# mine\n[core]\n\tbare = false\n\thooksPath = /home/u/hooks\n[submodule \"x\"]\n\turl = https://h/x\n";
        let out = sanitise(new, Base::Existing(old), &place()).expect("an addition");
        assert!(out.starts_with(old), "the user's own bytes, comments and keys stay");
        // Attack a5: the user's last value continued by a backslash would have swallowed the
        // appended header, so that an allowed `color.fsmonitor` read as `core.fsmonitor`.
        let continued = b"[core]\n\texcludesfile = /home/u/ignore \\\n";
        let smuggle = b"[core]\n\texcludesfile = /home/u/ignore \\\n\n[color]\n\tfsmonitor = touch x\n";
        if let Ok(out) = sanitise(smuggle, Base::Existing(continued), &place()) {
            assert!(
                !parse(&out).expect("parses").iter().any(|e| e.section == "core" && e.key == "fsmonitor"),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
        assert_eq!(names(&out), vec!["core.bare", "core.hookspath", "submodule.x.url"]);
        // The user's own hooksPath stays; a new one does not come in.
        let evil = b"# mine\n[core]\n\tbare = false\n\thooksPath = /home/u/hooks\n\tfsmonitor = x\n";
        assert!(matches!(sanitise(evil, Base::Existing(old), &place()), Err(Rejection::Key { .. })));
        // Changing or removing the user's entries is refused.
        let changed = b"[core]\n\tbare = true\n\thooksPath = /home/u/hooks\n";
        assert!(matches!(sanitise(changed, Base::Existing(old), &place()), Err(Rejection::Changed { .. })));
        // The same config again is installed as it was.
        assert_eq!(sanitise(old, Base::Existing(old), &place()).expect("same"), old.to_vec());
        // An old config ending in a continued value: what is appended is read as appended.
        let dangling = b"[core]\n\tx = a\\";
        let out = sanitise(b"[core]\n\tx = a\n[user]\n\tname = n\n", Base::Existing(dangling), &place()).expect("ok");
        assert_eq!(names(&out), vec!["core.x", "user.name"], "{}", String::from_utf8_lossy(&out));
    }

    #[test]
    fn every_allowed_section_is_lower_case_and_listed_once_per_shape() {
        for (section, _, keys, _) in ALLOWED {
            assert_eq!(*section, section.to_ascii_lowercase());
            for k in *keys {
                assert_eq!(*k, k.to_ascii_lowercase(), "{section}.{k}");
            }
        }
        // No allowed key is a prefix-extension of a refused one that a truncation could cut
        // back to: core.fsmonitor* is not allowed at all.
        assert!(!ALLOWED.iter().any(|(s, _, keys, _)| *s == "core" && keys.iter().any(|k| k.starts_with("fsmonitor"))));
    }
}
