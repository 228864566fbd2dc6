//! sreport: its option table (Slurm 22.05 spellings), its report grammar (a report type, a
//! report and its conditions, each spelled in full), `parse_sreport`, which turns a call into an
//! `SreportRequest` (pure), and `handle`, which scopes a report as the other views are scoped:
//! the cluster's and the reservations' utilization as they are (cluster figures, like sinfo and
//! sdiag), usage per user for the caller's own user (like sshare), job sizes over the session's
//! scope's jobs (like sacct). Another cluster, all clusters and interactive sreport are refused.

use crate::call::{Call, Stdio};
use crate::checks::{in_scope, local_cluster_only, local_names_only, only_caller, recorded_jobs_in_scope};
use crate::grammar::{validate, ValueKind};
use crate::jobid::{parse_job_ref, STEPS};
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::table::COMPLETION;
use crate::table::{
    allow, any_of, as_written, bad_value, deny, lookup, no, parse, user_list, word, words, Arity, Class, GrammarError,
    Options, Table, LOCAL_CLUSTER, WORD as A,
};
use Arity::{Flag, Value as Val};
use ValueKind::*;

const OWN_CLUSTER: &str = "a sandboxed session sees its own cluster only, which sreport reports on by default";
const INTERACTIVE: &str =
    "an interactive-mode command; use the matching option (-n, -p, -P, -Q, -v, -t, --local) instead";

const NOT_LISTED: &str = "not on agent-sandbox's sreport allow-list; ask your admin if you need it";

/// Every option sreport 22.05 knows (its getopt table, and `-t`, which has no long form).
/// Anything else is an unrecognized option.
pub static SREPORT: Table = Table {
    getopt: &slurm_22_05::SREPORT,
    getopt_24_11: &crate::slurm_24_11::SREPORT,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("help", Some('h'), Flag, Any),
        // sreport 22.05 takes it and then fails ("getopt error"): harmless, and as Slurm has it.
        allow("immediate", None, Flag, Any),
        // Without a cluster option sreport reports on the whole federation where the site has
        // `fed_display`: the chaperon asks for the local cluster (`--local`, or `-M` as below).
        allow("local", None, Flag, Any).rebuilt("the chaperon always asks sreport for the local cluster alone"),
        allow("noheader", Some('n'), Flag, Any),
        allow("parsable", Some('p'), Flag, Any),
        allow("parsable2", Some('P'), Flag, Any),
        allow("quiet", Some('Q'), Flag, Any),
        allow("tres", Some('T'), Val, Text),
        allow("usage", None, Flag, Any),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        // Seconds, Minutes, Hours, Percent, SecPer, MinPer, HourPer, any prefix: sreport reads it.
        allow("time-format", Some('t'), Val, Text).short_only(),
        // sreport's `-M` is `--cluster` (there is no `--clusters`).
        allow("cluster", Some('M'), Val, Clusters).rebuilt(LOCAL_CLUSTER),
        deny("all_clusters", Some('a'), Flag, OWN_CLUSTER),
        deny("federation", None, Flag, OWN_CLUSTER),
        // `--sort` takes no value in sreport 22.05, `-s` does: one spelling could not mean both.
        deny("sort", Some('s'), Flag, "sreport reads --sort and -s differently; sort the report's output instead"),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
    ],
};

/// The report types, spelled in full (sreport itself takes prefixes, down to one letter, and
/// reads a word that starts with `a` as `association`).
static TYPES: &[(&str, Class)] = &[
    word("cluster", A),
    word("job", A),
    word("reservation", A),
    word("resv", A),
    word("user", A),
    word("help", A),
    word("version", A),
    word("association", no("sreport 22.05 has no association report")),
    word("exit", no(INTERACTIVE)),
    word("quit", no(INTERACTIVE)),
    word("nonparsable", no(INTERACTIVE)),
    word("parsable", no(INTERACTIVE)),
    word("parsable2", no(INTERACTIVE)),
    word("quiet", no(INTERACTIVE)),
    word("local", no(INTERACTIVE)),
    word("verbose", no(INTERACTIVE)),
    word("sort", no(INTERACTIVE)),
    word("time", no(INTERACTIVE)),
];

/// Each report of sreport 22.05, by type and name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    ClusterUtilization,
    AccountUtilizationByUser,
    UserUtilizationByAccount,
    UserUtilizationByWckey,
    WckeyUtilizationByUser,
    JobSizesByAccount,
    JobSizesByWckey,
    JobSizesByAccountAndWckey,
    ReservationUtilization,
    UserTopUsage,
}

