//! sdiag: its option table (Slurm 22.05 spellings, each option allowed or denied with a
//! reason), `parse_sdiag` (pure) and `handle`, which runs it for the local cluster. sdiag reads
//! the controller's statistics; resetting them is an administrator's act and refused.

use crate::call::{Call, Stdio};
use crate::checks::cluster_view;
use crate::grammar::ValueKind;
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::table::{
    allow, deny, last, parse, Arity, GrammarError, Options, Table, ADMIN, CLUSTER_SPELLING, LOCAL_CLUSTER,
};
use crate::table::{COMPLETION, TEXT_ONLY};
use Arity::{Flag, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's sdiag allow-list; ask your admin if you need it";

/// Every option sdiag 22.05 knows. Anything else is an unrecognized option.
pub static SDIAG: Table = Table {
    getopt: &slurm_22_05::SDIAG,
    getopt_24_11: &crate::slurm_24_11::SDIAG,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("all", Some('a'), Flag, Any),
        allow("help", Some('h'), Flag, Any),
        allow("sort-by-id", Some('i'), Flag, Any),
        allow("sort-by-time", Some('t'), Flag, Any),
        allow("sort-by-time2", Some('T'), Flag, Any),
        allow("usage", None, Flag, Any),
        allow("version", Some('V'), Flag, Any),
        deny("reset", Some('r'), Flag, ADMIN),
        // Read-only: the chaperon checks the names it gives (`grammar::cluster_names`).
        allow("clusters", Some('M'), Val, Clusters).rebuilt(LOCAL_CLUSTER),
        deny("cluster", None, Val, CLUSTER_SPELLING),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        deny("json", None, Arity::OptionalValue, TEXT_ONLY).since(crate::release::R23_02),
        deny("yaml", None, Arity::OptionalValue, TEXT_ONLY).since(crate::release::R23_02),
    ],
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdiagRequest {
    /// In order. Never a denied option.
    pub options: Options,
}

impl SdiagRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

/// Parses an sdiag call (arguments without the program name). sdiag reads no argument but
/// its options.
pub fn parse_sdiag(args: &[String]) -> Result<SdiagRequest, GrammarError> {
    let p = parse(&SDIAG, args)?;
    if !p.positionals.is_empty() {
        return Err(GrammarError::Usage("sdiag takes no arguments besides options"));
    }
    Ok(SdiagRequest { options: p.options.into_iter().map(|(s, v)| (s.long, v)).collect() })
}

/// sdiag as the caller wrote it, for the local cluster.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let parsed = parse_sdiag(&call.req.argv)?;
    call.run_with(cluster_view(&SDIAG, &parsed.options, call.cfg.cluster_name())?, stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::getopt::GetoptError;
    use crate::table::testkit::*;

    fn sd(a: &[&str]) -> Result<SdiagRequest, GrammarError> {
        parse_sdiag(&argv(a))
    }

    #[test]
    fn the_table_is_sdiag_22_05() {
        entries_are_the_getopt_sets(&SDIAG, &[]);
        table_is_sound(&SDIAG, 'a');
        // From the optstring "ahiM:rtTV".
        shorts_are(
            &SDIAG,
            &[
                ('a', "all"),
                ('h', "help"),
                ('i', "sort-by-id"),
                ('M', "clusters"),
                ('r', "reset"),
                ('t', "sort-by-time"),
                ('T', "sort-by-time2"),
                ('V', "version"),
            ],
        );
        optional_values_are(&SDIAG, &[]);
    }

    #[test]
    fn reading_is_allowed_and_resetting_is_not() {
        assert_eq!(sd(&["-at"]).unwrap().options, [("all", None), ("sort-by-time", None)]);
        assert_eq!(sd(&[]).unwrap().options, []);
        let e = sd(&["-ar"]).unwrap_err().to_string();
        assert_eq!(e, format!("option -r (--reset) is not allowed in agent-sandbox: {ADMIN}"));
        assert!(matches!(sd(&["--reset"]), Err(GrammarError::Denied { .. })));
        assert_eq!(sd(&["-M", "x"]).unwrap().options, [("clusters", Some("x".into()))]);
        assert!(matches!(sd(&["--cluster", "x"]), Err(GrammarError::Denied { .. })));
        assert!(matches!(sd(&["x"]), Err(GrammarError::Usage(_))));
        assert!(matches!(sd(&["--", "-a"]), Err(GrammarError::Usage(_))));
        let e = sd(&["--sort-by"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "option '--sort-by' is ambiguous; possibilities: '--sort-by-id' '--sort-by-time' '--sort-by-time2'"
        );
        let e = sd(&["--sort-by-t"]).unwrap_err().to_string();
        assert_eq!(e, "option '--sort-by-t' is ambiguous; possibilities: '--sort-by-time' '--sort-by-time2'");
        assert_eq!(sd(&["--sort-by-time"]).unwrap().options, [("sort-by-time", None)], "an exact name wins");
        assert_eq!(sd(&["--sort-by-x"]), Err(GetoptError::Unrecognized("sort-by-x".into()).into()));
        let many = vec!["-a".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_sdiag(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SDIAG, &[], 0x5eed_0000_5d1a_0001, parse_sdiag);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SDIAG, &[], &[], &[], |a| {
            let p = parse_sdiag(a).map_err(|e| e.to_string())?;
            Ok((cluster_view(&SDIAG, &p.options, Some("tc")).map_err(|e| e.to_string())?, String::new()))
        });
    }
}
