//! sacctmgr: its option table and command grammar (Slurm 22.05 spellings), `parse_sacctmgr`,
//! which turns a call into a `SacctmgrRequest` (pure), and `handle`, which runs the listing, a
//! user or association listing for the caller's own user. Only `show`/`list` of users,
//! associations, QOS, TRES, clusters and the configuration are allowed (plus `help` and
//! `version`); every verb that changes the accounting database, and every other entity, is
//! refused with a reason.

use crate::call::{Call, Stdio};
use crate::checks::only_caller;
use crate::grammar::{validate, ValueKind};
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::table::{
    allow, any_of, as_written, bad_value, last, lookup, no, parse, user_list, word, Arity, Class, GrammarError,
    Options, Table, ADMIN, CLUSTERS, WORD as A,
};
use crate::table::{deny, COMPLETION, TEXT_ONLY};
use Arity::Flag;
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's sacctmgr allow-list; ask your admin if you need it";
const CHANGES: &str = "it changes the accounting database; sacctmgr can only show here, ask your Slurm admin";
const INTERACTIVE: &str = "an interactive-mode command; use the matching option (-Q, -v, -r, -s) instead";

/// Every option sacctmgr 22.05 knows: none changes anything by itself. Anything else is an
/// unrecognized option.
pub static SACCTMGR: Table = Table {
    getopt: &slurm_22_05::SACCTMGR,
    getopt_24_11: &crate::slurm_24_11::SACCTMGR,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("help", Some('h'), Flag, Any),
        allow("usage", None, Flag, Any),
        // Skips the confirmation of a change, and no change is allowed.
        allow("immediate", Some('i'), Flag, Any),
        allow("noheader", Some('n'), Flag, Any),
        allow("oneliner", Some('o'), Flag, Any),
        allow("parsable", Some('p'), Flag, Any),
        allow("parsable2", Some('P'), Flag, Any),
        allow("quiet", Some('Q'), Flag, Any),
        allow("readonly", Some('r'), Flag, Any),
        allow("associations", Some('s'), Flag, Any),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        deny("json", None, Arity::OptionalValue, TEXT_ONLY).since(crate::release::R23_02),
        deny("yaml", None, Arity::OptionalValue, TEXT_ONLY).since(crate::release::R23_02),
    ],
};

/// sacctmgr's commands (matched without regard to case, spelled in full).
pub static COMMANDS: &[(&str, Class)] = &[
    word("show", A),
    word("list", A),
    word("help", A),
    word("version", A),
    word("add", no(CHANGES)),
    word("create", no(CHANGES)),
    word("modify", no(CHANGES)),
    word("update", no(CHANGES)),
    word("delete", no(CHANGES)),
    word("remove", no(CHANGES)),
    word("archive", no(CHANGES)),
    word("load", no(CHANGES)),
    word("dump", no("it writes the accounting data to a file; use sacctmgr show instead")),
    word("clear", no(ADMIN)),
    word("reconfigure", no(ADMIN)),
    word("shutdown", no(ADMIN)),
    word("exit", no(INTERACTIVE)),
    word("quit", no(INTERACTIVE)),
    word("quiet", no(INTERACTIVE)),
    word("verbose", no(INTERACTIVE)),
    word("readonly", no(INTERACTIVE)),
    word("associations", no(INTERACTIVE)),
    word("oneliner", no(INTERACTIVE)),
    word("parsable", no(INTERACTIVE)),
    word("parsable2", no(INTERACTIVE)),
];

/// What `show`/`list` may display, in the spellings sacctmgr users write.
pub static ENTITIES: &[(&str, Class)] = &[
    word("user", A),
    word("users", A),
    word("association", A),
    word("associations", A),
    word("assoc", A),
    word("qos", A),
    word("tres", A),
    word("cluster", A),
    word("clusters", A),
    word("configuration", A),
    word("config", A),
    word("account", no("account listings show other users and projects; use sacctmgr show assoc")),
    word("accounts", no("account listings show other users and projects; use sacctmgr show assoc")),
    word("coordinator", no(NOT_LISTED)),
    word("event", no(NOT_LISTED)),
    word("events", no(NOT_LISTED)),
    word("federation", no(CLUSTERS)),
    word("problem", no(ADMIN)),
    word("problems", no(ADMIN)),
    word("reservation", no(NOT_LISTED)),
    word("reservations", no(NOT_LISTED)),
    word("resource", no(NOT_LISTED)),
    word("resources", no(NOT_LISTED)),
    word("runawayjobs", no("it offers to fix runaway jobs, which changes the database; ask your Slurm admin")),
    word("stats", no(ADMIN)),
    word("transaction", no(ADMIN)),
    word("transactions", no(ADMIN)),
    word("wckey", no(NOT_LISTED)),
    word("wckeys", no(NOT_LISTED)),
    word("job", no(CHANGES)),
];