/// (type, name, report), names spelled in full as sreport's help lists them.
static REPORTS: &[(&str, &str, Report)] = &[
    ("cluster", "Utilization", Report::ClusterUtilization),
    ("cluster", "AccountUtilizationByUser", Report::AccountUtilizationByUser),
    ("cluster", "UserUtilizationByAccount", Report::UserUtilizationByAccount),
    ("cluster", "UserUtilizationByWckey", Report::UserUtilizationByWckey),
    ("cluster", "WCKeyUtilizationByUser", Report::WckeyUtilizationByUser),
    ("job", "SizesByAccount", Report::JobSizesByAccount),
    ("job", "SizesByWckey", Report::JobSizesByWckey),
    ("job", "SizesByAccountAndWckey", Report::JobSizesByAccountAndWckey),
    ("reservation", "Utilization", Report::ReservationUtilization),
    ("user", "TopUsage", Report::UserTopUsage),
];

/// What a condition of a report is, as the chaperon reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    /// `Key=value`, the value of this grammar; passed on as written.
    Value(ValueKind),
    /// A word without a value (`Tree`, `PrintJobCount`); passed on as written.
    Flag,
    /// Users the report is limited to: each must be the caller, and the chaperon names the caller itself.
    Users,
    /// `Jobs=` of the job reports: each must be in scope, and the chaperon gives the list itself.
    Jobs,
    /// `Clusters=`: the local cluster or `all`, and the chaperon names the local one itself.
    Clusters,
}

/// The conditions every report takes (sreport's readers match each key by a prefix; these are
/// the full spellings, which each reader takes as the key named).
static COMMON: &[(&str, Key)] = &[
    ("Start", Key::Value(DateTimeOrBlank)),
    ("End", Key::Value(DateTimeOrBlank)),
    ("Format", Key::Value(Text)),
    ("Clusters", Key::Clusters),
];

/// How each report reads its conditions (one reader per `_set_*_cond` in src/sreport), and so
/// how the chaperon scopes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// `_set_cluster_cond`: cluster figures, as they are.
    Cluster,
    /// `_set_resv_cond`: reservations, as `scontrol show reservation` shows them.
    Reservation,
    /// `_set_assoc_cond` and the user reports' `_set_cond`: usage per user (`Users=`).
    Users,
    /// `_set_wckey_cond`: usage per user and wckey (its user key is `User=`, not `Users=`).
    Wckeys,
    /// The job reports' `_set_cond`: sizes of jobs (`Jobs=`).
    Jobs,
}

impl Report {
    fn reader(self) -> Reader {
        match self {
            Report::ClusterUtilization => Reader::Cluster,
            Report::ReservationUtilization => Reader::Reservation,
            Report::AccountUtilizationByUser | Report::UserUtilizationByAccount | Report::UserTopUsage => Reader::Users,
            Report::UserUtilizationByWckey | Report::WckeyUtilizationByUser => Reader::Wckeys,
            Report::JobSizesByAccount | Report::JobSizesByWckey | Report::JobSizesByAccountAndWckey => Reader::Jobs,
        }
    }

    /// The conditions this report takes besides `COMMON`.
    fn keys(self) -> &'static [(&'static str, Key)] {
        match self {
            Report::ClusterUtilization => &[],
            Report::ReservationUtilization => &[("Names", Key::Value(Text)), ("Nodes", Key::Value(NodeList))],
            Report::AccountUtilizationByUser | Report::UserUtilizationByAccount => {
                &[("Users", Key::Users), ("Accounts", Key::Value(Text)), ("Tree", Key::Flag)]
            }
            Report::UserTopUsage => &[
                ("Users", Key::Users),
                ("Accounts", Key::Value(Text)),
                ("TopCount", Key::Value(Text)),
                ("Group", Key::Flag),
            ],
            Report::UserUtilizationByWckey | Report::WckeyUtilizationByUser => {
                &[("User", Key::Users), ("WCKeys", Key::Value(Text))]
            }
            Report::JobSizesByAccount | Report::JobSizesByWckey | Report::JobSizesByAccountAndWckey => &[
                ("Users", Key::Users),
                ("Jobs", Key::Jobs),
                ("Accounts", Key::Value(Text)),
                ("Grouping", Key::Value(Text)),
                ("Nodes", Key::Value(NodeList)),
                ("Partitions", Key::Value(Text)),
                ("Wckeys", Key::Value(Text)),
                ("PrintJobCount", Key::Flag),
                ("FlatView", Key::Flag),
                ("AcctAsParent", Key::Flag),
            ],
        }
    }
}

