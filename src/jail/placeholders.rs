//! Placeholders for protected paths that did not exist at start (`.git`, `.envrc`...): the
//! launcher creates them empty so the jail can bind them read-only, and removes the ones
//! still empty when the last session of the project ends. Sessions of one project share a
//! lock file in the user's state directory (hidden from every jail): each holds it shared
//! from before its plan is made to its end. A session that can take it exclusively, at its
//! end or at its start, is alone, and removes what any session recorded in the same file;
//! so a session that ended while another ran is cleaned up after by the next one alone.

use crate::plan::anchor::Anchor;
use crate::plan::Placeholder;
use agent_sandbox_sys::file::flock;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PlaceholderError {
    #[error("cannot use the session lock {}: {err}", path.display())]
    Lock { path: PathBuf, err: std::io::Error },
    #[error("cannot create the protected placeholder {}: {err}", path.display())]
    Create { path: PathBuf, err: std::io::Error },
    #[error(
        "cannot make {}{}, the agent's own entry in the home: {err}",
        path.display(),
        if real != path { format!(" (at {})", real.display()) } else { String::new() }
    )]
    HomeEntry { path: PathBuf, real: PathBuf, err: std::io::Error },
}

impl PlaceholderError {
    /// A path the plan checked is no longer what it checked (`anchor::Changed`).
    pub fn changed(&self) -> bool {
        match self {
            PlaceholderError::Lock { err, .. }
            | PlaceholderError::Create { err, .. }
            | PlaceholderError::HomeEntry { err, .. } => super::anchor::is_changed(err),
        }
    }

    pub fn fix(&self) -> Option<String> {
        match self {
            PlaceholderError::HomeEntry { real, .. } => Some(format!(
                "fix: look at {} and the directories above it (ls -la {}): the launcher follows no symbolic link \
                 there and replaces nothing; make the entry yourself (mkdir -p, or a file) or move what is in its \
                 way, and start again",
                real.display(),
                real.parent().unwrap_or(real).display()
            )),
            _ => None,
        }
    }
}

/// Makes the agent's missing directories in the home (`~/.codex`, `~/.pi/agent`; 0700) and
/// its missing files (`~/.claude.json`, holding `{}`; a `.jsonl` history, empty; 0600), each
/// where it really is (`real`: `plan::anchor::home_entries`, `~/.local/state/x` at
/// `/scratch/u/local/state/x` when `~/.local` is a link to there): every level made or
/// opened below the one before from `/`, no symlink followed (the jail of an earlier session
/// could write the levels that exist). They stay: they are the agent's own. Returns their
/// anchors: the bind or rule of each is held to the inode made or found here, not to a
/// name another session's jail could swap for a link before the jail is built.
pub fn make_home_entries(
    real: &[(PathBuf, PathBuf)],
    dirs: &[PathBuf],
    files: &[PathBuf],
) -> Result<Vec<Anchor>, PlaceholderError> {
    let mut anchors = vec![];
    let entries = dirs.iter().map(|d| (d, true)).chain(files.iter().map(|f| (f, false)));
    for (path, dir) in entries {
        let at = real.iter().find(|(p, _)| p == path).map_or(path.as_path(), |(_, r)| r.as_path());
        let err = |err| PlaceholderError::HomeEntry { path: path.clone(), real: at.to_path_buf(), err };
        // A JSON file holds `{}`; any other (a `.jsonl` history) is empty.
        let text: &[u8] = if path.extension().is_some_and(|e| e == "json") { b"{}\n" } else { b"" };
        let made = if dir { Made::Dir(0o700) } else { Made::File(0o600, text) };
        let fd = make_from_root(at, made).map_err(err)?;
        anchors.push(super::anchor::anchor_made(path, at, &fd).map_err(err)?);
    }
    Ok(anchors)
}

