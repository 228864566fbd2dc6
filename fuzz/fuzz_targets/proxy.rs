//! The proxied mode's HTTP and SOCKS5 servers read whatever a jailed process sends: any bytes
//! end in an error reply or a closed connection, never a panic or a hang. The policy blocks
//! everything, so nothing is ever dialled.
#![no_main]
use agent_sandbox::net::proxy::fuzz_one;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((first, rest)) = data.split_first() {
        fuzz_one(first & 1 == 0, rest);
    }
});