/// One report asked for, its conditions checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportCall {
    pub report: Report,
    /// The type and report words as written.
    pub named: [String; 2],
    /// The conditions passed on as written, in order.
    pub passed: Vec<String>,
    /// Every user a user condition names: each must be the caller.
    pub users: Vec<String>,
    /// `Jobs=` as sreport 22.05 reads it: only the items a comma ends (`Jobs=5` is no list at
    /// all, so every job). None without `Jobs=`.
    pub jobs: Option<Vec<u32>>,
    /// Every `Clusters=` value: each name must be the local cluster or `all`.
    pub clusters: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SreportCommand {
    Report(ReportCall),
    Help,
    Version,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SreportRequest {
    /// In order. Never a denied option.
    pub options: Options,
    /// None only for a call made of --help, --usage or --version.
    pub command: Option<SreportCommand>,
}

/// `Jobs=` as sreport 22.05 splits it (job_reports.c): an item counts only when a comma ends
/// it, so the last one, unless the value ends in a comma, is dropped. Each item is a job or a
/// step (`123`, `123.0`), checked here, where sreport would read any text as a number.
fn job_items(what: &str, v: &str) -> Result<Vec<u32>, GrammarError> {
    let Some((ended, _)) = v.rsplit_once(',') else { return Ok(vec![]) };
    let items = ended.split(',').map(str::trim).filter(|i| !i.is_empty());
    items.map(|i| parse_job_ref(i, STEPS).map(|r| r.job).map_err(|why| bad_value(what, i, why))).collect()
}

fn parse_report(report: Report, named: [String; 2], words: &[String]) -> Result<ReportCall, GrammarError> {
    let what = format!("sreport {} {}", named[0], named[1]);
    let mut call = ReportCall { report, named, passed: vec![], users: vec![], jobs: None, clusters: vec![] };
    for w in words {
        validate(Text, w).map_err(|why| bad_value(&what, w, why))?;
        let (key, value) = match w.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (w.as_str(), None),
        };
        if value.is_none() && key.eq_ignore_ascii_case("All_Clusters") {
            return Err(GrammarError::Denied { opt: format!("{what} All_Clusters"), reason: OWN_CLUSTER });
        }
        let found = COMMON.iter().chain(report.keys()).find(|(k, _)| k.eq_ignore_ascii_case(key));
        let Some((name, kind)) = found else {
            return Err(bad_value(
                &what,
                w,
                match value {
                    Some(_) => "not a condition of this report (spell it in full, e.g. Start=, End=, Format=)",
                    // sreport reads a bare word as a name (a user, a cluster...), depending on the report.
                    None => "give conditions as Key=value (e.g. Users=NAME); sreport would read a bare word as a name",
                },
            ));
        };
        let value = match (kind, value) {
            (Key::Flag, None) => None,
            (Key::Flag, Some(_)) => return Err(bad_value(&what, w, "this condition takes no value")),
            (_, None) => return Err(GrammarError::MissingValue(format!("{what} {name}"))),
            // Some of sreport's readers skip a second '=' and some do not: refused, not guessed.
            (_, Some(v)) if v.starts_with('=') => return Err(bad_value(&what, w, "expected Key=value")),
            (_, Some(v)) => Some(v),
        };
        let shown = format!("{what} {name}");
        match (kind, value) {
            (Key::Users, Some(v)) => call.users.extend(user_list(&shown, v)?),
            (Key::Jobs, Some(v)) => call.jobs.get_or_insert_with(Vec::new).extend(job_items(&shown, v)?),
            (Key::Clusters, Some(v)) => call.clusters.push(v.to_string()),
            (Key::Value(kind), Some(v)) => {
                validate(*kind, v).map_err(|why| bad_value(&shown, v, why))?;
                call.passed.push(w.clone());
            }
            _ => call.passed.push(w.clone()),
        }
    }
    Ok(call)
}

