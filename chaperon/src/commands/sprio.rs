//! sprio: its option table (Slurm 22.05 spellings, each option allowed or denied with a
//! reason), `parse_sprio`, which turns a call into an `SprioRequest` (the job ids and users it
//! names; pure), and `handle`, which shows the priorities of the scope's jobs only.

use crate::bounded::{MAX_CAPTURE, QUERY_TIMEOUT};
use crate::call::{Call, Stdio};
use crate::checks::{in_scope, jobs_in_scope, local_cluster_only, only_caller};
use crate::grammar::ValueKind;
use crate::jobid::{parse_job_list, JobRef, PLAIN};
use crate::refusal::Refusal;
use crate::release::{Release, R24_05};
use crate::slurm_22_05;
use crate::spawn::Io;
use crate::table::COMPLETION;
use crate::table::{
    allow, as_written, bad_value, deny, last, parse, user_list, Arity, GrammarError, Options, Table, CLUSTER_SPELLING,
    LOCAL_CLUSTER,
};
use std::os::fd::OwnedFd;
use Arity::{Flag, OptionalValue as Opt, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's sprio allow-list; ask your admin if you need it";

/// Every option sprio 22.05 knows. Anything else is an unrecognized option.
pub static SPRIO: Table = Table {
    getopt: &slurm_22_05::SPRIO,
    getopt_24_11: &crate::slurm_24_11::SPRIO,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("noheader", Some('h'), Flag, Any),
        // Checked as job ids by `parse_sprio`; the value may also come from the next argument.
        allow("jobs", Some('j'), Opt, Text)
            .rebuilt("sprio is given the scope's jobs (those you name, if you do) instead"),
        allow("long", Some('l'), Flag, Any),
        allow("norm", Some('n'), Flag, Any),
        allow("format", Some('o'), Val, Text),
        allow("sort", Some('S'), Val, Text),
        allow("partition", Some('p'), Val, Text),
        // Recorded in `users`: the chaperon refuses any user but the caller.
        allow("user", Some('u'), Val, Text),
        allow("users", None, Val, Text),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        allow("weights", Some('w'), Flag, Any),
        allow("federation", None, Flag, Any),
        allow("help", None, Flag, Any),
        allow("local", None, Flag, Any),
        allow("sib", None, Flag, Any),
        allow("sibling", None, Flag, Any),
        allow("usage", None, Flag, Any),
        // Read-only: the chaperon checks the names it gives (`grammar::cluster_names`).
        allow("clusters", Some('M'), Val, Clusters).rebuilt(LOCAL_CLUSTER),
        deny("cluster", None, Val, CLUSTER_SPELLING),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        allow("helpformat", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
    ],
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SprioRequest {
    /// In order, a later entry overriding an earlier one. Never a denied option.
    pub options: Options,
    /// `--jobs`: None if absent, an empty list for a bare `--jobs` (all jobs).
    pub jobs: Option<Vec<JobRef>>,
    /// Every user any `--user`/`--users` named: each must be the caller (the chaperon checks).
    pub users: Vec<String>,
}

impl SprioRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

fn jobs(v: &str) -> Result<Vec<JobRef>, GrammarError> {
    parse_job_list(v, PLAIN).map_err(|why| bad_value("--jobs", v, why))
}

/// Parses an sprio call (arguments without the program name). As squeue, sprio's getopt
/// permutes, and the one argument it reads is the job list of a bare `-j` (`sprio -j 123`).
pub fn parse_sprio(args: &[String]) -> Result<SprioRequest, GrammarError> {
    let p = parse(&SPRIO, args)?;
    let mut req = SprioRequest { options: Vec::new(), jobs: None, users: Vec::new() };
    for (s, v) in p.options {
        match (s.long, v.as_deref()) {
            ("jobs", Some(v)) => req.jobs = Some(jobs(v)?),
            ("jobs", None) => req.jobs = req.jobs.or(Some(Vec::new())),
            ("user" | "users", Some(v)) => req.users.extend(user_list(&format!("--{}", s.long), v)?),
            _ => {}
        }
        req.options.push((s.long, v));
    }
    let mut rest = p.positionals.into_iter();
    match (rest.next(), req.jobs.is_some()) {
        (None, _) => {}
        (Some(list), true) => req.jobs = Some(jobs(&list)?),
        (Some(_), false) => {
            return Err(GrammarError::Usage("sprio takes no arguments besides options; give job ids with --jobs"))
        }
    }
    if rest.next().is_some() {
        return Err(GrammarError::Usage("sprio takes one job list; separate job ids with commas"));
    }
    Ok(req)
}

impl SprioRequest {
    /// The jobs the real sprio is given: those asked for, else the scope's `ids`. None: nothing
    /// to show (no job asked for, none in scope).
    fn job_list(&self, ids: &[u32]) -> Option<Vec<u32>> {
        // A bare `-j` names no job: sprio would show every user's, so it gets the scope's.
        match self.jobs.as_ref().filter(|asked| !asked.is_empty()) {
            Some(asked) => Some(asked.iter().map(|r| r.job).collect()),
            None if ids.is_empty() => None,
            None => Some(ids.to_vec()),
        }
    }

    /// The real sprio's arguments for `jobs`: the caller's options the table passes as
    /// written, `--noheader` if `noheader`, the jobs and the local cluster (when asked for).
    fn args_for(&self, jobs: &[u32], cluster: Option<&String>, noheader: bool) -> Vec<String> {
        let mut args = as_written(&SPRIO, &self.options);
        if noheader && self.last("noheader").is_none() {
            args.push("--noheader".into());
        }
        let list: Vec<String> = jobs.iter().map(u32::to_string).collect();
        args.push(format!("--jobs={}", list.join(",")));
        args.extend(cluster.cloned());
        args
    }

    /// The real sprio's arguments: `args_for` the whole job list. None: nothing to show.
    #[cfg(test)]
    fn real_args(&self, ids: &[u32], cluster: Option<String>) -> Option<Vec<String>> {
        self.job_list(ids).map(|jobs| self.args_for(&jobs, cluster.as_ref(), false))
    }
}

/// sprio 24.05 to 25.11 reads a job list of more than one job as one malformed job id
/// ("sprio: error: Invalid job id", status 1): its opts.c hands the whole list to
/// `unfmt_job_id_string` (Slurm's commit 4f21612476, fixed by 80beef6a22 in 26.05).
fn reads_one_job_only(release: Release) -> bool {
    (R24_05..Release::new(26, 5)).contains(&release)
}

/// What sprio prints, on stdout, when it has no priorities at all to show for a job list.
const UNABLE: &str = "Unable to find jobs matching user/id(s) specified";

/// sprio of the scope's jobs: those asked for must be in scope; without a job list, the
/// scope's (nothing to show when it is empty).
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_sprio(&req.argv)?;
    let cluster = local_cluster_only(&parsed.options, "clusters", cfg.cluster_name())?;
    only_caller(&parsed.users, cfg)?;
    let ids = jobs_in_scope(req, cfg)?;
    in_scope(&ids, parsed.jobs.iter().flatten().map(|r| r.job))?;
    let Some(jobs) = parsed.job_list(&ids) else { return Ok(0) };
    let weights = parsed.last("weights").is_some();
    if jobs.len() < 2 || weights || !reads_one_job_only(crate::release::in_effect()) {
        return call.run_with(parsed.args_for(&jobs, cluster.as_ref(), false), stdio);
    }
    one_job_a_call(call, &parsed, &jobs, cluster.as_ref(), stdio)
}

/// sprio for a list of jobs on a release that reads one job only (`reads_one_job_only`): what
/// a sprio that reads the list shows. sprio lists the priorities of pending jobs only, so the
/// pending jobs of the list are learnt first (`sprio -h -o %i`, whose answer the caller does
/// not see); a list with at most one pending is given to sprio as that one job (or, with none,
/// the first: the same header, or the same "Unable to find jobs", as for the list); more are
/// one call each, the first with the caller's header, and their rows in the list's order.
fn one_job_a_call(
    call: &Call<'_>,
    parsed: &SprioRequest,
    jobs: &[u32],
    cluster: Option<&String>,
    stdio: Stdio,
) -> Result<i32, Refusal> {
    let capture = |args: Vec<String>, stderr: &OwnedFd| -> Result<(String, i32), Refusal> {
        let mut cmd = call.cfg.command("sprio");
        cmd.args(args);
        let stderr = stderr.try_clone().map_err(|e| Refusal::Failed(format!("sprio's stderr: {e}")))?;
        cmd.stdin(Io::null()).stderr(stderr);
        let (out, status) = crate::bounded::capture(cmd, MAX_CAPTURE, QUERY_TIMEOUT).map_err(Refusal::Failed)?;
        Ok((String::from_utf8_lossy(&out).into_owned(), status.code().unwrap_or(1)))
    };
    let mut probe = vec!["--noheader".to_string(), "--format=%i".into()];
    probe.extend(cluster.cloned());
    let (listed, status) = capture(probe, &stdio.stderr)?;
    if status != 0 {
        return Ok(status);
    }
    let listed: Vec<u32> = listed.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let pending: Vec<u32> = jobs.iter().copied().filter(|j| listed.contains(j)).collect();
    if pending.len() < 2 {
        let one = [pending.first().copied().unwrap_or(jobs[0])];
        return call.run_with(parsed.args_for(&one, cluster, false), stdio);
    }
    let mut text = String::new();
    let mut worst = 0;
    for (i, job) in pending.iter().enumerate() {
        let (out, status) = capture(parsed.args_for(&[*job], cluster, i > 0), &stdio.stderr)?;
        // A job that stopped pending since the probe: no rows (or sprio's "Unable" line).
        text.extend(out.lines().filter(|l| i == 0 || l.trim() != UNABLE).map(|l| format!("{l}\n")));
        worst = worst.max(status);
    }
    use std::os::fd::AsFd;
    crate::bounded::write_all(stdio.stdout.as_fd(), text.as_bytes(), QUERY_TIMEOUT)
        .map_err(|e| Refusal::Failed(format!("writing sprio's answer: {e}")))?;
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testkit::*;

    fn sp(a: &[&str]) -> Result<SprioRequest, GrammarError> {
        parse_sprio(&argv(a))
    }

    #[test]
    fn the_table_is_sprio_22_05() {
        entries_are_the_getopt_sets(&SPRIO, &[]);
        table_is_sound(&SPRIO, 'l');
        // From the optstring "hj::lM:no:S:p:u:vVw".
        shorts_are(
            &SPRIO,
            &[
                ('h', "noheader"),
                ('j', "jobs"),
                ('l', "long"),
                ('M', "clusters"),
                ('n', "norm"),
                ('o', "format"),
                ('S', "sort"),
                ('p', "partition"),
                ('u', "user"),
                ('v', "verbose"),
                ('V', "version"),
                ('w', "weights"),
            ],
        );
        optional_values_are(&SPRIO, &["jobs"]);
        denied_with(&SPRIO, "cluster", "--clusters");
    }

    #[test]
    fn jobs_and_users_are_recorded_for_the_scope_check() {
        let ids = |r: SprioRequest| r.jobs.map(|j| j.iter().map(|j| j.job).collect::<Vec<_>>());
        assert_eq!(ids(sp(&["-j1008,1009"]).unwrap()), Some(vec![1008, 1009]));
        assert_eq!(ids(sp(&["-lj", "7"]).unwrap()), Some(vec![7]));
        assert_eq!(ids(sp(&["--jobs=7", "-n"]).unwrap()), Some(vec![7]));
        assert_eq!(ids(sp(&["-w"]).unwrap()), None);
        assert_eq!(sp(&["-u", "me,1000", "--users=x"]).unwrap().users, ["me", "1000", "x"]);
        for bad in [&["-jx"][..], &["-j", "1.0"], &["7"], &["-j", "7", "8"], &["-u", ""]] {
            assert!(sp(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn denials_unknowns_and_caps() {
        assert_eq!(sp(&["-lM", "all"]).unwrap().options, [("long", None), ("clusters", Some("all".into()))]);
        let e = sp(&["--cluster=all"]).unwrap_err().to_string();
        assert_eq!(e, format!("option --cluster is not allowed in agent-sandbox: {CLUSTER_SPELLING}"));
        assert_eq!(sp(&["--job=1"]).unwrap().jobs.map(|j| j.len()), Some(1), "a prefix of --jobs");
        let user = [("user", Some("me".into()))];
        assert_eq!(sp(&["--use=me"]).unwrap().options, user, "--user and --users are one option");
        let e = sp(&["--us=me"]).unwrap_err().to_string();
        assert_eq!(e, "option '--us=me' is ambiguous; possibilities: '--user' '--usage'");
        let e = sp(&["--s"]).unwrap_err().to_string();
        // sib and sibling are one option, but unlike sort, the first: glibc lists both.
        assert_eq!(e, "option '--s' is ambiguous; possibilities: '--sort' '--sib' '--sibling'");
        assert_eq!(sp(&["-j", "--", "5"]).unwrap().jobs.map(|j| j.len()), Some(1));
        let many = vec!["-l".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_sprio(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SPRIO, &["12", "1_2"], 0x5eed_0000_5b10_0001, parse_sprio);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SPRIO, &[], &[("jobs", "1")], &[], |a| {
            let p = parse_sprio(a).map_err(|e| e.to_string())?;
            let cluster =
                crate::checks::local_cluster_only(&p.options, "clusters", Some("tc")).map_err(|e| e.to_string())?;
            Ok((p.real_args(&[1, 2], cluster).unwrap_or_default(), String::new()))
        });
    }

    #[test]
    fn a_bare_jobs_flag_shows_the_scopes_jobs_not_everyones() {
        let args = |a: &[&str], scope: &[u32]| sp(a).unwrap().real_args(scope, None);
        // sprio reads a bare -j as "all jobs": it gets the scope's list instead.
        assert_eq!(args(&["-j"], &[3, 4]), Some(argv(&["--jobs=3,4"])));
        assert_eq!(args(&["-l"], &[3]), Some(argv(&["--long", "--jobs=3"])));
        assert_eq!(args(&["-j", "3"], &[3, 4]), Some(argv(&["--jobs=3"])));
        assert_eq!(args(&["-j"], &[]), None, "nothing in scope: nothing to show");
    }

    #[test]
    fn a_job_list_is_one_call_a_job_where_sprio_reads_one_job_only() {
        use crate::release::{R22_05, R24_11};
        assert!(!reads_one_job_only(R22_05) && !reads_one_job_only(crate::release::R23_11));
        assert!(reads_one_job_only(R24_05) && reads_one_job_only(R24_11) && reads_one_job_only(Release::new(25, 11)));
        assert!(!reads_one_job_only(Release::new(26, 5)));
        let p = sp(&["-l"]).unwrap();
        assert_eq!(p.args_for(&[3], None, true), argv(&["--long", "--noheader", "--jobs=3"]));
        let p = sp(&["-h", "-o", "%i %Y"]).unwrap();
        assert_eq!(p.args_for(&[4], None, true), argv(&["--noheader", "--format=%i %Y", "--jobs=4"]), "one -h");
    }
}
