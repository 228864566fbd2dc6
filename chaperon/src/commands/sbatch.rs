//! sbatch: its option table (Slurm 22.05 spellings, short forms and arities, each option allowed,
//! denied with a reason, or rebuilt by the chaperon), the `#SBATCH` directive reader,
//! `parse_sbatch`, which combines both into an `SbatchRequest` (pure), and `handle`, which checks
//! that request against the project and the scope, writes the job directory and submits the
//! chaperon's wrapper in place of the script.

use crate::call::{Call, Stdio};
use crate::checks::{cwd_of, dependencies_in_scope, open_in_project, read_capped, scope_of, under_project};
use crate::export::{export_env, export_request};
use crate::getopt::LongOpt;
use crate::grammar::{clip, ValueKind};
use crate::job::{self, JobDir, JobSpec, MAX_SCRIPT};
use crate::job_options::{BATCH_AND_ALLOC, BATCH_AND_STEP, EVERY_JOB, LISTED_BY_NONE};
use crate::refusal::Refusal;
use crate::scope::Entry;
use crate::session::Config;
use crate::slurm_22_05;
use crate::spawn::Io;
use crate::table::{
    allow, as_written, deny, not_listed, opt, parse_with, Arity, Class, GrammarError, Table, APPLIED_IN_JAIL, MAX_ARGS,
    MAX_ARG_BYTES, OPENED_IN_JAIL,
};
use crate::wire::Request;
use std::io::Write;
use std::path::Path;
use Arity::{Flag, OptionalValue as Opt, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's sbatch allow-list; ask your admin if a job needs it";
const BURST_BUFFER: &str = "burst-buffer staging runs outside the jail; stage data from within the batch script";

/// Every option the chaperon's sbatch knows: those it shares with srun and salloc
/// (`job_options`), and its own. Anything else is an unrecognized option.
pub static SBATCH: Table = Table {
    getopt: &slurm_22_05::SBATCH,
    getopt_24_11: &crate::slurm_24_11::SBATCH,
    not_listed: NOT_LISTED,
    shared: &[&EVERY_JOB, &BATCH_AND_STEP, &BATCH_AND_ALLOC, &LISTED_BY_NONE],
    own: &[
        // Allowed (FEATURES C, the sbatch allow-list), besides the shared groups'.
        allow("array", Some('a'), Val, Text),
        allow("job-name", Some('J'), Val, JobName).rebuilt("the chaperon names the job: yours, else its script's name"),
        allow("output", Some('o'), Val, Path).rebuilt(OPENED_IN_JAIL),
        allow("error", Some('e'), Val, Path).rebuilt(OPENED_IN_JAIL),
        allow("input", Some('i'), Val, Path).rebuilt(OPENED_IN_JAIL),
        allow("requeue", None, Flag, Any),
        allow("no-requeue", None, Flag, Any),
        allow("signal", None, Val, SbatchSignal),
        allow("kill-on-invalid-dep", None, Val, Choice(&["yes", "no"])),
        allow("parsable", None, Flag, Any)
            .rebuilt("the chaperon always asks for the job id alone and shows it as you asked"),
        allow("wait", Some('W'), Flag, Any),
        // A file or an fd number in Slurm; the chaperon reads it (resolved under the project) itself.
        allow("export-file", None, Val, Path).rebuilt(APPLIED_IN_JAIL),
        // Rebuilt: the chaperon sets what Slurm sees.
        opt("wrap", None, Val, Class::Rebuilt("the chaperon writes the submitted batch script itself"), Any),
        // Denied (FEATURES C).
        deny("uid", None, Val, "jobs run as your own user only"),
        deny("gid", None, Val, "jobs run with your own groups only"),
        deny("get-user-env", None, Opt, "it loads a login environment outside the jail; use --export instead"),
        deny("container", None, Val, "an OCI container would start outside the jail; run it from the batch script"),
        deny("bb", None, Val, BURST_BUFFER),
        deny("bbf", None, Val, BURST_BUFFER),
        // The rest of sbatch 22.05: real options, not on the allow-list.
        not_listed("batch", None, Val),
        not_listed("ignore-pbs", None, Flag),
        // Added after 22.05 (`since`: the release that added each).
        not_listed("tres-bind", None, Val).since(crate::release::R23_11),
    ],
};

/// Options sbatch handles only in its first pass over the command line: in a `#SBATCH` line
/// Slurm 22.05 parses them and then ignores them (`sbatch_early_pass` in slurm_opt.c).
pub const EARLY_PASS: &[&str] = &["help", "quiet", "usage", "verbose", "version", "wrap"];

/// What an sbatch call asks for, before the chaperon resolves paths and checks scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbatchRequest {
    /// `#SBATCH` options first, then the command line's, each in order: a later entry
    /// overrides an earlier one (so the command line wins, as in Slurm). Never a denied option.
    pub options: Vec<(&'static str, Option<String>)>,
    /// The script file argument, as given (unresolved); None for `--wrap` or a script on stdin.
    pub script_path: Option<String>,
    pub script_args: Vec<String>,
}

impl SbatchRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        self.options.iter().rev().find(|(l, _)| *l == long).map(|(_, v)| v.as_deref())
    }
}

/// C's isspace in the C locale, which is what sbatch splits directive lines with.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// True if `s` starts with `word` (ASCII case-insensitive) followed by whitespace or the end.
fn starts_with_word(s: &[u8], word: &str) -> bool {
    s.len() >= word.len()
        && s[..word.len()].eq_ignore_ascii_case(word.as_bytes())
        && s.get(word.len()).is_none_or(|&b| is_c_space(b))
}

