//! Real Slurm workflow tools, run unchanged inside the jail against the test cluster
//! (tests/cluster): submitit (a function round trip and a job array), Snakemake with its
//! Slurm executor plugin, and dask-jobqueue's submission side. `tests/run.sh` installs pinned
//! versions from PyPI into a venv under /opt, which the jail shows read-only; the tools submit
//! through the stubs and the chaperon, their jobs re-enter the jail on the node, and the tests
//! check what ran from the project. Each runs against Slurm 22.05 and, as `on_24_11_...`,
//! against the 24.11 cluster (auth/slurm, sackd), whose root holds its own venv at the same path.
//! A failure prints the tool's output and every Slurm call the session made, from the audit log.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Where tests/run.sh installs submitit, snakemake, snakemake-executor-plugin-slurm and
/// dask-jobqueue.
const VENV: &str = "/opt/agent-sandbox-test/venv";
/// Each tool runs under `timeout` inside the jail; the watchdog outside allows a little more.
const TOOL_SECS: u64 = 300;

/// The test cluster a tool runs against (tests/cluster/README.md).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slurm {
    /// Slurm 22.05, munge: the host's own Slurm.
    Tc,
    /// The one-host cluster beside it (`ONE_HOST_CONF`).
    OneHost,
    /// Slurm 24.11 with auth/slurm and sackd, in its Debian 13 root: the launcher and the
    /// tools run on its login side (`tests/cluster/in-2411.sh`), with the root's own venv at
    /// the same path (tests/run.sh installs it there too).
    Tc2411,
}

/// The wrapper that runs a command on the 24.11 cluster's login side.
fn in_2411() -> String {
    format!("{}/tests/cluster/in-2411.sh", env!("CARGO_MANIFEST_DIR"))
}

impl Slurm {
    /// A command of this cluster's Slurm, outside the jail (as root).
    fn command(self, name: &str) -> Command {
        match self {
            Slurm::Tc => Command::new(name),
            Slurm::OneHost => {
                let mut c = Command::new(name);
                c.env("SLURM_CONF", ONE_HOST_CONF);
                c
            }
            Slurm::Tc2411 => {
                let mut c = Command::new(in_2411());
                c.args(["--", name]);
                c
            }
        }
    }
}

/// A cluster jail for a workflow tool: the venv must be there too.
fn tool_jail(name: &str) -> Option<Jail> {
    with_tools(slurm_jail(name)?)
}

fn with_tools(j: Jail) -> Option<Jail> {
    let python = Path::new(VENV).join("bin/python");
    assert!(python.exists(), "{} missing: run tests/run.sh as root (it installs the workflow tools)", python.display());
    Some(j)
}

/// A jail on the 24.11 cluster's login side for a workflow tool: the cluster answers and the
/// root's venv is there, or the test says how to get them.
fn tool_jail_2411(name: &str) -> Option<Jail> {
    let j = Jail::new(name)?;
    let up = Slurm::Tc2411.command("sinfo").args(["-h", "-o", "%T"]).output();
    let ok = up.as_ref().is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    assert!(
        ok,
        "the Slurm 24.11 test cluster is not running: as root, tests/cluster/start.sh 24.11 --user {USER} ({up:?})"
    );
    let python = format!("{VENV}/bin/python");
    let venv = Command::new(in_2411()).args(["--", "test", "-x", &python]).status().is_ok_and(|s| s.success());
    assert!(
        venv,
        "{python} missing in the 24.11 root: run tests/run.sh as root (it installs the workflow tools there)"
    );
    Some(j)
}

/// A tool's run in the jail: its output, and the session id it printed first.
struct Run {
    out: Out,
    session: String,
}

