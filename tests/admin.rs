//! The admin lock file, for real: the test (root) writes /etc/agent-sandbox/admin.toml and
//! the unprivileged user tries to widen past it. One test function: the file is global state.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const ETC: &str = "/etc/agent-sandbox";

/// The tests of this file take turns: /etc/agent-sandbox is one directory for all of them.
static ETC_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Moves an existing /etc/agent-sandbox aside and puts it back, whatever happens.
struct EtcGuard {
    saved: Option<PathBuf>,
}

impl EtcGuard {
    fn take() -> EtcGuard {
        let saved = Path::new(ETC).exists().then(|| {
            let to = PathBuf::from(format!("{ETC}.test-saved-{}", std::process::id()));
            std::fs::rename(ETC, &to).expect("move /etc/agent-sandbox aside");
            to
        });
        std::fs::create_dir_all(ETC).expect("mkdir");
        std::fs::set_permissions(ETC, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        EtcGuard { saved }
    }
    fn write(&self, name: &str, text: &str, mode: u32) {
        let p = Path::new(ETC).join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

impl Drop for EtcGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(ETC);
        if let Some(s) = &self.saved {
            let _ = std::fs::rename(s, ETC);
        }
    }
}

const ADMIN: &str = r#"
[net]
mode = "isolated"

[home]
access = "restricted"

[filesystem]
hide = ["/opt"]
write = ["/var/tmp/asb-admin-allowed"]
deny_devices = ["/dev/kmsg"]

[env]
scrub = ["HARMLESS_*"]
"#;

#[test]
fn admin_locks_hold_against_every_user_layer() {
    let Some(j) = Jail::new("admin") else { return };
    let _one = ETC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let guard = EtcGuard::take();
    for d in ["/var/tmp/asb-admin-allowed", "/var/tmp/asb-admin-denied"] {
        std::fs::create_dir_all(d).unwrap();
        j.give(&[Path::new(d)]);
    }
    guard.write("admin.toml", ADMIN, 0o644);
    // A user keep, set and --env of names the admin scrubs: the admin's floor wins each time.
    let user_cfg = j.rig.home.join(".config/agent-sandbox/config.toml");
    std::fs::create_dir_all(user_cfg.parent().unwrap()).unwrap();
    std::fs::write(&user_cfg, "[env]\nkeep = [\"HARMLESS_X\"]\nset = { HARMLESS_Y = \"should-be-scrubbed\" }\n")
        .unwrap();
    j.give(&[user_cfg.parent().unwrap().parent().unwrap(), user_cfg.parent().unwrap(), &user_cfg]);
    struct RemoveCfg(PathBuf);
    impl Drop for RemoveCfg {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _user_cfg = RemoveCfg(user_cfg);
    let j = j
        .env("HARMLESS_X", "should-be-scrubbed")
        .env("HARMLESS_Z", "should-be-scrubbed")
        .arg("--env")
        .arg("HARMLESS_Z")
        .arg("--env")
        .arg("HARMLESS_W=should-be-scrubbed")
        .env("AGENT_SANDBOX_ETC_DIR", "/nonexistent")
        .arg("--net")
        .arg("open")
        .arg("--home-access")
        .arg("write")
        .arg("--rw")
        .arg("/var/tmp/asb-admin-allowed")
        .arg("--rw")
        .arg("/var/tmp/asb-admin-denied")
        .arg("--device")
        .arg("/dev/kmsg");

    let show = j.output(&mut j.command(&["policy", "show"]));
    assert!(show.stdout.contains("net.mode") && show.stdout.contains("locked by admin"), "{show}");
    assert!(show.stdout.contains("process.unix_sockets"), "every process key is shown: {show}");

    let out = j.run(
        "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '; \
         touch ~/x 2>/dev/null && echo HOME-WRITABLE; \
         ls /opt 2>/dev/null && echo OPT-VISIBLE; \
         env | grep HARMLESS_; \
         test -e /dev/kmsg && echo KMSG-BOUND; \
         touch /var/tmp/asb-admin-allowed/f && echo ALLOWED-RW; \
         touch /var/tmp/asb-admin-denied/f 2>/dev/null && echo DENIED-RW; \
         echo end",
    );
    assert!(out.stdout.starts_with("lo\n"), "admin net.mode isolated must win over --net open: {out}");
    for bad in ["HOME-WRITABLE", "OPT-VISIBLE", "should-be-scrubbed", "KMSG-BOUND", "DENIED-RW"] {
        assert!(!out.stdout.contains(bad), "{bad}: {out}");
    }
    assert!(out.stdout.contains("ALLOWED-RW"), "{out}");
    assert!(out.stderr.contains("/var/tmp/asb-admin-denied") && out.stderr.contains("dropped"), "{out}");

    // An admin file others could write is not trusted: every launch refuses, naming it.
    guard.write("admin.toml", ADMIN, 0o666);
    let out = j.run("touch ./ran");
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("admin.toml is not trusted"), "{out}");
    assert!(!j.project.join("ran").exists());

    // A malformed admin file stops every launch with file and line.
    guard.write("admin.toml", "[net]\nmode = \"isolated\"\nbogus = 1\n", 0o644);
    let out = j.run("touch ./ran");
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("/etc/agent-sandbox/admin.toml:3:"), "{out}");
    assert!(!j.project.join("ran").exists());

