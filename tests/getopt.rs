//! Every option of every Slurm command read as its getopt_long reads it, against the real
//! commands of both test clusters (tests/cluster: Debian 12's Slurm 22.05, and Debian 13's
//! 24.11 through `in-2411.sh`), each with its release's table:
//! - the chaperon's getopt sets (`chaperon::slurm_22_05`, `slurm_24_11`) are the installed binaries' own, as a
//!   shim in front of glibc's getopt_long sees them handed over (names, order, arity, return
//!   values; the belt's option where the cluster has the SPANK plugin);
//! - every ambiguous prefix of every command, the shortest prefix of every long option, the
//!   empty name, an unknown option and a stray short one, each called through the stub in the
//!   jail, give what the real command called directly gives: its stdout, stderr and exit status,
//!   word for word. A prefix of an option the chaperon refuses is refused with the reason
//!   instead, naming the option the real command names.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use chaperon::commands::{Handling, COMMANDS};
use chaperon::getopt::{Arity, LongOpt, Match, Returns, BELT};
use chaperon::release::{with, Release, R22_05, R24_11};
use chaperon::table::{Class, Table};
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A shim in front of glibc's getopt_long: the first call writes the optstring and the
/// long_options array it was handed to $GETOPT_DUMP, and the process exits.
const SHIM: &str = r#"
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
int getopt_long(int argc, char *const argv[], const char *optstring, const struct option *lo, int *li) {
    FILE *f = fopen(getenv("GETOPT_DUMP"), "w");
    if (!f) exit(3);
    fprintf(f, "OPTSTRING\t%s\n", optstring);
    for (const struct option *p = lo; p && p->name; p++)
        fprintf(f, "LONG\t%s\t%d\t%d\t%d\n", p->name, p->has_arg, p->flag != NULL, p->val);
    fclose(f);
    exit(0);
}
"#;

/// Every command the chaperon handles, with its table and the plugin options Slurm adds to it
/// on this cluster.
fn handled(belt: bool) -> Vec<(&'static str, &'static Table, &'static [LongOpt])> {
    static BELT_ONLY: &[LongOpt] = &[BELT];
    COMMANDS
        .iter()
        .filter_map(|c| match c.handling {
            Handling::Handled { options, .. } => {
                let plugins: &'static [LongOpt] = if belt && options.getopt.plugins { BELT_ONLY } else { &[] };
                Some((c.name, options, plugins))
            }
            Handling::Refused(_) => None,
        })
        .collect()
}

/// A test cluster: the release of its commands, and where they run.
#[derive(Clone, Copy, PartialEq)]
enum Cluster {
    /// Debian 12's 22.05, on this host.
    Tc,
    /// Debian 13's 24.11, on the login side of its root (`tests/cluster/in-2411.sh`).
    Tc2411,
}

impl Cluster {
    fn release(self) -> Release {
        match self {
            Cluster::Tc => R22_05,
            Cluster::Tc2411 => R24_11,
        }
    }

    /// A jail on this cluster's login side, or None where the tests skip Slurm. Its name
    /// says the release: two clusters' tests running at once have projects of their own.
    fn jail(self, name: &str) -> Option<Jail> {
        match self {
            Cluster::Tc => slurm_jail(name),
            Cluster::Tc2411 => {
                let j = Jail::new(&format!("{name}-2411"))?;
                let out = Command::new(in_2411()).args(["--", "sinfo", "-h", "-o", "%T"]).output();
                assert!(
                    out.as_ref().is_ok_and(|o| o.status.success() && !o.stdout.is_empty()),
                    "the Slurm 24.11 test cluster is not running: tests/cluster/start.sh 24.11 --user {USER} \
                     --spank $PWD/target/debug/agent-sandbox ({out:?})"
                );
                Some(j)
            }
        }
    }

    /// `program` run directly (no jail) as the test user on this cluster's login side.
    fn direct(self, j: &Jail, program: &str) -> Command {
        match self {
            Cluster::Tc => j.as_user(program),
            Cluster::Tc2411 => {
                let mut c = Command::new(in_2411());
                c.args(["-u", USER, "--", program]).current_dir(&j.project).env_clear().env("PATH", "/usr/bin:/bin");
                c
            }
        }
    }

    /// The launcher with `args`, as the test user on this cluster's login side.
    fn launcher(self, j: &Jail, args: &[&str]) -> Command {
        match self {
            Cluster::Tc => j.command(args),
            Cluster::Tc2411 => j.command_wrapped(&[&in_2411(), "--"], args),
        }
    }