/// `sh -c SCRIPT` in the jail with the venv activated, the tool under `timeout`, and a
/// watchdog of TOOL_SECS + 60 s outside (Jail::run's 60 s is too short for a workflow).
/// On 24.11 the launcher runs on the root's login side.
fn run_tool_on(j: &Jail, slurm: Slurm, tool: &str) -> Run {
    let script = format!(
        "echo ASB-SESSION=$AGENT_SANDBOX_SESSION; . {VENV}/bin/activate || exit 99; \
         timeout -k 10 {TOOL_SECS} {tool}; echo rc=$?"
    );
    let args = ["-q", "run", "--", "sh", "-c", &script];
    let wrapper = in_2411();
    let mut c = match slurm {
        Slurm::Tc2411 => j.command_wrapped(&[&wrapper, "--"], &args),
        _ => j.command(&args),
    };
    let out = j.output_within(&mut c, Duration::from_secs(TOOL_SECS + 60));
    let session = out.stdout.lines().find_map(|l| l.strip_prefix("ASB-SESSION=")).unwrap_or_default().to_string();
    eprintln!("{}: {:.1} s", j.project.display(), out.elapsed.as_secs_f64());
    Run { out, session }
}

/// Every Slurm call of the session from the audit log (`agent-sandbox log --session ID
/// --json` as the test user), one line each: command, decision, reason, job, argv.
fn slurm_calls(j: &Jail, session: &str) -> String {
    if session.is_empty() {
        return "(no session id printed)".into();
    }
    let log = j.as_user(&j.rig.bin).args(["log", "--json", "--session", session]).output().expect("agent-sandbox log");
    let mut lines = vec![];
    for line in String::from_utf8_lossy(&log.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            lines.push(line.to_string());
            continue;
        };
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        if v.get("argv").is_none() && v.get("decision").is_none() {
            lines.push(format!("[{}] {} {}", s("event"), s("program"), s("reason")));
            continue;
        }
        let argv: Vec<String> = v
            .get("argv")
            .and_then(|a| a.as_array())
            .map(|a| a.iter().map(|x| x.as_str().unwrap_or("?").to_string()).collect())
            .unwrap_or_default();
        let job = v.get("job").map(|x| format!(" job={x}")).unwrap_or_default();
        let reason = match s("reason") {
            r if r.is_empty() => String::new(),
            r => format!(" reason={r:?}"),
        };
        lines.push(format!("[{}] {} {}{job}{reason} argv={argv:?}", s("event"), s("program"), s("decision")));
    }
    if !log.status.success() {
        lines.push(format!("agent-sandbox log failed: {}", String::from_utf8_lossy(&log.stderr)));
    }
    lines.join("\n")
}

