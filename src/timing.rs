//! Startup timing marks for profiling (`AGENT_SANDBOX_TIMING=1`): one line per mark on
//! stderr with a monotonic microsecond clock and the pid, so launcher and jail init
//! interleave correctly. Read once: the jail's init zeroes its environment early.

use std::sync::OnceLock;

pub fn mark(what: &str) {
    static ON: OnceLock<bool> = OnceLock::new();
    if !*ON.get_or_init(|| std::env::var_os("AGENT_SANDBOX_TIMING").is_some()) {
        return;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    eprintln!(
        "agent-sandbox timing {:>12}us pid {} {what}",
        ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000,
        std::process::id()
    );
}
