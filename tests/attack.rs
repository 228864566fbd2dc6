//! The site self-test, `agent-sandbox doctor --attack` (issue 34, item 4): real escape
//! attempts inside a session with this host's policy, one line each and a summary. On the
//! default policy every probe holds; on a policy weakened to let one through, that probe
//! fails and the self-test says so (its exit status too).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;

use common::*;
use std::path::PathBuf;

/// The user's shell startup file, which the write probe tries (made if the home has none).
fn startup_file(j: &Jail) -> PathBuf {
    let rc = j.rig.home.join(".bashrc");
    if !rc.exists() {
        home_file(j, ".bashrc", "# made for the test\n");
    }
    rc
}

#[test]
fn the_self_test_holds_on_this_hosts_policy_and_names_each_probe() {
    let Some(j) = Jail::new("attack-default") else { return };
    startup_file(&j);
    let out = j.output(&mut j.command(&["doctor", "--attack"]));
    assert_eq!(out.code, 0, "{out}");
    for probe in ["state-directory", "environment", "slurm-auth", "host-loopback", "host-process", "write-outside"] {
        assert!(out.stdout.lines().any(|l| l.starts_with("held") && l.contains(probe)), "{probe}: {out}");
    }
    assert!(!out.stdout.contains("ESCAPED"), "{out}");
    assert!(out.stdout.contains(" held, 0 escaped, "), "the summary: {out}");
    // Where the test cluster answers, a job submitted from inside ran in the jail on its node.
    let slurm = std::process::Command::new("sinfo").args(["-h", "-o", "%T"]).output();
    if slurm.is_ok_and(|o| o.status.success() && !o.stdout.is_empty()) {
        assert!(out.stdout.contains("held     job-reentry      a job submitted from inside ran in the jail"), "{out}");
    }
}

#[test]
fn each_probe_fails_on_a_policy_weakened_to_let_it_through() {
    let Some(j) = Jail::new("attack-weakened") else { return };
    // A credential store that is no `hide` floor, shown deliberately; the startup file made
    // writable: both probes must catch it.
    let pypirc = home_file(&j, ".pypirc", "[pypi]\npassword = CANARY-ATTACK\n");
    let rc = startup_file(&j);
    let weak = ["--ro", pypirc.to_str().unwrap(), "--rw", rc.to_str().unwrap(), "doctor", "--attack"];
    let out = j.output(&mut j.command(&weak));
    let _ = std::fs::remove_file(&pypirc);
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stdout.contains("ESCAPED  credentials      read ") && out.stdout.contains(".pypirc"), "{out}");
    assert!(out.stdout.contains("ESCAPED  write-outside") && out.stdout.contains(" 2 escaped"), "{out}");
    // The network open (the host's own): its loopback and its own addresses are reachable.
    let out = j.output(&mut j.command(&["--net", "open", "doctor", "--attack"]));
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stdout.contains("ESCAPED  host-loopback"), "{out}");
    if out.stdout.contains("host-address") {
        assert!(out.stdout.contains("ESCAPED  host-address     connected to the host's own "), "{out}");
    }
    // Landlock with the network open: the host's loopback is reachable.
    let out = j.output(&mut j.command(&["--backend", "landlock", "--net", "open", "doctor", "--attack"]));
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stdout.contains("ESCAPED  host-loopback    connected to the host's 127.0.0.1:"), "{out}");
}
