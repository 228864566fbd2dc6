//! One request, decided and carried out: the argument grammar first (a refusal names the
//! option and why), then the scope, then the real Slurm command, run with a clean
//! environment and the caller's stdio.

use crate::job::{self, JobSpec};
use crate::scope::Entry;
use crate::server::{jobs_in_scope, scope_of, under_project, Audit, Config, Handled, Stdio};
use crate::wire::{Request, Response};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Largest batch script accepted (from a file or stdin).
pub const MAX_SCRIPT: usize = 4 << 20;
/// Largest output of a real command the chaperon reads to filter (`squeue --json`...).
pub const MAX_CAPTURE: usize = 256 << 20;

/// Commands the stub refuses outright: each would give the jail a way around the chaperon.
pub const REFUSED: &[(&str, &str)] = &[
    ("salloc", "interactive allocations start a shell outside the jail; use `srun --pty` or sbatch"),
    ("sattach", "attaching to a step's I/O is not mediated; read the job's output file instead"),
    ("sbcast", "broadcasting files to nodes is not mediated; jobs read the project directly"),
    ("scrontab", "cron jobs would run outside any session's scope; use sbatch --begin"),
    ("scrun", "OCI containers are not mediated by agent-sandbox"),
    ("strigger", "triggers run programs outside the jail"),
];

/// The connection a request came on: while its command runs, the stub may send signals.
pub struct Link<'a> {
    pub conn: &'a std::os::unix::net::UnixStream,
}

pub fn dispatch(req: &Request, stdio: Stdio, cfg: &Config, link: &Link<'_>) -> Handled {
    let mut audit =
        Audit { command: req.command.clone(), argv: req.argv.clone(), cwd: req.cwd.clone(), ..Default::default() };
    // Queries and updates end by themselves; only srun runs as long as its tasks do (and
    // ends with the stub's connection, like every call).
    let bound = (req.command != "srun").then_some(crate::bounded::QUERY_TIMEOUT);
    let run = |cmd: Command, stdio: Stdio| run(cmd, stdio, link, bound);
    let result = match req.command.as_str() {
        "sbatch" => sbatch(req, stdio, cfg, &mut audit, link),
        "squeue" => squeue(req, stdio, cfg, &run),
        "scancel" => scancel(req, stdio, cfg, &run),
        "srun" => srun(req, stdio, cfg, &mut audit, &run),
        "scontrol" => crate::views::scontrol(req, stdio, cfg, &run),
        "sacct" => crate::views::sacct(req, stdio, cfg, &run),
        "sinfo" | "sdiag" | "sshare" | "sprio" | "sstat" | "sacctmgr" => crate::views::info(req, stdio, cfg, &run),
        other => match REFUSED.iter().find(|(n, _)| *n == other) {
            Some((_, why)) => Err(why.to_string()),
            None => Err(format!("`{other}` is not mediated by this version of agent-sandbox")),
        },
    };
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

/// The environment every real Slurm command runs with: nothing from the jail, nothing from
/// the launcher beyond what locates Slurm. (sbatch reads `SBATCH_*`, srun `SLURM_*`: a jail
/// must not be able to set options that way.)
/// A Slurm command must not outlive the chaperon (killed, or ended with its session): an
/// orphaned `srun` would keep running and hold the jail's output open.
fn dies_with_chaperon(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing and touches no lock.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
}

pub(crate) fn clean(cmd: &mut Command, cfg: &Config) {
    dies_with_chaperon(cmd);
    // Never the project: a relative name a Slurm command opens on the host side must not
    // land where the jail plants symlinks.
    cmd.current_dir("/");
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &cfg.home)
        .env("USER", &cfg.user)
        .env("LOGNAME", &cfg.user)
        .env("LANG", "C.UTF-8");
    if let Ok(conf) = std::env::var("SLURM_CONF") {
        cmd.env("SLURM_CONF", conf);
    }
}