/// Parses an sreport call (arguments without the program name). sreport's getopt permutes, so
/// options may come anywhere; the other arguments are one command: a report type, a report and
/// its conditions (or `help`, `version`). Without one, sreport would read commands from its
/// stdin, unchecked: refused.
pub fn parse_sreport(args: &[String]) -> Result<SreportRequest, GrammarError> {
    let p = parse(&SREPORT, args)?;
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    let Some((first, rest)) = p.positionals.split_first() else {
        if any_of(&options, &["help", "usage", "version"]) {
            return Ok(SreportRequest { options, command: None });
        }
        return Err(GrammarError::Unsupported(
            "interactive sreport is not mediated by agent-sandbox; give the report as arguments, e.g. sreport \
             cluster Utilization",
        ));
    };
    let kind = lookup(TYPES, first, "sreport ")?.ok_or_else(|| {
        bad_value("sreport", first, "not a report type (spell it in full: cluster, job, reservation, user)")
    })?;
    let command = match kind {
        "help" | "version" if !rest.is_empty() => return Err(GrammarError::Usage("too many arguments for sreport")),
        "help" => SreportCommand::Help,
        "version" => SreportCommand::Version,
        _ => {
            let kind = if kind == "resv" { "reservation" } else { kind };
            let Some((name, conditions)) = rest.split_first() else {
                return Err(GrammarError::Usage("sreport needs a report, e.g. sreport cluster Utilization"));
            };
            let report = REPORTS.iter().find(|(t, n, _)| *t == kind && n.eq_ignore_ascii_case(name));
            let Some((_, _, report)) = report else {
                return Err(bad_value(
                    &format!("sreport {first}"),
                    name,
                    "not a report of this type (spell it in full)",
                ));
            };
            SreportCommand::Report(parse_report(*report, [first.clone(), name.clone()], conditions)?)
        }
    };
    Ok(SreportRequest { options, command: Some(command) })
}

/// A job id no job can have: a local id stays below MaxJobId's ceiling (0x03FF0000), which a
/// federated id keeps in its low 26 bits, and these are all ones. `Jobs=` of it matches nothing,
/// where an empty `Jobs=` would match every job.
const NO_JOB: u32 = 0x7FFF_FFFF;

