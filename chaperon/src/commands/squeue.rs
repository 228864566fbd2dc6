//! squeue: its option table (Slurm 22.05 spellings, each option allowed or denied with a
//! reason), `parse_squeue`, which turns a call into a `SqueueRequest` (pure), and `handle`,
//! which shows only the scope's jobs: in the table by the job list it gives squeue, in
//! `--json`/`--yaml` by filtering the document itself. squeue only reads, so nearly every
//! option is allowed.

use crate::bounded::{MAX_CAPTURE, QUERY_TIMEOUT};
use crate::call::{Call, Stdio};
use crate::checks::{jobs_in_scope, local_cluster_only, only_caller, recorded_jobs_in_scope};
use crate::grammar::ValueKind;
use crate::jobid::{parse_job_list, JobRef, Syntax, PLAIN, STEPS};
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::spawn::Io;
use crate::table::{
    allow, as_written, bad_value, deny, last, output, parse, user_list, Arity, GrammarError, Options, Output, Table,
    CLUSTER_SPELLING, ITERATE, LOCAL_CLUSTER,
};
use crate::table::{COMPLETION, JSON_VALUE};
use Arity::{Flag, OptionalValue as Opt, Value as Val};
use ValueKind::*;

const SCOPE_JOBS: &str = "squeue is given the scope's job list (those you name, if you do) instead";
const YOU: &str = "checked to be you; squeue is given the scope's job list instead";

const NOT_LISTED: &str = "not on agent-sandbox's squeue allow-list; ask your admin if you need it";

