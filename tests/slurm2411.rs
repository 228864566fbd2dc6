//! The second test cluster: Slurm 24.11 with `auth/slurm` and `sackd` (tests/cluster/README.md,
//! `start.sh 24.11`), in a Debian 13 root whose login side the launcher runs in through
//! `tests/cluster/in-2411.sh`. Jobs submitted in the jail run in the jail on its node, and no
//! Slurm authentication channel (sack sockets, `slurm.key`, munge) exists in either jail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

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
    let text = wait_for_text(&file, "done");
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

/// A job of the test user submitted outside the jail (so out of every session's scope) on the
/// 24.11 cluster, cancelled when dropped.
struct Outsider(String);

impl Outsider {
    fn submit() -> Outsider {
        let out = Command::new(in_2411())
            .args([
                "-u",
                USER,
                "--",
                "sbatch",
                "--parsable",
                "-n1",
                "-t",
                "5",
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 120",
            ])
            .output()
            .expect("sbatch outside the jail");
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(id.parse::<u32>().is_ok(), "the job outside the jail: {out:?}");
        Outsider(id)
    }
}

impl Drop for Outsider {
    fn drop(&mut self) {
        let _ = Command::new(in_2411()).args(["-u", USER, "--", "scancel", &self.0]).status();
    }
}

/// The job ids of a `{"jobs": [...]}` document.
fn job_ids(doc: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(doc).unwrap_or_else(|e| panic!("not JSON ({e}): {doc}"));
    let jobs = v["jobs"].as_array().unwrap_or_else(|| panic!("no jobs list: {doc}"));
    jobs.iter().map(|j| j["job_id"].to_string()).collect()
}

#[test]
fn on_24_11_scontrol_json_yaml_and_listjobs_show_the_sessions_jobs_only() {
    // scontrol 24.11's --json/--yaml of jobs, and its listjobs (24.05), narrowed to the scope:
    // the document keeps Slurm's structure (meta, errors, warnings) and drops every job not
    // the session's, here one of the same user submitted outside the jail.
    let Some(j) = Jail::new("slurm2411-scontrol-json") else { return };
    cluster_2411_up();
    let outsider = Outsider::submit();
    let o = &outsider.0;
    let script = format!(
        "b=$(sbatch --parsable -n1 -t 5 -o /dev/null --wrap 'sleep 60'); \
         f=$(sbatch --parsable --wait -o /dev/null --wrap true); echo ids=$b,$f; \
         for i in $(seq 60); do [ \"$(squeue -h -j $b -o %T)\" = RUNNING ] && break; sleep 0.5; done; \
         scontrol --json show job > all.json; echo json=$?; \
         scontrol -o show job | sed -n 's/^JobId=\\([0-9]*\\) .*/\\1/p' | sort -u > text.ids; \
         scontrol --yaml show job $b > b.yaml; echo yaml=$?; \
         scontrol --json show job {o}; echo outsider=$?; \
         echo '== listjobs'; scontrol listjobs; echo listjobs=$?; \
         scontrol --json listjobs > lj.json; echo ljjson=$?; \
         scancel $b"
    );
    let wrapper = in_2411();
    let mut c = j.command_wrapped(&[&wrapper, "--"], &["-q", "run", "--", "sh", "-c", &script]);
    let out = j.output_within(&mut c, Duration::from_secs(120));
    let ids = out.stdout.lines().find_map(|l| l.strip_prefix("ids=")).unwrap_or_else(|| panic!("{out}"));
    let (b, f) = ids.split_once(',').unwrap_or_else(|| panic!("{out}"));
    assert!(b.parse::<u32>().is_ok() && f.parse::<u32>().is_ok(), "{out}");
    for rc in ["json=0", "yaml=0", "listjobs=0", "ljjson=0"] {
        assert!(out.stdout.contains(rc), "{rc}: {out}");
    }
    let read = |name: &str| std::fs::read_to_string(j.project.join(name)).unwrap_or_default();
    // Every job of the session, the finished one too; not the one outside it. The jobs the
    // text view shows in the same session, no more: the project's scope may hold ids of
    // earlier runs, which a rebuilt cluster (its job ids started over) may give to new jobs.
    let all = read("all.json");
    let mut shown = job_ids(&all);
    shown.sort();
    shown.dedup();
    let text: Vec<String> = read("text.ids").lines().map(str::to_string).collect();
    assert!(shown.contains(&b.to_string()) && shown.contains(&f.to_string()), "{all}");
    assert!(!shown.contains(o), "the job outside the session: {all}");
    assert_eq!(shown, text, "what the text view shows: {all}");
    let doc: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert_eq!(doc["meta"]["slurm"]["release"].as_str().map(|r| r.starts_with("24.11")), Some(true), "{all}");
    assert!(doc["errors"].is_array() && doc["warnings"].is_array(), "{all}");
    let yaml = read("b.yaml");
    assert!(yaml.starts_with("---\n") && yaml.contains(&format!("\"job_id\": {b}\n")), "{yaml}");
    assert!(out.stderr.contains(&format!("job {o} is not one of this project's jobs")), "{out}");
    assert!(!out.stdout.contains("outsider=0"), "{out}");
    // listjobs: the jobs with a slurmstepd on this host (the cluster's one host), the session's.
    let listed = out.stdout.split("== listjobs\n").nth(1).unwrap_or_default();
    let listed: Vec<&str> = listed.lines().take_while(|l| !l.starts_with("listjobs=")).map(str::trim).collect();
    assert_eq!(listed.first(), Some(&"JOBID"), "{out}");
    assert!(listed.contains(&b) && !listed.contains(&o.as_str()), "{out}");
    assert!(listed[1..].iter().all(|id| text.iter().any(|t| t == id)), "only jobs of the scope: {out}");
    let lj = job_ids(&read("lj.json"));
    assert!(lj.contains(&b.to_string()) && !lj.contains(o), "{lj:?}");
    assert!(lj.iter().all(|id| text.contains(id)), "only jobs of the scope: {lj:?}");
}