/// A runner of real Slurm commands with the caller's stdio.
pub type Runner<'r> = dyn Fn(Command, Stdio) -> Result<i32, String> + 'r;

/// Signals the stub may pass on: what a terminal or a job manager sends; never SIGKILL/SIGSTOP.
fn passable(s: nix::sys::signal::Signal) -> bool {
    use nix::sys::signal::Signal::*;
    matches!(s, SIGINT | SIGTERM | SIGHUP | SIGQUIT | SIGUSR1 | SIGUSR2 | SIGCONT)
}

/// Runs a real Slurm command with the caller's stdio; signals the stub sends meanwhile go to
/// it, and if the stub goes away (its jail ended, it was killed) the command is terminated.
/// With a `bound`, a command still running after it is killed (a caller that never reads
/// its output would otherwise hold this thread).
fn run(mut cmd: Command, stdio: Stdio, link: &Link<'_>, bound: Option<std::time::Duration>) -> Result<i32, String> {
    cmd.stdin(stdio.stdin).stdout(stdio.stdout).stderr(stdio.stderr);
    let mut child = cmd.spawn().map_err(|e| format!("cannot run Slurm: {e}"))?;
    let watch = watch(&child, link, bound);
    let status = child.wait().map_err(|e| format!("waiting for Slurm: {e}"))?;
    drop(watch);
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// While a real command runs for a caller: the signals the stub sends go to it, it is
/// killed if the stub goes away (its jail ended, it was killed), and, with a `bound`, if it
/// runs longer than that. Dropping the watch (after the command was reaped) ends both.
struct Watch {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _finish: std::sync::mpsc::Sender<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Release);
    }
}

fn watch(child: &std::process::Child, link: &Link<'_>, bound: Option<std::time::Duration>) -> Watch {
    use nix::sys::signal::{kill, Signal};
    use std::sync::atomic::{AtomicBool, Ordering};
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let done = std::sync::Arc::new(AtomicBool::new(false));
    if let Ok(mut conn) = link.conn.try_clone() {
        let done = done.clone();
        std::thread::spawn(move || loop {
            match crate::wire::read_frame::<crate::wire::Control>(&mut conn) {
                Ok(crate::wire::Control::Signal { signal }) => {
                    let sig = Signal::try_from(signal).ok().filter(|s| passable(*s));
                    if let (Some(sig), false) = (sig, done.load(Ordering::Acquire)) {
                        let _ = kill(pid, sig);
                    }
                }
                Err(crate::wire::WireError::Io(_)) => {
                    // The caller is gone: nothing may keep running on its behalf (some
                    // Slurm commands block SIGTERM while they wait).
                    if !done.load(Ordering::Acquire) {
                        let _ = kill(pid, Signal::SIGKILL);
                    }
                    return;
                }
                Err(_) => {}
            }
        });
    }
    let (finish, finished) = std::sync::mpsc::channel::<()>();
    if let Some(limit) = bound {
        let done = done.clone();
        std::thread::spawn(move || {
            if finished.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                && !done.load(Ordering::Acquire)
            {
                let _ = kill(pid, Signal::SIGKILL);
            }
        });
    }
    Watch { done, _finish: finish }
}

pub(crate) fn cwd_of(req: &Request, cfg: &Config) -> Result<PathBuf, String> {
    under_project(&cfg.project, Path::new("/"), &req.cwd)
        .map_err(|_| format!("the working directory {} is not inside the project", req.cwd))
}

