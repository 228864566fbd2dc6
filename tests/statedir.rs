//! The user's state directory (session locks, the audit log, job directories a node trusts)
//! where it really is: `~/.local` a link elsewhere, as on small HPC homes, or
//! `XDG_STATE_HOME` set. Each test gets a home of its own, shown at the test user's home in a
//! private mount namespace: the shared test home is not touched.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A home for one test, `BASE/home`, with the project `t/NAME/` and a `local/` directory in
/// it, and a scratch tree `BASE/scratch` with a `local/` and a `data/` of its own; `~/.local` is a link
/// to `link`. Shown at the test user's home by `wrapper`.
struct LinkedHome {
    home: PathBuf,
    scratch: PathBuf,
    wrapper: Vec<String>,
}

impl LinkedHome {
    /// The session's own mount namespace binds `from` at `to` (as root, before the launcher:
    /// a site's alias of a tree, gone with the session).
    fn bind_first(&mut self, from: &Path, to: &Path) {
        let setup = self.wrapper[6].clone();
        self.wrapper[6] = format!("mount --bind {} {} && {setup}", from.display(), to.display());
    }
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

/// Outside look at stop 47, F1: a user's first session makes the state directory while the
/// plan's view of the home is read ahead (`plan::ahead`), which then lacks it; with a tree
/// above it granted writable, the plan took the state directory for absent and left it
/// unmasked (the record key, the jobs, the allow token). A plain `~/.local`, no state yet;
/// the launch held until the view is read (`reading-ahead`), as a slow home makes it.
#[test]
fn a_first_session_hides_the_state_directory_it_makes_in_a_tree_the_jail_writes() {
    let Some(j) = Jail::new("statedir-first") else { return };
    let h = linked_home(&j, "statedir-first", &|h| h.home.join("local-unused").display().to_string());
    std::fs::remove_file(h.home.join(".local")).unwrap();
    std::fs::create_dir(h.home.join(".local")).unwrap();
    std::os::unix::fs::lchown(h.home.join(".local"), Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    let pause = PathBuf::from("/var/tmp/asb-statedir-pause");
    let _ = std::fs::remove_dir_all(&pause);
    std::fs::create_dir_all(&pause).unwrap();
    std::fs::set_permissions(&pause, std::fs::Permissions::from_mode(0o777)).unwrap();
    let local = j.rig.home.join(".local").display().to_string();
    let script = attack(&local);
    let args = ["-q", "--rw", &local, "run", "--", "sh", "-c", &script];
    let wrapper: Vec<&str> = h.wrapper.iter().map(String::as_str).collect();
    let mut c = j.command_wrapped(&wrapper, &args);
    c.env("AGENT_SANDBOX_TEST_PAUSE", format!("reading-ahead:{}", pause.display()));
    let out = std::thread::scope(|s| {
        let run = s.spawn(|| j.output(&mut c));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !pause.join("reading-ahead.reached").exists() && !run.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the launcher never reached the pause");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // The view's listings are read by now (a few system calls on the local disk).
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::write(pause.join("reading-ahead.go"), "").unwrap();
        run.join().unwrap()
    });
    assert!(pause.join("reading-ahead.reached").exists(), "a build without the test pause: {out}");
    check(&out, &h.home.join(".local/state/agent-sandbox"), "a first session's --rw ~/.local");
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
    let text = wait_for_text(&j.project.join("job.out"), "ran-on-node");
    assert!(out.stdout.contains("rc=0"), "{out}");
    assert!(text.contains(&format!("ran-on-node pwd={}", j.project.display())), "{text}: {out}");
    let jobs = state.join("agent-sandbox/jobs");
    assert!(jobs.is_dir(), "the job's directory was under XDG_STATE_HOME: {out}");
}

/// A state directory under a deep home: the session's Slurm socket
/// (`<state>/sessions/<id>.sock`) passes the 107 bytes a socket address holds. The session
/// starts and Slurm answers (the socket is bound through its directory's descriptor); it
/// stopped with "path must be shorter than SUN_LEN" and no fix before.
#[test]
fn a_state_directory_deeper_than_a_socket_address_holds_still_serves_slurm() {
    let Some(j) = slurm_jail("statedir-deep") else { return };
    let mut state = j.rig.home.join("t/statedir-deep-state");
    let _ = std::fs::remove_dir_all(&state);
    while state.as_os_str().len() < 110 {
        state.push("a-directory-of-a-deep-site-layout");
    }
    std::fs::create_dir_all(&state).unwrap();
    let top = j.rig.home.join("t/statedir-deep-state");
    let mut dirs: Vec<&Path> = state.ancestors().take_while(|a| a.starts_with(&top)).collect();
    dirs.reverse();
    j.give(&dirs);
    let j = j.env("XDG_STATE_HOME", state.to_str().unwrap());
    let out = j.run("squeue -h -o %i >/dev/null; echo rc=$?");
    let _ = std::fs::remove_dir_all(&top);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("rc=0"), "{out}");
}

/// `--ro /dev/fd/N` on a directory of the home (second outside look at the anchors, S5):
/// refused, naming the path the descriptor is open on, where it was refused as a
/// `filesystem.read` entry "inside your home" that `--ro` would accept.
#[test]
fn a_descriptor_open_on_a_home_directory_is_refused_naming_that_path() {
    let Some(j) = Jail::new("statedir-fd") else { return };
    let mut c = j.as_user("sh");
    c.arg("-c").arg(format!("exec 7<. && exec {} -q --ro /dev/fd/7 run -- true", j.rig.bin.display()));
    let out = j.output(&mut c);
    assert_ne!(out.code, 0, "{out}");
    assert!(out.stderr.contains("is a descriptor open on ~/t/statedir-fd inside your home"), "{out}");
}

/// Read-only trees show no hidden path however they are spelled or reached (outside review
/// of the state directory, F4): `//`, `/.`, a link to scratch, a link back into the home,
/// in both backends. `~/.local` is a link to the scratch tree's `local/`.
#[test]
fn a_read_only_tree_spelled_otherwise_or_through_a_link_shows_no_hidden_path() {
    for backend in ["userns", "landlock"] {
        let name = format!("statedir-ro-{backend}");
        let Some(j) = Jail::new(&name) else { return };
        let j = j.arg("--backend").arg(backend);
        let h = linked_home(&j, &name, &|h| h.scratch.join("local").display().to_string());
        let s = h.scratch.display().to_string();
        std::fs::create_dir_all(h.scratch.join("secret")).unwrap();
        std::fs::write(h.scratch.join("secret/f"), "TOPSECRET").unwrap();
        std::fs::create_dir_all(h.home.join("data")).unwrap();
        std::os::unix::fs::symlink(&h.scratch, h.home.join("sc")).unwrap();
        std::os::unix::fs::symlink("..", h.home.join("data/up")).unwrap();
        let st = std::process::Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", j.rig.uid, j.rig.gid))
            .arg(&h.home)
            .arg(&h.scratch)
            .status()
            .unwrap();
        assert!(st.success());
        // A first session makes the state directory (and its audit log) to look for.
        assert_eq!(run_in(&j, &h, &[], "true").code, 0);
        let state = format!("{s}/local/state/agent-sandbox");
        assert!(Path::new(&state).join("audit.jsonl").exists());
        let home = j.rig.home.display().to_string();
        let probe = format!(
            "echo entries=$(ls -A {state} 2>/dev/null | wc -l); cat {s}/secret/f 2>/dev/null; \
             cat {home}/data/up/.ssh/id_ed25519 {home}/.ssh/id_ed25519 2>/dev/null; \
             ls -A {home}/data/up/.local/state/agent-sandbox 2>/dev/null | sed s/^/listed-/; echo done"
        );
        let hide = format!("{s}/secret");
        for ro in [
            format!("{s}/"),
            format!("{}//{}", h.scratch.parent().unwrap().display(), h.scratch.file_name().unwrap().to_str().unwrap()),
            format!("{s}/."),
            format!("{s}/local//."),
            "~/sc/local".to_string(),
            "~/sc".to_string(),
            "~/data/up/.ssh".to_string(),
            "~/data/up/.local/state".to_string(),
        ] {
            let out = run_in(&j, &h, &["--hide", &hide, "--ro", &ro], &probe);
            let what = format!("{backend} --ro {ro}");
            assert!(out.stdout.contains("done"), "{what}: {out}");
            assert!(out.stdout.contains("entries=0"), "{what}: the state directory is seen: {out}");
            for bad in ["TOPSECRET", SSH_CANARY, "listed-"] {
                assert!(!out.stdout.contains(bad), "{what}: {bad}: {out}");
            }
        }
        // What is not hidden there is shown, where it really is.
        std::fs::write(h.scratch.join("local/lib.txt"), "LIB").unwrap();
        let out = run_in(&j, &h, &["--ro", "~/sc/local"], &format!("cat {s}/local/lib.txt"));
        assert!(out.stdout.contains("LIB"), "{backend}: {out}");
    }
}

/// `--rw ~/.local` (or below it) with `~/.local` a link starts (outside review, F6): the
/// placeholders below it are made where they really are, and the state directory there stays
/// out of reach, in both backends.
#[test]
fn a_linked_local_granted_writable_starts_with_the_state_directory_hidden() {
    for backend in ["userns", "landlock"] {
        let name = format!("statedir-rwlocal-{backend}");
        let Some(j) = Jail::new(&name) else { return };
        let j = j.arg("--backend").arg(backend);
        let h = linked_home(&j, &name, &|h| h.scratch.join("local").display().to_string());
        let home = j.rig.home.display().to_string();
        // `share/` (where the session needs a placeholder: opencode's directory) and an entry
        // to write besides the state directory (Landlock makes nothing new directly in the
        // directories on the way to a hidden path, only in their other entries).
        for d in ["local/share", "local/lib"] {
            std::fs::create_dir_all(h.scratch.join(d)).unwrap();
            std::os::unix::fs::chown(h.scratch.join(d), Some(j.rig.uid), Some(j.rig.gid)).unwrap();
        }
        for rw in ["~/.local", "~/.local/share", "~/.local/state/"] {
            let attack = attack(&format!("{home}/.local"));
            let script = format!("{attack}; touch {home}/.local/lib/mine && echo WRITABLE; true");
            let out = run_in(&j, &h, &["--rw", rw], &script);
            let what = format!("{backend} --rw {rw}");
            assert_eq!(out.code, 0, "{what}: {out}");
            let real = h.scratch.join("local/state/agent-sandbox");
            if rw == "~/.local" {
                check(&out, &real, &what);
                assert!(out.stdout.contains("WRITABLE"), "{what}: {out}");
                assert!(h.scratch.join("local/lib/mine").exists(), "{what}: {out}");
            } else {
                // Only part of `~/.local` is granted: the rest is the session's own home
                // (userns), where the jail's writes land and vanish; the real one is untouched.
                assert!(out.stdout.contains("entries=0") && !out.stdout.contains("READ-AUDIT"), "{what}: {out}");
                assert!(!real.join("planted").exists() && !real.join("jobs/forged").exists(), "{what}: {out}");
            }
        }
        // The placeholders made for the session went with it.
        assert!(!h.scratch.join("local/share/opencode").exists(), "{backend}");
    }
}

/// A `~/.local` whose target is gone (a scratch purge) stops the session with a line that
/// names the link, where it leads and the fix (outside review, F3); nothing is made there.
#[test]
fn a_dangling_local_link_is_named_with_the_fix() {
    let Some(j) = Jail::new("statedir-dangling") else { return };
    let h = linked_home(&j, "statedir-dangling", &|h| h.scratch.join("gone/local").display().to_string());
    let out = run_in(&j, &h, &[], "echo ran");
    assert_ne!(out.code, 0, "{out}");
    assert!(!out.stdout.contains("ran"), "{out}");
    let gone = h.scratch.join("gone/local").display().to_string();
    for part in [
        "/.local is a symbolic link to",
        &gone,
        "which does not exist",
        "fix:",
        &format!("mkdir -p {gone}"),
        "XDG_STATE_HOME",
    ] {
        assert!(out.stderr.contains(part), "{part}: {out}");
    }
    assert!(!out.stderr.contains("File exists"), "{out}");
    assert!(!h.scratch.join("gone").exists(), "nothing made where the link points: {out}");
}

/// The record key ring is made by the launcher before the first jail of the user runs, not at
/// the first Slurm call, so no jail can plant one first (outside review, F2); its making is in
/// the audit log.
#[test]
fn the_record_key_is_made_before_the_first_jail_runs() {
    let Some(j) = Jail::new("statedir-key") else { return };
    let h = linked_home(&j, "statedir-key", &|h| h.scratch.join("local").display().to_string());
    let state = h.scratch.join("local/state/agent-sandbox");
    let key = state.join("records.key");
    let out = run_in(&j, &h, &[], "echo done");
    assert!(out.stdout.contains("done"), "{out}");
    let m = std::fs::symlink_metadata(&key).unwrap_or_else(|e| panic!("no key after the session: {e}: {out}"));
    use std::os::unix::fs::MetadataExt;
    assert_eq!((m.mode() & 0o777, m.nlink(), m.uid(), m.len()), (0o600, 1, j.rig.uid, 40), "{out}");
    let log = std::fs::read_to_string(state.join("audit.jsonl")).unwrap();
    assert!(log.contains("\"record_key\"") && log.contains("made the record key"), "{log}");
    // A hard link to it (a jail that once reached the state directory) stops the next session.
    std::fs::hard_link(&key, h.scratch.join("data/k")).unwrap();
    let out = run_in(&j, &h, &[], "echo ran");
    assert!(!out.stdout.contains("ran") && out.stderr.contains("2 links") && out.stderr.contains("fix:"), "{out}");
    // One line, said as written (N8: no run of spaces from a string continued without `\`).
    assert!(out.stderr.contains("2 links, 40 bytes"), "{out}");
}

/// N7 (outside review of the anchors): with `~/.local` a link, a profile whose missing state
/// entries the launcher makes in the home (opencode's `~/.local/state/opencode`,
/// `~/.local/share/opencode/log`) starts, in both backends: they are made where they really
/// are, with no link on the way, and the agent writes them through their home names.
#[test]
fn a_profiles_home_entries_are_made_where_a_linked_local_really_is() {
    for backend in ["userns", "landlock"] {
        let name = format!("statedir-made-{backend}");
        let Some(j) = Jail::new(&name) else { return };
        let j = j.arg("--backend").arg(backend);
        let h = linked_home(&j, &name, &|h| h.scratch.join("local").display().to_string());
        let home = j.rig.home.display().to_string();
        let script = format!("echo x > {home}/.local/share/opencode/log/mine && echo WROTE-STATE");
        let out = run_in(&j, &h, &["--profile", "opencode"], &script);
        assert_eq!(out.code, 0, "{backend}: {out}");
        assert!(out.stdout.contains("WROTE-STATE"), "{backend}: {out}");
        assert!(!out.stderr.contains("Too many levels"), "{backend}: {out}");
        let log = h.scratch.join("local/share/opencode/log");
        assert!(log.join("mine").is_file(), "{backend}: not written at {}: {out}", log.display());
        assert!(h.scratch.join("local/state/opencode").is_dir(), "{backend}: {out}");
    }
}

/// N8 (outside review of the anchors): `--ro /dev/fd/N` (userns) shows the directory the
/// descriptor is open on, at its own path; one open on no path (a pipe) is refused with a
/// line that says so, not an error of the jail's build.
#[test]
fn a_descriptors_name_given_to_ro_is_the_path_it_is_open_on() {
    let Some(j) = Jail::new("statedir-devfd") else { return };
    let j = j.arg("--backend").arg("userns");
    let dir = PathBuf::from("/var/tmp/asb-statedir/devfd");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("seen-through-fd"), "x").unwrap();
    for d in [Path::new("/var/tmp/asb-statedir"), &dir] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(dir.join("seen-through-fd"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = format!("exec 7<{}; exec \"$@\"", dir.display());
    let script = format!("ls {}", dir.display());
    let args = ["-q", "--ro", "/dev/fd/7", "run", "--", "sh", "-c", &script];
    let out = j.output(&mut j.command_wrapped(&["sh", "-c", &open, "sh"], &args));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("seen-through-fd"), "{out}");
    let pipe = "exec 7</dev/null; true | { exec 7<&0; exec \"$@\"; }";
    let out = j.output(&mut j.command_wrapped(&["sh", "-c", pipe, "sh"], &args));
    assert_ne!(out.code, 0, "{out}");
    assert!(out.stderr.contains("/dev/fd/7") && out.stderr.contains("open on no path"), "{out}");
    assert!(!out.stderr.contains("symlink /proc"), "{out}");
}

/// N5 (outside review of the anchors): a second mount of the same file system (a bind-mount
/// alias, `/lustre/scratch` of `/scratch`), granted read-only, shows nothing the policy hides:
/// the state directory is hidden at the alias as where it really is, in both backends.
#[test]
fn a_bind_mount_alias_of_a_tree_shows_no_hidden_path() {
    for backend in ["userns", "landlock"] {
        let name = format!("statedir-alias-{backend}");
        let Some(j) = Jail::new(&name) else { return };
        let j = j.arg("--backend").arg(backend);
        let mut h = linked_home(&j, &name, &|h| h.scratch.join("local").display().to_string());
        // The site's alias, made as root in the session's own mount namespace (gone with it).
        let alias = h.scratch.with_file_name("alias");
        std::fs::create_dir_all(&alias).unwrap();
        let scratch = h.scratch.clone();
        h.bind_first(&scratch, &alias);
        let state = alias.join("local/state/agent-sandbox");
        // The state directory is made by a first session.
        assert_eq!(run_in(&j, &h, &[], "true").code, 0);
        assert!(h.scratch.join("local/state/agent-sandbox/records.key").exists());
        let script = format!(
            "ls -A {0}; od -An -tx1 -N8 {0}/records.key && echo KEY-READ; ls {1} && echo ALIAS-SHOWN",
            state.display(),
            alias.join("data").display()
        );
        let out = run_in(&j, &h, &["--ro", alias.to_str().unwrap()], &script);
        assert!(out.stdout.contains("ALIAS-SHOWN"), "{backend}: the alias is shown: {out}");
        assert!(!out.stdout.contains("KEY-READ") && !out.stdout.contains("audit"), "{backend}: {out}");
    }
}

#[test]
fn a_mount_of_a_part_of_the_state_directory_elsewhere_is_hidden_too() {
    // Second outside review of the anchors, S3: a mount whose root lies inside a hidden path
    // (the state directory's `sessions/` bound elsewhere) was not found as an alias.
    for backend in ["userns", "landlock"] {
        let name = format!("sd-pa-{backend}");
        let Some(j) = Jail::new(&name) else { return };
        let j = j.arg("--backend").arg(backend);
        let mut h = linked_home(&j, &name, &|h| h.scratch.join("local").display().to_string());
        let part = h.scratch.join("data/part");
        std::fs::create_dir_all(&part).unwrap();
        let state = h.scratch.join("local/state/agent-sandbox");
        // The state directory is made by a first session.
        let first = run_in(&j, &h, &[], "true");
        assert_eq!(first.code, 0, "{first}");
        let shares = state.join("audit-shares");
        let names: Vec<String> = std::fs::read_dir(&shares)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.is_empty(), "the first session has a share");
        h.bind_first(&shares, &part);
        let script = format!("ls -A {}; echo LISTED", part.display());
        let out = run_in(&j, &h, &["--ro", h.scratch.join("data").to_str().unwrap()], &script);
        assert!(out.stdout.contains("LISTED"), "{backend}: {out}");
        for n in &names {
            assert!(!out.stdout.contains(n.as_str()), "{backend}: the state directory's {n} is shown: {out}");
        }
    }
}
