//! scontrol: its option table and command grammar (Slurm 22.05 spellings), `parse_scontrol`,
//! which turns a call into a `ScontrolRequest`: one typed command (pure), and `handle`, which
//! lets the job commands act on jobs in scope only. Allowed: `show` of jobs, steps, nodes,
//! partitions, reservations, licenses, topology, config, federation and the hostlist helpers;
//! `hold`/`uhold`/`release`/`requeue`/`requeuehold` of job ids; `update JobId=...` of the keys in
//! `UPDATE_KEYS`; `ping`, `version`, `help`, `errnumstr`. Every other command, entity and key is
//! refused with a reason.

use crate::bounded::{MAX_CAPTURE, QUERY_TIMEOUT};
use crate::call::{Call, Stdio};
use crate::checks::{dependencies_in_scope, in_scope, jobs_in_scope};
use crate::grammar::{validate, ValueKind};
use crate::jobid::{parse_job_list, parse_job_ref, JobRef, PLAIN, RANGES, STEPS};
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::spawn::Io;
use crate::table::{
    allow, any_of, as_written, bad_value, deny, last, lookup, no, opt, parse, word, words, Arity, Class, GrammarError,
    OptSpec, Options, Table, ADMIN, BURST_BUFFER, CLUSTERS, MAIL, RUNS_OUTSIDE, WORD as A,
};
use crate::table::{output, Output, COMPLETION, JSON_VALUE};
use std::os::fd::AsFd;
use Arity::{Flag, OptionalValue as Opt, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's scontrol allow-list; ask your admin if you need it";
const ON_THIS_HOST: &str = "it reports on processes and daemons of this host, outside the jail";
const INTERACTIVE: &str = "an interactive-mode command; use the matching option (-a, -d, -o, -Q, -v) instead";
const SUBMITTED: &str = "it was checked at submission; submit the job again to change it";

/// Every option scontrol 22.05 knows. Anything else is an unrecognized option.
pub static SCONTROL: Table = Table {
    getopt: &slurm_22_05::SCONTROL,
    getopt_24_11: &crate::slurm_24_11::SCONTROL,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("all", Some('a'), Flag, Any),
        allow("details", Some('d'), Flag, Any),
        allow("federation", None, Flag, Any),
        allow("future", Some('F'), Flag, Any),
        allow("help", Some('h'), Flag, Any),
        allow("hide", None, Flag, Any),
        allow("local", None, Flag, Any),
        allow("oneliner", Some('o'), Flag, Any),
        allow("quiet", Some('Q'), Flag, Any),
        allow("sibling", None, Flag, Any),
        allow("usage", None, Flag, Any),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        deny("uid", Some('u'), Val, "scontrol acts as your own user only"),
        deny("clusters", Some('M'), Val, CLUSTERS),
        deny("cluster", None, Val, CLUSTERS),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        // Job and step views and listjobs: the chaperon narrows Slurm's JSON to the scope's jobs
        // (`scoped_json`); any other view (nodes, partitions, ping) is Slurm's, as written.
        allow("json", None, Arity::OptionalValue, Refused(JSON_VALUE)).since(crate::release::R23_02),
        allow("yaml", None, Arity::OptionalValue, Refused(JSON_VALUE))
            .rebuilt("of jobs and steps, the chaperon asks scontrol for JSON, narrows it and writes it as YAML")
            .since(crate::release::R23_02),
    ],
};

/// scontrol's commands (matched without regard to case, spelled in full: scontrol's own
/// abbreviations of its words are not modelled, see `table::lookup`).
pub static COMMANDS: &[(&str, Class)] = &[
    word("show", A),
    word("hold", A),
    word("uhold", A),
    word("release", A),
    word("requeue", A),
    word("requeuehold", A),
    word("update", A),
    word("ping", A),
    word("version", A),
    word("help", A),
    word("errnumstr", A),
    word("abort", no(ADMIN)),
    word("cancel_reboot", no(ADMIN)),
    word("create", no(ADMIN)),
    word("delete", no(ADMIN)),
    word("fsdampeningfactor", no(ADMIN)),
    word("reboot", no(ADMIN)),
    word("reboot_nodes", no(ADMIN)),
    word("reconfigure", no(ADMIN)),
    word("resume", no(ADMIN)),
    word("suspend", no(ADMIN)),
    word("schedloglevel", no(ADMIN)),
    word("setdebug", no(ADMIN)),
    word("setdebugflags", no(ADMIN)),
    word("shutdown", no(ADMIN)),
    word("takeover", no(ADMIN)),
    word("cluster", no(CLUSTERS)),
    word("listpids", no(ON_THIS_HOST)),
    // 24.05: the jobs with a slurmstepd on this host, narrowed to the scope's.
    word("listjobs", A),
    word("liststeps", no("it lists every user's steps on this host; use scontrol show step, which shows your jobs'")),
    word("pidinfo", no(ON_THIS_HOST)),
    word("token", no("it mints a Slurm credential (JWT), and credentials stay outside the sandbox")),
    word("write", no("Slurm holds the chaperon's job wrapper, not your script; read your script in the project")),
    word("notify", no(NOT_LISTED)),
    word("top", no(NOT_LISTED)),
    word("wait_job", no(NOT_LISTED)),
    word("completing", no(NOT_LISTED)),
    word("all", no(INTERACTIVE)),
    word("details", no(INTERACTIVE)),
    word("exit", no(INTERACTIVE)),
    word("hide", no(INTERACTIVE)),
    word("oneliner", no(INTERACTIVE)),
    word("quiet", no(INTERACTIVE)),
    word("quit", no(INTERACTIVE)),
    word("verbose", no(INTERACTIVE)),
];

