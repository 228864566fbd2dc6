//! Symbolic links the jail leaves where a program outside it follows them later (review of
//! the agents' homes, A1 and A2):
//! - in an agent's state entries (`~/.gemini/history/<id>/.gitignore -> ~/.bashrc`): the agent
//!   started outside writes its fixed names there, and writes through the link. A link there
//!   must lead to a place inside the same entry.
//! - anywhere the jail writes, to a hidden path (`.gitignore -> ~/.ssh/id_ed25519`): nothing
//!   inside, but a tool outside that copies the file copies the secret into a tree the next
//!   jail reads. A link may not lead into a hidden path.
//!
//! The git guard refuses making such a link (`symlink`, a hard link or a rename of one, judged
//! where it lands), and once the session has ended `sweep` removes the ones made during it
//! (ctime, which no process can set back) that lead there now: a link that became one
//! through another change (a link it passes through made afterwards, a directory moved) and,
//! under the Landlock backend, which has no guard, every one.

pub use crate::plan::LinkPlan;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Links followed at most while resolving one (the kernel's own limit).
const MAX_LINKS: usize = 40;
/// Entries the exit sweep looks at, in all: past it the rest is not swept (said on stderr).
const MAX_SWEPT: usize = 200_000;

/// Where a link's target leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// This path (links on the way followed, a missing name taken as it is).
    At(PathBuf),
    /// Into this hidden path.
    Hidden(PathBuf),
    /// More than `MAX_LINKS` links on the way.
    TooDeep,
}

/// Why a link may not stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bad {
    /// It leads out of the state entry it is in (named).
    OutOfState(PathBuf),
    /// It leads into a hidden path.
    Hidden,
    /// Where it leads cannot be told.
    TooDeep,
}

impl Bad {
    /// The line the jail's process gets.
    pub fn reason(&self) -> String {
        match self {
            Bad::OutOfState(s) => format!(
                "a symlink in the agent's state ({}) may lead only to a place inside it: the agent started outside \
                 the jail writes its files there and would write through it",
                s.display()
            ),
            Bad::Hidden => "a symlink may not lead into a path the sandbox hides (a key, a login): a tool outside the \
                            jail that copies it would copy the secret where the next jail reads it"
                .into(),
            Bad::TooDeep => format!("a symlink whose target passes more than {MAX_LINKS} symlinks cannot be checked"),
        }
    }

    /// Short name for the audit log.
    pub fn check(&self) -> &'static str {
        match self {
            Bad::OutOfState(_) => "state-link",
            Bad::Hidden => "hidden-link",
            Bad::TooDeep => "link-unchecked",
        }
    }
}

