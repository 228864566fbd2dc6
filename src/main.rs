//! agent-sandbox: one binary, dispatched on argv[0] and the subcommand. Errors from every
//! layer arrive here and are reported once: one sentence, the cause, and the fix.

use agent_sandbox::{audit, cli, doctor, host, jail, plan, policy, show, stub, timing};

use clap::Parser;
use std::path::PathBuf;

/// Exit status when the jail could not be started (the command never ran).
const EXIT_CANNOT_START: i32 = 126;

/// One readable failure: what went wrong and, when known, how to fix it.
struct Failure {
    message: String,
    fix: Option<String>,
    /// The command itself was not found: exit 127 like a shell, not 126.
    not_found: bool,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Failure { message: message.into(), fix: None, not_found: false }
    }
}

macro_rules! from_error {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Self {
                Failure { fix: e.fix(), message: e.to_string(), not_found: false }
            }
        }
    )*};
}
from_error!(policy::PolicyError, plan::PlanError);

impl From<jail::JailError> for Failure {
    fn from(e: jail::JailError) -> Self {
        let not_found = matches!(e, jail::JailError::CommandNotFound(_));
        Failure { fix: e.fix(), message: e.to_string(), not_found }
    }
}

impl From<host::HostError> for Failure {
    fn from(e: host::HostError) -> Self {
        Failure::new(e.to_string())
    }
}

fn main() {
    // Called under a stub's name (a mailer inside the jail): that stub, nothing else.
    if let Some(code) = std::env::args_os().next().and_then(|a0| stub::dispatch(&a0)) {
        std::process::exit(code);
    }
    let code = match real_main() {
        Ok(code) => code,
        Err(f) if f.not_found => {
            eprintln!("agent-sandbox: {}", f.message);
            127
        }
        Err(f) => {
            eprintln!("agent-sandbox: {}", f.message);
            if let Some(fix) = f.fix {
                eprintln!("  {fix}");
            }
            EXIT_CANNOT_START
        }
    };
    timing::mark("exit");
    std::process::exit(code);
}

fn real_main() -> Result<i32, Failure> {
    timing::mark("start");
    let args = cli::Cli::parse();
    init_tracing(args.opts.verbose);
    match &args.command {
        Some(cli::Command::Doctor { json }) => Ok(doctor::run(*json)),
        Some(cli::Command::Log { session, json, tail, follow }) => log_cmd(session.as_deref(), *json, *tail, *follow),
        Some(cli::Command::Policy { action }) => policy_cmd(&args.opts, action),
        Some(cli::Command::Exec { job }) => exec_job(job),
        Some(cli::Command::Chaperon) => Ok(agent_sandbox::slurm::chaperon_main()),
        Some(cli::Command::Run { command }) => {
            let cmd = os_args(command)?;
            launch(&args.opts, args.opts.profile.as_deref(), What::Command(cmd))
        }
        Some(cli::Command::Profile(argv)) => {
            let mut argv = os_args(argv)?;
            let name = argv.remove(0);
            launch(&args.opts, Some(&name), What::Agent(argv))
        }
        None => launch(&args.opts, args.opts.profile.as_deref(), What::Shell),
    }
}

fn os_args(v: &[std::ffi::OsString]) -> Result<Vec<String>, Failure> {
    v.iter()
        .map(|a| a.clone().into_string().map_err(|a| Failure::new(format!("argument {a:?} is not valid UTF-8"))))
        .collect()
}

/// Diagnostics only when asked for (-v or AGENT_SANDBOX_LOG): building a filter costs
/// more than the rest of startup, and warnings that matter go to stderr directly.
fn init_tracing(verbose: u8) {
    let env = std::env::var("AGENT_SANDBOX_LOG").ok();
    if verbose == 0 && env.is_none() {
        return;
    }
    let level = match verbose {
        0 | 1 => "info",
        _ => "debug",
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(env.as_deref().unwrap_or(level)))
        .without_time()
        .try_init();
}

struct Context {
    facts: host::HostFacts,
    paths: policy::PolicyPaths,
    project: PathBuf,
    cwd: PathBuf,
}

