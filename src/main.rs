//! agent-sandbox: one binary, dispatched on argv[0] and the subcommand. Errors from every
//! layer arrive here and are reported once: one sentence, the cause, and the fix.
//!
//! Its entry point is C's `main`, not Rust's (`start`): every session pays for the launcher's
//! start, and Rust's runtime start reads the main thread's stack bounds from
//! `/proc/self/maps` and maps an alternate signal stack, for a stack-overflow message. What
//! else that start does and the launcher needs, `start` does itself.
// The test harness brings its own main, and so leaves every function here unused.
#![cfg_attr(not(test), no_main)]
#![cfg_attr(test, allow(dead_code))]

use agent_sandbox::launch::{self, Context, LaunchError, What};
use agent_sandbox::{audit, cli, doctor, host, plan, policy, show, stub, timing};

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

impl From<host::HostError> for Failure {
    fn from(e: host::HostError) -> Self {
        Failure::new(e.to_string())
    }
}

impl From<LaunchError> for Failure {
    fn from(e: LaunchError) -> Self {
        Failure { fix: e.fix(), message: e.to_string(), not_found: e.not_found() }
    }
}

/// The process's entry point (see the file's head).
#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    start();
    // A panic that escaped: reported by the panic hook already; Rust's runtime exits 101.
    match std::panic::catch_unwind(run) {
        Ok(never) => match never {},
        Err(_) => std::process::exit(101),
    }
}

/// What Rust's runtime start does that the launcher relies on: descriptors 0-2 open (so that
/// no file the launcher opens becomes stdout or stderr by accident), and a broken pipe an
/// error to report rather than a signal to die of; and SIGCHLD at its default.
fn start() {
    agent_sandbox_sys::fd::open_standard_descriptors();
    agent_sandbox_sys::signal::ignore(&[libc::SIGPIPE]);
    // A caller that ignores SIGCHLD (some daemons and scripts do) leaves it ignored across
    // exec, and then the kernel discards it and reaps children itself: the launcher, which
    // learns of the jail's end from it, would wait for ever. Other ignored signals stay
    // ignored (`nohup agent-sandbox ...` means SIGHUP does not end the session).
    agent_sandbox_sys::signal::set_default(&[libc::SIGCHLD]);
}