    /// Whether this cluster's Slurm has the belt (slurm-plugins/ in plugstack.conf).
    fn has_the_belt(self, j: &Jail) -> bool {
        let out = self.direct(j, "sbatch").arg("--help").output().expect("sbatch --help");
        chaperon::session::spank_option_listed(&String::from_utf8_lossy(&out.stdout))
    }
}

fn in_2411() -> String {
    format!("{}/tests/cluster/in-2411.sh", env!("CARGO_MANIFEST_DIR"))
}

fn arity_of(has_arg: u32) -> Arity {
    match has_arg {
        0 => Arity::Flag,
        1 => Arity::Value,
        _ => Arity::OptionalValue,
    }
}

/// For each entry, the index of the first entry glibc takes for the same option (same arity
/// and return value): aliases share it.
fn same_as<T: PartialEq>(ids: &[T]) -> Vec<usize> {
    ids.iter().map(|id| ids.iter().position(|o| o == id).unwrap_or(usize::MAX)).collect()
}

#[test]
fn the_tables_are_the_installed_commands_getopt_sets() {
    tables_are_the_installed_getopt_sets(Cluster::Tc);
}

#[test]
fn on_24_11_the_tables_are_the_installed_commands_getopt_sets() {
    tables_are_the_installed_getopt_sets(Cluster::Tc2411);
}

fn tables_are_the_installed_getopt_sets(cluster: Cluster) {
    let Some(j) = cluster.jail("getopt-dump") else { return };
    let shim = j.rig.helpers.join("getopt-dump.so");
    let src = Path::new(env!("CARGO_TARGET_TMPDIR")).join("getopt-dump.c");
    std::fs::write(&src, SHIM).unwrap();
    let st = Command::new("cc").args(["-shared", "-fPIC", "-O1", "-o"]).arg(&shim).arg(&src).status().unwrap();
    assert!(st.success(), "cc the getopt shim");
    let belt = cluster.has_the_belt(&j);
    let mut mismatches = vec![];
    let mut compared = 0;
    for (name, table, plugins) in handled(belt) {
        let set = table.set_of(cluster.release());
        let dump = j.project.join(format!("{name}.getopt"));
        // The shim is preloaded into the command alone (`env`), not into in-2411.sh's helpers.
        let mut c = cluster.direct(&j, "env");
        c.arg(format!("GETOPT_DUMP={}", dump.display()))
            .arg(format!("LD_PRELOAD={}", shim.display()))
            .args([format!("/usr/bin/{name}"), "--version".into()]);
        let out = j.output_within(&mut c, Duration::from_secs(30));
        assert_eq!(out.code, 0, "{name} with the shim: {out}");
        let text = std::fs::read_to_string(&dump).unwrap_or_else(|e| panic!("{}: {e}", dump.display()));
        let mut lines = text.lines();
        let optstring = lines.next().and_then(|l| l.strip_prefix("OPTSTRING\t")).unwrap_or_default();
        if optstring != set.optstring {
            mismatches.push(format!("{name}: optstring {optstring:?}, the table has {:?}", set.optstring));
        }
        // (name, arity, flag set, val) as the binary has them.
        let real: Vec<(String, Arity, bool, i64)> = lines
            .filter_map(|l| {
                let f: Vec<&str> = l.strip_prefix("LONG\t")?.split('\t').collect();
                Some((f[0].to_string(), arity_of(f[1].parse().ok()?), f[2] == "1", f[3].parse().ok()?))
            })
            .collect();
        let ours: Vec<&LongOpt> = set.longs.iter().chain(plugins).collect();
        let names = |v: Vec<String>| v.join(" ");
        if real.iter().map(|r| r.0.clone()).collect::<Vec<_>>()
            != ours.iter().map(|l| l.name.to_string()).collect::<Vec<_>>()
        {
            mismatches.push(format!(
                "{name}: long options\n  real:  {}\n  table: {}",
                names(real.iter().map(|r| r.0.clone()).collect()),
                names(ours.iter().map(|l| l.name.to_string()).collect())
            ));
            continue;
        }
        for (r, l) in real.iter().zip(&ours) {
            compared += 1;
            let returns_ok = match l.returns {
                Returns::Char(c) => !r.2 && r.3 == i64::from(u32::from(c)),
                Returns::Code(_) => !r.2 && r.3 > 255,
                Returns::Sets(v) => r.2 && r.3 == i64::from(v),
            };
            if r.1 != l.arity || !returns_ok {
                mismatches.push(format!("{name} --{}: real {:?} flag={} val={}, table {l:?}", r.0, r.1, r.2, r.3));
            }
        }
        // Which entries are one option to glibc (aliases) must be the same on both sides.
        let real_ids = same_as(&real.iter().map(|r| (r.1, r.2, r.3)).collect::<Vec<_>>());
        let our_ids = same_as(&ours.iter().map(|l| (l.arity, l.returns)).collect::<Vec<_>>());
        if real_ids != our_ids {
            mismatches.push(format!("{name}: aliases differ: real {real_ids:?}, table {our_ids:?}"));
        }
    }
    assert!(mismatches.is_empty(), "the tables are not the installed Slurm's:\n{}", mismatches.join("\n"));
    assert!(compared > 550, "{compared} long options compared");
    eprintln!(
        "{}: {compared} long options of {} commands compared (belt: {belt})",
        cluster.release(),
        handled(belt).len()
    );
}