fn context(opts: &cli::RunOpts) -> Result<Context, Failure> {
    timing::mark("ctx");
    let facts = host::HostFacts::gather()?;
    timing::mark("facts");
    let cwd = std::env::current_dir().map_err(|e| Failure {
        message: format!("cannot determine the current directory: {e}"),
        fix: Some("fix: cd into your project directory, or pass --project DIR".into()),
        not_found: false,
    })?;
    let project = opts.project.clone().unwrap_or_else(|| cwd.clone());
    let project = if project.is_absolute() { project } else { cwd.join(project) };
    let xdg = facts.env_var("XDG_CONFIG_HOME").map(PathBuf::from);
    let paths = policy::PolicyPaths::new(&facts.home, xdg.as_deref());
    Ok(Context { facts, paths, project, cwd })
}

/// `project`: the checked project, for `[projects]` tables and the in-project rule; `None`
/// where no project is involved (`policy show` from anywhere).
fn load_policy_for(
    ctx: &Context,
    opts: &cli::RunOpts,
    profile: Option<&str>,
    project: Option<&std::path::Path>,
) -> Result<policy::Policy, Failure> {
    let cli_layer = cli::cli_layer(opts, &ctx.facts.home).map_err(Failure::new)?;
    let canon_project = project.map(std::path::Path::to_path_buf);
    timing::mark("basics");
    Ok(policy::load(policy::LoadRequest {
        paths: &ctx.paths,
        home: &ctx.facts.home,
        uid: ctx.facts.uid,
        project: canon_project.as_deref(),
        profile,
        policy_files: &opts.policy,
        cli: cli_layer,
    })?)
}

/// What to run in the jail.
enum What {
    Command(Vec<String>),
    /// A profile's agent, with the user's extra arguments.
    Agent(Vec<String>),
    Shell,
}

fn launch(opts: &cli::RunOpts, profile: Option<&str>, what: What) -> Result<i32, Failure> {
    let ctx = context(opts)?;
    let log = audit::AuditLog::new(&ctx.facts.state_dir());
    let result = launch_logged(opts, profile, what, ctx, &log);
    if let Err(f) = &result {
        if !opts.dry_run {
            let mut r = log.record("refused");
            r.reason = Some(f.message.clone());
            log.write(&r);
        }
    }
    result
}

