//! salloc: an allocation whose command (by default the caller's shell) runs inside the jail.
//! The chaperon runs the real salloc with a holding command of its own on the login node, which
//! prints the allocation's environment and then waits on a pipe; the stub gets the job id and
//! the `SLURM_*` variables (`Response::Allocated`), runs the command in the jail with them,
//! and `srun` there joins the allocation (the job is in the session's scope). When the stub's
//! connection ends (its command ended, or it was killed) the pipe closes, the holding command
//! ends, and salloc relinquishes the allocation as it does after any command.

use crate::call::{Call, Stdio};
use crate::grammar::ValueKind::*;
use crate::refusal::Refusal;
use crate::scope::Entry;
use crate::table::{allow, any_of, deny, parse, Arity, GrammarError, OptSpec, Options};
use crate::wire::{self, Response};
use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;
use Arity::{Flag, OptionalValue as Opt, Value as Val};

const NOT_LISTED: &str = "not on agent-sandbox's salloc allow-list; ask your admin if an allocation needs it";
/// What the holding command prints after the environment (NUL-separated records).
const MARK: &str = "AGENT_SANDBOX_ALLOCATED=1";
/// How long salloc has to relinquish the allocation once the caller has gone.
const RELINQUISH: Duration = Duration::from_secs(10);

/// The options an allocation may be asked with; everything else is refused or unknown.
pub static SALLOC: &[OptSpec] = &[
    allow("account", Some('A'), Val, Text),
    allow("partition", Some('p'), Val, Text),
    allow("qos", Some('q'), Val, Text),
    allow("time", Some('t'), Val, Time),
    allow("time-min", None, Val, Time),
    allow("nodes", Some('N'), Val, Text),
    allow("ntasks", Some('n'), Val, PositiveInt),
    allow("ntasks-per-node", None, Val, PositiveInt),
    allow("cpus-per-task", Some('c'), Val, PositiveInt),
    allow("mem", None, Val, Memory),
    allow("mem-per-cpu", None, Val, Memory),
    allow("mem-per-gpu", None, Val, Memory),
    allow("gres", None, Val, Text),
    allow("gpus", Some('G'), Val, Text),
    allow("gpus-per-node", None, Val, Text),
    allow("gpus-per-task", None, Val, Text),
    allow("cpus-per-gpu", None, Val, PositiveInt),
    allow("constraint", Some('C'), Val, Text),
    allow("exclusive", None, Opt, Choice(&["exclusive", "oversubscribe", "user", "mcs"])),
    allow("oversubscribe", Some('s'), Flag, Any),
    allow("nodelist", Some('w'), Val, NodeList),
    allow("exclude", Some('x'), Val, NodeList),
    allow("job-name", Some('J'), Val, JobName),
    allow("comment", None, Val, Text),
    allow("begin", Some('b'), Val, DateTime),
    allow("deadline", None, Val, DateTime),
    allow("nice", None, Opt, Nice),
    allow("reservation", None, Val, Text),
    allow("licenses", Some('L'), Val, Text),
    allow("hint", None, Val, Text),
    allow("threads-per-core", None, Val, PositiveInt),
    allow("tmp", None, Val, Memory),
    allow("wckey", None, Val, Text),
    allow("immediate", Some('I'), Opt, Int),
    allow("verbose", Some('v'), Flag, Any),
    allow("quiet", Some('Q'), Flag, Any),
    allow("help", Some('h'), Flag, Any),
    allow("usage", None, Flag, Any),
    allow("version", Some('V'), Flag, Any),
    deny("chdir", Some('D'), Val, "the command runs in the jail, from the directory salloc was called in"),
    deny("no-shell", None, Flag, "an allocation without a command would outlive the call; give salloc a command"),
    deny("dependency", Some('d'), Val, NOT_LISTED),
    deny("uid", None, Val, "allocations are made as your own user only"),
    deny("gid", None, Val, "allocations are made with your own groups only"),
    deny("get-user-env", None, Opt, "the environment comes from the jail"),
    deny("kill-command", Some('K'), Opt, "it signals a process on the login node outside the jail"),
    deny("mail-type", None, Val, "mail is blocked in agent-sandbox"),
    deny("mail-user", None, Val, "mail is blocked in agent-sandbox"),
    deny("bell", None, Flag, NOT_LISTED),
    deny("no-bell", None, Flag, NOT_LISTED),
    deny("hold", Some('H'), Flag, NOT_LISTED),
    deny("clusters", Some('M'), Val, NOT_LISTED),
    deny("cluster", None, Val, NOT_LISTED),
    deny("container", None, Val, NOT_LISTED),
    deny("x11", None, Opt, NOT_LISTED),
    deny("signal", None, Val, NOT_LISTED),
    deny("nodefile", Some('F'), Val, "it names a file on the login node; use --nodelist"),
    deny("propagate", None, Opt, "resource limits come from the sandbox policy"),
    deny("bb", None, Val, NOT_LISTED),
    deny("bbf", None, Val, NOT_LISTED),
];

/// What an salloc call asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SallocRequest {
    pub options: Options,
    /// The command to run in the allocation (in the jail); empty: the caller's shell.
    pub command: Vec<String>,
}

pub fn parse_salloc(args: &[String]) -> Result<SallocRequest, GrammarError> {
    if args.iter().any(|a| a == ":") {
        return Err(GrammarError::Unsupported(
            "heterogeneous allocations (':' between components) are not supported in agent-sandbox",
        ));
    }
    let p = parse(SALLOC, args, true)?;
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    Ok(SallocRequest { options, command: p.positionals })
}

