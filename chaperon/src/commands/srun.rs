//! srun: its option table (Slurm 22.05 spellings, short forms and arities, each option allowed,
//! denied with a reason, or rebuilt by the chaperon), `parse_srun`, which turns a call into an
//! `SrunRequest` (options, the step's command and its arguments; pure), and `handle`, which
//! checks the job a step joins is in scope, records the command in a job directory and runs
//! srun so that every task starts `agent-sandbox exec --job` inside the jail on its node.

use crate::call::{Call, Stdio};
use crate::checks::{cwd_of, dependencies_in_scope, jobs_in_scope, under_project};
use crate::export::export_env;
use crate::getopt::LongOpt;
use crate::grammar::ValueKind;
use crate::job::{self, write_job_dir, JobSpec};
use crate::job_options::{BATCH_AND_STEP, EVERY_JOB, LISTED_BY_NONE, STEP_AND_ALLOC};
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::table::{
    allow, any_of, as_written, bad_value, deny, last, not_listed, parse_with, Arity, GrammarError, Options, Table,
    BURST_BUFFER, RUNS_OUTSIDE,
};
use crate::table::{EXTERNAL_LAUNCHER, PTY_VALUE};
use std::path::Path;
use Arity::{Flag, OptionalValue as Opt, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's srun allow-list; ask your admin if a step needs it";
const BCAST: &str = "it copies files to nodes outside the jail; copy them from within the job";
const STEP_IO: &str = "a file is opened by each task inside the jail; all, none and task ids go to srun as given";
const HETJOB: &str = "heterogeneous jobs are not supported in agent-sandbox; run the components as separate steps";

/// Every option srun 22.05 knows: those it shares with sbatch and salloc (`job_options`), and
/// its own. Anything else is an unrecognized option.
pub static SRUN: Table = Table {
    getopt: &slurm_22_05::SRUN,
    getopt_24_11: &crate::slurm_24_11::SRUN,
    not_listed: NOT_LISTED,
    shared: &[&EVERY_JOB, &BATCH_AND_STEP, &STEP_AND_ALLOC, &LISTED_BY_NONE],
    own: &[
        // Allowed: sbatch's allow-list (FEATURES C), where srun has the option too, worded for a step.
        allow("job-name", Some('J'), Val, JobName)
            .rebuilt("the chaperon names the step: yours, else its command's name"),
        // srun also takes `none`, `all` or a task number here, which name no file.
        allow("output", Some('o'), Val, Path).rebuilt(STEP_IO),
        allow("error", Some('e'), Val, Path).rebuilt(STEP_IO),
        allow("input", Some('i'), Val, Path).rebuilt(STEP_IO),
        allow("signal", None, Val, Signal),
        // Step options. The job a step joins (--jobid or the caller's SLURM_JOB_ID) must be in
        // scope, and a --pty step only in the session's own jobs: the chaperon checks both.
        allow("jobid", None, Val, Text),
        allow("pty", None, Opt, Refused(PTY_VALUE)),
        allow("overlap", None, Opt, Text),
        allow("exact", None, Flag, Any),
        allow("whole", None, Flag, Any),
        allow("label", Some('l'), Flag, Any),
        allow("unbuffered", Some('u'), Flag, Any),
        allow("kill-on-bad-exit", Some('K'), Opt, Int),
        allow("wait", Some('W'), Val, Int),
        allow("quit-on-interrupt", None, Flag, Any),
        allow("disable-status", Some('X'), Flag, Any),
        allow("relative", Some('r'), Val, Int),
        allow("mpi", None, Val, Text),
        allow("cpu-bind", None, Val, Text),
        allow("cpu_bind", None, Val, Text),
        allow("accel-bind", None, Val, Text),
        allow("resv-ports", None, Opt, Int),
        allow("preserve-env", Some('E'), Flag, Any),
        // Denied (FEATURES C).
        deny("uid", None, Val, "steps run as your own user only"),
        deny("gid", None, Val, "steps run with your own groups only"),
        deny("prolog", None, Val, RUNS_OUTSIDE),
        deny("epilog", None, Val, RUNS_OUTSIDE),
        deny("task-prolog", None, Val, RUNS_OUTSIDE),
        deny("task-epilog", None, Val, RUNS_OUTSIDE),
        deny(
            "multi-prog",
            None,
            Flag,
            "its programs would start outside the jail; run one command that reads $SLURM_PROCID",
        ),
        deny("container", None, Val, "an OCI container would start outside the jail; run it from the step command"),
        deny("bcast", None, Opt, BCAST),
        deny("bcast-exclude", None, Val, BCAST),
        deny("send-libs", None, Opt, BCAST),
        deny("compress", None, Opt, BCAST),
        deny("bb", None, Val, BURST_BUFFER),
        deny("bbf", None, Val, BURST_BUFFER),
        deny("x11", None, Opt, "X11 forwarding would reach a display outside the jail"),
        deny("no-allocate", Some('Z'), Flag, "running tasks without an allocation is for Slurm administrators only"),
        deny("slurmd-debug", None, Val, "slurmd's debug output comes from outside the jail; ask your admin"),
        deny("het-group", None, Val, HETJOB),
        deny("pack-group", None, Val, HETJOB),
        // The rest of srun 22.05: real options, not on the allow-list.
        not_listed("debugger-test", None, Flag),
        not_listed("interactive", None, Flag),
        not_listed("msg-timeout", None, Val),
        not_listed("threads", Some('T'), Val),
        // Added after 22.05 (`since`: the release that added each).
        deny("tres-bind", None, Arity::Value, NOT_LISTED).since(crate::release::R23_11),
        deny("external-launcher", None, Arity::OptionalValue, EXTERNAL_LAUNCHER).since(crate::release::R23_11),
        allow("treewidth", None, Arity::Value, crate::grammar::ValueKind::Uint16).since(crate::release::R23_11),
    ],
};

/// What an srun call asks for, before the chaperon resolves paths, checks scope and wraps the
/// command so every task starts inside the jail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrunRequest {
    /// In order, a later entry overriding an earlier one. Never a denied option.
    pub options: Options,
    /// The job the step is to join, from the last `--jobid` (the one srun uses): the chaperon
    /// must check it is in scope. None: a new allocation, or the caller's `SLURM_JOB_ID`.
    pub jobid: Option<u32>,
    /// `--pty`: task zero gets the caller's terminal.
    pub pty: bool,
    /// The program to run in each task, as given (unresolved); None only with --help, --usage
    /// or --version, which print and exit.
    pub command: Option<String>,
    pub args: Vec<String>,
}

