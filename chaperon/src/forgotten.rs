//! Which of a project's recorded jobs the controller has forgotten. squeue is given the scope
//! as a job list and compares every job it loads with every id of it (`_filter_job`, about
//! 20 ns a pair here): a project that kept each job of its history in that list would make
//! every squeue slower with each submission (5,000 ids against 2,000 jobs in the controller:
//! 0.2 s a call), and past 128 KiB of ids (`MAX_ARG_STRLEN`) squeue could not start at all.
//! The controller forgets a job `MinJobAge` after its end and never shows it again, so once it
//! is found gone its id leaves the list (`scope::Registry::live_jobs`), and every other view
//! and action (once Slurm's ids start over, the id names another job); sacct keeps them all.
//! Its job directory goes then too: a forgotten job can no longer start, nor be requeued.
//!
//! Found by asking, not guessed: a task thread asks the controller for every job of the user it
//! holds (all states, hidden partitions included), after the call that was due a question has
//! been answered: at most once a minute per project and session while the list is long, every
//! ten minutes while it is short. An id the answer lacks is marked gone; a failed or unreadable
//! answer marks nothing.

use crate::job;
use crate::pool;
use crate::removeat;
use crate::scope::Registry;
use crate::session::Config;
use crate::spawn::{Io, RealCommand};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lists longer than this are asked about every minute: squeue loses more to them than the
/// question costs the controller.
pub const PROBE_ABOVE: usize = 64;
/// At most one question a minute for each project of the session.
const PROBE_EVERY: Duration = Duration::from_secs(60);
/// A shorter list is asked about every ten minutes: its forgotten jobs' directories go then.
const PROBE_SHORT_EVERY: Duration = Duration::from_secs(600);
/// The answer lists every job of the user the controller holds (`MaxJobCount` is 10,000 by
/// default): a line of two ids each.
const MAX_ANSWER: usize = 16 << 20;
const TIMEOUT: Duration = Duration::from_secs(30);

/// After a call whose scope listed `listed` live jobs: asks, on a task thread, which of the
/// project's live jobs the controller still holds, if the project was not asked about lately
/// (a minute for a long list, ten for a short one). Returns whether a question was started.
pub fn probe_if_due(cfg: &Config, listed: usize) -> bool {
    if listed == 0 {
        return false;
    }
    let every = if listed > PROBE_ABOVE { PROBE_EVERY } else { PROBE_SHORT_EVERY };
    // Only the local controller is asked, so only the jobs recorded on it can be marked.
    let Some(cluster) = cfg.cluster_name().map(str::to_string) else { return false };
    if !due(&cfg.who.project, Instant::now(), every) {
        return false;
    }
    let registry = cfg.registry();
    let project = cfg.who.project.clone();
    let jobs_dir = cfg.who.state_dir.join("jobs");
    let mut cmd = cfg.command("squeue");
    cmd.args(QUESTION).stdin(Io::null()).stderr(Io::null());
    pool::spawn(Box::new(move || {
        let _ = mark_forgotten(&registry, &project, &cluster, &jobs_dir, cmd);
    }))
    .is_ok()
}

/// What the controller is asked: every job of the caller it holds, in every state and
/// partition, as its job id and its array's job id (an array is recorded by the latter; a
/// heterogeneous job by its first component's, which is its own job id). `--local`: in a
/// federation squeue asks every cluster and leaves out, with status 0, one that does not
/// answer; the local one must answer or nothing is marked.
pub const QUESTION: &[&str] = &["--noheader", "--local", "--me", "--all", "--states=all", "--format=%A %F"];

/// Whether `project` is due a question at `now`, `every` after the last; if so, its time is
/// taken.
fn due(project: &Path, now: Instant, every: Duration) -> bool {
    static ASKED: Mutex<Option<HashMap<PathBuf, Instant>>> = Mutex::new(None);
    let mut asked = ASKED.lock().unwrap_or_else(|p| p.into_inner());
    let asked = asked.get_or_insert_with(HashMap::new);
    match asked.get(project) {
        Some(last) if now.saturating_duration_since(*last) < every => false,
        _ => {
            asked.insert(project.to_path_buf(), now);
            true
        }
    }
}

/// Asks `cluster`'s controller (`cmd` is squeue with `QUESTION`) and marks the project's live
/// jobs recorded on it that the answer lacks. The live list is read before the question: a job
/// recorded after it was submitted before its record, so the controller held it when asked;
/// one recorded again meanwhile is not marked (`Registry::mark_gone`).
pub fn mark_forgotten(
    registry: &Registry,
    project: &Path,
    cluster: &str,
    jobs_dir: &Path,
    cmd: RealCommand,
) -> Result<Vec<u32>, String> {
    let (live, since) = registry.live_jobs_on(project, cluster);
    if live.is_empty() {
        return Ok(vec![]);
    }
    let (out, status) = crate::bounded::capture(cmd, MAX_ANSWER, TIMEOUT)?;
    if !status.success() {
        return Err(format!("squeue answered {status}"));
    }
    let held = held_ids(&out).ok_or("squeue's answer is not a list of job ids")?;
    let gone: Vec<u32> = live.keys().copied().filter(|j| !held.contains(j)).collect();
    let marked = registry.mark_gone(project, cluster, &gone, since).map_err(|e| e.to_string())?;
    // Their directories, as the same read of the record named them: a forgotten job can no
    // longer start, nor be requeued.
    for name in marked.iter().filter_map(|j| live.get(j)).flatten() {
        remove_job_dir(jobs_dir, name);
    }
    Ok(marked)
}

