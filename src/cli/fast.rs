//! The common command lines, read without clap: `[OPTIONS] run [OPTIONS] [--] CMD [ARGS]`,
//! `[OPTIONS] PROFILE [ARGS]` and `[OPTIONS]`, where the options are the flags, the
//! options that take any text, and those with a typed value (`--net`, ports, counts) when the
//! value reads as clap reads it (the same `FromStr`). Everything else (help, version, errors,
//! the other subcommands, a value clap would refuse, a repeated option) is left to clap. Building clap's
//! parser took about 0.65 ms of every launch (each global option is copied into every
//! subcommand); the whole launch is 5% faster without it. `the_fast_path_agrees_with_clap`
//! checks both give the same result on every form this takes.

use super::{Cli, Command, RunOpts};
use std::ffi::OsString;

/// Subcommands clap knows: never taken for a profile's name here.
const SUBCOMMANDS: &[&str] = &["run", "doctor", "log", "allow", "chaperon", "exec", "policy", "help"];

/// `args`: the command line without the program's name. None: clap decides.
pub fn parse(args: &[OsString]) -> Option<Cli> {
    // The two lines this binary is started with by itself: the session's chaperon at its first
    // Slurm call, and a job's node side by the job's wrapper (the belt allows that line
    // alone), each on a path where clap's 0.65 ms counts.
    match args {
        [a] if a == "chaperon" => return Some(Cli { opts: RunOpts::default(), command: Some(Command::Chaperon) }),
        [a, b, dir] if a == "exec" && b == "--job" && !dir.is_empty() && !dir.to_str()?.starts_with('-') => {
            return Some(Cli { opts: RunOpts::default(), command: Some(Command::Exec { job: dir.into() }) });
        }
        _ => {}
    }
    let mut opts = RunOpts::default();
    let mut in_run = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let s = arg.to_str()?;
        if s == "--" {
            let rest = args.get(i + 1..).filter(|r| in_run && !r.is_empty())?;
            return Some(Cli { opts, command: Some(Command::Run { command: rest.to_vec() }) });
        }
        if !s.starts_with('-') || s == "-" {
            if in_run {
                return Some(Cli { opts, command: Some(Command::Run { command: args[i..].to_vec() }) });
            }
            if s == "run" {
                in_run = true;
                i += 1;
                continue;
            }
            if SUBCOMMANDS.contains(&s) || s == "-" {
                return None;
            }
            return Some(Cli { opts, command: Some(Command::Profile(args[i..].to_vec())) });
        }
        let (name, inline) = match s.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (s, None),
        };
        match (name, inline) {
            // A flag given twice is clap's error to give (the guard fails, and so does the match).
            ("-q" | "--quiet", None) if !opts.quiet => opts.quiet = true,
            ("-v" | "--verbose", None) => opts.verbose = opts.verbose.checked_add(1)?,
            ("--dry-run", None) if !opts.dry_run => opts.dry_run = true,
            (
                "--project" | "--profile" | "--mem" | "--timeout" | "--ro" | "--rw" | "--hide" | "--device" | "--env"
                | "--policy" | "--net" | "--home-access" | "--backend" | "--host-port" | "--publish" | "--job-port"
                | "--cpus" | "--pids",
                _,
            ) => {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        i += 1;
                        args.get(i)?.to_str()?
                    }
                };
                if value.is_empty() || value.starts_with('-') {
                    return None;
                }
                match name {
                    "--project" => once(&mut opts.project, value.into())?,
                    "--profile" => once(&mut opts.profile, value.into())?,
                    "--mem" => once(&mut opts.mem, value.into())?,
                    "--timeout" => once(&mut opts.timeout, value.into())?,
                    "--ro" => opts.ro.push(value.into()),
                    "--rw" => opts.rw.push(value.into()),
                    "--hide" => opts.hide.push(value.into()),
                    "--device" => opts.device.push(value.into()),
                    "--env" => opts.env.push(value.into()),
                    // Values clap would check: taken only when they read as clap reads them
                    // (the same `FromStr`), else clap gives its error.
                    "--net" => once(&mut opts.net, value.parse().ok()?)?,
                    "--home-access" => once(&mut opts.home_access, value.parse().ok()?)?,
                    "--backend" => once(&mut opts.backend, value.parse().ok()?)?,
                    "--host-port" => opts.host_port.push(value.parse().ok()?),
                    "--publish" => opts.publish.push(value.parse().ok()?),
                    "--job-port" => opts.job_port.push(value.parse().ok()?),
                    "--cpus" => once(&mut opts.cpus, value.parse().ok()?)?,
                    "--pids" => once(&mut opts.pids, value.parse().ok()?)?,
                    _ => opts.policy.push(value.into()),
                }
            }
            _ => return None,
        }
        i += 1;
    }
    // `run` without a command is clap's error to give.
    (!in_run).then_some(Cli { opts, command: None })
}

