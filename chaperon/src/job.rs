//! The job directory: its format (`JobSpec`), how the chaperon writes one for each submission
//! (`write_job_dir`), how `agent-sandbox exec --job` opens it on the compute node (`open_job`),
//! and the command line `exec` runs inside the jail there (`job_command`, `expand_pattern`).
//! It lives in the user's state directory, which no jail can see or write, so nothing the jail
//! does after submission changes what the job runs. Should a jail reach it all the same, the
//! spec is sealed (`seal`, bound to the directory's name) and names the script's digest and
//! the project's identity: a spec, script or project changed since submission is refused on
//! the node, never used.
//!
//! ```text
//! <state>/jobs/<session>-<chaperon pid>-<n>/
//!   job.json      JobSpec, sealed: the frozen policy, project (and its identity), cwd,
//!                 export, output paths, the script's SHA-256
//!   script        the original batch script, byte for byte (empty for an srun step)
//!   wrapper.sh    the script Slurm runs: `exec agent-sandbox exec --job <dir>`
//!   wrapper.out   what the wrapper itself prints (errors starting the jail)
//! ```

pub use crate::identity::ProjectId;
use crate::seal::Key;
use crate::session::Config;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest batch script accepted (from a file or stdin), and largest file a job names that the
/// chaperon reads itself (an `--export-file`).
pub const MAX_SCRIPT: usize = 4 << 20;

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
    /// What sbatch itself sets `SLURM_EXPORT_ENV` to in the job: the caller's `--export`
    /// unless it is `ALL` (Slurm's sbatch/opt.c does the same). The node's value is the
    /// wrapper's, which must not leak to the job's own `srun` steps.
    #[serde(default)]
    pub slurm_export_env: Option<String>,
    pub job_name: String,
    pub script_args: Vec<String>,
    /// An srun step: run this command (resolved inside the jail) with the task's own stdio,
    /// instead of the batch script with its output files.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Where the caller ran sbatch or srun (inside the project), when it is not `cwd` (a
    /// `--chdir`): the job's `SLURM_SUBMIT_DIR`, which is `cwd` otherwise. The real command
    /// runs outside the project, which is what it would report, and which the job's jail does
    /// not show. Written only when it differs, so that a node with an older reader
    /// (`deny_unknown_fields`) still reads the usual directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_dir: Option<PathBuf>,
    /// The project directory the session ran in: the node runs the job only in that one
    /// directory, not whatever the project's path names when the job starts.
    pub project_id: ProjectId,
    /// SHA-256 of the batch script (hex; of nothing for an srun step).
    pub script_sha256: String,
}

/// Version 3: sealed, with the project's identity and the script's digest.
pub const VERSION: u32 = 3;

/// SHA-256 of `bytes` in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What a seal of `job.json` is for: the directory's name is its context.
pub const SEAL_PURPOSE: &str = "job.json";

impl JobSpec {
    /// A node that cannot read the spec refuses the job: never a default in its place.
    pub fn parse(text: &[u8]) -> Result<JobSpec, String> {
        let spec: JobSpec = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        if spec.version != VERSION {
            return Err(format!(
                "job directory format {} is not {VERSION}: submitted by another version",
                spec.version
            ));
        }
        Ok(spec)
    }

    /// What every job directory of this session holds: the frozen policy, project and the
    /// job's working directory, and the environment `--export` resolved to.
    pub fn for_session(cfg: &Config, cwd: &Path, export: Option<BTreeMap<String, String>>) -> Result<JobSpec, String> {
        let project_id = match &cfg.who.project_id {
            Some(id) => id.clone(),
            None => {
                return Err(format!(
                    "the identity of the project {} could not be recorded when the session started; \
                 fix: start the session again",
                    cfg.who.project.display()
                ))
            }
        };
        Ok(JobSpec {
            version: VERSION,
            session: cfg.who.session.clone(),
            project: cfg.who.project.clone(),
            cwd: cwd.to_path_buf(),
            policy: cfg.who.policy.clone().unwrap_or_default(),
            export,
            output: String::new(),
            error: None,
            input: None,
            append: false,
            slurm_export_env: None,
            job_name: String::new(),
            script_args: vec![],
            command: None,
            submit_dir: None,
            project_id,
            script_sha256: String::new(),
        })
    }

