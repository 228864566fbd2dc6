//! The jail as a user meets it: the real binary, an unprivileged user, assertions made from
//! inside. Each test names the property (or the attack) it guards.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;

/// Placeholders are removed by a cleanup child just after the launcher exits.
fn gone_soon(p: &std::path::Path) -> bool {
    for _ in 0..200 {
        if !p.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

macro_rules! jail {
    ($name:expr) => {
        match Jail::new($name) {
            Some(j) => j,
            None => return,
        }
    };
}

#[test]
fn hidden_ssh_key_is_absent_not_forbidden() {
    let j = jail!("ssh");
    let out = j.run("cat ~/.ssh/id_ed25519; ls -a ~");
    assert!(out.stderr.contains("No such file or directory"), "{out}");
    assert!(!out.both().contains(SSH_CANARY), "{out}");
    assert!(!out.stdout.contains(".ssh"), "{out}");
}

#[test]
fn cloud_credentials_and_other_homes_and_munge_are_absent() {
    let j = jail!("creds");
    let out = j.run(
        "for p in ~/.aws/credentials /home/asbother/notes.txt /etc/munge /run/munge /etc/slurm /root; do \
           if [ -e \"$p\" ]; then echo \"VISIBLE $p\"; else echo \"absent $p\"; fi; done; cat /home/asbother/notes.txt",
    );
    assert!(!out.stdout.contains("VISIBLE"), "{out}");
    assert!(out.stderr.contains("No such file or directory"), "{out}");
    assert!(!out.both().contains(OTHER_CANARY) && !out.both().contains(AWS_CANARY), "{out}");
}

#[test]
fn project_is_writable_and_nothing_else_persists() {
    let j = jail!("writable");
    let out = j.run(
        "echo data > ./made-inside && echo PROJECT-OK; \
         for p in /usr/x /etc/x /x /opt/x /sys/x; do touch $p 2>/dev/null && echo \"WROTE $p\"; done; \
         echo gone > ~/scratch-in-home && echo HOME-TMP-OK",
    );
    assert!(out.stdout.contains("PROJECT-OK") && out.stdout.contains("HOME-TMP-OK"), "{out}");
    assert!(!out.stdout.contains("WROTE"), "{out}");
    assert!(j.project.join("made-inside").exists(), "project write must persist");
    assert!(!j.rig.home.join("scratch-in-home").exists(), "tmpwrite home must not persist");
}

#[test]
fn read_only_paths_fail_with_erofs() {
    let j = jail!("erofs");
    let out = j.run("touch /usr/bin/evil");
    assert!(out.stderr.contains("Read-only file system"), "{out}");
}

#[test]
fn tmp_is_private_per_session() {
    let j = jail!("tmp");
    let marker = format!("/tmp/asb-marker-{}", std::process::id());
    let out = j.run(&format!("echo x > {marker} && ls {marker}"));
    assert_eq!(out.code, 0, "{out}");
    assert!(!std::path::Path::new(&marker).exists(), "jail /tmp leaked to the host");
    let out = j.run(&format!("ls {marker}"));
    assert_ne!(out.code, 0, "second session saw the first one's /tmp: {out}");
}

/// Issue 32: with `core.hooksPath` set (husky's `.husky/_`, or a team's own directory named
/// only in the repository's config), the jail rewrote a hook and the user's next ordinary `git
/// commit` ran it. The hooks directory is read at plan time and protected wherever it is; the
/// user's own hook still runs at their commit, the jail's never does.
#[test]
fn a_hook_in_the_core_hooks_path_cannot_be_rewritten_and_the_users_commit_runs_only_their_own() {
    let hook = |marker: &str| format!("#!/bin/sh\ntouch {marker}\n");
    let j = jail!("hookspath")
        .project_file(".git/HEAD", "ref: refs/heads/main\n")
        .project_file(
            ".git/config",
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\thooksPath = tools/hooks\n",
        )
        .project_file("tools/hooks/pre-commit", &hook("user-hook-ran"))
        .project_file(".husky/_/pre-commit", &hook("user-husky-ran"))
        .project_file(".envrc", "dotenv .env.local\n")
        .project_file(".env.local", "X=1\n");
    for d in [".git/objects", ".git/refs/heads"] {
        std::fs::create_dir_all(j.project.join(d)).unwrap();
    }
    j.give(&[&j.project.join(".git/objects"), &j.project.join(".git/refs"), &j.project.join(".git/refs/heads")]);
    for h in ["tools/hooks/pre-commit", ".husky/_/pre-commit"] {
        std::fs::set_permissions(j.project.join(h), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let out = j.run(
        "printf '#!/bin/sh\\ntouch pwned-hook\\n' > tools/hooks/pre-commit || echo HOOK-RO; \
         touch tools/hooks/post-commit || echo NEWHOOK-RO; \
         mv tools t2 || echo PINNED; \
         printf '#!/bin/sh\\ntouch pwned-husky\\n' > .husky/_/pre-commit || echo HUSKY-RO; \
         echo 'PROMPT_COMMAND=touch pwned-envrc' >> .env.local || echo ENVRC-LOAD-RO; \
         echo data > .env && echo DOTENV-WRITABLE",
    );
    for want in ["HOOK-RO", "NEWHOOK-RO", "PINNED", "HUSKY-RO", "ENVRC-LOAD-RO", "DOTENV-WRITABLE"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    let mut git = j.as_user("git");
    git.args(["-c", "user.name=U", "-c", "user.email=u@example.com", "commit", "-q", "--allow-empty", "-m", "after"]);
    let commit = j.output(&mut git);
    assert_eq!(commit.code, 0, "the user's commit: {commit}");
    assert!(j.project.join("user-hook-ran").exists(), "the user's own hook ran at their commit: {commit}");
    assert!(!j.project.join("pwned-hook").exists() && !j.project.join("pwned-husky").exists(), "{commit}");
}

#[test]
fn the_projects_git_hooks_and_config_cannot_be_changed_to_run_code_even_with_git_swapped() {
    // The git guard keeps them (tests/git_guard.rs has the rest); removing is harmless.
    let j =
        jail!("githooks").project_file(".git/hooks/pre-commit", "#!/bin/sh\n").project_file(".git/config", "[core]\n");
    let out = j.run(
        "echo evil >> .git/hooks/pre-commit || echo HOOK-RO; \
         echo '[core] fsmonitor=evil' >> .git/config; \
         touch .git/hooks/post-checkout || echo NEWHOOK-RO; \
         echo ok > .git/description && echo GIT-DIR-WRITABLE; \
         mv .git .git-old && mkdir .git && echo SWAPPED; \
         printf '[core]\\n\\tfsmonitor = evil\\n' > .git/config; \
         mkdir .git/hooks && echo evil > .git/hooks/pre-commit || echo FRESH-HOOK-REFUSED",
    );
    for want in ["HOOK-RO", "NEWHOOK-RO", "GIT-DIR-WRITABLE", "SWAPPED", "FRESH-HOOK-REFUSED"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    // A config written directly goes through the guard: what runs a program is left out.
    assert!(out.stderr.contains("written without `core.fsmonitor`"), "{out}");
    assert_eq!(std::fs::read_to_string(j.project.join(".git-old/config")).unwrap(), "[core]\n");
    assert_eq!(std::fs::read_to_string(j.project.join(".git-old/hooks/pre-commit")).unwrap(), "#!/bin/sh\n");
    assert!(!std::fs::read_to_string(j.project.join(".git/config")).unwrap_or_default().contains("fsmonitor"));
    assert!(!j.project.join(".git/hooks/pre-commit").exists());
}

#[test]
fn a_missing_git_is_made_as_a_checked_repository_and_other_placeholders_are_removed() {
    let j = jail!("gitinit");
    let out = j.run(
        "mkdir -p .git/hooks && echo HOOKS-DIR; echo '#!/bin/sh' > .git/hooks/pre-commit || echo HOOK-REFUSED; \
         echo x > .envrc || echo ENVRC-RO",
    );
    for want in ["HOOKS-DIR", "HOOK-REFUSED", "ENVRC-RO"] {
        assert!(out.stdout.contains(want), "missing {want}: {out}");
    }
    assert!(!j.project.join(".git/hooks/pre-commit").exists(), "{out}");
    assert!(gone_soon(&j.project.join(".envrc")), "empty placeholder must be removed after the session");
}

/// A jail whose policy protects a name the git guard does not refuse (`keep.txt`), so that
/// the session makes a placeholder for it (with the guard on, the default list makes none),
/// and where that placeholder is.
fn with_a_placeholder(j: Jail) -> (Jail, std::path::PathBuf) {
    // Outside the project, which the jail writes: the launcher trusts no policy there.
    let name = j.project.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let policy = home_file(&j, &format!("t/{name}-keep.toml"), "[filesystem]\nprotected = [\"keep.txt\"]\n");
    let placeholder = j.project.join("keep.txt");
    (j.arg("--policy").arg(&policy.display().to_string()), placeholder)
}

#[test]
fn a_session_started_as_another_ends_plans_the_project_as_that_end_left_it() {
    // Outside look at stop 47, F2 (and a CI run): session B's view of the project is read
    // ahead while session A still runs, its placeholder there; A ends and removes it before B
    // takes the lock. B's view is out of date then (the record of A's placeholders changed):
    // it must not be used, or B's jail binds a file that is gone and refuses to start.
    let (j, placeholder) = with_a_placeholder(jail!("twoinarow"));
    let stop = j.project.join("stop-a");
    let _ = std::fs::remove_file(&stop);
    let mut a = j.command(&["-q", "run", "--", "sh", "-c", "while [ ! -e stop-a ]; do sleep 0.05; done"]);
    let mut a = a.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !placeholder.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(placeholder.exists(), "session A made no placeholder");
    let pause = std::path::PathBuf::from("/var/tmp/asb-jail-pause-twoinarow");
    let _ = std::fs::remove_dir_all(&pause);
    std::fs::create_dir_all(&pause).unwrap();
    std::fs::set_permissions(&pause, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mut b =
        j.command(&["-q", "run", "--", "sh", "-c", "test -e keep.txt && echo SHOWN; echo x > keep.txt || echo KEPT"]);
    b.env("AGENT_SANDBOX_TEST_PAUSE", format!("reading-ahead:{}", pause.display()));
    let out = std::thread::scope(|s| {
        let run = s.spawn(|| j.output(&mut b));
        while !pause.join("reading-ahead.reached").exists() && !run.is_finished() {
            assert!(std::time::Instant::now() < deadline, "session B never reached the pause");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // B's view lists the placeholder by now; A ends and takes it away.
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::write(&stop, "").unwrap();
        let _ = a.wait();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while placeholder.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::fs::write(pause.join("reading-ahead.go"), "").unwrap();
        run.join().unwrap()
    });
    assert!(pause.join("reading-ahead.reached").exists(), "a build without the test pause: {out}");
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("SHOWN") && out.stdout.contains("KEPT"), "{out}");
}

#[test]
fn a_session_after_one_killed_outright_plans_the_project_as_its_cleanup_left_it() {
    // A session killed with its waiter leaves its placeholder and the record naming it. The
    // next session removes it when it takes the project lock: its plan, whose view of the
    // project was read meanwhile (`plan::ahead`), must not take the placeholder for the
    // user's file.
    let (j, placeholder) = with_a_placeholder(jail!("killedout"));
    let project = j.project.canonicalize().unwrap();
    let fnv = project
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3));
    let sessions = j.rig.home.join(".local/state/agent-sandbox/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let record = sessions.join(format!("{fnv:016x}.lock"));
    std::fs::write(&record, format!("f\t{}\n", project.join("keep.txt").display())).unwrap();
    std::fs::write(&placeholder, b"").unwrap();
    j.give(&[&sessions, &record, &placeholder]);
    let out = j.run("test -e keep.txt && echo SHOWN; echo x > keep.txt || echo KEPT");
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("SHOWN") && out.stdout.contains("KEPT"), "{out}");
    assert!(gone_soon(&placeholder), "the placeholder stayed");
}

#[test]
fn with_a_private_runtime_directory_the_sessions_sockets_live_there_hidden_and_reachable() {
    // A login node's `/run/user/UID` (memory, this node's): the door to the chaperon and the
    // control socket are made there, not in the state directory on the home's file server.
    let j = jail!("runtimedir");
    let kinds = ["sock", "allow", "allow.token"];
    let rt = std::path::PathBuf::from(format!("/tmp/asb-runtime-{}", j.rig.uid));
    let _ = std::fs::remove_dir_all(&rt);
    std::fs::create_dir(&rt).unwrap();
    std::fs::set_permissions(&rt, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    j.give(&[&rt]);
    let j = j.env("XDG_RUNTIME_DIR", &rt.display().to_string());
    let sockets = rt.join("agent-sandbox/sessions");
    let script = format!(
        "echo $AGENT_SANDBOX_SESSION > sid; ls {} 2>&1; while [ ! -e go ]; do sleep 0.05; done",
        sockets.display()
    );
    let mut c = j.command(&["-q", "--net", "filtered", "run", "--", "sh", "-c", &script]);
    c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = c.spawn().unwrap();
    let sid_file = j.project.join("sid");
    let mut sid = String::new();
    for _ in 0..400 {
        sid = std::fs::read_to_string(&sid_file).unwrap_or_default().trim().to_owned();
        if !sid.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(!sid.is_empty(), "the session wrote its id");
    let made: Vec<std::path::PathBuf> = kinds.iter().map(|s| sockets.join(format!("{sid}.{s}"))).collect();
    let state = j.rig.home.join(".local/state/agent-sandbox/sessions");
    let there: Vec<bool> = made.iter().map(|p| p.exists()).collect();
    let in_state = ["sock", "allow"].iter().any(|s| state.join(format!("{sid}.{s}")).exists());
    // `agent-sandbox allow` finds the session there: the answer is the session's own (a floor
    // is not granted).
    let mut c = j.as_user(&j.rig.bin);
    c.args(["allow", "--session", &sid, "host", "localhost"]);
    let allow = j.output(&mut c);
    std::fs::write(j.project.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(there.iter().all(|t| *t), "{kinds:?} of the session in {}: {there:?}", sockets.display());
    assert!(!in_state, "a socket of the session in the state directory");
    assert!(allow.code == 1 && allow.stderr.contains("cannot be allowed"), "{allow}");
    assert!(stdout.contains("No such file"), "the jail sees the sockets' directory: {stdout}");
    for p in &made {
        assert!(gone_soon(p), "{} left after the session", p.display());
    }
    let _ = std::fs::remove_dir_all(&rt);
}

#[test]
fn a_session_ended_by_a_signal_to_its_process_group_is_cleaned_up_after() {
    // A hangup or `kill -- -PGID` reaches every process of the launcher's group: the cleanup
    // waiter has left it, so the placeholders still go. (The Landlock backend makes none.)
    let (j, placeholder) = with_a_placeholder(jail!("pgkill"));
    let mut c = j.command(&["-q", "run", "--", "sleep", "30"]);
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    let mut child = c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !placeholder.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(placeholder.exists(), "the session made no placeholder");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
    nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM).unwrap();
    let _ = child.wait();
    assert!(gone_soon(&placeholder), "the placeholder stayed after a SIGTERM to the launcher's group");
}

#[test]
fn a_launcher_that_is_the_first_process_of_a_pid_namespace_cleans_up_itself() {
    // A container's entry point: the launcher is PID 1, and its exit kills every process of
    // its PID namespace, the cleanup waiter too. The launcher then cleans up itself.
    let (j, placeholder) = with_a_placeholder(jail!("pidns1"));
    assert!(nix::unistd::getuid().is_root(), "the test harness runs as root (it drops to the test user)");
    let home = j.rig.home.display().to_string();
    let mut c = std::process::Command::new("unshare");
    c.args(["-pf", "--mount-proc", "setpriv"])
        .arg(format!("--reuid={}", j.rig.uid))
        .arg(format!("--regid={}", j.rig.gid))
        .args(["--clear-groups", "env", "-i", &format!("HOME={home}"), "PATH=/usr/bin:/bin"])
        .arg(&j.rig.bin)
        .args(j.launcher_args(&["-q", "run", "--", "sh", "-c", "test -e keep.txt && echo PLACEHOLDER"]))
        .current_dir(&j.project);
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("PLACEHOLDER"),
        "the session made no placeholder: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(gone_soon(&placeholder), "the placeholder stayed after a launcher that was PID 1");
}

#[test]
fn proc_shows_only_jail_processes() {
    let j = jail!("proc");
    let host_pid = std::process::id();
    let out = j.run(&format!(
        "ls /proc | grep -c '^[0-9]*$'; test -e /proc/{host_pid} && echo HOST-PID-VISIBLE; echo parent=$PPID"
    ));
    assert!(!out.stdout.contains("HOST-PID-VISIBLE"), "{out}");
    let count: u32 = out.stdout.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or(999);
    assert!(count <= 6, "too many pids visible: {out}");
    assert!(out.stdout.contains("parent=1\n"), "the command's parent is the jail's init, pid 1: {out}");
}

#[test]
fn tokens_in_the_launchers_environment_are_absent_and_pid1_environ_is_clean() {
    let j = jail!("env")
        .env("GH_TOKEN", ENV_CANARY)
        .env("AWS_SECRET_ACCESS_KEY", ENV_CANARY)
        .env("MY_DB_PASSWORD", ENV_CANARY)
        .env("HARMLESS", "kept");
    let out = j.run("env; cat /proc/1/environ 2>&1; tr '\\0' '\\n' < /proc/self/environ");
    assert!(!out.both().contains(ENV_CANARY), "{out}");
    assert!(out.stdout.contains("HARMLESS=kept"), "{out}");
    assert!(out.stdout.contains("AGENT_SANDBOX=1"), "{out}");
}

/// Issue 32: the scrub goes by what a name means (its words: KEY, TOKEN, SECRET, PASS, AUTH,
/// SESSION...) and by what a value is (a provider key's form), not by the few prefixes and
/// underscores the old patterns needed; names that mean nothing secret stay.
#[test]
fn secrets_are_scrubbed_by_what_their_names_mean_and_harmless_names_stay() {
    let j = with_env_canaries(jail!("env-meaning"));
    let out = j.run("env");
    assert_eq!(out.code, 0, "{out}");
    assert_scrubbed_by_meaning(&out, &[]);
    // Passed deliberately: `--env NAME` keeps a name the words would scrub, and a value of
    // a key's form.
    let j = with_env_canaries(jail!("env-meaning-kept")).arg("--env").arg("API_KEY").arg("--env").arg("NOTES");
    let out = j.run("env");
    assert_scrubbed_by_meaning(&out, &["API_KEY", "NOTES"]);
}

/// Issue 32: no process of the jail that it can read (cmdline, environ, memory) holds a
/// scrubbed secret.
#[test]
fn no_process_readable_inside_holds_a_scrubbed_secret() {
    let j = jail!("env-procs");
    let out = scan_processes_for_a_scrubbed_canary(j);
    // The shell at least: a scan that reads nothing proves nothing.
    assert!(out.stdout.contains(" environ\n"), "{out}");
}

#[test]
fn env_flag_passes_a_named_variable_through() {
    let j = jail!("envkeep")
        .env("OPENAI_API_KEY", "sk-test")
        .arg("--env")
        .arg("OPENAI_API_KEY")
        .arg("--env")
        .arg("FOO=bar");
    let out = j.run("echo key=$OPENAI_API_KEY foo=$FOO");
    assert!(out.stdout.contains("key=sk-test foo=bar"), "{out}");
}

#[test]
fn host_processes_cannot_be_signalled_or_traced() {
    let j = jail!("kill");
    let sleeper = j.host_sleeper();
    let pid = sleeper.pid();
    let out = j.run(&format!("{p} kill {pid}; {p} ptrace {pid}; {p} ptrace 1", p = j.probe()));
    drop(sleeper);
    assert!(out.stdout.contains(&"probe kill errno=3".to_string()), "{out}");
    assert!(out.stdout.contains("probe ptrace errno=3"), "host pid must not exist: {out}");
    assert!(!out.stdout.contains("probe ptrace ok"), "{out}");
}

#[test]
fn dangerous_syscalls_fail_with_eperm() {
    let j = jail!("syscalls");
    let ops = [
        "io_uring_setup",
        "keyctl",
        "add_key",
        "bpf",
        "mount",
        "unshare_user",
        "perf_event_open",
        "userfaultfd",
        "open_by_handle_at",
        "chroot",
        "setns",
    ];
    let script: Vec<String> = ops.iter().map(|op| format!("{} {op}", j.probe())).collect();
    let out = j.run(&script.join("; "));
    for op in ops {
        assert!(out.stdout.contains(&format!("probe {op} errno=1 ")), "{op} not refused with EPERM: {out}");
    }
}

#[test]
fn a_thread_a_preloaded_library_starts_stops_the_launch_with_its_name() {
    // PID 1 is cloned from the launcher, which must then run one thread (a lock held by
    // another would stay held in the clone): a profiler's or a site tracker's thread, started
    // from LD_PRELOAD, stops the launch, in one line that names the library, and the command
    // never runs.
    let j = jail!("preload-thread");
    let lib = j.thread_preload().display().to_string();
    let j = j.env("LD_PRELOAD", &lib);
    let out = j.run("touch ./ran");
    assert_ne!(out.code, 0, "{out}");
    assert!(out.stderr.contains(&format!("LD_PRELOAD={lib}")), "the library is not named: {out}");
    assert!(out.stderr.contains("run agent-sandbox without it"), "{out}");
    assert!(!j.project.join("ran").exists(), "the command ran");
}

#[test]
fn i386_syscalls_through_int80_are_refused_and_never_executed() {
    let j = jail!("int80");
    let out = j.run(&format!("{i} getpid; {i} mkdir ./made-by-int80; {i} x32 mkdir ./made-by-x32", i = j.int80()));
    assert!(out.stdout.contains("ret=-1 errno=1"), "{out}");
    assert!(!j.project.join("made-by-int80").exists(), "the kernel executed the i386 mkdir: {out}");
    assert!(!j.project.join("made-by-x32").exists(), "the kernel executed the x32 mkdir: {out}");
}

#[test]
fn tiocsti_cannot_push_input_into_the_terminal() {
    let j = jail!("tiocsti");
    // Under `script` the jail gets its own pty as controlling terminal: the only place the
    // ioctl could reach, and seccomp refuses it there too.
    let launcher = format!("{} --ro {} -q run -- {} tiocsti", j.rig.bin.display(), j.rig.helpers.display(), j.probe());
    let mut cmd = j.as_user("script");
    cmd.args(["-qec", &launcher, "/dev/null"]);
    let out = j.output(&mut cmd);
    assert!(out.stdout.contains("probe tiocsti errno=1"), "{out}");
}

#[test]
fn exit_codes_and_signals_propagate() {
    let j = jail!("exit");
    assert_eq!(j.run("exit 7").code, 7);
    assert_eq!(j.run("kill -TERM $$").code, 143);
    let out = j.output(&mut j.command(&["-q", "run", "--", "no-such-command-xyz"]));
    assert_eq!(out.code, 127, "{out}");
    assert!(out.stderr.contains("command not found"), "{out}");
}

/// The command's process is cloned sharing PID 1's memory until its exec (`jail::command`),
/// and must still start as a forked one did: no signal blocked, the ones a shell or the
/// launcher may have ignored back at their defaults, a session of its own, its directory, and
/// its name found on the PATH, a relative entry counted from that directory.
#[test]
fn the_command_starts_unblocked_in_its_own_session_found_from_its_directory() {
    let j = jail!("cmd-start").project_file("tools/where-am-i", "#!/bin/sh\necho HERE=$(pwd)\n");
    assert_eq!(j.run("chmod +x tools/where-am-i").code, 0);
    let out = j.run(
        // Read by the shell itself: a `grep` it forks could read the shell's mask while dash
        // has every signal blocked around that fork (its sigblockall), a race of the test.
        "read -r _ _ _ _ _ sid _ < /proc/$$/stat; echo \"pid=$$ sid=$sid\"; \
         while read -r k v; do case $k in SigBlk:|SigIgn:) echo \"$k $v\";; esac; done < /proc/$$/status",
    );
    assert_eq!(out.code, 0, "{out}");
    let field = |name: &str| -> u64 {
        let line = out.stdout.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name}: {out}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap_or(""), 16).unwrap_or_else(|_| panic!("{out}"))
    };
    assert_eq!(field("SigBlk:"), 0, "the command starts with signals blocked: {out}");
    let reset = [libc::SIGPIPE, libc::SIGINT, libc::SIGQUIT, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];
    let mask: u64 = reset.iter().map(|s| 1u64 << (s - 1)).sum();
    assert_eq!(field("SigIgn:") & mask, 0, "a reset signal is still ignored: {out}");
    let ids = out.stdout.lines().find(|l| l.starts_with("pid=")).unwrap_or_else(|| panic!("{out}"));
    let (pid, sid) = ids.split_once(' ').unwrap_or_else(|| panic!("{out}"));
    assert_eq!(pid.trim_start_matches("pid="), sid.trim_start_matches("sid="), "not a session leader: {out}");

    // Checked by the command's own process: /proc/self is the command, its cwd the project.
    assert_eq!(j.run("ln -s /proc/self/cwd/tools/where-am-i tools/via-cwd").code, 0);
    for name in ["where-am-i", "via-cwd"] {
        let found = j.output(&mut j.command(&["-q", "--env", "PATH=tools:/usr/bin:/bin", "run", "--", name]));
        assert_eq!(found.code, 0, "{name}: {found}");
        assert!(found.stdout.contains(&format!("HERE={}", j.project.display())), "{name}: {found}");
    }
}

/// The stub bound over each real Slurm command carries the stub's own mount attributes
/// (it is bound from the stub's read-only mount, with no call of its own to set them): it can
/// be neither written nor made setuid through.
#[test]
fn the_stubs_over_the_real_slurm_commands_are_read_only_nosuid_nodev() {
    let j = jail!("stub-attrs");
    let real: Vec<&str> = ["sbatch", "squeue", "scancel"]
        .into_iter()
        .filter(|c| std::path::Path::new("/usr/bin").join(c).is_file())
        .collect();
    assert!(!real.is_empty(), "the test setup installs Slurm: no /usr/bin/sbatch on this host");
    let out = j.run("cat /proc/self/mountinfo; echo x > /usr/bin/sbatch");
    assert_ne!(out.code, 0, "{out}");
    assert!(out.stderr.contains("Read-only file system"), "{out}");
    for c in real {
        let point = format!("/usr/bin/{c}");
        let line = out.stdout.lines().find(|l| l.split(' ').nth(4) == Some(point.as_str()));
        let line = line.unwrap_or_else(|| panic!("nothing mounted over {point}: {out}"));
        let opts: Vec<&str> = line.split(' ').nth(5).unwrap_or("").split(',').collect();
        for want in ["ro", "nosuid", "nodev"] {
            assert!(opts.contains(&want), "{point} is not {want}: {line}");
        }
        assert!(line.split(' ').nth(3).is_some_and(|root| root.contains("agent-sandbox")), "not the stub: {line}");
    }
}

/// A caller that ignores SIGCHLD (the disposition survives exec) still gets the command's
/// status back: the launcher learns of the jail's end through SIGCHLD, which the kernel
/// would otherwise discard.
#[test]
fn a_launcher_whose_caller_ignores_sigchld_returns_the_commands_status() {
    use std::os::unix::process::CommandExt;
    let j = jail!("ignored-sigchld");
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", "exit 7"]);
    // SAFETY: signal(2) between fork and exec, no allocation.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            Ok(())
        })
    };
    let out = j.output_within(&mut c, std::time::Duration::from_secs(20));
    assert_eq!(out.code, 7, "{out}");
}

/// A launcher started with its standard input and output closed opens `/dev/null` in their
/// place before anything else: otherwise the first file it opened (a socket to its helper,
/// the audit log) would take descriptor 0 or 1 and be handed to the command as such.
#[test]
fn a_launcher_started_with_its_standard_descriptors_closed_gives_the_command_dev_null() {
    use std::os::unix::process::CommandExt;
    let j = jail!("closed-stdio");
    // Read in a subshell: sh runs its last command in its own process, redirections and all.
    let script = "a=$(readlink /proc/$$/fd/0); b=$(readlink /proc/$$/fd/1); echo \"$a\" >&2; echo \"$b\" >&2";
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", script]);
    // SAFETY: close(2) of two descriptors between fork and exec, no allocation.
    unsafe {
        c.pre_exec(|| {
            libc::close(0);
            libc::close(1);
            Ok(())
        })
    };
    let out = j.output(&mut c);
    assert_eq!(out.code, 0, "{out}");
    let fds: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(fds, ["/dev/null", "/dev/null"], "{out}");
}

/// Sends `sig` to the launcher once the command is ready; the command's trap must see it.
fn signal_reaches_command(j: &Jail, sig: nix::sys::signal::Signal, trap: &str) {
    signal_reaches_command_despite(j, sig, trap, "");
}

/// The same, with `noise` running in the jail meanwhile (in the background).
fn signal_reaches_command_despite(j: &Jail, sig: nix::sys::signal::Signal, trap: &str, noise: &str) {
    let script = format!("trap 'echo got-{trap}; exit 3' {trap}; {noise} echo ready; sleep 30 & wait $!");
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", &script]);
    c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).stdin(std::process::Stdio::null());
    // A signal ignored by whoever runs the tests (`nohup` ignores SIGHUP) stays ignored across
    // exec, and the kernel discards an ignored signal, blocked or not: the launcher would never
    // see it, as `nohup agent-sandbox ...` means. The launcher under test starts with the default.
    // SAFETY: signal(2) between fork and exec, no allocation.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut c, move || {
            libc::signal(sig as i32, libc::SIG_DFL);
            Ok(())
        })
    };
    let mut child = c.spawn().expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 6];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("ready line");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).expect("kill");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("read");
    let st = child.wait().expect("wait");
    assert!(rest.contains(&format!("got-{trap}")), "{trap}: {rest}");
    assert_eq!(st.code(), Some(3), "{trap}");
}

