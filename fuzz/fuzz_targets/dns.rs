//! DNS messages come from the jail (queries) and from upstream resolvers (answers): any bytes
//! give a verdict or an answer, never a panic; an answer we pass on never carries a floored
//! address.
#![no_main]
use agent_sandbox::net::dns::{check_answer, check_query};
use agent_sandbox::netrules::matcher::{Action, Layer, MatcherOptions, RuleSet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let rules = vec![("blocked.test".to_string(), Action::Block, Layer::User)];
    let opts = MatcherOptions { host_addrs: vec!["192.0.2.2".parse().unwrap()], ..Default::default() };
    let Ok(set) = RuleSet::new(&rules, opts) else { return };
    let _ = check_query(data, &set);
    if let Some(c) = check_answer(data, "x.test", &set) {
        for (_, ip, _) in &c.learned {
            assert!(set.address_floor(*ip).is_none(), "learned a floored address {ip}");
        }
    }
});
