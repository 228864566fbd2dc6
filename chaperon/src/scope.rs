//! Which jobs a session may see and act on. Every batch job the chaperon submits is recorded
//! here, with its session and project; the views (squeue, scancel, scontrol, sacct...) and
//! `--dependency` are limited to the records of the caller's scope. The record lives in the
//! user's state directory (no jail sees it), so a jail cannot add a foreign job to its scope,
//! and the user's own `--comment` stays theirs. Each line is sealed (`seal`, bound to its
//! record file): a line that does not check is never read, only counted and reported
//! (`Registry::refused`), so a jail that reached the state directory could still not add a
//! job to a scope, nor name a directory for the cleanup to remove.

use crate::seal::Key;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A record file's seal context: its name (which is its project's).
fn file_context(file: &Path) -> &[u8] {
    file.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default()
}

/// One record file per project under this directory: a call reads only its project's jobs,
/// however many other projects the user has.
pub const DIR: &str = "scope";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Session,
    Project,
}

/// A `SLURM_SCOPE` no session may have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SLURM_SCOPE={0} is not available in agent-sandbox: use `session` or `project` (the default)")]
pub struct UnknownScope(pub String);

impl Scope {
    /// `SLURM_SCOPE` as the jail set it: `session`, `project` (default). `user` would show
    /// jobs submitted outside any jail: it is refused, as is any other word.
    pub fn from_env(v: Option<&str>) -> Result<Scope, UnknownScope> {
        match v.map(str::trim) {
            None | Some("") | Some("project") => Ok(Scope::Project),
            Some("session") => Ok(Scope::Session),
            Some(other) => Err(UnknownScope(other.to_string())),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub job: u32,
    pub session: String,
    pub project: PathBuf,
    /// The cluster the job was submitted to, when known: a home shared by two clusters holds
    /// one record per project for both, and only the local controller's answer may mark a job
    /// gone. Records written before this field have none and are never marked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The job's directory under the state directory's `jobs/` (its name), removed once the
    /// controller has forgotten the job: it can then never start, nor start again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

pub struct Registry {
    dir: PathBuf,
    state_dir: PathBuf,
    key: std::sync::OnceLock<Result<Arc<Key>, String>>,
    /// Lines refused since made: (how many, in which record files), or why none could be read.
    refused: std::sync::Mutex<Refused>,
}

#[derive(Default)]
struct Refused {
    lines: usize,
    files: std::collections::BTreeSet<PathBuf>,
    key: Option<String>,
}

/// What a seal of a record line is for: the record file's name is its context.
const SEAL_PURPOSE: &str = "scope";

impl Registry {
    /// The registry of `state_dir`; its key is read (or made) when first needed.
    pub fn new(state_dir: &Path) -> Registry {
        Registry {
            dir: state_dir.join(DIR),
            state_dir: state_dir.to_path_buf(),
            key: Default::default(),
            refused: Default::default(),
        }
    }

    /// The registry of `state_dir` with the user's key already read.
    pub fn with_key(state_dir: &Path, key: Arc<Key>) -> Registry {
        let r = Registry::new(state_dir);
        let _ = r.key.set(Ok(key));
        r
    }

    fn key(&self) -> Result<&Arc<Key>, String> {
        self.key.get_or_init(|| Key::load_or_create(&self.state_dir).map(Arc::new)).as_ref().map_err(Clone::clone)
    }

    /// What was refused in the reads so far, in a sentence for the audit log, if anything was:
    /// lines whose seal did not check (written by something other than the user's chaperon),
    /// or the key that could not be read.
    pub fn refused(&self) -> Option<String> {
        let r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = &r.key {
            return Some(format!("the scope record cannot be read: {k}"));
        }
        (r.lines > 0).then(|| {
            let files: Vec<String> = r.files.iter().map(|f| f.display().to_string()).collect();
            format!(
                "{} line(s) of the scope record {} refused: not sealed by this user's chaperon (altered or \
                 forged, or written by an earlier agent-sandbox); their jobs are out of scope",
                r.lines,
                files.join(", ")
            )
        })
    }

    /// One record line, sealed for `file`.
    fn sealed_line(&self, file: &Path, data: &[u8]) -> std::io::Result<Vec<u8>> {
        let key = self.key().map_err(std::io::Error::other)?;
        let mut line = key.seal(SEAL_PURPOSE, file_context(file), data);
        line.push(b'\n');
        Ok(line)
    }

    fn file(&self, project: &Path) -> PathBuf {
        // FNV-1a of the path: a stable file name; the records themselves name the project.
        let h = project
            .as_os_str()
            .as_encoded_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
        self.dir.join(format!("{h:016x}.jsonl"))
    }

    /// The project's events file: marked (its modification time set) when a job of the project
    /// starts or ends on a node, or a session changes one; the governor of every session of the
    /// project reads it, to reuse no answer from before.
    pub fn events(&self, project: &Path) -> PathBuf {
        self.file(project).with_extension("events")
    }

    /// Appends one job. One `write` of one line with O_APPEND: concurrent submissions from
    /// many sessions never interleave.
    pub fn add(&self, e: &Entry) -> std::io::Result<()> {
        let line = self.sealed_line(&self.file(&e.project), &serde_json::to_vec(e).map_err(std::io::Error::other)?)?;
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        append_locked(self.open(&e.project, true)?, &line)
    }

    /// The project's record, to read and to append to (`create`d where missing), opened
    /// without following a symlink.
    fn open(&self, project: &Path, create: bool) -> std::io::Result<std::fs::File> {
        std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(create)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.file(project))
    }

    /// The job ids in scope for this session and project, oldest first: every one recorded
    /// (sacct's view, which reaches back past what the controller holds). `cluster`: the local
    /// cluster, when known; a job recorded on another (a home shared by two clusters) is not
    /// in scope here, where its id names another job.
    pub fn jobs(&self, scope: Scope, session: &str, project: &Path, cluster: Option<&str>) -> Vec<u32> {
        self.read(project, &self.text(project), |e| in_scope(e, scope, session, project, cluster)).into_keys().collect()
    }

    /// The job ids in scope that the controller may still hold: `jobs` less those marked gone
    /// since they were recorded. squeue is given these: it compares each job it loads with
    /// each id it is given, so a list that kept every job of a project's history would make
    /// each call slower, and past 128 KiB of ids impossible.
    pub fn live_jobs(&self, scope: Scope, session: &str, project: &Path, cluster: Option<&str>) -> Vec<u32> {
        let jobs = self.read(project, &self.text(project), |e| in_scope(e, scope, session, project, cluster));
        jobs.into_iter().filter(|(_, r)| r.live).map(|(j, _)| j).collect()
    }

    /// The project's live jobs recorded on `cluster`, each with the directories recorded for
    /// it, and the record's length when read: what a question to that cluster's controller may
    /// mark gone (`mark_gone`), and what goes with them.
    pub fn live_jobs_on(&self, project: &Path, cluster: &str) -> (BTreeMap<u32, Vec<String>>, usize) {
        let text = self.text(project);
        let jobs = self.read(project, &text, |e| e.project == project && e.cluster.as_deref() == Some(cluster));
        // Up to the last whole line: a line being appended now is read again after.
        let since = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        (jobs.into_iter().filter(|(_, r)| r.live).map(|(j, r)| (j, r.dirs)).collect(), since)
    }

    /// Records that `cluster`'s controller no longer holds these jobs of `project` (it forgets
    /// a job `MinJobAge` after its end). `since` is the record's length when the jobs were
    /// read: a job recorded again after it (job ids start over past `MaxJobId`) is a new one
    /// and stays live, as does one recorded again later. Returns the ids marked.
    pub fn mark_gone(&self, project: &Path, cluster: &str, jobs: &[u32], since: usize) -> std::io::Result<Vec<u32>> {
        if jobs.is_empty() {
            return Ok(vec![]);
        }
        let f = self.open(project, false)?;
        // Marks are an optimisation: without the lock (none to be had, or held too long by
        // another host), none are written.
        let Some(_lock) = Locked::new(&f) else { return Ok(vec![]) };
        let mut later = Vec::new();
        use std::io::{Read, Seek};
        (&f).seek(std::io::SeekFrom::Start(since as u64))?;
        (&f).take(MAX_RECORD).read_to_end(&mut later)?;
        let again = self.read(project, &later, |e| e.project == project);
        let marked: Vec<u32> = jobs.iter().copied().filter(|j| !again.contains_key(j)).collect();
        let mut lines = Vec::new();
        for job in &marked {
            let gone = serde_json::to_vec(&Gone { gone: *job, cluster: cluster.to_string() })
                .map_err(std::io::Error::other)?;
            lines.extend(self.sealed_line(&self.file(project), &gone)?);
        }
        (&f).write_all(&lines)?;
        Ok(marked)
    }

    /// The record's bytes (at most `MAX_RECORD`), nothing if it cannot be read. Lines are
    /// parsed one by one: a torn or garbled line is skipped, never the whole record.
    fn text(&self, project: &Path) -> Vec<u8> {
        use std::io::Read;
        let mut bytes = Vec::new();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(self.file(project));
        if let Ok(f) = f {
            let _ = f.take(MAX_RECORD).read_to_end(&mut bytes);
        }
        bytes
    }

    /// What `text` (`project`'s record) says of each job that `mine` keeps: its whole lines
    /// whose seal checks, and nothing of any other (the last, unended, is being appended now).
    fn read(&self, project: &Path, text: &[u8], mine: impl Fn(&Entry) -> bool) -> BTreeMap<u32, Recorded> {
        let mut jobs = BTreeMap::<u32, Recorded>::new();
        let whole = text.iter().rposition(|b| *b == b'\n').map_or(&text[..0], |i| &text[..i]);
        if whole.is_empty() {
            return jobs;
        }
        let file = self.file(project);
        let key = match self.key() {
            Ok(k) => k,
            Err(e) => {
                self.refused.lock().unwrap_or_else(|p| p.into_inner()).key = Some(e);
                return jobs;
            }
        };
        let mut refused = 0;
        for line in whole.split(|b| *b == b'\n') {
            let Ok(line) = key.open(SEAL_PURPOSE, file_context(&file), line) else {
                refused += 1;
                continue;
            };
            if let Ok(e) = serde_json::from_slice::<Entry>(line) {
                if mine(&e) {
                    let r = jobs.entry(e.job).or_default();
                    (r.live, r.cluster) = (true, e.cluster);
                    r.dirs.extend(e.dir);
                }
            } else if let Ok(g) = serde_json::from_slice::<Gone>(line) {
                if let Some(r) = jobs.get_mut(&g.gone) {
                    if r.cluster.as_deref() == Some(g.cluster.as_str()) {
                        r.live = false;
                    }
                }
            }
        }
        if refused > 0 {
            let mut r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
            r.lines += refused;
            r.files.insert(file);
        }
        jobs
    }
}

/// One job as its record says: live unless marked gone by its cluster since its last entry;
/// that entry's cluster; the directories of all its entries.
#[derive(Default)]
struct Recorded {
    live: bool,
    cluster: Option<String>,
    dirs: Vec<String>,
}

fn in_scope(e: &Entry, scope: Scope, session: &str, project: &Path, cluster: Option<&str>) -> bool {
    let here = match (cluster, e.cluster.as_deref()) {
        (Some(local), Some(recorded)) => local == recorded,
        // Recorded before entries named their cluster: in scope wherever it is read.
        (_, None) => true,
        // Where the local cluster's name is not known, no job recorded with one is in scope:
        // it could be another cluster's.
        (None, Some(_)) => false,
    };
    here && match scope {
        Scope::Session => e.session == session && e.project == project,
        Scope::Project => e.project == project,
    }
}

/// One append under an exclusive `flock`: on NFS, O_APPEND alone lets two hosts write at the
/// same offset (each client appends at the size it knows), and taking the lock makes the
/// client look again.
fn append_locked(f: std::fs::File, bytes: &[u8]) -> std::io::Result<()> {
    // A job is recorded with or without the lock (a mount without locks, a lock left by a
    // host that crashed): unrecorded, it would be out of its own session's scope.
    let _lock = Locked::new(&f);
    (&f).write_all(bytes)
}

struct Locked<'a>(&'a std::fs::File);

/// The largest record read: a project's whole history, some 120 bytes a job.
const MAX_RECORD: u64 = 256 << 20;

impl<'a> Locked<'a> {
    /// An exclusive `flock`, waited for up to 5 s; None where there is none to be had.
    fn new(f: &'a std::fs::File) -> Option<Locked<'a>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let e = match agent_sandbox_sys::file::flock(f, libc::LOCK_EX | libc::LOCK_NB) {
                Ok(()) => return Some(Locked(f)),
                Err(e) => e,
            };
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) || std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // The lock also ends with the descriptor.
        let _ = agent_sandbox_sys::file::flock(self.0, libc::LOCK_UN);
    }
}

