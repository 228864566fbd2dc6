//! The command line (clap): `run`, `<profile>`, bare `agent-sandbox`, `doctor`, `policy`.
//! Flags become one more policy layer (`cli_layer`); nothing here decides policy.

mod fast;

use crate::policy::schema::*;
use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "agent-sandbox",
    version,
    about = "A kernel-enforced jail for AI coding agents on shared Linux hosts",
    long_about = "A kernel-enforced jail for AI coding agents on shared Linux hosts and HPC login nodes.\n\n\
    agent-sandbox run -- CMD    run CMD in the jail, in the current project directory\n\
    agent-sandbox codex         run the codex profile's agent in the jail\n\
    agent-sandbox               run your shell in the jail",
    allow_external_subcommands = true,
    args_conflicts_with_subcommands = false
)]
pub struct Cli {
    #[command(flatten)]
    pub opts: RunOpts,
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// This process's command line: the common forms read directly (`fast`), the rest by
    /// clap, which also gives every help text and error.
    pub fn from_args() -> Cli {
        let args: Vec<OsString> = std::env::args_os().skip(1).collect();
        fast::parse(&args).unwrap_or_else(|| Cli::parse_scoped(std::env::args_os()).unwrap_or_else(|e| e.exit()))
    }

    /// clap's parse, with the session options (`--net`, `--mem`, ...) hidden from the help of
    /// the commands that start no session and refused after their name: they are global so
    /// that they may come before or after `run`, and `allow --mem 4G` would otherwise be
    /// silently ignored. Before the command's name they are a launcher default (an alias
    /// `agent-sandbox --ro ~/ref`), which those commands ignore.
    pub fn parse_scoped<I: IntoIterator<Item = OsString>>(args: I) -> Result<Cli, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let mut cmd = Cli::scoped_command();
        let session_opts = session_opts(&cmd);
        let args: Vec<OsString> = args.into_iter().collect();
        let matches = cmd.clone().try_get_matches_from(&args)?;
        if let Some((path, sm)) = NO_SESSION.iter().find_map(|path| matches_at(&matches, path).map(|m| (path, m))) {
            // A session option the command's matches hold came after its name when its
            // index is past the name's (clap hands a value given before it down too). For
            // `policy check`, the name is `policy`'s: `policy --mem 4G check` is refused too.
            let name_at = subcommand_index(&cmd, &args);
            let on_line = |m: &clap::ArgMatches, id: &str| {
                m.try_contains_id(id).unwrap_or(false)
                    && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
                    && m.index_of(id).is_some_and(|i| i > name_at)
            };
            let own = subcommand_at(Cli::command(), path)
                .map(|s| s.get_arguments().map(|a| a.get_id().clone()).collect::<Vec<_>>());
            // An id the command has of its own (`doctor --json`) is the command's.
            let given = session_opts
                .iter()
                .map(|a| (a, a.get_id().as_str()))
                .find(|(_, id)| !own.as_ref().is_some_and(|o| o.iter().any(|x| x == id)) && on_line(sm, id));
            if let Some((a, _)) = given {
                let msg = format!(
                    "--{} is an option of a session (`run`, a profile), not of `{}`",
                    a.get_long().unwrap_or(a.get_id().as_str()),
                    path.join(" ")
                );
                return Err(cmd.error(clap::error::ErrorKind::ArgumentConflict, msg));
            }
        }
        Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
    }
}

impl Cli {
    /// The command line as `parse_scoped` parses it: each session option a hidden option of
    /// the commands that start no session (refused there). The man pages and completions are
    /// generated from it (xtask), so they list an option only where it is taken.
    pub fn scoped_command() -> clap::Command {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        let session_opts = session_opts(&cmd);
        // A subcommand's own argument of a global's id shadows the global there: each session
        // option becomes a hidden one of the command, refused by `parse_scoped` when given.
        for path in NO_SESSION {
            let opts = session_opts.clone();
            cmd = hide_in(cmd, path, &opts);
        }
        cmd
    }
}

