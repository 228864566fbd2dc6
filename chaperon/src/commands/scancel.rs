//! scancel: its option table (Slurm 22.05 spellings, each option allowed or denied with a
//! reason), `parse_scancel`, which turns a call into a `ScancelRequest` (the job ids as typed
//! `JobRef`s and the filters; pure), and `handle`, which cancels only jobs in the session's
//! scope: those named, or with filters alone every job in scope the filters match.

use crate::bounded::QUERY_TIMEOUT;
use crate::call::{Call, Stdio};
use crate::checks::{jobs_in_scope, only_caller};
use crate::grammar::ValueKind;
use crate::jobid::{parse_job_ref, JobRef, RANGES_AND_STEPS};
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::spawn::Io;
use crate::table::COMPLETION;
use crate::table::{
    allow, any_of, as_written, bad_value, deny, last, not_listed, parse, user_list, Arity, GrammarError, Options,
    Table, BURST_BUFFER, CLUSTERS,
};
use Arity::{Flag, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's scancel allow-list; ask your admin if you need it";

/// Every option scancel 22.05 knows. Anything else is an unrecognized option.
pub static SCANCEL: Table = Table {
    getopt: &slurm_22_05::SCANCEL,
    getopt_24_11: &crate::slurm_24_11::SCANCEL,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("account", Some('A'), Val, Text),
        allow("batch", Some('b'), Flag, Any),
        allow("ctld", None, Flag, Any),
        allow("full", Some('f'), Flag, Any),
        allow("help", None, Flag, Any),
        allow("me", None, Flag, Any).rebuilt("scancel is given the scope's job ids instead"),
        allow("name", Some('n'), Val, Text),
        allow("jobname", None, Val, Text),
        allow("nodelist", Some('w'), Val, NodeList),
        allow("partition", Some('p'), Val, Text),
        allow("qos", Some('q'), Val, Text),
        allow("quiet", Some('Q'), Flag, Any),
        allow("reservation", Some('R'), Val, Text),
        // A name or number only (scancel reads it with sig_name2num alone, no `B:` or `@time`).
        allow("signal", Some('s'), Val, SignalName),
        allow("state", Some('t'), Val, Choice(&["PENDING", "PD", "RUNNING", "R", "SUSPENDED", "S"])),
        allow("usage", None, Flag, Any),
        // Recorded in `users`: the chaperon refuses any user but the caller.
        allow("user", Some('u'), Val, Text).rebuilt("checked to be you; scancel is given the scope's job ids instead"),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        allow("wckey", None, Val, Text),
        deny("interactive", Some('i'), Flag, "it asks for confirmation on a terminal; name the jobs to cancel instead"),
        deny("hurry", Some('H'), Flag, BURST_BUFFER),
        deny("clusters", Some('M'), Val, CLUSTERS),
        deny("cluster", None, Val, CLUSTERS),
        not_listed("sibling", None, Val),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        allow("cron", Some('c'), Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R23_11),
    ],
};

/// The options that pick jobs without naming them. scancel refuses a call with none of these
/// and no job id, rather than cancel nothing (or everything).
const FILTERS: &[&str] =
    &["account", "name", "jobname", "nodelist", "partition", "qos", "reservation", "state", "user", "me", "wckey"];

/// What a scancel call asks for, before the chaperon narrows it to the session's scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScancelRequest {
    /// In order, a later entry overriding an earlier one. Never a denied option.
    pub options: Options,
    /// The job arguments, in order: `123`, `123_4`, `123_[1-3]`, `123.0`, `123_4.batch`.
    pub jobs: Vec<JobRef>,
    /// Every user any `--user` named: each must be the caller (the chaperon checks).
    pub users: Vec<String>,
}

impl ScancelRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

/// Parses a scancel call (arguments without the program name). scancel's getopt permutes, so
/// job ids and options may mix; every argument that is not an option is one job id.
pub fn parse_scancel(args: &[String]) -> Result<ScancelRequest, GrammarError> {
    let p = parse(&SCANCEL, args)?;
    let mut users = Vec::new();
    for (s, v) in &p.options {
        match (s.long, v.as_deref()) {
            ("user", Some(v)) => users.extend(user_list("--user", v)?),
            ("signal", Some(v)) if v.contains([':', '@']) => {
                return Err(bad_value("--signal", v, "scancel takes a signal name or number, such as USR1 or 10"));
            }
            _ => {}
        }
    }
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    let jobs = p
        .positionals
        .iter()
        .map(|a| parse_job_ref(a, RANGES_AND_STEPS).map_err(|why| bad_value("job id", a, why)))
        .collect::<Result<Vec<_>, _>>()?;
    if jobs.is_empty() && !any_of(&options, FILTERS) && !any_of(&options, &["help", "usage", "version"]) {
        return Err(GrammarError::Usage("No job identification provided"));
    }
    Ok(ScancelRequest { options, jobs, users })
}

