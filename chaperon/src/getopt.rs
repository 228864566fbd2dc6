//! glibc's getopt_long as the Slurm commands call it: a command's option set as its real
//! getopt_long is handed it (`Getopt`: the optstring and the long_options array, in order; the
//! data of each Slurm version is a module of its own, `slurm_22_05`), how a long spelling
//! resolves against it (`resolve`: an exact name, else an unambiguous prefix, as glibc 2.36's
//! `process_long_option` decides), and getopt's errors in glibc's words with what each Slurm
//! command prints after them (`Reports`). Knows no policy: `table` decides what the chaperon
//! makes of each option. Pure.

/// Whether an option takes a value: `has_arg` of a long option, the colons after a short one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// `--x` / `-x`; `--x=v` is an error.
    Flag,
    /// `--x=v`, `--x v`, `-xv`, `-x v`.
    Value,
    /// Only `--x=v` (or `-xv`) carries a value; `--x v` is the flag then a positional, as getopt's `x::`.
    OptionalValue,
}

/// What getopt_long returns for a long option (`val`, or 0 after setting `*flag`). Two entries
/// a prefix matches are one option to glibc when their arity and this are equal (aliases such
/// as sacct's `--gid`/`--group`), whatever their names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    /// The short option's letter (`'j'` for `--jobs`).
    Char(char),
    /// A number past the letters (Slurm's `LONG_OPT_*` values).
    Code(u16),
    /// 0, after storing this value through the entry's `flag` pointer (sstat's `--usage`).
    Sets(u16),
}

/// One entry of a command's long_options array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongOpt {
    pub name: OptName,
    pub arity: Arity,
    pub returns: Returns,
}

pub(crate) const fn long(name: &'static str, arity: Arity, returns: Returns) -> LongOpt {
    LongOpt { name: OptName::new(name), arity, returns }
}

/// The longest option name a table may hold (Slurm's longest today: 20 bytes).
const MAX_NAME: usize = 31;

/// An option's name, held in the entry itself: the tables of every release hold about two
/// thousand of them, and a `&str` each would be a pointer the loader relocates at every start
/// of the launcher (the binary is position-independent), dirtying those pages in each session
/// (tests/many.rs). Bytes inline are read-only data, shared by every process.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OptName {
    bytes: [u8; MAX_NAME],
    len: u8,
}

impl OptName {
    /// Fails the build for a name that does not fit.
    pub const fn new(name: &str) -> OptName {
        let src = name.as_bytes();
        assert!(src.len() <= MAX_NAME, "an option name longer than MAX_NAME");
        let mut bytes = [0u8; MAX_NAME];
        let mut i = 0;
        while i < src.len() {
            bytes[i] = src[i];
            i += 1;
        }
        OptName { bytes, len: src.len() as u8 }
    }

    pub fn as_str(&self) -> &str {
        // Made from a whole `&str` by `new`, so always UTF-8; "" could only come of a bug.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl std::ops::Deref for OptName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for OptName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for OptName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for OptName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for OptName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What a Slurm command prints after glibc's message when getopt_long reports an error, and
/// the status it exits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reports {
    /// `Try "<command> --help" for more information` (sacct and sstat print nothing more).
    pub try_help: bool,
    /// 1, or 255 for sbatch, srun and salloc (`exit(-1)`).
    pub status: i32,
}

impl Reports {
    /// The real command's stderr for `error`, word for word, as `command` prints it.
    pub fn render(&self, command: &str, error: &GetoptError) -> String {
        let mut text = format!("{command}: {error}\n");
        if self.try_help {
            text.push_str(&format!("Try \"{command} --help\" for more information\n"));
        }
        text
    }
}

/// A command's options as its real getopt_long is handed them.
#[derive(Debug)]
pub struct Getopt {
    /// The optstring, as passed (a leading `+`: options end at the first non-option).
    pub optstring: &'static str,
    /// The long_options array, in its order: a prefix resolves to the first entry it matches,
    /// and an ambiguity lists them in this order.
    pub longs: &'static [LongOpt],
    /// Slurm appends the options of the site's SPANK plugins after `longs` (sbatch, srun and
    /// salloc): the chaperon adds those it knows of (`BELT`) where the site has them.
    pub plugins: bool,
    pub reports: Reports,
}

impl Getopt {
    /// getopt's `+`: the first non-option and everything after it are arguments (else GNU
    /// permutation: options and arguments may mix).
    pub fn stops_at_first_positional(&self) -> bool {
        self.optstring.starts_with('+')
    }

    /// The short options, in the optstring's order, with their arity.
    pub fn shorts(&self) -> impl Iterator<Item = (char, Arity)> + '_ {
        // glibc skips a leading `+` or `-`, and then a `:` (which only silences its messages).
        let body = self.optstring.strip_prefix(['+', '-']).unwrap_or(self.optstring);
        let body = body.strip_prefix(':').unwrap_or(body);
        let mut chars = body.chars().peekable();
        std::iter::from_fn(move || {
            let c = chars.next()?;
            let arity = match (chars.next_if_eq(&':'), chars.next_if_eq(&':')) {
                (None, _) => Arity::Flag,
                (Some(_), None) => Arity::Value,
                (Some(_), Some(_)) => Arity::OptionalValue,
            };
            Some((c, arity))
        })
    }