/// One word of a directive line, as sbatch's `get_argument` (src/sbatch/opt.c) reads it:
/// `'` and `"` group (and may join: `a"b c"` is one word), a backslash escapes the next byte
/// even inside quotes, an unquoted unescaped `#` ends the line (also mid-word), and a word
/// that comes out empty (`""`, a lone `\`, a blanked `hetjob`) ends the line too.
/// Returns the word and the bytes consumed, or None at the end of the line's words.
fn next_word(line: &[u8], lineno: usize) -> Result<Option<(Vec<u8>, usize)>, GrammarError> {
    let mut p = 0;
    while p < line.len() && is_c_space(line[p]) {
        p += 1;
    }
    if starts_with_word(&line[p..], "packjob") || starts_with_word(&line[p..], "hetjob") {
        return Ok(None); // sbatch blanks the separator word, which then ends the line.
    }
    if line.get(p) == Some(&b':') {
        return Err(GrammarError::Directive { line: lineno, why: "unexpected ':' (heterogeneous job syntax)".into() });
    }
    let mut word = Vec::new();
    let (mut quote, mut escape) = (None, false);
    while p < line.len() && (quote.is_some() || !is_c_space(line[p])) {
        let b = line[p];
        if escape {
            escape = false;
        } else if b == b'\\' {
            escape = true;
            p += 1;
            continue;
        } else if let Some(q) = quote {
            if b == q {
                quote = None;
                p += 1;
                continue;
            }
        } else if b == b'"' || b == b'\'' {
            quote = Some(b);
            p += 1;
            continue;
        } else if b == b'#' {
            break;
        }
        word.push(b);
        p += 1;
    }
    if let Some(q) = quote {
        return Err(GrammarError::Directive { line: lineno, why: format!("unmatched {}", q as char) });
    }
    Ok((!word.is_empty()).then_some((word, p)))
}

/// The argument words of a batch script's directives, in order, as sbatch 22.05 reads them
/// (`_opt_batch_script` in src/sbatch/opt.c), after sbatch's own checks on the script:
/// - only lines before the first command count: blank lines and `#` comments (the `#!` line
///   included) are skipped, the first other line ends the directives; later `#SBATCH` lines
///   are ignored, by Slurm and so here;
/// - a directive line starts with `#SBATCH` (or the old `#SLURM`) in column one. Slurm compares
///   only those bytes, so `#SBATCH--uid=0` is a directive too; it is read here the same way.
///   An indented `  #SBATCH ...` is not a directive for Slurm: it is a comment, and so here;
/// - the words of all lines form one argument list (an option on one line may take its value
///   from the next), which the caller parses with the same table as the command line.
///
/// `#PBS` and `#BSUB` lines, which sbatch also translates unless `--ignore-pbs`, are not read.
pub fn parse_directives(script: &str) -> Result<Vec<String>, GrammarError> {
    if script.is_empty() {
        return Err(GrammarError::Script("Batch script is empty!"));
    }
    if script.bytes().all(is_c_space) {
        return Err(GrammarError::Script("Batch script contains only whitespace!"));
    }
    if !script.starts_with("#!") {
        return Err(GrammarError::Script(
            "This does not look like a batch script. The first line must start with #! followed by the path to an \
             interpreter. For instance: #!/bin/sh",
        ));
    }
    if script.contains('\0') {
        return Err(GrammarError::Script(
            "The Slurm controller does not allow scripts that contain a NULL character '\\0'.",
        ));
    }
    if script.contains("\r\n") {
        return Err(GrammarError::Script(
            "Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line breaks (\\n).",
        ));
    }

    let mut words = Vec::new();
    let mut bytes = 0usize;
    for (n, line) in script.split('\n').enumerate() {
        let line = line.as_bytes();
        let rest = if let Some(rest) = line.strip_prefix(b"#SBATCH") {
            rest
        } else if let Some(rest) = line.strip_prefix(b"#SLURM") {
            rest
        } else {
            match line.iter().find(|&&b| !is_c_space(b)) {
                Some(b'#') | None => continue,
                Some(_) => break, // the first command: Slurm reads no further
            }
        };
        let start = rest.iter().position(|&b| !is_c_space(b)).unwrap_or(rest.len());
        if starts_with_word(&rest[start..], "hetjob") || starts_with_word(&rest[start..], "packjob") {
            return Err(GrammarError::Unsupported(
                "heterogeneous jobs (#SBATCH hetjob) are not supported in agent-sandbox; submit the components as \
                 separate jobs",
            ));
        }
        let mut at = 0;
        while let Some((word, used)) = next_word(&rest[at..], n + 1)? {
            at += used;
            bytes = bytes.saturating_add(word.len());
            if words.len() >= MAX_ARGS {
                return Err(GrammarError::TooManyArgs { count: words.len() + 1, max: MAX_ARGS });
            }
            if bytes > MAX_ARG_BYTES {
                return Err(GrammarError::TooLarge { bytes, max: MAX_ARG_BYTES });
            }
            // Only ASCII bytes were dropped from valid UTF-8, so this is valid UTF-8 again.
            words.push(String::from_utf8(word).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()));
        }
    }
    Ok(words)
}

/// Parses an sbatch call: the command line `args` (without the program name) and, when the
/// stub read one (from the script argument or stdin), the script's text for its directives.
/// Both go through `SBATCH`, so a denied option is refused the same way wherever it appears.
pub fn parse_sbatch(
    args: &[String],
    script: Option<&str>,
    plugins: &'static [LongOpt],
) -> Result<SbatchRequest, GrammarError> {
    // sbatch drops every ":" argument and submits the pieces as a heterogeneous job.
    if args.iter().any(|a| a == ":") {
        return Err(GrammarError::Unsupported(
            "heterogeneous jobs (':' between components) are not supported in agent-sandbox; submit them separately",
        ));
    }
    let cli = parse_with(&SBATCH, plugins, args)?;
    let wrap = cli.options.iter().any(|(s, _)| s.long == "wrap");
    if wrap && !cli.positionals.is_empty() {
        return Err(GrammarError::Usage("Script arguments not permitted with --wrap option"));
    }
    if wrap && script.is_some() {
        return Err(GrammarError::Usage("--wrap and a batch script cannot be used together"));
    }

    let mut options = Vec::new();
    // `--help`, `--usage` and `--version` answer before sbatch reads a script (`sbatch
    // --version < /dev/null` prints the version): an empty one is no error then.
    let answers_first = cli.options.iter().any(|(s, _)| matches!(s.long, "help" | "usage" | "version"));
    if let Some(script) = script.filter(|_| !answers_first) {
        let directives = parse_with(&SBATCH, plugins, &parse_directives(script)?)?;
        // getopt stops at the first word that is not an option, and sbatch exits naming it.
        if let Some(word) = directives.positionals.first() {
            return Err(GrammarError::InvalidDirective(clip(word)));
        }
        let read = directives.options.into_iter().filter(|(s, _)| !EARLY_PASS.contains(&s.long));
        options.extend(read.map(|(s, v)| (s.long, v)));
    }
    options.extend(cli.options.into_iter().map(|(s, v)| (s.long, v)));

    let mut positionals = cli.positionals.into_iter();
    Ok(SbatchRequest { options, script_path: positionals.next(), script_args: positionals.collect() })
}