/// The session's refused Slurm calls, as `program argv...: reason`.
fn denied_calls(j: &Jail, session: &str) -> Vec<String> {
    let log = j.as_user(&j.rig.bin).args(["log", "--json", "--session", session]).output().expect("agent-sandbox log");
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("decision").and_then(|d| d.as_str()) == Some("denied"))
        .map(|v| {
            let words: Vec<&str> =
                v["argv"].as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect()).unwrap_or_default();
            format!(
                "{} {}: {}",
                v["program"].as_str().unwrap_or("?"),
                words.join(" "),
                v["reason"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// What a failing assertion prints: the tool's output and the session's Slurm calls.
fn report(j: &Jail, run: &Run) -> String {
    format!("{}\n--- the session's audit log ({})\n{}\n", run.out, run.session, slurm_calls(j, &run.session))
}

/// Cancels what the test left in the queue of `slurm` (a failed run may leave jobs pending).
fn cancel_leftovers_on(j: &Jail, slurm: Slurm) {
    let out = slurm.command("squeue").args(["-h", "-u", USER, "-o", "%A %Z"]).output().expect("squeue");
    for (id, dir) in String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_once(' ')) {
        if Path::new(dir.trim()).starts_with(&j.project) {
            let _ = slurm.command("scancel").arg(id.trim()).status();
        }
    }
}

#[test]
fn submitit_function_round_trip_runs_in_the_jail_on_the_node() {
    let Some(j) = tool_jail("wf-submitit") else { return };
    submitit_round_trip(j, Slurm::Tc);
}

#[test]
fn on_24_11_submitit_function_round_trip_runs_in_the_jail_on_the_node() {
    let Some(j) = tool_jail_2411("wf2411-submitit") else { return };
    submitit_round_trip(j, Slurm::Tc2411);
}

fn submitit_round_trip(j: Jail, slurm: Slurm) {
    let j = j.project_file("submitit_job.py", include_str!("workflow/submitit_job.py"));
    let run = run_tool_on(&j, slurm, "python3 submitit_job.py one 2>&1");
    cancel_leftovers_on(&j, slurm);
    let out = &run.out;
    assert!(out.stdout.contains("executor=slurm"), "submitit saw srun and chose Slurm: {}", report(&j, &run));
    let id = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("submitted="))
        .unwrap_or_else(|| panic!("no job submitted: {}", report(&j, &run)))
        .trim()
        .to_string();
    assert!(id.parse::<u32>().is_ok(), "a job id: {}", report(&j, &run));
    let expect = format!("result=one:host=agent-sandbox:ssh=False:job={id}");
    assert!(
        out.stdout.lines().any(|l| l == expect),
        "the function ran inside the jail on the node and its result came back ({expect}): {}",
        report(&j, &run)
    );
    assert!(out.stdout.contains("all-done") && out.stdout.contains("rc=0"), "{}", report(&j, &run));
    // submitit's own files in the project: the pickled result and the task's log.
    let folder = j.project.join("submitit-logs").join(&id);
    assert!(folder.join(format!("{id}_0_result.pkl")).exists(), "{}: {}", folder.display(), report(&j, &run));
    assert_eq!(denied_calls(&j, &run.session), Vec::<String>::new(), "every call submitit made was allowed");
}

#[test]
fn submitit_job_array_of_three_returns_every_result() {
    let Some(j) = tool_jail("wf-submitit-array") else { return };
    submitit_array(j, Slurm::Tc);
}

#[test]
fn on_24_11_submitit_job_array_of_three_returns_every_result() {
    let Some(j) = tool_jail_2411("wf2411-submitit-array") else { return };
    submitit_array(j, Slurm::Tc2411);
}

fn submitit_array(j: Jail, slurm: Slurm) {
    let j = j.project_file("submitit_job.py", include_str!("workflow/submitit_job.py"));
    let run = run_tool_on(&j, slurm, "python3 submitit_job.py array 2>&1");
    cancel_leftovers_on(&j, slurm);
    let out = &run.out;
    let ids: Vec<String> = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("submitted="))
        .unwrap_or_else(|| panic!("no array submitted: {}", report(&j, &run)))
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    assert_eq!(ids.len(), 3, "{}", report(&j, &run));
    let array = ids[0].split('_').next().unwrap_or_default().to_string();
    for (task, id) in ids.iter().enumerate() {
        assert_eq!(id, &format!("{array}_{task}"), "one array, task ids 0-2: {}", report(&j, &run));
    }
    let results: Vec<&str> = out.stdout.lines().filter_map(|l| l.strip_prefix("result=")).collect();
    assert_eq!(results.len(), 3, "three results: {}", report(&j, &run));
    for (task, r) in results.iter().enumerate() {
        assert!(
            r.starts_with(&format!("a{task}:host=agent-sandbox:ssh=False:job=")),
            "task {task} ran inside the jail on the node: {}",
            report(&j, &run)
        );
    }
    assert!(out.stdout.contains("all-done") && out.stdout.contains("rc=0"), "{}", report(&j, &run));
    assert_eq!(denied_calls(&j, &run.session), Vec::<String>::new(), "every call submitit made was allowed");
}

#[test]
fn snakemake_slurm_executor_runs_a_three_rule_workflow_in_the_jail() {
    let Some(j) = tool_jail("wf-snakemake") else { return };
    snakemake_workflow(j, Slurm::Tc);
}

#[test]
fn on_24_11_snakemake_slurm_executor_runs_a_three_rule_workflow_in_the_jail() {
    let Some(j) = tool_jail_2411("wf2411-snakemake") else { return };
    snakemake_workflow(j, Slurm::Tc2411);
}