    /// The job's environment on the compute node: what `--export` asked for at submission,
    /// plus what Slurm tells the job on this node (`SLURM_JOB_ID`, the node list...), nothing
    /// else of the node's. The node's `SLURM_EXPORT_ENV` is the wrapper's own: the job gets
    /// what sbatch would have set for the caller's `--export` instead, so its srun steps
    /// inherit `ALL`.
    pub fn environment(&self, node: &[(String, String)]) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self.export.clone().unwrap_or_default().into_iter().collect();
        for (k, v) in node {
            if (k.starts_with("SLURM_") || k.starts_with("SLURMD_")) && k != "SLURM_EXPORT_ENV" {
                env.retain(|(n, _)| n != k);
                env.push((k.clone(), v.clone()));
            }
        }
        if let Some(d) = self.submit_dir.as_deref().unwrap_or(&self.cwd).to_str() {
            env.retain(|(n, _)| n != "SLURM_SUBMIT_DIR");
            env.push(("SLURM_SUBMIT_DIR".into(), d.to_string()));
        }
        if let Some(e) = &self.slurm_export_env {
            if !env.iter().any(|(k, _)| k == "SLURM_EXPORT_ENV") {
                env.push(("SLURM_EXPORT_ENV".into(), e.clone()));
            }
        }
        env
    }
}

/// A job directory named under the state directory's `jobs/` and not written yet, with the
/// wrapper script Slurm is to run in it. sbatch can start before the directory is written:
/// it gets the wrapper on a pipe and never opens the directory, and it cannot submit before
/// it has read the wrapper, which the chaperon writes only once the directory is whole.
pub struct JobDir {
    pub path: PathBuf,
    pub wrapper: String,
    key: std::sync::Arc<Key>,
}

impl JobDir {
    pub fn name(cfg: &Config) -> Result<JobDir, String> {
        let key = cfg.key()?;
        let jobs = cfg.who.state_dir.join("jobs");
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&jobs).map_err(|e| e.to_string())?;
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = jobs.join(format!("{}-{}-{n}", cfg.who.session, std::process::id()));
        let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
        let wrapper = format!(
            "#!/bin/sh\n# agent-sandbox job wrapper: the job runs inside the session's jail, rebuilt from the\n\
             # frozen policy in this directory.\nexec {} exec --job {}\n",
            q(&cfg.who.exe),
            q(&path)
        );
        Ok(JobDir { path, wrapper, key })
    }

    /// Writes the directory. Every file is created new, without following a symlink, and the
    /// spec and script are read-only: nothing here is changed after submission. The spec is
    /// sealed for this directory, with the script's digest.
    pub fn write(&self, spec: &JobSpec, script: &str) -> Result<(), String> {
        let dir = &self.path;
        let name = dir.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default();
        let spec = JobSpec { script_sha256: sha256_hex(script.as_bytes()), ..spec.clone() };
        let sealed =
            self.key.seal(SEAL_PURPOSE, name, serde_json::to_string(&spec).map_err(|e| e.to_string())?.as_bytes());
        std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
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
        write(SPEC, &sealed, 0o400)?;
        write(SCRIPT, script.as_bytes(), 0o500)?;
        write(WRAPPER, self.wrapper.as_bytes(), 0o500)
    }
}

/// Names and writes a job directory at once; returns it and its wrapper.
pub fn write_job_dir(cfg: &Config, spec: &JobSpec, script: &str) -> Result<(PathBuf, String), String> {
    let d = JobDir::name(cfg)?;
    d.write(spec, script)?;
    Ok((d.path, d.wrapper))
}

/// A job directory as `exec --job` opens it on the compute node: found under the node's own
/// `jobs` directory (never a path the job's environment chose), each file opened without
/// following a symlink, the spec read through the descriptor.
#[derive(Debug)]
pub struct OpenedJob {
    pub dir: PathBuf,
    pub spec: JobSpec,
    /// The batch script, read through a descriptor opened without following a symlink.
    pub script: String,
}

/// Largest `job.json` read (the frozen policy is most of it).
const MAX_SPEC: usize = 16 << 20;

