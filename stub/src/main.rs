//! The stubs the jail runs under Slurm's and the mailers' names, as a binary of their own:
//! the launcher is a 10 MB program with ten thousand relocations, and every `squeue` an
//! agent runs would pay for its start. This one links only the stubs (no CLI parser, no
//! async runtime, no network stack, none of the chaperon's handlers). The launcher binds it
//! into the jail when it is installed next to it, else itself (which dispatches the same way).
//! `stub/release.sh` links it statically against musl (see the crate's documentation for why).
//!
//! Its entry point is C's `main`, not Rust's: Rust's runtime start reads the main thread's
//! stack bounds from `/proc/self/maps` (for a stack-overflow message), a tenth of a call
//! answered by the chaperon.
// The test harness brings its own main.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(argc: i32, argv: *const *const libc::c_char) -> i32 {
    use std::os::unix::ffi::OsStrExt;
    // As Rust's runtime would: 0-2 open (else the chaperon's connection could become one of
    // them: the stub would hand the chaperon its own connection as the command's stdio, then
    // a killed caller no longer ends its command, and its messages go into the connection),
    // and a broken pipe is an error to report, not a signal to die of (the stub says so when
    // the chaperon is gone mid-call).
    agent_sandbox_sys::fd::open_standard_descriptors();
    agent_sandbox_sys::signal::ignore(&[libc::SIGPIPE]);
    let args: Vec<std::ffi::OsString> = (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| {
            // SAFETY: C's `main` gets `argc` pointers to NUL-terminated strings in `argv`,
            // which live as long as the process.
            let arg = unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) };
            std::ffi::OsStr::from_bytes(arg.to_bytes()).to_os_string()
        })
        .collect();
    let code = agent_sandbox_stub::dispatch(&args).unwrap_or_else(|| {
        eprintln!("agent-sandbox-stub: run it under a Slurm command's or a mailer's name (the jail does)");
        2
    });
    std::process::exit(code);
}
