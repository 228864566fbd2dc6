//! The scheduler-load governor against the real test cluster: a `squeue` loop in the jail
//! reaches slurmctld a handful of times, counted from slurmctld's own RPC statistics (`sdiag`),
//! and every answer stays right while a job starts and ends and another is cancelled. A test
//! binary of its own: cargo runs test binaries one after another, and the tests here take
//! turns (`ALONE`), so no other test's calls are in the counts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::collections::BTreeMap;
use std::process::Command;

/// Held by each test: the counts are slurmctld's, for everyone.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// slurmctld's count of each RPC type so far (`sdiag`, as root).
fn rpc_counts() -> BTreeMap<String, u64> {
    let out = Command::new("sdiag").output().expect("sdiag");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = text.find("by message type").expect("sdiag lists RPCs by type");
    let end = text.find("by user").unwrap_or(text.len());
    text[start..end]
        .lines()
        .filter_map(|l| {
            let name = l.split_whitespace().next()?.to_string();
            let count = l.split("count:").nth(1)?.split_whitespace().next()?.parse().ok()?;
            Some((name, count))
        })
        .collect()
}

/// The job-information RPCs (what squeue costs slurmctld) since `before`.
fn job_info_calls(before: &BTreeMap<String, u64>) -> u64 {
    rpc_counts()
        .iter()
        .filter(|(name, _)| name.starts_with("REQUEST_JOB_INFO") || name.starts_with("REQUEST_JOB_USER_INFO"))
        .map(|(name, n)| n - before.get(name).copied().unwrap_or(0))
        .sum()
}

/// 200 `squeue` calls, one every 50 ms, each printed as `TIME id:STATE...`; a job that sleeps
/// 4 s (writing when it started and ended) and a held one cancelled half-way.
const LOOP: &str = r#"
echo "session $AGENT_SANDBOX_SESSION"
run=$(sbatch --parsable -o job.out --wrap 'date +%s.%N > started; sleep 4; date +%s.%N > ended')
held=$(sbatch --parsable --hold -J held --wrap true)
echo "ids $run $held"
i=0
while [ $i -lt 200 ]; do
  i=$((i+1))
  if [ $i = 100 ]; then scancel $held; echo cancelled; fi
  echo "at $(date +%s.%N) $(squeue -h -o '%i:%T' | sort | tr '\n' ' ')"
  sleep 0.05
done
"#;

struct Answer {
    at: f64,
    states: BTreeMap<u32, String>,
    after_cancel: bool,
}

fn answers(out: &Out) -> (u32, u32, Vec<Answer>) {
    let ids = out.stdout.lines().find_map(|l| l.strip_prefix("ids ")).unwrap_or_else(|| panic!("no job ids: {out}"));
    let ids: Vec<u32> = ids.split_whitespace().map(|i| i.parse().expect("job id")).collect();
    let mut after_cancel = false;
    let mut v = vec![];
    for l in out.stdout.lines() {
        if l == "cancelled" {
            after_cancel = true;
        }
        let Some(rest) = l.strip_prefix("at ") else { continue };
        let mut words = rest.split_whitespace();
        let at: f64 = words.next().and_then(|t| t.parse().ok()).expect("time");
        let states =
            words.filter_map(|w| w.split_once(':')).map(|(id, st)| (id.parse().expect("id"), st.to_string())).collect();
        v.push(Answer { at, states, after_cancel });
    }
    (ids[0], ids[1], v)
}