fn launch_logged(
    opts: &cli::RunOpts,
    profile: Option<&str>,
    what: What,
    ctx: Context,
    log: &audit::AuditLog,
) -> Result<i32, Failure> {
    // The project checks that need no policy come first: a bad project is reported as such.
    let project = plan::check_project_basics(&ctx.facts, &host::RealFs::default(), &ctx.project)?;
    let pol = load_policy_for(&ctx, opts, profile, Some(&project))?;
    let command = match what {
        What::Command(c) => c,
        What::Agent(args) => {
            let base = pol.agent.as_ref().and_then(|a| a.value.command.clone()).unwrap_or_default();
            if base.is_empty() {
                return Err(Failure::new(format!("profile `{}` names no command", profile.unwrap_or("?"))));
            }
            base.into_iter().chain(args).collect()
        }
        What::Shell => vec![ctx.facts.shell.display().to_string()],
    };
    // The chaperon's socket exists before the plan binds it into the jail; the chaperon
    // itself is started when the first Slurm command knocks.
    let landlock = backend_is_landlock(&pol, &ctx.facts);
    let chaperon = if opts.dry_run {
        None
    } else {
        Some(
            chaperon_door(landlock, &ctx.facts.state_dir(), &log.session)
                .map_err(|e| Failure::new(format!("cannot create the session's Slurm socket: {e}")))?,
        )
    };
    let req = plan::RunRequest {
        command,
        project: ctx.project.clone(),
        cwd: ctx.cwd.clone(),
        session: log.session.clone(),
        chaperon_socket: chaperon.as_ref().and_then(|c| c.socket.clone()),
        chaperon_channel: landlock,
        extra_files: vec![],
        env: None,
    };
    let mut ctx = ctx;
    // Mailers and Slurm commands alike (cached): Slurm's are covered in every session.
    ctx.facts.find_mailers();
    if !opts.dry_run {
        stub::ensure_links(&ctx.facts.state_dir()).map_err(|e| {
            Failure::new(format!("cannot prepare the stub links in {}: {e}", ctx.facts.state_dir().display()))
        })?;
    }
    // Held from before planning so that no other session of this project removes a
    // placeholder this plan counts on.
    let lock = if opts.dry_run {
        None
    } else {
        Some(
            jail::placeholders::ProjectLock::acquire(&ctx.facts.state_dir(), &project)
                .map_err(|e| Failure::new(e.to_string()))?,
        )
    };
    timing::mark("policy");
    let plan = plan::build(&pol, &ctx.facts, &host::RealFs::default(), &req)?;
    timing::mark("plan");
    tracing::info!(
        backend = plan.backend.as_str(),
        net = plan.net.effective.as_str(),
        mounts = plan.mounts.len(),
        hidden = plan.hidden.len(),
        env = plan.env.len(),
        "plan ready (see --dry-run for the full plan)"
    );
    if opts.dry_run {
        if opts.json {
            println!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default());
        } else {
            print!("{}", show::plan(&plan));
        }
        return Ok(0);
    }
    for w in &plan.warnings {
        eprintln!("agent-sandbox: warning: {w}");
    }
    let banner = || {
        if !opts.quiet {
            eprintln!("{}", show::banner(&plan));
        }
    };
    // Dry runs returned above: only they have no lock.
    let Some(lock) = lock else { return Ok(0) };
    let mut start = log.record("session_start");
    start.project = Some(plan.project.display().to_string());
    start.program = plan.command.first().map(|c| c.rsplit('/').next().unwrap_or(c).to_string());
    start.backend = Some(plan.backend.as_str().into());
    start.net = Some(plan.net.effective.as_str().into());
    start.warnings = plan.warnings.clone();
    log.write(&start);
    let began = std::time::Instant::now();
    let session = agent_sandbox::slurm::Session::new(&ctx.facts, &log.session, &plan.project, String::new());
    let mut lock = lock;
    if let Some(socket) = chaperon.as_ref().and_then(|c| c.socket.clone()) {
        lock.remove_after_exit(socket);
    }
    let slurm = chaperon.as_ref().map(|c| (c, session, &pol));
    let outcome = run_with_chaperon(&plan, &banner, lock, slurm, log);
    if let Some(socket) = chaperon.as_ref().and_then(|c| c.socket.as_ref()) {
        let _ = std::fs::remove_file(socket);
    }
    let outcome = outcome?;
    let mut end = log.record("session_end");
    match outcome {
        jail::Outcome::Exited(c) => end.exit = Some(c),
        jail::Outcome::Signaled(s) => end.signal = Some(s),
    }
    end.duration_ms = Some(began.elapsed().as_millis() as u64);
    log.write(&end);
    agent_sandbox::net::supervisor::defer_teardown();
    Ok(outcome.code())
}

