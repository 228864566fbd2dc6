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
    // A store of the catalogue inside the writable `~/.cache`: inside, an empty read-only
    // stand-in covers it, which is no escape (the second look's N1).
    let token = home_file(&j, ".cache/huggingface/token", "hf_CANARYATTACK\n");
    let out = j.output(&mut j.command(&["doctor", "--attack"]));
    let _ = std::fs::remove_file(&token);
    assert!(out.stdout.contains("held     credentials      ") && out.stdout.contains("huggingface/token"), "{out}");
    assert_eq!(out.code, 0, "{out}");
    for probe in
        ["state-directory", "environment", "slurm-auth", "host-loopback", "host-process", "port-floor", "write-outside"]
    {
        assert!(out.stdout.lines().any(|l| l.starts_with("held") && l.contains(probe)), "{probe}: {out}");
    }
    assert!(!out.stdout.contains("ESCAPED"), "{out}");
    assert!(out.stdout.contains(" held, 0 escaped, "), "the summary: {out}");
    // Where the test cluster answers, a job submitted from inside ran in the jail on its node.
    let slurm = std::process::Command::new("sinfo").args(["-h", "-o", "%T"]).output();
    if slurm.is_ok_and(|o| o.status.success() && !o.stdout.is_empty()) {
        assert!(out.stdout.contains("held     job-reentry      a job submitted from inside ran in the jail"), "{out}");
    }
    // The Landlock backend holds too: there the job has no PID namespace and Slurm's sockets
    // are there but refuse a connection, which is no escape.
    let out = j.output(&mut j.command(&["--backend", "landlock", "doctor", "--attack"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains(" held, 0 escaped, "), "the summary: {out}");
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
    // The scrub off (`--env '*'`: every variable passed): the planted secrets reach the jail,
    // Slurm's authentication variables with them.
    let out = j.output(&mut j.command(&["--env", "*", "doctor", "--attack"]));
    assert_eq!(out.code, 1, "{out}");
    let env = out.stdout.lines().find(|l| l.contains(" environment ")).unwrap_or_default();
    for var in
        ["ASBPROBE_API_TOKEN", "ASBPROBE_AUTH", "ASBPROBE_NOTES", "ASBPROBE_MIRROR", "SLURM_JWT", "SLURM_SACK_SOCKET"]
    {
        assert!(env.starts_with("ESCAPED") && env.contains(var), "{var}: {out}");
    }
    // The network open (the host's own, no floor under userns): its loopback, its own
    // addresses and the floor's ports (2525 at least, which any user can listen on) are
    // reachable.
    let out = j.output(&mut j.command(&["--net", "open", "doctor", "--attack"]));
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stdout.contains("ESCAPED  host-loopback"), "{out}");
    if out.stdout.contains("host-address") {
        assert!(out.stdout.contains("ESCAPED  host-address     connected to the host's own "), "{out}");
    }
    assert!(
        out.stdout.contains("ESCAPED  port-floor       connected to ") && out.stdout.contains(":2525(mail)"),
        "{out}"
    );
    // Landlock with the network open: the host's loopback is reachable, the floor is not (its
    // TCP rules refuse the floor's ports whatever the mode).
    let out = j.output(&mut j.command(&["--backend", "landlock", "--net", "open", "doctor", "--attack"]));
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stdout.contains("ESCAPED  host-loopback    connected to the host's 127.0.0.1:"), "{out}");
    assert!(out.stdout.contains("held     port-floor       ") && out.stdout.contains("2525"), "{out}");
}

/// No policy can let a job run outside the jail (the chaperon rewrites every job), so the job
/// probe's own check is shown on the weakest setting there is: no jail. Its `sbatch` is then
/// Slurm's, the job runs as submitted, and the probe must say so.
#[test]
fn the_job_probe_catches_a_job_that_runs_outside_the_jail() {
    let Some(j) = Jail::new("attack-job-outside") else { return };
    let slurm = std::process::Command::new("sinfo").args(["-h", "-o", "%T"]).output();
    if !slurm.is_ok_and(|o| o.status.success() && !o.stdout.is_empty()) {
        eprintln!("SKIP: no Slurm cluster answers here (tests/cluster/start.sh)");
        return;
    }
    use agent_sandbox::doctor::attack::{canaries, job_probe, Script, Verdict};
    let mut s = Script::new("n0nce");
    let out_file = j.project.join("probe-job.out");
    job_probe(&mut s, &out_file, &j.rig.home.join(".local/state/agent-sandbox"), &canaries("n0nce"));
    let out = j.output_within(j.as_user("bash").args(["-c", s.text()]), std::time::Duration::from_secs(150));
    let found = s.outcomes(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!((found[0].name.as_str(), found[0].verdict), ("job-reentry", Verdict::Escaped), "{out}");
    assert!(found[0].detail.starts_with("the job ran outside the jail: JOB-PID1="), "{out}");
}

/// What the session could have planted does not decide the result: a `bash` ahead on `PATH`
/// (a project's venv) and a `BASH_ENV` that rewrites every escape as held.
#[test]
fn a_planted_shell_or_startup_file_does_not_forge_the_result() {
    let Some(j) = Jail::new("attack-forged") else { return };
    let rc = startup_file(&j);
    let j = j.project_file(".venv/bin/bash", "#!/bin/sh\nprintf 'P forged HELD x\\n'; exit 0\n");
    let _ = std::process::Command::new("chmod").arg("755").arg(j.project.join(".venv/bin/bash")).status();
    let j = j.project_file(
        "benv",
        "printf() { if [ \"$3\" = ESCAPED ]; then set -- \"$1\" \"$2\" HELD forged; fi; builtin printf \"$@\"; }\n",
    );
    let path = format!("{}:/usr/bin:/bin", j.project.join(".venv/bin").display());
    let benv = j.project.join("benv");
    let mut c = j.command(&["--rw", rc.to_str().unwrap(), "doctor", "--attack"]);
    c.env("PATH", &path).env("BASH_ENV", &benv);
    let out = j.output(&mut c);
    assert_eq!(out.code, 1, "{out}");
    assert!(out.stdout.contains("ESCAPED  write-outside") && !out.stdout.contains("forged"), "{out}");
}