/// What `show` may display (singular and plural spellings, as scontrol takes both).
pub static SHOW_ENTITIES: &[(&str, Class)] = &[
    word("job", A),
    word("jobs", A),
    word("step", A),
    word("steps", A),
    word("node", A),
    word("nodes", A),
    word("partition", A),
    word("partitions", A),
    word("reservation", A),
    word("reservations", A),
    word("license", A),
    word("licenses", A),
    word("topology", A),
    word("config", A),
    word("configuration", A),
    word("federation", A),
    word("hostnames", A),
    word("hostlist", A),
    word("hostlistsorted", A),
    word("assoc_mgr", no("it shows other users' associations and usage; use sshare or sacctmgr show user")),
    word("burstbuffer", no(BURST_BUFFER)),
    word("bbstat", no(BURST_BUFFER)),
    word("dwstat", no(BURST_BUFFER)),
    word("daemons", no(ON_THIS_HOST)),
    word("slurmd", no(ON_THIS_HOST)),
    word("aliases", no(NOT_LISTED)),
    word("frontend", no(NOT_LISTED)),
];

/// Keys of `update` naming something other than a job: refused.
const OTHER_ENTITIES: &[&str] = &[
    "NodeName",
    "PartitionName",
    "ReservationName",
    "StepId",
    "FrontendName",
    "SuspendExcNodes",
    "SuspendExcParts",
    "SuspendExcStates",
];

/// The job keys `update` may change. Slurm itself still refuses what a user may not do (raise
/// a time limit, change a running job's partition), so these are the keys that are safe to
/// hand to Slurm, not a promise that each change succeeds. Matched without regard to case.
pub static UPDATE_KEYS: &[OptSpec] = &[
    allow("JobName", None, Val, JobName),
    allow("Name", None, Val, JobName),
    // The chaperon keeps its scope tag out of what it shows and puts it back on update.
    allow("Comment", None, Val, Text),
    // Only lowered in effect: Slurm refuses a raise from a user; `TimeLimit+=` is refused here.
    allow("TimeLimit", None, Val, Time),
    allow("TimeMin", None, Val, Time),
    // Only 0 or more: a negative nice (a raise in priority) is for administrators. scontrol reads
    // it with strtoll and ignores trailing junk ("5x" is 5); Int refuses that, and " -5" too.
    allow("Nice", None, Opt, Int),
    // The chaperon checks every job a dependency names is in scope (`dependency_job_ids`).
    allow("Dependency", None, Val, Dependency),
    allow("StartTime", None, Val, DateTime),
    allow("EligibleTime", None, Val, DateTime),
    allow("Partition", None, Val, Text),
    allow("QOS", None, Val, Text),
    allow("Account", None, Val, Text),
    allow("ReservationName", None, Val, Text),
    allow("WCKey", None, Val, Text),
    allow("NumNodes", None, Val, Text),
    allow("ReqNodes", None, Val, Text),
    // update_job.c reads these numbers with parse_uint32/parse_uint16/parse_uint64: no unit
    // suffix, even on the memory sizes (megabytes).
    allow("NumTasks", None, Val, Uint32),
    allow("ReqProcs", None, Val, Uint32),
    allow("NumCPUs", None, Val, Text),
    allow("CPUsPerTask", None, Val, Uint16),
    allow("MinCPUsNode", None, Val, Uint16),
    allow("MinMemoryNode", None, Val, Uint64),
    allow("MinMemoryCPU", None, Val, Uint64),
    allow("TasksPerNode", None, Val, Uint16),
    allow("Gres", None, Val, Text),
    allow("Features", None, Val, Text),
    allow("Prefer", None, Val, Text),
    allow("ReqNodeList", None, Val, NodeList),
    allow("ExcNodeList", None, Val, NodeList),
    allow("Licenses", None, Val, Text),
    allow("ArrayTaskThrottle", None, Val, Int),
    allow("OverSubscribe", None, Val, YesNo),
    allow("Shared", None, Val, YesNo),
    allow("Requeue", None, Val, Uint16),
    allow("Switches", None, Val, Text),
    deny("AdminComment", None, Val, ADMIN),
    deny("SystemComment", None, Val, ADMIN),
    deny("SiteFactor", None, Val, ADMIN),
    deny("Priority", None, Val, "only a Slurm administrator may set a priority; use Nice to lower yours"),
    deny("Contiguous", None, Val, ADMIN),
    deny("MinTmpDiskNode", None, Val, ADMIN),
    deny("Deadline", None, Val, ADMIN),
    deny("MailType", None, Val, MAIL),
    deny("MailUser", None, Val, MAIL),
    deny("Clusters", None, Val, CLUSTERS),
    deny("ClusterFeatures", None, Val, CLUSTERS),
    deny("BurstBuffer", None, Val, BURST_BUFFER),
    opt("WorkDir", None, Val, Class::Denied(SUBMITTED), Any),
    opt("StdOut", None, Val, Class::Denied(SUBMITTED), Any),
    opt("StdErr", None, Val, Class::Denied(SUBMITTED), Any),
    opt("StdIn", None, Val, Class::Denied(SUBMITTED), Any),
    deny("UserID", None, Val, "jobs are picked by JobId only in agent-sandbox"),
    deny("Reboot", None, Val, RUNS_OUTSIDE),
    deny("NodeList", None, Val, NOT_LISTED),
    deny("CoreSpec", None, Val, NOT_LISTED),
    deny("ThreadSpec", None, Val, NOT_LISTED),
    deny("DelayBoot", None, Val, NOT_LISTED),
    deny("ResetAccrueTime", None, Opt, NOT_LISTED),
    deny("ReqCores", None, Val, NOT_LISTED),
    deny("ReqSockets", None, Val, NOT_LISTED),
    deny("ReqThreads", None, Val, NOT_LISTED),
    deny("wait-for-switch", None, Val, NOT_LISTED),
];