/// One call made twice: through the stub in the jail, and to the real command directly.
struct Case {
    command: &'static str,
    args: Vec<String>,
    /// The option a unique prefix names, when the chaperon refuses it (with the reason): the
    /// answers then differ by design, and both must name it.
    refused: Option<(&'static str, Arity, String)>,
}

impl Case {
    fn line(&self) -> String {
        std::iter::once(self.command.to_string()).chain(self.args.iter().cloned()).collect::<Vec<_>>().join(" ")
    }
}

/// The calls compared for one command: every ambiguous prefix; for every long option the
/// shortest prefix naming it, written so that getopt_long stops at it (a flag given a value,
/// a value option last without one, an optional one followed by a stray `-@`); the empty
/// name; an unknown option; a stray short option after a flag.
fn cases(command: &'static str, table: &'static Table, plugins: &'static [LongOpt]) -> (Vec<Case>, usize, usize) {
    let longs: Vec<&LongOpt> = table.longs_of(chaperon::release::in_effect()).chain(plugins).collect();
    let mut names: Vec<&str> = longs.iter().flat_map(|l| (1..=l.name.len()).map(|n| &l.name[..n])).collect();
    names.sort_unstable();
    names.dedup();
    let (mut out, mut ambiguous, mut unique) = (vec![], 0, 0);
    let mut reached: Vec<&str> = vec![];
    // Shortest names first, so each option is probed by the shortest prefix that names it.
    names.sort_by_key(|n| n.len());
    for name in names {
        let case = |args: Vec<String>, refused| Case { command, args, refused };
        match table.resolve(plugins, name) {
            Match::Ambiguous(_) => {
                ambiguous += 1;
                out.push(case(vec![format!("--{name}")], None));
            }
            Match::Exact(l) | Match::Prefix(l) if !reached.contains(&l.name.as_str()) => {
                reached.push(l.name.as_str());
                unique += 1;
                let spec = table.spec(l.name.as_str()).unwrap_or_else(|| panic!("{command} --{}", l.name.as_str()));
                let refused = match table.class_of(spec) {
                    Class::Denied(reason) => {
                        let shown = match name == l.name.as_str() {
                            true => format!("--{name}"),
                            false => format!("--{name} (--{})", l.name.as_str()),
                        };
                        Some((
                            l.name.as_str(),
                            l.arity,
                            format!("{command}: error: option {shown} is not allowed in agent-sandbox: {reason}\n"),
                        ))
                    }
                    _ => None,
                };
                let args = match l.arity {
                    Arity::Flag => vec![format!("--{name}=x")],
                    Arity::Value => vec![format!("--{name}")],
                    Arity::OptionalValue => vec![format!("--{name}"), "-@".into()],
                };
                out.push(case(args, refused));
            }
            _ => {}
        }
    }
    out.push(Case { command, args: vec!["--=x".into()], refused: None });
    out.push(Case { command, args: vec!["--zz-no-such-option=1".into()], refused: None });
    // A flag that does nothing at once (help, usage and version print and exit).
    let quiet = |s: &&chaperon::table::OptSpec| !["help", "usage", "version", "helpformat"].contains(&s.long);
    let flag = table
        .specs()
        .filter(quiet)
        .filter(|s| s.short.is_some_and(|c| table.short(c).is_some()))
        .find(|s| s.class == Class::Allowed && s.arity == Arity::Flag && s.short.is_some());
    let flag = flag.and_then(|s| s.short).unwrap_or('v');
    out.push(Case { command, args: vec![format!("-{flag}{flag}@")], refused: None });
    (out, ambiguous, unique)
}

/// What a call gave: exit status, stdout, stderr.
fn answer(dir: &Path, n: usize) -> (String, String, String) {
    let read = |ext: &str| std::fs::read_to_string(dir.join(format!("{n}.{ext}"))).unwrap_or_else(|e| format!("<{e}>"));
    (read("rc").trim().to_string(), read("out"), read("err"))
}

/// Runs every line of `cases` as a command line (no quoting: the arguments have no spaces),
/// stdin from /dev/null, each answer in OUT/N.{rc,out,err}.
const RUN: &str = r#"n=0
mkdir -p "$2"
set -f
while IFS= read -r line; do
  n=$((n+1))
  $line </dev/null >"$2/$n.out" 2>"$2/$n.err"
  echo $? >"$2/$n.rc"
done <"$1"
"#;

#[test]
fn every_prefix_is_read_as_the_real_command_reads_it() {
    every_prefix_is_read_as_the_real_one(Cluster::Tc);
}

#[test]
fn on_24_11_every_prefix_is_read_as_the_real_command_reads_it() {
    every_prefix_is_read_as_the_real_one(Cluster::Tc2411);
}

fn every_prefix_is_read_as_the_real_one(cluster: Cluster) {
    let Some(j) = cluster.jail("getopt-prefixes") else { return };
    let belt = cluster.has_the_belt(&j);
    let mut all = vec![];
    let (mut ambiguous, mut unique) = (0, 0);
    for (name, table, plugins) in handled(belt) {
        let (c, a, u) = with(cluster.release(), || cases(name, table, plugins));
        all.extend(c);
        (ambiguous, unique) = (ambiguous + a, unique + u);
    }
    let lines: Vec<String> = all.iter().map(Case::line).collect();
    let j = j.project_file("cases", &(lines.join("\n") + "\n")).project_file("run.sh", RUN);
    let (jail, real): (PathBuf, PathBuf) = (j.project.join("jail"), j.project.join("real"));

    let out = j.output_within(
        &mut cluster.launcher(&j, &["-q", "run", "--", "sh", "run.sh", "cases", "jail"]),
        Duration::from_secs(900),
    );
    assert_eq!(out.code, 0, "the calls through the stubs: {out}");
    let mut direct = cluster.direct(&j, "sh");
    direct.args(["run.sh", "cases", "real"]);
    let out = j.output_within(&mut direct, Duration::from_secs(900));
    assert_eq!(out.code, 0, "the real commands: {out}");

    let mut differ = vec![];
    let (mut same, mut refused) = (0, 0);
    for (i, case) in all.iter().enumerate() {
        let (stub, direct) = (answer(&jail, i + 1), answer(&real, i + 1));
        match &case.refused {
            None if stub == direct => same += 1,
            None => differ.push(format!("{}\n  real: {direct:?}\n  stub: {stub:?}", case.line())),
            Some((long, arity, why)) => {
                // The real command names the option (its value error), or took it and stopped
                // at the stray `-@` after an optional one.
                let named = match arity {
                    Arity::OptionalValue => direct.2.starts_with(&format!("{}: invalid option -- '@'", case.command)),
                    _ => direct.2.lines().next().is_some_and(|l| l.contains(&format!("'--{long}'"))),
                };
                if named && stub == ("1".to_string(), String::new(), why.clone()) {
                    refused += 1;
                } else {
                    differ.push(format!(
                        "{} (refused)\n  real: {direct:?}\n  stub: {stub:?}\n  want: {why:?}",
                        case.line()
                    ));
                }
            }
        }
    }
    eprintln!(
        "{}: {} calls compared: {ambiguous} ambiguous prefixes, {unique} options by their shortest prefix, 3 more per \
         command; {same} answered word for word as the real command, {refused} refused naming its option (belt: {belt})",
        cluster.release(),
        all.len()
    );
    assert!(
        differ.is_empty(),
        "{} of {} calls differ from the real commands:\n{}",
        differ.len(),
        all.len(),
        differ.join("\n")
    );
    assert!(ambiguous > 400 && unique > 550 && same > 900, "{ambiguous} {unique} {same}");
}

#[test]
fn a_workflow_tools_sacct_job_prefix_finds_its_job() {
    // `sacct ... --job ID` (a workflow tool's poll): sacct reads --job as --jobs, and so the
    // chaperon does; before, it was refused as an unknown option. squeue's --job likewise.
    let Some(j) = slurm_jail("getopt-sacct-job") else { return };
    let out = j.run(
        "id=$(sbatch --parsable --hold --wrap true) || exit 1; echo id=$id; \
         for i in $(seq 100); do sacct -X --parsable2 --noheader --job $id --format=JobIdRaw,State | grep \"^$id|\" && break; sleep 0.2; done; \
         squeue --job $id -h -o 'squeue=%i'; sacct --j $id; echo amb=$?; scancel $id",
    );
    let id =
        out.stdout.lines().find_map(|l| l.strip_prefix("id=")).unwrap_or_else(|| panic!("{out}")).trim().to_string();
    assert!(out.stdout.contains(&format!("{id}|PENDING")), "sacct --job: {out}");
    assert!(out.stdout.contains(&format!("squeue={id}")), "squeue --job: {out}");
    assert!(out.stderr.contains("sacct: option '--j' is ambiguous; possibilities: '--jobs' '--json'\n"), "{out}");
    assert!(out.stdout.contains("amb=1"), "{out}");
}

#[test]
fn export_values_stay_out_of_the_audit_log_whatever_the_prefix() {
    // srun's --exp and --expo are --export; sbatch's --exp is ambiguous (--export-file), refused
    // but logged. None of the values reaches the audit log, nor do the refusals quote them.
    let Some(j) = slurm_jail("getopt-audit") else { return };
    let mark = format!("getopt-audit-{}", std::process::id());
    let out = j.run(&format!(
        "srun -J {mark} --exp=ALL,TOKEN=sekrit-one --prolog=x true; echo a=$?; \
         srun -J {mark} --expo ALL,TOKEN=sekrit-two --prolog=x true; echo b=$?; \
         sbatch -J {mark} --exp=ALL,TOKEN=sekrit-three --wrap true; echo c=$?"
    ));
    assert!(out.stdout.contains("a=1\nb=1\nc=255\n"), "all refused: {out}");
    assert!(out.stderr.contains("sbatch: option '--exp=ALL,TOKEN=sekrit-three' is ambiguous"), "{out}");
    let log = std::fs::read_to_string(j.rig.home.join(".local/state/agent-sandbox/audit.jsonl")).unwrap_or_default();
    let ours: Vec<&str> = log.lines().filter(|l| l.contains(&mark)).collect();
    assert_eq!(ours.len(), 3, "one record a call: {ours:?}");
    assert!(ours.iter().all(|l| !l.contains("sekrit")), "{ours:?}");
    assert!(ours[0].contains(r#""--exp=…""#) && ours[1].contains(r#""--expo","…""#), "{ours:?}");
    assert!(ours[2].contains("option '--exp=…' is ambiguous"), "the reason hides it too: {ours:?}");
}

#[test]
fn mistyped_options_cost_no_slurm_query() {
    // Refused by the command's table before the governor: 40 of them leave the cap of real
    // queries (30 a minute, a burst of 10) untouched, and the next real query need not wait.
    let Some(j) = slurm_jail("getopt-governor") else { return };
    let out = j.run(
        "for i in $(seq 40); do sacct --j 1 2>/dev/null; squeue --s 2>/dev/null; done; \
         sacct -X -n --format=JobID >/dev/null; echo sacct=$?; squeue -h >/dev/null; echo squeue=$?",
    );
    assert!(out.stdout.contains("sacct=0\nsqueue=0\n"), "{out}");
    assert!(!out.stderr.contains("Slurm queries are limited"), "a refused call took a query's turn: {out}");
}

#[test]
fn on_22_05_the_options_later_releases_added_are_unknown_as_its_own_commands_have_them() {
    // The installed 22.05 is read with 22.05's table: what 23.02-24.11 added gets its getopt
    // error, word for word and with its status, as from the real command; `--extra` is a
    // prefix of 22.05's `--extra-node-info` there (refused, naming it).
    let Some(j) = slurm_jail("getopt-later") else { return };
    let lines = [
        "sbatch --tres-per-task=cpu:1 --wrap true",
        "sbatch --oom-kill-step --wrap true",
        "srun --segment=2 true",
        "squeue --only-job-state",
        "scontrol --json show job",
        "scancel -c 1",
    ];
    let j = j.project_file("cases", &(lines.join("\n") + "\n")).project_file("run.sh", RUN);
    let out = j
        .output_within(&mut j.command(&["-q", "run", "--", "sh", "run.sh", "cases", "jail"]), Duration::from_secs(120));
    assert_eq!(out.code, 0, "{out}");
    let out = j.output_within(j.as_user("sh").args(["run.sh", "cases", "real"]), Duration::from_secs(120));
    assert_eq!(out.code, 0, "{out}");
    for (i, line) in lines.iter().enumerate() {
        let (stub, real) = (answer(&j.project.join("jail"), i + 1), answer(&j.project.join("real"), i + 1));
        assert_eq!(stub, real, "{line}");
        assert!(real.0 != "0" && real.2.contains("option"), "{line}: the real 22.05 refuses it: {real:?}");
    }
    let out = j.run("sbatch --extra=x --wrap true; echo rc=$?");
    assert!(out.stderr.contains("option --extra (--extra-node-info) is not allowed in agent-sandbox"), "{out}");
}
