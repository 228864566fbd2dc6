//! The Slurm commands: `COMMANDS`, the one table of every Slurm client command the jail sees
//! (handled here, by its module below, or refused outright with the reason the stub prints),
//! which the stubs, the dispatcher and docs/slurm.md all read; one module per handled command
//! (its option table, its parser, its handler); and `dispatch`, which hands a call to its
//! command's handler and turns the outcome into the answer and the audit record.

pub mod sacct;
pub mod sacctmgr;
pub mod salloc;
pub mod sattach;
pub mod sbatch;
pub mod scancel;
pub mod scontrol;
pub mod sdiag;
pub mod sinfo;
pub mod sprio;
pub mod squeue;
pub mod sreport;
pub mod srun;
pub mod sshare;
pub mod sstat;

use crate::call::{Call, Stdio};
use crate::getopt::LongOpt;
use crate::governor::{Answer, Source, Ticket};
use crate::refusal::Refusal;
use crate::session::{Audit, Config};
use crate::table::{audit_reason, parse_with, redacted, GrammarError, Table};
use crate::wire::{Request, Response};
use std::os::unix::net::UnixStream;

/// One Slurm client command as the jail sees it.
pub struct Command {
    pub name: &'static str,
    pub handling: Handling,
}

pub enum Handling {
    /// The chaperon carries it out, in the module of the same name under `commands/`.
    Handled {
        handle: Handler,
        /// Its options: the real command's getopt set and the chaperon's table. Every call is
        /// read with it first (`dispatch`), and its generated tests run over every command.
        options: &'static Table,
        lasts: Lasts,
        /// Which of its calls only read, so the governor may answer them from an identical call's.
        reads: Reads,
        /// What a sandboxed session gets, one line for docs/slurm.md.
        gives: &'static str,
    },
    /// The stub refuses it without asking the chaperon: each would give the jail a way around
    /// it. The reason is the one line the stub prints.
    Refused(&'static str),
}

/// A command's handler: carries out one call, with the caller's stdio.
pub type Handler = fn(&mut Call<'_>, Stdio) -> Result<i32, Refusal>;

/// How long a command's real call may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lasts {
    /// It answers and ends: it is killed after `bounded::QUERY_TIMEOUT`, so a call that never
    /// ends cannot hold a chaperon thread.
    Query,
    /// As long as its work (srun's tasks, `sbatch --wait`'s job): it ends with its caller.
    Work,
}

/// Which calls of a command only read what Slurm knows and change nothing: the governor
/// (`crate::governor`) may answer those from an identical call's answer; every other call
/// makes the answers it kept stale.
#[derive(Clone, Copy)]
pub enum Reads {
    /// Every call only reads, from there.
    Always(Source),
    Never,
    /// The calls whose arguments this accepts (it is given them without the program name).
    When(fn(&[String]) -> bool, Source),
}

impl Reads {
    /// Where the call's answer comes from, if it only reads.
    pub fn only(self, argv: &[String]) -> Option<Source> {
        match self {
            Reads::Always(from) => Some(from),
            Reads::Never => None,
            Reads::When(f, from) => f(argv).then_some(from),
        }
    }
}

const fn handled(
    name: &'static str,
    handle: Handler,
    options: &'static Table,
    lasts: Lasts,
    reads: Reads,
    gives: &'static str,
) -> Command {
    Command { name, handling: Handling::Handled { handle, options, lasts, reads, gives } }
}

const fn refused(name: &'static str, reason: &'static str) -> Command {
    Command { name, handling: Handling::Refused(reason) }
}

/// Every Slurm 22.05 client command (and `scrun`, which later versions add), in the order the
/// stubs are listed. A name not here is not a stub: the jail runs no such Slurm command.
pub const COMMANDS: &[Command] = &[
    handled(
        "sbatch",
        sbatch::handle,
        &sbatch::SBATCH,
        Lasts::Work,
        Reads::Never,
        "a script file (inside the project), a script on stdin (`sbatch < job.sh`), or `--wrap`; `#SBATCH` \
         directives are read exactly as Slurm 22.05 reads them and checked like command-line options; arrays \
         (`-a`), dependencies on your project's jobs, `--wait`, `--parsable`, `--test-only`, `--export` (applied \
         inside the jail)",
    ),
    handled(
        "srun",
        srun::handle,
        &srun::SRUN,
        Lasts::Work,
        Reads::Never,
        "outside a job: a new allocation; inside a batch job: a step of that job. Every task starts inside the \
         jail on its node; output streams live; Ctrl-C goes to srun (twice within a second cancels the step, as \
         usual); `--pty` gives an interactive shell in the jail",
    ),
    handled(
        "squeue",
        squeue::handle,
        &squeue::SQUEUE,
        Lasts::Query,
        Reads::Always(Source::Controller),
        "your project's jobs (`--json` and `--yaml` are filtered too: the chaperon narrows Slurm's JSON and \
         writes YAML from it itself)",
    ),
    handled(
        "scancel",
        scancel::handle,
        &scancel::SCANCEL,
        Lasts::Query,
        Reads::Never,
        "your project's jobs, by id or by filter (`--name`, `--state`...) within the ones slurmctld still \
         knows (an ended job is passed over, as a direct call does); a bare `scancel` fails like the real one",
    ),
    handled(
        "scontrol",
        scontrol::handle,
        &scontrol::SCONTROL,
        Lasts::Query,
        Reads::When(scontrol::reads_only, Source::Controller),
        "`show job/step` of your project's jobs (from 23.02 also `--json` and `--yaml`: the chaperon narrows \
         Slurm's JSON to your jobs and writes YAML from it itself); `listjobs` (24.05) of your project's jobs; \
         `show partition/node/config/...` as they are; `hold`, `release`, `requeue`, `update JobId=...` of your \
         project's jobs with safe keys only",
    ),
    handled(
        "sacct",
        sacct::handle,
        &sacct::SACCT,
        Lasts::Query,
        Reads::Always(Source::Accounting),
        "your project's jobs",
    ),
    handled(
        "sacctmgr",
        sacctmgr::handle,
        &sacctmgr::SACCTMGR,
        Lasts::Query,
        Reads::Always(Source::Accounting),
        "`show user/assoc/qos/tres/cluster/config`, users and associations for your own user",
    ),
    handled(
        "sinfo",
        sinfo::handle,
        &sinfo::SINFO,
        Lasts::Query,
        Reads::Always(Source::Controller),
        "as on the login node",
    ),
    handled(
        "sstat",
        sstat::handle,
        &sstat::SSTAT,
        Lasts::Query,
        Reads::Always(Source::Controller),
        "your project's jobs and steps",
    ),
    handled(
        "sprio",
        sprio::handle,
        &sprio::SPRIO,
        Lasts::Query,
        Reads::Always(Source::Controller),
        "your project's pending jobs (on 24.05 to 25.11, whose sprio takes a list of jobs for one bad job id, \
         one call for each pending job)",
    ),
    handled(
        "sshare",
        sshare::handle,
        &sshare::SSHARE,
        Lasts::Query,
        Reads::Always(Source::Accounting),
        "your own associations",
    ),
    handled(
        "sdiag",
        sdiag::handle,
        &sdiag::SDIAG,
        Lasts::Query,
        Reads::Always(Source::Controller),
        "as on the login node",
    ),
    handled(
        "sreport",
        sreport::handle,
        &sreport::SREPORT,
        Lasts::Query,
        Reads::Always(Source::Accounting),
        "`cluster Utilization` and `reservation Utilization` as they are; usage per user (`cluster \
         AccountUtilizationByUser`, `UserUtilizationByAccount`, `UserUtilizationByWckey`, \
         `WCKeyUtilizationByUser`, `user TopUsage`) for your own user; `job SizesBy...` over your project's \
         jobs; reports and conditions spelled in full",
    ),
    handled(
        "salloc",
        salloc::handle,
        &salloc::SALLOC,
        Lasts::Work,
        Reads::Never,
        "an allocation whose command (your shell by default) runs inside the jail, where `srun` joins it; \
         the allocation ends with the command",
    ),
    handled(
        "sattach",
        sattach::handle,
        &sattach::SATTACH,
        Lasts::Work,
        Reads::Never,
        "the I/O of a running step of this session's own jobs (its tasks run in the jail already)",
    ),
    refused("sbcast", "broadcasting files to nodes is not mediated; jobs read the project directly"),
    refused("scrontab", "cron jobs would run outside any session's scope; use sbatch --begin"),
    refused("scrun", "OCI containers are not mediated by agent-sandbox"),
    refused("strigger", "triggers run programs outside the jail"),
];

/// The stubs: every command's name, in the table's order.
pub const NAMES: [&str; COMMANDS.len()] = names();

const fn names() -> [&'static str; COMMANDS.len()] {
    let mut out = [""; COMMANDS.len()];
    let mut i = 0;
    while i < COMMANDS.len() {
        out[i] = COMMANDS[i].name;
        i += 1;
    }
    out
}

/// The command of this name, if the jail has it as a stub.
pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// Why the stub refuses each command outright (None: handled), in the table's order. Made at
/// compile time: a stub binary that reads it links none of the handlers.
pub const REFUSALS: [Option<&str>; COMMANDS.len()] = refusals();

const fn refusals() -> [Option<&'static str>; COMMANDS.len()] {
    let mut out = [None; COMMANDS.len()];
    let mut i = 0;
    while i < COMMANDS.len() {
        if let Handling::Refused(why) = COMMANDS[i].handling {
            out[i] = Some(why);
        }
        i += 1;
    }
    out
}

/// Why the stub refuses `name` outright, if it does.
pub fn refusal(name: &str) -> Option<&'static str> {
    NAMES.iter().position(|n| *n == name).and_then(|i| REFUSALS[i])
}

