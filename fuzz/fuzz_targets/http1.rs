//! The bytes of a plain-HTTP flow from the (untrusted) jail, after its first request: the
//! framer must never panic, never say to forward bytes it was not given, and never let a head
//! pass undecided. The first byte chooses which heads the "matcher" refuses.
#![no_main]
use agent_sandbox::net::parse::http1::{Framer, Step};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&policy, data)) = data.split_first() else { return };
    let mut f = Framer::default();
    let mut at = 0;
    let mut heads = 0u32;
    loop {
        match f.step(&data[at..]) {
            Step::Forward(n) => {
                assert!(n > 0 && at + n <= data.len(), "forward {n} at {at} of {}", data.len());
                at += n;
            }
            Step::Decide(h) => {
                assert!(h.len > 0 && at + h.len <= data.len());
                heads += 1;
                if policy & (1 << (heads % 8)) != 0 {
                    return;
                }
                at += h.len;
                f.accept(&h);
            }
            Step::Hold => {
                // The server's answer: whatever the input has next.
                let _ = f.response(&data[at..]);
                if f.awaits_response() {
                    return;
                }
            }
            Step::NeedMore | Step::Refuse(_) => return,
        }
    }
});