/// `cmd` with each of `opts` a hidden argument of its subcommand at `path` (`["policy",
/// "check"]`) that has no argument of that id of its own.
fn hide_in(cmd: clap::Command, path: &[&str], opts: &[clap::Arg]) -> clap::Command {
    let Some((first, rest)) = path.split_first() else {
        let mut cmd = cmd;
        for a in opts {
            if cmd.get_arguments().all(|own| own.get_id() != a.get_id()) {
                cmd = cmd.arg(a.clone().global(false).hide(true));
            }
        }
        return cmd;
    };
    cmd.mut_subcommand(*first, |s| hide_in(s, rest, opts))
}

/// The matches of the subcommand at `path`, where the command line named it.
fn matches_at<'m>(matches: &'m clap::ArgMatches, path: &[&str]) -> Option<&'m clap::ArgMatches> {
    path.iter().try_fold(matches, |m, name| m.subcommand().filter(|(sub, _)| sub == name).map(|(_, sm)| sm))
}

/// The subcommand at `path` of `cmd`.
fn subcommand_at(cmd: clap::Command, path: &[&str]) -> Option<clap::Command> {
    path.iter().try_fold(cmd, |c, name| c.find_subcommand(name).cloned())
}

/// The session's options: the global ones but those every command takes.
fn session_opts(cmd: &clap::Command) -> Vec<clap::Arg> {
    cmd.get_arguments()
        .filter(|a| a.is_global_set() && !KEPT_EVERYWHERE.contains(&a.get_id().as_str()))
        .cloned()
        .collect()
}

/// Where in `args` (the program's name first) the subcommand's name is: past the options
/// before it, each with its value where it takes one.
fn subcommand_index(cmd: &clap::Command, args: &[OsString]) -> usize {
    let takes_value =
        |long: &str| cmd.get_arguments().any(|a| a.get_long() == Some(long) && a.get_action().takes_values());
    let mut i = 1;
    while let Some(arg) = args.get(i).and_then(|a| a.to_str()) {
        match arg.strip_prefix("--") {
            Some(long) if !long.contains('=') && takes_value(long) => i += 2,
            _ if arg.starts_with('-') => i += 1,
            _ => return i,
        }
    }
    i
}

/// The commands that start no session, and so take none of its options, each by its path of
/// names (`policy show` reads the session's options to show the policy they make; `policy
/// check` reads a file alone).
const NO_SESSION: [&[&str]; 4] = [&["allow"], &["doctor"], &["log"], &["policy", "check"]];