/// What handling one request produced: the response, and the audit record.
pub struct Handled {
    pub response: Response,
    pub audit: Audit,
}

/// Decides and carries out one request: its command's option table reads the arguments first
/// (a call it refuses is refused before anything else, so a mistyped option costs no Slurm
/// query, and getopt's errors are answered in the real command's words and status); then its
/// handler parses the whole call (a refusal names the option and why), checks the scope and
/// runs the real Slurm command with a clean environment and the caller's stdio. All of it
/// with the installed release in effect (`release::with`): each table is read with that
/// release's options.
pub fn dispatch(req: &Request, stdio: Stdio, cfg: &Config, conn: &UnixStream) -> Handled {
    crate::release::with(cfg.release(), || dispatch_in_release(req, stdio, cfg, conn))
}

fn dispatch_in_release(req: &Request, stdio: Stdio, cfg: &Config, conn: &UnixStream) -> Handled {
    let handling = find(&req.command).map(|c| &c.handling);
    // The commands Slurm adds plugin options to are the ones that submit (sbatch, srun,
    // salloc): where Slurm cannot say whether it takes the belt's tag, they are refused first
    // (asked once per call: an sbatch that does not answer costs one bound, not two).
    let belt_unknown = match handling {
        Some(Handling::Handled { options, .. }) if options.set().plugins => cfg.belt_state().err(),
        _ => None,
    };
    // The command's table, and the options of the site's plugins Slurm adds to this command
    // (where the chaperon knows them): what every spelling is read with.
    let options = match handling {
        Some(Handling::Handled { options, .. }) => {
            let known = options.set().plugins && belt_unknown.is_none();
            let plugins: &'static [LongOpt] = if known { cfg.plugin_options() } else { &[] };
            Some((*options, plugins))
        }
        _ => None,
    };
    let argv = match options {
        Some((table, plugins)) => redacted(table, plugins, &req.argv),
        None => req.argv.clone(),
    };
    let audit = Audit { command: req.command.clone(), argv, cwd: req.cwd.clone(), ..Default::default() };
    // Queries and updates end by themselves; a call that lasts as long as its work ends with
    // the stub's connection instead, like every call.
    let lasts = match handling {
        Some(Handling::Handled { lasts, .. }) => *lasts,
        _ => Lasts::Query,
    };
    let bound = (lasts == Lasts::Query).then_some(crate::bounded::QUERY_TIMEOUT);
    // Where getopt's error goes, as the real command prints it (a copy: the handler takes stdio).
    let stderr = stdio.stderr.try_clone().ok();
    let mut call = Call { req, cfg, conn, bound, audit };
    let read = options.map(|(table, plugins)| parse_with(table, plugins, &req.argv));
    let result = match (belt_unknown, handling, read) {
        (Some(refused), _, _) => Err(refused),
        // Refused by the table: before the governor and the handler, so it asks nothing of
        // Slurm and takes no query's turn.
        (None, _, Some(Err(refused))) => Err(refused.into()),
        (None, Some(Handling::Handled { handle, reads, .. }), _) => match reads.only(&req.argv) {
            Some(source) => governed(*handle, source, &mut call, stdio),
            None => {
                // A call that may change a job: what was kept before it is stale, and so is
                // what a call running meanwhile brings back.
                cfg.governor.note_change();
                let result = handle(&mut call, stdio);
                if result.is_ok() {
                    cfg.governor.note_changed();
                }
                result
            }
        },
        // The stub refuses these itself; a request for one (from elsewhere) is refused here too.
        (None, Some(Handling::Refused(reason)), _) => {
            Err(Refusal::CommandRefused { command: req.command.clone(), reason })
        }
        (None, None, _) => Err(Refusal::UnknownCommand(req.command.clone())),
    };
    let mut audit = call.audit;
    let response = match result {
        Ok(code) => {
            audit.decision = "allowed".into();
            Response::Exited { code }
        }
        Err(refusal) => {
            let reason = refusal.to_string();
            audit.decision = "denied".into();
            audit.reason = Some(match &refusal {
                Refusal::Grammar(GrammarError::Getopt(e)) => audit_reason(e),
                _ => reason.clone(),
            });
            match (&refusal, options, &stderr) {
                (Refusal::Grammar(GrammarError::Getopt(e)), Some((table, _)), Some(fd)) => {
                    answer_as_getopt(&req.command, table, e, fd).unwrap_or(Response::Denied { reason })
                }
                _ => Response::Denied { reason },
            }
        }
    };
    Handled { response, audit }
}

