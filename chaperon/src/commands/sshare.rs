//! sshare: its option table (Slurm 22.05 spellings, each option allowed or denied with a
//! reason), `parse_sshare`, which turns a call into an `SshareRequest` (pure), and `handle`,
//! which refuses any user but the caller and runs it for the local cluster. sshare shows the
//! caller's own fair-share associations; listing every user's is refused.

use crate::call::{Call, Stdio};
use crate::checks::{cluster_view, only_caller};
use crate::grammar::ValueKind;
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::table::{
    allow, deny, last, parse, user_list, Arity, GrammarError, Options, Table, CLUSTER_SPELLING, LOCAL_CLUSTER,
};
use crate::table::{COMPLETION, TEXT_ONLY};
use Arity::{Flag, Value as Val};
use ValueKind::*;

/// sshare 22.05 exits with "getopt error" on these: nothing to pass on.
const BROKEN: &str = "sshare 22.05 has no use for it and fails on it (\"getopt error\")";

const NOT_LISTED: &str = "not on agent-sandbox's sshare allow-list; ask your admin if you need it";

/// Every option sshare 22.05 knows. Anything else is an unrecognized option.
pub static SSHARE: Table = Table {
    getopt: &slurm_22_05::SSHARE,
    getopt_24_11: &crate::slurm_24_11::SSHARE,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("accounts", Some('A'), Val, Text),
        allow("helpformat", Some('e'), Flag, Any),
        allow("long", Some('l'), Flag, Any),
        allow("partition", Some('m'), Flag, Any),
        allow("noheader", Some('n'), Flag, Any),
        // sshare 22.05's optstring has -h, -q and -t with no long form: -h is -n, and sshare
        // stops on -q and -t ("getopt error") after getopt took them.
        allow("h", Some('h'), Flag, Any).short_only(),
        deny("q", Some('q'), Flag, BROKEN).short_only(),
        deny("t", Some('t'), Val, BROKEN).short_only(),
        allow("format", Some('o'), Val, Text),
        allow("parsable", Some('p'), Flag, Any),
        allow("parsable2", Some('P'), Flag, Any),
        // Recorded in `users`: the chaperon refuses any user but the caller.
        allow("users", Some('u'), Val, Text),
        allow("Users", Some('U'), Flag, Any),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        allow("help", None, Flag, Any),
        allow("usage", None, Flag, Any),
        deny("all", Some('a'), Flag, "it lists every user's usage; sshare shows your own associations without it"),
        // Read-only: the chaperon checks the names it gives (`grammar::cluster_names`).
        allow("clusters", Some('M'), Val, Clusters).rebuilt(LOCAL_CLUSTER),
        deny("cluster", None, Val, CLUSTER_SPELLING),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        deny("json", None, Arity::OptionalValue, TEXT_ONLY).since(crate::release::R23_11),
        deny("yaml", None, Arity::OptionalValue, TEXT_ONLY).since(crate::release::R23_11),
    ],
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshareRequest {
    /// In order, a later entry overriding an earlier one. Never a denied option.
    pub options: Options,
    /// Every user any `--users` named: each must be the caller (the chaperon checks).
    pub users: Vec<String>,
}

impl SshareRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

/// Parses an sshare call (arguments without the program name). sshare reads no argument but
/// its options.
pub fn parse_sshare(args: &[String]) -> Result<SshareRequest, GrammarError> {
    let p = parse(&SSHARE, args)?;
    if !p.positionals.is_empty() {
        return Err(GrammarError::Usage("sshare takes no arguments besides options; name users with --users"));
    }
    let mut users = Vec::new();
    for (s, v) in &p.options {
        if let ("users", Some(v)) = (s.long, v.as_deref()) {
            users.extend(user_list("--users", v)?);
        }
    }
    Ok(SshareRequest { options: p.options.into_iter().map(|(s, v)| (s.long, v)).collect(), users })
}

/// sshare of the caller's own associations, for the local cluster.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let parsed = parse_sshare(&call.req.argv)?;
    let args = cluster_view(&SSHARE, &parsed.options, call.cfg.cluster_name())?;
    only_caller(&parsed.users, call.cfg)?;
    call.run_with(args, stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::table::testkit::*;

    fn ss(a: &[&str]) -> Result<SshareRequest, GrammarError> {
        parse_sshare(&argv(a))
    }

    #[test]
    fn the_table_is_sshare_22_05() {
        entries_are_the_getopt_sets(&SSHARE, &[]);
        table_is_sound(&SSHARE, 'l');
        // From the optstring "aA:ehlM:no:pPqUu:t:vVm"; -h, -q and -t have no option behind them
        // in 22.05 (sshare rejects -q and -t itself), so they are unrecognized here.
        shorts_are(
            &SSHARE,
            &[
                ('A', "accounts"),
                ('a', "all"),
                ('e', "helpformat"),
                ('h', "h"),
                ('l', "long"),
                ('m', "partition"),
                ('M', "clusters"),
                ('n', "noheader"),
                ('o', "format"),
                ('p', "parsable"),
                ('P', "parsable2"),
                ('q', "q"),
                ('t', "t"),
                ('u', "users"),
                ('U', "Users"),
                ('v', "verbose"),
                ('V', "version"),
            ],
        );
        optional_values_are(&SSHARE, &[]);
        denied_with(&SSHARE, "all", "every user");
    }

    #[test]
    fn snakemake_and_common_calls_parse() {
        assert_eq!(ss(&["-U"]).unwrap().options, [("Users", None)]);
        let r = ss(&["-lnP", "-A", "proj", "--format=Account,User,FairShare"]).unwrap();
        assert_eq!(r.last("accounts"), Some(Some("proj")));
        assert_eq!(ss(&["-u", "me", "--users=1000"]).unwrap().users, ["me", "1000"]);
    }

    #[test]
    fn all_users_clusters_arguments_and_unknowns_are_refused() {
        let e = ss(&["-la"]).unwrap_err();
        assert!(matches!(e, GrammarError::Denied { ref opt, .. } if opt == "-a (--all)"), "{e:?}");
        assert!(matches!(ss(&["--cluster=x"]), Err(GrammarError::Denied { .. })));
        assert_eq!(ss(&["-M", "x"]).unwrap().last("clusters"), Some(Some("x")));
        assert!(matches!(ss(&["me"]), Err(GrammarError::Usage(_))));
        assert!(matches!(ss(&["-q"]), Err(GrammarError::Denied { .. })), "sshare 22.05 fails on it");
        assert_eq!(ss(&["--user=me"]).unwrap().users, ["me"], "a prefix of --users");
        assert_eq!(ss(&["-Z"]), Err(GetoptError::InvalidShort('Z').into()));
        assert!(ss(&["-u", "a b"]).is_err());
        let many = vec!["-l".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_sshare(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SSHARE, &[], 0x5eed_0000_55a4_0001, parse_sshare);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SSHARE, &[], &[], &[], |a| {
            let p = parse_sshare(a).map_err(|e| e.to_string())?;
            Ok((cluster_view(&SSHARE, &p.options, Some("tc")).map_err(|e| e.to_string())?, String::new()))
        });
    }
}
