//! `Refusal`: why the chaperon did not carry a call out, one variant per kind of refusal. Each
//! renders as the one line the stub prints after `<command>: error: ` (and the audit log keeps
//! as the reason), worded so the agent can act on it. Decides nothing itself.

use crate::bounded::BoundError;
use crate::scope::UnknownScope;
use crate::table::GrammarError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The command's grammar refuses the call: an unknown option, a denied one with its reason,
    /// a bad value, a usage error.
    #[error(transparent)]
    Grammar(#[from] GrammarError),
    /// A command the stub refuses outright (a request for it came anyway).
    #[error("{reason}")]
    CommandRefused { command: String, reason: &'static str },
    /// A command name agent-sandbox does not know.
    #[error("`{0}` is not mediated by this version of agent-sandbox")]
    UnknownCommand(String),
    /// A form of a handled command that is not mediated: the text says which and what to do.
    #[error("{0}")]
    Unmediated(&'static str),
    /// A path the call names resolves outside the project.
    #[error("{path} is outside the project {}", project.display())]
    OutsideProject { path: String, project: PathBuf },
    /// The caller's working directory is not inside the project.
    #[error("the working directory {0} is not inside the project")]
    CwdOutside(String),
    /// A file the call names cannot be resolved or opened (or is no file inside the project).
    #[error("{named}: {source}")]
    File { named: String, source: std::io::Error },
    /// A file or script larger than the chaperon reads (`what` names it).
    #[error("{what} is larger than {} MiB", max >> 20)]
    TooLarge { what: &'static str, max: usize },
    #[error("cannot read {what}: {source}")]
    Unreadable { what: &'static str, source: BoundError },
    #[error("{what} is not valid UTF-8")]
    NotUtf8 { what: &'static str },
    /// The batch script on the caller's stdin did not arrive (in time, or at all).
    #[error("the batch script on stdin: {0}")]
    Stdin(BoundError),
    /// `SLURM_SCOPE` names no scope a session may have.
    #[error(transparent)]
    Scope(#[from] UnknownScope),
    /// A job the call names (through `by`, where that is not the job list itself) is not in
    /// the caller's scope.
    #[error("{}job {job} is not one of this project's jobs", prefix(by))]
    NotInScope { job: u32, by: Option<String> },
    /// A user the call names is not the caller.
    #[error("only your own jobs are visible here, not user {0}'s")]
    OtherUser(String),
    /// A cluster the call names is not the local one.
    #[error(
        "{by}: `{name}` is not this cluster ({}); a sandboxed session sees its own cluster only",
        local.as_deref().unwrap_or("its name is unknown")
    )]
    OtherCluster { by: String, name: String, local: Option<String> },
    /// A `singleton` dependency (`by` names the option or key).
    #[error(
        "{by}: singleton is not mediated (it names jobs outside this project); wait on your own job ids, e.g. afterany:ID"
    )]
    Singleton { by: String },
    #[error("{by}: {why}")]
    BadDependency { by: String, why: &'static str },
    /// Not a refusal: the chaperon could not carry the call out (Slurm could not be run, its
    /// answer not read or written). The stub shows it on the same one line.
    #[error("{0}")]
    Failed(String),
}

fn prefix(by: &Option<String>) -> String {
    by.as_ref().map(|b| format!("{b}: ")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_is_the_line_the_stub_printed_before() {
        let cases: Vec<(Refusal, &str)> = vec![
            (
                GrammarError::Denied { opt: "--uid".into(), reason: "jobs run as your own user only" }.into(),
                "option --uid is not allowed in agent-sandbox: jobs run as your own user only",
            ),
            (Refusal::UnknownCommand("sfoo".into()), "`sfoo` is not mediated by this version of agent-sandbox"),
            (
                Refusal::OutsideProject { path: "../x".into(), project: "/home/u/p".into() },
                "../x is outside the project /home/u/p",
            ),
            (Refusal::CwdOutside("/tmp".into()), "the working directory /tmp is not inside the project"),
            (
                Refusal::TooLarge { what: "the batch script", max: 4 << 20 },
                "the batch script is larger than 4 MiB",
            ),
            (Refusal::NotUtf8 { what: "the batch script" }, "the batch script is not valid UTF-8"),
            (Refusal::Stdin(BoundError::Timeout(2)), "the batch script on stdin: no end of input after 2 s (a script on stdin must end, e.g. `sbatch < job.sh`)"),
            (Refusal::NotInScope { job: 7, by: None }, "job 7 is not one of this project's jobs"),
            (
                Refusal::NotInScope { job: 7, by: Some("--jobid".into()) },
                "--jobid: job 7 is not one of this project's jobs",
            ),
            (Refusal::OtherUser("bob".into()), "only your own jobs are visible here, not user bob's"),
            (
                Refusal::OtherCluster { by: "--clusters".into(), name: "elsewhere".into(), local: Some("tc".into()) },
                "--clusters: `elsewhere` is not this cluster (tc); a sandboxed session sees its own cluster only",
            ),
            (
                Refusal::OtherCluster { by: "--clusters".into(), name: "x".into(), local: None },
                "--clusters: `x` is not this cluster (its name is unknown); a sandboxed session sees its own cluster only",
            ),
            (
                Refusal::Singleton { by: "--dependency".into() },
                "--dependency: singleton is not mediated (it names jobs outside this project); wait on your own job ids, e.g. afterany:ID",
            ),
        ];
        for (refusal, line) in cases {
            assert_eq!(refusal.to_string(), line);
            assert!(!line.contains('\n'));
        }
    }
}