/// Makes `real` (absolute, plain names) and its missing parents (0700) from `/`, following
/// no symlink at any level, keeping what is there already; its descriptor (`O_PATH`), which
/// must be of the kind asked.
fn make_from_root(real: &Path, made: Made<'_>) -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{mkdirat, Mode};
    let invalid = || std::io::Error::from_raw_os_error(libc::EINVAL);
    let rel = real.strip_prefix("/").map_err(|_| invalid())?;
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else { return Err(invalid()) };
    let mut cur = open("/", OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
    for c in parent.components() {
        let level = Path::new(c.as_os_str());
        cur = match super::anchor::open_exact(&cur, level) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                match mkdirat(&cur, level, Mode::from_bits_truncate(0o700)) {
                    Ok(()) | Err(nix::Error::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                super::anchor::open_exact(&cur, level)?
            }
            r => r?,
        };
    }
    let want = match made {
        Made::Dir(_) => libc::S_IFDIR,
        Made::File(..) => libc::S_IFREG,
    };
    match make_in(&cur, name, made) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let fd = super::anchor::open_exact(&cur, Path::new(name))?;
    if nix::sys::stat::fstat(&fd)?.st_mode & libc::S_IFMT != want {
        let e = if want == libc::S_IFDIR { libc::ENOTDIR } else { libc::EISDIR };
        return Err(std::io::Error::from_raw_os_error(e));
    }
    Ok(fd)
}

/// Files made in the home before the session holding a text of the plan's (Gemini CLI's
/// `.project_root`, 0644), if missing, where they really are (`real`, as for
/// `make_home_entries`), no symlink followed; their anchors.
pub fn make_home_texts(
    real: &[(PathBuf, PathBuf)],
    texts: &[(PathBuf, String)],
) -> Result<Vec<Anchor>, PlaceholderError> {
    let mut anchors = vec![];
    for (path, text) in texts {
        let at = real.iter().find(|(p, _)| p == path).map_or(path.as_path(), |(_, r)| r.as_path());
        let err = |err| PlaceholderError::HomeEntry { path: path.clone(), real: at.to_path_buf(), err };
        let fd = make_from_root(at, Made::File(0o644, text.as_bytes())).map_err(err)?;
        anchors.push(super::anchor::anchor_made(path, at, &fd).map_err(err)?);
    }
    Ok(anchors)
}

/// A JSON name's placeholder: an empty object, which the agents read as no settings.
const JSON_PLACEHOLDER: &[u8] = b"{}\n";

/// What `create_beneath` makes: a directory, or a new file with its contents.
enum Made<'a> {
    Dir(u32),
    File(u32, &'a [u8]),
}

/// Makes `path` below `root` without following a symlink on the way (a jail of another
/// session could have swapped a directory for a link since the plan was made), and never
/// over something that exists (AlreadyExists).
fn create_beneath(root: &Path, path: &Path, made: Made<'_>) -> std::io::Result<()> {
    use nix::fcntl::{open, OFlag};
    let root_fd = open(root, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())?;
    create_beneath_at(root, &root_fd, path, made)
}

/// `create_beneath` below `root` opened already (`root_fd`: as the plan checked it).
fn create_beneath_at(root: &Path, root_fd: &std::os::fd::OwnedFd, path: &Path, made: Made<'_>) -> std::io::Result<()> {
    let invalid = || std::io::Error::from_raw_os_error(libc::EINVAL);
    let rel = path.strip_prefix(root).map_err(|_| invalid())?;
    let name = rel.file_name().ok_or_else(invalid)?;
    let dir = super::mounts::open_beneath_at(root_fd, rel.parent().unwrap_or(Path::new("")))?;
    make_in(&dir, name, made)
}

/// Makes `name` in the directory `dir`, never over anything there (AlreadyExists).
fn make_in(dir: &std::os::fd::OwnedFd, name: &std::ffi::OsStr, made: Made<'_>) -> std::io::Result<()> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{mkdirat, Mode};
    match made {
        Made::Dir(mode) => mkdirat(dir, name, Mode::from_bits_truncate(mode))?,
        Made::File(mode, contents) => {
            let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            File::from(openat(dir, name, flags, Mode::from_bits_truncate(mode))?).write_all(contents)?;
        }
    }
    Ok(())
}

/// A shared hold on the project's placeholder registry, from before planning to the end.
pub struct ProjectLock {
    file: File,
    project: PathBuf,
    /// The cleanup waiter has its orders (and a copy of this lock): it releases once we exited.
    handed: bool,
    /// Clean up at `finish` even so (see `finish_here`).
    here: bool,
    /// Files of the session to remove once the launcher is gone, however it ended (the
    /// chaperon's socket: a killed launcher would leave it behind).
    remove_after: Vec<PathBuf>,
    /// The waiter's tasks to run once the launcher is gone (`waiter::Task`), with their
    /// arguments: what the session's chaperon could not end itself.
    run_after: Vec<(String, Vec<Vec<u8>>)>,
    /// The session's hold among the user's running sessions (`with_running`).
    running: Option<super::running::Running>,
    /// The home's own lock, for placeholders outside the project (an agent's instruction
    /// file): shared by every session of the user, whatever its project, so one ending never
    /// removes a file another session still shows its notice on.
    home: Option<Box<ProjectLock>>,
}

/// The lock file (and placeholder record) of the sessions in `dir` (a project, or the home).
pub fn lock_path(state_dir: &Path, dir: &Path) -> PathBuf {
    state_dir.join("sessions").join(format!("{:016x}.lock", fnv(dir.as_os_str().as_encoded_bytes())))
}

/// FNV-1a: a stable, dependency-free name for the project's lock file.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

/// True if `path` is absolute, made of plain names only (no `..`, no `.`), strictly inside
/// `project`, and no directory between them is a symlink (which would move the removal).
fn plain_inside(path: &Path, project: &Path) -> bool {
    use std::path::Component;
    let plain = path.is_absolute() && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain || !path.starts_with(project) || path == project {
        return false;
    }
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| d.starts_with(project) && *d != project) {
        if std::fs::symlink_metadata(d).map_or(true, |m| m.file_type().is_symlink()) {
            return false;
        }
        dir = d.parent();
    }
    true
}