#[test]
fn signals_to_the_launcher_reach_the_command() {
    use nix::sys::signal::Signal::*;
    let j = jail!("signals");
    for (sig, trap) in [(SIGTERM, "TERM"), (SIGHUP, "HUP"), (SIGINT, "INT"), (SIGUSR1, "USR1"), (SIGQUIT, "QUIT")] {
        signal_reaches_command(&j, sig, trap);
    }
}

#[test]
fn the_jail_cannot_suppress_or_forge_the_launchers_signals() {
    // The jail's processes can signal its PID 1: a stream of SIGTERM to PID 1 must neither be
    // taken for a signal from outside (which would swallow the user's own SIGTERM) nor be
    // passed on to the command.
    use nix::sys::signal::Signal::*;
    let j = jail!("signals-noise");
    let noise = "(while :; do kill -TERM 1 2>/dev/null; kill -USR1 1 2>/dev/null; sleep 0.05; done) &";
    signal_reaches_command_despite(&j, SIGTERM, "TERM", noise);
    let out = j.run("trap 'echo FORWARDED' USR1; kill -USR1 1; sleep 0.3; echo done");
    assert!(out.stdout.contains("done") && !out.stdout.contains("FORWARDED"), "{out}");
}

#[test]
fn sigtstp_and_sigcont_stop_and_resume_the_command() {
    use std::io::BufRead;
    let j = jail!("tstp");
    let script = "i=0; while [ $i -lt 200 ]; do echo tick $i; i=$((i+1)); sleep 0.05; done";
    let mut c = j.command(&["-q", "run", "--", "sh", "-c", script]);
    c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).stdin(std::process::Stdio::null());
    let mut child = c.spawn().expect("spawn");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send((std::time::Instant::now(), line));
        }
    });
    let wait = std::time::Duration::from_secs(5);
    rx.recv_timeout(wait).expect("first tick");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTSTP).expect("tstp");
    let stopped_at = std::time::Instant::now();
    // Drain what was in flight, then nothing may arrive while stopped.
    std::thread::sleep(std::time::Duration::from_millis(200));
    while rx.try_recv().is_ok() {}
    let during = rx.recv_timeout(std::time::Duration::from_millis(500));
    assert!(during.is_err(), "ticks went on after SIGTSTP: {during:?}");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("cont");
    let (when, _) = rx.recv_timeout(wait).expect("ticks resume after SIGCONT");
    assert!(when.duration_since(stopped_at) >= std::time::Duration::from_millis(600));
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let _ = child.wait();
}