    // The site config sets defaults a user may still change.
    guard.write("admin.toml", "", 0o644);
    guard.write("config.toml", "[home]\naccess = \"restricted\"\n", 0o644);
    let out = j.run("touch ~/x && echo HOME-WRITABLE");
    assert!(out.stdout.contains("HOME-WRITABLE"), "--home-access write overrides a site default: {out}");
    drop(guard);
    fails_closed_without_user_namespaces(&j);
    let _ = std::fs::remove_dir_all("/var/tmp/asb-admin-allowed");
    let _ = std::fs::remove_dir_all("/var/tmp/asb-admin-denied");
}

/// Runs the launcher as the test user inside a user namespace (made by this root test)
/// whose `user.max_user_namespaces` is 0: the host's own limit needs CAP_SYS_RESOURCE, which
/// this machine's root lacks, but a namespace's limit belongs to its owner. Inside it the
/// launcher cannot create user namespaces, as on a host that switched them off.
fn run_without_userns(j: &Jail, args: &[&str]) -> Out {
    use std::ffi::CString;
    let (r, w) = nix::unistd::pipe().expect("pipe");
    let (ready_r, ready_w) = nix::unistd::pipe().expect("pipe");
    let (out_r, out_w) = nix::unistd::pipe().expect("pipe");
    let uid = j.rig.uid;
    let gid = j.rig.gid;
    let bin = CString::new(j.rig.bin.to_str().unwrap()).unwrap();
    let mut argv = vec![bin.clone()];
    argv.extend(args.iter().map(|a| CString::new(*a).unwrap()));
    let envp = [format!("HOME={}", j.rig.home.display()), "PATH=/usr/bin:/bin".into(), "USER=asbtest".into()]
        .map(|e| CString::new(e).unwrap());
    let cwd = CString::new(j.project.to_str().unwrap()).unwrap();
    // SAFETY: the child only makes async-signal-safe calls (read, open, write, setres*id,
    // chdir, dup2, execve) on data prepared before the fork, then execs or _exits.
    match unsafe { nix::unistd::fork() }.expect("fork") {
        // SAFETY: as above: raw syscalls on descriptors and strings made before the fork.
        nix::unistd::ForkResult::Child => unsafe {
            use std::os::fd::AsRawFd;
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                libc::_exit(90);
            }
            libc::close(ready_r.as_raw_fd());
            libc::write(ready_w.as_raw_fd(), b"u".as_ptr().cast(), 1);
            libc::close(ready_w.as_raw_fd());
            libc::close(w.as_raw_fd());
            let mut b = [0u8; 1];
            libc::read(r.as_raw_fd(), b.as_mut_ptr().cast(), 1);
            let f = libc::open(c"/proc/sys/user/max_user_namespaces".as_ptr(), libc::O_WRONLY);
            if f < 0 || libc::write(f, b"0".as_ptr().cast(), 1) != 1 {
                libc::_exit(91);
            }
            libc::close(f);
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(gid, gid, gid) != 0
                || libc::setresuid(uid, uid, uid) != 0
            {
                libc::_exit(92);
            }
            libc::chdir(cwd.as_ptr());
            libc::dup2(out_w.as_raw_fd(), 1);
            libc::dup2(out_w.as_raw_fd(), 2);
            let a: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).chain([std::ptr::null()]).collect();
            let e: Vec<*const libc::c_char> = envp.iter().map(|c| c.as_ptr()).chain([std::ptr::null()]).collect();
            libc::execve(bin.as_ptr(), a.as_ptr(), e.as_ptr());
            libc::_exit(93);
        },
        nix::unistd::ForkResult::Parent { child } => {
            drop(out_w);
            drop(ready_w);
            // The maps can only be written once the child is in its new namespace.
            let mut b = [0u8; 1];
            nix::unistd::read(&ready_r, &mut b).expect("child unshared");
            let maps = [("uid_map", format!("0 0 1\n{uid} {uid} 1\n")), ("gid_map", format!("0 0 1\n{gid} {gid} 1\n"))];
            for (f, m) in maps {
                std::fs::write(format!("/proc/{child}/{f}"), m).expect("write id map");
            }
            nix::unistd::write(&w, b"g").expect("go");
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::fs::File::from(out_r), &mut text).expect("read");
            let code = match nix::sys::wait::waitpid(child, None).expect("wait") {
                nix::sys::wait::WaitStatus::Exited(_, c) => c,
                other => panic!("launcher ended with {other:?}"),
            };
            Out { code, stdout: text.clone(), stderr: text, elapsed: std::time::Duration::ZERO }
        }
    }
}