/// Global options every command takes.
const KEPT_EVERYWHERE: [&str; 2] = ["quiet", "verbose"];

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command in the jail: agent-sandbox run [OPTIONS] -- CMD [ARGS]
    Run {
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Check this host: namespaces, Landlock, seccomp, tun, Slurm, policy files; and how to fix what fails.
    Doctor {
        #[arg(long)]
        json: bool,
        /// Run escape attempts inside a session with this host's policy (credentials, hidden
        /// files, Slurm's authentication, the host's loopback and processes) and report each;
        /// session options given before `doctor` apply.
        #[arg(long, conflicts_with = "json")]
        attack: bool,
    },
    /// Show the audit log: sessions started, ended and refused (JSON lines with --json).
    Log {
        /// Only this session's records (its id is AGENT_SANDBOX_SESSION inside the jail).
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        json: bool,
        /// Only the last N records.
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        /// Keep printing records as they are written (Ctrl-C stops).
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// From another terminal: widen a running session for a time (`host github.com`), or see
    /// what a new path needs (`path ~/data:ro`). Nothing inside a jail can call it.
    Allow {
        /// The session (`agent-sandbox log` shows ids; AGENT_SANDBOX_SESSION inside); default:
        /// the only one running.
        #[arg(long)]
        session: Option<String>,
        /// How long: 90s, 10m, 2h (at most 24h).
        #[arg(long = "for", value_name = "TIME", default_value = "10m")]
        duration: String,
        /// `host` (a rule as in net.allow: github.com, *.example.org, 10.1.2.3:443) or `path`.
        #[arg(value_parser = ["host", "path"])]
        what: String,
        value: String,
    },
    /// The session's Slurm chaperon (started by the launcher; not for direct use).
    #[command(hide = true)]
    Chaperon,
    /// Run a Slurm job inside the jail it was submitted from (the job wrapper calls this on
    /// the compute node; not for direct use).
    #[command(hide = true)]
    Exec {
        /// The job directory the chaperon wrote at submission.
        #[arg(long, value_name = "DIR")]
        job: PathBuf,
    },
    /// Show or check policy.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// A profile name (codex, claude, gemini, aider, opencode, pi, or your own) and its arguments.
    #[command(external_subcommand)]
    Profile(Vec<OsString>),
}

#[derive(Subcommand, Debug)]
pub enum PolicyAction {
    /// The effective policy, with the layer that set each value and what the admin locked.
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Parse a policy file strictly and report every problem with file, line and key.
    Check {
        file: PathBuf,
        /// Check it as the admin lock file (same as --kind admin).
        #[arg(long)]
        admin: bool,
        /// Which kind of file it is: decides which tables it may hold.
        #[arg(long, value_enum, default_value = "user")]
        kind: CheckKind,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum CheckKind {
    Site,
    User,
    Admin,
    Profile,
}

#[derive(Args, Debug, Default, Clone)]
pub struct RunOpts {
    /// Project directory: the only writable tree (default: the current directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Network mode: isolated, proxied, filtered, open.
    #[arg(long, global = true, value_name = "MODE")]
    pub net: Option<NetMode>,
    /// Let the jail reach this host-loopback port through its gateway address, e.g. a local
    /// model server: 11434 (filtered mode; repeatable).
    #[arg(long = "host-port", global = true, value_name = "PORT")]
    pub host_port: Vec<u16>,
    /// Publish this jail port on host loopback (127.0.0.1:PORT), e.g. a dev server: 8888
    /// (filtered mode; repeatable).
    #[arg(long, global = true, value_name = "PORT")]
    pub publish: Vec<u16>,
    /// Let the project's own Slurm jobs reach this jail port, e.g. a Dask scheduler: 8786.
    /// The supervisor listens on the login node's cluster address (port in
    /// AGENT_SANDBOX_JOB_PORT_8786) and admits only nodes running the project's jobs
    /// (filtered mode; repeatable).
    #[arg(long = "job-port", global = true, value_name = "PORT")]
    pub job_port: Vec<u16>,
    /// Use this profile's policy (with `run`, without running its agent).
    #[arg(long, global = true, value_name = "NAME")]
    pub profile: Option<String>,
    /// Home directory mode: tmpwrite, restricted, read, write.
    #[arg(long = "home-access", global = true, value_name = "MODE")]
    pub home_access: Option<HomeAccess>,
    /// Bind PATH read-only (repeatable). Paths under ~ go to home.read.
    #[arg(long, global = true, value_name = "PATH")]
    pub ro: Vec<String>,
    /// Make PATH writable (repeatable). Paths under ~ go to home.write.
    #[arg(long, global = true, value_name = "PATH")]
    pub rw: Vec<String>,
    /// Hide PATH: it does not exist inside (repeatable).
    #[arg(long, global = true, value_name = "PATH")]
    pub hide: Vec<String>,
    /// Bind devices matching GLOB, e.g. /dev/nvidia0 (repeatable).
    #[arg(long, global = true, value_name = "GLOB")]
    pub device: Vec<String>,
    /// Pass NAME through from your environment, or set NAME=VAL inside (repeatable).
    #[arg(long, global = true, value_name = "NAME[=VAL]")]
    pub env: Vec<String>,
    /// Isolation backend: auto, userns, landlock.
    #[arg(long, global = true, value_name = "BACKEND")]
    pub backend: Option<Backend>,
    /// Add a policy file as a user-level layer (it can narrow, never widen past the admin).
    #[arg(long, global = true, value_name = "FILE")]
    pub policy: Vec<PathBuf>,
    /// Print the plan and run nothing.
    #[arg(long = "dry-run", global = true)]
    pub dry_run: bool,
    /// Memory limit of the session: 512M, 4G (limits.mem).
    #[arg(long, global = true, value_name = "SIZE")]
    pub mem: Option<String>,
    /// CPUs the session runs on (limits.cpus).
    #[arg(long, global = true, value_name = "N")]
    pub cpus: Option<u32>,
    /// Processes and threads at once (limits.pids).
    #[arg(long, global = true, value_name = "N")]
    pub pids: Option<u64>,
    /// Wall-clock limit of the session: 90s, 30m, 8h (limits.timeout); exit status 124.
    #[arg(long, global = true, value_name = "TIME")]
    pub timeout: Option<String>,
    /// Write one JSON line to this descriptor when the jail starts and one when it ends
    /// (for orchestrators; the jailed command does not get the descriptor).
    #[arg(long = "json-status", global = true, value_name = "FD")]
    pub json_status: Option<i32>,
    /// Print the plan as JSON (with --dry-run).
    #[arg(long, global = true, hide = true)]
    pub json: bool,
    /// No startup line (warnings about safety are still printed).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// More diagnostics on stderr (-vv for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// `~/x`, or the absolute path the shell made of it: `x`, a home entry.
fn in_home<'a>(p: &'a str, home: &std::path::Path) -> Option<&'a str> {
    p.strip_prefix("~/").or_else(|| std::path::Path::new(p).strip_prefix(home).ok()?.to_str().filter(|r| !r.is_empty()))
}

/// The command-line flags as a policy layer. `home`: the user's, so that `--rw ~/data`, which
/// the shell hands over as `/home/u/data`, is the home entry it was typed as.
pub fn cli_layer(o: &RunOpts, home: &std::path::Path) -> Result<Layer, String> {
    let mut layer = Layer::default();
    let (mut home_ro, mut fs_ro, mut home_rw, mut fs_rw) = (vec![], vec![], vec![], vec![]);
    for p in &o.ro {
        match in_home(p, home) {
            Some(rel) => home_ro.push(rel.to_string()),
            None => fs_ro.push(p.clone()),
        }
    }
    for p in &o.rw {
        match in_home(p, home) {
            Some(rel) => home_rw.push(rel.to_string()),
            None => fs_rw.push(p.clone()),
        }
    }
    let some = |v: Vec<String>| (!v.is_empty()).then_some(v);
    layer.filesystem = Some(FsSection {
        read: some(fs_ro),
        write: some(fs_rw),
        hide: some(o.hide.clone()),
        devices: some(o.device.clone()),
        ..Default::default()
    });
    layer.home =
        Some(HomeSection { access: o.home_access, read: some(home_ro), write: some(home_rw), ..Default::default() });
    layer.net = Some(NetSection {
        mode: o.net,
        host_ports: (!o.host_port.is_empty()).then(|| o.host_port.clone()),
        publish: (!o.publish.is_empty()).then(|| o.publish.clone()),
        job_ports: (!o.job_port.is_empty()).then(|| o.job_port.clone()),
        ..Default::default()
    });
    layer.sandbox = Some(SandboxSection { backend: o.backend, ..Default::default() });
    if o.mem.is_some() || o.cpus.is_some() || o.pids.is_some() || o.timeout.is_some() {
        layer.limits =
            Some(LimitsSection { mem: o.mem.clone(), cpus: o.cpus, pids: o.pids, timeout: o.timeout.clone() });
    }
    let mut keep = vec![];
    let mut set = BTreeMap::new();
    for e in &o.env {
        match e.split_once('=') {
            Some((k, v)) => {
                set.insert(k.to_string(), v.to_string());
            }
            None => keep.push(e.clone()),
        }
    }
    if keep.iter().any(|k| k.is_empty()) || set.keys().any(|k| k.is_empty()) {
        return Err("--env needs NAME or NAME=VALUE".into());
    }
    layer.env = Some(EnvSection { keep: some(keep), set: (!set.is_empty()).then_some(set), ..Default::default() });
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_paths_given_to_ro_and_rw_are_home_entries_however_they_are_spelled() {
        let o = RunOpts {
            ro: vec!["~/ref".into(), "/home/u/data".into(), "/sw/apps".into()],
            rw: vec!["/home/u/out".into(), "~/scratch".into(), "/scratch/u".into(), "/home/u".into()],
            ..Default::default()
        };
        let l = cli_layer(&o, std::path::Path::new("/home/u")).expect("layer");
        let (fs, home) = (l.filesystem.expect("fs"), l.home.expect("home"));
        assert_eq!(home.read.unwrap_or_default(), ["ref", "data"]);
        assert_eq!(fs.read.unwrap_or_default(), ["/sw/apps"]);
        assert_eq!(home.write.unwrap_or_default(), ["out", "scratch"]);
        // The home itself is no entry of itself: left for the policy to refuse with its reason.
        assert_eq!(fs.write.unwrap_or_default(), ["/scratch/u", "/home/u"]);
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_scoped(std::iter::once("agent-sandbox").chain(args.iter().copied()).map(OsString::from))
    }

    #[test]
    fn commands_that_start_no_session_neither_list_nor_take_the_sessions_options() {
        for path in NO_SESSION {
            let help = parse(&[path, &["--help"][..]].concat()).expect_err("help").to_string();
            for session_only in ["--mem", "--net", "--publish", "--project", "--backend", "--env"] {
                assert!(!help.contains(session_only), "{path:?} --help lists {session_only}:\n{help}");
            }
            assert!(help.contains("--quiet"), "{path:?}: {help}");
        }
        for args in [
            &["allow", "--mem", "4G", "host", "x"][..],
            &["doctor", "--json", "--net", "open"],
            &["log", "--backend=landlock"],
        ] {
            let e = parse(args).expect_err("refused").to_string();
            assert!(e.contains("is an option of a session"), "{args:?}: {e}");
        }
        // An alias's defaults before the command's name are ignored there.
        assert!(matches!(parse(&["--ro", "/ref", "doctor"]).map(|c| c.command), Ok(Some(Command::Doctor { .. }))));
        assert!(matches!(
            parse(&["--net", "open", "allow", "host", "x"]).map(|c| c.command),
            Ok(Some(Command::Allow { .. }))
        ));
        // Their own options and the session's, where a session starts, still parse.
        assert!(matches!(
            parse(&["doctor", "--json"]).map(|c| c.command),
            Ok(Some(Command::Doctor { json: true, attack: false }))
        ));
        assert!(matches!(
            parse(&["log", "--json", "--tail", "3"]).map(|c| c.command),
            Ok(Some(Command::Log { json: true, .. }))
        ));
        let c = parse(&["--mem", "4G", "run", "--net", "open", "--", "true"]).expect("run");
        assert_eq!((c.opts.mem.as_deref(), c.opts.net), (Some("4G"), Some(NetMode::Open)));
        let c = parse(&["policy", "--net", "isolated", "show"]).expect("policy show");
        assert_eq!(c.opts.net, Some(NetMode::Isolated));
    }

    #[test]
    fn policy_check_neither_lists_nor_takes_the_sessions_options_and_policy_show_does() {
        let help = parse(&["policy", "check", "--help"]).expect_err("help").to_string();
        for session_only in ["--mem", "--net", "--publish", "--project", "--profile", "--ro", "--dry-run"] {
            assert!(!help.contains(session_only), "policy check --help lists {session_only}:\n{help}");
        }
        assert!(help.contains("--kind") && help.contains("--quiet"), "{help}");
        for args in [
            &["policy", "check", "p.toml", "--mem", "4G"][..],
            &["policy", "check", "--net=open", "p.toml"],
            &["policy", "--publish", "8888", "check", "p.toml"],
        ] {
            let e = parse(args).expect_err("refused").to_string();
            assert!(e.contains("is an option of a session") && e.contains("`policy check`"), "{args:?}: {e}");
        }
        let check = |c: Result<Cli, clap::Error>| {
            matches!(
                c.map(|c| c.command),
                Ok(Some(Command::Policy { action: PolicyAction::Check { admin: true, .. } }))
            )
        };
        assert!(check(parse(&["policy", "check", "p.toml", "--admin", "-q"])));
        // An alias's defaults before `policy` are ignored there.
        assert!(check(parse(&["--mem", "4G", "policy", "check", "--admin", "p.toml"])));
        // `policy show` shows the policy the session's options make: it lists and takes them.
        let help = parse(&["policy", "show", "--help"]).expect_err("help").to_string();
        assert!(help.contains("--mem") && help.contains("--net"), "{help}");
        let c = parse(&["policy", "show", "--mem", "4G", "--profile", "codex"]).expect("policy show");
        assert_eq!((c.opts.mem.as_deref(), c.opts.profile.as_deref()), (Some("4G"), Some("codex")));
    }
}