/// Every option squeue 22.05 knows. Anything else is an unrecognized option.
pub static SQUEUE: Table = Table {
    getopt: &slurm_22_05::SQUEUE,
    getopt_24_11: &crate::slurm_24_11::SQUEUE,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("accounts", Some('A'), Val, Text),
        // squeue 22.05 still reads -U as -A ("backwards compatibility"); it has no long form.
        allow("U", Some('U'), Val, Text).short_only(),
        allow("all", Some('a'), Flag, Any),
        allow("array", Some('r'), Flag, Any),
        allow("array-unique", None, Flag, Any),
        allow("Format", Some('O'), Val, Text),
        allow("format", Some('o'), Val, Text),
        allow("federation", None, Flag, Any),
        allow("help", None, Flag, Any),
        allow("hide", None, Flag, Any),
        // Checked as job ids by `parse_squeue`; the value may also come from the next argument.
        allow("jobs", Some('j'), Opt, Text).rebuilt(SCOPE_JOBS),
        allow("local", None, Flag, Any),
        allow("long", Some('l'), Flag, Any),
        allow("licenses", Some('L'), Val, Text),
        allow("me", None, Flag, Any),
        allow("name", Some('n'), Val, Text),
        allow("noconvert", None, Flag, Any),
        allow("nodelist", Some('w'), Val, NodeList),
        allow("node", None, Val, NodeList),
        allow("nodes", None, Val, NodeList),
        allow("noheader", Some('h'), Flag, Any),
        allow("partitions", Some('p'), Val, Text),
        allow("priority", Some('P'), Flag, Any),
        allow("qos", Some('q'), Val, Text),
        allow("reservation", Some('R'), Val, Text),
        allow("sib", None, Flag, Any),
        allow("sibling", None, Flag, Any),
        allow("sort", Some('S'), Val, Text),
        allow("start", None, Flag, Any),
        allow("steps", Some('s'), Opt, Text).rebuilt(SCOPE_JOBS),
        allow("states", Some('t'), Val, Text),
        allow("usage", None, Flag, Any),
        // Recorded in `users`: the chaperon refuses any user but the caller.
        allow("user", Some('u'), Val, Text).rebuilt(YOU),
        allow("users", None, Val, Text).rebuilt(YOU),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        // The chaperon filters the JSON/YAML document itself, so these work without external tools.
        allow("json", None, Opt, Refused(JSON_VALUE)),
        allow("yaml", None, Opt, Refused(JSON_VALUE))
            .rebuilt("the chaperon asks squeue for JSON, filters it and writes it as YAML"),
        deny("iterate", Some('i'), Val, ITERATE),
        // Read-only: the chaperon checks the names it gives (`grammar::cluster_names`).
        allow("clusters", Some('M'), Val, Clusters).rebuilt(LOCAL_CLUSTER),
        deny("cluster", None, Val, CLUSTER_SPELLING),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        allow("expand-patterns", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("helpstate", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("helpformat", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("helpFormat", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("notme", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("only-job-state", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
    ],
};

/// What a squeue call asks to see, before the chaperon narrows it to the session's scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqueueRequest {
    /// In order, a later entry overriding an earlier one. Never a denied option.
    pub options: Options,
    /// `--jobs`: None if absent, an empty list for a bare `--jobs` (all jobs).
    pub jobs: Option<Vec<JobRef>>,
    /// `--steps`, likewise.
    pub steps: Option<Vec<JobRef>>,
    /// Every user any `--user`/`--users` named: each must be the caller (the chaperon checks).
    pub users: Vec<String>,
    pub output: Output,
}

impl SqueueRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

fn jobs(opt: &str, v: &str, syntax: Syntax) -> Result<Vec<JobRef>, GrammarError> {
    parse_job_list(v, syntax).map_err(|why| bad_value(opt, v, why))
}

/// Parses a squeue call (arguments without the program name). squeue's getopt permutes, so
/// options may follow other arguments; the one argument squeue reads besides options is the
/// job (or step) list of a bare `-j` (or `-s`), as in `squeue -j 123`.
pub fn parse_squeue(args: &[String]) -> Result<SqueueRequest, GrammarError> {
    let p = parse(&SQUEUE, args)?;
    let mut req =
        SqueueRequest { options: Vec::new(), jobs: None, steps: None, users: Vec::new(), output: Output::Table };
    for (s, v) in p.options {
        match (s.long, v.as_deref()) {
            ("jobs", Some(v)) => req.jobs = Some(jobs("--jobs", v, PLAIN)?),
            ("jobs", None) => req.jobs = req.jobs.or(Some(Vec::new())),
            ("steps", Some(v)) => req.steps = Some(jobs("--steps", v, STEPS)?),
            ("steps", None) => req.steps = req.steps.or(Some(Vec::new())),
            ("user" | "users", Some(v)) => req.users.extend(user_list(&format!("--{}", s.long), v)?),
            _ => {}
        }
        req.options.push((s.long, v));
    }
    let mut rest = p.positionals.into_iter();
    if let Some(list) = rest.next() {
        // As squeue: the first argument is the list of a -j given anywhere, else of a -s.
        if req.jobs.is_some() {
            req.jobs = Some(jobs("--jobs", &list, PLAIN)?);
        } else if req.steps.is_some() {
            req.steps = Some(jobs("--steps", &list, STEPS)?);
        } else {
            return Err(GrammarError::Usage("squeue takes no arguments besides options; give job ids with --jobs"));
        }
    }
    if rest.next().is_some() {
        return Err(GrammarError::Usage("squeue takes one job list; separate job ids with commas"));
    }
    req.output = output(&req.options);
    Ok(req)
}

impl SqueueRequest {
    /// The jobs the call may see: those in `scope`, narrowed to those asked for.
    fn in_view(&self, mut scope: Vec<u32>) -> Vec<u32> {
        if let Some(asked) = self.jobs.as_ref().filter(|a| !a.is_empty()) {
            scope.retain(|id| asked.iter().any(|r| r.job == *id));
        }
        scope
    }

    /// The real squeue's arguments: the caller's options the table passes as written and, in
    /// place of the rest, the local cluster (when asked for) and the job ids `ids` (the scope's,
    /// narrowed to those asked for); `--json` for a YAML answer, which the chaperon writes.
    fn real_args(&self, ids: &[u32], cluster: Option<String>) -> Vec<String> {
        let mut args: Vec<String> = cluster.into_iter().collect();
        args.extend(as_written(&SQUEUE, &self.options));
        match self.output {
            // squeue --json/--yaml ignore the filters: the chaperon filters the document.
            Output::Yaml => args.push("--json".into()),
            Output::Json => {}
            // Nothing in scope: a filter that matches nothing, so the header still looks real.
            Output::Table if ids.is_empty() => args.push("--name=agent-sandbox-no-job-in-scope".into()),
            Output::Table => match &self.steps {
                // Steps asked for by id: those of jobs in scope (none: the empty filter).
                Some(asked) if !asked.is_empty() => {
                    let mine: Vec<String> =
                        asked.iter().filter(|r| ids.contains(&r.job)).map(|r| r.to_string()).collect();
                    match mine.is_empty() {
                        true => args.push("--name=agent-sandbox-no-job-in-scope".into()),
                        false => args.push(format!("--steps={}", mine.join(","))),
                    }
                }
                steps => {
                    // `-s` alone lists steps instead of jobs: of the jobs in scope.
                    if steps.is_some() {
                        args.push("--steps".into());
                    }
                    let mut list: Vec<String> = ids.iter().map(u32::to_string).collect();
                    // Given one job id, squeue asks the controller for that job alone, which
                    // fails ("Invalid job id specified", status 1) once the controller forgot
                    // it (MinJobAge after its end). A scope of one job the caller did not name
                    // lists it twice: squeue then loads the jobs and picks, and prints nothing
                    // for a forgotten one, as squeue without -j does.
                    let asked = self.jobs.as_ref().is_some_and(|a| !a.is_empty());
                    if list.len() == 1 && !asked && steps.is_none() {
                        list.push(list[0].clone());
                    }
                    args.push(format!("--jobs={}", list.join(",")))
                }
            },
        }
        args
    }
}

/// squeue limited to the scope's jobs; `--json`/`--yaml` output is filtered here.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_squeue(&req.argv)?;
    only_caller(&parsed.users, cfg)?;
    let named = [&parsed.jobs, &parsed.steps].iter().any(|l| l.as_ref().is_some_and(|l| !l.is_empty()));
    let scope = jobs_in_scope(req, cfg)?;
    let listed = if named { 0 } else { scope.len() };
    let ids = parsed.in_view(scope);
    // One job named, of the scope, that the controller has forgotten (marked gone): squeue's
    // own answer for a job id it does not hold, which tools take for "ended".
    if let (Output::Table, None, Some([one])) = (parsed.output, &parsed.steps, parsed.jobs.as_deref()) {
        if ids.is_empty() && recorded_jobs_in_scope(req, cfg)?.contains(&one.job) {
            use std::os::fd::AsFd;
            let _ = crate::bounded::write_all(
                stdio.stderr.as_fd(),
                b"slurm_load_jobs error: Invalid job id specified\n",
                QUERY_TIMEOUT,
            );
            return Ok(1);
        }
    }
    let cluster = local_cluster_only(&parsed.options, "clusters", cfg.cluster_name())?;
    let mut cmd = cfg.command("squeue");
    cmd.args(parsed.real_args(&ids, cluster));
    if parsed.output == Output::Table {
        let answered = call.run(cmd, stdio);
        crate::forgotten::probe_if_due(cfg, listed);
        return answered;
    }
    // The chaperon asked for JSON: it narrows the document to the scope and writes it as
    // asked (YAML from the same document).
    cmd.stdin(Io::null()).stderr(stdio.stderr);
    let (out, status) = crate::bounded::capture(cmd, MAX_CAPTURE, QUERY_TIMEOUT).map_err(Refusal::Failed)?;
    let mut v: serde_json::Value =
        serde_json::from_slice(&out).map_err(|e| Refusal::Failed(format!("squeue --json: {e}")))?;
    // As scontrol's documents: an array task by its array's id (the one the scope holds), a
    // het job's component by the het job's; a document without the list is refused.
    crate::scoped_json::narrow(&mut v, "jobs", &ids).map_err(Refusal::Failed)?;
    let text = match parsed.output {
        Output::Yaml => format!("---\n{}", crate::yaml::to_yaml(&v)),
        _ => format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()),
    };
    use std::os::fd::AsFd;
    crate::bounded::write_all(stdio.stdout.as_fd(), text.as_bytes(), QUERY_TIMEOUT)
        .map_err(|e| Refusal::Failed(format!("writing squeue's answer: {e}")))?;
    crate::forgotten::probe_if_due(cfg, listed);
    Ok(status.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::jobid::{Step, Tasks};
    use crate::table::testkit::*;

    fn sq(a: &[&str]) -> Result<SqueueRequest, GrammarError> {
        parse_squeue(&argv(a))
    }

    #[test]
    fn the_table_is_squeue_22_05() {
        entries_are_the_getopt_sets(&SQUEUE, &[]);
        table_is_sound(&SQUEUE, 'l');
        // From the optstring "A:ahi:j::lL:n:M:O:o:p:Pq:R:rs::S:t:u:U:vVw:" (-U is an undocumented
        // alias of -u, left out: it is unrecognized here).
        shorts_are(
            &SQUEUE,
            &[
                ('A', "accounts"),
                ('U', "U"),
                ('a', "all"),
                ('h', "noheader"),
                ('i', "iterate"),
                ('j', "jobs"),
                ('l', "long"),
                ('L', "licenses"),
                ('n', "name"),
                ('M', "clusters"),
                ('O', "Format"),
                ('o', "format"),
                ('p', "partitions"),
                ('P', "priority"),
                ('q', "qos"),
                ('R', "reservation"),
                ('r', "array"),
                ('s', "steps"),
                ('S', "sort"),
                ('t', "states"),
                ('u', "user"),
                ('v', "verbose"),
                ('V', "version"),
                ('w', "nodelist"),
            ],
        );
        optional_values_are(&SQUEUE, &["jobs", "steps", "json", "yaml"]);
    }

    #[test]
    fn iterate_is_denied_and_clusters_allowed() {
        denied_with(&SQUEUE, "iterate", "never exits");
        denied_with(&SQUEUE, "cluster", "--clusters");
        assert_eq!(sq(&["-M", "all"]).unwrap().last("clusters"), Some(Some("all")));
        assert_eq!(sq(&["--clusters=a,b"]).unwrap().last("clusters"), Some(Some("a,b")));
        assert!(matches!(sq(&["-M", "a b"]), Err(GrammarError::BadValue { .. })));
        let e = sq(&["-li", "5"]).unwrap_err().to_string();
        assert_eq!(e, format!("option -i (--iterate) is not allowed in agent-sandbox: {ITERATE}"));
        assert!(matches!(sq(&["--cluster=all"]), Err(GrammarError::Denied { .. })));
    }

    #[test]
    fn common_views_parse() {
        let r = sq(&["--me", "-h", "-o", "%.18i %.9P %.8j %.2t", "--states=PD,R"]).unwrap();
        assert_eq!(r.last("format"), Some(Some("%.18i %.9P %.8j %.2t")));
        assert_eq!((r.jobs, r.users.len(), r.output), (None, 0, Output::Table));
        let r = sq(&["-O", "JobID:10,Name:30", "--noheader", "--sort=-t,i", "-p", "gpu", "-lr"]).unwrap();
        assert_eq!(r.options.len(), 6);
        let r = sq(&["--json"]).unwrap();
        assert_eq!(r.output, Output::Json);
        assert_eq!(sq(&["--json", "--yaml"]).unwrap().output, Output::Yaml, "the last one wins");
    }

    #[test]
    fn job_lists_in_every_spelling() {
        let ids = |r: SqueueRequest| r.jobs.map(|j| j.iter().map(|j| j.job).collect::<Vec<_>>());
        assert_eq!(ids(sq(&["--jobs=12,13_4"]).unwrap()), Some(vec![12, 13]));
        assert_eq!(ids(sq(&["-j12"]).unwrap()), Some(vec![12]));
        assert_eq!(ids(sq(&["-j", "12,13"]).unwrap()), Some(vec![12, 13]), "the list from the next argument");
        assert_eq!(ids(sq(&["12", "-j"]).unwrap()), Some(vec![12]), "getopt permutes");
        assert_eq!(ids(sq(&["--jobs"]).unwrap()), Some(vec![]));
        assert_eq!(ids(sq(&["-lj"]).unwrap()), Some(vec![]));
        let r = sq(&["--jobs=7_3"]).unwrap();
        assert_eq!(r.jobs.unwrap()[0].tasks, Tasks::One(3));
        for bad in [&["--jobs=x"][..], &["-j0"], &["-j", "1.0"], &["--jobs=1_[1-2]"], &["-j", "1", "2"]] {
            assert!(sq(bad).is_err(), "{bad:?}");
        }
        let e = sq(&["123"]).unwrap_err();
        assert!(matches!(e, GrammarError::Usage(m) if m.contains("--jobs")), "{e:?}");
    }

    #[test]
    fn step_lists() {
        let r = sq(&["--steps=5.0,5.batch"]).unwrap();
        let steps = r.steps.unwrap();
        assert_eq!((steps[0].step, steps[1].step), (Some(Step::Id(0)), Some(Step::Batch)));
        let r = sq(&["-s", "9.1"]).unwrap();
        assert_eq!(r.steps.unwrap()[0].job, 9);
        assert!(sq(&["-s1_[1-3].0"]).is_err());
    }

    #[test]
    fn users_are_recorded_for_the_caller_check() {
        let r = sq(&["-u", "alice", "--users=bob,1001", "--user=carol"]).unwrap();
        assert_eq!(r.users, ["alice", "bob", "1001", "carol"], "every one named, so none escapes the check");
        assert!(sq(&["-u", "a b"]).is_err());
        assert!(sq(&["--user="]).is_err());
        assert!(sq(&["-u", "a,,b"]).is_err());
    }

    #[test]
    fn unknown_options_and_double_dash() {
        assert_eq!(sq(&["--state=R"]).unwrap().options, [("states", Some("R".into()))], "a prefix of --states");
        let e = sq(&["--s"]).unwrap_err().to_string();
        assert_eq!(e, "option '--s' is ambiguous; possibilities: '--sib' '--sort' '--start' '--steps' '--states'");
        assert_eq!(sq(&["-Z"]), Err(GetoptError::InvalidShort('Z').into()));
        assert_eq!(sq(&["-j", "--", "5"]).unwrap().jobs.map(|j| j.len()), Some(1));
        assert!(sq(&["--", "--me"]).is_err(), "after -- an option is an argument");
    }

    #[test]
    fn caps_hold() {
        let many = vec!["-l".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_squeue(&many), Err(GrammarError::TooManyArgs { .. })));
        let huge = vec![format!("--name={}", "x".repeat(crate::table::MAX_ARG_BYTES))];
        assert!(matches!(parse_squeue(&huge), Err(GrammarError::TooLarge { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SQUEUE, &["12", "1_2", "3.0"], 0x5eed_0000_5175_0001, parse_squeue);
    }

    #[test]
    fn a_scope_of_one_job_is_listed_twice_unless_the_caller_named_it() {
        let args = |a: &[&str], scope: Vec<u32>| {
            let p = sq(a).unwrap();
            p.real_args(&p.in_view(scope), None)
        };
        assert_eq!(args(&["-h"], vec![7]), ["--noheader", "--jobs=7,7"], "a forgotten job must not fail the call");
        assert_eq!(args(&["-h"], vec![7, 9]), ["--noheader", "--jobs=7,9"]);
        assert_eq!(args(&["-j", "7"], vec![7, 9]), ["--jobs=7"], "named: as squeue -j 7 answers it");
        assert_eq!(args(&["-s"], vec![7]), ["--steps", "--jobs=7"]);
    }

    #[test]
    fn steps_stay_steps_of_jobs_in_scope() {
        let args = |a: &[&str]| {
            let p = sq(a).unwrap();
            p.real_args(&p.in_view(vec![1, 2]), None)
        };
        assert_eq!(args(&["-s"]), ["--steps", "--jobs=1,2"]);
        assert_eq!(args(&["-s", "-j", "2"]), ["--steps", "--jobs=2"]);
        assert_eq!(args(&["--steps=1.0,3.0,2.batch"]), ["--steps=1.0,2.batch"]);
        assert_eq!(args(&["-s", "3.0"]), ["--name=agent-sandbox-no-job-in-scope"], "a step of a job out of scope");
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(
            &SQUEUE,
            &[],
            &[("jobs", "1"), ("steps", "1.0")],
            &["json"],
            |a| {
                let p = parse_squeue(a).map_err(|e| e.to_string())?;
                let cluster =
                    crate::checks::local_cluster_only(&p.options, "clusters", Some("tc")).map_err(|e| e.to_string())?;
                Ok((p.real_args(&p.in_view(vec![1, 2]), cluster), String::new()))
            },
        );
    }
}