impl ProjectLock {
    pub fn acquire(state_dir: &Path, project: &Path) -> Result<ProjectLock, PlaceholderError> {
        let dir = state_dir.join("sessions");
        let path = lock_path(state_dir, project);
        let err = |err| PlaceholderError::Lock { path: path.clone(), err };
        agent_sandbox_sys::file::make_dir(&dir, 0o700).map_err(err)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(err)?;
        let mut lock = ProjectLock::held(file, project.to_path_buf());
        // Alone? Then first remove what an earlier session left behind (it ended while
        // another held the lock, or it was killed), so this plan sees the project as it is.
        if flock(&lock.file, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
            lock.remove_recorded();
        }
        flock(&lock.file, libc::LOCK_SH).map_err(err)?;
        Ok(lock)
    }

    /// Also holds the session's place among the user's running sessions (`running::Running`),
    /// joined before the plan is made: the exit check asks whether the session ran alone, and
    /// an earlier join only widens the time another session is looked for in.
    pub fn with_running(mut self, running: Option<super::running::Running>) -> ProjectLock {
        self.running = running;
        self
    }

    /// Whether no other session of the user ran at any time since `with_running` (false when
    /// it could not be told).
    pub fn ran_alone(&self) -> bool {
        self.running.as_ref().is_some_and(super::running::Running::ran_alone)
    }

    /// Also holds the home's lock (taken, like this one, before the plan is made), for the
    /// placeholders a plan puts in the home outside the project.
    pub fn with_home(self, state_dir: &Path, home: &Path) -> Result<ProjectLock, PlaceholderError> {
        let home = ProjectLock::home_lock(state_dir, home, &self.project)?;
        Ok(self.with_home_lock(home))
    }

    /// The home's lock for a session in `project` (none where the project is the home), to
    /// take beside the project's (`with_home_lock`).
    pub fn home_lock(state_dir: &Path, home: &Path, project: &Path) -> Result<Option<ProjectLock>, PlaceholderError> {
        match home != project {
            true => ProjectLock::acquire(state_dir, home).map(Some),
            false => Ok(None),
        }
    }

    /// Also holds `home` (`home_lock`).
    pub fn with_home_lock(mut self, home: Option<ProjectLock>) -> ProjectLock {
        self.home = home.map(Box::new);
        self
    }

