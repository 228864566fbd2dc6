//! The read-mostly commands, narrowed to what a session may see: `scontrol` (jobs in scope
//! only; node, partition and config views as they are), `sacct` (the scope's jobs), and the
//! cluster views (`sinfo`, `sdiag`, `sshare`, `sprio`, `sstat`, `sacctmgr show`) with the
//! caller's own user only.

use crate::dispatch::{clean, forward, only_caller, Runner};
use crate::scontrol::{ScontrolCommand, Show};
use crate::server::{jobs_in_scope, Config, Stdio};
use crate::wire::Request;
use std::io::Write;
use std::process::Command;

fn in_scope(ids: &[u32], jobs: impl IntoIterator<Item = u32>) -> Result<(), String> {
    match jobs.into_iter().find(|j| !ids.contains(j)) {
        Some(j) => Err(format!("job {j} is not one of this project's jobs")),
        None => Ok(()),
    }
}

pub fn scontrol(req: &Request, stdio: Stdio, cfg: &Config, run: &Runner<'_>) -> Result<i32, String> {
    let parsed = crate::scontrol::parse_scontrol(&req.argv).map_err(|e| e.to_string())?;
    let ids = jobs_in_scope(req, cfg)?;
    let name_target = || "naming jobs by jobname= is not mediated; give job ids".to_string();
    match &parsed.command {
        Some(ScontrolCommand::Show(Show::Job(None))) | Some(ScontrolCommand::Show(Show::Step(None))) => {
            // Every job in scope, one real call each (a bare `show job` would list everyone's).
            let step = matches!(parsed.command, Some(ScontrolCommand::Show(Show::Step(None))));
            let mut stdout = std::fs::File::from(stdio.stdout);
            if ids.is_empty() {
                let _ =
                    stdout.write_all(if step { b"No job steps in the system\n" } else { b"No jobs in the system\n" });
                return Ok(0);
            }
            for id in ids {
                let mut cmd = Command::new(cfg.real("scontrol"));
                clean(&mut cmd, cfg);
                forward(&mut cmd, &parsed.options, &[]);
                cmd.args(["show", if step { "step" } else { "job" }, &id.to_string()]);
                let out = cmd.output().map_err(|e| format!("cannot run scontrol: {e}"))?;
                let _ = stdout.write_all(&out.stdout);
            }
            return Ok(0);
        }
        Some(ScontrolCommand::Show(Show::Job(Some(r)))) | Some(ScontrolCommand::Show(Show::Step(Some(r)))) => {
            in_scope(&ids, [r.job])?
        }
        Some(ScontrolCommand::Hold { targets, .. }) | Some(ScontrolCommand::Release(targets)) => {
            for t in targets {
                match t {
                    crate::scontrol::JobTarget::Id(r) => in_scope(&ids, [r.job])?,
                    crate::scontrol::JobTarget::Name(_) => return Err(name_target()),
                }
            }
        }
        Some(ScontrolCommand::Requeue { jobs, .. }) | Some(ScontrolCommand::Update { jobs, .. }) => {
            in_scope(&ids, jobs.iter().map(|r| r.job))?
        }
        _ => {}
    }
    let mut cmd = Command::new(cfg.real("scontrol"));
    clean(&mut cmd, cfg);
    cmd.args(&req.argv);
    run(cmd, stdio)
}

pub fn sacct(req: &Request, stdio: Stdio, cfg: &Config, run: &Runner<'_>) -> Result<i32, String> {
    let parsed = crate::sacct::parse_sacct(&req.argv).map_err(|e| e.to_string())?;
    only_caller(&parsed.users, cfg)?;
    let mut ids = jobs_in_scope(req, cfg)?;
    if let Some(asked) = parsed.jobs.as_ref().filter(|a| !a.is_empty()) {
        in_scope(&ids, asked.iter().map(|r| r.job))?;
        ids.retain(|id| asked.iter().any(|r| r.job == *id));
    }
    let mut cmd = Command::new(cfg.real("sacct"));
    clean(&mut cmd, cfg);
    forward(&mut cmd, &parsed.options, &["jobs", "user", "uid"]);
    if ids.is_empty() {
        cmd.arg("--name=agent-sandbox-no-job-in-scope");
    } else {
        cmd.arg(format!("--jobs={}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
    }
    run(cmd, stdio)
}

/// Views of the cluster, not of jobs; users other than the caller refused, job ids in scope.
pub fn info(req: &Request, stdio: Stdio, cfg: &Config, run: &Runner<'_>) -> Result<i32, String> {
    let e = |e: crate::grammar::GrammarError| e.to_string();
    let mut extra: Vec<String> = vec![];
    match req.command.as_str() {
        "sinfo" => drop(crate::sinfo::parse_sinfo(&req.argv).map_err(e)?),
        "sdiag" => drop(crate::sdiag::parse_sdiag(&req.argv).map_err(e)?),
        "sshare" => only_caller(&crate::sshare::parse_sshare(&req.argv).map_err(e)?.users, cfg)?,
        "sprio" => {
            let p = crate::sprio::parse_sprio(&req.argv).map_err(e)?;
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
            let p = crate::sstat::parse_sstat(&req.argv).map_err(e)?;
            in_scope(&jobs_in_scope(req, cfg)?, p.jobs.iter().map(|r| r.job))?;
        }
        "sacctmgr" => {
            let p = crate::sacctmgr::parse_sacctmgr(&req.argv).map_err(e)?;
            if let Some(crate::sacctmgr::SacctmgrCommand::Show { entity, users, .. }) = &p.command {
                only_caller(users, cfg)?;
                let per_user = matches!(entity, crate::sacctmgr::Entity::User | crate::sacctmgr::Entity::Association);
                if per_user && users.is_empty() {
                    extra.push(format!("user={}", cfg.user));
                }
            }
        }
        other => return Err(format!("`{other}` is not mediated by this version of agent-sandbox")),
    }
    let mut cmd = Command::new(cfg.real(&req.command));
    clean(&mut cmd, cfg);
    cmd.args(&req.argv).args(extra);
    run(cmd, stdio)
}