pub fn open_job(jobs: &Path, arg: &Path, key: &Key) -> Result<OpenedJob, String> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fstat, Mode};
    use std::path::Component;
    let bad = || format!("{} is not a job directory of this user ({})", arg.display(), jobs.display());
    // A plain absolute path, one name below `jobs`: no `..`, no `.`, nothing to resolve.
    if !arg.is_absolute() || arg.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
        return Err(bad());
    }
    let (Some(parent), Some(name)) = (arg.parent(), arg.file_name()) else { return Err(bad()) };
    let jobs_canon = std::fs::canonicalize(jobs).map_err(|e| format!("{}: {e}", jobs.display()))?;
    if parent != jobs && parent != jobs_canon {
        return Err(bad());
    }
    let cloexec = OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let jobs_fd = nix::fcntl::open(&jobs_canon, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| format!("{}: {e}", jobs_canon.display()))?;
    let dir_fd = openat(&jobs_fd, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY | cloexec, Mode::empty())
        .map_err(|e| format!("{}: {e}", arg.display()))?;
    let st = fstat(&dir_fd).map_err(|e| format!("{}: {e}", arg.display()))?;
    if st.st_uid != nix::unistd::getuid().as_raw() || st.st_mode & 0o022 != 0 {
        return Err(format!("{}: not owned by this user, or writable by others", arg.display()));
    }
    let spec_fd = openat(&dir_fd, SPEC, OFlag::O_RDONLY | cloexec, Mode::empty())
        .map_err(|e| format!("{}/{SPEC}: {e}", arg.display()))?;
    let text = crate::bounded::read_file(std::fs::File::from(spec_fd), MAX_SPEC)
        .map_err(|e| format!("{}/{SPEC}: {e}", arg.display()))?;
    // Nothing of the spec is read before its seal checks, for this directory.
    let text = key
        .open(SEAL_PURPOSE, name.as_encoded_bytes(), &text)
        .map_err(|e| format!("{}/{SPEC} is refused: {e}; fix: resubmit the job from its session", arg.display()))?;
    let spec = JobSpec::parse(text).map_err(|e| format!("{}/{SPEC}: {e}", arg.display()))?;
    let script_fd = openat(&dir_fd, SCRIPT, OFlag::O_RDONLY | OFlag::O_NONBLOCK | cloexec, Mode::empty())
        .map_err(|e| format!("{}/{SCRIPT}: {e}", arg.display()))?;
    let st = fstat(&script_fd).map_err(|e| format!("{}/{SCRIPT}: {e}", arg.display()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("{}/{SCRIPT}: not a regular file", arg.display()));
    }
    let script = crate::bounded::read_file(std::fs::File::from(script_fd), MAX_SCRIPT)
        .map_err(|e| format!("{}/{SCRIPT}: {e}", arg.display()))?;
    if sha256_hex(&script) != spec.script_sha256 {
        return Err(format!("{}/{SCRIPT} is refused: it is not the script submitted (changed since)", arg.display()));
    }
    let script = String::from_utf8(script).map_err(|_| format!("{}/{SCRIPT}: not UTF-8", arg.display()))?;
    Ok(OpenedJob { dir: jobs_canon.join(name), spec, script })
}

/// Whether a job directory under `jobs` holds a spec sealed with `key` (a key of the ring
/// that may be dropped only once none does: `seal::ensure`). Read as `open_job` reads it,
/// without following a symlink; one that cannot be read needs no key.
pub fn sealed_with(jobs: &Path, key: &Key) -> bool {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    use std::os::unix::ffi::OsStrExt;
    let flags = OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let Ok(jobs_fd) = nix::fcntl::open(jobs, OFlag::O_RDONLY | OFlag::O_DIRECTORY | flags, Mode::empty()) else {
        return false;
    };
    let Ok(entries) = nix::dir::Dir::openat(&jobs_fd, ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | flags, Mode::empty())
    else {
        return false;
    };
    let names: Vec<std::ffi::OsString> = entries
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.iter().any(|name| {
        let spec = openat(&jobs_fd, name.as_os_str(), OFlag::O_RDONLY | OFlag::O_DIRECTORY | flags, Mode::empty())
            .and_then(|dir| openat(&dir, SPEC, OFlag::O_RDONLY | OFlag::O_NONBLOCK | flags, Mode::empty()));
        let Ok(fd) = spec else { return false };
        crate::bounded::read_file(std::fs::File::from(fd), MAX_SPEC)
            .is_ok_and(|text| key.open(SEAL_PURPOSE, name.as_encoded_bytes(), &text).is_ok())
    })
}