/// `agent-sandbox exec --job DIR`, run by a job's wrapper on the compute node: rebuilds the
/// submitting session's jail from the policy frozen in DIR (not from the configs, the
/// environment or anything the jail could have written since), and runs the original script
/// inside, its output opened inside the jail.
fn exec_job(dir: &std::path::Path) -> Result<i32, Failure> {
    use chaperon::job::{expand_pattern, open_job};
    // Every host-side path (state dir, config dir, the admin file) comes from this process's
    // own environment and the password database: the job's `--export` set is the jail's
    // environment only, and the jail chose it.
    let mut facts = host::HostFacts::gather()?;
    let job = open_job(&facts.state_dir().join("jobs"), dir).map_err(Failure::new)?;
    let spec = job.spec.clone();
    let pol: policy::Policy = serde_json::from_str(&spec.policy)
        .map_err(|e| Failure::new(format!("the job's frozen policy does not load: {e}")))?;
    let xdg = facts.env_var("XDG_CONFIG_HOME").map(PathBuf::from);
    let pol = policy::bound_by_admin(pol, &policy::PolicyPaths::new(&facts.home, xdg.as_deref()))?;
    // The job's environment: what --export asked for at submission, plus what Slurm tells the
    // job on this node (SLURM_JOB_ID, the node list...). Nothing else of the node's. The
    // node's SLURM_EXPORT_ENV is the wrapper's `--export=NONE`: the job gets what sbatch
    // would have set for the caller's own --export instead, so its srun steps inherit ALL.
    let node: Vec<(String, String)> = facts.env.clone();
    let mut env: Vec<(String, String)> = spec.export.clone().unwrap_or_default().into_iter().collect();
    for (k, v) in &node {
        if (k.starts_with("SLURM_") || k.starts_with("SLURMD_")) && k != "SLURM_EXPORT_ENV" {
            env.retain(|(n, _)| n != k);
            env.push((k.clone(), v.clone()));
        }
    }
    if let Some(e) = &spec.slurm_export_env {
        if !env.iter().any(|(k, _)| k == "SLURM_EXPORT_ENV") {
            env.push(("SLURM_EXPORT_ENV".into(), e.clone()));
        }
    }
    facts.find_mailers();
    let var = |k: &str| node.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let expand = |p: &str| expand_pattern(p, &var, &facts.user, &spec.job_name);
    let script_inside = format!("{}/job-script", stub::STUB_DIR);
    let tasks = var("SLURM_STEP_NUM_TASKS").or_else(|| var("SLURM_NTASKS"));
    let shared = tasks.is_some_and(|n| n.trim() != "1");
    let command = chaperon::job::job_command(&spec, &expand, shared, &script_inside);
    // A batch job's script reaches the jail as the bytes read through the descriptor opened
    // without following a symlink, whatever the directory holds by the time of the mount.
    let extra_files = match &spec.command {
        Some(argv) if !argv.is_empty() => vec![],
        _ => vec![(PathBuf::from(&script_inside), job.script)],
    };
    let log = audit::AuditLog::new(&facts.state_dir());
    stub::ensure_links(&facts.state_dir()).map_err(|e| Failure::new(format!("cannot prepare the stub links: {e}")))?;
    let project = plan::check_project_basics(&facts, &host::RealFs::default(), &spec.project)?;
    let lock = jail::placeholders::ProjectLock::acquire(&facts.state_dir(), &project)
        .map_err(|e| Failure::new(e.to_string()))?;
    let landlock = backend_is_landlock(&pol, &facts);
    let chaperon = chaperon_door(landlock, &facts.state_dir(), &log.session)
        .map_err(|e| Failure::new(format!("cannot create the job's Slurm socket: {e}")))?;
    let req = plan::RunRequest {
        command,
        project: spec.project.clone(),
        cwd: spec.cwd.clone(),
        session: spec.session.clone(),
        chaperon_socket: chaperon.socket.clone(),
        chaperon_channel: landlock,
        extra_files,
        env: Some(env),
    };
    let plan = plan::build(&pol, &facts, &host::RealFs::default(), &req)?;
    let mut start = log.record("job_start");
    start.project = Some(plan.project.display().to_string());
    start.job = var("SLURM_JOB_ID").and_then(|j| j.parse().ok());
    start.backend = Some(plan.backend.as_str().into());
    start.net = Some(plan.net.effective.as_str().into());
    log.write(&start);
    let session = agent_sandbox::slurm::Session::new(&facts, &spec.session, &plan.project, spec.policy.clone());
    let mut lock = lock;
    if let Some(socket) = chaperon.socket.clone() {
        lock.remove_after_exit(socket);
    }
    let outcome = run_with_chaperon(&plan, &|| {}, lock, Some((&chaperon, session, &pol)), &log);
    if let Some(socket) = &chaperon.socket {
        let _ = std::fs::remove_file(socket);
    }
    let outcome = outcome?;
    let mut end = log.record("job_end");
    end.job = start.job;
    match outcome {
        jail::Outcome::Exited(c) => end.exit = Some(c),
        jail::Outcome::Signaled(s) => end.signal = Some(s),
    }
    log.write(&end);
    agent_sandbox::net::supervisor::defer_teardown();
    Ok(outcome.code())
}

/// Runs the jail; the chaperon (if any, with the session it serves and the policy it
/// freezes into jobs) starts when the first Slurm command connects.
fn run_with_chaperon(
    plan: &plan::Plan,
    banner: &dyn Fn(),
    lock: jail::placeholders::ProjectLock,
    slurm: Option<(&agent_sandbox::slurm::Chaperon, agent_sandbox::slurm::Session, &policy::Policy)>,
    log: &audit::AuditLog,
) -> Result<jail::Outcome, jail::JailError> {
    let door = slurm.as_ref().map(|(c, _, _)| (c.fd(), c.take_jail_end()));
    let mut slurm = slurm;
    let mut start = || {
        if let Some((c, session, pol)) = slurm.as_mut() {
            // The frozen policy is serialized only now, when Slurm is first used.
            if session.policy_json.is_empty() {
                session.policy_json = serde_json::to_string(pol).unwrap_or_default();
            }
            c.spawn(session);
        }
    };
    let lazy = door.map(|(fd, inherit)| jail::relay::Lazy { fd, start: &mut start, inherit });
    let mut net_start = |fds| agent_sandbox::net::start(&plan.net, fds, Some(log.clone()));
    jail::run(plan, banner, lock, &mut net_start, lazy, log)
}

