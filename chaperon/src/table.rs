//! The option tables' machinery: an entry (`OptSpec`: spelling, short form, arity, class, what
//! reaches Slurm, value grammar), a command's `Table` (the real command's getopt set, which every
//! spelling is resolved with, and the chaperon's entry for each option), the getopt_long-compatible
//! parser every table is read with, the const constructors the tables are written with, the
//! denial reasons several commands give, small readers over parsed options, and `as_written`, the
//! only way a caller's option reaches a real command: the table decides which do, spelled in
//! full. Knows no single command (`commands/` keeps the tables); the value grammars are
//! `grammar`'s, glibc's rules `getopt`'s. Pure; any input gives a value or an error, never a panic.

pub use crate::getopt::Arity;
use crate::getopt::{resolve, Getopt, GetoptError, LongOpt, Match};
use crate::grammar::{clip, validate, ValueKind};
use crate::release::{self, Release, Set, R22_05};

/// Most arguments one command line may carry (the stub's whole argv, or all `#SBATCH` words).
pub const MAX_ARGS: usize = 4096;
/// Most bytes all arguments together may carry.
pub const MAX_ARG_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// On the command's allow-list (see `OptSpec::rebuilt` for what reaches Slurm).
    Allowed,
    /// Refused with this reason: one line an agent can act on.
    Denied(&'static str),
    /// Refused because it is not on the command's allow-list, in the command's own words
    /// (`Table::not_listed`): one entry serves every command that has the option (sbatch's,
    /// srun's and salloc's shared groups) while each says "not on the sbatch allow-list" of its
    /// own. Read through `Table::class_of`, never alone.
    NotListed,
    /// Not on the allow-list as such, but taken: parsed and handed to the chaperon, which
    /// computes what Slurm sees itself (the user's value is an input to that, never passed
    /// through). The text says why.
    Rebuilt(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptSpec {
    pub long: &'static str,
    pub short: Option<char>,
    pub arity: Arity,
    pub class: Class,
    pub value: ValueKind,
    /// An allowed option the chaperon rebuilds all the same: what Slurm sees for it is the
    /// chaperon's (applied inside the jail, checked and replaced), never what the caller wrote.
    /// The text says why. None: the caller's option reaches Slurm as written.
    pub rebuilt: Option<&'static str>,
    /// Spelled only as its short form (`-t` of sreport): `--long` is unknown, and `long` only
    /// names it in messages and in parsed options.
    pub short_only: bool,
    /// The first release whose command has this option (22.05 for those 22.05 has, and for
    /// any older): in an older release it is unknown, as the real getopt_long has it not.
    pub since: Release,
}

impl OptSpec {
    /// Why the chaperon gives Slurm its own value for this option, if it does: a `Rebuilt`
    /// option always, an allowed one when the table says so. The one place that decides
    /// which of the caller's options reach a real command as written (`as_written`).
    pub fn rebuilt_why(&self) -> Option<&'static str> {
        match self.class {
            Class::Rebuilt(why) => Some(why),
            Class::Allowed => self.rebuilt,
            Class::Denied(_) | Class::NotListed => None,
        }
    }

    /// True if the caller's option is given to the real command as written.
    pub fn passes_as_written(&self) -> bool {
        self.class == Class::Allowed && self.rebuilt.is_none()
    }

    /// This allowed option, rebuilt by the chaperon for the reason given.
    pub(crate) const fn rebuilt(self, why: &'static str) -> OptSpec {
        OptSpec { rebuilt: Some(why), ..self }
    }

    /// This option, which the command has from `release` on.
    pub(crate) const fn since(self, release: Release) -> OptSpec {
        OptSpec { since: release, ..self }
    }

    /// This option, spelled only as its short form.
    pub(crate) const fn short_only(self) -> OptSpec {
        OptSpec { short_only: true, ..self }
    }

    /// How the caller's option is written for a real command: `--long[=value]`, or `-c[value]`
    /// for one spelled only short.
    pub(crate) fn spelled(&self, value: Option<&str>) -> String {
        match (self.short_only, self.short, value) {
            (true, Some(c), v) => format!("-{c}{}", v.unwrap_or_default()),
            (_, _, Some(v)) => format!("--{}={v}", self.long),
            (_, _, None) => format!("--{}", self.long),
        }
    }
}

/// One command's options: the real command's getopt set, which every spelling is resolved
/// with exactly as its getopt_long resolves it, and the chaperon's entry (`OptSpec`) for each
/// option, allowed or not, for every release the tables know: the getopt sets are data dumped
/// from each release's binaries (`slurm_22_05`, `slurm_24_11`), the release in effect
/// (`release::in_effect`) picks one.
#[derive(Debug)]
pub struct Table {
    /// 22.05's getopt set.
    pub getopt: &'static Getopt,
    /// 24.11's, also read for 23.02-24.05 without the options later than the release
    /// (`OptSpec::since`).
    pub getopt_24_11: &'static Getopt,
    /// The groups of entries this command shares with others (sbatch's, srun's and salloc's
    /// `job_options`), each entry written once for all of them.
    pub shared: &'static [&'static [OptSpec]],
    /// The command's own entries: those no other command has alike.
    pub own: &'static [OptSpec],
    /// Why an option of the `NotListed` class is refused, in this command's words.
    pub not_listed: &'static str,
}

impl Table {
    /// Every entry of the command, shared and its own: one per long option of either set (and
    /// per plugin option the chaperon knows), and one for each short option without a long
    /// form (`OptSpec::short_only`).
    pub fn specs(&self) -> impl Iterator<Item = &'static OptSpec> + Clone + 'static {
        let (shared, own) = (self.shared, self.own);
        shared.iter().flat_map(|group| group.iter()).chain(own)
    }

    /// What the command does with `spec`, an entry of its: a `NotListed` one is refused in the
    /// command's words. Every reader of a class that decides or shows a refusal goes through it.
    pub fn class_of(&self, spec: &OptSpec) -> Class {
        match spec.class {
            Class::NotListed => Class::Denied(self.not_listed),
            c @ (Class::Allowed | Class::Denied(_) | Class::Rebuilt(_)) => c,
        }
    }