#[test]
fn pid1_reaps_orphans() {
    let j = jail!("reap");
    let out =
        j.run("for i in 1 2 3 4 5; do (sleep 0.1 &) ; done; sleep 0.5; ps -eo stat 2>/dev/null | grep -c Z || true");
    assert!(out.stdout.trim_end().ends_with('0'), "zombies left: {out}");
}

#[test]
fn interactive_shell_works_under_a_pty() {
    let j = jail!("pty");
    let launcher = format!("{} -q run -- bash --norc -i", j.rig.bin.display());
    let mut cmd = j.as_user("script");
    cmd.args(["-qec", &launcher, "/dev/null"]).env("TERM", "xterm");
    let j = j.stdin("tty; echo inside-$((40+2)); exit 5\n");
    let out = j.output(&mut cmd);
    assert!(out.stdout.contains("inside-42"), "{out}");
    assert!(out.stdout.contains("/dev/pts/"), "{out}");
    assert_eq!(out.code, 5, "{out}");
}

#[test]
fn pipes_work_both_ways() {
    let j = jail!("pipes").stdin("line one\nline two\n");
    let out = j.output(&mut j.command(&["-q", "run", "--", "sh", "-c", "wc -l"]));
    assert_eq!(out.stdout.trim(), "2", "{out}");
}

#[test]
fn passwd_is_synthesized_and_identity_works() {
    let j = jail!("passwd");
    let out =
        j.run("id -un; whoami; hostname; grep -c . /etc/passwd; grep asbother /etc/passwd || echo NO-OTHER; ls -ld .");
    assert!(out.stdout.starts_with("asbtest\nasbtest\nagent-sandbox\n"), "{out}");
    assert!(out.stdout.contains("NO-OTHER"), "{out}");
    assert!(out.stdout.contains("asbtest asbtest"), "{out}");
}

#[test]
fn dev_is_minimal() {
    let j = jail!("dev");
    let out = j.run("ls /dev | tr '\\n' ' '; echo; echo x > /dev/null && echo NULL-OK; head -c4 /dev/urandom | wc -c");
    for must in ["null", "zero", "urandom", "tty", "pts", "ptmx", "shm"] {
        assert!(out.stdout.contains(must), "{must} missing: {out}");
    }
    for must_not in ["sda", "vda", "mem ", "kmsg", "net"] {
        assert!(!out.stdout.contains(must_not), "{must_not} visible: {out}");
    }
    assert!(out.stdout.contains("NULL-OK"), "{out}");
}

#[test]
fn bypass_routes_to_hidden_files_are_blocked() {
    let j = jail!("bypass");
    let key = j.rig.home.join(".ssh/id_ed25519");
    let key = key.display();
    // A symlink planted on the host before the session, pointing at the key.
    std::os::unix::fs::symlink(j.rig.home.join(".ssh/id_ed25519"), j.project.join("planted")).unwrap();
    let out = j.run(&format!(
        "cat /proc/self/root{key}; cat /proc/1/root{key}; /lib64/ld-linux-x86-64.so.2 /bin/cat {key}; \
         ln -s {key} ./l && cat ./l; ln {key} ./h; cat ./planted; {p} open_by_handle_at",
        p = j.probe()
    ));
    assert!(!out.both().contains(SSH_CANARY), "{out}");
    assert!(out.stdout.contains("probe open_by_handle_at errno=1"), "{out}");
}

#[test]
fn hidden_file_inside_the_project_shows_empty() {
    let j = jail!("hideinproj").project_file("secrets.env", "TOKEN=CANARY-IN-PROJECT");
    let hide = j.project.join("secrets.env").display().to_string();
    let j = j.arg("--hide").arg(&hide);
    let out = j.run("cat secrets.env; echo; echo x > secrets.env || echo MASK-RO");
    assert!(!out.stdout.contains("CANARY-IN-PROJECT"), "{out}");
    assert!(out.stdout.contains("MASK-RO"), "{out}");
}

/// Outside look at stop 49, B2: a hidden path at or below a protected path (`.envrc`,
/// `.vscode/`), which is bound read-only after the masks, was shown by that bind.
#[test]
fn a_hidden_file_in_or_at_a_protected_path_shows_empty() {
    let j = jail!("hideinprotected")
        .project_file(".envrc", "export API_KEY=CANARY-ENVRC")
        .project_file(".vscode/secret.json", "CANARY-VSCODE");
    let (envrc, vscode) = (j.project.join(".envrc"), j.project.join(".vscode/secret.json"));
    let j = j.arg("--hide").arg(envrc.to_str().unwrap()).arg("--hide").arg(vscode.to_str().unwrap());
    let out = j.run("cat .envrc .vscode/secret.json; echo; ls .vscode; echo x > .envrc || echo RO");
    assert!(!out.stdout.contains("CANARY"), "{out}");
    assert!(out.stdout.contains("secret.json") && out.stdout.contains("RO"), "{out}");
}

/// Second outside look at stop 49: a cover made by `filesystem.hide_files` (2a) and one of a
/// hidden file in a directory bound read-only later (2b: `~/.config/opencode` under `--rw
/// ~/.config`) were shown by the later bind; a hidden directory holding a protected path (3:
/// `.github/` with `copilot-instructions.md`) stopped every launch. Each is covered now, and
/// the session starts.
#[test]
fn covers_made_by_any_rule_hold_over_later_binds_and_a_hidden_directory_over_a_protected_path() {
    let j = jail!("hidelater")
        .project_file(".envrc", "export K=CANARY-HIDE-FILES")
        .project_file(".github/copilot-instructions.md", "CANARY-GITHUB");
    let policy = j.project.with_extension("policy.toml");
    std::fs::write(&policy, format!("[filesystem]\nhide_files = [\"{}\"]\n", j.project.join(".envrc").display()))
        .unwrap();
    let opencode = j.rig.home.join(".config/opencode");
    std::fs::create_dir_all(&opencode).unwrap();
    let secret = opencode.join(format!("asb-hidden-{}.json", std::process::id()));
    std::fs::write(&secret, "CANARY-OPENCODE").unwrap();
    j.give(&[&opencode, &secret]);
    let config = j.rig.home.join(".config");
    let github = j.project.join(".github");
    let (policy_s, config_s, secret_s, github_s) = (
        policy.display().to_string(),
        config.display().to_string(),
        secret.display().to_string(),
        github.display().to_string(),
    );
    let args = ["--policy", &policy_s, "--rw", &config_s, "--hide", &secret_s, "--hide", &github_s];
    let out = j.run_with(&args, &format!("cat .envrc {secret_s}; ls -A .github; echo RAN"));
    let _ = std::fs::remove_file(&secret);
    let _ = std::fs::remove_file(&policy);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("RAN") && !out.stdout.contains("CANARY"), "{out}");
    assert!(!out.stdout.contains("copilot-instructions"), "{out}");
}

#[test]
fn sibling_sessions_cannot_see_each_other() {
    let a = jail!("sib-a");
    let b = jail!("sib-b").project_file("b-secret", "B");
    let out = a.run(&format!("ls {} 2>&1; cat {}/b-secret 2>&1", b.project.display(), b.project.display()));
    assert!(out.stdout.contains("No such file or directory"), "{out}");
}

#[test]
fn cwd_inside_the_project_is_kept() {
    let j = jail!("cwd").project_file("sub/dir/f", "x");
    let sub = j.project.join("sub/dir");
    let j = j.cwd(&sub);
    let out = j.run("pwd; ls");
    assert!(out.stdout.starts_with(&format!("{}\nf", sub.display())), "{out}");
}

