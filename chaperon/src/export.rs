//! What `--export` asks for (sbatch and srun): the variables a job or step gets inside the jail,
//! resolved at submission from the caller's environment, the `--export` value (or the variable
//! the command reads it from) and an `--export-file` inside the project. Recorded in the job
//! directory and applied by `exec --job` after the jail is entered; never given to Slurm.

use crate::checks::{open_in_project, read_capped, under_project};
use crate::refusal::Refusal;
use crate::session::Config;
use crate::wire::Request;
use std::collections::BTreeMap;
use std::path::Path;

/// What the caller asked to export: `--export`, else the variable the command reads it from
/// (sbatch: `SBATCH_EXPORT`; srun: `SRUN_EXPORT_ENV`, then `SLURM_EXPORT_ENV`), else None (ALL).
pub fn export_request(export: Option<&str>, req: &Request) -> Option<String> {
    let vars: &[&str] =
        if req.command == "srun" { &["SRUN_EXPORT_ENV", "SLURM_EXPORT_ENV"] } else { &["SBATCH_EXPORT"] };
    export.map(str::to_owned).or_else(|| vars.iter().find_map(|v| req.env.get(*v).cloned()))
}

/// The variables the job gets inside the jail, from `--export` (or SBATCH_EXPORT): ALL (the
/// default, as in Slurm) is the caller's environment; NONE is none; a list names them.
pub fn export_env(
    export: Option<&str>,
    export_file: Option<&str>,
    req: &Request,
    cwd: &Path,
    cfg: &Config,
) -> Result<Option<BTreeMap<String, String>>, Refusal> {
    let spec = export_request(export, req).unwrap_or_else(|| "ALL".into());
    let mut out = BTreeMap::new();
    if let Some(file) = export_file {
        let path = under_project(&cfg.who.project, cwd, file)?;
        let file = open_in_project(&cfg.who.project, &path)
            .map_err(|source| Refusal::File { named: "--export-file".into(), source })?;
        let text = read_capped(file, "the --export-file")?;
        for item in text.split(|b| *b == 0 || *b == b'\n') {
            let item = String::from_utf8_lossy(item);
            if let Some((k, v)) = item.split_once('=') {
                out.insert(k.to_string(), v.to_string());
            }
        }
    }
    let mut all = false;
    for item in spec.split(',') {
        // Slurm compares the two keywords without regard to case (env.c, xstrcasecmp).
        match item {
            _ if item.eq_ignore_ascii_case("ALL") => all = true,
            _ if item.eq_ignore_ascii_case("NONE") || item.is_empty() => {}
            _ => match item.split_once('=') {
                Some((k, v)) => {
                    out.insert(k.to_string(), v.to_string());
                }
                None => {
                    if let Some(v) = req.env.get(item) {
                        out.insert(item.to_string(), v.clone());
                    }
                }
            },
        }
    }
    if all {
        for (k, v) in &req.env {
            out.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Ok(if all || !out.is_empty() { Some(out) } else { None })
}