fn sbatch(req: &Request, stdio: Stdio, cfg: &Config, audit: &mut Audit, link: &Link<'_>) -> Result<i32, String> {
    use crate::commands::sbatch::parse_sbatch;
    let err = |e: crate::table::GrammarError| e.to_string();
    let first = parse_sbatch(&req.argv, None).map_err(err)?;
    let cwd = cwd_of(req, cfg)?;
    let wrap = first.last("wrap").flatten().map(str::to_owned);
    // sbatch opens its script argument with open(2): `/dev/stdin` (Snakemake's
    // --slurm-pass-command-as-script) is the caller's stdin, named after the file.
    let on_stdin = |p: &String| ["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"].contains(&p.as_str());
    let (script, default_name) = match (&wrap, &first.script_path) {
        (Some(cmd), _) => {
            (format!("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{cmd}\n"), "wrap".to_string())
        }
        (None, Some(p)) if on_stdin(p) => (read_stdin_script(&stdio)?, "stdin".into()),
        // Read by the stub inside the jail: wherever the jail keeps it (dask-jobqueue writes
        // its job scripts to $TMPDIR), it is the file the jail sees.
        (None, Some(p)) if req.script.is_some() => {
            let text = req.script.clone().unwrap_or_default();
            if text.len() > MAX_SCRIPT {
                return Err(format!("the batch script is larger than {} MiB", MAX_SCRIPT >> 20));
            }
            let name = Path::new(p).file_name().map(|n| n.to_string_lossy().into_owned());
            (text, name.unwrap_or_else(|| "sbatch".into()))
        }
        (None, Some(p)) => {
            let path = under_project(&cfg.project, &cwd, p)?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "sbatch".into());
            (read_capped(open_in_project(&cfg.project, &path).map_err(|e| format!("{p}: {e}"))?)?, name)
        }
        (None, None) => (read_stdin_script(&stdio)?, "sbatch".into()),
    };
    audit.script_bytes = Some(script.len());
    audit.script_hash = Some(fingerprint(script.as_bytes()));
    let parsed = if wrap.is_some() { first } else { parse_sbatch(&req.argv, Some(&script)).map_err(err)? };

    // Where the job runs: --chdir (rebuilt: checked against the project) or the caller's cwd.
    let job_cwd = match parsed.last("chdir").flatten() {
        Some(d) => under_project(&cfg.project, &cwd, d)?,
        None => cwd.clone(),
    };
    // An unknown SLURM_SCOPE is refused for every command, sbatch included.
    scope_of(req)?;
    dependencies_in_scope(&parsed.options, "--dependency", req, cfg)?;
    let array = parsed.last("array").is_some();
    let export = export_env(parsed.last("export").flatten(), parsed.last("export-file").flatten(), req, &job_cwd, cfg)?;
    let spec = JobSpec {
        output: parsed.last("output").flatten().map(str::to_owned).unwrap_or_else(|| {
            if array {
                "slurm-%A_%a.out".into()
            } else {
                "slurm-%j.out".into()
            }
        }),
        error: parsed.last("error").flatten().map(str::to_owned),
        input: parsed.last("input").flatten().map(str::to_owned),
        append: parsed.last("open-mode").flatten().is_some_and(|m| m.eq_ignore_ascii_case("append")),
        slurm_export_env: export_request(parsed.last("export").flatten(), req)
            .filter(|e| !e.eq_ignore_ascii_case("ALL")),
        job_name: parsed.last("job-name").flatten().map(str::to_owned).unwrap_or(default_name),
        script_args: parsed.script_args.clone(),
        ..job_spec(cfg, &job_cwd, export)
    };
    let (dir, wrapper) = write_job_dir(cfg, &spec, &script)?;

    // The real sbatch sees only what the table allows, the rebuilt pieces and our wrapper.
    let mut cmd = Command::new(cfg.real("sbatch"));
    clean(&mut cmd, cfg);
    cmd.current_dir(&dir);
    cmd.arg("--parsable").arg("--export=NONE").arg(format!("--chdir={}", job_cwd.display()));
    cmd.arg(format!("--job-name={}", spec.job_name));
    let out = dir.join(job::WRAPPER_OUT);
    cmd.arg(format!("--output={}", out.display())).arg(format!("--error={}", out.display()));
    const OURS: &[&str] =
        &["wrap", "chdir", "export", "export-file", "output", "error", "input", "job-name", "parsable", "open-mode"];
    forward(&mut cmd, &parsed.options, OURS);
    // The wrapper reaches sbatch on a pipe the chaperon writes, not by a path: nothing that
    // could be swapped between our write and sbatch's read.
    cmd.stdin(std::process::Stdio::piped()).stderr(stdio.stderr).stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("cannot run sbatch: {e}"))?;
    // `sbatch --wait` lasts as long as the job: it ends with the caller, like every call.
    let _watch = watch(&child, link, None);
    if let Some(mut script_in) = child.stdin.take() {
        let _ = script_in.write_all(wrapper.as_bytes());
    }
    let mut stdout = std::fs::File::from(stdio.stdout);
    // The job id comes first, at submission: record it in scope and show it then, also with
    // --wait (which exits only when the job ends, with the job's status).
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().ok_or("sbatch: no stdout")?));
    let first_line = lines.next().and_then(Result::ok).unwrap_or_default();
    let first_line = first_line.trim();
    let id: Option<u32> = first_line.split(';').next().and_then(|s| s.parse().ok());
    match id {
        Some(job) if parsed.last("test-only").is_none() => {
            audit.job = Some(job);
            let recorded =
                cfg.registry().add(&Entry { job, session: cfg.session.clone(), project: cfg.project.clone() });
            if let Err(e) = recorded {
                let _ = writeln!(std::io::stderr(), "job {job} submitted but not recorded in scope: {e}");
            }
            let shown = match parsed.last("parsable") {
                Some(_) => format!("{first_line}\n"),
                None => format!("Submitted batch job {job}\n"),
            };
            let _ = stdout.write_all(shown.as_bytes());
        }
        _ if !first_line.is_empty() => {
            let _ = writeln!(stdout, "{first_line}");
        }
        _ => {}
    }
    for line in lines.map_while(Result::ok) {
        let _ = writeln!(stdout, "{line}");
    }
    let status = child.wait().map_err(|e| format!("waiting for sbatch: {e}"))?;
    Ok(status.code().unwrap_or(1))
}

