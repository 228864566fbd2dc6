//! sstat: its option table (Slurm 22.05 spellings, each option allowed or denied with a
//! reason), `parse_sstat`, which turns a call into an `SstatRequest` naming the jobs and steps to
//! stat (pure), and `handle`, which runs it only when each of them is in the session's scope.

use crate::call::{Call, Stdio};
use crate::checks::{in_scope, jobs_in_scope};
use crate::grammar::ValueKind;
use crate::jobid::{parse_job_list, JobRef, STEPS};
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::table::{allow, any_of, as_written, bad_value, last, parse, words, Arity, GrammarError, Options, Table};
use crate::table::{deny, COMPLETION};
use Arity::{Flag, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's sstat allow-list; ask your admin if you need it";

/// Every option sstat 22.05 knows: all of them only read. Anything else is unrecognized.
pub static SSTAT: Table = Table {
    getopt: &slurm_22_05::SSTAT,
    getopt_24_11: &crate::slurm_24_11::SSTAT,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("allsteps", Some('a'), Flag, Any),
        allow("helpformat", Some('e'), Flag, Any),
        allow("help", Some('h'), Flag, Any),
        // Checked as `job[.step]` lists by `parse_sstat`.
        allow("jobs", Some('j'), Val, Text),
        allow("noheader", Some('n'), Flag, Any),
        allow("fields", None, Val, Text),
        allow("format", Some('o'), Val, Text),
        allow("noconvert", None, Flag, Any),
        allow("pidformat", Some('i'), Flag, Any),
        allow("parsable", Some('p'), Flag, Any),
        allow("parsable2", Some('P'), Flag, Any),
        allow("usage", None, Flag, Any),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
    ],
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstatRequest {
    /// In order, a later entry overriding an earlier one.
    pub options: Options,
    /// Every job or step named, by `--jobs` or the argument; empty only with --help and the like.
    pub jobs: Vec<JobRef>,
    /// The arguments that are not options (the job list, if given so), as written.
    pub words: Vec<String>,
}

impl SstatRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

fn jobs(v: &str) -> Result<Vec<JobRef>, GrammarError> {
    parse_job_list(v, STEPS).map_err(|why| bad_value("--jobs", v, why))
}

/// Parses an sstat call (arguments without the program name). Jobs come from every `--jobs`
/// and from one argument (`sstat 123.0`); a call with none errors as sstat does.
pub fn parse_sstat(args: &[String]) -> Result<SstatRequest, GrammarError> {
    let p = parse(&SSTAT, args)?;
    let mut list = Vec::new();
    for (s, v) in &p.options {
        if let ("jobs", Some(v)) = (s.long, v.as_deref()) {
            list.extend(jobs(v)?);
        }
    }
    let mut rest = p.positionals.iter();
    if let Some(arg) = rest.next() {
        list.extend(jobs(arg)?);
    }
    if rest.next().is_some() {
        return Err(GrammarError::Usage("sstat takes one job list; separate job ids with commas"));
    }
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    if list.is_empty() && !any_of(&options, &["help", "helpformat", "usage", "version"]) {
        return Err(GrammarError::Usage("You didn't give me any jobs to stat."));
    }
    Ok(SstatRequest { options, jobs: list, words: p.positionals })
}

impl SstatRequest {
    /// The real sstat's arguments: the caller's, as written (every job they name is checked).
    fn real_args(&self) -> Vec<String> {
        let mut args = as_written(&SSTAT, &self.options);
        args.extend(words(&self.words));
        args
    }
}

/// sstat of jobs and steps in scope only.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let parsed = parse_sstat(&call.req.argv)?;
    in_scope(&jobs_in_scope(call.req, call.cfg)?, parsed.jobs.iter().map(|r| r.job))?;
    call.run_with(parsed.real_args(), stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::jobid::Step;
    use crate::table::testkit::*;

    fn st(a: &[&str]) -> Result<SstatRequest, GrammarError> {
        parse_sstat(&argv(a))
    }

    #[test]
    fn the_table_is_sstat_22_05() {
        entries_are_the_getopt_sets(&SSTAT, &[]);
        table_is_sound(&SSTAT, 'n');
        // From the optstring "aehij:no:pPvV".
        shorts_are(
            &SSTAT,
            &[
                ('a', "allsteps"),
                ('e', "helpformat"),
                ('h', "help"),
                ('i', "pidformat"),
                ('j', "jobs"),
                ('n', "noheader"),
                ('o', "format"),
                ('p', "parsable"),
                ('P', "parsable2"),
                ('v', "verbose"),
                ('V', "version"),
            ],
        );
        optional_values_are(&SSTAT, &[]);
    }

    #[test]
    fn jobs_and_steps_in_every_spelling() {
        let r = st(&["-j", "5.0,6", "--jobs=7.batch", "-aP"]).unwrap();
        let got: Vec<_> = r.jobs.iter().map(|j| (j.job, j.step)).collect();
        assert_eq!(got, [(5, Some(Step::Id(0))), (6, None), (7, Some(Step::Batch))]);
        assert_eq!(st(&["-nj5"]).unwrap().jobs.len(), 1);
        assert_eq!(st(&["123.4", "-o", "JobID,MaxRSS"]).unwrap().jobs[0].job, 123);
        assert_eq!(st(&["--", "9"]).unwrap().jobs[0].job, 9);
        for bad in [&["-j", "x"][..], &["5_[1-2]"], &["-j", "1", "2", "3"], &["0"]] {
            assert!(st(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn no_job_errors_like_sstat() {
        assert_eq!(st(&["-a"]), Err(GrammarError::Usage("You didn't give me any jobs to stat.")));
        assert!(st(&["-e"]).is_ok());
        assert!(st(&["--usage"]).is_ok());
    }

    #[test]
    fn unknowns_and_caps() {
        assert_eq!(st(&["--job=5"]).unwrap().options, [("jobs", Some("5".into()))], "a prefix of --jobs");
        assert_eq!(st(&["-M", "x", "5"]), Err(GetoptError::InvalidShort('M').into()));
        let e = st(&["--p", "-j5"]).unwrap_err().to_string();
        assert_eq!(e, "option '--p' is ambiguous; possibilities: '--pidformat' '--parsable' '--parsable2'");
        let many = vec!["-a".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_sstat(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SSTAT, &["12", "3.0", "4.batch"], 0x5eed_0000_5574_0001, parse_sstat);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SSTAT, &["5"], &[("jobs", "5")], &[], |a| {
            let p = parse_sstat(a).map_err(|e| e.to_string())?;
            Ok((p.real_args(), String::new()))
        });
    }
}