    /// Creates the missing placeholders and records the ones this session made (those outside
    /// the project in the home's record); returns the anchors of all of them, made now or
    /// found, which their binds are held to.
    /// `anchors`: what the plan checked; the project (or home) is opened as it checked it, so
    /// a link put in its place since makes nothing anywhere else (`jail::anchor`).
    pub fn create(&mut self, list: &[Placeholder], anchors: &[Anchor]) -> Result<Vec<Anchor>, PlaceholderError> {
        let (mine, theirs): (Vec<Placeholder>, Vec<Placeholder>) =
            list.iter().cloned().partition(|ph| ph.path.starts_with(&self.project) || self.home.is_none());
        let mut made = vec![];
        if let Some(home) = self.home.as_mut() {
            made = home.create(&theirs, anchors)?;
        }
        let list = &mine;
        if list.is_empty() {
            return Ok(made);
        }
        let root_err = |err| PlaceholderError::Create { path: self.project.clone(), err };
        let anchor = anchors.iter().find(|a| a.path == self.project);
        let root_fd = match anchor {
            Some(a) => super::anchor::open_anchored(std::fs::File::open("/").map_err(root_err)?, a),
            None => nix::fcntl::open(
                &self.project,
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(std::io::Error::from),
        }
        .map_err(root_err)?;
        // Where the project really is: the placeholders' anchors are below it.
        let real_project = match anchor {
            Some(a) => a.real.clone(),
            None => std::fs::canonicalize(&self.project).map_err(root_err)?,
        };
        let mut lines = String::new();
        let mut result = Ok(());
        for ph in list {
            let (kind_made, kind) = match (ph.dir, ph.json) {
                (true, _) => (Made::Dir(0o755), "d"),
                (false, true) => (Made::File(0o644, JSON_PLACEHOLDER), "j"),
                (false, false) => (Made::File(0o644, b""), "f"),
            };
            // The project as the plan checked it; one outside it (a tree granted through a
            // link, named where it really is) beneath `/`, no link on the way.
            let in_project = self.root_of(&ph.path) == self.project;
            let r = match in_project {
                true => create_beneath_at(&self.project, &root_fd, &ph.path, kind_made),
                false => create_beneath(Path::new("/"), &ph.path, kind_made),
            };
            let r = match r {
                Ok(()) => {
                    lines.push_str(&format!("{kind}\t{}\n", ph.path.display()));
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e),
            };
            // Its anchor, as made or found: no link on the way from the root it was made in.
            let r = r.and_then(|()| match ph.path.strip_prefix(&self.project) {
                Ok(rel) if in_project => {
                    let fd = super::mounts::open_beneath_at(&root_fd, rel)?;
                    super::anchor::anchor_made(&ph.path, &real_project.join(rel), &fd)
                }
                _ => {
                    let fd =
                        super::mounts::open_beneath(Path::new("/"), ph.path.strip_prefix("/").unwrap_or(&ph.path))?;
                    super::anchor::anchor_made(&ph.path, &ph.path, &fd)
                }
            });
            match r {
                Ok(a) => made.push(a),
                Err(err) => {
                    result = Err(PlaceholderError::Create { path: ph.path.clone(), err });
                    break;
                }
            }
        }
        // One O_APPEND write for all lines: concurrent sessions cannot interleave inside it.
        if !lines.is_empty() {
            let _ = self.file.write_all(lines.as_bytes());
        }
        result.map(|()| made)
    }

    /// Where a placeholder of this lock's is made and removed beneath, no link on the way:
    /// the project (or home); for one outside it, `/` (the plan names it where it really
    /// is, `plan::agent_home`: a tree granted through a link, `~/.local -> /scratch/u/local`).
    fn root_of<'a>(&'a self, path: &Path) -> &'a Path {
        match path.starts_with(&self.project) {
            true => &self.project,
            false => Path::new("/"),
        }
    }

    /// A lock whose file is open (and locked) already: the waiter's copy.
    pub(super) fn held(file: File, project: PathBuf) -> ProjectLock {
        ProjectLock {
            file,
            project,
            handed: false,
            here: false,
            remove_after: vec![],
            run_after: vec![],
            home: None,
            running: None,
        }
    }

    /// Also removes `path` after the launcher exits (set before `hand_to_waiter`).
    pub fn remove_after_exit(&mut self, path: PathBuf) {
        self.remove_after.push(path);
    }

    /// Also runs the waiter's task `name` with `args` after the launcher exits (set before
    /// `hand_to_waiter`; the table of tasks is the one `waiter::start` was given).
    pub fn run_after_exit(&mut self, name: &str, args: Vec<Vec<u8>>) {
        self.run_after.push((name.to_string(), args));
    }

    /// Gives the cleanup waiter (`waiter`, forked when the launcher started) what to do once
    /// the launcher is gone: the removals, and this lock and the home's to release. Called
    /// before anything of the jail runs, so a launcher killed later is still cleaned up after.
    pub fn hand_to_waiter(&mut self) {
        if self.handed {
            return;
        }
        let mut locks = vec![self.file.as_raw_fd()];
        let mut orders = self.orders();
        if let Some(home) = &self.home {
            locks.push(home.file.as_raw_fd());
            orders.locks.push(super::waiter::bytes(&home.project));
        }
        self.handed = super::waiter::hand(&orders, &locks);
    }

    fn orders(&self) -> super::waiter::Orders {
        super::waiter::Orders {
            remove: self.remove_after.iter().map(|p| super::waiter::bytes(p)).collect(),
            run: self.run_after.clone(),
            locks: vec![super::waiter::bytes(&self.project)],
        }
    }

    /// Ends the session's hold: the waiter releases after we exit; if no waiter took the
    /// orders (none could be started, or it is gone), or a waiter may not outlive us (`here`),
    /// we do its work now (twice does no harm: the waiter then finds nothing left to do).
    pub fn finish(mut self) {
        self.hand_to_waiter();
        if !self.handed || self.here {
            self.abandon();
        }
    }

    /// Does the waiter's work now: the session ends here (it failed to start, or `finish`).
    pub fn abandon(&mut self) {
        super::waiter::remove_and_run_here(&self.orders());
        self.release_now();
    }

    /// The session's end is its launcher's too: do the cleanup in the launcher at the normal
    /// end, the waiter being only the backstop for a killed one. For a job's task, whose
    /// every process (the waiter too) slurmstepd kills as the task ends.
    pub fn finish_here(&mut self) {
        self.here = true;
    }

    /// If no other session holds the lock, removes the recorded placeholders; if one does,
    /// leaves them: it, or the next session to start alone, will.
    pub fn release_now(&mut self) {
        if let Some(home) = self.home.as_mut() {
            home.release_now();
        }
        if flock(&self.file, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
            self.remove_recorded();
        }
    }

    /// `release_now` for a waiter, which runs after its launcher is gone: sessions ending
    /// together each have a waiter holding a shared lock, and none could upgrade while the
    /// others hold theirs. So a waiter that fails lets go of its own lock and tries again a
    /// few times, a little later each: the last of them gets the exclusive lock and cleans.
    /// A session still running keeps its lock; its own waiter cleans after it.
    pub(super) fn release_as_waiter(&mut self) {
        for attempt in 0..40u64 {
            if flock(&self.file, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
                self.remove_recorded();
                return;
            }
            let _ = flock(&self.file, libc::LOCK_UN);
            let jitter = u64::from(std::process::id()) % 7;
            std::thread::sleep(std::time::Duration::from_millis(3 + jitter + attempt));
        }
    }

    /// With the lock held exclusively: removes every recorded placeholder that is still
    /// empty (anything written into one stays for the user to see) and clears the record.
    /// What the project's sessions recorded as their placeholders: each path with the bytes it
    /// was made with (None: an empty directory). A Landlock session that ends while a userns
    /// session of the project runs leaves these to the lock, as they are the other's.
    pub fn recorded(&mut self) -> Vec<(PathBuf, Option<&'static [u8]>)> {
        let mut text = String::new();
        if self.file.rewind().and_then(|_| (&self.file).take(1 << 20).read_to_string(&mut text)).is_err() {
            return vec![];
        }
        let made = |k: &str| match k {
            "d" => Some(None),
            "j" => Some(Some(JSON_PLACEHOLDER)),
            "f" => Some(Some(&b""[..])),
            _ => None,
        };
        text.lines()
            .filter_map(|l| l.split_once('\t'))
            .filter_map(|(k, p)| made(k).map(|m| (PathBuf::from(p), m)))
            .collect()
    }

    fn remove_recorded(&mut self) {
        let mut text = String::new();
        if self.file.rewind().and_then(|_| self.file.read_to_string(&mut text)).is_err() || text.is_empty() {
            return;
        }
        // Deepest first, whatever order the sessions recorded them in: one session may have made
        // `.git` and another `.git/hooks` in it, their lines in either order, and a directory
        // goes only once it is empty.
        let mut lines: Vec<(&str, &Path)> =
            text.lines().filter_map(|l| l.split_once('\t')).map(|(k, p)| (k, Path::new(p))).collect();
        lines.sort_by_key(|(_, p)| std::cmp::Reverse(p.components().count()));
        lines.dedup();
        for (kind, path) in lines {
            // The registry is the user's file (in the state directory, hidden from every
            // jail), but never act on a line through a link: `starts_with` compares
            // components, so `/p/../home/x` would pass it; a line with anything but plain
            // names is refused before the prefix is looked at. One outside the project is a
            // placeholder made where it really is (`root_of`), with no link on its way either.
            if !plain_inside(path, self.root_of(path)) {
                continue;
            }
            if kind == "d" {
                let _ = std::fs::remove_dir(path);
            } else if kind == "j" {
                // Still only what the session made it with (read without following a link).
                let untouched = std::fs::symlink_metadata(path)
                    .is_ok_and(|m| m.is_file() && m.len() == JSON_PLACEHOLDER.len() as u64)
                    && std::fs::read(path).is_ok_and(|b| b == JSON_PLACEHOLDER);
                if untouched {
                    let _ = std::fs::remove_file(path);
                }
            } else if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
                let _ = std::fs::remove_file(path);
            }
        }
        let _ = self.file.set_len(0);
    }
}