/// Words of a listing that are display flags, not names (`withassoc`, `where`...).
const FLAGS: &[&str] = &[
    "where",
    "withassoc",
    "withcoord",
    "withdeleted",
    "withrawqos",
    "withsubaccounts",
    "wolimits",
    "wopinfo",
    "woplimits",
    "onlydefaults",
    "tree",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    User,
    Association,
    Qos,
    Tres,
    Cluster,
    Configuration,
}

/// One word of a listing after the entity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// A display flag from `FLAGS`, as written.
    Flag(String),
    /// `key=value`, the key as written (sacctmgr ignores its case).
    Condition { key: String, value: String },
    /// A bare word: a name of the entity (`sacctmgr show user alice`).
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SacctmgrCommand {
    Show {
        entity: Entity,
        specs: Vec<Spec>,
        /// For users and associations: every user named (bare names, `user=`, `users=`,
        /// `name=`, `names=`); each must be the caller, and none means the chaperon adds it.
        users: Vec<String>,
    },
    Help,
    Version,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SacctmgrRequest {
    /// In order.
    pub options: Options,
    /// None only for a call made of --help, --usage or --version.
    pub command: Option<SacctmgrCommand>,
    /// The command and its words, as written.
    pub words: Vec<String>,
}

impl SacctmgrRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

fn parse_show(verb: &str, words: &[String]) -> Result<SacctmgrCommand, GrammarError> {
    let first = words.first().ok_or(GrammarError::Usage(
        "sacctmgr show needs what to show: user, association, qos, tres, cluster or configuration",
    ))?;
    let name = lookup(ENTITIES, first, &format!("sacctmgr {verb} "))?.ok_or_else(|| {
        bad_value("sacctmgr show", first, "not something sacctmgr shows here (user, assoc, qos, tres, cluster)")
    })?;
    let entity = match name {
        "user" | "users" => Entity::User,
        "association" | "associations" | "assoc" => Entity::Association,
        "qos" => Entity::Qos,
        "tres" => Entity::Tres,
        "cluster" | "clusters" => Entity::Cluster,
        _ => Entity::Configuration,
    };
    let what = format!("sacctmgr {verb} {name}");
    let mut specs = Vec::new();
    let mut users = Vec::new();
    for w in &words[1..] {
        validate(Text, w).map_err(|why| bad_value(&what, w, why))?;
        if w.eq_ignore_ascii_case("set") {
            return Err(GrammarError::Usage("'set' belongs to sacctmgr modify, which is not allowed here"));
        }
        if let Some((key, value)) = w.split_once('=') {
            if key.is_empty() || key.len() > 64 || !key.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_') {
                return Err(bad_value(&what, w, "expected key=value, the key a word such as format or user"));
            }
            let user_key = match entity {
                Entity::User => ["user", "users", "name", "names"].iter().any(|k| k.eq_ignore_ascii_case(key)),
                Entity::Association => ["user", "users"].iter().any(|k| k.eq_ignore_ascii_case(key)),
                _ => false,
            };
            if user_key {
                users.extend(user_list(&what, value)?);
            }
            specs.push(Spec::Condition { key: key.to_string(), value: value.to_string() });
        } else if FLAGS.iter().any(|f| f.eq_ignore_ascii_case(w)) {
            specs.push(Spec::Flag(w.clone()));
        } else {
            if entity == Entity::User {
                users.extend(user_list(&what, w)?);
            }
            specs.push(Spec::Name(w.clone()));
        }
    }
    Ok(SacctmgrCommand::Show { entity, specs, users })
}

/// Parses a sacctmgr call (arguments without the program name). sacctmgr's getopt permutes, so
/// options may come anywhere; the other arguments are one command and its words.
pub fn parse_sacctmgr(args: &[String]) -> Result<SacctmgrRequest, GrammarError> {
    let p = parse(&SACCTMGR, args)?;
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    let Some((first, rest)) = p.positionals.split_first() else {
        if any_of(&options, &["help", "usage", "version"]) {
            return Ok(SacctmgrRequest { options, command: None, words: vec![] });
        }
        return Err(GrammarError::Unsupported(
            "interactive sacctmgr is not mediated by agent-sandbox; give the command as arguments, e.g. sacctmgr \
             show user $USER",
        ));
    };
    let verb = lookup(COMMANDS, first, "sacctmgr ")?.ok_or_else(|| {
        bad_value("sacctmgr", first, "not a sacctmgr command (spell it in full: show, list, help, version)")
    })?;
    let command = match verb {
        "show" | "list" => parse_show(verb, rest)?,
        _ if !rest.is_empty() => return Err(GrammarError::Usage("this sacctmgr command takes no arguments")),
        "help" => SacctmgrCommand::Help,
        _ => SacctmgrCommand::Version,
    };
    Ok(SacctmgrRequest { options, command: Some(command), words: p.positionals })
}