/// getopt's error as the real command answers it: glibc's message and what the command prints
/// after it, on the caller's stderr, and the command's status. None if stderr cannot take it
/// (the one-line refusal is then the answer).
fn answer_as_getopt(
    command: &str,
    table: &Table,
    e: &crate::getopt::GetoptError,
    stderr: &std::os::fd::OwnedFd,
) -> Option<Response> {
    use std::os::fd::AsFd;
    let reports = table.set().reports;
    let text = reports.render(command, e);
    crate::bounded::write_all(stderr.as_fd(), text.as_bytes(), crate::bounded::QUERY_TIMEOUT).ok()?;
    Some(Response::Exited { code: reports.status })
}

/// A read-only call through the governor: answered from an identical call's answer if one is
/// fresh (or running), else carried out with its output passed on and a copy kept. The key is
/// everything the answer depends on: the call as written, where it was made, the scope asked
/// for and the jobs in it now (a new job of the scope is a new key).
fn governed(handle: Handler, source: Source, call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let Ok(scope) = crate::checks::recorded_jobs_in_scope(req, cfg) else {
        // An unknown scope: the handler refuses it, and a refusal asks nothing of Slurm.
        return handle(call, stdio);
    };
    let key = call_key(req, &scope);
    let fill = match cfg.governor.query(key, source) {
        Ticket::Answered { answer, age, folded } => {
            use std::os::fd::AsFd;
            let timeout = crate::bounded::QUERY_TIMEOUT;
            crate::bounded::write_all(stdio.stdout.as_fd(), &answer.stdout, timeout)
                .and_then(|()| crate::bounded::write_all(stdio.stderr.as_fd(), &answer.stderr, timeout))
                .map_err(|e| Refusal::Failed(format!("writing the answer: {e}")))?;
            call.audit.reason = Some(match folded {
                true => "answered by an identical call running at the same time".into(),
                false => {
                    format!("answered from the same call {:.1} s earlier (slurm.query_interval)", age.as_secs_f64())
                }
            });
            return Ok(answer.code);
        }
        Ticket::Fill(fill) => fill,
        Ticket::Busy => {
            let s = cfg.governor.settings();
            return Err(Refusal::Failed(format!(
                "too many Slurm queries at once: this system allows {} a minute (slurm.queries_per_minute) and this \
                 one waited {} s for its turn; poll less often",
                s.queries_per_minute,
                crate::governor::MAX_WAIT.as_secs()
            )));
        }
    };
    if fill.waited >= std::time::Duration::from_millis(500) {
        use std::os::fd::AsFd;
        let line = format!(
            "agent-sandbox: Slurm queries are limited to {} a minute on this system (slurm.queries_per_minute); \
             this one waited {:.0} s. Poll less often: the answer of the same query is reused for {} s anyway.\n",
            cfg.governor.settings().queries_per_minute,
            fill.waited.as_secs_f64(),
            cfg.governor.settings().query_interval,
        );
        let _ = crate::bounded::write_all(stdio.stderr.as_fd(), line.as_bytes(), crate::bounded::QUERY_TIMEOUT);
    }
    let Stdio { stdin, stdout, stderr } = stdio;
    let (tee, stdout, stderr) = crate::governor::Tee::new(stdout, stderr, crate::bounded::QUERY_TIMEOUT)
        .map_err(|e| Refusal::Failed(format!("cannot pass the answer on: {e}")))?;
    let result = handle(call, Stdio { stdin, stdout, stderr });
    let copies = tee.finish();
    match (&result, copies) {
        (Ok(code), Some((stdout, stderr))) => fill.done(Some(Answer { code: *code, stdout, stderr })),
        _ => fill.done(None),
    }
    result
}