#[test]
fn malformed_config_stops_the_launch_with_file_and_line() {
    let j = jail!("badcfg");
    let cfg = j.rig.home.join("t/badcfg-policy.toml");
    std::fs::write(&cfg, "[net]\nmode = \"isolated\"\nmdoe = 1\n").unwrap();
    j.give(&[&cfg]);
    let j = j.arg("--policy").arg(&cfg.display().to_string());
    let out = j.run("touch ./ran");
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("badcfg-policy.toml:3:") && out.stderr.contains("net.mdoe"), "{out}");
    assert!(!j.project.join("ran").exists(), "the command ran despite a bad policy");
}

#[test]
fn policy_file_inside_the_project_is_refused() {
    let j = jail!("cfginproj").project_file("policy.toml", "[net]\nmode = \"open\"\n");
    let p = j.project.join("policy.toml").display().to_string();
    let j = j.arg("--policy").arg(&p);
    let out = j.run("touch ./ran");
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("inside the project"), "{out}");
    assert!(!j.project.join("ran").exists());
}

#[test]
fn bad_project_directories_are_refused() {
    let j = jail!("badproj");
    for (proj, why) in [
        ("/", "cannot be a project"),
        (j.rig.home.to_str().unwrap(), "home directory"),
        ("/nonexistent-dir", "does not exist"),
    ] {
        let out = j.output(&mut j.command(&["-q", "--project", proj, "run", "--", "true"]));
        assert_eq!(out.code, 126, "{proj}: {out}");
        assert!(out.stderr.contains(why) && out.stderr.contains("fix:"), "{proj}: {out}");
    }
}

#[test]
fn huge_argument_is_passed_or_refused_cleanly() {
    let j = jail!("hugearg");
    let big = "a".repeat(100_000);
    let out = j.output(&mut j.command(&["-q", "run", "--", "sh", "-c", "echo ${#0}", &big]));
    assert_eq!(out.stdout.trim(), "100000", "{out}");
}