/// Removes the job directory `name` below `jobs` (the state directory's): one plain name,
/// never a path, found and emptied through descriptors below `jobs` opened without following a
/// symlink (`removeat`): a `jobs` or a job directory that is a symlink leads nowhere. What
/// Slurm wrote into its `wrapper.out` (a time limit, an out-of-memory kill, a jail that could
/// not start: the job's own files are opened inside the jail) is kept, with the directory;
/// the rest goes.
pub fn remove_job_dir(jobs: &Path, name: &str) -> bool {
    use nix::sys::stat::{fstatat, SFlag};
    use std::ffi::OsStr;
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return false;
    }
    let Ok(jobs_fd) = removeat::open_dir(jobs) else { return false };
    let Ok(dir) = removeat::open_below(&jobs_fd, OsStr::new(name)) else {
        return removeat::remove_tree_at(&jobs_fd, OsStr::new(name));
    };
    let said = fstatat(&dir, job::WRAPPER_OUT, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits() && st.st_size > 0);
    if said {
        for file in [job::SPEC, job::SCRIPT, job::WRAPPER] {
            let _ = nix::unistd::unlinkat(&dir, file, nix::unistd::UnlinkatFlags::NoRemoveDir);
        }
        return true;
    }
    removeat::remove_tree_at(&jobs_fd, OsStr::new(name))
}

