//! The user's state directory (session locks, the audit log, job directories a node trusts)
//! where it really is: `~/.local` a link elsewhere, as on small HPC homes, or
//! `XDG_STATE_HOME` set. Each test gets a home of its own, shown at the test user's home in a
//! private mount namespace: the shared test home is not touched.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A home for one test, `BASE/home`, with the project `t/NAME/` and a `local/` directory in
/// it, and a scratch tree `BASE/scratch` with a `local/` and a `data/` of its own; `~/.local` is a link
/// to `link`. Shown at the test user's home by `wrapper`.
struct LinkedHome {
    home: PathBuf,
    scratch: PathBuf,
    wrapper: Vec<String>,
}

fn linked_home(j: &Jail, name: &str, link: &dyn Fn(&LinkedHome) -> String) -> LinkedHome {
    let base = PathBuf::from("/var/tmp/asb-statedir").join(name);
    let _ = std::fs::remove_dir_all(&base);
    let (home, scratch) = (base.join("home"), base.join("scratch"));
    let project = home.join("t").join(name);
    for d in [project.join("local"), scratch.join("local"), scratch.join("data"), home.join(".ssh")] {
        std::fs::create_dir_all(&d).unwrap();
    }
    std::fs::write(home.join(".ssh/id_ed25519"), SSH_CANARY).unwrap();
    for d in [Path::new("/var/tmp/asb-statedir"), &base] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let st = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", j.rig.uid, j.rig.gid))
        .arg(&home)
        .arg(&scratch)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o750)).unwrap();
    let setup = format!(
        "mount --bind {} {} && cd {} && exec \"$@\"",
        home.display(),
        j.rig.home.display(),
        j.rig.home.join("t").join(name).display()
    );
    let mut h = LinkedHome { home, scratch, wrapper: vec![] };
    std::os::unix::fs::symlink(link(&h), h.home.join(".local")).unwrap();
    std::os::unix::fs::lchown(h.home.join(".local"), Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    h.wrapper = ["unshare", "-m", "--propagation", "private", "sh", "-c", &setup, "sh"].map(String::from).to_vec();
    h
}

/// Runs `script` in the jail as the test user, in `h`'s home, launcher options first.
fn run_in(j: &Jail, h: &LinkedHome, opts: &[&str], script: &str) -> Out {
    let mut args = vec!["-q"];
    args.extend_from_slice(opts);
    args.extend(["run", "--", "sh", "-c", script]);
    let wrapper: Vec<&str> = h.wrapper.iter().map(String::as_str).collect();
    j.output(&mut j.command_wrapped(&wrapper, &args))
}

/// What a jail tries against the state directory at `dir` (where it really is, through the
/// tree it was granted): read the audit log, list it, forge a job, plant a file, move its parent.
fn attack(dir: &str) -> String {
    format!(
        "d={dir}/state/agent-sandbox; echo entries=$(ls -A $d 2>/dev/null | wc -l); \
         cat $d/audit.jsonl >/dev/null 2>&1 && echo READ-AUDIT; \
         mkdir -p $d/jobs 2>/dev/null; echo '{{}}' > $d/jobs/forged 2>/dev/null && echo WROTE-JOB; \
         touch $d/planted 2>/dev/null && echo WROTE; \
         mv {dir}/state {dir}/state.moved 2>/dev/null && echo MOVED; echo done"
    )
}

#[test]
fn the_state_directory_through_a_linked_local_cannot_be_reached_in_the_project_or_a_write_tree() {
    let j = match Jail::new("statedir-linked") {
        Some(j) => j,
        None => return,
    };
    // `~/.local` a relative link into the project; then one to a scratch tree the session
    // is granted (`--rw`). The jail reaches the state directory by its real path.
    let project = j.rig.home.join("t/statedir-linked");
    let into_project = linked_home(&j, "statedir-linked", &|_| "t/statedir-linked/local".into());
    let out = run_in(&j, &into_project, &[], &attack(&format!("{}/local", project.display())));
    let real = into_project.home.join("t/statedir-linked/local/state/agent-sandbox");
    check(&out, &real, "the project");

    let to_scratch = linked_home(&j, "statedir-linked", &|h| format!("../../{}", h.scratch.join("local").display()));
    let scratch = to_scratch.scratch.display().to_string();
    let out = run_in(&j, &to_scratch, &["--rw", &scratch], &attack(&format!("{scratch}/local")));
    check(&out, &to_scratch.scratch.join("local/state/agent-sandbox"), "a --rw tree");
}

