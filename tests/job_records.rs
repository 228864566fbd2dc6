//! The records a session leaves in the user's state directory (a job's `job.json`, the
//! project's scope record, the job directories its cleanup removes) attacked as a jail that
//! reached that directory would (issue 33, finding 1: a `~/.local` symlinked into a tree the
//! jail may write), and a project replaced between a job's submission and its start (finding
//! 7). The test writes what such a jail could write, as the user could, and checks on the real
//! test cluster that nothing it wrote is used.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// These tests rename and replace things in the one state directory: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn state(j: &Jail) -> PathBuf {
    j.rig.home.join(".local/state/agent-sandbox")
}

/// The job id a script in the jail printed after `mine=`.
fn printed_id(out: &Out) -> u32 {
    let id = out.stdout.lines().find_map(|l| l.strip_prefix("mine=")).and_then(|v| v.trim().parse().ok());
    id.unwrap_or_else(|| panic!("no job id: {out}"))
}

/// The job directory of `job` (its wrapper's output is there).
fn job_dir(job: u32) -> PathBuf {
    let out = Command::new("scontrol").args(["show", "job", &job.to_string()]).output().expect("scontrol");
    let text = String::from_utf8_lossy(&out.stdout);
    let stdout = text.split_whitespace().find_map(|w| w.strip_prefix("StdOut=")).expect("StdOut");
    Path::new(stdout).parent().expect("job directory").to_path_buf()
}

/// Releases the held `job` as its user, and waits until it has ended.
fn release_and_wait(j: &Jail, job: u32) {
    let st = j.as_user("scontrol").args(["release", &job.to_string()]).status().expect("scontrol release");
    assert!(st.success(), "release {job}");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let out = Command::new("squeue").args(["-h", "-j", &job.to_string(), "-o", "%T"]).output().expect("squeue");
        let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !["PENDING", "RUNNING", "CONFIGURING", "COMPLETING"].contains(&state.as_str()) {
            return;
        }
        assert!(Instant::now() < deadline, "job {job} still {state}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A frozen policy (the text in a job's spec) made as permissive as a jail would make it:
/// nothing hidden, the SSH and AWS credentials shown read-only.
fn permissive(frozen: &str) -> String {
    let mut f: serde_json::Value = serde_json::from_str(frozen).expect("frozen policy");
    let p = &mut f["policy"];
    let source = p["home_read"][0]["source"].clone();
    p["hide"] = serde_json::json!([]);
    for dir in [".ssh", ".aws"] {
        p["home_read"].as_array_mut().expect("home_read").push(serde_json::json!({
            "value": dir, "source": source, "locked": false
        }));
    }
    f.to_string()
}

/// Rewrites the spec in `dir` with `change`; sealed again with the user's key (`reseal`), or
/// keeping the seal it had (a jail's rewrite: it never sees the key).
fn rewrite_spec(dir: &Path, change: impl FnOnce(&mut serde_json::Value), reseal: Option<&chaperon::seal::Key>) {
    let path = dir.join("job.json");
    let bytes = std::fs::read(&path).expect("job.json");
    let (text, seal) = unseal_unchecked(&bytes);
    let mut spec: serde_json::Value = serde_json::from_slice(text).expect("spec");
    change(&mut spec);
    let text = spec.to_string();
    let name = dir.file_name().expect("name").as_encoded_bytes();
    let new = match (seal, reseal) {
        (Some(_), Some(key)) => key.seal(chaperon::job::SEAL_PURPOSE, name, text.as_bytes()),
        (Some(seal), None) => [seal, b" ", text.as_bytes()].concat(),
        // Written before specs were sealed: as it was.
        (None, _) => text.into_bytes(),
    };
    std::fs::write(&path, new).expect("rewrite job.json");
}

const CREDENTIALS: &str = "cat ~/.ssh/id_ed25519 ~/.aws/credentials; echo done";

#[test]
fn a_job_json_rewritten_after_submission_runs_nothing_on_the_node() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(j) = slurm_jail("records-rewrite") else { return };
    let out = j.run(&format!("id=$(sbatch --parsable --hold -o rewrite.out --wrap '{CREDENTIALS}'); echo mine=$id"));
    let job = printed_id(&out);
    let dir = job_dir(job);
    rewrite_spec(&dir, |s| s["policy"] = permissive(s["policy"].as_str().expect("policy")).into(), None);
    release_and_wait(&j, job);
    let said = std::fs::read_to_string(j.project.join("rewrite.out")).unwrap_or_default();
    let wrapper = std::fs::read_to_string(dir.join("wrapper.out")).unwrap_or_default();
    assert!(!said.contains(SSH_CANARY) && !said.contains(AWS_CANARY), "the rewritten policy was used: {said}");
    assert!(!said.contains("done"), "the job ran: {said}");
    assert!(wrapper.contains("job.json is refused") && wrapper.contains("seal does not match"), "{wrapper}");
    let audit = std::fs::read_to_string(state(&j).join("audit.jsonl")).unwrap_or_default();
    assert!(audit.lines().any(|l| l.contains("\"refused\"") && l.contains("job.json is refused")), "audited");
}

#[test]
fn a_validly_sealed_permissive_policy_is_bounded_by_the_built_in_floors_on_the_node() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(j) = slurm_jail("records-floors") else { return };
    let out = j.run(&format!("id=$(sbatch --parsable --hold -o floors.out --wrap '{CREDENTIALS}'); echo mine=$id"));
    let job = printed_id(&out);
    let dir = job_dir(job);
    // Sealed with the user's own key: a policy the node must still bound.
    let key = user_record_key(j.rig);
    rewrite_spec(&dir, |s| s["policy"] = permissive(s["policy"].as_str().expect("policy")).into(), Some(&key));
    release_and_wait(&j, job);
    let said = std::fs::read_to_string(j.project.join("floors.out")).unwrap_or_default();
    let wrapper = std::fs::read_to_string(dir.join("wrapper.out")).unwrap_or_default();
    assert!(said.contains("done"), "the job ran: {said} {wrapper}");
    assert!(!said.contains(SSH_CANARY) && !said.contains(AWS_CANARY), "past the built-in floors: {said}");
}