fn written(options: &Options) -> Vec<String> {
    options
        .iter()
        .map(|(long, v)| match v {
            Some(v) => format!("--{long}={v}"),
            None => format!("--{long}"),
        })
        .collect()
}

/// The `SLURM_*` variables of the holding command's `env -0`, up to the mark; None if the
/// mark never came (salloc failed before running it).
fn allocation_env(out: &[u8]) -> Option<BTreeMap<String, String>> {
    let mut env = BTreeMap::new();
    for rec in out.split(|b| *b == 0) {
        let rec = String::from_utf8_lossy(rec);
        if rec == MARK {
            return Some(env);
        }
        if let Some((k, v)) = rec.split_once('=') {
            let name_ok =
                k.starts_with("SLURM_") && k.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            if name_ok && k != "SLURM_CONF" && v.len() <= 4096 && !v.contains('\n') {
                env.insert(k.to_string(), v.to_string());
            }
        }
    }
    None
}

pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_salloc(&req.argv)?;
    if any_of(&parsed.options, &["help", "usage", "version"]) {
        return call.run_with(written(&parsed.options), stdio);
    }
    let mut cmd = cfg.command("salloc");
    cmd.args(written(&parsed.options));
    // The holding command, on the login node: says the allocation's environment, then waits
    // for the pipe the chaperon holds to close.
    cmd.args(["/bin/sh", "-c", &format!("env -0; printf '{MARK}\\0'; exec cat >/dev/null")]);
    cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(stdio.stderr);
    let mut child = cmd.spawn().map_err(|e| Refusal::Failed(format!("cannot run Slurm: {e}")))?;
    let hold = child.stdin.take();
    let mut out = child.stdout.take().ok_or_else(|| Refusal::Failed("salloc's output is missing".into()))?;
    // Until the allocation is granted (it may queue): the caller going away, or Ctrl-C, ends
    // the request as it would end salloc.
    let watch = call.watch(&child, None);
    let mut got = Vec::new();
    let env = loop {
        let mut buf = [0u8; 4096];
        match out.read(&mut buf) {
            Ok(0) | Err(_) => break None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if got.len() > 1 << 20 {
            break None;
        }
        if let Some(env) = allocation_env(&got) {
            break Some(env);
        }
    };
    let Some(env) = env else {
        drop(hold);
        let status = child.wait().map_err(|e| Refusal::Failed(format!("waiting for Slurm: {e}")))?;
        drop(watch);
        use std::os::unix::process::ExitStatusExt;
        return Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
    };
    let job: Option<u32> = env.get("SLURM_JOB_ID").and_then(|j| j.parse().ok());
    let Some(job) = job else {
        drop(hold);
        let _ = child.wait();
        return Err(Refusal::Failed("salloc granted an allocation without a job id".into()));
    };
    // From here the caller's going away ends the command, not salloc (`watch` would kill it,
    // and a killed salloc leaves its allocation running).
    drop(watch);
    call.audit.job = Some(job);
    let _ = cfg.registry().add(&Entry { job, session: cfg.session.clone(), project: cfg.project.clone() });
    let mut conn = call.conn;
    let answer = Response::Allocated { job, env, command: parsed.command.clone() };
    if wire::write_frame(&mut conn, &answer).is_ok() {
        // The stub runs the command; its connection ends when the command does. Nothing else
        // comes on it (the command's own signals stay in the jail).
        let mut sink = [0u8; 256];
        while matches!(std::io::Read::read(&mut conn, &mut sink), Ok(n) if n > 0) {}
    }
    drop(hold);
    // salloc relinquishes the allocation once its command ends; if it does not within
    // RELINQUISH, the job is cancelled.
    let deadline = std::time::Instant::now() + RELINQUISH;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = cfg.command("scancel").arg(job.to_string()).status();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_end_at_the_command_and_risky_ones_are_refused() {
        let r = parse_salloc(&args(&["-N2", "-t", "10", "srun", "-n2", "hostname"])).unwrap();
        assert_eq!(written(&r.options), ["--nodes=2", "--time=10"]);
        assert_eq!(r.command, ["srun", "-n2", "hostname"]);
        assert!(parse_salloc(&args(&["-p", "debug"])).unwrap().command.is_empty(), "no command: the shell");
        for bad in [&["--no-shell"][..], &["--uid=0", "sh"], &["-D", "/", "sh"], &["-K", "sh"], &["--bogus", "sh"]] {
            assert!(parse_salloc(&args(bad)).is_err(), "{bad:?}");
        }
        assert!(parse_salloc(&args(&["-N1", ":", "-N1"])).is_err(), "heterogeneous");
    }

    #[test]
    fn only_slurm_variables_up_to_the_mark_are_taken() {
        let out = b"HOME=/root\0SLURM_JOB_ID=42\0SLURM_CONF=/x\0SLURM_NODELIST=n[1-2]\0lower_SLURM=1\0SLURM_bad=1\0AGENT_SANDBOX_ALLOCATED=1\0SLURM_LATE=1\0";
        let env = allocation_env(out).unwrap();
        assert_eq!(env.keys().map(String::as_str).collect::<Vec<_>>(), ["SLURM_JOB_ID", "SLURM_NODELIST"]);
        assert_eq!(allocation_env(b"SLURM_JOB_ID=42\0"), None, "no mark: salloc never ran the command");
    }
}