fn run() -> std::convert::Infallible {
    // Called under a stub's name (a mailer inside the jail): that stub, nothing else.
    if let Some(code) = stub::dispatch(&std::env::args_os().collect::<Vec<_>>()) {
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
    std::process::exit(code)
}

fn real_main() -> Result<i32, Failure> {
    timing::mark("start");
    if may_start_a_session() {
        use agent_sandbox::{jail, slurm};
        // What the waiter may be ordered to do after the session: its own work knows no Slurm.
        static TASKS: &[jail::waiter::Task] = &[(slurm::CANCEL_LEFT, slurm::cancel_left)];
        jail::waiter::start(jail::waiter::Duties { release: jail::placeholders::release_for_waiter, tasks: TASKS });
    }
    let args = cli::Cli::from_args();
    init_tracing(args.opts.verbose);
    match &args.command {
        Some(cli::Command::Doctor { attack: true, .. }) => Ok(doctor::attack::run(&before_subcommand("doctor"))),
        Some(cli::Command::Doctor { json, .. }) => Ok(doctor::run(*json)),
        Some(cli::Command::Log { session, json, tail, follow }) => log_cmd(session.as_deref(), *json, *tail, *follow),
        Some(cli::Command::Policy { action }) => policy_cmd(&args.opts, action),
        Some(cli::Command::Allow { session, duration, what, value }) => {
            allow_cmd(session.as_deref(), duration, what, value)
        }
        Some(cli::Command::Exec { job }) => Ok(launch::job(job)?),
        Some(cli::Command::Chaperon) => Ok(agent_sandbox::slurm::chaperon_main()),
        Some(cli::Command::Run { command }) => {
            let cmd = os_args(command)?;
            session(&args.opts, args.opts.profile.as_deref(), What::Command(cmd))
        }
        Some(cli::Command::Profile(argv)) => {
            let mut argv = os_args(argv)?;
            let name = argv.remove(0);
            session(&args.opts, Some(&name), What::Agent(argv))
        }
        None => session(&args.opts, args.opts.profile.as_deref(), What::Shell),
    }
}

/// The arguments given before the subcommand `name` (the session options an alias or a site
/// wrapper puts first).
fn before_subcommand(name: &str) -> Vec<std::ffi::OsString> {
    before_last(std::env::args_os().skip(1).collect(), name)
}

/// The arguments before the last `name`: the subcommand takes no value spelled like its own
/// name, while an option before it may (`--project doctor doctor --attack`).
fn before_last(mut args: Vec<std::ffi::OsString>, name: &str) -> Vec<std::ffi::OsString> {
    let at = args.iter().rposition(|a| a == name).unwrap_or(args.len());
    args.truncate(at);
    args
}

/// False for the commands that never start a session; a wrong guess either way costs only a
/// fork (a waiter that exits with the launcher, or one forked later, when a lock is handed).
fn may_start_a_session() -> bool {
    const OTHERS: &[&str] =
        &["doctor", "log", "policy", "allow", "chaperon", "help", "--help", "-h", "--version", "-V"];
    std::env::args_os().nth(1).is_none_or(|a| !OTHERS.iter().any(|o| a == *o))
}

fn session(opts: &cli::RunOpts, profile: Option<&str>, what: What) -> Result<i32, Failure> {
    if let Some(fd) = opts.json_status {
        agent_sandbox::status::open(fd).map_err(Failure::new)?;
    }
    Ok(launch::session(opts, profile, what)?)
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

fn log_cmd(session: Option<&str>, json: bool, tail: Option<usize>, follow: bool) -> Result<i32, Failure> {
    let facts = host::HostFacts::gather()?;
    audit::print_log(&facts.state_dir(), session, json, tail, follow)
        .map_err(|e| Failure::new(format!("cannot read the audit log: {e}")))?;
    Ok(0)
}

fn allow_cmd(session: Option<&str>, duration: &str, what: &str, value: &str) -> Result<i32, Failure> {
    use agent_sandbox::net::control::Request;
    let request = match what {
        "host" => {
            let d = agent_sandbox::allow::parse_duration(duration).map_err(Failure::new)?;
            Request::Host { rule: value.to_owned(), seconds: d.as_secs() }
        }
        _ => Request::Path { path: value.to_owned() },
    };
    let facts = host::HostFacts::gather()?;
    let reply = agent_sandbox::allow::run(&facts.sockets_dirs(), session, &request).map_err(Failure::new)?;
    match reply.ok {
        true => println!("agent-sandbox: {}", reply.message),
        false => eprintln!("agent-sandbox: {}", reply.message),
    }
    Ok(if reply.ok { 0 } else { 1 })
}

fn policy_cmd(opts: &cli::RunOpts, action: &cli::PolicyAction) -> Result<i32, Failure> {
    match action {
        cli::PolicyAction::Show { json } => {
            let ctx = Context::gather(opts)?;
            // From a directory that is no valid project (~, /), show the policy without
            // project tables rather than refusing.
            let project = plan::check_project_basics(&ctx.facts, &host::RealFs::default(), &ctx.project).ok();
            let pol = ctx.policy(opts, opts.profile.as_deref(), project.as_deref())?;
            if *json || opts.json {
                println!("{}", serde_json::to_string_pretty(&pol).unwrap_or_default());
            } else {
                print!("{}", show::policy(&pol, &ctx.paths));
            }
            Ok(0)
        }
        cli::PolicyAction::Check { file, admin, kind } => {
            let kind = match (admin, kind) {
                (true, _) | (false, cli::CheckKind::Admin) => policy::FileKind::Admin,
                (false, cli::CheckKind::Site) => policy::FileKind::Site,
                (false, cli::CheckKind::User) => policy::FileKind::User,
                (false, cli::CheckKind::Profile) => policy::FileKind::Profile,
            };
            for w in policy::check_file(file, kind)? {
                println!("warning: {w}");
            }
            println!("{}: ok", file.display());
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn session_options_end_at_the_last_subcommand_name_not_at_a_value_spelled_like_it() {
        let v = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(
            super::before_last(v(&["--project", "doctor", "doctor", "--attack"]), "doctor"),
            v(&["--project", "doctor"])
        );
        assert_eq!(super::before_last(v(&["--net", "open", "doctor", "--attack"]), "doctor"), v(&["--net", "open"]));
        assert_eq!(super::before_last(v(&["doctor"]), "doctor"), v(&[]));
    }
}
