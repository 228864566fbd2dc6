//! salloc: an allocation whose command (by default the caller's shell) runs inside the jail.
//! The chaperon runs the real salloc with a holding command of its own on the login node, which
//! prints the allocation's environment and then waits on a pipe; the stub gets the job id and
//! the `SLURM_*` variables (`Response::Allocated`), runs the command in the jail with them,
//! and `srun` there joins the allocation (the job is in the session's scope). When the stub's
//! connection ends (its command ended, or it was killed) the pipe closes, the holding command
//! ends, and salloc relinquishes the allocation as it does after any command.

use crate::call::{Call, Stdio};
use crate::getopt::LongOpt;
use crate::grammar::ValueKind::*;
use crate::job_options::{BATCH_AND_ALLOC, EVERY_JOB, LISTED_BY_NONE, STEP_AND_ALLOC};
use crate::refusal::Refusal;
use crate::scope::Entry;
use crate::slurm_22_05;
use crate::spawn::Io;
use crate::table::{allow, any_of, deny, not_listed, parse_with, Arity, GrammarError, Options, Table};
use crate::wire::{self, Response};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use Arity::{Flag, OptionalValue as Opt, Value as Val};

const NOT_LISTED: &str = "not on agent-sandbox's salloc allow-list; ask your admin if an allocation needs it";
/// What the holding command prints after the environment (NUL-separated records).
const MARK: &str = "AGENT_SANDBOX_ALLOCATED=1";
/// Where the session's live allocations are noted, one empty file each, named
/// `HOST-LAUNCHERPID-JOB`: if the chaperon is killed (its launcher ended) while salloc still
/// waits for its allocation, the launcher's cleanup waiter cancels them.
pub const RECORD_DIR: &str = "salloc";

fn record_path(cfg: &crate::session::Config, job: u32) -> std::path::PathBuf {
    cfg.who.state_dir.join(RECORD_DIR).join(format!("{}{job}", record_prefix(nix::unistd::getppid().as_raw())))
}

/// The names of one launcher's records on this host begin with this.
pub fn record_prefix(launcher: i32) -> String {
    let host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{host}-{launcher}-")
}

fn note(cfg: &crate::session::Config, job: u32) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = record_path(cfg, job);
    if let Some(dir) = path.parent() {
        let _ = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
    }
    let _ = std::fs::OpenOptions::new().write(true).create(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path);
}

/// Makes `job` the session's: in its scope (to see and cancel), and noted for the cleanup.
fn adopt(cfg: &crate::session::Config, job: u32) {
    note(cfg, job);
    let _ = cfg.registry().add(&Entry {
        job,
        session: cfg.who.session.clone(),
        project: cfg.who.project.clone(),
        cluster: cfg.cluster_name().map(str::to_string),
        dir: None,
    });
}

fn unnote(cfg: &crate::session::Config, job: u32) {
    let _ = std::fs::remove_file(record_path(cfg, job));
}

