//! The checks the handlers share, each ending in a refusal the agent can act on: a path the
//! jail names is inside the project (and a file it names is opened there, not through a
//! symlink the jail swapped in), a job is in the caller's scope, a user is the caller, a
//! cluster is the local one, a dependency waits only on jobs in scope.

use crate::refusal::Refusal;
use crate::scope::Scope;
use crate::session::Config;
use crate::table::{as_written, Table};
use crate::wire::Request;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A path from the jail, resolved against `cwd`, must be inside the project (no `..`
/// escapes; symlinks resolved on the host). Returns the canonical path.
pub fn under_project(project: &Path, cwd: &Path, p: &str) -> Result<PathBuf, Refusal> {
    let joined = if Path::new(p).is_absolute() { PathBuf::from(p) } else { cwd.join(p) };
    let canon = std::fs::canonicalize(&joined).map_err(|source| Refusal::File { named: p.to_string(), source })?;
    if canon.starts_with(project) {
        Ok(canon)
    } else {
        Err(Refusal::OutsideProject { path: p.to_string(), project: project.to_path_buf() })
    }
}

/// The caller's working directory, which must be inside the project.
pub fn cwd_of(req: &Request, cfg: &Config) -> Result<PathBuf, Refusal> {
    under_project(&cfg.who.project, Path::new("/"), &req.cwd).map_err(|_| Refusal::CwdOutside(req.cwd.clone()))
}

/// Opens a file the jail named, already resolved under the project, and checks that what was
/// opened is still under it: the jail can swap a symlink between the resolution and the open.
pub fn open_in_project(project: &Path, path: &Path) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    use std::os::fd::AsRawFd;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))?;
    if !real.starts_with(project) || !f.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "not a file inside the project"));
    }
    Ok(f)
}

/// Reads a file the jail named, at most `job::MAX_SCRIPT` bytes; `what` names it in errors.
pub fn read_capped(f: std::fs::File, what: &'static str) -> Result<Vec<u8>, Refusal> {
    use crate::job::MAX_SCRIPT;
    crate::bounded::read_file(f, MAX_SCRIPT).map_err(|e| match e {
        crate::bounded::BoundError::TooLarge(_) => Refusal::TooLarge { what, max: MAX_SCRIPT },
        source => Refusal::Unreadable { what, source },
    })
}

/// The scope a request asks for.
pub fn scope_of(req: &Request) -> Result<Scope, Refusal> {
    Ok(Scope::from_env(req.env.get("SLURM_SCOPE").map(String::as_str))?)
}

/// The job ids in the request's scope that the controller may still hold
/// (`scope::Registry::live_jobs`; an unknown `SLURM_SCOPE` is refused): what the views of the
/// controller's jobs show and the actions reach. A job marked gone can never be acted on again;
/// its id, once Slurm's ids start over past `MaxJobId`, names another job.
pub fn jobs_in_scope(req: &Request, cfg: &Config) -> Result<Vec<u32>, Refusal> {
    let scope = scope_of(req)?;
    Ok(read_scope(cfg, |r| r.live_jobs(scope, &cfg.who.session, &cfg.who.project, cfg.cluster_name())))
}

/// What `read` takes from the session's scope record; lines of it that were refused (not
/// sealed by the user's chaperon) leave a record in the audit log, once a session.
pub fn read_scope<T>(cfg: &Config, read: impl FnOnce(&crate::scope::Registry) -> T) -> T {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let registry = cfg.registry();
    let found = read(&registry);
    if let Some(why) = registry.refused() {
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            (cfg.audit)(&crate::session::Audit {
                command: "scope-record".into(),
                decision: "refused".into(),
                reason: Some(why),
                ..Default::default()
            });
        }
    }
    found
}

/// Every job id the request's scope ever recorded: the accounting's view (sacct, sreport),
/// which reaches back past what the controller holds.
pub fn recorded_jobs_in_scope(req: &Request, cfg: &Config) -> Result<Vec<u32>, Refusal> {
    let scope = scope_of(req)?;
    Ok(read_scope(cfg, |r| r.jobs(scope, &cfg.who.session, &cfg.who.project, cfg.cluster_name())))
}

/// Every job of `jobs` must be one of `ids` (the scope's).
pub fn in_scope(ids: &[u32], jobs: impl IntoIterator<Item = u32>) -> Result<(), Refusal> {
    match jobs.into_iter().find(|j| !ids.contains(j)) {
        Some(job) => Err(Refusal::NotInScope { job, by: None }),
        None => Ok(()),
    }
}