/// The session's door to its chaperon: a socket the plan binds into the userns jail, or a
/// channel the Landlock backend's command inherits.
fn chaperon_door(
    landlock: bool,
    state_dir: &std::path::Path,
    session: &str,
) -> std::io::Result<agent_sandbox::slurm::Chaperon> {
    if landlock {
        agent_sandbox::slurm::channel()
    } else {
        agent_sandbox::slurm::bind(state_dir, session)
    }
}

/// Will the plan pick the Landlock backend? (It has no mount namespace to bind the
/// chaperon's socket into: its command inherits a channel instead.)
fn backend_is_landlock(pol: &policy::Policy, facts: &host::HostFacts) -> bool {
    match pol.backend.value {
        policy::Backend::Landlock => true,
        policy::Backend::Userns => false,
        policy::Backend::Auto => !facts.userns.available,
    }
}

fn log_cmd(session: Option<&str>, json: bool, tail: Option<usize>, follow: bool) -> Result<i32, Failure> {
    let facts = host::HostFacts::gather()?;
    let print = |r: &audit::Record| {
        if json {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        } else {
            println!("{}", audit::render(r));
        }
    };
    if follow {
        let tail = tail.unwrap_or(10);
        audit::follow(&facts.state_dir(), session, tail, &mut |r| print(r))
            .map_err(|e| Failure::new(format!("cannot follow the audit log: {e}")))?;
        return Ok(0);
    }
    let mut records = audit::read(&facts.state_dir(), session)
        .map_err(|e| Failure::new(format!("cannot read the audit log: {e}")))?;
    if let Some(n) = tail {
        let skip = records.len().saturating_sub(n);
        records.drain(..skip);
    }
    for r in &records {
        if json {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        } else {
            println!("{}", audit::render(r));
        }
    }
    Ok(0)
}

fn policy_cmd(opts: &cli::RunOpts, action: &cli::PolicyAction) -> Result<i32, Failure> {
    match action {
        cli::PolicyAction::Show { json } => {
            let ctx = context(opts)?;
            // From a directory that is no valid project (~, /), show the policy without
            // project tables rather than refusing.
            let project = plan::check_project_basics(&ctx.facts, &host::RealFs::default(), &ctx.project).ok();
            let pol = load_policy_for(&ctx, opts, opts.profile.as_deref(), project.as_deref())?;
            if *json || opts.json {
                println!("{}", serde_json::to_string_pretty(&pol).unwrap_or_default());
            } else {
                print!("{}", show::policy(&pol, &ctx.paths));
            }
            Ok(0)
        }
        cli::PolicyAction::Check { file, admin, kind } => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| Failure::new(format!("cannot read {}: {e}", file.display())))?;
            let kind = match (admin, kind) {
                (true, _) | (false, cli::CheckKind::Admin) => policy::FileKind::Admin,
                (false, cli::CheckKind::Site) => policy::FileKind::Site,
                (false, cli::CheckKind::User) => policy::FileKind::User,
                (false, cli::CheckKind::Profile) => policy::FileKind::Profile,
            };
            let admin = &(kind == policy::FileKind::Admin);
            let layer = policy::parse_layer(&text, file, kind)?;
            let builtin = policy::SourcedLayer {
                layer: policy::parse_layer(
                    include_str!("policy/builtin.toml"),
                    std::path::Path::new("<built-in>"),
                    policy::FileKind::Site,
                )?,
                source: policy::Source::Builtin,
            };
            let this = policy::SourcedLayer {
                layer,
                source: if *admin { policy::Source::Admin(file.clone()) } else { policy::Source::User(file.clone()) },
            };
            let merged =
                if *admin { policy::merge(&[builtin], Some(&this)) } else { policy::merge(&[builtin, this], None) }?;
            for w in &merged.warnings {
                println!("warning: {w}");
            }
            println!("{}: ok", file.display());
            Ok(0)
        }
    }
}