/// After launcher `launcher` is gone: cancels the allocations its chaperon left noted (it
/// was killed before they ended) with `scancel`, and removes the notes.
pub fn cancel_left(state_dir: &std::path::Path, scancel: &std::path::Path, launcher: i32) {
    let dir = state_dir.join(RECORD_DIR);
    let prefix = record_prefix(launcher);
    let mut jobs = vec![];
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(job) = name.strip_prefix(&prefix).and_then(|j| j.parse::<u32>().ok()) {
            jobs.push(job.to_string());
            let _ = std::fs::remove_file(e.path());
        }
    }
    if !jobs.is_empty() {
        let _ = std::process::Command::new(scancel)
            .args(&jobs)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// How long salloc has to relinquish the allocation once the caller has gone.
const RELINQUISH: Duration = Duration::from_secs(10);

/// Every option salloc 22.05 knows: those an allocation may be asked with, the others refused
/// with the reason; those it shares with sbatch and srun are `job_options`'. Anything else is an
/// unrecognized option.
pub static SALLOC: Table = Table {
    getopt: &slurm_22_05::SALLOC,
    getopt_24_11: &crate::slurm_24_11::SALLOC,
    not_listed: NOT_LISTED,
    shared: &[&EVERY_JOB, &BATCH_AND_ALLOC, &STEP_AND_ALLOC, &LISTED_BY_NONE],
    own: &[
        allow("job-name", Some('J'), Val, JobName),
        deny("chdir", Some('D'), Val, "the command runs in the jail, from the directory salloc was called in"),
        deny("no-shell", None, Flag, "an allocation without a command would outlive the call; give salloc a command"),
        not_listed("dependency", Some('d'), Val),
        deny("uid", None, Val, "allocations are made as your own user only"),
        deny("gid", None, Val, "allocations are made with your own groups only"),
        deny("get-user-env", None, Opt, "the environment comes from the jail"),
        deny("kill-command", Some('K'), Opt, "it signals a process on the login node outside the jail"),
        deny("mail-type", None, Val, "mail is blocked in agent-sandbox"),
        deny("mail-user", None, Val, "mail is blocked in agent-sandbox"),
        not_listed("bell", None, Flag),
        not_listed("no-bell", None, Flag),
        not_listed("hold", Some('H'), Flag),
        not_listed("clusters", Some('M'), Val),
        not_listed("cluster", None, Val),
        not_listed("container", None, Val),
        not_listed("x11", None, Opt),
        not_listed("signal", None, Val),
        not_listed("bb", None, Val),
        not_listed("bbf", None, Val),
        // The rest of salloc 22.05: real options, not on the allow-list.
        not_listed("cluster-constraint", None, Val),
        not_listed("cpu-freq", None, Val),
        not_listed("distribution", Some('m'), Val),
        not_listed("mem-bind", None, Val),
        not_listed("ntasks-per-core", None, Val),
        not_listed("ntasks-per-gpu", None, Val),
        not_listed("ntasks-per-socket", None, Val),
        not_listed("priority", None, Val),
        not_listed("switches", None, Val),
        // Added after 22.05 (`since`: the release that added each).
        deny("tres-bind", None, Arity::Value, NOT_LISTED).since(crate::release::R23_11),
    ],
};

/// What an salloc call asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SallocRequest {
    pub options: Options,
    /// The command to run in the allocation (in the jail); empty: the caller's shell.
    pub command: Vec<String>,
}