impl SreportRequest {
    /// The real sreport's arguments: the caller's options the table passes as written, the
    /// local cluster (in place of `-M`, else `--local`), then the report and its conditions, the caller's as
    /// written but for those the chaperon gives itself: the local cluster for `Clusters=`, the
    /// caller (`user`) for a report per user, the jobs of `scope` for a report on job sizes.
    fn real_args(&self, user: &str, scope: &[u32], cluster: Option<String>, local: Option<&str>) -> Vec<String> {
        let mut args = as_written(&SREPORT, &self.options);
        args.push(cluster.unwrap_or_else(|| "--local".into()));
        let mut command = vec![];
        match &self.command {
            None => {}
            Some(SreportCommand::Help) => command.push("help".to_string()),
            Some(SreportCommand::Version) => command.push("version".to_string()),
            Some(SreportCommand::Report(call)) => {
                command.extend(call.named.iter().cloned());
                command.extend(call.passed.iter().cloned());
                if let (false, Some(local)) = (call.clusters.is_empty(), local) {
                    command.push(format!("Clusters={local}"));
                }
                match call.report.reader() {
                    Reader::Cluster | Reader::Reservation => {}
                    Reader::Users => command.push(format!("Users={user}")),
                    Reader::Wckeys => command.push(format!("User={user}")),
                    Reader::Jobs => {
                        let asked = call.jobs.as_ref().filter(|j| !j.is_empty());
                        let mut jobs: Vec<u32> = asked.map_or_else(|| scope.to_vec(), Clone::clone);
                        if jobs.is_empty() {
                            jobs.push(NO_JOB);
                        }
                        // sreport counts an item only when a comma ends it (`job_items`).
                        command
                            .push(format!("Jobs={},", jobs.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
                    }
                }
            }
        }
        args.extend(words(&command));
        args
    }
}

/// sreport, scoped: utilization of the cluster and of reservations as it is, usage per user for
/// the caller alone, job sizes over the scope's jobs, the local cluster only.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_sreport(&req.argv)?;
    let local = cfg.cluster_name();
    let cluster = local_cluster_only(&parsed.options, "cluster", local)?;
    let mut scope = vec![];
    if let Some(SreportCommand::Report(report)) = &parsed.command {
        for value in &report.clusters {
            local_names_only(value, "Clusters", local)?;
        }
        only_caller(&report.users, cfg)?;
        if report.report.reader() == Reader::Jobs {
            scope = recorded_jobs_in_scope(req, cfg)?;
            in_scope(&scope, report.jobs.iter().flatten().copied())?;
        }
    }
    call.run_with(parsed.real_args(&cfg.who.user, &scope, cluster, local), stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::table::testkit::*;

    fn sr(a: &[&str]) -> Result<SreportRequest, GrammarError> {
        parse_sreport(&argv(a))
    }

    fn report(a: &[&str]) -> ReportCall {
        match sr(a).unwrap_or_else(|e| panic!("{a:?}: {e}")).command {
            Some(SreportCommand::Report(r)) => r,
            other => panic!("{a:?}: {other:?}"),
        }
    }

    /// The real arguments for the caller `me` with jobs 3 and 4 in scope, on cluster `tc`.
    fn real(a: &[&str]) -> Vec<String> {
        let p = sr(a).unwrap_or_else(|e| panic!("{a:?}: {e}"));
        let cluster = crate::checks::local_cluster_only(&p.options, "cluster", Some("tc")).unwrap();
        p.real_args("me", &[3, 4], cluster, Some("tc"))
    }

    #[test]
    fn the_table_is_sreport_22_05() {
        entries_are_the_getopt_sets(&SREPORT, &[]);
        table_is_sound(&SREPORT, 'n');
        shorts_are(
            &SREPORT,
            &[
                ('a', "all_clusters"),
                ('M', "cluster"),
                ('h', "help"),
                ('n', "noheader"),
                ('p', "parsable"),
                ('P', "parsable2"),
                ('Q', "quiet"),
                ('s', "sort"),
                ('t', "time-format"),
                ('T', "tres"),
                ('v', "verbose"),
                ('V', "version"),
            ],
        );
        optional_values_are(&SREPORT, &[]);
        let e = sr(&["--time-format=hours"]);
        assert_eq!(e, Err(GetoptError::Unrecognized("time-format=hours".into()).into()), "-t only");
        assert_eq!(sr(&["--t=cpu", "cluster", "Utilization"]).unwrap().options, [("tres", Some("cpu".into()))]);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        rebuilds_are_the_tables(&SREPORT, &["cluster", "Utilization"], &[], &[], |a| {
            let p = parse_sreport(a).map_err(|e| e.to_string())?;
            let cluster =
                crate::checks::local_cluster_only(&p.options, "cluster", Some("tc")).map_err(|e| e.to_string())?;
            Ok((p.real_args("me", &[], cluster, Some("tc")), String::new()))
        });
    }

    #[test]
    fn cluster_and_reservation_utilization_go_as_they_are() {
        assert_eq!(
            real(&["-t", "hours", "-P", "cluster", "utilization", "Start=2026-01-01", "end=now"]),
            ["-thours", "--parsable2", "--local", "cluster", "utilization", "Start=2026-01-01", "end=now"]
        );
        assert_eq!(real(&["resv", "Utilization", "Names=maint"]), ["--local", "resv", "Utilization", "Names=maint"]);
        assert_eq!(real(&["-M", "all", "cluster", "Utilization"]), ["--cluster=tc", "cluster", "Utilization"]);
        assert_eq!(real(&["--local", "cluster", "Utilization"]), ["--local", "cluster", "Utilization"]);
        assert_eq!(
            real(&["cluster", "Utilization", "Clusters=TC"]),
            ["--local", "cluster", "Utilization", "Clusters=tc"]
        );
    }

    #[test]
    fn usage_per_user_is_the_callers_own() {
        // The chaperon names the caller itself, whatever the call names (each name must be the
        // caller: the handler refuses others, see `only_caller`).
        assert_eq!(
            real(&["cluster", "AccountUtilizationByUser", "Users=me", "Tree"]),
            ["--local", "cluster", "AccountUtilizationByUser", "Tree", "Users=me"]
        );
        assert_eq!(
            real(&["user", "TopUsage", "TopCount=3"]),
            ["--local", "user", "TopUsage", "TopCount=3", "Users=me"]
        );
        // The wckey reports' key is `User=`: sreport would take `Users=` as an unknown condition
        // and report on everyone.
        assert_eq!(
            real(&["cluster", "UserUtilizationByWckey"]),
            ["--local", "cluster", "UserUtilizationByWckey", "User=me"]
        );
        assert!(sr(&["cluster", "WCKeyUtilizationByUser", "Users=me"]).is_err());
        assert_eq!(report(&["user", "TopUsage", "Users=me,bob", "users=1000"]).users, ["me", "bob", "1000"]);
    }

    #[test]
    fn job_sizes_count_the_scopes_jobs_only() {
        assert_eq!(
            real(&["job", "SizesByAccount", "PrintJobCount"]),
            ["--local", "job", "SizesByAccount", "PrintJobCount", "Jobs=3,4,"]
        );
        assert_eq!(real(&["job", "sizesbywckey", "Jobs=4,"]), ["--local", "job", "sizesbywckey", "Jobs=4,"]);
        // `Jobs=4` ends in no comma: sreport reads no job from it, so every job (in scope).
        assert_eq!(report(&["job", "SizesByAccount", "Jobs=4"]).jobs, Some(vec![]));
        assert_eq!(real(&["job", "SizesByAccount", "Jobs=4"]), ["--local", "job", "SizesByAccount", "Jobs=3,4,"]);
        assert_eq!(report(&["job", "SizesByAccount", "Jobs=5.0,6,7"]).jobs, Some(vec![5, 6]));
        let p = sr(&["job", "SizesByAccountAndWckey"]).unwrap();
        assert_eq!(
            p.real_args("me", &[], None, Some("tc")).last().unwrap(),
            "Jobs=2147483647,",
            "nothing in scope: no job"
        );
        assert!(sr(&["job", "SizesByAccount", "Jobs=x,"]).is_err());
    }

    #[test]
    fn reports_types_and_conditions_are_spelled_in_full() {
        for bad in [
            &["cluster", "util"][..],
            &["clu", "Utilization"],
            &["cluster", "Utilization", "St=now"],
            &["cluster", "Utilization", "Users=me"],
            &["user", "TopUsage", "alice"],
            &["job", "SizesByAccount", "Tree"],
            &["job", "SizesByAccount", "PrintJobCount=1"],
            &["cluster", "Utilization", "Start==now"],
            &["cluster", "Utilization", "Start"],
            &["cluster"],
            &["help", "me"],
            &["a", "b"],
        ] {
            assert!(sr(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            report(&["CLUSTER", "USERUTILIZATIONBYACCOUNT", "accounts=a"]).report,
            Report::UserUtilizationByAccount
        );
        assert_eq!(sr(&["help"]).unwrap().command, Some(SreportCommand::Help));
        assert_eq!(sr(&["-V"]).unwrap().command, None);
    }

    #[test]
    fn all_clusters_interactive_sreport_and_sort_are_refused_with_their_reason() {
        let e = sr(&["-a", "cluster", "Utilization"]).unwrap_err();
        assert!(matches!(e, GrammarError::Denied { reason, .. } if reason == OWN_CLUSTER), "{e:?}");
        let e = sr(&["cluster", "Utilization", "all_clusters"]).unwrap_err();
        assert!(matches!(e, GrammarError::Denied { reason, .. } if reason == OWN_CLUSTER), "{e:?}");
        assert!(matches!(sr(&[]), Err(GrammarError::Unsupported(_))), "sreport alone reads commands from stdin");
        assert!(matches!(sr(&["-n"]), Err(GrammarError::Unsupported(_))));
        let e = sr(&["parsable2"]).unwrap_err().to_string();
        assert!(e.contains("interactive-mode command"), "{e}");
        assert!(matches!(sr(&["-s", "name", "user", "TopUsage"]), Err(GrammarError::Denied { .. })));
        assert_eq!(report(&["cluster", "Utilization", "Clusters=a,b"]).clusters, ["a,b"]);
    }

    #[test]
    fn random_arguments_never_panic() {
        let words = [
            "cluster",
            "job",
            "user",
            "reservation",
            "Utilization",
            "TopUsage",
            "SizesByAccount",
            "Users=me",
            "Jobs=1,",
            "Start=now",
            "Tree",
            "help",
        ];
        // Every call is also parsed with a report after it, so that calls get past the command
        // words often enough for the conditions' grammar to be reached.
        never_panics(&SREPORT, &words, 0x5eed_0000_5e90_0001, |a| {
            let _ = parse_sreport(a);
            parse_sreport(&[a, &argv(&["user", "TopUsage"])].concat())
        });
    }
}
