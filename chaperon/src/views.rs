//! The read-mostly commands, narrowed to what a session may see: `scontrol` (jobs in scope
//! only; node, partition and config views as they are), `sacct` (the scope's jobs), and the
//! cluster views (`sinfo`, `sdiag`, `sshare`, `sprio`, `sstat`, `sacctmgr show`) with the
//! caller's own user only.

use crate::bounded::QUERY_TIMEOUT;
use crate::commands::scontrol::{ScontrolCommand, Show};
use crate::dispatch::MAX_CAPTURE;
use crate::dispatch::{clean, dependencies_in_scope, forward, local_cluster_only, only_caller, Runner};
use crate::server::{jobs_in_scope, Config, Stdio};
use crate::wire::Request;
use std::os::fd::AsFd;
use std::process::Command;

fn in_scope(ids: &[u32], jobs: impl IntoIterator<Item = u32>) -> Result<(), String> {
    match jobs.into_iter().find(|j| !ids.contains(j)) {
        Some(j) => Err(format!("job {j} is not one of this project's jobs")),
        None => Ok(()),
    }
}

pub fn scontrol(req: &Request, stdio: Stdio, cfg: &Config, run: &Runner<'_>) -> Result<i32, String> {
    let parsed = crate::commands::scontrol::parse_scontrol(&req.argv).map_err(|e| e.to_string())?;
    let ids = jobs_in_scope(req, cfg)?;
    let name_target = || "naming jobs by jobname= is not mediated; give job ids".to_string();
    match &parsed.command {
        Some(ScontrolCommand::Show(Show::Job(None))) | Some(ScontrolCommand::Show(Show::Step(None))) => {
            // Every job in scope, one real call each (a bare `show job` would list everyone's).
            let step = matches!(parsed.command, Some(ScontrolCommand::Show(Show::Step(None))));
            let write = |text: &[u8]| {
                crate::bounded::write_all(stdio.stdout.as_fd(), text, QUERY_TIMEOUT)
                    .map_err(|e| format!("writing scontrol's answer: {e}"))
            };
            if ids.is_empty() {
                write(if step { b"No job steps in the system\n" } else { b"No jobs in the system\n" })?;
                return Ok(0);
            }
            for id in ids {
                let mut cmd = Command::new(cfg.real("scontrol"));
                clean(&mut cmd, cfg);
                forward(&mut cmd, &parsed.options, &[]);
                cmd.args(["show", if step { "step" } else { "job" }, &id.to_string()]);
                cmd.stdin(std::process::Stdio::null()).stderr(std::process::Stdio::null());
                let (out, _) = crate::bounded::capture(cmd, MAX_CAPTURE, QUERY_TIMEOUT)?;
                write(&out)?;
            }
            return Ok(0);
        }
        Some(ScontrolCommand::Show(Show::Job(Some(r)))) | Some(ScontrolCommand::Show(Show::Step(Some(r)))) => {
            in_scope(&ids, [r.job])?
        }
        Some(ScontrolCommand::Hold { targets, .. }) | Some(ScontrolCommand::Release(targets)) => {
            for t in targets {
                match t {
                    crate::commands::scontrol::JobTarget::Id(r) => in_scope(&ids, [r.job])?,
                    crate::commands::scontrol::JobTarget::Name(_) => return Err(name_target()),
                }
            }
        }
        Some(ScontrolCommand::Requeue { jobs, .. }) => in_scope(&ids, jobs.iter().map(|r| r.job))?,
        Some(ScontrolCommand::Update { jobs, changes }) => {
            in_scope(&ids, jobs.iter().map(|r| r.job))?;
            let deps: Vec<(&'static str, Option<String>)> = changes
                .iter()
                .filter(|c| c.key.eq_ignore_ascii_case("Dependency"))
                .map(|c| (c.key, c.value.clone()))
                .collect();
            dependencies_in_scope(&deps, "Dependency", req, cfg)?;
        }
        _ => {}
    }
    let mut cmd = Command::new(cfg.real("scontrol"));
    clean(&mut cmd, cfg);
    cmd.args(&req.argv);
    run(cmd, stdio)
}

pub fn sacct(req: &Request, stdio: Stdio, cfg: &Config, run: &Runner<'_>) -> Result<i32, String> {
    let parsed = crate::commands::sacct::parse_sacct(&req.argv).map_err(|e| e.to_string())?;
    only_caller(&parsed.users, cfg)?;
    let mut ids = jobs_in_scope(req, cfg)?;
    if let Some(asked) = parsed.jobs.as_ref().filter(|a| !a.is_empty()) {
        in_scope(&ids, asked.iter().map(|r| r.job))?;
        ids.retain(|id| asked.iter().any(|r| r.job == *id));
    }
    let cluster = local_cluster_only(&parsed.options, cfg)?;
    let mut cmd = Command::new(cfg.real("sacct"));
    clean(&mut cmd, cfg);
    forward(&mut cmd, &parsed.options, &["jobs", "user", "uid", "clusters"]);
    cmd.args(cluster);
    if ids.is_empty() {
        cmd.arg("--name=agent-sandbox-no-job-in-scope");
    } else {
        cmd.arg(format!("--jobs={}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
    }
    run(cmd, stdio)
}

/// Views of the cluster, not of jobs; users other than the caller refused, job ids in scope.
pub fn info(req: &Request, stdio: Stdio, cfg: &Config, run: &Runner<'_>) -> Result<i32, String> {
    let e = |e: crate::table::GrammarError| e.to_string();
    let mut extra: Vec<String> = vec![];
    // `-M` given: the local cluster, appended last so it overrides the caller's `all`.
    let cluster = std::cell::RefCell::new(None);
    let clusters = |options: &[(&'static str, Option<String>)]| -> Result<(), String> {
        *cluster.borrow_mut() = local_cluster_only(options, cfg)?;
        Ok(())
    };
    match req.command.as_str() {
        "sinfo" => clusters(&crate::commands::sinfo::parse_sinfo(&req.argv).map_err(e)?.options)?,
        "sdiag" => clusters(&crate::commands::sdiag::parse_sdiag(&req.argv).map_err(e)?.options)?,
        "sshare" => {
            let p = crate::commands::sshare::parse_sshare(&req.argv).map_err(e)?;
            clusters(&p.options)?;
            only_caller(&p.users, cfg)?
        }
        "sprio" => {
            let p = crate::commands::sprio::parse_sprio(&req.argv).map_err(e)?;
            clusters(&p.options)?;
            only_caller(&p.users, cfg)?;
            let ids = jobs_in_scope(req, cfg)?;
            if let Some(asked) = &p.jobs {
                in_scope(&ids, asked.iter().map(|r| r.job))?;
            } else if ids.is_empty() {
                return Ok(0);
            } else {
                extra.push(format!("--jobs={}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
            }
        }
        "sstat" => {
            let p = crate::commands::sstat::parse_sstat(&req.argv).map_err(e)?;
            in_scope(&jobs_in_scope(req, cfg)?, p.jobs.iter().map(|r| r.job))?;
        }
        "sacctmgr" => {
            let p = crate::commands::sacctmgr::parse_sacctmgr(&req.argv).map_err(e)?;
            if let Some(crate::commands::sacctmgr::SacctmgrCommand::Show { entity, users, .. }) = &p.command {
                only_caller(users, cfg)?;
                let per_user = matches!(
                    entity,
                    crate::commands::sacctmgr::Entity::User | crate::commands::sacctmgr::Entity::Association
                );
                if per_user && users.is_empty() {
                    extra.push(format!("user={}", cfg.user));
                }
            }
        }
        other => return Err(format!("`{other}` is not mediated by this version of agent-sandbox")),
    }
    extra.extend(cluster.into_inner());
    let mut cmd = Command::new(cfg.real(&req.command));
    clean(&mut cmd, cfg);
    cmd.args(&req.argv).args(extra);
    run(cmd, stdio)
}