/// Where the link target `target`, in the directory `dir` (absolute, its own links resolved),
/// leads: links on the way are read with `read_link` (None: not a link, or missing) and
/// followed as the kernel would, `..` after them included; a hidden path is not looked into.
pub fn resolve(
    dir: &Path,
    target: &Path,
    hidden: &dyn Fn(&Path) -> bool,
    read_link: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Resolved {
    let mut cur = if target.is_absolute() { PathBuf::from("/") } else { dir.to_path_buf() };
    if hidden(&cur) {
        return Resolved::Hidden(cur);
    }
    let mut todo: Vec<OsString> = target.iter().map(|c| c.to_os_string()).collect();
    todo.reverse();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match Path::new(&c).components().next() {
            None | Some(Component::CurDir) | Some(Component::RootDir) => continue,
            Some(Component::ParentDir) => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        cur.push(&c);
        if hidden(&cur) {
            return Resolved::Hidden(cur);
        }
        if let Some(t) = read_link(&cur) {
            links += 1;
            if links > MAX_LINKS {
                return Resolved::TooDeep;
            }
            cur.pop();
            if t.is_absolute() {
                cur = PathBuf::from("/");
            }
            todo.extend(t.iter().map(|c| c.to_os_string()).rev());
        }
    }
    Resolved::At(cur)
}

impl LinkPlan {
    fn is_hidden(&self, p: &Path) -> bool {
        self.hidden.iter().any(|h| p.starts_with(h))
    }

    /// The state entry `p` lies in (the innermost).
    pub fn state_of(&self, p: &Path) -> Option<&Path> {
        self.state.iter().filter(|s| p.starts_with(s)).max_by_key(|s| s.as_os_str().len()).map(PathBuf::as_path)
    }

    /// Whether a link in `dir` is judged at all (in a state entry or a tree the jail writes).
    pub fn covers(&self, dir: &Path) -> bool {
        self.state_of(dir).is_some() || self.trees.iter().any(|t| dir.starts_with(t))
    }

    /// A link to `target` in `dir` (absolute, resolved, as the jail names it): None if it may
    /// be there. Followed as the host follows it, where a tool outside reads it: from where
    /// `dir` really is, a tree or state entry the jail sees at another name (`real`) being a
    /// link to its real path there, so `..` climbs from the real directory (outside look at
    /// the guard's list, P1). `read_link` is asked by the jail's names.
    pub fn judge(&self, dir: &Path, target: &Path, read_link: &dyn Fn(&Path) -> Option<PathBuf>) -> Option<Bad> {
        if !self.covers(dir) {
            return None;
        }
        let hidden = |p: &Path| self.is_hidden(p) || self.is_hidden(&self.to_name(p));
        let read = |p: &Path| match self.real.iter().find(|r| r.name == p) {
            Some(r) => Some(r.real.clone()),
            None => read_link(&self.to_name(p)),
        };
        match resolve(&self.to_real(dir), target, &hidden, &read) {
            Resolved::TooDeep => Some(Bad::TooDeep),
            Resolved::Hidden(_) => Some(Bad::Hidden),
            Resolved::At(p) => match self.state_of(dir) {
                Some(s) if !self.to_name(&p).starts_with(s) => Some(Bad::OutOfState(s.to_path_buf())),
                _ => None,
            },
        }
    }

    /// `p` where the host has it: below a root the jail sees at another name, its real path.
    fn to_real(&self, p: &Path) -> PathBuf {
        self.remap(p, |r| (&r.name, &r.real))
    }

    /// `p` by the jail's names: below a root's real path, its name.
    fn to_name(&self, p: &Path) -> PathBuf {
        self.remap(p, |r| (&r.real, &r.name))
    }

    /// `p` below the innermost root's `from` side, moved to its `to` side (`p` if none).
    fn remap(&self, p: &Path, sides: impl Fn(&crate::plan::RealRoot) -> (&PathBuf, &PathBuf)) -> PathBuf {
        self.real
            .iter()
            .map(&sides)
            .filter_map(|(from, to)| p.strip_prefix(from).ok().map(|rest| (from, to, rest)))
            .max_by_key(|(from, _, _)| from.as_os_str().len())
            .map_or_else(|| p.to_path_buf(), |(_, to, rest)| to.join(rest))
    }
}

/// What `std::fs::read_link` says, for a path that is a link.
pub fn host_read_link(p: &Path) -> Option<PathBuf> {
    std::fs::read_link(p).ok()
}

/// A link the sweep removed (or could not).
#[derive(Debug)]
pub struct Swept {
    pub path: PathBuf,
    pub target: PathBuf,
    pub why: Bad,
    pub removed: Result<(), String>,
}

/// What the jail's PID 1 said of the links the git guard made: that it made none
/// (`Msg::NoLinks`), or nothing.
#[derive(Debug, Default)]
pub struct Heard {
    no_links: bool,
}

impl Heard {
    pub fn no_links(&mut self) {
        self.no_links = true;
    }

    /// Whether the trees need no walk: the guard made no symlink where the check looks.
    pub fn none_made(&self) -> bool {
        self.no_links
    }
}

/// After the session: every link in the plan's state entries and trees made or moved since
/// `since` (its ctime, seconds and nanoseconds) that leads where `judge` refuses is removed:
/// the state entries and trees are walked. Not when `nothing_new`: the git guard made no
/// symlink there and no other session of the user ran meanwhile, so the walk would find no
/// link made or moved during the session but the user's own (`guard::made`,
/// `jail::running`): such a session walks no tree (issue 35). Returns the links, and whether
/// the walk stopped at `MAX_SWEPT` entries or at a directory it could not read.
pub fn sweep(plan: &LinkPlan, since: (i64, i64), nothing_new: bool) -> (Vec<Swept>, bool) {
    if nothing_new {
        return (vec![], false);
    }
    sweep_trees(plan, since)
}

/// Every state entry and tree, walked.
fn sweep_trees(plan: &LinkPlan, since: (i64, i64)) -> (Vec<Swept>, bool) {
    let mut out = vec![];
    let mut seen = 0usize;
    // The state entries first: the trees may hold them (a home granted whole). The trees are
    // walked under the guard too: it judges each link as it is made, but a link made later
    // can change where an earlier one leads (`d -> .` under `l -> d/../.ssh/x`: outside
    // review of A2 under userns, F3), which only a look at the end sees.
    let mut roots: Vec<&PathBuf> = plan.state.iter().collect();
    for t in plan.trees.iter() {
        if !roots.iter().any(|r| t.starts_with(r)) {
            roots.push(t);
        }
    }
    let mut done: Vec<&Path> = vec![];
    let mut unlooked = false;
    for root in roots {
        if done.iter().any(|d| root.starts_with(d)) {
            continue;
        }
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let rd = match listed(&dir) {
                Ok(Some(rd)) => rd,
                Ok(None) => continue,
                Err(()) => {
                    unlooked = true;
                    continue;
                }
            };
            for e in rd.flatten() {
                seen += 1;
                if seen > MAX_SWEPT {
                    return (out, true);
                }
                let Ok(ft) = e.file_type() else { continue };
                let p = e.path();
                if ft.is_dir() {
                    // A state entry below a tree is swept once, as a state entry.
                    if !plan.state.iter().any(|s| *s == p && s != root) {
                        stack.push(p);
                    }
                    continue;
                }
                if !ft.is_symlink() {
                    continue;
                }
                let Ok(meta) = std::fs::symlink_metadata(&p) else { continue };
                if (meta.ctime(), meta.ctime_nsec()) < since {
                    continue;
                }
                let Ok(target) = std::fs::read_link(&p) else { continue };
                if let Some(why) = plan.judge(&dir, &target, &host_read_link) {
                    let removed = remove_link(&p);
                    out.push(Swept { path: p, target, why, removed });
                }
            }
        }
        done.push(root);
    }
    (out, unlooked)
}