/// Every user a call names must be the caller (by name or uid).
pub fn only_caller(users: &[String], cfg: &Config) -> Result<(), Refusal> {
    let uid = cfg.who.uid.to_string();
    match users.iter().find(|u| **u != cfg.who.user && **u != uid) {
        Some(u) => Err(Refusal::OtherUser(u.clone())),
        None => Ok(()),
    }
}

/// `--clusters/-M` (the option `long`) in a read-only view: every name must be the local
/// cluster (`local`) or `all`, and the real command is asked about the local cluster alone
/// (`all` included), so the answer stays within the scope the chaperon filters. Returns the
/// option to give the real command in place of the caller's, if one was asked for.
pub fn local_cluster_only(
    options: &[(&'static str, Option<String>)],
    long: &str,
    local: Option<&str>,
) -> Result<Option<String>, Refusal> {
    let mut asked = false;
    for (_, value) in options.iter().filter(|(l, _)| *l == long) {
        asked = true;
        local_names_only(value.as_deref().unwrap_or_default(), &format!("--{long}"), local)?;
    }
    Ok(match (asked, local) {
        (true, Some(name)) => Some(format!("--{long}={name}")),
        _ => None,
    })
}

/// The real arguments of a read-only view that shows no job (sinfo, sdiag, sshare): the
/// caller's options its table passes as written, and the local cluster (`local`) in place of
/// `--clusters`, when one was asked for.
pub fn cluster_view(
    table: &'static Table,
    options: &[(&'static str, Option<String>)],
    local: Option<&str>,
) -> Result<Vec<String>, Refusal> {
    let cluster = local_cluster_only(options, "clusters", local)?;
    let mut args = as_written(table, options);
    args.extend(cluster);
    Ok(args)
}

/// Every cluster a value names (`by` says where) must be the local one or `all`.
pub fn local_names_only(value: &str, by: &str, local: Option<&str>) -> Result<(), Refusal> {
    for name in crate::grammar::cluster_names(value) {
        if name != "all" && Some(name.as_str()) != local {
            return Err(Refusal::OtherCluster {
                by: by.to_string(),
                name: crate::grammar::clip(&name),
                local: local.map(str::to_owned),
            });
        }
    }
    Ok(())
}

/// Every job a dependency value names (each occurrence, not only the last one Slurm uses)
/// must be in the caller's scope: a foreign job's state must not steer, or be probed by, ours.
pub fn dependencies_in_scope<'a>(
    options: impl IntoIterator<Item = &'a (&'static str, Option<String>)>,
    shown: &str,
    req: &Request,
    cfg: &Config,
) -> Result<(), Refusal> {
    let mut mine: Option<Vec<u32>> = None;
    for (long, value) in options {
        if !long.eq_ignore_ascii_case("dependency") {
            continue;
        }
        let Some(dep) = value.as_deref().filter(|d| !d.is_empty()) else { continue };
        // `singleton` waits on every job of the user with the same name, in scope or not:
        // a job outside the project would hold ours, and its existence would show.
        if dep.split([',', '?']).any(|item| item.eq_ignore_ascii_case("singleton")) {
            return Err(Refusal::Singleton { by: shown.to_string() });
        }
        let ids = crate::grammar::dependency_job_ids(dep)
            .map_err(|why| Refusal::BadDependency { by: shown.to_string(), why })?;
        if ids.is_empty() {
            continue;
        }
        let mine = match &mut mine {
            Some(m) => m,
            None => mine.insert(jobs_in_scope(req, cfg)?),
        };
        // A step may also wait on its own allocation (this chaperon runs inside that job).
        let own = std::env::var("SLURM_JOB_ID").ok().and_then(|j| j.parse::<u32>().ok());
        if let Some(foreign) = ids.iter().find(|id| !mine.contains(id) && own != Some(**id)) {
            return Err(Refusal::NotInScope { job: *foreign, by: Some(shown.to_string()) });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_outside_the_project_are_refused_even_through_a_symlink() {
        let dir = std::env::temp_dir().join(format!("chaperon-open-{}", std::process::id()));
        let project = dir.join("p");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(dir.join("secret"), "s").unwrap();
        std::fs::write(project.join("job.sh"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(dir.join("secret"), project.join("link")).unwrap();
        let project = std::fs::canonicalize(&project).unwrap();
        assert!(super::open_in_project(&project, &project.join("job.sh")).is_ok());
        assert!(super::open_in_project(&project, &project.join("link")).is_err(), "O_NOFOLLOW");
        assert!(super::open_in_project(&project, &dir.join("secret")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
