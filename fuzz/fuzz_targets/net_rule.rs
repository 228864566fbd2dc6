//! Network rules come from user and site policy; names come from the jail (DNS queries, SNI).
//! Any text: a rule or an error, never a panic; whatever parses prints back and re-parses to
//! the same rule; normalization is idempotent; decisions never panic.
#![no_main]
use agent_sandbox::netrules::matcher::{normalize_name, Action, Destination, Layer, MatcherOptions, Proto, Rule, RuleSet};
use libfuzzer_sys::fuzz_target;
use std::str::FromStr;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(rule) = Rule::from_str(text) {
        let printed = rule.to_string();
        assert_eq!(Rule::from_str(&printed).map(|r| r.to_string()).ok(), Some(printed));
    }
    if let Ok(n) = normalize_name(text) {
        assert_eq!(normalize_name(&n).ok(), Some(n));
    }
    let rules = vec![("*".to_string(), Action::Block, Layer::User), ("github.com".to_string(), Action::Allow, Layer::User)];
    if let Ok(set) = RuleSet::new(&rules, MatcherOptions { host_addrs: vec![], deny_private: true, ..Default::default() }) {
        let _ = set.name_allowed(text);
        let _ = set.decide(&Destination { ip: None, name: Some(text), port: 443, proto: Proto::Tcp });
    }
});
