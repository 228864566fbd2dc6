//! A path the launch checked, swapped for a link to the state directory (or for another
//! directory) before it is used: what a jail of another session of the same user that may
//! write the directory holding it can do (outside review of the state directory, F1 and F5).
//! The launcher of a test build stops at a named moment (`AGENT_SANDBOX_TEST_PAUSE`), the
//! test swaps, and the launch goes on: the race the review won in a loop, made at will.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The names the launcher makes placeholders under in a project (`plan::project`): with the
/// git guard off the default list's, with it on (no placeholder for those) the name the test's
/// policy protects.
const PLACEHOLDERS: [&str; 7] = [".envrc", ".githooks", ".vscode", ".idea", ".claude", ".codex", "keep.txt"];

/// The test user's state directory, made by a session first.
fn state_dir(j: &Jail) -> PathBuf {
    let out = j.run("true");
    assert_eq!(out.code, 0, "{out}");
    let state = j.rig.home.join(".local/state/agent-sandbox");
    assert!(state.join("audit.jsonl").exists(), "{}: {out}", state.display());
    std::fs::canonicalize(&state).unwrap()
}

/// A link's text from the directory `from` to `to`, relative: it leads there on the host
/// and under the jail's `/oldroot` alike (an absolute one would resolve in the jail's root).
fn relative_to(from: &Path, to: &Path) -> PathBuf {
    let up = from.components().count() - 1;
    let mut p: PathBuf = std::iter::repeat_n("..", up).collect();
    p.push(to.strip_prefix("/").unwrap());
    p
}

/// Runs the launcher with `args` stopped at `point`, calls `swap` there, lets it go on.
fn launch_swapped(j: &Jail, name: &str, point: &str, args: &[&str], swap: &dyn Fn()) -> Out {
    launch_swapped_env(j, name, point, args, &[], swap)
}

/// `launch_swapped` with `env` set for the launcher.
fn launch_swapped_env(j: &Jail, name: &str, point: &str, args: &[&str], env: &[(&str, &str)], swap: &dyn Fn()) -> Out {
    let pause = PathBuf::from("/var/tmp/asb-swap-pause").join(name);
    let _ = std::fs::remove_dir_all(&pause);
    std::fs::create_dir_all(&pause).unwrap();
    for d in [pause.parent().unwrap(), &pause] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let mut c = j.command(args);
    c.env("AGENT_SANDBOX_TEST_PAUSE", format!("{point}:{}", pause.display()));
    c.envs(env.iter().copied());
    std::thread::scope(|s| {
        let run = s.spawn(|| j.output(&mut c));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !pause.join(format!("{point}.reached")).exists() && !run.is_finished() {
            assert!(Instant::now() < deadline, "the launcher never reached {point}");
            std::thread::sleep(Duration::from_millis(5));
        }
        let reached = pause.join(format!("{point}.reached")).exists();
        if reached {
            swap();
        }
        std::fs::write(pause.join(format!("{point}.go")), "").unwrap();
        let out = run.join().unwrap();
        assert!(reached, "the launcher ended before {point} (a build without the test pause?): {out}");
        out
    })
}

/// A scratch tree `/var/tmp/asb-swap/NAME` of the test user's with `data/` in it.
fn scratch(j: &Jail, name: &str) -> PathBuf {
    let base = PathBuf::from("/var/tmp/asb-swap").join(name);
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("data")).unwrap();
    std::fs::write(base.join("data/mine"), "x").unwrap();
    std::fs::set_permissions(base.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
    j.give(&[&base, &base.join("data"), &base.join("data/mine")]);
    base
}

/// `dir` put aside and a relative link to the state directory put in its place, atomically
/// enough for a launcher that is stopped.
fn swap_for_link(dir: &Path, state: &Path) {
    let aside = dir.with_extension("aside");
    std::fs::rename(dir, &aside).unwrap();
    std::os::unix::fs::symlink(relative_to(dir.parent().unwrap(), state), dir).unwrap();
}

fn refused_naming(out: &Out, path: &Path) {
    assert_ne!(out.code, 0, "the command ran: {out}");
    assert!(!out.stdout.contains("audit.jsonl"), "the state directory was seen: {out}");
    assert!(out.stderr.contains(&path.display().to_string()), "the path is not named: {out}");
    assert!(out.stderr.contains("no longer what the launch checked"), "{out}");
}