fn time_in(j: &Jail, file: &str) -> f64 {
    let p = j.project.join(file);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok(t) = std::fs::read_to_string(&p) {
            if let Ok(v) = t.trim().parse() {
                return v;
            }
        }
        assert!(std::time::Instant::now() < deadline, "the job never wrote {file}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_squeue_loop_reaches_slurmctld_a_handful_of_times_and_every_answer_stays_right() {
    let _alone = alone();
    let Some(j) = slurm_jail("governor-loop") else { return };
    let before = rpc_counts();
    let out =
        j.output_within(&mut j.command(&["-q", "run", "--", "sh", "-c", LOOP]), std::time::Duration::from_secs(120));
    assert_eq!(out.code, 0, "{out}");
    let reached = job_info_calls(&before);
    let (run, held, answers) = answers(&out);
    assert_eq!(answers.len(), 200, "{out}");
    let (started, ended) = (time_in(&j, "started"), time_in(&j, "ended"));
    // Right: a new job shows at once; the held one until the very call after its cancel;
    // the running job as RUNNING from shortly after it started until it ended, and never as
    // pending or running again shortly after its end (the grace: slurmctld learns of the end
    // a moment after the job's last command).
    let settle = 2.5;
    for a in &answers {
        let held_state = a.states.get(&held).map(String::as_str);
        match a.after_cancel {
            false => assert_eq!(held_state, Some("PENDING"), "the held job at {}: {out}", a.at),
            true => assert!(!matches!(held_state, Some("PENDING")), "cancelled, still pending at {}: {out}", a.at),
        }
        let state = a.states.get(&run).map(String::as_str);
        if a.at < started - 0.5 {
            assert!(
                matches!(state, Some("PENDING" | "CONFIGURING" | "RUNNING")),
                "before its start at {}: {out}",
                a.at
            );
        } else if a.at > started + settle && a.at < ended - 0.2 {
            assert_eq!(state, Some("RUNNING"), "while it ran, at {} (started {started}): {out}", a.at);
        } else if a.at > ended + settle {
            assert!(!matches!(state, Some("PENDING" | "RUNNING")), "after its end at {} (ended {ended}): {out}", a.at);
        }
    }
    assert!(answers.iter().any(|a| a.at > ended + settle), "the loop outlasted the job: {out}");
    assert!(answers.iter().any(|a| a.at > started + settle && a.at < ended - 0.2), "the loop saw it run: {out}");
    eprintln!("200 squeue calls, {reached} job-information RPCs at slurmctld");
    assert!(reached <= 12, "{reached} of 200 squeue calls reached slurmctld: {out}");
    // Every call's audit record says how it was answered.
    let session = out.stdout.lines().find_map(|l| l.strip_prefix("session ")).expect("the session id").trim();
    let log = j.output(&mut j.command(&["log", "--session", session, "--json"]));
    let squeues: Vec<serde_json::Value> = log
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["event"] == "slurm" && r["program"] == "squeue")
        .collect();
    assert_eq!(squeues.len(), 200, "one record a call: {log}");
    let reused = squeues
        .iter()
        .filter(|r| r["reason"].as_str().is_some_and(|w| w.starts_with("answered from the same call")))
        .count();
    assert!(reused >= 200 - 12, "{reused} of 200 records say the answer was reused");
    assert!(squeues.iter().all(|r| r["decision"] == "allowed"), "{log}");
}

#[test]
fn without_the_interval_every_call_reaches_slurmctld_so_the_count_is_real() {
    let _alone = alone();
    let Some(j) = slurm_jail("governor-off") else { return };
    let policy = j.rig.home.join("t/governor-off-policy.toml");
    std::fs::write(&policy, "[slurm]\nquery_interval = \"0\"\nqueries_per_minute = 100000\n").expect("policy");
    j.give(&[&policy]);
    let j = j.arg("--policy").arg(policy.to_str().expect("utf-8"));
    let before = rpc_counts();
    let out = j.run("for i in $(seq 50); do squeue -h >/dev/null || echo FAILED; done; echo done");
    assert!(out.stdout.contains("done") && !out.stdout.contains("FAILED"), "{out}");
    let reached = job_info_calls(&before);
    assert!(reached >= 50, "with the cache off, each of 50 calls is an RPC; counted {reached}");
}

#[test]
fn over_the_cap_a_query_waits_and_says_why() {
    let _alone = alone();
    let Some(j) = slurm_jail("governor-cap") else { return };
    let policy = j.rig.home.join("t/governor-cap-policy.toml");
    std::fs::write(&policy, "[slurm]\nquery_interval = \"0\"\nqueries_per_minute = 60\n").expect("policy");
    j.give(&[&policy]);
    let j = j.arg("--policy").arg(policy.to_str().expect("utf-8"));
    // 60 a minute: a burst of 10, then one a second.
    let started = std::time::Instant::now();
    let out = j.run("for i in $(seq 13); do sinfo -h -o %P >/dev/null; done; echo done");
    let took = started.elapsed();
    assert!(out.stdout.contains("done"), "{out}");
    assert!(took >= std::time::Duration::from_millis(2500), "13 calls at 60 a minute took {took:?}: {out}");
    assert!(out.stderr.contains("slurm.queries_per_minute"), "the wait is said: {out}");
}
