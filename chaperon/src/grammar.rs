//! A getopt_long-compatible option parser driven by a static table of `OptSpec`s, plus the
//! value grammars (`ValueKind`) every option value is checked against. Knows no Slurm command:
//! the tables live in `sbatch.rs` and friends. Pure functions; any input gives a value or an
//! error, never a panic (the arguments come from the jail, which may send garbage on purpose).

/// Most arguments one command line may carry (the stub's whole argv, or all `#SBATCH` words).
pub const MAX_ARGS: usize = 4096;
/// Most bytes all arguments together may carry.
pub const MAX_ARG_BYTES: usize = 1 << 20;
/// Longest job name accepted (Slurm's own limit is larger; names are shown back in squeue).
pub const MAX_JOB_NAME: usize = 256;
/// Values quoted back in error messages are cut to this many characters.
const ECHO_CHARS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// `--x` / `-x`; `--x=v` is an error.
    Flag,
    /// `--x=v`, `--x v`, `-xv`, `-x v`.
    Value,
    /// Only `--x=v` (or `-xv`) carries a value; `--x v` is the flag then a positional, as getopt's `x::`.
    OptionalValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Allowed,
    /// Refused with this reason: one line an agent can act on.
    Denied(&'static str),
    /// Parsed and handed to the chaperon, which computes what Slurm sees itself (the user's value is
    /// an input to that, never passed through). The text says why.
    Rebuilt(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Printable text, may be empty.
    Text,
    /// Decimal digits, fits in a u32.
    Int,
    /// A Slurm time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED, INFINITE.
    Time,
    /// A size: digits with an optional K/M/G/T suffix (megabytes without one).
    Memory,
    /// A hostlist expression (`node[01-04,7],gpu3`); never a file name.
    NodeList,
    /// Printable, non-empty, at most `MAX_JOB_NAME` bytes.
    JobName,
    /// A non-empty path, not resolved here (the chaperon resolves it against the project).
    Path,
    /// `123,456_7,...`.
    JobIdList,
    /// Slurm's `--dependency` syntax; see `dependency_job_ids`.
    Dependency,
    /// `ALL`, `NONE`, or a comma list of `NAME[=VALUE]` (with `ALL`/`NONE` allowed as items).
    ExportSpec,
    /// `[{B|R|BR|RB}:]SIG[@seconds]`, SIG a number 1-65535 or a Slurm signal name.
    Signal,
    /// One of these words, ASCII case-insensitive (Slurm compares with strcasecmp).
    Choice(&'static [&'static str]),
    /// Only the checks every value gets; validated elsewhere.
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptSpec {
    pub long: &'static str,
    pub short: Option<char>,
    pub arity: Arity,
    pub class: Class,
    pub value: ValueKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// In command-line order; a later occurrence overrides an earlier one, as in Slurm.
    pub options: Vec<(&'static OptSpec, Option<String>)>,
    pub positionals: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("unrecognized option '{0}' (options must be spelled out in full)")]
    Unknown(String),
    #[error("option {opt} is not allowed in agent-sandbox: {reason}")]
    Denied { opt: String, reason: &'static str },
    #[error("option {0} requires an argument")]
    MissingValue(String),
    #[error("option {0} doesn't allow an argument")]
    UnexpectedValue(String),
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

/// Cuts `s` for quoting in an error: at most `ECHO_CHARS` characters, so one error stays short.
pub(crate) fn clip(s: &str) -> String {
    match s.char_indices().nth(ECHO_CHARS) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// An option name as typed, cut and with control characters escaped, so an error stays one line.
fn escaped(s: &str) -> String {
    clip(s).escape_debug().to_string()
}

fn find_long(table: &'static [OptSpec], name: &str) -> Option<&'static OptSpec> {
    // Exact names only. getopt_long would also take any unambiguous prefix (`--acc` for
    // `--account`); an allow-list must not depend on that, because the set of names a prefix
    // resolves to changes whenever Slurm (or our table) gains an option, and a prefix the real
    // sbatch resolves differently from us is a way to smuggle an option past the list.
    table.iter().find(|s| s.long == name)
}

fn find_short(table: &'static [OptSpec], c: char) -> Option<&'static OptSpec> {
    table.iter().find(|s| s.short == Some(c))
}

fn admit(spec: &'static OptSpec, shown: &str) -> Result<(), GrammarError> {
    match spec.class {
        Class::Denied(reason) => Err(GrammarError::Denied { opt: shown.to_string(), reason }),
        Class::Allowed | Class::Rebuilt(_) => Ok(()),
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

/// Parses `args` (without the program name) against `table` the way getopt_long does, minus
/// prefix matching. With `stop_at_first_positional` (getopt's leading `+`, what Slurm uses) the
/// first non-option and everything after it are positionals; otherwise options and positionals
/// may mix (GNU permutation). `--` ends options; `-` and an empty argument are positionals. A denied option is
/// an error as soon as it is seen, before its value is looked at.
pub fn parse(
    table: &'static [OptSpec],
    args: &[String],
    stop_at_first_positional: bool,
) -> Result<Parsed, GrammarError> {
    if args.len() > MAX_ARGS {
        return Err(GrammarError::TooManyArgs { count: args.len(), max: MAX_ARGS });
    }
    let bytes = args.iter().fold(0usize, |n, a| n.saturating_add(a.len()));
    if bytes > MAX_ARG_BYTES {
        return Err(GrammarError::TooLarge { bytes, max: MAX_ARG_BYTES });
    }

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
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let shown = format!("--{}", escaped(name));
            let spec = find_long(table, name).ok_or_else(|| GrammarError::Unknown(shown.clone()))?;
            admit(spec, &shown)?;
            let value = match spec.arity {
                Arity::Flag if inline.is_some() => return Err(GrammarError::UnexpectedValue(shown)),
                Arity::Flag => None,
                Arity::OptionalValue => inline,
                Arity::Value => match inline {
                    Some(v) => Some(v),
                    None => {
                        let v = args.get(i).ok_or_else(|| GrammarError::MissingValue(shown.clone()))?;
                        i += 1;
                        Some(v.as_str())
                    }
                },
            };
            out.options.push((spec, checked(spec, &shown, value)?));
        } else if arg.len() > 1 && arg.starts_with('-') {
            // A cluster: flags, then at most one value-taking option that owns the rest.
            let cluster = &arg[1..];
            for (at, c) in cluster.char_indices() {
                let spec =
                    find_short(table, c).ok_or_else(|| GrammarError::Unknown(format!("-{}", c.escape_debug())))?;
                let shown = format!("-{c} (--{})", spec.long);
                admit(spec, &shown)?;
                let rest = &cluster[at + c.len_utf8()..];
                match spec.arity {
                    Arity::Flag => out.options.push((spec, None)),
                    Arity::OptionalValue => {
                        let value = (!rest.is_empty()).then_some(rest);
                        out.options.push((spec, checked(spec, &shown, value)?));
                        break;
                    }
                    Arity::Value => {
                        let value = if !rest.is_empty() {
                            rest
                        } else {
                            let v = args.get(i).ok_or_else(|| GrammarError::MissingValue(shown.clone()))?;
                            i += 1;
                            v.as_str()
                        };
                        out.options.push((spec, checked(spec, &shown, Some(value))?));
                        break;
                    }
                }
            }
        } else if stop_at_first_positional {
            out.positionals.extend(args[i - 1..].iter().cloned());
            break;
        } else {
            out.positionals.push(arg.to_string());
        }
    }
    Ok(out)
}

/// Characters no value may hold: C0/C1 controls (NUL, newline, ESC...), DEL, and the Unicode
/// line and paragraph separators. A newline in a value would end a line in the generated
/// script or an audit record; NUL would cut a C string short on the Slurm side.
fn is_forbidden(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Checks one value against its grammar. The error is the fix an agent needs, in one line.
pub fn validate(kind: ValueKind, v: &str) -> Result<(), &'static str> {
    if v.chars().any(is_forbidden) {
        return Err("values may not contain control characters (newline, NUL, escape...)");
    }
    match kind {
        ValueKind::Text | ValueKind::Any => Ok(()),
        ValueKind::Int => check(parse_u32(v).is_some(), "expected a non-negative whole number"),
        ValueKind::Time => {
            check(is_time(v), "expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED")
        }
        ValueKind::Memory => check(is_memory(v), "expected a size such as 500M, 4G or 1024 (suffix K, M, G or T)"),
        ValueKind::NodeList => check(is_node_list(v), "expected a node list such as node[01-04],gpu7 (no file names)"),
        ValueKind::JobName => {
            check(!v.is_empty() && v.len() <= MAX_JOB_NAME, "expected a non-empty job name of at most 256 bytes")
        }
        ValueKind::Path => check(!v.is_empty(), "expected a non-empty path"),
        ValueKind::JobIdList => check(
            !v.is_empty() && v.split(',').all(|id| parse_job_id(id, false).is_some()),
            "expected job ids such as 123 or 123_4, separated by commas",
        ),
        ValueKind::Dependency => dependency_job_ids(v).map(|_| ()),
        ValueKind::ExportSpec => {
            check(is_export_spec(v), "expected ALL, NONE, or NAME[=VALUE] items separated by commas")
        }
        ValueKind::Signal => check(is_signal(v), "expected [B:]SIGNAL[@seconds], e.g. USR1@60 or B:10"),
        ValueKind::Choice(words) => {
            check(words.iter().any(|w| w.eq_ignore_ascii_case(v)), "not one of the values this option accepts")
        }
    }
}

fn check(ok: bool, why: &'static str) -> Result<(), &'static str> {
    if ok {
        Ok(())
    } else {
        Err(why)
    }
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn parse_u32(s: &str) -> Option<u32> {
    if is_digits(s) {
        s.parse().ok()
    } else {
        None
    }
}

/// One component of a time: 1 to 8 digits (Slurm reads them with `%d`; longer would overflow).
fn is_time_part(s: &str) -> bool {
    is_digits(s) && s.len() <= 8
}

fn is_time(v: &str) -> bool {
    if v.eq_ignore_ascii_case("UNLIMITED") || v.eq_ignore_ascii_case("INFINITE") {
        return true;
    }
    let (days, clock) = match v.split_once('-') {
        Some((d, rest)) => (Some(d), rest),
        None => (None, v),
    };
    if days.is_some_and(|d| !is_time_part(d)) {
        return false;
    }
    let parts: Vec<&str> = clock.split(':').collect();
    // D-HH, D-HH:MM, D-HH:MM:SS or MM, MM:SS, HH:MM:SS: one to three parts either way.
    (1..=3).contains(&parts.len()) && parts.iter().all(|p| is_time_part(p))
}

fn is_memory(v: &str) -> bool {
    let digits = v.strip_suffix(|c: char| matches!(c.to_ascii_uppercase(), 'K' | 'M' | 'G' | 'T')).unwrap_or(v);
    is_digits(digits) && digits.len() <= 15
}

fn is_node_list(v: &str) -> bool {
    // Slurm reads a node list containing '/' as a file on the submit host: never here.
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.,[]".contains(&b))
}

/// `123`, `123_4`, and with `array_star` also `123_*`. Zero is not a job id.
fn parse_job_id(s: &str, array_star: bool) -> Option<u32> {
    let (job, task) = match s.split_once('_') {
        Some((j, t)) => (j, Some(t)),
        None => (s, None),
    };
    let ok_task = match task {
        None => true,
        Some("*") => array_star,
        Some(t) => parse_u32(t).is_some(),
    };
    parse_u32(job).filter(|&id| id != 0 && ok_task)
}

const DEPENDENCY_TYPES: &[&str] = &["after", "afterany", "afterok", "afternotok", "aftercorr", "afterburstbuffer"];

/// Checks a `--dependency` value and returns the job ids it names, so the chaperon can check
/// each is in scope. Accepted: `type:id[:id...]` items joined by `,` (all) or `?` (any), never
/// both; `singleton`; a plain `id[,id...]` list (Slurm's old form, meaning afterany). Types are
/// case-insensitive as in Slurm; an id is `N`, `N_M` or `N_*`; `after` ids may carry `+minutes`.
pub fn dependency_job_ids(v: &str) -> Result<Vec<u32>, &'static str> {
    const BAD: &str = "expected type:jobid[:jobid] items joined by ',' or '?', types after, afterany, afterok, \
                       afternotok, aftercorr, afterburstbuffer, singleton";
    if v.is_empty() {
        return Err(BAD);
    }
    if v.contains(',') && v.contains('?') {
        return Err("use either ',' (all) or '?' (any) between dependencies, not both");
    }
    let mut ids = Vec::new();
    for item in v.split([',', '?']) {
        if item.eq_ignore_ascii_case("singleton") {
            continue;
        }
        let Some((kind, list)) = item.split_once(':') else {
            // Old form: a bare job id, only in a ',' list of bare ids.
            if v.contains(':') || v.contains('?') {
                return Err(BAD);
            }
            ids.push(parse_job_id(item, true).ok_or(BAD)?);
            continue;
        };
        let kind = DEPENDENCY_TYPES.iter().find(|t| t.eq_ignore_ascii_case(kind)).ok_or(BAD)?;
        for id in list.split(':') {
            let id = match id.split_once('+') {
                Some((id, minutes)) if *kind == "after" && parse_u32(minutes).is_some() => id,
                Some(_) => return Err(BAD),
                None => id,
            };
            ids.push(parse_job_id(id, true).ok_or(BAD)?);
        }
    }
    Ok(ids)
}

fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn is_export_spec(v: &str) -> bool {
    // What the variables may do is checked when the export is applied inside the jail; here
    // only the shape. A VALUE cannot hold a comma (Slurm splits on every comma).
    !v.is_empty()
        && v.split(',').all(|item| match item.split_once('=') {
            Some((name, _value)) => is_env_name(name),
            None => item == "ALL" || item == "NONE" || is_env_name(item),
        })
}

/// Slurm's `sig_name2num` table (proc_args.c), matched case-insensitively, `SIG` prefix optional.
const SIGNAL_NAMES: &[&str] = &[
    "HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT", "STOP", "TSTP", "TTIN",
    "TTOU", "XCPU",
];

fn is_signal(v: &str) -> bool {
    let v = match v.split_once(':') {
        Some((flags, rest)) if ["B", "R", "BR", "RB"].iter().any(|f| f.eq_ignore_ascii_case(flags)) => rest,
        Some(_) => return false,
        None => v,
    };
    let (sig, time) = match v.split_once('@') {
        Some((s, t)) => (s, Some(t)),
        None => (v, None),
    };
    let time_ok = time.is_none_or(|t| parse_u32(t).is_some_and(|n| n <= 65535));
    let name = match (sig.get(..3), sig.get(3..)) {
        (Some(prefix), Some(rest)) if prefix.eq_ignore_ascii_case("SIG") => rest,
        _ => sig,
    };
    let sig_ok = parse_u32(sig).is_some_and(|n| (1..=65535).contains(&n))
        || SIGNAL_NAMES.iter().any(|n| n.eq_ignore_ascii_case(name));
    time_ok && sig_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use Arity::*;

    static T: &[OptSpec] = &[
        OptSpec { long: "verbose", short: Some('v'), arity: Flag, class: Class::Allowed, value: ValueKind::Any },
        OptSpec { long: "hold", short: Some('H'), arity: Flag, class: Class::Allowed, value: ValueKind::Any },
        OptSpec { long: "name", short: Some('J'), arity: Value, class: Class::Allowed, value: ValueKind::JobName },
        OptSpec { long: "time", short: Some('t'), arity: Value, class: Class::Allowed, value: ValueKind::Time },
        OptSpec {
            long: "excl",
            short: None,
            arity: OptionalValue,
            class: Class::Allowed,
            value: ValueKind::Choice(&["user", "mcs"]),
        },
        OptSpec { long: "level", short: Some('k'), arity: OptionalValue, class: Class::Allowed, value: ValueKind::Int },
        OptSpec {
            long: "secret",
            short: Some('S'),
            arity: Value,
            class: Class::Denied("secrets stay home"),
            value: ValueKind::Any,
        },
        OptSpec {
            long: "dir",
            short: Some('D'),
            arity: Value,
            class: Class::Rebuilt("cwd comes from the request"),
            value: ValueKind::Path,
        },
    ];

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    type Options = Vec<(&'static str, Option<String>)>;

    /// (long, value) pairs and positionals, for compact asserts.
    fn run(a: &[&str], stop: bool) -> Result<(Options, Vec<String>), GrammarError> {
        let p = parse(T, &argv(a), stop)?;
        Ok((p.options.into_iter().map(|(s, v)| (s.long, v)).collect(), p.positionals))
    }

    fn opts(a: &[&str]) -> Options {
        run(a, true).unwrap().0
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn long_options_take_values_after_equals_or_as_the_next_argument() {
        assert_eq!(opts(&["--name=x"]), [("name", some("x"))]);
        assert_eq!(opts(&["--name", "x"]), [("name", some("x"))]);
        assert_eq!(opts(&["--name=a=b"]), [("name", some("a=b"))]);
        assert_eq!(opts(&["--verbose", "--time=5"]), [("verbose", None), ("time", some("5"))]);
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
        assert_eq!(run(&["-vz"], true), Err(GrammarError::Unknown("-z".into())));
        assert_eq!(run(&["-vt"], true), Err(GrammarError::MissingValue("-t (--time)".into())));
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
    fn unknown_options_and_prefixes_are_errors_naming_the_option() {
        assert_eq!(run(&["--verb"], true), Err(GrammarError::Unknown("--verb".into())));
        assert_eq!(run(&["--nam=x"], true), Err(GrammarError::Unknown("--nam".into())));
        assert_eq!(run(&["--Verbose"], true), Err(GrammarError::Unknown("--Verbose".into())));
        assert_eq!(run(&["--=x"], true), Err(GrammarError::Unknown("--".into())));
        let e = run(&["--verb"], true).unwrap_err().to_string();
        assert!(e.contains("'--verb'"), "{e}");
        // A name with a newline in it is echoed escaped: the error stays one line.
        let e = run(&["--a\nb"], true).unwrap_err().to_string();
        assert!(!e.contains('\n') && e.contains("--a\\nb"), "{e}");
        let e = run(&["-\u{1b}"], true).unwrap_err().to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
    }

    #[test]
    fn missing_and_unexpected_values() {
        assert_eq!(run(&["--name"], true), Err(GrammarError::MissingValue("--name".into())));
        assert_eq!(run(&["-J"], true), Err(GrammarError::MissingValue("-J (--name)".into())));
        assert_eq!(run(&["--verbose=1"], true), Err(GrammarError::UnexpectedValue("--verbose".into())));
        assert_eq!(run(&["--verbose="], true), Err(GrammarError::UnexpectedValue("--verbose".into())));
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
        assert_eq!(run(&["-Sx"], true), denied("-S (--secret)"));
        assert_eq!(run(&["-vvS", "x"], true), denied("-S (--secret)"), "smuggled in a cluster");
        let e = run(&["-vS"], true).unwrap_err().to_string();
        assert_eq!(e, "option -S (--secret) is not allowed in agent-sandbox: secrets stay home");
    }

    #[test]
    fn rebuilt_options_are_returned_for_the_chaperon() {
        let p = parse(T, &argv(&["-D", "/tmp"]), true).unwrap();
        assert_eq!(p.options[0].0.class, Class::Rebuilt("cwd comes from the request"));
        assert_eq!(p.options[0].1.as_deref(), Some("/tmp"));
    }

    #[test]
    fn bad_values_name_the_option_and_the_fix() {
        let e = run(&["-t", "soon"], true).unwrap_err();
        let GrammarError::BadValue { opt, value, why } = &e else { panic!("{e:?}") };
        assert_eq!((opt.as_str(), value.as_str()), ("-t (--time)", "soon"));
        assert!(why.contains("HH:MM:SS"));
        let e = run(&[&format!("--name={}\n", "x".repeat(5000))], true).unwrap_err().to_string();
        assert!(e.len() < 300 && !e.contains('\n'), "{e}");
    }

    #[test]
    fn argument_count_and_size_are_capped() {
        let many = vec!["-v".to_string(); MAX_ARGS];
        assert_eq!(parse(T, &many, true).unwrap().options.len(), MAX_ARGS);
        let too_many = vec!["-v".to_string(); MAX_ARGS + 1];
        assert_eq!(parse(T, &too_many, true), Err(GrammarError::TooManyArgs { count: 4097, max: 4096 }));
        let huge = vec![format!("--name={}", "x".repeat(2 << 20))];
        assert!(matches!(parse(T, &huge, true), Err(GrammarError::TooLarge { .. })));
        let spread = vec!["y".repeat(600 << 10), "y".repeat(600 << 10)];
        assert!(matches!(parse(T, &spread, true), Err(GrammarError::TooLarge { .. })));
    }

    const ALL_KINDS: &[ValueKind] = &[
        ValueKind::Text,
        ValueKind::Int,
        ValueKind::Time,
        ValueKind::Memory,
        ValueKind::NodeList,
        ValueKind::JobName,
        ValueKind::Path,
        ValueKind::JobIdList,
        ValueKind::Dependency,
        ValueKind::ExportSpec,
        ValueKind::Signal,
        ValueKind::Choice(&["user"]),
        ValueKind::Any,
    ];

    /// Per kind: values it must accept and values it must refuse.
    fn cases(kind: ValueKind) -> (&'static [&'static str], &'static [&'static str]) {
        match kind {
            ValueKind::Text => (&["", "gpu:a100:2", "a b", "é ünïcode", "x=y,z"], &[]),
            ValueKind::Any => (&["", "anything at all"], &[]),
            ValueKind::Int => (&["0", "4", "007", "4294967295"], &["", "-1", "+1", "4x", "1.5", "4294967296", " 4"]),
            ValueKind::Time => (
                &["30", "0", "5:00", "1:30:00", "2-0", "2-12", "2-12:30", "2-12:30:15", "UNLIMITED", "infinite"],
                &["", "1:2:3:4", "1-2-3", "-5", "5-", "1:", ":5", "1h", "1-2:3:4:5", "never", "123456789"],
            ),
            ValueKind::Memory => (
                &["1024", "4G", "500M", "2t", "16k", "0"],
                &["", "G", "4GB", "4.5G", "-1G", "4 G", "4P", "1234567890123456"],
            ),
            ValueKind::NodeList => {
                (&["node01", "node[01-04,7],gpu3", "a.b-c_d"], &["", "/etc/hosts", "n1 n2", "n;1", "../x"])
            }
            ValueKind::JobName => (&["job", "my job #1", "ünï"], &[""]),
            ValueKind::Path => (&["out.%j", "/tmp/x", "a b", "../up"], &[""]),
            ValueKind::JobIdList => (&["123", "123,456", "123_4,5"], &["", "0", "1,", ",1", "a", "123_", "1_*", "1 2"]),
            ValueKind::Dependency => (
                &[
                    "afterok:20:21,afterany:23",
                    "afterok:20:21?afterany:23",
                    "singleton",
                    "SINGLETON,afterok:5",
                    "after:5+10:6",
                    "AfterOK:7",
                    "aftercorr:1_2",
                    "afternotok:1_*",
                    "afterburstbuffer:9",
                    "123",
                    "123,456",
                ],
                &[
                    "",
                    "afterok",
                    "afterok:",
                    "afterok:x",
                    "afterok:0",
                    "afterok:1,afterany:2?afterok:3",
                    "expand:5",
                    "afterok:5+10",
                    "singleton:5",
                    "123?456",
                    "123,afterok:5",
                    "afterok:1,",
                    "after:5+",
                ],
            ),
            ValueKind::ExportSpec => (
                &["ALL", "NONE", "EDITOR", "ALL,BASH_ENV=/tmp/x", "A=1,B=,_C", "NONE,X=y z"],
                &["", "1X=2", "A-B=1", "ALL,", ",A", "=x", "a b"],
            ),
            ValueKind::Signal => (
                &["USR1", "SIGUSR1", "usr1@60", "10", "B:USR2@90", "R:TERM", "BR:10@0", "XCPU@65535"],
                &["", "0", "65536", "FOO", "B:", "X:USR1", "USR1@", "USR1@65536", "USR1@x", "@60", "SIG"],
            ),
            ValueKind::Choice(_) => (&["user", "USER"], &["", "users", "mcs"]),
        }
    }

    #[test]
    fn every_value_kind_accepts_and_refuses_its_table() {
        for &kind in ALL_KINDS {
            let (good, bad) = cases(kind);
            for v in good {
                assert_eq!(validate(kind, v), Ok(()), "{kind:?} should accept {v:?}");
            }
            for v in bad {
                assert!(validate(kind, v).is_err(), "{kind:?} should refuse {v:?}");
            }
        }
        assert!(validate(ValueKind::JobName, &"j".repeat(256)).is_ok());
        assert!(validate(ValueKind::JobName, &"j".repeat(257)).is_err());
    }

    #[test]
    fn no_value_kind_accepts_a_control_character() {
        for &kind in ALL_KINDS {
            let good = cases(kind).0.iter().find(|v| !v.is_empty()).unwrap();
            for bad in ["\n", "\0", "\r", "\t", "\x1b", "\x7f", "\u{85}", "\u{2028}", "\u{2029}"] {
                for v in [format!("{good}{bad}"), format!("{bad}{good}")] {
                    assert!(validate(kind, &v).is_err(), "{kind:?} accepted {v:?}");
                }
            }
        }
    }

    #[test]
    fn dependency_names_every_job_it_waits_for() {
        assert_eq!(dependency_job_ids("afterok:20:21,afterany:23"), Ok(vec![20, 21, 23]));
        assert_eq!(dependency_job_ids("after:5+10?singleton?aftercorr:7_3"), Ok(vec![5, 7]));
        assert_eq!(dependency_job_ids("singleton"), Ok(vec![]));
        assert_eq!(dependency_job_ids("12,13_*"), Ok(vec![12, 13]));
    }
}