/// F1: a `--rw` path swapped for a link to the state directory after the plan checked it is
/// neither bound (userns) nor granted (Landlock): the launch stops, naming it.
fn a_rw_path_swapped_after_the_plan(backend: &str) {
    let name = format!("rw-{backend}");
    let Some(j) = Jail::new(&format!("swap-{name}")) else { return };
    let j = j.arg("--backend").arg(backend);
    let state = state_dir(&j);
    let _ = std::fs::remove_file(state.join("planted"));
    let base = scratch(&j, &name);
    let data = base.join("data");
    let script = format!("ls -A {0}; touch {0}/planted && echo PLANTED", data.display());
    let args = ["-q", "--rw", data.to_str().unwrap(), "run", "--", "sh", "-c", &script];
    let out = launch_swapped(&j, &name, "planned", &args, &|| swap_for_link(&data, &state));
    let planted = state.join("planted").exists();
    let _ = std::fs::remove_file(state.join("planted"));
    assert!(!planted && !out.stdout.contains("PLANTED"), "the jail wrote into the state directory: {out}");
    refused_naming(&out, &data);
}

#[test]
fn a_rw_path_swapped_for_a_link_to_the_state_directory_after_the_plan_is_not_bound() {
    a_rw_path_swapped_after_the_plan("userns");
}

#[test]
fn landlock_a_rw_path_swapped_for_a_link_to_the_state_directory_after_the_plan_is_not_granted() {
    a_rw_path_swapped_after_the_plan("landlock");
}

/// F1 (a project inside another session's project): the inner project swapped for a link to
/// the state directory after the plan is not bound, and no placeholder is made through the
/// link (in the state directory).
#[test]
fn a_project_swapped_for_a_link_to_the_state_directory_after_the_plan_is_not_bound() {
    let Some(j) = Jail::new("swap-project") else { return };
    let state = state_dir(&j);
    let inner = j.project.join("inner");
    std::fs::create_dir(&inner).unwrap();
    j.give(&[&inner]);
    let before: Vec<&str> = PLACEHOLDERS.iter().copied().filter(|p| state.join(p).exists()).collect();
    // A name the guard does not refuse, so that the plan counts on a placeholder for it.
    let policy = home_file(&j, "t/swap-project-keep.toml", "[filesystem]\nprotected = [\"keep.txt\"]\n");
    let j = j.cwd(&inner).arg("--policy").arg(&policy.display().to_string());
    let script = format!("ls -A {0}; touch {0}/planted && echo PLANTED", inner.display());
    let args = ["-q", "run", "--", "sh", "-c", &script];
    let out = launch_swapped(&j, "project", "planned", &args, &|| swap_for_link(&inner, &state));
    let planted = state.join("planted").exists();
    let _ = std::fs::remove_file(state.join("planted"));
    let made: Vec<&str> =
        PLACEHOLDERS.iter().copied().filter(|p| state.join(p).exists() && !before.contains(p)).collect();
    for p in &made {
        let _ = std::fs::remove_dir(state.join(p)).or_else(|_| std::fs::remove_file(state.join(p)));
    }
    assert!(made.is_empty(), "placeholders were made in the state directory: {made:?}: {out}");
    assert!(!planted && !out.stdout.contains("PLANTED"), "the jail wrote into the state directory: {out}");
    refused_naming(&out, &inner);
}