fn snakemake_workflow(j: Jail, slurm: Slurm) {
    let j = j.project_file("Snakefile", include_str!("workflow/Snakefile"));
    // As a user runs it: the Slurm executor, three jobs at a time, the partition and a
    // runtime as default resources; status checks start after 2 s instead of 40 (the jobs
    // are short). No conda, no containers.
    let run = run_tool_on(
        &j,
        slurm,
        "snakemake --executor slurm --jobs 3 --default-resources slurm_partition=debug runtime=5 \
         --slurm-init-seconds-before-status-checks 2 --latency-wait 15 --printshellcmds 2>&1",
    );
    cancel_leftovers_on(&j, slurm);
    let out = &run.out;
    let result = std::fs::read_to_string(j.project.join("result.txt")).unwrap_or_default();
    assert!(out.stdout.contains("rc=0"), "snakemake succeeded: {}", report(&j, &run));
    let lines: Vec<&str> = result.lines().collect();
    assert_eq!(lines.len(), 3, "two shouted greetings and the gather line: {result}\n{}", report(&j, &run));
    for (i, n) in ["1", "2"].iter().enumerate() {
        let job = lines[i].strip_prefix(&format!("HELLO {n} HOST=AGENT-SANDBOX SSH=NO JOB="));
        assert!(
            job.is_some_and(|id| id.parse::<u32>().is_ok()),
            "greet_{n} ran as a Slurm job inside the jail: {result}\n{}",
            report(&j, &run)
        );
    }
    assert_eq!(lines[2], "gathered host=agent-sandbox", "{}", report(&j, &run));
    // The plugin guesses the account with `sacct -nu USER -o Account%256 | tail -1` run without
    // a shell, so sacct gets `| tail -1` as arguments: the real sacct refuses `-1` too, and the
    // plugin goes on without an account. Every other call was allowed.
    let denied: Vec<String> = denied_calls(&j, &run.session)
        .into_iter()
        .filter(|d| !d.starts_with(&format!("sacct -nu {USER} -o Account%256 | tail -1:")))
        .collect();
    assert_eq!(denied, Vec::<String>::new(), "every other call the plugin made was allowed");
}

/// Dask as researchers run it on Slurm, computing: the scheduler in the jail on the login
/// node, two dask-jobqueue worker jobs in the jail on the nodes, and every connection between
/// them (worker to scheduler, the scheduler gathering from the workers, one worker fetching a
/// result from the other) over the session network, with no port asked for.
#[test]
fn dask_computes_on_two_worker_jobs_over_the_session_network() {
    let Some(j) = tool_jail("wf-dask-compute") else { return };
    dask_computes(j, Slurm::Tc);
}

#[test]
fn on_24_11_dask_computes_on_two_worker_jobs_over_the_session_network() {
    let Some(j) = tool_jail_2411("wf2411-dask-compute") else { return };
    dask_computes(j, Slurm::Tc2411);
}

/// The same on a one-host cluster (a workstation or a VM running Slurm: its controller and
/// only node are this host, reached over loopback): the session network listens on loopback,
/// and the workers, on this host, reach the scheduler in the session's jail there, and each
/// other.
#[test]
fn dask_computes_on_a_one_host_cluster_over_the_session_network_on_loopback() {
    let Some(j) = one_host_slurm_jail("wf-dask-one-host").and_then(with_tools) else { return };
    dask_computes(j, Slurm::OneHost);
}

fn dask_computes(j: Jail, slurm: Slurm) {
    let j = j.project_file("dask_compute.py", include_str!("workflow/dask_compute.py"));
    let run = run_tool_on(&j, slurm, "python3 dask_compute.py 2>&1");
    cancel_leftovers_on(&j, slurm);
    let out = &run.out;
    let field = |k: &str| out.stdout.lines().find_map(|l| l.strip_prefix(k)).map(str::to_owned).unwrap_or_default();
    assert!(out.stdout.contains("all-done") && out.stdout.contains("rc=0"), "{}", report(&j, &run));
    assert!(field("scheduler=").starts_with("tcp://169.254."), "the scheduler's jail address: {}", report(&j, &run));
    // 0² + 1² + ... + 19²
    assert_eq!(field("sum="), "2470", "{}", report(&j, &run));
    assert_eq!(field("hosts="), "agent-sandbox", "every task ran in the jail: {}", report(&j, &run));
    assert_eq!(field("jobs="), "2", "tasks ran on both worker jobs: {}", report(&j, &run));
    let workers: Vec<String> = field("workers=").split(',').map(str::to_owned).collect();
    assert!(
        workers.len() == 2 && workers.iter().all(|w| w.starts_with("tcp://169.254.")) && workers[0] != workers[1],
        "two workers, each at its own jail's address: {}",
        report(&j, &run)
    );
    assert_eq!(field("moved="), "1048576", "one worker fetched 1 MiB from the other: {}", report(&j, &run));
    assert_eq!(denied_calls(&j, &run.session), Vec::<String>::new(), "every Slurm call was allowed");
}