impl SrunRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

fn job_id(v: &str) -> Result<u32, GrammarError> {
    let id = (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())).then(|| v.parse::<u32>().ok()).flatten();
    id.filter(|&id| id != 0).ok_or_else(|| bad_value("--jobid", v, "expected a job id such as 123"))
}

/// Parses an srun call (arguments without the program name), with the options of the site's
/// plugins the chaperon knows of (`plugins`: `Config::plugin_options`). Options end at the
/// first argument that is not one (srun's getopt string starts with `+`): that is the command,
/// and everything after it, options included, are its arguments.
pub fn parse_srun(args: &[String], plugins: &'static [LongOpt]) -> Result<SrunRequest, GrammarError> {
    // srun splits its whole argv at every ":" (command arguments included) into the
    // components of a heterogeneous job.
    if args.iter().any(|a| a == ":") {
        return Err(GrammarError::Unsupported(
            "heterogeneous jobs (':' between components) are not supported in agent-sandbox; run separate steps",
        ));
    }
    let p = parse_with(&SRUN, plugins, args)?;
    let mut jobid = None;
    for (s, v) in &p.options {
        if let ("jobid", Some(v)) = (s.long, v.as_deref()) {
            jobid = Some(job_id(v)?);
        }
    }
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    let pty = options.iter().any(|(l, _)| *l == "pty");
    let mut rest = p.positionals.into_iter();
    let command = rest.next();
    if command.is_none() && !any_of(&options, &["help", "usage", "version"]) {
        return Err(GrammarError::Usage("No command given to execute."));
    }
    Ok(SrunRequest { options, jobid, pty, command, args: rest.collect() })
}

/// What the caller asks of the step through the options the chaperon rebuilds: read here, from
/// the options alone (pure); the handler resolves the paths and the environment they name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Asked<'a> {
    chdir: Option<&'a str>,
    export: Option<&'a str>,
    /// `--input/--output/--error` that name a file: each task opens it inside its jail.
    input: Option<&'a str>,
    output: Option<&'a str>,
    error: Option<&'a str>,
    /// Those that name no file (`all`, `none`, a task id), for srun as they are.
    io_as_given: Vec<String>,
    append: bool,
    job_name: Option<&'a str>,
}