#[test]
fn a_project_replaced_before_its_job_starts_runs_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(j) = slurm_jail("records-project") else { return };
    // Another directory of the user's in the project's place (another session's jail, whose
    // project holds this one, could rename it and make one), or a symlink to one.
    let elsewhere = j.rig.home.join(format!("records-elsewhere-{}", std::process::id()));
    std::fs::create_dir_all(&elsewhere).expect("another directory");
    j.give(&[&elsewhere]);
    for by in ["directory", "symlink"] {
        let out = j.run("id=$(sbatch --parsable --hold -o project.out --wrap 'pwd; echo done'); echo mine=$id");
        let job = printed_id(&out);
        let dir = job_dir(job);
        let moved = j.project.with_extension("moved");
        std::fs::rename(&j.project, &moved).expect("move the project");
        match by {
            "directory" => {
                std::fs::create_dir(&j.project).expect("another directory");
                j.give(&[&j.project]);
            }
            _ => std::os::unix::fs::symlink(&elsewhere, &j.project).expect("a symlink"),
        }
        release_and_wait(&j, job);
        let ran_new = j.project.join("project.out").exists();
        let ran_old = moved.join("project.out").exists();
        match by {
            "directory" => std::fs::remove_dir_all(&j.project).expect("remove the other directory"),
            _ => std::fs::remove_file(&j.project).expect("remove the symlink"),
        }
        std::fs::rename(&moved, &j.project).expect("put the project back");
        let wrapper = std::fs::read_to_string(dir.join("wrapper.out")).unwrap_or_default();
        assert!(!ran_new && !ran_old, "{by}: the job ran (in the other directory: {ran_new}): {wrapper}");
        assert!(wrapper.contains("no longer the directory it was submitted from"), "{by}: {wrapper}");
    }
    let _ = std::fs::remove_dir_all(&elsewhere);
}

/// The project's record file in `state` and one of its entries, as JSON.
fn record_of(state: &Path, project: &Path) -> (PathBuf, serde_json::Value) {
    for f in std::fs::read_dir(state.join(chaperon::scope::DIR)).expect("scope records").flatten() {
        let bytes = std::fs::read(f.path()).unwrap_or_default();
        for line in bytes.split(|b| *b == b'\n') {
            let Ok(e) = serde_json::from_slice::<serde_json::Value>(unseal_unchecked(line).0) else { continue };
            if e["project"].as_str() == project.to_str() && e.get("job").is_some() {
                return (f.path(), e);
            }
        }
    }
    panic!("no record of {}", project.display());
}

/// Appends a forged entry to a record file, as a jail would write it: unsealed (as records
/// were before), and with a seal it made up.
fn forge(file: &Path, entry: &serde_json::Value) {
    use std::io::Write;
    let text = entry.to_string();
    let lines = format!("{text}\n{} {text}\n", "0".repeat(64));
    std::fs::OpenOptions::new().append(true).open(file).expect("record").write_all(lines.as_bytes()).expect("forge");
}