/// The batch script on the caller's stdin: bounded in size and in time (a terminal that never
/// sends end-of-file must not hold the chaperon).
fn read_stdin_script(stdio: &Stdio) -> Result<String, String> {
    use std::os::fd::AsFd;
    let bytes = crate::bounded::read_to_end(stdio.stdin.as_fd(), MAX_SCRIPT, crate::bounded::stdin_timeout())
        .map_err(|e| format!("the batch script on stdin: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "the batch script is not valid UTF-8".to_string())
}

/// Opens a file the jail named, already resolved under the project, and checks that what was
/// opened is still under it: the jail can swap a symlink between the resolution and the open.
fn open_in_project(project: &Path, path: &Path) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    use std::os::fd::AsRawFd;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))?;
    if !real.starts_with(project) || !f.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "not a file inside the project"));
    }
    Ok(f)
}

/// Reads a file the jail named, at most `MAX_SCRIPT` bytes; `what` names it in errors.
fn read_capped_bytes(f: std::fs::File, what: &str) -> Result<Vec<u8>, String> {
    crate::bounded::read_file(f, MAX_SCRIPT).map_err(|e| match e {
        crate::bounded::BoundError::TooLarge(_) => format!("{what} is larger than {} MiB", MAX_SCRIPT >> 20),
        other => format!("cannot read {what}: {other}"),
    })
}

fn read_capped(f: std::fs::File) -> Result<String, String> {
    let buf = read_capped_bytes(f, "the batch script")?;
    String::from_utf8(buf).map_err(|_| "the batch script is not valid UTF-8".to_string())
}