impl SrunRequest {
    /// What the step asks for. `tasks`: the step's task count without an explicit `-n` (the
    /// allocation's), which decides whether a number is a task id or a file name.
    fn asked(&self, tasks: u64) -> Asked<'_> {
        let value = |long| self.last(long).flatten();
        // Files a step's tasks read and write are opened by each task inside its jail (see
        // `job::job_command`), never by srun here or slurmstepd on the node: both run outside
        // any jail and would follow the jail's symlinks, or read `~/.aws` on the caller's
        // behalf. A number is a task id only below the step's task count (srun's fname.c);
        // above it, a file name.
        let tasks = value("ntasks").and_then(|n| n.trim().parse::<u64>().ok()).unwrap_or(tasks);
        let file = |long| value(long).filter(|v| !job::names_no_file(v, tasks));
        let io_as_given = ["input", "output", "error"]
            .into_iter()
            .filter_map(|long| value(long).filter(|v| job::names_no_file(v, tasks)).map(|v| format!("--{long}={v}")))
            .collect();
        Asked {
            chdir: value("chdir"),
            export: value("export"),
            input: file("input"),
            output: file("output"),
            error: file("error"),
            io_as_given,
            append: value("open-mode").is_some_and(|m| m.eq_ignore_ascii_case("append")),
            job_name: value("job-name"),
        }
    }

    /// The options the real srun is given: for a step (in its job directory `dir`), the rebuilt
    /// pieces and the caller's options the table passes as written (the handler adds the
    /// command, `agent-sandbox exec --job DIR`); without a command (`--help`...), the caller's
    /// options alone. `named_by_env`: the step takes its name from `SLURM_JOB_NAME`.
    fn real_args(&self, asked: &Asked<'_>, dir: Option<&Path>, named_by_env: bool) -> Vec<String> {
        let Some(dir) = dir else {
            return as_written(&SRUN, &self.options).into_iter().chain(asked.io_as_given.iter().cloned()).collect();
        };
        // The tasks start in the job directory (ours, not the jail's); `exec --job` puts them
        // in their working directory inside the jail.
        let mut args = vec!["--export=NONE".to_string(), format!("--chdir={}", dir.display())];
        if asked.input.is_some() {
            args.push("--input=none".into());
        }
        args.extend(as_written(&SRUN, &self.options));
        args.extend(asked.io_as_given.iter().cloned());
        // srun names a step (and a job it allocates) after its command, unless told otherwise
        // (--job-name, or SLURM_JOB_NAME inside a job): ours is the launcher, not the user's.
        let base = self.command.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p));
        let base = base.filter(|b| !b.is_empty() && !b.chars().any(char::is_control));
        match asked.job_name {
            Some(name) => args.push(format!("--job-name={name}")),
            None if !named_by_env => args.push(format!("--job-name={}", base.unwrap_or("srun"))),
            None => {}
        }
        args
    }
}