impl ScancelRequest {
    /// The real scancel's arguments: the caller's options the table passes as written, then
    /// the jobs to cancel (`targets`: those named, or with filters alone the scope's).
    fn real_args(&self, targets: Vec<String>) -> Vec<String> {
        let mut args = as_written(&SCANCEL, &self.options);
        args.extend(targets);
        args
    }
}

/// scancel of jobs in scope only; filters (`--name`, `--state`...) apply within the scope.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_scancel(&req.argv)?;
    only_caller(&parsed.users, cfg)?;
    let ids = jobs_in_scope(req, cfg)?;
    if let Some(foreign) = parsed.jobs.iter().find(|r| !ids.contains(&r.job)) {
        return Err(Refusal::NotInScope { job: foreign.job, by: None });
    }
    let targets: Vec<String> = if parsed.jobs.is_empty() {
        // Filters alone pick among the scope's jobs that slurmctld still knows: given one that
        // has ended, scancel with a filter reports "Invalid job id" and fails, where a direct
        // `scancel --name=X` (or `-u me`) says nothing.
        let live = live_jobs(cfg);
        ids.iter().filter(|j| live.as_ref().is_none_or(|l| l.contains(j))).map(u32::to_string).collect()
    } else {
        parsed.jobs.iter().map(|r| r.to_string()).collect()
    };
    if targets.is_empty() {
        return Ok(0);
    }
    call.run_with(parsed.real_args(targets), stdio)
}

/// The caller's jobs slurmctld knows now (an array by its base id, as sbatch gave it); None if
/// it did not answer, and then every job in scope is given, as before.
fn live_jobs(cfg: &crate::session::Config) -> Option<std::collections::BTreeSet<u32>> {
    let mut cmd = cfg.command("squeue");
    cmd.args(["-h", "--me", "-o", "%F"]).stdin(Io::null()).stderr(Io::null());
    let (out, status) = crate::bounded::capture(cmd, 16 << 20, QUERY_TIMEOUT).ok()?;
    status.success().then(|| live_ids(&String::from_utf8_lossy(&out)))
}

