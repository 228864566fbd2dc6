//! The job directory: what the chaperon writes at submission and `agent-sandbox exec --job`
//! reads on the compute node. It lives in the user's state directory, which no jail can see
//! or write, so nothing the jail does after submission changes what the job runs.
//!
//! ```text
//! <state>/jobs/<session>-<n>/
//!   job.json      JobSpec: the frozen policy, project, cwd, export, output paths
//!   script        the original batch script, byte for byte
//!   wrapper.sh    the script Slurm runs: `exec agent-sandbox exec --job <dir>`
//!   wrapper.out   what the wrapper itself prints (errors starting the jail)
//! ```

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const SPEC: &str = "job.json";
pub const SCRIPT: &str = "script";
pub const WRAPPER: &str = "wrapper.sh";
pub const WRAPPER_OUT: &str = "wrapper.out";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub version: u32,
    pub session: String,
    pub project: PathBuf,
    /// The job's working directory (inside the project).
    pub cwd: PathBuf,
    /// The merged policy of the submitting session, as JSON (opaque to this crate).
    pub policy: String,
    /// The job's environment inside the jail, resolved from `--export` at submission:
    /// None = the jail's defaults only (`NONE`); else these variables on top.
    pub export: Option<BTreeMap<String, String>>,
    /// Where the script's stdout/stderr/stdin go, Slurm `%` patterns unexpanded; opened
    /// inside the jail on the node (so a symlink the jail planted cannot lead outside it).
    pub output: String,
    pub error: Option<String>,
    pub input: Option<String>,
    /// `--open-mode=append`.
    pub append: bool,
    pub job_name: String,
    pub script_args: Vec<String>,
    /// An srun step: run this command (resolved inside the jail) with the task's own stdio,
    /// instead of the batch script with its output files.
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

pub const VERSION: u32 = 1;

impl JobSpec {
    pub fn read(dir: &Path) -> Result<JobSpec, String> {
        let text = std::fs::read_to_string(dir.join(SPEC)).map_err(|e| format!("{}: {e}", dir.join(SPEC).display()))?;
        let spec: JobSpec = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", dir.join(SPEC).display()))?;
        if spec.version != VERSION {
            return Err(format!(
                "job directory format {} is not {VERSION}: submitted by another version",
                spec.version
            ));
        }
        Ok(spec)
    }
}

/// Expands Slurm's filename patterns (`%j %A %a %x %u %N %n %t %%`, with an optional
/// zero-pad width such as `%4a`) from the job's environment, as slurmstepd would.
pub fn expand_pattern(pattern: &str, vars: &dyn Fn(&str) -> Option<String>, user: &str, job_name: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let width: usize = width.parse().unwrap_or(0).min(10);
        let pad = |v: String| format!("{v:0>width$}");
        let job = || vars("SLURM_JOB_ID").unwrap_or_default();
        match chars.next() {
            Some('%') => out.push('%'),
            Some('j') => out.push_str(&pad(job())),
            Some('A') => out.push_str(&pad(vars("SLURM_ARRAY_JOB_ID").unwrap_or_else(job))),
            Some('a') => out.push_str(&pad(vars("SLURM_ARRAY_TASK_ID").unwrap_or_else(|| "4294967294".into()))),
            Some('x') => out.push_str(job_name),
            Some('u') => out.push_str(user),
            Some('N') => out.push_str(&vars("SLURMD_NODENAME").unwrap_or_default()),
            Some('n') | Some('t') => out.push_str(&pad("0".into())),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_like_slurmstepd() {
        let env = |k: &str| match k {
            "SLURM_JOB_ID" => Some("42".to_string()),
            "SLURM_ARRAY_JOB_ID" => Some("40".to_string()),
            "SLURM_ARRAY_TASK_ID" => Some("7".to_string()),
            "SLURMD_NODENAME" => Some("n1".to_string()),
            _ => None,
        };
        assert_eq!(expand_pattern("slurm-%j.out", &env, "u", "x"), "slurm-42.out");
        assert_eq!(expand_pattern("%x_%A_%3a.%N.%u%%", &env, "alice", "train"), "train_40_007.n1.alice%");
        assert_eq!(expand_pattern("odd%q%", &env, "u", "x"), "odd%q%");
        let none = |_: &str| None;
        assert_eq!(expand_pattern("slurm-%A_%a.out", &none, "u", "x"), "slurm-_4294967294.out");
    }

    #[test]
    fn spec_round_trips_and_refuses_other_versions() {
        let dir = std::env::temp_dir().join(format!("chaperon-job-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = JobSpec {
            version: VERSION,
            session: "s".into(),
            project: "/p".into(),
            cwd: "/p".into(),
            policy: "{}".into(),
            export: None,
            output: "slurm-%j.out".into(),
            error: None,
            input: None,
            append: false,
            job_name: "wrap".into(),
            script_args: vec![],
            command: None,
        };
        std::fs::write(dir.join(SPEC), serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(JobSpec::read(&dir).unwrap(), spec);
        std::fs::write(dir.join(SPEC), serde_json::to_string(&JobSpec { version: 9, ..spec }).unwrap()).unwrap();
        assert!(JobSpec::read(&dir).unwrap_err().contains("another version"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