/// srun's `--input/--output/--error` values that name no file: `all`, `none`, and a task
/// number below the step's task count `tasks` (srun's fname.c: a number at or above it is a
/// file name, which the jail could have made a symlink to anything).
pub fn names_no_file(v: &str, tasks: u64) -> bool {
    let task = (!v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()))
        .then(|| v.parse::<u64>().ok())
        .flatten();
    v.eq_ignore_ascii_case("all") || v.eq_ignore_ascii_case("none") || task.is_some_and(|t| t < tasks)
}

/// The command line `exec --job` runs inside the jail: for a batch job its script with the
/// output files opened there; for an srun step its command, with any files its
/// `--input/--output/--error` name opened there too. `expand` fills Slurm's `%` patterns
/// from the node's environment. `tasks_share_files`: several tasks of the step open the
/// same output name, so each appends (one task truncating would cut another's output).
pub fn job_command(
    spec: &JobSpec,
    expand: &dyn Fn(&str) -> String,
    tasks_share_files: bool,
    script_inside: &str,
) -> Vec<String> {
    let program: Vec<String> = match &spec.command {
        Some(argv) if !argv.is_empty() => argv.clone(),
        _ => std::iter::once(script_inside.to_string()).chain(spec.script_args.iter().cloned()).collect(),
    };
    let step = matches!(&spec.command, Some(argv) if !argv.is_empty());
    let output = (!spec.output.is_empty()).then_some(spec.output.as_str());
    let redirect = |pattern: &str| {
        let per_task = pattern.contains("%t");
        if spec.append || (step && tasks_share_files && !per_task) {
            ">>"
        } else {
            ">"
        }
    };
    // Positional parameters carry the file names: nothing from the job is ever parsed as shell.
    let mut words = String::from("exec");
    let mut files = vec![];
    if let Some(i) = spec.input.as_deref() {
        words.push_str(&format!(" <\"${}\"", files.len() + 1));
        files.push(expand(i));
    } else if !step {
        words.push_str(&format!(" <\"${}\"", files.len() + 1));
        files.push("/dev/null".into());
    }
    if let Some(o) = output {
        words.push_str(&format!(" 1{}\"${}\"", redirect(o), files.len() + 1));
        files.push(expand(o));
    }
    match (&spec.error, output) {
        (Some(e), _) => {
            words.push_str(&format!(" 2{}\"${}\"", redirect(e), files.len() + 1));
            files.push(expand(e));
        }
        // sbatch: without --error, stderr goes where stdout goes; srun: it stays the task's.
        (None, Some(_)) if !step => words.push_str(" 2>&1"),
        (None, _) => {}
    }
    if files.is_empty() {
        return program;
    }
    let n = files.len();
    let mut command = vec!["/bin/sh".to_string(), "-c".into(), format!("{words}; shift {n}; exec \"$@\"")];
    command.push(if step { "agent-sandbox-step" } else { "agent-sandbox-job" }.into());
    command.extend(files);
    command.extend(program);
    command
}