/// What makes two read-only calls the same: the call as written, where it was made, the
/// scope asked for and the jobs in it. A digest (SHA-256 over length-prefixed parts): the key
/// is kept for as long as the answer, and an argument may be large.
fn call_key(req: &Request, scope: &[u32]) -> String {
    let mut d = ring::digest::Context::new(&ring::digest::SHA256);
    let mut part = |bytes: &[u8]| {
        d.update(&(bytes.len() as u64).to_le_bytes());
        d.update(bytes);
    };
    part(req.command.as_bytes());
    part(&(req.argv.len() as u64).to_le_bytes());
    for a in &req.argv {
        part(a.as_bytes());
    }
    part(req.cwd.as_bytes());
    part(req.env.get("SLURM_SCOPE").map(String::as_bytes).unwrap_or(b"\0unset"));
    for id in scope {
        part(&id.to_le_bytes());
    }
    d.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The table as docs/slurm.md shows it, between `<!-- commands -->` and `<!-- /commands -->`.
pub fn docs_table() -> String {
    let mut out = String::from("| command | what you get |\n|---|---|\n");
    for c in COMMANDS {
        if let Handling::Handled { gives, .. } = c.handling {
            out.push_str(&format!("| `{}` | {gives} |\n", c.name));
        }
    }
    out.push_str("\nRefused outright, each with the reason the stub prints:\n\n| command | why |\n|---|---|\n");
    for c in COMMANDS {
        if let Handling::Refused(why) = c.handling {
            out.push_str(&format!("| `{}` | {why} |\n", c.name));
        }
    }
    out.push_str(&releases_table());
    out
}

/// The options the tables know per release: those a release after 22.05 added (from that
/// release on: `OptSpec::since`) and what the chaperon does with each, and those 24.11's
/// command no longer has. Generated from the tables, so it says what the code does.
fn releases_table() -> String {
    use crate::table::Class;
    let mut out = String::from(
        "\nOptions added after Slurm 22.05, each read where the installed release has it (the chaperon \
         learns the release from `sbatch --version`), and options 24.11 no longer has. Tested on real \
         releases: 22.05 and 24.11 (the two test clusters). A 23.02, 23.11 or 24.05 below is derived from the \
         Slurm sources' release tags, never run here: a 24.05 cluster is read with 24.11's options less \
         those tagged later.\n\n\
         | command | option | Slurm | agent-sandbox |\n|---|---|---|---|\n",
    );
    for c in COMMANDS {
        let Handling::Handled { options, .. } = c.handling else { continue };
        let mut added: Vec<_> = options.specs().filter(|s| s.since != crate::release::R22_05).collect();
        added.sort_by_key(|s| (s.since, s.long));
        for s in added {
            let short = s.short.map(|c| format!("`-{c}`, ")).unwrap_or_default();
            let what = match (options.class_of(s), s.rebuilt_why()) {
                (Class::Denied(why), _) => format!("refused: {why}"),
                (_, Some(why)) => format!("rebuilt: {why}"),
                (_, None) => "allowed".to_string(),
            };
            out.push_str(&format!("| `{}` | {short}`--{}` | {} | {what} |\n", c.name, s.long, s.since));
        }
        for l in options.getopt.longs.iter().filter(|l| options.getopt_24_11.longs.iter().all(|n| n.name != l.name)) {
            out.push_str(&format!(
                "| `{}` | `--{}` | gone by 24.11 | unknown there, as to 24.11's {} |\n",
                c.name, l.name, c.name
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_listed_once_with_a_one_line_reason_or_summary() {
        let mut seen = std::collections::HashSet::new();
        for c in COMMANDS {
            assert!(seen.insert(c.name), "{} twice", c.name);
            assert!(c.name.starts_with('s') && c.name.bytes().all(|b| b.is_ascii_lowercase()), "{}", c.name);
            let text = match c.handling {
                Handling::Handled { gives, .. } => gives,
                Handling::Refused(why) => why,
            };
            assert!(!text.trim().is_empty() && !text.chars().any(char::is_control), "{}: {text:?}", c.name);
        }
        assert_eq!(NAMES.len(), COMMANDS.len());
        assert!(NAMES.iter().zip(COMMANDS).all(|(n, c)| *n == c.name));
    }

    #[test]
    fn the_compile_time_refusals_are_the_tables() {
        for c in COMMANDS {
            let want = match c.handling {
                Handling::Refused(why) => Some(why),
                Handling::Handled { .. } => None,
            };
            assert_eq!(refusal(c.name), want, "{}", c.name);
        }
        assert_eq!(refusal("sh"), None);
    }

    #[test]
    fn every_handled_command_has_its_module_under_commands() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
        for c in COMMANDS.iter().filter(|c| matches!(c.handling, Handling::Handled { .. })) {
            assert!(dir.join(format!("{}.rs", c.name)).is_file(), "commands/{}.rs", c.name);
        }
        for f in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().trim_end_matches(".rs").to_string();
            let handled = find(&name).is_some_and(|c| matches!(c.handling, Handling::Handled { .. }));
            assert!(handled, "commands/{name}.rs is no handled command of the table");
        }
    }

    #[test]
    fn only_the_commands_that_run_work_outlast_the_query_bound() {
        let work: Vec<&str> = COMMANDS
            .iter()
            .filter(|c| matches!(c.handling, Handling::Handled { lasts: Lasts::Work, .. }))
            .map(|c| c.name)
            .collect();
        assert_eq!(work, ["sbatch", "srun", "salloc", "sattach"]);
    }

    /// The test the brief of issue 31 asks for, generated from every handled command's table:
    /// every prefix of every long option the real command has is read as its getopt_long reads
    /// it (`testkit::prefixes_are_read_as_getopt_long_reads_them`), without and, for the commands
    /// Slurm adds plugin options to, with the belt's. Each table must have prefixes of both
    /// kinds to read, or the generator tests nothing there.
    #[test]
    fn every_option_of_every_command_is_read_as_getopt_long_reads_it() {
        use crate::release::{with, R22_05, R23_11, R24_11};
        use crate::table::testkit::{entries_are_the_getopt_sets, prefixes_are_read_as_getopt_long_reads_them};
        static BELT: &[LongOpt] = &[crate::getopt::BELT];
        // 23.11 is read with 24.11's set less what 24.05 and 24.11 added.
        for release in [R22_05, R23_11, R24_11] {
            let mut counts = vec![];
            for c in COMMANDS {
                let Handling::Handled { options, .. } = c.handling else { continue };
                let plugins: &'static [LongOpt] = if options.getopt.plugins { BELT } else { &[] };
                entries_are_the_getopt_sets(options, plugins);
                let (unique, ambiguous) = with(release, || prefixes_are_read_as_getopt_long_reads_them(options, &[]));
                let longs = options.longs_of(release).count();
                assert!(unique > longs && ambiguous > 0, "{release} {}: {unique} {ambiguous}", c.name);
                if !plugins.is_empty() {
                    with(release, || prefixes_are_read_as_getopt_long_reads_them(options, plugins));
                }
                counts.push((c.name, unique, ambiguous));
            }
            assert_eq!(counts.len(), 15, "{counts:?}");
            eprintln!("{release}: prefixes read (unique, ambiguous): {counts:?}");
        }
    }

    /// What a release added is an option from that release on, and unknown before it, as the
    /// real getopt_long of each has it: `--extra` is its own option from 23.02, and a prefix of
    /// `--extra-node-info` (refused) in 22.05.
    #[test]
    fn each_release_reads_its_own_options() {
        use crate::release::{with, R22_05, R23_02, R23_11, R24_05, R24_11};
        use crate::table::{parse, Class};
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let read = |r, t: &'static Table, v: &[&str]| with(r, || parse(t, &a(v)));
        let unknown = |r, t, v: &[&str]| matches!(read(r, t, v), Err(GrammarError::Getopt(_)));
        let named = |r, t, v: &[&str]| read(r, t, v).map(|p| p.options.iter().map(|(s, _)| s.long).collect::<Vec<_>>());
        assert!(unknown(R22_05, &sbatch::SBATCH, &["--tres-per-task=gres/gpu:1"]));
        assert_eq!(named(R23_02, &sbatch::SBATCH, &["--tres-per-task=gres/gpu:1"]), Ok(vec!["tres-per-task"]));
        assert!(matches!(read(R22_05, &sbatch::SBATCH, &["--extra=x"]), Err(GrammarError::Denied { .. })));
        assert_eq!(named(R24_11, &sbatch::SBATCH, &["--extra=x"]), Ok(vec!["extra"]));
        assert!(unknown(R24_05, &sbatch::SBATCH, &["--oom-kill-step"]));
        assert_eq!(named(R24_11, &srun::SRUN, &["--oom-kill-step=1", "true"]), Ok(vec!["oom-kill-step"]));
        assert!(unknown(R23_11, &squeue::SQUEUE, &["--only-job-state"]));
        assert_eq!(named(R24_05, &squeue::SQUEUE, &["--only-job-state"]), Ok(vec!["only-job-state"]));
        // A short option a release added: scancel's -c (--cron, 23.11).
        assert!(unknown(R23_02, &scancel::SCANCEL, &["-c", "5"]));
        assert_eq!(named(R24_11, &scancel::SCANCEL, &["-c", "5"]), Ok(vec!["cron"]));
        // Removed in 24.11: unknown there, as the real command has it not.
        assert!(matches!(read(R22_05, &sbatch::SBATCH, &["--power=x"]), Err(GrammarError::Denied { .. })));
        assert!(unknown(R24_11, &sbatch::SBATCH, &["--power=x"]));
        // The data parser of --json (an optional value since 23.02) is refused with the reason.
        let e = read(R24_11, &squeue::SQUEUE, &["--json=v0.0.40"]);
        assert!(matches!(&e, Err(GrammarError::BadValue { opt, .. }) if opt == "--json"), "{e:?}");
        assert_eq!(named(R24_11, &squeue::SQUEUE, &["--json"]), Ok(vec!["json"]));
        assert!(matches!(sbatch::SBATCH.spec("stepmgr").map(|s| sbatch::SBATCH.class_of(s)), Some(Class::Denied(_))));
    }

    #[test]
    fn getopts_errors_are_answered_in_the_real_commands_words_and_status() {
        // Exactly the text sacct 22.05 prints, and its status (checked against the real
        // commands in tests/getopt.rs).
        let sacct = &sacct::SACCT.getopt.reports;
        let e = crate::table::parse(&sacct::SACCT, &["--j".to_string()]).unwrap_err();
        let GrammarError::Getopt(e) = e else { panic!("{e:?}") };
        assert_eq!(sacct.render("sacct", &e), "sacct: option '--j' is ambiguous; possibilities: '--jobs' '--json'\n");
        assert_eq!(sacct.status, 1);
        let sbatch = &sbatch::SBATCH.getopt.reports;
        assert_eq!(
            sbatch.render("sbatch", &crate::getopt::GetoptError::LongNeedsValue("mem")),
            "sbatch: option '--mem' requires an argument\nTry \"sbatch --help\" for more information\n"
        );
        assert_eq!(sbatch.status, 255);
    }

    /// Every command's answer for each option name its real command has (every long option of
    /// 22.05's and 24.11's sets, the belt's where Slurm adds plugin options, every short one):
    /// the whole entry its table resolves the name to, one line each, as frozen in
    /// chaperon/testdata/option_lookups.txt. A table reshaped (rows moved into a shared group of
    /// `job_options`) answers the same; a change meant to change an answer rewrites the file
    /// with `UPDATE_OPTION_LOOKUPS=1 cargo test -p chaperon --lib lookups_are_the_frozen`, and
    /// its diff is the review.
    #[test]
    fn lookups_are_the_frozen_ones() {
        use crate::table::OptSpec;
        use std::collections::BTreeSet;
        let row = |t: &crate::table::Table, s: Option<&OptSpec>| match s {
            None => "none".to_string(),
            Some(s) => format!(
                "{} {:?} {:?} {:?} {:?} rebuilt={:?} short_only={} since={}",
                s.long,
                s.short,
                s.arity,
                t.class_of(s),
                s.value,
                s.rebuilt,
                s.short_only,
                s.since
            ),
        };
        let mut now = String::new();
        for c in COMMANDS {
            let Handling::Handled { options: t, .. } = c.handling else { continue };
            let mut longs: BTreeSet<&str> =
                t.getopt.longs.iter().chain(t.getopt_24_11.longs).map(|l| l.name.as_str()).collect();
            if t.getopt.plugins {
                longs.insert(crate::getopt::BELT.name.as_str());
            }
            for l in longs {
                now.push_str(&format!("{} --{l}: {}\n", c.name, row(t, t.spec(l))));
            }
            let shorts: BTreeSet<char> = t.getopt.shorts().chain(t.getopt_24_11.shorts()).map(|(c, _)| c).collect();
            for s in shorts {
                now.push_str(&format!("{} -{s}: {}\n", c.name, row(t, t.short_spec(s))));
            }
        }
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/option_lookups.txt");
        if std::env::var_os("UPDATE_OPTION_LOOKUPS").is_some() {
            std::fs::write(path, &now).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        let frozen = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let differ: Vec<_> =
            frozen.lines().zip(now.lines()).filter(|(f, n)| f != n).map(|(f, n)| format!("was {f}\nnow {n}")).collect();
        assert!(
            differ.is_empty() && frozen.lines().count() == now.lines().count(),
            "a table answers differently from {path} ({} lines frozen, {} now):\n{}",
            frozen.lines().count(),
            now.lines().count(),
            differ.join("\n")
        );
    }

    /// A shared entry is written once: no command lists an entry of its own for an option a
    /// group it includes has (the copy would be the one `Table::spec` never finds, or the one
    /// it finds first), no two of its groups have the same option, and every group is
    /// included by more than one command, by address: a group copied into each table that
    /// reads it (a slice read out of a static is) would be there once per command.
    #[test]
    fn no_command_copies_an_entry_of_a_group_it_includes() {
        let mut users = std::collections::HashMap::new();
        for c in COMMANDS {
            let Handling::Handled { options: t, .. } = c.handling else { continue };
            for (i, group) in t.shared.iter().enumerate() {
                users.entry(group.as_ptr()).or_insert((group.first().map_or("?", |s| s.long), 0)).1 += 1;
                let others = t.own.iter().chain(t.shared[i + 1..].iter().flat_map(|g| g.iter()));
                for s in others {
                    let twin = group.iter().find(|g| g.long == s.long || (s.short.is_some() && g.short == s.short));
                    assert!(twin.is_none(), "{}: --{} is in a group it includes already: {twin:?}", c.name, s.long);
                }
            }
        }
        for (first, n) in users.into_values() {
            assert!(n > 1, "the group with --{first} first is included by one command: make it that command's own");
        }
    }

    /// What sbatch, srun and salloc have alike is kept once (`job_options`): no entry of one's
    /// own is the same (name, short form, arity, class and reason, value, since) as an entry
    /// of another's own. An entry alike in two goes to the group of the commands that have it.
    #[test]
    fn sbatch_srun_and_salloc_keep_no_twin_entries_of_their_own() {
        let tables = [("sbatch", &sbatch::SBATCH), ("srun", &srun::SRUN), ("salloc", &salloc::SALLOC)];
        for (i, (a, ta)) in tables.iter().enumerate() {
            for (b, tb) in &tables[i + 1..] {
                for s in ta.own {
                    assert!(!tb.own.contains(s), "--{} is alike in {a}'s and {b}'s own entries: share it", s.long);
                }
            }
        }
    }

    #[test]
    fn docs_slurm_md_shows_the_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/slurm.md");
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let start = text.find("<!-- commands -->\n").map(|i| i + "<!-- commands -->\n".len());
        let end = text.find("<!-- /commands -->");
        let (Some(start), Some(end)) = (start, end) else { panic!("{path} has no <!-- commands --> block") };
        let table = docs_table();
        assert!(
            text[start..end] == table,
            "docs/slurm.md's command table is not chaperon::commands::COMMANDS; the block should read:\n{table}"
        );
    }
}