/// Keys whose value may be empty, which clears them (`Account=`, `Dependency=`...).
const CLEARABLE: &[&str] = &[
    "Account",
    "Comment",
    "Dependency",
    "ExcNodeList",
    "Features",
    "Gres",
    "Licenses",
    "Prefer",
    "QOS",
    "ReqNodeList",
    "ReservationName",
    "WCKey",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Show {
    /// One job (or array) by id, else every job in scope.
    Job(Option<JobRef>),
    /// The steps of one job, one step (`123.0`), else every step in scope.
    Step(Option<JobRef>),
    Node(Option<String>),
    Partition(Option<String>),
    Reservation(Option<String>),
    Licenses(Option<String>),
    Topology(Option<String>),
    Config,
    Federation,
    /// None: scontrol expands the caller's `SLURM_JOB_NODELIST`.
    Hostnames(Option<String>),
    Hostlist {
        hosts: String,
        sorted: bool,
    },
}

/// A job `hold`, `uhold` and `release` act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobTarget {
    Id(JobRef),
    /// `jobname=NAME`: every job of that name, which the chaperon narrows to its scope.
    Name(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    /// `Key=value`.
    Set,
    /// `TimeLimit-=value`.
    Decrease,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobChange {
    /// The key's spelling in `UPDATE_KEYS`, whatever case the caller used.
    pub key: &'static str,
    pub op: ChangeOp,
    /// None only for a bare `Nice`.
    pub value: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScontrolCommand {
    Show(Show),
    /// `hold`, or `uhold` (`user`: a hold the owner may release).
    Hold {
        targets: Vec<JobTarget>,
        user: bool,
    },
    Release(Vec<JobTarget>),
    /// `requeue`, or `requeuehold` (`hold`), with `Incomplete` and `State=SpecialExit`.
    Requeue {
        jobs: Vec<JobRef>,
        hold: bool,
        incomplete: bool,
        special_exit: bool,
    },
    Update {
        jobs: Vec<JobRef>,
        changes: Vec<JobChange>,
    },
    Ping,
    Version,
    Help,
    ErrNumStr(u32),
    /// `listjobs [NODE]` (24.05): the jobs with a slurmstepd on this host (NODE: the slurmd of
    /// that name here), narrowed to the scope's.
    ListJobs(Option<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScontrolRequest {
    /// In order. Never a denied option.
    pub options: Options,
    /// None only for a call made of --help, --usage or --version.
    pub command: Option<ScontrolCommand>,
    /// The command and its words, as written.
    pub words: Vec<String>,
}

impl ScontrolRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

/// A partition, reservation, license or switch name: one printable word.
fn name(opt: &str, v: &str) -> Result<String, GrammarError> {
    let ok = !v.is_empty() && v.len() <= 256 && validate(Text, v).is_ok() && !v.contains(char::is_whitespace);
    if ok {
        Ok(v.to_string())
    } else {
        Err(bad_value(opt, v, "expected one name without spaces"))
    }
}

fn node_list(opt: &str, v: &str) -> Result<String, GrammarError> {
    validate(NodeList, v).map(|()| v.to_string()).map_err(|why| bad_value(opt, v, why))
}

fn no_more(rest: &[String], cmd: &'static str) -> Result<(), GrammarError> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(GrammarError::Usage(cmd))
    }
}

fn parse_show(words: &[String]) -> Result<Show, GrammarError> {
    const USAGE: &str = "scontrol show needs what to show: job, step, node, partition, reservation, licenses, \
                         topology, config, federation, hostnames or hostlist";
    let first = words.first().ok_or(GrammarError::Usage(USAGE))?;
    // `show job=5` is `show job 5`.
    let (entity, inline) = match first.split_once('=') {
        Some((e, id)) => (e, Some(id.to_string())),
        None => (first.as_str(), None),
    };
    let entity = lookup(SHOW_ENTITIES, entity, "scontrol show ")?
        .ok_or_else(|| bad_value("scontrol show", entity, "not something scontrol shows (spell it out in full)"))?;
    let mut rest = words[1..].to_vec();
    let id = match inline {
        Some(id) => Some(id),
        None if rest.is_empty() => None,
        None => Some(rest.remove(0)),
    };
    no_more(&rest, "too many arguments to scontrol show: give one id, or a comma list where it takes one")?;
    let what = format!("scontrol show {entity}");
    let job =
        |syntax| id.as_deref().map(|v| parse_job_ref(v, syntax).map_err(|why| bad_value(&what, v, why))).transpose();
    let named = || id.as_deref().map(|v| name(&what, v)).transpose();
    let nodes = || id.as_deref().map(|v| node_list(&what, v)).transpose();
    let none = |shown: Show| match &id {
        Some(v) => Err(bad_value(&what, v, "this takes no argument")),
        None => Ok(shown),
    };
    Ok(match entity {
        "job" | "jobs" => Show::Job(job(PLAIN)?),
        "step" | "steps" => Show::Step(job(STEPS)?),
        "node" | "nodes" => Show::Node(nodes()?),
        "partition" | "partitions" => Show::Partition(named()?),
        "reservation" | "reservations" => Show::Reservation(named()?),
        "license" | "licenses" => Show::Licenses(named()?),
        "topology" => Show::Topology(named()?),
        "config" | "configuration" => none(Show::Config)?,
        "federation" => none(Show::Federation)?,
        "hostnames" => Show::Hostnames(nodes()?),
        _ => {
            // hostlist, hostlistsorted. A '/' would make scontrol read a file: NodeList refuses it.
            let hosts = nodes()?.ok_or(GrammarError::Usage("scontrol show hostlist needs host names"))?;
            Show::Hostlist { hosts, sorted: entity == "hostlistsorted" }
        }
    })
}

fn job_lists(cmd: &str, words: &[String]) -> Result<Vec<JobRef>, GrammarError> {
    let mut jobs = Vec::new();
    for w in words {
        jobs.extend(parse_job_list(w, RANGES).map_err(|why| bad_value(cmd, w, why))?);
    }
    Ok(jobs)
}

fn targets(cmd: &str, words: &[String]) -> Result<Vec<JobTarget>, GrammarError> {
    let mut out = Vec::new();
    for w in words {
        match w.split_at_checked(8) {
            Some((key, job_name)) if key.eq_ignore_ascii_case("jobname=") => {
                validate(JobName, job_name).map_err(|why| bad_value(cmd, w, why))?;
                out.push(JobTarget::Name(job_name.to_string()));
            }
            _ => out.extend(job_lists(cmd, std::slice::from_ref(w))?.into_iter().map(JobTarget::Id)),
        }
    }
    if out.is_empty() {
        return Err(GrammarError::Usage("name the jobs: job ids separated by commas, or jobname=NAME"));
    }
    Ok(out)
}

fn parse_requeue(words: &[String], hold: bool) -> Result<ScontrolCommand, GrammarError> {
    let cmd = if hold { "scontrol requeuehold" } else { "scontrol requeue" };
    let (mut incomplete, mut special_exit) = (false, false);
    let mut ids = Vec::new();
    for w in words {
        if w.eq_ignore_ascii_case("incomplete") {
            incomplete = true;
        } else if hold && w.eq_ignore_ascii_case("state=specialexit") {
            special_exit = true;
        } else {
            ids.push(w.clone());
        }
    }
    let jobs = job_lists(cmd, &ids)?;
    if jobs.is_empty() {
        return Err(GrammarError::Usage("name the jobs to requeue: job ids separated by commas"));
    }
    Ok(ScontrolCommand::Requeue { jobs, hold, incomplete, special_exit })
}

fn parse_update(words: &[String]) -> Result<ScontrolCommand, GrammarError> {
    let mut jobs: Option<Vec<JobRef>> = None;
    let mut changes = Vec::new();
    for w in words {
        let (key, value) = match w.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (w.as_str(), None),
        };
        if key.eq_ignore_ascii_case("JobId") {
            let v = value.unwrap_or_default();
            if jobs.is_some() {
                return Err(GrammarError::Usage("give JobId once; it takes a comma list of job ids"));
            }
            jobs = Some(parse_job_list(v, RANGES).map_err(|why| bad_value("JobId", v, why))?);
            continue;
        }
        if let Some(entity) = OTHER_ENTITIES.iter().find(|e| e.eq_ignore_ascii_case(key)) {
            return Err(GrammarError::Denied {
                opt: format!("scontrol update {entity}"),
                reason: "only jobs are updated through agent-sandbox; ask your admin for other changes",
            });
        }
        // `TimeLimit+=30` / `TimeLimit-=30` change the limit relative to the current one.
        let (key, op) = match (key.strip_suffix('+'), key.strip_suffix('-')) {
            (Some(k), _) if k.eq_ignore_ascii_case("TimeLimit") => {
                return Err(GrammarError::Denied {
                    opt: "TimeLimit+=".into(),
                    reason: "only a Slurm administrator may raise a time limit; lower it or submit again",
                })
            }
            (_, Some(k)) if k.eq_ignore_ascii_case("TimeLimit") => (k, ChangeOp::Decrease),
            _ => (key, ChangeOp::Set),
        };
        let spec = UPDATE_KEYS
            .iter()
            .find(|s| s.long.eq_ignore_ascii_case(key))
            .ok_or_else(|| bad_value("scontrol update", key, "not a job key scontrol updates (spell it in full)"))?;
        // The keys are no `Table`: a `NotListed` key is refused in scontrol's words here.
        match spec.class {
            Class::Denied(reason) => return Err(GrammarError::Denied { opt: spec.long.to_string(), reason }),
            Class::NotListed => return Err(GrammarError::Denied { opt: spec.long.to_string(), reason: NOT_LISTED }),
            Class::Allowed | Class::Rebuilt(_) => {}
        }
        let value = match (value, spec.arity) {
            (None, Arity::OptionalValue) => None,
            (None, _) => return Err(GrammarError::MissingValue(spec.long.to_string())),
            (Some(v), _) if v.is_empty() && CLEARABLE.contains(&spec.long) => Some(String::new()),
            (Some(v), _) if spec.long == "Nice" && v.starts_with('-') => {
                return Err(bad_value("Nice", v, "a negative Nice needs a Slurm administrator; use 0 or more"))
            }
            (Some(v), _) => {
                validate(spec.value, v).map_err(|why| bad_value(spec.long, v, why))?;
                Some(v.to_string())
            }
        };
        changes.push(JobChange { key: spec.long, op, value });
    }
    let jobs = jobs.ok_or(GrammarError::Usage(
        "scontrol update needs JobId=<id> in agent-sandbox (only jobs are updated, and never picked by name)",
    ))?;
    if changes.is_empty() {
        return Err(GrammarError::Usage("scontrol update: no changes given (e.g. TimeLimit=30 or Comment=...)"));
    }
    Ok(ScontrolCommand::Update { jobs, changes })
}

/// Parses an scontrol call (arguments without the program name). scontrol's getopt permutes,
/// so options may come anywhere; the other arguments are one command and its words.
/// Whether a call only reads (`show`, `ping`, `version`...): hold, release, requeue and update
/// change jobs. A call that does not parse is refused anyway.
pub fn reads_only(args: &[String]) -> bool {
    let parsed = parse_scontrol(args);
    parsed.is_ok_and(|p| {
        !matches!(
            p.command,
            Some(ScontrolCommand::Hold { .. } | ScontrolCommand::Release(_))
                | Some(ScontrolCommand::Requeue { .. } | ScontrolCommand::Update { .. })
        )
    })
}

pub fn parse_scontrol(args: &[String]) -> Result<ScontrolRequest, GrammarError> {
    let p = parse(&SCONTROL, args)?;
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    let Some((first, rest)) = p.positionals.split_first() else {
        if any_of(&options, &["help", "usage", "version"]) {
            return Ok(ScontrolRequest { options, command: None, words: vec![] });
        }
        return Err(GrammarError::Unsupported(
            "interactive scontrol is not mediated by agent-sandbox; give the command as arguments, e.g. scontrol \
             show job 123",
        ));
    };
    let cmd = lookup(COMMANDS, first, "scontrol ")?.ok_or_else(|| {
        bad_value("scontrol", first, "not a scontrol command (spell it in full: show, hold, release, update...)")
    })?;
    let command = match cmd {
        "show" => ScontrolCommand::Show(parse_show(rest)?),
        "hold" | "uhold" => ScontrolCommand::Hold { targets: targets("scontrol hold", rest)?, user: cmd == "uhold" },
        "release" => ScontrolCommand::Release(targets("scontrol release", rest)?),
        "requeue" | "requeuehold" => parse_requeue(rest, cmd == "requeuehold")?,
        "update" => parse_update(rest)?,
        "listjobs" => match rest {
            [] => ScontrolCommand::ListJobs(None),
            [node] => ScontrolCommand::ListJobs(Some(name("scontrol listjobs", node)?)),
            _ => return Err(GrammarError::Usage("scontrol listjobs takes at most one node name")),
        },
        "errnumstr" => {
            let [n] = rest else { return Err(GrammarError::Usage("scontrol errnumstr takes one error number")) };
            let v = n.parse::<u32>().ok().filter(|_| n.bytes().all(|b| b.is_ascii_digit()));
            ScontrolCommand::ErrNumStr(v.ok_or_else(|| bad_value("scontrol errnumstr", n, "expected a number"))?)
        }
        _ => {
            no_more(rest, "this scontrol command takes no arguments")?;
            match cmd {
                "ping" => ScontrolCommand::Ping,
                "version" => ScontrolCommand::Version,
                _ => ScontrolCommand::Help,
            }
        }
    };
    Ok(ScontrolRequest { options, command: Some(command), words: p.positionals })
}

impl ScontrolRequest {
    /// The real scontrol's arguments: the caller's, as written (every job they name is checked).
    fn real_args(&self) -> Vec<String> {
        let mut args = as_written(&SCONTROL, &self.options);
        // --yaml is rebuilt for the views the chaperon narrows (`narrowed_args`) only.
        if output(&self.options) == Output::Yaml {
            args.retain(|a| !a.starts_with("--json"));
            args.push("--yaml".into());
        }
        args.extend(words(&self.words));
        args
    }

    /// The real scontrol's arguments for a view the chaperon narrows to the scope (jobs,
    /// steps, listjobs) in JSON or YAML: the caller's options with `--json` in place of theirs
    /// (YAML is written from the JSON), and the words as written.
    fn narrowed_args(&self) -> Vec<String> {
        let mut args: Vec<String> =
            as_written(&SCONTROL, &self.options).into_iter().filter(|a| !a.starts_with("--json")).collect();
        args.push("--json".into());
        args.extend(words(&self.words));
        args
    }

    /// The list a narrowed JSON view holds its records in, if this call is one.
    fn narrowed_list(&self) -> Option<&'static str> {
        match (&self.command, output(&self.options)) {
            (_, Output::Table) => None,
            (Some(ScontrolCommand::Show(Show::Job(_)) | ScontrolCommand::ListJobs(_)), _) => Some("jobs"),
            (Some(ScontrolCommand::Show(Show::Step(_))), _) => Some("steps"),
            _ => None,
        }
    }
}

/// A job or step view, or listjobs, in JSON or YAML: scontrol asked for JSON (one call, every
/// job it holds, or the one named), the document narrowed to the scope (`scoped_json`) and
/// written as the caller asked.
fn narrowed_document(
    call: &Call<'_>,
    parsed: &ScontrolRequest,
    list: &str,
    ids: &[u32],
    stdio: Stdio,
) -> Result<i32, Refusal> {
    let mut cmd = call.cfg.command("scontrol");
    cmd.args(parsed.narrowed_args());
    cmd.stdin(Io::null()).stderr(stdio.stderr);
    let (out, status) = crate::bounded::capture(cmd, MAX_CAPTURE, QUERY_TIMEOUT).map_err(Refusal::Failed)?;
    let mut doc: serde_json::Value =
        serde_json::from_slice(&out).map_err(|e| Refusal::Failed(format!("scontrol --json: {e}")))?;
    crate::scoped_json::narrow(&mut doc, list, ids).map_err(Refusal::Failed)?;
    let text = match output(&parsed.options) {
        Output::Yaml => format!("---\n{}", crate::yaml::to_yaml(&doc)),
        _ => format!("{}\n", serde_json::to_string_pretty(&doc).unwrap_or_default()),
    };
    crate::bounded::write_all(stdio.stdout.as_fd(), text.as_bytes(), QUERY_TIMEOUT)
        .map_err(|e| Refusal::Failed(format!("writing scontrol's answer: {e}")))?;
    Ok(status.code().unwrap_or(1))
}

/// `listjobs` as text: scontrol's `JOBID` header and the lines of jobs in scope (stderr, where
/// it says no slurmstepd runs here, as it is).
fn narrowed_listjobs(call: &Call<'_>, parsed: &ScontrolRequest, ids: &[u32], stdio: Stdio) -> Result<i32, Refusal> {
    let mut cmd = call.cfg.command("scontrol");
    cmd.args(parsed.real_args());
    cmd.stdin(Io::null()).stderr(stdio.stderr);
    let (out, status) = crate::bounded::capture(cmd, MAX_CAPTURE, QUERY_TIMEOUT).map_err(Refusal::Failed)?;
    let text = String::from_utf8_lossy(&out);
    let kept: String = text
        .lines()
        .filter(|l| match l.trim().parse::<u32>() {
            Ok(job) => ids.contains(&job),
            Err(_) => l.trim() == "JOBID",
        })
        .map(|l| format!("{l}\n"))
        .collect();
    crate::bounded::write_all(stdio.stdout.as_fd(), kept.as_bytes(), QUERY_TIMEOUT)
        .map_err(|e| Refusal::Failed(format!("writing scontrol's answer: {e}")))?;
    Ok(status.code().unwrap_or(1))
}

/// scontrol: `show job/step` and the job commands for jobs in scope only (a bare `show job`
/// is one real call per job in scope); node, partition and config views as they are.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let (req, cfg) = (call.req, call.cfg);
    let parsed = parse_scontrol(&req.argv)?;
    let ids = jobs_in_scope(req, cfg)?;
    if let Some(list) = parsed.narrowed_list() {
        if let Some(ScontrolCommand::Show(Show::Job(Some(r)) | Show::Step(Some(r)))) = &parsed.command {
            in_scope(&ids, [r.job])?;
        }
        return narrowed_document(call, &parsed, list, &ids, stdio);
    }
    match &parsed.command {
        Some(ScontrolCommand::ListJobs(_)) => return narrowed_listjobs(call, &parsed, &ids, stdio),
        Some(ScontrolCommand::Show(Show::Job(None))) | Some(ScontrolCommand::Show(Show::Step(None))) => {
            // Every job in scope, one real call each (a bare `show job` would list everyone's).
            let step = matches!(parsed.command, Some(ScontrolCommand::Show(Show::Step(None))));
            let write = |text: &[u8]| {
                crate::bounded::write_all(stdio.stdout.as_fd(), text, QUERY_TIMEOUT)
                    .map_err(|e| Refusal::Failed(format!("writing scontrol's answer: {e}")))
            };
            if ids.is_empty() {
                write(if step { b"No job steps in the system\n" } else { b"No jobs in the system\n" })?;
                return Ok(0);
            }
            for id in ids {
                let mut cmd = cfg.command("scontrol");
                cmd.args(as_written(&SCONTROL, &parsed.options));
                cmd.args(["show", if step { "step" } else { "job" }, &id.to_string()]);
                cmd.stdin(Io::null()).stderr(Io::null());
                let (out, _) = crate::bounded::capture(cmd, MAX_CAPTURE, QUERY_TIMEOUT).map_err(Refusal::Failed)?;
                write(&out)?;
            }
            return Ok(0);
        }
        Some(ScontrolCommand::Show(Show::Job(Some(r)))) | Some(ScontrolCommand::Show(Show::Step(Some(r)))) => {
            in_scope(&ids, [r.job])?
        }
        Some(ScontrolCommand::Hold { targets, .. }) | Some(ScontrolCommand::Release(targets)) => {
            for t in targets {
                match t {
                    JobTarget::Id(r) => in_scope(&ids, [r.job])?,
                    JobTarget::Name(_) => {
                        return Err(Refusal::Unmediated("naming jobs by jobname= is not mediated; give job ids"))
                    }
                }
            }
        }
        Some(ScontrolCommand::Requeue { jobs, .. }) => in_scope(&ids, jobs.iter().map(|r| r.job))?,
        Some(ScontrolCommand::Update { jobs, changes }) => {
            in_scope(&ids, jobs.iter().map(|r| r.job))?;
            let deps: Vec<(&'static str, Option<String>)> = changes
                .iter()
                .filter(|c| c.key.eq_ignore_ascii_case("Dependency"))
                .map(|c| (c.key, c.value.clone()))
                .collect();
            dependencies_in_scope(&deps, "Dependency", req, cfg)?;
        }
        _ => {}
    }
    call.run_with(parsed.real_args(), stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::jobid::{Step, Tasks};
    use crate::table::testkit::*;
    use std::collections::HashSet;

    fn sc(a: &[&str]) -> Result<ScontrolRequest, GrammarError> {
        parse_scontrol(&argv(a))
    }

    fn cmd(a: &[&str]) -> ScontrolCommand {
        sc(a).unwrap_or_else(|e| panic!("{a:?}: {e}")).command.unwrap()
    }

    fn id(job: u32) -> JobRef {
        JobRef { job, tasks: Tasks::Whole, step: None }
    }

    fn denied(a: &[&str]) -> (String, &'static str) {
        match sc(a) {
            Err(GrammarError::Denied { opt, reason }) => (opt, reason),
            other => panic!("{a:?}: {other:?}"),
        }
    }

    #[test]
    fn the_table_is_scontrol_22_05() {
        entries_are_the_getopt_sets(&SCONTROL, &[]);
        table_is_sound(&SCONTROL, 'o');
        // From the optstring "adhM:FoQu:vV" (--usage is -h's twin, with no short form of its own).
        shorts_are(
            &SCONTROL,
            &[
                ('a', "all"),
                ('d', "details"),
                ('h', "help"),
                ('M', "clusters"),
                ('F', "future"),
                ('o', "oneliner"),
                ('Q', "quiet"),
                ('u', "uid"),
                ('v', "verbose"),
                ('V', "version"),
            ],
        );
        optional_values_are(&SCONTROL, &[]);
    }

    #[test]
    fn word_tables_are_sound() {
        for table in [COMMANDS, SHOW_ENTITIES] {
            let mut seen = HashSet::new();
            for (w, class) in table {
                assert!(seen.insert(w.to_ascii_lowercase()), "{w} twice");
                if let Class::Denied(r) = class {
                    assert!(!r.trim().is_empty() && !r.chars().any(char::is_control) && r.len() <= 100, "{w}: {r}");
                }
            }
        }
        let mut keys = HashSet::new();
        for s in UPDATE_KEYS {
            assert!(keys.insert(s.long.to_ascii_lowercase()), "{} twice", s.long);
            if let Class::Denied(r) = s.class {
                assert!(!r.trim().is_empty() && !r.chars().any(char::is_control) && r.len() <= 100, "{}", s.long);
            }
            assert!(!OTHER_ENTITIES.iter().any(|e| e.eq_ignore_ascii_case(s.long)) || s.long == "ReservationName");
        }
        for k in CLEARABLE {
            let key = UPDATE_KEYS.iter().find(|s| s.long == *k).unwrap_or_else(|| panic!("{k}"));
            assert_eq!(key.class, Class::Allowed, "{k}");
        }
    }

    #[test]
    fn show_every_allowed_entity() {
        assert_eq!(cmd(&["show", "job"]), ScontrolCommand::Show(Show::Job(None)));
        assert_eq!(cmd(&["show", "jobs", "123"]), ScontrolCommand::Show(Show::Job(Some(id(123)))));
        assert_eq!(cmd(&["SHOW", "Job=123"]), ScontrolCommand::Show(Show::Job(Some(id(123)))));
        let task = JobRef { job: 5, tasks: Tasks::One(2), step: None };
        assert_eq!(cmd(&["-d", "show", "job", "5_2"]), ScontrolCommand::Show(Show::Job(Some(task))));
        let step = JobRef { job: 5, tasks: Tasks::Whole, step: Some(Step::Id(0)) };
        assert_eq!(cmd(&["show", "step", "5.0"]), ScontrolCommand::Show(Show::Step(Some(step))));
        assert_eq!(cmd(&["show", "nodes", "n[1-2]"]), ScontrolCommand::Show(Show::Node(Some("n[1-2]".into()))));
        assert_eq!(cmd(&["show", "partition"]), ScontrolCommand::Show(Show::Partition(None)));
        assert_eq!(cmd(&["show", "partition", "gpu"]), ScontrolCommand::Show(Show::Partition(Some("gpu".into()))));
        assert_eq!(cmd(&["show", "config"]), ScontrolCommand::Show(Show::Config));
        assert_eq!(cmd(&["show", "reservations"]), ScontrolCommand::Show(Show::Reservation(None)));
        assert_eq!(cmd(&["show", "licenses", "matlab"]), ScontrolCommand::Show(Show::Licenses(Some("matlab".into()))));
        assert_eq!(cmd(&["show", "topology"]), ScontrolCommand::Show(Show::Topology(None)));
        assert_eq!(cmd(&["show", "federation"]), ScontrolCommand::Show(Show::Federation));
        assert_eq!(cmd(&["show", "hostnames"]), ScontrolCommand::Show(Show::Hostnames(None)));
        let h = cmd(&["show", "hostlistsorted", "n2,n1"]);
        assert_eq!(h, ScontrolCommand::Show(Show::Hostlist { hosts: "n2,n1".into(), sorted: true }));
        assert_eq!(sc(&["-o", "show", "job", "5"]).unwrap().last("oneliner"), Some(None));
        assert_eq!(sc(&["show", "job", "5", "--details"]).unwrap().last("details"), Some(None), "getopt permutes");
    }

    #[test]
    fn show_refuses_bad_ids_files_and_extra_words() {
        for bad in [
            &["show"][..],
            &["show", "job", "x"],
            &["show", "job", "5.0"],
            &["show", "job", "1", "2"],
            &["show", "config", "x"],
            &["show", "hostlist"],
            &["show", "hostlist", "/etc/hosts"],
            &["show", "hostnames", "/tmp/nodes"],
            &["show", "partition", "a b"],
            &["show", "jo"],
            &["show", "j"],
        ] {
            assert!(sc(bad).is_err(), "{bad:?}");
        }
        assert_eq!(denied(&["show", "assoc_mgr"]).0, "scontrol show assoc_mgr");
        assert_eq!(denied(&["show", "DAEMONS"]), ("scontrol show daemons".into(), ON_THIS_HOST));
        assert_eq!(denied(&["show", "burstbuffer"]).1, BURST_BUFFER);
    }

    #[test]
    fn hold_release_and_requeue_take_job_lists() {
        let ids = |v: &[u32]| v.iter().map(|&j| JobTarget::Id(id(j))).collect::<Vec<_>>();
        assert_eq!(cmd(&["hold", "1,2", "3"]), ScontrolCommand::Hold { targets: ids(&[1, 2, 3]), user: false });
        assert_eq!(cmd(&["uhold", "4"]), ScontrolCommand::Hold { targets: ids(&[4]), user: true });
        assert_eq!(cmd(&["release", "JobName=train"]), ScontrolCommand::Release(vec![JobTarget::Name("train".into())]));
        let r = cmd(&["release", "5_[1-3]"]);
        let ranged = JobRef { job: 5, tasks: Tasks::Ranges(vec![(1, 3)]), step: None };
        assert_eq!(r, ScontrolCommand::Release(vec![JobTarget::Id(ranged)]));
        assert_eq!(
            cmd(&["requeue", "Incomplete", "7,8"]),
            ScontrolCommand::Requeue { jobs: vec![id(7), id(8)], hold: false, incomplete: true, special_exit: false }
        );
        assert_eq!(
            cmd(&["requeuehold", "State=SpecialExit", "9"]),
            ScontrolCommand::Requeue { jobs: vec![id(9)], hold: true, incomplete: false, special_exit: true }
        );
        for bad in [
            &["hold"][..],
            &["release", "x"],
            &["hold", "jobname="],
            &["requeue"],
            &["requeue", "Incomplete"],
            &["requeue", "State=SpecialExit", "9"],
            &["hold", "1.0"],
        ] {
            assert!(sc(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn update_changes_safe_job_keys() {
        let set = |key, v: &str| JobChange { key, op: ChangeOp::Set, value: Some(v.into()) };
        assert_eq!(
            cmd(&["update", "JobId=5", "TimeLimit=30", "comment=hello world", "jobname=n"]),
            ScontrolCommand::Update {
                jobs: vec![id(5)],
                changes: vec![set("TimeLimit", "30"), set("Comment", "hello world"), set("JobName", "n")]
            }
        );
        let r = cmd(&["update", "TimeLimit-=10", "jobid=5,6", "Nice", "Account=", "Dependency=afterok:4"]);
        let ScontrolCommand::Update { jobs, changes } = r else { panic!() };
        assert_eq!(jobs, [id(5), id(6)]);
        assert_eq!(changes[0], JobChange { key: "TimeLimit", op: ChangeOp::Decrease, value: Some("10".into()) });
        assert_eq!(changes[1], JobChange { key: "Nice", op: ChangeOp::Set, value: None });
        assert_eq!(changes[2], set("Account", ""));
        assert_eq!(changes[3], set("Dependency", "afterok:4"));
        assert!(sc(&["update", "JobId=5", "Nice=100", "QOS=low", "ExcNodeList=n1", "Requeue=0"]).is_ok());
    }

    #[test]
    fn update_refuses_raises_other_entities_and_unsafe_keys() {
        assert_eq!(denied(&["update", "JobId=5", "TimeLimit+=60"]).0, "TimeLimit+=");
        assert_eq!(denied(&["update", "JobId=5", "Priority=1000"]).0, "Priority");
        assert_eq!(denied(&["update", "JobId=5", "workdir=/tmp"]), ("WorkDir".into(), SUBMITTED));
        assert_eq!(denied(&["update", "JobId=5", "StdOut=/tmp/x"]).1, SUBMITTED);
        assert_eq!(denied(&["update", "JobId=5", "MailUser=a@b"]).1, MAIL);
        assert_eq!(denied(&["update", "NodeName=n1", "State=DRAIN"]).0, "scontrol update NodeName");
        assert!(matches!(
            denied(&["update", "PartitionName=p", "MaxTime=1"]).0.as_str(),
            "scontrol update PartitionName"
        ));
        for bad in [
            &["update", "JobName=x"][..],
            &["update", "JobId=5"],
            &["update", "JobId=5", "JobId=6", "Nice=1"],
            &["update", "JobId=x", "Nice=1"],
            &["update", "JobId=5", "Nice=-5"],
            &["update", "JobId=5", "Time=5"],
            &["update", "JobId=5", "TimeLimit=soon"],
            &["update", "JobId=5", "TimeLimit"],
            &["update", "JobId=5", "ReqNodeList=/etc/hosts"],
            &["update", "JobId=5", "Comment=a\nb"],
            &["update", "JobId=5", "Nice-=1"],
        ] {
            assert!(sc(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn other_commands() {
        assert_eq!(cmd(&["ping"]), ScontrolCommand::Ping);
        assert_eq!(cmd(&["Version"]), ScontrolCommand::Version);
        assert_eq!(cmd(&["help"]), ScontrolCommand::Help);
        assert_eq!(cmd(&["errnumstr", "2011"]), ScontrolCommand::ErrNumStr(2011));
        assert!(sc(&["ping", "x"]).is_err());
        assert!(sc(&["errnumstr"]).is_err());
        assert_eq!(sc(&["--version"]).unwrap().command, None);
    }

    #[test]
    fn listjobs_and_json_views_of_jobs_are_narrowed() {
        assert_eq!(cmd(&["listjobs"]), ScontrolCommand::ListJobs(None));
        assert_eq!(cmd(&["ListJobs", "vm"]), ScontrolCommand::ListJobs(Some("vm".into())));
        assert!(sc(&["listjobs", "a", "b"]).is_err() && sc(&["listjobs", "a b"]).is_err());
        assert!(denied(&["liststeps"]).1.contains("show step"));
        crate::release::with(crate::release::R24_11, || {
            let p = sc(&["--yaml", "-d", "show", "job", "5"]).unwrap();
            assert_eq!(
                (p.narrowed_list(), p.narrowed_args()),
                (Some("jobs"), argv(&["--details", "--json", "show", "job", "5"]))
            );
            assert_eq!(sc(&["show", "steps", "--json"]).unwrap().narrowed_list(), Some("steps"));
            assert_eq!(sc(&["--json", "listjobs"]).unwrap().narrowed_list(), Some("jobs"));
            assert_eq!(sc(&["listjobs"]).unwrap().narrowed_list(), None, "text: its lines are narrowed");
            // Views of the cluster, not of jobs: Slurm's JSON or YAML as it prints them.
            let p = sc(&["--yaml", "show", "node"]).unwrap();
            assert_eq!((p.narrowed_list(), p.real_args()), (None, argv(&["--yaml", "show", "node"])));
            assert_eq!(sc(&["--json", "ping"]).unwrap().real_args(), argv(&["--json", "ping"]));
            assert!(sc(&["--json=v0.0.40", "show", "job"]).is_err(), "Slurm's own default data parser only");
        });
        // 22.05 has neither: refused as its scontrol refuses an unknown option.
        assert!(matches!(sc(&["--json", "show", "job"]), Err(GrammarError::Getopt(_))));
    }

    #[test]
    fn admin_and_host_commands_are_denied_with_their_reason() {
        assert_eq!(denied(&["reconfigure"]), ("scontrol reconfigure".into(), ADMIN));
        assert_eq!(denied(&["Shutdown", "slurmctld"]), ("scontrol shutdown".into(), ADMIN));
        assert_eq!(denied(&["listpids", "5"]).1, ON_THIS_HOST);
        assert!(denied(&["token"]).1.contains("credential"));
        assert!(denied(&["write", "batch_script", "5", "-"]).1.contains("wrapper"));
        assert_eq!(denied(&["oneliner"]).1, INTERACTIVE);
        assert_eq!(denied(&["-u", "0", "show", "job"]).0, "-u (--uid)");
        assert_eq!(denied(&["show", "job", "-M", "x"]).0, "-M (--clusters)");
    }

    #[test]
    fn no_command_unknowns_and_caps() {
        assert!(matches!(sc(&[]), Err(GrammarError::Unsupported(_))));
        assert!(matches!(sc(&["-v"]), Err(GrammarError::Unsupported(_))));
        let e = sc(&["sho", "job"]).unwrap_err();
        assert!(matches!(e, GrammarError::BadValue { ref opt, .. } if opt == "scontrol"), "{e:?}");
        assert_eq!(sc(&["--detail", "show", "job"]).unwrap().options, [("details", None)], "a prefix of --details");
        assert_eq!(sc(&["--detailed"]), Err(GetoptError::Unrecognized("detailed".into()).into()));
        let e = sc(&["--h", "ping"]).unwrap_err().to_string();
        assert_eq!(e, "option '--h' is ambiguous; possibilities: '--help' '--hide'");
        assert_eq!(sc(&["--", "show", "job"]).unwrap().command, Some(ScontrolCommand::Show(Show::Job(None))));
        let many = vec!["-o".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_scontrol(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        let words = [
            "show",
            "job",
            "jobs",
            "step",
            "node",
            "partition",
            "config",
            "hostnames",
            "hostlist",
            "hold",
            "uhold",
            "release",
            "requeue",
            "requeuehold",
            "Incomplete",
            "update",
            "JobId=5",
            "TimeLimit=5",
            "TimeLimit-=1",
            "Nice",
            "Comment=",
            "jobname=x",
            "ping",
            "5",
            "5_[1-2]",
            "6.0",
            "n[1-2]",
            "reconfigure",
            "errnumstr",
        ];
        let fuzz = |args: &[String]| {
            // Mostly a command word first, so the subcommand grammars get exercised.
            let mut a = args.to_vec();
            let known = a.first().is_some_and(|w| COMMANDS.iter().any(|(c, _)| c.eq_ignore_ascii_case(w)));
            if !known && !a.len().is_multiple_of(3) {
                let w = ["requeue", "show", "hold", "update", "show"][a.len() % 5];
                a.insert(0, w.to_string());
            }
            parse_scontrol(&a)
        };
        never_panics(&SCONTROL, &words, 0x5eed_0000_5c07_0001, fuzz);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SCONTROL, &["ping"], &[], &[], |a| {
            let p = parse_scontrol(a).map_err(|e| e.to_string())?;
            Ok((p.real_args(), String::new()))
        });
    }
}