/// A directory's entries for the sweep. One the jail made unreadable to its owner (`chmod
/// 0311`: paths through it still resolve, its links still lead where they lead) is given its
/// owner's read and search bits back first, and said (second outside look at A2 under
/// userns, N1). None if it is gone; an error if it still cannot be listed (the caller says
/// links were not checked).
fn listed(dir: &Path) -> Result<Option<std::fs::ReadDir>, ()> {
    match std::fs::read_dir(dir) {
        Ok(rd) => return Ok(Some(rd)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() != std::io::ErrorKind::PermissionDenied => return Err(()),
        Err(_) => {}
    }
    readable_again(dir)?;
    eprintln!(
        "agent-sandbox: {}: the jail left it unreadable to you; made readable again (u+rx) to look for the links it \
         left",
        dir.display()
    );
    std::fs::read_dir(dir).map(Some).map_err(drop)
}

/// Gives the user's directory at `dir` its owner's read and search bits. What is at the path
/// now, not followed if it is a link, is what is looked at and changed: a directory swapped
/// for a link to a file between a look and a change by path would have the file take the
/// directory's mode (outside look at the list of links, F3: the key made 0777).
fn readable_again(dir: &Path) -> Result<(), ()> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(dir, flags, nix::sys::stat::Mode::empty()).map_err(drop)?;
    let st = nix::sys::stat::fstat(&fd).map_err(drop)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR || st.st_uid != nix::unistd::getuid().as_raw() {
        return Err(());
    }
    let mode = nix::sys::stat::Mode::from_bits_truncate((st.st_mode & 0o7777) | 0o500);
    let own = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    nix::sys::stat::fchmodat(nix::fcntl::AT_FDCWD, own.as_str(), mode, nix::sys::stat::FchmodatFlags::FollowSymlink)
        .map_err(drop)
}

