//! Which jobs a session may see and act on. Every batch job the chaperon submits is recorded
//! here, with its session and project; the views (squeue, scancel, scontrol, sacct...) and
//! `--dependency` are limited to the records of the caller's scope. The record lives in the
//! user's state directory (no jail sees it), so a jail cannot add a foreign job to its scope,
//! and the user's own `--comment` stays theirs.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

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
}

pub struct Registry {
    dir: PathBuf,
}

impl Registry {
    pub fn new(state_dir: &Path) -> Registry {
        Registry { dir: state_dir.join(DIR) }
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
        let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
        line.push(b'\n');
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.file(&e.project))?;
        f.write_all(&line)
    }

    /// The job ids in scope for this session and project, oldest first: every one recorded
    /// (sacct's view, which reaches back past what the controller holds).
    pub fn jobs(&self, scope: Scope, session: &str, project: &Path) -> Vec<u32> {
        self.read(scope, session, project).into_keys().collect()
    }

    /// The job ids in scope that the controller may still hold: `jobs` less those marked gone
    /// since they were recorded. squeue is given these: it compares each job it loads with
    /// each id it is given, so a list that kept every job of a project's history would make
    /// each call slower, and past 128 KiB of ids impossible.
    pub fn live_jobs(&self, scope: Scope, session: &str, project: &Path) -> Vec<u32> {
        self.read(scope, session, project).into_iter().filter(|(_, live)| *live).map(|(j, _)| j).collect()
    }

    /// Records that the controller no longer holds these jobs of `project` (it forgets a job
    /// `MinJobAge` after its end). One `write` with O_APPEND, like `add`; a job recorded again
    /// later (ids start over past `MaxJobId`) is live again.
    pub fn mark_gone(&self, project: &Path, jobs: &[u32]) -> std::io::Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let mut lines = Vec::new();
        for job in jobs {
            serde_json::to_writer(&mut lines, &Gone { gone: *job }).map_err(std::io::Error::other)?;
            lines.push(b'\n');
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(self.file(project))?;
        f.write_all(&lines)
    }

    /// Each job of the scope, with whether it is live (not marked gone since its last record).
    fn read(&self, scope: Scope, session: &str, project: &Path) -> std::collections::BTreeMap<u32, bool> {
        let text = std::fs::read_to_string(self.file(project)).unwrap_or_default();
        let mut jobs = std::collections::BTreeMap::new();
        for line in text.lines() {
            if let Ok(e) = serde_json::from_str::<Entry>(line) {
                let mine = match scope {
                    Scope::Session => e.session == session && e.project == project,
                    Scope::Project => e.project == project,
                };
                if mine {
                    jobs.insert(e.job, true);
                }
            } else if let Ok(g) = serde_json::from_str::<Gone>(line) {
                if let Some(live) = jobs.get_mut(&g.gone) {
                    *live = false;
                }
            }
        }
        jobs
    }
}

/// A job the controller was found not to hold any more, in the project's record file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Gone {
    gone: u32,
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
            r.add(&Entry { job, session: s.into(), project: proj.clone() }).unwrap();
        }
        std::fs::OpenOptions::new().append(true).open(r.file(&p)).unwrap().write_all(b"garbage\n").unwrap();
        assert_eq!(r.jobs(Scope::Project, "a", &p), [1, 2]);
        assert_eq!(r.jobs(Scope::Session, "a", &p), [1]);
        assert_eq!(r.jobs(Scope::Session, "a", &q), [3]);
        assert!(r.jobs(Scope::Project, "a", Path::new("/other")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn jobs_marked_gone_leave_the_live_list_until_recorded_again() {
        let dir = std::env::temp_dir().join(format!("chaperon-gone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = Registry::new(&dir);
        let p = PathBuf::from("/home/u/p");
        for job in [5, 6, 7] {
            r.add(&Entry { job, session: "a".into(), project: p.clone() }).unwrap();
        }
        r.mark_gone(&p, &[5, 7, 99]).unwrap();
        std::fs::OpenOptions::new().append(true).open(r.file(&p)).unwrap().write_all(b"{\"gone\":\"6\"}\n").unwrap();
        assert_eq!(r.live_jobs(Scope::Project, "a", &p), [6], "6's forged mark is no mark");
        assert_eq!(r.jobs(Scope::Project, "a", &p), [5, 6, 7], "sacct still sees every job");
        r.add(&Entry { job: 5, session: "b".into(), project: p.clone() }).unwrap();
        assert_eq!(r.live_jobs(Scope::Project, "a", &p), [5, 6], "recorded again after its mark: live");
        assert_eq!(r.live_jobs(Scope::Session, "a", &p), [6], "the session's own record of 5 stays gone");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scope_names() {
        assert_eq!(Scope::from_env(None), Ok(Scope::Project));
        assert_eq!(Scope::from_env(Some("session")), Ok(Scope::Session));
        assert!(Scope::from_env(Some("user")).is_err());
    }
}
