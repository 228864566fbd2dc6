//! The stub binary outside any jail, under the names the jail gives it: what it says and the
//! status it exits with when it cannot or may not reach a chaperon. (Inside a jail, with a
//! chaperon and a real cluster: tests/slurm.rs of the launcher's crate.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

/// The stub cargo built for these tests, or the one named by `AGENT_SANDBOX_STUB_UNDER_TEST`
/// (tests/run.sh names the release build, static and linked against musl, as sites install it).
fn stub(name: &str, args: &[&OsStr], env: &[(&str, &str)]) -> Output {
    let bin = std::env::var_os("AGENT_SANDBOX_STUB_UNDER_TEST")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_agent-sandbox-stub").into());
    let mut c = Command::new(bin);
    c.arg0(name).args(args).env_clear().env("PATH", "/usr/bin:/bin");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the stub runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_mailer_is_blocked_with_ex_noperm_and_its_arguments_are_not_echoed() {
    let o = stub("/usr/sbin/sendmail", &[OsStr::new("secret@example.org")], &[]);
    assert_eq!(o.status.code(), Some(77), "{o:?}");
    assert!(stderr(&o).contains("sendmail: sending mail is blocked") && stderr(&o).contains("mail.block"), "{o:?}");
    assert!(!stderr(&o).contains("secret@example.org"), "{o:?}");
    assert!(o.stdout.is_empty());
}

#[test]
fn under_no_stubs_name_it_says_how_it_is_run() {
    let o = stub("agent-sandbox-stub", &[], &[]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("run it under a Slurm command's or a mailer's name"), "{o:?}");
}

#[test]
fn a_refused_command_is_refused_before_any_chaperon_is_asked() {
    let o = stub("sbcast", &[OsStr::new("a"), OsStr::new("b")], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).starts_with("sbcast: error: ") && stderr(&o).contains("(refused by agent-sandbox)"), "{o:?}");
}

#[test]
fn its_arguments_are_read_and_one_that_is_not_utf8_is_refused_by_position() {
    // The binary's entry point is C's `main`, and under musl std never learns the arguments
    // (`std::env::args` is empty there): the stub takes them from `main` itself. An argument
    // it did not see could not be refused.
    let bad = OsStr::from_bytes(b"--name=\xff");
    let o = stub("squeue", &[OsStr::new("-h"), bad], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(stderr(&o), "squeue: error: argument 2 is not valid UTF-8\n");
}

#[test]
fn without_a_chaperon_a_slurm_command_says_slurm_is_not_available() {
    let o = stub("squeue", &[OsStr::new("-h")], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stderr(&o).contains("cannot reach agent-sandbox's Slurm chaperon at /run/agent-sandbox/chaperon.sock"),
        "{o:?}"
    );
    // The Landlock backend's channel is named by a descriptor number, never a path.
    let o = stub("squeue", &[], &[("AGENT_SANDBOX_SLURM_FD", "/tmp/sock")]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("AGENT_SANDBOX_SLURM_FD is \"/tmp/sock\", not agent-sandbox's Slurm channel"), "{o:?}");
}
