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

    /// The job ids in scope for this session and project, oldest first.
    pub fn jobs(&self, scope: Scope, session: &str, project: &Path) -> Vec<u32> {
        let text = std::fs::read_to_string(self.file(project)).unwrap_or_default();
        let mut ids: Vec<u32> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Entry>(l).ok())
            .filter(|e| match scope {
                Scope::Session => e.session == session && e.project == project,
                Scope::Project => e.project == project,
            })
            .map(|e| e.job)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
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
    fn scope_names() {
        assert_eq!(Scope::from_env(None), Ok(Scope::Project));
        assert_eq!(Scope::from_env(Some("session")), Ok(Scope::Session));
        assert!(Scope::from_env(Some("user")).is_err());
    }
}