/// A job the controller was found not to hold any more, in the project's record file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Gone {
    gone: u32,
    /// Whose controller said so: it marks only the jobs recorded on that cluster.
    cluster: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_select_by_session_and_project() {
        let dir = std::env::temp_dir().join(format!("chaperon-scope-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = Registry::new(&dir);
        let (p, q) = (PathBuf::from("/home/u/p"), PathBuf::from("/home/u/q"));
        for (job, s, proj) in [(1, "a", &p), (2, "b", &p), (3, "a", &q), (2, "b", &p)] {
            r.add(&Entry { job, session: s.into(), project: proj.clone(), cluster: None, dir: None }).unwrap();
        }
        std::fs::OpenOptions::new().append(true).open(r.file(&p)).unwrap().write_all(b"garbage\n").unwrap();
        assert_eq!(r.jobs(Scope::Project, "a", &p, None), [1, 2]);
        assert_eq!(r.jobs(Scope::Session, "a", &p, None), [1]);
        assert_eq!(r.jobs(Scope::Session, "a", &q, None), [3]);
        assert!(r.jobs(Scope::Project, "a", Path::new("/other"), None).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_record_line_altered_or_moved_from_another_record_is_refused() {
        let dir = std::env::temp_dir().join(format!("chaperon-scope-sealed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Registry::new(&dir);
        let (p, q) = (PathBuf::from("/home/u/p"), PathBuf::from("/home/u/q"));
        let e = Entry {
            job: 4,
            session: "a".into(),
            project: p.clone(),
            cluster: Some("tc".into()),
            dir: Some("d".into()),
        };
        r.add(&e).unwrap();
        r.add(&Entry { job: 8, project: q.clone(), ..e.clone() }).unwrap();
        let sealed = std::fs::read(r.file(&p)).unwrap();
        assert_eq!(r.jobs(Scope::Project, "a", &p, Some("tc")), [4]);
        assert_eq!(r.refused(), None);
        // Each field altered in turn, the seal kept.
        let text = String::from_utf8(sealed[65..sealed.len() - 1].to_vec()).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        for (field, to) in [
            ("job", serde_json::json!(5)),
            ("session", "b".into()),
            ("project", "/home/u/q".into()),
            ("cluster", "other".into()),
            ("dir", "..".into()),
        ] {
            let mut v = value.clone();
            v[field] = to;
            let mut line = sealed[..65].to_vec();
            line.extend(serde_json::to_vec(&v).unwrap());
            line.push(b'\n');
            std::fs::write(r.file(&p), &line).unwrap();
            let fresh = Registry::new(&dir);
            let got = fresh.jobs(Scope::Project, "a", &p, Some("tc"));
            assert!(got.is_empty(), "{field}: {got:?} {}", String::from_utf8_lossy(&line));
            assert!(fresh.refused().is_some_and(|w| w.contains("1 line(s)")), "{field}: {:?}", fresh.refused());
        }
        // p's own line, sealed for q's record file, put in p's.
        std::fs::write(r.file(&p), r.sealed_line(&r.file(&q), text.as_bytes()).unwrap()).unwrap();
        assert!(Registry::new(&dir).jobs(Scope::Project, "a", &p, Some("tc")).is_empty());
        std::fs::write(r.file(&p), r.sealed_line(&r.file(&p), text.as_bytes()).unwrap()).unwrap();
        assert_eq!(Registry::new(&dir).jobs(Scope::Project, "a", &p, Some("tc")), [4], "sealed for its own file");
        // A line being appended (no newline yet) is not counted as refused.
        std::fs::write(r.file(&p), &sealed[..40]).unwrap();
        let fresh = Registry::new(&dir);
        assert!(fresh.jobs(Scope::Project, "a", &p, Some("tc")).is_empty() && fresh.refused().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn jobs_marked_gone_leave_the_live_list_until_recorded_again() {
        let dir = std::env::temp_dir().join(format!("chaperon-gone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = Registry::new(&dir);
        let p = PathBuf::from("/home/u/p");
        let entry = |job: u32, session: &str, cluster: Option<&str>| Entry {
            job,
            session: session.into(),
            project: p.clone(),
            cluster: cluster.map(str::to_string),
            dir: None,
        };
        for job in [5, 6, 7] {
            r.add(&entry(job, "a", Some("tc"))).unwrap();
        }
        r.add(&entry(8, "a", Some("other"))).unwrap();
        r.add(&entry(9, "a", None)).unwrap();
        let (live, since) = r.live_jobs_on(&p, "tc");
        assert_eq!(live.into_keys().collect::<Vec<_>>(), [5, 6, 7], "only the jobs recorded on the cluster asked");
        // Recorded again between the question and its answer: a new job with that id.
        r.add(&entry(7, "b", Some("tc"))).unwrap();
        assert_eq!(r.mark_gone(&p, "tc", &[5, 7, 8, 9], since).unwrap(), [5, 8, 9]);
        std::fs::OpenOptions::new().append(true).open(r.file(&p)).unwrap().write_all(b"{\"gone\":6}\n").unwrap();
        let tc = Some("tc");
        assert_eq!(
            r.live_jobs(Scope::Project, "a", &p, tc),
            [6, 7, 9],
            "6's mark names no cluster; 9 was recorded on none"
        );
        assert_eq!(r.live_jobs(Scope::Project, "a", &p, Some("other")), [8, 9], "tc's mark of 8 is not other's");
        assert_eq!(r.jobs(Scope::Project, "a", &p, tc), [5, 6, 7, 9], "sacct still sees every job");
        r.add(&entry(5, "b", Some("tc"))).unwrap();
        assert_eq!(r.live_jobs(Scope::Project, "a", &p, tc), [5, 6, 7, 9], "recorded again after its mark: live");
        assert_eq!(r.live_jobs(Scope::Session, "a", &p, tc), [6, 7, 9], "session a's own record of 5 stays gone");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_job_recorded_on_another_cluster_is_not_in_scope_here() {
        let dir = std::env::temp_dir().join(format!("chaperon-clusters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = Registry::new(&dir);
        let p = PathBuf::from("/home/u/shared");
        for (job, cluster) in [(1, Some("a")), (2, Some("b")), (3, None)] {
            r.add(&Entry {
                job,
                session: "s".into(),
                project: p.clone(),
                cluster: cluster.map(str::to_string),
                dir: None,
            })
            .unwrap();
        }
        assert_eq!(r.jobs(Scope::Project, "s", &p, Some("a")), [1, 3], "on a: its own and the unnamed");
        assert_eq!(r.live_jobs(Scope::Session, "s", &p, Some("b")), [2, 3]);
        assert_eq!(r.jobs(Scope::Project, "s", &p, None), [3], "no cluster name known: none recorded with one");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scope_names() {
        assert_eq!(Scope::from_env(None), Ok(Scope::Project));
        assert_eq!(Scope::from_env(Some("session")), Ok(Scope::Session));
        assert!(Scope::from_env(Some("user")).is_err());
    }
}
