//! sacct: its option table (Slurm 22.05 spellings, each option allowed or denied with a reason),
//! `parse_sacct`, which turns a call into a `SacctRequest` (pure), and `handle`, which shows the
//! session's scope's jobs only. Options that widen sacct to other users, or read outside
//! Slurm's accounting view of the job, are refused; the jobs and users a call names are checked.

use crate::call::{Call, Stdio};
use crate::checks::{in_scope, local_cluster_only, only_caller, recorded_jobs_in_scope};
use crate::grammar::ValueKind;
use crate::jobid::{parse_job_list, JobRef, STEPS};
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::table::{
    allow, as_written, bad_value, deny, last, not_listed, output, parse, user_list, Arity, GrammarError, Options,
    Output, Table, CLUSTERS, CLUSTER_SPELLING, LOCAL_CLUSTER,
};
use crate::table::{COMPLETION, JSON_VALUE};
use Arity::{Flag, OptionalValue as Opt, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's sacct allow-list; ask your admin if you need it";
const YOU: &str = "checked to be you; sacct is given the scope's job list instead";
const WRAPPED: &str = "Slurm stored the chaperon's job wrapper, not your job; read your script in the project";

/// Every option sacct 22.05 knows. Anything else is an unrecognized option.
pub static SACCT: Table = Table {
    getopt: &slurm_22_05::SACCT,
    getopt_24_11: &crate::slurm_24_11::SACCT,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("accounts", Some('A'), Val, Text),
        allow("allocations", Some('X'), Flag, Any),
        // An old spelling of -X that sacct 22.05 still takes (its optstring has it, undocumented).
        allow("t", Some('t'), Flag, Any).short_only(),
        allow("brief", Some('b'), Flag, Any),
        allow("constraints", Some('C'), Val, Text),
        allow("delimiter", None, Val, Text),
        allow("duplicates", Some('D'), Flag, Any),
        allow("federation", None, Flag, Any),
        allow("helpformat", Some('e'), Flag, Any),
        allow("help-fields", None, Flag, Any),
        allow("endtime", Some('E'), Val, DateTimeOrBlank),
        allow("flags", Some('F'), Val, Text),
        // A group filter cannot widen the view: the chaperon keeps sacct to the caller's jobs.
        allow("gid", None, Val, Text),
        allow("group", Some('g'), Val, Text),
        allow("help", Some('h'), Flag, Any),
        allow("local", None, Flag, Any),
        allow("name", None, Val, Text),
        allow("nnodes", Some('i'), Val, Text),
        allow("ncpus", Some('I'), Val, Text),
        // Checked as `job[.step]` lists by `parse_sacct`.
        allow("jobs", Some('j'), Val, Text)
            .rebuilt("sacct is given the scope's jobs (those you name, if you do) instead"),
        allow("timelimit-min", Some('k'), Val, Time),
        allow("timelimit-max", Some('K'), Val, Time),
        allow("long", Some('l'), Flag, Any),
        allow("nodelist", Some('N'), Val, NodeList),
        allow("noconvert", None, Flag, Any),
        // get_unit_type(*optarg): only the first letter counts.
        allow("units", None, Val, Initial(&["K", "M", "G", "T", "P"])),
        allow("noheader", Some('n'), Flag, Any),
        allow("fields", None, Val, Text),
        allow("format", Some('o'), Val, Text),
        allow("parsable", Some('p'), Flag, Any),
        allow("parsable2", Some('P'), Flag, Any),
        allow("qos", Some('q'), Val, Text),
        allow("partition", Some('r'), Val, Text),
        allow("reason", None, Val, Text),
        allow("state", Some('s'), Val, Text),
        allow("starttime", Some('S'), Val, DateTimeOrBlank),
        allow("truncate", Some('T'), Flag, Any),
        // Recorded in `users`: the chaperon refuses any user but the caller.
        allow("user", Some('u'), Val, Text).rebuilt(YOU),
        allow("uid", None, Val, Text).rebuilt(YOU),
        allow("usage", Some('U'), Flag, Any),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        allow("wckeys", Some('W'), Val, Text),
        allow("whole-hetjob", None, Opt, Choice(&["yes", "no", "y", "n"])),
        allow("associations", Some('x'), Val, Text),
        allow("json", None, Opt, Refused(JSON_VALUE)),
        allow("yaml", None, Opt, Refused(JSON_VALUE)),
        deny("allusers", Some('a'), Flag, "it shows other users' jobs; sacct shows yours without it"),
        deny("batch-script", Some('B'), Flag, WRAPPED),
        deny("env-vars", None, Flag, "Slurm stored the job wrapper's environment; print yours from within the job"),
        deny("completion", Some('c'), Flag, "job-completion records are not kept per user; use sacct without -c"),
        deny("file", Some('f'), Val, "it reads a file on the login node outside the jail"),
        deny("allclusters", Some('L'), Flag, CLUSTERS),
        // Read-only: the chaperon checks the names it gives (`grammar::cluster_names`).
        allow("clusters", Some('M'), Val, Clusters).rebuilt(LOCAL_CLUSTER),
        deny("cluster", None, Val, CLUSTER_SPELLING),
        not_listed("use-local-uid", None, Flag),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        allow("array", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R23_02),
        allow("helpreason", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("helpstate", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("expand-patterns", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
    ],
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SacctRequest {
    /// In order, a later entry overriding an earlier one. Never a denied option.
    pub options: Options,
    /// Every job or step any `--jobs` named (None: no `--jobs`, all of the caller's in scope).
    pub jobs: Option<Vec<JobRef>>,
    /// Every user any `--user`/`--uid` named: each must be the caller (the chaperon checks).
    pub users: Vec<String>,
    pub output: Output,
}

impl SacctRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

/// Parses an sacct call (arguments without the program name). sacct reads no argument but
/// its options.
pub fn parse_sacct(args: &[String]) -> Result<SacctRequest, GrammarError> {
    let p = parse(&SACCT, args)?;
    if !p.positionals.is_empty() {
        return Err(GrammarError::Usage("sacct takes no arguments besides options; give job ids with --jobs"));
    }
    let mut jobs: Option<Vec<JobRef>> = None;
    let mut users = Vec::new();
    for (s, v) in &p.options {
        match (s.long, v.as_deref()) {
            ("jobs", Some(v)) => {
                let list = parse_job_list(v, STEPS).map_err(|why| bad_value("--jobs", v, why))?;
                jobs.get_or_insert_with(Vec::new).extend(list);
            }
            ("user" | "uid", Some(v)) => users.extend(user_list(&format!("--{}", s.long), v)?),
            _ => {}
        }
    }
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    let output = output(&options);
    Ok(SacctRequest { options, jobs, users, output })
}

impl SacctRequest {
    /// The jobs the call may see: those in `scope`, narrowed to those asked for (each of
    /// which must be in it).
    fn in_view(&self, mut scope: Vec<u32>) -> Result<Vec<u32>, Refusal> {
        if let Some(asked) = self.jobs.as_ref().filter(|a| !a.is_empty()) {
            in_scope(&scope, asked.iter().map(|r| r.job))?;
            scope.retain(|id| asked.iter().any(|r| r.job == *id));
        }
        Ok(scope)
    }

    /// The real sacct's arguments: the caller's options the table passes as written and, in
    /// place of the rest, the local cluster (when asked for) and the job ids `ids` (the
    /// scope's, narrowed to those asked for), or a filter that matches nothing.
    fn real_args(&self, ids: &[u32], cluster: Option<String>) -> Vec<String> {
        let mut args = as_written(&SACCT, &self.options);
        args.extend(cluster);
        if ids.is_empty() {
            args.push("--name=agent-sandbox-no-job-in-scope".into());
        } else {
            args.push(format!("--jobs={}", ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
        }
        args
    }
}

/// sacct of the scope's jobs only: the jobs asked for must be in scope, and sacct is given the
/// scope's job list (or a filter matching nothing), never another user.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_sacct(&req.argv)?;
    only_caller(&parsed.users, cfg)?;
    let ids = parsed.in_view(recorded_jobs_in_scope(req, cfg)?)?;
    let cluster = local_cluster_only(&parsed.options, "clusters", cfg.cluster_name())?;
    call.run_with(parsed.real_args(&ids, cluster), stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::jobid::{Step, Tasks};
    use crate::table::testkit::*;

    fn sa(a: &[&str]) -> Result<SacctRequest, GrammarError> {
        parse_sacct(&argv(a))
    }

    #[test]
    fn the_table_is_sacct_22_05() {
        entries_are_the_getopt_sets(&SACCT, &[]);
        table_is_sound(&SACCT, 'n');
        // From the optstring "aA:bBcC:DeE:f:F:g:hi:I:j:k:K:lLM:nN:o:pPq:r:s:S:Ttu:UvVW:x:X"; -t is
        // an old -X, and --reason has no short form (-R is not in it).
        shorts_are(
            &SACCT,
            &[
                ('a', "allusers"),
                ('A', "accounts"),
                ('b', "brief"),
                ('B', "batch-script"),
                ('c', "completion"),
                ('C', "constraints"),
                ('D', "duplicates"),
                ('e', "helpformat"),
                ('E', "endtime"),
                ('f', "file"),
                ('F', "flags"),
                ('g', "group"),
                ('h', "help"),
                ('i', "nnodes"),
                ('I', "ncpus"),
                ('j', "jobs"),
                ('k', "timelimit-min"),
                ('K', "timelimit-max"),
                ('l', "long"),
                ('L', "allclusters"),
                ('M', "clusters"),
                ('n', "noheader"),
                ('N', "nodelist"),
                ('o', "format"),
                ('p', "parsable"),
                ('P', "parsable2"),
                ('q', "qos"),
                ('r', "partition"),
                ('s', "state"),
                ('S', "starttime"),
                ('t', "t"),
                ('T', "truncate"),
                ('u', "user"),
                ('U', "usage"),
                ('v', "verbose"),
                ('V', "version"),
                ('W', "wckeys"),
                ('x', "associations"),
                ('X', "allocations"),
            ],
        );
        // --json and --yaml: a data parser since 23.02.
        optional_values_are(&SACCT, &["whole-hetjob", "json", "yaml"]);
    }

    #[test]
    fn denials_carry_their_reason() {
        denied_with(&SACCT, "allusers", "other users");
        denied_with(&SACCT, "batch-script", "wrapper");
        denied_with(&SACCT, "file", "outside the jail");
        denied_with(&SACCT, "allclusters", "local cluster");
        denied_with(&SACCT, "cluster", "--clusters");
        let e = sa(&["-nXa"]).unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "-a (--allusers)"), "{e:?}");
        assert!(matches!(sa(&["-B", "-j", "5"]), Err(GrammarError::Denied { .. })));
    }

    #[test]
    fn snakemake_status_query_parses() {
        let r =
            sa(&["-X", "--parsable2", "--noheader", "--format=JobIdRaw,State", "--starttime", "now-2days"]).unwrap();
        assert_eq!(r.last("format"), Some(Some("JobIdRaw,State")));
        // Snakemake's Slurm executor, verbatim.
        let r = sa(&[
            "-X",
            "--parsable2",
            "--clusters",
            "all",
            "--noheader",
            "--format=JobIdRaw,State",
            "--starttime",
            "2026-11-24T10:00",
            "--endtime",
            "now",
            "--name",
            "2f7e7b0c-5b4f-4e0a-9f1e-0c6f6b6d2a11",
        ])
        .unwrap();
        assert_eq!(r.last("clusters"), Some(Some("all")));
        for bad in [&["--starttime", "yesterday"][..], &["-E", "now+"], &["-M", "a;b"]] {
            assert!(matches!(sa(bad), Err(GrammarError::BadValue { .. })), "{bad:?}");
        }
        let r = sa(&["--name", "2f7e7b0c-uuid", "--parsable2", "--noheader", "--format=JobIdRaw,State"]).unwrap();
        assert_eq!((r.jobs, r.users.len()), (None, 0));
    }

    #[test]
    fn jobs_and_users_are_recorded_for_the_scope_check() {
        let r = sa(&["-j", "5,6.batch", "--jobs=7_2.0", "-u", "me", "--uid=1000"]).unwrap();
        let jobs = r.jobs.unwrap();
        let got: Vec<_> = jobs.iter().map(|j| (j.job, j.tasks.clone(), j.step)).collect();
        assert_eq!(
            got,
            [(5, Tasks::Whole, None), (6, Tasks::Whole, Some(Step::Batch)), (7, Tasks::One(2), Some(Step::Id(0)))]
        );
        assert_eq!(r.users, ["me", "1000"]);
        for bad in [&["-j", "x"][..], &["-j", "5_[1-3]"], &["-u", "a b"], &["5"], &["--", "-j5"]] {
            assert!(sa(bad).is_err(), "{bad:?}");
        }
        assert_eq!(sa(&["--json"]).unwrap().output, Output::Json);
    }

    #[test]
    fn a_workflow_tools_job_prefix_is_jobs() {
        // A Slurm workflow tool polls with `sacct ... --job 60`: sacct's getopt_long reads
        // --job as --jobs, the one option it begins, so the chaperon does too.
        let r = sa(&["-X", "--parsable2", "--noheader", "--job", "60", "--format=JobIdRaw,State"]).unwrap();
        assert_eq!(r.jobs.as_ref().map(|j| j.iter().map(|r| r.job).collect::<Vec<_>>()), Some(vec![60]));
        assert_eq!(r.last("jobs"), Some(Some("60")));
        assert_eq!(
            r.real_args(&[60], None),
            ["--allocations", "--parsable2", "--noheader", "--format=JobIdRaw,State", "--jobs=60"]
        );
        let e = sa(&["--j", "60"]).unwrap_err();
        assert_eq!(e.to_string(), "option '--j' is ambiguous; possibilities: '--jobs' '--json'");
        let e = sa(&["--he"]).unwrap_err();
        assert_eq!(e.to_string(), "option '--he' is ambiguous; possibilities: '--helpformat' '--help'");
        assert_eq!(
            sa(&["--clus=all"]).unwrap_err(),
            GrammarError::Denied { opt: "--clus (--cluster)".into(), reason: CLUSTER_SPELLING },
            "--clus is --cluster, the first of the two twins"
        );
    }

    #[test]
    fn unknowns_and_caps() {
        assert_eq!(sa(&["--jobx=5"]), Err(GetoptError::Unrecognized("jobx=5".into()).into()));
        assert_eq!(sa(&["-R", "x"]), Err(GetoptError::InvalidShort('R').into()));
        assert_eq!(sa(&["-t"]).unwrap().options, [("t", None)], "an old -X");
        assert_eq!(sa(&["-j"]), Err(GetoptError::ShortNeedsValue('j').into()));
        let many = vec!["-n".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_sacct(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SACCT, &[], 0x5eed_0000_5acc_0001, parse_sacct);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SACCT, &[], &[("jobs", "1")], &[], |a| {
            let p = parse_sacct(a).map_err(|e| e.to_string())?;
            let cluster =
                crate::checks::local_cluster_only(&p.options, "clusters", Some("tc")).map_err(|e| e.to_string())?;
            Ok((p.real_args(&p.in_view(vec![1, 2]).map_err(|e| e.to_string())?, cluster), String::new()))
        });
    }
}