/// SHA-256 of the script, hex: the audit log says which script ran without holding its text.
fn fingerprint(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What the caller asked to export: `--export`, else the variable the command reads it from
/// (sbatch: `SBATCH_EXPORT`; srun: `SRUN_EXPORT_ENV`, then `SLURM_EXPORT_ENV`), else None (ALL).
fn export_request(export: Option<&str>, req: &Request) -> Option<String> {
    let vars: &[&str] =
        if req.command == "srun" { &["SRUN_EXPORT_ENV", "SLURM_EXPORT_ENV"] } else { &["SBATCH_EXPORT"] };
    export.map(str::to_owned).or_else(|| vars.iter().find_map(|v| req.env.get(*v).cloned()))
}

/// The variables the job gets inside the jail, from `--export` (or SBATCH_EXPORT): ALL (the
/// default, as in Slurm) is the caller's environment; NONE is none; a list names them.
fn export_env(
    export: Option<&str>,
    export_file: Option<&str>,
    req: &Request,
    cwd: &Path,
    cfg: &Config,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let spec = export_request(export, req).unwrap_or_else(|| "ALL".into());
    let mut out = BTreeMap::new();
    if let Some(file) = export_file {
        let path = under_project(&cfg.project, cwd, file)?;
        let file = open_in_project(&cfg.project, &path).map_err(|e| format!("--export-file: {e}"))?;
        let text = read_capped_bytes(file, "the --export-file")?;
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

/// srun: a step whose every task starts inside the jail. The command is recorded in a job
/// directory like a batch script; each task runs `agent-sandbox exec --job DIR`, which
/// rebuilds the jail on its node and runs the command there with the task's own stdio (so
/// output streams and `--pty` works). Inside a batch job (this chaperon runs in one) the step
/// joins that job's allocation; elsewhere srun makes its own allocation.
fn srun(req: &Request, stdio: Stdio, cfg: &Config, audit: &mut Audit, run: &Runner<'_>) -> Result<i32, String> {
    let parsed = crate::commands::srun::parse_srun(&req.argv).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(cfg.real("srun"));
    clean(&mut cmd, cfg);
    // The allocation a step joins: this chaperon's own job (from slurmstepd, not the jail).
    for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("SLURM_") && k != "SLURM_CONF") {
        cmd.env(k, v);
    }
    dependencies_in_scope(&parsed.options, "--dependency", req, cfg)?;
    // Files a step's tasks read and write are opened by each task inside its jail (see
    // `job::job_command`), never by srun here or slurmstepd on the node: both run outside
    // any jail and would follow the jail's symlinks, or read `~/.aws` on the caller's behalf.
    // `all`, `none` and task numbers name no file and go to srun as they are.
    // A number is a task id only below the step's task count (srun's fname.c); above it, a
    // file name. The count: an explicit -n, else the allocation's (this chaperon runs in it).
    let tasks = parsed
        .last("ntasks")
        .flatten()
        .and_then(|n| n.trim().parse::<u64>().ok())
        .or_else(|| std::env::var("SLURM_NTASKS").ok().and_then(|n| n.parse().ok()))
        .unwrap_or(1);
    let file = |long: &str| parsed.last(long).flatten().filter(|v| !job::names_no_file(v, tasks)).map(str::to_owned);
    let (input, output, error) = (file("input"), file("output"), file("error"));
    let mut ours = vec!["chdir", "export", "export-file", "open-mode"];
    for (long, v) in [("input", &input), ("output", &output), ("error", &error)] {
        if v.is_some() {
            ours.push(long);
        }
    }
    let Some(program) = parsed.command.clone() else {
        forward(&mut cmd, &parsed.options, &ours);
        return run(cmd, stdio);
    };
    if let Some(job) = parsed.jobid {
        let mine = jobs_in_scope(req, cfg)?;
        let own_job = std::env::var("SLURM_JOB_ID").ok().and_then(|j| j.parse::<u32>().ok());
        if !mine.contains(&job) && own_job != Some(job) {
            return Err(format!("--jobid: job {job} is not one of this project's jobs"));
        }
    }
    let cwd = cwd_of(req, cfg)?;
    let job_cwd = match parsed.last("chdir").flatten() {
        Some(d) => under_project(&cfg.project, &cwd, d)?,
        None => cwd,
    };
    let mut argv = vec![program];
    argv.extend(parsed.args.iter().cloned());
    let export = export_env(parsed.last("export").flatten(), parsed.last("export-file").flatten(), req, &job_cwd, cfg)?;
    let spec = JobSpec {
        job_name: parsed.last("job-name").flatten().unwrap_or("srun").to_owned(),
        command: Some(argv),
        output: output.unwrap_or_default(),
        error,
        input: input.clone(),
        append: parsed.last("open-mode").flatten().is_some_and(|m| m.eq_ignore_ascii_case("append")),
        ..job_spec(cfg, &job_cwd, export)
    };
    let (dir, _) = write_job_dir(cfg, &spec, "")?;
    audit.script_bytes = None;
    // The tasks start in the job directory (ours, not the jail's); `exec --job` puts them in
    // their working directory inside the jail. srun itself runs there too.
    cmd.current_dir(&dir);
    cmd.arg("--export=NONE").arg(format!("--chdir={}", dir.display()));
    if input.is_some() {
        cmd.arg("--input=none");
    }
    forward(&mut cmd, &parsed.options, &ours);
    // srun names a step (and a job it allocates) after its command, unless told otherwise
    // (--job-name, or SLURM_JOB_NAME inside a job): ours is the launcher, not the user's.
    if parsed.last("job-name").is_none() && std::env::var_os("SLURM_JOB_NAME").is_none() {
        let base = spec.command.iter().flatten().next().map(|p| p.rsplit('/').next().unwrap_or(p).to_string());
        let base = base.filter(|b| !b.is_empty() && !b.chars().any(char::is_control));
        cmd.arg(format!("--job-name={}", base.unwrap_or_else(|| "srun".into())));
    }
    cmd.arg(&cfg.exe).arg("exec").arg("--job").arg(&dir);
    run(cmd, stdio)
}

/// `--clusters/-M` in a read-only view: every name must be the local cluster or `all`, and the
/// real command is asked about the local cluster alone (`all` included), so the answer stays
/// within the scope the chaperon filters. Returns the option to give the real command (a
/// later `--clusters` overrides an earlier one, as Slurm reads them), if one was asked for.
pub(crate) fn local_cluster_only(
    options: &[(&'static str, Option<String>)],
    cfg: &Config,
) -> Result<Option<String>, String> {
    let mut asked = false;
    for (_, value) in options.iter().filter(|(l, _)| *l == "clusters") {
        asked = true;
        for name in crate::grammar::cluster_names(value.as_deref().unwrap_or_default()) {
            if name != "all" && Some(name.as_str()) != cfg.cluster_name() {
                return Err(format!(
                    "--clusters: `{}` is not this cluster ({}); a sandboxed session sees its own cluster only",
                    crate::grammar::clip(&name),
                    cfg.cluster_name().unwrap_or("its name is unknown")
                ));
            }
        }
    }
    Ok(match (asked, cfg.cluster_name()) {
        (true, Some(name)) => Some(format!("--clusters={name}")),
        _ => None,
    })
}

/// Every job a dependency value names (each occurrence, not only the last one Slurm uses)
/// must be in the caller's scope: a foreign job's state must not steer, or be probed by, ours.
pub(crate) fn dependencies_in_scope<'a>(
    options: impl IntoIterator<Item = &'a (&'static str, Option<String>)>,
    shown: &str,
    req: &Request,
    cfg: &Config,
) -> Result<(), String> {
    let mut mine: Option<Vec<u32>> = None;
    for (long, value) in options {
        if !long.eq_ignore_ascii_case("dependency") {
            continue;
        }
        let Some(dep) = value.as_deref().filter(|d| !d.is_empty()) else { continue };
        // `singleton` waits on every job of the user with the same name, in scope or not:
        // a job outside the project would hold ours, and its existence would show.
        if dep.split([',', '?']).any(|item| item.eq_ignore_ascii_case("singleton")) {
            return Err(format!(
                "{shown}: singleton is not mediated (it names jobs outside this project); wait on your own job ids, e.g. afterany:ID"
            ));
        }
        let ids = crate::grammar::dependency_job_ids(dep).map_err(|e| format!("{shown}: {e}"))?;
        if ids.is_empty() {
            continue;
        }
        let mine = match &mut mine {
            Some(m) => m,
            None => mine.insert(jobs_in_scope(req, cfg)?),
        };
        // A step may also wait on its own allocation (this chaperon runs inside that job).
        let own = std::env::var("SLURM_JOB_ID").ok().and_then(|j| j.parse::<u32>().ok());
        if let Some(foreign) = ids.iter().find(|id| !mine.contains(id) && own != Some(**id)) {
            return Err(format!("{shown}: job {foreign} is not one of this project's jobs"));
        }
    }
    Ok(())
}

/// What every job directory holds for this session: the frozen policy, project and cwd.
fn job_spec(cfg: &Config, cwd: &Path, export: Option<BTreeMap<String, String>>) -> JobSpec {
    JobSpec {
        version: job::VERSION,
        session: cfg.session.clone(),
        project: cfg.project.clone(),
        cwd: cwd.to_path_buf(),
        policy: cfg.policy.clone(),
        export,
        output: String::new(),
        error: None,
        input: None,
        append: false,
        slurm_export_env: None,
        job_name: String::new(),
        script_args: vec![],
        command: None,
    }
}

/// Writes the job directory; returns it and the wrapper script Slurm is to run.
fn write_job_dir(cfg: &Config, spec: &JobSpec, script: &str) -> Result<(PathBuf, String), String> {
    let jobs = cfg.state_dir.join("jobs");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&jobs).map_err(|e| e.to_string())?;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = jobs.join(format!("{}-{}-{n}", cfg.session, std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let write = |name: &str, data: &[u8], mode: u32| -> Result<(), String> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(name))
            .map_err(|e| format!("{name}: {e}"))?;
        f.write_all(data).map_err(|e| format!("{name}: {e}"))
    };
    write(job::SPEC, serde_json::to_string(spec).map_err(|e| e.to_string())?.as_bytes(), 0o400)?;
    write(job::SCRIPT, script.as_bytes(), 0o500)?;
    let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    let wrapper = format!(
        "#!/bin/sh\n# agent-sandbox job wrapper: the job runs inside the session's jail, rebuilt from the\n\
         # frozen policy in this directory.\nexec {} exec --job {}\n",
        q(&cfg.exe),
        q(&dir)
    );
    write(job::WRAPPER, wrapper.as_bytes(), 0o500)?;
    Ok((dir, wrapper))
}

/// Options the real command gets as the caller wrote them, minus those the chaperon handles.
pub(crate) fn forward(cmd: &mut Command, options: &[(&'static str, Option<String>)], ours: &[&str]) {
    for (long, value) in options {
        if ours.contains(long) {
            continue;
        }
        match value {
            Some(v) => cmd.arg(format!("--{long}={v}")),
            None => cmd.arg(format!("--{long}")),
        };
    }
}

pub(crate) fn only_caller(users: &[String], cfg: &Config) -> Result<(), String> {
    let uid = cfg.uid.to_string();
    match users.iter().find(|u| **u != cfg.user && **u != uid) {
        Some(u) => Err(format!("only your own jobs are visible here, not user {u}'s")),
        None => Ok(()),
    }
}

/// squeue limited to the scope's jobs; `--json`/`--yaml` output is filtered here.
fn squeue(req: &Request, stdio: Stdio, cfg: &Config, run: &Runner<'_>) -> Result<i32, String> {
    use crate::table::Output;
    let parsed = crate::commands::squeue::parse_squeue(&req.argv).map_err(|e| e.to_string())?;
    only_caller(&parsed.users, cfg)?;
    let mut ids = jobs_in_scope(req, cfg)?;
    if let Some(asked) = parsed.jobs.as_ref().filter(|a| !a.is_empty()) {
        ids.retain(|id| asked.iter().any(|r| r.job == *id));
    }
    let cluster = local_cluster_only(&parsed.options, cfg)?;
    let mut cmd = Command::new(cfg.real("squeue"));
    clean(&mut cmd, cfg);
    cmd.args(cluster);
    if parsed.output != Output::Table {
        // squeue --json/--yaml ignore the filters: the chaperon asks for JSON, narrows the
        // document to the scope, and writes it as asked (YAML from the same document).
        forward(&mut cmd, &parsed.options, &["jobs", "steps", "user", "users", "yaml", "clusters"]);
        if parsed.output == Output::Yaml {
            cmd.arg("--json");
        }
        cmd.stdin(std::process::Stdio::null()).stderr(stdio.stderr);
        let (out, status) = crate::bounded::capture(cmd, MAX_CAPTURE, crate::bounded::QUERY_TIMEOUT)?;
        let mut v: serde_json::Value = serde_json::from_slice(&out).map_err(|e| format!("squeue --json: {e}"))?;
        if let Some(jobs) = v.get_mut("jobs").and_then(|j| j.as_array_mut()) {
            jobs.retain(|j| j.get("job_id").and_then(|i| i.as_u64()).is_some_and(|i| ids.contains(&(i as u32))));
        }
        let text = match parsed.output {
            Output::Yaml => format!("---\n{}", crate::yaml::to_yaml(&v)),
            _ => format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()),
        };
        use std::os::fd::AsFd;
        crate::bounded::write_all(stdio.stdout.as_fd(), text.as_bytes(), crate::bounded::QUERY_TIMEOUT)
            .map_err(|e| format!("writing squeue's answer: {e}"))?;
        return Ok(status.code().unwrap_or(1));
    }
    forward(&mut cmd, &parsed.options, &["jobs", "steps", "user", "users", "clusters"]);
    if ids.is_empty() {
        // Nothing in scope: a filter that matches nothing, so the header still looks real.
        cmd.arg("--name=agent-sandbox-no-job-in-scope");
    } else {
        cmd.arg(format!("--jobs={}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
    }
    run(cmd, stdio)
}

/// scancel of jobs in scope only; filters (`--name`, `--state`...) apply within the scope.
fn scancel(req: &Request, stdio: Stdio, cfg: &Config, run: &Runner<'_>) -> Result<i32, String> {
    let parsed = crate::commands::scancel::parse_scancel(&req.argv).map_err(|e| e.to_string())?;
    only_caller(&parsed.users, cfg)?;
    let ids = jobs_in_scope(req, cfg)?;
    if let Some(foreign) = parsed.jobs.iter().find(|r| !ids.contains(&r.job)) {
        return Err(format!("job {} is not one of this project's jobs", foreign.job));
    }
    let targets: Vec<String> = if parsed.jobs.is_empty() {
        ids.iter().map(u32::to_string).collect()
    } else {
        parsed.jobs.iter().map(|r| r.to_string()).collect()
    };
    if targets.is_empty() {
        return Ok(0);
    }
    let mut cmd = Command::new(cfg.real("scancel"));
    clean(&mut cmd, cfg);
    forward(&mut cmd, &parsed.options, &["user", "me"]);
    cmd.args(targets);
    run(cmd, stdio)
}

#[cfg(test)]
mod tests {
    #[test]
    fn script_fingerprint_is_sha256() {
        assert_eq!(super::fingerprint(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn paths_outside_the_project_are_refused_even_through_a_symlink() {
        let dir = std::env::temp_dir().join(format!("chaperon-open-{}", std::process::id()));
        let project = dir.join("p");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(dir.join("secret"), "s").unwrap();
        std::fs::write(project.join("job.sh"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(dir.join("secret"), project.join("link")).unwrap();
        let project = std::fs::canonicalize(&project).unwrap();
        assert!(super::open_in_project(&project, &project.join("job.sh")).is_ok());
        assert!(super::open_in_project(&project, &project.join("link")).is_err(), "O_NOFOLLOW");
        assert!(super::open_in_project(&project, &dir.join("secret")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