/// Removes `p` if it is (still) a link: never what it points to.
fn remove_link(p: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(p).map_err(|e| e.to_string()),
        Ok(_) => Err("no longer a symlink".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The session's start, as a ctime to compare with: 10 ms early, since the kernel stamps
/// files from a coarse clock that lags the one read here by up to a tick. A link the user
/// made on the host in those 10 ms counts as the session's.
pub fn start_stamp() -> (i64, i64) {
    let now = std::time::SystemTime::now()
        .checked_sub(std::time::Duration::from_millis(10))
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default();
    (now.as_secs() as i64, i64::from(now.subsec_nanos()))
}

/// One line per removed link and an audit record of each.
pub fn report(swept: &[Swept], stopped: bool, audit: &crate::audit::AuditLog) {
    for s in swept {
        let mut r = audit.record("fs_denied");
        r.check = Some(format!("{}: removed at exit", s.why.check()));
        r.path = Some(s.path.display().to_string());
        audit.write(&r);
        match &s.removed {
            Ok(()) => eprintln!(
                "agent-sandbox: removed the symlink {} -> {} the jail made: {}",
                s.path.display(),
                String::from_utf8_lossy(s.target.as_os_str().as_bytes()),
                s.why.reason()
            ),
            Err(e) => eprintln!(
                "agent-sandbox: warning: the symlink {} -> {} the jail made could not be removed ({e}): {}",
                s.path.display(),
                String::from_utf8_lossy(s.target.as_os_str().as_bytes()),
                s.why.reason()
            ),
        }
    }
    if stopped {
        eprintln!(
            "agent-sandbox: warning: the exit check of symlinks did not look everywhere (it stops after {MAX_SWEPT} \
             entries, and at a directory it cannot read): links there were not checked"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan() -> LinkPlan {
        LinkPlan {
            state: vec!["/h/.gemini/history".into(), "/h/.claude/projects/-p".into()],
            hidden: vec!["/h/.ssh".into(), "/h/.aws".into()],
            trees: vec!["/p".into(), "/h/.gemini".into()],
            real: vec![],
        }
    }

    /// A tree the jail sees at a name that is a symlink on the host, at another depth
    /// (`/h/deep/scratch -> /srv/r`): a link's `..` climbs from `/srv/r` as a tool outside
    /// follows it, so `../../h/.ssh/id` leads to the key there, whatever it reads as in the jail
    /// (`/h/h/.ssh/id`); and a path through the name leads where the name does (outside look,
    /// P1).
    #[test]
    fn a_link_in_a_tree_the_jail_names_otherwise_is_followed_as_the_host_follows_it() {
        let mut p = plan();
        p.trees.push("/h/deep/scratch".into());
        p.state.push("/h/deep/scratch/entry".into());
        let none = links(&[]);
        assert_eq!(judge(&p, &none, "/h/deep/scratch", "../../h/.ssh/id"), None, "read from the name: as before");
        p.real.push(crate::plan::RealRoot { name: "/h/deep/scratch".into(), real: "/srv/r".into() });
        assert_eq!(judge(&p, &none, "/h/deep/scratch", "../../h/.ssh/id"), Some(Bad::Hidden));
        assert_eq!(judge(&p, &none, "/h/deep/scratch/sub", "../../../h/.ssh/id"), Some(Bad::Hidden));
        assert_eq!(judge(&p, &none, "/h/deep/scratch", "../h/.ssh/id"), None, "/srv/h/.ssh/id: not the key");
        assert_eq!(judge(&p, &none, "/h/deep/scratch", "sub/x"), None);
        assert_eq!(judge(&p, &none, "/p", "/h/deep/scratch/../../h/.ssh/id"), Some(Bad::Hidden));
        // A state entry below it stays its own by the jail's names.
        assert_eq!(judge(&p, &none, "/h/deep/scratch/entry", "x/y"), None);
        assert_eq!(
            judge(&p, &none, "/h/deep/scratch/entry", "../x"),
            Some(Bad::OutOfState("/h/deep/scratch/entry".into()))
        );
        // A link the jail made under the name is read by the name.
        let l = links(&[("/h/deep/scratch/up", "../..")]);
        assert_eq!(judge(&p, &l, "/h/deep/scratch", "up/h/.ssh/id"), Some(Bad::Hidden));
    }

    fn links(pairs: &[(&str, &str)]) -> HashMap<PathBuf, PathBuf> {
        pairs.iter().map(|(a, b)| (PathBuf::from(a), PathBuf::from(b))).collect()
    }

    fn judge(p: &LinkPlan, l: &HashMap<PathBuf, PathBuf>, dir: &str, target: &str) -> Option<Bad> {
        p.judge(Path::new(dir), Path::new(target), &|q| l.get(q).cloned())
    }

    #[test]
    fn a_link_in_state_must_stay_in_its_entry() {
        let p = plan();
        let none = links(&[]);
        let out = Some(Bad::OutOfState("/h/.gemini/history".into()));
        assert_eq!(judge(&p, &none, "/h/.gemini/history/proj", "../../../.bashrc"), out);
        assert_eq!(judge(&p, &none, "/h/.gemini/history/proj", "/h/.bashrc"), out);
        assert_eq!(judge(&p, &none, "/h/.gemini/history/proj", "../other/x"), None);
        assert_eq!(judge(&p, &none, "/h/.gemini/history/proj", "/h/.gemini/history/proj/a"), None);
        assert_eq!(judge(&p, &none, "/h/.claude/projects/-p", "sub/../x.txt"), None);
        // Through a link on the way: judged where it really leads.
        let l = links(&[("/h/.gemini/history/proj/up", "/h")]);
        assert_eq!(judge(&p, &l, "/h/.gemini/history/proj", "up/.bashrc"), out);
        // A link outside state and to nothing hidden is anyone's.
        assert_eq!(judge(&p, &none, "/p/src", "../../etc/hosts"), None);
        assert_eq!(judge(&p, &none, "/tmp", "/h/.ssh/id"), None, "not a tree the jail keeps");
    }

    #[test]
    fn a_link_into_a_hidden_path_is_refused_however_spelled() {
        let p = plan();
        let none = links(&[]);
        for t in ["/h/.ssh/id_ed25519", "../h/.ssh", "../h/./.aws/credentials", "/h/x/../.ssh/id"] {
            assert_eq!(judge(&p, &none, "/p", t), Some(Bad::Hidden), "{t}");
        }
        // Through a link the project holds (the user's own `home -> /h`).
        let l = links(&[("/p/home", "/h")]);
        assert_eq!(judge(&p, &l, "/p/src", "../home/.ssh/id"), Some(Bad::Hidden));
        assert_eq!(judge(&p, &l, "/p/src", "../home/.sshx"), None, "a sibling with a common prefix");
        // A loop cannot be checked.
        let l = links(&[("/p/a", "b"), ("/p/b", "a")]);
        assert_eq!(judge(&p, &l, "/p", "a"), Some(Bad::TooDeep));
    }

    #[test]
    fn the_sweep_removes_only_new_links_that_lead_out() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = d.path().canonicalize().expect("canonical");
        let state = root.join("state");
        let proj = root.join("proj");
        let secret = root.join("secret");
        for p in [&state, &proj, &secret, &state.join("p")] {
            std::fs::create_dir_all(p).expect("mkdir");
        }
        std::os::unix::fs::symlink(root.join("bashrc"), state.join("p/old")).expect("link");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let since = start_stamp();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let plan = LinkPlan {
            state: vec![state.clone()],
            hidden: vec![secret.clone()],
            trees: vec![proj.clone()],
            real: vec![],
        };
        std::os::unix::fs::symlink("../../bashrc", state.join("p/.gitignore")).expect("link");
        std::os::unix::fs::symlink("x", state.join("p/inside")).expect("link");
        std::os::unix::fs::symlink(secret.join("key"), proj.join("key")).expect("link");
        std::os::unix::fs::symlink("src/a.rs", proj.join("main.rs")).expect("link");
        let (swept, stopped) = sweep(&plan, since, false);
        assert!(!stopped);
        let mut gone: Vec<PathBuf> = swept.iter().map(|s| s.path.clone()).collect();
        gone.sort();
        assert_eq!(gone, vec![proj.join("key"), state.join("p/.gitignore")]);
        assert!(swept.iter().all(|s| s.removed.is_ok()));
        for kept in [state.join("p/old"), state.join("p/inside"), proj.join("main.rs")] {
            assert!(std::fs::symlink_metadata(&kept).is_ok(), "{}", kept.display());
        }
        // Where the guard made no link, nothing is walked (`unlisted` stays); after one, the
        // trees are (outside review, F3: a link made later changes where an earlier one leads).
        std::os::unix::fs::symlink(secret.join("key"), proj.join("unlisted")).expect("link");
        let (swept, stopped) = sweep(&plan, since, true);
        assert!(swept.is_empty() && !stopped);
        assert!(std::fs::symlink_metadata(proj.join("unlisted")).is_ok());
        let (swept, _) = sweep(&plan, since, false);
        assert_eq!(swept.iter().map(|s| s.path.clone()).collect::<Vec<_>>(), [proj.join("unlisted")]);
    }

    /// The owner's bits are given back to the directory at the path, never to what a link
    /// there leads to (outside look, F3: a directory swapped for a link to the key between
    /// the look and the change made the key 0777).
    #[test]
    fn only_a_directory_itself_is_made_readable_again() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().expect("tempdir");
        let (shut, key, link) = (d.path().join("shut"), d.path().join("key"), d.path().join("link"));
        std::fs::create_dir(&shut).expect("mkdir");
        std::fs::set_permissions(&shut, std::fs::Permissions::from_mode(0o200)).expect("chmod");
        std::fs::write(&key, "k").expect("write");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::os::unix::fs::symlink(&key, &link).expect("link");
        let mode = |p: &Path| std::fs::symlink_metadata(p).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0);
        assert!(readable_again(&link).is_err());
        assert_eq!(mode(&key), 0o600);
        assert!(readable_again(&key).is_err(), "not a directory");
        assert!(readable_again(&shut).is_ok());
        assert_eq!(mode(&shut), 0o700);
    }
}
