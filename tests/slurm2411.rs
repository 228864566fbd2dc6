//! The second test cluster: Slurm 24.11 with `auth/slurm` and `sackd` (tests/cluster/README.md,
//! `start.sh 24.11`), in a Debian 13 root whose login side the launcher runs in through
//! `tests/cluster/in-2411.sh`. Jobs submitted in the jail run in the jail on its node, and no
//! Slurm authentication channel (sack sockets, `slurm.key`, munge) exists in either jail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// The wrapper that runs a command on the 24.11 cluster's login side.
fn in_2411() -> String {
    format!("{}/tests/cluster/in-2411.sh", env!("CARGO_MANIFEST_DIR"))
}

/// Every place a credential for the 24.11 cluster (or a munge one) could be had from: the
/// three sack sockets 24.11's clients try, the 25.x per-cluster one, the cluster's key, munge's.
const AUTH_CHANNELS: &[&str] = &[
    "/run/slurm/sack.socket",
    "/run/slurmctld/sack.socket",
    "/run/slurmdbd/sack.socket",
    "/run/slurm-tc2411/sack.socket",
    "/etc/slurm/slurm.key",
    "/etc/slurm/jwt_hs256.key",
    "/run/munge/munge.socket.2",
    "/etc/munge/munge.key",
];

/// A shell loop printing `VISIBLE:<path>` for each channel that exists, and the Slurm
/// authentication variables set.
fn channel_probe() -> String {
    let paths = AUTH_CHANNELS.join(" ");
    format!(
        "for p in {paths}; do test -e \"$p\" && echo VISIBLE:$p; done; \
         env | grep -E '^(SLURM_JWT|SLURM_SACK_SOCKET|SLURM_SACK_KEY|SLURM_SACK_JWKS)=' | sed 's/=.*//;s/^/VAR:/'; \
         echo probed"
    )
}

/// The 24.11 cluster answers from its login side, or the test says how to start it.
fn cluster_2411_up() {
    let out = Command::new(in_2411()).args(["--", "sinfo", "-h", "-o", "%T"]).output();
    let ok = out.as_ref().map(|o| o.status.success() && !o.stdout.is_empty()).unwrap_or(false);
    assert!(
        ok,
        "the Slurm 24.11 test cluster is not running: as root, tests/cluster/start.sh 24.11 --user {USER} \
         --spank $PWD/target/debug/agent-sandbox ({out:?})"
    );
}

fn wait_for(p: &std::path::Path, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        if text.contains(needle) || start.elapsed() > Duration::from_secs(60) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn on_24_11_with_auth_slurm_a_job_runs_in_the_jail_and_no_authentication_channel_exists_in_either_jail() {
    let Some(j) = Jail::new("slurm2411") else { return };
    cluster_2411_up();
    let probe = channel_probe();
    let job = format!("#!/bin/sh\necho host=$(hostname); echo pwd=$(pwd); {probe}; echo done\n");
    let j = j.project_file("job.sh", &job);
    // The login side's jail: no channel; the real commands answer through the stubs; a job
    // submitted there runs, on the node, in the job's jail.
    let script = format!("{probe}; sinfo -h -o %T; sbatch --wait -o job-%j.out job.sh; echo rc=$?");
    let wrapper = in_2411();
    let mut c = j.command_wrapped(&[&wrapper, "--"], &["-q", "run", "--", "sh", "-c", &script]);
    let out = j.output_within(&mut c, Duration::from_secs(120));
    assert!(out.stdout.contains("probed") && out.stdout.contains("rc=0"), "{out}");
    assert!(!out.stdout.contains("VISIBLE:") && !out.stdout.contains("VAR:"), "login jail: {out}");
    assert!(out.stdout.contains("Submitted batch job 24"), "a job id of tc2411 (from 24000000): {out}");
    let file = std::fs::read_dir(&j.project)
        .expect("project")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "out"))
        .unwrap_or_else(|| panic!("no job output in the project: {out}"));
    let text = wait_for(&file, "done");
    assert!(text.contains("host=agent-sandbox"), "the job did not run in the jail: {text}");
    assert!(text.contains("probed") && text.contains("done"), "{text}");
    assert!(!text.contains("VISIBLE:") && !text.contains("VAR:"), "job's jail: {text}");
}

#[test]
fn on_24_11_the_real_sbatch_by_absolute_path_is_the_stub_in_the_jail() {
    let Some(j) = Jail::new("slurm2411-abs") else { return };
    cluster_2411_up();
    let wrapper = in_2411();
    // Outside the jail (the login side of the root) the real sbatch reaches sackd; inside,
    // the path holds the stub, whose call goes through the chaperon and is read by its rules.
    let script = "/usr/bin/sbatch --uid=0 --wrap true; echo rc=$?";
    let mut c = j.command_wrapped(&[&wrapper, "--"], &["-q", "run", "--", "sh", "-c", script]);
    let out = j.output_within(&mut c, Duration::from_secs(60));
    assert!(out.stderr.contains("not allowed in agent-sandbox"), "the chaperon read the call: {out}");
    assert!(!out.stdout.contains("rc=0") && !out.stdout.contains("Submitted batch job"), "{out}");
}

#[test]
fn on_24_11_the_options_it_added_reach_slurm_from_the_jail() {
    // Read with 24.11's table (the chaperon learnt the release from `sbatch --version`): the
    // options 23.02-24.11 added are taken where allowed and reach the real commands (a job and a
    // step that use them run; squeue --only-job-state answers), and refused with the reason
    // where not; `--extra` is 24.11's own option, no prefix of --extra-node-info.
    let Some(j) = Jail::new("slurm2411-options") else { return };
    cluster_2411_up();
    let script = "id=$(sbatch --parsable --tres-per-task=cpu:1 --oom-kill-step --extra=asb-extra -o job-%j.out \
                  --wait --wrap 'echo job-ran') || echo sbatch-failed; echo id=$id; cat job-$id.out; \
                  squeue --only-job-state -h -o 'state=%T' -j $id; echo squeue=$?; \
                  srun --tres-per-task=cpu:1 --oom-kill-step=1 -n1 echo step-ran; echo srun=$?; \
                  sbatch --stepmgr --wrap true; echo stepmgr=$?; \
                  squeue --json=v0.0.40; echo json=$?";
    let wrapper = in_2411();
    let mut c = j.command_wrapped(&[&wrapper, "--"], &["-q", "run", "--", "sh", "-c", script]);
    let out = j.output_within(&mut c, Duration::from_secs(180));
    assert!(out.stdout.contains("job-ran") && !out.stdout.contains("sbatch-failed"), "{out}");
    assert!(out.stdout.contains("squeue=0"), "--only-job-state: {out}");
    assert!(out.stdout.contains("step-ran\nsrun=0"), "{out}");
    assert!(out.stderr.contains("option --stepmgr is not allowed in agent-sandbox: steps managed"), "{out}");
    assert!(out.stdout.contains("stepmgr=1"), "{out}");
    assert!(out.stderr.contains("invalid value \"v0.0.40\" for --json"), "{out}");
    assert!(!out.stdout.contains("json=0"), "{out}");
}