/// What the caller asks of the job through the options the chaperon rebuilds: read here, from
/// the options alone (pure); the handler resolves the paths and the environment they name, and
/// nothing of it reaches the real sbatch as written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Asked<'a> {
    wrap: Option<&'a str>,
    chdir: Option<&'a str>,
    export: Option<&'a str>,
    export_file: Option<&'a str>,
    output: String,
    error: Option<&'a str>,
    input: Option<&'a str>,
    append: bool,
    job_name: String,
    parsable: bool,
}

impl SbatchRequest {
    /// What the job asks for; `default_name` names it without `--job-name` (after its script,
    /// as sbatch does).
    fn asked(&self, default_name: String) -> Asked<'_> {
        let value = |long| self.last(long).flatten();
        Asked {
            wrap: value("wrap"),
            chdir: value("chdir"),
            export: value("export"),
            export_file: value("export-file"),
            // Slurm's defaults; an array's tasks each get their own.
            output: value("output").map(str::to_owned).unwrap_or_else(|| {
                if self.last("array").is_some() {
                    "slurm-%A_%a.out".into()
                } else {
                    "slurm-%j.out".into()
                }
            }),
            error: value("error"),
            input: value("input"),
            append: value("open-mode").is_some_and(|m| m.eq_ignore_ascii_case("append")),
            job_name: value("job-name").map(str::to_owned).unwrap_or(default_name),
            parsable: self.last("parsable").is_some(),
        }
    }

    /// What the real sbatch is given: the rebuilt pieces (the job's checked directory and name,
    /// the wrapper's own log) and the caller's options the table passes as written; the wrapper
    /// comes on its stdin. The wrapper's environment is the chaperon's own clean one
    /// (`--export=ALL` of it): `--export=NONE` would make slurmd run the user's login shell on
    /// the node, outside the jail, to fill it (sbatch's implied `--get-user-env`).
    fn real_args(&self, job_name: &str, job_cwd: &Path, wrapper_out: &Path) -> Vec<String> {
        let out = wrapper_out.display();
        let mut args = vec![
            "--parsable".to_string(),
            "--export=ALL".into(),
            format!("--chdir={}", job_cwd.display()),
            format!("--job-name={job_name}"),
            format!("--output={out}"),
            format!("--error={out}"),
        ];
        args.extend(as_written(&SBATCH, &self.options));
        args
    }
}

/// sbatch: the script (the file the stub read inside the jail, the caller's stdin, or `--wrap`)
/// parsed with its directives, checked against the project and the scope, recorded in a job
/// directory with what the job needs inside the jail, and submitted as the chaperon's wrapper,
/// which re-enters the jail on the node. The job id is recorded in scope at submission.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let first = parse_sbatch(&req.argv, None, cfg.plugin_options())?;
    let cwd = cwd_of(req, cfg)?;
    let cluster = cfg.cluster_to_record()?;
    let (script, default_name) = batch_script(req, cfg, &stdio, &first, &cwd)?;
    call.audit.script_bytes = Some(script.len());
    call.audit.script_hash = Some(fingerprint(script.as_bytes()));
    let parsed = if first.last("wrap").is_some() {
        first
    } else {
        parse_sbatch(&req.argv, Some(&script), cfg.plugin_options())?
    };
    let asked = parsed.asked(default_name);

    // Where the job runs: --chdir (rebuilt: checked against the project) or the caller's cwd.
    let job_cwd = match asked.chdir {
        Some(d) => under_project(&cfg.who.project, &cwd, d)?,
        None => cwd.clone(),
    };
    // An unknown SLURM_SCOPE is refused for every command, sbatch included.
    scope_of(req)?;
    dependencies_in_scope(&parsed.options, "--dependency", req, cfg)?;
    let spec = job_spec(req, cfg, &parsed, &asked, &cwd, &job_cwd)?;
    let job_dir = JobDir::name(cfg).map_err(Refusal::Failed)?;
    let dir = &job_dir.path;
    let mut child = spawn_sbatch(cfg, &parsed, &spec, &job_cwd, dir, stdio.stderr)?;
    // `sbatch --wait` lasts as long as the job: it ends with the caller, like every call.
    let _watch = match call.watch(child.id(), call.bound) {
        Ok(w) => w,
        Err(e) => return Err(crate::call::unwatched(child, e)),
    };
    feed_wrapper(&mut child, &job_dir, &spec, &script)?;
    let mut stdout = std::fs::File::from(stdio.stdout);
    // The job id comes first, at submission: record it in scope and show it then, also with
    // --wait (which exits only when the job ends, with the job's status).
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        child.stdout.take().ok_or(Refusal::Failed("sbatch: no stdout".into()))?,
    ));
    let first_line = lines.next().and_then(Result::ok).unwrap_or_default();
    let first_line = first_line.trim();
    let id: Option<u32> = first_line.split(';').next().and_then(|s| s.parse().ok());
    let mut submitted = false;
    match id {
        Some(job) if parsed.last("test-only").is_none() => {
            submitted = true;
            call.audit.job = Some(job);
            record_in_scope(cfg, job, cluster, dir);
            let shown = match asked.parsable {
                true => format!("{first_line}\n"),
                false => format!("Submitted batch job {job}\n"),
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
    let status = child.wait().map_err(|e| Refusal::Failed(format!("waiting for sbatch: {e}")))?;
    // No job to read it: a submission Slurm refused, or --test-only.
    if !submitted && (parsed.last("test-only").is_some() || !status.success()) {
        if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
            crate::forgotten::remove_job_dir(&cfg.who.state_dir.join("jobs"), name);
        }
    }
    // A project that submits and never lists its jobs is asked about too (every ten minutes
    // at most), so that its forgotten jobs' directories go.
    crate::forgotten::probe_if_due(cfg, 1);
    Ok(status.code().unwrap_or(1))
}

/// What the job directory records for the wrapper: the job's files, its environment (with
/// `--export`'s), name, script arguments, and where it was submitted from when it runs
/// elsewhere.
fn job_spec(
    req: &Request,
    cfg: &Config,
    parsed: &SbatchRequest,
    asked: &Asked<'_>,
    cwd: &Path,
    job_cwd: &Path,
) -> Result<JobSpec, Refusal> {
    let export = export_env(asked.export, asked.export_file, req, job_cwd, cfg)?;
    Ok(JobSpec {
        output: asked.output.clone(),
        error: asked.error.map(str::to_owned),
        input: asked.input.map(str::to_owned),
        append: asked.append,
        slurm_export_env: export_request(asked.export, req).filter(|e| !e.eq_ignore_ascii_case("ALL")),
        job_name: asked.job_name.clone(),
        script_args: parsed.script_args.clone(),
        submit_dir: (cwd != job_cwd).then(|| cwd.to_path_buf()),
        ..JobSpec::for_session(cfg, job_cwd, export).map_err(Refusal::Failed)?
    })
}

/// The batch script and the job's default name: `--wrap`'s command, the caller's stdin, the
/// text the stub read inside the jail, or the file in the project.
fn batch_script(
    req: &Request,
    cfg: &Config,
    stdio: &Stdio,
    first: &SbatchRequest,
    cwd: &Path,
) -> Result<(String, String), Refusal> {
    // sbatch opens its script argument with open(2): `/dev/stdin` (Snakemake's
    // --slurm-pass-command-as-script) is the caller's stdin, named after the file.
    let on_stdin = |p: &String| ["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"].contains(&p.as_str());
    Ok(match (first.last("wrap").flatten(), &first.script_path) {
        (Some(cmd), _) => {
            (format!("#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{cmd}\n"), "wrap".to_string())
        }
        (None, Some(p)) if on_stdin(p) => (read_stdin_script(stdio)?, "stdin".into()),
        // Read by the stub inside the jail: wherever the jail keeps it (dask-jobqueue writes
        // its job scripts to $TMPDIR), it is the file the jail sees.
        (None, Some(p)) if req.script.is_some() => {
            let text = req.script.clone().unwrap_or_default();
            if text.len() > MAX_SCRIPT {
                return Err(Refusal::TooLarge { what: "the batch script", max: MAX_SCRIPT });
            }
            let name = Path::new(p).file_name().map(|n| n.to_string_lossy().into_owned());
            (text, name.unwrap_or_else(|| "sbatch".into()))
        }
        (None, Some(p)) => {
            let path = under_project(&cfg.who.project, cwd, p)?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "sbatch".into());
            let file = open_in_project(&cfg.who.project, &path)
                .map_err(|source| Refusal::File { named: p.clone(), source })?;
            (script_text(read_capped(file, "the batch script")?)?, name)
        }
        (None, None) => (read_stdin_script(stdio)?, "sbatch".into()),
    })
}