#[test]
fn dask_jobqueue_submits_two_worker_jobs_and_close_cancels_them() {
    let Some(j) = tool_jail("wf-dask") else { return };
    dask_jobqueue_submits(j, Slurm::Tc);
}

#[test]
fn on_24_11_dask_jobqueue_submits_two_worker_jobs_and_close_cancels_them() {
    let Some(j) = tool_jail_2411("wf2411-dask") else { return };
    dask_jobqueue_submits(j, Slurm::Tc2411);
}

fn dask_jobqueue_submits(j: Jail, slurm: Slurm) {
    let j = j.project_file("dask_cluster.py", include_str!("workflow/dask_cluster.py"));
    // dask-jobqueue writes each job script with tempfile in $TMPDIR (the jail's private
    // /tmp) and runs `sbatch /tmp/tmpXXXX.sh`: the stub reads that file inside the jail.
    let run = run_tool_on(&j, slurm, "python3 dask_cluster.py 2>&1");
    cancel_leftovers_on(&j, slurm);
    let out = &run.out;
    let field = |k: &str| out.stdout.lines().find_map(|l| l.strip_prefix(k)).map(str::to_owned);
    // The job script dask-jobqueue builds from the cluster's parameters.
    for line in ["#SBATCH -p debug", "#SBATCH --cpus-per-task=1", "#SBATCH -t 00:05:00", "distributed.cli.dask_worker"]
    {
        assert!(out.stdout.contains(line), "the job script has {line:?}: {}", report(&j, &run));
    }
    let submitted = field("submitted=").unwrap_or_else(|| panic!("no submission: {}", report(&j, &run)));
    let mut ids: Vec<&str> = submitted.split(',').filter(|s| !s.is_empty()).collect();
    ids.sort();
    assert!(
        ids.len() == 2 && ids.iter().all(|id| id.parse::<u32>().is_ok()),
        "two worker jobs submitted through the chaperon: {}",
        report(&j, &run)
    );
    assert_eq!(
        field("queued=").as_deref(),
        Some(ids.join(",").as_str()),
        "squeue in the jail showed both: {}",
        report(&j, &run)
    );
    assert_eq!(field("left=").as_deref(), Some(""), "cluster.close() emptied the queue: {}", report(&j, &run));
    // Cancelled, not finished on their own: Slurm keeps ended jobs for MinJobAge (300 s).
    for id in &ids {
        let show = slurm.command("scontrol").args(["-o", "show", "job", id]).output().expect("scontrol");
        let show = String::from_utf8_lossy(&show.stdout);
        assert!(show.contains("JobState=CANCELLED"), "job {id} was cancelled: {show}\n{}", report(&j, &run));
        // A worker that started before the cancel ran inside the jail on the node.
        let log = std::fs::read_to_string(j.project.join(format!("slurm-{id}.out"))).unwrap_or_default();
        if let Some(w) = log.lines().find_map(|l| l.strip_prefix("worker-on=")) {
            assert_eq!(w, "agent-sandbox:ssh=no", "job {id}'s worker ran in the jail: {log}\n{}", report(&j, &run));
        }
    }
    assert!(out.stdout.contains("all-done") && out.stdout.contains("rc=0"), "{}", report(&j, &run));
    assert_eq!(denied_calls(&j, &run.session), Vec::<String>::new(), "every call dask-jobqueue made was allowed");
}