#[test]
fn on_24_11_sprio_shows_the_pending_jobs_of_a_scope_of_many() {
    // sprio 24.05-25.11 takes a job list of more than one job for one malformed id ("Invalid
    // job id", status 1), and the chaperon gives it the scope's list: the session's pending
    // jobs' priorities are shown, as a sprio that reads the list shows them, beside a
    // finished and a running job in scope.
    let Some(j) = Jail::new("slurm2411-sprio") else { return };
    cluster_2411_up();
    let script = "f=$(sbatch --parsable --wait -o /dev/null --wrap true); \
                  b=$(sbatch --parsable --exclusive -t 5 -o /dev/null --wrap 'sleep 60'); \
                  p1=$(sbatch --parsable --exclusive -t 1 -o /dev/null --wrap true); \
                  p2=$(sbatch --parsable --exclusive -t 1 -o /dev/null --wrap true); \
                  echo ids=$f,$b,$p1,$p2; sleep 1; \
                  echo '== sprio'; sprio; echo sprio=$?; \
                  echo '== sprio -j'; sprio -j $p1,$p2; echo sprioj=$?; \
                  scancel $b $p1 $p2";
    let wrapper = in_2411();
    let mut c = j.command_wrapped(&[&wrapper, "--"], &["-q", "run", "--", "sh", "-c", script]);
    let out = j.output_within(&mut c, Duration::from_secs(120));
    let ids: Vec<&str> =
        out.stdout.lines().find_map(|l| l.strip_prefix("ids=")).unwrap_or_else(|| panic!("{out}")).split(',').collect();
    assert!(ids.len() == 4 && ids.iter().all(|i| i.parse::<u32>().is_ok()), "{out}");
    for (section, rc) in [("== sprio\n", "sprio=0"), ("== sprio -j\n", "sprioj=0")] {
        let text = out.stdout.split(section).nth(1).unwrap_or_default();
        let text: Vec<&str> = text.lines().take_while(|l| !l.starts_with("sprio")).collect();
        assert!(out.stdout.contains(rc), "{rc}: {out}");
        assert_eq!(text.iter().filter(|l| l.contains("JOBID")).count(), 1, "one header: {out}");
        let rows: Vec<&str> =
            text.iter().filter_map(|l| l.split_whitespace().next()).filter(|w| *w != "JOBID").collect();
        // Named, exactly those; bare, the scope's pending jobs (the project's scope may hold
        // ids of earlier runs, which a rebuilt cluster may give to new jobs).
        let pending: Vec<&str> = rows.iter().copied().filter(|r| *r == ids[2] || *r == ids[3]).collect();
        assert_eq!(pending, [ids[2], ids[3]], "the two pending jobs, in order: {out}");
        if section.contains("-j") {
            assert_eq!(rows, [ids[2], ids[3]], "{out}");
        }
    }
    assert!(!out.stderr.contains("Invalid job id"), "{out}");
}