/// Parses an salloc call (arguments without the program name), with the options of the site's
/// plugins the chaperon knows of (`plugins`: `Config::plugin_options`).
pub fn parse_salloc(args: &[String], plugins: &'static [LongOpt]) -> Result<SallocRequest, GrammarError> {
    if args.iter().any(|a| a == ":") {
        return Err(GrammarError::Unsupported(
            "heterogeneous allocations (':' between components) are not supported in agent-sandbox",
        ));
    }
    let p = parse_with(&SALLOC, plugins, args)?;
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

/// The job id in one of salloc's own lines: `salloc: Pending job allocation 123`,
/// `salloc: Granted job allocation 123`.
fn job_in_line(line: &str) -> Option<u32> {
    let rest = line.strip_prefix("salloc: ")?;
    let id = rest.strip_prefix("Pending job allocation ").or_else(|| rest.strip_prefix("Granted job allocation "))?;
    id.trim().parse().ok()
}

/// salloc's stderr, read here: each line passed on to the caller (bounded: a caller that
/// does not read loses the rest, it never stalls salloc), and the job id, as soon as salloc
/// names it, recorded in the scope so that it is the session's to see and cancel whatever
/// happens next.
fn pass_stderr(
    from: std::fs::File,
    to: std::os::fd::OwnedFd,
    cfg: &crate::session::Config,
    job: &std::sync::Mutex<Option<u32>>,
) {
    use std::io::BufRead;
    use std::os::fd::AsFd;
    let mut passing = true;
    let mut lines = std::io::BufReader::new(from.take(1 << 20));
    let mut line = String::new();
    while matches!(lines.read_line(&mut line), Ok(n) if n > 0) {
        if let Some(id) = job_in_line(line.trim_end()) {
            let mut known = job.lock().unwrap_or_else(|p| p.into_inner());
            if known.is_none() {
                *known = Some(id);
                adopt(cfg, id);
            }
        }
        if passing {
            passing = crate::bounded::write_all(to.as_fd(), line.as_bytes(), Duration::from_secs(1)).is_ok();
        }
        line.clear();
    }
}

/// Ends a granted salloc that did not relinquish by itself: SIGTERM, then after RELINQUISH
/// SIGKILL and scancel of the job if salloc named one. (A pending salloc ignores SIGTERM: the
/// caller's watch kills it and its job is cancelled where `handle` sees it end.)
fn end_salloc(child: &mut crate::spawn::RealChild, cfg: &crate::session::Config, job: Option<u32>) {
    use nix::sys::signal::{kill, Signal};
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = std::time::Instant::now() + RELINQUISH;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    if let Some(job) = job {
        let _ = cfg.command("scancel").arg(job.to_string()).status();
    }
}

pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_salloc(&req.argv, cfg.plugin_options())?;
    if any_of(&parsed.options, &["help", "usage", "version"]) {
        return call.run_with(written(&parsed.options), stdio);
    }
    // Known before the allocation is asked for: the allocation is recorded with it.
    cfg.cluster_to_record()?;
    let mut child = spawn_salloc(cfg, &parsed.options)?;
    let hold = child.stdin.take();
    let mut out = child.stdout.take().ok_or_else(|| Refusal::Failed("salloc's output is missing".into()))?;
    let err = child.stderr.take().ok_or_else(|| Refusal::Failed("salloc's messages are missing".into()))?;
    let job = Arc::new(Mutex::new(None::<u32>));
    let stderr_to = stdio.stderr;
    std::thread::scope(|scope| {
        let job_seen = job.clone();
        let passer = scope.spawn(move || pass_stderr(err, stderr_to, cfg, &job_seen));
        let gone = Arc::new(AtomicBool::new(false));
        let pending = Arc::new(Mutex::new(true));
        watch_caller(call.conn, &gone, &pending, Pid::from_raw(child.id() as i32));
        let env = read_allocation_env(&mut out);
        *pending.lock().unwrap_or_else(|p| p.into_inner()) = false;
        let known = |j: &Mutex<Option<u32>>| *j.lock().unwrap_or_else(|p| p.into_inner());
        let Some(env) = env else {
            drop(hold);
            let status = child.wait().map_err(|e| Refusal::Failed(format!("waiting for Slurm: {e}")))?;
            let _ = passer.join();
            // Killed while its request was pending: the job salloc named is cancelled.
            if let Some(id) = known(&job) {
                if gone.load(Ordering::Acquire) {
                    let _ = cfg.command("scancel").arg(id.to_string()).status();
                }
                unnote(cfg, id);
            }
            use std::os::unix::process::ExitStatusExt;
            return Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
        };
        let Some(id) = env.get("SLURM_JOB_ID").and_then(|j| j.parse::<u32>().ok()) else {
            drop(hold);
            end_salloc(&mut child, cfg, known(&job));
            return Err(Refusal::Failed("salloc granted an allocation without a job id".into()));
        };
        if known(&job).is_none() {
            *job.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
            adopt(cfg, id);
        }
        call.audit.job = Some(id);
        let mut conn = call.conn;
        let answer = Response::Allocated { job: id, env, command: parsed.command.clone() };
        if !gone.load(Ordering::Acquire) && wire::write_frame(&mut conn, &answer).is_ok() {
            // The stub runs the command; its connection ends when the command does.
            while !gone.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // The holding command's stdin closes: salloc relinquishes the allocation.
        drop(hold);
        wait_relinquished(&mut child, cfg, id);
        let _ = passer.join();
        unnote(cfg, id);
        Ok(0)
    })
}

/// salloc with the caller's options and the holding command, its three streams piped.
fn spawn_salloc(cfg: &crate::session::Config, options: &Options) -> Result<crate::spawn::RealChild, Refusal> {
    // Not `cfg.command`: salloc must not die with the chaperon (a killed salloc leaves its
    // allocation running). If the chaperon goes, the holding command's stdin closes and
    // salloc relinquishes, as it does when the caller goes.
    let mut cmd = crate::session::real_command_outliving(&cfg.slurm_bin, &cfg.who.home, &cfg.who.user, "salloc");
    cmd.args(written(options));
    // The holding command, on the login node: says the allocation's environment, then waits
    // for the pipe the chaperon holds to close.
    cmd.args(["/bin/sh", "-c", &format!("env -0; printf '{MARK}\\0'; exec cat >/dev/null")]);
    cmd.stdin(Io::piped()).stdout(Io::piped()).stderr(Io::piped());
    cmd.spawn().map_err(|e| Refusal::Failed(format!("cannot run Slurm: {e}")))
}

/// Until the allocation is granted (it may queue), the caller going away (Ctrl-C kills the
/// stub) ends the request. salloc ignores SIGTERM and SIGINT while it waits, so it is killed,
/// and its pending job cancelled by `handle`. `gone` is set when the caller's connection ends.
fn watch_caller(conn: &std::os::unix::net::UnixStream, gone: &Arc<AtomicBool>, pending: &Arc<Mutex<bool>>, pid: Pid) {
    let Ok(mut conn) = conn.try_clone() else { return };
    let (gone, pending) = (gone.clone(), pending.clone());
    std::thread::spawn(move || {
        let mut sink = [0u8; 256];
        while matches!(std::io::Read::read(&mut conn, &mut sink), Ok(n) if n > 0) {}
        // Held while salloc is not yet reaped: the pid is still salloc's.
        let still = pending.lock().unwrap_or_else(|p| p.into_inner());
        gone.store(true, Ordering::Release);
        if *still {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    });
}

/// The allocation's environment as the holding command says it, or None if salloc ends (or
/// says more than a MiB) first.
fn read_allocation_env(out: &mut std::fs::File) -> Option<BTreeMap<String, String>> {
    let mut got = Vec::new();
    loop {
        let mut buf = [0u8; 4096];
        match out.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if got.len() > 1 << 20 {
            return None;
        }
        if let Some(env) = allocation_env(&got) {
            return Some(env);
        }
    }
}

/// salloc given RELINQUISH to end once its holding command has; then ended (`end_salloc`).
fn wait_relinquished(child: &mut crate::spawn::RealChild, cfg: &crate::session::Config, id: u32) {
    let deadline = std::time::Instant::now() + RELINQUISH;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if std::time::Instant::now() >= deadline {
            end_salloc(child, cfg, Some(id));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn parse_salloc(a: &[String]) -> Result<SallocRequest, GrammarError> {
        super::parse_salloc(a, &[])
    }

    #[test]
    fn the_table_is_salloc_22_05() {
        use crate::table::testkit::*;
        entries_are_the_getopt_sets(&SALLOC, &[crate::getopt::BELT]);
        table_is_sound(&SALLOC, 'v');
        denied_with(&SALLOC, "no-shell", "outlive");
        denied_with(&SALLOC, "agent-sandbox", "belt");
        let e = parse_salloc(&args(&["--no"])).unwrap_err().to_string();
        let all = "'--no-bell' '--no-kill' '--no-shell' '--nodefile' '--nodelist' '--nodes'";
        assert_eq!(e, format!("option '--no' is ambiguous; possibilities: {all}"));
        assert_eq!(
            written(&parse_salloc(&args(&["--nodel=n1", "--job-n", "x"])).unwrap().options),
            ["--nodelist=n1", "--job-name=x"]
        );
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

    #[test]
    fn the_job_id_is_read_from_salloc_s_own_lines_only() {
        assert_eq!(job_in_line("salloc: Pending job allocation 123"), Some(123));
        assert_eq!(job_in_line("salloc: Granted job allocation 7"), Some(7));
        for other in [
            "Granted job allocation 7",
            "salloc: job 7 queued and waiting for resources",
            "salloc: Granted job allocation x",
        ] {
            assert_eq!(job_in_line(other), None, "{other}");
        }
    }
}