    /// Why the command refuses `spec`, if it does.
    pub fn refusal(&self, spec: &OptSpec) -> Option<&'static str> {
        match self.class_of(spec) {
            Class::Denied(why) => Some(why),
            _ => None,
        }
    }

    /// The getopt set of `release`'s command.
    pub fn set_of(&self, release: Release) -> &'static Getopt {
        match release.set() {
            Set::V22_05 => self.getopt,
            Set::V24_11 => self.getopt_24_11,
        }
    }

    /// The getopt set of the release in effect.
    pub fn set(&self) -> &'static Getopt {
        self.set_of(release::in_effect())
    }

    /// Whether `release`'s command has the long option `l` of its set: every entry of 22.05's
    /// does; of 24.11's, those whose entry is not later than `release` (an entry the table
    /// lacks counts as there: it is refused as untabled, never unknown).
    fn has_in(&self, release: Release, l: &LongOpt) -> bool {
        release < crate::release::R23_02 || self.spec(l.name.as_str()).is_none_or(|s| s.since <= release)
    }

    /// The long options of `release`'s command, in its getopt_long's order.
    pub fn longs_of(&self, release: Release) -> impl Iterator<Item = &'static LongOpt> + Clone + '_ {
        self.set_of(release).longs.iter().filter(move |l| self.has_in(release, l))
    }

    /// The arity of short option `c` in the release in effect, if its command has it.
    pub fn short(&self, c: char) -> Option<Arity> {
        let release = release::in_effect();
        let arity = self.set_of(release).short(c)?;
        self.short_spec(c).is_none_or(|s| s.since <= release || release < crate::release::R23_02).then_some(arity)
    }

    /// The chaperon's entry for the long option named `long`.
    pub fn spec(&self, long: &str) -> Option<&'static OptSpec> {
        self.specs().find(|s| s.long == long && !s.short_only)
    }

    /// The chaperon's entry for short option `c`.
    pub fn short_spec(&self, c: char) -> Option<&'static OptSpec> {
        self.specs().find(|s| s.short == Some(c))
    }

    /// What the real command's getopt_long makes of `--name`: its long options, then those of
    /// the site's plugins the caller knows of (`plugins`, which Slurm appends).
    /// The release in effect picks the command's set.
    pub fn resolve(&self, plugins: &'static [LongOpt], name: &str) -> Match {
        resolve(self.longs_of(release::in_effect()).chain(plugins), name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// In command-line order; a later occurrence overrides an earlier one, as in Slurm.
    pub options: Vec<(&'static OptSpec, Option<String>)>,
    pub positionals: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    /// What the real command's getopt_long would report (an unknown option, an ambiguous
    /// prefix, a missing or unexpected value), in its words: the chaperon answers it as the
    /// real command does (`getopt::Reports`).
    #[error(transparent)]
    Getopt(#[from] GetoptError),
    #[error("option {opt} is not allowed in agent-sandbox: {reason}")]
    Denied { opt: String, reason: &'static str },
    /// A key or word of a command's own grammar without its value (sreport's, scontrol's).
    #[error("option {0} requires an argument")]
    MissingValue(String),
    #[error("invalid value {value:?} for {opt}: {why}")]
    BadValue { opt: String, value: String, why: &'static str },
    #[error("too many arguments: {count} (at most {max})")]
    TooManyArgs { count: usize, max: usize },
    #[error("arguments too long: {bytes} bytes (at most {max})")]
    TooLarge { bytes: usize, max: usize },
    /// A `#SBATCH` line sbatch itself would reject (unmatched quote, stray `:`).
    #[error("batch script line {line}: {why}")]
    Directive { line: usize, why: String },
    /// A `#SBATCH` word that is not an option (sbatch exits with this).
    #[error("Invalid directive found in batch script: {0}")]
    InvalidDirective(String),
    /// The batch script as a whole is one sbatch refuses (no `#!`, NUL, DOS line breaks...).
    #[error("{0}")]
    Script(&'static str),
    /// A Slurm feature agent-sandbox does not mediate (heterogeneous jobs).
    #[error("{0}")]
    Unsupported(&'static str),
    /// A combination sbatch refuses (`--wrap` with script arguments).
    #[error("{0}")]
    Usage(&'static str),
}

/// Why a spelling the real command has is refused when the chaperon's table has no entry for
/// it: the tables' tests make this unreachable for the commands' own options.
const UNTABLED: &str = "agent-sandbox has no entry for this option; ask your admin";

/// An option name as typed, cut and with control characters escaped, so an error stays one line.
fn escaped(s: &str) -> String {
    clip(s).escape_debug().to_string()
}

fn admit(table: &Table, spec: &'static OptSpec, shown: &str) -> Result<(), GrammarError> {
    match table.refusal(spec) {
        Some(reason) => Err(GrammarError::Denied { opt: shown.to_string(), reason }),
        None => Ok(()),
    }
}

fn checked(spec: &'static OptSpec, shown: &str, value: Option<&str>) -> Result<Option<String>, GrammarError> {
    match value {
        None => Ok(None),
        Some(v) => match validate(spec.value, v) {
            Ok(()) => Ok(Some(v.to_string())),
            Err(why) => Err(GrammarError::BadValue { opt: shown.to_string(), value: clip(v), why }),
        },
    }
}

/// Parses `args` (without the program name) against `table` as the real command's getopt_long
/// reads them; see `parse_with`.
pub fn parse(table: &'static Table, args: &[String]) -> Result<Parsed, GrammarError> {
    parse_with(table, &[], args)
}

/// Parses `args` (without the program name) as the real command's getopt_long reads them, with
/// the options of the site's plugins the caller knows of (`plugins`) after the command's own:
/// - a long option is its exact name, else any prefix of one that names one option only (glibc's
///   rule, over the real command's whole set, allowed or not: `table::Table::resolve`); an
///   ambiguous or unknown one is getopt's error, in its words. What reaches Slurm is always
///   spelled in full (`as_written`), so Slurm never resolves a prefix itself;
/// - `--x=v` and `--x v` for a value, `--x=v` only for an optional one; short options cluster
///   (`-vvH`, `-Ne`), a value option taking the rest of its cluster or the next argument;
/// - with a leading `+` in the optstring (sbatch, srun, salloc, sattach) the first non-option and
///   everything after it are positionals; otherwise options and positionals may mix (GNU
///   permutation). `--` ends options; `-` and an empty argument are positionals.
///
/// A denied option is an error as soon as it is seen, before its value is looked at.
pub fn parse_with(table: &'static Table, plugins: &'static [LongOpt], args: &[String]) -> Result<Parsed, GrammarError> {
    if args.len() > MAX_ARGS {
        return Err(GrammarError::TooManyArgs { count: args.len(), max: MAX_ARGS });
    }
    let bytes = args.iter().fold(0usize, |n, a| n.saturating_add(a.len()));
    if bytes > MAX_ARG_BYTES {
        return Err(GrammarError::TooLarge { bytes, max: MAX_ARG_BYTES });
    }
    let stop_at_first_positional = table.set().stops_at_first_positional();

    let mut out = Parsed { options: Vec::new(), positionals: Vec::new() };
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if arg == "--" {
            out.positionals.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(body) = arg.strip_prefix("--") {
            out.options.push(long_option(table, plugins, body, args, &mut i)?);
        } else if arg.len() > 1 && arg.starts_with('-') {
            short_cluster(table, &arg[1..], args, &mut i, &mut out.options)?;
        } else if stop_at_first_positional {
            out.positionals.extend(args[i - 1..].iter().cloned());
            break;
        } else {
            out.positionals.push(arg.to_string());
        }
    }
    Ok(out)
}

/// One long option (`body` is what follows `--`), its value taken inline or from the next
/// argument (`args[*i]`, then `*i` moves past it).
fn long_option(
    table: &'static Table,
    plugins: &'static [LongOpt],
    body: &str,
    args: &[String],
    i: &mut usize,
) -> Result<(&'static OptSpec, Option<String>), GrammarError> {
    let (name, inline) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    };
    let long = match table.resolve(plugins, name) {
        Match::Exact(l) | Match::Prefix(l) => l,
        Match::Ambiguous(ls) => {
            let possibilities = ls.iter().map(|l| l.name.as_str()).collect();
            return Err(GetoptError::Ambiguous { typed: body.to_string(), possibilities }.into());
        }
        Match::Unknown => return Err(GetoptError::Unrecognized(body.to_string()).into()),
    };
    // Named in full in messages, after what was typed when that was a prefix.
    let shown = match name == long.name.as_str() {
        true => format!("--{}", long.name.as_str()),
        false => format!("--{} (--{})", escaped(name), long.name.as_str()),
    };
    let spec = table.spec(long.name.as_str()).ok_or(GrammarError::Denied { opt: shown.clone(), reason: UNTABLED })?;
    admit(table, spec, &shown)?;
    let value = match long.arity {
        Arity::Flag if inline.is_some() => return Err(GetoptError::LongTakesNoValue(long.name.as_str()).into()),
        Arity::Flag => None,
        Arity::OptionalValue => inline,
        Arity::Value => match inline {
            Some(v) => Some(v),
            None => {
                let v = args.get(*i).ok_or(GetoptError::LongNeedsValue(long.name.as_str()))?;
                *i += 1;
                Some(v.as_str())
            }
        },
    };
    Ok((spec, checked(spec, &shown, value)?))
}

/// A cluster of short options (`-vvH`, what follows the `-`): flags, then at most one
/// value-taking option that owns the rest of the cluster, or else the next argument.
fn short_cluster(
    table: &'static Table,
    cluster: &str,
    args: &[String],
    i: &mut usize,
    options: &mut Vec<(&'static OptSpec, Option<String>)>,
) -> Result<(), GrammarError> {
    for (at, c) in cluster.char_indices() {
        let arity = table.short(c).ok_or(GetoptError::InvalidShort(c))?;
        let shown = match table.short_spec(c) {
            Some(s) if !s.short_only => format!("-{c} (--{})", s.long),
            _ => format!("-{c}"),
        };
        let spec = table.short_spec(c).ok_or(GrammarError::Denied { opt: shown.clone(), reason: UNTABLED })?;
        admit(table, spec, &shown)?;
        let rest = &cluster[at + c.len_utf8()..];
        match arity {
            Arity::Flag => options.push((spec, None)),
            Arity::OptionalValue => {
                let value = (!rest.is_empty()).then_some(rest);
                options.push((spec, checked(spec, &shown, value)?));
                return Ok(());
            }
            Arity::Value => {
                let value = if !rest.is_empty() {
                    rest
                } else {
                    let v = args.get(*i).ok_or(GetoptError::ShortNeedsValue(c))?;
                    *i += 1;
                    v.as_str()
                };
                options.push((spec, checked(spec, &shown, Some(value))?));
                return Ok(());
            }
        }
    }
    Ok(())
}

/// getopt's error as the audit log keeps it: an ambiguous prefix that could have been an option
/// in `SECRET_VALUES` is quoted without its value (the caller's stderr gets it whole, as from
/// the real command).
pub fn audit_reason(e: &GetoptError) -> String {
    match e {
        GetoptError::Ambiguous { typed, possibilities }
            if typed.contains('=') && possibilities.iter().any(|p| SECRET_VALUES.contains(p)) =>
        {
            let name = typed.split('=').next().unwrap_or_default();
            let hidden = GetoptError::Ambiguous { typed: format!("{name}=…"), possibilities: possibilities.clone() };
            hidden.to_string()
        }
        _ => e.to_string(),
    }
}

/// Long options whose values may carry secrets (`--export`'s variables): never written to the
/// audit log, however they are spelled.
const SECRET_VALUES: &[&str] = &["export"];

/// The call's arguments for the audit log, each value of an option in `SECRET_VALUES` replaced
/// by `…`, whatever prefix named it (srun's `--exp=TOKEN=x` is `--export`), or could have named
/// it (sbatch's `--exp` is ambiguous, and refused, but logged). Walks every argument, after a
/// script or program name too: hiding a word too many costs nothing.
pub fn redacted(table: &'static Table, plugins: &'static [LongOpt], args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        if std::mem::take(&mut hide_next) {
            out.push("…".to_string());
            continue;
        }
        let Some(body) = arg.strip_prefix("--").filter(|b| !b.is_empty()) else {
            out.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let secret = match table.resolve(plugins, name) {
            Match::Exact(l) | Match::Prefix(l) => SECRET_VALUES.contains(&l.name.as_str()).then_some(l.arity),
            // Refused as ambiguous, but logged: hidden if it could have meant one of them.
            Match::Ambiguous(ls) => ls.iter().any(|l| SECRET_VALUES.contains(&l.name.as_str())).then_some(Arity::Value),
            Match::Unknown => None,
        };
        match (secret, inline) {
            (Some(_), Some(_)) => out.push(format!("--{name}=…")),
            (Some(Arity::Value), None) => {
                out.push(arg.clone());
                hide_next = true;
            }
            _ => out.push(arg.clone()),
        }
    }
    out
}

pub(crate) const fn opt(
    long: &'static str,
    short: Option<char>,
    arity: Arity,
    class: Class,
    value: ValueKind,
) -> OptSpec {
    OptSpec { long, short, arity, class, value, rebuilt: None, short_only: false, since: R22_05 }
}
pub(crate) const fn allow(long: &'static str, short: Option<char>, arity: Arity, value: ValueKind) -> OptSpec {
    opt(long, short, arity, Class::Allowed, value)
}
pub(crate) const fn deny(long: &'static str, short: Option<char>, arity: Arity, reason: &'static str) -> OptSpec {
    opt(long, short, arity, Class::Denied(reason), ValueKind::Any)
}
/// An option refused for not being on the allow-list, in the words of the table that reads it.
pub(crate) const fn not_listed(long: &'static str, short: Option<char>, arity: Arity) -> OptSpec {
    opt(long, short, arity, Class::NotListed, ValueKind::Any)
}

pub(crate) const CLUSTERS: &str = "jobs go to the local cluster only, unless the sandbox policy allows other clusters";
/// `--cluster` is the same option as `--clusters` in Slurm; the chaperon checks the value of
/// `--clusters`/`-M` alone, so the other spelling is refused with a pointer to it.
pub(crate) const CLUSTER_SPELLING: &str = "spell it --clusters (or -M)";
pub(crate) const RUNS_OUTSIDE: &str = "it would run a program outside the jail on the node; do that setup in the job";
pub(crate) const BURST_BUFFER: &str = "burst-buffer staging runs outside the jail; stage data from within the job";
pub(crate) const MAIL: &str = "jobs from a sandboxed session send no e-mail; poll with squeue or sacct instead";
/// Why `--agent-sandbox` (the belt's option, where the site has it) is refused to the caller.
pub(crate) const BELT_TAG: &str = "the chaperon tags every job and step for the node's belt itself";
pub(crate) const ITERATE: &str = "it never exits; run the command again (e.g. in a loop with sleep) instead";
pub(crate) const ADMIN: &str = "only a Slurm administrator may do this; ask your admin";
/// Why sbatch's and srun's options for the job's files and environment are rebuilt
/// (`OptSpec::rebuilt`): Slurm would apply them outside the jail.
pub(crate) const OPENED_IN_JAIL: &str = "opened inside the jail on the node; Slurm writes only the job wrapper's log";
pub(crate) const APPLIED_IN_JAIL: &str = "recorded in the job directory and applied inside the jail on the node";
/// Why `--clusters` of the read-only views is rebuilt.
pub(crate) const LOCAL_CLUSTER: &str =
    "checked: the local cluster or all; Slurm is asked about the local cluster alone";
pub(crate) const EXPORT: &str =
    "applied inside the jail on the node; the wrapper itself gets only the chaperon's clean environment";

/// Why `--autocomplete` (23.02) is refused: the real command would complete every option it
/// has, the refused ones too.
pub(crate) const COMPLETION: &str =
    "it lists the real command's options, not the ones agent-sandbox allows; see the command's --help";
/// Why `--json`/`--yaml` of the commands whose text output the chaperon reads is refused.
pub(crate) const TEXT_ONLY: &str = "agent-sandbox reads this command's text output only; run it without --json/--yaml";
/// Why a data parser for `--json`/`--yaml` (an optional value since 23.02) is refused.
pub(crate) const JSON_VALUE: &str = "the chaperon reads Slurm's own default JSON; give no data parser";
/// Why srun's `--pty=FD` (24.11) is refused.
pub(crate) const PTY_VALUE: &str = "the pseudo-terminal is the chaperon's; give --pty without a value";
pub(crate) const CONTAINER_ID: &str =
    "an OCI container would start outside the jail; run it from the job's own commands";
/// Why `--stepmgr` (24.05) is refused.
pub(crate) const STEPMGR: &str = "steps managed on the job's node bypass the controller the chaperon answers to";
/// Why srun's `--external-launcher` (23.11) is refused.
pub(crate) const EXTERNAL_LAUNCHER: &str =
    "an external launcher (mpirun's) starts its daemons outside agent-sandbox's tasks; launch with srun";

/// The options of a parsed call, in command-line order: a later entry overrides an earlier one.
pub type Options = Vec<(&'static str, Option<String>)>;

/// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
pub(crate) fn last<'a>(options: &'a [(&'static str, Option<String>)], long: &str) -> Option<Option<&'a str>> {
    options.iter().rev().find(|(l, _)| *l == long).map(|(_, v)| v.as_deref())
}

/// True if any of `longs` was given: the commands print help or a version and exit before
/// they check that the call names what it acts on.
pub(crate) fn any_of(options: &[(&'static str, Option<String>)], longs: &[&str]) -> bool {
    options.iter().any(|(l, _)| longs.contains(l))
}

/// The caller's options a real command is given, in order, as `--long[=value]` with the long
/// name in full (however the caller abbreviated it: the real command then resolves nothing, so a
/// prefix can never name another option there than here): those `table` passes as written, none
/// it rebuilds (those the handler gives Slurm itself) and none it does not know (a name not in
/// the table never reaches Slurm).
pub(crate) fn as_written(table: &'static Table, options: &[(&'static str, Option<String>)]) -> Vec<String> {
    options
        .iter()
        .filter_map(|(long, value)| {
            let spec = table.specs().find(|s| s.long == *long)?;
            spec.passes_as_written().then(|| spec.spelled(value.as_deref()))
        })
        .collect()
}

/// The words after a real command's options (scontrol's command, sstat's job list...), after
/// `--` when one of them starts with `-`, so the real command reads them as words too.
pub(crate) fn words(words: &[String]) -> Vec<String> {
    let dash = words.iter().any(|w| w.starts_with('-')).then(|| "--".to_string());
    dash.into_iter().chain(words.iter().cloned()).collect()
}

/// An entry of a word table (scontrol's and sacctmgr's commands, the entities they show): a
/// word allowed, or denied with a reason.
pub(crate) const fn word(name: &'static str, class: Class) -> (&'static str, Class) {
    (name, class)
}
pub(crate) const WORD: Class = Class::Allowed;
pub(crate) const fn no(reason: &'static str) -> Class {
    Class::Denied(reason)
}

/// Looks `w` up in a word table without regard to case, spelled in full: the real commands
/// also take abbreviations of their words (`scontrol sh job`), each by its own rules, which
/// these tables do not model; a denied word is refused with its reason, shown as `{shown}{name}`.
pub(crate) fn lookup(
    table: &'static [(&'static str, Class)],
    w: &str,
    shown: &str,
) -> Result<Option<&'static str>, GrammarError> {
    match table.iter().find(|(name, _)| name.eq_ignore_ascii_case(w)) {
        Some((name, Class::Denied(reason))) => Err(GrammarError::Denied { opt: format!("{shown}{name}"), reason }),
        // Word tables give their reasons themselves (`no`); one without is refused all the same.
        Some((name, Class::NotListed)) => Err(GrammarError::Denied { opt: format!("{shown}{name}"), reason: UNTABLED }),
        Some((name, _)) => Ok(Some(name)),
        None => Ok(None),
    }
}

/// How the output is to be written, which decides how the chaperon filters it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// The last of `--json` / `--yaml`, else the table.
pub(crate) fn output(options: &[(&'static str, Option<String>)]) -> Output {
    match options.iter().rev().find(|(l, _)| *l == "json" || *l == "yaml") {
        Some(("json", _)) => Output::Json,
        Some(_) => Output::Yaml,
        None => Output::Table,
    }
}

pub(crate) fn bad_value(opt: &str, value: &str, why: &'static str) -> GrammarError {
    GrammarError::BadValue { opt: opt.to_string(), value: clip(value), why }
}

/// A `--user` style value: user names or uids separated by commas. Each one is recorded so the
/// chaperon can refuse any that is not the caller; the call never widens to other users.
pub(crate) fn user_list(opt: &str, v: &str) -> Result<Vec<String>, GrammarError> {
    let ok = |u: &str| !u.is_empty() && u.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-$@".contains(&b));
    if v.split(',').all(ok) {
        Ok(v.split(',').map(str::to_string).collect())
    } else {
        Err(bad_value(opt, v, "expected user names separated by commas (only your own user is allowed)"))
    }
}

#[cfg(test)]
pub(crate) mod testkit {
    //! Checks every command's table gets, among them the prefix test generated from the real
    //! command's getopt set, and the random-argument run each grammar must survive.
    use crate::getopt::{Getopt, GetoptError, LongOpt};
    use crate::grammar::{validate, ValueKind};
    use crate::release::R22_05;
    use crate::table::{parse, parse_with, Arity, Class, GrammarError, OptSpec, Table, MAX_ARG_BYTES};
    use std::collections::HashSet;

    pub fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    pub fn spec(table: &'static Table, long: &str) -> &'static OptSpec {
        table.specs().find(|s| s.long == long).unwrap_or_else(|| panic!("--{long} not in the table"))
    }

    /// A value each kind accepts, for round trips.
    pub fn sample(kind: ValueKind) -> &'static str {
        match kind {
            ValueKind::Text | ValueKind::Any => "x",
            ValueKind::Int | ValueKind::PositiveInt | ValueKind::Uint16 | ValueKind::Uint32 | ValueKind::Uint64 => "4",
            ValueKind::Nice => "-5",
            ValueKind::Time => "1:00:00",
            ValueKind::Memory => "4G",
            ValueKind::DateTime | ValueKind::DateTimeOrBlank => "now+1hour",
            ValueKind::NodeList => "node[01-02]",
            ValueKind::JobName => "job",
            ValueKind::Path => "out.txt",
            ValueKind::JobIdList => "123",
            ValueKind::Dependency => "afterok:123",
            ValueKind::ExportSpec => "ALL",
            ValueKind::Signal | ValueKind::SbatchSignal => "USR1@60",
            ValueKind::SignalName => "USR1",
            ValueKind::Clusters => "all",
            ValueKind::Choice(words) | ValueKind::Initial(words) => words[0],
            ValueKind::YesNo => "yes",
            // Refused whatever it is (the round trips expect the refusal).
            ValueKind::Refused(_) => "x",
        }
    }

    type Pairs = Vec<(&'static str, Option<String>)>;

    fn pairs_with(table: &'static Table, plugins: &'static [LongOpt], a: &[String]) -> Result<Pairs, GrammarError> {
        parse_with(table, plugins, a).map(|p| p.options.into_iter().map(|(s, v)| (s.long, v)).collect())
    }

    fn pairs(table: &'static Table, a: &[String]) -> Result<Pairs, GrammarError> {
        pairs_with(table, &[], a)
    }

    fn getopt(e: GetoptError) -> GrammarError {
        GrammarError::Getopt(e)
    }

    /// The table has an entry for every option of each release's getopt set (22.05's, 24.11's),
    /// with its arity (24.11's where the two differ), and for nothing else but the plugin
    /// options `plugins` (the belt's, for sbatch, srun and salloc): every long option, every
    /// short one, and a short form given to a long entry only where that long option is the
    /// same option (it returns that letter). An entry 22.05 lacks names the later release that
    /// added it (`since`); one 22.05 has, none.
    pub fn entries_are_the_getopt_sets(table: &'static Table, plugins: &[LongOpt]) {
        let sets = [(table.getopt, "22.05"), (table.getopt_24_11, "24.11")];
        let longs_of = |g: &'static Getopt| -> Vec<&LongOpt> { g.longs.iter().chain(plugins).collect() };
        for (set, release) in sets {
            for l in longs_of(set) {
                let s = table
                    .spec(l.name.as_str())
                    .unwrap_or_else(|| panic!("{release} --{} has no entry", l.name.as_str()));
                let newest =
                    table.getopt_24_11.longs.iter().chain(plugins).find(|n| n.name == l.name.as_str()).unwrap_or(l);
                assert_eq!(s.arity, newest.arity, "--{}: the entry's arity is not the real command's", l.name.as_str());
            }
        }
        for s in table.specs().filter(|s| !s.short_only) {
            let in_22_05 = longs_of(table.getopt).iter().any(|l| l.name.as_str() == s.long);
            let in_24_11 = longs_of(table.getopt_24_11).iter().any(|l| l.name.as_str() == s.long);
            assert!(in_22_05 || in_24_11, "--{} is no option of the real command", s.long);
            assert_eq!(in_22_05, s.since == R22_05, "--{}: since {} but in 22.05's set: {in_22_05}", s.long, s.since);
        }
        for (set, release) in sets {
            let longs = longs_of(set);
            let shorts: Vec<(char, Arity)> = set.shorts().collect();
            for &(c, arity) in &shorts {
                let s = table.short_spec(c).unwrap_or_else(|| panic!("{release} -{c} has no entry"));
                // sreport's -s takes a value and its --sort none: one entry, denied, serves both.
                let denied = matches!(table.class_of(s), Class::Denied(_));
                assert!(
                    s.arity == arity || (!s.short_only && denied),
                    "-{c}: the entry's arity is not the real command's"
                );
                if !s.short_only && longs.iter().any(|l| l.name.as_str() == s.long) {
                    let l = longs.iter().find(|l| l.name.as_str() == s.long).unwrap_or_else(|| panic!("--{}", s.long));
                    assert_eq!(l.returns, crate::getopt::Returns::Char(c), "-{c} is not --{} in {release}", s.long);
                }
            }
        }
        for s in table.specs() {
            if let Some(c) = s.short {
                let sets_with = sets.iter().filter(|(g, _)| g.short(c).is_some()).count();
                assert!(sets_with > 0, "-{c} is no option of the real command");
            }
        }
    }

    /// The entries 22.05 has (`since`): what the per-command lists below are written for; the
    /// later ones are checked against 24.11's binaries (`entries_are_the_getopt_sets`).
    fn of_22_05(table: &'static Table) -> impl Iterator<Item = &'static OptSpec> {
        table.specs().filter(|s| s.since == R22_05)
    }

    pub fn shorts_are(table: &'static Table, expected: &[(char, &str)]) {
        let have: HashSet<(char, &str)> = of_22_05(table).filter_map(|s| s.short.map(|c| (c, s.long))).collect();
        assert_eq!(have, expected.iter().copied().collect());
    }

    pub fn optional_values_are(table: &'static Table, expected: &[&str]) {
        let have: HashSet<&str> = of_22_05(table).filter(|s| s.arity == Arity::OptionalValue).map(|s| s.long).collect();
        assert_eq!(have, expected.iter().copied().collect());
    }

    pub fn allowed_are(table: &'static Table, expected: &[&str]) {
        let have: HashSet<&str> = of_22_05(table).filter(|s| s.class == Class::Allowed).map(|s| s.long).collect();
        let want: HashSet<&str> = expected.iter().copied().collect();
        let extra: Vec<_> = have.difference(&want).collect();
        let missing: Vec<_> = want.difference(&have).collect();
        assert!(extra.is_empty() && missing.is_empty(), "allowed but not expected {extra:?}, expected {missing:?}");
    }

    pub fn denied_with(table: &'static Table, long: &str, reason_part: &str) {
        match table.class_of(spec(table, long)) {
            Class::Denied(r) => assert!(r.contains(reason_part), "--{long}: {r}"),
            c => panic!("--{long} is {c:?}, not denied"),
        }
    }

    /// What glibc's getopt_long makes of `--name`, found here by brute force over the whole
    /// set, apart from `getopt::resolve`: the entry of that exact name; else, when every entry
    /// `name` begins is the same option (arity and return value), the first of them; else the
    /// ambiguity, listing the first and each later entry unlike it, in the array's order.
    fn expected(longs: &[&'static LongOpt], name: &str) -> Result<&'static LongOpt, Vec<&'static str>> {
        if let Some(l) = longs.iter().find(|l| l.name.as_str() == name) {
            return Ok(l);
        }
        let matching: Vec<&'static LongOpt> =
            longs.iter().copied().filter(|l| l.name.as_str().starts_with(name)).collect();
        let first = *matching.first().unwrap_or_else(|| panic!("--{name} matches nothing"));
        let same = |l: &LongOpt| l.arity == first.arity && l.returns == first.returns;
        match matching.iter().all(|l| same(l)) {
            true => Ok(first),
            false => {
                Err(matching.iter().filter(|l| std::ptr::eq(**l, first) || !same(l)).map(|l| l.name.as_str()).collect())
            }
        }
    }

    /// The prefix test, generated from the real command's getopt set (with the site's plugin
    /// options `plugins`): every prefix of every long option, from one letter to the full name
    /// (and the empty name of `--=x`), is read as glibc reads it:
    /// - one that names one option is that option in every spelling: `--p`, `--p=v`, `--p v`
    ///   as its arity allows, the getopt error where it does not (`--flag=v`, a value missing),
    ///   and a denied option's refusal, naming it in full;
    /// - an ambiguous one is getopt's error listing the possibilities glibc lists, with what
    ///   was typed after `--` (`=v` included) quoted back.
    ///
    /// Returns how many prefixes were unique and how many ambiguous.
    pub fn prefixes_are_read_as_getopt_long_reads_them(
        table: &'static Table,
        plugins: &'static [LongOpt],
    ) -> (usize, usize) {
        let longs: Vec<&'static LongOpt> = table.longs_of(crate::release::in_effect()).chain(plugins).collect();
        let mut names: Vec<&str> = vec![""];
        for l in &longs {
            names.extend((1..=l.name.as_str().len()).map(|n| &l.name.as_str()[..n]));
        }
        names.sort_unstable();
        names.dedup();
        let (mut unique, mut ambiguous) = (0, 0);
        for name in names {
            let long = format!("--{name}");
            match expected(&longs, name) {
                Err(possibilities) => {
                    ambiguous += 1;
                    ambiguous_prefix_is_getopts_error(table, plugins, name, &possibilities);
                }
                Ok(_) if name.is_empty() => panic!("every option is one: no command is like that"),
                Ok(l) => {
                    unique += 1;
                    if !unique_prefix_is_the_option(table, plugins, name, l) {
                        continue;
                    }
                }
            }
            // After `--` every word is an argument, whatever it looks like.
            if name.is_empty() {
                continue;
            }
            let p =
                parse_with(table, plugins, &["--".into(), long.clone()]).unwrap_or_else(|e| panic!("-- {long}: {e}"));
            assert!(p.options.is_empty() && p.positionals == [long.clone()], "-- {long}: {p:?}");
        }
        // A name that begins no option is getopt's "unrecognized", quoted with its value.
        let odd = "zz-no-such-option";
        assert!(longs.iter().all(|l| !l.name.as_str().starts_with(odd)));
        let typed = [format!("--{odd}=1")];
        assert_eq!(pairs_with(table, plugins, &typed), Err(getopt(GetoptError::Unrecognized(format!("{odd}=1")))));
        (unique, ambiguous)
    }

    /// An ambiguous prefix, alone and with `=1`: getopt's error listing `possibilities`.
    fn ambiguous_prefix_is_getopts_error(
        table: &'static Table,
        plugins: &'static [LongOpt],
        name: &str,
        possibilities: &[&'static str],
    ) {
        // `--` alone ends the options: the empty name is only ever typed as `--=v`.
        let spellings = match name.is_empty() {
            true => vec![format!("{name}=1")],
            false => vec![name.to_string(), format!("{name}=1")],
        };
        for typed in spellings {
            let want = getopt(GetoptError::Ambiguous { typed: typed.clone(), possibilities: possibilities.to_vec() });
            assert_eq!(pairs_with(table, plugins, &[format!("--{typed}")]), Err(want), "--{typed}");
        }
    }

    /// A prefix naming one option `l` is that option in every spelling its arity allows, and
    /// getopt's error where it does not. False for a denied option: its refusal is all there
    /// is to read.
    fn unique_prefix_is_the_option(
        table: &'static Table,
        plugins: &'static [LongOpt],
        name: &str,
        l: &'static LongOpt,
    ) -> bool {
        let one = |a: &[String]| pairs_with(table, plugins, a);
        let long = format!("--{name}");
        let s = table.spec(l.name.as_str()).unwrap_or_else(|| panic!("--{} has no entry", l.name.as_str()));
        let v = sample(s.value);
        if let Class::Denied(reason) = table.class_of(s) {
            let opt = match name == l.name.as_str() {
                true => long.clone(),
                false => format!("{long} (--{})", l.name.as_str()),
            };
            for a in [vec![long.clone()], vec![format!("{long}={v}")], vec![long.clone(), v.to_string()]] {
                assert_eq!(one(&a), Err(GrammarError::Denied { opt: opt.clone(), reason }), "{a:?}");
            }
            return false;
        }
        let val = Some(v.to_string());
        match l.arity {
            Arity::Flag => {
                assert_eq!(one(std::slice::from_ref(&long)), Ok(vec![(s.long, None)]), "{long}");
                let e = getopt(GetoptError::LongTakesNoValue(l.name.as_str()));
                assert_eq!(one(&[format!("{long}={v}")]), Err(e), "{long}={v}");
            }
            Arity::Value => {
                assert_eq!(one(&[format!("{long}={v}")]), Ok(vec![(s.long, val.clone())]), "{long}={v}");
                assert_eq!(one(&[long.clone(), v.to_string()]), Ok(vec![(s.long, val)]), "{long} {v}");
                let e = getopt(GetoptError::LongNeedsValue(l.name.as_str()));
                assert_eq!(one(std::slice::from_ref(&long)), Err(e), "{long}");
            }
            Arity::OptionalValue => {
                assert_eq!(one(std::slice::from_ref(&long)), Ok(vec![(s.long, None)]), "{long}");
                let given = one(&[format!("{long}={v}")]);
                match s.value {
                    ValueKind::Refused(_) => {
                        assert!(matches!(given, Err(GrammarError::BadValue { .. })), "{long}={v}: {given:?}")
                    }
                    _ => assert_eq!(given, Ok(vec![(s.long, val)]), "{long}={v}"),
                }
                // The next argument is never an optional value (a positional, or an option).
                let next = one(&[long.clone(), "--".into(), v.to_string()]);
                assert_eq!(next, Ok(vec![(s.long, None)]), "{long} -- {v}");
            }
        }
        true
    }

    /// The checks sbatch.rs makes on its table, for any table. `flag` is an allowed short flag
    /// to cluster the others with.
    pub fn table_is_sound(table: &'static Table, flag: char) {
        for release in [R22_05, crate::release::R24_11] {
            crate::release::with(release, || sound_in_release(table, flag));
        }
    }

    fn sound_in_release(table: &'static Table, flag: char) {
        let f = spec(table, table.specs().find(|s| s.short == Some(flag)).map(|s| s.long).unwrap_or("?"));
        assert!(f.class == Class::Allowed && f.arity == Arity::Flag, "-{flag} must be an allowed flag");
        entries_are_well_formed(table);
        for s in table.specs() {
            long_form_is_read(table, s);
            short_form_is_read(table, s, f, flag);
        }
        // A letter the real command has not is getopt's "invalid option", alone or in a cluster.
        let none = ('a'..='z').chain('A'..='Z').find(|c| table.short(*c).is_none()).unwrap_or('@');
        assert_eq!(pairs(table, &[format!("-{flag}{none}")]), Err(getopt(GetoptError::InvalidShort(none))));
    }

    /// Each name once, each a plain option name, each reason one short line.
    fn entries_are_well_formed(table: &'static Table) {
        let mut longs = HashSet::new();
        let mut shorts = HashSet::new();
        for s in table.specs() {
            assert!(longs.insert(s.long), "--{} twice", s.long);
            assert!(!s.long.is_empty() && !s.long.starts_with('-') && !s.long.contains('='), "--{}", s.long);
            if let Some(c) = s.short {
                assert!(shorts.insert(c), "-{c} twice");
                assert!(c.is_ascii_alphabetic(), "-{c}");
            }
            if let Class::Denied(r) | Class::Rebuilt(r) = table.class_of(s) {
                assert!(!r.trim().is_empty(), "--{} has no reason", s.long);
                assert!(!r.chars().any(char::is_control), "--{} reason is not one line", s.long);
                assert!(r.len() <= 100, "--{} reason is too long for one line", s.long);
            }
            if let Some(r) = s.rebuilt {
                assert_eq!(s.class, Class::Allowed, "--{}: only an allowed option is rebuilt besides", s.long);
                assert!(!r.trim().is_empty() && !r.chars().any(char::is_control), "--{}: {r:?}", s.long);
                assert!(r.len() <= 100, "--{} rebuilt reason is too long for one line", s.long);
            }
            assert!(!s.short_only || s.short.is_some(), "--{} is spelled by no form", s.long);
        }
    }

    /// `s`'s long name, in every spelling: refused when denied, else read with its arity in
    /// the release in effect, a value with a control character refused.
    fn long_form_is_read(table: &'static Table, s: &'static OptSpec) {
        let long = format!("--{}", s.long);
        let v = sample(s.value);
        if s.short_only {
            // Only its short form (checked below): the long name is no option.
            let e = parse(table, std::slice::from_ref(&long));
            assert!(matches!(e, Err(GrammarError::Getopt(_))), "{long}: {e:?}");
            return;
        }
        if table.longs_of(crate::release::in_effect()).all(|l| l.name.as_str() != s.long) {
            // A plugin's option: the prefix test reads it where the site has the plugin.
            return;
        }
        let with_eq = format!("{long}={v}");
        if let Class::Denied(reason) = table.class_of(s) {
            for a in [vec![long.clone()], vec![with_eq.clone()], vec![long.clone(), v.to_string()]] {
                let want = GrammarError::Denied { opt: long.clone(), reason };
                assert_eq!(parse(table, &a), Err(want), "{a:?}");
            }
            return;
        }
        let one = |a: Vec<String>| pairs(table, &a).unwrap_or_else(|e| panic!("{a:?}: {e}"));
        let val = Some(v.to_string());
        // The arity of the release in effect (sacct's --json: a flag in 22.05).
        let arity = table
            .longs_of(crate::release::in_effect())
            .find(|l| l.name.as_str() == s.long)
            .map_or(s.arity, |l| l.arity);
        match arity {
            Arity::Flag => {
                assert_eq!(one(vec![long.clone()]), [(s.long, None)]);
                assert_eq!(pairs(table, &[with_eq]), Err(getopt(GetoptError::LongTakesNoValue(s.long))));
            }
            Arity::Value => {
                assert_eq!(one(vec![with_eq]), [(s.long, val.clone())]);
                assert_eq!(one(vec![long.clone(), v.to_string()]), [(s.long, val)]);
                let missing = pairs(table, std::slice::from_ref(&long));
                assert_eq!(missing, Err(getopt(GetoptError::LongNeedsValue(s.long))));
            }
            Arity::OptionalValue if matches!(s.value, ValueKind::Refused(_)) => {
                assert_eq!(one(vec![long.clone()]), [(s.long, None)]);
                let e = pairs(table, &[with_eq]);
                assert!(matches!(e, Err(GrammarError::BadValue { .. })), "{long}: {e:?}");
            }
            Arity::OptionalValue => {
                assert_eq!(one(vec![long.clone()]), [(s.long, None)]);
                assert_eq!(one(vec![with_eq]), [(s.long, val)]);
            }
        }
        if arity != Arity::Flag {
            for bad in ["\n", "\0", "\r", "\u{1b}[2J"] {
                let v = format!("{v}{bad}x");
                let a = [format!("--{}={v}", s.long)];
                assert!(matches!(parse(table, &a), Err(GrammarError::BadValue { .. })), "{a:?}");
                assert!(validate(s.value, &v).is_err());
            }
        }
    }

    /// `s`'s short form, where the release in effect has it: alone, with its value attached
    /// or next, and clustered after the allowed flag `f` (`-{flag}`).
    fn short_form_is_read(table: &'static Table, s: &'static OptSpec, f: &'static OptSpec, flag: char) {
        let v = sample(s.value);
        let Some(c) = s.short.filter(|_| s.since <= crate::release::in_effect()) else { return };
        // The real command's arity for the short form (sreport's -s takes a value, --sort none).
        let arity = table.short(c).unwrap_or_else(|| panic!("-{c} is no option of the real command"));
        if let Class::Denied(reason) = table.class_of(s) {
            let shown = if s.short_only { format!("-{c}") } else { format!("-{c} (--{})", s.long) };
            let want = Err(GrammarError::Denied { opt: shown, reason });
            assert_eq!(pairs(table, &[format!("-{c}{v}")]), want);
            assert_eq!(pairs(table, &[format!("-{flag}{flag}{c}"), v.to_string()]), want, "clustered after flags");
            return;
        }
        match arity {
            Arity::Flag => {
                assert_eq!(pairs(table, &[format!("-{c}")]), Ok(vec![(s.long, None)]));
                let both = Ok(vec![(s.long, None), (f.long, None), (s.long, None)]);
                assert_eq!(pairs(table, &[format!("-{c}{flag}{c}")]), both, "clustered");
            }
            Arity::Value | Arity::OptionalValue => {
                let one = Ok(vec![(s.long, Some(v.to_string()))]);
                assert_eq!(pairs(table, &[format!("-{c}{v}")]), one);
                let after = pairs(table, &[format!("-{flag}{flag}{c}{v}")]).map(|o| o[2..].to_vec());
                assert_eq!(after, one, "after clustered flags");
                if arity == Arity::Value {
                    assert_eq!(pairs(table, &[format!("-{c}"), v.to_string()]), one);
                    assert_eq!(pairs(table, &[format!("-{flag}{c}")]), Err(getopt(GetoptError::ShortNeedsValue(c))));
                }
            }
        }
    }

    /// The table decides what the chaperon rebuilds: `plan` is what a command's handler makes of
    /// a call before it touches anything (the real command's arguments, and what it takes from
    /// the call for itself, such as sbatch's job record, as Debug text). Every option the caller
    /// may give, with a sample value (from `values` where the sample does not fit), is put before
    /// `base` (a call without options), and:
    /// - an option the table passes as written reaches the real command as written, and changes
    ///   nothing else the handler does (`informs` names those it reads to decide something and
    ///   still passes on, such as sbatch's `--array` for the default output name);
    /// - so an option the handler reads for itself, or gives Slurm itself, must be one the table
    ///   rebuilds: else the caller's value would reach Slurm beside the chaperon's, or be applied
    ///   outside the jail as well as inside it.
    pub fn rebuilds_are_the_tables(
        table: &'static Table,
        base: &[&str],
        values: &[(&str, &str)],
        informs: &[&str],
        plan: impl Fn(&[String]) -> Result<(Vec<String>, String), String>,
    ) {
        for release in [R22_05, crate::release::R24_11] {
            crate::release::with(release, || rebuilds_in_release(table, base, values, informs, &plan));
        }
    }

    fn rebuilds_in_release(
        table: &'static Table,
        base: &[&str],
        values: &[(&str, &str)],
        informs: &[&str],
        plan: &impl Fn(&[String]) -> Result<(Vec<String>, String), String>,
    ) {
        let release = crate::release::in_effect();
        let (base_args, base_taken) = plan(&argv(base)).unwrap_or_else(|e| panic!("{base:?}: {e}"));
        // The options of the release in effect, with its arity.
        let arity_in = |s: &OptSpec| match s.short_only {
            true => (s.since <= release).then_some(s.arity),
            false => table.longs_of(release).find(|l| l.name.as_str() == s.long).map(|l| l.arity),
        };
        for s in table.specs().filter(|s| !matches!(table.class_of(s), Class::Denied(_))) {
            let Some(arity) = arity_in(s) else { continue };
            let v = values.iter().find(|(l, _)| *l == s.long).map(|(_, v)| *v).unwrap_or(sample(s.value));
            let value = (arity != Arity::Flag && !matches!(s.value, ValueKind::Refused(_))).then_some(v);
            let spelled = s.spelled(value);
            let mut call = vec![spelled.clone()];
            call.extend(argv(base));
            let (mut args, taken) = plan(&call).unwrap_or_else(|e| panic!("{call:?}: {e} (give the option a value)"));
            if !s.passes_as_written() {
                continue;
            }
            let at = args.iter().position(|a| *a == spelled);
            let at = at.unwrap_or_else(|| panic!("--{} passes as written but is not in {args:?}", s.long));
            args.remove(at);
            if informs.contains(&s.long) {
                continue;
            }
            assert_eq!(args, base_args, "--{} changes what the chaperon gives Slurm: rebuild it in the table", s.long);
            assert_eq!(taken, base_taken, "--{} changes what the chaperon takes for itself: rebuild it", s.long);
        }
    }

    /// xorshift64*: deterministic, no dependency.
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
            &xs[self.below(xs.len())]
        }
    }

    const ATOMS: &[&str] = &[
        "-",
        "--",
        "=",
        ":",
        ",",
        "?",
        "@",
        "#",
        "\"",
        "'",
        "\\",
        " ",
        "\t",
        "\n",
        "\r",
        "\0",
        "\x0b",
        "\u{1b}",
        "é",
        "\u{2028}",
        "a",
        "Z",
        "0",
        "9",
        "1",
        "12",
        "_",
        "*",
        "[",
        "]",
        "/",
        ".",
        "+",
        "%",
        "ALL",
        "USR1",
        "afterok:",
        "batch",
        "job",
        "JobId=",
        "TimeLimit",
        "show",
        "hold",
        "update",
        "user",
        "qos",
        "list",
        "jobname=",
        "v",
        "x",
        "%j",
        "SIG",
        "B:",
        "4294967296",
        "123_[1-3]",
        "7.0",
    ];

    fn token(rng: &mut Rng, table: &'static Table, words: &[&str]) -> String {
        let junk = |rng: &mut Rng| (0..rng.below(5)).map(|_| *rng.pick(ATOMS)).collect::<String>();
        let specs: Vec<&OptSpec> = table.specs().collect();
        // A real long name, or a prefix of one (unique, ambiguous or empty).
        let name = |rng: &mut Rng| {
            let long = rng.pick(&specs).long;
            match rng.below(2) {
                0 => long.to_string(),
                _ => long.chars().take(rng.below(long.len() + 1)).collect(),
            }
        };
        match rng.below(6) {
            0 => format!("--{}", name(rng)),
            1 => format!("-{}", rng.pick(&specs).short.unwrap_or('v')),
            2 => format!("--{}={}", name(rng), junk(rng)),
            3 if !words.is_empty() => rng.pick(words).to_string(),
            4 => format!("{}{}", rng.pick(ATOMS), rng.pick(ATOMS)),
            _ => junk(rng),
        }
    }

    /// Feeds `runs` random argument vectors (real option names, `words` the command reads as
    /// positionals, and junk) to `parse_cmd`: it must never panic, errors stay short, and both
    /// outcomes must be reached, or the generator tests nothing.
    pub fn never_panics<T>(
        table: &'static Table,
        words: &[&str],
        seed: u64,
        parse_cmd: impl Fn(&[String]) -> Result<T, GrammarError>,
    ) {
        let mut rng = Rng(seed);
        let mut outcomes = [0usize; 2];
        for _ in 0..20_000 {
            // A third of the runs use only the command's own words, so its sub-grammar (scontrol's
            // commands, sacctmgr's entities) gets past the first word often enough to be tested.
            let args: Vec<String> = if !words.is_empty() && rng.below(3) == 0 {
                (0..rng.below(5)).map(|_| rng.pick(words).to_string()).collect()
            } else {
                (0..rng.below(7)).map(|_| token(&mut rng, table, words)).collect()
            };
            let r = parse_cmd(&args);
            outcomes[r.is_ok() as usize] += 1;
            if let Err(e) = r {
                assert!(e.to_string().len() < 2 * MAX_ARG_BYTES);
            }
            let _ = parse(table, &args);
        }
        assert!(outcomes[0] > 500 && outcomes[1] > 500, "{outcomes:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::{long, Reports, Returns::*};
    use Arity::*;

    static SPECS: &[OptSpec] = &[
        opt("verbose", Some('v'), Flag, Class::Allowed, ValueKind::Any),
        opt("version", Some('V'), Flag, Class::Allowed, ValueKind::Any),
        opt("hold", Some('H'), Flag, Class::Allowed, ValueKind::Any),
        opt("name", Some('J'), Value, Class::Allowed, ValueKind::JobName),
        opt("time", Some('t'), Value, Class::Allowed, ValueKind::Time),
        opt("excl", None, OptionalValue, Class::Allowed, ValueKind::Choice(&["user", "mcs"])),
        opt("level", Some('k'), OptionalValue, Class::Allowed, ValueKind::Int),
        opt("secret", Some('S'), Value, Class::Denied("secrets stay home"), ValueKind::Any),
        opt("dir", Some('D'), Value, Class::Rebuilt("cwd comes from the request"), ValueKind::Path),
        opt("export", None, Value, Class::Allowed, ValueKind::ExportSpec),
    ];
    static LONGS: &[LongOpt] = &[
        long("verbose", Flag, Char('v')),
        long("version", Flag, Char('V')),
        long("hold", Flag, Char('H')),
        long("name", Value, Char('J')),
        long("time", Value, Char('t')),
        long("excl", OptionalValue, Code(300)),
        long("level", OptionalValue, Char('k')),
        long("secret", Value, Char('S')),
        long("dir", Value, Char('D')),
        long("export", Value, Code(301)),
    ];
    const REPORTS: Reports = Reports { try_help: true, status: 1 };
    /// Options end at the first positional (`+`, as sbatch), or mix with them (as squeue).
    static STOPS: Getopt = Getopt { optstring: "+vVHJ:t:k::S:D:", longs: LONGS, plugins: false, reports: REPORTS };
    static MIXES: Getopt = Getopt { optstring: "vVHJ:t:k::S:D:", longs: LONGS, plugins: false, reports: REPORTS };
    const WORDS: &str = "not on the test's allow-list";
    static T: Table = Table { getopt: &STOPS, getopt_24_11: &STOPS, shared: &[], own: SPECS, not_listed: WORDS };
    static TM: Table = Table { getopt: &MIXES, getopt_24_11: &MIXES, shared: &[], own: SPECS, not_listed: WORDS };

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    type Options = Vec<(&'static str, Option<String>)>;

    /// (long, value) pairs and positionals, for compact asserts.
    fn run(a: &[&str], stop: bool) -> Result<(Options, Vec<String>), GrammarError> {
        let p = parse(if stop { &T } else { &TM }, &argv(a))?;
        Ok((p.options.into_iter().map(|(s, v)| (s.long, v)).collect(), p.positionals))
    }

    fn opts(a: &[&str]) -> Options {
        run(a, true).unwrap().0
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    fn getopt(e: GetoptError) -> Result<(Options, Vec<String>), GrammarError> {
        Err(GrammarError::Getopt(e))
    }

    #[test]
    fn long_options_take_values_after_equals_or_as_the_next_argument() {
        assert_eq!(opts(&["--name=x"]), [("name", some("x"))]);
        assert_eq!(opts(&["--name", "x"]), [("name", some("x"))]);
        assert_eq!(opts(&["--name=a=b"]), [("name", some("a=b"))]);
        assert_eq!(opts(&["--verbose", "--time=5"]), [("verbose", None), ("time", some("5"))]);
    }

    #[test]
    fn a_unique_prefix_is_its_option_in_every_spelling() {
        assert_eq!(opts(&["--verb"]), [("verbose", None)]);
        assert_eq!(
            opts(&["--nam=x", "--na", "y", "--n", "z"]),
            [("name", some("x")), ("name", some("y")), ("name", some("z"))]
        );
        assert_eq!(opts(&["--exc=user", "--exc"]), [("excl", some("user")), ("excl", None)]);
        assert_eq!(opts(&["--exp=ALL"]), [("export", some("ALL"))]);
        assert_eq!(run(&["--verb=1"], true), getopt(GetoptError::LongTakesNoValue("verbose")), "named in full");
        assert_eq!(run(&["--nam"], true), getopt(GetoptError::LongNeedsValue("name")), "named in full");
    }

    #[test]
    fn an_ambiguous_prefix_is_getopts_error_with_what_was_typed() {
        let amb = |typed: &str, possibilities: Vec<&'static str>| {
            getopt(GetoptError::Ambiguous { typed: typed.into(), possibilities })
        };
        assert_eq!(run(&["--ver"], true), amb("ver", vec!["verbose", "version"]));
        assert_eq!(run(&["--ver=1"], true), amb("ver=1", vec!["verbose", "version"]));
        assert_eq!(run(&["--e"], true), amb("e", vec!["excl", "export"]));
        assert_eq!(run(&["--=x"], true), amb("=x", LONGS.iter().map(|l| l.name.as_str()).collect()), "the empty name");
        let e = run(&["--ver"], true).unwrap_err().to_string();
        assert_eq!(e, "option '--ver' is ambiguous; possibilities: '--verbose' '--version'");
    }

    #[test]
    fn short_options_take_attached_or_separate_values() {
        assert_eq!(opts(&["-Jx"]), [("name", some("x"))]);
        assert_eq!(opts(&["-J", "x"]), [("name", some("x"))]);
        assert_eq!(opts(&["-J=x"]), [("name", some("=x"))], "getopt keeps the '=' of -J=x");
    }

    #[test]
    fn clustered_flags_end_in_at_most_one_value_option() {
        assert_eq!(opts(&["-vvH"]), [("verbose", None), ("verbose", None), ("hold", None)]);
        assert_eq!(opts(&["-vHJjob"]), [("verbose", None), ("hold", None), ("name", some("job"))]);
        assert_eq!(opts(&["-vHJ", "job"]), [("verbose", None), ("hold", None), ("name", some("job"))]);
        // Once a value option is met, the rest of the cluster is its value, never more options.
        assert_eq!(opts(&["-JvS"]), [("name", some("vS"))]);
        assert_eq!(run(&["-vz"], true), getopt(GetoptError::InvalidShort('z')));
        assert_eq!(run(&["-vt"], true), getopt(GetoptError::ShortNeedsValue('t')));
        assert_eq!(run(&["-v:"], true), getopt(GetoptError::InvalidShort(':')), "':' is never an option");
        assert_eq!(run(&["-+"], true), getopt(GetoptError::InvalidShort('+')), "nor the optstring's '+'");
    }

    #[test]
    fn a_value_may_look_like_an_option_as_getopt_takes_it() {
        assert_eq!(opts(&["--name", "--secret"]), [("name", some("--secret"))]);
        assert_eq!(opts(&["-J", "-S"]), [("name", some("-S"))]);
    }

    #[test]
    fn double_dash_ends_options() {
        assert_eq!(run(&["-v", "--", "-J", "x"], true).unwrap(), (vec![("verbose", None)], argv(&["-J", "x"])));
        assert_eq!(run(&["-v", "--", "-J", "x"], false).unwrap(), (vec![("verbose", None)], argv(&["-J", "x"])));
        assert_eq!(run(&["--"], true).unwrap(), (vec![], vec![]));
        // After the first positional (sbatch: the script) a "--" belongs to the script's arguments.
        assert_eq!(run(&["job.sh", "--", "-v"], true).unwrap(), (vec![], argv(&["job.sh", "--", "-v"])));
    }

    #[test]
    fn lone_dash_and_empty_string_are_positionals() {
        assert_eq!(run(&["-", "-v"], true).unwrap(), (vec![], argv(&["-", "-v"])));
        assert_eq!(run(&["-v", ""], true).unwrap(), (vec![("verbose", None)], argv(&[""])));
        assert_eq!(run(&["-", "-v"], false).unwrap(), (vec![("verbose", None)], argv(&["-"])));
    }

    #[test]
    fn options_after_the_first_positional_are_arguments_when_stopping() {
        let (o, p) = run(&["-v", "job.sh", "-J", "x", "--secret=1"], true).unwrap();
        assert_eq!((o, p), (vec![("verbose", None)], argv(&["job.sh", "-J", "x", "--secret=1"])));
        // Without stopping (GNU permutation), options anywhere are options.
        let (o, p) = run(&["-v", "job.sh", "-J", "x", "arg"], false).unwrap();
        assert_eq!((o, p), (vec![("verbose", None), ("name", some("x"))], argv(&["job.sh", "arg"])));
        assert!(matches!(run(&["a", "--secret=1"], false), Err(GrammarError::Denied { .. })));
    }

    #[test]
    fn unknown_options_are_getopts_error_quoting_what_was_typed() {
        assert_eq!(run(&["--verbs"], true), getopt(GetoptError::Unrecognized("verbs".into())));
        assert_eq!(run(&["--nom=x"], true), getopt(GetoptError::Unrecognized("nom=x".into())));
        assert_eq!(run(&["--Verbose"], true), getopt(GetoptError::Unrecognized("Verbose".into())), "case counts");
        assert_eq!(run(&["---v"], true), getopt(GetoptError::Unrecognized("-v".into())));
        let e = run(&["--verbs"], true).unwrap_err().to_string();
        assert_eq!(e, "unrecognized option '--verbs'");
        // A name with a newline in it is echoed escaped: the error stays one line.
        let e = run(&["--a\nb"], true).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.contains("--a\\nb"), "{e}");
        let e = run(&["-\u{1b}"], true).unwrap_err().to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
    }

    #[test]
    fn missing_and_unexpected_values() {
        assert_eq!(run(&["--name"], true), getopt(GetoptError::LongNeedsValue("name")));
        assert_eq!(run(&["-J"], true), getopt(GetoptError::ShortNeedsValue('J')));
        assert_eq!(run(&["--verbose=1"], true), getopt(GetoptError::LongTakesNoValue("verbose")));
        assert_eq!(run(&["--verbose="], true), getopt(GetoptError::LongTakesNoValue("verbose")));
    }

    #[test]
    fn optional_values_only_attach() {
        assert_eq!(opts(&["--excl"]), [("excl", None)]);
        assert_eq!(opts(&["--excl=user"]), [("excl", some("user"))]);
        assert_eq!(opts(&["--excl=MCS"]), [("excl", some("MCS"))]);
        assert_eq!(run(&["--excl", "user"], true).unwrap(), (vec![("excl", None)], argv(&["user"])));
        assert_eq!(opts(&["-k5"]), [("level", some("5"))]);
        assert_eq!(opts(&["-vk"]), [("verbose", None), ("level", None)]);
        assert_eq!(run(&["-k", "5"], true).unwrap(), (vec![("level", None)], argv(&["5"])));
        assert!(matches!(run(&["--excl=other"], true), Err(GrammarError::BadValue { .. })));
        assert!(matches!(run(&["--excl="], true), Err(GrammarError::BadValue { .. })));
    }

    #[test]
    fn denied_options_are_refused_with_their_reason_in_every_spelling() {
        let denied = |opt: &str| Err(GrammarError::Denied { opt: opt.into(), reason: "secrets stay home" });
        assert_eq!(run(&["--secret=x"], true), denied("--secret"));
        assert_eq!(run(&["--secret", "x"], true), denied("--secret"));
        assert_eq!(run(&["--secret"], true), denied("--secret"), "denied before its missing value");
        assert_eq!(run(&["--sec=x"], true), denied("--sec (--secret)"), "a prefix is the option it names");
        assert_eq!(run(&["-Sx"], true), denied("-S (--secret)"));
        assert_eq!(run(&["-vvS", "x"], true), denied("-S (--secret)"), "smuggled in a cluster");
        let e = run(&["-vS"], true).unwrap_err().to_string();
        assert_eq!(e, "option -S (--secret) is not allowed in agent-sandbox: secrets stay home");
    }

    #[test]
    fn rebuilt_options_are_returned_for_the_chaperon() {
        let p = parse(&T, &argv(&["-D", "/tmp"])).unwrap();
        assert_eq!(p.options[0].0.class, Class::Rebuilt("cwd comes from the request"));
        assert_eq!(p.options[0].1.as_deref(), Some("/tmp"));
    }

    #[test]
    fn bad_values_name_the_option_and_the_fix() {
        let e = run(&["-t", "soon"], true).unwrap_err();
        let GrammarError::BadValue { opt, value, why } = &e else { panic!("{e:?}") };
        assert_eq!((opt.as_str(), value.as_str()), ("-t (--time)", "soon"));
        assert!(why.contains("HH:MM:SS"));
        let e = run(&["--tim=soon"], true).unwrap_err();
        assert!(matches!(e, GrammarError::BadValue { ref opt, .. } if opt == "--tim (--time)"), "{e:?}");
        let e = run(&[&format!("--name={}\n", "x".repeat(5000))], true).unwrap_err().to_string();
        assert!(e.len() < 300 && !e.contains('\n'), "{e}");
    }

    #[test]
    fn argument_count_and_size_are_capped() {
        let many = vec!["-v".to_string(); MAX_ARGS];
        assert_eq!(parse(&T, &many).unwrap().options.len(), MAX_ARGS);
        let too_many = vec!["-v".to_string(); MAX_ARGS + 1];
        assert_eq!(parse(&T, &too_many), Err(GrammarError::TooManyArgs { count: 4097, max: 4096 }));
        let huge = vec![format!("--name={}", "x".repeat(2 << 20))];
        assert!(matches!(parse(&T, &huge), Err(GrammarError::TooLarge { .. })));
        let spread = vec!["y".repeat(600 << 10), "y".repeat(600 << 10)];
        assert!(matches!(parse(&T, &spread), Err(GrammarError::TooLarge { .. })));
    }

    #[test]
    fn a_plugins_option_takes_part_where_the_site_has_it() {
        static PLUGINS: &[LongOpt] = &[long("dirt", Flag, Code(4095))];
        // Without the plugin --di is --dir; with it, --di is ambiguous and --dirt is the plugin's.
        assert_eq!(opts(&["--di=/x"]), [("dir", some("/x"))]);
        let amb = GetoptError::Ambiguous { typed: "di".into(), possibilities: vec!["dir", "dirt"] };
        assert_eq!(parse_with(&T, PLUGINS, &argv(&["--di"])), Err(amb.into()));
        // The chaperon's table has no entry for it: refused, never passed on.
        let e = parse_with(&T, PLUGINS, &argv(&["--dirt"])).unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "--dirt"), "{e:?}");
    }

    #[test]
    fn export_values_are_redacted_however_the_option_is_spelled() {
        let a = argv(&["--export=ALL,TOKEN=x", "--exp", "A=b", "--expo=T=1", "-J", "n", "--exc=user", "--", "x"]);
        assert_eq!(redacted(&T, &[], &a), ["--export=…", "--exp", "…", "--expo=…", "-J", "n", "--exc=user", "--", "x"]);
        // --e and --ex could be --excl or --export: refused as ambiguous, and hidden all the same.
        let e = GetoptError::Ambiguous { typed: "ex=TOKEN=1".into(), possibilities: vec!["excl", "export"] };
        assert_eq!(audit_reason(&e), "option '--ex=…' is ambiguous; possibilities: '--excl' '--export'");
        let e = GetoptError::Ambiguous { typed: "ver=1".into(), possibilities: vec!["verbose", "version"] };
        assert_eq!(audit_reason(&e), "option '--ver=1' is ambiguous; possibilities: '--verbose' '--version'");
        let a = argv(&["--e=x", "--ex", "y", "--ver=1", "--zz=1"]);
        assert_eq!(redacted(&T, &[], &a), ["--e=…", "--ex", "…", "--ver=1", "--zz=1"], "ambiguous or unknown");
    }

    #[test]
    fn only_what_the_table_passes_as_written_reaches_the_real_command() {
        static W_SPECS: &[OptSpec] = &[
            opt("verbose", Some('v'), Flag, Class::Allowed, ValueKind::Any),
            opt("name", Some('J'), Value, Class::Allowed, ValueKind::JobName),
            opt("out", Some('o'), Value, Class::Allowed, ValueKind::Path).rebuilt("opened inside the jail"),
            opt("dir", Some('D'), Value, Class::Rebuilt("cwd comes from the request"), ValueKind::Path),
            opt("time-format", Some('t'), Value, Class::Allowed, ValueKind::Text).short_only(),
        ];
        static W_LONGS: &[LongOpt] = &[
            long("verbose", Flag, Char('v')),
            long("name", Value, Char('J')),
            long("out", Value, Char('o')),
            long("dir", Value, Char('D')),
        ];
        static W_GETOPT: Getopt = Getopt { optstring: "vJ:o:D:t:", longs: W_LONGS, plugins: false, reports: REPORTS };
        static W: Table =
            Table { getopt: &W_GETOPT, getopt_24_11: &W_GETOPT, shared: &[], own: W_SPECS, not_listed: WORDS };
        let p = parse(&W, &argv(&["-vJx", "-o", "f", "-D/tmp", "-thours", "--na=y", "--verb"])).unwrap();
        let options: Vec<_> = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
        let written = ["--verbose", "--name=x", "-thours", "--name=y", "--verbose"];
        assert_eq!(as_written(&W, &options), written, "prefixes reach Slurm spelled in full");
        assert_eq!(as_written(&W, &[("not-in-the-table", None)]), Vec::<String>::new(), "unknown: never passed");
        let e = parse(&W, &argv(&["--time-format=x"]));
        assert_eq!(e, Err(GetoptError::Unrecognized("time-format=x".into()).into()));
        assert_eq!(words(&argv(&["show", "job"])), ["show", "job"]);
        assert_eq!(words(&argv(&["-5"])), ["--", "-5"], "a word that looks like an option stays a word");
    }
    #[test]
    fn a_not_listed_entry_is_refused_in_the_words_of_each_table_that_reads_it() {
        static GROUP: [OptSpec; 2] =
            [not_listed("mincpus", Some('m'), Value), opt("verbose", Some('v'), Flag, Class::Allowed, ValueKind::Any)];
        static U_LONGS: &[LongOpt] = &[long("mincpus", Value, Char('m')), long("verbose", Flag, Char('v'))];
        static U_GETOPT: Getopt = Getopt { optstring: "+m:v", longs: U_LONGS, plugins: false, reports: REPORTS };
        static A: Table =
            Table { getopt: &U_GETOPT, getopt_24_11: &U_GETOPT, shared: &[&GROUP], own: &[], not_listed: "a's" };
        static B: Table =
            Table { getopt: &U_GETOPT, getopt_24_11: &U_GETOPT, shared: &[&GROUP], own: &[], not_listed: "b's" };
        for (table, words) in [(&A, "a's"), (&B, "b's")] {
            for (typed, shown) in
                [("--mincpus=2", "--mincpus"), ("--minc=2", "--minc (--mincpus)"), ("-m2", "-m (--mincpus)")]
            {
                let e = parse(table, &argv(&["-v", typed]));
                assert_eq!(e, Err(GrammarError::Denied { opt: shown.into(), reason: words }), "{typed}");
            }
            let spec = table.spec("mincpus").unwrap();
            assert_eq!((table.class_of(spec), table.refusal(spec)), (Class::Denied(words), Some(words)));
            assert!(!spec.passes_as_written() && spec.rebuilt_why().is_none());
            assert_eq!(as_written(table, &[("mincpus", Some("2".into()))]), Vec::<String>::new());
        }
    }
}