/// Expands Slurm's filename patterns (`%j %J %s %A %a %x %u %N %n %t %%`, with an optional
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
        let step = || vars("SLURM_STEP_ID").or_else(|| vars("SLURM_STEPID"));
        match chars.next() {
            Some('%') => out.push('%'),
            Some('j') => out.push_str(&pad(job())),
            Some('A') => out.push_str(&pad(vars("SLURM_ARRAY_JOB_ID").unwrap_or_else(job))),
            Some('a') => out.push_str(&pad(vars("SLURM_ARRAY_TASK_ID").unwrap_or_else(|| "4294967294".into()))),
            Some('x') => out.push_str(job_name),
            Some('u') => out.push_str(user),
            Some('N') => out.push_str(&vars("SLURMD_NODENAME").unwrap_or_default()),
            Some('n') => out.push_str(&pad(vars("SLURM_NODEID").unwrap_or_else(|| "0".into()))),
            Some('t') => out.push_str(&pad(vars("SLURM_PROCID").unwrap_or_else(|| "0".into()))),
            Some('s') => out.push_str(&pad(step().unwrap_or_else(|| "batch".into()))),
            Some('J') => match step() {
                Some(s) => out.push_str(&format!("{}.{s}", job())),
                None => out.push_str(&job()),
            },
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
    fn a_jobs_environment_takes_only_slurms_variables_from_the_node() {
        let mut spec = JobSpec::parse(
            br#"{"version":3,"session":"s","project":"/p","cwd":"/p","policy":"{}","export":{"A":"1","SLURM_JOB_ID":"x"},
                "output":"o","error":null,"input":null,"append":false,"slurm_export_env":"NONE","job_name":"j","script_args":[],
                "project_id":{"dev":1,"ino":2,"boot":"b"},"script_sha256":""}"#,
        )
        .unwrap();
        let node: Vec<(String, String)> =
            [("PATH", "/node"), ("SLURM_JOB_ID", "7"), ("SLURM_EXPORT_ENV", "ALL"), ("SLURMD_NODENAME", "n")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let mut env = spec.environment(&node);
        env.sort();
        let want = [
            ("A", "1"),
            ("SLURMD_NODENAME", "n"),
            ("SLURM_EXPORT_ENV", "NONE"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_SUBMIT_DIR", "/p"),
        ];
        assert_eq!(env, want.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>());
        spec.slurm_export_env = None;
        assert!(!spec.environment(&node).iter().any(|(k, _)| k == "SLURM_EXPORT_ENV" || k == "PATH"));
    }

    #[test]
    fn a_job_is_told_where_the_caller_submitted_it_not_the_job_directory() {
        // No submit_dir (submitted from the job's own directory, or written before the field).
        let mut spec = JobSpec::parse(
            br#"{"version":3,"session":"s","project":"/p","cwd":"/p","policy":"{}","export":null,
                "output":"o","error":null,"input":null,"append":false,"job_name":"j","script_args":[],
                "project_id":{"dev":1,"ino":2,"boot":"b"},"script_sha256":""}"#,
        )
        .unwrap();
        let node = vec![("SLURM_SUBMIT_DIR".to_string(), "/home/u/.local/state/agent-sandbox/jobs/x".to_string())];
        let submit = |spec: &JobSpec| {
            let env = spec.environment(&node);
            let found: Vec<&str> =
                env.iter().filter(|(k, _)| k == "SLURM_SUBMIT_DIR").map(|(_, v)| v.as_str()).collect();
            found.join(",")
        };
        assert_eq!(submit(&spec), "/p", "the job's directory when submitted from it");
        assert!(!serde_json::to_string(&spec).unwrap().contains("submit_dir"), "an older reader reads it");
        spec.cwd = "/p/run".into();
        spec.submit_dir = Some("/p/sub".into());
        assert_eq!(submit(&spec), "/p/sub", "submitted from /p/sub with --chdir=/p/run");
        let back = JobSpec::parse(serde_json::to_string(&spec).unwrap().as_bytes()).unwrap();
        assert_eq!(back.submit_dir.as_deref(), Some(Path::new("/p/sub")));
    }

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

    fn spec() -> JobSpec {
        JobSpec {
            version: VERSION,
            session: "s".into(),
            project: "/p".into(),
            cwd: "/p".into(),
            policy: "{}".into(),
            export: None,
            output: String::new(),
            error: None,
            input: None,
            append: false,
            slurm_export_env: None,
            job_name: "j".into(),
            script_args: vec![],
            command: None,
            submit_dir: None,
            project_id: ProjectId { dev: 1, ino: 2, boot: "b".into() },
            script_sha256: sha256_hex(SCRIPT_TEXT.as_bytes()),
        }
    }

    const SCRIPT_TEXT: &str = "#!/bin/sh\necho hi\n";

    /// A job directory as the chaperon writes one, under `jobs`, with the tests' key.
    fn write_dir(jobs: &Path, name: &str, spec: &JobSpec) {
        let key = std::sync::Arc::new(Key::from_bytes(&[9; 32]));
        JobDir { path: jobs.join(name), wrapper: "w".into(), key }.write(spec, SCRIPT_TEXT).unwrap();
    }

    #[test]
    fn batch_jobs_open_their_files_inside_the_jail_by_positional_parameter() {
        let id = |p: &str| p.replace("%j", "42");
        let s = JobSpec { output: "out-%j; rm -rf ~".into(), script_args: vec!["a b".into()], ..spec() };
        let c = job_command(&s, &id, false, "/run/agent-sandbox/job-script");
        assert_eq!(c[..3], ["/bin/sh", "-c", "exec <\"$1\" 1>\"$2\" 2>&1; shift 2; exec \"$@\""]);
        // The file name is a parameter, never shell text.
        assert_eq!(
            c[3..],
            ["agent-sandbox-job", "/dev/null", "out-42; rm -rf ~", "/run/agent-sandbox/job-script", "a b"]
        );
        let s =
            JobSpec { output: "o".into(), error: Some("e".into()), input: Some("i".into()), append: true, ..spec() };
        let c = job_command(&s, &id, false, "/s");
        assert_eq!(c[2], "exec <\"$1\" 1>>\"$2\" 2>>\"$3\"; shift 3; exec \"$@\"");
        assert_eq!(c[4..], ["i", "o", "e", "/s"]);
    }

    #[test]
    fn steps_redirect_only_what_srun_named_and_shared_files_are_appended() {
        let step = |o: &str, e: Option<&str>, i: Option<&str>| JobSpec {
            command: Some(vec!["cat".into(), "x".into()]),
            output: o.into(),
            error: e.map(Into::into),
            input: i.map(Into::into),
            ..spec()
        };
        let same = |p: &str| p.to_string();
        assert_eq!(job_command(&step("", None, None), &same, true, "/s"), ["cat", "x"]);
        let c = job_command(&step("", None, Some("in.txt")), &same, true, "/s");
        assert_eq!(c[2..], ["exec <\"$1\"; shift 1; exec \"$@\"", "agent-sandbox-step", "in.txt", "cat", "x"]);
        // Several tasks, one file: each appends. One file per task (%t): truncated as asked.
        let c = job_command(&step("out.txt", Some("err-%t"), None), &same, true, "/s");
        assert_eq!(c[2], "exec 1>>\"$1\" 2>\"$2\"; shift 2; exec \"$@\"");
        let c = job_command(&step("out.txt", None, None), &same, false, "/s");
        assert_eq!(c[2], "exec 1>\"$1\"; shift 1; exec \"$@\"", "a single task truncates; stderr stays the task's");
    }

    #[test]
    fn srun_io_words_that_name_no_file() {
        for w in ["all", "ALL", "none", "None", "0", "17"] {
            assert!(names_no_file(w, 18), "{w}");
        }
        for w in ["", "out.txt", "0x", "-1", "%t.out", "12345678901", "18", "9"] {
            assert!(!names_no_file(w, if w == "9" { 1 } else { 18 }), "{w}");
        }
    }

    #[test]
    fn step_patterns_expand_per_task_and_node() {
        let env = |k: &str| match k {
            "SLURM_JOB_ID" => Some("42".to_string()),
            "SLURM_STEP_ID" => Some("3".to_string()),
            "SLURM_PROCID" => Some("5".to_string()),
            "SLURM_NODEID" => Some("1".to_string()),
            _ => None,
        };
        assert_eq!(expand_pattern("%j_%t_%n_%s_%J_%2t", &env, "u", "x"), "42_5_1_3_42.3_05");
    }

    #[test]
    fn a_job_directory_is_found_only_below_the_nodes_own_jobs_directory() {
        let dir = std::env::temp_dir().join(format!("chaperon-open-job-{}", std::process::id()));
        let jobs = dir.join("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        let key = Key::from_bytes(&[9; 32]);
        write_dir(&jobs, "s-1-0", &spec());
        let job = jobs.join("s-1-0");
        let opened = open_job(&jobs, &job, &key).unwrap();
        assert_eq!((opened.spec, opened.script.as_str()), (spec(), SCRIPT_TEXT));
        assert!(open_job(&jobs, &jobs.join("s-1-0/../s-1-0"), &key).is_err(), "`..`");
        assert!(open_job(&jobs, &dir, &key).is_err(), "not below jobs/");
        // A job directory that is a symlink (to one the jail could write) is not followed.
        let elsewhere = dir.join("elsewhere");
        write_dir(&dir, "elsewhere", &spec());
        std::os::unix::fs::symlink(&elsewhere, jobs.join("s-1-1")).unwrap();
        assert!(open_job(&jobs, &jobs.join("s-1-1"), &key).is_err(), "symlinked job directory");
        // Nor a spec or script that is a symlink.
        std::fs::remove_file(job.join(SCRIPT)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", job.join(SCRIPT)).unwrap();
        assert!(open_job(&jobs, &job, &key).is_err(), "symlinked script");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_spec_or_script_changed_after_submission_is_refused_whole() {
        let dir = std::env::temp_dir().join(format!("chaperon-sealed-job-{}", std::process::id()));
        let jobs = dir.join("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        let key = Key::from_bytes(&[9; 32]);
        write_dir(&jobs, "s-1-0", &spec());
        let (job, spec_path) = (jobs.join("s-1-0"), jobs.join("s-1-0").join(SPEC));
        assert!(open_job(&jobs, &job, &key).is_ok());
        let sealed = std::fs::read(&spec_path).unwrap();
        let rewrite = |bytes: &[u8]| {
            let _ = std::fs::remove_file(&spec_path);
            std::fs::write(&spec_path, bytes).unwrap();
        };
        // Each field of the spec altered in turn, its seal kept: refused.
        let text = String::from_utf8(sealed[65..].to_vec()).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        for field in value.as_object().unwrap().keys() {
            let mut v = value.clone();
            v[field] = match &v[field] {
                serde_json::Value::String(s) => format!("{s}x").into(),
                serde_json::Value::Number(n) => (n.as_u64().unwrap() + 1).into(),
                serde_json::Value::Bool(b) => (!b).into(),
                serde_json::Value::Null => "x".into(),
                serde_json::Value::Array(_) => serde_json::json!(["x"]),
                serde_json::Value::Object(_) => serde_json::json!({"dev":1,"ino":3,"boot":"b"}),
            };
            let mut bytes = sealed[..65].to_vec();
            bytes.extend(serde_json::to_vec(&v).unwrap());
            rewrite(&bytes);
            let e = open_job(&jobs, &job, &key).err().unwrap_or_else(|| panic!("{field} altered: accepted"));
            assert!(e.contains("is refused") && e.contains("seal does not match"), "{field}: {e}");
        }
        rewrite(text.as_bytes());
        assert!(open_job(&jobs, &job, &key).unwrap_err().contains("carries no seal"), "unsealed");
        rewrite(&sealed);
        assert!(open_job(&jobs, &job, &Key::from_bytes(&[1; 32])).is_err(), "another user's key");
        // A spec sealed for another job directory, copied here: refused.
        write_dir(&jobs, "s-1-1", &JobSpec { cwd: "/p/other".into(), ..spec() });
        rewrite(&std::fs::read(jobs.join("s-1-1").join(SPEC)).unwrap());
        assert!(open_job(&jobs, &job, &key).is_err(), "another directory's spec");
        rewrite(&sealed);
        // The script changed since: refused.
        let script = job.join(SCRIPT);
        std::fs::remove_file(&script).unwrap();
        std::fs::write(&script, "#!/bin/sh\necho SWAPPED\n").unwrap();
        assert!(open_job(&jobs, &job, &key).unwrap_err().contains("not the script submitted"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn spec_round_trips_and_refuses_other_versions() {
        let spec = JobSpec { output: "slurm-%j.out".into(), job_name: "wrap".into(), ..spec() };
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(JobSpec::parse(text.as_bytes()).unwrap(), spec);
        let other = serde_json::to_string(&JobSpec { version: 9, ..spec }).unwrap();
        assert!(JobSpec::parse(other.as_bytes()).unwrap_err().contains("another version"));
    }
}