/// The waiter's release of a session lock it was handed (`waiter::start` takes it).
pub fn release_for_waiter(file: File, project: PathBuf) {
    ProjectLock::held(file, project).release_as_waiter();
}

#[cfg(test)]
mod tests {
    use super::plain_inside;
    use std::path::Path;

    #[test]
    fn forged_placeholder_records_outside_the_project_are_ignored() {
        let dir = std::env::temp_dir().join(format!("asb-ph-{}", std::process::id()));
        let project = dir.join("p");
        std::fs::create_dir_all(project.join("sub")).unwrap();
        std::os::unix::fs::symlink(&dir, project.join("link")).unwrap();
        assert!(plain_inside(&project.join("sub/.envrc"), &project));
        assert!(plain_inside(&project.join(".git"), &project));
        assert!(!plain_inside(&project.join("../home/.ssh"), &project), "`..` after the prefix");
        assert!(!plain_inside(&project, &project));
        assert!(!plain_inside(Path::new("/etc/passwd"), &project));
        assert!(!plain_inside(Path::new("sub/x"), Path::new("sub")), "relative");
        assert!(!plain_inside(&project.join("link/p/x"), &project), "through a symlinked directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A JSON name's placeholder holds `{}`; it goes after the session if it still does, and
    /// stays if anything else was written into it.
    #[test]
    fn a_json_placeholder_holds_an_empty_object_and_goes_only_if_unchanged() {
        let dir = std::env::temp_dir().join(format!("asb-ph-json-{}", std::process::id()));
        let (state, project) = (dir.join("state"), dir.join("p"));
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let mut lock = super::ProjectLock::acquire(&state, &project).unwrap();
        let (a, b) = (project.join("a.json"), project.join("b.json"));
        let list: Vec<super::Placeholder> =
            [&a, &b].iter().map(|p| super::Placeholder { path: p.to_path_buf(), dir: false, json: true }).collect();
        lock.create(&list, &[]).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"{}\n");
        std::fs::write(&b, "{\"mine\": 1}\n").unwrap();
        lock.remove_recorded();
        assert!(!a.exists(), "the untouched placeholder is gone");
        assert!(b.exists(), "what was written into one stays");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn placeholders_recorded_by_two_sessions_go_deepest_first() {
        // Session B recorded `.git/hooks` before session A recorded the `.git` it sits in.
        let dir = std::env::temp_dir().join(format!("asb-ph-order-{}", std::process::id()));
        let (state, project) = (dir.join("state"), dir.join("p"));
        std::fs::create_dir_all(project.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let mut lock = super::ProjectLock::acquire(&state, &project).unwrap();
        let record = format!("d\t{}\nd\t{}\n", project.join(".git/hooks").display(), project.join(".git").display());
        std::io::Write::write_all(&mut lock.file, record.as_bytes()).unwrap();
        lock.remove_recorded();
        assert!(!project.join(".git").exists(), "the outer placeholder stayed behind its inner one");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
