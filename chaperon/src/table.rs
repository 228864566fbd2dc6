//! What the commands' option tables share: the const constructors they are written with,
//! the denial reasons several commands give, and small readers over parsed options. Knows no
//! single command; `jobid` holds job ids.

use crate::grammar::{clip, Arity, Class, GrammarError, OptSpec, ValueKind};

pub(crate) const fn opt(
    long: &'static str,
    short: Option<char>,
    arity: Arity,
    class: Class,
    value: ValueKind,
) -> OptSpec {
    OptSpec { long, short, arity, class, value }
}
pub(crate) const fn allow(long: &'static str, short: Option<char>, arity: Arity, value: ValueKind) -> OptSpec {
    opt(long, short, arity, Class::Allowed, value)
}
pub(crate) const fn deny(long: &'static str, short: Option<char>, arity: Arity, reason: &'static str) -> OptSpec {
    opt(long, short, arity, Class::Denied(reason), ValueKind::Any)
}

pub(crate) const CLUSTERS: &str = "jobs go to the local cluster only, unless the sandbox policy allows other clusters";
/// `--cluster` is the same option as `--clusters` in Slurm; the chaperon checks the value of
/// `--clusters`/`-M` alone, so the other spelling is refused with a pointer to it.
pub(crate) const CLUSTER_SPELLING: &str = "spell it --clusters (or -M)";
pub(crate) const RUNS_OUTSIDE: &str = "it would run a program outside the jail on the node; do that setup in the job";
pub(crate) const BURST_BUFFER: &str = "burst-buffer staging runs outside the jail; stage data from within the job";
pub(crate) const MAIL: &str = "jobs from a sandboxed session send no e-mail; poll with squeue or sacct instead";
pub(crate) const ITERATE: &str = "it never exits; run the command again (e.g. in a loop with sleep) instead";
pub(crate) const ADMIN: &str = "only a Slurm administrator may do this; ask your admin";

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
    //! Checks every command's table gets (sbatch.rs has its own copies of these), and the
    //! random-argument run each grammar must survive.
    use crate::grammar::{parse, validate, Arity, Class, GrammarError, OptSpec, ValueKind, MAX_ARG_BYTES};
    use std::collections::HashSet;

    pub fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    pub fn spec(table: &'static [OptSpec], long: &str) -> &'static OptSpec {
        table.iter().find(|s| s.long == long).unwrap_or_else(|| panic!("--{long} not in the table"))
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
        }
    }

    type Pairs = Vec<(&'static str, Option<String>)>;

    fn pairs(table: &'static [OptSpec], a: &[String]) -> Result<Pairs, GrammarError> {
        parse(table, a, false).map(|p| p.options.into_iter().map(|(s, v)| (s.long, v)).collect())
    }

    /// The set of long names is exactly Slurm 22.05's (dumped from the 22.05.8 binary's
    /// getopt table) plus `extra`, options of other commands named so an agent gets a reason.
    pub fn names_are_slurm_22_05(table: &'static [OptSpec], slurm: &[&str], extra: &[&str]) {
        let have: HashSet<&str> = table.iter().map(|s| s.long).collect();
        let want: HashSet<&str> = slurm.iter().chain(extra).copied().collect();
        let missing: Vec<_> = want.difference(&have).collect();
        let unknown: Vec<_> = have.difference(&want).collect();
        assert!(missing.is_empty() && unknown.is_empty(), "missing {missing:?}, not in 22.05 {unknown:?}");
    }

    pub fn shorts_are(table: &'static [OptSpec], expected: &[(char, &str)]) {
        let have: HashSet<(char, &str)> = table.iter().filter_map(|s| s.short.map(|c| (c, s.long))).collect();
        assert_eq!(have, expected.iter().copied().collect());
    }

    pub fn optional_values_are(table: &'static [OptSpec], expected: &[&str]) {
        let have: HashSet<&str> = table.iter().filter(|s| s.arity == Arity::OptionalValue).map(|s| s.long).collect();
        assert_eq!(have, expected.iter().copied().collect());
    }

    pub fn allowed_are(table: &'static [OptSpec], expected: &[&str]) {
        let have: HashSet<&str> = table.iter().filter(|s| s.class == Class::Allowed).map(|s| s.long).collect();
        let want: HashSet<&str> = expected.iter().copied().collect();
        let extra: Vec<_> = have.difference(&want).collect();
        let missing: Vec<_> = want.difference(&have).collect();
        assert!(extra.is_empty() && missing.is_empty(), "allowed but not expected {extra:?}, expected {missing:?}");
    }

    pub fn denied_with(table: &'static [OptSpec], long: &str, reason_part: &str) {
        match spec(table, long).class {
            Class::Denied(r) => assert!(r.contains(reason_part), "--{long}: {r}"),
            c => panic!("--{long} is {c:?}, not denied"),
        }
    }

    /// The checks sbatch.rs makes on its table, for any table. `flag` is an allowed short flag
    /// to cluster the others with.
    pub fn table_is_sound(table: &'static [OptSpec], flag: char) {
        let f = spec(table, table.iter().find(|s| s.short == Some(flag)).map(|s| s.long).unwrap_or("?"));
        assert!(f.class == Class::Allowed && f.arity == Arity::Flag, "-{flag} must be an allowed flag");

        let mut longs = HashSet::new();
        let mut shorts = HashSet::new();
        for s in table {
            assert!(longs.insert(s.long), "--{} twice", s.long);
            assert!(!s.long.is_empty() && !s.long.starts_with('-') && !s.long.contains('='), "--{}", s.long);
            if let Some(c) = s.short {
                assert!(shorts.insert(c), "-{c} twice");
                assert!(c.is_ascii_alphabetic(), "-{c}");
            }
            if let Class::Denied(r) | Class::Rebuilt(r) = s.class {
                assert!(!r.trim().is_empty(), "--{} has no reason", s.long);
                assert!(!r.chars().any(char::is_control), "--{} reason is not one line", s.long);
                assert!(r.len() <= 100, "--{} reason is too long for one line", s.long);
            }
        }

        for s in table {
            let long = format!("--{}", s.long);
            let v = sample(s.value);
            let with_eq = format!("{long}={v}");
            if let Class::Denied(reason) = s.class {
                for a in [vec![long.clone()], vec![with_eq.clone()], vec![long.clone(), v.to_string()]] {
                    let want = GrammarError::Denied { opt: long.clone(), reason };
                    assert_eq!(parse(table, &a, false), Err(want), "{a:?}");
                }
            } else {
                let one = |a: Vec<String>| pairs(table, &a).unwrap_or_else(|e| panic!("{a:?}: {e}"));
                let val = Some(v.to_string());
                match s.arity {
                    Arity::Flag => {
                        assert_eq!(one(vec![long.clone()]), [(s.long, None)]);
                        assert_eq!(pairs(table, &[with_eq]), Err(GrammarError::UnexpectedValue(long)));
                    }
                    Arity::Value => {
                        assert_eq!(one(vec![with_eq]), [(s.long, val.clone())]);
                        assert_eq!(one(vec![long.clone(), v.to_string()]), [(s.long, val)]);
                        let missing = pairs(table, std::slice::from_ref(&long));
                        assert_eq!(missing, Err(GrammarError::MissingValue(long)));
                    }
                    Arity::OptionalValue => {
                        assert_eq!(one(vec![long.clone()]), [(s.long, None)]);
                        assert_eq!(one(vec![with_eq]), [(s.long, val)]);
                    }
                }
                if s.arity != Arity::Flag {
                    for bad in ["\n", "\0", "\r", "\u{1b}[2J"] {
                        let v = format!("{v}{bad}x");
                        let a = [format!("--{}={v}", s.long)];
                        assert!(matches!(parse(table, &a, false), Err(GrammarError::BadValue { .. })), "{a:?}");
                        assert!(validate(s.value, &v).is_err());
                    }
                }
            }

            let Some(c) = s.short else { continue };
            if let Class::Denied(reason) = s.class {
                let want = Err(GrammarError::Denied { opt: format!("-{c} (--{})", s.long), reason });
                assert_eq!(pairs(table, &[format!("-{c}{v}")]), want);
                assert_eq!(pairs(table, &[format!("-{flag}{flag}{c}"), v.to_string()]), want, "clustered after flags");
                continue;
            }
            match s.arity {
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
                    if s.arity == Arity::Value {
                        assert_eq!(pairs(table, &[format!("-{c}"), v.to_string()]), one);
                    }
                }
            }
        }
    }

    /// Prefixes of real options are unknown: exact names only, whatever getopt_long would do.
    pub fn prefixes_are_unknown(table: &'static [OptSpec]) {
        for s in table.iter().filter(|s| s.long.len() > 2) {
            let p = &s.long[..s.long.len() - 1];
            if table.iter().any(|t| t.long == p) {
                continue;
            }
            let a = [format!("--{p}")];
            assert_eq!(parse(table, &a, false), Err(GrammarError::Unknown(format!("--{p}"))), "{a:?}");
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

    fn token(rng: &mut Rng, table: &'static [OptSpec], words: &[&str]) -> String {
        let junk = |rng: &mut Rng| (0..rng.below(5)).map(|_| *rng.pick(ATOMS)).collect::<String>();
        match rng.below(6) {
            0 => format!("--{}", rng.pick(table).long),
            1 => format!("-{}", rng.pick(table).short.unwrap_or('v')),
            2 => format!("--{}={}", rng.pick(table).long, junk(rng)),
            3 if !words.is_empty() => rng.pick(words).to_string(),
            4 => format!("{}{}", rng.pick(ATOMS), rng.pick(ATOMS)),
            _ => junk(rng),
        }
    }

    /// Feeds `runs` random argument vectors (real option names, `words` the command reads as
    /// positionals, and junk) to `parse_cmd`: it must never panic, errors stay short, and both
    /// outcomes must be reached, or the generator tests nothing.
    pub fn never_panics<T>(
        table: &'static [OptSpec],
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
            let _ = parse(table, &args, true);
        }
        assert!(outcomes[0] > 500 && outcomes[1] > 500, "{outcomes:?}");
    }
}
