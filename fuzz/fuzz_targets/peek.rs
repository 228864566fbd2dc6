//! The first bytes of every jailed TCP flow to a hostname-ruled port: TLS ClientHello or
//! HTTP head, written by the (untrusted) jail. No panic, no name that is not in the bytes.
#![no_main]
use agent_sandbox::net::parse::peek::{peek, Peeked};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match peek(data) {
        Peeked::Tls { sni: Some(n) } | Peeked::Http { host: Some(n) } => {
            assert!(!n.is_empty() && n.len() <= 253);
            assert!(n.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-_.:".contains(&c)));
        }
        _ => {}
    }
});