/// The real sbatch: it sees only what the table allows, the rebuilt pieces and our wrapper.
fn spawn_sbatch(
    cfg: &Config,
    parsed: &SbatchRequest,
    spec: &JobSpec,
    job_cwd: &Path,
    dir: &Path,
    stderr: std::os::fd::OwnedFd,
) -> Result<crate::spawn::RealChild, Refusal> {
    let mut cmd = cfg.command("sbatch");
    // Not in the job directory, which is written while sbatch starts (its own start is most
    // of a millisecond): the job's SLURM_SUBMIT_DIR comes from the spec, not from here.
    cmd.current_dir(dir.parent().unwrap_or(Path::new("/")));
    cmd.args(parsed.real_args(&spec.job_name, job_cwd, &dir.join(job::WRAPPER_OUT)));
    cmd.args(cfg.belt(dir)?);
    // The wrapper reaches sbatch on a pipe the chaperon writes, not by a path: nothing that
    // could be swapped between our write and sbatch's read.
    cmd.stdin(Io::piped()).stderr(stderr).stdout(Io::piped());
    cmd.spawn().map_err(|e| Refusal::Failed(format!("cannot run sbatch: {e}")))
}

/// sbatch submits nothing before it has read its script, and gets it only once the job's
/// directory is whole: a directory that cannot be written leaves it an empty script and
/// the kill, never a job without its directory.
fn feed_wrapper(
    child: &mut crate::spawn::RealChild,
    job_dir: &JobDir,
    spec: &JobSpec,
    script: &str,
) -> Result<(), Refusal> {
    let script_in = child.stdin.take();
    if let Err(e) = job_dir.write(spec, script) {
        // Killed before its stdin closes, so that it prints nothing of an empty script.
        let _ = child.kill();
        let _ = child.wait();
        drop(script_in);
        return Err(Refusal::Failed(e));
    }
    if let Some(mut script_in) = script_in {
        let _ = script_in.write_all(job_dir.wrapper.as_bytes());
    }
    Ok(())
}

/// The submitted job in the session's scope, with its cluster and job directory; a failure
/// is said, the job stands.
fn record_in_scope(cfg: &Config, job: u32, cluster: String, dir: &Path) {
    let recorded = cfg.registry().add(&Entry {
        job,
        session: cfg.who.session.clone(),
        project: cfg.who.project.clone(),
        cluster: Some(cluster),
        dir: dir.file_name().map(|n| n.to_string_lossy().into_owned()),
    });
    if let Err(e) = recorded {
        let _ = writeln!(std::io::stderr(), "job {job} submitted but not recorded in scope: {e}");
    }
}

/// The batch script on the caller's stdin: bounded in size and in time (a terminal that never
/// sends end-of-file must not hold the chaperon).
fn read_stdin_script(stdio: &Stdio) -> Result<String, Refusal> {
    use std::os::fd::AsFd;
    let bytes = crate::bounded::read_to_end(stdio.stdin.as_fd(), MAX_SCRIPT, crate::bounded::stdin_timeout())
        .map_err(Refusal::Stdin)?;
    script_text(bytes)
}

fn script_text(bytes: Vec<u8>) -> Result<String, Refusal> {
    String::from_utf8(bytes).map_err(|_| Refusal::NotUtf8 { what: "the batch script" })
}