#[test]
fn dry_run_prints_the_plan_and_runs_nothing() {
    let j = jail!("dryrun");
    let out = j.output(&mut j.command(&["--dry-run", "run", "--", "touch", "./ran"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("dry run") && out.stdout.contains("mounts, in order"), "{out}");
    assert!(!j.project.join("ran").exists());
}

#[test]
fn policy_show_names_the_layer_of_each_value() {
    let j = jail!("show");
    let out = j.output(&mut j.command(&["--net", "isolated", "policy", "show"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("net.mode") && out.stdout.contains("command line"), "{out}");
    assert!(out.stdout.contains("~/.ssh") && out.stdout.contains("built-in"), "{out}");
}

#[test]
fn doctor_reports_this_host() {
    let j = jail!("doctor");
    let out = j.output(&mut j.command(&["doctor"]));
    assert!(out.stdout.contains("user namespaces") && out.stdout.contains("landlock"), "{out}");
    assert!(out.stdout.contains("/dev/net/tun"), "{out}");
}

#[test]
fn startup_line_is_printed_unless_quiet() {
    let j = jail!("banner");
    let out = j.output(&mut j.command(&["run", "--", "true"]));
    assert!(out.stderr.contains("agent-sandbox: ~/t/banner") && out.stderr.contains("backend userns"), "{out}");
    let out = j.output(&mut j.command(&["-q", "--net", "isolated", "run", "--", "true"]));
    assert_eq!(out.stderr, "", "{out}");
}

#[test]
fn isolated_network_has_loopback_only() {
    let j = jail!("netiso").arg("--net").arg("isolated");
    let out = j.run("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '");
    assert_eq!(out.stdout.trim(), "lo", "{out}");
}

#[test]
fn profile_runs_its_agent_command() {
    let j = jail!("profile");
    let out = j.output(&mut j.command(&["-q", "--net", "isolated", "codex", "--version"]));
    assert_eq!(out.code, 127, "codex is not installed here, so the jail must say command not found: {out}");
    assert!(out.stderr.contains("codex: command not found"), "{out}");
    let out = j.output(&mut j.command(&["-q", "no-such-profile"]));
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("no profile named"), "{out}");
}

#[test]
fn capabilities_are_dropped_and_no_new_privs_and_seccomp_are_set() {
    let j = jail!("caps");
    let out = j.run("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status");
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(out.stdout.contains(&format!("{cap}:\t0000000000000000")), "{cap}: {out}");
    }
    assert!(out.stdout.contains("NoNewPrivs:\t1") && out.stdout.contains("Seccomp:\t2"), "{out}");
}

#[test]
fn read_only_path_under_tmp_is_visible_over_the_private_tmp() {
    let j = jail!("rotmp");
    let dir = format!("/tmp/asb-ro-{}", std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(format!("{dir}/data"), "shared-data").unwrap();
    let j = j.arg("--ro").arg(&dir);
    let out = j.run(&format!("cat {dir}/data; touch {dir}/x || echo RO"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.stdout.contains("shared-data") && out.stdout.contains("RO"), "{out}");
}

#[test]
fn home_write_mode_keeps_hidden_paths_absent_and_own_config_read_only() {
    let j = jail!("homewrite");
    let cfg = j.rig.home.join(".config/agent-sandbox");
    std::fs::create_dir_all(&cfg).unwrap();
    j.give(&[&j.rig.home.join(".config"), &cfg]);
    let j = j.arg("--home-access").arg("write");
    let out = j.run("ls ~/.ssh 2>&1; touch ~/.config/agent-sandbox/config.toml 2>&1 || echo CONFIG-RO; touch ~/.bashrc-probe && echo HOME-RW");
    assert!(out.stdout.contains("No such file or directory"), "{out}");
    assert!(out.stdout.contains("CONFIG-RO") && out.stdout.contains("HOME-RW"), "{out}");
    assert!(!cfg.join("config.toml").exists(), "the jail wrote its own next policy");
}

#[test]
fn writable_home_entry_still_hides_what_is_inside_it() {
    let j = jail!("homeentry");
    let gh = j.rig.home.join(".config/gh");
    std::fs::create_dir_all(&gh).unwrap();
    std::fs::write(gh.join("hosts.yml"), "oauth_token: CANARY-GH-TOKEN").unwrap();
    j.give(&[&j.rig.home.join(".config"), &gh, &gh.join("hosts.yml")]);
    let j = j.arg("--rw").arg("~/.config");
    let out = j.run("cat ~/.config/gh/hosts.yml; ls -a ~/.config/gh; touch ~/.config/gh/new || echo GH-RO");
    assert!(!out.stdout.contains("CANARY-GH-TOKEN"), "{out}");
    assert!(out.stdout.contains("GH-RO"), "{out}");
}

#[test]
fn full_screen_programs_work_under_tmux() {
    let j = jail!("tmux");
    if std::process::Command::new("tmux").arg("-V").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "tmux is missing in CI");
        eprintln!("SKIPPED: tmux not installed");
        return;
    }
    let sock = format!("asb-test-{}", std::process::id());
    let launcher = format!("{} -q run -- bash --norc", j.rig.bin.display());
    let tmux = |args: &[&str]| {
        let mut c = j.as_user("tmux");
        c.arg("-L").arg(&sock).args(args).env("TERM", "xterm");
        c.output().expect("tmux")
    };
    tmux(&["new-session", "-d", "-x", "100", "-y", "30", &launcher]);
    std::thread::sleep(std::time::Duration::from_millis(400));
    tmux(&["send-keys", "echo inside-$((6*7)); tput cols", "Enter"]);
    let mut screen = String::new();
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        screen = String::from_utf8_lossy(&tmux(&["capture-pane", "-p"]).stdout).into_owned();
        if screen.contains("inside-42") {
            break;
        }
    }
    // Ctrl-C reaches the command in the jail's terminal, not the launcher.
    tmux(&["send-keys", "sleep 100", "Enter"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    tmux(&["send-keys", "C-c", ""]);
    tmux(&["send-keys", "echo after-$((1+1))", "Enter"]);
    let mut after = String::new();
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        after = String::from_utf8_lossy(&tmux(&["capture-pane", "-p"]).stdout).into_owned();
        if after.contains("after-2") {
            break;
        }
    }
    assert!(after.contains("after-2"), "Ctrl-C did not interrupt sleep inside the jail: {after}");
    tmux(&["send-keys", "exit", "Enter"]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    tmux(&["kill-server"]);
    assert!(screen.contains("inside-42"), "{screen}");
    assert!(screen.lines().any(|l| l.trim() == "100"), "window size must reach the jail's terminal: {screen}");
}

#[test]
fn concurrent_sessions_in_one_project_all_start_and_leave_no_placeholders() {
    let j = jail!("concurrent");
    let mut kids: Vec<_> = (0..12)
        .map(|i| {
            let mut c =
                j.command(&["-q", "--net", "isolated", "run", "--", "sh", "-c", &format!("echo {i} > ./out-{i}")]);
            c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            c.spawn().expect("spawn")
        })
        .collect();
    for k in kids.iter_mut() {
        let st = k.wait().expect("wait");
        assert!(st.success(), "a concurrent session failed");
    }
    for i in 0..12 {
        assert!(j.project.join(format!("out-{i}")).exists());
    }
    for ph in [".git", ".envrc", ".vscode", ".idea", ".mcp.json"] {
        // `.git` too: with the git guard on none is made; the test holds either way.
        assert!(gone_soon(&j.project.join(ph)), "{ph} placeholder left behind");
    }
}

#[test]
fn policy_show_works_from_home_where_no_project_can_be() {
    let j = jail!("showhome").cwd(&rig().expect("rig").home.clone());
    let out = j.output(&mut j.command(&["policy", "show"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("home.access"), "{out}");
}

#[test]
fn read_only_home_still_lets_the_agent_write_its_listed_entries() {
    let j = jail!("homeread");
    // A tool's directory (not an agent's: those are confined whatever the grant, a session
    // layer but for their state entries, tests/agent_homes.rs).
    let tool = j.rig.home.join(".asb-listed-tool");
    std::fs::create_dir_all(&tool).unwrap();
    j.give(&[&tool]);
    let j = j.arg("--home-access").arg("read").arg("--rw").arg("~/.asb-listed-tool");
    let out = j.run(
        "touch ~/.asb-listed-tool/session && echo LISTED-RW; touch ~/.bashrc 2>/dev/null || echo HOME-RO; \
         cat ~/.ssh/id_ed25519",
    );
    assert!(out.stdout.contains("LISTED-RW") && out.stdout.contains("HOME-RO"), "{out}");
    assert!(!out.both().contains(SSH_CANARY), "{out}");
    assert!(tool.join("session").exists(), "a listed entry's writes persist");
}

#[test]
fn bare_invocation_runs_the_users_shell() {
    let j = jail!("bare").stdin("echo bare-$((20+22)); echo $0\n");
    let out = j.output(&mut j.command(&["-q", "--net", "isolated"]));
    assert_eq!(out.code, 0, "{out}");
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let shell = passwd.lines().find(|l| l.starts_with("asbtest:")).and_then(|l| l.rsplit(':').next()).unwrap();
    assert!(out.stdout.contains("bare-42") && out.stdout.contains(shell), "the user's shell {shell}: {out}");
}

#[test]
fn seeded_gitconfig_is_a_writable_session_copy() {
    let j = jail!("seed");
    let host_before = std::fs::read_to_string(j.rig.home.join(".gitconfig")).unwrap();
    let out =
        j.run("cat ~/.gitconfig; git config --global user.email agent@example.org && git config --global user.email");
    assert!(out.stdout.contains("name = Test") && out.stdout.contains("agent@example.org"), "{out}");
    assert_eq!(std::fs::read_to_string(j.rig.home.join(".gitconfig")).unwrap(), host_before, "host file changed");
}

#[test]
fn huge_or_special_policy_files_are_refused_without_reading_them_whole() {
    let j = jail!("hugepolicy");
    let big = j.rig.home.join("t/huge-policy.toml");
    std::fs::write(&big, "# x\n".repeat(600_000)).unwrap();
    j.give(&[&big]);
    let out = j.output(&mut j.command(&["-q", "--policy", big.to_str().unwrap(), "run", "--", "true"]));
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("at most 1024 KiB"), "{out}");
    let out = j.output(&mut j.command(&["-q", "--policy", "/dev/zero", "run", "--", "true"]));
    assert_eq!(out.code, 126, "{out}");
    assert!(out.elapsed < std::time::Duration::from_secs(5), "took {:?}", out.elapsed);
}

#[test]
fn sessions_and_refusals_are_in_the_audit_log_which_the_jail_cannot_see() {
    let j = jail!("audit");
    let out = j.run("echo $AGENT_SANDBOX_SESSION; ls ~/.local/state/agent-sandbox 2>&1; exit 3");
    assert_eq!(out.code, 3, "{out}");
    let session = out.stdout.lines().next().unwrap_or_default().trim().to_string();
    assert!(session.len() >= 8, "session id inside the jail: {out}");
    assert!(out.stdout.contains("No such file or directory"), "the audit log must be hidden: {out}");
    let log = j.output(&mut j.command(&["log", "--session", &session, "--json"]));
    let records: Vec<serde_json::Value> =
        log.stdout.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(records.len(), 2, "{log}");
    assert_eq!(records[0]["event"], "session_start");
    assert_eq!(records[0]["program"], "sh");
    assert_eq!(records[0]["backend"], "userns");
    assert_eq!(records[1]["event"], "session_end");
    assert_eq!(records[1]["exit"], 3);
    assert!(!log.stdout.contains("exit 3"), "arguments are never logged: {log}");

    // Other tests write the same user's log at the same time: look for this refusal by its
    // unique project path.
    let missing = format!("/nonexistent-audit-{}", std::process::id());
    let out = j.output(&mut j.command(&["--project", &missing, "run", "--", "true"]));
    assert_eq!(out.code, 126);
    let log = j.output(&mut j.command(&["log", "--tail", "1000"]));
    assert!(log.stdout.lines().any(|l| l.contains("refused") && l.contains(&missing)), "{log}");
}

#[test]
fn verbose_flag_shows_diagnostics_and_quiet_run_shows_none() {
    let j = jail!("verbose");
    let out = j.output(&mut j.command(&["-v", "-q", "--net", "isolated", "run", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("plan ready") && out.stderr.contains("backend=\"userns\""), "{out}");
}

#[test]
fn device_flag_binds_a_host_device_and_never_the_host_pts() {
    let j = jail!("device").arg("--device").arg("/dev/kmsg").arg("--device").arg("/dev/pts/*");
    let out = j.run("test -c /dev/kmsg && echo KMSG; ls /dev/pts");
    assert!(out.stdout.contains("KMSG"), "{out}");
    assert!(out.stdout.lines().filter(|l| l.trim().parse::<u32>().is_ok()).count() == 0, "host ptys leaked: {out}");
}

#[test]
fn profile_option_applies_a_profiles_policy_to_any_command() {
    let j = jail!("profileopt");
    let claude = j.rig.home.join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    j.give(&[&claude]);
    let j = j.arg("--profile").arg("claude").env("ANTHROPIC_API_KEY", "sk-ant-test");
    // What the agent keeps there (its transcripts: the profile's `agent.state`, this project's
    // entry of `projects/`, named as Claude Code names it) is writable and persists; what it
    // runs outside is not the jail's (tests/agents.rs, the plant tests), nor another
    // project's entry (tests/agent_homes.rs).
    let out = j.run(
        "e=$(pwd | sed 's/[^A-Za-z0-9]/-/g'); echo entry=$e; touch ~/.claude/projects/$e/from-jail && echo WROTE; \
         echo key=$ANTHROPIC_API_KEY",
    );
    // filtered (the default): the key stays outside, the jail holds a stand-in.
    assert!(out.stdout.contains("WROTE") && out.stdout.contains("key=agent-sandbox-injects-the-key"), "{out}");
    let entry = out.stdout.lines().find_map(|l| l.strip_prefix("entry=")).unwrap_or_default();
    let written = claude.join("projects").join(entry).join("from-jail");
    assert!(!entry.is_empty() && written.exists(), "the profile's state entry must be writable and persist: {out}");
    // Without a supervisor (open) the profile passes the key as env.keep says.
    let out = j.run_with(&["--net", "open"], "echo key=$ANTHROPIC_API_KEY");
    assert!(out.stdout.contains("key=sk-ant-test"), "{out}");
}

#[test]
fn the_launcher_binary_is_read_only_inside_even_when_it_lives_in_the_project() {
    let j = jail!("selfbin");
    // A copy of the binary inside the project (a developer running from the checkout).
    let inside = j.project.join("target/release/agent-sandbox");
    std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
    std::fs::copy(&j.rig.bin, &inside).unwrap();
    j.give(&[&j.project.join("target"), &j.project.join("target/release"), &inside]);
    // Another test's fork, made while the copy's descriptor was open for writing, holds it
    // until that child execs: exec fails with ETXTBSY meanwhile (a test-process race only).
    for _ in 0..100 {
        match std::process::Command::new(&inside).arg("--version").output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => break,
        }
    }
    let script = "echo x >> target/release/agent-sandbox || echo BIN-RO; mv target target2 || echo PINNED; \
                  echo x >> /run/agent-sandbox/agent-sandbox || echo STUB-RO; touch /run/agent-sandbox/bin/new || echo STUBDIR-RO";
    // The same invocation as `command`, but launched from the copy in the project.
    let mut c2 = j.as_user(&inside);
    c2.args(j.launcher_args(&["-q", "--net", "isolated", "run", "--", "sh", "-c", script]));
    let out = j.output(&mut c2);
    for want in ["BIN-RO", "PINNED", "STUB-RO", "STUBDIR-RO"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
    assert_eq!(
        std::fs::metadata(&inside).unwrap().len(),
        std::fs::metadata(&j.rig.bin).unwrap().len(),
        "binary changed"
    );
}

#[test]
fn a_host_with_files_mounted_over_etc_runs_the_default_jail() {
    // Containers bind /etc/resolv.conf, /etc/hosts and /etc/hostname; sites mount files into
    // /etc. The kernel refuses such an /etc as an overlay's lower layer in a user namespace:
    // the jail rebuilds it instead, and a mounted file shows its mounted content.
    let j = jail!("etc-mounts");
    let dir = j.rig.home.join("t/etc-mounted");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("resolv.conf"), "nameserver 192.0.2.53\n# MOUNTED-RESOLV\n").unwrap();
    std::fs::write(dir.join("issue"), "MOUNTED-ISSUE\n").unwrap();
    let issue = ["/etc/issue", "/etc/debian_version", "/etc/os-release"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .expect("a file in /etc to mount over");
    let setup = format!(
        "mount --bind {d}/resolv.conf /etc/resolv.conf && mount --bind {d}/issue {issue} && exec \"$@\"",
        d = dir.display()
    );
    let wrapper = ["unshare", "-m", "--propagation", "private", "sh", "-c", &setup, "sh"];
    for (mode, resolv) in [("isolated", "MOUNTED-RESOLV"), ("filtered", "169.254.77.1")] {
        let script = format!("cat /etc/resolv.conf {issue}; id -un");
        let mut c = j.command_wrapped(&wrapper, &["-q", "--net", mode, "run", "--", "sh", "-c", &script]);
        let out = j.output(&mut c);
        assert_eq!(out.code, 0, "{mode}: {out}");
        assert!(out.stdout.contains(resolv), "{mode}: resolv.conf: {out}");
        assert!(out.stdout.contains("MOUNTED-ISSUE"), "{mode}: the mounted file, not the one under it: {out}");
        assert!(out.stdout.contains(USER), "{mode}: {out}");
    }
}

#[test]
fn personality_allows_only_the_query_and_plain_linux() {
    // ADDR_NO_RANDOMIZE turns ASLR off and READ_IMPLIES_EXEC makes data executable for the
    // next program: refused. The query and PER_LINUX (what glibc and setarch's default do) work.
    let j = jail!("personality");
    let out = j.run(
        "setarch -R true 2>&1; echo norandom=$?; setarch -X true 2>&1; echo readexec=$?; \
         python3 -c 'import ctypes; l = ctypes.CDLL(None); print(\"query\", l.personality(0xffffffff) & 0xff, \"linux\", l.personality(0))'",
    );
    assert!(out.stdout.contains("norandom=1") && out.stdout.contains("readexec=1"), "{out}");
    assert!(out.stdout.contains("Operation not permitted"), "{out}");
    assert!(out.stdout.contains("query 0 linux 0"), "{out}");
}

/// `socket(FAMILY, TYPE, PROTOCOL)` for each `NAME:FAMILY:TYPE:PROTOCOL`: `NAME ok` or
/// `NAME errno=N`.
const SOCKET_FAMILY_PROBE: &str = r#"perl -MSocket -e '
for (@ARGV) {
  my ($n, $f, $t, $p) = split /:/;
  my $s;
  print socket($s, $f, $t, $p) ? "$n ok\n" : "$n errno=".($!+0)."\n";
}' vsock:40:1:0 vsock_dgram:40:2:0 packet:17:3:0 bluetooth:31:1:3 alg:38:5:0 rds:21:5:0 xdp:44:3:0 \
   unix:1:1:0 inet:2:1:0 inet6:10:2:0 netlink:16:3:0"#;

#[test]
fn socket_families_outside_the_allow_list_are_refused_in_every_network_mode() {
    // vsock is not network-namespaced: a flow over it would never meet the supervisor.
    for mode in ["isolated", "filtered", "open"] {
        let j = jail!("sockfam").arg("--net").arg(mode);
        let out = j.run(SOCKET_FAMILY_PROBE);
        for refused in ["vsock", "vsock_dgram", "packet", "bluetooth", "alg", "rds", "xdp"] {
            assert!(out.stdout.contains(&format!("{refused} errno=1\n")), "{mode}: {refused}: {out}");
        }
        for allowed in ["unix", "inet", "inet6", "netlink"] {
            assert!(out.stdout.contains(&format!("{allowed} ok\n")), "{mode}: {allowed}: {out}");
        }
    }
}

#[test]
fn a_node_refuses_a_job_whose_frozen_policy_it_cannot_read() {
    // The policy a job carries is frozen by the submitting session; a job directory with
    // something else there (damaged, or frozen by another version) runs nothing.
    let j = jail!("frozen");
    let jobs = j.rig.home.join(".local/state/agent-sandbox/jobs");
    let dir = jobs.join(format!("frozen-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("job dir");
    let script = "#!/bin/sh\ntouch ran-anyway\n";
    let spec = serde_json::json!({
        "version": 3, "session": "feedfacecafe", "project": j.project, "cwd": j.project,
        "policy": "{\"not\": \"a frozen policy\"}", "export": null, "output": "slurm-%j.out",
        "error": null, "input": null, "append": false, "job_name": "t", "script_args": [],
        "project_id": chaperon::job::ProjectId::of(&j.project).expect("project id"),
        "script_sha256": chaperon::job::sha256_hex(script.as_bytes()),
    });
    // Sealed with the user's key, as the chaperon writes it: the policy is what is wrong.
    let name = dir.file_name().expect("name").as_encoded_bytes();
    let sealed = user_record_key(j.rig).seal(chaperon::job::SEAL_PURPOSE, name, spec.to_string().as_bytes());
    std::fs::write(dir.join("job.json"), sealed).expect("spec");
    std::fs::write(dir.join("script"), script).expect("script");
    for p in [jobs.parent().expect("state"), &jobs, &dir, &dir.join("job.json"), &dir.join("script")] {
        j.give(&[p]);
    }
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("mode");
    let out = j.output(&mut j.command(&["exec", "--job", dir.to_str().expect("utf-8")]));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("the job's frozen policy cannot be read") && out.stderr.contains("fix:"), "{out}");
    assert!(!j.project.join("ran-anyway").exists(), "{out}");
}

/// The agent's own instruction file shows the user's text and then the sandbox notice; the
/// host's file is never changed, a missing one leaves nothing behind, the agent's directory is
/// made so its state persists, and a link an earlier session planted shows no hidden file.
#[test]
fn the_agent_reads_its_instructions_with_the_sandbox_notice_and_the_host_file_is_unchanged() {
    let j = jail!("notice");
    let home = j.rig.home.clone();
    let dir = home.join(".asb-notice");
    let _ = std::fs::remove_dir_all(&dir);
    let profiles = home.join(".config/agent-sandbox/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("noticeagent.toml"),
        "[agent]\nname = \"noticeagent\"\ncommand = [\"sh\"]\ninstructions = \".asb-notice/deep/AGENTS.md\"\n\
         [home]\nwrite = [\".asb-notice/\"]\n",
    )
    .unwrap();
    j.give(&[&home.join(".config"), &home.join(".config/agent-sandbox"), &profiles]);
    let file = dir.join("deep/AGENTS.md");
    let j = j.arg("--profile").arg("noticeagent");
    let show = "cat ~/.asb-notice/deep/AGENTS.md; echo x >> ~/.asb-notice/deep/AGENTS.md || echo NOTICE-RO; \
                touch ~/.asb-notice/state && echo STATE-WRITTEN";

    // No directory, no file yet.
    let out = j.run(show);
    assert!(out.stdout.contains("# You are running inside agent-sandbox"), "{out}");
    assert!(out.stdout.contains("prompt injection") && out.stdout.contains("refused by the network policy"), "{out}");
    assert!(out.stdout.contains("NOTICE-RO") && out.stdout.contains("STATE-WRITTEN"), "{out}");
    assert!(dir.join("state").exists(), "the agent's directory was made on the host, so its state persists");
    // Removed by the last session of the home to end: other tests' sessions of the same user,
    // running beside this one, put it off until they end.
    let gone = (0..1200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        !file.exists()
    });
    assert!(gone, "the empty placeholder is removed after the last session of the home");

    // The user's own file: shown first, unchanged on the host.
    std::fs::write(&file, "MY OWN RULES\n").unwrap();
    j.give(&[&file]);
    let out = j.run(show);
    let own = out.stdout.find("MY OWN RULES").expect("the user's text is shown");
    let notice = out.stdout.find("# You are running inside agent-sandbox").expect("the notice follows");
    assert!(own < notice && out.stdout.contains("NOTICE-RO"), "{out}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "MY OWN RULES\n", "the host's file is unchanged");

    // A link to a hidden file, as a jail could have left it: the notice alone, no secret.
    let ssh = home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("asb-notice-secret"), "SECRET-KEY-MATERIAL\n").unwrap();
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(ssh.join("asb-notice-secret"), &file).unwrap();
    let out = j.run("cat ~/.asb-notice/deep/AGENTS.md; echo rc=$?");
    assert!(!out.stdout.contains("SECRET-KEY-MATERIAL") && !out.stderr.contains("SECRET-KEY-MATERIAL"), "{out}");
    let _ = std::fs::remove_file(ssh.join("asb-notice-secret"));
}

/// Started inside your tmux, the jail's tmux gets C-a as its prefix (so C-b still reaches
/// yours), `TMUX` is not passed in, and the outer server's socket does not exist inside.
#[test]
fn tmux_inside_a_tmux_session_gets_its_own_prefix_and_never_sees_the_outer_server() {
    let j = jail!("nested-tmux");
    if std::process::Command::new("tmux").arg("-V").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "tmux is missing in CI");
        eprintln!("SKIPPED: tmux not installed");
        return;
    }
    let j = j.project_file(
        "probe.sh",
        "echo tmux=${TMUX:-unset} > out.txt; ls /tmp/tmux-$(id -u) >> out.txt 2>&1; \
         tmux -L inner new-session -d 'sleep 5' \\; show-options -g prefix >> out.txt 2>&1; \
         tmux -L inner kill-server; echo done >> out.txt\n",
    );
    let sock = format!("asb-outer-{}", std::process::id());
    let launcher = format!("{} -q run -- sh probe.sh; sleep 1", j.rig.bin.display());
    let tmux = |args: &[&str]| {
        let mut c = j.as_user("tmux");
        c.arg("-L").arg(&sock).args(args).env("TERM", "xterm");
        c.output().expect("tmux")
    };
    tmux(&["new-session", "-d", "-x", "100", "-y", "30", &launcher]);
    let out = j.project.join("out.txt");
    let mut text = String::new();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.contains("done") {
            break;
        }
    }
    tmux(&["kill-server"]);
    assert!(text.contains("tmux=unset"), "TMUX is not passed into the jail: {text}");
    assert!(text.contains("No such file"), "the outer server's socket directory is not there: {text}");
    assert!(text.contains("prefix C-a"), "the jail's tmux has its own prefix: {text}");
}

/// GPU device nodes reach the jail as the plan says: made with mknod (the major/minor of
/// /dev/null, so harmless) on a tmpfs mounted over /dev in a mount namespace of the launcher's
/// own, as a GPU node's /dev would be: NVIDIA's by default, AMD's `/dev/kfd` and `/dev/dri/*`
/// when the policy lists them, minus the deny list.
#[test]
fn gpu_device_nodes_made_with_mknod_reach_the_jail_as_the_policy_says() {
    let j = jail!("gpu");
    let nodes = [
        ("null", 1, 3),
        ("zero", 1, 5),
        ("full", 1, 7),
        ("random", 1, 8),
        ("urandom", 1, 9),
        ("tty", 5, 0),
        ("nvidia0", 1, 3),
        ("nvidia1", 1, 3),
        ("nvidiactl", 1, 3),
        ("nvidia-uvm", 1, 3),
        ("kfd", 1, 3),
        ("dri/renderD128", 1, 3),
    ];
    let mknods: Vec<String> =
        nodes.iter().map(|(n, major, minor)| format!("mknod -m 666 /dev/{n} c {major} {minor}")).collect();
    let policy = j.rig.home.join("t/gpu-policy.toml");
    std::fs::write(
        &policy,
        "[filesystem]\ndevices = [\"/dev/kfd\", \"/dev/dri/*\"]\ndeny_devices = [\"/dev/nvidia1\"]\n",
    )
    .unwrap();
    j.give(&[&policy]);
    let setup =
        format!("mount -t tmpfs -o mode=755 gpudev /dev && mkdir /dev/dri && {} && exec \"$@\"", mknods.join(" && "));
    let wrapper = ["unshare", "-m", "--propagation", "private", "sh", "-c", &setup, "sh"];
    let script = "for d in nvidia0 nvidiactl nvidia-uvm kfd dri/renderD128 nvidia1; do \
                  if [ -c /dev/$d ]; then echo x > /dev/$d && echo \"$d=usable\"; else echo \"$d=absent\"; fi; done";
    let args = ["-q", "--net", "isolated", "--policy", policy.to_str().unwrap(), "run", "--", "sh", "-c", script];
    let out = j.output(&mut j.command_wrapped(&wrapper, &args));
    assert_eq!(out.code, 0, "{out}");
    for d in ["nvidia0", "nvidiactl", "nvidia-uvm", "kfd", "dri/renderD128"] {
        assert!(out.stdout.contains(&format!("{d}=usable")), "{d}: {out}");
    }
    assert!(out.stdout.contains("nvidia1=absent"), "the deny list keeps it out: {out}");
}

/// A session with `--rw ~/.config` can plant `~/.config/AGENT -> ../.ssh/id_ed25519`; the next
/// session of that agent must not bind the key (read-write) in place of its directory.
#[test]
fn a_link_planted_at_an_agents_home_entry_binds_nothing_in_the_next_session() {
    let j = jail!("planted-entry");
    let home = j.rig.home.clone();
    let profiles = home.join(".config/agent-sandbox/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("plantagent.toml"),
        "[agent]\nname = \"plantagent\"\ncommand = [\"sh\"]\n[home]\nwrite = [\".config/asb-plant/\"]\n",
    )
    .unwrap();
    j.give(&[&home.join(".config"), &home.join(".config/agent-sandbox"), &profiles]);
    let key_before = std::fs::read_to_string(home.join(".ssh/id_ed25519")).unwrap();
    let plant = j.run_with(
        &["--rw", "~/.config"],
        "rm -rf ~/.config/asb-plant; ln -s ../.ssh/id_ed25519 ~/.config/asb-plant && echo PLANTED",
    );
    // The guard refuses a link to a hidden file now (review of the agents' homes, A2): the
    // link stands for one an older version, or a session of the Landlock backend before its
    // exit check, left there.
    assert!(!plant.stdout.contains("PLANTED"), "{plant}");
    let planted = home.join(".config/asb-plant");
    let _ = std::fs::remove_file(&planted);
    std::os::unix::fs::symlink("../.ssh/id_ed25519", &planted).unwrap();
    std::os::unix::fs::lchown(&planted, Some(j.rig.uid), Some(j.rig.gid)).unwrap();
    let out = j.run_with(
        &["--profile", "plantagent"],
        "cat ~/.config/asb-plant 2>&1; echo OWNED >> ~/.config/asb-plant 2>&1; echo done",
    );
    let _ = std::fs::remove_file(home.join(".config/asb-plant"));
    assert!(!out.stdout.contains(SSH_CANARY), "the key was bound into the jail: {out}");
    assert!(out.stderr.contains("~/.config/asb-plant is a symbolic link: not bound"), "said why: {out}");
    assert_eq!(std::fs::read_to_string(home.join(".ssh/id_ed25519")).unwrap(), key_before, "the key is unchanged");
}

/// `--json-status FD`: a start line and an exit line (status, denials counted) for an
/// orchestrator; the command never holds the descriptor; a refused start says why (126).
#[test]
fn json_status_reports_the_start_and_the_end_with_denials_counted() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let j = jail!("json-status");
    let status = |args: &[&str]| -> (Out, Vec<serde_json::Value>) {
        let (r, w) = nix::unistd::pipe().unwrap();
        let wfd = w.as_raw_fd();
        let mut c = j.command(args);
        // SAFETY: dup2 between descriptors of the child, before exec.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(wfd, 7) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = j.output(&mut c);
        drop(w);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut text).unwrap();
        (out, text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect())
    };
    let script = "test -e /dev/fd/7 && echo LEAKED; curl -s -m 3 http://169.254.169.254/; exit 3";
    let (out, lines) = status(&["-q", "--json-status", "7", "--net", "filtered", "run", "--", "sh", "-c", script]);
    assert_eq!(out.code, 3, "{out}");
    assert!(!out.stdout.contains("LEAKED"), "the command does not hold the status descriptor: {out}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    let (start, end) = (&lines[0], &lines[1]);
    assert_eq!(start["event"], "start");
    assert_eq!((start["net"].as_str(), start["backend"].as_str()), (Some("filtered"), Some("userns")), "{start}");
    assert_eq!(start["session"], end["session"]);
    assert_eq!(end["event"], "exit");
    assert_eq!(end["status"], 3, "{end}");
    assert!(end["denials"].as_u64().is_some_and(|n| n >= 1), "the metadata address was refused: {end}");
    // A descriptor not open for writing is refused before anything runs.
    let mut c = j.command(&["-q", "--json-status", "7", "run", "--", "touch", "ran"]);
    let null = std::fs::File::open("/dev/null").unwrap();
    let nfd = null.as_raw_fd();
    // SAFETY: dup2 between descriptors of the child, before exec.
    unsafe {
        c.pre_exec(move || {
            if libc::dup2(nfd, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let ro = j.output(&mut c);
    assert!(ro.code == 126 && ro.stderr.contains("not open for writing"), "{ro}");
    assert!(!j.project.join("ran").exists());
    let (out, lines) = status(&["-q", "--json-status", "7", "--project", "/nonexistent-asb", "run", "--", "true"]);
    assert_eq!(out.code, 126, "{out}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["status"], 126);
    assert!(lines[0]["reason"].as_str().is_some_and(|r| r.contains("nonexistent-asb")), "{:?}", lines[0]);
}

/// Limits on the rlimit path (cgroup v1 here): a fork bomb is capped by `--pids` inside the
/// jail's own user namespace and ended by `--timeout` (status 124, one line), while the host
/// and the user's other sessions keep starting processes; a memory hog gets ENOMEM from
/// `--mem`; no core files.
#[test]
fn a_fork_bomb_and_a_memory_hog_end_in_the_jail_alone() {
    let j = jail!("limits");
    // Bounded first: at most --pids processes at once, the rest refused (EAGAIN).
    let out = j.run_with(
        &["--pids", "48"],
        "python3 -c \"
import os, time
kids, refused = 0, 0
for i in range(300):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(5); os._exit(0)
    kids += 1
print('kids', kids, 'refused', refused)
\"; ulimit -c",
    );
    let kids: u32 = out.stdout.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(999);
    assert!(kids < 48 && out.stdout.contains("refused"), "at most --pids processes: {out}");
    assert!(out.stdout.trim_end().ends_with('0'), "no core files: {out}");
    // The real thing, in the background, while the host and another session work.
    let mut bomb = j.command(&[
        "-q",
        "--pids",
        "64",
        "--timeout",
        "6s",
        "run",
        "--",
        "python3",
        "-c",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    ]);
    bomb.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    let started = std::time::Instant::now();
    let child = bomb.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let mut worst = std::time::Duration::ZERO;
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let st = std::process::Command::new("/bin/true").status().unwrap();
        assert!(st.success());
        worst = worst.max(t.elapsed());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let other = j.run("echo other-session-works");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("host process start during the bomb: worst {worst:?}; the bomb ended after {:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(124), "ended by its time limit: {stderr}");
    assert!(stderr.contains("reached its time limit"), "one line says why: {stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "ended near its limit");
    assert!(worst < std::time::Duration::from_secs(1), "the host starts a process within 1 s: {worst:?}");
    assert!(other.stdout.contains("other-session-works"), "the user's other session works: {other}");
    // Memory: 1 GiB asked under a 256M limit.
    let out = j.run_with(
        &["--mem", "256M"],
        "python3 -c \"
try:
    b = bytearray(1 << 30)
    print('allocated')
except MemoryError:
    print('MemoryError')
\"; python3 -c 'b = bytearray(64 << 20); print(\"small ok\")'",
    );
    assert!(out.stdout.contains("MemoryError") && !out.stdout.contains("allocated"), "{out}");
    assert!(out.stdout.contains("small ok"), "what fits still works: {out}");
}

/// Ten sessions side by side in sibling projects: none sees or writes another's project or
/// `/tmp`, sees its processes, or reaches its sockets (path or abstract).
#[test]
fn ten_sessions_side_by_side_are_isolated_from_each_other() {
    let Some(jails) = (0..10).map(|i| Jail::new(&format!("many-{i}"))).collect::<Option<Vec<Jail>>>() else { return };
    let script = |i: usize| {
        format!(
            "python3 - <<'PY'
import os, socket, subprocess, time
me = {i}
open('/tmp/mine', 'w').write('session-%d' % me)
held = []
for name in ('\\0asb-many-%d' % me, '/tmp/asb-many.sock'):
    s = socket.socket(socket.AF_UNIX); s.bind(name); s.listen(); held.append(s)
open('ready', 'w').write('1')
time.sleep(2.5)
out = []
for k in range(10):
    if k == me: continue
    other = os.path.expanduser('~/t/many-%d' % k)
    out.append('project-%d=%s' % (k, os.path.exists(other)))
    try:
        open(other + '/x', 'w'); out.append('wrote-%d' % k)
    except OSError:
        pass
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect('\\0asb-many-%d' % k); out.append('abstract-%d=reached' % k)
    except OSError:
        out.append('abstract-%d=refused' % k)
out.append('tmp=' + open('/tmp/mine').read())
procs = [p for p in os.listdir('/proc') if p.isdigit()]
out.append('procs=%d' % len(procs))
open('result', 'w').write('\\n'.join(out) + '\\n')
PY"
        )
    };
    let children: Vec<std::process::Child> = jails
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let mut c = j.command(&["-q", "run", "--", "sh", "-c", &script(i)]);
            c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    for (i, j) in jails.iter().enumerate() {
        let result = std::fs::read_to_string(j.project.join("result")).unwrap_or_default();
        assert!(result.contains(&format!("tmp=session-{i}")), "its own /tmp: {result}");
        assert!(!result.contains("=True") && !result.contains("wrote-"), "no other project: {result}");
        assert!(!result.contains("=reached"), "no other session's abstract socket: {result}");
        let procs: usize = result.lines().find_map(|l| l.strip_prefix("procs=")?.parse().ok()).unwrap_or(99);
        assert!(procs <= 4, "only its own processes (init, sh, python, ...): {result}");
    }
}

/// With a parent of the state directory writable (`--rw ~/.local`), the jail cannot move the
/// directories above its mask away to make a state directory of its own (audit log, control
/// sockets, locks, jobs) for the user's later sessions.
#[test]
fn the_directories_above_a_hidden_path_in_a_writable_tree_cannot_be_moved() {
    let j = jail!("state-move");
    let out = j.run_with(
        &["--rw", "~/.local"],
        "mv ~/.local/state ~/.local/state.moved 2>&1 && echo MOVED; ls -A ~/.local/state/agent-sandbox | wc -l; \
         mkdir -p ~/.local/state/agent-sandbox/sessions 2>&1 || echo NO-PLANT",
    );
    let _ = std::fs::rename(j.rig.home.join(".local/state.moved"), j.rig.home.join(".local/state"));
    assert!(!out.stdout.contains("MOVED"), "the state directory's parent was moved: {out}");
    assert!(out.stdout.contains("NO-PLANT"), "nothing can be made in the hidden state directory: {out}");
    assert!(j.rig.home.join(".local/state/agent-sandbox/audit.jsonl").exists(), "the real state directory is in place");
}

/// The bell: an agent's notification hook (Claude Code's `Notification` hook, codex's
/// `notify`) rings the user's terminal with BEL, through the jail's own terminal, so tmux or
/// the terminal marks the window that needs attention.
#[test]
fn the_terminal_bell_reaches_the_users_terminal() {
    let j = jail!("bell");
    let launcher = format!("{} -q run -- sh -c \"printf 'ding\\a'\"", j.rig.bin.display());
    let mut cmd = j.as_user("script");
    cmd.args(["-qec", &launcher, "/dev/null"]).env("TERM", "xterm");
    let out = j.output(&mut cmd);
    assert!(out.stdout.contains("ding\u{7}"), "BEL passes through: {out:?}");
}

/// Puts back a file as it was when dropped (the test changes /etc/subgid).
struct Restore(std::path::PathBuf, Option<Vec<u8>>);

impl Drop for Restore {
    fn drop(&mut self) {
        match &self.1 {
            Some(b) => drop(std::fs::write(&self.0, b)),
            None => drop(std::fs::remove_file(&self.0)),
        }
    }
}

#[test]
fn supplementary_groups_are_mapped_where_subgid_covers_them_and_said_where_not() {
    // A group-shared, setgid project directory, as HPC projects have.
    let Some(j) = Jail::new("groups") else { return };
    let sh = |c: &str| assert!(std::process::Command::new("sh").args(["-c", c]).status().unwrap().success(), "{c}");
    sh("getent group asbproj >/dev/null || groupadd asbproj");
    sh(&format!("usermod -aG asbproj {USER}"));
    let gid: u32 =
        String::from_utf8(std::process::Command::new("getent").args(["group", "asbproj"]).output().unwrap().stdout)
            .unwrap()
            .split(':')
            .nth(2)
            .and_then(|g| g.parse().ok())
            .expect("asbproj's gid");
    std::os::unix::fs::chown(&j.project, None, Some(gid)).unwrap();
    std::fs::set_permissions(&j.project, std::os::unix::fs::PermissionsExt::from_mode(0o2775)).unwrap();
    assert!(std::path::Path::new("/usr/bin/newgidmap").exists(), "uidmap is not installed (tests/run.sh installs it)");
    let _restore = Restore("/etc/subgid".into(), std::fs::read("/etc/subgid").ok());
    let probe = "id -Gn; touch made; stat -c group=%G made; touch mine; chgrp asbproj mine && echo chgrp=ok; \
                 stat -c mine=%G mine; echo named=$(grep -c '^asbproj:' /etc/group)";
    let run = || j.output(&mut j.command_with_groups(&["run", "--", "sh", "-c", probe]));
    // Doctor's `groups` line and the fix line under it, if any.
    let doctor = || {
        let out = j.output(&mut j.command_with_groups(&["doctor"]));
        let lines: Vec<&str> = out.stdout.lines().collect();
        let at = lines.iter().position(|l| l.get(5..).is_some_and(|r| r.starts_with("groups "))).unwrap_or(lines.len());
        lines[at.min(lines.len())..].iter().take(2).copied().collect::<Vec<&str>>().join("\n")
    };
    // No /etc/subgid range covers the group: access works (the file is the group's, by the
    // setgid bit) but the name is nogroup, chgrp fails, and the banner and doctor say so.
    let subgid = std::fs::read_to_string("/etc/subgid").unwrap_or_default();
    std::fs::write(
        "/etc/subgid",
        subgid
            .lines()
            .filter(|l| !l.starts_with(&format!("{USER}:{gid}:")))
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let out = run();
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("nogroup") && !out.stdout.contains("asbproj\n") && out.stdout.contains("group=nogroup"),
        "{out}"
    );
    assert!(!out.stdout.contains("chgrp=ok") && out.stdout.contains("named=0"), "{out}");
    assert!(out.stderr.contains("show as nogroup") && out.stderr.contains("/etc/subgid"), "the banner says: {out}");
    let said = doctor();
    assert!(said.contains("nogroup") && said.contains("newgidmap"), "doctor: {said}");
    // With a range covering it, newgidmap maps it one to one: its name, chgrp to it, and
    // new files in the setgid directory show as the group's.
    std::fs::write("/etc/subgid", format!("{subgid}{USER}:{gid}:1\n")).unwrap();
    let out = run();
    assert_eq!(out.code, 0, "{out}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.first().is_some_and(|l| l.split(' ').any(|g| g == "asbproj")), "id -Gn: {out}");
    for want in ["group=asbproj", "chgrp=ok", "mine=asbproj", "named=1"] {
        assert!(out.stdout.contains(want), "{want}: {out}");
    }
    assert!(out.stderr.contains("groups asbproj (newgidmap)"), "the banner says: {out}");
    assert!(doctor().contains("asbproj"), "doctor names the mapped group");
    let meta = std::fs::metadata(j.project.join("mine")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::gid(&meta), gid, "the host sees the group");
}

#[test]
fn the_stubs_are_the_small_stub_binary_not_the_launcher() {
    // Every Slurm call in the jail starts a stub: it is agent-sandbox-stub (next to the
    // launcher). Its size against the launcher's is a release figure (788 KB against 9.8 MB,
    // docs/performance.md); a debug build keeps everything.
    let j = jail!("small-stub");
    let stub = j.rig.bin.with_file_name("agent-sandbox-stub");
    let size = std::fs::metadata(&stub).expect("cargo builds agent-sandbox-stub next to agent-sandbox").len();
    let out = j.run("stat -L -c %s /run/agent-sandbox/agent-sandbox \"$(command -v squeue)\"; sbcast x y; echo rc=$?");
    let sizes: Vec<u64> = out.stdout.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(sizes, [size, size], "{out}");
    assert_ne!(size, std::fs::metadata(&j.rig.bin).unwrap().len(), "the launcher is bound, not the stub");
    assert!(out.stdout.contains("rc=1") && out.stderr.contains("sbcast: error:"), "the stub answers as before: {out}");
}

/// The launcher leaves tun0's teardown to a child that shares its memory and ends once the
/// launcher has exited and the device is gone: after five sessions, no launcher process of
/// theirs is left (found by its binary and its working directory, this test's project).
#[test]
fn the_network_teardown_holder_ends_after_the_launcher() {
    let j = jail!("teardown-holder");
    for _ in 0..5 {
        let out = j.run("true");
        assert_eq!(out.code, 0, "{out}");
    }
    let project = j.project.display().to_string();
    let left = || -> Vec<String> {
        let mut v = vec![];
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let cwd = std::fs::read_link(e.path().join("cwd")).map(|p| p.display().to_string()).unwrap_or_default();
            let exe = std::fs::read_link(e.path().join("exe")).unwrap_or_default();
            if cwd == project && exe == j.rig.bin {
                v.push(format!("pid {}", e.file_name().to_string_lossy()));
            }
        }
        v
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !left().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(left(), Vec::<String>::new(), "processes of ended sessions are left");
}

/// A project and a working directory named in bytes that are not UTF-8 (a Linux path is
/// bytes) run as any other: the plan crosses into the jail with its paths whole. And a plan
/// refused after the session's Slurm socket and network claim were made takes them with it.
#[test]
fn a_project_named_in_non_utf8_bytes_runs_and_a_refused_plan_leaves_no_socket() {
    use std::os::unix::ffi::OsStrExt;
    let j = jail!("bytes");
    let odd = j.project.join(std::ffi::OsStr::from_bytes(b"proj-\xff"));
    let sub = odd.join(std::ffi::OsStr::from_bytes(b"d\xfe"));
    std::fs::create_dir_all(&sub).unwrap();
    j.give(&[&odd, &sub]);
    let mut c = j.command(&["-q", "--project"]);
    c.arg(&odd).args(["run", "--", "sh", "-c", "pwd; echo ran"]).current_dir(&sub);
    let out = j.output(&mut c);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout, format!("{}\nran\n", String::from_utf8_lossy(sub.as_os_str().as_bytes())), "{out}");

    // Outside the project: a policy file the jail could write is refused before any socket.
    let rule = format!("bad rule {}", std::process::id());
    let policy = j.project.with_file_name("bytes-bad-rule.toml");
    std::fs::write(&policy, format!("[net]\nallow = [\"{rule}\"]\n")).unwrap();
    j.give(&[&policy]);
    let out = j.output(&mut j.command(&["-q", "--policy", policy.to_str().unwrap(), "run", "--", "true"]));
    assert_eq!(out.code, 126, "{out}");
    let log = j.output(&mut j.command(&["log", "--json", "--tail", "1000"]));
    let refused: serde_json::Value = log
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|r: &serde_json::Value| {
            r["event"] == "refused" && r["reason"].as_str().is_some_and(|s| s.contains(&rule))
        })
        .unwrap_or_else(|| panic!("no refusal logged: {log}"));
    let session = refused["session"].as_str().expect("the refusal's session");
    let sock = j.rig.home.join(format!(".local/state/agent-sandbox/sessions/{session}.sock"));
    assert!(!sock.exists(), "the refused session's socket is left: {}", sock.display());
    // Its address claim on the session network (made before the plan where Slurm is) goes
    // with its registry.
    let registry = j.rig.home.join(format!(".local/state/agent-sandbox/net/{session}"));
    assert!(gone_soon(&registry), "the refused session's registry is left: {}", registry.display());
}

/// A host whose mounts are shared (systemd's default; this CI host's root is private) gives
/// the jail slave copies of them: the jail still pivots into its own root, and once it is
/// built no mount event of the host's reaches it (none of its mounts has a master or peers).
#[test]
fn a_host_with_shared_mounts_runs_the_jail_and_no_mount_of_the_host_propagates_in() {
    let j = jail!("shared-root");
    let wrapper = ["unshare", "-m", "--propagation", "shared"];
    for mode in ["isolated", "filtered"] {
        let mut c = j.command_wrapped(&wrapper, &["-q", "--net", mode, "run", "--", "cat", "/proc/self/mountinfo"]);
        let out = j.output(&mut c);
        assert_eq!(out.code, 0, "{mode}: {out}");
        assert!(out.stdout.lines().count() > 10, "{mode}: {out}");
        assert!(
            !out.stdout.contains("master:") && !out.stdout.contains("shared:"),
            "{mode}: a mount of the jail takes the host's events: {out}"
        );
    }
}

// ---- sandboxes of the command's own: nested user namespaces (`process.nested_userns`) ----

/// A policy file of the test user's that allows nested sandboxes: `nested_userns = true`,
/// with the git guard off (`nested_git = true`) unless `guard_on`, which the launch refuses.
fn nested_policy(j: &Jail, guard_on: bool) -> String {
    let name = j.project.file_name().unwrap().to_string_lossy().to_string();
    let policy = j.rig.home.join(format!("t/{name}-nested.toml"));
    let guard = if guard_on { "" } else { "[filesystem]\nnested_git = true\n" };
    std::fs::write(&policy, format!("[process]\nnested_userns = true\n{guard}")).unwrap();
    j.give(&[&policy]);
    policy.display().to_string()
}

/// The git guard carries trapped calls out as the jail's init, which cannot write the id maps
/// of a user namespace two levels down, and its path rules would not see the project bound
/// at another path in a mount namespace of the jail's own: asking for nested user namespaces
/// with the guard on stops the launch, saying which key to set, before anything runs.
#[test]
fn nested_user_namespaces_with_the_git_guard_on_stop_the_launch_with_the_fix() {
    let j = jail!("nested-guard");
    let policy = nested_policy(&j, true);
    let out = j.run_with(&["--policy", &policy], "touch ./ran");
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("process.nested_userns = true") && out.stderr.contains("git guard"), "{out}");
    assert!(out.stderr.contains("fix:") && out.stderr.contains("nested_git = true"), "{out}");
    assert!(!j.project.join("ran").exists(), "the command ran");
}

/// The issue's case, with bubblewrap as its users run it (`--unshare-all`, `--dev`, `--proc`):
/// it starts inside the jail, in namespaces of its own, and what the jail hides or makes
/// read-only stays so inside it.
#[test]
fn bubblewrap_runs_inside_the_jail_when_nested_sandboxes_are_allowed() {
    let j = jail!("nested-bwrap");
    assert!(std::path::Path::new("/usr/bin/bwrap").exists(), "bubblewrap is installed (tests/run.sh)");
    let script = r#"
        ns() { for n in user mnt pid net; do readlink /proc/self/ns/$n; done | tr '\n' ' '; }
        echo "outside $(ns)"
        bwrap --ro-bind / / --dev /dev --proc /proc --bind "$PWD" "$PWD" --unshare-all --die-with-parent sh -c '
            ns() { for n in user mnt pid net; do readlink /proc/self/ns/$n; done | tr "\n" " "; }
            echo "inside $(ns)"
            echo made > made-in-bwrap
            cat ~/.ssh/id_ed25519 2>&1
            echo "devices $(awk "NR>2{print \$1}" /proc/net/dev | tr "\n" " ")"
        '
        echo "bwrap=$?"
        bwrap --ro-bind / / --bind /usr /usr touch /usr/asb-nested 2>&1
    "#;
    let policy = nested_policy(&j, false);
    let out = j.run_with(&["--policy", &policy], script);
    assert!(out.stdout.contains("bwrap=0"), "bubblewrap started: {out}");
    let ns = |tag: &str| -> Vec<String> {
        let line = out.stdout.lines().find_map(|l| l.strip_prefix(tag)).unwrap_or_default();
        line.split_whitespace().map(str::to_string).collect()
    };
    let (outside, inside) = (ns("outside "), ns("inside "));
    assert_eq!(inside.len(), 4, "{out}");
    for (o, i) in outside.iter().zip(&inside) {
        assert_ne!(o, i, "bubblewrap's own namespace: {out}");
    }
    assert_eq!(std::fs::read_to_string(j.project.join("made-in-bwrap")).unwrap_or_default(), "made\n", "{out}");
    assert!(out.stdout.contains("No such file or directory") && !out.stdout.contains(SSH_CANARY), "{out}");
    assert!(out.stdout.contains("devices lo: \n"), "its network namespace holds loopback only: {out}");
    assert!(out.stdout.contains("Read-only file system"), "the jail's read-only trees stay so: {out}");
    assert!(!std::path::Path::new("/usr/asb-nested").exists());
}

/// The probe `a_nested_namespace_keeps_the_jails_mounts...` runs in a namespace of its own
/// inside the jail: one line per attempt, `NAME RESULT` (an errno's name, or `ok`).
const NESTED_PROBE: &str = r#"
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
P = os.getcwd()
def res(r):
    return "ok" if r == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
def mount(src, tgt, fs, flags, data=None):
    b = lambda s: s.encode() if s else None
    return res(libc.mount(b(src), b(tgt), b(fs), ctypes.c_ulong(flags), b(data)))
def sock(*a):
    try:
        socket.socket(*a).close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, "?")
def sys(nr, *a):
    return "ok" if libc.syscall(nr, *a) >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
for d in ["/tmp/a", "/tmp/b", "/tmp/c"]:
    os.makedirs(d, exist_ok=True)
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
print("unmount-mask", res(libc.umount2((P + "/secrets.env").encode(), 2)))
print("unmount-etc", res(libc.umount2(b"/etc", 2)))
print("unmount-protected", res(libc.umount2((P + "/.git").encode(), 2)))
print("remount-usr-rw", mount(None, "/usr", None, MS_REMOUNT | MS_BIND))
print("remount-usr-suid-dev", mount(None, "/usr", None, MS_REMOUNT | MS_BIND | 1))
print("remount-root-rw", mount(None, "/", None, MS_REMOUNT))
print("bind-without-submounts", mount(P, "/tmp/a", None, MS_BIND))
print("bind-with-submounts", mount(P, "/tmp/b", None, MS_BIND | MS_REC))
print("mask-through-bind", repr(open("/tmp/b/secrets.env").read()))
print("tmpfs", mount("none", "/tmp/c", "tmpfs", 0))
print("fsopen", sys(430, b"tmpfs", 0))
print("open_tree", sys(428, -100, b"/tmp", 1))
print("mount_setattr", sys(442, -100, b"/", 0, 0, 0))
print("setns", sys(308, 0, 0))
print("chroot", sys(161, b"/tmp"))
try:
    os.setgroups([])
    print("setgroups", "ok")
except OSError as e:
    print("setgroups", errno.errorcode.get(e.errno, "?"))
print("netlink-route", sock(socket.AF_NETLINK, socket.SOCK_RAW, 0))
print("netlink-netfilter", sock(socket.AF_NETLINK, socket.SOCK_RAW, 12))
print("netlink-xfrm", sock(socket.AF_NETLINK, socket.SOCK_RAW, 6))
print("netlink-generic", sock(socket.AF_NETLINK, socket.SOCK_RAW, 16))
print("raw-icmp", sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
print("raw-icmpv6", sock(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6))
print("packet", sock(17, socket.SOCK_RAW, 0))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for name, level, opt in [("iptables", 0, 64), ("xfrm-policy", 0, 17), ("ip6tables", 41, 64)]:
    try:
        u.setsockopt(level, opt, b"\0" * 64)
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, "?"))
"#;

/// What a nested namespace of the jail's own cannot do (the kernel locks every mount it
/// inherits; the jail's seccomp filter, which it inherits too, keeps the rest closed), and
/// what it can: the list in docs/security-model.md, "Nested sandboxes".
#[test]
fn a_nested_namespace_keeps_the_jails_mounts_and_reaches_no_netfilter_raw_socket_or_new_mount_api() {
    let j = jail!("nested-surface")
        .project_file("secrets.env", "TOKEN=CANARY-NESTED")
        .project_file("nested.py", NESTED_PROBE);
    let hide = j.project.join("secrets.env").display().to_string();
    let policy = nested_policy(&j, false);
    let out = j.run_with(&["--policy", &policy, "--hide", &hide], "unshare -Urmn python3 nested.py");
    assert_eq!(out.code, 0, "{out}");
    let got = |k: &str| -> String {
        out.stdout.lines().find_map(|l| l.strip_prefix(&format!("{k} "))).unwrap_or("(missing)").to_string()
    };
    // The kernel: mounts inherited from the jail are locked.
    for k in ["unmount-mask", "unmount-etc", "unmount-protected", "bind-without-submounts"] {
        assert_eq!(got(k), "EINVAL", "{k}: {out}");
    }
    for k in ["remount-usr-rw", "remount-usr-suid-dev", "remount-root-rw"] {
        assert_eq!(got(k), "EPERM", "{k}: {out}");
    }
    assert_eq!(got("bind-with-submounts"), "ok", "{out}");
    assert_eq!(got("mask-through-bind"), "''", "the hidden file stays empty: {out}");
    // The filter: what a nested namespace's capabilities would open besides; and setgroups,
    // which stays off in every namespace below the jail's (no group can be dropped).
    for k in [
        "fsopen",
        "open_tree",
        "mount_setattr",
        "setns",
        "chroot",
        "setgroups",
        "netlink-netfilter",
        "netlink-xfrm",
        "netlink-generic",
        "raw-icmp",
        "raw-icmpv6",
        "packet",
        "iptables",
        "xfrm-policy",
        "ip6tables",
    ] {
        assert_eq!(got(k), "EPERM", "{k}: {out}");
    }
    // What it reaches: new mounts of its own, and rtnetlink in its own network namespace.
    assert_eq!(got("tmpfs"), "ok", "{out}");
    assert_eq!(got("netlink-route"), "ok", "{out}");
}

/// `codex exec --sandbox workspace-write` run without its profile's command line, where its
/// bubblewrap cannot start: one line on stderr says why every command will fail and what to
/// do, and the command still runs (codex itself would). A command line that turns the
/// sandbox off gets no line.
#[test]
fn an_agent_whose_own_sandbox_cannot_start_is_told_why_in_one_line() {
    let j = jail!("nested-line").project_file("codex", "#!/bin/sh\necho codex-ran \"$@\"\n");
    std::fs::set_permissions(j.project.join("codex"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = j.output(&mut j.command(&["-q", "run", "--", "./codex", "exec", "--sandbox", "workspace-write", "x"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("codex-ran exec"), "{out}");
    let lines: Vec<&str> = out.stderr.lines().filter(|l| l.contains("codex's own sandbox")).collect();
    assert_eq!(lines.len(), 1, "one line: {out}");
    let line = lines[0];
    assert!(line.starts_with("agent-sandbox: warning: codex's own sandbox (bubblewrap) cannot start"), "{line}");
    assert!(
        line.contains("process.nested_userns = false") && line.contains("every command codex runs fails"),
        "{line}"
    );
    assert!(line.contains("agent-sandbox codex") && line.contains("nested_userns = true"), "what to do: {line}");
    let out = j.output(&mut j.command(&["-q", "run", "--", "./codex", "exec", "--sandbox", "danger-full-access", "x"]));
    assert!(out.stdout.contains("codex-ran") && !out.stderr.contains("own sandbox"), "{out}");
    // Allowed: no line, the sandbox starts.
    let policy = nested_policy(&j, false);
    let out = j.output(&mut j.command(&["-q", "--policy", &policy, "run", "--", "./codex", "exec", "x"]));
    assert!(out.stdout.contains("codex-ran") && !out.stderr.contains("own sandbox"), "{out}");
}

/// What slurmstepd does for a job under Slurm 25.11's namespace/linux with user and pid
/// namespaces on (`src/plugins/namespace/linux/namespace_linux.c`): a user namespace whose
/// whole uid and gid range maps to itself (`0 0 4294967295`, written by the root parent), then
/// a pid and mount namespace with its own /proc; the job's command runs there as the user.
const NAMESPACE_LINUX: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID = 0x10000000, 0x00020000, 0x20000000
r, w = os.pipe()
r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(CLONE_NEWUSER) != 0:
        sys.exit("unshare user: %d" % ctypes.get_errno())
    os.write(w, b"x"); os.read(r2, 1)
    if libc.unshare(CLONE_NEWPID | CLONE_NEWNS) != 0:
        sys.exit("unshare pid/mnt: %d" % ctypes.get_errno())
    inner = os.fork()
    if inner == 0:
        os.system("mount --make-rprivate / && mount -t proc proc /proc") == 0 or sys.exit("proc")
        os.execvp(sys.argv[1], sys.argv[1:])
    _, st = os.waitpid(inner, 0)
    os._exit(os.waitstatus_to_exitcode(st))
os.read(r, 1)
for f in ("uid_map", "gid_map"):
    with open("/proc/%d/%s" % (pid, f), "w") as m:
        m.write("0 0 4294967295\n")
os.write(w2, b"x")
_, st = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(st))
"#;

/// Issue 34, item 5: a job's re-entry under namespace/linux (the plugin is not in Debian's
/// Slurm: its namespaces are made here as slurmstepd makes them) runs the launcher nested in
/// the job's user and pid namespaces: the jail is built there, as the user, with its own PID 1.
#[test]
fn the_jail_nests_in_a_job_namespace_as_slurms_namespace_linux_makes_it() {
    let j = jail!("namespace-linux");
    assert!(nix::unistd::getuid().is_root(), "the test harness runs as root (it drops to the test user)");
    let home = j.rig.home.display().to_string();
    let mut c = std::process::Command::new("python3");
    c.args(["-c", NAMESPACE_LINUX, "setpriv"])
        .arg(format!("--reuid={}", j.rig.uid))
        .arg(format!("--regid={}", j.rig.gid))
        .args(["--clear-groups", "env", "-i", &format!("HOME={home}"), "PATH=/usr/bin:/bin"])
        .arg(&j.rig.bin)
        .args(j.launcher_args(&[
            "-q",
            "run",
            "--",
            "sh",
            "-c",
            "id -u; cat /proc/1/comm; head -1 /proc/self/uid_map; touch made-in-the-jail && echo WROTE",
        ]))
        .current_dir(&j.project);
    let out = j.output(&mut c);
    assert_eq!(out.code, 0, "{out}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.first().copied(), Some(j.rig.uid.to_string().as_str()), "{out}");
    assert_eq!(lines.get(1).copied(), Some("agent-sandbox"), "the jail's own PID 1: {out}");
    // The jail's user namespace maps only the user (the job's maps the whole range).
    let map: Vec<&str> = lines.get(2).map(|l| l.split_whitespace().collect()).unwrap_or_default();
    assert_eq!(map.get(2).copied(), Some("1"), "{out}");
    assert!(out.stdout.contains("WROTE") && j.project.join("made-in-the-jail").exists(), "{out}");
}

/// Issue 33, bug 8c: a launcher in a pid namespace whose /proc is its parent's (`unshare -p
/// -f` without `--mount-proc`) knows PID 1 by a pid that /proc gives to another process, or
/// to none: its id maps are written through the number /proc gives it, and the command runs.
/// The jail sees the user's own uid, and its own fresh /proc (PID 1 is the jail's init).
#[test]
fn a_launcher_whose_proc_is_another_pid_namespaces_runs_the_command() {
    let j = jail!("pidns-foreign-proc");
    let mut c = j.as_user("unshare");
    c.args(["-U", "-p", "-f", "--map-current-user", "--"]).arg(&j.rig.bin);
    c.args(j.launcher_args(&["-q", "run", "--", "sh", "-c", "id -u; readlink /proc/self >/dev/null && echo proc-ok"]));
    let out = j.output(&mut c);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout, format!("{}\nproc-ok\n", j.rig.uid), "{out}");
    assert!(!out.stderr.contains("setgroups"), "{out}");
}