/// Job ids of `squeue -h -o %F` output.
fn live_ids(text: &str) -> std::collections::BTreeSet<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::jobid::{Step, Tasks};
    use crate::table::testkit::*;

    fn sc(a: &[&str]) -> Result<ScancelRequest, GrammarError> {
        parse_scancel(&argv(a))
    }

    #[test]
    fn live_ids_are_read_one_a_line_and_nothing_else() {
        let ids = live_ids("17\n  23\n\nN/A\n4294967295\n4294967296\n");
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), [17, 23, u32::MAX]);
    }

    #[test]
    fn the_table_is_scancel_22_05() {
        entries_are_the_getopt_sets(&SCANCEL, &[]);
        table_is_sound(&SCANCEL, 'Q');
        // From the optstring "A:bfHiM:n:p:Qq:R:s:t:u:vVw:".
        shorts_are(
            &SCANCEL,
            &[
                ('A', "account"),
                ('b', "batch"),
                ('f', "full"),
                ('H', "hurry"),
                ('i', "interactive"),
                ('M', "clusters"),
                ('n', "name"),
                ('p', "partition"),
                ('Q', "quiet"),
                ('q', "qos"),
                ('R', "reservation"),
                ('s', "signal"),
                ('t', "state"),
                ('u', "user"),
                ('v', "verbose"),
                ('V', "version"),
                ('w', "nodelist"),
            ],
        );
        optional_values_are(&SCANCEL, &[]);
    }

    #[test]
    fn denials_carry_their_reason() {
        denied_with(&SCANCEL, "interactive", "terminal");
        denied_with(&SCANCEL, "hurry", "burst-buffer");
        denied_with(&SCANCEL, "clusters", "local cluster");
        let e = sc(&["-Qi", "5"]).unwrap_err().to_string();
        assert!(e.starts_with("option -i (--interactive) is not allowed in agent-sandbox: "), "{e}");
        assert!(matches!(sc(&["5", "--sibling=x"]), Err(GrammarError::Denied { .. })), "after a job id too");
    }

    #[test]
    fn job_ids_in_every_spelling() {
        let r = sc(&["12", "13_4", "14_[1-3,9]", "15.0", "16_2.batch"]).unwrap();
        let got: Vec<(u32, Tasks, Option<Step>)> = r.jobs.into_iter().map(|j| (j.job, j.tasks, j.step)).collect();
        assert_eq!(
            got,
            [
                (12, Tasks::Whole, None),
                (13, Tasks::One(4), None),
                (14, Tasks::Ranges(vec![(1, 3), (9, 9)]), None),
                (15, Tasks::Whole, Some(Step::Id(0))),
                (16, Tasks::One(2), Some(Step::Batch)),
            ]
        );
        for bad in ["0", "x", "1,2", "1_[3-1]", "1+0", "-", ""] {
            let e = sc(&[bad]).unwrap_err();
            assert!(matches!(e, GrammarError::BadValue { ref opt, .. } if opt == "job id"), "{bad:?}: {e:?}");
        }
    }

    #[test]
    fn options_and_ids_mix_as_getopt_permutes() {
        let r = sc(&["12", "-s", "USR1", "13", "--full"]).unwrap();
        assert_eq!(r.jobs.len(), 2);
        assert_eq!((r.last("signal"), r.last("full")), (Some(Some("USR1")), Some(None)));
        let r = sc(&["--", "-5"]);
        assert!(r.is_err(), "after -- a leading dash is still no job id");
        assert_eq!(sc(&["-Qbv", "--", "7"]).unwrap().jobs[0].job, 7);
    }

    #[test]
    fn signals_are_names_or_numbers() {
        for ok in ["USR1", "SIGTERM", "10", "kill"] {
            assert!(sc(&["-s", ok, "5"]).is_ok(), "{ok}");
        }
        for bad in ["B:USR1", "USR1@60", "FOO", "0", ""] {
            assert!(matches!(sc(&["-s", bad, "5"]), Err(GrammarError::BadValue { .. })), "{bad}");
        }
    }

    #[test]
    fn a_bare_scancel_errors_like_the_real_one() {
        assert_eq!(sc(&[]), Err(GrammarError::Usage("No job identification provided")));
        assert_eq!(sc(&["-v", "--batch"]), Err(GrammarError::Usage("No job identification provided")));
        for filter in [&["--me"][..], &["-n", "job"], &["-t", "pd"], &["-p", "gpu"], &["--wckey=w"], &["-u", "me"]] {
            assert!(sc(filter).is_ok(), "{filter:?}");
        }
        assert!(sc(&["--version"]).is_ok());
        assert!(sc(&["-t", "COMPLETED"]).is_err());
    }

    #[test]
    fn users_are_recorded_for_the_caller_check() {
        let r = sc(&["-u", "alice", "--user=bob,1000"]).unwrap();
        assert_eq!(r.users, ["alice", "bob", "1000"]);
        assert!(sc(&["-u", "a;b"]).is_err());
    }

    #[test]
    fn unknown_options_and_caps() {
        assert_eq!(sc(&["--signa=9", "1"]).unwrap().last("signal"), Some(Some("9")), "a prefix of --signal");
        assert_eq!(sc(&["--signals=9", "1"]), Err(GetoptError::Unrecognized("signals=9".into()).into()));
        assert_eq!(sc(&["-x", "1"]), Err(GetoptError::InvalidShort('x').into()));
        let e = sc(&["--s=9", "1"]).unwrap_err().to_string();
        assert_eq!(e, "option '--s=9' is ambiguous; possibilities: '--sibling' '--signal' '--state'");
        let many = vec!["1".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_scancel(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SCANCEL, &["12", "1_[2-3]", "3.0", "4_5.batch"], 0x5eed_0000_5ca1_0001, parse_scancel);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SCANCEL, &["5"], &[], &[], |a| {
            let p = parse_scancel(a).map_err(|e| e.to_string())?;
            let targets = p.jobs.iter().map(|r| r.to_string()).collect();
            Ok((p.real_args(targets), String::new()))
        });
    }
}