#[test]
fn a_forged_scope_record_puts_no_foreign_job_in_reach() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(j) = slurm_jail("records-scope") else { return };
    let outside = j.as_user("sbatch").args(["--parsable", "--hold", "--wrap", "true"]).output().expect("sbatch");
    let outside: u32 = String::from_utf8_lossy(&outside.stdout).trim().parse().expect("outside job id");
    let out = j.run("id=$(sbatch --parsable --hold --wrap true); echo mine=$id");
    let mine = printed_id(&out);
    let (file, mut entry) = record_of(&state(&j), &j.project);
    entry["job"] = outside.into();
    forge(&file, &entry);
    let out = j.run(&format!("scancel {outside}; echo cancel=$?; squeue -h -o %i"));
    let held = Command::new("squeue").args(["-h", "-j", &outside.to_string(), "-o", "%i"]).output().expect("squeue");
    let _ = Command::new("scancel").args([outside.to_string(), mine.to_string()]).status();
    assert!(out.stdout.contains("cancel=1"), "{out}");
    assert!(!out.stdout.lines().any(|l| l.trim() == outside.to_string()), "shown: {out}");
    assert!(String::from_utf8_lossy(&held.stdout).contains(&outside.to_string()), "the foreign job survived");
    let audit = std::fs::read_to_string(state(&j).join("audit.jsonl")).unwrap_or_default();
    assert!(audit.lines().any(|l| l.contains("scope-record") && l.contains("refused")), "the forgery is audited");
}

#[test]
fn a_forged_record_and_a_symlinked_jobs_directory_remove_nothing_of_the_home() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(j) = slurm_jail("records-cleanup") else { return };
    let out = j.run("id=$(sbatch --parsable --hold --wrap true); echo mine=$id");
    let mine = printed_id(&out);
    // A directory of the user's home, and `jobs/` made to lead to it.
    let victim = j.rig.home.join(format!("records-victim-{}", std::process::id()));
    std::fs::create_dir_all(victim.join("kept")).expect("victim");
    std::fs::write(victim.join("kept/file"), "mine").expect("victim file");
    j.give(&[&victim, &victim.join("kept"), &victim.join("kept/file")]);
    let jobs = state(&j).join("jobs");
    let aside = state(&j).join(format!("jobs.aside-{}", std::process::id()));
    std::fs::rename(&jobs, &aside).expect("jobs aside");
    std::os::unix::fs::symlink(&victim, &jobs).expect("jobs/ as a symlink");
    // A job the controller does not hold (so the cleanup removes its directory), naming it.
    let (file, mut entry) = record_of(&state(&j), &j.project);
    entry["job"] = 67_000_002.into();
    entry["dir"] = "kept".into();
    forge(&file, &entry);
    // squeue lists the scope and asks, on a task thread, which jobs the controller forgot.
    let out = j.run("squeue -h >/dev/null; echo rc=$?; sleep 3");
    std::fs::remove_file(&jobs).expect("the symlink");
    std::fs::rename(&aside, &jobs).expect("jobs back");
    let _ = Command::new("scancel").arg(mine.to_string()).status();
    let kept = victim.join("kept/file").exists();
    let _ = std::fs::remove_dir_all(&victim);
    assert!(out.stdout.contains("rc=0"), "{out}");
    assert!(kept, "the cleanup removed a directory of the home");
}

/// A node that reaches the state directory by another path than the login node (a site's
/// alias: `/home` a link to `/gpfs/home` there) runs the job, as the node side does
/// (`exec --job` with the job's id); a link on the way that the user could have made is
/// still refused (outside review of the state directory, F7).
#[test]
fn a_node_reaching_the_state_directory_through_a_site_alias_runs_the_job() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let Some(j) = slurm_jail("records-alias") else { return };
    let _ = std::fs::remove_file(j.project.join("alias.out"));
    let out = j.run("id=$(sbatch --parsable --hold -o alias.out --wrap 'echo ran-through-alias'); echo mine=$id");
    let job = printed_id(&out);
    let dir = job_dir(job);
    // The site's alias: a root-owned directory with a link to where the homes are.
    let homes = j.rig.home.parent().expect("homes").to_path_buf();
    let site = PathBuf::from(format!("/var/tmp/asb-site-alias-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&site);
    std::fs::create_dir(&site).unwrap();
    std::fs::set_permissions(&site, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&homes, site.join("homes")).unwrap();
    let via_site = site.join("homes").join(dir.strip_prefix(&homes).unwrap());
    // A link of the user's own, in the project: refused.
    std::os::unix::fs::symlink(&homes, j.project.join("homes-link")).unwrap();
    std::os::unix::fs::lchown(j.project.join("homes-link"), Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    let via_own = j.project.join("homes-link").join(dir.strip_prefix(&homes).unwrap());
    let exec = |path: &Path| {
        let mut c = j.as_user(&j.rig.bin);
        c.args(["exec", "--job"]).arg(path).env("SLURM_JOB_ID", job.to_string());
        j.output(&mut c)
    };
    let own = exec(&via_own);
    let out = exec(&via_site);
    let _ = Command::new("scancel").arg(job.to_string()).status();
    let _ = std::fs::remove_dir_all(&site);
    assert_eq!(out.code, 0, "{out}");
    let said = std::fs::read_to_string(j.project.join("alias.out")).unwrap_or_default();
    assert!(said.contains("ran-through-alias"), "{said}: {out}");
    assert_ne!(own.code, 0, "{own}");
    assert!(own.stderr.contains("homes-link") && own.stderr.contains("a directory you can write"), "{own}");
}