impl SacctmgrRequest {
    /// The real sacctmgr's arguments: the caller's options and words as written, and for a
    /// user or association listing that names no user, the caller (`user`).
    fn real_args(&self, user: &str) -> Vec<String> {
        let mut args = as_written(&SACCTMGR, &self.options);
        let mut words = self.words.clone();
        if let Some(SacctmgrCommand::Show { entity: Entity::User | Entity::Association, users, .. }) = &self.command {
            if users.is_empty() {
                words.push(format!("user={user}"));
            }
        }
        args.extend(crate::table::words(&words));
        args
    }
}

/// sacctmgr show/list: a user or association listing of the caller's own user only (named
/// by the chaperon when the caller names none).
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let parsed = parse_sacctmgr(&call.req.argv)?;
    if let Some(SacctmgrCommand::Show { users, .. }) = &parsed.command {
        only_caller(users, call.cfg)?;
    }
    call.run_with(parsed.real_args(&call.cfg.who.user), stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::table::testkit::*;
    use std::collections::HashSet;

    /// sacctmgr 22.05.8's getopt_long table, read from the installed binary.
    const SLURM: &[&str] = &[
        "help",
        "usage",
        "immediate",
        "noheader",
        "oneliner",
        "parsable",
        "parsable2",
        "quiet",
        "readonly",
        "associations",
        "verbose",
        "version",
    ];

    fn sm(a: &[&str]) -> Result<SacctmgrRequest, GrammarError> {
        parse_sacctmgr(&argv(a))
    }

    fn show(a: &[&str]) -> (Entity, Vec<Spec>, Vec<String>) {
        match sm(a).unwrap_or_else(|e| panic!("{a:?}: {e}")).command {
            Some(SacctmgrCommand::Show { entity, specs, users }) => (entity, specs, users),
            other => panic!("{a:?}: {other:?}"),
        }
    }

    fn denied(a: &[&str]) -> (String, &'static str) {
        match sm(a) {
            Err(GrammarError::Denied { opt, reason }) => (opt, reason),
            other => panic!("{a:?}: {other:?}"),
        }
    }

    #[test]
    fn the_table_is_sacctmgr_22_05() {
        entries_are_the_getopt_sets(&SACCTMGR, &[]);
        table_is_sound(&SACCTMGR, 'n');
        // From the optstring "hionpPQrsvV" (--usage is -h's twin, with no short form of its own).
        shorts_are(
            &SACCTMGR,
            &[
                ('h', "help"),
                ('i', "immediate"),
                ('n', "noheader"),
                ('o', "oneliner"),
                ('p', "parsable"),
                ('P', "parsable2"),
                ('Q', "quiet"),
                ('r', "readonly"),
                ('s', "associations"),
                ('v', "verbose"),
                ('V', "version"),
            ],
        );
        optional_values_are(&SACCTMGR, &[]);
        allowed_are(&SACCTMGR, SLURM);
    }

    #[test]
    fn word_tables_are_sound() {
        for table in [COMMANDS, ENTITIES] {
            let mut seen = HashSet::new();
            for (w, class) in table {
                assert!(seen.insert(w.to_ascii_lowercase()), "{w} twice");
                if let Class::Denied(r) = class {
                    assert!(!r.trim().is_empty() && !r.chars().any(char::is_control) && r.len() <= 100, "{w}: {r}");
                }
            }
        }
    }

    #[test]
    fn snakemake_default_account_query_parses() {
        let (entity, specs, users) = show(&["-n", "-s", "list", "user", "alice", "format=account%256"]);
        assert_eq!(entity, Entity::User);
        assert_eq!(users, ["alice"]);
        assert_eq!(
            specs,
            [Spec::Name("alice".into()), Spec::Condition { key: "format".into(), value: "account%256".into() }]
        );
    }

    #[test]
    fn every_allowed_entity_shows() {
        assert_eq!(show(&["show", "assoc", "where", "user=me", "format=Account,Partition"]).2, ["me"]);
        assert_eq!(show(&["show", "Associations"]).0, Entity::Association);
        assert_eq!(show(&["list", "qos", "normal", "format=Name,MaxWall"]).0, Entity::Qos);
        assert_eq!(show(&["show", "qos"]).2, Vec::<String>::new(), "names of a QOS are no users");
        assert_eq!(show(&["show", "tres"]).0, Entity::Tres);
        assert_eq!(show(&["show", "clusters"]).0, Entity::Cluster);
        assert_eq!(show(&["show", "config"]).0, Entity::Configuration);
        let (_, specs, users) = show(&["show", "users", "names=a,b", "WithAssoc", "-P"]);
        assert_eq!(users, ["a", "b"]);
        assert_eq!(specs[1], Spec::Flag("WithAssoc".into()));
        assert_eq!(sm(&["-P", "show", "user"]).unwrap().last("parsable2"), Some(None));
    }

    #[test]
    fn modifying_verbs_are_denied_with_their_reason() {
        for verb in ["add", "create", "modify", "update", "delete", "remove", "archive", "load"] {
            assert_eq!(denied(&[verb, "user", "x"]).1, CHANGES, "{verb}");
        }
        assert_eq!(denied(&["-i", "Modify", "user", "me", "set", "qos=high"]), ("sacctmgr modify".into(), CHANGES));
        assert_eq!(denied(&["shutdown"]).1, ADMIN);
        assert_eq!(denied(&["exit"]).1, INTERACTIVE);
        assert!(matches!(sm(&["show", "user", "where", "name=me", "set", "x=y"]), Err(GrammarError::Usage(_))));
    }

    #[test]
    fn other_entities_and_bad_words_are_refused() {
        assert_eq!(denied(&["show", "account"]).0, "sacctmgr show account");
        assert!(denied(&["list", "RunawayJobs"]).1.contains("changes the database"));
        assert_eq!(denied(&["show", "transactions"]).1, ADMIN);
        for bad in [
            &["show"][..],
            &["sh", "user"],
            &["show", "usr"],
            &["show", "user", "a b"],
            &["show", "user", "user=a;b"],
            &["show", "assoc", "=x"],
            &["show", "assoc", "for-mat=x"],
            &["show", "user", "a\nb"],
            &["help", "me"],
        ] {
            assert!(sm(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn no_command_unknowns_and_caps() {
        assert!(matches!(sm(&[]), Err(GrammarError::Unsupported(_))));
        assert!(matches!(sm(&["-n"]), Err(GrammarError::Unsupported(_))));
        assert_eq!(sm(&["-V"]).unwrap().command, None);
        assert_eq!(sm(&["version"]).unwrap().command, Some(SacctmgrCommand::Version));
        assert_eq!(sm(&["--parsable3"]), Err(GetoptError::Unrecognized("parsable3".into()).into()));
        assert_eq!(sm(&["-M", "x"]), Err(GetoptError::InvalidShort('M').into()));
        // --pars begins parsable and parsable2 (two options); --i is --immediate, the one it begins.
        let e = sm(&["--pars", "show", "qos"]).unwrap_err().to_string();
        assert_eq!(e, "option '--pars' is ambiguous; possibilities: '--parsable' '--parsable2'");
        assert_eq!(sm(&["--i", "show", "qos"]).unwrap().options, [("immediate", None)]);
        assert_eq!(sm(&["--us", "show", "qos"]).unwrap().options, [("usage", None)]);
        assert_eq!(show(&["--", "show", "tres"]).0, Entity::Tres);
        let many = vec!["-n".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_sacctmgr(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        let words = [
            "show",
            "list",
            "user",
            "assoc",
            "qos",
            "tres",
            "cluster",
            "config",
            "account",
            "add",
            "modify",
            "where",
            "set",
            "user=me",
            "format=a%9",
            "withassoc",
            "alice",
            "names=a,b",
            "help",
            "version",
        ];
        let fuzz = |args: &[String]| {
            let mut a = args.to_vec();
            let known = a.first().is_some_and(|w| COMMANDS.iter().any(|(c, _)| c.eq_ignore_ascii_case(w)));
            if !known && !a.len().is_multiple_of(3) {
                a.insert(0, "show".to_string());
            }
            parse_sacctmgr(&a)
        };
        never_panics(&SACCTMGR, &words, 0x5eed_0000_5acc_7001, fuzz);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SACCTMGR, &["show", "qos"], &[], &[], |a| {
            let p = parse_sacctmgr(a).map_err(|e| e.to_string())?;
            Ok((p.real_args("me"), String::new()))
        });
    }
}