/// Sets an option clap takes once; None if it was given already (clap's error to give).
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(line: &[&str]) -> Vec<OsString> {
        line.iter().map(OsString::from).collect()
    }

    /// Every line this takes, clap reads the same; the common ones are taken.
    #[test]
    fn the_fast_path_agrees_with_clap() {
        let taken: &[&[&str]] = &[
            &[],
            &["-q"],
            &["-q", "run", "--", "true"],
            &["run", "--", "true"],
            &["run", "true"],
            &["run", "ls", "-la", "--project", "x", "--"],
            &["run", "sh", "-c", "echo hi"],
            &["run", "-q", "--", "sh", "-c", "x"],
            &["-v", "-v", "run", "--", "-x", "--", "y"],
            &["--verbose", "--dry-run", "run", "--", "true"],
            &["--project", "/p", "--ro", "/a", "--ro=/b", "--rw", "~/d", "run", "--", "a", "b"],
            &["--hide=/h", "--device", "/dev/nvidia0", "--env", "A=1", "--env=B", "run", "x"],
            &["--policy", "/tmp/p.toml", "--policy=/tmp/q.toml", "--mem", "4G", "--timeout=30m", "run", "x"],
            &["--profile", "codex", "run", "--", "true"],
            &["codex"],
            &["codex", "--model", "o3", "-q", "--", "run"],
            &["-q", "--project", "/p", "claude", "--resume"],
            &["my-agent", "run", "-v"],
            &["run", "-", "x"],
            &["-q", "run", "--project", "/p", "--", "env"],
            &["--net", "isolated", "-q", "run", "--", "true"],
            &["--net=proxied", "codex"],
            &["--home-access", "read", "--backend=landlock", "run", "x"],
            &["--host-port", "5432", "--publish=8888", "--publish", "8889", "--job-port", "+9000", "run", "x"],
            &["--cpus", "2", "--pids=512", "run", "x"],
            &["--net", "open", "run", "x"],
            &["--cpus=2", "run", "x"],
            &["--publish", "8888", "run", "x"],
            &["chaperon"],
            &["exec", "--job", "/home/u/.local/state/agent-sandbox/jobs/abc"],
        ];
        for line in taken {
            let fast = parse(&args(line)).unwrap_or_else(|| panic!("not taken: {line:?}"));
            let clap = Cli::try_parse_from(std::iter::once("agent-sandbox").chain(line.iter().copied()))
                .unwrap_or_else(|e| panic!("clap refuses {line:?}: {e}"));
            assert_eq!(format!("{fast:?}"), format!("{clap:?}"), "{line:?}");
        }
        let left_to_clap: &[&[&str]] = &[
            &["--help"],
            &["-h"],
            &["--version"],
            &["run"],
            &["run", "--"],
            &["-q", "-q", "run", "x"],
            &["-qv", "run", "x"],
            &["--quiet=1", "run", "x"],
            &["--project", "a", "--project", "b", "run", "x"],
            &["--project"],
            &["--project", "--ro", "run", "x"],
            &["--project=", "run", "x"],
            &["--net", "bogus", "run", "x"],
            &["--net", "Open", "run", "x"],
            &["--net", "open", "--net", "open", "run", "x"],
            &["--cpus=-2", "run", "x"],
            &["--cpus=two", "run", "x"],
            &["--publish", "70000", "run", "x"],
            &["--pids", "", "run", "x"],
            &["--json", "--dry-run", "run", "x"],
            &["run", "-x"],
            &["doctor"],
            &["log", "--tail", "3"],
            &["policy", "show"],
            &["help"],
            &["--", "x"],
            &["-"],
            &["--bogus", "run", "x"],
            &["chaperon", "x"],
            &["-q", "chaperon"],
            &["exec"],
            &["exec", "--job"],
            &["exec", "--job=/x"],
            &["exec", "--job", "-x"],
            &["exec", "--job", "/x", "y"],
        ];
        for line in left_to_clap {
            assert!(parse(&args(line)).is_none(), "taken: {line:?}");
        }
    }

    #[test]
    fn a_command_line_that_is_not_text_is_left_to_clap_unless_it_is_the_command() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![b'x', 0xff]);
        assert!(
            parse(&[OsString::from("--project"), bad.clone(), OsString::from("run"), OsString::from("x")]).is_none()
        );
        let line = vec![OsString::from("run"), OsString::from("--"), bad.clone()];
        let fast = parse(&line).expect("taken");
        let clap = Cli::try_parse_from(std::iter::once(OsString::from("agent-sandbox")).chain(line.iter().cloned()))
            .expect("clap takes it");
        assert_eq!(format!("{fast:?}"), format!("{clap:?}"));
    }
}