/// Every id in squeue's answer to `QUESTION`, or None if any word is not a job id: an answer
/// that cannot be read whole must not make a held job look forgotten.
pub fn held_ids(out: &[u8]) -> Option<BTreeSet<u32>> {
    let text = std::str::from_utf8(out).ok()?;
    let mut ids = BTreeSet::new();
    for word in text.split_ascii_whitespace() {
        ids.insert(word.parse::<u32>().ok()?);
    }
    Some(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Scope;
    use std::io::Write;

    #[test]
    fn an_answer_is_read_whole_or_not_at_all() {
        assert_eq!(held_ids(b"12 12\n40 31\n41 31\n"), Some([12, 31, 40, 41].into()));
        assert_eq!(held_ids(b""), Some(BTreeSet::new()), "no job held: every live one is gone");
        assert_eq!(held_ids(b"12 12\n13_[1-3] 13\n"), None);
        assert_eq!(held_ids(b"12 12\nslurm_load_jobs error\n"), None);
        assert_eq!(held_ids(b"12 \xff\n"), None);
    }

    #[test]
    fn a_project_is_asked_about_at_most_once_a_minute() {
        let (p, q) = (Path::new("/home/u/due-p"), Path::new("/home/u/due-q"));
        let t = Instant::now();
        assert!(due(p, t, PROBE_EVERY));
        assert!(!due(p, t + Duration::from_secs(59), PROBE_EVERY));
        assert!(due(q, t + Duration::from_secs(1), PROBE_EVERY), "another project has its own minute");
        assert!(due(p, t + Duration::from_secs(61), PROBE_EVERY));
        assert!(!due(p, t + Duration::from_secs(200), PROBE_SHORT_EVERY), "a short list waits ten");
        assert!(due(p, t + Duration::from_secs(700), PROBE_SHORT_EVERY));
    }

    #[test]
    fn jobs_the_answer_lacks_are_marked_gone_and_a_failed_answer_marks_none() {
        let dir = std::env::temp_dir().join(format!("chaperon-forgotten-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = Registry::new(&dir);
        let p = PathBuf::from("/home/u/p");
        let jobs = dir.join("jobs");
        for job in [5, 6, 7, 31] {
            std::fs::create_dir_all(jobs.join(format!("d{job}"))).unwrap();
            let (cluster, dir) = (Some("tc".into()), Some(format!("d{job}")));
            r.add(&crate::scope::Entry { job, session: "s".into(), project: p.clone(), cluster, dir }).unwrap();
        }
        // What Slurm said of job 7 stays; the rest of its directory goes.
        std::fs::write(jobs.join("d7").join(job::WRAPPER_OUT), "*** JOB 7 CANCELLED DUE TO TIME LIMIT ***\n").unwrap();
        std::fs::write(jobs.join("d7").join(job::SPEC), "{}").unwrap();
        // A record naming a path, not a name, is never followed.
        let outside = dir.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let (cluster, bad) = (Some("tc".into()), Some("../outside".into()));
        r.add(&crate::scope::Entry { job: 7, session: "s".into(), project: p.clone(), cluster, dir: bad }).unwrap();
        let answer = |text: &str, code: i32| {
            let mut c = RealCommand::new("/bin/sh");
            c.args(["-c", &format!("printf '{text}'; exit {code}")]);
            c
        };
        assert!(mark_forgotten(&r, &p, "tc", &jobs, answer("6 6\\n", 1)).is_err());
        assert!(mark_forgotten(&r, &p, "tc", &jobs, answer("6 6\\nerror\\n", 0)).is_err());
        assert_eq!(r.live_jobs(Scope::Project, "", &p, Some("tc")), [5, 6, 7, 31], "nothing marked on a failed answer");
        assert!(mark_forgotten(&r, &p, "other", &jobs, answer("", 0)).unwrap().is_empty(), "no job recorded on it");
        // 40 is a task of array 31: the array is held.
        assert_eq!(mark_forgotten(&r, &p, "tc", &jobs, answer("6 6\\n40 31\\n", 0)).unwrap(), [5, 7]);
        assert_eq!(r.live_jobs(Scope::Project, "", &p, Some("tc")), [6, 31]);
        let left: Vec<bool> = [5, 6, 7, 31].iter().map(|j| jobs.join(format!("d{j}")).exists()).collect();
        assert_eq!(left, [false, true, true, true], "the forgotten jobs' directories are gone, bar what Slurm said");
        assert!(jobs.join("d7").join(job::WRAPPER_OUT).exists() && !jobs.join("d7").join(job::SPEC).exists());
        assert!(outside.exists(), "a recorded path is not a job directory's name");
        assert_eq!(r.jobs(Scope::Project, "", &p, Some("tc")), [5, 6, 7, 31]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_symlinked_jobs_directory_or_job_directory_leads_the_cleanup_nowhere() {
        let dir = std::env::temp_dir().join(format!("chaperon-forgotten-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Registry::new(&dir);
        let p = PathBuf::from("/home/u/p");
        // The user's own directories, and a `jobs` that leads to them.
        let home = dir.join("home");
        std::fs::create_dir_all(home.join("d5")).unwrap();
        std::fs::create_dir_all(home.join("elsewhere")).unwrap();
        std::fs::write(home.join("elsewhere/f"), "x").unwrap();
        std::os::unix::fs::symlink(&home, dir.join("jobs")).unwrap();
        // Sealed records (as if the key had leaked): the descriptors alone keep them inside.
        for (job, name) in [(5, "d5"), (6, "d6")] {
            let (cluster, dir) = (Some("tc".into()), Some(name.into()));
            r.add(&crate::scope::Entry { job, session: "s".into(), project: p.clone(), cluster, dir }).unwrap();
        }
        let none = || {
            let mut c = RealCommand::new("/bin/sh");
            c.args(["-c", "true"]);
            c
        };
        assert_eq!(mark_forgotten(&r, &p, "tc", &dir.join("jobs"), none()).unwrap(), [5, 6]);
        assert!(home.join("d5").exists(), "nothing removed through a symlinked jobs/");
        // A real jobs/ whose job directory is a symlink: the link goes, not what it names.
        std::fs::remove_file(dir.join("jobs")).unwrap();
        std::fs::create_dir(dir.join("jobs")).unwrap();
        std::os::unix::fs::symlink(home.join("elsewhere"), dir.join("jobs/d7")).unwrap();
        assert!(remove_job_dir(&dir.join("jobs"), "d7"));
        assert!(home.join("elsewhere/f").exists() && !dir.join("jobs/d7").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_forged_record_line_names_no_directory_and_no_job() {
        let dir = std::env::temp_dir().join(format!("chaperon-forgotten-forged-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Registry::new(&dir);
        let p = PathBuf::from("/home/u/p");
        std::fs::create_dir_all(dir.join("jobs/d9")).unwrap();
        r.add(&crate::scope::Entry {
            job: 5,
            session: "s".into(),
            project: p.clone(),
            cluster: Some("tc".into()),
            dir: None,
        })
        .unwrap();
        let file = std::fs::read_dir(dir.join(crate::scope::DIR)).unwrap().flatten().next().unwrap().path();
        let forged = serde_json::to_string(&crate::scope::Entry {
            job: 9,
            session: "s".into(),
            project: p.clone(),
            cluster: Some("tc".into()),
            dir: Some("d9".into()),
        })
        .unwrap();
        let line = format!("{} {forged}\n", "0".repeat(64));
        std::fs::OpenOptions::new().append(true).open(&file).unwrap().write_all(line.as_bytes()).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap()
            .write_all(format!("{forged}\n").as_bytes())
            .unwrap();
        let r = Registry::new(&dir);
        assert_eq!(r.live_jobs(Scope::Project, "s", &p, Some("tc")), [5], "the forged job is out of scope");
        assert!(r.refused().unwrap().contains("2 line(s)"), "{:?}", r.refused());
        let none = || {
            let mut c = RealCommand::new("/bin/sh");
            c.args(["-c", "true"]);
            c
        };
        assert_eq!(mark_forgotten(&r, &p, "tc", &dir.join("jobs"), none()).unwrap(), [5]);
        assert!(dir.join("jobs/d9").exists(), "a forged line names no directory to remove");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