fn check(out: &Out, real: &Path, what: &str) {
    assert!(out.stdout.contains("done"), "{what}: {out}");
    assert!(out.stdout.contains("entries=0"), "{what}: the state directory is seen from inside: {out}");
    for bad in ["READ-AUDIT", "WROTE", "MOVED"] {
        assert!(!out.stdout.contains(bad), "{what}: {bad}: {out}");
    }
    // The state directory really is there (the launcher wrote its log there), untouched.
    assert!(real.join("audit.jsonl").exists(), "{what}: no log at {}: {out}", real.display());
    assert!(!real.join("planted").exists() && !real.join("jobs/forged").exists(), "{what}: {out}");
}

/// An absolute `~/.local` link: the stub directory is bound from where the state directory
/// really is, not through a link that leads elsewhere inside the jail's staging root.
#[test]
fn an_absolute_local_link_does_not_stop_a_session() {
    let j = match Jail::new("statedir-absolute") {
        Some(j) => j,
        None => return,
    };
    let h = linked_home(&j, "statedir-absolute", &|h| h.scratch.join("local").display().to_string());
    let out = run_in(&j, &h, &[], "command -v sbatch; echo started");
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("started"), "{out}");
    assert!(out.stdout.contains("/run/agent-sandbox/bin/sbatch"), "the stubs are bound: {out}");
    assert!(h.scratch.join("local/state/agent-sandbox/audit.jsonl").exists(), "{out}");
}

/// Landlock leaves the state directory out of the rules of a tree it grants (a `--rw` tree
/// reached through a linked `~/.local`: one rule per entry around it), but cannot in the
/// project, which it grants whole: there the launch is refused, naming the path, the project
/// and the way out.
#[test]
fn landlock_hides_the_state_directory_in_a_write_tree_and_refuses_it_in_the_project() {
    let j = match Jail::new("statedir-ll") {
        Some(j) => j.arg("--backend").arg("landlock"),
        None => return,
    };
    let project = j.rig.home.join("t/statedir-ll");
    let into_project = linked_home(&j, "statedir-ll", &|_| "t/statedir-ll/local".into());
    let out = run_in(&j, &into_project, &[], &attack(&format!("{}/local", project.display())));
    refused(&out, &format!("{}/local/state/agent-sandbox", project.display()), &project.display().to_string());

    let to_scratch = linked_home(&j, "statedir-ll", &|h| h.scratch.join("local").display().to_string());
    let scratch = to_scratch.scratch.display().to_string();
    let script = format!("{}; touch {scratch}/data/x && echo SCRATCH-WRITABLE", attack(&format!("{scratch}/local")));
    let out = run_in(&j, &to_scratch, &["--rw", &scratch], &script);
    check(&out, &to_scratch.scratch.join("local/state/agent-sandbox"), "a --rw tree under Landlock");
    assert!(out.stdout.contains("SCRATCH-WRITABLE"), "the tree's other entries stay writable: {out}");
}

fn refused(out: &Out, path: &str, project: &str) {
    assert_ne!(out.code, 0, "{out}");
    assert!(!out.stdout.contains("done"), "the command ran: {out}");
    for part in ["state directory", path, &format!("inside the project {project}"), "fix:", "XDG_STATE_HOME"] {
        assert!(out.stderr.contains(part), "{part}: {out}");
    }
}

/// With `XDG_STATE_HOME` set on the login node, the job's node finds its directory where
/// the login node put it (the wrapper runs with Slurm's environment, without the variable).
#[test]
fn a_job_runs_when_the_login_node_sets_xdg_state_home() {
    let Some(j) = slurm_jail("statedir-xdg") else { return };
    let state = j.rig.home.join("t/statedir-xdg-state");
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    j.give(&[&state]);
    let j = j.env("XDG_STATE_HOME", state.to_str().unwrap());
    let out = j.run("sbatch --wait -o job.out --wrap 'echo ran-on-node pwd=$(pwd)'; echo rc=$?");
    let text = wait_for(&j.project.join("job.out"), "ran-on-node");
    assert!(out.stdout.contains("rc=0"), "{out}");
    assert!(text.contains(&format!("ran-on-node pwd={}", j.project.display())), "{text}: {out}");
    let jobs = state.join("agent-sandbox/jobs");
    assert!(jobs.is_dir(), "the job's directory was under XDG_STATE_HOME: {out}");
}

fn wait_for(p: &Path, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        if text.contains(needle) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
