//! The Slurm commands the chaperon handles, one module each (its option table, its parser and
//! its handler), and `dispatch`, which hands a call to its command's handler and turns the
//! outcome into the answer and the audit record.

pub mod sacct;
pub mod sacctmgr;
pub mod sbatch;
pub mod scancel;
pub mod scontrol;
pub mod sdiag;
pub mod sinfo;
pub mod sprio;
pub mod squeue;
pub mod srun;
pub mod sshare;
pub mod sstat;

use crate::call::{Call, Stdio};
use crate::session::{Audit, Config};
use crate::wire::{Request, Response};
use std::os::unix::net::UnixStream;

/// Commands the stub refuses outright: each would give the jail a way around the chaperon.
pub const REFUSED: &[(&str, &str)] = &[
    ("salloc", "interactive allocations start a shell outside the jail; use `srun --pty` or sbatch"),
    ("sattach", "attaching to a step's I/O is not mediated; read the job's output file instead"),
    ("sbcast", "broadcasting files to nodes is not mediated; jobs read the project directly"),
    ("scrontab", "cron jobs would run outside any session's scope; use sbatch --begin"),
    ("scrun", "OCI containers are not mediated by agent-sandbox"),
    ("strigger", "triggers run programs outside the jail"),
];

/// What handling one request produced: the response, and the audit record.
pub struct Handled {
    pub response: Response,
    pub audit: Audit,
}

/// Decides and carries out one request: its command's handler parses the arguments (a
/// refusal names the option and why), checks the scope and runs the real Slurm command with
/// a clean environment and the caller's stdio.
pub fn dispatch(req: &Request, stdio: Stdio, cfg: &Config, conn: &UnixStream) -> Handled {
    let audit =
        Audit { command: req.command.clone(), argv: req.argv.clone(), cwd: req.cwd.clone(), ..Default::default() };
    // Queries and updates end by themselves; only srun runs as long as its tasks do (and
    // ends with the stub's connection, like every call).
    let bound = (req.command != "srun").then_some(crate::bounded::QUERY_TIMEOUT);
    let mut call = Call { req, cfg, conn, bound, audit };
    let result = match req.command.as_str() {
        "sbatch" => sbatch::handle(&mut call, stdio),
        "squeue" => squeue::handle(&mut call, stdio),
        "scancel" => scancel::handle(&mut call, stdio),
        "srun" => srun::handle(&mut call, stdio),
        "scontrol" => scontrol::handle(&mut call, stdio),
        "sacct" => sacct::handle(&mut call, stdio),
        "sinfo" => sinfo::handle(&mut call, stdio),
        "sdiag" => sdiag::handle(&mut call, stdio),
        "sshare" => sshare::handle(&mut call, stdio),
        "sprio" => sprio::handle(&mut call, stdio),
        "sstat" => sstat::handle(&mut call, stdio),
        "sacctmgr" => sacctmgr::handle(&mut call, stdio),
        other => match REFUSED.iter().find(|(n, _)| *n == other) {
            Some((_, why)) => Err(why.to_string()),
            None => Err(format!("`{other}` is not mediated by this version of agent-sandbox")),
        },
    };
    let mut audit = call.audit;
    let response = match result {
        Ok(code) => {
            audit.decision = "allowed".into();
            Response::Exited { code }
        }
        Err(reason) => {
            audit.decision = "denied".into();
            audit.reason = Some(reason.clone());
            Response::Denied { reason }
        }
    };
    Handled { response, audit }
}