/// srun: a step whose every task starts inside the jail. The command is recorded in a job
/// directory like a batch script; each task runs `agent-sandbox exec --job DIR`, which
/// rebuilds the jail on its node and runs the command there with the task's own stdio (so
/// output streams and `--pty` works). Inside a batch job (this chaperon runs in one) the step
/// joins that job's allocation; elsewhere srun makes its own allocation.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_srun(&req.argv, cfg.plugin_options())?;
    let mut cmd = cfg.command("srun");
    // The allocation a step joins: this chaperon's own job (from slurmstepd, not the jail).
    for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("SLURM_") && k != "SLURM_CONF") {
        cmd.env(k, v);
    }
    dependencies_in_scope(&parsed.options, "--dependency", req, cfg)?;
    let tasks = std::env::var("SLURM_NTASKS").ok().and_then(|n| n.parse().ok()).unwrap_or(1);
    let asked = parsed.asked(tasks);
    let named_by_env = std::env::var_os("SLURM_JOB_NAME").is_some();
    let Some(program) = parsed.command.clone() else {
        cmd.args(parsed.real_args(&asked, None, named_by_env));
        return call.run(cmd, stdio);
    };
    if let Some(job) = parsed.jobid {
        let mine = jobs_in_scope(req, cfg)?;
        let own_job = std::env::var("SLURM_JOB_ID").ok().and_then(|j| j.parse::<u32>().ok());
        if !mine.contains(&job) && own_job != Some(job) {
            return Err(Refusal::NotInScope { job, by: Some("--jobid".into()) });
        }
    }
    // In an salloc allocation's command (the jail's SLURM_JOB_ID names another job than
    // this chaperon's own, if it has one): the step joins that allocation, as with --jobid,
    // if it is in scope; any other value is ignored, as before.
    if parsed.jobid.is_none() {
        let own = std::env::var("SLURM_JOB_ID").ok().and_then(|j| j.parse::<u32>().ok());
        let job = req.env.get("SLURM_JOB_ID").and_then(|j| j.trim().parse::<u32>().ok()).filter(|j| Some(*j) != own);
        if let Some(job) = job.filter(|j| jobs_in_scope(req, cfg).is_ok_and(|mine| mine.contains(j))) {
            cmd.arg(format!("--jobid={job}"));
        }
    }
    let cwd = cwd_of(req, cfg)?;
    let job_cwd = match asked.chdir {
        Some(d) => under_project(&cfg.who.project, &cwd, d)?,
        None => cwd.clone(),
    };
    let mut argv = vec![program];
    argv.extend(parsed.args.iter().cloned());
    let export = export_env(asked.export, None, req, &job_cwd, cfg)?;
    let spec = JobSpec {
        job_name: asked.job_name.unwrap_or("srun").to_owned(),
        command: Some(argv),
        output: asked.output.unwrap_or_default().to_owned(),
        error: asked.error.map(str::to_owned),
        input: asked.input.map(str::to_owned),
        append: asked.append,
        submit_dir: (cwd != job_cwd).then(|| cwd.clone()),
        ..JobSpec::for_session(cfg, &job_cwd, export).map_err(Refusal::Failed)?
    };
    // Known before the step's directory is written: a call refused for want of it leaves none.
    cfg.belt_state()?;
    let (dir, _) = write_job_dir(cfg, &spec, "").map_err(Refusal::Failed)?;
    call.audit.script_bytes = None;
    // srun itself runs in the job directory too.
    cmd.current_dir(&dir);
    cmd.args(parsed.real_args(&asked, Some(&dir), named_by_env));
    cmd.args(cfg.belt(&dir)?);
    cmd.arg(&cfg.who.exe).arg("exec").arg("--job").arg(&dir);
    let ran = call.run(cmd, stdio);
    // The step has ended with srun (its tasks are ended with it): nothing reads its directory
    // again.
    if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
        crate::forgotten::remove_job_dir(&cfg.who.state_dir.join("jobs"), name);
    }
    ran
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::table::testkit::*;
    use crate::table::Class;

    fn srun(a: &[&str]) -> Result<SrunRequest, GrammarError> {
        parse_srun(&argv(a))
    }

    fn parse_srun(a: &[String]) -> Result<SrunRequest, GrammarError> {
        super::parse_srun(a, &[])
    }

    #[test]
    fn the_table_is_srun_22_05() {
        entries_are_the_getopt_sets(&SRUN, &[crate::getopt::BELT]);
        table_is_sound(&SRUN, 'l');
        // From the optstring "+A:b:D:M:C:S:c:d:Xm:e:x:B:G:hHI::i:J:K::lL:T:Zk::F:w:N:n:o:Osp:Eq:Qr:t:uvVW:".
        shorts_are(
            &SRUN,
            &[
                ('A', "account"),
                ('b', "begin"),
                ('D', "chdir"),
                ('M', "clusters"),
                ('C', "constraint"),
                ('S', "core-spec"),
                ('c', "cpus-per-task"),
                ('d', "dependency"),
                ('X', "disable-status"),
                ('m', "distribution"),
                ('e', "error"),
                ('x', "exclude"),
                ('B', "extra-node-info"),
                ('G', "gpus"),
                ('h', "help"),
                ('H', "hold"),
                ('I', "immediate"),
                ('i', "input"),
                ('J', "job-name"),
                ('K', "kill-on-bad-exit"),
                ('l', "label"),
                ('L', "licenses"),
                ('T', "threads"),
                ('Z', "no-allocate"),
                ('k', "no-kill"),
                ('F', "nodefile"),
                ('w', "nodelist"),
                ('N', "nodes"),
                ('n', "ntasks"),
                ('o', "output"),
                ('O', "overcommit"),
                ('s', "oversubscribe"),
                ('p', "partition"),
                ('E', "preserve-env"),
                ('q', "qos"),
                ('Q', "quiet"),
                ('r', "relative"),
                ('t', "time"),
                ('u', "unbuffered"),
                ('v', "verbose"),
                ('V', "version"),
                ('W', "wait"),
            ],
        );
        optional_values_are(
            &SRUN,
            &[
                "pty",
                "bcast",
                "compress",
                "exclusive",
                "immediate",
                "kill-on-bad-exit",
                "nice",
                "no-kill",
                "overlap",
                "propagate",
                "resv-ports",
                "send-libs",
                "x11",
            ],
        );
    }

    #[test]
    fn features_denials_and_rebuilds_are_in_the_table() {
        for long in [
            "uid",
            "gid",
            "propagate",
            "prolog",
            "epilog",
            "task-prolog",
            "task-epilog",
            "container",
            "bcast",
            "bcast-exclude",
            "send-libs",
            "bb",
            "bbf",
            "mail-type",
            "mail-user",
            "clusters",
            "cluster",
            "multi-prog",
        ] {
            assert!(matches!(SRUN.class_of(spec(&SRUN, long)), Class::Denied(_)), "--{long} must be denied");
        }
        assert!(matches!(spec(&SRUN, "chdir").class, Class::Rebuilt(_)));
        for long in ["pty", "jobid", "export", "overlap", "exact", "mpi", "label"] {
            assert_eq!(spec(&SRUN, long).class, Class::Allowed, "--{long}");
        }
    }

    #[test]
    fn every_sbatch_allowed_option_srun_has_is_allowed_here_too() {
        use crate::commands::sbatch::SBATCH;
        for s in SBATCH.specs().filter(|s| s.class == Class::Allowed) {
            if let Some(r) = SRUN.specs().find(|r| r.long == s.long) {
                assert_eq!(r.class, Class::Allowed, "--{} is allowed in sbatch", s.long);
            }
        }
    }

    #[test]
    fn the_command_and_its_arguments_follow_the_options() {
        let r = srun(&["-n", "4", "--mpi=pmix", "python", "-u", "train.py", "--epochs", "3"]).unwrap();
        assert_eq!(r.command.as_deref(), Some("python"));
        assert_eq!(r.args, ["-u", "train.py", "--epochs", "3"]);
        assert_eq!((r.last("ntasks"), r.last("mpi")), (Some(Some("4")), Some(Some("pmix"))));
        // A denied option after the command is the command's argument, never srun's.
        let r = srun(&["hostname", "--uid=0", "--bcast"]).unwrap();
        assert_eq!(r.args, ["--uid=0", "--bcast"]);
        let r = srun(&["-l", "--", "-weird"]).unwrap();
        assert_eq!((r.command.as_deref(), r.args.len()), (Some("-weird"), 0));
    }

    #[test]
    fn submitit_and_snakemake_steps_parse() {
        let r = srun(&["--unbuffered", "--output", "/p/%j_%t_log.out", "python", "-u", "-m", "submitit"]).unwrap();
        assert_eq!(r.command.as_deref(), Some("python"));
        let r = srun(&["-n1", "--cpus-per-task=4", "--exact", "--overlap", "bash", "-c", "true"]).unwrap();
        assert_eq!(r.last("overlap"), Some(None));
    }

    #[test]
    fn a_pty_step_in_a_job_records_the_job_for_the_scope_check() {
        let r = srun(&["--jobid=123", "--pty", "bash", "-l"]).unwrap();
        assert_eq!((r.jobid, r.pty), (Some(123), true));
        let r = srun(&["--jobid", "5", "--jobid=6", "true"]).unwrap();
        assert_eq!(r.jobid, Some(6), "srun uses the last one, so that is the one checked");
        for bad in ["0", "x", "1.0", "1_2", "", "4294967296"] {
            assert!(matches!(srun(&["--jobid", bad, "true"]), Err(GrammarError::BadValue { .. })), "{bad:?}");
        }
        assert!(srun(&["--jobid=abc", "--jobid=5", "true"]).is_err(), "every occurrence is checked");
    }

    #[test]
    fn multi_prog_and_bcast_are_refused_with_their_reason() {
        let e = srun(&["-n2", "--multi-prog", "tasks.conf"]).unwrap_err().to_string();
        assert!(e.contains("--multi-prog") && e.contains("SLURM_PROCID"), "{e}");
        let e = srun(&["--bcast=/tmp/x", "a.out"]).unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "--bcast"), "{e:?}");
        let e = srun(&["-lZ", "true"]).unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "-Z (--no-allocate)"), "{e:?}");
        let e = srun(&["--task-prolog", "/x", "true"]).unwrap_err();
        assert!(matches!(e, GrammarError::Denied { reason, .. } if reason == RUNS_OUTSIDE));
    }

    #[test]
    fn chdir_is_returned_for_the_chaperon_to_rebuild() {
        let p = crate::table::parse(&SRUN, &argv(&["-lD", "/tmp", "pwd"])).unwrap();
        assert!(matches!(p.options[1].0.class, Class::Rebuilt(_)));
        assert_eq!(srun(&["--chdir=sub", "pwd"]).unwrap().last("chdir"), Some(Some("sub")));
    }

    #[test]
    fn no_command_errors_like_srun_unless_only_asking_for_help() {
        assert_eq!(srun(&["-n", "2"]), Err(GrammarError::Usage("No command given to execute.")));
        assert_eq!(srun(&[]), Err(GrammarError::Usage("No command given to execute.")));
        assert_eq!(srun(&["--help"]).unwrap().command, None);
        assert!(srun(&["-V"]).is_ok());
    }

    #[test]
    fn heterogeneous_steps_are_unsupported() {
        assert!(matches!(srun(&["-n1", "a", ":", "-n2", "b"]), Err(GrammarError::Unsupported(_))));
        assert!(matches!(srun(&["echo", ":"]), Err(GrammarError::Unsupported(_))), "srun splits even there");
        assert!(matches!(srun(&["--het-group=0", "a"]), Err(GrammarError::Denied { .. })));
        assert!(srun(&["echo", "a:b"]).is_ok());
    }

    #[test]
    fn short_options_cluster_as_getopt_reads_them() {
        let r = srun(&["-lun4", "-c2", "-K1", "x", "-K"]).unwrap();
        let got: Vec<_> = r.options.iter().map(|(l, v)| (*l, v.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("label", None),
                ("unbuffered", None),
                ("ntasks", Some("4")),
                ("cpus-per-task", Some("2")),
                ("kill-on-bad-exit", Some("1")),
            ]
        );
        assert_eq!(r.args, ["-K"]);
        // An optional value only attaches: "-Kt" is -K with the value "t", which it refuses.
        assert!(matches!(srun(&["-Kt", "x"]), Err(GrammarError::BadValue { .. })));
        assert_eq!(srun(&["-K", "1"]).unwrap().command.as_deref(), Some("1"));
    }

    #[test]
    fn unknown_options_and_caps() {
        let e = srun(&["--ntask=2", "x"]).unwrap_err().to_string();
        let all = "'--ntasks' '--ntasks-per-core' '--ntasks-per-gpu' '--ntasks-per-node' '--ntasks-per-socket' '--ntasks-per-tres'";
        assert_eq!(e, format!("option '--ntask=2' is ambiguous; possibilities: {all}"));
        assert_eq!(srun(&["--ntasks-per-n=2", "x"]).unwrap().last("ntasks-per-node"), Some(Some("2")));
        let e = srun(&["--get-user-env", "x"]);
        assert_eq!(e, Err(GetoptError::Unrecognized("get-user-env".into()).into()), "no srun option");
        let many = vec!["-l".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_srun(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SRUN, &["hostname", "true", ":", "bash"], 0x5eed_0000_5a01_0001, parse_srun);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SRUN, &["true"], &[("jobid", "5")], &[], |a| {
            let p = parse_srun(a).map_err(|e| e.to_string())?;
            let asked = p.asked(1);
            Ok((p.real_args(&asked, Some(Path::new("/j")), false), format!("{asked:?}")))
        });
    }
}