    /// The arity of short option `c`, if the command has it. `:` and `;` are never options.
    pub fn short(&self, c: char) -> Option<Arity> {
        if c == ':' || c == ';' {
            return None;
        }
        self.shorts().find(|(s, _)| *s == c).map(|(_, a)| a)
    }
}

/// What a long option's name (the text between `--` and any `=`) names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// The entry of that exact name (the first, should two have it).
    Exact(&'static LongOpt),
    /// The first entry the name is a prefix of; every other it is a prefix of is the same
    /// option to glibc (same arity and `Returns`).
    Prefix(&'static LongOpt),
    /// The name is a prefix of entries that are different options: the first of them, and
    /// every later one unlike the first, in the array's order (the list glibc prints).
    Ambiguous(Vec<&'static LongOpt>),
    Unknown,
}

/// Resolves `name` against `longs` (the command's array, then any a site's plugins add, in
/// that order) exactly as glibc 2.36's `process_long_option` does: an exact match wins; else
/// the first entry `name` is a prefix of, unless a later one it is a prefix of differs from
/// that first in arity or return value. The empty name is a prefix of every entry.
pub fn resolve(longs: impl Iterator<Item = &'static LongOpt> + Clone, name: &str) -> Match {
    if let Some(exact) = longs.clone().find(|l| l.name.as_str() == name) {
        return Match::Exact(exact);
    }
    let mut prefixed = longs.filter(|l| l.name.as_str().starts_with(name));
    let Some(first) = prefixed.next() else {
        return Match::Unknown;
    };
    let others: Vec<&'static LongOpt> =
        prefixed.filter(|l| l.arity != first.arity || l.returns != first.returns).collect();
    match others.is_empty() {
        true => Match::Prefix(first),
        false => Match::Ambiguous(std::iter::once(first).chain(others).collect()),
    }
}

/// An error getopt_long reports, worded as glibc 2.36 words it (after `<command>: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GetoptError {
    /// `--name[=value]` names no option; the text after `--`, as typed.
    #[error("unrecognized option '--{}'", shown(.0))]
    Unrecognized(String),
    /// The text after `--` as typed (with any `=value`, as glibc prints it), and the options
    /// it could name.
    #[error("option '--{}' is ambiguous; possibilities:{}", shown(.typed), listed(.possibilities))]
    Ambiguous { typed: String, possibilities: Vec<&'static str> },
    /// The option's full name (glibc names the option, not the prefix typed).
    #[error("option '--{0}' requires an argument")]
    LongNeedsValue(&'static str),
    #[error("option '--{0}' doesn't allow an argument")]
    LongTakesNoValue(&'static str),
    #[error("invalid option -- '{}'", shown(&.0.to_string()))]
    InvalidShort(char),
    #[error("option requires an argument -- '{0}'")]
    ShortNeedsValue(char),
}

/// The longest typed text quoted back: glibc quotes it whole, but the message is also the
/// audit record's reason.
const SHOWN_CHARS: usize = 1024;

/// What the caller typed, as quoted in a message: control characters escaped, so the message
/// stays the one line glibc prints for anything printable, and cut very long.
fn shown(typed: &str) -> String {
    let mut out = String::new();
    for (i, c) in typed.chars().enumerate() {
        if i == SHOWN_CHARS {
            out.push_str("...");
            break;
        }
        if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn listed(names: &[&str]) -> String {
    names.iter().map(|n| format!(" '--{n}'")).collect()
}

/// The option agent-sandbox's own SPANK plugin (slurm-plugins/agent_sandbox.c) adds to sbatch,
/// srun and salloc where a site installs it: Slurm appends plugins' options after its own
/// (with values of their own, 4095 for the first), so it takes part in prefix resolution there.
pub const BELT_NAME: &str = "agent-sandbox";
pub const BELT: LongOpt = long(BELT_NAME, Arity::Value, Returns::Code(4095));

#[cfg(test)]
mod tests {
    use super::*;
    use Arity::*;
    use Returns::*;

    static LONGS: &[LongOpt] = &[
        long("jobs", Value, Char('j')),
        long("json", Flag, Code(300)),
        long("gid", Value, Char('g')),
        long("group", Value, Char('g')),
        long("helpformat", Flag, Char('e')),
        long("help-fields", Flag, Char('e')),
        long("help", Flag, Char('h')),
        long("node", Value, Char('w')),
        long("nodes", Value, Char('w')),
        long("nodelist", Value, Char('w')),
        long("noheader", Flag, Char('h')),
        long("sort", Flag, Char('s')),
        long("sorted", Value, Char('s')),
    ];

    fn names(m: Match) -> Result<&'static str, Vec<&'static str>> {
        match m {
            Match::Exact(l) | Match::Prefix(l) => Ok(l.name.as_str()),
            Match::Ambiguous(ls) => Err(ls.iter().map(|l| l.name.as_str()).collect()),
            Match::Unknown => Err(vec![]),
        }
    }

    fn r(name: &str) -> Result<&'static str, Vec<&'static str>> {
        names(resolve(LONGS.iter(), name))
    }

    #[test]
    fn a_unique_prefix_is_its_option_and_an_exact_name_always_wins() {
        assert_eq!(r("job"), Ok("jobs"));
        assert_eq!(r("jobs"), Ok("jobs"));
        assert_eq!(r("jso"), Ok("json"));
        assert_eq!(r("help"), Ok("help"), "exact, though helpformat and help-fields start with it");
        assert_eq!(r("node"), Ok("node"), "exact");
        assert_eq!(r("x"), Err(vec![]));
        assert_eq!(r("jobss"), Err(vec![]));
        assert_eq!(r("Jobs"), Err(vec![]), "case counts");
    }

    #[test]
    fn aliases_are_one_option_and_the_first_is_taken() {
        // gid and group: both 'g' with a value.
        assert_eq!(r("g"), Ok("gid"));
        assert_eq!(r("gr"), Ok("group"));
        assert_eq!(r("help-"), Ok("help-fields"));
        assert_eq!(r("helpf"), Ok("helpformat"));
        // node, nodes, nodelist: 'w' with a value; noheader differs.
        assert_eq!(r("nodel"), Ok("nodelist"));
        assert_eq!(r("nod"), Ok("node"), "a prefix of three aliases: one option, the first");
        assert_eq!(r("no"), Err(vec!["node", "noheader"]), "the first, then each unlike the first");
    }

    #[test]
    fn ambiguity_lists_the_first_and_every_later_entry_unlike_it() {
        assert_eq!(r("j"), Err(vec!["jobs", "json"]));
        assert_eq!(r("he"), Err(vec!["helpformat", "help"]), "help-fields is helpformat's twin: not listed");
        // Same letter, other arity: two options to glibc.
        assert_eq!(r("sor"), Err(vec!["sort", "sorted"]));
        // The empty name (`--=x`) is a prefix of every entry; all differ from the first here.
        assert_eq!(r(""), Err(LONGS.iter().map(|l| l.name.as_str()).collect()));
    }

    #[test]
    fn plugins_options_come_after_the_commands() {
        static PLUGINS: &[LongOpt] = &[BELT];
        assert_eq!(names(resolve(LONGS.iter().chain(PLUGINS), "ag")), Ok("agent-sandbox"));
        assert_eq!(names(resolve(LONGS.iter(), "ag")), Err(vec![]));
    }

    #[test]
    fn shorts_are_read_from_the_optstring_as_glibc_does() {
        let g =
            Getopt { optstring: "+ab:c::", longs: &[], plugins: false, reports: Reports { try_help: true, status: 1 } };
        assert_eq!(g.shorts().collect::<Vec<_>>(), [('a', Flag), ('b', Value), ('c', OptionalValue)]);
        assert!(g.stops_at_first_positional());
        assert_eq!(g.short('+'), None, "the leading + is no option");
        assert_eq!(g.short(':'), None);
        assert_eq!(g.short('d'), None);
        let g = Getopt { optstring: "x:", longs: &[], plugins: false, reports: Reports { try_help: false, status: 1 } };
        assert!(!g.stops_at_first_positional());
        assert_eq!(g.short('x'), Some(Value));
    }

    #[test]
    fn errors_are_worded_as_glibc_and_the_command_words_them() {
        let e = GetoptError::Ambiguous { typed: "j=5".into(), possibilities: vec!["jobs", "json"] };
        assert_eq!(e.to_string(), "option '--j=5' is ambiguous; possibilities: '--jobs' '--json'");
        let sacct = Reports { try_help: false, status: 1 };
        assert_eq!(sacct.render("sacct", &e), "sacct: option '--j=5' is ambiguous; possibilities: '--jobs' '--json'\n");
        let squeue = Reports { try_help: true, status: 1 };
        assert_eq!(
            squeue.render("squeue", &GetoptError::Unrecognized("zz=1".into())),
            "squeue: unrecognized option '--zz=1'\nTry \"squeue --help\" for more information\n"
        );
        assert_eq!(GetoptError::LongNeedsValue("jobs").to_string(), "option '--jobs' requires an argument");
        assert_eq!(GetoptError::LongTakesNoValue("json").to_string(), "option '--json' doesn't allow an argument");
        assert_eq!(GetoptError::InvalidShort('R').to_string(), "invalid option -- 'R'");
        assert_eq!(GetoptError::ShortNeedsValue('j').to_string(), "option requires an argument -- 'j'");
        let e = GetoptError::Unrecognized("a\nb\u{1b}".into()).to_string();
        assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e}");
        let e = GetoptError::Unrecognized("x".repeat(5000)).to_string();
        assert!(e.len() < 1100, "{}", e.len());
    }
}
