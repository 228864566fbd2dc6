//! Packets come from the jail's kernel, which the jail's code can drive with raw sockets of
//! its own namespace: any bytes summarize (or are "other") and get an ICMP error built, never
//! a panic or an out-of-bounds range.
#![no_main]
use agent_sandbox::net::packet::{port_unreachable, prohibited, summarize, Summary};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match summarize(data) {
        Summary::Udp { payload: (a, b), .. } | Summary::Echo { data: (a, b), .. } => {
            assert!(a <= b && b <= data.len());
        }
        _ => {}
    }
    let _ = prohibited(data);
    let _ = port_unreachable(data);
});