/// A sealed job directory of the test user's, as the chaperon writes one for a batch job of
/// `project` running `script` (what a node's `exec --job` runs).
fn job_dir(j: &Jail, project: &Path, name: &str, script: &str) -> PathBuf {
    use agent_sandbox::policy;
    let rig = j.rig;
    let paths = policy::PolicyPaths::new(&rig.home, None);
    let req = policy::LoadRequest {
        paths: &paths,
        home: &rig.home,
        uid: rig.uid,
        project: Some(project),
        profile: None,
        policy_files: &[],
        cli: Default::default(),
    };
    let frozen = policy::Frozen::freeze(&policy::load(req).unwrap()).unwrap();
    let key = user_record_key(rig);
    let jobs = rig.home.join(".local/state/agent-sandbox/jobs");
    let dir = jobs.join(format!("swap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let spec = serde_json::json!({
        "version": 3, "session": "feedfacecafe", "project": project, "cwd": project,
        "policy": frozen.text(), "export": null, "output": "job.out",
        "error": null, "input": null, "append": false, "job_name": "t", "script_args": [],
        "project_id": chaperon::job::ProjectId::of(project).unwrap(),
        "script_sha256": chaperon::job::sha256_hex(script.as_bytes()),
    });
    let sealed =
        key.seal(chaperon::job::SEAL_PURPOSE, dir.file_name().unwrap().as_encoded_bytes(), spec.to_string().as_bytes());
    std::fs::write(dir.join("job.json"), sealed).unwrap();
    std::fs::write(dir.join("script"), script).unwrap();
    for p in [jobs.parent().unwrap(), &jobs, &dir, &dir.join("job.json"), &dir.join("script")] {
        j.give(&[p]);
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// The inner project of a session's project, and a job directory for a job of it.
fn inner_project_job(j: &Jail, name: &str) -> (PathBuf, PathBuf) {
    let inner = j.project.join("inner");
    std::fs::create_dir(&inner).unwrap();
    j.give(&[&inner]);
    let inner = std::fs::canonicalize(&inner).unwrap();
    let script = "#!/bin/sh\npwd; ls -A; touch ran-here && echo JOB-RAN\n";
    let dir = job_dir(j, &inner, name, script);
    (inner, dir)
}

/// F5: a job's project replaced by another directory after the node checked its identity
/// (before the plan looked at it) runs nothing: the directory the plan found and the jail
/// binds must be the one whose identity was checked. The plan shares the check's view of the
/// project (one resolution per launch), so the first to see the swap may be the plan's hold
/// on the job's project or the anchor of the first thing made or bound there (a placeholder).
#[test]
fn a_jobs_project_replaced_after_its_identity_check_runs_nothing() {
    let Some(j) = Jail::new("swap-job-checked") else { return };
    let (inner, dir) = inner_project_job(&j, "checked");
    let args = ["exec", "--job", dir.to_str().unwrap()];
    let out = launch_swapped(&j, "job-checked", "checked", &args, &|| {
        std::fs::rename(&inner, inner.with_extension("aside")).unwrap();
        std::fs::create_dir(&inner).unwrap();
        j.give(&[&inner]);
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!inner.join("ran-here").exists() && !out.stdout.contains("JOB-RAN"), "the job ran elsewhere: {out}");
    assert_ne!(out.code, 0, "{out}");
    assert!(out.stderr.contains(&inner.display().to_string()), "the project is not named: {out}");
    assert!(
        out.stderr.contains("no longer the directory it was submitted from")
            || out.stderr.contains("no longer what the launch checked"),
        "{out}"
    );
}

/// F5: a job's project swapped for a link to the state directory after the plan (the
/// review's way to read `records.key` from a job) is not bound: the launch stops.
#[test]
fn a_jobs_project_swapped_for_a_link_to_the_state_directory_before_its_bind_runs_nothing() {
    let Some(j) = Jail::new("swap-job-planned") else { return };
    let state = state_dir(&j);
    let (inner, dir) = inner_project_job(&j, "planned");
    let args = ["exec", "--job", dir.to_str().unwrap()];
    let out = launch_swapped(&j, "job-planned", "planned", &args, &|| swap_for_link(&inner, &state));
    let _ = std::fs::remove_dir_all(&dir);
    let ran = state.join("ran-here").exists();
    for f in ["ran-here", "job.out"] {
        let _ = std::fs::remove_file(state.join(f));
    }
    assert!(!ran && !out.stdout.contains("JOB-RAN"), "the job ran in the state directory: {out}");
    refused_naming(&out, &inner);
}

/// A policy file of the test's (`--policy`), readable by the test user.
fn policy_file(name: &str, text: &str) -> PathBuf {
    let p = PathBuf::from("/var/tmp/asb-swap").join(format!("{name}.toml"));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p
}

/// A directory of the user's `~/.config` that the session binds writable, with a seed in it
/// (`settings.json`, holding `text`) and the policy that says so; removed when dropped.
struct SeedEntry {
    dir: PathBuf,
    seed: PathBuf,
    policy: PathBuf,
}

impl SeedEntry {
    fn new(j: &Jail, name: &str, text: &str) -> SeedEntry {
        let dir = j.rig.home.join(".config").join(format!("asb{}{}", name.replace('-', ""), std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let seed = dir.join("settings.json");
        std::fs::write(&seed, text).unwrap();
        j.give(&[&dir, &seed]);
        let rel = dir.strip_prefix(&j.rig.home).unwrap();
        let policy = policy_file(
            name,
            &format!("[home]\nwrite = [\"{r}/\"]\nseed = [\"{r}/settings.json\"]\n", r = rel.display()),
        );
        SeedEntry { dir, seed, policy }
    }

    fn policy(&self) -> &str {
        self.policy.to_str().unwrap()
    }
}

impl Drop for SeedEntry {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A read-only tree's entry swapped for a link to the state directory after the plan: the
/// victim's command lists it and reads `records.key` through it.
fn a_read_only_trees_entry_swapped(name: &str, policy: &str, hide: &str, ro: &str) {
    let Some(j) = Jail::new(&format!("swap-{name}")) else { return };
    let j = j.arg("--backend").arg("userns");
    let state = state_dir(&j);
    let base = scratch(&j, name);
    std::fs::create_dir(base.join("data/sub")).unwrap();
    j.give(&[&base.join("data/sub")]);
    let data = base.join("data");
    let policy = policy_file(name, policy);
    let (hide, ro) = (base.join(hide), base.join(ro));
    let script = format!("ls -A {0}; od -An -tx1 -N8 {0}/records.key && echo KEY-READ", data.display());
    let args = [
        "-q",
        "--policy",
        policy.to_str().unwrap(),
        "--hide",
        hide.to_str().unwrap(),
        "--ro",
        ro.to_str().unwrap(),
        "run",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let out = launch_swapped(&j, name, "planned", &args, &|| swap_for_link(&data, &state));
    assert!(!out.stdout.contains("KEY-READ") && !out.stdout.contains("records.key"), "the key was read: {out}");
    refused_naming(&out, &data);
}

/// N1: an entry of a read-only tree rebuilt around a hidden path (`hide_with = "rebuild"`)
/// swapped for a link to the state directory after the plan is not bound: the launch stops.
#[test]
fn a_rebuilt_trees_entry_swapped_for_a_link_to_the_state_directory_is_not_bound() {
    let policy = "[sandbox]\nhide_with = \"rebuild\"\n";
    a_read_only_trees_entry_swapped("tree-entry", policy, "other", "");
}

/// N2: the lower layer of a read-only tree's overlay (the default way to hide a path in it)
/// swapped for a link to the state directory after the plan is not stacked on: the launch
/// stops.
#[test]
fn an_overlays_lower_layer_swapped_for_a_link_to_the_state_directory_is_not_mounted() {
    a_read_only_trees_entry_swapped("overlay-lower", "", "data/sub", "data");
}

/// N3: a user's profile's missing `home.write` directory, made by the launcher, then swapped
/// for a link to the state directory before the jail binds it (userns) or grants it
/// (Landlock): neither; the launch stops, naming it.
fn a_made_home_entry_swapped(backend: &str) {
    let name = format!("made-{backend}");
    let Some(j) = Jail::new(&format!("swap-{name}")) else { return };
    let j = j.arg("--backend").arg(backend);
    let state = state_dir(&j);
    let _ = std::fs::remove_file(state.join("planted"));
    let tool = format!("asbswap{backend}{}", std::process::id());
    let profiles = j.rig.home.join(".config/agent-sandbox/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    j.give(&[&profiles]);
    let profile = profiles.join(format!("{tool}.toml"));
    std::fs::write(&profile, format!("[home]\nwrite = [\".local/share/{tool}/\"]\n")).unwrap();
    j.give(&[&profile]);
    let entry = j.rig.home.join(".local/share").join(&tool);
    let _ = std::fs::remove_dir_all(&entry);
    let script = format!("ls -A {0}; touch {0}/planted && echo PLANTED", entry.display());
    let args = ["-q", "--profile", &tool, "run", "--", "sh", "-c", &script];
    let out = launch_swapped(&j, &name, "made", &args, &|| {
        assert!(entry.is_dir(), "the launcher did not make {}", entry.display());
        swap_for_link(&entry, &state)
    });
    let planted = state.join("planted").exists();
    let _ = std::fs::remove_file(state.join("planted"));
    let _ = std::fs::remove_file(&profile);
    let _ = std::fs::remove_file(&entry);
    let _ = std::fs::remove_dir_all(entry.with_extension("aside"));
    assert!(!planted && !out.stdout.contains("PLANTED"), "the jail wrote into the state directory: {out}");
    refused_naming(&out, &entry);
}

#[test]
fn a_home_entry_the_launcher_made_swapped_for_a_link_to_the_state_directory_is_not_bound() {
    a_made_home_entry_swapped("userns");
}

#[test]
fn landlock_a_home_entry_the_launcher_made_swapped_for_a_link_to_the_state_directory_is_not_granted() {
    a_made_home_entry_swapped("landlock");
}

/// N4: a `home.seed` file swapped for a link to `records.key` after the plan is not copied
/// into the jail's home: the launch stops, naming it.
#[test]
fn a_seed_swapped_for_a_link_to_the_record_key_is_not_copied() {
    let Some(j) = Jail::new("swap-seed") else { return };
    let j = j.arg("--backend").arg("userns");
    let state = state_dir(&j);
    let dir = j.rig.home.join(format!(".config/asbswapseed{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let seed = dir.join("settings.json");
    std::fs::write(&seed, "{}\n").unwrap();
    j.give(&[&dir, &seed]);
    let rel = seed.strip_prefix(&j.rig.home).unwrap();
    let policy = policy_file("seed", &format!("[home]\nseed = [\"{}\"]\n", rel.display()));
    let script = format!("od -An -tx1 -N8 {} && echo SEED-READ", seed.display());
    let args = ["-q", "--policy", policy.to_str().unwrap(), "run", "--", "sh", "-c", &script];
    let key = state.join("records.key");
    let key_head: Vec<u8> = std::fs::read(&key).unwrap()[..8].to_vec();
    let out = launch_swapped(&j, "seed", "planned", &args, &|| {
        std::fs::rename(&seed, seed.with_extension("aside")).unwrap();
        std::os::unix::fs::symlink(relative_to(&dir, &key), &seed).unwrap();
    });
    let _ = std::fs::remove_dir_all(&dir);
    let head: String = key_head.iter().map(|b| format!(" {b:02x}")).collect();
    assert!(!out.stdout.contains(&head) && !out.stdout.contains("SEED-READ"), "the key was copied in: {out}");
    refused_naming(&out, &seed);
}

#[test]
fn a_seed_written_into_a_bound_home_entry_never_leaves_the_jails_root() {
    // Second outside review of the anchors, S1: a seed whose directory the session binds from
    // the host was read by its anchor, then written by name, links followed, while the host's
    // whole tree is at `/oldroot`: swapped for a link there, it overwrote any file of the
    // user's (`~/.bashrc`). The write is resolved as from inside the jail now.
    let Some(j) = Jail::new("swap-seed-write") else { return };
    let j = j.arg("--backend").arg("userns");
    let e = SeedEntry::new(&j, "seed-write", "{\"planted\": true}\n");
    let canary = j.rig.home.join(format!("asbswapsw{}-canary", std::process::id()));
    std::fs::write(&canary, "ORIGINAL\n").unwrap();
    j.give(&[&canary]);
    let args = ["-q", "--policy", e.policy(), "run", "--", "true"];
    let out = launch_swapped(&j, "seed-write", "seed-read-settings.json", &args, &|| {
        std::fs::remove_file(&e.seed).unwrap();
        std::os::unix::fs::symlink(format!("/oldroot{}", canary.display()), &e.seed).unwrap();
    });
    let after = std::fs::read_to_string(&canary).unwrap_or_default();
    let _ = std::fs::remove_file(&canary);
    assert_eq!(after, "ORIGINAL\n", "the seed was written to the host through /oldroot: {out}");
}

#[test]
fn a_seed_in_a_bound_home_entry_swapped_for_a_link_inside_the_jail_writes_nothing_there() {
    // Third outside look at the anchors, T1: resolved inside the jail's root, a seed swapped
    // for a link to another tree the jail shows writable (the user's agent-sandbox config
    // there; the project here) was written through it before the protections were mounted.
    // A seed below a host tree is now a copy bound over its name: nothing is written there.
    let Some(j) = Jail::new("swap-seed-inside") else { return };
    let j = j.arg("--backend").arg("userns");
    let e = SeedEntry::new(&j, "seed-inside", "{\"seeded\": true}\n");
    let seed = &e.seed;
    // Beside it in the same bound entry: what stands for a protected file there that is only
    // made read-only later in the build (`~/.config/agent-sandbox/config.toml` in the review).
    let canary = e.dir.join("canary.txt");
    std::fs::write(&canary, "ORIGINAL\n").unwrap();
    j.give(&[&canary]);
    // What the victim's jail shows at the link's target (fourth look, U2: the staged copy was
    // bound over whatever the link named in its view, a file another policy trusts).
    let script = format!("cat {}", canary.display());
    let args = ["-q", "--policy", e.policy(), "run", "--", "sh", "-c", &script];
    let out = launch_swapped(&j, "seed-inside", "seed-read-settings.json", &args, &|| {
        std::fs::remove_file(seed).unwrap();
        std::os::unix::fs::symlink("canary.txt", seed).unwrap();
    });
    let after = std::fs::read_to_string(&canary).unwrap_or_default();
    let host_seed = std::fs::symlink_metadata(seed).map(|m| m.file_type().is_symlink()).unwrap_or(false);
    assert_eq!(after, "ORIGINAL\n", "the seed was written through the link: {out}");
    assert!(host_seed, "the host's name was replaced: {out}");
    assert!(!out.stdout.contains("seeded"), "the seed was bound over the link's target: {out}");
    // The launch stopped over another file, and was planned again (stop 49): the new plan
    // finds the link, copies no seed through it, and says so.
    assert!(out.stderr.contains("another file than the launch checked"), "{out}");
    assert!(out.stderr.contains("reached through a symbolic link: not copied in"), "{out}");
    assert_eq!(out.code, 0, "{out}");
}

#[test]
fn a_seed_swapped_for_a_link_to_a_missing_file_creates_nothing() {
    // Fourth outside look at the anchors, U1: the launcher made the seed's name with
    // `O_CREAT` before binding over it, following a link swapped in, so an empty file
    // appeared where it led (an empty `~/.config/agent-sandbox/profiles/claude.toml`, which
    // replaced the built-in profile). Now nothing is created: the copy is bound onto the file
    // the plan checked, or the launch stops.
    let Some(j) = Jail::new("swap-seed-create") else { return };
    let j = j.arg("--backend").arg("userns");
    let e = SeedEntry::new(&j, "seed-create", "{\"seeded\": true}\n");
    let args = ["-q", "--policy", e.policy(), "run", "--", "true"];
    let out = launch_swapped(&j, "seed-create", "seed-read-settings.json", &args, &|| {
        std::fs::remove_file(&e.seed).unwrap();
        std::os::unix::fs::symlink("profile.toml", &e.seed).unwrap();
    });
    let made = e.dir.join("profile.toml").exists();
    assert!(!made, "the launcher created the link's target: {out}");
    // Planned again (stop 49): the new plan finds the link and copies nothing through it.
    assert!(out.stderr.contains("not there as the jail sees it"), "the first launch stopped: {out}");
    assert!(out.stderr.contains("reached through a symbolic link: not copied in"), "{out}");
}

#[test]
fn a_seed_in_a_bound_home_entry_is_a_session_copy_that_leaves_the_host_file_alone() {
    // Third outside look, T4: `--dry-run` calls it a writable session copy, and it is one now:
    // what the jail writes there stays in the session; the host's file keeps its bytes.
    let Some(j) = Jail::new("seed-session-copy") else { return };
    let j = j.arg("--backend").arg("userns");
    let e = SeedEntry::new(&j, "seed-copy", "HOST\n");
    let script = format!(
        "cat {s} && echo JAIL > {s} && cat {s} && echo other > {d}/other",
        s = e.seed.display(),
        d = e.dir.display()
    );
    let out = j.run_with(&["--policy", e.policy()], &script);
    let host = std::fs::read_to_string(&e.seed).unwrap_or_default();
    let other = std::fs::read_to_string(e.dir.join("other")).unwrap_or_default();
    assert!(out.stdout.contains("HOST") && out.stdout.contains("JAIL"), "{out}");
    assert_eq!(host, "HOST\n", "the session's write reached the host's file: {out}");
    assert_eq!(other, "other\n", "the entry itself is still the host's, writable: {out}");
}

/// Paths the plan saw and the jail covers, removed outside before the jail is built (a
/// `hf auth logout`, a cleaned-up file, another test's canary): the session runs, as if the
/// plan had not seen them. A store the launcher makes when missing (`~/.cache/huggingface/
/// token`) is made again, empty, and covered, so that a login outside during the session stays
/// unseen; a plain hidden file is left gone. Before, the jail refused to start ("mask ...:
/// No such file or directory"), which CI met as a race between two tests.
#[test]
fn hidden_paths_removed_after_the_plan_leave_the_session_running_and_a_store_covered() {
    let Some(j) = Jail::new("swap-vanished") else { return };
    let j = j.arg("--backend").arg("userns");
    let hf = j.rig.home.join(".cache/huggingface");
    let token = hf.join("token");
    std::fs::create_dir_all(&hf).unwrap();
    std::fs::write(&token, "hf_CANARYGONE\n").unwrap();
    let secret = j.project.join("notes.secret");
    std::fs::write(&secret, "CANARY-NOTES\n").unwrap();
    j.give(&[&hf, &token, &secret]);
    let (started, written) = (j.project.join("started"), j.project.join("written"));
    // The user logs in again outside while the session runs, writing the token in place.
    let outside = {
        let (token, started, written, rig) = (token.clone(), started.clone(), written.clone(), j.rig);
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(60);
            while !started.exists() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::fs::write(&token, "hf_CANARYLATER\n").unwrap();
            std::os::unix::fs::chown(&token, Some(rig.uid), Some(rig.gid)).unwrap();
            std::fs::write(&written, "").unwrap();
        })
    };
    let script = "cat ~/.cache/huggingface/token; ls -l ~/.cache/huggingface/token; cat notes.secret; touch started; \
                  i=0; while [ ! -e written ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
                  cat ~/.cache/huggingface/token; echo > ~/.cache/huggingface/token || echo READ-ONLY; echo PROBED";
    let hide = secret.to_str().unwrap();
    let args = ["-q", "--hide", hide, "run", "--", "sh", "-c", script];
    let out = launch_swapped(&j, "vanished", "made", &args, &|| {
        std::fs::remove_file(&token).unwrap();
        std::fs::remove_file(&secret).unwrap();
    });
    outside.join().expect("the outside side");
    let after = std::fs::read_to_string(&token).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&hf);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("PROBED") && out.stdout.contains("READ-ONLY"), "{out}");
    assert!(out.stdout.contains("No such file") || out.stderr.contains("No such file"), "notes.secret gone: {out}");
    assert!(out.stdout.contains("-r--r--r--"), "the token is covered by an empty read-only file: {out}");
    for canary in ["CANARYGONE", "CANARY-NOTES", "CANARYLATER"] {
        assert!(!out.stdout.contains(canary), "{canary} inside: {out}");
    }
    // The login outside is whole.
    assert_eq!(after, "hf_CANARYLATER\n");
}

/// A file of the home the plan checked, replaced after it as `git config --global` or an
/// editor's save replaces one (a new file renamed over it): the launch is planned again from
/// the home as it is then, says so, and the session runs. Before, it stopped ("... is no longer
/// what the launch checked"), as CI met when one test's session ended while another's started.
fn a_home_file_replaced_after_the_plan(backend: &str) {
    let name = format!("replaced-{backend}");
    let Some(j) = Jail::new(&format!("swap-{name}")) else { return };
    let j = j.arg("--backend").arg(backend);
    let conf = j.rig.home.join(".gitconfig");
    let args = ["-q", "run", "--", "sh", "-c", "git config --global user.name; echo RAN"];
    let out = launch_swapped(&j, &name, "made", &args, &|| {
        let tmp = conf.with_extension(format!("asb-{backend}"));
        std::fs::copy(&conf, &tmp).unwrap();
        j.give(&[&tmp]);
        std::fs::rename(&tmp, &conf).unwrap();
    });
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("Test\nRAN"), "{out}");
    assert!(out.stderr.contains("the host changed while the session was set up; setting it up again"), "{out}");
    assert!(out.stderr.contains("no longer what the launch checked"), "the note names what changed: {out}");
}

#[test]
fn a_home_file_replaced_after_the_plan_is_planned_again_and_the_session_runs() {
    a_home_file_replaced_after_the_plan("userns");
}

#[test]
fn landlock_a_home_file_replaced_after_the_plan_is_planned_again_and_the_session_runs() {
    a_home_file_replaced_after_the_plan("landlock");
}

/// Outside look at stop 49, B1: a project renamed between the plan and the build (by a jail
/// that writes its parent) stops the launch, and it is not planned again: found from the
/// working directory, the project would be planned under its new name, which another
/// `[projects."PATH"]` table, or none, governs (its hidden files shown, its network mode lost).
#[test]
fn a_project_renamed_after_the_plan_is_not_planned_again_under_its_new_name() {
    let Some(j) = Jail::new("swap-renamed") else { return };
    let inner = j.project.join("inner");
    std::fs::create_dir(&inner).unwrap();
    j.give(&[&inner]);
    let j = j.cwd(&inner);
    let moved = j.project.join("inner2");
    let args = ["-q", "run", "--", "sh", "-c", "pwd; echo RAN"];
    let out = launch_swapped(&j, "renamed", "planned", &args, &|| std::fs::rename(&inner, &moved).unwrap());
    assert!(!out.stdout.contains("RAN"), "the session ran in the renamed project: {out}");
    assert!(!out.stderr.contains("setting it up again"), "{out}");
    assert!(out.stderr.contains("is gone"), "{out}");
}

/// Second outside look at stop 49, 1b: a launch planned again runs under its first launch's
/// policy or not at all. A `[projects]` key spelled through a link a jail can re-point, and a
/// protected file replaced to force the second plan: that plan found no table for the project
/// (its hidden file shown, `isolated` lost). Now the launch stops, saying why.
#[test]
fn a_launch_planned_again_under_another_policy_stops() {
    let Some(j) = Jail::new("swap-policy") else { return };
    let j = j.arg("--backend").arg("userns");
    let base = scratch(&j, "policy");
    let (data, decoy, lnk, cfg) = (base.join("data"), base.join("decoy"), base.join("lnk"), base.join("cfg"));
    std::fs::create_dir_all(cfg.join("agent-sandbox")).unwrap();
    std::fs::create_dir_all(&decoy).unwrap();
    std::fs::write(data.join("secret"), "CANARY-POLICY\n").unwrap();
    std::fs::write(data.join(".envrc"), "# the project's\n").unwrap();
    std::os::unix::fs::symlink(&data, &lnk).unwrap();
    let config = format!(
        "[projects.\"{}\"]\nfilesystem.hide = [\"{}\"]\nnet.mode = \"isolated\"\n",
        lnk.display(),
        data.join("secret").display()
    );
    std::fs::write(cfg.join("agent-sandbox/config.toml"), config).unwrap();
    for p in [&cfg, &cfg.join("agent-sandbox"), &cfg.join("agent-sandbox/config.toml"), &decoy, &data.join("secret")] {
        j.give(&[p]);
    }
    j.give(&[&data.join(".envrc")]);
    let std::process::Output { status, .. } =
        std::process::Command::new("chown").args(["-h", &format!("{}", j.rig.uid)]).arg(&lnk).output().unwrap();
    assert!(status.success());
    let j = j.cwd(&data);
    let env = [("XDG_CONFIG_HOME", cfg.to_str().unwrap())];
    let args = ["-q", "run", "--", "sh", "-c", "cat secret; echo NET=$AGENT_SANDBOX_NET"];
    // The table applies as the launch starts.
    let out = launch_swapped_env(&j, "policy-plain", "planned", &args, &env, &|| {});
    assert!(out.stdout.contains("NET=isolated") && !out.stdout.contains("CANARY"), "{out}");
    let out = launch_swapped_env(&j, "policy", "planned", &args, &env, &|| {
        let envrc = data.join(".envrc");
        let tmp = data.join(".envrc.new");
        std::fs::copy(&envrc, &tmp).unwrap();
        j.give(&[&tmp]);
        std::fs::rename(&tmp, &envrc).unwrap();
        std::fs::remove_file(&lnk).unwrap();
        std::os::unix::fs::symlink(&decoy, &lnk).unwrap();
    });
    assert!(!out.stdout.contains("CANARY") && !out.stdout.contains("NET=filtered"), "{out}");
    assert!(out.stderr.contains("the policy read again is not the one the first plan had"), "{out}");
    assert_ne!(out.code, 0, "{out}");
}
