//! sattach: attaching to the I/O of a running step of one of the session's own jobs. The step's tasks already
//! run inside the jail (every step the chaperon starts does); sattach only carries their
//! stdin, stdout and stderr, with the caller's stdio, so the check is the job's scope.

use crate::call::{Call, Stdio};
use crate::checks::in_scope;
use crate::grammar::ValueKind;
use crate::jobid::{parse_job_list, JobRef, STEPS};
use crate::refusal::Refusal;
use crate::scope::Scope;
use crate::slurm_22_05;
use crate::table::COMPLETION;
use crate::table::{allow, any_of, as_written, deny, parse, words, Arity, GrammarError, Options, Table};
use Arity::{Flag, Value as Val};
use ValueKind::*;

const NOT_LISTED: &str = "not on agent-sandbox's sattach allow-list; ask your admin if you need it";

/// Every option sattach 22.05 knows. Anything else is unrecognized.
pub static SATTACH: Table = Table {
    getopt: &slurm_22_05::SATTACH,
    getopt_24_11: &crate::slurm_24_11::SATTACH,
    not_listed: NOT_LISTED,
    shared: &[],
    own: &[
        allow("input-filter", None, Val, Int),
        allow("output-filter", None, Val, Int),
        allow("error-filter", None, Val, Int),
        allow("label", Some('l'), Flag, Any),
        allow("layout", None, Flag, Any),
        allow("quiet", Some('Q'), Flag, Any),
        allow("verbose", Some('v'), Flag, Any),
        allow("version", Some('V'), Flag, Any),
        allow("help", Some('h'), Flag, Any),
        allow("usage", Some('u'), Flag, Any),
        allow("pty", None, Flag, Any),
        deny("debugger-test", None, Flag, "a test option of Slurm's own"),
        // Added after 22.05 (`since`: the release that added each).
        deny("autocomplete", None, Arity::Value, COMPLETION).since(crate::release::R23_02),
    ],
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SattachRequest {
    pub options: Options,
    /// The step attached to; None only with --help and the like.
    pub step: Option<JobRef>,
    pub words: Vec<String>,
}

pub fn parse_sattach(args: &[String]) -> Result<SattachRequest, GrammarError> {
    let p = parse(&SATTACH, args)?;
    let options: Options = p.options.into_iter().map(|(s, v)| (s.long, v)).collect();
    let mut step = None;
    match p.positionals.as_slice() {
        [] if any_of(&options, &["help", "usage", "version"]) => {}
        [one] => {
            let refs = parse_job_list(one, STEPS).map_err(|why| crate::table::bad_value("job", one, why))?;
            match refs.as_slice() {
                [r] if r.step.is_some() => step = Some(r.clone()),
                _ => return Err(GrammarError::Usage("sattach takes one step: <jobid.stepid>")),
            }
        }
        _ => return Err(GrammarError::Usage("sattach takes one step: <jobid.stepid>")),
    }
    Ok(SattachRequest { options, step, words: p.positionals })
}

/// sattach to a step of one of this session's own jobs, with the caller's stdio. Not the
/// project's: another session's steps run under that session's policy, and input sent to
/// them would run there.
pub(crate) fn handle(call: &mut Call<'_>, stdio: Stdio) -> Result<i32, Refusal> {
    let parsed = parse_sattach(&call.req.argv)?;
    let cfg = call.cfg;
    let own = crate::checks::read_scope(cfg, |r| {
        r.live_jobs(Scope::Session, &cfg.who.session, &cfg.who.project, cfg.cluster_name())
    });
    in_scope(&own, parsed.step.iter().map(|r| r.job))?;
    let mut args = as_written(&SATTACH, &parsed.options);
    args.extend(words(&parsed.words));
    call.run_with(args, stdio)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::testkit::*;

    #[test]
    fn the_table_is_sattach_22_05() {
        entries_are_the_getopt_sets(&SATTACH, &[]);
        table_is_sound(&SATTACH, 'l');
    }

    #[test]
    fn one_step_is_named_and_nothing_else() {
        let r = parse_sattach(&argv(&["-l", "123.0"])).unwrap();
        assert_eq!((r.step.map(|s| s.job), r.options.len()), (Some(123), 1));
        for bad in
            [&["123"][..], &["123.0", "124.0"], &[], &["--debugger-test", "1.0"], &["1.0,2.0"], &["--bogus", "1.0"]]
        {
            assert!(parse_sattach(&argv(bad)).is_err(), "{bad:?}");
        }
        assert!(parse_sattach(&argv(&["--help"])).unwrap().step.is_none());
    }
}
