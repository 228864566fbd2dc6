//! sinfo: its option table (Slurm 22.05 spellings, each option allowed or denied with a
//! reason), `parse_sinfo` (pure) and `handle`, which runs it for the local cluster. sinfo shows
//! partitions and nodes, no job, so every view is allowed; only what would never exit or reach
//! another cluster is refused.

use crate::call::{Call, Stdio};
use crate::checks::cluster_view;
use crate::grammar::ValueKind;
use crate::refusal::Refusal;
use crate::slurm_22_05;
use crate::table::{
    allow, deny, last, output, parse, Arity, GrammarError, Options, Output, Table, CLUSTER_SPELLING, ITERATE,
    LOCAL_CLUSTER,
};
use crate::table::{COMPLETION, JSON_VALUE};
use Arity::{Flag, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's sinfo allow-list; ask your admin if you need it";

/// Every option sinfo 22.05 knows. Anything else is an unrecognized option.
pub static SINFO: Table = Table {
    getopt: &slurm_22_05::SINFO,
    getopt_24_11: &crate::slurm_24_11::SINFO,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("all", Some('a'), Flag, Any),
        allow("dead", Some('d'), Flag, Any),
        allow("exact", Some('e'), Flag, Any),
        allow("federation", None, Flag, Any),
        allow("help", None, Flag, Any),
        allow("hide", None, Flag, Any),
        allow("local", None, Flag, Any),
        allow("long", Some('l'), Flag, Any),
        allow("nodes", Some('n'), Val, NodeList),
        allow("noconvert", None, Flag, Any),
        allow("noheader", Some('h'), Flag, Any),
        allow("Node", Some('N'), Flag, Any),
        allow("format", Some('o'), Val, Text),
        allow("Format", Some('O'), Val, Text),
        allow("partition", Some('p'), Val, Text),
        allow("responding", Some('r'), Flag, Any),
        allow("list-reasons", Some('R'), Flag, Any),
        allow("summarize", Some('s'), Flag, Any),
        allow("sort", Some('S'), Val, Text),
        allow("states", Some('t'), Val, Text),
        allow("reservation", Some('T'), Flag, Any),
        allow("usage", None, Flag, Any),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        allow("json", None, Arity::OptionalValue, Refused(JSON_VALUE)),
        allow("yaml", None, Arity::OptionalValue, Refused(JSON_VALUE)),
        deny("iterate", Some('i'), Val, ITERATE),
        // Read-only: the chaperon checks the names it gives (`grammar::cluster_names`).
        allow("clusters", Some('M'), Val, Clusters).rebuilt(LOCAL_CLUSTER),
        deny("cluster", None, Val, CLUSTER_SPELLING),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
        allow("future", Some('F'), Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R23_02),
        allow("helpformat", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("helpFormat", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
        allow("helpstate", None, Arity::Flag, crate::grammar::ValueKind::Any).since(crate::release::R24_05),
    ],
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinfoRequest {
    /// In order, a later entry overriding an earlier one. Never a denied option.
    pub options: Options,
    pub output: Output,
}

impl SinfoRequest {
    /// The value the last occurrence of `long` carries: None if absent, Some(None) for a flag.
    pub fn last(&self, long: &str) -> Option<Option<&str>> {
        last(&self.options, long)
    }
}

/// Parses a sinfo call (arguments without the program name). sinfo reads no argument but
/// its options.
pub fn parse_sinfo(args: &[String]) -> Result<SinfoRequest, GrammarError> {
    let p = parse(&SINFO, args)?;
    if !p.positionals.is_empty() {
        return Err(GrammarError::Usage("sinfo takes no arguments besides options; name nodes with --nodes"));
    }
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    let output = output(&options);
    Ok(SinfoRequest { options, output })
}

/// sinfo as the caller wrote it, for the local cluster.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let parsed = parse_sinfo(&call.req.argv)?;
    call.run_with(cluster_view(&SINFO, &parsed.options, call.cfg.cluster_name())?, stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testkit::*;

    /// sinfo 22.05.8's getopt_long table, read from the installed binary.
    const SLURM: &[&str] = &[
        "all",
        "dead",
        "exact",
        "federation",
        "help",
        "hide",
        "iterate",
        "local",
        "long",
        "cluster",
        "clusters",
        "nodes",
        "noconvert",
        "noheader",
        "Node",
        "format",
        "Format",
        "partition",
        "responding",
        "list-reasons",
        "summarize",
        "sort",
        "states",
        "reservation",
        "usage",
        "verbose",
        "version",
        "json",
        "yaml",
    ];

    fn si(a: &[&str]) -> Result<SinfoRequest, GrammarError> {
        parse_sinfo(&argv(a))
    }

    #[test]
    fn the_table_is_sinfo_22_05() {
        entries_are_the_getopt_sets(&SINFO, &[]);
        table_is_sound(&SINFO, 'l');
        // From the optstring "adehi:lM:n:No:O:p:rRsS:t:TvV".
        shorts_are(
            &SINFO,
            &[
                ('a', "all"),
                ('d', "dead"),
                ('e', "exact"),
                ('h', "noheader"),
                ('i', "iterate"),
                ('l', "long"),
                ('M', "clusters"),
                ('n', "nodes"),
                ('N', "Node"),
                ('o', "format"),
                ('O', "Format"),
                ('p', "partition"),
                ('r', "responding"),
                ('R', "list-reasons"),
                ('s', "summarize"),
                ('S', "sort"),
                ('t', "states"),
                ('T', "reservation"),
                ('v', "verbose"),
                ('V', "version"),
            ],
        );
        optional_values_are(&SINFO, &["json", "yaml"]);
        allowed_are(&SINFO, &SLURM.iter().copied().filter(|l| !["iterate", "cluster"].contains(l)).collect::<Vec<_>>());
    }

    #[test]
    fn snakemake_and_common_views_parse() {
        let r = si(&["-o", "%P"]).unwrap();
        assert_eq!(r.last("format"), Some(Some("%P")));
        let r = si(&["-Nel", "--states=idle,mix", "-p", "gpu", "--json"]).unwrap();
        assert_eq!((r.options.len(), r.output), (6, Output::Json));
        assert!(si(&["-hn", "node[1-4]"]).is_ok());
        assert!(si(&["-n", "/etc/hosts"]).is_err(), "a node list is never a file here");
    }

    #[test]
    fn iterate_clusters_unknowns_and_arguments_are_refused() {
        let e = si(&["-i5"]).unwrap_err().to_string();
        assert_eq!(e, format!("option -i (--iterate) is not allowed in agent-sandbox: {ITERATE}"));
        assert_eq!(si(&["-M", "all"]).unwrap().last("clusters"), Some(Some("all")));
        assert!(matches!(si(&["--cluster=all"]), Err(GrammarError::Denied { .. })));
        assert_eq!(si(&["--node=n1"]).unwrap().last("nodes"), Some(Some("n1")), "a prefix of --nodes");
        assert_eq!(si(&["--N"]).unwrap().options, [("Node", None)], "case counts: --N is --Node");
        let e = si(&["--no"]).unwrap_err().to_string();
        assert_eq!(e, "option '--no' is ambiguous; possibilities: '--nodes' '--noconvert' '--noheader'");
        assert!(matches!(si(&["gpu"]), Err(GrammarError::Usage(_))));
        assert!(matches!(si(&["--", "-l"]), Err(GrammarError::Usage(_))));
        let many = vec!["-l".to_string(); crate::table::MAX_ARGS + 1];
        assert!(matches!(parse_sinfo(&many), Err(GrammarError::TooManyArgs { .. })));
    }

    #[test]
    fn random_arguments_never_panic() {
        never_panics(&SINFO, &[], 0x5eed_0000_5140_0001, parse_sinfo);
    }

    #[test]
    fn the_table_decides_what_is_rebuilt() {
        crate::table::testkit::rebuilds_are_the_tables(&SINFO, &[], &[], &[], |a| {
            let p = parse_sinfo(a).map_err(|e| e.to_string())?;
            Ok((cluster_view(&SINFO, &p.options, Some("tc")).map_err(|e| e.to_string())?, String::new()))
        });
    }
}
