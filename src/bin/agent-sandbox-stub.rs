//! The stubs the jail runs under Slurm's and the mailers' names, as a binary of their own:
//! the launcher is a 10 MB program with ten thousand relocations, and every `squeue` an
//! agent runs would pay for its start. This one links only the stubs (no CLI parser, no
//! async runtime, no network stack, none of the chaperon's handlers). The launcher binds it
//! into the jail when it is installed next to it, else itself (which dispatches the same way).
//!
//! Its entry point is C's `main`, not Rust's: Rust's runtime start reads the main thread's
//! stack bounds from `/proc/self/maps` (for a stack-overflow message), a tenth of a call
//! answered by the chaperon.
// The test harness brings its own main.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(_argc: i32, _argv: *const *const u8) -> i32 {
    // As Rust's runtime would: a broken pipe is an error to report, not a signal to die of
    // (the stub says so when the chaperon is gone mid-call).
    // SAFETY: SIG_IGN installs no handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let code = std::env::args_os().next().and_then(|a0| agent_sandbox::stub::dispatch(&a0)).unwrap_or_else(|| {
        eprintln!("agent-sandbox-stub: run it under a Slurm command's or a mailer's name (the jail does)");
        2
    });
    std::process::exit(code);
}