/// With user namespaces unavailable: a forced userns backend refuses to start and says why
/// and how to fix it; `auto` falls back to Landlock and says so in its startup line.
fn fails_closed_without_user_namespaces(j: &Jail) {
    let out =
        run_without_userns(j, &["--backend", "userns", "--net", "isolated", "run", "--", "touch", "./ran-userns"]);
    assert_eq!(out.code, 126, "{out}");
    assert!(out.stderr.contains("user namespaces") && out.stderr.contains("fix:"), "{out}");
    assert!(!j.project.join("ran-userns").exists());
    let out = run_without_userns(j, &["--net", "isolated", "run", "--", "touch", "./ran-auto"]);
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("backend landlock"), "{out}");
    assert!(j.project.join("ran-auto").exists());
}

#[test]
fn the_nodes_admin_file_bounds_a_job_frozen_before_it() {
    // A job's policy is frozen at submission; the compute node's own admin file, as it is
    // when the job starts, bounds it again (here: a scrub floor added after submission).
    let Some(j) = Jail::new("admin-node") else { return };
    let _one = ETC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    cluster_up();
    let guard = EtcGuard::take();
    let out = j.run(
        "export NODE_ADMIN_CANARY=leaked; \
         sbatch --begin=now+4 -o node.out --wrap 'echo v=${NODE_ADMIN_CANARY:-scrubbed}'; echo rc=$?",
    );
    assert!(out.stdout.contains("Submitted batch job") && out.stdout.contains("rc=0"), "{out}");
    guard.write("admin.toml", "[env]\nscrub = [\"NODE_ADMIN_*\"]\n", 0o644);
    let path = j.project.join("node.out");
    // A job held by --begin waits for the scheduler's periodic pass (sched_interval, 60 s by
    // default): give it two.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(150);
    let mut text = String::new();
    while !text.contains("v=") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        text = std::fs::read_to_string(&path).unwrap_or_default();
    }
    assert_eq!(text.trim(), "v=scrubbed", "the node's admin scrub applies to a job frozen before it");
}

/// `process.nested_userns = false` in the admin file holds against a user who allows nested
/// sandboxes: no user namespace can be made inside, and an agent whose own sandbox needs one
/// is told the admin forbids it (and not how to turn it on). `true` there permits without
/// turning it on: the user's own choice then starts bubblewrap.
#[test]
fn the_admins_nested_userns_lock_holds_and_the_agent_is_told() {
    let Some(j) = Jail::new("admin-nested") else { return };
    let _one = ETC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let guard = EtcGuard::take();
    let policy = j.rig.home.join("t/admin-nested-policy.toml");
    std::fs::write(&policy, "[process]\nnested_userns = true\n[filesystem]\nnested_git = true\n").unwrap();
    j.give(&[&policy]);
    let j = j.project_file("codex", "#!/bin/sh\necho codex-ran\n").arg("--policy").arg(policy.to_str().unwrap());
    std::fs::set_permissions(j.project.join("codex"), std::fs::Permissions::from_mode(0o755)).unwrap();

    guard.write("admin.toml", "[process]\nnested_userns = false\n", 0o644);
    let show = j.output(&mut j.command(&["policy", "show"]));
    let line = show.stdout.lines().find(|l| l.contains("process.nested_userns")).unwrap_or_default().to_string();
    assert!(line.contains("false") && line.contains("locked by admin"), "{show}");
    let out = j.run("unshare -Ur true 2>&1; echo rc=$?; bwrap --ro-bind / / true 2>&1; echo rc=$?");
    assert!(out.stdout.contains("Operation not permitted") && !out.stdout.contains("rc=0"), "{out}");
    let out = j.output(&mut j.command(&["-q", "run", "--", "./codex", "exec", "--sandbox", "workspace-write"]));
    assert!(out.stdout.contains("codex-ran"), "{out}");
    assert!(out.stderr.contains("codex's own sandbox") && out.stderr.contains("admin forbids"), "{out}");
    assert!(!out.stderr.contains("nested_userns = true"), "no way around the admin is offered: {out}");

    guard.write("admin.toml", "[process]\nnested_userns = true\n", 0o644);
    let out = j.run("bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all true; echo rc=$?");
    assert!(out.stdout.contains("rc=0"), "permitted, and the user's choice holds: {out}");
    drop(guard);
}