/// SHA-256 of the script, hex: the audit log says which script ran without holding its text.
fn fingerprint(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::grammar::validate;
    use crate::table::{parse, OptSpec, Parsed};
    use std::collections::HashSet;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn spec(long: &str) -> &'static OptSpec {
        SBATCH.specs().find(|s| s.long == long).unwrap_or_else(|| panic!("--{long} not in SBATCH"))
    }

    fn pairs(p: &Parsed) -> Vec<(&'static str, Option<&str>)> {
        p.options.iter().map(|(s, v)| (s.long, v.as_deref())).collect()
    }

    fn owned(p: &Parsed) -> Vec<(&'static str, Option<String>)> {
        p.options.iter().map(|(s, v)| (s.long, v.clone())).collect()
    }

    /// FEATURES section C's sbatch allow-list, verbatim.
    const FEATURES_ALLOWED: &[&str] = &[
        "account",
        "partition",
        "qos",
        "time",
        "time-min",
        "nodes",
        "ntasks",
        "ntasks-per-node",
        "ntasks-per-socket",
        "ntasks-per-core",
        "ntasks-per-gpu",
        "cpus-per-task",
        "mem",
        "mem-per-cpu",
        "mem-per-gpu",
        "gres",
        "gpus",
        "gpus-per-node",
        "gpus-per-task",
        "cpus-per-gpu",
        "constraint",
        "exclusive",
        "oversubscribe",
        "nodelist",
        "exclude",
        "array",
        "dependency",
        "job-name",
        "output",
        "error",
        "input",
        "open-mode",
        "comment",
        "begin",
        "deadline",
        "hold",
        "nice",
        "priority",
        "requeue",
        "no-requeue",
        "reservation",
        "signal",
        "licenses",
        "hint",
        "distribution",
        "mem-bind",
        "cpu-freq",
        "threads-per-core",
        "switches",
        "tmp",
        "wckey",
        "kill-on-invalid-dep",
        "parsable",
        "test-only",
        "wait",
        "verbose",
        "quiet",
        "help",
        "usage",
        "version",
        "export",
        "export-file",
    ];

    #[test]
    fn version_help_and_usage_answer_before_any_script_is_read() {
        for flag in ["--version", "-V", "--help", "--usage"] {
            let r = sbatch(&[flag], Some("")).unwrap_or_else(|e| panic!("{flag}: {e:?}"));
            assert!(r.script_path.is_none(), "{flag}");
        }
        assert!(sbatch(&["-J", "x"], Some("")).is_err(), "an empty script still is one");
    }

    #[test]
    fn script_fingerprint_is_sha256() {
        assert_eq!(super::fingerprint(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn the_allow_list_is_exactly_features_section_c() {
        // Of 22.05's options; what later releases added is listed in docs/slurm.md's table.
        let allowed: HashSet<&str> = SBATCH
            .specs()
            .filter(|s| s.class == Class::Allowed && s.since == crate::release::R22_05)
            .map(|s| s.long)
            .collect();
        assert_eq!(allowed, FEATURES_ALLOWED.iter().copied().collect::<HashSet<_>>());
    }

    #[test]
    fn features_denials_and_rebuilds_are_in_the_table() {
        // srun's options that FEATURES names are no sbatch options: sbatch's own words refuse them.
        for long in ["prolog", "epilog", "task-prolog", "task-epilog", "bcast"] {
            let e = parse(&SBATCH, &argv(&[&format!("--{long}=x")]));
            assert_eq!(e, Err(GetoptError::Unrecognized(format!("{long}=x")).into()), "--{long}");
        }
        for long in [
            "uid",
            "gid",
            "get-user-env",
            "propagate",
            "container",
            "bb",
            "bbf",
            "mail-type",
            "mail-user",
            "clusters",
            "cluster",
        ] {
            assert!(matches!(SBATCH.class_of(spec(long)), Class::Denied(_)), "--{long} must be denied");
        }
        assert!(matches!(spec("wrap").class, Class::Rebuilt(_)));
        assert!(matches!(spec("chdir").class, Class::Rebuilt(_)));
        assert!(
            matches!(SBATCH.class_of(spec("clusters")), Class::Denied(r) if r.contains("unless the sandbox policy allows"))
        );
    }

    #[test]
    fn the_table_is_sbatch_22_05() {
        // Every option of the real sbatch, and the belt's, has its entry; the checks every
        // command's table gets (unique names, one-line reasons, every spelling of every
        // option), with -H (--hold) as the flag to cluster with.
        crate::table::testkit::entries_are_the_getopt_sets(&SBATCH, &[crate::getopt::BELT]);
        crate::table::testkit::table_is_sound(&SBATCH, 'H');
    }

    #[test]
    fn short_forms_are_those_of_slurm_22_05() {
        let expected = [
            ('A', "account"),
            ('a', "array"),
            ('B', "extra-node-info"),
            ('b', "begin"),
            ('C', "constraint"),
            ('c', "cpus-per-task"),
            ('D', "chdir"),
            ('d', "dependency"),
            ('e', "error"),
            ('F', "nodefile"),
            ('G', "gpus"),
            ('H', "hold"),
            ('h', "help"),
            ('i', "input"),
            ('J', "job-name"),
            ('k', "no-kill"),
            ('L', "licenses"),
            ('M', "clusters"),
            ('m', "distribution"),
            ('N', "nodes"),
            ('n', "ntasks"),
            ('O', "overcommit"),
            ('o', "output"),
            ('p', "partition"),
            ('Q', "quiet"),
            ('q', "qos"),
            ('S', "core-spec"),
            ('s', "oversubscribe"),
            ('t', "time"),
            ('V', "version"),
            ('v', "verbose"),
            ('W', "wait"),
            ('w', "nodelist"),
            ('x', "exclude"),
        ];
        let table: HashSet<(char, &str)> = SBATCH.specs().filter_map(|s| s.short.map(|c| (c, s.long))).collect();
        assert_eq!(table, expected.into_iter().collect());
    }

    #[test]
    fn optional_values_are_those_of_slurm_22_05() {
        let optional: HashSet<&str> =
            SBATCH.specs().filter(|s| s.arity == Arity::OptionalValue).map(|s| s.long).collect();
        // The last two 24.05 and 24.11 added.
        let expected = ["exclusive", "nice", "get-user-env", "propagate", "no-kill", "resv-ports", "oom-kill-step"];
        assert_eq!(optional, expected.into_iter().collect());
        for flag in ["oversubscribe", "hold", "requeue", "no-requeue", "parsable", "test-only", "wait", "verbose"] {
            assert_eq!(spec(flag).arity, Arity::Flag, "--{flag}");
        }
        assert_eq!(spec("kill-on-invalid-dep").arity, Arity::Value, "--kill-on-invalid-dep=<yes|no> needs a value");
    }

    #[test]
    fn prefixes_are_the_options_they_begin_as_sbatch_reads_them() {
        let got = |a: &[&str]| parse(&SBATCH, &argv(a)).map(|p| owned(&p));
        assert_eq!(got(&["--accoun=a"]), Ok(vec![("account", Some("a".into()))]));
        assert_eq!(got(&["--part", "x"]), Ok(vec![("partition", Some("x".into()))]));
        assert_eq!(got(&["--wra=x"]), Ok(vec![("wrap", Some("x".into()))]), "rebuilt, whatever its spelling");
        assert_eq!(got(&["--ch=/"]), Ok(vec![("chdir", Some("/".into()))]), "rebuilt, whatever its spelling");
        let ambiguous = |typed: &str, possibilities: &[&'static str]| {
            Err(GetoptError::Ambiguous { typed: typed.into(), possibilities: possibilities.to_vec() }.into())
        };
        assert_eq!(got(&["--acc"]), ambiguous("acc", &["account", "acctg-freq"]));
        assert_eq!(got(&["--exp=ALL"]), ambiguous("exp=ALL", &["export", "export-file"]));
        assert_eq!(got(&["--pro"]), ambiguous("pro", &["profile", "propagate"]));
        let e = got(&["--m=1"]).unwrap_err().to_string();
        let m = "'--mail-type' '--mail-user' '--mcs-label' '--mem' '--mem-bind' '--mem-per-cpu' '--mem-per-gpu' '--mincpus'";
        assert_eq!(e, format!("option '--m=1' is ambiguous; possibilities: {m}"));
        // A denied option is refused by any prefix that names it, named in full.
        let e = got(&["--ui=0"]).unwrap_err().to_string();
        assert_eq!(e, "option --ui (--uid) is not allowed in agent-sandbox: jobs run as your own user only");
        // srun's --prolog is no sbatch option: unrecognized, as sbatch says.
        assert_eq!(got(&["--prolog=x"]), Err(GetoptError::Unrecognized("prolog=x".into()).into()));
        // Where the site has the belt, --ag is its option (refused), and --a lists it last.
        static BELT: &[crate::getopt::LongOpt] = &[crate::getopt::BELT];
        let with_belt = |a: &[&str]| crate::table::parse_with(&SBATCH, BELT, &argv(a)).map(|p| owned(&p));
        assert!(
            matches!(with_belt(&["--ag=/x"]), Err(GrammarError::Denied { ref opt, .. }) if opt == "--ag (--agent-sandbox)")
        );
        assert_eq!(got(&["--ag=/x"]), Err(GetoptError::Unrecognized("ag=/x".into()).into()));
        assert_eq!(with_belt(&["--a"]), ambiguous("a", &["account", "acctg-freq", "array", "agent-sandbox"]));
    }

    const HEAD: &str = "#!/bin/bash\n";

    fn words(body: &str) -> Vec<String> {
        parse_directives(&format!("{HEAD}{body}")).unwrap()
    }

    fn directives(body: &str) -> Result<Parsed, GrammarError> {
        parse(&SBATCH, &parse_directives(&format!("{HEAD}{body}"))?)
    }

    #[test]
    fn directive_uid_is_denied() {
        let e = directives("#SBATCH --uid=0\n").unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "--uid"), "{e:?}");
    }

    #[test]
    fn directive_clustered_short_flags_reach_chdir() {
        // -vvD /tmp hides -D (chdir) behind two verbose flags; the grammar still finds it.
        let p = directives("#SBATCH -vvD /tmp\n").unwrap();
        assert_eq!(pairs(&p), [("verbose", None), ("verbose", None), ("chdir", Some("/tmp"))]);
        assert!(matches!(p.options[2].0.class, Class::Rebuilt(_)));
        let e = directives("#SBATCH -vvM other\n").unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "-M (--clusters)"), "{e:?}");
    }

    #[test]
    fn directive_after_a_tab_is_still_read() {
        let e = directives("#SBATCH\t--get-user-env\n").unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "--get-user-env"), "{e:?}");
    }

    #[test]
    fn directives_are_read_with_prefixes_as_sbatch_reads_them() {
        let p = directives("#SBATCH --job-n=x --nodel n1\n#SBATCH --part=debug\n").unwrap();
        assert_eq!(pairs(&p), [("job-name", Some("x")), ("nodelist", Some("n1")), ("partition", Some("debug"))]);
        let e = directives("#SBATCH --m=1\n").unwrap_err();
        assert!(matches!(e, GrammarError::Getopt(GetoptError::Ambiguous { ref typed, .. }) if typed == "m=1"), "{e:?}");
        let e = directives("#SBATCH --ge\n").unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "--ge (--get-user-env)"), "{e:?}");
    }

    #[test]
    fn export_of_bash_env_parses_for_the_chaperon_to_apply_inside_the_jail() {
        let p = directives("#SBATCH --export=ALL,BASH_ENV=/tmp/x\n").unwrap();
        assert_eq!(pairs(&p), [("export", Some("ALL,BASH_ENV=/tmp/x"))]);
    }

    #[test]
    fn directive_without_space_after_the_prefix_is_read_as_slurm_does() {
        // Slurm compares only the 7 bytes of "#SBATCH": "#SBATCH--uid=0" is a directive to it.
        let e = directives("#SBATCH--uid=0\n").unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "--uid"), "{e:?}");
        assert_eq!(words("#SLURM --gid=0\n"), ["--gid=0"], "the old #SLURM prefix still counts");
    }

    #[test]
    fn indented_sbatch_is_a_comment_not_a_directive() {
        assert_eq!(words("  #SBATCH --uid=0\n\t#SBATCH --gid=0\n#SBATCH -J ok\n"), ["-J", "ok"]);
    }

    #[test]
    fn directives_stop_at_the_first_command() {
        let body = "\n# a comment\n#SBATCH -J a\n   \n#SBATCH -t 5\necho hi\n#SBATCH --uid=0\n";
        assert_eq!(words(body), ["-J", "a", "-t", "5"]);
        assert_eq!(words("  set -e\n#SBATCH --uid=0\n"), Vec::<String>::new());
        assert_eq!(words(""), Vec::<String>::new());
        assert_eq!(parse_directives("#!/bin/sh\n#SBATCH -J x").unwrap(), ["-J", "x"], "no final newline");
    }

    #[test]
    fn directive_words_split_like_slurm() {
        assert_eq!(words("#SBATCH --job-name=\"my job\" -t 5\n"), ["--job-name=my job", "-t", "5"]);
        assert_eq!(words("#SBATCH -J 'a b'c\"d e\"\n"), ["-J", "a bcd e"]);
        assert_eq!(words("#SBATCH -J a\\\"b\n"), ["-J", "a\"b"]);
        assert_eq!(words("#SBATCH -J 'it\\'s'\n"), ["-J", "it's"], "backslash escapes inside quotes too");
        assert_eq!(words("#SBATCH -J x # a comment --uid=0\n"), ["-J", "x"]);
        assert_eq!(words("#SBATCH -J x#y --uid=0\n"), ["-J", "x"], "an unquoted # ends the line even mid-word");
        assert_eq!(words("#SBATCH -J \"x#y\" --comment=a\\#b\n"), ["-J", "x#y", "--comment=a#b"]);
        assert_eq!(words("#SBATCH -J x \"\" --uid=0\n"), ["-J", "x"], "an empty word ends the line");
        assert_eq!(words("#SBATCH -J x\x0b-t\x0c5\r-v\n"), ["-J", "x", "-t", "5", "-v"], "C isspace");
        assert_eq!(words("#SBATCH --comment=x hetjob --uid=0\n"), ["--comment=x"], "a hetjob word ends the line");
    }

    #[test]
    fn directive_lines_form_one_argument_list() {
        let p = directives("#SBATCH --job-name\n#SBATCH --uid=0\n").unwrap();
        assert_eq!(pairs(&p), [("job-name", Some("--uid=0"))], "as getopt reads Slurm's joined argv");
    }

    #[test]
    fn malformed_directives_are_refused_like_sbatch() {
        assert!(matches!(
            parse_directives("#!/bin/sh\n#SBATCH -J \"x\n"),
            Err(GrammarError::Directive { line: 2, .. })
        ));
        assert!(matches!(parse_directives("#!/bin/sh\n#SBATCH -N1 : -N2\n"), Err(GrammarError::Directive { .. })));
        assert!(matches!(parse_directives("#!/bin/sh\n#SBATCH hetjob\n"), Err(GrammarError::Unsupported(_))));
        assert!(matches!(parse_directives("#!/bin/sh\n#SBATCH PACKJOB -N2\n"), Err(GrammarError::Unsupported(_))));
        for bad in ["", " \n\t", "echo hi\n", "#SBATCH -J x\n", "#!/bin/sh\0\n", "#!/bin/sh\r\n#SBATCH -J x\r\n"] {
            assert!(matches!(parse_directives(bad), Err(GrammarError::Script(_))), "{bad:?}");
        }
        assert_eq!(
            parse_directives("#!/bin/sh\r#SBATCH -J x\n").unwrap(),
            Vec::<String>::new(),
            "a lone CR is not CRLF"
        );
        let many = format!("{HEAD}{}", "#SBATCH -v\n".repeat(MAX_ARGS + 1));
        assert!(matches!(parse_directives(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    fn sbatch(a: &[&str], script: Option<&str>) -> Result<SbatchRequest, GrammarError> {
        parse_sbatch(&argv(a), script, &[])
    }

    #[test]
    fn command_line_follows_directives_so_it_wins() {
        let script = "#!/bin/sh\n#SBATCH -t 10 -J fromscript\n#SBATCH --mem=1G\nsrun x\n";
        let r = sbatch(&["-t", "20", "job.sh", "a", "-J", "b"], Some(script)).unwrap();
        assert_eq!(
            r.options,
            [
                ("time", Some("10".into())),
                ("job-name", Some("fromscript".into())),
                ("mem", Some("1G".into())),
                ("time", Some("20".into()))
            ]
        );
        assert_eq!(r.last("time"), Some(Some("20")));
        assert_eq!(r.last("job-name"), Some(Some("fromscript")), "-J after the script is the script's argument");
        assert_eq!(r.last("hold"), None);
        assert_eq!(r.script_path.as_deref(), Some("job.sh"));
        assert_eq!(r.script_args, ["a", "-J", "b"]);
    }

    #[test]
    fn denials_are_the_same_in_directives_and_on_the_command_line() {
        let cli = sbatch(&["--uid=0", "job.sh"], Some("#!/bin/sh\n")).unwrap_err();
        let dir = sbatch(&["job.sh"], Some("#!/bin/sh\n#SBATCH --uid=0\n")).unwrap_err();
        assert_eq!(cli, dir);
        assert!(matches!(sbatch(&["job.sh"], Some("#!/bin/sh\n#SBATCH -vvM x\n")), Err(GrammarError::Denied { .. })));
    }

    #[test]
    fn early_pass_options_in_directives_are_ignored_as_slurm_does() {
        let r = sbatch(&[], Some("#!/bin/sh\n#SBATCH -vv --wrap=x --help -J j\n")).unwrap();
        assert_eq!(r.options, [("job-name", Some("j".into()))]);
        let r = sbatch(&["-v", "job.sh"], Some("#!/bin/sh\n")).unwrap();
        assert_eq!(r.options, [("verbose", None)]);
    }

    #[test]
    fn a_word_that_is_not_an_option_in_a_directive_is_refused() {
        let e = sbatch(&[], Some("#!/bin/sh\n#SBATCH -J x extra --uid=0\n")).unwrap_err();
        assert_eq!(e, GrammarError::InvalidDirective("extra".into()));
        let e = sbatch(&[], Some("#!/bin/sh\n#SBATCH -- --uid=0\n")).unwrap_err();
        assert_eq!(e, GrammarError::InvalidDirective("--uid=0".into()));
        assert!(sbatch(&[], Some("#!/bin/sh\n#SBATCHfoo\n")).is_err());
    }

    #[test]
    fn wrap_and_heterogeneous_jobs() {
        let r = sbatch(&["--wrap", "hostname", "-t", "5"], None).unwrap();
        assert_eq!((r.last("wrap"), r.script_path.as_deref()), (Some(Some("hostname")), None));
        assert!(matches!(sbatch(&["--wrap=x", "job.sh"], None), Err(GrammarError::Usage(_))));
        assert!(matches!(sbatch(&["--wrap=x"], Some("#!/bin/sh\n")), Err(GrammarError::Usage(_))));
        assert!(matches!(sbatch(&["-N1", ":", "-N2", "job.sh"], None), Err(GrammarError::Unsupported(_))));
        assert!(matches!(sbatch(&["job.sh", ":"], None), Err(GrammarError::Unsupported(_))));
    }

    #[test]
    fn stdin_script_and_double_dash() {
        let r = sbatch(&["-p", "gpu"], Some("#!/bin/sh\n#SBATCH -t 5\n")).unwrap();
        assert_eq!((r.script_path, r.options.len()), (None, 2));
        let r = sbatch(&["--", "-weird-name.sh", "--uid=0"], None).unwrap();
        assert_eq!(r.script_path.as_deref(), Some("-weird-name.sh"));
        assert_eq!(r.script_args, ["--uid=0"]);
    }

    #[test]
    fn snakemake_and_submitit_submissions_parse() {
        let r = sbatch(&["--parsable", "--export=ALL", "--comment", "rule_a", "-A", "p1", "job.sh"], None).unwrap();
        assert_eq!(r.last("export"), Some(Some("ALL")));
        let script = "#!/bin/bash\n\n# Parameters\n#SBATCH --cpus-per-task=4\n#SBATCH --error=/p/%j_0_log.err\n\
                      #SBATCH --gpus-per-node=1\n#SBATCH --job-name=submitit\n#SBATCH --nodes=1\n\
                      #SBATCH --open-mode=append\n#SBATCH --signal=USR2@90\n#SBATCH --time=60\n#SBATCH --wckey=submitit\n\
                      \n# command\nexport SUBMITIT_EXECUTOR=slurm\nsrun --unbuffered python -u -m submitit\n";
        let r = sbatch(&["/p/submission.sh"], Some(script)).unwrap();
        assert_eq!(r.options.len(), 9);
        assert_eq!(r.last("signal"), Some(Some("USR2@90")));
        // submitit writes sizes with a B (str_to_mbytes takes "102MB"); a negative nice is valid syntax.
        let script = "#!/bin/bash\n#SBATCH --mem=102MB\n#SBATCH --nice=-5\n#SBATCH --begin=now+1hour\n\
                      #SBATCH --signal=B:USR2@90\n#SBATCH --open-mode=a\nsrun true\n";
        let r = sbatch(&["/p/submission.sh"], Some(script)).unwrap();
        assert_eq!((r.last("mem"), r.last("nice")), (Some(Some("102MB")), Some(Some("-5"))));
    }

    use crate::table::testkit::Rng;

    const ATOMS: &[&str] = &[
        "-", "--", "=", ":", ",", "?", "@", "#", "\"", "'", "\\", " ", "\t", "\n", "\r", "\0", "\x0b", "\u{1b}", "é",
        "\u{2028}", "a", "Z", "0", "9", "_", "*", "[", "]", "/", "ALL", "USR1", "afterok:", "hetjob", "#SBATCH",
        "#SLURM", "#!", "v", "D", "J", "M", "x", "%j", "SIG", "B:",
    ];

    fn token(rng: &mut Rng) -> String {
        let specs: Vec<&OptSpec> = SBATCH.specs().collect();
        match rng.below(4) {
            0 => format!("--{}", rng.pick(&specs).long),
            1 => format!("-{}", rng.pick(&specs).short.unwrap_or('v')),
            2 => format!(
                "--{}={}",
                rng.pick(&specs).long,
                (0..rng.below(4)).map(|_| *rng.pick(ATOMS)).collect::<String>()
            ),
            _ => (0..rng.below(6)).map(|_| *rng.pick(ATOMS)).collect(),
        }
    }

    #[test]
    fn random_arguments_and_scripts_never_panic() {
        let mut rng = Rng(0x5eed_cafe_f00d_0001);
        let kinds = [
            Text,
            Int,
            PositiveInt,
            Nice,
            Time,
            Memory,
            DateTime,
            NodeList,
            JobName,
            Path,
            JobIdList,
            Dependency,
            ExportSpec,
            SbatchSignal,
            Any,
        ];
        let mut outcomes = [0usize; 2];
        for _ in 0..50_000 {
            let args: Vec<String> = (0..rng.below(8)).map(|_| token(&mut rng)).collect();
            let mut script = String::from(if rng.below(10) == 0 { "" } else { "#!/bin/sh\n" });
            for _ in 0..rng.below(6) {
                let prefix = *rng.pick(&["#SBATCH ", "#SBATCH", "#SLURM\t", "  #SBATCH ", "# ", "", "echo "]);
                let line: Vec<String> = (0..rng.below(5)).map(|_| token(&mut rng)).collect();
                script.push_str(prefix);
                let sep = *rng.pick(&[" ", "\t", "", "\n"]);
                script.push_str(&line.join(sep));
                script.push('\n');
            }
            let script = (rng.below(4) != 0).then_some(script.as_str());
            let r = parse_sbatch(&args, script, &[]);
            outcomes[r.is_ok() as usize] += 1;
            if let Err(e) = r {
                let shown = e.to_string();
                let bound = 2 * MAX_ARG_BYTES;
                assert!(shown.len() < bound);
            }
            for a in &args {
                let _ = validate(*rng.pick(&kinds), a);
                let _ = crate::grammar::dependency_job_ids(a);
            }
            let _ = parse(&SBATCH, &args);
        }
        // The generator must reach both sides, or it tests nothing.
        assert!(outcomes[0] > 1000 && outcomes[1] > 1000, "{outcomes:?}");
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SBATCH, &[], &[], &["array"], |a| {
            let p = parse_sbatch(a, None, &[]).map_err(|e| e.to_string())?;
            let asked = p.asked("sbatch".into());
            let args = p.real_args(&asked.job_name, Path::new("/p"), Path::new("/p/.jobs/wrapper.out"));
            Ok((args, format!("{asked:?}")))
        });
    }
}
